"""Repeated ``po.einsum`` calls: what a call like an earlier one needs, worked out once.

numpy.einsum parses, checks and dispatches in C in about a microsecond. po.einsum's full path
(parsing, numpy's checks and dtype rules, the kernel's argument binding) costs about 25 us of
Python, which is all that small einsums measure. A call whose subscripts, operands (numpy
arrays: shapes, dtypes, contiguity), ``out=`` and options equal an earlier call's gives the
same outcome, so the earlier call records it here under that key: the kernel's native function with its
size arguments and thread count (:class:`KernelCall`), or the view numpy returns
(:class:`ViewCall`). The repeat fetches the array pointers and calls the native function.

Only calls that need no conversion are recorded: C-contiguous operands already of the kernel's
element type, ``out=`` (if given) C-contiguous, writeable and of that type, a real result; and
views of one operand, of any strides. Everything else, and a repeat whose ``out=`` overlaps an
operand, takes the full path.

CuPy operands (other GPU arrays arrive as CuPy views of theirs) count with their shape, dtype,
strides and device (:func:`polyopt.targets.cuda.array_signature`); a GPU call records the CUDA
kernel's launches (:class:`DeviceCall`), and its repeat allocates the result and launches them
with the new addresses. A call on contiguous PyTorch CUDA tensors that ran one such kernel
is also recorded under the tensors' own signature
(:func:`torch_call_key`, :class:`TorchCall`): its repeat makes no CuPy views, allocates the
result (and a contraction path's intermediate arrays) with ``Tensor.new_empty`` and launches on
the tensors' addresses, on torch's current stream; a float16 or bfloat16 call
then rounds the kernel's float32 sums with torch (``Tensor.to``: to nearest even, as the CuPy
path; a NaN becomes torch's quiet NaN).
"""
from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from polyopt.targets.cuda import LaunchRecord, array_signature, is_cupy
from polyopt.targets.torch_tensors import check_untracked, is_torch_cuda

#: Recorded calls kept at most (the oldest go first).
MAX_CALLS = 1024
_CALLS: dict[tuple, "KernelCall | ViewCall"] = {}


def call_key(operands: tuple, out, dtype, order: str, casting: str, optimize, target, num_threads
             ) -> tuple | None:
    """The key of a call of ``einsum(*operands, out=...)``; None for a call that is never
    recorded (interleaved sublists, operands that are neither numpy nor CuPy arrays, an
    ``out=`` that is not a C-contiguous writeable one). Each numpy operand counts with its
    shape, dtype and whether it is C-contiguous: only views (:class:`ViewCall`) are recorded for
    operands that are not; each CuPy operand with its :func:`array_signature`. A key with an
    unhashable option is neither looked up nor recorded."""
    if not operands or type(operands[0]) is not str:
        return None
    signature = []
    for op in operands[1:]:
        if type(op) is np.ndarray:
            signature.append((op.shape, op.dtype, op.flags.c_contiguous))
        elif is_cupy(op):
            signature.append(("cupy", array_signature(op)))
        else:
            return None
    if out is None:
        out_signature = None
    elif type(out) is np.ndarray and out.flags.c_contiguous and out.flags.writeable:
        out_signature = (out.shape, out.dtype)
    elif is_cupy(out) and out.flags.c_contiguous:
        out_signature = ("cupy", array_signature(out))
    else:
        return None
    return (operands[0], tuple(signature), out_signature, dtype, order, casting, optimize, target, num_threads)


def recorded(key: tuple | None) -> "KernelCall | ViewCall | None":
    if key is None:
        return None
    try:
        return _CALLS.get(key)
    except TypeError:  # an unhashable option (an explicit path given as a list, say)
        return None


def record(key: tuple | None, call: "KernelCall | ViewCall") -> None:
    if key is None:
        return
    try:
        hash(key)
    except TypeError:
        return
    if len(_CALLS) >= MAX_CALLS:
        del _CALLS[next(iter(_CALLS))]
    _CALLS[key] = call


def clear() -> None:
    """Forget every recorded call."""
    _CALLS.clear()


def _interface_address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def _address_reader() -> Callable[[np.ndarray], int]:
    """How to read an ndarray's data pointer, 0.15 us where it is safe, else 1.1 us (most of what
    a repeated small call costs).

    Why the fast read is safe: numpy's C API declares an array object as ``PyArrayObject_fields``,
    whose first field after the object header (``PyObject_HEAD``, ``object.__basicsize__`` bytes
    on CPython, free-threaded builds included) is ``char *data``; numpy 1.x and 2.x keep that
    layout. The read applies only to objects whose type *is* ``numpy.ndarray`` (a subclass may
    be laid out or behave otherwise -- it takes ``__array_interface__``), only on CPython, and
    only after the read agrees with ``__array_interface__`` on probe arrays (a view, an offset
    view, an empty and a read-only array) -- an interpreter or numpy that lays arrays out
    otherwise gets the slow read. The caller holds a reference to each array it reads for as
    long as the pointer is used.
    """
    if sys.implementation.name != "cpython":
        return _interface_address
    read, header = ctypes.c_void_p.from_address, object.__basicsize__
    base = np.arange(8.0)
    readonly = np.arange(3)
    readonly.flags.writeable = False
    probes = (base, base[1:], base[::2], np.empty(0), readonly, np.zeros((2, 3), np.float32).T)
    if not all(read(id(a) + header).value == _interface_address(a) for a in probes):
        return _interface_address
    ndarray = np.ndarray

    def fast(array: np.ndarray) -> int:
        if type(array) is not ndarray:
            return _interface_address(array)
        return read(id(array) + header).value
    return fast


