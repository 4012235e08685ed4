"""Lim-Lam affine partitioning (Lim & Lam, "Maximizing parallelism and minimizing synchronization
with affine transforms", POPL 1997 / Parallel Computing 1998), on isl.

Three phases, outermost first:

1. **Space partitions** (synchronization-free parallelism). An affine partition phi (one affine
   function per statement) needs no communication when every dependence ``s -> t`` stays inside
   one partition: ``phi_T(t) = phi_S(s)``. Per weakly connected component of the dependence
   graph, the partitions that satisfy this for every dependence piece form a linear space of
   coefficient vectors: the Farkas constraints of ``phi_T(t) - phi_S(s) >= 0`` and ``<= 0``
   (:func:`polyopt.analysis.farkas.nonnegative_on`) cut out exactly that space, whose equalities
   (its affine hull) are read back from isl and whose null space is computed exactly over the
   rationals. Its dimension, less the constant-only direction, is the component's *degree of
   synchronization-free parallelism*; a basis in reduced echelon form (outer loops first,
   integer, the leading coefficient positive) gives the outermost band: every member has a zero
   dependence distance, so all are coincident (parallel) and the band satisfies nothing.
2. **Time partitions** (pipelined parallelism): hyperplanes with ``phi_T(t) - phi_S(s) >= 0``
   on every dependence (Farkas-linearized), as many linearly independent ones as there are,
   chosen as Pluto does (:class:`polyopt.schedulers.pluto.PlutoScheduler`: bounded dependence
   distance, integer lexmin, independence through the orthogonal complement of the partitions
   found so far). They form one permutable band: the pipelined (tilable, wavefront) loops.
3. The rest is sequential: cuts between strongly connected components of the dependences left,
   further permutable bands where they exist, and where the search finds nothing the next
   dimension of the original schedule (:mod:`polyopt.schedulers.fallback`), recorded in
   ``notes``. Like pluto, limlam never refuses a legal program.

Statements of different components share the bands (no dependence joins them: any interleaving
is legal); a component with a lower degree gets constant members in the space band.
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import NamedTuple

import islpy as isl

from polyopt.analysis.deps import Dependences
from polyopt.analysis.farkas import Constraints, Unknowns, linear, nonnegative_on, var
from polyopt.analysis.scop import Scop
from polyopt.schedulers.levels import Edge, Level, Row, delta_set, weak_components
from polyopt.schedulers.pluto import PlutoScheduler


# ----- sparse integer linear algebra (the Farkas systems of big components are sparse) ----------

def _reduced(row: dict[int, int]) -> dict[int, int]:
    g = math.gcd(*row.values()) if row else 1
    return {k: v // g for k, v in row.items() if v} if g > 1 else {k: v for k, v in row.items() if v}


def _echelon(rows, n: int) -> list[tuple[int, dict[int, int]]]:
    """Reduced row echelon form of integer rows (dicts column -> value), fraction-free: a list
    of (pivot column, row), by pivot column, each pivot column zero in every other row."""
    remaining = [_reduced(dict(r)) for r in rows]
    remaining = [r for r in remaining if r]
    done: list[tuple[int, dict[int, int]]] = []
    for col in range(n):
        candidates = [r for r in remaining if col in r]
        if not candidates:
            continue
        pivot = min(candidates, key=len)
        remaining = [r for r in remaining if r is not pivot]
        a = pivot[col]
        for r in remaining + [row for _, row in done]:
            if col in r:
                b = r[col]
                combined = {k: a * r.get(k, 0) - b * pivot.get(k, 0) for k in set(r) | set(pivot)}
                r.clear()
                r.update(_reduced(combined))
        remaining = [r for r in remaining if r]
        done.append((col, pivot))
    return done


def _null_space(equalities, n: int) -> list[dict[int, int]]:
    """An integer basis of the vectors x with row.x = 0 for every row of ``equalities``."""
    echelon = _echelon([{k: v for k, v in enumerate(row) if v} for row in equalities], n)
    pivots = {col for col, _ in echelon}
    basis = []
    for free in (c for c in range(n) if c not in pivots):
        vector = {free: Fraction(1)}
        for col, row in echelon:
            if free in row:
                vector[col] = Fraction(-row[free], row[col])
        scale = math.lcm(*(x.denominator for x in vector.values()))
        basis.append({k: int(x * scale) for k, x in vector.items()})
    return basis


class LimLamScheduler(PlutoScheduler):
    """One run of Lim-Lam affine partitioning: sync-free space partitions, then Pluto's search
    for time partitions and cuts (fused: no distribution before the partitions are found)."""

    def __init__(self, scop: Scop, deps: Dependences):
        super().__init__(scop, deps, fuse="max", negative_coeffs=None)
        #: per statement, the rank of its synchronization-free space partition
        self.degree: dict[str, int] = {s: 0 for s in self.statements}

    # ----- phase 1: synchronization-free space partitions -------------------------------------
    def _space_basis(self, stmts: tuple[str, ...], edges: list[Edge]) -> list[dict[str, tuple]]:
        """Integer basis of the space partitions of one component, one dict per basis vector
        (statement -> (iterator coefficients, constant)); constant-only directions dropped."""
        columns = [(s, k) for s in stmts for k in range(self.dims[s])]   # outer loops first
        position = {column: k for k, column in enumerate(columns)}
        names = [f"{s}_c{k}" for s, k in columns] + [f"{s}_cst" for s in stmts]
        unknowns = Unknowns(tuple(names))
        constraints = Constraints()
        for edge in edges:
            for sign in (+1, -1):  # phi_T(t) - phi_S(s) >= 0 and <= 0: equal on every point
                constant = linear((sign, var(f"{edge.sink}_cst")), (-sign, var(f"{edge.source}_cst")))
                source = [linear((-sign, var(f"{edge.source}_c{k}"))) for k in range(self.dims[edge.source])]
                sink = [linear((sign, var(f"{edge.sink}_c{k}"))) for k in range(self.dims[edge.sink])]
                constraints.extend(nonnegative_on(edge.relation, constant, {}, source, sink))
        if constraints.infeasible:  # cannot happen (0 is a solution); no partition then
            return []
        hull = unknowns.basic_set(constraints).affine_hull()
        # the solutions form a linear space: its hull has equalities only (were there an
        # inequality, taking its boundary too would only make the partitions fewer, never wrong)
        equalities = [tuple(constraint.get_coefficient_val(isl.dim_type.set, k).to_python()
                            for k in range(len(names)))
                      for constraint in hull.get_constraints()]
        vectors = [dict(row) for _, row in _echelon(_null_space(equalities, len(names)), len(names))]
        result = []
        for row in vectors:                       # pivots at the outermost loop columns they can
            if all(k >= len(columns) for k in row):   # a constant-only direction orders nothing
                continue
            ints = [row.get(k, 0) for k in range(len(names))]
            if next(x for x in ints[:len(columns)] if x) < 0:   # the leading loop runs forward
                ints = [-x for x in ints]
            coeffs = {s: tuple(ints[position[s, k]] for k in range(self.dims[s])) for s in stmts}
            consts = {s: ints[len(columns) + j] for j, s in enumerate(stmts)}
            low = min(consts.values())            # a uniform shift of the constants stays a solution
            result.append({s: (coeffs[s], consts[s] - low) for s in stmts})
        return result

    def _space_band(self) -> list[Row]:
        """The space partitions of every component, one band member per basis vector (the
        components with fewer get constants), each checked to keep every dependence inside."""
        per_component = []
        for component in weak_components(self.statements, self.edges):
            inside = [e for e in self.edges if e.source in component]
            vectors = []
            for vector in self._space_basis(component, inside):
                row = {s: vector[s] for s in component}
                if all(delta_set(e, row, "!= 0").is_empty() for e in inside):
                    vectors.append(vector)
                else:   # the rational null space has a point the integer check refuses
                    self.notes.append(f"limlam: a space partition of {', '.join(component)} was not "
                                      "exact on the integer dependences; dropped")
            per_component.append((component, vectors))
        depth = max((len(v) for _, v in per_component), default=0)
        band: list[Row] = []
        for k in range(depth):
            row: Row = {}
            for component, vectors in per_component:
                for s in component:
                    row[s] = vectors[k][s] if k < len(vectors) else ((0,) * self.dims[s], 0)
            band.append(row)
        return band

    def run(self) -> list[Level]:
        space = self._space_band()
        if space:
            for row in space:
                self._record(row)
            self.degree = {s: len(self.found[s]) for s in self.statements}
            self.levels.append(Level("band", space, permutable=True, edges=list(self.edges)))
        # phase 2 and 3: every dependence still has distance 0 after the space band, so the
        # same edges stay active; Pluto's loop finds the time partitions (a permutable band),
        # then cuts and the rest, with the original dimensions as the last resort
        return super().run()


class LimLamLevels(NamedTuple):
    """A Lim-Lam schedule as levels, the degree of synchronization-free parallelism per
    statement (the rank of its space partition), and the fallbacks taken."""

    levels: list[Level]
    degree: dict[str, int]
    notes: tuple[str, ...]


def limlam_levels(scop: Scop, deps: Dependences) -> LimLamLevels:
    """The Lim-Lam affine partitioning of ``scop`` as levels: the synchronization-free space
    band (empty where there is no such parallelism), then the time partitions and the rest."""
    scheduler = LimLamScheduler(scop, deps)
    levels = scheduler.run()
    notes = [n.replace("pluto:", "limlam:", 1) for n in scheduler.notes]
    return LimLamLevels(levels, dict(scheduler.degree), tuple(dict.fromkeys(notes)))
