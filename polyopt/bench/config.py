"""What one benchmark run is asked to do: problem size, threads, polyopt's options, baselines."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Mapping

from polyopt.frontends.dsl import Kernel
from polyopt.schedulers.registry import DEFAULT_ALGORITHM
from polyopt.suite import Entry


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
    kernel; ``numpy`` turns the numpy/BLAS baseline on or off; ``dtype`` (``f64`` or ``f32``) is
    the type of the kernels' floating-point data.
    """

    size: str = "LARGE"  # a preset, or explicit KEY=INT,... (see sizes())
    threads: int = field(default_factory=lambda: os.cpu_count() or 1)
    algorithm: str = DEFAULT_ALGORITHM
    options: Mapping[str, object] = field(default_factory=dict)
    repeats: int = 5
    target: str = "cpu"
    externals: tuple[External, ...] = ()
    numpy: bool = True
    autotune: bool = False
    dtype: str = "f64"

    def sizes(self, entry: Entry) -> dict[str, int]:
        """The entry's parameter values: :attr:`size` is a PolyBench preset (``LARGE``) or
        explicit values (``NI=4096,NJ=4096,NK=4096``, every parameter of the kernel).
        ValueError names what is wrong."""
        if "=" not in self.size:
            return entry.sizes(self.size)
        sizes = {}
        for item in self.size.split(","):
            key, _, value = item.partition("=")
            if not value.strip().isdigit():
                raise ValueError(f"--size {self.size!r}: expected a preset or KEY=INT,KEY=INT,...")
            sizes[key.strip()] = int(value)
        wanted = list(entry.sizes("MINI"))
        if sorted(sizes) != sorted(wanted):
            raise ValueError(f"--size {self.size!r}: {entry.name} takes exactly the sizes "
                             f"{', '.join(wanted)}")
        return sizes

    def kernel(self, entry: Entry) -> Kernel:
        """The suite entry's kernel with its floating-point data in :attr:`dtype`."""
        return entry.kernel if self.dtype == "f64" else entry.kernel.with_dtype(self.dtype)

    def describe_polyopt(self) -> str:
        """The scheduler and its options as one label, e.g. ``pluto tile=32``."""
        return " ".join([self.algorithm, *(f"{k}={v}" for k, v in self.options.items())])


@dataclass(frozen=True)
class Runner:
    """One implementation of one kernel: ``run(args)`` computes in place on the argument dict.

    ``run`` may return its own kernel-only seconds (CUDA events); ``None`` means the harness's
    wall-clock time is all there is. ``details`` go into the report as they are (e.g. what the
    autotuner chose). ``prepare(args)``, where given, runs untimed right before each timed run
    (the GPU runners warm the GPU up there).
    """

    name: str
    description: str
    run: Callable[[dict], float | None]
    details: Mapping[str, object] = field(default_factory=dict)
    prepare: Callable[[dict], object] | None = None
