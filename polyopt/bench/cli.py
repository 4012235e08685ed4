"""``polyopt bench``: the command-line face of the benchmark harness.

    polyopt bench gemm 2mm --size LARGE --threads 2 --tile 32 --json out.json --write-docs
    polyopt bench all --size MEDIUM --external pluto:gemm=gemm.pluto.c
    polyopt bench --einsum --threads 2
    polyopt bench --einsum --target cuda --repeats 20 --json gpu_einsum.json
    polyopt bench gemm syrk jacobi-2d --target cuda --dtype f32 --json gpu.json

Exit status: 0 when every result matched its reference, 1 when one did not (the report still
shows it), 2 for a request that cannot run (unknown kernel or target, bad external file).
"""
from __future__ import annotations

import argparse
import ast
import os
import shlex
import sys

import polyopt as po
from polyopt.bench.config import BenchConfig, External
from polyopt.bench.einsum_cases import bench_einsum
from polyopt.bench.einsum_cuda import bench_einsum_cuda
from polyopt.bench.kernels import bench_kernels
from polyopt.bench.report import (console_text, read_json, summary_lines, table, write_docs,
                                  write_json)
from polyopt.bench.runners import check_target
from polyopt.errors import BenchmarkError
from polyopt.schedulers.registry import DEFAULT_ALGORITHM

DEFAULT_DOC = "docs/performance.md"


def add_parser(commands) -> argparse.ArgumentParser:
    """Add the ``bench`` sub-command to the ``polyopt`` command's sub-parsers."""
    bench = commands.add_parser(
        "bench", help="suite kernels against gcc -O3, external C files and numpy (or --einsum)",
        description="Suite kernels (or, with --einsum, po.einsum cases): polyopt against gcc -O3\n"
                    "on the original loops, other tools' code and numpy, in one process,\n"
                    "interleaved on the same arrays, every result checked against the reference.",
        epilog="examples:\n" + __doc__.split("\n\n")[1] + "\n\n" + __doc__.split("\n\n")[2],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    bench.add_argument("kernels", nargs="*", metavar="KERNEL", help="suite kernels, or 'all'")
    bench.add_argument("--size", default="LARGE",
                       help="PolyBench preset (default LARGE), or every size of the kernels, "
                            "e.g. NI=4096,NJ=4096,NK=4096")
    bench.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                       help="threads for every implementation (default: all cores)")
    bench.add_argument("--algorithm", default=DEFAULT_ALGORITHM, choices=po.algorithms())
    bench.add_argument("--tile", type=int, default=None, help="tile size (pluto)")
    bench.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                       help="another scheduler option (a Python literal or a word)")
    bench.add_argument("--autotune", action="store_true",
                       help="polyopt runs what po.autotune picks per kernel (instead of "
                            "--algorithm/--tile/--option)")
    bench.add_argument("--repeats", type=int, default=5, help="timed runs of each (default 5)")
    bench.add_argument("--external", action="append", default=[], metavar="[LABEL:]KERNEL=FILE",
                       help="C file (or .so) defining the kernel's function with the C "
                            "emitter's arguments (benchmarks/README.md)")
    bench.add_argument("--no-numpy", action="store_true", help="leave the numpy baseline out")
    bench.add_argument("--target", default="cpu",
                       help="where polyopt's code runs (default cpu; cuda: needs CuPy and a "
                            "GPU, adds cuBLAS for gemm-like kernels)")
    bench.add_argument("--dtype", default="f64", choices=("f64", "f32"),
                       help="type of the kernels' floating-point data (default f64)")
    bench.add_argument("--einsum", action="store_true",
                       help="po.einsum cases instead of kernels: against numpy.einsum and numpy "
                            "matmul (cpu), or cupy.einsum, torch and cuBLAS (--target cuda)")
    bench.add_argument("--scale", type=float, default=1.0, help="--einsum: scale every extent")
    bench.add_argument("--json", metavar="FILE", help="write the whole report as JSON")
    bench.add_argument("--from-json", metavar="FILE",
                       help="run nothing: print (and --write-docs) the report a --json wrote")
    bench.add_argument("--write-docs", nargs="?", const=DEFAULT_DOC, metavar="FILE",
                       help=f"regenerate the generated section of FILE (default {DEFAULT_DOC})")
    return bench


