"""The DSL frontend: the Scop built for small kernels (parameters, context, arrays, domains,
accesses, original schedule) and the typing rules of statement bodies."""
from __future__ import annotations

import subprocess

import islpy as isl
import numpy as np
import pytest

import polyopt as po
from polyopt.analysis import expr as E
from polyopt import f32, f64, i32, i64


@po.kernel
def gemm(alpha: f64, beta: f64, C: f64["NI", "NJ"], A: f64["NI", "NK"], B: f64["NK", "NJ"]):
    for i in range(NI):
        for j in range(NJ):
            C[i, j] *= beta
        for k in range(NK):
            for j in range(NJ):
                C[i, j] += alpha * A[i, k] * B[k, j]


@po.kernel
def loops(A: f64["N"], B: f64["N"]):
    """Negative step, step > 1, min/max bounds (this docstring is no statement)."""
    for i in range(N - 1, -1, -1):
        A[i] = B[i]
    for i in range(1, N, 3):
        B[i] = 2.0
    for i in range(min(N, 10), max(0, N - 20), -2):
        A[i] = 1.0
    for i in range(max(2, N - 5), min(N, 7)):
        pass
        B[i] = 3.0


@po.kernel
def guarded(TSTEPS: int, A: f64["N + 1", "M"]):
    for t in range(TSTEPS):
        for i in range(N // 2):
            if i % 2 == 0:
                A[i, 0] = A[i + 1, 0]
            else:
                A[2 * i, t] = 1.0
    s = 0.0
    for i in range(N):
        if i >= 2 and not (i > N - 3 or i == 4):
            s += A[i, 0]
    A[0, 0] = s


@po.kernel
def typing(A: f64["N"], F: f32["N"], I: i32["N"], L: i64["N"], x: f32):
    for i in range(N):
        F[i] = F[i] * 2.5 + 1
        A[i] = i / 2
        A[i] = F[i] + A[i]
        I[i] = I[i] + 1
        A[i] = I[i] + 1.5
        L[i] = I[i] + L[i]
        F[i] = x * F[i]
        L[i] = 7 // 2 + i % 3
        A[i] = 1.0 / 3


def params_of(scop):
    return ", ".join(scop.params)


def test_gemm_parameters_context_and_arrays():
    scop = gemm.scop
    assert scop.name == "gemm"
    assert scop.params == ("NI", "NJ", "NK")
    assert scop.context.is_equal(isl.Set("[NI, NJ, NK] -> { : NI >= 0 and NJ >= 0 and NK >= 0 }"))
    assert set(scop.arrays) == {"A", "B", "C"}
    assert scop.arrays["C"] == po.Array("C", f64, ("NI", "NJ"))
    assert scop.arrays["A"].shape == ("NI", "NK") and scop.arrays["B"].shape == ("NK", "NJ")
    assert not any(a.local for a in scop.arrays.values())
    assert [(a.name, a.kind, a.dtype) for a in scop.arguments] == [
        ("alpha", "scalar", f64), ("beta", "scalar", f64), ("C", "array", f64),
        ("A", "array", f64), ("B", "array", f64)]


def test_gemm_domains_and_accesses():
    scop = gemm.scop
    s0, s1 = scop.statements
    assert (s0.name, s0.iterators, s1.name, s1.iterators) == ("S0", ("i", "j"), "S1", ("i", "k", "j"))
    p = "[NI, NJ, NK] -> "
    assert s0.domain.is_equal(isl.Set(p + "{ S0[i, j] : 0 <= i < NI and 0 <= j < NJ }"))
    assert s1.domain.is_equal(isl.Set(p + "{ S1[i, k, j] : 0 <= i < NI and 0 <= k < NK and 0 <= j < NJ }"))
    dom1 = " : 0 <= i < NI and 0 <= k < NK and 0 <= j < NJ }"
    reads = {r.array: r.relation for r in s1.reads}
    assert set(reads) == {"A", "B", "C"} and len(s1.reads) == 3
    assert reads["A"].is_equal(isl.Map(p + "{ S1[i, k, j] -> A[i, k]" + dom1))
    assert reads["B"].is_equal(isl.Map(p + "{ S1[i, k, j] -> B[k, j]" + dom1))
    assert reads["C"].is_equal(isl.Map(p + "{ S1[i, k, j] -> C[i, j]" + dom1))
    (write,) = s1.writes
    assert write.array == "C" and write.is_write
    assert write.relation.is_equal(isl.Map(p + "{ S1[i, k, j] -> C[i, j]" + dom1))
    # C[i, j] *= beta reads and writes C[i, j]
    assert [r.array for r in s0.reads] == ["C"] and [w.array for w in s0.writes] == ["C"]
    assert len({r.ref_id for s in scop.statements for r in s.accesses}) == 6
    # the union views
    assert scop.writes.is_equal(isl.UnionMap(
        p + "{ S0[i, j] -> C[i, j] : 0 <= i < NI and 0 <= j < NJ; S1[i, k, j] -> C[i, j]" + dom1))
    assert scop.domain.is_equal(isl.UnionSet(
        p + "{ S0[i, j] : 0 <= i < NI and 0 <= j < NJ; S1[i, k, j]" + dom1).intersect_params(scop.context))


def test_gemm_original_schedule():
    expected = isl.UnionMap("[NI, NJ, NK] -> { S0[i, j] -> [i, 0, j, 0]; S1[i, k, j] -> [i, 1, k, j] }")
    assert gemm.scop.schedule.get_map().is_equal(expected)
    assert gemm.scop.schedule.get_domain().intersect_params(gemm.scop.context).is_equal(gemm.scop.domain)


def test_statement_lines_text_and_printing():
    scop = gemm.scop
    first = gemm.py_function.__code__.co_firstlineno  # the decorator's line
    assert scop.statements[0].line == first + 4
    assert scop.statements[1].line == first + 7
    assert scop.statements[1].text == "C[i, j] += alpha * A[i, k] * B[k, j]"
    text = str(scop)
    assert "Scop gemm" in text and "S1: C[i, j] = C[i, j] + alpha * A[i, k] * B[k, j]" in text
    assert gemm.scop is scop  # parsed once


def test_kernel_object():
    assert gemm.name == "gemm" and gemm.__name__ == "gemm"
    assert repr(gemm) == "<polyopt kernel gemm>"
    assert callable(gemm.py_function) and gemm.__wrapped__ is gemm.py_function
    assert gemm.source.startswith("@po.kernel\ndef gemm(")


def test_negative_step_loop():
    s0 = loops.scop.statements[0]
    assert s0.domain.is_equal(isl.Set("[N] -> { S0[i] : 0 <= i < N }"))
    # descending: the original schedule runs i = N-1 first
    sched = loops.scop.schedule.get_map().intersect_domain(isl.UnionSet.from_set(s0.domain))
    assert sched.is_equal(isl.UnionMap("[N] -> { S0[i] -> [0, -i] : 0 <= i < N }"))


def test_step_greater_than_one():
    s1 = loops.scop.statements[1]
    assert s1.domain.is_equal(isl.Set("[N] -> { S1[i] : 1 <= i < N and (i - 1) mod 3 = 0 }"))
    points = []
    s1.domain.intersect_params(isl.Set("[N] -> { : N = 11 }")).foreach_point(
        lambda p: points.append(p.get_coordinate_val(isl.dim_type.set, 0).to_python()))
    assert sorted(points) == list(range(1, 11, 3))


def _points(domain, **params):
    fix = " and ".join(f"{k} = {v}" for k, v in params.items())
    names = ", ".join(params)
    out = []
    domain.intersect_params(isl.Set(f"[{names}] -> {{ : {fix} }}")).foreach_point(
        lambda p: out.append(tuple(p.get_coordinate_val(isl.dim_type.set, d).to_python()
                                   for d in range(p.get_space().dim(isl.dim_type.set)))))
    return sorted(out)


@pytest.mark.parametrize("n", [0, 1, 4, 5, 10, 11, 25, 40])
def test_min_max_bounds_match_python_range(n):
    s2, s3 = loops.scop.statements[2:]
    assert _points(s2.domain, N=n) == sorted((i,) for i in range(min(n, 10), max(0, n - 20), -2))
    assert _points(s3.domain, N=n) == sorted((i,) for i in range(max(2, n - 5), min(n, 7)))
    # the descending min/max loop is scheduled descending
    sched = loops.scop.schedule.get_map().intersect_domain(isl.UnionSet.from_set(s2.domain))
    assert sched.is_equal(isl.UnionMap("[N] -> { S2[i] -> [2, -i] }").intersect_domain(
        isl.UnionSet.from_set(s2.domain)))


def test_min_max_bound_domains_as_isl_text():
    s2, s3 = loops.scop.statements[2:]
    assert s2.domain.is_equal(isl.Set(
        "[N] -> { S2[i] : i <= N and i <= 10 and i > 0 and i > N - 20 "
        "and (i - min(N, 10)) mod 2 = 0 }"))
    assert s3.domain.is_equal(isl.Set("[N] -> { S3[i] : i >= 2 and i >= N - 5 and i < N and i < 7 }"))


def test_floor_division_bounds_and_if_else_domains():
    scop = guarded.scop
    assert scop.params == ("M", "N", "TSTEPS")
    s0, s1, s2, s3, s4 = scop.statements
    p = "[M, N, TSTEPS] -> "
    assert s0.domain.is_equal(isl.Set(
        p + "{ S0[t, i] : 0 <= t < TSTEPS and 0 <= i < floor(N / 2) and i mod 2 = 0 }"))
    assert s1.domain.is_equal(isl.Set(
        p + "{ S1[t, i] : 0 <= t < TSTEPS and 0 <= i < floor(N / 2) and i mod 2 = 1 }"))
    assert s2.domain.is_equal(isl.Set(p + "{ S2[] }"))
    assert s3.domain.is_equal(isl.Set(p + "{ S3[i] : 2 <= i < N and i <= N - 3 and i != 4 }"))
    for n in range(0, 9):
        assert _points(s0.domain, M=1, N=n, TSTEPS=1) == [
            (0, i) for i in range(n // 2) if i % 2 == 0]
    assert [r.relation.is_equal(isl.Map(p + "{ S1[t, i] -> A[2i, t] }").intersect_domain(s1.domain))
            for r in s1.writes] == [True]


def test_param_declared_as_int_and_context():
    scop = guarded.scop
    assert [(a.name, a.kind) for a in scop.arguments] == [("TSTEPS", "param"), ("A", "array")]
    assert scop.context.is_equal(isl.Set("[M, N, TSTEPS] -> { : M >= 0 and N >= 0 and TSTEPS >= 0 }"))
    assert scop.arrays["A"].shape == ("N + 1", "M")


def test_local_scalars_are_zero_dimensional_local_arrays():
    scop = guarded.scop
    assert scop.arrays["s"] == po.Array("s", f64, (), local=True)
    s2, s3, s4 = scop.statements[2:]
    assert s2.target == E.Access("s", (), f64) and [w.array for w in s2.writes] == ["s"]
    assert {r.array for r in s3.reads} == {"s", "A"} and [w.array for w in s3.writes] == ["s"]
    assert [r.array for r in s4.reads] == ["s"]
    assert s3.writes[0].relation.is_equal(isl.Map("[M, N, TSTEPS] -> { S3[i] -> s[] }").intersect_domain(s3.domain))
    # local scalars are not arguments of the kernel
    assert "s" not in {a.name for a in scop.arguments}


def test_original_schedule_with_sequences_and_guards():
    expected = isl.UnionMap(
        "[M, N, TSTEPS] -> { S0[t, i] -> [0, t, i, 0]; S1[t, i] -> [0, t, i, 1]; S2[] -> [1, 0, 0, 0];"
        " S3[i] -> [2, i, 0, 0]; S4[] -> [3, 0, 0, 0] }")
    got = guarded.scop.schedule.get_map().intersect_domain(guarded.scop.domain)
    assert got.is_equal(expected.intersect_domain(guarded.scop.domain))


def test_with_dtype_f32():
    k32 = gemm.with_dtype("f32")
    assert k32 is not gemm and k32.float_dtype is f32 and gemm.float_dtype is None
    scop = k32.scop
    assert all(a.dtype is f32 for a in scop.arrays.values())
    assert [a.dtype for a in scop.arguments] == [f32] * 5
    assert all(n.dtype is f32 for s in scop.statements for n in E.walk(s.value)
               if not (isinstance(n, E.Var) and n.kind == "iter"))
    assert gemm.scop.arrays["C"].dtype is f64  # the original is unchanged
    # integer arrays keep their type; local scalars from float literals follow the arrays
    t32 = typing.with_dtype(po.f32).scop
    assert t32.arrays["I"].dtype is i32 and t32.arrays["L"].dtype is i64 and t32.arrays["A"].dtype is f32
    assert guarded.with_dtype("f32").scop.arrays["s"].dtype is f32


def test_kernel_decorator_with_dtype():
    k = po.kernel_from_source('''
def scale(alpha: float, A: f64["N"]):
    for i in range(N):
        A[i] = alpha * A[i] * 0.5
''', dtype="f32")
    assert k.scop.arrays["A"].dtype is f32
    assert k.scop.arguments[0] == po.Argument("alpha", "scalar", f32)
    assert k.scop.statements[0].value.dtype is f32


def _value(scop, k):
    return scop.statements[k].value


def test_typing_rules():
    scop = typing.scop
    # f32 * weak float literal + weak int literal stays f32
    v = _value(scop, 0)
    assert v.dtype is f32 and v.lhs.dtype is f32 and v.lhs.rhs == E.Const(2.5, f32, True)
    assert v.rhs == E.Const(1.0, f32, True)
    # int / int is true division in f64
    v = _value(scop, 1)
    assert v.op == "/" and v.dtype is f64
    assert v.lhs == E.Cast(E.Var("i", "iter"), f64) and v.rhs.dtype is f64
    # f32 + f64 promotes to f64
    assert _value(scop, 2).dtype is f64 and _value(scop, 2).lhs == E.Cast(E.Access("F", (E.Var("i", "iter"),), f32), f64)
    # i32 + weak int stays i32
    v = _value(scop, 3)
    assert v.dtype is i32 and v.rhs == E.Const(1, i32, True)
    # i32 + float literal is f64
    assert _value(scop, 4).dtype is f64
    # i32 + i64 is i64
    assert _value(scop, 5).dtype is i64
    # f32 scalar * f32 array stays f32
    assert _value(scop, 6).dtype is f32
    # weak literal arithmetic is folded or kept integral; % and // on integers stay integers
    v = _value(scop, 7)
    assert v.dtype is i64 and v.rhs.op == "%"
    # 1.0 / 3 is folded into one weak literal, cast to the target type
    assert _value(scop, 8) == E.Const(1.0 / 3, f64, True)


def test_booleans_are_integers_in_arithmetic():
    k = po.kernel_from_source('''
def k(A: f64["N"], B: f64["N"]):
    for i in range(N):
        B[i] = (A[i] > 0) + 1
        B[i] = -(A[i] > 0)
        B[i] = 2.0 if A[i] else 3.0
''')
    v0, v1, v2 = (s.value for s in k.scop.statements)
    assert v0.operand.dtype is i64 and v0.operand.op == "+"  # cast to f64 of an i64 sum
    assert v1.operand.dtype is i64
    assert v2.cond.dtype.name == "bool"  # truthiness of a float condition


def test_math_function_spellings_and_casts():
    k = po.kernel_from_source('''
import math
import numpy as np
def k(A: f64["N"], I: i64["N"]):
    for i in range(N):
        A[i] = math.sqrt(A[i]) + np.exp(I[i]) + abs(I[i]) + float(I[i]) + floor(I[i]) + pow(2, 3)
        I[i] = int(A[i]) + max(I[i], 0, i) + min(i, 3)
''')
    s0, s1 = k.scop.statements
    calls = [n for n in E.walk(s0.value) if isinstance(n, E.Call)]
    assert [c.func for c in calls] == ["sqrt", "exp", "abs", "pow"]
    assert calls[1].args[0] == E.Cast(E.Access("I", (E.Var("i", "iter"),), i64), f64)
    assert calls[2].dtype is i64  # abs keeps integers
    assert calls[3].dtype is f64
    assert s1.value.dtype is i64
    assert [n.op for n in E.walk(s1.value) if isinstance(n, E.Binary)].count("max") == 2


def test_conditions_combining_and_or_not():
    k = po.kernel_from_source('''
def k(A: f64["N"]):
    for i in range(N):
        for j in range(i, N):
            if (i + j) % 3 == 0 or j - i > 2:
                if not j >= N - 1:
                    A[j] = A[i]
''')
    (s,) = k.scop.statements
    assert s.domain.is_equal(isl.Set(
        "[N] -> { S0[i, j] : 0 <= i <= j < N - 1 and ((i + j) mod 3 = 0 or j - i > 2) }"))


def test_subscripts_with_division_and_modulo():
    k = po.kernel_from_source('''
def k(A: f64["N", "N"]):
    for i in range(N):
        A[i // 2, i % 2] = A[N - 1 - i, 2 * i - i]
''')
    (s,) = k.scop.statements
    assert s.writes[0].relation.is_equal(isl.Map(
        "[N] -> { S0[i] -> A[floor(i / 2), i mod 2] : 0 <= i < N }"))
    assert s.reads[0].relation.is_equal(isl.Map("[N] -> { S0[i] -> A[N - 1 - i, i] : 0 <= i < N }"))


def test_arrays_with_affine_extents():
    k = po.kernel_from_source('''
def k(A: f64["N + 1", "2 * M"], B: f64["max(N, M)"], C: f64["N // 2"]):
    for i in range(N):
        A[i, 0] = B[i]
''')
    scop = k.scop
    assert scop.params == ("M", "N")
    assert scop.arrays["A"].shape == ("N + 1", "2 * M")
    assert scop.context.is_equal(isl.Set("[M, N] -> { : M >= 0 and N >= 0 }"))
    bounds = scop.array_bounds(scop.arrays["C"])
    assert bounds.is_equal(isl.Set("[M, N] -> { C[d] : 0 <= d < floor(N / 2) }"))
    assert scop.array_bounds(scop.arrays["B"]).is_equal(isl.Set("[M, N] -> { B[d] : 0 <= d < max(N, M) }"))


def test_in_bounds_parameters():
    k = po.kernel_from_source('''
def k(A: f64["N"], B: f64["M"]):
    for i in range(M):
        B[i] = A[i + 1]
''')
    assert k.scop.in_bounds_params.is_equal(isl.Set("[M, N] -> { : M >= 0 and N >= 0 and (M = 0 or M <= N - 1) }"))


def test_statements_nested_at_different_depths():
    k = po.kernel_from_source('''
def k(A: f64["N", "N"], x: f64):
    A[0, 0] = x
    for i in range(N):
        A[i, 0] = x
        for j in range(1, i):
            A[i, j] = A[i, j - 1]
        A[i, i] = 1.0
''')
    sched = k.scop.schedule.get_map()
    expected = isl.UnionMap("[N] -> { S0[] -> [0, 0, 0, 0]; S1[i] -> [1, i, 0, 0]; "
                            "S2[i, j] -> [1, i, 1, j]; S3[i] -> [1, i, 2, 0] }")
    assert sched.intersect_domain(k.scop.domain).is_equal(expected.intersect_domain(k.scop.domain))
    assert k.scop.statements[2].domain.is_equal(isl.Set("[N] -> { S2[i, j] : 0 <= i < N and 1 <= j < i }"))


# ----- names isl reserves or polyopt uses inside its own isl text --------------------------------
def _matches_interpreter(source: str, sizes: tuple[int, ...], **options) -> None:
    kernel = po.kernel_from_source(source)
    rng = np.random.default_rng(3)
    arrays = [rng.random(size) for size in sizes]
    expected = [a.copy() for a in arrays]
    po.interpret(kernel, *expected)
    po.compile(kernel, **options)(*arrays)
    for got, want in zip(arrays, expected):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_a_size_parameter_named_like_an_internal_isl_variable():
    """``d0`` was the name of the array-bounds set's first dimension: the in-bounds parameter
    set became ``d0 = 0`` and every call was refused."""
    _matches_interpreter('''def k(A: f64["d0"]):
    for i in range(d0):
        A[i] = A[i] + 1.0
''', ((7,),))


def test_size_parameters_named_like_the_dependence_level_variables():
    """``s0``/``t1`` named the source and sink dimensions in pluto's level analysis: the
    parallel flags were computed on the wrong set, and the verifier refused the loop."""
    source = '''def k(A: f64["s0", "t1"]):
    for i in range(1, s0):
        for j in range(t1):
            A[i, j] = A[i - 1, j] * 2.0
'''
    kernel = po.kernel_from_source(source)
    po.verify(kernel.scop, po.schedule(kernel.scop, "pluto"))
    _matches_interpreter(source, ((9, 5),))
    _matches_interpreter(source, ((9, 5),), tile=4)


def test_loop_variables_named_like_isl_keywords():
    source = '''def k(A: f64["N"], B: f64["N"]):
    for floor in range(1, N):
        for exists in range(N):
            if exists % 2 == 0 and floor >= exists:
                B[exists] = A[floor] + B[exists]
    for mod in range(N):
        for mod_ in range(mod):
            A[mod] += B[mod_]
'''
    for algorithm in ("original", "pluto", "feautrier"):
        _matches_interpreter(source, ((8,), (8,)), algorithm=algorithm)


def test_a_size_parameter_isl_reserves_is_refused_with_its_name():
    with pytest.raises(po.FrontendError, match="size parameter 'mod'"):
        po.kernel_from_source('''def k(A: f64["mod"]):
    for i in range(mod):
        A[i] = 1.0
''').scop


def test_names_the_cuda_code_keeps_for_itself_are_refused_for_cuda_only():
    """A scalar ``_b0`` was shadowed by the CUDA block loop variable ``_b0``: wrong results,
    silently. The CPU code has no such names and takes it."""
    source = '''def k(C: f64["N", "N"], A: f64["N", "N"], _b0: f64):
    for i in range(N):
        for j in range(N):
            C[i, j] += _b0 * A[i, j]
'''
    with pytest.raises(po.CodegenError, match="'_b0' starts with an underscore"):
        po.cuda_source(po.kernel_from_source(source))
    kernel = po.kernel_from_source(source)
    C, A = np.zeros((5, 5)), np.ones((5, 5))
    kernel(C, A, 2.0)
    np.testing.assert_array_equal(C, 2.0 * A)


def test_the_c_source_names_array_pointers_apart_from_user_names():
    kernel = po.kernel_from_source('''def k(A: f64["N"], A_: f64["N"]):
    for i in range(N):
        A[i] = A_[i] + 1.0
''')
    source = po.compile(kernel).c_source
    assert "*restrict A__" in source and "*restrict A___" in source
    gcc = subprocess.run(["gcc", "-std=c99", "-fsyntax-only", "-Werror", "-x", "c", "-"], input=source,
                         capture_output=True, text=True)
    assert gcc.returncode == 0, gcc.stderr
