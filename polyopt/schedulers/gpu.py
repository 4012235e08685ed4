"""Choosing a schedule for the GPU: candidates scheduled, mapped and scored by a launch/work model.

The CPU's best schedule is not the GPU's: Pluto's fusion can put a reduction and a parallel
product under one sequential loop (atax), whose mapping is then a host loop launching a
one-thread kernel per iteration. :func:`choose` maps each candidate schedule onto the GPU
(:func:`polyopt.codegen.gpu_mapping.map_to_gpu`) and estimates the mapped program's run time
(:func:`estimate`) at representative sizes: the suite entry's LARGE preset when the kernel is a
suite kernel, else 1000 for every size. The estimate counts, per kernel, its launches, its
statement instances and its threads (isl counts them at two small scalings of those sizes and
extrapolates to the sizes themselves), and charges

    launches * LAUNCH_S + instances / min(threads per launch * THREAD_RATE, GPU_RATE)

so a one-thread kernel costs its whole work at one thread's rate, and a kernel launched per
instance of a wavefront costs its launches; where the mapping split sums over the threads of a
warp (``gpu_reduce`` marks), each coordinate counts as that many threads. A candidate with no *serial* one-thread kernel (one
launched in a host loop or running a loop: a scalar statement's single launch is not one) is
preferred unless another is estimated more than :data:`ONE_THREAD_TOLERANCE` times faster;
between two such candidates, the CUDA target's first comparison (requested algorithm against the
original order) keeps the one with more thread coordinates per statement, as before this
estimate existed (the estimate knows nothing of register tiles and shared memory), and the
others go by the estimate. The chosen candidate, the ones beaten and their estimates go into
the schedule's notes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable

import islpy as isl

from polyopt.analysis.scop import Scop
from polyopt.codegen.cuda import ONE_BLOCK_THREADS
from polyopt.codegen.gpu_mapping import GPU_ONE_BLOCK_MARK, GPU_PHASE_MARK, GpuProgram, sum_statements
from polyopt.codegen.gpu_reduction import OTHER_PARTS, ROW_PARTS
from polyopt.transform import nodes as N
from polyopt.transform.marks import GPU_BLOCK_MARK, GPU_KERNEL_MARK, GPU_THREAD_MARK
from polyopt.transform.primitives import refresh_flags

#: Seconds per kernel launch (host loop launches included; an H100 with CuPy or a graph).
LAUNCH_S = 3e-6
#: Statement instances one GPU thread runs per second (a dependent chain of loads and FMAs).
THREAD_RATE = 2e7
#: Statement instances the whole GPU runs per second when enough threads are busy.
GPU_RATE = 2e11
#: Seconds per phase of a one-block kernel, each time it runs: a barrier and the latency of the
#: phase's global memory accesses, which one block cannot hide behind other blocks' work.
PHASE_S = 5e-7
#: A candidate without one-thread kernels wins unless another is this many times faster.
ONE_THREAD_TOLERANCE = 4.0
#: Where both are serial (or neither), a second-round candidate (not the requested algorithm
#: nor the original order) must be estimated this many times faster to be chosen.
SECOND_ROUND_MARGIN = 1.5
#: The two scalings (largest size) at which isl counts points, extrapolated from.
_SCALES = (16, 32)
#: Sizes used for a kernel that is not in the suite.
DEFAULT_SIZE = 1000


@dataclass(frozen=True)
class KernelCost:
    """One kernel of a mapped program at the representative sizes; ``in_block``: the seconds
    a one-block kernel's phases take per launch (:func:`one_block_seconds`), None for others;
    ``serial_phase``: one of its phases runs a loop on one thread."""

    name: str
    coords: int
    launches: float
    instances: float
    threads: float  # over all launches, a warp's threads a coordinate where sums split
    in_block: float | None = None
    serial_phase: bool = False

    @property
    def seconds(self) -> float:
        if self.in_block is not None:
            return self.launches * (LAUNCH_S + self.in_block)
        per_launch = max(self.threads / max(self.launches, 1.0), 1.0)
        rate = min(per_launch * THREAD_RATE, GPU_RATE)
        return self.launches * LAUNCH_S + self.instances / rate


@dataclass(frozen=True)
class ProgramCost:
    """The estimate of a mapped program: its kernels' costs and totals."""

    kernels: tuple[KernelCost, ...]

    @property
    def seconds(self) -> float:
        return sum(k.seconds for k in self.kernels)

    @property
    def one_thread(self) -> tuple[KernelCost, ...]:
        """The kernels without thread coordinates (one thread, or one warp for a split sum;
        not the one-block kernels, whose phases spread over a block's threads)."""
        return tuple(k for k in self.kernels if not k.coords and k.in_block is None)

    @property
    def serial(self) -> tuple[KernelCost, ...]:
        """The one-thread kernels launched more than once or running more than one instance
        per launch (not a scalar statement's single launch), and the one-block kernels with a
        phase that runs a loop on one thread."""
        return tuple(k for k in self.one_thread if k.launches > 1.5 or k.instances > k.launches + 0.5) \
            + tuple(k for k in self.one_block if k.serial_phase)

    @property
    def one_block(self) -> tuple[KernelCost, ...]:
        """The one-block kernels (sequential loops inside one thread block)."""
        return tuple(k for k in self.kernels if k.in_block is not None)

    @property
    def serial_instances(self) -> float:
        """Instances that run in one-thread kernels."""
        return sum(k.instances for k in self.one_thread)

    @property
    def launches(self) -> float:
        return sum(k.launches for k in self.kernels)

    def summary(self) -> str:
        return (f"~{_fmt_seconds(self.seconds)}, {len(self.kernels)} kernels, "
                f"{len(self.one_thread)} one-thread ({len(self.serial)} serial, "
                f"{_fmt_count(self.serial_instances)} instances), "
                f"{_fmt_count(self.launches)} launches")


