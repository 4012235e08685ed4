"""GPU arrays of any library (issue #17 item 3) and the CUDA einsum benchmark (item 4).

Without a GPU: which objects count as GPU arrays (fakes of ``__cuda_array_interface__`` and
DLPack), the keys under which calls on them are recorded, the replay of recorded launches and
of recorded einsum calls on fake arrays, the benchmark's precision and table logic and its
one-line error. With CuPy and a GPU (skipped otherwise): CuPy, torch and bare
``__cuda_array_interface__`` operands written in place, the same kind returned, repeated calls
replayed and their host time under 20 us."""
import contextlib
import subprocess
import sys
import textwrap
import time
from types import SimpleNamespace

import numpy as np
import pytest

import polyopt as po
from polyopt import einsum_calls
from polyopt.bench import einsum_cuda
from polyopt.cli import main
from polyopt.errors import ArgumentError, ArgumentTypeError
from polyopt.targets import torch_tensors
from polyopt.targets.cuda import LaunchRecord, RepeatedCall, array_signature, as_cupy, is_device_array

from conftest import needs_gpu, needs_no_gpu


class Interface:
    """A GPU array as Numba or JAX export it: only ``__cuda_array_interface__``."""

    def __init__(self, shape=(4,), ptr=1 << 20):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": "<f4", "data": (ptr, False),
                                         "version": 3, "strides": None}


class DLPack:
    """A DLPack producer on the device ``device_type`` (2: CUDA, 1: CPU)."""

    def __init__(self, device_type):
        self.device_type = device_type

    def __dlpack__(self, stream=None):
        raise AssertionError("recognizing an array must not export it")

    def __dlpack_device__(self):
        if self.device_type is None:
            raise RuntimeError("no device")
        return (self.device_type, 0)


class _Flags:
    c_contiguous = True


class _Data:
    def __init__(self, ptr, device_id=0):
        self.ptr, self.device_id = ptr, device_id


class FakeCupy:
    """Enough of a CuPy array for keys, overlap checks and launches (no memory)."""

    def __init__(self, shape, dtype=np.float32, ptr=1 << 20, strides=None, device_id=0):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.size = int(np.prod(shape))
        self.nbytes = self.size * self.dtype.itemsize
        self.strides = strides or np.empty(shape, dtype).strides
        self.data, self.flags = _Data(ptr, device_id), _Flags()


FakeCupy.__module__ = "cupy._core.core"  # is_cupy looks at the type's module only


def test_gpu_array_protocols_are_recognized_without_importing_anything():
    assert is_device_array(Interface())
    assert is_device_array(FakeCupy((2, 2)))
    assert is_device_array(DLPack(2)) and is_device_array(DLPack(13))
    for host in (np.zeros(3), DLPack(1), DLPack(None), 1.5, 3, "ij->i", None, [1, 2]):
        assert not is_device_array(host), host


def test_cupy_arrays_are_used_as_they_are():
    array = FakeCupy((3,))
    assert as_cupy(array) is array
    assert array_signature(array) == ((3,), np.dtype(np.float32), (4,), 0, array.data.ptr % 16 == 0)
    # the contraction kernels' cp.async path depends on 16-byte alignment: part of the signature
    assert array_signature(FakeCupy((3,), ptr=4096))[-1] and not array_signature(FakeCupy((3,), ptr=4100))[-1]


@needs_no_gpu
def test_other_gpu_arrays_without_cupy_are_a_clear_error():
    with pytest.raises(po.TargetUnavailableError, match="needs CuPy"):
        as_cupy(Interface())
    with pytest.raises(po.TargetUnavailableError, match="needs CuPy"):
        po.einsum("i->i", Interface())


@pytest.fixture(scope="module")
def scale_kernel():
    @po.kernel
    def scale(alpha: po.f32, A: po.f32["N"], B: po.f32["N"]):
        for i in range(N):
            B[i] = alpha * A[i]
    return po.compile(scale, target="cuda")  # compiling needs no GPU


def test_call_key_is_the_arrays_signatures_and_the_other_values(scale_kernel):
    a, b = FakeCupy((8,), ptr=1 << 20), FakeCupy((8,), ptr=1 << 21)
    key = scale_kernel.call_key(scale_kernel.named((2.0, a, b), {}))
    # the same call by keyword, other addresses: the same key
    moved = dict(A=FakeCupy((8,), ptr=1 << 22), B=FakeCupy((8,), ptr=1 << 23), alpha=2.0)
    assert scale_kernel.call_key(scale_kernel.named((), moved)) == key
    others = [(3.0, a, b), (2, a, b), (2.0, FakeCupy((9,)), b), (2.0, FakeCupy((8,), np.float64), b),
              (2.0, FakeCupy((8,), strides=(8,)), b), (2.0, FakeCupy((8,), device_id=1), b)]
    for args in others:
        assert scale_kernel.call_key(scale_kernel.named(args, {})) != key, args
    # numpy arrays are copied in and out by the full path; unhashable or doubled values go there too
    assert scale_kernel.call_key(scale_kernel.named((2.0, np.zeros(8, np.float32), b), {})) is None
    assert scale_kernel.call_key(scale_kernel.named(([2.0], a, b), {})) is None
    assert scale_kernel.named((2.0, a, b), {"A": a}) is None
    assert scale_kernel.recorded(None) is None


def _recording_function(calls: list):
    def function(grid, block, args):
        calls.append((grid, block, args))
    return function


def _scale_record(calls: list) -> LaunchRecord:
    """The record of one launch of ``scale`` (N=8), noting its launches into ``calls``."""
    return LaunchRecord("scale", (("param", "N", np.int64(8)), ("scalar", "alpha", np.float32),
                                  ("array", "A", None), ("array", "B", None)),
                        frozenset({"B"}), ((_recording_function(calls), (1, 1, 1), (32, 1, 1), (np.int64(5),)),))


