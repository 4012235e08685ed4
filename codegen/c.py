"""Readable C (C99) for a loop AST: for inspection, and for building the same loops with gcc.

Arrays are passed as flat pointers and viewed through variable-length-array pointer casts, so
the body reads ``C[i][j]`` exactly like the kernel. Python's floor division and modulo are
emitted as small inline helpers.
"""
from __future__ import annotations

from polyopt import expr as E
from polyopt.affine import extent_expr
from polyopt.codegen.ast import Block, For, If, Node, Run, abi_arguments, instantiate
from polyopt.scop import Scop
from polyopt.types import DType

_PRELUDE = """\
#include <math.h>
#include <stdint.h>

static inline long pl_floordiv(long a, long b) { long q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }
static inline long pl_mod(long a, long b) { long r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
static inline double pl_fmod(double a, double b) { double r = fmod(a, b); return r != 0 ? (((r < 0) != (b < 0)) ? r + b : r) : copysign(0.0, b); }
static inline float pl_fmodf(float a, float b) { float r = fmodf(a, b); return r != 0 ? (((r < 0) != (b < 0)) ? r + b : r) : copysignf(0.0f, b); }
static inline double pl_ffloordiv(double a, double b) { double r = fmod(a, b), d = (a - r) / b; if (r != 0 && ((r < 0) != (b < 0))) d -= 1.0; if (d == 0) return copysign(0.0, a / b); double f = floor(d); return d - f > 0.5 ? f + 1.0 : f; }
static inline float pl_ffloordivf(float a, float b) { float r = fmodf(a, b), d = (a - r) / b; if (r != 0 && ((r < 0) != (b < 0))) d -= 1.0f; if (d == 0) return copysignf(0.0f, a / b); float f = floorf(d); return d - f > 0.5f ? f + 1.0f : f; }
"""

_MATH_F64 = {"sqrt": "sqrt", "exp": "exp", "log": "log", "sin": "sin", "cos": "cos",
             "tanh": "tanh", "pow": "pow", "floor": "floor", "abs": "fabs"}


def _ctype(dtype: DType) -> str:
    return {"f32": "float", "f64": "double", "i32": "int32_t", "i64": "int64_t", "bool": "int"}[dtype.name]


def _math_name(func: str, dtype: DType) -> str:
    name = _MATH_F64[func]
    return name + "f" if dtype.name == "f32" else name


class _CExpr:
    """Fully parenthesized C for an expression tree (clarity over minimal parentheses)."""

    def __init__(self, scop: Scop):
        self.scop = scop

    def __call__(self, e: E.Expr) -> str:
        if isinstance(e, E.Const):
            if e.dtype.is_float:
                text = repr(float(e.value))
                return text + "f" if e.dtype.name == "f32" else text
            return f"{int(e.value)}" if -2**31 <= e.value < 2**31 else f"{int(e.value)}L"
        if isinstance(e, E.Var):
            return e.name
        if isinstance(e, E.Access):
            return e.array + "".join(f"[{self(i)}]" for i in e.indices) if e.indices else e.array
        if isinstance(e, E.Unary):
            return f"(-{self(e.operand)})" if e.op == "neg" else f"(!{self(e.operand)})"
        if isinstance(e, E.Cast):
            return f"(({_ctype(e.dtype)}){self(e.operand)})"
        if isinstance(e, E.Select):
            return f"({self(e.cond)} ? {self(e.then)} : {self(e.otherwise)})"
        if isinstance(e, E.Call):
            if e.func == "abs" and not e.dtype.is_float:
                return f"({self(e.args[0])} < 0 ? -{self(e.args[0])} : {self(e.args[0])})"
            return f"{_math_name(e.func, e.dtype)}({', '.join(self(a) for a in e.args)})"
        if isinstance(e, E.Binary):
            return self.binary(e)
        raise TypeError(f"cannot emit {e!r}")

    def binary(self, e: E.Binary) -> str:
        a, b, op, t = self(e.lhs), self(e.rhs), e.op, e.lhs.dtype
        if op == "min":
            return f"({b} < {a} ? {b} : {a})"
        if op == "max":
            return f"({b} > {a} ? {b} : {a})"
        if op == "and":
            return f"({a} && {b})"
        if op == "or":
            return f"({a} || {b})"
        if op == "tdiv":
            return f"({a} / {b})"
        if op == "tmod":
            return f"({a} % {b})"
        if op == "//":  # Python's float floor division, like its % (1.0 // 0.1 == 9.0)
            if t.is_float:
                return f"{'pl_ffloordivf' if t.name == 'f32' else 'pl_ffloordiv'}({a}, {b})"
            return f"pl_floordiv({a}, {b})"
        if op == "%":
            if t.is_float:
                return f"{'pl_fmodf' if t.name == 'f32' else 'pl_fmod'}({a}, {b})"
            return f"pl_mod({a}, {b})"
        if op == "**":
            return _power(e, self)
        return f"({a} {op} {b})"


