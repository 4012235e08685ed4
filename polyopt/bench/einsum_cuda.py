"""``polyopt bench --einsum --target cuda``: po.einsum on the GPU against cupy.einsum, torch.einsum
(TF32 off and on) where torch is importable, and cuBLAS (CuPy's matmul) for the plain matmul.

Issue #17's contractions (attention scores and values, batched matmul, 4096^3 matmul, a 4-index
contraction, a 1x1 convolution) run in f32 with polyopt's default precision ("exact") and, where
po.einsum takes ``precision=``, also "tf32"; and in f16 and bf16 where the array libraries hold
that dtype (bf16 only through torch: CuPy has no bf16, so polyopt and cupy.einsum are "-"
there). Every implementation runs on the same device arrays; each is checked against a float64
cupy.einsum of the same data with a tolerance suited to its precision, then timed between CUDA
events: ``warmup`` untimed runs, then the median (and minimum) of ``repeats`` runs. A last row
measures the launch overhead: host microseconds per repeated call of a tiny einsum.

CuPy and torch are imported only when the benchmark runs (:func:`bench_einsum_cuda`).
"""
from __future__ import annotations

import importlib
import inspect
import statistics
import time
from typing import Callable

import numpy as np

import polyopt as po
from polyopt.bench.machine import gpu_info, machine_info, now_utc
from polyopt.targets.cuda import cupy_module
from polyopt.targets.torch_tensors import is_torch_cuda

#: (subscripts, operand shapes at scale 1) of issue #17.
CASES: tuple[tuple[str, tuple[tuple[int, ...], ...]], ...] = (
    ("bhqd,bhkd->bhqk", ((8, 16, 512, 64), (8, 16, 512, 64))),
    ("bhqk,bhkd->bhqd", ((8, 16, 512, 512), (8, 16, 512, 64))),
    ("bik,kj->bij", ((16, 512, 1024), (1024, 1024))),
    ("ij,jk->ik", ((4096, 4096), (4096, 4096))),
    ("abcd,cdef->abef", ((32, 32, 32, 32), (32, 32, 32, 32))),
    ("nchw,kc->nkhw", ((32, 256, 28, 28), (256, 256))),
)
#: The data types of the rows.
DTYPES = ("f32", "f16", "bf16")
#: Largest normwise error (see :func:`polyopt.bench.measure.relative_error`) accepted per
#: (dtype, precision): reordered f32 sums; TF32's 10-bit mantissas; half-precision storage.
TOLERANCE = {("f32", "exact"): 1e-4, ("f32", "tf32"): 5e-3, ("f16", "exact"): 1e-2,
             ("bf16", "exact"): 5e-2}
#: How the report's context describes the times.
TIMING = ("Times: CUDA events around each call on arrays already on the GPU, median of the timed "
          "runs after warm-up runs; torch.einsum with TF32 off (torch.backends.cuda.matmul.allow_tf32"
          "=False) and on; cuBLAS through CuPy's matmul (TF32 off); launch overhead: host time per "
          "repeated call.")
#: The tiny einsum whose repeated calls the launch-overhead row times, and how many calls.
OVERHEAD_CASE = ("ij,jk->ik", ((16, 16), (16, 16)))
OVERHEAD_CALLS = 2000


def einsum_precisions(einsum: Callable = po.einsum) -> tuple[str, ...]:
    """The precision modes the rows run polyopt in: ("exact", "tf32") where ``einsum`` takes
    ``precision=``, else ("exact",) (its only behaviour)."""
    return ("exact", "tf32") if "precision" in inspect.signature(einsum).parameters else ("exact",)


def precision_options(precision: str, einsum: Callable = po.einsum) -> dict[str, str]:
    """The keyword arguments that ask ``einsum`` for ``precision``: none where it has no such
    option (then it computes "exact")."""
    return {"precision": precision} if "precision" in inspect.signature(einsum).parameters else {}


def torch_module():
    """torch with a CUDA device, or None."""
    try:
        torch = importlib.import_module("torch")
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def event_times(record: Callable[[], object], elapsed: Callable[[object, object], float],
                run: Callable[[], object], warmup: int, repeats: int) -> list[float]:
    """Seconds of ``repeats`` runs of ``run`` after ``warmup`` untimed ones, each between two
    events (``record()`` makes and records one; ``elapsed(start, stop)``: synchronizes on
    ``stop`` and returns the milliseconds between them)."""
    for _ in range(warmup):
        run()
    times = []
    for _ in range(repeats):
        start = record()
        run()
        stop = record()
        times.append(elapsed(start, stop) / 1e3)
    return times


