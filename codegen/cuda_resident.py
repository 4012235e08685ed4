"""A CUDA kernel running every time step of a recognized stencil
(:mod:`polyopt.analysis.stencil`) in one cooperative launch, each block's strip of the written
arrays resident in shared memory for the whole launch (the execution model of PERKS, Zhang et
al., ICS 2023: a persistent kernel caching the domain on chip across time steps).

The rows (element dimension 0) of the written arrays are cut into strips of ``_rows`` rows, one
per block; the launch (:mod:`polyopt.targets.resident`) takes at most one block per
multiprocessor, so all blocks run at once, as the grid-wide barrier needs. A block loads its
strip of every written array into shared memory, then runs the time loop: per statement, a
sweep over the elements of the statement's box in its strip. Each thread walks columns (the
elements of dimensions 1.. of a row) down the strip's rows and keeps the reads at row offsets
``(o, 0, ...)`` of one array in registers (a window sliding one row a step: a new load per row
instead of one per offset); other reads come from shared memory where their row is in the
strip, else from global memory (``__ldcg``: L2, not the multiprocessor's L1, which does not see
other blocks' writes). A statement stores its element in shared memory, and also in global
memory where another block reads it: the rows within the largest row offset of a read of that
array from the strip's edges. Between statements ``__syncthreads()``, or a grid-wide barrier
(:func:`grid_barriers`) where a statement reads another strip's rows of an array written since
the last grid-wide barrier, or writes an array whose rows other strips read since then. After
the last step (and a grid-wide barrier), each block stores its strips.

Why it is sound: the instances run in the original order of time steps and statements (the
sweeps the general mapping runs as one launch each), a statement's instances in parallel (the
stencil analysis checks with isl that a sweep has no dependence among its instances); every
read sees the latest write of its element -- within the strip through shared memory after the
block's barrier, across strips through global memory after a grid-wide barrier -- and no
write lands on an element another block may still read in the same phase.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

from polyopt.analysis import expr as E
from polyopt.analysis.affine import extent_expr
from polyopt.analysis.scop import Scop
from polyopt.analysis.stencil import Stencil, StencilStatement
from polyopt.codegen.c import c_type_name
from polyopt.codegen.cuda import CudaExpr, kernel_parameters

#: Threads per block (one block per multiprocessor): 768 ran jacobi-2d and fdtd-2d 5-8 % faster
#: than 1,024 on an H100, and 512 slower (docs/performance.md, "Resident strips").
RESIDENT_THREADS = 768
#: The fewest rows a strip has: with one, every read at a row offset leaves the strip, and the
#: kernel is the sweeps plus grid-wide barriers (heat-3d at LARGE, 120 planes on 132
#: multiprocessors: 12.1 ms against its sweeps' 11.0 on an H100, docs/performance.md).
MIN_STRIP_ROWS = 2
#: Spatial ranks the resident kernel is made for (rank 1 runs in overlapped time tiles).
RESIDENT_RANKS = (2, 3)
#: The line a translation unit with a grid-wide barrier includes (NVRTC builds it as C++17).
COOPERATIVE_INCLUDE = "#include <cooperative_groups.h>"
#: Alignment of each array's strip in the dynamic shared memory (bytes).
STRIP_ALIGN = 16


@dataclass(frozen=True)
class ResidentKernel:
    """The resident kernel ``name`` of ``stencil``: per statement its reads of written arrays
    as (array, offset) and whether a grid-wide barrier precedes it (:func:`grid_barriers`);
    per written array the rows near a strip's top and bottom edges that other strips read
    (``edges``: (top, bottom), both 0 for an array no other strip reads)."""

    stencil: Stencil
    name: str
    reads: tuple[tuple[tuple[str, tuple[int, ...]], ...], ...]
    barriers: tuple[bool, ...]
    edges: dict

    def strip_bytes(self, scop: Scop, rows: int, columns: int) -> int:
        """Dynamic shared memory of a block holding ``rows`` rows of ``columns`` elements of
        every written array."""
        return sum(_aligned(rows * columns * scop.arrays[a].dtype.numpy.itemsize) for a in self.stencil.written)

    def strips(self, scop: Scop, extents: tuple[int, ...], blocks: int, shared_limit: int
               ) -> tuple[int, int, int] | None:
        """(rows per strip, blocks, dynamic shared bytes) for arrays of ``extents`` over at most
        ``blocks`` blocks (fewer where that leaves strips of fewer than :data:`MIN_STRIP_ROWS`),
        or None where a strip does not fit ``shared_limit`` (or nothing runs)."""
        n0, columns = extents[0], prod(extents[1:])
        if n0 <= 0 or columns <= 0 or blocks <= 0:
            return None
        rows = max(MIN_STRIP_ROWS, -(-n0 // blocks))
        shared = self.strip_bytes(scop, rows, columns)
        return (rows, -(-n0 // rows), shared) if shared <= shared_limit else None

    def describe(self) -> str:
        grid = sum(self.barriers)
        return (f"resident strips: one cooperative launch runs all time steps, each block's rows of "
                f"{', '.join(self.stencil.written)} in shared memory; {grid} grid-wide barrier(s) and "
                f"{len(self.barriers) - grid} block barrier(s) a time step")


def resident_kernel(stencil: Stencil, name: str) -> ResidentKernel | None:
    """The resident kernel of ``stencil``, or None where its rank is not in
    :data:`RESIDENT_RANKS` or a read of a written array is no translation of the written
    element subscript by subscript (:meth:`~polyopt.analysis.stencil.StencilStatement.offset_of`)."""
    if stencil.rank not in RESIDENT_RANKS:
        return None
    written = set(stencil.written)
    reads = []
    for s in stencil.statements:
        found = []
        for e in E.walk(s.statement.value):
            if isinstance(e, E.Access) and e.array in written:
                offset = s.offset_of(e)
                if offset is None:
                    return None
                found.append((e.array, offset))
        reads.append(tuple(dict.fromkeys(found)))
    cross = [frozenset(a for a, o in r if o[0]) for r in reads]
    writes = [frozenset((s.array,)) for s in stencil.statements]
    edges = {a: (max([0] + [o[0] for r in reads for b, o in r if b == a]),
                 max([0] + [-o[0] for r in reads for b, o in r if b == a])) for a in stencil.written}
    return ResidentKernel(stencil, name, tuple(reads), grid_barriers(cross, writes), edges)


def grid_barriers(cross: list[frozenset], writes: list[frozenset]) -> tuple[bool, ...]:
    """Per statement of a time step, whether a grid-wide barrier precedes it: ``cross[k]`` the
    arrays statement ``k`` reads at other strips' rows, ``writes[k]`` those it writes. A
    barrier goes before a statement that reads across strips an array written since the last
    one (read after write), or writes an array read across strips since then (write after
    read), the time steps following each other; the barriers are added until three time steps
    in a row from the kernel's start need no more (the state is periodic after two)."""
    n = len(cross)
    need = [False] * n
    changed = True
    while changed:
        changed = False
        read, written = set(), set()
        for _ in range(3):
            for k in range(n):
                if not need[k] and (cross[k] & written or writes[k] & read):
                    need[k] = changed = True
                if need[k]:
                    read, written = set(), set()
                read |= cross[k]
                written |= writes[k]
    return tuple(need)


