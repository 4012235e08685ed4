"""po.einsum against numpy.einsum and numpy matmul (issue #6's cases), or on the GPU against
cupy.einsum, torch.einsum (TF32 off and on) and cuBLAS (issue #17's cases).

A thin wrapper: it is ``polyopt bench --einsum`` (polyopt/bench/einsum_cases.py and, with
``--target cuda``, polyopt/bench/einsum_cuda.py):

    python benchmarks/einsum_bench.py --scale 1.0 --repeats 5 --threads 2
    python benchmarks/einsum_bench.py --target cuda --repeats 20 --json gpu_einsum.json
"""
import sys

from polyopt.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", "--einsum", *sys.argv[1:]]))
