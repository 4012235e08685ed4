"""A benchmark report as a console table, JSON, and the generated sections of
docs/performance.md (a markdown table and a bar chart of speedups).

Both report kinds (``kernels``: suite kernels vs gcc/numpy; ``einsum``: po.einsum vs numpy) are
first turned into one header and rows of text cells, which the console and markdown writers
share. A docs section lives between two HTML comments naming its kind (and target); regenerating
it replaces only that text, so the hand-written rest of the file stays as it is.
"""
from __future__ import annotations

import json
from pathlib import Path

from polyopt.bench import einsum_cuda
from polyopt.bench.einsum_cases import case_label
from polyopt.bench.kernels import SLOW_GCC_SECONDS
from polyopt.bench.runners import BASELINE
from polyopt.errors import BenchmarkError

Table = tuple[list[str], list[list[str]]]


def _milliseconds(result: dict) -> str:
    if not result.get("correct", False):
        return "WRONG"
    return f"{result['median_s'] * 1e3:.4g} ({result['min_s'] * 1e3:.4g})"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _runner_order(rows: list[dict]) -> list[str]:
    """Runner names as they first appear, with the gcc baseline moved right after polyopt."""
    names = list(dict.fromkeys(name for row in rows for name in row["runners"]))
    if BASELINE in names:
        names.remove(BASELINE)
        names.insert(1 if names and names[0] == "polyopt" else 0, BASELINE)
    return names


def _kernel_milliseconds(result: dict) -> str:
    if not result.get("correct", False):
        return "WRONG"
    return f"{result['kernel_median_s'] * 1e3:.4g} ({result['kernel_min_s'] * 1e3:.4g})"


def kernel_table(report: dict) -> Table:
    """Kernels report: median (min) milliseconds per runner, polyopt's GFLOP/s, speedups, check.

    Runners that measured kernel-only time (CUDA events) get a ``kernel ms`` column beside their
    ``end-to-end ms``; polyopt's GFLOP/s then come from its kernel time, and its kernel time is
    compared with cuBLAS's where there is one."""
    kernels = report["kernels"]
    names = _runner_order(kernels)
    others = [n for n in names if n != BASELINE]
    timed = {n for k in kernels for n, r in k["runners"].items() if "kernel_median_s" in r}
    cublas = any("kernel_speedup_vs_cublas" in k["runners"].get("polyopt", {}) for k in kernels)
    header = ["kernel"]
    for n in names:
        header += [f"{n} kernel ms", f"{n} end-to-end ms"] if n in timed else [f"{n} ms"]
    header += (["polyopt GFLOP/s"] + [f"{n} vs gcc" for n in others]
               + (["polyopt vs numpy"] if "numpy" in names else [])
               + (["polyopt vs cublas (kernel)"] if cublas else []) + ["check"])
    rows = []
    for k in kernels:
        runners = k["runners"]
        ours = runners.get("polyopt", {})
        row = [k["kernel"]]
        for n in names:
            if n in timed:
                row.append(_kernel_milliseconds(runners[n]) if "kernel_median_s" in runners.get(n, {})
                           else "WRONG" if n in runners else "-")
            row.append(_milliseconds(runners[n]) if n in runners else "-")
        gflops = ours.get("kernel_gflops", ours.get("gflops"))
        row.append(f"{gflops:.2f}" if gflops is not None else "-")
        row += [_ratio(runners.get(n, {}).get("speedup_vs_gcc")) for n in others]
        if "numpy" in names:
            row.append(_ratio(ours.get("speedup_vs_numpy") if "numpy" in runners else None))
        if cublas:
            row.append(_ratio(ours.get("kernel_speedup_vs_cublas")))
        row.append("ok" if k["correct"] else "ERROR" if "error" in k else "MISMATCH")
        rows.append(row)
    return header, rows


def einsum_table(report: dict) -> Table:
    """Einsum report: milliseconds of each implementation, polyopt's speedups, check."""
    header = ["subscripts", "shapes", "polyopt ms", "numpy.einsum ms", "numpy matmul ms",
              "polyopt vs numpy.einsum", "polyopt vs numpy matmul", "check"]
    rows = []
    for case in report["cases"]:
        runners = case["runners"]
        ours = runners["polyopt"]
        rows.append([f"`{case['subscripts']}`" + (" (out=)" if case.get("out_given") else ""),
                     " ".join("x".join(map(str, s)) for s in case["shapes"]),
                     _milliseconds(ours),
                     _milliseconds(runners["numpy.einsum"])
                     + (" (a view)" if case["numpy_einsum_returns_view"] else ""),
                     _milliseconds(runners["numpy matmul"]) if "numpy matmul" in runners else "-",
                     _ratio(ours.get("speedup_vs_numpy.einsum")),
                     _ratio(ours.get("speedup_vs_numpy matmul")),
                     "ok" if case["correct"] else "MISMATCH"])
    return header, rows


