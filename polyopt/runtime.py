"""Compiling kernels and calling them: argument binding and checking, and the compile cache.

``compile(kernel, target="cpu", algorithm=...)`` goes parse -> dependences -> schedule -> verify
-> loop AST -> C and LLVM -> native code, and caches the result on (source, dtype, options).
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import re
import time
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache

import numpy as np

from polyopt.affine import extent_expr
from polyopt.codegen.ast import Node, abi_arguments, build_loop_ast, loop_ast_text
from polyopt.codegen.c import c_function
from polyopt.codegen.llvm import STATUS_OK, STATUS_ZERO_DIVISION, NativeFunction, jit_compile, llvm_ir
from polyopt.errors import ArgumentError, ArgumentRangeError, ArgumentTypeError, KernelZeroDivisionError
from polyopt.interpreter import evaluate
from polyopt.islutil import ISL_LOCK, param_point
from polyopt.schedule import Schedule, schedule as run_scheduler
from polyopt.scop import Scop
from polyopt.verify import verify

#: The algorithm used when none is named.
DEFAULT_ALGORITHM = "pluto"
TARGETS = ("cpu", "cuda")

_CTYPES = {"f32": ctypes.c_float, "f64": ctypes.c_double, "i8": ctypes.c_int8, "u8": ctypes.c_uint8,
           "i16": ctypes.c_int16, "u16": ctypes.c_uint16, "i32": ctypes.c_int32, "u32": ctypes.c_uint32,
           "i64": ctypes.c_int64, "u64": ctypes.c_uint64}


@dataclass
class BoundArguments:
    """Call arguments sorted by role, with the size parameters inferred from array shapes."""

    params: dict[str, int]
    scalars: dict[str, object]
    arrays: dict[str, np.ndarray]


def _extent(text: str, params: dict[str, int]) -> int:
    return int(evaluate(_extent_tree(text, tuple(params)), params, {}))


@lru_cache(maxsize=4096)
def _extent_tree(text: str, names: tuple[str, ...]):
    """The parsed extent (cached: every call of a kernel evaluates its array shapes)."""
    return extent_expr(text, names)


def _infer_params(scop: Scop, shapes: dict[str, tuple[int, ...]], given: dict[str, int]) -> dict[str, int]:
    """Solve ``extent(params) == shape`` for the parameters not given explicitly."""
    params = dict(given)
    progress = True
    while progress:
        progress = False
        for name, shape in shapes.items():
            for extent, size in zip(scop.arrays[name].shape, shape):
                unknown = [p for p in scop.params if p not in params and _mentions(extent, p)]
                if len(unknown) != 1:
                    continue
                p = unknown[0]
                at0 = _extent(extent, {**params, p: 0})
                slope = _extent(extent, {**params, p: 1}) - at0
                if slope != 0 and (size - at0) % slope == 0:
                    params[p] = (size - at0) // slope
                    progress = True
    missing = [p for p in scop.params if p not in params]
    if missing:
        raise ArgumentTypeError(f"{scop.name}: cannot infer size parameter(s) {', '.join(missing)} from the "
                                "array shapes; pass them as arguments")
    return params


@lru_cache(maxsize=4096)
def _mentions(text: str, name: str) -> bool:
    return re.search(rf"\b{re.escape(name)}\b", text) is not None


def bind_arguments(scop: Scop, args: tuple, kwargs: dict) -> BoundArguments:
    """Match call arguments to the kernel's signature and check every array.

    Raises :class:`~polyopt.errors.ArgumentTypeError` (a TypeError) for missing/unknown
    arguments, non-arrays and wrong element types, :class:`~polyopt.errors.ArgumentError` (a
    ValueError) for wrong ranks, shapes, non-C-contiguous or read-only outputs, aliasing, and
    :class:`~polyopt.errors.ArgumentRangeError` (also an OverflowError) for integer sizes and
    scalars outside their native type.
    """
    names = [a.name for a in scop.arguments]
    if len(args) > len(names):
        raise ArgumentTypeError(f"{scop.name}() takes {len(names)} arguments ({', '.join(names)}), got {len(args)}")
    values = dict(zip(names, args))
    for key, value in kwargs.items():
        if key not in names:
            raise ArgumentTypeError(f"{scop.name}() got an unexpected argument '{key}'")
        if key in values:
            raise ArgumentTypeError(f"{scop.name}() got multiple values for argument '{key}'")
        values[key] = value
    missing = [n for n in names if n not in values]
    if missing:
        raise ArgumentTypeError(f"{scop.name}() is missing argument(s): {', '.join(missing)}")
    written = _written_arrays(scop)
    given, scalars, arrays = {}, {}, {}
    for arg in scop.arguments:
        value = values[arg.name]
        if arg.kind == "param":
            if isinstance(value, (bool, float)) or not isinstance(value, (int, np.integer)):
                raise ArgumentTypeError(f"{scop.name}(): size parameter '{arg.name}' must be an int, got {value!r}")
            given[arg.name] = _in_range(scop.name, "size parameter", arg.name, int(value), arg.dtype)
        elif arg.kind == "scalar":
            if not isinstance(value, (int, float, np.number)) or isinstance(value, bool):
                raise ArgumentTypeError(f"{scop.name}(): scalar '{arg.name}' must be a number, got {type(value).__name__}")
            if not arg.dtype.is_float and isinstance(value, (int, np.integer)):
                _in_range(scop.name, "scalar", arg.name, int(value), arg.dtype)
            scalars[arg.name] = value
        else:
            arrays[arg.name] = _check_array(scop, arg.name, value, arg.name in written)
    shapes = tuple((name, array.shape) for name, array in arrays.items())
    params = dict(_params_of_shapes(scop, shapes, tuple(given.items())))
    _check_aliasing(scop.name, arrays, written)
    return BoundArguments(params, scalars, arrays)


def _in_range(kernel: str, role: str, name: str, value: int, dtype) -> int:
    """``value`` if the integer type ``dtype`` holds it; else ArgumentRangeError (ctypes would
    pass it on modulo 2**bits: ``2**64 + 3`` as a size runs 3 steps, ``2**63`` none)."""
    low, high = dtype.limits
    if not low <= value <= high:
        raise ArgumentRangeError(f"{kernel}(): {role} '{name}' = {value} is outside the range of "
                                 f"{dtype} [{low}, {high}]", name=name)
    return value


@lru_cache(maxsize=256)
def _written_arrays(scop: Scop) -> frozenset[str]:
    return frozenset(w.array for s in scop.statements for w in s.writes)


@lru_cache(maxsize=4096)
def _params_of_shapes(scop: Scop, shapes: tuple, given: tuple) -> tuple[tuple[str, int], ...]:
    """The parameter values that give the arrays these shapes (``given`` ones as passed);
    ValueError when no values do. Cached: repeated calls with one shape skip the solving."""
    params = _infer_params(scop, dict(shapes), dict(given))
    for name, shape in shapes:
        expected = tuple(_extent(e, params) for e in scop.arrays[name].shape)
        if shape != expected:
            detail = ", ".join(f"{p}={v}" for p, v in params.items())
            raise ArgumentError(f"{scop.name}(): array '{name}' has shape {shape}, expected "
                                f"{expected} for {detail}")
    return tuple(params.items())


def _check_array(scop: Scop, name: str, value, is_written: bool) -> np.ndarray:
    spec = scop.arrays[name]
    if not isinstance(value, np.ndarray):
        raise ArgumentTypeError(f"{scop.name}(): argument '{name}' must be a numpy array, got {type(value).__name__}")
    if value.dtype != spec.dtype.numpy:
        raise ArgumentTypeError(f"{scop.name}(): array '{name}' has dtype {value.dtype}, expected "
                                f"{spec.dtype.numpy} ({spec.dtype})")
    if value.ndim != len(spec.shape):
        raise ArgumentError(f"{scop.name}(): array '{name}' must have {len(spec.shape)} dimensions, got {value.ndim}")
    if not value.flags.c_contiguous:
        raise ArgumentError(f"{scop.name}(): array '{name}' must be C-contiguous (use np.ascontiguousarray)")
    if not value.flags.aligned:  # the native code assumes element alignment
        raise ArgumentError(f"{scop.name}(): array '{name}' is not aligned to its element size "
                            "(use np.ascontiguousarray or np.require(..., requirements='A'))")
    if is_written and not value.flags.writeable:
        raise ArgumentError(f"{scop.name}(): array '{name}' is written by the kernel but is read-only")
    return value


def _check_aliasing(kernel: str, arrays: dict[str, np.ndarray], written: set[str]) -> None:
    names = list(arrays)
    for k, a in enumerate(names):
        for b in names[k + 1:]:
            if (a in written or b in written) and np.may_share_memory(arrays[a], arrays[b]):
                raise ArgumentError(f"{kernel}(): arrays '{a}' and '{b}' overlap in memory; "
                                    "the kernel assumes distinct arrays")


def abi_values(scop: Scop, bound: BoundArguments) -> list:
    """The native call's argument values, in :func:`~polyopt.codegen.ast.abi_arguments` order."""
    values = []
    for arg in abi_arguments(scop):
        if arg.kind == "param":
            values.append(bound.params[arg.name])
        elif arg.kind == "scalar":
            values.append(arg.dtype.numpy.type(bound.scalars[arg.name]).item())
        else:
            values.append(bound.arrays[arg.name].ctypes.data)
    return values


