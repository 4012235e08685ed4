"""``polyopt demo``: the whole road for gemm, from the DSL source to timed native code."""
from __future__ import annotations

import inspect
import os
import textwrap

import numpy as np

import polyopt as po
from polyopt.schedulers.registry import DEFAULT_ALGORITHM
from polyopt.targets.cbuild import CBuiltKernel, find_compiler
from polyopt.bench.timing import median_seconds


def _section(title: str) -> None:
    print(f"\n=== {title} " + "=" * max(0, 72 - len(title)))


def _max_relative_error(a: dict, b: dict) -> float:
    worst = 0.0
    for name, value in a.items():
        if isinstance(value, np.ndarray):
            scale = max(1.0, float(np.abs(b[name]).max(initial=0.0)))
            worst = max(worst, float(np.abs(value - b[name]).max(initial=0.0)) / scale)
    return worst


def run_demo(size: str = "LARGE", algorithm: str = DEFAULT_ALGORITHM, kernel_name: str = "gemm",
             repeats: int = 3) -> dict[str, float]:
    """Print scop, dependences, schedule, C, a correctness check and timings; return the timings."""
    entry = po.suite.get(kernel_name)
    kernel = entry.kernel
    _section(f"{kernel_name}: the kernel, written in polyopt's loop DSL")
    print(textwrap.dedent(inspect.getsource(kernel.py_function)))
    _section("Scop: parameters, domains, accesses, original schedule")
    print(kernel.scop)
    _section("Dependences (value-based, isl dataflow analysis)")
    print(po.dependences(kernel.scop).summary())
    compiled = po.compile(kernel, algorithm=algorithm)
    _section(f"Schedule tree from algorithm {algorithm!r} (checked by the verifier)")
    print(compiled.schedule.pretty())
    _section("Generated C (the LLVM backend compiles the same loop AST)")
    print(compiled.c_source.split("\n\n", 1)[1])
    print("compile times (s): " + ", ".join(f"{k} {v:.4f}" for k, v in compiled.compile_times.items()))

    _section("Correctness against the numpy reference")
    for preset in ("MINI", "SMALL", "MEDIUM"):
        sizes = entry.sizes(preset)
        ours, ref = entry.inputs(sizes), entry.inputs(sizes)
        compiled(**ours)
        entry.reference(**ref)
        error = _max_relative_error(ours, ref)
        status = "OK" if error < 1e-9 else "MISMATCH"
        print(f"  {preset:<6} {sizes}: max relative error {error:.2e}  {status}")
        if status != "OK":
            raise SystemExit(f"{kernel_name} at {preset}: result differs from numpy")

    cores = len(os.sched_getaffinity(0))
    _section(f"Speed at {size} {entry.sizes(size)} (median of {repeats}; polyopt and numpy on {cores} "
             f"core(s), gcc sequential)")
    sizes = entry.sizes(size)
    args = entry.inputs(sizes)
    pristine = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in args.items()}

    def reset():
        for k, v in pristine.items():
            if isinstance(v, np.ndarray):
                args[k][...] = v

    runners = {f"polyopt ({algorithm})": lambda: compiled(**args)}
    if algorithm == "pluto":
        tuned = po.compile(kernel, algorithm="pluto", tile="auto", register_tile="auto")
        runners["polyopt (pluto, tiled, register tiles)"] = lambda: tuned(**args)
    naive = po.compile(kernel, algorithm="original")
    runners["polyopt (original loop order)"] = lambda: naive(**args)
    if find_compiler():
        gcc = CBuiltKernel(naive)
        runners["gcc -O3 -march=native, same loops"] = lambda: gcc(**args)
    runners["numpy reference (BLAS)"] = lambda: entry.reference(**args)
    flops = entry.flops(sizes)
    times = {}
    for label, run in runners.items():
        times[label] = median_seconds(run, repeats=repeats, setup=reset)
    base = times["numpy reference (BLAS)"]
    for label, seconds in times.items():
        print(f"  {label:<40} {seconds * 1e3:9.2f} ms  {flops / seconds / 1e9:7.2f} GFLOP/s"
              f"  ({seconds / base:5.2f}x numpy's time)")
    return times
