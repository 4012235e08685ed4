"""Band-level building blocks on isl schedule-tree nodes, and the facts the decisions read.

The primitives (:mod:`polyopt.transform.primitives`) call these for what isl does best on its own
nodes: tiling a band (:func:`tile_band`), unroll-and-jam with whole register tiles isolated
(:func:`register_tile_band`), coincidence flags (:func:`mark_coincident`). The decisions of the
schedulers (:mod:`polyopt.schedulers.postpass`) read the access facts here: unit strides along
a member (:func:`vector_score`, :func:`stride_one_score`) and the register tile plan of a band
(:func:`register_plan`).
"""
from __future__ import annotations

from typing import Callable, Sequence

import islpy as isl

from polyopt.analysis.deps import Dependences
from polyopt.errors import ScheduleError
from polyopt.analysis.scop import Scop
from polyopt.schedulers.tilesize import vector_bytes
from polyopt.analysis.verify import carried_dependences

NodeRewrite = Callable[[isl.ScheduleNode], isl.ScheduleNode]


def _rewrite_bands(tree: isl.Schedule, rewrite: NodeRewrite, *,
                   descend: Callable[[isl.ScheduleNode], bool] = lambda node: True) -> isl.Schedule:
    """Apply ``rewrite`` to band nodes, top-down. A rewrite returns the deepest node it made
    (e.g. the point band of a tiling); the walk goes on below it where ``descend`` of it says so."""

    def visit(node: isl.ScheduleNode) -> isl.ScheduleNode:
        depth = node.get_tree_depth()
        is_band = node.get_type() == isl.schedule_node_type.band
        if is_band:
            node = rewrite(node)
        if not is_band or descend(node):
            for k in range(node.n_children()):
                node = visit(node.child(k)).parent()
        while node.get_tree_depth() > depth:
            node = node.parent()
        return node

    return visit(tree.get_root()).get_schedule()


# ----- tiling ------------------------------------------------------------------------------------

def per_member(sizes, n: int) -> list[int]:
    """Per-member sizes for a band of ``n`` members: an int for all, or a list (its last entry
    repeats)."""
    values = [sizes] if isinstance(sizes, int) else list(sizes) if isinstance(sizes, (list, tuple)) else []
    if not values or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise ScheduleError(f'tile sizes must be an int, a list of ints or "auto", got {sizes!r}')
    values = (values + [values[-1]] * n)[:n]
    if any(int(v) < 1 for v in values):
        raise ScheduleError(f"tile sizes must be positive, got {sizes!r}")
    return [int(v) for v in values]


def _multi_val(node: isl.ScheduleNode, values: list[int]) -> isl.MultiVal:
    multi = isl.MultiVal.zero(node.band_get_space())
    for k, value in enumerate(values):
        multi = multi.set_val(k, isl.Val(value))
    return multi


def _strided(domain: isl.UnionSet) -> bool:
    """Whether some statement's domain needs existential variables (strides, ``%`` guards)."""
    found = []
    domain.foreach_set(lambda s: found.append(any(b.dim(isl.dim_type.div) > 0 for b in s.get_basic_sets())))
    return any(found)


def tile_band(node: isl.ScheduleNode, sizes: list[int]) -> isl.ScheduleNode:
    """Tile the band at ``node``; returns the point band below.

    isl's ``band_tile`` (with its default option tile_shift_point_loops) makes the point loops
    ``member mod size``; over a strided domain (``j`` in ``range(1, N, 3)``) isl's AST generator
    then takes such a point loop for one value where it has two (``j mod 4`` with ``j = 4, 7``)
    and drops statement instances (docs/architecture.md, "isl AST bug"). There the band of tile
    starts ``size * floor(member / size)`` goes above a point band that keeps the members
    themselves, as Pluto writes them, which leaves isl the plain stride. Elsewhere ``band_tile``
    stays: isl isolates whole register tiles inside its aligned point loops (unguarded rows)."""
    multi = _multi_val(node, sizes)
    if not _strided(node.get_domain()):
        return node.band_tile(multi).child(0)
    starts = node.band_get_partial_schedule().scale_down_multi_val(multi).floor().scale_multi_val(multi)
    coincident = [node.band_member_get_coincident(k) for k in range(node.band_n_member())]
    permutable = node.band_get_permutable()
    node = node.insert_partial_schedule(starts).band_set_permutable(permutable)
    for k, flag in enumerate(coincident):
        node = node.band_member_set_coincident(k, flag)
    return node.child(0)


# ----- parallelism -------------------------------------------------------------------------------

