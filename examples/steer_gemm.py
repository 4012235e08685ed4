"""Steering gemm by hand: rebuild, primitive by primitive from the loops as written, the schedule
that ``po.schedule(gemm, "pluto", tile="auto", register_tile="auto")`` chooses, check that the two
are the same schedule, then compile both and time them against each other (and against what
``po.autotune`` picks among a few candidates).

    python examples/steer_gemm.py [N] [--threads=T] [--no-autotune]

N (default 400) sizes the matrices: C is N x (N+10), A is N x (N+20), B is (N+20) x (N+10).
T (default 1) is the thread team of the parallel loops: on a shared machine a team as large as
the machine stalls whenever another process takes one of its cores, which times the machine's
load rather than the schedule.
"""
import statistics
import sys
import time

import numpy as np

import polyopt as po
from polyopt.schedulers.autotune import Candidate

gemm = po.suite.get("gemm").kernel   # S0: C[i, j] *= beta;  S1: C[i, j] += alpha * A[i, k] * B[k, j]


def by_hand(tuned: po.Schedule) -> po.Schedule:
    """The tuned schedule, rebuilt from the original loop order by primitives. Tile sizes come
    from the cache model of this machine and register tiles from its vector width, so they are
    read from the tuned schedule's trace (each step's options are plain data); the loops and the
    order of the steps are ours."""
    sizes = {step.loops: step.kwargs["sizes"] for step in tuned.trace if "sizes" in step.kwargs}

    s = po.schedule(gemm, "original")         # for i: { for j: S0;  for k: for j: S1 }
    i, k, j = s.loops("S1")
    # One nest per statement: the copy of i around S1 is called i@S1 (and j inside it j@S1).
    # Pluto's own order for S1 is (i, j, k); it permutes to (i, k, j) for stride-1 vectors,
    # which is the order as written: no permute needed here.
    s = s.distribute(i)
    # Rectangular tiles: loop x becomes x_0 (tiles) and x_1 (points). Nested single-loop bands
    # are tiled together (they are one band to the tile primitive).
    s = s.tile("i", "j", sizes=sizes[("i", "j")])
    s = s.tile("i@S1", "k", "j@S1", sizes=sizes[("i@S1", "k", "j@S1")])
    # The outermost tile loop of each nest on the thread team (checked: no dependence carried).
    s = s.parallel("i_0").parallel("i@S1_0")
    # Unroll-and-jam of the point loops: 4 rows x (vector width x 4) columns of C in registers.
    s = s.register_tile("i@S1_1", "j@S1_1", sizes=sizes[("i@S1_1", "j@S1_1")])
    return s


def timed(kernel: po.CompiledKernel, args: dict, threads: int) -> float:
    """Seconds of one call on fresh copies of the arrays (C is updated in place)."""
    work = {name: value.copy() if isinstance(value, np.ndarray) else value for name, value in args.items()}
    start = time.perf_counter()
    kernel(**work, num_threads=threads)
    return time.perf_counter() - start


def main(n: int = 400, threads: int = 1, autotune: bool = True) -> None:
    tuned = po.schedule(gemm, "pluto", tile="auto", register_tile="auto")
    print("pluto's trace:")
    print(tuned.trace.as_python())

    mine = by_hand(tuned)
    print("\nby hand:")
    print(mine.trace.as_python())
    print(mine.pretty())
    assert mine.map.is_equal(tuned.map), "the schedule built by hand differs from pluto's"
    print("\nthe schedule built by hand matches pluto's (same map: every instance at the same time)")

    rng = np.random.default_rng(0)
    args = {"alpha": 1.5, "beta": 1.2, "C": rng.random((n, n + 10)), "A": rng.random((n, n + 20)),
            "B": rng.random((n + 20, n + 10))}
    expected = args["alpha"] * args["A"] @ args["B"] + args["beta"] * args["C"]

    kernels = {"by hand": po.compile(gemm, schedule=mine), "pluto": po.compile(gemm, schedule=tuned),
               "original": po.compile(gemm, schedule=po.schedule(gemm, "original"))}
    print("same C source:", kernels["by hand"].c_source == kernels["pluto"].c_source)
    for name, kernel in kernels.items():
        C = args["C"].copy()
        kernel(**{**args, "C": C})
        np.testing.assert_allclose(C, expected, rtol=1e-10, err_msg=name)
    print("all three match numpy")

    repeats = 11 if n >= 200 else 31
    seconds: dict[str, list[float]] = {name: [] for name in kernels}
    for _ in range(repeats):  # interleaved, so that a busy moment of the machine hits all alike
        for name, kernel in kernels.items():
            seconds[name].append(timed(kernel, args, threads))
    median = {name: statistics.median(values) for name, values in seconds.items()}
    print(f"n={n}, {threads} thread(s):")
    for name, value in median.items():
        print(f"  {name:10s} {value * 1e3:9.3f} ms (median of {repeats})")
    print(f"by hand / pluto: {median['by hand'] / median['pluto']:.3f}x time "
          f"(1.0: the same code); original / pluto: {median['original'] / median['pluto']:.2f}x")

    if autotune:
        candidates = (Candidate("original", "original"), Candidate("pluto tiled", "pluto", (("tile", "auto"),)),
                      Candidate("pluto tiled+registers", "pluto", (("tile", "auto"), ("register_tile", "auto"))))
        result = po.autotune(gemm, candidates=candidates, num_threads=threads, **args)
        best = result.seconds[result.best.label]
        print(f"po.autotune over {len(candidates)} candidates picks {result.best.label!r}: "
              f"{best * 1e3:.3f} ms; by hand / autotune's pick: {median['by hand'] / best:.3f}x time")


if __name__ == "__main__":
    flags = [a for a in sys.argv[1:] if a.startswith("--")]
    sizes = [a for a in sys.argv[1:] if not a.startswith("--")]
    team = [int(a.split("=", 1)[1]) for a in flags if a.startswith("--threads=")]
    main(int(sizes[0]) if sizes else 400, threads=team[-1] if team else 1, autotune="--no-autotune" not in flags)
