"""Translation validation of loop ASTs: the loops that ship must do what the schedule says.

The verifier (:mod:`polyopt.verify`) checks the schedule; isl's AST generator then writes the
loops, and it has been seen to leave statement instances out (a tiled band over a strided
domain). This module checks the loop AST itself, symbolically, for all parameter values of the
Scop's context:

- every statement instance of the domain runs, exactly once, and nothing else runs;
- every dependence source runs before its sink in the order the loops give;
- no loop marked parallel carries a dependence.

The loop AST is read as a relation from *AST times* to statement instances. A time is the
vector of positions along the path from the root to a statement: a block contributes the index
of its child, a loop its iterator's value (isl's loops step upwards), an ``if`` nothing (its
branches exclude each other); shorter paths are padded with zeros. Execution order is then the
lexicographic order of times, as in isl's flat schedule maps, and each loop's iterations are the
values from its ``init`` that satisfy its condition up to the first one that does not.
"""
from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

from polyopt import expr as E
from polyopt.codegen.ast import Block, For, If, Node, Run, children
from polyopt.deps import Dependences, dependences
from polyopt.errors import CodegenError, LoopTranslationError
from polyopt.scop import Scop


def _depth(node: Node) -> int:
    """Positions on the longest path below ``node`` (blocks and loops count one each)."""
    below = max((_depth(child) for child in children(node)), default=0)
    return below + (1 if isinstance(node, (Block, For)) else 0)


@dataclass(frozen=True)
class _Loop:
    """A loop marked parallel: its position in the time vector and the times of its iterations."""

    var: str
    position: int
    times: isl.Set


