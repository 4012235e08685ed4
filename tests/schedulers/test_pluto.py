"""Our Pluto-style scheduler: textbook schedules, fusion policies, negative coefficients, tiling
and parallel marks, and every suite kernel verified and compared with its numpy reference."""
import islpy as isl
import numpy as np
import pytest

import polyopt as po
from suite_reference import check_against_reference
from polyopt import f64
from polyopt.schedulers.levels import Level
from polyopt.schedulers.pluto import pluto_levels
from polyopt.transform.schedule import tree_statistics


def bands(levels: list[Level], stmt: str) -> list[list[tuple]]:
    """Per band level, the hyperplanes of one statement as (coefficients, constant)."""
    return [[row[stmt] for row in level.rows] for level in levels if level.kind == "band"]


def test_gemm_one_3d_permutable_band_with_two_parallel_dims():
    scop = po.suite.get("gemm").kernel.scop
    sched = po.schedule(scop, "pluto", parallel=False, vectorize=False)
    found = []

    def look(n):
        if n.get_type() == isl.schedule_node_type.band and n.band_n_member() == 3:
            found.append((n.band_get_permutable(), [n.band_member_get_coincident(k) for k in range(3)]))
        return True

    sched.tree.get_root().foreach_descendant_top_down(look)
    assert found == [(True, [True, True, False])]


def test_jacobi_1d_is_time_skewed_and_fused():
    scop = po.suite.get("jacobi-1d").kernel.scop
    levels, negative, notes = pluto_levels(scop, po.dependences(scop))
    assert not negative and not notes
    assert bands(levels, "S0")[0] == [((1, 0), 0), ((2, 1), 0)]
    assert bands(levels, "S1")[0] == [((1, 0), 0), ((2, 1), 1)]


def test_seidel_2d_needs_t_t_plus_i_2t_plus_i_plus_j():
    scop = po.suite.get("seidel-2d").kernel.scop
    levels = pluto_levels(scop, po.dependences(scop)).levels
    assert bands(levels, "S0")[0] == [((1, 0, 0), 0), ((1, 1, 0), 0), ((2, 1, 1), 0)]


def test_jacobi_2d_bands_are_skewed_and_permutable():
    scop = po.suite.get("jacobi-2d").kernel.scop
    levels = pluto_levels(scop, po.dependences(scop)).levels
    band = [lvl for lvl in levels if lvl.kind == "band"][0]
    assert band.permutable and len(band.rows) == 3
    assert band.rows[0]["S0"][0] == (1, 0, 0)
    assert all(row["S0"][0][0] >= 1 for row in band.rows[1:])  # time-skewed space dimensions


@pytest.mark.parametrize("name", ["2mm", "3mm"])
def test_fusion_policies(name):
    scop = po.suite.get(name).kernel.scop
    deps = po.dependences(scop)
    cuts = {}
    for policy in ("max", "smart", "no"):
        levels = pluto_levels(scop, deps, fuse=policy).levels
        top = levels[0]
        groups = len({v[1] for v in top.rows[0].values()}) if top.kind == "scalar" else 1
        cuts[policy] = groups
        po.verify(scop, po.schedule(scop, "pluto", fuse=policy))
    # "no" distributes every strongly connected component; "max" fuses the most
    assert cuts["no"] >= cuts["smart"] >= cuts["max"]
    assert cuts["no"] == len(scop.statements)


@po.kernel
def reversed_recurrence(A: f64["N"]):
    for i in range(N - 2, -1, -1):
        A[i] = A[i + 1] * 0.5 + A[i]


