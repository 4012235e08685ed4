"""po.einsum against numpy.einsum (and numpy matmul where one computes the same) in one process.

    python benchmarks/einsum_bench.py --scale 1.0 --repeats 5

Each contraction is compiled once (warm-up), checked against numpy.einsum, then timed
interleaved with its baselines. Printed: best-of-N seconds and ratios baseline time / polyopt
time (above 1: polyopt is faster).
"""
from __future__ import annotations

import argparse
import platform

import numpy as np

import polyopt as po
from polyopt.timing import median_seconds

#: (subscripts, operand shapes at scale 1, the same computation as numpy matmul or None)
CASES = [
    ("ij,jk->ik", [(512, 512), (512, 512)], lambda a, b: a @ b),
    ("bij,bjk->bik", [(32, 128, 128), (32, 128, 128)], lambda a, b: a @ b),
    ("ijk,jl->ikl", [(64, 64, 64), (64, 64)], lambda a, b: a.transpose(0, 2, 1) @ b),
    ("ij,ij->i", [(2048, 2048), (2048, 2048)], None),
    ("ii->i", [(4096, 4096)], None),
    ("ijk->kji", [(128, 128, 128)], None),
]


def _scaled(shape: tuple[int, ...], scale: float) -> tuple[int, ...]:
    return tuple(max(1, round(n * scale)) for n in shape)


def measure(subscripts: str, shapes, matmul, repeats: int, scale: float) -> dict:
    rng = np.random.default_rng(0)
    ops = [rng.random(_scaled(s, scale)) for s in shapes]
    expected = np.einsum(subscripts, *ops)
    if not np.allclose(po.einsum(subscripts, *ops), expected, rtol=1e-9, atol=1e-9):
        raise SystemExit(f"{subscripts}: polyopt's result differs from numpy.einsum")
    runners = {"polyopt": lambda: po.einsum(subscripts, *ops),
               "numpy.einsum": lambda: np.einsum(subscripts, *ops)}
    if matmul is not None:
        runners["numpy matmul"] = lambda: matmul(*ops)
    times = {label: [] for label in runners}
    for _ in range(repeats):  # interleaved, so that machine noise hits every runner alike
        for label, run in runners.items():
            times[label].append(median_seconds(run, repeats=1, warmup=0))
    best = {label: min(t) for label, t in times.items()}
    return {"subscripts": subscripts, "shapes": [o.shape for o in ops], **best}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every extent by this")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"# {platform.processor() or platform.machine()}, numpy {np.__version__}, "
          f"scheduler {po.runtime.DEFAULT_ALGORITHM}")
    print(f"{'subscripts':<14} {'shapes':<28} {'polyopt s':>10} {'einsum/po':>10} {'matmul/po':>10}")
    for subscripts, shapes, matmul in CASES:
        row = measure(subscripts, shapes, matmul, args.repeats, args.scale)
        ours = row["polyopt"]
        vs_matmul = f"{row['numpy matmul'] / ours:10.3f}" if "numpy matmul" in row else f"{'-':>10}"
        print(f"{subscripts:<14} {str(row['shapes']):<28} {ours:10.5f} "
              f"{row['numpy.einsum'] / ours:10.3f} {vs_matmul}")


if __name__ == "__main__":
    main()
