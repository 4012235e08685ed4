"""Call arguments of a compiled kernel, for every target: matching them to the kernel's signature,
inferring the size parameters from array shapes, checking element types, ranks, shapes,
contiguity, aliasing and integer ranges, and laying them out for the native call."""
from __future__ import annotations

import ctypes
import os
import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from polyopt.analysis.affine import extent_expr
from polyopt.analysis.evaluate import evaluate
from polyopt.analysis.scop import Scop
from polyopt.codegen.ast import abi_arguments
from polyopt.errors import ArgumentError, ArgumentRangeError, ArgumentTypeError
from polyopt.islutil import ISL_LOCK, param_point

_CTYPES = {"f32": ctypes.c_float, "f64": ctypes.c_double, "i8": ctypes.c_int8, "u8": ctypes.c_uint8,
           "i16": ctypes.c_int16, "u16": ctypes.c_uint16, "i32": ctypes.c_int32, "u32": ctypes.c_uint32,
           "i64": ctypes.c_int64, "u64": ctypes.c_uint64}


@dataclass
class BoundArguments:
    """Call arguments sorted by role, with the size parameters inferred from array shapes."""

    params: dict[str, int]
    scalars: dict[str, object]
    arrays: dict[str, np.ndarray]


def _extent(text: str, params: dict[str, int]) -> int:
    return int(evaluate(_extent_tree(text, tuple(params)), params, {}))


@lru_cache(maxsize=4096)
def _extent_tree(text: str, names: tuple[str, ...]):
    """The parsed extent (cached: every call of a kernel evaluates its array shapes)."""
    return extent_expr(text, names)


def _infer_params(scop: Scop, shapes: dict[str, tuple[int, ...]], given: dict[str, int]) -> dict[str, int]:
    """Solve ``extent(params) == shape`` for the parameters not given explicitly."""
    params = dict(given)
    progress = True
    while progress:
        progress = False
        for name, shape in shapes.items():
            for extent, size in zip(scop.arrays[name].shape, shape):
                unknown = [p for p in scop.params if p not in params and _mentions(extent, p)]
                if len(unknown) != 1:
                    continue
                p = unknown[0]
                at0 = _extent(extent, {**params, p: 0})
                slope = _extent(extent, {**params, p: 1}) - at0
                if slope != 0 and (size - at0) % slope == 0:
                    params[p] = (size - at0) // slope
                    progress = True
    missing = [p for p in scop.params if p not in params]
    if missing:
        raise ArgumentTypeError(f"{scop.name}: cannot infer size parameter(s) {', '.join(missing)} from the "
                                "array shapes; pass them as arguments")
    return params


@lru_cache(maxsize=4096)
def _mentions(text: str, name: str) -> bool:
    return re.search(rf"\b{re.escape(name)}\b", text) is not None


def bind_arguments(scop: Scop, args: tuple, kwargs: dict) -> BoundArguments:
    """Match call arguments to the kernel's signature and check every array.

    Raises :class:`~polyopt.errors.ArgumentTypeError` (a TypeError) for missing/unknown
    arguments, non-arrays and wrong element types, :class:`~polyopt.errors.ArgumentError` (a
    ValueError) for wrong ranks, shapes, non-C-contiguous or read-only outputs, aliasing, and
    :class:`~polyopt.errors.ArgumentRangeError` (also an OverflowError) for integer sizes and
    scalars outside their native type.
    """
    names = [a.name for a in scop.arguments]
    if len(args) > len(names):
        raise ArgumentTypeError(f"{scop.name}() takes {len(names)} arguments ({', '.join(names)}), got {len(args)}")
    values = dict(zip(names, args))
    for key, value in kwargs.items():
        if key not in names:
            raise ArgumentTypeError(f"{scop.name}() got an unexpected argument '{key}'")
        if key in values:
            raise ArgumentTypeError(f"{scop.name}() got multiple values for argument '{key}'")
        values[key] = value
    missing = [n for n in names if n not in values]
    if missing:
        raise ArgumentTypeError(f"{scop.name}() is missing argument(s): {', '.join(missing)}")
    written = _written_arrays(scop)
    given, scalars, arrays = {}, {}, {}
    for arg in scop.arguments:
        value = values[arg.name]
        if arg.kind == "param":
            if isinstance(value, (bool, float)) or not isinstance(value, (int, np.integer)):
                raise ArgumentTypeError(f"{scop.name}(): size parameter '{arg.name}' must be an int, got {value!r}")
            given[arg.name] = _in_range(scop.name, "size parameter", arg.name, int(value), arg.dtype)
        elif arg.kind == "scalar":
            if not isinstance(value, (int, float, np.number)) or isinstance(value, bool):
                raise ArgumentTypeError(f"{scop.name}(): scalar '{arg.name}' must be a number, got {type(value).__name__}")
            if not arg.dtype.is_float and isinstance(value, (int, np.integer)):
                _in_range(scop.name, "scalar", arg.name, int(value), arg.dtype)
            scalars[arg.name] = value
        else:
            arrays[arg.name] = _check_array(scop, arg.name, value, arg.name in written)
    shapes = tuple((name, array.shape) for name, array in arrays.items())
    params = dict(_params_of_shapes(scop, shapes, tuple(given.items())))
    _check_aliasing(scop.name, arrays, written)
    return BoundArguments(params, scalars, {**arrays, **temporary_arrays(scop, params)})


