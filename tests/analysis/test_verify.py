"""The legality verifier: legal schedules pass, hand-made illegal ones are caught with a real
witness (a dependent pair that the schedule runs in the wrong order)."""
from __future__ import annotations

import re

import islpy as isl
import pytest

import polyopt as po
from polyopt import f64


gemm = po.suite.get("gemm").kernel  # the suite's definition, shared by every test


@po.kernel
def recurrence(A: f64["N"]):
    for i in range(1, N):
        A[i] = A[i - 1] * 0.5 + 1.0


@po.kernel
def antidiagonal(A: f64["N", "N"]):
    for i in range(1, N):
        for j in range(0, N - 1):
            A[i, j] = A[i - 1, j + 1] + 1.0


@po.kernel
def producer_consumer(A: f64["N"], B: f64["N"], C: f64["N"]):
    for i in range(N):
        B[i] = A[i] * 2.0
    for i in range(N):
        C[i] = B[N - 1 - i] + 1.0


jacobi_1d = po.suite.get("jacobi-1d").kernel  # the suite's definition


@po.kernel
def seidel_2d(TSTEPS: int, A: f64["N", "N"]):
    for t in range(TSTEPS):
        for i in range(1, N - 1):
            for j in range(1, N - 1):
                A[i, j] = (A[i - 1, j] + A[i, j - 1] + A[i, j] + A[i, j + 1] + A[i + 1, j]) / 5.0


@po.kernel
def lu(A: f64["N", "N"]):
    for k in range(N):
        for i in range(k + 1, N):
            A[i, k] = A[i, k] / A[k, k]
        for i in range(k + 1, N):
            for j in range(k + 1, N):
                A[i, j] -= A[i, k] * A[k, j]


KERNELS = [gemm, recurrence, antidiagonal, producer_consumer, jacobi_1d, seidel_2d, lu]


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.name)
@pytest.mark.parametrize("algorithm", ["original", "isl", "isl-feautrier"])
def test_scheduler_output_is_legal(kernel, algorithm):
    sched = po.schedule(kernel.scop, algorithm)
    assert isinstance(sched, po.Schedule) and sched.algorithm == algorithm
    assert po.verify(kernel.scop, sched) is None
    assert po.verify(kernel.scop, sched.tree) is None           # an isl.Schedule
    assert po.verify(kernel.scop, sched.map) is None            # a flat union map
    assert po.is_legal(kernel.scop, sched)


def test_original_schedule_is_the_scop_schedule():
    sched = po.schedule(jacobi_1d.scop, "original")
    assert sched.tree.plain_is_equal(jacobi_1d.scop.schedule) and len(sched.trace) == 0


def test_unknown_algorithm_and_options():
    with pytest.raises(po.ScheduleError, match="unknown scheduling algorithm 'nope'"):
        po.schedule(gemm.scop, "nope")
    with pytest.raises(po.ScheduleError, match="unknown option.*allowed: none"):
        po.schedule(gemm.scop, "isl", tile=32)
    with pytest.raises(po.ScheduleError, match=r"original: unknown option\(s\) tile; allowed: parallel"):
        po.schedule(gemm.scop, "original", tile=32)
    assert {"original", "isl", "isl-feautrier"} <= set(po.algorithms())


# ----- the witness of a violation ---------------------------------------------------------------

def _instance(text: str) -> tuple[str, tuple[int, ...]]:
    """``"S1(2, 3)"`` -> ("S1", (2, 3))."""
    match = re.fullmatch(r"(\w+)\((.*)\)", text)
    assert match, text
    values = tuple(int(v) for v in match.group(2).split(",") if v.strip())
    return match.group(1), values


def _time(schedule_map: isl.UnionMap, params: dict, name: str, point: tuple) -> tuple[int, ...]:
    fix = " and ".join(f"{p} = {v}" for p, v in params.items()) or "true"
    instance = isl.UnionSet(f"[{', '.join(params)}] -> {{ {name}[{', '.join(map(str, point))}] : {fix} }}")
    times = schedule_map.intersect_domain(instance).range()
    assert not times.is_empty()
    found = []
    times.foreach_point(lambda p: found.append(tuple(
        p.get_coordinate_val(isl.dim_type.set, k).to_python()
        for k in range(p.get_space().dim(isl.dim_type.set)))))
    assert len(found) == 1  # a schedule gives one time per instance
    return found[0]


