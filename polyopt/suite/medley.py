"""PolyBench medley kernels: the deriche filter, floyd-warshall and nussinov."""
from __future__ import annotations

import math

import numpy as np

import polyopt as po
from polyopt import f64

from polyopt.suite._data import indexed, zeros
from polyopt.suite._registry import Entry, preset_table

CATEGORY = "medley"


# --- deriche ----------------------------------------------------------------------------------

@po.kernel
def deriche(alpha: f64, imgIn: f64["W", "H"], imgOut: f64["W", "H"], y1: f64["W", "H"],
            y2: f64["W", "H"]):
    """Deriche recursive smoothing filter: causal/anti-causal passes along rows, then columns."""
    # Coefficients exactly as PolyBench/C 4.2.1 computes them (including its exp(2*alpha) in k's
    # denominator and b1 = 2^-alpha, which differ from the formulas of its documentation).
    k = (1.0 - exp(-alpha)) * (1.0 - exp(-alpha)) / (1.0 + 2.0 * alpha * exp(-alpha)
                                                     - exp(2.0 * alpha))
    a1 = k
    a5 = k
    a2 = k * exp(-alpha) * (alpha - 1.0)
    a6 = a2
    a3 = k * exp(-alpha) * (alpha + 1.0)
    a7 = a3
    a4 = -k * exp(-2.0 * alpha)
    a8 = a4
    b1 = pow(2.0, -alpha)
    b2 = -exp(-2.0 * alpha)
    c1 = 1.0
    c2 = 1.0
    for i in range(W):
        ym1 = 0.0
        ym2 = 0.0
        xm1 = 0.0
        for j in range(H):
            y1[i, j] = a1 * imgIn[i, j] + a2 * xm1 + b1 * ym1 + b2 * ym2
            xm1 = imgIn[i, j]
            ym2 = ym1
            ym1 = y1[i, j]
    for i in range(W):
        yp1 = 0.0
        yp2 = 0.0
        xp1 = 0.0
        xp2 = 0.0
        for j in range(H - 1, -1, -1):
            y2[i, j] = a3 * xp1 + a4 * xp2 + b1 * yp1 + b2 * yp2
            xp2 = xp1
            xp1 = imgIn[i, j]
            yp2 = yp1
            yp1 = y2[i, j]
    for i in range(W):
        for j in range(H):
            imgOut[i, j] = c1 * (y1[i, j] + y2[i, j])
    for j in range(H):
        tm1 = 0.0
        ym1 = 0.0
        ym2 = 0.0
        for i in range(W):
            y1[i, j] = a5 * imgOut[i, j] + a6 * tm1 + b1 * ym1 + b2 * ym2
            tm1 = imgOut[i, j]
            ym2 = ym1
            ym1 = y1[i, j]
    for j in range(H):
        tp1 = 0.0
        tp2 = 0.0
        yp1 = 0.0
        yp2 = 0.0
        for i in range(W - 1, -1, -1):
            y2[i, j] = a7 * tp1 + a8 * tp2 + b1 * yp1 + b2 * yp2
            tp2 = tp1
            tp1 = imgOut[i, j]
            yp2 = yp1
            yp1 = y2[i, j]
    for i in range(W):
        for j in range(H):
            imgOut[i, j] = c2 * (y1[i, j] + y2[i, j])


def _deriche_inputs(s, dtype):
    w, h = s["W"], s["H"]
    return dict(alpha=0.25,
                imgIn=indexed((w, h), lambda i, j: (313 * i + 991 * j) % 65536 / 65535.0, dtype),
                imgOut=zeros((w, h), dtype), y1=zeros((w, h), dtype), y2=zeros((w, h), dtype))


def _deriche_reference(alpha, imgIn, imgOut, y1, y2):
    k = ((1.0 - math.exp(-alpha)) * (1.0 - math.exp(-alpha))
         / (1.0 + 2.0 * alpha * math.exp(-alpha) - math.exp(2.0 * alpha)))
    a1 = a5 = k
    a2 = a6 = k * math.exp(-alpha) * (alpha - 1.0)
    a3 = a7 = k * math.exp(-alpha) * (alpha + 1.0)
    a4 = a8 = -k * math.exp(-2.0 * alpha)
    b1, b2 = math.pow(2.0, -alpha), -math.exp(-2.0 * alpha)
    c1 = c2 = 1.0

    def causal(x, y, a_cur, a_prev):  # y[:, n] from x at n, n-1 and y at n-1, n-2
        x1 = y_1 = y_2 = 0.0
        for n in range(x.shape[1]):
            y[:, n] = a_cur * x[:, n] + a_prev * x1 + b1 * y_1 + b2 * y_2
            x1, y_2, y_1 = x[:, n].copy(), y_1, y[:, n].copy()

    def anticausal(x, y, a_next, a_next2):  # y[:, n] from x and y at n+1, n+2
        x1 = x2 = y_1 = y_2 = 0.0
        for n in range(x.shape[1] - 1, -1, -1):
            y[:, n] = a_next * x1 + a_next2 * x2 + b1 * y_1 + b2 * y_2
            x2, x1, y_2, y_1 = x1, x[:, n].copy(), y_1, y[:, n].copy()

    causal(imgIn, y1, a1, a2)  # horizontal pass: along j for all rows i at once
    anticausal(imgIn, y2, a3, a4)
    imgOut[:] = c1 * (y1 + y2)
    causal(imgOut.T, y1.T, a5, a6)  # vertical pass: along i for all columns j at once
    anticausal(imgOut.T, y2.T, a7, a8)
    imgOut[:] = c2 * (y1 + y2)


