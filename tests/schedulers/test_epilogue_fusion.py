"""Producer-consumer fusion of element-wise epilogues (issue 15 item 5): the cost model runs a
bias, a ReLU or a scaling inside the contraction's output tile loops, after the tile's
reduction, where it saves a pass over the output; the verifier checks it; epilogues that read
the output elsewhere, that would break a dependence or that do not pay stay in their nests."""
import runpy

import numpy as np
import pytest

import polyopt as po
from polyopt import f64
from polyopt.errors import IllegalScheduleError
from polyopt.islutil import tuple_names
from polyopt.schedulers import cost
from polyopt.transform import nodes as N
from polyopt.transform.primitives import run
from example_kernels import EXAMPLES, example_kernel
from suite_reference import check_against_reference



bmm_bias_relu = example_kernel("bmm_bias_relu")


@po.kernel
def gemm_scale(alpha: f64, C: f64["NI", "NJ"], A: f64["NI", "NK"], B: f64["NK", "NJ"]):
    for i in range(NI):
        for j in range(NJ):
            C[i, j] = 0.0
            for k in range(NK):
                C[i, j] += A[i, k] * B[k, j]
    for i in range(NI):
        for j in range(NJ):
            C[i, j] *= alpha


@po.kernel
def conv_bias_relu(out: f64["CO", "H", "W"], inp: f64["CI", "H + 2", "W + 2"], w: f64["CO", "CI", 3, 3],
                   bias: f64["CO"]):
    for o in range(CO):
        for y in range(H):
            for x in range(W):
                out[o, y, x] = 0.0
                for c in range(CI):
                    for p in range(3):
                        for q in range(3):
                            out[o, y, x] += inp[c, y + p, x + q] * w[o, c, p, q]
    for o in range(CO):
        for y in range(H):
            for x in range(W):
                out[o, y, x] = max(out[o, y, x] + bias[o], 0.0)


@po.kernel
def gemm_neighbour_sum(C: f64["NI", "NJ"], D: f64["NI", "NJ"], A: f64["NI", "NK"], B: f64["NK", "NJ"]):
    for i in range(NI):
        for j in range(NJ):
            C[i, j] = 0.0
            for k in range(NK):
                C[i, j] += A[i, k] * B[k, j]
    for i in range(NI):
        for j in range(NJ - 1):
            D[i, j] = C[i, j] + C[i, j + 1]


@po.kernel
def gemm_overwrites_input(C: f64["N", "N"], A: f64["N", "N"], B: f64["N", "N"]):
    for i in range(N):
        for j in range(N):
            C[i, j] = 0.0
            for k in range(N):
                C[i, j] += A[i, k] * B[k, j]
    for i in range(N):
        for j in range(N):
            A[i, j] = C[i, j] * 2.0


def _fusion_steps(schedule):
    return [step for step in schedule.trace if step.primitive == "fuse" and step.note.startswith("cost model: epilogue")]


def _bmm_inputs(nb=3, ni=37, nj=45, nk=29):
    rng = np.random.default_rng(1)
    A, B = rng.random((nb, ni, nk)) - 0.5, rng.random((nb, nk, nj)) - 0.5
    return np.empty((nb, ni, nj)), A, B, rng.random(nj) - 0.5


def test_bmm_bias_relu_default_fuses_the_epilogue_and_matches_numpy():
    ck = po.compile(bmm_bias_relu)
    C, A, B, bias = _bmm_inputs()                  # partial tiles in every loop
    ck(C, A, B, bias)
    np.testing.assert_allclose(C, np.maximum(A @ B + bias, 0.0), rtol=1e-12, atol=1e-12)


def test_the_trace_shows_the_fusion_with_the_models_estimate():
    schedule = po.compile(bmm_bias_relu).schedule
    steps = [step.primitive for step in schedule.trace]
    assert steps[steps.index("tile"):steps.index("fuse") + 1] == ["tile", "permute", "tile", "fuse"]  # the consumer tiled alike
    [step] = _fusion_steps(schedule)
    assert dict(step.options)["depth"] == 3        # the b, i and j tile loops; not k's
    assert step.note.startswith("cost model: epilogue nests")
    assert "saves 16 B per output element" in step.note and "fits half the L2 cache -> fuse" in step.note
    assert any(step.primitive == "register_tile" for step in schedule.trace)  # the producer keeps its register tile


def test_the_epilogue_runs_in_the_producers_nest_after_its_reduction():
    schedule = po.compile(bmm_bias_relu).schedule
    nests = schedule.root.children               # C = 0, then the fused nest
    assert len(nests) == 2
    node, tile_loops = nests[1].child.child, []  # below the parallel mark: the b, i, j tile loops
    while isinstance(node, N.Band):
        assert all(node.coincident)
        tile_loops += node.names
        node = node.child
    assert len(tile_loops) == 3
    inner = node
    assert isinstance(inner, N.Sequence)
    assert [sorted(tuple_names(f.domain)) for f in inner.children] == [["S1"], ["S2", "S3"]]
    assert inner.children[0].child.names[0].startswith("k")  # the reduction's tile loop, inside the output tile
    source = po.compile(bmm_bias_relu).c_source
    apart = po.compile(bmm_bias_relu, epilogues=False).c_source
    assert source.count("#pragma omp parallel for") == 2 and apart.count("#pragma omp parallel for") == 3


