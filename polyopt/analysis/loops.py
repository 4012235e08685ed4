"""Dependences and loops as Python data: what each loop of a schedule carries, and why it is (or
is not) parallel or tilable.

:func:`dependence_list` turns the dependences of a Scop into :class:`Dependence` values (kind,
statements, array, references, isl relation, and the distance and direction vectors of the
original iteration spaces), so that nobody has to take isl maps apart by hand to ask "is this
dependence uniform?".

:func:`loop_analysis` walks a schedule tree and returns one :class:`LoopInfo` per band member
(one loop of the generated code before tiling or unrolling), in tree order: the statements it
runs, its affine expression per statement, whether it is parallel (carries no dependence given
the values of the loops around it), the flags isl keeps on its band (coincident, permutable),
whether a ``"parallel"`` mark asks the code generator to run it on threads, and, per dependence
that reaches it, the distance of that dependence *at this loop* in schedule space (constant, or
a (min, max) range). :func:`tilable_depth` is the most members of one permutable band.

Printing the list of :func:`loop_analysis` gives a small table; the values themselves are the
interface (``[loop.parallel for loop in loop_analysis(s)]``, ``loop.carried``...).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Union

import islpy as isl

from polyopt.analysis.deps import Dependences, dependences
from polyopt.analysis.scop import Scop
from polyopt.analysis.verify import carried_dependences
from polyopt.islutil import ISL_LOCK, coalesced, maps_of, tuple_names
from polyopt.transform.marks import PARALLEL_MARK

if TYPE_CHECKING:  # (transform.schedule imports the transformations, which may read analyses)
    from polyopt.transform.schedule import Schedule

#: A distance at one loop: an ``int`` when it is the same for every instance pair of the
#: dependence, else the ``(min, max)`` range, ``None`` on a side where it is unbounded.
Distance = Union[int, tuple[Union[int, None], Union[int, None]]]

__all__ = ["Dependence", "DependenceAtLoop", "LoopInfo", "LoopAnalysis", "Distance",
           "dependence_list", "loop_analysis", "tilable_depth", "loop_table"]


# ----- dependences ------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class Dependence:
    """One dependence piece: every instance pair of one kind between two references.

    ``kind`` is ``"RAW"``, ``"WAR"`` or ``"WAW"``; ``source`` and ``sink`` are statement names,
    ``source_ref`` and ``sink_ref`` the reference ids (see :class:`~polyopt.Statement`'s
    ``accesses``) and ``array`` the array they touch. ``relation`` maps source instances to sink
    instances (the value-based relation, restricted to the Scop's context).

    ``distance`` and ``direction`` compare the iteration vectors dimension by dimension, for the
    first ``min(source dims, sink dims)`` dimensions (*common dimensions*): for statements of one
    nest these are their common loops; for statements of sibling nests at the same depth (the
    two ``i`` loops of jacobi-1d) they are the loops at the same position. ``shared_loops`` says
    how many of them are loops that really enclose both statements in the original program.

    ``distance`` is sink - source when that is one constant vector (a *uniform* dependence),
    else ``None``. ``direction`` has one symbol per common dimension, from the bounds of sink -
    source over every instance pair and every parameter value: ``"<"`` (always positive: the
    sink's iteration is later), ``"="`` (always 0), ``">"`` (always negative), ``"<="`` / ``">="``
    (0 and only one sign), ``"*"`` (both signs). ``approximate`` is true where the dependence
    analysis ran out of budget and this is a memory-based superset (see
    :attr:`~polyopt.Dependences.approximated`).
    """

    kind: str
    source: str
    sink: str
    array: str
    source_ref: str
    sink_ref: str
    relation: isl.Map
    distance: tuple[int, ...] | None
    direction: tuple[str, ...]
    shared_loops: int = 0
    approximate: bool = False

    @property
    def uniform(self) -> bool:
        """True when sink - source is one constant vector."""
        return self.distance is not None

    def __repr__(self) -> str:
        return (f"Dependence({self.kind} {self.source} -> {self.sink} on {self.array}, "
                f"distance={self.distance}, direction={self.direction})")

    def __str__(self) -> str:
        vector = self.distance if self.distance is not None else "(" + ", ".join(self.direction) + ")"
        text = f"{self.kind} {self.source} -> {self.sink} on {self.array} {vector}".replace(",)", ")")
        return text + (" (approximate)" if self.approximate else "")


def _bounds(values: isl.Set, dim: int) -> tuple[int | None, int | None]:
    """(min, max) of coordinate ``dim`` of ``values`` over its points and every parameter value;
    ``None`` where unbounded."""
    aff = isl.Aff.var_on_domain(isl.LocalSpace.from_space(values.get_space()), isl.dim_type.set, dim)
    found = []
    for value in (values.min_val(aff), values.max_val(aff)):
        found.append(value.to_python() if value.is_int() else None)
    return found[0], found[1]


def _direction(low: int | None, high: int | None) -> str:
    if low is not None and low > 0:
        return "<"
    if high is not None and high < 0:
        return ">"
    if low == 0 and high == 0:
        return "="
    if low == 0:
        return "<="
    if high == 0:
        return ">="
    return "*"


def _vector(relation: isl.Map) -> tuple[tuple[int, ...] | None, tuple[str, ...]]:
    """Distance (if uniform) and direction over the common dimensions of ``relation``."""
    n_in = relation.dim(isl.dim_type.in_)
    n_out = relation.dim(isl.dim_type.out)
    common = min(n_in, n_out)
    if relation.is_empty():
        return None, ()
    if common == 0:
        return (), ()
    aligned = relation.project_out(isl.dim_type.in_, common, n_in - common) \
                      .project_out(isl.dim_type.out, common, n_out - common) \
                      .reset_tuple_id(isl.dim_type.in_).reset_tuple_id(isl.dim_type.out)
    deltas = aligned.deltas()
    bounds = [_bounds(deltas, k) for k in range(common)]
    direction = tuple(_direction(low, high) for low, high in bounds)
    if all(low is not None and low == high for low, high in bounds):
        return tuple(low for low, _ in bounds), direction
    return None, direction


def _band_paths(scop: Scop) -> dict[str, list[tuple]]:
    """Per statement, the band members of the original schedule tree around it, each named by
    its node's path from the root and its member index (equal names: one shared loop)."""
    paths: dict[str, list[tuple]] = {}

    def visit(node: isl.ScheduleNode, path: tuple, members: list[tuple]) -> None:
        if node.get_type() == isl.schedule_node_type.band:
            members = members + [(path, k) for k in range(node.band_n_member())]
        if node.n_children() == 0:
            for stmt in sorted(tuple_names(node.get_domain())):
                paths.setdefault(stmt, members)
            return
        for k in range(node.n_children()):
            visit(node.child(k), path + (k,), members)

    visit(scop.schedule.get_root(), (), [])
    return paths


def _shared(paths: dict[str, list[tuple]], a: str, b: str) -> int:
    count = 0
    for x, y in zip(paths.get(a, []), paths.get(b, [])):
        if x != y:
            break
        count += 1
    return count


def _scop_of(source) -> Scop:
    scop = getattr(source, "scop", source)
    if not isinstance(scop, Scop):
        raise TypeError(f"expected a Scop, a Kernel or a Schedule, not {type(source).__name__}")
    return scop


def dependence_list(scop_or_kernel, deps: Dependences | None = None) -> list[Dependence]:
    """Every dependence piece of a Scop (or of a Kernel's or Schedule's Scop) as a
    :class:`Dependence`, sorted by (source, sink, kind, array, references).

    One piece per (kind, source reference, sink reference): jacobi-1d's three reads of ``A`` give
    three RAW pieces, with distances (1, -1), (1, 0) and (1, 1). ``deps`` defaults to
    :func:`~polyopt.dependences` of the Scop (computed once and cached)."""
    scop = _scop_of(scop_or_kernel)
    with ISL_LOCK:
        deps = deps or dependences(scop)
        approximated = {tuple(line.split(":")[0].split(" on ")) for line in deps.approximated}
        paths = _band_paths(scop)
        out: list[Dependence] = []
        for piece in deps.pieces:
            if piece.relation.is_empty():
                continue
            relation = coalesced(piece.relation.intersect_params(scop.context))
            source = relation.get_tuple_name(isl.dim_type.in_)
            sink = relation.get_tuple_name(isl.dim_type.out)
            distance, direction = _vector(relation)
            out.append(Dependence(piece.kind, source, sink, piece.array, piece.source_ref, piece.sink_ref,
                                  relation, distance, direction, _shared(paths, source, sink),
                                  (piece.kind, piece.array) in approximated))
    out.sort(key=lambda d: (d.source, d.sink, d.kind, d.array, d.source_ref, d.sink_ref))
    return out


# ----- loops -------------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class DependenceAtLoop:
    """A dependence as one loop sees it: the part of ``dependence`` whose source and sink both
    run in this loop with equal values of every loop around it (``relation``), and ``distance``,
    the sink's value of this loop minus the source's on that part (see :data:`Distance`).

    ``carried``: the distance is not always 0, i.e. this loop orders some instance pairs of the
    dependence (it must then run them in sequence, and is not parallel). Where the distance is 0
    the dependence is left to the loops (or the sequence) inside."""

    dependence: Dependence
    relation: isl.Map
    distance: Distance
    carried: bool

    def __repr__(self) -> str:
        return f"DependenceAtLoop({self.dependence!r}, distance={self.distance}, carried={self.carried})"

    def __str__(self) -> str:
        return f"{self.dependence} at distance {self.distance}"


@dataclass(frozen=True, eq=False)
class LoopInfo:
    """One band member of a schedule tree: one loop of the generated code (before tiling).

    ``statements``: the statements it runs. ``depth``: its position along the root-to-leaf path
    of band members (0: outermost). ``band``: the index of its band node in tree order,
    ``member``: its index inside that band. ``expressions``: per statement, its affine schedule
    expression as isl text (``"2t + i"``).

    ``parallel``: it carries no dependence once the loops around it are fixed (the verifier's
    :func:`~polyopt.analysis.verify.carried_dependences` is empty): its iterations may run in
    any order. ``marked_parallel``: a ``"parallel"`` mark sits above its band (other marks may
    sit between, nothing else) and it is the band's first member: the code generator will run
    it on threads. ``coincident`` and ``permutable``: the flags isl keeps for the member and for
    its band (a scheduler's promise; ``parallel`` is the check).

    ``dependences``: every dependence that reaches this loop (see :class:`DependenceAtLoop`), with
    its distance at this loop; ``carried``: those the loop carries, as :class:`Dependence` values
    of :func:`dependence_list`. ``name``: the loop's name in the Schedule (what ``s.loop(name)``
    and the primitives take).
    """

    statements: tuple[str, ...]
    depth: int
    band: int
    member: int
    expressions: dict[str, str]
    parallel: bool
    marked_parallel: bool
    coincident: bool
    permutable: bool
    dependences: tuple[DependenceAtLoop, ...]
    name: str = ""

    @property
    def carried(self) -> tuple[Dependence, ...]:
        """The dependences this loop carries (non-zero distance on some instance pair)."""
        return tuple(d.dependence for d in self.dependences if d.carried)

    @property
    def expression(self) -> str:
        """The schedule expression: one text when every statement has the same, else
        ``"S0: ...; S1: ..."``."""
        texts = list(self.expressions.values())
        if texts and all(t == texts[0] for t in texts):
            return texts[0]
        return "; ".join(f"{s}: {t}" for s, t in self.expressions.items())

    def __repr__(self) -> str:
        return (f"LoopInfo(depth={self.depth}, band={self.band}, member={self.member}, "
                f"expression={self.expression!r}, statements={self.statements}, "
                f"parallel={self.parallel}, carried={len(self.carried)})")

    def __str__(self) -> str:
        return loop_table([self])


class LoopAnalysis(list):
    """The list of :class:`LoopInfo` of :func:`loop_analysis`: a plain list that prints as a
    table (:meth:`table`)."""

    def table(self) -> str:
        return loop_table(self)

    def __str__(self) -> str:
        return self.table()


_AFF_BODY = re.compile(r"->\s*\[\((.*)\)\]\s*\}\s*$")


def _expression_text(pa: isl.PwAff) -> str:
    """``2t + i`` from ``[N] -> { S0[t, i] -> [(2t + i)] }``; the isl text of the pieces when
    the expression is piecewise."""
    text = str(pa.gist(pa.domain()))
    body = text.split("->", 1)[1] if text.startswith("[") else text
    match = _AFF_BODY.search(body)
    if match and ";" not in body:
        return match.group(1)
    return body.strip()


def _by_statement(upa: isl.UnionPwAff) -> dict[str, isl.PwAff]:
    found: dict[str, isl.PwAff] = {}
    upa.foreach_pw_aff(lambda pa: found.__setitem__(pa.get_domain_space().get_tuple_name(isl.dim_type.set), pa))
    return found


def _maps_by_statement(umap: isl.UnionMap) -> dict[str, isl.Map]:
    return {m.get_tuple_name(isl.dim_type.in_): m for m in maps_of(umap)}


def _at_loop(dep: Dependence, outer: dict[str, isl.Map], member: dict[str, isl.PwAff]
             ) -> DependenceAtLoop | None:
    """``dep`` restricted to equal outer values, and its distance at the loop ``member``."""
    src_outer, sink_outer = outer[dep.source], outer[dep.sink]
    live = dep.relation.intersect(src_outer.apply_range(sink_outer.reverse()))
    if live.is_empty():
        return None
    values = live.apply_domain(isl.Map.from_pw_aff(member[dep.source])) \
                 .apply_range(isl.Map.from_pw_aff(member[dep.sink])).deltas()
    low, high = _bounds(values, 0)
    distance: Distance = low if low is not None and low == high else (low, high)
    return DependenceAtLoop(dep, live, distance, not (low == 0 and high == 0))


def loop_analysis(schedule: Schedule, deps: Dependences | None = None) -> LoopAnalysis:
    """One :class:`LoopInfo` per band member of ``schedule``'s tree, in tree order: outer loops
    first, the nests of a sequence in textual order.

    ``deps`` defaults to :func:`~polyopt.dependences` of the schedule's Scop. Prints as a table;
    it is a list."""
    scop = schedule.scop
    with ISL_LOCK:
        deps = deps or dependences(scop)
        pieces = dependence_list(scop, deps)
        loops = LoopAnalysis()
        names = iter(loop.name for loop in schedule.loops()) if hasattr(schedule, "loops") else None
        band_count = [0]

        def visit(node: isl.ScheduleNode, depth: int, marked: bool) -> None:
            kind = node.get_type()
            if kind == isl.schedule_node_type.band and node.band_n_member() > 0:
                band = band_count[0]
                band_count[0] += 1
                domain = node.get_domain().intersect(scop.domain)
                stmts = tuple(sorted(tuple_names(domain)))
                inside = [d for d in pieces if d.source in stmts and d.sink in stmts]
                partial = node.band_get_partial_schedule().intersect_domain(domain)
                outer = node.get_prefix_schedule_union_map().intersect_domain(domain)
                permutable = bool(node.band_get_permutable())
                for k in range(node.band_n_member()):
                    member = partial.get_at(k)
                    by_stmt = _by_statement(member)
                    outer_maps = _maps_by_statement(outer)
                    at_loop = tuple(found for found in (_at_loop(d, outer_maps, by_stmt) for d in inside)
                                    if found is not None)
                    parallel = carried_dependences(scop, deps, domain, outer, member).is_empty()
                    loops.append(LoopInfo(
                        statements=stmts, depth=depth + k, band=band, member=k,
                        expressions={s: _expression_text(by_stmt[s]) for s in stmts if s in by_stmt},
                        parallel=parallel, marked_parallel=marked and k == 0,
                        coincident=bool(node.band_member_get_coincident(k)), permutable=permutable,
                        dependences=at_loop, name=next(names) if names is not None else f"c{depth + k}"))
                    outer = outer.flat_range_product(isl.UnionMap.from_union_pw_aff(member))
                depth += node.band_n_member()
            if kind == isl.schedule_node_type.mark:   # a chain of marks: the band below has them all
                visit(node.child(0), depth, marked or node.mark_get_id().get_name() == PARALLEL_MARK)
                return
            for k in range(node.n_children()):
                visit(node.child(k), depth, False)

        visit(schedule.tree.get_root(), 0, False)
    return loops


def tilable_depth(schedule) -> int:
    """The most members of one permutable band of ``schedule`` (a :class:`~polyopt.Schedule` or
    an ``isl.Schedule``): how many loops can be tiled together. A single-member band counts 1;
    0 when the tree has no band."""
    tree = getattr(schedule, "tree", schedule)
    best = [0]

    def look(node: isl.ScheduleNode) -> bool:
        if node.get_type() == isl.schedule_node_type.band:
            n = node.band_n_member()
            if n == 1 or node.band_get_permutable():
                best[0] = max(best[0], n)
        return True

    with ISL_LOCK:
        tree.get_root().foreach_descendant_top_down(look)
    return best[0]


# ----- printing ----------------------------------------------------------------------------------

def _kinds(deps) -> str:
    counts: dict[str, int] = {}
    for d in deps:
        counts[d.kind] = counts.get(d.kind, 0) + 1
    return ", ".join(f"{counts[k]} {k}" for k in ("RAW", "WAR", "WAW") if k in counts) or "-"


def _distance_text(distances: list[Distance]) -> str:
    texts = []
    for d in distances:
        if isinstance(d, int):
            texts.append(str(d))
        else:
            low, high = d
            texts.append(f"{'-inf' if low is None else low}..{'inf' if high is None else high}")
    unique = sorted(set(texts), key=texts.index)
    return " ".join(unique) if unique else "-"


def loop_table(loops) -> str:
    """A small text table of :class:`LoopInfo` values: one row per loop, indented by depth, with
    its flags (``par``: parallel, ``mark``: marked parallel, ``coin``: coincident, ``perm``:
    permutable band), what it carries (counts per kind) and the distances at it of the
    dependences it carries."""
    header = ("loop", "band", "statements", "par", "mark", "coin", "perm", "carries", "distances", "expression")
    rows = [header]
    for loop in loops:
        carried = [d for d in loop.dependences if d.carried]
        rows.append(("  " * loop.depth + (loop.name or loop.expression), f"{loop.band}.{loop.member}",
                     ",".join(loop.statements), "yes" if loop.parallel else "no",
                     "yes" if loop.marked_parallel else "", "yes" if loop.coincident else "",
                     "yes" if loop.permutable else "", _kinds(d.dependence for d in carried),
                     _distance_text([d.distance for d in carried]), loop.expression))
    widths = [max(len(r[k]) for r in rows) for k in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)
