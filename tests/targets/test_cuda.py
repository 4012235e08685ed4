"""The CUDA target: source for every suite kernel, nvcc builds it (where nvcc exists), the GPU
mapping's structure, its mapped tree (block and thread coordinates as marks the verifier
checks), option and availability errors; on a GPU, every suite kernel matches its numpy
reference (skipped with the reason where CuPy or a GPU is missing)."""
import re
import shutil
import subprocess

import islpy as isl
import numpy as np
import pytest

import polyopt as po
import polyopt.codegen.gpu_mapping as gpu_mapping
from polyopt.codegen.gpu_mapping import HostLoop, kernel_mark
from polyopt.codegen.cuda import launch_shape
from polyopt.errors import RacyParallelLoopError
from polyopt.targets.cuda import plan
from polyopt.transform.marks import GPU_BLOCK_MARK, GPU_KERNEL_MARK, GPU_THREAD_MARK

from conftest import needs_gpu, needs_no_gpu

SUITE = po.suite.names()


@pytest.fixture(scope="module")
def plans():
    """What the CUDA target makes of every suite kernel (default options)."""
    return {name: plan(po.suite.get(name).kernel) for name in SUITE}


@pytest.fixture(scope="module")
def sources(plans):
    """CUDA source of every suite kernel (default options)."""
    return {name: result.source.source for name, result in plans.items()}


