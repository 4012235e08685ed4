"""The schedule primitives (polyopt/transform/primitives.py), one concrete before/after test each:
the loop names after the step, one structural fact of the tree (its ``pretty()`` text) and the
compiled schedule computing what the interpreter computes on random data; then the refusals, one
test each (a request that cannot be carried out raises ScheduleError, an illegal result raises
IllegalScheduleError naming the step and a witness; nothing is silently skipped)."""
from __future__ import annotations

import numpy as np
import pytest

import polyopt as po
from polyopt import f64
from polyopt.errors import RacyParallelLoopError
from polyopt.islutil import tuple_names
from polyopt.transform import nodes
from polyopt.transform.primitives import tree_spec

# ----- kernels --------------------------------------------------------------------------------

#: The size parameter the kernels name: the DSL reads it from their source, this binding only
#: tells pyflakes the name exists.
N = "N"


@po.kernel
def mm(A: f64["N", "N"], B: f64["N", "N"], C: f64["N", "N"]):
    for i in range(N):
        for j in range(N):
            for k in range(N):
                C[i, j] += A[i, k] * B[k, j]


@po.kernel
def scale(A: f64["N", "N"], B: f64["N", "N"]):
    for i in range(N):
        for j in range(N):
            B[i, j] = 2.0 * A[i, j] + 1.0


@po.kernel
def independent(A: f64["N", "N"], B: f64["N", "N"], X: f64["N", "N"]):
    """Two statements in one nest that share no array they write."""
    for i in range(N):
        for j in range(N):
            A[i, j] = X[i, j] * 2.0
            B[i, j] = X[j, i] + 1.0


@po.kernel
def producer_consumer(A: f64["N", "N"], B: f64["N", "N"], X: f64["N", "N"]):
    """S1 reads what S0 wrote in the same iteration."""
    for i in range(N):
        for j in range(N):
            A[i, j] = X[i, j] * 2.0
            B[i, j] = A[i, j] + X[j, i]


@po.kernel
def nests(A: f64["N", "N"], B: f64["N", "N"], X: f64["N", "N"]):
    for i in range(N):
        for j in range(N):
            A[i, j] = X[i, j] * 2.0
    for i in range(N):
        for j in range(N):
            B[i, j] = A[i, j] + 1.0


@po.kernel
def three_nests(A: f64["N"], B: f64["N"], C: f64["N"], X: f64["N"]):
    for i in range(N):
        A[i] = X[i] * 2.0
    for i in range(N):
        B[i] = A[i] + 1.0
    for i in range(N):
        C[i] = B[i] * A[i]


@po.kernel
def seidel(A: f64["N"]):
    """An in-place 1-d stencil under a time loop: (t, i) is not permutable as written."""
    for t in range(N):
        for i in range(1, N - 1):
            A[i] = (A[i - 1] + A[i] + A[i + 1]) * 0.3


@po.kernel
def short_inner(A: f64["N", 8], B: f64["N"]):
    """An inner loop of 8 iterations: unrolls completely without a factor."""
    for i in range(N):
        for k in range(8):
            B[i] += A[i, k] * 0.5


# ----- helpers --------------------------------------------------------------------------------

def random_arguments(kernel, n: int, seed: int = 0) -> dict:
    """Random float arrays of ``kernel``'s (non-local) arrays at parameter value ``n``."""
    rng = np.random.default_rng(seed)
    scop = kernel.scop
    values = {p: n for p in scop.params}
    args = {}
    for name, array in scop.arrays.items():
        if array.local:
            continue
        shape = tuple(int(eval(extent, {"max": max, "min": min}, dict(values))) for extent in array.shape)
        args[name] = rng.random(shape)
    return args


