"""Recorded kernel launches made straight through the CUDA driver (issue 17: the host time of a
repeated call).

A repeated ``po.einsum`` call replays the launches its first call recorded
(:class:`~polyopt.targets.cuda.LaunchRecord`): the same kernels, grids and size arguments, on
the new call's arrays. Through CuPy, each replay converts every argument again -- a contraction
kernel takes some twenty, most of them the launch layout's ``long`` values, fixed by the sizes
-- and that conversion was the largest single cost of a repeated call's host time
(docs/performance.md, "Contractions"). A :class:`PackedLaunch` packs the recorded values once,
into one buffer of 8-byte slots, and at each replay writes only the arrays' addresses into
their slots and calls the driver's ``cuLaunchKernel`` (``cupy.cuda.driver.launchKernel``) with
the buffer's slot addresses.

Only launches whose every argument is 8 bytes -- device addresses, ``long`` sizes and layout
values -- are packed (:func:`packable`); others (scalars, the TMA kernels' tensor maps,
cooperative launches) go through CuPy as before. The buffer belongs to the record: a lock
keeps two threads from writing it while the driver reads it (``cuLaunchKernel`` copies the
values before it returns), and the record holds the CuPy kernel, so the module whose function
it launches stays loaded. A replay on another device than the recording one goes through CuPy
(the function is the recording device's).
"""
from __future__ import annotations

import ctypes
import threading
from typing import Sequence

import numpy as np

#: Bytes of every packed argument.
SLOT_BYTES = 8


def packable(values: Sequence, arrays: Sequence[int]) -> bool:
    """Whether a launch with argument ``values`` (``arrays``: the positions holding arrays,
    whose addresses change per call) can be packed: every other value an 8-byte numpy integer."""
    fixed = set(range(len(values))) - set(arrays)
    return all(isinstance(values[p], (np.int64, np.uint64)) for p in fixed)


class PackedLaunch:
    """One recorded launch of CuPy kernel ``kernel`` (a ``RawKernel``: its ``kernel.ptr`` is
    the driver's function on the current device) with grid, block and dynamic shared memory as
    recorded, its argument values ``values`` packed once (:func:`packable`); called with the
    device addresses of the arrays at positions ``arrays`` of ``values``, in that order."""

    def __init__(self, cupy, kernel, grid: tuple, block: tuple, shared_mem: int, values: Sequence,
                 arrays: Sequence[int]):
        if not packable(values, arrays):
            raise ValueError("a packed launch takes 8-byte integer arguments and arrays only")
        self.cupy, self.kernel = cupy, kernel
        self.device = cupy.cuda.runtime.getDevice()
        self.function = int(kernel.kernel.ptr)
        self.grid = tuple(int(g) for g in grid) + (1,) * (3 - len(grid))
        self.block = tuple(int(b) for b in block) + (1,) * (3 - len(block))
        self.shared_mem = int(shared_mem)
        self.arrays = tuple(arrays)
        self.slots = (ctypes.c_uint64 * len(values))(*(0 if p in self.arrays else int(v) & (2**64 - 1)
                                                       for p, v in enumerate(values)))
        start = ctypes.addressof(self.slots)
        self.pointers = (ctypes.c_void_p * len(values))(*(start + SLOT_BYTES * p for p in range(len(values))))
        self.lock = threading.Lock()

    def here(self) -> bool:
        """Whether the current device is the recording one (where the function is loaded)."""
        return self.cupy.cuda.runtime.getDevice() == self.device

    def __call__(self, addresses: Sequence[int]) -> None:
        """Launch on the current stream with these array addresses (on the recording device:
        :meth:`here`)."""
        stream = self.cupy.cuda.get_current_stream().ptr
        with self.lock:
            for position, address in zip(self.arrays, addresses):
                self.slots[position] = address
            self.cupy.cuda.driver.launchKernel(self.function, *self.grid, *self.block, self.shared_mem, stream,
                                               ctypes.addressof(self.pointers), 0)


__all__ = ["PackedLaunch", "SLOT_BYTES", "packable"]
