"""numpy's own einsum test module (``numpy/_core/tests/test_einsum.py`` of the installed numpy)
run against ``po.einsum``, with a cold compile cache (issue 15).

    python benchmarks/numpy_einsum_tests.py [--profile FILE] [--keep-going-quiet] [-- PYTEST ARGS]

The module's ``np`` becomes a stand-in for numpy whose ``einsum`` is ``po.einsum`` (every other
name is numpy's, so the expected values still come from numpy), and ``numpy.einsum`` itself is
``po.einsum`` while the module is imported (its ``parametrize`` lists hold the function). The
disk cache (``POLYOPT_CACHE_DIR``) is a fresh temporary folder and the process starts with an
empty in-memory cache, so every pattern compiles from scratch. Printed: the wall time of the
pytest run (collection included, interpreter start-up and imports not), the outcome counts and
the names of the tests that failed. ``--profile FILE`` writes a cProfile of the run (sorted by
cumulative time in ``FILE.txt``).
"""
from __future__ import annotations

import argparse
import atexit
import cProfile
import os
import pstats
import shutil
import sys
import tempfile
import time
import types
from pathlib import Path

_CACHE = tempfile.mkdtemp(prefix="polyopt-numpy-einsum-")
os.environ["POLYOPT_CACHE_DIR"] = _CACHE  # before polyopt is imported: nothing cached yet
os.environ.pop("POLYOPT_CACHE", None)  # the disk cache on (a cold one), as users run it
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)

import numpy  # noqa: E402
import pytest  # noqa: E402

import polyopt as po  # noqa: E402

TEST_MODULE = Path(numpy.__file__).parent / "_core" / "tests" / "test_einsum.py"

#: Tests left out, each with why: they call numpy.einsum_path only, never einsum (numpy's
#: contraction-order search; po.einsum follows the paths it returns).
DESELECTED = {
    "einsum_fn=einsum_path": "numpy.einsum_path's argument errors (test_einsum_errors' einsum_fn=np.einsum_path)",
    "test_einsum_sorting_behavior": "the output labels of numpy.einsum_path's report",
    "TestEinsumPath::test_memory_contraints": "numpy.einsum_path's paths under memory limits",
    "TestEinsumPath::test_long_paths": "numpy.einsum_path's greedy and optimal paths",
    "TestEinsumPath::test_edge_paths": "numpy.einsum_path's paths on edge cases",
}


def _deselected(item) -> bool:
    """Whether :data:`DESELECTED` names the test ``item``."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    if params.get("einsum_fn") is numpy.einsum_path:
        return True
    return any(part in item.nodeid for part in DESELECTED)


class _NumpyWithPolyoptEinsum(types.ModuleType):
    """numpy, except that ``einsum`` is ``po.einsum``."""

    einsum = staticmethod(po.einsum)

    def __getattr__(self, name):
        return getattr(numpy, name)


class Plugin:
    """Patches the test module at collection, leaves out :data:`DESELECTED`, tallies outcomes."""

    def __init__(self):
        self.outcomes: dict[str, int] = {}
        self.failed: list[str] = []
        self.deselected = 0

    @pytest.hookimpl(hookwrapper=True)
    def pytest_collection(self, session):
        real = numpy.einsum
        numpy.einsum = po.einsum  # the module's import-time uses (parametrize lists)
        try:
            yield
        finally:
            numpy.einsum = real

    def pytest_collection_modifyitems(self, config, items):
        kept, dropped = [], []
        for item in items:
            (dropped if _deselected(item) else kept).append(item)
            module = getattr(item, "module", None)
            if module is not None and module.np is numpy:
                module.np = _NumpyWithPolyoptEinsum("numpy")
        items[:] = kept
        self.deselected = len(dropped)
        config.hook.pytest_deselected(items=dropped)

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or report.outcome != "passed":
            outcome = "xfailed" if hasattr(report, "wasxfail") and report.skipped else report.outcome
            if report.when != "call" and report.outcome == "failed":
                outcome = "error"
            self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
            if outcome in ("failed", "error"):
                self.failed.append(report.nodeid.split("::", 1)[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", metavar="FILE", help="write a cProfile of the run to FILE (and FILE.txt)")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --), e.g. -k sums")
    args = parser.parse_args()
    plugin = Plugin()
    pytest_args = [str(TEST_MODULE), "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:randomly",
                   "--rootdir", str(TEST_MODULE.parent), "-c", os.devnull, "--tb=line", "-W", "ignore",
                   *args.pytest_args]
    profiler = cProfile.Profile() if args.profile else None
    start = time.perf_counter()
    if profiler:
        profiler.enable()
    status = pytest.main(pytest_args, plugins=[plugin])
    if profiler:
        profiler.disable()
    seconds = time.perf_counter() - start
    if profiler:
        profiler.dump_stats(args.profile)
        with open(args.profile + ".txt", "w") as text:
            pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(80)
    counts = ", ".join(f"{n} {k}" for k, n in sorted(plugin.outcomes.items()))
    print(f"\nnumpy {numpy.__version__} {TEST_MODULE}")
    print(f"against po.einsum, cold cache: {seconds:.1f} s wall; {counts}; {plugin.deselected} deselected")
    for reason in sorted(set(DESELECTED.values())):
        print(f"  deselected: {reason}")
    for name in plugin.failed:
        print(f"  FAILED {name}")
    return int(status)


if __name__ == "__main__":
    sys.exit(main())
