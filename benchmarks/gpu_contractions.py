"""Kernel time of polyopt's GPU contraction kernels against torch.einsum, on the issue's shapes.

    python benchmarks/gpu_contractions.py                      # f32 exact, f32 tf32, f64, f16, bf16
    python benchmarks/gpu_contractions.py --mode f32-exact --json rows.json
    python benchmarks/gpu_contractions.py --mode f64 --case 'ij,jk->ik:1000x1200,1200x1100' --all-variants

Each contraction is compiled as ``po.einsum`` compiles it (the default path: the contraction
kernel, its tile chosen at launch), bound once to CuPy arrays, launched once with its launches
recorded, and those replayed 20 times back to back between two CUDA events (median of 5 such
runs per launch; 3 warm-up runs) -- the launches a repeated ``po.einsum`` call makes
(:class:`~polyopt.targets.cuda.LaunchRecord`), so the figure is the kernel's time wherever the
replay's host time is shorter than the kernel (the host cost of a ``po.einsum`` call is
measured by ``polyopt bench --einsum --target cuda``; the whole launch path, tile choice and
tensor maps included, took longer than the ~40 us kernels it launched). torch.einsum runs the same way on the same data
(TF32 as the mode says). bf16 operands are made by torch and handed to the kernel as CuPy
uint16 views of their bits (CuPy has no bfloat16), as ``po.einsum`` does; half results are
stored by the kernel in the operands' type, as ``po.einsum`` has them stored. Each result is
checked against a float64 einsum (normwise relative error). ``--case`` replaces the issue's
shapes; ``--all-variants`` also times every tile shape the kernel's source holds, each forced
in turn (what the launch-time choice chooses among).
Needs CuPy, torch and a GPU.
"""
from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time

import numpy as np

import polyopt as po
from polyopt.bench.machine import gpu_info, now_utc
from polyopt.targets import contraction
from polyopt.targets.cuda import CudaKernel, cupy_module, plan

#: The contractions of issue 17 (attention, batched matmul, plain GEMM, tensor contraction,
#: 1x1 convolution).
CASES = [("bhqd,bhkd->bhqk", [(8, 16, 512, 64), (8, 16, 512, 64)]),
         ("bhqk,bhkd->bhqd", [(8, 16, 512, 512), (8, 16, 512, 64)]),
         ("bik,kj->bij", [(16, 512, 1024), (1024, 1024)]),
         ("ij,jk->ik", [(4096, 4096), (4096, 4096)]),
         ("abcd,cdef->abef", [(32, 32, 32, 32), (32, 32, 32, 32)]),
         ("nchw,kc->nkhw", [(32, 256, 28, 28), (256, 256)])]
#: mode -> (dtype, precision)
MODES = {"f32-exact": ("float32", "exact"), "f32-tf32": ("float32", "tf32"), "f64": ("float64", "exact"),
         "f16": ("float16", "exact"), "bf16": ("bfloat16", "exact")}


#: Seconds of back-to-back runs before a timing: after a compile or another library's runs the
#: GPU idled and its clocks fell, and three warm-up runs of a 40 us kernel did not bring them
#: back (the same kernel timed 0.045 and 0.065 ms in one process on an H200).
WARM_SECONDS = 0.2


def per_launch_ms(cp, run, launches: int = 20, repeats: int = 5) -> float:
    """Median over ``repeats`` of the time of ``launches`` back-to-back runs, per run (ms),
    after :data:`WARM_SECONDS` (at least 3 runs) of warm-up."""
    warm_until = time.perf_counter() + WARM_SECONDS
    for count in itertools.count():
        run()
        if count >= 2 and count % 10 == 2:
            cp.cuda.get_current_stream().synchronize()
            if time.perf_counter() >= warm_until:
                break
    times = []
    for _ in range(repeats):
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        for _ in range(launches):
            run()
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop) / launches)
    return statistics.median(times)


def replay(kernel: CudaKernel, bound, device: dict):
    """The launches of ``kernel`` on the arrays ``device``, recorded once (with the kernel
    :func:`contraction.choose_kernel` chooses now), as a call that replays them as a repeated
    ``po.einsum`` call does (the result just allocated: no overlap check)."""
    record = kernel.launch(bound.params, bound.scalars, device, record=True)
    if record is None:  # (more launches than a record keeps)
        return lambda: kernel.launch(bound.params, bound.scalars, device)
    return lambda: record(device, fresh="out")


def forced(name: str, variant):
    """A replacement for :func:`contraction.choose_kernel` that always takes kernel ``name``."""
    def choose(source, extent, shapes, *args, **kwargs):
        return name, variant, contraction.launch_layout(source.contraction, variant, extent, shapes)
    return choose


