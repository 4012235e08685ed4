"""Parallel loops on a libgomp thread team and vectorization hints in the LLVM backend.

Suite kernels with parallel loops (outer loops, and wavefronts where the parallel loop sits in a
sequential front loop) match their numpy reference on 1, 2 and 4 threads; the IR starts a thread
team exactly where the schedule marks a parallel loop, as the C emitter's OpenMP pragmas do;
without libgomp the code runs sequentially; the hot loops use the host's widest vectors.
"""
from __future__ import annotations

import re
from dataclasses import replace

import llvmlite.binding as llvm
import numpy as np
import pytest

import polyopt as po
from polyopt import f64
from polyopt.targets.cbuild import CBuiltKernel, find_compiler
from polyopt.codegen import llvm as llvm_backend
from polyopt.codegen.loop_nodes import Block, For, If, Node, nodes, runs_on_threads
from polyopt.codegen.ast_interpreter import run_loop_ast
from polyopt.targets.arguments import bind_arguments

RTOL, ATOL = 1e-9, 1e-12
THREADS = (1, 2, 4)

# (kernel, options): outer parallel loops tiled and untiled, wavefronts of tiles (jacobi-2d, seidel-2d),
# several parallel nests in one kernel (covariance, 2mm), triangular loops (trmm, syrk)
PARALLEL_CASES = [
    ("gemm", {}), ("gemm", {"tile": 32}), ("2mm", {"tile": 32}), ("covariance", {}),
    ("gesummv", {}), ("jacobi-2d", {"tile": 32}), ("seidel-2d", {"tile": 32}),
    ("trmm", {}), ("syrk", {"tile": 32}),
]


def _copies(args: dict) -> dict:
    return {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in args.items()}


def _check(entry, run, preset: str = "SMALL") -> None:
    """``run(**args)`` leaves the arrays equal to the numpy reference's."""
    args = entry.inputs(entry.sizes(preset))
    expected = _copies(args)
    entry.reference(**expected)
    run(**args)
    for name, value in expected.items():
        if isinstance(value, np.ndarray):
            np.testing.assert_allclose(args[name], value, rtol=RTOL, atol=ATOL, err_msg=name)


def _bound(scop, args: dict) -> tuple:
    bound = bind_arguments(scop, (), args)
    return bound.params, bound.scalars, bound.arrays


def _loops(node: Node):
    return [n for n in nodes(node) if isinstance(n, For)]


def _outermost_threaded(node: Node) -> int:
    """Loops that run on threads, not nested in another such loop."""
    if runs_on_threads(node):
        return 1
    children = {For: lambda n: [n.body], If: lambda n: [n.then, n.otherwise], Block: lambda n: n.body}
    return sum(_outermost_threaded(c) for c in children.get(type(node), lambda n: [])(node) if c is not None)


def _fronts(node: Node) -> list[For]:
    """Sequential loops around a loop that runs on threads (wavefront fronts)."""
    return [loop for loop in _loops(node) if not loop.parallel
            and any(runs_on_threads(inner) for inner in _loops(loop.body))]


def _team_starts(ir_text: str) -> int:
    return len(re.findall(r'call void @"GOMP_parallel"\(', ir_text))


def _with_loops(compiled: po.CompiledKernel, loops: Node, *, parallel: bool | None = None) -> po.CompiledKernel:
    """``compiled`` with its native code regenerated from ``loops``."""
    ir_text = llvm_backend.llvm_ir(compiled.scop, loops, compiled.function_name, parallel=parallel)
    return replace(compiled, loops=loops, llvm_ir=ir_text,
                   native=llvm_backend.jit_compile(ir_text, compiled.function_name))


