"""Pluto-style scheduling (Bondhugula et al., PLDI 2008; Pluto+, TOPLAS 2016), on isl.

Hyperplanes are found one at a time by integer lexmin over (u, w, statement coefficients):
every dependence not yet satisfied at the start of the current band must be weakly satisfied
(phi_T(t) - phi_S(s) >= 0, Farkas-linearized) and bounded by u.p + w; each statement that is
not yet full rank gets a hyperplane linearly independent of its earlier ones. When no further
hyperplane exists, the statements are cut between strongly connected components of the
remaining dependence graph. Consecutive hyperplanes form permutable bands by construction.

Where neither exists (one strongly connected component and no hyperplane independent for every
statement still short of full rank), the search turns *lazy*, as Pluto's LAZY mode does: a
hyperplane independent for one of those statements is enough (the others may repeat an earlier
one). Where even that fails, the component takes the next dimension of the original schedule,
which is always legal (:mod:`polyopt.schedulers.fallback`). Both decisions are recorded in ``notes`` (and
so in the Schedule's trace): this scheduler never refuses a legal program.

The result is a list of :class:`Level` values (bands and scalar cuts) that
:mod:`polyopt.schedule_tree` turns into an isl schedule tree.
"""
from __future__ import annotations

import itertools
import math
from functools import lru_cache
from fractions import Fraction
from typing import NamedTuple

import islpy as isl

from polyopt.analysis.deps import Dependences
from polyopt.errors import ScheduleError
from polyopt.schedulers.fallback import OriginalDimensions
from polyopt.analysis.farkas import Constraints, Form, Unknowns, basic_maps, linear, nonnegative_on, var
from polyopt.schedulers.levels import Edge, Level, Row, remaining_after, weak_components
from polyopt.analysis.scop import Scop

FUSION_POLICIES = ("smart", "max", "no")

# ----- small integer linear algebra ------------------------------------------------------------

def _row_echelon(rows) -> tuple[list[list[Fraction]], list[int]]:
    """Reduced row echelon form over the rationals and its pivot columns."""
    matrix = [[Fraction(x) for x in row] for row in rows]
    pivots: list[int] = []
    r = 0
    for col in range(len(matrix[0]) if matrix else 0):
        pivot = next((k for k in range(r, len(matrix)) if matrix[k][col] != 0), None)
        if pivot is None:
            continue
        matrix[r], matrix[pivot] = matrix[pivot], matrix[r]
        matrix[r] = [x / matrix[r][col] for x in matrix[r]]
        for k in range(len(matrix)):
            if k != r and matrix[k][col] != 0:
                factor = matrix[k][col]
                matrix[k] = [a - factor * b for a, b in zip(matrix[k], matrix[r])]
        pivots.append(col)
        r += 1
    return matrix, pivots


def rank(rows: list[tuple[int, ...]]) -> int:
    """Rank of an integer matrix."""
    return len(_row_echelon(rows)[1])


@lru_cache(maxsize=None)
def orthogonal_complement(rows: tuple[tuple[int, ...], ...], dim: int) -> tuple[tuple[int, ...], ...]:
    """Integer basis of the vectors orthogonal to every row (identity when there are none): one
    vector per free column of the echelon form, scaled to integers, oriented non-negative where
    it is all of one sign."""
    matrix, pivots = _row_echelon(rows)
    result = []
    for free in (c for c in range(dim) if c not in pivots):
        vector = [Fraction(0)] * dim
        vector[free] = Fraction(1)
        for r, col in enumerate(pivots):
            vector[col] = -matrix[r][free]
        scale = math.lcm(*(x.denominator for x in vector))
        ints = [int(x * scale) for x in vector]
        if all(x <= 0 for x in ints):
            ints = [-x for x in ints]
        result.append(tuple(ints))
    return tuple(result)


# ----- the scheduler -----------------------------------------------------------------------------

