"""Half-precision element types f16 and bf16: each operation computes in f32 and rounds to the
half type (numpy's float16 ufuncs, CUDA's __half operators), so CPU kernels match numpy float16
references computed the same way, operation by operation; f16 with f32 is f32. bf16 runs on
ml_dtypes' bfloat16 arrays where that package is installed, else on raw uint16 bits. CUDA
sources with half arrays build with nvcc (skipped without it)."""
import shutil
import subprocess
import sys

import numpy as np
import pytest

import polyopt as po
from polyopt import bf16, f16, f32, f64, i64
from polyopt.analysis import expr as E
from polyopt.types import as_dtype, bf16_bits, bf16_values, promote, u16

from conftest import needs_gpu

try:
    import ml_dtypes
except ImportError:  # the optional "bf16" extra
    ml_dtypes = None

needs_ml_dtypes = pytest.mark.skipif(ml_dtypes is None, reason="ml_dtypes (the bf16 extra) is not installed")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")


@po.kernel
def gemm16(A: f16["N", "K"], B: f16["K", "M"], C: f16["N", "M"]):
    for i in range(N):
        for j in range(M):
            for k in range(K):
                C[i, j] += A[i, k] * B[k, j]


@po.kernel
def stencil16(A: f16["T", "N"]):
    for t in range(1, T):
        for i in range(1, N - 1):
            A[t, i] = (A[t - 1, i - 1] + A[t - 1, i] + A[t - 1, i + 1]) * 0.333


@po.kernel
def elementwise(X: f16["N"], Y: f32["N"], Z: f16["N"], W: f32["N"]):
    for i in range(N):
        Z[i] = sqrt(X[i] * X[i] + 1.5) - X[i] / 3.0 if X[i] > 0 else -X[i]
        W[i] = X[i] * Y[i]


def _halves(shape, seed, dtype=np.float16):
    return np.random.default_rng(seed).uniform(-2, 2, size=shape).astype(dtype)


def test_half_types_are_dtypes_and_annotations():
    assert po.f16 is f16 and po.bf16 is bf16 and f16.numpy == np.float16
    assert f16["N", "M"].dtype is f16 and f16.is_half and bf16.is_half and not f32.is_half
    assert promote(f16, f32) is f32 and promote(f16, bf16) is f32 and promote(f16, f16) is f16
    assert as_dtype(np.float16) is f16 and as_dtype(np.uint16) is u16 and as_dtype("bf16") is bf16
    # a weak literal rounds to the half type; the operation runs in f32 and rounds back
    product = E.binary("*", E.Access("A", (), f16), E.Const(0.1, f64, True))
    assert product.dtype is f16 and isinstance(product, E.Cast) and product.operand.dtype is f32
    assert product.operand.rhs.value == float(np.float16(0.1))


def test_gemm_rounds_each_update_like_numpy():
    A, B = _halves((13, 40), 0), _halves((40, 11), 1)
    C = np.zeros((13, 11), np.float16)
    gemm16(A, B, C)
    expected = np.zeros_like(C)
    for k in range(A.shape[1]):  # numpy float16: each product and each sum rounded
        expected = expected + A[:, k:k + 1] * B[k:k + 1, :]
    np.testing.assert_array_equal(C, expected)


def test_stencil_and_elementwise_match_numpy_float16():
    A = _halves((6, 50), 2)
    expected = A.copy()
    stencil16(A)
    for t in range(1, 6):
        expected[t, 1:-1] = (expected[t - 1, :-2] + expected[t - 1, 1:-1] + expected[t - 1, 2:]) * np.float16(0.333)
    np.testing.assert_array_equal(A, expected)
    X, Y = _halves(100, 3), _halves(100, 4, np.float32)
    Z, W = np.zeros(100, np.float16), np.zeros(100, np.float32)
    elementwise(X, Y, Z, W)
    positive = np.sqrt(X * X + np.float16(1.5)) - X / np.float16(3.0)
    np.testing.assert_array_equal(Z, np.where(X > 0, positive, -X))
    np.testing.assert_array_equal(W, X * Y)  # f16 with f32 computes in f32