def _cupy_events(cp):
    def record():
        event = cp.cuda.Event()
        event.record()
        return event

    def elapsed(start, stop) -> float:
        stop.synchronize()
        return cp.cuda.get_elapsed_time(start, stop)
    return record, elapsed


def _torch_events(torch):
    def record():
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def elapsed(start, stop) -> float:
        stop.synchronize()
        return start.elapsed_time(stop)
    return record, elapsed


def _scaled(shape: tuple[int, ...], scale: float) -> tuple[int, ...]:
    return tuple(max(1, round(n * scale)) for n in shape)


def _error(cp, got, expected) -> float:
    """Normwise relative error of a device result against the float64 reference."""
    diff = float(cp.max(cp.abs(cp.asarray(got, dtype=cp.float64) - expected)))
    scale = float(cp.max(cp.abs(expected)))
    return diff / scale if scale else diff


def _measure(cp, events, run: Callable[[], object], expected, tolerance: float, warmup: int,
             repeats: int) -> dict[str, object]:
    """Check ``run()``'s result against ``expected``, then time it (only where correct)."""
    try:
        got = run()
        if is_torch_cuda(got):
            got = got.double()  # CuPy reads no bf16
        error = _error(cp, cp.asarray(got), expected)
    except Exception as exc:  # an implementation that cannot run this case: say why
        return {"correct": False, "error": f"{type(exc).__name__}: {exc}"}
    result: dict[str, object] = {"max_rel_error": error, "correct": error <= tolerance}
    if result["correct"]:
        times = event_times(*events, run, warmup, repeats)
        result.update(median_s=statistics.median(times), min_s=min(times), times_s=times)
    return result


def _implementations(cp, torch, subscripts: str, ops_cupy: list, dtype: str, precision: str) -> dict:
    """name -> (events kind, precision mode, call) of the implementations that hold this dtype:
    polyopt in ``precision``; in the "exact" row also the libraries (torch in both modes)."""
    calls: dict[str, tuple[str, str, Callable[[], object]]] = {}
    if dtype != "bf16":
        options = precision_options(precision)
        calls["polyopt"] = ("cupy", precision, lambda: po.einsum(subscripts, *ops_cupy, **options))
        if precision == "exact":
            calls["cupy.einsum"] = ("cupy", "exact", lambda: cp.einsum(subscripts, *ops_cupy))
            if subscripts == "ij,jk->ik":
                calls["cublas"] = ("cupy", "exact", lambda: ops_cupy[0] @ ops_cupy[1])
    if torch is not None and precision == "exact":
        ops_torch = [_torch_view(torch, cp, op, dtype) for op in ops_cupy]
        calls["torch.einsum"] = ("torch", "exact",
                                 _with_tf32(torch, False, lambda: torch.einsum(subscripts, *ops_torch)))
        if dtype == "f32":
            calls["torch.einsum tf32"] = ("torch", "tf32",
                                          _with_tf32(torch, True, lambda: torch.einsum(subscripts, *ops_torch)))
    return calls


def _torch_view(torch, cp, op, dtype: str):
    """The operand as a torch tensor: the same memory, or (bf16, which CuPy lacks) a bf16 copy
    of the f32 data."""
    tensor = torch.as_tensor(op, device="cuda")
    return tensor.to(torch.bfloat16) if dtype == "bf16" else tensor


def _with_tf32(torch, allow: bool, call: Callable[[], object]) -> Callable[[], object]:
    """``call`` with torch's TF32 matmul switch set to ``allow`` (restored afterwards)."""
    def run():
        before = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = allow
        try:
            return call()
        finally:
            torch.backends.cuda.matmul.allow_tf32 = before
    return run


def bench_row(cp, torch, subscripts: str, shapes, dtype: str, precision: str, *, scale: float,
              warmup: int, repeats: int) -> dict[str, object]:
    """Check and time one (contraction, dtype, precision) row on the same device data."""
    rng = np.random.default_rng(0)
    host = [rng.standard_normal(_scaled(s, scale)).astype(np.float32) for s in shapes]
    storage = {"f32": np.float32, "f16": np.float16, "bf16": np.float32}[dtype]
    ops = [cp.asarray(a.astype(storage)) for a in host]
    # the reference of what each implementation reads (bf16: the bf16-rounded data)
    exact = [cp.asarray(_torch_view(torch, cp, op, dtype).float()) if dtype == "bf16" else op for op in ops]
    expected = cp.einsum(subscripts, *[cp.asarray(op, dtype=cp.float64) for op in exact])
    events = {"cupy": _cupy_events(cp), "torch": None if torch is None else _torch_events(torch)}
    runners = {name: _measure(cp, events[kind], call, expected, TOLERANCE[(dtype, mode)], warmup, repeats)
               for name, (kind, mode, call) in _implementations(cp, torch, subscripts, ops, dtype, precision).items()}
    ours = runners.get("polyopt", {}).get("median_s")
    for name, result in runners.items():
        if ours and "median_s" in result and name != "polyopt":
            runners["polyopt"][f"speedup_vs_{name}"] = result["median_s"] / ours
    return {"subscripts": subscripts, "shapes": [list(_scaled(s, scale)) for s in shapes], "dtype": dtype,
            "precision": precision, "runners": runners,
            "correct": all(r["correct"] or "error" in r for r in runners.values())}


