"""pluto's decisions after its hyperplanes (polyopt/schedulers/postpass.py): the loop that moves
innermost for vectorization across bands (sink_vector_loops)."""
import numpy as np
import pytest

import polyopt as po
from polyopt import f64
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

