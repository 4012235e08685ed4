"""C's small and unsigned integer types (u8, i8, i16, u16, u32, u64): data of those dtypes is
accepted, arithmetic wraps at the type's width, unsigned division, remainder and comparison
are unsigned, and operands follow C's usual arithmetic conversions (integer promotion to int,
unsigned wins at equal rank). Checked against gcc on a C scop (po.from_c) and against numpy's
wrap-around for the DSL; the interpreter agrees with both."""
from __future__ import annotations

import ctypes
import shutil
import subprocess

import numpy as np
import pytest

import polyopt as po
from polyopt import i8, i16, i32, u8, u16, u32, u64
from polyopt.types import i64, integer_promotion, promote

C_SOURCE = """\
void small(int n, unsigned char A[n], unsigned char B[n], unsigned char C[n], int D[n],
           signed char S[n], short H[n], unsigned short W[n], char K[n]) {
#pragma scop
  for (int i = 0; i < n; i++) {
    C[i] = A[i] + B[i];
    D[i] = A[i] + B[i] > 200;
    S[i] = S[i] * 3 + A[i];
    H[i] = H[i] * 300 - W[i];
    W[i] = W[i] / (A[i] + 1) + W[i] % 13;
    K[i] = -K[i] / 3 + (K[i] < A[i]);
  }
#pragma endscop
}

void wide(int n, unsigned int U[n], unsigned long L[n], int I[n], long J[n], int R[n]) {
#pragma scop
  for (int i = 0; i < n; i++) {
    R[i] = I[i] < U[i];
    U[i] = U[i] * 7 + I[i];
    L[i] = L[i] / (U[i] % 1000 + 1) - J[i] + L[i] % 1000;
    J[i] = J[i] < L[i];
  }
#pragma endscop
}
"""


def test_promotion_rules():
    assert promote(u8, u8) == promote(i8, u16) == i32  # integer promotion
    assert promote(i32, u32) == u32 and promote(i64, u32) == i64 and promote(i32, u64) == u64
    assert promote(u32, u32) == u32 and integer_promotion(i16) == i32 and integer_promotion(u64) == u64
    assert {t.name for t in (i8, u8, i16, u16, u32, u64)} <= set(po.types.ELEMENT_TYPES)


def _inputs(rng, n=64):
    small = {"n": n, "A": rng.integers(0, 256, n, dtype=np.uint8), "B": rng.integers(0, 256, n, dtype=np.uint8),
             "C": np.zeros(n, np.uint8), "D": np.zeros(n, np.int32),
             "S": rng.integers(-128, 128, n, dtype=np.int8), "H": rng.integers(-2**15, 2**15, n, dtype=np.int16),
             "W": rng.integers(0, 2**16, n, dtype=np.uint16), "K": rng.integers(-128, 128, n, dtype=np.int8)}
    wide = {"n": n, "U": rng.integers(0, 2**32 - 1, n, dtype=np.uint32),
            "L": rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=False),
            "I": rng.integers(-2**31, 2**31, n, dtype=np.int32), "J": rng.integers(-2**63, 2**63 - 1, n, dtype=np.int64),
            "R": np.zeros(n, np.int32)}
    wide["U"][:4] = [0, 2**32 - 2, 5, 2**31]  # edges: unsigned comparison with negative ints
    wide["I"][:4] = [-1, -1, 5, -2**31]
    return {"small": small, "wide": wide}


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")
@pytest.mark.parametrize("algorithm", ["original", "pluto"])
def test_c_types_match_gcc(tmp_path, algorithm):
    source = tmp_path / "types.c"
    source.write_text(C_SOURCE)
    library = tmp_path / "types.so"
    subprocess.run(["gcc", "-O0", "-std=gnu11", "-Wno-unknown-pragmas", "-shared", "-fPIC", str(source),
                    "-o", str(library)], check=True)
    gcc = ctypes.CDLL(str(library))
    kernels = {k.name: k for k in po.from_c(str(source))}
    for name, values in _inputs(np.random.default_rng(3)).items():
        kernel = next(k for k in kernels.values() if k.name.startswith(name))
        expected = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in values.items()}
        getattr(gcc, name)(*[ctypes.c_void_p(v.ctypes.data) if isinstance(v, np.ndarray) else ctypes.c_int(v)
                             for v in expected.values()])
        for run in (lambda *a, **k: po.compile(kernel, algorithm=algorithm)(*a, **k),
                    lambda *a, **k: po.interpret(kernel, *a, **k)):
            actual = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in values.items()}
            run(**{a.name: actual[a.name] for a in kernel.scop.arguments})
            for key, value in expected.items():
                if isinstance(value, np.ndarray):
                    np.testing.assert_array_equal(actual[key], value, err_msg=f"{name}: {key}")


@po.kernel
def wraps(A: u8["N"], B: u8["N"], C: u8["N"], D: i32["N"], E: u32["N"], F: u64["N"], G: i16["N"]):
    for i in range(N):
        C[i] = A[i] + B[i]
        D[i] = A[i] + B[i] > 200
        E[i] = E[i] // (F[i] + 1) + E[i] % 7
        F[i] = F[i] * 3 - 1
        G[i] = G[i] * 300 + (-A[i])


def test_dsl_wraps_like_numpy():
    rng = np.random.default_rng(5)
    A, B = rng.integers(0, 256, 32, dtype=np.uint8), rng.integers(0, 256, 32, dtype=np.uint8)
    E = rng.integers(0, 2**32, 32, dtype=np.uint32)
    F = rng.integers(0, 2**64 - 1, 32, dtype=np.uint64, endpoint=False)
    G = rng.integers(-2**15, 2**15, 32, dtype=np.int16)
    with np.errstate(all="ignore"):
        expected = [A + B, (A.astype(np.int32) + B > 200).astype(np.int32),
                    (E.astype(np.uint64) // (F + np.uint64(1)) + E % np.uint32(7)).astype(np.uint32),
                    F * np.uint64(3) - np.uint64(1), (G.astype(np.int32) * 300 - A).astype(np.int16)]
    for run in (wraps, lambda *a: po.interpret(wraps, *a)):
        out = [A.copy(), B.copy(), np.zeros(32, np.uint8), np.zeros(32, np.int32), E.copy(), F.copy(), G.copy()]
        run(*out)
        for got, want in zip(out[2:], expected):
            np.testing.assert_array_equal(got, want)


def test_unsigned_division_by_zero_raises():
    E, F = np.ones(4, np.uint32), np.full(4, 2**64 - 1, np.uint64)  # F + 1 wraps to 0
    out = [np.zeros(4, np.uint8), np.zeros(4, np.uint8), np.zeros(4, np.uint8), np.zeros(4, np.int32), E,
           F, np.zeros(4, np.int16)]
    with pytest.raises(ZeroDivisionError):
        wraps(*out)


def test_unsigned_scalar_range_and_dtype_checks():
    @po.kernel
    def add(s: u8, A: u8["N"]):
        for i in range(N):
            A[i] = A[i] + s

    A = np.array([250, 3], np.uint8)
    add(10, A)
    np.testing.assert_array_equal(A, [4, 13])
    with pytest.raises(OverflowError, match="scalar 's'"):
        add(256, A)
    with pytest.raises(OverflowError):
        add(-1, A)
    with pytest.raises(TypeError, match="dtype int8"):
        add(1, A.view(np.int8))
