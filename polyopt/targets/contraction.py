"""The CUDA target's contraction path: a recognized contraction runs as one batched-GEMM kernel.

:func:`contraction_plan` recognizes the contraction (:mod:`polyopt.analysis.contraction`),
builds the schedule tree the kernel implements -- one kernel, every output index a
block/thread coordinate, each thread running the init statement and then the K indices in loop
order -- and has the verifier check it like any GPU mapping, then emits the kernel
(:mod:`polyopt.codegen.cuda_contraction`). :func:`launch_layout` decides at each launch which
output indices form the M and N runs of the tiles and which go to the grid's batch dimension,
from the sizes and the arrays' strides: indices adjacent in memory in every array holding them
collapse into one run (``bik,kj->bij`` is one GEMM of ``b*i`` rows), the others are decoded
per block.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from math import prod

import numpy as np

from polyopt.analysis import expr as E
from polyopt.analysis.contraction import ELEMENT, PRECISIONS, Contraction, epilogue_indices, find_contraction
from polyopt.analysis.evaluate import evaluate
from polyopt.analysis.scop import Scop
from polyopt.analysis.verify import verify
from polyopt.codegen.cuda_contraction import (ASYNC_MIN_WORK, COPY_BYTES, OPERAND_BYTES, MIN_BLOCKS_PER_SM, OTHER_TILE_SPEED,
                                              VARIANTS, ContractionSource, Variant, contraction_source, engine_for,
                                              WGMMA_MIN_WORK, operand_stride_positions, shared_bytes, staged_tiles)
from polyopt.codegen.contraction_text import Slots
from polyopt.codegen.cuda_wgmma import wgmma_layouts
from polyopt.codegen.gpu_mapping import map_to_gpu
from polyopt.errors import ScheduleError
from polyopt.schedulers.registry import schedule as run_scheduler
from polyopt.transform.schedule import Schedule

#: Most blocks per grid dimension (x, y, z).
_GRID_LIMIT = (2**31 - 1, 65535, 65535)


@dataclass(frozen=True)
class ContractionPlan:
    """What the contraction path makes of a kernel: the schedule value (the original order,
    with the mapping as its last note) and the source (its program is the verified mapping:
    one kernel whose coordinates are the output indices)."""

    schedule: Schedule
    source: ContractionSource


def check_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(map(repr, PRECISIONS))}, got {precision!r}")
    return precision


def contraction_plan(scop: Scop, name: str, precision: str = "exact",
                     schedule: Schedule | None = None) -> ContractionPlan | None:
    """The contraction kernel ``name`` of ``scop``, or None where ``scop`` is no contraction of f32/f64
    data (or of f16/bf16 array elements into f32) or the verifier refuses the contraction's
    order (the caller maps it the general way). ``schedule``: a schedule whose last step is
    :meth:`~polyopt.Schedule.gpu_contract` (default: the original order, that step applied)."""
    found = find_contraction(scop)
    if found is None:
        return None
    dtype = scop.arrays[found.output].dtype
    left, right = (scop.arrays[a].dtype for a in (found.left.array, found.right.array))
    engine = engine_for(dtype.name, check_precision(precision), left.name) if left == right else None
    if engine is None or (engine == "hmma" and not all(_plain(o) for o in (found.left, found.right))):
        return None  # half operands go to the tensor cores as they are, not computed on
    if schedule is None:
        try:
            schedule = run_scheduler(scop, "original").gpu_contract(precision=precision)
        except ScheduleError:
            return None  # e.g. the init statement runs after some update in the original order
    program = map_to_gpu(scop, schedule.tree, name)
    verify(scop, program.tree)
    kernel = program.kernels[0].name
    variants = [v for v in VARIANTS[(engine, left.name)]
                if ((wgmma_layouts(found, v) is not None) if v.wgmma else (not v.asynchronous or staged_tiles(found, v)))]
    kernels = tuple((kernel if k == 0 else f"{kernel}_{k}", v) for k, v in enumerate(variants))
    tiles = " or ".join(f"{v.bm}x{v.bn}x{v.bk} ({v.threads} threads)" for v in variants)
    note = (f"GPU contraction mapping ({engine}, precision={precision!r}): {found.describe()}; "
            f"one kernel, block tile {tiles}; the tile, the M/N runs and the batch are chosen per launch "
            "from the sizes and strides")
    schedule = replace(schedule, notes=tuple(schedule.notes) + (note,))
    text = contraction_source(scop, found, kernels, name)
    source = ContractionSource(program, text, {}, name, contraction=found, variants=kernels)
    return ContractionPlan(schedule, source)


def _plain(operand) -> bool:
    """Whether the contraction reads ``operand`` as the array element itself, or widened to f32
    (exact: the tensor cores multiply the half values and sum the products in f32)."""
    value = operand.value
    if isinstance(value, E.Cast) and value.dtype.name == "f32":
        value = value.operand
    return isinstance(value, E.Var) and value.name == ELEMENT


# ----- launches ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Launch:
    """One launch: the values of the kernel's run arguments (in
    :func:`~polyopt.codegen.cuda_contraction.extra_arguments` order) and the grid (x, y, z),
    None when the result is empty."""

    arguments: tuple[int, ...]
    grid: tuple[int, int, int] | None


def array_strides(index: tuple[str, ...], shape: tuple[int, ...]) -> dict[str, int]:
    """Element strides of a C-contiguous array of ``shape`` subscripted by ``index``."""
    return {name: prod(shape[d + 1:]) for d, name in enumerate(index)}


def launch_layout(c: Contraction, variant: Variant, extent: dict[str, int],
                  shapes: dict[str, tuple[int, ...]]) -> Launch:
    """The launch of the contraction kernel for these index extents and array shapes (module
    docstring): the M, N and K runs, the batch and outer-K slots, the grid."""
    # per operand, not per array: both operands may read one array (syrk's A[i, k] * A[j, k])
    left = array_strides(c.left.index, shapes[c.left.array])
    right = array_strides(c.right.index, shapes[c.right.array])
    out = array_strides(c.output_index, shapes[c.output])
    m_run, m_rest = _run(c.m, extent, (left, out))
    n_run, n_rest = _run(c.n, extent, (right, out))
    k_run, k_rest = _run(c.k, extent, (left, right))
    size = {name: prod(extent[i] for i in run) for name, run in (("M", m_run), ("N", n_run), ("K", k_run))}
    values = [size["M"], size["N"], size["K"],
              left.get(m_run[0], 0), left.get(k_run[0], 0), right.get(k_run[0], 0), right.get(n_run[0], 0),
              out.get(m_run[0], 0), out.get(n_run[0], 0)]
    slots = Slots.of(c)
    batch = [i for i in c.output_index if i in set(c.batch) | set(m_rest) | set(n_rest)]
    outer_k = [i for i in c.k if i in k_rest]
    z, ko = prod(extent[i] for i in batch), prod(extent[i] for i in outer_k)
    values += [z, ko]
    for i in batch + [None] * (slots.batch - len(batch)):
        values += [1, 0, 0, 0] if i is None else [extent[i], left.get(i, 0), right.get(i, 0), out.get(i, 0)]
    for i in outer_k + [None] * (slots.outer_k - len(outer_k)):
        values += [1, 0, 0] if i is None else [extent[i], left.get(i, 0), right.get(i, 0)]
    for i in epilogue_indices(c):  # where an index's value comes from: coordinate, divisor, modulus
        for source, inner_first in ((0, m_run), (1, n_run), (2, batch[::-1])):
            if i in inner_first:
                values += [source, prod(extent[j] for j in inner_first[:inner_first.index(i)]), extent[i]]
    blocks = (-(-size["N"] // variant.bn), -(-size["M"] // variant.bm), z)
    grid = None if 0 in blocks else tuple(min(b, limit) for b, limit in zip(blocks, _GRID_LIMIT))
    return Launch(tuple(values), grid)


def _run(indices: tuple[str, ...], extent: dict[str, int], arrays) -> tuple[list[str], list[str]]:
    """The innermost run of ``indices`` (innermost first): the last index and each one before
    it whose stride in every array is the extent times the stride of the run's outermost
    index (adjacent in memory); and the indices left out."""
    run = [indices[-1]]
    for p in reversed(indices[:-1]):
        q = run[-1]
        if not all(a.get(p, 0) == extent[q] * a.get(q, 0) for a in arrays):
            break
        run.append(p)
    return run, [i for i in indices if i not in run]


def async_aligned(c: Contraction, variant: Variant, layout: Launch, aligned_operands: bool) -> bool:
    """Whether the asynchronous kernel ``variant`` may run this launch: both operands start
    16-byte aligned (``aligned_operands``) and every stride of theirs that is not literal 1 in
    the code (run, batch and outer-K strides) is a whole number of 16-byte vectors, so every
    row a ``cp.async`` starts is aligned."""
    if not aligned_operands:
        return False
    per_vector = COPY_BYTES // OPERAND_BYTES[variant.engine]
    return all(layout.arguments[p] % per_vector == 0 for p in operand_stride_positions(c))


def choose_kernel(source: ContractionSource, extent: dict[str, int], shapes: dict[str, tuple[int, ...]],
                  sm_count: int, aligned_operands: bool = True, wgmma: bool = False) -> tuple[str, Variant, Launch]:
    """The kernel of ``source`` to launch (name, tile shape, layout). The candidates are the
    asynchronous kernels where the launch lets them run (:func:`async_aligned`) and has
    :data:`~polyopt.codegen.cuda_contraction.ASYNC_MIN_WORK` multiply-adds or more, else the
    register-staged ones; among them, the one with the best share of useful tile coordinates
    (M x N over the tiles' area) times grid fill (blocks over
    :data:`~polyopt.codegen.cuda_contraction.MIN_BLOCKS_PER_SM` per SM, at most 1), the first
    candidate counted at full speed and the others at
    :data:`~polyopt.codegen.cuda_contraction.OTHER_TILE_SPEED`; the first of equals.

    ``wgmma``: the module was built for sm_90a (an H100/H200); its ``wgmma`` kernels are then
    the candidates where the operands allow ``cp.async`` as above and there are
    :data:`~polyopt.codegen.cuda_contraction.WGMMA_MIN_WORK` multiply-adds or more; otherwise
    they never are."""
    c = source.contraction
    hopper = [v for _, v in source.variants if v.wgmma] if wgmma else []
    if hopper:
        layout = launch_layout(c, hopper[0], extent, shapes)
        m, n, k, z, ko = (layout.arguments[i] for i in (0, 1, 2, 9, 10))
        if m * n * k * z * ko >= WGMMA_MIN_WORK and async_aligned(c, hopper[0], layout, aligned_operands):
            return _best(source, extent, shapes, sm_count, lambda v: v.wgmma)
    asynchronous = [v for _, v in source.variants if v.asynchronous and not v.wgmma]
    use_async = False
    if asynchronous:
        layout = launch_layout(c, asynchronous[0], extent, shapes)
        m, n, k, z, ko = (layout.arguments[i] for i in (0, 1, 2, 9, 10))
        use_async = (m * n * k * z * ko >= ASYNC_MIN_WORK[asynchronous[0].engine]
                     and async_aligned(c, asynchronous[0], layout, aligned_operands))
    return _best(source, extent, shapes, sm_count, lambda v: v.asynchronous == use_async and not v.wgmma)


def _best(source: ContractionSource, extent: dict[str, int], shapes: dict[str, tuple[int, ...]], sm_count: int,
          candidate) -> tuple[str, Variant, Launch]:
    """Among the kernels of ``source`` whose shape passes ``candidate``, the one
    :func:`choose_kernel` describes (useful share of the tiles times grid fill)."""
    c = source.contraction
    best, best_score, first = None, -1.0, True
    for name, variant in source.variants:
        if not candidate(variant):
            continue
        layout = launch_layout(c, variant, extent, shapes)
        if layout.grid is None:
            return name, variant, layout
        m, n = layout.arguments[0], layout.arguments[1]
        tiles = -(-m // variant.bm) * variant.bm * -(-n // variant.bn) * variant.bn
        blocks = -(-m // variant.bm) * -(-n // variant.bn) * layout.arguments[9]
        score = (m * n / tiles) * min(1.0, blocks / (MIN_BLOCKS_PER_SM * sm_count)) * (1.0 if first else OTHER_TILE_SPEED)
        first = False
        if score > best_score:
            best, best_score = (name, variant, layout), score
    return best


def launch(source: ContractionSource, module, abi_values: list, params: dict[str, int], arrays: dict,
           sm_count: int, wgmma: bool = False) -> None:
    """Launch a contraction kernel of ``source`` (built in ``module``) on the current stream:
    the kernel's own arguments ``abi_values``, then the layout's (:func:`launch_layout`) from
    the parameter values and the (C-contiguous) arrays' shapes, on a GPU of ``sm_count`` SMs;
    ``wgmma``: ``module`` was built for sm_90a (its ``wgmma`` kernels may run)."""
    c = source.contraction
    extent = {i: int(evaluate(e, params, {})) for i, e in c.extent.items()}
    shapes = {name: tuple(arrays[name].shape) for name in (c.left.array, c.right.array, c.output)}
    aligned = all(arrays[name].data.ptr % COPY_BYTES == 0 for name in (c.left.array, c.right.array))
    key = (id(source), tuple(extent.values()), tuple(shapes.values()), sm_count, aligned, wgmma)
    known = _CHOSEN.get(key)
    if known is not None and known[0] is source and known[1] is choose_kernel:
        name, variant, layout = known[2]
    else:
        chosen = choose_kernel(source, extent, shapes, sm_count, aligned, wgmma=wgmma)
        if len(_CHOSEN) >= MAX_CHOSEN:
            _CHOSEN.clear()
        _CHOSEN[key] = (source, choose_kernel, chosen)
        name, variant, layout = chosen
    if layout.grid is None:
        return
    shared = shared_bytes(c, variant)
    args = tuple(abi_values) + tuple(np.int64(v) for v in layout.arguments)
    if not shared:
        module.get_function(name)(layout.grid, (variant.threads, 1, 1), args)
        return
    _allow_dynamic_shared(module.raw_function(name) if hasattr(module, "raw_function") else module.get_function(name),
                          shared)
    module.get_function(name)(layout.grid, (variant.threads, 1, 1), args, shared_mem=shared)


#: The kernel and layout :func:`launch` chose, by source (its identity: the source is held, so
#: the identity stays its own), extents, shapes, SM count, alignment and build: a launch chose
#: among up to 12 tile shapes again each time (a layout each), Python work that set the time of
#: issue 17's smaller contractions launched back to back (docs/performance.md, "Contractions").
#: Holding the chooser too, a test that replaces it is never answered from an earlier choice.
_CHOSEN: dict[tuple, tuple] = {}
#: Choices :data:`_CHOSEN` keeps before it starts again.
MAX_CHOSEN = 256
#: Dynamic shared memory a kernel may take without opting in (bytes).
STATIC_SHARED_LIMIT = 48 * 1024
#: Per CuPy kernel (by identity; the kernel is kept), the dynamic shared memory it may take.
_SHARED_ALLOWED: dict[int, tuple[object, int]] = {}


def _allow_dynamic_shared(function, nbytes: int) -> None:
    """Let CuPy kernel ``function`` launch with ``nbytes`` of dynamic shared memory: past
    :data:`STATIC_SHARED_LIMIT` a kernel has to opt in, once."""
    if nbytes <= max(STATIC_SHARED_LIMIT, _SHARED_ALLOWED.get(id(function), (None, 0))[1]):
        return
    function.max_dynamic_shared_size_bytes = nbytes
    _SHARED_ALLOWED[id(function)] = (function, nbytes)


__all__ = ["ContractionPlan", "Launch", "array_strides", "async_aligned", "check_precision", "choose_kernel",
           "contraction_plan", "launch", "launch_layout"]
