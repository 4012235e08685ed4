"""PolyBench linear-algebra BLAS routines (gemm ... trmm) and kernels (2mm ... mvt)."""
from __future__ import annotations

import numpy as np

import polyopt as po
from polyopt import f64

from polyopt.suite._data import indexed, zeros
from polyopt.suite._registry import Entry, preset_table

BLAS = "linear-algebra/blas"
KERNELS = "linear-algebra/kernels"

_MN_SIZES = preset_table(("M", "N"), (20, 30), (60, 80), (200, 240), (1000, 1200), (2000, 2600))
_N_SIZES = preset_table(("N",), (40,), (120,), (400,), (2000,), (4000,))
_ALPHA, _BETA = 1.5, 1.2


# --- gemm -------------------------------------------------------------------------------------

@po.kernel
def gemm(alpha: f64, beta: f64, C: f64["NI", "NJ"], A: f64["NI", "NK"], B: f64["NK", "NJ"]):
    """C := alpha*A*B + beta*C."""
    for i in range(NI):
        for j in range(NJ):
            C[i, j] *= beta
        for k in range(NK):
            for j in range(NJ):
                C[i, j] += alpha * A[i, k] * B[k, j]


def _gemm_inputs(s, dtype):
    ni, nj, nk = s["NI"], s["NJ"], s["NK"]
    return dict(alpha=_ALPHA, beta=_BETA,
                C=indexed((ni, nj), lambda i, j: (i * j + 1) % ni / ni, dtype),
                A=indexed((ni, nk), lambda i, k: i * (k + 1) % nk / nk, dtype),
                B=indexed((nk, nj), lambda k, j: k * (j + 2) % nj / nj, dtype))


def _gemm_reference(alpha, beta, C, A, B):
    C *= beta
    C += alpha * (A @ B)


# --- gemver -----------------------------------------------------------------------------------

@po.kernel
def gemver(alpha: f64, beta: f64, A: f64["N", "N"], u1: f64["N"], v1: f64["N"], u2: f64["N"],
           v2: f64["N"], w: f64["N"], x: f64["N"], y: f64["N"], z: f64["N"]):
    """A += u1*v1^T + u2*v2^T;  x += beta*A^T*y + z;  w += alpha*A*x."""
    for i in range(N):
        for j in range(N):
            A[i, j] = A[i, j] + u1[i] * v1[j] + u2[i] * v2[j]
    for i in range(N):
        for j in range(N):
            x[i] = x[i] + beta * A[j, i] * y[j]
    for i in range(N):
        x[i] = x[i] + z[i]
    for i in range(N):
        for j in range(N):
            w[i] = w[i] + alpha * A[i, j] * x[j]


def _gemver_inputs(s, dtype):
    n = s["N"]

    def vector(scale):  # PolyBench: ((i + 1) / n) / scale
        return indexed((n,), lambda i: (i + 1) / n / scale, dtype)

    return dict(alpha=_ALPHA, beta=_BETA, A=indexed((n, n), lambda i, j: i * j % n / n, dtype),
                u1=indexed((n,), lambda i: i / n, dtype),  # PolyBench: i (scaled down here)
                v1=vector(4.0), u2=vector(2.0), v2=vector(6.0), w=zeros((n,), dtype),
                x=zeros((n,), dtype), y=vector(8.0), z=vector(9.0))


def _gemver_reference(alpha, beta, A, u1, v1, u2, v2, w, x, y, z):
    A += np.outer(u1, v1) + np.outer(u2, v2)
    x += beta * (A.T @ y)
    x += z
    w += alpha * (A @ x)


# --- gesummv ----------------------------------------------------------------------------------

@po.kernel
def gesummv(alpha: f64, beta: f64, A: f64["N", "N"], B: f64["N", "N"], tmp: f64["N"],
            x: f64["N"], y: f64["N"]):
    """y := alpha*A*x + beta*B*x (tmp holds A*x)."""
    for i in range(N):
        tmp[i] = 0.0
        y[i] = 0.0
        for j in range(N):
            tmp[i] = A[i, j] * x[j] + tmp[i]
            y[i] = B[i, j] * x[j] + y[i]
        y[i] = alpha * tmp[i] + beta * y[i]