def assert_computes_like_interpreter(kernel, schedule, sizes=(1, 5, 11), **compile_options):
    """``po.compile(kernel, schedule=schedule)`` gives the interpreter's arrays at each size."""
    compiled = po.compile(kernel, schedule=schedule, **compile_options)
    for n in sizes:
        start = random_arguments(kernel, n, seed=n)
        expected = {k: v.copy() for k, v in start.items()}
        po.interpret(kernel, **expected)
        got = {k: v.copy() for k, v in start.items()}
        compiled(**got)
        for name in expected:
            np.testing.assert_allclose(got[name], expected[name], rtol=1e-12, atol=1e-12,
                                       err_msg=f"{kernel!r} array {name}, N={n}\n{schedule.trace.as_python()}")
    return compiled


def names(schedule, statement=None) -> list[str]:
    return [loop.name for loop in schedule.loops(statement)]


def original(kernel):
    return po.schedule(kernel, "original")


# ----- one test per primitive ------------------------------------------------------------------

def test_original_schedule_names_the_loops_as_written():
    s = original(mm)
    assert names(s) == ["i", "j", "k"]
    assert s.loop("j") == s.loops("S0")[1]
    assert len(s.trace) == 0
    assert_computes_like_interpreter(mm, s)


def test_tile_one_level():
    s = original(mm).tile("i", "j", "k", sizes=[4, 8, 2])
    assert names(s) == ["i_0", "j_0", "k_0", "i_1", "j_1", "k_1"]
    text = s.pretty()
    assert "band (i_0, j_0, k_0)" in text and "band (i_1, j_1, k_1)" in text
    assert "i_0 = [N] -> { S0[i, j, k] -> [(i - (i) mod 4)] }" in text
    assert "j_1 = [N] -> { S0[i, j, k] -> [((j) mod 8)] }" in text
    assert s.trace.as_python() == "s = s.tile('i', 'j', 'k', sizes=[4, 8, 2])"
    assert_computes_like_interpreter(mm, s)


def test_tile_multi_level():
    s = original(mm).tile("i", "j", sizes=[[8, 8], [2, 4]])
    assert names(s) == ["i_0", "j_0", "i_1", "j_1", "i_2", "j_2", "k"]
    text = s.pretty()
    assert "i_1 = [N] -> { S0[i, j, k] -> [(-1*((i) mod 2) + (i) mod 8)] }" in text
    assert "j_2 = [N] -> { S0[i, j, k] -> [((j) mod 4)] }" in text
    assert_computes_like_interpreter(mm, s)


def test_tile_of_loops_handles():
    s = original(mm)
    i, j, _ = s.loops("S0")
    assert names(s.tile(i, j, sizes=3)) == ["i_0", "j_0", "i_1", "j_1", "k"]


def test_split():
    s = original(mm).split("k", factor=4)
    assert names(s) == ["i", "j", "k_0", "k_1"]
    assert "k_1 = [N] -> { S0[i, j, k] -> [((k) mod 4)] }" in s.pretty()
    assert_computes_like_interpreter(mm, s)


def test_interchange():
    s = original(mm).interchange("i", "j")
    assert names(s) == ["j", "i", "k"]
    assert s.pretty().splitlines()[1] == "  j = [N] -> { S0[i, j, k] -> [(j)] }"
    assert_computes_like_interpreter(mm, s)


def test_interchange_within_one_statement():
    s = original(independent).interchange("i", "j", within=["S1"])
    assert names(s) == ["i", "j"]  # the loops keep their names; S1's members swap
    text = s.pretty()
    assert "i = [N] -> { S0[i, j] -> [(i)]; S1[i, j] -> [(j)] }" in text
    assert "j = [N] -> { S0[i, j] -> [(j)]; S1[i, j] -> [(i)] }" in text
    assert_computes_like_interpreter(independent, s)


def test_permute():
    s = original(mm).permute("k", "i")
    assert names(s) == ["k", "j", "i"]
    assert s.pretty().splitlines()[1] == "  k = [N] -> { S0[i, j, k] -> [(k)] }"
    assert_computes_like_interpreter(mm, s)


def test_skew():
    s = original(seidel).skew("t", "i")
    assert names(s) == ["t", "i"]
    assert "i = [N] -> { S0[t, i] -> [(t + i)] }" in s.pretty()
    assert_computes_like_interpreter(seidel, s)