def test_conversions_from_f64_round_once():
    """f64 to a half type is correctly rounded (through f32 rounded to odd, not twice to
    nearest), without compiler-rt's __truncdfhf2 in the JIT."""
    @po.kernel
    def narrow(X: f64["N"], H: f16["N"], I: i64["N"]):
        for i in range(N):
            H[i] = X[i]
            I[i] = H[i]

    # halfway between two halves in f64, but not in f32: rounding twice would go wrong
    ties = 1.0 + 2.0 ** -11 + np.array([2.0 ** -40, -(2.0 ** -40)])
    X = np.concatenate([ties, np.random.default_rng(5).standard_normal(200) * 1000, [1e300, -1e-300, np.nan]])
    H, I = np.zeros(X.size, np.float16), np.zeros(X.size, np.int64)
    narrow(X, H, I)
    with np.errstate(over="ignore"):  # 1e300 becomes inf
        np.testing.assert_array_equal(H, X.astype(np.float16))
    finite = np.isfinite(H)
    np.testing.assert_array_equal(I[finite], H[finite].astype(np.int64))


_AXPY_SOURCE = """
def axpy_bf16(X: bf16["N"], Y: bf16["N"]):
    for i in range(N):
        Y[i] = X[i] * 0.1 + Y[i]
"""
axpy_bf16 = po.kernel_from_source(_AXPY_SOURCE)


def _bf16_reference(X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """``X * 0.1 + Y`` on bf16 values (float32), each operation rounded to bf16."""
    rounded = lambda v: bf16_values(bf16_bits(v))  # noqa: E731
    return rounded(rounded(X * rounded(0.1)) + Y)


@needs_ml_dtypes
def test_bf16_arrays_of_ml_dtypes():
    X, Y = _halves(300, 6, ml_dtypes.bfloat16), _halves(300, 7, ml_dtypes.bfloat16)
    expected = _bf16_reference(X.astype(np.float32), Y.astype(np.float32))
    interpreted = Y.copy()
    axpy_bf16(X, Y)
    np.testing.assert_array_equal(Y.astype(np.float32), expected)
    po.interpret(axpy_bf16, X, interpreted)
    np.testing.assert_array_equal(interpreted, Y)


def test_interpreter_agrees_on_f16():
    A, B = _halves((6, 9), 15), _halves((9, 5), 16)
    compiled, interpreted = np.zeros((6, 5), np.float16), np.zeros((6, 5), np.float16)
    gemm16(A, B, compiled)
    po.interpret(gemm16, A, B, interpreted)
    np.testing.assert_array_equal(compiled, interpreted)


def test_bf16_as_uint16_bits_without_ml_dtypes():
    """Without ml_dtypes, bf16 arrays are uint16 arrays of the bits (a fresh interpreter that
    cannot import it): the same kernel gives the same bits as the reference."""
    program = f"""
import sys
sys.modules["ml_dtypes"] = None
import numpy as np
import polyopt as po
from polyopt.types import bf16, bf16_bits, bf16_values, as_dtype, u16
assert bf16.numpy == np.uint16 and as_dtype(np.uint16) is u16
kernel = po.kernel_from_source('''{_AXPY_SOURCE}''')
X, Y = (bf16_bits(np.random.default_rng(seed).uniform(-2, 2, 300)) for seed in (6, 7))
rounded = lambda v: bf16_values(bf16_bits(v))
expected = bf16_bits(rounded(rounded(bf16_values(X) * rounded(0.1)) + bf16_values(Y)))
kernel(X, Y)
assert (Y == expected).all()
try:
    po.interpret(kernel, X, Y)
except TypeError as error:
    assert "ml_dtypes" in str(error)
else:
    raise AssertionError("the interpreter took bf16 bits")
"""
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]


def test_bf16_bits_round_to_nearest_even():
    values = np.array([1.0, 1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, -3.5, 1e-40, np.inf], np.float32)
    assert list(bf16_values(bf16_bits(values))) == [1.0, 1.0, 1.0 + 2 * 2.0 ** -7, -3.5, bf16_values(bf16_bits(1e-40)), np.inf]
    assert np.isnan(bf16_values(bf16_bits(np.nan)))
    if ml_dtypes is not None:
        sample = np.random.default_rng(8).standard_normal(1000).astype(np.float32)
        np.testing.assert_array_equal(bf16_bits(sample), sample.astype(ml_dtypes.bfloat16).view(np.uint16))