@pytest.mark.parametrize("name,options", PARALLEL_CASES, ids=[f"{n}-{o.get('tile', 'untiled')}" for n, o in PARALLEL_CASES])
def test_parallel_kernels_match_reference(name, options):
    entry = po.suite.get(name)
    compiled = po.compile(entry.kernel, algorithm="pluto", **options)
    po.verify(entry.kernel.scop, compiled.schedule)
    assert any(runs_on_threads(loop) for loop in _loops(compiled.loops))
    assert _team_starts(compiled.llvm_ir) >= 1
    for threads in THREADS:
        _check(entry, lambda **args: compiled(**args, num_threads=threads))
    # the same schedule with tiles small enough for many tiles at MINI, its parallel loops run
    # backwards in Python: any dependence a parallel loop carries shows on every run
    small_tiles = {**options, "tile": 4} if "tile" in options else options
    small = po.compile(entry.kernel, algorithm="pluto", **small_tiles)
    scop = entry.kernel.scop
    _check(entry, lambda **args: run_loop_ast(scop, small.loops, *_bound(scop, args)), preset="MINI")


def test_wavefront_is_one_team_with_barriers():
    """jacobi-2d's parallel tile loop sits in a sequential front loop: one team walks all fronts."""
    compiled = po.compile(po.suite.get("jacobi-2d").kernel, algorithm="pluto", tile=32)
    assert _fronts(compiled.loops)
    assert _team_starts(compiled.llvm_ir) == 1
    assert '@"GOMP_barrier"()' in compiled.llvm_ir


def test_no_team_without_parallel_loops():
    gemm = po.suite.get("gemm").kernel
    assert "GOMP" not in po.compile(gemm, algorithm="original").llvm_ir


def test_innermost_parallel_loops_are_vectorized_not_threaded():
    """trisolv's parallel loop is innermost: a team start or a barrier per iteration of the
    loop around it would cost more than its work, so neither emitter threads it."""
    entry = po.suite.get("trisolv")
    compiled = po.compile(entry.kernel, algorithm="pluto", model=False)  # untiled: no wavefront team
    marked = [loop for loop in _loops(compiled.loops) if loop.parallel]
    assert marked and not any(runs_on_threads(loop) for loop in marked)
    assert "GOMP" not in compiled.llvm_ir and "#pragma omp" not in compiled.c_source
    assert "llvm.loop.parallel_accesses" in compiled.llvm_ir
    _check(entry, lambda **args: compiled(**args, num_threads=2))


@pytest.mark.parametrize("name,options", PARALLEL_CASES[:6], ids=[f"{n}-{o.get('tile', 'untiled')}" for n, o in PARALLEL_CASES[:6]])
def test_c_pragmas_match_thread_teams(name, options):
    """The C emitter puts ``#pragma omp parallel for`` on exactly the parallel loops that are
    not inside another parallel loop, and the LLVM code starts a team for each of them (or one
    team for a front loop around them)."""
    compiled = po.compile(po.suite.get(name).kernel, algorithm="pluto", **options)
    pragmas = compiled.c_source.count("#pragma omp parallel for")
    assert pragmas == _outermost_threaded(compiled.loops) >= 1
    if not _fronts(compiled.loops):
        assert _team_starts(compiled.llvm_ir) == pragmas
    else:
        assert 1 <= _team_starts(compiled.llvm_ir) <= pragmas


@pytest.mark.skipif(find_compiler() is None, reason="no C compiler")
def test_c_openmp_build_of_a_wavefront_matches_reference():
    entry = po.suite.get("jacobi-2d")
    compiled = po.compile(entry.kernel, algorithm="pluto", tile=32)
    _check(entry, CBuiltKernel(compiled, openmp=True))


def test_nested_parallel_loop_runs_sequentially():
    """A parallel loop inside another one's iterations is not shared out again."""
    entry = po.suite.get("gemm")
    compiled = po.compile(entry.kernel, algorithm="pluto")

    # gemm's second nest: c0 (parallel) > c1 (k, sequential) > c2 (j, parallel): mark c2 too
    def mark_innermost(node: Node) -> Node:
        if isinstance(node, For):
            innermost = not any(True for _ in _loops(node.body))
            return replace(node, parallel=node.parallel or innermost, body=mark_innermost(node.body))
        if isinstance(node, Block):
            return Block(tuple(mark_innermost(c) for c in node.body))
        return node

    nested = _with_loops(compiled, mark_innermost(compiled.loops))
    assert _team_starts(nested.llvm_ir) == _team_starts(compiled.llvm_ir) == 2
    assert "llvm.loop.parallel_accesses" in nested.llvm_ir
    for threads in THREADS:
        _check(entry, lambda **args: nested(**args, num_threads=threads))


