"""Random Jacobi-style stencils (1-d and 2-d, one to three sweeps per time step, neighbour reads
up to two cells away, boxes of their own per statement) through the GPU stencil path's plan:
the recognizer takes them, and the plan's overlapped tiles -- emulated in numpy tile by tile with
the plan's own regions, halos and ping-pong (:func:`test_stencil_time_tiling.emulate`) -- give
the interpreter's result for random time steps per launch, tile sizes and problem sizes, so a
halo too small for some offset pattern fails here without a GPU."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, event, given, settings, strategies as st

import polyopt as po
from polyopt.analysis.stencil import find_stencil
from polyopt.targets.cache import scop_of

from test_stencil_time_tiling import emulate

ARRAYS = ("A", "B")


@st.composite
def stencils(draw):
    """(DSL source, rank, whether some statement reads a written array at a nonzero offset) of a
    random stencil: each statement writes A or B over its own box (``lo`` cells in from the
    start, ``margin`` from the end, per dimension) from terms reading A or B at offsets that stay
    inside the arrays; its own array only at offset 0."""
    rank = draw(st.sampled_from((1, 2)))
    names = "ij"[:rank]
    body, written_arrays, reads = [], set(), []
    for k in range(draw(st.sampled_from((1, 2, 2, 3, 3)))):
        written = ARRAYS[(k + 1) % 2] if k == 2 and draw(st.booleans()) else ARRAYS[k % 2]
        box = [(draw(st.integers(1, 2)), draw(st.integers(1, 2))) for _ in range(rank)]
        terms = []
        for _ in range(draw(st.integers(1, 4))):
            read = draw(st.sampled_from(ARRAYS))
            offsets = ([0] * rank if read == written else
                       [draw(st.integers(-lo, margin)) for lo, margin in box])
            index = ", ".join(f"{n} + {o}" if o >= 0 else f"{n} - {-o}" for n, o in zip(names, offsets))
            terms.append(f"{draw(st.sampled_from((0.25, 0.5, -0.5, 0.75)))} * {read}[{index}]")
            reads.append((read, any(offsets)))
        loops = [f"for {n} in range({lo}, N - {margin}):" for n, (lo, margin) in zip(names, box)]
        lines = [("    " * (d + 2)) + loop for d, loop in enumerate(loops)]
        lines.append("    " * (rank + 2) + f"{written}[{', '.join(names)}] = {' + '.join(terms)}")
        body += lines
        written_arrays.add(written)
    shape = ", ".join(['"N"'] * rank)
    source = (f"def fuzz(T: int, A: f64[{shape}], B: f64[{shape}]):\n    for t in range(T):\n"
              + "\n".join(body) + "\n")
    return source, rank, any(shifted for read, shifted in reads if read in written_arrays)


@settings(max_examples=40, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(case=stencils(), n=st.integers(5, 13), steps=st.integers(0, 5), per_launch=st.integers(2, 5),
       tile=st.integers(2, 8))
def test_random_stencils_tile_like_the_interpreter(case, n, steps, per_launch, tile):
    source, rank, neighbours = case
    kernel = po.kernel_from_source(source)
    stencil = find_stencil(scop_of(kernel))
    assert (stencil is not None) == neighbours, source  # no neighbour read: each element on its own
    event(f"rank {rank}, {'a stencil' if stencil is not None else 'no stencil'}")
    if stencil is None:
        return
    rng = np.random.default_rng(n)
    shape = (n,) * rank
    args = {"T": steps, "A": rng.random(shape), "B": rng.random(shape)}
    expected = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in args.items()}
    po.interpret(kernel, **expected)
    emulate(kernel, {"T": steps, "N": n}, args, time_tile=per_launch, tile=(tile,) * rank if rank > 1 else tile)
    for name in ARRAYS:
        np.testing.assert_allclose(args[name], expected[name], rtol=1e-12, atol=1e-12, err_msg=f"{name}\n{source}")
