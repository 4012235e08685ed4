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
REFUSED = (po.ScheduleError, po.IllegalScheduleError)

PRIMITIVE_NAMES = ("tile", "split", "interchange", "permute", "skew", "shift", "reverse", "fuse",
                   "distribute", "wavefront", "parallel", "vectorize", "unroll", "register_tile")


def _fuzz_settings(examples: int):
    return settings(max_examples=FUZZ_EXAMPLES or examples, deadline=None, derandomize=FUZZ_SEED is None,
                    database=None, phases=[Phase.explicit, Phase.generate],
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _within(draw, loop):
    """None, or a random non-empty subset of the statements the loop runs."""
    if len(loop.statements) < 2 or draw(st.booleans()):
        return None
    return draw(st.lists(st.sampled_from(loop.statements), min_size=1, unique=True))


def _nest_of(draw, s, count: int):
    """``count`` loops around one statement, consecutive, outermost first (or fewer there)."""
    statement = draw(st.sampled_from([stmt.name for stmt in s.scop.statements]))
    around = s.loops(statement)
    if not around:
        return ()
    count = min(count, len(around))
    start = draw(st.integers(0, len(around) - count))
    return around[start:start + count]


def random_step(draw, s):
    """(primitive, loops, options) drawn for schedule ``s``, handles from its loops."""
    primitive = draw(st.sampled_from(PRIMITIVE_NAMES))
    every = s.loops()
    if not every:
        return primitive, (), {}
    one = draw(st.sampled_from(every))
    if primitive == "tile":
        loops = _nest_of(draw, s, draw(st.integers(1, 3)))
        size = st.integers(1, 6)
        sizes = draw(st.one_of(size, st.lists(size, min_size=len(loops), max_size=len(loops)),
                               st.lists(st.lists(size, min_size=len(loops), max_size=len(loops)),
                                        min_size=2, max_size=2).map(lambda levels: [[a * b for a, b in zip(*levels)],
                                                                                    levels[1]])))
        return primitive, loops, {"sizes": sizes, "within": _within(draw, loops[0]) if loops else None}
    if primitive == "split":
        return primitive, (one,), {"factor": draw(st.integers(1, 5)), "within": _within(draw, one)}
    if primitive in ("interchange", "skew", "wavefront"):
        loops = _nest_of(draw, s, 3)
        if len(loops) < 2:
            return primitive, (one, one), {}
        a, b = sorted(draw(st.lists(st.integers(0, len(loops) - 1), min_size=2, max_size=2, unique=True)))
        options = {}
        if primitive == "skew":
            options["factor"] = draw(st.sampled_from([1, 1, 2, -1]))
        options["within"] = _within(draw, loops[a])
        return primitive, (loops[a], loops[b]), options
    if primitive == "permute":
        loops = list(_nest_of(draw, s, 3))
        draw(st.randoms(use_true_random=False)).shuffle(loops)
        return primitive, tuple(loops), {"within": _within(draw, loops[0]) if loops else None}
    if primitive == "shift":
        return primitive, (one,), {"offset": draw(st.integers(-3, 3)), "within": _within(draw, one)}
    if primitive == "reverse":
        return primitive, (one,), {"within": _within(draw, one)}
    if primitive == "fuse":
        loops = draw(st.lists(st.sampled_from(every), min_size=2, max_size=3))  # repeats: refused
        return primitive, tuple(loops), {"depth": draw(st.integers(1, 2))}
    if primitive == "distribute":
        groups = None
        if len(one.statements) > 1 and draw(st.booleans()):
            order = list(one.statements)
            draw(st.randoms(use_true_random=False)).shuffle(order)
            cut = draw(st.integers(1, len(order) - 1))
            groups = [order[:cut], order[cut:]]
        return primitive, (one,), {"groups": groups}
    if primitive == "unroll":
        return primitive, (one,), {"factor": draw(st.sampled_from([None, 2, 3, 4])), "within": _within(draw, one)}
    if primitive == "register_tile":
        loops = _nest_of(draw, s, 2)
        return primitive, loops, {"sizes": draw(st.lists(st.integers(1, 4), min_size=len(loops),
                                                          max_size=len(loops))),
                                  "within": _within(draw, loops[0]) if loops else None}
    return primitive, (one,), {"within": _within(draw, one)}  # parallel, vectorize


def apply_random_steps(draw, s):
    """Up to 4 random steps on ``s``; each refused one is skipped. Returns the last schedule
    and the number of steps that were carried out."""
    done = 0
    for _ in range(draw(st.integers(1, 4))):
        primitive, loops, options = random_step(draw, s)
        try:
            s = getattr(s, primitive)(*loops, **{k: v for k, v in options.items() if v is not None})
        except REFUSED as exc:
            event(f"{primitive} refused: {type(exc).__name__}")
            continue
        event(f"{primitive} applied")
        done += 1
    return s, done


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
    except po.ScheduleError as exc:  # e.g. a schedule the GPU mapping declines
        event(f"cuda declined: {exc}")
        return
    folder = tmp_path_factory.mktemp("cuda")
    (folder / "kernel.cu").write_text(cuda)
    result = subprocess.run(["nvcc", "-arch=sm_90", "-c", "kernel.cu"], cwd=folder, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, f"{result.stderr[-4000:]}\n{source}\n{s.trace.as_python()}"
