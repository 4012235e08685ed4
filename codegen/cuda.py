"""CUDA C for a GPU program (:mod:`polyopt.codegen.gpu_mapping`): ``__global__`` kernels and a
host launch wrapper.

Each kernel walks its thread coordinates with grid-stride loops (``threadIdx.x`` on the
coordinate with stride-1 accesses), so any grid covers any problem size; arrays are flat
``__restrict__`` pointers indexed in row-major order (read-only ones ``const``, so loads may use
the read-only path). A 2-d kernel whose body loops (gemm-like) gets register tiling: each thread
runs ``unroll`` coordinates per dimension, ``block`` apart (coalesced), in lockstep when all of
them are inside the domain (a slower per-coordinate path handles the edges); accumulators are
promoted to registers in both paths. Where reused read-only tiles can be staged in shared
memory (:mod:`polyopt.codegen.shared_memory`), the whole block takes the staged path together
when its tile is inside the (convex) domain, and a thread's coordinates come in runs of
adjacent ones (``vector``: one 16-byte shared-memory load reads a run), the runs ``block``
runs apart (a warp's loads of one run position cover consecutive words: no bank conflicts).

The source compiles with NVRTC (kernels only) and with nvcc, where the host wrapper
``void <name>(...)`` (device pointers; launches in host order) is compiled too. The Python
runtime (:mod:`polyopt.targets.cuda`) runs the same host program through CuPy.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from itertools import product
from math import gcd, prod
from typing import Iterable

from polyopt.analysis import expr as E
from polyopt.analysis.affine import extent_expr
from polyopt.codegen.loop_nodes import Block, For, If
from polyopt.codegen.ast import abi_arguments
from polyopt.codegen.c import C_AND, C_CONDITIONAL, C_PRIMARY, CExpr, c_type_name, c_prelude
from polyopt.codegen.gpu_host import HostStatement
from polyopt.codegen.gpu_mapping import BlockKernel, GpuProgram, HostLoop, Kernel
from polyopt.codegen.gpu_reduction import GROUP, PART, SplitSum, split_sums
from polyopt.codegen.kernel_body import (Assign, BodyNode, Promote, assignments,
                                         control_expressions, has_loop, jam, offset,
                                         promote_accumulators, promoted_arrays, rewrite)
from polyopt.codegen.promotion import mentions
from polyopt.codegen.shared_memory import HALF, Staged, stage_reads
from polyopt.errors import CodegenError
from polyopt.analysis.scop import Scop
from polyopt.types import DType, boolean, i64

#: Threads per block for 1, 2 and 3 thread coordinates (outermost first, last is x).
DEFAULT_BLOCK = {1: (256,), 2: (8, 32), 3: (2, 4, 32)}
#: Coordinates per thread of a 3-d kernel whose threads run no loop (a stencil's sweep): two
#: along x, a block apart, so each thread has twice the loads in flight. heat-3d on an H100
#: (docs/performance.md, "Memory-bound kernels"): EXTRALARGE 149.8 -> 113.4 ms (1.70 -> 2.26
#: TB/s); two along z or y, or four along z, were slower (four along x: not measured).
STENCIL_3D_UNROLL = (1, 1, 2)
#: Coordinates per thread in a register-tiled 2-d kernel, by element size in bytes (measured on
#: gemm on an H100, docs/performance.md "GPU"). For f64 a 64x128 tile (``block=(8, 32),
#: tile=(64, 128)``) is faster at 4096^3 (8.1 against 13.6 ms) but much slower at PolyBench
#: LARGE (gemm 1.4 against 0.6 ms, syrk 4.7 against 1.5), where partial edge tiles dominate.
DEFAULT_UNROLL = {4: (8, 4), 8: (4, 4)}
#: The wider (block, tile) a register-tiled 2-d kernel with default shape also gets, by element
#: size; a launch takes it when its grid has at least WIDE_MIN_BLOCKS blocks (so each SM has
#: several: partial edge tiles, which run one coordinate at a time, no longer dominate).
WIDE_SHAPE = {8: ((8, 32), (64, 128))}
WIDE_MIN_BLOCKS = 1024
#: Adjacent coordinates per run in 2-d shared-memory kernels, by element size: f32 rows whole,
#: columns in runs of 4 (16 bytes: one vector load); f64 coordinates a block apart (measured
#: faster at LARGE: gemm 0.60 against 0.76 ms with runs of 2, syrk 1.46 against 2.23 ms).
DEFAULT_VECTOR = {4: (8, 4), 8: (1, 1)}
#: Most blocks per grid dimension (x, y, z); grid-stride loops cover the rest in kernels of three
#: coordinates (:attr:`LaunchShape.strided`).
GRID_LIMIT = (2**31 - 1, 65535, 65535)
#: Coordinates to which a sweep kernel's first x block origin is rounded down (a warp's width):
#: rows that start on an aligned address are then read in whole segments by every warp.
X_ALIGN = 32
#: Threads of a one-block kernel (:class:`~polyopt.codegen.gpu_mapping.BlockKernel`): the
#: most a block has, since its phases' loops are all the parallelism it gets (a whole number of
#: warps: its split sums add the warps' partial sums in shared memory).
ONE_BLOCK_THREADS = 1024


@dataclass(frozen=True)
class LaunchShape:
    """Threads per block and coordinates per thread, per coordinate (outermost first);
    ``vector``: in a shared-memory kernel, a thread's coordinates come in runs of this many
    adjacent ones (its reads of a staged tile are contiguous words), the runs ``block`` runs
    apart; elsewhere (and with runs of 1) they are ``block`` apart (coalesced global accesses).
    ``parts``: threads of a warp sharing each coordinate (split sums,
    :mod:`polyopt.codegen.gpu_reduction`); ``block`` then counts coordinates, not threads.
    ``align``: block origins along ``x`` start at a multiple of this many coordinates."""

    block: tuple[int, ...]
    unroll: tuple[int, ...]
    vector: tuple[int, ...] = ()
    parts: int = 1
    align: int = 1

    def x_origin(self, lower: int) -> int:
        """The first block's ``x`` origin for a lower bound: rounded down to a multiple of
        ``align`` (:data:`X_ALIGN`), so a warp's accesses of a row start where the row's aligned
        segments do; the threads below the bound fail the kernel's guard."""
        return lower // self.align * self.align

    def offsets(self, runs: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
        """Per coordinate, the offsets of a thread's coordinates from its first one, for runs
        of ``runs[d]`` adjacent coordinates."""
        return tuple(tuple(r // v * b * v + r % v for r in range(u))
                     for b, u, v in zip(self.block, self.unroll, runs))

    def cuda_block(self) -> tuple[int, int, int]:
        """``blockDim`` as (x, y, z)."""
        dims = tuple(reversed(self.block)) + (1,) * (3 - len(self.block))
        return dims[0] * self.parts, dims[1], dims[2]

    @property
    def strided(self) -> bool:
        """Whether the kernel walks its block origins in grid-stride loops (3 coordinates);
        with fewer, each block has one origin: x's grid limit is beyond any array, and y's
        blocks past its limit go on in ``blockIdx.z`` (a loop, even one that runs once, slows a
        stencil sweep: docs/performance.md, "Stencils: sweeps, fused nests and time tiles")."""
        return len(self.block) > 2

    def grid(self, lower: list[int], upper: list[int]) -> tuple[int, int, int] | None:
        """``gridDim`` (x, y, z) for coordinate bounds, None when there is nothing to run."""
        blocks = []
        for d, (lo, hi, b, r) in enumerate(zip(lower, upper, self.block, self.unroll)):
            if hi < lo:
                return None
            if d == len(self.block) - 1:
                lo = self.x_origin(lo)
            blocks.append(-(-(hi - lo + 1) // (b * r)))
        dims = list(reversed(blocks)) + [1] * (3 - len(blocks))
        if self.strided:
            return tuple(min(d, limit) for d, limit in zip(dims, GRID_LIMIT))
        if dims[0] > GRID_LIMIT[0]:
            raise CodegenError(f"CUDA: {dims[0]} blocks along x exceed the grid's {GRID_LIMIT[0]}")
        y = min(dims[1], GRID_LIMIT[1])
        return dims[0], y, -(-dims[1] // y)


@dataclass(frozen=True)
class CudaSource:
    """The CUDA C translation unit of a program, and each kernel's launch shape; ``wide`` names
    the variant of a kernel with the wider tile (:data:`WIDE_SHAPE`), where it has one (its
    shape is in ``shapes`` too)."""

    program: GpuProgram
    source: str
    shapes: dict[str, LaunchShape]
    host_function: str
    wide: dict[str, str] = field(default_factory=dict)

    def choose(self, kernel: str, lower: list[int], upper: list[int]
               ) -> tuple[str, LaunchShape, tuple[int, int, int] | None]:
        """The variant of ``kernel`` to launch for these coordinate bounds: (name, shape,
        grid); the wide one when its grid has at least :data:`WIDE_MIN_BLOCKS` blocks."""
        if kernel in self.wide:
            name = self.wide[kernel]
            grid = self.shapes[name].grid(lower, upper)
            if grid is not None and prod(grid) >= WIDE_MIN_BLOCKS:
                return name, self.shapes[name], grid
        return kernel, self.shapes[kernel], self.shapes[kernel].grid(lower, upper)


def launch_shape(kernel: Kernel, element_bytes: int, block=None, tile=None, vector=None, *,
                 uses_scalars: bool = False) -> LaunchShape:
    """The launch shape of ``kernel`` from the user's ``block``/``tile``/``vector`` (per
    coordinate, outermost first; an int applies to every coordinate) or the defaults (which
    depend on the size of the arrays' elements; a run never exceeds a thread's coordinates).
    A kernel that ``uses_scalars`` (local scalars, one register per thread) runs one coordinate
    per thread: jammed copies would share the register."""
    n = len(kernel.coords)
    if n == 0:
        return LaunchShape((), ())
    tiled = n == 2 and has_loop(kernel.body)
    threads = _per_coordinate(block, n, "block") or DEFAULT_BLOCK[n]
    if prod(threads) > 1024:
        raise CodegenError(f"CUDA: block {threads} has more than 1024 threads")
    if tile is not None:
        sizes = _per_coordinate(tile, n, "tile")
        if any(s % t for s, t in zip(sizes, threads)):
            raise CodegenError(f"CUDA: tile {sizes} must be a multiple of the block {threads}")
        unroll = tuple(s // t for s, t in zip(sizes, threads))
    elif tiled:
        unroll = DEFAULT_UNROLL.get(element_bytes, DEFAULT_UNROLL[8])
    elif n == 3 and block is None and not has_loop(kernel.body):
        unroll = STENCIL_3D_UNROLL
    else:
        unroll = (1,) * n
    if any(u > 1 for u in unroll) and (uses_scalars or mentions(control_expressions(kernel.body),
                                                                set(kernel.coords))):
        unroll = (1,) * n  # no lockstep: control flow differs between coordinates, or scalars
    runs = _per_coordinate(vector, n, "vector") or (
        DEFAULT_VECTOR.get(element_bytes, (1, 1)) if n == 2 else (1,) * n)
    sweep = all(u == 1 for u in unroll) and threads[-1] % X_ALIGN == 0
    return LaunchShape(threads, unroll, tuple(gcd(v, u) for v, u in zip(runs, unroll)),
                       align=X_ALIGN if sweep else 1)


def _per_coordinate(value, n: int, what: str) -> tuple[int, ...] | None:
    if value is None:
        return None
    values = (value,) * n if isinstance(value, int) else tuple(value)
    if len(values) != n or any(not isinstance(v, int) or v < 1 for v in values):
        raise CodegenError(f"CUDA: {what} must be a positive int or {n} positive ints, got {value!r}")
    return values


# ----- expressions -------------------------------------------------------------------------------

class CudaExpr(CExpr):
    """C expressions with arrays as flat row-major pointers (CUDA has no VLA types)."""

    def emit(self, e: E.Expr) -> tuple[str, int]:
        if isinstance(e, E.Access) and e.array not in self.scop.arrays:  # a shared buffer
            return f"{e.array}[{self(e.indices[0])}]", C_PRIMARY
        if isinstance(e, E.Access) and e.indices:
            shape = self.scop.arrays[e.array].shape
            flat = e.indices[0]
            for extent, index in zip(shape[1:], e.indices[1:]):
                size = extent_expr(extent, self.scop.params)
                flat = E.Binary("+", E.Binary("*", flat, size, flat.dtype), index, flat.dtype)
            return f"{e.array}[{self(flat)}]", C_PRIMARY
        if isinstance(e, E.Access) and not self.scop.arrays[e.array].local:
            return f"{e.array}[0]", C_PRIMARY  # a 0-d array argument points to its one element
        return super().emit(e)


#: The CUDA headers defining the half types (NVRTC finds them: CuPy passes the toolkit's
#: include folder), included only by kernels that use them.
_HALF_HEADERS = {"f16": "#include <cuda_fp16.h>", "bf16": "#include <cuda_bf16.h>"}


def cuda_prelude(dtypes: Iterable[DType] = ()) -> str:
    """The C emitter's helpers for the kernels and the host wrapper (whose loop bounds may
    divide); NVRTC has no standard headers. ``dtypes``: the element types the kernels use, for
    the headers of half types (``__half``, ``__nv_bfloat16``)."""
    lines = sorted({_HALF_HEADERS[t.name] for t in dtypes if t.name in _HALF_HEADERS})
    for line in c_prelude().splitlines():
        if line.startswith("#include"):
            continue
        lines.append(line.replace("static inline", "__host__ __device__ inline"))  # host loop bounds use them too
    return ("#ifdef __CUDACC_RTC__\ntypedef signed char int8_t;\ntypedef unsigned char uint8_t;\n"
            "typedef short int16_t;\ntypedef unsigned short uint16_t;\ntypedef int int32_t;\n"
            "typedef unsigned int uint32_t;\ntypedef long long int64_t;\ntypedef unsigned long long uint64_t;\n#else\n"
            "#include <stdint.h>\n#endif\n" + "\n".join(lines) + "\n")


# ----- kernels -----------------------------------------------------------------------------------

def cuda_source(scop: Scop, program: GpuProgram, host_function: str, *, block=None,
                tile=None, vector=None, shared: bool = True, reductions: bool = True) -> CudaSource:
    """The CUDA C source of ``program``: device scalars, kernels, and the host wrapper;
    ``shared`` allows shared-memory staging in register-tiled kernels, ``reductions`` the
    splitting of sums over the threads of a warp where the mapping marked them
    (:mod:`polyopt.codegen.gpu_reduction`)."""
    emit = CudaExpr(scop)
    element_bytes = max((a.dtype.numpy.itemsize for a in scop.arrays.values()), default=8)
    scalars = {name for name, array in scop.arrays.items() if array.local} - set(program.host_scalars)
    uses_scalars = {k.name: any(ref.array in scalars for s in k.statements
                                for ref in scop.statement(s).accesses) for k in program.kernels}
    private, on_device = _scalar_homes(scop, program)
    grid = [k for k in program.kernels if isinstance(k, Kernel)]
    split = {}
    if reductions and tile is None:
        for k in grid:
            found = split_sums(assignments(scop, k.body), k.sums, k.coords,  # (placed by hand: not)
                               set(private.get(k.name, ()))) if k.sums and not k.memory else None
            if found is not None:
                split[k.name] = found
    shapes = {k.name: launch_shape(k, element_bytes, block, tile, vector,
                                   uses_scalars=uses_scalars[k.name]) for k in grid}
    shapes.update({k.name: LaunchShape((ONE_BLOCK_THREADS,), (1,))
                   for k in program.kernels if isinstance(k, BlockKernel)})
    for name, (_, n_parts) in split.items():
        shapes[name] = _split_shape(shapes[name], n_parts)
    wide = {}
    if block is None and tile is None and element_bytes in WIDE_SHAPE:
        for k in grid:
            if len(k.coords) != 2 or all(u == 1 for u in shapes[k.name].unroll):
                continue  # not register-tiled
            shape = launch_shape(k, element_bytes, *WIDE_SHAPE[element_bytes], vector,
                                 uses_scalars=uses_scalars[k.name])
            wide[k.name] = f"{k.name}_w"
            shapes[wide[k.name]] = shape
    parts = [cuda_prelude(a.dtype for a in scop.arrays.values())]
    parts += [f"__device__ {c_type_name(scop.arrays[s].dtype)} {s};" for s in on_device]
    for kernel in program.kernels:
        if isinstance(kernel, BlockKernel):
            parts.append(_block_kernel(scop, kernel, emit, private.get(kernel.name, ()), reductions))
            continue
        variants = [kernel] + ([replace(kernel, name=wide[kernel.name])] if kernel.name in wide
                               else [])
        if kernel.name in split:
            parts.append(_split_kernel(scop, kernel, shapes[kernel.name], split[kernel.name][0], emit,
                                       private.get(kernel.name, ())))
            continue
        for variant in variants:
            parts.append(_kernel(scop, variant, shapes[variant.name], emit,
                                 private.get(kernel.name, ()), shared))
    parts.append(_host_wrapper(scop, program, shapes, wide, host_function, emit))
    return CudaSource(program, "\n".join(parts) + "\n", shapes, host_function, wide)


def _scalar_homes(scop: Scop, program: GpuProgram) -> tuple[dict[str, list[str]], list[str]]:
    """Local scalars used by one kernel outside host loops live in its threads' registers (a
    one-block kernel's in its shared memory); the others in ``__device__`` variables (their
    values cross kernel launches); the host's scalars are kernel arguments."""
    users: dict[str, set[str]] = {}
    for kernel in program.kernels:
        for stmt in kernel.statements:
            for ref in scop.statement(stmt).accesses:
                if scop.arrays[ref.array].local and ref.array not in program.host_scalars:
                    users.setdefault(ref.array, set()).add(kernel.name)
    by_name = {k.name: k for k in program.kernels}
    private: dict[str, list[str]] = {}
    shared = []
    for scalar in sorted(users):
        kernels = users[scalar]
        only = next(iter(kernels))
        if len(kernels) == 1 and not by_name[only].host_vars:
            private.setdefault(only, []).append(scalar)
        else:
            shared.append(scalar)
    return private, shared


def _kernel_parameters(scop: Scop, kernel: Kernel) -> list[str]:
    """A kernel's C parameters: the ABI's, then its host loop variables and host scalars."""
    written = {w.array for s in kernel.statements for w in scop.statement(s).writes}
    return (kernel_parameters(scop, written) + [f"long {v}" for v in kernel.host_vars]
            + [f"{c_type_name(scop.arrays[s].dtype)} {s}" for s in kernel.host_scalars])


def kernel_parameters(scop: Scop, written: set[str]) -> list[str]:
    """A kernel's C parameters for the native calling convention (``abi_arguments``): size
    parameters as long, scalars, arrays as restrict pointers (const unless in ``written``)."""
    params = []
    for arg in abi_arguments(scop):
        if arg.kind == "param":
            params.append(f"long {arg.name}")
        elif arg.kind == "scalar":
            params.append(f"{c_type_name(arg.dtype)} {arg.name}")
        else:
            const = "" if arg.name in written else "const "
            params.append(f"{const}{c_type_name(arg.dtype)} *__restrict__ {arg.name}")
    return params


def _opening(scop: Scop, kernel: Kernel, threads: int, private) -> list[str]:
    """A kernel's signature (``threads`` a block at most) and its private scalars."""
    head = (f'extern "C" __global__ void __launch_bounds__({threads}) '
            f"{kernel.name}({', '.join(_kernel_parameters(scop, kernel))})")
    return [head, "{"] + [f"  {c_type_name(scop.arrays[s].dtype)} {s} = 0;" for s in private]


def _kernel(scop: Scop, kernel: Kernel, shape: LaunchShape, emit, private, shared: bool) -> str:
    out = _opening(scop, kernel, prod(shape.block) if shape.block else 1, private)
    body = assignments(scop, kernel.body)
    placement = dict(kernel.memory)
    keep = frozenset(a for a, place in placement.items() if place == "global")

    def promote(node: BodyNode) -> BodyNode:
        return promote_accumulators(node, keep=keep)

    _check_registers(kernel, placement, promote(body))
    if not kernel.coords:
        _check_shared(kernel, placement, set(), "it runs on one thread")
        out.append("  if (blockIdx.x != 0 || threadIdx.x != 0) return;")
        _emit(promote(body), emit, out, 1)
        return "\n".join(out + ["}"])
    n = len(kernel.coords)
    declarations = len(out)
    for d in range(n):  # every thread of a block walks the same block origins
        axis = "xyz"[n - 1 - d]
        span = shape.block[d] * shape.unroll[d]
        lower, upper = emit.at(kernel.lower[d], C_PRIMARY), emit.at(kernel.upper[d], C_PRIMARY)
        if axis == "x":
            lower = x_origin(kernel.lower[d], shape.align, emit)
        if shape.strided:
            out.append(f"{'  ' * (d + 1)}for (long _b{d} = {lower} + (long)blockIdx.{axis} * {span}; "
                       f"_b{d} <= {upper}; _b{d} += (long)gridDim.{axis} * {span}) {{")
            continue
        block = "(long)blockIdx.x" if axis == "x" else "((long)blockIdx.z * gridDim.y + blockIdx.y)"
        out.append(f"{'  ' * (d + 1)}const long _b{d} = {lower} + {block} * {span};")
        out.append(f"{'  ' * (d + 1)}if (_b{d} <= {upper}) {{")
    depth = n + 1
    pad = "  " * depth
    placeholder = f"{pad}/* coordinates */"
    out.append(placeholder)  # filled in once the thread layout is known
    runs = (1,) * n  # a thread's coordinates: ``block`` apart (coalesced global accesses)
    if all(u == 1 for u in shape.unroll):
        _check_shared(kernel, placement, set(), "it runs one coordinate a thread (shared-memory tiles "
                      "need a register-tiled 2-d kernel)")
        out.append(f"{pad}if ({emit(kernel.guard)}) {{")
        _emit(promote(body), emit, out, depth + 1)
        out.append(f"{pad}}}")
    else:
        buffers = []
        read_only = _read_only(scop, kernel) if shared and kernel.convex else set()
        placed_shared = {a for a, place in placement.items() if place == "shared"}
        read_only = read_only & placed_shared if placed_shared else read_only - set(placement)
        if read_only:
            size = max(scop.arrays[a].dtype.numpy.itemsize for a in read_only)
            reach = tuple((b - 1) * v + 1 for b, v in zip(shape.block, shape.vector))
            fast = promote(jam(body, kernel.coords, shape.offsets(shape.vector)))
            fast, buffers = stage_reads(fast, kernel.coords, reach, read_only, size,
                                            prod(shape.block))
        why = ("shared=False" if not shared else "its domain is not convex" if not kernel.convex
               else "its reads of the array do not form tiles the block can stage")
        _check_shared(kernel, placement, {b.array for b in buffers}, why)
        if buffers:  # the whole block takes the staged path together: test the tile's corners
            runs = shape.vector
            out[declarations:declarations] = [
                f"  __shared__ __align__(16) {c_type_name(b.dtype)} {b.name}[{2 * b.size}];"
                for b in buffers]
            tile = [b * u for b, u in zip(shape.block, shape.unroll)]
            points = [_placing(kernel.coords, [E.Binary("+", E.Var(f"_b{d}", "iter"), E.Const(c * (t - 1), i64), i64)
                                               for d, (c, t) in enumerate(zip(corner, tile))])
                      for corner in product((0, 1), repeat=n)]
        else:  # each thread tests its own coordinates
            fast = promote(jam(body, kernel.coords, shape.offsets(runs)))
            points = [offset(kernel.coords, shift) for shift in product(*shape.offsets(runs))]
        every = " && ".join(f"({emit(E.substitute(kernel.guard, p))})" for p in points)
        out.append(f"{pad}if ({every}) {{")
        _emit(fast, emit, out, depth + 1)
        out.append(f"{pad}}} else {{  /* at the domain's edge: one coordinate at a time */")
        for d in range(n):
            out.append(f"{pad}  for (int _u{d} = 0; _u{d} < {shape.unroll[d]}; _u{d}++)")
        out.append(f"{pad}  {{")
        names = {c: c + "_" for c in kernel.coords}
        out.append(f"{pad}    const long " + ", ".join(
            f"{c}_ = {c} + {_run_offset(f'_u{d}', shape.block[d], shape.unroll[d], runs[d])}"
            for d, c in enumerate(kernel.coords)) + ";")
        out.append(f"{pad}    if ({emit(E.substitute(kernel.guard, _renamer(names)))}) {{")
        _emit(promote(rewrite(body, _renamer(names))), emit, out, depth + 3)
        out.append(f"{pad}    }}")
        out.append(f"{pad}  }}")
        out.append(f"{pad}}}")
    out[out.index(placeholder)] = (f"{pad}const long " + ", ".join(
        f"{c} = _b{d} + threadIdx.{'xyz'[n - 1 - d]}{f' * {runs[d]}' if runs[d] > 1 else ''}"
        for d, c in enumerate(kernel.coords)) + ";")
    for d in reversed(range(n)):
        out.append(f"{'  ' * (d + 1)}}}")
    return "\n".join(out + ["}"])


def _block_kernel(scop: Scop, kernel: BlockKernel, emit, scalars, reductions: bool) -> str:
    """A one-block kernel: its ``scalars`` in shared memory (zeroed by thread 0), then its
    steps (:func:`_block_steps`)."""
    out = _opening(scop, kernel, ONE_BLOCK_THREADS, ())
    out += [f"  __shared__ {c_type_name(scop.arrays[s].dtype)} {s};" for s in scalars]
    if scalars:
        out.append(f"  if (threadIdx.x == 0) {{ {' '.join(f'{s} = 0;' for s in scalars)} }}")
        out.append("  __syncthreads();")
    _block_steps(scop, kernel.steps, emit, out, 1, reductions)
    return "\n".join(out + ["}"])


def _block_steps(scop: Scop, steps, emit, out: list[str], depth: int, reductions: bool) -> None:
    """The loops (every thread walks them) and phases of a one-block kernel, a barrier after
    each phase: a phase's reads come after the writes of every phase before it."""
    pad = "  " * depth
    for step in steps:
        if isinstance(step, HostLoop):
            out.append(f"{pad}for (long {step.var} = {emit(step.lower)}; {step.var} <= "
                       f"{emit.at(step.upper, C_PRIMARY)}; {step.var}++) {{")
            _block_steps(scop, step.body, emit, out, depth + 1, reductions)
            out.append(f"{pad}}}")
            continue
        out.append(f"{pad}{{  /* {step.name} */")
        _block_phase(scop, step, emit, out, depth + 1, reductions)
        out.append(f"{pad}}}")
        out.append(f"{pad}__syncthreads();")


def _block_phase(scop: Scop, phase: Kernel, emit, out: list[str], depth: int, reductions: bool) -> None:
    """One phase of a one-block kernel: its coordinate's values strided over the block's
    threads; without one, thread 0 runs it, all threads running the loops of its sums where
    they split (:func:`~polyopt.codegen.gpu_reduction.split_sums` over the whole block)."""
    pad = "  " * depth
    body = assignments(scop, phase.body)
    if phase.coords:
        (coord,), (lower,), (upper,) = phase.coords, phase.lower, phase.upper
        out.append(f"{pad}for (long {coord} = {emit.at(lower, C_PRIMARY)} + (long)threadIdx.x; "
                   f"{coord} <= {emit.at(upper, C_PRIMARY)}; {coord} += {ONE_BLOCK_THREADS}) {{")
        out.append(f"{pad}  if ({emit(phase.guard)}) {{")
        _emit(promote_accumulators(body), emit, out, depth + 2)
        out += [f"{pad}  }}", f"{pad}}}"]
        return
    found = split_sums(body, phase.sums, (), set(), block_threads=ONE_BLOCK_THREADS) \
        if reductions and phase.sums else None
    if found is None:
        out.append(f"{pad}if (threadIdx.x == 0) {{")
        _emit(promote_accumulators(body), emit, out, depth + 1)
        out.append(f"{pad}}}")
        return
    out.append(f"{pad}const int {PART} = threadIdx.x;")
    _emit(found[0], emit, out, depth)


def _check_registers(kernel: Kernel, placement: dict[str, str], promoted: BodyNode) -> None:
    """CodegenError unless every array ``placement`` puts in registers has elements there."""
    missing = sorted(a for a, place in placement.items()
                     if place == "registers" and a not in promoted_arrays(promoted))
    if missing:
        raise CodegenError(f"CUDA: kernel {kernel.name} cannot keep {', '.join(missing)} in registers "
                           "(gpu_promote): no loop of it updates an element of it at an index the loop "
                           "does not move, with every access of the array in that loop to such elements")


def _check_shared(kernel: Kernel, placement: dict[str, str], staged: set[str], why: str) -> None:
    """CodegenError unless every array ``placement`` puts in shared memory is ``staged``; ``why``
    says why the others are not."""
    missing = sorted(a for a, place in placement.items() if place == "shared" and a not in staged)
    if missing:
        raise CodegenError(f"CUDA: kernel {kernel.name} cannot stage {', '.join(missing)} in shared "
                           f"memory (gpu_promote): {why}")


def _split_shape(shape: LaunchShape, parts: int) -> LaunchShape:
    """``shape`` (one coordinate or none) with ``parts`` threads a coordinate: a block keeps its
    threads (a whole number of warps) and covers ``parts`` times fewer coordinates; a kernel
    without coordinates is one warp."""
    if not shape.block:
        return LaunchShape((), (), (), parts)
    threads = max(shape.block[0], 32) // 32 * 32
    return LaunchShape((threads // parts,), (1,), (1,), parts)


def _split_kernel(scop: Scop, kernel: Kernel, shape: LaunchShape, body: BodyNode, emit,
                  private) -> str:
    """A kernel whose sums are split over ``shape.parts`` threads of a warp a coordinate
    (:mod:`polyopt.codegen.gpu_reduction`): lane ``l`` of a warp runs coordinate ``l % per_warp``
    of the warp's ones, as part ``l / per_warp``."""
    threads, _, _ = shape.cuda_block()
    per_warp = 32 // shape.parts
    group = sum(1 << (k * per_warp) for k in range(shape.parts))
    out = _opening(scop, kernel, threads, private)
    out += ["  const int _lane = threadIdx.x & 31;",
            f"  const int {PART} = _lane / {per_warp};",
            f"  const unsigned {GROUP} = {group:#x}u << (_lane % {per_warp});"]
    if not kernel.coords:
        out.append("  if (blockIdx.x != 0) return;")
        _emit(body, emit, out, 1)
        return "\n".join(out + ["}"])
    span = shape.block[0]
    out.append(f"  for (long _b0 = {emit.at(kernel.lower[0], C_PRIMARY)} + (long)blockIdx.x * {span}; "
               f"_b0 <= {emit.at(kernel.upper[0], C_PRIMARY)}; _b0 += (long)gridDim.x * {span}) {{")
    out.append(f"    const long {kernel.coords[0]} = _b0 + (threadIdx.x >> 5) * {per_warp} + _lane % {per_warp};")
    out.append(f"    if ({emit(kernel.guard)}) {{")
    _emit(body, emit, out, 3)
    out += ["    }", "  }", "}"]
    return "\n".join(out)


def _emit_split_sum(node: SplitSum, emit, out: list[str], depth: int) -> None:
    """A split loop: partial sums from -0.0 (adding it changes no value), the loop over this
    thread's iterations, the butterfly of shuffles over the coordinate's threads, and the
    first thread's update of each element."""
    if node.block:
        _emit_block_sum(node, emit, out, depth)
        return
    pad = "  " * depth
    out.append(f"{pad}{{")
    out.append(f"{pad}  __syncwarp({GROUP});")
    for name, element in node.partials:
        zero = "-0.0f" if element.dtype.name == "f32" else "-0.0"
        out.append(f"{pad}  {c_type_name(element.dtype)} {name} = {zero};")
    _emit(node.loop, emit, out, depth + 1)
    distance = 32 // node.parts
    while distance < 32:
        for name, _ in node.partials:
            out.append(f"{pad}  {name} += __shfl_xor_sync({GROUP}, {name}, {distance});")
        distance *= 2
    out.append(f"{pad}  if ({PART} == 0) {{")
    for name, element in node.partials:
        out.append(f"{pad}    {emit(element)} = {emit(element)} + {name};")
    out.append(f"{pad}  }}")
    out.append(f"{pad}  __syncwarp({GROUP});")
    out.append(f"{pad}}}")


def _emit_block_sum(node: SplitSum, emit, out: list[str], depth: int) -> None:
    """A loop split over every thread of a one-block kernel: barriers around it (thread 0's
    writes before it are read by all, its update after it comes after every read), partial
    sums from -0.0, a butterfly of shuffles within each warp, the warps' sums in shared memory,
    added by thread 0 in warp order (the same order on every run)."""
    pad = "  " * depth
    warps = node.parts // 32
    out.append(f"{pad}{{")
    out.append(f"{pad}  __syncthreads();")
    for name, element in node.partials:
        zero = "-0.0f" if element.dtype.name == "f32" else "-0.0"
        out.append(f"{pad}  {c_type_name(element.dtype)} {name} = {zero};")
        out.append(f"{pad}  __shared__ {c_type_name(element.dtype)} {name}_w[{warps}];")
    _emit(node.loop, emit, out, depth + 1)
    for name, _ in node.partials:
        for distance in (16, 8, 4, 2, 1):
            out.append(f"{pad}  {name} += __shfl_xor_sync(0xffffffffu, {name}, {distance});")
        out.append(f"{pad}  if ((threadIdx.x & 31) == 0) {name}_w[threadIdx.x >> 5] = {name};")
    out.append(f"{pad}  __syncthreads();")
    out.append(f"{pad}  if ({PART} == 0) {{")
    for name, element in node.partials:
        out.append(f"{pad}    for (int _k = 1; _k < {warps}; _k++) {name} += {name}_w[_k];")
        out.append(f"{pad}    {emit(element)} = {emit(element)} + {name};")
    out.append(f"{pad}  }}")
    out.append(f"{pad}  __syncthreads();")
    out.append(f"{pad}}}")


def _run_offset(index: str, block: int, unroll: int, run: int) -> str:
    """C for the offset of a thread's coordinate number ``index`` (see LaunchShape.offsets)."""
    if run == 1:
        return f"{index} * {block}"
    if run == unroll:
        return index
    return f"{index} / {run} * {block * run} + {index} % {run}"


def x_origin(lower: E.Expr, align: int, emit) -> str:
    """C for the first x block origin of a kernel whose x lower bound is ``lower``: rounded down
    to a multiple of ``align`` (:meth:`LaunchShape.x_origin`; folded where ``lower`` is a
    constant)."""
    if align == 1:
        return emit.at(lower, C_PRIMARY)
    if isinstance(lower, E.Const):
        return str(int(lower.value) // align * align)
    return f"pl_floordiv({emit(lower)}, {align}) * {align}"


def _read_only(scop: Scop, kernel: Kernel) -> set[str]:
    """Arrays (not local scalars) the kernel reads and does not write."""
    statements = [scop.statement(s) for s in kernel.statements]
    written = {w.array for s in statements for w in s.writes}
    return {r.array for s in statements for r in s.reads
            if r.array not in written and not scop.arrays[r.array].local}


def _placing(coords: tuple[str, ...], values: list[E.Expr]):
    """A substitution putting ``values`` in place of the coordinates."""
    table = dict(zip(coords, values))
    return lambda e: table.get(e.name) if isinstance(e, E.Var) else None


def _renamer(names: dict[str, str]):
    def rename(e: E.Expr):
        if isinstance(e, E.Var) and e.name in names:
            return E.Var(names[e.name], e.kind, e.dtype)
        return None
    return rename


def _emit(node: BodyNode, emit, out: list[str], depth: int) -> None:
    pad = "  " * depth
    if isinstance(node, Block):
        for child in node.body:
            _emit(child, emit, out, depth)
    elif isinstance(node, For):
        out.append(f"{pad}for (long {node.var} = {emit(node.init)}; {emit(node.cond)}; "
                   f"{node.var} += {node.step}) {{")
        _emit(node.body, emit, out, depth + 1)
        out.append(f"{pad}}}")
    elif isinstance(node, If):
        out.append(f"{pad}if ({emit(node.cond)}) {{")
        _emit(node.then, emit, out, depth + 1)
        if node.otherwise is not None:
            out.append(f"{pad}}} else {{")
            _emit(node.otherwise, emit, out, depth + 1)
        out.append(f"{pad}}}")
    elif isinstance(node, Promote):
        loop = node.loop.loop if isinstance(node.loop, Staged) else node.loop
        first = E.substitute(loop.cond, _renamer_to(loop.var, loop.init))
        out.append(f"{pad}if ({emit(first)}) {{")
        for name, element in node.registers:
            out.append(f"{pad}  {c_type_name(element.dtype)} {name} = {emit(element)};")
        _emit(node.loop, emit, out, depth + 1)
        for name, element in node.registers:
            out.append(f"{pad}  {emit(element)} = {name};")
        out.append(f"{pad}}}")
    elif isinstance(node, Staged):
        _emit_staged(node, emit, out, depth)
    elif isinstance(node, SplitSum):
        _emit_split_sum(node, emit, out, depth)
    elif isinstance(node, Assign):
        out.append(f"{pad}{emit(node.target)} = {emit(node.value)};  /* {node.statement} */")
    else:
        raise CodegenError(f"CUDA: cannot emit {node!r}")


def _emit_staged(node: Staged, emit, out: list[str], depth: int) -> None:
    """The strip-mined loop over double buffers: the first chunk is copied before the loop;
    each chunk loads the next one into registers, runs on the current half, stores the
    registers into the other half, and ends with the one barrier it needs."""
    pad = "  " * depth
    loop, chunk, threads = node.loop, node.chunk_var, node.threads
    at = lambda value: _renamer_to(loop.var, value)  # noqa: E731
    out.append(f"{pad}{{")
    out.append(f"{pad}  const int _t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);")
    out.append(f"{pad}  const long _first = {emit(loop.init)};")
    out.append(f"{pad}  int {HALF} = 0;")
    for buffer in node.buffers:  # the first chunk, straight into half 0
        out.append(f"{pad}  for (int _e = _t; _e < {prod(buffer.extents)}; _e += {threads}) {{")
        local, value = _copy_element(buffer, emit, out, depth + 2, "_first", chunk)
        out.append(f"{pad}    {buffer.name}[{local}] = {value};")
        out.append(f"{pad}  }}")
    out.append(f"{pad}  __syncthreads();")
    out.append(f"{pad}  for (long {chunk} = _first; "
               f"{emit(E.substitute(loop.cond, at(E.Var(chunk, 'iter'))))}; {chunk} += {node.chunk}) {{")
    out.append(f"{pad}    const long _next = {chunk} + {node.chunk};")
    out.append(f"{pad}    const bool _more = {emit(E.substitute(loop.cond, at(E.Var('_next', 'iter'))))};")
    counts = [-(-prod(b.extents) // threads) for b in node.buffers]
    for k, (buffer, count) in enumerate(zip(node.buffers, counts)):
        out.append(f"{pad}    {c_type_name(buffer.dtype)} _q{k}[{count}];")
    # next chunk -> registers; where the loop runs the whole next chunk and each buffer holds
    # exactly what it reads, every element is one the program reads: no bounds checks
    last_next = E.Binary("+", E.Var("_next", "iter"), E.Const(node.chunk - 1, i64), i64)
    exact = all(b.exact for b in node.buffers)
    if exact:
        out.append(f"{pad}    if ({emit(E.substitute(loop.cond, at(last_next)))}) {{")
        _prefetch(node, counts, emit, out, depth + 3, "", checked=False)
        out.append(f"{pad}    }} else {{")
    _prefetch(node, counts, emit, out, depth + 3 if exact else depth + 2, "_more && ", checked=True)
    if exact:
        out.append(f"{pad}    }}")
    # a full chunk runs a constant trip count (unrolled); isl's loop conditions are upper bounds
    # of the iterator, so the condition at the chunk's last value covers the whole chunk
    last = E.Binary("+", E.Var(chunk, "iter"), E.Const(node.chunk - 1, i64), i64)
    out.append(f"{pad}    if ({emit(E.substitute(loop.cond, at(last)))}) {{")
    out.append(f"{pad}      #pragma unroll")
    out.append(f"{pad}      for (int _i = 0; _i < {node.chunk}; _i++) {{")
    out.append(f"{pad}        const long {loop.var} = {chunk} + _i;")
    _emit(loop.body, emit, out, depth + 4)
    out.append(f"{pad}      }}")
    out.append(f"{pad}    }} else {{")
    bound = E.Binary("<", E.Var(loop.var, "iter"), E.Binary("+", E.Var(chunk, "iter"), E.Const(node.chunk, i64), i64), boolean)
    out.append(f"{pad}      for (long {loop.var} = {chunk}; {emit(bound)} && {emit.at(loop.cond, C_AND + 1)}; "
               f"{loop.var} += 1) {{")
    _emit(loop.body, emit, out, depth + 4)
    out.append(f"{pad}      }}")
    out.append(f"{pad}    }}")
    for k, (buffer, count) in enumerate(zip(node.buffers, counts)):  # registers -> other half
        out.append(f"{pad}    #pragma unroll")
        out.append(f"{pad}    for (int _n = 0; _n < {count}; _n++) {{")
        out.append(f"{pad}      const int _e = _t + _n * {threads};")
        out.append(f"{pad}      if (_more{_partial(buffer, count, threads, ' && ')}) {{")
        local, _ = _copy_element(buffer, emit, out, depth + 4, "_next", chunk)
        out.append(f"{pad}        {buffer.name}[(1 - {HALF}) * {buffer.size} + {local}] = _q{k}[_n];")
        out.append(f"{pad}      }}")
        out.append(f"{pad}    }}")
    out.append(f"{pad}    __syncthreads();")
    out.append(f"{pad}    {HALF} ^= 1;")
    out.append(f"{pad}  }}")
    out.append(f"{pad}}}")


def _prefetch(node: Staged, counts: list[int], emit, out: list[str], depth: int, guard: str, *,
              checked: bool) -> None:
    """Lines loading each thread's elements of the chunk at ``_next`` into ``_q0``, ``_q1``..,
    under ``guard`` (a C condition followed by ``&&``, or empty); ``checked``: elements outside
    their array read as 0."""
    pad = "  " * depth
    for k, (buffer, count) in enumerate(zip(node.buffers, counts)):
        out.append(f"{pad}#pragma unroll")
        out.append(f"{pad}for (int _n = 0; _n < {count}; _n++) {{")
        out.append(f"{pad}  const int _e = _t + _n * {node.threads};")
        condition = (guard + _partial(buffer, count, node.threads, "")).removesuffix(" && ")
        if condition:
            out.append(f"{pad}  if ({condition}) {{")
        inner = depth + (2 if condition else 1)
        _, value = _copy_element(buffer, emit, out, inner, "_next", node.chunk_var, checked)
        out.append(f"{'  ' * inner}_q{k}[_n] = {value};")
        if condition:
            out.append(f"{pad}  }}")
        out.append(f"{pad}}}")


def _partial(buffer, count: int, threads: int, joint: str) -> str:
    """The test that thread element ``_e`` is in ``buffer`` (empty when the threads' last
    round fills it exactly), after ``joint``."""
    total = prod(buffer.extents)
    return "" if count * threads == total else f"{joint}_e < {total}"


def _copy_element(buffer, emit, out: list[str], depth: int, chunk_value: str,
                  chunk_var: str, checked: bool = True) -> tuple[str, str]:
    """Lines placing element ``_e`` of ``buffer`` (the array's own order, so consecutive
    threads read consecutive addresses) for the chunk starting at ``chunk_value``: (its
    position in a half of the buffer, its value, or with ``checked`` 0 outside the array)."""
    pad = "  " * depth
    shape = emit.scop.arrays[buffer.array].shape
    stride, offsets = 1, []
    for d in reversed(range(len(buffer.extents))):
        offsets.insert(0, f"_e / {stride} % {buffer.extents[d]}" if stride > 1 else f"_e % {buffer.extents[d]}")
        stride *= buffer.extents[d]
    checks, local = [], []
    rename = _renamer_to(chunk_var, E.Var(chunk_value, "iter", i64))
    for d, (base, text) in enumerate(zip(buffer.base, offsets)):
        origin = emit.at(E.substitute(base, rename), C_PRIMARY)
        out.append(f"{pad}const long _d{d} = {text}, _g{d} = {origin} + _d{d};")
        extent = emit.at(extent_expr(shape[d], emit.scop.params), C_PRIMARY)
        checks.append(f"_g{d} >= 0 && _g{d} < {extent}")
        local.append(E.Var(f"_d{d}", "iter"))
    value = emit.at(buffer.value, C_CONDITIONAL)
    if checked:
        value = f"({' && '.join(checks)}) ? {value} : ({c_type_name(buffer.dtype)})0"
    return emit(buffer.local_index(local)), value


def _renamer_to(var: str, value: E.Expr):
    return lambda e: value if isinstance(e, E.Var) and e.name == var else None


# ----- host wrapper ------------------------------------------------------------------------------

def _host_wrapper(scop: Scop, program: GpuProgram, shapes: dict[str, LaunchShape],
                  wide: dict[str, str], name: str, emit) -> str:
    """``void name(...)`` launching the kernels in host order (nvcc only; NVRTC skips it)."""
    params = []
    for arg in abi_arguments(scop):
        if arg.kind == "array":
            params.append(f"{c_type_name(arg.dtype)} *{arg.name}")
        else:
            params.append(f"{'long' if arg.kind == 'param' else c_type_name(arg.dtype)} {arg.name}")
    out = ["#ifndef __CUDACC_RTC__", "#include <math.h>",
           "static inline unsigned pl_blocks(long lo, long hi, long span, long limit)",
           "{ long n = (hi - lo + span) / span; return (unsigned)(n < limit ? n : limit); }",
           "static inline unsigned pl_blocks_over(long lo, long hi, long span, long limit)",
           "{ long n = (hi - lo + span) / span; return (unsigned)((n + limit - 1) / limit); }",
           f'extern "C" void {name}({", ".join(params) or "void"})', "{"]
    out += [f"  {c_type_name(scop.arrays[s].dtype)} {s} = 0;" for s in program.host_scalars]
    _host_steps(scop, program.host, shapes, wide, emit, out, 1)
    out += ["}", "#endif"]
    return "\n".join(out)


def _host_steps(scop, steps, shapes, wide, emit, out, depth) -> None:
    pad = "  " * depth
    args = [a.name for a in abi_arguments(scop)]
    for step in steps:
        if isinstance(step, HostLoop):
            out.append(f"{pad}for (long {step.var} = {emit(step.lower)}; {step.var} <= "
                       f"{emit.at(step.upper, C_PRIMARY)}; {step.var}++) {{")
            _host_steps(scop, step.body, shapes, wide, emit, out, depth + 1)
            out.append(f"{pad}}}")
            continue
        if isinstance(step, HostStatement):  # computed here, as the Python launcher does
            _emit(assignments(scop, step.body), emit, out, depth)
            continue
        call_args = ", ".join(args + list(step.host_vars) + list(step.host_scalars))
        if not step.coords:
            out.append(f"{pad}{step.name}<<<1, {shapes[step.name].cuda_block()[0]}>>>({call_args});")
            continue
        conds = [f"({emit(hi)}) >= ({emit(lo)})" for lo, hi in zip(step.lower, step.upper)]
        out.append(f"{pad}if ({' && '.join(conds)}) {{")
        grid, launch = _launch_line(step, step.name, shapes[step.name], call_args, emit)
        if step.name in wide:  # the wider tile where its grid has enough blocks
            wide_grid, wide_launch = _launch_line(step, wide[step.name], shapes[wide[step.name]],
                                                  call_args, emit)
            out.append(f"{pad}  if ((long){' * (long)'.join(wide_grid)} >= {WIDE_MIN_BLOCKS})")
            out.append(f"{pad}    {wide_launch}")
            out.append(f"{pad}  else")
            out.append(f"{pad}    {launch}")
        else:
            out.append(f"{pad}  {launch}")
        out.append(f"{pad}}}")


def _launch_line(step: Kernel, name: str, shape: LaunchShape, call_args: str, emit
                 ) -> tuple[list[str], str]:
    """The grid dimensions (x, y, z as C) of launching ``name`` with ``shape`` for the
    coordinate bounds of ``step``, and the launch statement."""
    n = len(step.coords)
    grid = ["1", "1", "1"]
    for d in range(n):
        axis = n - 1 - d
        lo = x_origin(step.lower[d], shape.align, emit) if axis == 0 else emit(step.lower[d])
        hi, span = emit(step.upper[d]), shape.block[d] * shape.unroll[d]
        grid[axis] = f"pl_blocks({lo}, {hi}, {span}, {GRID_LIMIT[axis]})"
        if axis == 1 and not shape.strided:  # y's blocks past its limit go on in z
            grid[2] = f"pl_blocks_over({lo}, {hi}, {span}, {GRID_LIMIT[axis]})"
    bx, by, bz = shape.cuda_block()
    return grid, f"{name}<<<dim3({', '.join(grid)}), dim3({bx}, {by}, {bz})>>>({call_args});"
