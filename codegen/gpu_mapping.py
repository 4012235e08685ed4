"""Mapping a schedule tree onto the GPU (PPCG-style): a host program of loops and kernel launches.

Walking the schedule tree from the root, each band whose leading members carry no dependence
(checked here with isl on the dependences, given the outer schedule) becomes one kernel: up to
three of those members become the thread coordinates (``blockIdx``/``threadIdx``, the member
with the most stride-1 accesses on ``x``) and the rest of the subtree runs sequentially inside
each thread. A band whose outer member is sequential but which has parallelism below stays on
the host as a loop launching kernels (a stencil's time loop); sequences become sequences of
launches; a subtree with no parallelism at all becomes a single-thread kernel.

Kernel bounds, host loop bounds and the per-thread guard are isl expressions of the parameters
and of the enclosing host loop variables, so grid sizes follow the parameter values at launch.
The per-thread body is isl's AST of the subtree's schedule with the thread coordinates as
parameters, built under the context "this thread's coordinates are in the kernel's domain".
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import islpy as isl

from polyopt.analysis import expr as E
from polyopt.codegen.loop_nodes import Node
from polyopt.codegen.ast import iterator_prefix, MAX_LOOP_DEPTH, IslAstTranslator
from polyopt.analysis.deps import dependences
from polyopt.errors import CodegenError
from polyopt.analysis.scop import Scop
from polyopt.types import boolean
from polyopt.transform.tree import stride_one_score

#: Most thread coordinates one kernel uses (CUDA grids have three dimensions).
MAX_GRID_DIMS = 3


@dataclass(frozen=True)
class Kernel:
    """One kernel launch site.

    ``coords`` are the thread-coordinate variables, outermost first (the last maps to ``x``);
    ``lower``/``upper`` their inclusive bounds (a box, expressions of parameters and
    ``host_vars``); ``guard`` is true exactly for the coordinates of the kernel's domain;
    ``body`` the loop AST each thread runs (an empty ``coords`` is a single-thread kernel);
    ``convex``: the guard's set is convex (true at a box's corners means true in the box).
    """

    name: str
    coords: tuple[str, ...]
    lower: tuple[E.Expr, ...]
    upper: tuple[E.Expr, ...]
    guard: E.Expr
    body: Node
    host_vars: tuple[str, ...]
    statements: frozenset[str]
    convex: bool = False


@dataclass(frozen=True)
class HostLoop:
    """``for var in lower..upper`` (inclusive) on the host, running ``body`` each iteration."""

    var: str
    lower: E.Expr
    upper: E.Expr
    body: tuple["HostStep", ...]


HostStep = Kernel | HostLoop


@dataclass(frozen=True)
class GpuProgram:
    """The host program (loops and launches in order) and its kernels."""

    scop: Scop
    host: tuple[HostStep, ...]
    kernels: tuple[Kernel, ...]


def kernels_in(steps) -> list[Kernel]:
    """The kernels of a host program, in launch-site order."""
    found = []
    for step in steps:
        found.extend(kernels_in(step.body) if isinstance(step, HostLoop) else [step])
    return found


def check_user_names(scop: Scop) -> None:
    """Refuse a kernel with a size, argument or local whose name starts with an underscore: the
    GPU program makes up its host loop and thread coordinates so (``_h0``, ``_p0``: isl parameters
    beside the user's sizes), and the CUDA source its block, thread and staging variables (``_b0``,
    ``_s0``, ``_e``...); one of them would become or shadow the user's, silently changing the
    result."""
    for name in sorted(set(scop.params) | set(scop.arrays) | {a.name for a in scop.arguments}):
        if name.startswith("_"):
            raise CodegenError(f"{scop.name}: '{name}' starts with an underscore, which the CUDA "
                               "code keeps for its own variables; rename it for target='cuda'")


def map_to_gpu(scop: Scop, tree: isl.Schedule, name: str) -> GpuProgram:
    """The host program of schedule ``tree``; kernels are named ``{name}_k0``, ``_k1``, ..."""
    check_user_names(scop)
    host = _numbered(_Mapper(scop).steps(tree.get_root(), ()), name, iter(range(1 << 30)))
    return GpuProgram(scop, host, tuple(kernels_in(host)))


def _numbered(steps, name: str, numbers) -> tuple[HostStep, ...]:
    """``steps`` with the kernels named ``{name}_k0``, ``_k1``, ... in launch-site order."""
    return tuple(replace(s, body=_numbered(s.body, name, numbers)) if isinstance(s, HostLoop)
                 else replace(s, name=f"{name}_k{next(numbers)}") for s in steps)


class _Mapper:
    def __init__(self, scop: Scop):
        self.scop = scop
        self.deps = dependences(scop).all
        self.prefix = iterator_prefix(scop)

    # ----- the walk over the tree ------------------------------------------------------------
    def steps(self, node: isl.ScheduleNode, host: tuple) -> list[HostStep]:
        kind = node.get_type()
        if kind != isl.schedule_node_type.domain and node.get_domain().is_empty():
            return []
        if kind in (isl.schedule_node_type.domain, isl.schedule_node_type.filter,
                    isl.schedule_node_type.mark):
            return self.steps(node.child(0), host)
        if kind in (isl.schedule_node_type.sequence, isl.schedule_node_type.set):
            return [s for k in range(node.n_children()) for s in self.steps(node.child(k), host)]
        if kind == isl.schedule_node_type.leaf:
            return [self.kernel(node, 0, host)]
        if kind != isl.schedule_node_type.band:
            raise CodegenError(f"CUDA mapping: unsupported schedule tree node {kind}")
        parallel = self.parallel_members(node)
        if parallel:
            return [self.kernel(node, parallel, host)]
        # the outer member is sequential: a host loop, if there is parallelism below it
        n = node.band_n_member()
        member = node.band_get_partial_schedule().get_at(0)
        inner = node.band_split(1).child(0) if n > 1 else node.child(0)
        var = f"_h{len(host)}"
        body = self.steps(inner, host + ((member, var),))
        if not any(k.coords for k in kernels_in(body)):  # one sequential kernel instead
            return [self.kernel(node, 0, host)]
        values = _image(self.restrict(node.get_domain(), host), member)
        lower, upper = self.bounds(values, 0)
        return [HostLoop(var, lower, upper, tuple(body))]

    def parallel_members(self, node: isl.ScheduleNode) -> int:
        """How many leading members of the band carry no dependence (given all outer
        dimensions), at most :data:`MAX_GRID_DIMS`."""
        domain = node.get_domain()
        deps = self.deps.intersect_domain(domain).intersect_range(domain)
        if deps.is_empty():
            return min(node.band_n_member(), MAX_GRID_DIMS)
        prefix = node.get_prefix_schedule_union_map()
        partial = node.band_get_partial_schedule()
        outer = prefix.intersect_domain(domain)
        for k in range(min(node.band_n_member(), MAX_GRID_DIMS)):
            outer_dims = _n_out(outer)
            with_member = outer.flat_range_product(
                isl.UnionMap.from_union_pw_aff(partial.get_at(k)).intersect_domain(domain))
            pairs = deps.apply_domain(with_member).apply_range(with_member)
            for delta in _sets(pairs.deltas()):
                for d in range(outer_dims):
                    delta = delta.fix_val(isl.dim_type.set, d, isl.Val(0))
                if not delta.fix_val(isl.dim_type.set, outer_dims, isl.Val(0)).is_equal(delta):
                    return k
            outer = with_member
        return min(node.band_n_member(), MAX_GRID_DIMS)

    # ----- kernels ---------------------------------------------------------------------------
    def kernel(self, node: isl.ScheduleNode, n_coords: int, host: tuple) -> Kernel:
        domain = self.restrict(node.get_domain(), host)
        host_vars = tuple(var for _, var in host)
        statements = frozenset(s.get_tuple_name() for s in _sets(domain))
        name = ""  # numbered once the whole program is known
        if n_coords == 0:
            body = self.loop_ast(node.get_subtree_schedule_union_map(), domain, None)
            true = E.Const(1, boolean)
            return Kernel(name, (), (), (), true, body, host_vars, statements)
        members, rest = self.coordinate_members(node, n_coords)
        n_coords = len(members)
        order = self.coalescing_order(members)
        members = [members[k] for k in order]
        coords = tuple(f"_p{k}" for k in range(n_coords))
        values = _image(domain, *members)
        lower, upper = zip(*(self.bounds(values, d) for d in range(n_coords)))
        valid = _as_params(values, coords)
        guard = self.expr_of_set(valid)
        fixed = domain
        for member, var in zip(members, coords):
            fixed = _fix(fixed, member, var)
        body = self.loop_ast(rest.get_subtree_schedule_union_map(), fixed, valid)
        return Kernel(name, coords, tuple(lower), tuple(upper), guard, body, host_vars, statements,
                      valid.n_basic_set() == 1)

    def coordinate_members(self, node: isl.ScheduleNode, n_parallel: int
                           ) -> tuple[list[isl.UnionPwAff], isl.ScheduleNode]:
        """The parallel members of band ``node`` (``n_parallel`` leading ones) and, while the
        band is wholly parallel and directly holds another band, that band's leading parallel
        members too (up to :data:`MAX_GRID_DIMS`); and the node below them."""
        members: list[isl.UnionPwAff] = []
        while True:
            partial = node.band_get_partial_schedule()
            members += [partial.get_at(k) for k in range(n_parallel)]
            if n_parallel < node.band_n_member():
                return members, node.band_split(n_parallel).child(0)
            child = node.child(0)
            room = MAX_GRID_DIMS - len(members)
            if room == 0 or child.get_type() != isl.schedule_node_type.band:
                return members, child
            n_parallel = min(self.parallel_members(child), room)
            if n_parallel == 0:
                return members, child
            node = child

    def coalescing_order(self, members: list[isl.UnionPwAff]) -> list[int]:
        """Member order with the one walking most accesses with stride 1 last (threadIdx.x)."""
        scores = [stride_one_score(m, self.scop) for m in members]
        best = max(range(len(members)), key=lambda k: (scores[k], k))
        return [k for k in range(len(members)) if k != best] + [best]

    def restrict(self, domain: isl.UnionSet, host: tuple) -> isl.UnionSet:
        """``domain`` where each host loop's member equals its variable."""
        for member, var in host:
            domain = _fix(domain, member, var)
        return domain

    # ----- isl -> expressions ----------------------------------------------------------------
    def translator(self) -> IslAstTranslator:
        return IslAstTranslator(set(self.scop.params))

    def build(self, space_of: isl.Set) -> isl.AstBuild:
        """An AST build under the Scop's context, knowing the parameters of ``space_of``."""
        return isl.AstBuild.from_context(self.scop.context.align_params(space_of.get_space()))

    def bounds(self, values: isl.Set, dim: int) -> tuple[E.Expr, E.Expr]:
        """Inclusive lower and upper bound of dimension ``dim`` of ``values``."""
        build = self.build(values)
        low, high = values.dim_min(dim), values.dim_max(dim)
        tr = self.translator()
        return tr.expr(build.expr_from_pw_aff(low)), tr.expr(build.expr_from_pw_aff(high))

    def expr_of_set(self, params: isl.Set) -> E.Expr:
        """A condition that holds exactly for the parameter values in ``params``."""
        build = self.build(params)
        return self.translator().expr(build.expr_from_set(params))

    def loop_ast(self, schedule: isl.UnionMap, domain: isl.UnionSet,
                 valid: isl.Set | None) -> Node:
        """isl's AST of ``schedule`` on ``domain``, assuming ``valid`` (parameter values)."""
        context = self.scop.context.align_params(domain.get_space())
        if valid is not None:
            context = context.intersect(valid.align_params(context.get_space()))
        build = isl.AstBuild.from_context(context)
        names = isl.IdList.alloc(isl.DEFAULT_CONTEXT, MAX_LOOP_DEPTH)
        for k in range(MAX_LOOP_DEPTH):
            names = names.add(isl.Id(f"{self.prefix}{k}"))
        build = build.set_iterators(names)
        root = build.node_from_schedule_map(schedule.intersect_domain(domain))
        return self.translator().node(root)


