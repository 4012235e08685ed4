"""``Schedule.gpu_promote`` (issue 14: the GPU mapping's memory placement as a primitive): the
mark it leaves, its trace step and replay, the CUDA source following it (shared-memory buffers,
registers), typed refusals in the primitive and in the backend, and on a GPU the results."""
import numpy as np
import pytest

import polyopt as po
from polyopt.targets.cuda import plan

from conftest import needs_gpu

GEMM = po.suite.get("gemm")


@pytest.fixture(scope="module")
def mapped():
    """gemm's GPU plan (general mapping) and the loop naming its product kernel."""
    result = plan(GEMM.kernel, contraction=False)
    maps = [step.loops for step in result.schedule.trace if step.primitive == "gpu_map"]
    return result.schedule, maps[0][0], maps[-1][0]


def _shared_lines(source: str) -> list[str]:
    return [line.strip() for line in source.splitlines() if "__shared__" in line]


def test_the_backend_stages_only_the_arrays_placed_in_shared_memory(mapped):
    schedule, _, product = mapped
    assert len(_shared_lines(po.cuda_source(GEMM.kernel, schedule=schedule))) == 4  # A and B, two variants
    only_a = schedule.gpu_promote(product, ["A"], to="shared")
    assert "gpu_memory A=shared" in only_a.pretty()
    assert len(_shared_lines(po.cuda_source(GEMM.kernel, schedule=only_a))) == 2  # A, two variants


def test_global_placement_turns_staging_and_registers_off(mapped):
    schedule, _, product = mapped
    none = schedule.gpu_promote(product, ["A", "B", "C"], to="global")
    source = po.cuda_source(GEMM.kernel, schedule=none)
    assert not _shared_lines(source)
    kernel = source[source.index("polyopt_gemm_k1("):]
    assert "_r0" not in kernel  # the accumulators stay in C
    assert "_r0" in po.cuda_source(GEMM.kernel, schedule=schedule)


def test_a_later_step_replaces_an_arrays_place_and_the_trace_replays(mapped):
    schedule, _, product = mapped
    s = schedule.gpu_promote(product, ["A", "B"], to="shared").gpu_promote(product, ["B"], to="global")
    assert "gpu_memory A=shared B=global" in s.pretty()
    assert s.pretty().count("gpu_memory") == 1
    again = po.Trace.from_json(s.trace.to_json()).apply(po.schedule(GEMM.kernel, "original"))
    assert again.pretty() == s.pretty()
    assert po.cuda_source(GEMM.kernel, schedule=again) == po.cuda_source(GEMM.kernel, schedule=s)


@pytest.mark.parametrize("arrays, to, message", [
    (["Z"], "shared", "does not access 'Z'"),
    (["C"], "shared", "C is written in the kernel"),
    (["A"], "registers", "A is only read in the kernel"),
    (["A"], "texture", "the places are shared, registers, global"),
    ("A", "shared", "arrays is a list of array names"),
])
def test_the_primitive_refuses_what_cannot_be_placed(mapped, arrays, to, message):
    schedule, _, product = mapped
    with pytest.raises(po.ScheduleError, match=message):
        schedule.gpu_promote(product, arrays, to=to)


def test_the_primitive_needs_a_kernels_outermost_coordinate(mapped):
    schedule, _, product = mapped
    with pytest.raises(po.ScheduleError, match="not a GPU kernel's coordinate"):
        schedule.gpu_promote("k", ["A"], to="shared")
    inner = [step.loops for step in schedule.trace if step.primitive == "gpu_map"][-1][1]
    with pytest.raises(po.ScheduleError, match="inner coordinate"):
        schedule.gpu_promote(inner, ["A"], to="shared")


def test_the_backend_refuses_a_placement_it_cannot_honour(mapped):
    schedule, init, product = mapped
    # C *= beta updates each element once: no loop keeps an element of it
    with pytest.raises(po.CodegenError, match="polyopt_gemm_k0 cannot keep C in registers"):
        po.cuda_source(GEMM.kernel, schedule=schedule.gpu_promote(init, ["C"], to="registers"))
    with pytest.raises(po.CodegenError, match="cannot stage A in shared memory .*: shared=False"):
        po.cuda_source(GEMM.kernel, schedule=schedule.gpu_promote(product, ["A"], to="shared"), shared=False)
    one_coordinate = po.schedule(GEMM.kernel, "original").gpu_map("i")
    with pytest.raises(po.CodegenError, match="runs one coordinate a thread"):
        po.cuda_source(GEMM.kernel, schedule=one_coordinate.gpu_promote("i", ["A"], to="shared"))


@needs_gpu
@pytest.mark.parametrize("placement", [[(["A"], "shared")], [(["A", "B", "C"], "global")],
                                       [(["C"], "registers"), (["B"], "shared")]])
def test_placed_kernels_match_numpy(mapped, placement):
    schedule, _, product = mapped
    for arrays, to in placement:
        schedule = schedule.gpu_promote(product, arrays, to=to)
    for sizes in ({"NI": 37, "NJ": 45, "NK": 13}, GEMM.sizes("SMALL")):
        args = GEMM.inputs(sizes)
        expected = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in args.items()}
        GEMM.reference(**expected)
        po.compile(GEMM.kernel, target="cuda", schedule=schedule)(**args)
        np.testing.assert_allclose(args["C"], expected["C"], rtol=1e-10, atol=1e-10)