def _gesummv_inputs(s, dtype):
    n = s["N"]
    return dict(alpha=_ALPHA, beta=_BETA,
                A=indexed((n, n), lambda i, j: (i * j + 1) % n / n, dtype),
                B=indexed((n, n), lambda i, j: (i * j + 2) % n / n, dtype),
                tmp=zeros((n,), dtype), x=indexed((n,), lambda i: i % n / n, dtype),
                y=zeros((n,), dtype))


def _gesummv_reference(alpha, beta, A, B, tmp, x, y):
    tmp[:] = A @ x
    y[:] = alpha * tmp + beta * (B @ x)


# --- symm -------------------------------------------------------------------------------------

@po.kernel
def symm(alpha: f64, beta: f64, C: f64["M", "N"], A: f64["M", "M"], B: f64["M", "N"]):
    """C := alpha*A*B + beta*C for symmetric A stored in its lower triangle."""
    for i in range(M):
        for j in range(N):
            temp2 = 0.0
            for k in range(i):
                C[k, j] += alpha * B[i, j] * A[i, k]
                temp2 += B[k, j] * A[i, k]
            C[i, j] = beta * C[i, j] + alpha * B[i, j] * A[i, i] + alpha * temp2


def _symm_inputs(s, dtype):
    m, n = s["M"], s["N"]
    return dict(alpha=_ALPHA, beta=_BETA,
                C=indexed((m, n), lambda i, j: (i + j) % 100 / m, dtype),
                # the upper triangle is never read: PolyBench poisons it with -999
                A=indexed((m, m), lambda i, j: np.where(j <= i, (i + j) % 100 / m, -999.0), dtype),
                B=indexed((m, n), lambda i, j: (n + i - j) % 100 / m, dtype))


def _symm_reference(alpha, beta, C, A, B):
    symmetric = np.tril(A) + np.tril(A, -1).T
    C[:] = beta * C + alpha * (symmetric @ B)


# --- syr2k ------------------------------------------------------------------------------------

@po.kernel
def syr2k(alpha: f64, beta: f64, C: f64["N", "N"], A: f64["N", "M"], B: f64["N", "M"]):
    """C := alpha*A*B^T + alpha*B*A^T + beta*C on the lower triangle of C."""
    for i in range(N):
        for j in range(i + 1):
            C[i, j] *= beta
        for k in range(M):
            for j in range(i + 1):
                C[i, j] += A[j, k] * alpha * B[i, k] + B[j, k] * alpha * A[i, k]


def _syr2k_inputs(s, dtype):
    m, n = s["M"], s["N"]
    return dict(alpha=_ALPHA, beta=_BETA,
                C=indexed((n, n), lambda i, j: (i * j + 3) % n / m, dtype),
                A=indexed((n, m), lambda i, j: (i * j + 1) % n / n, dtype),
                B=indexed((n, m), lambda i, j: (i * j + 2) % m / m, dtype))


def _syr2k_reference(alpha, beta, C, A, B):
    update = beta * C + alpha * (B @ A.T) + alpha * (A @ B.T)
    C[:] = np.where(np.tri(C.shape[0], dtype=bool), update, C)


# --- syrk -------------------------------------------------------------------------------------

@po.kernel
def syrk(alpha: f64, beta: f64, C: f64["N", "N"], A: f64["N", "M"]):
    """C := alpha*A*A^T + beta*C on the lower triangle of C."""
    for i in range(N):
        for j in range(i + 1):
            C[i, j] *= beta
        for k in range(M):
            for j in range(i + 1):
                C[i, j] += alpha * A[i, k] * A[j, k]


def _syrk_inputs(s, dtype):
    m, n = s["M"], s["N"]
    return dict(alpha=_ALPHA, beta=_BETA,
                C=indexed((n, n), lambda i, j: (i * j + 2) % m / m, dtype),
                A=indexed((n, m), lambda i, j: (i * j + 1) % n / n, dtype))


def _syrk_reference(alpha, beta, C, A):
    update = beta * C + alpha * (A @ A.T)
    C[:] = np.where(np.tri(C.shape[0], dtype=bool), update, C)


# --- trmm -------------------------------------------------------------------------------------

