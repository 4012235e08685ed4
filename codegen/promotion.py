"""Which array elements a loop may keep in registers (scalar promotion), for every backend.

An element that a loop updates at a loop-invariant index can live in a register for the whole
loop: loaded before it, stored back after it. That is legal when every access of the array inside
the loop is to one of the promoted elements, and the promoted elements are provably different
from each other -- then no access inside the loop reaches them through another name. Subscripts
that differ by a non-zero constant in some dimension are different elements, and, the accesses
being in bounds, different addresses: the fact LLVM cannot derive for rows of an array whose row
length is a parameter (``C[i][k]`` and ``C[i + 1][k]`` are ``N`` elements apart, and ``N`` might
be 0 as far as LLVM knows), so without it a register tile of several rows keeps its accumulators
in memory.
"""
from __future__ import annotations

from typing import Iterable

from polyopt.analysis import expr as E


def elements_to_promote(targets: Iterable[E.Access], accesses: Iterable[E.Access],
                        loop_vars: set[str]) -> list[E.Access]:
    """The elements of ``targets`` (the targets of the assignments run in every iteration of the
    loop) to keep in registers, given every access inside the loop (``accesses``: targets, reads,
    and accesses in conditions) and the loop's variables (its own and those of loops inside it)."""
    candidates: dict[str, list[E.Access]] = {}
    for target in targets:
        if target.indices and not mentions(target.indices, loop_vars):
            found = candidates.setdefault(target.array, [])
            if target not in found:
                found.append(target)
    accesses = list(accesses)
    chosen: list[E.Access] = []
    for array, elements in candidates.items():
        others = [a for a in accesses if a.array == array and a not in elements]
        if not others and _pairwise_distinct(elements):
            chosen += elements
    return chosen


def mentions(exprs, names: set[str]) -> bool:
    """Whether any expression in ``exprs`` reads a variable in ``names``."""
    return any(isinstance(n, E.Var) and n.name in names for e in exprs for n in E.walk(e))


def linear(e: E.Expr) -> dict | None:
    """``e`` as {variable: coefficient, 1: constant} when it is affine in plain variables."""
    if isinstance(e, E.Const) and not e.dtype.is_float:
        return {1: int(e.value)}
    if isinstance(e, E.Var):
        return {e.name: 1}
    if isinstance(e, E.Binary) and e.op in ("+", "-", "*"):
        a, b = linear(e.lhs), linear(e.rhs)
        if a is None or b is None:
            return None
        if e.op == "*":
            if set(a) == {1}:
                a, b = b, a
            if set(b) != {1}:
                return None
            return {k: v * b[1] for k, v in a.items()}
        sign = 1 if e.op == "+" else -1
        out = dict(a)
        for k, v in b.items():
            out[k] = out.get(k, 0) + sign * v
        return out
    return None


def _pairwise_distinct(elements: list[E.Access]) -> bool:
    """Whether the elements are provably different: in some dimension their affine subscripts
    differ by a non-zero constant."""
    for k, a in enumerate(elements):
        for b in elements[k + 1:]:
            if not any(_constant_difference(x, y) for x, y in zip(a.indices, b.indices)):
                return False
    return True


def _constant_difference(x: E.Expr, y: E.Expr) -> bool:
    a, b = linear(x), linear(y)
    if a is None or b is None:
        return False
    diff = {k: a.get(k, 0) - b.get(k, 0) for k in set(a) | set(b)}
    return all(v == 0 for k, v in diff.items() if k != 1) and diff.get(1, 0) != 0


__all__ = ["elements_to_promote", "linear", "mentions"]
