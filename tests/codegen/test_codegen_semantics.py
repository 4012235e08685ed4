"""Compiled code (every algorithm) computes what the reference interpreter and numpy compute:
Python's arithmetic semantics, math functions, control flow, element types and loop shapes."""
from __future__ import annotations

import math
import re
import shutil
import subprocess

import numpy as np
import pytest

import polyopt as po
from polyopt import f32, f64, i32, i64
from conftest import ALGORITHMS, run_everywhere
from polyopt.targets.cache import clear_cache

# ----- arithmetic with Python semantics ---------------------------------------------------------


@po.kernel
def int_floor_mod(A: i64["N"], B: i64["N"], Q: i64["N"], R: i64["N"], D: f64["N"]):
    for i in range(N):
        Q[i] = A[i] // B[i]
        R[i] = A[i] % B[i]
        D[i] = A[i] / B[i]


@po.kernel
def int32_floor_mod(A: i32["N"], B: i32["N"], Q: i32["N"], R: i32["N"]):
    for i in range(N):
        Q[i] = A[i] // B[i] + (i - 3) // 2
        R[i] = A[i] % B[i] + (i - 3) % 2 * 100


@po.kernel
def float_floor_mod(A: f64["N"], B: f64["N"], Q: f64["N"], R: f64["N"]):
    for i in range(N):
        Q[i] = A[i] // B[i]
        R[i] = A[i] % B[i]


@po.kernel
def iterator_division(A: f64["N"], Q: i64["N"], R: i64["N"]):
    for i in range(N):
        A[i] = (i - 4) / 3
        Q[i] = (i - 4) // 3 + (4 - i) // -3
        R[i] = (i - 4) % 3 + (i - 4) % -3 * 10


def _int_operands(dtype):
    a = np.array([7, -7, 7, -7, 0, 1, -1, 13, -13, 6, -6, 100], dtype=dtype)
    b = np.array([2, 2, -2, -2, 3, -3, 3, 5, -5, 3, -3, -7], dtype=dtype)
    return a, b


