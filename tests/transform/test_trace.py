"""Traces: the steps a scheduler records replay (from JSON and from ``as_python()`` text) onto the
original schedule of every suite kernel to the same schedule and the same C; and a property test:
random sequences of primitives with random loop handles and options, on random affine nests and
on suite kernels, either are refused (ScheduleError / IllegalScheduleError) or give code that
computes what the interpreter computes (and CUDA C that nvcc builds).

The property tests honour ``POLYOPT_FUZZ_EXAMPLES`` and ``POLYOPT_FUZZ_SEED`` as
tests/test_random_nests.py does; a longer local run::

    POLYOPT_FUZZ_EXAMPLES=500 POLYOPT_FUZZ_SEED=1 nice -n 10 python -m pytest -q -x tests/transform/test_trace.py -k random
"""
from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, event, given, seed, settings
from hypothesis import strategies as st

import polyopt as po
from random_steps import apply_random_steps
from test_random_nests import nest_source

SUITE = po.suite.names()
TUNED = {"tile": "auto", "register_tile": "auto"}
#: The kernels whose generated C is compared too (compiling all of them takes minutes).
CODE_COMPARED = ("gemm", "2mm", "gemver", "lu", "jacobi-1d", "seidel-2d")


def _scheduled(name: str, options: dict):
    kernel = po.suite.get(name).kernel
    return kernel, po.schedule(kernel, "pluto", **options)


# ----- replay identity ---------------------------------------------------------------------------

@pytest.mark.parametrize("options", [{}, TUNED], ids=["default", "tuned"])
@pytest.mark.parametrize("name", SUITE)
def test_pluto_trace_replays_from_json(name, options):
    kernel, s = _scheduled(name, options)
    assert len(s.trace) >= 1
    text = s.trace.to_json()
    assert po.Trace.from_json(text).to_json() == text
    again = po.Trace.from_json(text).apply(po.schedule(kernel, "original"))
    assert again.map.is_equal(s.map)
    assert str(again.tree) == str(s.tree)
    assert [loop.name for loop in again.loops()] == [loop.name for loop in s.loops()]
    assert again.trace.to_json() == text


@pytest.mark.parametrize("options", [{}, TUNED], ids=["default", "tuned"])
@pytest.mark.parametrize("name", SUITE)
def test_pluto_trace_replays_from_python_text(name, options):
    kernel, s = _scheduled(name, options)
    text = s.trace.as_python()
    assert all(line.startswith(("s = s.", "# ")) for line in text.splitlines())
    namespace = {"s": po.schedule(kernel, "original")}
    exec(text, namespace)  # the printed trace is the Python that makes the schedule again
    again = namespace["s"]
    assert again.map.is_equal(s.map)
    assert str(again.tree) == str(s.tree)


@pytest.mark.parametrize("options", [{}, TUNED], ids=["default", "tuned"])
@pytest.mark.parametrize("name", CODE_COMPARED)
def test_replayed_trace_generates_the_same_c(name, options):
    kernel, s = _scheduled(name, options)
    again = po.Trace.from_json(s.trace.to_json()).apply(po.schedule(kernel, "original"))
    assert po.compile(kernel, schedule=again).c_source == po.compile(kernel, schedule=s).c_source


def test_scheduler_steps_carry_notes_as_comments():
    _, s = _scheduled("gemm", TUNED)
    text = s.trace.as_python()
    notes = [step.note for step in s.trace if step.note]
    assert notes and all(f"# {note}" in text for note in notes)
    assert {step.primitive for step in s.trace} >= {"affine_schedule", "tile"}


def test_user_trace_round_trips():
    kernel = po.suite.get("gemm").kernel
    s = po.schedule(kernel, "original")
    i, k, j = s.loops("S1")
    assert (i.name, k.name, j.name) == ("i", "k", "j@S1")
    s = s.tile(k, j, sizes=[[32, 32], [4, 8]]).interchange("k_2", "j@S1_2").parallel(i)
    assert len(s.trace) == 3
    assert s.trace.as_python().splitlines() == [
        "s = s.tile('k', 'j@S1', sizes=[[32, 32], [4, 8]])",
        "s = s.interchange('k_2', 'j@S1_2')",
        "s = s.parallel('i')",
    ]
    again = po.Trace.from_json(s.trace.to_json()).apply(po.schedule(kernel, "original"))
    assert again.map.is_equal(s.map) and str(again.tree) == str(s.tree)


