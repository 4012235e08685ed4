"""The :class:`Schedule` value: an isl schedule tree for a Scop with the trace of how it was made,
and read-only views of it (indented text, shape statistics)."""
from __future__ import annotations

from dataclasses import dataclass, field

import islpy as isl

from polyopt.analysis.scop import Scop


@dataclass(frozen=True, eq=False)
class Schedule:
    """An isl schedule tree for a Scop, with the algorithm and options that produced it.

    ``trace`` lists the steps applied (algorithm, then transformations) so that a schedule can
    be explained and replayed; after the algorithm come the fallbacks it took, one line each
    (``"pluto: no legal hyperplane for S0, S1; ... dimension 0 of the original schedule"``), and
    the dependences it was given that are memory-based approximations (``"dependences: RAW on
    A: memory-based ..."``, see :mod:`polyopt.analysis.deps`).
    """

    scop: Scop
    tree: isl.Schedule
    algorithm: str
    options: dict = field(default_factory=dict)
    trace: tuple[str, ...] = ()

    @property
    def map(self) -> isl.UnionMap:
        """The flat schedule: statement instances -> time vectors (lexicographic order)."""
        tree = self.tree  # (a tree's map is not restricted to the tree's own domain)
        return tree.get_map().intersect_domain(tree.get_domain()).intersect_domain(self.scop.domain)

    def loops_c(self) -> str:
        """The loop structure as isl prints it (statement calls only), for a quick look."""
        build = isl.AstBuild.from_context(self.scop.context)
        return build.node_from_schedule(self.tree).to_C_str()

    def __str__(self) -> str:
        return str(self.tree)

    def pretty(self) -> str:
        """The schedule tree, one node per line, indented by depth."""
        return format_tree(self.tree)


def format_tree(tree: isl.Schedule) -> str:
    """Indented text of a schedule tree (band / sequence / filter / ... nodes)."""
    lines: list[str] = []

    def visit(node: isl.ScheduleNode, depth: int) -> None:
        kind = node.get_type()
        pad = "  " * depth
        if kind == isl.schedule_node_type.band:
            flags = []
            if node.band_get_permutable():
                flags.append("permutable")
            coincident = [node.band_member_get_coincident(k) for k in range(node.band_n_member())]
            if any(coincident):
                flags.append("coincident=" + "".join("1" if c else "0" for c in coincident))
            lines.append(f"{pad}band {node.band_get_partial_schedule()}"
                         + (f"  [{', '.join(flags)}]" if flags else ""))
        elif kind == isl.schedule_node_type.filter:
            lines.append(f"{pad}filter {node.filter_get_filter()}")
        elif kind == isl.schedule_node_type.domain:
            lines.append(f"{pad}domain {node.domain_get_domain()}")
        elif kind == isl.schedule_node_type.mark:
            lines.append(f"{pad}mark {node.mark_get_id().get_name()}")
        elif kind != isl.schedule_node_type.leaf:
            lines.append(f"{pad}{str(kind).split('.')[-1]}")
        for k in range(node.n_children()):
            visit(node.child(k), depth + (0 if kind == isl.schedule_node_type.leaf else 1))

    visit(tree.get_root(), 0)
    return "\n".join(lines)



def tree_statistics(tree: isl.Schedule) -> dict[str, int]:
    """Shape of a schedule tree, for comparing schedulers.

    ``bands``: band nodes; ``permutable_depth``: most members of one permutable band (the tilable
    depth); ``parallel_loops``: coincident members over all bands; ``sequential_depth``: most
    non-coincident band members on one root-to-leaf path (the latency dimensions).
    """
    stats = {"bands": 0, "permutable_depth": 0, "parallel_loops": 0, "sequential_depth": 0}

    def visit(node: isl.ScheduleNode, sequential: int) -> None:
        if node.get_type() == isl.schedule_node_type.band:
            n = node.band_n_member()
            coincident = [node.band_member_get_coincident(k) for k in range(n)]
            stats["bands"] += 1
            stats["parallel_loops"] += sum(coincident)
            if node.band_get_permutable() or n == 1:
                stats["permutable_depth"] = max(stats["permutable_depth"], n)
            sequential += n - sum(coincident)
        if node.n_children() == 0:
            stats["sequential_depth"] = max(stats["sequential_depth"], sequential)
        for k in range(node.n_children()):
            visit(node.child(k), sequential)

    visit(tree.get_root(), 0)
    return stats
