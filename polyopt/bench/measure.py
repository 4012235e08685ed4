"""Interleaved timing, result checks and the statistics a benchmark report quotes.

On a shared machine the load changes while a benchmark runs; timing the implementations in turn
(A B C A B C ...) spreads that noise over all of them alike, so their ratios stay meaningful.
"""
from __future__ import annotations

import math
import statistics
from typing import Callable, Iterable, Mapping

import numpy as np

from polyopt.bench.timing import median_seconds

#: Largest accepted error, relative to the largest magnitude of the expected array (f64 data).
RTOL = 1e-8
#: The same for f32 data (reordered sums of a few thousand terms: about 1e-6 here).
RTOL_F32 = 1e-4


def copy_args(args: Mapping[str, object]) -> dict[str, object]:
    """A deep enough copy of kernel arguments: arrays copied, scalars shared."""
    return {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in args.items()}


def relative_error(actual: Mapping[str, object], expected: Mapping[str, object]) -> float:
    """Worst normwise error over the arrays: max |actual - expected| / max |expected|.

    Normwise rather than elementwise because reordered floating-point sums (every tiled or
    parallel schedule, and BLAS) differ from the reference by rounding relative to the data's
    scale, not to each element (some elements are close to 0).
    """
    worst = 0.0
    for name, want in expected.items():
        if not isinstance(want, np.ndarray):
            continue
        got = np.asarray(actual[name])
        if got.shape != want.shape:
            return math.inf
        scale = float(np.max(np.abs(want))) if want.size else 0.0
        diff = float(np.max(np.abs(got - want))) if want.size else 0.0
        if math.isnan(diff):
            return math.inf
        worst = max(worst, diff / scale if scale > 0 else diff)
    return worst


def check(actual: Mapping[str, object], expected: Mapping[str, object],
          rtol: float = RTOL) -> dict[str, object]:
    """The result check a report records: ``max_rel_error`` (None when not finite: NaN, wrong
    shape) and ``correct`` (error at most ``rtol``: :data:`RTOL`, or :data:`RTOL_F32` for f32)."""
    error = relative_error(actual, expected)
    return {"max_rel_error": error if math.isfinite(error) else None, "correct": error <= rtol}


def interleave(calls: Mapping[str, Callable[[], float | None]], repeats: int,
               reset: Callable[[], object] | None = None,
               prepare: Mapping[str, Callable[[], object]] | None = None
               ) -> dict[str, dict[str, list[float]]]:
    """Run every call ``repeats`` times, in turn, with ``reset()`` and then the call's own
    ``prepare[name]()`` (where given) untimed before each run.

    Returns per call ``{"wall": [seconds...]}`` and, for calls that return a number (their own
    kernel-only time, e.g. from CUDA events), ``"kernel": [seconds...]`` as well.
    """
    samples: dict[str, dict[str, list[float]]] = {name: {"wall": []} for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            inner: list[float] = []

            def run(call=call, inner=inner) -> None:
                result = call()
                if result is not None:
                    inner.append(float(result))

            def setup(before=(prepare or {}).get(name)) -> None:
                if reset is not None:
                    reset()
                if before is not None:
                    before()

            samples[name]["wall"].append(median_seconds(run, repeats=1, setup=setup, warmup=0))
            if inner:
                samples[name].setdefault("kernel", []).extend(inner)
    return samples


def summarize(samples: dict[str, list[float]]) -> dict[str, object]:
    """Median and minimum of the wall times (and of the kernel-only times where there are any)."""
    summary: dict[str, object] = {"median_s": statistics.median(samples["wall"]),
                                  "min_s": min(samples["wall"]), "times_s": list(samples["wall"])}
    if "kernel" in samples:
        summary.update(kernel_median_s=statistics.median(samples["kernel"]),
                       kernel_min_s=min(samples["kernel"]), kernel_times_s=list(samples["kernel"]))
    return summary


def geometric_mean(values: Iterable[float]) -> float | None:
    """Geometric mean of positive numbers (None for none)."""
    values = [v for v in values if v is not None]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))
