"""The persistent compile cache (polyopt/targets/disk_cache.py): a second process loads what the
first compiled (no scheduling, no LLVM), corrupt entries are misses, concurrent writers leave a
valid entry, the size bound evicts the least recently used, ``polyopt cache info|clear``, and
the bound of the in-memory cache."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import polyopt as po
from polyopt import cli
from polyopt.targets import cache, disk_cache
from polyopt.targets.cpu import CachedKernel

#: A child process: compile gemm (default options), call it on 2 threads, print what happened.
CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    import polyopt as po
    from polyopt.targets import disk_cache
    rng = np.random.default_rng(7)
    A, B, C = rng.random((13, 11)), rng.random((11, 9)), rng.random((13, 9))
    ck = po.compile(po.suite.get("gemm").kernel)
    ck(1.5, 1.2, C, A, B, num_threads=2)
    print(json.dumps({"phases": sorted(ck.compile_times), "kind": type(ck).__name__, "C": C.tolist(),
                      "stats": disk_cache.STATS, "c": ck.c_source, "ast": ck.loop_ast,
                      "tree": str(ck.schedule.tree), "trace": ck.schedule.trace.to_json(),
                      "ir": "define" in ck.llvm_ir and "define" in ck.optimized_ir}))
""")


def _child(cache_dir, **env) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "POLYOPT_CACHE_DIR": str(cache_dir), "POLYOPT_CACHE": "1", **env})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def _entries(cache_dir) -> list:
    return sorted(p for p in cache_dir.iterdir() if p.suffix == ".pco" and not p.name.startswith(".tmp-"))


def _expected() -> np.ndarray:
    rng = np.random.default_rng(7)
    A, B, C = rng.random((13, 11)), rng.random((11, 9)), rng.random((13, 9))
    return 1.5 * A @ B + 1.2 * C


def test_second_process_loads_the_object_code(tmp_path):
    first = _child(tmp_path)
    assert first["kind"] == "CompiledKernel" and {"schedule", "llvm"} <= set(first["phases"])
    assert first["stats"]["writes"] == 1 and len(_entries(tmp_path)) == 1
    second = _child(tmp_path)
    assert second["kind"] == "CachedKernel" and second["stats"]["hits"] == 1
    assert "disk" in second["phases"] and not {"schedule", "verify", "codegen", "llvm"} & set(second["phases"])
    np.testing.assert_array_equal(np.array(second["C"]), np.array(first["C"]))
    np.testing.assert_allclose(np.array(second["C"]), _expected(), rtol=1e-12)
    # what a hit rebuilds on demand is what the compile made
    for part in ("c", "ast", "tree", "trace", "ir"):
        assert second[part] == first[part], part


def test_a_corrupt_entry_is_a_miss(tmp_path):
    _child(tmp_path)
    (entry,) = _entries(tmp_path)
    data = bytearray(entry.read_bytes())
    data[len(data) // 2] ^= 0xFF
    entry.write_bytes(bytes(data))
    again = _child(tmp_path)
    assert again["kind"] == "CompiledKernel" and again["stats"]["corrupt"] == 1
    np.testing.assert_allclose(np.array(again["C"]), _expected(), rtol=1e-12)
    entry.write_bytes(b"polyopt")  # short: a miss too
    assert _child(tmp_path)["kind"] == "CompiledKernel"
    assert _child(tmp_path)["kind"] == "CachedKernel"  # rewritten whole


def test_concurrent_writers_leave_a_valid_entry(tmp_path):
    env = {**os.environ, "POLYOPT_CACHE_DIR": str(tmp_path), "POLYOPT_CACHE": "1"}
    children = [subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, env=env) for _ in range(2)]
    for child in children:
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0, err
    assert len(list(tmp_path.iterdir())) == 1  # one entry, no temporary file left
    assert _child(tmp_path)["kind"] == "CachedKernel"


def test_disabled_cache_writes_nothing(tmp_path):
    assert _child(tmp_path, POLYOPT_CACHE="0")["stats"]["writes"] == 0
    assert not list(tmp_path.iterdir())


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("POLYOPT_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("POLYOPT_CACHE", raising=False)
    return tmp_path


def test_size_bound_evicts_least_recently_used(cache_dir, monkeypatch):
    blob = os.urandom(30_000)  # incompressible
    paths = {}
    for n, name in enumerate("abc"):
        paths[name] = disk_cache.store(("test", name), {}, {"data": blob})
        os.utime(paths[name], (1000.0 + n, 1000.0 + n))  # written in the order a, b, c
    assert disk_cache.load(("test", "a")).blob("data") == blob  # a hit: a is now the most recent
    monkeypatch.setenv("POLYOPT_CACHE_MAX_MB", str(75_000 / 2**20))  # room for two
    disk_cache.store(("test", "d"), {}, {"data": blob})
    assert not paths["b"].exists() and not paths["c"].exists()
    assert paths["a"].exists() and disk_cache.load(("test", "d")) is not None
    assert disk_cache.info()["entries"] == 2 and disk_cache.info()["bytes"] <= 75_000


def test_entries_of_other_requests_and_garbage_are_misses(cache_dir):
    path = disk_cache.store(("test", 1), {"x": 1}, {"t": b"text" * 100}, compress=("t",))
    assert disk_cache.load(("test", 1)).text("t") == "text" * 100
    assert disk_cache.load(("test", 2)) is None
    path.write_bytes(path.read_bytes()[:-1])
    assert disk_cache.load(("test", 1)) is None and not path.exists()


def test_cache_command(cache_dir, capsys):
    disk_cache.store(("test", 1), {}, {"data": b"x" * 100})
    assert cli.main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and str(cache_dir) in out and "1 entries" in out
    assert cli.main(["cache", "clear"]) == 0
    assert capsys.readouterr().out.count("\n") == 1 and disk_cache.info()["entries"] == 0
    assert cli.main(["cache", "info"]) == 0 and "0 entries, 0 bytes" in capsys.readouterr().out


def test_in_memory_cache_is_bounded(cache_dir, monkeypatch):
    lru = cache.LRUCache(2)
    lru["a"], lru["b"] = 1, 2
    assert lru["a"] == 1
    lru["c"] = 3
    assert "b" not in lru and lru.keys() == ["a", "c"]

    monkeypatch.setattr(cache.COMPILED, "maxsize", 2)
    kernel = po.kernel_from_source(textwrap.dedent("""
        def scaled(A: f64["N"], B: f64["N"]):
            for i in range(N):
                B[i] = 2.0 * A[i] + 1.0
    """))
    first = po.compile(kernel, algorithm="original")
    po.compile(kernel, algorithm="isl")
    po.compile(kernel, algorithm="isl-feautrier")
    assert len(cache.COMPILED) == 2
    call = first.native_function  # keeps the evicted kernel's native code alive
    assert call.polyopt_native is first.native
    again = po.compile(kernel, algorithm="original")  # from the disk now
    assert again is not first and isinstance(again, CachedKernel)
    A, B = np.arange(5.0), np.zeros(5)
    again(A, B)
    np.testing.assert_array_equal(B, 2.0 * A + 1.0)
    assert again.schedule.algorithm == "original" and "B[" in again.c_source
