"""The ``polyopt`` command line: ``demo``, ``list``, ``show``, ``cc``, ``bench`` and ``cache``.

Every subcommand runs under one error handler (:func:`main`): an error in the input (a C file
polyopt cannot handle, a missing file, a kernel that fails) prints one line, ``polyopt: error:
FILE:LINE:COL: message``, followed by the offending source line and a caret when they are known
(as a compiler does), and exits with status 1; a usage error (an unknown kernel or option value)
exits with status 2, as argparse's own do. ``--debug`` lets the Python traceback through instead.
"""
from __future__ import annotations

import argparse
import sys

import polyopt as po
from polyopt.schedulers.registry import DEFAULT_ALGORITHM
from polyopt.bench.cli import add_parser as add_bench_parser, run as run_bench
from polyopt.errors import FrontendError, PolyoptError

#: Exit statuses: bad input (the request was understood but failed), and bad usage.
EXIT_INPUT, EXIT_USAGE = 1, 2
_DEBUG_HELP = "show the Python traceback of an error instead of one line"


class UsageError(Exception):
    """A command line that names something that does not exist (a kernel, a ``--what`` part):
    reported like argparse's own usage errors, with exit status 2."""


def _show(args) -> None:
    if args.kernel not in po.suite.names():
        raise UsageError(f"unknown suite kernel {args.kernel!r}; choose from "
                         f"{', '.join(po.suite.names())} (see 'polyopt list')")
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
    what = args.what if args.what is not None else ("" if args.plot else "scop,deps,schedule,c")
    unknown = [part for part in what.split(",") if part and part not in parts]
    if unknown:
        raise UsageError(f"--what: unknown part {unknown[0]!r}; choose from {', '.join(parts)}")
    for part in filter(None, what.split(",")):
        print(f"--- {part} ---")
        print(parts[part]())
    if args.plot:
        _plot(entry, compiled.schedule, args.plot, args.param)
        print(f"wrote {args.plot}")


#: --plot's parameter values unless --param gives others (MINI's when a domain is empty there)
PLOT_PARAM = 8


def _has_points(scop, statement, sizes: dict[str, int]) -> bool:
    """Whether ``sizes`` are valid parameters of ``scop`` where ``statement`` runs at all."""
    from polyopt.islutil import param_point
    point = param_point(scop.params, sizes)
    return not scop.context.intersect_params(point).is_empty() and \
        not statement.domain.intersect_params(point).is_empty()


def _plot(entry, schedule, path: str, params: list[str]) -> None:
    """``show --plot FILE``: the first statement's domain with its dependences (small sizes) and
    the schedule tree, side by side, in one picture file (the format from the file's suffix)."""
    from polyopt import plot
    scop = entry.kernel.scop
    given = {}
    for item in params:
        name, _, value = item.partition("=")
        if name not in scop.params or not value.strip().lstrip("-").isdigit():
            raise UsageError(f"--param: expected NAME=INT with NAME one of {', '.join(scop.params)}, "
                             f"got {item!r}")
        given[name] = int(value)
    sizes = {p: given.get(p, PLOT_PARAM) for p in scop.params}
    statement = scop.statements[0]
    if not given and not _has_points(scop, statement, sizes):
        sizes = entry.sizes("MINI")
    plt = plot._pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5.5), gridspec_kw={"width_ratios": [1, 1]})
    try:
        plot.domain(scop, statement.name, sizes=sizes, schedule=schedule, ax=left)
        plot.schedule_tree(schedule, ax=right)
        fig.tight_layout()
        fig.savefig(path, dpi=80)
    finally:
        plt.close(fig)


