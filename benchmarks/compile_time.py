"""Full compile time (DSL source -> native code) of suite kernels, each compiled from scratch,
split into phases (parse, schedule, verify, ast: isl's AST build, ast_check: the loop-AST
check, codegen: C and LLVM IR, llvm: optimisation and JIT), each the median over the repeats
(wall clock; on a loaded machine raise --repeats).

    python benchmarks/compile_time.py [KERNEL ... | all] [--algorithm pluto] [--repeats 5]
"""
from __future__ import annotations

import argparse
import inspect
import os
import statistics
import textwrap
import time

import polyopt as po
from polyopt.schedulers.registry import DEFAULT_ALGORITHM
from polyopt.targets.cache import clear_cache

PHASES = ("parse", "schedule", "verify", "ast", "ast_check", "codegen", "llvm")


def fresh_compile_seconds(name: str, algorithm: str) -> tuple[float, dict]:
    """Seconds to parse, analyse, schedule, verify, generate and JIT ``name`` with no cache,
    and the compile's own phase times."""
    source = textwrap.dedent(inspect.getsource(po.suite.get(name).kernel.py_function))
    clear_cache()
    start = time.perf_counter()
    compiled = po.compile(po.kernel_from_source(source), algorithm=algorithm)
    return time.perf_counter() - start, compiled.compile_times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernels", nargs="*", default=["gemm"])
    parser.add_argument("--algorithm", default=DEFAULT_ALGORITHM)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    os.environ["POLYOPT_CACHE"] = "0"  # from scratch: no object code from the disk cache either
    names = po.suite.names() if args.kernels == ["all"] else args.kernels
    print(f"{'kernel':<16} {'total s':>8} " + " ".join(f"{p:>9}" for p in PHASES) + "  check %")
    for name in names:
        runs = [fresh_compile_seconds(name, args.algorithm) for _ in range(args.repeats)]
        total = statistics.median(r[0] for r in runs)
        phases = {p: statistics.median(r[1].get(p, 0.0) for r in runs) for p in PHASES}
        print(f"{name:<16} {total:8.3f} " + " ".join(f"{phases[p]:9.3f}" for p in PHASES)
              + f"  {100 * phases['ast_check'] / total:6.1f}", flush=True)


if __name__ == "__main__":
    main()
