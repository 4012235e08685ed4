"""Empirical choice of a kernel's configuration: compile a few, time them, keep the fastest.

A transformation that pays on one kernel can lose on another (tiling a kernel with no reuse,
register tiles on a short loop). :func:`autotune` therefore measures instead of guessing: it
compiles each :class:`Candidate` (the original loop order among them, so the result is never
slower than that), skips candidates whose loops come out the same as an earlier one's (the cheap
static pruning), runs each once on copies of the caller's arguments and checks that all agree,
times them interleaved (dropping after the first round those ``prune`` times slower than the
fastest) and returns the fastest, or the first listed within :data:`SIMPLER_WITHIN` of it. The caller's arrays are never written.

The default candidates (:func:`default_candidates`) are :data:`DEFAULT_CANDIDATES` and the cost
model's neighbourhood (:func:`neighbourhood`: the tile sizes of the bands the model tiles,
halved and doubled one loop at a time), at most :data:`MAX_CANDIDATES` in all. Candidates not
compiled yet are compiled in parallel (``executor=``, by default a process pool where several
need compiling: a worker's compile fills the disk compile cache, the parent then loads the
native code from there); timing stays in this process, serial. ``progress=`` prints the sweep
with the best so far, ``time_budget=`` stops it early. Decisions are kept in memory and in the
tuning database on disk (:mod:`polyopt.schedulers.tuning_db`), keyed by kernel, sizes, dtypes,
target, thread count and machine: a later process gets the stored decision without timing, and
``po.compile(kernel, tuned=True)`` compiles it (:func:`compile_tuned`).

    tuned = po.autotune(gemm, alpha, beta, C, A, B)
    tuned.best.label          # e.g. "pluto tiled+registers"
    tuned.seconds             # median time of every timed candidate
    tuned.compiled(alpha, beta, C, A, B)
"""
from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import re
import sys
import threading
import time
import warnings
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

import numpy as np

from polyopt.analysis.scop import scop_fingerprint
from polyopt.errors import ArgumentError, PolyoptError, PolyoptWarning
from polyopt.schedulers import tuning_db
from polyopt.schedulers.registry import DEFAULT_ALGORITHM, schedule
from polyopt.targets import disk_cache
from polyopt.targets.arguments import bind_arguments, check_num_threads, default_num_threads
from polyopt.targets.cache import COMPILED, cache_key
from polyopt.targets.cpu import CompiledKernel, compile, cpu_cache_key
from polyopt.transform.schedule import Schedule
from polyopt.transform.trace import Step, Trace


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

    def schedule(self, kernel) -> Schedule:
        """The candidate's schedule of ``kernel`` (its trace replayed, unchecked: compile verifies)."""
        start = schedule(kernel, self.algorithm, **dict(self.options))
        return start if self.trace is None else self.trace.apply(start, check=False)

    def compile(self, kernel, num_threads: int | None) -> CompiledKernel:
        threads = {} if num_threads is None else {"num_threads": num_threads}
        if self.trace is None:
            return compile(kernel, algorithm=self.algorithm, **threads, **dict(self.options))
        return compile(kernel, schedule=self.schedule(kernel), **threads)  # compile verifies

    def to_json(self) -> dict:
        """The candidate as plain JSON values (the tuning database's record of a winner)."""
        return {"label": self.label, "algorithm": self.algorithm, "options": [[k, v] for k, v in self.options],
                "trace": None if self.trace is None else self.trace.to_json()}

    @staticmethod
    def from_json(data: dict) -> "Candidate":
        def frozen(value):
            return tuple(frozen(v) for v in value) if isinstance(value, list) else value
        trace = data.get("trace")
        return Candidate(data["label"], data["algorithm"], tuple((str(k), frozen(v)) for k, v in data["options"]),
                         None if trace is None else Trace.from_json(trace))


