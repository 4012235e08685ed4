"""The loop-spec DSL: a plain Python function, parsed with :mod:`ast`, becomes a Scop.

::

    @polyopt.kernel
    def gemm(alpha: f64, beta: f64, C: f64["NI", "NJ"], A: f64["NI", "NK"], B: f64["NK", "NJ"]):
        for i in range(NI):
            for j in range(NJ):
                C[i, j] *= beta
            ...

Sizes (``NI``...) are symbolic parameters, bound from array shapes at call time; a parameter
that is no array extent is declared ``TSTEPS: int``. The function body is never run by Python.
"""
from __future__ import annotations

import ast
import functools
import inspect
import textwrap
from dataclasses import dataclass, field

import islpy as isl

from polyopt.analysis import expr as E
from polyopt.analysis.affine import ISL_COMPARE, NotAffine, isl_text
from polyopt.islutil import ISL_KEYWORDS, isl_safe_name
from polyopt.errors import FrontendError
from polyopt.analysis.scop import Argument, Array, Scop, Statement
from polyopt.types import ELEMENT_TYPES, DType, as_dtype, boolean, f32, f64, i64
from polyopt.frontends.common import assemble_scop, build_statement, domain_set
from polyopt.frontends.schedule_tree import Leaf, Loop

_MODULE_PREFIXES = ("math", "np", "numpy", "po", "polyopt")
_AUGMENTED = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
              ast.Mod: "%", ast.Pow: "**"}
_COMPARE = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}