def test_negative_coefficients_only_with_pluto_plus():
    scop = reversed_recurrence.scop
    deps = po.dependences(scop)
    # Pluto (non-negative) has no hyperplane: it takes the original loop (-i) and says so
    levels, negative, notes = pluto_levels(scop, deps, negative_coeffs=False)
    assert negative and bands(levels, "S0")[0][0][0] == (-1,)
    assert len(notes) == 1 and "dimension 0 of the original schedule" in notes[0] and "negative_coeffs=True" in notes[0]
    levels, negative, notes = pluto_levels(scop, deps, negative_coeffs=True)
    assert negative and bands(levels, "S0")[0][0][0] == (-1,) and not notes
    levels, negative, notes = pluto_levels(scop, deps)  # automatic: Pluto+ only where needed
    assert negative and not notes
    ck = po.compile(reversed_recurrence, algorithm="pluto")
    a, b = np.linspace(1, 2, 17), np.linspace(1, 2, 17)
    ck(a)
    po.interpret(reversed_recurrence, b)
    np.testing.assert_allclose(a, b, rtol=1e-12)


@pytest.mark.parametrize("name", ["lu", "cholesky"])
def test_triangular_kernels(name):
    entry = po.suite.get(name)
    sched = po.schedule(entry.kernel.scop, "pluto")
    po.verify(entry.kernel.scop, sched)
    assert tree_statistics(sched.tree)["permutable_depth"] >= 2
    check_against_reference(entry, po.compile(entry.kernel, algorithm="pluto", tile=4), "SMALL")


def test_wavefront_gives_parallelism_to_seidel():
    scop = po.suite.get("seidel-2d").kernel.scop
    sched = po.schedule(scop, "pluto", tile=8)
    assert "mark parallel" in sched.pretty()
    po.verify(scop, sched)  # includes the check that the parallel loop carries nothing


def test_parallel_mark_is_checked_by_the_verifier():
    scop = po.suite.get("jacobi-1d").kernel.scop
    tree = po.schedule(scop, "pluto", parallel=False).tree
    band = tree.get_root().child(0)
    assert band.get_type() == isl.schedule_node_type.band
    racy = band.insert_mark(isl.Id("parallel")).get_schedule()  # time loop: not parallel
    with pytest.raises(po.IllegalScheduleError, match="marked parallel"):
        po.verify(scop, racy)


@pytest.mark.parametrize("name", ["atax", "doitgen"])
def test_parametric_shifts_reach_isl_tilable_depth(name):
    """isl fuses atax's and doitgen's loops at parametric offsets (S3 at N + j); with
    ``param_shifts=True`` our Pluto does too, and the result is legal and correct."""
    entry = po.suite.get(name)
    plain = po.schedule(entry.kernel.scop, "pluto", parallel=False)
    shifted = po.schedule(entry.kernel.scop, "pluto", param_shifts=True, parallel=False)
    isl_depth = tree_statistics(po.schedule(entry.kernel.scop, "isl").tree)["permutable_depth"]
    assert tree_statistics(plain.tree)["permutable_depth"] < isl_depth
    assert tree_statistics(shifted.tree)["permutable_depth"] >= isl_depth
    po.verify(entry.kernel.scop, shifted)
    check_against_reference(entry, po.compile(entry.kernel, algorithm="pluto", param_shifts=True, tile=4), "SMALL")


def test_options_are_checked():
    scop = po.suite.get("gemm").kernel.scop
    with pytest.raises(po.ScheduleError, match="unknown option"):
        po.schedule(scop, "pluto", tiles=32)
    with pytest.raises(po.ScheduleError, match="fusion policy"):
        po.schedule(scop, "pluto", fuse="sometimes")


def test_vectorize_puts_stride_one_parallel_loop_innermost():
    ck = po.compile(po.suite.get("gemm").kernel, algorithm="pluto", tile=16)
    inner = [line for line in ck.c_source.splitlines() if "/* S1 */" in line][0]
    loops = [line for line in ck.c_source.splitlines() if line.strip().startswith("for")]
    innermost = loops[-1].split("long ")[1].split(" ")[0]
    target = inner.split("=")[0]
    assert innermost in target[target.rindex("["):]  # C[..][.. innermost]: stride-1 store


