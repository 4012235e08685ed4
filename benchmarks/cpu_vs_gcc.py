"""polyopt's LLVM code vs gcc -O3 -march=native on the same loops (the C emitter's output).

    python benchmarks/cpu_vs_gcc.py gemm --size LARGE --algorithm original --repeats 5

Both run the same schedule in this process, interleaved; results are checked against the numpy
reference. Printed: median times, GFLOP/s, and polyopt's time / gcc's time (lower is better).
"""
from __future__ import annotations

import argparse
import platform

import numpy as np

import polyopt as po
from polyopt.cbuild import CBuiltKernel
from polyopt.timing import median_seconds


def compare(name: str, size: str, algorithm: str, repeats: int) -> dict:
    entry = po.suite.get(name)
    sizes = entry.sizes(size)
    compiled = po.compile(entry.kernel, algorithm=algorithm)
    gcc = CBuiltKernel(compiled)
    pristine = entry.inputs(sizes)
    expected = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in pristine.items()}
    entry.reference(**expected)
    results = {}
    for label, runner in (("polyopt", compiled), ("gcc", gcc)):
        args = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in pristine.items()}
        runner(**args)
        for k, v in args.items():
            if isinstance(v, np.ndarray) and not np.allclose(v, expected[k], rtol=1e-8, atol=1e-10):
                raise SystemExit(f"{name}: {label} result differs from the numpy reference in {k}")

        def reset(args=args):
            for k, v in pristine.items():
                if isinstance(v, np.ndarray):
                    args[k][...] = v

        results[label] = (runner, args, reset)
    times = {label: [] for label in results}
    for _ in range(repeats):  # interleave the two so machine noise hits both alike
        for label, (runner, args, reset) in results.items():
            times[label].append(median_seconds(lambda: runner(**args), repeats=1, setup=reset, warmup=0))
    medians = {label: float(np.median(t)) for label, t in times.items()}
    flops = entry.flops(sizes)
    return {"kernel": name, "size": size, "algorithm": algorithm, **{f"{k}_s": v for k, v in medians.items()},
            "gflops_polyopt": flops / medians["polyopt"] / 1e9, "ratio": medians["polyopt"] / medians["gcc"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernels", nargs="*", default=["gemm"])
    parser.add_argument("--size", default="LARGE")
    parser.add_argument("--algorithm", default="original")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    names = po.suite.names() if args.kernels == ["all"] else args.kernels
    print(f"# {platform.processor() or platform.machine()}, {args.size}, algorithm {args.algorithm}")
    print(f"{'kernel':<16} {'polyopt s':>10} {'gcc s':>10} {'GFLOP/s':>8} {'polyopt/gcc':>12}")
    for name in names:
        r = compare(name, args.size, args.algorithm, args.repeats)
        print(f"{name:<16} {r['polyopt_s']:10.4f} {r['gcc_s']:10.4f} {r['gflops_polyopt']:8.2f} {r['ratio']:12.2f}")


if __name__ == "__main__":
    main()
