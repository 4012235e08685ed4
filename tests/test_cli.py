"""The ``polyopt`` command's error reporting, run as users run it (``python -m polyopt`` in a
child process): one ``polyopt: error:`` line (and the source line of a C error), exit status 1
for bad input and 2 for bad usage, ``--debug`` for the traceback, ``--version``."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import polyopt as po

NON_AFFINE = """\
void f(int n, double A[n]) {
#pragma scop
  for (int i = 0; i < n; i++)
    A[i] = A[i*i];
#pragma endscop
}
"""

GOOD = NON_AFFINE.replace("A[i*i]", "A[i] + 1")


def polyopt(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "polyopt", *args], capture_output=True, text=True,
                          timeout=300)


@pytest.fixture
def c_file(tmp_path: Path):
    def write(text: str) -> str:
        path = tmp_path / "input.c"
        path.write_text(text)
        return str(path)
    return write


def test_cc_frontend_error_is_one_line_with_position_and_source_line(c_file):
    path = c_file(NON_AFFINE)
    result = polyopt("cc", path)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [
        f"polyopt: error: {path}:4:14: non-affine subscript of 'A': product of two non-constant terms",
        "    A[i] = A[i*i];",
        "             ^",
    ]
    assert result.stdout == ""


def test_missing_file_is_bad_input(tmp_path):
    missing = tmp_path / "missing.c"
    result = polyopt("cc", str(missing))
    assert (result.returncode, result.stderr) == (1, f"polyopt: error: {missing}: No such file or directory\n")


def test_unwritable_output_is_bad_input(c_file, tmp_path):
    target = tmp_path / "no-such-dir" / "out.c"
    result = polyopt("cc", c_file(GOOD), "-o", str(target))
    assert (result.returncode, result.stderr) == (1, f"polyopt: error: {target}: No such file or directory\n")


def test_unknown_suite_kernel_is_a_usage_error():
    result = polyopt("show", "foo")
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith("polyopt: error: unknown suite kernel 'foo'; choose from correlation,")


def test_unknown_show_part_is_a_usage_error():
    result = polyopt("show", "gemm", "--what", "scop,nonsense")
    assert result.returncode == 2
    assert result.stdout == ""  # refused before printing any part
    assert result.stderr == ("polyopt: error: --what: unknown part 'nonsense'; choose from scop, deps, "
                             "schedule, ast, c, ir, asm-ir\n")


def test_unknown_demo_kernel_is_a_usage_error():
    result = polyopt("demo", "--kernel", "foo")
    assert result.returncode == 2
    assert result.stderr.startswith("polyopt: error: --kernel: unknown suite kernel 'foo'")


def test_argparse_usage_errors_exit_2():
    result = polyopt("cc")
    assert result.returncode == 2
    assert "the following arguments are required: file" in result.stderr


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_keeps_the_traceback(c_file, where):
    path = c_file(NON_AFFINE)
    args = ["--debug", "cc", path] if where == "before" else ["cc", path, "--debug"]
    result = polyopt(*args)
    assert result.returncode == 1
    assert "Traceback (most recent call last)" in result.stderr
    assert "polyopt.errors.FrontendError" in result.stderr


def test_version():
    result = polyopt("--version")
    assert (result.returncode, result.stdout) == (0, f"polyopt {po.__version__}\n")


def test_list_and_cc_still_succeed(c_file):
    listed = polyopt("list")
    assert listed.returncode == 0 and "gemm" in listed.stdout
    converted = polyopt("cc", c_file(GOOD))
    assert converted.returncode == 0 and "#pragma scop" in converted.stdout and converted.stderr == ""


def test_error_lines_of_a_multi_line_polyopt_error():
    """A PolyoptError's first line follows ``polyopt: error:``, its detail lines stay below it."""
    from polyopt.cli import error_lines
    error = po.ScheduleError("no schedule\n    detail")
    assert error_lines(error) == ["polyopt: error: no schedule", "    detail"]
    assert error_lines(KeyError("x")) == [
        "polyopt: error: internal error: KeyError: 'x' (rerun with --debug for the traceback)"]


def test_bench_errors_are_one_line(tmp_path):
    """bench reports its own request errors in one line with exit status 2 (its documented
    status for a request that cannot run)."""
    unknown = polyopt("bench", "nosuch")
    assert unknown.returncode == 2 and len(unknown.stderr.splitlines()) == 1
    assert unknown.stderr.startswith("polyopt bench: error: no suite kernel 'nosuch'")
    missing = tmp_path / "report.json"
    result = polyopt("bench", "--from-json", str(missing))
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith(f"polyopt bench: error: --from-json {missing}:")
