"""Benchmark suite kernels: every runner on the same arrays, checked, timed interleaved.

The report (a plain dict, written as JSON by ``--json``) has per kernel and runner the median and
minimum seconds, GFLOP/s from the suite's flop count, the speedups over gcc, numpy and cuBLAS
(above 1: faster), and the result check; and over the kernels the geometric-mean speedups.
Runners that measure their own kernel-only time (the ``cuda`` target's, with CUDA events) also
get ``kernel_*`` times, ``kernel_gflops`` and ``kernel_speedup_vs_*`` ratios of those times.
"""
from __future__ import annotations

from functools import partial
from typing import Callable, Iterable

import numpy as np

import polyopt as po
from polyopt.bench.config import BenchConfig
from polyopt.bench.machine import gpu_info, machine_info, now_utc
from polyopt.bench.measure import (RTOL, RTOL_F32, check, copy_args, geometric_mean,
                                   interleave, summarize)
from polyopt.bench.runners import BASELINE, runners_for
from polyopt.bench.threads import blas_threads, openmp_threads
from polyopt.errors import BenchmarkError, PolyoptError
from polyopt.suite import Entry

#: Kernels where gcc takes longer than this are summarized separately (issue #7's target set:
#: below it, fixed costs such as thread start-up dominate).
SLOW_GCC_SECONDS = 0.05
#: The runners speedups are computed against, where a kernel has them.
REFERENCES = (BASELINE, "numpy", "cublas")


def _speedups(results: dict[str, dict[str, object]]) -> None:
    """Add ``speedup_vs_<reference>`` (medians of the whole call) and, where both measured
    kernel-only time, ``kernel_speedup_vs_<reference>`` to every timed result."""
    for reference in REFERENCES:
        ref = results.get(reference, {})
        for result in results.values():
            if "median_s" in ref and "median_s" in result:
                result[f"speedup_vs_{reference}"] = ref["median_s"] / result["median_s"]
            if "kernel_median_s" in ref and "kernel_median_s" in result:
                result[f"kernel_speedup_vs_{reference}"] = (ref["kernel_median_s"]
                                                            / result["kernel_median_s"])


def bench_kernel(entry: Entry, config: BenchConfig) -> dict[str, object]:
    """Check and time every runner of one kernel at ``config.size``; see the module docstring."""
    sizes = config.sizes(entry)
    pristine = entry.inputs(sizes, np.float32 if config.dtype == "f32" else np.float64)
    expected = copy_args(pristine)
    entry.reference(**expected)
    args = copy_args(pristine)

    def reset() -> None:
        for name, value in pristine.items():
            if isinstance(value, np.ndarray):
                args[name][...] = value

    runners = runners_for(entry, config, pristine)
    names = [runner.name for runner in runners]
    if len(set(names)) != len(names):
        raise BenchmarkError(f"{entry.name}: two runners named alike ({', '.join(names)}); "
                             "give each --external its own LABEL:")
    results: dict[str, dict[str, object]] = {}
    for runner in runners:  # the first run of each is also its warm-up
        reset()
        runner.run(args)
        results[runner.name] = {"description": runner.description, **runner.details,
                                **check(args, expected, RTOL_F32 if config.dtype == "f32" else RTOL)}
    timed = {r.name: partial(r.run, args) for r in runners if results[r.name]["correct"]}
    flops = entry.flops(sizes)
    prepare = {r.name: partial(r.prepare, args) for r in runners if r.prepare is not None}
    for name, samples in interleave(timed, config.repeats, reset, prepare).items():
        results[name].update(summarize(samples))
        results[name]["gflops"] = flops / results[name]["median_s"] / 1e9
        if "kernel_median_s" in results[name]:
            results[name]["kernel_gflops"] = flops / results[name]["kernel_median_s"] / 1e9
    _speedups(results)
    return {"kernel": entry.name, "size": config.size, "sizes": sizes, "flops": flops,
            "correct": all(r["correct"] for r in results.values()), "runners": results}


