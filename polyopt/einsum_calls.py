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


def _address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


@dataclass(frozen=True)
class KernelCall:
    """Run a compiled einsum kernel on operands like the recorded call's.

    ``arrays``: the kernel's array arguments in native order, each ("operand", k), ("temporary",
    shape) or ("out", None); ``params``: its size arguments; ``threads``: the team size."""

    function: Callable
    params: tuple[int, ...]
    arrays: tuple[tuple[str, object], ...]
    shape: tuple[int, ...]
    dtype: np.dtype
    threads: int

    def __call__(self, operands: tuple, out: np.ndarray | None):
        """The result (``out`` when given); None where ``out`` overlaps an operand (the full
        path copies that operand first)."""
        addresses = [_address(op) for op in operands]
        if out is None:
            result = np.empty(self.shape, self.dtype)
            result_address = _address(result)
        else:
            result, result_address = out, _address(out)
            end = result_address + out.nbytes
            for op, first in zip(operands, addresses):
                if first < end and result_address < first + op.nbytes:
                    return None
        pointers = []
        for kind, what in self.arrays:
            if kind == "operand":
                pointers.append(addresses[what])
            elif kind == "temporary":
                pointers.append(_address(np.empty(what, self.dtype)))
            else:
                pointers.append(result_address)
        self.function(*self.params, *pointers, self.threads)
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
