"""po.einsum against numpy.einsum and numpy matmul (issue #6's cases).

A thin wrapper: it is ``polyopt bench --einsum`` (polyopt/bench/einsum_cases.py):

    python benchmarks/einsum_bench.py --scale 1.0 --repeats 5 --threads 2
"""
import sys

from polyopt.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", "--einsum", *sys.argv[1:]]))