def test_skew_within_one_statement():
    s = original(independent).skew("i", "j", factor=2, within=["S1"])
    assert names(s) == ["i", "j"]
    assert "j = [N] -> { S0[i, j] -> [(j)]; S1[i, j] -> [(2i + j)] }" in s.pretty()
    assert_computes_like_interpreter(independent, s)


def test_shift_within_one_statement():
    s = original(producer_consumer).shift("j", offset=3, within=["S1"])
    assert names(s) == ["i", "j"]
    assert "j = [N] -> { S0[i, j] -> [(j)]; S1[i, j] -> [(3 + j)] }" in s.pretty()
    assert_computes_like_interpreter(producer_consumer, s)


def test_shift_of_every_statement():
    s = original(scale).shift("i", offset=-2)
    assert "i = [N] -> { S0[i, j] -> [(-2 + i)] }" in s.pretty()
    assert_computes_like_interpreter(scale, s)


def test_reverse():
    s = original(scale).reverse("i")
    assert names(s) == ["i", "j"]
    assert "i = [N] -> { S0[i, j] -> [(-i)] }" in s.pretty()
    assert_computes_like_interpreter(scale, s)


def test_reverse_within_one_statement():
    s = original(independent).reverse("j", within=["S0"])
    assert "j = [N] -> { S0[i, j] -> [(-j)]; S1[i, j] -> [(j)] }" in s.pretty()
    assert_computes_like_interpreter(independent, s)


def test_fuse_depth_two():
    s = original(nests)
    assert names(s) == ["i", "j", "i@S1", "j@S1"]
    fused = s.fuse("i", "i@S1", depth=2)
    assert names(fused) == ["i", "j"]
    assert names(fused, "S1") == ["i", "j"]
    lines = fused.pretty().splitlines()
    assert lines[0] == "band (i)  [permutable; coincident: i]"
    assert "i = [N] -> { S0[i, j] -> [(i)]; S1[i, j] -> [(i)] }" in lines[1]
    assert lines[2].strip().startswith("band (j)") and lines[4].strip() == "sequence"
    assert fused.trace.as_python() == "s = s.fuse('i', 'i@S1', depth=2)"
    assert_computes_like_interpreter(nests, fused)


def test_fuse_depth_one_keeps_inner_loops_apart():
    fused = original(nests).fuse("i", "i@S1")
    assert names(fused) == ["i", "j", "j@S1"]
    assert fused.pretty().splitlines()[0].startswith("band (i)")
    assert_computes_like_interpreter(nests, fused)


def test_distribute_with_explicit_groups():
    s = original(producer_consumer).distribute("i", groups=[["S0"], ["S1"]])
    assert names(s, "S0")[0] == "i" and names(s, "S1")[0] == "i@S1"
    lines = s.pretty().splitlines()
    assert lines[0] == "sequence"
    assert [line.strip() for line in lines if line.strip().startswith("filter")] == [
        "filter [N] -> { S0[i, j] }", "filter [N] -> { S1[i, j] }"]
    assert_computes_like_interpreter(producer_consumer, s)


def test_distribute_default_groups_then_fuse_back():
    s = original(producer_consumer)
    apart = s.distribute("i")
    assert names(apart, "S1")[0] == "i@S1"
    together = apart.fuse("i", "i@S1")
    assert together.map.is_equal(s.distribute("i").fuse("i", "i@S1").map)
    assert_computes_like_interpreter(producer_consumer, together)


def test_distribute_gives_every_copied_loop_a_fresh_name():
    s = original(producer_consumer).distribute("i", groups=[["S0"], ["S1"]])
    every = names(s)
    assert len(every) == len(set(every)), every
    inner = s.loops("S1")[1]
    assert inner.statements == ("S1",)
    assert "S1[i, j] -> [(-j)]" in s.reverse(inner).pretty()


