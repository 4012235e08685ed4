"""Tensor maps for the TMA contraction kernels (issue 17; ``Variant.tma`` in
:mod:`polyopt.codegen.cuda_contraction`).

A Hopper TMA copy reads its operand through a *tensor map*: 128 bytes the driver encodes
(``cuTensorMapEncodeTiled``) from the array's address, its dimensions and row stride, the box
one copy moves and the shared-memory swizzle. The kernels take each map's address in GPU
memory (:data:`~polyopt.codegen.cuda_contraction.TMA_MAP_ARGUMENTS`); a map is made once per
(address, layout) and kept in a bounded cache (:func:`tensor_map`).

A map holds the operand's address, so a recorded launch replayed on other arrays needs other
maps: a TMA launch is recorded as a :class:`TmaLaunch`, which finds the maps for the arrays
of each replay among its arguments. (CuPy's memory pool orders reuse on the stream, so a map
leaving the cache stays intact for the kernels queued before; a CUDA graph capture holds raw
addresses, so the contraction launch does not take the TMA kernels while a stream captures,
and :class:`~polyopt.targets.cuda.RepeatedCall` binds the maps of its one argument set with
:meth:`TmaLaunch.bound`, holding them as long as its graph.)
"""
from __future__ import annotations

import ctypes
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

#: ``CUtensorMapDataType`` per operand element type (the TF32 engine reads f32 elements).
DATA_TYPES = {"f16": 6, "f32": 7, "bf16": 9}
#: ``CU_TENSOR_MAP_SWIZZLE_128B``, ``CU_TENSOR_MAP_L2_PROMOTION_L2_256B``: the layout the
#: ``wgmma`` tiles read (:mod:`polyopt.codegen.cuda_wgmma`), and wide L2 fetches.
SWIZZLE_128B = 3
L2_PROMOTION_256B = 3
#: Bytes of a tensor map, and the alignment the driver writes it at.
MAP_BYTES = 128
MAP_ALIGN = 64
#: The largest row stride (bytes) and dimension a tensor map takes; strides are whole 16-byte
#: vectors.
MAX_STRIDE = 2**40
MAX_DIMENSION = 2**32
#: Maps the cache keeps.
MAX_MAPS = 256


@dataclass(frozen=True)
class MapSpec:
    """One operand as a tensor: element type, dimensions (inner first: the contiguous one),
    the bytes between consecutive indices of each dimension after the first, and the box one
    copy moves (inner first)."""

    dtype: str
    dims: tuple[int, ...]
    strides: tuple[int, ...]
    box: tuple[int, ...]

    def allowed(self) -> bool:
        """Whether the driver can encode this map (its limits on strides and sizes)."""
        return (len(self.strides) == len(self.dims) - 1 == len(self.box) - 1
                and all(s % 16 == 0 and 0 < s < MAX_STRIDE for s in self.strides)
                and all(0 < d <= MAX_DIMENSION for d in self.dims))


_MAPS: OrderedDict[tuple, object] = OrderedDict()


def tensor_map(cupy, address: int, spec: MapSpec):
    """The tensor map of the operand at device ``address`` laid out as ``spec``, as a CuPy
    array of :data:`MAP_BYTES` bytes (its ``data.ptr`` is what a kernel takes); from the cache
    where it was made before. RuntimeError where the driver refuses it."""
    key = (address, spec, cupy.cuda.Device().id)
    found = _MAPS.get(key)
    if found is not None:
        _MAPS.move_to_end(key)
        return found
    host = np.zeros(MAP_BYTES + MAP_ALIGN, np.uint8)
    start = (-host.ctypes.data) % MAP_ALIGN
    encoded = host[start:start + MAP_BYTES]
    rank = len(spec.dims)
    status = _encoder()(ctypes.c_void_p(encoded.ctypes.data), DATA_TYPES[spec.dtype], rank, ctypes.c_void_p(address),
                        (ctypes.c_uint64 * rank)(*spec.dims), (ctypes.c_uint64 * (rank - 1))(*spec.strides),
                        (ctypes.c_uint32 * rank)(*spec.box), (ctypes.c_uint32 * rank)(*(1,) * rank),
                        0, SWIZZLE_128B, L2_PROMOTION_256B, 0)
    if status != 0:
        raise RuntimeError(f"cuTensorMapEncodeTiled refused the tensor map {spec} (CUresult {status})")
    device = cupy.asarray(encoded)
    _MAPS[key] = device
    if len(_MAPS) > MAX_MAPS:
        _MAPS.popitem(last=False)
    return device


_ENCODE: list = []


def _encoder():
    """The driver's ``cuTensorMapEncodeTiled`` (libcuda, loaded once)."""
    if not _ENCODE:
        function = ctypes.CDLL("libcuda.so.1").cuTensorMapEncodeTiled
        function.restype = ctypes.c_int
        _ENCODE.append(function)
    return _ENCODE[0]


def address_of(value) -> int:
    """The device address of a launch argument: a CuPy array's data, or an address already."""
    data = getattr(value, "data", None)
    return int(data.ptr) if data is not None and hasattr(data, "ptr") else int(value)


@dataclass(frozen=True)
class TmaLaunch:
    """A TMA kernel's launch as a recorded launch function: ``function(grid, block, args)``
    with the tensor maps of the operands at ``positions`` of ``args`` (``specs``: their
    layouts, fixed by the sizes and strides of the recorded call) appended to ``args``."""

    cupy: object
    function: object
    positions: tuple[int, int]
    specs: tuple[MapSpec, MapSpec]

    def __call__(self, grid, block, args) -> None:
        function, bound = self.bound(args)
        function(grid, block, bound)

    def bound(self, args) -> tuple[object, tuple]:
        """The plain launch function and ``args`` with this call's tensor maps appended."""
        maps = tuple(tensor_map(self.cupy, address_of(args[p]), spec) for p, spec in zip(self.positions, self.specs))
        return self.function, (*args, *maps)


__all__ = ["DATA_TYPES", "MapSpec", "TmaLaunch", "address_of", "tensor_map"]
