"""The transformation primitives: each a function (schedule, loop names, options) -> new tree
(``expand_scalars``: the tree and a new Scop).

:func:`run` is the one way in (the :class:`~polyopt.transform.schedule.Schedule` methods, trace
replay and the schedulers all call it): it resolves the loop handles, applies the primitive to
the node tree (:mod:`polyopt.transform.nodes`), appends the step to the trace and, unless told
not to, checks the result with the independent verifier. An illegal result raises
:class:`~polyopt.errors.IllegalScheduleError` (or its RacyParallelLoopError) whose message starts
with the step and shows the violated dependence with two concrete iterations; a request that
cannot be carried out (unknown loop, sizes that do not fit, loops of different bands) raises
:class:`~polyopt.errors.ScheduleError`. Nothing is ever silently skipped.
"""
from __future__ import annotations

import inspect
import itertools
from dataclasses import replace

import islpy as isl

from polyopt.analysis.contraction import PRECISIONS, find_contraction
from polyopt.analysis.deps import dependences
from polyopt.analysis.scop import Scop, scop_fingerprint
from polyopt.analysis.stencil import find_stencil, runs_in_sweeps
from polyopt.analysis.verify import carried_dependences, verify
from polyopt.errors import IllegalScheduleError, ScheduleError
from polyopt.islutil import ISL_LOCK, maps_of, tuple_names
from polyopt.transform import nodes as N
from polyopt.transform import tree as tree_ops
from polyopt.transform.contraction_tree import coordinate_tree
from polyopt.transform.scalar_expansion import expand_scalars
from polyopt.transform.marks import (GPU_BLOCK_MARK, GPU_MEMORY_PLACES, GPU_THREAD_MARK, PARALLEL_MARK,
                                     memory_mark, memory_placement)
from polyopt.transform.trace import Step

#: Most iterations a loop may have for a complete unroll.
MAX_FULL_UNROLL = 64

#: The primitives whose ``within=`` isolates the named statements by distributing the loop
#: first (:func:`_isolated`); permute, interchange, skew, shift and reverse change the named
#: statements' members in place instead (their ``within=`` reaches the primitive itself).
ISOLATING = {"tile", "split", "unroll", "register_tile", "parallel", "vectorize", "gpu_map", "wavefront"}


# ----- the way in --------------------------------------------------------------------------------

def run(schedule, primitive: str, loops=(), *, check: bool = True, note: str = "", **options):
    """``schedule`` with ``primitive(*loops, **options)`` applied and recorded (see the module
    docstring); ``check=False`` skips the verifier (schedulers verify once at the end)."""
    function = PRIMITIVES.get(primitive)
    if function is None:
        raise ScheduleError(f"unknown primitive {primitive!r}; available: {', '.join(sorted(PRIMITIVES))}")
    names = tuple(_name(schedule, loop) for loop in loops)
    if primitive in ISOLATING:
        within = options.pop("within", None)
        if within is not None:
            with ISL_LOCK:
                return _isolated(schedule, primitive, names, within, options, check=check, note=note)
    try:
        inspect.signature(function).bind(schedule, names, **options)
    except TypeError as exc:
        raise ScheduleError(f"{primitive}: {exc}") from None
    step = Step.make(primitive, names, note, **options)
    with ISL_LOCK:
        made = function(schedule, names, **options)
        root, scop = made if isinstance(made, tuple) else (made, schedule.scop)  # (expand_scalars: a new Scop)
        new = schedule.derive(root, step, scop)
        if check:
            try:
                verify(new.scop, new.tree)
            except IllegalScheduleError as exc:
                exc.primitive = step.as_python()
                exc.args = (f"{step.as_python()}: {exc}",)
                raise
    return new


def _isolated(schedule, primitive: str, names: tuple[str, ...], within, options: dict, *, check: bool,
              note: str):
    """``primitive(*names, **options)`` on the statements ``within`` only, as loopy does it: where
    the outermost of the loops also runs other statements, a ``distribute`` step splits it first
    (one group per run of named or other statements, in the order the loop runs them, so no
    statement moves), then the primitive is applied to each copy holding named statements, on
    that copy's loop names. Where ``within`` covers the loop's statements: the primitive alone."""
    outermost = min((find(schedule, n) for n in names), key=lambda found: (len(found[0]), found[1]), default=None)
    if outermost is None:
        raise ScheduleError(f"{primitive}: within= needs the loops it applies to")
    path, k = outermost
    loop = N.at(schedule.root, path).names[k]
    named = _check_within(schedule, path, within, primitive)
    groups = statement_groups(schedule, path, named)
    if len(groups) == 1:
        return run(schedule, primitive, names, check=check, note=note, **options)
    call = Step.make(primitive, names, **options, within=list(within)).as_python()
    try:
        distributed = run(schedule, "distribute", (loop,), check=check, note=f"for {call}", groups=groups)
    except (ScheduleError, IllegalScheduleError) as exc:  # the message says which step failed
        exc.args = (f"{call}: within= needs loop {loop} distributed first: {exc}",)
        raise
    copies = [dict(zip(loop_names_of(schedule, group[0]), loop_names_of(distributed, group[0])))
              for group in groups if group[0] in named]  # a copy's loops around one of its statements
    result = distributed
    for renamed in copies:
        result = run(result, primitive, tuple(renamed.get(n, n) for n in names), check=check, note=note, **options)
    return result


def statement_groups(schedule, path: tuple[int, ...], members) -> list[list[str]]:
    """The statements below the node at ``path`` in the order it runs them, cut into runs of
    consecutive statements that are all in ``members`` or all not (what ``distribute`` takes
    as ``groups`` to give ``members`` loops of their own)."""
    order = _run_order(schedule.scop, N.at(schedule.root, path), set(tuple_names(domain_at(schedule, path))))
    return [list(part) for _, part in itertools.groupby(order, key=lambda s: s in members)]


def _run_order(scop: Scop, node: N.Node, statements: set[str]) -> list[str]:
    """``statements`` in the order the subtree at ``node`` runs them (a sequence's children in
    order; statements that share a loop body in textual order)."""
    if isinstance(node, N.Sequence):
        return [s for f in node.children for s in _run_order(scop, f.child, statements & set(tuple_names(f.domain)))]
    below = N.children(node)
    return _run_order(scop, below[0], statements) if below else _ordered(scop, statements)


