"""Affine Farkas lemma on isl: the scheduling constraints shared by the Pluto and Feautrier
schedulers.

For a dependence polyhedron P and an affine form f whose coefficients are linear in the
scheduler's unknowns, ``nonnegative_on(P, form)`` is the set of unknown values for which
f(x) >= 0 holds at every point x of P. isl computes the dual cone of P (``coefficients``), which
eliminates the Farkas multipliers; a preimage maps it into the space of the unknowns.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import islpy as isl


@dataclass(frozen=True)
class Unknowns:
    """The ordered integer unknowns of one scheduling ILP; lexmin minimizes them in this order."""

    names: tuple[str, ...]

    @property
    def tuple_text(self) -> str:
        return f"[{', '.join(self.names)}]"

    def set(self, constraints: str) -> isl.BasicSet:
        """The unknowns satisfying ``constraints`` (isl syntax over the unknown names)."""
        return isl.BasicSet(f"{{ {self.tuple_text} : {constraints or 'true'} }}")

    def universe(self) -> isl.BasicSet:
        return self.set("")

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


def _integral(rational: isl.BasicSet) -> isl.BasicSet:
    """The same constraints, read as integer constraints (isl's dual cone is rational)."""
    result = isl.BasicSet.universe(rational.get_space())
    for constraint in rational.get_constraints():
        result = result.add_constraint(constraint)
    return result


@lru_cache(maxsize=4096)
def _dual_cone(relation_text: str) -> isl.BasicSet:
    """Flattened coefficient set { [cst, params..., in..., out...] : form >= 0 on P } of P.

    Existentially quantified variables (strides, modulo conditions) are projected out
    rationally first: the result may be stricter than needed, never unsound."""
    return _integral(isl.BasicMap(relation_text).remove_divs().wrap().coefficients().flatten())


def nonnegative_on(relation: isl.BasicMap, unknowns: Unknowns, constant: str, params: dict[str, str],
                   source: list[str], sink: list[str]) -> isl.BasicSet:
    """Unknown values making ``constant + params.p + source.s + sink.t >= 0`` on ``relation``.

    Each coefficient is an affine expression (isl text) of the unknowns; ``params`` maps
    parameter names to their coefficient (missing ones are 0), ``source``/``sink`` give one per
    input/output dimension of ``relation``.
    """
    space = relation.get_space()
    param_names = [space.get_dim_name(isl.dim_type.param, k) for k in range(space.dim(isl.dim_type.param))]
    positions = [constant] + [params.get(p, "0") for p in param_names] + list(source) + list(sink)
    return _dual_cone(str(relation)).preimage_multi_aff(_substitution(unknowns, tuple(positions)))


@lru_cache(maxsize=4096)
def _substitution(unknowns: Unknowns, positions: tuple[str, ...]) -> isl.MultiAff:
    """The map from the unknowns to the dual cone's coordinates (shared by all edges of a pair)."""
    target = ", ".join(f"({p})" for p in positions)
    return isl.MultiAff(f"{{ {unknowns.tuple_text} -> [{target}] }}")


def basic_maps(relation: isl.UnionMap) -> list[isl.BasicMap]:
    """Every basic map (convex piece) of a union map, coalesced first."""
    pieces: list[isl.BasicMap] = []
    relation.coalesce().foreach_map(lambda m: m.foreach_basic_map(pieces.append))
    return [p for p in pieces if not p.is_empty()]
