"""Tensor maps of the TMA contraction kernels (:mod:`polyopt.targets.tensor_maps`) without a GPU:
the driver's encoder and CuPy stood in for, the maps made per operand address and layout,
cached, bounded, and appended to a recorded launch's arguments from the arrays of each call."""
import ctypes
import subprocess
from types import SimpleNamespace

import numpy as np
import pytest

from polyopt.targets import tensor_maps
from polyopt.targets.tensor_maps import MAX_MAPS, MapSpec, TmaLaunch, address_of, tensor_map

from conftest import needs_nvcc


class _FakeArray:
    def __init__(self, address: int):
        self.data = SimpleNamespace(ptr=address)


class _FakeCupy:
    """CuPy as tensor_map uses it: the current device's id, and a copy to the device."""

    def __init__(self):
        self.cuda = SimpleNamespace(Device=lambda: SimpleNamespace(id=0))
        self.copies = 0

    def asarray(self, host):
        self.copies += 1
        return SimpleNamespace(data=SimpleNamespace(ptr=10_000 + self.copies), host=host.copy())


@pytest.fixture
def encoder(monkeypatch):
    """The driver's encoder stood in for: it writes the address into the map's first 8 bytes."""
    calls = []

    def encode(out, dtype, rank, address, dims, strides, box, element_strides, interleave, swizzle, l2, fill):
        calls.append((dtype, rank, address.value, tuple(dims), tuple(strides), tuple(box), swizzle))
        ctypes.memmove(out.value, ctypes.byref(ctypes.c_uint64(address.value)), 8)
        return 0
    monkeypatch.setattr(tensor_maps, "_encoder", lambda: encode)
    monkeypatch.setattr(tensor_maps, "_MAPS", type(tensor_maps._MAPS)())
    return calls


SPEC = MapSpec("f16", (4096, 2048, 1), (8192, 2**24), (64, 128, 1))


def test_a_map_is_encoded_once_per_address_and_layout(encoder):
    cupy = _FakeCupy()
    first = tensor_map(cupy, 0x7000, SPEC)
    assert encoder == [(6, 3, 0x7000, (4096, 2048, 1), (8192, 2**24), (64, 128, 1), tensor_maps.SWIZZLE_128B)]
    assert int(np.frombuffer(first.host[:8].tobytes(), np.uint64)[0]) == 0x7000
    assert tensor_map(cupy, 0x7000, SPEC) is first and len(encoder) == 1
    assert tensor_map(cupy, 0x8000, SPEC) is not first  # another array: another map
    tensor_map(cupy, 0x7000, MapSpec("bf16", (4096, 2048, 1), (8192, 2**24), (64, 128, 1)))
    assert [call[0] for call in encoder] == [6, 6, 9]


def test_the_cache_is_bounded(encoder):
    cupy = _FakeCupy()
    for address in range(MAX_MAPS + 20):
        tensor_map(cupy, 16 * (address + 1), SPEC)
    assert len(tensor_maps._MAPS) == MAX_MAPS
    tensor_map(cupy, 16 * (MAX_MAPS + 20), SPEC)  # the newest stays
    assert len(encoder) == MAX_MAPS + 20


def test_a_refused_map_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(tensor_maps, "_encoder", lambda: lambda *args: 1)
    monkeypatch.setattr(tensor_maps, "_MAPS", type(tensor_maps._MAPS)())
    with pytest.raises(RuntimeError, match="cuTensorMapEncodeTiled refused"):
        tensor_map(_FakeCupy(), 0x7000, SPEC)


def test_the_driver_limits_are_checked_before_encoding():
    assert SPEC.allowed()
    assert not MapSpec("f16", (4096, 2048, 1), (8200, 2**24), (64, 128, 1)).allowed()  # rows off 16-byte vectors
    assert not MapSpec("f16", (4096, 2048, 1), (2**41, 2**42), (64, 128, 1)).allowed()
    assert not MapSpec("f16", (0, 2048, 1), (8192, 2**24), (64, 128, 1)).allowed()
    assert not MapSpec("f16", (4096, 2048, 4), (8192, 0), (64, 128, 1)).allowed()  # a broadcast batch


