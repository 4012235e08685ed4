"""Schedules: the :class:`Schedule` value and the registry of scheduling algorithms.

``schedule(scop, algorithm)`` runs one registered algorithm and returns a :class:`Schedule`
wrapping an isl schedule tree. "original" is the textual order, "isl" and "isl-feautrier" are
islpy's own scheduler (a baseline to compare our schedulers against, never a fallback).
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import islpy as isl

from polyopt.analysis.deps import Dependences, dependences
from polyopt.errors import ScheduleError
from polyopt.islutil import ISL_LOCK, isl_options
from polyopt.analysis.scop import Scop
from polyopt.transform.schedule import Schedule


#: The algorithm used when none is named.
DEFAULT_ALGORITHM = "pluto"


class Scheduled(NamedTuple):
    """What an algorithm may return instead of a bare tree: the tree and the fallbacks it took
    (one line each), which :func:`schedule` appends to the trace."""

    tree: isl.Schedule
    notes: tuple[str, ...]


Algorithm = Callable[[Scop, Dependences, dict], "isl.Schedule | Scheduled"]
_ALGORITHMS: dict[str, Algorithm] = {}


def register(name: str):
    """Decorator adding a scheduling algorithm ``f(scop, deps, options) -> isl.Schedule`` (or
    :class:`Scheduled`, a tree with notes)."""
    def add(function: Algorithm) -> Algorithm:
        _ALGORITHMS[name] = function
        return function
    return add


def algorithms() -> list[str]:
    """Names accepted by ``schedule(scop, algorithm=...)``."""
    return sorted(_ALGORITHMS)


def schedule(scop: Scop, algorithm: str = "original", **options) -> Schedule:
    """Schedule ``scop`` with the named algorithm (see :func:`algorithms`)."""
    if algorithm not in _ALGORITHMS:
        raise ScheduleError(f"unknown scheduling algorithm {algorithm!r}; "
                            f"available: {', '.join(algorithms())}")
    with ISL_LOCK:  # isl's context is the process's: one thread in it at a time
        deps = dependences(scop)
        result = _ALGORITHMS[algorithm](scop, deps, options)
    tree, notes = result if isinstance(result, Scheduled) else (result, ())
    described = ", ".join(f"{k}={v!r}" for k, v in options.items())
    notes = tuple(notes) + tuple(f"dependences: {line}" for line in deps.approximated)
    return Schedule(scop, tree, algorithm, dict(options), (f"{algorithm}({described})",) + notes)


@register("original")
def _original(scop: Scop, deps: Dependences, options: dict) -> isl.Schedule:
    """The loops as written; option ``parallel`` (default False) marks the outermost loop of each
    nest that carries no dependence parallel, below sequential loops too (a time loop)."""
    from polyopt.transform import tree as transform

    unknown = set(options) - {"parallel"}
    if unknown:
        raise ScheduleError(f"original: unknown option(s) {', '.join(sorted(unknown))}; allowed: parallel")
    if not options.get("parallel", False):
        return scop.schedule
    return transform.mark_parallel(transform.mark_coincident(scop.schedule, scop, deps), nested=True)


def _no_options(name: str, options: dict) -> None:
    if options:
        raise ScheduleError(f"algorithm {name!r} takes no options, got {', '.join(options)}")


def _isl_scheduler(algorithm_code: int, name: str):
    """islpy's scheduler with PPCG's constraints: every dependence for validity and coincidence,
    flow (RAW) dependences for proximity. (With all dependences as proximity, isl 0.27 as
    shipped in islpy 2026.2 drops statements from deriche's schedule; the verifier's coverage
    check catches that.)"""
    def run(scop: Scop, deps: Dependences, options: dict) -> isl.Schedule:
        _no_options(name, options)
        with isl_options(schedule_algorithm=algorithm_code):
            try:
                constraints = (isl.ScheduleConstraints.on_domain(scop.domain)
                               .set_context(scop.context)
                               .set_validity(deps.all)
                               .set_coincidence(deps.all)
                               .set_proximity(deps.raw))  # PPCG's choice: bring flows close
                return constraints.compute_schedule()
            except isl.Error as exc:  # e.g. "unable to carry dependences": a typed refusal
                raise ScheduleError(f"{name}: isl's scheduler found no schedule for {scop.name}: {exc}") from None
    return run


register("isl")(_isl_scheduler(0, "isl"))            # ISL_SCHEDULE_ALGORITHM_ISL
register("isl-feautrier")(_isl_scheduler(1, "isl-feautrier"))  # ISL_SCHEDULE_ALGORITHM_FEAUTRIER


@register("pluto")
def _pluto(scop: Scop, deps: Dependences, options: dict) -> Scheduled:
    """Our Pluto-style scheduler (:mod:`polyopt.schedulers.pluto`) followed by the tree transformations.

    Options: ``fuse`` ("smart" | "max" | "no"), ``negative_coeffs`` (None = only where needed,
    True = Pluto+, False = Pluto), ``param_shifts`` (False; True lets a statement's hyperplane be
    shifted by the size parameters, phi = c.i + d.p + c0, which fuses loops that run one after
    the other, as isl's scheduler does on atax and doitgen, at the price of fusions that rarely
    pay), ``tile`` (None, an int, per-dimension sizes, or "auto": per
    band from the cache sizes), ``conflict_free_tiles`` (with "auto": tiles no taller than the
    L1 cache's ways, for arrays whose row lengths are multiples of 4 KiB; see
    :mod:`polyopt.schedulers.tilesize`), ``tile2`` (tiles per second-level tile), ``parallel`` (mark the
    outermost parallel loop, with a wavefront where a tiled band has none, and below an untiled
    band without one: gramschmidt, adi 1.5-2x faster on 2 threads), ``vectorize`` (reorder the
    innermost band so its innermost loop is parallel and stride-1), ``register_tile`` (None,
    (rows, columns), "auto" or "row": unroll-and-jam of the innermost band, see
    :func:`polyopt.transform.tree.register_tile`).
    """
    from polyopt.transform import tree as transform
    from polyopt.schedulers.levels import tree_from_levels
    from polyopt.schedulers.pluto import pluto_levels

    allowed = {"fuse", "negative_coeffs", "param_shifts", "tile", "conflict_free_tiles", "tile2", "parallel",
               "vectorize", "register_tile"}
    unknown = set(options) - allowed
    if unknown:
        raise ScheduleError(f"pluto: unknown option(s) {', '.join(sorted(unknown))}; "
                            f"allowed: {', '.join(sorted(allowed))}")
    registers = options.get("register_tile")
    registers = None if registers is None else transform.register_tile_sizes(scop, registers)
    found = pluto_levels(scop, deps, fuse=options.get("fuse", "smart"),
                         negative_coeffs=options.get("negative_coeffs"),
                         param_shifts=options.get("param_shifts", False))
    tree = tree_from_levels(scop, found.levels)
    if options.get("vectorize", True):  # before tiling: the tile loops take the same order
        tree = transform.vectorizable_innermost(tree, scop)
    sizes = options.get("tile")
    if sizes is not None and sizes is not False:
        tree = transform.tile(tree, sizes, second_level=options.get("tile2"), scop=scop,
                              register_tile=registers,
                              conflict_free=bool(options.get("conflict_free_tiles", False)))
    if options.get("parallel", True):
        tree = transform.mark_parallel(tree, nested=True)
    if registers is not None:
        tree = transform.register_tile(tree, scop, registers)
    return Scheduled(tree, found.notes)


@register("feautrier")
def _feautrier(scop: Scop, deps: Dependences, options: dict) -> Scheduled:
    """Our Feautrier scheduler (:mod:`polyopt.schedulers.feautrier`); option ``parallel`` (default True)
    marks the outermost parallel loop of each band nest."""
    from polyopt.transform import tree as transform
    from polyopt.schedulers.feautrier import feautrier_levels
    from polyopt.schedulers.levels import tree_from_levels

    unknown = set(options) - {"parallel"}
    if unknown:
        raise ScheduleError(f"feautrier: unknown option(s) {', '.join(sorted(unknown))}; allowed: parallel")
    found = feautrier_levels(scop, deps)
    tree = tree_from_levels(scop, found.levels)
    if options.get("parallel", True):
        tree = transform.mark_parallel(tree, wavefront=False)
    return Scheduled(tree, found.notes)
