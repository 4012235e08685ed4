"""Contractions of several operand pairs on the CUDA target: ``C[out] += L1 * R1 + L2 * R2``, every
product of two operands with the same output and the same contracted indices (PolyBench's
syr2k: ``A[j, k] * alpha * B[i, k] + B[j, k] * alpha * A[i, k]`` over the lower triangle). The
kernels run the K loop of each pair in turn into the same accumulators, each pair with its own
operand arrays, strides and scalar factors. The recognition, mapping and launch tests need no
GPU; nvcc builds every kernel variant once per architecture (sm_90a, sm_80); on a GPU every
variant, forced, is checked against numpy."""
import shutil
import subprocess

import numpy as np
import pytest

import polyopt as po
from polyopt.analysis import expr as E
from polyopt.analysis.contraction import find_contraction
from polyopt.codegen.cuda_contraction import VARIANTS, ContractionSource, extra_arguments
from polyopt.codegen.contraction_text import Slots
from polyopt.targets.cache import scop_of
from polyopt.targets.contraction import launch_layout
from polyopt.targets.cuda import CudaKernel, plan

from conftest import (CONTRACTION_TILES, assert_nvcc_compiles, force_contraction_tile, half_operands, needs_gpu,
                      needs_nvcc)

f32, f64 = po.f32, po.f64


def _syr2k():
    return po.suite.get("syr2k").kernel


@po.kernel
def two_products(A: f64["N", "K"], B: f64["K", "M"], D: f64["N", "K"], E: f64["K", "M"], C: f64["N", "M"]):
    """C += A B + D E: both pairs in one layout (the cp.async and wgmma kernels)."""
    for i in range(N):
        for j in range(M):
            for k in range(K):
                C[i, j] += A[i, k] * B[k, j] + D[i, k] * E[k, j]


@po.kernel
def two_products_transposed(A: f64["N", "K"], B: f64["K", "M"], D: f64["N", "K"], E: f64["M", "K"],
                            C: f64["N", "M"]):
    """C += A B + D E^T: the second pair's right operand has its K run contiguous, the first
    pair's its N run (the register-staged kernels, with per-pair strides)."""
    for i in range(N):
        for j in range(M):
            for k in range(K):
                C[i, j] += A[i, k] * B[k, j] + D[i, k] * E[j, k]


@po.kernel
def turned_round(A: f64["N", "K"], B: f64["K", "M"], D: f64["N", "K"], E: f64["K", "M"], C: f64["N", "M"]):
    """The second product written right operand first: turned round on recognition."""
    for i in range(N):
        for j in range(M):
            for k in range(K):
                C[i, j] += A[i, k] * B[k, j] + 2.0 * E[k, j] * D[i, k]


@po.kernel
def other_contracted_index(A: f64["N", "K"], B: f64["K", "M"], D: f64["N", "K"], E: f64["K", "M"],
                           C: f64["N", "M"]):
    """The second product sums over l, the first over k."""
    for i in range(N):
        for j in range(M):
            for k in range(K):
                for l in range(K):
                    C[i, j] += A[i, k] * B[k, j] + D[i, l] * E[l, j]


@po.kernel
def other_output(A: f64["N", "K"], B: f64["K", "M"], D: f64["N", "K"], E: f64["K"], C: f64["N", "M"]):
    """The second product has no j: a vector, not another product of C's shape."""
    for i in range(N):
        for j in range(M):
            for k in range(K):
                C[i, j] += A[i, k] * B[k, j] + D[i, k] * E[k]


@po.kernel
def no_product(A: f64["N", "K"], B: f64["K", "M"], D: f64["K", "M"], C: f64["N", "M"]):
    """The second term is one element, no product."""
    for i in range(N):
        for j in range(M):
            for k in range(K):
                C[i, j] += A[i, k] * B[k, j] + D[k, j]


@po.kernel
def second_pair_reads_past(A: f64["N", "K"], D: f64["N", "K"], B: f64["N - 1", "K"], C: f64["N", "N"]):
    """A lower triangle whose second pair's B[j, k] leaves B over the bounding box (the first
    pair's reads stay in A): a cut box checks every pair's reads."""
    for i in range(N):
        for j in range(i + 1):
            for k in range(K):
                C[i, j] += A[i, k] * A[j, k] + D[i, k] * B[j, k]


def _operands(c) -> list[tuple[str, tuple[str, ...], str, tuple[str, ...]]]:
    return [(left.array, left.index, right.array, right.index) for left, right in c.pairs]


# ----- recognition, mapping, launch (no GPU) --------------------------------------------------------


