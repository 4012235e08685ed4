"""A Scop written directly in isl notation, for research use.

Domains and the schedule are isl text; statement bodies are one assignment in the DSL's Python
syntax, over the iterator names of the domain's tuple::

    scop = polyopt.scop_from_isl(
        name="shift",
        arrays={"A": "f64[N]", "B": "f64[N]"},
        statements=[("[N] -> { S0[i] : 0 <= i < N - 1 }", "B[i] = A[i + 1] * 2.0")],
        schedule="[N] -> { S0[i] -> [i] }",      # optional: default is the list order
    )
"""
from __future__ import annotations

import ast

import islpy as isl

from polyopt.analysis.affine import extent_isl
from polyopt.errors import FrontendError
from polyopt.frontends.dsl import ExpressionParser, NameScope, free_names
from polyopt.islutil import maps_of
from polyopt.analysis.scop import Argument, Array, Scop
from polyopt.types import ELEMENT_TYPES, i64


def _array_type(name: str, spec) -> Array:
    if isinstance(spec, str):
        dtype_name, _, rest = spec.partition("[")
        extents = [e.strip() for e in rest.rstrip("]").split(",") if e.strip()]
    else:
        dtype_name, extents = spec[0], list(spec[1])
    dtype = ELEMENT_TYPES.get(str(dtype_name).strip())
    if dtype is None:
        raise FrontendError(f"array '{name}': unknown element type {dtype_name!r}", source_name="<isl>")
    return Array(name, dtype, tuple(str(e) for e in extents))


def scop_from_isl(*, name: str, arrays: dict, statements: list[tuple[str, str]],
                  scalars: dict | None = None, params: list[str] | None = None,
                  context: str | None = None, schedule: str | None = None) -> Scop:
    """Build a Scop from isl domain/schedule text and DSL assignment bodies.

    ``arrays`` maps names to ``"f64[N, M]"`` (or ``("f64", ["N", "M"])``); ``scalars`` maps
    scalar argument names to element type names; ``params`` lists size parameters passed
    explicitly (the others are inferred from array shapes). ``schedule`` is a flat isl union map
    or an isl schedule tree (``"{ domain: ... }"``); by default, statements run in list order.
    """
    array_specs = {n: _array_type(n, spec) for n, spec in arrays.items()}
    scalar_types = {n: ELEMENT_TYPES[t] for n, t in (scalars or {}).items()}
    domains = []
    for k, (domain_text, _) in enumerate(statements):
        try:
            domains.append(isl.Set(domain_text))
        except isl.Error as exc:
            raise FrontendError(f"statement {k}: cannot read domain {domain_text!r}: {exc}",
                                source_name="<isl>") from None
    all_params = set(params or [])
    for array in array_specs.values():
        for extent in array.shape:
            all_params |= free_names(extent)
    for domain in domains:
        space = domain.get_space()
        all_params |= {space.get_dim_name(isl.dim_type.param, k) for k in range(space.dim(isl.dim_type.param))}
    scope = NameScope(all_params, scalar_types, array_specs)
    parser = ExpressionParser("", "<isl>", 1, None)
    parser.scope = scope
    built = []
    for k, ((domain_text, body), domain) in enumerate(zip(statements, domains)):
        space = domain.get_space()
        stmt_name = space.get_tuple_name(isl.dim_type.set)
        if not stmt_name:
            raise FrontendError(f"statement {k}: the domain needs a tuple name, e.g. S{k}[i]", source_name="<isl>")
        scope.iterators = [space.get_dim_name(isl.dim_type.set, d) or f"i{d}"
                           for d in range(space.dim(isl.dim_type.set))]
        scope.spellings = {iterator: iterator for iterator in scope.iterators}
        parser.filename = f"<isl statement {stmt_name}>"
        try:
            node = ast.parse(body).body
        except SyntaxError as exc:
            raise FrontendError(f"cannot read the body of {stmt_name}: {exc.msg}",
                                source_name=parser.filename, line=exc.lineno, column=exc.offset) from None
        if len(node) != 1:
            raise FrontendError(f"the body of {stmt_name} must be exactly one assignment",
                                source_name=parser.filename)
        target, value = parser.assignment(node[0])
        built.append(parser.statement(stmt_name, domain, target, value, node[0]))
    param_list = tuple(sorted(all_params))
    ctx_text = context or f"[{', '.join(param_list)}] -> {{ : {' and '.join(f'{p} >= 0' for p in param_list) or 'true'} }}"
    ctx = isl.Set(ctx_text)
    for array in array_specs.values():
        for extent in array.shape:
            ctx = ctx.intersect(isl.Set(f"[{', '.join(param_list)}] -> {{ : {extent_isl(extent, param_list)} >= 0 }}"))
    all_arrays = dict(array_specs)
    for local, dtype in scope.locals.items():
        all_arrays[local] = Array(local, dtype, (), local=True)
    domain = isl.UnionSet.empty(ctx.get_space())
    for stmt in built:
        domain = domain.union(isl.UnionSet.from_set(stmt.domain))
    try:
        tree = _schedule(domain, built, schedule)
    except isl.Error as exc:
        raise FrontendError(f"cannot use the schedule {schedule!r}: {exc}", source_name="<isl>") from None
    _check_orders_conflicts(built, tree, ctx)
    arguments = [Argument(p, "param", i64) for p in (params or [])]
    arguments += [Argument(n, "scalar", t) for n, t in scalar_types.items()]
    arguments += [Argument(n, "array", a.dtype) for n, a in array_specs.items()]
    return Scop(name, param_list, ctx, all_arrays, tuple(built), tree, tuple(arguments))


