"""Readable C (C99) for a loop AST: for inspection, and for building the same loops with gcc.

Arrays are passed as flat pointers and viewed through variable-length-array pointer casts, so
the body reads ``C[i][j]`` exactly like the kernel. Python's floor division and modulo are
emitted as small inline helpers that do not trap: ``x // -1`` is ``-x`` wrapped (as in the LLVM
kernel and numpy), and a zero divisor gives 0 -- this C has no channel to report it, where the
LLVM kernel raises ZeroDivisionError. C's own ``/`` and ``%`` (a C scop's, ``tdiv``/``tmod``)
are written as C's operators, keeping the C program's semantics. The CUDA emitter uses the
same helpers (a GPU does not trap on integer division either).
"""
from __future__ import annotations

from polyopt.analysis import expr as E
from polyopt.analysis.affine import extent_expr
from polyopt.codegen.loop_nodes import Block, For, If, Node, runs_on_threads
from polyopt.codegen.ast import abi_arguments, instantiate
from polyopt.analysis.scop import Scop
from polyopt.types import DType

_PRELUDE = """\
#include <math.h>
#include <stdint.h>

static inline long pl_floordiv(long a, long b) { if (b == 0) return 0; if (b == -1) return (long)(0UL - (unsigned long)a); long q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }
static inline long pl_mod(long a, long b) { if (b == 0 || b == -1) return 0; long r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
static inline unsigned long pl_udiv(unsigned long a, unsigned long b) { return b ? a / b : 0; }
static inline unsigned long pl_umod(unsigned long a, unsigned long b) { return b ? a % b : 0; }
static inline double pl_fmod(double a, double b) { double r = fmod(a, b); return r != 0 ? (((r < 0) != (b < 0)) ? r + b : r) : copysign(0.0, b); }
static inline float pl_fmodf(float a, float b) { float r = fmodf(a, b); return r != 0 ? (((r < 0) != (b < 0)) ? r + b : r) : copysignf(0.0f, b); }
static inline double pl_ffloordiv(double a, double b) { double r = fmod(a, b), d = (a - r) / b; if (r != 0 && ((r < 0) != (b < 0))) d -= 1.0; if (d == 0) return copysign(0.0, a / b); double f = floor(d); return d - f > 0.5 ? f + 1.0 : f; }
static inline float pl_ffloordivf(float a, float b) { float r = fmodf(a, b), d = (a - r) / b; if (r != 0 && ((r < 0) != (b < 0))) d -= 1.0f; if (d == 0) return copysignf(0.0f, a / b); float f = floorf(d); return d - f > 0.5f ? f + 1.0f : f; }
"""

_MATH_F64 = {"sqrt": "sqrt", "exp": "exp", "log": "log", "sin": "sin", "cos": "cos",
             "tanh": "tanh", "pow": "pow", "floor": "floor", "abs": "fabs"}


#: The half types' names in C, where CUDA's headers do not define them (gcc's ``_Float16``, and
#: ``__bf16`` where the compiler has it: gcc 13 on): one spelling (:attr:`DType.c_name`) serves
#: the C and the CUDA emitters.
_HALF_TYPEDEFS = """\
#ifndef __CUDACC__
typedef _Float16 __half;
#ifdef __BFLT16_MAX__
typedef __bf16 __nv_bfloat16;
#endif
#endif
"""


def c_type_name(dtype: DType) -> str:
    """The C (and CUDA) spelling of ``dtype``; half types are CUDA's ``__half`` and
    ``__nv_bfloat16`` (:func:`c_prelude` defines them for C compilers)."""
    if dtype.is_half:
        return dtype.c_name
    if dtype.is_float:
        return {"f32": "float", "f64": "double", "f80": "long double"}[dtype.name]
    return "int" if dtype.name == "bool" else f"{'u' if dtype.unsigned else ''}int{dtype.bits}_t"


def _math_name(func: str, dtype: DType) -> str:
    name = _MATH_F64[func]
    return name + "f" if dtype.name == "f32" else name


