"""The PolyBench 4.2 kernel suite, written in polyopt's loop DSL.

Each of the 30 kernels is an :class:`Entry`: the ``@polyopt.kernel`` (f64), PolyBench's problem
sizes for the five presets, deterministic inputs, a numpy reference with the same in-place
semantics, and a flop count::

    from polyopt import suite

    entry = suite.get("gemm")
    args = entry.inputs(entry.sizes("MINI"))
    entry.kernel(**args)              # compiled
    expected = entry.inputs(entry.sizes("MINI"))
    entry.reference(**expected)       # numpy

Kernel functions are named like PolyBench's kernels where that is a Python identifier
(``floyd_warshall``, ``jacobi_2d``; ``k2mm`` and ``k3mm`` for 2mm and 3mm); the suite uses
PolyBench's names ("floyd-warshall", "2mm").
"""
from __future__ import annotations

from polyopt.suite import datamining, linear_algebra, medley, solvers, stencils
from polyopt.suite._registry import PRESETS, Entry

__all__ = ["Entry", "PRESETS", "get", "names"]

_ENTRIES: dict[str, Entry] = {
    entry.name: entry
    for module in (datamining, linear_algebra, solvers, medley, stencils)
    for entry in module.ENTRIES
}


def names() -> list[str]:
    """The 30 kernel names in PolyBench's order (datamining, BLAS, kernels, solvers, ...)."""
    return list(_ENTRIES)


def get(name: str) -> Entry:
    """The suite entry called ``name`` (PolyBench's spelling, e.g. "jacobi-2d")."""
    try:
        return _ENTRIES[name]
    except KeyError:
        raise KeyError(f"no suite kernel {name!r}; valid names: {', '.join(_ENTRIES)}") from None
