"""The reference interpreter: runs a Scop statement instance by statement instance, in the order
of its original schedule, in plain Python. Slow and independent of every code generator: it is
the test oracle (use it on small sizes).
"""
from __future__ import annotations


import islpy as isl
import numpy as np

from polyopt.analysis.evaluate import evaluate, typed
from polyopt.islutil import param_point
from polyopt.analysis.scop import Scop, Statement
from polyopt.targets.arguments import temporary_arrays


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
    the Scop's local scalars and temporaries) that :func:`execute` runs statement instances in."""
    if any(a.dtype.is_half and a.dtype.numpy.kind == "u" for a in scop.arrays.values()):
        raise TypeError(f"{scop.name}: the interpreter computes on bf16 arrays only as ml_dtypes' "
                        "bfloat16 (pip install 'polyopt[bf16]'), not as their uint16 bits")
    env = {name: int(value) for name, value in params.items()}
    for name, value in scalars.items():
        dtype = next(a.dtype for a in scop.arguments if a.name == name)
        env[name] = typed(value, dtype)
    storage = {**temporary_arrays(scop, params), **arrays}
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
    from polyopt.targets.arguments import bind_arguments

    scop = getattr(kernel, "scop", kernel)
    bound = bind_arguments(scop, args, kwargs)
    run(scop, bound.params, bound.scalars, bound.arrays)


__all__ = ["evaluate", "execute", "instances", "interpret", "prepare", "run"]
