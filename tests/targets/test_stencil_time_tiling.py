"""GPU time tiling of Jacobi-style stencils (polyopt.analysis.stencil, codegen/cuda_stencil.py,
polyopt.targets.stencil): which kernels qualify, the halos, the schedule step, the generated
source under nvcc, a numpy emulation of the overlapped tiles (the plan's own regions, halos,
launches and ping-pong, tile by tile) against the suite's references, and on a GPU the compiled
kernels against the references (skipped without CuPy and a GPU)."""
from __future__ import annotations

import shutil
import subprocess
from itertools import product
from types import SimpleNamespace

import numpy as np
import pytest

import polyopt as po
from polyopt.analysis.evaluate import evaluate
from polyopt.codegen.ast import abi_arguments
from polyopt.analysis.stencil import find_stencil
from polyopt.codegen.cuda import CudaSource
from polyopt.codegen.cuda_stencil import SHARED_LIMIT, StencilSource
from polyopt.errors import CodegenError, ScheduleError
import polyopt.targets.cuda as cuda
from polyopt.targets.cache import scop_of
from polyopt.targets.cuda import plan
from polyopt.targets.stencil import DEFAULT_RANKS, launch, launch_plan, stencil_plan

from conftest import StandInArray, assert_nvcc_compiles, check_suite_kernel_on_gpu, needs_gpu, needs_nvcc


def _stencil(name: str):
    return find_stencil(scop_of(po.suite.get(name).kernel))


@pytest.mark.parametrize("name", ["jacobi-1d", "jacobi-2d", "fdtd-2d", "heat-3d"])
def test_suite_stencils_qualify(name):
    assert _stencil(name) is not None


@pytest.mark.parametrize("name", ["seidel-2d", "adi", "gemm", "2mm", "atax", "floyd-warshall", "lu"])
def test_others_do_not(name):
    assert _stencil(name) is None


def test_fused_sweeps_do_not_qualify():
    """Both statements in one spatial nest: the order is not sweep after sweep."""
    @po.kernel
    def fused(TSTEPS: int, A: po.f64["N"], B: po.f64["N"]):
        for t in range(TSTEPS):
            for i in range(1, N - 1):
                B[i] = A[i - 1] + A[i + 1]
                A[i] = B[i]
    assert find_stencil(scop_of(fused)) is None


def test_no_neighbour_read_does_not_qualify():
    """Each element on its own (a column sum over i): nothing to tile in time."""
    @po.kernel
    def column_sums(A: po.f64["M", "N"], C: po.f64["N"]):
        for i in range(M):
            for j in range(N):
                C[j] = C[j] + A[i, j]
    assert find_stencil(scop_of(column_sums)) is None


def test_in_place_neighbour_read_does_not_qualify():
    """A statement reading its own array at an offset (Gauss-Seidel): its sweep is no parallel one."""
    @po.kernel
    def in_place(TSTEPS: int, A: po.f64["N"]):
        for t in range(TSTEPS):
            for i in range(1, N - 1):
                A[i] = A[i - 1] + A[i]
    assert find_stencil(scop_of(in_place)) is None


def test_halos():
    assert _stencil("jacobi-1d").step_halo == ((2, 2),)
    assert _stencil("jacobi-2d").step_halo == ((2, 2), (2, 2))
    assert _stencil("heat-3d").halo(3) == ((6, 6),) * 3
    fdtd = _stencil("fdtd-2d")
    assert fdtd.step_halo == ((1, 1), (1, 1))  # hz[i-1] below, ey[i+1] above; alike in j
    assert [s.reach for s in fdtd.statements] == [((0, 0), (0, 0)), ((1, 0), (0, 0)), ((0, 0), (1, 0)),
                                                  ((0, 1), (0, 1))]
    assert fdtd.statements[0].placement == ((None, 0), ("j", 0))  # ey[0, j]: row 0
    assert fdtd.written == ("ey", "ex", "hz")