class Kernel:
    """A DSL kernel: call it like the function (it compiles once and runs native code).

    ``kernel.scop`` is the parsed Scop, ``kernel.py_function`` the original Python function.
    """

    def __init__(self, function, *, float_dtype: DType | None = None, source: str | None = None):
        self.py_function = function
        self.__wrapped__ = function
        self.name = function.__name__
        self.float_dtype = float_dtype
        functools.update_wrapper(self, function)
        if source is None:
            try:
                source = inspect.getsource(function)
            except (OSError, TypeError):
                raise FrontendError(f"cannot read the source of '{function.__name__}' (defined "
                                    "interactively?); use polyopt.kernel_from_source(text)") from None
            self.filename = inspect.getsourcefile(function) or "<kernel>"
            self.first_line = function.__code__.co_firstlineno
        else:
            self.filename, self.first_line = "<string>", 1
        self.source = textwrap.dedent(source)
        #: columns removed by dedenting (a kernel defined inside a function or class), so that
        #: error positions are those of the file
        self.first_column = _indentation(source) - _indentation(self.source)

    @functools.cached_property
    def scop(self) -> Scop:
        return parse(self.source, filename=self.filename, first_line=self.first_line,
                     first_column=self.first_column, float_dtype=self.float_dtype)

    def with_dtype(self, dtype) -> "Kernel":
        """The same kernel with every floating-point array and scalar of type ``dtype`` (scalars
        f32 where ``dtype`` is a half type: half types are for arrays)."""
        clone = Kernel.__new__(Kernel)
        clone.__dict__.update({k: v for k, v in self.__dict__.items() if k != "scop"})
        clone.float_dtype = as_dtype(dtype)
        return clone

    def __call__(self, *args, **kwargs):
        from polyopt.targets.cpu import compile as compile_kernel
        return compile_kernel(self)(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<polyopt kernel {self.name}>"


def kernel(function=None, *, dtype=None):
    """Decorator turning a DSL function into a :class:`Kernel` (``@kernel`` or ``@kernel(dtype=f32)``)."""
    if function is None:
        return lambda f: Kernel(f, float_dtype=as_dtype(dtype) if dtype else None)
    return Kernel(function, float_dtype=as_dtype(dtype) if dtype else None)


def kernel_from_source(source: str, *, dtype=None) -> Kernel:
    """A kernel from DSL source text holding one ``def`` (for tools and generated tests)."""
    namespace: dict = {}
    text = textwrap.dedent(source)
    try:
        tree = ast.parse(text)
    except SyntaxError:  # the parser reports it as a FrontendError at its position
        parse(text, filename="<string>", first_column=_indentation(source) - _indentation(text))
        raise
    func_def = next((n for n in tree.body if isinstance(n, ast.FunctionDef)), None)
    if func_def is None:
        raise FrontendError("no function definition in the kernel source")
    func_def.decorator_list = []
    exec(compile(ast.Module([func_def], []), "<string>", "exec"), _annotation_namespace(), namespace)
    return Kernel(namespace[func_def.name], float_dtype=as_dtype(dtype) if dtype else None,
                  source=source)


def _annotation_namespace() -> dict:
    return {**ELEMENT_TYPES}


# ---------------------------------------------------------------------------------------------
@dataclass
class NameScope:
    """What a name means at a point of the kernel body."""

    params: set[str]
    scalars: dict[str, DType]
    arrays: dict[str, Array]
    locals: dict[str, DType] = field(default_factory=dict)
    #: the loop iterators in scope, as spelled in isl text (and in the Scop)
    iterators: list[str] = field(default_factory=list)
    #: Python spelling -> isl spelling of the iterators in scope (they differ only where isl
    #: reserves the Python name: ``for mod in range(N)`` iterates ``mod_``)
    spellings: dict[str, str] = field(default_factory=dict)


class ExpressionParser:
    """Walks the function's AST once, producing statements, domains and the loop tree."""

    def __init__(self, source: str, filename: str, first_line: int, float_dtype: DType | None,
                 first_column: int = 0):
        self.source = source
        self.filename = filename
        self.line_offset = first_line - 1
        self.column_offset = first_column
        self.float_dtype = float_dtype
        self.statements: list[Statement] = []

    # ----- errors --------------------------------------------------------------------------
    def error(self, node: ast.AST | None, message: str) -> FrontendError:
        line = getattr(node, "lineno", None)
        col = getattr(node, "col_offset", None)
        construct = ast.unparse(node).splitlines()[0] if isinstance(node, ast.AST) and not isinstance(
            node, (ast.For, ast.If, ast.FunctionDef)) else None  # first line only (while, with...)
        return FrontendError(message, source_name=self.filename,
                             line=None if line is None else line + self.line_offset,
                             column=None if col is None else col + 1 + self.column_offset,
                             construct=construct)

    # ----- signature -------------------------------------------------------------------------
    def parse(self) -> Scop:
        try:
            module = ast.parse(self.source)
        except SyntaxError as exc:
            raise FrontendError(f"syntax error: {exc.msg}", source_name=self.filename,
                                line=(exc.lineno or 0) + self.line_offset,
                                column=None if exc.offset is None else exc.offset + self.column_offset)
        func = next((n for n in module.body if isinstance(n, ast.FunctionDef)), None)
        if func is None:
            raise self.error(None, "expected a function definition")
        self.func = func
        #: every name the function mentions: a renamed iterator takes none of them
        self.names = {n.id for n in ast.walk(func) if isinstance(n, ast.Name)} | {
            a.arg for a in ast.walk(func) if isinstance(a, ast.arg)}
        arguments, scope = self._signature(func)
        self.scope = scope
        body = [s for s in func.body if not _is_docstring(s)]
        tree_nodes = self._block(body, [])
        if not self.statements:
            raise self.error(func, f"kernel '{func.name}' has no statements")
        return assemble_scop(func.name, tuple(sorted(scope.params)), dict(scope.arrays), scope.locals,
                             self.statements, tree_nodes, arguments, self.source)

    def _signature(self, func: ast.FunctionDef):
        params: set[str] = set()
        scalars: dict[str, DType] = {}
        arrays: dict[str, Array] = {}
        arguments: list[Argument] = []
        declared_params = []
        all_args = func.args.posonlyargs + func.args.args + func.args.kwonlyargs
        if func.args.vararg or func.args.kwarg:
            raise self.error(func, "kernels take named arguments only (no *args/**kwargs)")
        for arg in all_args:
            ann = arg.annotation
            if ann is None:
                raise self.error(arg, f"argument '{arg.arg}' needs an annotation "
                                      "(int, f32/f64/i32/i64, or f64[\"N\", ...])")
            kind, dtype, shape = self._annotation(arg, ann)
            if kind == "param":
                params.add(arg.arg)
                declared_params.append(arg.arg)
                arguments.append(Argument(arg.arg, "param", i64))
            elif kind == "scalar":
                scalars[arg.arg] = dtype
                arguments.append(Argument(arg.arg, "scalar", dtype))
            else:
                arrays[arg.arg] = Array(arg.arg, dtype, shape)
                arguments.append(Argument(arg.arg, "array", dtype))
        # every free name of an extent is a size parameter
        for array in arrays.values():
            for extent in array.shape:
                params |= free_names(extent)
        reserved = sorted(params & ISL_KEYWORDS)
        if reserved:
            raise self.error(func, f"size parameter '{reserved[0]}' is a word isl reserves; "
                                   "give the size another name")
        clash = params & (set(scalars) | set(arrays))
        if clash:
            raise self.error(func, f"'{sorted(clash)[0]}' is used as an array extent and as a data argument")
        self._check_extents(func, arrays, params)
        return arguments, NameScope(params, scalars, arrays)

    def _annotation(self, arg: ast.arg, ann: ast.expr):
        base = ann.value if isinstance(ann, ast.Subscript) else ann
        type_name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", None)
        if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
            try:
                return self._annotation(arg, ast.parse(ann.value, mode="eval").body)
            except SyntaxError:
                raise self.error(ann, f"cannot read the annotation of '{arg.arg}'") from None
        if not isinstance(ann, ast.Subscript):
            if type_name == "int":
                return "param", i64, ()
            if type_name == "float":
                return "scalar", self._element(f64, scalar=True), ()
            if type_name in ELEMENT_TYPES:
                return "scalar", self._element(ELEMENT_TYPES[type_name], scalar=True), ()
            raise self.error(ann, f"unknown annotation for '{arg.arg}': use int, f32, f64, i32, i64 "
                                  "or an array type such as f64[\"N\", \"M\"]")
        if type_name not in ELEMENT_TYPES:
            raise self.error(ann, f"unknown element type '{type_name}' for array '{arg.arg}'")
        items = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
        shape = []
        for item in items:
            if isinstance(item, ast.Constant) and isinstance(item.value, (str, int)):
                text = str(item.value)
            else:
                text = ast.unparse(item)
            shape.append(text)
        return "array", self._element(ELEMENT_TYPES[type_name]), tuple(shape)

    def _element(self, dtype: DType, scalar: bool = False) -> DType:
        """``dtype``, or for a float the kernel's float type (:meth:`Kernel.with_dtype`); a
        scalar of a kernel made half stays f32 (half types are for arrays)."""
        if not (dtype.is_float and self.float_dtype):
            return dtype
        return f32 if scalar and self.float_dtype.is_half else self.float_dtype

    def _check_extents(self, func, arrays, params):
        for array in arrays.values():
            for extent in array.shape:
                try:
                    node = ast.parse(extent, mode="eval").body
                    affine = isl_text(self._int_expr(node, params_only=params), allow_min_max=True)
                    isl.Set(f"[{', '.join(sorted(params))}] -> {{ : {affine} >= 0 }}")
                except (SyntaxError, FrontendError, NotAffine, isl.Error):
                    raise self.error(func, f"extent '{extent}' of array '{array.name}' is not an "
                                           "affine expression of size parameters") from None

    # ----- statements --------------------------------------------------------------------------
    def _block(self, body: list[ast.stmt], conditions: list[str]) -> list:
        nodes: list = []
        for node in body:
            nodes.extend(self._statement(node, conditions))
        return nodes

    def _statement(self, node: ast.stmt, conditions: list[str]) -> list:
        if isinstance(node, ast.For):
            return [self._for(node, conditions)]
        if isinstance(node, ast.If):
            cond = self._condition(node.test)
            then = self._block(node.body, conditions + [cond])
            other = self._block(node.orelse, conditions + [f"not ({cond})"]) if node.orelse else []
            return then + other
        if isinstance(node, (ast.Assign, ast.AugAssign)):
            return [self._assignment(node, conditions)]
        if isinstance(node, ast.Pass) or _is_docstring(node):
            return []
        what = {ast.While: "while loops", ast.Break: "break statements",
                ast.Continue: "continue statements", ast.Return: "return statements",
                ast.AnnAssign: "annotated assignments",
                ast.FunctionDef: "nested functions", ast.With: "with blocks"}.get(type(node))
        raise self.error(node, f"{what or type(node).__name__ + ' statements'} are not supported "
                               "in a static control part")

    def _for(self, node: ast.For, conditions: list[str]) -> Loop:
        if not isinstance(node.target, ast.Name):
            raise self.error(node.target, "a loop variable must be a plain name")
        var = node.target.id
        if node.orelse:
            raise self.error(node, "for ... else is not supported")
        call = node.iter
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                and call.func.id == "range" and 1 <= len(call.args) <= 3 and not call.keywords):
            raise self.error(call, "loops must iterate over range(hi), range(lo, hi) or range(lo, hi, step)")
        if var in self.scope.spellings or var in self.scope.params or var in self.scope.arrays \
                or var in self.scope.scalars or var in self.scope.locals:
            raise self.error(node.target, f"loop variable '{var}' shadows another name")
        python_name, var = var, isl_safe_name(var, self.names)
        args = call.args
        lo_node, hi_node = (ast.Constant(0), args[0]) if len(args) == 1 else (args[0], args[1])
        step = 1
        if len(args) == 3:
            step = _int_literal(args[2])
            if step is None or step == 0:
                raise self.error(args[2], "the step of range() must be a nonzero integer constant")
        lo = self._bound(lo_node, lower=step > 0)
        hi = self._bound(hi_node, lower=step < 0)
        if step > 0:
            cons = [f"{var} >= {b}" for b in lo] + [f"{var} < {b}" for b in hi]
        else:
            cons = [f"{var} <= {b}" for b in lo] + [f"{var} > {b}" for b in hi]
        if abs(step) != 1:
            start = self._affine(lo_node, allow_min_max=True)
            cons.append(f"({var} - {start}) mod {abs(step)} = 0")
        self.scope.iterators.append(var)
        self.scope.spellings[python_name] = var
        try:
            body = self._block(node.body, conditions + cons)
        finally:
            self.scope.iterators.pop()
            del self.scope.spellings[python_name]
        return Loop(var, step, body)

    def _bound(self, node: ast.expr, *, lower: bool) -> list[str]:
        """Affine text(s) of a loop bound; max() of lower / min() of upper bounds is split."""
        splittable = "max" if lower else "min"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == splittable:
            return [b for a in node.args for b in self._bound(a, lower=lower)]
        return [self._affine(node, allow_min_max=True)]

    def _affine(self, node: ast.expr, *, allow_min_max: bool = False) -> str:
        try:
            return isl_text(self._int_expr(node), allow_min_max=allow_min_max)
        except NotAffine as exc:
            raise self.error(node, f"not affine: {exc.reason}") from None

    def _int_expr(self, node: ast.expr, params_only: set[str] | None = None) -> E.Expr:
        """An integer expression over iterators and parameters (used for bounds and extents)."""
        if params_only is not None:
            saved = self.__dict__.get("scope")
            self.scope = NameScope(params_only, {}, {})
            try:
                return self._int_expr(node)
            finally:
                if saved is None:
                    del self.scope
                else:
                    self.scope = saved
        value = self._expr(node)
        if value.dtype.is_float or value.dtype == boolean:
            raise self.error(node, f"an integer expression is needed here, not a {value.dtype} value")
        return value

    def _condition(self, node: ast.expr) -> str:
        """isl constraint text of an affine condition (if statements)."""
        if isinstance(node, ast.BoolOp):
            joiner = " and " if isinstance(node.op, ast.And) else " or "
            return "(" + joiner.join(self._condition(v) for v in node.values) + ")"
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return f"not ({self._condition(node.operand)})"
        if isinstance(node, ast.Compare):
            terms = [self._affine(node.left, allow_min_max=True)]
            terms += [self._affine(c, allow_min_max=True) for c in node.comparators]
            parts = []
            for k, op in enumerate(node.ops):
                if type(op) not in _COMPARE:
                    raise self.error(node, "only <, <=, >, >=, ==, != comparisons are allowed")
                parts.append(f"{terms[k]} {ISL_COMPARE[_COMPARE[type(op)]]} {terms[k + 1]}")
            return "(" + " and ".join(parts) + ")"
        if isinstance(node, ast.Constant) and isinstance(node.value, bool):
            return "true" if node.value else "false"
        raise self.error(node, "if conditions must be affine comparisons of loop variables and "
                               "size parameters (combined with and/or/not)")

    def _assignment(self, node: ast.Assign | ast.AugAssign, conditions: list[str]) -> Leaf:
        return self._add_statement(*self.assignment(node), conditions, node)

    def assignment(self, node: ast.stmt) -> tuple[E.Access, E.Expr]:
        """Target and (typed) value of an assignment or augmented assignment."""
        if not isinstance(node, (ast.Assign, ast.AugAssign)):
            raise self.error(node, "a statement must be an assignment")
        if isinstance(node, ast.Assign):
            if len(node.targets) != 1 or isinstance(node.targets[0], ast.Tuple):
                raise self.error(node, "assign to one target at a time")
            target_node, value = node.targets[0], self._expr(node.value)
        else:
            target_node = node.target
            value = None
        if isinstance(target_node, ast.Name):
            target = self._local_target(target_node, node, value)
        elif isinstance(target_node, ast.Subscript):
            target = self._access(target_node)
        else:
            raise self.error(target_node, "the target of an assignment must be an array element "
                                          "or a local scalar")
        if isinstance(node, ast.AugAssign):
            op = _AUGMENTED.get(type(node.op))
            if op is None:
                raise self.error(node, "unsupported augmented assignment operator")
            value = E.binary(op, target, self._expr(node.value))
        if target.array in self.scope.locals and value.dtype.is_float and not target.dtype.is_float:
            raise self.error(node, f"local scalar '{target.array}' holds integers (from its first "
                                   "assignment) and would truncate this floating-point value; "
                                   "initialize it with a float such as 0.0")
        return target, E.cast(value, target.dtype)

    def _local_target(self, target: ast.Name, node, value: E.Expr | None) -> E.Access:
        name = target.id
        if name in self.scope.params or name in self.scope.spellings:
            raise self.error(target, f"cannot assign to size parameter or loop variable '{name}'")
        if name in self.scope.scalars or name in self.scope.arrays:
            raise self.error(target, f"cannot assign to argument '{name}' (assign to an array element)")
        if name not in self.scope.locals:
            if value is None:
                raise self.error(target, f"local scalar '{name}' is updated before it is assigned")
            self.scope.locals[name] = self._local_type(value, target)
        return E.Access(name, (), self.scope.locals[name])

    def _local_type(self, value: E.Expr, node) -> DType:
        if value.dtype == boolean:
            raise self.error(node, "local scalars hold numbers, not booleans")
        if isinstance(value, E.Const) and value.weak and value.dtype.is_float:
            floats = [a.dtype for a in self.scope.arrays.values() if a.dtype.is_float]
            return max(floats, key=lambda t: t.bits) if floats else f64
        return value.dtype

    def _add_statement(self, target: E.Access, value: E.Expr, conditions, node) -> Leaf:
        name = f"S{len(self.statements)}"
        iters = tuple(self.scope.iterators)
        domain = domain_set(name, iters, self.scope.params, conditions)
        self.statements.append(self.statement(name, domain, target, value, node))
        return Leaf(name, iters)

    def statement(self, name: str, domain: isl.Set, target: E.Access, value: E.Expr,
                  node: ast.stmt) -> Statement:
        """The Statement ``name`` over ``domain``, with its access relations."""
        return build_statement(name, tuple(self.scope.iterators), self.scope.params, domain, target,
                               value, node.lineno + self.line_offset, ast.unparse(node))

    # ----- expressions --------------------------------------------------------------------------
    def _expr(self, node: ast.expr) -> E.Expr:
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool):
                return E.Const(int(node.value), boolean)
            if isinstance(node.value, int):
                return E.Const(node.value, i64, weak=True)
            if isinstance(node.value, float):
                return E.Const(node.value, f64, weak=True)
            raise self.error(node, f"unsupported literal {node.value!r}")
        if isinstance(node, ast.Name):
            return self._name(node)
        if isinstance(node, ast.Subscript):
            return self._access(node)
        if isinstance(node, ast.BinOp):
            op = _AUGMENTED.get(type(node.op))
            if op is None:
                raise self.error(node, "unsupported operator")
            return E.binary(op, self._expr(node.left), self._expr(node.right))
        if isinstance(node, ast.UnaryOp):
            operand = self._expr(node.operand)
            if isinstance(node.op, ast.USub):
                return E.negate(operand)
            if isinstance(node.op, ast.UAdd):
                return operand
            if isinstance(node.op, ast.Not):
                return E.logical_not(operand)
            raise self.error(node, "unsupported unary operator")
        if isinstance(node, ast.Compare):
            operands = [self._expr(node.left)] + [self._expr(c) for c in node.comparators]
            result = None
            for k, op in enumerate(node.ops):
                if type(op) not in _COMPARE:
                    raise self.error(node, "unsupported comparison (is/in are not arithmetic)")
                term = E.binary(_COMPARE[type(op)], operands[k], operands[k + 1])
                result = term if result is None else E.binary("and", result, term)
            return result
        if isinstance(node, ast.BoolOp):
            op = "and" if isinstance(node.op, ast.And) else "or"
            return functools.reduce(lambda a, b: E.binary(op, a, b), [self._expr(v) for v in node.values])
        if isinstance(node, ast.IfExp):
            return E.select(self._expr(node.test), self._expr(node.body), self._expr(node.orelse))
        if isinstance(node, ast.Call):
            return self._call(node)
        raise self.error(node, f"{type(node).__name__} expressions are not supported in kernels")

    def _name(self, node: ast.Name) -> E.Expr:
        name, scope = node.id, self.scope
        if name in scope.spellings:
            return E.Var(scope.spellings[name], "iter")
        if name in scope.params:
            return E.Var(name, "param")
        if name in scope.scalars:
            return E.Var(name, "scalar", scope.scalars[name])
        if name in scope.locals:
            return E.Access(name, (), scope.locals[name])
        if name in scope.arrays:
            raise self.error(node, f"array '{name}' is used without a subscript")
        raise self.error(node, f"unknown name '{name}': not a loop variable, argument, size parameter "
                               "or previously assigned local scalar")

    def _access(self, node: ast.Subscript) -> E.Access:
        if not isinstance(node.value, ast.Name) or node.value.id not in self.scope.arrays:
            if isinstance(node.value, ast.Subscript):
                raise self.error(node, "write A[i, j], not A[i][j]")
            raise self.error(node, f"'{ast.unparse(node.value)}' is not an array argument")
        array = self.scope.arrays[node.value.id]
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if len(items) != len(array.shape):
            raise self.error(node, f"array '{array.name}' has {len(array.shape)} dimensions, "
                                   f"subscripted with {len(items)}")
        indices = []
        for item in items:
            if isinstance(item, ast.Slice):
                raise self.error(item, "slices are not supported; write loops")
            index = self._int_expr(item)
            try:
                isl_text(index)
            except NotAffine as exc:
                raise self.error(item, f"non-affine subscript of '{array.name}': {exc.reason}") from None
            indices.append(index)
        return E.Access(array.name, tuple(indices), array.dtype)

    def _call(self, node: ast.Call) -> E.Expr:
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) \
                and func.value.id in _MODULE_PREFIXES:
            name = func.attr
        elif isinstance(func, ast.Name):
            name = func.id
        else:
            raise self.error(node, "only math functions can be called in kernels")
        name = {"fabs": "abs", "minimum": "min", "maximum": "max", "power": "pow"}.get(name, name)
        if node.keywords:
            raise self.error(node, f"{name}() takes no keyword arguments here")
        args = [self._expr(a) for a in node.args]
        if name in ("min", "max"):
            if len(args) < 2:
                raise self.error(node, f"{name}() needs at least two arguments")
            return functools.reduce(lambda a, b: E.binary(name, a, b), args)
        if name in ("float", "int") and len(args) == 1:
            return E.cast(args[0], (self.float_dtype or f64) if name == "float" else i64)
        arity = E.MATH_FUNCTIONS.get(name)
        if arity is None:
            raise self.error(node, f"call to '{name}' is not allowed: kernels may call only "
                                   f"{', '.join(sorted(E.MATH_FUNCTIONS))}, min, max")
        if len(args) != arity:
            raise self.error(node, f"{name}() takes {arity} argument(s), got {len(args)}")
        if name == "floor" and not args[0].dtype.is_float:
            return args[0]
        return E.call(name, args)


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) \
        and isinstance(node.value.value, str)


def _indentation(text: str) -> int:
    """Leading spaces of the first non-blank line of ``text``."""
    line = next((l for l in text.splitlines() if l.strip()), "")
    return len(line) - len(line.lstrip())


def _int_literal(node: ast.expr) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _int_literal(node.operand)
        return None if inner is None else -inner
    return None


def free_names(text: str) -> set[str]:
    try:
        return {n.id for n in ast.walk(ast.parse(text, mode="eval")) if isinstance(n, ast.Name)} \
            - {"min", "max"}
    except SyntaxError:
        return set()


def parse(source: str, *, filename: str = "<kernel>", first_line: int = 1, first_column: int = 0,
          float_dtype: DType | None = None) -> Scop:
    """Parse the DSL function in ``source`` into a :class:`~polyopt.Scop`.

    ``first_line`` and ``first_column`` place ``source`` in ``filename`` (for error positions).
    """
    return ExpressionParser(textwrap.dedent(source), filename, first_line, float_dtype, first_column).parse()
