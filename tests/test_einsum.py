"""po.einsum against numpy.einsum: every subscript form, dtypes, out=/dtype=/casting/order,
errors, the kernel cache, and a property test on random subscripts, shapes and dtypes."""
from __future__ import annotations

import sys
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import polyopt as po
from polyopt.errors import ArgumentTypeError

RNG = np.random.default_rng(7)


def _operand(shape, dtype=np.float64):
    """Small integer-valued data (exact in every dtype, so integer results compare exactly)."""
    values = RNG.integers(-3, 4, size=shape)
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return values > 0
    if dtype.kind == "u":
        return np.abs(values).astype(dtype)
    if dtype.kind == "c":
        return (values + 1j * RNG.integers(-3, 4, size=shape)).astype(dtype)
    return values.astype(dtype)


def _check(actual, expected):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape
    assert actual.dtype == expected.dtype
    if expected.dtype.kind in "fc":
        tol = 1e-2 if expected.dtype == np.float16 else 1e-5
        np.testing.assert_allclose(actual.astype(np.complex128), expected.astype(np.complex128),
                                   rtol=tol, atol=tol)
    else:
        np.testing.assert_array_equal(actual, expected)


FORMS = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),             # matmul
    ("ij,jk", [(3, 4), (4, 5)]),                 # implicit output
    ("ba,cb", [(4, 3), (5, 4)]),                 # implicit output is sorted: 'ac'
    ("Ba,aB", [(2, 3), (3, 2)]),                 # upper case sorts first
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ijk,jl->ikl", [(2, 3, 4), (3, 5)]),
    ("ij,ij->i", [(3, 4), (3, 4)]),
    ("ii->i", [(4, 4)]),                         # diagonal
    ("ii", [(4, 4)]),                            # trace
    ("iii->i", [(3, 3, 3)]),
    ("iji->j", [(3, 2, 3)]),
    ("ijk->kji", [(2, 3, 4)]),                   # transpose
    ("ijk->k", [(2, 3, 4)]),                     # reduction
    ("ij->", [(2, 3)]),
    ("i,j->ij", [(3,), (4,)]),                   # outer product
    ("i,i", [(5,), (5,)]),                       # dot
    ("...ij,...jk->...ik", [(2, 3, 4), (4, 5)]),  # ellipsis broadcasting
    ("...i,...i", [(2, 3), (4, 1, 3)]),           # implicit output keeps the broadcast dims first
    ("i...->...", [(3, 2, 2)]),
    ("...,...", [(2, 3), (1,)]),
    ("ij,ij->ij", [(1, 3), (2, 3)]),             # size-1 broadcasting of a label
    ("ij,jk->ik", [(3, 1), (4, 5)]),             # broadcast reduction label
    ("ii,i->i", [(1, 1), (3,)]),
    (",ij->ij", [(), (2, 3)]),                    # scalar operand
    (",", [(), ()]),
    ("->", [()]),
    ("ab,bc,cd,de->ae", [(2, 3), (3, 4), (4, 2), (2, 3)]),  # many operands
    ("a,b,c,d,e->edcba", [(2,), (3,), (1,), (2,), (2,)]),
    ("ij,jk", [(0, 3), (3, 2)]),                 # empty arrays
    ("ij,jk", [(2, 0), (0, 2)]),
]


@pytest.mark.parametrize("subscripts,shapes", FORMS, ids=[f[0] or "empty" for f in FORMS])
def test_forms_match_numpy(subscripts, shapes):
    ops = [_operand(s) for s in shapes]
    _check(po.einsum(subscripts, *ops), np.einsum(subscripts, *ops))


@pytest.mark.parametrize("optimize", [True, "greedy", "optimal", ["einsum_path", (0, 1), (0, 1), (0, 1)]])
def test_contraction_orders(optimize):
    ops = [_operand(s) for s in [(3, 4), (4, 5), (5, 2), (2, 3)]]
    expected = np.einsum("ab,bc,cd,da->a", *ops)
    _check(po.einsum("ab,bc,cd,da->a", *ops, optimize=optimize), expected)


@pytest.mark.parametrize("optimize", [
    3.5, object(), 0, np.True_, [], ("greedy",), ["einsum_path", "bad"], ["einsum_path", 3],
    ["einsum_path", (0, 7), (0, 1)], ["einsum_path", (0, 1)], ["einsum_path", (1, 0), (0, 1)], "foo", None,
    ("greedy", 1), ("optimal", 10**6), ["greedy", 100]],
    ids=lambda value: "object()" if type(value) is object else repr(value))  # stable ids (xdist)
