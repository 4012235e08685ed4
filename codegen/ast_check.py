"""Translation validation of loop ASTs: the loops that ship must do what the schedule says.

The verifier (:mod:`polyopt.analysis.verify`) checks the schedule; isl's AST generator then writes the
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

The checks run bottom-up, where two times first differ: at a loop (two iterations may not run
one instance, nor a dependence backwards, nor any dependence if the loop is parallel) and at a
block (two children may not run one instance, nor a dependence from a later child to an
earlier one). Below each node its times are projected out and what it runs is coalesced, so
the relations stay small (a register tile unrolls into many statements, whose instances
coalesce into one box again).
"""
from __future__ import annotations

import time
import warnings
from typing import Iterator

import islpy as isl

from polyopt.analysis import expr as E
from polyopt.codegen.loop_nodes import Block, For, If, Node, Run, children
from polyopt.codegen.ast_check_sizes import check_at_sizes, instance_text
from polyopt.codegen.ast_rolled import rolled_runs
from polyopt.analysis.deps import Dependences, dependences
from polyopt.errors import CodegenError, LoopTranslationError, PolyoptWarning
from polyopt.islutil import coalesced, isl_options, maps_of, out_of_operations
from polyopt.analysis.scop import Scop
from polyopt.types import boolean


def _depth(node: Node) -> int:
    """Positions on the longest path below ``node`` (blocks and loops count one each)."""
    below = max((_depth(child) for child in children(node)), default=0)
    return below + (1 if isinstance(node, (Block, For)) else 0)


