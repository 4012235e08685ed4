"""Scalar expansion (polyopt/transform/scalar_expansion.py, issue 16): kernel-local scalars whose
reuse alone keeps a loop sequential get one element per iteration, so the loop runs in parallel
(deriche's rows and columns, ludcmp's rows of U, symm's columns); a value carried across
iterations (a running sum) is never expanded along that loop; ``expand_scalars=False`` keeps
the scalars; every expanded kernel matches the interpreter of the original order."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import polyopt as po
from polyopt import f64
from polyopt.codegen.ast_interpreter import run_loop_ast
from polyopt.codegen.loop_nodes import For, nodes, runs_on_threads
from polyopt.errors import ArgumentError, ArgumentTypeError
from polyopt.schedulers.gpu import estimate
from polyopt.targets.arguments import bind_arguments
from polyopt.targets.cuda import plan
from polyopt.transform.scalar_expansion import expand_scalars
from tests.suite_reference import check_against_reference


def threaded_statements(compiled) -> set[str]:
    """The statements inside a parallel loop that runs on the thread team."""
    found = set()
    for node in nodes(compiled.loops):
        if isinstance(node, For) and node.parallel and runs_on_threads(node):
            found |= {n.statement for n in nodes(node) if hasattr(n, "statement")}
    return found


# ----- the suite: deriche, ludcmp -----------------------------------------------------------------

def test_deriche_rows_and_columns_run_on_the_thread_team():
    entry = po.suite.get("deriche")
    compiled = po.compile(entry.kernel, expand_scalars=True)
    expanded = compiled.scop
    assert {"ym1_0", "xm1_0", "yp1_0", "tm1_0"} <= {a.name for a in expanded.arrays.values() if a.temporary}
    assert expanded.arrays["ym1_0"].shape == ("W",) and expanded.arrays["tm1_0"].shape == ("H",)
    assert {"S16", "S24"} <= threaded_statements(compiled)  # the recurrences along j, one row each
    first = compiled.schedule.trace[0]
    assert first.primitive == "expand_scalars" and first.note.startswith("scalar expansion: ym1 -> ym1_0[i]")
    po.verify(expanded, compiled.schedule)
    for sizes in ("MINI", "SMALL"):
        check_against_reference(entry, compiled, sizes)
    check_against_reference(entry, po.compile(entry.kernel, num_threads=2, expand_scalars=True), "SMALL")


def test_ludcmp_rows_of_u_run_on_the_thread_team():
    entry = po.suite.get("ludcmp")
    compiled = po.compile(entry.kernel, expand_scalars=True)
    arrays = compiled.scop.arrays
    assert "w" not in arrays and arrays["w_1"].temporary and arrays["w_1"].shape == ("N",)
    assert all(arrays[name].local and not arrays[name].shape for name in ("w_0", "w_2", "w_3"))
    assert "S4" in threaded_statements(compiled) and "S1" not in threaded_statements(compiled)
    for sizes in ("MINI", "SMALL"):
        check_against_reference(entry, compiled, sizes)
    check_against_reference(entry, po.compile(entry.kernel, num_threads=2, expand_scalars=True), "SMALL")


def test_a_cpu_compile_expands_only_when_asked():
    """Off by default on the CPU (slower under pluto's default fusion there), on for po.schedule
    and the GPU."""
    kernel = po.suite.get("deriche").kernel
    assert po.compile(kernel).scop is kernel.scop
    assert po.schedule(kernel, "pluto").scop is not kernel.scop


@pytest.mark.parametrize("name", ["deriche", "ludcmp"])
def test_expand_scalars_false_keeps_the_old_code(name):
    entry = po.suite.get(name)
    kept = po.compile(entry.kernel, expand_scalars=False)
    assert kept.scop is entry.kernel.scop
    assert not any(a.temporary for a in kept.scop.arrays.values())
    assert all(step.primitive != "expand_scalars" for step in kept.schedule.trace)
    assert not {"S16", "S4"} & threaded_statements(kept)
    check_against_reference(entry, kept)


def test_a_schedule_of_the_expansion_compiles_as_given():
    kernel = po.suite.get("ludcmp").kernel
    pluto = po.schedule(kernel, "pluto")
    assert pluto.scop is expand_scalars(kernel.scop).scop
    check_against_reference("ludcmp", po.compile(kernel, schedule=pluto))
    expanded = po.schedule(pluto.scop, "original")  # the loops as written, of the expanded Scop
    kept = po.schedule(kernel, "original")
    assert kept.scop is kernel.scop and str(expanded.tree) == str(kept.tree)
    a, b = po.compile(kernel, schedule=expanded), po.compile(kernel, schedule=kept)  # one tree, two Scops
    assert a.scop is pluto.scop and b.scop is kernel.scop
    for compiled in (a, b):
        check_against_reference("ludcmp", compiled)
    other = po.suite.get("deriche").kernel
    with pytest.raises(ArgumentError, match="not of the kernel"):
        po.compile(other, schedule=pluto)


def test_the_trace_replays_the_expansion():
    kernel = po.suite.get("deriche").kernel
    s = po.schedule(kernel, "pluto")
    assert s.trace.as_python().splitlines()[1] == "s = s.expand_scalars()"
    again = po.Trace.from_json(s.trace.to_json()).apply(po.schedule(kernel, "original"))
    assert again.scop is s.scop and str(again.tree) == str(s.tree)
    by_hand = po.schedule(kernel, "original").expand_scalars().parallel("i")
    assert "S16" in threaded_statements(po.compile(kernel, schedule=by_hand))
    with pytest.raises(po.IllegalScheduleError, match="S19.* -> S13"):
        po.schedule(kernel, "original").parallel("i")  # the scalars' reuse orders the rows


def test_original_order_expands_only_when_it_runs_loops_in_parallel():
    kernel = po.suite.get("deriche").kernel
    assert po.schedule(kernel, "original").scop is kernel.scop
    assert po.schedule(kernel, "original", parallel=True).scop is expand_scalars(kernel.scop).scop
    with pytest.raises(ArgumentTypeError, match="expand_scalars"):
        po.schedule(kernel, "pluto", expand_scalars="yes")


def test_deriche_on_the_gpu_has_no_serial_one_thread_kernel():
    kernel = po.suite.get("deriche").kernel
    result = plan(kernel)
    assert not estimate(result.scop, result.program).serial, result.program.pretty()
    before = plan(kernel, expand_scalars=False)
    assert estimate(before.scop, before.program).serial
    assert "ym1_0" in result.source.source and "expand_scalars=False" in before.schedule.notes[-1]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_nvcc_builds_the_expanded_deriche(tmp_path):
    (tmp_path / "deriche.cu").write_text(po.cuda_source(po.suite.get("deriche").kernel))
    result = subprocess.run(["nvcc", "-arch=sm_90", "-c", "deriche.cu"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]


CHILD = textwrap.dedent("""
    import json
    import polyopt as po
    from tests.suite_reference import check_against_reference
    compiled = po.compile(po.suite.get("ludcmp").kernel, expand_scalars=True)
    check_against_reference("ludcmp", compiled, "SMALL")
    print(json.dumps({"kind": type(compiled).__name__, "note": compiled.schedule.trace[0].note,
                      "temporaries": [a.name for a in compiled.scop.arrays.values() if a.temporary]}))
""")


def test_a_second_process_loads_the_expanded_kernel_from_disk(tmp_path):
    env = {**os.environ, "POLYOPT_CACHE_DIR": str(tmp_path), "POLYOPT_CACHE": "1"}
    runs = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=300,
                              env=env, cwd=os.path.dirname(os.path.dirname(__file__)))
        assert done.returncode == 0, done.stderr
        runs.append(json.loads(done.stdout.splitlines()[-1]))
    assert [r["kind"] for r in runs] == ["CompiledKernel", "CachedKernel"]
    assert runs[0]["note"] == runs[1]["note"] and runs[1]["temporaries"] == ["w_1"]


C_ROWS = """
void rows(int M, int N, double A[M][N], double y[M]) {
  double s;
#pragma scop
  for (int i = 0; i < M; i++) {
    s = 0.0;
    for (int j = 0; j < N; j++)
      s += A[i][j];
    y[i] = s;
  }
#pragma endscop
}
"""


def test_polyopt_cc_keeps_the_functions_scalars(tmp_path):
    """The C written back has no storage for a temporary: the scalar stays the C variable."""
    pytest.importorskip("pycparser")
    from polyopt.frontends.c_scop import optimize_c_file
    path = tmp_path / "rows.c"
    path.write_text(C_ROWS)
    assert expand_scalars(po.from_c(path)[0].scop).applied  # po.compile would expand it
    text = optimize_c_file(path)
    assert "s_0" not in text and "s = 0.0;" in text
    with pytest.raises(po.FrontendError, match="expand_scalars"):
        optimize_c_file(path, expand_scalars=True)


# ----- small nests ------------------------------------------------------------------------------

@po.kernel
def running_sum(A: f64["N"], B: f64["N"]):
    s = 0.0
    for i in range(N):
        s = s + A[i]
        B[i] = s


@po.kernel
def row_sums(A: f64["M", "N"], x: f64["N"], y: f64["M"]):
    for i in range(M):
        s = 0.0
        for j in range(N):
            s = s + A[i, j] * x[j]
        y[i] = s


@po.kernel
def carried_into_next_row(A: f64["M", "N"], B: f64["M", "N"]):
    t = 0.0
    for i in range(M):
        for j in range(N):
            B[i, j] = t
            t = A[i, j]


@po.kernel
def row_recurrence(A: f64["M", "N"], B: f64["M", "N"]):
    for i in range(M):
        p = 0.0
        q = 0.0
        for j in range(N - 1, -1, -1):
            B[i, j] = 0.5 * A[i, j] + 0.25 * p - 0.125 * q
            q = p
            p = B[i, j]


@po.kernel
def shifted_rows(A: f64["M", "N"], B: f64["M", "N"]):
    for i in range(2, M):
        t = 0.0
        for j in range(1, N):
            if j > 1:
                B[i, j] = t * A[i - 1, j]
            t = A[i, j] + A[i - 2, j - 1]


@po.kernel
def triangular_webs(A: f64["N", "N"], b: f64["N"]):
    for i in range(N):
        for j in range(i, N):
            w = A[i, j]
            for k in range(i):
                w = w - A[i, k] * A[k, j]
            A[i, j] = w
    for i in range(N):
        w = b[i]
        for j in range(i):
            w = w - A[i, j] * b[j]
        b[i] = w


def test_a_running_sum_is_not_expanded_along_its_loop():
    assert not expand_scalars(running_sum.scop).applied
    assert not expand_scalars(carried_into_next_row.scop).applied
    compiled = po.compile(running_sum, expand_scalars=True)
    assert compiled.scop is running_sum.scop and not threaded_statements(compiled)


def test_a_sum_per_row_is_expanded_along_the_rows_only():
    expansion = expand_scalars(row_sums.scop)
    (web,) = expansion.webs
    assert (web.scalar, web.array, web.loops, web.shape) == ("s", "s_0", ("i",), ("M",))
    assert expansion.loops == ("i (around S0, S1, S2)",)


def test_the_index_starts_at_the_loop_bound():
    """t = 0.0 is overwritten before any read (a web of its own); both webs expanded along i."""
    expansion = expand_scalars(shifted_rows.scop)
    assert [(w.array, w.loops, w.shape) for w in expansion.webs] == [("t_0", ("i",), ("M - 2",)),
                                                                   ("t_1", ("i",), ("M - 2",))]
    assert "B[i, j] = t_1[i - 2] * A[i - 1, j]" in str(expansion.scop)


NESTS = [running_sum, row_sums, carried_into_next_row, row_recurrence, shifted_rows, triangular_webs]


@pytest.mark.parametrize("algorithm", ["pluto", "feautrier", "isl", "original"])
@pytest.mark.parametrize("kernel", NESTS, ids=lambda k: k.scop.name)
def test_small_nests_match_the_interpreter(kernel, algorithm):
    """Each nest, compiled and as loops run in Python with parallel loops backwards, against the
    interpreter of the original kernel, at sizes where loops are empty, short and longer."""
    options = {"parallel": True} if algorithm == "original" else {}
    compiled = po.compile(kernel, algorithm=algorithm, expand_scalars=True, **options)
    po.verify(compiled.scop, compiled.schedule)
    rng = np.random.default_rng(3)
    for sizes in ({"M": 0, "N": 0}, {"M": 1, "N": 3}, {"M": 5, "N": 4}, {"M": 7, "N": 9}):
        args = {name: rng.random(tuple(sizes[e] for e in array.shape)) for name, array in kernel.scop.arrays.items()
                if not array.local}
        expected = {k: v.copy() for k, v in args.items()}
        po.interpret(kernel, **expected)
        backwards = {k: v.copy() for k, v in args.items()}
        compiled(**args)
        for name in expected:
            np.testing.assert_allclose(args[name], expected[name], rtol=1e-12, err_msg=name)
        bound = bind_arguments(compiled.scop, (), backwards)
        run_loop_ast(compiled.scop, compiled.loops, bound.params, bound.scalars, bound.arrays)
        for name in expected:
            np.testing.assert_allclose(backwards[name], expected[name], rtol=1e-12, err_msg=name)
