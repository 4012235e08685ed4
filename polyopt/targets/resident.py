"""The CUDA target's resident path for stencils: a Jacobi-style stencil of spatial rank 2 or 3
(:mod:`polyopt.analysis.stencil`: jacobi-2d, fdtd-2d, heat-3d) that the general mapping runs
as sweeps -- a launch per statement per time step -- also carries the resident kernel of
:mod:`polyopt.codegen.cuda_resident`: one cooperative launch running every time step with each
block's rows of the written arrays in shared memory.

Which of the two runs is chosen per call from the sizes and the GPU
(:func:`resident_strips`): the resident kernel where a strip of ``ceil(rows / SMs)`` rows (two
at least) of every written array fits one block's shared memory (the arrays fit the GPU's shared memory as
a whole, as PolyBench's LARGE stencils do on an H100), else the sweeps (EXTRALARGE). The
schedule value's note says so; ``resident=False`` compiles the sweeps alone. The nvcc host
function runs the sweeps.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from polyopt.analysis.affine import extent_expr
from polyopt.analysis.evaluate import evaluate
from polyopt.analysis.scop import Scop
from polyopt.analysis.stencil import find_stencil
from polyopt.codegen.cuda import CudaSource
from polyopt.codegen.cuda_resident import (COOPERATIVE_INCLUDE, RESIDENT_THREADS, ResidentKernel, resident_kernel,
                                           resident_text)
from polyopt.targets.contraction import allow_dynamic_shared
from polyopt.targets.device import device_attribute
from polyopt.transform.schedule import Schedule


@dataclass(frozen=True)
class ResidentSource(CudaSource):
    """The general mapping's source of a stencil with the resident kernel appended to the unit:
    ``resident`` describes it (:class:`~polyopt.codegen.cuda_resident.ResidentKernel`)."""

    resident: ResidentKernel | None = None


def with_resident_stencil(scop: Scop, schedule: Schedule, source: CudaSource) -> tuple[Schedule, CudaSource]:
    """The default compile's ``schedule`` and ``source`` with the resident kernel added -- the
    schedule with the :meth:`~polyopt.Schedule.gpu_resident` step and a note, the source a
    :class:`ResidentSource` -- where ``scop`` is a stencil that kernel runs; unchanged otherwise
    (also for a source some of whose kernels run as contraction kernels)."""
    made = resident_source(scop, source)
    if made is None:
        return schedule, source
    note = (f"GPU {made.resident.describe()}; launched where a strip of every written array fits one block's "
            "shared memory, else the sweeps (a launch per statement and time step)")
    resident = schedule.gpu_resident()
    return replace(resident, notes=tuple(resident.notes) + (note,)), made


def resident_source(scop: Scop, source: CudaSource) -> ResidentSource | None:
    """``source`` (the general mapping's) with the resident kernel appended, or None where
    ``scop`` is no stencil it runs (or ``source`` is no plain general source)."""
    if type(source) is not CudaSource:
        return None
    stencil = find_stencil(scop)
    kernel = None if stencil is None else resident_kernel(stencil, source.host_function + "_resident")
    if kernel is None:
        return None
    text = f"{COOPERATIVE_INCLUDE}\n{source.source}\n{resident_text(scop, kernel)}"
    return ResidentSource(source.program, text, source.shapes, source.host_function, source.wide, resident=kernel)


def resident_strips(source: CudaSource, params: dict[str, int], sm_count: int) -> tuple[int, int, int] | None:
    """(rows per strip, blocks, dynamic shared bytes) of the resident launch for these sizes on
    the current GPU (``sm_count`` multiprocessors), or None where ``source`` has no resident
    kernel or its strips do not fit."""
    kernel = source.resident if isinstance(source, ResidentSource) else None
    if kernel is None:
        return None
    scop = source.program.scop
    extents = tuple(int(evaluate(extent_expr(e, scop.params), params, {})) for e in kernel.stencil.shape)
    return kernel.strips(scop, extents, sm_count, shared_limit())


def shared_limit() -> int:
    """The dynamic shared memory one block of the current GPU may opt in to (bytes)."""
    return device_attribute("MaxSharedMemoryPerBlockOptin")


def launch(source: ResidentSource, target, values: list, strips: tuple[int, int, int]) -> None:
    """Launch the resident kernel cooperatively on the current stream: ``values`` the ABI
    arguments, ``strips`` from :func:`resident_strips`; ``target`` the built module (or a
    recorder standing in)."""
    rows, blocks, shared = strips
    name = source.resident.name
    allow_dynamic_shared(target, name, shared)
    function = target.get_function(name)
    launcher = getattr(function, "kernel", function)  # (a CuPy RawKernel launches cooperatively through its kernel)
    launcher((blocks, 1, 1), (RESIDENT_THREADS, 1, 1), (*values, np.int64(rows)), shared_mem=shared,
             enable_cooperative_groups=True)


__all__ = ["ResidentSource", "launch", "resident_source", "resident_strips", "shared_limit", "with_resident_stencil"]
