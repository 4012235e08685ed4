"""The CUDA target: ``po.cuda_source`` and ``po.compile(kernel, target="cuda")``.

The kernel is scheduled (``algorithm`` as on the CPU), checked by the verifier, mapped onto the
GPU (:mod:`polyopt.codegen.gpu_mapping`), the mapped tree checked by the verifier again (its
block and thread coordinates carry no dependence, like loops marked parallel) and emitted as
CUDA C (:mod:`polyopt.codegen.cuda`).
The schedule is chosen for the GPU (:mod:`polyopt.schedulers.gpu`): the requested algorithm's
and the original loop order compete (Pluto's time-tiled stencils have no parallel outer loop
without tiling), and where the better one still runs a one-thread kernel in a host loop or over a
loop, Pluto without fusion, Feautrier, isl's scheduler and a wavefront of the requested
algorithm's serial permutable band too, by an estimate of the mapped program's launches and work; ``.schedule.algorithm`` and its last note tell which and why. Calling the compiled kernel needs CuPy and a GPU: the
source is built with NVRTC (``cupy.RawModule``, cached by source hash), GPU arrays (CuPy,
PyTorch CUDA tensors, any ``__cuda_array_interface__`` or CUDA DLPack object) are used in place
through zero-copy CuPy views and numpy arrays are copied in and back, and the host program
(loops and launches) runs in Python with grid sizes from the parameter values of the call. A
repeated call on GPU arrays replays the launches the first one recorded (:class:`LaunchRecord`).
A Jacobi-style stencil runs in overlapped time tiles instead (:mod:`polyopt.targets.stencil`).
"""
from __future__ import annotations

import contextlib
import re
import sys
import time
from typing import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property, partial

import islpy as isl
import numpy as np

from polyopt.codegen.ast import abi_arguments
from polyopt.codegen.cuda import CudaSource, cuda_source as emit_cuda
from polyopt.codegen.cuda_contraction import contraction_steps
from polyopt.codegen.cuda_resident import COOPERATIVE_INCLUDE
from polyopt.codegen.cuda_stencil import StencilSource
from polyopt.codegen.gpu_host import HostStatement, host_storage, host_values, run_host_statement
from polyopt.codegen.gpu_mapping import GpuProgram, HostLoop, Kernel, coordinates_below, map_to_gpu
from polyopt.errors import ArgumentError, CodegenError, ScheduleError, TargetUnavailableError
from polyopt.analysis.evaluate import evaluate
from polyopt.schedulers.registry import DEFAULT_ALGORITHM
from polyopt.targets.arguments import bind_arguments, check_params
from polyopt.targets.cache import COMPILED, cache_key, check_given_schedule, scop_of
from polyopt.targets.contraction import (check_precision, contraction_plan, contraction_program_plan,
                                         launch as launch_contraction)
from polyopt.targets.contraction_kernels import arrays_by_name, substitute_contractions, substituted
from polyopt.targets.resident import (ResidentSource, launch as launch_resident, resident_source, resident_strips,
                                     with_resident_stencil)
from polyopt.targets.sm90a import sm90a_module
from polyopt.targets.stencil import DEFAULT_RANKS, array_extents, launch as launch_stencil, stencil_plan
from polyopt.targets.device import compute_capability, device_attribute
from polyopt.targets.driver_launch import PackedLaunch, packable
from polyopt.targets.tensor_maps import TmaLaunch, address_of
from polyopt.targets.torch_tensors import is_torch_bfloat16, is_torch_cuda, on_torch_stream
from polyopt.types import ELEMENT_TYPES, DType, bf16
from polyopt.schedulers.registry import schedule as run_scheduler
from polyopt.schedulers import gpu as gpu_choice
from polyopt.schedulers.gpu_fusion import fuse_parallel_nests
from polyopt.transform.marks import GPU_KERNEL_MARK
from polyopt.transform.nodes import bands
from polyopt.transform.primitives import run as run_primitive
from polyopt.transform.schedule import Schedule
from polyopt.analysis.scop import Scop
from polyopt.analysis.verify import verify

#: Options of the GPU mapping (the others go to the scheduler): threads per block and the
#: coordinates one block covers, per thread coordinate (outermost first) or one int for all;
#: vector: adjacent coordinates per run of a thread's coordinates in shared-memory kernels;
#: shared=False turns shared-memory staging off; reductions=False keeps one thread per
#: coordinate where sums could be split over the threads of a warp.
GPU_OPTIONS = ("block", "tile", "vector", "shared", "reductions")
#: Scheduler options the CUDA target sets unless given: no CPU tiling, parallel marks or
#: stride-1 reordering (the mapping finds the parallel loops and picks threadIdx.x itself).
_SCHEDULER_DEFAULTS = {"pluto": {"parallel": False, "vectorize": False},
                       "feautrier": {"parallel": False}}


@dataclass(frozen=True)
class CudaPlan:
    """What the CUDA target makes of a kernel: the schedule used and the CUDA source;
    ``mapped_tree`` is the schedule tree as mapped onto the GPU (``program.pretty()`` prints it)."""

    scop: Scop
    schedule: Schedule
    source: CudaSource

    @property
    def program(self) -> GpuProgram:
        return self.source.program

    @property
    def mapped_tree(self):
        """The isl schedule tree the GPU program runs, kernels and coordinates as marks."""
        return self.source.program.tree


def _verified(scop: Scop, program: GpuProgram) -> GpuProgram:
    """``program`` once its mapped tree passes the verifier: every instance once, in an order
    that respects the dependences, with no dependence carried by a block or thread coordinate
    (:class:`~polyopt.RacyParallelLoopError` names the kernel and the loop)."""
    verify(scop, program.tree)
    return program


