"""CUDA kernels for a recognized contraction (:mod:`polyopt.analysis.contraction`): batched GEMM.

One kernel computes, per output element, what the mapped schedule tree says each thread
coordinate runs -- the init statement, then the update over the K indices in order -- with the
output indices grouped as the libraries group them: the grid's z runs over the batch (the batch
indices and the M and N indices outside the innermost contiguous M and N runs), y over tiles of
M, x over tiles of N, and the K loop walks tiles of the K run (outer K indices outside it).
Which index goes where is decided at each launch from the sizes and strides
(:func:`polyopt.targets.contraction.launch_layout`), so one kernel serves every size; whether a
run has stride 1 in an array is structural (the array's last subscript), and those strides are
literal 1 in the code. A contraction over a box cut by constraints among the output indices
(syrk's ``j <= i``, :attr:`~polyopt.analysis.contraction.Contraction.domain`) runs the same
kernels over the bounding box: a tile with no element in the cut is skipped, and the init and
the store (with the epilogue) of each element are guarded by the constraints, so the elements
outside are neither read nor written (:mod:`polyopt.codegen.contraction_text`). A contraction
of several operand pairs (syr2k: ``C += A B^T + B A^T``,
:attr:`~polyopt.analysis.contraction.Contraction.pairs`) runs every variant's K loop once per
pair into the same accumulators, each pair with its own arrays, staged values and strides
(:func:`~polyopt.codegen.contraction_text.pair_k_loops`): the products are summed pair after
pair, not per K value as the statement adds them.

Three ways to run the K loop (``Variant.engine``):

- ``simt``: each thread accumulates a register tile, in K order, with FMA contraction (``exact``
  for f32; the staged ``L`` and ``R`` values are the statement's own subexpressions, so the
  arithmetic is the statement's);
- ``tf32``: warp-level ``mma.sync.m16n8k8`` on TF32 (10-bit mantissa) operands with f32
  accumulation (``precision="tf32"``: results change, never the default);
- ``hmma``: ``mma.sync.m16n8k16`` on f16 or bf16 operands with f32 accumulation (the
  contraction of half operands into an f32 result, as ``po.einsum`` makes it for float16 data:
  each product is exact in f32);
- ``dmma``: ``mma.sync.m16n8k16`` on f64 (sm_90; eight ``m8n8k4`` on sm_80), each product and
  sum IEEE double: the default for f64 (it sums the K values of a step in the hardware's order).

Tiles go through shared memory. Where both operands' rows start on 16-byte boundaries (checked
at each launch, :func:`polyopt.targets.contraction.async_aligned`), the tensor-core kernels copy
them with ``cp.async`` into a ring of ``stages`` K tiles (dynamic shared memory), each tile laid
out as the operand is (K or M/N contiguous); otherwise tiles are double buffered through
registers (the next tile is loaded while the current one is used). Loads walk the array's
contiguous dimension, so the M/N/K groups of any layout read coalesced (transposed operands
need no copy).

On an H100/H200 (compute capability 9.0, the module built for ``sm_90a``), large aligned
f16/bf16 and TF32 contractions take the ``wgmma`` variants instead (``Variant.wgmma``,
:mod:`polyopt.codegen.cuda_wgmma`): warpgroup MMA on 128-byte-swizzled ``cp.async`` tiles.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace

from polyopt.analysis import expr as E
from polyopt.analysis.affine import extent_expr
from polyopt.analysis.contraction import Contraction, Operand, epilogue_indices
from polyopt.analysis.scop import Scop
from polyopt.codegen.ast import abi_arguments
from polyopt.codegen.c import CExpr, c_type_name
from polyopt.codegen.cuda import CudaSource, cuda_prelude, kernel_parameters
from polyopt.codegen.contraction_text import (HALF_STORE_ARGUMENT, PAIR_TYPES, RUN_STRIDES,
                                              STAGED_PAD, Slots, StagedType, StagingScope, UnitStrides,
                                              element_store, element_test, fragment_stores, grid_loops, half_store,
                                              init_text, outer_k_offsets, pair_argument, pair_k_loops,
                                              pair_stride_names, reads_output, scalar_text, staged_stores)
from polyopt.codegen.cuda_wgmma import wgmma_body, wgmma_helpers, wgmma_shape, wgmma_shared_bytes
from polyopt.errors import CodegenError

#: The K-loop engines and what they need (element type of the operands and result).
ENGINES = ("simt", "tf32", "dmma", "hmma")
#: Bytes of an operand element per tensor-core engine.
OPERAND_BYTES = {"tf32": 4, "dmma": 8, "hmma": 2}


@dataclass(frozen=True)
class Variant:
    """The shape of one contraction kernel: block tile ``bm x bn``, K tile ``bk``, threads per
    block; for ``simt`` each thread's register tile is ``tm x tn``, for the tensor-core engines
    the warps are ``warps_m x warps_n``."""

    engine: str
    bm: int
    bn: int
    bk: int
    threads: int
    tm: int = 0
    tn: int = 0
    warps_m: int = 0
    warps_n: int = 0
    stages: int = 0
    #: Hopper warpgroup MMA (``wgmma.mma_async``, sm_90a only) on swizzled ``cp.async`` tiles
    #: (:mod:`polyopt.codegen.cuda_wgmma`): two warpgroups of 128 threads, ``bk`` = 128 bytes.
    wgmma: bool = False
    #: ``wgmma`` groups a warpgroup leaves in flight at each K tile (0: it waits for the tile's
    #: products before the next barrier; 1: for the previous tile's, the ring refilled two
    #: tiles behind, so the tensor cores run across the barrier).
    inflight: int = 0
    #: Warp-specialized ``wgmma`` (384 threads): a producer warpgroup that only copies, two
    #: consumer warpgroups, mbarriers per ring slot instead of block barriers.
    specialized: bool = False
    #: Blocks per SM the kernel is built for (``__launch_bounds__``' second argument; 0: none).
    blocks_per_sm: int = 0
    #: Warp-specialized ``wgmma`` whose producer is one thread issuing TMA tensor copies (two
    #: tensor maps as the last kernel arguments, :mod:`polyopt.targets.tensor_maps`), with
    #: ``setmaxnreg`` between the roles; launched only where each operand is a 3-D view (run,
    #: rows, batch: :func:`polyopt.targets.contraction.tma_specs`).
    tma: bool = False
    #: Blocks of a thread block cluster (sm_90) splitting the K tiles among them (0: no split):
    #: each sums its share, the cluster's first block adds the others' sums from their shared
    #: memory in rank order (deterministic) and stores; for grids of fewer tiles than SMs, whose
    #: blocks would each run the whole K alone.
    split_k: int = 0

    @property
    def blocks_per_tile(self) -> int:
        """Blocks computing one output tile: the cluster splitting its K, or one."""
        return max(1, self.split_k)

    @property
    def asynchronous(self) -> bool:
        """Whether the tiles go global -> shared by ``cp.async`` in a ring of ``stages`` K tiles
        (dynamic shared memory; only where the operands' rows are 16-byte aligned, see
        :func:`async_aligned`), not through registers into two static buffers."""
        return self.stages > 0


@dataclass(frozen=True)
class ContractionSource(CudaSource):
    """A :class:`~polyopt.codegen.cuda.CudaSource` holding a contraction's kernels: one per
    tile shape in ``variants`` ((kernel name, shape), the large tile first); ``program`` has
    the mapped tree (the kernel under the first name) and no host steps: the target launches
    one of them with :func:`polyopt.targets.contraction.launch`. A step of a
    :class:`ContractionProgramSource` shares the program's translation unit and mapping."""

    contraction: Contraction | None = None
    variants: tuple[tuple[str, Variant], ...] = ()
    #: The half type the kernels may store the output in
    #: (:func:`~polyopt.codegen.contraction_text.half_store`; they then take its launch argument).
    half_store: str | None = None


@dataclass(frozen=True)
class ContractionProgramSource(CudaSource):
    """A :class:`~polyopt.codegen.cuda.CudaSource` of a program of contractions
    (:func:`~polyopt.analysis.contraction.find_contractions`, e.g. PolyBench's 2mm): one
    translation unit with every contraction's kernels and a host function launching them in
    order; ``program`` is the verified mapping of the whole program (one kernel per
    contraction). ``steps``: the contractions in program order, each a
    :class:`ContractionSource` of this unit, launched whole one after the other with
    :func:`polyopt.targets.contraction.launch` (each its own tile for its own sizes)."""

    steps: tuple[ContractionSource, ...] = ()


def contraction_steps(source: CudaSource) -> tuple[ContractionSource, ...]:
    """The contractions ``source`` runs, in launch order: itself for a
    :class:`ContractionSource`, its steps for a :class:`ContractionProgramSource`, none for a
    source of the general mapping (whose host program launches its kernels)."""
    if isinstance(source, ContractionSource):
        return (source,)
    return source.steps if isinstance(source, ContractionProgramSource) else ()


#: The TMA ``wgmma`` kernel for contractions of at most 64 output columns (attention's
#: ``bhqk,bhkd->bhqd``): 128 x 64 tiles, where the 128 x 128 ones leave half of each tile idle.
#: Taken only there (:func:`polyopt.targets.contraction.choose_kernel`), the others elsewhere.
NARROW_WGMMA_VARIANT = Variant("hmma", 128, 64, 64, 384, stages=4, wgmma=True, inflight=1, specialized=True,
                               blocks_per_sm=1, tma=True)
