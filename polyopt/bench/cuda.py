"""The ``cuda`` target's runners: polyopt's CUDA code and, for gemm-like kernels, cuBLAS.

Each runner keeps its own device copies of the kernel's arrays (made once, so a captured CUDA
graph stays valid). ``run(args)`` copies the numpy arguments into them, runs the computation
between two CUDA events, copies the written arrays back into ``args`` and returns the
kernel-only seconds the events measured; the harness times the whole call, which is the
end-to-end time (copies in and out included). The harness runs gcc between GPU runs, and an idle
GPU lowers its clocks: so right before each timed run (untimed, in the runner's ``prepare``),
the computation runs on scratch copies of the arrays for :data:`WARMUP_SECONDS`, and the timed
run starts at working clocks, as back-to-back runs do. polyopt's host program (loops and launches)
is replayed as a CUDA graph, so its kernel time is GPU time, not Python's launch overhead.

CuPy is imported only through :func:`polyopt.targets.cuda.cupy_module` (a clear error without it).
"""
from __future__ import annotations

import time
from typing import Callable, Mapping

import polyopt as po
from polyopt.bench.config import BenchConfig, Runner
from polyopt.targets.cuda import CudaKernel, cupy_module
from polyopt.suite import Entry

#: Seconds of untimed GPU work right before each timed run (at least one run).
WARMUP_SECONDS = 0.05

def _gemm(cp, a, s) -> None:
    cp.add(s["alpha"] * (a["A"] @ a["B"]), s["beta"] * a["C"], out=a["C"])


def _2mm(cp, a, s) -> None:
    cp.multiply(s["alpha"], a["A"] @ a["B"], out=a["tmp"])
    cp.add(a["tmp"] @ a["C"], s["beta"] * a["D"], out=a["D"])


def _3mm(cp, a, s) -> None:
    cp.matmul(a["A"], a["B"], out=a["E"])
    cp.matmul(a["C"], a["D"], out=a["F"])
    cp.matmul(a["E"], a["F"], out=a["G"])


def _lower(cp, C, update) -> None:
    """PolyBench's syrk/syr2k update only C's lower triangle: keep the rest."""
    cp.copyto(C, update, where=cp.tri(C.shape[0], dtype=bool))


def _syrk(cp, a, s) -> None:
    _lower(cp, a["C"], s["alpha"] * (a["A"] @ a["A"].T) + s["beta"] * a["C"])


def _syr2k(cp, a, s) -> None:
    _lower(cp, a["C"], s["alpha"] * (a["A"] @ a["B"].T + a["B"] @ a["A"].T) + s["beta"] * a["C"])


#: cuBLAS (through CuPy's matmul; TF32 off, CuPy's default) versions of gemm-like suite kernels:
#: ``f(cupy, device arrays, scalars)`` writes every array the suite kernel writes, in place.
CUBLAS: dict[str, Callable] = {"gemm": _gemm, "2mm": _2mm, "3mm": _3mm, "syrk": _syrk,
                               "syr2k": _syr2k}


def _on_device(name: str, description: str, compiled: CudaKernel, args: Mapping[str, object],
               compute: Callable[[dict, object], object],
               details: Mapping[str, object] | None = None) -> Runner:
    """The runner computing with ``compute(device arrays, bound arguments)``: ``run(args)``
    copies in, times ``compute`` with CUDA events and copies the written arrays back (returns
    the seconds); ``prepare(args)`` warms the GPU up on scratch copies of the arrays."""
    cp = cupy_module()
    bound, device, _ = compiled.bind((), dict(args))  # device copies, kept for every run
    scratch = {key: array.copy() for key, array in device.items()}
    inputs = [key for key in device if key in args]  # (not the temporaries of expanded scalars)
    written = sorted({w.array for s in compiled.scop.statements for w in s.writes} & set(inputs))

    def prepare(args: dict) -> None:
        for key in inputs:
            scratch[key].set(args[key])  # the same work as the timed run
        _warm_up(cp, lambda: compute(scratch, bound))

    def run(args: dict) -> float:
        for key in inputs:
            device[key].set(args[key])
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        compute(device, bound)
        stop.record()
        for key in written:
            device[key].get(out=args[key])
        stop.synchronize()
        return cp.cuda.get_elapsed_time(start, stop) / 1e3

    return Runner(name, description, run, details or {}, prepare)


def _warm_up(cp, compute: Callable[[], object]) -> None:
    """Run ``compute`` until :data:`WARMUP_SECONDS` have passed (at least once)."""
    start = time.perf_counter()
    while True:
        compute()
        cp.cuda.get_current_stream().synchronize()
        if time.perf_counter() - start >= WARMUP_SECONDS:
            return


def polyopt_cuda_runner(entry: Entry, config: BenchConfig, args: Mapping[str, object]) -> Runner:
    """polyopt's CUDA code for the kernel with the configured scheduler and options."""
    compiled = po.compile(config.kernel(entry), target="cuda", algorithm=config.algorithm,
                          **config.options)

    def replay(device: dict, bound) -> None:
        compiled.launch(bound.params, bound.scalars, device, graph=True)

    return _on_device("polyopt", f"polyopt CUDA {config.describe_polyopt()} "
                                 f"(schedule used: {compiled.schedule.algorithm}), host program "
                                 "replayed as a CUDA graph", compiled, args, replay,
                      {"schedule": compiled.schedule.algorithm,
                       "gpu_kernels": len(compiled.program.kernels)})


def cublas_runner(entry: Entry, config: BenchConfig, args: Mapping[str, object]) -> Runner:
    """cuBLAS through CuPy's matmul for a kernel of :data:`CUBLAS` (same arrays, same check)."""
    cp = cupy_module()
    compiled = po.compile(config.kernel(entry), target="cuda", algorithm="original")  # the ABI

    def blas(device: dict, bound) -> None:
        CUBLAS[entry.name](cp, device, bound.scalars)

    return _on_device("cublas", f"cuBLAS through CuPy {cp.__version__} matmul (TF32 off)",
                      compiled, args, blas)


def cuda_runners(entry: Entry, config: BenchConfig, args: Mapping[str, object]) -> list[Runner]:
    """The ``cuda`` target: polyopt's CUDA code, and cuBLAS where the kernel is gemm-like."""
    runners = [polyopt_cuda_runner(entry, config, args)]
    if entry.name in CUBLAS:
        runners.append(cublas_runner(entry, config, args))
    return runners
