"""Repeated po.einsum calls (polyopt.einsum_calls): a call like an earlier one skips the checks
and argument binding, and must give exactly what the full path gives."""
from __future__ import annotations

import numpy as np
import pytest

import polyopt as po
from polyopt import einsum_calls


@pytest.fixture(autouse=True)
def _fresh_record():
    einsum_calls.clear()
    yield
    einsum_calls.clear()


def _rng(seed: int = 0):
    return np.random.default_rng(seed)


def test_a_repeat_runs_the_recorded_kernel_and_matches_numpy():
    a, b = _rng().random((30, 20)), _rng(1).random((20, 40))
    first = po.einsum("ij,jk->ik", a, b)
    assert len(einsum_calls._CALLS) == 1
    (call,) = einsum_calls._CALLS.values()
    assert isinstance(call, einsum_calls.KernelCall) and call.params == (30, 20, 40)
    second = po.einsum("ij,jk->ik", a, b)
    np.testing.assert_allclose(second, a @ b, rtol=1e-12)
    assert second is not first and np.array_equal(first, second)
    c, d = _rng(2).random((30, 20)), _rng(3).random((20, 40))  # same key, other arrays
    np.testing.assert_allclose(po.einsum("ij,jk->ik", c, d), c @ d, rtol=1e-12)


def test_a_repeat_into_out_that_overlaps_an_operand_takes_the_full_path():
    a, b = _rng().random((16, 16)), _rng(1).random((16, 16))
    out = np.empty((16, 16))
    po.einsum("ij,jk->ik", a, b, out=out)  # recorded
    expected = a @ b
    assert po.einsum("ij,jk->ik", a, b, out=a) is a  # same key; out is operand 0
    np.testing.assert_allclose(a, expected, rtol=1e-12)


def test_repeats_with_temporaries_scalars_and_threads():
    x, y, z = _rng().random((8, 9)), _rng(1).random((9, 10)), _rng(2).random((10, 11))
    for _ in range(2):
        np.testing.assert_allclose(po.einsum("ij,jk,kl->il", x, y, z), x @ y @ z, rtol=1e-12)
    v = _rng(3).random(50)
    results = [po.einsum("i,i->", v, v) for _ in range(2)]
    assert all(type(r) is np.float64 for r in results) and results[0] == results[1]
    assert np.isclose(results[0], v @ v)
    for threads in (1, 2, 1):
        np.testing.assert_allclose(po.einsum("ij,jk->ik", x, y, num_threads=threads), x @ y, rtol=1e-12)
    assert len(einsum_calls._CALLS) == 4  # the chain, the dot, one per thread count


def test_a_repeated_view_is_numpys_view():
    a = _rng().random((6, 6))
    for _ in range(2):
        view = po.einsum("ii->i", a)
        assert np.shares_memory(view, a) and view.flags.writeable
        np.testing.assert_array_equal(view, np.einsum("ii->i", a))
    assert isinstance(next(iter(einsum_calls._CALLS.values())), einsum_calls.ViewCall)
    view[0] = 42.0
    assert a[0, 0] == 42.0
    frozen = a.copy()
    frozen.flags.writeable = False
    for _ in range(2):
        assert not po.einsum("ii->i", frozen).flags.writeable
    t = _rng(1).random((2, 3, 4))
    for _ in range(2):
        np.testing.assert_array_equal(po.einsum("ijk->kji", t), np.einsum("ijk->kji", t))
    strided = _rng(2).random((8, 8))[::2, 1::2]  # not C-contiguous: recorded as a view too
    for _ in range(2):
        view = po.einsum("ii->i", strided)
        assert view.base is np.einsum("ii->i", strided).base and view.strides == (144,)
    assert sum(isinstance(call, einsum_calls.ViewCall) for call in einsum_calls._CALLS.values()) == 3


