"""Recognizing Jacobi-style stencils: the Scops that overlapped time tiles can run on the GPU
(:mod:`polyopt.codegen.cuda_stencil`).

A Scop qualifies (:func:`find_stencil`) when

- one outermost time loop encloses every statement: dimension 0 of each domain, the same range
  for all, and each domain is that range times a spatial box independent of it (bounds affine
  in the parameters);
- each statement writes one element of an array of rank ``d`` (1 to 3, the same for all
  written arrays, which have one shape), the subscripts being distinct spatial iterators plus
  constants or constants (fdtd-2d's ``ey[0, j] = fict[t]`` writes row 0): an instance is
  identified by the element ``x`` it writes, and the statement's box is the set of those
  elements;
- every read of a written array is at ``x`` plus a constant offset, and a statement reads the
  array it writes only at offset 0, so a statement's sweep has no dependence between distinct
  instances of one time step (checked with isl on the Scop's dependences, not assumed);
- the original order is: per time step, the statements' sweeps one after another in program
  order (the order relation of the Scop's schedule equals that one's).

Reads of arrays that the loop does not write may have any subscript (they come from global
memory). Some read of a written array has a nonzero offset (otherwise each element evolves on its
own -- a column sum over an outer loop -- and the general mapping runs the outer loop inside
one kernel). The per-step halo (how far a time step's values reach, per dimension and side) comes
from the offsets, and is cross-checked against the spatial distances of every dependence: a
dependence ``dt`` steps apart spans at most ``dt + 1`` steps' reach. Anything else is no
stencil: :func:`find_stencil` returns None.
"""
from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

from polyopt.analysis import expr as E
from polyopt.analysis.deps import dependences
from polyopt.analysis.scop import Scop, Statement
from polyopt.codegen.ast import IslAstTranslator
from polyopt.islutil import maps_of

#: Ranks of the written arrays a stencil may have.
RANKS = (1, 2, 3)
#: Element types the stencil kernels compute in (shared-memory buffers of these).
FLOAT_TYPES = ("f32", "f64")


@dataclass(frozen=True)
class StencilStatement:
    """One statement as a sweep over elements: ``array`` its written array; ``placement`` per
    element dimension the spatial iterator it holds (None: a constant) and the constant added;
    ``box`` per element dimension the inclusive bounds (expressions over the parameters) of the
    elements it writes; ``reads`` the (array, offset) of each read of a written array;
    ``reach`` per dimension the largest (negative, positive) offset magnitudes of those reads."""

    statement: Statement
    array: str
    placement: tuple[tuple[str | None, int], ...]
    box: tuple[tuple[E.Expr, E.Expr], ...]
    reads: tuple[tuple[str, tuple[int, ...]], ...]

    @property
    def name(self) -> str:
        return self.statement.name

    @property
    def time(self) -> str:
        """The statement's own name of the time iterator."""
        return self.statement.iterators[0]

    @property
    def reach(self) -> tuple[tuple[int, int], ...]:
        """Per dimension, how far below and above ``x`` the statement reads written arrays."""
        rank = len(self.placement)
        return tuple((max([0] + [-o[k] for _, o in self.reads]), max([0] + [o[k] for _, o in self.reads]))
                     for k in range(rank))

    def offset_of(self, access: E.Access) -> tuple[int, ...] | None:
        """The offset from ``x`` of the element ``access`` (one of the statement's reads, of an
        array of the written rank) reads, where each subscript is the iterator (or constant) the
        written element has there plus a constant; None otherwise (a transposed read)."""
        if len(access.indices) != len(self.placement):
            return None
        offset = []
        for index, (iterator, constant) in zip(access.indices, self.placement):
            found = _iterator_plus_constant(index)
            if found is None or found[0] != iterator:
                return None
            offset.append(found[1] - constant)
        return tuple(offset)

    def iterator_values(self) -> dict[str, tuple[int, int]]:
        """Per spatial iterator, (element dimension, constant): its value is ``x[dim] - constant``."""
        return {it: (k, c) for k, (it, c) in enumerate(self.placement) if it is not None}


@dataclass(frozen=True)
class Stencil:
    """A recognized stencil (module docstring): the time range (inclusive bounds over the
    parameters), the written arrays (first-written order), their common ``shape`` (extent
    text, as :class:`~polyopt.analysis.scop.Array` has it) and the statements in program
    order."""

    time_bounds: tuple[E.Expr, E.Expr]
    written: tuple[str, ...]
    shape: tuple[str, ...]
    statements: tuple[StencilStatement, ...]

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def step_halo(self) -> tuple[tuple[int, int], ...]:
        """Per dimension, (below, above): how many elements a region's edge values may be wrong
        after one time step when outside the region is unknown -- the sum over the statements of
        their reach on that side (a read at a negative offset carries wrong values upward)."""
        return tuple((sum(s.reach[k][0] for s in self.statements), sum(s.reach[k][1] for s in self.statements))
                     for k in range(self.rank))

    def halo(self, steps: int) -> tuple[tuple[int, int], ...]:
        """Per dimension, (below, above), the halo an output tile needs for ``steps`` time steps."""
        return tuple((steps * low, steps * high) for low, high in self.step_halo)

    def describe(self) -> str:
        return (f"{len(self.statements)} statement(s) per time step over {', '.join(self.written)} "
                f"[{', '.join(self.shape)}], per-step halo {list(self.step_halo)}")