def test_syr2k_is_a_contraction_of_two_pairs():
    """syr2k: M (i) x N (j) x K (k) as syrk -- the pairs turned round, C's contiguous j an N
    index -- over the lower triangle, beta as the init, alpha staged with each pair's right
    operand."""
    c = find_contraction(scop_of(_syr2k()))
    assert c is not None and c.describe() == "M (i) x N (j) x K (k), 2 operand pairs"
    assert _operands(c) == [("B", ("i", "k"), "A", ("j", "k")), ("A", ("i", "k"), "B", ("j", "k"))]
    assert [E.to_source(right.value) for _, right in c.pairs] == ["_elem * alpha"] * 2
    assert [E.to_source(e) for e in c.domain] == ["i - j"]
    assert E.to_source(c.init) == "_elem * beta"
    assert c.operand_arrays == ("B", "A")


@pytest.mark.parametrize("kernel, second", [
    (two_products, ("D", ("i", "k"), "E", ("k", "j"))),
    (two_products_transposed, ("D", ("i", "k"), "E", ("j", "k"))),
    (turned_round, ("D", ("i", "k"), "E", ("k", "j"))),
], ids=["same-layout", "transposed", "turned-round"])
def test_sums_of_products_are_contractions(kernel, second):
    """Two products with C's output and K (k): the second pair with its own subscripts' order,
    turned round where its right operand is written first (its scalar factor staged with it)."""
    c = find_contraction(scop_of(kernel))
    assert c is not None and c.describe() == "M (i) x N (j) x K (k), 2 operand pairs"
    assert _operands(c) == [("A", ("i", "k"), "B", ("k", "j")), second]


@pytest.mark.parametrize("kernel", [other_contracted_index, other_output, no_product, second_pair_reads_past],
                         ids=["other-contracted-index", "other-output", "no-product", "second-pair-reads-past"])
def test_sums_of_other_terms_are_no_contraction(kernel):
    """A product summed over other indices, one of another output shape, a term that is no
    product, a cut box over which the second pair reads outside its array: the general
    mapping."""
    assert find_contraction(scop_of(kernel)) is None
    assert not isinstance(plan(kernel).source, ContractionSource)


def test_the_syr2k_mapping_is_verified_and_noted():
    """One kernel over the statements' triangular domains, checked by the verifier; the notes
    name the two operand pairs; the source runs the second pair's K loop in its own block."""
    result = plan(_syr2k())
    assert isinstance(result.source, ContractionSource)
    po.verify(result.scop, result.mapped_tree)
    (kernel,) = result.program.kernels
    assert kernel.statements == {"S0", "S1"}
    assert "GPU contraction mapping (dmma" in result.schedule.notes[-1]
    assert "2 operand pairs" in result.schedule.notes[-1]
    text = po.cuda_source(_syr2k())
    kernels = text.count("__global__")
    assert kernels == len(VARIANTS[("dmma", "f64")])
    assert text.count("/* operand pair 2 of 2: A[i, k] x B[j, k] */") == kernels
    assert "pl_run_all" in text and "pl_run_all" not in po.cuda_source(po.suite.get("syrk").kernel)


def test_each_pair_has_its_own_strides():
    """The launch passes the second pair's run strides after the first's arguments: syr2k's
    B[j, k] and A[i, k] (rows of M elements); C += A B + D E^T's E with its K run contiguous."""
    c = find_contraction(scop_of(_syr2k()))
    variant = plan(_syr2k()).source.variants[0][1]
    shapes = {"A": (7, 5), "B": (7, 5), "C": (7, 7)}
    layout = launch_layout(c, variant, {"i": 7, "j": 7, "k": 5}, shapes)
    names = extra_arguments(Slots.of(c))
    assert len(layout.arguments) == len(names)
    value = dict(zip(names, layout.arguments))
    assert (value["_M"], value["_N"], value["_K"]) == (7, 7, 5)
    assert (value["_sLm"], value["_sRn"], value["_sLm_1"], value["_sRn_1"]) == (5, 5, 5, 5)
    c = find_contraction(scop_of(two_products_transposed))
    layout = launch_layout(c, VARIANTS[("dmma", "f64")][-1], {"i": 6, "j": 4, "k": 3},
                           {"A": (6, 3), "B": (3, 4), "D": (6, 3), "E": (4, 3), "C": (6, 4)})
    value = dict(zip(extra_arguments(Slots.of(c)), layout.arguments))
    assert (value["_sRk"], value["_sRn"], value["_sRk_1"], value["_sRn_1"]) == (4, 1, 1, 3)


def test_pairs_of_other_layouts_take_the_register_staged_kernels():
    """No operand run is contiguous in both pairs of C += A B + D E^T on the right: the
    ``cp.async`` and ``wgmma`` kernels, which stage every pair in one tile layout, are not
    built; the same-layout sum has them all."""
    transposed = plan(two_products_transposed).source
    assert transposed.variants and not any(v.asynchronous for _, v in transposed.variants)
    assert [v for _, v in plan(two_products).source.variants] == list(VARIANTS[("dmma", "f64")])