def _name(schedule, loop) -> str:
    """The loop name of a handle (or a name), refusing handles of another kernel."""
    name = getattr(loop, "name", loop)
    if not isinstance(name, str):
        raise ScheduleError(f"a loop is given by its handle (schedule.loops(...)) or name, not {loop!r}")
    kernel = getattr(loop, "kernel", "")
    if kernel and kernel != scop_fingerprint(schedule.scop):
        raise ScheduleError(f"loop handle {name!r} belongs to another kernel, not to {schedule.scop.name!r}")
    return name


# ----- finding loops -----------------------------------------------------------------------------

def find(schedule, name: str) -> tuple[tuple[int, ...], int]:
    """(path of the band, member position) of loop ``name``; ScheduleError when there is none,
    saying which step replaced it."""
    for path, band in N.bands(schedule.root):
        if name in band.names:
            return path, band.names.index(name)
    replaced = [step for step in schedule.trace if name in step.loops]
    hint = f"; step {replaced[-1].as_python()} replaced it" if replaced else ""
    names = [n for _, band in N.bands(schedule.root) for n in band.names]
    raise ScheduleError(f"no loop {name!r} in this schedule of {schedule.scop.name}{hint} "
                        f"(loops: {', '.join(names) or 'none'})")


def domain_at(schedule, path: tuple[int, ...]) -> isl.UnionSet:
    """The statement instances that reach the node at ``path`` (the domain, through filters)."""
    domain, node = schedule.domain, schedule.root
    for k in path:
        if isinstance(node, N.Filter):
            domain = domain.intersect(node.domain)
        node = N.children(node)[k]
    return domain.intersect(node.domain) if isinstance(node, N.Filter) else domain


def _ordered(scop: Scop, names) -> list[str]:
    order = {s.name: k for k, s in enumerate(scop.statements)}
    return sorted(set(names), key=lambda n: order.get(n, len(order)))


def loop_statements(schedule, name: str) -> tuple[str, ...]:
    path, _ = find(schedule, name)
    return tuple(_ordered(schedule.scop, tuple_names(domain_at(schedule, path))))


def loop_names_of(schedule, statement: str | None) -> list[str]:
    """The loops around ``statement`` outermost first (every loop when None)."""
    if statement is None:
        return [n for _, band in N.bands(schedule.root) for n in band.names]
    if statement not in {s.name for s in schedule.scop.statements}:
        raise ScheduleError(f"no statement {statement!r} in {schedule.scop.name} "
                            f"(statements: {', '.join(s.name for s in schedule.scop.statements)})")
    names: list[str] = []
    node = schedule.root
    while not isinstance(node, N.Leaf):
        if isinstance(node, N.Band):
            names += node.names
        if isinstance(node, N.Sequence):
            node = next((f for f in node.children if statement in tuple_names(f.domain)), None)
            if node is None:
                break
        else:
            node = N.children(node)[0]
    return names


def _check_within(schedule, path: tuple[int, ...], within, primitive: str) -> set[str] | None:
    """The statements ``within`` names (None: all); refused when it is not a list of names, names
    unknown statements or none that run below the loop at ``path``."""
    if within is None:
        return None
    if isinstance(within, str) or not all(isinstance(w, str) for w in within):
        raise ScheduleError(f"{primitive}: within= takes a list of statement names, got {within!r}")
    below = set(tuple_names(domain_at(schedule, path)))
    unknown = set(within) - {s.name for s in schedule.scop.statements}
    if unknown:
        raise ScheduleError(f"{primitive}: no statement(s) {', '.join(sorted(unknown))} in {schedule.scop.name}")
    if not set(within) & below:
        raise ScheduleError(f"{primitive}: statements {', '.join(within)} do not run in this loop "
                            f"(it runs {', '.join(sorted(below))})")
    return set(within)


# ----- member arithmetic -------------------------------------------------------------------------

def _pieces(member: isl.UnionPwAff) -> dict[str, isl.PwAff]:
    found: dict[str, isl.PwAff] = {}
    member.foreach_pw_aff(lambda pa: found.__setitem__(pa.get_space().get_tuple_name(isl.dim_type.in_), pa))
    return found


def _union(pieces) -> isl.UnionPwAff:
    result = None
    for pa in pieces:
        upa = isl.UnionPwAff.from_pw_aff(pa)
        result = upa if result is None else result.union_add(upa)
    return result


def _map_member(member: isl.UnionPwAff, change, within: set[str] | None) -> isl.UnionPwAff:
    """``member`` with ``change(piece, statement)`` applied to the pieces of ``within`` (all)."""
    return _union(change(pa, stmt) if within is None or stmt in within else pa
                  for stmt, pa in _pieces(member).items())


def _slice(band: N.Band, start: int, stop: int, child: N.Node) -> N.Band:
    """Members ``start:stop`` of ``band`` as a band over ``child`` (isl's band_split keeps the
    permutable flag on both parts)."""
    def part(values):
        return tuple(values[start:stop]) if values else ()
    return N.Band(band.members[start:stop], band.names[start:stop], child, band.permutable,
                  part(band.coincident), part(band.loop_types), part(band.isolate_loop_types), None)


def _not_register_tiled(band: N.Band, primitive: str) -> None:
    if band.options is not None:
        raise ScheduleError(f"{primitive}: band ({', '.join(band.names)}) is register tiled; "
                            "apply register_tile last")


def _fresh(root: N.Node, wanted: list[str], replaced: set[str] = frozenset()) -> list[str]:
    taken = N.loop_names(root) - set(replaced)
    return [N.unique_name(name, None, taken) for name in wanted]


def refresh_flags(schedule, root: N.Node, path: tuple[int, ...]) -> N.Node:
    """``root`` with the flags of the band at ``path`` recomputed from the dependences:
    coincident where a member carries no dependence given the loops outside it (the loops
    of outer bands and the earlier members), permutable where every dependence not carried
    outside the band is non-negative on every member."""
    band = N.at(root, path)
    node = N.isl_node(N.to_isl(schedule.domain, root), path)
    scop, deps = schedule.scop, dependences(schedule.scop)
    domain = node.get_domain()
    prefix = node.get_prefix_schedule_union_map()
    inside = deps.all.intersect_domain(domain).intersect_range(domain).intersect_params(scop.context)
    inside = inside.intersect(prefix.apply_range(prefix.reverse()))
    outer, coincident, permutable = prefix, [], True
    for member in band.members:
        coincident.append(carried_dependences(scop, deps, domain, outer, member).is_empty())
        value = isl.UnionMap.from_union_pw_aff(member)
        pairs = inside.apply_domain(value).apply_range(value)
        if permutable and not pairs.is_empty():
            backwards = isl.UnionMap("{ [x] -> [y] : y < x }").align_params(pairs.get_space())
            permutable = pairs.intersect(backwards).is_empty()
        outer = outer.flat_range_product(value)
    return N.replace_at(root, path, replace(band, coincident=tuple(coincident), permutable=permutable))


