"""po.autotune: picks the fastest candidate where one clearly wins, never writes the caller's
arrays, caches its decision, prunes candidates with identical loops, and refuses candidates that
disagree on the result; compiles in parallel (executor=) to the same decision, reports progress,
keeps a time budget, and keeps its decisions in the tuning database for later processes and
po.compile(..., tuned=True)."""
import json
import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import polyopt as po
from polyopt import f64
from polyopt.schedulers import tuning_db
from polyopt.schedulers.autotune import (DEFAULT_CANDIDATES, Candidate, TuningError, clear_decisions,
                                         default_candidates)
from polyopt.targets.cache import clear_cache

TUNING = sys.modules["polyopt.schedulers.autotune"]  # (po.autotune is the function)
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def own_cache_dir(tmp_path, monkeypatch):
    """Each test its own disk cache folder, so its tuning database starts empty (decisions of
    another test would answer without timing)."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("POLYOPT_CACHE_DIR", str(folder))
    monkeypatch.delenv("POLYOPT_CACHE", raising=False)
    return folder


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
    assert len(default_candidates(entry.kernel)) == TUNING.MAX_CANDIDATES > len(DEFAULT_CANDIDATES)
    assert set(tuned.seconds) | set(tuned.skipped) == {c.label for c in default_candidates(entry.kernel)}
    fastest = min(tuned.seconds.values())
    assert tuned.best.label in tuned.seconds and tuned.seconds[tuned.best.label] <= TUNING.SIMPLER_WITHIN * fastest
    labels = [c.label for c in default_candidates(entry.kernel) if c.label in tuned.seconds]
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
    # a round as long as no warm-up run under any load reaches (a loaded CI machine once took
    # over 5 ms for this 16-element kernel's warm-up, and the rounds had 4 runs)
    monkeypatch.setattr(TUNING, "MIN_ROUND_SECONDS", 1000.0)
    po.autotune(triple, np.zeros(16), np.ones(16), candidates=(ORIGINAL,), repeats=2)
    assert len(calls) == 1 + 2 * TUNING.MAX_RUNS_PER_ROUND  # short kernels: the most runs a round


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


# ---- the cost model's neighbourhood, parallel compiles, progress, time budget -------------------
def test_neighbourhood_varies_the_models_tile_sizes_one_loop_at_a_time():
    kernel = po.suite.get("gemm").kernel
    base = po.schedule(kernel, "pluto")
    (tile,) = [step for step in base.trace if step.primitive == "tile"]
    sizes = tile.kwargs["sizes"]
    found = TUNING.neighbourhood(kernel, limit=100)
    assert found and all(c.algorithm == "original" and c.trace is not None for c in found)
    for candidate in found:
        (step,) = [s for s in candidate.trace if s.primitive == "tile"]
        varied = step.kwargs["sizes"]
        changed = [k for k in range(len(sizes)) if varied[k] != sizes[k]]
        assert len(changed) == 1 and varied[changed[0]] in (sizes[changed[0]] // 2, sizes[changed[0]] * 2)
    assert len(TUNING.neighbourhood(kernel, limit=2)) == 2
    assert TUNING.neighbourhood(po.suite.get("jacobi-2d").kernel) == ()  # the model tiles nothing there


@po.kernel
def row_sweep(A: f64["N", "N"], B: f64["N", "N"]):
    for j in range(N):
        for i in range(N):
            A[i, j] = A[i, j] + 3.0 * B[i, j]


SWEEP = (ORIGINAL, PLUTO, Candidate("original again", "original"),
         Candidate("bad", "pluto", (("tile", "nonsense"),)))


def _cold(monkeypatch, tmp_path, name):
    """Nothing compiled: a fresh disk cache folder and an empty memory cache."""
    clear_decisions()
    clear_cache()
    monkeypatch.setenv("POLYOPT_CACHE_DIR", str(tmp_path / name))


def test_parallel_compiles_give_the_serial_decision(monkeypatch, tmp_path):
    n = 1024  # the original order walks the arrays by columns: several times slower
    A, B = np.ones((n, n)), np.ones((n, n))
    pools = []

    class CountedPool(TUNING.ProcessPoolExecutor):
        def __init__(self, *a, **k):
            pools.append(self)
            super().__init__(*a, **k)

    monkeypatch.setattr(TUNING, "ProcessPoolExecutor", CountedPool)
    monkeypatch.setattr(TUNING, "POOL_MIN_CANDIDATES", 2)
    decisions = []
    for name, executor in (("serial", False), ("threads", "threads"), ("pool", None)):
        _cold(monkeypatch, tmp_path, name)
        if executor == "threads":
            with ThreadPoolExecutor(2) as threads:
                tuned = po.autotune(row_sweep, A, B, candidates=SWEEP, num_threads=1, repeats=1, executor=threads)
        else:
            tuned = po.autotune(row_sweep, A, B, candidates=SWEEP, num_threads=1, repeats=1, executor=executor)
        decisions.append((tuned.best, set(tuned.seconds), {k: v.split(":")[0] for k, v in tuned.skipped.items()}))
        tuned.compiled(A.copy(), B)  # loaded from the disk cache, callable
    assert len(pools) == 1  # the default executor was a process pool (for 3 uncached candidates)
    assert decisions[0] == decisions[1] == decisions[2]
    assert decisions[0] == (PLUTO, {"original", "pluto"}, {"original again": "same loops as 'original'", "bad": "failed"})


def test_without_the_disk_cache_a_process_executor_is_not_used(monkeypatch, tmp_path):
    from concurrent.futures import ProcessPoolExecutor
    _cold(monkeypatch, tmp_path, "off")
    monkeypatch.setenv("POLYOPT_CACHE", "0")

    class Refusing(ProcessPoolExecutor):
        def submit(self, *a, **k):
            raise AssertionError("no compile may go to another process without the disk cache")

    with Refusing(1) as pool:
        tuned = po.autotune(row_sweep, np.ones((64, 64)), np.ones((64, 64)), candidates=(ORIGINAL, PLUTO),
                            repeats=1, executor=pool)
    assert set(tuned.seconds) == {"original", "pluto"} and not tuned.stored


def test_progress_lines_show_the_best_so_far(capsys):
    clear_decisions()
    tuned = po.autotune(triple, np.zeros(256), np.ones(256), candidates=(ORIGINAL, PLUTO), repeats=1,
                        progress=True, executor=False)
    err = capsys.readouterr().err
    assert "autotune triple: compile [1/2] 'original'" in err and "compile [2/2] 'pluto'" in err
    assert "best so far 'original'" in err  # after the first candidate's round
    assert f"autotune triple: best {tuned.best.label!r}" in err
    po.autotune(triple, np.zeros(128), np.ones(128), candidates=(ORIGINAL,), repeats=1, progress=False)
    assert capsys.readouterr().err == ""


def test_progress_uses_tqdm_on_a_terminal_where_installed(monkeypatch, capsys):
    import types
    bars = []

    class FakeBar:
        def __init__(self, **options):
            self.options, self.events = options, []
            bars.append(self)

        def __getattr__(self, name):  # update, set_postfix_str, reset, set_description, close
            return lambda *a, **k: self.events.append((name, a))

    monkeypatch.setitem(sys.modules, "tqdm", types.SimpleNamespace(tqdm=FakeBar))
    clear_decisions()
    po.autotune(triple, np.zeros(48), np.ones(48), candidates=(ORIGINAL, PLUTO), repeats=1, progress=True)
    assert not bars and "compile [2/2] 'pluto'" in capsys.readouterr().err  # not a terminal: lines
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    clear_decisions()
    po.autotune(triple, np.zeros(32), np.ones(32), candidates=(ORIGINAL, PLUTO), repeats=1, progress=True)
    (bar,) = bars
    assert bar.options["total"] == 2
    postfixes = [a[0] for name, a in bar.events if name == "set_postfix_str"]
    assert any(p.startswith("best so far 'original'") for p in postfixes) and ("close", ()) in bar.events
    assert "autotune triple: best" in capsys.readouterr().err  # the summary line stays


def test_a_zero_time_budget_stops_after_the_first_candidate():
    clear_decisions()
    tuned = po.autotune(triple, np.zeros(64), np.ones(64), candidates=SWEEP, repeats=3, time_budget=0.0)
    assert tuned.best == ORIGINAL and set(tuned.seconds) == {"original"}
    assert tuned.skipped == {c.label: "time budget" for c in SWEEP[1:]}
    with pytest.raises(ValueError, match="time_budget"):
        po.autotune(triple, np.zeros(8), np.ones(8), time_budget=-1)


# ---- the tuning database -------------------------------------------------------------------------
_SECOND_PROCESS = textwrap.dedent("""
    import json, sys
    import numpy as np
    import polyopt as po
    from polyopt.schedulers.autotune import Candidate
    calls = []
    run = po.CompiledKernel.__call__
    po.CompiledKernel.__call__ = lambda self, *a, **k: (calls.append(1), run(self, *a, **k))[1]
    entry = po.suite.get("gemm")
    args = entry.inputs(entry.sizes("MINI"))
    candidates = (Candidate("original", "original"), Candidate("pluto", "pluto", (("parallel", False),)))
    tuned = po.autotune(entry.kernel, candidates=candidates, num_threads=1, repeats=1, refresh="refresh" in sys.argv, **args)
    print(json.dumps({"stored": tuned.stored, "best": tuned.best.label, "seconds": tuned.seconds, "calls": len(calls)}))
