"""Build the C emitter's output with a system C compiler and call it like a compiled kernel.

This is the baseline polyopt's own code is measured against ("gcc -O3 -march=native on the same
loops") and a second, independent check that the emitted C is right.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from polyopt.errors import PolyoptError
from polyopt.targets.arguments import abi_ctypes, abi_values, bind_arguments, check_params
from polyopt.targets.cpu import CompiledKernel

DEFAULT_FLAGS = ("-O3", "-march=native")


def find_compiler() -> str | None:
    """The C compiler to use: $CC, else gcc, else cc (None when there is none)."""
    for candidate in (os.environ.get("CC"), "gcc", "cc"):
        if candidate and shutil.which(candidate):
            return candidate
    return None


class CBuiltKernel:
    """The C source of a compiled kernel, built into a shared library by the system compiler."""

    def __init__(self, compiled: CompiledKernel, flags=DEFAULT_FLAGS, *, openmp: bool = False,
                 source: str | None = None, library: str | Path | None = None):
        """``source`` replaces the C emitter's output, e.g. another tool's code for the same kernel
        (the benchmark harness's ``--external``); ``library`` is a shared library built elsewhere
        (e.g. by clang with Polly) to load instead of building. Either must define
        ``compiled.function_name`` with the emitter's arguments (benchmarks/README.md)."""
        self.compiled = compiled
        if library is None:
            self.flags = tuple(flags) + (("-fopenmp",) if openmp else ())
            library = self._build(compiled.c_source if source is None else source)
        else:
            self.flags = ()
        try:
            self._library = ctypes.CDLL(str(library))
        except OSError as error:
            raise PolyoptError(f"cannot load {library}: {error}") from None
        try:
            self._function = getattr(self._library, compiled.function_name)
        except AttributeError:
            raise PolyoptError(f"{library} defines no function {compiled.function_name}(); the C "
                               "code must define it with the C emitter's arguments") from None
        self._function.argtypes = abi_ctypes(compiled.scop)
        self._function.restype = None

    def _build(self, source: str) -> Path:
        """The shared library of ``source`` (built once per source and flags, then reused)."""
        compiler = find_compiler()
        if compiler is None:
            raise PolyoptError("no C compiler found (set $CC or install gcc)")
        name = self.compiled.function_name
        digest = hashlib.sha1((source + " ".join(self.flags)).encode()).hexdigest()[:16]
        build_dir = Path(tempfile.gettempdir()) / "polyopt-cbuild"
        build_dir.mkdir(exist_ok=True)
        library = build_dir / f"{name}-{digest}.so"
        if not library.exists():
            source_file = build_dir / f"{name}-{digest}.c"
            source_file.write_text(source)
            command = [compiler, *self.flags, "-std=gnu11", "-shared", "-fPIC", str(source_file),
                       "-o", str(library), "-lm"]
            result = subprocess.run(command, capture_output=True, text=True)
            if result.returncode != 0:
                raise PolyoptError(f"{' '.join(command)} failed:\n{result.stderr}")
        return library

    def __call__(self, *args, **kwargs) -> None:
        bound = bind_arguments(self.compiled.scop, args, kwargs)
        check_params(self.compiled.scop, bound.params, self.compiled.checked_params)
        self._function(*abi_values(self.compiled.scop, bound))