# ----- nvcc ----------------------------------------------------------------------------------------


def _half_source(kernel) -> str:
    """The f16 source of a DSL kernel whose operands are A, B, D and E (f32 result): hmma and
    wgmma kernels."""
    made = plan(half_operands(scop_of(kernel.with_dtype("f32")), ("A", "B", "D", "E")))
    assert isinstance(made.source, ContractionSource)
    # every variant but the TMA ones (their tensor copies address one operand pair)
    assert [v for _, v in made.source.variants] == [v for v in VARIANTS[("hmma", "f16")] if not v.tma]
    return made.source.source


#: Every engine's kernels with two pairs: each source holds every variant its engine has for
#: the operands' layout (the launch may force any of them). TF32 ``mma.sync`` with a scalar
#: factor staged per pair is dmma's code (syr2k f64) with another MMA.
_NVCC_SOURCES = {
    "syr2k_f64": lambda: po.cuda_source(_syr2k()),  # dmma
    "syr2k_f32": lambda: po.cuda_source(_syr2k().with_dtype("f32")),  # simt
    "two_tf32": lambda: po.cuda_source(two_products.with_dtype("f32"), precision="tf32"),  # mma.sync and wgmma
    "two_f16": lambda: _half_source(two_products),  # hmma and wgmma (warp-specialized too)
    "transposed_f64": lambda: po.cuda_source(two_products_transposed),  # register-staged dmma
}


@pytest.fixture(scope="module")
def nvcc_sources() -> dict[str, str]:
    """The sources of :data:`_NVCC_SOURCES`, generated once for the module's builds."""
    return {name: make() for name, make in _NVCC_SOURCES.items()}


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_nvcc_builds_every_variant_of_two_pairs(nvcc_sources, arch, tmp_path):
    """Every kernel variant (the wgmma ones in the sm_90a build) and the extern "C" host
    function, one nvcc run per architecture."""
    assert_nvcc_compiles(tmp_path, nvcc_sources, arch)


# ----- on the GPU ----------------------------------------------------------------------------------

#: syr2k's (M, N): PolyBench's SMALL and MEDIUM, then sizes no tile divides, rows not in
#: 16-byte vectors, one element.
SYR2K_SIZES = [(60, 80), (200, 240), (13, 37), (67, 130), (1, 1)]


def _relative_error(got, expected) -> float:
    return float(np.linalg.norm(np.asarray(got, np.float64) - expected) / max(np.linalg.norm(expected), 1e-300))


@needs_gpu
@pytest.mark.parametrize("tile", CONTRACTION_TILES)
@pytest.mark.parametrize("sizes", SYR2K_SIZES, ids=[f"{m}x{n}" for m, n in SYR2K_SIZES])
@pytest.mark.parametrize("dtype, precision", [(np.float64, "exact"), (np.float32, "exact"), (np.float32, "tf32")],
                         ids=["f64", "f32", "tf32"])
def test_syr2k_on_the_gpu_matches_numpy(dtype, precision, sizes, tile, monkeypatch):
    """syr2k with every variant of its engine forced: the lower triangle against float64, the
    strictly upper one untouched."""
    import cupy

    taken = force_contraction_tile(monkeypatch, tile)
    entry = po.suite.get("syr2k")
    kernel = entry.kernel if dtype == np.float64 else entry.kernel.with_dtype("f32")
    args = entry.inputs(dict(zip(("M", "N"), sizes)), dtype)
    expected = {k: (v.astype(np.float64) if isinstance(v, np.ndarray) else v) for k, v in args.items()}
    entry.reference(**expected)
    compiled = po.compile(kernel, target="cuda", precision=precision)
    assert isinstance(compiled.compiled, ContractionSource)
    device = {k: cupy.asarray(v) if isinstance(v, np.ndarray) else dtype(v) for k, v in args.items()}
    compiled(**device)
    assert taken
    got, lower = device["C"].get(), np.tri(sizes[1], dtype=bool)
    np.testing.assert_array_equal(got[~lower], args["C"][~lower])
    bound = {"tf32": 5e-3, "exact": {np.float32: 1e-5, np.float64: 1e-13}[dtype]}[precision]
    assert _relative_error(got[lower], expected["C"][lower]) < bound


#: (N, M, K) of the DSL sums: ragged, rows in whole 16-byte vectors (cp.async and wgmma: 256
#: terms or more), one element.
PAIR_SIZES = [(37, 45, 13), (136, 264, 264), (1, 1, 1)]


