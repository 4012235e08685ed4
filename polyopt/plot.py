"""Pictures of iteration domains, dependences, tilings, wavefronts and schedule trees.

matplotlib is an optional dependency (``pip install polyopt[plot]``); it is imported when a
picture is drawn, never at ``import polyopt``. Every function draws into ``ax`` (a new figure's
Axes when None), returns the Axes (``ax.figure`` is its Figure) and never calls ``plt.show()``,
so the pictures show up in Jupyter and save with ``ax.figure.savefig("x.png")``::

    import polyopt as po
    k = po.suite.get("jacobi-1d").kernel
    po.plot.domain(k, "S0", sizes={"N": 10, "TSTEPS": 6}, dims=("i", "t"))
    s = po.schedule(k, "original").shift("i@S1", offset=1).fuse("i", "i@S1")
    s = s.skew("t", "i", factor=2).tile("t", "i", sizes=(4, 4))
    po.plot.domain(k, "S0", sizes={"N": 10, "TSTEPS": 6}, schedule=s, color_by="tile")
    po.plot.schedule_tree(s)

The returned Axes carries what was drawn as plain data in ``ax.polyopt`` (a dict: ``points``,
``arrows`` per kind, ``colors``: distinct colours of the points, ``parallel``: the parallel
loops, ``nodes`` for a tree), for tests and notebooks.
"""
from __future__ import annotations

import colorsys
import re
from typing import Any, Iterable, Mapping, Sequence

import islpy as isl

from polyopt.errors import PolyoptError
from polyopt.islutil import maps_of, param_point, tuple_names
from polyopt.transform import nodes as N
from polyopt.transform.marks import PARALLEL_MARK

__all__ = ["domain", "schedule_tree", "PlotError", "PlotUnavailableError", "MAX_POINTS"]

#: The most integer points (and the most dependence arrows) one picture draws.
MAX_POINTS = 20_000
KINDS = ("RAW", "WAR", "WAW")
KIND_COLORS = {"RAW": "#d62728", "WAR": "#1f77b4", "WAW": "#2ca02c"}
#: arrows of different kinds between the same two points are drawn side by side
_KIND_OFFSET = {"RAW": 0.0, "WAR": 0.07, "WAW": -0.07}
_INSTALL = "pip install polyopt[plot]"


class PlotError(PolyoptError, ValueError):
    """A picture that cannot be drawn as asked: an unknown statement or dimension, missing
    parameter values, too many points."""


class PlotUnavailableError(PolyoptError, ImportError):
    """matplotlib is not installed (``pip install polyopt[plot]``)."""


def _pyplot():
    try:
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise PlotUnavailableError(f"polyopt.plot draws with matplotlib, which is not installed: "
                                   f"{_INSTALL}") from exc
    return plt


# ----- inputs ------------------------------------------------------------------------------------

def _resolve(obj) -> tuple[Any, Any]:
    """(Scop, Schedule or None) of a Kernel, Scop, Schedule, suite entry or suite kernel name."""
    from polyopt.analysis.scop import Scop
    from polyopt.transform.schedule import Schedule
    if isinstance(obj, Schedule):
        return obj.scop, obj
    if isinstance(obj, Scop):
        return obj, None
    if isinstance(obj, str):
        from polyopt import suite
        if obj not in suite.names():
            raise PlotError(f"unknown suite kernel {obj!r}; choose from {', '.join(suite.names())}")
        return suite.get(obj).kernel.scop, None
    if hasattr(obj, "kernel") and hasattr(obj.kernel, "scop"):      # a suite Entry
        return obj.kernel.scop, None
    if hasattr(obj, "scop"):                                          # a Kernel
        return obj.scop, None
    raise PlotError(f"po.plot.domain takes a kernel, a Scop or a Schedule, not {type(obj).__name__}")