_address = _address_reader()


@dataclass(frozen=True)
class KernelCall:
    """Run a compiled einsum kernel on operands like the recorded call's.

    ``order``: the kernel's array arguments in native order, as positions in [operands...,
    result, temporaries...]; ``temporaries``: their shapes; ``params``: the size arguments;
    ``shape``, ``strides``: the result's (strides None: C order; others lay out a contiguous
    array as numpy's ``order='K'`` does, which the kernel writes in memory order);
    ``threads``: the team size."""

    function: Callable
    params: tuple[int, ...]
    order: tuple[int, ...]
    temporaries: tuple[tuple[int, ...], ...]
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None
    dtype: np.dtype
    threads: int

    def __call__(self, operands: tuple, out: np.ndarray | None):
        """The result (``out`` when given); None where ``out`` overlaps an operand (the full
        path copies that operand first)."""
        addresses = [_address(op) for op in operands]
        if out is None:
            result = np.ndarray(self.shape, self.dtype, strides=self.strides)
            addresses.append(_address(result))
        else:
            result, start = out, _address(out)
            end = start + out.nbytes
            for op, first in zip(operands, addresses):
                if first < end and start < first + op.nbytes:
                    return None
            addresses.append(start)
        # the temporaries stay referenced (alive) until the native call has returned
        temporaries = [np.empty(shape, self.dtype) for shape in self.temporaries]
        addresses.extend(_address(t) for t in temporaries)
        self.function(*self.params, *[addresses[k] for k in self.order], self.threads)
        if out is None and result.ndim == 0:
            return result[()]
        return result


@dataclass(frozen=True)
class ViewCall:
    """numpy's view of a single operand whose labels all reach the output (a diagonal, a
    transposition, both): the operand's diagonals over the position pairs ``diagonals`` (each
    moves its axis last, as ``ndarray.diagonal`` does), then its axes in the order ``axes``.

    Built from numpy's own view operations, the result is what numpy.einsum returns for any
    strides: the same memory, ``base`` the memory's owner, writeable where the operand is
    (``diagonal`` alone returns a read-only view)."""

    diagonals: tuple[tuple[int, int], ...]
    axes: tuple[int, ...]

    @classmethod
    def of(cls, labels: Sequence[str], output: Sequence[str]) -> "ViewCall":
        """The view of an operand with ``labels`` as ``output`` (every label of one is in the
        other): each repeated label becomes one diagonal axis, then the axes are permuted."""
        labels, diagonals = list(labels), []
        for label in dict.fromkeys(labels):
            while labels.count(label) > 1:
                first = labels.index(label)
                second = labels.index(label, first + 1)
                diagonals.append((first, second))
                labels = [l for k, l in enumerate(labels) if k not in (first, second)] + [label]
        return cls(tuple(diagonals), tuple(labels.index(label) for label in output))

    def __call__(self, operands: tuple, out: None = None) -> np.ndarray:
        (operand,) = operands
        view = operand
        for first, second in self.diagonals:
            view = view.diagonal(0, first, second)
        view = view.transpose(self.axes)  # a new view even where nothing moves, as numpy's
        if self.diagonals and operand.flags.writeable:
            try:
                view.flags.writeable = True
            except ValueError:  # numpy refuses: the memory's owner was made read-only later
                pass  # numpy.einsum's view would still be writeable; this one stays read-only
        return view


@dataclass(frozen=True)
class DeviceCall:
    """Run a CUDA einsum kernel's recorded launches (``launch``) on CuPy operands like the
    recorded call's: ``operands``, ``output``: the kernel's argument names of the operands and
    the result; ``temporaries``: (name, shape, dtype) of the contraction path's intermediate
    arrays; ``shape``, ``dtype``: the result's (C order); ``empty``: ``cupy.empty``. The temporaries are
    allocated per call and stay referenced until every launch is queued; CuPy's memory pool
    reuses their memory only for work ordered after those launches on the stream. ``final``:
    for a half-precision result, what turns the kernel's float32 sums into it (``astype`` for
    float16, the rounding kernel of :func:`polyopt.types.bf16_bits` for bfloat16 bits) where the
    kernel did not store it rounded already; such a call is recorded without ``out`` and replays
    only without it."""

    launch: LaunchRecord
    empty: Callable
    operands: tuple[str, ...]
    output: str
    temporaries: tuple[tuple[str, tuple[int, ...], np.dtype], ...]
    shape: tuple[int, ...]
    dtype: np.dtype
    final: Callable | None = None

    def __call__(self, operands: tuple, out):
        """The result (``out`` when given); None where ``out`` overlaps an operand (the full
        path copies that operand first) or the result needs ``final`` and ``out`` is given."""
        if out is not None and (self.final is not None or any(_device_overlap(out, op) for op in operands)):
            return None
        named = dict(zip(self.operands, operands))
        named[self.output] = result = self.empty(self.shape, self.dtype) if out is None else out
        for name, shape, dtype in self.temporaries:
            named[name] = self.empty(shape, dtype)
        self.launch(named, fresh=self.output if out is None and not self.temporaries else None)
        return result if self.final is None else self.final(result)


