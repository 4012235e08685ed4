"""The dual cone of a polyhedron (the affine forms nonnegative on it) by double description.

The scheduling constraints of a dependence piece P are the affine forms ``c0 + c.x`` that are
nonnegative on every point of P (Farkas). isl's ``coefficients`` computes that cone by
eliminating the Farkas multipliers with Fourier-Motzkin, which can blow up: one six-dimensional
piece of 17 constraints took isl 10 s, and such pieces are what bounded the schedulers'
compile time (issue 19).

Here the cone is read off the generators instead. P = {x : A x + b >= 0, E x + e = 0}
homogenized is the cone C = {(t, x) : A x + b t >= 0, E x + e t = 0, t >= 0}; a form
(c0, c) is nonnegative on a non-empty P exactly when (c0, c) . g >= 0 for every extreme ray g of
C (P's vertices with t = 1, its rays with t = 0) and (c0, c) . l = 0 for every line l of C. The
extreme rays and lines come from Motzkin's double description method, in exact integers:
start from the whole space (every unit vector a line) and cut it by one constraint at a time,
combining a ray on each side of the cut when the two are adjacent (the combinatorial test: no
third ray is tight at every constraint both are tight at). Small pieces have a few dozen
generators, so the method costs milliseconds where elimination may take seconds.

isl's own elimination runs first, within a budget (:data:`ISL_OPERATIONS`); the double
description computes the cones it does not finish in time.
"""
from __future__ import annotations

from math import gcd
from typing import Sequence

import islpy as isl

from polyopt.islutil import isl_options, out_of_operations

#: isl's own elimination gets this many elementary steps (about 0.2 s) before the double
#: description takes over. isl's result is kept where it comes in time: its cone can be larger
#: on integer points, since isl tightens the constraints of a set with equalities on integers
#: first ({ [p, x] : p = 2x, p >= -1 } gives p >= 0), where the method here is rational.
ISL_OPERATIONS = 500_000

#: Past this many intermediate generators the method hands the cone back to isl (a guard; the
#: dependence pieces met so far stay below a few hundred).
MAX_GENERATORS = 4000

Vector = tuple[int, ...]


def _dot(a: Sequence[int], b: Sequence[int]) -> int:
    return sum(x * y for x, y in zip(a, b) if x and y)


def _primitive(vector: Sequence[int]) -> Vector:
    """The vector divided by the gcd of its entries (the same ray or line, smaller numbers)."""
    g = 0
    for value in vector:
        g = gcd(g, value)
    return tuple(value // g for value in vector) if g > 1 else tuple(vector)


def _combined(a: int, u: Vector, b: int, v: Vector) -> Vector:
    return _primitive([a * x + b * y for x, y in zip(u, v)])


class TooManyGenerators(Exception):
    """The double description passed :data:`MAX_GENERATORS` generators."""


def generators(dimension: int, inequalities: Sequence[Vector], equalities: Sequence[Vector] = ()
               ) -> tuple[list[Vector], list[Vector]]:
    """(extreme rays, basis of lines) of the cone {y : h . y >= 0 for h in inequalities,
    h . y = 0 for h in equalities} of the given dimension (exact integer vectors)."""
    lines: list[Vector] = [tuple(int(i == k) for i in range(dimension)) for k in range(dimension)]
    rays: list[Vector] = []
    zeros: list[int] = []  # per ray, the bit set of the processed inequalities tight at it
    order = [(h, True) for h in equalities] + [(h, False) for h in inequalities]
    for index, (h, is_equality) in enumerate(order):
        bit = 0 if is_equality else 1 << index
        pivot = next((line for line in lines if _dot(h, line)), None)
        if pivot is not None:
            # a line crosses the cut: the others and the rays are moved into the cut along it,
            # and the half of it on the right side becomes a ray (tight at every earlier cut)
            a = _dot(h, pivot)
            sign = 1 if a > 0 else -1
            lines = [_combined(a, line, -_dot(h, line), pivot) for line in lines if line is not pivot]
            rays = [_combined(abs(a), ray, -sign * _dot(h, ray), pivot) for ray in rays]
            zeros = [z | bit for z in zeros]
            if not is_equality:
                rays.append(_primitive([sign * x for x in pivot]))
                zeros.append(sum(1 << k for k in range(index) if not order[k][1]))
            continue
        values = [_dot(h, ray) for ray in rays]
        positive = [k for k, value in enumerate(values) if value > 0]
        negative = [k for k, value in enumerate(values) if value < 0]
        kept = [k for k, value in enumerate(values) if value == 0 or (value > 0 and not is_equality)]
        new_rays = [rays[k] for k in kept]
        new_zeros = [zeros[k] | (bit if values[k] == 0 else 0) for k in kept]
        for p in positive:
            for n in negative:
                common = zeros[p] & zeros[n]
                if any(k != p and k != n and common & zeros[k] == common for k in range(len(rays))):
                    continue  # not adjacent: their combination is no extreme ray
                new_rays.append(_combined(values[p], rays[n], -values[n], rays[p]))
                new_zeros.append(common | bit)
        if len(new_rays) > MAX_GENERATORS:
            raise TooManyGenerators(len(new_rays))
        rays, zeros = new_rays, new_zeros
    return rays, lines


def coefficients(points: isl.BasicSet) -> isl.BasicSet:
    """isl's ``points.coefficients()``: the cone of (constant, parameter and set coefficients)
    of the affine forms nonnegative on ``points``. isl computes it within
    :data:`ISL_OPERATIONS` elementary steps, or :func:`by_double_description` does."""
    try:
        with isl_options(max_operations=ISL_OPERATIONS):
            return points.coefficients()
    except isl.Error as exc:
        if not out_of_operations(exc):
            raise
    return by_double_description(points)


def by_double_description(points: isl.BasicSet) -> isl.BasicSet:
    """The cone of :func:`coefficients` computed from the generators (see the module docstring);
    isl's elimination, unbounded, where ``points`` is empty, has divs or too many generators."""
    if points.dim(isl.dim_type.div) or points.is_empty():
        return points.coefficients()
    n_param, n_set = points.dim(isl.dim_type.param), points.dim(isl.dim_type.set)
    inequalities, equalities = [], []
    for constraint in points.get_constraints():
        row = (constraint.get_constant_val().to_python(),
               *(constraint.get_coefficient_val(isl.dim_type.param, k).to_python() for k in range(n_param)),
               *(constraint.get_coefficient_val(isl.dim_type.set, k).to_python() for k in range(n_set)))
        (equalities if constraint.is_equality() else inequalities).append(row)
    dimension = 1 + n_param + n_set
    inequalities.insert(0, tuple(int(k == 0) for k in range(dimension)))  # t >= 0
    try:
        rays, lines = generators(dimension, inequalities, equalities)
    except TooManyGenerators:
        return points.coefficients()
    # isl's layout of the cone ([cst, params] -> [set coefficients], no parameters), and its
    # rational flag (the rows are a rational cone's, as isl's are)
    cone = isl.BasicSet.universe(isl.BasicSet.universe(points.get_space()).coefficients().get_space())
    for vector, equality in [(ray, False) for ray in rays] + [(line, True) for line in lines]:
        make = isl.Constraint.equality_alloc if equality else isl.Constraint.inequality_alloc
        constraint = make(cone.get_local_space())
        for k, value in enumerate(vector):
            if value:
                constraint = constraint.set_coefficient_val(isl.dim_type.set, k, value)
        cone = cone.add_constraint(constraint)
    return isl.BasicSet.read_from_str(points.get_ctx(), str(cone).replace("{ ", "{ rat: ", 1))
