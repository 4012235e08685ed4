"""What the schedulers do after choosing hyperplanes, as primitives recorded in the trace.

Each function looks at a :class:`~polyopt.transform.schedule.Schedule`, decides per band (the
stride-1 loop innermost for vectorization, tile sizes, which loop runs on threads, register
tiles) and applies its decisions as primitive steps with a note saying why, so that
``schedule.trace`` shows what pluto did and replays it. The steps are not verified one by one
(the compiled schedule is verified once, as a whole).
"""
from __future__ import annotations

from typing import Sequence

import islpy as isl

from polyopt.errors import IllegalScheduleError, ScheduleError
from polyopt.schedulers.cost import BandCost, EpilogueFusion, auto_tile_sizes
from polyopt.transform import nodes as N
from polyopt.transform import tree as tree_ops
from polyopt.transform.marks import PARALLEL_MARK
from polyopt.transform.primitives import (domain_at, find, loop_names_of, loop_statements, refresh_flags, run,
                                          statement_groups, statements_universe)
from polyopt.transform.schedule import Schedule

#: Rows whose sums :func:`row_tiles` runs at once (independent chains of additions: the FPU's
#: latency times its additions per cycle).
SUM_ROWS = 8
from polyopt.islutil import tuple_names

#: Strip length of an outermost loop that :func:`sink_vector_loops` moves innermost: the strips
#: stay outermost (the thread team's loop), the points within a strip become the vector loop.
SINK_STRIP = 32



def _step(schedule: Schedule, primitive: str, loops, note: str, **options) -> Schedule:
    return run(schedule, primitive, loops, check=False, note=note, **options)


def _innermost(band: N.Band) -> bool:
    return not N.has_band_below(band)


def vectorize_order(schedule: Schedule) -> Schedule:
    """In every innermost permutable band, the parallel loop with the most stride-1 accesses
    (and no strided one) moves innermost: the loop LLVM then vectorizes; then, where the
    innermost loop still does not vectorize, a unit-stride loop of an outer band moves
    innermost (:func:`sink_vector_loops`)."""
    for _, band in N.bands(schedule.root):
        n = len(band.members)
        if n < 2 or not band.permutable or not _innermost(band):
            continue
        scores = [(tree_ops.vector_score(band.members[k], schedule.scop) if band.flag(k) else -1, k)
                  for k in range(n)]
        best_score, best = max(scores, key=lambda item: (item[0], item[1]))
        if best_score <= 0 or best == n - 1:
            continue
        order = [band.names[k] for k in range(n) if k != best] + [band.names[best]]
        schedule = _step(schedule, "permute", order, f"stride-1 loop {band.names[best]} innermost (vectorized)")
    return sink_vector_loops(schedule)


def sink_vector_loops(schedule: Schedule) -> Schedule:
    """Where a statement's innermost loop cannot be its vector loop (it carries a dependence or
    walks some array with a stride: doitgen's and matrix-vector products' sum over a column,
    ``sum[p] += A[s] * C4[s, p]`` with ``s`` innermost) and a loop around it walks every array of
    the statement with unit stride or not at all (``p``), that loop moves innermost, below the
    loops that are nested directly inside it, after a ``distribute`` that gives the statement's
    nest its own copy of the loop (doitgen LARGE 195 -> 47 ms on 2 threads: vector loads of
    ``C4``'s rows instead of one cache line per element down its columns). A loop with no loop
    outside it is strip-mined first (:data:`SINK_STRIP`) and only its points move: the strips
    stay the thread team's loop. A loop that walks its arrays backwards (``-p``) is reversed.
    Each move is verified, and kept only where the moved loop carries no dependence innermost
    (it is vectorizable there); the others are not made."""
    statements = [s.name for s in schedule.scop.statements]
    for statement in statements + statements:  # again: a distribution may leave an earlier nest innermost
        try:
            schedule = _sink_for(schedule, statement)
        except (IllegalScheduleError, ScheduleError):
            continue
    return schedule