class _Reader:
    """Reads a loop AST into a relation from times (one isl set space for all) to instances."""

    def __init__(self, scop: Scop, deps: Dependences, depth: int, deadline: float):
        self.scop = scop
        self.deadline = deadline  # of the process's CPU time (:func:`_on_time`)
        self.deps = deps.all.intersect_params(scop.context)
        self.depth = depth
        space = _time_space(scop.params, depth)
        self.space = space
        self.local = isl.LocalSpace.from_space(space)
        self.universe = isl.Set.universe(space).intersect_params(scop.context)
        #: by position: pairs of (whole) times equal before it
        self.same = [_equal_before(space, d) for d in range(depth + 1)]
        # What the walk returns below a position carries the times' positions before it only
        # (:meth:`walk`): the relations the checks compose have as few dimensions as they can.
        prefixes = [_time_space(scop.params, d) for d in range(depth + 1)]
        #: by position: the pairs of times up to it (one longer than the position) equal before
        #: it and different at it; those of them where the first is later at it
        self.apart = []
        for d in range(depth):
            same = _equal_before(prefixes[d + 1], d)
            self.apart.append((same.subtract(same.equate(isl.dim_type.in_, d, isl.dim_type.out, d)),
                               same.order_gt(isl.dim_type.in_, d, isl.dim_type.out, d)))
        #: by position: a time up to it (one longer) to its prefix before it; a whole time to
        #: its prefix before it
        self.projection = [isl.UnionMap.from_map(_prefix_map(prefixes[d + 1], prefixes[d])) for d in range(depth)]
        self.truncation = [isl.UnionMap.from_map(_prefix_map(space, prefix)) for prefix in prefixes]

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
        if isinstance(e, E.Binary) and e.op in _PW_AFF_OPERATIONS:
            return _PW_AFF_OPERATIONS[e.op](self.value(e.lhs, positions), self.value(e.rhs, positions))
        raise CodegenError(f"loop AST check: unsupported expression {E.to_source(e)}")

    def condition(self, e: E.Expr, positions: dict[str, int]) -> isl.Set:
        """The times at which the boolean expression ``e`` holds."""
        if isinstance(e, E.Binary) and e.op in ("and", "or"):
            a, b = self.condition(e.lhs, positions), self.condition(e.rhs, positions)
            return a.intersect(b) if e.op == "and" else a.union(b)
        if isinstance(e, E.Unary) and e.op == "not":
            return self.universe.subtract(self.condition(e.operand, positions))
        if isinstance(e, E.Binary) and e.op in E.COMPARISON_OPS:
            split = _split_comparison(e)
            if split is not None:
                return self.condition(split, positions)
            a, b = self.value(e.lhs, positions), self.value(e.rhs, positions)
            compare = {"<": a.lt_set, "<=": a.le_set, ">": a.gt_set, ">=": a.ge_set, "==": a.eq_set,
                       "!=": a.ne_set}[e.op]
            return compare(b)
        if isinstance(e, E.Const):  # isl writes ``if (1)`` around a statement it does not separate
            return self.universe if e.value else self.universe.subtract(self.universe)
        raise CodegenError(f"loop AST check: unsupported condition {E.to_source(e)}")

    # ----- statements --------------------------------------------------------------------------

    def walk(self, node: Node, where: isl.Set, position: int, positions: dict[str, int]) -> isl.UnionMap:
        """What ``node`` runs at the times ``where`` (constrained on the positions before
        ``position``), as a relation to instances from those positions of the times alone (the
        rest are left out); checked on the way. ``positions``: each enclosing iterator's
        position."""
        if isinstance(node, If):
            if E.size(node.cond) > MAX_BOUND_TERMS:
                raise _OutOfTime
            holds = self.condition(node.cond, positions)
            ran = self.walk(node.then, where.intersect(holds), position, positions)
            if node.otherwise is not None:  # the branches run at different times: nothing to check
                ran = ran.union(self.walk(node.otherwise, where.subtract(holds), position, positions))
            return ran
        if isinstance(node, Run):
            return self.run(node, where, position, positions)
        if isinstance(node, Block):
            ran = isl.UnionMap.empty(self.space.params())
            place = E.Var(f"<position {position}>", "iter")  # a name no program can use
            inner = {**positions, place.name: position}
            for start, stop, child in rolled_runs(node.body, place):
                _on_time(self.deadline)
                here = (where.fix_val(isl.dim_type.set, position, isl.Val(start)) if stop == start + 1 else
                        where.lower_bound_val(isl.dim_type.set, position, isl.Val(start))
                        .upper_bound_val(isl.dim_type.set, position, isl.Val(stop - 1)))
                ran = ran.union(self.walk(child, here, position + 1, inner))
            ran = coalesced(ran)
            self.check_order(ran, position, None)
            return self.project(ran, position)
        if isinstance(node, For):
            _on_time(self.deadline)
            inner = {**positions, node.var: position}
            times = where.intersect(self.iterations(node, position, inner))
            ran = self.walk(node.body, times, position + 1, inner)
            self.check_order(ran, position, node.var if node.parallel else None)
            return self.project(ran, position)
        raise CodegenError(f"loop AST check: unsupported node {node!r}")

    def project(self, ran: isl.UnionMap, position: int) -> isl.UnionMap:
        """``ran`` (from times up to ``position``) with its times' last position projected out."""
        return coalesced(ran.apply_domain(self.projection[position]))

    def check_order(self, ran: isl.UnionMap, position: int, parallel_loop: str | None) -> None:
        """Two times of ``ran`` equal before ``position`` and different at it (two iterations of
        a loop, or two children of a block) run no instance both, and no dependence backwards
        (none at all if they are iterations of ``parallel_loop``, the name of a parallel loop:
        those pairs include the backward ones, so one search finds both)."""
        other, backwards = self.apart[position]
        by_instance = ran.reverse()
        elsewhen = by_instance.apply_range(isl.UnionMap.from_map(other))  # instance -> its other times
        _twice(elsewhen, by_instance, self.deadline)
        if parallel_loop is None:
            earlier = by_instance.apply_range(isl.UnionMap.from_map(backwards))
            _dependent(self.deps, earlier.apply_range(ran), "runs before {source}, on which it depends",
                       self.deadline)
        else:
            _dependent(self.deps, elsewhen.apply_range(ran),
                       f"runs in another iteration of the parallel loop {parallel_loop} than {{source}}, "
                       f"on which it depends", self.deadline)

    def iterations(self, loop: For, position: int, positions: dict[str, int]) -> isl.Set:
        """The values ``for (var = init; cond; var += step)`` takes, as a set of times."""
        if loop.step < 1:
            raise CodegenError(f"loop AST check: loop {loop.var} steps by {loop.step}")
        if E.size(loop.init) + E.size(loop.cond) > MAX_BOUND_TERMS:
            raise _OutOfTime  # one isl call on such a bound can outlast the whole time limit
        var = isl.PwAff.var_on_domain(self.local, isl.dim_type.set, position)
        started = self.condition(E.Binary(">=", E.Var(loop.var, "iter"), loop.init, boolean), positions)
        if loop.step > 1:
            init = self.value(loop.init, positions)
            started = started.intersect(var.sub(init).mod_val(isl.Val(loop.step)).zero_set())
        holds = self.condition(loop.cond, positions)
        if _upper_bounds_only(loop.cond, loop.var):
            return started.intersect(holds)
        # a general condition: the loop stops at the first value that fails it
        failed = started.subtract(holds)
        later = self.same[position].order_lt(isl.dim_type.in_, position, isl.dim_type.out, position)
        return started.intersect(holds).subtract(failed.apply(later))

    def run(self, node: Run, where: isl.Set, position: int, positions: dict[str, int]) -> isl.UnionMap:
        stmt = self.scop.statement(node.statement)
        if len(node.args) != len(stmt.iterators):
            raise CodegenError(f"loop AST check: {node.statement} called with {len(node.args)} arguments")
        for d in range(position, self.depth):  # the padding of a shorter path
            where = where.fix_val(isl.dim_type.set, d, isl.Val(0))
        instance = isl.Map.from_domain(self.universe)
        for arg in node.args:
            instance = instance.flat_range_product(isl.Map.from_pw_aff(self.value(arg, positions)))
        instance = instance.intersect_domain(where).set_tuple_name(isl.dim_type.out, node.statement)
        return isl.UnionMap.from_map(instance).apply_domain(self.truncation[position])


