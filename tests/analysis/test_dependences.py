"""Value-based dependences (RAW, WAR, WAW) of known kernels."""
from __future__ import annotations

import islpy as isl
import numpy as np

import polyopt as po
from polyopt import f64


gemm = po.suite.get("gemm").kernel  # the suite's definition, shared by every test


@po.kernel
def recurrence(A: f64["N"], B: f64["N"]):
    for i in range(1, N):
        A[i] = A[i - 1] + B[i]


jacobi_1d = po.suite.get("jacobi-1d").kernel  # the suite's definition


@po.kernel
def overwritten(A: f64["N"], B: f64["N"], C: f64["N"]):
    for i in range(N):
        A[i] = 1.0            # S0: killed by S1 for every reader
    for i in range(N):
        A[i] = B[i]           # S1
    for i in range(N):
        C[i] = A[i]           # S2: reads S1's value only
    for i in range(N):
        A[i] = 2.0            # S3: overwrites after the read (WAR S2 -> S3, WAW S1 -> S3 only)


@po.kernel
def accumulate(TSTEPS: int, A: f64["N"]):
    for t in range(TSTEPS):
        A[0] = A[0] + 1.0


def umap(text):
    return isl.UnionMap(text)


def same(relation, text, scop):
    """isl equality, both sides restricted to the scop's context."""
    return relation.intersect_params(scop.context).is_equal(umap(text).intersect_params(scop.context))


def test_gemm():
    scop = gemm.scop
    deps = po.dependences(scop)
    p = "[NI, NJ, NK] -> "
    carried = p + "{ S1[i, k, j] -> S1[i, k + 1, j] : 0 <= i < NI and 0 <= k < NK - 1 and 0 <= j < NJ }"
    both = p + "{ S1[i, k, j] -> S1[i, k + 1, j] : 0 <= i < NI and 0 <= k < NK - 1 and 0 <= j < NJ; " \
               "S0[i, j] -> S1[i, 0, j] : 0 <= i < NI and 0 <= j < NJ and NK > 0 }"  # init, then carried
    for kind in (deps.raw, deps.war, deps.waw):
        assert same(kind, both, scop)
    # the k loop carries them: distance (0, 1, 0) on S1
    s1 = deps.raw.extract_map(isl.Space.create_from_names(
        isl.DEFAULT_CONTEXT, in_=["i", "k", "j"], out=["i2", "k2", "j2"], params=list(scop.params))
        .set_tuple_name(isl.dim_type.in_, "S1").set_tuple_name(isl.dim_type.out, "S1"))
    assert s1.is_equal(isl.Map(carried).intersect_params(scop.context))
    assert s1.deltas().is_equal(isl.Set(p + "{ S1[0, 1, 0] : NI > 0 and NJ > 0 and NK > 1 }"))
    edges = {(kind, src, sink, array) for kind, src, sink, array, _ in deps.edges()}
    assert edges == {(k, s, "S1", "C") for k in ("RAW", "WAR", "WAW") for s in ("S0", "S1")}
    assert same(deps.all, both, scop)


def test_recurrence_raw_distance_one():
    scop = recurrence.scop
    deps = po.dependences(scop)
    assert same(deps.raw, "[N] -> { S0[i] -> S0[i + 1] : 1 <= i < N - 1 }", scop)
    assert deps.raw.deltas().is_equal(
        isl.UnionSet("[N] -> { S0[1] : N >= 3 }").intersect_params(scop.context))
    assert deps.war.is_empty() and deps.waw.is_empty()


def test_jacobi_1d_two_statement_time_loop():
    scop = jacobi_1d.scop
    deps = po.dependences(scop)
    p = "[N, TSTEPS] -> "
    within = "0 <= t < TSTEPS and 1 <= i < N - 1 and 1 <= i2 < N - 1 and -1 <= i2 - i <= 1"
    across = "0 <= t < TSTEPS - 1 and 1 <= i < N - 1 and 1 <= i2 < N - 1 and -1 <= i2 - i <= 1"
    # B written by S0 is read by S1 of the same t; A written by S1 is read by S0 of the next t
    assert same(deps.raw, p + f"{{ S0[t, i] -> S1[t, i2] : {within}; S1[t, i] -> S0[t + 1, i2] : {across} }}", scop)
    # S0 reads A before S1 of the same t overwrites it; S1 reads B before S0 of t + 1 does
    assert same(deps.war, p + f"{{ S0[t, i] -> S1[t, i2] : {within}; S1[t, i] -> S0[t + 1, i2] : {across} }}", scop)
    # each statement overwrites its own array one time step later
    assert same(deps.waw, p + "{ S0[t, i] -> S0[t + 1, i] : 0 <= t < TSTEPS - 1 and 1 <= i < N - 1; "
                              "S1[t, i] -> S1[t + 1, i] : 0 <= t < TSTEPS - 1 and 1 <= i < N - 1 }", scop)
    kinds = {}
    for kind, src, sink, array, rel in deps.edges():
        kinds.setdefault(kind, set()).add((src, sink, array))
    assert kinds["RAW"] == {("S0", "S1", "B"), ("S1", "S0", "A")}
    assert kinds["WAW"] == {("S0", "S0", "B"), ("S1", "S1", "A")}
    # a WAR edge is labelled with the array of its (writing) sink
    assert kinds["WAR"] == {("S0", "S1", "A"), ("S1", "S0", "B")}