def _statement(scop, name: str | None):
    names = [s.name for s in scop.statements]
    if name is None:
        return scop.statements[0]
    if name not in names:
        raise PlotError(f"{scop.name} has no statement {name!r}; its statements: {', '.join(names)}")
    return scop.statement(name)


def _params(scop, sizes: Mapping[str, int] | None) -> dict[str, int]:
    sizes = dict(sizes or {})
    unknown = [p for p in sizes if p not in scop.params]
    missing = [p for p in scop.params if p not in sizes]
    if unknown:
        raise PlotError(f"sizes: {scop.name} has no parameter {unknown[0]!r}; its parameters: "
                        f"{', '.join(scop.params) or '(none)'}")
    if missing:
        raise PlotError(f"sizes: give a value to every parameter of {scop.name}; missing "
                        f"{', '.join(missing)} (e.g. sizes={{{', '.join(repr(p) + ': 8' for p in scop.params)}}})")
    values = {p: int(sizes[p]) for p in scop.params}
    if scop.params and scop.context.intersect_params(param_point(scop.params, values)).is_empty():
        raise PlotError(f"sizes {values} are outside {scop.name}'s valid parameters: {scop.context}")
    return values


def _slice(stmt, values: dict[str, int], dims, fix) -> tuple[isl.Set, tuple[str, ...], dict[str, int]]:
    """The statement's points at the parameter values, the drawn dimensions fixed by ``fix`` (and
    the others at their smallest value): the set, the drawn dimensions, the fixed values."""
    iterators = tuple(stmt.iterators)
    domain = stmt.domain
    if values:
        domain = domain.intersect_params(param_point(tuple(values), values))
    if dims is None:
        dims = iterators[:2]
    dims = tuple(dims)
    bad = [d for d in dims if d not in iterators]
    if bad:
        raise PlotError(f"dims: statement {stmt.name} has no dimension {bad[0]!r}; its dimensions: "
                        f"{', '.join(iterators) or '(none: one instance)'}")
    if len(set(dims)) != len(dims) or len(dims) > 2 or (len(dims) < min(2, len(iterators))):
        raise PlotError(f"dims: name two different dimensions of {stmt.name} ({', '.join(iterators)}), "
                        f"not {dims!r}")
    fix = dict(fix or {})
    for name in fix:
        if name not in iterators:
            raise PlotError(f"fix: statement {stmt.name} has no dimension {name!r}; its dimensions: "
                            f"{', '.join(iterators)}")
        if name in dims:
            raise PlotError(f"fix: {name!r} is drawn (dims={dims!r}); fix only the other dimensions")
    fixed: dict[str, int] = {}
    for pos, name in enumerate(iterators):
        if name in dims:
            continue
        if name in fix:
            value = int(fix[name])
        else:
            if domain.is_empty():
                break
            value = domain.dim_min_val(pos).to_python()
        domain = domain.fix_val(isl.dim_type.set, pos, isl.Val(value))
        fixed[name] = value
    return domain, dims, fixed


def _count(points: isl.Set, what: str) -> int:
    count = points.count_val()
    if not count.is_int():
        raise PlotError(f"the {what} to draw are not a bounded set of integer points")
    count = count.to_python()
    if count > MAX_POINTS:
        raise PlotError(f"{count} {what} to draw, more than {MAX_POINTS}: choose smaller sizes or "
                        f"draw a slice (dims=..., fix=...)")
    return count


def _points(points: isl.Set) -> list[tuple[int, ...]]:
    found: list[tuple[int, ...]] = []
    n = points.dim(isl.dim_type.set)

    def take(point: isl.Point) -> None:
        found.append(tuple(point.get_coordinate_val(isl.dim_type.set, k).to_python() for k in range(n)))

    points.foreach_point(take)
    return sorted(found)


def _pairs(relation: isl.Map) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    n_in = relation.dim(isl.dim_type.in_)
    return [(p[:n_in], p[n_in:]) for p in _points(relation.wrap())]


