"""The resident stencil kernel (codegen/cuda_resident.py, polyopt.targets.resident): which
kernels get it, the barriers and edge rows it derives, the strips a launch takes, the source
under nvcc; a numpy emulation of the kernel -- per block its strips, reads of other strips' rows
from global memory, edge rows written through, every read and write checked against the
others of its barrier interval for a race -- against the interpreter on the suite's stencils
and random ones; and on a GPU the compiled kernels against the references (skipped without
CuPy and a GPU)."""
from __future__ import annotations

from dataclasses import replace
from itertools import product

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import polyopt as po
from polyopt.analysis.affine import extent_expr
from polyopt.analysis.evaluate import evaluate
from polyopt.codegen.cuda import CudaSource
from polyopt.codegen.cuda_resident import grid_barriers
from polyopt.targets.cache import scop_of
from polyopt.targets.cuda import plan
import polyopt.targets.resident as resident
from polyopt.targets.resident import ResidentSource

from conftest import assert_nvcc_compiles, check_suite_kernel_on_gpu, needs_gpu, needs_nvcc
from test_stencil_fuzz import stencils

H100 = {"sm_count": 132, "shared": 232448}


def _plan(name: str, **options):
    return plan(po.suite.get(name).kernel, **options)


@pytest.mark.parametrize("name", ["jacobi-2d", "fdtd-2d", "heat-3d"])
def test_stencils_of_rank_2_and_3_carry_the_resident_kernel(name):
    made = _plan(name)
    assert isinstance(made.source, ResidentSource)
    assert "resident strips" in made.schedule.notes[-1]
    assert f"{made.source.resident.name}(" in made.source.source
    assert type(_plan(name, resident=False).source) is CudaSource


@pytest.mark.parametrize("name", ["jacobi-1d", "seidel-2d", "gemm", "atax"])
def test_others_do_not(name):
    assert not isinstance(_plan(name).source, ResidentSource)


def test_barriers_and_edges():
    jacobi = _plan("jacobi-2d").source.resident
    assert jacobi.barriers == (True, True)  # B from A's neighbours, then A from B's
    assert jacobi.edges == {"A": (1, 1), "B": (1, 1)}
    fdtd = _plan("fdtd-2d").source.resident
    # ey row 0 (after hz read ey across strips), ey, ex (reads hz in its row: no grid barrier), hz
    assert fdtd.barriers == (True, False, False, True)
    assert fdtd.edges == {"ey": (1, 0), "ex": (0, 0), "hz": (0, 1)}


def test_grid_barriers_rule():
    none, a, b = frozenset(), frozenset("A"), frozenset("B")
    assert grid_barriers([none, none], [a, b]) == (False, False)  # nobody reads across strips
    # read after write; then the next step's write of A after that read of it
    assert grid_barriers([none, a], [a, b]) == (True, True)
    # ... unless a barrier comes between: S2 reads B across after S1 wrote it
    assert grid_barriers([none, a, frozenset("B")], [a, b, frozenset("C")]) == (False, True, True)
    assert grid_barriers([a], [b]) == (False,)  # reads A across strips, nobody writes A
    assert grid_barriers([a], [a]) == (True,)  # read across and written, step after step


def test_strips():
    kernel = _plan("jacobi-2d").source.resident
    scop = scop_of(po.suite.get("jacobi-2d").kernel)
    assert kernel.strips(scop, (1300, 1300), H100["sm_count"], H100["shared"]) == (10, 130, 2 * 10 * 1300 * 8)
    assert kernel.strips(scop, (2800, 2800), H100["sm_count"], H100["shared"]) is None  # EXTRALARGE: sweeps
    assert kernel.strips(scop, (5, 7), H100["sm_count"], H100["shared"]) == (2, 3, 2 * 112)  # 2 rows at least
    assert kernel.strips(scop, (1, 7), H100["sm_count"], H100["shared"]) == (2, 1, 2 * 112)
    heat = _plan("heat-3d").source.resident  # LARGE: 2 planes of 120 x 120 do not fit; its sweeps run
    assert heat.strips(scop_of(po.suite.get("heat-3d").kernel), (120, 120, 120), 132, H100["shared"]) is None
    assert kernel.strips(scop, (0, 7), H100["sm_count"], H100["shared"]) is None


