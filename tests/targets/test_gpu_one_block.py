"""Issue 16: no one-thread kernels. Setup scalars the host computes (``gpu_host`` statements:
deriche's and adi's coefficients) and host loops of one-dimensional work run as one kernel of
one thread block (``gpu_one_block``: durbin). Here: the sources (nvcc builds them), the mapped
trees (the verifier checks the phases' thread coordinates), the mapped program run in Python
(host statements as the launcher runs them, thread coordinates last first) against numpy; on a
GPU, the compiled kernels against numpy (SMALL) and replays with other scalar values."""
import re
import shutil
import subprocess

import islpy as isl
import numpy as np
import pytest

import polyopt as po
from polyopt.codegen.gpu_host import host_storage, run_host_statement
from polyopt.codegen.gpu_mapping import (GPU_ONE_BLOCK_MARK, GPU_PHASE_MARK, BlockKernel, HostLoop,
                                         HostStatement, Kernel)
from polyopt.codegen.ast_interpreter import run_loops
from polyopt.analysis.evaluate import evaluate
from polyopt.errors import RacyParallelLoopError
from polyopt.targets.arguments import bind_arguments
from polyopt.targets.cuda import plan
from polyopt.targets.interpreter import prepare
from polyopt.transform.marks import GPU_BLOCK_MARK, GPU_THREAD_MARK

from conftest import needs_gpu

#: The suite kernels whose CUDA code launched one-thread kernels before issue 16's work and no
#: longer does (the last two: nussinov runs a wavefront, correlation's single-instance
#: statement runs in the kernel before it).
FIXED = ["deriche", "adi", "durbin", "gramschmidt", "ludcmp", "nussinov", "correlation"]
#: Those checked in f32 on a GPU too.
IN_F32 = FIXED[:5]
#: What launches one thread: a kernel bounded to one thread, or a launch of one.
ONE_THREAD = re.compile(r"__launch_bounds__\(1\)|<<<1, 1>>>")

HOST_SCALAR_IN_A_LOOP = '''def nest(T: int, A: f64["N"], scale: f64):
    for t in range(T):
        s = scale * t + 1.0
        w = s * s
        for i in range(N):
            A[i] = A[i] * 0.5 + w
'''
#: ludcmp with its updates written ``w += -a * b`` (the suite's ``w -= a * b`` is the same sum to
#: the reductions analysis): every loop is sequential but each runs a sum, so the whole kernel is
#: one block kernel, the sums split over its threads.
LUDCMP_SUMS = '''def ludcmp_sums(A: f64["N", "N"], b: f64["N"], x: f64["N"], y: f64["N"]):
    for i in range(N):
        for j in range(i):
            w = A[i, j]
            for k in range(j):
                w += -A[i, k] * A[k, j]
            A[i, j] = w / A[j, j]
        for j in range(i, N):
            w = A[i, j]
            for k in range(i):
                w += -A[i, k] * A[k, j]
            A[i, j] = w
    for i in range(N):
        w = b[i]
        for j in range(i):
            w += -A[i, j] * y[j]
        y[i] = w
    for i in range(N - 1, -1, -1):
        w = y[i]
        for j in range(i + 1, N):
            w += -A[i, j] * x[j]
        x[i] = w / A[i, i]
'''


#: A statement of one instance after a parallel loop (it reads what the loop's first instance
#: wrote and writes what that instance read): it runs in the loop's kernel, in its first thread.
LONE_AFTER = '''def lone_after(A: f64["N"], B: f64["N"]):
    for i in range(N):
        A[i] = B[i] * 2.0
    B[0] = A[0] + 1.0
'''
#: One before a parallel loop, whose first instance reads what it writes: it runs in that kernel.
LONE_BEFORE = '''def lone_before(A: f64["N"], B: f64["N"]):
    B[0] = 3.0
    for i in range(N):
        A[i] = B[i] * 2.0
'''
#: One between two parallel loops whose last instances depend on it: in either kernel its
#: thread would race with another, so it stays a one-thread kernel of its own.
LONE_RACY = '''def lone_racy(A: f64["N"], B: f64["N"]):
    for i in range(N):
        A[i] = B[i] * 2.0
    B[N - 1] = A[0]
    for i in range(N):
        A[i] = A[i] + B[i]
'''

