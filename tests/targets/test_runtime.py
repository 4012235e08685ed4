"""Calling compiled kernels: the compile cache, argument binding and every argument check."""
from __future__ import annotations

import islpy as isl
import numpy as np
import pytest

import polyopt as po
from polyopt import f64, i32
from polyopt.schedulers.registry import DEFAULT_ALGORITHM


gemm = po.suite.get("gemm").kernel  # the suite's definition, shared by every test


@po.kernel
def shifted_read(A: f64["N"], B: f64["M"]):
    for i in range(M):
        B[i] = A[i + 1]


@po.kernel
def timed(TSTEPS: int, A: f64["N"]):
    for t in range(TSTEPS):
        for i in range(1, N):
            A[i] = A[i] + A[i - 1] * 0.5


@po.kernel
def halves(N: int, A: f64["N // 2 + 1"], B: f64["1"]):
    for i in range((N + 1) // 2 + 1):
        B[0] = A[i]


@po.kernel
def ints(A: i32["N"], k: i32):
    for i in range(N):
        A[i] = A[i] * k


def gemm_args(rng, ni=4, nj=5, nk=3):
    return rng.random((ni, nj)), rng.random((ni, nk)), rng.random((nk, nj))


def gemm_expected(alpha, beta, C, A, B):
    return beta * C + alpha * A @ B


# ----- compile cache ----------------------------------------------------------------------------


def test_compile_cache():
    first = po.compile(gemm, algorithm="original")
    assert isinstance(first, po.CompiledKernel)
    assert po.compile(gemm, algorithm="original") is first
    other = po.compile(gemm, algorithm="isl")
    assert other is not first and other.schedule.algorithm == "isl"
    assert po.compile(gemm, algorithm="isl") is other
    f32 = po.compile(gemm.with_dtype("f32"), algorithm="original")
    assert f32 is not first and f32.scop.arrays["C"].dtype is po.f32
    assert po.compile(gemm.with_dtype("f32"), algorithm="original") is f32
    # a kernel with the same source text is the same compiled kernel
    assert po.compile(po.kernel_from_source(gemm.source), algorithm="original") is first


def test_compile_errors():
    with pytest.raises(ValueError, match="unknown target"):
        po.compile(gemm, target="gpu")
    with pytest.raises(po.ScheduleError, match="unknown scheduling algorithm"):
        po.compile(gemm, algorithm="nope")
    with pytest.raises(TypeError, match="expected a polyopt kernel or Scop"):
        po.compile(42)


def test_compile_a_scop_directly(rng):
    ck = po.compile(gemm.scop, algorithm="original")
    assert str(ck.scop) == str(gemm.scop)
    C, A, B = gemm_args(rng)
    expected = gemm_expected(1.5, 1.2, C, A, B)
    ck(1.5, 1.2, C, A, B)
    np.testing.assert_allclose(C, expected, rtol=1e-13)


# ----- calls --------------------------------------------------------------------------------------


def test_positional_and_keyword_calls(rng):
    ck = po.compile(gemm)
    C, A, B = gemm_args(rng)
    expected = gemm_expected(1.5, 1.2, C, A, B)
    c1, c2, c3 = C.copy(), C.copy(), C.copy()
    ck(1.5, 1.2, c1, A, B)
    ck(alpha=1.5, beta=1.2, C=c2, A=A, B=B)
    ck(1.5, 1.2, B=B, A=A, C=c3)
    for c in (c1, c2, c3):
        np.testing.assert_allclose(c, expected, rtol=1e-13)
    assert ck(1.5, 1.2, c1, A, B) is None


def test_kernel_object_is_callable(rng):
    C, A, B = gemm_args(rng)
    expected = gemm_expected(1.5, 1.2, C, A, B)
    gemm(1.5, 1.2, C, A, B)
    np.testing.assert_allclose(C, expected, rtol=1e-13)
    # it uses the default algorithm's cached compiled kernel
    assert po.compile(gemm) is po.compile(gemm, algorithm=DEFAULT_ALGORITHM)


def test_scalars_accept_python_and_numpy_numbers(rng):
    C, A, B = gemm_args(rng)
    expected = gemm_expected(2.0, 3.0, C, A, B)
    gemm(np.float32(2.0), 3, C, A, B)
    np.testing.assert_allclose(C, expected, rtol=1e-13)
    a = np.arange(5, dtype=np.int32)
    ints(a, np.int64(3))
    np.testing.assert_array_equal(a, np.arange(5) * 3)


def test_explicit_parameter_and_inference():
    a = np.ones(6)
    timed(2, a)
    ref = np.ones(6)
    for _ in range(2):
        for i in range(1, 6):
            ref[i] += ref[i - 1] * 0.5
    np.testing.assert_allclose(a, ref, rtol=1e-13)
    with pytest.raises(TypeError, match="size parameter 'TSTEPS' must be an int"):
        timed(2.0, a)
    with pytest.raises(TypeError, match="size parameter 'TSTEPS' must be an int"):
        timed(True, a)


# ----- argument errors ----------------------------------------------------------------------------


def test_wrong_dtype_is_a_type_error(rng):
    C, A, B = gemm_args(rng)
    with pytest.raises(TypeError, match="array 'A' has dtype float32, expected float64"):
        gemm(1.0, 1.0, C, A.astype(np.float32), B)
    with pytest.raises(TypeError, match="dtype int64"):
        ints(np.arange(3), 2)


def test_non_array_is_a_type_error(rng):
    C, A, B = gemm_args(rng)
    with pytest.raises(TypeError, match="argument 'A' must be a numpy array, got list"):
        gemm(1.0, 1.0, C, A.tolist(), B)
    with pytest.raises(TypeError, match="scalar 'alpha' must be a number"):
        gemm("1.0", 1.0, C, A, B)
    with pytest.raises(TypeError, match="scalar 'alpha' must be a number"):
        gemm(np.ones(1), 1.0, C, A, B)


def test_non_contiguous_is_a_value_error(rng):
    C, A, B = gemm_args(rng)
    with pytest.raises(ValueError, match="C-contiguous"):
        gemm(1.0, 1.0, C, np.asfortranarray(rng.random((4, 3))), B)
    big = rng.random((8, 5))
    with pytest.raises(ValueError, match="C-contiguous"):
        gemm(1.0, 1.0, big[::2], A, B)


def test_wrong_shape_or_rank_is_a_value_error(rng):
    C, A, B = gemm_args(rng)
    with pytest.raises(ValueError, match="array 'B' has shape \\(4, 5\\), expected \\(3, 5\\)"):
        gemm(1.0, 1.0, C, A, rng.random((4, 5)))
    with pytest.raises(ValueError, match="'A' must have 2 dimensions, got 1"):
        gemm(1.0, 1.0, C, A.ravel(), B)
    with pytest.raises(ValueError, match="must have 1 dimensions, got 2"):
        timed(1, np.ones((2, 2)))


def test_missing_or_extra_arguments_are_type_errors(rng):
    C, A, B = gemm_args(rng)
    with pytest.raises(TypeError, match="missing argument\\(s\\): B"):
        gemm(1.0, 1.0, C, A)
    with pytest.raises(TypeError, match="takes 5 arguments"):
        gemm(1.0, 1.0, C, A, B, B)
    with pytest.raises(TypeError, match="unexpected argument 'D'"):
        gemm(1.0, 1.0, C, A, B, D=B)
    with pytest.raises(TypeError, match="multiple values for argument 'C'"):
        gemm(1.0, 1.0, C, A, B, C=C)
    with pytest.raises(TypeError, match="missing argument\\(s\\): TSTEPS"):
        timed(A=np.ones(3))


def test_read_only_output_is_a_value_error(rng):
    C, A, B = gemm_args(rng)
    C.flags.writeable = False
    with pytest.raises(ValueError, match="'C' is written by the kernel but is read-only"):
        gemm(1.0, 1.0, C, A, B)
    # read-only inputs are fine
    C = C.copy()
    A.flags.writeable = False
    B.flags.writeable = False
    expected = gemm_expected(1.0, 1.0, C, A, B)
    gemm(1.0, 1.0, C, A, B)
    np.testing.assert_allclose(C, expected, rtol=1e-13)


def test_overlapping_arrays_are_a_value_error(rng):
    square = rng.random((4, 4))
    with pytest.raises(ValueError, match="overlap in memory"):
        gemm(1.0, 1.0, square, square, square)
    buffer = np.zeros(10)
    with pytest.raises(ValueError, match="'A' and 'B' overlap"):
        shifted_read(buffer[:6], buffer[4:])
    # the same read-only array passed twice is fine (nothing is written through it)
    k = po.kernel_from_source('''
def add(X: f64["N"], Y: f64["N"], Z: f64["N"]):
    for i in range(N):
        Z[i] = X[i] + Y[i]
''')
    x, z = np.arange(4.0), np.zeros(4)
    k(x, x, z)
    np.testing.assert_array_equal(z, 2 * x)


def test_out_of_bounds_parameters_are_refused_at_call_time():
    a = np.arange(5.0)
    b = np.zeros(4)
    shifted_read(a, b)                      # M = 4 <= N - 1: in bounds
    np.testing.assert_array_equal(b, a[1:])
    with pytest.raises(ValueError, match="outside its array"):
        shifted_read(np.arange(4.0), np.zeros(4))   # would read A[4]
    with pytest.raises(ValueError, match="outside its array"):
        shifted_read(np.zeros(0), np.zeros(1))
    shifted_read(np.zeros(0), np.zeros(0))  # M = 0: nothing is read
    # the interpreter's arguments are bound the same way (shapes, dtypes)
    with pytest.raises(TypeError):
        po.interpret(shifted_read, a.astype(np.float32), b)


def test_out_of_bounds_with_floor_division_extents():
    # A has N // 2 + 1 elements; the loop reads A[(N + 1) // 2], out of bounds for odd N
    for n in (0, 2, 4, 6):
        a = np.arange(n // 2 + 1.0)
        b = np.zeros(1)
        halves(n, a, b)
        assert b[0] == a[-1]
    for n in (1, 3, 5):
        with pytest.raises(ValueError, match="outside its array"):
            halves(n, np.zeros(n // 2 + 1), np.zeros(1))
    assert halves.scop.in_bounds_params.is_equal(isl.Set("[N] -> { : N >= 0 and N mod 2 = 0 }"))


def test_uninferable_parameter_not_passed_is_a_type_error():
    k = po.kernel_from_source('''
def k(A: f64["2 * N"], B: f64["M"]):
    for i in range(N):
        A[2 * i] = 1.0
''')
    with pytest.raises(TypeError, match="cannot infer size parameter\\(s\\) N"):
        k(np.zeros(3), np.zeros(2))   # 2 * N == 3 has no solution
    a = np.zeros(4)
    k(a, np.zeros(2))
    np.testing.assert_array_equal(a, [1.0, 0.0, 1.0, 0.0])
    declared = po.kernel_from_source('''
def k(N: int, A: f64["N // 2"]):
    for i in range(N // 2):
        A[i] = 1.0 * i
''')
    with pytest.raises(TypeError, match="missing argument"):
        declared(A=np.zeros(3))
    a = np.zeros(3)
    declared(7, a)
    np.testing.assert_array_equal(a, [0.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="has shape"):
        declared(8, a)


def test_parameters_inferred_through_several_extents():
    k = po.kernel_from_source('''
def k(A: f64["N + M"], B: f64["M"], C: f64["N + 1"]):
    for i in range(N + M):
        A[i] = 1.0 * i
''')
    a = np.zeros(7)
    k(a, np.zeros(3), np.zeros(5))
    np.testing.assert_array_equal(a, np.arange(7.0))
    with pytest.raises(ValueError, match="has shape"):
        k(np.zeros(6), np.zeros(3), np.zeros(5))


def test_parameters_outside_the_context_are_refused():
    k = po.kernel_from_source('''
def k(A: f64["N + 2"]):
    for i in range(N):
        A[i + 2] = A[i]
''')
    k(np.zeros(2))           # N = 0
    with pytest.raises(ValueError):
        k(np.zeros(1))       # N = -1 is outside the context N >= 0


def test_compiled_kernel_inspection(rng):
    ck = po.compile(gemm, algorithm="original")
    # (cached by source text: another kernel with this source may have compiled it first)
    assert ck.schedule.scop.name == "gemm" and ck.function_name == "polyopt_gemm"
    assert ck.scop.domain.is_equal(gemm.scop.domain)
    assert "S0(" in ck.loop_ast and "S1(" in ck.loop_ast
    assert "void polyopt_gemm(" in ck.c_source
    C, A, B = gemm_args(rng, 2, 2, 2)
    # the checked-parameter memo does not skip checks for other sizes
    ck(1.0, 1.0, C, A, B)
    with pytest.raises(ValueError, match="has shape"):
        ck(1.0, 1.0, C, A, rng.random((3, 2)))


_DEFINED_TYPE = """\
typedef DATA_TYPE real;
void scale(int n, real A[n]) {
#pragma scop
  for (int i = 0; i < n; i++)
    A[i] = A[i] * 3 / 2;
#pragma endscop
}
"""


def test_cache_key_includes_file_scope_defines():
    """One region text under two -D values of a file-scope typedef is two kernels (the key was
    the region text: the int kernel came back as the double one, and refused int arrays)."""
    assert po.from_c(_DEFINED_TYPE, defines={"DATA_TYPE": "double"})[0].source == \
        po.from_c(_DEFINED_TYPE, defines={"DATA_TYPE": "int"})[0].source
    as_double, = po.from_c(_DEFINED_TYPE, defines={"DATA_TYPE": "double"})
    as_int, = po.from_c(_DEFINED_TYPE, defines={"DATA_TYPE": "int"})
    assert po.compile(as_double) is not po.compile(as_int)
    A = np.array([1.0, 3.0])
    as_double(A=A)
    B = np.array([1, 3], np.int32)
    as_int(A=B)
    np.testing.assert_array_equal(A, [1.5, 4.5])
    np.testing.assert_array_equal(B, [1, 4])  # C's truncating integer division


def test_cache_key_is_structural():
    """Equal Scops share compiled code; the fingerprint sees element types and options."""
    from polyopt.analysis.scop import scop_fingerprint
    source = "def k(A: f64['N']):\n    for i in range(N):\n        A[i] = A[i] * 2.0\n"
    one, two = po.kernel_from_source(source), po.kernel_from_source(source)
    assert po.compile(one) is po.compile(two)
    as_f32 = po.kernel_from_source(source, dtype="f32")
    assert scop_fingerprint(as_f32.scop) != scop_fingerprint(one.scop)
    assert po.compile(as_f32) is not po.compile(one)
    assert po.compile(one, tile=8) is not po.compile(one)


# ----- compile(kernel, schedule=...) ------------------------------------------------------------
_PREFIX_SUM = '''def prefix(A: f64["N"]):
    for i in range(1, N):
        A[i] = A[i] + A[i - 1]
'''


def test_compile_takes_a_schedule_and_verifies_it():
    kernel = po.kernel_from_source(_PREFIX_SUM)
    scop = kernel.scop
    given = po.schedule(scop, "pluto", tile=4)
    compiled = po.compile(kernel, schedule=given)
    assert compiled.schedule is given
    A = np.arange(10.0)
    expected = np.cumsum(A)
    compiled(A)
    np.testing.assert_allclose(A, expected)
    # another schedule of the same kernel is another entry of the cache
    assert po.compile(kernel, schedule=po.schedule(scop, "original")) is not compiled
    assert po.compile(kernel, schedule=given) is compiled
    assert "__global__" in po.cuda_source(kernel, schedule=given)  # the CUDA target takes it too
    # a hand-made schedule that runs the sum backwards is refused with the verifier's witness
    domain = scop.domain
    backwards = isl.Schedule.from_domain(domain).insert_partial_schedule(
        isl.MultiUnionPwAff.from_union_map(isl.UnionMap("[N] -> { S0[i] -> [-i] }").intersect_domain(domain)))
    with pytest.raises(po.IllegalScheduleError, match="witness"):
        po.compile(kernel, schedule=po.Schedule.from_tree(scop, backwards, algorithm="by hand"))


def test_compile_with_a_schedule_refuses_what_it_would_ignore():
    kernel = po.kernel_from_source(_PREFIX_SUM)
    given = po.schedule(kernel.scop, "original")
    with pytest.raises(ValueError, match="drop algorithm='isl'"):
        po.compile(kernel, schedule=given, algorithm="isl")
    with pytest.raises(ValueError, match="drop tile"):
        po.compile(kernel, schedule=given, tile=8)
    other = po.kernel_from_source(_PREFIX_SUM.replace("A[i - 1]", "2.0"))
    with pytest.raises(ValueError, match="not of the kernel"):
        po.compile(other, schedule=given)
    with pytest.raises(TypeError, match="takes a polyopt Schedule"):
        po.compile(kernel, schedule="{ S0[i] -> [i] }")


def test_a_schedule_compiles_by_itself():
    gemm = po.suite.get("gemm").kernel
    steered = po.schedule(gemm, "original").parallel("i")
    assert po.compile(steered).schedule is steered
    assert po.compile(steered).c_source == po.compile(gemm, schedule=steered).c_source
