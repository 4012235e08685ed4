"""The C frontend (po.from_c) and `polyopt cc`: every supported construct against gcc -O0 on the
same C file, every refusal at its line and column, and the DSL round trip on suite kernels."""
from __future__ import annotations

import ctypes
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import islpy as isl
import numpy as np
import pytest

import polyopt as po
from polyopt.cli import main as cli_main
from polyopt.errors import PolyoptWarning
from polyopt.frontends.c_scop import optimize_c_file

C_DIR = Path(__file__).parent / "c"
GCC = shutil.which("gcc")
needs_gcc = pytest.mark.skipif(GCC is None, reason="gcc is not installed")


# ----- helpers ---------------------------------------------------------------------------------

def _build(tmp_path: Path, source: Path, flags=(), name="lib") -> ctypes.CDLL:
    """``source`` built by gcc into a shared library (warnings about our pragmas are silenced)."""
    library = tmp_path / f"{name}.so"
    subprocess.run([GCC, "-O0", "-std=gnu11", "-Wno-unknown-pragmas", "-shared", "-fPIC",
                    f"-I{C_DIR}", *flags, str(source), "-o", str(library), "-lm"], check=True)
    return ctypes.CDLL(str(library))


def _ctype(value):
    if isinstance(value, np.ndarray):
        return ctypes.c_void_p(value.ctypes.data)
    if isinstance(value, np.float32):
        return ctypes.c_float(value)
    if isinstance(value, float):
        return ctypes.c_double(value)
    return ctypes.c_int(value)


def _call_c(library, function: str, values: dict) -> None:
    """Call ``function`` with ``values`` in C parameter order (arrays by pointer)."""
    getattr(library, function)(*[_ctype(v) for v in values.values()])


def _copy(values: dict) -> dict:
    return {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in values.items()}


def _call_kernel(kernel, values: dict, algorithm: str) -> None:
    """Call the compiled kernel with the arguments its Scop takes, by name."""
    po.compile(kernel, algorithm=algorithm)(**{a.name: values[a.name] for a in kernel.scop.arguments})


def _assert_same(actual: dict, expected: dict) -> None:
    for name, value in expected.items():
        if isinstance(value, np.ndarray):
            rtol = 1e-5 if value.dtype == np.float32 else 1e-12
            np.testing.assert_allclose(actual[name], value, rtol=rtol, atol=rtol, err_msg=name)


def _rand(rng, *shape, dtype=np.float64):
    return rng.uniform(-1.0, 2.0, size=shape).astype(dtype)


# ----- every construct against gcc -O0 --------------------------------------------------------

def _inputs(function: str, rng) -> dict:
    """Arguments of the C function, in its parameter order."""
    n = 11
    if function == "loop_forms":
        return dict(n=n, A=_rand(rng, n), B=_rand(rng, n, n))
    if function == "bounds":
        return dict(n=9, m=7, A=_rand(rng, 9, 7))
    if function == "conditions":
        return dict(n=n, A=_rand(rng, n, n), x=_rand(rng, n))
    if function == "scalars":
        return dict(n=12, alpha=0.7, F=_rand(rng, 12, dtype=np.float32), A=_rand(rng, 12),
                    I=rng.integers(-20, 20, size=12).astype(np.int32), B=_rand(rng, 12, 12))
    if function == "three_d":
        return dict(nr=3, nq=4, np=5, A=_rand(rng, 3, 4, 5), C4=_rand(rng, 8, 8), sum=_rand(rng, 5))
    raise KeyError(function)


CONSTRUCTS = ["loop_forms", "bounds", "conditions", "scalars", "three_d"]


@pytest.fixture(scope="module")
def constructs_library(tmp_path_factory):
    if GCC is None:
        pytest.skip("gcc is not installed")
    return _build(tmp_path_factory.mktemp("gcc"), C_DIR / "constructs.c")


