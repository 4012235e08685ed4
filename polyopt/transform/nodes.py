"""The schedule tree as plain Python values, with a name on every loop.

isl's schedule tree is a cursor API over a shared immutable tree; band members have no names.
The primitives of :mod:`polyopt.transform.primitives` work on this mirror instead: a tree of
frozen nodes (:class:`Band`, :class:`Sequence`, :class:`Filter`, :class:`Mark`, :class:`Leaf`)
whose band members carry the names that loop handles refer to. :func:`from_isl` and
:func:`to_isl` translate exactly (members, flags, AST loop types and build options, filters,
marks), so a tree survives the round trip unchanged.

A *path* is the tuple of child positions from the root: every node has one child except a
Sequence, whose k-th child is its k-th Filter.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterator

import islpy as isl

from polyopt.analysis.scop import Scop
from polyopt.errors import ScheduleError
from polyopt.transform.tree import unit_iterator


@dataclass(frozen=True, eq=False)
class Leaf:
    """The statements below run in the order the nodes above give them (one instance each)."""


@dataclass(frozen=True, eq=False)
class Band:
    """Nested loops, one per member: ``members[k]`` maps each statement instance to its value of
    loop ``names[k]``. ``permutable``: the members may be reordered and tiled; ``coincident[k]``:
    member k carries no dependence not carried by the loops outside the band (parallel).
    ``loop_types``/``isolate_loop_types`` are isl's AST loop types per member (0: default) and
    ``options`` its AST build options (the isolate option of whole register tiles)."""

    members: tuple[isl.UnionPwAff, ...]
    names: tuple[str, ...]
    child: "Node"
    permutable: bool = False
    coincident: tuple[bool, ...] = ()
    loop_types: tuple[int, ...] = ()
    isolate_loop_types: tuple[int, ...] = ()
    options: isl.UnionSet | None = None

    def __post_init__(self):
        n = len(self.members)
        if len(self.names) != n:
            raise ScheduleError(f"band of {n} members with {len(self.names)} names")
        for field_name in ("coincident", "loop_types", "isolate_loop_types"):
            values = getattr(self, field_name)
            if values and len(values) != n:
                raise ScheduleError(f"band of {n} members with {len(values)} {field_name} flags")

    def flag(self, k: int) -> bool:
        return bool(self.coincident[k]) if self.coincident else False

    def partial(self) -> isl.MultiUnionPwAff:
        """The members as one isl multi-union-piecewise-affine value (isl's partial schedule)."""
        return multi_union(self.members)


@dataclass(frozen=True, eq=False)
class Filter:
    """Only the instances of ``domain`` go on below (a child of a Sequence, in practice)."""

    domain: isl.UnionSet
    child: "Node"


@dataclass(frozen=True, eq=False)
class Sequence:
    """The children (filters) run one after the other; ``ordered=False``: in any order (isl's
    set node)."""

    children: tuple[Filter, ...]
    ordered: bool = True


@dataclass(frozen=True, eq=False)
class Mark:
    """A named mark on the subtree (``parallel`` above a band whose first loop runs on threads)."""

    name: str
    child: "Node"


Node = Band | Sequence | Filter | Mark | Leaf


def children(node: Node) -> tuple[Node, ...]:
    """The nodes directly below ``node``."""
    if isinstance(node, Sequence):
        return node.children
    if isinstance(node, Leaf):
        return ()
    return (node.child,)


def with_children(node: Node, new: tuple[Node, ...]) -> Node:
    """``node`` with its children replaced."""
    if isinstance(node, Sequence):
        return replace(node, children=tuple(new))
    if isinstance(node, Leaf):
        return node
    return replace(node, child=new[0])


def walk(node: Node, path: tuple[int, ...] = ()) -> Iterator[tuple[tuple[int, ...], Node]]:
    """Every (path, node) below and including ``node``, parents first, in textual order."""
    yield path, node
    for k, child in enumerate(children(node)):
        yield from walk(child, path + (k,))


def at(root: Node, path: tuple[int, ...]) -> Node:
    """The node at ``path``."""
    node = root
    for k in path:
        node = children(node)[k]
    return node


def replace_at(root: Node, path: tuple[int, ...], new: Node) -> Node:
    """``root`` with the node at ``path`` replaced by ``new``."""
    if not path:
        return new
    kids = list(children(root))
    kids[path[0]] = replace_at(kids[path[0]], path[1:], new)
    return with_children(root, tuple(kids))


def bands(root: Node) -> list[tuple[tuple[int, ...], Band]]:
    """Every band with its path, outer first."""
    return [(path, node) for path, node in walk(root) if isinstance(node, Band)]


def has_band_below(node: Node) -> bool:
    return any(isinstance(n, Band) for _, n in walk(node) if n is not node)


def multi_union(members) -> isl.MultiUnionPwAff:
    """The members as an isl partial schedule (their parameters aligned)."""
    members = list(members)
    params = members[0].get_space()
    for member in members[1:]:
        params = params.align_params(member.get_space())
    space = isl.Space.set_alloc(params.get_ctx(), 0, len(members)).align_params(params)
    upas = isl.UnionPwAffList.alloc(params.get_ctx(), len(members))
    for member in members:
        upas = upas.add(member.align_params(params))
    return isl.MultiUnionPwAff.from_union_pw_aff_list(space, upas)


# ----- isl <-> nodes -----------------------------------------------------------------------------

def from_isl(tree: isl.Schedule, scop: Scop, taken: set[str] | None = None) -> tuple[isl.UnionSet, Node]:
    """The domain and node tree of an isl schedule tree; band members are named after the
    original iterator they are (``i`` for ``{ S[i, j] -> [(i)] }``), else ``c<depth>``, made
    unique over the tree (a second loop ``i`` of statement S2 is ``i@S2``). ``taken``: names
    already in use (updated)."""
    taken = set() if taken is None else taken
    root = tree.get_root()
    if root.get_type() != isl.schedule_node_type.domain:
        raise ScheduleError(f"schedule tree without a domain root: {root.get_type()}")
    domain = root.domain_get_domain()
    if root.n_children() == 0:
        return domain, Leaf()
    return domain, read_node(root.child(0), scop, taken, 0)


def read_node(node: isl.ScheduleNode, scop: Scop, taken: set[str], depth: int) -> Node:
    """The node tree of the isl subtree at ``node`` (``depth``: band members above it)."""
    kind = node.get_type()
    if kind == isl.schedule_node_type.leaf:
        return Leaf()
    if kind == isl.schedule_node_type.band:
        n = node.band_n_member()
        partial = node.band_get_partial_schedule()
        members = tuple(partial.get_at(k) for k in range(n))
        names = tuple(unique_name(suggested_name(m, scop, depth + k), m, taken) for k, m in enumerate(members))
        options = node.band_get_ast_build_options()
        return Band(members, names, read_node(node.child(0), scop, taken, depth + n),
                    permutable=bool(node.band_get_permutable()),
                    coincident=tuple(bool(node.band_member_get_coincident(k)) for k in range(n)),
                    loop_types=_loop_types(node, n, isolate=False),
                    isolate_loop_types=_loop_types(node, n, isolate=True),
                    options=None if options.is_empty() else options)
    if kind in (isl.schedule_node_type.sequence, isl.schedule_node_type.set):
        kids = tuple(read_node(node.child(k), scop, taken, depth) for k in range(node.n_children()))
        return Sequence(kids, ordered=kind == isl.schedule_node_type.sequence)
    if kind == isl.schedule_node_type.filter:
        return Filter(node.filter_get_filter(), read_node(node.child(0), scop, taken, depth))
    if kind == isl.schedule_node_type.mark:
        return Mark(node.mark_get_id().get_name(), read_node(node.child(0), scop, taken, depth))
    raise ScheduleError(f"schedule trees with {str(kind).split('.')[-1]} nodes are not supported")


def _loop_types(node: isl.ScheduleNode, n: int, *, isolate: bool) -> tuple[int, ...]:
    get = node.band_member_get_isolate_ast_loop_type if isolate else node.band_member_get_ast_loop_type
    values = tuple(get(k).value for k in range(n))
    return values if any(values) else ()


def to_isl(domain: isl.UnionSet, root: Node) -> isl.Schedule:
    """The isl schedule tree of ``root`` over ``domain``."""
    node = isl.Schedule.from_domain(domain).get_root().child(0)
    return _build(node, root).get_schedule()


def _build(node: isl.ScheduleNode, ir: Node) -> isl.ScheduleNode:
    """Insert ``ir`` at the leaf ``node``; returns the node at the same place."""
    if isinstance(ir, Leaf):
        return node
    if isinstance(ir, Band):
        node = node.insert_partial_schedule(ir.partial()).band_set_permutable(int(ir.permutable))
        for k, flag in enumerate(ir.coincident):
            node = node.band_member_set_coincident(k, int(flag))
        for k, value in enumerate(ir.loop_types):
            if value:
                node = node.band_member_set_ast_loop_type(k, isl.ast_loop_type(value))
        for k, value in enumerate(ir.isolate_loop_types):
            if value:
                node = node.band_member_set_isolate_ast_loop_type(k, isl.ast_loop_type(value))
        if ir.options is not None:
            node = node.band_set_ast_build_options(ir.options)
        return _build(node.child(0), ir.child).parent()
    if isinstance(ir, Mark):
        return _build(node.insert_mark(isl.Id(ir.name)).child(0), ir.child).parent()
    if isinstance(ir, Filter):
        return _build(node.insert_filter(ir.domain).child(0), ir.child).parent()
    filters = isl.UnionSetList.alloc(node.get_ctx(), len(ir.children))
    for child in ir.children:
        filters = filters.add(child.domain)
    node = node.insert_sequence(filters) if ir.ordered else node.insert_set(filters)
    for k, child in enumerate(ir.children):
        node = _build(node.child(k).child(0), child.child).parent().parent()
    return node


def isl_node(tree: isl.Schedule, path: tuple[int, ...]) -> isl.ScheduleNode:
    """The isl node of ``tree`` (built by :func:`to_isl`) at ``path``."""
    node = tree.get_root().child(0)
    for k in path:
        node = node.child(k)
    return node


# ----- names -------------------------------------------------------------------------------------

def suggested_name(member: isl.UnionPwAff, scop: Scop, depth: int) -> str:
    """The original iterator a member walks (the same name for every statement), else ``c<depth>``."""
    positions = unit_iterator(member, scop)
    names = {(_iterators(scop, stmt) + (None,) * (k + 1))[k] for stmt, k in (positions or {}).items()}
    return names.pop() if len(names) == 1 and None not in names else f"c{depth}"


def _iterators(scop: Scop, stmt: str) -> tuple[str, ...]:
    try:
        return tuple(scop.statement(stmt).iterators)
    except Exception:  # a statement the Scop does not know (a foreign tree): no names
        return ()


def unique_name(name: str, member: isl.UnionPwAff | None, taken: set[str]) -> str:
    """``name``, or ``name@S`` (S: the member's first statement), or with a counter: the first
    not in ``taken``; added to it."""
    candidates = [name]
    if member is not None:
        stmts = sorted(m.get_space().get_tuple_name(isl.dim_type.in_) for m in _pw_affs(member))
        if stmts:
            candidates.append(f"{name}@{stmts[0]}")
    base = candidates[-1]
    count = 2
    while all(c in taken for c in candidates):
        candidates.append(f"{base}#{count}")
        count += 1
    chosen = next(c for c in candidates if c not in taken)
    taken.add(chosen)
    return chosen


def _pw_affs(member: isl.UnionPwAff) -> list[isl.PwAff]:
    found: list[isl.PwAff] = []
    member.foreach_pw_aff(found.append)
    return found


def loop_names(root: Node) -> set[str]:
    """Every loop name in the tree."""
    return {name for _, band in bands(root) for name in band.names}
