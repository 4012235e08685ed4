"""The analytical cost model behind pluto's defaults: tile a band, register-tile it, or leave it.

Per permutable band of two or more loops the model estimates the bytes each iteration brings in
from memory, for loop extents it assumes large (:data:`ASSUMED_EXTENT`; the sizes are call
arguments, unknown when the code is made):

- *untiled*: the innermost loops whose working set fits half the L2 cache reuse their data; the
  traffic is what those loops touch divided by their iterations (gemm's (i, k, j): the j and k
  loops reuse a row of C and of A, B streams in: about 8 bytes per iteration);
- *tiled*: the footprint of one tile of the sizes :func:`~polyopt.schedulers.tilesize.
  band_tile_sizes` chooses, divided by its volume (gemm: well under 1 byte per iteration).

Before that, where pluto fused statements so that an innermost loop walks some array with a
stride (:func:`strided_fused_bands`: bicg's two products, one transposed) and distributing them
removes every such walk, the distributed schedule (``fuse="no"``) is taken. A band is tiled where tiling cuts the traffic by :data:`TILE_GAIN` or more, or, for a band with
no parallel loop (its tiles run as a wavefront), by :data:`WAVEFRONT_TILE_GAIN` or more. A band
without a parallel loop that this leaves untiled, in a nest that would then run on one thread
(the caller, pluto's scheduler, knows: no loop of the nest on the thread team, and not a schedule
replaced by the loops as written), is tiled anyway where its tiles bring about the same traffic
and the wavefront, the nest's only parallel code, pays on the threads the process has
(:func:`parallel_wavefront`): a gain of :data:`WAVEFRONT_PARALLEL_GAIN` or more, and the gain
times :func:`wavefront_speedup` -- the threads sharing each front's tiles, one barrier per front --
at least :data:`WAVEFRONT_PARALLEL_SPEEDUP` (trisolv on 2 threads; never on one), for every
band of such a nest (:func:`one_thread_bands`; floyd-warshall's band inside its k loop).
The note of such a band says so, with the fronts, threads and speedup. It is
register-tiled where a register tile fits it
(:func:`~polyopt.transform.tree.register_plan`: a sum loop whose accumulators stay in registers
and a stride-1 vector loop). The estimates travel with the schedule (``Schedule.cost``,
``CompiledKernel.cost``) and each decision is a step of the trace with the numbers in its note;
each :class:`BandCost` also gives its tile footprint and tiled traffic as sympy formulas in the tile
sizes (:mod:`polyopt.schedulers.cost_formulas`, derived on demand).

After tiling, element-wise epilogues (:func:`epilogue_fusions`: nests right after a contraction's
nest that read its result only at the point they write, such as a bias, a ReLU or a scaling) run
inside the contraction's output loops, once per output tile after its reduction completed: each
such nest saves a read and a write of the output array from memory where the output block of one
iteration of those loops fits half the L2 cache (it is still there when the epilogue reads it).
Only the order of the producer's tile loops changes (the reduction's tile loops innermost among
them); its point loops, register tiles, vector loop and parallel loop stay as they were, and the
epilogue is tiled by the output tile sizes, its own loops inside the tile unchanged. The verifier
checks the fusion; one it refuses, or one the model declines, is a note of the schedule.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Sequence

import islpy as isl

from polyopt.schedulers.tilesize import (WAVEFRONT_TILE_CAP, band_references, band_tile_sizes, cache_bytes,
                                        footprint_bytes)
from polyopt.transform import nodes as N
from polyopt.transform import tree as tree_ops
from polyopt.transform.marks import PARALLEL_MARK
from polyopt.transform.primitives import loop_statements

if TYPE_CHECKING:
    import sympy

#: The extent assumed for every loop of a band (a LARGE problem: far bigger than the caches).
ASSUMED_EXTENT = 1000
#: Tile a band with a parallel loop where the model expects at least this factor less traffic.
TILE_GAIN = 2.0
#: Tile a band without one (its tiles run as a wavefront) only where the gain is this large:
#: seidel-2d's 8x, lu's and cholesky's 10x pay for the wavefront's barriers; fdtd-2d's
#: 6x and jacobi-2d's 3x do not (the original order's parallel loops ran 1.5-2x faster there).
WAVEFRONT_TILE_GAIN = 8.0
#: A band without a parallel loop whose nest would otherwise run on one thread is tiled (its
#: tiles a wavefront, the nest's only parallel code) where its tiles bring no more than about the
#: same traffic: a gain of at least this (trisolv's 0.92x, floyd-warshall's 0.94x: the band reads
#: each element about once either way). Below it the threads would share the extra traffic.
WAVEFRONT_PARALLEL_GAIN = 0.85
#: ... and where the wavefront on the threads, priced by :func:`wavefront_speedup` and the tiles'
#: extra traffic, is expected this many times faster than the untiled loops on one thread (the
#: margin covers what the count leaves out: a front's uneven tiles and a descheduled thread
#: stalling a barrier; trisolv's 2-thread wavefront was 1.6x faster on a quiet machine, priced 1.6x).
WAVEFRONT_PARALLEL_SPEEDUP = 1.25
#: One barrier between two fronts of a wavefront, in iterations of a band's statements (about
#: 1 us for two threads against about 1 ns per iteration of trisolv's or floyd-warshall's body).
WAVEFRONT_BARRIER_ITERATIONS = 1000


@dataclass(frozen=True)
class BandCost:
    """The model's view of one band: estimated bytes per iteration from memory untiled and with
    ``tile_sizes``, whether a loop is parallel without a wavefront, the register tile plan (a
    size per loop; None: none fits), the decisions, and the band's references the estimates
    count ((element bytes, subscript rows over ``loops``) each, as
    :func:`~polyopt.schedulers.tilesize.band_references` gives them), from which
    :attr:`footprint_formula` and :attr:`traffic_formula` are derived when asked for."""

    loops: tuple[str, ...]
    statements: tuple[str, ...]
    untiled_bytes: float
    tiled_bytes: float
    tile_sizes: tuple[int, ...]
    parallel: bool
    register_plan: tuple[int, ...] | None
    tile: bool
    registers: bool
    references: tuple[tuple[int, tuple[tuple[float, ...], ...]], ...] = field(default=(), repr=False)
    #: Where the band's nest would run on one thread untiled (:func:`parallel_wavefront`): the
    #: threads its wavefront was priced for, its number of fronts and the speedup on them; 0: not
    #: priced (a parallel band, one tiled for its traffic, one in a nest with parallel loops).
    threads: int = 0
    fronts: int = 0
    speedup: float = 0.0

    def __post_init__(self) -> None:
        # tuples all the way down, also from the disk cache's JSON lists: records compare equal
        references = tuple((int(e), tuple(tuple(float(c) for c in row) for row in rows)) for e, rows in self.references)
        object.__setattr__(self, "references", references)

    @property
    def size_symbols(self) -> list[sympy.Symbol]:
        """The formulas' tile-size symbols in the order of ``loops`` (and of ``tile_sizes``)."""
        from polyopt.schedulers.cost_formulas import tile_symbols
        return tile_symbols(self.loops)

    @property
    def footprint_formula(self) -> sympy.Expr | None:
        """Bytes one tile touches as a sympy expression in the tile sizes ``T_<loop>`` (gemm's
        update: ``8*T_i*T_j + 8*T_i*T_k + 8*T_j*T_k``); None where the model has no exact formula
        (:func:`~polyopt.schedulers.cost_formulas.footprint_formula`)."""
        from polyopt.schedulers.cost_formulas import footprint_formula
        return footprint_formula(self.references, self.loops)

    @property
    def traffic_formula(self) -> sympy.Expr | None:
        """Bytes per iteration from memory with tiles of sizes ``T_<loop>`` (gemm's update:
        ``8/T_k + 8/T_j + 8/T_i``): :attr:`tiled_bytes` at ``tile_sizes``; None as above."""
        from polyopt.schedulers.cost_formulas import traffic_formula
        return traffic_formula(self.references, self.loops)

    def describe(self, formulas: bool = False) -> str:
        """The estimates and decisions in a line (``str``), with ``formulas`` also the footprint
        and traffic formulas on a second one."""
        sizes = "x".join(map(str, self.tile_sizes))
        chosen = " + ".join(x for x, on in (("tile", self.tile), ("register tile", self.registers)) if on) or "untiled"
        why = "" if self.parallel else " (tiles as a wavefront)"
        if self.threads:
            gain = self.untiled_bytes / self.tiled_bytes
            why += (f"; untiled its nest runs on one thread, the wavefront of {self.fronts} fronts on "
                    f"{self.threads} threads {self.speedup:.3g}x as fast, times the {gain:.3g}x traffic gain: "
                    f"{gain * self.speedup:.3g}x (tiled from {WAVEFRONT_PARALLEL_SPEEDUP:.3g}x, "
                    f"gain {WAVEFRONT_PARALLEL_GAIN:.3g} or more)")
        line = (f"band ({', '.join(self.loops)}): {self.untiled_bytes:.3g} B/iteration from memory untiled, "
                f"{self.tiled_bytes:.3g} with {sizes} tiles{why} -> {chosen}")
        if not formulas:
            return line
        footprint = self.footprint_formula
        if footprint is None:
            return line + "\n  no exact formula for this band's footprint (cost_formulas.footprint_formula says why)"
        return line + f"\n  tile footprint {footprint} B, traffic {self.traffic_formula} B/iteration"

    def __str__(self) -> str:
        return self.describe()


