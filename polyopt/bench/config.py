"""What one benchmark run is asked to do: problem size, threads, polyopt's options, baselines."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Mapping

from polyopt.runtime import DEFAULT_ALGORITHM


@dataclass(frozen=True)
class External:
    """Another tool's C code for one suite kernel (``--external [LABEL:]KERNEL=FILE``)."""

    kernel: str
    path: str
    label: str = "external"


@dataclass(frozen=True)
class BenchConfig:
    """Options shared by every kernel of a run (see ``polyopt bench --help``).

    ``options`` go to the scheduler (``tile=32``, ...); ``autotune`` lets ``po.autotune`` choose
    the scheduler and options per kernel instead; ``externals`` add one runner per file for their
    kernel; ``numpy`` turns the numpy/BLAS baseline on or off.
    """

    size: str = "LARGE"
    threads: int = field(default_factory=lambda: os.cpu_count() or 1)
    algorithm: str = DEFAULT_ALGORITHM
    options: Mapping[str, object] = field(default_factory=dict)
    repeats: int = 5
    target: str = "cpu"
    externals: tuple[External, ...] = ()
    numpy: bool = True
    autotune: bool = False

    def describe_polyopt(self) -> str:
        """The scheduler and its options as one label, e.g. ``pluto tile=32``."""
        return " ".join([self.algorithm, *(f"{k}={v}" for k, v in self.options.items())])
