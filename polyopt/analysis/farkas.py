"""Affine Farkas lemma on isl: the scheduling constraints shared by the Pluto and Feautrier
schedulers.

For a dependence polyhedron P and an affine form f whose coefficients are linear in the
scheduler's unknowns, ``nonnegative_on(P, ...)`` gives the linear constraints on the unknowns
under which f(x) >= 0 holds at every point x of P. isl computes the dual cone of P once per
dependence piece (``coefficients``), which eliminates the Farkas multipliers; substituting the
unknowns' forms into the cone's constraints is a small integer matrix product done here in
Python.

Why not intersect isl sets edge by edge: every isl intersection re-simplifies the whole growing
system (quadratic in the number of dependence pieces; seconds on deriche or adi). The
constraints are gathered in :class:`Constraints` instead -- normalized, deduplicated, the
weaker of two parallel inequalities dropped -- and handed to isl once per ILP.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from math import gcd
from typing import Mapping, Sequence

import islpy as isl

from polyopt.analysis.components import connected_groups
from polyopt.analysis.dual_cone import coefficients
from polyopt.islutil import coalesced

#: An affine form over the unknowns: unknown name -> integer coefficient; the key 1 holds the
#: constant term (islpy's convention for ``Constraint.ineq_from_names``).
Form = Mapping["str | int", int]


def linear(*terms: tuple[int, Form]) -> dict:
    """The form sum(scale * form) over ``terms``, with zero coefficients dropped."""
    result: dict = {}
    for scale, form in terms:
        for name, value in form.items():
            result[name] = result.get(name, 0) + scale * value
    return {name: value for name, value in result.items() if value}


def var(name: str) -> dict:
    """The form of one unknown."""
    return {name: 1}


@dataclass(frozen=True)
class Unknowns:
    """The ordered integer unknowns of one scheduling ILP; lexmin minimizes them in this order."""

    names: tuple[str, ...]

    @property
    def space(self) -> isl.Space:
        return _space(len(self.names))

    def basic_set(self, constraints: "Constraints") -> isl.BasicSet:
        """The unknown values satisfying ``constraints`` (one isl set, built once)."""
        return constraints.basic_set(self)

    def lexmin(self, feasible: isl.BasicSet | isl.Set) -> dict[str, int] | None:
        """The lexicographically smallest integer assignment (in ``names`` order), or None."""
        if feasible.is_empty():
            return None
        minimum = feasible.lexmin()
        if minimum.is_empty():
            return None
        point = minimum.sample_point()
        return {name: point.get_coordinate_val(isl.dim_type.set, k).to_python()
                for k, name in enumerate(self.names)}


@lru_cache(maxsize=256)
def _space(dimension: int) -> isl.Space:
    return isl.Space.set_alloc(isl.DEFAULT_CONTEXT, 0, dimension)


@dataclass
class Constraints:
    """A growing conjunction of linear constraints ``form >= 0`` / ``form == 0`` on unknowns.

    Rows are kept normalized (coefficients divided by their gcd, inequality constants rounded
    down, which is exact for integer unknowns); of two inequalities with the same coefficients
    only the tighter one is kept. ``infeasible`` records a constant row that can never hold.
    Rows keep their insertion order (dicts, not sets): the isl set, and so the schedule and the
    generated code, must not depend on Python's string hashing.
    """

    inequalities: dict = field(default_factory=dict)   # coefficient tuple -> constant
    equalities: dict = field(default_factory=dict)     # (coefficient tuple, constant) -> None
    infeasible: bool = False

    def _tighten(self, key: tuple, bound: int) -> None:
        if key not in self.inequalities or bound < self.inequalities[key]:
            self.inequalities[key] = bound

    def nonnegative(self, form: Form) -> "Constraints":
        coeffs, constant = _split(form)
        if not coeffs:
            self.infeasible |= constant < 0
            return self
        g = _gcd(coeffs)
        key = tuple((name, value // g) for name, value in coeffs)
        self._tighten(key, constant // g)
        return self

    def equal(self, form: Form) -> "Constraints":
        coeffs, constant = _split(form)
        if not coeffs:
            self.infeasible |= constant != 0
            return self
        g = _gcd(coeffs)
        if constant % g:
            self.infeasible = True
            return self
        sign = 1 if coeffs[0][1] > 0 else -1
        self.equalities[tuple((n, sign * v // g) for n, v in coeffs), sign * constant // g] = None
        return self

    def between(self, name: str, low: int, high: int) -> "Constraints":
        """low <= name <= high."""
        self.nonnegative({name: 1, 1: -low})
        return self.nonnegative({name: -1, 1: high})

    def extend(self, other: "Constraints") -> "Constraints":
        for key, bound in other.inequalities.items():
            self._tighten(key, bound)
        self.equalities.update(other.equalities)
        self.infeasible |= other.infeasible
        return self

    def copy(self) -> "Constraints":
        return Constraints(dict(self.inequalities), dict(self.equalities), self.infeasible)

    def basic_set(self, unknowns: Unknowns) -> isl.BasicSet:
        """The isl set of the unknowns satisfying every row.

        Built from isl's PolyLib matrix format: isl reads the rows directly and simplifies once
        (its set-expression parser intersects constraint by constraint, 30x slower here). The set
        dimensions stay unnamed (naming them one by one copies the set each time); they are
        ``unknowns.names`` in order."""
        if self.infeasible:
            return isl.BasicSet.empty(unknowns.space)
        column = {name: k for k, name in enumerate(unknowns.names)}
        width = len(unknowns.names)
        lines = [f"{len(self.inequalities) + len(self.equalities)} {width + 2}"]
        rows = [(1, coeffs, constant) for coeffs, constant in self.inequalities.items()]
        rows += [(0, coeffs, constant) for coeffs, constant in self.equalities]
        for kind, coeffs, constant in rows:
            row = [0] * width
            for name, value in coeffs:
                row[column[name]] = value
            lines.append(f"{kind} {' '.join(map(str, row))} {constant}")
        return isl.BasicSet.read_from_str(isl.DEFAULT_CONTEXT, "\n".join(lines))


def _split(form: Form) -> tuple[list[tuple[str, int]], int]:
    """(sorted non-zero coefficients, constant) of a form."""
    coeffs = sorted((name, value) for name, value in form.items() if name != 1 and value)
    return coeffs, form.get(1, 0)


def _gcd(coeffs: list[tuple[str, int]]) -> int:
    g = 0
    for _, value in coeffs:
        g = gcd(g, value)
    return g


# ----- dual cones ---------------------------------------------------------------------------------

@lru_cache(maxsize=4096)
def _dual_cone_rows(relation_text: str) -> tuple[tuple[bool, int, tuple[int, ...]], ...]:
    """Rows (is_equality, constant, coefficients) of the flattened coefficient set
    { [cst, params..., in..., out...] : form >= 0 on P } of the dependence piece P.

    Existentially quantified variables (strides, modulo conditions) are projected out
    rationally: the result may be stricter than needed, never unsound. The equalities that
    hold on every *integer* point are made explicit first (isl's integer affine hull): a
    projection drops the congruences that imply them (``2i = N - 2`` coalesced into
    ``N - 5 <= 2i <= N - 2`` with ``i``, ``N`` even and ``N + 2`` a multiple of 4 would
    rationally widen to an interval, and a reversed stride-2 nest lost every hyperplane).
    isl's dual cone is rational; its rows are read here as integer constraints on integer
    unknowns.

    Where P is a product (its source and sink dimensions fall into groups that no constraint
    links, only the parameters do, as between two unrelated loop nests), the cone is the sum of
    the groups' cones (:func:`product_cone`); isl's ``coefficients`` of the whole product took
    150 s on a six-dimensional one that way costs 5 s."""
    wrapped = isl.BasicMap(relation_text).detect_equalities().remove_divs().wrap()
    cone = (product_cone(wrapped) or coefficients(wrapped)).flatten()
    n = cone.dim(isl.dim_type.set)
    rows = []
    for constraint in cone.get_constraints():
        rows.append((constraint.is_equality(), constraint.get_constant_val().to_python(),
                     tuple(constraint.get_coefficient_val(isl.dim_type.set, k).to_python() for k in range(n))))
    return tuple(rows)


def product_cone(points: isl.BasicSet) -> isl.BasicSet | None:
    """The dual cone of ``points`` (``coefficients``) as the sum of its factors' cones, or None
    where ``points`` has one factor.

    The factors are the groups of set dimensions that the constraints link (parameters link
    nothing); each factor's constraints alone bound a cylinder over the others' dimensions, and
    ``points`` is their intersection, so its dual cone is the Minkowski sum of the cylinders'
    cones (in which the other dimensions' coefficients are 0). isl's sum quantifies the split of
    the constant's and the parameters' coefficients existentially; ``remove_divs`` eliminates
    them the rational way (Fourier-Motzkin), which is exact for these rational cones."""
    n = points.dim(isl.dim_type.set)
    constraints = points.get_constraints()
    used = [frozenset(k for k in range(n) if not c.get_coefficient_val(isl.dim_type.set, k).is_zero())
            for c in constraints]
    factors = connected_groups(range(n), [(min(dims), k) for dims in used for k in dims])
    if len(factors) < 2:
        return None
    total = None
    for factor in map(set, factors):
        cylinder = isl.BasicSet.universe(points.get_space())
        for constraint, dims in zip(constraints, used):
            if dims <= factor:
                cylinder = cylinder.add_constraint(constraint)
        cone = isl.Set.from_basic_set(coefficients(cylinder))
        total = cone if total is None else total.sum(cone)
    (cone,) = total.get_basic_sets()
    return cone.remove_divs()


def clear_cache() -> None:
    """Forget the dual cones computed so far (scheduling-time benchmarks start cold)."""
    _dual_cone_rows.cache_clear()


def nonnegative_on(relation: isl.BasicMap, constant: Form, params: Mapping[str, Form],
                   source: Sequence[Form], sink: Sequence[Form]) -> Constraints:
    """Constraints on the unknowns making ``constant + params.p + source.s + sink.t >= 0`` hold on
    every point of ``relation``.

    Each coefficient is a form over the unknowns; ``params`` maps parameter names to their
    coefficient (missing ones are 0), ``source``/``sink`` give one per input/output dimension.
    """
    space = relation.get_space()
    param_names = [space.get_dim_name(isl.dim_type.param, k) for k in range(space.dim(isl.dim_type.param))]
    positions = [constant] + [params.get(p, {}) for p in param_names] + list(source) + list(sink)
    result = Constraints()
    for is_equality, cone_constant, coeffs in _dual_cone_rows(str(relation)):
        form = linear((cone_constant, {1: 1}), *((c, positions[k]) for k, c in enumerate(coeffs) if c))
        if is_equality:
            result.equal(form)
        else:
            result.nonnegative(form)
    return result


def basic_maps(relation: isl.UnionMap) -> list[isl.BasicMap]:
    """Every basic map (convex piece) of a union map, coalesced first."""
    pieces: list[isl.BasicMap] = []
    coalesced(relation).foreach_map(lambda m: m.foreach_basic_map(pieces.append))
    return [p for p in pieces if not p.is_empty()]