def test_optimize_is_read_as_numpy_reads_it(optimize):
    """numpy.einsum_path's rules: TypeError for what is no path (a number, an object, an empty
    list, a bad position), IndexError for a position past the operands, RuntimeError for a path
    that leaves operands, KeyError for an unknown name where a path must be searched, None as
    False, (name, memory limit) pairs. With two operands nothing is searched."""
    for subscripts, shapes in [("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]), ("ij,jk->ik", [(2, 3), (3, 4)])]:
        ops = [_operand(s) for s in shapes]
        try:
            expected = np.einsum(subscripts, *ops, optimize=optimize)
        except Exception as exc:  # noqa: BLE001 - numpy's exception type is the reference
            with pytest.raises(type(exc)):
                po.einsum(subscripts, *ops, optimize=optimize)
            continue
        _check(po.einsum(subscripts, *ops, optimize=optimize), expected)


def test_contraction_path_uses_temporaries():
    ck = po.einsum_kernel("ab,bc,cd->ad", (2, 30), (30, 2), (2, 30), optimize="optimal")
    assert {"t0"} <= set(ck.scop.arrays)
    assert len(ck.scop.statements) == 4


def test_interleaved_form():
    a, b = _operand((2, 3)), _operand((3, 4))
    _check(po.einsum(a, [0, 1], b, [1, 2], [0, 2]), np.einsum(a, [0, 1], b, [1, 2], [0, 2]))
    _check(po.einsum(a, [0, 1], b, [1, 2]), np.einsum(a, [0, 1], b, [1, 2]))
    _check(po.einsum(a, [Ellipsis, 1], b, [1, 2], [Ellipsis, 2]),
           np.einsum(a, [Ellipsis, 1], b, [1, 2], [Ellipsis, 2]))
    _check(po.einsum(a, [26, 1], [1, 26]), np.einsum(a, [26, 1], [1, 26]))


def test_python_scalars_and_lists():
    _check(po.einsum("i,", [1, 2, 3], 2.5), np.einsum("i,", [1, 2, 3], 2.5))
    _check(po.einsum("i,", np.ones(2, np.int8), 300), np.einsum("i,", np.ones(2, np.int8), 300))


DTYPES = [np.float32, np.float64, np.int32, np.int64, np.bool_, np.int8, np.int16, np.uint8, np.uint16,
          np.uint32, np.uint64, np.float16, np.longdouble, np.complex64, np.complex128, np.clongdouble]


@pytest.mark.parametrize("dtype", DTYPES, ids=[np.dtype(d).name for d in DTYPES])
def test_each_dtype(dtype):
    for subscripts, shapes in [("ij,jk->ik", [(3, 4), (4, 2)]), ("ii->i", [(3, 3)]), ("ijk->", [(2, 2, 3)])]:
        ops = [_operand(s, dtype) for s in shapes]
        _check(po.einsum(subscripts, *ops), np.einsum(subscripts, *ops))


def test_integer_overflow_wraps_like_numpy():
    a = np.full(3, 100, np.int8)
    _check(po.einsum("i,i", a, np.full(3, 2, np.int8)), np.einsum("i,i", a, np.full(3, 2, np.int8)))
    big = np.array([2**63 + 5, 2**64 - 1], np.uint64)
    _check(po.einsum("i,i->i", big, np.array([3, 2], np.uint64)), np.einsum("i,i->i", big, np.array([3, 2], np.uint64)))


def test_object_arrays_use_the_interpreter():
    a = np.array([Fraction(1, 2), Fraction(1, 3)], dtype=object)
    assert po.einsum("i,i", a, a) == Fraction(13, 36)
    assert po.einsum("i,i", a[:0], a[:0]) == np.einsum("i,i", a[:0], a[:0])
    with pytest.raises(TypeError, match="interpreter"):
        po.einsum_kernel("i,i", a, a)


def test_mixed_dtypes_promote():
    a, b = _operand((3, 4), np.int32), _operand((4,), np.float32)
    _check(po.einsum("ij,j->i", a, b), np.einsum("ij,j->i", a, b))


def test_dtype_and_casting():
    a, b = _operand((3, 4)), _operand((4,))
    _check(po.einsum("ij,j->i", a, b, dtype=np.float32, casting="same_kind"),
           np.einsum("ij,j->i", a, b, dtype=np.float32, casting="same_kind"))
    _check(po.einsum("ij,j->i", a, b, dtype=np.int64, casting="unsafe"),
           np.einsum("ij,j->i", a, b, dtype=np.int64, casting="unsafe"))
    for kwargs in [dict(dtype=np.int64), dict(dtype=np.float32), dict(out=np.zeros(3, np.float32)),
                   dict(out=np.zeros(3, np.int64), casting="same_kind")]:
        with pytest.raises(TypeError):
            np.einsum("ij,j->i", a, b, **kwargs)
        with pytest.raises(TypeError, match="according to the rule"):
            po.einsum("ij,j->i", a, b, **kwargs)
    ia = _operand((3, 4), np.int32)
    with pytest.raises(TypeError):
        po.einsum("ij->i", ia, casting="no", dtype=np.int64)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int8, np.complex128, object])
def test_zero_dimensional_out_takes_scalar_contractions(dtype):
    """A 0-d ``out=`` receives a scalar result (dot, sum, trace, product of 0-d operands) and is
    returned, on the first call and on repeats, as numpy's; a result of another shape refuses it."""
    a, b = _operand((5,), dtype), _operand((5,), dtype)
    for subscripts, ops in [("i,i", [a, b]), ("i->", [a]), ("ii", [np.outer(a, b)]), (",", [a[0], b[1]]),
                            ("i,i,i->", [a, b, a])]:
        for _ in range(3):
            expected, actual = np.zeros((), dtype), np.zeros((), dtype)
            assert np.einsum(subscripts, *ops, out=expected) is expected
            assert po.einsum(subscripts, *ops, out=actual) is actual
            _check(actual, expected)
    with pytest.raises(ValueError, match="dimensions"):
        po.einsum("i,j->ij", a, b, out=np.zeros((), dtype))


