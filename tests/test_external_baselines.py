"""benchmarks/external_baselines.py: Pluto and Polly files for ``polyopt bench --external``.

The parts without the tools (the SCoP-marked C, the reasons, the argument list) always run; the
end-to-end test runs where clang-14 (with Polly) and Pluto's polycc are installed and is skipped,
saying which is missing, elsewhere (CI has neither; benchmarks/README.md says how to install them).
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

import polyopt as po
from polyopt.bench.measure import check, copy_args
from polyopt.cli import main as polyopt_main
from polyopt.targets.cbuild import CBuiltKernel, find_compiler

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "external_baselines.py"
_spec = importlib.util.spec_from_file_location("external_baselines", SCRIPT)
eb = sys.modules["external_baselines"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(eb)

POLYCC = os.environ.get("POLYCC", "polycc")
CLANG = os.environ.get("POLLY_CLANG", "clang-14")


def _between_pragmas(source: str) -> str:
    return source.split("#pragma scop\n")[1].split("#pragma endscop")[0]


@pytest.mark.parametrize("kernel", ["gemm", "durbin", "nussinov", "adi"])
def test_scop_source_marks_the_loop_nest(kernel):
    original = eb.original_c(kernel)
    marked = eb.scop_source(original)
    assert marked.count("#pragma scop\n") == 1 and marked.count("#pragma endscop\n") == 1
    nest = _between_pragmas(marked)
    assert "for (long" not in marked and not re.search(r"^\s*(double|float|long) ", nest, re.M)
    # every statement from the first loop on is inside the SCoP, unchanged; those before it
    # (scalar set-up) stay outside, where Pluto cannot mix up the size parameters
    loops = original[original.index("\n  for (long"):]
    statements = re.findall(r"^.*/\* S\d+ \*/$", loops, re.M)
    assert statements and all(line.replace("long ", "") in nest for line in statements)
    assert nest.startswith("  for (")
    # the iterators are declared before the pragma, the rest of the text is the original's
    before = marked.split("#pragma scop")[0]
    iterators = sorted(set(re.findall(r"for \(long (\w+) =", original)))
    assert re.search(rf"^  long {', '.join(iterators)};$", before, re.M)
    assert re.sub(r"^  long [\w, ]+;\n|^#pragma (end)?scop\n|long ", "", marked, flags=re.M) \
        == original.replace("long ", "")


@pytest.mark.skipif(find_compiler() is None, reason="no C compiler")
def test_scop_source_builds_and_computes_like_the_original():
    entry = po.suite.get("seidel-2d")
    compiled = po.compile(entry.kernel, algorithm="original")
    built = CBuiltKernel(compiled, source=eb.scop_source(compiled.c_source))
    args = entry.inputs(entry.sizes("MINI"))
    expected = copy_args(args)
    entry.reference(**expected)
    built(**args)
    assert check(args, expected)["correct"]


def test_external_arguments():
    baselines = [eb.Baseline("pluto", "gemm", Path("/o/gemm.pluto.c")),
                 eb.Baseline("polly", "jacobi-2d", Path("/o/jacobi-2d.polly.so"), "1 SCoP")]
    assert eb.external_arguments(baselines) == [
        "--external pluto:gemm=/o/gemm.pluto.c", "--external polly:jacobi-2d=/o/jacobi-2d.polly.so"]


def test_polly_reason():
    rejected = [  # cholesky: three candidate regions, the outermost (line 16) calls sqrt
        ("23", "The following errors keep this region from being a Scop."),
        ("23", "No profitable polyhedral optimization found"),
        ("24", "Invalid Scop candidate ends here."),
        ("16", "The following errors keep this region from being a Scop."),
        ("26", "This function call cannot be handled. Try to inline it."),
        ("26", "Invalid Scop candidate ends here."),
        ("17", "The following errors keep this region from being a Scop."),
        ("21", 'The array subscript of "UNKNOWN" is not affine'),
        ("21", "Invalid Scop candidate ends here.")]
    assert eb.polly_reason(rejected) == \
        "region at line 16: This function call cannot be handled. Try to inline it."
    dismissed = [("13", "SCoP begins here."), ("22", "Inbounds assumption:\t[p_0] -> {  : false }"),
                 ("13", "No-aliasing assumption:\t[p_0] -> {  : false }"),
                 ("32", "SCoP ends here but was dismissed.")]
    assert eb.polly_reason(dismissed) == \
        "SCoP dismissed, assumption false: Inbounds assumption, No-aliasing assumption"


def test_missing_tools_leave_every_kernel_out_with_the_reason(tmp_path):
    lines = []
    passed, skipped = eb.make_baselines(["gemm"], tmp_path, polycc="no-such-polycc",
                                        clang="no-such-clang", log=lines.append)
    assert passed == []
    assert skipped == {("pluto", "gemm"): "no-such-polycc: not found",
                       ("polly", "gemm"): "no-such-clang: not found"}
    assert len(lines) == 2 and all("LEFT OUT" in line for line in lines)
    assert (tmp_path / "gemm.c").read_text() == eb.original_c("gemm")
    assert "#pragma scop" in (tmp_path / "gemm.scop.c").read_text()


def _missing_tools() -> str:
    missing = [tool for tool in (POLYCC, CLANG) if shutil.which(tool) is None]
    if not missing:
        return ""
    return f"{' and '.join(missing)} not installed (benchmarks/README.md says how)"


@pytest.mark.skipif(bool(_missing_tools()), reason=_missing_tools())
def test_pluto_and_polly_files_pass_the_bench_harness(tmp_path):
    assert eb.main(["jacobi-2d", "--out", str(tmp_path), "--polycc", POLYCC, "--clang", CLANG,
                    "--check-size", "MINI", "--threads", "2"]) == 0
    arguments = (tmp_path / "externals.txt").read_text().split()
    assert arguments == ["--external", f"pluto:jacobi-2d={tmp_path}/jacobi-2d.pluto.c",
                         "--external", f"polly:jacobi-2d={tmp_path}/jacobi-2d.polly.so"]
    assert "#pragma omp parallel for" in (tmp_path / "jacobi-2d.pluto.c").read_text()
    report = tmp_path / "report.json"
    assert polyopt_main(["bench", "jacobi-2d", "--size", "SMALL", "--repeats", "1",
                         "--threads", "2", "--json", str(report), *arguments]) == 0
    runners = json.loads(report.read_text())["kernels"][0]["runners"]
    assert runners["pluto"]["correct"] and runners["polly"]["correct"]