class _Reader:
    """Reads a loop AST into a relation from times (one isl set space for all) to instances."""

    def __init__(self, scop: Scop, depth: int):
        self.scop = scop
        self.depth = depth
        space = isl.Space.set_alloc(isl.DEFAULT_CONTEXT, len(scop.params), depth)
        for k, name in enumerate(scop.params):
            space = space.set_dim_name(isl.dim_type.param, k, name)
        self.space = space
        self.local = isl.LocalSpace.from_space(space)
        self.universe = isl.Set.universe(space).intersect_params(scop.context)
        self.executed = isl.UnionMap.empty(space.params())
        self.parallel: list[_Loop] = []

    # ----- expressions -------------------------------------------------------------------------

    def _constant(self, value: int) -> isl.PwAff:
        return isl.PwAff.from_aff(isl.Aff.zero_on_domain(self.local).set_constant_val(isl.Val(value)))

    def value(self, e: E.Expr, positions: dict[str, int]) -> isl.PwAff:
        """``e`` (an integer expression of the AST) as a piecewise affine function of the time."""
        if isinstance(e, E.Const):
            return self._constant(int(e.value))
        if isinstance(e, E.Var):
            if e.name in positions:
                return isl.PwAff.var_on_domain(self.local, isl.dim_type.set, positions[e.name])
            if e.kind == "param" and e.name in self.scop.params:
                return isl.PwAff.var_on_domain(self.local, isl.dim_type.param, self.scop.params.index(e.name))
            raise CodegenError(f"loop AST check: unknown name {e.name!r} in a loop bound")
        if isinstance(e, E.Unary) and e.op == "neg":
            return self.value(e.operand, positions).neg()
        if isinstance(e, E.Select):
            chosen = self.condition(e.cond, positions)
            then, otherwise = self.value(e.then, positions), self.value(e.otherwise, positions)
            return then.intersect_domain(chosen).union_max(otherwise.subtract_domain(chosen))
        if isinstance(e, E.Binary):
            a, b = self.value(e.lhs, positions), self.value(e.rhs, positions)
            if e.op == "+":
                return a.add(b)
            if e.op == "-":
                return a.sub(b)
            if e.op == "*":
                return a.mul(b)
            if e.op == "min":
                return a.min(b)
            if e.op == "max":
                return a.max(b)
            if e.op == "tdiv":
                return a.tdiv_q(b)
            if e.op == "tmod":
                return a.tdiv_r(b)
            if e.op == "//":
                return a.div(b).floor()
            if e.op == "%":
                return a.sub(b.mul(a.div(b).floor()))
        raise CodegenError(f"loop AST check: unsupported expression {E.to_source(e)}")

    def condition(self, e: E.Expr, positions: dict[str, int]) -> isl.Set:
        """The times at which the boolean expression ``e`` holds."""
        if isinstance(e, E.Binary) and e.op in ("and", "or"):
            a, b = self.condition(e.lhs, positions), self.condition(e.rhs, positions)
            return a.intersect(b) if e.op == "and" else a.union(b)
        if isinstance(e, E.Unary) and e.op == "not":
            return self.universe.subtract(self.condition(e.operand, positions))
        if isinstance(e, E.Binary) and e.op in E.COMPARISON_OPS:
            a, b = self.value(e.lhs, positions), self.value(e.rhs, positions)
            compare = {"<": a.lt_set, "<=": a.le_set, ">": a.gt_set, ">=": a.ge_set, "==": a.eq_set,
                       "!=": a.ne_set}[e.op]
            return compare(b)
        raise CodegenError(f"loop AST check: unsupported condition {E.to_source(e)}")

    # ----- statements --------------------------------------------------------------------------

    def walk(self, node: Node, where: isl.Set, position: int, positions: dict[str, int]) -> None:
        """Add the instances that ``node`` runs at the times ``where`` (constrained on the
        positions before ``position``); ``positions`` gives each enclosing iterator's position."""
        if isinstance(node, Block):
            for k, child in enumerate(node.body):
                here = where.fix_val(isl.dim_type.set, position, isl.Val(k))
                self.walk(child, here, position + 1, positions)
        elif isinstance(node, If):
            holds = self.condition(node.cond, positions)
            self.walk(node.then, where.intersect(holds), position, positions)
            if node.otherwise is not None:
                self.walk(node.otherwise, where.subtract(holds), position, positions)
        elif isinstance(node, For):
            inner = {**positions, node.var: position}
            times = where.intersect(self.iterations(node, position, inner))
            if node.parallel:
                self.parallel.append(_Loop(node.var, position, times))
            self.walk(node.body, times, position + 1, inner)
        elif isinstance(node, Run):
            self.run(node, where, position, positions)
        else:
            raise CodegenError(f"loop AST check: unsupported node {node!r}")

    def iterations(self, loop: For, position: int, positions: dict[str, int]) -> isl.Set:
        """The values ``for (var = init; cond; var += step)`` takes, as a set of times."""
        if loop.step < 1:
            raise CodegenError(f"loop AST check: loop {loop.var} steps by {loop.step}")
        var = isl.PwAff.var_on_domain(self.local, isl.dim_type.set, position)
        init = self.value(loop.init, positions)
        started = var.ge_set(init)
        if loop.step > 1:
            started = started.intersect(var.sub(init).mod_val(isl.Val(loop.step)).zero_set())
        holds = self.condition(loop.cond, positions)
        if _upper_bounds_only(loop.cond, loop.var):
            return started.intersect(holds)
        # a general condition: the loop stops at the first value that fails it
        failed = started.subtract(holds)
        later = isl.Map.universe(isl.Space.map_from_set(self.space))
        for d in range(position):
            later = later.equate(isl.dim_type.in_, d, isl.dim_type.out, d)
        later = later.order_lt(isl.dim_type.in_, position, isl.dim_type.out, position)
        return started.intersect(holds).subtract(failed.apply(later))

    def run(self, node: Run, where: isl.Set, position: int, positions: dict[str, int]) -> None:
        stmt = self.scop.statement(node.statement)
        if len(node.args) != len(stmt.iterators):
            raise CodegenError(f"loop AST check: {node.statement} called with {len(node.args)} arguments")
        for d in range(position, self.depth):  # the padding of a shorter path
            where = where.fix_val(isl.dim_type.set, d, isl.Val(0))
        instance = isl.Map.from_domain(where)
        for arg in node.args:
            instance = instance.flat_range_product(isl.Map.from_pw_aff(self.value(arg, positions)))
        instance = instance.intersect_domain(where).set_tuple_name(isl.dim_type.out, node.statement)
        self.executed = self.executed.union(isl.UnionMap.from_map(instance))


def _upper_bounds_only(cond: E.Expr, var: str) -> bool:
    """Whether ``cond`` is a conjunction of upper bounds on ``var`` (``var < e``, ``var <= e``,
    ``e > var``, ``e >= var`` with ``var`` not in ``e``): then it holds on a prefix of the
    values a loop over ``var`` steps through, and the loop runs exactly where it holds."""
    if isinstance(cond, E.Binary) and cond.op == "and":
        return _upper_bounds_only(cond.lhs, var) and _upper_bounds_only(cond.rhs, var)
    if not isinstance(cond, E.Binary):
        return False
    lone, other = {"<": (cond.lhs, cond.rhs), "<=": (cond.lhs, cond.rhs),
                   ">": (cond.rhs, cond.lhs), ">=": (cond.rhs, cond.lhs)}.get(cond.op, (None, None))
    return (isinstance(lone, E.Var) and lone.name == var
            and not any(isinstance(v, E.Var) and v.name == var for v in E.walk(other)))


