"""The reference interpreter: runs a Scop statement instance by statement instance, in the order
of its original schedule, in plain Python. Slow and independent of every code generator: it is
the test oracle (use it on small sizes).
"""
from __future__ import annotations


import islpy as isl
import numpy as np

from polyopt import expr as E
from polyopt.islutil import param_point
from polyopt.scop import Scop, Statement


def evaluate(e: E.Expr, env: dict, arrays: dict):
    """Value of ``e`` with names from ``env`` and array elements from ``arrays``.

    Floating-point values are numpy scalars of the node's type (so f32 arithmetic rounds like
    the generated code); integers are Python ints with floor ``//`` and ``%`` (a zero divisor
    raises ZeroDivisionError, as the compiled kernel does), wrapped to their type's width and
    signedness after each operation as the generated code wraps (``INT64_MIN // -1`` is
    ``INT64_MIN``, numpy's result).
    """
    if isinstance(e, E.Const):
        return _typed(e.value, e.dtype)
    if isinstance(e, E.Var):
        return env[e.name]
    if isinstance(e, E.Access):
        return _typed(arrays[e.array][tuple(int(evaluate(i, env, arrays)) for i in e.indices)], e.dtype)
    if isinstance(e, E.Unary):
        value = evaluate(e.operand, env, arrays)
        return (not value) if e.op == "not" else -value
    if isinstance(e, E.Cast):
        return _typed(evaluate(e.operand, env, arrays), e.dtype)
    if isinstance(e, E.Select):
        branch = e.then if evaluate(e.cond, env, arrays) else e.otherwise
        return evaluate(branch, env, arrays)
    if isinstance(e, E.Call):
        args = [evaluate(a, env, arrays) for a in e.args]
        return _typed(_MATH[e.func](*args), e.dtype)
    if isinstance(e, E.Binary) and e.op in E.LOGICAL_OPS:  # short-circuit, as Python and the code
        x = bool(evaluate(e.lhs, env, arrays))
        return x if x == (e.op == "or") else bool(evaluate(e.rhs, env, arrays))
    if isinstance(e, E.Binary):
        x, y = evaluate(e.lhs, env, arrays), evaluate(e.rhs, env, arrays)
        return _typed(_BINARY[e.op](x, y), e.dtype)
    raise TypeError(f"cannot evaluate {e!r}")


def _typed(value, dtype):
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
_BINARY = {
    "+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y,
    "/": lambda x, y: x / y, "//": lambda x, y: x // y, "%": lambda x, y: x % y,
    "**": lambda x, y: x ** y, "tdiv": _truncating_div,
    "tmod": lambda x, y: x - y * _truncating_div(x, y),
    "min": lambda x, y: y if y < x else x, "max": lambda x, y: y if y > x else x,
    "<": lambda x, y: x < y, "<=": lambda x, y: x <= y, ">": lambda x, y: x > y,
    ">=": lambda x, y: x >= y, "==": lambda x, y: x == y, "!=": lambda x, y: x != y,
}


def instances(scop: Scop, params: dict[str, int]) -> list[tuple[tuple[int, ...], str, tuple[int, ...]]]:
    """(time, statement name, iteration vector) of every instance, sorted by original time."""
    fixed = param_point(scop.params, params)
    schedule = scop.schedule.get_map().intersect_params(fixed)
    result = []
    for stmt in scop.statements:
        piece = schedule.intersect_domain(isl.UnionSet.from_set(stmt.domain.intersect_params(fixed)))
        n_in = len(stmt.iterators)

        def collect(point: isl.Point, name=stmt.name, n_in=n_in):
            n = point.get_space().dim(isl.dim_type.set)
            coords = [point.get_coordinate_val(isl.dim_type.set, k).to_python() for k in range(n)]
            result.append((tuple(coords[n_in:]), name, tuple(coords[:n_in])))

        piece.wrap().foreach_point(collect)
    result.sort()
    return result


def prepare(scop: Scop, params: dict[str, int], scalars: dict,
            arrays: dict[str, np.ndarray]) -> tuple[dict, dict[str, np.ndarray]]:
    """The environment (parameters and typed scalars) and the storage (the caller's arrays plus
    the Scop's local scalars) that :func:`execute` runs statement instances in."""
    env = {name: int(value) for name, value in params.items()}
    for name, value in scalars.items():
        dtype = next(a.dtype for a in scop.arguments if a.name == name)
        env[name] = _typed(value, dtype)
    storage = dict(arrays)
    for array in scop.arrays.values():
        if array.local:
            storage[array.name] = np.zeros((), dtype=array.dtype.numpy)
    return env, storage


def execute(stmt: Statement, env: dict, storage: dict[str, np.ndarray]) -> None:
    """One statement instance: evaluate its value with ``env`` (which binds its iterators), then
    store it to its target."""
    value = evaluate(stmt.value, env, storage)
    index = tuple(int(evaluate(i, env, storage)) for i in stmt.target.indices)
    storage[stmt.target.array][index] = value


def run(scop: Scop, params: dict[str, int], scalars: dict, arrays: dict[str, np.ndarray]) -> None:
    """Execute ``scop`` in place on ``arrays`` (numpy arrays, updated in place)."""
    env, storage = prepare(scop, params, scalars, arrays)
    statements = {s.name: s for s in scop.statements}
    with np.errstate(all="ignore"):
        for _, name, point in instances(scop, params):
            stmt = statements[name]
            execute(stmt, dict(env, **dict(zip(stmt.iterators, point))), storage)


def interpret(kernel, *args, **kwargs) -> None:
    """Run a kernel (or Scop) with the reference interpreter, arguments as for the compiled one."""
    from polyopt.runtime import bind_arguments

    scop = getattr(kernel, "scop", kernel)
    bound = bind_arguments(scop, args, kwargs)
    run(scop, bound.params, bound.scalars, bound.arrays)


__all__ = ["evaluate", "execute", "instances", "interpret", "prepare", "run"]