def _fmt_seconds(s: float) -> str:
    return f"{s * 1e3:.3g} ms" if s < 1 else f"{s:.3g} s"


def _fmt_count(n: float) -> str:
    return f"{n:.3g}" if n < 1e4 else f"{n:.2e}"


def representative_sizes(scop: Scop) -> dict[str, int]:
    """The LARGE preset of the suite entry of ``scop`` (same name and sizes), else
    :data:`DEFAULT_SIZE` for every size."""
    from polyopt import suite
    for name in suite.names():
        entry = suite.get(name)
        if entry.kernel.scop.name == scop.name and set(entry.kernel.scop.params) == set(scop.params):
            sizes = dict(entry.sizes("LARGE"))
            return {p: int(sizes.get(p, DEFAULT_SIZE)) for p in scop.params}
    return {p: DEFAULT_SIZE for p in scop.params}


class _Counter:
    """Counts points of parametric sets at the two scalings of the representative sizes and
    extrapolates to the sizes themselves (as a power of the scale)."""

    def __init__(self, scop: Scop, sizes: dict[str, int]):
        self.scop = scop
        largest = max(sizes.values(), default=1)
        self.factor = largest / _SCALES[-1]
        self.contexts = []
        for scale in _SCALES:
            fixed = {p: max(2, round(v * scale / largest)) if largest > scale else v for p, v in sizes.items()}
            if not fixed:
                self.contexts.append(None)
                continue
            text = " and ".join(f"{p} = {v}" for p, v in fixed.items())
            self.contexts.append(isl.Set(f"[{', '.join(fixed)}] -> {{ : {text} }}"))
        if largest <= _SCALES[-1]:
            self.factor = 1.0

    def count(self, points: isl.UnionSet) -> float:
        counts = []
        for context in self.contexts:
            total = 0
            fixed = points if context is None else points.intersect_params(context.align_params(points.get_space()))
            sets = []
            fixed.foreach_set(sets.append)
            for s in sets:
                total += _points(s)
            counts.append(total)
        small, big = counts
        if big == 0 or self.factor == 1.0:
            return float(big)
        degree = math.log2(big / small) if small else 0.0
        degree = min(max(degree, 0.0), 8.0)
        return big * self.factor ** degree


