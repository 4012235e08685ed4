"""Mapping a schedule tree onto the GPU (PPCG-style): a host program of loops and kernel launches.

Walking the schedule tree from the root, each band whose leading members carry no dependence
(checked here with isl on the dependences, given the outer schedule) becomes one kernel: up to
three of those members become the thread coordinates (``blockIdx``/``threadIdx``, the member
with the most stride-1 accesses on ``x``) and the rest of the subtree runs sequentially inside
each thread. A band whose outer member is sequential but which has parallelism below stays on
the host as a loop launching kernels (a stencil's time loop); sequences become sequences of
launches; a subtree with no parallelism at all becomes a single-thread kernel, except that

  - a statement writing a host scalar, alone at a leaf, runs on the host (once per iteration
    of the host loops around it, :mod:`polyopt.codegen.gpu_host`): deriche's coefficients;
  - a host loop whose kernels each have at most one-dimensional work (no coordinate, or one
    whose threads run no loop) and one of which has no coordinate, a sequential loop whose
    only parallel work is a sum (``gpu_reduce``), and a run of a sequence's children that map
    to such loops and to kernels without coordinates running no loop but their sums (a sum
    among them), become one :class:`BlockKernel`: one thread block running the loops itself,
    its kernels as phases over the block's threads with a barrier after each (durbin: one
    launch instead of a one-thread kernel and several small ones per step of its k loop);
  - a statement of a single instance (no loop), launched once as a one-thread kernel, runs in
    the kernel launched just before it, or else just after it, at that kernel's first point,
    where that kernel's threads run no loop and the verifier accepts the merged tree
    (correlation's ``corr[M-1][M-1] = 1.0``).

Kernel bounds, host loop bounds and the per-thread guard are isl expressions of the parameters
and of the enclosing host loop variables, so grid sizes follow the parameter values at launch.
The per-thread body is isl's AST of the subtree's schedule with the thread coordinates as
parameters, built under the context "this thread's coordinates are in the kernel's domain".

The mapping's choice is data too: ``GpuProgram.tree`` is the schedule tree it maps (print it with
``GpuProgram.pretty()``), the input tree with
  - each host loop a band of one member (the loop), outside every kernel;
  - each kernel's subtree under a mark ``gpu_kernel <kernel name>``
    (:data:`~polyopt.transform.marks.GPU_KERNEL_MARK`), directly above its coordinates: one
    band of one member per thread coordinate, outermost first (the last is ``x``), each under
    the two marks ``gpu_block`` and ``gpu_thread`` (a coordinate's values are spread over the
    blocks *and* over the threads of a block, ``blockIdx`` and ``threadIdx`` of one grid axis,
    and a thread's unrolled copies and grid-stride steps: any two of them may run at the same
    time), then the rest of the subtree, which each thread runs sequentially (reduction loops
    included; shared-memory staging only copies arrays the kernel does not write).
  - each host statement's leaf under a mark ``gpu_host <statement>``;
  - a one-block kernel's subtree under ``gpu_kernel <name>`` and ``gpu_one_block``, each phase
    under ``gpu_phase <name>`` and its coordinate, if any, under ``gpu_thread`` alone (one
    block); the bands between are the kernel's loops, which every thread runs in step.
The kernels are read back from that tree (coordinates from the marked bands, bodies from what
is below them), and :func:`polyopt.analysis.verify.verify` checks every marked coordinate like a
loop marked parallel: it carries no dependence given the loops outside it (host loops, a
one-block kernel's loops and outer coordinates). The order of a one-block kernel's phases is
the tree's, which the verifier checks too; the barriers make the threads keep it.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import reduce

import islpy as isl

from polyopt.analysis import expr as E
from polyopt.codegen.kernel_body import has_loop
from polyopt.codegen.loop_nodes import Node
from polyopt.codegen.ast import iterator_prefix, MAX_LOOP_DEPTH, IslAstTranslator
from polyopt.codegen.gpu_host import HostStatement, host_scalars, reads_of, writers
from polyopt.analysis.deps import dependences
from polyopt.errors import CodegenError, IllegalScheduleError
from polyopt.analysis.scop import Scop
from polyopt.types import boolean
from polyopt.islutil import coalesced, tuple_names
from polyopt.analysis.reductions import accumulated_array, same_element_updates
from polyopt.analysis.verify import carried_dependences, verify
from polyopt.transform import nodes as N
from polyopt.transform.marks import (GPU_BLOCK_MARK, GPU_KERNEL_MARK, GPU_REDUCE_MARK, GPU_THREAD_MARK,
                                     memory_placement)
from polyopt.transform.tree import stride_one_score

#: Most thread coordinates one kernel uses (CUDA grids have three dimensions).
MAX_GRID_DIMS = 3
#: Above a statement the host program runs itself (:mod:`polyopt.codegen.gpu_host`); the mark's
#: name is this word, a space and the statement's name ("gpu_host S0").
GPU_HOST_MARK = "gpu_host"
#: Directly below the ``gpu_kernel`` mark of a :class:`BlockKernel`: the subtree runs in one
#: thread block, its bands without coordinates as loops every thread walks.
GPU_ONE_BLOCK_MARK = "gpu_one_block"
#: Above each phase of a :class:`BlockKernel` (this word, a space and the phase's name); its
#: coordinate, if any, is a band under a ``gpu_thread`` mark alone (one block: no ``gpu_block``).
GPU_PHASE_MARK = "gpu_phase"


@dataclass(frozen=True)
class Kernel:
    """One kernel launch site.

    ``coords`` are the thread-coordinate variables, outermost first (the last maps to ``x``);
    ``lower``/``upper`` their inclusive bounds (a box, expressions of parameters and
    ``host_vars``); ``guard`` is true exactly for the coordinates of the kernel's domain;
    ``body`` the loop AST each thread runs (an empty ``coords`` is a single-thread kernel);
    ``convex``: the guard's set is convex (true at a box's corners means true in the box);
    ``sums``: the statements under ``gpu_reduce`` marks in the kernel's subtree, whose loops
    (the outermost loops of ``body`` that run only them) may split their iterations over the
    threads of a warp (:mod:`polyopt.codegen.gpu_reduction`); ``memory``: (array, place) pairs
    of a ``gpu_memory`` mark above the kernel (:meth:`polyopt.Schedule.gpu_promote`);
    ``host_scalars``: the host scalars it reads (:mod:`polyopt.codegen.gpu_host`), trailing
    arguments after ``host_vars``.
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
    sums: frozenset[str] = frozenset()
    memory: tuple[tuple[str, str], ...] = ()
    host_scalars: tuple[str, ...] = ()


