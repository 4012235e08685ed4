"""The CUDA contraction path (issue 17 item 1-2): contractions of any index grouping recognized on
the Scop, mapped as one verified batched-GEMM kernel, laid out per launch from the strides, and
computed right in every engine (SIMT f32, TF32 and FP64 tensor cores). The source tests need no
GPU (nvcc builds each engine); the results are checked on a GPU against numpy in float64."""
import re
import shutil
import subprocess

import numpy as np
import pytest

import polyopt as po
from polyopt.analysis.contraction import find_contraction
from polyopt.codegen.contraction_text import Slots, UnitStrides
from polyopt.codegen.cuda_contraction import HOST_LOCALS, ContractionSource
from polyopt.targets.cache import scop_of
from polyopt.targets.contraction import choose_kernel, contraction_plan, launch_layout
from polyopt.targets.cuda import CudaKernel, plan
from polyopt import einsum_calls

from conftest import CONTRACTION_TILES, force_contraction_tile, needs_gpu, note_contraction_choices
from example_kernels import example_kernel

f32, f64 = po.f32, po.f64

#: einsum contractions as deep-learning code calls them (issue 17), with small odd sizes.
PATTERNS = [
    ("bhqd,bhkd->bhqk", [(2, 3, 37, 16), (2, 3, 29, 16)]),
    ("bhqk,bhkd->bhqd", [(2, 3, 37, 29), (2, 3, 29, 16)]),
    ("bik,kj->bij", [(3, 45, 70), (70, 33)]),
    ("ij,jk->ik", [(130, 67), (67, 140)]),
    ("abcd,cdef->abef", [(5, 6, 7, 3), (7, 3, 4, 9)]),
    ("nchw,kc->nkhw", [(3, 20, 5, 7), (24, 20)]),
    ("ij,kj->ki", [(50, 40), (70, 40)]),  # transposed output, B read by rows
    ("kib,kjb->bij", [(9, 20, 3), (9, 30, 3)]),  # K outermost everywhere, batch innermost
    ("acb,cbd->ad", [(17, 5, 6), (5, 6, 23)]),  # K = (c, b): one run in A's order
    ("bca,cd->bad", [(4, 6, 5), (6, 7)]),  # M = (b, a) not adjacent in the output
    ("ij,jk->ik", [(130, 68), (68, 140)]),  # rows in whole 16-byte vectors: cp.async, B by N rows
    ("ki,kj->ij", [(37, 132), (37, 76)]),  # both operands by M/N rows, K ragged
]


def _einsum_scop(subscripts, shapes, dtype="float32"):
    return po.einsum_kernel(subscripts, *shapes, dtype=dtype, target="cuda", contraction=False).scop


def test_index_groups_of_einsum_contractions():
    groups = {s: find_contraction(_einsum_scop(s, shapes)).describe() for s, shapes in PATTERNS[:6]}
    assert groups["bhqd,bhkd->bhqk"] == "batch (i_b, i_h) x M (i_q) x N (i_k) x K (i_d)"
    assert groups["bik,kj->bij"] == "M (i_b, i_i) x N (i_j) x K (i_k)"
    assert groups["abcd,cdef->abef"] == "M (i_a, i_b) x N (i_e, i_f) x K (i_c, i_d)"
    assert groups["nchw,kc->nkhw"] == "M (i_n, i_h, i_w) x N (i_k) x K (i_c)"
    gemm = find_contraction(scop_of(po.suite.get("gemm").kernel))
    assert gemm.describe() == "M (i) x N (j) x K (k)" and gemm.left.array == "A"
    assert str(gemm.init) == str(gemm.init) and gemm.init is not None  # C *= beta is the init


@pytest.mark.parametrize("subscripts, shapes", [("ij,j->i", [(3, 4), (4,)]), ("i,i->", [(9,), (9,)]),
                                                 ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
                                                 ("ij->i", [(3, 4)]), ("i,j->ij", [(3,), (4,)])])
def test_what_is_no_gemm_is_not_a_contraction(subscripts, shapes):
    """A matrix-vector product, a dot, a sum and an outer product have no M, N or K; three
    operands in one nest are no two-operand product."""
    assert find_contraction(_einsum_scop(subscripts, shapes, "float64")) is None


