"""Property test on a GPU: random affine loop nests (the CPU fuzz's strategy,
tests/test_random_nests.py) compiled for CUDA give the interpreter's results, under the default
algorithm, Feautrier and the original order, with sums split over warps and without; every
mapped tree (block, thread and ``gpu_reduce`` marks) passes the verifier on the way (``plan``).

Longer local runs: ``POLYOPT_GPU_FUZZ_EXAMPLES=2000 python -m pytest
tests/targets/test_gpu_random_nests.py``."""
import os

import numpy as np
from hypothesis import HealthCheck, Phase, given, settings, strategies as st

import polyopt as po
from test_random_nests import nest_source

from conftest import needs_gpu

GPU_FUZZ_EXAMPLES = int(os.environ.get("POLYOPT_GPU_FUZZ_EXAMPLES", "120"))
#: Split sums add their terms in another order: results differ from the interpreter's by rounding.
TOLERANCE = 1e-10


@needs_gpu
@settings(max_examples=GPU_FUZZ_EXAMPLES, deadline=None, derandomize=True, database=None,
          phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(source=nest_source(), n=st.integers(1, 20), algorithm=st.sampled_from(["pluto", "feautrier", "original"]),
       reductions=st.booleans())
def test_random_nests_on_the_gpu_match_the_interpreter(source, n, algorithm, reductions):
    kernel = po.kernel_from_source(source)
    size = 3 * n + 8
    rng = np.random.default_rng(n)
    A0, B0 = rng.random((size, size)), rng.random(size)
    A, B = A0.copy(), B0.copy()
    po.interpret(kernel, A, B)
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