def _add_cc(commands, common: argparse.ArgumentParser) -> None:
    cc = commands.add_parser("cc", parents=[common], help="source to source: each '#pragma scop' region of a C file, "
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


def _add_cache(commands, common: argparse.ArgumentParser) -> None:
    cache = commands.add_parser("cache", parents=[common], help="the compile cache on disk: 'info' (directory, "
                                "entries, bytes) or 'clear' (remove its entries)")
    cache.add_argument("action", choices=("info", "clear"))


def _cache(args) -> None:
    from polyopt.targets import disk_cache
    if args.action == "clear":
        print(f"removed {disk_cache.clear()} entries from {disk_cache.cache_dir()}")
        return
    from polyopt.schedulers import tuning_db
    info = disk_cache.info()
    state = "" if info["enabled"] else " (disabled: POLYOPT_CACHE=0)"
    print(f"{info['directory']}: {info['entries']} entries, {info['bytes']} bytes "
          f"(max {info['max_bytes'] // (1024 * 1024)} MiB){state}; "
          f"{tuning_db.info()['entries']} po.autotune decisions in {tuning_db.directory()}")


def _parser() -> argparse.ArgumentParser:
    """The whole command line; ``--debug`` is accepted before or after the subcommand."""
    parser = argparse.ArgumentParser(prog="polyopt", description=po.__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"polyopt {po.__version__}")
    parser.add_argument("--debug", action="store_true", help=_DEBUG_HELP)
    # the subcommands' copy must not reset a --debug given before the subcommand
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=_DEBUG_HELP)
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", parents=[common],
                               help="gemm end to end: scop, dependences, schedule, C, check, speed")
    demo.add_argument("--size", default="LARGE", help="PolyBench preset for the timing (default LARGE)")
    demo.add_argument("--algorithm", default=DEFAULT_ALGORITHM, choices=po.algorithms())
    demo.add_argument("--kernel", default="gemm", help="suite kernel to show (default gemm)")
    demo.add_argument("--repeats", type=int, default=3)
    commands.add_parser("list", parents=[common], help="the suite kernels and the scheduling algorithms")
    show = commands.add_parser("show", parents=[common], help="print what polyopt makes of a suite kernel")
    show.add_argument("kernel")
    show.add_argument("--algorithm", default=DEFAULT_ALGORITHM, choices=po.algorithms())
    show.add_argument("--what", default=None,
                      help="comma-separated: scop, deps, schedule, ast, c, ir, asm-ir "
                           "(default scop,deps,schedule,c; nothing with --plot)")
    show.add_argument("--plot", metavar="FILE.png", default=None,
                      help="draw the first statement's domain with its dependences and the schedule "
                           "tree into FILE (needs matplotlib: pip install polyopt[plot])")
    show.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                      help=f"a parameter value for --plot (default {PLOT_PARAM} each)")
    _add_cc(commands, common)
    _add_cache(commands, common)
    add_bench_parser(commands).add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                                            help=_DEBUG_HELP)
    return parser


def _run(args: argparse.Namespace, argv: list[str]) -> int:
    """Run the parsed subcommand; its exit status."""
    if args.command == "bench":
        return run_bench(args, argv)
    if args.command == "cc":
        _cc(args)
    elif args.command == "cache":
        _cache(args)
    elif args.command == "demo":
        if args.kernel not in po.suite.names():
            raise UsageError(f"--kernel: unknown suite kernel {args.kernel!r} (see 'polyopt list')")
        from polyopt.demo import run_demo
        run_demo(args.size, args.algorithm, args.kernel, args.repeats)
    elif args.command == "list":
        print("kernels:    " + " ".join(po.suite.names()))
        print("algorithms: " + " ".join(po.algorithms()))
    else:
        _show(args)
    return 0


def error_lines(error: BaseException) -> list[str]:
    """The report of ``error``: ``polyopt: error: WHERE: message``, then the rest of a
    multi-line message; for a FrontendError in a readable file, the source line and a caret
    under its column (a compiler's format)."""
    if isinstance(error, FrontendError):
        where = error.source_name + "".join(f":{n}" for n in (error.line, error.column) if n is not None)
        lines = [f"polyopt: error: {where}: {error.reason}"]
        source = _source_line(error.source_name, error.line)
        if source is not None:
            lines.append(source)
            if error.column is not None:
                lines.append("".join(c if c == "\t" else " " for c in source[:error.column - 1]) + "^")
        elif error.construct:
            lines.append(f"    {error.construct}")
        return lines
    if isinstance(error, OSError) and error.filename is not None:
        return [f"polyopt: error: {error.filename}: {error.strerror}"]
    text = str(error) if isinstance(error, (PolyoptError, OSError, UsageError)) else \
        f"internal error: {type(error).__name__}: {error} (rerun with --debug for the traceback)"
    first, *rest = text.splitlines() or [""]
    return [f"polyopt: error: {first}", *rest]


def _source_line(path: str, line: int | None) -> str | None:
    """Line ``line`` (1-based) of the file ``path``, None when it cannot be read."""
    if line is None:
        return None
    try:
        with open(path, encoding="utf-8", errors="replace") as source:
            for number, text in enumerate(source, 1):
                if number == line:
                    return text.rstrip("\n")
    except OSError:
        return None
    return None


def main(argv: list[str] | None = None) -> int:
    """Run the ``polyopt`` command; its exit status (0 success, 1 bad input, 2 bad usage)."""
    argv = sys.argv[1:] if argv is None else argv
    args = _parser().parse_args(argv)
    try:
        return _run(args, argv)
    except KeyboardInterrupt:
        return 130
    except Exception as error:  # every subcommand's errors are reported here, once
        if args.debug:
            raise
        print("\n".join(error_lines(error)), file=sys.stderr)
        return EXIT_USAGE if isinstance(error, UsageError) else EXIT_INPUT


if __name__ == "__main__":
    sys.exit(main())
