"""The loop-AST check (codegen/ast_check.py) completes on the suite kernels it gave up on, and
still rejects loops that differ from the schedule (the hand-made cases and isl's own dropped
instances are in tests/analysis/test_verify.py)."""
from __future__ import annotations

import warnings
from dataclasses import replace

import pytest

import polyopt as po
from polyopt.codegen.ast_check import check_loop_ast
from polyopt.codegen.loop_nodes import Block, For, nodes
from polyopt.errors import LoopTranslationError, PolyoptWarning
from polyopt.targets.cache import clear_cache


@pytest.mark.parametrize("name", ["correlation", "covariance", "seidel-2d", "gemm"])
def test_the_check_completes_with_the_default_options(name, monkeypatch):
    """These gave up (PolyoptWarning) after 4,000,000 isl operations before the one-pass check."""
    monkeypatch.setenv("POLYOPT_CACHE", "0")  # compiled here, not loaded from an earlier test's entry
    clear_cache()
    with warnings.catch_warnings():
        warnings.simplefilter("error", PolyoptWarning)
        compiled = po.compile(po.suite.get(name).kernel)
    assert compiled.compile_times["ast_check"] >= 0


def _largest_block(loops):
    return max((n for n in nodes(loops) if isinstance(n, Block)), key=lambda b: len(b.body))


def _replace_node(node, old, new):
    """``node`` with the node ``old`` (by identity) replaced by ``new``."""
    if node is old:
        return new
    if isinstance(node, Block):
        return Block(tuple(_replace_node(c, old, new) for c in node.body))
    if isinstance(node, For):
        return replace(node, body=_replace_node(node.body, old, new))
    if hasattr(node, "then"):
        otherwise = None if node.otherwise is None else _replace_node(node.otherwise, old, new)
        return replace(node, then=_replace_node(node.then, old, new), otherwise=otherwise)
    return node


def test_a_dropped_leaf_of_a_register_tile_is_caught():
    kernel = po.suite.get("gemm").kernel
    loops = po.compile(kernel).loops
    block = _largest_block(loops)  # the unrolled register tile
    with pytest.raises(LoopTranslationError) as info:
        check_loop_ast(kernel.scop, _replace_node(loops, block, Block(block.body[:-1])))
    assert info.value.problem == "never runs"


def test_a_leaf_run_twice_in_a_register_tile_is_caught():
    kernel = po.suite.get("gemm").kernel
    loops = po.compile(kernel).loops
    block = _largest_block(loops)
    with pytest.raises(LoopTranslationError) as info:
        check_loop_ast(kernel.scop, _replace_node(loops, block, Block(block.body + block.body[:1])))
    assert info.value.problem == "runs more than once"


def test_loops_swapped_against_a_dependence_are_caught():
    kernel = po.suite.get("gemm").kernel  # C *= beta, then C += alpha * A * B: two loop nests
    loops = po.compile(kernel).loops
    assert isinstance(loops, Block) and len(loops.body) == 2
    with pytest.raises(LoopTranslationError) as info:
        check_loop_ast(kernel.scop, Block(loops.body[::-1]))
    assert info.value.problem.startswith("runs before S0(") and info.value.statement == "S1"


def test_a_time_loop_marked_parallel_is_caught():
    kernel = po.suite.get("seidel-2d").kernel
    loops = po.compile(kernel).loops
    first = next(n for n in nodes(loops) if isinstance(n, For))  # the tiled time loop
    with pytest.raises(LoopTranslationError) as info:
        check_loop_ast(kernel.scop, _replace_node(loops, first, replace(first, parallel=True)))
    assert "parallel loop" in info.value.problem
