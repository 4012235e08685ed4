"""po.autotune: picks the fastest candidate where one clearly wins, never writes the caller's
arrays, caches its decision, prunes candidates with identical loops, and refuses candidates that
disagree on the result."""
import sys

import numpy as np
import pytest

import polyopt as po
from polyopt import f64
from polyopt.schedulers.autotune import DEFAULT_CANDIDATES, Candidate, TuningError, clear_decisions

TUNING = sys.modules["polyopt.schedulers.autotune"]  # (po.autotune is the function)


@po.kernel
def column_sweep(A: f64["N", "N"], B: f64["N", "N"]):
    for j in range(N):
        for i in range(N):
            A[i, j] = A[i, j] + 2.0 * B[i, j]


@po.kernel
def triple(A: f64["N"], B: f64["N"]):
    for i in range(N):
        A[i] = 3.0 * B[i]


@po.kernel
def double(A: f64["N"], B: f64["N"]):
    for i in range(N):
        A[i] = 2.0 * B[i]


ORIGINAL = Candidate("original", "original")
PLUTO = Candidate("pluto", "pluto", (("parallel", False),))


def test_autotune_picks_the_clear_winner_and_leaves_arrays_alone():
    clear_decisions()
    n = 1024  # the original order walks 8 MB arrays column by column: several times slower
    A, B = np.ones((n, n)), np.arange(n * n, dtype=float).reshape(n, n)
    before = A.copy(), B.copy()
    # prune=1e9: both are timed `repeats` times whatever the first round says
    tuned = po.autotune(column_sweep, A, B, candidates=(ORIGINAL, PLUTO), repeats=3, num_threads=1, prune=1e9)
    assert tuned.best == PLUTO
    assert tuned.seconds["pluto"] < tuned.seconds["original"]
    assert tuned.params == {"N": n}
    np.testing.assert_array_equal(A, before[0])
    np.testing.assert_array_equal(B, before[1])
    tuned.compiled(A, B)  # the returned kernel is usable as is
    np.testing.assert_array_equal(A, before[0] + 2.0 * before[1])


def test_default_candidates_on_a_suite_kernel_agree_and_are_cached():
    clear_decisions()
    entry = po.suite.get("gemm")
    args = entry.inputs(entry.sizes("MINI"))
    pristine = {k: v.copy() for k, v in args.items() if isinstance(v, np.ndarray)}
    tuned = po.autotune(entry.kernel, repeats=1, **args)
    assert set(tuned.seconds) | set(tuned.skipped) == {c.label for c in DEFAULT_CANDIDATES}
    fastest = min(tuned.seconds.values())
    assert tuned.best.label in tuned.seconds and tuned.seconds[tuned.best.label] <= TUNING.SIMPLER_WITHIN * fastest
    labels = [c.label for c in DEFAULT_CANDIDATES if c.label in tuned.seconds]
    assert all(tuned.seconds[label] > TUNING.SIMPLER_WITHIN * fastest
               for label in labels[:labels.index(tuned.best.label)])  # no earlier one as good
    for key, value in pristine.items():
        np.testing.assert_array_equal(args[key], value)
    assert po.autotune(entry.kernel, repeats=1, **args) is tuned  # same kernel and sizes: cached
    expected = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in args.items()}
    entry.reference(**expected)
    tuned.compiled(**args)
    np.testing.assert_allclose(args["C"], expected["C"], rtol=1e-9)


def test_candidates_with_the_same_loops_are_timed_once():
    clear_decisions()
    again = Candidate("original again", "original")
    tuned = po.autotune(triple, np.zeros(64), np.ones(64), candidates=(ORIGINAL, again), repeats=1)
    assert tuned.skipped == {"original again": "same loops as 'original'"}
    assert set(tuned.seconds) == {"original"}


def test_clearly_slower_candidates_are_timed_only_once(monkeypatch):
    clear_decisions()
    calls = []
    original_run = po.CompiledKernel.__call__

    def counting(self, *args, **kwargs):
        calls.append(self.schedule.algorithm)
        return original_run(self, *args, **kwargs)

    monkeypatch.setattr(po.CompiledKernel, "__call__", counting)
    monkeypatch.setattr(TUNING, "MIN_ROUND_SECONDS", 0.0)  # one run per round
    n = 1024
    tuned = po.autotune(column_sweep, np.ones((n, n)), np.ones((n, n)), candidates=(ORIGINAL, PLUTO),
                        repeats=4, num_threads=1, prune=1.0)
    slower = "original" if tuned.best == PLUTO else "pluto"
    assert calls.count(slower) == 2  # the checked warm-up and the first round
    assert calls.count(tuned.best.algorithm) == 1 + 4  # warm-up, then one run in each of 4 rounds


def test_short_kernels_run_several_times_a_round(monkeypatch):
    clear_decisions()
    calls = []
    original_run = po.CompiledKernel.__call__
    monkeypatch.setattr(po.CompiledKernel, "__call__",
                        lambda self, *a, **k: (calls.append(1), original_run(self, *a, **k)))
    po.autotune(triple, np.zeros(16), np.ones(16), candidates=(ORIGINAL,), repeats=2)
    assert len(calls) == 1 + 2 * TUNING.MAX_RUNS_PER_ROUND  # microseconds: the most runs a round


