"""PolyBench stencils: adi, fdtd-2d, heat-3d, jacobi-1d, jacobi-2d, seidel-2d."""
from __future__ import annotations

import numpy as np

import polyopt as po
from polyopt import f64

from polyopt.suite._data import indexed, zeros
from polyopt.suite._registry import Entry, preset_table

CATEGORY = "stencils"


# --- adi --------------------------------------------------------------------------------------

@po.kernel
def adi(TSTEPS: int, u: f64["N", "N"], v: f64["N", "N"], p: f64["N", "N"], q: f64["N", "N"]):
    """Alternating-direction implicit 2-D heat solver: tridiagonal column sweep, then row sweep."""
    DX = 1.0 / N
    DY = 1.0 / N
    DT = 1.0 / TSTEPS
    B1 = 2.0
    B2 = 1.0
    mul1 = B1 * DT / (DX * DX)
    mul2 = B2 * DT / (DY * DY)
    a = -mul1 / 2.0
    b = 1.0 + mul1
    c = a
    d = -mul2 / 2.0
    e = 1.0 + mul2
    f = d
    for t in range(1, TSTEPS + 1):
        for i in range(1, N - 1):
            v[0, i] = 1.0
            p[i, 0] = 0.0
            q[i, 0] = v[0, i]
            for j in range(1, N - 1):
                p[i, j] = -c / (a * p[i, j - 1] + b)
                q[i, j] = ((-d * u[j, i - 1] + (1.0 + 2.0 * d) * u[j, i] - f * u[j, i + 1]
                            - a * q[i, j - 1]) / (a * p[i, j - 1] + b))
            v[N - 1, i] = 1.0
            for j in range(N - 2, 0, -1):
                v[j, i] = p[i, j] * v[j + 1, i] + q[i, j]
        for i in range(1, N - 1):
            u[i, 0] = 1.0
            p[i, 0] = 0.0
            q[i, 0] = u[i, 0]
            for j in range(1, N - 1):
                p[i, j] = -f / (d * p[i, j - 1] + e)
                q[i, j] = ((-a * v[i - 1, j] + (1.0 + 2.0 * a) * v[i, j] - c * v[i + 1, j]
                            - d * q[i, j - 1]) / (d * p[i, j - 1] + e))
            u[i, N - 1] = 1.0
            for j in range(N - 2, 0, -1):
                u[i, j] = p[i, j] * u[i, j + 1] + q[i, j]


def _adi_inputs(s, dtype):
    n = s["N"]
    return dict(TSTEPS=s["TSTEPS"], u=indexed((n, n), lambda i, j: (i + n - j) / n, dtype),
                v=zeros((n, n), dtype), p=zeros((n, n), dtype), q=zeros((n, n), dtype))


def _adi_reference(TSTEPS, u, v, p, q):
    # Every sweep is independent across i: vectorize over i, keep the j recurrences as loops.
    n = u.shape[0]
    dx = dy = 1.0 / n
    dt = 1.0 / TSTEPS
    mul1, mul2 = 2.0 * dt / (dx * dx), 1.0 * dt / (dy * dy)
    a = c = -mul1 / 2.0
    b = 1.0 + mul1
    d = f = -mul2 / 2.0
    e = 1.0 + mul2
    inner = slice(1, n - 1)
    for _ in range(TSTEPS):
        v[0, inner] = 1.0
        p[inner, 0] = 0.0
        q[inner, 0] = v[0, inner]
        for j in range(1, n - 1):
            denominator = a * p[inner, j - 1] + b
            p[inner, j] = -c / denominator
            q[inner, j] = (-d * u[j, :-2] + (1.0 + 2.0 * d) * u[j, 1:-1] - f * u[j, 2:]
                           - a * q[inner, j - 1]) / denominator
        v[n - 1, inner] = 1.0
        for j in range(n - 2, 0, -1):
            v[j, inner] = p[inner, j] * v[j + 1, inner] + q[inner, j]
        u[inner, 0] = 1.0
        p[inner, 0] = 0.0
        q[inner, 0] = u[inner, 0]
        for j in range(1, n - 1):
            denominator = d * p[inner, j - 1] + e
            p[inner, j] = -f / denominator
            q[inner, j] = (-a * v[:-2, j] + (1.0 + 2.0 * a) * v[1:-1, j] - c * v[2:, j]
                           - d * q[inner, j - 1]) / denominator
        u[inner, n - 1] = 1.0
        for j in range(n - 2, 0, -1):
            u[inner, j] = p[inner, j] * u[inner, j + 1] + q[inner, j]