def abi_ctypes(scop: Scop) -> list:
    """ctypes argument types of the native kernel function."""
    return [ctypes.c_void_p if a.kind == "array" else _CTYPES[a.dtype.name] for a in abi_arguments(scop)]


def default_num_threads() -> int:
    """The thread count used when none is given: every core this process may run on."""
    return len(os.sched_getaffinity(0))


def check_num_threads(value) -> int | None:
    """``value`` as a thread count (None stays None); TypeError/ValueError for anything else."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ArgumentTypeError(f"num_threads must be an int, got {value!r}")
    if not 1 <= value <= 2**31 - 1:
        raise ArgumentError(f"num_threads must be at least 1, got {value}")
    return int(value)


@dataclass(eq=False)
class CompiledKernel:
    """A kernel compiled for one target: call it with numpy arrays (updated in place).

    Inspect what runs with ``.schedule``, ``.loop_ast``, ``.c_source``, ``.llvm_ir`` and
    ``.optimized_ir``; ``.compile_times`` gives the seconds spent in each phase. Parallel loops
    run on ``num_threads`` threads (None: :func:`default_num_threads`); a call may override it
    with the keyword ``num_threads=`` (unless the kernel has an argument of that name).
    """

    scop: Scop
    schedule: Schedule
    loops: Node
    c_source: str
    llvm_ir: str
    native: NativeFunction
    function_name: str
    compile_times: dict[str, float] = field(default_factory=dict)
    num_threads: int | None = None
    _checked_params: dict = field(default_factory=dict, repr=False)

    @property
    def optimized_ir(self) -> str:
        return self.native.optimized_ir

    @property
    def loop_ast(self) -> str:
        return loop_ast_text(self.loops)

    @cached_property
    def native_function(self):
        """The native kernel as a ctypes function: the :func:`abi_values` of a call, then the
        team size (an int); it returns its status (``codegen.llvm.STATUS_*``, see
        :meth:`check_status`). Unchecked: for callers that checked the arguments once already."""
        return ctypes.CFUNCTYPE(ctypes.c_int32, *abi_ctypes(self.scop), ctypes.c_int32)(self.native.address)

    def __call__(self, *args, **kwargs) -> None:
        threads = self.num_threads
        if "num_threads" in kwargs and all(a.name != "num_threads" for a in self.scop.arguments):
            threads = check_num_threads(kwargs.pop("num_threads"))
        bound = bind_arguments(self.scop, args, kwargs)
        self._check_params(bound.params)
        self.check_status(self.native_function(*abi_values(self.scop, bound), threads or default_num_threads()))

    def check_status(self, status: int) -> None:
        """Raise what a native call's ``status`` reports: KernelZeroDivisionError (a
        ZeroDivisionError) for integer division or remainder by zero."""
        if status == STATUS_ZERO_DIVISION:
            raise KernelZeroDivisionError(f"{self.scop.name}(): integer division or modulo by zero")
        if status != STATUS_OK:
            raise RuntimeError(f"{self.scop.name}(): unknown native status {status}")

    def _check_params(self, params: dict[str, int]) -> None:
        """Refuse parameter values outside the context or for which an access leaves its array."""
        key = tuple(params[p] for p in self.scop.params)
        if key in self._checked_params:
            return
        with ISL_LOCK:
            inside = param_point(self.scop.params, params).is_subset(self.scop.in_bounds_params)
        if not inside:
            detail = ", ".join(f"{p}={v}" for p, v in params.items())
            raise ArgumentError(f"{self.scop.name}(): for {detail} some access would fall outside its "
                                f"array (valid parameters: {self.scop.in_bounds_params})")
        if len(self._checked_params) < 1024:
            self._checked_params[key] = True


_CACHE: dict = {}


def clear_cache() -> None:
    """Forget every compiled kernel (benchmarks of compile time use this)."""
    _CACHE.clear()


def scop_of(kernel) -> Scop:
    """The Scop a kernel parses to (a Scop is its own); anything else is refused."""
    scop = getattr(kernel, "scop", kernel)
    if not isinstance(scop, Scop):  # refused before anything else looks at it
        raise ArgumentTypeError(f"cannot compile {kernel!r}: expected a polyopt kernel or Scop")
    return scop


def _cache_key(kernel, target: str, algorithm: str, options: dict, schedule: Schedule | None = None):
    """The compile cache's key: the :func:`scop_fingerprint` of what the kernel parses to (so
    two kernels from one source text with different ``-D`` defines or float types never share
    code), the target, and the algorithm and options -- or the given schedule's tree."""
    choice = (algorithm, tuple(sorted((k, repr(v)) for k, v in options.items()))) if schedule is None \
        else ("schedule", str(schedule.tree))
    return ("scop", scop_fingerprint(scop_of(kernel)), target) + choice


