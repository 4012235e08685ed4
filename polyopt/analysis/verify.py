"""The legality verifier: independent of every scheduler, it re-checks a schedule against the
dependences on relations alone: each sink must run strictly after its source, lexicographically.
"""
from __future__ import annotations

import islpy as isl

from polyopt.analysis.deps import Dependences, dependences
from polyopt.errors import IllegalScheduleError, IncompleteScheduleError, RacyParallelLoopError
from polyopt.islutil import maps_of
from polyopt.analysis.scop import Scop
from polyopt.transform.marks import PARALLEL_MARK


def _point_values(point: isl.Point, kind, count: int) -> list[int]:
    return [point.get_coordinate_val(kind, k).to_python() for k in range(count)]


def _witness(violation: isl.Map, schedule_map: isl.UnionMap):
    """A concrete (params, source, sink, source time, sink time) in ``violation``."""
    point = violation.wrap().sample_point()
    space = violation.get_space()
    n_params = space.dim(isl.dim_type.param)
    params = {space.get_dim_name(isl.dim_type.param, k): v
              for k, v in enumerate(_point_values(point, isl.dim_type.param, n_params))}
    coords = _point_values(point, isl.dim_type.set, space.dim(isl.dim_type.in_) + space.dim(isl.dim_type.out))
    n_in = space.dim(isl.dim_type.in_)
    src_name = space.get_tuple_name(isl.dim_type.in_)
    sink_name = space.get_tuple_name(isl.dim_type.out)
    src_vals, sink_vals = coords[:n_in], coords[n_in:]
    fix = " and ".join(f"{k} = {v}" for k, v in params.items()) or "true"
    times = []
    for name, vals in ((src_name, src_vals), (sink_name, sink_vals)):
        instance = isl.UnionSet(f"[{', '.join(params)}] -> {{ {name}[{', '.join(map(str, vals))}] : {fix} }}")
        time = schedule_map.intersect_domain(instance).range()
        time_point = time.sample_point()
        n = time_point.get_space().dim(isl.dim_type.set)
        times.append(tuple(_point_values(time_point, isl.dim_type.set, n)))
    return (params, f"{src_name}{tuple(src_vals)}".replace(",)", ")"),
            f"{sink_name}{tuple(sink_vals)}".replace(",)", ")"), times[0], times[1])


def check_coverage(scop: Scop, schedule_map: isl.UnionMap) -> None:
    """Every statement instance is scheduled, and nothing else is."""
    scheduled = schedule_map.domain()
    if not scheduled.is_equal(scop.domain):
        missing = scop.domain.subtract(scheduled)
        extra = scheduled.subtract(scop.domain)
        raise IncompleteScheduleError(str(missing), str(extra))


def verify(scop: Scop, schedule, deps: Dependences | None = None) -> None:
    """Raise :class:`~polyopt.IllegalScheduleError` unless ``schedule`` respects every dependence.

    ``schedule`` is a :class:`~polyopt.Schedule`, an ``isl.Schedule`` or a flat ``isl.UnionMap``.
    The check is done on relations: violations = D - { (s, t) : time(s) <lex time(t) }.
    """
    deps = deps or dependences(scop)
    tree = getattr(schedule, "tree", schedule)
    # a tree's map is not restricted to the tree's domain: instances it leaves out must show
    schedule_map = tree.get_map().intersect_domain(tree.get_domain()) \
        if isinstance(tree, isl.Schedule) else tree
    schedule_map = schedule_map.intersect_domain(scop.domain)
    check_coverage(scop, schedule_map)
    before = schedule_map.lex_lt_union_map(schedule_map)
    for kind, relation in deps.by_kind().items():
        violated = relation.subtract(before).intersect_params(scop.context)
        if violated.is_empty():
            continue
        for piece in maps_of(violated):
            if piece.is_empty():
                continue
            original = relation.extract_map(piece.get_space()).coalesce()
            params, src, sink, t_src, t_sink = _witness(piece, schedule_map)
            raise IllegalScheduleError(kind, str(original), src, sink, params, t_src, t_sink)
    if isinstance(tree, isl.Schedule):
        check_parallel(scop, tree, deps)


def _parallel_bands(tree: isl.Schedule) -> list[isl.ScheduleNode]:
    """The band nodes directly below a "parallel" mark."""
    found: list[isl.ScheduleNode] = []

    def look(node: isl.ScheduleNode) -> bool:
        if node.get_type() == isl.schedule_node_type.mark and node.mark_get_id().get_name() == PARALLEL_MARK:
            found.append(node.child(0))
        return True

    tree.get_root().foreach_descendant_top_down(look)
    return found


def carried_dependences(scop: Scop, deps: Dependences, domain: isl.UnionSet, outer: isl.UnionMap,
                        member: isl.UnionPwAff) -> isl.UnionMap:
    """The dependences between instances of ``domain`` with equal ``outer`` schedule values that
    loop ``member`` carries (gives the two instances different values): none for a parallel loop."""
    inside = deps.all.intersect_domain(domain).intersect_range(domain)
    same_outer = outer.apply_range(outer.reverse())
    member_map = isl.UnionMap.from_union_pw_aff(member)
    carried = inside.intersect(same_outer).subtract(member_map.apply_range(member_map.reverse()))
    return carried.intersect_params(scop.context)


def check_parallel(scop: Scop, tree: isl.Schedule, deps: Dependences) -> None:
    """Every loop marked parallel carries no dependence: instances with the same outer schedule
    that depend on each other must have the same value of the parallel loop."""
    for band in _parallel_bands(tree):
        carried = carried_dependences(scop, deps, band.get_domain(), band.get_prefix_schedule_union_map(),
                                      band.band_get_partial_schedule().get_at(0))
        if not carried.is_empty():
            piece = maps_of(carried)[0]
            params, src, sink, _, _ = _witness(piece, tree.get_map().intersect_domain(scop.domain))
            raise RacyParallelLoopError(str(band.band_get_partial_schedule().get_at(0)), str(piece),
                                        src, sink, params)


def is_legal(scop: Scop, schedule, deps: Dependences | None = None) -> bool:
    """True when :func:`verify` finds no violation."""
    try:
        verify(scop, schedule, deps)
    except IllegalScheduleError:
        return False
    return True
