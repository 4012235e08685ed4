"""What polyopt needs of PyTorch tensors, without importing torch: whether a value is a CUDA
tensor (:func:`is_torch_cuda`), a CPU one (:func:`is_torch_cpu`) or a bfloat16 one
(:func:`is_torch_bfloat16`), the stream to launch on for one (:func:`on_torch_stream`), numpy
views of CPU tensors and tensors of numpy results (:func:`numpy_view`, :func:`tensor_of`), and
the refusal of tensors whose gradient torch tracks (:func:`check_untracked`: po.einsum's result
has no backward).

PyTorch orders the work on a tensor by its *current stream* (``torch.cuda.current_stream``),
which a program changes with ``with torch.cuda.stream(s):``; polyopt launches on CuPy's current
stream. The two are the same stream by default (the legacy default stream, address 0), but
under a torch stream a launch on CuPy's would race with the torch work that wrote the operands
(torch's streams do not wait for the legacy stream, nor it for them) and with later work on
the result, and torch's allocator would hand out the result's memory as free on the wrong
stream. So a call on torch tensors runs inside :func:`on_torch_stream`: torch's current stream
made CuPy's current one for the call (as CuPy's own ``with stream:`` does), nothing where they
are the same already; for a tensor on another GPU than CuPy's current device, its device first.
"""
from __future__ import annotations

import contextlib
import sys
from typing import Sequence

import numpy as np

from polyopt.errors import ArgumentTypeError
from polyopt.types import bf16

#: CuPy's wrappers of torch streams by (address, device), made once each (at most this many
#: kept; a wrapper holds only the address, so a stale one costs nothing).
MAX_WRAPPERS = 64
_WRAPPERS: dict[tuple[int, int], object] = {}
_SAME_STREAM = contextlib.nullcontext()


class _StreamHandle:
    """An object naming a stream by the CUDA stream protocol (``__cuda_stream__``: version 0
    and the stream's address), which ``cupy.cuda.Stream.from_external`` takes."""

    __slots__ = ("address",)

    def __init__(self, address: int):
        self.address = address

    def __cuda_stream__(self) -> tuple[int, int]:
        return 0, self.address


def _wrapper(cupy, address: int, device: int) -> contextlib.AbstractContextManager:
    """CuPy's stream object for the stream at ``address`` on ``device`` (not owned by CuPy):
    ``Stream.from_external`` where CuPy has it, else ``ExternalStream`` (older CuPy)."""
    from_external = getattr(cupy.cuda.Stream, "from_external", None)
    if from_external is not None:
        return from_external(_StreamHandle(address))
    return cupy.cuda.ExternalStream(address, device)


def _is_torch(value) -> bool:
    return type(value).__module__.split(".")[0] == "torch"


def is_torch_cuda(value) -> bool:
    """Whether ``value`` is a PyTorch tensor on a CUDA device."""
    return _is_torch(value) and getattr(value, "is_cuda", False)


def is_torch_cpu(value) -> bool:
    """Whether ``value`` is a PyTorch tensor in host memory."""
    return _is_torch(value) and getattr(getattr(value, "device", None), "type", None) == "cpu"


def numpy_view(tensor, where: str, written: bool = False) -> np.ndarray:
    """A numpy array on the memory of CPU tensor ``tensor`` (no copy but where its conjugate or
    negative bit is set), bfloat16 as ml_dtypes' type; an ArgumentTypeError naming ``where`` for
    a bfloat16 tensor where ml_dtypes is missing (its bits would be summed as integers), and for
    a ``written`` one (an ``out=``) with such a bit (the copy would take the result)."""
    torch = sys.modules["torch"]
    if written and (tensor.is_conj() or tensor.is_neg()):
        raise ArgumentTypeError(f"{where}: a tensor with its conjugate or negative bit set cannot be written "
                                "in place (call resolve_conj() / resolve_neg() first)")
    tensor = tensor.detach().resolve_conj().resolve_neg()
    if tensor.dtype != torch.bfloat16:
        return tensor.numpy()
    if bf16.numpy.kind == "u":
        raise ArgumentTypeError(f"{where}: a bfloat16 CPU tensor needs ml_dtypes for numpy's bfloat16 "
                                "(pip install polyopt[bf16])")
    return tensor.view(torch.int16).numpy().view(bf16.numpy)