#: The ``wgmma`` kernels (sm_90a) per engine, listed after the others (the launch takes them
#: only from a module built for sm_90a, :func:`polyopt.targets.contraction.choose_kernel`).
#: First the TMA kernels (warp-specialized, one producer thread issuing tensor copies,
#: ``setmaxnreg``), 128 x 256 and 128 x 128 in 4 stages, taken where the operands allow tensor
#: maps (a hand-written kernel of this design ran f16 4096^3 in 0.234 ms and TF32 in 0.419 on
#: an H100, against 0.342 and 0.631 for the kernels below: docs/performance.md, "TMA copies").
#: Then 128 x 256 (4 stages of 48 KiB, one wgmma group in flight) and 128 x 128 (4 stages of 32 KiB,
#: none), K tiles of 128 bytes; then the warp-specialized ones (384 threads, a producer
#: warpgroup and mbarriers, :func:`polyopt.codegen.cuda_wgmma._specialized`): 128 x 256 in
#: 4 stages, 128 x 128 in 6; last 128 x 128 in 3 stages of 32 KiB built for two blocks per SM
#: (one block's epilogue under the other's products). On an H100, f16 4096^3 with every variant
#: forced: 0.38, 0.45, 0.49, 0.66 and 0.43 ms in this order (TF32 alike): the last three are
#: taken only where forced (docs/performance.md, "Contractions").
WGMMA_VARIANTS = {
    "hmma": (Variant("hmma", 128, 256, 64, 384, stages=4, wgmma=True, inflight=1, specialized=True, blocks_per_sm=1,
                     tma=True),
             Variant("hmma", 128, 128, 64, 384, stages=4, wgmma=True, inflight=1, specialized=True, blocks_per_sm=1,
                     tma=True),
             Variant("hmma", 128, 256, 64, 256, stages=4, wgmma=True, inflight=1),
             Variant("hmma", 128, 128, 64, 256, stages=4, wgmma=True),
             Variant("hmma", 128, 256, 64, 384, stages=4, wgmma=True, inflight=1, specialized=True, blocks_per_sm=1),
             Variant("hmma", 128, 128, 64, 384, stages=6, wgmma=True, inflight=1, specialized=True, blocks_per_sm=1),
             Variant("hmma", 128, 128, 64, 256, stages=3, wgmma=True, blocks_per_sm=2),
             NARROW_WGMMA_VARIANT),
    "tf32": (Variant("tf32", 128, 256, 32, 384, stages=4, wgmma=True, inflight=1, specialized=True, blocks_per_sm=1,
                     tma=True),
             Variant("tf32", 128, 128, 32, 384, stages=4, wgmma=True, inflight=1, specialized=True, blocks_per_sm=1,
                     tma=True),
             Variant("tf32", 128, 256, 32, 256, stages=4, wgmma=True, inflight=1),
             Variant("tf32", 128, 128, 32, 256, stages=4, wgmma=True),
             Variant("tf32", 128, 256, 32, 384, stages=4, wgmma=True, inflight=1, specialized=True, blocks_per_sm=1),
             Variant("tf32", 128, 128, 32, 384, stages=6, wgmma=True, inflight=1, specialized=True, blocks_per_sm=1),
             Variant("tf32", 128, 128, 32, 256, stages=3, wgmma=True, blocks_per_sm=2)),
}
#: A launch on sm_90a takes the ``wgmma`` kernels where the contraction sums over at least
#: ``WGMMA_MIN_K`` terms (a shorter K leaves their 4-stage ring nothing to overlap) and its
#: 128 x 128 tiles fill every SM at least once (:func:`polyopt.targets.contraction.choose_kernel`).
#: Measured on an H100 with every kernel forced (docs/performance.md, "Contractions"): f16 and
#: TF32 ``wgmma`` were faster on every case meeting both (2048^3 f16 0.060 against 0.105 ms,
#: 1x1 convolution TF32 0.038 against 0.051 ms) and slower on the three that miss one (K = 64;
#: 1024^3 and 2048 x 1024 x 256, 64 and 128 tiles). A shorter sum of halves takes the
#: persistent TMA kernels that stage their output, where TMA may run (``choose_kernel``).
WGMMA_MIN_K = 256
#: The least share of useful coordinates in 128 x 128 tiles for the ``wgmma`` kernels (tiles of
#: 128 x 128 and more): measured on an H100 with every kernel forced (docs/performance.md,
#: "Half results"), f16 ``bhqk,bhkd->bhqd`` (N = 64: half of each tile idle) took 0.074-0.082 ms
#: on the TMA kernels against 0.049 ms on the 128 x 64 ``mma.sync`` one; an N of 64 or less
#: now takes :data:`NARROW_WGMMA_VARIANT`, its tiles counted 128 x 64.
WGMMA_MIN_SHARE = 0.75

#: Tile shapes by engine and element type: the large one first, then smaller ones (fewer rows,
#: fewer columns, both): a launch takes the one that wastes least of its tiles and keeps
#: the SMs busy (:func:`polyopt.targets.contraction.choose_kernel`). The tensor-core engines
#: list their ``cp.async`` kernels (for operands in whole 16-byte vectors) and then the
#: register-staged ones (for the others). Chosen on an H100 against the alternatives
#: (docs/performance.md, "Contractions"). The f32 SIMT tiles are 64 x 128 and 128 x 64 with
#: K tiles of 16 on 128 threads (8 x 8 coordinates a thread): on an H200 with every shape
#: forced they beat 128 x 128 x 8 on 256 threads, 256 x 128 and 64 x 64 on five of the six
#: contractions of issue 17 (docs/performance.md, "f32 exact"); :func:`tile_variants` bounds
#: their registers where the sums start from the output. The narrow tile, taken where N is
#: short (attention's ``bhqk,bhkd->bhqd``, N = 64), is built for two blocks per SM, which ran
#: faster than unbound (the wide tile ran best unbound). Then the wide tile splitting K over
#: clusters of 2 and 4 blocks, for grids of fewer tiles than SMs (clusters of 3 ran slower but
#: on one shape). The measurements: docs/performance.md, "f32 exact".
VARIANTS = {
    ("simt", "f32"): (Variant("simt", 64, 128, 16, 128, tm=8, tn=8),
                      Variant("simt", 128, 64, 16, 128, tm=8, tn=8, blocks_per_sm=2),
                      *(Variant("simt", 64, 128, 16, 128, tm=8, tn=8, split_k=s) for s in (2, 4))),
    ("tf32", "f32"): (Variant("tf32", 128, 128, 16, 128, warps_m=2, warps_n=2, stages=4),
                      Variant("tf32", 64, 128, 16, 128, warps_m=2, warps_n=2, stages=4),
                      Variant("tf32", 128, 64, 16, 128, warps_m=2, warps_n=2, stages=4),
                      Variant("tf32", 64, 64, 16, 128, warps_m=2, warps_n=2, stages=4),
                      Variant("tf32", 64, 128, 16, 128, warps_m=2, warps_n=2),
                      Variant("tf32", 64, 64, 16, 128, warps_m=2, warps_n=2),
                      Variant("tf32", 128, 64, 16, 128, warps_m=2, warps_n=2),
                      *WGMMA_VARIANTS["tf32"]),
    **{("hmma", half): (Variant("hmma", 128, 128, 32, 128, warps_m=2, warps_n=2, stages=3),
                         Variant("hmma", 64, 128, 32, 128, warps_m=2, warps_n=2, stages=4),
                         Variant("hmma", 128, 64, 32, 128, warps_m=2, warps_n=2, stages=4),
                         Variant("hmma", 64, 64, 32, 128, warps_m=2, warps_n=2, stages=4),
                         Variant("hmma", 64, 128, 32, 128, warps_m=2, warps_n=2),
                         Variant("hmma", 64, 64, 32, 128, warps_m=2, warps_n=2),
                         Variant("hmma", 128, 64, 32, 128, warps_m=2, warps_n=2),
                         *WGMMA_VARIANTS["hmma"])
       for half in ("f16", "bf16")},
    ("dmma", "f64"): (Variant("dmma", 128, 128, 16, 256, warps_m=4, warps_n=2, stages=3),
                      Variant("dmma", 64, 128, 16, 128, warps_m=2, warps_n=2, stages=4),
                      Variant("dmma", 128, 64, 16, 128, warps_m=2, warps_n=2, stages=4),
                      Variant("dmma", 64, 64, 16, 128, warps_m=2, warps_n=2, stages=4),
                      Variant("dmma", 64, 64, 16, 128, warps_m=2, warps_n=2),
                      Variant("dmma", 32, 64, 16, 64, warps_m=1, warps_n=2),
                      Variant("dmma", 64, 32, 16, 64, warps_m=2, warps_n=1)),
}
#: The share of a large tile's speed the other shapes are assumed to reach (fewer coordinates
#: per block: more staging per product).
OTHER_TILE_SPEED = 0.9
#: Blocks per SM a grid needs to keep the SMs busy (two: while one block waits at a barrier,
#: the other computes).
MIN_BLOCKS_PER_SM = 2
#: K tiles each block of a K-splitting kernel (:attr:`Variant.split_k`) gets at least, so that
#: its sums outweigh adding the cluster's (a bound chosen, not measured: the shapes timed split
#: 32 K tiles a block or more).
MIN_SPLIT_TILES = 8


#: Blocks per SM the f32 SIMT kernels are built for where the sums start from the output
#: (:func:`~polyopt.codegen.contraction_text.reads_output`): reading PolyBench gemm's
#: ``beta * C`` into the 64 accumulators made nvcc give the 64 x 128 kernel 209 registers and
#: run 1.26x slower than when bound to two blocks per SM (a bound of three: 1.04x; on the
#: einsum kernels, whose sums start from zero, both bounds were slower than none, up to 1.11x:
#: docs/performance.md, "f32 exact").
SIMT_BLOCKS_READING_OUTPUT = 2


def tile_variants(engine: str, dtype_name: str, c: Contraction) -> tuple[Variant, ...]:
    """The tile shapes of :data:`VARIANTS` for a contraction ``c`` by ``engine`` of
    ``dtype_name`` operands, the SIMT ones bound to :data:`SIMT_BLOCKS_READING_OUTPUT` blocks
    per SM where the sums start from the output."""
    variants = VARIANTS[(engine, dtype_name)]
    if engine == "simt" and reads_output(c):
        return tuple(replace(v, blocks_per_sm=SIMT_BLOCKS_READING_OUTPUT) for v in variants)
    return variants


def engine_for(dtype_name: str, precision: str, operand_name: str | None = None) -> str | None:
    """The engine for a contraction of ``operand_name`` elements (default: ``dtype_name``) into
    ``dtype_name`` elements in ``precision``, None where no contraction kernel computes it
    (integers, complex parts, mixed types but half operands into f32)."""
    if operand_name in ("f16", "bf16"):
        return "hmma" if dtype_name == "f32" else None
    if operand_name not in (None, dtype_name):
        return None
    if dtype_name == "f64":
        return "dmma"
    if dtype_name == "f32":
        return "tf32" if precision == "tf32" else "simt"
    return None