def test_a_recorded_tma_launch_maps_the_arrays_of_each_call(encoder):
    """A recorded launch replayed on other arrays (addresses, as a RepeatedCall holds them, or
    CuPy arrays) gets those arrays' maps after its arguments, not the recorded call's."""
    cupy, launched = _FakeCupy(), []
    right = MapSpec("f16", (2048, 4096, 1), (4096, 2**24), (64, 64, 1))
    launch = TmaLaunch(cupy, lambda grid, block, args: launched.append(args), (1, 2), (SPEC, right))
    launch((1,), (384,), (np.int64(5), _FakeArray(0x1000), _FakeArray(0x2000), np.int64(7)))
    launch((1,), (384,), (np.int64(5), np.uint64(0x3000), np.uint64(0x4000), np.int64(7)))
    first, second = launched
    assert first[:4][0] == 5 and len(first) == 6 and len(second) == 6
    assert [call[2] for call in encoder] == [0x1000, 0x2000, 0x3000, 0x4000]
    assert first[4] is tensor_map(cupy, 0x1000, SPEC) and second[5] is tensor_map(cupy, 0x4000, right)
    function, bound = launch.bound((np.int64(5), np.uint64(0x3000), np.uint64(0x4000), np.int64(7)))
    assert bound[4:] == second[4:] and function is launch.function  # what a RepeatedCall holds
    assert address_of(_FakeArray(12)) == 12 and address_of(np.uint64(13)) == 13


def test_an_operand_read_from_a_k_major_copy_is_copied_before_each_launch(encoder, monkeypatch):
    """A TF32 operand whose M/N run is contiguous: the map reads a K-major copy (rows padded to
    16-byte vectors) that the bound launch makes before each launch, the copy held with it."""
    events = []

    class CopyingCupy(_FakeCupy):
        uint32 = np.uint32

        def empty(self, size, dtype):
            events.append(("empty", size))
            return _FakeArray(0x9000 + 0x1000 * len(events))

        def RawKernel(self, code, name):
            assert "polyopt_k_major_copy" in code
            return lambda grid, block, args: events.append(("copy", grid, int(args[0]), args[1].data.ptr,
                                                            tuple(map(int, args[2:]))))

    monkeypatch.setattr(tensor_maps, "_COPY_KERNEL", [])
    # B of ij,jk: 72 x 204 (K x N, N contiguous), read as (K, N, 1) K-major with rows of 80 elements
    copied = MapSpec("f32", (72, 204, 1), (320, 204 * 320), (32, 256, 1), copied_from=(204, 72 * 204))
    assert copied.allowed()
    cupy = CopyingCupy()
    launch = TmaLaunch(cupy, lambda grid, block, args: events.append(("launch", args[3:])), (1, 2), (SPEC, copied))
    function, bound = launch.bound((np.int64(5), np.uint64(0x1000), np.uint64(0x2000)))
    assert events == [("empty", 204 * 80)] and isinstance(function, tensor_maps.CopyingLaunch)
    copy_address = function.copies[0][1].data.ptr
    assert [call[2] for call in encoder] == [0x1000, copy_address]  # the map reads the copy
    for _ in range(2):
        function((1,), (384,), bound)
    assert [e[0] for e in events] == ["empty", "copy", "launch", "copy", "launch"]
    assert events[1] == ("copy", (4, 2, 1), 0x2000, copy_address, (204, 72, 1, 204, 72 * 204, 80))  # 64 x 64 tiles
    assert events[2][1] == bound[3:]  # the maps: the left operand's, the copy's


@needs_nvcc
def test_nvcc_builds_the_k_major_copy(tmp_path):
    """The transpose a TF32 operand takes before a TMA launch (CuPy compiles it at run time on
    the GPU; here nvcc checks the source where there is none)."""
    (tmp_path / "copy.cu").write_text(tensor_maps.K_MAJOR_COPY)
    result = subprocess.run(["nvcc", "-arch=sm_90", "-c", "copy.cu"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