#: Sets whose bounding box holds more points than this are counted as their box (isl counts by
#: enumeration: a kernel with constant loop bounds would take seconds).
_MAX_ENUMERATED = 2_000_000


def _points(s: isl.Set) -> int:
    """The number of points of a bounded set without parameters left free (its bounding box's
    where that is large)."""
    if s.is_empty():
        return 0
    box = 1
    for d in range(s.dim(isl.dim_type.set)):
        low, high = s.dim_min_val(d), s.dim_max_val(d)
        if not (low.is_int() and high.is_int()):
            return 0  # unbounded: nothing to go by
        box *= high.to_python() - low.to_python() + 1
    return box if box > _MAX_ENUMERATED else s.count_val().to_python()


def estimate(scop: Scop, program: GpuProgram, sizes: dict[str, int] | None = None) -> ProgramCost:
    """The cost of ``program`` at ``sizes`` (default :func:`representative_sizes`)."""
    counter = _Counter(scop, representative_sizes(scop) if sizes is None else sizes)
    found: list[KernelCost] = []

    def look(node: isl.ScheduleNode) -> bool:
        if node.get_type() != isl.schedule_node_type.mark:
            return True
        name = node.mark_get_id().get_name()
        if name.split(" ")[0] != GPU_KERNEL_MARK:
            return True
        domain = node.get_domain()
        host = node.get_prefix_schedule_union_map().intersect_domain(domain).range()
        below, coords = node.child(0), 0
        while below.get_type() == isl.schedule_node_type.mark and \
                below.mark_get_id().get_name() in (GPU_BLOCK_MARK, GPU_THREAD_MARK):
            while below.get_type() == isl.schedule_node_type.mark:
                below = below.child(0)
            below = below.child(0)
            coords += 1
        launches = counter.count(host)
        if below.get_type() == isl.schedule_node_type.mark and \
                below.mark_get_id().get_name() == GPU_ONE_BLOCK_MARK:
            seconds, serial = one_block_seconds(counter, below)
            found.append(KernelCost(name.split(" ", 1)[1], 0, launches, counter.count(domain),
                                    ONE_BLOCK_THREADS, seconds / max(launches, 1.0), serial))
            return False
        threads = counter.count(below.get_prefix_schedule_union_map().intersect_domain(domain).range())
        if sum_statements(below):  # the threads of a warp share each coordinate's sums
            threads *= ROW_PARTS if not coords else OTHER_PARTS
        found.append(KernelCost(name.split(" ", 1)[1], coords, launches, counter.count(domain), threads))
        return False

    program.tree.get_root().foreach_descendant_top_down(look)
    return ProgramCost(tuple(found))


def one_block_seconds(counter: "_Counter", block: isl.ScheduleNode) -> tuple[float, bool]:
    """The seconds the phases under ``block`` (a ``gpu_one_block`` mark) take over all its
    launches: :data:`PHASE_S` each time a phase runs, and its instances at one thread's rate
    times its threads at once (its coordinate's values per run, or the block where its sums
    split; one thread otherwise); and whether a phase on one thread runs more than one
    instance a run (a loop)."""
    total, serial = [], []

    def look(node: isl.ScheduleNode) -> bool:
        if node.get_type() != isl.schedule_node_type.mark or \
                node.mark_get_id().get_name().split(" ")[0] != GPU_PHASE_MARK:
            return True
        domain = node.get_domain()
        runs = max(counter.count(node.get_prefix_schedule_union_map().intersect_domain(domain).range()), 1.0)
        below = node.child(0)
        threads = 1.0
        if below.get_type() == isl.schedule_node_type.mark and below.mark_get_id().get_name() == GPU_THREAD_MARK:
            band = below.child(0)
            points = band.get_prefix_schedule_union_map().flat_range_product(
                band.band_get_partial_schedule_union_map()).intersect_domain(domain).range()
            threads = counter.count(points) / runs
        elif sum_statements(node):
            threads = ONE_BLOCK_THREADS
        instances = counter.count(domain)
        serial.append(threads == 1.0 and instances > runs + 0.5)
        total.append(runs * PHASE_S + instances / (min(max(threads, 1.0), ONE_BLOCK_THREADS) * THREAD_RATE))
        return False

    block.foreach_descendant_top_down(look)
    return sum(total), any(serial)


