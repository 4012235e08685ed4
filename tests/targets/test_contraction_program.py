"""Programs of contractions on the CUDA target: a Scop whose top-level nests are each a
contraction (PolyBench's 2mm and 3mm) runs as those contraction kernels, launched in program
order, from one verified schedule tree and one translation unit. The recognition, the tree,
the source, its nvcc build and the launches (through a stand-in module) need no GPU; on a GPU,
2mm and 3mm are checked against numpy at ragged sizes, through repeated calls and graphs."""
import shutil
import subprocess

import islpy as isl
import numpy as np
import pytest

import polyopt as po
from polyopt.analysis.contraction import find_contraction, find_contractions
from polyopt.codegen.ast import abi_arguments
from polyopt.codegen.cuda_contraction import ContractionProgramSource, ContractionSource, contraction_steps
from polyopt.errors import RacyParallelLoopError
from polyopt.targets import contraction, cuda
from polyopt.targets.cache import scop_of
from polyopt.targets.contraction import choose_kernel
from polyopt.targets.cuda import plan
from polyopt.transform.marks import GPU_KERNEL_MARK

from conftest import assert_normwise_close, StandInArray, StandInModule, capture_graphs_on, assert_nvcc_compiles, needs_gpu, needs_nvcc

f64 = po.f64


@po.kernel
def two_mm_then_copy(A: f64["NI", "NK"], B: f64["NK", "NJ"], tmp: f64["NI", "NJ"], C: f64["NJ", "NL"],
                     D: f64["NI", "NL"], E: f64["NI", "NL"]):
    for i in range(NI):
        for j in range(NJ):
            tmp[i, j] = 0.0
            for k in range(NK):
                tmp[i, j] += A[i, k] * B[k, j]
    for i in range(NI):
        for j in range(NL):
            D[i, j] = 0.0
            for k in range(NJ):
                D[i, j] += tmp[i, k] * C[k, j]
    for i in range(NI):
        for j in range(NL):
            E[i, j] = 2.0 * D[i, j]  # element-wise into another array: no contraction, no epilogue


def test_2mm_and_3mm_are_programs_of_contractions():
    """Each top-level nest is a contraction of its own statements; an array an earlier nest
    wrote (2mm's tmp, 3mm's E and F) is an operand of a later one."""
    k2mm = scop_of(po.suite.get("2mm").kernel)
    assert find_contraction(k2mm) is None  # not one contraction
    (first, c1), (second, c2) = find_contractions(k2mm)
    assert [s.name for s in first.statements] == ["S0", "S1"] and [s.name for s in second.statements] == ["S2", "S3"]
    assert (c1.output, c1.left.array, c1.right.array) == ("tmp", "A", "B") and c1.describe() == "M (i) x N (j) x K (k)"
    assert (c2.output, c2.left.array, c2.right.array) == ("D", "tmp", "C") and c2.init is not None  # D *= beta
    k3mm = find_contractions(scop_of(po.suite.get("3mm").kernel))
    assert [(c.output, c.left.array, c.right.array) for _, c in k3mm] == [("E", "A", "B"), ("F", "C", "D"),
                                                                         ("G", "E", "F")]
    assert [c.statements for _, c in k3mm] == [("S0", "S1"), ("S2", "S3"), ("S4", "S5")]


def test_a_nest_that_is_no_contraction_keeps_the_general_mapping():
    """A program with a nest that is no contraction (an element-wise copy into another array),
    one with no top-level sequence (gemm: one nest) and one of other nests (atax) are no
    programs of contractions; the first is mapped the general way as a whole."""
    assert find_contractions(scop_of(two_mm_then_copy)) is None
    assert find_contractions(scop_of(po.suite.get("gemm").kernel)) is None
    assert find_contractions(scop_of(po.suite.get("atax").kernel)) is None
    assert not contraction_steps(plan(two_mm_then_copy).source)
    assert isinstance(plan(po.suite.get("gemm").kernel).source, ContractionSource)  # one contraction, as before
    assert not contraction_steps(plan(po.suite.get("2mm").kernel, contraction=False).source)
    assert not contraction_steps(plan(po.suite.get("2mm").kernel, block=(8, 32)).source)


def test_a_refused_mapping_falls_back_to_the_general_one(monkeypatch):
    def refuse(scop, tree):
        raise RacyParallelLoopError("c0", "(for the test)", "S1[0, 0, 0]", "S1[1, 0, 0]", {})
    monkeypatch.setattr(contraction, "verify", refuse)
    assert not contraction_steps(plan(po.suite.get("2mm").kernel).source)