def _time_space(params: list[str] | tuple[str, ...], positions: int) -> isl.Space:
    """The set space of times of ``positions`` positions, over the Scop's parameters."""
    space = isl.Space.set_alloc(isl.DEFAULT_CONTEXT, len(params), positions)
    for k, name in enumerate(params):
        space = space.set_dim_name(isl.dim_type.param, k, name)
    return space


def _equal_before(space: isl.Space, position: int) -> isl.Map:
    """The pairs of times of set space ``space`` equal on the positions before ``position``."""
    same = isl.Map.universe(isl.Space.map_from_set(space))
    for d in range(position):
        same = same.equate(isl.dim_type.in_, d, isl.dim_type.out, d)
    return same


def _prefix_map(longer: isl.Space, shorter: isl.Space) -> isl.Map:
    """The map from times of space ``longer`` to their prefixes of space ``shorter``."""
    prefix = isl.Map.universe(isl.Space.map_from_domain_and_range(longer, shorter))
    for d in range(shorter.dim(isl.dim_type.set)):
        prefix = prefix.equate(isl.dim_type.in_, d, isl.dim_type.out, d)
    return prefix


#: The loop AST's integer operations on piecewise affine values (``//`` and ``%`` round down).
_PW_AFF_OPERATIONS = {
    "+": isl.PwAff.add, "-": isl.PwAff.sub, "*": isl.PwAff.mul, "min": isl.PwAff.min, "max": isl.PwAff.max,
    "tdiv": isl.PwAff.tdiv_q, "tmod": isl.PwAff.tdiv_r,
    "//": lambda a, b: a.div(b).floor(),
    "%": lambda a, b: a.sub(b.mul(a.div(b).floor())),
}


_MIRRORED = {">": "<", ">=": "<="}


def _split_comparison(e: E.Binary) -> E.Expr | None:
    """``e``, a comparison with a min or max on one side, as the conjunction or disjunction of
    the comparisons with the min's or max's operands (``a <= min(b, c)`` is ``a <= b and a <=
    c``, ``max(a, b) < c`` is ``a < c and b < c``, ``a < max(b, c)`` is ``a < b or a < c``);
    None for other comparisons. isl's loop bounds are mins and maxes of many terms with
    divisions: read whole, each is one piecewise function of many pieces, and the sets of
    iterations built from them grew to many pieces more; read split, each term is one
    constraint of an intersection."""
    if e.op not in ("<", "<=", ">", ">="):
        return None
    op, lhs, rhs = (_MIRRORED[e.op], e.rhs, e.lhs) if e.op in _MIRRORED else (e.op, e.lhs, e.rhs)
    for side, on_right in ((rhs, True), (lhs, False)):
        if isinstance(side, E.Binary) and side.op in ("min", "max"):
            parts = [E.Binary(op, lhs, term, boolean) if on_right else E.Binary(op, term, rhs, boolean)
                     for term in (side.lhs, side.rhs)]
            joined = "and" if (side.op == "min") == on_right else "or"
            return E.Binary(joined, parts[0], parts[1], boolean)
    return None


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


#: isl operations the check may spend on one loop AST. Deeply tiled stencils (jacobi-2d with
#: tile=32, cholesky with tile=4) make its relations grow past what a compile can afford; past
#: this budget the loops are checked at fixed small sizes by running them
#: (:mod:`polyopt.codegen.ast_check_sizes`), and a PolyoptWarning says so.
CHECK_OPERATIONS = 4_000_000
#: CPU seconds the check may spend on one loop AST, besides :data:`CHECK_OPERATIONS`: isl's
#: operations cost far more on the relations of some tiled and fused random nests (their
#: projected times carry many existential variables) than on the suite's kernels, so the
#: operation budget alone let one check run for many times this long. Past it the loops are
#: checked at fixed sizes as past the operation budget. The suite's kernels decide well within it
#: (docs/architecture.md, "Testing").
CHECK_SECONDS = 1.5


