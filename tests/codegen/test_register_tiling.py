"""Register tiling (unroll-and-jam of point loops), intra-tile order, and tile sizes from the
caches: results against the numpy references (sizes not divisible by the tiles included), the
verifier, the shape of the loops and of the optimized IR, and refusals of bad options."""
import re

import islpy as isl
import numpy as np
import pytest

import polyopt as po
from suite_reference import check_against_reference
from polyopt import f64
from polyopt.schedulers.postpass import vectorize_order
from polyopt.schedulers.tilesize import WAVEFRONT_TILE_CAP
from polyopt.transform import tree as transform
from polyopt.schedulers.tilesize import band_references, band_tile_sizes, cache_bytes, cache_ways

KERNELS = ("gemm", "2mm", "syrk", "trmm", "jacobi-2d", "fdtd-2d", "lu")


@pytest.mark.parametrize("registers", ["auto", "row"])
@pytest.mark.parametrize("name", po.suite.names())
def test_every_suite_kernel_with_register_tiles_matches_reference(name, registers):
    # the autotuner tries both on every kernel; MINI leaves partial register tiles everywhere
    compiled = po.compile(po.suite.get(name).kernel, algorithm="pluto", register_tile=registers)
    po.verify(compiled.scop, compiled.schedule)
    check_against_reference(name, compiled, "MINI")


def test_a_sum_along_a_transposition_is_register_tiled_along_the_input_rows():
    """'ijk->kj': k walks the input along its rows and the output down a column; the output's
    elements stay put along the sum over i (kept in registers), so k is the vector member even
    though it is not the band's last, and i becomes the innermost loop. Rows of j would share
    no vector load (each reads its own input row): the tile keeps one row."""
    kernel = po.einsum_kernel("ijk->kj", (2, 3, 4), register_tile=(2, 8))
    assert "+= 8 (parallel)" in kernel.loop_ast  # the vector member's tiles, shared out
    assert "+= 2" not in kernel.loop_ast
    x = np.random.default_rng(0).random((5, 11, 19))
    out = np.empty((19, 11))
    kernel(x, out)
    np.testing.assert_allclose(out, np.einsum("ijk->kj", x), rtol=1e-12)


@pytest.mark.parametrize("name", KERNELS)
def test_cache_and_register_tiled_kernels_match_reference(name):
    # SMALL sizes (e.g. gemm 60x70x80) leave partial cache and register tiles at the edges
    compiled = po.compile(po.suite.get(name).kernel, algorithm="pluto", tile="auto", register_tile="auto")
    po.verify(compiled.scop, compiled.schedule)
    check_against_reference(name, compiled, "SMALL")


@pytest.mark.parametrize("name", ("gemm", "2mm", "covariance"))
def test_multi_row_register_tiles_in_odd_cache_tiles_match_reference(name):
    # rows x columns register tiles that do not divide the cache tiles, which do not divide MINI
    compiled = po.compile(po.suite.get(name).kernel, algorithm="pluto", tile=(12, 7, 24), register_tile=(3, 8))
    check_against_reference(name, compiled, "MINI")


def test_gemm_register_tile_is_unrolled_with_accumulators_in_registers():
    compiled = po.compile(po.suite.get("gemm").kernel, algorithm="pluto", tile="auto", register_tile="auto")
    rows, columns = transform.register_tile_sizes(compiled.scop, "auto")
    assert rows == 4 and columns >= 4
    # the whole tiles: one k loop whose body is the unrolled tile of `rows x columns` instances
    body = re.search(r"for (c\d+) = [^\n]*\n((?:\s+S1\([^\n]*\n)+)", compiled.loop_ast)
    assert body is not None and body.group(2).count("S1(") == rows * columns
    # in the optimized IR, some loop keeps C in vector phis: no store in that loop's block (the
    # emitter promotes the elements of all rows; LLVM alone would keep only one row)
    blocks = compiled.optimized_ir.split("\n\n")
    register_loops = [b for b in blocks if re.search(r"phi <\d+ x double>", b) and "fmul" in b
                      and not re.search(r"\bstore\b", b)]
    assert register_loops, "no loop keeps its accumulators in registers"


def test_register_tile_order_and_flags():
    scop = po.suite.get("gemm").kernel.scop
    sched = po.schedule(scop, "pluto", register_tile=(2, 8), parallel=False)
    band = _bands(sched.tree)[-1]
    members = [str(band.band_get_partial_schedule().get_at(k)) for k in range(band.band_n_member())]
    # (j - j mod 8, i - i mod 2, k, i mod 2, j mod 8): parallel tile loops outside k, offsets inside
    assert "mod 8" in members[0] and "mod 2" in members[1] and "[(k)]" in members[2]
    assert "mod 2" in members[3] and "mod 8" in members[4]
    assert [band.band_member_get_coincident(k) for k in range(5)] == [1, 1, 0, 1, 1]
    po.verify(scop, sched)