class PlutoScheduler:
    """One run of the Pluto algorithm on a Scop (see the module docstring)."""

    COEFF_BOUND = 4
    CONST_BOUND = 8
    U_BOUND = 4
    W_BOUND = 32
    SHIFT_BOUND = 2

    def __init__(self, scop: Scop, deps: Dependences, *, fuse: str = "smart",
                 negative_coeffs: bool | None = None, param_shifts: bool = False):
        if fuse not in FUSION_POLICIES:
            raise ScheduleError(f"unknown fusion policy {fuse!r}; use one of {', '.join(FUSION_POLICIES)}")
        self.scop = scop
        self.fuse = fuse
        self.negative = negative_coeffs  # None: per component, only where non-negative fails
        self.used_negative = False
        # parameters a statement's schedule may be shifted by (phi = c.i + d.p + c0, d >= 0):
        # fuses loops that follow one another (atax: S3 at N + j after S2 at j), as isl does;
        # off by default: with it, fuse="max" fuses everything at parametric offsets (3mm)
        self._shift_params = tuple(scop.params) if param_shifts else ()
        self.statements = [s.name for s in scop.statements]
        self.dims = {s.name: len(s.iterators) for s in scop.statements}
        self.order = {name: k for k, name in enumerate(self.statements)}
        self.found: dict[str, list[tuple[int, ...]]] = {s: [] for s in self.statements}
        self.edges = [Edge(m.get_tuple_name(isl.dim_type.in_), m.get_tuple_name(isl.dim_type.out), m)
                      for m in basic_maps(deps.all.intersect_params(scop.context))]
        self.levels: list[Level] = []
        self.notes: list[str] = []   # fallbacks taken (lazy independence, original dimensions)
        self._box_cache: dict = {}
        self.original = OriginalDimensions(scop)

    # ----- unknowns and coefficient expressions ----------------------------------------------
    def _unknowns(self, stmts: tuple[str, ...], negative: bool) -> Unknowns:
        """ILP unknowns of one weakly connected component, in lexmin priority order."""
        names = [f"u_{p}" for p in self.scop.params] + ["w"]
        for s in stmts:
            for k in reversed(range(self.dims[s])):  # inner iterators first: lexmin keeps outer loops outer
                names += [f"{s}_p{k}", f"{s}_n{k}"] if negative else [f"{s}_c{k}"]
        names += [f"{s}_cst" for s in stmts]
        names += [f"{s}_d{p}" for s in stmts for p in self._shift_params]
        return Unknowns(tuple(names))

    @staticmethod
    def coefficient(stmt: str, k: int, negative: bool) -> Form:
        return {f"{stmt}_p{k}": 1, f"{stmt}_n{k}": -1} if negative else var(f"{stmt}_c{k}")

    def _bounds(self, stmts: tuple[str, ...], negative: bool) -> Constraints:
        """The box of every unknown (cached: the same for every band of a component)."""
        key = (stmts, negative)
        if key not in self._box_cache:
            self._box_cache[key] = self._box(stmts, negative)
        return self._box_cache[key].copy()

    def _box(self, stmts: tuple[str, ...], negative: bool) -> Constraints:
        box = Constraints()
        for p in self.scop.params:
            box.between(f"u_{p}", 0, self.U_BOUND)
        box.between("w", 0, self.W_BOUND)
        for s in stmts:
            for k in range(self.dims[s]):
                for name in ([f"{s}_p{k}", f"{s}_n{k}"] if negative else [f"{s}_c{k}"]):
                    box.between(name, 0, self.COEFF_BOUND)
            box.between(f"{s}_cst", 0, self.CONST_BOUND)
            for p in self._shift_params:
                box.between(f"{s}_d{p}", 0, self.SHIFT_BOUND)
        return box

    # ----- constraints ---------------------------------------------------------------------------
    def _delta_form(self, edge: Edge, sign: int, negative: bool, extra_constant: Form,
                    extra_params: dict[str, Form]):
        """Coefficients of sign * (phi_sink(t) - phi_source(s)) + extra_constant + extra_params.p."""
        constant = linear((1, extra_constant), (sign, var(f"{edge.sink}_cst")), (-sign, var(f"{edge.source}_cst")))
        params = {p: linear((1, extra_params.get(p, {})), (sign, var(f"{edge.sink}_d{p}")),
                            (-sign, var(f"{edge.source}_d{p}"))) for p in self._shift_params}
        params.update({p: form for p, form in extra_params.items() if p not in params})
        source = [linear((-sign, self.coefficient(edge.source, k, negative))) for k in range(self.dims[edge.source])]
        sink = [linear((sign, self.coefficient(edge.sink, k, negative))) for k in range(self.dims[edge.sink])]
        return constant, params, source, sink

    def _band_problem(self, stmts: tuple[str, ...], edges: list[Edge], negative: bool):
        """Unknowns and legality + bounding constraints of one component for a whole band."""
        unknowns = self._unknowns(stmts, negative)
        constraints = self._bounds(stmts, negative)
        bound = {p: var(f"u_{p}") for p in self.scop.params}
        for edge in edges:
            constraints.extend(nonnegative_on(edge.relation, *self._delta_form(edge, +1, negative, {}, {})))
            constraints.extend(nonnegative_on(edge.relation, *self._delta_form(edge, -1, negative, var("w"), bound)))
        return unknowns, unknowns.basic_set(constraints)

    def _independence(self, stmt: str, sign: int, negative: bool, into: Constraints) -> None:
        """Pluto's heuristic: non-negative on the orthogonal complement, positive in sum."""
        basis = orthogonal_complement(tuple(self.found[stmt]), self.dims[stmt])
        terms = [linear(*((sign * v, self.coefficient(stmt, k, negative)) for k, v in enumerate(vec) if v))
                 for vec in basis]
        for term in terms:
            into.nonnegative(term)
        into.nonnegative(linear(*((1, t) for t in terms), (-1, {1: 1})))

    def _is_full_rank(self, stmt: str) -> bool:
        return self.dims[stmt] == 0 or rank(self.found[stmt]) == self.dims[stmt]

    def _sign_patterns(self, stmts: list[str], negative: bool) -> list[tuple[int, ...]]:
        """Orientation of the independence constraint per statement, most promising first: the
        direction of the original loops (a descending loop wants a negative coefficient)."""
        patterns = [(1,) * len(stmts)]
        if negative:
            hint = tuple(self._original_direction(s) for s in stmts)
            patterns = list(dict.fromkeys([hint, (1,) * len(stmts), (-1,) * len(stmts)]))
            if len(stmts) <= 4:
                patterns += [p for p in itertools.product((1, -1), repeat=len(stmts)) if p not in patterns]
        return patterns

    def _original_direction(self, stmt: str) -> int:
        """+1/-1: the sign the original schedule gives to the first direction still open."""
        basis = orthogonal_complement(tuple(self.found[stmt]), self.dims[stmt])
        for row in self.original.coefficients(stmt):
            projection = sum(sum(v * r for v, r in zip(vec, row)) for vec in basis)
            if projection:
                return 1 if projection > 0 else -1
        return 1

    def _component_hyperplane(self, stmts: tuple[str, ...], edges: list[Edge], problems: dict,
                              lazy: bool) -> Row | None:
        """A new hyperplane for one component, or None when it has none (or needs none).

        Eager: linearly independent for every statement not yet full rank. ``lazy``: where that
        fails, independent for one of them (the first that has one, in textual order), which
        still raises a rank. ``problems`` caches the component's band constraints per
        coefficient mode."""
        open_statements = [s for s in stmts if not self._is_full_rank(s)]
        if not open_statements:
            return None
        modes = [self.negative] if self.negative is not None else [False, True]
        required = [open_statements] + ([[s] for s in open_statements] if lazy and len(open_statements) > 1 else [])
        for independent in required:
            for negative in modes:
                if negative not in problems:
                    problems[negative] = self._band_problem(stmts, edges, negative)
                unknowns, feasible = problems[negative]
                for pattern in self._sign_patterns(independent, negative):
                    independence = Constraints()
                    for s, sign in zip(independent, pattern):
                        self._independence(s, sign, negative, independence)
                    values = unknowns.lexmin(feasible.intersect(unknowns.basic_set(independence)))
                    if values is not None:
                        self.used_negative |= negative
                        if independent is not open_statements:
                            self.notes.append(
                                f"pluto: no hyperplane independent for all of {', '.join(open_statements)} "
                                f"at schedule level {len(self.levels)}; lazy search: hyperplanes independent "
                                f"for {independent[0]} only")
                        return self._row(values, stmts, negative)
        return None

    def _find_hyperplane(self, components: dict[tuple[str, ...], tuple[list[Edge], dict]],
                         lazy: bool) -> Row | None:
        """One band member: independent per weakly connected component (constant 0 where a
        component has no new hyperplane); None when no component has one."""
        row: Row = {}
        progress = False
        for stmts, (edges, problems) in components.items():
            part = self._component_hyperplane(stmts, edges, problems, lazy)
            if part is None:
                part = {s: ((0,) * self.dims[s], 0) for s in stmts}
            else:
                progress = True
            row.update(part)
        return row if progress else None

    def _row(self, values: dict[str, int], stmts: tuple[str, ...], negative: bool) -> Row:
        row: Row = {}
        for s in stmts:
            if negative:
                coeffs = tuple(values[f"{s}_p{k}"] - values[f"{s}_n{k}"] for k in range(self.dims[s]))
            else:
                coeffs = tuple(values[f"{s}_c{k}"] for k in range(self.dims[s]))
            shifts = tuple((p, values[f"{s}_d{p}"]) for p in self._shift_params if values[f"{s}_d{p}"])
            row[s] = (coeffs, values[f"{s}_cst"], shifts) if shifts else (coeffs, values[f"{s}_cst"])
        return row

    # ----- strongly connected components and cuts --------------------------------------------
    def _components(self, edges: list[Edge]) -> list[list[str]]:
        """SCCs of the statement graph, in a topological order (ties: textual order)."""
        succ = {s: set() for s in self.statements}
        for e in edges:
            succ[e.source].add(e.sink)
        index, low, on_stack, stack, comps = {}, {}, set(), [], []
        counter = itertools.count()

        def visit(v):
            index[v] = low[v] = next(counter)
            stack.append(v)
            on_stack.add(v)
            for w in sorted(succ[v], key=self.order.get):
                if w not in index:
                    visit(w)
                    low[v] = min(low[v], low[w])
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                comps.append(sorted(comp, key=self.order.get))

        for v in self.statements:
            if v not in index:
                visit(v)
        comps.reverse()  # Tarjan yields reverse topological order
        return _stable_topological(comps, edges, self.order)

    def _cut(self, groups: list[list[str]], edges: list[Edge]) -> list[Edge]:
        """Add a scalar level ordering ``groups``; drop the dependences between groups."""
        position = {s: k for k, g in enumerate(groups) for s in g}
        row = {s: (tuple(0 for _ in range(self.dims[s])), position[s]) for s in self.statements}
        self.levels.append(Level("scalar", [row]))
        return [e for e in edges if position[e.source] == position[e.sink]]

    def _by_depth(self, components: list[list[str]]) -> list[list[str]]:
        """Neighbouring SCCs (in topological order) of the same loop depth, merged."""
        groups: list[list[str]] = []
        for comp in components:
            depth = max(self.dims[s] for s in comp)
            if groups and max(self.dims[s] for s in groups[-1]) == depth:
                groups[-1] = groups[-1] + comp
            else:
                groups.append(comp)
        return groups

    def _stuck_cut(self, active: list[Edge]) -> list[Edge] | None:
        """When no hyperplane exists: cut between the SCCs of the remaining dependences; None
        when no cut separates any dependence."""
        components = self._components(active)
        if len(components) < 2:
            return None
        remaining = self._cut(components, active)
        if len(remaining) < len(active):
            return remaining
        self.levels.pop()  # this cut separated no dependence
        return None

    # ----- main loop -----------------------------------------------------------------------------
    def _band(self, active: list[Edge], lazy: bool) -> list[Row]:
        """The hyperplanes of one permutable band (empty when there is none)."""
        band: list[Row] = []
        if all(self._is_full_rank(s) for s in self.statements):
            return band
        components = {c: ([e for e in active if e.source in c], {}) for c in weak_components(self.statements, active)}
        while not all(self._is_full_rank(s) for s in self.statements):
            row = self._find_hyperplane(components, lazy)
            if row is None:
                break
            band.append(row)
            self._record(row)
        return band

    def _record(self, row: Row) -> None:
        """Add the hyperplanes of ``row`` that raise a statement's rank to ``found``."""
        for s in self.statements:
            if not self._is_full_rank(s) and any(row[s][0]):
                candidate = self.found[s] + [row[s][0]]
                if rank(candidate) > rank(self.found[s]):
                    self.found[s] = candidate

    def _original_level(self, active: list[Edge]) -> Level:
        """The last resort: per weakly connected component of the dependences left, the next
        dimension of the original schedule (legal and satisfying some of them, see
        :mod:`polyopt.schedulers.fallback`); statements without dependences left get 0."""
        row: Row = {s: ((0,) * self.dims[s], 0, ()) for s in self.statements}
        for component in weak_components(self.statements, active):
            inside = [e for e in active if e.source in component]
            if not inside:
                continue
            k, part = self.original.next_dimension(component, inside)
            row.update(part)
            self.used_negative |= any(c < 0 for s in component for c in part[s][0])
            hint = " (negative_coeffs=True may find one)" if self.negative is False else ""
            self.notes.append(f"pluto: no legal hyperplane for {', '.join(component)}{hint}; schedule level "
                              f"{len(self.levels)} is dimension {k} of the original schedule")
        self._record(row)
        scalar = not any(any(coeffs) or any(c for _, c in params) for coeffs, _, params in row.values())
        return Level("scalar", [row]) if scalar else Level("band", [row], permutable=True, edges=active)

    def run(self) -> list[Level]:
        active = list(self.edges)
        if self.fuse != "max":  # "no": distribute every SCC; "smart": SCCs of different depth
            components = self._components(active)
            groups = components if self.fuse == "no" else self._by_depth(components)
            if len(groups) > 1:
                active = self._cut(groups, active)
        # every level makes progress: a band raises ranks, a cut splits a strongly connected
        # component, an original dimension is later than the last one its component took
        max_levels = (sum(self.dims.values()) + 2 * len(self.statements)
                      + (len(self.original.rows) + 1) * len(self.statements))
        while len(self.levels) < max_levels:
            if all(self._is_full_rank(s) for s in self.statements) and not active:
                return self.levels
            band = self._band(active, lazy=False)
            if not band:
                remaining = self._stuck_cut(active)
                if remaining is not None:
                    active = remaining
                    continue
                band = self._band(active, lazy=True)
            if band:
                self.levels.append(Level("band", band, permutable=True, edges=active))
                active = remaining_after(band, active)
                continue
            level = self._original_level(active)
            self.levels.append(level)
            active = remaining_after(level.rows, active)
        raise ScheduleError(f"pluto: internal error: no complete schedule for {self.scop.name} "
                            f"after {max_levels} levels")


