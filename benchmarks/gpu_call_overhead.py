"""Host time of a repeated call of a compiled CUDA kernel on CuPy arrays (issue 16 item 5: under
30 us at small sizes), against CuPy's own cheapest calls:

    python benchmarks/gpu_call_overhead.py                      # gemm atax bicg jacobi-2d 2mm at MINI
    python benchmarks/gpu_call_overhead.py gemm --size SMALL --calls 5000 --profile

Each kernel is compiled with the defaults (``po.compile(kernel, target="cuda")``), called once
(the call that records the launches), then ``--calls`` times back to back on the same CuPy
arrays; the figure is wall time per call with one synchronization at the end (so it is the host
cost whenever the GPU keeps up, the GPU time otherwise), median of 5 rounds. The same for
``cupy.add(x, y, out=z)`` on 16 elements (one CuPy launch) and for ``x.sum()``. ``--profile``
prints cProfile's top functions of one round of the first kernel.
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time

import numpy as np

import polyopt as po
from polyopt.targets.cuda import cupy_module


def per_call_us(call, calls: int, sync) -> float:
    """Median over 5 rounds of the wall time of ``calls`` calls, per call, in microseconds."""
    rounds = []
    for _ in range(5):
        sync()
        start = time.perf_counter()
        for _ in range(calls):
            call()
        sync()
        rounds.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernels", nargs="*", default=["gemm", "atax", "bicg", "jacobi-2d", "2mm"])
    parser.add_argument("--size", default="MINI")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    cp = cupy_module()
    sync = cp.cuda.get_current_stream().synchronize
    x, y, z = (cp.ones(16) for _ in range(3))
    print(f"cupy.add(16 elements, out=): {per_call_us(lambda: cp.add(x, y, out=z), args.calls, sync):.1f} us")
    print(f"cupy sum (16 elements):      {per_call_us(lambda: x.sum(), args.calls, sync):.1f} us")
    for name in args.kernels:
        entry = po.suite.get(name)
        inputs = entry.inputs(entry.sizes(args.size))
        expected = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in inputs.items()}
        entry.reference(**expected)
        device = {k: (cp.asarray(v) if isinstance(v, np.ndarray) else v) for k, v in inputs.items()}
        compiled = po.compile(entry.kernel, target="cuda")
        compiled(**device)
        for key, value in expected.items():
            if isinstance(value, np.ndarray):
                np.testing.assert_allclose(cp.asnumpy(device[key]), value, rtol=1e-9, atol=1e-9)
        call = lambda: compiled(**device)  # noqa: E731
        us = per_call_us(call, args.calls, sync)
        kernels = len(compiled.program.kernels)
        print(f"{name} ({args.size}, {kernels} kernels, {compiled.schedule.algorithm}): {us:.1f} us a call")
        if args.profile and name == args.kernels[0]:
            profile = cProfile.Profile()
            profile.enable()
            for _ in range(args.calls):
                call()
            sync()
            profile.disable()
            pstats.Stats(profile).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
