"""The Hopper ``wgmma`` contraction kernels (issue 17, :mod:`polyopt.codegen.cuda_wgmma`): in the
source of every f16 einsum and TF32 contraction whose operands allow them, compiled by nvcc for
sm_90a without a GPU, chosen only from an sm_90a build; on an H100/H200 each ``wgmma`` kernel
(forced) is checked against float64 on ragged sizes, transposed operands, batches, and the
init/epilogue statements (beta, alpha, bias)."""
import re
import shutil
import subprocess

import numpy as np
import pytest

import polyopt as po
from polyopt.analysis.contraction import find_contraction
from polyopt.codegen.cuda_contraction import NARROW_WGMMA_VARIANT, WGMMA_VARIANTS, ContractionSource
from polyopt.codegen.cuda_wgmma import (SHARED_OPT_IN_LIMIT, staging_bytes, staging_columns, sum_scale, tma_layouts,
                                      wgmma_shared_bytes)
from polyopt.analysis import expr as E
from polyopt.targets import contraction
from polyopt.targets.contraction import choose_kernel
from polyopt.targets.cache import scop_of
from polyopt.targets.cuda import CudaKernel
from polyopt import einsum_calls

from conftest import force_contraction_tile, needs_gpu, note_contraction_choices

f16, f32 = po.f16, po.f32


def _source(subscripts, shapes, dtype="float16", precision="exact") -> ContractionSource:
    return po.einsum_kernel(subscripts, *shapes, dtype=dtype, target="cuda", precision=precision).compiled


@po.kernel
def tf32_gemm_alpha_beta(alpha: f32, beta: f32, A: f32["NI", "NK"], B: f32["NJ", "NK"], bias: f32["NJ"],
                         C: f32["NI", "NJ"]):
    for i in range(NI):
        for j in range(NJ):
            C[i, j] = C[i, j] * beta
            for k in range(NK):
                C[i, j] += A[i, k] * B[j, k]
            C[i, j] = C[i, j] * alpha + bias[j]


def test_the_source_has_wgmma_kernels_where_the_operands_allow():
    f16_source = _source("ij,jk->ik", [(256, 256), (256, 256)])
    assert "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16" in f16_source.source
    assert "wgmma.mma_async" in po.cuda_source(scop_of(tf32_gemm_alpha_beta), precision="tf32")
    assert sum(v.wgmma for _, v in f16_source.variants) == len(WGMMA_VARIANTS["hmma"])
    # TF32 wgmma takes K-major tiles only: B by K rows is transposed on its way in (4-byte cp.async)
    nt = _source("ik,jk->ij", [(64, 64), (64, 64)], "float32", "tf32").source
    assert "m64n128k8.f32.tf32.tf32" in nt and "pl_cp4(_" not in nt
    nn = _source("ij,jk->ik", [(64, 64), (64, 64)], "float32", "tf32")
    assert sum(v.wgmma for _, v in nn.variants) == len(WGMMA_VARIANTS["tf32"])  # TMA ones read a K-major copy
    assert "pl_cp4(_d0" in nn.source
    assert "_s0 = op1 + _offR" in nn.source and "_s0 = op0" not in nn.source  # B only
    assert "mbarrier.try_wait.parity" in nn.source  # warp-specialized
    assert "wgmma" not in _source("ij,jk->ik", [(64, 64), (64, 64)], "float32").source  # exact f32: SIMT
    assert "wgmma" not in _source("ij,jk->ik", [(64, 64), (64, 64)], "float64").source