def test_operands_are_cast_to_the_result_type_first_and_complex_never_drops_silently():
    """numpy casts every operand to the result type before multiplying: 0.5 and 1j are True as
    bool (a cast through polyopt's int64 storage made them 0), float16 results round their
    operands first. A complex operand into a real ``out=`` raises numpy's TypeError under every
    casting but 'unsafe', where numpy itself warns."""
    import warnings
    ones = np.ones(3)
    for operand, dtype in [(np.array([0.5, 0.0, -2.0]), np.bool_), (np.array([1j, 0, 2]), np.bool_),
                           (np.array([1.0007, 3.0, 5e-8]), np.float16),
                           (np.array([2**63 + 2048.0, 3.0, 1.5]), np.uint64),
                           (np.array([1.5j + 1, 2, 3]), np.int8)]:
        with warnings.catch_warnings(record=True) as numpy_warnings:
            warnings.simplefilter("always")
            expected = np.einsum("i,i->i", operand, ones, dtype=dtype, casting="unsafe")
        with warnings.catch_warnings(record=True) as polyopt_warnings:
            warnings.simplefilter("always")
            actual = po.einsum("i,i->i", operand, ones, dtype=dtype, casting="unsafe")
        np.testing.assert_array_equal(actual, expected)
        assert actual.dtype == expected.dtype
        assert {w.category for w in polyopt_warnings} == {w.category for w in numpy_warnings}
    c = np.array([1 + 2j, 3j])
    for casting in ["no", "equiv", "safe", "same_kind"]:
        for out in [np.zeros(()), np.zeros((), np.float32), np.zeros((), np.int64)]:
            with pytest.raises(TypeError):
                np.einsum("i,i", c, c, out=out, casting=casting)
            with pytest.raises(TypeError, match="cast"):
                po.einsum("i,i", c, c, out=out, casting=casting)


def test_out():
    a, b = _operand((3, 4)), _operand((4, 5))
    out = np.full((3, 5), 7.0)
    assert po.einsum("ij,jk->ik", a, b, out=out) is out
    _check(out, a @ b)
    out32 = np.zeros((3, 5), np.float32)  # the result is cast into out
    po.einsum("ij,jk->ik", a, b, out=out32, casting="same_kind")
    _check(out32, (a @ b).astype(np.float32))
    i8 = np.full(3, 100, np.int8)  # the computation happens in the common type with out
    out64 = np.zeros((), np.int64)
    po.einsum("i,i->", i8, np.full(3, 2, np.int8), out=out64)
    assert out64 == 600
    strided = np.zeros((5, 3)).T  # a non-contiguous out
    po.einsum("ij,jk->ik", a, b, out=strided)
    _check(strided, a @ b)
    square = _operand((4, 4))  # out aliasing an operand
    expected = np.einsum("ij,jk->ik", square, square)
    po.einsum("ij,jk->ik", square, square, out=square)
    _check(square, expected)
    with pytest.raises(ValueError, match="dimensions"):
        po.einsum("ij,jk->ik", a, b, out=np.zeros(3))
    with pytest.raises(ValueError, match="shape"):
        po.einsum("ij,jk->ik", a, b, out=np.zeros((3, 4)))
    with pytest.raises(TypeError):
        po.einsum("ij,jk->ik", a, b, out=[[0.0] * 5] * 3)


def test_order_and_non_contiguous_operands():
    a = _operand((6, 8))[::2, 1::2]
    b = np.asfortranarray(_operand((4, 5)))
    result = po.einsum("ij,jk->ik", a, b, order="F")
    assert result.flags.f_contiguous
    _check(result, np.einsum("ij,jk->ik", a, b))
    assert po.einsum("ij,jk->ik", a, b, order="C").flags.c_contiguous
    with pytest.raises(ValueError, match="order"):
        po.einsum("ij,jk->ik", a, b, order="Q")
    with pytest.raises(ValueError, match="casting"):
        po.einsum("ij,jk->ik", a, b, casting="always")


@pytest.mark.parametrize("order", ["K", "A", "C", "F", "k", "a", "c", "f", None])
def test_order_lays_the_result_out_as_numpy(order):
    """numpy takes 'K', 'A', 'C', 'F' in either case; its iterator lays the new result out: 'K'
    after the operands' strides, 'A' Fortran where every operand is, 'C'/'F' as named. The
    result owns its memory, on the first call and on repeats."""
    a, b, t = _operand((3, 4)), _operand((4, 5)), _operand((2, 3, 4))
    cases = [("ij,jk->ik", [a, b]), ("ij,jk->ki", [a, b]), ("ij,jk->ik", [np.asfortranarray(a), np.asfortranarray(b)]),
             ("ijk->ki", [t]), ("ijk,ijk->ikj", [t, t.copy()]), ("i,j->ij", [a[0], b[0]]),
             ("ij,ij->ji", [a[:, ::-1], a.T.copy().T])]
    for subscripts, ops in cases:
        expected = np.einsum(subscripts, *ops, order=order)
        for _ in range(2):
            actual = po.einsum(subscripts, *ops, order=order)
            assert actual.strides == expected.strides and actual.base is None, (subscripts, order)
            _check(actual, expected)


BAD = [
    ("ij,jk", [(2, 3)]),                  # fewer operands than subscripts
    ("ij", [(2, 3), (3,)]),               # more operands
    ("i1", [(2, 3)]),                     # not a letter
    ("i.j", [(2, 3)]),                    # '.' outside an ellipsis
    ("ij->k", [(2, 3)]),                  # output label never in an input
    ("ij->ii", [(2, 3)]),                 # output label repeated
    ("ijk", [(2, 3)]),                    # too many subscripts
    ("i", [(2, 3)]),                      # too few subscripts, no ellipsis
    ("i...->i", [(2, 3)]),                # broadcast dims missing from the output
    ("ii", [(2, 3)]),                     # diagonal of unequal extents
    ("ij,jk", [(2, 3), (4, 2)]),          # shape mismatch
    ("...i,...i", [(2, 3), (4, 3, 3)]),   # ellipsis shape mismatch
]


@pytest.mark.parametrize("subscripts,shapes", BAD, ids=[b[0] for b in BAD])
def test_errors_match_numpy(subscripts, shapes):
    ops = [np.ones(s) for s in shapes]
    with pytest.raises(ValueError):
        np.einsum(subscripts, *ops)
    with pytest.raises(ValueError):
        po.einsum(subscripts, *ops)


def test_shape_error_names_label_and_sizes():
    with pytest.raises(ValueError, match=r"label 'j' has size 3 in operand 0 but 4 in operand 1"):
        po.einsum("ij,jk", np.ones((2, 3)), np.ones((4, 2)))
    with pytest.raises(ValueError, match=r"'i' don't match \(2 != 3\)"):
        po.einsum("ii", np.ones((2, 3)))


