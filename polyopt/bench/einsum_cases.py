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

#: (subscripts, operand shapes at scale 1, the same computation as numpy matmul or None, whether
#: both calls write into a given ``out=``). numpy.einsum returns a view for a relabeling or a
#: diagonal of one operand, and so does po.einsum; with ``out=`` both copy the elements, which
#: is the computation the "out=" rows time.
CASES: tuple[tuple[str, tuple[tuple[int, ...], ...], Callable | None, bool], ...] = (
    ("ij,jk->ik", ((512, 512), (512, 512)), lambda a, b: a @ b, False),
    ("ij,jk->ik", ((1000, 1000), (1000, 1000)), lambda a, b: a @ b, False),
    ("bij,bjk->bik", ((32, 128, 128), (32, 128, 128)), lambda a, b: a @ b, False),
    ("ijk,jl->ikl", ((64, 64, 64), (64, 64)), lambda a, b: a.transpose(0, 2, 1) @ b, False),
    ("ij,ij->i", ((2048, 2048), (2048, 2048)), None, False),
    ("ii->i", ((4096, 4096),), None, False),
    ("ii->i", ((4096, 4096),), None, True),
    ("ijk->kji", ((128, 128, 128),), None, False),
    ("ijk->kji", ((128, 128, 128),), None, True),
    ("ijk->kj", ((128, 128, 128),), None, False),
)


def case_label(case: dict) -> str:
    """How reports name one case: subscripts, operand shapes, and "out=" when both calls
    wrote into a given array."""
    shapes = " ".join("x".join(map(str, shape)) for shape in case["shapes"])
    return f"{case['subscripts']} {shapes}" + (" out=" if case.get("out_given") else "")


def _scaled(shape: tuple[int, ...], scale: float) -> tuple[int, ...]:
    return tuple(max(1, round(n * scale)) for n in shape)


def _discarding(call: Callable[[], object]) -> Callable[[], None]:
    """``call`` without its result (a returned number would count as kernel-only seconds)."""
    def run() -> None:
        call()
    return run


def bench_case(subscripts: str, shapes, matmul: Callable | None, into_out: bool = False, *,
               scale: float, repeats: int, options: dict[str, object]) -> dict[str, object]:
    """Check and time one contraction: polyopt (``po.einsum(..., **options)``), numpy.einsum and
    (if given) numpy matmul; with ``into_out`` both einsums write into preallocated arrays."""
    rng = np.random.default_rng(0)
    ops = [rng.random(_scaled(s, scale)) for s in shapes]
    expected = {"out": np.ascontiguousarray(np.einsum(subscripts, *ops))}
    outs = {name: np.empty_like(expected["out"]) if into_out else None for name in ("polyopt", "numpy")}
    # numpy.einsum returns a view for pure diagonals and transpositions ('ii->i', 'ijk->kji'),
    # as po.einsum does: the report says so beside the ratio
    view = not into_out and any(np.shares_memory(np.einsum(subscripts, *ops), op) for op in ops)
    calls = {"polyopt": lambda: po.einsum(subscripts, *ops, out=outs["polyopt"], **options),
             "numpy.einsum": lambda: np.einsum(subscripts, *ops, out=outs["numpy"])}
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
    return {"subscripts": subscripts, "shapes": [list(o.shape) for o in ops], "out_given": into_out,
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
        for subscripts, shapes, matmul, into_out in CASES:
            cases.append(bench_case(subscripts, shapes, matmul, into_out, scale=scale,
                                    repeats=repeats, options=options))
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
                            case_label(c): c["runners"]["polyopt"]["speedup_vs_numpy matmul"]
                            for c in cases if "speedup_vs_numpy matmul" in c["runners"]["polyopt"]}},
            "correct": all(c["correct"] for c in cases)}
