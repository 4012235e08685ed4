"""The loop-AST check at fixed sizes, by running the loops.

Where the symbolic check (:mod:`polyopt.codegen.ast_check`) needs more isl operations than a
compile can afford for all sizes at once (deeply tiled stencils, tiles of fused and shifted
nests), the loops are run here at small sizes -- their bounds and conditions only, no statement
bodies -- and every instance they run is held against what isl enumerates at the same sizes:
the domain (each instance exactly once, nothing else) and the dependences (source before sink,
no dependence between two iterations of a loop marked parallel). Fixing the sizes makes isl's
side cheap; running the loops costs a Python step per instance and loop iteration, so the sizes
are taken smallest first until :data:`INSTANCE_BUDGET` instances, :data:`STEP_BUDGET` loop
iterations or :data:`PAIR_BUDGET` dependence pairs are spent. isl's dropped instances showed at
sizes 5 to 15 on every nest found so far.
"""
from __future__ import annotations

import operator
from itertools import zip_longest
from typing import Callable

import islpy as isl

from polyopt.analysis import expr as E
from polyopt.analysis.deps import Dependences
from polyopt.analysis.evaluate import BINARY_OPERATORS, evaluate
from polyopt.analysis.scop import Scop
from polyopt.codegen.loop_nodes import Block, For, If, Node, Run
from polyopt.errors import LoopTranslationError
from polyopt.islutil import fix_params, maps_of

#: The size values tried, in order: every size parameter at each value, then (with several
#: parameters) each one at each value with the others at :data:`OTHER_SIZE`.
SIZES = range(0, 18)
OTHER_SIZE = 9
#: Statement instances the loops may run over all sizes checked (a Python step each).
INSTANCE_BUDGET = 50_000
#: Dependence pairs compared over all sizes checked.
PAIR_BUDGET = 100_000
#: Loop iterations the loops may run over all sizes checked (a Python step each): the tile
#: loops of a tiled, fused and shifted random nest stepped through millions of iterations that
#: run no instance, for a check of over a minute within the instance budget.
STEP_BUDGET = 150_000


class _Spent(Exception):
    """A budget ran out at the current size."""


def check_at_sizes(scop: Scop, loops: Node, deps: Dependences) -> list[dict[str, int]]:
    """Raise :class:`~polyopt.errors.LoopTranslationError` where ``loops``, run at one of the
    sizes of :data:`SIZES`, misses an instance of ``scop``'s domain, runs one twice or one
    outside it, runs a dependence's sink before its source, or runs the two ends of a
    dependence in different iterations of a parallel loop. Returns the sizes checked (within
    the budgets)."""
    checked: list[dict[str, int]] = []
    budget = {"instances": INSTANCE_BUDGET, "steps": STEP_BUDGET, "pairs": PAIR_BUDGET}
    compiled: dict[int, Callable[[dict], int]] = {}  # the loops' expressions, by id (:func:`_run`)
    for point in _points(scop):
        context = fix_params(scop.context, point)
        if context.is_empty():
            continue
        try:
            _check_at(scop, loops, deps, point, context, budget, compiled)
        except _Spent:
            break
        checked.append(point)
    return checked


def _points(scop: Scop) -> list[dict[str, int]]:
    points = [{p: v for p in scop.params} for v in SIZES]
    if len(scop.params) > 1:
        points += [{**{q: OTHER_SIZE for q in scop.params}, p: v} for p in scop.params for v in SIZES]
    unique = {tuple(sorted(p.items())): p for p in points}
    return list(unique.values())


def _check_at(scop: Scop, loops: Node, deps: Dependences, point: dict[str, int], context: isl.Set,
              budget: dict[str, int], compiled: dict[int, Callable[[dict], int]]) -> None:
    times = _run(loops, point, budget, compiled)
    wanted = {(stmt.name, coords) for stmt in scop.statements
              for coords in _points_of(stmt.domain.intersect_params(context), budget, "instances")}
    for problem, instances in (("never runs", wanted - times.keys()),
                               ("is not in the domain but runs", times.keys() - wanted)):
        if instances:
            name, coords = min(instances)
            raise LoopTranslationError(name, instance_text(name, coords), point, problem)
    for piece in maps_of(deps.all.intersect_params(context)):
        source_name, sink_name = piece.get_tuple_name(isl.dim_type.in_), piece.get_tuple_name(isl.dim_type.out)
        n_in = piece.dim(isl.dim_type.in_)
        for coords in _points_of(piece.wrap(), budget, "pairs"):
            source, sink = (source_name, coords[:n_in]), (sink_name, coords[n_in:])
            (before, parallel), (after, _) = times[source], times[sink]
            _ordered(before, after, parallel, source, sink, point)


