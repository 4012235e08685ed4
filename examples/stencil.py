"""A stencil with a time loop: Pluto skews it so that time and space tile together, and the
tiles run as a parallel wavefront. The result is checked against the original loop order run by
polyopt's own interpreter.

    python examples/stencil.py [N] [TSTEPS]
"""
import sys

import numpy as np

import polyopt as po
from polyopt import f64
from polyopt.transform.schedule import tree_statistics


@po.kernel
def jacobi_2d(TSTEPS: int, A: f64["N", "N"], B: f64["N", "N"]):
    for t in range(TSTEPS):
        for i in range(1, N - 1):
            for j in range(1, N - 1):
                B[i, j] = 0.2 * (A[i, j] + A[i, j - 1] + A[i, j + 1] + A[i + 1, j] + A[i - 1, j])
        for i in range(1, N - 1):
            for j in range(1, N - 1):
                A[i, j] = 0.2 * (B[i, j] + B[i, j - 1] + B[i, j + 1] + B[i + 1, j] + B[i - 1, j])


def main(n: int = 60, steps: int = 10) -> None:
    rng = np.random.default_rng(0)
    A, B = rng.random((n, n)), rng.random((n, n))
    A_ref, B_ref = A.copy(), B.copy()
    po.interpret(jacobi_2d, steps, A_ref, B_ref)              # the original order, interpreted

    sched = po.schedule(jacobi_2d.scop, "pluto", tile=16)
    po.verify(jacobi_2d.scop, sched)                         # every dependence respected, parallel loops race-free
    print(sched.pretty())
    print("statistics:", tree_statistics(sched.tree))

    po.compile(jacobi_2d, algorithm="pluto", tile=16)(steps, A, B)
    np.testing.assert_allclose(A, A_ref, rtol=1e-12)
    np.testing.assert_allclose(B, B_ref, rtol=1e-12)
    print("matches the original loop order")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
