"""Run suite kernels' CUDA code once each, checked against numpy, for compute-sanitizer:

    compute-sanitizer --tool memcheck  python benchmarks/sanitize_cuda.py atax bicg
    compute-sanitizer --tool racecheck python benchmarks/sanitize_cuda.py --size MINI
    compute-sanitizer --tool synccheck python benchmarks/sanitize_cuda.py --option reductions=False

No kernel names: every suite kernel. Each runs at ``--size`` (default MINI, the sanitizers are
slow) in f64 with the default options plus each ``--option KEY=VALUE``; a result off the
reference raises. Prints one line per kernel; the sanitizer prints its own error summary.
"""
from __future__ import annotations

import argparse
import ast

import numpy as np

import polyopt as po


def option(text: str) -> tuple[str, object]:
    key, _, value = text.partition("=")
    try:
        return key, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return key, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernels", nargs="*", help="suite kernels (default: all)")
    parser.add_argument("--size", default="MINI")
    parser.add_argument("--option", action="append", type=option, default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    options = dict(args.option)
    for name in args.kernels or po.suite.names():
        entry = po.suite.get(name)
        inputs = entry.inputs(entry.sizes(args.size))
        expected = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in inputs.items()}
        entry.reference(**expected)
        po.compile(entry.kernel, target="cuda", **options)(**inputs)
        for key, value in expected.items():
            if isinstance(value, np.ndarray):
                np.testing.assert_allclose(inputs[key], value, rtol=1e-9, atol=1e-9, err_msg=f"{name} {key}")
        print(f"{name}: ok", flush=True)


if __name__ == "__main__":
    main()
