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

    @property
    def is_half(self) -> bool:
        """A 16-bit float (:data:`f16`, :data:`bf16`): stored in half precision, computed in
        f32 (each operation rounds its result back, see :func:`polyopt.analysis.expr.binary`)."""
        return self.is_float and self.bits == 16

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


def _bfloat16_numpy() -> np.dtype:
    """numpy's dtype for bf16 arrays: ml_dtypes' ``bfloat16`` if that package is importable,
    else uint16 (the raw bits; numpy itself has no bfloat16)."""
    try:
        import ml_dtypes
    except ImportError:
        return np.dtype(np.uint16)
    return np.dtype(ml_dtypes.bfloat16)


def bf16_bits(values, xp=np) -> np.ndarray:
    """The bfloat16 bit patterns (uint16) nearest to ``values`` (rounded to nearest, ties to
    even, from float32 as CUDA's ``__float2bfloat16`` does; NaN stays a quiet NaN); ``xp``:
    the array module (numpy, or CuPy for GPU arrays, which has no bfloat16 dtype: there one
    element-wise kernel, :func:`_bf16_rounding`, where the steps below would launch ten)."""
    values = xp.asarray(values, dtype=np.float32)
    if xp is not np and hasattr(xp, "ElementwiseKernel"):
        return _bf16_rounding(xp)(values)
    bits = values.view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return xp.where(xp.isnan(values), (bits >> 16) | 0x40, rounded).astype(np.uint16)


_BF16_ROUNDING: dict = {}


def _bf16_rounding(xp):
    """The element-wise kernel of ``xp`` (CuPy) computing :func:`bf16_bits` of float32 values in
    one pass: the same integer steps on the 32-bit pattern (NaN excluded first, no finite or
    infinite pattern overflows 32 bits when 0x8000 is added)."""
    kernel = _BF16_ROUNDING.get(xp)
    if kernel is None:
        kernel = _BF16_ROUNDING[xp] = xp.ElementwiseKernel(
            "float32 x", "uint16 y",
            "unsigned int b = __float_as_uint(x);"
            " y = isnan(x) ? (unsigned short)((b >> 16) | 0x40u)"
            " : (unsigned short)((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);",
            "polyopt_bf16_bits")
    return kernel


def bf16_values(bits) -> np.ndarray:
    """The float32 values of bfloat16 bit patterns (exact: bf16 is float32's upper half)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


@dataclass(frozen=True)
class ArrayType:
    """The annotation of an array argument: element type and extents as affine text."""

    dtype: DType
    shape: tuple[str, ...]


f32 = DType("f32", np.dtype(np.float32), "float", 32, True)
f64 = DType("f64", np.dtype(np.float64), "double", 64, True)
#: Half precision: IEEE binary16 (numpy's float16; CUDA's ``__half``) and bfloat16 (float32's
#: exponent with 8 significand bits; CUDA's ``__nv_bfloat16``). numpy has no bfloat16: bf16
#: arrays are ml_dtypes' ``bfloat16`` where that package is installed (the ``bf16`` extra),
#: else their raw bits as uint16 arrays (see :func:`bf16_bits`).
f16 = DType("f16", np.dtype(np.float16), "__half", 16, True)
bf16 = DType("bf16", _bfloat16_numpy(), "__nv_bfloat16", 16, True)
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

#: bf16 comes last: without ml_dtypes its numpy dtype is uint16, which :func:`as_dtype` must
#: read as u16.
ELEMENT_TYPES: dict[str, DType] = {t.name: t for t in (f16, f32, f64, i8, u8, i16, u16, i32, u32, i64, u64, bf16)}

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
    """Result type of arithmetic between two (non-weak) operands: float wins, the wider float
    (f16 with f32 is f32, as in numpy; f16 with bf16 is f32, as in PyTorch);
    integers follow C's usual arithmetic conversions: each is first promoted (types narrower
    than ``int`` become i32, :func:`integer_promotion`), then the wider wins, and at equal
    width the unsigned one (i32 with u32 is u32, i64 with u32 is i64). Booleans stay booleans
    with each other (comparisons of comparisons)."""
    if a.is_float or b.is_float:
        if a.is_float != b.is_float:
            return a if a.is_float else b
        if a != b and a.bits == b.bits == 16:  # f16 with bf16: neither holds the other
            return f32
        return a if a.bits >= b.bits else b
    if a == b == boolean:
        return boolean
    a, b = integer_promotion(a), integer_promotion(b)
    if a.bits != b.bits:
        return a if a.bits > b.bits else b
    return a if a.unsigned else b


def rounded(value: float, dtype: DType) -> float:
    """``value`` rounded to the nearest value of the half type ``dtype`` (a literal of a half
    expression: numpy rounds a Python float to float16 before it computes); other types keep it."""
    if dtype.name == "f16":
        return float(np.float16(value))
    if dtype.name == "bf16":
        return float(bf16_values(bf16_bits(value)))
    return value


def integer_promotion(t: DType) -> DType:
    """C's integer promotion: an integer type narrower than ``int`` (and bool) computes as i32;
    other types are unchanged."""
    return i32 if not t.is_float and t.bits < 32 else t
