"""po.einsum on the GPU (target="cuda" or CuPy operands): same results, dtypes, out= and casting
as numpy.einsum; CuPy in, CuPy out. Without CuPy or a GPU: TargetUnavailableError, and the CUDA
source still compiles (GPU tests skip with the reason)."""
import shutil
import subprocess

import numpy as np
import pytest

import polyopt as po

from conftest import needs_gpu, needs_no_gpu


def test_cuda_source_of_an_einsum_needs_no_gpu():
    kernel = po.einsum_kernel("bij,bjk->bik", (2, 3, 4), (2, 4, 5), target="cuda")
    assert "__global__ void" in kernel.cuda_source
    assert {"N_b", "N_i", "N_j", "N_k"} == set(kernel.scop.params)
    assert po.einsum_kernel("bij,bjk->bik", (7, 3, 4), (7, 4, 9), target="cuda") is kernel
    with pytest.raises(ValueError, match="unknown target"):
        po.einsum_kernel("ij->i", (2, 2), target="gpu")
    # a 0-d result is a pointer to its one element; the dot product's sum runs on a warp
    dot = po.einsum_kernel("i,i->", (9,), (9,), target="cuda").cuda_source
    assert "_s0 = _s0 + op0[c0] * op1[c0];" in dot and "out[0] = out[0] + _s0;" in dot


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_nvcc_builds_einsum_kernels_of_every_kind(tmp_path):
    """Real, complex (as (real, imaginary) pairs), batched, transposed and multi-step einsums:
    the CUDA source of each builds with nvcc (a GPU runs them in test_cupy_operands_match_numpy)."""
    kinds = [("ij,jk->ik", [(3, 4), (4, 5)], np.float64), ("ij,jk->ik", [(3, 4), (4, 5)], np.complex128),
             ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)], np.complex64), ("ijk->kj", [(2, 3, 4)], np.complex128),
             ("ij,jk,kl->il", [(3, 4), (4, 5), (5, 2)], np.float32), ("ij,ij->i", [(3, 4), (3, 4)], np.int64)]
    files = []
    for k, (subscripts, shapes, dtype) in enumerate(kinds):
        kernel = po.einsum_kernel(subscripts, *shapes, dtype=dtype, target="cuda")
        (tmp_path / f"einsum{k}.cu").write_text(kernel.cuda_source)
        files.append(f"einsum{k}.cu")
    result = subprocess.run(["nvcc", "-arch=sm_90", "-c", *files], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    assert len(list(tmp_path.glob("*.o"))) == len(kinds)


@needs_no_gpu
def test_cuda_target_without_gpu_is_a_clear_error():
    with pytest.raises(po.TargetUnavailableError, match="target 'cuda'"):
        po.einsum("ij->i", np.ones((2, 2)), target="cuda")
    np.testing.assert_array_equal(po.einsum("ij->i", np.ones((2, 2))), [2.0, 2.0])


def _operand(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    values = rng.integers(-3, 4, size=shape)
    if np.dtype(dtype).kind == "c":
        values = values + 1j * rng.integers(-3, 4, size=shape)
    return (values > 0 if dtype == np.bool_ else values).astype(dtype)


CASES = [
    ("ij,jk->ik", [(33, 17), (17, 65)], np.float64),
    ("ij,jk->ik", [(40, 30), (30, 20)], np.float32),
    ("bij,bjk->bik", [(3, 9, 5), (3, 5, 7)], np.float64),
    ("ijk,jl->ikl", [(4, 5, 6), (5, 3)], np.int32),
    ("ij,ij->i", [(6, 11), (6, 11)], np.int64),
    ("ii->i", [(7, 7)], np.float64),
    ("ijk->kj", [(3, 4, 5)], np.float64),
    ("...ij,...jk", [(2, 3, 4), (1, 4, 2)], np.float64),
    ("i,i->", [(9,), (9,)], np.float64),
    ("ij,jk,kl->il", [(5, 6), (6, 7), (7, 3)], np.float64),
    ("ij,jk->ik", [(8, 9), (9, 4)], np.int8),
    ("ij,jk->ik", [(8, 9), (9, 4)], np.uint64),
    ("ij,jk->ik", [(8, 9), (9, 4)], np.float16),
    ("ij,jk->ik", [(8, 9), (9, 4)], np.bool_),
    ("ij,jk->ik", [(8, 9), (9, 4)], np.complex128),
    ("bij,bjk->bik", [(2, 5, 3), (2, 3, 6)], np.complex64),
    ("ijk->kj", [(3, 4, 5)], np.complex128),
]


@needs_gpu
@pytest.mark.parametrize("subscripts, shapes, dtype", CASES)
def test_cupy_operands_match_numpy(subscripts, shapes, dtype):
    import cupy

    operands = [_operand(s, dtype, k) for k, s in enumerate(shapes)]
    expected = np.einsum(subscripts, *operands, optimize=len(shapes) > 2)
    result = po.einsum(subscripts, *map(cupy.asarray, operands), optimize=len(shapes) > 2)
    assert isinstance(result, cupy.ndarray) and result.dtype == expected.dtype
    tolerance = {np.float16: 1e-2, np.float32: 1e-5, np.complex64: 1e-5}.get(dtype, 1e-12)
    np.testing.assert_allclose(result.get(), expected, rtol=tolerance, atol=tolerance)


@needs_gpu
def test_numpy_operands_with_target_cuda_give_numpy():
    a, b = _operand((12, 5), np.float64, 1), _operand((5, 9), np.int32, 2)
    result = po.einsum("ij,jk->ik", a, b, target="cuda")
    assert isinstance(result, np.ndarray) and result.dtype == np.float64
    np.testing.assert_allclose(result, np.einsum("ij,jk->ik", a, b))


@needs_gpu
def test_out_dtype_and_casting_on_the_gpu():
    import cupy

    a, b = _operand((6, 4), np.float32, 3), _operand((4, 5), np.float32, 4)
    da, db = cupy.asarray(a), cupy.asarray(b)
    out = cupy.zeros((6, 5), dtype=np.float64)
    assert po.einsum("ij,jk->ik", da, db, out=out) is out
    np.testing.assert_allclose(out.get(), np.einsum("ij,jk->ik", a, b), rtol=1e-6)
    wide = po.einsum("ij,jk->ik", da, db, dtype=np.float64)
    assert wide.dtype == np.float64
    with pytest.raises(TypeError, match="according to the rule 'safe'"):
        po.einsum("ij,jk->ik", da, db, out=cupy.zeros((6, 5), dtype=np.int32))
    with pytest.raises(TypeError, match="out must be a CuPy array"):
        po.einsum("ij,jk->ik", da, db, out=np.zeros((6, 5), dtype=np.float32))


@needs_gpu
def test_gpu_refusals_name_the_reason():
    import cupy

    with pytest.raises(po.TargetUnavailableError, match=str(np.dtype(np.longdouble))):
        po.einsum("ij->i", np.ones((2, 2), dtype=np.longdouble), target="cuda")
    with pytest.raises(ValueError, match="target='cuda'"):
        po.einsum("ij->i", cupy.ones((2, 2)), target="cpu")