def plan(kernel, *, algorithm: str = DEFAULT_ALGORITHM, schedule: Schedule | None = None,
         **options) -> CudaPlan:
    """Schedule (unless ``schedule`` is given), verify, map and emit ``kernel`` for CUDA (no
    CuPy or GPU needed).

    A contraction (:mod:`polyopt.targets.contraction`: einsum, batched matmul, 1x1 convolution...)
    compiled with the default algorithm and no mapping options runs as one batched-GEMM kernel
    (its schedule: the original order and :meth:`~polyopt.Schedule.gpu_contract`, as a given
    schedule ending in that step does); so does a program of contractions (2mm, 3mm: each
    top-level nest one, :func:`~polyopt.targets.contraction.contraction_program_plan`), as one
    such kernel per nest launched in program order. Otherwise the general mapping's top-level
    kernels that are contractions of their own statements run as contraction kernels
    (:mod:`polyopt.targets.contraction_kernels`; again only without mapping options).
    ``contraction=False`` maps it all the general way. ``precision="tf32"`` lets f32
    contractions use the TF32 tensor cores (results change: never the default, "exact").

    A Jacobi-style stencil of spatial rank 1 (:mod:`polyopt.targets.stencil`: jacobi-1d)
    compiled with the default algorithm and no mapping options runs in overlapped time tiles
    (its schedule: the original order and :meth:`~polyopt.Schedule.gpu_time_tile`, as a given
    schedule ending in that step does). ``time_tile=K`` (time steps per launch; ``True``: the
    default count) asks for that path, also for ranks 2 and 3, with ``tile=`` (the output tile
    per block, per spatial dimension) and ``block=`` (threads per block) as its shape;
    ``time_tile=False`` (or 1) maps a stencil the general way. A stencil of rank 2 or 3 mapped
    the general way (jacobi-2d, fdtd-2d, heat-3d) with the default algorithm and no scheduling
    or mapping options also gets a resident kernel (:mod:`polyopt.targets.resident`), all its
    time steps in one cooperative launch where the arrays fit the multiprocessors' shared
    memory; ``resident=False`` leaves it out."""
    scop = scop_of(kernel)
    time_tile = _time_tile_option(options.pop("time_tile", None))
    gpu = {k: options.pop(k) for k in GPU_OPTIONS if k in options}
    precision = check_precision(options.pop("precision", "exact"))
    as_contraction = options.pop("contraction", True)
    resident = options.pop("resident", True)
    name = "polyopt_" + re.sub(r"\W", "_", scop.name)
    # the default scheduler with no options but scalar expansion: where the stencil, contraction
    # and resident paths (which run the original order) may stand in for it
    default_scheduling = algorithm == DEFAULT_ALGORITHM and not set(options) - {"expand_scalars"}
    if time_tile is not False:
        plain = schedule is None and default_scheduling
        if time_tile is not None and not (plain and set(gpu) <= {"tile", "block"}):
            raise CodegenError("CUDA: time_tile takes no schedule, algorithm or scheduling options, and of the "
                               "mapping options only tile= and block=")
        if time_tile is not None or (plain and not gpu):
            found = stencil_plan(scop, name, None if time_tile is True else time_tile, gpu.get("tile"),
                                 gpu.get("block"), ranks=DEFAULT_RANKS if time_tile is None else (1, 2, 3))
            if found is not None:
                return CudaPlan(scop, found.schedule, found.source)
            if time_tile is not None:
                raise CodegenError(f"CUDA: time_tile={time_tile!r}, but {scop.name} is no Jacobi-style stencil "
                                   "(polyopt.analysis.stencil.find_stencil)")
    if as_contraction and schedule is None and not gpu and default_scheduling:  # (a contraction has no scalar to expand)
        found = contraction_plan(scop, name, precision) or contraction_program_plan(scop, name, precision)
        if found is not None:
            return CudaPlan(scop, found.schedule, found.source)
    if schedule is not None:
        check_given_schedule(scop, schedule, algorithm, options)
        scop = schedule.scop  # the kernel's, or its expansion (scalar expansion: temporary arrays)
        verify(scop, schedule)
        last = schedule.trace[-1] if len(schedule.trace) else None
        if last is not None and last.primitive == "gpu_contract" and not gpu:
            found = contraction_plan(scop, name, last.kwargs.get("precision", "exact"), schedule)
            if found is not None:
                return CudaPlan(scop, found.schedule, found.source)
        if last is not None and last.primitive == "gpu_time_tile" and not gpu:
            found = stencil_plan(scop, name, schedule=schedule)
            if found is not None:
                return CudaPlan(scop, found.schedule, found.source)
        program = _verified(scop, map_to_gpu(scop, schedule.tree, name))
        source = emit_cuda(scop, program, name, **gpu)
        if last is not None and last.primitive == "gpu_resident":
            source = resident_source(scop, source)
            if source is None or gpu:
                raise CodegenError(f"CUDA: gpu_resident, but {scop.name} is no stencil of spatial rank 2 or 3 "
                                   "(polyopt.codegen.cuda_resident), or mapping options were given")
        return CudaPlan(scop, schedule, source)
    chosen = choose_schedule(scop, algorithm, options, lambda sched: map_to_gpu(sched.scop, sched.tree, name))
    scop = chosen.schedule.scop
    verify(scop, chosen.schedule)
    _verified(scop, chosen.program)
    schedule, source = _with_mapping(chosen.schedule, chosen.program), emit_cuda(scop, chosen.program, name, **gpu)
    if as_contraction and not gpu:  # its kernels that are contractions run as contraction kernels
        schedule, source = substitute_contractions(scop, schedule, source, precision)
    if resident and not gpu and default_scheduling:
        # a stencil's sweeps, and all its time steps in one launch where they fit (the resident
        # kernel runs the original order: not where a scheduler or its options were asked for)
        schedule, source = with_resident_stencil(scop, schedule, source)
    return CudaPlan(scop, schedule, source)


def _time_tile_option(value) -> int | bool | None:
    """``time_tile`` as given: None (not given), False (off: also 1), True or a count >= 2."""
    if value is None or value is True or value is False:
        return value
    if not isinstance(value, int) or value < 1:
        raise CodegenError(f"CUDA: time_tile must be a positive int or a bool, got {value!r}")
    return False if value == 1 else value


