"""Half results stored by the contraction kernels themselves
(:func:`polyopt.codegen.contraction_text.half_store`): the f32 output of a contraction of f16
or bf16 operands that its init sets without reading may be handed over in the operands' half
type, and the kernel then rounds each f32 sum once, at its store -- the bits of the f32 result
rounded afterwards, without that f32 result in memory or a second kernel (the ``cp.async``
``mma.sync`` kernels through a tile in shared memory and 16-byte row stores). Without a GPU: which
contractions may, the kernels' text and launch argument, nvcc; on a GPU: every tile kernel of
f16 and bf16 (forced) against its own f32 result rounded, and ``po.einsum``'s paths."""
import subprocess
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

import polyopt as po
from polyopt import einsum_calls
from polyopt.analysis import expr as E
from polyopt.analysis.contraction import ELEMENT
from polyopt.codegen.contraction_text import HALF_STORE_ARGUMENT, half_store
from polyopt.codegen.cuda_wgmma import staging_bytes
from polyopt.errors import ArgumentTypeError
from polyopt.targets import contraction
from polyopt.targets.contraction import launch_layout
from polyopt.targets.cuda import CudaKernel
from polyopt.types import bf16_bits

from conftest import CONTRACTION_TILES, StandInArray, StandInModule, force_contraction_tile, needs_gpu, needs_nvcc

try:
    import ml_dtypes
except ImportError:  # the optional "bf16" extra
    ml_dtypes = None


def _kernel(subscripts: str, shapes, dtype) -> CudaKernel:
    return po.einsum_kernel(subscripts, *shapes, dtype=dtype, target="cuda")


def test_half_operands_into_a_written_only_output_may_store_half():
    f16 = _kernel("ij,jk->ik", [(64, 64), (64, 64)], np.float16)
    assert f16.half_outputs == {"out": po.f16} and f16.compiled.half_store == "f16"
    assert _kernel("bqd,bkd->bqk", [(2, 8, 16), (2, 8, 16)], po.bf16.numpy).half_outputs == {"out": po.bf16}
    for dtype in (np.float32, np.float64):  # f32 and f64 sums are stored as they are
        assert _kernel("ij,jk->ik", [(64, 64), (64, 64)], dtype).half_outputs == {}
    scop, c = f16.scop, f16.compiled.contraction
    assert half_store(scop, c) == "f16"
    # an output the update starts from, or that the init reads (beta * C), holds f32 values
    assert half_store(scop, replace(c, init=None)) is None
    twice = E.binary("*", E.Var(ELEMENT, "scalar", po.f32), E.Const(2.0, po.f32))
    assert half_store(scop, replace(c, init=twice)) is None
    # a statement outside the contraction that reads its output (2mm's tmp, read by the next product)
    reader = SimpleNamespace(name="S9", accesses=(SimpleNamespace(array=c.output),))
    assert half_store(replace(scop, statements=scop.statements + (reader,)), c) is None


def test_the_kernels_take_the_store_type_last_and_the_host_function_passes_f32():
    source = _kernel("ij,jk->ik", [(64, 64), (64, 64)], np.float16).cuda_source
    kernels = source.count('extern "C" __global__ void __launch_bounds__')  # (not the sm_90a probe)
    assert source.count(f"    long {HALF_STORE_ARGUMENT})") + source.count(
        f"    long {HALF_STORE_ARGUMENT},\n    const void *_tmL") == kernels  # before a TMA kernel's maps
    assert "*(__half2 *)_h = __floats2half2_rn(_p[0], _p[1]);" in source  # a whole pair
    assert "for (int _q = 0; _q < 2; _q++) if (_in[_q]) _h[_q * sCn] = __float2half_rn(_p[_q]);" in source
    assert f"if ({HALF_STORE_ARGUMENT}) {{" in source and "*(float2 *)_w = make_float2(_p[0], _p[1]);" in source
    assert ", 0); break;" in source  # the C host function's callers pass the declared f32 output
    bf16 = _kernel("ij,jk->ik", [(64, 64), (64, 64)], po.bf16.numpy).cuda_source
    assert "*(__nv_bfloat162 *)_h = __floats2bfloat162_rn(_p[0], _p[1]);" in bf16
    assert "_h[_q * sCn] = __float2bfloat16_rn(_p[_q]);" in bf16
    assert HALF_STORE_ARGUMENT not in _kernel("ij,jk->ik", [(64, 64), (64, 64)], np.float32).cuda_source
    # the cp.async mma.sync kernels stage a half tile in their ring and store rows in 16-byte
    # vectors; so do the warp-specialized wgmma kernels with room beside theirs
    staged = _kernel("ij,jk->ik", [(64, 64), (64, 64)], np.float16).compiled
    assert source.count(f"if ({HALF_STORE_ARGUMENT} && sCn == 1) {{") == \
        sum(v.asynchronous and not v.wgmma or staging_bytes(v) > 0 for _, v in staged.variants) == 4 + 3
    assert "*(uint4 *)_d = *(const uint4 *)_s;" in source
    # and a float32 output where the tile fits the ring too (not 128 x 128 halves' ring)
    assert source.count("} else if (!_Ch && sCn == 1) {") == 3
    # a tile lying whole in the output stages and stores without element tests
    assert source.count("if (_inside) {  /* no element outside the output */") == 4 + 3 + 3
    assert source.count("if (_inside && ((unsigned long long)_d0 & 15) == 0 && sCm % 8 == 0) {") == 4 + 3


