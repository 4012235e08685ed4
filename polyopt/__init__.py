"""polyopt: a polyhedral scheduling optimizer for Python.

Loop nests written in a small Python DSL (or isl text) become a :class:`Scop`; polyopt computes
their dependences, schedules them, checks the schedule, and generates native code::

    import polyopt as po
    from polyopt import f64

    @po.kernel
    def scale(alpha: f64, A: f64["N"]):
        for i in range(N):
            A[i] *= alpha

    scale(2.0, a)                               # compiled once, runs natively in place
    ck = po.compile(scale, algorithm="isl")     # inspect: ck.c_source, ck.llvm_ir, ck.schedule
"""
from pathlib import Path as _Path

from polyopt import _layout

_layout.mount(__name__, _Path(__file__).resolve().parent)

from polyopt.types import DType, bf16, f16, f32, f64, i8, i16, i32, i64, u8, u16, u32, u64  # noqa: E402
from polyopt.errors import (CodegenError, FrontendError, IllegalScheduleError,  # noqa: E402
                            IncompleteScheduleError, LoopTranslationError, PolyoptError,
                            PolyoptWarning, ScheduleError)
from polyopt.analysis.scop import Array, Argument, Scop, Statement  # noqa: E402
from polyopt.analysis.deps import Dependences, dependences  # noqa: E402
from polyopt.transform.schedule import Loop, Schedule  # noqa: E402
from polyopt.transform.trace import Step, Trace  # noqa: E402
from polyopt.schedulers.registry import algorithms, schedule  # noqa: E402
from polyopt.schedulers.compare import compare_schedulers, records_to_dataframe, sync_free_degree  # noqa: E402
from polyopt.analysis.verify import carried_dependences, is_legal, verify  # noqa: E402
from polyopt.analysis.loops import (Dependence, DependenceAtLoop, LoopAnalysis, LoopInfo,  # noqa: E402
                                    dependence_list, loop_analysis, tilable_depth)
from polyopt.transform.schedule import tree_statistics  # noqa: E402
from polyopt.targets.interpreter import interpret  # noqa: E402
from polyopt.exchange import (schedule_from_jscop, schedule_from_openscop, to_jscop,  # noqa: E402
                              to_openscop, write_jscop, write_openscop)
from polyopt.targets.cpu import CompiledKernel, compile  # noqa: E402
from polyopt.schedulers.autotune import Candidate, TuneResult, autotune  # noqa: E402
from polyopt.frontends.dsl import Kernel, kernel, kernel_from_source  # noqa: E402
from polyopt.frontends.isl_text import scop_from_isl  # noqa: E402
from polyopt.frontends.c_scop import from_c  # noqa: E402
from polyopt.einsum import TargetUnavailableError, einsum, einsum_kernel  # noqa: E402
from polyopt.targets.cuda import cuda_source  # noqa: E402

__version__ = "0.1.0"


def __getattr__(name: str):
    """``polyopt.suite`` (30 kernels) and ``polyopt.plot`` (matplotlib pictures) are imported
    on first use."""
    if name in ("suite", "plot"):
        import importlib
        return importlib.import_module(f"polyopt.{name}")
    raise AttributeError(f"module 'polyopt' has no attribute {name!r}")

__all__ = [
    "DType", "f16", "bf16", "f32", "f64", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64",
    "PolyoptError", "FrontendError", "IllegalScheduleError", "IncompleteScheduleError", "ScheduleError", "CodegenError",
    "LoopTranslationError", "PolyoptWarning",
    "Array", "Argument", "Scop", "Statement", "Dependences", "dependences",
    "Schedule", "Loop", "Trace", "Step", "algorithms", "schedule", "verify", "is_legal", "interpret",
    "carried_dependences", "tree_statistics", "Dependence", "DependenceAtLoop", "LoopAnalysis", "LoopInfo",
    "dependence_list", "loop_analysis", "tilable_depth", "compare_schedulers", "records_to_dataframe",
    "sync_free_degree",
    "CompiledKernel", "compile", "autotune", "Candidate", "TuneResult", "Kernel", "kernel", "kernel_from_source", "scop_from_isl", "from_c", "suite", "plot",
    "einsum", "einsum_kernel", "TargetUnavailableError", "cuda_source",
    "to_jscop", "write_jscop", "schedule_from_jscop", "to_openscop", "write_openscop", "schedule_from_openscop",
]
