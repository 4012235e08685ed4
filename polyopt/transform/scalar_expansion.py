"""Scalar expansion: a kernel-local scalar that only its reuse makes a loop sequential gets one
element per iteration of that loop, so the loop can run in parallel.

In PolyBench's deriche each row ``i`` runs a recurrence along ``j`` through the local scalars
``xm1, ym1, ym2``. The rows are independent, but the one storage location of each scalar orders
every row after the previous one (anti and output dependences), so no scheduler can run ``i`` in
parallel. This is Feautrier's array expansion restricted to scalars (PPCG reaches the same with
live-range reordering), decided on the value-based dependences of :mod:`polyopt.analysis.deps`:

1. *Webs.* The references of a local scalar are grouped by its flow (RAW) dependences: a read
   and the writes it may read from are one web, one live value. Each web of a transformed
   scalar becomes an array of its own (renaming is always legal: a read still reads its writer),
   so dependences between two webs (``w`` of one loop nest overwritten by the next) disappear.
2. *Loops.* A web may be expanded along a loop around all its statements when the loop carries
   none of its flow dependences: every read reads a value written in the same iteration. Its
   array is then indexed by the loop's iterator, shifted to start at 0 (extent from the loop's
   bounds over the web's instances: parametric, affine in the sizes), so iterations write
   different elements and the anti and output dependences between them disappear.
3. *Only where it pays.* A loop of the original schedule gets its scalars expanded when every
   dependence it carries is on local scalars and every web of those scalars written in the loop
   can be expanded along it (a web only renamed would conflict with itself across iterations
   where another web's write came between before), which makes the loop parallel. A scalar in a
   loop that is parallel already, or that stays sequential for other reasons, keeps its storage.

Only scalars whose dependences are exact and whose every read has a writer in the kernel are
candidates (a read of the value from before the kernel, 0, is no live range of the kernel).
Expanded arrays are ``temporary`` arrays of the Scop: the runtime allocates them per call and
passes them after the arguments. The result is checked on relations: the expanded Scop's flow
dependences (reference to reference) must be the original's exactly, i.e. every read still reads
the value it read before; otherwise nothing is expanded (and the note says why).

:func:`expand_scalars` is what ``po.schedule`` runs before its scheduler (``expand_scalars=False``
turns it off); the Schedule's ``notes`` say which scalars became which arrays.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import islpy as isl

from polyopt.analysis import expr as E
from polyopt.analysis.affine import extent_expr
from polyopt.analysis.components import connected_groups
from polyopt.analysis.deps import DependencePiece, Dependences, dependences
from polyopt.analysis.scop import Array, Scop, Statement
from polyopt.frontends.common import build_statement
from polyopt.islutil import maps_of

_CACHE_ATTRIBUTE = "_polyopt_scalar_expansion"


@dataclass(frozen=True)
class ExpandedWeb:
    """One live range (web) of a local ``scalar``, now held in ``array``: indexed by the
    iterators ``loops`` (outermost first; empty: a 0-d local of its own) with extents ``shape``."""

    scalar: str
    array: str
    statements: tuple[str, ...]
    loops: tuple[str, ...]
    shape: tuple[str, ...]


@dataclass(frozen=True, eq=False)
class ScalarExpansion:
    """The result of :func:`expand_scalars`: the ``original`` Scop, the ``scop`` to schedule
    (the original itself where nothing is expanded), the ``webs`` of the transformed scalars,
    the ``loops`` made parallel (a description each) and a ``note`` for the schedule (empty when
    there is nothing to say)."""

    original: Scop
    scop: Scop
    webs: tuple[ExpandedWeb, ...] = ()
    loops: tuple[str, ...] = ()
    note: str = ""

    @property
    def applied(self) -> bool:
        return self.scop is not self.original


@dataclass(frozen=True, eq=False)
class _Member:
    """One loop of the original schedule tree: its partial schedule, the schedule of the loops
    (and sequence positions) around it, and per statement below it the iterator it runs
    (position in the statement's iterators; None where the loop is no plain iterator of it)."""

    partial: isl.UnionMap
    prefix: isl.UnionMap
    iterator: dict[str, int | None]

    @cached_property
    def same_iteration(self) -> isl.UnionMap:
        return self.partial.apply_range(self.partial.reverse())

    @cached_property
    def same_prefix(self) -> isl.UnionMap:
        return self.prefix.apply_range(self.prefix.reverse())

    def name(self, scop: Scop) -> str:
        """The loop for people: its iterator and the statements it runs (``i (around S0, S1)``)."""
        names = {scop.statement(s).iterators[d] for s, d in self.iterator.items() if d is not None}
        stmts = ", ".join(s.name for s in scop.statements if s.name in self.iterator)
        return f"{'/'.join(sorted(names)) or '?'} (around {stmts})"


def expand_scalars(scop: Scop) -> ScalarExpansion:
    """The Scop with the local scalars expanded along the loops where that makes the loop
    parallel (see the module docstring); cached on ``scop`` (Scops are immutable), so the
    expansion of one kernel is one Scop object, which its schedules share. Call under
    :data:`~polyopt.islutil.ISL_LOCK`."""
    cached = scop.__dict__.get(_CACHE_ATTRIBUTE)
    if cached is None:
        cached = _expand(scop)
        object.__setattr__(scop, _CACHE_ATTRIBUTE, cached)
    return cached


def _expand(scop: Scop) -> ScalarExpansion:
    """:func:`expand_scalars` uncached: decide on the original loops, rewrite, check."""
    scalars = [a.name for a in scop.arrays.values() if a.local and not a.shape]
    if not scalars:
        return ScalarExpansion(scop, scop)
    deps = dependences(scop)
    pieces = deps.pieces
    candidates = _candidates(scop, deps, pieces, scalars)
    if not candidates:
        return ScalarExpansion(scop, scop)
    web_of = _webs(pieces, candidates, scop)
    along: dict[str, list[_Member]] = {}     # web -> loops to expand it along, outermost first
    renamed: set[str] = set()
    members = _members(scop)
    gained: list[_Member] = []
    for member in members:
        carried = [p for p in pieces if _carries(member, p)]
        if not carried or any(p.array not in candidates for p in carried):
            continue  # parallel already, or sequential for other reasons
        scalars_here = {p.array for p in carried}
        # every web of these scalars written in the loop: renamed but not expanded, it would
        # conflict across iterations where another web's write separated them before
        written = {web_of[r.ref_id] for s in scop.statements if s.name in member.iterator
                   for r in s.writes if r.array in scalars_here}
        if all(_expandable(scop, web, web_of, pieces, member) for web in written):
            for web in sorted(written):
                along.setdefault(web, []).append(member)
            renamed |= scalars_here
            gained.append(member)
    if not renamed:
        return ScalarExpansion(scop, scop)
    expanded, webs = _rewrite(scop, renamed, web_of, along)
    after = dependences(expanded)
    if not _same_flow(deps, after):
        return ScalarExpansion(scop, scop, note="scalar expansion: not applied (the expanded kernel's flow "
                                                "dependences differ from the original's)")
    still = [m.name(scop) for m in gained if any(_carries(m, p) for p in after.pieces)]
    if still:
        return ScalarExpansion(scop, scop, note=f"scalar expansion: not applied (loop(s) {'; '.join(still)} "
                                                "would still carry dependences)")
    loops = tuple(m.name(scop) for m in gained)
    described = "; ".join(f"{w.scalar} -> {w.array}[{', '.join(w.loops)}]" for w in webs if w.loops)
    note = (f"scalar expansion: {described} (renamed per live range: "
            f"{', '.join(sorted(renamed))}), so that loop(s) {'; '.join(loops)} carry no dependence; "
            "expand_scalars=False keeps them scalars")
    return ScalarExpansion(scop, expanded, webs, loops, note)


def _candidates(scop: Scop, deps: Dependences, pieces: list[DependencePiece], scalars: list[str]) -> set[str]:
    """The local scalars whose dependences are exact and whose every read instance has a writer
    in the kernel (its flow dependences cover the read)."""
    covered: dict[str, isl.Set] = {}
    for p in pieces:
        if p.kind == "RAW":
            found = p.relation.range()
            covered[p.sink_ref] = covered[p.sink_ref].union(found) if p.sink_ref in covered else found
    out = set()
    for name in scalars:
        if name in deps.approximated_arrays:
            continue
        reads = [(s, r) for s in scop.statements for r in s.reads if r.array == name]
        if all(r.ref_id in covered and s.domain.intersect_params(scop.context).is_subset(covered[r.ref_id])
               for s, r in reads):
            out.add(name)
    return out


def _webs(pieces: list[DependencePiece], candidates: set[str], scop: Scop) -> dict[str, str]:
    """Reference -> its web (the first reference of the web, in statement order), for the
    references of the candidate scalars: references joined by a flow dependence are one web."""
    refs = [r.ref_id for s in scop.statements for r in s.accesses if r.array in candidates]
    flows = [(p.source_ref, p.sink_ref) for p in pieces if p.kind == "RAW" and p.array in candidates]
    return {ref: web[0] for web in connected_groups(refs, flows) for ref in web}


def _members(scop: Scop) -> list[_Member]:
    """The loops (band members) of the original schedule tree, outer before inner."""
    out: list[_Member] = []

    def visit(node: isl.ScheduleNode) -> None:
        if node.get_type() == isl.schedule_node_type.band:
            prefix = node.get_prefix_schedule_union_map()
            partial = node.band_get_partial_schedule()
            for k in range(node.band_n_member()):
                member = isl.UnionMap.from_union_pw_aff(partial.get_union_pw_aff(k))
                out.append(_Member(member, prefix, _iterators(scop, member)))
                prefix = prefix.flat_range_product(member)
        for k in range(node.n_children()):
            visit(node.child(k))

    visit(scop.schedule.get_root())
    return out


def _iterators(scop: Scop, member: isl.UnionMap) -> dict[str, int | None]:
    """Per statement of a loop: the position of the iterator the loop runs (its schedule is that
    iterator or its negation), or None."""
    out: dict[str, int | None] = {}
    params = ", ".join(scop.params)
    for m in maps_of(member):
        stmt = scop.statement(m.get_tuple_name(isl.dim_type.in_))
        space = f"{stmt.name}[{', '.join(stmt.iterators)}]"
        found = None
        for d, it in enumerate(stmt.iterators):
            for sign in ("", "-"):
                plain = isl.Map(f"[{params}] -> {{ {space} -> [{sign}{it}] }}").intersect_domain(stmt.domain)
                if plain.is_equal(m.intersect_domain(stmt.domain)):
                    found = d
        out[stmt.name] = found
    return out


def _carries(member: _Member, piece: DependencePiece) -> bool:
    """Whether the loop carries the dependence piece: some source and sink run in one iteration
    of the loops around it and in two different iterations of it."""
    inside = member.iterator
    if piece.relation.get_tuple_name(isl.dim_type.in_) not in inside \
            or piece.relation.get_tuple_name(isl.dim_type.out) not in inside:
        return False
    return not piece.relation.intersect(_as_map(member.same_prefix, piece.relation)) \
        .subtract(_as_map(member.same_iteration, piece.relation)).is_empty()


def _as_map(union: isl.UnionMap, like: isl.Map) -> isl.Map:
    """The part of ``union`` in the space of ``like`` (empty where there is none)."""
    return union.extract_map(like.get_space())


def _web_statements(scop: Scop, web: str, web_of: dict[str, str]) -> list[Statement]:
    """The statements with a reference in ``web``, in order."""
    return [s for s in scop.statements if any(web_of.get(r.ref_id) == web for r in s.accesses)]


def _expandable(scop: Scop, web: str, web_of: dict[str, str], pieces: list[DependencePiece], member: _Member) -> bool:
    """Whether ``web`` may be indexed by ``member``'s iterator: the loop runs a plain iterator of
    every statement of the web, none of its flow dependences crosses two iterations of it, and
    its iterator's bounds over the web are affine in the sizes."""
    statements = _web_statements(scop, web, web_of)
    if any(member.iterator.get(s.name) is None for s in statements):
        return False
    same = member.same_iteration
    for p in pieces:
        if p.kind == "RAW" and web_of.get(p.sink_ref) == web and not p.relation.is_subset(_as_map(same, p.relation)):
            return False
    return _bounds(scop, statements, member) is not None


def _bounds(scop: Scop, statements: list[Statement], member: _Member) -> tuple[str, str] | None:
    """(lowest value, extent) of the member's iterator over the statements' instances, as affine
    text in the sizes; None where either is not one affine expression with integer coefficients."""
    params = ", ".join(scop.params)
    values = None
    for s in statements:
        it = s.iterators[member.iterator[s.name]]
        piece = isl.Map(f"[{params}] -> {{ {s.name}[{', '.join(s.iterators)}] -> [{it}] }}") \
            .intersect_domain(s.domain.intersect_params(scop.context)).range()
        values = piece if values is None else values.union(piece)
    values = values.coalesce()
    low, high = values.dim_min(0), values.dim_max(0)
    extent = high.sub(low).add_constant_val(isl.Val.one(low.get_ctx()))
    texts = [_affine_text(f) for f in (low, extent)]
    return None if None in texts else (texts[0], texts[1])


def _affine_text(function: isl.PwAff) -> str | None:
    """Python text of a one-piece affine function of the parameters with integer coefficients."""
    pieces = function.get_pieces()
    if len(pieces) != 1:
        return None
    aff = pieces[0][1]
    if not aff.get_denominator_val().is_one():
        return None
    terms = []
    for k in range(aff.dim(isl.dim_type.param)):
        c = aff.get_coefficient_val(isl.dim_type.param, k).to_python()
        if c:
            name = aff.get_dim_name(isl.dim_type.param, k)
            terms.append(name if c == 1 else f"{c} * {name}")
    constant = aff.get_constant_val().to_python()
    if constant or not terms:
        terms.append(str(constant))
    return " + ".join(terms).replace("+ -", "- ")


def _rewrite(scop: Scop, renamed: set[str], web_of: dict[str, str],
             along: dict[str, list[_Member]]) -> tuple[Scop, tuple[ExpandedWeb, ...]]:
    """The Scop with each web of the ``renamed`` scalars in an array of its own, indexed by the
    iterators of the loops it is expanded ``along``."""
    array_of = {r.ref_id: r.array for s in scop.statements for r in s.accesses}
    taken = set(scop.params) | set(scop.arrays) | {a.name for a in scop.arguments} \
        | {it for s in scop.statements for it in s.iterators}
    arrays = {name: a for name, a in scop.arrays.items() if name not in renamed}
    webs: dict[str, ExpandedWeb] = {}
    layout: dict[str, tuple[str, list[_Member], list[str]]] = {}  # web -> array, loops, lowest values
    for web in dict.fromkeys(w for w in web_of.values() if array_of[w] in renamed):
        scalar = array_of[web]
        name = next(f"{scalar}_{n}" for n in range(len(taken) + 1) if f"{scalar}_{n}" not in taken)
        taken.add(name)
        statements = _web_statements(scop, web, web_of)
        members = along.get(web, [])
        bounds = [_bounds(scop, statements, m) for m in members]
        shape = tuple(extent for _, extent in bounds)
        arrays[name] = Array(name, scop.arrays[scalar].dtype, shape, local=not shape, temporary=bool(shape))
        first = statements[0]
        webs[web] = ExpandedWeb(scalar, name, tuple(s.name for s in statements),
                                tuple(first.iterators[m.iterator[first.name]] for m in members), shape)
        layout[web] = (name, members, [low for low, _ in bounds])
    statements = tuple(_rewrite_statement(scop, s, renamed, web_of, layout) for s in scop.statements)
    return replace(scop, arrays=arrays, statements=statements, origin=scop), tuple(webs.values())


def _rewrite_statement(scop: Scop, stmt: Statement, renamed: set[str], web_of: dict[str, str],
                       layout: dict[str, tuple[str, list[_Member], list[str]]]) -> Statement:
    """``stmt`` with its references to the renamed scalars replaced by their webs' arrays."""
    reads = {r.array: web_of[r.ref_id] for r in stmt.reads if r.array in renamed}
    writes = [web_of[r.ref_id] for r in stmt.writes if r.array in renamed]
    if not reads and not writes:
        return stmt

    def access(web: str, dtype) -> E.Access:
        name, members, lows = layout[web]
        indices = []
        for member, low in zip(members, lows):
            it = E.Var(stmt.iterators[member.iterator[stmt.name]], "iter")
            indices.append(it if low == "0" else E.binary("-", it, extent_expr(low, scop.params)))
        return E.Access(name, tuple(indices), dtype)

    value = E.substitute(stmt.value, lambda n: access(reads[n.array], n.dtype)
                         if isinstance(n, E.Access) and n.array in reads else None)
    target = access(writes[0], stmt.target.dtype) if writes else stmt.target
    return build_statement(stmt.name, stmt.iterators, scop.params, stmt.domain, target, value, stmt.line,
                           stmt.text)


def _same_flow(before: Dependences, after: Dependences) -> bool:
    """Whether two Scops' flow dependences are the same, reference to reference (the expansion
    changed no read's writer) and both exact."""
    return not after.approximated_arrays - before.approximated_arrays \
        and after.tagged_raw.is_equal(before.tagged_raw)