# ----- tiling --------------------------------------------------------------------------------------

def _size_levels(sizes, count: int, primitive: str) -> list[list[int]]:
    """``sizes`` as levels (outer first) of ``count`` positive ints each."""
    def level(value) -> list[int]:
        values = [value] * count if isinstance(value, int) and not isinstance(value, bool) else value
        if (isinstance(values, (str, bytes)) or not hasattr(values, "__len__")
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in values)):
            raise ScheduleError(f"{primitive}: sizes must be an int, one int per loop or a list of such "
                                f"lists, got {sizes!r}")
        if len(values) != count:
            raise ScheduleError(f"{primitive}: {len(values)} sizes for {count} loop(s): {list(values)}")
        if any(v < 1 for v in values):
            raise ScheduleError(f"{primitive}: sizes must be positive, got {list(values)}")
        return [int(v) for v in values]

    nested = isinstance(sizes, (list, tuple)) and sizes and all(isinstance(s, (list, tuple)) for s in sizes)
    return [level(s) for s in sizes] if nested else [level(sizes)]


def _isl_tile(domain: isl.UnionSet, band: N.Band, sizes: list[int]) -> tuple[N.Band, N.Band]:
    """(tile band, point band) of ``band`` (no child) by isl's tiling, as :func:`polyopt.
    transform.tree.tile_band` does it (point loops of the members themselves on strided
    domains)."""
    node = isl.Schedule.from_domain(domain).get_root().child(0)
    node = node.insert_partial_schedule(band.partial()).band_set_permutable(int(band.permutable))
    for k in range(len(band.members)):
        node = node.band_member_set_coincident(k, int(band.flag(k)))
    point = tree_ops.tile_band(node, sizes)
    outer = point.parent()

    def read(n: isl.ScheduleNode) -> N.Band:
        count = n.band_n_member()
        partial = n.band_get_partial_schedule()
        return N.Band(tuple(partial.get_at(k) for k in range(count)), band.names, N.Leaf(),
                      bool(n.band_get_permutable()),
                      tuple(bool(n.band_member_get_coincident(k)) for k in range(count)))

    return read(outer), read(point)


def _tile(schedule, names, sizes) -> N.Node:
    if not names or len(set(names)) != len(names):
        raise ScheduleError(f"tile: name each loop once, got {', '.join(names) or 'none'}")
    path, band, counts = _merged(schedule, names, "tile")  # loops of directly nested bands: one band
    positions = [band.names.index(n) for n in names]
    if positions != list(range(positions[0], positions[0] + len(positions))):
        raise ScheduleError(f"tile: loops {', '.join(names)} are not consecutive loops of one band "
                            f"({', '.join(band.names)}) in this order; permute them first")
    levels = _size_levels(sizes, len(names), "tile")
    first, stop = positions[0], positions[-1] + 1
    rest = _slice(band, stop, len(band.members), band.child) if stop < len(band.members) else band.child
    level_names = [_fresh(schedule.root, [f"{n}_{level}" for n in names], set(names))
                   for level in range(len(levels) + 1)]
    domain = domain_at(schedule, path)
    current = _slice(band, first, stop, N.Leaf())
    built: list[N.Band] = []
    for level, level_sizes in enumerate(levels):
        outer, current = _isl_tile(domain, current, level_sizes)
        built.append(replace(outer, names=tuple(level_names[level])))
    built.append(replace(current, names=tuple(level_names[len(levels)])))
    node = rest
    for part in reversed(built):
        node = replace(part, child=node)
    if first > 0:
        node = _slice(band, 0, first, node)
    root = N.replace_at(schedule.root, path, node)
    if len(counts) > 1 or not band.permutable:  # flags of merged or unflagged bands: recomputed
        for depth in range(len(built) + (first > 0)):
            root = refresh_flags(schedule, root, path + (0,) * depth)
    return root


def _split(schedule, names, factor) -> N.Node:
    return _tile(schedule, names, [factor])


# ----- reordering ----------------------------------------------------------------------------------

def _merged(schedule, names: tuple[str, ...], primitive: str):
    """The bands holding ``names`` merged into one (they must be nested directly, outermost
    first on one path): (path of the top band, merged band, the member counts to split it back
    into). One band: itself."""
    if not names or len(set(names)) != len(names):
        raise ScheduleError(f"{primitive}: name each loop once, got {', '.join(names) or 'none'}")
    found = [find(schedule, n) for n in names]
    paths = sorted({p for p, _ in found}, key=len)
    top = paths[0]
    chain = [N.at(schedule.root, top)]
    while len(chain) < len(paths) or any(len(p) > len(top) + len(chain) - 1 for p in paths):
        below = chain[-1].child
        if not isinstance(below, N.Band):
            raise ScheduleError(f"{primitive}: loops {', '.join(names)} are not in one band or in bands "
                                "nested directly inside each other")
        chain.append(below)
    expected = {top + (0,) * k for k in range(len(chain))}
    if not set(paths) <= expected:
        raise ScheduleError(f"{primitive}: loops {', '.join(names)} are not on one path of nested bands")
    for band in chain:
        _not_register_tiled(band, primitive)
    merged = N.Band(tuple(m for b in chain for m in b.members), tuple(n for b in chain for n in b.names),
                    chain[-1].child, all(b.permutable for b in chain),
                    tuple(b.flag(k) for b in chain for k in range(len(b.members))))
    return top, merged, [len(b.members) for b in chain]


def _split_back(merged: N.Band, counts: list[int]) -> N.Node:
    node, stop = merged.child, len(merged.members)
    for count in reversed(counts):
        node = _slice(merged, stop - count, stop, node)
        stop -= count
    return node


def _replace_merged(schedule, top, merged, counts, refresh: bool) -> N.Node:
    root = N.replace_at(schedule.root, top, _split_back(merged, counts))
    if refresh:
        for depth in range(len(counts)):
            root = refresh_flags(schedule, root, top + (0,) * depth)
    return root


