"""Scops written in isl notation (``po.scop_from_isl``): structure, schedules, execution, errors."""
from __future__ import annotations

import islpy as isl
import numpy as np
import pytest

import polyopt as po
from conftest import ALGORITHMS, run_everywhere


def shift_scop(**extra):
    return po.scop_from_isl(
        name="shift",
        arrays={"A": "f64[N]", "B": "f64[N]"},
        statements=[("[N] -> { S0[i] : 0 <= i < N - 1 }", "B[i] = A[i + 1] * 2.0")],
        **extra)


def test_structure():
    scop = shift_scop(schedule="[N] -> { S0[i] -> [i] }")
    assert isinstance(scop, po.Scop) and scop.name == "shift"
    assert scop.params == ("N",)
    assert scop.context.is_equal(isl.Set("[N] -> { : N >= 0 }"))
    assert scop.arrays["A"] == po.Array("A", po.f64, ("N",))
    (s0,) = scop.statements
    assert s0.name == "S0" and s0.iterators == ("i",)
    assert s0.domain.is_equal(isl.Set("[N] -> { S0[i] : 0 <= i < N - 1 }"))
    assert s0.reads[0].relation.is_equal(isl.Map("[N] -> { S0[i] -> A[i + 1] : 0 <= i < N - 1 }"))
    assert s0.writes[0].relation.is_equal(isl.Map("[N] -> { S0[i] -> B[i] : 0 <= i < N - 1 }"))
    assert [(a.name, a.kind) for a in scop.arguments] == [("A", "array"), ("B", "array")]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_compiles_and_runs(algorithm, rng):
    scop = shift_scop(schedule="[N] -> { S0[i] -> [i] }")
    A, B = rng.random(7), np.zeros(7)
    po.compile(scop, algorithm=algorithm)(A, B)
    expected = np.zeros(7)
    expected[:-1] = 2.0 * A[1:]
    np.testing.assert_array_equal(B, expected)


def test_default_schedule_is_list_order(rng):
    scop = po.scop_from_isl(
        name="two",
        arrays={"A": "f64[N]", "B": "f64[N]", "C": "f64[N]"},
        statements=[("[N] -> { S0[i] : 0 <= i < N }", "B[i] = A[i] * 2.0"),
                    ("[N] -> { S1[i] : 0 <= i < N }", "C[i] = B[N - 1 - i] + B[i]")])
    assert scop.schedule.get_map().is_equal(
        isl.UnionMap("[N] -> { S0[i] -> [0, i] : 0 <= i < N; S1[i] -> [1, i] : 0 <= i < N }"))
    A = rng.random(6)
    _, B, C = run_everywhere(scop, A, np.zeros(6), np.zeros(6))
    np.testing.assert_allclose(B, 2 * A)
    np.testing.assert_allclose(C, 2 * A[::-1] + 2 * A)


def test_default_schedule_pads_statements_of_different_depths(rng):
    scop = po.scop_from_isl(
        name="depths",
        arrays={"A": "f64[N, N]", "s": "f64[1]"},
        statements=[("{ S0[] }", "s[0] = 0.0"),
                    ("[N] -> { S1[i, j] : 0 <= i < N and 0 <= j < N }", "s[0] += A[i, j]")])
    assert scop.schedule.get_map().is_equal(
        isl.UnionMap("[N] -> { S0[] -> [0, 0, 0]; S1[i, j] -> [1, i, j] : 0 <= i, j < N }"))
    A = rng.random((4, 4))
    _, s = run_everywhere(scop, A, np.full(1, 7.0))
    np.testing.assert_allclose(s[0], A.sum(), rtol=1e-12)


def test_explicit_flat_schedule_defines_the_semantics(rng):
    # the same recurrence run descending (the given schedule *is* the program order) ...
    def scop(schedule):
        return po.scop_from_isl(
            name="recurrence", arrays={"A": "f64[N]"},
            statements=[("[N] -> { S0[i] : 1 <= i < N }", "A[i] = A[i - 1] + 1.0")],
            schedule=schedule)
    A = rng.random(8)
    (down,) = run_everywhere(scop("[N] -> { S0[i] -> [-i] }"), A)
    expected = A.copy()
    expected[1:] = A[:-1] + 1.0
    np.testing.assert_array_equal(down, expected)
    # ... or ascending: a prefix sum of ones
    (up,) = run_everywhere(scop("[N] -> { S0[i] -> [i] }"), A)
    np.testing.assert_array_equal(up, A[0] + np.arange(8))


def test_explicit_interleaving_schedule(rng):
    scop = po.scop_from_isl(
        name="fused",
        arrays={"A": "f64[N]", "B": "f64[N]"},
        statements=[("[N] -> { S0[i] : 0 <= i < N }", "B[i] = A[i] + 1.0"),
                    ("[N] -> { S1[i] : 1 <= i < N }", "A[i] = B[i - 1] * B[i]")],
        schedule="[N] -> { S0[i] -> [i, 0]; S1[i] -> [i, 1] }")
    A = rng.random(6)
    out_a, out_b = run_everywhere(scop, A, np.zeros(6))
    # reference loop in the same interleaved order
    a, b = A.copy(), np.zeros(6)
    for i in range(6):
        b[i] = a[i] + 1.0
        if i >= 1:
            a[i] = b[i - 1] * b[i]
    np.testing.assert_array_equal(out_a, a)
    np.testing.assert_array_equal(out_b, b)


