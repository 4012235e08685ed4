"""Contractions over a cut box on the CUDA target: the output domain is the output indices' box
cut by affine constraints among them (PolyBench's syrk: ``j <= i``), the K indices a box. One
batched-GEMM kernel computes the bounding box's tiles, skips the tiles outside the cut and
tests each element it reads or writes against the constraints, so the elements outside (the
strictly upper triangle of syrk's C) are left as they were. The source tests need no GPU (nvcc
builds each engine for sm_80 and sm_90a); on a GPU every tile shape, forced, is checked against
numpy at ragged sizes, and so is the untouched part of the output."""
import shutil
import subprocess

import numpy as np
import pytest

import polyopt as po
from polyopt.analysis import expr as E
from polyopt.analysis.contraction import find_contraction
from polyopt.codegen.cuda_contraction import ContractionSource
from polyopt.targets.cache import scop_of
from polyopt.targets.contraction import launch_layout
from polyopt.targets.cuda import CudaKernel, plan

from conftest import (CONTRACTION_TILES, assert_nvcc_compiles, force_contraction_tile, half_operands, needs_gpu,
                      needs_nvcc)

f32, f64 = po.f32, po.f64


@po.kernel
def syrk_strict(A: f64["N", "K"], C: f64["N", "N"]):
    """C = A A^T strictly below the diagonal (j < i), loops i, j, k."""
    for i in range(N):
        for j in range(i):
            C[i, j] = 0.0
            for k in range(K):
                C[i, j] += A[i, k] * A[j, k]


@po.kernel
def syrk_upper(alpha: f64, A: f64["N", "K"], C: f64["N", "N"]):
    """C += alpha A A^T on and above the diagonal (i <= j), no init."""
    for i in range(N):
        for k in range(K):
            for j in range(i, N):
                C[i, j] += alpha * A[i, k] * A[j, k]


@po.kernel
def gemm_anti(A: f64["N", "K"], B: f64["K", "N"], C: f64["N", "N"]):
    """C += A B above the anti-diagonal (i + j < N: a constraint with a parameter)."""
    for i in range(N):
        for j in range(N - i):
            for k in range(K):
                C[i, j] += A[i, k] * B[k, j]


@po.kernel
def syrk_bias_relu(A: f64["N", "K"], bias: f64["N"], C: f64["N", "N"]):
    """The lower triangle of max(A A^T + bias, 0): an epilogue over the cut output domain."""
    for i in range(N):
        for j in range(i + 1):
            C[i, j] = 0.0
            for k in range(K):
                C[i, j] += A[i, k] * A[j, k]
    for i in range(N):
        for j in range(i + 1):
            C[i, j] = max(C[i, j] + bias[j], 0.0)


@po.kernel
def batched_band(A: f64["NB", "N", "K"], B: f64["NB", "N", "K"], C: f64["NB", "N", "N"]):
    """C[b] += A[b] B[b]^T on j <= i + b: a constraint naming a batch index."""
    for b in range(NB):
        for i in range(N):
            for j in range(min(i + b + 1, N)):
                for k in range(K):
                    C[b, i, j] += A[b, i, k] * B[b, j, k]


@po.kernel
def rows_from_one(A: f64["N", "K"], B: f64["K", "N"], C: f64["N", "N"]):
    """C += A B on rows 1..N-1: a box from 1, the box from 0 cut by i >= 1."""
    for i in range(1, N):
        for j in range(N):
            for k in range(K):
                C[i, j] += A[i, k] * B[k, j]


#: Per kernel: the output's cut (True where the kernel writes C, over the output's index grid
#: ``(i, j)`` or ``(b, i, j)``) and the value it writes there, from the inputs in float64.
def _syrk_expected(args):
    return np.tri(len(args["C"]), dtype=bool), args["beta"] * args["C"] + args["alpha"] * args["A"] @ args["A"].T