def test_wgmma_kernels_are_chosen_only_from_an_sm90a_build():
    source = _source("ij,jk->ik", [(8, 8), (8, 8)])
    extent = {"i_i": 4096, "i_j": 4096, "i_k": 4096}

    def chosen(n=4096, k=4096, aligned=True, wgmma=True):
        shapes = {"op0": (n, k), "op1": (k, n), "out": (n, n)}
        return choose_kernel(source, {"i_i": n, "i_j": n, "i_k": k}, shapes, 132, aligned, wgmma=wgmma)[1]
    assert chosen().wgmma and not chosen(wgmma=False).wgmma
    assert not chosen(aligned=False).wgmma and not chosen(k=4095).wgmma  # rows off 16-byte boundaries

    def by_size(m, n, k):  # "ij,jk->ik": i is M, j is K, k is N
        shapes = {"op0": (m, k), "op1": (k, n), "out": (m, n)}
        return choose_kernel(source, {"i_i": m, "i_j": k, "i_k": n}, shapes, 132, True, wgmma=True)[1]
    assert by_size(2048, 2048, 2048).wgmma and by_size(2048, 2048, 256).wgmma
    assert not by_size(4096, 4096, 128).wgmma  # a sum of fewer than WGMMA_MIN_K terms
    assert not by_size(1024, 1024, 4096).wgmma  # 64 tiles of 128 x 128 leave SMs idle
    assert not by_size(65536, 64, 512).wgmma and by_size(65536, 96, 512).wgmma  # N = 64: half of each tile idle
    assert not choose_kernel(source, extent, {"op0": (4096,) * 2, "op1": (4096,) * 2, "out": (4096,) * 2}, 132)[1].wgmma
    first_copying = next(v for v in WGMMA_VARIANTS["hmma"] if not v.tma)
    assert chosen() == first_copying  # no TMA asked for (a graph capture): the cp.async kernels
    tf32 = _source("ij,jk->ik", [(8, 8), (8, 8)], "float32", "tf32")  # B by K rows: transposed into its tiles
    squares = {"op0": (4096,) * 2, "op1": (4096,) * 2, "out": (4096,) * 2}
    # TMA does not transpose 4-byte elements: the TMA kernels read B from a K-major copy
    _, variant, layout = choose_kernel(tf32, extent, squares, 132, wgmma=True, tma=True)
    assert variant == WGMMA_VARIANTS["tf32"][0]
    left, right = contraction.tma_specs(tf32, variant, layout)
    assert left.copied_from is None and right.copied_from == (4096, 4096 * 4096)
    assert (right.dims, right.strides, right.box) == ((4096, 4096, 1), (16384, 4096 * 16384), (32, 256, 1))
    assert choose_kernel(tf32, extent, squares, 132, wgmma=True, tma=False)[1] == \
        next(v for v in WGMMA_VARIANTS["tf32"] if not v.tma)


def test_tma_kernels_are_chosen_where_the_operands_are_plain_2d_views():
    source = _source("ij,jk->ik", [(8, 8), (8, 8)])  # A K-major, B N-major (read transposed)
    squares = {"op0": (4096,) * 2, "op1": (4096,) * 2, "out": (4096,) * 2}
    extent = {"i_i": 4096, "i_j": 4096, "i_k": 4096}
    name, variant, layout = choose_kernel(source, extent, squares, 132, wgmma=True, tma=True)
    assert variant == WGMMA_VARIANTS["hmma"][0] and variant.tma and variant.bn == 256
    left, right = contraction.tma_specs(source, variant, layout)
    assert (left.dtype, left.dims, left.strides, left.box) == ("f16", (4096, 4096, 1), (8192, 2**25), (64, 128, 1))
    assert (right.dims, right.strides, right.box) == ((4096, 4096, 1), (8192, 2**25), (64, 64, 1))  # (N, K)
    # batch slots: one dimension of both operands (b and h of attention adjacent), the block's _z
    attention = _source("bhqd,bhkd->bhqk", [(2, 2, 8, 64), (2, 2, 8, 64)])
    shapes = {"op0": (4, 8, 1024, 512), "op1": (4, 8, 1024, 512), "out": (4, 8, 1024, 1024)}
    extent = {"i_b": 4, "i_h": 8, "i_q": 1024, "i_k": 1024, "i_d": 512}
    _, variant, layout = choose_kernel(attention, extent, shapes, 132, wgmma=True, tma=True)
    assert variant.tma
    left, right = contraction.tma_specs(attention, variant, layout)
    assert left.dims == (512, 1024, 32) and left.strides == (1024, 2**20) and right.dims == (512, 1024, 32)
    # the 1x1 convolution: n is a batch slot that the weights do not have (a stride of 0)
    convolution = _source("nchw,kc->nkhw", [(2, 8, 4, 4), (8, 8)])
    shapes = {"op0": (32, 256, 28, 28), "op1": (256, 256), "out": (32, 256, 28, 28)}
    chosen = choose_kernel(convolution, {"i_n": 32, "i_c": 256, "i_h": 28, "i_w": 28, "i_k": 256}, shapes, 132,
                           wgmma=True, tma=True)
    assert chosen[1].wgmma and not chosen[1].tma and chosen[2].arguments[9] == 32
    tf32 = _source("ik,jk->ij", [(8, 8), (8, 8)], "float32", "tf32")  # both K-major: TF32 TMA kernels
    _, variant, layout = choose_kernel(tf32, {"i_i": 4096, "i_j": 4096, "i_k": 4096}, squares, 132, wgmma=True,
                                       tma=True)
    assert variant.tma and contraction.tma_specs(tf32, variant, layout)[1].box == (32, 256, 1)
    # syr2k's two operand pairs: the tensor copies address one pair's operands
    two_pairs = find_contraction(scop_of(po.suite.get("syr2k").kernel))
    assert len(two_pairs.pairs) == 2 and not tma_layouts(two_pairs, WGMMA_VARIANTS["hmma"][0])


