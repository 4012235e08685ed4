"""Host time of repeated small ``po.einsum`` calls by element type and array kind.

    python benchmarks/gpu_einsum_call_overhead.py [LABEL]

For float32 and float16 CuPy arrays and float32, float16 and bfloat16 PyTorch tensors, 16x16 and 64x64:
1,000 calls of ``po.einsum("ij,jk->ik", a, b)`` back to back, one synchronization, median of 5
runs (0.3 s of warm-up calls first), in microseconds per call; torch.einsum on the same data beside
it. Prints a Markdown table, headed by LABEL. Needs CuPy, torch and a GPU.
"""
from __future__ import annotations

import statistics
import sys
import time

import cupy as cp
import numpy as np
import torch

import polyopt as po


#: Seconds of calls before a case's timing: after 50 warm-up calls the first case of a run timed
#: slower than every other (docs/performance.md, "Short sums on the TMA kernels").
WARM_SECONDS = 0.3


def per_call_us(call, calls: int = 1000) -> float:
    """Median over 5 runs of ``calls`` back-to-back calls, per call (us), after
    :data:`WARM_SECONDS` (at least 50 calls) of warm-up."""
    warm_until, warmed = time.perf_counter() + WARM_SECONDS, 0
    while warmed < 50 or time.perf_counter() < warm_until:
        call()
        warmed += 1
    cp.cuda.Device().synchronize()
    runs = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        cp.cuda.Device().synchronize()
        runs.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(runs)


def rows() -> list[tuple[str, float, float]]:
    """(case, po.einsum us, torch.einsum us) per case."""
    rng = np.random.default_rng(0)
    found = []
    for n in (16, 64):
        for dtype in (np.float32, np.float16):
            a, b = (cp.asarray(rng.standard_normal((n, n)).astype(dtype)) for _ in range(2))
            ta, tb = torch.as_tensor(a, device="cuda"), torch.as_tensor(b, device="cuda")
            found.append((f"{np.dtype(dtype).name} CuPy {n}x{n}", per_call_us(lambda: po.einsum("ij,jk->ik", a, b)),
                          per_call_us(lambda: torch.einsum("ij,jk->ik", ta, tb))))
        for dtype in (torch.bfloat16, torch.float16, torch.float32):
            x, y = (torch.randn(n, n, device="cuda").to(dtype) for _ in range(2))
            found.append((f"{str(dtype)[6:]} torch {n}x{n}", per_call_us(lambda: po.einsum("ij,jk->ik", x, y)),
                          per_call_us(lambda: torch.einsum("ij,jk->ik", x, y))))
    return found


if __name__ == "__main__":
    print(sys.argv[1] if len(sys.argv) > 1 else "")
    print("| call | po.einsum us | torch.einsum us |\n|---|---|---|")
    for case, ours, theirs in rows():
        print(f"| {case} | {ours:.1f} | {theirs:.1f} |")