#: The tensor maps of the left and right operand a TMA kernel takes after the others.
TMA_MAP_ARGUMENTS = ("_tmL", "_tmR")
#: The launch arguments after the kernel's own (size parameters, scalars, arrays), in order.
RUN_ARGUMENTS = ("_M", "_N", "_K", "_sLm", "_sLk", "_sRk", "_sRn", "_sCm", "_sCn", "_Z", "_KO")


def extra_arguments(slots: Slots) -> tuple[str, ...]:
    """Names of every launch argument after the kernel's own: the runs, then per batch slot
    its extent and strides in L, R and C, then per outer-K slot its extent and strides, per
    epilogue index its source, divisor and modulus; then per operand pair after the first its
    operand strides (:func:`~polyopt.codegen.contraction_text.pair_stride_names`)."""
    names = list(RUN_ARGUMENTS)
    for j in range(slots.batch):
        names += [f"_zE{j}", f"_zL{j}", f"_zR{j}", f"_zC{j}"]
    for j in range(slots.outer_k):
        names += [f"_kE{j}", f"_kL{j}", f"_kR{j}"]
    for j in range(slots.epilogue):
        names += [f"_xs{j}", f"_xd{j}", f"_xm{j}"]
    names += [pair_argument(name, pair) for pair in range(1, slots.pairs) for name in pair_stride_names(slots)]
    return tuple(names)


def operand_stride_positions(c: Contraction) -> list[int]:
    """Where the operands' strides that are not literal 1 in the code lie among the launch
    arguments after the kernel's own (:func:`extra_arguments` order): the run strides of L and
    R, and their strides in each batch and outer-K slot (what a ``cp.async`` row start depends
    on), of every operand pair."""
    unit, slots = UnitStrides.of(c), Slots.of(c)
    literal = {name for name, is_unit in zip(RUN_STRIDES, (unit.lm, unit.lk, unit.rk, unit.rn)) if is_unit}
    positions = [3 + d for d, name in enumerate(RUN_STRIDES) if name not in literal]
    positions += [len(RUN_ARGUMENTS) + 4 * j + d for j in range(slots.batch) for d in (1, 2)]
    positions += [len(RUN_ARGUMENTS) + 4 * slots.batch + 3 * j + d for j in range(slots.outer_k) for d in (1, 2)]
    names = extra_arguments(slots)
    positions += [names.index(pair_argument(name, pair)) for pair in range(1, slots.pairs)
                  for name in pair_stride_names(slots) if name not in literal]
    return positions


def contraction_source(scop: Scop, contractions: tuple[tuple[Contraction, tuple[tuple[str, Variant], ...]], ...],
                       host_function: str) -> str:
    """The CUDA translation unit of contractions' kernels -- per contraction of ``scop``, in
    program order, one kernel per (name, tile shape) (module docstring) -- and for nvcc builds
    the host function ``host_function`` launching them in that order. The helpers come once
    (the contractions of one unit have one operand element type)."""
    lines = [cuda_prelude(array.dtype for array in scop.arrays.values()), contraction_kernel_text(scop, contractions)]
    lines += _host_wrapper(scop, contractions, host_function)
    return "\n".join(lines) + "\n"


def contraction_kernel_text(scop: Scop, contractions: tuple[tuple[Contraction, tuple[tuple[str, Variant], ...]], ...]
                        ) -> str:
    """The device part of :func:`contraction_source`: the helpers the kernels use (once; the
    contractions have one operand element type) and the kernels, per contraction in order one
    per (name, tile shape); no prelude (:func:`~polyopt.codegen.cuda.cuda_prelude`, which has to
    come first) and no host function, so that it can follow another unit's kernels."""
    c = contractions[0][0]
    kernels = [kernel for _, own in contractions for kernel in own]
    lines = []
    if any(v.engine != "simt" for _, v in kernels):
        lines.append(_MMA_HELPERS)
    if any(v.engine == "hmma" for _, v in kernels):
        lines.append(_half_helpers(scop.arrays[c.left.array].dtype.name))
    if any(v.wgmma for _, v in kernels):
        lines.append(wgmma_helpers({v.engine for _, v in kernels if v.wgmma}, scop.arrays[c.left.array].dtype.name,
                                   {wgmma_shape(x, v) for x, own in contractions for _, v in own if v.wgmma}))
    for x, own in contractions:
        for name, variant in own:
            lines += _kernel(scop, x, name, variant)
    return "\n".join(lines)


#: The class of a K index in the host wrapper's table (C character literal).
K_CLASS = "'k'"


#: The host functions' helpers (C): the innermost run of indices, whether an index is a batch slot's.
_HOST_HELPERS = [
    "static long pl_run(const int *ix, int n, const long *ext, const long *s1, const long *s2, char *in_run)",
    "{ /* the innermost run of ix (outermost first): indices adjacent in memory in both arrays */",
    "  int q = ix[n - 1]; long size = ext[q]; in_run[q] = 1;",
    "  for (int j = n - 2; j >= 0; j--) {",
    "    const int p = ix[j];",
    "    if (s1[p] != ext[q] * s1[q] || s2[p] != ext[q] * s2[q]) break;",
    "    in_run[p] = 1; size *= ext[p]; q = p;",
    "  }",
    "  return size;",
    "}",
    "static int pl_in_batch(char cls, char in_m, char in_n)",
    "{ /* a batch slot's index: a batch index, or an M or N index outside its run */",
    "  return cls == 'b' || (cls == 'm' && !in_m) || (cls == 'n' && !in_n);",
    "}"]
#: The host functions' helper for contractions of several operand pairs: the run of ``pl_run``
#: over any number of arrays' strides (``s[0 .. ns)``).
_PAIRS_HOST_HELPERS = [
    "static long pl_run_all(const int *ix, int n, const long *ext, const long *const *s, int ns, char *in_run)",
    "{ /* the innermost run of ix (outermost first): indices adjacent in memory in every array */",
    "  int q = ix[n - 1]; long size = ext[q]; in_run[q] = 1;",
    "  for (int j = n - 2; j >= 0; j--) {",
    "    const int p = ix[j]; int adjacent = 1;",
    "    for (int a = 0; a < ns; a++) adjacent = adjacent && s[a][p] == ext[q] * s[a][q];",
    "    if (!adjacent) break;",
    "    in_run[p] = 1; size *= ext[p]; q = p;",
    "  }",
    "  return size;",
    "}"]


def _host_wrapper(scop: Scop, contractions: tuple[tuple[Contraction, tuple[tuple[str, Variant], ...]], ...],
                  name: str) -> list[str]:
    """``extern "C" void name(<the kernels' arguments>)`` for C and C++ callers (device
    pointers), outside NVRTC builds: for one contraction its launch (:func:`_host_launch`);
    for a program of them, one ``static`` launch function per contraction, called in order."""
    out = ["#ifndef __CUDACC_RTC__", *_HOST_HELPERS]
    if any(len(c.pairs) > 1 for c, _ in contractions):
        out += _PAIRS_HOST_HELPERS
    if len(contractions) == 1:
        (c, kernels), = contractions
        return out + _host_launch(scop, c, kernels, f'extern "C" void {name}') + ["#endif"]
    arguments = ", ".join(a.name for a in abi_arguments(scop))
    for k, (c, kernels) in enumerate(contractions):
        out += _host_launch(scop, c, kernels, f"static void {name}_c{k}")
    out += [f'extern "C" void {name}({", ".join(_host_parameters(scop))})', "{"]
    out += [f"  {name}_c{k}({arguments});" for k in range(len(contractions))]
    return out + ["}", "#endif"]


def _host_parameters(scop: Scop) -> list[str]:
    """The host functions' C parameters: the kernels' own, arrays as plain device pointers."""
    return [p.replace("const ", "").replace("*__restrict__ ", "*") for p in kernel_parameters(scop, set())]


