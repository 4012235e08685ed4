"""The CPU target and ``po.compile``: parse -> dependences -> schedule -> verify -> loop AST ->
C and LLVM -> native code (llvmlite's JIT), cached in memory (:mod:`polyopt.targets.cache`) and
on disk for later processes (:mod:`polyopt.targets.disk_cache`: a hit loads the object code and
rebuilds the schedule, loop AST and texts only when asked for); a ``target="cuda"`` request
goes to :mod:`polyopt.targets.cuda`.
"""
from __future__ import annotations

import copy
import ctypes
import time
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property

import islpy as isl

from polyopt.analysis.scop import Scop
from polyopt.analysis.verify import verify
from polyopt.codegen.loop_nodes import Node, loop_ast_text
from polyopt.codegen.ast import build_loop_ast, generate_loop_ast
from polyopt.codegen.c import c_function
from polyopt.codegen.llvm import (LEVELS, STATUS_OK, STATUS_ZERO_DIVISION, NativeFunction, jit_compile, jit_load,
                                  llvm_ir)
from polyopt.errors import ArgumentError, KernelZeroDivisionError
from polyopt.islutil import ISL_LOCK
from polyopt.schedulers.cost import BandCost
from polyopt.schedulers.registry import DEFAULT_ALGORITHM, scalar_expansion, schedule as run_scheduler
from polyopt.targets.arguments import (abi_ctypes, abi_values, bind_arguments, check_num_threads, check_params,
                                       default_num_threads)
from polyopt.targets import disk_cache
from polyopt.targets.cache import COMPILED, cache_key, check_given_schedule, scop_of
from polyopt.transform.schedule import Schedule
from polyopt.transform.trace import Trace

TARGETS = ("cpu", "cuda")