def mark_coincident(tree: isl.Schedule, scop: Scop, deps: Dependences) -> isl.Schedule:
    """Flag every band member that carries no dependence as coincident: instances that depend on
    each other and share the values of the loops around the member share its value too. (The
    original schedule has no flags; with them :func:`mark_parallel` finds its parallel loops.)"""

    def rewrite(node: isl.ScheduleNode) -> isl.ScheduleNode:
        outer = node.get_prefix_schedule_union_map()
        partial = node.band_get_partial_schedule()
        for k in range(node.band_n_member()):
            member = partial.get_at(k)
            free = carried_dependences(scop, deps, node.get_domain(), outer, member).is_empty()
            node = node.band_member_set_coincident(k, int(free))
            outer = outer.flat_range_product(isl.UnionMap.from_union_pw_aff(member))
        return node

    return _rewrite_bands(tree, rewrite)


# ----- intra-band reordering ----------------------------------------------------------------------

def unit_iterator(member: isl.UnionPwAff, scop: Scop) -> dict[str, int] | None:
    """For a member that is one original iterator (plus a constant) per statement, that iterator's
    position per statement; None for skewed/combined members. A point loop of a tiled band, like
    ``i mod 32``, counts as ``i``: within a tile it steps ``i`` by one."""
    found: dict[str, int] = {}
    ok = True

    def piece(pa: isl.PwAff) -> None:
        nonlocal ok
        name = pa.get_space().get_tuple_name(isl.dim_type.in_)
        affs: list[isl.Aff] = []
        pa.foreach_piece(lambda _, aff: affs.append(aff))
        if len(affs) != 1:
            ok = False
            return
        coeffs = [affs[0].get_coefficient_val(isl.dim_type.in_, k).to_python()
                  for k in range(affs[0].dim(isl.dim_type.in_))]
        nonzero = [k for k, c in enumerate(coeffs) if c]
        if len(nonzero) != 1 or abs(coeffs[nonzero[0]]) != 1 or not _divs_only_of(affs[0], nonzero[0]):
            ok = False
            return
        found[name] = nonzero[0]

    member.foreach_pw_aff(piece)
    return found if ok else None


def _divs_only_of(aff: isl.Aff, position: int) -> bool:
    """Whether every integer division in ``aff`` depends on input ``position`` alone."""
    for d in range(aff.dim(isl.dim_type.div)):
        div = aff.get_div(d)
        if any(not div.get_coefficient_val(isl.dim_type.in_, k).is_zero()
               for k in range(div.dim(isl.dim_type.in_)) if k != position):
            return False
    return True


def stride_one_score(member: isl.UnionPwAff, scop: Scop) -> int:
    """How many accesses walk their last dimension with unit stride along this member."""
    counts = _stride_counts(member, scop)
    return -1 if counts is None else counts[0]


def vector_score(member: isl.UnionPwAff, scop: Scop) -> int:
    """Unit-stride accesses along this member, or -1 where some access would be strided (a loop
    over gesummv's i walks A[i, j] by rows: innermost, it gathers and loses the cache lines)."""
    counts = _stride_counts(member, scop)
    return -1 if counts is None or counts[1] else counts[0]


def _stride_counts(member: isl.UnionPwAff, scop: Scop) -> tuple[int, int] | None:
    """(accesses walked with unit stride, accesses walked with a larger stride) along this
    member; None when the member is not one iterator per statement."""
    positions = unit_iterator(member, scop)
    if not positions:
        return None
    unit = strided = 0
    for stmt_name, position in positions.items():
        stmt = scop.statement(stmt_name)
        for ref in stmt.accesses:
            found = _subscript_steps(ref.relation, [position])
            if found is None:
                continue
            if _unit_stride(found[0]):
                unit += 1
            elif any(found[0]):
                strided += 1
    return unit, strided


def _unit_stride(steps: list[int]) -> bool:
    """Whether an access whose subscripts move by ``steps`` (:func:`_subscript_steps`) walks its
    array with unit stride: only the last subscript moves, by one."""
    return abs(steps[-1]) == 1 and not any(steps[:-1])


def _replace_band(node: isl.ScheduleNode, members: list[isl.UnionPwAff], coincident: list[bool],
                  permutable: bool) -> isl.ScheduleNode:
    """Replace the band at ``node`` by one with the given members and flags."""
    space = node.band_get_space().drop_dims(isl.dim_type.set, 0, node.band_n_member()) \
        .add_dims(isl.dim_type.set, len(members))
    upas = isl.UnionPwAffList.alloc(space.get_ctx(), len(members))
    for member in members:
        upas = upas.add(member)
    node = node.delete().insert_partial_schedule(isl.MultiUnionPwAff.from_union_pw_aff_list(space, upas))
    node = node.band_set_permutable(int(permutable))
    for k, flag in enumerate(coincident):
        node = node.band_member_set_coincident(k, int(flag))
    return node


