"""polyopt's LLVM code vs gcc -O3 -march=native on the original loops (the C emitter's output
for the "original" schedule).

    python benchmarks/cpu_vs_gcc.py gemm --size LARGE --algorithm original --repeats 5
    python benchmarks/cpu_vs_gcc.py all --size MEDIUM --algorithm pluto --tile 32

Both run in this process, interleaved, on the same arrays; results are checked against the numpy
reference. Printed: best-of-N times, GFLOP/s, and polyopt's time / gcc's time (lower is better).
With ``--algorithm original`` both compile the very same loops.
"""
from __future__ import annotations

import argparse
import platform

import numpy as np

import polyopt as po
from polyopt.cbuild import CBuiltKernel
from polyopt.timing import median_seconds


def compare(name: str, size: str, algorithm: str, repeats: int, **options) -> dict:
    entry = po.suite.get(name)
    sizes = entry.sizes(size)
    compiled = po.compile(entry.kernel, algorithm=algorithm, **options)
    gcc = CBuiltKernel(po.compile(entry.kernel, algorithm="original"))
    pristine = entry.inputs(sizes)
    expected = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in pristine.items()}
    entry.reference(**expected)
    args = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in pristine.items()}

    def reset():
        for k, v in pristine.items():
            if isinstance(v, np.ndarray):
                args[k][...] = v

    runners = {"polyopt": compiled, "gcc": gcc}
    for label, runner in runners.items():  # both on the very same arrays (same alignment)
        reset()
        runner(**args)
        for k, v in args.items():
            if isinstance(v, np.ndarray) and not np.allclose(v, expected[k], rtol=1e-8, atol=1e-10):
                raise SystemExit(f"{name}: {label} result differs from the numpy reference in {k}")
    times = {label: [] for label in runners}
    for _ in range(repeats):  # interleave the two so machine noise hits both alike
        for label, runner in runners.items():
            times[label].append(median_seconds(lambda: runner(**args), repeats=1, setup=reset, warmup=0))
    # the minimum is the estimate least disturbed by other processes on a shared machine
    best = {label: float(np.min(t)) for label, t in times.items()}
    flops = entry.flops(sizes)
    return {"kernel": name, "size": size, "algorithm": algorithm, **{f"{k}_s": v for k, v in best.items()},
            "gflops_polyopt": flops / best["polyopt"] / 1e9, "ratio": best["polyopt"] / best["gcc"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernels", nargs="*", default=["gemm"])
    parser.add_argument("--size", default="LARGE")
    parser.add_argument("--algorithm", default="original")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tile", type=int, default=None, help="tile size (pluto)")
    args = parser.parse_args()
    options = {"tile": args.tile} if args.tile else {}
    names = po.suite.names() if args.kernels == ["all"] else args.kernels
    print(f"# {platform.processor() or platform.machine()}, {args.size}, algorithm {args.algorithm} {options}")
    print(f"{'kernel':<16} {'polyopt s':>10} {'gcc s':>10} {'GFLOP/s':>8} {'polyopt/gcc':>12}")
    for name in names:
        r = compare(name, args.size, args.algorithm, args.repeats, **options)
        print(f"{name:<16} {r['polyopt_s']:10.4f} {r['gcc_s']:10.4f} {r['gflops_polyopt']:8.2f} {r['ratio']:12.2f}")


if __name__ == "__main__":
    main()