@dataclass(frozen=True)
class HostLoop:
    """``for var in lower..upper`` (inclusive) on the host, running ``body`` each iteration."""

    var: str
    lower: E.Expr
    upper: E.Expr
    body: tuple["HostStep", ...]


@dataclass(frozen=True)
class BlockKernel:
    """A kernel of one thread block that runs ``steps`` in order, every thread walking its loops
    (:class:`HostLoop` steps run inside the kernel) and its phases (:class:`Kernel` steps of at
    most one coordinate, spread over the block's threads; without one, run by thread 0, or by
    every thread where a sum splits), a barrier after each phase. ``statements``, ``host_vars``
    and ``host_scalars`` are those of the whole kernel, as for a :class:`Kernel`; it has no
    coordinates (one block is launched)."""

    name: str
    steps: tuple["HostLoop | Kernel", ...]
    host_vars: tuple[str, ...]
    statements: frozenset[str]
    host_scalars: tuple[str, ...] = ()
    coords: tuple[str, ...] = ()


HostStep = Kernel | HostLoop | HostStatement | BlockKernel


@dataclass(frozen=True)
class GpuProgram:
    """The host program (loops and launches in order) and its kernels; ``tree``: the schedule
    tree mapped, with the kernels and their block and thread coordinates as marks (see the
    module docstring), which :func:`~polyopt.analysis.verify.verify` checks; ``host_scalars``:
    the local scalars the host program computes (:mod:`polyopt.codegen.gpu_host`)."""

    scop: Scop
    host: tuple[HostStep, ...]
    kernels: tuple["Kernel | BlockKernel", ...]
    tree: isl.Schedule
    host_scalars: tuple[str, ...] = ()

    def pretty(self) -> str:
        """The mapped schedule tree, one node per line (marks included)."""
        from polyopt.transform.schedule import format_tree
        return format_tree(self.tree)