def untiled_bytes(references: list[tuple[int, object]], n_members: int, extent: float = ASSUMED_EXTENT) -> float:
    """Bytes per iteration from memory with the loops as scheduled (see the module docstring)."""
    capacity = cache_bytes(2) / 2
    inner = 1
    while inner < n_members and footprint_bytes(references, [1.0] * (n_members - inner) + [extent] * inner) <= capacity:
        inner += 1  # one iteration of the next loop out touches what fits: its data is reused
    extents = [1.0] * (n_members - inner) + [float(extent)] * inner
    return footprint_bytes(references, extents) / extent ** inner


def auto_tile_sizes(band: N.Band, scop, register_sizes: Sequence[int] | None, *,
                    conflict_free: bool = False) -> tuple[list[int], tuple[list[int], int] | None]:
    """The tile sizes ``tile="auto"`` gives ``band`` (whole register tiles where the band's
    register plan for ``register_sizes`` fits; uniform and capped at :data:`WAVEFRONT_TILE_CAP`
    where no loop is parallel: its tiles run as a wavefront), and that register plan."""
    coincident = [band.flag(k) for k in range(len(band.members))]
    partial = band.partial()
    plan = (tree_ops.register_plan(partial, coincident, band.permutable, scop, register_sizes)
            if register_sizes is not None else None)
    wavefront = not any(coincident)
    sizes = band_tile_sizes(partial, scop, multiple_of=plan[0] if plan else None, uniform=wavefront,
                            largest=WAVEFRONT_TILE_CAP if wavefront else None, conflict_free=conflict_free)
    if coincident[0] and (plan is None or plan[0][0] == 1) and not _reused_across(band_references(partial, scop), 0):
        sizes[0] = 1
    return sizes, plan