def test_wavefront_then_parallel():
    s = original(seidel).skew("t", "i").wavefront("t", "i")
    assert names(s) == ["t", "i"]
    text = s.pretty()
    assert "t = [N] -> { S0[t, i] -> [(2t + i)] }" in text and "coincident: i" in text
    s = s.parallel("i")
    assert "mark parallel" in s.pretty()
    assert_computes_like_interpreter(seidel, s, num_threads=2)


def test_parallel():
    s = original(scale).parallel("i")
    assert names(s) == ["i", "j"]
    lines = s.pretty().splitlines()
    assert lines[0] == "mark parallel" and lines[1].strip().startswith("band (i)")
    compiled = assert_computes_like_interpreter(scale, s, num_threads=2)
    assert "omp" in compiled.c_source.lower() or "parallel" in compiled.c_source.lower()


def test_parallel_of_an_inner_member_splits_the_band():
    s = original(mm).tile("i", "j", sizes=4).parallel("j_0")
    lines = [line.strip() for line in s.pretty().splitlines()]
    assert lines[0].startswith("band (i_0)") and lines[2] == "mark parallel"
    assert lines[3].startswith("band (j_0)")
    assert_computes_like_interpreter(mm, s, num_threads=2)


def test_vectorize_moves_the_loop_innermost():
    s = original(scale).tile("i", "j", sizes=4).vectorize("i_1")
    assert names(s) == ["i_0", "j_0", "j_1", "i_1"]
    assert s.pretty().splitlines()[-1].strip() == "i_1 = [N] -> { S0[i, j] -> [((i) mod 4)] }"
    assert_computes_like_interpreter(scale, s)


def test_vectorize_of_the_innermost_loop_keeps_the_tree():
    s = original(scale)
    v = s.vectorize("j")
    assert names(v) == ["i", "j"] and str(v.tree) == str(s.tree) and len(v.trace) == 1


def test_unroll_with_factor():
    s = original(short_inner).unroll("k", factor=4)
    assert names(s) == ["i", "k_0", "k_1"]
    text = s.pretty()
    assert "band (k_1)  [permutable; unrolled: k_1]" in text  # flags recomputed: the original had none
    assert "k_1 = [N] -> { S0[i, k] -> [((k) mod 4)] }" in text
    assert_computes_like_interpreter(short_inner, s)


def test_unroll_with_factor_of_a_parametric_loop():
    s = original(mm).unroll("k", factor=4)
    assert names(s) == ["i", "j", "k_0", "k_1"]
    assert "unrolled: k_1" in s.pretty()
    assert_computes_like_interpreter(mm, s, sizes=(1, 6, 9))


def test_unroll_completely():
    s = original(short_inner).unroll("k")
    assert names(s) == ["i", "k"]
    assert "unrolled: k" in s.pretty()
    compiled = assert_computes_like_interpreter(short_inner, s)
    plain = po.compile(short_inner, schedule=original(short_inner))
    assert compiled.c_source != plain.c_source


def test_register_tile_on_gemm():
    s = original(mm).tile("i", "j", "k", sizes=8).register_tile("i_1", "j_1", sizes=[2, 4])
    assert names(s) == ["i_0", "j_0", "k_0", "j_1_0", "i_1_0", "k_1", "i_1_1", "j_1_1"]
    text = s.pretty()
    assert "register tile" in text
    assert "j_1_1 = [N] -> { S0[i, j, k] -> [((j) mod 4)] }" in text
    assert_computes_like_interpreter(mm, s, sizes=(1, 7, 16, 19))


def test_affine_schedule_sets_a_whole_tree():
    pluto = po.schedule(mm, "pluto")
    s = original(mm).affine_schedule(tree=tree_spec(pluto.root))
    assert s.map.is_equal(pluto.map)
    assert [step.primitive for step in s.trace] == ["affine_schedule"]
    assert_computes_like_interpreter(mm, s)


def test_primitives_do_not_change_the_schedule_they_are_called_on():
    s = original(mm)
    before = str(s.tree)
    s.tile("i", "j", sizes=4).parallel("i_0")
    assert str(s.tree) == before and len(s.trace) == 0