def test_value_based_dependences_skip_killed_writes():
    scop = overwritten.scop
    deps = po.dependences(scop)
    p = "[N] -> "
    assert same(deps.raw, p + "{ S1[i] -> S2[i] : 0 <= i < N }", scop)
    assert same(deps.war, p + "{ S2[i] -> S3[i] : 0 <= i < N }", scop)
    # S0 -> S3 (memory-based) is killed by S1
    assert same(deps.waw, p + "{ S0[i] -> S1[i] : 0 <= i < N; S1[i] -> S3[i] : 0 <= i < N }", scop)
    sources = {src for _, src, _, _, _ in deps.edges() if src == "S0"}
    assert sources == {"S0"}  # S0 only as the source of the WAW to S1
    assert not any(src == "S0" and sink in ("S2", "S3") for _, src, sink, _, _ in deps.edges())


def test_value_based_dependences_are_not_transitive():
    scop = accumulate.scop
    deps = po.dependences(scop)
    expected = "[TSTEPS] -> { S0[t] -> S0[t + 1] : 0 <= t < TSTEPS - 1 }"
    assert same(deps.raw, expected, scop)
    assert same(deps.waw, expected, scop)
    assert same(deps.war, expected, scop)  # the read of t comes before the write of t + 1


def test_computed_once_and_all_is_the_union():
    scop = jacobi_1d.scop
    deps = po.dependences(scop)
    assert po.dependences(scop) is deps
    assert isinstance(deps, po.Dependences) and deps.scop is scop
    assert deps.all.is_equal(deps.raw.union(deps.war).union(deps.waw))
    assert deps.by_kind().keys() == {"RAW", "WAR", "WAW"}
    assert deps.by_kind()["RAW"] is deps.raw
    # a new parse of the same source is another Scop with its own dependences
    other = jacobi_1d.with_dtype("f64").scop
    assert other is not scop and po.dependences(other) is not deps
    assert po.dependences(other).all.is_equal(deps.all)


def test_tagged_relations_keep_the_references():
    deps = po.dependences(recurrence.scop)
    tagged = deps.tagged_raw
    spaces = []
    tagged.foreach_map(lambda m: spaces.append(str(m.get_space())))
    assert len(spaces) == 1 and "S0_R" in spaces[0]
    assert deps.raw.is_equal(tagged.domain_factor_domain().range_factor_domain())


def test_summary_mentions_each_kind():
    for kernel in (gemm, jacobi_1d):
        text = po.dependences(kernel.scop).summary()
        assert text.startswith(f"dependences of {kernel.name}: ")
        for kind in ("RAW", "WAR", "WAW"):
            assert any(line.lstrip().startswith(kind + " ") for line in text.splitlines()[1:])
        assert str(po.dependences(kernel.scop)) == text
    text = po.dependences(gemm.scop).summary()
    assert "2 RAW, 2 WAR, 2 WAW" in text
    assert "RAW S0 -> S1 on C" in text and "WAW S1 -> S1 on C" in text
    empty = po.dependences(recurrence.scop).summary()
    assert "1 RAW, 0 WAR, 0 WAW" in empty


def test_no_dependences_in_an_embarrassingly_parallel_kernel():
    k = po.kernel_from_source('''
def copy(A: f64["N", "M"], B: f64["N", "M"]):
    for i in range(N):
        for j in range(M):
            B[i, j] = 2.0 * A[i, j]
''')
    deps = po.dependences(k.scop)
    assert deps.all.is_empty() and deps.edges() == []
    assert "0 RAW, 0 WAR, 0 WAW" in deps.summary()