#: One after a product whose threads run the k loop, register-tiled, A and B staged in shared
#: memory: merged, the statement beside that loop would turn the staging off; it is not merged.
LONE_STAGED = '''def lone_staged(A: f64["N", "N"], B: f64["N", "N"], C: f64["N", "N"]):
    for i in range(N):
        for j in range(N):
            for k in range(N):
                C[i, j] += A[i, k] * B[k, j]
    C[0, 0] = 1.0
'''


def _ludcmp_sums_inputs(n: int) -> dict:
    entry = po.suite.get("ludcmp")
    return entry.inputs({"N": n})


def _run_program(program, params: dict, scalars: dict, arrays: dict) -> None:
    """Run a mapped GPU program in Python on ``arrays`` (in place): host loops, host statements
    as the CUDA launcher runs them, kernels and phases with their thread coordinates last first
    (a coordinate that carries a dependence gives a wrong result)."""
    scop = program.scop
    env, storage = prepare(scop, params, scalars, arrays)
    storage.update(host_storage(scop, program.host_scalars))

    def steps(items, env: dict) -> None:
        for step in items:
            if isinstance(step, HostLoop):
                for value in range(evaluate(step.lower, env, {}), evaluate(step.upper, env, {}) + 1):
                    steps(step.body, {**env, step.var: value})
            elif isinstance(step, HostStatement):
                run_host_statement(scop, step, env, storage)
            elif isinstance(step, BlockKernel):
                steps(step.steps, env)
            elif not step.coords:
                run_loops(scop, step.body, env, storage)
            else:
                boxes = [range(evaluate(lo, env, {}), evaluate(hi, env, {}) + 1)
                         for lo, hi in zip(step.lower, step.upper)]
                for point in reversed(list(np.ndindex(*map(len, boxes)))):
                    at = {**env, **{c: box[k] for c, box, k in zip(step.coords, boxes, point)}}
                    if evaluate(step.guard, at, storage):
                        run_loops(scop, step.body, at, storage)

    with np.errstate(all="ignore"):
        steps(program.host, env)


def _inputs(name: str, size: str):
    entry = po.suite.get(name)
    args = entry.inputs(entry.sizes(size))
    expected = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in args.items()}
    entry.reference(**expected)
    return entry, args, expected


def _check_against(expected: dict, got: dict, tolerance: float = 1e-9) -> None:
    for key, value in expected.items():
        if isinstance(value, np.ndarray):
            np.testing.assert_allclose(got[key], value, rtol=tolerance, atol=tolerance, err_msg=key)


@pytest.fixture(scope="module")
def fixed():
    """The CUDA plans of the fixed suite kernels (default options)."""
    return {name: plan(po.suite.get(name).kernel) for name in FIXED}


@pytest.mark.parametrize("name", FIXED)
def test_no_one_thread_kernels(fixed, name):
    source = fixed[name].source.source
    assert not ONE_THREAD.findall(source), name
    assert not any(isinstance(k, Kernel) and not k.coords for k in fixed[name].program.kernels)


def test_deriches_coefficients_are_computed_by_the_host(fixed):
    result = fixed["deriche"]
    program, source = result.program, result.source.source
    assert {"k", "a1", "a5", "b1", "c2"} <= set(program.host_scalars)
    assert "mark gpu_host S0" in program.pretty()
    host = source[source.index('extern "C" void polyopt_deriche('):]
    # the host wrapper computes them first, in the statements' order, and passes them on
    assert host.index("  double k = 0;") < host.index("k = (1.0 - exp(-alpha))") < host.index("a1 = k;")
    assert "__device__ double k;" not in source
    launch = next(line for line in host.splitlines() if "a1, a2, b1, b2" in line)
    assert launch.strip().startswith("polyopt_deriche_k")
    kernel = next(k for k in program.kernels if "a1" in k.host_scalars)
    assert "double a1" in source[source.index(f"{kernel.name}("):].split("\n")[0]