@po.kernel
def prefix_then_planes(A: f64["T", "N", "M"], s: f64["T"]):
    for t in range(1, T):
        s[t] = s[t - 1] + 1.0
        for i in range(N):
            for j in range(M):
                A[t, i, j] = A[t - 1, i, j] * 0.5 + s[t]


def test_front_loop_runs_its_sequential_statements_once():
    """In a front loop, a statement outside the parallel loop runs on one thread, before the
    others use its result."""
    compiled = po.compile(prefix_then_planes, algorithm="original")
    front = compiled.loops
    prefix, rows = front.body.body
    assert isinstance(rows, For) and isinstance(rows.body, For)
    team = _with_loops(compiled, replace(front, body=Block((prefix, replace(rows, parallel=True)))))
    assert _team_starts(team.llvm_ir) == 1 and '@"GOMP_barrier"()' in team.llvm_ir
    rng = np.random.default_rng(3)
    for threads in THREADS:
        A, s = rng.random((9, 13, 6)), rng.random(9)
        expected_A, expected_s = A.copy(), s.copy()
        po.interpret(prefix_then_planes, expected_A, expected_s)
        team(A, s, num_threads=threads)
        np.testing.assert_allclose(s, expected_s, rtol=RTOL)
        np.testing.assert_allclose(A, expected_A, rtol=RTOL)


def test_without_libgomp_parallel_loops_run_sequentially(monkeypatch):
    monkeypatch.setattr(llvm_backend.ctypes.util, "find_library", lambda name: None)
    with pytest.warns(RuntimeWarning, match="libgomp"):
        assert llvm_backend.openmp_available.__wrapped__() is False
    monkeypatch.setattr(llvm_backend, "openmp_available", lambda: False)
    entry = po.suite.get("jacobi-2d")
    compiled = po.compile(entry.kernel, algorithm="pluto", tile=32)
    sequential = _with_loops(compiled, compiled.loops)
    assert "GOMP" not in sequential.llvm_ir and "omp_get" not in sequential.llvm_ir
    _check(entry, lambda **args: sequential(**args, num_threads=2))


def test_num_threads_option_and_keyword():
    entry = po.suite.get("gemm")
    default = po.compile(entry.kernel, algorithm="pluto")
    two = po.compile(entry.kernel, algorithm="pluto", num_threads=2)
    assert two.num_threads == 2 and default.num_threads is None
    assert two.native is default.native  # the thread count is a call argument, not compiled in
    _check(entry, two)
    _check(entry, lambda **args: two(**args, num_threads=3))
    with pytest.raises(ValueError, match="num_threads"):
        po.compile(entry.kernel, num_threads=0)
    with pytest.raises(ValueError, match="target='cpu'"):
        po.compile(entry.kernel, target="cuda", num_threads=2)
    with pytest.raises(TypeError, match="num_threads"):
        _check(entry, lambda **args: default(**args, num_threads=1.5))


def test_misaligned_array_is_refused():
    @po.kernel
    def scale(A: f64["N"]):
        for i in range(N):
            A[i] = A[i] * 2.0

    buffer = np.zeros(8 * 10 + 1, np.uint8)
    misaligned = buffer[1:].view(np.float64)
    assert not misaligned.flags.aligned
    with pytest.raises(ValueError, match="aligned"):
        scale(misaligned)


@pytest.mark.parametrize("algorithm,options", [("original", {}), ("pluto", {"tile": 32})])
def test_gemm_hot_loop_uses_widest_vectors(algorithm, options):
    lanes = llvm_backend._widest_vector_bits() // 64
    if lanes < 4:
        pytest.skip("host has no 256- or 512-bit vectors")
    compiled = po.compile(po.suite.get("gemm").kernel, algorithm=algorithm, **options)
    assert f'"prefer-vector-width"="{lanes * 64}"' in compiled.llvm_ir
    vector = re.escape(f"<{lanes} x double>")
    # the k-j multiply-add of C[i][j] += alpha * A[i][k] * B[k][j], on full-width vectors
    assert re.search(rf"(fmul|fadd) [a-z ]*{vector}|@llvm\.fma\.v{lanes}f64", compiled.optimized_ir)
    assert re.search(rf"load {vector}", compiled.optimized_ir)


