"""gemm on the GPU at one size: polyopt's CUDA code for several launch shapes against cuBLAS
and, where torch is importable, torch (cuBLAS through ``torch.addmm``, TF32 off and on).

    python benchmarks/gpu_gemm.py --n 4096 --dtype f32 --shape 64x128/8x32 --shape 128x128/16x16
    python benchmarks/gpu_gemm.py --n 1000,1100,1200 --dtype f64
    python benchmarks/gpu_gemm.py --n 4096 --dtype f32 --precision exact --precision tf32

Each ``--shape TILE/BLOCK[/VECTOR]`` (rows x columns of the block tile / of the thread block /
adjacent coordinates per run; omitted: polyopt's defaults) is compiled with ``po.compile(gemm, target="cuda", tile=..., block=...)``.
Every computation runs on CuPy arrays already on the GPU, back to back: ``--warmup`` untimed
runs, then ``--repeats`` runs each between two CUDA events (median and best reported), so the
GPU is at its working clocks and the times compare kernels, not clock ramps. cuBLAS (TF32 off,
CuPy's default) runs twice: one ``cupy.cublas.gemm`` call (alpha and beta inside SGEMM/DGEMM,
the baseline of the percentages) and as ``polyopt bench`` runs it (matmul, then the scaling
kernels). torch runs ``addmm`` on the same memory (``torch.as_tensor``), timed with torch's CUDA
events, with ``torch.backends.cuda.matmul.allow_tf32`` off ("exact") and, for f32, on ("tf32").
polyopt runs each ``--precision`` (default "exact"; others are passed to ``po.compile`` as
``precision=``). Every row names its dtype and precision mode; each result is checked against
matmul's (normwise relative error). Needs CuPy and a GPU.
"""
from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
from typing import Callable

import numpy as np

import polyopt as po
from polyopt.bench.einsum_cuda import torch_module
from polyopt.codegen.cuda_contraction import contraction_steps
from polyopt.targets.cuda import cupy_module


def timed(cp, run, warmup: int, repeats: int) -> list[float]:
    """Milliseconds of ``repeats`` runs of ``run`` after ``warmup`` untimed ones."""
    for _ in range(warmup):
        run()
    times = []
    for _ in range(repeats):
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        run()
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop))
    return times


def timed_torch(torch, run: Callable[[], object], warmup: int, repeats: int) -> list[float]:
    """Milliseconds of ``repeats`` runs of ``run`` between torch's CUDA events, after ``warmup``."""
    for _ in range(warmup):
        run()
    times = []
    for _ in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return times


def torch_rows(cp, torch, A, B, C, C0, alpha: float, beta: float, expected, dtype: str, flops: float,
               warmup: int, repeats: int) -> list[dict]:
    """torch's addmm (cuBLAS) on the same arrays, TF32 off and (f32) on: one row each."""
    a, b, c = (torch.as_tensor(x, device="cuda") for x in (A, B, C))
    rows = []
    for precision in ("exact", "tf32") if dtype == "f32" else ("exact",):
        before = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        try:
            def run():
                torch.addmm(c, a, b, beta=beta, alpha=alpha, out=c)
            times = timed_torch(torch, run, warmup, repeats)
            C[...] = C0
            run()
            torch.cuda.synchronize()
        finally:
            torch.backends.cuda.matmul.allow_tf32 = before
        error = float(cp.linalg.norm(C - expected) / cp.linalg.norm(expected))
        rows.append({"name": f"torch {torch.__version__} addmm", "precision": precision, "error": error,
                     **_stats(times, flops)})
    return rows


def launched(compiled, ni: int, nj: int) -> dict:
    """Which kernel variant the update launches at this size, its block and unroll; a contraction
    kernel (polyopt.targets.contraction) picks its tile per launch, and says so."""
    if contraction_steps(compiled.compiled):
        return {"kernel": "contraction (tile chosen per launch)", "block": None, "unroll": None}
    update = compiled.program.kernels[-1]
    variant, shape, _ = compiled.compiled.choose(update.name, [0, 0], [ni - 1, nj - 1])
    return {"kernel": variant, "block": shape.block, "unroll": shape.unroll}