# --- floyd-warshall ---------------------------------------------------------------------------

@po.kernel
def floyd_warshall(path: f64["N", "N"]):
    """All-pairs shortest path lengths, relaxing every pair through each intermediate node k."""
    for k in range(N):
        for i in range(N):
            for j in range(N):
                path[i, j] = min(path[i, j], path[i, k] + path[k, j])


def _floyd_warshall_inputs(s, dtype):
    n = s["N"]

    def weight(i, j):  # 1..7, and 999 ("no edge") on some anti-diagonals
        no_edge = ((i + j) % 13 == 0) | ((i + j) % 7 == 0) | ((i + j) % 11 == 0)
        return np.where(no_edge, 999.0, i * j % 7 + 1)

    return dict(path=indexed((n, n), weight, dtype))


def _floyd_warshall_reference(path):
    # Row and column k do not change in step k (the diagonal is non-negative), so each step
    # is one vectorized relaxation.
    for k in range(path.shape[0]):
        np.minimum(path, path[:, k:k + 1] + path[k:k + 1, :], out=path)


# --- nussinov ---------------------------------------------------------------------------------

@po.kernel
def nussinov(seq: f64["N"], table: f64["N", "N"]):
    """Nussinov RNA folding: table[i, j] = most complementary base pairs within seq[i..j]."""
    for i in range(N - 1, -1, -1):
        for j in range(i + 1, N):
            if j - 1 >= 0:
                table[i, j] = max(table[i, j], table[i, j - 1])
            if i + 1 < N:
                table[i, j] = max(table[i, j], table[i + 1, j])
            if j - 1 >= 0 and i + 1 < N:
                if i < j - 1:
                    table[i, j] = max(table[i, j],
                                      table[i + 1, j - 1] + (1.0 if seq[i] + seq[j] == 3 else 0.0))
                else:
                    table[i, j] = max(table[i, j], table[i + 1, j - 1])
            for k in range(i + 1, j):
                table[i, j] = max(table[i, j], table[i, k] + table[k + 1, j])


def _nussinov_inputs(s, dtype):
    n = s["N"]
    return dict(seq=indexed((n,), lambda i: (i + 1) % 4, dtype), table=zeros((n, n), dtype))


def _nussinov_reference(seq, table):
    # Every candidate of table[i, j] lies on a shorter diagonal (j - i), and max is exact, so
    # the table can be filled one diagonal at a time.
    n = seq.shape[0]
    for d in range(1, n):
        i = np.arange(n - d)
        j = i + d
        best = np.maximum(table[i, j], table[i, j - 1])
        best = np.maximum(best, table[i + 1, j])
        match = (seq[i] + seq[j] == 3) if d > 1 else 0.0
        best = np.maximum(best, table[i + 1, j - 1] + match)
        if d > 1:
            k = i[:, None] + np.arange(1, d)[None, :]
            best = np.maximum(best, (table[i[:, None], k] + table[k + 1, j[:, None]]).max(axis=1))
        table[i, j] = best


ENTRIES = (
    Entry("deriche", CATEGORY, deriche,
          preset_table(("W", "H"), (64, 64), (192, 128), (720, 480), (4096, 2160), (7680, 4320)),
          _deriche_inputs, _deriche_reference, lambda s: 32.0 * s["W"] * s["H"]),
    Entry("floyd-warshall", CATEGORY, floyd_warshall,
          preset_table(("N",), (60,), (180,), (500,), (2800,), (5600,)),
          _floyd_warshall_inputs, _floyd_warshall_reference, lambda s: 2.0 * s["N"] ** 3),
    Entry("nussinov", CATEGORY, nussinov,
          preset_table(("N",), (60,), (180,), (500,), (2500,), (5500,)),
          _nussinov_inputs, _nussinov_reference,
          lambda s: s["N"] * (s["N"] - 1) * (s["N"] - 2) / 3.0 + 2.0 * s["N"] * (s["N"] - 1)),
)
