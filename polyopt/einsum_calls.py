"""Repeated ``po.einsum`` calls: what a call like an earlier one needs, worked out once.

numpy.einsum parses, checks and dispatches in C in about a microsecond. po.einsum's full path
(parsing, numpy's checks and dtype rules, the kernel's argument binding) costs about 25 us of
Python, which is all that small einsums measure. A call whose subscripts, operands (C-contiguous
numpy arrays: shapes and dtypes), ``out=`` and options equal an earlier call's gives the same
outcome, so the earlier call records it here under that key: the kernel's native function with its
size arguments and thread count (:class:`KernelCall`), or the view numpy returns
(:class:`ViewCall`). The repeat fetches the array pointers and calls the native function.

Only calls that need no conversion are recorded: operands already of the kernel's element type,
``out=`` (if given) C-contiguous, writeable and of that type, a real result. Everything else, and
a repeat whose ``out=`` overlaps an operand, takes the full path.
"""
from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass
from typing import Callable

import numpy as np

#: Recorded calls kept at most (the oldest go first).
MAX_CALLS = 1024
_CALLS: dict[tuple, "KernelCall | ViewCall"] = {}


def call_key(operands: tuple, out, dtype, order: str, casting: str, optimize, target, num_threads
             ) -> tuple | None:
    """The key of a call of ``einsum(*operands, out=..., ...)``; None for a call that is never
    recorded (interleaved sublists, operands that are not C-contiguous numpy arrays). A key
    with an unhashable option is neither looked up nor recorded."""
    if not operands or type(operands[0]) is not str:
        return None
    signature = []
    for op in operands[1:]:
        if type(op) is not np.ndarray or not op.flags.c_contiguous:
            return None
        signature.append((op.shape, op.dtype))
    if out is None:
        out_signature = None
    elif type(out) is np.ndarray and out.flags.c_contiguous and out.flags.writeable:
        out_signature = (out.shape, out.dtype)
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


def _address_reader() -> Callable[[np.ndarray], int]:
    """How to read an ndarray's data pointer: from the array object itself where the interpreter
    lays it out as numpy's C API does (CPython: the pointer right after the object header;
    checked here on two probe arrays), 0.15 us; else through ``__array_interface__``, 1.1 us --
    most of what a repeated small call costs."""
    probe = np.arange(4.0)
    if sys.implementation.name == "cpython":
        read, header = ctypes.c_void_p.from_address, object.__basicsize__
        if all(read(id(a) + header).value == a.__array_interface__["data"][0] for a in (probe, probe[1:])):
            return lambda array: read(id(array) + header).value
    return lambda array: array.__array_interface__["data"][0]


_address = _address_reader()


@dataclass(frozen=True)
class KernelCall:
    """Run a compiled einsum kernel on operands like the recorded call's.

    ``order``: the kernel's array arguments in native order, as positions in [operands...,
    result, temporaries...]; ``temporaries``: their shapes; ``params``: the size arguments;
    ``threads``: the team size."""

    function: Callable
    params: tuple[int, ...]
    order: tuple[int, ...]
    temporaries: tuple[tuple[int, ...], ...]
    shape: tuple[int, ...]
    dtype: np.dtype
    threads: int

    def __call__(self, operands: tuple, out: np.ndarray | None):
        """The result (``out`` when given); None where ``out`` overlaps an operand (the full
        path copies that operand first)."""
        addresses = [_address(op) for op in operands]
        if out is None:
            result = np.empty(self.shape, self.dtype)
            addresses.append(_address(result))
        else:
            result, start = out, _address(out)
            end = start + out.nbytes
            for op, first in zip(operands, addresses):
                if first < end and start < first + op.nbytes:
                    return None
            addresses.append(start)
        for shape in self.temporaries:
            addresses.append(_address(np.empty(shape, self.dtype)))
        self.function(*self.params, *[addresses[k] for k in self.order], self.threads)
        if out is None and result.ndim == 0:
            return result[()]
        return result


@dataclass(frozen=True)
class ViewCall:
    """numpy's view of a single C-contiguous operand (a diagonal or a transposition): the same
    memory with the recorded shape and strides, writeable where the operand is."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]

    def __call__(self, operands: tuple, out: None) -> np.ndarray:
        (op,) = operands
        return np.ndarray(self.shape, op.dtype, buffer=op, strides=self.strides)


__all__ = ["KernelCall", "MAX_CALLS", "ViewCall", "call_key", "clear", "record", "recorded"]
