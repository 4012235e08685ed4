"""Sum reductions: which loops may split their iterations over several threads.

A statement ``X[f] = X[f] + e`` (or ``e + X[f]``, or ``X[f] - e``, which adds ``-e``) whose ``e``
does not read ``X`` adds a term to one element per instance. Instances of such statements that update the same element of the same
array commute up to the rounding of floating-point sums: a loop whose iterations depend on each
other only through them may run its iterations on several threads, each summing its own terms
into a partial sum, the partial sums added at the end (what the GPU mapping's ``gpu_reduce``
mark permits, :mod:`polyopt.codegen.gpu_reduction`). Any other dependence between two
iterations -- a term that reads what an earlier iteration wrote, a write that is not such an
update -- keeps the loop sequential.

The verifier (:func:`polyopt.analysis.verify.verify`) checks every ``gpu_reduce`` mark so: the
dependences the marked loop carries, less :func:`same_element_updates` of the statements below
it, must be none; the mapping places the mark where that holds and some statement below is a
sum.
"""
from __future__ import annotations

import islpy as isl

from polyopt.analysis import expr as E
from polyopt.analysis.scop import Scop, Statement


def sum_term(target: E.Expr, value: E.Expr) -> E.Expr | None:
    """``e`` where ``value`` is ``target + e`` or ``e + target``, ``-e`` where it is ``target - e``
    (IEEE subtraction is the addition of the negation, exactly), else None."""
    if isinstance(value, E.Binary) and value.op == "-" and value.lhs == target:
        return E.negate(value.rhs)
    if not (isinstance(value, E.Binary) and value.op == "+"):
        return None
    if value.lhs == target:
        return value.rhs
    if value.rhs == target:
        return value.lhs
    return None


def accumulated_array(stmt: Statement) -> str | None:
    """The array ``stmt`` adds a term to (``X[f] = X[f] + e`` or ``X[f] = e + X[f]``, ``e`` not
    reading ``X``, everything of one floating-point type), else None."""
    target, value = stmt.target, stmt.value
    term = sum_term(target, value)
    if term is None or not (target.dtype.is_float and value.dtype == target.dtype and len(stmt.writes) == 1):
        return None
    if any(isinstance(n, E.Access) and n.array == target.array for n in E.walk(term)):
        return None
    return target.array


def same_element_updates(scop: Scop, statements) -> isl.UnionMap:
    """Pairs of instances of the reduction statements among ``statements`` (names) that update
    the same element of the same array."""
    by_array: dict[str, list[isl.Map]] = {}
    for name in sorted(statements):
        stmt = scop.statement(name)
        array = accumulated_array(stmt)
        if array is not None:
            by_array.setdefault(array, []).append(stmt.writes[0].relation)
    pairs = isl.UnionMap.empty(scop.context.get_space())
    for writes in by_array.values():
        for a in writes:
            for b in writes:
                pairs = pairs.union(isl.UnionMap.from_map(a).apply_range(isl.UnionMap.from_map(b).reverse()))
    return pairs