class FakeTensor:
    """Enough of a PyTorch CUDA tensor for the keys and replays of :class:`einsum_calls.TorchCall`."""

    is_cuda = True
    requires_grad = False

    def __init__(self, shape, ptr, dtype="torch.float32", contiguous=True):
        self.shape, self.ptr, self.dtype, self.contiguous = tuple(shape), ptr, dtype, contiguous
        self.device = type("Device", (), {"index": 0})()

    def get_device(self):
        return self.device.index

    def is_contiguous(self):
        return self.contiguous

    def stride(self):
        return tuple(int(np.prod(self.shape[k + 1:])) for k in range(len(self.shape)))

    def data_ptr(self):
        return self.ptr


FakeTensor.__module__ = "torch.fake"  # what einsum_calls takes for a PyTorch tensor


def test_torch_keys_and_a_torch_replay_on_addresses():
    """Calls on contiguous PyTorch CUDA tensors get a key of their own (shapes, dtypes, strides,
    device, 16-byte alignment, options); bfloat16, non-contiguous, ``out=`` and foreign arrays
    get none. A TorchCall allocates the result and launches on the addresses as uint64 values;
    kernels with scalar arguments or temporaries get no TorchCall, nor a call with a final
    conversion (half-precision results) without one in torch."""
    a, b = FakeTensor((4, 8), 1 << 20), FakeTensor((8,), 1 << 21)
    options = (None, "K", "safe", "greedy", None, None, "exact")
    key = einsum_calls.torch_call_key(("ij,j->i", a, b), None, options)
    assert key[:2] == ("torch", "ij,j->i") and key[-len(options):] == options
    assert key != einsum_calls.torch_call_key(("ij,j->i", a, FakeTensor((8,), (1 << 21) + 4)), None, options)
    halves = einsum_calls.torch_call_key(("ij,j->i", a, FakeTensor((8,), 1 << 21, dtype="torch.bfloat16")), None,
                                         options)
    assert halves is not None and halves != key  # bfloat16 tensors: a key of their own dtype
    for bad in (FakeTensor((8,), 64, contiguous=False), FakeCupy((8,), ptr=64)):
        assert einsum_calls.torch_call_key(("ij,j->i", a, bad), None, options) is None
    assert einsum_calls.torch_call_key(("ij,j->i", a, b), b, options) is None
    calls = []
    record = LaunchRecord("mv", (("param", "N", np.int64(4)), ("array", "op0", None), ("array", "op1", None),
                                 ("array", "out", None)),
                          frozenset({"out"}), ((_recording_function(calls), (1, 1, 1), (32, 1, 1), ()),))
    allocated, streams = [], []

    @contextlib.contextmanager
    def stream(tensor):  # (torch's current stream for the launches: on_torch_stream)
        streams.append(tensor)
        yield

    def empty(like, shape, dtype):  # (Tensor.new_empty: on the first operand's device)
        assert like is a
        allocated.append(FakeTensor(shape, (1 << 22) + 4096 * len(allocated), dtype))
        return allocated[-1]

    device_call = einsum_calls.DeviceCall(record, None, ("op0", "op1"), "out", (), (4,), np.dtype(np.float32))
    torch_call = einsum_calls.TorchCall.of(device_call, "torch.float32", empty, stream)
    assert torch_call((a, b)) is allocated[0] and allocated[0].shape == (4,)
    assert streams == [a]  # the launches in the first operand's stream context
    ((_, _, args),) = calls
    assert args[0] == 4 and all(type(v) is np.uint64 for v in args[1:])
    assert [int(v) for v in args[1:]] == [1 << 20, 1 << 21, 1 << 22]
    scale = einsum_calls.DeviceCall(_scale_record([]), None, ("A",), "B", (), (8,), np.dtype(np.float32))
    assert einsum_calls.TorchCall.of(scale, "torch.float32", empty, stream) is None
    with_temporary = einsum_calls.DeviceCall(record, None, ("op0", "op1"), "out",
                                             (("t0", (4,), np.dtype(np.float32)),), (4,),
                                             np.dtype(np.float32))
    assert einsum_calls.TorchCall.of(with_temporary, "torch.float32", empty, stream) is None  # no torch dtype
    torch_dtype = {np.dtype(np.float32): "torch.float32"}.get
    assert einsum_calls.TorchCall.of(with_temporary, "torch.float32", empty, stream,
                                     temporary_dtype=lambda kind: None) is None
    chain_calls = []
    chain = LaunchRecord("chain", (("array", "op0", None), ("array", "op1", None), ("array", "t0", None),
                                   ("array", "out", None)), frozenset({"t0", "out"}),
                         ((_recording_function(chain_calls), (1, 1, 1), (32, 1, 1), ()),))
    with_temporary = einsum_calls.DeviceCall(chain, None, ("op0", "op1"), "out", (("t0", (6, 2), np.dtype(np.float32)),),
                                             (4,), np.dtype(np.float32))
    chained = einsum_calls.TorchCall.of(with_temporary, "torch.float32", empty, stream, temporary_dtype=torch_dtype)
    assert chained.temporaries == (("t0", (6, 2), "torch.float32"),)
    result = chained((a, b))  # the result, then the intermediate array, made per call
    temporary = allocated[-1]
    assert result is allocated[-2] and temporary.shape == (6, 2) and temporary.dtype == "torch.float32"
    ((_, _, args),) = chain_calls
    assert [int(v) for v in args] == [1 << 20, 1 << 21, temporary.ptr, result.ptr] and temporary.ptr != result.ptr
    rounded = einsum_calls.DeviceCall(record, None, ("op0", "op1"), "out", (), (4,), np.dtype(np.float32),
                                      final=lambda value: value)
    assert einsum_calls.TorchCall.of(rounded, "torch.float32", empty, stream) is None  # no rounding in torch
    half_call = einsum_calls.TorchCall.of(rounded, "torch.float32", empty, stream, final=lambda t: ("rounded", t))
    assert half_call((a, b)) == ("rounded", allocated[-1]) and allocated[-1].dtype == "torch.float32"


