"""The loop AST: isl's AST of a schedule, translated once into small immutable nodes.

Both emitters (C and LLVM) walk these nodes, so isl's AST API is touched only here. Loop bounds
and statement arguments are :mod:`polyopt.analysis.expr` trees over loop iterators and parameters.
"""
from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, replace

import islpy as isl

from polyopt.analysis import expr as E
from polyopt.analysis.deps import dependences
from polyopt.codegen.ast_check import (CHECK_OPERATIONS, CHECK_SECONDS, check_at_fixed_sizes, check_for_all_sizes,
                                       check_loop_ast, gave_up_text)
from polyopt.errors import CodegenError, LoopTranslationError, PolyoptWarning
from polyopt.islutil import isl_options, out_of_operations
from polyopt.analysis.scop import Argument, Scop, Statement
from polyopt.transform.marks import PARALLEL_MARK
from polyopt.codegen.loop_nodes import Block, For, If, Node, Run, nodes
from polyopt.types import boolean, i64


MAX_LOOP_DEPTH = 64  # loop iterator names handed to isl; deeper nests get isl's own names

#: isl operations an AST build of a schedule tree may take (a few seconds); past them the atomic
#: loops are built, then the original order's (see :func:`generate_loop_ast`). The suite's
#: largest build, 3mm's, takes 3-4M (1.3 s); a tiled, shifted band of a random nest took 6 s.
AST_OPERATIONS = 5_000_000

#: isl's loops whose bounds, conditions and statement arguments have more expression nodes than
#: this in all are built again with atomic loop types (see :func:`generate_loop_ast`); the
#: suite's largest default, tiled or register-tiled AST has 3,062 (2mm's) on an AVX2 host and
#: 5,499 (3mm's, tiled and register-tiled; 5,463 by default) on an AVX-512 one, whose register
#: tiles are 4 x 32 doubles: at 4,000 its atomic build then passed its budget too and 3mm ran in
#: the original order, sequentially. Tiled, shifted random nests came out at 5,000-13,000.
MAX_LOOP_AST_NODES = 6000

_BINARY = {
    isl.ast_expr_op_type.add: "+", isl.ast_expr_op_type.sub: "-", isl.ast_expr_op_type.mul: "*",
    isl.ast_expr_op_type.div: "tdiv", isl.ast_expr_op_type.pdiv_q: "tdiv",
    isl.ast_expr_op_type.fdiv_q: "//", isl.ast_expr_op_type.pdiv_r: "tmod",
    isl.ast_expr_op_type.zdiv_r: "tmod", isl.ast_expr_op_type.min: "min",
    isl.ast_expr_op_type.max: "max", isl.ast_expr_op_type.lt: "<", isl.ast_expr_op_type.le: "<=",
    isl.ast_expr_op_type.gt: ">", isl.ast_expr_op_type.ge: ">=", isl.ast_expr_op_type.eq: "==",
    isl.ast_expr_op_type.and_: "and", isl.ast_expr_op_type.and_then: "and",
    isl.ast_expr_op_type.or_: "or", isl.ast_expr_op_type.or_else: "or",
}


def abi_arguments(scop: Scop) -> list[Argument]:
    """The native calling convention: size parameters (i64, sorted), then the kernel's scalar and
    array arguments in signature order, then its ``temporary`` arrays (which the runtime
    allocates). Shared by every emitter and the runtime."""
    args = [Argument(p, "param", i64) for p in scop.params]
    temporaries = [Argument(a.name, "array", a.dtype) for a in scop.arrays.values() if a.temporary]
    return args + [a for a in scop.arguments if a.kind != "param"] + temporaries


def iterator_prefix(scop: Scop) -> str:
    names = set(scop.params) | set(scop.arrays) | {a.name for a in scop.arguments}
    prefix = "c"
    while any(re.fullmatch(rf"{prefix}\d+", n) for n in names):
        prefix = "_" + prefix
    return prefix