def test_default_plan_and_schedule_step():
    found = plan(po.suite.get("jacobi-1d").kernel)  # rank 1: time tiles by default
    assert isinstance(found.source, StencilSource)
    assert found.schedule.trace.as_python() == "s = s.gpu_time_tile()"
    assert "overlapped time tiles" in found.schedule.notes[-1]
    assert found.source.tiling.shared_bytes(found.scop) <= SHARED_LIMIT
    kernel = po.suite.get("jacobi-2d").kernel  # rank 2: sweeps by default, time tiles when asked
    assert not isinstance(plan(kernel).source, StencilSource)
    assert plan(kernel, time_tile=True).source.tiling.shared_bytes(scop_of(kernel)) <= SHARED_LIMIT
    mine = po.schedule(kernel, "original").gpu_time_tile(steps=3, tile=(8, 32))
    assert mine.trace.as_python() == "s = s.gpu_time_tile(steps=3, tile=[8, 32])"
    replayed = plan(kernel, schedule=mine).source.tiling
    assert (replayed.steps, replayed.tile) == (3, (8, 32))
    assert plan(kernel, time_tile=5, tile=(8, 64), block=(4, 32)).source.tiling.block == (4, 32)
    assert not isinstance(plan(kernel, time_tile=False).source, StencilSource)  # the general mapping
    assert not isinstance(plan(kernel, tile=(8, 32)).source, StencilSource)  # mapping options: as before


def test_rank_3_only_when_asked():
    scop = scop_of(po.suite.get("heat-3d").kernel)
    assert stencil_plan(scop, "k", ranks=DEFAULT_RANKS) is None  # what a default compile asks
    assert stencil_plan(scop_of(po.suite.get("fdtd-2d").kernel), "k", ranks=DEFAULT_RANKS) is None
    assert isinstance(plan(po.suite.get("heat-3d").kernel, time_tile=True).source, StencilSource)


def test_refusals():
    with pytest.raises(CodegenError, match="no Jacobi-style stencil"):
        plan(po.suite.get("gemm").kernel, time_tile=2)
    with pytest.raises(ScheduleError, match="no Jacobi-style stencil"):
        po.schedule(po.suite.get("seidel-2d").kernel, "original").gpu_time_tile()
    with pytest.raises(ScheduleError, match="not the original"):
        po.schedule(po.suite.get("jacobi-2d").kernel, "original").interchange("i", "j").gpu_time_tile()
    with pytest.raises(CodegenError, match="shared memory"):
        plan(po.suite.get("jacobi-2d").kernel, time_tile=8, tile=(64, 64))
    source = plan(po.suite.get("seidel-2d").kernel).source  # no stencil: as before
    assert type(source) is CudaSource


@needs_nvcc
def test_sources_compile_with_nvcc(tmp_path):
    """One nvcc run, host functions included: fdtd-2d by default (f64, four statements, a
    read-only array), heat-3d in f32 with K = 2 (the kernels of every rank also run on the CPU:
    test_generated_kernels_run_on_the_cpu)."""
    sources = {
        "fdtd_2d": po.cuda_source(po.suite.get("fdtd-2d").kernel),
        "heat_3d_f32": po.cuda_source(po.suite.get("heat-3d").kernel.with_dtype("f32"), time_tile=2),
    }
    assert_nvcc_compiles(tmp_path, sources, "sm_90")


# ----- the plan emulated in numpy --------------------------------------------------------------

