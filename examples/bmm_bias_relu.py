"""A batched matmul with a bias and a ReLU, written as three loop nests: the default compile runs
the bias and the ReLU inside the matmul's output tiles, once each tile's sum is complete (the
cost model's epilogue fusion), instead of two more passes over C. Checks the result against
numpy and times the default compile, the same schedule with the epilogues in their own nests
(``epilogues=False``) and numpy, interleaved.

    python examples/bmm_bias_relu.py [NB N] [--repeat R]
"""
import argparse
import time

import numpy as np

import polyopt as po
from polyopt import f64


@po.kernel
def bmm_bias_relu(C: f64["NB", "NI", "NJ"], A: f64["NB", "NI", "NK"], B: f64["NB", "NK", "NJ"], bias: f64["NJ"]):
    for b in range(NB):
        for i in range(NI):
            for j in range(NJ):
                C[b, i, j] = 0.0
                for k in range(NK):
                    C[b, i, j] += A[b, i, k] * B[b, k, j]
    for b in range(NB):
        for i in range(NI):
            for j in range(NJ):
                C[b, i, j] += bias[j]
    for b in range(NB):
        for i in range(NI):
            for j in range(NJ):
                C[b, i, j] = max(C[b, i, j], 0.0)


def seconds(run) -> float:
    """The time of one call of ``run``, in seconds."""
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def main(nb: int = 8, n: int = 256, repeat: int = 5) -> None:
    rng = np.random.default_rng(0)
    A, B = rng.random((nb, n, n)) - 0.5, rng.random((nb, n, n)) - 0.5
    bias, C = rng.random(n) - 0.5, np.empty((nb, n, n))

    fused = po.compile(bmm_bias_relu)                       # the default: pluto and the cost model
    apart = po.compile(bmm_bias_relu, epilogues=False)      # the same, the epilogues in their own nests
    for step in fused.schedule.trace:
        if step.note.startswith("cost model: epilogue"):
            print(step.as_python(), "#", step.note)
    fused(C, A, B, bias)
    np.testing.assert_allclose(C, np.maximum(A @ B + bias, 0.0), rtol=1e-10, atol=1e-12)
    print("matches numpy")

    runs = {"default (epilogues fused)": lambda: fused(C, A, B, bias),
            "epilogues=False": lambda: apart(C, A, B, bias),
            "numpy": lambda: np.maximum(np.matmul(A, B, out=C) + bias, 0.0, out=C)}
    best = {name: float("inf") for name in runs}
    for _ in range(repeat):                                 # interleaved: the machine may be shared
        for name, run in runs.items():
            best[name] = min(best[name], seconds(run))
    for name, time_taken in best.items():
        print(f"NB={nb} N={n} {name}: {time_taken * 1e3:.2f} ms ({best['numpy'] / time_taken:.2f}x of numpy)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", nargs="*", type=int, help="NB N (batch, matrix size)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    main(*args.sizes[:2], repeat=args.repeat)