class IslAstTranslator:
    """isl AST expressions and nodes to ours; ``iterator_names[d]`` names the loop of schedule
    dimension ``d`` (the names handed to the AST build), which places the parallel marks."""

    def __init__(self, params: set[str], iterator_names: tuple[str, ...] = ()):
        self.params = params
        self.iterator_names = iterator_names

    def expr(self, e: isl.AstExpr) -> E.Expr:
        kind = e.get_type()
        if kind == isl.ast_expr_type.int:
            return E.Const(e.get_val().to_python(), i64)
        if kind == isl.ast_expr_type.id:
            name = e.get_id().get_name()
            return E.Var(name, "param" if name in self.params else "iter")
        op = e.get_op_type()
        args = [self.expr(e.get_op_arg(k)) for k in range(e.get_op_n_arg())]
        if op == isl.ast_expr_op_type.minus:
            return E.Unary("neg", args[0], i64)
        if op in (isl.ast_expr_op_type.cond, isl.ast_expr_op_type.select):
            return E.Select(args[0], args[1], args[2], args[1].dtype)
        if op in _BINARY:
            name = _BINARY[op]
            result = args[0]
            for rhs in args[1:]:  # min/max may be n-ary
                dtype = boolean if name in E.COMPARISON_OPS + E.LOGICAL_OPS else i64
                result = E.Binary(name, result, rhs, dtype)
            return result
        raise CodegenError(f"unsupported isl AST operation {op}")

    def node(self, n: isl.AstNode) -> Node:
        kind = n.get_type()
        if kind == isl.ast_node_type.for_:
            step = self.expr(n.for_get_inc())
            if not isinstance(step, E.Const):
                raise CodegenError("non-constant loop step in the generated AST")
            return For(n.for_get_iterator().get_id().get_name(), self.expr(n.for_get_init()),
                       self.expr(n.for_get_cond()), int(step.value), self.node(n.for_get_body()))
        if kind == isl.ast_node_type.if_:
            otherwise = self.node(n.if_get_else_node()) if n.if_has_else_node() else None
            return If(self.expr(n.if_get_cond()), self.node(n.if_get_then_node()), otherwise)
        if kind == isl.ast_node_type.block:
            children = n.block_get_children()
            return Block(tuple(self.node(children.get_at(k)) for k in range(children.n_ast_node())))
        if kind == isl.ast_node_type.user:
            call = n.user_get_expr()
            name = call.get_op_arg(0).get_id().get_name()
            return Run(name, tuple(self.expr(call.get_op_arg(k)) for k in range(1, call.get_op_n_arg())))
        if kind == isl.ast_node_type.mark:
            child = self.node(n.mark_get_node())
            mark = n.mark_get_id()
            depth = mark.get_user() if mark.get_name() == PARALLEL_MARK else None
            if depth is not None and depth < len(self.iterator_names):
                return _parallelize(child, self.iterator_names[depth])
            return child
        raise CodegenError(f"unsupported isl AST node {kind}")


def _parallelize(node: Node, var: str) -> Node:
    """``node`` with the loops over ``var`` that it holds marked parallel.

    A parallel mark is about one schedule dimension, a member of the band below it (the first,
    or a later one where :func:`_for_ast_build` merged the bands around the mark). Where that
    member takes one value for the statements of an AST piece, isl emits no loop for it and the
    first loop under the mark belongs to another, maybe sequential, dimension: that loop must stay
    sequential. So the loop is found by its iterator, which names its dimension (its depth in the
    schedule): loops over other dimensions are looked into, not marked."""
    if isinstance(node, For):
        if node.var == var:
            return replace(node, parallel=True)
        return replace(node, body=_parallelize(node.body, var))
    if isinstance(node, If):
        otherwise = None if node.otherwise is None else _parallelize(node.otherwise, var)
        return If(node.cond, _parallelize(node.then, var), otherwise)
    if isinstance(node, Block):
        return Block(tuple(_parallelize(child, var) for child in node.body))
    return node


def _for_ast_build(tree: isl.Schedule) -> isl.Schedule:
    """``tree`` as isl's AST builder gets it: each parallel mark's id carries the schedule
    dimension it marks (the depth of the band below it), for :func:`_parallelize`; and where a
    mark splits a band in two (the parallel member is not the band's first, as a wavefront's tile
    loop below the wavefront loop), the two bands are one again with the mark above them.

    The split changes no instance's time, only how isl builds the loops: it generates each band
    on its own, the inner one inside every piece of the outer loop, and with disjunctive domains
    under tiles (``if not (i == j)`` guards) that took isl 14 s of AST building on a
    three-statement nest that the merged band builds in 0.1 s. Bands with AST build options or
    loop types of their own, or over a subtree that refers to their dimensions (isolated register
    tiles), stay as they are."""

    def stamp(node: isl.ScheduleNode) -> isl.ScheduleNode:
        if node.get_type() == isl.schedule_node_type.mark and node.mark_get_id().get_name() == PARALLEL_MARK:
            depth = node.child(0).get_schedule_depth()
            node = node.delete().insert_mark(isl.Id(PARALLEL_MARK, user=depth))
        elif _plain_band(node) and node.n_children() == 1 and not node.is_subtree_anchored():
            mark = node.child(0)
            if (mark.get_type() == isl.schedule_node_type.mark and mark.mark_get_id().get_name() == PARALLEL_MARK
                    and _plain_band(mark.child(0))):
                node = _merged_with_band_below(node, mark.mark_get_id())
        return node

    return tree.map_schedule_node_bottom_up(stamp)