@needs_nvcc
def test_sources_compile_with_nvcc(tmp_path):
    assert_nvcc_compiles(tmp_path, {name: _plan(name).source.source for name in ("jacobi-2d", "fdtd-2d", "heat-3d")},
                         "sm_90")


# ----- the kernel emulated in numpy ------------------------------------------------------------

class _Strips:
    """What one block sees of a written array: its strip (rows ``r0``..``r1``) in shared memory,
    other rows from global memory, each such read noted for the race check."""

    def __init__(self, name, shared, memory, r0, r1, block, log):
        self.name, self.shared, self.memory, self.r0, self.r1, self.block, self.log = \
            name, shared, memory, r0, r1, block, log

    def __getitem__(self, index):
        if self.r0 <= index[0] < self.r1:
            return self.shared[(index[0] - self.r0,) + index[1:]]
        self.log.append(("read", self.block, self.name, index))
        return self.memory[index]


def emulate_resident(source: ResidentSource, params: dict[str, int], args: dict, sm_count: int) -> None:
    """Run the resident kernel of ``source`` on the numpy ``args`` in place as the GPU does, the
    blocks one after another within each barrier interval, and assert that no element one block
    writes to global memory in an interval is read by another block in it (a race the grid-wide
    barriers must rule out)."""
    rk, scop = source.resident, source.program.scop
    stencil = rk.stencil
    extents = tuple(int(evaluate(extent_expr(e, scop.params), params, {})) for e in stencil.shape)
    strips = rk.strips(scop, extents, sm_count, 1 << 30)
    if strips is None:
        return
    rows, blocks, _ = strips
    spans = [(b * rows, min((b + 1) * rows, extents[0])) for b in range(blocks)]
    shared = {(b, a): args[a][r0:r1].copy() for b, (r0, r1) in enumerate(spans) for a in stencil.written}
    first, last = (int(evaluate(e, params, {})) for e in stencil.time_bounds)
    log: list = []

    def interval_ends():
        touched = {}
        for kind, block, name, index in log:
            touched.setdefault((name, index), set()).add((kind, block))
        for (name, index), seen in touched.items():
            writers = {b for k, b in seen if k == "write"}
            assert not writers or {b for _, b in seen} == writers, f"race on {name}{list(index)}: {sorted(seen)}"
        log.clear()

    for t in range(first, last + 1):
        for s, barrier in zip(stencil.statements, rk.barriers):
            if barrier:
                interval_ends()
            box = [(int(evaluate(lo, params, {})), int(evaluate(hi, params, {}))) for lo, hi in s.box]
            top, bottom = rk.edges[s.array]
            for b, (r0, r1) in enumerate(spans):
                views = {a: _Strips(a, shared[b, a], args[a], r0, r1, b, log) for a in stencil.written}
                arrays = {**{k: v for k, v in args.items() if isinstance(v, np.ndarray)}, **views}
                ranges = [range(max(box[0][0], r0), min(box[0][1], r1 - 1) + 1)] + \
                         [range(lo, hi + 1) for lo, hi in box[1:]]
                for x in product(*ranges):
                    env = {**params, s.time: t, **{it: x[k] - c for it, (k, c) in s.iterator_values().items()}}
                    value = evaluate(s.statement.value, env, arrays)
                    shared[b, s.array][(x[0] - r0,) + x[1:]] = value
                    if x[0] < r0 + top or x[0] >= r1 - bottom:
                        args[s.array][x] = value
                        log.append(("write", b, s.array, x))
    interval_ends()
    for b, (r0, r1) in enumerate(spans):
        for a in stencil.written:
            args[a][r0:r1] = shared[b, a]


def _emulated_matches(name: str, sizes: dict, sm_count: int) -> None:
    entry = po.suite.get(name)
    args = entry.inputs(sizes)
    expected = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in args.items()}
    entry.reference(**expected)
    emulate_resident(plan(entry.kernel).source, dict(sizes), args, sm_count)
    for key, value in expected.items():
        if isinstance(value, np.ndarray):
            np.testing.assert_allclose(args[key], value, rtol=1e-12, atol=1e-12, err_msg=key)