def _sample(values: isl.Set | isl.Map) -> tuple[dict[str, int], list[int]]:
    """Parameter values and coordinates of one point of a non-empty set (a map's, wrapped)."""
    space_set = values.wrap() if isinstance(values, isl.Map) else values
    point = space_set.sample_point()
    space = space_set.get_space()
    params = {space.get_dim_name(isl.dim_type.param, k):
              point.get_coordinate_val(isl.dim_type.param, k).to_python()
              for k in range(space.dim(isl.dim_type.param))}
    coords = [point.get_coordinate_val(isl.dim_type.set, k).to_python() for k in range(space.dim(isl.dim_type.set))]
    return params, coords


def _instance(name: str, coords: list[int]) -> str:
    return f"{name}({', '.join(map(str, coords))})"


def check_loop_ast(scop: Scop, loops: Node, deps: Dependences | None = None) -> None:
    """Raise :class:`~polyopt.errors.LoopTranslationError` unless ``loops`` runs every instance
    of ``scop``'s domain exactly once, nothing else, every dependence in order, and no loop
    marked parallel carries a dependence -- for every parameter value of the context."""
    deps = deps or dependences(scop)
    reader = _Reader(scop, max(_depth(loops), 1))
    reader.walk(loops, reader.universe, 0, {})
    executed = reader.executed.intersect_params(scop.context)
    for stmt in scop.statements:
        name = stmt.name
        wanted = stmt.domain.intersect_params(scop.context)
        ran = executed.extract_map(isl.Space.map_from_domain_and_range(reader.space, wanted.get_space()))
        for problem, points in (("never runs", wanted.subtract(ran.range())),
                                ("is not in the domain but runs", ran.range().subtract(wanted))):
            if not points.is_empty():
                params, coords = _sample(points)
                raise LoopTranslationError(name, _instance(name, coords), params, problem)
        twice = ran.apply_range(ran.reverse()).subtract(isl.Map.identity(isl.Space.map_from_set(reader.space)))
        if not twice.is_empty():
            params, times = _sample(twice)
            at = _point(reader.space, params, times[:reader.depth])
            _, coords = _sample(ran.intersect_domain(at).range())
            raise LoopTranslationError(name, _instance(name, coords), params, "runs more than once")
    _check_order(scop, deps, executed, reader)


def _point(space: isl.Space, params: dict[str, int], coords: list[int]) -> isl.Set:
    """The one-point set of ``space`` at ``params`` and ``coords``."""
    point = isl.Set.universe(space)
    for k in range(space.dim(isl.dim_type.param)):
        point = point.fix_val(isl.dim_type.param, k, isl.Val(params[space.get_dim_name(isl.dim_type.param, k)]))
    for k, value in enumerate(coords):
        point = point.fix_val(isl.dim_type.set, k, isl.Val(value))
    return point


def _check_order(scop: Scop, deps: Dependences, executed: isl.UnionMap, reader: _Reader) -> None:
    """Every dependence runs source before sink, and within no parallel loop's two iterations."""
    when = executed.reverse()
    pairs = deps.all.apply_domain(when).apply_range(when).intersect_params(scop.context)
    if pairs.is_empty():
        return
    pairs = isl.Map.from_union_map(pairs)
    space = pairs.get_space()
    late = pairs.subtract(isl.Map.lex_lt(reader.space))
    if not late.is_empty():
        _raise_pair(late, executed, reader, "runs its dependence sink {sink} before or with its source {source}")
    for loop in reader.parallel:
        same_outer = isl.Map.universe(space)
        for d in range(loop.position):
            same_outer = same_outer.equate(isl.dim_type.in_, d, isl.dim_type.out, d)
        other_iteration = same_outer.subtract(same_outer.equate(isl.dim_type.in_, loop.position,
                                                                isl.dim_type.out, loop.position))
        carried = pairs.intersect(other_iteration).intersect_domain(loop.times)
        if not carried.is_empty():
            _raise_pair(carried, executed, reader,
                        f"runs {{source}} and {{sink}} in different iterations of the parallel loop "
                        f"{loop.var}, but {{sink}} depends on {{source}}")


def _raise_pair(pairs: isl.Map, executed: isl.UnionMap, reader: _Reader, problem: str) -> None:
    """Raise for one (source time, sink time) pair of ``pairs``, naming both instances."""
    params, times = _sample(pairs)
    found = []
    for time in (times[:reader.depth], times[reader.depth:]):
        ran = executed.intersect_domain(isl.UnionSet(_point(reader.space, params, time)))
        instance = isl.Set.from_union_set(ran.range())
        _, coords = _sample(instance)
        found.append(_instance(instance.get_tuple_name(), coords))
    source, sink = found
    raise LoopTranslationError(sink.split("(")[0], sink, params, problem.format(source=source, sink=sink))


__all__ = ["check_loop_ast"]