@lru_cache(maxsize=1024)
def scop_fingerprint(scop: Scop) -> str:
    """A SHA-256 of everything in ``scop`` that the generated code depends on: name,
    parameters and context, arrays (element types, extents), statements (domains, typed
    expression trees of targets and values, access relations), the original schedule and the
    arguments. Source positions are left out. Cached per Scop object (Scops are immutable)."""
    parts = [scop.name, repr(scop.params), str(scop.context), repr(scop.arguments), str(scop.schedule)]
    parts += [repr(array) for array in scop.arrays.values()]
    for stmt in scop.statements:
        parts += [stmt.name, repr(stmt.iterators), str(stmt.domain), repr(stmt.target), repr(stmt.value)]
        parts += [f"{ref.ref_id} {ref.array} {ref.is_write} {ref.relation}" for ref in stmt.accesses]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def compile(kernel, *, target: str = "cpu", algorithm: str = DEFAULT_ALGORITHM,
            schedule: Schedule | None = None, num_threads: int | None = None,
            reassociate: bool = False, **schedule_options) -> CompiledKernel:
    """Compile a kernel (or a Scop) to native code; cached, so a second call is free.

    ``algorithm`` names a scheduler (``polyopt.algorithms()``), or ``schedule`` gives the
    schedule itself (a :class:`~polyopt.schedule.Schedule` of this kernel, e.g. from
    ``po.schedule`` or an imported file); either way the schedule is checked by the
    independent verifier before code is generated. ``num_threads`` is the default team
    size of its parallel loops (None: every core); ``reassociate`` (CPU) lets floating-point
    sums along the innermost loop run as partial sums in vector lanes, so results may differ
    from the program's order by rounding (po.einsum does this, as numpy.einsum does); the other
    options go to the scheduler.
    """
    if target not in TARGETS:
        raise ArgumentError(f"unknown target {target!r}; available: {', '.join(TARGETS)}")
    num_threads = check_num_threads(num_threads)
    if schedule is not None:
        check_given_schedule(scop_of(kernel), schedule, algorithm, schedule_options)
    if target == "cuda":
        if num_threads is not None or reassociate:
            raise ArgumentError("num_threads and reassociate are options of target='cpu'")
        with ISL_LOCK:
            return _compile_cuda(kernel, algorithm, schedule, schedule_options)
    with ISL_LOCK:  # isl's context is the process's: one compiling thread inside it at a time
        start = time.perf_counter()  # the key parses the kernel (once per kernel object)
        key = _cache_key(kernel, target, algorithm, schedule_options, schedule) + (bool(reassociate),)
        if key not in _CACHE:
            _CACHE[key] = _compile(getattr(kernel, "scop", kernel), algorithm, schedule_options,
                                   bool(reassociate), parse_seconds=time.perf_counter() - start,
                                   schedule=schedule)
        compiled = _CACHE[key]  # the thread count is a call argument: one native code serves all
    return compiled if num_threads is None else replace(compiled, num_threads=num_threads)