def _host_launch(scop: Scop, c: Contraction, kernels: tuple[tuple[str, Variant], ...], head: str) -> list[str]:
    """The C function ``head(<the kernels' arguments>)`` launching contraction ``c``: the launch
    layout of :func:`polyopt.targets.contraction.launch_layout` written in C for the sizes of
    the call -- the runs, the batch and outer-K slots, the tile -- and the launch. Strides come
    from the arrays' declared shapes (C-contiguous)."""
    scop, c = _unclashed_params(scop, c)
    emit = CExpr(scop)
    update = scop.statement(c.update_statement)
    index = list(update.iterators)
    position = {i: k for k, i in enumerate(index)}

    def strides(operand_index: tuple[str, ...], array: str) -> str:
        shape = [emit(extent_expr(e, scop.params)) for e in scop.arrays[array].shape]
        by_index = {i: " * ".join(f"({x})" for x in shape[d + 1:]) or "1" for d, i in enumerate(operand_index)}
        return ", ".join(by_index.get(i, "0") for i in index)

    def positions(group) -> str:
        return ", ".join(str(position[i]) for i in group)

    classes = {**{i: "'b'" for i in c.batch}, **{i: "'m'" for i in c.m}, **{i: "'n'" for i in c.n}}
    slots = Slots.of(c)
    args = [a.name for a in abi_arguments(scop)] + [f"_a[{k}]" for k in range(len(extra_arguments(slots)))]
    if half_store(scop, c):
        args.append("0")  # (C callers pass the declared f32 output)
    n = len(index)
    out = [f"{head}({', '.join(_host_parameters(scop))})", "{",
           f"  const long ext[{n}] = {{{', '.join(emit(c.extent[i]) for i in index)}}};",
           f"  const long sL[{n}] = {{{strides(c.left.index, c.left.array)}}};",
           f"  const long sR[{n}] = {{{strides(c.right.index, c.right.array)}}};",
           f"  const long sC[{n}] = {{{strides(c.output_index, c.output)}}};",
           f"  const int out_ix[] = {{{positions(c.output_index)}}}, m_ix[] = {{{positions(c.m)}}}, "
           f"n_ix[] = {{{positions(c.n)}}}, k_ix[] = {{{positions(c.k)}}};",
           f"  const char cls[{n}] = {{{', '.join(classes.get(i, K_CLASS) for i in index)}}};",
           f"  char in_m[{n}] = {{0}}, in_n[{n}] = {{0}}, in_k[{n}] = {{0}};",
           *_host_runs(c, [[strides(o.index, o.array) for o in pair] for pair in c.more_pairs]),
           f"  long _a[{len(extra_arguments(slots))}] = {{M, N, K, sL[m_ix[{len(c.m) - 1}]], sL[k_ix[{len(c.k) - 1}]], "
           f"sR[k_ix[{len(c.k) - 1}]], sR[n_ix[{len(c.n) - 1}]], sC[m_ix[{len(c.m) - 1}]], sC[n_ix[{len(c.n) - 1}]], 1, 1}};",
           f"  int _na = {len(RUN_ARGUMENTS)};",
           "  /* batch slots: the output indices outside the M and N runs, in output order */",
           f"  for (int j = 0; j < {len(c.output_index)}; j++) {{",
           "    const int i = out_ix[j];",
           "    if (pl_in_batch(cls[i], in_m[i], in_n[i])) {",
           "      _a[9] *= ext[i]; _a[_na++] = ext[i]; _a[_na++] = sL[i]; _a[_na++] = sR[i]; _a[_na++] = sC[i];",
           "    }", "  }",
           f"  while (_na < {len(RUN_ARGUMENTS) + 4 * slots.batch}) {{ _a[_na++] = 1; _a[_na++] = 0; _a[_na++] = 0; _a[_na++] = 0; }}",
           "  /* outer-K slots: the K indices outside the K run, in loop order */",
           f"  for (int j = 0; j < {len(c.k)}; j++) {{",
           "    const int i = k_ix[j];",
           "    if (!in_k[i]) { _a[10] *= ext[i]; _a[_na++] = ext[i]; _a[_na++] = sL[i]; _a[_na++] = sR[i]; }",
           "  }",
           f"  while (_na < {len(RUN_ARGUMENTS) + 4 * slots.batch + 3 * slots.outer_k}) "
           "{ _a[_na++] = 1; _a[_na++] = 0; _a[_na++] = 0; }",
           "  /* per output index an epilogue reads: its coordinate, divisor, modulus */"]
    for i in epilogue_indices(c):
        p = position[i]
        out += [f"  if (in_m[{p}] || in_n[{p}]) {{",
                f"    const int *run = in_m[{p}] ? m_ix : n_ix; const char *in = in_m[{p}] ? in_m : in_n;",
                f"    const int nrun = in_m[{p}] ? {len(c.m)} : {len(c.n)}; long div = 1; int after = 0;",
                f"    for (int j = 0; j < nrun; j++) {{ if (after && in[run[j]]) div *= ext[run[j]]; if (run[j] == {p}) after = 1; }}",
                f"    _a[_na++] = in_m[{p}] ? 0 : 1; _a[_na++] = div; _a[_na++] = ext[{p}];",
                "  } else {",
                "    long div = 1; int after = 0;",
                f"    for (int j = 0; j < {len(c.output_index)}; j++) {{ const int i = out_ix[j];",
                "      if (after && pl_in_batch(cls[i], in_m[i], in_n[i])) div *= ext[i]; if (i == " + str(p) + ") after = 1; }",
                f"    _a[_na++] = 2; _a[_na++] = div; _a[_na++] = ext[{p}];",
                "  }"]
    out += _host_pair_arguments(c, slots)
    out += [
           "  if (M <= 0 || N <= 0 || _a[9] <= 0) return;",
           "  int device = 0, sms = 1;",
           "  cudaGetDevice(&device);",
           "  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);",
           "  const long gz = _a[9] < 65535 ? _a[9] : 65535;",
           "  /* the tile: useful share of the tiles times grid fill (choose_kernel) */",
           "  int pick = 0, first = 1; double best = -1.0;"]
    engine = kernels[0][1].engine
    if any(v.asynchronous for _, v in kernels):  # as async_aligned: operands and their strides in whole vectors
        per_vector = COPY_BYTES // OPERAND_BYTES[engine]
        tests = [f"(uintptr_t){o.array} % {COPY_BYTES} == 0" for pair in c.pairs for o in pair]
        tests += [f"_a[{p}] % {per_vector} == 0" for p in operand_stride_positions(c)]
        out.append(f"  const int aligned = {' && '.join(tests)};  /* take the cp.async kernels */")
    else:
        out.append("  const int aligned = 0;")
    for k, (_, v) in enumerate(kernels):
        if v.wgmma or v.split_k:  # (the host function launches the others: its build may not be sm_90a)
            continue
        out.append(f"  if ({'' if v.asynchronous else '!'}aligned) {{ const long bx = (N + {v.bn - 1}) / {v.bn}, by = (M + {v.bm - 1}) / {v.bm};"
                   f" const double fill = (double)(bx * by * _a[9]) / ({MIN_BLOCKS_PER_SM}.0 * sms);"
                   f" const double score = (double)M * N / ((double)bx * {v.bn} * by * {v.bm}) * (fill < 1.0 ? fill : 1.0)"
                   f" * (first ? 1.0 : {OTHER_TILE_SPEED}); first = 0;"
                   f" if (score > best) {{ best = score; pick = {k}; }} }}")
    out.append("  switch (pick) {")
    for k, (kernel, v) in enumerate(kernels):
        if v.wgmma or v.split_k:
            continue
        grid = (f"dim3((unsigned)((N + {v.bn - 1}) / {v.bn} < 2147483647L ? (N + {v.bn - 1}) / {v.bn} : 2147483647L), "
                f"(unsigned)((M + {v.bm - 1}) / {v.bm} < 65535 ? (M + {v.bm - 1}) / {v.bm} : 65535), (unsigned)gz)")
        shared = shared_bytes(c, v)
        opt_in = (f"cudaFuncSetAttribute({kernel}, cudaFuncAttributeMaxDynamicSharedMemorySize, {shared}); "
                  if shared else "")
        out.append(f"  case {k}: {opt_in}{kernel}<<<{grid}, dim3({v.threads}), {shared}>>>({', '.join(args)}); break;")
    out.append("  }")
    return out + ["}"]


def _host_runs(c: Contraction, pair_strides: list[list[str]]) -> list[str]:
    """The C declaring the M, N and K runs' sizes (and marking their indices in ``in_m``,
    ``in_n``, ``in_k``): indices adjacent in memory in the output and in the left operands
    (M), the right operands (N), every operand (K). ``pair_strides``: per operand pair after
    the first, its operands' strides per index (C initializers), declared as ``sP``."""
    if not pair_strides:
        return [f"  const long M = pl_run(m_ix, {len(c.m)}, ext, sL, sC, in_m), "
                f"N = pl_run(n_ix, {len(c.n)}, ext, sR, sC, in_n);",
                f"  const long K = pl_run(k_ix, {len(c.k)}, ext, sL, sR, in_k);"]
    n, pairs = len(c.extent), len(pair_strides)
    lefts = ", ".join(f"sP[{p}][0]" for p in range(pairs))
    rights = ", ".join(f"sP[{p}][1]" for p in range(pairs))
    return [f"  const long sP[{pairs}][2][{n}] = {{{', '.join(f'{{{{{l}}}, {{{r}}}}}' for l, r in pair_strides)}}};",
            f"  const long *const run_m[] = {{sL, {lefts}, sC}}, *const run_n[] = {{sR, {rights}, sC}};",
            f"  const long *const run_k[] = {{sL, sR, {lefts}, {rights}}};",
            f"  const long M = pl_run_all(m_ix, {len(c.m)}, ext, run_m, {pairs + 2}, in_m), "
            f"N = pl_run_all(n_ix, {len(c.n)}, ext, run_n, {pairs + 2}, in_n);",
            f"  const long K = pl_run_all(k_ix, {len(c.k)}, ext, run_k, {2 * pairs + 2}, in_k);"]


def _host_pair_arguments(c: Contraction, slots: Slots) -> list[str]:
    """The C appending the launch arguments of each operand pair after the first (``sP``,
    :func:`extra_arguments` order): its run strides, its strides in the batch slots and in the
    outer-K slots (the slots the first pair's arguments filled, in the same order)."""
    if not c.more_pairs:
        return []
    return ["  /* the operand pairs after the first: run strides, batch slots, outer-K slots */",
            f"  for (int p = 0; p < {len(c.more_pairs)}; p++) {{",
            "    const long *const l = sP[p][0], *const r = sP[p][1]; int nb = 0, nk = 0;",
            f"    _a[_na++] = l[m_ix[{len(c.m) - 1}]]; _a[_na++] = l[k_ix[{len(c.k) - 1}]]; "
            f"_a[_na++] = r[k_ix[{len(c.k) - 1}]]; _a[_na++] = r[n_ix[{len(c.n) - 1}]];",
            f"    for (int j = 0; j < {len(c.output_index)}; j++) {{",
            "      const int i = out_ix[j];",
            "      if (pl_in_batch(cls[i], in_m[i], in_n[i])) { _a[_na++] = l[i]; _a[_na++] = r[i]; nb++; }",
            "    }",
            f"    for (; nb < {slots.batch}; nb++) {{ _a[_na++] = 0; _a[_na++] = 0; }}",
            f"    for (int j = 0; j < {len(c.k)}; j++) {{",
            "      const int i = k_ix[j];",
            "      if (!in_k[i]) { _a[_na++] = l[i]; _a[_na++] = r[i]; nk++; }",
            "    }",
            f"    for (; nk < {slots.outer_k}; nk++) {{ _a[_na++] = 0; _a[_na++] = 0; }}",
            "  }"]


#: The names :func:`_host_launch` declares in its function's outermost block.
HOST_LOCALS = frozenset({"ext", "sL", "sR", "sC", "sP", "run_m", "run_n", "run_k",
                         "out_ix", "m_ix", "n_ix", "k_ix", "cls", "in_m", "in_n", "in_k",
                         "M", "N", "K", "_a", "_na", "device", "sms", "gz", "pick", "first", "best", "aligned"})