def check_witness(scop, schedule_map, error, kind):
    """The error names a real dependent pair that ``schedule_map`` runs out of order."""
    assert isinstance(error, po.IllegalScheduleError) and isinstance(error, po.PolyoptError)
    assert error.kind == kind
    assert set(error.parameters) == set(scop.params)
    params = error.parameters
    fix = " and ".join(f"{p} = {v}" for p, v in params.items()) or "true"
    assert isl.Set(f"[{', '.join(params)}] -> {{ : {fix} }}").is_subset(scop.context)
    src_name, src = _instance(error.source)
    sink_name, sink = _instance(error.sink)
    pair = isl.UnionMap(f"[{', '.join(params)}] -> {{ {src_name}[{', '.join(map(str, src))}] -> "
                        f"{sink_name}[{', '.join(map(str, sink))}] : {fix} }}")
    relation = po.dependences(scop).by_kind()[kind]
    assert pair.is_subset(relation)                                   # a real dependence
    assert pair.is_subset(isl.UnionMap(error.dependence))             # of the reported relation
    t_src = _time(schedule_map, params, src_name, src)
    t_sink = _time(schedule_map, params, sink_name, sink)
    assert not t_src < t_sink                                         # run in the wrong order
    assert (t_src, t_sink) == (tuple(error.source_time), tuple(error.sink_time))
    text = str(error)
    assert f"{kind} dependence" in text and error.source in text and error.sink in text
    return src_name, src, sink_name, sink


def test_reversed_recurrence_is_caught():
    scop = recurrence.scop
    tree = isl.Schedule('{ domain: "[N] -> { S0[i] : 1 <= i < N }", '
                        'child: { schedule: "[N] -> [{ S0[i] -> [(-i)] }]" } }')
    with pytest.raises(po.IllegalScheduleError) as info:
        po.verify(scop, tree)
    _, (i,), _, (i2,) = check_witness(scop, tree.get_map(), info.value, "RAW")
    assert i2 == i + 1
    assert not po.is_legal(scop, tree)
    # the same order as a flat map and as a po.Schedule
    flat = isl.UnionMap("[N] -> { S0[i] -> [-i] }")
    with pytest.raises(po.IllegalScheduleError):
        po.verify(scop, flat)
    with pytest.raises(po.IllegalScheduleError):
        po.verify(scop, po.Schedule.from_tree(scop, tree, algorithm="hand"))


def test_interchange_of_a_minus_one_plus_one_dependence_is_caught():
    scop = antidiagonal.scop
    # original order (i, j) is legal, (j, i) is not: the distance (1, -1) becomes (-1, 1)
    legal = isl.Schedule('{ domain: "[N] -> { S0[i, j] : 1 <= i < N and 0 <= j < N - 1 }", '
                         'child: { schedule: "[N] -> [{ S0[i, j] -> [(i)] }, { S0[i, j] -> [(j)] }]" } }')
    po.verify(scop, legal)
    swapped = isl.Schedule('{ domain: "[N] -> { S0[i, j] : 1 <= i < N and 0 <= j < N - 1 }", '
                           'child: { schedule: "[N] -> [{ S0[i, j] -> [(j)] }, { S0[i, j] -> [(i)] }]" } }')
    with pytest.raises(po.IllegalScheduleError) as info:
        po.verify(scop, po.Schedule.from_tree(scop, swapped, algorithm="hand"))
    _, (i, j), _, (i2, j2) = check_witness(scop, swapped.get_map(), info.value, "RAW")
    assert (i2 - i, j2 - j) == (1, -1)
    # skewing makes the interchange legal: (i + j, i) keeps every dependence forward
    skewed = isl.UnionMap("[N] -> { S0[i, j] -> [i + j, i] }")
    po.verify(scop, skewed)


def test_swapped_statements_in_a_sequence_are_caught():
    scop = producer_consumer.scop
    domain = str(scop.domain)
    swapped = isl.Schedule(
        f'{{ domain: "{domain}", child: {{ sequence: [ '
        '{ filter: "{ S1[i] }", child: { schedule: "[N] -> [{ S1[i] -> [(i)] }]" } }, '
        '{ filter: "{ S0[i] }", child: { schedule: "[N] -> [{ S0[i] -> [(i)] }]" } } ] } }')
    with pytest.raises(po.IllegalScheduleError) as info:
        po.verify(scop, swapped)
    src_name, (i,), sink_name, (i2,) = check_witness(scop, swapped.get_map(), info.value, "RAW")
    assert (src_name, sink_name) == ("S0", "S1") and i2 == info.value.parameters["N"] - 1 - i


