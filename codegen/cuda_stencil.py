"""CUDA kernels running a recognized stencil (:mod:`polyopt.analysis.stencil`) in overlapped time
tiles: one launch runs ``steps`` time steps of the whole array, a thread block per output tile.

Each block loads every written array over its region -- the output tile grown by the halo
(:meth:`~polyopt.analysis.stencil.Stencil.halo`) on each side -- into shared memory (elements
outside the array are not loaded), then runs the time steps (no further than the last one),
each statement over the points of the region in its box whose reads of written arrays lie in
the region, ``__syncthreads()`` between statements, and finally stores its output tile of every
written array, all of the tile's elements (also those no statement writes), to the destination.
Points near the region's edge compute wrong values (their neighbours outside are unknown), which
travel inward at most the per-step halo a step, so they never reach the output tile. Arrays
the loop only reads come from global memory (``const __restrict__``: the read-only path).

Blocks read halos other blocks own, so a launch never writes what it reads: each written array
has a scratch copy of its own (the caller allocates it; the kernel takes its address after
the program's arguments) and launches alternate, ``_flip`` = 0 reading the arrays and writing
the scratch copies, 1 the other way. After an odd number of launches the result is in scratch
and the copy kernel (``<name>_copy``) puts it back, so the whole host program is launches.

The host function ``void <name>(...)`` (nvcc builds only) does the same with ``cudaMalloc``ed
scratch copies; the Python runtime launches through :mod:`polyopt.targets.stencil`.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

from polyopt.analysis import expr as E
from polyopt.analysis.affine import extent_expr
from polyopt.analysis.scop import Scop
from polyopt.analysis.stencil import Stencil, StencilStatement
from polyopt.codegen.ast import abi_arguments
from polyopt.codegen.c import c_type_name
from polyopt.codegen.cuda import DEFAULT_BLOCK, GRID_LIMIT, CudaExpr, CudaSource, cuda_prelude, kernel_parameters
from polyopt.errors import CodegenError
from polyopt.types import i64

#: Static shared memory one block may hold (bytes): CUDA's limit without opting in to dynamic
#: shared memory. The region buffers of every written array must fit; :func:`time_tiling`
#: takes fewer time steps per launch, or a smaller tile, until they do.
SHARED_LIMIT = 48 * 1024
#: The output tile per block by spatial rank (outermost first; the last dimension is the
#: contiguous one, ``threadIdx.x``), before shrinking to fit :data:`SHARED_LIMIT`.
DEFAULT_TILE = {1: (2048,), 2: (32, 64), 3: (8, 8, 32)}
#: Time steps per launch tried in turn when none is given (the first that fits with a tile of
#: at least :data:`MIN_TILE` per dimension wins). One step a launch still runs all of a step's
#: statements in one launch (heat-3d in f64 fits no more: two steps need a 16^3 region per
#: array, 64 KiB for its two arrays).
DEFAULT_STEPS = (4, 3, 2, 1)
#: The smallest tile extent :func:`time_tiling` shrinks a dimension to.
MIN_TILE = 8
#: Threads of the copy kernel's blocks.
COPY_THREADS = 256


@dataclass(frozen=True)
class TimeTiling:
    """Overlapped time tiles of ``stencil``: ``steps`` time steps per launch, output ``tile``
    and thread ``block`` per dimension (outermost first)."""

    stencil: Stencil
    steps: int
    tile: tuple[int, ...]
    block: tuple[int, ...]

    @property
    def halo(self) -> tuple[tuple[int, int], ...]:
        """Per dimension, the elements below and above the output tile a block loads."""
        return self.stencil.halo(self.steps)

    @property
    def region(self) -> tuple[int, ...]:
        """Per dimension, the extent of the region a block holds in shared memory."""
        return tuple(t + low + high for t, (low, high) in zip(self.tile, self.halo))

    def shared_bytes(self, scop: Scop) -> int:
        """The shared memory of a block: one region buffer per written array."""
        return sum(prod(self.region) * scop.arrays[a].dtype.numpy.itemsize for a in self.stencil.written)

    def launches(self, time_steps: int) -> int:
        """Launches of the overlapped-tile kernel for ``time_steps`` steps."""
        return -(-max(time_steps, 0) // self.steps)

    def tiles(self, extents: tuple[int, ...]) -> tuple[int, ...]:
        """Output tiles per dimension for arrays of ``extents``."""
        return tuple(-(-n // t) for n, t in zip(extents, self.tile))

    def grid(self, extents: tuple[int, ...]) -> tuple[int, int, int]:
        """``gridDim`` (x, y, z): x the tiles of the last dimension, y and z the ones before."""
        tiles = tuple(reversed(self.tiles(extents))) + (1,) * (3 - len(extents))
        if any(t > limit for t, limit in zip(tiles, GRID_LIMIT)):
            raise CodegenError(f"CUDA stencil: {tiles} tiles exceed the grid limits {GRID_LIMIT}")
        return tiles

    def describe(self) -> str:
        return (f"overlapped time tiles: {self.steps} steps per launch, tile {'x'.join(map(str, self.tile))}, "
                f"halo {list(self.halo)}, region {'x'.join(map(str, self.region))}, "
                f"block {'x'.join(map(str, self.block))} threads")


def time_tiling(scop: Scop, stencil: Stencil, steps: int | None = None, tile=None, block=None) -> TimeTiling:
    """The tiling for ``stencil``: ``steps``, ``tile`` and ``block`` as given (an int tile or
    block applies to every dimension), or the defaults (:data:`DEFAULT_STEPS`,
    :data:`DEFAULT_TILE`, :data:`~polyopt.codegen.cuda.DEFAULT_BLOCK`) with the tile's outer
    dimensions halved until the regions fit :data:`SHARED_LIMIT`;
    :class:`~polyopt.errors.CodegenError` where a given choice does not fit."""
    rank = stencil.rank
    threads = _per_dimension(block, rank, "block") or DEFAULT_BLOCK[rank]
    if prod(threads) > 1024:
        raise CodegenError(f"CUDA stencil: block {threads} has more than 1024 threads")
    given = _per_dimension(tile, rank, "tile")
    if steps is not None and (not isinstance(steps, int) or steps < 1):
        raise CodegenError(f"CUDA stencil: time_tile must be a positive int, got {steps!r}")
    for k in ((steps,) if steps is not None else DEFAULT_STEPS):
        shape = given or DEFAULT_TILE[rank]
        while True:
            tiling = TimeTiling(stencil, k, shape, threads)
            if tiling.shared_bytes(scop) <= SHARED_LIMIT:
                return tiling
            if given is not None:
                break
            shrink = next((d for d in range(rank) if shape[d] > MIN_TILE), None)
            if shrink is None:
                break
            shape = tuple(max(MIN_TILE, s // 2) if d == shrink else s for d, s in enumerate(shape))
    raise CodegenError(f"CUDA stencil: no tile of {steps or DEFAULT_STEPS[-1]} time steps fits {SHARED_LIMIT} "
                       f"bytes of shared memory (tile {given or 'any'}; halo per step {list(stencil.step_halo)})")


def _per_dimension(value, n: int, what: str) -> tuple[int, ...] | None:
    if value is None:
        return None
    values = (value,) * n if isinstance(value, int) else tuple(value)
    if len(values) != n or any(not isinstance(v, int) or v < 1 for v in values):
        raise CodegenError(f"CUDA stencil: {what} must be a positive int or {n} positive ints, got {value!r}")
    return values


@dataclass(frozen=True)
class StencilSource(CudaSource):
    """A :class:`~polyopt.codegen.cuda.CudaSource` of overlapped time tiles: the kernel
    ``host_function + "_tt"`` and the copy kernel ``host_function + "_copy"``; ``program`` has
    the schedule tree (the original order) and no host steps: the target launches with
    :func:`polyopt.targets.stencil.launch`."""

    tiling: TimeTiling | None = None

    @property
    def kernel(self) -> str:
        return self.host_function + "_tt"

    @property
    def copy(self) -> str:
        return self.host_function + "_copy"


def scratch_parameters(scop: Scop, stencil: Stencil) -> list[str]:
    """The C parameters of the written arrays' scratch copies, after the program's arguments."""
    return [f"{c_type_name(scop.arrays[a].dtype)} *__restrict__ _s_{a}" for a in stencil.written]


def stencil_source(scop: Scop, tiling: TimeTiling, name: str) -> str:
    """The translation unit: prelude, the overlapped-tile kernel, the copy kernel and (nvcc
    only) the host function ``name``."""
    emit = CudaExpr(scop)
    parts = [cuda_prelude(scop.arrays[a].dtype for a in scop.arrays)]
    parts += _kernel(scop, tiling, f"{name}_tt", emit)
    parts += _copy_kernel(scop, tiling.stencil, f"{name}_copy", emit)
    parts += _host_function(scop, tiling, name, emit)
    return "\n".join(parts) + "\n"


def _extents(scop: Scop, stencil: Stencil, emit) -> list[str]:
    """C declarations of the arrays' extents ``_n0``, ``_n1``..."""
    return [f"  const long _n{k} = {emit(extent_expr(e, scop.params))};" for k, e in enumerate(stencil.shape)]