def test_the_asynchronous_half_kernels_read_their_fragments_with_ldmatrix():
    """The ``cp.async`` ``mma.sync`` kernels on halves read each A and B fragment from the ring
    with ``ldmatrix`` (``.trans`` where the tile holds the operand's M or N run contiguous:
    ``kj`` and ``ki`` below); the register-staged ones keep their 32-bit reads."""
    def loads(subscripts: str) -> tuple[int, int, int]:
        source = _kernel(subscripts, [(64, 64), (64, 64)], np.float16).cuda_source
        return (source.count("pl_ldsm_x4(_a[_i][0]") + source.count("pl_ldsm_x4_t(_a[_i][0]"),
                source.count("pl_ldsm_x4_t(_a[_i][0]"), source.count("pl_ldsm_x4_t(_b[_j][0]"))
    assert loads("ik,jk->ij") == (4, 0, 0)  # both tiles K-major, in each of the 4 asynchronous kernels
    assert loads("ik,kj->ij") == (4, 0, 4)  # B's N run contiguous
    assert loads("ki,kj->ij") == (4, 4, 4)


def test_the_launch_says_which_type_the_output_array_holds():
    """:func:`polyopt.targets.contraction.launch` passes 1 after the layout's arguments for an
    output array of two-byte elements, 0 for float32; one choice per output type."""
    compiled = _kernel("ij,jk->ik", [(64, 64), (64, 64)], np.float16)
    source = compiled.compiled
    params = {"N_i": 96, "N_j": 80, "N_k": 72}
    launched = []
    for dtype in (np.float16, np.float32, np.float16):
        arrays = {"op0": StandInArray((96, 80), 256, 2), "op1": StandInArray((80, 72), 1 << 20, 2),
                  "out": StandInArray((96, 72), 1 << 22, np.dtype(dtype).itemsize)}
        arrays["out"].dtype = np.dtype(dtype)
        module = StandInModule(leading=6)
        values = [np.int64(v) for v in params.values()] + [arrays["op0"], arrays["op1"], arrays["out"]]
        contraction.launch(source, module, values, params, arrays, 132)
        (name, _, args), = module.launched
        variant = dict(source.variants)[name]
        layout = launch_layout(source.contraction, variant, {"i_i": 96, "i_j": 80, "i_k": 72},
                               {name: a.shape for name, a in arrays.items()})
        assert args[:-1] == tuple(layout.arguments)  # the layout's arguments, then the store type
        launched.append(args[-1])
    assert launched == [1, 0, 1]


