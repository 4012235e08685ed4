"""Suite kernels: polyopt's code against gcc -O3 -march=native on the original loops and numpy.

A thin wrapper kept for the commands quoted in docs/performance.md; it is ``polyopt bench``
(polyopt/bench/), which takes the same arguments:

    python benchmarks/cpu_vs_gcc.py gemm --size LARGE --algorithm original --repeats 5
    python benchmarks/cpu_vs_gcc.py all --size MEDIUM --algorithm pluto --tile 32
"""
import sys

from polyopt.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", *(sys.argv[1:] or ["gemm"])]))
