"""Run a DSL kernel's original Python body as plain Python loops over numpy arrays.

This is the slow, obviously-faithful oracle for kernel definitions: the function body is executed
by CPython exactly as written, with

- the size parameters bound as globals, from array shapes (an extent that is a plain name, as
  ``"N"`` in ``f64["N", "M"]``) and from the ``int`` arguments;
- ``sqrt exp log sin cos tanh abs pow floor`` bound to numpy scalar functions (so element types
  are kept and errors give inf/nan as in C) and ``min``/``max`` to Python's builtins;
- decorators and annotations removed, so nothing from polyopt is needed to run it.
"""
from __future__ import annotations

import ast
import builtins
import inspect
import textwrap
from typing import Any, Callable, Mapping

import numpy as np


def _pow(base, exponent):
    # the DSL's pow() is floating point, also for integer operands
    if not isinstance(base, (float, np.floating)):
        base = float(base)
    return np.power(base, exponent)


def _floor(x):
    return x if isinstance(x, (int, np.integer)) else np.floor(x)


MATH_FUNCTIONS: dict[str, Callable] = {
    "sqrt": np.sqrt, "exp": np.exp, "log": np.log, "sin": np.sin, "cos": np.cos,
    "tanh": np.tanh, "abs": abs, "pow": _pow, "floor": _floor, "min": min, "max": max,
}


def _function_source(kernel: Any) -> tuple[str, str, int]:
    """(dedented source, file name, first line) of the undecorated kernel function."""
    if isinstance(kernel, str):
        return textwrap.dedent(kernel), "<kernel>", 1
    function = (getattr(kernel, "py_function", None) or getattr(kernel, "__wrapped__", None)
                or kernel)
    if not inspect.isfunction(function):
        raise TypeError(f"cannot find the Python function of {kernel!r}")
    try:
        _, first_line = inspect.getsourcelines(function)
    except OSError:  # defined from a string: use the text the kernel object kept
        if isinstance(getattr(kernel, "source", None), str):
            return textwrap.dedent(kernel.source), "<kernel>", 1
        raise
    filename = inspect.getsourcefile(function) or "<kernel>"
    return textwrap.dedent(inspect.getsource(function)), filename, first_line


def _arguments(func_def: ast.FunctionDef) -> list[ast.arg]:
    return func_def.args.posonlyargs + func_def.args.args + func_def.args.kwonlyargs


def _extents(annotation: ast.Subscript) -> list[str]:
    items = annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else [annotation.slice]
    return [str(item.value) if isinstance(item, ast.Constant) else ast.unparse(item)
            for item in items]


def bind_sizes(func_def: ast.FunctionDef, args: Mapping[str, Any]) -> dict[str, int]:
    """The size parameters of the kernel, inferred from the shapes of its array arguments."""
    sizes: dict[str, int] = {}
    pending: list[tuple[str, str, int]] = []
    for arg in _arguments(func_def):
        if not isinstance(arg.annotation, ast.Subscript):  # f64["N", "M"]
            continue
        if arg.arg not in args:
            raise TypeError(f"missing array argument {arg.arg!r}")
        shape = np.shape(args[arg.arg])
        extents = _extents(arg.annotation)
        if len(shape) != len(extents):
            raise ValueError(f"{arg.arg} has shape {shape}, expected {len(extents)} dimensions")
        for extent, size in zip(extents, shape):
            name = extent.strip()
            if name.isidentifier():
                if sizes.setdefault(name, size) != size:
                    raise ValueError(f"inconsistent {name}: {sizes[name]} and {size} ({arg.arg})")
            else:
                pending.append((arg.arg, extent, size))
    namespace = {"min": min, "max": max, **sizes,
                 **{k: v for k, v in args.items() if isinstance(v, (int, np.integer))}}
    for array, extent, size in pending:  # affine extents such as "N+1": check them
        if eval(extent, {"__builtins__": {}}, namespace) != size:
            raise ValueError(f"extent {extent!r} of {array} does not match its size {size}")
    return sizes


def run_python_loops(kernel: Any, args: Mapping[str, Any]) -> None:
    """Execute ``kernel``'s Python body on ``args`` (arrays are updated in place).

    ``kernel`` is a ``@polyopt.kernel`` object (its ``py_function`` or ``__wrapped__`` is used),
    a plain function, or the source text of one function definition.
    """
    source, filename, first_line = _function_source(kernel)
    tree = ast.parse(source)
    func_def = next(node for node in tree.body if isinstance(node, ast.FunctionDef))
    sizes = bind_sizes(func_def, args)
    func_def.decorator_list = []
    func_def.returns = None
    for arg in _arguments(func_def):
        arg.annotation = None
    module = ast.Module(body=[func_def], type_ignores=[])
    ast.increment_lineno(module, first_line - 1)
    namespace: dict[str, Any] = {"__builtins__": builtins, **MATH_FUNCTIONS, **sizes}
    exec(compile(module, filename, "exec"), namespace)
    namespace[func_def.name](**args)