def test_fusing_a_reversed_consumer_is_caught():
    # fusion S0[i], S1[i] at the same i is wrong: S1[i] reads B[N-1-i]
    scop = producer_consumer.scop
    fused = isl.UnionMap("[N] -> { S0[i] -> [i, 0]; S1[i] -> [i, 1] }")
    with pytest.raises(po.IllegalScheduleError) as info:
        po.verify(scop, fused)
    check_witness(scop, fused, info.value, "RAW")
    # fusing with the producer reversed is fine
    po.verify(scop, isl.UnionMap("[N] -> { S0[i] -> [N - 1 - i, 0]; S1[i] -> [i, 1] }"))


def test_war_violation_in_a_time_loop():
    scop = jacobi_1d.scop
    # running each time step's second sweep before the first breaks RAW and WAR alike
    bad = isl.UnionMap("[N, TSTEPS] -> { S0[t, i] -> [t, 1, i]; S1[t, i] -> [t, 0, i] }")
    with pytest.raises(po.IllegalScheduleError) as info:
        po.verify(scop, bad)
    check_witness(scop, bad, info.value, info.value.kind)
    assert info.value.kind in ("RAW", "WAR", "WAW")
    # checking WAR alone: pass dependences that hold only the WAR relation
    deps = po.dependences(scop)
    only_war = po.Dependences(scop, deps.tagged_war.subtract(deps.tagged_war), deps.tagged_war,
                              deps.tagged_waw.subtract(deps.tagged_waw))
    with pytest.raises(po.IllegalScheduleError) as info:
        po.verify(scop, bad, only_war)
    check_witness(scop, bad, info.value, "WAR")


def test_same_time_for_dependent_instances_is_illegal():
    scop = recurrence.scop
    flat = isl.UnionMap("[N] -> { S0[i] -> [0] }")  # all at once: sink not strictly after source
    with pytest.raises(po.IllegalScheduleError) as info:
        po.verify(scop, flat)
    err = info.value
    assert err.source_time == err.sink_time == (0,)


def test_missing_instances_fail_coverage():
    scop = recurrence.scop
    partial = isl.Schedule('{ domain: "[N] -> { S0[i] : 1 <= i < N - 1 }", '
                           'child: { schedule: "[N] -> [{ S0[i] -> [(i)] }]" } }')
    with pytest.raises(po.IllegalScheduleError) as info:
        po.verify(scop, partial)
    err = info.value
    assert isinstance(err, po.IncompleteScheduleError)
    assert err.kind == "coverage" and err.parameters == {}
    assert isl.UnionSet(err.missing).is_equal(isl.UnionSet("[N] -> { S0[N - 1] : N >= 2 }"))
    assert isl.UnionSet(err.extra).is_empty()
    assert "S0" in err.source and "does not cover" in str(err)
    # a whole statement left out
    only_s0 = isl.UnionMap("[N] -> { S0[i] -> [0, i] }")
    with pytest.raises(po.IncompleteScheduleError) as info:
        po.verify(producer_consumer.scop, only_s0)
    assert isl.UnionSet(info.value.missing).is_equal(
        isl.UnionSet("[N] -> { S1[i] : 0 <= i < N }").intersect_params(producer_consumer.scop.context))
    assert not po.is_legal(producer_consumer.scop, only_s0)


def test_hand_made_legal_schedules():
    # loop reversal of a dependence-free statement, and a wavefront of seidel-2d
    po.verify(producer_consumer.scop, isl.UnionMap("[N] -> { S0[i] -> [0, -i]; S1[i] -> [1, -i] }"))
    wavefront = isl.UnionMap("[N, TSTEPS] -> { S0[t, i, j] -> [2t + i + j, t, i] }")
    po.verify(seidel_2d.scop, wavefront)
    not_wavefront = isl.UnionMap("[N, TSTEPS] -> { S0[t, i, j] -> [i + j, t, i] }")
    with pytest.raises(po.IllegalScheduleError) as info:
        po.verify(seidel_2d.scop, not_wavefront)
    check_witness(seidel_2d.scop, not_wavefront, info.value, info.value.kind)


def test_compile_refuses_nothing_legal_and_verifies_first():
    # compile verifies its schedule; a legal algorithm compiles
    ck = po.compile(recurrence, algorithm="isl")
    assert ck.schedule.algorithm == "isl"
    po.verify(recurrence.scop, ck.schedule)