def test_source_for_every_suite_kernel(sources):
    for name, source in sources.items():
        assert '__global__ void' in source, name
        assert f'extern "C" void polyopt_{po.suite.get(name).kernel.scop.name}(' in source, name


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_nvcc_builds_every_suite_kernel(sources, tmp_path):
    files = []
    for name, source in sources.items():
        path = tmp_path / f"{name}.cu"
        path.write_text(source)
        files.append(path.name)
    result = subprocess.run(["nvcc", "-arch=sm_90", "-c", *files], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    assert sorted(p.stem for p in tmp_path.glob("*.o")) == sorted(SUITE)


def _mapped_kernels(tree: isl.Schedule) -> dict[str, int]:
    """Kernel name -> number of coordinate bands (each under gpu_block and gpu_thread) under its
    mark, in tree order; asserts that no coordinate mark is outside a kernel."""
    found: dict[str, int] = {}

    def visit(node, kernel):
        if node.get_type() == isl.schedule_node_type.mark:
            name = node.mark_get_id().get_name()
            if name.startswith(GPU_KERNEL_MARK + " "):
                kernel = name.split(" ", 1)[1]
                found[kernel] = 0
            elif name == GPU_BLOCK_MARK:
                assert kernel is not None
                thread = node.child(0)
                assert thread.mark_get_id().get_name() == GPU_THREAD_MARK
                band = thread.child(0)
                assert band.get_type() == isl.schedule_node_type.band and band.band_n_member() == 1
                found[kernel] += 1
        for k in range(node.n_children()):
            visit(node.child(k), kernel)

    visit(tree.get_root(), None)
    return found


def test_every_suite_kernels_mapped_tree_passes_verification(plans):
    for name, result in plans.items():
        program = result.program
        # plan() verified it already; the verifier on its own accepts it too
        po.verify(result.scop, result.mapped_tree)
        # the tree holds every kernel (launch-site order) and one marked band per coordinate
        assert _mapped_kernels(result.mapped_tree) == {k.name: len(k.coords) for k in program.kernels}, name
        assert list(_mapped_kernels(result.mapped_tree)) == [k.name for k in program.kernels], name


def test_mapped_tree_is_printable():
    result = plan(po.suite.get("gemm").kernel, contraction=False)
    text = result.program.pretty()
    update = result.program.kernels[1].name
    # i and j are the update's coordinates (j is x: the last); the k loop, a reduction each
    # thread runs on its own (shared-memory staging only reads A and B), is not marked
    expected = f"""\
      mark gpu_kernel {update}
        mark gpu_block
          mark gpu_thread
            band [NI, NJ, NK] -> [{{ S1[i, k, j] -> [(i)] }}]  [coincident=1]
              mark gpu_block
                mark gpu_thread
                  band [NI, NJ, NK] -> [{{ S1[i, k, j] -> [(j)] }}]  [coincident=1]
                    band [NI, NJ, NK] -> [{{ S1[i, k, j] -> [(k)] }}]"""
    assert expected in text, text
    assert f'mark: "{GPU_KERNEL_MARK} {update}"' in str(result.mapped_tree)
    assert str(isl.Schedule(str(result.mapped_tree))) == str(result.mapped_tree)
    # a stencil mapped the general way: the time loop is a host band outside the kernels' marks
    jacobi = plan(po.suite.get("jacobi-1d").kernel, time_tile=False).program.pretty().splitlines()
    assert jacobi[1].strip().startswith("band") and "-> [(t)]" in jacobi[1]
    assert sum(line.strip() == f"mark {GPU_BLOCK_MARK}" for line in jacobi) == 2


def _claim_every_member_parallel(self, node):
    return min(node.band_n_member(), gpu_mapping.MAX_GRID_DIMS)


def test_a_mapping_of_a_loop_carrying_a_dependence_is_refused(monkeypatch):
    kernel = po.suite.get("jacobi-1d").kernel
    monkeypatch.setattr(gpu_mapping._Mapper, "parallel_members", _claim_every_member_parallel)
    time_loop = r"\{ S0\[t, i\] -> \[\(t\)\]; S1\[t, i\] -> \[\(t\)\] \}"
    message = (rf"loop \[N, TSTEPS\] -> {time_loop} \(gpu_block/gpu_thread: a GPU block and "
               r"thread coordinate of kernel polyopt_jacobi_1d_k0\) is marked parallel but carries"
               r"(.|\n)*witness \(N=\d+, TSTEPS=\d+\): S\d\(\d+, \d+\) and S\d\(\d+, \d+\)")
    # the scheduler's path and a given schedule's path both verify the mapped tree
    with pytest.raises(RacyParallelLoopError, match=message):
        plan(kernel, algorithm="original")
    with pytest.raises(RacyParallelLoopError, match=message):
        po.cuda_source(kernel, schedule=po.schedule(kernel.scop, "original"))


def test_verify_checks_gpu_marks_in_a_hand_built_tree():
    scop = po.suite.get("jacobi-1d").kernel.scop
    tree = po.schedule(scop, "original").tree
    time_band = tree.get_root().child(0)
    assert time_band.get_type() == isl.schedule_node_type.band
    # a thread coordinate over the time loop: racy, named with the loop and the kernel
    racy = time_band.insert_mark(isl.Id(GPU_THREAD_MARK)).insert_mark(kernel_mark("stencil")).get_schedule()
    with pytest.raises(RacyParallelLoopError, match=r"-> \[\(t\)\]; .* \(gpu_thread: a GPU "
                                                    r"thread coordinate of kernel stencil\)"):
        po.verify(scop, racy)
    assert not po.is_legal(scop, racy)
    # a block coordinate outside any kernel mark is checked as well
    block = time_band.insert_mark(isl.Id(GPU_BLOCK_MARK)).get_schedule()
    with pytest.raises(RacyParallelLoopError, match=r"\(gpu_block: a GPU block coordinate "
                                                    r"\(outside any gpu_kernel mark\)\)"):
        po.verify(scop, block)
    # the space loop i inside one time step carries nothing: fine
    space = time_band.child(0).child(0).child(0)
    assert space.get_type() == isl.schedule_node_type.band
    po.verify(scop, space.insert_mark(isl.Id(GPU_THREAD_MARK)).get_schedule())


def test_stencil_time_loop_stays_on_the_host():
    program = plan(po.suite.get("jacobi-2d").kernel, time_tile=False).source.program  # (not time tiled)
    (loop,) = program.host
    assert isinstance(loop, HostLoop)
    assert [len(k.coords) for k in loop.body] == [2, 2]
    assert all(k.host_vars == (loop.var,) for k in loop.body)


def test_gemm_is_register_tiled_with_promoted_accumulators():
    result = plan(po.suite.get("gemm").kernel, contraction=False)
    program, shapes = result.source.program, result.source.shapes
    assert result.schedule.algorithm == "pluto"
    assert [len(k.coords) for k in program.kernels] == [2, 2]
    update = program.kernels[1]
    shape = shapes[update.name]
    assert shape.block == (8, 32) and shape.unroll == (4, 4) and shape.vector == (1, 1)
    text = result.source.source
    assert "double _r15 = C[" in text and "_r15 = _r15 + _s0[" in text
    # threadIdx.x walks j, the stride-1 subscript of C and B
    assert "B[c0 * NJ + _p1_]" in text and "_p1 = _b1 + threadIdx.x" in text
    # A's and B's tiles (32x16 and 16x128) are staged in shared memory, double-buffered; A's
    # transposed rows are padded by 16 bytes
    assert "__shared__ __align__(16) double _s0[1088];" in text  # 2 * 16 * (32 + 2)
    assert "__shared__ __align__(16) double _s1[4096];" in text
    # a 64x128 tile of 8x4 per thread would not fit with chunks of 16: chunks of 8
    wide = po.cuda_source(po.suite.get("gemm").kernel, block=(8, 32), tile=(64, 128))
    assert "__shared__ __align__(16) double _s0[1056];" in wide and "c0_chunk += 8" in wide
    # copied in A's own order (coalesced), stored k-major: a thread's rows are adjacent words;
    # alpha * A[i][k] is staged as a whole: one multiplication per element, not per use
    assert ("_s0[(0 * 16 + _d1) * 34 + _d0] = (_g0 >= 0 && _g0 < NI && _g1 >= 0 && _g1 < NK) "
            "? alpha * A[_g0 * NK + _g1] : (double)0;") in text
    assert "_r0 = _r0 + _s0[_half * 544 + " in text
    # a chunk the loop runs whole is copied without bounds checks (all of it is read)
    assert "if (_next + 15 < NK) {" in text and "_q0[_n] = alpha * A[_g0 * NK + _g1];" in text
    # the next chunk goes through registers into the other half, one barrier per chunk
    assert "_s0[(1 - _half) * 544 + (0 * 16 + _d1) * 34 + _d0] = _q0[_n];" in text
    # f64: a thread's coordinates are a block apart
    assert "_p0 = _b0 + threadIdx.y, _p1 = _b1 + threadIdx.x;" in text
    assert "_p0_ = _p0 + _u0 * 8, _p1_ = _p1 + _u1 * 32;" in text
    # f32: a thread's rows adjacent, its columns in runs of 4 (one 16-byte load), 32 runs apart
    f32 = po.cuda_source(po.suite.get("gemm").kernel.with_dtype("f32"), contraction=False)
    assert "_p0 = _b0 + threadIdx.y * 8, _p1 = _b1 + threadIdx.x * 4;" in f32
    assert "(_p1 + 3 - (_b1 + 0))" in f32
    assert "__shared__" not in po.cuda_source(po.suite.get("gemm").kernel, shared=False)
    # vector=(4, 2): runs of 2 columns, 32 runs apart
    runs = po.cuda_source(po.suite.get("gemm").kernel, vector=(4, 2))
    assert "_p1 = _b1 + threadIdx.x * 2;" in runs and "_p1_ = _p1 + _u1 / 2 * 64 + _u1 % 2;" in runs


def test_f64_register_tiles_widen_on_large_grids():
    source = plan(po.suite.get("gemm").kernel, contraction=False).source
    update = source.program.kernels[1].name
    assert source.wide == {update: update + "_w"}
    assert source.shapes[update + "_w"].unroll == (8, 4)
    # 4096^2: 32x64 blocks of 64x128 -> the wide tile; PolyBench LARGE: 144 blocks -> 32x128
    assert source.choose(update, [0, 0], [4095, 4095])[0] == update + "_w"
    name, shape, grid = source.choose(update, [0, 0], [999, 1099])
    assert name == update and grid == (9, 32, 1)
    assert "if ((long)pl_blocks(0, NJ - 1, 128, 2147483647) * (long)pl_blocks(0, NI - 1, 64, 65535) * (long)pl_blocks_over(0, NI - 1, 64, 65535) >= 1024)" in source.source
    # a shape the user gives is the only one; f32 has no wider variant
    assert plan(po.suite.get("gemm").kernel, block=(8, 32), tile=(32, 128)).source.wide == {}
    assert plan(po.suite.get("gemm").kernel.with_dtype("f32"), contraction=False).source.wide == {}


def test_bounds_are_parenthesized():
    source = po.cuda_source(po.suite.get("covariance").kernel)
    assert re.search(r"_b0 <= \(M >= N( \+ 1)? \? M - 1 : N - 1\)[;)]", source)


def test_sweeps_take_one_block_origin_aligned_to_a_warp():
    """Kernels of one or two coordinates have no grid-stride loop (y's blocks past the grid's
    limit go on in z), and a sweep's first x origin is rounded down to a multiple of 32."""
    source = plan(po.suite.get("jacobi-2d").kernel, time_tile=False).source
    text = source.source
    assert "gridDim" in text and "for (long _b" not in text
    assert "const long _b1 = 0 + (long)blockIdx.x * 32;" in text
    assert "pl_blocks(0, N - 2, 32, 2147483647), pl_blocks(1, N - 2, 8, 65535), pl_blocks_over(1, N - 2, 8, 65535)" in text
    shape = source.shapes[source.program.kernels[0].name]
    assert shape.align == 32 and not shape.strided
    assert shape.grid([1, 1], [1298, 1298]) == (41, 163, 1)
    assert shape.grid([1, 33], [8 * 65535 * 2 + 1, 63]) == (1, 65535, 3)  # y's overflow in z
    # three coordinates keep their grid-stride loops
    heat = plan(po.suite.get("heat-3d").kernel).source
    assert heat.shapes[heat.program.kernels[0].name].strided and "_b0 += (long)gridDim.z" in heat.source


def test_no_register_tiling_with_local_scalars_or_varying_control_flow():
    update = plan(po.suite.get("gemm").kernel, contraction=False).source.program.kernels[1]
    assert launch_shape(update, 8).unroll == (4, 4)
    assert launch_shape(update, 8, uses_scalars=True).unroll == (1, 1)

    @po.kernel
    def lower_product(A: po.f64["N", "N"], B: po.f64["N", "N"], C: po.f64["N", "N"]):
        for i in range(N):
            for j in range(N):
                for k in range(i):
                    C[i, j] += A[i, k] * B[k, j]

    # the k loop's bound depends on the coordinate i: no lockstep
    (kernel,) = plan(lower_product).source.program.kernels
    assert len(kernel.coords) == 2 and launch_shape(kernel, 8).unroll == (1, 1)


def test_promotion_needs_every_access_to_be_promoted():
    @po.kernel
    def shifted(A: po.f64["N", "N"]):
        for i in range(N):
            for k in range(1, N):
                A[i, 0] = A[i, 0] + A[i, k]

    # A[i, 0] is updated in the k loop but A[i, k] reads the same array: no register
    source = po.cuda_source(shifted, algorithm="original")
    assert "_r0" not in source


@pytest.mark.parametrize("algorithm", ["feautrier", "isl"])
def test_other_schedulers_map_to_the_gpu(algorithm):
    result = plan(po.suite.get("gemm").kernel, algorithm=algorithm)
    assert result.schedule.algorithm == algorithm
    assert [len(k.coords) for k in result.source.program.kernels] == [2]


def test_block_and_tile_options():
    source = po.cuda_source(po.suite.get("gemm").kernel, block=(16, 16), tile=(32, 64))
    assert "dim3(16, 16, 1)" in source and "blockIdx.x * 64" in source
    with pytest.raises(po.CodegenError, match="multiple of the block"):
        po.cuda_source(po.suite.get("gemm").kernel, block=(16, 16), tile=(20, 64))
    with pytest.raises(po.CodegenError, match="more than 1024 threads"):
        po.cuda_source(po.suite.get("gemm").kernel, block=(64, 64))


@needs_no_gpu
def test_call_without_gpu_is_a_clear_error():
    entry = po.suite.get("gemm")
    compiled = po.compile(entry.kernel, target="cuda")
    with pytest.raises(po.TargetUnavailableError, match="cuda"):
        compiled(**entry.inputs(entry.sizes("MINI")))
    # the CPU target is unaffected
    po.compile(entry.kernel)(**entry.inputs(entry.sizes("MINI")))



def _check(name: str, sizes: dict, dtype=np.float64, **options):
    entry = po.suite.get(name)
    kernel = entry.kernel if dtype == np.float64 else entry.kernel.with_dtype("f32")
    args = entry.inputs(sizes, dtype)
    expected = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in args.items()}
    entry.reference(**expected)
    po.compile(kernel, target="cuda", **options)(**args)
    tolerance = 1e-9 if dtype == np.float64 else 2e-4
    for key, value in expected.items():
        if isinstance(value, np.ndarray):
            np.testing.assert_allclose(args[key], value, rtol=tolerance, atol=tolerance, err_msg=key)


