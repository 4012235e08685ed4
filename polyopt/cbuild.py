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
from polyopt.runtime import CompiledKernel, abi_ctypes, abi_values, bind_arguments

DEFAULT_FLAGS = ("-O3", "-march=native")


def find_compiler() -> str | None:
    """The C compiler to use: $CC, else gcc, else cc (None when there is none)."""
    for candidate in (os.environ.get("CC"), "gcc", "cc"):
        if candidate and shutil.which(candidate):
            return candidate
    return None


class CBuiltKernel:
    """The C source of a compiled kernel, built into a shared library by the system compiler."""

    def __init__(self, compiled: CompiledKernel, flags=DEFAULT_FLAGS, *, openmp: bool = False):
        compiler = find_compiler()
        if compiler is None:
            raise PolyoptError("no C compiler found (set $CC or install gcc)")
        self.compiled = compiled
        self.flags = tuple(flags) + (("-fopenmp",) if openmp else ())
        digest = hashlib.sha1((compiled.c_source + " ".join(self.flags)).encode()).hexdigest()[:16]
        build_dir = Path(tempfile.gettempdir()) / "polyopt-cbuild"
        build_dir.mkdir(exist_ok=True)
        library = build_dir / f"{compiled.function_name}-{digest}.so"
        if not library.exists():
            source = build_dir / f"{compiled.function_name}-{digest}.c"
            source.write_text(compiled.c_source)
            command = [compiler, *self.flags, "-std=gnu11", "-shared", "-fPIC", str(source),
                       "-o", str(library), "-lm"]
            result = subprocess.run(command, capture_output=True, text=True)
            if result.returncode != 0:
                raise PolyoptError(f"{' '.join(command)} failed:\n{result.stderr}")
        self._library = ctypes.CDLL(str(library))
        self._function = getattr(self._library, compiled.function_name)
        self._function.argtypes = abi_ctypes(compiled.scop)
        self._function.restype = None

    def __call__(self, *args, **kwargs) -> None:
        bound = bind_arguments(self.compiled.scop, args, kwargs)
        self.compiled._check_params(bound.params)
        self._function(*abi_values(self.compiled.scop, bound))