def _n_out(umap: isl.UnionMap) -> int:
    maps = []
    umap.foreach_map(maps.append)
    return maps[0].dim(isl.dim_type.out) if maps else 0


def _sets(uset: isl.UnionSet) -> list[isl.Set]:
    found = []
    uset.foreach_set(found.append)
    return found


def _member_map(member: isl.UnionPwAff) -> isl.UnionMap:
    return isl.UnionMap.from_union_pw_aff(member)


def _fix(domain: isl.UnionSet, member: isl.UnionPwAff, var: str) -> isl.UnionSet:
    """The instances of ``domain`` whose ``member`` value equals the parameter ``var``."""
    equal = isl.Set(f"[{var}] -> {{ [x] : x = {var} }}")
    return _member_map(member).intersect_domain(domain).intersect_range(
        isl.UnionSet.from_set(equal)).domain()


def _image(domain: isl.UnionSet, *members: isl.UnionPwAff) -> isl.Set:
    """The set of values of (member0, member1, ...) over ``domain`` (one unnamed space)."""
    umap = _member_map(members[0]).intersect_domain(domain)
    for member in members[1:]:
        umap = umap.flat_range_product(_member_map(member).intersect_domain(domain))
    image = umap.range()
    sets = _sets(image)
    if not sets:
        raise CodegenError("CUDA mapping: empty kernel domain")
    return isl.Set.from_union_set(image).coalesce()


def _as_params(values: isl.Set, names: tuple[str, ...]) -> isl.Set:
    """``values`` (an n-dimensional set) as a parameter set over ``names``."""
    n = values.dim(isl.dim_type.set)
    text = ", ".join(f"x{k}" for k in range(n))
    equal = isl.Set(f"[{', '.join(names)}] -> {{ [{text}] : "
                    + " and ".join(f"x{k} = {names[k]}" for k in range(n)) + " }")
    values = values.align_params(equal.get_space())
    return values.intersect(equal.align_params(values.get_space())).params().coalesce()