def _permute(schedule, names, within=None) -> N.Node:
    top, merged, counts = _merged(schedule, names, "permute")
    within = _check_within(schedule, top, within, "permute")
    positions = [merged.names.index(n) for n in names]
    slots = sorted(positions)
    order = list(range(len(merged.members)))
    for slot, position in zip(slots, positions):
        order[slot] = position
    if within is None:
        members = [merged.members[k] for k in order]
        band = replace(merged, members=tuple(members), names=tuple(merged.names[k] for k in order),
                       coincident=tuple(merged.flag(k) for k in order))
    else:  # only the statements within= swap their loops; the loops keep their names
        old = [_pieces(m) for m in merged.members]
        members = [_union(old[order[slot]][s] if s in within else pa for s, pa in old[slot].items())
                   for slot in range(len(order))]
        band = replace(merged, members=tuple(members))
    refresh = within is not None or len(counts) > 1
    return _replace_merged(schedule, top, band, counts, refresh)


def _interchange(schedule, names, within=None) -> N.Node:
    if len(names) != 2:
        raise ScheduleError(f"interchange takes two loops, got {len(names)}")
    top, merged, _ = _merged(schedule, names, "interchange")
    a, b = (merged.names.index(n) for n in names)
    return _permute(schedule, (names[1], names[0]) if a < b else names, within)


def _skew(schedule, names, factor=1, within=None) -> N.Node:
    if len(names) != 2:
        raise ScheduleError(f"skew takes two loops (outer, inner), got {len(names)}")
    if not isinstance(factor, int) or isinstance(factor, bool) or factor == 0:
        raise ScheduleError(f"skew: factor must be a non-zero int, got {factor!r}")
    top, merged, counts = _merged(schedule, names, "skew")
    within = _check_within(schedule, top, within, "skew")
    outer, inner = (merged.names.index(n) for n in names)
    source = _pieces(merged.members[outer])
    skewed = _map_member(merged.members[inner],
                         lambda pa, stmt: pa.add(source[stmt].scale_val(isl.Val(factor))), within)
    members = list(merged.members)
    members[inner] = skewed
    return _replace_merged(schedule, top, replace(merged, members=tuple(members)), counts, True)


def _change_one(schedule, names, primitive: str, change, within) -> N.Node:
    if len(names) != 1:
        raise ScheduleError(f"{primitive} takes one loop, got {len(names)}")
    path, k = find(schedule, names[0])
    within = _check_within(schedule, path, within, primitive)
    band = N.at(schedule.root, path)
    _not_register_tiled(band, primitive)
    members = list(band.members)
    members[k] = _map_member(members[k], change, within)
    return refresh_flags(schedule, N.replace_at(schedule.root, path, replace(band, members=tuple(members))), path)


def _shift(schedule, names, offset, within=None) -> N.Node:
    if not isinstance(offset, int) or isinstance(offset, bool):
        raise ScheduleError(f"shift: offset must be an int, got {offset!r}")
    if offset == 0:
        raise ScheduleError("shift: an offset of 0 changes nothing")
    return _change_one(schedule, names, "shift", lambda pa, _: pa.add_constant_val(isl.Val(offset)), within)


def _reverse(schedule, names, within=None) -> N.Node:
    return _change_one(schedule, names, "reverse", lambda pa, _: pa.neg(), within)


def _wavefront(schedule, names) -> N.Node:
    """The outer loop becomes outer + inner; the inner one is flagged coincident and the outer
    one not (as a wavefront over a permutable band makes them), the parallel mark is verified."""
    if len(names) != 2:
        raise ScheduleError(f"wavefront takes two loops (outer, inner), got {len(names)}")
    path, band, _ = _merged(schedule, names, "wavefront")
    outer, inner = (band.names.index(n) for n in names)
    if outer >= inner:
        raise ScheduleError(f"wavefront: {names[0]} must be outside {names[1]}")
    members = list(band.members)
    members[outer] = members[outer].add(members[inner])
    flags = [band.flag(k) for k in range(len(members))]
    flags[outer], flags[inner] = False, True
    return N.replace_at(schedule.root, path, replace(band, members=tuple(members), coincident=tuple(flags),
                                                     permutable=True))


# ----- fusion and distribution ---------------------------------------------------------------------

def _fuse(schedule, names, depth=1) -> N.Node:
    if len(names) < 2:
        raise ScheduleError(f"fuse takes two or more loops, got {len(names)}")
    if not isinstance(depth, int) or isinstance(depth, bool) or depth < 1:
        raise ScheduleError(f"fuse: depth must be a positive int, got {depth!r}")
    root = schedule.root
    for level in range(depth):
        if not names:
            raise ScheduleError(f"fuse: the nests have no loops left to fuse at depth {level + 1}")
        root, path, names = _fuse_once(replace(schedule, root=root), names)
        root = refresh_flags(schedule, root, path)
    return root


def _fuse_once(schedule, names):
    """One level of :func:`_fuse`: (new root, path of the fused band, the loops heading the
    nests inside it, empty where some nest has none)."""
    found = [find(schedule, n) for n in names]
    if any(k != 0 for _, k in found):
        raise ScheduleError(f"fuse: loops {', '.join(names)} must each be the outermost loop of a nest "
                            "(the first loop of its band)")
    paths = [p for p, _ in found]
    parents = {p[:-2] for p in paths}
    if len(parents) != 1 or any(len(p) < 2 or p[-1] != 0 for p in paths):
        raise ScheduleError(f"fuse: loops {', '.join(names)} do not head consecutive nests of one sequence")
    seq_path = parents.pop()
    sequence = N.at(schedule.root, seq_path)
    positions = [p[-2] for p in paths]
    if not isinstance(sequence, N.Sequence) or positions != list(range(positions[0], positions[0] + len(names))):
        raise ScheduleError(f"fuse: loops {', '.join(names)} do not head consecutive nests of one sequence, "
                            "in their order")
    filters = [sequence.children[k] for k in positions]
    heads = [f.child for f in filters]
    fused_member = heads[0].members[0]
    for head in heads[1:]:
        fused_member = fused_member.union_add(head.members[0])
    rests = [_slice(h, 1, len(h.members), h.child) if len(h.members) > 1 else h.child for h in heads]
    inner = N.Sequence(tuple(N.Filter(f.domain, r) for f, r in zip(filters, rests)), sequence.ordered)
    fused = N.Band((fused_member,), (names[0],), inner, True, (False,))
    domain = filters[0].domain
    for f in filters[1:]:
        domain = domain.union(f.domain)
    kids = sequence.children[:positions[0]] + (N.Filter(domain, fused),) + sequence.children[positions[-1] + 1:]
    if len(kids) == 1:
        new_path, node = seq_path, fused
    else:
        new_path, node = seq_path + (positions[0], 0), replace(sequence, children=kids)
    root = N.replace_at(schedule.root, seq_path, node)
    nested = tuple(r.names[0] for r in rests if isinstance(r, N.Band))
    return root, new_path, nested if len(nested) == len(rests) else ()