def check_loop_ast(scop: Scop, loops: Node, deps: Dependences | None = None, *,
                   max_operations: int = CHECK_OPERATIONS, max_seconds: float = CHECK_SECONDS) -> bool:
    """Raise :class:`~polyopt.errors.LoopTranslationError` unless ``loops`` runs every instance
    of ``scop``'s domain exactly once, nothing else, every dependence in order, and no loop
    marked parallel carries a dependence -- for every parameter value of the context.

    True once checked for all sizes (:func:`check_for_all_sizes`). Where that needs more than
    ``max_operations`` isl operations or ``max_seconds`` of CPU time, the same properties are
    checked at small fixed sizes by running the loops (:func:`check_at_fixed_sizes`): False,
    with a :class:`~polyopt.errors.PolyoptWarning` naming the sizes checked."""
    deps = deps or dependences(scop)
    if check_for_all_sizes(scop, loops, deps, max_operations, max_seconds):
        return True
    check_at_fixed_sizes(scop, loops, deps, gave_up_text(max_operations, max_seconds))
    return False


def gave_up_text(max_operations: int, max_seconds: float) -> str:
    """Why the check for all sizes did not decide, as warnings say it."""
    return (f"the loop AST check for all sizes at once gave up (past {max_operations} isl operations "
            f"or {max_seconds} s of CPU time)")


def check_for_all_sizes(scop: Scop, loops: Node, deps: Dependences, max_operations: int,
                        max_seconds: float = CHECK_SECONDS) -> bool:
    """The check of :func:`check_loop_ast` for every parameter value of the context at once,
    within ``max_operations`` isl operations and ``max_seconds`` of the process's CPU time:
    raise on wrong loops, True once checked, False where a budget ran out first."""
    try:
        with isl_options(max_operations=max_operations):
            _check(scop, loops, deps, time.process_time() + max_seconds)
        return True
    except _OutOfTime:
        return False
    except isl.Error as exc:
        if not out_of_operations(exc):
            raise
    return False


def check_at_fixed_sizes(scop: Scop, loops: Node, deps: Dependences, why: str) -> None:
    """The check of :func:`check_loop_ast` at small fixed sizes, by running the loops
    (:func:`~polyopt.codegen.ast_check_sizes.check_at_sizes`): raise on wrong loops, else a
    :class:`~polyopt.errors.PolyoptWarning` that says ``why`` the check for all sizes did not
    decide, and which sizes were checked instead."""
    checked = check_at_sizes(scop, loops, deps)
    largest = ", ".join(f"{name}={max(point[name] for point in checked)}" for name in scop.params)
    sizes = (f"{len(checked)} fixed sizes (up to {largest})" if checked and largest
             else "its one size" if checked else "no size (the smallest exceeded the budget)")
    warnings.warn(f"{scop.name}: {why}; the loops were run and checked at {sizes}", PolyoptWarning,
                  stacklevel=3)


#: Loop bounds and conditions of more nodes than this are not read into isl: the check for all
#: sizes gives up on them (the loops are checked at fixed sizes). The suite's largest, default,
#: tiled or register-tiled, has 92 nodes; a bound of 4,162 nodes (a tiled, shifted random nest's
#: atomic loops) took isl 9 s to read, in one call the time limit cannot stop.
MAX_BOUND_TERMS = 1000
#: Pieces the coverage step (:func:`_left_over`) lets what is still missing grow to before it
#: coalesces them: coalescing after every subtraction took most of that step's time on
#: covariance's and correlation's register tiles, where the pieces never got near this many.
MAX_UNCOALESCED = 64


class _OutOfTime(Exception):
    """The check for all sizes passed its CPU-time limit."""


def _on_time(deadline: float) -> None:
    """Raise :class:`_OutOfTime` once the process's CPU time is past ``deadline``. Looked at
    between isl calls only: isl holds the interpreter while it works, so nothing can stop a call
    from outside; the calls are kept small where they were seen to grow (:func:`_meetings`)."""
    if time.process_time() > deadline:
        raise _OutOfTime


def _check(scop: Scop, loops: Node, deps: Dependences, deadline: float) -> None:
    reader = _Reader(scop, deps, max(_depth(loops), 1), deadline)
    executed = reader.walk(loops, reader.universe, 0, {}).range().intersect_params(scop.context)
    for stmt in scop.statements:
        wanted = stmt.domain.intersect_params(scop.context)
        ran = executed.extract_set(wanted.get_space())
        for problem, points in (("never runs", _left_over(wanted, ran, deadline)),
                                ("is not in the domain but runs", _outside(ran, wanted))):
            if not points.is_empty():
                params, coords = _sample(points)
                raise LoopTranslationError(stmt.name, instance_text(stmt.name, coords), params, problem)