def test_tensors_whose_gradient_torch_tracks_are_refused(monkeypatch):
    """po.einsum's result has no backward: an operand that requires grad while torch records
    gradients is a one-line ArgumentTypeError naming it, on the first call and on a recorded
    repeat (TorchCall) alike; under torch.no_grad() (or detached) the call goes on."""
    grad = {"enabled": True}
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(is_grad_enabled=lambda: grad["enabled"]))
    a, b = FakeTensor((4, 8), 1 << 20), FakeTensor((8,), 1 << 21)
    b.requires_grad = True
    with pytest.raises(ArgumentTypeError, match=r"einsum: operand 1 is a PyTorch tensor that requires grad.*no_grad"):
        po.einsum("ij,j->i", a, b)
    with pytest.raises(ArgumentTypeError, match="operand 1"):
        po.einsum(a, [0, 1], b, [1], [0])  # (the interleaved form: operands, not sublists, counted)
    record = LaunchRecord("mv", (("array", "op0", None), ("array", "op1", None), ("array", "out", None)),
                          frozenset({"out"}), ((_recording_function([]), (1, 1, 1), (32, 1, 1), ()),))
    call = einsum_calls.TorchCall(record, ("op0", "op1"), "out", (4,), "torch.float32",
                                  lambda like, shape, dtype: FakeTensor(shape, 1 << 22, dtype),
                                  lambda tensor: contextlib.nullcontext())
    with pytest.raises(ArgumentTypeError, match="operand 1"):
        call((a, b))
    grad["enabled"] = False
    assert call((a, b)).shape == (4,)
    torch_tensors.check_untracked((a, b, np.zeros(2)), "einsum")


def test_work_on_torch_tensors_goes_on_torchs_current_stream(monkeypatch):
    """:func:`on_torch_stream` changes nothing for other values, nor where torch's current
    stream is CuPy's already; otherwise it is CuPy's wrapper of torch's stream (through the
    CUDA stream protocol where CuPy has ``Stream.from_external``, else ``ExternalStream``),
    made once per stream and device."""
    current = {"torch": 0, "cupy": 0}
    torch = SimpleNamespace(cuda=SimpleNamespace(
        current_stream=lambda device: SimpleNamespace(cuda_stream=current["torch"])))
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setattr(torch_tensors, "_WRAPPERS", {})
    made = []

    def from_external(handle):
        made.append(handle.__cuda_stream__())
        return ("stream", handle.__cuda_stream__()[1])
    cuda = SimpleNamespace(Stream=SimpleNamespace(from_external=from_external),
                           get_current_stream=lambda: SimpleNamespace(ptr=current["cupy"]),
                           runtime=SimpleNamespace(getDevice=lambda: 0))
    cupy, tensor = SimpleNamespace(cuda=cuda), FakeTensor((4,), 64)
    unchanged = torch_tensors.on_torch_stream(cupy, np.zeros(3))
    assert torch_tensors.on_torch_stream(cupy, tensor) is unchanged  # the same stream: nothing to switch
    with unchanged:
        pass
    current["torch"] = 0x7000
    assert torch_tensors.on_torch_stream(cupy, tensor) == ("stream", 0x7000)
    assert torch_tensors.on_torch_stream(cupy, tensor) == ("stream", 0x7000) and made == [(0, 0x7000)]
    current["cupy"] = 0x7000  # (inside CuPy's with-block of that stream: nothing to switch)
    assert torch_tensors.on_torch_stream(cupy, tensor) is unchanged
    current["torch"] = 0x9000  # CuPy without Stream.from_external
    cuda.Stream, cuda.ExternalStream = SimpleNamespace(), lambda address, device: ("external", address, device)
    assert torch_tensors.on_torch_stream(cupy, tensor) == ("external", 0x9000, 0)
    torch._C = SimpleNamespace(_cuda_getCurrentRawStream=lambda device: 0xB000 + device)  # torch's raw read
    assert torch_tensors.on_torch_stream(cupy, tensor) == ("external", 0xB000, 0)


def test_work_on_a_tensor_of_another_gpu_goes_to_its_device(monkeypatch):
    """A tensor on ``cuda:1`` while CuPy's current device is 0: the call makes its device CuPy's
    current one (launches, allocations and the stream are that device's), then torch's current
    stream there -- also where that is the default stream, whose address 0 is CuPy's current
    stream on every device. Back on device 0 after the call."""
    entered = []
    state = {"device": 0}

    class Device:
        def __init__(self, index):
            self.index = index

        def __enter__(self):
            entered.append(self.index)
            self.previous, state["device"] = state["device"], self.index

        def __exit__(self, *exc):
            state["device"] = self.previous
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(
        _C=SimpleNamespace(_cuda_getCurrentRawStream=lambda device: 0x5000 * device)))
    monkeypatch.setattr(torch_tensors, "_WRAPPERS", {})
    cuda = SimpleNamespace(Device=Device, runtime=SimpleNamespace(getDevice=lambda: state["device"]),
                           get_current_stream=lambda: SimpleNamespace(ptr=0),
                           Stream=SimpleNamespace(from_external=lambda handle: contextlib.nullcontext(
                               ("stream", handle.__cuda_stream__()[1], state["device"]))))
    cupy, tensor = SimpleNamespace(cuda=cuda), FakeTensor((4,), 64)
    tensor.device.index = 1
    with torch_tensors.on_torch_stream(cupy, tensor) as stream:
        assert state["device"] == 1 and stream == ("stream", 0x5000, 1)  # torch's stream on device 1
    assert entered == [1] and state["device"] == 0
    tensor.device.index = 0  # the current device, its default stream: nothing to enter
    assert torch_tensors.on_torch_stream(cupy, tensor) is torch_tensors.on_torch_stream(cupy, np.zeros(1))