def parse_shape(text: str) -> dict:
    """``"64x128/8x32"`` -> {"tile": (64, 128), "block": (8, 32)}, ``"64x128/8x32/4"`` adds
    {"vector": 4}; ``"default"`` -> {}."""
    if text == "default":
        return {}
    parts = text.split("/")
    options = {"tile": tuple(map(int, parts[0].split("x"))),
               "block": tuple(map(int, parts[1].split("x")))}
    if len(parts) > 2:
        options["vector"] = int(parts[2])
    return options


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", default="4096", help="NI = NJ = NK, or NI,NJ,NK")
    parser.add_argument("--dtype", choices=("f32", "f64"), default="f32")
    parser.add_argument("--shape", action="append", default=None)
    parser.add_argument("--precision", action="append", default=None,
                        help="polyopt's precision mode (repeatable; default exact)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args(argv)
    cp = cupy_module()
    dtype = np.float32 if args.dtype == "f32" else np.float64
    rng = np.random.default_rng(0)
    sizes = [int(v) for v in args.n.split(",")]
    ni, nj, nk = sizes * 3 if len(sizes) == 1 else sizes
    A = cp.asarray(rng.random((ni, nk)), dtype=dtype)
    B = cp.asarray(rng.random((nk, nj)), dtype=dtype)
    C0 = cp.asarray(rng.random((ni, nj)), dtype=dtype)
    alpha, beta = 1.5, 1.2
    flops = 2.0 * ni * nj * nk
    C = C0.copy()

    cublas_module = importlib.import_module("cupy.cublas")

    def cublas():  # one SGEMM/DGEMM call, alpha and beta applied by cuBLAS
        cublas_module.gemm("N", "N", A, B, out=C, alpha=alpha, beta=beta)

    def matmul():  # as polyopt bench's cuBLAS runner: matmul, then the scaling kernels
        cp.add(alpha * (A @ B), beta * C, out=C)

    rows = [{"name": "cublas gemm", "precision": "exact",
             **_stats(timed(cp, cublas, args.warmup, args.repeats), flops)},
            {"name": "cublas matmul+scale", "precision": "exact",
             **_stats(timed(cp, matmul, args.warmup, args.repeats), flops)}]
    expected = alpha * (A @ B) + beta * C0
    C[...] = C0
    cublas()
    rows[0]["error"] = float(cp.linalg.norm(C - expected) / cp.linalg.norm(expected))
    torch = torch_module()
    if torch is not None:
        rows += torch_rows(cp, torch, A, B, C, C0, alpha, beta, expected, args.dtype, flops, args.warmup,
                           args.repeats)
    kernel = po.suite.get("gemm").kernel.with_dtype(args.dtype)
    for text, precision in [(t, p) for p in args.precision or ["exact"] for t in args.shape or ["default"]]:
        options = parse_shape(text)
        if precision != "exact":
            options["precision"] = precision
        compiled = po.compile(kernel, target="cuda", **options)
        C[...] = C0
        compiled(alpha, beta, C, A, B)
        error = float(cp.linalg.norm(C - expected) / cp.linalg.norm(expected))
        bound, device, _ = compiled.bind((alpha, beta, C, A, B), {})
        times = timed(cp, lambda: compiled.launch(bound.params, bound.scalars, device),
                      args.warmup, args.repeats)
        rows.append({"name": f"polyopt {text}", "precision": precision, **launched(compiled, ni, nj),
                     "error": error, **_stats(times, flops)})
    # the percentages: of cuBLAS in the same mode (TF32: torch's addmm with TF32 on)
    best = {"exact": rows[0]["median_ms"]}
    best.update((row["precision"], row["median_ms"]) for row in rows
                if row["name"].startswith("torch") and row["precision"] != "exact")
    device = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"gemm {ni}x{nj}x{nk} {args.dtype} on {device}, {args.warmup} warm-up + {args.repeats} runs")
    for row in rows:
        row["of_cublas"] = best[row["precision"]] / row["median_ms"] if row["precision"] in best else None
        print(f"{row['name']:32s} {args.dtype} {row['precision']:5s} {row['median_ms']:8.3f} ms (best {row['best_ms']:.3f}) "
              f"{row['tflops']:6.2f} TFLOP/s  "
              + (f"{100 * row['of_cublas']:5.1f} % of cuBLAS ({row['precision']})" if row["of_cublas"] else "")
              + (f"  error {row['error']:.1e}" if "error" in row else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": device, "sizes": [ni, nj, nk], "dtype": args.dtype, "rows": rows}, f, indent=1)
    return rows


def _stats(times: list[float], flops: float) -> dict:
    median = statistics.median(times)
    return {"median_ms": median, "best_ms": min(times), "tflops": flops / median / 1e9}


if __name__ == "__main__":
    try:
        main()
    except po.TargetUnavailableError as error:  # no CuPy or no GPU: one line, no traceback
        sys.exit(f"gpu_gemm.py: {error}")
