"""The CUDA target's stencil path: a recognized Jacobi-style stencil
(:mod:`polyopt.analysis.stencil`) runs in overlapped time tiles
(:mod:`polyopt.codegen.cuda_stencil`), one launch per ``steps`` time steps instead of one per
statement per time step.

:func:`stencil_plan` makes the schedule value -- the original order with a
:meth:`~polyopt.Schedule.gpu_time_tile` step and a note naming the tiling -- and the source;
:func:`launch` runs the host program through CuPy: the launches alternating between the
arrays and their scratch copies, and the copy back after an odd count.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from math import prod

import numpy as np

from polyopt.analysis.affine import extent_expr
from polyopt.analysis.evaluate import evaluate
from polyopt.analysis.scop import Scop
from polyopt.analysis.stencil import find_stencil
from polyopt.codegen.cuda_stencil import COPY_THREADS, StencilSource, copy_grid, stencil_source, time_tiling
from polyopt.codegen.gpu_mapping import GpuProgram
from polyopt.schedulers.registry import schedule as run_scheduler
from polyopt.transform.schedule import Schedule

#: Spatial ranks a default CUDA compile runs in time tiles; others only with ``time_tile`` given.
#: Measured as library calls on an H100 (docs/performance.md, "Stencils: sweeps, fused nests
#: and time tiles"): jacobi-1d's tiles beat its sweeps, but jacobi-2d's, fdtd-2d's and heat-3d's sweeps
#: (loop-free kernels replayed as one CUDA graph, arrays in L2) beat tiles of 48 KB of shared
#: memory, whose per-point shared-memory traffic costs more than the L2 traffic they save.
DEFAULT_RANKS = (1,)


@dataclass(frozen=True)
class StencilPlan:
    """What the stencil path makes of a kernel: the schedule value and the source."""

    schedule: Schedule
    source: StencilSource


def stencil_plan(scop: Scop, name: str, steps: int | None = None, tile=None, block=None,
                 schedule: Schedule | None = None, ranks=(1, 2, 3)) -> StencilPlan | None:
    """The overlapped-tile kernels of ``scop`` (host function ``name``), or None where ``scop``
    is no stencil of a rank in ``ranks``. ``schedule``: one ending in
    :meth:`~polyopt.Schedule.gpu_time_tile` (default: the original order, that step applied
    with ``steps``, ``tile`` and ``block``); :class:`~polyopt.errors.CodegenError` where the
    tiling does not fit in shared memory."""
    stencil = find_stencil(scop)
    if stencil is None or stencil.rank not in ranks:
        return None
    if schedule is None:
        schedule = run_scheduler(scop, "original").gpu_time_tile(steps=steps, tile=tile, block=block)
    step = schedule.trace[-1].kwargs
    tiling = time_tiling(scop, stencil, step.get("steps"), step.get("tile"), step.get("block"))
    note = (f"GPU {tiling.describe()}; {stencil.describe()}; scratch copies of the written arrays, "
            "launches alternating between them and the arrays")
    program = GpuProgram(scop, (), (), schedule.tree)
    source = StencilSource(program, stencil_source(scop, tiling, name), {}, name, tiling=tiling)
    return StencilPlan(replace(schedule, notes=tuple(schedule.notes) + (note,)), source)


def array_extents(source: StencilSource, params: dict[str, int]) -> tuple[int, ...]:
    """The written arrays' common extents for these parameter values (each scratch copy's shape)."""
    scop = source.program.scop
    return tuple(int(evaluate(extent_expr(e, scop.params), params, {})) for e in source.tiling.stencil.shape)


def launch_plan(source: StencilSource, params: dict[str, int]) -> tuple[int, int, tuple[int, ...]]:
    """(first time step, launches, array extents) for these parameter values."""
    stencil = source.tiling.stencil
    first, last = (int(evaluate(e, params, {})) for e in stencil.time_bounds)
    extents = array_extents(source, params)
    return first, source.tiling.launches(last - first + 1), extents


def launch(source: StencilSource, module, values: list, params: dict[str, int], scratch: list) -> None:
    """Run the stencil's host program on the current stream: ``values`` the ABI arguments,
    ``scratch`` the written arrays' scratch copies (CuPy arrays of their shapes, in
    ``stencil.written`` order); ``module`` the built source (or a recorder standing in)."""
    tiling = source.tiling
    first, count, extents = launch_plan(source, params)
    if count == 0 or prod(extents) == 0:
        return
    kernel = module.get_function(source.kernel)
    grid, block = tiling.grid(extents), tuple(reversed(tiling.block)) + (1,) * (3 - len(tiling.block))
    for j in range(count):
        kernel(grid, block, (*values, *scratch, np.int64(first + j * tiling.steps), np.int64(j & 1)))
    if count & 1:
        module.get_function(source.copy)(copy_grid(prod(extents)), (COPY_THREADS, 1, 1), (*values, *scratch))


__all__ = ["DEFAULT_RANKS", "StencilPlan", "array_extents", "launch", "launch_plan", "stencil_plan"]