def _option(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise BenchmarkError(f"--option {text!r}: expected KEY=VALUE")
    try:
        return key, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return key, value


def _external(text: str) -> External:
    spec, sep, path = text.partition("=")
    label, _, kernel = spec.rpartition(":")
    if not sep or not kernel or not path:
        raise BenchmarkError(f"--external {text!r}: expected [LABEL:]KERNEL=FILE")
    return External(kernel, path, label or "external")


def _check_counts(args: argparse.Namespace) -> None:
    if args.threads < 1 or args.repeats < 1:
        raise BenchmarkError("--threads and --repeats must be at least 1")


def config_from(args: argparse.Namespace) -> BenchConfig:
    """The :class:`BenchConfig` the parsed command line asks for (bad values refused)."""
    _check_counts(args)
    options = dict(_option(text) for text in args.option)
    if args.tile is not None:
        options["tile"] = args.tile
    if args.autotune and (options or args.algorithm != DEFAULT_ALGORITHM):
        raise BenchmarkError("--autotune picks the scheduler and its options itself: "
                             "give no --algorithm, --tile or --option with it")
    if args.autotune and args.target != "cpu":
        raise BenchmarkError("--autotune tunes the cpu target only")
    check_target(args.target)
    return BenchConfig(size=args.size, threads=args.threads, algorithm=args.algorithm,
                       options=options, repeats=args.repeats, target=args.target,
                       externals=tuple(_external(text) for text in args.external),
                       numpy=not args.no_numpy, autotune=args.autotune, dtype=args.dtype)


def _progress(row: dict) -> None:
    label = row.get("kernel") or row.get("subscripts")
    if "dtype" in row and "precision" in row:
        label += f" {row['dtype']} {row['precision']}"
    if "error" in row:
        print(f"{label}: not run: {row['error']}", file=sys.stderr, flush=True)
        return
    times = ", ".join(f"{name} {r['median_s']:.4g} s" if "median_s" in r else f"{name} WRONG"
                      for name, r in row["runners"].items())
    print(f"{label}: {times}", file=sys.stderr, flush=True)


def _einsum_report(args: argparse.Namespace, command: str) -> dict:
    """The ``--einsum`` report of the target asked for: against numpy on the cpu, against
    cupy.einsum, torch and cuBLAS on cuda (:mod:`polyopt.bench.einsum_cuda`)."""
    if args.target not in ("cpu", "cuda"):
        raise BenchmarkError(f"--einsum runs on the cpu and cuda targets, not {args.target!r}")
    if args.target == "cpu":
        return bench_einsum(scale=args.scale, repeats=args.repeats, threads=args.threads,
                            command=command, on_result=_progress)
    check_target("cuda")
    return bench_einsum_cuda(scale=args.scale, repeats=args.repeats, command=command,
                             on_result=_progress)


def run(args: argparse.Namespace, argv: list[str]) -> int:
    """Run the benchmark the parsed ``args`` ask for; print, and write JSON/docs as asked."""
    command = "polyopt " + shlex.join(argv)
    try:
        if args.from_json:
            if args.kernels or args.einsum:
                raise BenchmarkError("--from-json runs nothing: give no kernels or --einsum")
            report = read_json(args.from_json)
        elif args.einsum:
            if args.kernels or args.external:
                raise BenchmarkError("--einsum runs its own cases: give no kernels or --external")
            _check_counts(args)
            report = _einsum_report(args, command)
        else:
            if not args.kernels:
                raise BenchmarkError("name suite kernels (or 'all'), or pass --einsum")
            report = bench_kernels(args.kernels, config_from(args), command=command,
                                   on_result=_progress)
    except BenchmarkError as error:
        print(f"polyopt bench: error: {error}", file=sys.stderr)
        return 2
    print(console_text(*table(report)))
    print("\n".join(summary_lines(report)))
    if args.json:
        write_json(report, args.json)
    if args.write_docs:
        for path in write_docs(report, args.write_docs):
            print(f"wrote {path}")
    return 0 if report["correct"] else 1
