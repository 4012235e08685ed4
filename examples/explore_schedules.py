"""A schedule exploration script: run every scheduler (and a few Pluto options) on some suite
kernels, verify each schedule, and print the table a researcher would start from: bands,
tilable depth, parallel loops, sequential depth and scheduling time.

    python examples/explore_schedules.py [KERNEL...]
"""
import sys
import time

import polyopt as po
from polyopt.transform.schedule import tree_statistics

VARIANTS = [("original", {}), ("pluto", {}), ("pluto", {"fuse": "max"}), ("pluto", {"fuse": "no"}),
            ("pluto", {"negative_coeffs": True}), ("feautrier", {}), ("isl", {}), ("isl-feautrier", {})]


def explore(name: str) -> None:
    scop = po.suite.get(name).kernel.scop
    po.dependences(scop)                                         # computed once, shared by every scheduler
    print(f"\n{name}")
    print(f"  {'algorithm':34s} bands tilable parallel seq  seconds")
    for algorithm, options in VARIANTS:
        start = time.perf_counter()
        sched = po.schedule(scop, algorithm, **options)
        seconds = time.perf_counter() - start
        po.verify(scop, sched)
        s = tree_statistics(sched.tree)
        label = algorithm + "".join(f" {k}={v}" for k, v in options.items())
        print(f"  {label:34s} {s['bands']:5d} {s['permutable_depth']:7d} {s['parallel_loops']:8d} "
              f"{s['sequential_depth']:3d}  {seconds:.3f}")


if __name__ == "__main__":
    for kernel_name in sys.argv[1:] or ["gemm", "2mm", "jacobi-2d", "seidel-2d", "lu"]:
        explore(kernel_name)
