"""Schedulers compared as data (polyopt.schedulers.compare): plain dict records with the shape,
parallelism, dependences and timings of each (kernel, algorithm)."""
import importlib.util
import json

import pytest

import polyopt as po
from polyopt.schedulers.compare import compare_schedulers, records_to_dataframe, sync_free_degree

KEYS = {"kernel", "algorithm", "options", "label", "statements", "bands", "tilable_depth", "loops",
        "parallel_loops", "coincident_loops", "marked_parallel", "sequential_depth", "sync_free_degree",
        "outer_parallel_degree", "carried", "dependences", "uniform_dependences", "dependence_vectors",
        "schedule_seconds", "legal", "notes", "error"}


@pytest.fixture(scope="module")
def records():
    return compare_schedulers(["gemm", "jacobi-1d"], ("pluto", "feautrier", "limlam", "isl"),
                              {"pluto": {"vectorize": False}})


def by(records, kernel, algorithm):
    return next(r for r in records if r["kernel"] == kernel and r["algorithm"] == algorithm)


def test_one_plain_record_per_kernel_and_algorithm(records):
    assert [(r["kernel"], r["algorithm"]) for r in records] == [
        (k, a) for k in ("gemm", "jacobi-1d") for a in ("pluto", "feautrier", "limlam", "isl")]
    for r in records:
        assert set(r) == KEYS and r["legal"] and r["error"] is None
        assert 0 <= r["schedule_seconds"] < 5
    json.dumps(records)        # plain values only


def test_gemm_records(records):
    pluto = by(records, "gemm", "pluto")
    assert pluto["options"] == {"vectorize": False} and pluto["label"] == "pluto(vectorize=False)"
    assert pluto["tilable_depth"] == 3 and pluto["parallel_loops"] == 4 and pluto["marked_parallel"] == 2
    # C *= beta and the product are two nests joined by a dependence: parallel per nest only
    assert pluto["sync_free_degree"] == 0 and pluto["outer_parallel_degree"] == 2
    assert by(records, "gemm", "limlam")["sync_free_degree"] == 2
    assert by(records, "gemm", "feautrier")["sync_free_degree"] == 0   # the reduction k outermost
    carried = {loop["name"]: loop["carried"] for loop in pluto["carried"]}
    assert carried["k"] > 0 and sum(carried.values()) == carried["k"]    # only k carries
    assert pluto["statements"] == 2 and pluto["dependences"] == len(pluto["dependence_vectors"]) == 6
    assert {(v["source"], v["sink"]) for v in pluto["dependence_vectors"]} == {("S0", "S1"), ("S1", "S1")}


def test_jacobi_1d_records(records):
    vectors = by(records, "jacobi-1d", "pluto")["dependence_vectors"]
    assert by(records, "jacobi-1d", "pluto")["uniform_dependences"] == len(vectors) == 14
    assert {v["distance"] for v in vectors if v["kind"] == "RAW" and v["source"] == "S0"} == {(0, -1), (0, 0), (0, 1)}
    for algorithm in ("pluto", "limlam"):
        r = by(records, "jacobi-1d", algorithm)
        assert r["sync_free_degree"] == 0 and r["tilable_depth"] == 2 and r["parallel_loops"] == 0


def test_options_variants_and_compiled_time():
    records = compare_schedulers("mvt", [("pluto", {"tile": 8}), "limlam"], compile=True, sizes="MINI", runs=1)
    assert [r["label"] for r in records] == ["pluto(tile=8)", "limlam"]
    for r in records:
        assert r["compiled_seconds"] > 0 and r["sizes"] == po.suite.get("mvt").sizes("MINI")


def test_sync_free_degree_of_a_schedule():
    scop = po.suite.get("syrk").kernel.scop
    assert sync_free_degree(po.schedule(scop, "limlam")) == 2
    assert sync_free_degree(po.schedule(scop, "original")) == 0


def test_dataframe_or_a_clear_message(records):
    if importlib.util.find_spec("pandas") is None:
        with pytest.raises(ImportError, match="pandas"):
            records_to_dataframe(records)
    else:
        frame = records_to_dataframe(records)
        assert len(frame) == len(records) and "sync_free_degree" in frame.columns