def _unclashed_params(scop: Scop, c: Contraction) -> tuple[Scop, Contraction]:
    """``scop`` and ``c`` with each size parameter named as one of :data:`HOST_LOCALS`
    (PolyBench's ``M`` and ``N``) renamed with a leading ``_p`` in the arrays' shapes and the
    extents, for the host function (its parameters' names are no part of its C interface);
    as they are where none is."""
    clash = [p for p in scop.params if p in HOST_LOCALS]
    if not clash:
        return scop, c
    taken = set(scop.params) | set(scop.arrays) | {a.name for a in scop.arguments} | HOST_LOCALS
    rename = {}
    for p in clash:
        new = "_p" + p
        while new in taken:
            new = "_" + new
        rename[p] = new
        taken.add(new)
    word = re.compile(r"\b(" + "|".join(map(re.escape, clash)) + r")\b")
    arrays = {name: replace(a, shape=tuple(word.sub(lambda m: rename[m.group(1)], e) for e in a.shape))
              for name, a in scop.arrays.items()}
    arguments = tuple(replace(a, name=rename.get(a.name, a.name)) if a.kind == "param" else a for a in scop.arguments)
    extent = {i: E.substitute(e, lambda x: E.Var(rename[x.name], "param", x.dtype)
                              if isinstance(x, E.Var) and x.kind == "param" and x.name in rename else None)
              for i, e in c.extent.items()}
    return (replace(scop, params=tuple(rename.get(p, p) for p in scop.params), arrays=arrays, arguments=arguments),
            replace(c, extent=extent))


def _kernel(scop: Scop, c: Contraction, name: str, variant: Variant) -> list[str]:
    t = c_type_name(scop.arrays[c.output].dtype)
    if variant.wgmma:
        body = wgmma_body(scop, c, variant, t, OPERAND_BYTES[variant.engine])
    else:
        if variant.asynchronous:
            per_vector = COPY_BYTES // OPERAND_BYTES[variant.engine]
            if staged_tiles(c, variant) is None or any(rows * variant.bk % (per_vector * variant.threads)
                                                       for rows in (variant.bm, variant.bn)):
                raise ValueError(f"contraction tile {variant}: needs operands with a contiguous run and "
                                 "whole vectors of each tile per thread")
        elif variant.threads % variant.bk or variant.threads % variant.bm or variant.threads % variant.bn:
            raise ValueError(f"contraction tile {variant}: the threads must be a multiple of BM, BN and BK")
        body = (_simt_body if variant.engine == "simt" else _mma_body)(scop, c, variant, t)
    slots = Slots.of(c)
    params = kernel_parameters(scop, {c.output}) + [f"long {a}" for a in extra_arguments(slots)]
    if half_store(scop, c):
        params.append(f"long {HALF_STORE_ARGUMENT}")
    if variant.tma:
        params += [f"const void *{name}" for name in TMA_MAP_ARGUMENTS]
    bounds = f"__launch_bounds__({variant.threads}{f', {variant.blocks_per_sm}' if variant.blocks_per_sm else ''})"
    body = _prologue(c, slots, UnitStrides.of(c)) + body
    if not variant.split_k:
        return [f'extern "C" __global__ void {bounds} {name}(', "    " + ",\n    ".join(params) + ")", "{", *body, "}"]
    if variant.engine != "simt":
        raise ValueError(f"contraction tile {variant}: only the SIMT kernels split K over a cluster")
    # clusters are sm_90's: other builds have the kernel, empty (the launch never takes it there)
    return [f'extern "C" __global__ void {bounds}', "#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900",
            f"__cluster_dims__({variant.split_k}, 1, 1)", "#endif",
            f"{name}(", "    " + ",\n    ".join(params) + ")", "{", "#if __CUDA_ARCH__ >= 900", *body, "#endif", "}"]


def _prologue(c: Contraction, slots: Slots, unit: UnitStrides) -> list[str]:
    out = ["  /* " + c.describe() + " */"]
    for stride, is_unit in (("sLm", unit.lm), ("sLk", unit.lk), ("sRk", unit.rk), ("sRn", unit.rn),
                            ("sCm", unit.cm), ("sCn", unit.cn)):
        out.append(f"  const long {stride} = {'1' if is_unit else '_' + stride};")
    return out


def _tile_loads(pair: tuple[Operand, Operand], scop: Scop, v: Variant, t: str, unit: UnitStrides,
                k_major_store: bool) -> tuple[list[str], list[str], list[str], list[str]]:
    """Global -> registers (``_ga``/``_gb``) for the K tile at ``_nk0`` of operand pair ``pair``
    (left, right) and registers -> shared buffer half ``_st``: (declarations, the pair's setup
    before its K loop, loads, stores). Each thread's elements of a tile are at fixed positions
    (``_ra + q * step`` rows or ``_ka + q * step`` K values), consecutive threads along the
    array's contiguous dimension. A tile wholly inside the operand is loaded from one address
    per thread with a uniform step and no bound checks (the checked form spent most of the K
    loop's non-FMA instructions); the checked loads remain for the edge tiles.
    ``k_major_store``: shared tiles are ``[BK][BM+PAD]`` (the SIMT kernels), else
    ``[BM][BK+4]`` (tensor cores). The SIMT kernels' setup also fixes, once per block, each
    thread's first element at K = 0 (``_ta``/``_tb``), its step and whether the block's rows lie
    inside the operand (about 20 fewer instructions per K tile in the SASS); the register-staged
    tensor-core kernels find them per tile: their 128 x 64 f16 kernel has no register to spare
    (254 of 255; held across the loop, these spilled 68-152 bytes)."""
    decl, setup, loads, stores = [], [], [], []
    for name, rows, operand, s_row, s_k, run_unit, k_unit, off, koff, total, buf, row0 in (
            ("a", v.bm, pair[0], "sLm", "sLk", unit.lm, unit.lk, "_offL", "_nkL", "_M", "_As", "_m0"),
            ("b", v.bn, pair[1], "sRn", "sRk", unit.rn, unit.rk, "_offR", "_nkR", "_N", "_Bs", "_n0")):
        count = rows * v.bk // v.threads
        walk_rows = run_unit and not k_unit  # consecutive threads along the contiguous dimension
        if walk_rows:
            decl.append(f"    const int _r{name} = threadIdx.x % {rows}, _k{name} = threadIdx.x / {rows};")
            r, kk = f"_r{name}", f"(_k{name} + _q * {v.threads // rows})"
        else:
            decl.append(f"    const int _r{name} = threadIdx.x / {v.bk}, _k{name} = threadIdx.x % {v.bk};")
            r, kk = f"(_r{name} + _q * {v.threads // v.bk})", f"_k{name}"
        step = f"{v.threads // rows} * {s_k}" if walk_rows else f"{v.threads // v.bk} * {s_row}"
        decl.append(f"    {t} _g{name}[{count}];")
        pointer, origin = f"_p{name}", f"{operand.array} + {off} + {koff} + {row0} * {s_row} + _nk0 * {s_k}"
        value = _staged_value(scop, v, operand, f"{pointer}[(long){r} * {s_row} + (long){kk} * {s_k}]")
        checked = [f"      #pragma unroll\n      for (int _q = 0; _q < {count}; _q++) {{",
                   f"        _g{name}[_q] = ({row0} + {r} < {total} && _nk0 + {kk} < _K) ? {value} : ({t})0;",
                   "      }"]
        if k_major_store:
            first, inside, stride = f"_t{name}", f"_w{name}", f"_d{name}"
            setup += [f"      const {t} *__restrict__ const {first} = {operand.array} + {off} + ({row0} + _r{name}) * "
                      f"{s_row} + (long)_k{name} * {s_k};",
                      f"      const bool {inside} = {row0} + {rows} <= {total};",
                      f"      const long {stride} = {step};"]
            loads += [f"      if ({inside} && _nk0 + {v.bk} <= _K) {{",
                      f"        const {t} *__restrict__ const {pointer} = {first} + {koff} + _nk0 * {s_k};",
                      f"        #pragma unroll\n        for (int _q = 0; _q < {count}; _q++) "
                      f"_g{name}[_q] = {_staged_value(scop, v, operand, f'{pointer}[_q * {stride}]')};",
                      f"      }} else {{ const {t} *__restrict__ {pointer} = {origin};", *checked, "      }"]
        else:
            first = f"{pointer}_0"
            loads += [f"      {{ const {t} *__restrict__ {pointer} = {origin};",
                      f"      if ({row0} + {rows} <= {total} && _nk0 + {v.bk} <= _K) {{",
                      f"        const {t} *__restrict__ {first} = {pointer} + (long)_r{name} * {s_row} + "
                      f"(long)_k{name} * {s_k};",
                      f"        #pragma unroll\n        for (int _q = 0; _q < {count}; _q++) "
                      f"_g{name}[_q] = {_staged_value(scop, v, operand, f'{first}[(long)_q * ({step})]')};",
                      "      } else {", *checked, "      } }"]
        stores.append(f"      #pragma unroll\n      for (int _q = 0; _q < {count}; _q++)")
        target = f"{buf}[_st][{kk}][{r}]" if k_major_store else f"{buf}[_st][{r}][{kk}]"
        value = f"_g{name}[_q]" if v.engine != "tf32" else f"pl_tf32(_g{name}[_q])"
        stores.append(f"        {target} = {value};")
    return decl, setup, loads, stores


def _staged_value(scop: Scop, v: Variant, operand: Operand, element: str) -> str:
    """The value staged for ``element`` of ``operand``: the operand's expression on it (halves
    as they are: the ``hmma`` fragments take the array's elements)."""
    return element if v.engine == "hmma" else scalar_text(scop, operand.value, element)


def _pipeline(setup: list[str], loads: list[str], stores: list[str], compute, slots: Slots,
              split_k: int = 0) -> list[str]:
    """The double-buffered K loop over the tiles of the K run (for each outer-K number), after
    ``setup`` (:func:`_tile_loads`): tile 0 to shared; then per tile, the next tile's loads into
    registers, the current tile's compute (``compute(guarded)``: with a bound check on each K
    step for a partial last tile), the next tile's stores into the other half. ``_nk0``/``_nko``
    follow the tile being loaded. ``split_k``: the block (cluster rank ``_rank``) takes its
    share of the tiles, in order, starting wherever in the K run and outer-K numbers its share
    does (:attr:`Variant.split_k`)."""
    if split_k:
        out = ["      const long _NTK = (_K + BK - 1) / BK, _NT0 = _NTK * _KO, _kt0 = _NT0 * _rank / "
               f"{split_k};",
               f"      const long _NT = _NT0 * (_rank + 1) / {split_k} - _kt0;",
               "      long _nk0 = _kt0 % _NTK * BK, _nko = _kt0 / _NTK;"]
    else:
        out = ["      const long _NT = (_K + BK - 1) / BK * _KO;",
               "      long _nk0 = 0, _nko = 0;"]
    out += [
           "      long _nkL = 0, _nkR = 0;" if slots.outer_k else "      const long _nkL = 0, _nkR = 0;",
           "      int _st = 0;"]
    if split_k and slots.outer_k:
        out += outer_k_offsets(slots)
    out += setup
    out += loads + stores
    out += ["      __syncthreads();",
            "      for (long _tile = 0; _tile < _NT; _tile++) {",
            "        const int _cur = _st;",
            "        const int _kn = (int)(_K - _nk0 < BK ? _K - _nk0 : BK);",
            "        _nk0 += BK;",
            "        if (_nk0 >= _K) {", "          _nk0 = 0; _nko += 1;"]
    if slots.outer_k:
        out += outer_k_offsets(slots)
    out += ["        }", "        if (_tile + 1 < _NT) {"] + loads + ["        }",
            "        if (_kn == BK) {"] + compute(False) + ["        } else {"] + compute(True) + ["        }",
            "        if (_tile + 1 < _NT) {", "          _st ^= 1;"]
    out += stores + ["        }", "        __syncthreads();", "      }"]
    return out


