"""Lim-Lam affine partitioning ("limlam"): synchronization-free space partitions outermost, then
time partitions (a permutable band); textbook degrees of parallelism, and every suite kernel
verified, scheduled in under 1 s and compared with its numpy reference at MINI sizes."""
import time

import numpy as np
import pytest

import polyopt as po
from suite_reference import check_against_reference
from polyopt import f64
from polyopt.analysis import farkas
from polyopt.schedulers.limlam import limlam_levels


@po.kernel
def two_independent_loops(A: f64["N", "M"], B: f64["N", "M"]):
    for i in range(N):
        for j in range(M):
            A[i, j] = B[i, j] * 2.0


@po.kernel
def diagonal_recurrence(A: f64["N", "N"]):
    for i in range(1, N):
        for j in range(1, N):
            A[i, j] = A[i - 1, j - 1] + 1.0


def degree(kernel) -> int:
    scop = kernel.scop
    return max(limlam_levels(scop, po.dependences(scop)).degree.values())


def first_band_flags(schedule):
    """(permutable, coincident flags) of the outermost band of a schedule tree."""
    node = schedule.tree.get_root()
    while node.get_type().name != "band":  # domain, marks
        node = node.child(0)
    return bool(node.band_get_permutable()), [bool(node.band_member_get_coincident(k))
                                               for k in range(node.band_n_member())]


def check_against_interpreter(kernel, arrays):
    expected = [a.copy() for a in arrays]
    po.interpret(kernel, *expected)
    got = [a.copy() for a in arrays]
    po.compile(kernel, algorithm="limlam")(*got)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12)


def test_two_independent_loops_have_degree_two():
    assert degree(two_independent_loops) == 2
    sched = po.schedule(two_independent_loops.scop, "limlam", parallel=False)
    assert first_band_flags(sched) == (True, [True, True])
    rng = np.random.default_rng(0)
    check_against_interpreter(two_independent_loops, [rng.random((5, 7)), rng.random((5, 7))])


def test_diagonal_recurrence_is_partitioned_along_the_anti_diagonal():
    # A[i, j] <- A[i-1, j-1]: distance (1, 1); the partitions i - j keep every chain on one processor
    scop = diagonal_recurrence.scop
    found = limlam_levels(scop, po.dependences(scop))
    assert found.degree == {"S0": 1}
    space = found.levels[0]
    assert space.kind == "band" and [row["S0"][0] for row in space.rows] == [(1, -1)]
    check_against_interpreter(diagonal_recurrence, [np.random.default_rng(1).random((8, 8))])


def test_gemm_has_degree_two_then_the_reduction():
    scop = po.suite.get("gemm").kernel.scop
    found = limlam_levels(scop, po.dependences(scop))
    assert found.degree == {"S0": 2, "S1": 2} and not found.notes
    assert [row["S1"][0] for row in found.levels[0].rows] == [(1, 0, 0), (0, 0, 1)]  # i, j (S1 runs i, k, j)
    assert first_band_flags(po.schedule(scop, "limlam", parallel=False)) == (True, [True, True])


@pytest.mark.parametrize("name", ["jacobi-1d", "seidel-2d"])
def test_stencil_with_time_loop_has_no_sync_free_parallelism_but_a_pipelined_band(name):
    scop = po.suite.get(name).kernel.scop
    found = limlam_levels(scop, po.dependences(scop))
    assert set(found.degree.values()) == {0}
    band = found.levels[0]
    depth = len(scop.statements[0].iterators)
    assert band.kind == "band" and band.permutable and len(band.rows) == depth  # time-skewed, tilable
    permutable, flags = first_band_flags(po.schedule(scop, "limlam", parallel=False))
    assert permutable and len(flags) == depth and not flags[0]


def test_unknown_option_is_refused():
    with pytest.raises(po.ScheduleError):
        po.schedule(po.suite.get("gemm").kernel.scop, "limlam", tile=32)


@pytest.mark.parametrize("name", po.suite.names())
def test_suite_kernel_legal_fast_and_correct(name):
    entry = po.suite.get(name)
    scop = entry.kernel.scop
    po.dependences(scop)           # shared by every scheduler; not scheduling time
    times = []
    for _ in range(2):  # the better of two cold runs: another test worker's load shows as noise
        farkas.clear_cache()
        start = time.process_time()  # this process's CPU time
        sched = po.schedule(scop, "limlam")
        times.append(time.process_time() - start)
    assert min(times) < 1.0
    po.verify(scop, sched)
    check_against_reference(entry, po.compile(entry.kernel, algorithm="limlam"))
