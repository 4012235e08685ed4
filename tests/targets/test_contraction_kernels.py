"""Kernels of the general GPU mapping that are contractions run as contraction kernels
(:mod:`polyopt.targets.contraction_kernels`): a program that is no contraction and no program of
them (a column mean, a matmul and a scaling; a batched matmul and a sum over its result) keeps
its general mapping, but its top-level kernel computing a product runs as the batched-GEMM
kernels. Which kernels qualify, the notes, the translation unit, its nvcc builds and the
launches (through a stand-in module) need no GPU; on a GPU the programs are checked against
numpy at ragged sizes, through repeated calls and graphs."""
import re

import islpy as isl
import numpy as np
import pytest

import polyopt as po
from polyopt.analysis.contraction import find_contraction, find_contractions
from polyopt.analysis.evaluate import evaluate
from polyopt.codegen.cuda import cuda_source as emit_cuda
from polyopt.codegen.cuda_contraction import ContractionSource, contraction_steps
from polyopt.codegen.gpu_mapping import HostLoop, Kernel, kernels_in, map_to_gpu
from polyopt.errors import RacyParallelLoopError
from polyopt.targets import contraction, contraction_kernels, cuda
from polyopt.targets.cache import scop_of
from polyopt.targets.contraction import choose_kernel
from polyopt.targets.contraction_kernels import (SubstitutedSource, candidate_kernels, kernel_contraction,
                                                 statements_scop, substitute_contractions, substituted,
                                                 whole_statements)
from polyopt.targets.cuda import plan

from conftest import assert_normwise_close, StandInArray, StandInModule, capture_graphs_on, assert_nvcc_compiles, needs_gpu, needs_nvcc

f64 = po.f64


@po.kernel
def mean_matmul_scale(X: f64["N", "M"], mean: f64["M"], A: f64["M", "K"], B: f64["K", "L"], C: f64["M", "L"],
                      D: f64["M", "L"]):
    for j in range(M):  # column means: no contraction
        mean[j] = 0.0
        for i in range(N):
            mean[j] += X[i, j]
        mean[j] = mean[j] / N
    for i in range(M):  # a matmul
        for j in range(L):
            C[i, j] = 0.0
            for k in range(K):
                C[i, j] += A[i, k] * B[k, j]
    for i in range(M):  # scaling into another array: no epilogue
        for j in range(L):
            D[i, j] = C[i, j] * mean[i]


@po.kernel
def bmm_then_sum(A: f64["NB", "NI", "NK"], B: f64["NB", "NK", "NJ"], C: f64["NB", "NI", "NJ"], s: f64["NB"]):
    for b in range(NB):  # a batched matmul
        for i in range(NI):
            for j in range(NJ):
                C[b, i, j] = 0.0
                for k in range(NK):
                    C[b, i, j] += A[b, i, k] * B[b, k, j]
    for b in range(NB):  # a reduction over its result
        s[b] = 0.0
        for i in range(NI):
            for j in range(NJ):
                s[b] += C[b, i, j]


@po.kernel
def repeated_products(T: int, A: f64["N", "N"], B: f64["N", "N"], C: f64["N", "N"]):
    for t in range(T):  # a host loop around the product
        for i in range(N):
            for j in range(N):
                C[i, j] = 0.0
                for k in range(N):
                    C[i, j] += A[i, k] * B[k, j]
        for i in range(N):
            for j in range(N):
                A[i, j] = C[i, j] * 0.5


def _mean_matmul_scale_reference(X, mean, A, B, C, D, **_):
    mean[:] = X.sum(axis=0) / X.shape[0]
    C[:] = A @ B
    D[:] = C * mean[:, None]


def _bmm_then_sum_reference(A, B, C, s, **_):
    C[:] = A @ B
    s[:] = C.sum(axis=(1, 2))


PROGRAMS = {"mean_matmul_scale": (mean_matmul_scale, _mean_matmul_scale_reference, ("K", "L", "M", "N")),
            "bmm_then_sum": (bmm_then_sum, _bmm_then_sum_reference, ("NB", "NI", "NJ", "NK"))}
#: The general kernel that runs as a contraction kernel, by its statements.
PRODUCT = {"mean_matmul_scale": frozenset({"S4"}), "bmm_then_sum": frozenset({"S1"})}