def test_durbin_runs_as_one_block(fixed):
    result = fixed["durbin"]
    (block,) = result.program.kernels
    assert isinstance(block, BlockKernel) and result.program.host == (block,)
    text = result.program.pretty()
    assert f"mark gpu_kernel {block.name}\n" in text and f"mark {GPU_ONE_BLOCK_MARK}" in text
    assert text.count(f"mark {GPU_PHASE_MARK} ") == 10 and f"mark {GPU_BLOCK_MARK}" not in text
    assert text.count(f"mark {GPU_THREAD_MARK}") == 2 and "mark gpu_reduce" in text
    source = result.source.source
    assert f"{block.name}<<<1, 1024>>>" in source and "__launch_bounds__(1024)" in source
    assert "__shared__ double alpha;" in source and "__device__ double" not in source
    assert source.count("__syncthreads();") >= 10
    assert "0 one-thread" in result.schedule.notes[-1]


def test_the_verifier_checks_the_threads_of_a_one_block_kernel(fixed):
    result = fixed["durbin"]
    po.verify(result.scop, result.mapped_tree)
    # a thread coordinate on the k loop the block runs sequentially: refused, naming the kernel
    sequence = result.mapped_tree.get_root().child(0).child(0).child(0)
    assert sequence.get_type() == isl.schedule_node_type.sequence
    loop = sequence.child(3).child(0)
    assert "S3[k] -> [(k)]" in str(loop.band_get_partial_schedule())
    racy = loop.insert_mark(isl.Id(GPU_THREAD_MARK)).get_schedule()
    block = result.program.kernels[0].name
    with pytest.raises(RacyParallelLoopError, match=rf"gpu_thread: a GPU thread coordinate of kernel {block}"):
        po.verify(result.scop, racy)


@pytest.mark.parametrize("name", po.suite.names())
def test_the_mapped_program_computes_the_reference(name):
    entry, args, expected = _inputs(name, "MINI")
    result = plan(entry.kernel, contraction=False, time_tile=False)  # (the general mapping)
    bound = bind_arguments(result.scop, (), args)
    _run_program(result.program, bound.params, bound.scalars, bound.arrays)
    _check_against(expected, args)


def test_correlations_lone_statement_runs_in_the_kernel_before_it(fixed):
    """corr[M-1][M-1] = 1.0 (S15, one instance) runs in the kernel of S14 (corr[j][i] =
    corr[i][j], i < j) at its first point, also where that kernel has no other instance
    (M = 1): the mapped tree passes the verifier and the program computes the interpreter's."""
    result = fixed["correlation"]
    po.verify(result.scop, result.mapped_tree)
    (merged,) = [k for k in result.program.kernels if "S15" in k.statements]
    assert merged.statements == {"S14", "S15"} and len(merged.coords) == 2
    assert len(result.program.kernels) == 10
    # the plan records the kernels' loops; replayed (coordinates given), S15 is merged again
    assert sum(step.primitive == "gpu_map" for step in result.schedule.trace) == 10
    again = plan(po.suite.get("correlation").kernel, schedule=result.schedule).program
    assert [k.statements for k in again.kernels] == [k.statements for k in result.program.kernels]
    for m, n in ((1, 3), (2, 3), (5, 4)):
        args = po.suite.get("correlation").inputs({"M": m, "N": n})
        expected = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in args.items()}
        po.interpret(result.scop, **expected)
        bound = bind_arguments(result.scop, (), args)
        _run_program(result.program, bound.params, bound.scalars, bound.arrays)
        _check_against(expected, args, 1e-12)