# ----- refusals --------------------------------------------------------------------------------

def test_unknown_loop_name():
    with pytest.raises(po.ScheduleError, match=r"no loop 'zz' in this schedule of mm \(loops: i, j, k\)"):
        original(mm).tile("i", "zz", sizes=4)


def test_unknown_loop_name_names_the_step_that_replaced_it():
    s = original(mm).tile("i", "j", sizes=8)
    with pytest.raises(po.ScheduleError, match=r"step tile\('i', 'j', sizes=8\) replaced it"):
        s.reverse("i")


def test_handle_of_another_kernel():
    foreign = original(scale).loop("i")
    with pytest.raises(po.ScheduleError, match="belongs to another kernel"):
        original(mm).tile(foreign, sizes=4)


def test_tile_sizes_count_differs_from_loops():
    with pytest.raises(po.ScheduleError, match=r"1 sizes for 2 loop\(s\)"):
        original(mm).tile("i", "j", sizes=[8])


@pytest.mark.parametrize("sizes", [0, -2, [8, 0], [[8, 8], [4, -1]]], ids=str)
def test_tile_sizes_must_be_positive(sizes):
    with pytest.raises(po.ScheduleError, match="sizes must be positive"):
        original(mm).tile("i", "j", sizes=sizes)


def test_split_factor_must_be_positive():
    with pytest.raises(po.ScheduleError, match="sizes must be positive"):
        original(mm).split("k", factor=0)


def test_tile_of_loops_of_unrelated_bands():
    with pytest.raises(po.ScheduleError, match="not on one path of nested bands"):
        original(nests).tile("i", "i@S1", sizes=4)


def test_tile_of_non_consecutive_loops():
    with pytest.raises(po.ScheduleError, match="not consecutive loops of one band"):
        original(mm).tile("i", "k", sizes=4)


def test_tile_of_a_non_permutable_band_is_illegal():
    with pytest.raises(po.IllegalScheduleError) as caught:
        original(seidel).tile("t", "i", sizes=4)
    message = str(caught.value)
    assert message.startswith("tile('t', 'i', sizes=4): illegal schedule:")
    assert "witness (N=" in message and "must run before" in message
    assert not isinstance(caught.value, RacyParallelLoopError)


def test_skewed_band_tiles():
    s = original(seidel).skew("t", "i").tile("t", "i", sizes=4)
    assert names(s) == ["t_0", "i_0", "t_1", "i_1"]
    assert_computes_like_interpreter(seidel, s)


def test_parallel_of_a_loop_that_carries_a_dependence():
    with pytest.raises(RacyParallelLoopError, match=r"^parallel\('i'\): illegal schedule: .* carries the dependence"):
        original(seidel).parallel("i")


def test_nested_parallel():
    with pytest.raises(po.ScheduleError, match="inside a parallel loop"):
        original(scale).parallel("i").parallel("j")
    with pytest.raises(po.ScheduleError, match="contains a parallel loop"):
        original(scale).parallel("j").parallel("i")


def test_parallel_twice():
    with pytest.raises(po.ScheduleError, match="already parallel"):
        original(scale).parallel("i").parallel("i")


def test_vectorize_of_a_loop_that_carries_a_dependence():
    with pytest.raises(po.ScheduleError, match="vectorize: loop i carries the dependence"):
        original(seidel).vectorize("i")


def test_vectorize_outside_the_innermost_band():
    with pytest.raises(po.ScheduleError, match="not in the innermost band"):
        original(scale).vectorize("i")


def test_fuse_of_non_adjacent_nests():
    s = original(three_nests)
    assert names(s) == ["i", "i@S1", "i@S2"]
    with pytest.raises(po.ScheduleError, match="do not head consecutive nests"):
        s.fuse("i", "i@S2")


def test_fuse_of_a_loop_that_heads_no_nest():
    with pytest.raises(po.ScheduleError, match="do not head consecutive nests"):
        original(nests).fuse("i", "j@S1")