def kernels_in(steps) -> list["Kernel | BlockKernel"]:
    """The kernels of a host program (or the phases of a one-block kernel's steps), in
    launch-site order."""
    found = []
    for step in steps:
        if isinstance(step, HostLoop):
            found.extend(kernels_in(step.body))
        elif isinstance(step, (Kernel, BlockKernel)):
            found.append(step)
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
    """The host program of schedule ``tree``; kernels are named ``{name}_k0``, ``_k1``, ...
    (launch-site order); its ``tree`` is ``tree`` as mapped (see the module docstring).

    The host scalars (:func:`~polyopt.codegen.gpu_host.host_scalars`) are those whose every
    writer the walk placed on the host: a scalar with a writer inside a kernel is dropped and
    the tree mapped again (the scalars only shrink, so this ends). Then each statement of a
    single instance launched alone is merged into a neighbouring kernel where that is legal
    (:func:`_single_instance_merged`), the tree mapped again after each merge."""
    check_user_names(scop)
    tree = tree.map_schedule_node_bottom_up(_without_ast_options)
    program = _mapped(scop, tree, name)
    while True:  # each merge leaves one kernel fewer
        merged = _single_instance_merged(scop, tree, name, program)
        if merged is None:
            return program
        tree, program = merged


def _mapped(scop: Scop, tree: isl.Schedule, name: str) -> GpuProgram:
    """The host program of ``tree`` as :func:`map_to_gpu` maps it, before any single-instance
    statement is merged into a neighbouring kernel."""
    by_array = writers(scop)
    scalars = host_scalars(scop)
    while True:
        host, root = _Mapper(scop, name, scalars).steps(tree.get_root(), ())
        on_host = {step.statement for step in host_statements_in(host)}
        kept = host_scalars(scop, frozenset(x for x in scalars
                                            if all(s.name in on_host for s in by_array.get(x, ()))))
        if kept == scalars:
            return GpuProgram(scop, tuple(host), tuple(kernels_in(host)), root.get_schedule(),
                              tuple(sorted(scalars)))
        scalars = kept


def _single_instance_merged(scop: Scop, tree: isl.Schedule, name: str, program: GpuProgram
                            ) -> tuple[isl.Schedule, GpuProgram] | None:
    """(tree, program) with one statement of a single instance, launched once as a one-thread
    kernel of its own, merged into the kernel launched just before it (it runs after that
    kernel's instances at the kernel's first point) or else just after it (before them); None
    if there is none to merge. Only a kernel whose threads run no loop takes it: one whose threads
    loop may be register-tiled and stage its reads in shared memory, which a statement beside
    its loops would prevent (its guard no longer convex, its body no longer the loops alone),
    and a launch saved is not worth that. A merge is kept only if the mapping of the merged tree
    passes the verifier and has exactly that one kernel fewer, so each merge saves a launch and
    never changes the rest of the mapping (correlation's ``corr[M-1][M-1] = 1``)."""
    steps = program.host
    one_thread = sum(not kernel.coords for kernel in program.kernels)
    for at, step in enumerate(steps):
        if not _lone_instance(scop, step):
            continue
        for other, after in ((at - 1, True), (at + 1, False)):
            if not (0 <= other < len(steps) and isinstance(steps[other], Kernel) and steps[other].coords
                    and not has_loop(steps[other].body)):
                continue
            merged = _merged_tree(scop, tree, next(iter(step.statements)), steps[other], after)
            if merged is None:
                continue
            mapped = _mapped(scop, merged, name)
            if len(mapped.kernels) != len(program.kernels) - 1 or \
                    sum(not kernel.coords for kernel in mapped.kernels) != one_thread - 1:
                continue
            try:
                verify(scop, mapped.tree)
            except IllegalScheduleError:
                continue
            return merged, mapped
    return None


def _lone_instance(scop: Scop, step: HostStep) -> bool:
    """Whether ``step`` is a one-thread kernel launched once (outside host loops) that runs one
    statement's single instance, no loop and no sum."""
    if not isinstance(step, Kernel) or step.coords or step.host_vars or step.sums or step.memory \
            or len(step.statements) != 1 or has_loop(step.body):
        return False
    single = scop.statement(next(iter(step.statements))).domain
    return single.lexmin().is_equal(single)