def test_a_narrow_output_takes_the_128_x_64_tma_kernel():
    """An N of 64 (attention's ``bhqk,bhkd->bhqd``, d = 64) takes the TMA ``wgmma`` kernel of 128 x 64
    tiles where TMA may run, and the ``mma.sync`` kernels where it may not (a graph capture); a
    wider N never takes it."""
    source = _source("bhqk,bhkd->bhqd", [(2, 2, 8, 64), (2, 2, 64, 64)])
    shapes = {"op0": (8, 16, 512, 512), "op1": (8, 16, 512, 64), "out": (8, 16, 512, 64)}
    extent = {"i_b": 8, "i_h": 16, "i_q": 512, "i_k": 512, "i_d": 64}
    _, variant, layout = choose_kernel(source, extent, shapes, 132, wgmma=True, tma=True)
    assert variant == NARROW_WGMMA_VARIANT and variant.bn == 64
    left, right = contraction.tma_specs(source, variant, layout)
    assert left.box == (64, 128, 1) and right.box == (64, 64, 1)  # B (k, d) N-major: a box of 64 d by 64 k
    assert not choose_kernel(source, extent, shapes, 132, wgmma=True, tma=False)[1].wgmma
    wide = {"op0": (8, 16, 512, 512), "op1": (8, 16, 512, 128), "out": (8, 16, 512, 128)}
    assert choose_kernel(source, {**extent, "i_d": 128}, wide, 132, wgmma=True, tma=True)[1] != NARROW_WGMMA_VARIANT
    short = {"op0": (8, 16, 512, 128), "op1": (8, 16, 128, 64), "out": (8, 16, 512, 64)}  # K = 128: mma.sync
    assert not choose_kernel(source, {**extent, "i_k": 128}, short, 132, wgmma=True, tma=True)[1].wgmma
    assert NARROW_WGMMA_VARIANT in WGMMA_VARIANTS["hmma"] and NARROW_WGMMA_VARIANT not in WGMMA_VARIANTS["tf32"]


def test_a_short_sum_of_halves_takes_the_staging_tma_kernels():
    """A sum shorter than WGMMA_MIN_K (attention's ``bhqd,bhkd->bhqk``, d = 64) takes the TMA
    kernel that stages its half output tile, persistent, where TMA may run and the output is of
    the half type; the ``mma.sync`` kernels otherwise (a graph capture, an f32 output)."""
    source = _source("bhqd,bhkd->bhqk", [(2, 2, 8, 64), (2, 2, 8, 64)])
    shapes = {"op0": (8, 16, 512, 64), "op1": (8, 16, 512, 64), "out": (8, 16, 512, 512)}
    extent = {"i_b": 8, "i_h": 16, "i_q": 512, "i_k": 512, "i_d": 64}
    variant = choose_kernel(source, extent, shapes, 132, wgmma=True, tma=True, half=True)[1]
    assert variant.tma and staging_bytes(variant) and (variant.bm, variant.bn) == (128, 128)
    assert not choose_kernel(source, extent, shapes, 132, wgmma=True, tma=False, half=True)[1].wgmma
    assert not choose_kernel(source, extent, shapes, 132, wgmma=True, tma=True, half=False)[1].wgmma
    d32 = {"op0": (8, 16, 512, 32), "op1": (8, 16, 512, 32), "out": (8, 16, 512, 512)}  # less than a K tile
    assert not choose_kernel(source, {**extent, "i_d": 32}, d32, 132, wgmma=True, tma=True, half=True)[1].wgmma
    narrow = {"op0": (8, 16, 512, 64), "op1": (8, 16, 64, 512), "out": (8, 16, 512, 64)}  # N = 64 too
    assert choose_kernel(_source("bhqk,bhkd->bhqd", [(2, 2, 8, 64), (2, 2, 64, 64)]), extent, narrow, 132,
                         wgmma=True, tma=True, half=True)[1] == NARROW_WGMMA_VARIANT