def _strict_expected(args):
    return np.tri(len(args["C"]), k=-1, dtype=bool), args["A"] @ args["A"].T


def _upper_expected(args):
    return ~np.tri(len(args["C"]), k=-1, dtype=bool), args["C"] + args["alpha"] * args["A"] @ args["A"].T


def _anti_expected(args):
    n = len(args["C"])
    return np.add.outer(np.arange(n), np.arange(n)) < n, args["C"] + args["A"] @ args["B"]


def _from_one_expected(args):
    cut = np.ones(args["C"].shape, dtype=bool)
    cut[0] = False
    return cut, args["C"] + args["A"] @ args["B"]


def _bias_expected(args):
    return np.tri(len(args["C"]), dtype=bool), np.maximum(args["A"] @ args["A"].T + args["bias"], 0)


def _batched_expected(args):
    nb, n = args["C"].shape[:2]
    b, i, j = np.meshgrid(np.arange(nb), np.arange(n), np.arange(n), indexing="ij")
    cut = j <= i + b
    return cut, args["C"] + np.einsum("bik,bjk->bij", args["A"], args["B"])


def _syrk():
    return po.suite.get("syrk").kernel


#: (name, kernel, index groups, constraints as printed, expected result)
CUT_KERNELS = [
    ("syrk", _syrk, "M (i) x N (j) x K (k)", ["i - j"], _syrk_expected),
    ("strict", lambda: syrk_strict, "M (i) x N (j) x K (k)", ["i - j - 1"], _strict_expected),
    ("upper", lambda: syrk_upper, "M (i) x N (j) x K (k)", ["j - i"], _upper_expected),
    ("anti", lambda: gemm_anti, "M (i) x N (j) x K (k)", ["N - i - j - 1"], _anti_expected),
    ("from_one", lambda: rows_from_one, "M (i) x N (j) x K (k)", ["i - 1"], _from_one_expected),
    ("bias_relu", lambda: syrk_bias_relu, "M (i) x N (j) x K (k)", ["i - j"], _bias_expected),
    ("batched", lambda: batched_band, "batch (b) x M (i) x N (j) x K (k)", ["b + i - j"], _batched_expected),
]


@pytest.mark.parametrize("name, make, groups, constraints, expected", CUT_KERNELS, ids=[k[0] for k in CUT_KERNELS])
def test_cut_boxes_are_contractions(name, make, groups, constraints, expected):
    """The update's domain is the bounding box (extents of the parameters) cut by constraints
    among the output indices: recognized, with the constraints (``e >= 0``) on the record."""
    c = find_contraction(scop_of(make()))
    assert c is not None and c.describe() == groups
    assert [E.to_source(e) for e in c.domain] == constraints
    assert E.to_source(c.extent["i"]) == "N" and E.to_source(c.extent["j"]) in ("N", "N - 1")  # the bounding box


def test_syrk_keeps_its_init_and_operands():
    c = find_contraction(scop_of(_syrk()))
    assert E.to_source(c.init) == "_elem * beta" and c.statements == ("S0", "S1")
    assert (c.left.array, c.left.index, c.right.array, c.right.index) == ("A", ("i", "k"), "A", ("j", "k"))
    assert find_contraction(scop_of(po.suite.get("gemm").kernel)).domain == ()  # a box: no constraint


@po.kernel
def k_below_i(A: f64["N", "N"], C: f64["N", "N"]):
    for i in range(N):
        for j in range(i + 1):
            for k in range(i):
                C[i, j] += A[i, k] * A[j, k]


@po.kernel
def read_past_b(A: f64["N", "K"], B: f64["N - 1", "K"], C: f64["N", "N"]):
    """The bounding box's reads of B (rows up to N - 1) leave B. (With arrays being boxes and
    operands subscripted by plain indices, that happens only where the program's own reads leave
    the array as here, for some parameter values: the bounding box's greatest index is one
    the program reads.)"""
    for i in range(N):
        for j in range(i + 1):
            for k in range(K):
                C[i, j] += A[i, k] * B[j, k]