def test_rows_only_register_tile_keeps_the_vector_loop_whole():
    scop = po.suite.get("gemm").kernel.scop
    sched = po.schedule(scop, "pluto", register_tile=(4, 1), parallel=False)
    band = _bands(sched.tree)[-1]
    assert band.band_n_member() == 4  # (i - i mod 4, j, k, i mod 4)
    check_against_reference("gemm", po.compile(po.suite.get("gemm").kernel, algorithm="pluto",
                                               register_tile=(4, 1)), "MINI")


def test_register_tiling_skips_bands_whose_vector_loop_would_gather():
    # syrk's j walks C[i, j] along a row but A[j, k] down a column
    scop = po.suite.get("syrk").kernel.scop
    assert str(po.schedule(scop, "pluto", register_tile="auto").tree) == str(po.schedule(scop, "pluto", model=False).tree)


def test_register_tiling_leaves_bands_without_reuse_alone():
    # gemm's C *= beta nest has no sequential loop to reuse registers along: unchanged
    scop = po.suite.get("gemm").kernel.scop
    plain = po.schedule(scop, "pluto", model=False)
    tiled = po.schedule(scop, "pluto", register_tile="auto")
    assert str(_bands(plain.tree)[0].band_get_partial_schedule()) == \
        str(_bands(tiled.tree)[0].band_get_partial_schedule())


@pytest.mark.parametrize("bad", [(0, 8), (1, 2, 3), "big", 4, (1.5, 8), (True, 8)])
def test_bad_register_tile_sizes_are_refused(bad):
    with pytest.raises(po.ScheduleError, match="register_tile"):
        po.schedule(po.suite.get("gemm").kernel.scop, "pluto", register_tile=bad)


@po.kernel
def transpose_scale(A: f64["N", "M"], B: f64["N", "M"]):
    for i in range(M):
        for j in range(N):
            A[j, i] = 2.0 * B[j, i]


def test_vectorizable_innermost_reorders_point_band_of_a_tiled_band():
    scop = transpose_scale.scop
    sched = po.schedule(scop, "pluto", tile=8, vectorize=False, parallel=False)
    tile_band, point_band = _bands(sched.tree)
    assert "(j)" in str(point_band.band_get_partial_schedule().get_at(1))  # j innermost: stride M
    reordered = vectorize_order(sched).tree
    new_tile, new_point = _bands(reordered)
    assert "(i) mod 8" in str(new_point.band_get_partial_schedule().get_at(1))  # stride 1 inside
    assert str(new_tile.band_get_partial_schedule()) == str(tile_band.band_get_partial_schedule())
    po.verify(scop, reordered)
    a, b = np.zeros((13, 11)), np.arange(143.0).reshape(13, 11)
    po.compile(transpose_scale, algorithm="pluto", tile=8)(a, b)
    np.testing.assert_array_equal(a, 2.0 * b)


def test_auto_tile_sizes_fit_the_caches_and_whole_register_tiles():
    scop = po.suite.get("gemm").kernel.scop
    sched = po.schedule(scop, "pluto", parallel=False)
    band = _bands(sched.tree)[-1]  # (i, k, j) of the update statement
    partial = band.band_get_partial_schedule()
    sizes = band_tile_sizes(partial, scop, multiple_of=(1, 1, 32))
    assert sizes[2] % 32 == 0
    ti, tk, tj = sizes
    assert 8 * (ti * tk + tk * tj + ti * tj) <= cache_bytes(2) / 2  # A, B, C tiles in L2
    assert 8 * (tk + tk * tj + tj) <= cache_bytes(1) / 2  # one i row of them in L1
    assert len(band_references(partial, scop)) == 3
    tiled = po.schedule(scop, "pluto", tile="auto", register_tile="auto", parallel=False)
    outer = str(_bands(tiled.tree)[2].band_get_partial_schedule())  # S1 tile loops
    assert all(f"mod {s})" in outer for s in sizes)


def test_conflict_free_tiles_keep_reused_rows_within_the_l1_ways():
    """gemm's B tile is reused across i: with conflict_free it has at most L1-ways rows (its
    rows may all map to the same cache sets when NJ is a multiple of 512), and a 512^3 product
    through such tiles still matches numpy."""
    scop = po.suite.get("gemm").kernel.scop
    band = _bands(po.schedule(scop, "pluto", parallel=False).tree)[-1]
    partial = band.band_get_partial_schedule()
    plain = band_tile_sizes(partial, scop, multiple_of=(1, 1, 32))
    ti, tk, tj = band_tile_sizes(partial, scop, multiple_of=(1, 1, 32), conflict_free=True)
    assert plain[1] > cache_ways(1) >= tk and tj % 32 == 0
    assert 8 * (tk + tk * tj + tj) <= cache_bytes(1) / 2
    kernel = po.compile(scop, tile="auto", conflict_free_tiles=True, register_tile="auto")
    n = 512
    args = po.suite.get("gemm").inputs({"NI": n, "NJ": n, "NK": n})
    expected = 1.5 * args["A"] @ args["B"] + 1.2 * args["C"]
    kernel(**{**args, "alpha": 1.5, "beta": 1.2})
    np.testing.assert_allclose(args["C"], expected, rtol=1e-12)