def test_staged_output_tiles_fit_beside_the_ring():
    """The warp-specialized half kernels stage the output where it fits the SM's shared memory;
    the 128 x 256 tiles and the TF32 and two-blocks-an-SM kernels store fragments; each kernel
    staging one writes it back by warps, 16-byte rows after a warp barrier."""
    sizes = {v: staging_bytes(v) for engine in ("hmma", "tf32") for v in WGMMA_VARIANTS[engine]}
    assert all(wgmma_shared_bytes(v) <= SHARED_OPT_IN_LIMIT for v in sizes)
    assert sizes[NARROW_WGMMA_VARIANT] == 128 * 72 * 2 and sizes[WGMMA_VARIANTS["hmma"][1]] == 128 * 136 * 2
    wide = WGMMA_VARIANTS["hmma"][0]  # the TMA 128 x 256 tiles: 64 columns at a time
    assert wide.bn == 256 and wide.tma and staging_columns(wide) == 64 and sizes[wide] == 128 * 72 * 2
    assert not any(size for v, size in sizes.items() if v.engine == "tf32" or not v.specialized
                   or (v.bn == 256 and not v.tma))
    text = _source("bhqd,bhkd->bhqk", [(2, 2, 64, 64), (2, 2, 64, 64)]).source
    tma_kernel = text[text.index("polyopt_einsum_k0_8("):text.index("polyopt_einsum_k0_9(")]
    assert "for (int _c = _lane; _c < 16 * 16; _c += 32)" in tma_kernel and "__syncwarp();" in tma_kernel
    assert "*(uint4 *)(_d0 + _row * sCm + _col)" in tma_kernel and "if (_inside) {" in tma_kernel
    wide_kernel = text[text.index("polyopt_einsum_k0_7("):text.index("polyopt_einsum_k0_8(")]
    assert "for (int _h = 0; _h < 4; _h++) {  /* 64 columns at a time */" in wide_kernel
    assert "for (int _j = _h * 8; _j < _h * 8 + 8; _j++)" in wide_kernel and "_n = _n0 + _h * 64 + _col" in wide_kernel


def test_the_tma_kernel_text():
    """One producer thread announces each slot's bytes and issues the tensor copies (K-major:
    one box per operand; MN-major: a box per 64 indices); the roles trade registers."""
    text = _source("ij,jk->ik", [(8, 8), (8, 8)]).source
    assert 'setmaxnreg.dec.sync.aligned.u32 40' in text and 'setmaxnreg.inc.sync.aligned.u32 232' in text
    assert "pl_mb_expect(&_full[_ls], 49152);" in text  # (128 + 256) rows of 128 bytes
    assert "pl_tma3(_As + _ls * 16384, _tmL, (int)_nk0, (int)_m0, (int)_z, &_full[_ls]);" in text
    assert "pl_tma3(_Bs + _ls * 32768 + 24576, _tmR, (int)(_n0 + 192), (int)_nk0, (int)_z, &_full[_ls]);" in text
    assert "const void *_tmL,\n    const void *_tmR)" in text


