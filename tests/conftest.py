"""Shared helpers for the polyopt tests: the algorithm list, a compiled-vs-interpreter runner, a
seeded random generator fixture and the GPU-presence skip marks. (Test modules import the helpers: ``from conftest import ...``.)"""
from __future__ import annotations

import atexit
import math
import os
import shutil
import subprocess
import tempfile
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

# The disk compile cache (polyopt/targets/disk_cache.py) of the test session: a fresh folder, so
# that tests never read or write the user's cache (and CI's empty cache is what every run sees);
# set before anything compiles, even at collection, and inherited by the tests' subprocesses.
_SESSION_CACHE = tempfile.mkdtemp(prefix="polyopt-test-cache-")
os.environ["POLYOPT_CACHE_DIR"] = _SESSION_CACHE
atexit.register(shutil.rmtree, _SESSION_CACHE, ignore_errors=True)  # also where no test ran
os.environ.pop("POLYOPT_CACHE_MAX_MB", None)

import polyopt as po
from polyopt import einsum_calls
from polyopt.analysis import expr as E
from polyopt.codegen.cuda_contraction import VARIANTS
from polyopt.targets import contraction, cuda
from polyopt.targets.cuda import CudaKernel, cupy_module

#: The scheduling algorithms the semantic tests run (isl's two schedulers and the textual order).
ALGORITHMS = ("original", "isl", "isl-feautrier")


def _copy(values):
    return [v.copy() if isinstance(v, np.ndarray) else v for v in values]


def _arrays(values):
    return [v for v in values if isinstance(v, np.ndarray)]


def _assert_close(actual, expected, rtol, label):
    if np.issubdtype(expected.dtype, np.floating) and rtol:
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol, err_msg=label)
    else:
        np.testing.assert_array_equal(actual, expected, err_msg=label)


def run_everywhere(kernel, *args, algorithms=ALGORITHMS, rtol=1e-12, **kwargs):
    """Run ``kernel`` with the interpreter and compiled with each algorithm, each on fresh copies
    of the arguments; assert every compiled result equals the interpreter's (up to ``rtol``; 0
    means bitwise), and return the interpreter's arrays (positional ones, then keyword ones)."""
    def fresh():
        return _copy(args), dict(zip(kwargs, _copy(kwargs.values())))

    def arrays(call):
        return _arrays(call[0]) + _arrays(call[1].values())

    reference = fresh()
    po.interpret(kernel, *reference[0], **reference[1])
    for algorithm in algorithms:
        ck = po.compile(kernel, algorithm=algorithm)
        mine = fresh()
        ck(*mine[0], **mine[1])
        for k, (got, want) in enumerate(zip(arrays(mine), arrays(reference))):
            assert got.dtype == want.dtype
            _assert_close(got, want, rtol, f"{kernel!r}, algorithm {algorithm}, array #{k}")
    return arrays(reference)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def _gpu_missing() -> str | None:
    """Why the CUDA target cannot run here (no CuPy, no GPU), or None where it can."""
    try:
        cupy_module()
    except po.TargetUnavailableError as exc:
        return str(exc)
    return None


#: The reason GPU tests skip here, or None on a machine with CuPy and a GPU.
GPU_MISSING = _gpu_missing()
#: For tests that need a GPU, and for those that check the error where there is none.
needs_gpu = pytest.mark.skipif(GPU_MISSING is not None, reason=f"no GPU: {GPU_MISSING}")
needs_no_gpu = pytest.mark.skipif(GPU_MISSING is None, reason="CuPy and a GPU are present")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")


def assert_normwise_close(result: dict, expected: dict, dtype, bound: float | None = None) -> None:
    """Each array of ``expected`` matches ``result``'s (numpy or CuPy) in normwise relative
    error (default bound: 1e-12 for float64, else 1e-5)."""
    bound = bound or (1e-12 if dtype == np.float64 else 1e-5)
    for key, value in expected.items():
        if isinstance(value, np.ndarray):
            got = np.asarray(result[key].get() if hasattr(result[key], "get") else result[key], np.float64)
            error = np.linalg.norm(got - value) / max(np.linalg.norm(value), 1e-300)
            assert error < bound, (key, error)


