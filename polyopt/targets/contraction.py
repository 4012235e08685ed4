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

:func:`contraction_program_plan` does the same for a program of contractions (2mm, 3mm: each
top-level nest one, :func:`~polyopt.analysis.contraction.find_contractions`): one kernel per
nest, the nests' trees in one sequence verified on the whole Scop, the kernels launched in
program order (each nest runs whole before the next, as in the program).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial
from importlib import import_module
from math import prod

import islpy as isl
import numpy as np

from polyopt.analysis import expr as E
from polyopt.analysis.contraction import (ELEMENT, PRECISIONS, Contraction, epilogue_indices, find_contraction,
                                          find_contractions)
from polyopt.analysis.evaluate import evaluate
from polyopt.analysis.scop import Scop
from polyopt.analysis.verify import verify
from polyopt.codegen.cuda_contraction import (COPY_BYTES, OPERAND_BYTES, MIN_BLOCKS_PER_SM, MIN_SPLIT_TILES,
                                              OTHER_TILE_SPEED, RUN_ARGUMENTS,
                                              ContractionProgramSource, ContractionSource, Variant,
                                              contraction_source, engine_for, NARROW_WGMMA_VARIANT, WGMMA_MIN_K,
                                              WGMMA_MIN_SHARE,
                                              operand_stride_positions, shared_bytes, staged_tiles,
                                              tile_variants)
from polyopt.codegen.contraction_text import Slots, half_store
from polyopt.codegen.cuda_wgmma import ROW_BYTES, staging_columns, tma_layouts, transposed_copies, wgmma_layouts
from polyopt.codegen.gpu_mapping import GpuProgram, map_to_gpu
from polyopt.errors import IllegalScheduleError, ScheduleError
from polyopt.targets.tensor_maps import MapSpec, TmaLaunch
from polyopt.schedulers.registry import schedule as run_scheduler
from polyopt.transform.contraction_tree import coordinate_tree, program_tree
from polyopt.transform.schedule import Schedule

#: Most blocks per grid dimension (x, y, z).
_GRID_LIMIT = (2**31 - 1, 65535, 65535)


@dataclass(frozen=True)
class ContractionPlan:
    """What the contraction path makes of a kernel: the schedule value (the original order,
    with the mapping as its last note, or one note per kernel for a program of contractions)
    and the source (its program is the verified mapping: per contraction one kernel whose
    coordinates are the output indices)."""

    schedule: Schedule
    source: ContractionSource | ContractionProgramSource


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
    if find_contraction(scop) is None:
        return None
    if schedule is None:
        try:
            schedule = run_scheduler(scop, "original").gpu_contract(precision=precision)
        except ScheduleError:
            return None  # e.g. the init statement runs after some update in the original order
    mapped = mapped_contraction(scop, check_precision(precision), name, schedule.tree)
    if mapped is None:
        return None
    found, engine, program = mapped
    kernels = tile_kernels(scop, found, engine, program.kernels[0].name)
    note = (f"GPU contraction mapping ({engine}, precision={precision!r}): {found.describe()}; "
            f"one kernel, block tile {describe_tiles(kernels)}; the tile, the M/N runs and the batch are chosen "
            "per launch from the sizes and strides")
    schedule = replace(schedule, notes=tuple(schedule.notes) + (note,))
    text = contraction_source(scop, ((found, kernels),), name)
    source = ContractionSource(program, text, {}, name, contraction=found, variants=kernels,
                               half_store=half_store(scop, found))
    return ContractionPlan(schedule, source)


def mapped_contraction(scop: Scop, precision: str, name: str, tree: isl.Schedule | None = None
                       ) -> tuple[Contraction, str, GpuProgram] | None:
    """The contraction ``scop`` is, its engine in ``precision`` and its coordinate tree
    (:func:`~polyopt.transform.contraction_tree.coordinate_tree`, or ``tree``: a schedule
    ending in :meth:`~polyopt.Schedule.gpu_contract`) mapped as kernels ``name``... once the
    verifier accepts the mapped tree; None where ``scop`` is no contraction, no engine computes
    it, or the verifier refuses (its caller maps it the general way)."""
    found = find_contraction(scop)
    if found is None:
        return None
    engine = contraction_engine(scop, found, precision)
    if engine is None:
        return None
    program = map_to_gpu(scop, coordinate_tree(scop, found) if tree is None else tree, name)
    try:
        verify(scop, program.tree)
    except IllegalScheduleError:
        return None
    return found, engine, program