@pytest.mark.parametrize("name, outputs", [("2mm", ["tmp", "D"]), ("3mm", ["E", "F", "G"])])
def test_the_program_is_one_verified_tree_of_contraction_kernels(name, outputs):
    """A sequence of the nests' coordinate trees, one kernel each, verified on the whole Scop;
    the schedule's notes say which statements each kernel computes."""
    made = plan(po.suite.get(name).kernel)
    assert isinstance(made.source, ContractionProgramSource)
    steps = contraction_steps(made.source)
    assert [step.contraction.output for step in steps] == outputs
    po.verify(made.scop, made.mapped_tree)
    top = made.mapped_tree.get_root().child(0)
    assert top.get_type() == isl.schedule_node_type.sequence and top.n_children() == len(outputs)
    for k, step in enumerate(steps):
        mark = top.child(k).child(0)
        assert mark.get_type() == isl.schedule_node_type.mark
        assert mark.mark_get_id().get_name() == f"{GPU_KERNEL_MARK} {made.program.kernels[k].name}"
        kernel = made.program.kernels[k]
        assert kernel.statements == set(step.contraction.statements) and len(kernel.coords) == 2
        assert step.variants[0][0] == kernel.name and step.source is made.source.source
    notes = made.schedule.notes[-len(outputs):]
    for k, (note, step) in enumerate(zip(notes, steps)):
        assert note.startswith(f"GPU contraction mapping (dmma, precision='exact'), kernel {k + 1} of {len(outputs)}")
        assert f"statements {', '.join(step.contraction.statements)} compute {step.contraction.output} as" in note


def test_the_source_holds_every_kernel_once_and_a_host_function_in_order():
    source = po.cuda_source(po.suite.get("3mm").kernel)
    made = plan(po.suite.get("3mm").kernel)
    names = [name for step in contraction_steps(made.source) for name, _ in step.variants]
    assert len(names) == len(set(names)) == source.count("__global__")
    for name in names:
        assert source.count(f" {name}(\n") == 1  # each kernel defined once
    assert source.count("typedef signed char int8_t;") == 1 and source.count("static long pl_run(") == 1
    assert source.count('extern "C" void polyopt_k3mm(') == 1
    calls = [source.index(f"  polyopt_k3mm_c{k}(NI, NJ, NK, NL, NM, E, A, B, F, C, D, G);") for k in range(3)]
    assert calls == sorted(calls) and all(f"static void polyopt_k3mm_c{k}(" in source for k in range(3))
    tf32 = po.cuda_source(po.suite.get("3mm").kernel.with_dtype("f32"), precision="tf32")
    assert tf32.count("__device__ inline void pl_mma_tf32(") == 1 and tf32.count("pl_wg_desc(const void") == 1


def _sources() -> dict[str, str]:
    return {"k2mm": po.cuda_source(po.suite.get("2mm").kernel),
            "k3mm_f32": po.cuda_source(po.suite.get("3mm").kernel.with_dtype("f32")),
            "k3mm_tf32": po.cuda_source(po.suite.get("3mm").kernel.with_dtype("f32"), precision="tf32")}


@needs_nvcc
def test_nvcc_builds_the_programs(tmp_path):
    assert_nvcc_compiles(tmp_path, _sources(), "sm_90a")


#: 2mm's sizes for the stand-in launches: the first product 4096 x 64 (K 512), the second
#: 4096 x 4096 (K 64), and the arrays' shapes.
STAND_IN_SIZES = {"NI": 4096, "NJ": 64, "NK": 512, "NL": 4096}
STAND_IN_SHAPES = {"tmp": (4096, 64), "A": (4096, 512), "B": (512, 64), "C": (64, 4096), "D": (4096, 4096)}


