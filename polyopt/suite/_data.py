"""Deterministic input construction shared by the suite's kernels.

Inputs follow PolyBench/C 4.2's ``init_array`` formulas where those give well-conditioned
problems, and stay close to them in spirit (index formulas, moderate magnitudes) where not.
"""
from __future__ import annotations

from typing import Callable

import numpy as np


def indexed(shape: tuple[int, ...], formula: Callable[..., object], dtype) -> np.ndarray:
    """A fresh C-contiguous array whose element ``[i, j, ...]`` is ``formula(i, j, ...)``.

    ``formula`` receives broadcastable int64 index grids (one per dimension) and may use any
    numpy arithmetic on them; it is evaluated in float64 and the result converted to ``dtype``.
    """
    grids = np.ix_(*(np.arange(n, dtype=np.int64) for n in shape))
    values = np.broadcast_to(np.asarray(formula(*grids), dtype=np.float64), shape)
    return np.array(values, dtype=dtype, order="C", copy=True)


def zeros(shape: tuple[int, ...], dtype) -> np.ndarray:
    """A fresh C-contiguous array of zeros."""
    return np.zeros(shape, dtype=dtype)


def full(shape: tuple[int, ...], value: float, dtype) -> np.ndarray:
    """A fresh C-contiguous array filled with ``value``."""
    return np.full(shape, value, dtype=dtype)


def spd_matrix(n: int, dtype) -> np.ndarray:
    """A well-conditioned symmetric positive-definite ``n x n`` matrix (cholesky, lu, ludcmp).

    As in PolyBench: ``B B^T`` for the unit lower-triangular ``B[i, j] = 1 - j/n`` (``j < i``);
    here scaled by ``1/n`` and shifted by the identity, which keeps entries in ``[0, 1.4]`` and
    the condition number below ``n/4`` so that factorizations without pivoting are stable.
    """
    lower = indexed((n, n), lambda i, j: np.where(j < i, 1.0 - j / n, 0.0) + (i == j), np.float64)
    return np.array(lower @ lower.T / n + np.eye(n), dtype=dtype, order="C")