def _stable_topological(components: list[list[str]], edges: list[Edge], order: dict[str, int]) -> list[list[str]]:
    """Topological order of SCCs that keeps textual order wherever dependences allow."""
    comp_of = {s: k for k, comp in enumerate(components) for s in comp}
    preds = {k: set() for k in range(len(components))}
    for e in edges:
        a, b = comp_of[e.source], comp_of[e.sink]
        if a != b:
            preds[b].add(a)
    done: list[int] = []
    remaining = set(range(len(components)))
    while remaining:
        ready = [k for k in remaining if preds[k] <= set(done)]
        k = min(ready, key=lambda c: min(order[s] for s in components[c]))
        done.append(k)
        remaining.discard(k)
    return [components[k] for k in done]


class PlutoLevels(NamedTuple):
    """A Pluto schedule as levels (bands and cuts), whether it used negative coefficients, and
    the fallbacks it took (one line each; empty when the search needed none)."""

    levels: list[Level]
    used_negative: bool
    notes: tuple[str, ...]


def pluto_levels(scop: Scop, deps: Dependences, *, fuse: str = "smart",
                 negative_coeffs: bool | None = None, param_shifts: bool = False) -> PlutoLevels:
    """The Pluto schedule of ``scop``. ``negative_coeffs``: False = Pluto (non-negative), True =
    Pluto+ (bounded negative), None = Pluto, switching a component to Pluto+ only where Pluto
    finds nothing."""
    scheduler = PlutoScheduler(scop, deps, fuse=fuse, negative_coeffs=negative_coeffs, param_shifts=param_shifts)
    levels = scheduler.run()
    return PlutoLevels(levels, scheduler.used_negative, tuple(dict.fromkeys(scheduler.notes)))
