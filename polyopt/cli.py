"""The ``polyopt`` command line: ``demo``, ``list``, ``show``, ``cc`` and ``bench``."""
from __future__ import annotations

import argparse
import sys

import polyopt as po
from polyopt.bench.cli import add_parser as add_bench_parser, run as run_bench


def _show(args) -> None:
    entry = po.suite.get(args.kernel)
    compiled = po.compile(entry.kernel, algorithm=args.algorithm)
    parts = {
        "scop": lambda: str(entry.kernel.scop),
        "deps": lambda: po.dependences(entry.kernel.scop).summary(),
        "schedule": compiled.schedule.pretty,
        "ast": lambda: compiled.loop_ast,
        "c": lambda: compiled.c_source,
        "ir": lambda: compiled.llvm_ir,
        "asm-ir": lambda: compiled.optimized_ir,
    }
    for part in args.what.split(","):
        if part not in parts:
            raise SystemExit(f"unknown part {part!r}; choose from {', '.join(parts)}")
        print(f"--- {part} ---")
        print(parts[part]())


def _add_cc(commands) -> None:
    cc = commands.add_parser("cc", help="source to source: each '#pragma scop' region of a C file, "
                                        "optimized (OpenMP pragmas on parallel loops)")
    cc.add_argument("file")
    cc.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME[=VALUE]")
    cc.add_argument("-I", dest="include_dirs", action="append", default=[], metavar="DIR")
    cc.add_argument("--algorithm", default="pluto", choices=po.algorithms())
    cc.add_argument("--tile", type=int, default=None, help="tile size (pluto)")
    cc.add_argument("-o", dest="output", default="-", help="output file (default: stdout)")


def _cc(args) -> None:
    from polyopt.frontends.c_scop import optimize_c_file
    defines = dict(d.split("=", 1) if "=" in d else (d, None) for d in args.defines)
    options = {"tile": args.tile} if args.tile else {}
    text = optimize_c_file(args.file, defines=defines, include_dirs=args.include_dirs,
                           algorithm=args.algorithm, **options)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        with open(args.output, "w") as out:
            out.write(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="polyopt", description=po.__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="gemm end to end: scop, dependences, schedule, C, check, speed")
    demo.add_argument("--size", default="LARGE", help="PolyBench preset for the timing (default LARGE)")
    demo.add_argument("--algorithm", default=po.runtime.DEFAULT_ALGORITHM, choices=po.algorithms())
    demo.add_argument("--kernel", default="gemm", help="suite kernel to show (default gemm)")
    demo.add_argument("--repeats", type=int, default=3)
    commands.add_parser("list", help="the suite kernels and the scheduling algorithms")
    show = commands.add_parser("show", help="print what polyopt makes of a suite kernel")
    show.add_argument("kernel")
    show.add_argument("--algorithm", default=po.runtime.DEFAULT_ALGORITHM, choices=po.algorithms())
    show.add_argument("--what", default="scop,deps,schedule,c",
                      help="comma-separated: scop, deps, schedule, ast, c, ir, asm-ir")
    _add_cc(commands)
    add_bench_parser(commands)
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    if args.command == "bench":
        return run_bench(args, argv)
    if args.command == "cc":
        _cc(args)
    elif args.command == "demo":
        from polyopt.demo import run_demo
        run_demo(args.size, args.algorithm, args.kernel, args.repeats)
    elif args.command == "list":
        print("kernels:    " + " ".join(po.suite.names()))
        print("algorithms: " + " ".join(po.algorithms()))
    else:
        _show(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
