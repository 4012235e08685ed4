"""The suite's stencils on the GPU as a library call gets them, with the time-tile options:

    python benchmarks/gpu_stencils.py                          # LARGE, every stencil, the variants below
    python benchmarks/gpu_stencils.py --size EXTRALARGE jacobi-2d
    python benchmarks/gpu_stencils.py jacobi-2d --option time_tile=4 --option "tile=(24, 48)"

Each variant is compiled (``po.compile(kernel, target="cuda", **options)``), called once on CuPy
copies of the suite's inputs and checked against the numpy reference, then timed as repeated
calls on the same arrays (the path a loop calling the kernel takes: recorded launches, or one
CUDA graph for a host loop of time steps): CUDA events around each call, median of 5, which is
what a library call costs on the GPU, Python's launch work included where it is not hidden.
Without ``--option``, each kernel's default compile and the variants of :data:`VARIANTS`.
"""
from __future__ import annotations

import argparse

import numpy as np

import polyopt as po
from polyopt.targets.cuda import cupy_module
from sanitize_cuda import option  # (this folder: KEY=VALUE as a Python literal or a word)

#: The options timed per kernel besides its default compile: the sweeps alone (``resident=False``:
#: a launch per statement and time step; ``time_tile=False`` keeps the resident kernel) and time
#: tiles of a few shapes (``time_tile=K`` steps per launch, ``tile=`` per dimension).
VARIANTS = {
    "jacobi-1d": [{"time_tile": False}, {"time_tile": True}],
    "jacobi-2d": [{"resident": False}, {"time_tile": True}, {"time_tile": 4, "tile": (24, 48)},
                  {"time_tile": 2, "tile": (16, 64)}],
    "fdtd-2d": [{"resident": False}, {"time_tile": True}, {"time_tile": 4, "tile": (32, 32)}],
    "heat-3d": [{"resident": False}, {"time_tile": True}],
}


def call_ms(cupy, compiled, arguments: dict, repeats: int = 5) -> float:
    """Median GPU time of a repeated call, between CUDA events, in milliseconds."""
    start, stop, times = cupy.cuda.Event(), cupy.cuda.Event(), []
    for _ in range(repeats):
        start.record()
        compiled(**arguments)
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop))
    return sorted(times)[len(times) // 2]


def run(name: str, size: str, variants: list[dict]) -> None:
    cupy = cupy_module()
    entry = po.suite.get(name)
    sizes = entry.sizes(size)
    expected = entry.inputs(sizes)
    entry.reference(**expected)
    for options in variants:
        compiled = po.compile(entry.kernel, target="cuda", **options)
        arguments = {k: cupy.asarray(v) if isinstance(v, np.ndarray) else v for k, v in entry.inputs(sizes).items()}
        compiled(**arguments)
        ok = all(np.allclose(cupy.asnumpy(arguments[k]), v, rtol=1e-9, atol=1e-9)
                 for k, v in expected.items() if isinstance(v, np.ndarray))
        print(f"{name} {size} {options or 'default'}: {call_ms(cupy, compiled, arguments):.3f} ms"
              f"{'' if ok else '  WRONG'}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernels", nargs="*", help=f"stencils (default: {', '.join(VARIANTS)})")
    parser.add_argument("--size", default="LARGE")
    parser.add_argument("--option", action="append", type=option, default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    for name in args.kernels or VARIANTS:
        run(name, args.size, [dict(args.option)] if args.option else [{}] + VARIANTS.get(name, []))


if __name__ == "__main__":
    main()
