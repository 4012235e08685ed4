"""numpy.einsum's behaviour, computed by polyopt-generated code; the compiled kernel behind a
pattern can be inspected like any other.

    python examples/einsum.py
"""
import numpy as np

import polyopt as po


def main() -> None:
    rng = np.random.default_rng(0)
    A, B, x = rng.random((40, 50)), rng.random((50, 30)), rng.random(50)
    T = rng.random((6, 40, 50))

    for subscripts, operands in [("ij,jk->ik", (A, B)),          # matrix product
                                 ("ij,j", (A, x)),               # implicit output: 'i'
                                 ("bij,jk->bik", (T, B)),        # batched
                                 ("ii->i", (A[:, :40],)),        # diagonal
                                 ("...j,j->...", (T, x))]:       # ellipsis broadcasting
        got = po.einsum(subscripts, *operands)
        np.testing.assert_allclose(got, np.einsum(subscripts, *operands), rtol=1e-12)
        print(f"{subscripts:14s} -> shape {got.shape}, matches numpy.einsum")

    ck = po.einsum_kernel("ij,jk->ik", A, B)                     # what runs for that pattern
    print(ck.schedule.pretty())
    print(ck.c_source)


if __name__ == "__main__":
    main()
