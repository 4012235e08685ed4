"""Schedulers compared as data: one plain dict per (kernel, algorithm[+options]), so that a
paper's table is three lines of code::

    records = po.compare_schedulers(["gemm", "jacobi-2d"], ("pluto", "feautrier", "limlam"))
    df = po.records_to_dataframe(records)          # with pandas installed
    df.pivot(index="kernel", columns="algorithm", values="sync_free_degree")

It lives with the schedulers rather than in :mod:`polyopt.analysis` because it drives them (the
registry behind ``po.schedule``) and the compiler: the analyses are imported by the schedulers,
not the other way round.

Each record (every value a plain Python value: str, int, float, bool, None, lists, tuples and
dicts of them):

``kernel``, ``algorithm``, ``options`` (the scheduler options), ``label`` (``"pluto"`` or
``"pluto(tile=32)"``), ``statements``; the shape of the schedule tree (see
:func:`~polyopt.transform.schedule.tree_statistics`): ``bands``, ``tilable_depth`` (most members
of one permutable band, :func:`~polyopt.analysis.loops.tilable_depth`), ``coincident_loops``
(band members flagged coincident), ``sequential_depth``; from
:func:`~polyopt.analysis.loops.loop_analysis`: ``loops`` (band members), ``parallel_loops``
(loops that carry no dependence, checked), ``marked_parallel`` (loops the code runs on
threads), ``carried`` (one dict per loop: ``name``, ``depth``, ``statements``, ``parallel``,
``carried``: how many dependence pieces it carries); ``sync_free_degree`` (see
:func:`sync_free_degree`: the parallel degree of the outermost loops with no barrier anywhere)
and ``outer_parallel_degree`` (the same with barriers between loop nests allowed: pluto's gemm
distributes ``C *= beta`` from the product, 0 and 2); the dependences (the same for every algorithm of a kernel):
``dependences`` (pieces), ``uniform_dependences``, ``dependence_vectors`` (one dict per piece:
``kind``, ``source``, ``sink``, ``array``, ``distance`` (None unless uniform), ``direction``);
``schedule_seconds`` (dependences excluded: computed once per kernel; the Farkas dual cones
included: their cache is cleared before each run), ``legal`` (the verifier passed), ``notes``
(the fallbacks the scheduler took), and with ``compile=True`` ``compiled_seconds`` (median of
``runs`` calls after one warm-up) and ``sizes``.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable, Iterable, Mapping

import islpy as isl

from polyopt.analysis import farkas
from polyopt.analysis.deps import dependences
from polyopt.analysis.loops import dependence_list, loop_analysis, tilable_depth
from polyopt.analysis.scop import Scop
from polyopt.analysis.verify import verify
from polyopt.errors import ArgumentTypeError, PolyoptError
from polyopt.islutil import ISL_LOCK, maps_of, tuple_names
from polyopt.schedulers.pluto import rank
from polyopt.schedulers.registry import schedule as run_scheduler
from polyopt.transform.schedule import Schedule, tree_statistics

DEFAULT_ALGORITHMS = ("pluto", "feautrier", "limlam", "isl")

__all__ = ["compare_schedulers", "records_to_dataframe", "sync_free_degree", "DEFAULT_ALGORITHMS"]


# ----- the synchronization-free degree of a schedule tree -----------------------------------------


def _coefficients(upa: isl.UnionPwAff, stmt: str) -> tuple[int, ...] | None:
    """The iterator coefficients of one band member for ``stmt`` (its first piece)."""
    found: list[tuple[int, ...]] = []

    def piece(_, aff: isl.Aff) -> None:
        if not found:
            found.append(tuple(aff.get_coefficient_val(isl.dim_type.in_, d).to_python()
                               for d in range(aff.dim(isl.dim_type.in_))))

    def each(pa: isl.PwAff) -> None:
        if pa.get_domain_space().get_tuple_name(isl.dim_type.set) == stmt:
            pa.foreach_piece(piece)

    upa.foreach_pw_aff(each)
    return found[0] if found else None


def _edges(scop: Scop) -> list[tuple[str, str]]:
    return [(m.get_tuple_name(isl.dim_type.in_), m.get_tuple_name(isl.dim_type.out))
            for m in maps_of(dependences(scop).all)]


def sync_free_degree(schedule: Schedule, *, barriers: bool = False) -> int:
    """The degree of synchronization-free parallelism of ``schedule``: per statement, the rank
    (in its iterators) of the outermost coincident members of the first band above it (of all
    its coincident members where the band is permutable: they may move outermost); the
    minimum over statements. A sequence (or set) above the first bands counts only where no
    dependence joins two of its children (else a barrier separates them: degree 0), unless
    ``barriers`` (then: the parallel degree of the outermost loops of each nest, barriers
    between nests allowed). 0 where a statement has no band. Lim-Lam's space partitions
    (``"limlam"``) maximize it."""
    scop = schedule.scop
    with ISL_LOCK:
        edges = _edges(scop)

        def visit(node: isl.ScheduleNode) -> int:
            kind = node.get_type()
            if kind == isl.schedule_node_type.band and node.band_n_member() > 0:
                # the leading coincident members; in a permutable band every coincident member
                # (permuting it outermost is legal: pluto puts the stride-1 one innermost)
                members = [k for k in range(node.band_n_member()) if node.band_member_get_coincident(k)]
                if not node.band_get_permutable():
                    members = [k for n, k in enumerate(members) if k == n]
                stmts = set(tuple_names(node.get_domain().intersect(scop.domain)))
                if not stmts:
                    return 0
                partial = node.band_get_partial_schedule()
                degrees = []
                for stmt in stmts:
                    rows = [_coefficients(partial.get_at(k), stmt) for k in members]
                    rows = [r for r in rows if r]
                    degrees.append(rank(rows) if rows else 0)
                return min(degrees)
            if kind in (isl.schedule_node_type.sequence, isl.schedule_node_type.set):
                # (a filter node's own domain is what reaches it, before its filter)
                children = [set(tuple_names(node.child(k).filter_get_filter().intersect(
                    node.get_domain()).intersect(scop.domain))) for k in range(node.n_children())]
                groups = [g for g in children if g]
                child_of = {s: k for k, g in enumerate(groups) for s in g}
                if not barriers and any(a in child_of and b in child_of and child_of[a] != child_of[b] for a, b in edges):
                    return 0       # a dependence between two children: a barrier between them
                return min((visit(node.child(k)) for k in range(node.n_children()) if children[k]),
                           default=0)
            if node.n_children() == 0:
                return 0
            return visit(node.child(0))

        return visit(schedule.tree.get_root())


# ----- records ------------------------------------------------------------------------------------

def _kernel_and_entry(item):
    """(kernel or scop, suite entry or None, name) of a suite name, a suite entry, a Kernel or a
    Scop."""
    from polyopt import suite
    if isinstance(item, str):
        entry = suite.get(item)
        return entry.kernel, entry, item
    if hasattr(item, "reference") and hasattr(item, "kernel"):   # a suite entry
        return item.kernel, item, item.name
    scop = getattr(item, "scop", item)
    if not isinstance(scop, Scop):
        raise ArgumentTypeError(f"cannot compare schedulers on {item!r}: expected a suite kernel name, "
                                "a polyopt kernel or a Scop")
    entry = None
    name = getattr(item, "name", None) or scop.name
    try:
        candidate = suite.get(name)
        entry = candidate if candidate.kernel is item else None
    except Exception:   # not a suite kernel: compiled time needs inputs=
        entry = None
    return item, entry, name


def _variants(algorithms, options: Mapping | None) -> list[tuple[str, dict]]:
    """(algorithm, options) pairs: an algorithm is a name or a (name, options) pair; ``options``
    maps names to the options of their plain entries."""
    result = []
    for item in algorithms:
        if isinstance(item, str):
            result.append((item, dict((options or {}).get(item, {}))))
        else:
            name, extra = item
            result.append((name, dict(extra)))
    return result


def _label(algorithm: str, options: dict) -> str:
    if not options:
        return algorithm
    return f"{algorithm}({', '.join(f'{k}={v!r}' for k, v in sorted(options.items()))})".replace("'", "")


def _dependence_records(scop: Scop) -> list[dict]:
    return [{"kind": d.kind, "source": d.source, "sink": d.sink, "array": d.array,
             "distance": d.distance, "direction": d.direction} for d in dependence_list(scop)]


def _compiled_seconds(kernel, algorithm: str, options: dict, make_inputs: Callable[[], dict],
                      runs: int) -> float:
    from polyopt.targets.cpu import compile as compile_kernel
    compiled = compile_kernel(kernel, algorithm=algorithm, **options)
    compiled(**make_inputs())   # warm-up: the first call loads the library
    times = []
    for _ in range(runs):
        args = make_inputs()
        start = time.perf_counter()
        compiled(**args)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def compare_schedulers(kernels: Iterable, algorithms: Iterable = DEFAULT_ALGORITHMS,
                       options: Mapping[str, Mapping] | None = None, *, compile: bool = False,
                       sizes: str | Mapping[str, int] = "SMALL", runs: int = 3,
                       inputs: Callable | None = None, verify_schedules: bool = True) -> list[dict]:
    """One record (a plain dict, see the module docstring) per kernel and algorithm.

    ``kernels``: suite kernel names (``po.suite.names()``), suite entries, polyopt kernels or
    Scops (one, or an iterable). ``algorithms``: scheduler names (``po.algorithms()``), or
    ``(name, options)`` pairs to compare one scheduler under several options
    (``("pluto", {"tile": 32})``). ``options``: per algorithm name, the options of its plain
    entries (``{"pluto": {"parallel": False}}``).

    ``compile=True`` adds ``compiled_seconds``: the CPU code of each schedule run ``runs`` times
    on fresh inputs (the median, after one warm-up). Inputs: for suite kernels, the suite's at
    ``sizes`` (a preset such as ``"MINI"``/``"SMALL"``/``"LARGE"``, or a dict of parameter
    values); otherwise ``inputs(kernel)`` must return the argument dict (called once per run).
    A scheduler that refuses a kernel gives a record with ``error`` set and no statistics.
    """
    if isinstance(kernels, (str, Scop)) or hasattr(kernels, "scop") or hasattr(kernels, "reference"):
        kernels = [kernels]
    variants = _variants(algorithms, options)
    records: list[dict] = []
    for item in kernels:
        kernel, entry, name = _kernel_and_entry(item)
        scop = getattr(kernel, "scop", kernel)
        with ISL_LOCK:
            dependences(scop)          # computed once and shared: not part of scheduling time
        vectors = _dependence_records(scop)
        shared = {"kernel": name, "statements": len(scop.statements), "dependences": len(vectors),
                  "uniform_dependences": sum(v["distance"] is not None for v in vectors),
                  "dependence_vectors": vectors}
        make_inputs = None
        sizes_used = None
        if compile:
            if entry is not None:
                sizes_used = dict(entry.sizes(sizes)) if isinstance(sizes, str) else dict(sizes)
                make_inputs = (lambda e=entry, s=sizes_used: e.inputs(s))
            elif inputs is not None:
                make_inputs = (lambda k=kernel: inputs(k))
            else:
                raise ArgumentTypeError(f"compile=True: {name} is not a suite kernel; pass inputs=, a "
                                        "function of the kernel returning its arguments")
        for algorithm, opts in variants:
            record = {"kernel": name, "algorithm": algorithm, "options": dict(opts),
                      "label": _label(algorithm, opts)}
            farkas.clear_cache()       # each scheduler pays for its own Farkas dual cones
            start = time.perf_counter()
            try:
                made = run_scheduler(scop, algorithm, **opts)
            except PolyoptError as exc:
                record.update(shared, error=str(exc), schedule_seconds=time.perf_counter() - start)
                records.append(record)
                continue
            seconds = time.perf_counter() - start
            legal = True
            if verify_schedules:
                try:
                    verify(made.scop, made)  # (the kernel's Scop, or its scalar expansion)
                except PolyoptError:
                    legal = False
            stats = tree_statistics(made.tree)
            loops = loop_analysis(made)
            record.update(shared)
            record.update({
                "bands": stats["bands"],
                "tilable_depth": tilable_depth(made),
                "loops": len(loops),
                "parallel_loops": sum(loop.parallel for loop in loops),
                "coincident_loops": stats["parallel_loops"],
                "marked_parallel": sum(loop.marked_parallel for loop in loops),
                "sequential_depth": stats["sequential_depth"],
                "sync_free_degree": sync_free_degree(made),
                "outer_parallel_degree": sync_free_degree(made, barriers=True),
                "carried": [{"name": loop.name, "depth": loop.depth, "statements": loop.statements,
                             "parallel": loop.parallel, "carried": len(loop.carried)} for loop in loops],
                "schedule_seconds": seconds,
                "legal": legal,
                "notes": list(made.notes),
                "error": None,
            })
            if compile:
                record["sizes"] = sizes_used
                record["compiled_seconds"] = (_compiled_seconds(kernel, algorithm, opts, make_inputs, runs)
                                              if legal else None)
            records.append(record)
    return records


def records_to_dataframe(records: list[dict]):
    """The records as a pandas DataFrame (one row each); pandas is an optional dependency."""
    try:
        import pandas
    except ImportError:
        raise ImportError("records_to_dataframe needs pandas (pip install pandas); the records "
                          "themselves are plain dicts and need nothing") from None
    return pandas.DataFrame.from_records(list(records))
