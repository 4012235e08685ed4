"""What the schedulers do after choosing hyperplanes, as primitives recorded in the trace.

Each function looks at a :class:`~polyopt.transform.schedule.Schedule`, decides per band (the
stride-1 loop innermost for vectorization, tile sizes, which loop runs on threads, register
tiles) and applies its decisions as primitive steps with a note saying why, so that
``schedule.trace`` shows what pluto did and replays it. The steps are not verified one by one
(the compiled schedule is verified once, as a whole).
"""
from __future__ import annotations

from typing import Sequence

from polyopt.errors import IllegalScheduleError, ScheduleError
from polyopt.schedulers.cost import BandCost, EpilogueFusion, auto_tile_sizes
from polyopt.transform import nodes as N
from polyopt.transform import tree as tree_ops
from polyopt.transform.marks import PARALLEL_MARK
from polyopt.transform.primitives import loop_names_of, loop_statements, run
from polyopt.transform.schedule import Schedule



def _step(schedule: Schedule, primitive: str, loops, note: str, **options) -> Schedule:
    return run(schedule, primitive, loops, check=False, note=note, **options)


def _innermost(band: N.Band) -> bool:
    return not N.has_band_below(band)


def vectorize_order(schedule: Schedule) -> Schedule:
    """In every innermost permutable band, the parallel loop with the most stride-1 accesses
    (and no strided one) moves innermost: the loop LLVM then vectorizes."""
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
    return schedule


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
    instead of one per outer tile; where no tile loop is coincident, the tile loops are skewed
    into a wavefront. An untiled band keeps its loop order (its innermost loop was chosen for
    vectorization) and gets no wavefront: a wavefront of single iterations has neither locality
    nor enough work per front to pay for its barriers."""
    decisions: list[tuple[str, tuple[str, ...], str]] = []

    def visit(node: N.Node) -> None:
        if isinstance(node, N.Mark) and node.name == PARALLEL_MARK:
            return
        if isinstance(node, N.Band):
            names = list(node.names)
            coincident = [node.flag(k) for k in range(len(names))]
            tiled = len(names) >= 2 and node.permutable and N.has_band_below(node)
            if tiled and any(coincident) and not coincident[0]:
                order = [k for k in range(len(names)) if coincident[k]] + [k for k in range(len(names)) if not coincident[k]]
                names, coincident = [names[k] for k in order], [coincident[k] for k in order]
                decisions.append(("permute", tuple(names), "parallel tile loops outermost"))
            if not any(coincident) and wavefront and tiled:
                decisions.append(("wavefront", (names[0], names[1]), "no parallel tile loop: a wavefront of tiles"))
                coincident = [False, True] + coincident[2:]
            if any(coincident):
                decisions.append(("parallel", (names[coincident.index(True)],), "outermost parallel loop"))
                return
            if not nested:
                return
        for child in N.children(node):
            visit(child)

    visit(schedule.root)
    for primitive, loops, note in decisions:
        schedule = _step(schedule, primitive, loops, note)
    return schedule


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