def _flat(names: list[str]) -> str:
    """Row-major offset of the element at coordinates ``names`` in arrays of extents ``_n*``."""
    flat = names[0]
    for k, name in enumerate(names[1:], 1):
        flat = f"({flat}) * _n{k} + {name}"
    return flat


#: The thread index along each dimension, by rank (the last dimension is x).
_THREAD = {1: ("threadIdx.x",), 2: ("threadIdx.y", "threadIdx.x"), 3: ("threadIdx.z", "threadIdx.y", "threadIdx.x")}
_BLOCK_INDEX = {1: ("blockIdx.x",), 2: ("blockIdx.y", "blockIdx.x"), 3: ("blockIdx.z", "blockIdx.y", "blockIdx.x")}


def _region_loops(tiling: TimeTiling, ranges: list[tuple[int, int]], body: list[str], depth: int = 1) -> list[str]:
    """Loops of the block's threads over local positions ``_l<k>`` in ``ranges`` (per dimension
    [low, high)), with the element ``_x<k> = _r<k> + _l<k>``, around ``body``."""
    rank = tiling.stencil.rank
    out = []
    for k, (low, high) in enumerate(ranges):
        pad = "  " * (depth + k)
        out.append(f"{pad}for (int _l{k} = {low} + {_THREAD[rank][k]}; _l{k} < {high}; _l{k} += {tiling.block[k]}) {{")
        out.append(f"{pad}  const long _x{k} = _r{k} + _l{k};")
    inner = "  " * (depth + rank)
    out += [inner + line for line in body]
    out += ["  " * (depth + k) + "}" for k in reversed(range(rank))]
    return out