def choose_schedule(scop: Scop, algorithm: str, options: dict, map_program) -> gpu_choice.Candidate:
    """The schedule the GPU runs (see :mod:`polyopt.schedulers.gpu`): the requested algorithm's
    and the original loop order (the one with more thread coordinates per statement where
    neither has a serial one-thread kernel); where the better still has one (or a one-block
    kernel, whose loops run in one thread block), also Pluto without
    fusion, Feautrier (wavefronts), isl's scheduler (as PPCG uses it) and the requested
    algorithm's schedule with a wavefront of its outermost permutable band that has no
    parallel loop (:func:`~polyopt.schedulers.gpu.wavefront_loops`; nussinov), by the estimate. The
    choice and the estimates are the schedule's last note. An error of the first two is raised (as before the
    estimate); one of the others is noted and that candidate left out. A given
    ``expand_scalars`` holds for every candidate."""
    given = {k: options[k] for k in ("expand_scalars",) if k in options}

    def make(candidate: str, opts: dict):
        return lambda: run_scheduler(scop, candidate,
                                     **{**_SCHEDULER_DEFAULTS.get(candidate, {}), **given, **opts})

    makers = [(_label(algorithm, options), make(algorithm, options))]
    if algorithm != "original":
        makers.append(("original", make("original", {})))
    best, scored, failed = gpu_choice.choose(makers, map_program, by_coordinates=True, strict=True)
    if best.cost.serial or best.cost.one_block:
        more = []
        if not (algorithm == "pluto" and options.get("fuse") == "no"):
            opts = {**options, "fuse": "no"} if algorithm == "pluto" else {"fuse": "no"}
            more.append((_label("pluto", opts), make("pluto", opts)))
        more += [(name, make(name, {})) for name in ("feautrier", "isl") if name != algorithm]
        requested = scored[0]  # (the requested algorithm's, scored first)
        loops = gpu_choice.wavefront_loops(requested.schedule)
        if loops is not None:
            more.append((f"{requested.label} wavefront({', '.join(loops)})",
                         partial(run_primitive, requested.schedule, "wavefront", loops,
                                 note="the GPU schedule: a wavefront, its inner loop parallel")))
        second, scored2, failed2 = gpu_choice.choose(more, map_program)
        scored, failed = scored + scored2, failed + failed2
        if second is not None:
            best = gpu_choice.better(best, second, margin=gpu_choice.SECOND_ROUND_MARGIN)
    fused = _with_fused_nests(best, map_program)
    if fused is not None:
        scored.append(fused)
        best = gpu_choice.better(best, fused)
    text = gpu_choice.note(best, scored, failed, _label(algorithm, options))
    return replace(best, schedule=replace(best.schedule, notes=tuple(best.schedule.notes) + (text,)))


def _with_fused_nests(best: gpu_choice.Candidate, map_program) -> gpu_choice.Candidate | None:
    """``best`` with its consecutive parallel nests fused into one kernel each
    (:func:`~polyopt.schedulers.gpu_fusion.fuse_parallel_nests`) as a candidate of its own (the
    estimate counts its fewer launches), None where nothing fuses."""
    fused = fuse_parallel_nests(best.schedule)
    if fused is best.schedule:
        return None
    program = map_program(fused)
    return gpu_choice.Candidate(best.label + " + fused nests", fused, program,
                                gpu_choice.estimate(fused.scop, program))


def _label(algorithm: str, options: dict) -> str:
    return algorithm + "".join(f" {k}={v!r}" for k, v in sorted(options.items()))


def _with_mapping(schedule: Schedule, program: GpuProgram) -> Schedule:
    """``schedule`` with the mapping's choice recorded as ``gpu_map`` steps (one per kernel with
    thread coordinates, naming the loops that became its coordinates), so the plan's trace says
    which loops went to blocks and threads and replays to the same mapping (a coordinate is
    the loop it equals on the loop's statements: a single-instance statement merged into the
    kernel is merged again on replay); unchanged where a coordinate is no loop of the schedule
    (the mapper split it differently)."""
    named = [(name, member) for _, band in bands(schedule.root) for name, member in zip(band.names, band.members)]
    recorded = schedule
    try:
        for coordinates in _kernel_coordinates(program.tree):
            loops = [next(name for name, loop in named if loop.plain_is_equal(member.intersect_domain(loop.domain())))
                     for member in coordinates]
            recorded = run_primitive(recorded, "gpu_map", loops, check=False,
                                     note="the GPU mapping: these loops are the kernel's block/thread coordinates")
    except (StopIteration, ScheduleError):
        return schedule
    return recorded


def _kernel_coordinates(tree: isl.Schedule) -> list[list[isl.UnionPwAff]]:
    """Per kernel of a mapped tree (launch order), its coordinate members, outermost first."""
    found: list[list[isl.UnionPwAff]] = []

    def look(node: isl.ScheduleNode) -> bool:
        if (node.get_type() == isl.schedule_node_type.mark
                and node.mark_get_id().get_name().split(" ")[0] == GPU_KERNEL_MARK):
            members, _ = coordinates_below(node)
            if members:
                found.append(members)
        return True

    tree.get_root().foreach_descendant_top_down(look)
    return found


def cuda_source(kernel, *, algorithm: str = DEFAULT_ALGORITHM, schedule: Schedule | None = None,
                **options) -> str:
    """The CUDA C source (kernels and a host launch wrapper) that ``compile(kernel,
    target="cuda", algorithm=..., **options)`` (or ``schedule=...``) runs; needs neither CuPy
    nor a GPU."""
    return plan(kernel, algorithm=algorithm, schedule=schedule, **options).source.source


# ----- CuPy ------------------------------------------------------------------------------------

def cupy_module():
    """CuPy, or :class:`TargetUnavailableError` when it or a GPU is missing."""
    try:
        import cupy
    except ImportError:
        raise TargetUnavailableError("target 'cuda' needs CuPy (pip install polyopt[cuda]) and "
                                     "an NVIDIA GPU; CuPy is not installed") from None
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDA driver or runtime missing: CuPy raises its own types
        raise TargetUnavailableError(f"target 'cuda': no usable CUDA device ({exc})") from None
    if count == 0:
        raise TargetUnavailableError("target 'cuda': no CUDA device found")
    return cupy


_MODULES: dict[str, object] = {}
#: Captured host programs one compiled kernel keeps (one per argument set).
_MAX_GRAPHS = 16


def _raw_module(source: str):
    """The NVRTC build of ``source`` (cached by the text itself: a launch looks it up by the
    same string object, whose hash Python keeps, where a SHA-256 of the text took 55 us a
    launch): for sm_90a where the source has ``wgmma`` kernels and the GPU is compute
    capability 9.0 (:func:`~polyopt.targets.sm90a.sm90a_module`), else for the GPU as CuPy
    compiles."""
    if source not in _MODULES:
        cupy = cupy_module()
        module = None
        if WGMMA_MARK in source and compute_capability() == 90:
            module = sm90a_module(cupy, source)
            if module is not None:
                _WGMMA_BUILDS.add(source)
        standard = "--std=c++17" if source.startswith(COOPERATIVE_INCLUDE) else "--std=c++14"  # (the header needs 17)
        _MODULES[source] = module or cupy.RawModule(code=source, options=(standard,))
    return _MODULES[source]


#: What marks a source with ``wgmma`` kernels (:mod:`polyopt.codegen.cuda_wgmma`).
WGMMA_MARK = "wgmma.mma_async"
#: Sources whose module was built for sm_90a.
_WGMMA_BUILDS: set[str] = set()


def module_has_wgmma(source: str) -> bool:
    """Whether the module of ``source`` (:func:`_raw_module`) was built for sm_90a."""
    return source in _WGMMA_BUILDS


def _sm_count() -> int:
    """Streaming multiprocessors of the current GPU (the grid's blocks spread over them)."""
    cupy_module()  # a clear error where CuPy or the GPU is missing
    return device_attribute("MultiProcessorCount")