@needs_gpu
@pytest.mark.parametrize("name", SUITE)
def test_gpu_matches_reference(name):
    _check(name, po.suite.get(name).sizes("SMALL"))


@needs_gpu
@pytest.mark.parametrize("algorithm", ["feautrier", "isl", "original"])
@pytest.mark.parametrize("name", ["gemm", "lu", "jacobi-2d", "covariance"])
def test_gpu_other_schedulers(name, algorithm):
    _check(name, po.suite.get(name).sizes("MINI"), algorithm=algorithm)


@needs_gpu
def test_gpu_register_tiles_at_ragged_sizes():
    _check("gemm", {"NI": 37, "NJ": 45, "NK": 13})
    _check("syrk", {"M": 29, "N": 70}, tile=(16, 64))
    _check("gemm", {"NI": 70, "NJ": 130, "NK": 9}, np.float32)


@needs_gpu
def test_gpu_cupy_arrays_in_place():
    import cupy

    entry = po.suite.get("gemm")
    args = entry.inputs(entry.sizes("MINI"))
    expected = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in args.items()}
    entry.reference(**expected)
    device = {k: (cupy.asarray(v) if isinstance(v, np.ndarray) else v) for k, v in args.items()}
    po.compile(entry.kernel, target="cuda")(**device)
    np.testing.assert_allclose(device["C"].get(), expected["C"], rtol=1e-9)
    ni, nj, nk = device["C"].shape + device["A"].shape[1:]
    buffer = cupy.zeros(ni * nj + ni * nk)  # A overlaps the end of C
    overlapping = {"C": buffer[:ni * nj].reshape(ni, nj), "A": buffer[ni * nj - 1:][:ni * nk].reshape(ni, nk)}
    with pytest.raises(ValueError, match="overlap"):
        po.compile(entry.kernel, target="cuda")(**{**device, **overlapping})


