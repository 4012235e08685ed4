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

TMA moves boxes; it does not transpose 4-byte elements, and TF32 ``wgmma`` reads K-major tiles
only. A TF32 operand whose M/N run is contiguous is therefore copied K-major
(:data:`K_MAJOR_COPY`, a tiled transpose on the same stream) before each launch, and its map
reads the copy (``MapSpec.copied_from``; :class:`CopyingLaunch` holds the copy's memory).
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
    #: For an operand whose M/N run is contiguous that the kernel reads K-major (TF32: TMA does
    #: not transpose 4-byte elements, and ``wgmma`` reads TF32 tiles K-major only): its K stride
    #: and batch stride in elements. The map then reads a K-major copy (dims (K, rows, batch))
    #: that each launch makes first (:func:`k_major_copy_into`); None: the map reads the operand.
    copied_from: tuple[int, int] | None = None

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


#: A tiled transpose of 4-byte elements: ``src`` holds ``z`` matrices of ``rows`` x ``k``
#: elements with the rows contiguous (element (r, kk) at ``kk * k_stride + r``, matrix ``b`` at
#: ``b * outer``); ``dst`` gets them K-major, each row ``row`` elements apart. 64 x 64 tiles
#: through shared memory (padded against bank conflicts), so both sides are read and written
#: in whole 128-byte lines; each of the 256 threads keeps its 16 loads of a tile in flight at
#: once (a whole tile without bound tests), which the copy's bandwidth needs.
K_MAJOR_COPY = r"""
extern "C" __global__ void __launch_bounds__(256) polyopt_k_major_copy(const unsigned *src, unsigned *dst, long rows,
                                                                      long k, long z, long k_stride, long outer,
                                                                      long row) {
  __shared__ unsigned tile[64][65];
  const long r0 = (long)blockIdx.x * 64, k0 = (long)blockIdx.y * 64;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const bool whole = r0 + 64 <= rows && k0 + 64 <= k;
  for (long b = blockIdx.z; b < z; b += gridDim.z) {
    const unsigned *const s = src + b * outer + k0 * k_stride + r0;
    unsigned *const d = dst + (b * rows + r0) * row + k0;
    if (whole) {
      #pragma unroll
      for (int q = 0; q < 16; q++) tile[ty + 8 * (q / 2)][tx + 32 * (q % 2)] = s[(ty + 8 * (q / 2)) * k_stride + tx + 32 * (q % 2)];
    } else {
      #pragma unroll
      for (int q = 0; q < 16; q++) {
        const int j = ty + 8 * (q / 2), c = tx + 32 * (q % 2);
        if (k0 + j < k && r0 + c < rows) tile[j][c] = s[j * k_stride + c];
      }
    }
    __syncthreads();
    if (whole) {
      #pragma unroll
      for (int q = 0; q < 16; q++) d[(ty + 8 * (q / 2)) * row + tx + 32 * (q % 2)] = tile[tx + 32 * (q % 2)][ty + 8 * (q / 2)];
    } else {
      #pragma unroll
      for (int q = 0; q < 16; q++) {
        const int j = ty + 8 * (q / 2), c = tx + 32 * (q % 2);
        if (r0 + j < rows && k0 + c < k) d[j * row + c] = tile[c][j];
      }
    }
    __syncthreads();
  }
}
"""
_COPY_KERNEL: list = []


def k_major_copy_into(cupy, address: int, copy, spec: MapSpec) -> None:
    """Copy the operand at device ``address`` K-major into ``copy`` (a CuPy array of the
    layout ``spec`` reads, ``spec.copied_from`` the operand's strides), on the current stream."""
    k, rows, z = spec.dims
    k_stride, outer = spec.copied_from
    if not _COPY_KERNEL:
        _COPY_KERNEL.append(cupy.RawKernel(K_MAJOR_COPY, "polyopt_k_major_copy"))
    grid = (-(-rows // 64), -(-k // 64), min(z, 65535))
    _COPY_KERNEL[0](grid, (32, 8, 1), (np.uint64(address), copy, *(np.int64(v) for v in (
        rows, k, z, k_stride, outer, spec.strides[0] // 4))))


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
        """The launch function for the arrays of ``args`` and ``args`` with their tensor maps
        appended: the plain function, or where an operand is read from a K-major copy a
        :class:`CopyingLaunch` that makes the copy (held with it) before each launch."""
        maps, copies = [], []
        for position, spec in zip(self.positions, self.specs):
            address = address_of(args[position])
            if spec.copied_from is not None:
                copy = self.cupy.empty(spec.dims[2] * spec.dims[1] * spec.strides[0] // 4, self.cupy.uint32)
                copies.append((address, copy, spec))
                address = copy.data.ptr
            maps.append(tensor_map(self.cupy, address, spec))
        function = CopyingLaunch(self.cupy, self.function, tuple(copies)) if copies else self.function
        return function, (*args, *maps)


@dataclass(frozen=True)
class CopyingLaunch:
    """A TMA kernel's launch that first copies operands K-major (:data:`K_MAJOR_COPY`):
    ``copies`` holds (operand address, the copy's array, its map's layout)."""

    cupy: object
    function: object
    copies: tuple

    def __call__(self, grid, block, args) -> None:
        for address, copy, spec in self.copies:
            k_major_copy_into(self.cupy, address, copy, spec)
        self.function(grid, block, args)


__all__ = ["DATA_TYPES", "CopyingLaunch", "K_MAJOR_COPY", "MapSpec", "TmaLaunch", "address_of", "k_major_copy_into",
           "tensor_map"]