def test_calls_that_convert_are_not_recorded():
    a32, b64 = _rng().random((5, 5)).astype(np.float32), _rng(1).random((5, 5))
    for _ in range(2):
        np.testing.assert_allclose(po.einsum("ij,jk->ik", a32, b64), a32 @ b64, rtol=1e-6)
        np.testing.assert_allclose(po.einsum("ij,jk->ik", b64, b64.T), b64 @ b64.T, rtol=1e-12)
        z = (b64 + 1j * b64).astype(np.complex128)
        np.testing.assert_allclose(po.einsum("ij,jk->ik", z, z), z @ z, rtol=1e-12)
    assert einsum_calls._CALLS == {}  # mixed dtypes, a transposed operand, complex


def test_a_repeat_lays_its_result_out_as_the_first_call():
    """order='F' and 'K' layouts other than C are recorded with the result's strides."""
    a, b = _rng().random((5, 6)), _rng(1).random((6, 7))
    for subscripts, order in [("ij,jk->ik", "F"), ("ij,jk->ki", "K")]:
        expected = np.einsum(subscripts, a, b, order=order)
        for _ in range(2):
            result = po.einsum(subscripts, a, b, order=order)
            assert result.strides == expected.strides and result.base is None
            np.testing.assert_allclose(result, expected, rtol=1e-12)
    assert all(isinstance(call, einsum_calls.KernelCall) and call.strides is not None
               for call in einsum_calls._CALLS.values()) and len(einsum_calls._CALLS) == 2


def test_the_record_is_bounded():
    v = np.ones(3)
    for n in range(einsum_calls.MAX_CALLS + 5):
        einsum_calls.record(("key", n), einsum_calls.ViewCall((), (0,)))
    assert len(einsum_calls._CALLS) == einsum_calls.MAX_CALLS
    assert ("key", 0) not in einsum_calls._CALLS and ("key", einsum_calls.MAX_CALLS + 4) in einsum_calls._CALLS
    assert po.einsum("i->", v) == 3.0


def test_calls_with_an_unhashable_option_are_not_recorded():
    a = _rng().random((5, 5))
    path = ["einsum_path", (0, 1)]
    for _ in range(2):
        np.testing.assert_allclose(po.einsum("ij,jk->ik", a, a, optimize=path), a @ a, rtol=1e-12)
    assert einsum_calls._CALLS == {}


_REPEATED_CONTRACTIONS_CHILD = r'''
import gc
import numpy as np
import polyopt as po

rng = np.random.default_rng(7)
cases = [  # subscripts, label sizes, options
    ("bi,ij,bj->b", dict(b=5, i=7, j=7), {}),
    ("ij,jk,kl,lm->im", dict.fromkeys("ijklm", 8), {}),
    ("acdf,jbje,gihb,hfac,gfac,gifabc,hfac", dict(zip("abcdefghij", (2, 3, 2, 3, 2, 2, 3, 2, 2, 3))),
     {"optimize": "greedy"}),
]
for subscripts, size, options in cases:
    shapes = [tuple(size[c] for c in term) for term in subscripts.split("->")[0].split(",")]
    for repeat in range(6):
        # fresh operands each time: the earlier ones are freed, their memory reused
        operands = [rng.random(shape) for shape in shapes]
        got = po.einsum(subscripts, *operands, **options)
        want = np.einsum(subscripts, *operands, **options)
        assert np.allclose(got, want, rtol=1e-10, atol=1e-12), (subscripts, repeat)
        del operands, got
        gc.collect()
print("repeated contractions ok")
'''


def test_repeated_multi_operand_contractions_in_a_child_process():
    """Temporaries of a recorded multi-operand call stay alive while the native code writes
    them (a use-after-free here aborted or silently corrupted the heap). A child process runs
    the calls, so a crash fails this test instead of ending the test run."""
    import subprocess
    import sys
    child = subprocess.run([sys.executable, "-c", _REPEATED_CONTRACTIONS_CHILD],
                           capture_output=True, text=True, timeout=600)
    assert child.returncode == 0, child.stderr[-2000:]
    assert "repeated contractions ok" in child.stdout


