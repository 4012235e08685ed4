"""The registry of scheduling algorithms behind ``po.schedule(kernel, algorithm, **options)``.

Each algorithm returns a :class:`~polyopt.transform.schedule.Schedule` made from the original
one by primitive steps, so its trace says what it did: pluto and feautrier set their hyperplanes
(one ``affine_schedule`` step) and then vectorize, tile and parallelize by the decisions of
:mod:`polyopt.schedulers.postpass`. "original" is the textual order, "isl" and "isl-feautrier"
are islpy's own scheduler (a baseline to compare our schedulers against, never a fallback).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, NamedTuple

import islpy as isl

from polyopt.analysis.deps import Dependences, dependences
from polyopt.analysis.scop import Scop
from polyopt.errors import ArgumentTypeError, ScheduleError
from polyopt.islutil import ISL_LOCK, isl_options
from polyopt.schedulers import postpass
from polyopt.transform.marks import PARALLEL_MARK
from polyopt.transform.nodes import Mark, walk
from polyopt.transform.scalar_expansion import ScalarExpansion, expand_scalars
from polyopt.transform.schedule import Schedule
from polyopt.transform.trace import Step, Trace

#: The algorithm used when none is named.
DEFAULT_ALGORITHM = "pluto"


class Scheduled(NamedTuple):
    """What an algorithm returns: the schedule and the fallbacks it took (one line each), which
    :func:`schedule` keeps as the schedule's notes."""

    schedule: Schedule
    notes: tuple[str, ...] = ()


Algorithm = Callable[[Scop, Dependences, dict], Scheduled]
_ALGORITHMS: dict[str, Algorithm] = {}


def register(name: str):
    """Decorator adding a scheduling algorithm ``f(scop, deps, options) -> Scheduled``."""
    def add(function: Algorithm) -> Algorithm:
        _ALGORITHMS[name] = function
        return function
    return add


def algorithms() -> list[str]:
    """Names accepted by ``schedule(kernel, algorithm=...)``."""
    return sorted(_ALGORITHMS)


def schedule(kernel, algorithm: str = "original", **options) -> Schedule:
    """Schedule a kernel (or a Scop) with the named algorithm (see :func:`algorithms`).

    Option ``expand_scalars`` (every algorithm; default True, but False for "original" without
    ``parallel=True``, which runs nothing in parallel): first expand the kernel-local scalars
    whose reuse alone keeps a loop sequential (:mod:`polyopt.transform.scalar_expansion`); the
    schedule is then one of the expanded Scop (``Schedule.scop``) and its trace starts with the
    ``expand_scalars`` step, whose note says what became which array."""
    scop = getattr(kernel, "scop", kernel)
    if not isinstance(scop, Scop):
        raise ArgumentTypeError(f"cannot schedule {kernel!r}: expected a polyopt kernel or Scop")
    if algorithm not in _ALGORITHMS:
        raise ScheduleError(f"unknown scheduling algorithm {algorithm!r}; "
                            f"available: {', '.join(algorithms())}")
    options = dict(options)
    expand = options.pop("expand_scalars", None)
    with ISL_LOCK:  # isl's context is the process's: one thread in it at a time
        expansion = scalar_expansion(scop, algorithm, expand, options)
        scop = expansion.scop
        deps = dependences(scop)
        made, notes = _ALGORITHMS[algorithm](scop, deps, options)
    if expansion.applied:  # the first step: replaying the trace onto the kernel expands it too
        made = replace(made, trace=Trace((Step.make("expand_scalars", note=expansion.note),)) + made.trace)
    refused = (expansion.note,) if expansion.note and not expansion.applied else ()
    notes = refused + tuple(notes) + tuple(f"dependences: {line}" for line in deps.approximated)
    if expand is not None:
        options["expand_scalars"] = expand
    return replace(made, algorithm=algorithm, options=options, notes=notes)


def scalar_expansion(scop: Scop, algorithm: str, expand: bool | None, options: dict) -> ScalarExpansion:
    """What :func:`schedule` schedules: ``scop`` with its local scalars expanded where that makes
    a loop parallel, unless ``expand`` is False (None: the default of ``algorithm`` and its
    ``options``, see :func:`schedule`). Call under ISL_LOCK."""
    if expand is None:
        expand = algorithm != "original" or bool(options.get("parallel", False))
    if not isinstance(expand, bool):
        raise ArgumentTypeError(f"expand_scalars must be True or False, got {expand!r}")
    return expand_scalars(scop) if expand else ScalarExpansion(scop, scop)