def temporary_arrays(scop: Scop, params: dict[str, int]) -> dict[str, np.ndarray]:
    """Fresh storage for the Scop's ``temporary`` arrays (expanded scalars) at these sizes: the
    caller keeps them referenced until the native call returns. Uninitialized: the expansion
    guarantees that every element is written before it is read."""
    return {name: np.empty(tuple(max(0, _extent(e, params)) for e in array.shape), array.dtype.numpy)
            for name, array in scop.arrays.items() if array.temporary}


def _in_range(kernel: str, role: str, name: str, value: int, dtype) -> int:
    """``value`` if the integer type ``dtype`` holds it; else ArgumentRangeError (ctypes would
    pass it on modulo 2**bits: ``2**64 + 3`` as a size runs 3 steps, ``2**63`` none)."""
    low, high = dtype.limits
    if not low <= value <= high:
        raise ArgumentRangeError(f"{kernel}(): {role} '{name}' = {value} is outside the range of "
                                 f"{dtype} [{low}, {high}]", name=name)
    return value


@lru_cache(maxsize=256)
def _written_arrays(scop: Scop) -> frozenset[str]:
    return frozenset(w.array for s in scop.statements for w in s.writes)


@lru_cache(maxsize=4096)
def _params_of_shapes(scop: Scop, shapes: tuple, given: tuple) -> tuple[tuple[str, int], ...]:
    """The parameter values that give the arrays these shapes (``given`` ones as passed);
    ValueError when no values do. Cached: repeated calls with one shape skip the solving."""
    params = _infer_params(scop, dict(shapes), dict(given))
    for name, shape in shapes:
        expected = tuple(_extent(e, params) for e in scop.arrays[name].shape)
        if shape != expected:
            detail = ", ".join(f"{p}={v}" for p, v in params.items())
            raise ArgumentError(f"{scop.name}(): array '{name}' has shape {shape}, expected "
                                f"{expected} for {detail}")
    return tuple(params.items())


def _check_array(scop: Scop, name: str, value, is_written: bool) -> np.ndarray:
    spec = scop.arrays[name]
    if not isinstance(value, np.ndarray):
        raise ArgumentTypeError(f"{scop.name}(): argument '{name}' must be a numpy array, got {type(value).__name__}")
    if value.dtype != spec.dtype.numpy:
        raise ArgumentTypeError(f"{scop.name}(): array '{name}' has dtype {value.dtype}, expected "
                                f"{spec.dtype.numpy} ({spec.dtype})")
    if value.ndim != len(spec.shape):
        raise ArgumentError(f"{scop.name}(): array '{name}' must have {len(spec.shape)} dimensions, got {value.ndim}")
    if not value.flags.c_contiguous:
        raise ArgumentError(f"{scop.name}(): array '{name}' must be C-contiguous (use np.ascontiguousarray)")
    if not value.flags.aligned:  # the native code assumes element alignment
        raise ArgumentError(f"{scop.name}(): array '{name}' is not aligned to its element size "
                            "(use np.ascontiguousarray or np.require(..., requirements='A'))")
    if is_written and not value.flags.writeable:
        raise ArgumentError(f"{scop.name}(): array '{name}' is written by the kernel but is read-only")
    return value


def _check_aliasing(kernel: str, arrays: dict[str, np.ndarray], written: set[str]) -> None:
    names = list(arrays)
    for k, a in enumerate(names):
        for b in names[k + 1:]:
            if (a in written or b in written) and np.may_share_memory(arrays[a], arrays[b]):
                raise ArgumentError(f"{kernel}(): arrays '{a}' and '{b}' overlap in memory; "
                                    "the kernel assumes distinct arrays")


def abi_values(scop: Scop, bound: BoundArguments) -> list:
    """The native call's argument values, in :func:`~polyopt.codegen.ast.abi_arguments` order."""
    values = []
    for arg in abi_arguments(scop):
        if arg.kind == "param":
            values.append(bound.params[arg.name])
        elif arg.kind == "scalar":
            values.append(arg.dtype.numpy.type(bound.scalars[arg.name]).item())
        else:
            values.append(bound.arrays[arg.name].ctypes.data)
    return values


def abi_ctypes(scop: Scop) -> list:
    """ctypes argument types of the native kernel function."""
    return [ctypes.c_void_p if a.kind == "array" else _CTYPES[a.dtype.name] for a in abi_arguments(scop)]


def default_num_threads() -> int:
    """The thread count used when none is given: every core this process may run on."""
    return len(os.sched_getaffinity(0))


def check_num_threads(value) -> int | None:
    """``value`` as a thread count (None stays None); TypeError/ValueError for anything else."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ArgumentTypeError(f"num_threads must be an int, got {value!r}")
    if not 1 <= value <= 2**31 - 1:
        raise ArgumentError(f"num_threads must be at least 1, got {value}")
    return int(value)


def check_params(scop: Scop, params: dict[str, int], checked: dict) -> None:
    """Refuse parameter values outside the context or for which an access leaves its array.
    ``checked`` remembers values found good (a compiled kernel's own dict, bounded)."""
    key = tuple(params[p] for p in scop.params)
    if key in checked:
        return
    with ISL_LOCK:
        inside = param_point(scop.params, params).is_subset(scop.in_bounds_params)
    if not inside:
        detail = ", ".join(f"{p}={v}" for p, v in params.items())
        raise ArgumentError(f"{scop.name}(): for {detail} some access would fall outside its "
                            f"array (valid parameters: {scop.in_bounds_params})")
    if len(checked) < 1024:
        checked[key] = True