def _cuda_einsum(report: dict) -> bool:
    """Whether ``report`` is ``polyopt bench --einsum --target cuda``'s (:mod:`polyopt.bench.einsum_cuda`)."""
    return report["kind"] == "einsum" and _target(report) == "cuda"


def table(report: dict) -> Table:
    """The header and rows of either report kind."""
    if _cuda_einsum(report):
        return einsum_cuda.table(report)
    return kernel_table(report) if report["kind"] == "kernels" else einsum_table(report)


def summary_lines(report: dict) -> list[str]:
    """The geometric means (and targets' inputs) in words, one line each."""
    summary = report["summary"]
    if _cuda_einsum(report):
        return einsum_cuda.summary_lines(report)
    if report["kind"] == "einsum":
        lines = [f"geometric-mean speedup of po.einsum over numpy.einsum: "
                 f"{_ratio(summary['geomean_speedup_vs_numpy.einsum'])}"]
        lines += [f"`{label}`: po.einsum runs at {_ratio(v)} the speed of numpy matmul"
                  for label, v in summary["fraction_of_numpy_matmul"].items()]
        return lines
    lines = [f"{k['kernel']}: not run: {k['error']}" for k in report["kernels"] if "error" in k]
    for name, s in summary.items():
        line = (f"{name}: geometric-mean speedup over gcc {_ratio(s['geomean_speedup_vs_gcc'])} "
                f"({s['kernels']} kernels), {_ratio(s['geomean_speedup_vs_gcc_where_gcc_over_0.05s'])} "
                f"where gcc takes more than {SLOW_GCC_SECONDS} s ({s['kernels_where_gcc_over_0.05s']})")
        if s["kernels_with_numpy"]:
            line += (f"; over numpy {_ratio(s['geomean_speedup_vs_numpy'])} "
                     f"({s['kernels_with_numpy']} kernels)")
        if s.get("kernels_with_cublas"):
            line += (f"; kernel time against cuBLAS {_ratio(s['geomean_kernel_speedup_vs_cublas'])}"
                     f" ({s['kernels_with_cublas']} kernels)")
        lines.append(line)
    return lines


def console_text(header: list[str], rows: list[list[str]]) -> str:
    """Fixed-width columns for a terminal."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths))
                     for line in [header, *rows])


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A GitHub markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def write_json(report: dict, path: str | Path) -> None:
    """The whole report, every sample included, as JSON (non-finite numbers refused)."""
    Path(path).write_text(json.dumps(report, indent=1, allow_nan=False) + "\n")


def read_json(path: str | Path) -> dict:
    """A report written by :func:`write_json` (e.g. to regenerate the docs from a long run)."""
    try:
        report = json.loads(Path(path).read_text())
    except (OSError, ValueError) as error:
        raise BenchmarkError(f"--from-json {path}: {error}") from None
    if not isinstance(report, dict) or report.get("kind") not in ("kernels", "einsum"):
        raise BenchmarkError(f"--from-json {path}: not a polyopt bench report")
    return report


def _target(report: dict) -> str:
    return report["config"].get("target", "cpu")


def section_name(report: dict) -> str:
    """The name of the report's docs section: its kind, prefixed by the target unless cpu
    (``kernels``, ``einsum``, ``cuda kernels``), so a GPU run keeps the CPU section."""
    target = _target(report)
    return report["kind"] if target == "cpu" else f"{target} {report['kind']}"


def _chart_series(report: dict) -> tuple[list[str], dict[str, list[float | None]], str]:
    if report["kind"] == "kernels":
        kernels = report["kernels"]
        names = [n for n in _runner_order(kernels) if n != BASELINE]
        series = {n: [k["runners"].get(n, {}).get("speedup_vs_gcc") for k in kernels] for n in names}
        return [k["kernel"] for k in kernels], series, "speedup over gcc -O3 (original loops)"
    if _cuda_einsum(report):
        return einsum_cuda.chart_series(report)
    cases = report["cases"]
    series = {f"vs {n}": [c["runners"]["polyopt"].get(f"speedup_vs_{n}") for c in cases]
              for n in ("numpy.einsum", "numpy matmul")}
    return [case_label(c) for c in cases], series, "po.einsum speedup"


def speedup_chart(report: dict, path: Path) -> str | None:
    """Grouped bars of the report's speedups (log scale, from 1x) saved as a PNG at ``path``.

    Returns None when written, else why not (matplotlib is an optional dependency).
    """
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return ("No chart: matplotlib is not installed "
                "(`pip install 'polyopt[bench]'` and regenerate).")
    labels, series, ylabel = _chart_series(report)
    width = 0.8 / max(1, len(series))
    figure, axes = plt.subplots(figsize=(max(6.0, 0.45 * len(labels) + 2), 4.0))
    for k, (name, values) in enumerate(series.items()):
        positions = [i + (k - (len(series) - 1) / 2) * width for i in range(len(labels))]
        kept = [(x, v) for x, v in zip(positions, values) if v is not None]
        if kept:
            # bars grow from 1x: up for a speedup, down for a slowdown
            axes.bar([x for x, _ in kept], [v - 1.0 for _, v in kept], width, bottom=1.0,
                     label=name)
    axes.axhline(1.0, color="black", linewidth=0.8)
    axes.set_yscale("log")
    axes.set_ylabel(ylabel)
    axes.set_xticks(range(len(labels)), labels, rotation=60, ha="right")
    axes.legend()
    config = report["config"]
    threads = config["threads"]
    where = (report["machine"]["gpu"]["name"] if "gpu" in report["machine"]
             else f"{report['machine']['cpu']}, {threads} thread{'s' * (threads != 1)}")
    axes.set_title(f"{where}, {report['date'][:10]}")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return None


def _markers(section: str) -> tuple[str, str]:
    return (f"<!-- BEGIN polyopt bench {section}: generated by `polyopt bench --write-docs`, "
            "edits inside are overwritten -->", f"<!-- END polyopt bench {section} -->")


def _cuda_version(number: int) -> str:
    """CUDA's version integer (1000 * major + 10 * minor) as text: 13020 -> 13.2."""
    return f"{number // 1000}.{number % 1000 // 10}"