def statements_universe(scop: Scop, statements) -> isl.UnionSet:
    """Every instance of the named statements (their spaces' universes)."""
    result = None
    for name in statements:
        part = isl.UnionSet.from_set(isl.Set.universe(scop.statement(name).domain.get_space()))
        result = part if result is None else result.union(part)
    return result


def _restrict(node: N.Node, keep: isl.UnionSet, statements: set[str]) -> N.Node:
    """``node``'s subtree for the ``statements`` only (filters of others dropped, members cut)."""
    if isinstance(node, N.Sequence):
        kids = [f for f in node.children if set(tuple_names(f.domain)) & statements]
        if len(kids) == 1:
            return _restrict(kids[0].child, keep, statements)
        return replace(node, children=tuple(N.Filter(f.domain.intersect(keep), _restrict(f.child, keep, statements))
                                            for f in kids))
    if isinstance(node, N.Band):
        return replace(node, members=tuple(m.intersect_domain(keep) for m in node.members),
                       child=_restrict(node.child, keep, statements))
    if isinstance(node, (N.Mark, N.Filter)):
        return replace(node, child=_restrict(node.child, keep, statements))
    return node


def _renamed(node: N.Node, taken: set[str]) -> N.Node:
    """``node``'s subtree with a fresh name for every loop (a copy made by distribution)."""
    if isinstance(node, N.Band):
        node = replace(node, names=tuple(N.unique_name(n, m, taken) for n, m in zip(node.names, node.members)))
    return N.with_children(node, tuple(_renamed(child, taken) for child in N.children(node)))


def _distribute(schedule, names, groups=None) -> N.Node:
    path, k = find(schedule, names[0]) if len(names) == 1 else (None, None)
    if path is None:
        raise ScheduleError(f"distribute takes one loop, got {len(names)}")
    band = N.at(schedule.root, path)
    _not_register_tiled(band, "distribute")
    scop = schedule.scop
    below = _ordered(scop, tuple_names(domain_at(schedule, path)))
    if groups is None:
        inner = band.child
        while isinstance(inner, N.Mark):
            inner = inner.child
        groups = ([_ordered(scop, tuple_names(f.domain)) for f in inner.children]
                  if isinstance(inner, N.Sequence) else [[s] for s in below])
    if isinstance(groups, str) or not all(not isinstance(g, str) and all(isinstance(s, str) for s in g)
                                          for g in groups):
        raise ScheduleError(f"distribute: groups= takes lists of statement names, got {groups!r}")
    groups = [list(g) for g in groups]
    flat = [s for g in groups for s in g]
    if sorted(flat) != sorted(below) or len(set(flat)) != len(flat):
        raise ScheduleError(f"distribute: groups {groups} must split the statements of loop {names[0]} "
                            f"({', '.join(below)}), each once")
    if len(groups) < 2:
        raise ScheduleError(f"distribute: loop {names[0]} runs one group of statements ({', '.join(below)}): "
                            "nothing to distribute")
    inner_band = _slice(band, k, len(band.members), band.child)
    taken = N.loop_names(schedule.root) - N.loop_names(inner_band)  # the copies name theirs anew
    copies = []
    for group in groups:  # the first copy keeps the names; a later one renames what is taken
        keep = statements_universe(scop, group)
        copies.append(N.Filter(keep, _renamed(_restrict(inner_band, keep, set(group)), taken)))
    node: N.Node = N.Sequence(tuple(copies))
    if k > 0:
        node = _slice(band, 0, k, node)
    root = N.replace_at(schedule.root, path, node)
    sequence_path = path + ((0,) if k > 0 else ())
    for index in range(len(groups)):
        root = refresh_flags(schedule, root, sequence_path + (index, 0))
    return root


# ----- marks and loop types ------------------------------------------------------------------------

def _marks_above(root: N.Node, path: tuple[int, ...]) -> list[str]:
    """The names of the marks on the way from the root to the node at ``path``."""
    found, node = [], root
    for k in path:
        if isinstance(node, N.Mark):
            found.append(node.name)
        node = N.children(node)[k]
    return found


def _parallel(schedule, names) -> N.Node:
    if len(names) != 1:
        raise ScheduleError(f"parallel takes one loop, got {len(names)}")
    path, k = find(schedule, names[0])
    above = _marks_above(schedule.root, path)
    if PARALLEL_MARK in above:
        parent = N.at(schedule.root, path[:-1]) if path else None
        direct = isinstance(parent, N.Mark) and parent.name == PARALLEL_MARK
        raise ScheduleError(f"parallel: loop {names[0]} is " + ("already parallel" if k == 0 and direct else
                            "inside a parallel loop (nested thread teams are not supported)"))
    inside = [n for _, n in N.walk(N.at(schedule.root, path)) if isinstance(n, N.Mark) and n.name == PARALLEL_MARK]
    if inside:
        raise ScheduleError(f"parallel: loop {names[0]} contains a parallel loop (nested thread teams are not supported)")
    band = N.at(schedule.root, path)
    _not_register_tiled(band, "parallel")
    if k == 0:
        return N.replace_at(schedule.root, path, N.Mark(PARALLEL_MARK, band))
    inner = _slice(band, k, len(band.members), band.child)
    return N.replace_at(schedule.root, path, _slice(band, 0, k, N.Mark(PARALLEL_MARK, inner)))


def _vectorize(schedule, names) -> N.Node:
    if len(names) != 1:
        raise ScheduleError(f"vectorize takes one loop, got {len(names)}")
    path, k = find(schedule, names[0])
    band = N.at(schedule.root, path)
    if N.has_band_below(band):
        raise ScheduleError(f"vectorize: loop {names[0]} is not in the innermost band (loops inside it: "
                            f"{', '.join(n for _, b in N.bands(band.child) for n in b.names)})")
    _not_register_tiled(band, "vectorize")
    order = [j for j in range(len(band.members)) if j != k] + [k]
    moved = replace(band, members=tuple(band.members[j] for j in order), names=tuple(band.names[j] for j in order),
                    coincident=tuple(band.flag(j) for j in order) if band.coincident else ())
    root = N.replace_at(schedule.root, path, moved)
    node = N.isl_node(N.to_isl(schedule.domain, root), path)
    innermost = len(order) - 1
    carried = carried_dependences(schedule.scop, dependences(schedule.scop), node.get_domain(),
                                  _outer(node, innermost), node.band_get_partial_schedule().get_at(innermost))
    if not carried.is_empty():
        raise ScheduleError(f"vectorize: loop {names[0]} carries the dependence {maps_of(carried)[0]} "
                            "when innermost; its iterations cannot run as vector lanes")
    return root


