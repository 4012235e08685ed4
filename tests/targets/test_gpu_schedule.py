"""The GPU's own schedule (issue 16 item 1, :mod:`polyopt.schedulers.gpu`): no one-thread kernel
in a host loop or over a loop where a candidate schedule has a parallel one, the choice recorded
in the schedule's notes, and the chosen schedule replays to the same CUDA source."""
import pytest

import polyopt as po
from polyopt.codegen.gpu_mapping import HostLoop, Kernel
from polyopt.schedulers.gpu import estimate
from polyopt.targets.cuda import plan

SUITE = po.suite.names()


@pytest.fixture(scope="module")
def plans():
    """The general mapping's plans (gemm's default is the contraction kernel, jacobi-2d's the
    overlapped time tiles: no scheduler choice)."""
    return {name: plan(po.suite.get(name).kernel, contraction=False, time_tile=False) for name in SUITE}


def _host_loops_with_one_thread_kernels(steps) -> list[str]:
    found = []
    for step in steps:
        if isinstance(step, HostLoop):
            if any(not s.coords for s in step.body if not isinstance(s, HostLoop)):
                found.append(step.var)
            found += _host_loops_with_one_thread_kernels(step.body)
    return found


def test_no_one_thread_kernel(plans):
    """No plan has a serial one-thread kernel (launched in a host loop, or running a loop:
    nussinov's was the last, now a wavefront) nor a kernel without coordinates at all
    (correlation's corr[M-1][M-1] = 1.0 runs in the kernel before it; scalars like eps = 0.1
    are computed by the host)."""
    found = {name: [k.name for k in cost.one_thread + cost.serial]
             for name, cost in ((name, estimate(r.scop, r.program)) for name, r in plans.items())
             if cost.one_thread or cost.serial}
    assert not found, found
    launching = [name for name, r in plans.items()
                 if "__launch_bounds__(1)" in r.source.source or "<<<1, 1>>>" in r.source.source]
    assert not launching, launching


@pytest.mark.parametrize("name", ["atax", "cholesky", "trisolv", "floyd-warshall", "seidel-2d"])
def test_formerly_one_thread_kernels_now_run_in_parallel(plans, name):
    result = plans[name]
    assert all(k.coords for k in result.program.kernels), result.program.pretty()
    assert "__launch_bounds__(1)" not in result.source.source


def test_nussinov_runs_a_wavefront(plans):
    """Every loop of Pluto's band for nussinov carries a dependence (the whole table was one
    serial thread) and Feautrier's schedule launches a kernel per instance of a diagonal's
    cells; the wavefront of Pluto's band runs the diagonals in a host loop, one thread per cell
    of a diagonal (its k loop inside the thread)."""
    result = plans["nussinov"]
    last = result.schedule.notes[-1]
    assert last.startswith("gpu schedule: pluto wavefront(c0, c1) chosen for the GPU"), last
    assert "not the requested pluto" in last and "beaten: pluto: " in last and "; feautrier: " in last
    assert [step.primitive for step in result.schedule.trace][-2:] == ["wavefront", "gpu_map"]
    (loop,) = result.program.host
    assert isinstance(loop, HostLoop)
    (kernel,) = loop.body
    assert isinstance(kernel, Kernel) and len(kernel.coords) == 1
    po.verify(result.scop, result.mapped_tree)


def test_a_wavefront_competes_only_where_a_band_has_no_parallel_loop():
    # gemver's bands have parallel loops (no second round either): no wavefront candidate
    assert "wavefront" not in plan(po.suite.get("gemver").kernel).schedule.notes[-1]
    # seidel-2d's time-tiled band is permutable and serial: its wavefront competes and loses
    last = plan(po.suite.get("seidel-2d").kernel).schedule.notes[-1]
    assert last.startswith("gpu schedule: feautrier chosen") and "; pluto wavefront(" in last


def test_atax_has_no_host_loop_of_one_thread_kernels(plans):
    result = plans["atax"]
    assert not _host_loops_with_one_thread_kernels(result.program.host)
    assert not any(isinstance(step, HostLoop) for step in result.program.host)
    assert result.schedule.options.get("fuse") == "no"
    last = result.schedule.notes[-1]
    assert last.startswith("gpu schedule: pluto fuse='no' + fused nests chosen for the GPU")  # (its two init nests: one kernel)
    assert "not the requested pluto" in last and "beaten: pluto: " in last


def test_the_choice_is_recorded(plans):
    for name, result in plans.items():
        last = next((n for n in reversed(result.schedule.notes) if n.startswith("gpu schedule: ")), "")
        assert last, name  # (a stencil's resident kernel adds its note after it)
        chosen = last[len("gpu schedule: "):].split(" chosen")[0]
        assert chosen.split(" ")[0] == result.schedule.algorithm, name
        assert ("not the requested" in last) == (chosen != "pluto"), name
    # a plan without a serial one-thread kernel compares only pluto and the original order
    assert "fuse='no'" not in plans["gemm"].schedule.notes[-1]
    assert plans["seidel-2d"].schedule.algorithm == "feautrier"


@pytest.mark.parametrize("name", SUITE)
def test_the_chosen_schedule_replays(plans, name):
    result = plans[name]
    assert po.cuda_source(po.suite.get(name).kernel, schedule=result.schedule, contraction=False) == result.source.source


def test_a_requested_algorithm_competes_too():
    result = plan(po.suite.get("atax").kernel, algorithm="original")
    assert all(k.coords for k in result.program.kernels)
    assert "not the requested original" in result.schedule.notes[-1]


def test_a_failing_second_round_candidate_is_noted(monkeypatch):
    import polyopt.targets.cuda as cuda
    real = cuda.run_scheduler

    def refuse_isl(scop, algorithm, **options):
        if algorithm == "isl":
            raise po.ScheduleError("isl: refused for the test")
        return real(scop, algorithm, **options)

    monkeypatch.setattr(cuda, "run_scheduler", refuse_isl)
    last = plan(po.suite.get("atax").kernel).schedule.notes[-1]
    assert "failed: isl: ScheduleError: isl: refused for the test" in last
    # an error of the requested algorithm is raised, as before
    with pytest.raises(po.CodegenError, match="underscore"):
        po.cuda_source(po.kernel_from_source('''def k(A: f64["N"], _b0: f64):
    for i in range(N):
        A[i] = _b0
'''))