def test_parallel_innermost_loop_declares_its_accesses_parallel():
    """gesummv's innermost loops are marked parallel (with its epilogue in its own nest, as
    before the cost model fused it): the loop ID of each names an access group
    (``llvm.loop.parallel_accesses``) that every array load and store in its body carries, and
    the loop is vectorized."""
    compiled = po.compile(po.suite.get("gesummv").kernel, algorithm="pluto", epilogues=False)
    text = compiled.llvm_ir
    groups = re.findall(r'!"llvm.loop.parallel_accesses", (![0-9]+)', text)
    assert groups
    tagged = {group: re.findall(rf"(load|store) [^\n]*!llvm.access.group {group}\b", text) for group in groups}
    assert all(tagged.values()) and {"load", "store"} <= {kind for kinds in tagged.values() for kind in kinds}
    lanes = _sum_vector_bits() // 64  # (its regions sum in order too)
    assert f"<{lanes} x double>" in compiled.optimized_ir


def _sum_vector_bits() -> int:
    """The vectors a function with in-order sums prefers on this host."""
    return min(llvm_backend._widest_vector_bits(), llvm_backend.ORDERED_SUM_VECTOR_BITS)


def test_functions_with_in_order_sums_prefer_256_bit_vectors_on_wider_hosts(monkeypatch):
    """On an AVX-512 host (stood in for) the functions whose innermost loops the vectorizer may
    take as in-order sums prefer 256-bit vectors; the others -- gemm's register tiles, loops
    without sums -- the host's widest, and a parallel region's trampoline what its region does."""
    monkeypatch.setattr(llvm_backend, "_widest_vector_bits", lambda: 512)
    widths = lambda compiled: re.findall(r'^define [^\n]*"prefer-vector-width"="(\d+)"',  # noqa: E731
                                         llvm_backend.llvm_ir(compiled.scop, compiled.loops, "f", parallel=True),
                                         re.MULTILINE)
    assert widths(po.compile(_matvec_pair, algorithm="original")) == ["256"]
    assert set(widths(po.compile(po.suite.get("gemm").kernel))) == {"512"}
    syrk = widths(po.compile(po.suite.get("syrk").kernel))  # its scaling region, and its sums' region
    assert syrk == ["512", "512", "512", "256", "256"]


@po.kernel
def _matvec_pair(A: f64["N", "N"], x: f64["N"], y: f64["N"], z: f64["N"]):
    for i in range(N):
        for j in range(N):
            y[i] = y[i] + A[i, j] * x[j]  # accumulates into y[i] along j
        for j in range(N):
            z[j] = z[j] + A[i, j] * x[i]  # a new z[j] every j


def test_accumulation_along_innermost_loop_is_in_order_uncontracted_and_vectorized():
    """The ``y[i]`` sum keeps its multiply apart from its add (no FMA on the loop-carried chain),
    the ``z[j]`` update may contract; the sum is vectorized as an in-order reduction (vector
    multiplies, adds in the original order), so it equals a Python loop to the last bit."""
    compiled = po.compile(_matvec_pair, algorithm="original")
    arithmetic = re.findall(r"= (f(?:add|mul)[a-z ]*) double", compiled.llvm_ir)
    assert arithmetic == ["fmul", "fadd", "fmul contract", "fadd contract"]
    lanes = _sum_vector_bits() // 64
    if lanes >= 4:
        assert re.search(rf"= fmul <{lanes} x double>", compiled.optimized_ir)
        assert "@llvm.vector.reduce.fadd" in compiled.optimized_ir
    n = 37
    rng = np.random.default_rng(0)
    A, x, y, z = rng.random((n, n)), rng.random(n), rng.random(n), rng.random(n)
    expected = y.copy()
    for i in range(n):
        total = expected[i]
        for j in range(n):
            total = total + A[i, j] * x[j]
        expected[i] = total
    compiled(A, x, y, z)
    assert np.array_equal(y, expected)