def _stand_in(monkeypatch):
    """2mm compiled for CUDA and launched on a :class:`StandInModule` (no GPU): (compiled kernel,
    module, arrays, the launches each contraction's own choice of kernel makes, in order)."""
    compiled = po.compile(po.suite.get("2mm").kernel, target="cuda")
    arrays = {name: StandInArray(shape, 256 * (k + 1)) for k, (name, shape) in enumerate(STAND_IN_SHAPES.items())}
    module = StandInModule(leading=len(STAND_IN_SIZES) + 2 + len(arrays))
    monkeypatch.setattr(cuda, "_raw_module", lambda source: module)
    monkeypatch.setattr(cuda, "_sm_count", lambda: 132)
    monkeypatch.setattr(cuda, "_clusters", lambda: False)
    expected = []
    for step in contraction_steps(compiled.compiled):
        c = step.contraction
        first = c.output == "tmp"
        extent = {i: {"i": 4096, "j": 64 if first else 4096, "k": 512 if first else 64}[i] for i in c.extent}
        shapes = {a: STAND_IN_SHAPES[a] for a in (c.left.array, c.right.array, c.output)}
        name, _, layout = choose_kernel(step, extent, shapes, 132, True)
        expected.append((name, layout.grid, layout.arguments))
    return compiled, module, arrays, expected


def test_the_kernel_launches_each_contraction_with_its_own_choice(monkeypatch):
    """``CudaKernel.launch`` (here on a stand-in module, no GPU) launches the contractions in
    program order, each the kernel and layout its own sizes choose; with ``record``, the
    record holds both launches."""
    compiled, module, arrays, expected = _stand_in(monkeypatch)
    record = compiled.launch(STAND_IN_SIZES, {"alpha": 1.5, "beta": 1.2}, arrays, record=True)
    assert module.launched == expected
    assert [name.rsplit("_k", 1)[1][0] for name, _, _ in module.launched] == ["0", "1"]  # program order
    assert expected[0][0] != expected[1][0].replace("_k1", "_k0")  # the narrow product takes its own tile
    assert len(record.launches) == 2


def test_graph_launches_capture_the_contractions_once(monkeypatch):
    """``launch(graph=True)`` (stand-in module, stream and capture): the module is loaded
    before the capture, both contractions' launches are captured once per argument set and
    the graph replayed at each launch."""
    compiled, module, arrays, expected = _stand_in(monkeypatch)
    captures = capture_graphs_on(monkeypatch, module, compiled)
    for _ in range(2):
        compiled.launch(STAND_IN_SIZES, {"alpha": 1.5, "beta": 1.2}, arrays, graph=True)
    assert captures == [expected] and module.launched == expected * 2
    assert module.loaded[:1] == [contraction_steps(compiled.compiled)[0].variants[0][0]]  # loaded outside the capture
    compiled.launch(STAND_IN_SIZES, {"alpha": 1.5, "beta": 2.0}, arrays, graph=True)
    assert len(captures) == 2 and len(compiled._graphs) == 2  # other arguments: a capture of their own


# ----- on the GPU ----------------------------------------------------------------------------------

#: Sizes of 2mm (NI, NJ, NK, NL) and 3mm (NI, NJ, NK, NL, NM): one element, sizes no tile
#: divides, rows in whole 16-byte vectors (the cp.async kernels), a product of one column.
SIZES = {"2mm": [(1, 1, 1, 1), (37, 45, 13, 70), (130, 68, 140, 36), (65, 1, 33, 129)],
         "3mm": [(1, 1, 1, 1, 1), (37, 45, 13, 70, 29), (132, 68, 140, 36, 64), (65, 129, 1, 33, 17)]}
PARAMS = {"2mm": ("NI", "NJ", "NK", "NL"), "3mm": ("NI", "NJ", "NK", "NL", "NM")}


def _case(name: str, sizes: tuple[int, ...], dtype, **options):
    """(compiled kernel, inputs, expected outputs) of suite kernel ``name`` in ``dtype``
    (``options`` to ``po.compile``); the reference runs in float64 on float64 copies of the
    inputs."""
    entry = po.suite.get(name)
    kernel = entry.kernel if dtype == np.float64 else entry.kernel.with_dtype("f32")
    inputs = entry.inputs(dict(zip(PARAMS[name], sizes)), dtype)
    expected = {k: (v.astype(np.float64) if isinstance(v, np.ndarray) else v) for k, v in inputs.items()}
    entry.reference(**expected)
    compiled = po.compile(kernel, target="cuda", **options)
    assert isinstance(compiled.compiled, ContractionProgramSource)
    return compiled, inputs, expected


@needs_gpu
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name, sizes", [(n, s) for n in SIZES for s in SIZES[n]])
def test_programs_match_numpy(name, sizes, dtype):
    """numpy arrays (copied in and out) and CuPy arrays (in place)."""
    import cupy

    compiled, inputs, expected = _case(name, sizes, dtype)
    host = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in inputs.items()}
    compiled(**host)
    assert_normwise_close(host, expected, dtype)
    device = {k: (cupy.asarray(v) if isinstance(v, np.ndarray) else v) for k, v in inputs.items()}
    compiled(**device)
    assert_normwise_close(device, expected, dtype)