@needs_gcc
@pytest.mark.parametrize("function", CONSTRUCTS)
@pytest.mark.parametrize("algorithm", ["original", "pluto"])
def test_construct_matches_gcc(function, algorithm, constructs_library):
    kernel, = po.from_c(C_DIR / "constructs.c", function=function)
    rng = np.random.default_rng(7)
    inputs = _inputs(function, rng)
    G = _rand(rng, 8, 6)
    if function == "three_d":  # the file-scope array is an argument of the kernel
        (ctypes.c_double * 48).in_dll(constructs_library, "G")[:] = G.ravel().tolist()
    expected, actual = _copy(inputs), _copy(inputs)
    _call_c(constructs_library, function, expected)
    _call_kernel(kernel, {**actual, "G": G}, algorithm)
    _assert_same(actual, expected)


@needs_gcc
def test_two_regions_in_one_function(constructs_library):
    first, second = po.from_c(C_DIR / "constructs.c", function="two_regions")
    assert (first.name, second.name) == ("two_regions_scop0", "two_regions_scop1")
    assert [(a.name, a.kind) for a in first.scop.arguments] == [("tsteps", "param"), ("A", "array")]
    rng = np.random.default_rng(3)
    inputs = dict(tsteps=3, n=10, A=_rand(rng, 10), B=_rand(rng, 10))
    expected, actual = _copy(inputs), _copy(inputs)
    _call_c(constructs_library, "two_regions", expected)
    first(tsteps=3, A=actual["A"])
    actual["B"][:] = 0.0  # the plain C loop between the two regions
    second(A=actual["A"], B=actual["B"])
    _assert_same(actual, expected)


@needs_gcc
@pytest.mark.parametrize("flags", [(), ("-DDATA_TYPE_IS_FLOAT",),
                                   ("-DPOLYBENCH_USE_C99_PROTO", "-DPOLYBENCH_USE_SCALAR_LB")])
def test_polybench_style_gemm(flags, tmp_path):
    defines = dict(f[2:].split("=", 1) if "=" in f else (f[2:], None) for f in flags)
    kernel, = po.from_c(str(C_DIR / "gemm_pb.c"), defines=defines, include_dirs=[str(C_DIR)])
    dtype = np.float32 if "-DDATA_TYPE_IS_FLOAT" in flags else np.float64
    scalar = np.float32 if dtype == np.float32 else float
    rng = np.random.default_rng(1)
    inputs = dict(ni=20, nj=25, nk=30, alpha=scalar(1.5), beta=scalar(1.2), C=_rand(rng, 20, 25, dtype=dtype),
                  A=_rand(rng, 20, 30, dtype=dtype), B=_rand(rng, 30, 25, dtype=dtype))
    vla = "-DPOLYBENCH_USE_SCALAR_LB" in flags
    assert kernel.scop.params == (("ni", "nj", "nk") if vla else ())
    expected, actual = _copy(inputs), _copy(inputs)
    _call_c(_build(tmp_path, C_DIR / "gemm_pb.c", flags), "kernel_gemm", expected)
    _call_kernel(kernel, actual, "pluto")
    _assert_same(actual, expected)


@needs_gcc
def test_polybench_style_stencil(tmp_path):
    kernel, = po.from_c(C_DIR / "stencil_pb.c", include_dirs=[C_DIR])
    assert "acc" in kernel.scop.arrays and kernel.scop.arrays["acc"].local
    rng = np.random.default_rng(2)
    inputs = dict(tsteps=6, n=24, A=_rand(rng, 24, 24), B=_rand(rng, 24, 24))
    expected, actual = _copy(inputs), _copy(inputs)
    _call_c(_build(tmp_path, C_DIR / "stencil_pb.c"), "kernel_heat", expected)
    _call_kernel(kernel, actual, "pluto")
    _assert_same(actual, expected)


def test_interpreter_and_source_text():
    """A kernel from C text runs in the interpreter like a DSL kernel; sizes are inferred."""
    kernel, = po.from_c("void f(int n, double a, double X[n]) {\n"
                        "#pragma scop\n  for (int i = 0; i < n; i++) X[i] = a * X[i] + i;\n"
                        "#pragma endscop\n}\n")
    x = np.arange(5.0)
    po.interpret(kernel, 2.0, x)
    np.testing.assert_array_equal(x, 2.0 * np.arange(5.0) + np.arange(5.0))
    assert isinstance(kernel.scop, po.Scop) and kernel.scop.statements[0].line == 3