def _bench_or_record(entry: Entry, config: BenchConfig) -> dict[str, object]:
    """:func:`bench_kernel`, or a row recording why polyopt could not compile or run the kernel
    (a long ``all`` run goes on); a request that cannot run at all (BenchmarkError) stops it."""
    try:
        return bench_kernel(entry, config)
    except BenchmarkError:
        raise
    except PolyoptError as error:
        return {"kernel": entry.name, "size": config.size, "correct": False, "runners": {},
                "error": f"{type(error).__name__}: {error}"}


def summarize_kernels(kernels: list[dict]) -> dict[str, dict[str, object]]:
    """Per runner: geometric-mean speedup over gcc (all kernels, and those where gcc takes more
    than :data:`SLOW_GCC_SECONDS`) and over numpy, with the kernel counts behind each."""
    names = dict.fromkeys(name for k in kernels for name in k["runners"] if name != BASELINE)
    summary = {}
    for name in names:
        rows = [k["runners"] for k in kernels if "speedup_vs_gcc" in k["runners"].get(name, {})]
        slow = [r for r in rows if r[BASELINE]["median_s"] > SLOW_GCC_SECONDS]
        vs_numpy = [k["runners"][name]["speedup_vs_numpy"] for k in kernels
                    if "speedup_vs_numpy" in k["runners"].get(name, {})]
        summary[name] = {
            "geomean_speedup_vs_gcc": geometric_mean(r[name]["speedup_vs_gcc"] for r in rows),
            "kernels": len(rows),
            "geomean_speedup_vs_gcc_where_gcc_over_0.05s":
                geometric_mean(r[name]["speedup_vs_gcc"] for r in slow),
            "kernels_where_gcc_over_0.05s": len(slow),
            "geomean_speedup_vs_numpy": geometric_mean(vs_numpy) if name != "numpy" else None,
            "kernels_with_numpy": len(vs_numpy) if name != "numpy" else 0,
        }
        vs_cublas = [k["runners"][name]["kernel_speedup_vs_cublas"] for k in kernels
                     if "kernel_speedup_vs_cublas" in k["runners"].get(name, {})]
        if vs_cublas and name != "cublas":
            summary[name].update(geomean_kernel_speedup_vs_cublas=geometric_mean(vs_cublas),
                                 kernels_with_cublas=len(vs_cublas))
    return summary


def kernel_names(requested: Iterable[str], config: BenchConfig) -> list[str]:
    """Suite kernel names from the command line (``all``: the 30, in PolyBench's order), each
    checked to exist with the configured sizes before anything runs."""
    requested = list(requested)
    names = po.suite.names() if "all" in requested else requested
    for name in names:
        try:
            config.sizes(po.suite.get(name))
        except KeyError as error:  # the message lists the valid names
            raise BenchmarkError(error.args[0]) from None
        except ValueError as error:
            raise BenchmarkError(str(error)) from None
    return names


def bench_kernels(names: Iterable[str], config: BenchConfig, *, command: str = "",
                  on_result: Callable[[dict], object] | None = None) -> dict[str, object]:
    """Benchmark the named suite kernels under one thread setting; ``on_result`` sees each row."""
    names = kernel_names(names, config)
    for external in config.externals:
        if external.kernel not in names:
            raise BenchmarkError(f"--external {external.kernel}={external.path}: "
                                 f"{external.kernel} is not among the kernels benchmarked")
    machine = machine_info()  # the load average before this run adds its own
    if config.target == "cuda":
        machine["gpu"] = gpu_info()
    started = now_utc()
    kernels = []
    with openmp_threads(config.threads) as openmp, blas_threads(config.threads) as blas:
        for name in names:
            kernels.append(_bench_or_record(po.suite.get(name), config))
            if on_result is not None:
                on_result(kernels[-1])
    return {"kind": "kernels", "command": command, "date": started, "machine": machine,
            "config": {"size": config.size, "threads": config.threads,
                       "polyopt": "autotune" if config.autotune else config.describe_polyopt(),
                       "algorithm": config.algorithm, "options": dict(config.options),
                       "repeats": config.repeats, "target": config.target, "dtype": config.dtype,
                       "externals": [vars(e) for e in config.externals],
                       "openmp": openmp, "blas": blas},
            "kernels": kernels, "summary": summarize_kernels(kernels),
            "correct": all(k["correct"] for k in kernels)}