def test_repeated_index_nests_are_not_contractions():
    """(Triangular nests are: tests/targets/test_contraction_triangular.py.)"""
    assert find_contraction(_einsum_scop("ii,ij->ij", [(4, 4), (4, 5)], "float64")) is None


def test_runs_collapse_where_indices_are_adjacent_in_memory():
    c = find_contraction(_einsum_scop("bik,kj->bij", [(3, 45, 70), (70, 33)]))
    variant = contraction_plan(_einsum_scop("bik,kj->bij", [(3, 45, 70), (70, 33)]), "t").source.variants[0][1]
    shapes = {"op0": (3, 45, 70), "op1": (70, 33), "out": (3, 45, 33)}
    extent = {"i_b": 3, "i_i": 45, "i_k": 70, "i_j": 33}
    layout = launch_layout(c, variant, extent, shapes)
    # one GEMM of 135 rows: M = b*i, strides of the run's innermost index (i)
    assert layout.arguments[:9] == (135, 33, 70, 70, 1, 33, 1, 33, 1)
    assert layout.arguments[9:11] == (1, 1)  # no batch, no outer K
    assert layout.grid == (-(-33 // variant.bn), -(-135 // variant.bm), 1)  # N tiles, M tiles


def test_indices_apart_in_memory_go_to_the_batch():
    scop = _einsum_scop("nchw,kc->nkhw", [(3, 20, 5, 7), (24, 20)])
    c, variant = find_contraction(scop), contraction_plan(scop, "t").source.variants[0][1]
    shapes = {"op0": (3, 20, 5, 7), "op1": (24, 20), "out": (3, 24, 5, 7)}
    layout = launch_layout(c, variant, {"i_n": 3, "i_c": 20, "i_h": 5, "i_w": 7, "i_k": 24}, shapes)
    m, n, k, s_lm, s_lk, s_rk, s_rn, s_cm, s_cn, z, ko = layout.arguments[:11]
    assert (m, n, k, z, ko) == (35, 24, 20, 3, 1)  # M = h*w, n in the batch
    assert (s_lm, s_lk, s_rk, s_rn, s_cm, s_cn) == (1, 35, 1, 20, 1, 35)
    slots = Slots.of(c)
    assert slots == Slots(batch=2, outer_k=0)
    assert layout.arguments[11:15] == (3, 20 * 35, 0, 24 * 35)  # n: its strides in A, B (none), C
    assert layout.arguments[15:19] == (1, 0, 0, 0)  # the unused slot
    assert UnitStrides.of(c) == UnitStrides(lm=True, lk=False, rk=True, rn=False, cm=True, cn=False)


def test_small_grids_take_the_small_tile():
    """The f32 SIMT kernels are a wide and a narrow tile of one area: the wide one unless the
    narrow one wastes less; among tiles of several areas (TF32), a small grid takes the small."""
    source = contraction_plan(_einsum_scop("ij,jk->ik", [(4, 5), (5, 6)]), "t").source
    (wide_name, wide), (narrow_name, narrow), *_ = source.variants  # (then the K-splitting kernels)
    assert wide.bm * wide.bn == narrow.bm * narrow.bn and narrow.bn < wide.bn
    shapes = {"op0": (4096, 4096), "op1": (4096, 4096), "out": (4096, 4096)}
    name, _, layout = choose_kernel(source, {"i_i": 4096, "i_j": 4096, "i_k": 4096}, shapes, sm_count=132)
    assert name == wide_name and layout.grid == (4096 // wide.bn, 4096 // wide.bm, 1)
    # N = 64 (attention's second product): half of each wide tile would be wasted
    shapes = {"op0": (4096, 512), "op1": (512, 64), "out": (4096, 64)}
    name, _, layout = choose_kernel(source, {"i_i": 4096, "i_j": 512, "i_k": 64}, shapes, sm_count=1)
    assert name == narrow_name and layout.grid == (1, 4096 // narrow.bm, 1)
    tf32 = contraction_plan(_einsum_scop("ij,jk->ik", [(4, 5), (5, 6)]), "t", "tf32").source
    (big_name, big), *others = tf32.variants
    shapes = {"op0": (1024, 1024), "op1": (1024, 1024), "out": (1024, 1024)}
    name, small, layout = choose_kernel(tf32, {"i_i": 1024, "i_j": 1024, "i_k": 1024}, shapes, sm_count=132)
    assert name != big_name and small.bm * small.bn < big.bm * big.bn  # 64 large tiles: half the SMs idle
    assert layout.grid == (1024 // small.bn, 1024 // small.bm, 1)


def test_simt_kernels_summing_from_the_output_are_built_for_two_blocks_per_sm():
    """gemm's ``beta * C`` read into the accumulators: register-bound kernels (nvcc gave the
    unbound one 209 registers); an einsum's sums start from zero: no bound but on the narrow
    tile."""
    gemm = po.cuda_source(po.suite.get("gemm").kernel.with_dtype("f32"))
    assert gemm.count("__launch_bounds__(128, 2)") == gemm.count("__global__") == 4
    einsum = po.cuda_source(po.einsum_kernel("ij,jk->ik", (8, 9), (9, 10), dtype="float32", target="cuda"))
    assert einsum.count("__launch_bounds__(128, 2)") == 1  # the narrow tile
    assert einsum.count("__launch_bounds__(128)") == 3  # the wide one, alone and splitting K


def test_half_operands_go_to_the_half_tensor_cores():
    """float16 einsums (f16 operands read into f32 sums) run on ``mma ... f32.f16.f16.f32``;
    a half operand that is computed on first is mapped the general way."""
    source = po.einsum_kernel("bik,kj->bij", (2, 30, 40), (40, 50), dtype="float16", target="cuda").compiled
    assert isinstance(source, ContractionSource) and {v.engine for _, v in source.variants} == {"hmma"}
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in source.source
    assert "#include <cuda_fp16.h>" in source.source

    @po.kernel
    def scaled_half_matmul(A: po.f16["N", "N"], B: po.f16["N", "N"], C: f32["N", "N"]):
        for i in range(N):
            for j in range(N):
                for k in range(N):
                    C[i, j] += (A[i, k] * 2.0) * B[k, j]
    assert contraction_plan(scop_of(scaled_half_matmul), "t") is None


def test_large_aligned_contractions_take_the_cp_async_kernels():
    source = contraction_plan(_einsum_scop("ij,jk->ik", [(4, 5), (5, 6)]), "t", precision="tf32").source
    assert any(v.asynchronous for _, v in source.variants) and not all(v.asynchronous for _, v in source.variants)

    def chosen(n: int, k: int, aligned: bool = True):
        shapes = {"op0": (n, k), "op1": (k, n), "out": (n, n)}
        return choose_kernel(source, {"i_i": n, "i_j": n, "i_k": k}, shapes, 132, aligned)[1]
    assert chosen(4096, 4096).asynchronous
    assert not chosen(4096, 4096, aligned=False).asynchronous  # an operand off a 16-byte boundary
    assert not chosen(4096, 4095).asynchronous  # rows of 4095 floats: not whole vectors
    assert chosen(64, 64).asynchronous  # at any size where the operands allow it


def test_empty_results_launch_nothing():
    scop = _einsum_scop("ij,jk->ik", [(4, 5), (5, 6)])
    c, variant = find_contraction(scop), contraction_plan(scop, "t").source.variants[0][1]
    layout = launch_layout(c, variant, {"i_i": 0, "i_j": 5, "i_k": 6}, {"op0": (0, 5), "op1": (5, 6), "out": (0, 6)})
    assert layout.grid is None


def test_the_mapping_is_verified_and_inspectable():
    result = plan(po.suite.get("gemm").kernel)
    assert isinstance(result.source, ContractionSource)
    po.verify(result.scop, result.mapped_tree)
    (kernel,) = result.program.kernels
    assert len(kernel.coords) == 2 and kernel.statements == {"S0", "S1"}
    assert "GPU contraction mapping (dmma" in result.schedule.notes[-1]
    assert "mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64" in result.source.source  # FP64 tensor cores
    four = plan(po.einsum_kernel("abcd,cdef->abef", (2, 3, 4, 5), (4, 5, 6, 7), target="cuda", contraction=False).scop)
    assert len(four.program.kernels[0].coords) == 4  # every output index is a coordinate
    po.verify(four.scop, four.mapped_tree)


def test_the_contraction_mapping_is_a_schedule_step():
    """The default CUDA compile of a contraction is the original order and one gpu_contract
    step, which a user applies, reads and replays like any other step."""
    gemm, gemm32 = po.suite.get("gemm").kernel, po.suite.get("gemm").kernel.with_dtype("f32")
    assert plan(gemm).schedule.trace.as_python() == "s = s.gpu_contract(precision='exact')"
    mine = po.schedule(gemm32, "original").gpu_contract(precision="tf32")
    made = plan(gemm32, schedule=mine)
    assert isinstance(made.source, ContractionSource)
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in made.source.source
    replayed = po.Trace.from_json(mine.trace.to_json()).apply(po.schedule(gemm32, "original"))
    assert replayed.pretty() == mine.pretty()
    assert not isinstance(plan(gemm32, schedule=mine.gpu_promote("i", ["A"], to="global")).source,
                          ContractionSource)  # a later step: the general mapping of the same tree
    with pytest.raises(po.ScheduleError, match="no contraction"):
        po.schedule(po.suite.get("jacobi-2d").kernel, "original").gpu_contract()
    with pytest.raises(po.ScheduleError, match="mapped to the GPU already"):
        po.schedule(gemm, "original").gpu_map("i").gpu_contract()
    with pytest.raises(po.ScheduleError, match="precision"):
        po.schedule(gemm, "original").gpu_contract(precision="fp8")


def test_precision_is_opt_in_and_checked():
    gemm32 = po.suite.get("gemm").kernel.with_dtype("f32")
    exact = po.cuda_source(gemm32)
    assert "mma.sync" not in exact and "_acc[_i][_j] = _acc[_i][_j] + _a[_i] * _b[_j];" in exact
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in po.cuda_source(gemm32, precision="tf32")
    with pytest.raises(ValueError, match="precision must be one of 'exact', 'tf32'"):
        po.cuda_source(gemm32, precision="fast")
    with pytest.raises(ValueError, match="precision=.tf32. is an option of target=.cuda."):
        po.compile(gemm32, precision="tf32")
    # the general mapping when asked for it, or when the user steers the mapping
    assert "_acc" not in po.cuda_source(gemm32, contraction=False)
    assert "_acc" not in po.cuda_source(gemm32, block=(8, 32))
    assert po.cuda_source(gemm32).count("__global__") == 4  # wide, narrow, wide splitting K in 2 and 4


def test_few_tiles_and_a_long_sum_split_k_over_a_cluster():
    """Grids of fewer tiles than SMs take the wide tile splitting K over a cluster (sm_90 only),
    into as many blocks as the SMs want (1024^3: 128 tiles in two; 256 x 65536 x 256: 8 tiles
    in four), a cluster's blocks side by side along x; never a grid that fills the SMs, a
    short sum, or a GPU without clusters."""
    source = contraction_plan(_einsum_scop("ij,jk->ik", [(4, 5), (5, 6)]), "t").source
    splits = {v.split_k: name for name, v in source.variants if v.split_k}
    assert set(splits) == {2, 4}

    def chosen(m, k, n, clusters=True, sm_count=132):
        shapes = {"op0": (m, k), "op1": (k, n), "out": (m, n)}
        name, variant, layout = choose_kernel(source, {"i_i": m, "i_j": k, "i_k": n}, shapes, sm_count=sm_count,
                                              clusters=clusters)
        return variant.split_k, layout.grid
    assert chosen(1024, 1024, 1024) == (2, (1024 // 128 * 2, 1024 // 64, 1))
    assert chosen(256, 65536, 256) == (4, (256 // 128 * 4, 256 // 64, 1))
    assert chosen(1024, 1024, 1024, clusters=False)[0] == 0
    assert chosen(4096, 4096, 4096)[0] == 0  # 2048 tiles
    assert chosen(256, 200, 256)[0] == 0  # 13 K tiles: not 8 a block
    assert chosen(1024, 1024, 1024, sm_count=32)[0] == 0  # 128 tiles fill 32 SMs
    text = source.source
    assert text.count("__cluster_dims__(2, 1, 1)") == text.count("__cluster_dims__(4, 1, 1)") == 1
    assert "barrier.cluster.arrive.release.aligned" in text and "mapa.u64" in text


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_nvcc_builds_the_k_splitting_kernels_without_spills(tmp_path):
    """The cluster kernels build for sm_90 without spilling (and for sm_80, empty: the launch
    never takes them there)."""
    (tmp_path / "k.cu").write_text(po.einsum_kernel("abcd,cdef->abef", (4, 4, 8, 8), (8, 8, 4, 4), dtype="float32",
                                                    target="cuda").cuda_source)
    result = subprocess.run(["nvcc", "-gencode", "arch=compute_90,code=sm_90", "-gencode", "arch=compute_80,code=sm_80",
                             "-c", "-Xptxas", "-v", "k.cu", "-o", "k.o"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "__cluster_dims__" in (tmp_path / "k.cu").read_text() and "sm_80" in result.stderr
    assert not re.search(r"[1-9]\d* bytes spill", result.stderr)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_nvcc_builds_every_engine(tmp_path):
    sources = {"simt32": po.cuda_source(po.suite.get("gemm").kernel.with_dtype("f32")),
               "tf32": po.cuda_source(po.suite.get("gemm").kernel.with_dtype("f32"), precision="tf32"),
               "dmma": po.cuda_source(po.suite.get("gemm").kernel),
               "hmma": po.einsum_kernel("ik,kj->ij", (70, 40), (40, 50), dtype="float16", target="cuda").cuda_source,
               "hmma_kn": po.einsum_kernel("ki,kj->ij", (72, 40), (72, 48), dtype="float16", target="cuda").cuda_source}
    sources["epilogue"] = po.cuda_source(example_kernel("bmm_bias_relu"))
    for k, (subscripts, shapes) in enumerate(PATTERNS):
        sources[f"p{k}"] = po.einsum_kernel(subscripts, *shapes, dtype="float32", target="cuda").cuda_source
    for name, text in sources.items():
        (tmp_path / f"{name}.cu").write_text(text)
    result = subprocess.run(["nvcc", "-arch=sm_90", "-c", *(f"{n}.cu" for n in sources)], cwd=tmp_path,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    assert len(list(tmp_path.glob("*.o"))) == len(sources)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_nvcc_builds_the_tma_gemm_probe_for_sm90a(tmp_path):
    """benchmarks/gpu_tma_probe.py (the TMA + setmaxnreg design the wgmma kernels are to take)
    builds for sm_90a without spills: its figures in docs/performance.md stay reproducible."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_tma_probe.py"
    spec = importlib.util.spec_from_file_location("gpu_tma_probe", path)
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    (tmp_path / "probe.cu").write_text(probe.source())
    result = subprocess.run(["nvcc", "-arch=sm_90a", "-cubin", "-Xptxas", "-v", "probe.cu", "-o", "probe.cubin"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    kernels = re.findall(r"Compiling entry function '(tma_\w+)'", result.stderr)
    assert len(kernels) == len(probe.CONFIGS)
    assert not re.search(r"[1-9]\d* bytes spill", result.stderr)


def _outermost_declarations(body: str) -> set[str]:
    """The names a C function body declares in its outermost block (two-space indented lines
    starting with a type), initializers and array sizes skipped."""
    names = set()
    for line in body.splitlines():
        found = re.match(r"^  (?:const )?(?:long|int|char|double|unsigned)\b(.*)$", line)
        if not found:
            continue
        rest = found.group(1)
        while re.search(r"\{[^{}]*\}", rest):
            rest = re.sub(r"\{[^{}]*\}", "", rest)
        for part in re.sub(r"\([^()]*\)", "", rest).split(","):
            name = re.match(r"[\s*]*(?:const\s+)?[\s*]*([A-Za-z_]\w*)", part)
            if name:
                names.add(name.group(1))
    return names


def test_host_locals_name_every_local_of_the_host_launch():
    """HOST_LOCALS (size parameters of these names are renamed in the host function) lists
    every name the host launch declares in its outermost block: one pair, two pairs, a cut box,
    a program of contractions, a batch of half operands."""
    sources = [po.cuda_source(po.suite.get(name).kernel) for name in ("gemm", "syrk", "syr2k", "2mm")]
    sources.append(po.einsum_kernel("bik,bkj->bij", (3, 20, 16), (3, 16, 24), dtype="float16", target="cuda").cuda_source)
    for source in sources:
        host = source[source.index("#ifndef __CUDACC_RTC__"):]
        bodies = re.findall(r"^(?:static |extern \"C\" )(?!__global__)[^\n]*\)\n\{\n(.*?)^\}", host, flags=re.M | re.S)
        assert bodies
        for body in bodies:
            assert _outermost_declarations(body) <= HOST_LOCALS


# ----- on the GPU ----------------------------------------------------------------------------------

def _relative_error(result, expected) -> float:
    return float(np.linalg.norm(result - expected) / max(np.linalg.norm(expected), 1e-300))


@needs_gpu
@pytest.mark.parametrize("tile", CONTRACTION_TILES)
@pytest.mark.parametrize("precision", ["exact", "tf32"])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("subscripts, shapes", PATTERNS)
def test_contractions_match_numpy(subscripts, shapes, dtype, precision, tile, monkeypatch):
    """Every pattern in every engine and tile shape (the launch made to take tile ``tile``);
    float16 operands on the f16 tensor cores, the result rounded to float16 once."""
    import cupy

    force_contraction_tile(monkeypatch, tile)
    if dtype != np.float32 and precision == "tf32":
        pytest.skip("tf32 concerns f32 data")
    rng = np.random.default_rng(len(subscripts))
    operands = [rng.standard_normal(s).astype(dtype) for s in shapes]
    kernel = po.einsum_kernel(subscripts, *operands, target="cuda", precision=precision)
    assert isinstance(kernel.compiled, ContractionSource)
    expected = np.einsum(subscripts, *(o.astype(np.float64) for o in operands))
    result = po.einsum(subscripts, *map(cupy.asarray, operands), precision=precision).get()
    bound = {"tf32": 5e-3, "exact": {np.float16: 2e-3, np.float32: 1e-5, np.float64: 1e-13}[dtype]}[precision]
    assert _relative_error(result, expected) < bound


@needs_gpu
@pytest.mark.parametrize("sizes", [(131, 77, 45), (132, 76, 44)], ids=["ragged", "whole-vectors"])
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_suite_gemm_with_alpha_and_beta(dtype, sizes):
    """The init statement (C *= beta) and the scaled operand (alpha * A) of PolyBench's gemm, at
    sizes no tile divides, through po.compile as a library call runs it (rows in whole 16-byte
    vectors: the cp.async kernel, alpha applied as the fragments are read)."""
    entry = po.suite.get("gemm")
    kernel = entry.kernel.with_dtype(dtype)
    args = entry.inputs(dict(zip(("NI", "NJ", "NK"), sizes)))
    if dtype == "f32":
        args = {k: (v.astype(np.float32) if isinstance(v, np.ndarray) else v) for k, v in args.items()}
    expected = {k: (v.astype(np.float64) if isinstance(v, np.ndarray) else v) for k, v in args.items()}
    entry.reference(**expected)
    compiled = po.compile(kernel, target="cuda")
    assert isinstance(compiled.compiled, ContractionSource)
    compiled(**args)
    assert _relative_error(args["C"], expected["C"]) < (1e-5 if dtype == "f32" else 1e-13)


@needs_gpu
def test_exact_f32_is_the_statements_arithmetic():
    """precision='exact' on f32 sums each element in K order with FMA contraction where the
    launch does not split K (a grid that fills the SMs): bitwise the result of the general
    mapping (which runs the same order)."""
    import cupy

    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((4096, 300)).astype(np.float32), rng.standard_normal((300, 1024)).astype(np.float32)
    fast = po.einsum("ij,jk->ik", cupy.asarray(a), cupy.asarray(b)).get()
    general = po.einsum_kernel("ij,jk->ik", a, b, target="cuda", contraction=False)
    out = cupy.zeros((4096, 1024), np.float32)
    general(op0=cupy.asarray(a), op1=cupy.asarray(b), out=out)
    np.testing.assert_array_equal(fast, out.get())


@needs_gpu
def test_split_sums_are_the_same_every_run(monkeypatch):
    """A launch splitting K over a cluster (few tiles, a long sum; sm_90) adds the blocks' sums
    in rank order: the same bits every call, within f32 rounding of float64."""
    import cupy

    taken = note_contraction_choices(monkeypatch, "split_k")
    monkeypatch.setattr(CudaKernel, "recorded", lambda self, key: None)
    einsum_calls.clear()
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((200, 30000)).astype(np.float32), rng.standard_normal((30000, 250)).astype(np.float32)
    da, db = cupy.asarray(a), cupy.asarray(b)
    first = po.einsum("ij,jk->ik", da, db).get()
    for _ in range(3):
        np.testing.assert_array_equal(po.einsum("ij,jk->ik", da, db).get(), first)
    if int(cupy.cuda.Device().compute_capability) >= 90:
        assert set(taken) == {4}, taken
    assert _relative_error(first, a.astype(float) @ b.astype(float)) < 1e-5


@po.kernel
def batched_matmul(A: f32["NB", "NI", "NK"], B: f32["NB", "NK", "NJ"], C: f32["NB", "NI", "NJ"]):
    for b in range(NB):
        for i in range(NI):
            for j in range(NJ):
                C[b, i, j] = 0.0
                for k in range(NK):
                    C[b, i, j] += A[b, i, k] * B[b, k, j]


@po.kernel
def conv1x1(X: f32["NN", "NC", "NH", "NW"], Wt: f32["NK", "NC"], Y: f32["NN", "NK", "NH", "NW"]):
    for n in range(NN):
        for k in range(NK):
            for h in range(NH):
                for w in range(NW):
                    for c in range(NC):
                        Y[n, k, h, w] += Wt[k, c] * X[n, c, h, w]


def test_dsl_kernels_of_contraction_shape_are_contractions():
    """A batched matmul and a 1x1 convolution written as loops, as a user writes them: the same
    mapping as their einsum strings (the init statement of the first, none in the second: the
    convolution accumulates into Y's values)."""
    bmm = find_contraction(scop_of(batched_matmul))
    assert bmm.describe() == "batch (b) x M (i) x N (j) x K (k)" and str(bmm.init.value) == "0.0"
    conv = find_contraction(scop_of(conv1x1))
    assert conv.describe() == "M (k) x N (n, h, w) x K (c)" and conv.init is None
    assert (conv.left.array, conv.right.array) == ("Wt", "X")
    assert isinstance(plan(conv1x1).source, ContractionSource)


@needs_gpu
def test_dsl_contractions_match_numpy():
    import cupy

    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((3, 40, 50)).astype(np.float32), rng.standard_normal((3, 50, 30)).astype(np.float32)
    c = cupy.full((3, 40, 30), np.nan, np.float32)  # every element written by the init
    po.compile(batched_matmul, target="cuda")(cupy.asarray(a), cupy.asarray(b), c)
    assert _relative_error(c.get(), np.einsum("bik,bkj->bij", a.astype(float), b.astype(float))) < 1e-6
    x, w = rng.standard_normal((2, 16, 5, 7)).astype(np.float32), rng.standard_normal((12, 16)).astype(np.float32)
    y0 = rng.standard_normal((2, 12, 5, 7)).astype(np.float32)
    y = cupy.asarray(y0)
    po.compile(conv1x1, target="cuda")(cupy.asarray(x), cupy.asarray(w), y)
    expected = y0 + np.einsum("kc,nchw->nkhw", w.astype(float), x.astype(float))
    assert _relative_error(y.get(), expected) < 1e-6


@needs_gpu
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_the_nvcc_host_function_computes_the_same(tmp_path):
    """The source's extern "C" host function (for C/C++ callers) lays out and launches the
    kernel as the target does: built with nvcc into a library, called with device pointers."""
    import ctypes

    import cupy

    subscripts, shapes = "nchw,kc->nkhw", [(3, 20, 5, 7), (24, 20)]
    kernel = po.einsum_kernel(subscripts, *shapes, dtype="float32", target="cuda")
    (tmp_path / "k.cu").write_text(kernel.cuda_source)
    built = subprocess.run(["nvcc", "-arch=native", "-shared", "-Xcompiler", "-fPIC", "k.cu", "-o", "k.so"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    library = ctypes.CDLL(str(tmp_path / "k.so"))
    rng = np.random.default_rng(7)
    x, w = (rng.standard_normal(s).astype(np.float32) for s in shapes)
    dx, dw, dy = cupy.asarray(x), cupy.asarray(w), cupy.zeros((3, 24, 5, 7), np.float32)
    sizes = {"N_n": 3, "N_c": 20, "N_h": 5, "N_w": 7, "N_k": 24}
    values = [ctypes.c_long(sizes[p]) for p in kernel.scop.params]
    getattr(library, kernel.compiled.host_function)(*values, ctypes.c_void_p(dx.data.ptr),
                                                      ctypes.c_void_p(dw.data.ptr), ctypes.c_void_p(dy.data.ptr))
    cupy.cuda.Device().synchronize()
    assert _relative_error(dy.get(), np.einsum(subscripts, x.astype(float), w.astype(float))) < 1e-6


@po.kernel
def flat_matmul_bias_relu(A: f32["NB", "NI", "NK"], B: f32["NK", "NJ"], bias: f32["NI"], C: f32["NB", "NI", "NJ"]):
    for b in range(NB):
        for i in range(NI):
            for j in range(NJ):
                C[b, i, j] = 0.0
                for k in range(NK):
                    C[b, i, j] += A[b, i, k] * B[k, j]
    for b in range(NB):
        for i in range(NI):
            for j in range(NJ):
                C[b, i, j] = max(C[b, i, j] + bias[i], 0.0)


def test_element_wise_epilogues_join_the_kernel():
    """bias + ReLU after a (batched) matmul run on each element once its sum is complete, in
    the kernel's store: the mapping is verified with them, and their reads are decoded from the
    tile coordinates (here i lies inside the collapsed M run b*i)."""
    bmm_bias_relu = example_kernel("bmm_bias_relu")
    c = find_contraction(scop_of(bmm_bias_relu))
    assert c.describe() == "batch (b) x M (i) x N (j) x K (k)" and len(c.epilogue) == 2
    made = plan(bmm_bias_relu)
    assert isinstance(made.source, ContractionSource) and made.program.kernels[0].statements == {"S0", "S1", "S2", "S3"}
    po.verify(made.scop, made.mapped_tree)
    flat = find_contraction(scop_of(flat_matmul_bias_relu))
    variant = plan(flat_matmul_bias_relu).source.variants[0][1]
    layout = launch_layout(flat, variant, {"b": 3, "i": 5, "j": 7, "k": 4},
                           {"A": (3, 5, 4), "B": (4, 7), "C": (3, 5, 7)})
    assert layout.arguments[0] == 15 and layout.arguments[-3:] == (0, 1, 5)  # i = m % 5: M run (b, i)
    # an epilogue reading what the update writes elsewhere, or writing another array, is none
    assert find_contraction(scop_of(po.suite.get("2mm").kernel)) is None


@needs_gpu
@pytest.mark.parametrize("tile", CONTRACTION_TILES)
def test_epilogues_on_the_gpu_match_numpy(tile, monkeypatch):
    import cupy

    bmm_bias_relu = example_kernel("bmm_bias_relu")
    force_contraction_tile(monkeypatch, tile)
    rng = np.random.default_rng(9)
    a, b, bias = rng.standard_normal((3, 37, 20)), rng.standard_normal((3, 20, 44)), rng.standard_normal(44)
    c = cupy.zeros((3, 37, 44))
    po.compile(bmm_bias_relu, target="cuda")(c, cupy.asarray(a), cupy.asarray(b), cupy.asarray(bias))
    assert _relative_error(c.get(), np.maximum(a @ b + bias, 0)) < 1e-13
    a, b, bias = (x.astype(np.float32) for x in (a, b[0], rng.standard_normal(37)))
    c = cupy.zeros((3, 37, 44), np.float32)
    po.compile(flat_matmul_bias_relu, target="cuda")(cupy.asarray(a), cupy.asarray(b), cupy.asarray(bias), c)
    assert _relative_error(c.get(), np.maximum(a.astype(float) @ b + bias[:, None], 0)) < 1e-6


@needs_gpu
@pytest.mark.parametrize("tile", CONTRACTION_TILES)
@pytest.mark.parametrize("dtype, precision, bound", [("float32", "tf32", 5e-3), ("float64", "exact", 1e-13)])
@pytest.mark.parametrize("shapes", [[(2, 3, 130, 64), (2, 3, 96, 64)],  # output rows in 16-byte vectors
                                    [(2, 3, 130, 64), (2, 3, 90, 64)]])  # rows off them: element stores
def test_each_tile_stores_attention_scores(shapes, dtype, precision, bound, tile, monkeypatch):
    """Every TF32 and FP64 tile kernel (forced) on attention scores, K = 64: the fragment pair
    stores and, in the ``cp.async`` kernels whose ring holds the output tile, the 16-byte row
    stores through shared memory, at ragged M and N, against float64."""
    import cupy

    force_contraction_tile(monkeypatch, tile)
    rng = np.random.default_rng(tile)
    q, k = (rng.standard_normal(s).astype(dtype) for s in shapes)
    result = po.einsum("bhqd,bhkd->bhqk", cupy.asarray(q), cupy.asarray(k), precision=precision).get()
    assert _relative_error(result, np.einsum("bhqd,bhkd->bhqk", q.astype(float), k.astype(float))) < bound