def _on(union: isl.UnionMap, name: str) -> isl.Map | None:
    """The part of ``union`` from statement ``name`` to itself."""
    for m in maps_of(union):
        if m.get_tuple_name(isl.dim_type.in_) == name and m.get_tuple_name(isl.dim_type.out) == name:
            return m
    return None


# ----- schedules ---------------------------------------------------------------------------------

def _paths(root: N.Node, points: isl.UnionSet):
    """(bands on the path, marks directly above each band, instances) for every leaf reached by
    some of ``points``."""
    out = []

    def visit(node, bands, marks, domain):
        if isinstance(node, N.Filter):
            domain = domain.intersect(node.domain)
            if domain.is_empty():
                return
        if isinstance(node, N.Mark):
            marks = marks + (node.name,)
        if isinstance(node, N.Band):
            bands = bands + ((node, marks),)
            marks = ()
        if isinstance(node, N.Leaf):
            out.append((bands, domain))
            return
        for child in N.children(node):
            visit(child, bands, marks, domain)

    visit(root, (), (), points)
    return out


def _band_values(band: N.Band, domain: isl.UnionSet, name: str) -> dict[tuple[int, ...], tuple[int, ...]]:
    """point -> the values of the band's members, for the instances of statement ``name``."""
    relation = isl.UnionMap.from_multi_union_pw_aff(band.partial()).intersect_domain(domain)
    values: dict[tuple[int, ...], tuple[int, ...]] = {}
    for m in maps_of(relation):
        if m.get_tuple_name(isl.dim_type.in_) == name:
            values.update(_pairs(m))
    return values


def _is_tile_band(band: N.Band) -> bool:
    """A band of tile loops made elsewhere (no ``_0`` names): floors or mods in its members and
    a band directly below."""
    return isinstance(band.child, N.Band) and all(
        re.search(r"\bmod\b|floor", str(m)) for m in band.members)


def _loops_at(schedule, name: str, points: isl.Set):
    """For each drawn point: the loops around it as (name, value, parallel, reason) lists."""
    per_point: dict[tuple[int, ...], list[tuple[str, int, bool, str, int]]] = {}
    for bands, domain in _paths(schedule.root, isl.UnionSet.from_set(points)):
        for b, (band, marks) in enumerate(bands):
            values = _band_values(band, domain, name)
            for point, vals in values.items():
                for k, (loop, value) in enumerate(zip(band.names, vals)):
                    reason = "coincident" if band.flag(k) else ""
                    if k == 0 and PARALLEL_MARK in marks:
                        reason = "marked parallel"
                    per_point.setdefault(point, []).append((loop, value, bool(reason), reason, b))
    return per_point


def _tile_key(loops, tile_names: set[str]) -> tuple[int, ...]:
    return tuple(value for loop, value, *_ in loops if loop in tile_names)


def _time_key(loops) -> tuple[int, ...]:
    """The values of the outermost band's members before its first parallel member (all its
    members when none is parallel): instances with equal keys run at the same time step."""
    key = []
    for loop, value, parallel, _, band in loops:
        if band != 0 or parallel:
            break
        key.append(value)
    return tuple(key)


def _distinct_colors(n: int, *, sequential: bool):
    """``n`` distinct RGBA colours: a viridis ramp (time steps), else hues spread by the golden
    ratio so that neighbours differ (tiles)."""
    if sequential:
        import matplotlib
        cmap = matplotlib.colormaps["viridis"]
        return [tuple(cmap(k / max(n - 1, 1))) for k in range(n)]
    colors = []
    for k in range(n):
        hue = (k * 0.618033988749895) % 1.0
        sat, val = (0.65, 0.95) if k % 2 == 0 else (0.85, 0.75)
        colors.append((*colorsys.hsv_to_rgb(hue, sat, val), 1.0))
    return colors


def _collinear(points: list[tuple[float, float]]) -> bool:
    (x0, y0), (x1, y1) = points[0], points[-1]
    return all((x1 - x0) * (y - y0) - (y1 - y0) * (x - x0) == 0 for x, y in points)