C_PRIMARY, _UNARY, _MUL, _ADD, _REL, _EQ, C_AND, _OR, C_CONDITIONAL = 16, 15, 13, 12, 10, 9, 5, 4, 3
_C_PRECEDENCE = {"*": _MUL, "/": _MUL, "tdiv": _MUL, "tmod": _MUL, "+": _ADD, "-": _ADD,
                 "<": _REL, "<=": _REL, ">": _REL, ">=": _REL, "==": _EQ, "!=": _EQ,
                 "and": C_AND, "or": _OR}
_C_SPELLING = {"tdiv": "/", "tmod": "%", "and": "&&", "or": "||"}


class CExpr:
    """C for an expression tree, parenthesized only where C's precedence needs it."""

    def __init__(self, scop: Scop):
        self.scop = scop

    def __call__(self, e: E.Expr) -> str:
        return self.emit(e)[0]

    def at(self, e: E.Expr, precedence: int) -> str:
        """``e`` as an operand of an operator binding with ``precedence``."""
        text, own = self.emit(e)
        return text if own >= precedence else f"({text})"

    def emit(self, e: E.Expr) -> tuple[str, int]:
        if isinstance(e, E.Const):
            if e.dtype.is_half:  # a conversion: a bare double would be ambiguous beside a __half in C++
                return f"({c_type_name(e.dtype)}){float(e.value)!r}", _UNARY
            if e.dtype.is_float:
                text = repr(float(e.value)) + ("f" if e.dtype.name == "f32" else "")
            elif e.dtype.unsigned:
                text = f"{int(e.value) % 2**e.dtype.bits}u" + ("L" if e.dtype.bits == 64 else "")
            else:
                text = f"{int(e.value)}" if -2**31 <= e.value < 2**31 else f"{int(e.value)}L"
            return text, (C_PRIMARY if e.value >= 0 else _UNARY)
        if isinstance(e, E.Var):
            return e.name, C_PRIMARY
        if isinstance(e, E.Access):
            return e.array + "".join(f"[{self(i)}]" for i in e.indices), C_PRIMARY
        if isinstance(e, E.Unary):
            return ("-" if e.op == "neg" else "!") + self.at(e.operand, _UNARY), _UNARY
        if isinstance(e, E.Cast):
            return f"({c_type_name(e.dtype)}){self.at(e.operand, _UNARY)}", _UNARY
        if isinstance(e, E.Select):
            return (f"{self.at(e.cond, _OR)} ? {self.at(e.then, C_CONDITIONAL + 1)} : "
                    f"{self.at(e.otherwise, C_CONDITIONAL)}"), C_CONDITIONAL
        if isinstance(e, E.Call):
            if e.func == "abs" and not e.dtype.is_float:
                x = self.at(e.args[0], _UNARY)
                return f"{x} < 0 ? -{x} : {x}", C_CONDITIONAL
            return f"{_math_name(e.func, e.dtype)}({', '.join(self(a) for a in e.args)})", C_PRIMARY
        if isinstance(e, E.Binary):
            return self.binary(e)
        raise TypeError(f"cannot emit {e!r}")

    def binary(self, e: E.Binary) -> tuple[str, int]:
        op, t = e.op, e.lhs.dtype
        if op in ("min", "max"):  # Python: min(a, b) is b only when b < a
            a, b = self.at(e.lhs, _REL + 1), self.at(e.rhs, _REL + 1)
            return f"{b} {'<' if op == 'min' else '>'} {a} ? {b} : {a}", C_CONDITIONAL
        if op in ("//", "%") and t.unsigned:  # floor is truncation; the helper guards the divisor
            helper = "pl_udiv" if op == "//" else "pl_umod"
            return f"({c_type_name(t)}){helper}({self(e.lhs)}, {self(e.rhs)})", _UNARY
        if op == "//":  # Python's float floor division, like its % (1.0 // 0.1 == 9.0)
            helper = ("pl_ffloordivf" if t.name == "f32" else "pl_ffloordiv") if t.is_float else "pl_floordiv"
            return f"{helper}({self(e.lhs)}, {self(e.rhs)})", C_PRIMARY
        if op == "%":
            helper = ("pl_fmodf" if t.name == "f32" else "pl_fmod") if t.is_float else "pl_mod"
            return f"{helper}({self(e.lhs)}, {self(e.rhs)})", C_PRIMARY
        if op == "**":
            return _power(e, self), C_PRIMARY
        prec = _C_PRECEDENCE[op]
        text = f"{self.at(e.lhs, prec)} {_C_SPELLING.get(op, op)} {self.at(e.rhs, prec + 1)}"
        return text, prec