def test_half_scalars_and_integer_uses_are_refused():
    with pytest.raises(po.FrontendError, match="half type f16: declare it f32"):
        po.compile(po.kernel_from_source("def scale(alpha: f16, A: f16['N']):\n"
                                         "    for i in range(N):\n        A[i] *= alpha\n"))
    with pytest.raises(po.FrontendError, match="half type f16: declare it f32"):
        po.from_c("void k(int n, _Float16 alpha, _Float16 A[n]) {\n#pragma scop\n"
                  "  for (int i = 0; i < n; i++)\n    A[i] = alpha * A[i];\n#pragma endscop\n}\n")
    with pytest.raises(po.FrontendError, match="integer expression is needed here, not a f16 value"):
        po.compile(po.kernel_from_source("def gather(A: f16['N'], B: i64['N']):\n"
                                         "    for i in range(N):\n        B[A[i]] = 1\n"))


def test_python_operators_on_halves_match_numpy():
    kernel = po.kernel_from_source(
        "def ops(X: f16['N'], M: f16['N'], D: f16['N'], L: f16['N'], A: f16['N'], I: i64['N']):\n"
        "    for i in range(N):\n"
        "        M[i] = X[i] % 0.7\n        D[i] = X[i] // 0.3\n        L[i] = min(X[i], 0.5)\n"
        "        A[i] = abs(X[i]) ** 2\n        I[i] = int(X[i] * 10.0)\n")
    X = _halves(200, 12)
    M, D, L, A = (np.zeros(200, np.float16) for _ in range(4))
    I = np.zeros(200, np.int64)
    kernel(X, M, D, L, A, I)
    np.testing.assert_array_equal(M, X % np.float16(0.7))
    np.testing.assert_array_equal(D, X // np.float16(0.3))
    np.testing.assert_array_equal(L, np.minimum(X, np.float16(0.5)))
    np.testing.assert_array_equal(A, np.abs(X) ** 2)
    np.testing.assert_array_equal(I, (X * np.float16(10.0)).astype(np.int64))


def test_c_frontend_reads_float16():
    source = """
void k(int n, _Float16 A[n], __fp16 B[n]) {
#pragma scop
  for (int i = 1; i < n; i++)
    B[i] = A[i] * A[i - 1] + 0.1f;
#pragma endscop
}
"""
    (scop_kernel,) = po.from_c(source)
    assert {a.dtype for a in scop_kernel.scop.arrays.values()} == {f16}
    A, B = _halves(20, 9), np.zeros(20, np.float16)
    po.compile(scop_kernel.scop)(A=A, B=B)
    np.testing.assert_array_equal(B[1:], ((A[1:] * A[:-1]).astype(np.float32) + np.float32(0.1)).astype(np.float16))


def test_einsum_float16_sums_in_f32_and_rounds_once():
    """po.einsum on float16: products and sums in f32, the result rounded to float16 once
    (numpy's matmul; numpy's einsum does so where its inner loop is the sum, else it rounds
    every partial sum)."""
    A, B = _halves((30, 500), 10), _halves((500, 20), 11)
    C = po.einsum("ik,kj->ij", A, B)
    assert C.dtype == np.float16
    exact = (A.astype(np.float64) @ B.astype(np.float64))
    np.testing.assert_allclose(C.astype(np.float64), exact, rtol=2 ** -10, atol=2 ** -10 * np.abs(exact).max())
    np.testing.assert_allclose(C, A @ B, rtol=2 ** -10)  # numpy's matmul: the same, up to the order of the f32 sums
    numpy_einsum = np.einsum("ik,kj->ij", A, B)  # rounds its partial sums: further off
    assert np.abs(numpy_einsum.astype(np.float64) - exact).max() >= np.abs(C.astype(np.float64) - exact).max()
    np.testing.assert_allclose(po.einsum("ij,j->i", A, B[:, 0]), np.einsum("ij,j->i", A, B[:, 0]), rtol=2 ** -9, atol=2 ** -6)
    kernel = po.einsum_kernel("ik,kj->ij", A, B)  # the operands in f16, the sums in f32
    assert [a.dtype for a in kernel.scop.arrays.values()] == [f16, f16, f32]


@needs_ml_dtypes
def test_einsum_bfloat16_sums_in_f32():
    A, B = _halves((7, 300), 13, ml_dtypes.bfloat16), _halves((300, 5), 14, ml_dtypes.bfloat16)
    C = po.einsum("ik,kj->ij", A, B)
    assert C.dtype == ml_dtypes.bfloat16
    expected = (A.astype(np.float32) @ B.astype(np.float32)).astype(ml_dtypes.bfloat16)
    np.testing.assert_allclose(C.astype(np.float32), expected.astype(np.float32), rtol=2 ** -7)


@needs_nvcc
def test_nvcc_builds_half_kernels(tmp_path):
    """CUDA kernels on __half and __nv_bfloat16 arrays: arithmetic through float, the headers
    included; each builds with nvcc."""
    @po.kernel
    def mixed(X: bf16["N"], Y: f16["N"], Z: f32["N"]):
        for i in range(1, N - 1):
            Y[i] = (X[i - 1] + X[i] + X[i + 1]) * 0.333 if X[i] > 0 else -Y[i]
            Z[i] = Y[i] * X[i]

    files = []
    sources = [po.cuda_source(kernel) for kernel in (gemm16, stencil16, elementwise, axpy_bf16, mixed)]
    sources.append(po.einsum_kernel("ik,kj->ij", (8, 9), (9, 4), dtype=np.float16, target="cuda").cuda_source)
    for k, source in enumerate(sources):
        assert "#include <cuda_fp16.h>" in source or "#include <cuda_bf16.h>" in source
        (tmp_path / f"half{k}.cu").write_text(source)
        files.append(f"half{k}.cu")

    @po.kernel
    def single(A: f32["N"]):
        for i in range(N):
            A[i] = A[i] * 2.0

    assert "cuda_fp16.h" not in po.cuda_source(single)  # kernels without half arrays: no headers
    result = subprocess.run(["nvcc", "-arch=sm_90", "-c", *files], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]


def test_f16_on_a_host_without_f16c():
    """Without the F16C instructions LLVM converts half values by calling libgcc's
    ``__truncsfhf2`` and ``__extendhfsf2``, which the JIT links (a fresh interpreter whose
    target machine leaves F16C and AVX out; no disk cache, whose key has the host's features)."""
    program = """
import llvmlite.binding as llvm
import numpy as np
import polyopt.codegen.llvm as L

def plain_x86_64():
    L._initialize()
    features = llvm.get_host_cpu_features()
    for name in list(features):
        if name == "f16c" or name.startswith("avx") or name == "fma":
            features[name] = False
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(cpu="x86-64", features=features.flatten(), opt=3, jit=True)

L._new_target_machine = plain_x86_64
import os
os.environ["POLYOPT_CACHE"] = "0"
import polyopt as po
kernel = po.kernel_from_source("def f(A: f16['N'], B: f16['N']):\\n    for i in range(N):\\n        B[i] = A[i] * 0.1\\n")
A, B = np.arange(50, dtype=np.float16), np.zeros(50, np.float16)
po.compile(kernel)(A, B)
assert (B == A * np.float16(0.1)).all()
"""
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]


