"""GPU benchmark of suite kernels compiled with ``target="cuda"`` (``polyopt bench --target cuda``).

For each kernel: kernel-only time (CUDA events around the host program on arrays already on
the GPU; ``kernel_*`` with the host loop in Python, ``graph_*`` replaying it as a CUDA graph),
end-to-end time (numpy arrays in and out: copies, launches, synchronization), the
result checked against the numpy reference, and for gemm-like kernels cuBLAS (CuPy's matmul,
TF32 off) as the baseline. Times are the best and the median of ``repeats`` runs.

Run it on a GPU machine: ``python -m polyopt.bench_cuda gemm jacobi-2d --preset LARGE``.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Callable

import numpy as np

from polyopt.cuda import cupy_module
from polyopt.runtime import compile

#: cuBLAS versions of gemm-like suite kernels: ``f(cupy, device arrays, scalars)``.
CUBLAS: dict[str, Callable] = {
    "gemm": lambda cp, a, s: cp.add(s["alpha"] * (a["A"] @ a["B"]), s["beta"] * a["C"], out=a["C"]),
    "2mm": lambda cp, a, s: cp.add(s["alpha"] * ((a["A"] @ a["B"]) @ a["C"]), s["beta"] * a["D"],
                                   out=a["D"]),
    "3mm": lambda cp, a, s: cp.matmul(a["A"] @ a["B"], a["C"] @ a["D"], out=a["G"]),
    "syrk": lambda cp, a, s: cp.add(s["alpha"] * (a["A"] @ a["A"].T), s["beta"] * a["C"], out=a["C"]),
}


def _event_ms(cp, run: Callable[[], object], repeats: int) -> list[float]:
    samples = []
    for _ in range(repeats):
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        run()
        stop.record()
        stop.synchronize()
        samples.append(cp.cuda.get_elapsed_time(start, stop))
    return samples


def _summary(samples: list[float]) -> dict[str, float]:
    return {"best_ms": min(samples), "median_ms": statistics.median(samples)}


def bench_kernel(name: str, sizes: dict[str, int], dtype=np.float64, *, repeats: int = 10,
                 algorithm: str = "pluto", check: bool = True, **options) -> dict:
    """One row of the benchmark: times (ms), GFLOP/s, the check's max relative error and the
    cuBLAS baseline where :data:`CUBLAS` has one."""
    import polyopt as po

    cp = cupy_module()
    entry = po.suite.get(name)
    kernel = entry.kernel if np.dtype(dtype) == np.float64 else entry.kernel.with_dtype(
        "f32" if np.dtype(dtype) == np.float32 else dtype)
    compiled = compile(kernel, target="cuda", algorithm=algorithm, **options)
    inputs = entry.inputs(sizes, dtype)
    row: dict = {"kernel": name, "sizes": dict(sizes), "dtype": np.dtype(dtype).name,
                 "schedule": compiled.schedule.algorithm, "kernels": len(compiled.program.kernels)}
    bound, device, _ = compiled.bind((), dict(inputs))
    compiled.launch(bound.params, bound.scalars, device)  # NVRTC build and warm-up
    cp.cuda.Device().synchronize()
    if check:
        expected = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in inputs.items()}
        entry.reference(**expected)
        fresh = entry.inputs(sizes, dtype)
        compiled(**fresh)
        row["max_rel_error"] = max(
            float(np.max(np.abs(fresh[k] - v) / (np.abs(v) + 1e-6))) if v.size else 0.0
            for k, v in expected.items() if isinstance(v, np.ndarray))
    kernel_ms = _event_ms(cp, lambda: compiled.launch(bound.params, bound.scalars, device), repeats)
    row.update({f"kernel_{k}": v for k, v in _summary(kernel_ms).items()})
    compiled.launch(bound.params, bound.scalars, device, graph=True)  # capture
    graph_ms = _event_ms(cp, lambda: compiled.launch(bound.params, bound.scalars, device, graph=True),
                         repeats)
    row.update({f"graph_{k}": v for k, v in _summary(graph_ms).items()})
    end_to_end = []
    for _ in range(max(3, repeats // 3)):
        args = entry.inputs(sizes, dtype)
        start = time.perf_counter()
        compiled(**args)
        end_to_end.append((time.perf_counter() - start) * 1e3)
    row.update({f"end_to_end_{k}": v for k, v in _summary(end_to_end).items()})
    flops = entry.flops(sizes)
    best = min(row["kernel_best_ms"], row["graph_best_ms"])
    row["gflops"] = flops / (best * 1e6)
    if name in CUBLAS:
        scalars = {k: v for k, v in inputs.items() if not isinstance(v, np.ndarray)}
        cublas = _event_ms(cp, lambda: CUBLAS[name](cp, device, scalars), repeats)  # no TF32
        row.update({f"cublas_{k}": v for k, v in _summary(cublas).items()})
        row["cublas_gflops"] = flops / (row["cublas_best_ms"] * 1e6)
        row["fraction_of_cublas"] = row["cublas_best_ms"] / best
    return row


def bench_suite(names: list[str], preset: str = "LARGE", dtype=np.float64, *, repeats: int = 10,
                algorithm: str = "pluto", **options) -> list[dict]:
    """Rows of :func:`bench_kernel` for suite kernels at a PolyBench preset (the entry point
    ``polyopt bench --target cuda`` calls)."""
    import polyopt as po

    return [bench_kernel(n, po.suite.get(n).sizes(preset), dtype, repeats=repeats,
                         algorithm=algorithm, **options) for n in names]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m polyopt.bench_cuda", description=__doc__.split("\n")[0])
    parser.add_argument("kernels", nargs="+")
    parser.add_argument("--preset", default="LARGE")
    parser.add_argument("--sizes", help="explicit sizes as JSON, e.g. '{\"NI\": 4096, ...}'")
    parser.add_argument("--dtype", default="f64", choices=("f32", "f64"))
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--tile", type=int, nargs="*")
    parser.add_argument("--block", type=int, nargs="*")
    parser.add_argument("--no-shared", action="store_true", help="no shared-memory staging")
    parser.add_argument("--no-check", action="store_true", help="skip the numpy reference check")
    parser.add_argument("--json", help="append the rows to this file (JSON lines)")
    args = parser.parse_args(argv)
    import polyopt as po

    dtype = np.float32 if args.dtype == "f32" else np.float64
    options = {k: tuple(v) for k, v in (("tile", args.tile), ("block", args.block)) if v}
    if args.no_shared:
        options["shared"] = False
    for name in args.kernels:
        sizes = json.loads(args.sizes) if args.sizes else po.suite.get(name).sizes(args.preset)
        row = bench_kernel(name, sizes, dtype, repeats=args.repeats, check=not args.no_check,
                           **options)
        print(json.dumps(row), flush=True)
        if args.json:
            with open(args.json, "a") as out:
                out.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
