"""Dependences and loops as data (polyopt.analysis.loops): distance and direction vectors of the
original iteration spaces, and per loop of a schedule what it carries, its flags and distances."""
from __future__ import annotations

import islpy as isl
import pytest

import polyopt as po
from polyopt import f64
from polyopt.analysis.loops import (Dependence, LoopAnalysis, LoopInfo, dependence_list, loop_analysis,
                                    loop_table, tilable_depth)
from polyopt.transform.schedule import tree_statistics


gemm = po.suite.get("gemm").kernel
jacobi_1d = po.suite.get("jacobi-1d").kernel
jacobi_2d = po.suite.get("jacobi-2d").kernel


@po.kernel
def doubling(A: f64["N"]):
    for i in range(1, N):
        A[2 * i] = A[i] + 1.0        # RAW S0[i] -> S0[2i]: distance i, not uniform


@po.kernel
def all_pairs(A: f64["N"]):
    for i in range(N):
        for j in range(N):
            A[i] = A[i] + A[j]       # the read of A[j] meets writes at both later and earlier j


def by_kind(deps) -> dict[str, set[tuple]]:
    found: dict[str, set[tuple]] = {}
    for d in deps:
        found.setdefault(d.kind, set()).add((d.source, d.sink, d.array, d.distance))
    return found


# ----- dependence_list ---------------------------------------------------------------------------

def test_jacobi_1d_distance_vectors_of_the_stencil():
    deps = dependence_list(jacobi_1d)
    assert all(isinstance(d, Dependence) and d.uniform for d in deps)
    raw_a = sorted(d.distance for d in deps if d.kind == "RAW" and (d.source, d.sink, d.array) == ("S1", "S0", "A"))
    assert raw_a == [(1, -1), (1, 0), (1, 1)]
    raw_b = sorted(d.distance for d in deps if d.kind == "RAW" and (d.source, d.sink, d.array) == ("S0", "S1", "B"))
    assert raw_b == [(0, -1), (0, 0), (0, 1)]
    waw = {(d.source, d.sink, d.array, d.distance) for d in deps if d.kind == "WAW"}
    assert waw == {("S0", "S0", "B", (1, 0)), ("S1", "S1", "A", (1, 0))}
    directions = {d.distance: d.direction for d in deps if d.kind == "RAW" and d.sink == "S0"}
    assert directions == {(1, -1): ("<", ">"), (1, 0): ("<", "="), (1, 1): ("<", "<")}
    # one piece per read reference: three reads of A, three pieces, three references
    assert len({d.sink_ref for d in deps if d.kind == "RAW" and d.sink == "S0"}) == 3
    # only the time loop encloses both statements; one statement's two loops are both its own
    assert {d.shared_loops for d in deps if d.source != d.sink} == {1}
    assert {d.shared_loops for d in deps if d.source == d.sink} == {2}
    assert not any(d.approximate for d in deps)
    # the relations are the dependence analysis' own, piece by piece
    union = isl.UnionMap.empty(jacobi_1d.scop.context.get_space())
    for d in deps:
        union = union.union(isl.UnionMap.from_map(d.relation))
    assert union.is_equal(po.dependences(jacobi_1d.scop).all)


def test_gemm_dependences():
    deps = dependence_list(gemm.scop)          # a Scop works as well as a Kernel
    assert by_kind(deps) == {k: {("S0", "S1", "C", None), ("S1", "S1", "C", (0, 1, 0))}
                             for k in ("RAW", "WAR", "WAW")}
    init = [d for d in deps if d.source == "S0"][0]
    # S0[i, j] -> S1[i, 0, j]: dimension 1 compares S0's j with S1's k (0 - j <= 0)
    assert init.direction == ("=", ">=") and init.shared_loops == 1
    assert str(init).startswith("RAW S0 -> S1 on C")


def test_non_uniform_dependences_get_directions_not_distances():
    (raw,) = dependence_list(doubling)
    assert raw.kind == "RAW" and raw.distance is None and not raw.uniform
    assert raw.direction == ("<",)             # distance i >= 1, unbounded above
    pieces = {(d.kind, d.direction) for d in dependence_list(all_pairs)}
    assert ("RAW", ("=", "<")) in pieces       # the A[i] accumulation: (0, 1)
    assert ("RAW", ("<=", "*")) in pieces      # A[j] read: from (j, N-1) or from (i, i-1)
    assert [d.distance for d in dependence_list(all_pairs) if d.direction == ("=", "<")] == [(0, 1)] * 3


# ----- loop_analysis -----------------------------------------------------------------------------

def test_gemm_pluto_k_carries_the_reduction_and_i_j_are_parallel():
    schedule = po.schedule(gemm.scop, "pluto", model=False)  # Pluto's loops, untiled
    loops = loop_analysis(schedule)
    assert isinstance(loops, LoopAnalysis) and all(isinstance(loop, LoopInfo) for loop in loops)
    assert [(loop.statements, loop.expression, loop.depth, loop.band, loop.member) for loop in loops] == [
        (("S0",), "i", 0, 0, 0), (("S0",), "j", 1, 0, 1),
        (("S1",), "i", 0, 1, 0), (("S1",), "k", 1, 1, 1), (("S1",), "j", 2, 1, 2)]
    s1_i, s1_k, s1_j = loops[2:]
    assert s1_i.parallel and s1_j.parallel and not s1_k.parallel
    assert s1_i.marked_parallel and not s1_k.marked_parallel and not s1_j.marked_parallel
    assert [s1_i.coincident, s1_k.coincident, s1_j.coincident] == [True, False, True]
    assert all(loop.permutable for loop in loops)
    assert {(d.kind, d.source, d.sink, d.array, d.distance) for d in s1_k.carried} == {
        (k, "S1", "S1", "C", (0, 1, 0)) for k in ("RAW", "WAR", "WAW")}
    assert [d.distance for d in s1_k.dependences] == [1, 1, 1]
    # i: the reduction reaches it with distance 0; j: not at all (k differs)
    assert [d.distance for d in s1_i.dependences] == [0, 0, 0] and not s1_i.carried
    assert s1_j.dependences == ()
    assert all(loop.carried == () for loop in loops[:2])