def test_fuse_depth_beyond_the_nests():
    with pytest.raises(po.ScheduleError, match="no loops left to fuse at depth 2"):
        original(three_nests).fuse("i", "i@S1", depth=2)


@pytest.mark.parametrize("groups", [[["S0"]], [["S0"], ["S0", "S1"]], [["S0"], ["S2"]]], ids=str)
def test_distribute_groups_must_cover_the_statements(groups):
    with pytest.raises(po.ScheduleError, match="must split the statements of loop i"):
        original(producer_consumer).distribute("i", groups=groups)


def test_distribute_against_a_dependence_is_illegal():
    with pytest.raises(po.IllegalScheduleError, match=r"^distribute\('i', groups=\[\['S1'\], \['S0'\]\]\): "
                       r"illegal schedule: RAW dependence"):
        original(producer_consumer).distribute("i", groups=[["S1"], ["S0"]])


def test_distribute_of_one_statement():
    with pytest.raises(po.ScheduleError, match="nothing to distribute"):
        original(scale).distribute("i")


def test_shift_by_zero():
    with pytest.raises(po.ScheduleError, match="offset of 0 changes nothing"):
        original(scale).shift("i", offset=0)


def test_unroll_of_an_unbounded_loop_without_factor():
    with pytest.raises(po.ScheduleError, match="may run more than 64 iterations"):
        original(mm).unroll("k")


@pytest.mark.parametrize("factor", [1, 0, 2.5, True], ids=str)
def test_unroll_factor_must_be_an_int_of_two_or_more(factor):
    with pytest.raises(po.ScheduleError, match="factor must be an int of at least 2"):
        original(mm).unroll("k", factor=factor)


def test_register_tile_of_a_band_that_is_not_innermost():
    with pytest.raises(po.ScheduleError, match="is not innermost"):
        original(mm).register_tile("i", "j", sizes=[2, 4])


def test_primitives_after_register_tile():
    s = original(mm).tile("i", "j", "k", sizes=8).register_tile("i_1", "j_1", sizes=[2, 4])
    with pytest.raises(po.ScheduleError, match="register tiled; apply register_tile last"):
        s.reverse("k_1")


def test_within_of_statements_outside_the_loop():
    with pytest.raises(po.ScheduleError, match="no statement"):
        original(independent).skew("i", "j", within=["S7"])
    with pytest.raises(po.ScheduleError, match="do not run in this loop"):
        original(nests).shift("i", offset=1, within=["S1"])
    with pytest.raises(po.ScheduleError, match="within= takes a list of statement names"):
        original(independent).reverse("i", within="S0")


def test_illegal_interchange_within_one_statement():
    with pytest.raises(po.IllegalScheduleError, match=r"^interchange\('i', 'j', within=\['S1'\]\): illegal") as caught:
        original(producer_consumer).interchange("i", "j", within=["S1"])
    assert "witness" in str(caught.value)


def test_skew_factor_zero():
    with pytest.raises(po.ScheduleError, match="factor must be a non-zero int"):
        original(seidel).skew("t", "i", factor=0)


def test_wavefront_of_loops_in_the_wrong_order():
    with pytest.raises(po.ScheduleError, match="must be outside"):
        original(seidel).wavefront("i", "t")


def test_unknown_primitive_in_a_json_trace():
    trace = po.Trace.from_json('[{"primitive": "teleport", "loops": ["i"], "options": {}}]')
    with pytest.raises(po.ScheduleError, match="unknown primitive 'teleport'; available: .*tile"):
        trace.apply(original(mm))


def test_bad_keyword_option():
    trace = po.Trace.from_json('[{"primitive": "tile", "loops": ["i", "j"], "options": {"size": 4}}]')
    with pytest.raises(po.ScheduleError, match="^tile: .*size"):
        trace.apply(original(mm))
    with pytest.raises(TypeError, match="size"):
        original(mm).tile("i", "j", size=4)


