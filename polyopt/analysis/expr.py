"""The expression tree of statement bodies and of generated loop bounds.

Every node is an immutable dataclass carrying its result :class:`~polyopt.types.DType`. The
frontends build it (with Python's typing rules: ``/`` is true division, ``//`` and ``%`` floor),
the interpreter evaluates it, and the C and LLVM emitters translate it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

from polyopt.types import DType, boolean, f32, f64, i64, integer_promotion, promote, rounded

#: Binary operators. Arithmetic keeps Python semantics: "//" and "%" are floor division and
#: floor modulo; "tdiv"/"tmod" are C's truncating ones (only produced by the AST translation,
#: where isl guarantees a non-negative dividend); "min"/"max" follow Python's min(a, b)/max(a, b).
ARITHMETIC_OPS = ("+", "-", "*", "/", "//", "%", "**", "tdiv", "tmod", "min", "max")
COMPARISON_OPS = ("<", "<=", ">", ">=", "==", "!=")
LOGICAL_OPS = ("and", "or")
#: Math functions a kernel body may call, with their arity.
MATH_FUNCTIONS = {"sqrt": 1, "exp": 1, "log": 1, "sin": 1, "cos": 1, "tanh": 1, "abs": 1,
                  "pow": 2, "floor": 1}


class Expr:
    """Base of all expression nodes."""

    dtype: DType

    def children(self) -> tuple["Expr", ...]:
        return ()


@dataclass(frozen=True)
class Const(Expr):
    """A literal. ``weak`` literals (Python numbers) take the type of the other operand."""

    value: int | float
    dtype: DType
    weak: bool = False


@dataclass(frozen=True)
class Var(Expr):
    """A named integer or scalar value: a loop iterator, a size parameter, or a scalar argument."""

    name: str
    kind: str  # "iter" | "param" | "scalar"
    dtype: DType = i64


@dataclass(frozen=True)
class Access(Expr):
    """An array element ``array[indices]``; local scalars are 0-d arrays (empty ``indices``)."""

    array: str
    indices: tuple[Expr, ...]
    dtype: DType

    def children(self):
        return self.indices


@dataclass(frozen=True)
class Unary(Expr):
    op: str  # "neg" | "not"
    operand: Expr
    dtype: DType

    def children(self):
        return (self.operand,)


@dataclass(frozen=True)
class Binary(Expr):
    op: str
    lhs: Expr
    rhs: Expr
    dtype: DType

    def children(self):
        return (self.lhs, self.rhs)


@dataclass(frozen=True)
class Call(Expr):
    """A math function from :data:`MATH_FUNCTIONS`."""

    func: str
    args: tuple[Expr, ...]
    dtype: DType

    def children(self):
        return self.args


@dataclass(frozen=True)
class Select(Expr):
    """``then if cond else otherwise``."""

    cond: Expr
    then: Expr
    otherwise: Expr
    dtype: DType

    def children(self):
        return (self.cond, self.then, self.otherwise)


@dataclass(frozen=True)
class Cast(Expr):
    operand: Expr
    dtype: DType

    def children(self):
        return (self.operand,)


def walk(expr: Expr) -> Iterator[Expr]:
    """All nodes of ``expr``, parents before children."""
    yield expr
    for child in expr.children():
        yield from walk(child)


def size(expr: Expr) -> int:
    """The number of nodes of ``expr`` (itself and every node below it)."""
    return sum(1 for _ in walk(expr))


def substitute(expr: Expr, replace: Callable[[Expr], Expr | None]) -> Expr:
    """Rebuild ``expr`` bottom-up-free: ``replace(node)`` returns a replacement or None."""
    new = replace(expr)
    if new is not None:
        return new
    if isinstance(expr, Access):
        return Access(expr.array, tuple(substitute(i, replace) for i in expr.indices), expr.dtype)
    if isinstance(expr, Unary):
        return Unary(expr.op, substitute(expr.operand, replace), expr.dtype)
    if isinstance(expr, Binary):
        return Binary(expr.op, substitute(expr.lhs, replace), substitute(expr.rhs, replace),
                      expr.dtype)
    if isinstance(expr, Call):
        return Call(expr.func, tuple(substitute(a, replace) for a in expr.args), expr.dtype)
    if isinstance(expr, Select):
        return Select(substitute(expr.cond, replace), substitute(expr.then, replace),
                      substitute(expr.otherwise, replace), expr.dtype)
    if isinstance(expr, Cast):
        return Cast(substitute(expr.operand, replace), expr.dtype)
    return expr


# --- typed constructors: the typing rules live here, once ---------------------------------------

def _operand_type(a: Expr, b: Expr) -> DType:
    """Common type of two operands, letting weak literals adopt the other side's type (integer
    types narrower than i32 compute as i32, C's integer promotion: see :func:`promote`).

    A boolean mixed with a number is an integer, as in Python (``True + 1 == 2``).
    """
    a_weak = isinstance(a, Const) and a.weak
    b_weak = isinstance(b, Const) and b.weak
    if a_weak and not b_weak:
        common = promote(b.dtype, b.dtype) if (b.dtype.is_float or not a.dtype.is_float) else f64
    elif b_weak and not a_weak:
        common = promote(a.dtype, a.dtype) if (a.dtype.is_float or not b.dtype.is_float) else f64
    else:
        common = promote(a.dtype, b.dtype)
    return i64 if common == boolean and a.dtype != b.dtype else common


def cast(expr: Expr, dtype: DType) -> Expr:
    """``expr`` converted to ``dtype`` (literals are converted in place, rounded to a half
    type). A half type converts to and from f32 and f64 only: to integers and to the other
    half type through f32 (the backends then need no other conversions of half types)."""
    if expr.dtype == dtype:
        return expr
    if isinstance(expr, Const):
        value = rounded(float(expr.value), dtype) if dtype.is_float else int(expr.value)
        return Const(value, dtype, expr.weak)
    if (expr.dtype.is_half or dtype.is_half) and not {expr.dtype, dtype} & {f32, f64}:
        return Cast(cast(expr, f32), dtype)  # half <-> integer or other half type: through f32
    return Cast(expr, dtype)


def _in_f32(build: Callable[..., Expr], *operands: Expr) -> Expr:
    """An operation on half-precision operands (f16, bf16) as numpy and CUDA compute it: in f32
    (exact for the operands), its result rounded back to the half type (a comparison's boolean
    as it is). One rounding per operation, so ``a * b + c`` rounds twice, never fused."""
    half = next(o.dtype for o in operands if o.dtype.is_half)
    result = build(*(cast(o, f32) if o.dtype.is_half else o for o in operands))
    return cast(result, half) if result.dtype == f32 else result


def binary(op: str, lhs: Expr, rhs: Expr) -> Expr:
    """A typed binary operation with Python's rules (``/`` always floating point).

    Booleans are integers in arithmetic (``True + 1 == 2``); ``a and b`` / ``a or b`` on numbers
    yield one of the operands, as in Python (on comparisons they are the logical operators).
    """
    if op in LOGICAL_OPS:
        if lhs.dtype == boolean and rhs.dtype == boolean:
            return Binary(op, lhs, rhs, boolean)
        return select(truth(lhs), rhs, lhs) if op == "and" else select(truth(lhs), lhs, rhs)
    common = _operand_type(lhs, rhs)
    if common == boolean and op not in COMPARISON_OPS:
        common = i64
    if op == "/" and not common.is_float:
        common = f64
    if op == "**" and not common.is_float and not (isinstance(rhs, Const) and rhs.value >= 0):
        common = f64  # an integer power is an integer only for a literal exponent >= 0: 2 ** -1 == 0.5
    lhs, rhs = cast(lhs, common), cast(rhs, common)
    if common.is_half:
        return _in_f32(lambda x, y: binary(op, x, y), lhs, rhs)
    if op in COMPARISON_OPS:
        return Binary(op, lhs, rhs, boolean)
    weak = isinstance(lhs, Const) and lhs.weak and isinstance(rhs, Const) and rhs.weak
    if weak:  # fold literal arithmetic so that "1.0 / 3" stays a weak literal
        folded = _fold(op, lhs.value, rhs.value)
        if folded is not None:
            return Const(folded, common, True)
    return Binary(op, lhs, rhs, common)


def _fold(op: str, a, b):
    import operator
    table = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}
    if op in table and not (op == "/" and b == 0):
        return table[op](a, b)
    return None


def call(func: str, args: list[Expr]) -> Expr:
    """A typed math call: integer arguments of float functions are converted to f64."""
    natural = _operand_type(*args) if func == "pow" else args[0].dtype
    if natural.is_half:
        return _in_f32(lambda *wide: call(func, list(wide)), *(cast(a, natural) for a in args))
    if func == "abs":
        return Call(func, (args[0],), args[0].dtype)
    if func == "pow":
        common = _operand_type(args[0], args[1])
        common = common if common.is_float else f64
        return Call(func, tuple(cast(a, common) for a in args), common)
    arg = args[0]
    dtype = arg.dtype if arg.dtype.is_float else f64
    return Call(func, (cast(arg, dtype),), dtype)


def truth(value: Expr) -> Expr:
    """``value`` as a boolean, with Python's truthiness (nonzero is true)."""
    if value.dtype == boolean:
        return value
    if value.dtype.is_half:
        return truth(cast(value, f32))
    return Binary("!=", value, Const(0.0 if value.dtype.is_float else 0, value.dtype), boolean)