def _outer(node: isl.ScheduleNode, k: int) -> isl.UnionMap:
    """The schedule of the loops outside member ``k`` of the band at ``node``: its prefix and
    the band's members before ``k``."""
    partial = node.band_get_partial_schedule()
    outer = node.get_prefix_schedule_union_map()
    for j in range(k):
        outer = outer.flat_range_product(isl.UnionMap.from_union_pw_aff(partial.get_at(j)))
    return outer


def _runs_at_most(schedule, path: tuple[int, ...], k: int, limit: int) -> bool:
    """Whether loop ``k`` of the band at ``path`` runs at most ``limit`` iterations for any
    fixed values of the loops outside it, for every parameter value."""
    node = N.isl_node(schedule.tree, path)
    outer, domain = _outer(node, k), node.get_domain()
    same = outer.apply_range(outer.reverse()).intersect_domain(domain).intersect_range(domain)
    value = isl.UnionMap.from_union_pw_aff(node.band_get_partial_schedule().get_at(k))
    spread = same.apply_domain(value).apply_range(value).deltas().intersect_params(schedule.scop.context)
    if spread.is_empty():
        return True
    bound = isl.UnionSet(f"{{ [x] : x <= {limit - 1} }}").align_params(spread.get_space())
    return spread.is_subset(bound)


def _unroll(schedule, names, factor=None) -> N.Node:
    if len(names) != 1:
        raise ScheduleError(f"unroll takes one loop, got {len(names)}")
    if factor is not None:
        if not isinstance(factor, int) or isinstance(factor, bool) or factor < 2:
            raise ScheduleError(f"unroll: factor must be an int of at least 2, got {factor!r}")
        point = _fresh(schedule.root, [f"{names[0]}_1"], {names[0]})[0]  # the name _tile gives it
        schedule = replace(schedule, root=_tile(schedule, names, [factor]))
        names = (point,)
    path, k = find(schedule, names[0])
    band = N.at(schedule.root, path)
    _not_register_tiled(band, "unroll")
    if factor is None and not _runs_at_most(schedule, path, k, MAX_FULL_UNROLL):
        raise ScheduleError(f"unroll: loop {names[0]} may run more than {MAX_FULL_UNROLL} iterations (or a "
                            "number that grows with the sizes); give factor= to unroll it by that much")
    types = list(band.loop_types) or [0] * len(band.members)
    types[k] = isl.ast_loop_type.unroll.value
    return N.replace_at(schedule.root, path, replace(band, loop_types=tuple(types)))


def _register_tile(schedule, names, sizes) -> N.Node:
    path, band, _ = _merged(schedule, names, "register_tile")
    positions = [band.names.index(n) for n in names]
    if N.has_band_below(band):
        raise ScheduleError(f"register_tile: band ({', '.join(band.names)}) is not innermost")
    _not_register_tiled(band, "register_tile")
    values = _size_levels(sizes, len(names), "register_tile")
    if len(values) != 1:
        raise ScheduleError("register_tile: one level of sizes")
    plan = [1] * len(band.members)
    for position, size in zip(positions, values[0]):
        plan[position] = size
    if all(v == 1 for v in plan):
        raise ScheduleError(f"register_tile: sizes {values[0]} tile nothing")
    tree = N.to_isl(schedule.domain, N.replace_at(schedule.root, path, band))
    node, order = tree_ops.register_tile_band(N.isl_node(tree, path), schedule.scop, plan, positions[-1])
    read = N.read_node(node, schedule.scop, set(), 0)
    suffix = {"tile": "_0", "whole": "", "point": "_1"}
    wanted = [band.names[k] + suffix[part] for k, part in order]
    fresh = _fresh(schedule.root, wanted, set(band.names))
    return N.replace_at(schedule.root, path, replace(read, names=tuple(fresh)))


def _gpu_map(schedule, names) -> N.Node:
    """The loops become the block/thread coordinates of one CUDA kernel, in the given order (the
    last is threadIdx.x); the loops outside them run on the host, the loops inside in each
    thread. Each coordinate gets a band of its own under the gpu_block and gpu_thread marks,
    which the verifier checks like parallel loops and the CUDA mapping takes as given."""
    if not 1 <= len(names) <= 3:
        raise ScheduleError(f"gpu_map takes one to three loops (grid dimensions), got {len(names)}")
    path, band, _ = _merged(schedule, names, "gpu_map")
    positions = [band.names.index(n) for n in names]
    first = min(positions)
    if sorted(positions) != list(range(first, first + len(names))):
        raise ScheduleError(f"gpu_map: loops {', '.join(names)} are not consecutive loops of one band "
                            f"({', '.join(band.names)})")
    gpu = (GPU_BLOCK_MARK, GPU_THREAD_MARK)
    if any(name in gpu for name in _marks_above(schedule.root, path)):
        raise ScheduleError(f"gpu_map: loop {names[0]} is inside a GPU kernel already")
    if any(isinstance(n, N.Mark) and n.name in gpu for _, n in N.walk(band)):
        raise ScheduleError(f"gpu_map: loop {names[0]} holds a GPU kernel already (kernels do not nest)")
    stop = first + len(names)
    node = _slice(band, stop, len(band.members), band.child) if stop < len(band.members) else band.child
    for k in reversed(positions):
        coordinate = replace(_slice(band, k, k + 1, node), coincident=(True,))
        node = N.Mark(GPU_BLOCK_MARK, N.Mark(GPU_THREAD_MARK, coordinate))
    if first > 0:
        node = _slice(band, 0, first, node)
    return N.replace_at(schedule.root, path, node)