def _sink_for(schedule: Schedule, statement: str) -> Schedule:
    """:func:`sink_vector_loops` for the nest of ``statement`` (the schedule unchanged where
    nothing moves)."""
    scop = schedule.scop
    loops = loop_names_of(schedule, statement)
    if len(loops) < 2:
        return schedule
    path, k = find(schedule, loops[-1])
    band = N.at(schedule.root, path)
    if N.has_band_below(band) or k != len(band.members) - 1:
        return schedule
    nest = tuple(tuple_names(domain_at(schedule, path)))  # the statements of the innermost band
    if statement not in nest or statement != min(nest, key=[s.name for s in scop.statements].index):
        return schedule  # one decision per innermost band: its first statement's (none: never runs)
    keep = statements_universe(scop, nest)
    if band.flag(k) and tree_ops.vector_score(band.members[k].intersect_domain(keep), scop) > 0:
        if _direction(band.members[k]) < 0:  # vectorizes already, but backwards
            return run(schedule, "reverse", (loops[-1],), note=f"{loops[-1]} runs forwards through memory")
        return schedule
    for position in reversed(range(len(loops) - 1)):
        name = loops[position]
        outer_path, j = find(schedule, name)
        member = N.at(schedule.root, outer_path).members[j].intersect_domain(keep)
        if tree_ops.vector_score(member, scop) <= 0:
            continue
        made = _isolate(schedule, name, set(nest))
        if position == 0:
            made = run(made, "split", (loop_names_of(made, statement)[0],), check=False, factor=SINK_STRIP,
                       note=f"strips of {name} stay outermost, their points become the vector loop")
            position += 1
        moved = loop_names_of(made, statement)[position:]
        made = run(made, "permute", moved[1:] + moved[:1],
                   note=f"{name} walks the arrays of {', '.join(nest)} with unit stride: innermost (vectorized) "
                        f"instead of {loops[-1]}")
        inner_path, inner = find(made, moved[0])
        inner_band = N.at(made.root, inner_path)
        if not inner_band.flag(inner):
            return schedule
        if _direction(inner_band.members[inner]) < 0:
            made = run(made, "reverse", (moved[0],), note=f"{moved[0]} runs forwards through memory")
        return made
    return schedule


def _isolate(schedule: Schedule, name: str, nest: set[str]) -> Schedule:
    """``schedule`` with loop ``name`` distributed so that one copy runs the statements ``nest``
    alone (unchanged where it runs no others)."""
    path, _ = find(schedule, name)
    groups = statement_groups(schedule, path, nest)
    if len(groups) == 1:
        return schedule
    return run(schedule, "distribute", (name,), groups=groups,
               note=f"{', '.join(sorted(nest))} in a nest of their own, for their vector loop")


def _direction(member) -> int:
    """-1 where every statement's value of ``member`` is minus one of its iterators (plus a
    constant), else 1."""
    affs: list[isl.Aff] = []
    member.foreach_pw_aff(lambda pa: pa.foreach_piece(lambda _, aff: affs.append(aff)))
    signs = {value.to_python() > 0 for aff in affs
             for value in (aff.get_coefficient_val(isl.dim_type.in_, d) for d in range(aff.dim(isl.dim_type.in_)))
             if not value.is_zero()}
    return -1 if signs == {False} else 1


def tile_bands(schedule: Schedule, sizes, *, second_level=None, register_tile: Sequence[int] | None = None,
               conflict_free: bool = False, min_depth: int = 2) -> Schedule:
    """Rectangular tiles on every permutable band of ``min_depth`` members or more: ``sizes`` one
    int, per-member sizes (the last repeats) or "auto" (per band, from the caches:
    :func:`polyopt.schedulers.tilesize.band_tile_sizes`, in whole register tiles when
    ``register_tile`` gives their sizes, no taller than the L1 cache's ways with
    ``conflict_free``); ``second_level``: tiles per outer tile (two levels)."""
    tiled = [band for _, band in N.bands(schedule.root) if band.permutable and len(band.members) >= min_depth]
    deepest = max((len(band.members) for band in tiled), default=0)
    if isinstance(sizes, (list, tuple)) and len(sizes) > max(deepest, 1):
        raise ScheduleError(f"tile sizes {list(sizes)} are more than the loops of any tilable band of "
                            f"{schedule.scop.name} (at most {deepest})")
    for band in tiled:
        n = len(band.members)
        if sizes == "auto":
            inner, _ = auto_tile_sizes(band, schedule.scop, register_tile, conflict_free=conflict_free)
            why = "tile sizes from the cache model"
        else:
            inner = tree_ops.per_member(sizes, n)
            why = "tile sizes as asked"
        levels = [list(inner)]
        if second_level is not None:
            levels = [[a * b for a, b in zip(inner, tree_ops.per_member(second_level, n))], list(inner)]
        schedule = _step(schedule, "tile", band.names, why, sizes=levels if len(levels) > 1 else levels[0])
    return schedule