# ----- the loop AST check (codegen/ast_check.py): the loops that ship match the schedule -------

from polyopt.analysis import expr as E  # noqa: E402
from polyopt.codegen.loop_nodes import Block, For, If, Run  # noqa: E402
from polyopt.codegen.ast import build_loop_ast  # noqa: E402
from polyopt.codegen.ast_check import check_loop_ast  # noqa: E402
from polyopt.errors import CodegenError, LoopTranslationError  # noqa: E402


def _var(name: str) -> E.Expr:
    return E.Var(name, "param" if name == "N" else "iter")


def _int(value: int) -> E.Expr:
    return E.Const(value, po.i64)


def _op(op: str, a: E.Expr, b: E.Expr) -> E.Expr:
    return E.Binary(op, a, b, po.i64 if op in ("+", "-", "*") else E.boolean)


def _recurrence_loop(init: int = 1, cond: E.Expr | None = None, arg: E.Expr | None = None,
                     parallel: bool = False) -> For:
    """``for c0 = init; cond; c0++: S0(arg)`` over recurrence (S0[i], 1 <= i < N)."""
    return For("c0", _int(init), cond or _op("<", _var("c0"), _var("N")), 1,
               Run("S0", (arg or _var("c0"),)), parallel)


def test_loop_check_accepts_the_schedules_loops():
    check_loop_ast(recurrence.scop, _recurrence_loop())
    for kernel in KERNELS:  # and what isl writes for every algorithm (build_loop_ast checks too)
        for algorithm in ("original", "pluto", "feautrier"):
            check_loop_ast(kernel.scop, po.compile(kernel, algorithm=algorithm).loops)


def test_loop_check_names_a_missing_instance():
    with pytest.raises(LoopTranslationError) as info:
        check_loop_ast(recurrence.scop, _recurrence_loop(init=2))
    err = info.value
    assert isinstance(err, CodegenError)
    assert err.statement == "S0" and err.instance == "S0(1)" and err.problem == "never runs"
    assert err.parameters["N"] >= 2 and "S0(1) never runs (N=" in str(err)


def test_loop_check_names_an_instance_outside_the_domain():
    with pytest.raises(LoopTranslationError) as info:
        check_loop_ast(recurrence.scop, _recurrence_loop(cond=_op("<=", _var("c0"), _var("N"))))
    err = info.value
    assert err.problem == "is not in the domain but runs"
    assert err.instance == f"S0({err.parameters['N']})"


def test_loop_check_names_an_instance_run_twice():
    again = If(_op("==", _var("c0"), _int(3)), Run("S0", (_var("c0"),)))
    loops = For("c0", _int(1), _op("<", _var("c0"), _var("N")), 1, Block((Run("S0", (_var("c0"),)), again)))
    with pytest.raises(LoopTranslationError) as info:
        check_loop_ast(recurrence.scop, loops)
    assert info.value.instance == "S0(3)" and info.value.problem == "runs more than once"
    assert info.value.parameters["N"] >= 4


def test_loop_check_catches_a_reversed_dependence():
    # c0 = 1 .. N-1 runs S0(N - c0): the recurrence backwards
    reversed_loop = _recurrence_loop(arg=_op("-", _var("N"), _var("c0")))
    with pytest.raises(LoopTranslationError) as info:
        check_loop_ast(recurrence.scop, reversed_loop)
    assert info.value.problem.startswith("runs before S0(") and "on which it depends" in str(info.value)


def test_loop_check_catches_a_parallel_loop_that_carries_a_dependence():
    with pytest.raises(LoopTranslationError) as info:
        check_loop_ast(recurrence.scop, _recurrence_loop(parallel=True))
    assert "parallel loop c0" in info.value.problem
    # a loop that carries nothing may be parallel
    check_loop_ast(producer_consumer.scop, Block((
        For("c0", _int(0), _op("<", _var("c0"), _var("N")), 1, Run("S0", (_var("c0"),)), True),
        For("c0", _int(0), _op("<", _var("c0"), _var("N")), 1, Run("S1", (_var("c0"),)), True))))


# ----- the same properties at fixed sizes, by running the loops (codegen/ast_check_sizes.py) ----

from polyopt.codegen.ast_check_sizes import check_at_sizes  # noqa: E402


def test_size_check_accepts_the_schedules_loops_at_every_size():
    checked = check_at_sizes(recurrence.scop, _recurrence_loop(), po.dependences(recurrence.scop))
    assert [point["N"] for point in checked] == list(range(0, 18))