def test_the_verifier_accepts_the_fused_schedule():
    schedule = po.compile(bmm_bias_relu).schedule
    po.verify(schedule.scop, schedule)


@pytest.mark.parametrize("kernel", [gemm_scale, conv_bias_relu])
def test_gemm_scaling_and_convolution_bias_relu_fuse_and_compute_the_reference(kernel):
    ck = po.compile(kernel)
    assert len(_fusion_steps(ck.schedule)) == 1
    rng = np.random.default_rng(2)
    if kernel is gemm_scale:
        A, B, C = rng.random((33, 21)), rng.random((21, 40)), np.empty((33, 40))
        ck(1.5, C, A, B)
        expected = 1.5 * (A @ B)
    else:
        inp, w, bias, out = rng.random((5, 13, 17)) - 0.5, rng.random((7, 5, 3, 3)) - 0.5, rng.random(7) - 0.5, np.empty((7, 11, 15))
        ck(out, inp, w, bias)
        windows = np.lib.stride_tricks.sliding_window_view(inp, (3, 3), axis=(1, 2))  # c, y, x, p, q
        expected = np.maximum(np.einsum("cyxpq,ocpq->oyx", windows, w) + bias[:, None, None], 0.0)
    np.testing.assert_allclose(out if kernel is conv_bias_relu else C, expected, rtol=1e-12, atol=1e-12)


def _fused_by_hand(kernel):
    """The kernel's pluto schedule without the model or parallel marks, its product (i, k, j) and
    the consumer (i, j) tiled by 4, the product's tile loops permuted to (i, j, k), both fused
    at their (i, j) tile loops."""
    s = po.schedule(kernel, "pluto", parallel=False)
    (i, k, j), consumer = s.root.children[1].child.names, s.root.children[2].child.names
    s = run(run(s, "tile", (i, k, j), sizes=[4, 4, 4]), "tile", consumer, sizes=[4, 4])
    tiles = [band.names for _, band in N.bands(s.root) if band.names[0].endswith("_0")]
    s = run(s, "permute", (tiles[0][0], tiles[0][2], tiles[0][1]), check=False)
    return run(s, "fuse", (tiles[0][0], tiles[1][0]), depth=2)


def test_an_epilogue_reading_the_output_at_another_point_is_left_alone():
    ck = po.compile(gemm_neighbour_sum)
    assert _fusion_steps(ck.schedule) == [] and not any("epilogue" in note for note in ck.schedule.notes)
    with pytest.raises(IllegalScheduleError, match="RAW dependence"):  # C[i, j + 1]: the next j tile's
        _fused_by_hand(gemm_neighbour_sum)


def test_a_fusion_the_verifier_refuses_is_left_alone():
    ck = po.compile(gemm_overwrites_input)
    assert _fusion_steps(ck.schedule) == []          # A[i, j] would be overwritten before later tiles read it
    [note] = [note for note in ck.schedule.notes if "epilogue" in note]
    assert "-> fuse, but the nests stay apart" in note and "WAR dependence" in note
    with pytest.raises(IllegalScheduleError, match="WAR dependence"):
        _fused_by_hand(gemm_overwrites_input)
    rng = np.random.default_rng(3)
    A, B, C = rng.random((19, 19)), rng.random((19, 19)), np.empty((19, 19))
    expected = A @ B
    ck(C, A, B)
    np.testing.assert_allclose(A, 2.0 * expected, rtol=1e-12)


def test_no_fusion_where_the_output_block_does_not_fit_the_cache(monkeypatch):
    monkeypatch.setattr(cost, "cache_bytes", lambda level: 4096)
    schedule = po.schedule(bmm_bias_relu, "pluto")
    assert _fusion_steps(schedule) == []
    [note] = [note for note in schedule.notes if "epilogue" in note]
    assert note.endswith("does not fit half the L2 cache -> separate nests")


@pytest.mark.parametrize("name, fused", [("covariance", True), ("gesummv", True), ("trmm", False),
                                         ("correlation", False), ("gemm", False), ("2mm", False)])
def test_suite_kernels_with_element_wise_epilogues(name, fused):
    entry = po.suite.get(name)
    ck = po.compile(entry.kernel)
    assert bool(_fusion_steps(ck.schedule)) == fused  # correlation's corr[j][i] = corr[i][j] is no epilogue
    check_against_reference(entry, ck)


def test_the_example_runs(monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["bmm_bias_relu.py", "2", "40", "--repeat", "1"])
    runpy.run_path(str(EXAMPLES / "bmm_bias_relu.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "fuse(" in out and "matches numpy" in out
