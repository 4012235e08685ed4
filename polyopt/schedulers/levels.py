"""Schedules as lists of levels (bands of affine hyperplanes and scalar cuts), the form our own
schedulers produce, and their translation into isl schedule trees.

A :class:`Row` gives one affine function per statement; a band :class:`Level` is a list of rows
(members), a scalar level one row of constants that orders statements (a sequence node).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import islpy as isl

from polyopt.analysis.components import connected_groups
from polyopt.islutil import fresh_stem
from polyopt.analysis.scop import Scop

#: per statement: (iterator coefficients, constant[, ((parameter, coefficient), ...)])
Row = dict[str, tuple]


@dataclass
class Edge:
    """A dependence polyhedron between two statements (shrinks as outer levels satisfy it)."""

    source: str
    sink: str
    relation: isl.BasicMap


@dataclass
class Level:
    """A band of hyperplanes (``permutable`` when every dependence it carries is non-negative on
    all members), or a scalar cut. ``edges`` are the dependences not yet satisfied when the level
    starts: they decide which members are coincident (parallel)."""

    kind: str  # "band" | "scalar"
    rows: list[Row]
    permutable: bool = False
    edges: list[Edge] = field(default_factory=list)


def _phi(row: Row, stmt: str, names: list[str]) -> str:
    coeffs, const, *rest = row[stmt]
    params = rest[0] if rest else ()
    return " + ".join([f"{c} * {n}" for c, n in zip(coeffs, names) if c]
                      + [f"{c} * {p}" for p, c in params if c] + [str(const)])


def delta_set(edge: Edge, row: Row, relation: str) -> isl.Map:
    """The points of ``edge`` where ``phi_sink(t) - phi_source(s) <relation>`` (e.g. ``"= 0"``)."""
    space = edge.relation.get_space()
    params = [space.get_dim_name(isl.dim_type.param, k) for k in range(space.dim(isl.dim_type.param))]
    source_stem, sink_stem = fresh_stem("s", params), fresh_stem("t", params)
    src = [f"{source_stem}{k}" for k in range(space.dim(isl.dim_type.in_))]
    dst = [f"{sink_stem}{k}" for k in range(space.dim(isl.dim_type.out))]
    text = (f"[{', '.join(params)}] -> {{ {edge.source}[{', '.join(src)}] -> {edge.sink}[{', '.join(dst)}] : "
            f"({_phi(row, edge.sink, dst)}) - ({_phi(row, edge.source, src)}) {relation} }}")
    return isl.Map.from_basic_map(edge.relation).intersect(isl.Map(text))


def remaining_after(rows: list[Row], edges: list[Edge]) -> list[Edge]:
    """The parts of ``edges`` on which every row has a zero delta (not yet strongly satisfied)."""
    result = edges
    for row in rows:
        result = [Edge(e.source, e.sink, piece) for e in result
                  for piece in delta_set(e, row, "= 0").get_basic_maps() if not piece.is_empty()]
    return result


def coincidence(rows: list[Row], edges: list[Edge]) -> list[bool]:
    """Member k is coincident when every dependence not satisfied by the outer levels has a zero
    delta on it (isl's definition: independent of the other members, so tiling keeps it)."""
    return [all(delta_set(e, row, "!= 0").is_empty() for e in edges) for row in rows]


def weak_components(statements: list[str], edges: list[Edge]) -> list[tuple[str, ...]]:
    """Statements grouped by weakly connected components of the dependence graph (textual order).
    Scheduling problems of different components are independent."""
    return [tuple(group) for group in connected_groups(statements, [(e.source, e.sink) for e in edges])]


def _trivial(row: Row, stmts: list[str]) -> bool:
    """A member that maps every statement to the same constant orders nothing."""
    return all(not any(row[s][0]) and not any(c for _, c in (row[s][2:] or [()])[0]) for s in stmts) \
        and len({row[s][1] for s in stmts}) == 1


def tree_from_levels(scop: Scop, levels: list[Level]) -> isl.Schedule:
    """The isl schedule tree of a level list (sequence nodes for cuts, bands with flags)."""
    iterators = {s.name: list(s.iterators) for s in scop.statements}
    # isl reads "[] -> [{ ... }]" as an empty band: a scop without parameters has no prefix
    params = f"[{', '.join(scop.params)}] -> " if scop.params else ""

    def node(depth: int, stmts: list[str]) -> str | None:
        if depth == len(levels):
            return None
        level = levels[depth]
        if level.kind == "scalar":
            values = sorted({level.rows[0][s][1] for s in stmts})
            if len(values) == 1:
                return node(depth + 1, stmts)
            items = []
            for value in values:
                group = [s for s in stmts if level.rows[0][s][1] == value]
                filt = "{ " + "; ".join(f"{s}[{', '.join(iterators[s])}]" for s in group) + " }"
                child = node(depth + 1, group)
                items.append(f'{{ filter: "{filt}"' + (f", child: {{ {child} }}" if child else "") + " }")
            return f"sequence: [ {', '.join(items)} ]"
        members = [row for row in level.rows if not _trivial(row, stmts)]
        if not members:
            return node(depth + 1, stmts)
        group_edges = [e for e in level.edges if e.source in stmts and e.sink in stmts]
        flags = coincidence(members, group_edges)
        pieces = ", ".join(
            "{ " + "; ".join(f"{s}[{', '.join(iterators[s])}] -> [({_phi(row, s, iterators[s])})]"
                             for s in stmts) + " }" for row in members)
        text = (f'schedule: "{params}[{pieces}]", permutable: {int(level.permutable)}, '
                f"coincident: [ {', '.join(str(int(f)) for f in flags)} ]")
        child = node(depth + 1, stmts)
        return text + (f", child: {{ {child} }}" if child else "")

    body = node(0, [s.name for s in scop.statements])
    text = f'{{ domain: "{scop.domain}"' + (f", child: {{ {body} }}" if body else "") + " }"
    return isl.Schedule(text)