def _inside_array(rank: int) -> str:
    return " && ".join(f"_x{k} >= 0 && _x{k} < _n{k}" for k in range(rank))


def _kernel(scop: Scop, tiling: TimeTiling, name: str, emit) -> list[str]:
    stencil = tiling.stencil
    rank, region, written = stencil.rank, tiling.region, stencil.written
    threads = prod(tiling.block)
    params = kernel_parameters(scop, set(written)) + scratch_parameters(scop, stencil) + ["long _t0", "long _flip"]
    out = [f'extern "C" __global__ void __launch_bounds__({threads}) {name}({", ".join(params)})', "{"]
    for a in written:
        t = c_type_name(scop.arrays[a].dtype)
        out.append(f"  __shared__ {t} _sh_{a}[{prod(region)}];")
        out.append(f"  const {t} *_src_{a} = _flip ? _s_{a} : {a};")
        out.append(f"  {t} *_dst_{a} = _flip ? {a} : _s_{a};")
    out += _extents(scop, stencil, emit)
    for k in range(rank):
        out.append(f"  const long _r{k} = (long){_BLOCK_INDEX[rank][k]} * {tiling.tile[k]} - {tiling.halo[k][0]};")
    flat = _flat([f"_x{k}" for k in range(rank)])
    local = _flat_local(region, [f"_l{k}" for k in range(rank)])
    loads = [f"if ({_inside_array(rank)}) {{"] + [f"  _sh_{a}[{local}] = _src_{a}[{flat}];" for a in written] + ["}"]
    out += _region_loops(tiling, [(0, e) for e in region], loads)
    out.append("  __syncthreads();")
    out.append(f"  const long _t_last = {emit(stencil.time_bounds[1])};")
    out.append(f"  for (int _k = 0; _k < {tiling.steps}; _k++) {{")
    out.append("    const long _t = _t0 + _k;")
    out.append("    if (_t > _t_last) break;  /* the same for every thread: no barrier is skipped by some */")
    for s in stencil.statements:
        out.append(f"    /* {s.name} */")
        out += _region_loops(tiling, [(0, e) for e in region], _statement(scop, tiling, s, emit), depth=2)
        out.append("    __syncthreads();")
    out.append("  }")
    stores = [f"if ({_inside_array(rank)}) {{"] + [f"  _dst_{a}[{flat}] = _sh_{a}[{local}];" for a in written] + ["}"]
    out += _region_loops(tiling, [(low, low + t) for (low, _), t in zip(tiling.halo, tiling.tile)], stores)
    out.append("}")
    return out