def mark_parallel(schedule: Schedule, *, wavefront: bool = True, nested: bool = False) -> Schedule:
    """Mark the outermost coincident loop of every outermost band parallel; with ``nested``,
    of the bands below one without coincident loops too (the loop nests inside a time loop).

    On a tiled band (a permutable band with bands below it) the coincident tile loops move
    outermost first -- legal in a permutable band, and one thread team for the whole band
    instead of one per outer tile -- where the first of them is still coincident there (a loop
    with dependence distances (1, 1) on the band is coincident second, not first); where no
    tile loop is coincident, the tile loops are skewed
    into a wavefront. An untiled band keeps its loop order (its innermost loop was chosen for
    vectorization) and gets no wavefront: a wavefront of single iterations has neither locality
    nor enough work per front to pay for its barriers."""
    decisions: list[tuple[str, tuple[str, ...], str]] = []

    def visit(node: N.Node, path: tuple[int, ...]) -> None:
        if isinstance(node, N.Mark) and node.name == PARALLEL_MARK:
            return
        if isinstance(node, N.Band):
            names = list(node.names)
            coincident = _parallel_members(schedule, path)
            tiled = len(names) >= 2 and node.permutable and N.has_band_below(node)
            if tiled and any(coincident) and not coincident[0]:
                order = [k for k in range(len(names)) if coincident[k]] + [k for k in range(len(names)) if not coincident[k]]
                moved = [names[k] for k in order]
                trial = _step(schedule, "permute", tuple(moved), "parallel tile loops outermost")
                flags = _parallel_members(trial, find(trial, moved[0])[0])
                if flags[0]:  # (moved out, a loop may carry what the loops it passed carried)
                    names, coincident = moved, flags
                    decisions.append(("permute", tuple(names), "parallel tile loops outermost"))
            if not any(coincident) and wavefront and tiled:
                decisions.append(("wavefront", (names[0], names[1]), "no parallel tile loop: a wavefront of tiles"))
                coincident = [False, True] + coincident[2:]
            if any(coincident):
                decisions.append(("parallel", (names[coincident.index(True)],), "outermost parallel loop"))
                return
            if not nested:
                return
        for k, child in enumerate(N.children(node)):
            visit(child, path + (k,))

    visit(schedule.root, ())
    for primitive, loops, note in decisions:
        schedule = _step(schedule, primitive, loops, note)
    return schedule


def _parallel_members(schedule: Schedule, path: tuple[int, ...]) -> list[bool]:
    """Per member of the band at ``path``, whether it is flagged coincident and carries no
    dependence given the loops outside it: the flag alone may not say so, since isl's tiling
    copies each point loop's flag to its tile loop (coincident given i, j need not be given
    i's tiles: distances (1, 1), i and i + 1 in one tile, j and j + 1 in two)."""
    band = N.at(schedule.root, path)
    fresh = N.at(refresh_flags(schedule, schedule.root, path), path)
    return [band.flag(k) and fresh.flag(k) for k in range(len(band.members))]


def register_tiles(schedule: Schedule, sizes: Sequence[int], *, only: set[tuple[str, ...]] | None = None) -> Schedule:
    """Unroll-and-jam every innermost band that qualifies (:func:`polyopt.transform.tree.
    register_plan`) by ``sizes`` (rows, columns); with ``only``, the bands running exactly one of
    those sets of statements."""
    for path, band in N.bands(schedule.root):
        if not _innermost(band):
            continue
        if only is not None and loop_statements(schedule, band.names[0]) not in only:
            continue
        found = tree_ops.register_plan(band.partial(), [band.flag(k) for k in range(len(band.members))],
                                       band.permutable, schedule.scop, sizes)
        if found is None:
            continue
        plan, vector = found
        loops = [k for k in range(len(plan)) if plan[k] > 1 and k != vector] + [vector]
        schedule = _step(schedule, "register_tile", [band.names[k] for k in loops],
                         f"register tile of {sizes[0]} x {sizes[1]}: accumulators in registers",
                         sizes=[plan[k] for k in loops])
    return schedule