@po.kernel
def init_over_the_box(A: f64["N", "K"], C: f64["N", "N"]):
    for i in range(N):
        for j in range(N):
            C[i, j] = 0.0
    for i in range(N):
        for j in range(i + 1):
            for k in range(K):
                C[i, j] += A[i, k] * A[j, k]


@po.kernel
def cut_in_a_collapsed_run(A: f64["NA", "N", "K"], B: f64["N", "K"], C: f64["NA", "N", "N"]):
    """M = (a, i) may run as one coordinate a*N + i: the kernel tests a constrained M index
    only as its coordinate."""
    for a in range(NA):
        for i in range(N):
            for j in range(i + 1):
                for k in range(K):
                    C[a, i, j] += A[a, i, k] * B[j, k]


@pytest.mark.parametrize("kernel", [k_below_i, read_past_b, init_over_the_box, cut_in_a_collapsed_run],
                         ids=["k-depends-on-i", "read-past-an-array", "init-over-the-box", "collapsed-run"])
def test_what_a_cut_box_kernel_cannot_compute_is_no_contraction(kernel):
    """K bounded by an output index, an operand read outside its array over the bounding box,
    an init over another region than the update's, a constrained index in a run of several:
    the general mapping (still right)."""
    assert find_contraction(scop_of(kernel)) is None
    assert not isinstance(plan(kernel).source, ContractionSource)


def test_the_mapping_runs_over_the_real_domain_and_is_verified():
    """The schedule tree's coordinates are the statements' own (triangular) domains: the verifier
    checks the instances the program has."""
    result = plan(_syrk())
    assert isinstance(result.source, ContractionSource)
    po.verify(result.scop, result.mapped_tree)
    (kernel,) = result.program.kernels
    assert len(kernel.coords) == 2 and kernel.statements == {"S0", "S1"}
    assert "j <= i" in str(result.mapped_tree.get_domain())
    assert "GPU contraction mapping (dmma" in result.schedule.notes[-1]
    for _, make, *_ in CUT_KERNELS[1:]:
        made = plan(make())
        assert isinstance(made.source, ContractionSource)
        po.verify(made.scop, made.mapped_tree)


def test_every_kernel_skips_tiles_and_tests_elements():
    """Each kernel variant skips a tile with no element in the cut and tests the elements it
    initializes and stores (the M and N coordinates are i and j); a batch index is decoded per
    tile. Box contractions have none of it."""
    text = po.cuda_source(_syrk())
    kernels = text.count("__global__")
    assert text.count("if (((_m0 + BM < _M ? _m0 + BM : _M) - 1) - _n0 < 0) continue;") == kernels
    assert text.count("_m < _M && _n < _N && _m - _n >= 0") == 2 * kernels  # the init and the store
    half = _half_syrk_source()
    assert half.count("_m < _M && _n < _N && _m - _n >= 0") == 2 * half.count("__global__ void __launch_bounds__")
    assert "wgmma.mma_async" in half
    batched = po.cuda_source(batched_band)
    assert "const long _ix0 = (_z / _xd0) % _xm0;" in batched and "_ix0 + _m - _n >= 0" in batched
    assert "if (_ix0 + ((_m0 + BM < _M ? _m0 + BM : _M) - 1) - _n0 < 0) continue;" in batched
    assert "continue;" not in po.cuda_source(po.suite.get("gemm").kernel)


def test_both_operands_of_one_array_keep_their_strides():
    """syrk reads A as both operands (A[i, k] and A[j, k]): the launch layout takes each
    operand's strides from its own subscripts (keyed by array, the right one's replaced the
    left one's: row stride 0, every row of the result computed from row 0)."""
    source = plan(_syrk()).source
    layout = launch_layout(source.contraction, source.variants[0][1], {"i": 150, "k": 37, "j": 150},
                           {"A": (150, 37), "C": (150, 150)})
    m, n, k, s_lm, s_lk, s_rk, s_rn, s_cm, s_cn = layout.arguments[:9]
    assert (m, n, k, s_lm, s_lk, s_rk, s_rn, s_cm, s_cn) == (150, 150, 37, 37, 1, 1, 37, 150, 1)


