"""Builds of a CUDA source for ``sm_90a`` (Hopper's arch-specific target, which ``wgmma``
needs): CuPy's NVRTC call adds its own ``-arch`` and NVRTC refuses two, so the build either runs
CuPy's compiler with its arch option replaced or calls NVRTC directly; a probe kernel in the
source tells whether the build really holds the ``wgmma`` kernels
(:data:`~polyopt.codegen.cuda_wgmma.PROBE`). :mod:`polyopt.targets.cuda` takes such a build
where a source has ``wgmma`` kernels and the GPU is compute capability 9.0.

The first way replaces ``cupy.cuda.compiler._get_arch_for_options_for_nvrtc`` for the one call:
a private function of CuPy (14.x), kept because it reuses CuPy's include paths and disk cache;
where it fails (another CuPy), NVRTC is called directly.
"""
from __future__ import annotations

import os
import re
import tempfile
import warnings

from polyopt.codegen.cuda_wgmma import PROBE


def probe(cupy, module) -> bool:
    """Whether ``module`` really holds the ``wgmma`` kernels (its probe kernel says so)."""
    try:
        flag = cupy.zeros(1, cupy.int32)
        module.get_function(PROBE)((1,), (1,), (flag,))
        if int(flag.get()[0]) == 1:
            return True
    except Exception as exc:
        warnings.warn(f"the sm_90a build's probe failed ({exc})", RuntimeWarning)
    return False


def sm90a_module(cupy, source: str):
    """``source`` built by NVRTC for ``sm_90a`` (``wgmma`` needs the arch-specific target,
    which CuPy's NVRTC call does not take: it adds its own ``-arch`` and NVRTC refuses two),
    as a CuPy module; None with a warning where that fails (the caller builds the source the
    usual way: its ``wgmma`` kernels are then never launched). First through CuPy's compiler
    with its arch option replaced (its include paths and disk cache; the ``POLYOPT_SM90A``
    define keeps the cached build apart from the plain one), else NVRTC directly."""
    errors = []
    try:
        from cupy.cuda import compiler
        original = compiler._get_arch_for_options_for_nvrtc
        compiler._get_arch_for_options_for_nvrtc = lambda arch=None: ("-arch=sm_90a", "cubin")
        try:
            module = cupy.RawModule(code=source, options=("--std=c++14", "-DPOLYOPT_SM90A=1"))
            first = re.search(r'__global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(', source)
            module.get_function(first.group(1))  # compile now, under the replaced arch
        finally:
            compiler._get_arch_for_options_for_nvrtc = original
        if probe(cupy, module):
            return module
        errors.append("through CuPy: the build has no wgmma kernels")
    except Exception as exc:
        errors.append(f"through CuPy: {type(exc).__name__}: {str(exc)[-1500:]}")
    try:
        from cupy_backends.cuda.libs import nvrtc
        includes = []
        for folder in (os.path.join(cupy.cuda.get_cuda_path() or "", "include"),
                       os.path.join(os.path.dirname(cupy.__file__), "_core", "include")):
            if os.path.isdir(folder):
                includes.append(f"-I{folder}")
        try:  # CUDA headers from pip (the nvidia-* wheels)
            import nvidia.cuda_runtime
            includes += [f"-I{os.path.join(p, 'include')}" for p in nvidia.cuda_runtime.__path__]
        except ImportError:
            pass
        program = nvrtc.createProgram(source, "polyopt_sm90a.cu", (), ())
        try:
            try:
                nvrtc.compileProgram(program, ["--std=c++14", "-arch=sm_90a", *includes])
            except Exception as exc:
                raise RuntimeError(f"{exc}: {nvrtc.getProgramLog(program)[-2000:]}") from None
            cubin = nvrtc.getCUBIN(program)
        finally:
            nvrtc.destroyProgram(program)
        handle, path = tempfile.mkstemp(suffix=".cubin", prefix="polyopt_")
        with os.fdopen(handle, "wb") as f:
            f.write(cubin)
        module = cupy.RawModule(path=path)
        if probe(cupy, module):
            return module
        errors.append("NVRTC directly: the build has no wgmma kernels")
    except Exception as exc:
        errors.append(f"NVRTC directly: {type(exc).__name__}: {str(exc)[-1500:]}")
    warnings.warn("the sm_90a (wgmma) build failed, using the mma.sync kernels: " + "; ".join(errors), RuntimeWarning)
    return None


__all__ = ["probe", "sm90a_module"]