def test_a_launch_record_replays_with_the_new_arrays_and_scalars():
    calls = []
    record = _scale_record(calls)
    a, b = FakeCupy((8,), ptr=1 << 20), FakeCupy((8,), ptr=1 << 21)
    record({"alpha": 2.5, "A": a, "B": b, "N": 8})
    ((grid, block, args),) = calls
    assert (grid, block) == ((1, 1, 1), (32, 1, 1))
    assert args[0] == 8 and type(args[1]) is np.float32 and args[1] == 2.5
    assert args[2] is a and args[3] is b and args[4] == 5
    # a written array overlapping another is refused as the full path refuses it
    with pytest.raises(ArgumentError, match="overlap"):
        record({"alpha": 1.0, "A": a, "B": FakeCupy((8,), ptr=(1 << 20) + 4)})
    assert len(calls) == 1


def test_a_repeated_call_launches_again_only_for_the_same_arguments(monkeypatch):
    current = {"device": 0}
    monkeypatch.setitem(sys.modules, "cupy", SimpleNamespace(cuda=SimpleNamespace(
        runtime=SimpleNamespace(getDevice=lambda: current["device"]))))
    calls = []
    record = _scale_record(calls)
    a, b = FakeCupy((8,), ptr=1 << 20), FakeCupy((8,), ptr=1 << 21)
    alpha = 2.5
    repeat = RepeatedCall.of((alpha, a), {"B": b}, record, {"alpha": alpha, "A": a, "B": b, "N": 8})
    assert repeat.matches((alpha, a), {"B": b})
    repeat.launch()
    ((grid, block, args),) = calls
    assert args[0] == 8 and args[1] == np.float32(2.5) and args[4] == 5
    # arrays go as their addresses: the repeat keeps no array alive
    assert (args[2], args[3]) == (1 << 20, 1 << 21) and not any(isinstance(v, FakeCupy) for v in args)
    assert not repeat.matches((alpha, FakeCupy((8,), ptr=1 << 20)), {"B": b})  # another object
    assert not repeat.matches((3.5, a), {"B": b})  # another scalar
    assert not repeat.matches((alpha, a, b), {})  # positional instead of keyword
    current["device"] = 1  # another current device: its launches are device 0's
    assert not repeat.matches((alpha, a), {"B": b})
    current["device"] = 0
    a.shape, a.strides = (4,), (4,)  # reshaped in place
    assert not repeat.matches((alpha, a), {"B": b})
    a.shape, a.strides = (8,), (4,)
    a.data = _Data(1 << 22)  # another address
    assert not repeat.matches((alpha, a), {"B": b})
    # a mutable scalar (a 0-d array) or a numpy argument: no repeat form
    assert RepeatedCall.of((np.array(2.5), a), {"B": b}, record, {"alpha": 2.5, "A": a, "B": b}) is None


def test_einsum_call_keys_of_cupy_operands_hold_strides_and_device():
    a, b = FakeCupy((4, 5)), FakeCupy((5, 6), ptr=1 << 22)

    def key(*ops, out=None):
        return einsum_calls.call_key(("ij,jk->ik", *ops), out, None, "K", "safe", "greedy", None, None)

    assert key(a, b) == key(FakeCupy((4, 5), ptr=1 << 24), FakeCupy((5, 6), ptr=1 << 25))
    assert key(a, b) != key(FakeCupy((4, 5), strides=(4, 16)), b)
    assert key(a, b) != key(a, FakeCupy((5, 6), device_id=1))
    assert key(a, b) != key(np.zeros((4, 5), np.float32), np.zeros((5, 6), np.float32))
    assert key(a, b, out=FakeCupy((4, 6))) is not None and key(a, b, out=object()) is None


def test_a_recorded_device_call_allocates_result_and_temporaries_and_launches():
    seen, freshes = [], []

    def launch(named, fresh=None):
        seen.append(dict(named))
        freshes.append(fresh)

    def empty(shape, dtype):
        return FakeCupy(shape, dtype, ptr=1 << 30)

    call = einsum_calls.DeviceCall(launch, empty, ("op0", "op1"), "out", (("t0", (4, 5), np.dtype(np.float32)),),
                                   (4, 6), np.dtype(np.float32))
    a, b = FakeCupy((4, 5)), FakeCupy((5, 6), ptr=1 << 22)
    result = call((a, b), None)
    (named,) = seen
    assert named["op0"] is a and named["op1"] is b and named["out"] is result
    assert result.shape == (4, 6) and named["t0"].shape == (4, 5)
    out = FakeCupy((4, 6), ptr=1 << 26)
    assert call((a, b), out) is out and seen[-1]["out"] is out
    # an out= overlapping an operand takes the full path (which copies the operand first)
    assert call((a, b), FakeCupy((4, 6), ptr=(1 << 20) + 8)) is None and len(seen) == 2
    assert freshes == [None, None]  # with temporaries or out=, the launch checks the overlaps
    alone = einsum_calls.DeviceCall(launch, empty, ("op0", "op1"), "out", (), (4, 6), np.dtype(np.float32))
    alone((a, b), None)
    assert freshes[-1] == "out"  # the one written array was just allocated: no overlap check


def test_a_record_skips_the_overlap_check_only_for_a_fresh_output():
    record = LaunchRecord("k", (("array", "A", None), ("array", "C", None)), frozenset({"C"}), ())
    a = FakeCupy((4,))
    with pytest.raises(ArgumentError, match="overlap"):
        record.values({"A": a, "C": a})
    assert len(record.values({"A": a, "C": FakeCupy((4,), ptr=1 << 28)}, fresh="C")) == 2


# ----- the benchmark -------------------------------------------------------------------------

def test_the_bench_passes_precision_only_where_einsum_takes_it():
    def old(*operands, out=None):
        return None

    def new(*operands, out=None, precision="exact"):
        return None

    assert einsum_cuda.einsum_precisions(old) == ("exact",)
    assert einsum_cuda.precision_options("exact", old) == {}
    assert einsum_cuda.einsum_precisions(new) == ("exact", "tf32")
    assert einsum_cuda.precision_options("tf32", new) == {"precision": "tf32"}


