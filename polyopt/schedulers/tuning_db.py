"""The tuning database: :func:`polyopt.autotune`'s decisions on disk, for later processes.

Where: ``<cache_dir>/tuning/``, beside the compile cache (:func:`polyopt.targets.disk_cache.
cache_dir`: ``$POLYOPT_CACHE_DIR``, else ``$XDG_CACHE_HOME/polyopt``, else ``~/.cache/polyopt``);
``POLYOPT_CACHE=0`` turns it off with the compile cache (nothing read or written). One small
JSON file per decision, keyed by (:func:`entry_key`):

- the kernel: the :func:`~polyopt.analysis.scop.scop_fingerprint` of what it parses to (so its
  element types too), and its name for people reading the files;
- the sizes (the call's size parameters) and the arrays' dtypes;
- the target, the thread count the candidates were timed with, and the machine
  (:func:`machine`: the CPU part of the compile cache's :func:`~polyopt.targets.disk_cache.
  environment` -- LLVM triple, CPU name and features, OpenMP -- the core count and polyopt's
  version; not polyopt's source files: a decision stays valid across edits of the scheduler,
  ``po.autotune(..., refresh=True)`` times again);
- which candidates competed (a digest of the list given, or "default" with a digest of the
  default list and its neighbourhood rule's version: a new default list is timed again).

The file holds the key, the winner (label, algorithm, options, trace JSON), the seconds of each
timed candidate, the skipped ones and why, whether the sweep was complete (not cut by a time
budget) and when it was made. Writers write a temporary file and ``os.replace`` it (atomic, as
the compile cache does); a reader treats a missing file as a miss, and a file that does not
parse or holds another key as a miss too, deleting it.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from pathlib import Path

from polyopt.targets import disk_cache

#: The layout of an entry; entries of another format are misses.
FORMAT = 1
SUFFIX = ".json"
#: What this process did with the database (tests read it).
STATS = {"hits": 0, "misses": 0, "writes": 0, "corrupt": 0, "errors": 0}


def directory() -> Path:
    """``<cache_dir>/tuning``."""
    return disk_cache.cache_dir() / "tuning"


def enabled() -> bool:
    """The compile cache's switch (``POLYOPT_CACHE=0`` turns both off)."""
    return disk_cache.enabled()


def machine() -> dict:
    """This machine as a decision depends on it: the CPU part of :func:`disk_cache.environment`,
    the core count and polyopt's version."""
    environment = json.loads(disk_cache.environment())
    found = {k: environment.get(k) for k in ("triple", "cpu", "features", "openmp", "polyopt")}
    found["cores"] = os.cpu_count()
    return found


def entry_key(fingerprint: str, kernel: str, params: dict, dtypes: dict, target: str, threads: int,
              candidates: str) -> dict:
    """The key of a decision (see the module docstring), a JSON object."""
    return {"format": FORMAT, "scop": fingerprint, "kernel": kernel,
            "params": {k: int(v) for k, v in sorted(params.items())},
            "dtypes": dict(sorted(dtypes.items())), "target": target, "threads": int(threads),
            "machine": machine(), "candidates": candidates}


def _path(key: dict) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
    return directory() / f"{key['scop'][:16]}-{digest[:32]}{SUFFIX}"  # a kernel's entries: one glob


def _discard(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def _read(path: Path) -> dict | None:
    """The entry in ``path``, or None (missing; unreadable or malformed: counted and deleted)."""
    try:
        text = path.read_text()
    except OSError:
        return None
    try:
        entry = json.loads(text)
        ok = (isinstance(entry, dict) and isinstance(entry.get("key"), dict)
              and entry["key"].get("format") == FORMAT and isinstance(entry.get("best"), dict)
              and isinstance(entry["best"].get("label"), str) and isinstance(entry["best"].get("algorithm"), str)
              and isinstance(entry["best"].get("options"), list)
              and isinstance(entry["best"].get("trace"), (str, type(None)))
              and isinstance(entry.get("seconds"), dict) and isinstance(entry.get("skipped"), dict)
              and isinstance(entry.get("created"), (int, float)))
    except ValueError:
        ok = False
    if not ok:
        STATS["corrupt"] += 1
        _discard(path)
        return None
    return entry


def load(key: dict) -> dict | None:
    """The entry stored under ``key``, or None (disabled, missing or corrupt: a miss)."""
    if not enabled():
        return None
    path = _path(key)
    entry = _read(path)
    if entry is not None and entry["key"] != json.loads(json.dumps(key)):
        STATS["corrupt"] += 1  # a file under this name with another key: tampered or a hash collision
        _discard(path)
        entry = None
    STATS["hits" if entry is not None else "misses"] += 1
    return entry


def store(key: dict, best: dict, seconds: dict, skipped: dict, *, complete: bool,
          elapsed: float) -> Path | None:
    """Write the decision of ``key`` (``best``: label, algorithm, options, trace JSON). Errors (a
    read-only disk, options that are no JSON) are counted, not raised."""
    if not enabled():
        return None
    entry = {"key": key, "best": best, "seconds": seconds, "skipped": skipped, "complete": bool(complete),
             "elapsed": float(elapsed), "created": time.time()}
    temp = None
    try:
        text = json.dumps(entry, indent=1, sort_keys=True)
        path = _path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor, temp = tempfile.mkstemp(prefix=".tmp-", suffix=SUFFIX, dir=path.parent)
        with os.fdopen(descriptor, "w") as file:
            file.write(text)
        os.replace(temp, path)
        temp = None
    except (OSError, TypeError, ValueError):
        STATS["errors"] += 1
        if temp is not None:
            _discard(Path(temp))
        return None
    STATS["writes"] += 1
    return path


def entries_for(fingerprint: str, target: str = "cpu") -> list[dict]:
    """Every readable entry of the kernel with ``fingerprint`` for ``target`` on this machine,
    the most recent first."""
    if not enabled():
        return []
    here = json.loads(json.dumps(machine()))
    found = []
    for path in directory().glob(f"{fingerprint[:16]}-*{SUFFIX}"):
        entry = _read(path)
        if (entry is not None and entry["key"].get("scop") == fingerprint
                and entry["key"].get("target") == target and entry["key"].get("machine") == here):
            found.append(entry)
    return sorted(found, key=lambda e: -e["created"])


def info() -> dict:
    """``{"directory", "entries"}`` of the database."""
    try:
        count = sum(1 for name in os.listdir(directory()) if name.endswith(SUFFIX) and not name.startswith(".tmp-"))
    except OSError:
        count = 0
    return {"directory": str(directory()), "entries": count}


def clear() -> int:
    """Remove every entry; returns how many."""
    removed = 0
    try:
        names = os.listdir(directory())
    except OSError:
        return 0
    for name in names:
        if name.endswith(SUFFIX):
            _discard(directory() / name)
            removed += not name.startswith(".tmp-")
    return removed
