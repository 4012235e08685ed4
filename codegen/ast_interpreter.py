"""Runs a loop AST (:mod:`polyopt.codegen.ast`) in plain Python, with the iterations of every
loop marked parallel in reverse order.

The schedule verifier checks the schedule tree; this checks what the code generators are handed.
A parallel loop that carries a dependence gives the threaded code a result that is wrong only
when the threads happen to interleave badly; run backwards here, any carried dependence is
reversed on every run, so a wrong parallel mark gives a wrong result deterministically. Slow: for
tests on small sizes, next to :mod:`polyopt.targets.interpreter`.
"""
from __future__ import annotations

import numpy as np

from polyopt.codegen.loop_nodes import Block, For, If, Node, Run
from polyopt.analysis.evaluate import evaluate
from polyopt.targets.interpreter import execute, prepare
from polyopt.analysis.scop import Scop


def run_loop_ast(scop: Scop, loops: Node, params: dict[str, int], scalars: dict,
                 arrays: dict[str, np.ndarray]) -> None:
    """Execute ``loops`` (the loop AST of a schedule of ``scop``) in place on ``arrays``, parallel
    loops last iteration first."""
    env, storage = prepare(scop, params, scalars, arrays)
    with np.errstate(all="ignore"):
        run_loops(scop, loops, env, storage)


def run_loops(scop: Scop, loops: Node, env: dict, storage: dict) -> None:
    """Execute ``loops`` with the values ``env`` (parameters, scalars, enclosing iterators) on
    ``storage`` (from :func:`~polyopt.targets.interpreter.prepare`), parallel loops last
    iteration first: the walk below :func:`run_loop_ast`, for callers that run loops inside
    their own (a GPU program's kernels)."""
    statements = {s.name: s for s in scop.statements}

    def walk(node: Node, env: dict) -> None:
        if isinstance(node, Block):
            for child in node.body:
                walk(child, env)
        elif isinstance(node, If):
            if evaluate(node.cond, env, storage):
                walk(node.then, env)
            elif node.otherwise is not None:
                walk(node.otherwise, env)
        elif isinstance(node, For):
            values = []
            value = evaluate(node.init, env, storage)
            while evaluate(node.cond, {**env, node.var: value}, storage):
                values.append(value)
                value += node.step
            for value in reversed(values) if node.parallel else values:
                walk(node.body, {**env, node.var: value})
        elif isinstance(node, Run):
            stmt = statements[node.statement]
            point = [evaluate(arg, env, storage) for arg in node.args]
            execute(stmt, {**env, **dict(zip(stmt.iterators, point))}, storage)

    walk(loops, env)


__all__ = ["run_loop_ast", "run_loops"]
