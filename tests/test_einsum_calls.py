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


def test_calls_that_convert_are_not_recorded():
    a32, b64 = _rng().random((5, 5)).astype(np.float32), _rng(1).random((5, 5))
    for _ in range(2):
        np.testing.assert_allclose(po.einsum("ij,jk->ik", a32, b64), a32 @ b64, rtol=1e-6)
        np.testing.assert_allclose(po.einsum("ij,jk->ik", b64, b64.T), b64 @ b64.T, rtol=1e-12)
        c = po.einsum("ij,jk->ik", b64, b64, order="F")
        assert c.flags.f_contiguous
        z = (b64 + 1j * b64).astype(np.complex128)
        np.testing.assert_allclose(po.einsum("ij,jk->ik", z, z), z @ z, rtol=1e-12)
    assert einsum_calls._CALLS == {}  # mixed dtypes, a transposed operand, order F, complex


def test_the_record_is_bounded():
    v = np.ones(3)
    for n in range(einsum_calls.MAX_CALLS + 5):
        einsum_calls.record(("key", n), einsum_calls.ViewCall((3,), (8,)))
    assert len(einsum_calls._CALLS) == einsum_calls.MAX_CALLS
    assert ("key", 0) not in einsum_calls._CALLS and ("key", einsum_calls.MAX_CALLS + 4) in einsum_calls._CALLS
    assert po.einsum("i->", v) == 3.0


def test_calls_with_an_unhashable_option_are_not_recorded():
    a = _rng().random((5, 5))
    path = ["einsum_path", (0, 1)]
    for _ in range(2):
        np.testing.assert_allclose(po.einsum("ij,jk->ik", a, a, optimize=path), a @ a, rtol=1e-12)
    assert einsum_calls._CALLS == {}
