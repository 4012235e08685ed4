"""Integer expressions (subscripts, bounds) as isl affine text, or a refusal saying why not.

An expression is affine when it is built from loop iterators, size parameters and integer
literals with ``+``, ``-``, multiplication by a literal, and ``//`` or ``%`` (or C's truncating
``tdiv``/``tmod``) by a positive literal; ``min``/``max`` are allowed where isl accepts piecewise
expressions (bounds). :func:`isl_constraint` translates conditions, where ``a if c else b`` is
also allowed (split into cases, as isl's text has no conditional expression).
"""
from __future__ import annotations

from polyopt.analysis.expr import (COMPARISON_OPS, Access, Binary, Const, Expr, Select, Unary, Var, logical_not,
                          substitute, to_source, walk)


class NotAffine(ValueError):
    """``expr`` (a sub-expression of the one being translated) is not affine: ``reason`` says why."""

    def __init__(self, expr: Expr, reason: str):
        self.expr = expr
        self.reason = reason
        super().__init__(reason)


def _literal(expr: Expr) -> int | None:
    """The integer value of a literal (possibly negated), else None."""
    if isinstance(expr, Const) and not expr.dtype.is_float:
        return int(expr.value)
    if isinstance(expr, Unary) and expr.op == "neg":
        inner = _literal(expr.operand)
        return None if inner is None else -inner
    if isinstance(expr, Binary) and expr.op in ("+", "-", "*"):
        a, b = _literal(expr.lhs), _literal(expr.rhs)
        if a is not None and b is not None:
            return a + b if expr.op == "+" else a - b if expr.op == "-" else a * b
    return None


def isl_text(expr: Expr, *, allow_min_max: bool = False) -> str:
    """isl syntax for the affine integer expression ``expr``; raises :class:`NotAffine`."""
    value = _literal(expr)
    if value is not None:
        return f"({value})"
    if isinstance(expr, Access):
        raise NotAffine(expr, f"array element {to_source(expr)} is data, not a loop iterator or "
                              "size parameter")
    if isinstance(expr, Var):
        if expr.kind not in ("iter", "param"):
            raise NotAffine(expr, f"'{expr.name}' is a data value, not a loop iterator or size parameter")
        return expr.name
    if expr.dtype.is_float:
        raise NotAffine(expr, "floating-point value where an integer affine expression is needed")
    sub = lambda e: isl_text(e, allow_min_max=allow_min_max)  # noqa: E731
    if isinstance(expr, Unary) and expr.op == "neg":
        return f"(-{sub(expr.operand)})"
    if isinstance(expr, Binary):
        op = expr.op
        if op in ("+", "-"):
            return f"({sub(expr.lhs)} {op} {sub(expr.rhs)})"
        if op == "*":
            left, right = _literal(expr.lhs), _literal(expr.rhs)
            if left is None and right is None:
                raise NotAffine(expr, "product of two non-constant terms")
            return f"({left} * {sub(expr.rhs)})" if left is not None else f"({sub(expr.lhs)} * {right})"
        if op in ("//", "%", "tdiv", "tmod"):
            divisor = _literal(expr.rhs)
            if divisor is None or divisor <= 0:
                shown = {"tdiv": "/", "tmod": "%"}.get(op, op)
                raise NotAffine(expr, f"'{shown}' by something other than a positive integer constant")
            return _division(op, sub(expr.lhs), divisor)
        if op in ("min", "max") and allow_min_max:
            return f"{op}({sub(expr.lhs)}, {sub(expr.rhs)})"
        if op in ("min", "max"):
            raise NotAffine(expr, f"{op}() is only allowed in loop bounds")
        raise NotAffine(expr, f"operator '{op}' is not affine")
    raise NotAffine(expr, f"{type(expr).__name__.lower()} is not affine")


def _division(op: str, dividend: str, divisor: int) -> str:
    """isl text of floor (``//``, ``%``) or truncating (``tdiv``, ``tmod``) division by a constant."""
    if op == "//":
        return f"floor({dividend} / {divisor})"
    if op == "%":
        return f"(({dividend}) mod {divisor})"
    # truncation: floor for a non-negative dividend, ceil for a negative one
    quotient = f"(floor(max({dividend}, 0) / {divisor}) + ceil(min({dividend}, 0) / {divisor}))"
    return quotient if op == "tdiv" else f"({dividend} - {divisor} * {quotient})"


#: C/Python comparison operators in isl syntax.
ISL_COMPARE = {"<": "<", "<=": "<=", ">": ">", ">=": ">=", "==": "=", "!=": "!="}


def isl_constraint(cond: Expr) -> str:
    """isl constraint text of the boolean expression ``cond``: affine comparisons combined with
    and/or/not; conditional expressions inside a comparison are split into cases. Raises
    :class:`NotAffine`."""
    if isinstance(cond, Const):
        return "true" if cond.value else "false"
    if isinstance(cond, Unary) and cond.op == "not":
        return f"not ({isl_constraint(cond.operand)})"
    if isinstance(cond, Binary) and cond.op in ("and", "or"):
        return f"({isl_constraint(cond.lhs)} {cond.op} {isl_constraint(cond.rhs)})"
    if isinstance(cond, Binary) and cond.op in COMPARISON_OPS:
        cases = []
        for guards, case in _cases(cond):
            text = f"{isl_text(case.lhs, allow_min_max=True)} {ISL_COMPARE[case.op]} " \
                   f"{isl_text(case.rhs, allow_min_max=True)}"
            cases.append(" and ".join([f"({isl_constraint(g)})" for g in guards] + [text]))
        return "(" + " or ".join(f"({c})" for c in cases) + ")"
    raise NotAffine(cond, "a condition must compare loop iterators and size parameters")


def _cases(expr: Expr) -> list[tuple[tuple[Expr, ...], Expr]]:
    """``expr`` without conditional expressions: (guards, expression) for each case."""
    select = next((n for n in walk(expr) if isinstance(n, Select)), None)
    if select is None:
        return [((), expr)]
    out = []
    for guard, branch in ((select.cond, select.then), (logical_not(select.cond), select.otherwise)):
        rest = substitute(expr, lambda n, b=branch: b if n is select else None)
        out += [((guard,) + guards, case) for guards, case in _cases(rest)]
    return out


def extent_expr(text: str, params) -> Expr:
    """The integer expression tree of an array extent written as affine text (``"N + 1"``)."""
    import ast
    import functools

    from polyopt.analysis.expr import binary
    from polyopt.types import i64

    ops = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Mod: "%"}

    def convert(node):
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return Const(node.value, i64)
        if isinstance(node, ast.Name) and node.id in params:
            return Var(node.id, "param")
        if isinstance(node, ast.BinOp) and type(node.op) in ops:
            return binary(ops[type(node.op)], convert(node.left), convert(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return Unary("neg", convert(node.operand), i64)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("min", "max") and len(node.args) >= 2 and not node.keywords:
            return functools.reduce(lambda a, b: binary(node.func.id, a, b), map(convert, node.args))
        raise ValueError(f"array extent {text!r} is not an affine expression of the parameters")

    return convert(ast.parse(text, mode="eval").body)


def extent_isl(text: str, params) -> str:
    """isl syntax of an array extent written in Python syntax (``"N // 2"`` -> ``floor(N / 2)``)."""
    return isl_text(extent_expr(text, params), allow_min_max=True)
