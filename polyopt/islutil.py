"""Small conveniences over islpy used across the package."""
from __future__ import annotations

import re
import threading
from contextlib import contextmanager
from typing import Iterable, Iterator

import islpy as isl

#: isl's context (islpy's DEFAULT_CONTEXT, which every isl object of polyopt lives in) is one per
#: process, and so are its options and its operation counter. Work that changes them, and the
#: analyses that must not run while they are changed, hold this lock: two Python threads
#: compiling kernels at once take turns inside isl (re-entrant: the analyses nest).
ISL_LOCK = threading.RLock()


@contextmanager
def isl_options(*, schedule_algorithm: int | None = None, max_operations: int | None = None
                ) -> Iterator[isl.Context]:
    """isl's context with the given options for the block, and the earlier ones again after it
    (``max_operations`` also restarts the operation count: isl raises once the block has done
    that many elementary steps). Holds :data:`ISL_LOCK`, so no other thread sees the options."""
    with ISL_LOCK:
        ctx = isl.DEFAULT_CONTEXT
        previous_algorithm = ctx.get_schedule_algorithm()
        previous_operations = ctx.get_max_operations()
        if schedule_algorithm is not None:
            ctx.set_schedule_algorithm(schedule_algorithm)
        if max_operations is not None:
            ctx.set_max_operations(max_operations)
            ctx.reset_operations()
        try:
            yield ctx
        finally:
            ctx.set_schedule_algorithm(previous_algorithm)
            ctx.set_max_operations(previous_operations)
            ctx.reset_operations()


def out_of_operations(error: isl.Error) -> bool:
    """Whether isl raised ``error`` because the operation budget of an enclosing
    :func:`isl_options` ran out (not for a fault of its own)."""
    return "operations exceeded" in str(error)


def coalesced(relation):
    """``relation`` (an isl set, map or union of them) coalesced into fewer, larger pieces; the
    same relation as it is where isl's coalescing fails on it. Redundant constraints go first:
    on random nests isl's coalescing crashed the interpreter (a segmentation fault) and raised
    internal errors ("cannot relax redundant constraint") on relations as they were built, not
    after that step. The operation budget of an enclosing :func:`isl_options` still applies."""
    try:
        return relation.remove_redundancies().coalesce()
    except isl.Error as exc:
        if out_of_operations(exc):
            raise
        return relation


def fix_params(context: isl.Set, values: dict[str, int]) -> isl.Set:
    """``context`` with the named size parameters fixed at ``values`` (names it lacks ignored)."""
    for name, value in values.items():
        position = context.find_dim_by_name(isl.dim_type.param, name)
        if position >= 0:
            context = context.fix_val(isl.dim_type.param, position, isl.Val(value))
    return context


def maps_of(union: isl.UnionMap) -> list[isl.Map]:
    """The maps of a union map (one per pair of spaces), as a Python list."""
    found: list[isl.Map] = []
    union.foreach_map(found.append)
    return found


def tuple_names(union: isl.UnionSet) -> list[str]:
    """The tuple names of a union set's sets (the statements of a domain), in isl's order."""
    found: list[str] = []
    union.foreach_set(lambda s: found.append(s.get_tuple_name()))
    return found


def param_point(params: tuple[str, ...] | list[str], values: dict[str, int]) -> isl.Set:
    """The parameter-only set fixing every parameter to its value."""
    cons = " and ".join(f"{p} = {int(values[p])}" for p in params) or "true"
    return isl.Set(f"[{', '.join(params)}] -> {{ : {cons} }}")


#: Words isl's parser reserves: a set, map or schedule read from text cannot name a variable so.
ISL_KEYWORDS = frozenset({"exists", "and", "or", "implies", "not", "infty", "infinity", "NaN", "nan",
                          "min", "max", "rat", "true", "false", "ceild", "floord", "mod", "ceil", "floor"})


def fresh_stem(stem: str, taken: Iterable[str]) -> str:
    """``stem``, with underscores put in front until no name of ``taken`` is it followed by
    digits: the names ``{stem}0``, ``{stem}1``... then collide with none of ``taken``.

    isl text names its variables; a helper variable spelled like a user's size parameter
    (``d0``, ``s0``...) would silently become that parameter."""
    taken = set(taken)
    while any(re.fullmatch(rf"{re.escape(stem)}\d+", name) for name in taken):
        stem = "_" + stem
    return stem


def isl_safe_name(name: str, taken: Iterable[str]) -> str:
    """``name`` itself, or, where isl reserves it (``mod``, ``floor``, ``exists``...), ``name``
    with trailing underscores that no name of ``taken`` has."""
    if name not in ISL_KEYWORDS:
        return name
    taken = set(taken)
    spelled = name + "_"
    while spelled in taken:
        spelled += "_"
    return spelled