def torch_call_key(operands: tuple, out, options: tuple) -> tuple | None:
    """The key of an einsum call on PyTorch CUDA tensors for :class:`TorchCall`: the subscripts,
    each operand's shape, dtype, strides, device and whether its address is 16-byte aligned
    (what a contraction kernel's choice depends on, as :func:`~polyopt.targets.cuda.
    array_signature` says for CuPy), and the call's options; None where an operand is not a
    contiguous PyTorch CUDA tensor, or ``out`` is given."""
    if out is not None or not operands or type(operands[0]) is not str or len(operands) < 2:
        return None
    signature = []
    for op in operands[1:]:
        if not is_torch_cuda(op) or not op.is_contiguous():
            return None
        signature.append((tuple(op.shape), op.dtype, op.stride(), op.get_device(), op.data_ptr() % 16 == 0))
    return ("torch", operands[0], tuple(signature)) + tuple(options)


@dataclass(frozen=True)
class TorchCall:
    """Run a recorded :class:`DeviceCall`'s launches on PyTorch CUDA tensors like the recorded
    call's: ``operands``, ``output``: the kernel's argument names; ``shape``, ``dtype``: the
    kernel's result's (a torch dtype); ``empty(tensor, shape, dtype)``: a new tensor on
    ``tensor``'s device (``Tensor.new_empty``); ``final``: for a
    half-precision call, the torch conversion of the kernel's float32 sums into the call's type
    (``Tensor.to``, rounding to nearest even as the recorded call's :attr:`DeviceCall.final`
    does), else None; ``temporaries``: (name, shape, torch dtype) of the contraction path's
    intermediate arrays, allocated per call as the result is and referenced until every launch
    is queued (on torch's current stream: torch's allocator reuses their memory only for work
    ordered after those launches). The result and the temporaries are allocated here, so they
    overlap no operand, and the launches take the tensors' addresses without the overlap check.
    ``stream``: the context of the launches for a tensor
    (:func:`~polyopt.targets.torch_tensors.on_torch_stream`: torch's current stream, where torch
    allocates the result too)."""

    launch: LaunchRecord
    operands: tuple[str, ...]
    output: str
    shape: tuple[int, ...]
    dtype: object
    empty: Callable
    stream: Callable
    final: Callable | None = None
    temporaries: tuple[tuple[str, tuple[int, ...], object], ...] = ()

    @staticmethod
    def of(call: "DeviceCall", dtype, empty: Callable, stream: Callable, final: Callable | None = None,
           temporary_dtype: Callable | None = None) -> "TorchCall | None":
        """The call on tensors of the CuPy-view call ``call`` (None where it has scalar
        arguments, a final conversion and no ``final`` in torch, or intermediate arrays of a
        dtype ``temporary_dtype`` (numpy dtype -> torch dtype or None) has no torch dtype for)."""
        if (call.final is not None) != (final is not None) or not call.launch.by_address():
            return None
        temporaries = tuple((name, shape, temporary_dtype and temporary_dtype(kind))
                            for name, shape, kind in call.temporaries)
        if any(kind is None for _, _, kind in temporaries):
            return None
        return TorchCall(call.launch, call.operands, call.output, call.shape, dtype, empty, stream, final, temporaries)

    def __call__(self, operands: tuple):
        check_untracked(operands, "einsum")
        first = operands[0]
        result = self.empty(first, self.shape, self.dtype)
        addresses = {name: op.data_ptr() for name, op in zip(self.operands, operands)}
        addresses[self.output] = result.data_ptr()
        held = [self.empty(first, shape, kind) for _, shape, kind in self.temporaries]
        for (name, _, _), temporary in zip(self.temporaries, held):
            addresses[name] = temporary.data_ptr()
        with self.stream(first):
            self.launch.at_addresses(addresses)
        return result if self.final is None else self.final(result)


def _device_overlap(a, b) -> bool:
    """Whether two CuPy arrays' memory ranges overlap."""
    start, other = a.data.ptr, b.data.ptr
    return bool(a.nbytes and b.nbytes) and start < other + b.nbytes and other < start + a.nbytes


__all__ = ["DeviceCall", "KernelCall", "MAX_CALLS", "TorchCall", "ViewCall", "call_key", "clear", "record",
           "recorded", "torch_call_key"]