def _kernel(made, statements: frozenset[str]) -> Kernel:
    return next(k for k in made.program.kernels if k.statements == statements)


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_the_product_kernel_runs_as_a_contraction_kernel(name):
    """The programs are neither a contraction nor a program of them; of their general kernels,
    only the one computing the product (the update alone: the mapping put the init in a kernel
    of its own) runs as a contraction kernel. The program's tree is the general mapping, still
    verified; the contraction kernel's tree verifies on the Scop of the kernel's statements."""
    kernel = PROGRAMS[name][0]
    scop = scop_of(kernel)
    assert find_contraction(scop) is None and find_contractions(scop) is None
    made = plan(kernel)
    assert isinstance(made.source, SubstitutedSource) and not contraction_steps(made.source)
    product = _kernel(made, PRODUCT[name])
    assert list(made.source.contractions) == [product.name]
    po.verify(made.scop, made.mapped_tree)
    step = made.source.contractions[product.name]
    assert isinstance(step, ContractionSource) and step.source is made.source.source
    assert [s.name for s in step.program.scop.statements] == sorted(PRODUCT[name])
    po.verify(step.program.scop, step.program.tree)
    assert step.variants[0][0] == f"{product.name}_c"
    assert [n for n, _ in step.variants[1:3]] == [f"{product.name}_c_1", f"{product.name}_c_2"]


def test_the_notes_name_each_substituted_kernel():
    made = plan(bmm_then_sum)
    product = _kernel(made, PRODUCT["bmm_then_sum"])
    note = made.schedule.notes[-1]
    assert note.startswith(f"kernel {product.name} (S1) runs as a contraction kernel (dmma, precision='exact'): "
                           "C as batch (b) x M (i) x N (j) x K (k); block tile 128x128x16 (256 threads)")
    assert "gpu schedule:" in made.schedule.notes[-2]  # the general mapping's choice, before it
    f32 = plan(mean_matmul_scale.with_dtype("f32"), precision="tf32")
    assert "runs as a contraction kernel (tf32, precision='tf32'): C as M (i) x N (j) x K (k)" in f32.schedule.notes[-1]
    assert "runs as a contraction kernel (simt" in plan(mean_matmul_scale.with_dtype("f32")).schedule.notes[-1]


def test_other_kernels_keep_the_general_mapping():
    """The column mean (a split sum), the scaling, the init and the reduction are no
    contractions; contraction=False and mapping options keep every kernel general."""
    made = plan(mean_matmul_scale)
    assert len(made.program.kernels) == 6 and len(substituted(made.source)) == 1
    for kernel in made.program.kernels:
        if kernel.statements != PRODUCT["mean_matmul_scale"]:
            assert kernel_contraction(statements_scop(made.scop, kernel), kernel, "exact", "t") is None
    split = [k for k in made.program.kernels if made.source.shapes[k.name].parts > 1]
    assert split and not set(split) & set(candidate_kernels(made.program, made.source))
    assert type(plan(mean_matmul_scale, contraction=False).source).__name__ == "CudaSource"
    assert not substituted(plan(bmm_then_sum, reductions=False).source)
    assert not substituted(plan(po.suite.get("atax").kernel).source)


@pytest.mark.parametrize("name, statement", [("correlation", "S13"), ("covariance", "S5")])
def test_the_products_of_correlation_and_covariance_wait_only_on_recognition(name, statement):
    """Their product (``corr[i][j] += data[k][i] * data[k][j]`` over ``j > i``, covariance's
    over ``j >= i``) is a top-level kernel of its own holding all of its statement's instances:
    it runs as a contraction kernel once find_contraction recognizes its triangular output
    (not yet: it takes boxes)."""
    made = plan(po.suite.get(name).kernel)
    product = _kernel(made, frozenset({statement}))
    statements = statements_scop(made.scop, product)
    assert product in candidate_kernels(made.program, made.source)
    assert whole_statements(made.mapped_tree, product, statements)
    assert (product.name in substituted(made.source)) == (find_contraction(statements) is not None)


def test_a_kernel_in_a_host_loop_is_no_candidate():
    made = plan(repeated_products)
    looped = [k for step in made.program.host if isinstance(step, HostLoop) for k in kernels_in(step.body)]
    assert looped and not candidate_kernels(made.program, made.source)
    assert not substituted(made.source)


