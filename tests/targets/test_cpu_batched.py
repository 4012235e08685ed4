"""Batched contractions on the default CPU compile: the batch loop is the parallel tile loop with
all the batch's values as its iterations (cost model: no reuse across the batch, tile size 1),
so a batch of 8 spreads over the thread team; results against numpy."""
from __future__ import annotations

import numpy as np
import pytest

import polyopt as po
from polyopt import f64

RNG = np.random.default_rng(15)


@po.kernel
def bmm(C: f64["NB", "NI", "NJ"], A: f64["NB", "NI", "NK"], B: f64["NB", "NK", "NJ"]):
    for b in range(NB):
        for i in range(NI):
            for j in range(NJ):
                C[b, i, j] = 0.0
                for k in range(NK):
                    C[b, i, j] += A[b, i, k] * B[b, k, j]


@po.kernel
def shared_weights(C: f64["NB", "NI", "NJ"], A: f64["NI", "NK"], B: f64["NB", "NK", "NJ"]):
    for b in range(NB):
        for i in range(NI):
            for j in range(NJ):
                C[b, i, j] = 0.0
                for k in range(NK):
                    C[b, i, j] += A[i, k] * B[b, k, j]


def _contraction_band(kernel):
    """The cost model's estimate of the band of the sums of products (the one it tiles)."""
    [band] = [cost for cost in kernel.cost if cost.tile]
    return band


@pytest.mark.parametrize("num_threads", [1, 2, 3])
def test_a_batch_is_the_parallel_tile_loop_over_every_batch_value(num_threads):
    """The batch member gets tile size 1: the outermost parallel loop steps through the batch
    one by one (a batch of 8 tiled by 8 left one iteration, one busy thread)."""
    kernel = po.compile(bmm, num_threads=num_threads)
    band = _contraction_band(kernel)
    assert band.tile_sizes[0] == 1 and band.parallel and band.registers
    assert "#pragma omp parallel for\n  for (long c0 = 0; c0 < NB; c0 += 1)" in kernel.c_source
    A, B = RNG.random((8, 37, 45)) - 0.5, RNG.random((8, 45, 29)) - 0.5
    C = np.zeros((8, 37, 29))
    kernel(C, A, B)
    np.testing.assert_allclose(C, A @ B, rtol=1e-12, atol=1e-12)


def test_a_member_with_reuse_keeps_the_models_tile():
    """Where an array is the same at every batch value (weights shared across the batch),
    tiling the batch reuses it: the model's own size stays."""
    kernel = po.compile(shared_weights)
    assert _contraction_band(kernel).tile_sizes[0] > 1
    A, B = RNG.random((20, 33)) - 0.5, RNG.random((9, 33, 17)) - 0.5
    C = np.zeros((9, 20, 17))
    kernel(C, A, B)
    np.testing.assert_allclose(C, np.einsum("ik,bkj->bij", A, B), rtol=1e-12, atol=1e-12)


def test_batched_einsum_tiles_the_batch_by_one():
    """po.einsum's tiled plan of a batched matmul (its large calls) has the same batch tiles:
    both nests, the zero-fill and the sums, run their parallel loop over every batch value."""
    A, B = RNG.random((8, 40, 50)) - 0.5, RNG.random((8, 50, 30)) - 0.5
    kernel = po.einsum_kernel("bik,bkj->bij", A, B)
    assert "register_tile(" in str(kernel.schedule.trace)
    assert kernel.c_source.count("#pragma omp parallel for\n  for (long c0 = 0; c0 < N_b; c0 += 1)") == 2
    out = np.zeros((8, 40, 30))
    kernel(op0=A, op1=B, out=out)
    np.testing.assert_allclose(out, A @ B, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(po.einsum("bik,bkj->bij", A, B, num_threads=2), A @ B, rtol=1e-12, atol=1e-12)