def _check_options(name: str, options: dict, allowed: set[str]) -> None:
    unknown = set(options) - allowed
    if unknown:
        raise ScheduleError(f"{name}: unknown option(s) {', '.join(sorted(unknown))}; "
                            f"allowed: {', '.join(sorted(allowed)) or 'none'}")


@register("original")
def _original(scop: Scop, deps: Dependences, options: dict) -> Scheduled:
    """The loops as written; option ``parallel`` (default False) marks the outermost loop of each
    nest that carries no dependence parallel, below sequential loops too (a time loop)."""
    _check_options("original", options, {"parallel"})
    if not options.get("parallel", False):
        return Scheduled(Schedule.original(scop))
    from polyopt.transform.tree import mark_coincident
    flagged = Schedule.from_tree(scop, mark_coincident(scop.schedule, scop, deps), algorithm="original",
                                 note="the loops as written, loops that carry no dependence flagged")
    return Scheduled(postpass.mark_parallel(flagged, nested=True))


def _isl_scheduler(algorithm_code: int, name: str):
    """islpy's scheduler with PPCG's constraints: every dependence for validity and coincidence,
    flow (RAW) dependences for proximity. (With all dependences as proximity, isl 0.27 as
    shipped in islpy 2026.2 drops statements from deriche's schedule; the verifier's coverage
    check catches that.)"""
    def run(scop: Scop, deps: Dependences, options: dict) -> Scheduled:
        _check_options(name, options, set())
        with isl_options(schedule_algorithm=algorithm_code):
            try:
                constraints = (isl.ScheduleConstraints.on_domain(scop.domain)
                               .set_context(scop.context)
                               .set_validity(deps.all)
                               .set_coincidence(deps.all)
                               .set_proximity(deps.raw))  # PPCG's choice: bring flows close
                tree = constraints.compute_schedule()
            except isl.Error as exc:  # e.g. "unable to carry dependences": a typed refusal
                raise ScheduleError(f"{name}: isl's scheduler found no schedule for {scop.name}: {exc}") from None
        return Scheduled(Schedule.from_tree(scop, tree, algorithm=name, note=f"{name}: isl's schedule tree"))
    return run


register("isl")(_isl_scheduler(0, "isl"))            # ISL_SCHEDULE_ALGORITHM_ISL
register("isl-feautrier")(_isl_scheduler(1, "isl-feautrier"))  # ISL_SCHEDULE_ALGORITHM_FEAUTRIER