def _check_orders_conflicts(statements, tree: isl.Schedule, context: isl.Set) -> None:
    """Refuse a schedule that gives two instances touching the same array element (one of them
    writing it) the same time: the program's meaning would depend on an order nobody chose
    (dependence analysis, the interpreter and each scheduler could each pick another)."""
    empty = isl.UnionMap.empty(context.get_space())
    writes, accesses = empty, empty
    for stmt in statements:
        for ref in stmt.accesses:
            relation = isl.UnionMap.from_map(ref.relation)
            accesses = accesses.union(relation)
            if ref.is_write:
                writes = writes.union(relation)
    conflicts = writes.apply_range(accesses.reverse())
    conflicts = conflicts.union(conflicts.reverse())
    domain = tree.get_domain()
    conflicts = conflicts.subtract(isl.UnionMap.from_domain_and_range(domain, domain)
                                   .intersect(isl.UnionSet.identity(domain)))
    times = tree.get_map().intersect_domain(domain)
    same_time = times.apply_range(times.reverse())
    unordered = conflicts.intersect(same_time).intersect_params(context)
    if unordered.is_empty():
        return
    pair = maps_of(unordered)[0]
    point = pair.wrap().sample_point()
    space = pair.get_space()

    def values(kind, count: int, first: int = 0) -> list[int]:
        return [point.get_coordinate_val(kind, first + k).to_python() for k in range(count)]
    n_in, n_out = space.dim(isl.dim_type.in_), space.dim(isl.dim_type.out)
    coords = values(isl.dim_type.set, n_in + n_out)
    names = [space.get_dim_name(isl.dim_type.param, k) for k in range(space.dim(isl.dim_type.param))]
    sizes = ", ".join(f"{n} = {v}" for n, v in zip(names, values(isl.dim_type.param, len(names))))
    first = f"{space.get_tuple_name(isl.dim_type.in_)}{list(coords[:n_in])}"
    second = f"{space.get_tuple_name(isl.dim_type.out)}{list(coords[n_in:])}"
    raise FrontendError(f"the schedule gives {first} and {second} the same time{' (' + sizes + ')' if sizes else ''}, "
                        "but one of them writes an array element the other reads or writes: their order "
                        "is undefined; give them distinct times", source_name="<isl>")


def _schedule(domain: isl.UnionSet, statements, text: str | None) -> isl.Schedule:
    if text is not None and text.lstrip().startswith("{ domain") or (text and "domain:" in text):
        return isl.Schedule(text)
    if text is None:
        pieces = [f"{s.name}[{', '.join(s.iterators)}] -> [{k}{''.join(', ' + i for i in s.iterators)}"
                  f"{', 0' * (max(len(t.iterators) for t in statements) - len(s.iterators))}]"
                  for k, s in enumerate(statements)]
        text = "{ " + "; ".join(pieces) + " }"
    flat = isl.UnionMap(text).intersect_domain(domain)
    return isl.Schedule.from_domain(domain).insert_partial_schedule(
        isl.MultiUnionPwAff.from_union_map(flat))