@pytest.mark.parametrize("loops, problem", [
    # a bound wrong only at N = 7: S0(6) never runs there
    (lambda: _recurrence_loop(cond=_op("and", _op("<", _var("c0"), _var("N")),
                                       _op("or", _op("!=", _var("N"), _int(7)), _op("<", _var("c0"), _int(6))))),
     "never runs"),
    (lambda: _recurrence_loop(cond=_op("<=", _var("c0"), _var("N"))), "is not in the domain but runs"),
    (lambda: For("c0", _int(1), _op("<", _var("c0"), _var("N")), 1,
                 Block((Run("S0", (_var("c0"),)), If(_op("==", _var("c0"), _int(3)), Run("S0", (_var("c0"),)))))),
     "runs more than once"),
    (lambda: _recurrence_loop(arg=_op("-", _var("N"), _var("c0"))), "runs before S0("),
    (lambda: _recurrence_loop(parallel=True), "runs in another iteration of the parallel loop c0"),
], ids=["missing-at-one-size", "outside", "twice", "reversed", "parallel"])
def test_size_check_names_what_the_loops_do_wrong(loops, problem):
    with pytest.raises(LoopTranslationError) as info:
        check_at_sizes(recurrence.scop, loops(), po.dependences(recurrence.scop))
    assert info.value.problem.startswith(problem)
    if problem == "never runs":
        assert info.value.instance == "S0(6)" and info.value.parameters == {"N": 7}


def test_loop_check_past_its_budget_checks_fixed_sizes():
    """Past its isl budget the symbolic check runs the loops at fixed sizes: a loop wrong only
    at N = 7 is still caught, and right loops pass with a warning naming the sizes."""
    wrong_at_7 = _recurrence_loop(cond=_op("and", _op("<", _var("c0"), _var("N")),
                                           _op("or", _op("!=", _var("N"), _int(7)), _op("<", _var("c0"), _int(6)))))
    with pytest.raises(LoopTranslationError) as info:
        check_loop_ast(recurrence.scop, wrong_at_7, max_operations=1)
    assert info.value.parameters == {"N": 7}
    with pytest.warns(po.PolyoptWarning, match=r"checked at 18 fixed sizes \(up to N=17\)"):
        assert check_loop_ast(recurrence.scop, _recurrence_loop(), max_operations=1) is False

def test_loop_check_follows_a_loop_that_stops_at_its_first_failing_condition():
    # "c0 != 4" is not an upper bound: the loop runs 1, 2, 3 and stops, so S0(4..N-1) never run
    with pytest.raises(LoopTranslationError) as info:
        check_loop_ast(recurrence.scop, _recurrence_loop(
            cond=_op("and", _op("<", _var("c0"), _var("N")), _op("!=", _var("c0"), _int(4)))))
    assert info.value.problem == "never runs" and info.value.parameters["N"] >= 5


@po.kernel
def strided_rows(A: f64["N", "N"]):
    for i in range(N):
        for j in range(1, N, 3):
            A[i, j] = A[i, j] + 1.0


def test_isl_loops_that_drop_instances_are_never_handed_on():
    """isl (islpy 2026.2) writes loops for this tiled, skewed band over a strided domain whose
    innermost loop (the point loop ``j mod 4``) is missing: they run 6 of the 9 instances per
    row at N = 8. build_loop_ast must refuse them, or (once isl is fixed) give loops that run
    every instance."""
    scop = strided_rows.scop
    node = isl.Schedule.from_domain(scop.domain).get_root().child(0)
    for member in ("i", "j + i - (j) mod 4 - (i) mod 4", "(j) mod 4"):
        node = node.insert_partial_schedule(
            isl.MultiUnionPwAff(f"[N] -> [{{ S0[i, j] -> [({member})] }}]")).child(0)
    try:
        loops = build_loop_ast(scop, node.get_schedule())
    except LoopTranslationError as err:
        assert err.statement == "S0" and err.problem == "never runs" and err.parameters["N"] >= 8
    else:
        import numpy as np
        from polyopt.codegen.ast_interpreter import run_loop_ast
        for n in (8, 9, 10):
            expected, got = np.zeros((n, n)), np.zeros((n, n))
            po.interpret(strided_rows, expected)
            run_loop_ast(scop, loops, {"N": n}, {}, {"A": got})
            assert (got == expected).all()