def test_interleaved_errors():
    with pytest.raises(ValueError, match="valid range"):
        po.einsum(np.ones(2), [60])
    with pytest.raises(TypeError):
        po.einsum(np.ones(2), ["a"])
    with pytest.raises(ValueError):
        po.einsum()


def test_targets_are_checked():
    with pytest.raises(ValueError, match="unknown target 'tpu'"):
        po.einsum("ij->i", np.ones((2, 2)), target="tpu")
    assert issubclass(po.TargetUnavailableError, po.PolyoptError)


def test_cache_keeps_sizes_as_parameters():
    a = po.einsum_kernel("ij,jk->ik", (2, 3), (3, 4))
    po.einsum("ij,jk->ik", _operand((5, 6)), _operand((6, 7)))
    assert po.einsum_kernel("ij,jk->ik", np.ones((9, 2)), np.ones((2, 3))) is a
    assert {"N_i", "N_j", "N_k"} == set(a.scop.params)
    assert "polyopt_einsum" in a.c_source and a.schedule is not None
    # a new broadcast pattern or dtype is a new kernel
    assert po.einsum_kernel("ij,jk->ik", (2, 1), (3, 4)) is not a
    assert po.einsum_kernel("ij,jk->ik", (2, 3), (3, 4), dtype=np.float32) is not a


# --- property test -------------------------------------------------------------------------------

_HYPOTHESIS_DTYPES = [np.float64, np.float32, np.int32, np.int64, np.bool_, np.int8, np.uint8,
                      np.uint64, np.float16, np.complex128]


@st.composite
def _einsum_case(draw):
    letters = "abcdE"
    sizes = {l: draw(st.integers(0, 3)) for l in letters}
    ellipsis_shape = draw(st.lists(st.integers(1, 3), max_size=2))
    n_ops = draw(st.integers(1, 3))
    parts, shapes = [], []
    for _ in range(n_ops):
        labels = draw(st.lists(st.sampled_from(letters), max_size=3))
        ones = {l for l in labels if draw(st.booleans()) and draw(st.booleans())}  # size-1 broadcast
        shape = [1 if l in ones else sizes[l] for l in labels]
        text = "".join(labels)
        if ellipsis_shape and draw(st.booleans()):
            k = draw(st.integers(0, len(ellipsis_shape)))
            hidden = [1 if draw(st.integers(0, 3)) == 0 else e for e in ellipsis_shape[len(ellipsis_shape) - k:]]
            at = draw(st.integers(0, len(labels)))
            text, shape = text[:at] + "..." + text[at:], shape[:at] + hidden + shape[at:]
        parts.append(text)
        shapes.append(tuple(shape))
    subscripts = ",".join(parts)
    used = sorted(set("".join(parts)) - {"."})
    if draw(st.booleans()):
        out = draw(st.permutations(used))[:draw(st.integers(0, len(used)))]
        dots = "..." if "..." in subscripts else ""
        at = draw(st.integers(0, len(out)))
        subscripts += "->" + "".join(out[:at]) + dots + "".join(out[at:])
    mutation = draw(st.sampled_from([None] * 6 + ["size", "char", "output", "operands"]))
    if mutation == "size" and any(shapes):
        k = draw(st.sampled_from([k for k, s in enumerate(shapes) if s]))
        d = draw(st.integers(0, len(shapes[k]) - 1))
        shapes[k] = shapes[k][:d] + (shapes[k][d] + 2,) + shapes[k][d + 1:]
    elif mutation == "char":
        at = draw(st.integers(0, len(subscripts)))
        subscripts = subscripts[:at] + draw(st.sampled_from(["1", " ", ".", "z", "-"])) + subscripts[at:]
    elif mutation == "output":
        subscripts = subscripts.split("->")[0] + "->" + draw(st.sampled_from(["z", "aa", "...", ""]))
    elif mutation == "operands":
        shapes = shapes[:-1] if draw(st.booleans()) else shapes + [(2,)]
    dtype = draw(st.sampled_from(_HYPOTHESIS_DTYPES))
    optimize = draw(st.sampled_from([False, True, "greedy", "optimal", None, ("greedy", 4), ("optimal", 10**6)]))
    return subscripts, shapes, dtype, optimize


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(_einsum_case())
def test_random_einsums_match_numpy(case):
    subscripts, shapes, dtype, optimize = case
    ops = [_operand(s, dtype) for s in shapes]
    try:
        expected = np.einsum(subscripts, *ops)
    except Exception as exc:  # noqa: BLE001 - numpy's exception type is the reference
        with pytest.raises(type(exc)):
            po.einsum(subscripts, *ops, optimize=optimize)
        return
    _check(po.einsum(subscripts, *ops, optimize=optimize), expected)
    # a repeat may run what the first call recorded (polyopt.einsum_calls): the same result
    _check(po.einsum(subscripts, *[op.copy() for op in ops], optimize=optimize), expected)


@pytest.mark.parametrize("subscripts, shape", [
    ("ii->i", (4, 4)), ("ij->ji", (3, 4)), ("ijk->kji", (2, 3, 4)), ("ji", (3, 4)), ("ij->ij", (3, 4)),
    ("...ii->...i", (2, 3, 3)), ("iji->ij", (3, 2, 3)), ("i->i", (5,)),
])
def test_single_operand_without_sums_is_a_view_as_in_numpy(subscripts, shape):
    """numpy.einsum returns a writeable view for relabelings and diagonals (whatever dtype=
    says); po.einsum returns the same view, so writes through it reach the operand."""
    operand = _operand(shape)
    expected = np.einsum(subscripts, operand, dtype=np.float32)
    actual = po.einsum(subscripts, operand, dtype=np.float32)
    assert np.shares_memory(expected, operand) and np.shares_memory(actual, operand)
    assert (actual.shape, actual.strides, actual.dtype) == (expected.shape, expected.strides, expected.dtype)
    np.testing.assert_array_equal(actual, expected)
    actual[(0,) * actual.ndim] = 99
    assert operand.flat[0] == 99