def _outside(ran: isl.Set, wanted: isl.Set) -> isl.Set:
    """Some points of ``ran`` outside ``wanted`` (empty if none). Where ``wanted`` is one basic
    set without existential variables (a statement's domain, nearly always), the points of
    ``ran`` that violate each of its constraints, one at a time, until some do: isl's
    subtraction works out the whole difference, which took covariance's check four times as
    long."""
    pieces = wanted.get_basic_sets()
    if len(pieces) != 1 or pieces[0].dim(isl.dim_type.div):
        return ran.subtract(wanted)
    for constraint in pieces[0].get_constraints():
        aff = constraint.get_aff()
        sides = [aff.neg_basic_set()] if not constraint.is_equality() else [aff.neg_basic_set(),
                                                                           aff.neg().neg_basic_set()]
        for side in sides:
            violating = ran.intersect(isl.Set.from_basic_set(side))
            if not violating.is_empty():
                return violating
    return isl.Set.empty(ran.get_space())


def _left_over(wanted: isl.Set, ran: isl.Set, deadline: float) -> isl.Set:
    """The points of ``wanted`` outside ``ran``, taking away one basic set of ``ran`` at a time
    with the CPU-time limit looked at in between: isl's subtraction of a union of many pieces at
    once took several times as long on a register-tiled nest. Pieces with existential variables
    (the projected tile loops) go last, each first cut down to what is left of ``wanted`` and
    its existentials made explicit divisions: subtracted as they were, two pieces of the
    register-tiled triangular loops of covariance and correlation took most of the check."""
    pieces = sorted(ran.get_basic_sets(), key=lambda piece: piece.dim(isl.dim_type.div))
    for piece in pieces:
        _on_time(deadline)
        taken = isl.Set.from_basic_set(piece)
        if piece.dim(isl.dim_type.div):
            taken = taken.intersect(wanted).compute_divs()
        for part in taken.get_basic_sets():
            wanted = wanted.subtract(isl.Set.from_basic_set(part))
            if wanted.n_basic_set() > MAX_UNCOALESCED:
                wanted = coalesced(wanted)
        if wanted.is_empty():
            break
    return wanted


def _meetings(pieces: isl.UnionMap, other: isl.UnionMap, deadline: float) -> Iterator[isl.Map]:
    """The non-empty intersections of ``other`` with each basic relation of ``pieces``, made one
    basic relation at a time with the CPU-time limit looked at in between (:func:`_on_time`):
    as one isl call, the intersection of the two unions took most of a long compile."""
    for piece in maps_of(pieces):
        same_space = other.extract_map(piece.get_space())
        if same_space.plain_is_empty():  # no dependence between these two statements, say
            continue
        for basic in piece.get_basic_maps():
            _on_time(deadline)
            meeting = same_space.intersect(isl.Map.from_basic_map(basic))
            if not meeting.is_empty():
                yield meeting


def _twice(elsewhen: isl.UnionMap, when: isl.UnionMap, deadline: float) -> None:
    """Raise if an instance runs at one of the times ``when`` relates it to and at one of
    those ``elsewhen`` relates it to (other times than the first, as the check says)."""
    for piece in _meetings(elsewhen, when, deadline):
        params, coords = _sample(piece)
        name = piece.get_tuple_name(isl.dim_type.in_)
        raise LoopTranslationError(name, instance_text(name, coords[:piece.dim(isl.dim_type.in_)]), params,
                                   "runs more than once")


def _dependent(deps: isl.UnionMap, related: isl.UnionMap, problem: str, deadline: float) -> None:
    """Raise if a dependence goes from an instance to one that ``related`` relates it to (one
    run at a time related to the first one's, as the check says)."""
    for piece in _meetings(related, deps, deadline):
        params, coords = _sample(piece)
        n_in = piece.dim(isl.dim_type.in_)
        source = instance_text(piece.get_tuple_name(isl.dim_type.in_), coords[:n_in])
        sink = instance_text(piece.get_tuple_name(isl.dim_type.out), coords[n_in:])
        raise LoopTranslationError(piece.get_tuple_name(isl.dim_type.out), sink, params,
                                   problem.format(source=source, sink=sink))


__all__ = ["CHECK_OPERATIONS", "CHECK_SECONDS", "check_at_fixed_sizes", "check_for_all_sizes", "check_loop_ast",
           "gave_up_text"]