@po.kernel
def trmm(alpha: f64, A: f64["M", "M"], B: f64["M", "N"]):
    """B := alpha*A^T*B for unit lower-triangular A (in place, row by row)."""
    for i in range(M):
        for j in range(N):
            for k in range(i + 1, M):
                B[i, j] += A[k, i] * B[k, j]
            B[i, j] = alpha * B[i, j]


def _trmm_inputs(s, dtype):
    m, n = s["M"], s["N"]
    return dict(alpha=_ALPHA,
                # unit diagonal; the (unused) upper triangle, undefined in PolyBench, is 0
                A=indexed((m, m), lambda i, j: np.where(j < i, (i + j) % m / m, 1.0 * (i == j)),
                          dtype),
                B=indexed((m, n), lambda i, j: (n + i - j) % n / n, dtype))


def _trmm_reference(alpha, A, B):
    B[:] = alpha * (B + np.tril(A, -1).T @ B)


# --- 2mm --------------------------------------------------------------------------------------

@po.kernel
def k2mm(alpha: f64, beta: f64, tmp: f64["NI", "NJ"], A: f64["NI", "NK"], B: f64["NK", "NJ"],
         C: f64["NJ", "NL"], D: f64["NI", "NL"]):
    """D := alpha*A*B*C + beta*D (tmp holds alpha*A*B)."""
    for i in range(NI):
        for j in range(NJ):
            tmp[i, j] = 0.0
            for k in range(NK):
                tmp[i, j] += alpha * A[i, k] * B[k, j]
    for i in range(NI):
        for j in range(NL):
            D[i, j] *= beta
            for k in range(NJ):
                D[i, j] += tmp[i, k] * C[k, j]


def _k2mm_inputs(s, dtype):
    ni, nj, nk, nl = s["NI"], s["NJ"], s["NK"], s["NL"]
    return dict(alpha=_ALPHA, beta=_BETA, tmp=zeros((ni, nj), dtype),
                A=indexed((ni, nk), lambda i, j: (i * j + 1) % ni / ni, dtype),
                B=indexed((nk, nj), lambda i, j: i * (j + 1) % nj / nj, dtype),
                C=indexed((nj, nl), lambda i, j: (i * (j + 3) + 1) % nl / nl, dtype),
                D=indexed((ni, nl), lambda i, j: i * (j + 2) % nk / nk, dtype))


def _k2mm_reference(alpha, beta, tmp, A, B, C, D):
    tmp[:] = alpha * (A @ B)
    D *= beta
    D += tmp @ C


# --- 3mm --------------------------------------------------------------------------------------

@po.kernel
def k3mm(E: f64["NI", "NJ"], A: f64["NI", "NK"], B: f64["NK", "NJ"], F: f64["NJ", "NL"],
         C: f64["NJ", "NM"], D: f64["NM", "NL"], G: f64["NI", "NL"]):
    """G := (A*B)*(C*D) with E = A*B and F = C*D."""
    for i in range(NI):
        for j in range(NJ):
            E[i, j] = 0.0
            for k in range(NK):
                E[i, j] += A[i, k] * B[k, j]
    for i in range(NJ):
        for j in range(NL):
            F[i, j] = 0.0
            for k in range(NM):
                F[i, j] += C[i, k] * D[k, j]
    for i in range(NI):
        for j in range(NL):
            G[i, j] = 0.0
            for k in range(NJ):
                G[i, j] += E[i, k] * F[k, j]


def _k3mm_inputs(s, dtype):
    ni, nj, nk, nl, nm = s["NI"], s["NJ"], s["NK"], s["NL"], s["NM"]
    return dict(E=zeros((ni, nj), dtype),
                A=indexed((ni, nk), lambda i, j: (i * j + 1) % ni / (5 * ni), dtype),
                B=indexed((nk, nj), lambda i, j: (i * (j + 1) + 2) % nj / (5 * nj), dtype),
                F=zeros((nj, nl), dtype),
                C=indexed((nj, nm), lambda i, j: i * (j + 3) % nl / (5 * nl), dtype),
                D=indexed((nm, nl), lambda i, j: (i * (j + 2) + 2) % nk / (5 * nk), dtype),
                G=zeros((ni, nl), dtype))