def test_event_timing_and_host_time_helpers():
    clock = iter(range(100))
    runs = []
    times = einsum_cuda.event_times(lambda: next(clock), lambda start, stop: float(stop - start),
                                    lambda: runs.append(1), warmup=2, repeats=3)
    assert len(runs) == 5 and times == [1e-3] * 3
    synced = []
    assert einsum_cuda.host_microseconds(lambda: None, lambda: synced.append(1), 10) > 0
    assert len(synced) == 2


def _result(ms):
    return {"correct": True, "median_s": ms / 1e3, "min_s": ms / 1e3}


def test_the_table_has_dtype_precision_ratios_and_the_overhead_row():
    exact = {"subscripts": "ij,jk->ik", "shapes": [[8, 8], [8, 8]], "dtype": "f32", "precision": "exact",
             "correct": True,
             "runners": {"polyopt": {**_result(2.0), "speedup_vs_cupy.einsum": 1.5, "speedup_vs_torch.einsum": 0.5},
                         "cupy.einsum": _result(3.0), "torch.einsum": _result(1.0),
                         "torch.einsum tf32": _result(0.5), "cublas": _result(0.9)}}
    tf32 = {**exact, "precision": "tf32", "runners": {"polyopt": _result(1.0)}}
    half = {**exact, "dtype": "bf16", "runners": {"torch.einsum": _result(0.3)}}
    rows = [exact, tf32, half]
    report = {"kind": "einsum", "config": {"target": "cuda"}, "cases": rows, "summary": einsum_cuda.summary(rows),
              "launch_overhead": {"subscripts": "ij,jk->ik", "shapes": [[16, 16], [16, 16]], "calls": 10,
                                  "host_us": {"po.einsum (cupy)": 12.5, "cupy.einsum": 30.0}}}
    assert report["summary"]["fraction_of_torch"] == {"ij,jk->ik f32 exact": 0.5, "ij,jk->ik f32 tf32": 0.5,
                                                      "ij,jk->ik bf16 exact": None}
    header, lines = einsum_cuda.table(report)
    cells = [dict(zip(header, line)) for line in lines]
    assert [c["dtype"] + " " + c["precision"] for c in cells[:3]] == ["f32 exact", "f32 tf32", "bf16 exact"]
    assert cells[0]["polyopt ms"] == "2" and cells[0]["cuBLAS ms"] == "0.9"
    assert cells[0]["polyopt vs torch (same mode)"] == "0.50x" and cells[0]["polyopt vs cupy.einsum"] == "1.50x"
    assert cells[1]["torch TF32 ms"] == "0.5" and cells[1]["polyopt vs torch (same mode)"] == "0.50x"
    assert cells[2]["polyopt ms"] == "-" and cells[2]["torch.einsum ms (TF32 off)"] == "0.3"
    assert "launch overhead" in cells[3]["subscripts"] and cells[3]["polyopt ms"] == "12.5 us"
    assert any("12.5 us" in line for line in einsum_cuda.summary_lines(report))


class NumpyAsCupy:
    """numpy standing in for CuPy in a benchmark row (events from the host clock)."""

    float64 = np.float64
    asarray, einsum, max, abs = staticmethod(np.asarray), staticmethod(np.einsum), staticmethod(np.max), \
        staticmethod(np.abs)

    class cuda:
        class Event:
            def record(self):
                self.at = time.perf_counter()

            def synchronize(self):
                pass

        @staticmethod
        def get_elapsed_time(start, stop):
            return (stop.at - start.at) * 1e3


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_a_bench_row_checks_and_times_every_implementation(dtype):
    row = einsum_cuda.bench_row(NumpyAsCupy, None, "ij,jk->ik", ((6, 5), (5, 7)), dtype, "exact", scale=1.0,
                                warmup=1, repeats=3)
    assert (row["dtype"], row["precision"], row["shapes"]) == (dtype, "exact", [[6, 5], [5, 7]])
    assert set(row["runners"]) == {"polyopt", "cupy.einsum", "cublas"}  # no torch here
    assert row["correct"] and all(len(r["times_s"]) == 3 for r in row["runners"].values())
    assert row["runners"]["polyopt"]["max_rel_error"] < einsum_cuda.TOLERANCE[(dtype, "exact")]
    assert row["runners"]["polyopt"]["speedup_vs_cupy.einsum"] > 0


@needs_no_gpu
def test_bench_einsum_on_cuda_without_gpu_is_one_clear_line(capsys):
    assert main(["bench", "--einsum", "--target", "cuda"]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip() == ("polyopt bench: error: --target cuda: target 'cuda' needs CuPy "
                                    "(pip install polyopt[cuda]) and an NVIDIA GPU; CuPy is not installed")
    assert "Traceback" not in captured.err + captured.out


# ----- on a GPU -------------------------------------------------------------------------------

@pytest.fixture
def cp():
    import cupy
    return cupy


def _torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device")
    return torch


@needs_gpu
def test_kernel_on_cupy_arrays_in_place_and_replayed(cp, scale_kernel):
    a = cp.arange(8, dtype=cp.float32)
    b = cp.zeros(8, dtype=cp.float32)
    scale_kernel(2.0, a, b)
    cp.testing.assert_array_equal(b, 2 * a)
    key = scale_kernel.call_key(scale_kernel.named((2.0, a, b), {}))
    assert scale_kernel.recorded(key) is not None
    c, d = cp.arange(8, 16, dtype=cp.float32), cp.zeros(8, dtype=cp.float32)
    scale_kernel(2.0, c, d)  # replayed on other addresses
    cp.testing.assert_array_equal(d, 2 * c)
    e = cp.arange(12, dtype=cp.float32)  # other sizes: the full path, then a record of its own
    f = cp.zeros(12, dtype=cp.float32)
    scale_kernel(3.0, e, f)
    cp.testing.assert_array_equal(f, 3 * e)
    with pytest.raises(ArgumentError, match="overlap"):
        scale_kernel(2.0, a, a)
    for alpha in (4.0, 4.0, 4.0, 5.0):  # the same arguments again: the repeat path, until alpha changes
        scale_kernel(alpha, c, d)
        cp.testing.assert_array_equal(d, alpha * c)
    assert scale_kernel._last is not None


@needs_gpu
def test_repeated_calls_of_a_host_loop_replay_one_graph(cp):
    entry = po.suite.get("jacobi-2d")
    inputs = entry.inputs(entry.sizes("MINI"))
    expected = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in inputs.items()}
    device = {k: (cp.asarray(v) if isinstance(v, np.ndarray) else v) for k, v in inputs.items()}
    compiled = po.compile(entry.kernel, target="cuda", resident=False)  # sweeps: a host loop of launches
    for _ in range(4):  # the full path, the recorded launches, then the repeat as a graph
        compiled(**device)
        entry.reference(**expected)
    assert compiled._last is not None and compiled._last.graph is not None
    resident = po.compile(entry.kernel, target="cuda")  # the default: one cooperative launch, no graph
    for _ in range(3):
        resident(**device)
        entry.reference(**expected)
    assert resident._last is not None and resident._last.graph is None and len(resident._last.launches) == 1
    for key, value in expected.items():
        if isinstance(value, np.ndarray):
            np.testing.assert_allclose(cp.asnumpy(device[key]), value, rtol=1e-9, atol=1e-9)