def _aligned(nbytes: int) -> int:
    return -(-nbytes // STRIP_ALIGN) * STRIP_ALIGN


def resident_text(scop: Scop, kernel: ResidentKernel) -> str:
    """The kernel's C++ text, to append to a translation unit with
    :func:`~polyopt.codegen.cuda.cuda_prelude` that starts with :data:`COOPERATIVE_INCLUDE`
    (before the prelude's own types; NVRTC builds it as C++17, which the header needs)."""
    stencil, emit = kernel.stencil, CudaExpr(scop)
    rank = stencil.rank
    params = kernel_parameters(scop, set(stencil.written)) + ["long _rows"]
    out = [f'extern "C" __global__ void __launch_bounds__({RESIDENT_THREADS}, 1) {kernel.name}({", ".join(params)})',
           "{", "  extern __shared__ __align__(16) unsigned char _smem[];",
           "  cooperative_groups::grid_group _grid = cooperative_groups::this_grid();"]
    out += [f"  const int _n{k} = {emit(extent_expr(e, scop.params))};" for k, e in enumerate(stencil.shape)]
    out.append(f"  const int _C = {' * '.join(f'_n{k}' for k in range(1, rank))};")
    out.append("  const int _r0 = blockIdx.x * _rows, _r1 = _r0 + _rows < _n0 ? _r0 + _rows : _n0;")
    out.append("  const int _strip = (_r1 - _r0) * _C;")
    out.append("  unsigned long _off = 0;")
    for a in stencil.written:
        t = c_type_name(scop.arrays[a].dtype)
        out.append(f"  {t} *_sh_{a} = ({t} *)(_smem + _off);")
        out.append(f"  _off += ((unsigned long)_rows * _C * sizeof({t}) + {STRIP_ALIGN - 1}) / {STRIP_ALIGN} * {STRIP_ALIGN};")
    out.append("  for (int _e = threadIdx.x; _e < _strip; _e += blockDim.x) {")
    out += [f"    _sh_{a}[_e] = {a}[(long)_r0 * _C + _e];" for a in stencil.written]
    out += ["  }", "  __syncthreads();"]
    out.append(f"  const long _t_first = {emit(stencil.time_bounds[0])}, _t_last = {emit(stencil.time_bounds[1])};")
    out.append("  for (long _t = _t_first; _t <= _t_last; _t++) {")
    for s, reads, barrier in zip(stencil.statements, kernel.reads, kernel.barriers):
        out.append("    _grid.sync();" if barrier else "    __syncthreads();")
        out += ["    " + line for line in _statement(scop, kernel, s, reads, emit)]
    out.append("  }")
    out.append("  _grid.sync();  /* every block past its last read of other strips' rows */")
    out.append("  for (int _e = threadIdx.x; _e < _strip; _e += blockDim.x) {")
    out += [f"    {a}[(long)_r0 * _C + _e] = _sh_{a}[_e];" for a in stencil.written]
    out += ["  }", "}"]
    return "\n".join(out) + "\n"


def _statement(scop: Scop, kernel: ResidentKernel, s: StencilStatement, reads, emit) -> list[str]:
    """Statement ``s``'s sweep over its box in the block's strip: columns over the threads,
    rows walked down with the row-offset reads of each array in a register window."""
    rank = kernel.stencil.rank
    t = c_type_name(scop.arrays[s.array].dtype)
    box = [(emit(low), emit(high)) for low, high in s.box]
    out = [f"{{  /* {s.name}: {s.array} */",
           f"  const int _lo = _r0 > {box[0][0]} ? _r0 : {box[0][0]};",
           f"  const int _hi = _r1 - 1 < {box[0][1]} ? _r1 - 1 : {box[0][1]};"]
    if rank == 2:
        out.append(f"  for (int _x1 = {box[1][0]} + threadIdx.x; _lo <= _hi && _x1 <= {box[1][1]}; "
                   "_x1 += blockDim.x) {")
        out.append("    const int _c = _x1;")
    else:
        out.append(f"  const int _w2 = {box[2][1]} - {box[2][0]} + 1;")
        out.append(f"  for (int _q = threadIdx.x; _lo <= _hi && _q < ({box[1][1]} - {box[1][0]} + 1) * _w2; "
                   "_q += blockDim.x) {")
        out.append(f"    const int _x1 = {box[1][0]} + _q / _w2, _x2 = {box[2][0]} + _q % _w2;")
        out.append("    const int _c = _x1 * _n2 + _x2;")
    stmt = s.statement
    written = set(kernel.stencil.written)
    others = E.substitute(stmt.value, lambda e: E.Const(0, e.dtype) if isinstance(e, E.Access) and e.array in written
                          else None)  # (the reads of written arrays index by _x0 and _c, not the iterators)
    used = {e.name for e in E.walk(others) if isinstance(e, E.Var)}
    values = s.iterator_values()
    out += [f"    const long {it} = _x{k} - {c};" for it, (k, c) in values.items() if k > 0 and it in used]
    windows = _windows(reads)
    names: dict[tuple[str, tuple[int, ...]], str] = {}
    for array, (low, high) in windows.items():
        for o in range(low, high + 1):
            names[(array, (o,) + (0,) * (rank - 1))] = f"_w_{array}_{o - low}"
        for o in range(low, high):
            load = _load(array, f"_lo + {o}" if o else "_lo", (o,) + (0,) * (rank - 1))
            out.append(f"    {c_type_name(scop.arrays[array].dtype)} _w_{array}_{o - low} = {load};")
    out.append("    for (int _x0 = _lo; _x0 <= _hi; _x0++) {")
    if s.time in used:
        out.append(f"      const long {s.time} = _t;")
    out += [f"      const long {it} = _x0 - {c};" for it, (k, c) in values.items() if k == 0 and it in used]
    for array, (low, high) in windows.items():
        row = f"_x0 + {high}" if high else "_x0"
        out.append(f"      const {c_type_name(scop.arrays[array].dtype)} _w_{array}_{high - low}_new = "
                   f"{_load(array, row, (high,) + (0,) * (rank - 1))};")
        names[(array, (high,) + (0,) * (rank - 1))] = f"_w_{array}_{high - low}_new"
    for k, (array, offset) in enumerate(reads):
        if (array, offset) not in names:
            row = f"_x0 + {offset[0]}" if offset[0] else "_x0"
            out.append(f"      const {c_type_name(scop.arrays[array].dtype)} _v{k} = {_load(array, row, offset)};")
            names[(array, offset)] = f"_v{k}"

    def local(e: E.Expr):
        if isinstance(e, E.Access) and e.array in written:
            return E.Var(names[(e.array, s.offset_of(e))], "iter", e.dtype)
        return None

    out.append(f"      const {t} _value = {emit(E.substitute(stmt.value, local))};")
    out.append(f"      _sh_{s.array}[(_x0 - _r0) * _C + _c] = _value;")
    top, bottom = kernel.edges[s.array]
    if top or bottom:
        out.append(f"      if (_x0 < _r0 + {top} || _x0 >= _r1 - {bottom}) __stcg(&{s.array}[(long)_x0 * _C + _c], _value);")
    for array, (low, high) in windows.items():
        slots = [f"_w_{array}_{k}" for k in range(high - low)] + [f"_w_{array}_{high - low}_new"]
        out += [f"      {slots[k]} = {slots[k + 1]};" for k in range(high - low)]
    out += ["    }", "  }", "}"]
    return out


def _windows(reads) -> dict[str, tuple[int, int]]:
    """Per array read at offsets ``(o, 0, ...)`` in more than one row, the rows (lowest,
    highest offset) its register window spans."""
    rows: dict[str, list[int]] = {}
    for array, offset in reads:
        if not any(offset[1:]):
            rows.setdefault(array, []).append(offset[0])
    return {a: (min(r), max(r)) for a, r in rows.items() if min(r) != max(r)}


def _load(array: str, row: str, offset: tuple[int, ...]) -> str:
    """C++ of the element of ``array`` at row ``row`` and the thread's column moved by the
    offset's other dimensions: from the block's strip, or from global memory for other strips'
    rows (only possible at a nonzero row offset)."""
    shift = offset[1] if len(offset) == 2 else f"{offset[1]} * _n2 + {offset[2]}"
    column = f"_c + ({shift})" if any(offset[1:]) else "_c"
    shared = f"_sh_{array}[({row} - _r0) * _C + {column}]"
    if not offset[0]:
        return shared
    return f"({row} >= _r0 && {row} < _r1 ? {shared} : __ldcg(&{array}[(long)({row}) * _C + {column}]))"


__all__ = ["COOPERATIVE_INCLUDE", "MIN_STRIP_ROWS", "RESIDENT_RANKS", "RESIDENT_THREADS", "ResidentKernel", "grid_barriers",
           "resident_kernel", "resident_text"]
