"""Value-based dependences (RAW, WAR, WAW) from isl's dataflow analysis, computed once per Scop.

Accesses are *tagged* with their reference (``[S[i] -> S_R0[]] -> A[i]``) so that flows from a
read and from a write of the same statement instance stay apart; the untagged relations are what
the schedulers and the verifier consume.

The exact analysis is a parametric integer lexmax per sink, which strided domains and subscripts
with coefficients other than 1 can make explode (minutes for five statements). Each dependence
kind of each array is therefore analysed under an isl operation budget; where it runs out (or
isl's dataflow analysis fails on its own, as it does on rare random nests), that part is
replaced by its *memory-based* dependences (every earlier access of the element, no
kills): a superset of the value-based ones, so every schedule legal for it is legal, at the
price of fewer legal schedules. ``Dependences.approximated`` (and so ``summary()`` and the
Schedule's trace) names each part so replaced.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import islpy as isl

from polyopt.islutil import coalesced, fix_params, isl_options, maps_of, out_of_operations
from polyopt.analysis.scop import Scop

#: isl operations the exact analysis of one dependence kind on one array may take (about a
#: second); past it, that part is memory-based (see the module docstring)
FLOW_BUDGET = 400_000


def _tagged(scop: Scop, writes: bool, array: str) -> isl.UnionMap:
    """``{ [S[i] -> ref[]] -> A[...] }`` for the reads or the writes of ``array`` by every
    statement."""
    result = isl.UnionMap.empty(scop.context.get_space())
    for stmt in scop.statements:
        for ref in (stmt.writes if writes else stmt.reads):
            if ref.array != array:
                continue
            tag = isl.Set(f"{{ {ref.ref_id}[] }}")
            tagged = isl.Map.from_domain_and_range(
                ref.relation.domain(), tag).range_product(ref.relation)     # S -> [ref -> A]
            tagged = tagged.uncurry()                                     # [S -> ref] -> A
            result = result.union(isl.UnionMap.from_map(tagged))
    return result


def _untag(relation: isl.UnionMap) -> isl.UnionMap:
    """Drop the reference tags on both sides of a dependence relation."""
    return relation.domain_factor_domain().range_factor_domain()


def _flow(sinks, must_sources, may_sources, schedule_map, war_reads: isl.UnionMap | None = None) -> isl.UnionMap:
    """isl's dataflow analysis; with ``war_reads`` (a WAR problem), its sources restricted to them."""
    info = isl.UnionAccessInfo.from_sink(sinks).set_must_source(must_sources)
    if may_sources is not None:
        info = info.set_may_source(may_sources)
    relation = info.set_schedule_map(schedule_map).compute_flow().get_may_dependence()
    return relation if war_reads is None else relation.intersect_domain(war_reads.domain())


def _memory_based(sources: isl.UnionMap, sinks: isl.UnionMap, before: isl.UnionMap) -> isl.UnionMap:
    """Every (source access, sink access) pair of one element with the source ``before`` the
    sink: the dependences without kills, a superset of the value-based ones."""
    return sources.apply_range(sinks.reverse()).intersect(before)


#: Sizes at which the exact analysis of an array that a strided domain accesses is done again
#: with every size parameter fixed, and compared: isl's parametric dataflow analysis named the
#: wrong last writer on a strided random nest (right at every fixed size), and no schedule
#: checked against such dependences can be trusted.
CHECKED_SIZES = range(1, 13)


def _strided_access(scop: Scop, array: str) -> bool:
    """Whether a statement with existentially quantified variables in its domain (a stride, a
    ``%`` guard) accesses ``array``."""
    return any(any(b.dim(isl.dim_type.div) for b in stmt.domain.get_basic_sets())
               for stmt in scop.statements
               if any(ref.array == array for ref in (*stmt.reads, *stmt.writes)))