def test_conflict_free_tiles_read_transposed_rows_in_runs():
    """'ijk->kj' sums a transposition: no tile size changes its footprint per iteration, and
    conflict-free tiles walk the input's rows in runs of STREAM_RUN_BYTES (the outermost point
    loop), which the hardware prefetcher follows."""
    from polyopt.schedulers.tilesize import CANDIDATE_SIZES, STREAM_RUN_BYTES
    kernel = po.einsum_kernel("ijk->kj", (2, 3, 4))
    band = _bands(po.schedule(kernel.scop, "pluto", parallel=False).tree)[-1]
    partial = band.band_get_partial_schedule()
    sizes = band_tile_sizes(partial, kernel.scop, conflict_free=True)
    assert sizes[0] * 8 == STREAM_RUN_BYTES  # member 0 is k, the input's last subscript
    assert band_tile_sizes(partial, kernel.scop)[0] == CANDIDATE_SIZES[0]  # without: the smallest


def test_auto_tiles_of_wavefront_bands_are_uniform_and_small():
    # jacobi-1d's skewed band has no parallel member: equal sizes, capped (isl's AST time)
    scop = po.suite.get("jacobi-1d").kernel.scop
    tiled = po.schedule(scop, "pluto", tile="auto")
    point = str(_bands(tiled.tree)[-1].band_get_partial_schedule())
    sizes = {int(m) for m in re.findall(r"mod (\d+)\)", point)}
    assert len(sizes) == 1 and sizes.pop() <= WAVEFRONT_TILE_CAP
    check_against_reference("jacobi-1d", po.compile(po.suite.get("jacobi-1d").kernel, algorithm="pluto",
                                                    tile="auto"), "SMALL")


def test_tile_option_overrides_auto_and_bad_sizes_are_refused():
    scop = po.suite.get("gemm").kernel.scop
    sched = po.schedule(scop, "pluto", tile=(16, 8, 24), parallel=False)
    assert "mod 24" in str(_bands(sched.tree)[2].band_get_partial_schedule())
    assert str(po.schedule(scop, "pluto", tile=True).tree) == str(po.schedule(scop, "pluto", tile="auto").tree)
    for bad in ("big", [], (8, 2.5), 0):
        with pytest.raises(po.ScheduleError, match="tile sizes"):
            po.schedule(scop, "pluto", tile=bad)
    with pytest.raises(po.ScheduleError, match="sizes must be an int"):
        sched.tile(*sched.loops("S1")[:3], sizes="auto")  # "auto" is the scheduler's option


def _bands(tree: isl.Schedule) -> list[isl.ScheduleNode]:
    """The band nodes of ``tree``, top-down (depth first)."""
    found = []

    def visit(node):
        if node.get_type() == isl.schedule_node_type.band:
            found.append(node)
        for k in range(node.n_children()):
            visit(node.child(k))

    visit(tree.get_root())
    return found


def test_promotion_needs_elements_that_provably_differ():
    """The emitter keeps a loop's invariant targets in registers only where no other access of
    the loop can reach them: rows i and i + 1 differ, C[i, k] and C[k, i] might not."""
    from polyopt.analysis import expr as E
    from polyopt.codegen.promotion import elements_to_promote
    from polyopt.types import i64

    def var(name):
        return E.Var(name, "iter", i64)

    def plus(e, k):
        return E.Binary("+", e, E.Const(k, i64), i64)

    def c(*indices):
        return E.Access("C", tuple(indices), f64)

    rows = [c(var("i"), var("k")), c(plus(var("i"), 1), var("k"))]
    assert elements_to_promote(rows, rows, {"j"}) == rows
    crossed = [c(var("i"), var("k")), c(var("k"), var("i"))]
    assert elements_to_promote(crossed, crossed, {"j"}) == []
    moving = c(var("j"), var("k"))  # another access of C that moves with the loop
    assert elements_to_promote(rows, [*rows, moving], {"j"}) == []
    assert elements_to_promote([moving], [moving], {"j"}) == []


def test_register_tile_rows_share_the_vector_loads():
    """Batched matmul: the rows of a register tile come from i, whose rows all read the same
    B[b, j, k:k+w] vectors, not from the outer parallel batch member b, which moves every
    operand (rows over batches load one vector per FMA)."""
    scop = po.einsum_kernel("bij,bjk->bik", (2, 3, 4), (2, 4, 5)).scop
    sched = po.schedule(scop, "pluto", register_tile=(2, 8), parallel=False)
    members = [str(_bands(sched.tree)[-1].band_get_partial_schedule().get_at(k))
               for k in range(_bands(sched.tree)[-1].band_n_member())]
    assert any("(i_i) mod 2" in m for m in members) and not any("(i_b) mod 2" in m for m in members)
    po.verify(scop, sched)
    a, b = np.random.default_rng(1).random((3, 9, 11)), np.random.default_rng(2).random((3, 11, 37))
    out = np.zeros((3, 9, 37))
    po.einsum_kernel("bij,bjk->bik", a, b, register_tile=(2, 8))(a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-12)