_NVCC_SOURCES = {
    "f16_nn": lambda: _source("ij,jk->ik", [(256, 256), (256, 256)]).source,  # A K-major, B MN-major
    "f16_tt": lambda: _source("ji,kj->ik", [(256, 256), (256, 256)]).source,  # A MN-major, B K-major
    "f16_batch": lambda: _source("bhqd,bhkd->bhqk", [(2, 2, 64, 64), (2, 2, 64, 64)]).source,
    "tf32_nt": lambda: _source("ik,jk->ij", [(64, 64), (64, 64)], "float32", "tf32").source,
    "tf32_nn": lambda: _source("ij,jk->ik", [(64, 64), (64, 64)], "float32", "tf32").source,  # B transposed in
    "tf32_tt": lambda: _source("ji,kj->ik", [(64, 64), (64, 64)], "float32", "tf32").source,  # A transposed in
    "tf32_epilogue": lambda: po.cuda_source(scop_of(tf32_gemm_alpha_beta), precision="tf32"),
}


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_nvcc_builds_the_wgmma_kernels_for_sm90a(tmp_path):
    for name, make in _NVCC_SOURCES.items():
        text = make()
        assert "wgmma.mma_async" in text, name
        (tmp_path / f"{name}.cu").write_text(text)
    result = subprocess.run(["nvcc", "-arch=sm_90a", "-Xptxas", "-v", "-c", *(f"{n}.cu" for n in _NVCC_SOURCES)],
                            cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "spill stores" in result.stderr and " 0 bytes spill stores" in result.stderr
    assert "serialized" not in result.stderr, result.stderr[-4000:]  # wgmma issued back to back
    # per wgmma kernel: no spills, but for the register-limited ones (384 threads or two blocks
    # per SM) of the source with an init and an epilogue reading another array (52 and 24 bytes;
    # its first mma.sync kernel has 44 bytes), and a few bytes in the f16 kernel built for two
    # blocks per SM (128 registers), whose stores pair the half results
    spills = re.findall(r"Compiling entry function '(\w+)' for 'sm_90a'\n.*\n\s*\d+ bytes stack frame, (\d+) bytes spill",
                        result.stderr)
    assert len(spills) >= 7 * 12, result.stderr[-2000:]
    limited = tuple(f"_k0_{k}" for k, v in enumerate(WGMMA_VARIANTS["tf32"], 7) if v.threads > 256 or v.blocks_per_sm > 1)
    wgmma = tuple(f"_k0_{k}" for k in range(7, 7 + len(WGMMA_VARIANTS["tf32"])))
    paired = tuple(f"_k0_{k}" for k, v in enumerate(WGMMA_VARIANTS["hmma"], 7) if v.blocks_per_sm > 1)
    assert all(int(b) == 0 or name.startswith("polyopt_tf32_gemm_alpha_beta") and name.endswith(limited)
               or name.startswith("polyopt_einsum") and name.endswith(paired) and int(b) <= 8
               for name, b in spills if name.endswith(wgmma)), [(n, b) for n, b in spills if int(b)]
    assert all(int(b) <= 64 for _, b in spills), [(n, b) for n, b in spills if int(b) > 64]


# ----- on an H100 / H200 ---------------------------------------------------------------------------

def _hopper() -> bool:
    import cupy
    return str(cupy.cuda.Device().compute_capability) == "90"


def _relative_error(result, expected) -> float:
    return float(np.linalg.norm(result - expected) / max(np.linalg.norm(expected), 1e-300))


#: Ragged sizes (no tile divides M, N or K, rows still in 16-byte vectors where they must be),
#: transposed operands, batches, several K indices.
WGMMA_PATTERNS = [
    ("ij,jk->ik", [(197, 136), (136, 328)]),  # A K-major, B MN-major
    ("ik,jk->ij", [(197, 72), (203, 72)]),  # both K-major, M and N ragged
    ("ji,jk->ik", [(200, 136), (200, 264)]),  # both MN-major
    ("ji,kj->ik", [(88, 144), (77, 88)]),  # A MN-major, B K-major
    ("bij,bjk->bik", [(3, 70, 200), (3, 200, 136)]),  # a batch
    ("bhqd,bhkd->bhqk", [(2, 3, 130, 64), (2, 3, 90, 64)]),  # attention scores
    ("ij,jk->ik", [(300, 1000), (1000, 520)]),  # many K tiles: the ring wraps
    ("acb,cbd->ad", [(17, 8, 24), (8, 24, 136)]),  # K = (c, b) one run
]


@needs_gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("keys", [512, 470])  # whole 16-byte output rows, and rows off them
def test_attention_scores_take_the_staging_tma_kernel(monkeypatch, dtype, keys):
    """Unforced: half ``bhqd,bhkd->bhqk`` (d = 64, a short sum) takes the persistent TMA kernel
    staging its output on Hopper, and is right at ragged edges and on rows off 16-byte
    boundaries (the element path of the write-back)."""
    import torch

    if not _hopper():
        pytest.skip("wgmma needs compute capability 9.0")
    einsum_calls.clear()
    taken = note_contraction_choices(monkeypatch, "tma")
    generator = torch.Generator(device="cuda").manual_seed(5)
    q, k = (torch.randn(shape, device="cuda", generator=generator).to(getattr(torch, dtype))
            for shape in ((4, 16, 500, 64), (4, 16, keys, 64)))
    expected = torch.einsum("bhqd,bhkd->bhqk", q.double(), k.double())
    for _ in range(2):
        result = po.einsum("bhqd,bhkd->bhqk", q, k)
        error = float((result.double() - expected).norm() / expected.norm())
        assert error < (4e-3 if dtype == "bfloat16" else 2e-3)
    assert taken == [True]  # chosen once: the repeat replays the recorded launch


@needs_gpu
@pytest.mark.parametrize("which", range(len(WGMMA_VARIANTS["hmma"])))
@pytest.mark.parametrize("subscripts, shapes", WGMMA_PATTERNS)
def test_f16_wgmma_matches_float64(subscripts, shapes, which, monkeypatch):
    import cupy

    if not _hopper():
        pytest.skip("wgmma needs compute capability 9.0")
    taken = force_contraction_tile(monkeypatch, which, wgmma_only=True)
    rng = np.random.default_rng(len(subscripts) + sum(map(sum, shapes)))
    operands = [rng.standard_normal(s).astype(np.float16) for s in shapes]
    expected = np.einsum(subscripts, *(o.astype(np.float64) for o in operands))
    result = po.einsum(subscripts, *map(cupy.asarray, operands)).get()
    assert taken, "no wgmma launch"
    assert _relative_error(result, expected) < 2e-3


@needs_gpu
@pytest.mark.parametrize("which", range(len(WGMMA_VARIANTS["tf32"])))
@pytest.mark.parametrize("subscripts, shapes", [("ik,jk->ij", [(197, 72), (203, 72)]),
                                                ("bqd,bkd->bqk", [(2, 130, 200), (2, 260, 200)]),
                                                ("ik,jk->ij", [(256, 1000), (136, 1000)]),
                                                # M/N-major operands, transposed into K-major tiles
                                                ("ij,jk->ik", [(197, 72), (72, 204)]),
                                                ("ji,kj->ik", [(72, 196), (260, 72)]),
                                                ("bqd,bdk->bqk", [(2, 130, 200), (2, 200, 260)])])
def test_tf32_wgmma_matches_float64(subscripts, shapes, which, monkeypatch):
    import cupy

    if not _hopper():
        pytest.skip("wgmma needs compute capability 9.0")
    taken = force_contraction_tile(monkeypatch, which, wgmma_only=True)
    rng = np.random.default_rng(5)
    operands = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    expected = np.einsum(subscripts, *(o.astype(np.float64) for o in operands))
    result = po.einsum(subscripts, *map(cupy.asarray, operands), precision="tf32").get()
    assert taken, "no wgmma launch"
    assert _relative_error(result, expected) < 5e-3  # TF32 operands (wgmma truncates to 10 bits)


@needs_gpu
@pytest.mark.parametrize("which", range(len(WGMMA_VARIANTS["tf32"])))
def test_wgmma_init_and_epilogues_match_float64(which, monkeypatch):
    """beta * C before the sum, alpha * C + bias after it (PolyBench's gemm and a bias): the
    accumulators start from the init statement and the stores run the epilogue statements, as in
    the other kernels (TF32: f16 kernels with an init or epilogue come only from the DSL, where
    the f16 product is an f16 operation and no contraction)."""
    import cupy

    if not _hopper():
        pytest.skip("wgmma needs compute capability 9.0")
    taken = force_contraction_tile(monkeypatch, which, wgmma_only=True)
    rng = np.random.default_rng(11)
    ni, nj, nk = 203, 261, 200
    a, b = (rng.standard_normal(s).astype(np.float32) for s in ((ni, nk), (nj, nk)))
    bias, c = rng.standard_normal(nj).astype(np.float32), rng.standard_normal((ni, nj)).astype(np.float32)
    expected = (c.astype(float) * 0.5 + a.astype(float) @ b.astype(float).T) * 1.5 + bias
    device_c = cupy.asarray(c)
    po.compile(tf32_gemm_alpha_beta, target="cuda", precision="tf32")(
        np.float32(1.5), np.float32(0.5), cupy.asarray(a), cupy.asarray(b), cupy.asarray(bias), device_c)
    assert taken
    assert _relative_error(device_c.get(), expected) < 5e-3


@needs_gpu
@pytest.mark.parametrize("which", range(len(WGMMA_VARIANTS["tf32"])))
@pytest.mark.parametrize("name", ["gemm", "syr2k"])
def test_a_factor_of_an_operand_scales_the_wgmma_sum(name, which, monkeypatch):
    """PolyBench's gemm (``C += alpha * A[i][k] * B[k][j]``, B read from a K-major copy by the TMA
    kernels) and syr2k (two operand pairs, each with the factor alpha): the kernels sum the
    plain products and store ``beta * C + alpha * sum``; checked against float64 with every
    ``wgmma`` kernel forced, at ragged sizes."""
    import cupy

    if not _hopper():
        pytest.skip("wgmma needs compute capability 9.0")
    taken = force_contraction_tile(monkeypatch, which, wgmma_only=True)
    rng = np.random.default_rng(12)
    n, m = 203, 264  # ragged N; K (and syr2k's M) a whole number of 16-byte vectors
    kernel = po.suite.get(name).kernel.with_dtype("f32")
    alpha, beta = np.float32(1.5), np.float32(0.5)
    if name == "gemm":
        a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((n, m), (m, 200), (n, 200)))
        expected = beta * c.astype(float) + alpha * (a.astype(float) @ b.astype(float))
    else:
        a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((n, m), (n, m), (n, n)))
        product = a.astype(float) @ b.astype(float).T
        full = beta * c.astype(float) + alpha * (product + product.T)
        expected = np.where(np.tril(np.ones((n, n), bool)), full, c)
    device_c = cupy.asarray(c)
    po.compile(kernel, target="cuda", precision="tf32")(alpha, beta, device_c, cupy.asarray(a), cupy.asarray(b))
    assert taken
    assert _relative_error(device_c.get(), expected) < 5e-3