def _first_disagreement(scop: Scop, relation: isl.UnionMap, sinks, must, may, schedule,
                        war_reads: isl.UnionMap | None) -> int | None:
    """The first size of :data:`CHECKED_SIZES` (every size parameter at it) where ``relation``
    differs from the same analysis with the sizes fixed; None where they agree at every size
    (an analysis past its budget counts as a disagreement: the caller falls back to a superset)."""
    for size in CHECKED_SIZES:
        context = fix_params(scop.context, {name: size for name in scop.params})
        if context.is_empty():
            continue
        with isl_options(max_operations=FLOW_BUDGET):
            fixed = _flow(sinks.intersect_params(context), must.intersect_params(context),
                          None if may is None else may.intersect_params(context), schedule, war_reads)
            if not fixed.is_equal(relation.intersect_params(context)):
                return size
    return None

def _analysis(scop: Scop) -> tuple[isl.UnionMap, isl.UnionMap, isl.UnionMap, tuple[str, ...], frozenset[str]]:
    """Tagged RAW, WAR, WAW, the parts replaced by memory-based dependences (one line each) and
    the arrays those parts are on.

    Arrays are analysed apart (accesses to different arrays never depend on each other), each
    kind under its own operation budget. WAR takes writes as must-sources and reads as
    may-sources of each write, so that a read depends only on the next write of its element."""
    reads = {a: _tagged(scop, False, a) for a in scop.arrays}
    writes = {a: _tagged(scop, True, a) for a in scop.arrays}
    tagged_domain = isl.UnionSet.empty(scop.context.get_space())
    for relation in [*reads.values(), *writes.values()]:
        tagged_domain = tagged_domain.union(relation.domain())
    untag = tagged_domain.unwrap().domain_map()          # [S -> ref] -> S
    schedule = untag.apply_range(scop.schedule.get_map())
    before: list[isl.UnionMap] = []                       # tagged x -> y with x earlier, if needed
    found = {kind: isl.UnionMap.empty(scop.context.get_space()) for kind in ("RAW", "WAR", "WAW")}
    approximated: list[str] = []
    approximated_arrays: set[str] = set()
    for array in scop.arrays:
        r, w = reads[array], writes[array]
        if w.is_empty():
            continue
        problems = {"RAW": (r, w, None), "WAR": (w, w, r), "WAW": (w, w, None)}
        strided = _strided_access(scop, array)
        for kind, (sinks, must, may) in problems.items():
            why, war_reads = None, r if kind == "WAR" else None
            try:
                with isl_options(max_operations=FLOW_BUDGET):
                    relation = _flow(sinks, must, may, schedule, war_reads)
                if strided:
                    size = _first_disagreement(scop, relation, sinks, must, may, schedule, war_reads)
                    if size is not None:
                        why = f"differs from isl's own analysis at the fixed size {size}"
            except isl.Error as exc:  # past the budget, or an internal error of isl's dataflow
                why = (f"exceeded {FLOW_BUDGET} isl operations" if out_of_operations(exc)
                       else f"failed inside isl: {str(exc).splitlines()[0]}")
            if why is not None:
                if not before:
                    before.append(schedule.lex_lt_union_map(schedule))
                relation = _memory_based(r if kind == "WAR" else w, sinks, before[0])
                approximated.append(f"{kind} on {array}: memory-based (the exact analysis {why})")
                approximated_arrays.add(array)
            found[kind] = found[kind].union(relation.intersect_params(scop.context))
    return found["RAW"], found["WAR"], found["WAW"], tuple(approximated), frozenset(approximated_arrays)


@dataclass(frozen=True, eq=False)
class DependencePiece:
    """One piece of a dependence relation: its ``kind`` (RAW, WAR, WAW), the references it goes
    from and to (``source_ref``, ``sink_ref``: ref ids), their ``array``, and the ``relation``
    between statement instances (the reference tags dropped)."""

    kind: str
    source_ref: str
    sink_ref: str
    array: str
    relation: isl.Map