@needs_gpu
def test_gpu_graph_replay_of_a_host_loop():
    entry = po.suite.get("jacobi-2d")
    args = entry.inputs(entry.sizes("MINI"))
    expected = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in args.items()}
    entry.reference(**expected)
    compiled = po.compile(entry.kernel, target="cuda", time_tile=False)  # a host loop of launches
    bound, device, _ = compiled.bind((), args)
    compiled.launch(bound.params, bound.scalars, device, graph=True)
    np.testing.assert_allclose(device["A"].get(), expected["A"], rtol=1e-12)
    np.testing.assert_allclose(device["B"].get(), expected["B"], rtol=1e-12)


@needs_gpu
def test_gpu_benchmark_rows():
    from polyopt.bench import BenchConfig, bench_kernels

    report = bench_kernels(["gemm", "jacobi-1d"], BenchConfig(size="MINI", repeats=2, threads=1,
                                                               target="cuda"))
    assert report["correct"] and report["machine"]["gpu"]["name"]
    gemm, jacobi = (k["runners"] for k in report["kernels"])
    assert set(gemm) == {"polyopt", "cublas", "gcc"} and set(jacobi) == {"polyopt", "gcc"}
    ours = gemm["polyopt"]
    assert ours["gpu_kernels"] == 1 and ours["max_rel_error"] < 1e-9  # gemm: one contraction kernel
    assert 0 < ours["kernel_min_s"] <= ours["kernel_median_s"] < ours["median_s"]
    assert ours["kernel_speedup_vs_cublas"] > 0 and ours["kernel_gflops"] > 0
    assert gemm["cublas"]["correct"] and "kernel_median_s" not in gemm["gcc"]