# --- fdtd-2d ----------------------------------------------------------------------------------

@po.kernel
def fdtd_2d(ex: f64["NX", "NY"], ey: f64["NX", "NY"], hz: f64["NX", "NY"], fict: f64["TMAX"]):
    """2-D finite-difference time-domain Maxwell solver (TE mode) with a source row fict[t]."""
    for t in range(TMAX):
        for j in range(NY):
            ey[0, j] = fict[t]
        for i in range(1, NX):
            for j in range(NY):
                ey[i, j] = ey[i, j] - 0.5 * (hz[i, j] - hz[i - 1, j])
        for i in range(NX):
            for j in range(1, NY):
                ex[i, j] = ex[i, j] - 0.5 * (hz[i, j] - hz[i, j - 1])
        for i in range(NX - 1):
            for j in range(NY - 1):
                hz[i, j] = hz[i, j] - 0.7 * (ex[i, j + 1] - ex[i, j] + ey[i + 1, j] - ey[i, j])


def _fdtd_2d_inputs(s, dtype):
    tmax, nx, ny = s["TMAX"], s["NX"], s["NY"]
    return dict(ex=indexed((nx, ny), lambda i, j: i * (j + 1) / nx, dtype),
                ey=indexed((nx, ny), lambda i, j: i * (j + 2) / ny, dtype),
                hz=indexed((nx, ny), lambda i, j: i * (j + 3) / nx, dtype),
                fict=indexed((tmax,), lambda t: t, dtype))


def _fdtd_2d_reference(ex, ey, hz, fict):
    for t in range(fict.shape[0]):
        ey[0, :] = fict[t]
        ey[1:, :] = ey[1:, :] - 0.5 * (hz[1:, :] - hz[:-1, :])
        ex[:, 1:] = ex[:, 1:] - 0.5 * (hz[:, 1:] - hz[:, :-1])
        hz[:-1, :-1] = hz[:-1, :-1] - 0.7 * (ex[:-1, 1:] - ex[:-1, :-1]
                                             + ey[1:, :-1] - ey[:-1, :-1])


# --- heat-3d ----------------------------------------------------------------------------------

@po.kernel
def heat_3d(TSTEPS: int, A: f64["N", "N", "N"], B: f64["N", "N", "N"]):
    """3-D heat equation, 7-point Jacobi stencil alternating between A and B."""
    for t in range(1, TSTEPS + 1):
        for i in range(1, N - 1):
            for j in range(1, N - 1):
                for k in range(1, N - 1):
                    B[i, j, k] = (0.125 * (A[i + 1, j, k] - 2.0 * A[i, j, k] + A[i - 1, j, k])
                                  + 0.125 * (A[i, j + 1, k] - 2.0 * A[i, j, k] + A[i, j - 1, k])
                                  + 0.125 * (A[i, j, k + 1] - 2.0 * A[i, j, k] + A[i, j, k - 1])
                                  + A[i, j, k])
        for i in range(1, N - 1):
            for j in range(1, N - 1):
                for k in range(1, N - 1):
                    A[i, j, k] = (0.125 * (B[i + 1, j, k] - 2.0 * B[i, j, k] + B[i - 1, j, k])
                                  + 0.125 * (B[i, j + 1, k] - 2.0 * B[i, j, k] + B[i, j - 1, k])
                                  + 0.125 * (B[i, j, k + 1] - 2.0 * B[i, j, k] + B[i, j, k - 1])
                                  + B[i, j, k])