def _split_bmm():
    """bmm_then_sum mapped from a tree that runs S1 in two parts (batch 0 with the init, then
    the other batches): its kernels hold part of S1's instances each."""
    scop = scop_of(bmm_then_sum)
    part = {k: scop.domain.intersect(isl.UnionSet(f"[NB, NI, NJ, NK] -> {{ {text} }}"))
            for k, text in (("first", "S0[b, i, j]; S1[b, i, j, k] : b = 0"), ("second", "S1[b, i, j, k] : b >= 1"),
                            ("third", "S2[b]; S3[b, i, j]"))}
    trees = [scop.schedule.intersect_domain(part[k]) for k in ("first", "second", "third")]
    program = map_to_gpu(scop, isl.Schedule.sequence(isl.Schedule.sequence(*trees[:2]), trees[2]), "t")
    po.verify(scop, program.tree)
    return scop, program


def test_a_kernel_holding_part_of_a_statement_is_not_substituted():
    """Each of the two kernels running S1 is a contraction on S1's Scop (all of S1), but holds
    only part of S1's instances: neither is substituted."""
    scop, program = _split_bmm()
    source = emit_cuda(scop, program, "t")
    parts = [k for k in candidate_kernels(program, source) if "S1" in k.statements]
    assert len(parts) == 2
    for kernel in parts:
        assert kernel_contraction(statements_scop(scop, kernel), kernel, "exact", f"{kernel.name}_c") is not None
        assert not whole_statements(program.tree, kernel, statements_scop(scop, kernel))
    schedule = po.schedule(bmm_then_sum, "original")
    assert substitute_contractions(scop, schedule, source, "exact") == (schedule, source)
    whole = plan(bmm_then_sum)
    product = _kernel(whole, PRODUCT["bmm_then_sum"])
    assert whole_statements(whole.mapped_tree, product, statements_scop(whole.scop, product))


def test_a_refused_contraction_order_keeps_the_general_kernel(monkeypatch):
    def refuse(scop, tree):
        raise RacyParallelLoopError("c0", "(for the test)", "S1[0, 0, 0, 0]", "S1[1, 0, 0, 0]", {})
    monkeypatch.setattr(contraction, "verify", refuse)  # (mapped_contraction checks the order)
    made = plan(bmm_then_sum)
    assert type(made.source).__name__ == "CudaSource"
    assert not any("runs as a contraction kernel" in note for note in made.schedule.notes)


def test_the_unit_is_the_general_one_with_the_contraction_kernels_appended():
    """The general unit comes first, whole (its host function still launches the general
    kernel); the contraction kernels and their helpers follow; every kernel name is defined
    once."""
    made = plan(mean_matmul_scale)
    general = emit_cuda(made.scop, made.program, made.source.host_function)
    text = made.source.source
    assert text.startswith(general.source) and text.count("typedef signed char int8_t;") == 1
    assert text.count("__device__ inline void pl_mma_f64(") == 1 and "pl_mma_f64(" not in general.source
    names = re.findall(r"__global__ void (?:__launch_bounds__\([\d, ]+\) )?(\w+)\(", text)
    assert len(names) == len(set(names))
    step = made.source.contractions[_kernel(made, PRODUCT["mean_matmul_scale"]).name]
    for name, _ in step.variants:
        assert name in names and name not in general.source
    for kernel in made.program.kernels:
        assert kernel.name in names  # the general kernels stay, the product's too
    assert po.cuda_source(mean_matmul_scale) == text
    assert contraction_kernels.contraction_name("k", "void k_c(") == "k_cc"


def _sources() -> dict[str, str]:
    return {"mms": po.cuda_source(mean_matmul_scale),
            "mms_f32": po.cuda_source(mean_matmul_scale.with_dtype("f32")),
            "bmm_tf32": po.cuda_source(bmm_then_sum.with_dtype("f32"), precision="tf32"),
            "bmm": po.cuda_source(bmm_then_sum)}


@needs_nvcc
def test_nvcc_builds_the_units(tmp_path):
    assert_nvcc_compiles(tmp_path, _sources(), "sm_90a")


#: Sizes for the stand-in launches: a product 4096 x 64 (K 512), whose tile is not the first.
STAND_IN_SIZES = {"K": 512, "L": 64, "M": 4096, "N": 100}
STAND_IN_SHAPES = {"X": (100, 4096), "mean": (4096,), "A": (4096, 512), "B": (512, 64), "C": (4096, 64),
                   "D": (4096, 64)}


