"""Empirical choice of a kernel's configuration: compile a few, time them, keep the fastest.

A transformation that pays on one kernel can lose on another (tiling a kernel with no reuse,
register tiles on a short loop). :func:`autotune` therefore measures instead of guessing: it
compiles each :class:`Candidate` (the original loop order among them, so the result is never
slower than that), skips candidates whose loops come out the same as an earlier one's (the cheap
static pruning), runs each once on copies of the caller's arguments and checks that all agree,
times them interleaved (dropping after the first round those ``prune`` times slower than the
fastest) and returns the fastest, or the first listed within :data:`SIMPLER_WITHIN` of it. The caller's arrays are never written.
Decisions are cached per kernel, candidate list, thread count and parameter values.

    tuned = po.autotune(gemm, alpha, beta, C, A, B)
    tuned.best.label          # e.g. "pluto tiled+registers"
    tuned.seconds             # median time of every timed candidate
    tuned.compiled(alpha, beta, C, A, B)
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from polyopt.errors import PolyoptError
from polyopt.schedulers.registry import schedule
from polyopt.targets.arguments import bind_arguments
from polyopt.targets.cache import cache_key
from polyopt.targets.cpu import CompiledKernel, compile
from polyopt.transform.schedule import Schedule
from polyopt.transform.trace import Trace


class TuningError(PolyoptError):
    """Candidates that disagree on the result (a miscompilation), or none that compiles."""


@dataclass(frozen=True)
class Candidate:
    """One configuration: a scheduling algorithm and its options (as for :func:`polyopt.compile`),
    or a :class:`~polyopt.transform.trace.Trace` of primitives replayed onto the ``algorithm``'s
    schedule (a hand-steered schedule as a candidate: ``Candidate("mine", "original",
    trace=s.trace)``)."""

    label: str
    algorithm: str
    options: tuple[tuple[str, object], ...] = ()
    trace: Trace | None = None

    def compile(self, kernel, num_threads: int | None) -> CompiledKernel:
        threads = {} if num_threads is None else {"num_threads": num_threads}
        if self.trace is None:
            return compile(kernel, algorithm=self.algorithm, **threads, **dict(self.options))
        start = schedule(kernel, self.algorithm, **dict(self.options))
        return compile(kernel, schedule=self.trace.apply(start, check=False), **threads)  # compile verifies


#: Tried by default: the original order, sequential and with its parallel loops marked (fdtd-2d,
#: jacobi-2d, heat-3d, adi: about 2x of gcc on 2 threads, where Pluto's tiles lose), our pluto untiled, tiled with cache-derived sizes, and
#: with register tiles on top (with and without cache tiles; of four rows, and of one row, which
#: suits triangular bands such as covariance's), pluto with every strongly
#: connected component in its own loop nest (symm: 1.8x of gcc distributed, 1.15x fused, LARGE),
#: and pluto with hyperplanes shifted by the size parameters, which puts loops one after the other
#: inside a fused one (doitgen: the sum over s outside the stride-1 loop over p, 5x of gcc).
DEFAULT_CANDIDATES: tuple[Candidate, ...] = (
    Candidate("original", "original"),
    Candidate("original parallel", "original", (("parallel", True),)),
    Candidate("pluto", "pluto"),
    Candidate("pluto distributed", "pluto", (("fuse", "no"),)),
    Candidate("pluto shifted", "pluto", (("param_shifts", True),)),
    Candidate("pluto tiled", "pluto", (("tile", "auto"),)),
    Candidate("pluto tiled+registers", "pluto", (("tile", "auto"), ("register_tile", "auto"))),
    Candidate("pluto registers", "pluto", (("register_tile", "auto"),)),
    Candidate("pluto tiled+row registers", "pluto", (("tile", "auto"), ("register_tile", "row"))),
    Candidate("pluto row registers", "pluto", (("register_tile", "row"),)),
)


@dataclass(frozen=True)
class TuneResult:
    """The fastest candidate's compiled kernel and the record of the decision.

    ``seconds``: median time per timed candidate label; ``skipped``: label -> why it was not
    timed (its loops equal an earlier candidate's, or it failed to compile); ``params``: the
    size parameters the decision holds for."""

    compiled: CompiledKernel
    best: Candidate
    seconds: dict[str, float]
    skipped: dict[str, str] = field(default_factory=dict)
    params: dict[str, int] = field(default_factory=dict)

    @property
    def schedule(self) -> Schedule:
        """The winner's schedule: print it, read its trace, edit it, compile it again."""
        return self.compiled.schedule


_DECISIONS: dict[tuple, TuneResult] = {}
#: A round of timing runs each candidate this long at least (short kernels run several times)...
MIN_ROUND_SECONDS = 0.02
#: ...but at most this many times.
MAX_RUNS_PER_ROUND = 20
#: A candidate listed earlier (simpler: the original order comes first) wins over a faster one
#: unless that is faster by more than this factor: a few percent are timing noise, and threads or
#: tiles bought for them are a risk (2-thread code on a busy machine stalls at its barriers).
SIMPLER_WITHIN = 1.05


def clear_decisions() -> None:
    """Forget every cached tuning decision."""
    _DECISIONS.clear()


def autotune(kernel, *args, candidates: tuple[Candidate, ...] | None = None, repeats: int = 3,
             num_threads: int | None = None, rtol: float = 1e-6, prune: float = 3.0,
             **kwargs) -> TuneResult:
    """Time ``candidates`` (default :data:`DEFAULT_CANDIDATES`) of ``kernel`` on copies of the
    call arguments ``args``/``kwargs`` and return the fastest (see the module docstring).

    After one checked warm-up run each, ``repeats`` rounds of timed runs, interleaved (a short
    kernel runs several times a round, see :data:`MIN_ROUND_SECONDS`); the median of the runs and
    of the rounds counts, not the minimum: threaded code on a busy machine is fast only at times
    (a thread descheduled at a barrier stalls the team), and what is fast at times loses to what
    is steadily fast in the median of a benchmark;
    results must agree with the first candidate's within ``rtol`` (normwise) or
    :class:`TuningError` is raised. Candidates ``prune`` times slower than the fastest in the
    first round are not timed again (their ``seconds`` is that round's)."""
    candidates = tuple(candidates or DEFAULT_CANDIDATES)
    if not candidates or not all(isinstance(c, Candidate) for c in candidates):
        raise TypeError("candidates must be a non-empty sequence of polyopt.schedulers.autotune.Candidate")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be a positive int, got {repeats!r}")
    if not prune >= 1:
        raise ValueError(f"prune must be a factor of at least 1, got {prune!r}")
    scop = getattr(kernel, "scop", kernel)
    bound = bind_arguments(scop, args, kwargs)
    key = (cache_key(kernel, "cpu", "autotune", {}), candidates, num_threads,
           tuple(sorted(bound.params.items())))
    if key in _DECISIONS:
        return _DECISIONS[key]

    compiled, skipped = _compile_distinct(kernel, candidates, num_threads)
    pristine = {name: array.copy() for name, array in bound.arrays.items()}
    work = {name: array.copy() for name, array in pristine.items()}
    call_args = {**{a.name: bound.params[a.name] for a in scop.arguments if a.kind == "param"},
                 **bound.scalars, **work}

    def run(kernel_: CompiledKernel) -> float:
        for name, array in work.items():
            np.copyto(array, pristine[name])
        start = time.perf_counter()
        kernel_(**call_args)
        return time.perf_counter() - start

    warm = _check_agreement(compiled, run, work, rtol)  # also each one's warm-up run
    # short kernels: several runs per candidate and round, so a round takes about MIN_ROUND_SECONDS
    runs = max(1, min(MAX_RUNS_PER_ROUND, int(MIN_ROUND_SECONDS / max(min(warm.values()), 1e-9))))
    rounds = {c: [_median([run(k) for _ in range(runs)])] for c, k in compiled.items()}
    fastest = min(times[0] for times in rounds.values())
    contenders = {c: k for c, k in compiled.items() if rounds[c][0] <= prune * fastest}
    for _ in range(repeats - 1):
        for candidate, kernel_ in contenders.items():
            rounds[candidate].append(_median([run(kernel_) for _ in range(runs)]))
    seconds = {c.label: _median(rounds[c]) for c in compiled}
    fastest = min(seconds.values())
    best = next(c for c in compiled if seconds[c.label] <= SIMPLER_WITHIN * fastest)
    result = TuneResult(compiled[best], best, seconds, skipped, dict(bound.params))
    _DECISIONS[key] = result
    return result


def _median(times: list[float]) -> float:
    return float(np.median(times))


def _compile_distinct(kernel, candidates: tuple[Candidate, ...],
                      num_threads: int | None) -> tuple[dict[Candidate, CompiledKernel], dict[str, str]]:
    """Compile every candidate; drop those that fail or whose loops equal an earlier one's."""
    compiled: dict[Candidate, CompiledKernel] = {}
    skipped: dict[str, str] = {}
    seen: dict[str, str] = {}
    for candidate in candidates:
        try:
            kernel_ = candidate.compile(kernel, num_threads)
        except PolyoptError as exc:
            skipped[candidate.label] = f"failed: {str(exc).splitlines()[0]}"
            continue
        loops = kernel_.loop_ast
        if loops in seen:
            skipped[candidate.label] = f"same loops as {seen[loops]!r}"
            continue
        seen[loops] = candidate.label
        compiled[candidate] = kernel_
    if not compiled:
        raise TuningError(f"no candidate compiled: {skipped}")
    return compiled, skipped


def _check_agreement(compiled: dict[Candidate, CompiledKernel], run, work: dict[str, np.ndarray],
                     rtol: float) -> dict[Candidate, float]:
    """Run every candidate once (returned: the times); each result must match the first
    candidate's (normwise, since reordered floating-point sums differ in the last bits)."""
    reference: dict[str, np.ndarray] | None = None
    first = ""
    seconds = {}
    for candidate, kernel_ in compiled.items():
        seconds[candidate] = run(kernel_)
        if reference is None:
            reference, first = {k: v.copy() for k, v in work.items()}, candidate.label
            continue
        for name, expected in reference.items():
            scale = max(float(np.linalg.norm(expected.ravel())), 1e-300)
            error = float(np.linalg.norm((work[name] - expected).ravel()))
            if not error <= rtol * scale:
                raise TuningError(f"autotune: candidate {candidate.label!r} computes a different "
                                  f"{name!r} than {first!r} (relative error {error / scale:.3g})")
    return seconds