def _clusters() -> bool:
    """Whether the current GPU runs thread block clusters (compute capability 9.0 and later)."""
    return compute_capability() >= 90


def is_cupy(value) -> bool:
    """Whether ``value`` is a CuPy object (without importing CuPy)."""
    module = type(value).__module__
    return module.startswith("cupy.") or module == "cupy"


#: DLPack device types of memory a CUDA kernel can address (kDLCUDA, kDLCUDAManaged).
_DLPACK_CUDA_DEVICES = (2, 13)


def is_device_array(value) -> bool:
    """Whether ``value`` is an array in GPU memory that CuPy can view without a copy: a CuPy
    array, an object exporting ``__cuda_array_interface__`` (Numba, PyTorch CUDA tensors, JAX),
    or a DLPack producer whose ``__dlpack_device__`` is a CUDA device. Neither CuPy nor the
    producer's library is imported; numpy arrays (also DLPack producers, on the CPU) are not."""
    if value is None or type(value) is np.ndarray or isinstance(value, (int, float, complex, str, bytes)):
        return False
    if is_torch_cuda(value):
        return True  # (PyTorch builds its __cuda_array_interface__ dict in Python on each read)
    if is_cupy(value) or hasattr(value, "__cuda_array_interface__"):
        return True
    device = getattr(value, "__dlpack_device__", None)
    if device is None:
        return False
    try:
        return device()[0] in _DLPACK_CUDA_DEVICES
    except Exception:  # a producer that cannot say where its data is: not ours to use
        return False


def as_cupy(value):
    """A CuPy array viewing the GPU memory of the device array ``value`` (no copy: writes through
    it change ``value``): CuPy arrays as they are, ``__cuda_array_interface__`` objects through
    ``cupy.asarray``, other DLPack producers through ``cupy.from_dlpack``. A PyTorch tensor that
    requires grad (allowed under ``torch.no_grad()``: :func:`torch_tensors.check_untracked`) is
    viewed through ``detach()``, which shares its memory: torch exports no interface otherwise."""
    if is_cupy(value):
        return value
    cupy = cupy_module()
    if getattr(value, "requires_grad", False) and is_torch_cuda(value):
        value = value.detach()
    if is_torch_bfloat16(value):  # exported by neither protocol: its bits, as bf16 on CuPy are
        return cupy.asarray(value.view(sys.modules["torch"].int16)).view(cupy.uint16)
    if hasattr(value, "__cuda_array_interface__"):
        return cupy.asarray(value)
    return cupy.from_dlpack(value)


def _bits_view(array: np.ndarray) -> np.ndarray:
    """A host array as CuPy holds it: bf16 data (ml_dtypes' bfloat16) as a uint16 view of its
    bits, since CuPy has no bfloat16 (bf16 arrays on the GPU are uint16 arrays); others as
    they are."""
    return array.view(np.uint16) if array.dtype == bf16.numpy and array.dtype.kind == "V" else array


def other_device(values) -> int | None:
    """The GPU of the first CuPy array among ``values`` where it is not CuPy's current device (a
    call on it runs there, as one on torch tensors does: :func:`on_torch_stream`); None where it
    is, or where none is a CuPy array."""
    if "cupy" not in sys.modules:  # (no CuPy array exists: a CPU call's path stays as it was)
        return None
    for value in values:
        if type(value) is not np.ndarray and is_cupy(value):
            device = value.data.device_id
            return device if device != current_device() else None
    return None


def on_arrays_device(values) -> contextlib.AbstractContextManager:
    """Where a call on ``values`` runs, as a context manager: on the device of the first PyTorch
    CUDA tensor among them, on torch's current stream there (:func:`on_torch_stream`: torch's
    work and ours stay in order); else on the GPU of CuPy arrays of a device other than the
    current one (:func:`other_device`); else where it is."""
    tensor = next((v for v in values if is_torch_cuda(v)), None)
    if tensor is not None:
        return on_torch_stream(cupy_module(), tensor)
    device = other_device(values)
    return contextlib.nullcontext() if device is None else cupy_module().cuda.Device(device)


def current_device() -> int:
    """CuPy's current device, where CuPy is imported already (a call on its arrays: no import
    and no device count on a repeated call's path)."""
    return sys.modules["cupy"].cuda.runtime.getDevice()


def check_one_device(arrays: list[tuple[str, object]], where: str) -> None:
    """Refuse CuPy arrays (by name) on different GPUs with an ArgumentError naming two of them
    (``where``: the call): a kernel on one GPU would read the other's memory."""
    devices = [(name, value.data.device_id) for name, value in arrays if is_cupy(value)]
    for name, device in devices[1:]:
        if device != devices[0][1]:
            raise ArgumentError(f"{where}: {name} is on GPU {device}, {devices[0][0]} on GPU {devices[0][1]}: "
                                "put the arrays on one GPU")


def array_signature(array) -> tuple:
    """What a recorded launch depends on in a CuPy array: shape, dtype, strides, device and
    whether its address is 16-byte aligned (the contraction kernels copy aligned operands with
    ``cp.async``; the address itself is read at every call)."""
    return (array.shape, array.dtype, array.strides, array.data.device_id, array.data.ptr % 16 == 0)


