"""The loop AST's last fallback (issue 19): where isl's loops of a schedule tree drop instances
with either loop type, build_loop_ast hands on the loops of the program's original order,
checked like any others, and the compiled kernel says so (a schedule note, a PolyoptWarning)."""
from __future__ import annotations

import re

import numpy as np
import pytest

import polyopt as po
import polyopt.codegen.ast as ast_module
from polyopt.codegen.ast import generate_loop_ast
from polyopt.codegen.ast_check import check_loop_ast
from polyopt.codegen.loop_nodes import For, nodes
from polyopt.targets.cache import clear_cache

# Found by the long fuzz: with these options isl's loops of pluto's tree (and its atomic loops)
# leave S1(6) out at N = 9; isl's loops of the flat schedule map leave it out at N = 10.
ISSUE_19 = '''def nest(A: f64["3 * N + 8", "3 * N + 8"], B: f64["3 * N + 8"]):
    for i0_1 in range(2, N - 1):
        for i0_2 in range(0, i0_1 + 1):
            for i0_3 in range(1, N - 1):
                if i0_1 <= i0_2:
                    B[0] = 0.5 * B[i0_2 + (N - 1 - i0_3) + 0] + 0.5 * B[(N - 1 - i0_3) + 0]
    for i3_1 in range(0, N - 0):
        if i3_1 + i3_1 >= N - 1:
            B[0] = 0.5 * B[i3_1 + 0]
'''
OPTIONS = {"tile": 5, "fuse": "max", "param_shifts": True}


@pytest.fixture
def uncached(monkeypatch):
    """Compiles from scratch: no disk cache, no kernel compiled before in this process."""
    monkeypatch.setenv("POLYOPT_CACHE", "0")
    clear_cache()
    yield
    clear_cache()


def test_the_original_order_runs_where_isls_loops_drop_instances(uncached):
    kernel = po.kernel_from_source(ISSUE_19)
    with pytest.warns(po.PolyoptWarning, match=r"S1\(6\) never runs \(N=9\).*original order"):
        ck = po.compile(kernel, **OPTIONS)
    assert any("original order" in note for note in ck.schedule.notes)
    assert not any(isinstance(n, For) and n.parallel for n in nodes(ck.loops))
    assert check_loop_ast(kernel.scop, ck.loops) is True  # checked for all sizes at once
    for n in (0, 2, 5, 8, 9, 10, 13):
        size = 3 * n + 8
        rng = np.random.default_rng(n)
        A, B = rng.random((size, size)), rng.random(size)
        expected = [A.copy(), B.copy()]
        po.interpret(kernel, *expected)
        got = [A.copy(), B.copy()]
        ck(*got)
        for have, want in zip(got, expected):
            np.testing.assert_allclose(have, want, rtol=1e-12, atol=1e-12, err_msg=f"N={n}")


def test_loops_of_the_tree_that_pass_need_no_fallback():
    scop = po.kernel_from_source(ISSUE_19).scop
    built = generate_loop_ast(scop, po.schedule(scop, "pluto").tree)
    assert built.fallback == ""


def test_the_atomic_retry_is_checked_at_fixed_sizes_once_the_symbolic_check_gave_up(monkeypatch):
    """With no budget for the check for all sizes, the tree's loops are checked at fixed sizes
    (they leave S1 instances out); the atomic loops go straight to the fixed sizes, and the
    original order's loops still get their own check for all sizes."""
    scop = po.kernel_from_source(ISSUE_19).scop
    tree = po.schedule(scop, "pluto", **OPTIONS).tree
    symbolic = []
    check = ast_module.check_for_all_sizes
    monkeypatch.setattr(ast_module, "CHECK_OPERATIONS", 1)
    monkeypatch.setattr(ast_module, "check_for_all_sizes", lambda *args: symbolic.append(args) or check(*args))
    with pytest.warns(po.PolyoptWarning, match="original order"):
        built = generate_loop_ast(scop, tree)
    assert len(symbolic) == 1  # the tree's loops only
    assert re.search(r"S1\(\d+\) never runs", built.fallback)
    assert check_loop_ast(scop, built.loops) is True


def test_an_ast_build_past_its_budget_falls_back_with_a_note(monkeypatch):
    """isl's AST build of a schedule tree gets an operation budget (a tiled, shifted random nest
    took isl 6 s); past it, and past the atomic loops' half of it, the original order's loops
    run, and the note says why."""
    scop = po.kernel_from_source(ISSUE_19).scop
    tree = po.schedule(scop, "pluto").tree
    monkeypatch.setattr(ast_module, "AST_OPERATIONS", 10)
    with pytest.warns(po.PolyoptWarning, match="took more than 10 isl operations"):
        built = generate_loop_ast(scop, tree)
    assert "isl's atomic loops of the schedule tree took more than 2 isl operations" in built.fallback
    assert check_loop_ast(scop, built.loops) is True


@pytest.mark.parametrize("options", [{}, {"tile": "auto", "register_tile": "auto"}])
def test_the_suites_largest_ast_builds_within_the_budget(options, monkeypatch):
    """3mm's loops (the suite's largest build, 3-4M isl operations) are the ones isl builds with
    no budget: the budget only stops builds far past the suite's."""
    schedule = po.compile(po.suite.get("3mm").kernel, **options).schedule
    built = generate_loop_ast(schedule.scop, schedule.tree)
    monkeypatch.setattr(ast_module, "AST_OPERATIONS", 10**12)
    assert generate_loop_ast(schedule.scop, schedule.tree).loops == built.loops


def test_a_bound_too_large_to_read_is_checked_at_fixed_sizes(monkeypatch):
    """Loop bounds past MAX_BOUND_TERMS nodes are not read into isl (one bound of 4,162 nodes took
    isl 9 s, in one call no time limit stops): the loops are run at fixed sizes instead."""
    import polyopt.codegen.ast_check as check_module
    scop = po.kernel_from_source(ISSUE_19).scop
    built = generate_loop_ast(scop, po.schedule(scop, "pluto").tree)
    monkeypatch.setattr(check_module, "MAX_BOUND_TERMS", 1)
    with pytest.warns(po.PolyoptWarning, match="checked at"):
        assert check_loop_ast(scop, built.loops) is False