class StandInModule:
    """A stand-in for a built CUDA module (no GPU): notes each function loaded outside a graph
    capture in ``loaded``, and each launch -- (kernel, grid, the arguments after the first
    ``leading``, the ABI's) -- in ``launched``, or in ``capture`` (a list) while one is captured.
    As CuPy's, ``get_function`` makes a new kernel object at each call, all on one driver
    function per name (``.kernel``; its ``ptr`` no number: nothing packs launches for a driver);
    each dynamic shared memory opt-in (``max_dynamic_shared_size_bytes`` set) is noted in
    ``opted_in`` as (name, bytes)."""

    def __init__(self, leading: int):
        self.leading, self.launched, self.loaded, self.capture = leading, [], [], None
        self.opted_in, self.drivers = [], {}

    def get_function(self, name: str):
        if self.capture is None:
            self.loaded.append(name)
        return _StandInKernel(self, name, self.drivers.setdefault(name, SimpleNamespace(ptr=f"driver {name}")))


class _StandInKernel:
    """A kernel object of :class:`StandInModule`."""

    def __init__(self, module: StandInModule, name: str, kernel):
        self.module, self.name, self.kernel = module, name, kernel

    def __call__(self, grid, block, args, shared_mem=0):
        into = self.module.launched if self.module.capture is None else self.module.capture
        into.append((self.name, tuple(grid), tuple(int(a) for a in args[self.module.leading:])))

    @property
    def max_dynamic_shared_size_bytes(self):
        raise AttributeError("a stand-in reads no attributes")

    @max_dynamic_shared_size_bytes.setter
    def max_dynamic_shared_size_bytes(self, nbytes: int):
        self.module.opted_in.append((self.name, nbytes))


class StandInArray:
    """A stand-in for a CuPy array (its module name says cupy): a shape, an address and a size."""

    __module__ = "cupy.stand_in"

    def __init__(self, shape: tuple[int, ...], ptr: int, itemsize: int = 8):
        self.shape, self.data = shape, SimpleNamespace(ptr=ptr)
        self.size = math.prod(shape)
        self.nbytes = self.size * itemsize


def capture_graphs_on(monkeypatch, module: StandInModule, compiled) -> list:
    """Make ``compiled.launch(..., graph=True)`` capture its launches on the stand-in ``module``
    (no GPU) and replay a capture by appending its launches to ``module.launched``; the list
    returned gets each capture's launches. ``compiled`` starts with no graphs (it is cached:
    none of these stay)."""
    stream = SimpleNamespace(record=lambda: None, wait_event=lambda event: None)
    monkeypatch.setattr(cuda, "cupy_module", lambda: SimpleNamespace(cuda=SimpleNamespace(get_current_stream=lambda: stream)))
    captures = []

    def captured(run):
        module.capture = []
        run()
        launches, module.capture = module.capture, None
        captures.append(launches)
        return stream, SimpleNamespace(launch=lambda on: module.launched.extend(launches))
    monkeypatch.setattr(cuda, "_captured", captured)
    monkeypatch.setattr(compiled, "_graphs", {})
    return captures


#: Kernel numbers of a contraction source (the most any engine has).
CONTRACTION_TILES = range(max(len(variants) for variants in VARIANTS.values()))


def force_contraction_tile(monkeypatch, tile: int, wgmma_only: bool = False) -> list:
    """Make every contraction launch take kernel ``tile`` of its source (with ``wgmma_only``,
    its ``tile``-th ``wgmma`` kernel; a ``wgmma`` one only from an sm_90a build, an asynchronous
    one only where the operands are in whole 16-byte vectors, a TMA one only where the launch
    has tensor maps: else the test is skipped), with no replays of an earlier test's recorded
    launches; the kernels launched are noted in the list returned."""
    monkeypatch.setattr(CudaKernel, "recorded", lambda self, key: None)
    einsum_calls.clear()
    taken = []

    def forced(source, extent, shapes, sm_count, aligned_operands=True, wgmma=False, tma=False, clusters=False,
               half=False):
        kernels = [(n, v) for n, v in source.variants if v.wgmma or not wgmma_only]
        if tile >= len(kernels):
            pytest.skip(f"the source has {len(kernels)} {'wgmma ' if wgmma_only else ''}kernels")
        name, variant = kernels[tile]
        layout = contraction.launch_layout(source.contraction, variant, extent, shapes)
        unfit = contraction_kernel_unfit(source, variant, layout, aligned_operands, wgmma, tma, clusters)
        if unfit:
            pytest.skip(unfit)
        taken.append(name)
        return name, variant, layout
    monkeypatch.setattr(contraction, "choose_kernel", forced)
    return taken


