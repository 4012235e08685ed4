"""Property tests on a GPU: random affine loop nests (the CPU fuzz's strategy,
tests/test_random_nests.py) compiled for CUDA give the interpreter's results, under the default
algorithm, Feautrier and the original order, with sums split over warps and without, and after
random sequences of primitives (tests/random_steps.py: gpu_map and gpu_promote among them); every
mapped tree (block, thread and ``gpu_reduce`` marks) passes the verifier on the way (``plan``).

Longer local runs: ``POLYOPT_GPU_FUZZ_EXAMPLES=2000 python -m pytest
tests/targets/test_gpu_random_nests.py``."""
import os

import numpy as np
from hypothesis import HealthCheck, Phase, event, given, settings, strategies as st

import polyopt as po
from random_steps import apply_random_steps
from test_random_nests import nest_source

from conftest import needs_gpu

GPU_FUZZ_EXAMPLES = int(os.environ.get("POLYOPT_GPU_FUZZ_EXAMPLES", "120"))
#: Split sums add their terms in another order: results differ from the interpreter's by rounding.
TOLERANCE = 1e-10


def _expected(kernel, n: int):
    size = 3 * n + 8
    rng = np.random.default_rng(n)
    A0, B0 = rng.random((size, size)), rng.random(size)
    A, B = A0.copy(), B0.copy()
    po.interpret(kernel, A, B)
    return (A0, B0), (A, B)


_FUZZ = dict(deadline=None, derandomize=True, database=None, phases=[Phase.explicit, Phase.generate],
             suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@needs_gpu
@settings(max_examples=GPU_FUZZ_EXAMPLES // 2, **_FUZZ)
@given(source=nest_source(), n=st.integers(1, 12), data=st.data())
def test_random_steps_on_the_gpu_match_the_interpreter(source, n, data):
    kernel = po.kernel_from_source(source)
    s, _ = apply_random_steps(data.draw, po.schedule(kernel, "original"))
    try:
        compiled = po.compile(kernel, target="cuda", schedule=s)
    except (po.ScheduleError, po.CodegenError) as exc:  # a placement gpu_promote asked for and the
        event(f"cuda declined: {type(exc).__name__}")  # backend cannot follow (said, not ignored)
        return
    (A0, B0), (A, B) = _expected(kernel, n)
    a, b = A0.copy(), B0.copy()
    compiled(a, b)
    what = f"N={n}\n{source}\n{s.trace.as_python()}"
    np.testing.assert_allclose(a, A, rtol=TOLERANCE, atol=TOLERANCE, err_msg=what)
    np.testing.assert_allclose(b, B, rtol=TOLERANCE, atol=TOLERANCE, err_msg=what)


@needs_gpu
@settings(max_examples=GPU_FUZZ_EXAMPLES, **_FUZZ)
@given(source=nest_source(), n=st.integers(1, 20), algorithm=st.sampled_from(["pluto", "feautrier", "original"]),
       reductions=st.booleans())
def test_random_nests_on_the_gpu_match_the_interpreter(source, n, algorithm, reductions):
    kernel = po.kernel_from_source(source)
    (A0, B0), (A, B) = _expected(kernel, n)
    try:
        compiled = po.compile(kernel, target="cuda", algorithm=algorithm, reductions=reductions)
    except po.ScheduleError:
        if algorithm == "original":
            raise
        return  # pluto and Feautrier may decline some non-uniform dependences (as on the CPU)
    a, b = A0.copy(), B0.copy()
    compiled(a, b)
    what = f"{algorithm} reductions={reductions} N={n}\n{source}"
    np.testing.assert_allclose(a, A, rtol=TOLERANCE, atol=TOLERANCE, err_msg=what)
    np.testing.assert_allclose(b, B, rtol=TOLERANCE, atol=TOLERANCE, err_msg=what)