def test_integer_floor_division_and_modulo():
    a, b = _int_operands(np.int64)
    z = np.zeros_like(a)
    _, _, q, r, d = run_everywhere(int_floor_mod, a, b, z, z, np.zeros(len(a)))
    np.testing.assert_array_equal(q, [x // y for x, y in zip(a.tolist(), b.tolist())])
    np.testing.assert_array_equal(r, [x % y for x, y in zip(a.tolist(), b.tolist())])
    np.testing.assert_array_equal(d, [x / y for x, y in zip(a.tolist(), b.tolist())])


def test_int32_floor_division_and_modulo():
    a, b = _int_operands(np.int32)
    z = np.zeros_like(a)
    _, _, q, r = run_everywhere(int32_floor_mod, a, b, z, z)
    n = len(a)
    np.testing.assert_array_equal(q, [x // y + (i - 3) // 2 for i, (x, y) in enumerate(zip(a.tolist(), b.tolist()))])
    np.testing.assert_array_equal(r, [x % y + (i - 3) % 2 * 100 for i, (x, y) in enumerate(zip(a.tolist(), b.tolist()))])
    assert q.dtype == np.int32 and len(q) == n


def test_float_floor_division_and_modulo():
    a = np.array([7.5, -7.5, 7.5, -7.5, 1.0, -1.0, 0.0, -0.0, 5.0, -4.0, 1e-300, 3.0])
    b = np.array([2.0, 2.0, -2.0, -2.0, 0.1, 0.1, 3.0, 3.0, -2.5, 2.0, 7.0, -1e-300])
    z = np.zeros_like(a)
    _, _, q, r = run_everywhere(float_floor_mod, a, b, z, z, rtol=0)
    expected_q = [x // y for x, y in zip(a.tolist(), b.tolist())]
    expected_r = [x % y for x, y in zip(a.tolist(), b.tolist())]
    np.testing.assert_array_equal(q, expected_q)
    np.testing.assert_array_equal(r, expected_r)
    assert q[4] == 9.0 and r[4] == pytest.approx(0.1 - 1e-16, abs=1e-15)  # 1.0 // 0.1 == 9.0
    # the sign of zero results follows Python too
    np.testing.assert_array_equal(np.signbit(q), np.signbit(expected_q))
    np.testing.assert_array_equal(np.signbit(r), np.signbit(expected_r))


def test_float32_floor_division_and_modulo():
    a = np.array([7.5, -7.5, 7.5, -7.5, 1.0, -1.0, 0.0, 5.0, -4.0], dtype=np.float32)
    b = np.array([2.0, 2.0, -2.0, -2.0, 0.1, 0.1, 3.0, -2.5, 2.0], dtype=np.float32)
    z = np.zeros_like(a)
    _, _, q, r = run_everywhere(float_floor_mod.with_dtype("f32"), a, b, z, z, rtol=0)
    assert q.dtype == np.float32
    np.testing.assert_array_equal(q, np.floor_divide(a, b))   # numpy follows Python's rules
    np.testing.assert_array_equal(r, np.mod(a, b))
    np.testing.assert_array_equal(np.signbit(r), np.signbit(np.mod(a, b)))


def test_division_and_modulo_of_iterators():
    n = 11
    a, q, r = run_everywhere(iterator_division, np.zeros(n), np.zeros(n, np.int64), np.zeros(n, np.int64))
    np.testing.assert_array_equal(a, [(i - 4) / 3 for i in range(n)])
    np.testing.assert_array_equal(q, [(i - 4) // 3 + (4 - i) // -3 for i in range(n)])
    np.testing.assert_array_equal(r, [(i - 4) % 3 + (i - 4) % -3 * 10 for i in range(n)])


@po.kernel
def min_max(A: f64["N"], B: f64["N"], L: f64["N"], H: f64["N"], I: i64["N"], J: i64["N"], K: i64["N"]):
    for i in range(N):
        L[i] = min(A[i], B[i])
        H[i] = max(A[i], B[i])
        K[i] = min(I[i], J[i], i) + max(I[i], 2) * 100
        A[i] = max(A[i], 0)


def test_min_max_python_semantics():
    nan = float("nan")
    a = np.array([1.0, 3.0, nan, 2.0, 0.0, -0.0, -1.5, nan])
    b = np.array([2.0, -3.0, 1.0, nan, -0.0, 0.0, -1.5, nan])
    ii = np.array([5, -2, 0, 7, 1, 1, -9, 4])
    jj = np.array([1, 3, 0, -7, 2, 0, 9, 4])
    n = len(a)
    out = run_everywhere(min_max, a, b, np.zeros(n), np.zeros(n), ii, jj, np.zeros(n, np.int64), rtol=0)
    new_a, _, low, high, _, _, k = out
    exp_low = [min(x, y) for x, y in zip(a.tolist(), b.tolist())]
    exp_high = [max(x, y) for x, y in zip(a.tolist(), b.tolist())]
    np.testing.assert_array_equal(low, exp_low)
    np.testing.assert_array_equal(high, exp_high)
    np.testing.assert_array_equal(np.signbit(low), np.signbit(exp_low))   # min(0.0, -0.0) is 0.0
    np.testing.assert_array_equal(np.signbit(high), np.signbit(exp_high))
    np.testing.assert_array_equal(k, [min(x, y, i) + max(x, 2) * 100
                                      for i, (x, y) in enumerate(zip(ii.tolist(), jj.tolist()))])
    np.testing.assert_array_equal(new_a, [max(x, 0) for x in a.tolist()])


# ----- math functions and powers ------------------------------------------------------------------


@po.kernel
def math_functions(X: f64["N"], Y: f64["N", "9"]):
    for i in range(N):
        Y[i, 0] = sqrt(X[i])
        Y[i, 1] = exp(X[i])
        Y[i, 2] = log(X[i])
        Y[i, 3] = sin(X[i])
        Y[i, 4] = cos(X[i])
        Y[i, 5] = tanh(X[i] - 2.0)
        Y[i, 6] = abs(1.0 - X[i])
        Y[i, 7] = pow(X[i], 1.7)
        Y[i, 8] = floor(X[i] * 3.0 - 4.0)


def _math_reference(x):
    return np.stack([np.sqrt(x), np.exp(x), np.log(x), np.sin(x), np.cos(x), np.tanh(x - 2.0),
                     np.abs(1.0 - x), x ** 1.7, np.floor(x * 3.0 - 4.0)], axis=1)


def test_math_functions_f64(rng):
    x = rng.random(20) * 3 + 0.01
    _, y = run_everywhere(math_functions, x, np.zeros((20, 9)), rtol=1e-14)
    np.testing.assert_allclose(y, _math_reference(x), rtol=1e-14, atol=1e-15)


def test_math_functions_f32(rng):
    x = (rng.random(20) * 3 + 0.01).astype(np.float32)
    k32 = math_functions.with_dtype(f32)
    _, y = run_everywhere(k32, x, np.zeros((20, 9), np.float32), rtol=2e-6)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, _math_reference(x.astype(np.float64)), rtol=2e-6, atol=2e-6)


@po.kernel
def math_on_integers(I: i64["N"], Y: f64["N", "4"], J: i64["N"]):
    for i in range(N):
        Y[i, 0] = sqrt(I[i])
        Y[i, 1] = exp(I[i] * 0.1)
        Y[i, 2] = floor(I[i] / 4)
        Y[i, 3] = pow(I[i], 2)
        J[i] = abs(I[i]) + floor(I[i])


def test_math_functions_on_integers():
    ints = np.arange(0, 12, dtype=np.int64)
    _, y, j = run_everywhere(math_on_integers, ints, np.zeros((12, 4)), np.zeros(12, np.int64), rtol=1e-14)
    x = ints.astype(float)
    np.testing.assert_allclose(y, np.stack([np.sqrt(x), np.exp(x * 0.1), np.floor(x / 4), x ** 2], 1), rtol=1e-14)
    np.testing.assert_array_equal(j, 2 * ints)
    neg = -np.arange(0, 5, dtype=np.int64)
    _, _, j = run_everywhere(math_on_integers, neg, np.zeros((5, 4)), np.zeros(5, np.int64), rtol=1e-14)
    np.testing.assert_array_equal(j, np.abs(neg) + neg)


@po.kernel
def powers(X: f64["N"], E: f64["N"], Y: f64["N", "9"], I: i64["N"], K: i64["N", "3"]):
    for i in range(N):
        Y[i, 0] = X[i] ** 2
        Y[i, 1] = X[i] ** 3
        Y[i, 2] = X[i] ** 0
        Y[i, 3] = X[i] ** 1
        Y[i, 4] = X[i] ** 4
        Y[i, 5] = X[i] ** 0.5
        Y[i, 6] = X[i] ** -1
        Y[i, 7] = X[i] ** 2.5
        Y[i, 8] = X[i] ** E[i]
        K[i, 0] = I[i] ** 2
        K[i, 1] = I[i] ** 3
        K[i, 2] = (I[i] - i) ** 0


def test_powers(rng):
    x = rng.random(10) * 4 + 0.1
    e = rng.random(10) * 3 - 1
    ints = np.arange(-5, 5, dtype=np.int64)
    _, _, y, _, k = run_everywhere(powers, x, e, np.zeros((10, 9)), ints, np.zeros((10, 3), np.int64), rtol=1e-14)
    expected = np.stack([x ** 2, x ** 3, x ** 0, x, x ** 4, x ** 0.5, x ** -1, x ** 2.5, x ** e], 1)
    np.testing.assert_allclose(y, expected, rtol=1e-14)
    np.testing.assert_array_equal(k, np.stack([ints ** 2, ints ** 3, np.ones(10, np.int64)], 1))


@po.kernel
def integer_powers(I: i64["N"], K: i64["N", "3"], Y: f64["N", "3"]):
    for i in range(N):
        K[i, 0] = I[i] ** 5
        K[i, 1] = (i - 2) ** 7 + I[i] ** 1
        K[i, 2] = 2 ** i
        Y[i, 0] = (i + 1) ** -1
        Y[i, 1] = 2 ** -(i + 1) if i > 100 else 2.0 ** (-i)
        Y[i, 2] = I[i] ** I[i] if I[i] > 0 else 0.0


def test_integer_powers_follow_python_types():
    ints = np.arange(-3, 6, dtype=np.int64)
    n = len(ints)
    _, k, y = run_everywhere(integer_powers, ints, np.zeros((n, 3), np.int64), np.zeros((n, 3)), rtol=1e-15)
    xs = ints.tolist()
    np.testing.assert_array_equal(k, [[x ** 5, (i - 2) ** 7 + x, 2 ** i] for i, x in enumerate(xs)])
    np.testing.assert_allclose(y, [[(i + 1) ** -1, 2.0 ** (-i), float(x ** x) if x > 0 else 0.0]
                                   for i, x in enumerate(xs)], rtol=1e-15)
    s = integer_powers.scop.statements
    assert s[3].value.dtype is f64 and s[5].value.then.dtype is f64   # int ** negative is a float


# ----- conditions, comparisons, booleans ------------------------------------------------------------


@po.kernel
def conditionals(A: f64["N"], B: f64["N"], C: f64["N", "8"]):
    for i in range(N):
        C[i, 0] = A[i] if A[i] > B[i] else B[i] * 2.0
        C[i, 1] = 1.0 if (A[i] > 0 and not B[i] < 0) or A[i] == B[i] else 0.0
        C[i, 2] = 1.0 if 0 < A[i] <= 1 else -1.0
        C[i, 3] = 5.0 if A[i] else 6.0
        C[i, 4] = A[i] > B[i]
        C[i, 5] = (A[i] != B[i]) + (A[i] >= 0) * 2
        C[i, 6] = -(A[i] < 0)
        C[i, 7] = 3.0 if not A[i] else 4.0


def test_conditional_expressions_and_comparisons():
    a = np.array([0.5, -1.0, 0.0, 2.0, 1.0, -3.0, 0.75])
    b = np.array([0.25, -2.0, 0.0, 2.0, -1.0, 4.0, 1.0])
    n = len(a)
    _, _, c = run_everywhere(conditionals, a, b, np.zeros((n, 8)), rtol=0)
    rows = []
    for x, y in zip(a.tolist(), b.tolist()):
        rows.append([x if x > y else y * 2.0,
                     1.0 if (x > 0 and not y < 0) or x == y else 0.0,
                     1.0 if 0 < x <= 1 else -1.0,
                     5.0 if x else 6.0,
                     float(x > y),
                     float((x != y) + (x >= 0) * 2),
                     float(-(x < 0)),
                     3.0 if not x else 4.0])
    np.testing.assert_array_equal(c, rows)


@po.kernel
def guarded_division(A: i64["N"], B: i64["N"], Q: i64["N"], F: f64["N"]):
    for i in range(N):
        Q[i] = A[i] // B[i] if B[i] != 0 else -1
        F[i] = 1.0 if B[i] != 0 and A[i] % B[i] == 0 else 0.0


def test_conditional_expression_evaluates_only_the_chosen_branch():
    a = np.array([6, 7, 8, -9, 0], dtype=np.int64)
    b = np.array([3, 0, -3, 0, 0], dtype=np.int64)  # division by zero only in unchosen branches
    n = len(a)
    _, _, q, f = run_everywhere(guarded_division, a, b, np.zeros(n, np.int64), np.zeros(n), rtol=0)
    np.testing.assert_array_equal(q, [x // y if y != 0 else -1 for x, y in zip(a.tolist(), b.tolist())])
    np.testing.assert_array_equal(f, [1.0 if y != 0 and x % y == 0 else 0.0 for x, y in zip(a.tolist(), b.tolist())])


@po.kernel
def and_or_values(A: f64["N"], B: f64["N"], C: f64["N", "2"]):
    for i in range(N):
        C[i, 0] = A[i] and B[i]
        C[i, 1] = A[i] or B[i]


def test_and_or_on_numbers_yield_an_operand():
    a = np.array([0.0, 2.0, 0.0, -1.5])
    b = np.array([3.0, 4.0, 0.0, 0.0])
    _, _, c = run_everywhere(and_or_values, a, b, np.zeros((4, 2)), rtol=0)
    np.testing.assert_array_equal(c, [[x and y, x or y] for x, y in zip(a.tolist(), b.tolist())])


# ----- element types ------------------------------------------------------------------------------------


gemm = po.suite.get("gemm").kernel  # the suite's definition, shared by every test


def test_gemm_f64_matches_numpy(rng):
    C, A, B = rng.random((6, 7)), rng.random((6, 5)), rng.random((5, 7))
    out, _, _ = run_everywhere(gemm, 1.5, 1.2, C, A, B)
    np.testing.assert_allclose(out, 1.2 * C + 1.5 * A @ B, rtol=1e-13)


def test_gemm_f32_matches_numpy(rng):
    g32 = gemm.with_dtype("f32")
    C, A, B = (rng.random(s).astype(np.float32) for s in ((6, 7), (6, 5), (5, 7)))
    out, _, _ = run_everywhere(g32, 1.5, 1.2, C, A, B, rtol=1e-5)
    assert out.dtype == np.float32
    expected = 1.2 * C.astype(np.float64) + 1.5 * A.astype(np.float64) @ B.astype(np.float64)
    np.testing.assert_allclose(out, expected, rtol=1e-5)
    # the f32 kernel really computes in single precision: its result differs from the f64 one
    assert not np.array_equal(out.astype(np.float64), expected)


@po.kernel(dtype=f32)
def f32_literals(A: f64["N"], B: f64["N"]):
    for i in range(N):
        B[i] = A[i] * 0.1 + 1.0 / 3


def test_f32_kernel_keeps_literals_in_single_precision():
    a = np.arange(1, 9, dtype=np.float32)
    # (a multiply-add may be contracted into one FMA: 1 ulp from the interpreter)
    _, b = run_everywhere(f32_literals, a, np.zeros(8, np.float32), rtol=1e-6)
    expected = a * np.float32(0.1) + np.float32(1.0 / 3)
    np.testing.assert_allclose(b, expected, rtol=1e-6)
    assert b.dtype == np.float32 and not np.allclose(b, a.astype(np.float64) * 0.1 + 1.0 / 3, rtol=1e-12, atol=0)
    with pytest.raises(TypeError, match="dtype"):
        po.compile(f32_literals)(a.astype(np.float64), np.zeros(8))


@po.kernel
def integer_arrays(A: i32["N"], B: i64["N"], C: i32["N"], D: i64["N"], E: f64["N"]):
    for i in range(N):
        C[i] = A[i] * 3 - 7 + i
        D[i] = A[i] * B[i] + B[i] // 2
        E[i] = A[i] / 2 + B[i]
        A[i] = -A[i]


def test_integer_arrays():
    a = np.arange(-4, 6, dtype=np.int32)
    b = np.arange(10, 0, -1, dtype=np.int64) * 1000000007
    out = run_everywhere(integer_arrays, a, b, np.zeros(10, np.int32), np.zeros(10, np.int64), np.zeros(10), rtol=0)
    new_a, _, c, d, e = out
    assert c.dtype == np.int32 and d.dtype == np.int64
    np.testing.assert_array_equal(c, a * 3 - 7 + np.arange(10))
    np.testing.assert_array_equal(d, a.astype(np.int64) * b + b // 2)
    np.testing.assert_array_equal(e, a / 2 + b)
    np.testing.assert_array_equal(new_a, -a)


# ----- loop shapes ----------------------------------------------------------------------------------------


@po.kernel
def backward_recurrence(A: f64["N"], B: f64["N"]):
    for i in range(N - 2, -1, -1):
        A[i] = A[i + 1] * 0.5 + A[i]
    for i in range(N - 1, 0, -2):
        B[i] = B[i - 1] + A[i]


def test_negative_step_loops(rng):
    a, b = rng.random(9), rng.random(9)
    out_a, out_b = run_everywhere(backward_recurrence, a, b)
    ra, rb = a.copy(), b.copy()
    for i in range(7, -1, -1):
        ra[i] = ra[i + 1] * 0.5 + ra[i]
    for i in range(8, 0, -2):
        rb[i] = rb[i - 1] + ra[i]
    np.testing.assert_allclose(out_a, ra, rtol=1e-14)
    np.testing.assert_allclose(out_b, rb, rtol=1e-14)


@po.kernel
def strided(A: f64["N"], B: f64["N", "N"]):
    for i in range(1, N, 3):
        A[i] = A[i - 1] + 1.0
    for i in range(0, N, 2):
        for j in range(i, N, 3):
            B[i, j] = B[j, i] + i * 10 + j


def test_strided_loops(rng):
    a, b = rng.random(10), rng.random((10, 10))
    out_a, out_b = run_everywhere(strided, a, b)
    ra, rb = a.copy(), b.copy()
    for i in range(1, 10, 3):
        ra[i] = ra[i - 1] + 1.0
    for i in range(0, 10, 2):
        for j in range(i, 10, 3):
            rb[i, j] = rb[j, i] + i * 10 + j
    np.testing.assert_array_equal(out_a, ra)
    np.testing.assert_array_equal(out_b, rb)


trisolv = po.suite.get("trisolv").kernel  # the suite's definition


@po.kernel
def triangular_update(A: f64["N", "N"]):
    for i in range(N):
        for j in range(i + 1, N):
            for k in range(i, j):
                A[i, j] += A[k, j] * 0.1


def test_triangular_loops(rng):
    n = 8
    L = np.tril(rng.random((n, n))) + np.eye(n)
    b = rng.random(n)
    _, x, _ = run_everywhere(trisolv, L, np.zeros(n), b)
    np.testing.assert_allclose(L @ x, b, rtol=1e-12)
    A = rng.random((n, n))
    (out,) = run_everywhere(triangular_update, A)
    ref = A.copy()
    for i in range(n):
        for j in range(i + 1, n):
            for k in range(i, j):
                ref[i, j] += ref[k, j] * 0.1
    np.testing.assert_allclose(out, ref, rtol=1e-13)


@po.kernel
def guards(A: f64["N", "N"], B: f64["N"]):
    for i in range(N):
        if i % 2 == 0:
            B[i] = 1.0 * i
        else:
            B[i] = -1.0
        for j in range(N):
            if i < j and (j - i) % 3 != 1:
                A[i, j] = A[j, i] + B[i]
            elif i == j or j >= N - 2:
                A[i, j] = 0.0
    for i in range(max(0, N - 3), min(N, 100)):
        B[i] += 10.0


def test_if_else_guards(rng):
    n = 9
    A, B = rng.random((n, n)), rng.random(n)
    out_a, out_b = run_everywhere(guards, A, B)
    ra, rb = A.copy(), B.copy()
    for i in range(n):
        rb[i] = 1.0 * i if i % 2 == 0 else -1.0
        for j in range(n):
            if i < j and (j - i) % 3 != 1:
                ra[i, j] = ra[j, i] + rb[i]
            elif i == j or j >= n - 2:
                ra[i, j] = 0.0
    for i in range(max(0, n - 3), min(n, 100)):
        rb[i] += 10.0
    np.testing.assert_array_equal(out_a, ra)
    np.testing.assert_array_equal(out_b, rb)


@po.kernel
def row_norms(A: f64["N", "M"], out: f64["N"], total: f64["1"]):
    t = 0.0
    for i in range(N):
        s = 0.0
        for j in range(M):
            s += A[i, j] * A[i, j]
        out[i] = sqrt(s)
        t = t + s
    total[0] = t


def test_local_scalar_reductions(rng):
    A = rng.random((5, 7))
    _, out, total = run_everywhere(row_norms, A, np.zeros(5), np.zeros(1))
    np.testing.assert_allclose(out, np.sqrt((A * A).sum(axis=1)), rtol=1e-13)
    np.testing.assert_allclose(total[0], (A * A).sum(), rtol=1e-13)


@po.kernel
def prefix_sum(A: f64["N"], P: f64["N + 1"], Q: f64["2 * N + 1", "N // 2 + 1"]):
    P[0] = 0.0
    for i in range(N):
        P[i + 1] = P[i] + A[i]
    for i in range(2 * N + 1):
        for j in range(N // 2 + 1):
            Q[i, j] = i * 100 + j


def test_extents_like_n_plus_one(rng):
    a = rng.random(7)
    _, p, q = run_everywhere(prefix_sum, a, np.ones(8), np.zeros((15, 4)))
    np.testing.assert_allclose(p, np.concatenate([[0.0], np.cumsum(a)]), rtol=1e-13)
    np.testing.assert_array_equal(q, np.add.outer(np.arange(15) * 100, np.arange(4)))


jacobi_1d = po.suite.get("jacobi-1d").kernel  # the suite's definition


def test_explicit_parameter(rng):
    a, b = rng.random(12), rng.random(12)
    out_a, out_b = run_everywhere(jacobi_1d, 5, a, b)
    ra, rb = a.copy(), b.copy()
    for _ in range(5):
        rb[1:-1] = 0.33333 * (ra[:-2] + ra[1:-1] + ra[2:])
        ra[1:-1] = 0.33333 * (rb[:-2] + rb[1:-1] + rb[2:])
    np.testing.assert_allclose(out_a, ra, rtol=1e-13)
    np.testing.assert_allclose(out_b, rb, rtol=1e-13)
    # keyword spelling, and TSTEPS = 0 leaves everything as it was
    out_a, out_b = run_everywhere(jacobi_1d, A=a, B=b, TSTEPS=0)
    np.testing.assert_array_equal(out_a, a)
    np.testing.assert_array_equal(out_b, b)


@pytest.mark.parametrize("kernel,make_args", [
    (gemm, lambda: (1.0, 1.0, np.zeros((0, 0)), np.zeros((0, 0)), np.zeros((0, 0)))),
    (gemm, lambda: (1.0, 1.0, np.ones((3, 4)), np.zeros((3, 0)), np.zeros((0, 4)))),
    (trisolv, lambda: (np.zeros((0, 0)), np.zeros(0), np.zeros(0))),
    (row_norms, lambda: (np.zeros((0, 3)), np.zeros(0), np.full(1, 5.0))),
    (prefix_sum, lambda: (np.zeros(0), np.full(1, 3.0), np.full((1, 1), 3.0))),
    (jacobi_1d, lambda: (4, np.zeros(0), np.zeros(0))),
    (guards, lambda: (np.zeros((0, 0)), np.zeros(0))),
    (backward_recurrence, lambda: (np.zeros(0), np.zeros(0))),
], ids=["gemm-empty", "gemm-NK0", "trisolv", "row_norms", "prefix_sum", "jacobi", "guards", "backward"])
def test_zero_sizes(kernel, make_args):
    args = make_args()
    out = run_everywhere(kernel, *args)
    for got, given in zip(out, [a for a in args if isinstance(a, np.ndarray)]):
        assert got.shape == given.shape
    if kernel is gemm and args[2].size:
        np.testing.assert_array_equal(out[0], np.ones((3, 4)))   # C *= beta with beta = 1
    if kernel is row_norms:
        np.testing.assert_array_equal(out[2], [0.0])             # t = 0.0 still runs
    if kernel is prefix_sum:
        np.testing.assert_array_equal(out[1], [0.0])
        np.testing.assert_array_equal(out[2], [[0.0]])


# ----- the generated text ---------------------------------------------------------------------------------

TEXT_KERNELS = [gemm, int_floor_mod, float_floor_mod, min_max, math_functions, powers, integer_powers, conditionals,
                guarded_division, integer_arrays, strided, guards, row_norms, prefix_sum, jacobi_1d,
                and_or_values, math_functions.with_dtype("f32"), f32_literals]


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_c_source_compiles_with_gcc(tmp_path, algorithm):
    for k, kernel in enumerate(TEXT_KERNELS):
        ck = po.compile(kernel, algorithm=algorithm)
        path = tmp_path / f"k{k}.c"
        path.write_text(ck.c_source)
        result = subprocess.run(["gcc", "-O2", "-std=c99", "-Wall", "-Wno-unused-function",
                                 "-Wno-unknown-pragmas", "-fsyntax-only", str(path)],
                                capture_output=True, text=True)
        assert result.returncode == 0, f"{kernel!r}:\n{result.stderr}\n{ck.c_source}"
        assert f"void polyopt_{kernel.name}(" in ck.c_source


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")
def test_c_source_computes_the_same(tmp_path, rng):
    """Build the C translation with gcc and run it through ctypes: the same results."""
    import ctypes
    from polyopt.targets.arguments import bind_arguments

    for kernel, args in [
        (float_floor_mod, lambda: (np.array([7.5, -7.5, 1.0, -1.0, 0.0]), np.array([2.0, 2.0, 0.1, 0.1, -3.0]),
                                   np.zeros(5), np.zeros(5))),
        (int_floor_mod, lambda: (*_int_operands(np.int64), np.zeros(12, np.int64), np.zeros(12, np.int64), np.zeros(12))),
        (guards, lambda: (rng.random((7, 7)), rng.random(7))),
        (min_max, lambda: (np.array([1.0, np.nan, 0.0]), np.array([np.nan, 1.0, -0.0]), np.zeros(3), np.zeros(3),
                           np.array([1, 2, 3]), np.array([3, 2, 1]), np.zeros(3, np.int64))),
    ]:
        ck = po.compile(kernel, algorithm="original")
        source = tmp_path / f"{kernel.name}.c"
        library = tmp_path / f"{kernel.name}.so"
        source.write_text(ck.c_source)
        subprocess.run(["gcc", "-O2", "-std=c99", "-fPIC", "-shared", "-o", str(library), str(source), "-lm"],
                       check=True, capture_output=True)
        native = ctypes.CDLL(str(library))[f"polyopt_{kernel.name}"]
        mine, theirs = args(), None
        theirs = [a.copy() if isinstance(a, np.ndarray) else a for a in mine]
        bound = bind_arguments(ck.scop, tuple(mine), {})
        from polyopt.targets.arguments import abi_ctypes, abi_values
        native.argtypes = abi_ctypes(ck.scop)
        native(*abi_values(ck.scop, bound))
        ck(*theirs)
        for got, want in zip(mine, theirs):
            if isinstance(got, np.ndarray):
                np.testing.assert_array_equal(got, want)
                np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_llvm_ir_text(monkeypatch):
    monkeypatch.setenv("POLYOPT_CACHE", "0")  # compiled here: every phase timed
    clear_cache()
    for kernel in TEXT_KERNELS:
        ck = po.compile(kernel)
        for text in (ck.llvm_ir, ck.optimized_ir):
            assert isinstance(text, str) and text.strip()
            # the kernel returns its status (codegen.llvm.STATUS_*)
            assert re.search(rf'define [^@\n]*\bi32 @"?polyopt_{kernel.name}\b', text)
        assert "target triple" in ck.llvm_ir
        assert ck.loop_ast.strip()
        assert set(ck.compile_times) >= {"parse", "schedule", "verify", "codegen", "llvm"}
        assert all(t >= 0 for t in ck.compile_times.values())


def test_every_algorithm_gives_bitwise_identical_results_on_an_order_independent_kernel(rng):
    A = rng.random((6, 4))
    results = []
    for algorithm in ALGORITHMS:
        out = np.zeros(6)
        total = np.zeros(1)
        po.compile(row_norms, algorithm=algorithm)(A, out, total)
        results.append((out, total))
    for out, total in results[1:]:
        np.testing.assert_array_equal(out, results[0][0])
        np.testing.assert_array_equal(total, results[0][1])
    assert math.isclose(results[0][1][0], (A * A).sum(), rel_tol=1e-13)
