"""The persistent compile cache: what a compile produced, on disk, for later processes.

Where: ``$POLYOPT_CACHE_DIR``, else ``$XDG_CACHE_HOME/polyopt``, else ``~/.cache/polyopt``.
``POLYOPT_CACHE=0`` turns it off (nothing is read or written); ``POLYOPT_CACHE_MAX_MB``
(default 512, fractions allowed) bounds its size: after a write the least recently used
entries (by modification time, which a hit refreshes) are removed until it fits. The directory
is listed for that only when this process's writes since its last listing could have passed
the bound, or after :data:`RESCAN_WRITES` writes (other processes' entries count too): listing
it after every write cost time in proportion to its entries, on every compile.

One file per compile request, named by the SHA-256 of the request (:func:`entry_name`: the
in-memory cache key of :mod:`polyopt.targets.cache` -- the kernel's ``scop_fingerprint``,
target, algorithm and options or the given schedule's tree, ``reassociate``) and of this
process's :func:`environment` (versions of polyopt, its source files' sizes and times, llvmlite, LLVM and
islpy; the LLVM triple, host CPU name and features; whether libgomp is loaded; the default
thread count, which the cost model's wavefront rule reads). The CPU
target stores the object code LLVM emitted (llvmlite's object cache hook), the schedule (its
trace and isl tree text) and the C, LLVM IR and optimized IR texts; a hit loads the object
into a fresh execution engine (no scheduler, verifier, code generator or LLVM optimizer) and
rebuilds the rest only when asked for (polyopt/targets/cpu.py).

The CUDA target keeps nothing here: its NVRTC build is cached by CuPy itself
(``cupy.RawModule``, in ``$CUPY_CACHE_DIR``, default ``~/.cupy/kernel_cache``), and the
schedule and CUDA source are recomputed per process.

File format (no pickle: a tampered file cannot run code): ``MAGIC``, the SHA-256 of the body,
then the body: a 4-byte big-endian header length, a JSON header (the request text, metadata,
and the name, length and compression of each blob), the blobs. Writers write a temporary
file in the same directory and ``os.replace`` it (atomic: concurrent writers of one entry
leave one whole file); a reader treats a missing, short or corrupt file as a miss and
deletes it.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
import threading
import time
import zlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

MAGIC = b"polyopt-cache-1\n"
SUFFIX = ".pco"
DEFAULT_MAX_MB = 512.0
#: Temporary files older than this (seconds) are left-overs of a killed writer: evicted.
_STALE_TEMP_SECONDS = 3600.0

#: Writes after which a process lists the directory again to evict, whatever its own writes add.
RESCAN_WRITES = 64
#: Per cache directory: (its bytes at this process's last listing plus what it wrote since,
#: writes since), for :func:`store`'s decision to list it again.
_WRITTEN: dict[Path, tuple[int, int]] = {}

#: What this process did with the cache (tests and ``polyopt cache info`` read it).
STATS = {"hits": 0, "misses": 0, "writes": 0, "corrupt": 0, "errors": 0, "evicted": 0}
_LOCK = threading.Lock()


def enabled() -> bool:
    """False where ``POLYOPT_CACHE`` is 0 (or false, no, off)."""
    return os.environ.get("POLYOPT_CACHE", "1").strip().lower() not in ("0", "false", "no", "off")


def cache_dir() -> Path:
    """``$POLYOPT_CACHE_DIR``, else ``$XDG_CACHE_HOME/polyopt``, else ``~/.cache/polyopt``."""
    if os.environ.get("POLYOPT_CACHE_DIR"):
        return Path(os.environ["POLYOPT_CACHE_DIR"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg and os.path.isabs(os.path.expanduser(xdg)) else Path.home() / ".cache"
    return base / "polyopt"


def max_bytes() -> int:
    """The size bound, from ``POLYOPT_CACHE_MAX_MB`` (default 512; a bad value: the default)."""
    try:
        megabytes = float(os.environ.get("POLYOPT_CACHE_MAX_MB", DEFAULT_MAX_MB))
    except ValueError:
        megabytes = DEFAULT_MAX_MB
    return max(0, int(megabytes * 1024 * 1024))


def _source_digest() -> str:
    """SHA-256 of the name, size and modification time of each of polyopt's own Python files
    (polyopt, its codegen and frontends): code compiled by an edited code generator or
    scheduler is not reused, also where the version number did not change (a development
    tree). (Reading the files' contents instead costs about 10 ms per process.)"""
    from importlib import import_module
    digest = hashlib.sha256()
    roots = [Path(folder) for package in ("polyopt", "polyopt.codegen", "polyopt.frontends")
             for folder in import_module(package).__path__]
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            stat = path.stat()
            digest.update(f"{path.relative_to(root)}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


@lru_cache(maxsize=None)
def environment() -> str:
    """What besides the request decides the compiled code: versions (polyopt, its sources,
    llvmlite, LLVM, islpy), the target triple, the host CPU and its features, whether the
    OpenMP runtime is there (without it parallel loops compile sequentially), and the default
    thread count (the cost model tiles a one-thread nest's band as a wavefront for it)."""
    import islpy
    import llvmlite
    import llvmlite.binding as llvm

    import polyopt
    from polyopt.codegen.llvm import host_layout, openmp_available
    from polyopt.targets.arguments import default_num_threads
    openmp = openmp_available()  # also initializes LLVM's native target
    triple, layout = host_layout()
    return json.dumps({
        "polyopt": getattr(polyopt, "__version__", "?"), "sources": _source_digest(),
        "llvmlite": llvmlite.__version__, "llvm": list(llvm.llvm_version_info),
        "islpy": getattr(islpy, "__version__", None) or islpy.version.VERSION_TEXT,
        "triple": triple, "layout": layout, "cpu": llvm.get_host_cpu_name(),
        "features": llvm.get_host_cpu_features().flatten(), "openmp": openmp,
        "threads": default_num_threads(),
    }, sort_keys=True)


def request_text(key) -> str:
    """The text the entry name hashes: the compile request and the :func:`environment`."""
    return repr(key) + "\n" + environment()


def entry_name(key) -> str:
    return hashlib.sha256(request_text(key).encode()).hexdigest() + SUFFIX


@dataclass
class Entry:
    """One loaded cache entry: its JSON metadata and its blobs (decompressed on demand)."""

    path: Path
    meta: dict
    _blobs: dict

    def blob(self, name: str) -> bytes:
        data, compressed = self._blobs[name]
        return zlib.decompress(data) if compressed else data

    def text(self, name: str) -> str:
        return self.blob(name).decode()


def _discard(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def _parse(data: bytes, request: str) -> tuple[dict, dict] | None:
    """(meta, blobs) of a file's bytes, or None where they are not a whole entry of ``request``."""
    start = len(MAGIC) + 32
    if len(data) < start + 4 or not data.startswith(MAGIC):
        return None
    body = memoryview(data)[start:]
    if hashlib.sha256(body).digest() != data[len(MAGIC):start]:
        return None
    (size,) = struct.unpack(">I", body[:4])
    header = json.loads(bytes(body[4:4 + size]).decode())
    if header.get("request") != request:
        return None
    blobs, offset = {}, 4 + size
    for name, length, compressed in header["blobs"]:
        blobs[name] = (bytes(body[offset:offset + length]), compressed)
        offset += length
    return (header["meta"], blobs) if offset == len(body) else None


def load(key) -> Entry | None:
    """The entry of ``key``, or None (disabled, missing, unreadable or corrupt: a corrupt one
    is deleted). A hit refreshes the file's modification time (the LRU order)."""
    if not enabled():
        return None
    path = cache_dir() / entry_name(key)
    try:
        data = path.read_bytes()
    except OSError:
        STATS["misses"] += 1
        return None
    try:
        parsed = _parse(data, request_text(key))
    except (ValueError, KeyError, TypeError, struct.error):
        parsed = None
    if parsed is None:
        STATS["corrupt"] += 1
        STATS["misses"] += 1
        _discard(path)
        return None
    try:
        os.utime(path)
    except OSError:
        pass
    STATS["hits"] += 1
    return Entry(path, parsed[0], parsed[1])


def reject(entry: Entry) -> None:
    """A loaded entry its user could not use (object code the engine refused): deleted, and
    counted as a corrupt entry and a miss instead of a hit."""
    STATS["hits"] -= 1
    STATS["misses"] += 1
    STATS["corrupt"] += 1
    _discard(entry.path)


def store(key, meta: dict, blobs: dict[str, bytes], compress: tuple[str, ...] = ()) -> Path | None:
    """Write the entry of ``key`` (``blobs`` named in ``compress`` are zlib-compressed), then
    evict down to :func:`max_bytes`. Errors (a read-only or full disk) are counted, not raised:
    the cache is an optimization."""
    if not enabled():
        return None
    directory = cache_dir()
    parts, listing = [], []
    for name, data in blobs.items():
        packed = zlib.compress(data, 1) if name in compress else data
        parts.append(packed)
        listing.append([name, len(packed), name in compress])
    header = json.dumps({"request": request_text(key), "meta": meta, "blobs": listing}).encode()
    body = b"".join([struct.pack(">I", len(header)), header, *parts])
    temp = None
    try:
        directory.mkdir(parents=True, exist_ok=True)
        descriptor, temp = tempfile.mkstemp(prefix=".tmp-", suffix=SUFFIX, dir=directory)
        with os.fdopen(descriptor, "wb") as file:
            file.write(MAGIC + hashlib.sha256(body).digest() + body)
        path = directory / entry_name(key)
        os.replace(temp, path)
        temp = None
    except OSError:
        STATS["errors"] += 1
        if temp is not None:
            _discard(Path(temp))
        return None
    STATS["writes"] += 1
    _evict_after_write(directory, len(MAGIC) + 32 + len(body))
    return path


def _evict_after_write(directory: Path, size: int) -> None:
    """:func:`evict` after a write of ``size`` bytes to ``directory``, unless this process knows
    the directory still fits (see the module doc)."""
    with _LOCK:
        known = _WRITTEN.get(directory)
        if known is not None:
            total, writes = known[0] + size, known[1] + 1
            if total <= max_bytes() and writes < RESCAN_WRITES:
                _WRITTEN[directory] = (total, writes)
                return
    evict()


def _entries(directory: Path) -> list[tuple[float, int, Path]]:
    """(modification time, size, path) of each entry; stale temporary files are removed."""
    found = []
    try:
        names = os.listdir(directory)
    except OSError:
        return found
    now = time.time()
    for name in names:
        if not name.endswith(SUFFIX):
            continue
        path = directory / name
        try:
            stat = path.stat()
        except OSError:
            continue  # removed by another process meanwhile
        if name.startswith(".tmp-"):
            if now - stat.st_mtime > _STALE_TEMP_SECONDS:
                _discard(path)
            continue
        found.append((stat.st_mtime, stat.st_size, path))
    return found


def evict(limit: int | None = None) -> int:
    """Remove least recently used entries until the cache holds at most ``limit`` bytes
    (default :func:`max_bytes`); returns how many were removed."""
    limit = max_bytes() if limit is None else limit
    directory = cache_dir()
    with _LOCK:
        entries = sorted(_entries(directory), key=lambda e: e[0])
        total, removed = sum(size for _, size, _ in entries), 0
        for _, size, path in entries:
            if total <= limit:
                break
            _discard(path)
            total -= size
            removed += 1
        STATS["evicted"] += removed
        _WRITTEN[directory] = (total, 0)
    return removed


def info() -> dict:
    """``{"directory", "entries", "bytes", "max_bytes", "enabled"}`` of the cache."""
    entries = _entries(cache_dir())
    return {"directory": str(cache_dir()), "entries": len(entries), "bytes": sum(e[1] for e in entries),
            "max_bytes": max_bytes(), "enabled": enabled()}


def clear() -> int:
    """Remove every entry (and temporary file) of the cache; returns how many entries."""
    directory = cache_dir()
    removed = 0
    with _LOCK:
        _WRITTEN.pop(directory, None)
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    for name in names:
        if name.endswith(SUFFIX):
            _discard(directory / name)
            removed += not name.startswith(".tmp-")
    return removed