def test_the_fast_pointer_read_agrees_with_numpy_and_leaves_subclasses_alone():
    base = np.arange(24.0).reshape(4, 6)
    arrays = [base, base[1:], base[:, 2:], base.T, np.empty(0), np.zeros(()), np.arange(5)[::-1]]
    for array in arrays:
        assert einsum_calls._address(array) == array.__array_interface__["data"][0]

    class Tagged(np.ndarray):
        pass
    tagged = base.view(Tagged)
    assert einsum_calls._address(tagged) == tagged.__array_interface__["data"][0]
    assert einsum_calls.call_key(("ij->ji", tagged), None, None, "K", "safe", False, "cpu", None) is None


_MANY_OPERAND_REPEATS_CHILD = r'''
import numpy as np
from hypothesis import given, settings, strategies as st
import polyopt as po

LETTERS = "abcdeF"


@st.composite
def case(draw):
    """4 to 6 operands of 1-3 labels each (sizes 1-3, some size-1 broadcast), an explicit or
    implicit output, a dtype and an optimize mode."""
    sizes = {l: draw(st.integers(1, 3)) for l in LETTERS}
    terms, shapes = [], []
    for _ in range(draw(st.integers(4, 6))):
        labels = draw(st.lists(st.sampled_from(LETTERS), min_size=1, max_size=3))
        terms.append("".join(labels))
        shapes.append(tuple(1 if draw(st.integers(0, 5)) == 0 else sizes[l] for l in labels))
    subscripts = ",".join(terms)
    used = sorted(set(subscripts) - {","})
    if draw(st.booleans()):
        subscripts += "->" + "".join(draw(st.permutations(used))[:draw(st.integers(0, len(used)))])
    dtype = draw(st.sampled_from([np.float64, np.int64, np.complex128, np.float32]))
    optimize = draw(st.sampled_from([False, True, "greedy", "optimal", ("greedy", 8), None]))
    return subscripts, shapes, dtype, optimize


rng = np.random.default_rng(3)


def operand(shape, dtype):
    values = rng.integers(-3, 4, size=shape)
    return (values + 1j * rng.integers(-3, 4, size=shape) if np.dtype(dtype).kind == "c" else values).astype(dtype)


@settings(max_examples=25, deadline=None, derandomize=True, database=None)
@given(case())
def check(example):
    subscripts, shapes, dtype, optimize = example
    for repeat in range(3):  # a repeat runs what the first call recorded (einsum_calls)
        ops = [operand(shape, dtype) for shape in shapes]  # fresh arrays each time
        try:
            expected = np.einsum(subscripts, *ops)
        except ValueError:  # sizes that do not broadcast: both refuse
            try:
                po.einsum(subscripts, *ops, optimize=optimize)
            except ValueError:
                return
            raise AssertionError(f"{subscripts} {shapes}: numpy refuses, polyopt does not")
        actual = po.einsum(subscripts, *ops, optimize=optimize)
        assert np.asarray(actual).dtype == expected.dtype and np.shape(actual) == expected.shape, example
        tolerance = 1e-4 if dtype == np.float32 else 1e-12
        assert np.allclose(actual, expected, rtol=tolerance, atol=tolerance), (example, repeat)


check()
print("many-operand repeats ok")
'''


def test_random_many_operand_einsums_repeated_with_fresh_operands_in_a_child_process():
    """Property test: 4-6 operands, every optimize mode, each case called three times with fresh
    operand arrays (the repeats run the recorded native call), against numpy.einsum. A child
    process runs it, so a crash of a repeated call fails this test instead of the test run."""
    import subprocess
    import sys
    child = subprocess.run([sys.executable, "-c", _MANY_OPERAND_REPEATS_CHILD],
                           capture_output=True, text=True, timeout=900)
    assert child.returncode == 0, (child.stdout + child.stderr)[-3000:]
    assert "many-operand repeats ok" in child.stdout