def _gpu_contract(schedule, names, precision: str = "exact") -> N.Node:
    """The contraction the Scop is (:func:`~polyopt.analysis.contraction.find_contraction`) as
    one CUDA kernel: its output indices the block/thread coordinates, in each thread the init
    statement, the K loops in loop order and the epilogue
    (:func:`~polyopt.transform.contraction_tree.coordinate_tree`); the loops the schedule had
    are replaced. As the last step, the CUDA target emits it as a batched GEMM on the tensor
    cores where the element types allow (``precision="tf32"``: f32 on TF32 tensor cores)."""
    if names:
        raise ScheduleError(f"gpu_contract takes no loops (the output indices become the coordinates), got {', '.join(names)}")
    if precision not in PRECISIONS:
        raise ScheduleError(f"gpu_contract: precision={precision!r}; the modes are {', '.join(PRECISIONS)}")
    _check_unmapped(schedule, "gpu_contract")
    found = find_contraction(schedule.scop)
    if found is None:
        raise ScheduleError(f"gpu_contract: {schedule.scop.name} is no contraction (one statement summing a product "
                            "of two array elements over the indices the output lacks, an optional init and "
                            "element-wise epilogue)")
    return N.from_isl(coordinate_tree(schedule.scop, found), schedule.scop)[1]


def _check_unmapped(schedule, primitive: str) -> None:
    """A GPU mapping step needs a schedule no earlier step mapped to blocks and threads."""
    if any(isinstance(n, N.Mark) and n.name in (GPU_BLOCK_MARK, GPU_THREAD_MARK) for _, n in N.walk(schedule.root)):
        raise ScheduleError(f"{primitive}: the schedule is mapped to the GPU already")


def _gpu_time_tile(schedule, names, steps: int | None = None, tile=None, block=None) -> N.Node:
    """The Scop's stencil (:func:`~polyopt.analysis.stencil.find_stencil`) in overlapped time
    tiles on the GPU: ``steps`` time steps per launch, each thread block computing one output
    ``tile`` (per spatial dimension, outermost first) with ``block`` threads from a region grown
    by the halo in shared memory (None: the CUDA target's defaults,
    :func:`~polyopt.codegen.cuda_stencil.time_tiling`). The order stays the original one (per
    time step, each statement's sweep in turn), which the schedule must have; the step records
    the choice, which the CUDA target takes when it is the last step."""
    if names:
        raise ScheduleError(f"gpu_time_tile takes no loops (the time loop and the sweeps are found), got {', '.join(names)}")
    if steps is not None and (not isinstance(steps, int) or isinstance(steps, bool) or steps < 1):
        raise ScheduleError(f"gpu_time_tile: steps must be a positive int, got {steps!r}")
    _check_unmapped(schedule, "gpu_time_tile")
    found = find_stencil(schedule.scop)
    if found is None:
        raise ScheduleError(f"gpu_time_tile: {schedule.scop.name} is no Jacobi-style stencil (an outer time loop around "
                            "sweeps writing array elements, reading written arrays at constant offsets, a statement's "
                            "own array only at offset 0)")
    if not runs_in_sweeps(schedule.scop, found, schedule.tree.get_map()):
        raise ScheduleError("gpu_time_tile: the schedule's order is not the original one (per time step, each "
                            "statement's sweep in program order)")
    return schedule.root


def _gpu_resident(schedule, names) -> N.Node:
    """The Scop's stencil (:func:`~polyopt.analysis.stencil.find_stencil`) as one cooperative
    CUDA launch running every time step, each block's strip of rows of the written arrays
    resident in shared memory (:mod:`polyopt.codegen.cuda_resident`), besides the sweeps the
    schedule maps, which run where the strips do not fit. The resident kernel runs the original
    order's sweeps (per time step, each statement's sweep in program order: the order
    :func:`~polyopt.analysis.stencil.find_stencil` checks), whatever order the schedule has;
    the step records the choice, which the CUDA target takes when it is the last step."""
    if names:
        raise ScheduleError(f"gpu_resident takes no loops (the time loop and the sweeps are found), got {', '.join(names)}")
    found = find_stencil(schedule.scop)
    if found is None:
        raise ScheduleError(f"gpu_resident: {schedule.scop.name} is no Jacobi-style stencil (an outer time loop around "
                            "sweeps writing array elements, reading written arrays at constant offsets, a statement's "
                            "own array only at offset 0)")
    return schedule.root


def _gpu_promote(schedule, names, arrays, to: str) -> N.Node:
    """Place ``arrays`` in memory ``to`` in the kernel whose outermost coordinate is the named
    loop: a ``gpu_memory`` mark above its ``gpu_block`` mark (merged with one already there, the
    newer place winning), which the CUDA backend follows (it raises CodegenError where it
    cannot). Refused: a loop that is no kernel's outermost coordinate, an array the kernel does
    not access, "shared" for an array the kernel writes, "registers" for one it only reads."""
    if len(names) != 1:
        raise ScheduleError(f"gpu_promote takes the kernel's outermost coordinate loop, got {len(names)} loops")
    if to not in GPU_MEMORY_PLACES:
        raise ScheduleError(f"gpu_promote: to={to!r}; the places are {', '.join(GPU_MEMORY_PLACES)}")
    if isinstance(arrays, str) or not arrays or not all(isinstance(a, str) for a in arrays):
        raise ScheduleError(f"gpu_promote: arrays is a list of array names, got {arrays!r}")
    path, _ = find(schedule, names[0])
    block = path[:-2]
    above = [N.at(schedule.root, path[:d]) for d in range(len(path) - 2, len(path))] if len(path) >= 2 else []
    if [getattr(n, "name", None) for n in above] != [GPU_BLOCK_MARK, GPU_THREAD_MARK]:
        raise ScheduleError(f"gpu_promote: loop {names[0]} is not a GPU kernel's coordinate (gpu_map it first)")
    if GPU_THREAD_MARK in _marks_above(schedule.root, block):
        raise ScheduleError(f"gpu_promote: loop {names[0]} is an inner coordinate of its kernel; name the outermost")
    statements = set(tuple_names(domain_at(schedule, path)))
    stmts = [schedule.scop.statement(name) for name in sorted(statements)]
    written = {w.array for s in stmts for w in s.writes}
    accessed = {a.array for s in stmts for a in s.accesses}
    for array in arrays:
        if array not in accessed:
            raise ScheduleError(f"gpu_promote: the kernel of loop {names[0]} does not access {array!r} "
                                f"(it accesses {', '.join(sorted(accessed))})")
        if to == "shared" and array in written:
            raise ScheduleError(f"gpu_promote: {array} is written in the kernel of loop {names[0]}; only "
                                "arrays a kernel only reads are staged in shared memory")
        if to == "registers" and array not in written:
            raise ScheduleError(f"gpu_promote: {array} is only read in the kernel of loop {names[0]}; "
                                "registers hold the elements a loop updates")
    parent = N.at(schedule.root, block[:-1]) if block else None
    placement = memory_placement(parent.name) if isinstance(parent, N.Mark) else None
    target = block[:-1] if placement is not None else block
    placement = {**(placement or {}), **{array: to for array in arrays}}
    kernel = N.at(schedule.root, block)
    return N.replace_at(schedule.root, target, N.Mark(memory_mark(placement), kernel))


