"""Consecutive parallel nests fused into one GPU kernel (polyopt.schedulers.gpu_fusion)."""
import polyopt as po
from polyopt.schedulers.gpu_fusion import fuse_parallel_nests
from polyopt.schedulers.registry import schedule as run_scheduler
from polyopt.analysis.verify import verify
from polyopt.targets.cuda import plan


def test_fdtd_updates_of_ex_and_ey_run_as_one_kernel():
    """fdtd-2d's ey and ex updates read only hz: one kernel runs both; hz's update reads their
    neighbours, so it stays a kernel of its own, and so does the row-0 nest (one loop)."""
    scop = po.suite.get("fdtd-2d").kernel.scop
    fused = fuse_parallel_nests(run_scheduler(scop, "original"))
    assert [step.as_python() for step in fused.trace][-1] == "fuse('i', 'i@S2', depth=2)"
    verify(scop, fused)
    chosen = plan(po.suite.get("fdtd-2d").kernel, time_tile=False)
    assert "original + fused nests chosen for the GPU" in chosen.schedule.notes[-2]  # (the resident kernel's note last)
    assert [sorted(k.statements) for k in chosen.program.kernels] == [["S0"], ["S1", "S2"], ["S3"]]


def test_dependent_sweeps_are_not_fused():
    """jacobi-2d's second sweep reads neighbours the first writes: fusing would be illegal."""
    schedule = run_scheduler(po.suite.get("jacobi-2d").kernel.scop, "original")
    assert fuse_parallel_nests(schedule) is schedule


def test_fusion_that_leaves_a_loop_carrying_a_dependence_is_not_made():
    """Fusing these two nests is legal but the fused j loop would carry the dependence from
    b[i, j + 1] to its reader: no fusion (fusing independent ones is checked above)."""
    @po.kernel
    def shifted(a: po.f64["N", "N"], b: po.f64["N", "N"], c: po.f64["N", "N"]):
        for i in range(N):
            for j in range(N - 1):
                b[i, j + 1] = a[i, j] * 2.0
        for i in range(N):
            for j in range(N):
                c[i, j] = b[i, j] + 1.0
    schedule = run_scheduler(shifted.scop, "original")
    assert fuse_parallel_nests(schedule) is schedule