def _simt_body(scop: Scop, c: Contraction, v: Variant, t: str) -> list[str]:
    vec = 16 // scop.arrays[c.output].dtype.numpy.itemsize  # coordinates per shared-memory vector
    tx = v.bn // v.tn
    slots, unit = Slots.of(c), UnitStrides.of(c)
    decl = _tile_loads(c.pairs[0], scop, v, t, unit, k_major_store=True)[0]  # the same for every pair
    split = v.split_k
    out = [f"  enum {{ BM = {v.bm}, BN = {v.bn}, BK = {v.bk}, TM = {v.tm}, TN = {v.tn}, PAD = {vec} }};"]
    if split:  # the tiles' buffers hold the block's sums once its K loop is done
        out += [f"  __shared__ __align__(16) union {{ struct {{ {t} a[2][BK][BM + PAD]; {t} b[2][BK][BN + PAD]; }}"
                f" tiles; {t} sums[TM * TN][{v.threads}]; }} _sm;",
                f"  {t} (&_As)[2][BK][BM + PAD] = _sm.tiles.a;",
                f"  {t} (&_Bs)[2][BK][BN + PAD] = _sm.tiles.b;",
                f"  const unsigned _rank = blockIdx.x % {split};  /* in the cluster */"]
    else:
        out += ["  __shared__ __align__(16) " + t + " _As[2][BK][BM + PAD];",
                "  __shared__ __align__(16) " + t + " _Bs[2][BK][BN + PAD];"]
    out += [f"  const int _tx = threadIdx.x % {tx}, _ty = threadIdx.x / {tx};"]
    out += grid_loops(c, slots, t, split)
    out += decl
    # a thread's rows: two runs of TM/2 adjacent ones, half a tile apart (vector reads, no conflicts)
    out += [f"      {t} _acc[TM][TN];",
            "      #pragma unroll", "      for (int _i = 0; _i < TM; _i++) {",
            "        #pragma unroll", "        for (int _j = 0; _j < TN; _j++) {",
            f"          const long _m = _m0 + (_i % {v.tm // 2}) + _ty * {v.tm // 2} + (_i / {v.tm // 2}) * (BM / 2);",
            f"          const long _n = _n0 + (_j % {v.tn // 2}) + _tx * {v.tn // 2} + (_j / {v.tn // 2}) * (BN / 2);",
            f"          _acc[_i][_j] = ({'_rank == 0 && ' if split else ''}_m < _M && _n < _N{element_test(c)}) ? "
            f"{init_text(scop, c, f'{c.output}[_offC + _m * sCm + _n * sCn]')} : ({t})0;",
            "        }", "      }"]
    def compute(guarded: bool) -> list[str]:
        return ["          #pragma unroll", "          for (int _kk = 0; _kk < BK; _kk++) {",
                "            if (_kk < _kn) {" if guarded else "            {",
                f"              {t} _a[TM], _b[TN];",
                "              #pragma unroll",
                f"              for (int _i = 0; _i < TM; _i++) _a[_i] = _As[_cur][_kk][(_i % {v.tm // 2}) + _ty * {v.tm // 2} + (_i / {v.tm // 2}) * (BM / 2)];",
                "              #pragma unroll",
                f"              for (int _j = 0; _j < TN; _j++) _b[_j] = _Bs[_cur][_kk][(_j % {v.tn // 2}) + _tx * {v.tn // 2} + (_j / {v.tn // 2}) * (BN / 2)];",
                "              #pragma unroll", "              for (int _i = 0; _i < TM; _i++)",
                "                #pragma unroll", "                for (int _j = 0; _j < TN; _j++)",
                "                  _acc[_i][_j] = _acc[_i][_j] + _a[_i] * _b[_j];",
                "            }", "          }"]
    def k_loop(pair: tuple[Operand, Operand]) -> list[str]:
        return _pipeline(*_tile_loads(pair, scop, v, t, unit, k_major_store=True)[1:], compute, slots, split)
    out += pair_k_loops(c, k_loop)
    if split:  # the first block of the cluster adds the others' sums and stores
        out += _cluster_sums(t, v.threads, split) + ["      if (_rank == 0) {"]
    out += ["      #pragma unroll", "      for (int _i = 0; _i < TM; _i++) {",
            "        #pragma unroll", "        for (int _j = 0; _j < TN; _j++) {",
            f"          const long _m = _m0 + (_i % {v.tm // 2}) + _ty * {v.tm // 2} + (_i / {v.tm // 2}) * (BM / 2);",
            f"          const long _n = _n0 + (_j % {v.tn // 2}) + _tx * {v.tn // 2} + (_j / {v.tn // 2}) * (BN / 2);",
            f"          if (_m < _M && _n < _N{element_test(c)}) {{",
            *element_store(scop, c, "_acc[_i][_j]", t), "          }",
            "        }", "      }"]
    out += ["      }"] if split else []
    return out + ["    }", "    }", "  }"]


#: Synchronizes the blocks of a cluster, their shared-memory writes seen by the others (sm_90).
_CLUSTER_BARRIER = ('      asm volatile("barrier.cluster.arrive.release.aligned;\\n\\t'
                    'barrier.cluster.wait.acquire.aligned;" ::: "memory");')


def _cluster_sums(t: str, threads: int, split_k: int) -> list[str]:
    """The K split's sums added (:attr:`Variant.split_k`): each block after the first puts its
    accumulators into its shared memory (``_sm.sums``, a thread's values ``threads`` apart), the
    first block reads them through the cluster's shared memory (``mapa``) and adds them to its
    own in rank order -- the same order every run; the second barrier keeps the others' memory
    alive (and their tiles unwritten) until it has."""
    return ["      if (_rank != 0) {",
            "        #pragma unroll", "        for (int _q = 0; _q < TM * TN; _q++) "
            "_sm.sums[_q][threadIdx.x] = _acc[_q / TN][_q % TN];",
            "      }",
            _CLUSTER_BARRIER,
            "      if (_rank == 0) {",
            f"        for (unsigned _r = 1; _r < {split_k}; _r++) {{",
            "          unsigned long long _peer;",
            '          asm volatile("mapa.u64 %0, %1, %2;" : "=l"(_peer) : "l"(&_sm.sums[0][threadIdx.x]), "r"(_r));',
            f"          const {t} *const _theirs = (const {t} *)_peer;",
            "          #pragma unroll", "          for (int _q = 0; _q < TM * TN; _q++) "
            f"_acc[_q / TN][_q % TN] += _theirs[_q * {threads}];",
            "        }", "      }",
            _CLUSTER_BARRIER]


#: Per engine: MMA shape (m, n, k). Both are ``m16n8kK`` with the same fragment layout (lane
#: ``4 * g + t``): A value ``q`` at row ``g + 8 * (q % 2)``, K ``t + 4 * (q // 2)``; B value
#: ``q`` at K ``t + 4 * q``, column ``g``; accumulator ``r`` at row ``g + 8 * (r // 2)``,
#: column ``2 * t + r % 2``. f64 runs ``m16n8k16`` (sm_90; on older GPUs as eight ``m8n8k4``
#: over the same registers, see ``pl_mma_f64``).
_MMA = {"tf32": (16, 8, 8), "dmma": (16, 8, 16), "hmma": (16, 8, 16)}
#: Bytes one ``cp.async`` copies (a 16-byte vector: the rows it reads must start 16-byte aligned).
COPY_BYTES = 16
#: Per engine, the row stride (elements) of a shared buffer whose rows are K values is
#: ``residue`` modulo ``modulus``, and so is the stride of one whose rows are M or N values:
#: the lanes of a fragment load then hit distinct banks (tf32: lane (g, t) reads row g, column
#: t of 32-bit words; dmma: each half warp reads 4 x 4 doubles; hmma: lane (g, t) reads the
#: word of K pair t of row g, or from a buffer of K rows one half of rows 2t and 2t + 1).
_K_MAJOR_STRIDE = {"tf32": (8, 4), "dmma": (8, 4), "hmma": (16, 8)}
_ROW_MAJOR_STRIDE = {"tf32": (16, 8), "dmma": (8, 4), "hmma": (32, 8)}


@dataclass(frozen=True)
class StagedTile:
    """How an asynchronous kernel holds one operand's K tile in shared memory: ``k_major``
    (rows of the operand, K contiguous: ``[rows][stride]``, the operand's K run has stride 1)
    or not (``[BK][stride]``, its M or N run has stride 1); ``elements`` per stage."""

    k_major: bool
    stride: int
    elements: int


def staged_tiles(c: Contraction, v: Variant) -> tuple[StagedTile, StagedTile] | None:
    """The shared-memory layout of the left and right operand's tiles in the asynchronous
    kernel ``v``, None where an operand has neither its K run nor its M/N run contiguous (it
    cannot be copied in 16-byte vectors)."""
    unit = UnitStrides.of(c)
    tiles = []
    for rows, k_unit, run_unit in ((v.bm, unit.lk, unit.lm), (v.bn, unit.rk, unit.rn)):
        if not (k_unit or run_unit):
            return None
        modulus, residue = (_K_MAJOR_STRIDE if k_unit else _ROW_MAJOR_STRIDE)[v.engine]
        width = v.bk if k_unit else rows
        stride = width + (residue - width) % modulus
        tiles.append(StagedTile(k_unit, stride, (rows if k_unit else v.bk) * stride))
    return tiles[0], tiles[1]