def check_given_schedule(scop: Scop, schedule: Schedule, algorithm: str, options: dict) -> None:
    """Refuse ``compile(kernel, schedule=...)`` with a schedule of another kernel, or with
    scheduler choices beside it (they would be ignored: a silent no-op)."""
    if not isinstance(schedule, Schedule):
        raise ArgumentTypeError(f"schedule= takes a polyopt Schedule (po.schedule(...)), not {schedule!r}")
    if algorithm != DEFAULT_ALGORITHM or options:
        chosen = [f"algorithm={algorithm!r}"] if algorithm != DEFAULT_ALGORITHM else []
        raise ArgumentError(f"schedule= gives the schedule itself: drop {', '.join(chosen + sorted(options))}")
    if scop_fingerprint(schedule.scop) != scop_fingerprint(scop):
        raise ArgumentError(f"schedule= is a schedule of {schedule.scop.name!r}, not of the kernel "
                            f"{scop.name!r} being compiled")


def _compile_cuda(kernel, algorithm: str, schedule: Schedule | None, options: dict):
    """The CUDA target (polyopt/cuda.py; options ``block``/``tile`` map threads, the rest go to
    the scheduler); CuPy is imported only when the compiled kernel is called."""
    from polyopt.cuda import compile_cuda
    return compile_cuda(kernel, algorithm=algorithm, schedule=schedule, **options)


def _compile(scop: Scop, algorithm: str, schedule_options: dict, reassociate: bool,
             parse_seconds: float, schedule: Schedule | None = None) -> CompiledKernel:
    """The whole chain after parsing (``parse_seconds``), uncached: schedule (unless given),
    verify, loop AST, C and LLVM, native code."""
    times = {"parse": parse_seconds}
    start = time.perf_counter() - parse_seconds
    sched = schedule if schedule is not None else run_scheduler(scop, algorithm, **schedule_options)
    times["schedule"] = time.perf_counter() - start - sum(times.values())
    verify(scop, sched)
    times["verify"] = time.perf_counter() - start - sum(times.values())
    loops = build_loop_ast(scop, sched.tree)
    name = f"polyopt_{scop.name}"
    c_source = c_function(scop, loops, name, openmp=True)
    ir_text = llvm_ir(scop, loops, name, reassociate=reassociate)
    times["codegen"] = time.perf_counter() - start - sum(times.values())
    native = jit_compile(ir_text, name)
    times["llvm"] = time.perf_counter() - start - sum(times.values())
    return CompiledKernel(scop, sched, loops, c_source, ir_text, native, name, times)


