"""The loop-AST check on unrolled code: runs of one statement whose constants step evenly are
read as one template (codegen/ast_rolled.py); the check must still see every run as it is."""
from __future__ import annotations

import pytest

import polyopt as po
from polyopt import f64
from polyopt.analysis import expr as E
from polyopt.codegen.ast_check import check_loop_ast
from polyopt.codegen.ast_rolled import rolled_runs
from polyopt.codegen.loop_nodes import Block, For, If, Run
from polyopt.errors import LoopTranslationError


@po.kernel
def recurrence(A: f64["N"]):
    for i in range(1, N):
        A[i] = A[i - 1] + 1.0


def _var(name: str) -> E.Expr:
    return E.Var(name, "param" if name == "N" else "iter")


def _int(value: int) -> E.Expr:
    return E.Const(value, po.i64)


def _op(op: str, a: E.Expr, b: E.Expr) -> E.Expr:
    return E.Binary(op, a, b, po.i64 if op in ("+", "-", "*", "//", "max") else E.boolean)


def _run(offset: int) -> Run:
    return Run("S0", (_op("+", _var("c0"), _int(offset)),))


def _unrolled(offsets: list[int]) -> Block:
    """``for c0 = 1; c0 + 3 < N; c0 += 4`` running S0(c0 + offset) for each offset in turn, then
    the remainder loop ``for c0 = max(1, 1 + 4 * ((N - 1) // 4)); c0 < N; c0++``: the recurrence
    unrolled by four where ``offsets`` is 0, 1, 2, 3."""
    main = For("c0", _int(1), _op("<", _op("+", _var("c0"), _int(3)), _var("N")), 4,
               Block(tuple(_run(offset) for offset in offsets)))
    start = _op("max", _int(1), _op("+", _int(1), _op("*", _int(4), _op("//", _op("-", _var("N"), _int(1)), _int(4)))))
    rest = For("c0", start, _op("<", _var("c0"), _var("N")), 1, _run(0))
    return Block((main, rest))


def test_runs_that_step_evenly_are_one_template():
    place = E.Var("<position 0>", "iter")
    groups = rolled_runs(tuple(_run(k) for k in range(4)), place)
    assert [(start, stop) for start, stop, _ in groups] == [(0, 4)]
    template = groups[0][2]
    assert isinstance(template, Run) and place in E.walk(template.args[0])
    # an uneven step, another statement, a guard: each ends a group
    body = (_run(0), _run(1), _run(3), Run("S1", (_var("c0"),)), If(_op("<", _var("c0"), _var("N")), _run(0)))
    assert [(start, stop) for start, stop, _ in rolled_runs(body, place)] == [(0, 2), (2, 3), (3, 4), (4, 5)]


def test_check_accepts_the_unrolled_recurrence():
    check_loop_ast(recurrence.scop, _unrolled([0, 1, 2, 3]))


@pytest.mark.parametrize("offsets, problem", [
    ([1, 0, 2, 3], "runs before S0("),         # two copies swapped: the dependence runs backwards
    ([0, 1, 1, 3], "runs more than once"),     # one copy repeated (and S0(c0 + 2) left out)
    ([0, 1, 2], "never runs"),                 # one copy missing: S0(c0 + 3)
    ([0, 1, 2, 3, 4], "runs more than once"),  # one copy too many: the next iteration's first
])
def test_check_sees_every_copy_of_an_unrolled_block(offsets, problem):
    with pytest.raises(LoopTranslationError) as info:
        check_loop_ast(recurrence.scop, _unrolled(offsets))
    assert problem in str(info.value)


@po.kernel
def diagonal(A: f64["N", "N"]):
    for i in range(N):
        for j in range(i, i + 1):  # the domain's j = i is an equality
            A[i, j] = 1.0


def test_check_names_an_instance_off_an_equality_of_the_domain():
    on_diagonal = Run("S0", (_var("c0"), _var("c0")))
    check_loop_ast(diagonal.scop, For("c0", _int(0), _op("<", _var("c0"), _var("N")), 1, on_diagonal))
    off = If(_op("==", _var("c0"), _int(3)), Run("S0", (_var("c0"), _op("+", _var("c0"), _int(1)))))
    loops = For("c0", _int(0), _op("<", _var("c0"), _var("N")), 1, Block((on_diagonal, off)))
    with pytest.raises(LoopTranslationError) as info:
        check_loop_ast(diagonal.scop, loops)
    assert info.value.instance == "S0(3, 4)" and info.value.problem == "is not in the domain but runs"