def shared_bytes(c: Contraction, v: Variant) -> int:
    """Dynamic shared memory of the asynchronous kernel ``v`` (0 for register-staged ones)."""
    if v.wgmma:
        return wgmma_shared_bytes(v)
    tiles = staged_tiles(c, v) if v.asynchronous else None
    return 0 if tiles is None else v.stages * (tiles[0].elements + tiles[1].elements) * OPERAND_BYTES[v.engine]


def _mma_body(scop: Scop, c: Contraction, v: Variant, t: str) -> list[str]:
    """The tensor-core kernel body: accumulators in the MMA's fragment layout, the K loop
    (:func:`_pipeline` through registers, or :func:`_async_pipeline` with ``cp.async``), the
    stores."""
    fm, fn, fk = _MMA[v.engine]
    wtm, wtn = v.bm // v.warps_m, v.bn // v.warps_n  # a warp's tile
    im, jn = wtm // fm, wtn // fn  # MMA tiles per warp tile
    per_c, per_a, per_b = 4, fk // 2, fk // 4  # accumulator, A and B registers per lane
    if v.engine == "hmma":  # registers of two halves
        per_a, per_b = per_a // 2, per_b // 2
    op_t = c_type_name(scop.arrays[c.left.array].dtype)  # the operands' element type
    slots = Slots.of(c)
    out = [f"  enum {{ BM = {v.bm}, BN = {v.bn}, BK = {v.bk} }};"]
    if v.asynchronous:
        tiles = staged_tiles(c, v)
        out += ["  extern __shared__ __align__(16) unsigned char _smem[];",
                f"  {op_t} *const _As = ({op_t} *)_smem, *const _Bs = _As + {v.stages * tiles[0].elements};"]
    else:
        out += [f"  __shared__ __align__(16) {op_t} _As[2][BM][BK + 4];",
                f"  __shared__ __align__(16) {op_t} _Bs[2][BN][BK + 4];"]
    out += ["  const int _lane = threadIdx.x % 32, _warp = threadIdx.x / 32;",
            "  const int _g = _lane / 4, _tg = _lane % 4;",
            f"  const int _wm = (_warp / {v.warps_n}) * {wtm}, _wn = (_warp % {v.warps_n}) * {wtn};"]
    out += grid_loops(c, slots, t)
    # accumulator element (i, j, r): row/column of the output tile
    row = f"_wm + _i * {fm} + _g + (_r / 2) * 8"
    col = f"_wn + _j * {fn} + _tg * 2 + (_r % 2)"
    acc_t = "double" if v.engine == "dmma" else "float"
    out += [f"      {acc_t} _acc[{im}][{jn}][{per_c}];",
            f"      #pragma unroll\n      for (int _i = 0; _i < {im}; _i++)",
            f"        #pragma unroll\n        for (int _j = 0; _j < {jn}; _j++)",
            f"          #pragma unroll\n          for (int _r = 0; _r < {per_c}; _r++) {{",
            f"            const long _m = _m0 + {row}, _n = _n0 + {col};",
            f"            _acc[_i][_j][_r] = (_m < _M && _n < _N{element_test(c)}) ? "
            f"{init_text(scop, c, f'{c.output}[_offC + _m * sCm + _n * sCn]')} : ({acc_t})0;",
            "          }"]
    # the K tile in MMA steps; a partial last tile was padded with zeros by the loads
    def compute(pair: tuple[Operand, Operand], guarded: bool) -> list[str]:
        frag = _fragments(scop, pair, v, tiles if v.asynchronous else None, op_t, im, jn, per_a, per_b)
        return [f"          #pragma unroll\n          for (int _kk = 0; _kk < BK; _kk += {fk}) {{",
                "            if (_kk < _kn) {" if guarded else "            {"] + frag + ["            }", "          }"]

    def k_loop(pair: tuple[Operand, Operand]) -> list[str]:
        if v.asynchronous:
            return _async_pipeline(pair, v, tiles, compute(pair, False), slots)
        return _pipeline(*_tile_loads(pair, scop, v, op_t, unit, k_major_store=False)[1:],
                         lambda guarded: compute(pair, guarded), slots)
    unit = UnitStrides.of(c)
    if not v.asynchronous:  # the staging registers, the same for every pair
        out += _tile_loads(c.pairs[0], scop, v, op_t, unit, k_major_store=False)[0]
    out += pair_k_loops(c, k_loop)
    stores = [f"      #pragma unroll\n      for (int _i = 0; _i < {im}; _i++)",
              f"        #pragma unroll\n        for (int _j = 0; _j < {jn}; _j++)",
              *fragment_stores(scop, c, row, col, "_acc[_i][_j][_r]", t)]
    staged = _staged_tiles(scop, c, v)
    if staged:
        opening, fragments = [], [f"        #pragma unroll\n        for (int _i = 0; _i < {im}; _i++)",
                                  f"          #pragma unroll\n          for (int _j = 0; _j < {jn}; _j++)",
                                  "            #pragma unroll\n            for (int _r0 = 0; _r0 < 4; _r0 += 2) {"]
        for k, kind in enumerate(staged):
            opening += staged_stores(scop, c, fragments, row, col, "_acc[_i][_j][_r]", t, "_smem", v.bn,
                                     StagingScope.block(v.threads, v.bm), kind, alternative=k > 0,
                                     whole=not c.epilogue)
        stores = opening + ["      } else {"] + stores + ["      }"]
    return out + stores + ["    }", "    }", "  }"]