@pytest.mark.parametrize("subscripts, ndim", [("ii->i", 2), ("ij->ji", 2), ("ijk->kji", 3), ("iji->ij", 3),
                                              ("...ii->...i", 3), ("ij->ij", 2), ("ji", 2)])
@pytest.mark.parametrize("layout", ["C", "F", "strided", "reversed", "read-only"])
def test_views_are_numpys_views_on_every_call_and_layout(subscripts, ndim, layout):
    """The view shares the operand's memory with numpy's ``base`` (the memory's owner), shape,
    strides and writeability, on the first call and on repeats (einsum_calls.ViewCall), for
    operands of any strides."""
    owner = _operand((6,) * ndim)
    operand = {"C": owner, "F": np.asfortranarray(owner), "strided": owner[(slice(None, None, 2),) * ndim],
               "reversed": owner[::-1], "read-only": owner.copy()}[layout]
    if layout == "read-only":
        operand.flags.writeable = False
    expected = np.einsum(subscripts, operand)
    for _ in range(3):
        actual = po.einsum(subscripts, operand)
        assert actual.base is expected.base and actual is not operand
        assert (actual.shape, actual.strides, actual.flags.writeable) == \
            (expected.shape, expected.strides, expected.flags.writeable)
        np.testing.assert_array_equal(actual, expected)


def test_views_keep_read_only_operands_read_only_and_sums_compute():
    operand = _operand((3, 3))
    operand.flags.writeable = False
    assert not po.einsum("ij->ji", operand).flags.writeable
    for subscripts in ("ii", "ij->i", "ii->"):  # a label is summed: a new array, as numpy's
        result = po.einsum(subscripts, operand)
        assert not np.shares_memory(result, operand)
        _check(result, np.einsum(subscripts, operand))


def test_compute_bound_contractions_get_tiles_and_register_tiles():
    """Contractions that reuse operands (matmul, batched, 'ijk,jl->ikl') compile with tiles and
    register tiles, transpositions with tiles; those that stream every array in order keep the
    untiled schedule."""
    from polyopt.einsum import default_schedule_options
    tiles = {"tile": "auto", "conflict_free_tiles": True, "register_tile": "auto"}
    registers = {"tile": "auto", "register_tile": "auto"}
    cases = [("ij,jk->ik", [(4, 5), (5, 6)], registers),
             ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)], registers),
             ("ijk,jl->ikl", [(2, 3, 4), (3, 5)], registers),
             ("ij,jk,kl->il", [(3, 4), (4, 5), (5, 6)], registers),
             ("ijk->kj", [(2, 3, 4)], tiles), ("ij,ji->ij", [(3, 3), (3, 3)], tiles),
             ("ij,ij->i", [(4, 5), (4, 5)], {}), ("ij->", [(3, 4)], {}), ("ii->", [(3, 3)], {})]
    for subscripts, shapes, expected in cases:
        assert default_schedule_options(po.einsum_kernel(subscripts, *shapes).scop) == expected, subscripts
    tiled = po.einsum_kernel("ij,jk->ik", (4, 5), (5, 6))
    assert ") mod " in str(tiled.schedule)  # tile and point loops
    assert ") mod " not in str(po.einsum_kernel("ij,ij->i", (4, 5), (4, 5)).schedule)
    chosen = po.einsum_kernel("ij,jk->ik", (4, 5), (5, 6), tile=16)
    assert "+= 16)" in chosen.c_source and chosen is not tiled
    a, b = _operand((40, 33)), _operand((33, 29))
    out = np.zeros((40, 29))
    chosen(op0=a, op1=b, out=out)
    _check(out, a @ b)


def _recorded_function(subscripts, *arrays):
    """The native function that a repeat of ``po.einsum(subscripts, *arrays)`` replays (None:
    the call was not recorded)."""
    from polyopt import einsum_calls
    key = einsum_calls.call_key((subscripts, *arrays), None, None, "K", "safe", "greedy", None, None)
    recorded = einsum_calls.recorded(key + ("exact",))
    return None if recorded is None else recorded.function


def test_small_calls_run_the_untiled_kernel_and_larger_ones_the_tiled_kernel(monkeypatch):
    """A call of at most SMALL_CALL_ITERATIONS statement instances runs its pattern's untiled
    kernel (no tile or register-tile loops: cheap to compile; at most TINY_CALL_ITERATIONS the
    program's loop order at LLVM's -O0); a larger call of the same pattern the tiled,
    register-tiled one (here at once: TILED_AFTER_ITERATIONS set to 0). All give numpy's
    results, and so does the tiled kernel called directly on small odd sizes (partial register
    tiles everywhere)."""
    from polyopt.einsum import SMALL_CALL_ITERATIONS, TINY_CALL_ITERATIONS
    monkeypatch.setattr(sys.modules["polyopt.einsum"], "TILED_AFTER_ITERATIONS", 0)
    tiny = po.einsum_kernel("ij,jk->ik", (4, 5), (5, 6), algorithm="original", llvm_level=0)
    untiled = po.einsum_kernel("ij,jk->ik", (4, 5), (5, 6), tile=None, register_tile=None)
    tiled = po.einsum_kernel("ij,jk->ik", (4, 5), (5, 6))
    assert ") mod " not in str(untiled.schedule) and ") mod " in str(tiled.schedule)
    assert tiny.schedule.algorithm == "original" and " x double>" not in tiny.optimized_ir
    for shape, kernel in [((7, 5, 3), tiny), ((30, 40, 17), untiled), ((64, 64, 17), tiled)]:
        instances = shape[0] * shape[2] * (1 + shape[1])  # zero-fill, then the sums of products
        assert instances <= TINY_CALL_ITERATIONS or kernel is not tiny
        assert (instances <= SMALL_CALL_ITERATIONS) == (kernel is not tiled)
        a, b = _operand(shape[:2]), _operand(shape[1:])
        _check(po.einsum("ij,jk->ik", a, b), a @ b)
        assert _recorded_function("ij,jk->ik", a, b) is kernel.native_function
    a, b = _operand((7, 5)), _operand((5, 3))
    out = np.zeros((7, 3))
    tiled(op0=a, op1=b, out=out)
    _check(out, a @ b)