@needs_gpu
def test_kernel_on_a_bare_cuda_array_interface_object(cp, scale_kernel):
    class Exported:
        def __init__(self, array):
            self.array = array
            self.__cuda_array_interface__ = array.__cuda_array_interface__

    a = cp.arange(8, dtype=cp.float32)
    b = cp.zeros(8, dtype=cp.float32)
    scale_kernel(0.5, Exported(a), Exported(b))
    cp.testing.assert_array_equal(b, a / 2)
    result = po.einsum("i,i->i", Exported(a), Exported(a))
    cp.testing.assert_array_equal(result, a * a)  # no way back to an unknown type: CuPy


@needs_gpu
def test_kernel_and_einsum_on_torch_tensors(scale_kernel):
    torch = _torch()
    a = torch.arange(8, dtype=torch.float32, device="cuda")
    b = torch.zeros(8, dtype=torch.float32, device="cuda")
    scale_kernel(2.0, a, b)
    torch.testing.assert_close(b, 2 * a)
    x = torch.randn(6, 5, device="cuda")
    y = torch.randn(5, 7, device="cuda")
    for _ in range(2):  # the full path, then the recorded one
        z = po.einsum("ij,jk->ik", x, y)
        assert isinstance(z, torch.Tensor) and z.device == x.device
        torch.testing.assert_close(z, x @ y, rtol=1e-5, atol=1e-5)
    out = torch.empty(6, 7, device="cuda")
    assert po.einsum("ij,jk->ik", x, y, out=out) is out
    torch.testing.assert_close(out, x @ y, rtol=1e-5, atol=1e-5)
    y.requires_grad_()  # po.einsum records no backward: refused while torch tracks gradients
    with pytest.raises(ArgumentTypeError, match="requires grad"):
        po.einsum("ij,jk->ik", x, y)
    with torch.no_grad():
        torch.testing.assert_close(po.einsum("ij,jk->ik", x, y), x @ y, rtol=1e-5, atol=1e-5)
        wide = torch.randn(7, 3, device="cuda", requires_grad=True)  # a first call: no recorded launch yet
        torch.testing.assert_close(po.einsum("ij,jk->ik", y, wide), y @ wide, rtol=1e-5, atol=1e-5)


@needs_gpu
def test_calls_on_torch_tensors_run_on_torchs_current_stream(scale_kernel):
    """Under ``torch.cuda.stream(s)`` (a stream that does not wait for the legacy default
    stream), a compiled kernel and po.einsum -- its first call and its recorded repeats, float32
    and bfloat16 -- on tensors that work on ``s`` writes after a long sleep read the written
    values: they run on ``s``, after that work, as torch's own operations would."""
    torch = _torch()
    if not hasattr(torch.cuda, "_sleep"):
        pytest.skip("this torch has no torch.cuda._sleep to hold a stream back")
    stream = torch.cuda.Stream()
    x, y = torch.randn(256, 128, device="cuda"), torch.randn(128, 64, device="cuda")
    for dtype in (torch.float32, torch.bfloat16):
        x, y = x.to(dtype), y.to(dtype)
        expected = torch.einsum("ij,jk->ik", x.double(), y.double())
        for _ in range(3):  # the full path, then the recorded one
            written = torch.zeros_like(x)
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                torch.cuda._sleep(20_000_000)  # (some milliseconds of GPU time before the write)
                written.copy_(x)
                result = po.einsum("ij,jk->ik", written, y)
            stream.synchronize()
            torch.testing.assert_close(result.double(), expected, rtol=2e-2, atol=2e-1)
    a, b = torch.arange(8, dtype=torch.float32, device="cuda"), torch.zeros(8, device="cuda")
    for scale in (2.0, 3.0):
        source = torch.zeros_like(a)
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            torch.cuda._sleep(20_000_000)
            source.copy_(a)
            scale_kernel(scale, source, b)
        stream.synchronize()
        torch.testing.assert_close(b, scale * a)


@needs_gpu
@pytest.mark.parametrize("subscripts, shapes", [("ij,jk->ik", [(6, 5), (5, 7)]),
                                                ("bhqd,bhkd->bhqk", [(2, 3, 40, 16), (2, 3, 24, 16)]),
                                                ("i,i->", [(300,), (300,)]),
                                                ("ij->ji", [(33, 17)]),
                                                ("ij,jk,kl->il", [(7, 9), (9, 5), (5, 3)])])  # a temporary