def _k3mm_reference(E, A, B, F, C, D, G):
    E[:] = A @ B
    F[:] = C @ D
    G[:] = E @ F


# --- atax -------------------------------------------------------------------------------------

@po.kernel
def atax(A: f64["M", "N"], x: f64["N"], y: f64["N"], tmp: f64["M"]):
    """y := A^T*(A*x) (tmp holds A*x)."""
    for i in range(N):
        y[i] = 0.0
    for i in range(M):
        tmp[i] = 0.0
        for j in range(N):
            tmp[i] = tmp[i] + A[i, j] * x[j]
        for j in range(N):
            y[j] = y[j] + A[i, j] * tmp[i]


def _atax_inputs(s, dtype):
    m, n = s["M"], s["N"]
    return dict(A=indexed((m, n), lambda i, j: (i + j) % n / (5 * m), dtype),
                x=indexed((n,), lambda i: 1 + i / n, dtype), y=zeros((n,), dtype),
                tmp=zeros((m,), dtype))


def _atax_reference(A, x, y, tmp):
    tmp[:] = A @ x
    y[:] = A.T @ tmp


# --- bicg -------------------------------------------------------------------------------------

@po.kernel
def bicg(A: f64["N", "M"], s: f64["M"], q: f64["N"], p: f64["M"], r: f64["N"]):
    """The BiCG sub-kernel: s := A^T*r and q := A*p."""
    for i in range(M):
        s[i] = 0.0
    for i in range(N):
        q[i] = 0.0
        for j in range(M):
            s[j] = s[j] + r[i] * A[i, j]
            q[i] = q[i] + A[i, j] * p[j]


def _bicg_inputs(sz, dtype):
    m, n = sz["M"], sz["N"]
    return dict(A=indexed((n, m), lambda i, j: i * (j + 1) % n / n, dtype), s=zeros((m,), dtype),
                q=zeros((n,), dtype), p=indexed((m,), lambda i: i % m / m, dtype),
                r=indexed((n,), lambda i: i % n / n, dtype))


def _bicg_reference(A, s, q, p, r):
    s[:] = A.T @ r
    q[:] = A @ p


# --- doitgen ----------------------------------------------------------------------------------

@po.kernel
def doitgen(A: f64["NR", "NQ", "NP"], C4: f64["NP", "NP"], sum: f64["NP"]):
    """A[r, q, :] := A[r, q, :] * C4 for every (r, q), through the temporary row sum."""
    for r in range(NR):
        for q in range(NQ):
            for p in range(NP):
                sum[p] = 0.0
                for s in range(NP):
                    sum[p] += A[r, q, s] * C4[s, p]
            for p in range(NP):
                A[r, q, p] = sum[p]


def _doitgen_inputs(s, dtype):
    nq, nr, np_ = s["NQ"], s["NR"], s["NP"]
    return dict(A=indexed((nr, nq, np_), lambda r, q, p: (r * q + p) % np_ / np_, dtype),
                C4=indexed((np_, np_), lambda i, j: i * j % np_ / np_, dtype),
                sum=zeros((np_,), dtype))


def _doitgen_reference(A, C4, sum):
    A[:] = A @ C4
    sum[:] = A[-1, -1, :]


# --- mvt --------------------------------------------------------------------------------------

@po.kernel
def mvt(x1: f64["N"], x2: f64["N"], y_1: f64["N"], y_2: f64["N"], A: f64["N", "N"]):
    """x1 += A*y_1 and x2 += A^T*y_2."""
    for i in range(N):
        for j in range(N):
            x1[i] = x1[i] + A[i, j] * y_1[j]
    for i in range(N):
        for j in range(N):
            x2[i] = x2[i] + A[j, i] * y_2[j]


def _mvt_inputs(s, dtype):
    n = s["N"]
    return dict(x1=indexed((n,), lambda i: i % n / n, dtype),
                x2=indexed((n,), lambda i: (i + 1) % n / n, dtype),
                y_1=indexed((n,), lambda i: (i + 3) % n / n, dtype),
                y_2=indexed((n,), lambda i: (i + 4) % n / n, dtype),
                A=indexed((n, n), lambda i, j: i * j % n / n, dtype))