def _expected(compiled) -> list:
    """Every launch of the stand-in call, in order: (name, grid, trailing arguments)."""
    out = []
    for kernel in compiled.program.host:
        step = substituted(compiled.compiled).get(kernel.name)
        if step is None:
            name, _, grid = compiled.compiled.choose(
                kernel.name, [evaluate(e, STAND_IN_SIZES, {}) for e in kernel.lower],
                [evaluate(e, STAND_IN_SIZES, {}) for e in kernel.upper])
            out.append((name, tuple(grid), ()))
            continue
        c = step.contraction
        shapes = {a: STAND_IN_SHAPES[a] for a in (c.left.array, c.right.array, c.output)}
        name, _, layout = choose_kernel(step, {"i": 4096, "j": 64, "k": 512}, shapes, 132, True)
        out.append((name, layout.grid, layout.arguments))
    return out


def _setup(monkeypatch):
    """mean_matmul_scale compiled for CUDA, to launch on a :class:`StandInModule` (no GPU): (compiled
    kernel, module, stand-in arrays, the launches expected, :func:`_expected`)."""
    compiled = po.compile(mean_matmul_scale, target="cuda")
    arrays = {name: StandInArray(shape, 256 * (k + 1)) for k, (name, shape) in enumerate(STAND_IN_SHAPES.items())}
    module = StandInModule(leading=len(STAND_IN_SIZES) + len(arrays))
    monkeypatch.setattr(cuda, "_raw_module", lambda source: module)
    monkeypatch.setattr(cuda, "_sm_count", lambda: 132)
    monkeypatch.setattr(cuda, "_clusters", lambda: False)
    return compiled, module, arrays, _expected(compiled)


def test_a_kernel_opts_in_to_more_dynamic_shared_memory_once(monkeypatch):
    """CuPy makes a new kernel object at each ``get_function``: the opt-in to dynamic shared
    memory past 48 KiB is kept per driver function, so repeated launches set it once (and again
    only for more), and keep no object per launch."""
    monkeypatch.setattr(contraction, "_SHARED_ALLOWED", {})
    module = StandInModule(0)
    for nbytes in (40_000, *[100_000] * 50, 90_000, 120_000):
        contraction.allow_dynamic_shared(module, "k", nbytes)
    contraction.allow_dynamic_shared(module, "other", 100_000)
    assert module.opted_in == [("k", 100_000), ("k", 120_000), ("other", 100_000)]
    assert len(contraction._SHARED_ALLOWED) == 2


def test_the_host_program_launches_the_contraction_kernel_in_place(monkeypatch):
    """``CudaKernel.launch`` (stand-in module, no GPU) runs the general host program, the
    product's launch replaced by the contraction kernel its sizes choose (not the first tile
    here); ``record=True`` records every launch, the contraction's included."""
    compiled, module, arrays, expected = _setup(monkeypatch)
    product = _kernel(compiled, PRODUCT["mean_matmul_scale"]).name
    record = compiled.launch(STAND_IN_SIZES, {}, arrays, record=True)
    assert module.launched == expected
    names = [name for name, _, _ in module.launched]
    assert product not in names and any(n.startswith(f"{product}_c") for n in names)
    assert names.index(next(n for n in names if n.startswith(f"{product}_c"))) == \
        [k.name for k in compiled.program.host].index(product)
    step = substituted(compiled.compiled)[product]
    assert next(n for n in names if n.startswith(f"{product}_c")) != step.variants[0][0]
    assert record is not None and len(record.launches) == len(expected)
    assert [tail for _, _, _, tail in record.launches] == [tuple(np.int64(a) for a in args)
                                                           for _, _, args in expected]


def test_graph_launches_capture_the_contraction_kernel(monkeypatch):
    """``launch(graph=True)``: the host program, the contraction kernel in it, captured once
    per argument set and replayed."""
    compiled, module, arrays, expected = _setup(monkeypatch)
    captures = capture_graphs_on(monkeypatch, module, compiled)
    for _ in range(2):
        compiled.launch(STAND_IN_SIZES, {}, arrays, graph=True)
    assert captures == [expected] and module.launched == expected * 2
    assert set(module.loaded) >= {k.name for k in compiled.program.kernels}  # loaded before the capture


# ----- on the GPU ----------------------------------------------------------------------------------