def test_strided_accumulation_is_left_scalar():
    """doitgen's original order sums ``A[r][q][s] * C4[s][p]`` along ``s`` (a column of C4):
    that loop is marked not to be vectorized (gathers for the multiplies of an in-order sum do
    not pay); the loops of :func:`_matvec_pair`, contiguous, are not marked."""
    doitgen = po.compile(po.suite.get("doitgen").kernel, algorithm="original")
    assert '!"llvm.loop.vectorize.enable", i1 0' in doitgen.llvm_ir
    assert "vectorize.enable\", i1 0" not in po.compile(_matvec_pair, algorithm="original").llvm_ir
    _check(po.suite.get("doitgen"), doitgen)


@pytest.mark.parametrize("name", ["fdtd-2d", "adi", "jacobi-2d"])
def test_original_order_with_parallel_marks(name):
    """``algorithm="original", parallel=True`` keeps the written order (same schedule map) and
    marks the loops that carry no dependence, inside sequential loops too: fdtd-2d's three nests
    in its time loop run on one thread team (a front loop), and the result matches numpy."""
    entry = po.suite.get(name)
    scop = entry.kernel.scop
    compiled = po.compile(entry.kernel, algorithm="original", parallel=True)
    assert compiled.schedule.tree.get_map().is_equal(scop.schedule.get_map())
    po.verify(scop, compiled.schedule)
    threaded = [loop for loop in _loops(compiled.loops) if runs_on_threads(loop)]
    if name == "fdtd-2d":
        assert len(threaded) == 3 and len(_fronts(compiled.loops)) == 1
        assert _team_starts(compiled.llvm_ir) == 1
    assert threaded
    for threads in THREADS:
        _check(entry, lambda **args: compiled(**args, num_threads=threads))


def test_pluto_marks_parallel_loops_below_a_sequential_untiled_band():
    """gramschmidt's untiled Pluto schedule has no parallel loop in its outer band (k): the
    parallel loops of the nests inside it run on the thread team, and the result matches numpy."""
    entry = po.suite.get("gramschmidt")
    compiled = po.compile(entry.kernel, algorithm="pluto")
    assert _fronts(compiled.loops) and any(runs_on_threads(loop) for loop in _loops(compiled.loops))
    assert not any(loop.parallel for loop in _fronts(compiled.loops))
    for threads in THREADS:
        _check(entry, lambda **args: compiled(**args, num_threads=threads))


def test_register_tile_sums_keep_their_fmas():
    """gemm's register tile accumulates 32 elements of C along k in one loop: throughput, not
    one chain's latency, counts there, so every multiply-add stays contractible into an FMA."""
    compiled = po.compile(po.suite.get("gemm").kernel, algorithm="pluto", tile="auto", register_tile="auto")
    assert re.findall(r"= f(?:add|mul) contract double", compiled.llvm_ir)
    assert not re.findall(r"= f(?:add|mul) double", compiled.llvm_ir)


@pytest.mark.skipif(llvm.llvm_version_info < (18,), reason="LLVM before 18 does not widen overlap checks")
def test_in_place_tile_rows_keep_their_overlap_check_per_row():
    """A tile of floyd-warshall's in-place ``path[i][j]`` update checks its row against row
    ``path[k]`` and ``path[i][k]`` before each run of the vector loop (``vector.memcheck``):
    LLVM's widened check over all the tile's rows always overlaps, and the vector loop never ran
    (about 2x slower on two threads). The result is still the reference's, on one thread and on
    two."""
    entry = po.suite.get("floyd-warshall")
    compiled = po.compile(entry.kernel, tile=[32, 32])
    assert "vector.memcheck" in compiled.optimized_ir
    assert re.search(r"<[48] x double>", compiled.optimized_ir)
    for threads in (1, 2):
        _check(entry, lambda **args: compiled(**args, num_threads=threads))