@dataclass(eq=False)
class CudaKernel:
    """A kernel compiled for CUDA: call it with GPU arrays -- CuPy arrays, PyTorch CUDA tensors,
    any ``__cuda_array_interface__`` or CUDA DLPack object (:func:`is_device_array`) -- which it
    updates in place (no copies, no synchronization: later work on the stream sees the result),
    or numpy arrays (copied to the GPU and back). Inspect ``.cuda_source``, ``.schedule`` and
    ``.program`` (the host loops and kernels; ``.program.pretty()``: the mapped schedule tree).

    A call on GPU arrays like an earlier one (:meth:`call_key`: same array shapes, dtypes,
    strides and devices, same other values) replays the earlier call's launches
    (:class:`LaunchRecord`) with the new arrays' addresses, skipping the argument checks and
    the host program. A call with the very arguments of the one before (the same CuPy array
    objects, at the same addresses, shapes and strides, and the same immutable scalars: a loop
    calling the kernel on its buffers) skips even that (:class:`RepeatedCall`): its launches
    go as they are, several of them as one CUDA graph."""

    scop: Scop
    schedule: Schedule
    compiled: CudaSource
    compile_times: dict[str, float] = field(default_factory=dict)
    checked_params: dict = field(default_factory=dict, repr=False)
    _graphs: dict = field(default_factory=dict, repr=False)
    _records: dict = field(default_factory=dict, repr=False)
    _last: "RepeatedCall | None" = field(default=None, repr=False)
    _scratch: dict = field(default_factory=dict, repr=False)

    @property
    def cuda_source(self) -> str:
        return self.compiled.source

    @cached_property
    def _abi(self) -> tuple:
        """The kernel's arguments in the native calling convention (:func:`abi_arguments`),
        made once: each launch walks them."""
        return tuple(abi_arguments(self.scop))

    @property
    def program(self) -> GpuProgram:
        return self.compiled.program

    @property
    def half_outputs(self) -> dict[str, DType]:
        """The f32 outputs a call may pass in a half type instead, and that type: each computed
        by a contraction kernel from operands of that type and written only (its init reads no
        element), which then rounds each f32 sum to it once, at the store
        (:func:`~polyopt.codegen.contraction_text.half_store`) -- torch's half matmul result,
        with no f32 result in memory. On the GPU a bf16 output is a uint16 array of its bits
        (or a PyTorch bfloat16 tensor), as bf16 operands are."""
        return {step.contraction.output: ELEMENT_TYPES[step.half_store]
                for step in contraction_steps(self.compiled) if step.half_store is not None}

    def __call__(self, *args, **kwargs) -> None:
        last = self._last
        if last is not None and last.matches(args, kwargs):  # (CuPy arrays only)
            last.launch()
            return
        with on_arrays_device((*args, *kwargs.values())):
            self._call(args, kwargs)

    def _call(self, args: tuple, kwargs: dict) -> None:
        """A call that is not the last one again: a recorded one's launches, else the checks,
        the launches and their record."""
        named = self.named(args, kwargs)
        key = self.call_key(named)
        known = self.recorded(key)
        if known is not None:
            known(named)
            self._last = RepeatedCall.of(args, kwargs, known, named)
            return
        bound, device, copy_back = self.bind(args, kwargs)
        temporaries = any(a.temporary for a in self.scop.arrays.values())  # made per call: not replayable
        replayable = not copy_back and not temporaries
        record = self.launch(bound.params, bound.scalars, device, record=replayable)
        for name, host in copy_back.items():
            device[name].get(out=host)
        if replayable and key is not None:  # (no record: too many launches; a graph replays them)
            self._remember(key, record or GraphReplay.of(self, bound.params))

    def named(self, args: tuple, kwargs: dict) -> dict | None:
        """The call's values by argument name, device arrays as CuPy arrays; None where
        :meth:`bind` has to sort them out (too many or repeated arguments)."""
        names = [a.name for a in self.scop.arguments]
        if len(args) > len(names) or any(k in names[:len(args)] for k in kwargs):
            return None
        values = {**dict(zip(names, args)), **kwargs}
        return {k: as_cupy(v) if is_device_array(v) else v for k, v in values.items()}

    def call_key(self, named: dict | None) -> tuple | None:
        """The key under which a call with these values (:meth:`named`) is recorded: per
        argument its name and the CuPy array's :func:`array_signature`, or the type and value of
        anything else (a scalar's value decides the argument checks); None where the call is
        not recorded (numpy arrays, copied in and out; unhashable values)."""
        if named is None:
            return None
        key = []
        for name, value in named.items():
            if is_cupy(value):
                key.append((name, array_signature(value)))
            elif isinstance(value, np.ndarray):
                return None
            else:
                key.append((name, type(value), value))
        key = tuple(sorted(key, key=lambda item: item[0]))
        try:
            hash(key)
        except TypeError:
            return None
        return key

    def recorded(self, key: tuple | None) -> "LaunchRecord | GraphReplay | None":
        """The launches recorded under ``key`` (None: not recorded)."""
        return None if key is None else self._records.get(key)

    def _remember(self, key: tuple, record: "LaunchRecord") -> None:
        if len(self._records) >= MAX_RECORDS:
            del self._records[next(iter(self._records))]
        self._records[key] = record

    def bind(self, args: tuple, kwargs: dict):
        """Check the arguments (as the CPU target does) and put every array on the GPU:
        (bound arguments, device arrays by name as CuPy arrays, written numpy arrays to copy
        back)."""
        cupy = cupy_module()
        on_device, halves = {}, self.half_outputs

        def stand_in(name, value):  # GPU arrays are checked through a numpy stand-in
            if not is_device_array(value):
                return value
            value = as_cupy(value)
            if not value.flags.c_contiguous:
                raise ArgumentError(f"{self.scop.name}(): array '{name}' must be C-contiguous")
            on_device[name] = value
            declared = self.scop.arrays.get(name)
            bits = value.dtype == np.uint16 and bf16 in (halves.get(name), declared and declared.dtype)
            return np.empty(value.shape, bf16.numpy if bits else value.dtype)  # untouched pages: no real allocation

        names = [a.name for a in self.scop.arguments]
        args = tuple(stand_in(n, v) for n, v in zip(names, args))
        kwargs = {k: stand_in(k, v) for k, v in kwargs.items()}
        given = {**dict(zip(names, args)), **kwargs}
        half = {name: replace(self.scop.arrays[name], dtype=dtype) for name, dtype in halves.items()
                if getattr(given.get(name), "dtype", None) == dtype.numpy}
        bound = bind_arguments(replace(self.scop, arrays={**self.scop.arrays, **half}) if half else self.scop,
                               args, kwargs)
        check_params(self.scop, bound.params, self.checked_params)
        check_one_device(list(on_device.items()), f"{self.scop.name}()")
        written = {w.array for s in self.scop.statements for w in s.writes}
        _check_device_aliasing(self.scop.name, on_device, written)
        device, copy_back = {}, {}
        for name, value in bound.arrays.items():
            if name in on_device:
                device[name] = on_device[name]
            elif self.scop.arrays[name].temporary:  # an expanded scalar: device memory of its own
                device[name] = cupy.empty(value.shape, value.dtype)
            else:
                device[name] = cupy.asarray(_bits_view(value))
                if name in written:
                    copy_back[name] = _bits_view(value)
        return bound, device, copy_back

    def launch(self, params: dict[str, int], scalars: dict, arrays: dict, *,
               graph: bool = False, record: bool = False) -> "LaunchRecord | None":
        """Run the host program on the current stream (no checks, no synchronization).

        With ``graph``, the launches are captured once per argument set (parameters, scalars,
        array addresses) into a CUDA graph and replayed: no Python work per launch, which
        matters for host loops of many short kernels (stencil time steps). With ``record``
        (and no ``graph``), returns the :class:`LaunchRecord` of these launches (None where
        there were more than :data:`MAX_RECORDED_LAUNCHES`)."""
        values, env = [], dict(params)
        for arg in self._abi:
            if arg.kind == "param":
                values.append(np.int64(params[arg.name]))
            elif arg.kind == "scalar":
                values.append(arg.dtype.numpy.type(scalars[arg.name]))
                env[arg.name] = values[-1]  # (host statements read scalar arguments)
            else:
                values.append(arrays[arg.name])
        module = _raw_module(self.compiled.source)
        recorder = _Recorder(module, len(values)) if record and not graph else None
        steps = contraction_steps(self.compiled)
        if isinstance(self.compiled, StencilSource):  # overlapped time tiles on scratch copies
            scratch = self._stencil_scratch(params)
            run = partial(launch_stencil, self.compiled, values=values, params=params, scratch=scratch)
            if graph:
                self._replay_graph(values, partial(_load, module, [self.compiled.kernel, self.compiled.copy]),
                                   partial(run, module))
            else:
                run(recorder or module)
        elif steps:  # contraction kernels, in order, each choosing its tile for its sizes
            sm_count, wgmma, clusters = _sm_count(), module_has_wgmma(self.compiled.source), _clusters()

            def contractions(target) -> None:
                for step in steps:
                    launch_contraction(step, target, values, params, arrays, sm_count, wgmma=wgmma, clusters=clusters)
            if graph and len(steps) > 1:  # (the module loads whole with any of its functions)
                self._replay_graph(values, partial(_load, module, [steps[0].variants[0][0]]),
                                   partial(contractions, module))
            else:  # (no graph asked, or one launch: nothing to capture)
                contractions(recorder or module)
        elif isinstance(self.compiled, ResidentSource) and \
                (strips := resident_strips(self.compiled, params, _sm_count())) is not None:
            launch_resident(self.compiled, recorder or module, values, strips)  # one launch: no graph
        elif not graph:
            self._run_host(env, values, recorder or module)
        else:
            self._replay_graph(values, partial(_load, module, self.compiled.shapes),
                               lambda: self._run_host(dict(env), values, module))
        return None if recorder is None else recorder.record(self.scop, params)

    def _stencil_scratch(self, params: dict[str, int]) -> list:
        """The scratch copies of a stencil's written arrays for these sizes, kept for later calls
        (recorded launches hold theirs; captured graphs address them, so they go together). Calls
        of one compiled kernel share them: calls on two streams at once would race."""
        cupy = cupy_module()
        source = self.compiled
        extents = array_extents(source, params)
        key = (extents, cupy.cuda.Device().id)
        if key not in self._scratch:
            if len(self._scratch) >= _MAX_GRAPHS:
                self._scratch.clear()
                self._graphs.clear()
            self._scratch[key] = [cupy.empty(extents, self.scop.arrays[a].dtype.numpy)  # (f32 or f64)
                                  for a in source.tiling.stencil.written]
        return self._scratch[key]

    def _run_host(self, env: dict, values: list, module) -> None:
        """The host program: its loops, its host statements and its launches, in order."""
        storage = host_storage(self.scop, self.program.host_scalars)
        _run_steps(self.program.host, env, values, module, self.compiled, storage)

    def _replay_graph(self, values: list, prepare: Callable[[], object], run: Callable[[], object]) -> None:
        """The launches ``run`` makes (the host program, or the contraction kernels) as a CUDA
        graph captured once per argument set ``values`` (see :meth:`launch`), after ``prepare``
        has built and loaded the kernels outside the capture."""
        cupy = cupy_module()
        key = tuple(v.data.ptr if is_cupy(v) else v.item() for v in values)
        if key not in self._graphs:
            if len(self._graphs) >= _MAX_GRAPHS:
                self._graphs.clear()
            prepare()
            self._graphs[key] = _captured(run)
        stream, captured = self._graphs[key]
        current = cupy.cuda.get_current_stream()
        stream.wait_event(current.record())
        captured.launch(stream)
        current.wait_event(stream.record())