# ----- pictures ----------------------------------------------------------------------------------

def domain(kernel_or_scop_or_schedule, statement: str | None = None, *, sizes: Mapping[str, int],
           dims: Sequence[str] | None = None, fix: Mapping[str, int] | None = None, ax=None,
           dependences: bool = True, kinds: Iterable[str] = KINDS, schedule=None,
           color_by: str | None = None, indirect: bool = False):
    """Draw the integer points of ``statement``'s iteration domain (default: the first
    statement) at the parameter values ``sizes``, and its dependences as arrows.

    ``dims``: the two dimensions drawn, horizontal then vertical (default: the first two); the
    others are fixed by ``fix`` (default: their smallest value), so a deeper domain is drawn as
    a 2-D slice. A one-dimensional domain is drawn on a line, a statement without loops as one
    point. ``dependences``: draw the dependences between instances of the statement inside the
    drawn slice, one colour per kind (``kinds``: those drawn); ``indirect=True`` also draws, as
    dashed grey arrows, those through one instance of another statement (jacobi-1d's
    ``S0 -> S1 -> S0``; only the ``kinds`` drawn are composed).

    ``schedule`` (a :class:`~polyopt.Schedule` of the same kernel; the default when a Schedule
    is given as first argument): ``color_by="tile"`` colours the points by their tile (the
    values of the tile loops: loops named ``*_0`` by ``tile``/``split``, or the outer band of a
    two-level tiling made elsewhere); ``color_by="time"`` by their time step (the lexicographic
    rank of the outermost band's values before its first parallel loop: a wavefront's number);
    instances of one time step that lie on a line are joined by a dotted line (they run in
    parallel). The parallel loops around the statement are named under the picture.

    Refused with :class:`PlotError`: an unknown statement, parameter or dimension, missing
    parameter values, more than :data:`MAX_POINTS` points or arrows. Returns the Axes.
    """
    plt = _pyplot()
    scop, given = _resolve(kernel_or_scop_or_schedule)
    schedule = given if schedule is None else schedule
    stmt = _statement(scop, statement)
    kinds = tuple(kinds)
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        raise PlotError(f"kinds: unknown dependence kind {bad[0]!r}; choose from {', '.join(KINDS)}")
    if color_by not in (None, "tile", "time"):
        raise PlotError(f"color_by: {color_by!r} is not one of None, 'tile', 'time'")
    if color_by is not None and schedule is None:
        raise PlotError(f"color_by={color_by!r} needs a schedule (schedule=po.schedule(...))")
    if schedule is not None and schedule.scop is not scop and \
            [s.name for s in schedule.scop.statements] != [s.name for s in scop.statements]:
        raise PlotError(f"the schedule is one of {schedule.scop.name}, not of {scop.name}")
    values = _params(scop, sizes)
    points_set, dims, fixed = _slice(stmt, values, dims, fix)
    _count(points_set, f"points of {stmt.name}")
    points = _points(points_set)
    iterators = tuple(stmt.iterators)
    positions = [iterators.index(d) for d in dims]

    def xy(point):
        coords = [point[p] for p in positions] + [0, 0]
        return coords[0], coords[1]

    if ax is None:
        _, ax = plt.subplots(figsize=_figsize([xy(p) for p in points], legend=dependences))
    info: dict[str, Any] = {"points": len(points), "arrows": {}, "colors": 1, "parallel": [],
                            "statement": stmt.name, "dims": dims, "fixed": fixed}

    # ----- colours of the points
    colors = ["#444444"] * len(points)
    subtitle = ""
    seen: list[tuple[str, str]] = []
    if color_by is not None and points:
        loops = _loops_at(schedule, stmt.name, points_set)
        if color_by == "tile":
            tile_names = {loop for ls in loops.values() for loop, *_ in ls if re.search(r"_0$", loop)}
            if not tile_names:
                tile_names = {loop for bands, _ in _paths(schedule.root, isl.UnionSet.from_set(points_set))
                              for band, _ in bands if _is_tile_band(band) for loop in band.names}
            if not tile_names:
                raise PlotError(f"color_by='tile': the schedule has no tile loops around {stmt.name} "
                                f"(tile it first: s.tile(...))")
            keys = {p: _tile_key(loops[p], tile_names) for p in points}
            order = [ls for ls in loops.values()][0]
            shown = [loop for loop, *_ in order if loop in tile_names]
            subtitle = f"coloured by tile ({', '.join(shown)})"
        else:
            keys = {p: _time_key(loops[p]) for p in points}
            order = [ls for ls in loops.values()][0]
            shown = [loop for loop, _, _, _, band in order if band == 0][:len(next(iter(keys.values())))]
            subtitle = f"coloured by time step ({', '.join(shown) or 'one step: the outer loop is parallel'})"
        distinct = sorted(set(keys.values()))
        palette = _distinct_colors(len(distinct), sequential=color_by == "time")
        index = {key: k for k, key in enumerate(distinct)}
        colors = [palette[index[keys[p]]] for p in points]
        info["colors"] = len(distinct)
        info["keys"] = keys
        subtitle += f": {len(distinct)} {'tiles' if color_by == 'tile' else 'steps'}"
        if color_by == "time" and len(dims) == 2:
            groups: dict[tuple, list] = {}
            for p in points:
                groups.setdefault(keys[p], []).append(xy(p))
            for group in groups.values():
                group.sort()
                if len(group) > 1 and len(group) < len(points) and _collinear(group):
                    ax.plot([g[0] for g in group], [g[1] for g in group], ":", color="#999999",
                            linewidth=0.8, zorder=1)
    if schedule is not None and points:
        loops = _loops_at(schedule, stmt.name, points_set)
        for loop, _, parallel, reason, _ in next(iter(loops.values())):
            if parallel and loop not in [s for s, _ in seen]:
                seen.append((loop, reason))
        info["parallel"] = [loop for loop, _ in seen]

    # ----- the points
    xs = [xy(p)[0] for p in points]
    ys = [xy(p)[1] for p in points]
    size = max(8.0, min(60.0, 3000.0 / max(len(points), 1)))
    ax.scatter(xs, ys, c=colors, s=size, zorder=3, edgecolors="none")

    # ----- the dependences
    handles = []
    if dependences and points:
        from polyopt.analysis.deps import dependences as deps_of
        deps = deps_of(scop).by_kind()
        both = isl.Map.from_domain_and_range(points_set, points_set)
        drawn = 0
        for kind in kinds:
            rel = _on(deps[kind], stmt.name)
            pairs = []
            if rel is not None:
                rel = rel.intersect(both)
                drawn += _count(rel.wrap(), "dependence arrows") if not rel.is_empty() else 0
                if drawn > MAX_POINTS:
                    raise PlotError(f"more than {MAX_POINTS} dependence arrows to draw: choose smaller sizes")
                pairs = _pairs(rel) if not rel.is_empty() else []
            info["arrows"][kind] = len(pairs)
            if pairs:
                handles.append(_arrows(ax, [(xy(a), xy(b)) for a, b in pairs], KIND_COLORS[kind],
                                       _KIND_OFFSET[kind], f"{kind} ({len(pairs)})"))
        if indirect:
            pairs = _indirect(deps, kinds, stmt.name, points_set)
            info["arrows"]["indirect"] = len(pairs)
            if pairs:
                handles.append(_arrows(ax, [(xy(a), xy(b)) for a, b in pairs], "#777777", 0.0,
                                       f"through another statement ({len(pairs)})", dashed=True))
    if handles:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8,
                  frameon=False, title="dependences", title_fontsize=8)

    # ----- axes, title, notes
    ax.set_xlabel(dims[0] if dims else "")
    ax.set_ylabel(dims[1] if len(dims) > 1 else "")
    if len(dims) < 2:
        ax.set_yticks([])
    ax.set_aspect("equal", adjustable="box")
    ax.margins(0.08)
    from matplotlib.ticker import MaxNLocator
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    where = ", ".join(f"{p}={v}" for p, v in values.items())
    title = f"{scop.name}: {stmt.name}[{', '.join(iterators)}]" + (f" at {where}" if where else "")
    if fixed:
        title += "\nslice " + ", ".join(f"{d}={v}" for d, v in fixed.items())
    if subtitle:
        title += "\n" + subtitle
    ax.set_title(title, fontsize=9)
    if schedule is not None:
        text = ("parallel: " + ", ".join(f"{loop} ({why})" for loop, why in seen)) if points and seen \
            else "no parallel loop"
        ax.text(0.0, -0.12, text, transform=ax.transAxes, fontsize=8, va="top", color="#555555")
    ax.polyopt = info
    return ax


