"""Element types of kernel arrays and scalars, and the annotations that name them.

``f64["N", "M"]`` in a kernel signature is an :class:`ArrayType`: a 2-d array of doubles whose
extents are affine expressions of the size parameters ``N`` and ``M``.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np


@dataclass(frozen=True)
class DType:
    """A scalar element type: its short name, numpy dtype, C spelling, width in bits, and
    whether it is a float or an unsigned integer (arithmetic wraps modulo 2**bits)."""

    name: str
    numpy: np.dtype
    c_name: str
    bits: int
    is_float: bool
    unsigned: bool = False

    def __getitem__(self, shape) -> "ArrayType":
        """``f64["N", "M"]`` -> the array annotation with those (affine, textual) extents."""
        extents = shape if isinstance(shape, tuple) else (shape,)
        return ArrayType(self, tuple(str(e) for e in extents))

    def __repr__(self) -> str:
        return self.name

    @cached_property
    def limits(self) -> tuple[int, int]:
        """(smallest, largest) value of an integer type (two's complement, or unsigned)."""
        if self.unsigned:
            return 0, (1 << self.bits) - 1
        return -(1 << (self.bits - 1)), (1 << (self.bits - 1)) - 1


@dataclass(frozen=True)
class ArrayType:
    """The annotation of an array argument: element type and extents as affine text."""

    dtype: DType
    shape: tuple[str, ...]


f32 = DType("f32", np.dtype(np.float32), "float", 32, True)
f64 = DType("f64", np.dtype(np.float64), "double", 64, True)
i32 = DType("i32", np.dtype(np.int32), "int", 32, False)
i64 = DType("i64", np.dtype(np.int64), "long", 64, False)
#: C's small and unsigned integer types (x86-64 widths; ``char`` is signed there).
i8 = DType("i8", np.dtype(np.int8), "signed char", 8, False)
u8 = DType("u8", np.dtype(np.uint8), "unsigned char", 8, False, unsigned=True)
i16 = DType("i16", np.dtype(np.int16), "short", 16, False)
u16 = DType("u16", np.dtype(np.uint16), "unsigned short", 16, False, unsigned=True)
u32 = DType("u32", np.dtype(np.uint32), "unsigned int", 32, False, unsigned=True)
u64 = DType("u64", np.dtype(np.uint64), "unsigned long", 64, False, unsigned=True)
#: The type of comparisons and logical operators inside kernel bodies (never stored in arrays).
boolean = DType("bool", np.dtype(np.bool_), "int", 1, False)

ELEMENT_TYPES: dict[str, DType] = {t.name: t for t in (f32, f64, i8, u8, i16, u16, i32, u32, i64, u64)}

#: numpy's longdouble where it is the x87 80-bit extended type (x86-64; stored in 16 bytes),
#: else None. po.einsum compiles longdouble data in it on the CPU; it is not a kernel annotation
#: (the DSL and the GPU do not know it).
f80: DType | None = (DType("f80", np.dtype(np.longdouble), "long double", 128, True)
                     if np.finfo(np.longdouble).nmant == 63 and np.dtype(np.longdouble).itemsize == 16 else None)


def as_dtype(value) -> DType:
    """Accept a DType, its name ("f64"), or anything numpy understands as a dtype."""
    if isinstance(value, DType):
        return value
    if isinstance(value, str) and value in ELEMENT_TYPES:
        return ELEMENT_TYPES[value]
    np_dtype = np.dtype(value)
    for t in ELEMENT_TYPES.values():
        if t.numpy == np_dtype:
            return t
    raise TypeError(f"unsupported element type {value!r}: use one of {', '.join(ELEMENT_TYPES)}")


def promote(a: DType, b: DType) -> DType:
    """Result type of arithmetic between two (non-weak) operands: float wins, the wider float;
    integers follow C's usual arithmetic conversions: each is first promoted (types narrower
    than ``int`` become i32, :func:`integer_promotion`), then the wider wins, and at equal
    width the unsigned one (i32 with u32 is u32, i64 with u32 is i64). Booleans stay booleans
    with each other (comparisons of comparisons)."""
    if a.is_float or b.is_float:
        if a.is_float != b.is_float:
            return a if a.is_float else b
        return a if a.bits >= b.bits else b
    if a == b == boolean:
        return boolean
    a, b = integer_promotion(a), integer_promotion(b)
    if a.bits != b.bits:
        return a if a.bits > b.bits else b
    return a if a.unsigned else b


def integer_promotion(t: DType) -> DType:
    """C's integer promotion: an integer type narrower than ``int`` (and bool) computes as i32;
    other types are unchanged."""
    return i32 if not t.is_float and t.bits < 32 else t