#: Recorded calls one compiled kernel keeps (the oldest go first).
MAX_RECORDS = 64
#: Host programs launching more kernels than this are not recorded (a host loop of time
#: steps is replayed better as a CUDA graph: ``launch(..., graph=True)``).
MAX_RECORDED_LAUNCHES = 64


@dataclass(frozen=True)
class LaunchRecord:
    """The launches one call of a :class:`CudaKernel` made, to run again on arrays of the same
    shapes, dtypes and strides: per ABI argument ``(kind, name, how)`` -- a size parameter's
    fixed ``np.int64`` value, a scalar's numpy type, or None for an array -- and per launch
    ``(function, grid, block, trailing arguments)``; the kernel arguments come first in every
    launch, the host variables and layout values (fixed by the sizes) after them."""

    kernel: str
    arguments: tuple[tuple[str, str, object], ...]
    written: frozenset[str]
    launches: tuple[tuple[object, tuple, tuple, tuple], ...]
    #: Per launch, the same launch packed for the driver (:class:`~polyopt.targets.
    #: driver_launch.PackedLaunch`), or None where it goes through CuPy; empty: none packed.
    packed: tuple = ()

    def __call__(self, named: dict, *, fresh: str | None = None) -> None:
        """Launch on the current stream with the arguments ``named`` (CuPy arrays, scalars);
        ``fresh``: an array the caller has just allocated (it overlaps nothing)."""
        names = self._packed_names
        if names is not None and self.written == {fresh} and self._packed_here():  # no check: the addresses alone
            self._launch_packed(names, {name: named[name].data.ptr for name in self._array_names})
            return
        self._launch(self.values(named, fresh))

    def by_address(self) -> bool:
        """Whether the launches take only arrays and size parameters (:meth:`at_addresses`)."""
        return all(kind != "scalar" for kind, _, _ in self.arguments)

    def at_addresses(self, addresses: dict) -> None:
        """Launch on the current stream with each array given by its device address (an int;
        :meth:`by_address` kernels only). No overlap check: the caller guarantees that the
        written arrays overlap nothing (:class:`polyopt.einsum_calls.TorchCall`: a result it
        has just allocated)."""
        names = self._packed_names
        if names is not None and self._packed_here():  # every launch packed: the addresses alone
            self._launch_packed(names, addresses)
            return
        self._launch([how if kind == "param" else np.uint64(addresses[name]) for kind, name, how in self.arguments])

    def _launch_packed(self, names: tuple[tuple[str, ...], ...], addresses: dict) -> None:
        """Every launch packed (``names``: :attr:`_packed_names`), with the arrays' addresses."""
        for packed, arrays in zip(self.packed, names):
            packed([addresses[name] for name in arrays])

    @cached_property
    def _packed_names(self) -> tuple[tuple[str, ...], ...] | None:
        """Per launch, the names of the arrays its packed launch takes, in order; None unless
        every launch is packed."""
        if not self.packed or any(packed is None for packed in self.packed):
            return None
        return tuple(tuple(self.arguments[p][1] for p in packed.arrays) for packed in self.packed)

    @cached_property
    def _array_names(self) -> frozenset[str]:
        """The names of the arrays the packed launches take."""
        return frozenset(name for arrays in self._packed_names or () for name in arrays)

    def _packed_here(self) -> bool:
        """Whether the packed launches may run: the current device is the one they were all
        recorded on."""
        return any(packed is not None and packed.here() for packed in self.packed)

    def _launch(self, values: list) -> None:
        """Each launch with the kernel arguments ``values`` and its own trailing arguments (a
        packed one with the arrays' addresses alone, on the recording device)."""
        here = self._packed_here()
        for (function, grid, block, tail), packed in zip(self.launches, self.packed or (None,) * len(self.launches)):
            if packed is not None and here:
                packed([address_of(values[p]) for p in packed.arrays])
            else:
                function(grid, block, (*values, *tail))

    def values(self, named: dict, fresh: str | None = None) -> list:
        """The kernel arguments for the values ``named`` (CuPy arrays, scalars), after the
        overlap check :meth:`CudaKernel.bind` makes (addresses change per call), which a call
        whose only written array is ``fresh`` (just allocated) skips."""
        values, arrays = [], {}
        for kind, name, how in self.arguments:
            if kind == "param":
                values.append(how)
            elif kind == "scalar":
                values.append(how(named[name]))
            else:
                arrays[name] = named[name]
                values.append(arrays[name])
        if len(arrays) > 1 and self.written and self.written != {fresh}:
            _check_device_aliasing(self.kernel, arrays, self.written)
        return values