def test_repeated_einsum_on_torch_tensors_replays_on_their_addresses(subscripts, shapes):
    """Repeats of a call on contiguous PyTorch tensors launch the recorded kernel on the
    tensors' addresses (no CuPy views; a TorchCall, its intermediate arrays made by torch):
    fresh tensors with other values each time, and operands at an address that is not 16-byte
    aligned (another key: the contraction kernels copy aligned rows with cp.async), give
    torch.einsum's result."""
    torch = _torch()
    generator = torch.Generator(device="cuda").manual_seed(4)
    for round_ in range(4):
        ops = [torch.randn(shape, device="cuda", generator=generator) for shape in shapes]
        if round_ == 3:  # views one float past a fresh allocation: 4-byte aligned only
            ops = [torch.cat([torch.zeros(1, device="cuda"), op.flatten()])[1:].view(op.shape) for op in ops]
        result = po.einsum(subscripts, *ops)
        assert isinstance(result, torch.Tensor) and result.device == ops[0].device
        torch.testing.assert_close(result, torch.einsum(subscripts, *ops), rtol=1e-4, atol=1e-4)
    key = einsum_calls.torch_call_key((subscripts, *ops), None, (None, "K", "safe", "greedy", None, None, "exact"))
    recorded = einsum_calls.recorded(key)
    assert recorded is None or isinstance(recorded, einsum_calls.TorchCall)
    if len(shapes) >= 2 and subscripts != "i,i->":  # (a product of three: its intermediate array made by torch)
        assert isinstance(recorded, einsum_calls.TorchCall)


@needs_gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("subscripts, shapes", [("ij,jk->ik", [(64, 48), (48, 40)]),
                                                ("bhqd,bhkd->bhqk", [(2, 3, 40, 16), (2, 3, 24, 16)])])
def test_repeated_half_einsum_on_torch_tensors_rounds_in_torch(subscripts, shapes, dtype):
    """Repeats of a float16 or bfloat16 call on PyTorch tensors replay as a TorchCall (no CuPy
    views): the kernel's float32 sums rounded by torch to the call's type. Each result is the
    first call's (same rounding of the same sums) and within one rounding of torch's float64
    einsum of the same values; fresh tensors each round."""
    torch = _torch()
    kind = getattr(torch, dtype)
    generator = torch.Generator(device="cuda").manual_seed(5)
    tolerance = {"float16": 2e-3, "bfloat16": 1.6e-2}[dtype]
    for _ in range(3):
        ops = [torch.randn(shape, device="cuda", generator=generator).to(kind) for shape in shapes]
        first, again = po.einsum(subscripts, *ops), po.einsum(subscripts, *ops)
        assert first.dtype == again.dtype == kind and torch.equal(first, again)
        expected = torch.einsum(subscripts, *(op.double() for op in ops))
        torch.testing.assert_close(again.double(), expected, rtol=tolerance, atol=tolerance)
    key = einsum_calls.torch_call_key((subscripts, *ops), None, (None, "K", "safe", "greedy", None, None, "exact"))
    assert isinstance(einsum_calls.recorded(key), einsum_calls.TorchCall)


@needs_gpu
def test_torch_replays_on_freed_and_new_tensors_in_a_child_process():
    """Many repeats on PyTorch tensors freed and made again between calls (the caching
    allocator hands their memory to the next ones), several shapes in turn, each result checked
    against torch.einsum, in a child process: a launch on a stale address would crash it or give
    wrong values."""
    _torch()
    program = textwrap.dedent("""
        import gc
        import torch
        import polyopt as po
        generator = torch.Generator(device="cuda").manual_seed(6)
        for round_ in range(40):
            n = (64, 65, 64, 200)[round_ % 4]
            x = torch.randn(n, 48, device="cuda", generator=generator)
            y = torch.randn(48, n, device="cuda", generator=generator)
            z = po.einsum("ij,jk->ik", x, y)
            torch.testing.assert_close(z, x @ y, rtol=1e-4, atol=1e-4)
            del x, y, z
            if round_ % 7 == 0:
                gc.collect()
                torch.cuda.empty_cache()
        torch.cuda.synchronize()
        print("ok")
    """)
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]


@needs_gpu
def test_repeated_einsum_on_cupy_replays_and_keeps_numpy_semantics(cp):
    rng = np.random.default_rng(0)
    a, b = (cp.asarray(rng.standard_normal(s).astype(np.float32)) for s in ((5, 4), (4, 3)))
    first = po.einsum("ij,jk->ik", a, b)
    again = po.einsum("ij,jk->ik", a, b)
    assert again is not first and again.data.ptr != first.data.ptr
    cp.testing.assert_allclose(again, a @ b, rtol=1e-5, atol=1e-5)
    # three operands (a temporary), then the recorded path with other data of the same shapes
    c = cp.asarray(rng.standard_normal((3, 2)).astype(np.float32))
    for scale in (1, 2):
        got = po.einsum("ij,jk,kl->il", scale * a, b, c)
        cp.testing.assert_allclose(got, scale * a @ b @ c, rtol=1e-4, atol=1e-4)
    # out= overlapping an operand: the full path copies the operand first, as numpy does
    square = cp.asarray(rng.standard_normal((4, 4)).astype(np.float32))
    expected = square @ square
    for _ in range(2):
        s = square.copy()
        po.einsum("ij,jk->ik", s, s, out=s)
        cp.testing.assert_allclose(s, expected, rtol=1e-5, atol=1e-5)



@needs_gpu
def test_bench_einsum_cuda_rows_are_checked(cp):
    report = einsum_cuda.bench_einsum_cuda(scale=0.125, repeats=2, warmup=1)
    assert report["correct"], [r for r in report["cases"] if not r["correct"]]
    f32 = [r for r in report["cases"] if r["dtype"] == "f32" and r["precision"] == "exact"]
    assert len(f32) == len(einsum_cuda.CASES)
    assert all(r["runners"]["polyopt"]["median_s"] > 0 and "cupy.einsum" in r["runners"] for r in f32)
    assert report["launch_overhead"]["host_us"]["po.einsum (cupy)"] > 0
    header, rows = einsum_cuda.table(report)
    assert "precision" in header and len(rows) == len(report["cases"]) + 1


