"""po.plot: pictures of domains, dependences, tiles, wavefronts and schedule trees (Agg backend)."""
import sys

import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import polyopt as po  # noqa: E402
from polyopt import plot  # noqa: E402
from polyopt.transform import nodes as N  # noqa: E402

JACOBI = {"N": 10, "TSTEPS": 6}           # S0[t, i]: 0 <= t < 6, 1 <= i <= 8 (48 points)
SMALL = 5


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _small_sizes(entry):
    scop = entry.kernel.scop
    sizes = {p: SMALL for p in scop.params}
    from polyopt.islutil import param_point
    point = param_point(scop.params, sizes)
    if scop.context.intersect_params(point).is_empty() or \
            scop.statements[0].domain.intersect_params(point).is_empty():
        sizes = entry.sizes("MINI")
    return sizes


def _point_colors(ax):
    import numpy as np
    colors = ax.collections[0].get_facecolors()
    return len({tuple(np.round(c, 6)) for c in colors})


@pytest.mark.parametrize("name", po.suite.names())
def test_every_suite_kernel_first_statement_renders(name):
    entry = po.suite.get(name)
    stmt = entry.kernel.scop.statements[0]
    ax = plot.domain(entry.kernel, stmt.name, sizes=_small_sizes(entry))
    assert ax.polyopt["points"] >= 1
    assert set(ax.polyopt["arrows"]) == {"RAW", "WAR", "WAW"}
    ax.figure.canvas.draw()


def _jacobi_skewed():
    k = po.suite.get("jacobi-1d").kernel
    s = po.schedule(k, "original").shift("i@S1", offset=1).fuse("i", "i@S1").skew("t", "i", factor=2)
    return k, s