def _reused_across(references: list[tuple[int, object]], member: int) -> bool:
    """Whether some reference (``band_references``: element bytes, subscript matrix) reads the
    same elements at every value of ``member``, i.e. tiling that member buys reuse. Where
    none does (a batch dimension: every array has its own slice per batch), a tile along it
    keeps the same bytes per iteration at any size, and size 1 leaves all its values to the
    tile loop: the outermost, parallel one, whose iterations are what the threads share (a
    batch of 8 tiled by 8 ran on one thread)."""
    return any(not G[:, member].any() for _, G in references)


def band_cost(schedule, band: N.Band, register_sizes: Sequence[int] | None) -> BandCost:
    """The model's estimates and decisions for ``band`` of ``schedule``."""
    scop = schedule.scop
    n = len(band.members)
    partial = band.partial()
    sizes, plan = auto_tile_sizes(band, scop, register_sizes)
    parallel = any(band.flag(k) for k in range(n))
    references = band_references(partial, scop)
    untiled = untiled_bytes(references, n) if references else 0.0
    tiled = footprint_bytes(references, sizes) / float(_volume(sizes)) if references else 0.0
    tile = references != [] and untiled >= (TILE_GAIN if parallel else WAVEFRONT_TILE_GAIN) * tiled
    return BandCost(band.names, loop_statements(schedule, band.names[0]), untiled, tiled, tuple(sizes), parallel,
                    tuple(plan[0]) if plan else None, tile, plan is not None,
                    tuple((e, tuple(map(tuple, G.tolist()))) for e, G in references))