#: Sizes per program (in PROGRAMS' parameter order): one element, sizes no tile divides, rows in
#: whole 16-byte vectors (the cp.async kernels), a product of one column.
SIZES = {"mean_matmul_scale": [(1, 1, 1, 1), (13, 45, 37, 9), (140, 36, 132, 20), (33, 1, 65, 3)],
         "bmm_then_sum": [(1, 1, 1, 1), (3, 37, 45, 13), (2, 132, 36, 140), (4, 65, 1, 33)]}


def _case(name: str, sizes: tuple[int, ...], dtype, **options):
    """(compiled kernel, inputs, expected outputs) of program ``name`` in ``dtype``; the
    reference runs in float64 on float64 copies of the inputs."""
    kernel, reference, params = PROGRAMS[name]
    kernel = kernel if dtype == np.float64 else kernel.with_dtype("f32")
    size = dict(zip(params, sizes))
    rng = np.random.default_rng(sum(sizes))
    inputs = {}
    for argument in scop_of(kernel).arguments:
        if argument.kind == "param":
            inputs[argument.name] = size[argument.name]
        else:
            shape = tuple(size[e] for e in scop_of(kernel).arrays[argument.name].shape)  # (names of sizes)
            inputs[argument.name] = rng.standard_normal(shape).astype(dtype)
    expected = {k: (v.astype(np.float64) if isinstance(v, np.ndarray) else v) for k, v in inputs.items()}
    reference(**expected)
    compiled = po.compile(kernel, target="cuda", **options)
    assert substituted(compiled.compiled)
    return compiled, inputs, expected


def _on_device(inputs: dict) -> dict:
    import cupy
    return {k: (cupy.asarray(v) if isinstance(v, np.ndarray) else v) for k, v in inputs.items()}


@needs_gpu
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name, sizes", [(n, s) for n in SIZES for s in SIZES[n]])
def test_programs_match_numpy(name, sizes, dtype):
    """numpy arrays (copied in and out) and CuPy arrays (in place)."""
    compiled, inputs, expected = _case(name, sizes, dtype)
    host = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in inputs.items()}
    compiled(**host)
    assert_normwise_close(host, expected, dtype)
    device = _on_device(inputs)
    compiled(**device)
    assert_normwise_close(device, expected, dtype)


@needs_gpu
@pytest.mark.parametrize("name", list(SIZES))
def test_tf32_programs_match_numpy(name):
    """precision="tf32": the product on the TF32 tensor cores, the other kernels exact."""
    compiled, inputs, expected = _case(name, SIZES[name][2], np.float32, precision="tf32")
    assert all(v.engine == "tf32" for step in substituted(compiled.compiled).values() for _, v in step.variants)
    device = _on_device(inputs)
    compiled(**device)
    assert_normwise_close(device, expected, np.float32, bound=5e-3)


@needs_gpu
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", list(SIZES))
def test_repeated_calls(name, dtype):
    """The same CuPy arrays again (the full path, the recorded launches, then the repeat as one
    CUDA graph), other arrays of the same sizes (the record) and of other sizes (a new
    record); every output is recomputed from the inputs at each call."""
    compiled, inputs, expected = _case(name, SIZES[name][2], dtype)
    device = _on_device(inputs)
    for _ in range(4):
        compiled(**device)
        assert_normwise_close(device, expected, dtype)
    assert compiled._last is not None and compiled._last.graph is not None
    for sizes in (SIZES[name][2], SIZES[name][1]):
        _, other, expected = _case(name, sizes, dtype)
        fresh = _on_device(other)
        compiled(**fresh)
        assert_normwise_close(fresh, expected, dtype)


@needs_gpu
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", list(SIZES))
def test_graph_launches(name, dtype):
    """``launch(graph=True)``: the host program with the contraction kernel captured once per
    argument set and replayed."""
    import cupy

    compiled, inputs, expected = _case(name, SIZES[name][1], dtype)
    before = len(compiled._graphs)
    for _ in range(2):
        bound, device, _ = compiled.bind((), _on_device(inputs))
        compiled.launch(bound.params, bound.scalars, device, graph=True)
        compiled.launch(bound.params, bound.scalars, device, graph=True)  # the captured graph again
        cupy.cuda.get_current_stream().synchronize()
        assert_normwise_close(device, expected, dtype)
    assert len(compiled._graphs) == before + 2
