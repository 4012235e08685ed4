"""The legality verifier: independent of every scheduler, it re-checks a schedule against the
dependences on relations alone: each sink must run strictly after its source, lexicographically.
"""
from __future__ import annotations

import islpy as isl

from polyopt.deps import Dependences, dependences
from polyopt.errors import IllegalScheduleError, IncompleteScheduleError
from polyopt.islutil import maps_of
from polyopt.scop import Scop


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
    schedule_map = tree.get_map() if isinstance(tree, isl.Schedule) else tree
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


def is_legal(scop: Scop, schedule, deps: Dependences | None = None) -> bool:
    """True when :func:`verify` finds no violation."""
    try:
        verify(scop, schedule, deps)
    except IllegalScheduleError:
        return False
    return True