@pytest.mark.parametrize("name, sizes, sm_count", [
    ("jacobi-2d", {"TSTEPS": 3, "N": 11}, 4),     # strips of 3 rows, the last of 2
    ("jacobi-2d", {"TSTEPS": 2, "N": 9}, 9),      # two rows a strip: every row an edge row
    ("jacobi-2d", {"TSTEPS": 2, "N": 8}, 1),      # one strip
    ("fdtd-2d", {"TMAX": 3, "NX": 10, "NY": 7}, 3),
    ("fdtd-2d", {"TMAX": 2, "NX": 6, "NY": 5}, 6),
    ("heat-3d", {"TSTEPS": 2, "N": 7}, 3),
    ("heat-3d", {"TSTEPS": 1, "N": 6}, 6),
])
def test_emulated_suite_stencils(name, sizes, sm_count):
    _emulated_matches(name, sizes, sm_count)


@settings(max_examples=30, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(case=stencils(), n=st.integers(5, 10), steps=st.integers(0, 4), sm_count=st.integers(1, 10))
def test_random_stencils_emulated_like_the_interpreter(case, n, steps, sm_count):
    """Random 2-d stencils (one to three sweeps, neighbour reads up to two cells away, boxes of
    their own): the emulated resident kernel, strips of two rows and more, gives the
    interpreter's result and has no race."""
    source, rank, neighbours = case
    kernel = po.kernel_from_source(source)
    if rank != 2 or not neighbours:
        return
    made = plan(kernel).source
    assert isinstance(made, ResidentSource), source
    rng = np.random.default_rng(n)
    args = {"T": steps, "A": rng.random((n, n)), "B": rng.random((n, n))}
    expected = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in args.items()}
    po.interpret(kernel, **expected)
    emulate_resident(made, {"T": steps, "N": n}, args, sm_count)
    for name in ("A", "B"):
        np.testing.assert_allclose(args[name], expected[name], rtol=1e-12, atol=1e-12, err_msg=f"{name}\n{source}")


def test_emulation_finds_a_missing_barrier():
    """Without jacobi-2d's grid-wide barriers a block reads a neighbour's edge row in the
    interval that block writes it: the emulation reports the race."""
    source = _plan("jacobi-2d").source
    unsafe = replace(source, resident=replace(source.resident, barriers=(False, False)))
    args = po.suite.get("jacobi-2d").inputs({"TSTEPS": 2, "N": 9})
    with pytest.raises(AssertionError, match="race on"):
        emulate_resident(unsafe, {"TSTEPS": 2, "N": 9}, args, 3)


# ----- on a GPU --------------------------------------------------------------------------------

def _gpu_check(name: str, sizes: dict, dtype=np.float64, calls: int = 1, on_device: bool = False,
               resident_expected: bool = True, **options):
    def takes_resident(compiled):
        import cupy
        sm_count = cupy.cuda.Device().attributes["MultiProcessorCount"]
        assert (resident.resident_strips(compiled.compiled, dict(sizes), sm_count) is not None) == resident_expected
    check_suite_kernel_on_gpu(name, sizes, dtype, calls, on_device, expect=takes_resident, **options)


_GPU_CASES = [
    ("jacobi-2d", {"TSTEPS": 5, "N": 37}),
    ("jacobi-2d", {"TSTEPS": 20, "N": 250}),
    ("jacobi-2d", {"TSTEPS": 7, "N": 1301}),  # ~10 rows a strip, 2 of them edges
    ("fdtd-2d", {"TMAX": 9, "NX": 33, "NY": 47}),
    ("fdtd-2d", {"TMAX": 20, "NX": 1000, "NY": 1200}),  # LARGE: 8 rows a strip, 225 KiB of shared memory
    ("heat-3d", {"TSTEPS": 5, "N": 21}),
    ("heat-3d", {"TSTEPS": 4, "N": 60}),  # 2 planes a strip
]


