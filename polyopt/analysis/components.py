"""Connected components of a small undirected graph, the one union-find of the project: the
weakly connected statements of a dependence graph (schedulers/levels.py), the webs of a scalar's
references (transform/scalar_expansion.py), the factors of a dependence polyhedron
(analysis/farkas.py)."""
from __future__ import annotations

from typing import Hashable, Iterable, Sequence, TypeVar

T = TypeVar("T", bound=Hashable)


def connected_groups(items: Sequence[T], links: Iterable[tuple[T, T]]) -> list[list[T]]:
    """``items`` grouped by the connected components of the graph whose edges are ``links`` (pairs
    of items); the groups in the order of their first member, each in the items' order."""
    parent = {item: item for item in items}

    def root(item: T) -> T:
        while parent[item] != item:
            parent[item] = parent[parent[item]]
            item = parent[item]
        return item

    for a, b in links:
        parent[root(a)] = root(b)
    groups: dict[T, list[T]] = {}
    for item in items:
        groups.setdefault(root(item), []).append(item)
    return list(groups.values())