#: Tried by default: the original order, sequential and with its parallel loops marked (fdtd-2d,
#: jacobi-2d, heat-3d, adi: about 2x of gcc on 2 threads, where Pluto's tiles lose), our pluto with the cost model's choice (its default), tiled with cache-derived sizes, and
#: with register tiles on top (with and without cache tiles; of four rows, and of one row, which
#: suits triangular bands such as covariance's), pluto with every strongly
#: connected component in its own loop nest (symm: 1.8x of gcc distributed, 1.15x fused, LARGE),
#: and pluto with hyperplanes shifted by the size parameters, which puts loops one after the other
#: inside a fused one (doitgen: the sum over s outside the stride-1 loop over p, 5x of gcc);
#: last pluto fusing as much as it can (the other end of the fusion choice from distributed); the
#: fusion variants without the cost model (model=False), as Pluto publishes them.
DEFAULT_CANDIDATES: tuple[Candidate, ...] = (
    Candidate("original", "original"),
    Candidate("original parallel", "original", (("parallel", True),)),
    Candidate("pluto", "pluto"),
    Candidate("pluto distributed", "pluto", (("fuse", "no"), ("model", False))),
    Candidate("pluto shifted", "pluto", (("param_shifts", True), ("model", False))),
    Candidate("pluto tiled", "pluto", (("tile", "auto"),)),
    Candidate("pluto tiled+registers", "pluto", (("tile", "auto"), ("register_tile", "auto"))),
    Candidate("pluto registers", "pluto", (("register_tile", "auto"),)),
    Candidate("pluto tiled+row registers", "pluto", (("tile", "auto"), ("register_tile", "row"))),
    Candidate("pluto row registers", "pluto", (("register_tile", "row"),)),
    Candidate("pluto fused", "pluto", (("fuse", "max"), ("model", False))),
)

#: The default candidate list holds at most this many: :data:`DEFAULT_CANDIDATES`, then the
#: cost model's neighbourhood (:func:`neighbourhood`) up to the bound.
MAX_CANDIDATES = 16
#: Neighbourhood tile sizes stay within these bounds.
MIN_TILE, MAX_TILE = 4, 1024


@dataclass(frozen=True)
class TuneResult:
    """The fastest candidate's compiled kernel and the record of the decision.

    ``seconds``: median time per timed candidate label; ``skipped``: label -> why it was not
    timed (its loops equal an earlier candidate's, it failed to compile, or the time budget ran
    out: "time budget"); ``params``: the size parameters the decision holds for; ``stored``:
    True where the decision came from the tuning database (nothing was timed; ``seconds`` are
    those measured then); ``elapsed``: the seconds this call took."""

    compiled: CompiledKernel
    best: Candidate
    seconds: dict[str, float]
    skipped: dict[str, str] = field(default_factory=dict)
    params: dict[str, int] = field(default_factory=dict)
    stored: bool = False
    elapsed: float = 0.0

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
#: With ``executor=None``, a process pool compiles where at least this many candidates are in
#: neither the memory nor the disk compile cache (fewer: starting workers does not pay).
POOL_MIN_CANDIDATES = 4
#: Why a candidate was not timed when the time budget ran out.
BUDGET = "time budget"


def clear_decisions() -> None:
    """Forget every tuning decision cached in memory (the tuning database on disk stays:
    :func:`polyopt.schedulers.tuning_db.clear` empties it)."""
    _DECISIONS.clear()


def neighbourhood(kernel, limit: int | None = None) -> tuple[Candidate, ...]:
    """The cost model's neighbours: for each band that pluto's default schedule tiles (the
    model's decision, :mod:`polyopt.schedulers.cost`), its tile sizes with one loop's size halved
    or doubled (kept a multiple of the register tile along that loop, within
    :data:`MIN_TILE`..:data:`MAX_TILE`, and no larger than the wavefront cap where the band has
    no parallel loop, except its innermost loop: see :func:`_largest_tile`), as traces replayed
    onto the original order; then the same for the bands without a parallel loop that the model
    leaves untiled and whose loops are the statements' own iterators (floyd-warshall's ``i, j``:
    its wavefront of 32x64 tiles is faster than its untiled loops and than 32x32), varied from
    the sizes of pluto's ``tile="auto"`` schedule; at most ``limit`` (None: :data:`MAX_CANDIDATES`)."""
    limit = MAX_CANDIDATES if limit is None else limit
    try:
        base = schedule(kernel, DEFAULT_ALGORITHM)
    except PolyoptError:
        return ()
    costs = {cost.loops: cost for cost in getattr(base, "cost", ())}
    found = _varied_tiles(list(base.trace), costs, "pluto tiles")
    untiled = {loops: cost for loops, cost in costs.items()
               if not (cost.tile or cost.parallel) and _walks_iterators(loops)}
    if untiled and len(found) < limit:
        try:
            tiled = schedule(kernel, DEFAULT_ALGORITHM, tile="auto")
        except PolyoptError:
            tiled = None
        if tiled is not None:
            found += _varied_tiles(list(tiled.trace), untiled, "pluto tiled")
    return tuple(found[:max(0, limit)])