def test_local_scalar_dependences():
    k = po.kernel_from_source('''
def dot(A: f64["N"], B: f64["N"], out: f64["1"]):
    s = 0.0
    for i in range(N):
        s += A[i] * B[i]
    out[0] = s
''')
    deps = po.dependences(k.scop)
    scop = k.scop
    assert same(deps.raw, "[N] -> { S0[] -> S1[0] : N > 0; S1[i] -> S1[i + 1] : 0 <= i < N - 1; "
                          "S1[i] -> S2[] : i = N - 1 and N > 0; S0[] -> S2[] : N = 0 }", scop)


OVERWRITTEN = '''def overwritten(A: f64["N"], B: f64["N"], C: f64["N"]):
    for i in range(N):
        A[i] = 1.0
    for i in range(N):
        A[i] = B[i]
    for i in range(N):
        C[i] = A[i]
    for i in range(N):
        A[i] = 2.0
'''


def test_analysis_past_its_budget_is_memory_based_and_says_so(monkeypatch):
    """Where the exact analysis of a kind on an array exceeds its isl operation budget, that part
    becomes the memory-based dependences: a superset (S0 -> S2, killed by S1, comes back), named
    in ``approximated`` and in the trace of every schedule, and still scheduled correctly."""
    from polyopt.analysis import deps as deps_module

    exact_kernel = po.kernel_from_source(OVERWRITTEN)
    exact = po.dependences(exact_kernel.scop)
    assert exact.approximated == ()
    monkeypatch.setattr(deps_module, "FLOW_BUDGET", 1)
    kernel = po.kernel_from_source(OVERWRITTEN)   # a fresh Scop: dependences are cached per Scop
    scop = kernel.scop
    approx = po.dependences(scop)
    assert {line.split(":")[0] for line in approx.approximated} == {f"{kind} on {array}" for array in "AC"
                                                                     for kind in ("RAW", "WAR", "WAW")}
    assert "approximated: RAW on A: memory-based" in approx.summary()
    for kind in ("raw", "war", "waw"):
        assert getattr(exact, kind).is_subset(getattr(approx, kind))
    killed = "[N] -> { S0[i] -> S2[i] : 0 <= i < N }"
    assert not same(exact.raw.intersect(umap(killed)), killed, exact_kernel.scop)
    assert same(approx.raw.intersect(umap(killed)), killed, scop)
    a, b, c = (np.random.default_rng(k).random(9) for k in range(3))
    expected = [x.copy() for x in (a, b, c)]
    po.interpret(kernel, *expected)
    for algorithm in ("pluto", "feautrier"):
        sched = po.schedule(scop, algorithm)
        assert "dependences: RAW on A: memory-based" in " ".join(sched.notes)
        po.verify(scop, sched)
        got = [x.copy() for x in (a, b, c)]
        po.compile(kernel, algorithm=algorithm)(*got)
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=1e-12)


# A random nest with stride-2 loops and coefficient-2 subscripts (issue 19): isl's exact analysis
# of array A ran for minutes (RAW alone over 100 s); under the budget it takes seconds. (Our
# schedulers' Farkas dual cones of these dependences still take minutes: issue 19, open.)
STRIDED_COEFFICIENT_2 = '''def nest(A: f64["9 * N + 40", "9 * N + 40"], B: f64["9 * N + 40"]):
    for i0_1 in range(1, N, 2):
        for i0_2 in range(0, i0_1 + 1):
            for i0_3 in range(i0_1, max(0, i0_1 - 3), -1):
                A[i0_1 + 2 * i0_2 + 10, i0_3 + 0] += 0.5 * A[(N - 1 - i0_1) + (N - 1 - i0_3) + 10, i0_2 + 3] + 0.5 * B[i0_1 + 2 * i0_2 + 4]
                B[10] += 0.5 * A[i0_1 + i0_2 + (N - 1 - i0_3) + 5, i0_2 + 4] + 0.5 * A[i0_2 + i0_3 + 2, 7]
                for i0_4 in range(0, N - 1):
                    A[i0_1 + i0_3 + 7, i0_1 + i0_2 + 9] += 0.5 * A[i0_2 + 4, i0_4 + 5]
                    A[2 * i0_1 + i0_2 + 2 * i0_3 + i0_4 + 6, 2 * i0_1 + i0_2 + 2 * i0_4 + 1] += 0.5 * A[i0_1 + 2 * i0_2 + 3, i0_2 + i0_3 + (N - 1 - i0_4) + 7]
'''


def test_exploding_exact_analysis_is_bounded():
    kernel = po.kernel_from_source(STRIDED_COEFFICIENT_2)
    deps = po.dependences(kernel.scop)
    assert {line.split(":")[0] for line in deps.approximated} == {"RAW on A", "WAR on A", "WAW on A"}