def tensor_of(array) -> object:
    """A PyTorch tensor on the memory of numpy ``array`` (a 0-d one for a scalar; a copy of a
    read-only view, which torch does not take), bfloat16 for ml_dtypes' type."""
    torch = sys.modules["torch"]
    array = np.asarray(array)
    if not array.flags.writeable:
        array = array.copy()
    if array.dtype == bf16.numpy and bf16.numpy.kind != "u":
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def is_torch_bfloat16(value) -> bool:
    """Whether ``value`` is a PyTorch tensor of bfloat16."""
    return _is_torch(value) and str(getattr(value, "dtype", "")) == "torch.bfloat16"


def check_untracked(operands, where: str, names: Sequence[str] | None = None) -> None:
    """:class:`~polyopt.errors.ArgumentTypeError` where an operand is a PyTorch tensor that
    requires grad while torch records gradients: polyopt's result has no backward, so the
    gradient through it would silently be missing from a training step. The error names the
    operand as ``names`` does (default "operand <position>")."""
    for position, value in enumerate(operands):
        if getattr(value, "requires_grad", False) and _is_torch(value) and sys.modules["torch"].is_grad_enabled():
            name = names[position] if names is not None else f"operand {position}"
            raise ArgumentTypeError(
                f"{where}: {name} is a PyTorch tensor that requires grad, and polyopt records no "
                "backward; call it under torch.no_grad() or on .detach()ed tensors (torch.einsum for training)")


def on_torch_stream(cupy, value) -> contextlib.AbstractContextManager:
    """A context manager in which CuPy's current stream is PyTorch's current stream on the device
    of ``value`` where that is a PyTorch CUDA tensor (torch is imported already then: ``value``
    is one of its tensors), that device made CuPy's current one first where it is another (a
    tensor on ``cuda:1``: the launches, allocations and stream belong to its device); for other
    values, and where the two streams are one, it changes nothing."""
    if not is_torch_cuda(value):
        return _SAME_STREAM
    device = value.get_device()
    if device != cupy.cuda.runtime.getDevice():
        return _on_device(cupy, device)
    return _torch_stream(cupy, device)


@contextlib.contextmanager
def _on_device(cupy, device: int):
    """CuPy's current device ``device``, and in it torch's current stream there."""
    with cupy.cuda.Device(device), _torch_stream(cupy, device) as stream:
        yield stream


def _torch_stream(cupy, device: int) -> contextlib.AbstractContextManager:
    """CuPy's wrapper of torch's current stream on ``device`` (CuPy's current device), nothing
    where CuPy's current stream is that one already."""
    address = _current_stream_address(sys.modules["torch"], device)
    if address == cupy.cuda.get_current_stream().ptr:
        return _SAME_STREAM
    key = (address, device)
    stream = _WRAPPERS.get(key)
    if stream is None:
        if len(_WRAPPERS) >= MAX_WRAPPERS:
            _WRAPPERS.clear()
        stream = _WRAPPERS[key] = _wrapper(cupy, address, device)
    return stream


def _current_stream_address(torch, device: int) -> int:
    """The address of torch's current stream on ``device``: from ``_cuda_getCurrentRawStream``
    where torch has it -- the call Triton and torch's compiler launch with, which makes no
    ``torch.cuda.Stream`` object (that costs more than the rest of a repeated call's lookup)
    -- else from the public ``torch.cuda.current_stream``."""
    raw = getattr(getattr(torch, "_C", None), "_cuda_getCurrentRawStream", None)
    return raw(device) if raw is not None else torch.cuda.current_stream(device).cuda_stream


__all__ = ["MAX_WRAPPERS", "check_untracked", "is_torch_bfloat16", "is_torch_cpu", "is_torch_cuda", "numpy_view",
           "on_torch_stream", "tensor_of"]