@needs_gpu
@pytest.mark.parametrize("name, sizes", [(n, s) for n in SIZES for s in SIZES[n][1:3]])
def test_tf32_programs_match_numpy(name, sizes):
    """precision="tf32": every contraction of the program on the TF32 tensor cores."""
    import cupy

    compiled, inputs, expected = _case(name, sizes, np.float32, precision="tf32")
    assert all(v.engine == "tf32" for step in contraction_steps(compiled.compiled) for _, v in step.variants)
    device = {k: (cupy.asarray(v) if isinstance(v, np.ndarray) else v) for k, v in inputs.items()}
    compiled(**device)
    assert_normwise_close(device, expected, np.float32, bound=5e-3)


@needs_gpu
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", ["2mm", "3mm"])
def test_repeated_calls_of_a_program(name, dtype):
    """The same CuPy arrays again (the full path, the recorded launches, then the repeat as
    one CUDA graph of the kernels), other arrays of the same sizes (the record) and of other
    sizes (a new record); 2mm accumulates into D, so every call is checked against the
    reference run as many times."""
    import cupy

    compiled, inputs, expected = _case(name, SIZES[name][2], dtype)
    device = {k: (cupy.asarray(v) if isinstance(v, np.ndarray) else v) for k, v in inputs.items()}
    for _ in range(4):
        compiled(**device)
        assert_normwise_close(device, expected, dtype)
        po.suite.get(name).reference(**expected)
    assert compiled._last is not None and compiled._last.graph is not None
    _, other, expected = _case(name, SIZES[name][2], dtype)
    fresh = {k: (cupy.asarray(v) if isinstance(v, np.ndarray) else v) for k, v in other.items()}
    compiled(**fresh)
    assert_normwise_close(fresh, expected, dtype)
    _, other, expected = _case(name, SIZES[name][1], dtype)
    fresh = {k: (cupy.asarray(v) if isinstance(v, np.ndarray) else v) for k, v in other.items()}
    compiled(**fresh)
    assert_normwise_close(fresh, expected, dtype)


@needs_gpu
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", ["2mm", "3mm"])
def test_graph_launches_of_a_program(name, dtype):
    """``launch(graph=True)``: the contraction kernels captured once per argument set and
    replayed (the same arrays twice, then other arrays: a capture of their own)."""
    import cupy

    compiled, inputs, expected = _case(name, SIZES[name][1], dtype)
    before = len(compiled._graphs)
    for _ in range(2):
        bound, device, _ = compiled.bind((), {k: (cupy.asarray(v) if isinstance(v, np.ndarray) else v)
                                              for k, v in inputs.items()})
        compiled.launch(bound.params, bound.scalars, device, graph=True)
        compiled.launch(bound.params, bound.scalars, device, graph=True)  # the captured graph again
        once = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in expected.items()}
        po.suite.get(name).reference(**once)  # 2mm: two calls, D accumulated twice
        cupy.cuda.get_current_stream().synchronize()
        assert_normwise_close(device, once, dtype)
    assert len(compiled._graphs) == before + 2


@needs_gpu
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_the_nvcc_host_function_runs_the_program(tmp_path):
    """The source's extern "C" host function launches 2mm's contractions in order: built
    with nvcc into a library, called with device pointers."""
    import ctypes

    import cupy

    compiled, inputs, expected = _case("2mm", SIZES["2mm"][1], np.float64)
    (tmp_path / "k.cu").write_text(compiled.cuda_source)
    built = subprocess.run(["nvcc", "-arch=native", "-shared", "-Xcompiler", "-fPIC", "k.cu", "-o", "k.so"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    library = ctypes.CDLL(str(tmp_path / "k.so"))
    device = {k: cupy.asarray(v) for k, v in inputs.items() if isinstance(v, np.ndarray)}
    sizes = dict(zip(PARAMS["2mm"], SIZES["2mm"][1]))
    arguments = [ctypes.c_long(sizes[a.name]) if a.kind == "param"
                 else ctypes.c_double(inputs[a.name]) if a.kind == "scalar"
                 else ctypes.c_void_p(device[a.name].data.ptr) for a in abi_arguments(compiled.scop)]
    getattr(library, compiled.compiled.host_function)(*arguments)
    cupy.cuda.Device().synchronize()
    assert_normwise_close(device, expected, np.float64)
