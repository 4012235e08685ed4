"""pluto's decisions after its hyperplanes (polyopt/schedulers/postpass.py): the loop that moves
innermost for vectorization across bands (sink_vector_loops), rows of in-order sums run at once
(row_tiles) and the fusion undone where it keeps such a sum on one thread."""
import numpy as np
import pytest

import polyopt as po
from polyopt import f64
from polyopt.schedulers import cost as cost_model
from polyopt.schedulers.postpass import SUM_ROWS
from polyopt.transform.primitives import loop_statements
from suite_reference import check_against_reference


def innermost_loop_of(schedule, statement):
    return schedule.loops(statement)[-1].name


def test_doitgen_sum_runs_its_unit_stride_loop_innermost():
    # sum[p] += A[r, q, s] * C4[s, p]: pluto leaves s innermost (C4 walked down its columns, an
    # in-order sum); p walks sum and C4 with unit stride and carries nothing, so it moves
    # innermost after S1 gets a nest of its own (LARGE, 2 threads: 195 -> 47 ms)
    entry = po.suite.get("doitgen")
    sched = po.schedule(entry.kernel, "pluto")
    steps = [step.primitive for step in sched.trace]
    assert "distribute" in steps and "permute" in steps
    order = [loop.name for loop in sched.loops("S1")]
    assert order[:3] == ["r", "q", "s"] and order[3].startswith("p")
    source = po.compile(entry.kernel).c_source
    s1 = [line for line in source.splitlines() if "/* S1 */" in line][0]
    loops = [line for line in source.splitlines() if line.strip().startswith("for")]
    inner = loops[-2].split("long ")[1].split(" ")[0]  # S1's innermost loop (S2's nest follows)
    assert f"C4[c2][{inner}]" in s1 and f"sum[{inner}]" in s1
    assert all("-c" not in line for line in loops)  # no loop walks backwards (pluto's -p reversed)
    check_against_reference(entry, po.compile(entry.kernel))


def test_an_outermost_loop_is_strip_mined_and_its_points_vectorize():
    # symm: pluto's band (j, i) over a sum along k whose innermost loop walks A[i, k] and
    # B[k, j] with strides; j walks C, B and the expanded temp2 with unit stride. j is the
    # nest's outermost loop: its strips stay outermost, on the thread team (LARGE: 756 -> 319 ms)
    entry = po.suite.get("symm")
    sched = po.schedule(entry.kernel, "pluto")
    split = [step for step in sched.trace if step.primitive == "split"]
    assert [step.loops for step in split] == [("j",)]
    names = [loop.name for loop in sched.loops("S1")]
    assert names[0] == "j_0" and names[-1] == "j_1"
    assert [step.loops for step in sched.trace if step.primitive == "parallel"] == [("j_0",)]
    check_against_reference(entry, po.compile(entry.kernel))
    check_against_reference(entry, po.compile(entry.kernel), sizes=dict(M=37, N=45))


@po.kernel
def chained_rows(A: f64["N", "N"], x: f64["N"]):
    for i in range(1, N):
        for j in range(N):
            x[i] = x[i] + x[i - 1] * A[j, i]


def test_a_loop_that_carries_a_dependence_does_not_move_innermost():
    # i walks x and A with unit stride, but each x[i] needs x[i - 1] complete: i stays outside
    sched = po.schedule(chained_rows, "pluto")
    assert not any("walks the arrays" in step.note for step in sched.trace)
    assert innermost_loop_of(sched, "S0") == "j"
    A, x = np.random.default_rng(1).random((7, 7)), np.random.default_rng(2).random(7)
    expected = x.copy()
    po.interpret(chained_rows, A, expected)
    po.compile(chained_rows)(A, x)
    np.testing.assert_allclose(x, expected, rtol=1e-12)


@pytest.mark.parametrize("options", [dict(), dict(tile=8), dict(fuse="no"), dict(model=False)],
                         ids=lambda o: "-".join(f"{k}{v}" for k, v in o.items()) or "default")
@pytest.mark.parametrize("name", ["doitgen", "symm"])
def test_moved_loops_compile_correctly_with_other_options(name, options):
    entry = po.suite.get(name)
    compiled = po.compile(entry.kernel, algorithm="pluto", **options)
    po.verify(entry.kernel.scop, compiled.schedule)
    check_against_reference(entry, compiled)



@pytest.mark.parametrize("name, statement, rows", [("mvt", "S0", "i"), ("bicg", "S3", "i@S3"),
                                                    ("gemver", "S3", "i@S3")])
def test_row_sums_run_several_rows_at_once(name, statement, rows):
    # x1[i] += A[i, j] * y_1[j]: j carries the sum (no vector loop), i is parallel: SUM_ROWS rows
    # of i jammed into the j loop, each its own in-order sum (independent chains of additions)
    entry = po.suite.get(name)
    sched = po.schedule(entry.kernel, "pluto")
    steps = [step for step in sched.trace if step.primitive == "register_tile" and "rows of" in step.note]
    assert [(step.loops[-1], list(step.kwargs["sizes"])) for step in steps] == [(rows, [1, SUM_ROWS])]
    names = [loop.name for loop in sched.loops(statement)]
    assert names[0] == f"{rows}_0" and names[-1] == f"{rows}_1"  # rows outermost (parallel), points innermost
    assert ((f"{rows}_0",) in [step.loops for step in sched.trace if step.primitive == "parallel"]
            or "mark parallel" in sched.pretty())
    check_against_reference(entry, po.compile(entry.kernel))
    check_against_reference(entry, po.compile(entry.kernel), sizes={p: 29 for p in entry.kernel.scop.params})
    # without the cost model (Pluto as published) no row tiles
    assert not any("rows of" in step.note for step in po.schedule(entry.kernel, "pluto", model=False).trace)


def test_row_tile_loops_walking_every_array_with_unit_stride_are_vectorized_along_the_sum():
    # the rows' sums are interleaved by the loop vectorizer (in order per row), not packed across
    # the rows by SLP (which gathers A's rows)
    ir = po.compile(po.suite.get("mvt").kernel).optimized_ir
    assert "gather" not in ir


def test_a_fusion_that_keeps_a_row_sum_on_one_thread_is_undone():
    # atax: pluto fuses tmp = A x and y = A^T tmp in one loop over the rows, which carries the
    # sums into y: one thread, tmp's sums one chain of additions. Apart, tmp's rows run 8 at a
    # time on the thread team (LARGE, one thread: 4.2 -> 3.0 ms)
    entry = po.suite.get("atax")
    fused = po.schedule(entry.kernel, "pluto", fuse="smart")
    assert not all(cost_model.threaded_nests(fused))
    sched = po.schedule(entry.kernel, "pluto")
    assert any("separate nests" in note for note in sched.notes)
    assert loop_statements(sched, sched.loops("S2")[0].name) == ("S2",)
    assert any("rows of" in step.note for step in sched.trace)
    check_against_reference(entry, po.compile(entry.kernel))
    check_against_reference(entry, po.compile(entry.kernel), sizes=dict(M=38, N=21))


def test_a_nest_sequential_either_way_keeps_pluto_fusion():
    for name in ("seidel-2d", "gesummv", "doitgen"):
        sched = po.schedule(po.suite.get(name).kernel, "pluto")
        assert not any("keeps an in-order sum" in note for note in sched.notes), name