# ----- the GPU mapping as a step of the Schedule ----------------------------------------------------

def test_gpu_map_by_hand_gives_the_automatic_mapping_of_gemm():
    gemm = po.suite.get("gemm").kernel
    s = po.schedule(gemm, "original").distribute("i")
    mapped = s.gpu_map("i", "j").interchange("k", "j@S1").gpu_map("i@S1", "j@S1")
    assert mapped.trace[-1].as_python() == "gpu_map('i@S1', 'j@S1')"
    assert "mark gpu_block" in mapped.pretty()
    assert po.cuda_source(gemm, schedule=mapped) == po.cuda_source(gemm, contraction=False)


def test_gpu_map_refuses_racy_and_nested_coordinates():
    gemm = po.suite.get("gemm").kernel
    s = po.schedule(gemm, "original").distribute("i")
    with pytest.raises(po.IllegalScheduleError, match=r"gpu_map\('i@S1', 'k'\).*carries the dependence"):
        s.gpu_map("i@S1", "k")
    with pytest.raises(po.ScheduleError, match="inside a GPU kernel already"):
        s.gpu_map("i").gpu_map("j")
    with pytest.raises(po.ScheduleError, match="one to three loops"):
        s.gpu_map()


@pytest.mark.parametrize("name", po.suite.names())
def test_the_plan_records_its_mapping_and_replays_to_the_same_source(name):
    kernel = po.suite.get(name).kernel
    made = plan(kernel, contraction=False)  # the contraction kernel is no step of the schedule
    recorded = [step for step in made.schedule.trace if step.primitive == "gpu_map"]
    kernels = [k for k in made.source.program.kernels if k.coords]
    assert len(recorded) in (0, len(kernels))  # all kernels' coordinates, or none (loops split anew)
    again = po.Trace.from_json(made.schedule.trace.to_json()).apply(po.schedule(kernel, "original"), check=False)
    assert po.cuda_source(kernel, schedule=again) == made.source.source


# Found by the random-steps property test: a register tile's AST options (its isolated part refers
# to the outer loops) anchored the subtree, and isl refused to move the band the mapping splits.
REGISTER_TILED_OUTER = '''def nest(A: f64["3 * N + 8", "3 * N + 8"], B: f64["3 * N + 8"]):
    for i0_1 in range(0, N - 1):
        for i0_2 in range(i0_1 + 1, N):
            B[(N - 1 - i0_2) + 2] = 0.5 * B[i0_2 + 3]
    for i3_1 in range(1, N - 1):
        B[(N - 1 - i3_1) + 10] = -0.5 * B[10] + 0.25 * B[(N - 1 - i3_1) + 3]
'''


def test_a_register_tiled_schedule_maps_to_the_gpu():
    kernel = po.kernel_from_source(REGISTER_TILED_OUTER)
    tiled = po.schedule(kernel, "original").register_tile("i3_1", sizes=[2])
    assert "__global__" in po.cuda_source(kernel, schedule=tiled)
    gemm = po.suite.get("gemm").kernel
    assert "__global__" in po.cuda_source(gemm, schedule=po.schedule(gemm, "pluto", register_tile="auto"))