def _merged_tree(scop: Scop, tree: isl.Schedule, statement: str, kernel: Kernel, after: bool
                 ) -> isl.Schedule | None:
    """``tree`` with the filter of ``statement`` (a child of an ordered sequence) merged into
    the adjacent filter holding exactly the statements of ``kernel``: the bands at the top of
    that filter's subtree that hold the kernel's coordinates get ``statement``'s instance at
    their first point (the lexicographic minimum of their values, or 0 where the kernel has no
    instance), and below them the statement runs after (``after``) or before the rest. None
    where the tree has no such pair of filters or the subtree does not start with those bands
    (under ``gpu_block``/``gpu_thread`` marks where the schedule gives the coordinates)."""
    domain, root = N.from_isl(tree, scop)
    for path, node in N.walk(root):
        if not isinstance(node, N.Sequence) or not node.ordered:
            continue
        names = [set(tuple_names(f.domain.intersect(domain))) for f in node.children]
        if {statement} not in names:
            continue
        at = names.index({statement})
        other = at - 1 if after else at + 1
        if not (0 <= other < len(names) and names[other] == set(kernel.statements)):
            return None
        lone, host = node.children[at], node.children[other]
        chain, below, members = [], host.child, 0  # (coordinates the schedule gives: under marks)
        while members < len(kernel.coords):
            if isinstance(below, N.Band):
                members += len(below.members)
            elif not (isinstance(below, N.Mark) and below.name in (GPU_BLOCK_MARK, GPU_THREAD_MARK)):
                return None
            chain.append(below)
            below = below.child
        bands = [b for b in chain if isinstance(b, N.Band)]
        values = _first_point(lone.domain.intersect(domain), host.domain.intersect(domain),
                              [m for b in bands for m in b.members])
        inner = (N.Filter(host.domain, below), N.Filter(lone.domain, N.Leaf()))
        merged: N.Node = N.Sequence(inner if after else inner[::-1])
        for part in reversed(chain):  # (the values of the innermost band's members are last)
            if isinstance(part, N.Mark):
                merged = replace(part, child=merged)
                continue
            values, own = values[:-len(part.members)], values[-len(part.members):]
            merged = replace(part, members=tuple(m.union_add(v) for m, v in zip(part.members, own)),
                             child=merged)
        first = min(at, other)
        kids = node.children[:first] + (N.Filter(lone.domain.union(host.domain), merged),) \
            + node.children[first + 2:]
        return N.to_isl(domain, N.replace_at(root, path, replace(node, children=kids)))
    return None


def _first_point(lone: isl.UnionSet, others: isl.UnionSet, members: list[isl.UnionPwAff]
                 ) -> list[isl.UnionPwAff]:
    """Per member, the value it gives the instance of ``lone`` (one statement): the
    lexicographic minimum of the members' values over ``others``, or 0 where ``others`` is
    empty."""
    point_of = isl.Set.from_union_set(lone)
    image = _image(others, *members)
    image = image.align_params(point_of.get_space())
    point_of = point_of.align_params(image.get_space())
    first = isl.Map.from_domain_and_range(point_of, image).lexmin()
    zero = isl.Set.universe(image.get_space())
    for d in range(len(members)):
        zero = zero.fix_val(isl.dim_type.set, d, isl.Val(0))
    rest = isl.Map.from_domain_and_range(point_of.subtract(first.domain()), zero)
    value = isl.PwMultiAff.from_map(first.union(rest))
    return [isl.UnionPwAff.from_pw_aff(value.get_pw_aff(d).coalesce()) for d in range(len(members))]


def host_statements_in(steps) -> list[HostStatement]:
    """The statements a host program runs itself, in program order."""
    found = []
    for step in steps:
        if isinstance(step, HostLoop):
            found.extend(host_statements_in(step.body))
        elif isinstance(step, HostStatement):
            found.append(step)
    return found


def _without_ast_options(node: isl.ScheduleNode) -> isl.ScheduleNode:
    """A band without the CPU's AST build options (a register tile's isolated part and unrolled
    loop types): the GPU program builds its loops itself, and options that refer to outer
    schedule dimensions anchor the subtree, which keeps the mapping from moving its bands."""
    if node.get_type() != isl.schedule_node_type.band:
        return node
    node = node.band_set_ast_build_options(isl.UnionSet.empty(node.band_get_ast_build_options().get_space()))
    for k in range(node.band_n_member()):
        node = node.band_member_set_ast_loop_type(k, isl.ast_loop_type.default)
    return node


def kernel_mark(name: str) -> isl.Id:
    """The id of the mark above kernel ``name``'s subtree in a mapped tree."""
    return isl.Id(f"{GPU_KERNEL_MARK} {name}")


def coordinates_below(mark: isl.ScheduleNode) -> tuple[list[isl.UnionPwAff], isl.ScheduleNode]:
    """The coordinate members of the kernel under ``mark`` (one band each under gpu_block /
    gpu_thread marks, outermost first) and the node below the last of them."""
    members, rest = [], mark.child(0)
    while _is_coordinate_mark(rest):
        while _is_coordinate_mark(rest):
            rest = rest.child(0)
        members.append(rest.band_get_partial_schedule().get_at(0))
        rest = rest.child(0)
    return members, rest