def test_the_factor_of_an_operand_is_applied_to_the_sum():
    """gemm's ``alpha * A[i][k]``: the wgmma kernels (TF32) sum from zero and scale the sum."""
    source = po.cuda_source(po.suite.get("gemm").kernel.with_dtype("f32"), precision="tf32")
    assert "wgmma.mma_async" in source and "pl_tma3(" in source
    assert "((C[_offC + _m * sCm + _n * sCn] * beta) + (alpha) * _acc[_j * 4 + _r])" in source
    assert sum_scale(find_contraction(scop_of(po.suite.get("gemm").kernel))) == E.Var("alpha", "scalar", po.f64)
    assert sum_scale(find_contraction(scop_of(po.suite.get("syr2k").kernel))).name == "alpha"  # both pairs
    assert sum_scale(find_contraction(scop_of(po.suite.get("syrk").kernel))) is not False


@needs_gpu
def test_large_f16_einsum_takes_wgmma_on_hopper():
    """Unforced: an f16 einsum that takes the wgmma kernels (4096 x 2048 x 4096) on an H100
    runs from a build with them, and it is right."""
    import cupy

    if not _hopper():
        pytest.skip("wgmma needs compute capability 9.0")
    from polyopt.targets.cuda import module_has_wgmma
    rng = np.random.default_rng(2)
    a, b = (rng.standard_normal(shape).astype(np.float16) for shape in ((4096, 2048), (2048, 4096)))
    kernel = po.einsum_kernel("ij,jk->ik", a, b, target="cuda")
    result = po.einsum("ij,jk->ik", cupy.asarray(a), cupy.asarray(b)).get()
    assert module_has_wgmma(kernel.compiled.source), "the sm_90a build failed (see the RuntimeWarning)"
    assert _relative_error(result, a.astype(float) @ b.astype(float)) < 2e-3


