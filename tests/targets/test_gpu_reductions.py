"""Sums split over the threads of a warp (issue 16 item 2, :mod:`polyopt.codegen.gpu_reduction`):
which statements are sums, where the mapping marks loops ``gpu_reduce``, the verifier's check of
that mark, the CUDA source (shuffles, one warp instead of one thread), and on a GPU the results
against numpy at ragged sizes, with and without the split."""
import numpy as np
import pytest

import polyopt as po
from polyopt.analysis.reductions import accumulated_array
from polyopt.codegen.gpu_mapping import kernel_mark
from polyopt.errors import RacyParallelLoopError
import islpy as isl
from polyopt.types import f32, f64, i64
from polyopt.targets.cuda import plan
from polyopt.transform.marks import GPU_REDUCE_MARK

from conftest import needs_gpu


def _statements(fn) -> dict:
    return {s.name: s for s in po.kernel(fn).scop.statements}


def sums_and_others(x: f64["N"], y: f64["N"], A: f64["N", "N"], k: i64["N"], z: f32["N"]):
    for i in range(N):
        for j in range(N):
            x[i] = x[i] + A[i, j] * y[j]        # S0: a sum
            x[i] = A[i, j] * y[j] + x[i]        # S1: a sum, term first
            x[i] = x[i] - A[i, j]               # S2: a difference: the sum of -A[i, j]
            x[i] = x[i] + x[j]                  # S3: its term reads the array it sums into
            k[i] = k[i] + 1                     # S4: an integer sum (exact: no split needed)
            y[i] = x[i] * 2.0 + y[i]            # S5: a sum into y whose term reads x
            z[i] = z[i] + A[i, j]               # S6: f32 sum of an f64 term: a cast in between


def test_which_statements_are_sums():
    found = {name: accumulated_array(s) for name, s in _statements(sums_and_others).items()}
    assert found == {"S0": "x", "S1": "x", "S2": "x", "S3": None, "S4": None, "S5": "y", "S6": None}


@pytest.fixture(scope="module")
def plans():
    names = ["atax", "bicg", "mvt", "gesummv", "gramschmidt", "durbin", "gemm"]
    return {name: plan(po.suite.get(name).kernel, contraction=False) for name in names}


def test_matrix_vector_sums_are_marked_and_split(plans):
    atax = plans["atax"]
    assert GPU_REDUCE_MARK in atax.program.pretty()
    sums = {k.name: sorted(k.sums) for k in atax.program.kernels}
    # (its two init nests run as one kernel: polyopt.schedulers.gpu_fusion)
    assert sums == {"polyopt_atax_k0": [], "polyopt_atax_k1": ["S2"], "polyopt_atax_k2": ["S3"]}
    source = atax.source.source
    k1 = source[source.index("polyopt_atax_k1("):source.index("polyopt_atax_k2(")]
    k2 = source[source.index("polyopt_atax_k2("):source.index("#ifndef __CUDACC_RTC__")]
    # tmp = A x reads rows along the loop: a warp a row, five shuffles
    assert k1.count("__shfl_xor_sync") == 5 and "c0 += 32" in k1
    # y = A^T tmp reads columns: 8 threads a column, 4 columns a warp, three shuffles
    assert k2.count("__shfl_xor_sync") == 3 and "c0 += 8" in k2 and "0x11111111u" in k2
    assert atax.source.shapes["polyopt_atax_k1"].cuda_block() == (256, 1, 1)
    assert atax.source.shapes["polyopt_atax_k1"].block == (8,)
    for name in ("bicg", "mvt", "gesummv"):
        assert "__shfl_xor_sync" in plans[name].source.source, name


LONE_SUM = '''def lone(x: f64["N"], s: f64["1"]):
    for i in range(N):
        s[0] += x[i]
'''


def test_a_lone_sum_runs_on_a_warp_not_a_thread(plans):
    # gramschmidt's nrm sum, between nrm = 0 and R[k][k] = sqrt(nrm), runs with them in one
    # one-block kernel (tests/targets/test_gpu_one_block.py): split over the block's threads
    source = plans["gramschmidt"].source.source
    assert "nrm = nrm + _s0;" in source and "_s0_w[threadIdx.x >> 5] = _s0;" in source
    # a sum alone is one warp's
    result = plan(po.kernel_from_source(LONE_SUM))
    (lone,) = result.program.kernels
    assert not lone.coords and lone.sums
    assert f"__launch_bounds__(32) {lone.name}(" in result.source.source
    assert f"{lone.name}<<<1, 32>>>" in result.source.source
    assert result.source.shapes[lone.name].cuda_block() == (32, 1, 1)


