"""The facts a benchmark number is worthless without: machine, load, software versions, date."""
from __future__ import annotations

import datetime
import os
import platform
import subprocess
from pathlib import Path

import llvmlite
import llvmlite.binding as llvm
import numpy as np

from polyopt.targets.cbuild import find_compiler


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def _compiler_version() -> str | None:
    compiler = find_compiler()
    if compiler is None:
        return None
    result = subprocess.run([compiler, "--version"], capture_output=True, text=True)
    return result.stdout.splitlines()[0] if result.returncode == 0 and result.stdout else compiler


#: Environment variables that change threaded or BLAS speed (OPENBLAS_CORETYPE and
#: OPENBLAS_L2_SIZE, set, halve OpenBLAS's dgemm here; OMP_WAIT_POLICY changes barrier costs).
_TUNING_PREFIXES = ("OMP_", "GOMP_", "KMP_", "OPENBLAS_", "MKL_", "BLIS_")


def machine_info() -> dict[str, object]:
    """CPU model, cores, memory, load average now, the versions of what generates code, and the
    environment variables that tune threads and BLAS (as the user set them)."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "load_average": [round(x, 2) for x in load] if load else None,
        "os": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "llvmlite": llvmlite.__version__,
        "llvm": ".".join(map(str, llvm.llvm_version_info)),
        "c_compiler": _compiler_version(),
        "environment": {k: v for k, v in sorted(os.environ.items()) if k.startswith(_TUNING_PREFIXES)},
    }


def gpu_info() -> dict[str, object]:
    """The GPU a ``cuda`` benchmark runs on: name, memory, driver and CUDA runtime, CuPy."""
    from polyopt.targets.cuda import cupy_module

    cp = cupy_module()
    properties = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    name = properties["name"]
    return {"name": name.decode() if isinstance(name, bytes) else str(name),
            "memory_gib": round(properties["totalGlobalMem"] / 2**30, 1),
            "driver": cp.cuda.runtime.driverGetVersion(),
            "cuda_runtime": cp.cuda.runtime.runtimeGetVersion(), "cupy": cp.__version__}


def now_utc() -> str:
    """The current time, UTC, to the second (ISO 8601)."""
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()
