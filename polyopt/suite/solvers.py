"""PolyBench linear-algebra solvers: cholesky, durbin, gramschmidt, lu, ludcmp, trisolv."""
from __future__ import annotations

import numpy as np

import polyopt as po
from polyopt import f64

from polyopt.suite._data import full, indexed, spd_matrix, zeros
from polyopt.suite._registry import Entry, preset_table

CATEGORY = "linear-algebra/solvers"
_N_SIZES = preset_table(("N",), (40,), (120,), (400,), (2000,), (4000,))


def _lu_in_place(A) -> None:
    """Doolittle LU without pivoting, in place: unit-lower L below the diagonal, U on and above."""
    for k in range(A.shape[0] - 1):
        A[k + 1:, k] /= A[k, k]
        A[k + 1:, k + 1:] -= np.outer(A[k + 1:, k], A[k, k + 1:])


def _forward_substitution(L, b, x, unit_diagonal: bool) -> None:
    """x := L^-1 b for the lower triangle of L (its diagonal taken as 1 if ``unit_diagonal``)."""
    for i in range(b.shape[0]):
        x[i] = b[i] - L[i, :i] @ x[:i]
        if not unit_diagonal:
            x[i] = x[i] / L[i, i]


# --- cholesky ---------------------------------------------------------------------------------

@po.kernel
def cholesky(A: f64["N", "N"]):
    """In-place Cholesky factorization A = L*L^T (L overwrites the lower triangle of A)."""
    for i in range(N):
        for j in range(i):
            for k in range(j):
                A[i, j] -= A[i, k] * A[j, k]
            A[i, j] /= A[j, j]
        for k in range(i):
            A[i, i] -= A[i, k] * A[i, k]
        A[i, i] = sqrt(A[i, i])


def _cholesky_inputs(s, dtype):
    return dict(A=spd_matrix(s["N"], dtype))


def _cholesky_reference(A):
    A[:] = np.where(np.tri(A.shape[0], dtype=bool), np.linalg.cholesky(A), A)


# --- durbin -----------------------------------------------------------------------------------

@po.kernel
def durbin(r: f64["N"], y: f64["N"], z: f64["N"]):
    """Durbin's recursion for the Yule-Walker system T*y = -r (T Toeplitz from 1, r[0], ...)."""
    y[0] = -r[0]
    beta = 1.0
    alpha = -r[0]
    for k in range(1, N):
        beta = (1 - alpha * alpha) * beta
        sum = 0.0
        for i in range(k):
            sum += r[k - i - 1] * y[i]
        alpha = -(r[k] + sum) / beta
        for i in range(k):
            z[i] = y[i] + alpha * y[k - i - 1]
        for i in range(k):
            y[i] = z[i]
        y[k] = alpha


def _durbin_inputs(s, dtype):
    # PolyBench's r[i] = n+1-i gives no valid autocorrelation (|alpha| > 1, overflow); this is
    # the autocorrelation of two AR(1) processes plus white noise, so T is positive definite
    # with eigenvalues >= 0.2 and the recursion is stable at any N.
    n = s["N"]
    return dict(r=indexed((n,), lambda i: 0.5 * 0.8 ** (i + 1) + 0.3 * (-0.5) ** (i + 1), dtype),
                y=zeros((n,), dtype), z=zeros((n,), dtype))


def _durbin_reference(r, y, z):
    y[0] = -r[0]
    beta, alpha = 1.0, -r[0]
    for k in range(1, r.shape[0]):
        beta = (1 - alpha * alpha) * beta
        alpha = -(r[k] + r[k - 1::-1] @ y[:k]) / beta
        z[:k] = y[:k] + alpha * y[k - 1::-1]
        y[:k] = z[:k]
        y[k] = alpha


# --- gramschmidt ------------------------------------------------------------------------------

@po.kernel
def gramschmidt(A: f64["M", "N"], R: f64["N", "N"], Q: f64["M", "N"]):
    """QR factorization A = Q*R by modified Gram-Schmidt (A is overwritten)."""
    for k in range(N):
        nrm = 0.0
        for i in range(M):
            nrm += A[i, k] * A[i, k]
        R[k, k] = sqrt(nrm)
        for i in range(M):
            Q[i, k] = A[i, k] / R[k, k]
        for j in range(k + 1, N):
            R[k, j] = 0.0
            for i in range(M):
                R[k, j] += Q[i, k] * A[i, j]
            for i in range(M):
                A[i, j] = A[i, j] - Q[i, k] * R[k, j]


def _gramschmidt_inputs(s, dtype):
    # PolyBench's formula plus a diagonal, so that A has full column rank (cond < 1.5e3).
    m, n = s["M"], s["N"]
    return dict(A=indexed((m, n), lambda i, j: i * j % m / m * 100 + 10 + 100.0 * (i == j), dtype),
                R=zeros((n, n), dtype), Q=zeros((m, n), dtype))