# ----- register tiling ----------------------------------------------------------------------------

def register_tile_sizes(scop: Scop, sizes: Sequence[int] | str = "auto") -> tuple[int, int]:
    """Checked register tile sizes (rows, columns); "auto": four rows of four vector registers
    with AVX-512's 32 registers (16 accumulators, 4 loads, a broadcast), of two with AVX2's 16;
    "row": one row of four vector registers (triangular bands like covariance's have fewer
    partial tiles: LARGE covariance 70 ms against 225 with "auto" and cache tiles).

    The rows' accumulators stay in registers across the reduction loop because the LLVM emitter
    promotes them itself (:mod:`polyopt.codegen.promotion`): LLVM alone keeps only one row in
    registers, not knowing that rows of a parameter-sized array never coincide. Four rows of
    four vectors: einsum's 1000^3 f64 matmul 45 -> 96 GFLOP/s on 2 threads of this machine."""
    element = max((array.dtype.bits // 8 for array in scop.arrays.values()), default=8)
    width = vector_bytes()
    if sizes == "auto":
        return 4, (4 if width == 64 else 2) * width // element
    if sizes == "row":
        return 1, 4 * width // element
    if (isinstance(sizes, (str, int)) or len(sizes) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in sizes)):
        raise ScheduleError(f'register_tile must be "auto", "row" or (rows, columns) of positive ints, got {sizes!r}')
    return int(sizes[0]), int(sizes[1])


def register_plan(partial: isl.MultiUnionPwAff, coincident: list[bool], permutable: bool, scop: Scop,
                  sizes: Sequence[int]) -> tuple[list[int], int] | None:
    """Register tile size per member of a band and its vector member; None when the band does
    not qualify.

    A band qualifies when it is permutable, some member is not parallel (the loop, like gemm's
    k, along which the register tile's accumulators are reused) and some parallel member can be
    the vector loop (:func:`_vector_member`; it gets ``sizes[1]``). ``sizes[0]`` goes to the
    parallel member whose rows share the most vector loads (:func:`_shared_vector_reads`; the
    outermost among equals), and to none where no member's rows share one ('ijk->kj': each row
    j reads its own input row; one row of four vectors there is 1.5x faster than four rows)."""
    n = len(coincident)
    if n < 2 or not permutable or all(coincident):
        return None
    vector = _vector_member(partial, coincident, scop)
    if vector is None:
        return None
    plan = [1] * n
    shared = {k: _shared_vector_reads(partial.get_at(k), partial.get_at(vector), scop)
              for k in range(n) if coincident[k] and k != vector}
    if shared and max(shared.values()) > 0:  # rows that share no vector load only add loads
        plan[max(shared, key=lambda k: (shared[k], -k))] = sizes[0]
    plan[vector] = sizes[1]
    return (plan, vector) if any(v > 1 for v in plan) else None


def _vector_member(partial: isl.MultiUnionPwAff, coincident: list[bool], scop: Scop) -> int | None:
    """The innermost parallel member that walks some array with unit stride and moves in no
    other array but with unit stride or (a sum's target, 'ijk->kj' walking out[k, j] down a
    column) where that array stays put along every sequential member: the emitter keeps such
    elements in registers across the sum, so only the unit-stride accesses are vectors. None
    where no member does (syrk's j walks A[j, k] down a column inside the sum: gathers)."""
    sequential = [unit_iterator(partial.get_at(k), scop) for k in range(len(coincident)) if not coincident[k]]
    for member in reversed(range(len(coincident))):
        if not coincident[member]:
            continue
        positions = unit_iterator(partial.get_at(member), scop)
        if not positions:
            continue
        unit, gathers = 0, False
        for name, position in positions.items():
            sums = [found[name] for found in sequential if found and name in found]
            for ref in scop.statement(name).accesses:
                steps = _subscript_steps(ref.relation, [position, *sums])
                if steps is None:
                    continue
                if _unit_stride(steps[0]):
                    unit += 1
                elif any(steps[0]) and (len(sums) < len(sequential) or any(any(row) for row in steps[1:])):
                    gathers = True
        if unit and not gathers:
            return member
    return None


def _shared_vector_reads(row: isl.UnionPwAff, vector: isl.UnionPwAff, scop: Scop) -> int:
    """How many accesses move along the ``vector`` member but not along the ``row`` member: the
    vector loads that all rows of a register tile share. gemm's B[k, j] for rows of i; a
    batch member moves every operand, so batched matmul's rows must come from i instead (its
    rows over batches loaded 16 vectors for 16 FMAs)."""
    rows, vectors = unit_iterator(row, scop), unit_iterator(vector, scop)
    if not rows or not vectors:
        return 0
    shared = 0
    for name, position in vectors.items():
        if name not in rows:
            continue
        for ref in scop.statement(name).accesses:
            steps = _subscript_steps(ref.relation, [position, rows[name]])
            if steps is not None and any(steps[0]) and not any(steps[1]):
                shared += 1
    return shared


def _subscript_steps(relation: isl.Map, positions: list[int]) -> list[list[int]] | None:
    """Per iterator position, the coefficient of that iterator in each subscript of an access
    relation; None where the relation is not one affine function."""
    if relation.dim(isl.dim_type.out) == 0:
        return None
    outputs: list[isl.MultiAff] = []
    isl.PwMultiAff.from_map(relation).foreach_piece(lambda _, multi: outputs.append(multi))
    if len(outputs) != 1:
        return None
    multi = outputs[0]
    return [[multi.get_at(d).get_coefficient_val(isl.dim_type.in_, position).to_python()
             for d in range(multi.dim(isl.dim_type.out))] for position in positions]


def register_tile_band(node: isl.ScheduleNode, scop: Scop, plan: list[int],
                       vector: int) -> tuple[isl.ScheduleNode, list[tuple[int, str]]]:
    """Unroll-and-jam the band at ``node`` by ``plan`` (a size per member, 1: untouched),
    ``vector`` being the vector member; returns the new band and, per new member, (old member,
    "tile" | "whole" | "point").

    gemm's point band (i, k, j) with plan (1, 1, 32) becomes (j - j mod 32, i, k, j mod 32)::

        for j0 (step 32): for i: for k:            for j0 (step 32): for i: for k:
                                                       C[i, j0+0] += ...   (unrolled, the
          for j (32): C[i, j0+j] += A[i,k]*B[k,j]  ->  ...                  accumulators stay in
                                                       C[i, j0+31] += ...  registers over k)

    The parallel members go outside the sequential ones, the register tile's members innermost.
    Tiles that are whole (every member takes all its sizes) are generated apart by isl's isolate
    option and fully unrolled; partial ones at the edges stay loops."""
    partial = node.band_get_partial_schedule()
    n = len(plan)
    coincident = [bool(node.band_member_get_coincident(k)) for k in range(n)]
    tiled = sorted((k for k in range(n) if plan[k] > 1), key=lambda k: k != vector)  # vector tiles outermost
    rest = sorted((k for k in range(n) if plan[k] == 1), key=lambda k: not coincident[k])
    points = sorted(tiled, key=lambda k: k == vector)  # the vector loop innermost
    order = [(k, "tile") for k in tiled] + [(k, "whole") for k in rest] + [(k, "point") for k in points]
    members, flags = [], []
    for k, part in order:
        member = partial.get_at(k)
        if part != "whole":
            offset = member.mod_val(isl.Val(plan[k]))
            member = offset if part == "point" else member.sub(offset)
        members.append(member)
        flags.append(coincident[k])
    node = _replace_band(node, members, flags, permutable=False)
    return _isolate_whole_tiles(node, [plan[k] for k in points]), order


def _isolate_whole_tiles(node: isl.ScheduleNode, sizes: list[int]) -> isl.ScheduleNode:
    """Isolate, on the band at ``node`` whose last ``len(sizes)`` members are register tile
    offsets, the iterations of whole tiles, and unroll those members there."""
    n_point, n_band = len(sizes), node.band_n_member()
    domain = node.get_domain()
    prefix = node.get_prefix_schedule_union_map().intersect_domain(domain)
    band = isl.UnionMap.from_multi_union_pw_aff(node.band_get_partial_schedule()).intersect_domain(domain)
    points = isl.Set.from_union_set(prefix.flat_range_product(band).range())
    total = points.dim(isl.dim_type.set)
    outer = points.project_out(isl.dim_type.set, total - n_point, n_point)
    box = isl.Set.universe(isl.Space.set_alloc(points.get_ctx(), 0, n_point))
    for d, size in enumerate(sizes):
        box = box.lower_bound_val(isl.dim_type.set, d, isl.Val(0)).upper_bound_val(isl.dim_type.set, d, isl.Val(size - 1))
    box = box.align_params(outer.get_space())
    partial_tiles = outer.flat_product(box).subtract(points).project_out(isl.dim_type.set, total - n_point, n_point)
    whole = outer.subtract(partial_tiles).flat_product(box)
    isolate = isl.Map.from_range(whole).move_dims(isl.dim_type.in_, 0, isl.dim_type.out, 0, total - n_band)
    node = node.band_set_ast_build_options(isl.UnionSet.from_set(isolate.wrap().set_tuple_name("isolate")))
    for k in range(n_band - n_point, n_band):
        node = node.band_member_set_isolate_ast_loop_type(k, isl.ast_loop_type.unroll)
    return node