def contraction_kernel_unfit(source, variant, layout, aligned_operands: bool, wgmma: bool, tma: bool,
                             clusters: bool) -> str | None:
    """Why contraction kernel ``variant`` of ``source`` cannot run a launch of ``layout`` (the
    chooser's arguments say what the module and the GPU have), or None where it can."""
    if variant.wgmma and not wgmma:
        return "wgmma kernel, the module is not built for sm_90a"
    if variant.split_k and not clusters:
        return "a kernel splitting K over a cluster, the GPU runs none"
    if variant.asynchronous and not contraction.async_aligned(source.contraction, variant, layout, aligned_operands):
        return "cp.async kernel, operands not in whole 16-byte vectors"
    if variant.tma and not (tma and contraction.tma_specs(source, variant, layout)):
        return ("TMA kernel, this launch has no tensor maps (batch slots that are no one dimension, an outer-K slot, "
                "a capture)")
    return None


def note_contraction_choices(monkeypatch, attribute: str) -> list:
    """Let every contraction launch choose its kernel as it does, noting the chosen kernel's
    ``attribute`` (e.g. ``"tma"``, ``"split_k"``) in the list returned."""
    chooser, taken = contraction.choose_kernel, []

    def noting(*args, **kwargs):
        chosen = chooser(*args, **kwargs)
        taken.append(getattr(chosen[1], attribute))
        return chosen
    monkeypatch.setattr(contraction, "choose_kernel", noting)
    return taken


def half_operands(scop, arrays: tuple[str, ...] = ("A",)):
    """``scop`` with ``arrays`` of f16 elements, read widened to f32 (as ``po.einsum`` reads f16
    operands): the hmma and wgmma contraction kernels."""
    halves = {name: replace(scop.arrays[name], dtype=po.f16) for name in arrays}
    arguments = tuple(replace(a, dtype=po.f16) if a.name in arrays else a for a in scop.arguments)

    def widen(x):
        if isinstance(x, E.Access) and x.array in arrays:
            return E.Cast(E.Access(x.array, x.indices, po.f16), po.f32)
        return None
    statements = tuple(replace(s, value=E.substitute(s.value, widen)) for s in scop.statements)
    return replace(scop, arrays={**scop.arrays, **halves}, arguments=arguments, statements=statements)


def check_suite_kernel_on_gpu(name: str, sizes: dict, dtype=np.float64, calls: int = 1, on_device: bool = False,
                              expect=None, **options) -> None:
    """Compile suite kernel ``name`` for CUDA with ``options`` (``dtype``: f64, or f32 through
    ``with_dtype``), call it ``calls`` times on its inputs at ``sizes`` -- numpy arrays, or CuPy
    arrays ``on_device`` -- and compare with as many calls of the numpy reference; ``expect``,
    if given, is called with the compiled kernel first (to assert which path it takes)."""
    entry = po.suite.get(name)
    kernel = entry.kernel if dtype == np.float64 else entry.kernel.with_dtype("f32")
    args = entry.inputs(sizes, dtype)
    expected = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in args.items()}
    for _ in range(calls):
        entry.reference(**expected)
    compiled = po.compile(kernel, target="cuda", **options)
    if expect is not None:
        expect(compiled)
    if on_device:
        import cupy
        device = {k: (cupy.asarray(v) if isinstance(v, np.ndarray) else v) for k, v in args.items()}
        for _ in range(calls):
            compiled(**device)
        args = {k: (v.get() if hasattr(v, "get") else v) for k, v in device.items()}
    else:
        for _ in range(calls):
            compiled(**args)
    tolerance = 1e-9 if dtype == np.float64 else 2e-4
    for key, value in expected.items():
        if isinstance(value, np.ndarray):
            np.testing.assert_allclose(args[key], value, rtol=tolerance, atol=tolerance, err_msg=key)


def assert_nvcc_compiles(directory, sources: dict[str, str], arch: str, timeout: int = 900) -> None:
    """Write each CUDA source (by file stem) into ``directory`` and assert that one nvcc run
    compiles them all to objects for ``arch`` (its last errors as the failure message)."""
    for name, text in sources.items():
        (directory / f"{name}.cu").write_text(text)
    result = subprocess.run(["nvcc", f"-arch={arch}", "-c", *(f"{name}.cu" for name in sources)], cwd=directory,
                            capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stderr[-4000:]
    assert len(list(directory.glob("*.o"))) == len(sources)


@pytest.fixture(scope="session", autouse=True)
def isolated_compile_cache():
    """The session's own disk compile cache folder (see ``_SESSION_CACHE``), removed at the end."""
    yield _SESSION_CACHE
    shutil.rmtree(_SESSION_CACHE, ignore_errors=True)