def host_microseconds(call: Callable[[], object], sync: Callable[[], object], calls: int) -> float:
    """Host microseconds per call of ``calls`` back-to-back calls of ``call`` (after one warm-up
    call; the work is synchronized before and after, not in between)."""
    call()
    sync()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    elapsed = time.perf_counter() - start
    sync()
    return elapsed / calls * 1e6


def overhead_row(cp, torch, calls: int = OVERHEAD_CALLS) -> dict[str, object]:
    """Host microseconds per repeated call of :data:`OVERHEAD_CASE` (f32): po.einsum on CuPy
    arrays (and on torch tensors), cupy.einsum, torch.einsum."""
    subscripts, shapes = OVERHEAD_CASE
    rng = np.random.default_rng(0)
    ops = [cp.asarray(rng.standard_normal(s).astype(np.float32)) for s in shapes]
    sync = cp.cuda.get_current_stream().synchronize
    row = {"po.einsum (cupy)": host_microseconds(lambda: po.einsum(subscripts, *ops), sync, calls),
           "cupy.einsum": host_microseconds(lambda: cp.einsum(subscripts, *ops), sync, calls)}
    if torch is not None:
        tensors = [torch.as_tensor(op, device="cuda") for op in ops]
        row["po.einsum (torch)"] = host_microseconds(lambda: po.einsum(subscripts, *tensors), sync, calls)
        row["torch.einsum"] = host_microseconds(lambda: torch.einsum(subscripts, *tensors), torch.cuda.synchronize, calls)
    return {"subscripts": subscripts, "shapes": [list(s) for s in shapes], "calls": calls, "host_us": row}


def bench_einsum_cuda(*, scale: float = 1.0, repeats: int = 10, warmup: int = 3, command: str = "",
                      on_result: Callable[[dict], object] | None = None) -> dict[str, object]:
    """Every case of :data:`CASES` in each dtype of :data:`DTYPES` (and f32 in each precision of
    :func:`einsum_precisions`), then the launch-overhead row; needs CuPy and a GPU
    (:class:`~polyopt.TargetUnavailableError` otherwise)."""
    cp = cupy_module()
    torch = torch_module()
    machine = machine_info()
    machine["gpu"] = gpu_info()
    started = now_utc()
    rows = []
    for subscripts, shapes in CASES:
        for dtype in DTYPES:
            for precision in einsum_precisions() if dtype == "f32" else ("exact",):
                if dtype == "bf16" and torch is None:
                    continue  # nothing holds bf16 data without torch
                rows.append(bench_row(cp, torch, subscripts, shapes, dtype, precision, scale=scale,
                                      warmup=warmup, repeats=repeats))
                if on_result is not None:
                    on_result(rows[-1])
    overhead = overhead_row(cp, torch)
    return {"kind": "einsum", "command": command, "date": started, "machine": machine,
            "config": {"target": "cuda", "scale": scale, "repeats": repeats, "warmup": warmup, "threads": 1,
                       "openmp": "-", "blas": "-",
                       "polyopt": "po.einsum on device arrays, precision= " +
                                  ("given per row" if len(einsum_precisions()) > 1 else "not an option: exact"),
                       "torch": None if torch is None else torch.__version__},
            "cases": rows, "launch_overhead": overhead,
            "summary": summary(rows),
            "correct": all(r["correct"] for r in rows)}


def summary(rows: list[dict]) -> dict[str, object]:
    """Per row label, polyopt's speed as a fraction of torch.einsum's in the same mode (a TF32
    row against torch with TF32, timed in the exact row of the same contraction and dtype)."""
    fractions = {}
    for row in rows:
        ours = row["runners"].get("polyopt", {})
        if row["precision"] == "tf32":
            exact = row_of(rows, row["subscripts"], row["dtype"], "exact")
            fractions[label(row)] = _ratio_of(ours, exact["runners"].get("torch.einsum tf32") if exact else None)
        else:
            fractions[label(row)] = ours.get("speedup_vs_torch.einsum")
    return {"fraction_of_torch": fractions}