def _holds_given_coordinates(node: isl.ScheduleNode) -> bool:
    """Whether the subtree below ``node`` has coordinates given by the schedule: the bands
    around them are then host loops, whatever their parallelism."""
    found = []

    def look(n: isl.ScheduleNode) -> bool:
        if _is_coordinate_mark(n):
            found.append(n)
        return not found

    node.foreach_descendant_top_down(look)
    return bool(found)


def sum_statements(node: isl.ScheduleNode) -> set[str]:
    """The statements under ``gpu_reduce`` marks in the subtree of ``node``."""
    found: set[str] = set()

    def look(n: isl.ScheduleNode) -> bool:
        if n.get_type() == isl.schedule_node_type.mark and n.mark_get_id().get_name() == GPU_REDUCE_MARK:
            found.update(tuple_names(n.get_domain()))
        return True

    node.foreach_descendant_top_down(look)
    return found


def _is_coordinate_mark(node: isl.ScheduleNode) -> bool:
    return (node.get_type() == isl.schedule_node_type.mark
            and node.mark_get_id().get_name() in (GPU_BLOCK_MARK, GPU_THREAD_MARK))


class _Mapper:
    """The walk over the tree. Each step takes a node of the tree being mapped and returns, with
    its host steps, the node at the same position of the tree as rewritten so far (kernel marks
    and coordinate bands inserted, host bands split), so the walk goes on in the rewritten tree;
    kernels are numbered in walk order, which is launch-site order."""

    def __init__(self, scop: Scop, name: str, scalars: frozenset[str] = frozenset()):
        self.scop = scop
        self.name = name
        self.host_scalars = scalars
        self.numbered = 0
        self.block: str | None = None  # the BlockKernel being mapped, if any
        self.phase = 0
        self.placement: tuple[tuple[str, str], ...] = ()
        self.dependences = dependences(scop)
        self.deps = self.dependences.all
        self.prefix = iterator_prefix(scop)

    # ----- the walk over the tree ------------------------------------------------------------
    def steps(self, node: isl.ScheduleNode, host: tuple) -> tuple[list[HostStep], isl.ScheduleNode]:
        kind = node.get_type()
        if kind != isl.schedule_node_type.domain and node.get_domain().is_empty():
            return [], node
        placement = memory_placement(node.mark_get_id().get_name()) \
            if kind == isl.schedule_node_type.mark else None
        if placement is not None:  # where the kernel below keeps its arrays (Schedule.gpu_promote)
            self.placement = tuple(sorted(placement.items()))
            found, child = self.steps(node.child(0), host)
            self.placement = ()
            return found, child.parent()
        if _is_coordinate_mark(node):  # coordinates the schedule gives (Schedule.gpu_map)
            top = self.mark_sums(node.insert_mark(kernel_mark(f"{self.name}_k{self.numbered}")))
            self.numbered += 1
            return [self.kernel_of(top, top.mark_get_id().get_name().split(" ", 1)[1], host)], top
        if kind in (isl.schedule_node_type.domain, isl.schedule_node_type.filter,
                    isl.schedule_node_type.mark):
            found, child = self.steps(node.child(0), host)
            return found, child.parent()
        if kind in (isl.schedule_node_type.sequence, isl.schedule_node_type.set):
            found, original, numbered, per_child = [], node, self.numbering(), []
            for k in range(node.n_children()):
                more, child = self.steps(node.child(k), host)
                found += more
                per_child.append(more)
                node = child.parent()
            if kind != isl.schedule_node_type.sequence or self.block is not None:
                return found, node  # (a kernel that merges holds no coordinates the schedule gives)
            if self.merges_into_one_block(found):
                self.numbered, self.phase = numbered
                return self.one_block(original, host)
            run = self.one_block_run(per_child)
            if run is not None:  # those children under one filter, which then merge
                self.numbered, self.phase = numbered
                return self.steps(_grouped(original, *run), host)
            return found, node
        if kind == isl.schedule_node_type.leaf:
            return self.host_statement(node, host) or self.kernel(node, 0, host)
        if kind != isl.schedule_node_type.band:
            raise CodegenError(f"CUDA mapping: unsupported schedule tree node {kind}")
        parallel = 0 if _holds_given_coordinates(node) else self.parallel_members(node)
        if parallel:
            return self.kernel(node, parallel, host)
        # the outer member is sequential: a host loop, if there is parallelism below it
        n = node.band_n_member()
        member = node.band_get_partial_schedule().get_at(0)
        inner = node.band_split(1).child(0) if n > 1 else node.child(0)
        var = f"_h{len(host)}"
        numbered = self.numbering()
        body, inner = self.steps(inner, host + ((member, var),))
        parallel_work = _has_parallel_work(body)
        if self.block is None and parallel_work and _runs_serially(body) and self.fits_one_block(body) \
                and not _holds_given_coordinates(node):
            self.numbered, self.phase = numbered
            return self.one_block(node, host)
        if not any(k.coords for k in kernels_in(body)) and not (self.block is not None and parallel_work):
            self.numbered, self.phase = numbered  # one sequential kernel (or phase) instead
            return self.kernel(node, 0, host)
        values = _image(self.restrict(node.get_domain(), host), member)
        lower, upper = self.bounds(values, 0)
        return [HostLoop(var, lower, upper, tuple(body))], inner.parent()

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

    def host_statement(self, leaf: isl.ScheduleNode, host: tuple
                       ) -> tuple[list[HostStep], isl.ScheduleNode] | None:
        """The leaf's statement as a :class:`HostStatement` under a ``gpu_host`` mark, if it
        writes a host scalar and runs once per iteration of the host loops around it; else
        None."""
        domain = self.restrict(leaf.get_domain(), host)
        names = tuple_names(domain)
        if len(names) != 1 or not self.host_scalars or self.block is not None:
            return None
        stmt = self.scop.statement(names[0])
        single = isl.Set.from_union_set(domain)
        if stmt.writes[0].array not in self.host_scalars or not single.lexmin().is_equal(single):
            return None
        mark = leaf.insert_mark(isl.Id(f"{GPU_HOST_MARK} {stmt.name}"))
        body = self.loop_ast(mark.child(0).get_subtree_schedule_union_map(), domain, None)
        return [HostStatement(stmt.name, body)], mark

    # ----- one-block kernels -------------------------------------------------------------------
    def fits_one_block(self, steps) -> bool:
        """Whether ``steps`` (a loop's body, or a sequence's steps) can run in one thread block:
        no host statement, every kernel at most one-dimensional work (no coordinate, or one
        whose threads run no loop), with no memory placement, and no local scalar written where
        threads run at once (the block's scalars live in shared memory)."""
        for step in steps:
            if isinstance(step, HostStatement):
                return False
            if isinstance(step, HostLoop) and not self.fits_one_block(step.body):
                return False
            if isinstance(step, Kernel) and (step.memory or len(step.coords) > 1 or step.coords and (
                    has_loop(step.body) or self.writes_scalars(step.statements))):
                return False
        return True

    def writes_scalars(self, statements) -> bool:
        """Whether one of the named statements writes a local scalar."""
        return any(self.scop.arrays[ref.array].local
                   for name in statements for ref in self.scop.statement(name).writes)

    def merges_into_one_block(self, steps: list[HostStep]) -> bool:
        """Whether the children of a sequence, mapped to ``steps``, become one
        :class:`BlockKernel`: at least two, each a one-block kernel or a kernel without
        coordinates (one thread, or one warp for a split sum: merged, none is left), one of
        them with parallel work (a one-block kernel, or sums the block's threads split)."""
        return (len(steps) > 1 and all(self.merges(s) for s in steps)
                and any(isinstance(s, BlockKernel) or s.sums for s in steps))

    def merges(self, step: HostStep) -> bool:
        """Whether ``step`` may be part of a sequence merged into one block: a one-block kernel,
        or a kernel without coordinates that runs no loop but its sums (a serial loop nest
        stays a kernel of its own, not hidden in a block)."""
        return isinstance(step, BlockKernel) or (
            isinstance(step, Kernel) and not step.coords and self.fits_one_block([step])
            and (bool(step.sums) or not has_loop(step.body)))

    def one_block_run(self, per_child: list[list[HostStep]]) -> tuple[int, int] | None:
        """The first run of adjacent children of a sequence (their steps ``per_child``) that
        :meth:`merges_into_one_block` would merge, as (first, last) child positions; None if
        there is none (a run is at least two children, each one step)."""
        start = 0
        for end in range(len(per_child) + 1):
            if end < len(per_child) and len(per_child[end]) == 1 and self.merges(per_child[end][0]):
                continue
            run = [steps[0] for steps in per_child[start:end]]
            if self.merges_into_one_block(run):
                return start, end - 1
            start = end + 1
        return None

    def one_block(self, node: isl.ScheduleNode, host: tuple) -> tuple[list[HostStep], isl.ScheduleNode]:
        """The subtree of ``node`` mapped again as one :class:`BlockKernel`: its kernels become
        phases (``gpu_phase`` marks, coordinates under ``gpu_thread`` marks alone), its host
        loops loops of the kernel, under the marks ``gpu_kernel <name>`` and ``gpu_one_block``."""
        name = self.next_name()
        self.block, self.phase = name, 0
        try:
            steps, top = self.steps(node, host)
        finally:
            self.block = None
        top = top.insert_mark(isl.Id(GPU_ONE_BLOCK_MARK)).insert_mark(kernel_mark(name))
        statements = frozenset(s.get_tuple_name() for s in _sets(top.get_domain()))
        scalars = sorted({x for k in kernels_in(steps) for x in k.host_scalars})
        return [BlockKernel(name, tuple(steps), tuple(var for _, var in host), statements,
                            tuple(scalars))], top

    # ----- kernels ---------------------------------------------------------------------------
    def kernel(self, node: isl.ScheduleNode, n_coords: int, host: tuple
               ) -> tuple[list[HostStep], isl.ScheduleNode]:
        """The kernel of ``node`` with ``n_coords`` (leading parallel members) or no thread
        coordinates, and the kernel's mark (at the position of ``node``) in the rewritten tree:
        the kernel is read back from what that mark holds."""
        name = self.next_name()
        top = node
        if n_coords:
            members, rest, bands = self.coordinate_members(node, n_coords)
            order = self.coalescing_order(members)
            top = rest
            for _ in range(bands):  # the bands holding the coordinates, the rest split off
                top = top.parent().delete()
            for k in reversed(order):  # one band per coordinate, outermost first
                top = top.insert_partial_schedule(isl.MultiUnionPwAff.from_union_pw_aff(members[k]))
                top = top.band_member_set_coincident(0, 1)
                top = top.insert_mark(isl.Id(GPU_THREAD_MARK))
                if self.block is None:  # (a phase's threads are those of one block)
                    top = top.insert_mark(isl.Id(GPU_BLOCK_MARK))
        mark = kernel_mark(name) if self.block is None else isl.Id(f"{GPU_PHASE_MARK} {name}")
        top = self.mark_sums(top.insert_mark(mark))
        return [self.kernel_of(top, name, host)], top

    def numbering(self) -> tuple[int, int]:
        """Where the numbering of kernels and phases stands (to restore it when the walk maps a
        subtree again)."""
        return self.numbered, self.phase

    def next_name(self) -> str:
        """The name of the next kernel, or of the next phase of the block kernel being mapped."""
        if self.block is not None:
            self.phase += 1
            return f"{self.block}_p{self.phase - 1}"
        self.numbered += 1
        return f"{self.name}_k{self.numbered - 1}"

    def kernel_of(self, mark: isl.ScheduleNode, name: str, host: tuple) -> Kernel:
        """Kernel ``name`` of the subtree under its ``mark``: one thread coordinate per band
        under a ``gpu_block``/``gpu_thread`` mark, each thread running the rest."""
        domain = self.restrict(mark.get_domain(), host)
        host_vars = tuple(var for _, var in host)
        statements = frozenset(s.get_tuple_name() for s in _sets(domain))
        members, rest = coordinates_below(mark)
        sums = frozenset(sum_statements(rest))
        scalars = tuple(sorted(reads_of(self.scop, statements) & self.host_scalars))
        if not members:
            body = self.loop_ast(rest.get_subtree_schedule_union_map(), domain, None)
            true = E.Const(1, boolean)
            return Kernel(name, (), (), (), true, body, host_vars, statements, sums=sums,
                          memory=self.placement, host_scalars=scalars)
        n_coords = len(members)
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
                      valid.n_basic_set() == 1, sums, self.placement, scalars)

    def mark_sums(self, mark: isl.ScheduleNode) -> isl.ScheduleNode:
        """Kernel ``mark`` with a ``gpu_reduce`` mark above each band of its per-thread subtree
        (the outermost bands below its coordinates) that holds a sum and whose loop carries only
        dependences between sums into one element (:mod:`polyopt.analysis.reductions`); kernels
        of at most one coordinate only (matrix-vector products and lone reductions, whose
        coordinates give too few threads or read rows with a stride)."""
        members, rest = coordinates_below(mark)
        if len(members) > 1:
            return mark
        up = rest.get_tree_depth() - mark.get_tree_depth()
        node = self._mark_sum_bands(rest)
        for _ in range(up):
            node = node.parent()
        return node

    def _mark_sum_bands(self, node: isl.ScheduleNode) -> isl.ScheduleNode:
        kind = node.get_type()
        if kind == isl.schedule_node_type.band:
            return node.insert_mark(isl.Id(GPU_REDUCE_MARK)) if self.is_sum_loop(node) else node
        for k in range(node.n_children()):
            node = self._mark_sum_bands(node.child(k)).parent()
        return node

    def is_sum_loop(self, band: isl.ScheduleNode) -> bool:
        """Whether the outermost member of ``band`` runs a sum and carries no other dependence."""
        names = set(tuple_names(band.get_domain()))
        if not any(accumulated_array(self.scop.statement(name)) for name in names):
            return False
        member = band.band_get_partial_schedule().get_at(0)
        carried = carried_dependences(self.scop, self.dependences, band.get_domain(),
                                      band.get_prefix_schedule_union_map(), member)
        return carried.subtract(same_element_updates(self.scop, names)).is_empty()

    def coordinate_members(self, node: isl.ScheduleNode, n_parallel: int
                           ) -> tuple[list[isl.UnionPwAff], isl.ScheduleNode, int]:
        """The parallel members of band ``node`` (``n_parallel`` leading ones) and, while the
        band is wholly parallel and directly holds another band, that band's leading parallel
        members too (up to :data:`MAX_GRID_DIMS`); the node below them (the bands split so that
        it holds the other members), and how many bands above it hold the members."""
        members: list[isl.UnionPwAff] = []
        bands = 1
        while True:
            partial = node.band_get_partial_schedule()
            members += [partial.get_at(k) for k in range(n_parallel)]
            if n_parallel < node.band_n_member():
                return members, node.band_split(n_parallel).child(0), bands
            child = node.child(0)
            room = MAX_GRID_DIMS - len(members)
            if room == 0 or child.get_type() != isl.schedule_node_type.band:
                return members, child, bands
            n_parallel = min(self.parallel_members(child), room)
            if n_parallel == 0:
                return members, child, bands
            node = child
            bands += 1

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


