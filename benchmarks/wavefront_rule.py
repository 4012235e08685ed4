"""The cost model's wavefront rule (``cost.parallel_wavefront``) before and after, on one kernel.

    PYTHONPATH=. python benchmarks/wavefront_rule.py KERNEL PRESET ROUNDS [THREADS]

Compiles the kernel's default schedule without the rule (``registry._parallel_wavefronts``
replaced by the identity: the schedule before it) and with it, checks that both compute the same
arrays, then times calls of the two in one process, interleaved (the order alternating per
round), on THREADS threads (default 2), fresh inputs per call; prints medians, minima, their
ratios (after/before), quantiles and the load average. The disk cache is off.
"""
from __future__ import annotations

import os
import statistics
import sys
import time

os.environ["POLYOPT_CACHE"] = "0"

import numpy as np  # noqa: E402

import polyopt as po  # noqa: E402
from polyopt.schedulers import registry  # noqa: E402


def main(name: str, preset: str, rounds: int, threads: int = 2) -> None:
    entry = po.suite.get(name)
    rule = registry._parallel_wavefronts
    registry._parallel_wavefronts = lambda made, costs, original: costs
    try:
        old = po.schedule(entry.kernel, "pluto")
    finally:
        registry._parallel_wavefronts = rule
    new = po.schedule(entry.kernel, "pluto")
    if str(old.tree) == str(new.tree):
        print(f"{name}: the rule does not change the default schedule")
        return
    kernels = {"before": po.compile(entry.kernel, schedule=old), "after": po.compile(entry.kernel, schedule=new)}
    for cost in new.cost:
        print(cost)
    base = entry.make_inputs(entry.sizes(preset), "float64")

    def fresh() -> dict:
        return {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in base.items()}

    results = {}
    for label, kernel in kernels.items():
        results[label] = fresh()
        kernel(**results[label], num_threads=threads)
    for k, v in results["before"].items():
        if isinstance(v, np.ndarray):
            assert np.allclose(v, results["after"][k], rtol=1e-9, atol=1e-9), k
    print(name, preset, entry.sizes(preset), "threads", threads, "load", os.getloadavg(),
          time.strftime("%H:%M:%S", time.gmtime()), flush=True)
    ms: dict[str, list[float]] = {"before": [], "after": []}
    for r in range(rounds):
        for label in (("before", "after") if r % 2 == 0 else ("after", "before")):
            args = fresh()
            start = time.perf_counter()
            kernels[label](**args, num_threads=threads)
            ms[label].append((time.perf_counter() - start) * 1e3)
    mb, ma = statistics.median(ms["before"]), statistics.median(ms["after"])
    nb, na = min(ms["before"]), min(ms["after"])
    print(f"{name} {preset} {threads}T rounds={rounds}: median before {mb:.4g} ms after {ma:.4g} ms ratio "
          f"{ma / mb:.3f}; min before {nb:.4g} after {na:.4g} ratio {na / nb:.3f}; load {os.getloadavg()} "
          f"{time.strftime('%H:%M:%S', time.gmtime())}")
    for label, values in ms.items():
        ordered = sorted(values)
        quantiles = [ordered[min(len(ordered) - 1, int(f * len(ordered)))] for f in (0, .1, .25, .5, .75, .9)]
        print(label, "quantiles 0/10/25/50/75/90/100:", [round(q, 3) for q in quantiles + [ordered[-1]]])


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), *(int(a) for a in sys.argv[4:5]))