def _power(e: E.Binary, emit) -> str:
    """``x ** n`` as repeated multiplication for small literal n, else pow()."""
    exponent = e.rhs.value if isinstance(e.rhs, E.Const) else None
    if exponent is not None and float(exponent).is_integer() and 0 <= exponent <= 4:
        base = emit(e.lhs)
        return "(" + " * ".join([base] * int(exponent)) + ")" if exponent else "1"
    return f"{_math_name('pow', e.dtype)}({emit(e.lhs)}, {emit(e.rhs)})"


def c_function(scop: Scop, loops: Node, function_name: str, *, openmp: bool = False) -> str:
    """A complete C translation unit defining ``void function_name(...)``."""
    emit = _CExpr(scop)
    params = []
    views = []
    for arg in abi_arguments(scop):
        if arg.kind == "array":
            array = scop.arrays[arg.name]
            params.append(f"{_ctype(arg.dtype)} *restrict {arg.name}_")
            inner = "".join(f"[{emit(extent_expr(e, scop.params))}]" for e in array.shape[1:])
            if array.shape:
                views.append(f"  {_ctype(arg.dtype)} (*restrict {arg.name}){inner} = "
                             f"({_ctype(arg.dtype)} (*){inner}){arg.name}_;")
        else:
            params.append(f"{_ctype(arg.dtype)} {arg.name}")
    body: list[str] = []
    for array in scop.arrays.values():
        if array.local:
            body.append(f"  {_ctype(array.dtype)} {array.name} = 0;")
    _emit_node(loops, scop, emit, body, 1, openmp)
    signature = f"void {function_name}({', '.join(params) or 'void'})"
    return _PRELUDE + "\n" + signature + "\n{\n" + "\n".join(views + body) + "\n}\n"


def _emit_node(node: Node, scop: Scop, emit, out: list[str], depth: int, openmp: bool) -> None:
    pad = "  " * depth
    if isinstance(node, Block):
        for child in node.body:
            _emit_node(child, scop, emit, out, depth, openmp)
    elif isinstance(node, For):
        if node.parallel and openmp:
            out.append(f"{pad}#pragma omp parallel for")
        out.append(f"{pad}for (long {node.var} = {emit(node.init)}; {emit(node.cond)}; "
                   f"{node.var} += {node.step}) {{")
        _emit_node(node.body, scop, emit, out, depth + 1, openmp)
        out.append(f"{pad}}}")
    elif isinstance(node, If):
        out.append(f"{pad}if ({emit(node.cond)}) {{")
        _emit_node(node.then, scop, emit, out, depth + 1, openmp)
        if node.otherwise is not None:
            out.append(f"{pad}}} else {{")
            _emit_node(node.otherwise, scop, emit, out, depth + 1, openmp)
        out.append(f"{pad}}}")
    else:
        target, value = instantiate(scop.statement(node.statement), node.args)
        out.append(f"{pad}{emit(target)} = {emit(value)};  /* {node.statement} */")
