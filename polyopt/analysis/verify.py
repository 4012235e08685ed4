"""The legality verifier: independent of every scheduler, it re-checks a schedule against the
dependences on relations alone: each sink must run strictly after its source, lexicographically.
"""
from __future__ import annotations

import islpy as isl

from polyopt.analysis.deps import Dependences, dependences
from polyopt.errors import IllegalScheduleError, IncompleteScheduleError, RacyParallelLoopError
from polyopt.islutil import coalesced, maps_of, tuple_names
from polyopt.analysis.scop import Scop, scop_fingerprint
from polyopt.analysis.reductions import same_element_updates
from polyopt.transform.marks import (GPU_BLOCK_MARK, GPU_KERNEL_MARK, GPU_REDUCE_MARK, GPU_THREAD_MARK,
                                     PARALLEL_MARK)


def _point_values(point: isl.Point, kind, count: int) -> list[int]:
    return [point.get_coordinate_val(kind, k).to_python() for k in range(count)]


def _witness(violation: isl.Map, schedule_map: isl.UnionMap, scop: Scop):
    """A concrete (params, source, sink, source time, sink time) in ``violation``, at parameter
    values a real call can have (every access inside its array) where the violation has some."""
    realistic = violation.intersect_params(scop.in_bounds_params)
    point = (violation if realistic.is_empty() else realistic).wrap().sample_point()
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
    The check is done on relations: violations = D - { (s, t) : time(s) <lex time(t) }. In a
    tree, the loops marked parallel and a GPU mapping's block and thread coordinates must carry
    no dependence (:class:`~polyopt.RacyParallelLoopError`). A Schedule of ``scop`` with its
    scalars expanded (its ``scop.origin`` is ``scop``) is checked against the expanded Scop, the
    program it runs.
    """
    own = getattr(schedule, "scop", None)
    if own is not None and own.origin is not None and scop_fingerprint(own.origin) == scop_fingerprint(scop):
        scop, deps = own, None
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
            original = coalesced(relation.extract_map(piece.get_space()))
            params, src, sink, t_src, t_sink = _witness(piece, schedule_map, scop)
            raise IllegalScheduleError(kind, str(original), src, sink, params, t_src, t_sink)
    if isinstance(tree, isl.Schedule):
        check_parallel(scop, tree, deps)
        check_gpu_mapping(scop, tree, deps)


def _marked_bands(tree: isl.Schedule, names: tuple[str, ...]
                  ) -> list[tuple[isl.ScheduleNode, list[str], str | None]]:
    """The band nodes below a chain of marks that holds one of ``names``: (band, the marks of
    the chain among ``names``, the kernel of the nearest ``gpu_kernel`` mark above, if any)."""
    found: list[tuple[isl.ScheduleNode, list[str], str | None]] = []

    def visit(node: isl.ScheduleNode, chain: list[str], kernel: str | None) -> None:
        kind = node.get_type()
        if kind == isl.schedule_node_type.mark:
            name = node.mark_get_id().get_name()
            word, _, rest = name.partition(" ")
            if word == GPU_KERNEL_MARK:
                kernel = rest or "?"
            visit(node.child(0), chain + [name] if name in names else chain, kernel)
            return
        if kind == isl.schedule_node_type.band and chain:
            found.append((node, chain, kernel))
        for k in range(node.n_children()):
            visit(node.child(k), [], kernel)

    visit(tree.get_root(), [], None)
    return found


def _parallel_bands(tree: isl.Schedule) -> list[isl.ScheduleNode]:
    """The band nodes below a "parallel" mark (other marks may sit between)."""
    return [band for band, _, _ in _marked_bands(tree, (PARALLEL_MARK,))]


def carried_dependences(scop: Scop, deps: Dependences, domain: isl.UnionSet, outer: isl.UnionMap,
                        member: isl.UnionPwAff) -> isl.UnionMap:
    """The dependences between instances of ``domain`` with equal ``outer`` schedule values that
    loop ``member`` carries (gives the two instances different values): none for a parallel loop."""
    inside = deps.all.intersect_domain(domain).intersect_range(domain)
    same_outer = outer.apply_range(outer.reverse())
    member_map = isl.UnionMap.from_union_pw_aff(member)
    carried = inside.intersect(same_outer).subtract(member_map.apply_range(member_map.reverse()))
    return carried.intersect_params(scop.context)


def _check_band(scop: Scop, tree: isl.Schedule, deps: Dependences, band: isl.ScheduleNode,
                describe: str = "", allowed: isl.UnionMap | None = None):
    """Raise :class:`~polyopt.RacyParallelLoopError` (with ``describe`` after the loop) if the
    outermost member of ``band`` carries a dependence given the loops around it (other than
    those in ``allowed``); else return."""
    member = band.band_get_partial_schedule().get_at(0)
    carried = carried_dependences(scop, deps, band.get_domain(), band.get_prefix_schedule_union_map(),
                                  member)
    if allowed is not None:
        carried = carried.subtract(allowed)
    if carried.is_empty():
        return
    piece = maps_of(carried)[0]
    params, src, sink, _, _ = _witness(piece, tree.get_map().intersect_domain(scop.domain), scop)
    raise RacyParallelLoopError(f"{member}{describe}", str(piece), src, sink, params)


def check_parallel(scop: Scop, tree: isl.Schedule, deps: Dependences) -> None:
    """Every loop marked parallel carries no dependence: instances with the same outer schedule
    that depend on each other must have the same value of the parallel loop."""
    for band in _parallel_bands(tree):
        _check_band(scop, tree, deps, band)


#: What a GPU mark says of the loop below it, for messages.
_GPU_ROLES = {GPU_BLOCK_MARK: "block", GPU_THREAD_MARK: "thread"}


def check_gpu_mapping(scop: Scop, tree: isl.Schedule, deps: Dependences) -> None:
    """Every loop a GPU mapping's tree marks as a block or thread coordinate
    (:mod:`polyopt.codegen.gpu_mapping`) carries no dependence given the loops outside it (host
    loops and outer coordinates): its iterations run at the same time, in different blocks or
    threads, as loops marked parallel do. The error names the kernel, the marks and the loop."""
    for band, marks, kernel in _marked_bands(tree, tuple(_GPU_ROLES)):
        roles = " and ".join(_GPU_ROLES[m] for m in dict.fromkeys(marks))
        where = f" of kernel {kernel}" if kernel else " (outside any gpu_kernel mark)"
        _check_band(scop, tree, deps, band,
                    f" ({'/'.join(dict.fromkeys(marks))}: a GPU {roles} coordinate{where})")
    for band, _, kernel in _marked_bands(tree, (GPU_REDUCE_MARK,)):
        sums = same_element_updates(scop, tuple_names(band.get_domain()))
        _check_band(scop, tree, deps, band, f" ({GPU_REDUCE_MARK}: a sum split over the threads of a "
                    f"warp in kernel {kernel}; only updates X[f] = X[f] + e of one element may "
                    "depend on each other across its iterations)", allowed=sums)


def is_legal(scop: Scop, schedule, deps: Dependences | None = None) -> bool:
    """True when :func:`verify` finds no violation."""
    try:
        verify(scop, schedule, deps)
    except IllegalScheduleError:
        return False
    return True
