"""Our Feautrier scheduler: textbook results and every suite kernel, compared with isl's."""
import numpy as np
import pytest

import polyopt as po
from suite_reference import check_against_reference
from polyopt import f64
from polyopt.schedulers.feautrier import feautrier_levels
from polyopt.transform.schedule import tree_statistics


@po.kernel
def wavefront(A: f64["N", "N"]):
    for i in range(1, N):
        for j in range(1, N):
            A[i, j] = A[i - 1, j] + A[i, j - 1]


@po.kernel
def row_prefix(A: f64["N", "N"], B: f64["N"]):
    for i in range(1, N):
        for j in range(N):
            A[i, j] = A[i, j] + B[i - 1]
        for j in range(N):
            B[i] = B[i] + A[i, j] * 0.5


def test_uniform_recurrence_gets_one_dimensional_schedule():
    scop = wavefront.scop
    levels = feautrier_levels(scop, po.dependences(scop)).levels
    assert levels[0].rows == [{"S0": ((1, 1), 0, (("N", 0),))}]  # t = i + j
    assert all(lvl.permutable for lvl in levels[1:])        # the rest carries nothing
    ck = po.compile(wavefront, algorithm="feautrier")
    a = np.random.default_rng(0).random((9, 9))
    b = a.copy()
    ck(a)
    po.interpret(wavefront, b)
    np.testing.assert_allclose(a, b, rtol=1e-12)


def test_gemm_only_the_reduction_dimension_carries():
    scop = po.suite.get("gemm").kernel.scop
    levels = feautrier_levels(scop, po.dependences(scop)).levels
    first = levels[0].rows[0]
    assert first["S1"][0] == (0, 1, 0)                      # k (S1 iterates i, k, j)
    assert first["S0"][0] == (0, 0)
    stats = tree_statistics(po.schedule(scop, "feautrier").tree)
    assert stats["sequential_depth"] == 1 and stats["parallel_loops"] >= 2


def test_program_that_needs_two_dimensions():
    scop = row_prefix.scop
    levels = feautrier_levels(scop, po.dependences(scop)).levels
    sequential = [lvl for lvl in levels if not lvl.permutable]
    assert len(sequential) == 2
    a = np.random.default_rng(1).random((7, 7))
    b = np.random.default_rng(2).random(7)
    a2, b2 = a.copy(), b.copy()
    po.compile(row_prefix, algorithm="feautrier")(a, b)
    po.interpret(row_prefix, a2, b2)
    np.testing.assert_allclose(a, a2, rtol=1e-12)
    np.testing.assert_allclose(b, b2, rtol=1e-12)


@pytest.mark.parametrize("name", po.suite.names())
def test_suite_kernel_verified_correct_and_not_more_sequential_than_isl(name):
    entry = po.suite.get(name)
    scop = entry.kernel.scop
    ours = po.schedule(scop, "feautrier")
    po.verify(scop, ours)
    theirs = po.schedule(scop, "isl-feautrier")
    assert tree_statistics(ours.tree)["sequential_depth"] <= tree_statistics(theirs.tree)["sequential_depth"]
    check_against_reference(entry, po.compile(entry.kernel, algorithm="feautrier"))


# Random-nest finding (issue 19): a reversed loop around a stride-2 loop; the rational projection
# of the stride congruences turned RAW S1 -> S0's 2i = N - 2 into an interval, and no dimension
# could satisfy any dependence ("no dimension satisfies any dependence among S0, S1").
@po.kernel
def reversed_strided(A: f64["N + 3", "N + 3"]):
    for i in range(N - 1, -1, -1):
        for j in range(2, N - 1, 2):
            A[1, i + 2] = A[N - j, j]
        A[i, i + 2] = A[2, i]


def check_schedule_and_code(kernel, arrays):
    """Schedule with feautrier, verify, compile, compare with the interpreter; the Schedule."""
    sched = po.schedule(kernel.scop, "feautrier")
    po.verify(kernel.scop, sched)
    expected = [a.copy() for a in arrays]
    po.interpret(kernel, *expected)
    got = [a.copy() for a in arrays]
    po.compile(kernel, algorithm="feautrier")(*got)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12)
    return sched


def test_stride_congruences_keep_the_equalities_they_imply():
    for n in (7, 10):  # N = 10: N + 2 is a multiple of 4, where the dependences exist
        sched = check_schedule_and_code(reversed_strided, [np.random.default_rng(n).random((n + 3, n + 3))])
        assert sched.notes == () and sched.trace[0].primitive == "affine_schedule"