@register("pluto")
def _pluto(scop: Scop, deps: Dependences, options: dict) -> Scheduled:
    """Our Pluto-style scheduler (:mod:`polyopt.schedulers.pluto`) followed by the decisions of
    :mod:`polyopt.schedulers.postpass`, each a step of the trace.

    Options: ``fuse`` ("smart" | "max" | "no"), ``negative_coeffs`` (None = only where needed,
    True = Pluto+, False = Pluto), ``param_shifts`` (False; True lets a statement's hyperplane be
    shifted by the size parameters, phi = c.i + d.p + c0, which fuses loops that run one after
    the other, as isl's scheduler does on atax and doitgen, at the price of fusions that rarely
    pay), ``tile`` (None, an int, per-dimension sizes, or "auto" / True: per
    band from the cache sizes), ``conflict_free_tiles`` (with "auto": tiles no taller than the
    L1 cache's ways, for arrays whose row lengths are multiples of 4 KiB; see
    :mod:`polyopt.schedulers.tilesize`), ``tile2`` (tiles per second-level tile), ``parallel`` (mark the
    outermost parallel loop, with a wavefront where a tiled band has none, and below an untiled
    band without one: gramschmidt, adi 1.5-2x faster on 2 threads), ``vectorize`` (reorder the
    innermost band so its innermost loop is parallel and stride-1), ``register_tile`` (None,
    (rows, columns), "auto" or "row": unroll-and-jam of the innermost band, see
    :func:`polyopt.transform.tree.register_tile_band`), ``model`` (True: where neither ``tile``
    nor ``register_tile`` is given, with ``parallel`` and ``vectorize`` on, the cost model of
    :mod:`polyopt.schedulers.cost` decides per band whether to tile and register-tile (a band
    whose nest would run on one thread also for the threads the process has: a wavefront of
    tiles, :func:`~polyopt.schedulers.cost.parallel_wavefront`), and
    whether element-wise nests after a contraction run inside its output loops; its
    estimates are the schedule's ``cost``; False: no tiles unless asked, Pluto as published),
    ``epilogues`` (True: with the model, element-wise epilogues fused where it says so; False:
    they stay in their own nests), ``row_tiles`` (True: with the model, in-order sums along a
    unit-stride loop run several rows at once, :func:`~polyopt.schedulers.postpass.row_tiles`,
    and a fusion that keeps such a sum on one thread is undone; a reassociating compile turns
    them off).
    """
    from polyopt.schedulers.levels import tree_from_levels
    from polyopt.schedulers.pluto import pluto_levels
    from polyopt.schedulers import cost as cost_model
    from polyopt.schedulers.cost import band_costs
    from polyopt.transform.tree import register_tile_sizes

    _check_options("pluto", options, {"fuse", "negative_coeffs", "param_shifts", "tile", "conflict_free_tiles",
                                      "tile2", "parallel", "vectorize", "register_tile", "model", "epilogues",
                                      "row_tiles"})
    model = (options.get("model", True) and "tile" not in options and "register_tile" not in options
             and options.get("parallel", True) and options.get("vectorize", True))
    registers = options.get("register_tile", "auto" if model else None)
    registers = None if registers is None else register_tile_sizes(scop, registers)
    def hyperplanes(fuse: str):
        found = pluto_levels(scop, deps, fuse=fuse, negative_coeffs=options.get("negative_coeffs"),
                             param_shifts=options.get("param_shifts", False))
        made = Schedule.from_tree(scop, tree_from_levels(scop, found.levels), algorithm="pluto",
                                  note="pluto: the hyperplanes found, statements cut between fused nests")
        if options.get("vectorize", True):  # before tiling: the tile loops take the same order
            made = postpass.vectorize_order(made)
        return found, made

    found, made = hyperplanes(options.get("fuse", "smart"))
    strided = cost_model.strided_fused_bands(made) if model and "fuse" not in options else []
    if strided:  # bicg, mvt, covariance: fused statements walk one array across its rows
        apart_found, apart = hyperplanes("no")
        if not cost_model.strided_fused_bands(apart):
            found, made = apart_found, apart
            found = found._replace(notes=found.notes + (
                f"cost model: pluto's fusion makes the innermost loop of ({', '.join(strided[0])}) walk an array "
                "with a stride; the statements run in separate nests instead (fuse='no')",))
    elif (model and "fuse" not in options and options.get("parallel", True) and options.get("row_tiles", True)
          and not all(cost_model.threaded_nests(postpass.mark_parallel(made, nested=True)))):
        apart_found, apart = hyperplanes("no")  # atax: a row sum fused with a column sum, on one thread
        if len(postpass.row_tile_bands(apart)) > len(postpass.row_tile_bands(made)):
            found, made = apart_found, apart
            found = found._replace(notes=found.notes + (
                "cost model: pluto's fusion runs a nest on one thread and keeps an in-order sum from "
                "running several rows at once; the statements run in separate nests instead (fuse='no')",))
    costs = band_costs(made, registers) if model else ()
    original: list[Schedule] = []  # the loops as written, parallel loops marked: made once, where asked for

    def original_schedule() -> Schedule:
        if not original:
            original.append(_original(scop, deps, {"parallel": True}).schedule)
        return original[0]

    if model and options.get("parallel", True):
        costs = _parallel_wavefronts(made, costs, original_schedule)
    sizes = "auto" if options.get("tile") is True else options.get("tile")  # tile=True: sizes from the caches
    if model:
        made = postpass.apply_cost_model(made, costs)
        if options.get("epilogues", True):
            made, apart = postpass.fuse_epilogues(made, cost_model.epilogue_fusions(made, costs))
            found = found._replace(notes=found.notes + apart)
    elif sizes is not None and sizes is not False:
        made = postpass.tile_bands(made, sizes, second_level=options.get("tile2"), register_tile=registers,
                                   conflict_free=bool(options.get("conflict_free_tiles", False)))
    if options.get("parallel", True):
        made = postpass.mark_parallel(made, nested=True)
    if model and not any(cost.tile for cost in costs) and not _runs_in_parallel(made):
        original = original_schedule()
        if _runs_in_parallel(original):  # fdtd-2d, jacobi-2d, heat-3d: 2-5x faster this way
            return Scheduled(replace(original, cost=costs), found.notes + (
                "cost model: pluto's schedule runs sequentially and no tile pays; the loops as "
                "written, with their parallel loops on the thread team, run instead",))
    if registers is not None:
        only = {cost.statements for cost in costs if cost.registers} if model else None
        made = postpass.register_tiles(made, registers, only=only)
    if model and options.get("row_tiles", True):
        made = postpass.row_tiles(made, skip={cost.statements for cost in costs if cost.tile or cost.registers})
    return Scheduled(replace(made, cost=costs), found.notes)