def wavefront_loops(schedule) -> tuple[str, str] | None:
    """The outer two loops of the outermost band of ``schedule`` that has two or more loops, is
    permutable and has no parallel loop (its flags recomputed from the dependences: a
    scheduler asked for no parallel marks leaves them unset), or None. Their wavefront
    (:meth:`~polyopt.Schedule.wavefront`) runs the band's anti-diagonals in order, a host loop,
    with the inner loop parallel, one thread per instance of a diagonal (nussinov: one per
    table cell), where the band itself maps to one serial thread."""
    for path, band in N.bands(schedule.root):
        if len(band.members) < 2:
            continue
        flagged = N.at(refresh_flags(schedule, schedule.root, path), path)
        if flagged.permutable and not any(flagged.flag(k) for k in range(len(band.members))):
            return band.names[0], band.names[1]
    return None


@dataclass(frozen=True)
class Candidate:
    """A schedule the GPU may run: its label (how it was made), the schedule, its mapping and
    the mapping's cost."""

    label: str
    schedule: object  # polyopt.transform.schedule.Schedule
    program: GpuProgram
    cost: ProgramCost


def coordinates(program: GpuProgram) -> int:
    """Thread coordinates summed over statements (the CUDA target's measure before the estimate)."""
    return sum(len(k.coords) * len(k.statements) for k in program.kernels)


def better(a: Candidate, b: Candidate, *, by_coordinates: bool = False, margin: float = 1.001) -> Candidate:
    """The better of two candidates (``a`` on a tie): one without serial one-thread kernels
    beats one with them unless that one is estimated more than :data:`ONE_THREAD_TOLERANCE`
    times faster; otherwise the faster by the estimate, or with ``by_coordinates`` and neither
    serial, the one with more thread coordinates per statement; ``b`` must be ``margin`` times
    faster to win on the estimate alone."""
    a_free, b_free = not a.cost.serial, not b.cost.serial
    if a_free != b_free:
        free, other = (a, b) if a_free else (b, a)
        return free if free.cost.seconds <= ONE_THREAD_TOLERANCE * other.cost.seconds else other
    if by_coordinates and a_free:
        return b if coordinates(b.program) > coordinates(a.program) else a
    return b if b.cost.seconds * margin < a.cost.seconds else a


def choose(makers: Iterable[tuple[str, Callable[[], object]]],
           map_program: Callable[[object], GpuProgram], *, by_coordinates: bool = False,
           strict: bool = False) -> tuple[Candidate | None, list[Candidate], list[str]]:
    """The best candidate of ``makers`` (label, function making the schedule), each mapped by
    ``map_program`` (None if every one failed); also every candidate scored and the labels that failed, with the reason
    (with ``strict``, a candidate's error is raised instead)."""
    from polyopt.errors import PolyoptError

    scored: list[Candidate] = []
    failed: list[str] = []
    best = None
    for label, make in makers:
        try:
            sched = make()
            program = map_program(sched)
        except PolyoptError as exc:
            if strict:
                raise
            failed.append(f"{label}: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}")
            continue
        candidate = Candidate(label, sched, program, estimate(sched.scop, program))  # (maybe its scalars expanded)
        scored.append(candidate)
        best = candidate if best is None else better(best, candidate, by_coordinates=by_coordinates)
    return best, scored, failed


def note(best: Candidate, scored: list[Candidate], failed: list[str], requested: str) -> str:
    """The schedule note saying which candidate the GPU runs and why."""
    others = "; ".join(f"{c.label}: {c.cost.summary()}" for c in scored if c is not best)
    text = (f"gpu schedule: {best.label} chosen for the GPU ({best.cost.summary()})"
            + ("" if best.label == requested else f", not the requested {requested}")
            + (f"; beaten: {others}" if others else "")
            + (f"; failed: {'; '.join(failed)}" if failed else ""))
    return text