def _plain_band(node: isl.ScheduleNode) -> bool:
    """Whether ``node`` is a band with isl's default AST build options and loop types."""
    if node.get_type() != isl.schedule_node_type.band:
        return False
    default = isl.ast_loop_type.default
    return (node.band_get_ast_build_options().is_empty()
            and all(node.band_member_get_ast_loop_type(k) == default
                    and node.band_member_get_isolate_ast_loop_type(k) == default
                    for k in range(node.band_n_member())))


def _merged_with_band_below(node: isl.ScheduleNode, mark: isl.Id) -> isl.ScheduleNode:
    """Band ``node``, a parallel mark ``mark`` below it and the band below that, as one band (the
    members of both, in order) under the mark; at ``node``'s position."""
    inner = node.child(0).child(0)
    members = node.band_get_partial_schedule().flat_range_product(inner.band_get_partial_schedule())
    coincident = ([node.band_member_get_coincident(k) for k in range(node.band_n_member())]
                  + [inner.band_member_get_coincident(k) for k in range(inner.band_n_member())])
    permutable = node.band_get_permutable() and inner.band_get_permutable()
    node = inner.delete().parent().delete().parent().delete()
    node = node.insert_partial_schedule(members).band_set_permutable(permutable)
    for k, flag in enumerate(coincident):
        node = node.band_member_set_coincident(k, flag)
    return node.insert_mark(mark)


@dataclass(frozen=True)
class LoopAst:
    """Checked loops of a schedule, and ``fallback``: empty where they are isl's AST of the
    schedule tree (its loop types as set, or atomic), else the note that says why the loops of
    the program's original order run instead (:func:`generate_loop_ast`)."""

    loops: Node
    fallback: str = ""


def build_loop_ast(scop: Scop, tree: isl.Schedule) -> Node:
    """The checked loops of schedule ``tree`` over ``scop``'s domain (see
    :func:`generate_loop_ast`, which also says whether a fallback wrote them)."""
    return generate_loop_ast(scop, tree).loops


