"""Feautrier's multidimensional affine scheduling (Feautrier 1992, parts I and II), on isl.

Schedules are affine in the iterators and the size parameters (theta = c.i + d.p + c0).
Dimension by dimension: every dependence not yet satisfied must be weakly satisfied
(theta_T(t) - theta_S(s) >= x_e, Farkas-linearized, x_e in {0, 1} per dependence edge) and the
integer lexmin first maximizes the number of strongly satisfied edges (sum x_e), then minimizes
the coefficients (a proxy for latency); where that exact 0/1 problem is too hard for isl within
an operation budget, edges are satisfied greedily instead. Satisfied edges leave; the rest shrink to the points where
the new dimension does not separate them. When no edge is left, each statement is completed to
full rank with dimensions that carry nothing: they are all parallel (innermost parallelism).

Where a component has no dimension that satisfies one of its edges within the coefficient
bounds (or the problem stays too hard for isl even greedily), it takes the next dimension of the
original schedule instead, which is legal and satisfies part of an edge (:mod:`polyopt.schedulers.fallback`);
``notes`` records it (and so the Schedule's trace): this scheduler never refuses a legal program.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import NamedTuple

import islpy as isl

from polyopt.analysis.deps import Dependences
from polyopt.errors import ScheduleError
from polyopt.schedulers.fallback import OriginalDimensions
from polyopt.islutil import isl_options
from polyopt.analysis.farkas import Constraints, Form, Unknowns, basic_maps, linear, nonnegative_on, var
from polyopt.schedulers.levels import Edge, Level, Row, remaining_after, weak_components
from polyopt.schedulers.pluto import rank
from polyopt.analysis.scop import Scop

COEFF_BOUND = 4
CONST_BOUND = 16
#: isl operations allowed for the exact lexmin of one dimension before the greedy fallback
EXACT_BUDGET = 300_000


@contextmanager
def operation_budget(operations: int):
    """Make isl give up (raise) after ``operations`` elementary steps inside the block."""
    with isl_options(max_operations=operations):
        yield


class FeautrierScheduler:
    """One run of Feautrier's algorithm on a Scop."""

    def __init__(self, scop: Scop, deps: Dependences):
        self.scop = scop
        self.statements = [s.name for s in scop.statements]
        self.dims = {s.name: len(s.iterators) for s in scop.statements}
        self.found: dict[str, list[tuple[int, ...]]] = {s: [] for s in self.statements}
        self.edges = [Edge(m.get_tuple_name(isl.dim_type.in_), m.get_tuple_name(isl.dim_type.out), m)
                      for m in basic_maps(deps.all.intersect_params(scop.context))]
        self.original = OriginalDimensions(scop)
        self.notes: list[str] = []   # components that took a dimension of the original schedule

    @staticmethod
    def _coefficient(stmt: str, k: int) -> Form:
        return {f"{stmt}_p{k}": 1, f"{stmt}_n{k}": -1}

    def _problem(self, stmts: tuple[str, ...], edges: list[Edge]) -> tuple[Unknowns, Constraints]:
        """Unknowns (missed edges, coefficient size, coefficients, constants, one 0/1 per edge)
        and the Farkas constraints delta_e >= x_e of one component. Each convex piece of a
        dependence is its own edge: pieces of one statement pair often differ in which
        dimension can satisfy them (floyd-warshall, symm)."""
        x = [f"x{k}" for k in range(len(edges))]
        names = ["missed", "size"]
        for s in stmts:
            for k in reversed(range(self.dims[s])):
                names += [f"{s}_p{k}", f"{s}_n{k}"]
        names += [f"{s}_cst" for s in stmts]
        names += [f"{s}_d{p}" for s in stmts for p in self.scop.params]
        names += x
        unknowns = Unknowns(tuple(names))
        magnitude = ([f"{s}_{sign}{k}" for s in stmts for k in range(self.dims[s]) for sign in "pn"]
                     + [f"{s}_d{p}" for s in stmts for p in self.scop.params])
        constraints = Constraints()
        constraints.equal(linear((1, var("missed")), (-1, {1: len(edges)}), *((1, var(name)) for name in x)))
        constraints.equal(linear((1, var("size")), *((-1, var(name)) for name in magnitude)))
        for name in x:
            constraints.between(name, 0, 1)
        for s in stmts:
            for k in range(self.dims[s]):
                constraints.between(f"{s}_p{k}", 0, COEFF_BOUND).between(f"{s}_n{k}", 0, COEFF_BOUND)
            constraints.between(f"{s}_cst", 0, CONST_BOUND)
            for p in self.scop.params:
                constraints.between(f"{s}_d{p}", 0, COEFF_BOUND)
        for edge, x_edge in zip(edges, x):
            constant = linear((1, var(f"{edge.sink}_cst")), (-1, var(f"{edge.source}_cst")), (-1, var(x_edge)))
            source = [linear((-1, self._coefficient(edge.source, d))) for d in range(self.dims[edge.source])]
            sink = [self._coefficient(edge.sink, d) for d in range(self.dims[edge.sink])]
            params = {p: linear((1, var(f"{edge.sink}_d{p}")), (-1, var(f"{edge.source}_d{p}")))
                      for p in self.scop.params}
            constraints.extend(nonnegative_on(edge.relation, constant, params, source, sink))
        return unknowns, constraints

    def _dimension(self, stmts: tuple[str, ...], edges: list[Edge], level: int) -> Row:
        """The next dimension of one component: the ILP's, or where it has none that satisfies
        an edge, the next dimension of the original schedule (noted)."""
        unknowns, constraints = self._problem(stmts, edges)
        feasible = unknowns.basic_set(constraints)
        try:
            with operation_budget(EXACT_BUDGET):
                values = unknowns.lexmin(feasible)
        except isl.Error:  # the exact 0/1 problem is too hard: satisfy edges greedily
            try:
                with operation_budget(4 * EXACT_BUDGET):
                    values = self._greedy(unknowns, feasible, len(edges))
            except isl.Error:
                return self._original(stmts, edges, level, "the problem is too hard for isl within "
                                      "the operation budget")
        if values is None:
            return self._original(stmts, edges, level, "no legal dimension with coefficients bounded "
                                  f"by {COEFF_BOUND}")
        if values["missed"] == len(edges):
            return self._original(stmts, edges, level, "no dimension within the coefficient bounds "
                                  "satisfies any dependence")
        return {s: (tuple(values[f"{s}_p{k}"] - values[f"{s}_n{k}"] for k in range(self.dims[s])),
                    values[f"{s}_cst"], tuple((p, values[f"{s}_d{p}"]) for p in self.scop.params))
                for s in stmts}

    def _original(self, stmts: tuple[str, ...], edges: list[Edge], level: int, reason: str) -> Row:
        k, row = self.original.next_dimension(stmts, edges)
        self.notes.append(f"feautrier: {reason} among {', '.join(stmts)}; schedule level {level} is "
                          f"dimension {k} of the original schedule")
        return row

    @staticmethod
    def _greedy(unknowns: Unknowns, feasible: isl.BasicSet, n_edges: int) -> dict[str, int] | None:
        """A maximal (not maximum) set of strongly satisfied edges, one edge at a time in order,
        then the smallest coefficients for it: no 0/1 search left for the ILP."""
        for k in range(n_edges):
            strong = feasible.intersect(unknowns.basic_set(Constraints().between(f"x{k}", 1, 1)))
            feasible = strong if not strong.is_empty() else feasible.intersect(
                unknowns.basic_set(Constraints().between(f"x{k}", 0, 0)))
        return unknowns.lexmin(feasible)

    def _record(self, row: Row) -> None:
        for s, (coeffs, *_) in row.items():
            if any(coeffs) and rank(self.found[s] + [coeffs]) > rank(self.found[s]):
                self.found[s] = self.found[s] + [coeffs]

    def _completion(self) -> list[Row]:
        """Dimensions that make every statement full rank (unit vectors of its iterators)."""
        rows: list[Row] = []
        while any(rank(self.found[s]) < self.dims[s] for s in self.statements):
            row: Row = {}
            for s in self.statements:
                units = [tuple(int(i == k) for i in range(self.dims[s])) for k in range(self.dims[s])]
                row[s] = (next((u for u in units if rank(self.found[s] + [u]) > rank(self.found[s])),
                               (0,) * self.dims[s]), 0)
            self._record(row)
            rows.append(row)
        return rows

    def run(self) -> list[Level]:
        levels: list[Level] = []
        active = list(self.edges)
        while active:
            row: Row = {}
            for component in weak_components(self.statements, active):
                inside = [e for e in active if e.source in component]
                row.update(self._dimension(component, inside, len(levels)) if inside
                           else {s: ((0,) * self.dims[s], 0, ()) for s in component})
            constant_only = not any(any(coeffs) or any(c for _, c in params)
                                    for coeffs, _, params in row.values())
            # a dimension of constants only orders statements: a sequence, not a loop
            levels.append(Level("scalar", [row]) if constant_only
                          else Level("band", [row], permutable=False, edges=active))
            self._record(row)
            remaining = remaining_after([row], active)
            if len(remaining) == len(active) and all(
                    a.relation.is_equal(b.relation) for a, b in zip(remaining, active)):
                raise ScheduleError(f"feautrier: internal error: a dimension of {self.scop.name} "
                                    "satisfied no dependence")
            active = remaining
        completion = self._completion()
        if completion:
            levels.append(Level("band", completion, permutable=True, edges=[]))
        return levels


class FeautrierLevels(NamedTuple):
    """A Feautrier schedule as levels and the fallbacks it took (one line each)."""

    levels: list[Level]
    notes: tuple[str, ...]


def feautrier_levels(scop: Scop, deps: Dependences) -> FeautrierLevels:
    """Feautrier's schedule of ``scop`` as levels: one band per dimension that satisfies
    dependences, then one permutable, fully parallel band completing each statement."""
    scheduler = FeautrierScheduler(scop, deps)
    levels = scheduler.run()
    return FeautrierLevels(levels, tuple(scheduler.notes))