def _staged_tiles(scop: Scop, c: Contraction, v: Variant) -> list[StagedType]:
    """How the ``mma.sync`` kernel ``v`` may stage its output tile in shared memory
    (:func:`~polyopt.codegen.contraction_text.staged_stores`, the whole block writing the tile
    back): per element type whose tile fits the ring (free after the K loop) -- a half output
    (:func:`half_store`, when the launch says so) and the declared type (when it does not).
    Only asynchronous kernels (the register-staged ones have no ring) of a box (no domain
    tests); empty for others."""
    if not v.asynchronous or v.wgmma or c.domain:
        return []
    half, declared = half_store(scop, c), c_type_name(scop.arrays[c.output].dtype)
    types = []
    if half is not None:
        types.append(StagedType.half(half))
    pair_type, pair_make, pair_bytes = PAIR_TYPES[declared]
    types.append(StagedType(declared, pair_type, pair_make, f"!{HALF_STORE_ARGUMENT}" if half else "", pair_bytes // 2))
    return [kind for kind in types if v.bm * (v.bn + STAGED_PAD) * kind.size <= shared_bytes(c, v)]


def _fragments(scop: Scop, pair: tuple[Operand, Operand], v: Variant, tiles: tuple[StagedTile, StagedTile] | None,
               op_t: str, im: int, jn: int, per_a: int, per_b: int) -> list[str]:
    """One MMA step of a warp's tile (K values ``_kk`` on) on operand pair ``pair`` (whose
    values a ``cp.async`` tile's elements go through): the A and B fragments read from
    the current shared tile (``tiles``: the ``cp.async`` ring's layout, None: the register-staged
    buffers, K contiguous), then ``im x jn`` MMAs into ``_acc`` (fragment layout: :data:`_MMA`)."""
    fm, fn, _ = _MMA[v.engine]
    if tiles is not None:
        def at(buffer: str, tile: StagedTile, operand) -> callable:
            def element(r: str, k: str) -> str:
                index = f"({r}) * {tile.stride} + ({k})" if tile.k_major else f"({k}) * {tile.stride} + ({r})"
                return scalar_text(scop, operand.value, f"{buffer}[{index}]")
            return element
        a_at, b_at = at("_as", tiles[0], pair[0]), at("_bs", tiles[1], pair[1])
        stage = [f"            const {op_t} *const _as = _As + _cs * {tiles[0].elements}, "
                 f"*const _bs = _Bs + _cs * {tiles[1].elements};"]
    else:
        def a_at(r: str, k: str) -> str:
            return f"_As[_cur][{r}][{k}]"

        def b_at(r: str, k: str) -> str:
            return f"_Bs[_cur][{r}][{k}]"
        stage = []
    a_row, b_row = f"_wm + _i * {fm} + _g + (_q % 2) * 8", f"_wn + _j * {fn} + _g"
    if v.engine == "hmma":  # a register holds the halves of K values k, k + 1 (k even)
        reg_t, mma = "uint32_t", f"pl_mma_{scop.arrays[pair[0].array].dtype.name}"
        if tiles is not None:  # from the cp.async ring (products and sums are the MMA's, in f32)
            return stage + _matrix_loads(tiles, im, jn) + _mma_loop(mma, im, jn)
        # the register-staged buffers hold K contiguous: a register is two adjacent halves
        a_value = f"*(const uint32_t *)&{a_at(a_row, '_kk + _tg * 2 + (_q / 2) * 8')}"
        b_value = f"*(const uint32_t *)&{b_at(b_row, '_kk + _tg * 2 + _q * 8')}"
    else:
        if v.engine == "tf32":  # TF32 operands as 32-bit registers (rounded here unless the tile was)
            reg_t, mma = "uint32_t", "pl_mma_tf32"
            bits = "pl_tf32_bits" if v.asynchronous else "__float_as_uint"
        else:
            reg_t, mma, bits = "double", "pl_mma_f64", ""
        a_value = f"{bits}({a_at(a_row, '_kk + _tg + (_q / 2) * 4')})"
        b_value = f"{bits}({b_at(b_row, '_kk + _tg + _q * 4')})"

    return stage + [
        f"            {reg_t} _a[{im}][{per_a}], _b[{jn}][{per_b}];",
        f"            #pragma unroll\n            for (int _i = 0; _i < {im}; _i++)",
        f"              #pragma unroll\n              for (int _q = 0; _q < {per_a}; _q++)",
        f"                _a[_i][_q] = {a_value};",
        f"            #pragma unroll\n            for (int _j = 0; _j < {jn}; _j++)",
        f"              #pragma unroll\n              for (int _q = 0; _q < {per_b}; _q++)",
        f"                _b[_j][_q] = {b_value};"] + _mma_loop(mma, im, jn)


def _mma_loop(mma: str, im: int, jn: int) -> list[str]:
    """The ``im x jn`` MMAs of a warp's tile on fragments ``_a`` and ``_b`` into ``_acc``."""
    return [f"            #pragma unroll\n            for (int _i = 0; _i < {im}; _i++)",
            f"              #pragma unroll\n              for (int _j = 0; _j < {jn}; _j++)",
            f"                {mma}(_acc[_i][_j], _a[_i], _b[_j]);"]


def _matrix_loads(tiles: tuple[StagedTile, StagedTile], im: int, jn: int) -> list[str]:
    """The A and B fragments of an ``mma.sync`` m16n8k16 step on halves (K values ``_kk`` on),
    read from the ``cp.async`` ring with ``ldmatrix``: one ``.x4`` (four 8 x 8 matrices) per
    16 rows of A and per two 8-column blocks of B (every half tile has an even ``jn``),
    ``.trans`` for a tile whose M or N run is contiguous (``[BK][stride]``), which a 16-bit
    load and a pack per register read before. Each lane gives one matrix row's address: rows
    are 16-byte aligned (:data:`_K_MAJOR_STRIDE`, :data:`_ROW_MAJOR_STRIDE`); with those
    strides the eight rows a phase reads fall in distinct banks."""
    if jn % 2:
        raise CodegenError(f"ldmatrix fragments: a warp tile of {jn} 8-column blocks (they are loaded in pairs)")
    a, b = tiles
    if a.k_major:  # matrix q: rows (q % 2) * 8, K (q / 2) * 8 -- the fragment's order
        a_at = f"(_wm + _i * 16 + _lane % 16) * {a.stride} + _kk + (_lane / 16) * 8"
    else:
        a_at = f"(_kk + (_lane / 16) * 8 + _lane % 8) * {a.stride} + _wm + _i * 16 + (_lane / 8) % 2 * 8"
    if b.k_major:  # matrix q: column block _j + q / 2, K (q % 2) * 8
        b_at = f"(_wn + (_j + _lane / 16) * 8 + _lane % 8) * {b.stride} + _kk + (_lane / 8) % 2 * 8"
    else:
        b_at = f"(_kk + (_lane / 8) % 2 * 8 + _lane % 8) * {b.stride} + _wn + (_j + _lane / 16) * 8"
    a_trans, b_trans = ("" if t.k_major else "_t" for t in tiles)
    return [f"            uint32_t _a[{im}][4], _b[{jn}][2];",
            f"            #pragma unroll\n            for (int _i = 0; _i < {im}; _i++)",
            f"              pl_ldsm_x4{a_trans}(_a[_i][0], _a[_i][1], _a[_i][2], _a[_i][3], &_as[{a_at}]);",
            f"            #pragma unroll\n            for (int _j = 0; _j < {jn}; _j += 2)",
            f"              pl_ldsm_x4{b_trans}(_b[_j][0], _b[_j][1], _b[_j + 1][0], _b[_j + 1][1], &_bs[{b_at}]);"]


def _async_operands(pair: tuple[Operand, Operand], v: Variant, tiles: tuple[StagedTile, StagedTile]):
    """Per operand of pair ``pair`` in the asynchronous kernel ``v``: (operand, its first row, row stride
    ``s_row`` and K stride ``s_k`` names, offset names, extent of its rows, buffer, tile), and
    how one thread's ``cp.async`` vectors are numbered: vectors per buffer row, per thread."""
    per_vector = COPY_BYTES // OPERAND_BYTES[v.engine]
    for rows, operand, row0, s_row, s_k, off, koff, total, buf, tile in (
            (v.bm, pair[0], "_m0", "sLm", "sLk", "_offL", "_nkL", "_M", "_As", tiles[0]),
            (v.bn, pair[1], "_n0", "sRn", "sRk", "_offR", "_nkR", "_N", "_Bs", tiles[1])):
        vectors = (v.bk if tile.k_major else rows) // per_vector
        yield (operand, row0, s_row, s_k, off, koff, total, buf, tile,
               vectors, rows * v.bk // per_vector // v.threads, per_vector)


def _vector_position(tile: StagedTile, vectors: int, per_vector: int, threads: int) -> list[str]:
    """``_r``/``_k``: where vector ``_q`` of this thread lies in the tile (row, K), and
    ``_at``: its offset in a stage of the buffer."""
    first, second = ("_r", "_k") if tile.k_major else ("_k", "_r")
    at = f"_r * {tile.stride} + _k" if tile.k_major else f"_k * {tile.stride} + _r"
    return [f"          const int _c = threadIdx.x + _q * {threads};",
            f"          const int {first} = _c / {vectors}, {second} = (_c % {vectors}) * {per_vector};",
            f"          const int _at = {at};"]


def _async_copies(pair: tuple[Operand, Operand], v: Variant, tiles: tuple[StagedTile, StagedTile]) -> list[str]:
    """``cp.async`` of operand pair ``pair``'s K tile at ``_nk0`` (outer-K offsets ``_nkL``/``_nkR``) into stage
    ``_ls``: 16-byte vectors, consecutive threads along the contiguous dimension; a vector
    reaching past the array's run copies only what is inside and the rest of it is zero
    (``src-size``), so the compute needs no bound checks."""
    out = []
    for operand, row0, s_row, s_k, off, koff, total, buf, tile, vectors, count, per_vector in \
            _async_operands(pair, v, tiles):
        out.append(f"        #pragma unroll\n        for (int _q = 0; _q < {count}; _q++) {{")
        out += _vector_position(tile, vectors, per_vector, v.threads)
        out.append(f"          const long _gr = {row0} + _r, _gk = _nk0 + _k;")
        inside = (f"_K - _gk < {per_vector} ? _K - _gk : {per_vector}" if tile.k_major
                  else f"{total} - _gr < {per_vector} ? {total} - _gr : {per_vector}")
        address = f"_gr * {s_row} + _gk" if tile.k_major else f"_gr + _gk * {s_k}"
        out += [f"          const int _nb = (_gr < {total} && _gk < _K) ? "
                f"(int)({inside}) * {COPY_BYTES // per_vector} : 0;",
                f"          pl_cp16({buf} + _ls * {tile.elements} + _at, "
                f"{operand.array} + {off} + {koff} + (_nb ? {address} : 0), _nb);",
                "        }"]
    return out


def _async_pipeline(pair: tuple[Operand, Operand], v: Variant, tiles: tuple[StagedTile, StagedTile],
                    compute: list[str], slots: Slots) -> list[str]:
    """The K loop of operand pair ``pair`` over a ring of ``v.stages`` shared tiles filled by ``cp.async``: the first
    ``stages - 1`` tiles are requested up front; per tile, wait for it, request the tile
    ``stages - 1`` ahead into the slot the previous tile used (after the barrier: every warp is
    done with it), and compute (stage ``_cs``). ``_nk0``/``_nko`` follow the tile requested."""
    request = (["        {"] + _async_copies(pair, v, tiles) +
               ["        }", "        _nk0 += BK;", "        if (_nk0 >= _K) {", "          _nk0 = 0; _nko += 1;"] +
               (outer_k_offsets(slots) if slots.outer_k else []) +
               ["        }", f"        _ls = _ls + 1 == {v.stages} ? 0 : _ls + 1;"])
    out = ["      const long _NT = (_K + BK - 1) / BK * _KO;",
           "      long _nk0 = 0, _nko = 0;",
           "      long _nkL = 0, _nkR = 0;" if slots.outer_k else "      const long _nkL = 0, _nkR = 0;",
           "      int _ls = 0, _cs = 0;",
           f"      for (int _s = 0; _s < {v.stages - 1}; _s++) {{",
           "        if (_s < _NT) {"] + request + ["        }", "        pl_cp_commit();", "      }",
           "      for (long _tile = 0; _tile < _NT; _tile++) {",
           f"        pl_cp_wait<{v.stages - 2}>();",
           "        __syncthreads();",
           f"        if (_tile + {v.stages - 1} < _NT) {{"] + request + ["        }", "        pl_cp_commit();"]
    out += compute
    out += [f"        _cs = _cs + 1 == {v.stages} ? 0 : _cs + 1;", "      }",
            "      pl_cp_wait<0>();", "      __syncthreads();  /* the next tile of the grid loop reuses the ring */"]
    return out


def _half_helpers(half: str) -> str:
    """The ``hmma`` engine's MMA for half type ``half`` (f16 or bf16)."""
    return (f"__device__ inline void pl_mma_{half}(float *c, const uint32_t *a, const uint32_t *b) {{\n"
            f'  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.{half}.{half}.f32 {{%0,%1,%2,%3}}, '
            '{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"\n'
            '               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])\n'
            '               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));\n}\n')


_MMA_HELPERS = r"""
__device__ inline uint32_t pl_tf32_bits(float x) { uint32_t r; asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x)); return r; }
__device__ inline float pl_tf32(float x) { return __uint_as_float(pl_tf32_bits(x)); }
__device__ inline void pl_cp16(void *dst, const void *src, int bytes) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(s), "l"(src), "r"(bytes) : "memory");
}
__device__ inline void pl_ldsm_x4(uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3, const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"((unsigned)__cvta_generic_to_shared(p)));
}
__device__ inline void pl_ldsm_x4_t(uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3, const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"((unsigned)__cvta_generic_to_shared(p)));
}
__device__ inline void pl_cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ inline void pl_cp_wait() { asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory"); }
__device__ inline void pl_mma_tf32(float *c, const uint32_t *a, const uint32_t *b) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ inline void pl_mma_f64(double *c, const double *a, const double *b) {
#if __CUDA_ARCH__ >= 900
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, {%4,%5,%6,%7,%8,%9,%10,%11}, "
               "{%12,%13,%14,%15}, {%0,%1,%2,%3};"
               : "+d"(c[0]), "+d"(c[1]), "+d"(c[2]), "+d"(c[3])
               : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(a[4]), "d"(a[5]), "d"(a[6]), "d"(a[7]),
                 "d"(b[0]), "d"(b[1]), "d"(b[2]), "d"(b[3]));
#else  /* the same product as eight m8n8k4: rows half h, K step s take a[2s + h], b[s] */
  for (int s = 0; s < 4; s++)
    for (int h = 0; h < 2; h++)
      asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%0,%1};"
                   : "+d"(c[2 * h]), "+d"(c[2 * h + 1]) : "d"(a[2 * s + h]), "d"(b[s]));
#endif
}
"""