def _context(report: dict) -> str:
    m, c = report["machine"], report["config"]
    load = ", ".join(map(str, m["load_average"] or [])) or "unknown"
    environment = " ".join(f"{k}={v}" for k, v in m.get("environment", {}).items()) or "none set"
    what = (f"size {c['size']}, {c.get('dtype', 'f64')}" if report["kind"] == "kernels"
            else f"scale {c['scale']}")
    what += f", {c['repeats']} interleaved runs; polyopt: {c['polyopt']}"
    gpu = ""
    if "gpu" in m:
        g = m["gpu"]
        gpu = (f"GPU: {g['name']}, {g['memory_gib']} GiB, CUDA driver "
               f"{_cuda_version(g['driver'])}, runtime {_cuda_version(g['cuda_runtime'])}, CuPy "
               f"{g['cupy']}. " + (einsum_cuda.TIMING if _cuda_einsum(report) else
               "Kernel time: CUDA events around the computation on arrays already "
               "on the GPU (polyopt's host program replayed as a CUDA graph); end-to-end: the "
               "whole call, copies to the GPU and back included.") + "\n")
    return (f"`{report['command']}`, {report['date']}\n\n"
            f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, load average "
            f"{load} at the start; Python {m['python']}, numpy {m['numpy']}, LLVM {m['llvm']}, "
            f"{m['c_compiler']}; thread/BLAS environment variables: {environment}.\n" + gpu +
            f"Threads: {c['threads']} (OpenMP: {c['openmp']}; BLAS: {c['blas']}); {what}.\n"
            "Times: median milliseconds (minimum in parentheses); speedups are ratios of medians, "
            "above 1x faster. Every result is checked against the reference.")


def docs_section(report: dict, chart: str | None, note: str | None) -> str:
    """The generated markdown for ``report``: context, chart (or the note why not), table."""
    title = ("po.einsum on the GPU against cupy.einsum, torch and cuBLAS" if _cuda_einsum(report)
             else "po.einsum against numpy" if report["kind"] == "einsum"
             else "Suite kernels against gcc and numpy" if _target(report) == "cpu"
             else f"Suite kernels on the GPU ({_target(report)}) against gcc and cuBLAS")
    parts = [f"## {title} (generated)", _context(report)]
    parts.append(note if note else f"![{title}]({chart})")
    parts.append(markdown_table(*table(report)))
    parts.append("\n".join(f"- {line}" for line in summary_lines(report)))
    begin, end = _markers(section_name(report))
    return "\n".join([begin, "\n\n".join(parts), end])


def write_docs(report: dict, doc: str | Path) -> list[Path]:
    """Regenerate ``report``'s section of ``doc`` (appended the first time) and its chart in
    ``img/`` beside it; returns the files written."""
    doc = Path(doc)
    text = doc.read_text() if doc.exists() else "# Measured performance\n"
    section = section_name(report)
    begin, end = _markers(section)
    start = text.find(begin.split(":")[0] + ":")
    stop = text.find(end, start) if start >= 0 else -1
    if start >= 0 and stop < 0:
        raise BenchmarkError(f"{doc}: the generated section has no end marker {end!r}; "
                             "restore it (nothing was written)")
    image = doc.parent / "img" / f"bench_{section.replace(' ', '_')}.png"
    note = speedup_chart(report, image)
    generated = docs_section(report, image.relative_to(doc.parent).as_posix(), note)
    if start < 0:
        text = text.rstrip("\n") + "\n\n" + generated + "\n"
    else:
        text = text[:start] + generated + text[stop + len(end):]
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(text)
    return [doc] if note else [doc, image]
