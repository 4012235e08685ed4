"""``po.einsum`` against ``numpy.einsum`` and, where one computes the same, numpy matmul (BLAS).

Issue #6's evidence: a matmul-shaped einsum at >= 50 % of numpy matmul on the same threads, and
contractions numpy.einsum does not hand to BLAS faster than numpy.einsum ('ijk->kj' is the
transposition with a reduction). Every case is checked against numpy.einsum before it is timed
(interleaved, like the suite kernels).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

import polyopt as po
from polyopt.bench.machine import machine_info, now_utc
from polyopt.bench.measure import check, geometric_mean, interleave, summarize
from polyopt.bench.threads import blas_threads, openmp_threads, thread_kwargs

#: (subscripts, operand shapes at scale 1, the same computation as numpy matmul, or None).
CASES: tuple[tuple[str, tuple[tuple[int, ...], ...], Callable | None], ...] = (
    ("ij,jk->ik", ((512, 512), (512, 512)), lambda a, b: a @ b),
    ("bij,bjk->bik", ((32, 128, 128), (32, 128, 128)), lambda a, b: a @ b),
    ("ijk,jl->ikl", ((64, 64, 64), (64, 64)), lambda a, b: a.transpose(0, 2, 1) @ b),
    ("ij,ij->i", ((2048, 2048), (2048, 2048)), None),
    ("ii->i", ((4096, 4096),), None),
    ("ijk->kji", ((128, 128, 128),), None),
    ("ijk->kj", ((128, 128, 128),), None),
)


def _scaled(shape: tuple[int, ...], scale: float) -> tuple[int, ...]:
    return tuple(max(1, round(n * scale)) for n in shape)


def _discarding(call: Callable[[], object]) -> Callable[[], None]:
    """``call`` without its result (a returned number would count as kernel-only seconds)."""
    def run() -> None:
        call()
    return run


def bench_case(subscripts: str, shapes, matmul: Callable | None, *, scale: float, repeats: int,
               options: dict[str, object]) -> dict[str, object]:
    """Check and time one contraction: polyopt (``po.einsum(..., **options)``), numpy.einsum and
    (if given) numpy matmul."""
    rng = np.random.default_rng(0)
    ops = [rng.random(_scaled(s, scale)) for s in shapes]
    expected = {"out": np.einsum(subscripts, *ops)}
    # numpy.einsum returns a view for pure diagonals and transpositions ('ii->i', 'ijk->kji'):
    # no data moves, while po.einsum writes a new array; the report says so beside the ratio
    view = any(np.shares_memory(expected["out"], op) for op in ops)
    calls = {"polyopt": lambda: po.einsum(subscripts, *ops, **options),
             "numpy.einsum": lambda: np.einsum(subscripts, *ops)}
    if matmul is not None:
        calls["numpy matmul"] = lambda: matmul(*ops)
    results: dict[str, dict[str, object]] = {}
    for name, call in calls.items():  # warm-up (polyopt compiles here) and check
        results[name] = check({"out": call()}, expected)
    timed = {name: _discarding(call) for name, call in calls.items() if results[name]["correct"]}
    for name, samples in interleave(timed, repeats).items():
        results[name].update(summarize(samples))
    ours = results["polyopt"].get("median_s")
    for name, result in results.items():
        if ours and "median_s" in result and name != "polyopt":
            results["polyopt"][f"speedup_vs_{name}"] = result["median_s"] / ours
    return {"subscripts": subscripts, "shapes": [list(o.shape) for o in ops],
            "correct": all(r["correct"] for r in results.values()), "runners": results,
            "numpy_einsum_returns_view": view}


def bench_einsum(*, scale: float = 1.0, repeats: int = 5, threads: int = 1, command: str = "",
                 on_result: Callable[[dict], object] | None = None) -> dict[str, object]:
    """Every case of :data:`CASES` at ``scale``; summary: geometric-mean speedup over numpy.einsum
    and polyopt's speed as a fraction of numpy matmul on the matmul-shaped cases."""
    machine = machine_info()
    started = now_utc()
    options = thread_kwargs(po.einsum, threads)
    cases = []
    with openmp_threads(threads) as openmp, blas_threads(threads) as blas:
        for subscripts, shapes, matmul in CASES:
            cases.append(bench_case(subscripts, shapes, matmul, scale=scale, repeats=repeats,
                                    options=options))
            if on_result is not None:
                on_result(cases[-1])
    ours = [c["runners"]["polyopt"] for c in cases]
    return {"kind": "einsum", "command": command, "date": started, "machine": machine,
            "config": {"scale": scale, "repeats": repeats, "threads": threads, "openmp": openmp,
                       "blas": blas,
                       "polyopt": (f"num_threads={threads}" if options else
                                   "po.einsum takes no num_threads=, so its default team")},
            "cases": cases,
            "summary": {"geomean_speedup_vs_numpy.einsum": geometric_mean(
                            r.get("speedup_vs_numpy.einsum") for r in ours),
                        "fraction_of_numpy_matmul": {
                            c["subscripts"]: c["runners"]["polyopt"]["speedup_vs_numpy matmul"]
                            for c in cases if "speedup_vs_numpy matmul" in c["runners"]["polyopt"]}},
            "correct": all(c["correct"] for c in cases)}