def _heat_3d_inputs(s, dtype):
    n = s["N"]

    def temperature(i, j, k):  # PolyBench's (i + j + (n-k)) * 10/n is harmonic: a fixed point
        return (i * j + (n - k) * k + i) % n * 10 / n

    return dict(TSTEPS=s["TSTEPS"], A=indexed((n, n, n), temperature, dtype),
                B=indexed((n, n, n), temperature, dtype))


def _heat_3d_reference(TSTEPS, A, B):
    def step(src, dst):
        c = src[1:-1, 1:-1, 1:-1]
        dst[1:-1, 1:-1, 1:-1] = (0.125 * (src[2:, 1:-1, 1:-1] - 2.0 * c + src[:-2, 1:-1, 1:-1])
                                 + 0.125 * (src[1:-1, 2:, 1:-1] - 2.0 * c + src[1:-1, :-2, 1:-1])
                                 + 0.125 * (src[1:-1, 1:-1, 2:] - 2.0 * c + src[1:-1, 1:-1, :-2])
                                 + c)

    for _ in range(TSTEPS):
        step(A, B)
        step(B, A)


# --- jacobi-1d --------------------------------------------------------------------------------

@po.kernel
def jacobi_1d(TSTEPS: int, A: f64["N"], B: f64["N"]):
    """1-D 3-point Jacobi averaging, alternating between A and B."""
    for t in range(TSTEPS):
        for i in range(1, N - 1):
            B[i] = 0.33333 * (A[i - 1] + A[i] + A[i + 1])
        for i in range(1, N - 1):
            A[i] = 0.33333 * (B[i - 1] + B[i] + B[i + 1])


def _jacobi_1d_inputs(s, dtype):
    n = s["N"]
    # PolyBench's (i + 2)/n is linear, hence (almost) a fixed point: use a quadratic mod n
    return dict(TSTEPS=s["TSTEPS"], A=indexed((n,), lambda i: (i + 2) * (i + 3) % n / n, dtype),
                B=indexed((n,), lambda i: (i + 3) * (i + 4) % n / n, dtype))


def _jacobi_1d_reference(TSTEPS, A, B):
    for _ in range(TSTEPS):
        B[1:-1] = 0.33333 * (A[:-2] + A[1:-1] + A[2:])
        A[1:-1] = 0.33333 * (B[:-2] + B[1:-1] + B[2:])


# --- jacobi-2d --------------------------------------------------------------------------------

@po.kernel
def jacobi_2d(TSTEPS: int, A: f64["N", "N"], B: f64["N", "N"]):
    """2-D 5-point Jacobi averaging, alternating between A and B."""
    for t in range(TSTEPS):
        for i in range(1, N - 1):
            for j in range(1, N - 1):
                B[i, j] = 0.2 * (A[i, j] + A[i, j - 1] + A[i, 1 + j] + A[1 + i, j] + A[i - 1, j])
        for i in range(1, N - 1):
            for j in range(1, N - 1):
                A[i, j] = 0.2 * (B[i, j] + B[i, j - 1] + B[i, 1 + j] + B[1 + i, j] + B[i - 1, j])


def _jacobi_2d_inputs(s, dtype):
    n = s["N"]
    # PolyBench's (i*(j+2) + 2)/n is discrete-harmonic, hence a fixed point: fold it modulo n
    return dict(TSTEPS=s["TSTEPS"],
                A=indexed((n, n), lambda i, j: (i * (j + 2) + 2) % n / n, dtype),
                B=indexed((n, n), lambda i, j: (i * (j + 3) + 3) % n / n, dtype))


def _jacobi_2d_reference(TSTEPS, A, B):
    def step(src, dst):
        dst[1:-1, 1:-1] = 0.2 * (src[1:-1, 1:-1] + src[1:-1, :-2] + src[1:-1, 2:] + src[2:, 1:-1]
                                 + src[:-2, 1:-1])

    for _ in range(TSTEPS):
        step(A, B)
        step(B, A)


# --- seidel-2d --------------------------------------------------------------------------------

