"""CUDA C for a GPU program (:mod:`polyopt.codegen.gpu_mapping`): ``__global__`` kernels and a
host launch wrapper.

Each kernel walks its thread coordinates with grid-stride loops (``threadIdx.x`` on the
coordinate with stride-1 accesses), so any grid covers any problem size; arrays are flat
``__restrict__`` pointers indexed in row-major order (read-only ones ``const``, so loads may use
the read-only path). A 2-d kernel whose body loops (gemm-like) gets register tiling: each thread
runs ``unroll`` coordinates per dimension, ``block`` apart (coalesced), in lockstep when all of
them are inside the domain (a slower per-coordinate path handles the edges); accumulators are
promoted to registers in both paths.

The source compiles with NVRTC (kernels only) and with nvcc, where the host wrapper
``void <name>(...)`` (device pointers; launches in host order) is compiled too. The Python
runtime (:mod:`polyopt.cuda`) runs the same host program through CuPy.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import product
from math import prod

from polyopt import expr as E
from polyopt.affine import extent_expr
from polyopt.codegen.ast import Block, For, If, abi_arguments
from polyopt.codegen.c import _PRIMARY, _CExpr, _ctype, c_prelude
from polyopt.codegen.gpu_mapping import GpuProgram, HostLoop, Kernel
from polyopt.codegen.kernel_body import (Assign, BodyNode, Promote, assignments,
                                         control_expressions, has_loop, jam, mentions, offset,
                                         promote_accumulators, rewrite)
from polyopt.errors import CodegenError
from polyopt.scop import Scop

#: Threads per block for 1, 2 and 3 thread coordinates (outermost first, last is x).
DEFAULT_BLOCK = {1: (256,), 2: (8, 32), 3: (2, 4, 32)}
#: Coordinates per thread in a register-tiled 2-d kernel.
DEFAULT_UNROLL = (4, 4)
#: Most blocks per grid dimension (x, y, z); the grid-stride loops cover the rest.
GRID_LIMIT = (2**31 - 1, 65535, 65535)


@dataclass(frozen=True)
class LaunchShape:
    """Threads per block and coordinates per thread, per coordinate (outermost first)."""

    block: tuple[int, ...]
    unroll: tuple[int, ...]

    def cuda_block(self) -> tuple[int, int, int]:
        """``blockDim`` as (x, y, z)."""
        dims = tuple(reversed(self.block)) + (1,) * (3 - len(self.block))
        return dims[0], dims[1], dims[2]

    def grid(self, lower: list[int], upper: list[int]) -> tuple[int, int, int] | None:
        """``gridDim`` (x, y, z) for coordinate bounds, None when there is nothing to run."""
        blocks = []
        for lo, hi, b, r in zip(lower, upper, self.block, self.unroll):
            if hi < lo:
                return None
            blocks.append(-(-(hi - lo + 1) // (b * r)))
        dims = list(reversed(blocks)) + [1] * (3 - len(blocks))
        return tuple(min(d, limit) for d, limit in zip(dims, GRID_LIMIT))


@dataclass(frozen=True)
class CudaSource:
    """The CUDA C translation unit of a program, and each kernel's launch shape."""

    program: GpuProgram
    source: str
    shapes: dict[str, LaunchShape]
    host_function: str