def _pair_inputs(kernel, n: int, m: int, k: int, dtype, rng) -> tuple[dict, np.ndarray]:
    """Inputs of a DSL sum of two products and the expected C in float64."""
    e_shape = (m, k) if kernel is two_products_transposed else (k, m)
    args = {name: rng.standard_normal(shape).astype(dtype)
            for name, shape in (("A", (n, k)), ("B", (k, m)), ("D", (n, k)), ("E", e_shape), ("C", (n, m)))}
    wide = {name: v.astype(np.float64) for name, v in args.items()}
    e = wide["E"].T if kernel is two_products_transposed else wide["E"]
    return args, wide["C"] + wide["A"] @ wide["B"] + wide["D"] @ e


@needs_gpu
@pytest.mark.parametrize("tile", CONTRACTION_TILES)
@pytest.mark.parametrize("sizes", PAIR_SIZES, ids=[f"{n}x{m}x{k}" for n, m, k in PAIR_SIZES])
@pytest.mark.parametrize("dtype, precision", [(np.float64, "exact"), (np.float32, "exact"), (np.float32, "tf32")],
                         ids=["f64", "f32", "tf32"])
@pytest.mark.parametrize("kernel", [two_products, two_products_transposed], ids=["same-layout", "transposed"])
def test_sums_of_two_products_on_the_gpu_match_numpy(kernel, dtype, precision, sizes, tile, monkeypatch):
    """C += A B + D E (and D E^T) with every variant forced, against float64."""
    import cupy

    taken = force_contraction_tile(monkeypatch, tile)
    args, expected = _pair_inputs(kernel, *sizes, dtype, np.random.default_rng(sum(sizes)))
    compiled = po.compile(kernel if dtype == np.float64 else kernel.with_dtype("f32"), target="cuda",
                          precision=precision)
    assert isinstance(compiled.compiled, ContractionSource)
    device = {k: cupy.asarray(v) for k, v in args.items()}
    compiled(**device)
    assert taken
    bound = {"tf32": 5e-3, "exact": {np.float32: 1e-5, np.float64: 1e-13}[dtype]}[precision]
    assert _relative_error(device["C"].get(), expected) < bound


@needs_gpu
@pytest.mark.parametrize("tile", CONTRACTION_TILES)
@pytest.mark.parametrize("sizes", PAIR_SIZES, ids=[f"{n}x{m}x{k}" for n, m, k in PAIR_SIZES])
def test_half_sum_of_two_products_on_the_gpu_matches_numpy(sizes, tile, monkeypatch):
    """f16 operands into f32 (hmma mma.sync, and wgmma on an H100) with every variant forced."""
    import cupy

    taken = force_contraction_tile(monkeypatch, tile)
    made = plan(half_operands(scop_of(two_products.with_dtype("f32")), ("A", "B", "D", "E")))
    kernel = CudaKernel(made.scop, made.schedule, made.source)
    args, _ = _pair_inputs(two_products, *sizes, np.float16, np.random.default_rng(sum(sizes)))
    args["C"] = args["C"].astype(np.float32)
    wide = {name: v.astype(np.float64) for name, v in args.items()}
    expected = wide["C"] + wide["A"] @ wide["B"] + wide["D"] @ wide["E"]
    device = {k: cupy.asarray(v) for k, v in args.items()}
    kernel(**device)
    assert taken
    assert _relative_error(device["C"].get(), expected) < 1e-5


@needs_gpu
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_the_nvcc_host_function_runs_syr2k(tmp_path):
    """syr2k through the source's extern "C" host function (built with nvcc, device pointers):
    the second pair's strides from its arrays' shapes, the upper triangle untouched."""
    import ctypes

    import cupy

    from polyopt.codegen.ast import abi_arguments

    kernel = po.compile(_syr2k(), target="cuda")
    (tmp_path / "k.cu").write_text(kernel.cuda_source)
    built = subprocess.run(["nvcc", "-arch=native", "-shared", "-Xcompiler", "-fPIC", "k.cu", "-o", "k.so"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    library = ctypes.CDLL(str(tmp_path / "k.so"))
    m, n = 70, 131
    entry = po.suite.get("syr2k")
    args = entry.inputs({"M": m, "N": n})
    expected = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in args.items()}
    entry.reference(**expected)
    device = {name: cupy.asarray(args[name]) for name in ("A", "B", "C")}
    values = {"M": ctypes.c_long(m), "N": ctypes.c_long(n), "alpha": ctypes.c_double(args["alpha"]),
              "beta": ctypes.c_double(args["beta"]),
              **{name: ctypes.c_void_p(a.data.ptr) for name, a in device.items()}}
    getattr(library, kernel.compiled.host_function)(*(values[x.name] for x in abi_arguments(kernel.scop)))
    cupy.cuda.Device().synchronize()
    assert _relative_error(device["C"].get(), expected["C"]) < 1e-13