def test_tile_colours_of_time_skewed_jacobi_1d():
    k, s = _jacobi_skewed()
    tiled = s.tile("t", "i", sizes=(4, 4))
    ax = plot.domain(k, "S0", sizes=JACOBI, dims=("i", "t"), schedule=tiled, color_by="tile",
                     dependences=False)
    expected = {(t // 4, (2 * t + i) // 4) for t in range(6) for i in range(1, 9)}
    assert ax.polyopt["points"] == 48
    assert ax.polyopt["colors"] == len(expected) == _point_colors(ax)
    # the tile of each point is its (t_0, i_0) values
    assert {key for key in ax.polyopt["keys"].values()} == {(4 * a, 4 * b) for a, b in expected}


def test_time_colours_of_a_wavefront():
    k, s = _jacobi_skewed()
    wave = s.wavefront("t", "i")         # t -> 3t + i, then i (= 2t + i) is parallel
    ax = plot.domain(wave, "S0", sizes=JACOBI, dims=("i", "t"), color_by="time", dependences=False)
    expected = {3 * t + i for t in range(6) for i in range(1, 9)}
    assert ax.polyopt["colors"] == len(expected) == _point_colors(ax)
    assert ax.polyopt["parallel"] == ["i"]
    # the original loop nest runs one time step per t (nothing parallel)
    ax = plot.domain(k, "S0", sizes=JACOBI, schedule=po.schedule(k, "original"), color_by="time")
    assert ax.polyopt["colors"] == 6 and ax.polyopt["parallel"] == []


def test_dependences_filtered_by_kind_and_slice():
    g = po.suite.get("gemm").kernel          # S1[i, k, j]: C[i][j] += ... along k
    sizes = {"NI": 4, "NJ": 3, "NK": 5}
    ax = plot.domain(g, "S1", sizes=sizes, dims=("k", "j"), fix={"i": 1})
    assert ax.polyopt["points"] == 5 * 3 and ax.polyopt["fixed"] == {"i": 1}
    assert ax.polyopt["arrows"] == {"RAW": 4 * 3, "WAR": 4 * 3, "WAW": 4 * 3}
    ax = plot.domain(g, "S1", sizes=sizes, dims=("k", "j"), kinds=("RAW",))
    assert ax.polyopt["arrows"] == {"RAW": 12}
    # no dependence between different j of one slice (i, j): none inside the drawn slice
    ax = plot.domain(g, "S1", sizes=sizes, dims=("i", "j"))
    assert sum(ax.polyopt["arrows"].values()) == 0


def test_seidel_2d_slice_and_indirect_dependences():
    k = po.suite.get("seidel-2d").kernel
    ax = plot.domain(k, "S0", sizes={"N": 6, "TSTEPS": 3}, dims=("i", "j"), fix={"t": 1})
    assert ax.polyopt["points"] == 16 and ax.polyopt["arrows"]["RAW"] > 0
    j = po.suite.get("jacobi-1d").kernel
    ax = plot.domain(j, "S0", sizes=JACOBI, indirect=True)
    assert ax.polyopt["arrows"]["indirect"] > 0


def test_refusals():
    g = po.suite.get("gemm").kernel
    sizes = {"NI": 4, "NJ": 4, "NK": 4}
    with pytest.raises(plot.PlotError, match="no statement 'S9'.*S0, S1"):
        plot.domain(g, "S9", sizes=sizes)
    with pytest.raises(plot.PlotError, match="more than 20000"):
        plot.domain(g, "S0", sizes={"NI": 1000, "NJ": 1000, "NK": 4})
    with pytest.raises(plot.PlotError, match="no dimension 'x'"):
        plot.domain(g, "S1", sizes=sizes, dims=("i", "x"))
    with pytest.raises(plot.PlotError, match="no dimension 'q'"):
        plot.domain(g, "S1", sizes=sizes, dims=("i", "j"), fix={"q": 0})
    with pytest.raises(plot.PlotError, match="missing NK"):
        plot.domain(g, "S1", sizes={"NI": 4, "NJ": 4})
    with pytest.raises(plot.PlotError, match="needs a schedule"):
        plot.domain(g, "S1", sizes=sizes, color_by="tile")
    with pytest.raises(plot.PlotError, match="no tile loops"):
        plot.domain(g, "S1", sizes=sizes, schedule=po.schedule(g, "original"), color_by="tile")
    with pytest.raises(plot.PlotError, match="kind"):
        plot.domain(g, "S1", sizes=sizes, kinds=("RAR",))
    assert issubclass(plot.PlotError, po.PolyoptError)


def test_missing_matplotlib_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ImportError, match=r"pip install polyopt\[plot\]") as info:
        plot.domain(po.suite.get("gemm").kernel, sizes={"NI": 2, "NJ": 2, "NK": 2})
    assert isinstance(info.value, po.PolyoptError)


def test_schedule_tree_has_one_box_per_node():
    g = po.suite.get("gemm").kernel
    for s in (po.schedule(g, "pluto", tile=4), po.schedule(g, "original"),
              _jacobi_skewed()[1].tile("t", "i", sizes=(4, 4))):
        ax = plot.schedule_tree(s)
        nodes = 1 + sum(1 for _, node in N.walk(s.root) if not isinstance(node, N.Leaf))  # + domain
        boxes = [t for t in ax.texts if t.get_bbox_patch() is not None]
        assert len(boxes) == nodes == ax.polyopt["nodes"]
        ax.figure.canvas.draw()
    texts = " ".join(t.get_text() for t in plot.schedule_tree(po.schedule(g, "pluto", tile=4)).texts)
    assert "mark parallel" in texts and "i_0 \u2225" in texts and "filter S1" in texts


def test_cli_writes_a_png(tmp_path, capsys):
    from polyopt.cli import main
    path = tmp_path / "jacobi.png"
    assert main(["show", "jacobi-1d", "--plot", str(path), "--param", "N=8", "--param", "TSTEPS=4"]) == 0
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"wrote {path}" in capsys.readouterr().out
    assert main(["show", "gemm", "--plot", str(tmp_path / "x.png"), "--param", "Q=3"]) == 2
