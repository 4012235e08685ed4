"""Compile requests and the in-memory compile cache shared by the targets: what a kernel argument
parses to (:func:`scop_of`), a fingerprint of a Scop, the cache key of a request, and the check
that a given schedule belongs to the kernel being compiled."""
from __future__ import annotations

import threading
from collections import OrderedDict

from polyopt.analysis.scop import Scop, scop_fingerprint
from polyopt.errors import ArgumentError, ArgumentTypeError
from polyopt.schedulers.registry import DEFAULT_ALGORITHM
from polyopt.transform.schedule import Schedule

#: How many compiled kernels the in-memory cache keeps (the least recently used go first).
MAX_COMPILED = 256


class LRUCache:
    """A dict-like map that keeps at most ``maxsize`` entries: reading an entry makes it the
    most recently used, adding one beyond the bound drops the least recently used. A dropped
    compiled kernel lives on while anything still refers to it (its native code with it); a
    new request for it is served by the disk cache (polyopt/targets/disk_cache.py)."""

    def __init__(self, maxsize: int):
        self.maxsize = maxsize
        self._data: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def __contains__(self, key) -> bool:
        return key in self._data

    def __getitem__(self, key):
        with self._lock:
            value = self._data[key]
            self._data.move_to_end(key)
            return value

    def get(self, key, default=None):
        try:
            return self[key]
        except KeyError:
            return default

    def __setitem__(self, key, value) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > max(1, self.maxsize):
                self._data.popitem(last=False)

    def __delitem__(self, key) -> None:
        with self._lock:
            del self._data[key]

    def __len__(self) -> int:
        return len(self._data)

    def __iter__(self):
        return iter(list(self._data))

    def keys(self):
        return list(self._data)

    def values(self):
        return list(self._data.values())

    def items(self):
        return list(self._data.items())

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


#: Compiled kernels by :func:`cache_key` (every target's), the :data:`MAX_COMPILED` most recent.
COMPILED = LRUCache(MAX_COMPILED)


def clear_cache() -> None:
    """Forget every compiled kernel of this process (the disk cache stays: ``POLYOPT_CACHE=0``
    turns it off, e.g. to time compiles from scratch; ``polyopt cache clear`` empties it)."""
    COMPILED.clear()


def scop_of(kernel) -> Scop:
    """The Scop a kernel parses to (a Scop is its own); anything else is refused."""
    scop = getattr(kernel, "scop", kernel)
    if not isinstance(scop, Scop):  # refused before anything else looks at it
        raise ArgumentTypeError(f"cannot compile {kernel!r}: expected a polyopt kernel or Scop")
    return scop


def cache_key(kernel, target: str, algorithm: str, options: dict, schedule: Schedule | None = None):
    """The compile cache's key: the :func:`scop_fingerprint` of what the kernel parses to (so
    two kernels from one source text with different ``-D`` defines or float types never share
    code), the target, and the algorithm and options -- or the given schedule's Scop (the
    kernel's or its scalar expansion: they differ in their arrays) and tree."""
    choice = (algorithm, tuple(sorted((k, repr(v)) for k, v in options.items()))) if schedule is None \
        else ("schedule", scop_fingerprint(schedule.scop), str(schedule.tree))  # (the kernel's or its expansion)
    return ("scop", scop_fingerprint(scop_of(kernel)), target) + choice


def check_given_schedule(scop: Scop, schedule: Schedule, algorithm: str, options: dict) -> None:
    """Refuse ``compile(kernel, schedule=...)`` with a schedule of another kernel, or with
    scheduler choices beside it (they would be ignored: a silent no-op)."""
    if not isinstance(schedule, Schedule):
        raise ArgumentTypeError(f"schedule= takes a polyopt Schedule (po.schedule(...)), not {schedule!r}")
    if algorithm != DEFAULT_ALGORITHM or options:
        chosen = [f"algorithm={algorithm!r}"] if algorithm != DEFAULT_ALGORITHM else []
        raise ArgumentError(f"schedule= gives the schedule itself: drop {', '.join(chosen + sorted(options))}")
    derived = schedule.scop.origin  # (a schedule of the kernel with its scalars expanded)
    if scop_fingerprint(schedule.scop) != scop_fingerprint(scop) \
            and (derived is None or scop_fingerprint(derived) != scop_fingerprint(scop)):
        raise ArgumentError(f"schedule= is a schedule of {schedule.scop.name!r}, not of the kernel "
                            f"{scop.name!r} being compiled")