def emulate(kernel, params: dict[str, int], args: dict, **options) -> None:
    """Run the overlapped-tile plan of ``kernel`` on the numpy ``args`` in place as the GPU
    does: per launch and per output tile, the region (the plan's halo) of every written array
    copied from the source side, the statements over the region's points in their boxes whose
    reads lie in the region, the output tile stored to the destination side; the launches
    alternate between the arrays and scratch copies, copied back after an odd count."""
    source = plan(kernel, **options).source
    tiling, scop = source.tiling, source.program.scop
    stencil = tiling.stencil
    first, count, extents = launch_plan(source, params)
    last = int(evaluate(stencil.time_bounds[1], params, {}))
    scratch = {a: np.full(extents, np.nan, args[a].dtype) for a in stencil.written}
    for j in range(count):
        read, write = (args, scratch) if j % 2 == 0 else (scratch, args)
        for index in product(*(range(n) for n in tiling.tiles(extents))):
            origin = [i * t - low for i, t, (low, _) in zip(index, tiling.tile, tiling.halo)]
            inside = tuple(slice(max(o, 0), min(o + r, n)) for o, r, n in zip(origin, tiling.region, extents))
            work = {a: np.full(extents, np.nan, args[a].dtype) for a in stencil.written}
            for a in stencil.written:
                work[a][inside] = read[a][inside]
            arrays = {**{k: v for k, v in args.items() if isinstance(v, np.ndarray)}, **work}
            for step in range(tiling.steps):
                t = first + j * tiling.steps + step
                if t > last:
                    break
                for s in stencil.statements:
                    box = [(int(evaluate(lo, params, {})), int(evaluate(hi, params, {}))) for lo, hi in s.box]
                    # the region's points in the box whose reads stay in the region
                    ranges = [range(max(o + below, lo), min(o + r - above - 1, hi) + 1)
                              for o, r, (lo, hi), (below, above) in zip(origin, tiling.region, box, s.reach)]
                    for x in product(*ranges):
                        env = {**params, s.time: t, **{it: x[k] - c for it, (k, c) in s.iterator_values().items()}}
                        work[s.array][tuple(x)] = evaluate(s.statement.value, env, arrays)
            out = tuple(slice(max(o + low, 0), min(o + low + t, n))
                        for o, (low, _), t, n in zip(origin, tiling.halo, tiling.tile, extents))
            for a in stencil.written:
                write[a][out] = work[a][out]
    if count % 2:
        for a in stencil.written:
            args[a][...] = scratch[a]
    assert scop.name == kernel.scop.name


def _emulated_matches(name: str, sizes: dict, **options) -> None:
    entry = po.suite.get(name)
    args = entry.inputs(sizes)
    expected = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in args.items()}
    entry.reference(**expected)
    params = {k: v for k, v in sizes.items()}
    emulate(entry.kernel, params, args, **options)
    for key, value in expected.items():
        if isinstance(value, np.ndarray):
            np.testing.assert_allclose(args[key], value, rtol=1e-12, atol=1e-12, err_msg=key)


@pytest.mark.parametrize("sizes, options", [
    ({"TSTEPS": 5, "N": 13}, {"time_tile": 2, "tile": (4, 8)}),    # K not dividing TSTEPS, odd size
    ({"TSTEPS": 4, "N": 11}, {"time_tile": 3, "tile": (8, 8)}),    # 2 launches: no copy back
    ({"TSTEPS": 3, "N": 9}, {"time_tile": 2, "tile": (16, 32)}),   # one tile larger than the array
    ({"TSTEPS": 1, "N": 7}, {"time_tile": 4, "tile": (4, 4)}),
    ({"TSTEPS": 0, "N": 7}, {"time_tile": 2, "tile": (4, 4)}),
])
def test_emulated_jacobi_2d(sizes, options):
    _emulated_matches("jacobi-2d", sizes, **options)


@pytest.mark.parametrize("sizes, options", [
    ({"TMAX": 5, "NX": 9, "NY": 11}, {"time_tile": 2, "tile": (4, 4)}),
    ({"TMAX": 3, "NX": 7, "NY": 5}, {"time_tile": 4, "tile": (16, 16)}),
    ({"TMAX": 1, "NX": 6, "NY": 7}, {"time_tile": 3, "tile": (4, 4)}),
    ({"TMAX": 0, "NX": 5, "NY": 5}, {"time_tile": 2, "tile": (4, 4)}),
])
def test_emulated_fdtd_2d(sizes, options):
    _emulated_matches("fdtd-2d", sizes, **options)