# ----- refusals --------------------------------------------------------------------------------

def _region(body: str, params: str = "int n, double A[n][n], double *p, double x, int I[n]") -> str:
    """C text whose region body starts on line 4 (each body line indented by 2 spaces)."""
    return f"void f({params})\n{{\n#pragma scop\n{body}\n#pragma endscop\n}}\n"


REFUSALS = [
    ("while", "  while (n > 0) A[0][0] = 1.0;", 4, 3, "while loops are not supported"),
    ("break", "  for (int i = 0; i < n; i++) break;", 4, 31, "break statements are not supported"),
    ("goto", "  goto out;", 4, 3, "goto statements are not supported"),
    ("return", "  return;", 4, 3, "return statements are not supported"),
    ("pointer", "  for (int i = 0; i < n; i++) p[i] = 1.0;", 4, 31, "'p' is a pointer"),
    ("deref", "  A[0][0] = *p;", 4, 14, "dereferencing a pointer"),  # pycparser: the operand
    ("address", "  A[0][0] = A[0][0] + &x;", 4, 24, "taking an address"),
    ("non_affine_bound", "  for (int i = 0; i < n * n; i++) A[0][0] = 1.0;", 4, 23,
     "not affine: product of two non-constant terms"),
    ("non_affine_subscript", "  for (int i = 0; i < n; i++)\n    A[i * i][0] = 1.0;", 5, 7,
     "non-affine subscript of 'A': product of two non-constant terms"),
    ("data_subscript", "  for (int i = 0; i < n; i++)\n    A[I[i]][0] = 1.0;", 5, 7,
     "non-affine subscript of 'A': array element I[i] is data"),
    ("data_bound", "  for (int i = 0; i < x; i++) A[0][0] = 1.0;", 4, 19,
     "not affine: floating-point value"),
    ("side_effect_call", "  A[0][0] = rand();", 4, 13, "call to 'rand' is not allowed"),
    ("call_statement", "  free(p);", 4, 3, "function calls as statements"),
    ("data_if", "  if (A[0][0] > 0) A[0][0] = 1.0;", 4, 7, "not affine: array element A[0, 0] is data"),
    ("increment_in_expression", "  for (int i = 0; i < n; i++) A[i][0] = A[i++][0];", 4, 43,
     "increments inside expressions"),
    ("bad_step", "  for (int i = 0; i < n; i *= 2) A[i][0] = 1.0;", 4, 26, "the loop increment must be"),
    ("unbounded", "  for (int i = 0; i > -1; i++) A[0][0] = 1.0;", 4, 19,
     "the loop condition must bound 'i' from above"),
    ("assign_param", "  n = 3;", 4, 3, "cannot assign to parameter 'n'"),
    ("assign_iterator", "  for (int i = 0; i < n; i++) i = 2;", 4, 31, "cannot assign to loop variable"),
    ("bitwise", "  for (int i = 0; i < n; i++) A[i & 1][0] = 1.0;", 4, 33, "bitwise operator '&'"),
    ("unknown_name", "  A[0][0] = y;", 4, 13, "unknown name 'y'"),
    ("read_before_write", "  double t;\n  A[0][0] = t;", 5, 13, "'t' is read before it is assigned"),
    ("local_array", "  double tmp[4];", 4, 10, "only scalar temporaries can be declared"),
    ("float_modulo", "  A[0][0] = A[0][1] % 2;", 4, 13, "'%' needs integer operands"),
    ("wrong_rank", "  A[0] = 1.0;", 4, 3, "array 'A' has 2 dimensions, subscripted with 1"),
    ("division_by_variable", "  for (int i = 0; i < n / n; i++) A[0][0] = 1.0;", 4, 23,
     "'/' by something other than a positive integer constant"),
]