def row_tiles(schedule: Schedule, rows: int = SUM_ROWS, *, skip: set[tuple[str, ...]] = frozenset()) -> Schedule:
    """Unroll-and-jam by ``rows`` the parallel loop of every innermost band, not register-tiled
    and not in ``skip`` (statement sets: the tiled bands), whose innermost loop is a sum along
    unit-stride accesses (it carries the sum, so it is no vector loop: ``tmp[i] += A[i, j] *
    x[j]``, the products by rows of atax, bicg, mvt, gemver): each iteration of the sum then adds
    into ``rows`` independent elements, whose in-order additions the vectorizer interleaves, instead
    of one chain of additions at the FPU's latency; the sum's order per element is unchanged. A
    ``register_tile`` step of one row of ``rows`` points innermost (LARGE mvt's row sums on
    one thread: 3.5 -> 1.5 ms)."""
    for loops, row in row_tile_bands(schedule, skip=skip):
        schedule = _step(schedule, "register_tile", [loops[-1], row], f"{rows} rows of {row} at once: "
                         f"independent in-order sums along {loops[-1]}", sizes=[1, rows])
    return schedule


def row_tile_bands(schedule: Schedule, *, skip: set[tuple[str, ...]] = frozenset()) -> list[tuple[tuple[str, ...], str]]:
    """The bands :func:`row_tiles` unrolls and jams: (their loops, the loop of the rows)."""
    found = []
    for _, band in N.bands(schedule.root):
        n = len(band.members)
        if n < 2 or not band.permutable or N.has_band_below(band) or band.flag(n - 1) or any(band.loop_types):
            continue
        statements = loop_statements(schedule, band.names[0])
        if statements in skip or tree_ops.vector_score(band.members[-1], schedule.scop) <= 0:
            continue
        outer = [k for k in range(n - 1) if band.flag(k)]
        if outer:
            found.append((band.names, band.names[outer[-1]]))
    return found


def apply_cost_model(schedule: Schedule, costs: Sequence[BandCost]) -> Schedule:
    """Tile the bands the cost model (:mod:`polyopt.schedulers.cost`) says to tile, with its
    sizes; each step's note gives the model's numbers."""
    for cost in costs:
        if cost.tile:
            schedule = _step(schedule, "tile", cost.loops, f"cost model: {cost}", sizes=list(cost.tile_sizes))
    return schedule


def fuse_epilogues(schedule: Schedule, fusions: Sequence[EpilogueFusion]) -> tuple[Schedule, tuple[str, ...]]:
    """Run the element-wise nests the cost model says to fuse (:func:`polyopt.schedulers.cost.
    epilogue_fusions`) inside their producer's output loops, after its reduction: where the
    producer is tiled, its output tile loops move outside its reduction's (permute) and each
    consumer is tiled by the output tile sizes; then a ``fuse`` step of that depth, whose note
    gives the model's numbers. Unlike the other steps, the fusion is verified at once: where the
    verifier refuses it, the nests stay apart. Also returns a note per fusion not made, with the
    model's numbers or the verifier's reason (for the schedule's notes)."""
    apart: list[str] = []
    for fusion in fusions:
        if not fusion.fuse:
            apart.append(f"cost model: {fusion}")
            continue
        if not all(loop_statements(schedule, loops[0]) for loops in fusion.consumers):
            continue  # an epilogue nest of statements that never run: nothing to fuse
        try:
            schedule = _fused_epilogue(schedule, fusion)
        except (IllegalScheduleError, ScheduleError) as refused:
            apart.append(f"cost model: {fusion}, but the nests stay apart: {refused}")
    return schedule, tuple(apart)


def _fused_epilogue(schedule: Schedule, fusion: EpilogueFusion) -> Schedule:
    """``schedule`` with the steps of one epilogue fusion (see :func:`fuse_epilogues`)."""
    if fusion.order != fusion.producer:
        schedule = _step(schedule, "permute", fusion.order, "cost model: output tile loops outside the "
                         "reduction's, so that each output tile is complete before its epilogue runs")
    heads = [fusion.order[0]]
    for loops in fusion.consumers:
        statement = loop_statements(schedule, loops[0])[0]
        if fusion.consumer_tiles is not None:
            schedule = _step(schedule, "tile", loops, "cost model: the epilogue in the output tiles of the "
                             "reduction it follows", sizes=list(fusion.consumer_tiles))
        heads.append(loop_names_of(schedule, statement)[0])
    return run(schedule, "fuse", heads, note=f"cost model: {fusion}", depth=fusion.depth)