def test_emulated_halo_is_needed():
    """A halo one short of the plan's lets wrong edge values into the output tiles."""
    entry = po.suite.get("jacobi-1d")
    sizes = {"TSTEPS": 4, "N": 30}
    args = entry.inputs(sizes)
    expected = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in args.items()}
    entry.reference(**expected)
    stencil = find_stencil(scop_of(entry.kernel))
    original = type(stencil).halo
    try:
        type(stencil).halo = lambda self, steps: tuple((steps * lo - 1, steps * hi - 1) for lo, hi in self.step_halo)
        emulate(entry.kernel, sizes, args, time_tile=4, tile=8)
    finally:
        type(stencil).halo = original
    assert not np.allclose(args["A"], expected["A"])


# ----- the generated kernels run on the CPU, one thread per block -----------------------------

#: Stand-ins for CUDA's built-ins, so that g++ compiles the kernels of a source built with one
#: thread per block: each block's thread covers its whole region, barriers have nothing to wait
#: for, and blocks run one after the other (shared buffers are static: every element a point
#: of the next block reads is loaded by that block first).
_CPU_CUDA = """#include <math.h>
#define __CUDACC_RTC__
#define int64_t pl_int64_t
#define uint64_t pl_uint64_t
#define __global__
#define __host__
#define __device__
#define __shared__ static
#define __launch_bounds__(n)
#define __restrict__ __restrict
#define __syncthreads()
struct pl_uint3 { unsigned x, y, z; };
static pl_uint3 threadIdx, blockIdx, blockDim = {1, 1, 1}, gridDim = {1, 1, 1};
extern "C" void pl_set_block(unsigned x, unsigned y, unsigned z, unsigned gx, unsigned gy, unsigned gz)
{ blockIdx.x = x; blockIdx.y = y; blockIdx.z = z; gridDim.x = gx; gridDim.y = gy; gridDim.z = gz; }
"""


class _CpuModule:
    """A built module's stand-in (``get_function``) for :func:`polyopt.targets.stencil.launch`:
    each launch runs the grid's blocks in turn through ctypes (``setter``: the source's
    ``pl_set_block``), numpy arrays for device arrays."""

    def __init__(self, library, setter: str):
        self.library, self.setter = library, getattr(library, setter)

    def get_function(self, name: str):
        import ctypes
        function = getattr(self.library, name)

        def launch(grid, block, args):  # (one thread a block: the copy kernel's grid-stride loop covers all)
            values = [a.ctypes.data_as(ctypes.c_void_p) if isinstance(a, np.ndarray) else ctypes.c_long(int(a))
                      for a in args]
            for z, y, x in product(range(grid[2]), range(grid[1]), range(grid[0])):
                self.setter(x, y, z, *grid)
                function(*values)
        return launch


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")
def test_generated_kernels_run_on_the_cpu(tmp_path):
    """The generated kernel text itself (not the plan's data), built by g++ with one thread per
    block and launched by the target's own launcher, against the references; f64 and f32."""
    import ctypes
    cases = [("jacobi-2d", {"TSTEPS": 7, "N": 29}, np.float64, {"time_tile": 3, "tile": (8, 8)}),
             ("fdtd-2d", {"TMAX": 6, "NX": 21, "NY": 27}, np.float64, {"time_tile": 4, "tile": (4, 8)}),
             ("jacobi-1d", {"TSTEPS": 9, "N": 61}, np.float32, {"time_tile": 2, "tile": 16}),
             ("heat-3d", {"TSTEPS": 3, "N": 11}, np.float64, {"time_tile": 2, "tile": (4, 4, 4)})]
    plans = []
    for k, (name, sizes, dtype, options) in enumerate(cases):
        kernel = po.suite.get(name).kernel
        kernel = kernel if dtype == np.float64 else kernel.with_dtype("f32")
        rank = len(options["tile"]) if isinstance(options["tile"], tuple) else 1
        found = plan(kernel, block=(1,) * rank, **options)
        (tmp_path / f"k{k}.cpp").write_text(_CPU_CUDA.replace("pl_set_block", f"pl_set_block{k}") + found.source.source)
        plans.append(found)
    library = tmp_path / "kernels.so"
    subprocess.run(["g++", "-O1", "-shared", "-fPIC", "-o", str(library), *(f"k{k}.cpp" for k in range(len(cases)))],
                   cwd=tmp_path, check=True, capture_output=True)
    built = ctypes.CDLL(str(library))
    for k, ((name, sizes, dtype, _), found) in enumerate(zip(cases, plans)):
        module = _CpuModule(built, f"pl_set_block{k}")
        entry = po.suite.get(name)
        args = entry.inputs(sizes, dtype)
        expected = {key: (v.copy() if isinstance(v, np.ndarray) else v) for key, v in args.items()}
        entry.reference(**expected)
        values = [args[a.name] if a.kind == "array" else sizes[a.name] for a in abi_arguments(found.scop)]
        scratch = [np.full(args[a].shape, np.nan, dtype) for a in found.source.tiling.stencil.written]
        launch(found.source, module, values, sizes, scratch)
        tolerance = 1e-12 if dtype == np.float64 else 1e-5
        for key, value in expected.items():
            if isinstance(value, np.ndarray):
                np.testing.assert_allclose(args[key], value, rtol=tolerance, atol=tolerance, err_msg=f"{name} {key}")


