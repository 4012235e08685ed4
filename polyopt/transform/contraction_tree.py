"""The schedule tree a contraction's GPU kernel runs (:meth:`polyopt.Schedule.gpu_contract`):
one block/thread coordinate per output index, and in each thread the init statement, the
update's K loops in loop order and the epilogue statements. The CUDA target emits such a tree
as one batched-GEMM kernel (:mod:`polyopt.codegen.cuda_contraction`); a program of contractions
(:func:`~polyopt.analysis.contraction.find_contractions`) runs :func:`program_tree`, one such
kernel per nest in program order."""
from __future__ import annotations

from collections.abc import Sequence
from functools import reduce

import islpy as isl

from polyopt.analysis.contraction import Contraction
from polyopt.analysis.scop import Scop
from polyopt.transform.marks import GPU_BLOCK_MARK, GPU_THREAD_MARK


def coordinate_tree(scop: Scop, c: Contraction) -> isl.Schedule:
    """The schedule tree the contraction kernel runs: one coordinate band (under
    ``gpu_block``/``gpu_thread`` marks) per output index, then per thread the init statement,
    the update's K loops in loop order and the epilogue statements (the mapping reads the
    kernel from it)."""
    statements = [scop.statement(name) for name in c.statements]
    update = scop.statement(c.update_statement)
    schedule = isl.Schedule.from_domain(scop.domain)
    node = schedule.get_root().child(0)
    if len(statements) > 1:
        filters = isl.UnionSetList.alloc(node.get_ctx(), len(statements))
        for stmt in statements:
            filters = filters.add(isl.UnionSet.from_set(stmt.domain))
        node = node.insert_sequence(filters).child(statements.index(update)).child(0)
    for index in reversed(c.k):
        member = _member([(update, update.iterators.index(index))])
        node = node.insert_partial_schedule(isl.MultiUnionPwAff.from_union_pw_aff(member))
    node = node.get_schedule().get_root().child(0)
    for d in reversed(range(len(c.output_index))):
        pieces = [(stmt, stmt.iterators.index(stmt.target.indices[d].name)) for stmt in statements]
        node = node.insert_partial_schedule(isl.MultiUnionPwAff.from_union_pw_aff(_member(pieces)))
        node = node.band_member_set_coincident(0, 1)
        node = node.insert_mark(isl.Id(GPU_THREAD_MARK)).insert_mark(isl.Id(GPU_BLOCK_MARK))
    return node.get_schedule()


def program_tree(nests: Sequence[tuple[Scop, Contraction]]) -> isl.Schedule:
    """The schedule tree of a program of contractions: a sequence whose children are each
    nest's :func:`coordinate_tree` (``(nest Scop, contraction)`` pairs, in program order), so
    each kernel runs whole before the next, as each nest does in the original program."""
    trees = [coordinate_tree(nest, c) for nest, c in nests]
    return reduce(isl.Schedule.sequence, trees)


def _member(pieces) -> isl.UnionPwAff:
    """The coordinate that is iterator ``position`` of each ``(statement, position)``."""
    member = None
    for stmt, position in pieces:
        space = isl.LocalSpace.from_space(stmt.domain.get_space())
        aff = isl.PwAff.from_aff(isl.Aff.var_on_domain(space, isl.dim_type.set, position))
        piece = isl.UnionPwAff.from_pw_aff(aff.intersect_domain(stmt.domain))
        member = piece if member is None else member.union_add(piece)
    return member
