"""gemm end to end: write the loops, let polyopt schedule, tile and compile them, check the result
against numpy, and look at what runs.

    python examples/gemm.py [N]
"""
import sys
import time

import numpy as np

import polyopt as po
from polyopt import f64


@po.kernel
def gemm(alpha: f64, beta: f64, C: f64["NI", "NJ"], A: f64["NI", "NK"], B: f64["NK", "NJ"]):
    for i in range(NI):
        for j in range(NJ):
            C[i, j] *= beta
        for k in range(NK):
            for j in range(NJ):
                C[i, j] += alpha * A[i, k] * B[k, j]


def main(n: int = 300) -> None:
    rng = np.random.default_rng(0)
    A, B, C = rng.random((n, n + 10)), rng.random((n + 10, n + 20)), rng.random((n, n + 20))
    expected = 1.5 * A @ B + 1.2 * C

    ck = po.compile(gemm, algorithm="pluto", tile="auto")   # Pluto hyperplanes, tiles from the cache sizes
    print(ck.schedule.pretty())                             # the schedule tree, checked by po.verify
    print(ck.c_source)                                      # the loops that run, as C

    start = time.perf_counter()
    ck(1.5, 1.2, C, A, B)                                   # sizes come from the shapes; C is updated in place
    print(f"n={n}: {time.perf_counter() - start:.4f} s")
    np.testing.assert_allclose(C, expected, rtol=1e-10)
    print("matches numpy")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300)
