"""`polyopt cc` on the original PolyBench/C 4.2.1 files, checked against gcc on the originals.

    python benchmarks/polybench_c_check.py PATH/TO/PolyBenchC-4.2.1 [--dataset SMALL]
        [--algorithm pluto] [--tile 32] [--keep DIR] [KERNEL ...]

For every kernel of the tree's ``utilities/benchmark_list`` (or the KERNELs named), the file goes
through ``polyopt cc`` (the command line, in this process) with ``-D<DATASET>_DATASET``; the
original and the optimized file are each built by gcc with ``utilities/polybench.c`` and
``-DPOLYBENCH_DUMP_ARRAYS`` (the optimized one with ``-fopenmp``), run, and the arrays they dump
on stderr are compared: the same text, or the same numbers within one unit of the last printed
digit (PolyBench prints ``%0.2lf``; a reordered sum may round the other way). Prints one line per
kernel and exits with status 1 if any kernel fails. Nothing of PolyBench is part of polyopt: the
tree is only read.
"""
from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from polyopt.cli import main as polyopt_main
from polyopt.errors import PolyoptError

DATASETS = ("MINI", "SMALL", "MEDIUM", "LARGE", "EXTRALARGE")


@dataclass
class Outcome:
    """What happened to one kernel: ``status`` is ok, polyopt (polyopt cc refused or failed),
    build (gcc failed on a file), run (a binary failed) or differ (the dumps differ)."""

    kernel: str
    status: str
    detail: str = ""
    seconds: float = 0.0


def kernel_files(root: Path, names: list[str]) -> list[Path]:
    """The C files of ``utilities/benchmark_list`` under ``root`` (only ``names`` if given)."""
    listed = [root / line.strip() for line in (root / "utilities" / "benchmark_list").read_text().splitlines()
              if line.strip()]
    if not names:
        return listed
    by_name = {path.stem: path for path in listed}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise SystemExit(f"not in utilities/benchmark_list: {', '.join(unknown)}")
    return [by_name[n] for n in names]


def build_and_run(source: Path, root: Path, folder: Path, flags: list[str], binary: Path) -> str:
    """The stderr of ``source`` (whose headers are in ``folder``) built with PolyBench's utilities
    and run (raises on failure)."""
    utilities = root / "utilities"
    build = subprocess.run(["gcc", "-O2", "-std=gnu99", "-Wno-unknown-pragmas", f"-I{utilities}",
                            f"-I{folder}", *flags, str(utilities / "polybench.c"), str(source),
                            "-o", str(binary), "-lm"], capture_output=True, text=True)
    if build.returncode != 0:
        errors = [line for line in build.stderr.splitlines() if "error" in line] or [build.stderr.strip()]
        raise RuntimeError(f"build: {errors[0]}")
    run = subprocess.run([str(binary)], capture_output=True, text=True, timeout=600)
    if run.returncode != 0:
        raise ChildProcessError(f"run: exit status {run.returncode}: {run.stderr.strip()[-500:]}")
    return run.stderr


def compare_dumps(expected: str, actual: str) -> tuple[bool, str]:
    """(whether the two dumps agree, how): the same text, or the same words with numbers at most
    one unit of the last printed digit apart; else where they first differ."""
    if not expected.strip():
        return False, "the original dumped nothing"
    if expected == actual:
        return True, f"same text ({len(expected.split())} words)"
    left, right = expected.split(), actual.split()
    if len(left) != len(right):
        return False, f"{len(left)} against {len(right)} words"
    rounded = 0
    for k, (a, b) in enumerate(zip(left, right)):
        if a == b:
            continue
        try:
            x, y = float(a), float(b)
        except ValueError:
            return False, f"word {k}: {a!r} against {b!r}"
        unit = 10.0 ** -(len(a) - a.index(".") - 1) if "." in a else 1.0
        if not (math.isfinite(x) and math.isfinite(y)) or abs(x - y) > unit * (1 + 1e-9):
            return False, f"number {k}: {a} against {b}"
        rounded += 1
    return True, f"{rounded} of {len(left)} words one unit apart in the last printed digit"


def check(path: Path, root: Path, dataset: str, cc_options: list[str], work: Path) -> Outcome:
    """``path`` through ``polyopt cc``, then both files through gcc; their dumps compared."""
    name = path.stem
    start = time.perf_counter()
    optimized = work / f"{name}.polyopt.c"
    defines = [f"-D{dataset}_DATASET"]
    try:
        polyopt_main(["cc", str(path), f"-I{root / 'utilities'}", f"-I{path.parent}", *defines,
                      *cc_options, "-o", str(optimized)])
    except PolyoptError as exc:
        return Outcome(name, "polyopt", str(exc).splitlines()[0], time.perf_counter() - start)
    flags = [*defines, "-DPOLYBENCH_DUMP_ARRAYS"]
    try:
        expected = build_and_run(path, root, path.parent, flags, work / f"{name}.gcc")
        actual = build_and_run(optimized, root, path.parent, [*flags, "-fopenmp"], work / f"{name}.polyopt")
    except RuntimeError as exc:
        return Outcome(name, "build", str(exc), time.perf_counter() - start)
    except (ChildProcessError, subprocess.TimeoutExpired) as exc:
        return Outcome(name, "run", str(exc).splitlines()[0], time.perf_counter() - start)
    agree, how = compare_dumps(expected, actual)
    return Outcome(name, "ok" if agree else "differ", how, time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="a PolyBench/C 4.2.1 tree (with utilities/)")
    parser.add_argument("kernels", nargs="*", help="kernel names (default: all 30)")
    parser.add_argument("--dataset", default="MINI", choices=DATASETS)
    parser.add_argument("--algorithm", default="pluto")
    parser.add_argument("--tile", type=int, default=None)
    parser.add_argument("--keep", type=Path, default=None, help="keep the generated files here")
    args = parser.parse_args(argv)
    if shutil.which("gcc") is None:
        raise SystemExit("gcc is needed")
    cc_options = ["--algorithm", args.algorithm] + (["--tile", str(args.tile)] if args.tile else [])
    outcomes = []
    with tempfile.TemporaryDirectory() as scratch:
        work = args.keep or Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        os.environ.setdefault("OMP_NUM_THREADS", "2")
        for path in kernel_files(args.root, args.kernels):
            outcome = check(path, args.root, args.dataset, cc_options, work)
            outcomes.append(outcome)
            print(f"{outcome.kernel:16} {outcome.status:8} {outcome.seconds:6.1f} s  {outcome.detail}",
                  flush=True)
    passed = sum(o.status == "ok" for o in outcomes)
    print(f"{passed}/{len(outcomes)} kernels: polyopt cc ({' '.join(cc_options)}) output prints the same "
          f"arrays as the original ({args.dataset} dataset)")
    return 0 if passed == len(outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
