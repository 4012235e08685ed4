"""Integer semantics at the edges: sizes and integer scalars out of their native range are
refused (ctypes would wrap them), integer division and remainder by zero raise
ZeroDivisionError instead of killing the process with SIGFPE, and ``INT64_MIN // -1`` wraps as
numpy's does. Native crashes are checked in a child process, so a SIGFPE fails the test instead
of ending pytest."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import polyopt as po
from polyopt import f64, i32, i64
from polyopt.errors import ArgumentRangeError, PolyoptError


@po.kernel
def steps(T: int, A: f64["N"]):
    for t in range(T):
        for i in range(N):
            A[i] = A[i] + 1.0


@po.kernel
def add_scalar(s: i32, A: i32["N"]):
    for i in range(N):
        A[i] = A[i] + s


@pytest.mark.parametrize("value", [2**64 + 3, 2**63, -2**63 - 1])
def test_out_of_range_size_is_refused_naming_the_parameter(value):
    A = np.zeros(2)
    with pytest.raises(ArgumentRangeError, match=r"steps\(\): size parameter 'T' = -?\d+ is outside the range of i64") as info:
        steps(value, A)
    assert info.value.name == "T"
    assert isinstance(info.value, OverflowError) and isinstance(info.value, ValueError)
    assert not A.any()  # nothing ran
    with pytest.raises(ArgumentRangeError):
        po.interpret(steps, value, A)


def test_in_range_sizes_still_run():
    A = np.zeros(2)
    steps(3, A)
    steps(np.int64(2), A)
    np.testing.assert_array_equal(A, [5.0, 5.0])


@pytest.mark.parametrize("value", [2**31, -2**31 - 1, np.int64(2**40)])
def test_out_of_range_integer_scalar_is_refused(value):
    A = np.zeros(3, np.int32)
    with pytest.raises(ArgumentRangeError, match="scalar 's'.*range of i32"):
        add_scalar(value, A)


def test_argument_errors_are_polyopt_errors_and_builtin_ones():
    A = np.zeros(2)
    with pytest.raises(TypeError) as info:
        steps(1, A.astype(np.float32))
    assert isinstance(info.value, PolyoptError)
    with pytest.raises(ValueError) as info:
        steps(1, A, num_threads=0)
    assert isinstance(info.value, PolyoptError)
    with pytest.raises(ValueError) as info:
        steps(1, np.zeros((2, 2)))
    assert isinstance(info.value, PolyoptError)


@po.kernel
def divide(A: i64["N"], B: i64["N"], Q: i64["N"], R: i64["N"]):
    for i in range(N):
        Q[i] = A[i] // B[i]
        R[i] = A[i] % B[i]


def _run_child(code: str, tmp_path) -> subprocess.CompletedProcess:
    """``code`` run as a script (kernels need a source file) in a child Python."""
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(code))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)


def test_integer_division_by_zero_raises_in_a_child_process(tmp_path):
    """Before: SIGFPE (return code -8). Now: KernelZeroDivisionError, a ZeroDivisionError, on one
    thread and on a thread team (the parallel loop's status reaches the caller)."""
    result = _run_child("""
        import numpy as np, polyopt as po
        from polyopt import i64
        from polyopt.errors import KernelZeroDivisionError

        @po.kernel
        def divide_2d(A: i64["N", "N"], B: i64["N", "N"], Q: i64["N", "N"]):
            for i in range(N):
                for j in range(N):
                    Q[i, j] = A[i, j] % B[i, j]

        A = np.full((40, 40), 7, np.int64); B = np.ones((40, 40), np.int64); B[33, 5] = 0
        for threads in (1, 2, 3):
            try:
                divide_2d(A, B, np.zeros((40, 40), np.int64), num_threads=threads)
            except KernelZeroDivisionError as error:
                assert isinstance(error, ZeroDivisionError)
                print("raised", error)
        B[33, 5] = 2
        Q = np.zeros((40, 40), np.int64)
        divide_2d(A, B, Q, num_threads=2)  # the status does not stick to the next call
        assert (Q == A % B).all()
        print("ok")
    """, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["raised divide_2d(): integer division or modulo by zero"] * 3 + ["ok"]


def test_division_by_zero_in_the_interpreter_raises():
    A, B = np.array([1, 2]), np.array([1, 0])
    with pytest.raises(ZeroDivisionError):
        po.interpret(divide, A, B, np.zeros(2, np.int64), np.zeros(2, np.int64))


def test_int64_min_floor_divided_by_minus_one_wraps_like_numpy():
    A = np.array([np.iinfo(np.int64).min, np.iinfo(np.int64).min, 7, -7, 7, 0])
    B = np.array([-1, 3, -1, 2, -2, -5])
    with np.errstate(all="ignore"):
        expected = [A // B, A % B]
    got = [np.zeros(6, np.int64) for _ in range(2)]
    divide(A, B, *got)
    reference = [np.zeros(6, np.int64) for _ in range(2)]
    po.interpret(divide, A, B, *reference)
    for mine, theirs, interpreted in zip(got, expected, reference):
        np.testing.assert_array_equal(mine, theirs)
        np.testing.assert_array_equal(interpreted, theirs)


def test_c_emitter_helpers_do_not_trap(tmp_path):
    """The C translation (built by gcc for baselines) divides by zero without SIGFPE: 0, and
    ``INT64_MIN // -1`` wraps; it runs in a child process."""
    ck = po.compile(divide, algorithm="original")
    source = tmp_path / "divide.c"
    source.write_text(ck.c_source + textwrap.dedent("""
        #include <stdio.h>
        int main(void) {
          int64_t A[3] = {INT64_MIN, 5, 9}, B[3] = {-1, 0, -1}, Q[3], R[3];
          polyopt_divide(3, A, B, Q, R);
          printf("%ld %ld %ld %ld %ld %ld\\n", Q[0], Q[1], Q[2], R[0], R[1], R[2]);
          return 0;
        }
    """))
    program = tmp_path / "divide"
    subprocess.run(["gcc", "-O2", "-std=c99", "-o", str(program), str(source), "-lm"], check=True)
    result = subprocess.run([str(program)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    assert result.stdout.split() == [str(-2**63), "0", "-9", "0", "0", "0"]