def _flat_local(region: tuple[int, ...], names: list[str]) -> str:
    flat = names[0]
    for extent, name in zip(region[1:], names[1:]):
        flat = f"({flat}) * {extent} + {name}"
    return flat


def _statement(scop: Scop, tiling: TimeTiling, s: StencilStatement, emit) -> list[str]:
    """The body of statement ``s`` at local position ``_l``: where the element is in its box
    and its reads of written arrays lie in the region, the assignment on the shared buffers
    (the statement's iterators defined from the element and the time step)."""
    region = tiling.region
    tests = []
    for k, (low, high) in enumerate(s.box):
        tests.append(f"{emit(low)} <= _x{k} && _x{k} <= {emit(high)}")
        below, above = s.reach[k]
        if below:
            tests.append(f"_l{k} >= {below}")
        if above:
            tests.append(f"_l{k} < {region[k] - above}")
    staged = set(tiling.stencil.written)

    def shared(e: E.Expr):
        if not (isinstance(e, E.Access) and e.array in staged):
            return None
        index = None
        for k, sub in enumerate(e.indices):
            position = E.Binary("-", E.substitute(sub, shared), E.Var(f"_r{k}", "iter", i64), i64)
            index = position if index is None else E.Binary(
                "+", E.Binary("*", index, E.Const(region[k], i64), i64), position, i64)
        return E.Access(f"_sh_{e.array}", (index,), e.dtype)

    stmt = s.statement
    used = {e.name for root in (stmt.target, stmt.value) for e in E.walk(root) if isinstance(e, E.Var)}
    out = [f"if ({' && '.join(tests)}) {{"] + ([f"  const long {s.time} = _t;"] if s.time in used else [])
    out += [f"  const long {it} = _x{k} - {c};" for it, (k, c) in s.iterator_values().items() if it in used]
    out.append(f"  {emit(E.substitute(stmt.target, shared))} = {emit(E.substitute(stmt.value, shared))};")
    out.append("}")
    return out