def test_schedule_tree_text(rng):
    tree = ('{ domain: "[N] -> { S0[i] : 0 <= i < N; S1[i] : 0 <= i < N }", child: { sequence: [ '
            '{ filter: "{ S0[i] }", child: { schedule: "[N] -> [{ S0[i] -> [(-i)] }]" } }, '
            '{ filter: "{ S1[i] }", child: { schedule: "[N] -> [{ S1[i] -> [(i)] }]" } } ] } }')
    scop = po.scop_from_isl(
        name="tree", arrays={"A": "f64[N]"},
        statements=[("[N] -> { S0[i] : 0 <= i < N }", "A[i] = 1.0 * i"),
                    ("[N] -> { S1[i] : 0 <= i < N }", "A[i] = A[i] + A[N - 1 - i]")],
        schedule=tree)
    assert scop.schedule.get_map().intersect_domain(scop.domain).is_equal(
        isl.UnionMap("[N] -> { S0[i] -> [0, -i] : 0 <= i < N; S1[i] -> [1, i] : 0 <= i < N }"))
    (A,) = run_everywhere(scop, np.zeros(5))
    a = np.arange(5.0)
    for i in range(5):
        a[i] += a[4 - i]
    np.testing.assert_array_equal(A, a)
    np.testing.assert_array_equal(A, [4.0, 4.0, 4.0, 7.0, 8.0])


def test_scalars_explicit_params_and_argument_order():
    scop = po.scop_from_isl(
        name="relax", arrays={"A": "f64[N]"}, scalars={"alpha": "f64"}, params=["T"],
        statements=[("[N, T] -> { S0[t, i] : 0 <= t < T and 1 <= i < N }", "A[i] = A[i - 1] + alpha"),
                    ("[N] -> { S1[i] : 0 <= i < N }", "A[i] *= 2")])
    assert scop.params == ("N", "T")
    assert [(a.name, a.kind) for a in scop.arguments] == [("T", "param"), ("alpha", "scalar"), ("A", "array")]
    A = np.zeros(4)
    po.compile(scop)(3, 1.0, A)
    np.testing.assert_array_equal(A, [0.0, 2.0, 4.0, 6.0])
    A = np.zeros(4)
    po.compile(scop)(A=A, alpha=0.5, T=2)
    np.testing.assert_array_equal(A, [0.0, 1.0, 2.0, 3.0])
    B = np.zeros(4)
    po.interpret(scop, 3, 1.0, B)
    np.testing.assert_array_equal(B, [0.0, 2.0, 4.0, 6.0])
    # a parameter of a domain that is neither listed in params nor an extent cannot be inferred
    unlisted = po.scop_from_isl(
        name="relax2", arrays={"A": "f64[N]"},
        statements=[("[N, T] -> { S0[t, i] : 0 <= t < T and 1 <= i < N }", "A[i] = A[i - 1]")])
    assert [a.name for a in unlisted.arguments] == ["A"]
    with pytest.raises(TypeError, match="cannot infer size parameter"):
        po.compile(unlisted)(A)


def test_tuple_array_specs_local_scalars_and_f32(rng):
    scop = po.scop_from_isl(
        name="rowsum", arrays={"A": ("f32", ["N", "M"]), "r": "f32[N]"},
        statements=[("[N, M] -> { S0[i] : 0 <= i < N }", "s = 0.0"),
                    ("[N, M] -> { S1[i, j] : 0 <= i < N and 0 <= j < M }", "s += A[i, j]"),
                    ("[N, M] -> { S2[i] : 0 <= i < N }", "r[i] = s")],
        schedule="[N, M] -> { S0[i] -> [i, 0, 0]; S1[i, j] -> [i, 1, j]; S2[i] -> [i, 2, 0] }")
    assert scop.arrays["s"].local and scop.arrays["s"].dtype is po.f32
    assert scop.arrays["A"].shape == ("N", "M")
    A = rng.random((5, 3)).astype(np.float32)
    _, r = run_everywhere(scop, A, np.zeros(5, np.float32), rtol=1e-6)
    np.testing.assert_allclose(r, A.sum(axis=1), rtol=1e-6)


def test_explicit_context():
    scop = shift_scop(context="[N] -> { : N >= 3 }")
    assert scop.context.is_equal(isl.Set("[N] -> { : N >= 3 }"))
    ck = po.compile(scop)
    ck(np.ones(3), np.zeros(3))
    with pytest.raises(ValueError):
        ck(np.ones(2), np.zeros(2))