@dataclass(frozen=True, eq=False)
class Dependences:
    """The dependences of one Scop: ``raw``, ``war``, ``waw`` and their union ``all``.

    Each is an isl union map from source to sink statement instances. ``tagged_*`` keep the
    reference tags (which access of which statement) for reporting. ``approximated`` names the
    parts (kind and array) that are memory-based supersets of the value-based dependences,
    because their exact analysis exceeded its budget or failed inside isl (empty: all exact);
    ``approximated_arrays`` the arrays of those parts (on the others every dependence is exact,
    which transformations such as scalar expansion rely on).
    """

    scop: Scop
    tagged_raw: isl.UnionMap
    tagged_war: isl.UnionMap
    tagged_waw: isl.UnionMap
    approximated: tuple[str, ...] = ()
    approximated_arrays: frozenset[str] = frozenset()

    @cached_property
    def raw(self) -> isl.UnionMap:
        return coalesced(_untag(self.tagged_raw))

    @cached_property
    def war(self) -> isl.UnionMap:
        return coalesced(_untag(self.tagged_war))

    @cached_property
    def waw(self) -> isl.UnionMap:
        return coalesced(_untag(self.tagged_waw))

    @cached_property
    def all(self) -> isl.UnionMap:
        return coalesced(self.raw.union(self.war).union(self.waw))

    def by_kind(self) -> dict[str, isl.UnionMap]:
        return {"RAW": self.raw, "WAR": self.war, "WAW": self.waw}

    @cached_property
    def pieces(self) -> list["DependencePiece"]:
        """Every piece of the tagged relations with its references and array, the tags dropped
        (not coalesced: callers coalesce what they show)."""
        arrays = {r.ref_id: r.array for s in self.scop.statements for r in s.accesses}
        out = []
        for kind, tagged in (("RAW", self.tagged_raw), ("WAR", self.tagged_war), ("WAW", self.tagged_waw)):
            for m in maps_of(tagged):
                space = m.get_space()
                source_ref = space.domain().unwrap().get_tuple_name(isl.dim_type.out)
                sink_ref = space.range().unwrap().get_tuple_name(isl.dim_type.out)
                out.append(DependencePiece(kind, source_ref, sink_ref, arrays[sink_ref],
                                           m.domain_factor_domain().range_factor_domain()))
        return out

    def edges(self) -> list[tuple[str, str, str, str, isl.Map]]:
        """(kind, source statement, sink statement, array, relation) for every dependence piece."""
        out = []
        for piece in self.pieces:
            untagged = coalesced(piece.relation)
            out.append((piece.kind, untagged.get_tuple_name(isl.dim_type.in_),
                        untagged.get_tuple_name(isl.dim_type.out), piece.array, untagged))
        return out

    def summary(self) -> str:
        """One line per dependence: kind, statements, array, and the relation itself."""
        rows = sorted(self.edges(), key=lambda e: (e[1], e[2], e[0], e[3]))
        counts = {k: sum(1 for e in rows if e[0] == k) for k in ("RAW", "WAR", "WAW")}
        lines = [f"dependences of {self.scop.name}: " + ", ".join(f"{v} {k}" for k, v in counts.items())]
        for kind, src, sink, array, rel in rows:
            lines.append(f"  {kind} {src} -> {sink} on {array}: {rel.gist_params(self.scop.context)}")
        lines += [f"  approximated: {line}" for line in self.approximated]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


_CACHE_ATTRIBUTE = "_polyopt_dependences"


def dependences(scop: Scop) -> Dependences:
    """The value-based dependences of ``scop`` against its original schedule (cached on it);
    memory-based for the parts whose exact analysis exceeds its budget or fails (``approximated``)."""
    cached = scop.__dict__.get(_CACHE_ATTRIBUTE)
    if cached is not None:
        return cached
    result = Dependences(scop, *_analysis(scop))
    object.__setattr__(scop, _CACHE_ATTRIBUTE, result)
    return result
