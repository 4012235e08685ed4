"""The cost model's tile footprint and traffic of a band as sympy formulas in its tile sizes.

:func:`~polyopt.schedulers.tilesize.footprint_bytes` evaluates the model numerically, at the
sizes it is given; the formulas here are the same rule, derived symbolically, with one symbol
``T_<loop>`` per loop of the band: each reference (element bytes ``e``, subscript matrix ``G``
over the band's loops, as :func:`~polyopt.schedulers.tilesize.band_references` gives it)
touches ``e * prod_d max(1, sum_k G[d, k] T_k)`` bytes of a tile, so gemm's (i, k, j) band is
``8*T_i*T_k + 8*T_j*T_k + 8*T_i*T_j`` (A, B, C: C's read and write are one reference). For a
subscript that sums loops (a skewed stencil's ``c1 + t``) the rule counts the span
``T_t + T_c1``, not the ``T_t + T_c1 - 1`` distinct elements: the formula is the model's rule, not
an exact count. Users get the formulas from :class:`~polyopt.schedulers.cost.BandCost`, and
evaluate them at other sizes with ``formula.subs({"T_i": 64, ...})``.

sympy is imported only when a formula is asked for: its import (about 0.4 s) stays off the
compile path.
"""
from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    import sympy

#: Largest denominator of a subscript coefficient the formulas take: a subscript split evenly
#: over two members by band_references' least squares is 0.5, exact in floats; a split over
#: three is the rounded float 0.333333333, which has no exact formula.
_LARGEST_DENOMINATOR = 2 ** 8


def tile_symbols(loops: Sequence[str]) -> list[sympy.Symbol]:
    """One tile-size symbol per loop: ``T_i`` for loop ``i`` or ``i@S1`` (the statement suffix
    is dropped where the band's loop names stay distinct without it)."""
    import sympy

    bases = [loop.split("@")[0] for loop in loops]
    names = bases if len(set(bases)) == len(bases) else [loop.replace("@", "_") for loop in loops]
    return [sympy.Symbol(f"T_{name}") for name in names]


def footprint_formula(references: Sequence[tuple[int, Sequence[Sequence[float]]]],
                      loops: Sequence[str]) -> sympy.Expr | None:
    """Bytes one tile of the band touches, in the symbols of :func:`tile_symbols` (tile sizes of
    at least 1); equal to :func:`~polyopt.schedulers.tilesize.footprint_bytes` at every size.

    None where the model has no exact rule to write down: a band without affine references (its
    tile sizes are a fallback), or a subscript coefficient that is a rounded float rather than a
    small fraction (a member three times a statement's iterator: the subscript is a third of it,
    0.333333333). None in the suite: cholesky's iterators that run as two or three of its band's
    members are written in the outermost of them (band_references), no longer split in thirds."""
    if not references:
        return None
    coefficients = [[Fraction(float(c)) for c in row] for _, rows in references for row in rows]
    if any(c.denominator > _LARGEST_DENOMINATOR for row in coefficients for c in row):
        return None
    import sympy

    sizes = tile_symbols(loops)
    total = sympy.Integer(0)
    for element_bytes, rows in references:
        elements = sympy.Integer(1)
        for row in rows:
            span = sum((sympy.Rational(Fraction(float(c))) * size for c, size in zip(row, sizes)), sympy.Integer(0))
            # sizes are at least 1: a span whose coefficients sum to 1 or more is at least 1
            elements *= span if sum(row) >= 1 else sympy.Max(1, span)
        total += int(element_bytes) * elements
    return total


def traffic_formula(references: Sequence[tuple[int, Sequence[Sequence[float]]]],
                    loops: Sequence[str]) -> sympy.Expr | None:
    """Bytes per iteration from memory with tiles: the footprint over the tile's volume, as a sum
    of one term per reference's share (gemm: ``8/T_k + 8/T_j + 8/T_i``); None where
    :func:`footprint_formula` is."""
    footprint = footprint_formula(references, loops)
    if footprint is None:
        return None
    import sympy

    return sympy.expand(footprint / sympy.Mul(*tile_symbols(loops)))