@pytest.mark.parametrize("name, body, line, column, message", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_refusal_position(name, body, line, column, message):
    with pytest.raises(po.FrontendError) as info:
        po.from_c(_region(body))
    error = info.value
    assert message in error.reason, error
    assert (error.source_name, error.line, error.column) == ("<string>", line, column), str(error)


def test_refusals_in_a_file_name_the_file(tmp_path):
    path = tmp_path / "bad.c"
    path.write_text(_region("  A[0][0] = *p;"))
    with pytest.raises(po.FrontendError) as info:
        po.from_c(path)
    assert (info.value.source_name, info.value.line, info.value.column) == (str(path), 4, 14)


def test_syntax_error_and_unmatched_pragma():
    with pytest.raises(po.FrontendError) as info:  # the ';' is missing at the end of line 2
        po.from_c("void f(int n) {\n  int x = 1\n}\n")
    assert (info.value.line, info.value.column) == (2, 12) and "C syntax error" in info.value.reason
    with pytest.raises(po.FrontendError, match="without a matching '#pragma endscop'"):
        po.from_c("void f(int n, double A[n]) {\n#pragma scop\n  A[0] = 1.0;\n}\n")


SYNTAX_ERRORS = [  # (source, line, column of the error in it, text of the reason)
    # a missing ';' before a blank line, a comment and a pragma: the end of the statement
    ("#include <math.h>\nvoid f(int n, double A[n]) {\n#pragma scop\n  A[0] = sqrt(2.0)\n\n"
     "  /* a\n     comment */\n#pragma endscop\n}\n", 4, 19, "'#pragma' (line 8) cannot follow"),
    # an unexpected token in the middle of a line: that token
    ("#define M 3\nvoid f(int n, double A[M]) {\n  A[0] = 1.0 2.0;\n}\n", 3, 14, "unexpected '2.0'"),
]


@pytest.mark.parametrize("source, line, column, reason", SYNTAX_ERRORS)
def test_syntax_error_position(source, line, column, reason, tmp_path):
    path = tmp_path / "bad.c"
    path.write_text(source)
    with pytest.raises(po.FrontendError) as info:
        po.from_c(path)
    assert (info.value.source_name, info.value.line, info.value.column) == (str(path), line, column)
    assert reason in info.value.reason, info.value


def test_missing_preprocessor(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(po.FrontendError, match="no C preprocessor found"):
        po.from_c(_region("  A[0][0] = 1.0;"))


# ----- round trip against the DSL suite ---------------------------------------------------------

ROUND_TRIP = {
    "gemm": ("void kernel_gemm(int NI, int NJ, int NK, double alpha, double beta, double C[NI][NJ],"
             " double A[NI][NK], double B[NK][NJ])", """
  for (int i = 0; i < NI; i++) {
    for (int j = 0; j < NJ; j++)
      C[i][j] *= beta;
    for (int k = 0; k < NK; k++)
      for (int j = 0; j < NJ; j++)
        C[i][j] += alpha * A[i][k] * B[k][j];
  }"""),
    "jacobi-1d": ("void kernel_jacobi_1d(int TSTEPS, int N, double A[N], double B[N])", """
  for (int t = 0; t < TSTEPS; t++) {
    for (int i = 1; i < N - 1; i++)
      B[i] = 0.33333 * (A[i-1] + A[i] + A[i + 1]);
    for (int i = 1; i < N - 1; i++)
      A[i] = 0.33333 * (B[i-1] + B[i] + B[i + 1]);
  }"""),
    "lu": ("void kernel_lu(int N, double A[N][N])", """
  for (int i = 0; i < N; i++) {
    for (int j = 0; j < i; j++) {
      for (int k = 0; k < j; k++)
        A[i][j] -= A[i][k] * A[k][j];
      A[i][j] /= A[j][j];
    }
    for (int j = i; j < N; j++)
      for (int k = 0; k < i; k++)
        A[i][j] -= A[i][k] * A[k][j];
  }"""),
    "2mm": ("void kernel_2mm(int NI, int NJ, int NK, int NL, double alpha, double beta, "
            "double tmp[NI][NJ], double A[NI][NK], double B[NK][NJ], double C[NJ][NL], double D[NI][NL])", """
  for (int i = 0; i < NI; i++)
    for (int j = 0; j < NJ; j++) {
      tmp[i][j] = 0.0;
      for (int k = 0; k < NK; ++k)
        tmp[i][j] += alpha * A[i][k] * B[k][j];
    }
  for (int i = 0; i < NI; i++)
    for (int j = 0; j < NL; j++) {
      D[i][j] *= beta;
      for (int k = 0; k < NJ; ++k)
        D[i][j] += tmp[i][k] * C[k][j];
    }"""),
    "seidel-2d": ("void kernel_seidel_2d(int TSTEPS, int N, double A[N][N])", """
  for (int t = 0; t <= TSTEPS - 1; t++)
    for (int i = 1; i<= N - 2; i++)
      for (int j = 1; j <= N - 2; j++)
        A[i][j] = (A[i-1][j-1] + A[i-1][j] + A[i-1][j+1]
                   + A[i][j-1] + A[i][j] + A[i][j+1]
                   + A[i+1][j-1] + A[i+1][j] + A[i+1][j+1]) / 9.0;"""),
}


def _union(maps) -> isl.UnionMap:
    result = None
    for m in maps:
        m = isl.UnionMap.from_map(m) if isinstance(m, isl.Map) else m
        result = m if result is None else result.union(m)
    return result


@pytest.mark.parametrize("name", list(ROUND_TRIP))
def test_round_trip_with_the_dsl(name):
    signature, body = ROUND_TRIP[name]
    c_scop = po.from_c(f"{signature}\n{{\n#pragma scop{body}\n#pragma endscop\n}}\n")[0].scop
    dsl_scop = po.suite.get(name).kernel.scop
    assert [s.name for s in c_scop.statements] == [s.name for s in dsl_scop.statements]
    assert [(a.name, a.kind) for a in c_scop.arguments] == [(a.name, a.kind) for a in dsl_scop.arguments]
    for c_stmt, d_stmt in zip(c_scop.statements, dsl_scop.statements):
        assert c_stmt.domain.is_equal(d_stmt.domain)
        for c_ref, d_ref in zip(c_stmt.accesses, d_stmt.accesses):
            assert (c_ref.ref_id, c_ref.is_write) == (d_ref.ref_id, d_ref.is_write)
            assert c_ref.relation.is_equal(d_ref.relation)
    c_deps, d_deps = po.dependences(c_scop), po.dependences(dsl_scop)
    for kind in ("raw", "war", "waw"):
        assert getattr(c_deps, kind).is_equal(getattr(d_deps, kind)), kind
    assert c_scop.schedule.get_map().is_equal(dsl_scop.schedule.get_map())


# ----- polyopt cc ------------------------------------------------------------------------------

@needs_gcc
def test_cc_output_builds_and_matches(tmp_path, constructs_library):
    out = tmp_path / "constructs_opt.c"
    assert cli_main(["cc", str(C_DIR / "constructs.c"), "--algorithm", "pluto", "--tile", "4",
                     "-o", str(out)]) == 0
    text = out.read_text()
    assert "#pragma omp parallel for" in text and "polyopt pluto schedule" in text
    optimized = _build(tmp_path, out, ("-O3", "-fopenmp"), name="opt")
    rng = np.random.default_rng(11)
    G = _rand(rng, 8, 6).ravel().tolist()
    for library in (constructs_library, optimized):
        (ctypes.c_double * 48).in_dll(library, "G")[:] = G
    for function in CONSTRUCTS:
        inputs = _inputs(function, rng)
        expected, actual = _copy(inputs), _copy(inputs)
        _call_c(constructs_library, function, expected)
        _call_c(optimized, function, actual)
        _assert_same(actual, expected)


@needs_gcc
def test_cc_polybench_style_with_defines(tmp_path):
    out = tmp_path / "gemm_opt.c"
    assert cli_main(["cc", str(C_DIR / "gemm_pb.c"), f"-I{C_DIR}", "-D", "NI=16", "-DNJ=12",
                     "--tile", "8", "-o", str(out)]) == 0
    flags = ("-DNI=16", "-DNJ=12")
    optimized = _build(tmp_path, out, ("-O3", "-fopenmp", *flags), name="opt")
    original = _build(tmp_path, C_DIR / "gemm_pb.c", flags, name="orig")
    rng = np.random.default_rng(5)
    inputs = dict(ni=16, nj=12, nk=30, alpha=1.5, beta=1.2, C=_rand(rng, 16, 12), A=_rand(rng, 16, 30),
                  B=_rand(rng, 30, 12))
    expected, actual = _copy(inputs), _copy(inputs)
    _call_c(original, "kernel_gemm", expected)
    _call_c(optimized, "kernel_gemm", actual)
    _assert_same(actual, expected)


# ----- function locals around the region (tests/frontends/c/locals_pb.c) ----------------------------------

def _locals_inputs(function: str, rng) -> tuple[dict, dict]:
    """(arguments of the C function in its order, the values the kernel takes for the function's
    locals that its region only reads: what the C code sets them to before the region)."""
    n, size = 20, 24  # the arrays are declared with N = 24 elements per dimension
    if function == "clamp_small":
        return dict(n=n, x=_rand(rng, size), y=_rand(rng, size)), dict(eps=0.25)
    if function == "scaled_half":
        return dict(n=n, alpha=0.6, A=_rand(rng, size, size)), dict(half=n // 2 + 1, scale=0.6 * 0.6 + 0.5)
    if function == "reverse_prefix":
        return dict(n=n, r=0.1 * _rand(rng, size), y=_rand(rng, size)), dict(z=np.zeros(size))
    if function == "smooth_rows":
        return dict(n=n, alpha=0.9, A=_rand(rng, size, size), B=_rand(rng, size, size)), {}
    raise KeyError(function)


LOCALS = ["clamp_small", "scaled_half", "reverse_prefix", "smooth_rows"]
LOCALS_ARGUMENTS = {  # the read-only locals are parameters, the local array an array argument
    "clamp_small": [("n", "param"), ("x", "array"), ("y", "array"), ("eps", "scalar")],
    "scaled_half": [("n", "param"), ("A", "array"), ("half", "param"), ("scale", "scalar")],
    "reverse_prefix": [("n", "param"), ("r", "array"), ("y", "array"), ("z", "array")],
    "smooth_rows": [("n", "param"), ("alpha", "scalar"), ("A", "array"), ("B", "array")],
}


@pytest.fixture(scope="module")
def locals_library(tmp_path_factory):
    if GCC is None:
        pytest.skip("gcc is not installed")
    return _build(tmp_path_factory.mktemp("gcc"), C_DIR / "locals_pb.c")


@needs_gcc
@pytest.mark.parametrize("function", LOCALS)
def test_function_locals_match_gcc(function, locals_library):
    """po.from_c: locals set before the region are parameters of the kernel (given the values the
    C code sets), local arrays are array arguments, scalars assigned in the region temporaries."""
    kernel, = po.from_c(C_DIR / "locals_pb.c", function=function, include_dirs=[C_DIR])
    assert [(a.name, a.kind) for a in kernel.scop.arguments] == LOCALS_ARGUMENTS[function]
    inputs, before_region = _locals_inputs(function, np.random.default_rng(17))
    expected, actual = _copy(inputs), _copy(inputs)
    _call_c(locals_library, function, expected)
    _call_kernel(kernel, {**actual, **before_region}, "pluto")
    if function == "smooth_rows":  # the C line after the region (B[0][0] = prev), not in the kernel
        actual["B"][0, 0] = actual["A"][19, 19]
    _assert_same(actual, expected)


@needs_gcc
def test_cc_function_locals_match_gcc(tmp_path, locals_library):
    """polyopt cc keeps the regions in their functions: the locals are the C variables there."""
    out = tmp_path / "locals_opt.c"
    assert cli_main(["cc", str(C_DIR / "locals_pb.c"), f"-I{C_DIR}", "--tile", "4", "-o", str(out)]) == 0
    assert out.read_text().count("polyopt pluto schedule") == len(LOCALS)
    optimized = _build(tmp_path, out, ("-O3", "-fopenmp"), name="opt")
    for function in LOCALS:
        inputs, _ = _locals_inputs(function, np.random.default_rng(23))
        expected, actual = _copy(inputs), _copy(inputs)
        _call_c(locals_library, function, expected)
        _call_c(optimized, function, actual)
        _assert_same(actual, expected)


def test_local_scalar_read_before_the_region_assigns_it():
    """A scalar the region assigns is its temporary: a value from before the region is not
    carried in, so reading it first is refused (not silently zero)."""
    with pytest.raises(po.FrontendError) as info:
        po.from_c("void f(int n, double A[n]) {\n  double s = 1.0;\n#pragma scop\n"
                  "  A[0] = s;\n  s = A[1];\n#pragma endscop\n}\n")
    assert (info.value.line, info.value.column) == (4, 10)
    assert "'s' is read before the scop assigns it" in info.value.reason


# ----- polyopt cc: no region, -D a file overrides --------------------------------------------------

def test_cc_without_a_scop_is_an_error(tmp_path):
    path = tmp_path / "plain.c"
    path.write_text("void f(int n, double A[n]) {\n  for (int i = 0; i < n; i++) A[i] = 0.0;\n}\n")
    with pytest.raises(po.FrontendError, match="no scop found in"):
        optimize_c_file(path)
    result = subprocess.run([sys.executable, "-m", "polyopt.cli", "cc", str(path)], capture_output=True,
                            text=True)
    assert result.returncode != 0 and f"no scop found in {path}" in result.stderr, result
    assert result.stdout == ""


def test_define_overridden_by_the_file_warns(tmp_path):
    path = tmp_path / "sized.c"
    path.write_text("/* fixed size */\n#define N 40\nvoid f(double A[N]) {\n#pragma scop\n"
                    "  for (int i = 0; i < N; i++) A[i] = 0.0;\n#pragma endscop\n}\n")
    with pytest.warns(PolyoptWarning, match=rf"-DN=64 is not used: {path}, line 2 defines N again"):
        kernel, = po.from_c(path, defines={"N": 64})
    assert kernel.scop.arrays["A"].shape == ("40",)
    with warnings.catch_warnings():  # a guarded definition lets -D choose: no warning
        warnings.simplefilter("error", PolyoptWarning)
        kernel, = po.from_c(C_DIR / "gemm_pb.c", defines={"NI": 16, "NJ": None}, include_dirs=[C_DIR])
    assert kernel.scop.arrays["C"].shape[0] == "16"


def test_loop_variables_isl_reserves_and_sizes_named_like_internal_isl_variables(tmp_path):
    """``mod``/``floor`` as C loop variables broke isl's parser (a raw syntax error); a size
    named ``d0`` became the array-bounds set's own dimension (every call refused)."""
    source = tmp_path / "names.c"
    source.write_text('''
void k(int d0, double A[d0], double B[d0]) {
  int floor, mod;
#pragma scop
  for (floor = 1; floor < d0; floor++)
    for (mod = 0; mod < floor; mod++)
      A[floor] += B[mod];
#pragma endscop
}
''')
    (kernel,) = po.from_c(source)
    A, B = np.arange(7.0), np.arange(7.0) + 1
    expected = A.copy()
    for i in range(1, 7):
        expected[i] += B[:i].sum()
    kernel(A, B)
    np.testing.assert_array_equal(A, expected)


def test_a_size_isl_reserves_is_refused_with_its_line(tmp_path):
    source = tmp_path / "reserved.c"
    source.write_text('''void k(int mod, double A[mod]) {
  int i;
#pragma scop
  for (i = 0; i < mod; i++)
    A[i] = 0.0;
#pragma endscop
}
''')
    with pytest.raises(po.FrontendError, match="size parameter 'mod' is a word isl reserves"):
        po.from_c(source)