def test_missing_keyword_option():
    trace = po.Trace.from_json('[{"primitive": "shift", "loops": ["i"], "options": {}}]')
    with pytest.raises(po.ScheduleError, match="^shift: .*offset"):
        trace.apply(original(mm))


def test_a_loop_is_named_by_a_string_or_handle():
    with pytest.raises(po.ScheduleError, match="a loop is given by its handle"):
        original(mm).reverse(3)


def test_refusals_leave_no_step_behind():
    s = original(mm)
    with pytest.raises(po.ScheduleError):
        s.shift("i", offset=0)
    assert len(s.trace) == 0


# ----- within= by distribution -------------------------------------------------------------------

@po.kernel
def triple(A: f64["N"], B: f64["N"], C: f64["N"], X: f64["N"]):
    """Three independent statements in one loop."""
    for i in range(N):
        A[i] = X[i] * 2.0
        B[i] = X[i] + 1.0
        C[i] = X[i] * 3.0


@po.kernel
def reads_ahead(A: f64["N"], B: f64["N"], X: f64["N"]):
    """S1 reads what S0 writes one iteration later: the loop cannot run all of S0 first."""
    for i in range(N - 1):
        A[i] = X[i] * 2.0
        B[i] = A[i + 1] + 1.0


#: primitive -> (kernel, a call of it that passes ``within=`` on, S1's loops after
#: ``within=["S1"]``): S1 gets a copy of the loops (``i@S1``), S0 keeps theirs.
WITHIN_CASES = {
    "tile": (independent, lambda s, **w: s.tile("i", "j", sizes=4, **w), ["i@S1_0", "j@S1_0", "i@S1_1", "j@S1_1"]),
    "split": (independent, lambda s, **w: s.split("j", factor=3, **w), ["i", "j@S1_0", "j@S1_1"]),
    "unroll": (independent, lambda s, **w: s.unroll("j", factor=2, **w), ["i", "j@S1_0", "j@S1_1"]),
    "register_tile": (independent, lambda s, **w: s.register_tile("i", "j", sizes=[2, 2], **w),
                      ["j@S1_0", "i@S1_0", "i@S1_1", "j@S1_1"]),
    "parallel": (independent, lambda s, **w: s.parallel("i", **w), ["i@S1", "j@S1"]),
    "vectorize": (independent, lambda s, **w: s.tile("i", "j", sizes=4).vectorize("i_1", **w),
                  ["i_0", "j_0", "j_1@S1", "i_1@S1"]),
    "gpu_map": (independent, lambda s, **w: s.gpu_map("i", "j", **w), ["i@S1", "j@S1"]),
    "wavefront": (producer_consumer, lambda s, **w: s.wavefront("i", "j", **w), ["i@S1", "j@S1"]),
}


def copy_of(s, statement: str) -> dict:
    """The subtree (as a tree spec) of the outermost filter that runs ``statement`` alone."""
    return next(tree_spec(node) for _, node in nodes.walk(s.root)
                if isinstance(node, nodes.Filter) and tuple_names(node.domain) == [statement])


def assert_replays(s, kernel) -> None:
    """``s``'s trace replays, from JSON and as Python, to ``s``'s map."""
    assert po.Trace.from_json(s.trace.to_json()).apply(original(kernel)).map.is_equal(s.map)
    scope = {"s": original(kernel)}
    exec(s.trace.as_python(), {}, scope)
    assert scope["s"].map.is_equal(s.map)


@pytest.mark.parametrize("primitive", WITHIN_CASES)
def test_within_a_subset_distributes_and_acts_on_that_copy(primitive):
    kernel, call, loops_of_s1 = WITHIN_CASES[primitive]
    s = call(original(kernel), within=["S1"])
    distribute, last = s.trace[-2], s.trace[-1]
    assert distribute.as_python() == f"distribute({distribute.loops[0]!r}, groups=[['S0'], ['S1']])"
    assert distribute.note.startswith(f"for {primitive}(") and distribute.note.endswith("within=['S1'])")
    assert last.primitive == primitive and "within" not in last.kwargs and last.loops[-1].endswith("@S1")
    assert names(s, "S1") == loops_of_s1
    distributed = po.Trace(s.trace[:-1]).apply(original(kernel))
    assert copy_of(s, "S0") == copy_of(distributed, "S0")
    assert_replays(s, kernel)
    if primitive != "gpu_map":  # (the GPU mapping compiles to CUDA; its tests are elsewhere)
        assert_computes_like_interpreter(kernel, s, sizes=(1, 6), num_threads=2)