def _gramschmidt_reference(A, R, Q):
    for k in range(A.shape[1]):
        R[k, k] = np.sqrt(A[:, k] @ A[:, k])
        Q[:, k] = A[:, k] / R[k, k]
        R[k, k + 1:] = Q[:, k] @ A[:, k + 1:]
        A[:, k + 1:] -= np.outer(Q[:, k], R[k, k + 1:])


# --- lu ---------------------------------------------------------------------------------------

@po.kernel
def lu(A: f64["N", "N"]):
    """In-place LU factorization without pivoting (unit-lower L below the diagonal, U above)."""
    for i in range(N):
        for j in range(i):
            for k in range(j):
                A[i, j] -= A[i, k] * A[k, j]
            A[i, j] /= A[j, j]
        for j in range(i, N):
            for k in range(i):
                A[i, j] -= A[i, k] * A[k, j]


def _lu_inputs(s, dtype):
    return dict(A=spd_matrix(s["N"], dtype))


def _lu_reference(A):
    _lu_in_place(A)


# --- ludcmp -----------------------------------------------------------------------------------

@po.kernel
def ludcmp(A: f64["N", "N"], b: f64["N"], x: f64["N"], y: f64["N"]):
    """Solves A*x = b: LU factorization in place, then forward (y) and back (x) substitution."""
    for i in range(N):
        for j in range(i):
            w = A[i, j]
            for k in range(j):
                w -= A[i, k] * A[k, j]
            A[i, j] = w / A[j, j]
        for j in range(i, N):
            w = A[i, j]
            for k in range(i):
                w -= A[i, k] * A[k, j]
            A[i, j] = w
    for i in range(N):
        w = b[i]
        for j in range(i):
            w -= A[i, j] * y[j]
        y[i] = w
    for i in range(N - 1, -1, -1):
        w = y[i]
        for j in range(i + 1, N):
            w -= A[i, j] * x[j]
        x[i] = w / A[i, i]


def _ludcmp_inputs(s, dtype):
    n = s["N"]
    return dict(A=spd_matrix(n, dtype), b=indexed((n,), lambda i: (i + 1) / n / 2.0 + 4, dtype),
                x=zeros((n,), dtype), y=zeros((n,), dtype))


def _ludcmp_reference(A, b, x, y):
    _lu_in_place(A)
    _forward_substitution(A, b, y, unit_diagonal=True)
    for i in range(b.shape[0] - 1, -1, -1):
        x[i] = (y[i] - A[i, i + 1:] @ x[i + 1:]) / A[i, i]


# --- trisolv ----------------------------------------------------------------------------------

@po.kernel
def trisolv(L: f64["N", "N"], x: f64["N"], b: f64["N"]):
    """Solves L*x = b for lower-triangular L by forward substitution."""
    for i in range(N):
        x[i] = b[i]
        for j in range(i):
            x[i] -= L[i, j] * x[j]
        x[i] = x[i] / L[i, i]


def _trisolv_inputs(s, dtype):
    n = s["N"]
    return dict(L=indexed((n, n), lambda i, j: np.where(j <= i, (i + n - j + 1) * 2 / n, 0.0),
                          dtype),
                x=full((n,), -999.0, dtype),  # as in PolyBench: overwritten before it is read
                b=indexed((n,), lambda i: i, dtype))


def _trisolv_reference(L, x, b):
    _forward_substitution(L, b, x, unit_diagonal=False)


ENTRIES = (
    Entry("cholesky", CATEGORY, cholesky, _N_SIZES, _cholesky_inputs, _cholesky_reference,
          lambda s: s["N"] ** 3 / 3.0 + s["N"] ** 2 / 2.0),
    Entry("durbin", CATEGORY, durbin, _N_SIZES, _durbin_inputs, _durbin_reference,
          lambda s: 2.0 * s["N"] * (s["N"] - 1) + 6.0 * (s["N"] - 1)),
    # PolyBench 4.2's header has M < N here (e.g. MINI M=20, N=30), which makes the M x N matrix
    # rank-deficient and the factorization divide by zero norms (NaN).  Its own documentation
    # requires M > N, so the two values of each preset are swapped: A has more rows than columns.
    Entry("gramschmidt", CATEGORY, gramschmidt,
          preset_table(("M", "N"), (30, 20), (80, 60), (240, 200), (1200, 1000), (2600, 2000)),
          _gramschmidt_inputs, _gramschmidt_reference,
          lambda s: 2.0 * s["M"] * s["N"] ** 2 + 3.0 * s["M"] * s["N"]),
    Entry("lu", CATEGORY, lu, _N_SIZES, _lu_inputs, _lu_reference,
          lambda s: 2.0 * s["N"] ** 3 / 3.0),
    Entry("ludcmp", CATEGORY, ludcmp, _N_SIZES, _ludcmp_inputs, _ludcmp_reference,
          lambda s: 2.0 * s["N"] ** 3 / 3.0 + 2.0 * s["N"] ** 2),
    Entry("trisolv", CATEGORY, trisolv, _N_SIZES, _trisolv_inputs, _trisolv_reference,
          lambda s: 1.0 * s["N"] ** 2),
)