def test_larger_calls_run_untiled_until_their_work_passes_the_bound(monkeypatch):
    """Calls above SMALL_CALL_ITERATIONS of a pattern whose tiled plan is not compiled run the
    untiled kernel (not recorded, so that a repeat counts too) until their statement instances
    add up to more than TILED_AFTER_ITERATIONS; the call that passes it and every later one run
    the tiled kernel. numpy's results throughout."""
    einsum_module = sys.modules["polyopt.einsum"]
    subscripts, shapes = "ab,bc->ac", [(64, 65), (65, 17)]  # a pattern (in float32) of this test alone
    instances = 64 * 17 * (1 + 65)
    monkeypatch.setattr(einsum_module, "TILED_AFTER_ITERATIONS", 2 * instances + 1)
    monkeypatch.setattr(einsum_module, "_UNTILED_WORK", {})
    a, b = _operand(shapes[0], np.float32), _operand(shapes[1], np.float32)
    untiled = po.einsum_kernel(subscripts, a, b, tile=None, register_tile=None)
    for call in range(4):
        _check(po.einsum(subscripts, a, b), np.einsum(subscripts, a, b))
        recorded = _recorded_function(subscripts, a, b)
        if call < 2:
            assert recorded is None and untiled.compile_times.get("codegen") is not None
        else:
            tiled = po.einsum_kernel(subscripts, a, b)
            assert ") mod " in str(tiled.schedule) and recorded is tiled.native_function
    assert not einsum_module._UNTILED_WORK


def test_a_compiled_tiled_plan_runs_from_the_first_larger_call(monkeypatch):
    """Where the tiled plan is compiled already (here by einsum_kernel; in a later process the
    disk cache holds it), the first call above SMALL_CALL_ITERATIONS runs it: no renting."""
    monkeypatch.setattr(sys.modules["polyopt.einsum"], "_UNTILED_WORK", {})
    subscripts = "kj,ik->ij"
    a, b = _operand((48, 40), np.int32), _operand((44, 48), np.int32)
    tiled = po.einsum_kernel(subscripts, a, b)
    _check(po.einsum(subscripts, a, b), np.einsum(subscripts, a, b))
    assert _recorded_function(subscripts, a, b) is tiled.native_function


def test_a_tiled_plan_in_the_disk_cache_runs_from_the_first_larger_call(monkeypatch):
    """A later process (here: this one with its in-memory caches emptied) finds the tiled plan
    that an earlier one compiled in the disk cache, and its first larger call runs it."""
    from polyopt.targets import disk_cache
    from polyopt.targets.cache import COMPILED
    if not disk_cache.enabled():
        pytest.skip("the disk cache is off (POLYOPT_CACHE=0)")
    einsum_module = sys.modules["polyopt.einsum"]
    monkeypatch.setattr(einsum_module, "_UNTILED_WORK", {})
    subscripts = "xy,zx->zy"
    a, b = _operand((50, 41), np.int64), _operand((39, 50), np.int64)
    po.einsum_kernel(subscripts, a, b)  # compiled and stored
    COMPILED.clear()
    einsum_module._plan.cache_clear()
    _check(po.einsum(subscripts, a, b), np.einsum(subscripts, a, b))
    tiled = po.einsum_kernel(subscripts, a, b)
    assert "disk" in tiled.compile_times and _recorded_function(subscripts, a, b) is tiled.native_function


def test_llvm_level_of_the_tiny_plan_is_checked():
    """po.compile's llvm_level (the -O0 of po.einsum's tiny calls) is one of LLVM's levels, and a
    CPU option."""
    from polyopt.errors import ArgumentError
    scop = po.einsum_kernel("i,i->", (3,), (3,)).scop
    for bad in (4, -1, "1"):
        with pytest.raises(ArgumentError, match="llvm_level"):
            po.compile(scop, llvm_level=bad)
    with pytest.raises(ArgumentError, match="llvm_level"):
        po.compile(scop, target="cuda", llvm_level=1)


@pytest.mark.parametrize("num_threads", [1, 2, None])
def test_num_threads_gives_the_same_result(num_threads):
    a, b = _operand((300, 40)), _operand((40, 300))  # above the one-thread threshold
    _check(po.einsum("ij,jk->ik", a, b, num_threads=num_threads), a @ b)
    with pytest.raises(ValueError, match="num_threads"):
        po.einsum("ij,jk->ik", a, b, num_threads=0)


def test_einsum_sums_are_reassociated_like_numpys_and_kernels_keep_their_order():
    """po.einsum lets LLVM keep partial sums in vector lanes (numpy.einsum's loops do the same);
    po.compile keeps the program's order unless asked."""
    kernel = po.einsum_kernel("ij,ij->i", (5, 5), (5, 5))
    assert "fadd reassoc" in kernel.optimized_ir
    assert "reassoc" not in po.compile(kernel.scop).optimized_ir
    assert "fadd reassoc" in po.compile(kernel.scop, reassociate=True).optimized_ir
    # a register tile's many sums keep their order and FMAs (vectorized across its columns)
    assert "reassoc" not in po.einsum_kernel("ij,jk->ik", (5, 5), (5, 5)).optimized_ir
    a, b = _operand((300, 257)), _operand((300, 257))
    _check(po.einsum("ij,ij->i", a, b), np.einsum("ij,ij->i", a, b))