@needs_gpu
def test_gpu_half_kernels_match_the_cpu():
    """The CUDA kernels (NVRTC, cuda_fp16.h/cuda_bf16.h) compute what the CPU computes: every
    operation in float, rounded to the half type; bf16 data travels as its uint16 bits."""
    A, B = _halves((13, 40), 0), _halves((40, 11), 1)
    on_cpu, on_gpu = np.zeros((13, 11), np.float16), np.zeros((13, 11), np.float16)
    gemm16(A, B, on_cpu)
    po.compile(gemm16, target="cuda")(A, B, on_gpu)
    np.testing.assert_array_equal(on_gpu, on_cpu)
    S = _halves((6, 50), 2)
    S_gpu = S.copy()
    stencil16(S)
    po.compile(stencil16, target="cuda")(S_gpu)
    np.testing.assert_array_equal(S_gpu, S)
    X, Y = _halves(100, 3), _halves(100, 4, np.float32)
    cpu = [np.zeros(100, np.float16), np.zeros(100, np.float32)]
    gpu = [np.zeros(100, np.float16), np.zeros(100, np.float32)]
    elementwise(X, Y, *cpu)
    po.compile(elementwise, target="cuda")(X, Y, *gpu)
    np.testing.assert_array_equal(gpu[0], cpu[0])
    np.testing.assert_allclose(gpu[1], cpu[1], rtol=1e-7)
    if ml_dtypes is not None:
        bx, by = _halves(300, 6, ml_dtypes.bfloat16), _halves(300, 7, ml_dtypes.bfloat16)
        by_gpu = by.copy()
        axpy_bf16(bx, by)
        po.compile(axpy_bf16, target="cuda")(bx, by_gpu)
        np.testing.assert_array_equal(by_gpu, by)


