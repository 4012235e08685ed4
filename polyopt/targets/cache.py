"""Compile requests and the in-memory compile cache shared by the targets: what a kernel argument
parses to (:func:`scop_of`), a fingerprint of a Scop, the cache key of a request, and the check
that a given schedule belongs to the kernel being compiled."""
from __future__ import annotations

from polyopt.analysis.scop import Scop, scop_fingerprint
from polyopt.errors import ArgumentError, ArgumentTypeError
from polyopt.schedulers.registry import DEFAULT_ALGORITHM
from polyopt.transform.schedule import Schedule

#: Compiled kernels by :func:`cache_key` (every target's).
COMPILED: dict = {}


def clear_cache() -> None:
    """Forget every compiled kernel (benchmarks of compile time use this)."""
    COMPILED.clear()


def scop_of(kernel) -> Scop:
    """The Scop a kernel parses to (a Scop is its own); anything else is refused."""
    scop = getattr(kernel, "scop", kernel)
    if not isinstance(scop, Scop):  # refused before anything else looks at it
        raise ArgumentTypeError(f"cannot compile {kernel!r}: expected a polyopt kernel or Scop")
    return scop


def cache_key(kernel, target: str, algorithm: str, options: dict, schedule: Schedule | None = None):
    """The compile cache's key: the :func:`scop_fingerprint` of what the kernel parses to (so
    two kernels from one source text with different ``-D`` defines or float types never share
    code), the target, and the algorithm and options -- or the given schedule's tree."""
    choice = (algorithm, tuple(sorted((k, repr(v)) for k, v in options.items()))) if schedule is None \
        else ("schedule", str(schedule.tree))
    return ("scop", scop_fingerprint(scop_of(kernel)), target) + choice


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