@po.kernel
def syrk_f32(A: f32["N", "K"], C: f32["N", "N"]):
    for i in range(N):
        for j in range(i + 1):
            for k in range(K):
                C[i, j] += A[i, k] * A[j, k]


def _half_syrk_source() -> str:
    made = plan(half_operands(scop_of(syrk_f32)))
    assert isinstance(made.source, ContractionSource)
    assert {v.engine for _, v in made.source.variants} == {"hmma"}
    return made.source.source


_NVCC_SOURCES = {
    "syrk_f64": lambda: po.cuda_source(_syrk()),  # dmma (size parameters M and N: the host function renames)
    "syrk_f32": lambda: po.cuda_source(_syrk().with_dtype("f32")),  # simt
    "syrk_tf32": lambda: po.cuda_source(_syrk().with_dtype("f32"), precision="tf32"),  # mma.sync and wgmma
    "syrk_f16": _half_syrk_source,  # hmma and wgmma
    "anti": lambda: po.cuda_source(gemm_anti),
    "bias_relu": lambda: po.cuda_source(syrk_bias_relu),  # (f64: the wgmma guards are in the two above)
    "batched": lambda: po.cuda_source(batched_band),
}


@needs_nvcc
def test_nvcc_builds_the_cut_box_kernels(tmp_path):
    """Every kernel variant and the extern "C" host function, the wgmma kernels included (sm_90a:
    the guards are plain C in every variant; the older GPUs' paths of each engine are built by
    tests/targets/test_contraction.py and test_wgmma.py)."""
    assert_nvcc_compiles(tmp_path, {name: make() for name, make in _NVCC_SOURCES.items()}, "sm_90a")


# ----- on the GPU ----------------------------------------------------------------------------------

#: (N, K): one element, fewer rows than a tile, rows not in 16-byte vectors, more than one tile
#: in M and N (tiles skipped, tiles on the diagonal), whole 16-byte vectors (cp.async and wgmma).
SIZES = [(1, 1), (5, 3), (37, 20), (130, 67), (259, 136), (264, 136)]


def _inputs(name: str, n: int, k: int, dtype, rng) -> dict:
    def data(*shape):
        return rng.standard_normal(shape).astype(dtype)
    args = {"A": data(n, k), "C": data(n, n)}
    if name == "syrk":
        args.update(alpha=1.5, beta=0.5)
    elif name == "upper":
        args["alpha"] = 1.5
    elif name in ("anti", "from_one"):
        args["B"] = data(k, n)
    elif name == "bias_relu":
        args["bias"] = data(n)
    elif name == "batched":
        args.update(A=data(3, n, k), B=data(3, n, k), C=data(3, n, n))
    return args


def _check(name, expected, before: dict, after, bound: float) -> None:
    """The cut's elements against float64, every other element of C bit for bit as before."""
    cut, value = expected({key: v.astype(np.float64) if isinstance(v, np.ndarray) else v for key, v in before.items()})
    np.testing.assert_array_equal(after[~cut], before["C"][~cut])
    if cut.any():
        error = np.linalg.norm(after[cut] - value[cut]) / max(np.linalg.norm(value[cut]), 1e-300)
        assert error < bound, (name, error)


