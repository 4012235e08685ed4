"""The :class:`Entry` record describing one suite kernel, and PolyBench's dataset presets."""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping

import numpy as np

#: PolyBench 4.2's predefined problem sizes, smallest first.
PRESETS = ("MINI", "SMALL", "MEDIUM", "LARGE", "EXTRALARGE")


def preset_table(params: tuple[str, ...],
                 *rows: tuple[int, ...]) -> Mapping[str, Mapping[str, int]]:
    """``{preset: {param: value}}`` from one row of values per preset (in :data:`PRESETS` order)."""
    if len(rows) != len(PRESETS) or any(len(row) != len(params) for row in rows):
        raise ValueError("need one value per parameter for each of the 5 presets")
    return MappingProxyType({preset: MappingProxyType(dict(zip(params, row)))
                             for preset, row in zip(PRESETS, rows)})


@dataclass(frozen=True, eq=False)
class Entry:
    """One benchmark of the suite: the DSL kernel plus everything needed to run and check it.

    ``name`` is PolyBench's spelling ("floyd-warshall"), ``category`` PolyBench's directory
    ("linear-algebra/solvers"), ``kernel`` the ``@polyopt.kernel`` object (f64 element types).
    Entries are singletons, compared and hashed by identity.
    """

    name: str
    category: str
    kernel: Any
    size_table: Mapping[str, Mapping[str, int]] = field(repr=False)
    make_inputs: Callable[[Mapping[str, int], np.dtype], dict] = field(repr=False)
    reference_impl: Callable[..., None] = field(repr=False)
    flop_count: Callable[[Mapping[str, int]], float] = field(repr=False)

    def sizes(self, preset: str) -> dict[str, int]:
        """PolyBench 4.2's parameter values for ``preset`` (MINI ... EXTRALARGE), by DSL name."""
        key = preset.upper() if isinstance(preset, str) else preset
        if key not in self.size_table:
            raise ValueError(f"unknown preset {preset!r} for {self.name}: "
                             f"use one of {', '.join(PRESETS)}")
        return dict(self.size_table[key])

    def inputs(self, sizes: Mapping[str, int], dtype=np.float64) -> dict[str, object]:
        """Fresh, deterministic arguments for the kernel: every named argument, by name.

        Arrays are C-contiguous of ``dtype``; scalar data arguments are Python floats; integer
        size parameters that no array shape determines (e.g. ``TSTEPS``) are Python ints.
        """
        missing = [p for p in self.size_table[PRESETS[0]] if p not in sizes]
        if missing:
            raise KeyError(f"{self.name} needs sizes for {', '.join(missing)}")
        return self.make_inputs({p: int(sizes[p]) for p in self.size_table[PRESETS[0]]},
                                np.dtype(dtype))

    def reference(self, **args) -> None:
        """Run the numpy reference in place on ``args`` (a dict from :meth:`inputs`)."""
        self.reference_impl(**args)

    def flops(self, sizes: Mapping[str, int]) -> float:
        """Approximate floating-point operation count (for GFLOP/s reporting)."""
        return float(self.flop_count(sizes))