# ----- whole trees -------------------------------------------------------------------------------

def tree_spec(root: N.Node) -> dict:
    """The JSON form of a node tree: ``{"band": [member, ...], "names": [...], "permutable": b,
    "coincident": [...], "child": ...}``, ``{"sequence": [{"filter": set, "child": ...}, ...]}``,
    ``{"mark": name, "child": ...}``, ``{}`` for a leaf; members and sets as isl text."""
    if isinstance(root, N.Leaf):
        return {}
    if isinstance(root, N.Band):
        spec = {"band": [str(m) for m in root.members], "names": list(root.names),
                "permutable": root.permutable, "coincident": [bool(c) for c in root.coincident]}
        if root.loop_types:
            spec["loop_types"] = list(root.loop_types)
        if root.isolate_loop_types:
            spec["isolate_loop_types"] = list(root.isolate_loop_types)
        if root.options is not None:
            spec["options"] = str(root.options)
        return {**spec, "child": tree_spec(root.child)}
    if isinstance(root, N.Sequence):
        spec = {"sequence": [{"filter": str(f.domain), "child": tree_spec(f.child)} for f in root.children]}
        return spec if root.ordered else {**spec, "ordered": False}
    if isinstance(root, N.Filter):
        return {"filter": str(root.domain), "child": tree_spec(root.child)}
    return {"mark": root.name, "child": tree_spec(root.child)}


def node_of(spec, scop: Scop, taken: set[str], depth: int = 0) -> N.Node:
    """The node tree of a :func:`tree_spec` (names it lacks are made as :func:`polyopt.
    transform.nodes.from_isl` makes them)."""
    if not isinstance(spec, dict):
        raise ScheduleError(f"not a schedule tree node: {spec!r}")
    try:
        if not spec:
            return N.Leaf()
        if "band" in spec:
            members = tuple(isl.UnionPwAff(text) for text in spec["band"])
            names = spec.get("names") or [N.suggested_name(m, scop, depth + k) for k, m in enumerate(members)]
            names = tuple(N.unique_name(n, m, taken) for n, m in zip(names, members))
            options = spec.get("options")
            return N.Band(members, names, node_of(spec.get("child", {}), scop, taken, depth + len(members)),
                          bool(spec.get("permutable", False)), tuple(bool(c) for c in spec.get("coincident", ())),
                          tuple(spec.get("loop_types", ())), tuple(spec.get("isolate_loop_types", ())),
                          isl.UnionSet(options) if options else None)
        if "sequence" in spec:
            return N.Sequence(tuple(N.Filter(isl.UnionSet(f["filter"]), node_of(f.get("child", {}), scop, taken, depth))
                                    for f in spec["sequence"]), bool(spec.get("ordered", True)))
        if "filter" in spec:
            return N.Filter(isl.UnionSet(spec["filter"]), node_of(spec.get("child", {}), scop, taken, depth))
        if "mark" in spec:
            return N.Mark(str(spec["mark"]), node_of(spec.get("child", {}), scop, taken, depth))
    except isl.Error as exc:
        raise ScheduleError(f"schedule tree node {spec!r}: {exc}") from None
    raise ScheduleError(f"not a schedule tree node: {spec!r}")


def _expand_scalars(schedule, names) -> tuple[N.Node, Scop]:
    """The same tree over the Scop with its local scalars expanded where that makes a loop of the
    original order parallel (:mod:`polyopt.transform.scalar_expansion`): the one primitive that
    changes the Scop (it only removes dependences, so every schedule legal before stays legal)."""
    if names:
        raise ScheduleError("expand_scalars takes no loops")
    return schedule.root, expand_scalars(schedule.scop).scop


def _affine_schedule(schedule, names, tree) -> N.Node:
    if names:
        raise ScheduleError("affine_schedule takes no loops")
    return node_of(tree, schedule.scop, set())


PRIMITIVES = {
    "tile": _tile, "split": _split, "interchange": _interchange, "permute": _permute, "skew": _skew,
    "shift": _shift, "reverse": _reverse, "fuse": _fuse, "distribute": _distribute, "wavefront": _wavefront,
    "parallel": _parallel, "vectorize": _vectorize, "gpu_map": _gpu_map, "gpu_promote": _gpu_promote,
    "gpu_contract": _gpu_contract, "gpu_time_tile": _gpu_time_tile, "gpu_resident": _gpu_resident,
    "unroll": _unroll, "register_tile": _register_tile,
    "affine_schedule": _affine_schedule, "expand_scalars": _expand_scalars,
}


# ----- text --------------------------------------------------------------------------------------

def pretty(schedule) -> str:
    """The node tree, one node per line, bands with their loop names and flags."""
    lines: list[str] = []

    def visit(node: N.Node, depth: int) -> None:
        pad = "  " * depth
        if isinstance(node, N.Band):
            flags = ["permutable"] if node.permutable else []
            parallel = [n for k, n in enumerate(node.names) if node.flag(k)]
            if parallel:
                flags.append("coincident: " + ", ".join(parallel))
            if node.loop_types and any(node.loop_types):
                flags.append("unrolled: " + ", ".join(n for n, t in zip(node.names, node.loop_types) if t))
            if node.options is not None:
                flags.append("register tile")
            lines.append(f"{pad}band ({', '.join(node.names)})" + (f"  [{'; '.join(flags)}]" if flags else ""))
            for name, member in zip(node.names, node.members):
                lines.append(f"{pad}  {name} = {member}")
        elif isinstance(node, N.Sequence):
            lines.append(f"{pad}{'sequence' if node.ordered else 'set'}")
        elif isinstance(node, N.Filter):
            lines.append(f"{pad}filter {node.domain}")
        elif isinstance(node, N.Mark):
            lines.append(f"{pad}mark {node.name}")
        for child in N.children(node):
            visit(child, depth + 1)

    visit(schedule.root, 0)
    return "\n".join(lines)
