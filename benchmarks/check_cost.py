"""The loop-AST check's share of the default compile (issue 19: under 10 %), suite kernel by kernel.

    python benchmarks/check_cost.py [KERNEL ...] [--repeats 2]

Each kernel is compiled from scratch at default options with the disk cache off (the least CPU
time of ``--repeats`` compiles), then the symbolic check of its shipped loops
(:func:`~polyopt.codegen.ast_check.check_for_all_sizes`, which every compile runs) is timed
again on its own (the least of ``--repeats + 1`` runs). CPU time of this process throughout.
"""
from __future__ import annotations

import argparse
import os
import time
import warnings

os.environ["POLYOPT_CACHE"] = "0"

import polyopt as po  # noqa: E402
from polyopt.analysis.deps import dependences  # noqa: E402
from polyopt.codegen.ast_check import CHECK_OPERATIONS, check_for_all_sizes  # noqa: E402
from polyopt.targets.cache import clear_cache  # noqa: E402


def compile_seconds(name: str) -> tuple[float, po.CompiledKernel]:
    clear_cache()
    start = time.process_time()
    compiled = po.compile(po.suite.get(name).kernel)
    return time.process_time() - start, compiled


def check_seconds(compiled) -> float:
    deps = dependences(compiled.scop)
    start = time.process_time()
    decided = check_for_all_sizes(compiled.scop, compiled.loops, deps, CHECK_OPERATIONS)
    if not decided:
        raise SystemExit(f"{compiled.scop.name}: the check for all sizes gave up")
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernels", nargs="*")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    names = args.kernels or po.suite.names()
    compile_seconds(names[0])  # imports, LLVM's start-up: not part of any kernel's compile
    print(f"{'kernel':<16} {'compile s':>9} {'check s':>8} {'share':>6}")
    total_compile = total_check = 0.0
    for name in names:
        runs = [compile_seconds(name) for _ in range(args.repeats)]
        compile_s = min(seconds for seconds, _ in runs)
        check_s = min(check_seconds(runs[-1][1]) for _ in range(args.repeats + 1))
        total_compile += compile_s
        total_check += check_s
        print(f"{name:<16} {compile_s:9.3f} {check_s:8.3f} {100 * check_s / compile_s:5.1f}%")
    print(f"{'suite':<16} {total_compile:9.3f} {total_check:8.3f} {100 * total_check / total_compile:5.1f}%")


if __name__ == "__main__":
    main()