def wavefront_speedup(tile_sizes: Sequence[int], threads: int, extent: float = ASSUMED_EXTENT) -> tuple[float, int]:
    """How many times faster a band's tiles of ``tile_sizes`` run as a wavefront on ``threads``
    threads than its iterations on one, with every loop ``extent`` long, and the wavefront's
    number of fronts (its barriers). As :func:`~polyopt.schedulers.postpass.mark_parallel`
    makes it, a front is a value of the sum of the first two tile loops, whose tiles (each with
    the later tile loops inside it) the threads share: a front of ``w`` of them takes ``ceil(w /
    threads)`` times their iterations, plus a barrier of :data:`WAVEFRONT_BARRIER_ITERATIONS`.
    The band is taken as a box (a triangle has about half the tiles per front: the same
    speedup while a front has ``threads`` of them or more). 32x32 tiles of 1000x1000 on 2 threads:
    63 fronts, 1.74x."""
    counts = [1]
    for size in tile_sizes[:2]:
        m = max(1, -(-int(extent) // size))
        counts = [sum(counts[f - b] for b in range(m) if 0 <= f - b < len(counts)) for f in range(len(counts) + m - 1)]
    work = float(_volume(tile_sizes))
    for size in tile_sizes[2:]:
        work *= max(1, -(-int(extent) // size))  # the later tile loops run inside a front's tiles
    time = sum(-(-w // threads) * work + WAVEFRONT_BARRIER_ITERATIONS for w in counts)
    return sum(counts) * work / time, len(counts)


def parallel_wavefront(cost: BandCost, threads: int) -> BandCost:
    """``cost`` decided again for a band whose nest would run on one thread untiled (no loop of it
    on the thread team, and not run in the original order instead: the caller knows): a band
    without a parallel loop that the traffic alone leaves untiled is tiled, its tiles a
    wavefront, where the tiles' traffic gain is :data:`WAVEFRONT_PARALLEL_GAIN` or more and that
    gain times :func:`wavefront_speedup` on ``threads`` is :data:`WAVEFRONT_PARALLEL_SPEEDUP` or
    more (never on one thread: the barriers make it less than 1). The numbers go into the
    record (``threads``, ``fronts``, ``speedup``) and its note, tiled or not."""
    if cost.tile or cost.parallel or not cost.references or cost.tiled_bytes <= 0:
        return cost
    speedup, fronts = wavefront_speedup(cost.tile_sizes, threads)
    gain = cost.untiled_bytes / cost.tiled_bytes
    tile = gain >= WAVEFRONT_PARALLEL_GAIN and gain * speedup >= WAVEFRONT_PARALLEL_SPEEDUP
    return replace(cost, tile=tile, threads=threads, fronts=fronts, speedup=speedup)


def one_thread_bands(schedule) -> set[tuple[str, ...]]:
    """The loops of each band of each nest of ``schedule`` (parallel loops marked) that runs on
    one thread (:func:`threaded_nests`). Also the bands inside a sequential loop, whose wavefront
    (the team's fork, the fronts' barriers, the partial tiles) runs again in every iteration of
    that loop: floyd-warshall's ``(i, j)`` band inside ``k``, tiled 32x32 on 2 threads, runs
    1.6x faster than untiled at MEDIUM and 1.26x at LARGE. (It measured slower at LARGE while
    LLVM's widened overlap checks kept its tiles' rows scalar: docs/performance.md.)"""
    root = schedule.root
    nests = [f.child for f in root.children] if isinstance(root, N.Sequence) else [root]
    alone = (N.bands(nest) for nest, threaded in zip(nests, threaded_nests(schedule)) if not threaded)
    return {band.names for bands in alone for _, band in bands}


def _volume(sizes: Sequence[int]) -> int:
    volume = 1
    for size in sizes:
        volume *= size
    return volume


def band_costs(schedule, register_sizes: Sequence[int] | None) -> tuple[BandCost, ...]:
    """:func:`band_cost` of every permutable band of two or more loops, in tree order."""
    return tuple(band_cost(schedule, band, register_sizes) for _, band in N.bands(schedule.root)
                 if band.permutable and len(band.members) >= 2)


def strided_fused_bands(schedule) -> list[tuple[str, ...]]:
    """The innermost bands running several statements whose innermost loop walks some array with
    a stride (pluto fused bicg's two products with one of them transposed): distributing them
    may give every statement a stride-1 innermost loop."""
    found = []
    for _, band in N.bands(schedule.root):
        if N.has_band_below(band) or len(loop_statements(schedule, band.names[0])) < 2:
            continue
        if tree_ops.vector_score(band.members[-1], schedule.scop) == -1:
            found.append(band.names)
    return found


def threaded_nests(schedule) -> list[bool]:
    """Per nest of the outermost sequence (the whole tree where there is none): whether some loop
    of it runs on the thread team (a parallel mark above a loop with a loop inside it: an
    innermost parallel loop is only vectorized), or it is one loop deep."""
    root = schedule.root
    nests = [f.child for f in root.children] if isinstance(root, N.Sequence) else [root]
    return [not _loop_in_loop(nest) or
            any(isinstance(node, N.Mark) and node.name == PARALLEL_MARK and _loop_in_loop(node.child)
                for _, node in N.walk(nest))
            for nest in nests]


def _loop_in_loop(node: N.Node) -> bool:
    """Whether the tree at ``node`` has a loop inside a loop."""
    return any(isinstance(band, N.Band) and (len(band.members) > 1 or N.has_band_below(band))
               for _, band in N.walk(node))


@dataclass(frozen=True)
class EpilogueFusion:
    """The model's view of the element-wise nests after a contraction's nest: the producer's
    outer band's loops (``producer``), the consumers' bands' loops (``consumers``, one tuple per
    nest), the producer's loops with its output loops first (``order``) of which the first
    ``depth`` also run the consumers, the tile sizes that make each consumer's outer loops its
    output tiles (``consumer_tiles``; None: the producer is not tiled), the bytes of the output one
    iteration of those loops writes (``block_bytes``), the bytes from memory saved per output
    element (``saved_bytes``), and the decision."""

    producer: tuple[str, ...]
    consumers: tuple[tuple[str, ...], ...]
    order: tuple[str, ...]
    depth: int
    consumer_tiles: tuple[int, ...] | None
    block_bytes: float
    saved_bytes: float
    fuse: bool

    def __str__(self) -> str:
        fits = "fits" if self.fuse else "does not fit"
        heads = ", ".join(loops[0] for loops in self.consumers)
        return (f"epilogue nests ({heads}) into ({', '.join(self.order[:self.depth])}) after the "
                f"reduction: saves {self.saved_bytes:.3g} B per output element from memory; the output block of "
                f"{self.block_bytes:.3g} B {fits} half the L2 cache -> {'fuse' if self.fuse else 'separate nests'}")


def epilogue_fusions(schedule, costs: Sequence[BandCost]) -> list[EpilogueFusion]:
    """:class:`EpilogueFusion` of every contraction nest of the outermost sequence (a band with a
    reduction loop) followed by element-wise nests whose loops run over the contraction's output
    in the order of its output loops; ``costs``: the model's band costs (tile sizes)."""
    root = schedule.root
    if not isinstance(root, N.Sequence):
        return []
    found = []
    for position, nest in enumerate(root.children):
        producer = nest.child
        if not isinstance(producer, N.Band) or all(producer.flag(k) for k in range(len(producer.members))):
            continue
        consumers = _element_wise_consumers(schedule, producer, [f.child for f in root.children[position + 1:]])
        fusion = _epilogue_fusion(schedule, producer, consumers, costs) if consumers else None
        if fusion is not None and fusion.depth > 0 and all(
                _runs_over_output_tiles(schedule, nest.domain, producer, fusion, consumer.domain, consumer.child)
                for consumer in root.children[position + 1:position + 1 + len(consumers)]):
            found.append(fusion)
    return found


def _element_wise_consumers(schedule, producer: N.Band, following: Sequence[N.Node]) -> tuple[N.Band, ...]:
    """The nests right after ``producer`` without a reduction loop whose statements each update
    an element of an array the producer writes, reading that array only at the element they
    write (the verifier checks that running them inside the producer's loops is legal)."""
    written = _written_arrays(schedule.scop, loop_statements(schedule, producer.names[0]))
    consumers = []
    for nest in following:
        if not isinstance(nest, N.Band) or not all(nest.flag(k) for k in range(len(nest.members))):
            break
        statements = [schedule.scop.statement(name) for name in loop_statements(schedule, nest.names[0])]
        if not all(_reads_where_it_writes(statement, written) for statement in statements):
            break
        consumers.append(nest)
    return tuple(consumers)


def _reads_where_it_writes(statement, arrays: set[str]) -> bool:
    """Whether ``statement`` reads ``arrays`` only at the subscripts of the one element it writes
    (``C[i, j] = max(C[i, j], 0)``, ``y[i] = alpha * tmp[i]``; not ``C[j, i] = C[i, j]``)."""
    target = statement.writes[0] if len(statement.writes) == 1 else None
    reads = [ref for ref in statement.reads if ref.array in arrays]
    if target is None or not reads:
        return False
    return all(ref.relation.set_tuple_name(isl.dim_type.out, target.array).is_equal(target.relation)
               for ref in reads)


def _written_arrays(scop, statements: Sequence[str]) -> set[str]:
    return {ref.array for name in statements for ref in scop.statement(name).writes}


def _epilogue_fusion(schedule, producer: N.Band, consumers: Sequence[N.Band], costs: Sequence[BandCost]) -> EpilogueFusion:
    """The model's estimate for fusing ``consumers`` into ``producer`` (see :class:`EpilogueFusion`):
    a tiled band's output tile loops all go outside its reduction's; an untiled band keeps its
    order (its innermost loop is the vector loop) and fuses its leading output loops."""
    n = len(producer.members)
    outputs = [k for k in range(n) if producer.flag(k)]
    statements = loop_statements(schedule, producer.names[0])
    cost = next((c for c in costs if c.statements == statements and c.tile), None)
    if cost is not None and N.has_band_below(producer):
        order = [producer.names[k] for k in outputs] + [producer.names[k] for k in range(n) if k not in outputs]
        depth, tiles = len(outputs), tuple(cost.tile_sizes[k] for k in outputs)
        extents = list(tiles)
    else:
        order, tiles = list(producer.names), None
        depth = next((k for k in range(n) if not producer.flag(k)), n)
        extents = [ASSUMED_EXTENT] * len([k for k in outputs if k >= depth])
    element = max(schedule.scop.arrays[a].dtype.bits // 8 for a in _written_arrays(schedule.scop, statements))
    block = float(element * _volume(extents))
    saved = 2.0 * element * len(consumers)  # each consumer nest read and wrote the output once more
    return EpilogueFusion(producer.names, tuple(c.names for c in consumers), tuple(order), depth, tiles, block, saved,
                          block <= cache_bytes(2) / 2)


def _runs_over_output_tiles(schedule, producer_domain, producer: N.Band, fusion: EpilogueFusion,
                            consumer_domain, consumer: N.Band) -> bool:
    """Whether the consumer's first ``fusion.depth`` loops (tiled by ``fusion.consumer_tiles``)
    take, at each of its instances, the values the producer's output loops had where it wrote
    what the instance reads: fused loop by loop, each output tile then runs its own epilogue."""
    if len(consumer.members) < fusion.depth or (fusion.consumer_tiles is not None
                                                and len(consumer.members) != fusion.depth):
        return False
    written = schedule.scop.writes.intersect_domain(producer_domain)
    flow = schedule.scop.reads.intersect_domain(consumer_domain).apply_range(written.reverse())
    for j, name in enumerate(fusion.order[:fusion.depth]):
        produced = flow.apply_range(isl.UnionMap.from_union_pw_aff(producer.members[producer.names.index(name)]))
        own = isl.UnionMap.from_union_pw_aff(consumer.members[j])
        if fusion.consumer_tiles is not None:
            size = fusion.consumer_tiles[j]
            own = own.apply_range(isl.UnionMap(f"{{ [x] -> [x - (x mod {size})] }}"))
        if not produced.is_subset(own):
            return False
    return True