@needs_gpu
def test_gpu_takes_torch_bfloat16_tensors_and_float16_einsums():
    torch = pytest.importorskip("torch")
    import cupy

    X = torch.linspace(-2, 2, 300, dtype=torch.bfloat16, device="cuda")
    Y = torch.ones(300, dtype=torch.bfloat16, device="cuda")
    expected = ((X.float() * torch.tensor(0.1, dtype=torch.bfloat16).float()).bfloat16().float() + 1).bfloat16()
    po.compile(axpy_bf16, target="cuda")(X, Y)
    assert torch.equal(Y, expected)
    assert po.einsum("i,i->", X, Y).dtype == torch.bfloat16  # more in test_bf16_einsum_on_torch_tensors
    A, B = _halves((30, 200), 17), _halves((200, 20), 18)
    C = po.einsum("ik,kj->ij", cupy.asarray(A), cupy.asarray(B))
    assert C.dtype == np.float16
    np.testing.assert_allclose(cupy.asnumpy(C), po.einsum("ik,kj->ij", A, B), rtol=2 ** -10)


@needs_gpu
@needs_ml_dtypes
@pytest.mark.parametrize("subscripts, shapes", [("ik,kj->ij", [(30, 200), (200, 20)]),  # mma.sync / small
                                                ("ik,kj->ij", [(512, 512), (512, 512)]),  # tensor-core tiles
                                                ("bhqd,bhkd->bhqk", [(2, 3, 64, 32), (2, 3, 48, 32)]),
                                                ("i,i->", [(300,), (300,)]),
                                                ("ij,jk,kl->il", [(7, 9), (9, 5), (5, 3)])])  # a float32 temporary
def test_bf16_einsum_on_torch_tensors(subscripts, shapes):
    """bf16 tensors: each element widened to float32, products summed in float32, the result
    rounded to bf16 once -- within one bf16 rounding of torch's float32 einsum of the same
    values (TF32 off); a bf16 tensor back, or ``out`` written."""
    torch = pytest.importorskip("torch")
    torch.backends.cuda.matmul.allow_tf32 = False
    generator = torch.Generator(device="cuda").manual_seed(3)
    ops = [torch.randn(shape, device="cuda", generator=generator).to(torch.bfloat16) for shape in shapes]
    exact = torch.einsum(subscripts, *(op.double() for op in ops))
    result = po.einsum(subscripts, *ops)
    assert isinstance(result, torch.Tensor) and result.dtype == torch.bfloat16 and result.device == ops[0].device
    scale = exact.abs().max().item() or 1.0
    assert (result.double() - exact).abs().max().item() <= scale * 2 ** -7
    out = torch.empty_like(result)
    assert po.einsum(subscripts, *ops, out=out) is out and torch.equal(out, result)
    again = po.einsum(subscripts, *ops)
    assert torch.equal(again, result)


@needs_gpu
def test_gpu_bf16_rounding_kernel_matches_the_numpy_steps():
    """The one-kernel rounding of CuPy float32 arrays to bf16 bits gives numpy's bits for every
    kind of value: random bit patterns (NaNs, infinities, subnormals among them), ties, the
    largest finite values and signed zeros."""
    import cupy
    patterns = np.random.default_rng(11).integers(0, 2 ** 32, 200_000, dtype=np.uint64).astype(np.uint32)
    special = np.array([0x00000000, 0x80000000, 0x3F808000, 0x3F818000, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000,
                        0xFF800000, 0x7FC00000, 0xFFFFFFFF, 0x00000001, 0x807FFFFF, 0x7F7F8000], np.uint32)
    values = np.concatenate([patterns, special]).view(np.float32)
    device = bf16_bits(cupy.asarray(values), cupy)
    assert device.dtype == np.uint16
    np.testing.assert_array_equal(cupy.asnumpy(device), bf16_bits(values))


