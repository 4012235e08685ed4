"""The benchmark harness behind ``polyopt bench``: polyopt's code against gcc -O3 on the original
loops, other tools' C files and numpy/BLAS (on the GPU: cuBLAS), in one process, interleaved,
on the same arrays, every result checked; reports as tables, JSON and docs/performance.md's
generated sections.

    from polyopt.bench import BenchConfig, bench_kernels
    report = bench_kernels(["gemm"], BenchConfig(size="MEDIUM", threads=2))

Modules: ``config`` (what to run), ``runners`` (one :class:`Runner` per implementation and
target), ``cuda`` (the GPU runners: polyopt's CUDA code and cuBLAS), ``threads``, ``measure``
(interleaving, checks, statistics), ``kernels`` and ``einsum_cases`` (the two report kinds),
``machine``, ``report`` (tables, JSON, docs, chart), ``cli``.
"""
from polyopt.bench.config import BenchConfig, External
from polyopt.bench.einsum_cases import bench_einsum
from polyopt.bench.kernels import bench_kernel, bench_kernels
from polyopt.bench.report import write_docs, write_json
from polyopt.bench.config import Runner
from polyopt.bench.runners import TARGET_RUNNERS

__all__ = ["BenchConfig", "External", "Runner", "TARGET_RUNNERS", "bench_einsum", "bench_kernel",
           "bench_kernels", "write_docs", "write_json"]
