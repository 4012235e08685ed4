"""The typed errors polyopt raises; each names the construct and where it is."""
from __future__ import annotations


class PolyoptError(Exception):
    """Base class of every error polyopt raises on purpose."""


class FrontendError(PolyoptError):
    """Input that polyopt cannot represent as a static control part (non-affine, unsupported...).

    ``line`` and ``column`` are 1-based positions in ``source_name`` (a file or kernel name).
    """

    def __init__(self, message: str, *, source_name: str = "<kernel>", line: int | None = None,
                 column: int | None = None, construct: str | None = None):
        self.reason = message
        self.source_name = source_name
        self.line = line
        self.column = column
        self.construct = construct
        where = source_name
        if line is not None:
            where += f", line {line}"
            if column is not None:
                where += f", column {column}"
        text = f"{where}: {message}"
        if construct:
            text += f"\n    {construct}"
        super().__init__(text)


class PolyoptWarning(UserWarning):
    """Input polyopt accepts but does not use as written (a ``-D`` value the file overrides...)."""


class IllegalScheduleError(PolyoptError):
    """A schedule that executes a dependence sink before (or with) its source.

    ``kind`` is RAW/WAR/WAW, ``dependence`` the violated relation (isl text), ``source`` and
    ``sink`` a concrete witness pair of iterations, ``parameters`` the parameter values of it,
    ``source_time`` and ``sink_time`` the schedule's time vectors of the two.
    """

    def __init__(self, kind: str, dependence: str, source: str, sink: str,
                 parameters: dict[str, int], source_time: tuple, sink_time: tuple):
        self.kind = kind
        self.dependence = dependence
        self.source = source
        self.sink = sink
        self.parameters = parameters
        self.source_time = source_time
        self.sink_time = sink_time
        params = ", ".join(f"{k}={v}" for k, v in parameters.items())
        super().__init__(
            f"illegal schedule: {kind} dependence {dependence} is violated\n"
            f"    witness{' (' + params + ')' if params else ''}: {source} must run before {sink},"
            f" but the schedule puts them at {source_time} and {sink_time}")


class IncompleteScheduleError(IllegalScheduleError):
    """A schedule that omits statement instances (or schedules instances that do not exist)."""

    def __init__(self, missing: str, extra: str):
        self.missing = missing
        self.extra = extra
        # the attributes every IllegalScheduleError has (kind "coverage": no dependence pair)
        self.kind, self.dependence, self.parameters = "coverage", "", {}
        self.source, self.sink = f"missing {missing}", f"extra {extra}"
        self.source_time = self.sink_time = ()
        PolyoptError.__init__(self, f"illegal schedule: it does not cover the iteration domain exactly\n"
                                    f"    not scheduled: {missing}\n    not in the domain: {extra}")


class RacyParallelLoopError(IllegalScheduleError):
    """A loop marked parallel whose iterations depend on each other (a data race)."""

    def __init__(self, loop: str, dependence: str, source: str, sink: str, parameters: dict[str, int]):
        self.loop = loop
        self.kind, self.dependence, self.parameters = "parallel", dependence, parameters
        self.source, self.sink = source, sink
        self.source_time = self.sink_time = ()
        params = ", ".join(f"{k}={v}" for k, v in parameters.items())
        PolyoptError.__init__(self, f"illegal schedule: loop {loop} is marked parallel but carries the "
                                    f"dependence {dependence}\n    witness{' (' + params + ')' if params else ''}: "
                                    f"{source} and {sink} run in different iterations of it")


class ScheduleError(PolyoptError):
    """A scheduler or transformation could not do what was asked (bad option, no solution)."""


class CodegenError(PolyoptError):
    """Code generation met a construct it cannot translate."""


class BenchmarkError(PolyoptError):
    """A benchmark that cannot run as asked (unknown target, a bad external C file, bad option)."""


class TargetUnavailableError(PolyoptError, ValueError):
    """The requested target cannot run here (CUDA without CuPy or without a GPU)."""


class ArgumentError(PolyoptError, ValueError):
    """A call argument with a wrong value: an array's shape, rank or layout, overlapping
    arrays, sizes outside the kernel's valid parameters, a bad thread count. A ValueError too,
    so ``except ValueError`` code keeps working."""


class ArgumentTypeError(PolyoptError, TypeError):
    """A call argument of the wrong kind or element type, or a missing/unknown argument. A
    TypeError too, as Python's own calls raise."""


class ArgumentRangeError(ArgumentError, OverflowError):
    """An integer argument (a size parameter or an integer scalar) outside its native type's
    range: passed on, it would wrap (``2**64 + 3`` runs 3 steps). ``name`` is the parameter."""

    def __init__(self, message: str, *, name: str):
        self.name = name
        super().__init__(message)


class KernelZeroDivisionError(PolyoptError, ZeroDivisionError):
    """Integer ``//``, ``%`` (or C's ``/``, ``%``) by zero in a kernel's data, raised after the
    native call returns (the native code does not trap; what it stored is unspecified)."""


class LoopTranslationError(CodegenError):
    """Generated loops that differ from the schedule they were generated from (isl's AST
    generator has been seen to drop statement instances): ``statement`` and ``instance`` name a
    concrete instance, ``parameters`` the parameter values where it goes wrong, ``problem`` what
    the loops do with it (never run, run twice, run out of order or on racing threads)."""

    def __init__(self, statement: str, instance: str, parameters: dict[str, int], problem: str):
        self.statement = statement
        self.instance = instance
        self.parameters = parameters
        self.problem = problem
        params = ", ".join(f"{k}={v}" for k, v in parameters.items())
        super().__init__(f"the generated loops differ from the schedule: {instance} {problem}"
                         f"{' (' + params + ')' if params else ''}")


class ExchangeError(FrontendError):
    """An exchange file (Polly's JSCoP, OpenSCoP) that polyopt cannot read, or that does not
    describe the Scop its schedule is imported onto: ``source_name`` is the file, ``line`` the
    line of an OpenSCoP file where reading stopped, the message what differs (statement names,
    domains, context, accesses) or what is malformed."""
