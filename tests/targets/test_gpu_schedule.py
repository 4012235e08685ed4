"""The GPU's own schedule (issue 16 item 1, :mod:`polyopt.schedulers.gpu`): no one-thread kernel
in a host loop or over a loop where a candidate schedule has a parallel one, the choice recorded
in the schedule's notes, and the chosen schedule replays to the same CUDA source."""
import pytest

import polyopt as po
from polyopt.codegen.gpu_mapping import HostLoop, Kernel
from polyopt.schedulers.gpu import estimate
from polyopt.targets.cuda import plan

SUITE = po.suite.names()

#: Kernels whose plan still has a serial one-thread kernel (launched in a host loop, or running a
#: loop), and why no candidate does better.
SERIAL_EXCEPTIONS = {
    "nussinov": "Feautrier's wavefront is parallel but launches ~9e7 kernels (estimated 4x "
                "slower than one thread); needs in-kernel loops around a block-wide wavefront",
}
#: Kernels with single-instance one-thread kernels (a statement such as corr[M-1][M-1] = 1.0,
#: one launch, outside any host loop; scalars like eps = 0.1 are computed by the host).
SCALAR_ONE_THREAD = {"correlation"}


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


def test_no_serial_one_thread_kernel_unless_listed(plans):
    serial = {}
    for name, result in plans.items():
        cost = estimate(result.scop, result.program)
        if cost.serial:
            serial[name] = [k.name for k in cost.serial]
        # the other one-thread kernels run one scalar statement once
        for kernel in cost.one_thread:
            if kernel not in cost.serial:
                assert kernel.launches == 1 and kernel.instances == 1, (name, kernel)
    assert set(serial) == set(SERIAL_EXCEPTIONS), serial
    scalar = {name for name, r in plans.items()
              if any(isinstance(k, Kernel) and not k.coords for k in r.program.kernels)}
    assert scalar - set(SERIAL_EXCEPTIONS) <= SCALAR_ONE_THREAD, scalar


@pytest.mark.parametrize("name", ["atax", "cholesky", "trisolv", "floyd-warshall", "seidel-2d"])
def test_formerly_one_thread_kernels_now_run_in_parallel(plans, name):
    result = plans[name]
    assert all(k.coords for k in result.program.kernels), result.program.pretty()
    assert "__launch_bounds__(1)" not in result.source.source


def test_atax_has_no_host_loop_of_one_thread_kernels(plans):
    result = plans["atax"]
    assert not _host_loops_with_one_thread_kernels(result.program.host)
    assert not any(isinstance(step, HostLoop) for step in result.program.host)
    assert result.schedule.options.get("fuse") == "no"
    last = result.schedule.notes[-1]
    assert last.startswith("gpu schedule: pluto fuse='no' chosen for the GPU")
    assert "not the requested pluto" in last and "beaten: pluto: " in last


def test_the_choice_is_recorded(plans):
    for name, result in plans.items():
        last = result.schedule.notes[-1]
        assert last.startswith("gpu schedule: "), name
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