""")


def _second_process(*flags) -> dict:
    done = subprocess.run([sys.executable, "-c", _SECOND_PROCESS, *flags], capture_output=True, text=True,
                          cwd=ROOT, env=os.environ.copy(), timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_a_later_process_gets_the_stored_decision_without_timing(own_cache_dir):
    clear_decisions()
    entry = po.suite.get("gemm")
    args = entry.inputs(entry.sizes("MINI"))
    tuned = po.autotune(entry.kernel, candidates=(ORIGINAL, PLUTO), num_threads=1, repeats=1, **args)
    assert not tuned.stored
    (path,) = (own_cache_dir / "tuning").glob("*.json")
    stored = json.loads(path.read_text())
    assert stored["best"]["label"] == tuned.best.label and stored["key"]["params"] == tuned.params
    assert stored["key"]["dtypes"] == {"A": "float64", "B": "float64", "C": "float64"}
    assert stored["key"]["threads"] == 1 and stored["complete"]
    later = _second_process()  # POLYOPT_CACHE_DIR (the fixture's) is inherited
    assert later == {"stored": True, "best": tuned.best.label, "seconds": tuned.seconds, "calls": 0}
    again = _second_process("refresh")
    assert not again["stored"] and again["calls"] > 0


def test_compile_tuned_compiles_the_stored_candidate(own_cache_dir):
    clear_decisions()
    with pytest.warns(po.errors.PolyoptWarning, match="no po.autotune decision for column_sweep"):
        default = po.compile(column_sweep, tuned=True)
    assert default.llvm_ir == po.compile(column_sweep).llvm_ir
    A, B = np.random.rand(32, 32), np.random.rand(32, 32)
    tuned = po.autotune(column_sweep, A, B, candidates=(ORIGINAL,), repeats=1)  # the original order wins
    chosen = po.compile(column_sweep, tuned=True, num_threads=1)
    assert chosen.llvm_ir == tuned.compiled.llvm_ir != default.llvm_ir
    expected = A + 2.0 * B
    chosen(A, B)
    np.testing.assert_array_equal(A, expected)
    with pytest.raises(po.errors.ArgumentError, match="tuned=True.*drop algorithm"):
        po.compile(column_sweep, tuned=True, algorithm="isl")


def test_a_corrupt_database_entry_is_a_miss(own_cache_dir):
    clear_decisions()
    args = np.zeros(64), np.ones(64)
    first = po.autotune(triple, *args, candidates=(ORIGINAL, PLUTO), repeats=1)
    clear_decisions()
    assert po.autotune(triple, *args, candidates=(ORIGINAL, PLUTO), repeats=1).stored  # from the database
    (path,) = (own_cache_dir / "tuning").glob("*.json")
    for garbage in ("{not json", json.dumps({"key": {}, "best": 3}), ""):
        path.write_text(garbage)
        clear_decisions()
        again = po.autotune(triple, *args, candidates=(ORIGINAL, PLUTO), repeats=1)
        assert not again.stored and set(again.seconds) == set(first.seconds)
        assert json.loads(path.read_text())["best"]["label"] == again.best.label  # written anew
    assert tuning_db.STATS["corrupt"] >= 3


@pytest.mark.parametrize("threads, label", [(1, "pluto tiled "), (2, "pluto tiles ")])
def test_neighbourhood_of_a_wavefront_band_grows_its_innermost_loop(monkeypatch, threads, label):
    """floyd-warshall's ``i, j`` band has no parallel loop: on one thread the model leaves it
    untiled and its neighbours vary the sizes ``tile="auto"`` gives it ("pluto tiled"); on two
    the model tiles it as a wavefront and they vary those ("pluto tiles"). Either way the
    innermost (stride-1) loop may grow to twice the wavefront cap, and every neighbour replays to
    a schedule the verifier accepts."""
    from polyopt.schedulers.tilesize import WAVEFRONT_TILE_CAP
    from polyopt.targets import arguments
    monkeypatch.setattr(arguments, "default_num_threads", lambda: threads)
    kernel = po.suite.get("floyd-warshall").kernel
    found = TUNING.neighbourhood(kernel, limit=100)
    sizes = [next(s for s in c.trace if s.primitive == "tile").kwargs["sizes"] for c in found]
    assert [WAVEFRONT_TILE_CAP, 2 * WAVEFRONT_TILE_CAP] in sizes
    assert all(s[0] <= WAVEFRONT_TILE_CAP and s[1] <= 2 * WAVEFRONT_TILE_CAP for s in sizes)
    assert all(c.label.startswith(label) for c in found)
    for candidate in found:
        po.verify(kernel.scop, candidate.schedule(kernel).tree)


def test_a_new_default_candidate_list_is_timed_again(own_cache_dir, monkeypatch):
    """Decisions among the default candidates are stored under the list's version: the same
    list finds its decision, a changed neighbourhood rule (its version bumped) times again."""
    clear_decisions()
    args = np.zeros(64), np.ones(64)
    assert not po.autotune(triple, *args, repeats=1).stored
    clear_decisions()
    assert po.autotune(triple, *args, repeats=1).stored
    clear_decisions()
    monkeypatch.setattr(TUNING, "NEIGHBOURHOOD_VERSION", TUNING.NEIGHBOURHOOD_VERSION + 1)
    assert not po.autotune(triple, *args, repeats=1).stored
