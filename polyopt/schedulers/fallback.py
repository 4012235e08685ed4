"""The original schedule as the last resort of our schedulers: a legal dimension that always exists.

Every dependence goes from an earlier to a later instance of the original (textual) schedule, so
on every dependence point the original time vectors differ lexicographically positively. Take
the dependence pieces a scheduler has not yet strongly satisfied, and the first dimension of
the original schedule whose difference is not zero on all of them: every earlier original
dimension is zero on those points, so this one is non-negative on all of them (a legal
dimension), and positive on some (it satisfies some dependence points, so a scheduler that takes
it makes progress). Pluto and Feautrier take such a dimension where their search finds none --
a decision they record in the Schedule's trace, never silently.
"""
from __future__ import annotations

import islpy as isl

from polyopt.errors import ScheduleError
from polyopt.islutil import maps_of
from polyopt.schedulers.levels import Edge, Row, delta_set
from polyopt.analysis.scop import Scop


class OriginalDimensions:
    """The dimensions of a Scop's flat original schedule, one :class:`Row` each."""

    def __init__(self, scop: Scop):
        self.scop = scop
        flat = scop.schedule.get_map().intersect_domain(scop.domain)
        per_statement = {m.get_tuple_name(isl.dim_type.in_): m for m in maps_of(flat)}
        self.rows: list[Row] = []
        self.unavailable: str | None = None   # why the original schedule is not affine rows
        dims = {m.dim(isl.dim_type.out) for m in per_statement.values()}
        pieces: dict[str, list[tuple]] = {}
        for stmt in scop.statements:
            if stmt.name not in per_statement:     # an empty domain: any row orders it
                continue
            multi = _single_affine(per_statement[stmt.name])
            entries = [] if multi is None else [_affine_row(multi.get_at(k), len(stmt.iterators), scop.params)
                                                for k in range(multi.dim(isl.dim_type.out))]
            if multi is None or None in entries:
                self.unavailable = f"the original schedule of {stmt.name} is not affine"
                return
            pieces[stmt.name] = entries
        for k in range(max(dims, default=0)):
            self.rows.append({s.name: (pieces[s.name][k] if s.name in pieces and k < len(pieces[s.name])
                                       else ((0,) * len(s.iterators), 0, ()))
                              for s in scop.statements})

    def coefficients(self, stmt: str) -> list[tuple[int, ...]]:
        """The non-zero iterator coefficient vectors of ``stmt``'s original dimensions, outermost
        first (the direction of its loops)."""
        return [row[stmt][0] for row in self.rows if any(row[stmt][0])]

    def next_dimension(self, stmts: tuple[str, ...] | list[str], edges: list[Edge]) -> tuple[int, Row]:
        """(k, row): the first original dimension k whose difference is not zero on every point
        of ``edges`` (the unsatisfied dependences among ``stmts``), restricted to ``stmts``.

        It is non-negative on every point of ``edges`` (see the module docstring); a negative
        point would mean the dependences contradict the original order, and is refused."""
        if self.unavailable is not None:
            raise ScheduleError(f"no legal dimension left for {', '.join(stmts)}, and "
                                f"{self.unavailable}")
        for k, full in enumerate(self.rows):
            row = {s: full[s] for s in stmts}
            if all(delta_set(e, row, "!= 0").is_empty() for e in edges):
                continue
            if any(not delta_set(e, row, "< 0").is_empty() for e in edges):
                raise ScheduleError(f"dimension {k} of the original schedule runs a dependence among "
                                    f"{', '.join(stmts)} backwards: the dependences do not match "
                                    "the original schedule")
            return k, row
        raise ScheduleError(f"dependences among {', '.join(stmts)} are left that the original "
                            "schedule does not order")


def _single_affine(schedule: isl.Map) -> isl.MultiAff | None:
    """The one quasi-affine function of a statement's flat schedule, or None where it has
    several pieces that differ."""
    pieces: list[isl.MultiAff] = []
    isl.PwMultiAff.from_map(schedule).foreach_piece(lambda _, multi: pieces.append(multi))
    if not pieces or any(not p.plain_is_equal(pieces[0]) for p in pieces[1:]):
        return None
    return pieces[0]


def _affine_row(aff: isl.Aff, n_iterators: int, params: tuple[str, ...]) -> tuple | None:
    """One statement's entry of a :class:`Row` (coefficients, constant, parameter terms), or
    None where the expression has integer divisions (a Row cannot say ``floor(i / 2)``)."""
    if aff.dim(isl.dim_type.div) or not aff.get_denominator_val().is_one():
        return None
    space_params = [aff.get_dim_name(isl.dim_type.param, k) for k in range(aff.dim(isl.dim_type.param))]
    coeffs = tuple(aff.get_coefficient_val(isl.dim_type.in_, d).to_python() for d in range(n_iterators))
    terms = {name: aff.get_coefficient_val(isl.dim_type.param, k).to_python()
             for k, name in enumerate(space_params)}
    return coeffs, aff.get_constant_val().to_python(), tuple((p, terms[p]) for p in params if terms.get(p))
