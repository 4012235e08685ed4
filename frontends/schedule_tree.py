"""The original execution order of a loop program as an isl schedule tree.

Frontends describe their program as nested :class:`Loop` and :class:`Leaf` nodes (textual order);
:func:`original_schedule` turns that into bands (one per loop) and sequences (one per block).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import islpy as isl


@dataclass
class Leaf:
    """One statement instance set, named like its isl tuple, with its iterator names."""

    name: str
    iterators: tuple[str, ...]


@dataclass
class Loop:
    """A loop over ``iterator`` (descending when ``step`` < 0) around ``body``."""

    iterator: str
    step: int
    body: list = field(default_factory=list)


def _leaves(nodes) -> list[Leaf]:
    out: list[Leaf] = []
    for node in nodes:
        out.extend([node] if isinstance(node, Leaf) else _leaves(node.body))
    return out


def _filter(nodes) -> str:
    return "{ " + "; ".join(f"{l.name}[{', '.join(l.iterators)}]" for l in _leaves(nodes)) + " }"


def _node(nodes, depth: int, params: str) -> str | None:
    """YAML-ish isl text of the subtree for a block of ``nodes`` at loop ``depth``."""
    nodes = [n for n in nodes if _leaves([n])]
    if not nodes:
        return None
    if len(nodes) == 1:
        node = nodes[0]
        if isinstance(node, Leaf):
            return None
        sign = "-" if node.step < 0 else ""
        pieces = "; ".join(f"{l.name}[{', '.join(l.iterators)}] -> [({sign}{l.iterators[depth]})]"
                           for l in _leaves([node]))
        band = f'schedule: "{params}[{{ {pieces} }}]"'
        child = _node(node.body, depth + 1, params)
        return band + (f", child: {{ {child} }}" if child else "")
    items = []
    for node in nodes:
        child = _node([node], depth, params)
        items.append(f'{{ filter: "{_filter([node])}"' + (f", child: {{ {child} }}" if child else "") + " }")
    return f"sequence: [ {', '.join(items)} ]"


def original_schedule(domain: isl.UnionSet, nodes: list, params: tuple[str, ...]) -> isl.Schedule:
    """The schedule tree executing ``nodes`` in their textual order over ``domain``."""
    # isl reads "[] -> [{ ... }]" as an empty band: a scop without parameters has no prefix
    body = _node(nodes, 0, f"[{', '.join(params)}] -> " if params else "")
    text = f'{{ domain: "{domain}"' + (f", child: {{ {body} }}" if body else "") + " }"
    return isl.Schedule(text)