def find_stencil(scop: Scop) -> Stencil | None:
    """The stencil ``scop`` is (module docstring), or None."""
    if not scop.statements or any(a.temporary for a in scop.arrays.values()):
        return None
    time_range = None
    found = []
    for stmt in scop.statements:
        if stmt.domain.dim(isl.dim_type.set) < 1:
            return None
        spatial = stmt.domain.project_out(isl.dim_type.set, 0, 1)
        times = stmt.domain.project_out(isl.dim_type.set, 1, stmt.domain.dim(isl.dim_type.set) - 1) \
            .gist_params(spatial.params())  # (fdtd-2d: S1 runs only where NX >= 2, its t range says so too)
        if time_range is not None and not times.is_equal(time_range):
            return None
        time_range = times
        made = _statement(scop, stmt, times)
        if made is None:
            return None
        found.append(made)
    written = tuple(dict.fromkeys(s.array for s in found))
    shapes = {scop.arrays[a].shape for a in written}
    if len(shapes) != 1 or len(next(iter(shapes))) not in RANKS \
            or any(scop.arrays[a].dtype.name not in FLOAT_TYPES for a in written):
        return None
    staged = []
    for s in found:
        reads = _staged_reads(scop, s, set(written))
        if reads is None or any(a == s.array and any(o) for a, o in reads):
            return None
        staged.append(StencilStatement(s.statement, s.array, s.placement, s.box, reads))
    translator = IslAstTranslator(set(scop.params))
    build = isl.AstBuild.from_context(scop.context.align_params(time_range.get_space()))
    bounds = tuple(translator.expr(build.expr_from_pw_aff(p)) for p in (time_range.dim_min(0), time_range.dim_max(0)))
    stencil = Stencil(bounds, written, next(iter(shapes)), tuple(staged))
    if not any(low or high for low, high in stencil.step_halo):
        return None  # no neighbour read: every element on its own, the general mapping's loops interchange
    if not (runs_in_sweeps(scop, stencil, scop.schedule.get_map()) and _sweeps_parallel(scop, stencil)
            and _halo_covers(scop, stencil)):
        return None
    return stencil


def _statement(scop: Scop, stmt: Statement, times: isl.Set) -> StencilStatement | None:
    """``stmt`` as a sweep (no reads yet), or None: a domain that is no time range times a box,
    or a write that is no element of spatial iterators plus constants."""
    target = stmt.target
    rank = len(target.indices)
    if rank not in RANKS or len(stmt.writes) != 1 or stmt.writes[0].array != target.array:
        return None
    placement = tuple(_iterator_plus_constant(e) for e in target.indices)
    if None in placement:
        return None
    held = [it for it, _ in placement if it is not None]
    if sorted(held) != sorted(stmt.iterators[1:]):  # each spatial iterator once, not the time
        return None
    n = stmt.domain.dim(isl.dim_type.set)
    space = stmt.domain.project_out(isl.dim_type.set, 0, 1)
    product = times.flat_product(space).set_tuple_name(stmt.domain.get_tuple_name())
    if not product.is_equal(stmt.domain) or n != len(stmt.iterators):
        return None
    elements = stmt.writes[0].relation.intersect_domain(stmt.domain).range()
    if not elements.is_box():
        return None
    translator = IslAstTranslator(set(scop.params))
    build = isl.AstBuild.from_context(scop.context.align_params(elements.get_space()))
    box = tuple((translator.expr(build.expr_from_pw_aff(elements.dim_min(k))),
                 translator.expr(build.expr_from_pw_aff(elements.dim_max(k)))) for k in range(rank))
    return StencilStatement(stmt, target.array, placement, box, ())


def _iterator_plus_constant(e: E.Expr) -> tuple[str | None, int] | None:
    """(iterator, constant) for a subscript ``i``, ``i + c``, ``i - c`` or ``c`` (None: a
    constant alone), None for anything else."""
    if isinstance(e, E.Const) and isinstance(e.value, int):
        return None, e.value
    if isinstance(e, E.Var) and e.kind == "iter":
        return e.name, 0
    if isinstance(e, E.Binary) and e.op in ("+", "-"):
        left, right = _iterator_plus_constant(e.lhs), _iterator_plus_constant(e.rhs)
        if left is None or right is None:
            return None
        if e.op == "-":
            right = (right[0], -right[1]) if right[0] is None else None
        if right is None or (left[0] is not None and right[0] is not None):
            return None
        return left[0] or right[0], left[1] + right[1]
    return None