def generate_loop_ast(scop: Scop, tree: isl.Schedule) -> LoopAst:
    """Generate the loop AST of schedule ``tree`` over ``scop``'s domain with isl's AST builder,
    checked against the domain and the dependences (:mod:`polyopt.codegen.ast_check`): isl's
    generator has been seen to drop instances, and no emitter may be handed such loops.

    Where the check finds such loops, the AST is generated again with every band member's loop
    type *atomic* (one loop per member, no separation into pieces: the separation is where the
    instances went missing on the random nests that showed it) and checked again. Where those
    loops are wrong too, the loops of the Scop's original schedule follow (the program's own
    order, which every dependence follows; no marks, so they run sequentially), checked the same
    way and returned with a note and a :class:`~polyopt.errors.PolyoptWarning` that say so; if
    they fail as well, the first :class:`~polyopt.errors.LoopTranslationError` is raised. (isl's
    AST of the flat schedule map is no way out: on the nests found so far it drops instances
    too, S1(6) at N = 10 of issue 19's nest where the tree's loops drop it at N = 9.)

    Where the check for all sizes at once ran out of its budgets (isl operations, CPU time) on
    the tree's loops, the atomic loops are checked at the fixed sizes only: they differ in loop
    types, not in how large the check's relations grow, and a second try would spend the whole
    budgets again. The original order's loops are not tiled: their check for all sizes took at
    most 0.04 s on every suite kernel, so it runs.

    Where isl's loops of the tree are larger than :data:`MAX_LOOP_AST_NODES` (isl separates a
    band into pieces; tiled, shifted bands of random nests came out as 48 to 114 loops of 5,000
    to 13,000 nodes), the atomic loops are the first ones checked: LLVM took 3.2-3.7 s and the
    check its 1.5 s on such loops, where the atomic ones (6-7 loops) compiled and checked in
    about a second. Each build gets :data:`AST_OPERATIONS` isl operations (the atomic one a
    fifth), and one past them counts as failed; the note says so."""
    deps = dependences(scop)
    gave_up = gave_up_text(CHECK_OPERATIONS, CHECK_SECONDS)
    decided = True  # whether the check for all sizes decided on the loops before
    wrong: LoopTranslationError | None = None
    why: list[str] = []
    # the atomic loops (the same bounds in fewer pieces) get a fifth of the budget: where the
    # tree's loops took all of it, they took isl 2.7 s more on the nest that showed it, where
    # the atomic loops of nests whose separated loops were only too large took 0.1-0.2 s
    for kind, candidate, budget in (("", tree, AST_OPERATIONS),
                                    ("atomic ", tree.map_schedule_node_bottom_up(_atomic), AST_OPERATIONS // 5)):
        try:
            loops = _tree_ast(scop, candidate, budget)
        except _TooLong:
            why.append(f"isl's {kind}loops of the schedule tree took more than {budget} isl operations")
            continue
        if not kind and _node_count(loops) > MAX_LOOP_AST_NODES:
            continue  # isl's separation multiplied the loops, and the time of all that follows
        try:
            reason = gave_up if decided else f"{gave_up} on the loops before these, so these were not checked that way"
            if decided:
                decided = check_for_all_sizes(scop, loops, deps, CHECK_OPERATIONS)
            if not decided:
                check_at_fixed_sizes(scop, loops, deps, reason)
            return LoopAst(loops)
        except LoopTranslationError as err:
            wrong = wrong or err
            why.append(f"isl's {kind}loops of the schedule tree were wrong ({err})")
    loops = _tree_ast(scop, scop.schedule)
    try:
        check_loop_ast(scop, loops, deps)
    except LoopTranslationError as err:
        raise (wrong or err) from None
    note = f"loop AST: {'; '.join(why)}; the loops of the program's original order run instead, sequentially"
    warnings.warn(f"{scop.name}: {note}", PolyoptWarning, stacklevel=3)
    return LoopAst(loops, note)


class _TooLong(Exception):
    """isl's AST build passed its operation budget."""


def _tree_ast(scop: Scop, tree: isl.Schedule, max_operations: int | None = None) -> Node:
    """isl's loops of schedule tree ``tree``, its parallel marks on the loops they mark; built
    within ``max_operations`` isl operations (:class:`_TooLong` past them), if given."""
    prefix = iterator_prefix(scop)
    iterator_names = tuple(f"{prefix}{k}" for k in range(MAX_LOOP_DEPTH))
    names = isl.IdList.alloc(isl.DEFAULT_CONTEXT, MAX_LOOP_DEPTH)
    for name in iterator_names:
        names = names.add(isl.Id(name))
    build = isl.AstBuild.from_context(scop.context).set_iterators(names)
    try:
        with isl_options(max_operations=max_operations):
            root = build.node_from_schedule(_for_ast_build(tree).intersect_domain(scop.domain))
    except isl.Error as exc:
        if max_operations is not None and out_of_operations(exc):
            raise _TooLong from None
        raise
    return IslAstTranslator(set(scop.params), iterator_names).node(root)


def _node_count(loops: Node) -> int:
    """The expression nodes of the loops' bounds, conditions and statement arguments."""
    expressions = []
    for node in nodes(loops):
        if isinstance(node, For):
            expressions += [node.init, node.cond]
        elif isinstance(node, If):
            expressions.append(node.cond)
        elif isinstance(node, Run):
            expressions += node.args
    return sum(E.size(e) for e in expressions)


def _atomic(node: isl.ScheduleNode) -> isl.ScheduleNode:
    """A band node with every member's AST loop type (and isolated part's) atomic."""
    if node.get_type() == isl.schedule_node_type.band:
        for k in range(node.band_n_member()):
            node = node.band_member_set_ast_loop_type(k, isl.ast_loop_type.atomic)
            node = node.band_member_set_isolate_ast_loop_type(k, isl.ast_loop_type.atomic)
    return node


def instantiate(stmt: Statement, args: tuple[E.Expr, ...]) -> tuple[E.Access, E.Expr]:
    """The statement's target and value with its iterators replaced by the AST's ``args``."""
    binding = dict(zip(stmt.iterators, args))

    def replace(node: E.Expr):
        if isinstance(node, E.Var) and node.kind == "iter":
            return binding[node.name]
        return None

    return E.substitute(stmt.target, replace), E.substitute(stmt.value, replace)