def test_replay_of_an_illegal_step_names_it():
    kernel = po.suite.get("jacobi-1d").kernel
    trace = po.Trace.from_json('[{"primitive": "reverse", "loops": ["t"], "options": {}}]')
    original = po.schedule(kernel, "original")
    assert "t" in [loop.name for loop in original.loops()]
    with pytest.raises(po.IllegalScheduleError, match=r"^reverse\('t'\): illegal schedule"):
        trace.apply(original)


@pytest.mark.parametrize("text", ["{", '{"primitive": "tile"}', '[{"loops": ["i"]}]', "[3]"])
def test_malformed_trace_json(text):
    with pytest.raises(po.ScheduleError):
        po.Trace.from_json(text)


# ----- random steps --------------------------------------------------------------------------------

FUZZ_EXAMPLES = int(os.environ.get("POLYOPT_FUZZ_EXAMPLES", "0"))
FUZZ_SEED = os.environ.get("POLYOPT_FUZZ_SEED")
_seeded = seed(int(FUZZ_SEED)) if FUZZ_SEED is not None else (lambda test: test)
def _fuzz_settings(examples: int):
    return settings(max_examples=FUZZ_EXAMPLES or examples, deadline=None, derandomize=FUZZ_SEED is None,
                    database=None, phases=[Phase.explicit, Phase.generate],
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def assert_same_as_interpreter(kernel, s, args: dict, label: str):
    expected = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in args.items()}
    po.interpret(kernel, **expected)
    got = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in args.items()}
    po.compile(kernel, schedule=s, num_threads=2)(**got)
    for name, value in expected.items():
        if isinstance(value, np.ndarray):
            np.testing.assert_allclose(got[name], value, rtol=1e-9, atol=1e-12,
                                       err_msg=f"{label}, array {name}\n{s.trace.as_python()}")


def _nest_arguments(kernel, n: int) -> dict:
    rng = np.random.default_rng(n)
    size = 3 * n + 8
    return {"A": rng.random((size, size)), "B": rng.random(size)}


def _check_replay(kernel, s):
    again = po.Trace.from_json(s.trace.to_json()).apply(po.schedule(kernel, "original"))
    assert again.map.is_equal(s.map), s.trace.as_python()


@_seeded
@_fuzz_settings(30)
@given(source=nest_source(), n=st.integers(1, 5), data=st.data())
def test_random_steps_on_random_nests(source, n, data):
    kernel = po.kernel_from_source(source)
    s, done = apply_random_steps(data.draw, po.schedule(kernel, "original"))
    if not done:
        return
    _check_replay(kernel, s)
    assert_same_as_interpreter(kernel, s, _nest_arguments(kernel, n), source)


#: Suite kernels for the property test: small at MINI, with reductions, stencils, several nests.
FUZZED_SUITE = ("gemm", "2mm", "jacobi-1d", "trisolv", "atax", "seidel-2d")


@_seeded
@_fuzz_settings(20)
@given(name=st.sampled_from(FUZZED_SUITE), start=st.sampled_from(["original", "pluto"]), data=st.data())
def test_random_steps_on_suite_kernels(name, start, data):
    entry = po.suite.get(name)
    s, done = apply_random_steps(data.draw, po.schedule(entry.kernel, start))
    if not done:
        return
    _check_replay(entry.kernel, s)
    assert_same_as_interpreter(entry.kernel, s, entry.inputs(entry.sizes("MINI")), f"{name} from {start}")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@_seeded
@_fuzz_settings(6)
@given(source=nest_source(), data=st.data())
def test_random_steps_give_cuda_that_nvcc_builds(source, data, tmp_path_factory):
    kernel = po.kernel_from_source(source)
    s, done = apply_random_steps(data.draw, po.schedule(kernel, "original"))
    try:
        cuda = po.cuda_source(kernel, schedule=s)
    except (po.ScheduleError, po.CodegenError) as exc:  # a schedule the GPU mapping declines, a
        event(f"cuda declined: {type(exc).__name__}")  # gpu_promote placement it cannot follow
        return
    folder = tmp_path_factory.mktemp("cuda")
    (folder / "kernel.cu").write_text(cuda)
    result = subprocess.run(["nvcc", "-arch=sm_90", "-c", "kernel.cu"], cwd=folder, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, f"{result.stderr[-4000:]}\n{source}\n{s.trace.as_python()}"