@needs_gpu
def test_attention_values_take_the_narrow_tma_kernel(monkeypatch):
    """Unforced: f16 ``bhqk,bhkd->bhqd`` with d = 64 (and a ragged q) takes the 128 x 64 TMA
    kernel on Hopper, first call and recorded repeat alike, and is right."""
    import cupy

    if not _hopper():
        pytest.skip("wgmma needs compute capability 9.0")
    einsum_calls.clear()
    taken = note_contraction_choices(monkeypatch, "bn")
    rng = np.random.default_rng(3)
    p, v = (rng.standard_normal(shape).astype(np.float16) for shape in ((4, 16, 500, 512), (4, 16, 512, 64)))
    expected = np.einsum("bhqk,bhkd->bhqd", p.astype(np.float64), v.astype(np.float64))
    for _ in range(2):
        result = po.einsum("bhqk,bhkd->bhqd", cupy.asarray(p), cupy.asarray(v)).get()
        assert _relative_error(result, expected) < 2e-3
    assert taken == [64]  # chosen once: the repeat replays the recorded launch


@needs_gpu
@pytest.mark.parametrize("which", range(len(WGMMA_VARIANTS["hmma"])))
@pytest.mark.parametrize("subscripts, shapes", [WGMMA_PATTERNS[0], WGMMA_PATTERNS[2], WGMMA_PATTERNS[5]])
def test_bf16_wgmma_matches_float64(subscripts, shapes, which, monkeypatch):
    """bf16 operands (torch makes them; CuPy holds their bits as uint16) into f32 sums, as the
    benchmark builds them: the einsum's Scop planned for CUDA (po.einsum has no bf16 on CuPy)."""
    import cupy
    torch = pytest.importorskip("torch")
    from polyopt.targets.cuda import plan

    if not _hopper():
        pytest.skip("wgmma needs compute capability 9.0")
    taken = force_contraction_tile(monkeypatch, which, wgmma_only=True)
    made = plan(po.einsum_kernel(subscripts, *shapes, dtype="bfloat16").scop)
    assert isinstance(made.source, ContractionSource) and "f32.bf16.bf16" in made.source.source
    kernel = CudaKernel(made.scop, made.schedule, made.source)
    generator = torch.Generator(device="cuda").manual_seed(3)
    tensors = [torch.randn(s, device="cuda", generator=generator).to(torch.bfloat16) for s in shapes]
    bits = [cupy.asarray(t.view(torch.int16)).view(cupy.uint16) for t in tensors]
    expected = np.einsum(subscripts, *(t.to(torch.float64).cpu().numpy() for t in tensors))
    out = cupy.zeros(expected.shape, np.float32)
    bound, device, _ = kernel.bind((), {"op0": bits[0], "op1": bits[1], "out": out})
    kernel.launch(bound.params, bound.scalars, device)
    assert taken
    assert _relative_error(out.get(), expected) < 2e-3