@needs_gpu
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name, sizes", _GPU_CASES)
def test_gpu_numpy_arrays(name, sizes, dtype):
    _gpu_check(name, sizes, dtype)


@needs_gpu
@pytest.mark.parametrize("name, sizes", [_GPU_CASES[0], _GPU_CASES[3], _GPU_CASES[5]])
def test_gpu_repeated_calls_on_cupy_arrays(name, sizes):
    """Three calls on the same CuPy arrays: the launch, its record, the repeated call."""
    _gpu_check(name, sizes, calls=3, on_device=True)


@needs_gpu
def test_gpu_sweeps_where_strips_do_not_fit(monkeypatch):
    """With too little shared memory for a strip, the call runs the sweeps, and is right."""
    monkeypatch.setattr(resident, "shared_limit", lambda: 1024)
    _gpu_check("jacobi-2d", {"TSTEPS": 6, "N": 300}, resident_expected=False)


@needs_gpu
def test_gpu_launch_with_graph():
    """``launch(..., graph=True)`` (the bench's path) launches the resident kernel once."""
    import cupy
    entry = po.suite.get("fdtd-2d")
    sizes = {"TMAX": 6, "NX": 50, "NY": 70}
    args = entry.inputs(sizes)
    expected = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in args.items()}
    entry.reference(**expected)
    entry.reference(**expected)
    compiled = po.compile(entry.kernel, target="cuda")
    device = {k: cupy.asarray(v) for k, v in args.items() if isinstance(v, np.ndarray)}
    for _ in range(2):
        compiled.launch(sizes, {}, device, graph=True)
    for key in ("ex", "ey", "hz"):
        np.testing.assert_allclose(device[key].get(), expected[key], rtol=1e-9, err_msg=key)


@needs_gpu
@settings(max_examples=25, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(case=stencils(), n=st.integers(5, 300), steps=st.integers(0, 6))
def test_gpu_random_stencils(case, n, steps):
    """Random 2-d stencils on the GPU, the resident kernel against the interpreter."""
    source, rank, neighbours = case
    if rank != 2 or not neighbours:
        return
    kernel = po.kernel_from_source(source)
    rng = np.random.default_rng(n)
    args = {"T": steps, "A": rng.random((n, n)), "B": rng.random((n, n))}
    expected = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in args.items()}
    po.interpret(kernel, **expected)
    po.compile(kernel, target="cuda")(**args)
    for name in ("A", "B"):
        np.testing.assert_allclose(args[name], expected[name], rtol=1e-9, atol=1e-9, err_msg=f"{name}\n{source}")


def test_the_schedule_step_and_its_replay():
    """The default compile records ``gpu_resident`` as its last step; the step on a given
    schedule (the original order here) adds the resident kernel as well; replaying the default
    trace gives the same source."""
    kernel = po.suite.get("jacobi-2d").kernel
    made = plan(kernel)
    assert made.schedule.trace[-1].primitive == "gpu_resident"
    given = plan(kernel, schedule=po.schedule(kernel, "original").gpu_resident())
    assert isinstance(given.source, ResidentSource)
    again = po.Trace.from_json(made.schedule.trace.to_json()).apply(po.schedule(kernel, "original"), check=False)
    assert po.cuda_source(kernel, schedule=again) == made.source.source


def test_refusals():
    with pytest.raises(po.ScheduleError, match="gpu_resident: gemm is no Jacobi-style stencil"):
        po.schedule(po.suite.get("gemm").kernel, "original").gpu_resident()
    jacobi_1d = po.suite.get("jacobi-1d").kernel
    with pytest.raises(po.CodegenError, match="no stencil of spatial rank 2 or 3"):
        plan(jacobi_1d, schedule=po.schedule(jacobi_1d, "original").gpu_resident())


def test_only_for_the_default_algorithm():
    """The resident kernel runs the original order: a compile asking for a scheduler keeps that
    scheduler's kernels alone."""
    assert not isinstance(_plan("jacobi-2d", algorithm="feautrier").source, ResidentSource)