@po.kernel
def seidel_2d(TSTEPS: int, A: f64["N", "N"]):
    """2-D 9-point Gauss-Seidel averaging, in place."""
    for t in range(TSTEPS):
        for i in range(1, N - 1):
            for j in range(1, N - 1):
                A[i, j] = (A[i - 1, j - 1] + A[i - 1, j] + A[i - 1, j + 1]
                           + A[i, j - 1] + A[i, j] + A[i, j + 1]
                           + A[i + 1, j - 1] + A[i + 1, j] + A[i + 1, j + 1]) / 9.0


def _seidel_2d_inputs(s, dtype):
    n = s["N"]
    # PolyBench's (i*(j+2) + 2)/n is a fixed point of the 9-point average: fold it modulo n
    return dict(TSTEPS=s["TSTEPS"],
                A=indexed((n, n), lambda i, j: (i * (j + 2) + 2) % n / n, dtype))


def _seidel_2d_reference(TSTEPS, A):
    # Point (i, j) reads new values at 2i+j-3 .. 2i+j-1 and old ones at 2i+j+1 .. 2i+j+3, so
    # all points of one wavefront w = 2i + j can be updated at once, in increasing w.
    n = A.shape[0]
    for _ in range(TSTEPS):
        for w in range(3, 3 * (n - 2) + 1):
            i = np.arange(max(1, (w - n + 3) // 2), min(n - 2, (w - 1) // 2) + 1)
            j = w - 2 * i
            A[i, j] = (A[i - 1, j - 1] + A[i - 1, j] + A[i - 1, j + 1]
                       + A[i, j - 1] + A[i, j] + A[i, j + 1]
                       + A[i + 1, j - 1] + A[i + 1, j] + A[i + 1, j + 1]) / 9.0


ENTRIES = (
    Entry("adi", CATEGORY, adi,
          preset_table(("TSTEPS", "N"), (20, 20), (40, 60), (100, 200), (500, 1000), (1000, 2000)),
          _adi_inputs, _adi_reference, lambda s: 30.0 * s["TSTEPS"] * (s["N"] - 2) ** 2),
    Entry("fdtd-2d", CATEGORY, fdtd_2d,
          preset_table(("TMAX", "NX", "NY"), (20, 20, 30), (40, 60, 80), (100, 200, 240),
                       (500, 1000, 1200), (1000, 2000, 2600)),
          _fdtd_2d_inputs, _fdtd_2d_reference,
          lambda s: s["TMAX"] * (3.0 * (s["NX"] - 1) * s["NY"] + 3.0 * s["NX"] * (s["NY"] - 1)
                                 + 5.0 * (s["NX"] - 1) * (s["NY"] - 1))),
    Entry("heat-3d", CATEGORY, heat_3d,
          preset_table(("TSTEPS", "N"), (20, 10), (40, 20), (100, 40), (500, 120), (1000, 200)),
          _heat_3d_inputs, _heat_3d_reference, lambda s: 30.0 * s["TSTEPS"] * (s["N"] - 2) ** 3),
    Entry("jacobi-1d", CATEGORY, jacobi_1d,
          preset_table(("TSTEPS", "N"), (20, 30), (40, 120), (100, 400), (500, 2000), (1000, 4000)),
          _jacobi_1d_inputs, _jacobi_1d_reference, lambda s: 6.0 * s["TSTEPS"] * (s["N"] - 2)),
    Entry("jacobi-2d", CATEGORY, jacobi_2d,
          preset_table(("TSTEPS", "N"), (20, 30), (40, 90), (100, 250), (500, 1300), (1000, 2800)),
          _jacobi_2d_inputs, _jacobi_2d_reference,
          lambda s: 10.0 * s["TSTEPS"] * (s["N"] - 2) ** 2),
    Entry("seidel-2d", CATEGORY, seidel_2d,
          preset_table(("TSTEPS", "N"), (20, 40), (40, 120), (100, 400), (500, 2000), (1000, 4000)),
          _seidel_2d_inputs, _seidel_2d_reference, lambda s: 9.0 * s["TSTEPS"] * (s["N"] - 2) ** 2),
)
