"""Full compile time (DSL source -> native code) of suite kernels, each compiled from scratch.

    python benchmarks/compile_time.py [KERNEL ...] [--algorithm isl] [--repeats 5]
"""
from __future__ import annotations

import argparse
import inspect
import statistics
import textwrap
import time

import polyopt as po
from polyopt.targets.cache import clear_cache


def fresh_compile_seconds(name: str, algorithm: str) -> tuple[float, dict]:
    """Seconds to parse, analyse, schedule, verify, generate and JIT ``name`` with no cache."""
    source = textwrap.dedent(inspect.getsource(po.suite.get(name).kernel.py_function))
    clear_cache()
    start = time.perf_counter()
    compiled = po.compile(po.kernel_from_source(source), algorithm=algorithm)
    return time.perf_counter() - start, compiled.compile_times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernels", nargs="*", default=["gemm"])
    parser.add_argument("--algorithm", default="original")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    names = po.suite.names() if args.kernels == ["all"] else args.kernels
    print(f"{'kernel':<16} {'median s':>9}  phases (last run)")
    for name in names:
        runs = [fresh_compile_seconds(name, args.algorithm) for _ in range(args.repeats)]
        phases = ", ".join(f"{k} {v * 1e3:.1f}ms" for k, v in runs[-1][1].items())
        print(f"{name:<16} {statistics.median(r[0] for r in runs):9.3f}  {phases}")


if __name__ == "__main__":
    main()