def _figsize(points, *, legend: bool) -> tuple[float, float]:
    """A figure size whose axes fit the points at one scale in x and y (about 7 x 5 inches)."""
    xs = [x for x, _ in points] or [0]
    ys = [y for _, y in points] or [0]
    width, height = max(xs) - min(xs) + 1.5, max(ys) - min(ys) + 1.5
    scale = min(7.0 / width, 5.0 / height, 0.7)
    return (max(3.0, width * scale) + (2.4 if legend else 0.6), max(2.0, height * scale) + 1.4)


def _arrows(ax, segments, color, offset, label, dashed=False):
    """One arrow per (source, sink) segment, shortened so that the points stay visible."""
    from matplotlib.collections import LineCollection
    from matplotlib.lines import Line2D
    import numpy as np
    starts = np.array([s for s, _ in segments], dtype=float)
    ends = np.array([e for _, e in segments], dtype=float)
    delta = ends - starts
    length = np.hypot(delta[:, 0], delta[:, 1])
    length[length == 0] = 1.0
    normal = np.stack([-delta[:, 1], delta[:, 0]], axis=1) / length[:, None]
    starts = starts + offset * normal
    ends = ends + offset * normal
    shrink = np.minimum(0.15, 0.3 * length)[:, None] * delta / length[:, None]
    starts, ends = starts + shrink, ends - shrink
    ax.add_collection(LineCollection(np.stack([starts, ends], axis=1), colors=color, linewidths=0.9,
                                     linestyles="--" if dashed else "-", zorder=2))
    # arrow heads: one marker per arrow, rotated along it
    angles = np.degrees(np.arctan2(ends[:, 1] - starts[:, 1], ends[:, 0] - starts[:, 0]))
    for angle in sorted(set(np.round(angles, 3))):
        sel = np.round(angles, 3) == angle
        ax.scatter(ends[sel, 0], ends[sel, 1], marker=(3, 0, angle - 90), s=14, color=color,
                   zorder=2, edgecolors="none")
    return Line2D([], [], color=color, linestyle="--" if dashed else "-", label=label)


