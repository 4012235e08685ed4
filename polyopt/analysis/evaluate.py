"""The meaning of a statement expression: :func:`evaluate` gives its value with the generated
code's typing (floating-point values rounded to their type, integers wrapped to their width,
floor division, short-circuit logic). The interpreter, argument binding (array extents) and the
CUDA host program all evaluate through it."""
from __future__ import annotations

import numpy as np

from polyopt.analysis import expr as E


def evaluate(e: E.Expr, env: dict, arrays: dict):
    """Value of ``e`` with names from ``env`` and array elements from ``arrays``.

    Floating-point values are numpy scalars of the node's type (so f32 arithmetic rounds like
    the generated code); integers are Python ints with floor ``//`` and ``%`` (a zero divisor
    raises ZeroDivisionError, as the compiled kernel does), wrapped to their type's width and
    signedness after each operation as the generated code wraps (``INT64_MIN // -1`` is
    ``INT64_MIN``, numpy's result).
    """
    if isinstance(e, E.Const):
        return typed(e.value, e.dtype)
    if isinstance(e, E.Var):
        return env[e.name]
    if isinstance(e, E.Access):
        return typed(arrays[e.array][tuple(int(evaluate(i, env, arrays)) for i in e.indices)], e.dtype)
    if isinstance(e, E.Unary):
        value = evaluate(e.operand, env, arrays)
        return (not value) if e.op == "not" else -value
    if isinstance(e, E.Cast):
        return typed(evaluate(e.operand, env, arrays), e.dtype)
    if isinstance(e, E.Select):
        branch = e.then if evaluate(e.cond, env, arrays) else e.otherwise
        return evaluate(branch, env, arrays)
    if isinstance(e, E.Call):
        args = [evaluate(a, env, arrays) for a in e.args]
        return typed(_MATH[e.func](*args), e.dtype)
    if isinstance(e, E.Binary) and e.op in E.LOGICAL_OPS:  # short-circuit, as Python and the code
        x = bool(evaluate(e.lhs, env, arrays))
        return x if x == (e.op == "or") else bool(evaluate(e.rhs, env, arrays))
    if isinstance(e, E.Binary):
        x, y = evaluate(e.lhs, env, arrays), evaluate(e.rhs, env, arrays)
        return typed(BINARY_OPERATORS[e.op](x, y), e.dtype)
    raise TypeError(f"cannot evaluate {e!r}")


def typed(value, dtype):
    """``value`` as a value of ``dtype``: a numpy scalar for floats, a bool, or an int wrapped
    to the type's width."""
    if dtype.is_float:
        return dtype.numpy.type(value)
    if dtype.name == "bool":
        return bool(value)
    value = int(value)
    low, high = dtype.limits
    return value if low <= value <= high else _wrapped(value, dtype)


def _wrapped(value: int, dtype) -> int:
    """``value`` modulo 2**bits, in the range of the integer type ``dtype`` (two's complement)."""
    value &= (1 << dtype.bits) - 1
    return value - (1 << dtype.bits) if not dtype.unsigned and value >> (dtype.bits - 1) else value


def _truncating_div(x, y):
    q = abs(x) // abs(y)
    return q if (x >= 0) == (y >= 0) else -q


_MATH = {"sqrt": np.sqrt, "exp": np.exp, "log": np.log, "sin": np.sin, "cos": np.cos,
         "tanh": np.tanh, "abs": abs, "pow": np.power, "floor": np.floor}
#: Python's value of each binary operator of the IR on two operand values (also what
#: codegen/ast_check_sizes.py compiles loop expressions with).
BINARY_OPERATORS = {
    "+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y,
    "/": lambda x, y: x / y, "//": lambda x, y: x // y, "%": lambda x, y: x % y,
    "**": lambda x, y: x ** y, "tdiv": _truncating_div,
    "tmod": lambda x, y: x - y * _truncating_div(x, y),
    "min": lambda x, y: y if y < x else x, "max": lambda x, y: y if y > x else x,
    "<": lambda x, y: x < y, "<=": lambda x, y: x <= y, ">": lambda x, y: x > y,
    ">=": lambda x, y: x >= y, "==": lambda x, y: x == y, "!=": lambda x, y: x != y,
}