def test_extent_arithmetic_in_arrays(rng):
    scop = po.scop_from_isl(
        name="halves", arrays={"A": "f64[N]", "H": "f64[N // 2 + 1]"}, params=["N"],
        statements=[("[N] -> { S0[i] : 0 <= 2i < N }", "H[i] = A[2 * i]")])
    assert scop.array_bounds(scop.arrays["H"]).is_equal(isl.Set("[N] -> { H[d] : 0 <= d <= floor(N / 2) }"))
    A = rng.random(7)
    _, H = run_everywhere(scop, 7, A, np.zeros(4))
    np.testing.assert_array_equal(H, A[::2])


@pytest.mark.parametrize("statements,arrays,match", [
    ([("[N] -> { S0[i] : 0 <= i < }", "A[i] = 1.0")], None, "statement 0: cannot read domain"),
    ([("[N] -> { S0[i] : 0 <= i < N }", "A[i] = 1.0"), ("[N] -> { S1[i] : 0 <= i < N and }", "A[i] = 2.0")],
     None, "statement 1: cannot read domain"),
    ([("[N] -> { [i] : 0 <= i < N }", "A[i] = 1.0")], None, "the domain needs a tuple name"),
    ([("[N] -> { S0[i] : 0 <= i < N }", "A[i] = ")], None, "cannot read the body of S0"),
    ([("[N] -> { S0[i] : 0 <= i < N }", "A[i] = 1.0; A[0] = 2.0")], None, "exactly one assignment"),
    ([("[N] -> { S0[i] : 0 <= i < N }", "A[i] + 1.0")], None, "must be an assignment"),
    ([("[N] -> { S0[i] : 0 <= i < N }", "A[i * i] = 1.0")], None, "non-affine subscript of 'A'"),
    ([("[N] -> { S0[i] : 0 <= i < N }", "A[i] = q")], None, "unknown name 'q'"),
    ([("[N] -> { S0[i] : 0 <= i < N }", "A[j] = 1.0")], None, "unknown name 'j'"),
    ([("[N] -> { S0[i] : 0 <= i < N }", "A[i] = 1.0")], {"A": "f8[N]"}, "unknown element type"),
])
def test_errors(statements, arrays, match):
    with pytest.raises(po.FrontendError, match=match.replace("[", r"\[").replace("(", r"\(")):
        po.scop_from_isl(name="bad", arrays=arrays or {"A": "f64[N]"}, statements=statements)


def test_error_positions_in_bodies():
    with pytest.raises(po.FrontendError) as info:
        po.scop_from_isl(name="bad", arrays={"A": "f64[N]"},
                         statements=[("[N] -> { S7[i] : 0 <= i < N }", "A[i] = A[i] + foo(i)")])
    assert info.value.source_name == "<isl statement S7>"
    assert (info.value.line, info.value.column) == (1, 15)
    assert info.value.construct == "foo(i)"


@pytest.mark.parametrize("schedule", [
    "[N] -> { S0[i] -> [i]; S1[i] -> [1, i] }",   # range spaces differ
    "{ S0[i] -> [i] ",                             # syntax
    '{ domain: "[N] -> { S0[i] : 0 <= i < N }" ',  # syntax in a tree
])
def test_bad_schedules(schedule):
    with pytest.raises(po.FrontendError, match="cannot use the schedule"):
        po.scop_from_isl(name="x", arrays={"A": "f64[N]"},
                         statements=[("[N] -> { S0[i] : 0 <= i < N }", "A[i] = 1.0"),
                                     ("[N] -> { S1[i] : 0 <= i < N }", "A[i] += 1.0")],
                         schedule=schedule)


def test_a_schedule_that_leaves_dependent_instances_unordered_is_refused():
    """S1 reads what S0 writes, and the schedule puts both at time 0: 'original' and the
    interpreter ran one order, pluto and isl another. Refused, naming two such instances."""
    statements = [("[N] -> { S0[i] : 0 <= i < N }", "B[i] = A[i] * 2.0"),
                  ("[N] -> { S1[i] : 0 <= i < N }", "A[i] = B[i] + 1.0")]
    arrays = {"A": "f64[N]", "B": "f64[N]"}
    with pytest.raises(po.FrontendError, match=r"S\d\[0\] and S\d\[0\] the same time \(N = 1\)"):
        po.scop_from_isl(name="tied", arrays=arrays, statements=statements,
                         schedule="[N] -> { S0[i] -> [0]; S1[i] -> [0] }")
    # the same time for instances that touch different elements (or only read) is fine
    independent = [("[N] -> { S0[i] : 0 <= i < N }", "B[i] = A[i] * 2.0"),
                   ("[N] -> { S1[i] : 0 <= i < N }", "C[i] = A[i] + 1.0")]
    scop = po.scop_from_isl(name="free", arrays={**arrays, "C": "f64[N]"}, statements=independent,
                            schedule="[N] -> { S0[i] -> [i]; S1[i] -> [i] }")
    assert len(scop.statements) == 2
    # within one statement too: every instance at time 0 while each reads its predecessor's write
    with pytest.raises(po.FrontendError, match="the same time"):
        po.scop_from_isl(name="chain", arrays=arrays,
                         statements=[("[N] -> { S0[i] : 1 <= i < N }", "A[i] = A[i - 1] + 1.0")],
                         schedule="[N] -> { S0[i] -> [0] }")
