"""What every loop frontend (Python DSL, C) does the same way once it has expression trees:
statement domains, access relations, the parameter context and the assembled Scop.
"""
from __future__ import annotations

import islpy as isl

from polyopt.analysis import expr as E
from polyopt.analysis.affine import extent_isl, isl_text
from polyopt.frontends.schedule_tree import original_schedule
from polyopt.analysis.scop import AccessRef, Argument, Array, Scop, Statement


def domain_set(name: str, iterators: tuple[str, ...], params, conditions: list[str]) -> isl.Set:
    """``[params] -> { name[iterators] : conditions }`` (conditions are isl constraint text)."""
    space = f"{name}[{', '.join(iterators)}]"
    return isl.Set(f"[{', '.join(sorted(params))}] -> {{ {space} : {' and '.join(conditions) or 'true'} }}")


def build_statement(name: str, iterators: tuple[str, ...], params, domain: isl.Set,
                    target: E.Access, value: E.Expr, line: int | None, text: str) -> Statement:
    """The Statement ``target = value`` over ``domain``, with one access relation per reference
    (the reads of ``value`` in tree order, ``{name}_R0``..., then the write)."""
    space = f"{name}[{', '.join(iterators)}]"
    param_text = ", ".join(sorted(params))
    reads = [n for n in E.walk(value) if isinstance(n, E.Access)]
    accesses = []
    for k, (ref, is_write) in enumerate([(r, False) for r in reads] + [(target, True)]):
        idx = ", ".join(isl_text(i) for i in ref.indices)
        relation = isl.Map(f"[{param_text}] -> {{ {space} -> {ref.array}[{idx}] }}").intersect_domain(domain)
        accesses.append(AccessRef(f"{name}_R{k}", ref.array, relation, is_write))
    return Statement(name, iterators, domain, target, value, tuple(accesses), line, text)


def param_context(params: tuple[str, ...], arrays) -> isl.Set:
    """Parameters are non-negative and every array extent is too."""
    cons = [f"{p} >= 0" for p in params]
    cons += [f"{extent_isl(e, params)} >= 0" for a in arrays for e in a.shape]
    return isl.Set(f"[{', '.join(params)}] -> {{ : {' and '.join(cons) or 'true'} }}")


def assemble_scop(name: str, params: tuple[str, ...], arrays: dict[str, Array],
                  local_types: dict, statements: list[Statement], tree_nodes: list,
                  arguments: list[Argument], source: str) -> Scop:
    """The Scop of ``statements`` in the textual order of ``tree_nodes`` (Loop/Leaf nodes);
    ``local_types`` (name -> DType) become kernel-local 0-d arrays."""
    context = param_context(params, arrays.values())
    all_arrays = dict(arrays)
    for local, dtype in local_types.items():
        all_arrays[local] = Array(local, dtype, (), local=True)
    domain = isl.UnionSet.empty(context.get_space())
    for stmt in statements:
        domain = domain.union(isl.UnionSet.from_set(stmt.domain))
    schedule = original_schedule(domain, tree_nodes, params)
    return Scop(name, params, context, all_arrays, tuple(statements), schedule, tuple(arguments), source)