class _Other(Candidate):
    """A candidate that (wrongly) compiles another kernel: stands in for a miscompilation."""

    def compile(self, kernel, num_threads):
        return po.compile(double, algorithm=self.algorithm, num_threads=num_threads)


def test_candidates_that_disagree_are_refused():
    clear_decisions()
    with pytest.raises(TuningError, match="'wrong' computes a different 'A'"):
        po.autotune(triple, np.zeros(64), np.ones(64), candidates=(ORIGINAL, _Other("wrong", "pluto")))


def test_bad_tuning_arguments_are_refused():
    with pytest.raises(ValueError, match="prune"):
        po.autotune(triple, np.zeros(8), np.ones(8), prune=0.5)
    with pytest.raises(ValueError, match="repeats"):
        po.autotune(triple, np.zeros(8), np.ones(8), repeats=0)
    with pytest.raises(TypeError, match="candidates"):
        po.autotune(triple, np.zeros(8), np.ones(8), candidates=("original",))
    with pytest.raises(TypeError, match="dtype"):
        po.autotune(triple, np.zeros(8, dtype=np.float32), np.ones(8))


def test_shifted_candidate_puts_doitgens_sum_outside_its_stride_one_loop():
    """"pluto shifted" schedules doitgen's ``sum[p] += A[r][q][s] * C4[s][p]`` with p innermost
    (C4 walked by rows, the loop vectorizable), and computes what numpy does."""
    from polyopt.codegen.loop_nodes import For, Run, nodes

    shifted = next(c for c in DEFAULT_CANDIDATES if c.label == "pluto shifted")
    entry = po.suite.get("doitgen")
    compiled = shifted.compile(entry.kernel, num_threads=1)
    innermost = [loop for loop in nodes(compiled.loops) if isinstance(loop, For)
                 and any(isinstance(n, Run) and n.statement == "S1" for n in nodes(loop.body))
                 and not any(isinstance(n, For) for n in nodes(loop.body))]
    assert len(innermost) == 1
    (run,) = [n for n in nodes(innermost[0].body) if isinstance(n, Run)]
    assert isinstance(run.args[2], po.analysis.expr.Var) and run.args[2].name == innermost[0].var
    args = entry.inputs(entry.sizes("SMALL"))
    expected = {k: v.copy() for k, v in args.items()}
    entry.reference(**expected)
    compiled(**args)
    np.testing.assert_allclose(args["A"], expected["A"], rtol=1e-12)


def test_steady_candidate_beats_one_fast_only_at_times(monkeypatch):
    """Rounds count by their median: a candidate that is fastest in one round of three (threads
    on a busy machine) loses to one that is steadily a little slower."""
    import time

    clear_decisions()
    monkeypatch.setattr(TUNING, "MIN_ROUND_SECONDS", 0.0)  # one run per round
    calls = {"original": 0, "pluto": 0}
    original_run = po.CompiledKernel.__call__

    def timed(self, *args, **kwargs):
        algorithm = self.schedule.algorithm
        calls[algorithm] += 1
        steady, first_round = algorithm == "original", calls[algorithm] == 2  # after the warm-up
        time.sleep(0.004 if steady else 0.001 if first_round else 0.008)
        original_run(self, *args, **kwargs)

    monkeypatch.setattr(po.CompiledKernel, "__call__", timed)
    A, B = np.ones((64, 64)), np.ones((64, 64))
    tuned = po.autotune(column_sweep, A, B, candidates=(ORIGINAL, PLUTO), repeats=3, num_threads=1, prune=1e9)
    assert calls == {"original": 4, "pluto": 4}
    assert tuned.best == ORIGINAL and tuned.seconds["original"] < tuned.seconds["pluto"]


def test_earlier_candidate_wins_within_the_noise(monkeypatch):
    """A candidate 2 % faster than the original order (within SIMPLER_WITHIN) does not replace it."""
    import time

    clear_decisions()
    monkeypatch.setattr(TUNING, "MIN_ROUND_SECONDS", 0.0)
    original_run = po.CompiledKernel.__call__

    def timed(self, *args, **kwargs):
        time.sleep(0.0100 if self.schedule.algorithm == "original" else 0.0098)
        original_run(self, *args, **kwargs)

    monkeypatch.setattr(po.CompiledKernel, "__call__", timed)
    A, B = np.ones((64, 64)), np.ones((64, 64))
    tuned = po.autotune(column_sweep, A, B, candidates=(ORIGINAL, PLUTO), repeats=3, num_threads=1, prune=1e9)
    assert TUNING.SIMPLER_WITHIN > 1.02 and tuned.best == ORIGINAL


def test_a_steered_schedule_is_a_candidate_and_the_result_is_a_schedule():
    # a hand-made trace competes like any configuration; the winner comes back as a Schedule
    start = po.schedule(column_sweep, "original")
    steered = start.interchange(*start.loops("S0"))
    mine = Candidate("interchanged", "original", trace=steered.trace)
    A, B = np.random.rand(64, 64), np.random.rand(64, 64)
    tuned = po.autotune(column_sweep, A, B, candidates=(ORIGINAL, mine), repeats=1, num_threads=1, prune=1e9)
    assert set(tuned.seconds) == {"original", "interchanged"}
    assert isinstance(tuned.schedule, po.Schedule) and tuned.schedule is tuned.compiled.schedule
    if tuned.best.label == "interchanged":
        assert tuned.schedule.map.is_equal(steered.map)
