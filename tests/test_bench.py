"""The benchmark harness (``polyopt bench``): JSON report, checks, external C files, docs section,
einsum cases. MINI sizes, one repeat: these test the harness, not the speed."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import time

import numpy as np
import pytest

import polyopt as po
from polyopt.bench import (TARGET_RUNNERS, BenchConfig, Runner, bench_einsum, bench_kernels,
                           write_docs, write_json)
from polyopt.bench import einsum_cuda
from polyopt.bench.report import section_name, summary_lines, table
from polyopt.bench.einsum_cases import CASES, case_label
from polyopt.bench.runners import abi_prototype
from polyopt.bench.kernels import summarize_kernels
from polyopt.bench.measure import check, interleave
from polyopt.bench.threads import blas_threads, openmp_threads
from polyopt.targets.cbuild import find_compiler
from polyopt.errors import BenchmarkError
from polyopt.cli import main

from conftest import needs_no_gpu

DOCS = Path(__file__).resolve().parent.parent / "docs"
FAST = ["--size", "MINI", "--repeats", "1", "--threads", "1"]

GEMM_C = """
#include <stdint.h>
void polyopt_gemm(int64_t NI, int64_t NJ, int64_t NK, double alpha, double beta,
                  double *C, double *A, double *B)
{
  for (int64_t i = 0; i < NI; i++) {
    for (int64_t j = 0; j < NJ; j++) C[i * NJ + j] *= %s;
    for (int64_t k = 0; k < NK; k++)
      for (int64_t j = 0; j < NJ; j++) C[i * NJ + j] += alpha * A[i * NK + k] * B[k * NJ + j];
  }
}
"""


def _run(argv: list[str], tmp_path: Path) -> tuple[int, dict]:
    out = tmp_path / "report.json"
    status = main(["bench", *FAST, *argv, "--json", str(out)])  # argv may override FAST
    return status, (json.loads(out.read_text()) if out.exists() else {})


@pytest.fixture(scope="module")
def gemm_report():
    return bench_kernels(["gemm"], BenchConfig(size="MINI", repeats=1, threads=1),
                         command="test")


def test_cli_two_kernels_writes_checked_json(tmp_path, capsys):
    status, report = _run(["gemm", "atax"], tmp_path)
    assert status == 0
    assert "gemm" in capsys.readouterr().out
    assert report["kind"] == "kernels" and report["correct"] is True
    assert report["command"].startswith("polyopt bench ") and "gemm atax" in report["command"]
    assert report["date"][:2] == "20"
    assert {"cpu", "cores", "load_average", "c_compiler", "environment"} <= set(report["machine"])
    assert report["config"]["threads"] == 1 and report["config"]["size"] == "MINI"
    assert [k["kernel"] for k in report["kernels"]] == ["gemm", "atax"]
    for kernel in report["kernels"]:
        runners = kernel["runners"]
        assert set(runners) == {"polyopt", "gcc", "numpy"}
        for result in runners.values():
            assert result["correct"] and result["max_rel_error"] <= 1e-8
            assert 0 < result["min_s"] <= result["median_s"] and len(result["times_s"]) == 1
            assert result["gflops"] == pytest.approx(kernel["flops"] / result["median_s"] / 1e9)
        assert runners["gcc"]["speedup_vs_gcc"] == 1.0
        assert runners["polyopt"]["speedup_vs_gcc"] == pytest.approx(
            runners["gcc"]["median_s"] / runners["polyopt"]["median_s"])
        assert "speedup_vs_numpy" in runners["polyopt"]
    summary = report["summary"]["polyopt"]
    assert summary["kernels"] == 2 and summary["kernels_with_numpy"] == 2
    speedups = [k["runners"]["polyopt"]["speedup_vs_gcc"] for k in report["kernels"]]
    assert summary["geomean_speedup_vs_gcc"] == pytest.approx(math.sqrt(speedups[0] * speedups[1]))


def test_autotune_runs_what_it_picked(tmp_path):
    status, report = _run(["atax", "--no-numpy", "--autotune"], tmp_path)
    assert status == 0 and report["config"]["polyopt"] == "autotune"
    ours = report["kernels"][0]["runners"]["polyopt"]
    assert ours["correct"] and ours["autotune"]["best"] in ours["description"]
    assert ours["autotune"]["best"] in ours["autotune"]["seconds"]


@pytest.mark.parametrize("built_elsewhere", [False, True], ids=["c-file", "shared-library"])
def test_external_code_runs_beside_gcc(tmp_path, built_elsewhere):
    external = tmp_path / "gemm_by_hand.c"
    external.write_text(GEMM_C % "beta")
    if built_elsewhere:  # as clang -mllvm -polly would leave it
        library = tmp_path / "gemm_by_hand.so"
        subprocess.run([find_compiler(), "-O2", "-shared", "-fPIC", str(external), "-o",
                        str(library)], check=True)
        external = library
    status, report = _run(["gemm", "--no-numpy", "--external", f"hand:gemm={external}"], tmp_path)
    assert status == 0
    runners = report["kernels"][0]["runners"]
    assert set(runners) == {"polyopt", "gcc", "hand"}
    assert runners["hand"]["correct"] and runners["hand"]["speedup_vs_gcc"] > 0
    assert str(external) in runners["hand"]["description"]
    assert report["summary"]["hand"]["kernels"] == 1


def test_wrong_external_result_is_reported_not_timed(tmp_path, capsys):
    source = tmp_path / "gemm_wrong.c"
    source.write_text(GEMM_C % "1.0")  # forgets beta
    status, report = _run(["gemm", "--external", f"gemm={source}"], tmp_path)
    assert status == 1
    wrong = report["kernels"][0]["runners"]["external"]
    assert wrong["correct"] is False and wrong["max_rel_error"] > 1e-3 and "median_s" not in wrong
    assert report["correct"] is False
    assert "MISMATCH" in capsys.readouterr().out


def test_external_without_the_function_names_the_prototype(tmp_path, capsys):
    source = tmp_path / "empty.c"
    source.write_text("void something_else(void) {}\n")
    status, _ = _run(["gemm", "--external", f"gemm={source}"], tmp_path)
    assert status == 2
    message = capsys.readouterr().err
    assert "polyopt_gemm" in message and "int64_t NI, int64_t NJ, int64_t NK" in message


def test_a_kernel_polyopt_cannot_compile_is_recorded_and_the_run_goes_on(tmp_path, capsys):
    status, report = _run(["gemm", "atax", "--option", "no_such_option=1"], tmp_path)
    assert status == 1 and report["correct"] is False
    assert [k["kernel"] for k in report["kernels"]] == ["gemm", "atax"]
    assert all("ScheduleError" in k["error"] and "no_such_option" in k["error"]
               for k in report["kernels"])
    out = capsys.readouterr().out
    assert "ERROR" in out and "gemm: not run: ScheduleError" in out


@needs_no_gpu
def test_cuda_target_without_gpu_is_a_clear_error(tmp_path, capsys):
    status, report = _run(["gemm", "--target", "cuda"], tmp_path)
    assert status == 2 and report == {}
    assert "polyopt bench: error: --target cuda: target 'cuda' needs CuPy" in capsys.readouterr().err


def test_f32_kernels_are_checked_at_f32_tolerance(tmp_path):
    status, report = _run(["gemm", "--dtype", "f32", "--no-numpy", "--size", "NI=9,NJ=7,NK=5"],
                          tmp_path)
    assert status == 0 and report["config"]["dtype"] == "f32"
    assert report["kernels"][0]["sizes"] == {"NI": 9, "NJ": 7, "NK": 5}
    ours = report["kernels"][0]["runners"]["polyopt"]
    assert ours["correct"] and 0 < ours["max_rel_error"] < 1e-4
    assert "float alpha" in abi_prototype(po.suite.get("gemm"), BenchConfig(dtype="f32"))


def test_kernel_only_times_get_their_own_columns_and_docs_section(tmp_path, monkeypatch):
    """A target whose runner reports kernel-only seconds (as the cuda runners do with CUDA
    events): kernel columns and GFLOP/s, and a docs section of its own beside the CPU one."""
    entry = po.suite.get("gemm")
    compiled = po.compile(entry.kernel)

    def timed(args) -> float:
        start = time.perf_counter()
        compiled(**args)
        return time.perf_counter() - start

    monkeypatch.setitem(TARGET_RUNNERS, "timed",
                        lambda entry, config, args: [Runner("polyopt", "self-timed", timed)])
    report = bench_kernels(["gemm"], BenchConfig(size="MINI", repeats=2, threads=1,
                                                 target="timed"))
    ours = report["kernels"][0]["runners"]["polyopt"]
    assert len(ours["kernel_times_s"]) == 2 and ours["kernel_gflops"] > 0
    header, rows = table(report)
    assert header[1:4] == ["polyopt kernel ms", "polyopt end-to-end ms", "gcc ms"]
    assert rows[0][-1] == "ok"
    assert section_name(report) == "timed kernels"
    doc = tmp_path / "performance.md"
    doc.write_text((DOCS / "performance.md").read_text())
    write_docs(report, doc)
    text = doc.read_text()
    assert text.count("<!-- BEGIN polyopt bench timed kernels:") == 1
    assert text.count("<!-- BEGIN polyopt bench kernels:") == 1  # the CPU section stays


@pytest.mark.parametrize("argv, expected", [
    (["gemm", "--target", "tpu"], "no benchmark runners for target 'tpu'"),
    (["no-such-kernel"], "no suite kernel 'no-such-kernel'"),
    (["gemm", "--size", "HUGE"], "unknown preset 'HUGE'"),
    (["gemm", "--size", "NI=4,NJ=5"], "gemm takes exactly the sizes NI, NJ, NK"),
    (["gemm", "--size", "NI=4,NJ=x"], "expected a preset or KEY=INT"),
    (["gemm", "--threads", "0"], "--threads and --repeats must be at least 1"),
    (["--einsum", "gemm"], "--einsum runs its own cases"),
    (["--einsum", "--target", "tpu"], "--einsum runs on the cpu and cuda targets, not 'tpu'"),
    (["gemm", "--autotune", "--tile", "32"], "--autotune picks the scheduler"),
    (["gemm", "--autotune", "--target", "cuda"], "--autotune tunes the cpu target only"),
    (["gemm", "--external", "2mm=x.c"], "2mm is not among the kernels"),
    (["gemm", "--external", "gemm"], "expected [LABEL:]KERNEL=FILE"),
    ([], "name suite kernels"),
])
def test_bad_requests_get_a_clear_error(argv, expected, tmp_path, capsys):
    status, report = _run(argv, tmp_path)
    assert status == 2 and report == {}
    assert expected in capsys.readouterr().err


def _without_section(text: str, kind: str = "kernels") -> str:
    begin, end = f"<!-- BEGIN polyopt bench {kind}", f"<!-- END polyopt bench {kind} -->"
    if begin not in text:
        return text
    start = text.index(begin)
    return text[:start] + text[text.index(end, start) + len(end):]


def test_docs_section_regenerated_in_place(gemm_report, tmp_path):
    doc = tmp_path / "performance.md"
    original = (DOCS / "performance.md").read_text()
    doc.write_text(original)
    write_docs(gemm_report, doc)
    first = doc.read_text()
    assert _without_section(first).rstrip() == _without_section(original).rstrip()
    doc.write_text(first + "\nA hand-written line after the section.\n")
    write_docs(gemm_report, doc)  # the second time the section is replaced, not appended
    second = doc.read_text()
    assert second.count("<!-- BEGIN polyopt bench kernels") == 1
    assert second.endswith("A hand-written line after the section.\n")
    assert "| gemm |" in second and "`test`" in second
    pytest.importorskip("matplotlib")
    assert (tmp_path / "img" / "bench_kernels.png").stat().st_size > 1000
    assert "![" in second and "(img/bench_kernels.png)" in second


def test_docs_from_a_saved_report(gemm_report, tmp_path, capsys):
    saved, doc = tmp_path / "saved.json", tmp_path / "performance.md"
    write_json(gemm_report, saved)
    assert main(["bench", "--from-json", str(saved), "--write-docs", str(doc)]) == 0
    assert "| gemm |" in doc.read_text() and "gemm" in capsys.readouterr().out
    saved.write_text("{}")
    assert main(["bench", "--from-json", str(saved)]) == 2
    assert "not a polyopt bench report" in capsys.readouterr().err


def test_docs_with_a_broken_section_are_left_alone(gemm_report, tmp_path):
    doc = tmp_path / "performance.md"
    doc.write_text("# hand-written\n<!-- BEGIN polyopt bench kernels: old -->\nno end marker\n")
    with pytest.raises(BenchmarkError, match="no end marker"):
        write_docs(gemm_report, doc)
    assert doc.read_text().endswith("no end marker\n") and not (tmp_path / "img").exists()


def test_docs_without_matplotlib_still_get_the_table(gemm_report, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    doc = tmp_path / "performance.md"
    written = write_docs(gemm_report, doc)
    text = doc.read_text()
    assert written == [doc] and not (tmp_path / "img").exists()
    assert "| gemm |" in text and "No chart: matplotlib is not installed" in text


def test_einsum_cases_checked_against_numpy():
    report = bench_einsum(scale=0.05, repeats=1, threads=1)
    assert report["correct"] and len(report["cases"]) == len(CASES)
    for case in report["cases"]:
        assert case["runners"]["polyopt"]["speedup_vs_numpy.einsum"] > 0
    assert set(report["summary"]["fraction_of_numpy_matmul"]) == {
        "ij,jk->ik 26x26 26x26", "ij,jk->ik 50x50 50x50", "bij,bjk->bik 2x6x6 2x6x6", "ijk,jl->ikl 3x3x3 3x3"}
    views = {case_label(c): c["numpy_einsum_returns_view"] for c in report["cases"] if c["subscripts"] == "ii->i"}
    assert views == {"ii->i 205x205": True, "ii->i 205x205 out=": False}


def test_check_refuses_nan_and_wrong_shapes():
    expected = {"x": np.ones(3), "alpha": 1.5}
    assert check({"x": np.ones(3) * (1 + 1e-12)}, expected)["correct"]
    assert check({"x": np.array([1.0, np.nan, 1.0])}, expected) == {"max_rel_error": None,
                                                                   "correct": False}
    assert not check({"x": np.ones(4)}, expected)["correct"]


def test_summary_geometric_means_over_all_and_slow_kernels():
    def row(gcc_s, ours_s, numpy_s=None):
        runners = {"gcc": {"median_s": gcc_s}, "polyopt": {"median_s": ours_s,
                                                           "speedup_vs_gcc": gcc_s / ours_s}}
        if numpy_s:
            runners["polyopt"]["speedup_vs_numpy"] = numpy_s / ours_s
        return {"runners": runners}

    summary = summarize_kernels([row(0.01, 0.04), row(0.2, 0.05, numpy_s=0.1)])["polyopt"]
    assert summary["geomean_speedup_vs_gcc"] == pytest.approx(1.0)  # sqrt(0.25 * 4)
    assert summary["kernels"] == 2 and summary["kernels_where_gcc_over_0.05s"] == 1
    assert summary["geomean_speedup_vs_gcc_where_gcc_over_0.05s"] == pytest.approx(4.0)
    assert summary["geomean_speedup_vs_numpy"] == pytest.approx(2.0)
    assert summary["kernels_with_numpy"] == 1


def test_thread_settings_are_restored_and_said(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    with openmp_threads(1) as said:
        assert os.environ["OMP_NUM_THREADS"] == "1" and "OMP_NUM_THREADS=1" in said
    assert os.environ["OMP_NUM_THREADS"] == "7"
    monkeypatch.setitem(sys.modules, "threadpoolctl", None)  # not installed
    with blas_threads(1) as said:
        assert "threadpoolctl is not installed" in said


def test_interleave_keeps_runner_reported_kernel_times():
    order = []
    samples = interleave({"a": lambda: order.append("a") or 0.25, "b": lambda: order.append("b")},
                         repeats=2, reset=lambda: order.append("reset"))
    assert order == ["reset", "a", "reset", "b"] * 2
    assert samples["a"]["kernel"] == [0.25, 0.25] and "kernel" not in samples["b"]
    assert len(samples["a"]["wall"]) == len(samples["b"]["wall"]) == 2


def test_a_cuda_einsum_report_gets_its_own_table_and_section_name():
    row = {"subscripts": "ij,jk->ik", "shapes": [[4, 4], [4, 4]], "dtype": "f32", "precision": "exact",
           "correct": True, "runners": {"polyopt": {"correct": True, "median_s": 1e-3, "min_s": 1e-3}}}
    report = {"kind": "einsum", "config": {"target": "cuda"}, "cases": [row], "summary": einsum_cuda.summary([row]),
              "launch_overhead": {"subscripts": "ij,jk->ik", "shapes": [[16, 16], [16, 16]], "calls": 1,
                                  "host_us": {"po.einsum (cupy)": 9.0, "cupy.einsum": 20.0}}}
    header, rows = table(report)
    assert header[:4] == ["subscripts", "shapes", "dtype", "precision"] and len(rows) == 2
    assert section_name(report) == "cuda einsum"
    assert any("9.0 us" in line for line in summary_lines(report))