def _indirect(deps, kinds, name: str, points: isl.Set):
    """Pairs of drawn instances linked through one instance of another statement."""
    union = isl.UnionMap.empty(points.get_space().params())
    for kind in kinds:
        union = union.union(deps[kind])
    drawn = isl.UnionSet.from_set(points)
    out_of = union.intersect_domain(drawn)
    into = union.intersect_range(drawn)
    through = isl.UnionMap.empty(union.get_space())
    for m in maps_of(out_of):
        if m.get_tuple_name(isl.dim_type.out) != name:
            through = through.union(isl.UnionMap.from_map(m))
    composed = through.apply_range(into)
    rel = _on(composed, name)
    if rel is None or rel.is_empty():
        return []
    _count(rel.wrap(), "indirect dependence arrows")
    return _pairs(rel)


# ----- schedule trees ----------------------------------------------------------------------------


def _label(node: N.Node) -> tuple[str, str]:
    """(text, kind) of one box."""
    if isinstance(node, N.Band):
        members = []
        for k, name in enumerate(node.names):
            members.append(name + (" \u2225" if node.flag(k) else ""))
        flags = ["permutable"] if node.permutable else []
        return "band (" + ", ".join(members) + ")" + ("\n" + ", ".join(flags) if flags else ""), "band"
    if isinstance(node, N.Sequence):
        return ("sequence" if node.ordered else "set"), "sequence"
    if isinstance(node, N.Filter):
        return "filter " + ", ".join(sorted(tuple_names(node.domain))), "filter"
    if isinstance(node, N.Mark):
        return "mark " + node.name, "mark"
    return "leaf", "leaf"


