"""The implementations a benchmark compares, each behind one small :class:`Runner`.

A runner updates the kernel's arguments in place, like the kernel itself, so every runner is
checked against the same numpy reference and timed on the very same arrays. Runners per target:

- every target: ``gcc`` (the baseline: the C emitter's output of the *original* loops, built
  with gcc -O3 -march=native) and one runner per ``--external`` C file (same ABI);
- ``cpu``: ``polyopt`` (its LLVM code with the chosen scheduler) and ``numpy`` (the suite's
  numpy/BLAS reference, for kernels where that is the natural numpy form).

- ``cuda`` (:mod:`polyopt.bench.cuda`): ``polyopt`` (its CUDA code) and ``cublas`` (CuPy's
  matmul, for gemm-like kernels); their ``run`` copies the arguments to the device, computes,
  copies back and returns the kernel-only seconds measured with CUDA events (the harness times
  the whole call as end-to-end).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

import polyopt as po
from polyopt.bench.config import BenchConfig, Runner
from polyopt.targets.cbuild import CBuiltKernel, find_compiler
from polyopt.targets.cuda import cupy_module
from polyopt.errors import BenchmarkError, PolyoptError, TargetUnavailableError
from polyopt.suite import Entry

#: The runner every other one is compared with.
BASELINE = "gcc"

#: Suite kernels whose numpy reference is the natural numpy/BLAS way to write them (matrix
#: products, LAPACK, whole-array stencil steps). The others' references are contortions that
#: exist only to be correct (per-row Python loops, wavefronts), not a baseline anyone would use.
NUMPY_FORMS = frozenset({
    "correlation", "covariance", "gemm", "gemver", "gesummv", "symm", "syr2k", "syrk", "trmm",
    "2mm", "3mm", "atax", "bicg", "doitgen", "mvt", "cholesky", "floyd-warshall", "fdtd-2d",
    "heat-3d", "jacobi-1d", "jacobi-2d",
})


def polyopt_runner(entry: Entry, config: BenchConfig, args: Mapping[str, object]) -> Runner:
    """polyopt's own code for the kernel, with the configured scheduler, options and threads, or
    the configuration ``po.autotune`` picks on ``args`` (which it copies, never writes)."""
    threads = f"LLVM, {config.threads} threads"
    if not config.autotune:
        compiled = po.compile(config.kernel(entry), algorithm=config.algorithm,
                              num_threads=config.threads, **config.options)
        return Runner("polyopt", f"polyopt {config.describe_polyopt()}, {threads}",
                      lambda args: compiled(**args))
    # progress: a bar on a terminal, a line per candidate in a log (minutes of sweep otherwise silent)
    tuned = po.autotune(config.kernel(entry), num_threads=config.threads, progress=True, **args)
    return Runner("polyopt", f"polyopt autotune: {tuned.best.label}, {threads}",
                  lambda args: tuned.compiled(**args),
                  {"autotune": {"best": tuned.best.label, "seconds": tuned.seconds,
                                "skipped": tuned.skipped}})


def _c_runner(name: str, entry: Entry, config: BenchConfig, what: str, **code) -> Runner:
    """A runner of C code for the kernel's ABI: ``code`` is CBuiltKernel's ``source=`` (built with
    the baseline's flags) or ``library=`` (built elsewhere); neither: the emitter's output."""
    original = po.compile(config.kernel(entry), algorithm="original")  # the ABI: scop and function name
    built = CBuiltKernel(original, openmp=config.threads > 1, **code)
    how = f"{find_compiler()} {' '.join(built.flags)} on {what}" if built.flags else what
    return Runner(name, how, lambda args: built(**args))


def gcc_runner(entry: Entry, config: BenchConfig) -> Runner:
    """gcc -O3 -march=native (-fopenmp) building the C emitter's output of the original loops."""
    return _c_runner(BASELINE, entry, config, "the original loops (C emitter)")


def external_runners(entry: Entry, config: BenchConfig) -> list[Runner]:
    """One runner per ``--external`` file given for this kernel: a C file is built like the gcc
    baseline, a shared library (``.so``, e.g. clang with Polly) is loaded as it is."""
    runners = []
    for external in config.externals:
        if external.kernel != entry.name:
            continue
        path = Path(external.path)
        if not path.is_file():
            raise BenchmarkError(f"--external {external.kernel}={path}: no such file")
        code = ({"library": path.resolve()} if path.suffix == ".so"
                else {"source": path.read_text()})
        what = f"prebuilt {path}" if path.suffix == ".so" else str(path)
        try:
            runners.append(_c_runner(external.label, entry, config, what, **code))
        except PolyoptError as error:
            raise BenchmarkError(f"--external {external.kernel}={path}: {error}\n"
                                 f"expected: {abi_prototype(entry, config)}") from None
    return runners


def abi_prototype(entry: Entry, config: BenchConfig) -> str:
    """The C prototype an external file must define for ``entry`` (the C emitter's own)."""
    source = po.compile(config.kernel(entry), algorithm="original").c_source
    return re.search(r"^void polyopt_\w+\(.*\)$", source, flags=re.M).group(0) + ";"


def numpy_runners(entry: Entry, config: BenchConfig) -> list[Runner]:
    """The suite's numpy/BLAS reference as a baseline, where it is the natural numpy form."""
    if not config.numpy or entry.name not in NUMPY_FORMS:
        return []
    return [Runner("numpy", f"numpy {np.__version__} (the suite's reference)",
                   lambda args: entry.reference(**args))]


def cpu_runners(entry: Entry, config: BenchConfig, args: Mapping[str, object]) -> list[Runner]:
    """The ``cpu`` target: polyopt's LLVM code, and numpy where it has a natural form."""
    return [polyopt_runner(entry, config, args), *numpy_runners(entry, config)]


def cuda_runners(entry: Entry, config: BenchConfig, args: Mapping[str, object]) -> list[Runner]:
    """The ``cuda`` target (:mod:`polyopt.bench.cuda`, imported only when asked for)."""
    from polyopt.bench.cuda import cuda_runners as runners
    return runners(entry, config, args)


#: Target name -> the runners of that target, given the kernel, the configuration and the input
#: arguments (gcc and external files are added for every target).
TARGET_RUNNERS: dict[str, Callable[[Entry, BenchConfig, Mapping[str, object]], list[Runner]]] = {
    "cpu": cpu_runners, "cuda": cuda_runners}
#: Target name -> a check that the target can run on this machine (raises TargetUnavailableError).
TARGET_AVAILABLE: dict[str, Callable[[], object]] = {"cuda": cupy_module}


def check_target(target: str) -> None:
    """Refuse a target no runner exists for, or one this machine cannot run, before anything
    is compiled."""
    if target not in TARGET_RUNNERS:
        raise BenchmarkError(
            f"no benchmark runners for target {target!r} (available: "
            f"{', '.join(TARGET_RUNNERS)}); a target's runners are registered in "
            "polyopt.bench.runners.TARGET_RUNNERS")
    try:
        TARGET_AVAILABLE.get(target, lambda: None)()
    except TargetUnavailableError as error:
        raise BenchmarkError(f"--target {target}: {error}") from None


def runners_for(entry: Entry, config: BenchConfig, args: Mapping[str, object]) -> list[Runner]:
    """Every runner of one kernel: the target's, the gcc baseline, and the external files."""
    check_target(config.target)
    return [*TARGET_RUNNERS[config.target](entry, config, args), gcc_runner(entry, config),
            *external_runners(entry, config)]