# every fusion policy, with and without tiling and parallel marks (kept to 4 variants for CI time)
VARIANTS = [dict(fuse="smart"), dict(fuse="max", tile=8, tile2=2), dict(fuse="no", tile=4, parallel=False),
            dict(fuse="smart", tile=8, vectorize=False)]


@pytest.mark.parametrize("options", VARIANTS, ids=lambda o: "-".join(f"{k}{v}" for k, v in o.items()))
@pytest.mark.parametrize("name", po.suite.names())
def test_suite_kernel(name, options):
    entry = po.suite.get(name)
    compiled = po.compile(entry.kernel, algorithm="pluto", **options)
    po.verify(entry.kernel.scop, compiled.schedule)
    check_against_reference(entry, compiled)


def check_schedule_and_code(kernel, arrays, **options):
    """Schedule with pluto and ``options``, verify, compile, and compare with the interpreter;
    the Schedule, for checks on its trace."""
    sched = po.schedule(kernel.scop, "pluto", **options)
    po.verify(kernel.scop, sched)
    expected = [a.copy() for a in arrays]
    po.interpret(kernel, *expected)
    got = [a.copy() for a in arrays]
    po.compile(kernel, algorithm="pluto", **options)(*got)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12)
    return sched


# Random-nest finding (issue 19): the first band takes (S0: j, S1: i); S1 then needs a hyperplane
# with a j term, which no hyperplane of the band or of the next one has while WAR S1 -> S0
# (B[i, i] read, B[j, k] written at i + 1) is unsatisfied, and the dependences form one SCC.
# Eager Pluto (every statement independent at once) refused it with every option.
@po.kernel
def triangular_scc(B: f64["2 * N + 2", "2 * N + 2"]):
    for i in range(N):
        for j in range(N):
            for k in range(i + 1):
                B[j, k] = 1.0
            B[i, i + j + 1] = B[i, i]


@pytest.mark.parametrize("negative", [None, True, False])
def test_lazy_independence_where_no_hyperplane_serves_every_statement(negative):
    B = np.random.default_rng(3).random((12, 12))
    sched = check_schedule_and_code(triangular_scc, [B], negative_coeffs=negative)
    assert any("lazy search" in line for line in sched.notes)
    assert not any("original schedule" in line for line in sched.notes)


# Random-nest finding (issue 19): a reversed loop around a stride-2 loop. isl coalesces the RAW
# S1 -> S0 relation's 2i = N - 2 into N - 5 <= 2i <= N - 2 plus congruences on i and N; the
# rational projection of the congruences kept the interval, on which no hyperplane is legal.
@po.kernel
def reversed_strided(A: f64["N + 3", "N + 3"]):
    for i in range(N - 1, -1, -1):
        for j in range(2, N - 1, 2):
            A[1, i + 2] = A[N - j, j]
        A[i, i + 2] = A[2, i]


@pytest.mark.parametrize("negative", [None, True])
def test_stride_congruences_keep_the_equalities_they_imply(negative):
    A = np.random.default_rng(4).random((13, 13))
    sched = check_schedule_and_code(reversed_strided, [A], negative_coeffs=negative)
    assert sched.notes == () and sched.options == {"negative_coeffs": negative}  # no fallback needed


def test_original_dimension_fallback_is_recorded_in_the_trace():
    """Pluto without negative coefficients has no hyperplane for a descending recurrence: it
    takes the original loop, legal by construction, and says so."""
    a = np.linspace(1, 2, 17)
    sched = check_schedule_and_code(reversed_recurrence, [a], negative_coeffs=False)
    assert len(sched.notes) == 1 and "dimension 0 of the original schedule" in sched.notes[0]


def test_tile_sizes_longer_than_every_band_are_refused():
    gemm = po.suite.get("gemm").kernel
    with pytest.raises(po.ScheduleError, match="at most 3"):
        po.schedule(gemm, "pluto", tile=(8, 8, 8, 8, 8))
    assert "sizes=[8, 8, 8]" in po.schedule(gemm, "pluto", tile=(8, 8, 8)).trace.as_python()