@needs_nvcc
def test_nvcc_builds_the_half_storing_kernels(tmp_path):
    for name, dtype in (("f16", np.float16), ("bf16", po.bf16.numpy)):
        text = _kernel("bij,bjk->bik", [(2, 64, 32), (2, 32, 48)], dtype).cuda_source
        (tmp_path / f"{name}.cu").write_text(text)
    result = subprocess.run(["nvcc", "-arch=sm_90a", "-c", "f16.cu", "bf16.cu"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]


# ----- on a GPU ----------------------------------------------------------------------------------

#: Ragged sizes, transposed operands, a batch.
HALF_PATTERNS = [("ij,jk->ik", [(197, 136), (136, 328)]),
                 ("ik,jk->ij", [(130, 72), (203, 72)]),
                 ("bhqd,bhkd->bhqk", [(2, 3, 130, 64), (2, 3, 90, 64)])]


@needs_gpu
@pytest.mark.parametrize("half", ["f16", "bf16"])
@pytest.mark.parametrize("which", CONTRACTION_TILES)
@pytest.mark.parametrize("subscripts, shapes", HALF_PATTERNS)
def test_each_kernel_stores_its_f32_sums_rounded_once(subscripts, shapes, which, half, monkeypatch):
    """The same kernel launched with a float32 and with a half output array: the half result is
    the float32 one rounded to nearest even, bit for bit (f16: CuPy's ``astype``; bf16: the bits
    of :func:`polyopt.types.bf16_bits`)."""
    import cupy
    if half == "bf16" and ml_dtypes is None:
        pytest.skip("ml_dtypes (the bf16 extra) is not installed")
    taken = force_contraction_tile(monkeypatch, which)
    dtype = np.float16 if half == "f16" else po.bf16.numpy
    compiled = _kernel(subscripts, shapes, dtype)
    rng = np.random.default_rng(which)
    host = [rng.standard_normal(s).astype(np.float32).astype(dtype) for s in shapes]
    operands = [cupy.asarray(a.view(np.uint16) if half == "bf16" else a) for a in host]
    out_shape = np.einsum(subscripts, *(np.empty(s, np.int8) for s in shapes)).shape
    wide = cupy.full(out_shape, np.nan, np.float32)
    compiled(*operands, wide)
    narrow = cupy.zeros(out_shape, np.float16 if half == "f16" else np.uint16)
    compiled(*operands, narrow)
    assert len(taken) == 2 and taken[0] == taken[1]
    expected = wide.astype(np.float16) if half == "f16" else bf16_bits(wide, cupy)
    cupy.testing.assert_array_equal(narrow, expected)
    exact = np.einsum(subscripts, *(a.astype(np.float64) for a in host))
    assert np.linalg.norm(wide.get() - exact) <= 1e-5 * np.linalg.norm(exact)


@needs_gpu
def test_a_half_output_of_another_type_is_refused():
    """Only the operands' half type (or float32) is taken: a float16 output of a bf16
    contraction, a uint16 one of an f16 contraction, float64 anywhere are refused by name."""
    import cupy
    f16 = _kernel("ij,jk->ik", [(64, 64), (64, 64)], np.float16)
    a = cupy.ones((16, 8), np.float16)
    b = cupy.ones((8, 12), np.float16)
    for wrong in (np.uint16, np.float64, np.int16):
        with pytest.raises(ArgumentTypeError, match="array 'out' has dtype"):
            f16(a, b, cupy.empty((16, 12), wrong))
    bf16 = _kernel("ij,jk->ik", [(64, 64), (64, 64)], po.bf16.numpy)
    with pytest.raises(ArgumentTypeError, match="array 'out' has dtype"):
        bf16(a.view(np.uint16), b.view(np.uint16), cupy.empty((16, 12), np.float16))
    out = cupy.empty((16, 12), np.float16)
    f16(a, b, out)
    assert bool((out == 8).all())
    host = np.empty((16, 12), np.float16)  # a numpy output: copied back in its type
    f16(a.get(), b.get(), host)
    assert (host == 8).all()


@needs_gpu
def test_po_einsum_half_results_come_straight_from_the_kernel():
    """po.einsum's float16 result on CuPy arrays, its repeats (recorded with no rounding
    step), ``out=`` (written in place) and the PyTorch f16/bf16 paths: each the bits of the
    kernel's float32 sums rounded once."""
    import cupy
    rng = np.random.default_rng(3)
    A, B = (rng.standard_normal(s).astype(np.float16) for s in ((96, 200), (200, 80)))
    a, b = cupy.asarray(A), cupy.asarray(B)
    wide = po.einsum("ik,kj->ij", a.astype(np.float32), b.astype(np.float32))
    first = po.einsum("ik,kj->ij", a, b)
    again = po.einsum("ik,kj->ij", a, b)
    assert first.dtype == np.float16
    cupy.testing.assert_array_equal(first, again)
    np.testing.assert_allclose(first.get().astype(np.float32), wide.get(), rtol=2 ** -10, atol=1e-3)
    key = einsum_calls.call_key(("ik,kj->ij", a, b), None, None, "K", "safe", "greedy", None, None) + ("exact",)
    call = einsum_calls.recorded(key)
    assert isinstance(call, einsum_calls.DeviceCall) and call.final is None and call.dtype == np.float16
    out = cupy.empty((96, 80), np.float16)
    assert po.einsum("ik,kj->ij", a, b, out=out) is out
    cupy.testing.assert_array_equal(out, first)
    torch = pytest.importorskip("torch")
    ta, tb = torch.as_tensor(a, device="cuda"), torch.as_tensor(b, device="cuda")
    for _ in range(2):  # the first call, then its TorchCall
        result = po.einsum("ik,kj->ij", ta, tb)
        assert result.dtype == torch.float16 and torch.equal(result, torch.as_tensor(first, device="cuda"))
    if ml_dtypes is None:
        return
    ba, bb = ta.to(torch.bfloat16), tb.to(torch.bfloat16)
    wide = po.einsum("ik,kj->ij", ba.float(), bb.float())
    results = [po.einsum("ik,kj->ij", ba, bb) for _ in range(2)]  # the first call, then its TorchCall
    assert all(r.dtype == torch.bfloat16 for r in results) and torch.equal(*results)
    assert (results[0].float() - wide).abs().max().item() <= wide.abs().max().item() * 2 ** -8