def measure(cp, torch, subscripts: str, shapes, dtype: str, precision: str, all_variants: bool = False) -> dict:
    rng = np.random.default_rng(0)
    values = [rng.standard_normal(s) for s in shapes]
    if dtype == "bfloat16":  # torch rounds; the kernel reads the bits
        if torch is None:
            raise SystemExit("gpu_contractions: the bf16 mode needs torch (it makes the bf16 operands)")
        tensors = [torch.as_tensor(v, device="cuda").to(torch.bfloat16) for v in values]
        operands = [cp.asarray(t.view(torch.int16)).view(cp.uint16) for t in tensors]
        wide = [cp.asarray(t.to(torch.float64)) for t in tensors]
    else:
        operands = [cp.asarray(v.astype(dtype)) for v in values]
        wide = [o.astype(cp.float64) for o in operands]
    scop = po.einsum_kernel(subscripts, *shapes, dtype=dtype, target="cuda", contraction=False).scop
    made = plan(scop, precision=precision)
    kernel = CudaKernel(made.scop, made.schedule, made.source)
    # half operands are summed in f32; the kernel stores the sums rounded to their type, as in po.einsum
    half = kernel.half_outputs.get("out")
    out_dtype = made.scop.arrays["out"].dtype.numpy if half is None else \
        np.dtype(np.uint16 if half.name == "bf16" else np.float16)
    result = cp.zeros(np.einsum(subscripts, *(np.empty(s, np.int8) for s in shapes)).shape, out_dtype)
    bound, device, _ = kernel.bind((), {"op0": operands[0], "op1": operands[1], "out": result})
    ours = per_launch_ms(cp, replay(kernel, bound, device))
    variants = {}
    if all_variants:
        chooser = contraction.choose_kernel
        try:
            for name, variant in made.source.variants:
                contraction.choose_kernel = forced(name, variant)
                kinds = ("asynchronous", "wgmma", "specialized", "tma")
                label = f"{variant.bm}x{variant.bn}x{variant.bk}/{variant.threads}" + \
                    "".join(f" {k}" for k in kinds if getattr(variant, k, False)) + \
                    (f" split_k={variant.split_k}" if variant.split_k else "")
                try:
                    variants[f"{name} {label}"] = per_launch_ms(cp, replay(kernel, bound, device))
                except ValueError as exc:  # a TMA kernel where the launch has no tensor maps
                    variants[f"{name} {label}"] = str(exc)
        finally:
            contraction.choose_kernel = chooser
    kernel.launch(bound.params, bound.scalars, device)
    expected = cp.einsum(subscripts, *wide)
    values = (result.astype(cp.uint32) << 16).view(cp.float32) if result.dtype == np.uint16 else result
    row = {"case": subscripts, "dtype": dtype, "precision": precision, "polyopt_ms": ours,
           "result": str(result.dtype) if half is None else f"{half.name} (stored by the kernel)",
           "rel_error": float(cp.linalg.norm(values - expected) / cp.linalg.norm(expected)),
           "engine": made.schedule.notes[-1].split("(")[1].split(",")[0]}
    if variants:
        row["variants_ms"] = variants
    if torch is not None:
        if dtype != "bfloat16":
            tensors = [torch.as_tensor(o, device="cuda") for o in operands]
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        row["torch_ms"] = per_launch_ms(cp, lambda: torch.einsum(subscripts, *tensors))
        torch.backends.cuda.matmul.allow_tf32 = False
        row["of_torch"] = row["torch_ms"] / ours
    return row


def parse_case(text: str) -> tuple[str, list[tuple[int, ...]]]:
    """``"ij,jk->ik:1000x1200,1200x1100"`` as ``("ij,jk->ik", [(1000, 1200), (1200, 1100)])``."""
    subscripts, shapes = text.rsplit(":", 1)
    return subscripts, [tuple(int(n) for n in shape.split("x")) for shape in shapes.split(",")]


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", action="append", choices=sorted(MODES), help="default: all")
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--case", action="append", metavar="SUBSCRIPTS:SHAPE,SHAPE",
                        help="a contraction to time instead of the issue's, e.g. ij,jk->ik:1000x1200,1200x1100")
    parser.add_argument("--all-variants", action="store_true", help="also time each tile shape, forced")
    args = parser.parse_args(argv)
    cp = cupy_module()
    try:
        import torch
    except ImportError:
        torch = None
    rows = []
    for mode in args.mode or list(MODES):
        dtype, precision = MODES[mode]
        for subscripts, shapes in [parse_case(c) for c in args.case] if args.case else CASES:
            row = measure(cp, torch, subscripts, shapes, dtype, precision, args.all_variants)
            rows.append(row)
            print(json.dumps({k: (round(v, 4) if isinstance(v, float) and k != "rel_error" else v)
                              for k, v in row.items()}), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": gpu_info(), "date": now_utc(), "rows": rows}, f, indent=1)
    return rows


if __name__ == "__main__":
    main()