def _mvt_reference(x1, x2, y_1, y_2, A):
    x1 += A @ y_1
    x2 += A.T @ y_2


ENTRIES = (
    Entry("gemm", BLAS, gemm,
          preset_table(("NI", "NJ", "NK"), (20, 25, 30), (60, 70, 80), (200, 220, 240),
                       (1000, 1100, 1200), (2000, 2300, 2600)),
          _gemm_inputs, _gemm_reference, lambda s: 2.0 * s["NI"] * s["NJ"] * s["NK"]),
    Entry("gemver", BLAS, gemver, _N_SIZES, _gemver_inputs, _gemver_reference,
          lambda s: 10.0 * s["N"] ** 2 + s["N"]),
    Entry("gesummv", BLAS, gesummv,
          preset_table(("N",), (30,), (90,), (250,), (1300,), (2800,)),
          _gesummv_inputs, _gesummv_reference, lambda s: 4.0 * s["N"] ** 2 + 3 * s["N"]),
    Entry("symm", BLAS, symm, _MN_SIZES, _symm_inputs, _symm_reference,
          lambda s: 2.0 * s["M"] ** 2 * s["N"] + 3 * s["M"] * s["N"]),
    Entry("syr2k", BLAS, syr2k, _MN_SIZES, _syr2k_inputs, _syr2k_reference,
          lambda s: 2.0 * s["M"] * s["N"] * (s["N"] + 1) + s["N"] * (s["N"] + 1) / 2),
    Entry("syrk", BLAS, syrk, _MN_SIZES, _syrk_inputs, _syrk_reference,
          lambda s: 1.0 * s["M"] * s["N"] * (s["N"] + 1) + s["N"] * (s["N"] + 1) / 2),
    Entry("trmm", BLAS, trmm, _MN_SIZES, _trmm_inputs, _trmm_reference,
          lambda s: 1.0 * s["M"] * (s["M"] - 1) * s["N"] + s["M"] * s["N"]),
    Entry("2mm", KERNELS, k2mm,
          preset_table(("NI", "NJ", "NK", "NL"), (16, 18, 22, 24), (40, 50, 70, 80),
                       (180, 190, 210, 220), (800, 900, 1100, 1200), (1600, 1800, 2200, 2400)),
          _k2mm_inputs, _k2mm_reference,
          lambda s: 2.0 * s["NI"] * s["NJ"] * (s["NK"] + s["NL"]) + s["NI"] * s["NL"]),
    Entry("3mm", KERNELS, k3mm,
          preset_table(("NI", "NJ", "NK", "NL", "NM"), (16, 18, 20, 22, 24), (40, 50, 60, 70, 80),
                       (180, 190, 200, 210, 220), (800, 900, 1000, 1100, 1200),
                       (1600, 1800, 2000, 2200, 2400)),
          _k3mm_inputs, _k3mm_reference,
          lambda s: 2.0 * (s["NI"] * s["NJ"] * s["NK"] + s["NJ"] * s["NL"] * s["NM"]
                           + s["NI"] * s["NL"] * s["NJ"])),
    Entry("atax", KERNELS, atax,
          preset_table(("M", "N"), (38, 42), (116, 124), (390, 410), (1900, 2100), (1800, 2200)),
          _atax_inputs, _atax_reference, lambda s: 4.0 * s["M"] * s["N"]),
    Entry("bicg", KERNELS, bicg,
          preset_table(("M", "N"), (38, 42), (116, 124), (390, 410), (1900, 2100), (1800, 2200)),
          _bicg_inputs, _bicg_reference, lambda s: 4.0 * s["M"] * s["N"]),
    Entry("doitgen", KERNELS, doitgen,
          preset_table(("NQ", "NR", "NP"), (8, 10, 12), (20, 25, 30), (40, 50, 60),
                       (140, 150, 160), (220, 250, 270)),
          _doitgen_inputs, _doitgen_reference, lambda s: 2.0 * s["NR"] * s["NQ"] * s["NP"] ** 2),
    Entry("mvt", KERNELS, mvt, _N_SIZES, _mvt_inputs, _mvt_reference,
          lambda s: 4.0 * s["N"] ** 2),
)
