"""Pluto and Polly versions of suite kernels, as ``polyopt bench --external`` files.

Issue 15 wants polyopt ahead of Pluto (``polycc --tile --parallel``) and Polly (``clang -mllvm
-polly -mllvm -polly-parallel``) wherever either beats gcc. Both start from the very loops the gcc
baseline builds: the C emitter's output of the original schedule (``po.compile(kernel,
algorithm="original").c_source``). For every kernel this writes to ``--out``:

- ``KERNEL.c``: that C, as it is;
- ``KERNEL.scop.c``: the same with the loops between ``#pragma scop`` / ``#pragma endscop`` and
  their iterators declared before (:func:`scop_source` says why); sizes stay the function's
  ``int64_t`` parameters, so the code serves any size;
- ``KERNEL.pluto.c``: ``polycc KERNEL.scop.c --tile --parallel``, a C file the harness builds
  like the gcc baseline;
- ``KERNEL.polly.so``: ``KERNEL.c`` built by clang with Polly, loaded by the harness as it is.

Each file is then built or loaded the harness's own way (``polyopt.bench.runners.
external_runners``) and checked against the suite's numpy reference at ``--check-size`` with
``--threads`` threads. A kernel a tool cannot handle (the tool fails, Polly finds no SCoP, the
result is wrong) is printed with a one-line reason and left out of the arguments; the others'
``--external pluto:KERNEL=FILE --external polly:KERNEL=FILE`` arguments are printed and written to
``OUT/externals.txt``. Installing the tools: benchmarks/README.md.

    python benchmarks/external_baselines.py gemm jacobi-2d --out /tmp/baselines --polycc polycc
    polyopt bench gemm jacobi-2d --size MEDIUM --threads 2 $(cat /tmp/baselines/externals.txt)
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

import polyopt as po
from polyopt.bench.config import BenchConfig, External
from polyopt.bench.measure import check, copy_args
from polyopt.bench.runners import external_runners
from polyopt.bench.threads import openmp_threads
from polyopt.errors import PolyoptError

#: Polly as issue 15 names it. Debian's clang-14 has Polly linked in (loading LLVMPolly.so as a
#: plugin on top aborts: options registered twice). Its parallel code calls libgomp (Polly's
#: default GNU OpenMP back end), the runtime gcc's ``-fopenmp`` code and the harness's thread
#: setting use, so it is linked with ``-lgomp`` rather than clang's ``-fopenmp`` (libomp).
POLLY_FLAGS = ("-O3", "-march=native", "-mllvm", "-polly", "-mllvm", "-polly-parallel")
#: Polly's remarks: where a SCoP was modeled (and whether it was dismissed), and why a candidate
#: region was rejected.
POLLY_REMARKS = ("-Rpass-analysis=polly-scops", "-Rpass-missed=polly-detect")
#: Pluto as issue 15 names it (default tile sizes, OpenMP ``parallel for`` pragmas).
PLUTO_FLAGS = ("--tile", "--parallel")
TOOLS = ("pluto", "polly")


class ToolFailure(Exception):
    """A tool could not handle a kernel; the message is the one-line reason reported."""


@dataclass(frozen=True)
class Baseline:
    """One tool's file for one kernel (``note``: what the tool did, e.g. Polly's SCoP count)."""

    label: str
    kernel: str
    path: Path
    note: str = ""


def original_c(kernel: str, dtype: str = "f64") -> str:
    """The C emitter's output of the kernel's original loops: what the gcc baseline builds."""
    entry = po.suite.get(kernel)
    return po.compile(BenchConfig(dtype=dtype).kernel(entry), algorithm="original").c_source


def scop_source(c_source: str) -> str:
    """``c_source`` (the emitter's output) with its loop nest marked for Pluto.

    The function body is declarations (array views of the pointer arguments, local scalars),
    then statements and ``for (long cN = ...)`` loops, then ``}``. The iterators are declared
    after the declarations, as clan parses no declaration inside a SCoP, and ``#pragma scop`` /
    ``#pragma endscop`` go around everything from the first loop on. Straight-line statements
    before the first loop (scalar set-up such as adi's ``DX = 1.0 / (double)N``) stay outside:
    a size parameter that appears in a statement before any loop bound makes Pluto (clan or
    pet alike) swap the parameters in the code it writes (adi: N and TSTEPS, even with
    ``--identity``). Nothing else changes.
    """
    lines = c_source.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("void polyopt_"))
    if lines[start + 1] != "{":
        raise ValueError("expected the function's '{' on the line after its prototype")
    end = next(i for i in range(start + 2, len(lines)) if lines[i] == "}")
    body = start + 2
    while body < end and re.fullmatch(r"  (?!for\b|if\b)[^/]*;", lines[body]):
        body += 1
    loop = next((i for i in range(body, end) if lines[i].startswith("  for (")), body)
    iterators = sorted(set(re.findall(r"\bfor \(long (\w+) =", "\n".join(lines[body:end]))),
                       key=lambda name: (len(name), name))
    unlong = [re.sub(r"\bfor \(long (\w+) =", r"for (\1 =", line) for line in lines[loop:end]]
    declare = [f"  long {', '.join(iterators)};"] if iterators else []
    return "\n".join([*lines[:body], *declare, *lines[body:loop], "#pragma scop", *unlong,
                      "#pragma endscop", *lines[end:]]) + "\n"


def first_line(text: str, default: str) -> str:
    """The first non-blank line of a tool's output (its one-line reason), or ``default``."""
    return next((line.strip() for line in text.splitlines() if line.strip()), default)


def run_pluto(kernel: str, scop_file: Path, polycc: str) -> Path:
    """``polycc SCOP_FILE --tile --parallel``, written next to it as ``KERNEL.pluto.c``."""
    output = scop_file.with_name(f"{kernel}.pluto.c")
    output.unlink(missing_ok=True)
    result = subprocess.run([polycc, scop_file.name, *PLUTO_FLAGS, "-o", output.name],
                            cwd=scop_file.parent, capture_output=True, text=True, timeout=600)
    text = result.stderr + result.stdout
    if result.returncode != 0 or not output.is_file():
        errors = [line for line in text.splitlines() if re.search(r"error|fail|abort", line, re.I)]
        raise ToolFailure(f"polycc exit {result.returncode}: "
                          f"{first_line(chr(10).join(errors) or text, 'no output file')}")
    if "#pragma scop" in output.read_text():  # polycc copies an input it did not transform
        raise ToolFailure(f"polycc left the SCoP untransformed: {first_line(text, 'no message')}")
    return output


def run_polly(kernel: str, c_file: Path, clang: str) -> tuple[Path, str]:
    """``KERNEL.polly.so`` built from ``c_file`` by clang with Polly, and a note of what Polly
    did (SCoPs modeled, OpenMP or not); ToolFailure when it modeled no SCoP at all."""
    output = c_file.with_name(f"{kernel}.polly.so")
    command = [clang, *POLLY_FLAGS, *POLLY_REMARKS, "-shared", "-fPIC", c_file.name,
               "-o", output.name, "-lgomp", "-lm"]
    result = subprocess.run(command, cwd=c_file.parent, capture_output=True, text=True,
                            timeout=600)
    if result.returncode != 0:
        raise ToolFailure(f"clang exit {result.returncode}: {first_line(result.stderr, '')}")
    remarks = re.findall(r"^\S+?:(\d+):\d+: remark: (.*?) \[-R", result.stderr, re.M)
    kept = {line for line, text in remarks if text == "SCoP ends here."}
    if not kept:
        raise ToolFailure(f"Polly modeled no SCoP: {polly_reason(remarks)}")
    symbols = subprocess.run(["nm", "-D", str(output)], capture_output=True, text=True).stdout
    parallel = "OpenMP" if "GOMP_parallel" in symbols else "no parallel loop"
    return output, f"{len(kept)} SCoP{'s' * (len(kept) > 1)}, {parallel}"


def polly_reason(remarks: Sequence[tuple[str, str]]) -> str:
    """Why Polly modeled no SCoP, in one line, from its ``(line, remark)`` pairs in the order
    clang printed them: the assumptions found false where it dismissed a SCoP, else the first
    error of the outermost rejected region (the one starting on the first line)."""
    false = [text.split(":")[0] for _, text in remarks if re.search(r"\{\s*: false \}", text)]
    if false:
        return f"SCoP dismissed, assumption false: {', '.join(dict.fromkeys(false))}"
    regions: list[tuple[int, list[str]]] = []
    for line, text in remarks:
        if text.startswith("The following errors keep this region"):
            regions.append((int(line), []))
        elif regions and not re.search(r"candidate ends here|SCoP (begins|ends) here", text):
            regions[-1][1].append(text)
    if not regions:
        return "no region rejected"
    line, errors = min(regions, key=lambda region: region[0])
    return f"region at line {line}: {errors[0] if errors else 'no error given'}"


def check_baseline(baseline: Baseline, size: str, threads: int) -> str:
    """Build or load ``baseline`` the harness's way and compare its result with the suite's
    reference at ``size``; returns the error line, or raises ToolFailure when it is wrong."""
    entry = po.suite.get(baseline.kernel)
    config = BenchConfig(size=size, threads=threads,
                         externals=(External(baseline.kernel, str(baseline.path), baseline.label),))
    try:
        runner, = external_runners(entry, config)
    except PolyoptError as error:  # BenchmarkError: the build failed or the ABI differs
        raise ToolFailure(first_line(str(error), "cannot build")) from None
    args = entry.inputs(config.sizes(entry))
    expected = copy_args(args)
    entry.reference(**expected)
    with openmp_threads(threads):
        runner.run(args)
    result = check(args, expected)
    if not result["correct"]:
        raise ToolFailure(f"wrong result at {size}: relative error {result['max_rel_error']}")
    return f"relative error {result['max_rel_error']:.1e} at {size}"


def external_arguments(baselines: Iterable[Baseline]) -> list[str]:
    """The ``polyopt bench`` arguments for the files: ``--external LABEL:KERNEL=FILE`` each."""
    return [f"--external {b.label}:{b.kernel}={b.path}" for b in baselines]


def make_baselines(kernels: Sequence[str], out: Path, *, tools: Sequence[str] = TOOLS,
                   polycc: str | None = None, clang: str | None = None,
                   check_size: str | None = "SMALL", threads: int = 2,
                   log: Callable[[str], object] = print
                   ) -> tuple[list[Baseline], dict[tuple[str, str], str]]:
    """Write and check every tool's file for every kernel (see the module docstring).

    Returns the baselines that passed, and ``(tool, kernel) -> reason`` for those left out.
    ``polycc``/``clang`` are the tools' commands; a tool not given, or not found, leaves its
    every kernel out with that reason. ``check_size`` None skips the check (files unverified).
    """
    out.mkdir(parents=True, exist_ok=True)
    commands = {"pluto": polycc, "polly": clang}
    found = {tool: commands[tool] and shutil.which(commands[tool]) for tool in tools}
    passed, skipped = [], {}
    for kernel in kernels:
        c_file = out / f"{kernel}.c"
        c_file.write_text(original_c(kernel))
        scop_file = out / f"{kernel}.scop.c"
        scop_file.write_text(scop_source(c_file.read_text()))
        for tool in tools:
            try:
                if not found[tool]:
                    raise ToolFailure(f"{commands[tool] or 'no command given'}: not found")
                if tool == "pluto":
                    baseline = Baseline(tool, kernel, run_pluto(kernel, scop_file, found[tool]))
                else:
                    path, note = run_polly(kernel, c_file, found[tool])
                    baseline = Baseline(tool, kernel, path, note)
                checked = (check_baseline(baseline, check_size, threads) if check_size
                           else "not checked")
            except (ToolFailure, subprocess.TimeoutExpired) as failure:
                skipped[tool, kernel] = str(failure)
                log(f"{tool:5} {kernel:15} LEFT OUT: {failure}")
                continue
            passed.append(baseline)
            log(f"{tool:5} {kernel:15} ok: {baseline.path.name}"
                f"{f' ({baseline.note})' if baseline.note else ''}, {checked}")
    return passed, skipped


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; exit status 0 even when some kernels were left out (they are listed)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kernels", nargs="+", help="suite kernel names, or 'all'")
    parser.add_argument("--out", type=Path, required=True, help="directory for the files")
    parser.add_argument("--tools", default=",".join(TOOLS), help="pluto,polly (default: both)")
    parser.add_argument("--polycc", default="polycc", help="Pluto's polycc (default: on PATH)")
    parser.add_argument("--clang", default="clang-14", help="clang with Polly (clang-14)")
    parser.add_argument("--check-size", default="SMALL",
                        help="size of the result check (a preset), 'none' to skip it")
    parser.add_argument("--threads", type=int, default=2, help="OpenMP threads of the check")
    args = parser.parse_args(argv)
    kernels = po.suite.names() if "all" in args.kernels else args.kernels
    tools = [tool for tool in args.tools.split(",") if tool]
    if unknown := set(tools) - set(TOOLS) or set(kernels) - set(po.suite.names()):
        parser.error(f"unknown: {', '.join(sorted(unknown))}")
    passed, skipped = make_baselines(
        kernels, args.out, tools=tools, polycc=args.polycc, clang=args.clang,
        check_size=None if args.check_size.lower() == "none" else args.check_size,
        threads=args.threads)
    arguments = " ".join(external_arguments(passed))
    (args.out / "externals.txt").write_text(arguments + "\n")
    print(f"\n{len(passed)} files, {len(skipped)} left out; polyopt bench arguments "
          f"(also in {args.out / 'externals.txt'}):\n{arguments}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