def _walks_iterators(loops: tuple[str, ...]) -> bool:
    """Whether every loop of a band is one of its statements' own iterators: named for it, not
    ``c<depth>`` (:func:`polyopt.transform.nodes.suggested_name`), so the band is not skewed
    (isl's AST generation of large tiles of skewed bands is what :data:`WAVEFRONT_TILE_CAP`
    bounds)."""
    return all(not re.fullmatch(r"c\d+", name.split("@")[0]) for name in loops)


def _largest_tile(cost, member: int, sizes: list[int]) -> int:
    """The largest neighbour size of a band member: :data:`MAX_TILE`, or in a band with no
    parallel loop (a wavefront) the wavefront cap, twice that for its innermost loop where the
    band walks its statements' iterators (longer runs of the stride-1 rows each tile reads)."""
    from polyopt.schedulers import tilesize
    if cost.parallel:
        return MAX_TILE
    cap = tilesize.WAVEFRONT_TILE_CAP
    return 2 * cap if member == len(sizes) - 1 and _walks_iterators(cost.loops) else cap


def _varied_tiles(steps: list[Step], costs: dict, label: str) -> list[Candidate]:
    """Candidates replaying ``steps`` with one ``tile`` step of a band in ``costs`` changed: one
    member's size halved or doubled (see :func:`neighbourhood`)."""
    tiled = [(index, step) for index, step in enumerate(steps) if step.primitive == "tile" and step.loops in costs]
    found: list[Candidate] = []
    for index, step in tiled:
        cost, sizes = costs[step.loops], list(step.kwargs.get("sizes", ()))
        if len(sizes) != len(step.loops):
            continue
        for k, size in enumerate(sizes):
            unit = cost.register_plan[k] if cost.register_plan and k < len(cost.register_plan) else 1
            largest = _largest_tile(cost, k, sizes)
            for new in (size // 2, size * 2):
                if not max(MIN_TILE, unit) <= new <= largest or new % unit:
                    continue
                varied = sizes[:k] + [new] + sizes[k + 1:]
                where = f" ({', '.join(step.loops)})" if len(tiled) > 1 else ""
                changed = Step.make("tile", step.loops, f"autotune: the cost model's {step.loops[k]} tile "
                                    f"{size} -> {new}", sizes=varied)
                trace = Trace(tuple(steps[:index]) + (changed,) + tuple(steps[index + 1:]))
                found.append(Candidate(f"{label} {'x'.join(map(str, varied))}{where}", "original", trace=trace))
    return found


def default_candidates(kernel, limit: int | None = None) -> tuple[Candidate, ...]:
    """:data:`DEFAULT_CANDIDATES` and then :func:`neighbourhood`, at most ``limit`` in all
    (None: :data:`MAX_CANDIDATES`)."""
    limit = MAX_CANDIDATES if limit is None else limit
    return (DEFAULT_CANDIDATES + neighbourhood(kernel, limit - len(DEFAULT_CANDIDATES)))[:limit]


def autotune(kernel, *args, candidates: tuple[Candidate, ...] | None = None, repeats: int = 3,
             num_threads: int | None = None, rtol: float = 1e-6, prune: float = 3.0,
             executor: Executor | None | bool = None, progress: bool | None = None,
             time_budget: float | None = None, refresh: bool = False, database: bool = True,
             **kwargs) -> TuneResult:
    """Time ``candidates`` (default :func:`default_candidates`) of ``kernel`` on copies of the
    call arguments ``args``/``kwargs`` and return the fastest (see the module docstring).

    After one checked warm-up run each, ``repeats`` rounds of timed runs, interleaved (a short
    kernel runs several times a round, see :data:`MIN_ROUND_SECONDS`); the median of the runs and
    of the rounds counts, not the minimum: threaded code on a busy machine is fast only at times
    (a thread descheduled at a barrier stalls the team), and what is fast at times loses to what
    is steadily fast in the median of a benchmark;
    results must agree with the first candidate's within ``rtol`` (normwise) or
    :class:`TuningError` is raised. Candidates ``prune`` times slower than the fastest in the
    first round are not timed again (their ``seconds`` is that round's).

    ``executor``: where candidates that are in no compile cache yet are compiled: any
    :class:`concurrent.futures.Executor` (a process pool, a Dask or Ray cluster's executor: its
    workers must share the disk compile cache's folder, which they are told; a
    ``ThreadPoolExecutor`` shares this process's memory cache), None (a process pool of
    ``os.cpu_count()`` workers where :data:`POOL_MIN_CANDIDATES` or more need compiling, forked,
    or where other threads run, spawned from a notebook or the REPL only: see
    :func:`_default_pool`; else here) or False (here, one after the other). Without the disk cache (``POLYOPT_CACHE=0``),
    and for kernels that cannot be sent to another process (only DSL kernels can: as their
    source text), process executors are not used. Timing is always here and serial.

    ``progress``: print each candidate compiled and timed with the best so far to stderr (tqdm's
    bar where tqdm is installed and stderr is a terminal, else a line each: a log file gets
    lines, not a bar's carriage returns); None: where stderr is a terminal.
    ``time_budget``: seconds after which no further candidate is compiled, checked or timed, and
    no further round run (the first candidate always is); those left out are in ``skipped`` as
    "time budget". ``database``: read and write the tuning database (a decision stored for
    the same kernel, sizes, dtypes, thread count, candidates and machine is returned without
    timing: ``stored`` is True; one cut short by a time budget only to calls with a budget);
    ``refresh=True`` times again and replaces it."""
    started = time.perf_counter()
    given = candidates
    if candidates is not None:
        candidates = tuple(candidates)
        if not candidates or not all(isinstance(c, Candidate) for c in candidates):
            raise TypeError("candidates must be a non-empty sequence of polyopt.schedulers.autotune.Candidate")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be a positive int, got {repeats!r}")
    if not prune >= 1:
        raise ValueError(f"prune must be a factor of at least 1, got {prune!r}")
    if time_budget is not None and not time_budget >= 0:
        raise ValueError(f"time_budget must be a number of seconds >= 0, got {time_budget!r}")
    if not (executor is None or isinstance(executor, (bool, Executor))) or executor is True:
        raise TypeError(f"executor must be a concurrent.futures.Executor, None or False, got {executor!r}")
    scop = getattr(kernel, "scop", kernel)
    bound = bind_arguments(scop, args, kwargs)
    show = sys.stderr.isatty() if progress is None else bool(progress)
    key = (cache_key(kernel, "cpu", "autotune", {}), given, num_threads,
           tuple(sorted(bound.params.items())))
    if key in _DECISIONS and not refresh:
        return _DECISIONS[key]
    db_key = _database_key(scop, bound, num_threads, given) if database else None
    if db_key is not None and not refresh:
        result = _stored(kernel, db_key, num_threads, dict(bound.params), time_budget is not None, started)
        if result is not None:
            if show:
                print(f"autotune {scop.name}: {result.best.label!r} from the tuning database "
                      f"({tuning_db.directory()})", file=sys.stderr)
            _DECISIONS[key] = result
            return result

    candidates = candidates or default_candidates(kernel)
    report = _Progress(show, scop.name, len(candidates))

    budget = _Budget(started, time_budget)
    try:
        compiled, skipped = _compile_distinct(kernel, candidates, num_threads, executor, budget, report)
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

        warm = _check_agreement(compiled, run, work, rtol, budget, skipped)  # also each one's warm-up run
        # short kernels: several runs per candidate and round, so a round takes about MIN_ROUND_SECONDS
        runs = max(1, min(MAX_RUNS_PER_ROUND, int(MIN_ROUND_SECONDS / max(min(warm.values()), 1e-9))))
        rounds: dict[Candidate, list[float]] = {}
        report.timing(len(compiled))
        for candidate, kernel_ in list(compiled.items()):
            if rounds and budget.over():
                skipped[candidate.label] = BUDGET
                del compiled[candidate]
                report.timed(candidate.label, None)
                continue
            rounds[candidate] = [_median([run(kernel_) for _ in range(runs)])]
            report.timed(candidate.label, rounds[candidate][0])
        fastest = min(times[0] for times in rounds.values())
        contenders = {c: k for c, k in compiled.items() if rounds[c][0] <= prune * fastest}
        for _ in range(repeats - 1):
            if budget.over():
                break
            for candidate, kernel_ in contenders.items():
                rounds[candidate].append(_median([run(kernel_) for _ in range(runs)]))
        seconds = {c.label: _median(rounds[c]) for c in compiled}
        fastest = min(seconds.values())
        best = next(c for c in compiled if seconds[c.label] <= SIMPLER_WITHIN * fastest)
        result = TuneResult(compiled[best], best, seconds, skipped, dict(bound.params),
                            elapsed=time.perf_counter() - started)
    finally:
        report.close()
    report.done(result)
    complete = BUDGET not in skipped.values()
    if complete:
        _DECISIONS[key] = result
    if db_key is not None:
        tuning_db.store(db_key, best.to_json(), seconds, skipped, complete=complete, elapsed=result.elapsed)
    return result


def compile_tuned(kernel, *, target: str = "cpu", algorithm: str = DEFAULT_ALGORITHM,
                  schedule: Schedule | None = None, num_threads: int | None = None, reassociate: bool = False,
                  **schedule_options) -> CompiledKernel:
    """``po.compile(kernel, tuned=True)``: the candidate :func:`autotune` chose for this kernel on
    this machine, from the tuning database, whatever sizes it was tuned at: of the decisions
    recorded, one for the thread count asked (``num_threads``, else every core) is preferred,
    then complete sweeps over ones cut by a time budget, then the most recent. Where none is
    recorded (or it no longer compiles) a :class:`~polyopt.errors.PolyoptWarning` says so and the
    default compile is returned. ``tuned`` chooses the schedule: with ``algorithm``,
    ``schedule``, scheduler options, ``reassociate`` or a target other than "cpu" it is an
    ArgumentError."""
    if isinstance(kernel, Schedule):
        kernel, schedule = kernel.scop, kernel
    if target != "cpu" or schedule is not None or algorithm != DEFAULT_ALGORITHM or schedule_options or reassociate:
        chosen = [name for name, given in (("target", target != "cpu"), ("algorithm", algorithm != DEFAULT_ALGORITHM),
                                           ("schedule", schedule is not None), ("reassociate", reassociate))
                  if given] + sorted(schedule_options)
        raise ArgumentError(f"tuned=True compiles po.autotune's recorded choice (cpu target): drop {', '.join(chosen)}")
    num_threads = check_num_threads(num_threads)
    scop = getattr(kernel, "scop", kernel)
    threads = num_threads or default_num_threads()
    entries = tuning_db.entries_for(scop_fingerprint(scop), "cpu")
    entries.sort(key=lambda e: (e["key"].get("threads") != threads, not e.get("complete", True)))  # stable
    why = f"no po.autotune decision for {scop.name} on this machine in {tuning_db.directory()}"
    for entry in entries:
        try:
            return Candidate.from_json(entry["best"]).compile(kernel, num_threads)
        except (PolyoptError, KeyError, TypeError, ValueError) as exc:
            why = f"the recorded choice {entry['best'].get('label')!r} for {scop.name} does not compile: {exc}"
    warnings.warn(f"tuned=True: {why}; compiling the default (po.autotune(...) records a choice)",
                  PolyoptWarning, stacklevel=3)
    return compile(kernel, num_threads=num_threads)


#: Bumped when :func:`neighbourhood` changes which candidates it makes: a decision among the
#: default candidates of an older list is timed again (its key names this version).
NEIGHBOURHOOD_VERSION = 2


def _candidates_digest(candidates: tuple[Candidate, ...] | None) -> str:
    """The tuning database's name for a candidate list: a digest of the list given, or for the
    default list, of :data:`DEFAULT_CANDIDATES` and :data:`NEIGHBOURHOOD_VERSION` (the
    neighbourhood itself depends on the kernel and costs a schedule to compute)."""
    if candidates is None:
        text = json.dumps([c.to_json() for c in DEFAULT_CANDIDATES], sort_keys=True) + str(NEIGHBOURHOOD_VERSION)
        return "default " + hashlib.sha256(text.encode()).hexdigest()[:16]
    try:
        text = json.dumps([c.to_json() for c in candidates], sort_keys=True)
    except (TypeError, ValueError):
        text = repr(candidates)
    return hashlib.sha256(text.encode()).hexdigest()


def _database_key(scop, bound, num_threads: int | None, candidates) -> dict | None:
    if not tuning_db.enabled():
        return None
    dtypes = {name: np.dtype(array.dtype).name for name, array in bound.arrays.items()}
    return tuning_db.entry_key(scop_fingerprint(scop), scop.name, bound.params, dtypes, "cpu",
                               num_threads or default_num_threads(), _candidates_digest(candidates))


def _stored(kernel, db_key: dict, num_threads, params: dict, budgeted: bool, started: float) -> TuneResult | None:
    """The decision of ``db_key`` from the tuning database, compiled; None on a miss."""
    entry = tuning_db.load(db_key)
    if entry is None or not (entry.get("complete", True) or budgeted):
        return None
    try:
        best = Candidate.from_json(entry["best"])
        compiled = best.compile(kernel, num_threads)
        seconds = {str(k): float(v) for k, v in entry["seconds"].items()}
        skipped = {str(k): str(v) for k, v in entry["skipped"].items()}
    except (PolyoptError, KeyError, TypeError, ValueError):
        return None
    return TuneResult(compiled, best, seconds, skipped, params, stored=True, elapsed=time.perf_counter() - started)


def _median(times: list[float]) -> float:
    return float(np.median(times))


@dataclass(frozen=True)
class _Budget:
    """The time budget of one :func:`autotune` call (``seconds`` None: none)."""

    started: float = 0.0
    seconds: float | None = None

    def remaining(self) -> float | None:
        return None if self.seconds is None else max(0.0, self.started + self.seconds - time.perf_counter())

    def over(self) -> bool:
        return self.seconds is not None and time.perf_counter() - self.started > self.seconds


class _Progress:
    """The sweep on stderr: a tqdm bar with the best so far in its postfix, or a line per event."""

    def __init__(self, show: bool, name: str, total: int):
        self.show, self.name, self.total, self.done_ = show, name, total, 0
        self.best: tuple[str, float] | None = None
        self.bar = None
        self.tqdm = None
        if show and sys.stderr.isatty():  # (a bar in a log file is a run of carriage returns)
            try:
                from tqdm import tqdm
            except ImportError:
                tqdm = None
            self.tqdm = tqdm  # the bar starts with the first event (after any worker processes forked)

    def _bar(self, phase: str):
        if self.bar is None and self.tqdm is not None:
            self.bar = self.tqdm(total=self.total, desc=f"autotune {self.name}: {phase}", unit="candidate",
                                 file=sys.stderr, leave=False)
        return self.bar

    def _line(self, text: str) -> None:
        print(f"autotune {self.name}: {text}", file=sys.stderr, flush=True)

    def compiled(self, label: str, note: str) -> None:
        if not self.show:
            return
        self.done_ += 1
        if self._bar("compile") is not None:
            self.bar.update(1)
            self.bar.set_postfix_str(f"{label}: {note}")
        else:
            self._line(f"compile [{self.done_}/{self.total}] {label!r}: {note}")

    def timing(self, total: int) -> None:
        self.total, self.done_ = total, 0
        if self.bar is not None:
            self.bar.reset(total=total)
            self.bar.set_description(f"autotune {self.name}: time")
        elif self.show:
            self._bar("time")

    def timed(self, label: str, seconds: float | None) -> None:
        if not self.show:
            return
        self.done_ += 1
        if seconds is not None and (self.best is None or seconds < self.best[1]):
            self.best = (label, seconds)
        now = BUDGET if seconds is None else f"{seconds * 1e3:.3f} ms"
        best = f"best so far {self.best[0]!r} {self.best[1] * 1e3:.3f} ms" if self.best else ""
        if self._bar("time") is not None:
            self.bar.update(1)
            self.bar.set_postfix_str(best)
        else:
            self._line(f"time [{self.done_}/{self.total}] {label!r}: {now}; {best}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def done(self, result: TuneResult) -> None:
        if self.show:
            budget = sum(why == BUDGET for why in result.skipped.values())
            cut = f", {budget} left out by the time budget" if budget else ""
            self._line(f"best {result.best.label!r} {result.seconds[result.best.label] * 1e3:.3f} ms "
                       f"({len(result.seconds)} timed, {len(result.skipped)} skipped{cut}) in {result.elapsed:.1f} s")


@dataclass(frozen=True)
class _Source:
    """A DSL kernel as its source text: what a worker process rebuilds it from."""

    text: str
    dtype: object

    def load(self):
        from polyopt.frontends.dsl import kernel_from_source
        return kernel_from_source(self.text, dtype=self.dtype)


def _portable(kernel) -> _Source | None:
    """``kernel`` as something another process rebuilds into the same Scop, or None."""
    from polyopt.frontends.dsl import Kernel
    if not isinstance(kernel, Kernel):
        return None
    try:
        source = _Source(kernel.source, kernel.float_dtype)
        same = scop_fingerprint(source.load().scop) == scop_fingerprint(kernel.scop)
    except Exception:  # noqa: BLE001 -- whatever fails here, the parent compiles itself
        return None
    return source if same else None


def _compile_remote(recipe, candidate: Candidate, num_threads: int | None, directory: str | None):
    """A worker's job: compile ``candidate`` (which writes the disk compile cache). Returns
    (None or the first line of the PolyoptError it raised, seconds)."""
    start = time.perf_counter()
    saved = os.environ.get("POLYOPT_CACHE_DIR")
    if directory is not None:
        os.environ["POLYOPT_CACHE_DIR"] = directory
    try:
        kernel = recipe.load() if isinstance(recipe, _Source) else recipe
        try:
            candidate.compile(kernel, num_threads)
        except PolyoptError as exc:
            return f"failed: {str(exc).splitlines()[0]}", time.perf_counter() - start
        return None, time.perf_counter() - start
    finally:
        if directory is not None:
            if saved is None:
                os.environ.pop("POLYOPT_CACHE_DIR", None)
            else:
                os.environ["POLYOPT_CACHE_DIR"] = saved


def _in_cache(kernel, candidate: Candidate) -> bool:
    """Whether ``candidate``'s compile is in the memory or the disk compile cache (a candidate
    whose schedule fails counts as cached: it fails at once here)."""
    try:
        if candidate.trace is None:
            key = cpu_cache_key(kernel, candidate.algorithm, dict(candidate.options))
        else:
            key = cpu_cache_key(kernel, DEFAULT_ALGORITHM, {}, candidate.schedule(kernel))
    except PolyoptError:
        return True
    except Exception:  # noqa: BLE001 -- not ours to judge here: compile it where errors are seen
        return False
    return key in COMPILED or (disk_cache.enabled() and (disk_cache.cache_dir() / disk_cache.entry_name(key)).is_file())


def _default_pool(workers: int) -> ProcessPoolExecutor | None:
    """A process pool: forked where this process runs no other Python thread (fast to start; no
    lock another thread holds is copied locked), else spawned where the main module is no file
    (a notebook, the REPL); else None (compile here): spawned workers import the main script
    again, which reruns a script whose calls are not under ``if __name__ == "__main__":``."""
    import __main__
    if threading.active_count() == 1 and "fork" in multiprocessing.get_all_start_methods():
        method = "fork"
    elif getattr(__main__, "__file__", None) is None:
        method = "spawn"
    else:
        return None
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context(method))


def _submit(kernel, candidates: tuple[Candidate, ...], num_threads, executor) -> tuple[dict, Executor | None]:
    """Futures compiling the candidates not in a compile cache, by ``executor`` (see
    :func:`autotune`); ({}, None) where none goes there. The second value is a pool of ours."""
    if executor is False or not candidates:
        return {}, None
    threads = isinstance(executor, ThreadPoolExecutor)
    if not threads and not disk_cache.enabled():
        return {}, None  # a worker's compile reaches this process through the disk cache only
    uncached = [c for c in candidates if not _in_cache(kernel, c)]
    if not uncached or (executor is None and (len(uncached) < POOL_MIN_CANDIDATES or (os.cpu_count() or 1) < 2)):
        return {}, None
    recipe = kernel if threads else _portable(kernel)
    if recipe is None:
        return {}, None
    own = None
    if executor is None:
        executor = own = _default_pool(min(os.cpu_count() or 1, len(uncached)))
        if own is None:
            return {}, None
    directory = None if threads else str(disk_cache.cache_dir())
    futures = {}
    try:
        for candidate in uncached:
            futures[candidate] = executor.submit(_compile_remote, recipe, candidate, num_threads, directory)
    except Exception:  # noqa: BLE001 -- an executor that refuses work: the rest compile here
        pass
    return futures, own


def _compile_distinct(kernel, candidates: tuple[Candidate, ...], num_threads: int | None,
                      executor=None, budget: _Budget = _Budget(),
                      report: _Progress | None = None) -> tuple[dict[Candidate, CompiledKernel], dict[str, str]]:
    """Compile every candidate (those in no compile cache by ``executor``, see :func:`autotune`,
    meanwhile the first here); drop those that fail or whose code equals an earlier one's."""
    report = report or _Progress(False, "", 0)
    compiled: dict[Candidate, CompiledKernel] = {}
    skipped: dict[str, str] = {}
    seen: dict[str, str] = {}
    futures, own = ({}, None) if budget.over() else _submit(kernel, candidates[1:], num_threads, executor)
    try:
        for index, candidate in enumerate(candidates):
            future = futures.get(candidate)
            if index and budget.over():
                skipped[candidate.label] = BUDGET
                report.compiled(candidate.label, BUDGET)
                continue
            failure = None
            if future is not None:
                wait([future], timeout=budget.remaining())
                if not future.done():
                    skipped[candidate.label] = BUDGET
                    report.compiled(candidate.label, BUDGET)
                    continue
                try:
                    failure, _ = future.result()
                except Exception:  # noqa: BLE001 -- a broken worker or pool: compile it here
                    failure = None
            if failure is not None:
                skipped[candidate.label] = failure
                report.compiled(candidate.label, failure)
                continue
            start = time.perf_counter()
            try:
                kernel_ = candidate.compile(kernel, num_threads)
            except PolyoptError as exc:
                skipped[candidate.label] = f"failed: {str(exc).splitlines()[0]}"
                report.compiled(candidate.label, skipped[candidate.label])
                continue
            code = kernel_.llvm_ir  # (the loops give the code; a disk-cached kernel has its text at hand)
            if code in seen:
                skipped[candidate.label] = f"same loops as {seen[code]!r}"
                report.compiled(candidate.label, skipped[candidate.label])
                continue
            seen[code] = candidate.label
            compiled[candidate] = kernel_
            where = "by a worker" if future is not None else f"{time.perf_counter() - start:.2f} s"
            report.compiled(candidate.label, f"compiled ({where})")
    finally:
        for future in futures.values():
            future.cancel()
        if own is not None:
            own.shutdown(wait=True, cancel_futures=True)
        else:
            wait([f for f in futures.values() if not f.cancelled()])  # no compile overlaps the timing
    if not compiled:
        raise TuningError(f"no candidate compiled: {skipped}")
    return compiled, skipped


def _check_agreement(compiled: dict[Candidate, CompiledKernel], run, work: dict[str, np.ndarray],
                     rtol: float, budget: _Budget = _Budget(), skipped: dict | None = None) -> dict[Candidate, float]:
    """Run every candidate once (returned: the times); each result must match the first
    candidate's (normwise, since reordered floating-point sums differ in the last bits). Past
    the time budget the rest are dropped from ``compiled`` (into ``skipped``)."""
    reference: dict[str, np.ndarray] | None = None
    first = ""
    seconds = {}
    for candidate, kernel_ in list(compiled.items()):
        if reference is not None and budget.over():
            del compiled[candidate]
            if skipped is not None:
                skipped[candidate.label] = BUDGET
            continue
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