@dataclass(eq=False)
class CompiledKernel:
    """A kernel compiled for one target: call it with numpy arrays (updated in place).

    Inspect what runs with ``.schedule``, ``.loop_ast``, ``.c_source``, ``.llvm_ir`` and
    ``.optimized_ir``; ``.compile_times`` gives the seconds spent in each phase (``"disk"``
    where the native code came from the disk cache, with no schedule, verify, codegen or llvm
    phase: see :class:`CachedKernel`). Parallel loops
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
    def cost(self) -> tuple:
        """The cost model's estimates per band (see :mod:`polyopt.schedulers.cost`): why the
        loops were tiled and register-tiled, or not. Empty where no model ran."""
        return self.schedule.cost

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
        function = ctypes.CFUNCTYPE(ctypes.c_int32, *abi_ctypes(self.scop), ctypes.c_int32)(self.native.address)
        function.polyopt_native = self.native  # the code lives while the function does (einsum keeps it)
        return function

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


class _Deferred:
    """A value made on first use (under :data:`ISL_LOCK`: the makers use isl), then kept."""

    __slots__ = ("_make", "_value")

    def __init__(self, make):
        self._make = make

    def get(self):
        with ISL_LOCK:
            if self._make is not None:
                self._value, self._make = self._make(), None
        return self._value


class _Lazy:
    """A field of :class:`CachedKernel` that may hold a :class:`_Deferred` until first read."""

    def __set_name__(self, owner, name: str) -> None:
        self.slot = "_lazy_" + name

    def __get__(self, kernel, owner=None):
        if kernel is None:
            return self
        value = kernel.__dict__[self.slot]
        return value.get() if isinstance(value, _Deferred) else value

    def __set__(self, kernel, value) -> None:
        kernel.__dict__[self.slot] = value


class CachedKernel(CompiledKernel):
    """A CompiledKernel loaded from the disk cache: its native code came from the stored object
    code; the schedule (replayed from its stored trace), loop AST (regenerated from it) and the
    C, LLVM IR and optimized IR texts (stored) are made when first read."""

    schedule = _Lazy()
    loops = _Lazy()
    c_source = _Lazy()
    llvm_ir = _Lazy()
    stored_optimized_ir = _Lazy()

    @property
    def optimized_ir(self) -> str:
        return self.stored_optimized_ir


#: Whether a CPU compile expands kernel-local scalars (``expand_scalars``) when the caller does
#: not say. Off: under pluto's default fusion the expanded suite kernels ran slower on the CPU
#: (deriche 0.64x, symm 0.79x, ludcmp 1.23x; docs/performance.md), where on the GPU the
#: expansion is what turns deriche's one-thread kernels into parallel ones (the CUDA target and
#: ``po.schedule`` expand by default).
CPU_EXPANDS_SCALARS = False


def compile(kernel, *, target: str = "cpu", algorithm: str = DEFAULT_ALGORITHM,
            schedule: Schedule | None = None, num_threads: int | None = None,
            reassociate: bool = False, tuned: bool = False, llvm_level: int = 3,
            **schedule_options) -> CompiledKernel:
    """Compile a kernel (or a Scop) to native code; cached, so a second call is free.

    ``algorithm`` names a scheduler (``polyopt.algorithms()``), or ``schedule`` (or a Schedule
    passed as ``kernel``: ``po.compile(s)``) gives the
    schedule itself (a :class:`~polyopt.schedulers.registry.Schedule` of this kernel, e.g. from
    ``po.schedule`` or an imported file); either way the schedule is checked by the
    independent verifier before code is generated. ``num_threads`` is the default team
    size of its parallel loops (None: every core); ``reassociate`` (CPU) lets floating-point
    sums along the innermost loop run as partial sums in vector lanes, so results may differ
    from the program's order by rounding (po.einsum does this, as numpy.einsum does);
    ``llvm_level`` (CPU) is LLVM's optimization level, 0 to 3 (below 2: no vectorizers and no
    unrolling, a fraction of the compile time; po.einsum's small calls use 1); the other
    options go to the scheduler. ``tuned=True`` compiles what ``po.autotune`` chose for this
    kernel on this machine, from its tuning database (see
    :func:`polyopt.schedulers.autotune.compile_tuned`; none recorded: a warning and the default).
    """
    if llvm_level not in LEVELS:
        raise ArgumentError(f"llvm_level={llvm_level!r}: LLVM's optimization levels are {', '.join(map(str, LEVELS))}")
    if llvm_level != 3 and (tuned or target != "cpu"):
        raise ArgumentError("llvm_level is an option of target='cpu' without tuned=True")
    if tuned:
        from polyopt.schedulers.autotune import compile_tuned  # (autotune imports this module)
        return compile_tuned(kernel, target=target, algorithm=algorithm, schedule=schedule, num_threads=num_threads,
                             reassociate=reassociate, **schedule_options)
    if isinstance(kernel, Schedule) and schedule is None:  # po.compile(s): the schedule names its kernel
        kernel, schedule = kernel.scop, kernel
    if target not in TARGETS:
        raise ArgumentError(f"unknown target {target!r}; available: {', '.join(TARGETS)}")
    num_threads = check_num_threads(num_threads)
    if schedule is not None:
        check_given_schedule(scop_of(kernel), schedule, algorithm, schedule_options)
    if target == "cpu" and "precision" in schedule_options:
        raise ArgumentError(f"precision={schedule_options['precision']!r} is an option of target='cuda' (tensor "
                            "cores); target='cpu' computes each element's arithmetic as written")
    if target == "cuda":
        if num_threads is not None or reassociate:
            raise ArgumentError("num_threads and reassociate are options of target='cpu'")
        with ISL_LOCK:
            return _compile_cuda(kernel, algorithm, schedule, schedule_options)
    schedule_options = _with_cpu_defaults(schedule_options, schedule)
    with ISL_LOCK:  # isl's context is the process's: one compiling thread inside it at a time
        key, compiled, parse_seconds = _cached(kernel, algorithm, schedule, reassociate, llvm_level, schedule_options)
        if compiled is None:
            objects: list[bytes] = []
            compiled = _compile(getattr(kernel, "scop", kernel), algorithm, schedule_options, bool(reassociate),
                                parse_seconds, schedule=schedule,
                                object_sink=objects.append if disk_cache.enabled() else None, llvm_level=llvm_level)
            _to_disk(key, compiled, objects, given_schedule=schedule is not None)
            COMPILED[key] = compiled
    if num_threads is None:  # the thread count is a call argument: one native code serves all
        return compiled
    compiled = copy.copy(compiled)  # (not dataclasses.replace: it would make a CachedKernel's lazy parts)
    compiled.num_threads = num_threads
    return compiled


def _cached(kernel, algorithm: str, schedule: Schedule | None, reassociate: bool, llvm_level: int,
            schedule_options: dict) -> tuple[tuple, CompiledKernel | None, float]:
    """(cache key, the kernel compiled for it earlier or None, seconds spent parsing): from the
    in-memory cache, else from the disk cache (then kept in memory too). Call under ISL_LOCK."""
    start = time.perf_counter()  # the key parses the kernel (once per kernel object)
    key = cpu_cache_key(kernel, algorithm, schedule_options, schedule, reassociate, llvm_level)
    compiled = COMPILED.get(key)
    parse_seconds = time.perf_counter() - start
    if compiled is None:
        compiled = _from_disk(key, getattr(kernel, "scop", kernel), algorithm, schedule_options, schedule,
                              parse_seconds)
        if compiled is not None:
            COMPILED[key] = compiled
    return key, compiled, parse_seconds


def compiled_before(kernel, *, algorithm: str = DEFAULT_ALGORITHM, reassociate: bool = False,
                    llvm_level: int = 3, **schedule_options) -> CompiledKernel | None:
    """What ``compile(kernel, ...)`` (CPU, same arguments) returns when it needs no compile:
    the kernel from the in-memory or the disk cache; None where it would compile. Lets a
    caller (po.einsum's first call of a pattern) use a costly plan only where it is at hand."""
    with ISL_LOCK:
        return _cached(kernel, algorithm, None, reassociate, llvm_level,
                       _with_cpu_defaults(schedule_options, None))[1]


def cpu_cache_key(kernel, algorithm: str, schedule_options: dict, schedule: Schedule | None = None,
                  reassociate: bool = False, llvm_level: int = 3) -> tuple:
    """The compile cache's key of ``compile(kernel, ...)`` on the CPU with these arguments (the
    options as a caller gives them to :func:`compile`; the CPU's defaults are applied here)."""
    options = _with_cpu_defaults(schedule_options, schedule)
    return cache_key(kernel, "cpu", algorithm, options, schedule) + (bool(reassociate), llvm_level)


def _with_cpu_defaults(schedule_options: dict, schedule: Schedule | None) -> dict:
    """``schedule_options`` with the CPU's own defaults (:data:`CPU_EXPANDS_SCALARS`) where no
    schedule is given: what a CPU compile schedules with, and so what its cache key holds."""
    if schedule is not None:
        return schedule_options
    return {"expand_scalars": CPU_EXPANDS_SCALARS, **schedule_options}


def _compile_cuda(kernel, algorithm: str, schedule: Schedule | None, options: dict):
    """The CUDA target (polyopt/targets/cuda.py; options ``block``/``tile`` map threads, the rest go to
    the scheduler); CuPy is imported only when the compiled kernel is called."""
    from polyopt.targets.cuda import compile_cuda  # CUDA code only for CUDA requests
    return compile_cuda(kernel, algorithm=algorithm, schedule=schedule, **options)


def _compile(scop: Scop, algorithm: str, schedule_options: dict, reassociate: bool,
             parse_seconds: float, schedule: Schedule | None = None, object_sink=None,
             llvm_level: int = 3) -> CompiledKernel:
    """The whole chain after parsing (``parse_seconds``), uncached: schedule (unless given),
    verify, loop AST, C and LLVM, native code (LLVM's -O``llvm_level``)."""
    times = {"parse": parse_seconds}
    start = time.perf_counter() - parse_seconds
    if reassociate and algorithm == "pluto" and schedule is None:
        # sums reassociated into vector lanes: several rows' in-order sums at once would block that
        schedule_options = {"row_tiles": False, **schedule_options}
    sched = schedule if schedule is not None else run_scheduler(scop, algorithm, **schedule_options)
    scop = sched.scop  # the kernel's, or its expansion (scalar expansion: temporary arrays)
    times["schedule"] = time.perf_counter() - start - sum(times.values())
    verify(scop, sched)
    times["verify"] = time.perf_counter() - start - sum(times.values())
    built = generate_loop_ast(scop, sched.tree)
    if built.fallback:  # isl's loops of the tree were wrong: the schedule's notes say what ran instead
        sched = replace(sched, notes=sched.notes + (built.fallback,))
    loops = built.loops
    name = f"polyopt_{scop.name}"
    c_source = c_function(scop, loops, name, openmp=True)
    ir_text = llvm_ir(scop, loops, name, reassociate=reassociate)
    times["codegen"] = time.perf_counter() - start - sum(times.values())
    native = jit_compile(ir_text, name, object_sink, llvm_level)
    times["llvm"] = time.perf_counter() - start - sum(times.values())
    return CompiledKernel(scop, sched, loops, c_source, ir_text, native, name, times)


_TEXTS = ("c_source", "llvm_ir", "optimized_ir")


def _to_disk(key, compiled: CompiledKernel, objects: list[bytes], given_schedule: bool) -> None:
    """Store a fresh compile's object code (``objects``: what MCJIT emitted, one module) with
    its schedule and texts in the disk cache; a failure there never fails the compile."""
    if len(objects) != 1:
        return
    try:
        sched = compiled.schedule
        meta = {"function": compiled.function_name, "compile_times": compiled.compile_times,
                "trace": None if given_schedule else sched.trace.to_json(),
                "tree": None if given_schedule else str(sched.tree), "notes": list(sched.notes),
                "cost": [asdict(cost) for cost in sched.cost]}
        texts = {"c_source": compiled.c_source, "llvm_ir": compiled.llvm_ir, "optimized_ir": compiled.optimized_ir}
        disk_cache.store(key, meta, {"object": objects[0], **{k: v.encode() for k, v in texts.items()}},
                         compress=_TEXTS)
    except Exception:  # noqa: BLE001 -- the cache is an optimization
        disk_cache.STATS["errors"] += 1


def _from_disk(key, scop: Scop, algorithm: str, options: dict, schedule: Schedule | None,
               parse_seconds: float) -> CachedKernel | None:
    """The kernel of ``key`` from the disk cache (None on a miss): its stored object code in a
    fresh engine, no scheduler, verifier, code generator or optimizer."""
    start = time.perf_counter()
    entry = disk_cache.load(key)
    if entry is None:
        return None
    kernel_scop = scop
    scop = schedule.scop if schedule is not None else \
        scalar_expansion(scop, algorithm, options.get("expand_scalars"), options).scop  # what was compiled
    try:
        meta = entry.meta
        name = meta["function"]
        native = jit_load(entry.blob("object"), name)
    except Exception:  # noqa: BLE001 -- an entry the engine cannot load is a miss
        disk_cache.reject(entry)
        return None

    def rebuild_schedule() -> Schedule:
        if schedule is not None:
            return schedule
        notes = tuple(meta["notes"])
        cost = tuple(BandCost(**{k: tuple(v) if isinstance(v, list) else v for k, v in c.items()})
                     for c in meta.get("cost", ()))
        try:
            made = Trace.from_json(meta["trace"]).apply(Schedule.original(kernel_scop), check=False)
            if str(made.tree) == meta["tree"]:
                return replace(made, algorithm=algorithm, options=dict(options), notes=notes, cost=cost)
        except Exception:  # noqa: BLE001 -- a trace that does not replay: the stored tree
            pass
        tree = isl.Schedule.read_from_str(scop.domain.get_ctx(), meta["tree"])
        return Schedule.from_tree(scop, tree, algorithm=algorithm, options=options, notes=notes)

    sched = _Deferred(rebuild_schedule)
    texts = {name_: _Deferred(lambda name_=name_: entry.text(name_)) for name_ in _TEXTS}
    times = {"parse": parse_seconds, "disk": time.perf_counter() - start}
    kernel = CachedKernel(scop, sched, _Deferred(lambda: build_loop_ast(scop, sched.get().tree)),
                          texts["c_source"], texts["llvm_ir"], native, name, times)
    kernel.stored_optimized_ir = texts["optimized_ir"]
    return kernel