def test_long_sums_have_numpys_accuracy():
    """A sum along the innermost loop of a step that streams its operands runs in blocks of
    SUM_BLOCK terms whose partial sums join the result one by one, as numpy.einsum sums its
    8192-element buffers: a million equal terms 1 + 8196 eps (each one's last bits are lost
    when added to a large accumulator) sum as accurately as numpy's. Matmul-shaped steps keep
    their tiled sums."""
    import math
    from polyopt.frontends.einsum import SUM_BLOCK
    x = np.full(10**6, 1 + 8196 * np.finfo(float).eps)
    exact = math.fsum(x)
    numpy_error = abs(np.einsum("i->", x) - exact)
    for subscripts, ops in [("i->", [x]), ("i,i->", [x, np.ones_like(x)]), ("ij->i", [x.reshape(2, -1)]),
                            ("ij,ij->i", [x.reshape(4, -1), np.ones((4, x.size // 4))])]:
        result = po.einsum(subscripts, *ops, num_threads=1)
        total = float(np.sum(result, dtype=np.float64)) if np.ndim(result) else float(result)
        assert abs(total - exact) <= 4 * numpy_error + 1e-9, subscripts
    long = (SUM_BLOCK + 1,)  # sums no longer than a block are the same sum unblocked
    assert "p0" in po.einsum_kernel("i,i->", long, long).scop.arrays and SUM_BLOCK == 8192
    assert "p0" not in po.einsum_kernel("i,i->", (9,), (9,)).scop.arrays
    assert "p0" not in po.einsum_kernel("ij,jk->ik", (4, SUM_BLOCK + 1), (SUM_BLOCK + 1, 6)).scop.arrays
    small = _operand((SUM_BLOCK + 5,))  # a block and a partial one
    _check(po.einsum("i->", small), np.einsum("i->", small))
    _check(po.einsum("i->", small[:0]), np.einsum("i->", small[:0]))



def test_many_short_rows_sum_as_one_run_like_numpy():
    """Summed labels adjacent in memory are one long sum, as numpy's iterator coalesces them:
    'ij->' over a million rows of 3 sums 3e6 terms in numpy's blocks (it summed 3-term rows
    into one accumulator, 1e-13 off); first call and repeat; a transposed or strided operand,
    whose dimensions do not merge, still sums right."""
    import math
    x = np.full((10**6, 3), 1 + 8196 * np.finfo(float).eps)
    exact = math.fsum(x.ravel())
    numpy_error = abs(np.einsum("ij->", x) - exact)
    for subscripts, ops in [("ij->", [x]), ("ij,ij->", [x, np.ones_like(x)]),
                            ("bij->b", [x.reshape(2, -1, 3)])]:
        for _ in range(2):
            total = float(np.sum(po.einsum(subscripts, *ops, num_threads=1)))
            assert abs(total - exact) <= 4 * numpy_error + 1e-9, subscripts
    a = _operand((3, 5, 7, 2))
    for subscripts in ["bijk->b", "bijk->k", "bijk->bk", "bijk,bijk->i"]:
        ops = [a, a] if "," in subscripts else [a]
        _check(po.einsum(subscripts, *ops), np.einsum(subscripts, *ops))
    for view in [a.transpose(0, 2, 1, 3), a[:, ::2]]:
        _check(po.einsum("bijk->b", view), np.einsum("bijk->b", view))

@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_data_is_compiled_as_real_and_imaginary_parts(dtype):
    """Complex einsums are compiled: every array is its (real, imaginary) pairs, each statement
    one per part; real operands mixed in scale both parts."""
    shapes = {"ij,jk->ik": [(7, 5), (5, 6)], "bij,bjk->bik": [(2, 4, 3), (2, 3, 5)], "ijk->kj": [(3, 4, 5)],
              "i,i->": [(9,), (9,)], "ij,jk,kl->il": [(3, 4), (4, 5), (5, 2)], "i,j->ij": [(3,), (4,)]}
    for subscripts, operand_shapes in shapes.items():
        ops = [_operand(s, dtype) for s in operand_shapes]
        kernel = po.einsum_kernel(subscripts, *ops, optimize=len(ops) > 2)
        assert isinstance(kernel, po.CompiledKernel) and all(
            array.shape[-1] == "2" for array in kernel.scop.arrays.values())
        _check(po.einsum(subscripts, *ops, optimize=len(ops) > 2), np.einsum(subscripts, *ops))
    mixed = [_operand((6, 4), dtype), _operand((4, 3), np.float64)]
    _check(po.einsum("ij,jk->ik", *mixed), np.einsum("ij,jk->ik", *mixed))
    out = np.zeros((6, 3), dtype=np.complex128)
    assert po.einsum("ij,jk->ik", *mixed, out=out) is out
    _check(out, np.einsum("ij,jk->ik", *mixed).astype(np.complex128))


@pytest.mark.skipif(po.types.f80 is None, reason="numpy's longdouble is not x87 extended precision here")
def test_longdouble_is_compiled_in_extended_precision():
    """longdouble sums are compiled in x86_fp80 and keep its 64-bit mantissa (the double
    nearest 1/3, times 3, minus 1 is -2**-54 there and rounds to 0 in float64); clongdouble as
    pairs of it."""
    third, three = np.array([1 / 3, 1 / 3], np.longdouble), np.array([3, 0], np.longdouble)
    kernel = po.einsum_kernel("i,i->", third, three)
    assert isinstance(kernel, po.CompiledKernel) and "x86_fp80" in kernel.optimized_ir
    assert "long double" in kernel.c_source
    result = po.einsum("i,i->", third, three)
    assert result.dtype == np.longdouble and result - 1 == np.einsum("i,i->", third, three) - 1 != 0
    ops = [_operand((4, 3), np.clongdouble), _operand((3, 5), np.clongdouble)]
    assert isinstance(po.einsum_kernel("ij,jk->ik", *ops), po.CompiledKernel)
    _check(po.einsum("ij,jk->ik", *ops), np.einsum("ij,jk->ik", *ops))
    with pytest.raises(po.TargetUnavailableError, match="x87"):
        po.einsum_kernel("i,i->", third, three, target="cuda")


def test_default_contraction_order_is_greedy_and_false_sums_in_one_nest():
    """The issue asks for greedy by default (numpy.einsum's default, False, is one nest)."""
    shapes = [(3, 4), (4, 5), (5, 2)]
    greedy = po.einsum_kernel("ij,jk,kl->il", *shapes)
    assert greedy is po.einsum_kernel("ij,jk,kl->il", *shapes, optimize="greedy") and "t0" in greedy.scop.arrays
    one_nest = po.einsum_kernel("ij,jk,kl->il", *shapes, optimize=False)
    assert "t0" not in one_nest.scop.arrays and len(one_nest.scop.statements) == 2
    ops = [_operand(s) for s in shapes]
    _check(po.einsum("ij,jk,kl->il", *ops), np.einsum("ij,jk,kl->il", *ops))


class _FakeCpuTensor:
    """Enough of a PyTorch CPU tensor for po.einsum's view of it (a numpy array inside)."""

    requires_grad = False
    device = type("Device", (), {"type": "cpu"})()

    def __init__(self, array, conj=False):
        self.array, self.dtype, self.conj = array, array.dtype, conj

    def detach(self):
        return self

    def resolve_conj(self):
        return _FakeCpuTensor(np.conj(self.array)) if self.conj else self

    def resolve_neg(self):
        return self

    def is_conj(self):
        return self.conj

    def is_neg(self):
        return False

    def numpy(self):
        return self.array


_FakeCpuTensor.__module__ = "torch"  # (what polyopt looks at)


def test_einsum_on_cpu_tensors_returns_tensors(monkeypatch):
    """PyTorch CPU tensors, as torch.einsum takes them: computed on numpy views of their memory,
    the result a tensor on the result's memory (``torch.from_numpy``), ``out=`` written in
    place, numbers and numpy arrays beside them; a conjugate-bit ``out`` refused."""
    fake_torch = type(sys)("torch")
    fake_torch.bfloat16, fake_torch.int16 = "bfloat16", "int16"
    fake_torch.from_numpy = _FakeCpuTensor
    fake_torch.is_grad_enabled = lambda: True
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((5, 6)), rng.standard_normal((6, 7))
    result = po.einsum("ij,jk->ik", _FakeCpuTensor(a), _FakeCpuTensor(b))
    assert isinstance(result, _FakeCpuTensor) and np.allclose(result.array, a @ b)
    assert np.allclose(po.einsum("ij,jk->ik", _FakeCpuTensor(a), b).array, a @ b)  # a numpy operand beside
    assert np.isclose(po.einsum("ij,ij->", _FakeCpuTensor(a), _FakeCpuTensor(a)).array, (a * a).sum())  # 0-d
    out = _FakeCpuTensor(np.zeros((5, 7)))
    assert po.einsum("ij,jk->ik", _FakeCpuTensor(a), _FakeCpuTensor(b), out=out) is out
    assert np.allclose(out.array, a @ b)
    with pytest.raises(ArgumentTypeError, match="conjugate or negative bit"):
        po.einsum("ij,jk->ik", a, b, out=_FakeCpuTensor(np.zeros((5, 7)), conj=True))
    tracked = _FakeCpuTensor(a)
    tracked.requires_grad = True
    with pytest.raises(ArgumentTypeError, match="requires grad"):
        po.einsum("ij,jk->ik", tracked, b)
    tracked_out = _FakeCpuTensor(np.zeros((5, 7)))
    tracked_out.requires_grad = True
    with pytest.raises(ArgumentTypeError, match="einsum: out= is a PyTorch tensor that requires grad"):
        po.einsum("ij,jk->ik", a, b, out=tracked_out)


def test_einsum_on_real_cpu_tensors():
    """The same with torch itself (where it is installed): float32 and transposed (strided)
    tensors, bfloat16 through ml_dtypes, ``out=``; the result shares the memory torch sees."""
    torch = pytest.importorskip("torch")
    a, b = torch.randn(5, 6), torch.randn(7, 6).T  # b a strided view
    result = po.einsum("ij,jk->ik", a, b)
    assert isinstance(result, torch.Tensor) and result.dtype == torch.float32
    torch.testing.assert_close(result, a @ b, rtol=1e-5, atol=1e-5)
    out = torch.zeros(5, 7)
    assert po.einsum("ij,jk->ik", a, b, out=out) is out
    torch.testing.assert_close(out, a @ b, rtol=1e-5, atol=1e-5)
    if po.bf16.numpy.kind != "u":
        half = po.einsum("ij,jk->ik", a.to(torch.bfloat16), b.to(torch.bfloat16))
        assert half.dtype == torch.bfloat16
        torch.testing.assert_close(half.float(), a.to(torch.bfloat16).float() @ b.to(torch.bfloat16).float(),
                                   rtol=2e-2, atol=5e-2)
    with pytest.raises(ArgumentTypeError, match="requires grad"):
        po.einsum("ij,jk->ik", a.requires_grad_(), b)