@pytest.mark.parametrize("source, merged", [(LONE_AFTER, True), (LONE_BEFORE, True), (LONE_RACY, False)])
def test_a_single_instance_statement_is_merged_where_legal(source, merged):
    kernel = po.kernel_from_source(source)
    result = plan(kernel, algorithm="original")
    po.verify(result.scop, result.mapped_tree)
    lone = {"lone_after": "S1", "lone_before": "S0", "lone_racy": "S1"}[kernel.scop.name]
    (holder,) = [k for k in result.program.kernels if lone in k.statements]
    assert bool(holder.coords) == merged and (len(holder.statements) == 2) == merged
    assert bool(ONE_THREAD.findall(result.source.source)) != merged
    for n in (1, 2, 6):
        a, b = np.linspace(1.0, 2.0, n), np.linspace(-1.0, 1.0, n)
        expected_a, expected_b = a.copy(), b.copy()
        po.interpret(kernel, A=expected_a, B=expected_b)
        _run_program(result.program, {"N": n}, {}, {"A": a, "B": b})
        np.testing.assert_allclose(a, expected_a, rtol=1e-15)
        np.testing.assert_allclose(b, expected_b, rtol=1e-15)


def test_a_kernel_whose_threads_loop_takes_no_single_instance_statement():
    kept = plan(po.kernel_from_source(LONE_STAGED), algorithm="original", contraction=False)
    product, lone = kept.program.kernels
    assert product.statements == {"S0"} and not lone.coords and "__shared__" in kept.source.source


def test_a_host_scalar_inside_a_host_loop():
    kernel = po.kernel_from_source(HOST_SCALAR_IN_A_LOOP)
    result = plan(kernel)
    program = result.program
    assert set(program.host_scalars) == {"s", "w"}
    (loop,) = program.host
    assert isinstance(loop, HostLoop) and [type(s) for s in loop.body] == [HostStatement, HostStatement, Kernel]
    assert loop.body[2].host_scalars == ("w",)
    a = np.linspace(0.0, 1.0, 7)
    expected = a.copy()
    po.interpret(kernel, T=3, A=expected, scale=1.5)
    _run_program(program, {"N": 7, "T": 3}, {"scale": 1.5}, {"A": a})
    np.testing.assert_allclose(a, expected, rtol=1e-15)


def test_loops_of_sums_run_in_one_block():
    kernel = po.kernel_from_source(LUDCMP_SUMS)
    result = plan(kernel)
    (block,) = result.program.kernels
    assert isinstance(block, BlockKernel) and "0 one-thread" in result.schedule.notes[-1]
    assert result.program.pretty().count("mark gpu_reduce") == 4
    assert result.source.source.count("_w[threadIdx.x >> 5] = ") == 4
    args = _ludcmp_sums_inputs(12)
    expected = {k: v.copy() for k, v in args.items()}
    po.interpret(kernel, **expected)
    bound = bind_arguments(result.scop, (), args)
    _run_program(result.program, bound.params, bound.scalars, bound.arrays)
    _check_against(expected, args, 1e-12)


def test_a_serial_loop_nest_is_not_merged_into_a_block():
    """pluto fuses ludcmp_sums' factorization into one sequential band, no sum to split: that
    kernel stays one-thread (and the GPU choice prefers the original order), it is not hidden
    in a block kernel."""
    notes = plan(po.kernel_from_source(LUDCMP_SUMS)).schedule.notes[-1]
    assert notes.startswith("gpu schedule: original chosen")
    assert re.search(r"beaten: pluto: [^;]*, 3 kernels, 2 one-thread \(2 serial", notes), notes


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_nvcc_builds_the_variants(tmp_path):
    durbin = po.suite.get("durbin").kernel
    sources = {"durbin_f32": po.cuda_source(durbin.with_dtype("f32")),
               "durbin_no_split": po.cuda_source(durbin, reductions=False),
               "deriche_f32": po.cuda_source(po.suite.get("deriche").kernel.with_dtype("f32")),
               "host_loop": po.cuda_source(po.kernel_from_source(HOST_SCALAR_IN_A_LOOP)),
               "ludcmp_sums": po.cuda_source(po.kernel_from_source(LUDCMP_SUMS)),
               "lone_after": po.cuda_source(po.kernel_from_source(LONE_AFTER), algorithm="original")}
    assert "float _s0 = -0.0f;" in sources["durbin_f32"] and "__shfl_xor_sync" not in sources["durbin_no_split"]
    for name, source in sources.items():
        assert not ONE_THREAD.findall(source), name
        (tmp_path / f"{name}.cu").write_text(source)
    result = subprocess.run(["nvcc", "-arch=sm_90", "-c", *(f"{n}.cu" for n in sources)], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]