def _power(e: E.Binary, emit) -> str:
    """``x ** n`` as repeated multiplication for small literal n, else pow()."""
    exponent = e.rhs.value if isinstance(e.rhs, E.Const) else None
    if exponent is not None and float(exponent).is_integer() and 0 <= exponent <= 4:
        base = emit.at(e.lhs, _MUL + 1)
        return "(" + " * ".join([base] * int(exponent)) + ")" if exponent else "1"
    return f"{_math_name('pow', e.dtype)}({emit(e.lhs)}, {emit(e.rhs)})"


def c_function(scop: Scop, loops: Node, function_name: str, *, openmp: bool = False) -> str:
    """A complete C translation unit defining ``void function_name(...)``."""
    emit = CExpr(scop)
    params = []
    views = []
    # each array arrives as a flat pointer named after it, with a suffix no user name ends in
    user_names = set(scop.params) | set(scop.arrays) | {a.name for a in scop.arguments}
    suffix = "_"
    while any(name + suffix in user_names for name in scop.arrays):
        suffix += "_"
    for arg in abi_arguments(scop):
        if arg.kind == "array":
            array = scop.arrays[arg.name]
            params.append(f"{c_type_name(arg.dtype)} *restrict {arg.name}{suffix}")
            inner = "".join(f"[{emit(extent_expr(e, scop.params))}]" for e in array.shape[1:])
            if array.shape:
                views.append(f"  {c_type_name(arg.dtype)} (*restrict {arg.name}){inner} = "
                             f"({c_type_name(arg.dtype)} (*){inner}){arg.name}{suffix};")
        else:
            params.append(f"{c_type_name(arg.dtype)} {arg.name}")
    locals_ = [a.name for a in scop.arrays.values() if a.local]
    body = c_loop_nest(scop, loops, openmp=openmp, declare=locals_)
    signature = f"void {function_name}({', '.join(params) or 'void'})"
    return c_prelude(uses_half_types(scop)) + "\n" + signature + "\n{\n" + "\n".join(views + body) + "\n}\n"


def uses_half_types(scop: Scop) -> bool:
    """Whether some array of ``scop`` holds a half type (its C needs their names)."""
    return any(a.dtype.is_half for a in scop.arrays.values())


def c_prelude(half_types: bool = False) -> str:
    """The includes and inline helpers (floor division, modulo) the emitted statements use;
    with ``half_types`` also the typedefs naming gcc's half types as CUDA does (nothing under a
    CUDA compiler, whose ``cuda_fp16.h`` and ``cuda_bf16.h`` define them)."""
    return _PRELUDE + (_HALF_TYPEDEFS if half_types else "")


def c_loop_nest(scop: Scop, loops: Node, *, openmp: bool = False, depth: int = 1,
                declare=()) -> list[str]:
    """The lines of the loop nest alone, indented ``depth`` levels: the kernel-local scalars
    named in ``declare`` (zero-initialized), then the loops (for a function body, or for
    substitution into existing C code, where the arrays and parameters are already in scope)."""
    pad = "  " * depth
    out = [f"{pad}{c_type_name(scop.arrays[name].dtype)} {name} = 0;" for name in declare]
    _emit_node(loops, scop, CExpr(scop), out, depth, openmp)
    return out


def _emit_node(node: Node, scop: Scop, emit, out: list[str], depth: int, openmp: bool) -> None:
    pad = "  " * depth
    if isinstance(node, Block):
        for child in node.body:
            _emit_node(child, scop, emit, out, depth, openmp)
    elif isinstance(node, For):
        threaded = openmp and runs_on_threads(node)
        if threaded:
            out.append(f"{pad}#pragma omp parallel for")
        out.append(f"{pad}for (long {node.var} = {emit(node.init)}; {emit(node.cond)}; "
                   f"{node.var} += {node.step}) {{")
        # a parallel loop inside a threaded loop runs sequentially (as in the LLVM backend)
        _emit_node(node.body, scop, emit, out, depth + 1, openmp and not threaded)
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
