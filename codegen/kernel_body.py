"""Per-thread kernel bodies: statements made into assignments, register tiling (unroll-and-jam
of the thread coordinates) and promotion of accumulators to registers.

Register tiling is legal because the thread coordinates carry no dependence: the work of
different coordinates may interleave in any order, so one thread can run the bodies of several
coordinates in lockstep when their control flow is the same. Promotion keeps an array element
that a loop updates at a loop-invariant index in a register (load before, store after), when
every access of that array inside the loop is to one of the promoted elements
(:mod:`polyopt.codegen.promotion` decides which).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import product

from polyopt.analysis import expr as E
from polyopt.codegen.loop_nodes import Block, For, If, Node, Run, children
from polyopt.codegen.ast import instantiate
from polyopt.codegen.promotion import elements_to_promote
from polyopt.analysis.scop import Scop
from polyopt.types import i64


@dataclass(frozen=True)
class Assign:
    """``target = value`` for one statement instance (``statement`` names it in comments)."""

    target: E.Expr
    value: E.Expr
    statement: str


@dataclass(frozen=True)
class Promote:
    """``loop`` with array elements kept in registers: ``registers`` pairs a register name with
    the element it holds (loaded before the loop, stored back after it; only if it runs)."""

    registers: tuple[tuple[str, E.Access], ...]
    loop: For


BodyNode = For | If | Block | Assign | Promote


def assignments(scop: Scop, node: Node) -> BodyNode:
    """``node`` with each statement instance replaced by its assignment."""
    if isinstance(node, Run):
        target, value = instantiate(scop.statement(node.statement), node.args)
        return Assign(target, value, node.statement)
    if isinstance(node, For):
        return replace(node, body=assignments(scop, node.body))
    if isinstance(node, If):
        otherwise = None if node.otherwise is None else assignments(scop, node.otherwise)
        return If(node.cond, assignments(scop, node.then), otherwise)
    return Block(tuple(assignments(scop, child) for child in node.body))


def walk(node: BodyNode):
    """``node`` and every node below it, parents first (a promoted loop is below its Promote)."""
    yield node
    for child in (node.loop,) if isinstance(node, Promote) else children(node):
        yield from walk(child)


def control_expressions(node: BodyNode):
    """The loop bounds and conditions of ``node`` (what its control flow depends on)."""
    for n in walk(node):
        if isinstance(n, For):
            yield n.init
            yield n.cond
        elif isinstance(n, If):
            yield n.cond


def has_loop(node: BodyNode) -> bool:
    return any(isinstance(n, (For, Promote)) for n in walk(node))


def offset(coords: tuple[str, ...], offsets: tuple[int, ...]):
    """A substitution moving each coordinate ``coords[d]`` by ``offsets[d]``."""
    def shift(e: E.Expr):
        if isinstance(e, E.Var) and e.name in coords:
            k = offsets[coords.index(e.name)]
            return E.Binary("+", e, E.Const(k, i64), i64) if k else e
        return None
    return shift


def jam(node: BodyNode, coords: tuple[str, ...], offsets: tuple[tuple[int, ...], ...]
        ) -> BodyNode:
    """Unroll-and-jam: every assignment repeated for each combination of the coordinate
    offsets (``offsets[d]`` for coordinate ``d``); the control flow must not depend on the
    coordinates (see :func:`control_expressions`)."""
    return _jam(node, [offset(coords, shift) for shift in product(*offsets)])


def _jam(node: BodyNode, shifts) -> BodyNode:
    if isinstance(node, Assign):
        return Block(tuple(Assign(E.substitute(node.target, s), E.substitute(node.value, s),
                                  node.statement) for s in shifts))
    if isinstance(node, For):
        return replace(node, body=_jam(node.body, shifts))
    if isinstance(node, If):
        otherwise = None if node.otherwise is None else _jam(node.otherwise, shifts)
        return If(node.cond, _jam(node.then, shifts), otherwise)
    return Block(tuple(_jam(child, shifts) for child in node.body))


# ----- accumulator promotion ---------------------------------------------------------------------

def promote_accumulators(node: BodyNode, prefix: str = "_r", keep: frozenset[str] = frozenset()
                         ) -> BodyNode:
    """Promote, in every innermost-possible loop, the elements it updates at loop-invariant
    indices (see the module docstring), except elements of the arrays in ``keep``."""
    counter = [0]

    def visit(n: BodyNode) -> BodyNode:
        if isinstance(n, For):
            n = replace(n, body=visit(n.body))
            return _promote(n, prefix, counter, keep) if not isinstance(n.body, Promote) else n
        if isinstance(n, If):
            return If(n.cond, visit(n.then), None if n.otherwise is None else visit(n.otherwise))
        if isinstance(n, Block):
            return Block(tuple(visit(c) for c in n.body))
        return n

    return visit(node)


def _promote(loop: For, prefix: str, counter: list[int], keep: frozenset[str]) -> BodyNode:
    direct = loop.body.body if isinstance(loop.body, Block) else (loop.body,)
    targets = [child.target for child in direct if isinstance(child, Assign)
               and isinstance(child.target, E.Access) and child.target.array not in keep]
    chosen = elements_to_promote(targets, _accesses(loop.body), _loop_vars(loop))
    if not chosen:
        return loop
    registers = []
    for element in chosen:
        registers.append((f"{prefix}{counter[0]}", element))
        counter[0] += 1
    table = {element: E.Var(name, "register", element.dtype) for name, element in registers}
    body = rewrite(loop.body, lambda e: table.get(e) if isinstance(e, E.Access) else None)
    return Promote(tuple(registers), replace(loop, body=body))


def promoted_arrays(node: BodyNode) -> set[str]:
    """The arrays some of whose elements ``node`` keeps in registers."""
    return {element.array for n in walk(node) if isinstance(n, Promote) for _, element in n.registers}


def _loop_vars(node: BodyNode) -> set[str]:
    return {n.var for n in walk(node) if isinstance(n, For)}


def _accesses(node: BodyNode):
    exprs = list(control_expressions(node)) + list(_assigned(node))
    for e in exprs:
        for n in E.walk(e):
            if isinstance(n, E.Access):
                yield n


def _assigned(node: BodyNode):
    """The targets and values of every assignment, and the elements held in registers."""
    for n in walk(node):
        if isinstance(n, Assign):
            yield n.target
            yield n.value
        elif isinstance(n, Promote):
            for _, element in n.registers:
                yield element


def rewrite(node: BodyNode, replace_expr) -> BodyNode:
    """``node`` with every expression rewritten by ``E.substitute(e, replace_expr)``."""
    sub = lambda e: E.substitute(e, replace_expr)  # noqa: E731
    if isinstance(node, Assign):
        return Assign(sub(node.target), sub(node.value), node.statement)
    if isinstance(node, For):
        return For(node.var, sub(node.init), sub(node.cond), node.step,
                   rewrite(node.body, replace_expr), node.parallel)
    if isinstance(node, If):
        otherwise = None if node.otherwise is None else rewrite(node.otherwise, replace_expr)
        return If(sub(node.cond), rewrite(node.then, replace_expr), otherwise)
    if isinstance(node, Block):
        return Block(tuple(rewrite(c, replace_expr) for c in node.body))
    return Promote(tuple((name, sub(element)) for name, element in node.registers),
                   rewrite(node.loop, replace_expr))