@needs_gpu
def test_repeated_tma_calls_follow_their_operands(monkeypatch):
    """The tensor maps hold the operands' addresses: calls on new arrays of the same shapes
    (the recorded launches of po.einsum), the same arrays again (a RepeatedCall), and PyTorch
    tensors each get the maps of their own operands; a ragged size is zero-filled at the edges."""
    import cupy

    if not _hopper():
        pytest.skip("wgmma needs compute capability 9.0")
    taken = note_contraction_choices(monkeypatch, "tma")
    einsum_calls.clear()
    rng = np.random.default_rng(9)
    for m, k, n in ((1536, 512, 1536), (1536, 512, 1536), (1544, 520, 1528)):
        a, b = rng.standard_normal((m, k)).astype(np.float16), rng.standard_normal((k, n)).astype(np.float16)
        expected = a.astype(float) @ b.astype(float)
        da, db = cupy.asarray(a), cupy.asarray(b)
        for _ in range(3):
            assert _relative_error(po.einsum("ij,jk->ik", da, db).get(), expected) < 2e-3
    assert taken and all(taken), taken
    torch = pytest.importorskip("torch")
    for _ in range(2):
        a, b = (torch.randn(s, device="cuda", dtype=torch.float16) for s in ((1536, 512), (1536, 512)))
        result = po.einsum("ij,kj->ik", a, b)
        expected = a.double() @ b.double().T
        assert float(torch.linalg.norm(result.double() - expected) / torch.linalg.norm(expected)) < 2e-3