def test_jacobi_1d_original_time_loop_carries_the_stencil():
    loops = loop_analysis(po.schedule(jacobi_1d.scop, "original"))
    assert [(loop.statements, loop.expression) for loop in loops] == [
        (("S0", "S1"), "t"), (("S0",), "i"), (("S1",), "i")]
    time, i0, i1 = loops
    assert not time.parallel and i0.parallel and i1.parallel
    carried = time.carried
    assert sorted(d.distance for d in carried if d.kind == "RAW") == [(1, -1), (1, 0), (1, 1)]
    assert {d.kind for d in carried} == {"RAW", "WAR", "WAW"}
    assert all(d.distance == 1 for d in time.dependences if d.carried)
    assert all(d.distance == 0 for d in time.dependences if not d.carried)   # S0 -> S1, same t
    assert not any(loop.coincident or loop.marked_parallel or loop.permutable for loop in loops)


def test_jacobi_1d_pluto_schedule_space_distances():
    loops = loop_analysis(po.schedule(jacobi_1d.scop, "pluto", model=False))  # pluto's skewed loops
    assert [loop.expressions for loop in loops] == [{"S0": "t", "S1": "t"},
                                                    {"S0": "2t + i", "S1": "1 + 2t + i"}]
    time, space = loops
    assert not time.parallel and not space.parallel and time.permutable and space.permutable
    # only S0 -> S1 pieces of one time step reach the skewed loop: 1 + 2t + i' - (2t + i)
    assert {(d.dependence.source, d.dependence.sink) for d in space.dependences} == {("S0", "S1")}
    distances = sorted((d.dependence.distance[1], d.distance) for d in space.dependences if d.dependence.kind == "RAW")
    assert distances == [(-1, 0), (0, 1), (1, 2)]
    assert len(space.carried) == 4                 # distance 0: left to the sequence inside
    assert all(d.distance >= 0 for loop in loops for d in loop.dependences)   # permutable


def test_ranges_where_the_distance_varies():
    (loop,) = loop_analysis(po.schedule(doubling.scop, "original"))
    (at,) = loop.dependences
    assert at.carried and at.distance == (1, None)
    outer, inner = loop_analysis(po.schedule(all_pairs.scop, "original"))
    assert {d.distance for d in outer.dependences} == {0, (0, None)}


def test_tilable_depth():
    assert tilable_depth(po.schedule(jacobi_2d.scop, "pluto", model=False)) == 3
    assert tilable_depth(po.schedule(gemm.scop, "pluto", model=False)) == 3
    assert tilable_depth(po.schedule(jacobi_1d.scop, "original")) == 1   # single-member bands
    assert tilable_depth(po.schedule(jacobi_2d.scop, "pluto", model=False).tree) == 3  # an isl.Schedule too


def test_table():
    loops = loop_analysis(po.schedule(gemm.scop, "pluto", model=False))
    text = str(loops)
    lines = text.splitlines()
    assert text == loops.table() == loop_table(loops)
    assert len(lines) == 1 + len(loops)
    assert lines[0].split() == ["loop", "band", "statements", "par", "mark", "coin", "perm", "carries", "distances",
                                "expression"]
    assert [loop.name for loop in loops] == [loop.name for loop in po.schedule(gemm.scop, "pluto", model=False).loops()]
    k_row = lines[4].split()
    assert k_row[:4] == ["k", "1.1", "S1", "no"] and "1 RAW, 1 WAR, 1 WAW" in lines[4]
    assert lines[5].startswith("    j@S1")                 # indented by depth, named as in the Schedule
    assert str(loops[3]).splitlines()[1].split()[:2] == ["k", "1.1"]


@pytest.mark.parametrize("name", po.suite.names())
def test_every_suite_kernel_with_pluto(name):
    scop = po.suite.get(name).kernel.scop
    deps = po.dependences(scop)
    schedule = po.schedule(scop, "pluto")
    loops = loop_analysis(schedule)
    stats = tree_statistics(schedule.tree)
    members = []
    schedule.tree.get_root().foreach_descendant_top_down(
        lambda n: n.get_type() != isl.schedule_node_type.band or members.append(n.band_n_member()) or True)
    assert len(loops) == sum(members) and len({loop.band for loop in loops}) == stats["bands"]
    assert sum(loop.coincident for loop in loops) == stats["parallel_loops"]
    assert tilable_depth(schedule) == stats["permutable_depth"]
    assert len(dependence_list(scop)) == len(deps.edges())
    for loop in loops:
        assert loop.parallel == (not loop.carried)             # per piece agrees with the union
        assert loop.parallel or not loop.coincident            # coincident: a promise kept
        assert loop.parallel or not loop.marked_parallel       # the verifier checks the same
        assert set(loop.expressions) == set(loop.statements)
        for at in loop.dependences:
            assert at.carried == (at.distance != 0)
            low = at.distance if isinstance(at.distance, int) else at.distance[0]
            assert low is not None and low >= 0               # legal: the first loop that differs