def _parallel_wavefronts(made: Schedule, costs: tuple, original_schedule) -> tuple:
    """The cost model's decisions with the bands the traffic leaves untiled, without a parallel
    loop, in a nest that would then run on one thread decided again for the threads available
    (:func:`~polyopt.schedulers.cost.parallel_wavefront`: trisolv, and floyd-warshall's band
    inside its k loop). Not where no
    band is tiled and the schedule would run sequentially while the loops as written have
    parallel loops: those run instead (fdtd-2d, jacobi-2d, heat-3d)."""
    from polyopt.schedulers import cost as cost_model
    from polyopt.targets.arguments import default_num_threads

    if not any(not c.tile and not c.parallel and c.references for c in costs):
        return costs
    marked = postpass.mark_parallel(postpass.apply_cost_model(made, costs), nested=True)
    if not any(c.tile for c in costs) and not _runs_in_parallel(marked) and _runs_in_parallel(original_schedule()):
        return costs
    alone, threads = cost_model.one_thread_bands(marked), default_num_threads()
    return tuple(cost_model.parallel_wavefront(c, threads) if c.loops in alone else c for c in costs)


def _runs_in_parallel(schedule: Schedule) -> bool:
    """Whether some loop of the schedule runs on the thread team (a parallel mark)."""
    return any(isinstance(node, Mark) and node.name == PARALLEL_MARK for _, node in walk(schedule.root))


@register("feautrier")
def _feautrier(scop: Scop, deps: Dependences, options: dict) -> Scheduled:
    """Our Feautrier scheduler (:mod:`polyopt.schedulers.feautrier`); option ``parallel`` (default
    True) marks the outermost parallel loop of each band nest."""
    from polyopt.schedulers.feautrier import feautrier_levels
    from polyopt.schedulers.levels import tree_from_levels

    _check_options("feautrier", options, {"parallel"})
    found = feautrier_levels(scop, deps)
    made = Schedule.from_tree(scop, tree_from_levels(scop, found.levels), algorithm="feautrier",
                              note="feautrier: the one-dimensional schedules found, level by level")
    if options.get("parallel", True):
        made = postpass.mark_parallel(made, wavefront=False)
    return Scheduled(made, found.notes)


@register("limlam")
def _limlam(scop: Scop, deps: Dependences, options: dict) -> Scheduled:
    """Lim-Lam affine partitioning (:mod:`polyopt.schedulers.limlam`): the synchronization-free
    space partitions as the outermost band (all parallel), then the time partitions (a
    permutable band), then the rest sequential. Option ``parallel`` (default True) marks the
    outermost parallel loop of each band nest."""
    from polyopt.schedulers.levels import tree_from_levels
    from polyopt.schedulers.limlam import limlam_levels

    _check_options("limlam", options, {"parallel"})
    found = limlam_levels(scop, deps)
    degree = max(found.degree.values(), default=0)
    made = Schedule.from_tree(scop, tree_from_levels(scop, found.levels), algorithm="limlam",
                              note=f"limlam: synchronization-free space partitions (degree {degree}), "
                                   "then time partitions, then the rest")
    if options.get("parallel", True):
        made = postpass.mark_parallel(made, wavefront=False, nested=True)
    return Scheduled(made, found.notes)