# ----- the runtime's launches, on stand-ins (no GPU) ---------------------------------------------

class _Launches:
    """A built module's stand-in: each launch as (function, grid, block, the arguments after the
    ABI's ``leading`` ones) in ``launched``, or in ``capture`` while a graph is captured."""

    def __init__(self, leading: int):
        self.leading, self.launched, self.capture = leading, [], None

    def get_function(self, name: str):
        def launch(grid, block, args):
            (self.launched if self.capture is None else self.capture).append(
                (name, tuple(grid), tuple(block), tuple(args[self.leading:])))
        return launch


def _stand_in_runtime(monkeypatch, module: _Launches) -> list:
    """CuPy, the module build and graph capture stood in (scratch copies are
    :class:`~conftest.StandInArray`); returns the list of scratch copies made."""
    made = []
    stream = SimpleNamespace(record=lambda: None, wait_event=lambda event: None)

    def empty(shape, dtype):
        made.append(StandInArray(shape, 1 << (20 + len(made))))
        return made[-1]

    def captured(run):
        module.capture = []
        run()
        launches, module.capture = module.capture, None
        return stream, SimpleNamespace(launch=lambda on: module.launched.extend(launches))
    fake = SimpleNamespace(empty=empty, cuda=SimpleNamespace(Device=lambda: SimpleNamespace(id=0),
                                                             get_current_stream=lambda: stream))
    monkeypatch.setattr(cuda, "cupy_module", lambda: fake)
    monkeypatch.setattr(cuda, "_raw_module", lambda source: module)
    monkeypatch.setattr(cuda, "_captured", captured)
    return made


def test_launches_records_and_graphs_on_stand_ins(monkeypatch):
    """``CudaKernel.launch``: 7 steps of 3 per launch are three launches alternating direction
    from t = 0, 3, 6 and the copy back, on scratch copies made once per size; the record holds
    them all, and ``graph=True`` captures them once per argument set and replays the capture."""
    compiled = po.compile(po.suite.get("jacobi-2d").kernel, target="cuda", time_tile=3, tile=(8, 32))
    monkeypatch.setattr(compiled, "_scratch", {})
    monkeypatch.setattr(compiled, "_graphs", {})
    module = _Launches(leading=4)  # N, TSTEPS, A, B
    made = _stand_in_runtime(monkeypatch, module)
    arrays = {"A": StandInArray((100, 100), 256), "B": StandInArray((100, 100), 1 << 19)}
    record = compiled.launch({"N": 100, "TSTEPS": 7}, {}, arrays, record=True)
    source = compiled.compiled
    b_scratch, a_scratch = made  # (written in first-write order: B, then A)
    grid, block = (4, 13, 1), (32, 8, 1)
    expected = [(source.kernel, grid, block, (b_scratch, a_scratch, t0, flip)) for t0, flip in ((0, 0), (3, 1), (6, 0))]
    expected.append((source.copy, (40, 1, 1), (256, 1, 1), (b_scratch, a_scratch)))  # 10^4 elements
    assert module.launched == expected and len(record.launches) == 4
    module.launched.clear()
    for _ in range(2):
        compiled.launch({"N": 100, "TSTEPS": 7}, {}, arrays, graph=True)
    assert module.launched == expected * 2 and len(compiled._graphs) == 1 and len(made) == 2
    module.launched.clear()
    compiled.launch({"N": 100, "TSTEPS": 6}, {}, arrays)  # an even count: no copy back
    assert [launch[0] for launch in module.launched] == [source.kernel] * 2
    compiled.launch({"N": 50, "TSTEPS": 0}, {}, {"A": StandInArray((50, 50), 256), "B": StandInArray((50, 50), 1 << 19)})
    assert len(module.launched) == 2 and len(made) == 4  # no step: nothing launched (new size: new copies)