def _ordered(before: tuple, after: tuple, parallel: dict[int, str], source: tuple, sink: tuple,
             point: dict[str, int]) -> None:
    """Raise unless time ``before`` (of instance ``source``: statement name, coordinates)
    precedes ``after`` (of ``sink``) at a position that is not a parallel loop (``parallel``:
    position -> loop variable of the parallel loops around the source). The instances' texts
    are made only for the error: this runs for every dependence pair checked."""
    for position, (a, b) in enumerate(zip_longest(before, after, fillvalue=0)):
        if a == b:
            continue
        if a > b:
            break
        if position in parallel:
            raise LoopTranslationError(sink[0], instance_text(*sink), point, f"runs in another iteration of the "
                                       f"parallel loop {parallel[position]} than {instance_text(*source)}, on "
                                       f"which it depends")
        return
    raise LoopTranslationError(sink[0], instance_text(*sink), point,
                               f"runs before {instance_text(*source)}, on which it depends")


def _compiled(e: E.Expr) -> Callable[[dict], int]:
    """``e``, a bound, condition or argument of the loop AST, as a function of the names'
    values, built once per check: walking each expression's tree for every evaluation
    (:func:`~polyopt.analysis.evaluate.evaluate`) was most of the time spent running the loops
    at all sizes. Operators mean what ``evaluate`` gives them (its table of binary operators;
    the loops' small integers never need its wrapping to 64 bits); any other node is evaluated
    by it."""
    if isinstance(e, E.Const):
        value = e.value
        return lambda env: value
    if isinstance(e, E.Var):
        return operator.itemgetter(e.name)
    if isinstance(e, E.Unary):
        operand = _compiled(e.operand)
        return (lambda env: not operand(env)) if e.op == "not" else (lambda env: -operand(env))
    if isinstance(e, E.Select):
        cond, then, otherwise = _compiled(e.cond), _compiled(e.then), _compiled(e.otherwise)
        return lambda env: then(env) if cond(env) else otherwise(env)
    if isinstance(e, E.Binary) and e.op in ("and", "or"):
        lhs, rhs = _compiled(e.lhs), _compiled(e.rhs)
        if e.op == "and":
            return lambda env: bool(lhs(env)) and bool(rhs(env))
        return lambda env: bool(lhs(env)) or bool(rhs(env))
    if isinstance(e, E.Binary) and e.op in BINARY_OPERATORS:
        op, lhs, rhs = BINARY_OPERATORS[e.op], _compiled(e.lhs), _compiled(e.rhs)
        return lambda env: op(lhs(env), rhs(env))
    return lambda env: evaluate(e, env, {})


def _run(loops: Node, point: dict[str, int], budget: dict[str, int], compiled: dict[int, Callable[[dict], int]]
         ) -> dict:
    """(statement, coordinates) -> (time, positions of parallel loops around it), for every
    instance ``loops`` runs at sizes ``point``. ``compiled`` keeps each expression's
    :func:`_compiled` function (by the expression's id) for the other sizes."""
    times: dict = {}

    def value(e: E.Expr, env: dict) -> int:
        if id(e) not in compiled:
            compiled[id(e)] = _compiled(e)
        return compiled[id(e)](env)

    def walk(node: Node, env: dict, time: tuple, parallel: dict[int, str]) -> None:
        if isinstance(node, Block):
            for k, child in enumerate(node.body):
                walk(child, env, time + (k,), parallel)
        elif isinstance(node, If):
            if value(node.cond, env):
                walk(node.then, env, time, parallel)
            elif node.otherwise is not None:
                walk(node.otherwise, env, time, parallel)
        elif isinstance(node, For):
            inner = {**parallel, len(time): node.var} if node.parallel else parallel
            at = value(node.init, env)
            while value(node.cond, {**env, node.var: at}):
                budget["steps"] -= 1
                if budget["steps"] < 0:
                    raise _Spent
                walk(node.body, {**env, node.var: at}, time + (at,), inner)
                at += node.step
        elif isinstance(node, Run):
            key = (node.statement, tuple(int(value(arg, env)) for arg in node.args))
            if key in times:
                raise LoopTranslationError(node.statement, instance_text(*key), point, "runs more than once")
            budget["instances"] -= 1
            if budget["instances"] < 0:
                raise _Spent
            times[key] = (time, parallel)

    walk(loops, dict(point), (), {})
    return times


def _points_of(points: isl.Set, budget: dict[str, int], kind: str) -> list[tuple[int, ...]]:
    """The integer points of ``points`` (no parameters left), charged to ``budget[kind]``."""
    found: list[tuple[int, ...]] = []
    n = points.dim(isl.dim_type.set)

    def take(p: isl.Point) -> None:
        found.append(tuple(p.get_coordinate_val(isl.dim_type.set, k).get_num_si() for k in range(n)))

    points.foreach_point(take)
    budget[kind] -= len(found)
    if budget[kind] < 0:
        raise _Spent
    return found


def instance_text(name: str, coords) -> str:
    """An instance as errors name it: ``S1(3, 4)``."""
    return f"{name}({', '.join(map(str, coords))})"


__all__ = ["INSTANCE_BUDGET", "PAIR_BUDGET", "SIZES", "STEP_BUDGET", "check_at_sizes", "instance_text"]
