"""Value-based dependences (RAW, WAR, WAW) from isl's dataflow analysis, computed once per Scop.

Accesses are *tagged* with their reference (``[S[i] -> S_R0[]] -> A[i]``) so that flows from a
read and from a write of the same statement instance stay apart; the untagged relations are what
the schedulers and the verifier consume.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import islpy as isl

from polyopt.islutil import maps_of
from polyopt.scop import Scop


def _tagged(scop: Scop, writes: bool) -> isl.UnionMap:
    """``{ [S[i] -> ref[]] -> A[...] }`` for the reads or the writes of every statement."""
    result = isl.UnionMap.empty(scop.context.get_space())
    for stmt in scop.statements:
        for ref in (stmt.writes if writes else stmt.reads):
            tag = isl.Set(f"{{ {ref.ref_id}[] }}")
            tagged = isl.Map.from_domain_and_range(
                ref.relation.domain(), tag).range_product(ref.relation)     # S -> [ref -> A]
            tagged = tagged.uncurry()                                     # [S -> ref] -> A
            result = result.union(isl.UnionMap.from_map(tagged))
    return result


def _untag(relation: isl.UnionMap) -> isl.UnionMap:
    """Drop the reference tags on both sides of a dependence relation."""
    return relation.domain_factor_domain().range_factor_domain()


def _flow(sinks, must_sources, may_sources, schedule_map) -> isl.UnionMap:
    info = isl.UnionAccessInfo.from_sink(sinks).set_must_source(must_sources)
    if may_sources is not None:
        info = info.set_may_source(may_sources)
    return info.set_schedule_map(schedule_map).compute_flow().get_may_dependence()


@dataclass(frozen=True, eq=False)
class Dependences:
    """The dependences of one Scop: ``raw``, ``war``, ``waw`` and their union ``all``.

    Each is an isl union map from source to sink statement instances. ``tagged_*`` keep the
    reference tags (which access of which statement) for reporting.
    """

    scop: Scop
    tagged_raw: isl.UnionMap
    tagged_war: isl.UnionMap
    tagged_waw: isl.UnionMap

    @cached_property
    def raw(self) -> isl.UnionMap:
        return _untag(self.tagged_raw).coalesce()

    @cached_property
    def war(self) -> isl.UnionMap:
        return _untag(self.tagged_war).coalesce()

    @cached_property
    def waw(self) -> isl.UnionMap:
        return _untag(self.tagged_waw).coalesce()

    @cached_property
    def all(self) -> isl.UnionMap:
        return self.raw.union(self.war).union(self.waw).coalesce()

    def by_kind(self) -> dict[str, isl.UnionMap]:
        return {"RAW": self.raw, "WAR": self.war, "WAW": self.waw}

    def edges(self) -> list[tuple[str, str, str, str, isl.Map]]:
        """(kind, source statement, sink statement, array, relation) for every dependence piece."""
        arrays = {r.ref_id: r.array for s in self.scop.statements for r in s.accesses}
        out = []
        for kind, tagged in (("RAW", self.tagged_raw), ("WAR", self.tagged_war), ("WAW", self.tagged_waw)):
            for m in maps_of(tagged):
                src = m.get_space().domain().unwrap()
                sink_ref = m.get_space().range().unwrap().get_tuple_name(isl.dim_type.out)
                untagged = m.domain_factor_domain().range_factor_domain().coalesce()
                out.append((kind, src.get_tuple_name(isl.dim_type.in_),
                            untagged.get_tuple_name(isl.dim_type.out), arrays[sink_ref], untagged))
        return out

    def summary(self) -> str:
        """One line per dependence: kind, statements, array, and the relation itself."""
        rows = sorted(self.edges(), key=lambda e: (e[1], e[2], e[0], e[3]))
        counts = {k: sum(1 for e in rows if e[0] == k) for k in ("RAW", "WAR", "WAW")}
        lines = [f"dependences of {self.scop.name}: " + ", ".join(f"{v} {k}" for k, v in counts.items())]
        for kind, src, sink, array, rel in rows:
            lines.append(f"  {kind} {src} -> {sink} on {array}: {rel.gist_params(self.scop.context)}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


_CACHE_ATTRIBUTE = "_polyopt_dependences"


def dependences(scop: Scop) -> Dependences:
    """The value-based dependences of ``scop`` against its original schedule (cached on it)."""
    cached = scop.__dict__.get(_CACHE_ATTRIBUTE)
    if cached is not None:
        return cached
    reads, writes = _tagged(scop, writes=False), _tagged(scop, writes=True)
    tagged_domain = reads.domain().union(writes.domain())
    untag = tagged_domain.unwrap().domain_map()          # [S -> ref] -> S
    schedule = untag.apply_range(scop.schedule.get_map())
    context = scop.context
    raw = _flow(reads, writes, None, schedule).intersect_params(context)
    waw = _flow(writes, writes, None, schedule).intersect_params(context)
    war = _flow(writes, writes, reads, schedule).intersect_domain(reads.domain()).intersect_params(context)
    result = Dependences(scop, raw, war, waw)
    object.__setattr__(scop, _CACHE_ATTRIBUTE, result)
    return result