def _grouped(sequence: isl.ScheduleNode, first: int, last: int) -> isl.ScheduleNode:
    """``sequence`` with its children ``first..last`` under one filter above a sequence of them,
    the others as they were (the same order of instances): isl's ``order_before`` splits off
    the children before the run and then the run (below a temporary mark, so isl puts the new
    sequence there rather than into a sequence above), the other pieces spliced back."""
    n = sequence.n_children()
    filters = [sequence.child(k).filter_get_filter() for k in range(n)]

    def union(positions) -> isl.UnionSet:
        return reduce(lambda a, b: a.union(b), (filters[k] for k in positions))

    mark = sequence.insert_mark(isl.Id("gpu_group"))
    depth = mark.get_tree_depth()
    node = mark.child(0)
    if first > 0:
        node = node.order_before(union(range(first)))
    if last < n - 1:
        node = node.order_before(union(range(first, last + 1)))
    top = node.ancestor(node.get_tree_depth() - depth - 1)
    group = 1 if first > 0 else 0
    for k in reversed(range(top.n_children())):
        if k != group and top.child(k).child(0).get_type() == isl.schedule_node_type.sequence:
            top = top.sequence_splice_child(k)
    return top.parent().delete()


def _has_parallel_work(steps) -> bool:
    """Whether ``steps`` have work for many threads: a kernel or phase with coordinates or sums
    (split over threads), or a one-block kernel."""
    return any(k.coords or isinstance(k, BlockKernel) or k.sums for k in kernels_in(steps))


def _runs_serially(steps) -> bool:
    """Whether ``steps`` launch a kernel without coordinates (one thread) or of one block."""
    return any(not k.coords for k in kernels_in(steps))


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
    return coalesced(isl.Set.from_union_set(image))


def _as_params(values: isl.Set, names: tuple[str, ...]) -> isl.Set:
    """``values`` (an n-dimensional set) as a parameter set over ``names``."""
    n = values.dim(isl.dim_type.set)
    text = ", ".join(f"x{k}" for k in range(n))
    equal = isl.Set(f"[{', '.join(names)}] -> {{ [{text}] : "
                    + " and ".join(f"x{k} = {names[k]}" for k in range(n)) + " }")
    values = values.align_params(equal.get_space())
    return coalesced(values.intersect(equal.align_params(values.get_space())).params())