def launch_shape(kernel: Kernel, block=None, tile=None) -> LaunchShape:
    """The launch shape of ``kernel`` from the user's ``block``/``tile`` (per coordinate,
    outermost first; an int applies to every coordinate) or the defaults."""
    n = len(kernel.coords)
    if n == 0:
        return LaunchShape((), ())
    threads = _per_coordinate(block, n, "block") or DEFAULT_BLOCK[n]
    if prod(threads) > 1024:
        raise CodegenError(f"CUDA: block {threads} has more than 1024 threads")
    if tile is not None:
        sizes = _per_coordinate(tile, n, "tile")
        if any(s % t for s, t in zip(sizes, threads)):
            raise CodegenError(f"CUDA: tile {sizes} must be a multiple of the block {threads}")
        unroll = tuple(s // t for s, t in zip(sizes, threads))
    elif n == 2 and has_loop(kernel.body):
        unroll = DEFAULT_UNROLL
    else:
        unroll = (1,) * n
    if any(u > 1 for u in unroll) and mentions(control_expressions(kernel.body), set(kernel.coords)):
        unroll = (1,) * n  # control flow differs between coordinates: no lockstep
    return LaunchShape(threads, unroll)


def _per_coordinate(value, n: int, what: str) -> tuple[int, ...] | None:
    if value is None:
        return None
    values = (value,) * n if isinstance(value, int) else tuple(value)
    if len(values) != n or any(not isinstance(v, int) or v < 1 for v in values):
        raise CodegenError(f"CUDA: {what} must be a positive int or {n} positive ints, got {value!r}")
    return values


# ----- expressions -------------------------------------------------------------------------------

class _CudaExpr(_CExpr):
    """C expressions with arrays as flat row-major pointers (CUDA has no VLA types)."""

    def emit(self, e: E.Expr) -> tuple[str, int]:
        if isinstance(e, E.Access) and e.indices:
            shape = self.scop.arrays[e.array].shape
            flat = e.indices[0]
            for extent, index in zip(shape[1:], e.indices[1:]):
                size = extent_expr(extent, self.scop.params)
                flat = E.Binary("+", E.Binary("*", flat, size, flat.dtype), index, flat.dtype)
            return f"{e.array}[{self(flat)}]", 16
        return super().emit(e)


def _prelude() -> str:
    """The C emitter's helpers as device functions; NVRTC has no standard headers."""
    lines = []
    for line in c_prelude().splitlines():
        if line.startswith("#include"):
            continue
        lines.append(line.replace("static inline", "static __device__ inline"))
    return ("#ifdef __CUDACC_RTC__\ntypedef int int32_t;\ntypedef long long int64_t;\n#else\n"
            "#include <stdint.h>\n#endif\n" + "\n".join(lines) + "\n")


# ----- kernels -----------------------------------------------------------------------------------

def cuda_source(scop: Scop, program: GpuProgram, host_function: str, *, block=None,
                tile=None) -> CudaSource:
    """The CUDA C source of ``program``: device scalars, kernels, and the host wrapper."""
    emit = _CudaExpr(scop)
    shapes = {k.name: launch_shape(k, block, tile) for k in program.kernels}
    private, shared = _scalar_homes(scop, program)
    parts = [_prelude()]
    parts += [f"__device__ {_ctype(scop.arrays[s].dtype)} {s};" for s in shared]
    for kernel in program.kernels:
        parts.append(_kernel(scop, kernel, shapes[kernel.name], emit, private.get(kernel.name, ())))
    parts.append(_host_wrapper(scop, program, shapes, host_function, emit))
    return CudaSource(program, "\n".join(parts) + "\n", shapes, host_function)


def _scalar_homes(scop: Scop, program: GpuProgram) -> tuple[dict[str, list[str]], list[str]]:
    """Local scalars used by one kernel outside host loops live in its threads' registers;
    the others in ``__device__`` variables (their values cross kernel launches)."""
    users: dict[str, set[str]] = {}
    for kernel in program.kernels:
        for stmt in kernel.statements:
            for ref in scop.statement(stmt).accesses:
                if scop.arrays[ref.array].local:
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
    written = {w.array for s in kernel.statements for w in scop.statement(s).writes}
    params = []
    for arg in abi_arguments(scop):
        if arg.kind == "param":
            params.append(f"long {arg.name}")
        elif arg.kind == "scalar":
            params.append(f"{_ctype(arg.dtype)} {arg.name}")
        else:
            const = "" if arg.name in written else "const "
            params.append(f"{const}{_ctype(arg.dtype)} *__restrict__ {arg.name}")
    return params + [f"long {v}" for v in kernel.host_vars]


def _kernel(scop: Scop, kernel: Kernel, shape: LaunchShape, emit, private) -> str:
    threads = prod(shape.block) if shape.block else 1
    head = (f'extern "C" __global__ void __launch_bounds__({threads}) '
            f"{kernel.name}({', '.join(_kernel_parameters(scop, kernel))})")
    out = [head, "{"]
    out += [f"  {_ctype(scop.arrays[s].dtype)} {s} = 0;" for s in private]
    body = assignments(scop, kernel.body)
    if not kernel.coords:
        out.append("  if (blockIdx.x != 0 || threadIdx.x != 0) return;")
        _emit(promote_accumulators(body), emit, out, 1)
        return "\n".join(out + ["}"])
    axes = "xyz"
    depth = 1
    n = len(kernel.coords)
    for d, coord in enumerate(kernel.coords):
        axis = axes[n - 1 - d]
        span = shape.block[d] * shape.unroll[d]
        out.append(f"{'  ' * depth}for (long {coord} = {emit.at(kernel.lower[d], _PRIMARY)} + "
                   f"(long)blockIdx.{axis} * {span} + threadIdx.{axis}; "
                   f"{coord} <= {emit.at(kernel.upper[d], _PRIMARY)}; "
                   f"{coord} += (long)gridDim.{axis} * {span}) {{")
        depth += 1
    pad = "  " * depth
    if any(u > 1 for u in shape.unroll):
        points = [offset(kernel.coords, tuple(r * b for r, b in zip(rs, shape.block)))
                  for rs in product(*(range(u) for u in shape.unroll))]
        every = " && ".join(f"({emit(E.substitute(kernel.guard, s))})" for s in points)
        out.append(f"{pad}if ({every}) {{")
        _emit(promote_accumulators(jam(body, kernel.coords, shape.block, shape.unroll)),
              emit, out, depth + 1)
        out.append(f"{pad}}} else {{  /* at the domain's edge: one coordinate at a time */")
        for d in range(n):
            out.append(f"{pad}  for (int _u{d} = 0; _u{d} < {shape.unroll[d]}; _u{d}++)")
        out.append(f"{pad}  {{")
        names = {c: c + "_" for c in kernel.coords}
        out.append(f"{pad}    const long " + ", ".join(
            f"{c}_ = {c} + _u{d} * {shape.block[d]}" for d, c in enumerate(kernel.coords)) + ";")
        out.append(f"{pad}    if ({emit(E.substitute(kernel.guard, _renamer(names)))}) {{")
        _emit(promote_accumulators(rewrite(body, _renamer(names))), emit, out, depth + 3)
        out.append(f"{pad}    }}")
        out.append(f"{pad}  }}")
        out.append(f"{pad}}}")
    else:
        out.append(f"{pad}if ({emit(kernel.guard)}) {{")
        _emit(promote_accumulators(body), emit, out, depth + 1)
        out.append(f"{pad}}}")
    for d in range(n):
        depth -= 1
        out.append(f"{'  ' * depth}}}")
    return "\n".join(out + ["}"])


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
        loop = node.loop
        first = E.substitute(loop.cond, _renamer_to(loop.var, loop.init))
        out.append(f"{pad}if ({emit(first)}) {{")
        for name, element in node.registers:
            out.append(f"{pad}  {_ctype(element.dtype)} {name} = {emit(element)};")
        _emit(loop, emit, out, depth + 1)
        for name, element in node.registers:
            out.append(f"{pad}  {emit(element)} = {name};")
        out.append(f"{pad}}}")
    elif isinstance(node, Assign):
        out.append(f"{pad}{emit(node.target)} = {emit(node.value)};  /* {node.statement} */")
    else:
        raise CodegenError(f"CUDA: cannot emit {node!r}")


def _renamer_to(var: str, value: E.Expr):
    return lambda e: value if isinstance(e, E.Var) and e.name == var else None


# ----- host wrapper ------------------------------------------------------------------------------

def _host_wrapper(scop: Scop, program: GpuProgram, shapes: dict[str, LaunchShape],
                  name: str, emit) -> str:
    """``void name(...)`` launching the kernels in host order (nvcc only; NVRTC skips it)."""
    params = []
    for arg in abi_arguments(scop):
        if arg.kind == "array":
            params.append(f"{_ctype(arg.dtype)} *{arg.name}")
        else:
            params.append(f"{'long' if arg.kind == 'param' else _ctype(arg.dtype)} {arg.name}")
    out = ["#ifndef __CUDACC_RTC__", "static inline unsigned pl_blocks(long lo, long hi, long span, long limit)",
           "{ long n = (hi - lo + span) / span; return (unsigned)(n < limit ? n : limit); }",
           f'extern "C" void {name}({", ".join(params) or "void"})', "{"]
    _host_steps(scop, program.host, shapes, emit, out, 1)
    out += ["}", "#endif"]
    return "\n".join(out)


def _host_steps(scop, steps, shapes, emit, out, depth) -> None:
    pad = "  " * depth
    args = [a.name for a in abi_arguments(scop)]
    for step in steps:
        if isinstance(step, HostLoop):
            out.append(f"{pad}for (long {step.var} = {emit(step.lower)}; {step.var} <= "
                       f"{emit.at(step.upper, _PRIMARY)}; {step.var}++) {{")
            _host_steps(scop, step.body, shapes, emit, out, depth + 1)
            out.append(f"{pad}}}")
            continue
        shape = shapes[step.name]
        call_args = ", ".join(args + list(step.host_vars))
        if not step.coords:
            out.append(f"{pad}{step.name}<<<1, 1>>>({call_args});")
            continue
        n = len(step.coords)
        grid = ["1", "1", "1"]
        conds = []
        for d in range(n):
            axis = n - 1 - d
            lo, hi = emit(step.lower[d]), emit(step.upper[d])
            conds.append(f"({hi}) >= ({lo})")
            grid[axis] = f"pl_blocks({lo}, {hi}, {shape.block[d] * shape.unroll[d]}, {GRID_LIMIT[axis]})"
        bx, by, bz = shape.cuda_block()
        out.append(f"{pad}if ({' && '.join(conds)})")
        out.append(f"{pad}  {step.name}<<<dim3({', '.join(grid)}), dim3({bx}, {by}, {bz})>>>({call_args});")