def _staged_reads(scop: Scop, s: StencilStatement, written: set[str]
                  ) -> tuple[tuple[str, tuple[int, ...]], ...] | None:
    """The (array, offset) of each read of a written array by ``s`` (isl: the read as a map
    from the element ``s`` writes is a translation), None where one is not."""
    stmt = s.statement
    to_element = stmt.writes[0].relation.intersect_domain(stmt.domain)
    reads = []
    for ref in stmt.reads:
        if ref.array not in written:
            continue
        moved = to_element.reverse().apply_range(ref.relation).set_tuple_name(isl.dim_type.out, s.array)
        if not moved.is_single_valued():
            return None
        deltas = moved.deltas()
        offset = []
        for k in range(deltas.dim(isl.dim_type.set)):
            low, high = deltas.dim_min(k), deltas.dim_max(k)
            if not (low.is_cst() and high.is_cst() and low.is_equal(high)):
                return None
            offset.append(_constant(low))
        reads.append((ref.array, tuple(offset)))
    return tuple(reads)


def _constant(value: isl.PwAff) -> int:
    """The integer a constant piecewise affine value has."""
    found = []
    value.foreach_piece(lambda _, aff: found.append(aff.get_constant_val().to_python()))
    return found[0]


def _places(scop: Scop, stencil: Stencil) -> isl.UnionMap:
    """``{ S[t, iterators] -> [t, x] }``: each instance to its time and the element it writes."""
    result = isl.UnionMap.empty(scop.context.get_space())
    for s in stencil.statements:
        stmt = s.statement
        coords = [f"{it} + {c}" if it is not None else str(c) for it, c in s.placement]
        text = f"[{', '.join(scop.params)}] -> {{ {stmt.name}[{', '.join(stmt.iterators)}] -> [{s.time}, {', '.join(coords)}] }}"
        result = result.union(isl.UnionMap(text).intersect_domain(isl.UnionSet.from_set(stmt.domain)))
    return result


def runs_in_sweeps(scop: Scop, stencil: Stencil, schedule_map: isl.UnionMap) -> bool:
    """Whether ``schedule_map`` orders the instances as the sweeps do: per time step, each
    statement's sweep (its spatial iterators in loop order) one after another in program order
    (the two order relations are equal)."""
    expected = isl.UnionMap.empty(scop.context.get_space())
    depth = max(len(s.statement.iterators) for s in stencil.statements)
    for k, s in enumerate(stencil.statements):
        stmt = s.statement
        rest = list(stmt.iterators[1:]) + ["0"] * (depth - len(stmt.iterators))
        text = (f"[{', '.join(scop.params)}] -> {{ {stmt.name}[{', '.join(stmt.iterators)}] -> "
                f"[{s.time}, {k}{''.join(', ' + r for r in rest)}] }}")
        expected = expected.union(isl.UnionMap(text))
    domain = scop.domain
    expected = expected.intersect_domain(domain)
    given = schedule_map.intersect_domain(domain)
    return given.lex_lt_union_map(given).is_equal(expected.lex_lt_union_map(expected))


def _sweeps_parallel(scop: Scop, stencil: Stencil) -> bool:
    """Whether no dependence joins two distinct instances of one statement in one time step
    (computed with isl on the Scop's dependences: the instances of a sweep may run at once)."""
    deps = dependences(scop).all
    for s in stencil.statements:
        name, n = s.statement.name, len(s.statement.iterators)
        same_time = isl.Map(f"{{ {name}[{', '.join(f'a{k}' for k in range(n))}] -> "
                            f"{name}[{', '.join(['a0'] + [f'b{k}' for k in range(1, n)])}] }}")
        identity = isl.Map(f"{{ {name}[{', '.join(f'a{k}' for k in range(n))}] -> "
                           f"{name}[{', '.join(f'a{k}' for k in range(n))}] }}")
        inside = deps.intersect(isl.UnionMap.from_map(same_time.subtract(identity)))
        if not inside.intersect_params(scop.context).is_empty():
            return False
    return True


def _halo_covers(scop: Scop, stencil: Stencil) -> bool:
    """Whether every flow dependence's spatial distance lies within what the per-step halo
    allows: a sink reading at offset ``o`` is ``-o`` from its source, so ``-(dt + 1) * above <=
    dx[k] <= (dt + 1) * below`` (``dt`` time steps apart; a direct flow spans one read, the
    factor only loosens the bound)."""
    places = _places(scop, stencil)
    moved = places.reverse().apply_range(dependences(scop).raw).apply_range(places)
    names = [f"d{k}" for k in range(stencil.rank)]
    limits = " and ".join(f"-(dt + 1) * {above} <= {d} <= (dt + 1) * {below}"
                          for d, (below, above) in zip(names, stencil.step_halo))
    allowed = isl.Set(f"[{', '.join(scop.params)}] -> {{ [dt, {', '.join(names)}] : dt >= 0 and {limits} }}")
    for piece in maps_of(moved):
        if not piece.deltas().subtract(allowed.align_params(piece.get_space())).is_empty():
            return False
    return True


__all__ = ["FLOAT_TYPES", "RANKS", "Stencil", "StencilStatement", "find_stencil", "runs_in_sweeps"]
