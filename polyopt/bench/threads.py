"""One thread count for every implementation a benchmark compares.

``--threads N`` must mean the same for all of them: polyopt's ``num_threads=`` (``compile``'s,
and ``einsum``'s where this polyopt's takes it), the OpenMP runtime that gcc's ``-fopenmp`` code uses,
and OpenBLAS under numpy (through threadpoolctl, the one portable way to change it after numpy
has loaded it).
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import inspect
import os
from typing import Callable, Iterator


def accepts_num_threads(function: Callable) -> bool:
    """Whether ``function`` has an explicit ``num_threads`` parameter (``**options`` does not count:
    ``po.compile`` forwards those to the scheduler, which would refuse it)."""
    return "num_threads" in inspect.signature(function).parameters


def thread_kwargs(function: Callable, threads: int) -> dict[str, int]:
    """``{"num_threads": threads}`` when ``function`` takes it, else ``{}`` (runs as it defaults)."""
    return {"num_threads": threads} if accepts_num_threads(function) else {}


@contextlib.contextmanager
def openmp_threads(threads: int) -> Iterator[str]:
    """Make OpenMP code (gcc ``-fopenmp``) use ``threads`` threads inside the block; yields what
    was done, and restores the previous setting afterwards (the harness is a library too).

    ``OMP_NUM_THREADS`` covers a libgomp loaded later; a libgomp already loaded read it at load
    time, so ``omp_set_num_threads`` is called on it as well.
    """
    previous = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = str(threads)
    name = ctypes.util.find_library("gomp")
    gomp = ctypes.CDLL(name) if name else None
    before = gomp.omp_get_max_threads() if gomp else None
    if gomp:
        gomp.omp_set_num_threads(threads)
    try:
        yield (f"OMP_NUM_THREADS={threads}, omp_set_num_threads({threads}) in {name}" if gomp
               else f"OMP_NUM_THREADS={threads} (no libgomp found)")
    finally:
        if previous is None:
            del os.environ["OMP_NUM_THREADS"]
        else:
            os.environ["OMP_NUM_THREADS"] = previous
        if gomp:
            gomp.omp_set_num_threads(before)


@contextlib.contextmanager
def blas_threads(threads: int) -> Iterator[str]:
    """Limit numpy's BLAS to ``threads`` threads inside the block; yields a description.

    Without threadpoolctl (``pip install polyopt[bench]``) the BLAS keeps its own default, and
    the description says so, so that a report never claims a thread count it did not set.
    """
    try:
        from threadpoolctl import threadpool_info, threadpool_limits
    except ImportError:
        yield ("BLAS threads not set: threadpoolctl is not installed "
               "(its default is one thread per core)")
        return
    with threadpool_limits(limits=threads, user_api="blas"):
        libraries = ", ".join(f"{i['internal_api']} {i['version']}, num_threads={i['num_threads']}"
                              for i in threadpool_info() if i["user_api"] == "blas")
        yield libraries or "no BLAS library loaded"