def select(cond: Expr, then: Expr, otherwise: Expr) -> Expr:
    common = _operand_type(then, otherwise)
    return Select(truth(cond), cast(then, common), cast(otherwise, common), common)


def negate(operand: Expr) -> Expr:
    if operand.dtype == boolean:  # -True == -1
        operand = cast(operand, i64)
    operand = cast(operand, integer_promotion(operand.dtype))  # C: -c of a char is an int
    if isinstance(operand, Const):
        return Const(-operand.value, operand.dtype, operand.weak)
    if operand.dtype.is_half:
        return _in_f32(negate, operand)
    return Unary("neg", operand, operand.dtype)


def logical_not(operand: Expr) -> Expr:
    return Unary("not", truth(operand), boolean)


_PYTHON_PRECEDENCE = {"or": 1, "and": 2, "<": 4, "<=": 4, ">": 4, ">=": 4, "==": 4, "!=": 4,
                      "+": 6, "-": 6, "*": 7, "/": 7, "//": 7, "%": 7, "**": 9}


def to_source(expr: Expr, parent: int = 0) -> str:
    """``expr`` in the DSL's Python spelling (for printing a Scop and error messages)."""
    if isinstance(expr, Const):
        return repr(expr.value)
    if isinstance(expr, Var):
        return expr.name
    if isinstance(expr, Access):
        if not expr.indices:
            return expr.array
        return f"{expr.array}[{', '.join(to_source(i) for i in expr.indices)}]"
    if isinstance(expr, Unary):
        text = f"-{to_source(expr.operand, 8)}" if expr.op == "neg" else f"not {to_source(expr.operand, 3)}"
        return f"({text})" if parent > 3 else text
    if isinstance(expr, Binary):
        if expr.op in ("min", "max", "tdiv", "tmod"):
            return f"{expr.op}({to_source(expr.lhs)}, {to_source(expr.rhs)})"
        prec = _PYTHON_PRECEDENCE[expr.op]
        text = f"{to_source(expr.lhs, prec)} {expr.op} {to_source(expr.rhs, prec + 1)}"
        return f"({text})" if prec < parent else text
    if isinstance(expr, Call):
        return f"{expr.func}({', '.join(to_source(a) for a in expr.args)})"
    if isinstance(expr, Select):
        text = f"{to_source(expr.then, 1)} if {to_source(expr.cond, 1)} else {to_source(expr.otherwise)}"
        return f"({text})" if parent > 0 else text
    if isinstance(expr, Cast):
        return f"{'float' if expr.dtype.is_float else 'int'}({to_source(expr.operand)})"
    raise TypeError(f"not an expression: {expr!r}")