_BOX_COLORS = {"domain": "#e0e0e0", "band": "#cfe2f3", "sequence": "#fce5cd", "filter": "#d9ead3",
               "mark": "#f4cccc", "leaf": "#ffffff"}


def schedule_tree(schedule, ax=None):
    """Draw the schedule tree of ``schedule`` (a :class:`~polyopt.Schedule`): one box per node
    (the domain at the top, then bands with their loop names, ``\u2225`` after a coincident
    (parallel) member and ``permutable`` under a permutable band, sequences, filters with their
    statements, marks); leaves are left out. Returns the Axes (``ax.polyopt["nodes"]``: the
    number of boxes)."""
    plt = _pyplot()
    from polyopt.transform.schedule import Schedule
    if not isinstance(schedule, Schedule):
        raise PlotError(f"po.plot.schedule_tree takes a Schedule (po.schedule(...)), not {type(schedule).__name__}")
    # layout: leaves of the drawn tree side by side, each parent centred over its children
    boxes: list[tuple[float, int, str, str]] = []
    edges: list[tuple[int, int]] = []
    column = [0.0]

    def place(node: N.Node, depth: int) -> int | None:
        if isinstance(node, N.Leaf):
            return None
        index = len(boxes)
        text, kind = _label(node)
        boxes.append((0.0, depth, text, kind))
        kids = [place(child, depth + 1) for child in N.children(node)]
        kids = [k for k in kids if k is not None]
        if kids:
            x = sum(boxes[k][0] for k in kids) / len(kids)
            edges.extend((index, k) for k in kids)
        else:
            x = column[0]
            column[0] += 1.0
        boxes[index] = (x, depth, text, kind)
        return index

    root_text = "domain " + ", ".join(sorted(tuple_names(schedule.domain)))
    boxes.append((0.0, 0, root_text, "domain"))
    top = place(schedule.root, 1)
    width = max(column[0], 1.0)
    boxes[0] = (boxes[top][0] if top is not None else 0.0, 0, root_text, "domain")
    if top is not None:
        edges.append((0, top))
    depth = max(b[1] for b in boxes) + 1
    if ax is None:
        _, ax = plt.subplots(figsize=(max(4.0, 2.6 * width), max(2.5, 0.95 * depth)))
    for a, b in edges:
        ax.plot([boxes[a][0], boxes[b][0]], [-boxes[a][1], -boxes[b][1]], color="#888888",
                linewidth=1.0, zorder=1)
    for x, y, text, kind in boxes:
        ax.text(x, -y, text, ha="center", va="center", fontsize=8, zorder=2,
                bbox=dict(boxstyle="round,pad=0.35", facecolor=_BOX_COLORS[kind], edgecolor="#666666"))
    ax.set_xlim(-0.6, width - 0.4)
    ax.set_ylim(-depth + 0.4, 0.6)
    ax.axis("off")
    ax.set_title(f"schedule tree of {schedule.scop.name} ({schedule.algorithm})", fontsize=9)
    ax.polyopt = {"nodes": len(boxes), "edges": len(edges)}
    return ax