@needs_gpu
def test_repeated_gpu_float16_einsum_replays_with_new_values():
    """A repeated float16 einsum on CuPy arrays replays the recorded launches, whose kernel
    stores the float32 sums rounded to float16 as the first call's did: results for fresh
    operands match a float64 einsum within float16's rounding, and equal the full path's bits."""
    import cupy
    from polyopt import einsum_calls
    rng = np.random.default_rng(12)
    for _ in range(3):
        A, B = (rng.standard_normal(shape).astype(np.float16) for shape in ((48, 200), (200, 40)))
        operands = ("ik,kj->ij", cupy.asarray(A), cupy.asarray(B))
        C = po.einsum(*operands)
        assert C.dtype == np.float16 and C.flags.c_contiguous
        exact = A.astype(np.float64) @ B.astype(np.float64)
        np.testing.assert_allclose(cupy.asnumpy(C).astype(np.float64), exact, rtol=2 ** -10, atol=2 ** -10 * np.abs(exact).max())
        full = cupy.empty((48, 40), np.float16)  # out= takes the full path
        po.einsum("ik,kj->ij", cupy.asarray(A), cupy.asarray(B), out=full)
        cupy.testing.assert_array_equal(C, full)
    key = einsum_calls.call_key(operands, None, None, "K", "safe", "greedy", None, None) + ("exact",)
    call = einsum_calls.recorded(key)
    assert isinstance(call, einsum_calls.DeviceCall) and call.final is None  # no second kernel


@needs_gpu
@needs_ml_dtypes
def test_repeated_bf16_einsum_on_torch_tensors_replays_with_new_values():
    """Repeats of a bf16 einsum on PyTorch tensors (fresh tensors each time, a float32
    temporary in the three-operand case) give the full path's bits: the result of the same
    call with ``out=``, which never replays."""
    torch = pytest.importorskip("torch")
    generator = torch.Generator(device="cuda").manual_seed(5)
    for subscripts, shapes in (("ik,kj->ij", [(64, 96), (96, 32)]), ("ij,jk,kl->il", [(7, 9), (9, 5), (5, 3)])):
        for _ in range(3):
            ops = [torch.randn(shape, device="cuda", generator=generator).to(torch.bfloat16) for shape in shapes]
            result = po.einsum(subscripts, *ops)
            out = torch.empty_like(result)
            po.einsum(subscripts, *ops, out=out)
            assert result.dtype == torch.bfloat16 and torch.equal(result, out)


@needs_gpu
@needs_ml_dtypes
def test_bf16_einsum_with_other_types_and_refusals():
    """A bf16 tensor with a float32 one computes in float32 (numpy's promotion with ml_dtypes);
    a bf16 out for float32 operands, and bf16 numpy arrays on the GPU, are refused by name."""
    torch = pytest.importorskip("torch")
    a = torch.randn(8, 6, device="cuda").to(torch.bfloat16)
    b = torch.randn(6, 5, device="cuda")
    mixed = po.einsum("ij,jk->ik", a, b)
    assert mixed.dtype == torch.float32
    torch.testing.assert_close(mixed, a.float() @ b, rtol=1e-5, atol=1e-5)
    with pytest.raises(TypeError, match="bfloat16 out"):
        po.einsum("ij,jk->ik", b.T.contiguous(), b, out=torch.empty(5, 5, device="cuda", dtype=torch.bfloat16))
    host = np.ones((4, 4), ml_dtypes.bfloat16)
    with pytest.raises(po.TargetUnavailableError, match="bfloat16 numpy arrays"):
        po.einsum("ij,jk->ik", host, host, target="cuda")


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")
def test_gcc_builds_the_c_of_f16_kernels(tmp_path):
    """The readable C names half types as CUDA does, typedefs of gcc's _Float16 (gcc 12 on)."""
    for kernel in (gemm16, stencil16, elementwise):
        path = tmp_path / f"{kernel.name}.c"
        path.write_text(po.compile(kernel).c_source)
        result = subprocess.run(["gcc", "-O2", "-c", str(path), "-o", str(path.with_suffix(".o"))],
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr[-3000:]


@needs_nvcc
def test_nvcc_builds_the_suite_in_f16(tmp_path):
    """Every suite kernel with its arrays made f16 (scalars stay f32, ``with_dtype``) builds
    with nvcc."""
    names = po.suite.names()
    for name in names:
        kernel = po.suite.get(name).kernel.with_dtype("f16")
        assert all(a.dtype is f16 for a in kernel.scop.arrays.values() if a.dtype.is_float and not a.local)
        assert all(a.dtype is f32 for a in kernel.scop.arguments if a.kind == "scalar" and a.dtype.is_float)
        (tmp_path / f"{name}.cu").write_text(po.cuda_source(kernel))
    result = subprocess.run(["nvcc", "-arch=sm_90", "-c", "-w", *(f"{name}.cu" for name in names)], cwd=tmp_path,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    assert len(list(tmp_path.glob("*.o"))) == len(names)