def test_two_coordinate_kernels_are_left_alone(plans):
    # gemm's k loop is a sum too, but its 2-d kernels have threads enough: no mark, no split
    assert all(not k.sums for k in plans["gemm"].program.kernels if len(k.coords) == 2)
    assert "__shfl_xor_sync" not in plans["gemm"].source.source


def test_reductions_false_keeps_one_thread_a_coordinate():
    source = po.cuda_source(po.suite.get("atax").kernel, reductions=False)
    assert "__shfl_xor_sync" not in source and "_part" not in source


def test_verifier_accepts_a_sum_mark_and_refuses_it_on_other_dependences():
    gemm = po.suite.get("gemm").kernel.scop
    tree = po.schedule(gemm, "original").tree
    k_band = tree.get_root().child(0).child(0).child(1).child(0)
    assert str(k_band.band_get_partial_schedule()).endswith("-> [(k)] }]")
    # C[i][j] += alpha * A[i][k] * B[k][j]: k carries only updates of one element
    po.verify(gemm, k_band.insert_mark(isl.Id(GPU_REDUCE_MARK)).get_schedule())
    # jacobi-1d's time loop carries stencil dependences: not a sum
    jacobi = po.suite.get("jacobi-1d").kernel.scop
    time_band = po.schedule(jacobi, "original").tree.get_root().child(0)
    racy = time_band.insert_mark(isl.Id(GPU_REDUCE_MARK)).insert_mark(kernel_mark("stencil"))
    with pytest.raises(RacyParallelLoopError, match=r"gpu_reduce: a sum split over the threads of a "
                                                    r"warp in kernel stencil"):
        po.verify(jacobi, racy.get_schedule())


def product_loop(x: f64["N"], A: f64["N", "N"]):
    for i in range(N):
        for j in range(N):
            x[i] = x[i] * A[i, j]


def sum_reading_its_own_writes(x: f64["N"], y: f64["N"], A: f64["N", "N"]):
    for i in range(N):
        for j in range(N):
            x[i] = x[i] + A[i, j] * y[i]
            y[i] = y[i] + x[i]


def test_loops_that_are_no_pure_sums_are_not_marked():
    for fn in (product_loop, sum_reading_its_own_writes):
        program = plan(po.kernel(fn)).program
        assert all(not k.sums for k in program.kernels), program.pretty()
        assert GPU_REDUCE_MARK not in program.pretty()


# ----- on a GPU --------------------------------------------------------------------------------

def _run(name: str, sizes: dict, dtype=np.float64, **options) -> None:
    entry = po.suite.get(name)
    kernel = entry.kernel if dtype == np.float64 else entry.kernel.with_dtype("f32")
    args = entry.inputs(sizes, dtype)
    expected = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in args.items()}
    entry.reference(**expected)
    po.compile(kernel, target="cuda", contraction=False, **options)(**args)
    tolerance = 1e-10 if dtype == np.float64 else 2e-4
    for key, value in expected.items():
        if isinstance(value, np.ndarray):
            np.testing.assert_allclose(args[key], value, rtol=tolerance, atol=tolerance,
                                       err_msg=f"{name} {sizes} {key}")


RAGGED = {
    "atax": [{"M": 1, "N": 1}, {"M": 3, "N": 70}, {"M": 97, "N": 5}, {"M": 33, "N": 1000}],
    "bicg": [{"M": 1, "N": 2}, {"M": 70, "N": 3}, {"M": 5, "N": 97}, {"M": 129, "N": 130}],
    "mvt": [{"N": 1}, {"N": 7}, {"N": 33}, {"N": 513}],
    "gesummv": [{"N": 1}, {"N": 9}, {"N": 300}],
    "gramschmidt": [{"M": 3, "N": 2}, {"M": 65, "N": 9}],
    "durbin": [{"N": 2}, {"N": 40}],
}


@needs_gpu
@pytest.mark.parametrize("reductions", [True, False])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", sorted(RAGGED))
def test_split_sums_match_numpy_at_ragged_sizes(name, dtype, reductions):
    for sizes in RAGGED[name]:
        _run(name, sizes, dtype, reductions=reductions)
