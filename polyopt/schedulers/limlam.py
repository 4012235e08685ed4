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
   integer, non-negative where it can be) gives the outermost band: every member has a zero
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
from polyopt.schedulers.pluto import PlutoScheduler, _row_echelon, orthogonal_complement


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
        basis = orthogonal_complement(tuple(equalities), len(names)) if equalities else \
            tuple(tuple(int(i == k) for i in range(len(names))) for k in range(len(names)))
        if not basis:
            return []
        echelon, pivots = _row_echelon(basis)   # pivots at the outermost loop columns it can
        result = []
        for vector, pivot in zip(echelon, pivots):
            if pivot >= len(columns):           # a constant-only direction orders nothing
                continue
            scale = math.lcm(*(x.denominator for x in vector))
            ints = [int(x * scale) for x in vector]
            g = math.gcd(*ints[:len(columns)])
            # constants follow the coefficients; a uniform shift of them stays a solution
            ints = [x // g for x in ints[:len(columns)]] + [Fraction(x, g) for x in ints[len(columns):]]
            if all(x <= 0 for x in ints[:len(columns)]):
                ints = [-x for x in ints]
            coeffs = {s: tuple(ints[columns.index((s, k))] for k in range(self.dims[s])) for s in stmts}
            consts = {s: ints[len(columns) + j] for j, s in enumerate(stmts)}
            if any(c.denominator != 1 for c in consts.values()):
                continue                         # no integer partition in this direction
            low = min(consts.values())
            result.append({s: (coeffs[s], int(consts[s] - low)) for s in stmts})
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
