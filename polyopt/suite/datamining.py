"""PolyBench datamining kernels: correlation and covariance of the columns of a data matrix."""
from __future__ import annotations

import numpy as np

import polyopt as po
from polyopt import f64

from polyopt.suite._data import indexed, zeros
from polyopt.suite._registry import Entry, preset_table

CATEGORY = "datamining"
_SIZES = preset_table(("M", "N"), (28, 32), (80, 100), (240, 260), (1200, 1400), (2600, 3000))


def _samples(s, dtype) -> np.ndarray:
    """N samples of M attributes: a pseudo-random part in [0, 1) plus a trend in the sample index.

    (PolyBench's ``i*j/M + i`` makes every column a multiple of the index, so all correlations
    are exactly 1; this keeps its shape but gives a non-degenerate matrix.)
    """
    m, n = s["M"], s["N"]
    return indexed((n, m), lambda i, j: (i * j % m) / m + i / n, dtype)


# --- correlation ------------------------------------------------------------------------------

@po.kernel
def correlation(data: f64["N", "M"], corr: f64["M", "M"], mean: f64["M"], stddev: f64["M"]):
    """Pearson correlation matrix of the M columns of data (standardizes data in place)."""
    eps = 0.1
    for j in range(M):
        mean[j] = 0.0
        for i in range(N):
            mean[j] += data[i, j]
        mean[j] /= N
    for j in range(M):
        stddev[j] = 0.0
        for i in range(N):
            stddev[j] += (data[i, j] - mean[j]) * (data[i, j] - mean[j])
        stddev[j] /= N
        stddev[j] = sqrt(stddev[j])
        stddev[j] = 1.0 if stddev[j] <= eps else stddev[j]
    for i in range(N):
        for j in range(M):
            data[i, j] -= mean[j]
            data[i, j] /= sqrt(N) * stddev[j]
    for i in range(M - 1):
        corr[i, i] = 1.0
        for j in range(i + 1, M):
            corr[i, j] = 0.0
            for k in range(N):
                corr[i, j] += data[k, i] * data[k, j]
            corr[j, i] = corr[i, j]
    corr[M - 1, M - 1] = 1.0


def _correlation_inputs(s, dtype):
    m = s["M"]
    return dict(data=_samples(s, dtype), corr=zeros((m, m), dtype), mean=zeros((m,), dtype),
                stddev=zeros((m,), dtype))


def _correlation_reference(data, corr, mean, stddev):
    n = data.shape[0]
    mean[:] = data.sum(axis=0) / n
    stddev[:] = np.sqrt(((data - mean) ** 2).sum(axis=0) / n)
    stddev[stddev <= 0.1] = 1.0
    data -= mean
    data /= np.sqrt(n) * stddev
    corr[:] = data.T @ data
    np.fill_diagonal(corr, 1.0)


# --- covariance -------------------------------------------------------------------------------

@po.kernel
def covariance(data: f64["N", "M"], cov: f64["M", "M"], mean: f64["M"]):
    """Sample covariance matrix of the M columns of data (centers data in place)."""
    for j in range(M):
        mean[j] = 0.0
        for i in range(N):
            mean[j] += data[i, j]
        mean[j] /= N
    for i in range(N):
        for j in range(M):
            data[i, j] -= mean[j]
    for i in range(M):
        for j in range(i, M):
            cov[i, j] = 0.0
            for k in range(N):
                cov[i, j] += data[k, i] * data[k, j]
            cov[i, j] /= N - 1.0
            cov[j, i] = cov[i, j]


def _covariance_inputs(s, dtype):
    m = s["M"]
    return dict(data=_samples(s, dtype), cov=zeros((m, m), dtype), mean=zeros((m,), dtype))


def _covariance_reference(data, cov, mean):
    n = data.shape[0]
    mean[:] = data.sum(axis=0) / n
    data -= mean
    cov[:] = data.T @ data / (n - 1.0)


ENTRIES = (
    Entry("correlation", CATEGORY, correlation, _SIZES, _correlation_inputs,
          _correlation_reference, lambda s: s["N"] * s["M"] * (s["M"] - 1) + 6.0 * s["N"] * s["M"]),
    Entry("covariance", CATEGORY, covariance, _SIZES, _covariance_inputs,
          _covariance_reference, lambda s: s["N"] * s["M"] * (s["M"] + 1) + 2.0 * s["N"] * s["M"]),
)
