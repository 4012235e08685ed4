"""Small conveniences over islpy used across the package."""
from __future__ import annotations

import islpy as isl


def maps_of(union: isl.UnionMap) -> list[isl.Map]:
    """The maps of a union map (one per pair of spaces), as a Python list."""
    found: list[isl.Map] = []
    union.foreach_map(found.append)
    return found


def param_point(params: tuple[str, ...] | list[str], values: dict[str, int]) -> isl.Set:
    """The parameter-only set fixing every parameter to its value."""
    cons = " and ".join(f"{p} = {int(values[p])}" for p in params) or "true"
    return isl.Set(f"[{', '.join(params)}] -> {{ : {cons} }}")
