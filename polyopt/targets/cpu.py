"""The CPU target and ``po.compile``: parse -> dependences -> schedule -> verify -> loop AST ->
C and LLVM -> native code (llvmlite's JIT), cached in :mod:`polyopt.targets.cache`; a
``target="cuda"`` request goes to :mod:`polyopt.targets.cuda`.
"""
from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass, field, replace
from functools import cached_property

from polyopt.analysis.scop import Scop
from polyopt.analysis.verify import verify
from polyopt.codegen.loop_nodes import Node, loop_ast_text
from polyopt.codegen.ast import build_loop_ast
from polyopt.codegen.c import c_function
from polyopt.codegen.llvm import STATUS_OK, STATUS_ZERO_DIVISION, NativeFunction, jit_compile, llvm_ir
from polyopt.errors import ArgumentError, KernelZeroDivisionError
from polyopt.islutil import ISL_LOCK
from polyopt.schedulers.registry import DEFAULT_ALGORITHM, schedule as run_scheduler
from polyopt.targets.arguments import (abi_ctypes, abi_values, bind_arguments, check_num_threads, check_params,
                                       default_num_threads)
from polyopt.targets.cache import COMPILED, cache_key, check_given_schedule, scop_of
from polyopt.transform.schedule import Schedule

TARGETS = ("cpu", "cuda")


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
    checked_params: dict = field(default_factory=dict, repr=False)

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
        check_params(self.scop, bound.params, self.checked_params)
        self.check_status(self.native_function(*abi_values(self.scop, bound), threads or default_num_threads()))

    def check_status(self, status: int) -> None:
        """Raise what a native call's ``status`` reports: KernelZeroDivisionError (a
        ZeroDivisionError) for integer division or remainder by zero."""
        if status == STATUS_ZERO_DIVISION:
            raise KernelZeroDivisionError(f"{self.scop.name}(): integer division or modulo by zero")
        if status != STATUS_OK:
            raise RuntimeError(f"{self.scop.name}(): unknown native status {status}")


def compile(kernel, *, target: str = "cpu", algorithm: str = DEFAULT_ALGORITHM,
            schedule: Schedule | None = None, num_threads: int | None = None,
            reassociate: bool = False, **schedule_options) -> CompiledKernel:
    """Compile a kernel (or a Scop) to native code; cached, so a second call is free.

    ``algorithm`` names a scheduler (``polyopt.algorithms()``), or ``schedule`` (or a Schedule
    passed as ``kernel``: ``po.compile(s)``) gives the
    schedule itself (a :class:`~polyopt.schedulers.registry.Schedule` of this kernel, e.g. from
    ``po.schedule`` or an imported file); either way the schedule is checked by the
    independent verifier before code is generated. ``num_threads`` is the default team
    size of its parallel loops (None: every core); ``reassociate`` (CPU) lets floating-point
    sums along the innermost loop run as partial sums in vector lanes, so results may differ
    from the program's order by rounding (po.einsum does this, as numpy.einsum does); the other
    options go to the scheduler.
    """
    if isinstance(kernel, Schedule) and schedule is None:  # po.compile(s): the schedule names its kernel
        kernel, schedule = kernel.scop, kernel
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
        key = cache_key(kernel, target, algorithm, schedule_options, schedule) + (bool(reassociate),)
        if key not in COMPILED:
            COMPILED[key] = _compile(getattr(kernel, "scop", kernel), algorithm, schedule_options,
                                   bool(reassociate), parse_seconds=time.perf_counter() - start,
                                   schedule=schedule)
        compiled = COMPILED[key]  # the thread count is a call argument: one native code serves all
    return compiled if num_threads is None else replace(compiled, num_threads=num_threads)


def _compile_cuda(kernel, algorithm: str, schedule: Schedule | None, options: dict):
    """The CUDA target (polyopt/targets/cuda.py; options ``block``/``tile`` map threads, the rest go to
    the scheduler); CuPy is imported only when the compiled kernel is called."""
    from polyopt.targets.cuda import compile_cuda  # CUDA code only for CUDA requests
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


