"""The loop-AST check's bounds on its own time (issue 19: no compile over 10 s): past its CPU-time
limit the check for all sizes gives up and the loops are checked at fixed sizes, and the min and
max bounds of isl's loops are read as conjunctions and disjunctions of their terms."""
from __future__ import annotations

import itertools

import pytest

import polyopt as po
from polyopt.analysis import expr as E
from polyopt.analysis.deps import dependences
from polyopt.analysis.evaluate import evaluate
from polyopt.codegen.ast import build_loop_ast
from polyopt.codegen.ast_check import CHECK_OPERATIONS, _split_comparison, check_for_all_sizes, check_loop_ast
from polyopt.types import boolean, i64

TRIANGLE = '''def triangle(A: f64["N", "N"]):
    for i in range(N):
        for j in range(i + 1):
            A[i, j] = A[i, j] + 1.0
'''


def test_past_its_cpu_time_the_check_for_all_sizes_gives_up_and_fixed_sizes_decide():
    scop = po.kernel_from_source(TRIANGLE).scop
    loops = build_loop_ast(scop, po.schedule(scop, "pluto", tile=4).tree)
    deps = dependences(scop)
    assert check_for_all_sizes(scop, loops, deps, CHECK_OPERATIONS) is True
    assert check_for_all_sizes(scop, loops, deps, CHECK_OPERATIONS, max_seconds=0) is False
    with pytest.warns(po.PolyoptWarning, match=r"gave up .*0 s of CPU time.*checked at 18 fixed sizes"):
        assert check_loop_ast(scop, loops, deps, max_seconds=0) is False


def _var(name: str) -> E.Var:
    return E.Var(name, "iter")


@pytest.mark.parametrize("op", ["<", "<=", ">", ">="])
@pytest.mark.parametrize("side", ["min", "max"])
@pytest.mark.parametrize("on_right", [True, False])
def test_a_comparison_with_a_min_or_max_splits_into_one_that_means_the_same(op, side, on_right):
    bound = E.Binary(side, _var("b"), _var("c"), i64)
    comparison = (E.Binary(op, _var("a"), bound, boolean) if on_right
                  else E.Binary(op, bound, _var("a"), boolean))
    split = _split_comparison(comparison)
    assert split is not None and split.op in ("and", "or")
    for a, b, c in itertools.product(range(-2, 3), repeat=3):
        env = {"a": a, "b": b, "c": c}
        assert evaluate(split, env, {}) == evaluate(comparison, env, {}), (E.to_source(split), env)


def test_other_comparisons_are_read_whole():
    assert _split_comparison(E.Binary("==", _var("a"), E.Binary("min", _var("b"), _var("c"), i64), boolean)) is None
    assert _split_comparison(E.Binary("<=", _var("a"), _var("b"), boolean)) is None