@needs_gpu
def test_bench_cuda_runs_kernels_with_expanded_scalars():
    """`polyopt bench --target cuda` on kernels whose scalars the CUDA target expands into
    temporary arrays (deriche, adi): the runner copies in the kernel's own arrays only (it raised
    KeyError on the temporaries), and every result is checked."""
    from polyopt.bench import BenchConfig, bench_kernels
    report = bench_kernels(["deriche", "adi", "gemm"], BenchConfig(size="MINI", repeats=1, target="cuda"),
                           command="test")
    assert report["correct"], [k for k in report["kernels"] if not k["correct"]]


@needs_gpu
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_tensors_and_arrays_on_a_second_gpu(scale_kernel, dtype):
    """On a machine of two GPUs or more: ``po.einsum`` and a compiled kernel called with torch
    tensors and CuPy arrays that live on GPU 1 while the current device is 0 compute there
    (first call and recorded repeat), return results on GPU 1, and leave the current device 0;
    arrays on two GPUs are an ArgumentError."""
    import cupy
    import torch

    if torch.cuda.device_count() < 2 or cupy.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs")
    einsum_calls.clear()
    generator = np.random.default_rng(7)
    a, b = (generator.standard_normal(shape).astype(dtype) for shape in ((3, 40, 24), (3, 24, 56)))
    expected = np.einsum("bij,bjk->bik", a.astype(np.float64), b.astype(np.float64))
    tensors = [torch.as_tensor(x, device="cuda:1") for x in (a, b)]
    with cupy.cuda.Device(1):
        arrays = [cupy.asarray(x) for x in (a, b)]
    for operands, device_of, to_numpy in ((tensors, lambda r: r.device.index, lambda r: r.cpu().numpy()),
                                          (arrays, lambda r: r.device.id, cupy.asnumpy)):
        for _ in range(2):
            cupy.cuda.runtime.setDevice(0)  # (making tensors on cuda:1 left torch's device current)
            result = po.einsum("bij,bjk->bik", *operands)
            assert device_of(result) == 1 and cupy.cuda.runtime.getDevice() == 0
            got = to_numpy(result).astype(np.float64)
            assert np.abs(got - expected).max() <= 3e-3 * np.abs(expected).max()
    with pytest.raises(ArgumentError, match="operand 1 is on GPU 0, operand 0 on GPU 1"):
        po.einsum("bij,bjk->bik", arrays[0], cupy.asarray(b))
    if dtype == "float32":
        source = torch.arange(8, dtype=torch.float32, device="cuda:1")
        target = torch.zeros(8, device="cuda:1")
        for _ in range(2):
            cupy.cuda.runtime.setDevice(0)
            scale_kernel(2.0, source, target)
        assert target.cpu().tolist() == [2.0 * i for i in range(8)] and cupy.cuda.runtime.getDevice() == 0
        with cupy.cuda.Device(1):
            source, target = cupy.arange(8, dtype=cupy.float32), cupy.zeros(8, cupy.float32)
        for _ in range(3):  # the full path, then the recorded one (not the last call's: another device)
            cupy.cuda.runtime.setDevice(0)
            scale_kernel(3.0, source, target)
            assert cupy.cuda.runtime.getDevice() == 0
        assert cupy.asnumpy(target).tolist() == [3.0 * i for i in range(8)]
        with pytest.raises(ArgumentError, match=r"scale\(\): B is on GPU 0, A on GPU 1"):
            scale_kernel(3.0, source, cupy.zeros(8, cupy.float32))


def test_cupy_operands_of_another_gpu_move_the_call_there(monkeypatch):
    """CuPy operands on GPU 1 while CuPy's current device is 0: ``po.einsum`` calls itself again
    inside that device (where the recorded launches and allocations are its own), as a compiled
    kernel's call does (``on_arrays_device``); arrays on two GPUs are an ArgumentError naming two
    of them."""
    from polyopt.targets import cuda as cuda_target

    einsum_module = sys.modules["polyopt.einsum"]  # (po.einsum is the function)
    entered = []
    cuda = SimpleNamespace(runtime=SimpleNamespace(getDevice=lambda: entered[-1] if entered else 0))

    @contextlib.contextmanager
    def device(index):
        entered.append(index)
        try:
            yield
        finally:
            entered.pop()
    cuda.Device = device
    monkeypatch.setitem(sys.modules, "cupy", SimpleNamespace(cuda=cuda))
    monkeypatch.setattr(einsum_module, "cupy_module", lambda: SimpleNamespace(cuda=cuda))
    a, b = FakeCupy((4, 4), device_id=1), FakeCupy((4, 4), device_id=1)
    assert cuda_target.other_device(("ij,jk->ik", a, b, None)) == 1
    assert cuda_target.other_device(("ij,jk->ik", np.zeros((4, 4)), np.zeros((4, 4)))) is None
    seen = []
    monkeypatch.setattr(einsum_module, "_call_key", lambda *args: seen.append(list(entered)) or None)
    monkeypatch.setattr(einsum_module, "_on_cupy_views", lambda *args, **kwargs: None)
    with pytest.raises(Exception):  # (the fakes hold no memory: the call stops past the key)
        po.einsum("ij,jk->ik", a, b)
    assert seen == [[1]] and entered == []
    monkeypatch.setattr(cuda_target, "cupy_module", lambda: SimpleNamespace(cuda=cuda))
    with cuda_target.on_arrays_device((2.0, a, b)):  # (where a compiled kernel's call on them runs)
        assert entered == [1]
    with cuda_target.on_arrays_device((2.0, FakeCupy((4, 4)))):
        assert entered == []
    assert entered == []
    with pytest.raises(ArgumentError, match="einsum: operand 1 is on GPU 0, operand 0 on GPU 1"):
        cuda_target.check_one_device([("operand 0", a), ("operand 1", FakeCupy((4, 4)))], "einsum")
    with pytest.raises(ArgumentError, match="out is on GPU 2"):
        cuda_target.check_one_device([("operand 0", a), ("out", FakeCupy((4, 4), device_id=2))], "einsum")
    cuda_target.check_one_device([("operand 0", a), ("operand 1", np.zeros(2)), ("out", None)], "einsum")