@dataclass(frozen=True)
class GraphReplay:
    """How a call like an earlier one runs when that one launched more kernels than a
    :class:`LaunchRecord` keeps (a host loop of stencil time steps: a Python launch each would
    cost more than the kernel): the host program as a CUDA graph, captured once per argument
    set (:meth:`CudaKernel.launch` with ``graph``) and replayed; ``params``: the sizes, fixed by
    the call's key; ``arrays``, ``scalars``: the kernel's argument names of each kind, and
    ``written``: the arrays it writes (all fixed by the kernel: :meth:`of`)."""

    kernel: "CudaKernel"
    params: dict
    arrays: tuple[str, ...]
    scalars: tuple[str, ...]
    written: frozenset[str]

    @staticmethod
    def of(kernel: "CudaKernel", params: dict) -> "GraphReplay":
        """The replay of ``kernel``'s calls with the sizes ``params``."""
        arguments = abi_arguments(kernel.scop)
        return GraphReplay(kernel, params, tuple(a.name for a in arguments if a.kind == "array"),
                           tuple(a.name for a in arguments if a.kind == "scalar"),
                           frozenset(w.array for s in kernel.scop.statements for w in s.writes))

    def __call__(self, named: dict, *, fresh: str | None = None) -> None:
        """Replay on the current stream with the arguments ``named`` (CuPy arrays, scalars),
        after the overlap check a :class:`LaunchRecord` makes."""
        arrays = {name: named[name] for name in self.arrays}
        if len(arrays) > 1 and self.written != {fresh}:
            _check_device_aliasing(self.kernel.scop.name, arrays, self.written)
        self.kernel.launch(self.params, {name: named[name] for name in self.scalars}, arrays, graph=True)


#: Types of scalar arguments whose identity fixes their value (a repeated call may skip them).
_IMMUTABLE_SCALARS = (int, float, bool, complex, np.generic)


@dataclass(eq=False)
class RepeatedCall:
    """The call of a :class:`CudaKernel` made last, ready to launch again when the next call
    passes the same arguments: the identities of its arguments (CuPy arrays and immutable
    scalars only; the scalars are held, so their identities stay theirs), each array's address,
    shape, strides and dtype (CuPy arrays can be reshaped in place, and an array object freed
    and made again may land on the same identity: with the same address and layout it is the
    same call), and the launches with whole argument tuples, arrays as their addresses (no
    array is kept alive by it). Several launches are captured once into a CUDA graph, launched
    on the current stream as one."""

    keywords: tuple[str, ...]
    identities: tuple[int, ...]
    scalars: tuple
    layouts: tuple
    launches: tuple
    #: CuPy's current device when the call was made (its launches are that device's).
    device: int = 0
    graph: object = None

    @classmethod
    def of(cls, args: tuple, kwargs: dict, record: "LaunchRecord | GraphReplay", named: dict
           ) -> "RepeatedCall | None":
        """The repeatable form of a call that ``record`` just replayed with ``named``, or None
        where an argument is neither a CuPy array nor an immutable scalar (or the launches are
        a graph's: :class:`GraphReplay` finds its graph by the arguments)."""
        given = args + tuple(kwargs.values())
        if not isinstance(record, LaunchRecord) or not all(is_cupy(v) or isinstance(v, _IMMUTABLE_SCALARS)
                                                            for v in given):
            return None
        values = [np.uint64(v.data.ptr) if is_cupy(v) else v for v in record.values(named)]
        launches = tuple(_bound(function, grid, block, (*values, *tail)) for function, grid, block, tail in record.launches)
        return cls(tuple(kwargs), tuple(map(id, given)), tuple(v for v in given if not is_cupy(v)),
                   _layouts(given), launches, current_device())

    def matches(self, args: tuple, kwargs: dict) -> bool:
        """Whether ``args``/``kwargs`` are this call's arguments again, arrays unchanged, and
        CuPy's current device the one it was made on."""
        given = args + tuple(kwargs.values()) if kwargs else args
        return (tuple(map(id, given)) == self.identities and tuple(kwargs) == self.keywords
                and _layouts(given) == self.layouts and current_device() == self.device)

    def launch(self) -> None:
        """The launches again, on the current stream."""
        if len(self.launches) == 1:
            function, grid, block, values = self.launches[0]
            function(grid, block, values)
            return
        if self.graph is None:
            def launch_all() -> None:
                for function, grid, block, values in self.launches:
                    function(grid, block, values)
            _, self.graph = _captured(launch_all)
        self.graph.launch(cupy_module().cuda.get_current_stream())


def _captured(launch: Callable[[], object]) -> tuple:
    """(stream, CUDA graph) of the launches ``launch`` makes, captured on a new non-blocking
    stream (nothing runs while capturing)."""
    cupy = cupy_module()
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        launch()
        return stream, stream.end_capture()


def _layouts(values: tuple) -> tuple:
    """(address, shape, strides, dtype) of each CuPy array among ``values``."""
    return tuple((v.data.ptr, v.shape, v.strides, v.dtype) for v in values if is_cupy(v))