@needs_gpu
@pytest.mark.parametrize("tile", CONTRACTION_TILES)
@pytest.mark.parametrize("sizes", SIZES, ids=[f"{n}x{k}" for n, k in SIZES])
@pytest.mark.parametrize("precision", ["exact", "tf32"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name, make, groups, constraints, expected", CUT_KERNELS, ids=[k[0] for k in CUT_KERNELS])
def test_cut_boxes_on_the_gpu_match_numpy(name, make, groups, constraints, expected, dtype, precision, sizes, tile,
                                         monkeypatch):
    """Every cut-box kernel in every engine (f64: DMMA; f32: SIMT, or TF32 mma.sync and wgmma)
    and tile shape, forced: the cut computed, the rest of C untouched."""
    import cupy

    if dtype == np.float64 and precision == "tf32":
        pytest.skip("tf32 concerns f32 data")
    taken = force_contraction_tile(monkeypatch, tile)
    n, k = sizes
    kernel = make() if dtype == np.float64 else make().with_dtype("f32")
    args = _inputs(name, n, k, dtype, np.random.default_rng(n + k))
    device = {key: cupy.asarray(v) if isinstance(v, np.ndarray) else dtype(v) for key, v in args.items()}
    compiled = po.compile(kernel, target="cuda", precision=precision)
    assert isinstance(compiled.compiled, ContractionSource)
    compiled(**device)
    assert taken
    bound = {"tf32": 5e-3, "exact": {np.float32: 1e-5, np.float64: 1e-13}[dtype]}[precision]
    _check(name, expected, args, device["C"].get(), bound)


@needs_gpu
@pytest.mark.parametrize("tile", CONTRACTION_TILES)
@pytest.mark.parametrize("sizes", SIZES, ids=[f"{n}x{k}" for n, k in SIZES])
def test_half_syrk_on_the_gpu_matches_numpy(sizes, tile, monkeypatch):
    """f16 operands into an f32 lower triangle (hmma mma.sync, and wgmma on an H100): the
    products exact in f32, the strictly upper triangle untouched."""
    import cupy

    taken = force_contraction_tile(monkeypatch, tile)
    made = plan(half_operands(scop_of(syrk_f32)))
    kernel = CudaKernel(made.scop, made.schedule, made.source)
    n, k = sizes
    rng = np.random.default_rng(n * k)
    a, c = rng.standard_normal((n, k)).astype(np.float16), rng.standard_normal((n, n)).astype(np.float32)
    device_c = cupy.asarray(c)
    kernel(A=cupy.asarray(a), C=device_c)
    assert taken
    wide = a.astype(np.float64)

    def expected(args):
        return np.tri(n, dtype=bool), args["C"] + wide @ wide.T
    _check("f16", expected, {"A": a, "C": c}, device_c.get(), 1e-5)


@needs_gpu
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_the_nvcc_host_function_leaves_the_upper_triangle(tmp_path):
    """syrk through the source's extern "C" host function (built with nvcc, called with device
    pointers; its size parameters M and N are renamed in the function, not in its interface)."""
    import ctypes

    import cupy

    kernel = po.compile(_syrk(), target="cuda")
    (tmp_path / "k.cu").write_text(kernel.cuda_source)
    built = subprocess.run(["nvcc", "-arch=native", "-shared", "-Xcompiler", "-fPIC", "k.cu", "-o", "k.so"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    library = ctypes.CDLL(str(tmp_path / "k.so"))
    n, m = 131, 70
    args = _inputs("syrk", n, m, np.float64, np.random.default_rng(1))
    a, c = cupy.asarray(args["A"]), cupy.asarray(args["C"])
    values = {"M": ctypes.c_long(m), "N": ctypes.c_long(n), "alpha": ctypes.c_double(args["alpha"]),
              "beta": ctypes.c_double(args["beta"]), "A": ctypes.c_void_p(a.data.ptr), "C": ctypes.c_void_p(c.data.ptr)}
    from polyopt.codegen.ast import abi_arguments
    getattr(library, kernel.compiled.host_function)(*(values[x.name] for x in abi_arguments(kernel.scop)))
    cupy.cuda.Device().synchronize()
    _check("syrk", _syrk_expected, args, c.get(), 1e-13)
