"""Fusing consecutive parallel nests into one GPU kernel.

A schedule's sequence of nests becomes a sequence of kernel launches. On the GPU a launch costs
microseconds even in a CUDA graph, and a short sweep (one stencil statement over an array that
stays in L2) is about as long, so fdtd-2d's time step of four nests pays its launches about as
much as its work. Where consecutive nests of one sequence have bands of the same depth, every
loop parallel, and fusing them loop by loop is legal and keeps every fused loop parallel, one
kernel runs them all: each thread runs every statement at its coordinates (guarded by the
statement's own domain). The fusion is the schedule primitive ``fuse`` (recorded in the trace,
checked by the verifier as every primitive is); a fusion the verifier rejects, or one that
leaves a loop carrying a dependence (jacobi-2d's two sweeps: the second reads neighbours the
first writes), is not made.
"""
from __future__ import annotations

from polyopt.errors import IllegalScheduleError, ScheduleError
from polyopt.transform import nodes as N
from polyopt.transform.primitives import run as run_primitive
from polyopt.transform.schedule import Schedule

NOTE = "the GPU runs these parallel nests as one kernel"


def fuse_parallel_nests(schedule: Schedule) -> Schedule:
    """``schedule`` with every run of consecutive fusable nests (see the module docstring) fused,
    the longest runs first; unchanged where there is none."""
    while True:
        fused = _fuse_first_run(schedule)
        if fused is None:
            return schedule
        schedule = fused


def _fuse_first_run(schedule: Schedule) -> Schedule | None:
    """The schedule with the first fusable run of nests fused, None where no run fuses."""
    for _, node in N.walk(schedule.root):
        if not isinstance(node, N.Sequence):
            continue
        heads = [f.child if isinstance(f.child, N.Band) else None for f in node.children]
        for start in range(len(heads)):
            for stop in range(len(heads), start + 1, -1):
                run = heads[start:stop]
                if any(h is None for h in run) or len({_depth(h) for h in run}) != 1:
                    continue
                fused = _fused(schedule, run)
                if fused is not None:
                    return fused
    return None


def _chain(band: N.Band) -> list[N.Band]:
    """The bands of a perfect nest from ``band`` down (each the only child of the one above)."""
    found = [band]
    while isinstance(found[-1].child, N.Band):
        found.append(found[-1].child)
    return found


def _depth(band: N.Band) -> int:
    """Loops of the perfect nest ``band`` heads."""
    return sum(len(b.members) for b in _chain(band))


def _fused(schedule: Schedule, run: list[N.Band]) -> Schedule | None:
    """``schedule`` with the nests headed by ``run`` fused loop by loop, if the verifier accepts
    it and every fused loop is parallel; else None."""
    depth = _depth(run[0])
    try:
        made = run_primitive(schedule, "fuse", [band.names[0] for band in run], depth=depth, note=NOTE)
    except (ScheduleError, IllegalScheduleError):
        return None
    head = next(band for _, band in N.bands(made.root) if band.names[0] == run[0].names[0])
    flags = [flag for band in _chain(head) for flag in band.coincident][:depth]
    return made if len(flags) == depth and all(flags) else None


__all__ = ["NOTE", "fuse_parallel_nests"]