@pytest.mark.parametrize("primitive", WITHIN_CASES)
def test_within_every_statement_is_the_primitive_alone(primitive):
    kernel, call, _ = WITHIN_CASES[primitive]
    s = call(original(kernel), within=["S1", "S0"])
    assert s.map.is_equal(call(original(kernel)).map)
    assert "distribute" not in s.trace.as_python()


def test_within_statements_apart_treats_each_copy():
    s = original(triple).parallel("i", within=["S0", "S2"])
    assert s.trace.as_python().splitlines()[1:] == [
        "s = s.distribute('i', groups=[['S0'], ['S1'], ['S2']])", "s = s.parallel('i')", "s = s.parallel('i@S2')"]
    assert [line.strip() for line in s.pretty().splitlines() if not line.startswith("    ")] == [
        "sequence", "filter [N] -> { S0[i] }", "filter [N] -> { S1[i] }", "filter [N] -> { S2[i] }"]
    assert s.pretty().count("mark parallel") == 2 and names(s, "S1") == ["i@S1"]
    assert_replays(s, triple)
    assert_computes_like_interpreter(triple, s, sizes=(1, 6), num_threads=2)


def test_within_keeps_the_statement_order_of_the_loop():
    s = original(triple).split("i", factor=2, within=["S1"])
    assert s.trace[-2].kwargs["groups"] == [["S0"], ["S1"], ["S2"]]
    assert names(s, "S1") == ["i@S1_0", "i@S1_1"] and names(s, "S2") == ["i@S2"]
    assert_computes_like_interpreter(triple, s, sizes=(1, 6))


@pytest.mark.parametrize("primitive", WITHIN_CASES)
def test_within_refusals(primitive):
    kernel, call, _ = WITHIN_CASES[primitive]
    s = original(kernel)
    with pytest.raises(po.ScheduleError, match=rf"^{primitive}: no statement\(s\) S7 in"):
        call(s, within=["S7"])
    with pytest.raises(po.ScheduleError, match=rf"^{primitive}: within= takes a list of statement names"):
        call(s, within="S1")
    with pytest.raises(po.ScheduleError, match=rf"^{primitive}: statements S1 do not run in this loop \(it runs S0\)"):
        call(original(nests), within=["S1"])  # the loops named are those of S0's nest


@pytest.mark.parametrize("call", [lambda s, **w: s.split("i", factor=2, **w), lambda s, **w: s.tile("i", sizes=2, **w),
                                  lambda s, **w: s.unroll("i", factor=2, **w), lambda s, **w: s.parallel("i", **w),
                                  lambda s, **w: s.vectorize("i", **w), lambda s, **w: s.gpu_map("i", **w)],
                         ids=["split", "tile", "unroll", "parallel", "vectorize", "gpu_map"])
def test_within_that_needs_an_illegal_distribution(call):
    with pytest.raises(po.IllegalScheduleError) as caught:
        call(original(reads_ahead), within=["S1"])
    message = str(caught.value)
    assert "within=['S1']): within= needs loop i distributed first: distribute('i', groups=[['S0'], ['S1']]): " \
           "illegal schedule:" in message
    assert "witness (N=" in message


def test_within_that_cannot_distribute():
    s = original(independent).register_tile("i", "j", sizes=[2, 2])
    with pytest.raises(po.ScheduleError, match=r"^unroll\('i_1', within=\['S1'\]\): within= needs loop i_1 "
                       r"distributed first: distribute: band \(.*\) is register tiled"):
        s.unroll("i_1", within=["S1"])