# ----- on a GPU --------------------------------------------------------------------------------

def _gpu_check(name: str, sizes: dict, dtype=np.float64, calls: int = 1, on_device: bool = False, **options):
    def tiled(compiled):
        assert isinstance(compiled.compiled, StencilSource)
    check_suite_kernel_on_gpu(name, sizes, dtype, calls, on_device, expect=tiled, **options)


_GPU_CASES = [
    ("jacobi-1d", {"TSTEPS": 7, "N": 1001}, {"time_tile": 3, "tile": 128}),
    ("jacobi-1d", {"TSTEPS": 40, "N": 5000}, {}),
    ("jacobi-2d", {"TSTEPS": 5, "N": 37}, {"time_tile": 2, "tile": (8, 32)}),
    ("jacobi-2d", {"TSTEPS": 11, "N": 250}, {"time_tile": True}),  # 2-d: only where asked (DEFAULT_RANKS)
    ("jacobi-2d", {"TSTEPS": 10, "N": 301}, {"time_tile": 5, "tile": (8, 64), "block": (4, 32)}),
    ("fdtd-2d", {"TMAX": 9, "NX": 33, "NY": 47}, {"time_tile": 4, "tile": (8, 16)}),
    ("fdtd-2d", {"TMAX": 20, "NX": 200, "NY": 240}, {"time_tile": True}),
    ("heat-3d", {"TSTEPS": 5, "N": 21}, {"time_tile": True}),
    ("heat-3d", {"TSTEPS": 4, "N": 40}, {"time_tile": 2, "tile": 4}),
]


@needs_gpu
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name, sizes, options", _GPU_CASES)
def test_gpu_numpy_arrays(name, sizes, options, dtype):
    _gpu_check(name, sizes, dtype, **options)


@needs_gpu
@pytest.mark.parametrize("name, sizes, options", [_GPU_CASES[0], _GPU_CASES[2], _GPU_CASES[5], _GPU_CASES[7]])
def test_gpu_repeated_calls_on_cupy_arrays(name, sizes, options):
    """Three calls on the same CuPy arrays: the first runs the host program, the second replays
    its launch record, the third the repeated call (one CUDA graph); each advances the state."""
    _gpu_check(name, sizes, calls=3, on_device=True, **options)


@needs_gpu
def test_gpu_graph_replay():
    """``launch(..., graph=True)`` captures the launches once per argument set and replays them."""
    import cupy
    entry = po.suite.get("jacobi-2d")
    sizes = {"TSTEPS": 9, "N": 70}
    args = entry.inputs(sizes)
    expected = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in args.items()}
    entry.reference(**expected)
    entry.reference(**expected)
    compiled = po.compile(entry.kernel, target="cuda", time_tile=2, tile=(8, 32))
    device = {k: cupy.asarray(v) for k, v in args.items() if isinstance(v, np.ndarray)}
    for _ in range(2):
        compiled.launch(sizes, {}, device, graph=True)
    np.testing.assert_allclose(device["A"].get(), expected["A"], rtol=1e-9)
    np.testing.assert_allclose(device["B"].get(), expected["B"], rtol=1e-9)