def row_of(rows: list[dict], subscripts: str, dtype: str, precision: str) -> dict | None:
    """The row of ``rows`` for this contraction, dtype and precision (None: none)."""
    return next((r for r in rows if (r["subscripts"], r["dtype"], r["precision"]) == (subscripts, dtype, precision)),
                None)


def _ratio_of(ours: dict, theirs: dict | None) -> float | None:
    if not theirs or "median_s" not in theirs or "median_s" not in ours:
        return None
    return theirs["median_s"] / ours["median_s"]


def label(row: dict) -> str:
    """How reports name a row: subscripts, dtype, precision."""
    return f"{row['subscripts']} {row['dtype']} {row['precision']}"


#: The columns of the table: header, runner name.
COLUMNS = (("polyopt ms", "polyopt"), ("cupy.einsum ms", "cupy.einsum"), ("torch.einsum ms (TF32 off)", "torch.einsum"),
           ("torch TF32 ms", "torch.einsum tf32"), ("cuBLAS ms", "cublas"))


def _ms(result: dict | None) -> str:
    if not result:
        return "-"
    if "median_s" not in result:
        return "WRONG" if "max_rel_error" in result else "failed"
    return f"{result['median_s'] * 1e3:.4g}"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def table(report: dict) -> tuple[list[str], list[list[str]]]:
    """Rows: contraction, shapes, dtype, precision, the milliseconds of each implementation, polyopt's
    ratios to torch (same mode) and cupy.einsum, check; then the launch-overhead row (us)."""
    header = ["subscripts", "shapes", "dtype", "precision", *(h for h, _ in COLUMNS),
              "polyopt vs torch (same mode)", "polyopt vs cupy.einsum", "check"]
    rows = []
    for row in report["cases"]:
        runners = row["runners"]
        torch_row = row_of(report["cases"], row["subscripts"], row["dtype"], "exact") if row["precision"] == "tf32" else row
        cells = {name: runners.get(name) for _, name in COLUMNS}
        if row["precision"] == "tf32" and torch_row:
            cells["torch.einsum tf32"] = torch_row["runners"].get("torch.einsum tf32")
        rows.append([f"`{row['subscripts']}`", " ".join("x".join(map(str, s)) for s in row["shapes"]),
                     row["dtype"], row["precision"], *(_ms(cells[name]) for _, name in COLUMNS),
                     _x(report["summary"]["fraction_of_torch"].get(label(row))),
                     _x(runners.get("polyopt", {}).get("speedup_vs_cupy.einsum")),
                     "ok" if row["correct"] else "MISMATCH"])
    overhead = report["launch_overhead"]
    us = overhead["host_us"]
    rows.append([f"`{overhead['subscripts']}` launch overhead (host us per repeated call)",
                 " ".join("x".join(map(str, s)) for s in overhead["shapes"]), "f32", "exact",
                 f"{us['po.einsum (cupy)']:.1f} us" + (f" (torch: {us['po.einsum (torch)']:.1f} us)"
                                                       if "po.einsum (torch)" in us else ""),
                 f"{us['cupy.einsum']:.1f} us",
                 f"{us['torch.einsum']:.1f} us" if "torch.einsum" in us else "-", "-", "-", "-", "-", "-"])
    return header, rows


def summary_lines(report: dict) -> list[str]:
    """polyopt's speed against torch per row in words, and the launch overhead."""
    lines = [f"`{name}`: po.einsum runs at {_x(value)} the speed of torch.einsum in the same mode"
             for name, value in report["summary"]["fraction_of_torch"].items()]
    us = report["launch_overhead"]["host_us"]
    lines.append(f"launch overhead of a repeated po.einsum call on CuPy arrays: {us['po.einsum (cupy)']:.1f} us "
                 f"of host time (cupy.einsum {us['cupy.einsum']:.1f} us)")
    return lines


def chart_series(report: dict) -> tuple[list[str], dict[str, list[float | None]], str]:
    """The chart's bars: polyopt's speed against torch and cupy.einsum per row."""
    rows = report["cases"]
    series = {"vs torch (same mode)": [report["summary"]["fraction_of_torch"].get(label(r)) for r in rows],
              "vs cupy.einsum": [r["runners"].get("polyopt", {}).get("speedup_vs_cupy.einsum") for r in rows]}
    return [label(r) for r in rows], series, "po.einsum speedup"
