"""Transformations on schedule trees: tiling, parallel marks (outer or wavefront), and intra-band
reordering for stride-1 innermost loops.

Each function takes an ``isl.Schedule`` and returns a new one; :func:`polyopt.verify` re-checks
the result (legality, and that every loop marked parallel carries no dependence).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Sequence

import islpy as isl

from polyopt.errors import ScheduleError
from polyopt.scop import Scop

PARALLEL_MARK = "parallel"

NodeRewrite = Callable[[isl.ScheduleNode], isl.ScheduleNode]


def _rewrite_bands(tree: isl.Schedule, rewrite: NodeRewrite, *, outermost_only: bool = False) -> isl.Schedule:
    """Apply ``rewrite`` to band nodes, top-down. A rewrite returns the deepest node it made
    (e.g. the point band of a tiling); the walk goes on below it."""

    def visit(node: isl.ScheduleNode) -> isl.ScheduleNode:
        depth = node.get_tree_depth()
        is_band = node.get_type() == isl.schedule_node_type.band
        if is_band:
            node = rewrite(node)
        if not (is_band and outermost_only):
            for k in range(node.n_children()):
                node = visit(node.child(k)).parent()
        while node.get_tree_depth() > depth:
            node = node.parent()
        return node

    return visit(tree.get_root()).get_schedule()


# ----- tiling ------------------------------------------------------------------------------------

def cache_tile_size(element_bytes: int = 8, arrays: int = 3) -> int:
    """A square tile edge whose ``arrays`` tiles fit in half the L2 cache (multiple of 8)."""
    size = _cache_bytes(2) or 512 * 1024
    edge = int((size / 2 / arrays / element_bytes) ** 0.5)
    return max(8, min(256, edge - edge % 8))


def _cache_bytes(level: int) -> int | None:
    """Size of the CPU cache of ``level`` from sysfs (Linux), None when unknown."""
    root = Path("/sys/devices/system/cpu/cpu0/cache")
    for index in sorted(root.glob("index*")) if root.is_dir() else []:
        try:
            if int((index / "level").read_text()) != level or "Instruction" in (index / "type").read_text():
                continue
            text = (index / "size").read_text().strip().upper()
        except OSError:
            continue
        scale = {"K": 1024, "M": 1024 ** 2}.get(text[-1], 1)
        return int(text.rstrip("KM")) * scale
    return None


def _values(node: isl.ScheduleNode, sizes) -> list[int]:
    """Per-member sizes for a band: an int for all, or a list (its last entry repeats)."""
    n = node.band_n_member()
    values = [sizes] * n if isinstance(sizes, int) else (list(sizes) + [list(sizes)[-1]] * n)[:n]
    if any(int(v) < 1 for v in values):
        raise ScheduleError(f"tile sizes must be positive, got {sizes!r}")
    return [int(v) for v in values]


def _multi_val(node: isl.ScheduleNode, values: list[int]) -> isl.MultiVal:
    multi = isl.MultiVal.zero(node.band_get_space())
    for k, value in enumerate(values):
        multi = multi.set_val(k, isl.Val(value))
    return multi


def _sizes_for(node: isl.ScheduleNode, sizes) -> isl.MultiVal:
    return _multi_val(node, _values(node, sizes))


def tile(tree: isl.Schedule, sizes: int | Sequence[int], *, min_depth: int = 2,
         second_level: int | Sequence[int] | None = None) -> isl.Schedule:
    """Rectangular tiling of every permutable band with at least ``min_depth`` members.

    With ``second_level`` (tiles per outer tile, per dimension), each band is first tiled by
    ``sizes * second_level`` and its point band again by ``sizes``: two levels of tiles."""

    def rewrite(node: isl.ScheduleNode) -> isl.ScheduleNode:
        if not (node.band_get_permutable() and node.band_n_member() >= min_depth):
            return node
        if second_level is not None:
            inner = _values(node, sizes)
            outer = [a * b for a, b in zip(inner, _values(node, second_level))]
            node = node.band_tile(_multi_val(node, outer)).child(0)
        return node.band_tile(_sizes_for(node, sizes)).child(0)

    return _rewrite_bands(tree, rewrite)


# ----- parallelism -------------------------------------------------------------------------------

def _mark(node: isl.ScheduleNode) -> isl.ScheduleNode:
    return node.insert_mark(isl.Id(PARALLEL_MARK)).child(0)


def _wavefront(node: isl.ScheduleNode) -> isl.ScheduleNode:
    """Replace members (t0, t1, ...) of a permutable band by (t0 + t1, t1, ...): with every
    dependence non-negative on t0 and t1, the second member is then parallel."""
    partial = node.band_get_partial_schedule()
    n = node.band_n_member()
    coincident = [False, True] + [node.band_member_get_coincident(k) for k in range(2, n)]
    partial = partial.set_at(0, partial.get_at(0).add(partial.get_at(1)))
    node = node.delete().insert_partial_schedule(partial)
    node = node.band_set_permutable(1)
    for k, flag in enumerate(coincident):
        node = node.band_member_set_coincident(k, int(flag))
    return node


def mark_parallel(tree: isl.Schedule, *, wavefront: bool = True) -> isl.Schedule:
    """Mark the outermost coincident loop of every outermost band as parallel; where such a
    permutable band has no coincident member, skew it into a wavefront first."""

    def rewrite(node: isl.ScheduleNode) -> isl.ScheduleNode:
        n = node.band_n_member()
        coincident = [node.band_member_get_coincident(k) for k in range(n)]
        if not any(coincident) and wavefront and n >= 2 and node.band_get_permutable():
            node = _wavefront(node)
            coincident = [node.band_member_get_coincident(k) for k in range(n)]
        if not any(coincident):
            return node
        first = coincident.index(True)
        if first > 0:
            node = node.band_split(first).child(0)
        return _mark(node)

    return _rewrite_bands(tree, rewrite, outermost_only=True)


# ----- intra-band reordering ----------------------------------------------------------------------

def _unit_iterator(member: isl.UnionPwAff, scop: Scop) -> dict[str, int] | None:
    """For a member that is one original iterator (plus a constant) per statement, that iterator's
    position per statement; None for skewed/combined members."""
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
        if len(nonzero) != 1 or abs(coeffs[nonzero[0]]) != 1 or affs[0].dim(isl.dim_type.div):
            ok = False
            return
        found[name] = nonzero[0]

    member.foreach_pw_aff(piece)
    return found if ok else None


def _stride_one_score(member: isl.UnionPwAff, scop: Scop) -> int:
    """How many accesses walk their last dimension with unit stride along this member."""
    positions = _unit_iterator(member, scop)
    if not positions:
        return -1
    score = 0
    for stmt_name, position in positions.items():
        stmt = scop.statement(stmt_name)
        for ref in stmt.accesses:
            relation = ref.relation
            if relation.dim(isl.dim_type.out) == 0:
                continue
            outputs: list[isl.MultiAff] = []
            isl.PwMultiAff.from_map(relation).foreach_piece(lambda _, multi: outputs.append(multi))
            if len(outputs) != 1:
                continue
            multi = outputs[0]
            last = multi.get_at(multi.dim(isl.dim_type.out) - 1)
            if abs(last.get_coefficient_val(isl.dim_type.in_, position).to_python()) == 1 and all(
                    multi.get_at(d).get_coefficient_val(isl.dim_type.in_, position).to_python() == 0
                    for d in range(multi.dim(isl.dim_type.out) - 1)):
                score += 1
    return score


def _permute(node: isl.ScheduleNode, order: list[int]) -> isl.ScheduleNode:
    partial = node.band_get_partial_schedule()
    coincident = [node.band_member_get_coincident(k) for k in range(node.band_n_member())]
    permutable = node.band_get_permutable()
    reordered = partial
    for k, source in enumerate(order):
        reordered = reordered.set_at(k, partial.get_at(source))
    node = node.delete().insert_partial_schedule(reordered).band_set_permutable(permutable)
    for k, source in enumerate(order):
        node = node.band_member_set_coincident(k, int(coincident[source]))
    return node


def vectorizable_innermost(tree: isl.Schedule, scop: Scop) -> isl.Schedule:
    """In every innermost permutable band, move the coincident member with the most stride-1
    accesses to the innermost position (the loop LLVM then vectorizes)."""

    def rewrite(node: isl.ScheduleNode) -> isl.ScheduleNode:
        n = node.band_n_member()
        if n < 2 or not node.band_get_permutable() or _has_band_below(node):
            return node
        partial = node.band_get_partial_schedule()
        scores = [(_stride_one_score(partial.get_at(k), scop) if node.band_member_get_coincident(k) else -1, k)
                  for k in range(n)]
        best_score, best = max(scores, key=lambda item: (item[0], item[1]))
        if best_score <= 0 or best == n - 1:
            return node
        return _permute(node, [k for k in range(n) if k != best] + [best])

    return _rewrite_bands(tree, rewrite)


def _has_band_below(node: isl.ScheduleNode) -> bool:
    found = False

    def look(n: isl.ScheduleNode) -> bool:
        nonlocal found
        if n.get_type() == isl.schedule_node_type.band:
            found = True
        return not found

    for k in range(node.n_children()):
        node.child(k).foreach_descendant_top_down(look)
    return found


def default_tile_size() -> int:
    """Tile size used for ``tile="auto"``: from the L2 cache size (overridable by env)."""
    override = os.environ.get("POLYOPT_TILE")
    return int(override) if override else cache_tile_size()
