"""Recorded launches packed for the CUDA driver (:mod:`polyopt.targets.driver_launch`): what the
driver is handed, checked on a stand-in for CuPy (no GPU); on a GPU, repeated calls through
packed launches on fresh and freed arrays, in a child process (a launch on a stale address
would crash it or give wrong values)."""
import ctypes
import subprocess
import sys
import textwrap
import threading
from types import SimpleNamespace

import numpy as np
import pytest

from polyopt.targets.cuda import LaunchRecord
from polyopt.targets.driver_launch import PackedLaunch, packable

from conftest import needs_gpu


class StandInDriver:
    """A stand-in for CuPy's driver module: each launch's function, grid, block, shared memory,
    stream and the 8-byte values its parameter pointers point at, read back as the driver
    would (``count``: the parameters)."""

    def __init__(self, count: int):
        self.count, self.launched = count, []

    def launchKernel(self, function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        pointers = (ctypes.c_void_p * self.count).from_address(params)
        values = [ctypes.c_uint64.from_address(p).value for p in pointers]
        self.launched.append((function, (gx, gy, gz), (bx, by, bz), shared, stream, values, extra))


def _cupy(driver: StandInDriver, device: list):
    return SimpleNamespace(cuda=SimpleNamespace(driver=driver, runtime=SimpleNamespace(getDevice=lambda: device[0]),
                                                get_current_stream=lambda: SimpleNamespace(ptr=0x5000)))


def test_a_packed_launch_hands_the_driver_the_recorded_values_and_each_calls_addresses():
    values = (np.int64(96), np.uint64(0), np.uint64(0), np.int64(-3), np.int64(7))
    driver, device = StandInDriver(len(values)), [0]
    kernel = SimpleNamespace(kernel=SimpleNamespace(ptr=0x1234))
    packed = PackedLaunch(_cupy(driver, device), kernel, (4, 2), (128,), 4096, values, arrays=(1, 2))
    assert packed.here()
    packed((0xA000, 0xB000))
    packed((0xC000, 0xD000))
    first, second = driver.launched
    assert first == (0x1234, (4, 2, 1), (128, 1, 1), 4096, 0x5000, [96, 0xA000, 0xB000, 2**64 - 3, 7], 0)
    assert second[5] == [96, 0xC000, 0xD000, 2**64 - 3, 7]
    device[0] = 1  # the function is the recording device's: the caller launches through CuPy
    assert not packed.here()


def test_only_8_byte_integer_arguments_are_packed():
    assert packable((np.int64(1), 0.5, np.uint64(2)), arrays=(1,))  # (an array's slot holds anything)
    assert not packable((np.int64(1), np.float32(0.5)), arrays=())
    assert not packable((np.int64(1), 3), arrays=())  # a Python int: CuPy would pass 4 bytes
    with pytest.raises(ValueError, match="8-byte integer"):
        PackedLaunch(_cupy(StandInDriver(1), [0]), None, (1,), (1,), 0, (np.int32(1),), ())


def test_threads_launching_one_record_get_their_own_addresses():
    """The record's buffer is written and read under its lock: each launch the driver sees
    carries one caller's addresses, never a mix."""
    values = (np.uint64(0), np.uint64(0), np.int64(5))
    driver = StandInDriver(len(values))
    packed = PackedLaunch(_cupy(driver, [0]), SimpleNamespace(kernel=SimpleNamespace(ptr=1)), (1,), (32,), 0, values,
                          arrays=(0, 1))

    def calls(base: int) -> None:
        for k in range(300):
            packed((base + k, base + k))
    threads = [threading.Thread(target=calls, args=(base,)) for base in (1 << 20, 2 << 20, 3 << 20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(driver.launched) == 900
    assert all(v[0] == v[1] and v[2] == 5 for *_, v, _ in driver.launched)


def test_a_record_launches_its_packed_launches_and_the_others_through_cupy():
    values = (np.uint64(0), np.int64(8))
    driver, through_cupy = StandInDriver(3), []
    packed = PackedLaunch(_cupy(driver, [0]), SimpleNamespace(kernel=SimpleNamespace(ptr=9)), (2,), (64,), 0,
                          (*values, np.int64(11)), arrays=(0,))
    cupy_launch = lambda grid, block, args: through_cupy.append(args)  # noqa: E731
    address = SimpleNamespace(data=SimpleNamespace(ptr=0xF000))  # a CuPy array's address
    record = LaunchRecord("k", (("array", "A", None), ("param", "N", np.int64(8))), frozenset({"A"}),
                          ((cupy_launch, (2,), (64,), (np.int64(11),)), (cupy_launch, (1,), (32,), (np.int64(12),))),
                          (packed, None))
    record._launch([address, np.int64(8)])
    assert driver.launched[0][5] == [0xF000, 8, 11]
    assert through_cupy == [(address, np.int64(8), np.int64(12))]
    record.at_addresses({"A": 0xE000})  # (not every launch packed: the arguments made as for CuPy)
    assert driver.launched[1][5] == [0xE000, 8, 11] and through_cupy[1] == (np.uint64(0xE000), np.int64(8), 12)


def test_a_record_whose_launches_are_all_packed_takes_the_addresses_alone():
    """:meth:`LaunchRecord.at_addresses` (PyTorch tensors' repeats) hands each packed launch its
    arrays' addresses by name, in the launch's order; on another device than the recording one
    every launch goes through CuPy."""
    driver, device, through_cupy = StandInDriver(4), [0], []
    cupy = _cupy(driver, device)
    first = PackedLaunch(cupy, SimpleNamespace(kernel=SimpleNamespace(ptr=1)), (1,), (32,), 0,
                         (np.uint64(0), np.uint64(0), np.uint64(0), np.int64(5)), arrays=(0, 1, 2))
    second = PackedLaunch(cupy, SimpleNamespace(kernel=SimpleNamespace(ptr=2)), (1,), (32,), 0,
                          (np.uint64(0), np.uint64(0), np.uint64(0), np.int64(6)), arrays=(0, 2))
    cupy_launch = lambda grid, block, args: through_cupy.append(args)  # noqa: E731
    arguments = (("array", "A", None), ("array", "B", None), ("array", "C", None))
    record = LaunchRecord("k", arguments, frozenset({"C"}), ((cupy_launch, (1,), (32,), (np.int64(5),)),
                                                            (cupy_launch, (1,), (32,), (np.int64(6),))), (first, second))
    record.at_addresses({"A": 0x100, "B": 0x200, "C": 0x300})
    assert [launch[5] for launch in driver.launched] == [[0x100, 0x200, 0x300, 5], [0x100, 0, 0x300, 6]]
    assert not through_cupy
    device[0] = 1
    record.at_addresses({"A": 0x400, "B": 0x500, "C": 0x600})
    assert len(driver.launched) == 2 and [args[0] for args in through_cupy] == [0x400, 0x400]


def test_a_call_writing_only_a_fresh_array_takes_the_arrays_addresses_alone():
    """A record called on CuPy arrays whose only written array was just allocated (``fresh``:
    a repeated einsum's result) launches every packed launch with the arrays' addresses, making
    no argument list; a call that may write an operand's memory (no ``fresh``) goes through the
    argument list and its overlap check."""
    driver, through_cupy = StandInDriver(3), []
    cupy = _cupy(driver, [0])
    packed = PackedLaunch(cupy, SimpleNamespace(kernel=SimpleNamespace(ptr=1)), (1,), (32,), 0,
                          (np.uint64(0), np.uint64(0), np.int64(5)), arrays=(0, 1))
    cupy_launch = lambda grid, block, args: through_cupy.append(args)  # noqa: E731
    record = LaunchRecord("k", (("array", "A", None), ("array", "C", None)), frozenset({"C"}),
                          ((cupy_launch, (1,), (32,), (np.int64(5),)),), (packed,))
    array = lambda address: SimpleNamespace(data=SimpleNamespace(ptr=address), size=16, nbytes=64)  # noqa: E731
    record({"A": array(0x100), "C": array(0x200)}, fresh="C")
    record({"A": array(0x300), "C": array(0x400)})  # (no overlap: the check passes, the same launch)
    assert [launch[5] for launch in driver.launched] == [[0x100, 0x200, 5], [0x300, 0x400, 5]]
    assert record.values({"A": array(0x300), "C": array(0x400)})[0].data.ptr == 0x300 and not through_cupy


@needs_gpu
def test_packed_replays_on_fresh_and_freed_arrays_in_a_child_process():
    """Repeated einsum calls (one contraction kernel, and a three-operand product of two) on
    CuPy arrays (and PyTorch tensors, where torch is installed) made anew and freed between calls,
    several shapes in turn, through packed launches, each result checked against numpy."""
    program = textwrap.dedent("""
        import gc
        import cupy, numpy as np
        import polyopt as po
        from polyopt.targets import driver_launch
        try:
            import torch
        except ImportError:
            torch = None
        packed, launch = [0], driver_launch.PackedLaunch.__call__

        def counted(self, addresses):
            packed[0] += 1
            launch(self, addresses)
        driver_launch.PackedLaunch.__call__ = counted
        rng = np.random.default_rng(7)
        for round_ in range(40):
            n = (64, 65, 64, 200)[round_ % 4]
            a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((n, 48), (48, n), (n, 33)))
            x, y, z = cupy.asarray(a), cupy.asarray(b), cupy.asarray(c)
            np.testing.assert_allclose(po.einsum("ij,jk->ik", x, y).get(), a @ b, rtol=1e-4, atol=1e-4)
            np.testing.assert_allclose(po.einsum("ij,jk,kl->il", x, y, z).get(), a @ b @ c, rtol=1e-3, atol=1e-3)
            del x, y, z
            if torch is not None:  # PyTorch tensors' repeats: packed launches on the tensors' addresses
                s, t = torch.as_tensor(a, device="cuda"), torch.as_tensor(b, device="cuda")
                np.testing.assert_allclose(po.einsum("ij,jk->ik", s, t).cpu().numpy(), a @ b, rtol=1e-4, atol=1e-4)
                del s, t
            if round_ % 7 == 0:
                gc.collect()
                cupy.get_default_memory_pool().free_all_blocks()
        cupy.cuda.Device().synchronize()
        assert packed[0] > 30, packed  # (the first call of each shape records; the repeats replay)
        print("ok")
    """)
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]