class _Recorder:
    """A stand-in for a built module that launches as the module does and notes each launch's
    function, grid, block and arguments after the first ``leading`` (the kernel's own)."""

    def __init__(self, module, leading: int):
        self.module, self.leading, self.launches = module, leading, []
        self.plain: list = []  # per launch: (CuPy kernel, dynamic shared memory), or None

    def get_function(self, name: str):
        function = self.module.get_function(name)

        def launch(grid, block, args, shared_mem: int = 0, enable_cooperative_groups: bool = False,
                   tensor_maps: tuple | None = None):
            run = partial(function.kernel, enable_cooperative_groups=True) if enable_cooperative_groups else function
            run = run if not shared_mem else partial(run, shared_mem=shared_mem)
            if tensor_maps is not None:  # (cupy, operand positions, map layouts): the maps per call
                run = TmaLaunch(tensor_maps[0], run, *tensor_maps[1:])
            self.launches.append((run, tuple(grid), tuple(block), tuple(args[self.leading:])))
            plain = not enable_cooperative_groups and tensor_maps is None
            self.plain.append((function, shared_mem) if plain else None)
            run(grid, block, args)
        return launch

    def raw_function(self, name: str):
        """The module's own CuPy function ``name`` (to set its attributes)."""
        return self.module.get_function(name)

    def record(self, scop: Scop, params: dict[str, int]) -> LaunchRecord | None:
        """The :class:`LaunchRecord` of the launches seen (None: too many to record)."""
        if len(self.launches) > MAX_RECORDED_LAUNCHES:
            return None
        arguments = tuple((a.kind, a.name, np.int64(params[a.name]) if a.kind == "param"
                           else a.dtype.numpy.type if a.kind == "scalar" else None)
                          for a in abi_arguments(scop))
        written = frozenset(w.array for s in scop.statements for w in s.writes)
        return LaunchRecord(scop.name, arguments, written, tuple(self.launches), self._packed(arguments))

    def _packed(self, arguments: tuple) -> tuple:
        """Per launch seen, its :class:`~polyopt.targets.driver_launch.PackedLaunch` where it
        can be packed (a CuPy kernel launched plainly, no scalar among the kernel's arguments,
        8-byte integers after them), else None; empty where none can."""
        if any(kind == "scalar" for kind, _, _ in arguments):
            return ()
        leading = [how if kind == "param" else np.uint64(0) for kind, _, how in arguments]
        arrays = [p for p, (kind, _, _) in enumerate(arguments) if kind == "array"]
        packed = []
        for (_, grid, block, tail), plain in zip(self.launches, self.plain):
            values = (*leading, *tail)
            if plain is None or not isinstance(getattr(getattr(plain[0], "kernel", None), "ptr", None), int) \
                    or not packable(values, arrays):
                packed.append(None)
                continue
            packed.append(PackedLaunch(cupy_module(), plain[0], grid, block, plain[1], values, arrays))
        return tuple(packed) if any(p is not None for p in packed) else ()


def _bound(function, grid: tuple, block: tuple, args: tuple) -> tuple:
    """A launch of a :class:`RepeatedCall`: a TMA launch with the tensor maps of its arrays
    bound, held with the launch (and so with a graph captured from it)."""
    if isinstance(function, TmaLaunch):
        function, args = function.bound(args)
    return function, grid, block, args


def _load(module, names) -> None:
    """Build ``module`` and load its functions ``names`` (before a graph capture)."""
    for name in names:
        module.get_function(name)


def _run_steps(steps, env: dict, values: list, module, compiled: CudaSource, storage: dict) -> None:
    """Run host ``steps``: loops, host statements (on ``storage``, the host scalars) and launches."""
    for step in steps:
        if isinstance(step, HostLoop):
            low, high = evaluate(step.lower, env, {}), evaluate(step.upper, env, {})
            for value in range(low, high + 1):
                env[step.var] = value
                _run_steps(step.body, env, values, module, compiled, storage)
        elif isinstance(step, HostStatement):
            run_host_statement(compiled.program.scop, step, env, storage)
        else:
            _launch(step, env, values, module, compiled, storage)


def _launch(kernel: Kernel, env: dict, values: list, module, compiled: CudaSource, storage: dict) -> None:
    """Launch ``kernel`` of the host program (``values``: the ABI arguments; ``env``: the
    parameters, scalars and host loop variables) on ``module``; one that runs as a contraction
    kernel (:mod:`polyopt.targets.contraction_kernels`) is launched as one, its tile chosen for
    its sizes (the general kernel is in the module too, unused)."""
    contraction = substituted(compiled).get(kernel.name)
    if contraction is not None:
        scop = compiled.program.scop
        launch_contraction(contraction, module, values, {p: env[p] for p in scop.params},
                           arrays_by_name(scop, values), _sm_count(), wgmma=module_has_wgmma(compiled.source),
                           clusters=_clusters())
        return
    args = (tuple(values) + tuple(np.int64(env[v]) for v in kernel.host_vars)
            + host_values(kernel.host_scalars, storage))
    if not kernel.coords:
        module.get_function(kernel.name)((1,), compiled.shapes[kernel.name].cuda_block(), args)
        return
    name, shape, grid = compiled.choose(kernel.name, [evaluate(e, env, {}) for e in kernel.lower],
                                        [evaluate(e, env, {}) for e in kernel.upper])
    if grid is not None:
        module.get_function(name)(grid, shape.cuda_block(), args)


def _check_device_aliasing(kernel: str, arrays: dict, written: set[str]) -> None:
    names = list(arrays)
    for k, a in enumerate(names):
        for b in names[k + 1:]:
            x, y = arrays[a], arrays[b]
            if (a in written or b in written) and x.size and y.size and \
                    x.data.ptr < y.data.ptr + y.nbytes and y.data.ptr < x.data.ptr + x.nbytes:
                raise ArgumentError(f"{kernel}(): arrays '{a}' and '{b}' overlap in memory; "
                                    "the kernel assumes distinct arrays")


def compile_cuda(kernel, *, algorithm: str = DEFAULT_ALGORITHM, schedule: Schedule | None = None,
                 **options) -> CudaKernel:
    """``po.compile(kernel, target="cuda", ...)``: cached like the CPU target; the NVRTC build
    happens at the first call (CuPy and a GPU are needed only then)."""
    key = cache_key(kernel, "cuda", algorithm, options, schedule)
    if key not in COMPILED:
        start = time.perf_counter()
        result = plan(kernel, algorithm=algorithm, schedule=schedule, **options)
        times = {"schedule+codegen": time.perf_counter() - start}
        COMPILED[key] = CudaKernel(result.scop, result.schedule, result.source, times)
    return COMPILED[key]