def contraction_program_plan(scop: Scop, name: str, precision: str = "exact") -> ContractionPlan | None:
    """The contraction kernels of a program of contractions ``scop`` (each top-level nest one,
    :func:`~polyopt.analysis.contraction.find_contractions`: 2mm, 3mm), launched in program
    order; None where ``scop`` is no such program, a contraction has no kernel (as in
    :func:`contraction_plan`), the contractions' operands differ in element type (one
    translation unit's helpers serve one), or the verifier refuses the mapped tree (the caller
    maps the program the general way). The tree is a sequence of the nests' coordinate trees
    (:func:`~polyopt.transform.contraction_tree.program_tree`), mapped and verified on the
    whole Scop; the schedule value is the original order (each nest whole, in turn) with one
    note per kernel naming the statements it computes."""
    nests = find_contractions(scop)
    if nests is None:
        return None
    engines = [contraction_engine(scop, c, check_precision(precision)) for _, c in nests]
    if None in engines or len({scop.arrays[c.left.array].dtype for _, c in nests}) > 1:
        return None
    program = map_to_gpu(scop, program_tree(nests), name)
    try:
        verify(scop, program.tree)
    except IllegalScheduleError:
        return None
    parts, notes = [], []
    for k, ((_, c), engine, kernel) in enumerate(zip(nests, engines, program.kernels)):
        kernels = tile_kernels(scop, c, engine, kernel.name)
        parts.append((c, kernels))
        notes.append(f"GPU contraction mapping ({engine}, precision={precision!r}), kernel {k + 1} of {len(nests)} "
                     f"({kernel.name}): statements {', '.join(c.statements)} compute {c.output} as {c.describe()}; "
                     f"block tile {describe_tiles(kernels)}; the tile, the M/N runs and the batch are chosen per "
                     "launch from the sizes and strides; the kernels run in program order")
    text = contraction_source(scop, tuple(parts), name)
    steps = tuple(ContractionSource(program, text, {}, name, contraction=c, variants=kernels,
                                    half_store=half_store(scop, c))
                  for c, kernels in parts)
    schedule = run_scheduler(scop, "original")
    return ContractionPlan(replace(schedule, notes=tuple(schedule.notes) + tuple(notes)),
                           ContractionProgramSource(program, text, {}, name, steps=steps))


def contraction_engine(scop: Scop, c: Contraction, precision: str) -> str | None:
    """The engine computing ``c`` in ``precision``
    (:func:`~polyopt.codegen.cuda_contraction.engine_for`), None where none does: operands of
    two element types (in any operand pair), or half operands computed on (they go to the
    tensor cores as they are)."""
    types = {scop.arrays[a].dtype.name for a in c.operand_arrays}
    engine = engine_for(scop.arrays[c.output].dtype.name, precision, *types) if len(types) == 1 else None
    if engine is None or (engine == "hmma" and not all(_plain(o) for pair in c.pairs for o in pair)):
        return None
    return engine


def tile_kernels(scop: Scop, c: Contraction, engine: str, kernel: str) -> tuple[tuple[str, Variant], ...]:
    """The kernels of ``c`` by ``engine``: (name, tile shape) per tile shape that can compute
    it, named ``kernel``, ``kernel_1``, ..."""
    variants = [v for v in tile_variants(engine, scop.arrays[c.left.array].dtype.name, c)
                if ((wgmma_layouts(c, v) is not None and (not v.tma or tma_layouts(c, v)))
                    if v.wgmma else (not v.asynchronous or staged_tiles(c, v)))]
    return tuple((kernel if k == 0 else f"{kernel}_{k}", v) for k, v in enumerate(variants))