# ----- on a GPU -------------------------------------------------------------------------------

def _gpu_check(name: str, size: str = "SMALL", dtype=np.float64, **options) -> None:
    entry = po.suite.get(name)
    kernel = entry.kernel if dtype == np.float64 else entry.kernel.with_dtype("f32")
    args = entry.inputs(entry.sizes(size), dtype)
    expected = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in args.items()}
    entry.reference(**expected)
    po.compile(kernel, target="cuda", **options)(**args)
    _check_against(expected, args, 1e-9 if dtype == np.float64 else 2e-4)


@needs_gpu
@pytest.mark.parametrize("name", FIXED)
@pytest.mark.parametrize("size", ["MINI", "SMALL", "MEDIUM"])
def test_gpu_fixed_kernels_match_the_reference(name, size):
    _gpu_check(name, size)


@needs_gpu
@pytest.mark.parametrize("name", IN_F32)
def test_gpu_fixed_kernels_in_f32(name):
    _gpu_check(name, dtype=np.float32)


@needs_gpu
@pytest.mark.parametrize("source", [LONE_AFTER, LONE_BEFORE, LONE_RACY])
@pytest.mark.parametrize("n", [1, 2, 1000])
def test_gpu_single_instance_statements_match_the_interpreter(source, n):
    kernel = po.kernel_from_source(source)
    a, b = np.linspace(1.0, 2.0, n), np.linspace(-1.0, 1.0, n)
    expected_a, expected_b = a.copy(), b.copy()
    po.interpret(kernel, A=expected_a, B=expected_b)
    po.compile(kernel, target="cuda", algorithm="original")(A=a, B=b)
    np.testing.assert_allclose(a, expected_a, rtol=1e-15)
    np.testing.assert_allclose(b, expected_b, rtol=1e-15)


@needs_gpu
def test_gpu_durbin_without_split_sums():
    _gpu_check("durbin", reductions=False)


@needs_gpu
def test_gpu_host_scalars_follow_the_scalar_arguments():
    """Calls on CuPy arrays are recorded and replayed (and captured as graphs): a call with
    another alpha must not replay the host scalars of the one before."""
    import cupy

    entry, args, _ = _inputs("deriche", "SMALL")
    compiled = po.compile(entry.kernel, target="cuda")
    for alpha in (0.25, 0.25, 0.5, 0.25):
        expected = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in args.items()}
        expected["alpha"] = alpha
        entry.reference(**expected)
        device = {k: (cupy.asarray(v) if isinstance(v, np.ndarray) else v) for k, v in args.items()}
        compiled(**{**device, "alpha": alpha})
        _check_against(expected, {k: v.get() for k, v in device.items() if not np.isscalar(v)})
    bound, device, _ = compiled.bind((), {**args, "alpha": 0.5})
    compiled.launch(bound.params, bound.scalars, device, graph=True)
    expected = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in args.items()}
    entry.reference(**{**expected, "alpha": 0.5})
    _check_against({"imgOut": expected["imgOut"]}, {"imgOut": device["imgOut"].get()})


@needs_gpu
def test_gpu_host_scalar_inside_a_host_loop():
    kernel = po.kernel_from_source(HOST_SCALAR_IN_A_LOOP)
    a = np.linspace(0.0, 1.0, 1000)
    expected = a.copy()
    po.interpret(kernel, T=5, A=expected, scale=1.5)
    po.compile(kernel, target="cuda")(T=5, A=a, scale=1.5)
    np.testing.assert_allclose(a, expected, rtol=1e-15)


@needs_gpu
@pytest.mark.parametrize("n", [12, 120, 400])
def test_gpu_loops_of_sums_in_one_block(n):
    kernel = po.kernel_from_source(LUDCMP_SUMS)
    args = _ludcmp_sums_inputs(n)
    expected = {k: v.copy() for k, v in args.items()}
    po.suite.get("ludcmp").reference(**expected)
    po.compile(kernel, target="cuda")(**args)
    _check_against(expected, args)
