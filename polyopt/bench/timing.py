"""Wall-clock measurement for benchmarks: the median of repeated runs after a warm-up."""
from __future__ import annotations

import statistics
import time
from typing import Callable


def median_seconds(run: Callable[[], object], *, repeats: int = 5, setup: Callable[[], object] | None = None,
                   warmup: int = 1) -> float:
    """Median wall time of ``run()`` over ``repeats`` runs; ``setup()`` runs untimed before each."""
    samples = []
    for k in range(warmup + repeats):
        if setup is not None:
            setup()
        start = time.perf_counter()
        run()
        elapsed = time.perf_counter() - start
        if k >= warmup:
            samples.append(elapsed)
    return statistics.median(samples)