def _copy_kernel(scop: Scop, stencil: Stencil, name: str, emit) -> list[str]:
    """``name``: every written array gets its scratch copy's elements (grid-stride)."""
    params = kernel_parameters(scop, set(stencil.written)) + scratch_parameters(scop, stencil)
    out = [f'extern "C" __global__ void __launch_bounds__({COPY_THREADS}) {name}({", ".join(params)})', "{"]
    out += _extents(scop, stencil, emit)
    out.append(f"  const long _size = {' * '.join(f'_n{k}' for k in range(stencil.rank))};")
    out.append("  for (long _e = (long)blockIdx.x * blockDim.x + threadIdx.x; _e < _size; "
               "_e += (long)gridDim.x * blockDim.x) {")
    out += [f"    {a}[_e] = _s_{a}[_e];" for a in stencil.written]
    out += ["  }", "}"]
    return out


def copy_grid(size: int) -> tuple[int, int, int]:
    """The copy kernel's grid for arrays of ``size`` elements."""
    return (max(1, min(-(-size // COPY_THREADS), GRID_LIMIT[0])), 1, 1)


def _host_function(scop: Scop, tiling: TimeTiling, name: str, emit) -> list[str]:
    """``extern "C" void name(...)`` (device pointers): scratch copies from ``cudaMalloc``, the
    launches alternating direction, the copy back after an odd count, ``cudaFree``."""
    stencil = tiling.stencil
    rank = stencil.rank
    params = [p.replace("const ", "").replace("*__restrict__ ", "*") for p in kernel_parameters(scop, set())]
    args = [a.name for a in abi_arguments(scop)] + [f"_s_{a}" for a in stencil.written]
    out = ["#ifndef __CUDACC_RTC__", f'extern "C" void {name}({", ".join(params) or "void"})', "{"]
    out += _extents(scop, stencil, emit)
    out.append(f"  const long _t_first = {emit(stencil.time_bounds[0])}, _t_last = {emit(stencil.time_bounds[1])};")
    out.append(f"  const long _size = {' * '.join(f'_n{k}' for k in range(rank))};")
    out.append("  if (_t_last < _t_first || _size <= 0) return;")
    out.append(f"  const long _launches = (_t_last - _t_first + {tiling.steps}) / {tiling.steps};")
    for a in stencil.written:
        t = c_type_name(scop.arrays[a].dtype)
        out.append(f"  {t} *_s_{a} = 0;")
        out.append(f"  cudaMalloc((void **)&_s_{a}, (size_t)_size * sizeof({t}));")
    tiles = [f"(unsigned)((_n{k} + {t - 1}) / {t})" for k, t in enumerate(tiling.tile)]
    grid = list(reversed(tiles)) + ["1"] * (3 - rank)
    block = list(reversed(tiling.block)) + [1] * (3 - rank)
    out.append(f"  const dim3 _grid({', '.join(grid)}), _block({', '.join(map(str, block))});")
    out.append("  for (long _j = 0; _j < _launches; _j++)")
    out.append(f"    {name}_tt<<<_grid, _block>>>({', '.join(args)}, _t_first + _j * {tiling.steps}, _j & 1);")
    out.append("  if (_launches & 1)")
    out.append(f"    {name}_copy<<<(unsigned)((_size + {COPY_THREADS - 1}) / {COPY_THREADS} < {GRID_LIMIT[0]} ? "
               f"(_size + {COPY_THREADS - 1}) / {COPY_THREADS} : {GRID_LIMIT[0]}), {COPY_THREADS}>>>({', '.join(args)});")
    out += [f"  cudaFree(_s_{a});" for a in stencil.written]
    out += ["}", "#endif"]
    return out


__all__ = ["COPY_THREADS", "DEFAULT_STEPS", "DEFAULT_TILE", "MIN_TILE", "SHARED_LIMIT", "StencilSource", "TimeTiling",
           "copy_grid", "scratch_parameters", "stencil_source", "time_tiling"]