def describe_tiles(kernels: tuple[tuple[str, Variant], ...]) -> str:
    """The kernels' tile shapes, as the schedule's notes name them."""
    return " or ".join(f"{v.bm}x{v.bn}x{v.bk} ({v.threads} threads"
                       f"{f', K split over a cluster of {v.split_k}' if v.split_k else ''})" for _, v in kernels)


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
    docstring): the M, N and K runs (indices adjacent in memory in every operand pair), the
    batch and outer-K slots, the grid; the first operand pair's strides among the run, batch
    and outer-K arguments, every other pair's after them
    (:func:`~polyopt.codegen.cuda_contraction.extra_arguments`)."""
    # per operand, not per array: both operands may read one array (syrk's A[i, k] * A[j, k])
    strides = [tuple(array_strides(o.index, shapes[o.array]) for o in pair) for pair in c.pairs]
    (left, right), lefts, rights = strides[0], [s[0] for s in strides], [s[1] for s in strides]
    out = array_strides(c.output_index, shapes[c.output])
    m_run, m_rest = _run(c.m, extent, (*lefts, out))
    n_run, n_rest = _run(c.n, extent, (*rights, out))
    k_run, k_rest = _run(c.k, extent, (*lefts, *rights))
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
    for pair_left, pair_right in strides[1:]:  # pair_stride_names' order
        values += [pair_left.get(m_run[0], 0), pair_left.get(k_run[0], 0), pair_right.get(k_run[0], 0),
                   pair_right.get(n_run[0], 0)]
        values += [s.get(i, 0) for i in batch + [None] * (slots.batch - len(batch)) for s in (pair_left, pair_right)]
        values += [s.get(i, 0) for i in outer_k + [None] * (slots.outer_k - len(outer_k))
                   for s in (pair_left, pair_right)]
    split = variant.blocks_per_tile  # a cluster of blocks along x per tile
    blocks = (-(-size["N"] // variant.bn) * split, -(-size["M"] // variant.bm), z)
    grid = None if 0 in blocks else tuple(min(b, limit // split * split if d == 0 else limit)
                                          for d, (b, limit) in enumerate(zip(blocks, _GRID_LIMIT)))
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
    """Whether the asynchronous kernel ``variant`` may run this launch: every operand starts
    16-byte aligned (``aligned_operands``) and every stride of theirs that is not literal 1 in
    the code (run, batch and outer-K strides) is a whole number of 16-byte vectors, so every
    row a ``cp.async`` starts is aligned."""
    if not aligned_operands:
        return False
    per_vector = COPY_BYTES // OPERAND_BYTES[variant.engine]
    return all(layout.arguments[p] % per_vector == 0 for p in operand_stride_positions(c))


def tma_specs(source: ContractionSource, variant: Variant, layout: Launch) -> tuple[MapSpec, MapSpec] | None:
    """The tensor maps TMA kernel ``variant`` of ``source`` reads its operands through for this
    launch (left, right), None where it may not run it: an outer-K slot in use, batch slots in
    use that are not one dimension of both operands (each operand's stride in a slot the
    extent of the next slot times its stride there, none 0: the copies address the batch by the
    block's ``_z``), or a map the driver does not take (a stride that is no whole number of
    16-byte vectors, or too large). Each operand is 3-D: a K-major one (K run contiguous)
    (K, rows, batch) with boxes of ``BK`` by the tile's rows; an MN-major one (halves) (rows,
    K, batch) with boxes of 64 by ``BK``; a TF32 operand whose M/N run is contiguous is read
    from a K-major copy each launch makes first (``MapSpec.copied_from``)."""
    m, n, k, s_lm, s_lk, s_rk, s_rn = layout.arguments[:7]
    z, ko = layout.arguments[9], layout.arguments[10]
    if ko != 1:
        return None
    slots = [layout.arguments[len(RUN_ARGUMENTS) + 4 * j:len(RUN_ARGUMENTS) + 4 * j + 4]
             for j in range(Slots.of(source.contraction).batch)]
    used = [(extent, left, right) for extent, left, right, _ in slots if extent > 1]
    for (_, outer_left, outer_right), (extent, left, right) in zip(used, used[1:]):
        if outer_left != extent * left or outer_right != extent * right:
            return None
    c = source.contraction
    dtype = source.program.scop.arrays[c.left.array].dtype.name
    size = ROW_BYTES // variant.bk
    k_major, copied = wgmma_layouts(c, variant), transposed_copies(c, variant)
    specs = []
    for side, by_k, by_copy, rows, tile, row_stride, k_stride in (
            (1, k_major[0], copied[0], m, variant.bm, s_lm, s_lk), (2, k_major[1], copied[1], n, variant.bn, s_rn, s_rk)):
        # no batch: any valid stride over a dimension of one (the whole operand's)
        outer = used[-1][side] if used else (rows * row_stride if by_k and not by_copy else k * k_stride)
        if by_copy:  # read from a K-major copy, its rows padded to whole 16-byte vectors
            row = -(-k * size // 16) * 16
            specs.append(MapSpec(dtype, (k, rows, z), (row, rows * row), (variant.bk, tile, 1), (k_stride, outer)))
        elif by_k:
            specs.append(MapSpec(dtype, (k, rows, z), (row_stride * size, outer * size), (variant.bk, tile, 1)))
        else:
            specs.append(MapSpec(dtype, (rows, k, z), (k_stride * size, outer * size), (64, variant.bk, 1)))
    return (specs[0], specs[1]) if all(spec.allowed() for spec in specs) else None


#: Terms of a ``wgmma`` kernel's K tile of halves (128 bytes): the shortest sum that takes the
#: staging TMA kernels below ``WGMMA_MIN_K`` (:func:`choose_kernel`).
HALF_K_TILE = ROW_BYTES // 2


def choose_kernel(source: ContractionSource, extent: dict[str, int], shapes: dict[str, tuple[int, ...]],
                  sm_count: int, aligned_operands: bool = True, wgmma: bool = False,
                  tma: bool = False, clusters: bool = False, half: bool = False) -> tuple[str, Variant, Launch]:
    """The kernel of ``source`` to launch (name, tile shape, layout). The candidates are the
    asynchronous kernels where the launch lets them run (:func:`async_aligned`), else the
    register-staged ones (measured on an H100, the ``cp.async`` kernels were as fast or faster on
    every contraction where both may run: docs/performance.md, "Contractions"); among them, the
    one with the best share of useful tile coordinates (M x N over the tiles' area) times grid
    fill (blocks over :data:`~polyopt.codegen.cuda_contraction.MIN_BLOCKS_PER_SM` per SM, at
    most 1), the first candidate counted at full speed and the others at
    :data:`~polyopt.codegen.cuda_contraction.OTHER_TILE_SPEED`; the first of equals.

    ``wgmma``: the module was built for sm_90a (an H100/H200); its ``wgmma`` kernels are then
    the candidates where the operands allow ``cp.async`` as above, the sum has
    :data:`~polyopt.codegen.cuda_contraction.WGMMA_MIN_K` terms or more and 128 x 128 tiles
    make at least one block per SM, with at least
    :data:`~polyopt.codegen.cuda_contraction.WGMMA_MIN_SHARE` of their coordinates in the
    output (not an N of 64); otherwise they never are. ``tma``: the launch may take the
    TMA kernels (not while a stream captures a graph); among the ``wgmma`` kernels they are
    then the candidates where :func:`tma_specs` allows them, else the others. An N of 64 or
    less takes :data:`~polyopt.codegen.cuda_contraction.NARROW_WGMMA_VARIANT` (TMA, 128 x 64
    tiles, the same tests with tiles of that width) and only it. ``half``: the output is of the
    operands' half type (:attr:`~polyopt.codegen.cuda_contraction.ContractionSource.half_store`);
    a shorter sum of one whole K tile or more (:data:`HALF_K_TILE` terms) then takes the TMA
    kernels that stage the whole output tile at once
    (:func:`~polyopt.codegen.cuda_wgmma.staging_columns`) where TMA may run: their grid walks
    its tiles one block an SM, the producer loading the next tiles while the consumers store
    (attention's ``bhqd,bhkd->bhqk``, K = 64, measured faster than ``mma.sync``:
    docs/performance.md, "Short sums on the TMA kernels").

    ``clusters``: the GPU runs thread block clusters (sm_90): the kernels splitting K over one
    (:attr:`~polyopt.codegen.cuda_contraction.Variant.split_k`) are then candidates too where
    each block gets :data:`~polyopt.codegen.cuda_contraction.MIN_SPLIT_TILES` K tiles or more
    and the grid, every block of a cluster counted, stays within the blocks its fill asks for
    (fewer tiles than SMs and a long sum: the most blocks that fit; a split of a grid that
    already fills the SMs only adds the sums' cost, and measured slower on an H200)."""
    c = source.contraction
    hopper = [v for _, v in source.variants if v.wgmma] if wgmma else []
    if hopper:
        layout = launch_layout(c, hopper[0], extent, shapes)
        m, n, k, z, ko = (layout.arguments[i] for i in (0, 1, 2, 9, 10))
        mapped = [v for v in hopper if v.tma] if tma else []
        use_tma = bool(mapped) and tma_specs(source, mapped[0], layout) is not None
        narrow = (n <= 64 and use_tma and NARROW_WGMMA_VARIANT in hopper
                  and tma_specs(source, NARROW_WGMMA_VARIANT, layout) is not None)
        width = 64 if narrow else 128
        tiles = -(-m // 128) * -(-n // width)
        # a short sum: only the persistent kernels staging a half output, from one whole K tile
        short = k * ko < WGMMA_MIN_K
        staged_short = use_tma and half and k * ko >= HALF_K_TILE
        if ((not short or staged_short) and tiles * z >= sm_count
                and m * n >= WGMMA_MIN_SHARE * tiles * 128 * width
                and async_aligned(c, hopper[0], layout, aligned_operands)):
            return _best(source, extent, shapes, sm_count,
                         lambda v: v.wgmma and v.tma == use_tma and (v == NARROW_WGMMA_VARIANT) == narrow
                         and (not short or staging_columns(v) == v.bn))
    asynchronous = [v for _, v in source.variants if v.asynchronous and not v.wgmma]
    use_async = bool(asynchronous) and async_aligned(
        c, asynchronous[0], launch_layout(c, asynchronous[0], extent, shapes), aligned_operands)
    return _best(source, extent, shapes, sm_count,
                 lambda v: v.asynchronous == use_async and not v.wgmma and (not v.split_k or clusters))


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
        m, n, k, ko = (layout.arguments[i] for i in (0, 1, 2, 10))
        if variant.split_k and -(-k // variant.bk) * ko < variant.split_k * MIN_SPLIT_TILES:
            continue
        tiles = -(-m // variant.bm) * variant.bm * -(-n // variant.bn) * variant.bn
        blocks = -(-m // variant.bm) * -(-n // variant.bn) * layout.arguments[9] * variant.blocks_per_tile
        if variant.split_k and blocks > MIN_BLOCKS_PER_SM * sm_count:
            continue
        score = (m * n / tiles) * min(1.0, blocks / (MIN_BLOCKS_PER_SM * sm_count)) * (1.0 if first else OTHER_TILE_SPEED)
        first = False
        if score > best_score:
            best, best_score = (name, variant, layout), score
    return best


def launch(source: ContractionSource, module, abi_values: list, params: dict[str, int], arrays: dict,
           sm_count: int, wgmma: bool = False, clusters: bool = False) -> None:
    """Launch a contraction kernel of ``source`` (built in ``module``) on the current stream:
    the kernel's own arguments ``abi_values``, then the layout's (:func:`launch_layout`) from
    the parameter values and the (C-contiguous) arrays' shapes, on a GPU of ``sm_count`` SMs;
    ``wgmma``: ``module`` was built for sm_90a (its ``wgmma`` kernels may run); ``clusters``:
    the GPU runs thread block clusters (its K-splitting kernels may run)."""
    c = source.contraction
    shapes = tuple(arrays[name].shape for name in (*c.operand_arrays, c.output))
    aligned = all(arrays[name].data.ptr % COPY_BYTES == 0 for name in c.operand_arrays)
    cupy = import_module("cupy") if wgmma else None
    tma = wgmma and not _capturing(cupy)
    half = source.half_store is not None and arrays[c.output].dtype.itemsize == 2  # (bind let it through)
    key = (id(source), tuple(params.items()), shapes, sm_count, aligned, wgmma, tma, half, clusters)
    known = _CHOSEN.get(key)
    if known is not None and known[0] is source and known[1] is choose_kernel:
        prepared = known[2]
    else:
        prepared = _prepared(source, params, arrays, sm_count, aligned, wgmma, tma, half, clusters)
        if len(_CHOSEN) >= MAX_CHOSEN:
            _CHOSEN.clear()
        _CHOSEN[key] = (source, choose_kernel, prepared)
    if prepared.grid is None:
        return
    args = tuple(abi_values) + prepared.arguments
    if not prepared.shared:
        module.get_function(prepared.name)(prepared.grid, prepared.block, args)
        return
    allow_dynamic_shared(module, prepared.name, prepared.shared)
    function = module.get_function(prepared.name)
    if prepared.maps is None:
        function(prepared.grid, prepared.block, args, shared_mem=prepared.shared)
        return
    positions = tuple(next(p for p, value in enumerate(abi_values) if value is arrays[operand.array])
                      for operand in c.pairs[0])
    if hasattr(module, "raw_function"):  # a recorder: it records the launch as a TmaLaunch
        function(prepared.grid, prepared.block, args, shared_mem=prepared.shared,
                 tensor_maps=(cupy, positions, prepared.maps))
    else:
        TmaLaunch(cupy, partial(function, shared_mem=prepared.shared), positions, prepared.maps)(
            prepared.grid, prepared.block, args)


def _capturing(cupy) -> bool:
    """Whether the current stream captures a CUDA graph (which would hold the addresses of
    tensor maps that the cache may drop: :mod:`polyopt.targets.tensor_maps`)."""
    try:
        return bool(cupy.cuda.get_current_stream().is_capturing())
    except AttributeError:  # a CuPy without capture queries
        return True


@dataclass(frozen=True)
class _Prepared:
    """What :func:`launch` passes CuPy for one choice: the kernel's name, grid (None: nothing
    to compute) and block, its dynamic shared memory, and the layout's arguments as the
    kernel's ``long`` values."""

    name: str
    grid: tuple[int, int, int] | None
    block: tuple[int, int, int]
    shared: int
    arguments: tuple
    #: A TMA kernel's tensor map layouts (left, right operand), None for the others.
    maps: tuple[MapSpec, MapSpec] | None = None


def _prepared(source: ContractionSource, params: dict[str, int], arrays: dict, sm_count: int, aligned: bool,
              wgmma: bool, tma: bool, half: bool, clusters: bool) -> _Prepared:
    """The launch :func:`choose_kernel` chooses for these parameter values and arrays (a TMA
    kernel's grid at most one block per SM: each block walks its tiles, the producer copying
    the next tile's operands while the consumers store the last one); ``half``: the output
    array holds the source's half type (:attr:`ContractionSource.half_store`)."""
    c = source.contraction
    extent = {i: int(evaluate(e, params, {})) for i, e in c.extent.items()}
    shapes = {name: tuple(arrays[name].shape) for name in (*c.operand_arrays, c.output)}
    name, variant, layout = choose_kernel(source, extent, shapes, sm_count, aligned, wgmma=wgmma, tma=tma,
                                          clusters=clusters, half=half)
    grid, maps = layout.grid, None
    if variant.tma:
        maps = tma_specs(source, variant, layout)
        if maps is None:
            raise ValueError(f"contraction kernel {name}: a TMA kernel chosen for a launch without tensor maps")
        if grid is not None and grid[0] <= sm_count:
            rows = max(1, min(grid[1], sm_count // grid[0]))
            grid = (grid[0], rows, max(1, min(grid[2], sm_count // (grid[0] * rows))))
    arguments = layout.arguments + ((int(half),) if source.half_store is not None else ())
    return _Prepared(name, grid, (variant.threads, 1, 1), shared_bytes(c, variant),
                     tuple(np.int64(v) for v in arguments), maps)


#: The launch :func:`launch` prepared (:class:`_Prepared`), by source (its identity: the source
#: is held, so the identity stays its own), parameter values, shapes, SM count, alignment and
#: build: choosing among up to 12 tile shapes (a layout each) and converting the layout's
#: arguments again at each launch was Python work that set the time of small contractions
#: launched back to back (docs/performance.md, "Contractions"). Holding the chooser too, a test
#: that replaces it is never answered from an earlier choice.
_CHOSEN: dict[tuple, tuple] = {}
#: Choices :data:`_CHOSEN` keeps before it starts again.
MAX_CHOSEN = 256
#: Dynamic shared memory a kernel may take without opting in (bytes).
STATIC_SHARED_LIMIT = 48 * 1024
#: Per driver function (its handle; the function is kept, so the handle stays its own), the
#: dynamic shared memory it may take.
_SHARED_ALLOWED: dict[int, tuple[object, int]] = {}


def allow_dynamic_shared(module, name: str, nbytes: int) -> None:
    """Let kernel ``name`` of the built ``module`` (or of the module a recorder stands in for:
    its ``raw_function``) launch with ``nbytes`` of dynamic shared memory: past
    :data:`STATIC_SHARED_LIMIT` a kernel has to opt in, once per driver function. (CuPy's
    ``get_function`` makes a new kernel object at each call, all of them on the one driver
    function of the current device, ``.kernel``: keyed by the object, the opt-ins grew by one
    entry and one driver call a launch.)"""
    function = module.raw_function(name) if hasattr(module, "raw_function") else module.get_function(name)
    loaded = function.kernel
    if nbytes <= max(STATIC_SHARED_LIMIT, _SHARED_ALLOWED.get(loaded.ptr, (None, 0))[1]):
        return
    function.max_dynamic_shared_size_bytes = nbytes
    _SHARED_ALLOWED[loaded.ptr] = (loaded, nbytes)


__all__ = ["HALF_K_TILE", "ContractionPlan", "Launch", "allow_dynamic_shared", "array_strides", "async_aligned", "check_precision", "choose_kernel",
           "contraction_engine", "contraction_plan", "contraction_program_plan", "describe_tiles", "launch",
           "launch_layout", "mapped_contraction", "tile_kernels", "tma_specs"]
