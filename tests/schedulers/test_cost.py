"""The cost model behind pluto's defaults: its estimates and decisions on kernels whose best
configuration the autotuner measured (docs/performance.md), and how they reach the user."""
import itertools
import subprocess
import sys

import pytest
import sympy

import polyopt as po
from suite_reference import check_against_reference
from polyopt.schedulers.cost import (TILE_GAIN, WAVEFRONT_PARALLEL_GAIN, WAVEFRONT_PARALLEL_SPEEDUP,
                                     WAVEFRONT_TILE_GAIN, untiled_bytes, wavefront_speedup)
from polyopt.schedulers.cost_formulas import footprint_formula, tile_symbols
from polyopt.schedulers.tilesize import band_references, cache_bytes, footprint_bytes


def _costs(name):
    return po.schedule(po.suite.get(name).kernel, "pluto").cost


def test_gemm_update_band_is_tiled_and_register_tiled_by_default():
    update = [c for c in _costs("gemm") if len(c.loops) == 3][0]
    assert 7.5 < update.untiled_bytes < 8.5          # B streams in: 8 bytes per iteration
    assert update.tiled_bytes < 1.0 and update.tile and update.registers
    scale = [c for c in _costs("gemm") if len(c.loops) == 2][0]
    assert not scale.tile and not scale.registers     # C *= beta: no reuse to gain
    ck = po.compile(po.suite.get("gemm").kernel)
    assert ck.cost == po.schedule(po.suite.get("gemm").kernel, "pluto").cost
    notes = [step.note for step in ck.schedule.trace if step.primitive == "tile"]
    assert notes and notes[0].startswith("cost model: band (")
    assert any(step.primitive == "register_tile" for step in ck.schedule.trace)


@pytest.mark.parametrize("name, tiled", [("jacobi-2d", False), ("fdtd-2d", False), ("seidel-2d", True),
                                         ("lu", True), ("gesummv", False), ("syrk", True)])
def test_decisions_follow_the_measured_winners(name, tiled):
    # autotune at LARGE (docs/performance.md): stencils with parallel loops run best untiled in
    # the original order, seidel-2d/lu/syrk tiled, matrix-vector products gain nothing from tiles
    costs = _costs(name)
    assert any(c.tile for c in costs) == tiled


def test_wavefront_bands_need_the_larger_gain():
    for name in ("jacobi-2d", "seidel-2d"):
        (band,) = _costs(name)
        assert not band.parallel
        assert band.tile == (band.untiled_bytes >= WAVEFRONT_TILE_GAIN * band.tiled_bytes)
    assert WAVEFRONT_TILE_GAIN > TILE_GAIN


def test_untiled_traffic_of_a_matrix_vector_product_is_the_matrix():
    kernel = po.suite.get("mvt").kernel
    band = po.schedule(kernel, "pluto").cost[0]
    assert 7.5 < band.untiled_bytes < 8.5  # one matrix of doubles per iteration (the products run apart)
    from polyopt.transform import nodes as N
    fused = po.schedule(kernel, "pluto", model=False)  # pluto's fused band: both matrices
    first = [b for _, b in N.bands(fused.root) if len(b.members) >= 2][0]
    refs = band_references(first.partial(), kernel.scop)
    assert 15 < untiled_bytes(refs, 2) < 17
    # extents of 10: everything fits, each element comes in once: (2 matrices + 4 vectors) / 100
    assert untiled_bytes(refs, 2, extent=10) == pytest.approx(8 * (2 * 100 + 4 * 10) / 100)


def test_model_off_and_explicit_options_take_over():
    gemm = po.suite.get("gemm").kernel
    plain = po.schedule(gemm, "pluto", model=False)
    assert plain.cost == () and not any(s.primitive in ("tile", "register_tile") for s in plain.trace)
    asked = po.schedule(gemm, "pluto", tile=16)
    assert asked.cost == () and all(step.note == "tile sizes as asked" for step in asked.trace if step.primitive == "tile")
    cuda_like = po.schedule(gemm, "pluto", parallel=False, vectorize=False)
    assert cuda_like.cost == ()


@pytest.mark.parametrize("name", ["gemm", "seidel-2d", "lu", "correlation", "2mm", "syrk"])
def test_default_code_computes_the_reference(name):
    entry = po.suite.get(name)
    sizes = {k: v + 3 for k, v in entry.sizes("MINI").items()}  # odd sizes: partial tiles
    check_against_reference(entry, po.compile(entry.kernel), sizes)


def test_the_estimates_survive_the_disk_cache():
    from polyopt.targets.cache import clear_cache
    gemm = po.suite.get("gemm").kernel
    fresh = po.compile(gemm)
    clear_cache()  # the in-memory cache only: the next compile is a disk hit
    again = po.compile(gemm)
    assert "disk" in again.compile_times and again is not fresh
    assert again.cost == fresh.cost and any(c.registers for c in again.cost)


@pytest.mark.parametrize("name", ["fdtd-2d", "jacobi-2d", "heat-3d"])
def test_stencils_whose_pluto_schedule_is_sequential_run_their_parallel_loops_as_written(name):
    kernel = po.suite.get(name).kernel
    chosen = po.schedule(kernel, "pluto")
    assert any("loops as written" in note for note in chosen.notes)
    assert chosen.map.is_equal(po.schedule(kernel, "original").map)
    assert "mark parallel" in chosen.pretty()
    assert chosen.cost and not any(cost.tile for cost in chosen.cost)
    assert "loops as written" not in " ".join(po.schedule(kernel, "pluto", model=False).notes)


@pytest.mark.parametrize("name", ["bicg", "mvt"])
def test_fusion_that_walks_an_array_with_a_stride_is_undone(name):
    from polyopt.schedulers.cost import strided_fused_bands
    kernel = po.suite.get(name).kernel
    fused = po.schedule(kernel, "pluto", model=False)
    assert strided_fused_bands(fused)
    chosen = po.schedule(kernel, "pluto")
    assert not strided_fused_bands(chosen)
    assert any("separate nests" in note for note in chosen.notes)
    assert chosen.map.is_equal(po.schedule(kernel, "pluto", model=False, fuse="no").map) or \
        any(step.primitive in ("tile", "register_tile") for step in chosen.trace)
    assert not any("separate nests" in note for note in po.schedule(kernel, "pluto", fuse="smart").notes)


def test_gemm_formulas_print_and_evaluate_at_other_tile_sizes():
    update = [c for c in _costs("gemm") if len(c.loops) == 3][0]
    assert str(update.footprint_formula) == "8*T_i*T_j + 8*T_i*T_k + 8*T_j*T_k"  # C, A, B
    assert str(update.traffic_formula) == "8/T_k + 8/T_j + 8/T_i"
    assert update.traffic_formula.subs({"T_i": 64, "T_k": 64, "T_j": 64}) == sympy.Rational(3, 8)
    at_chosen = update.traffic_formula.subs(dict(zip(update.size_symbols, update.tile_sizes)))
    assert float(at_chosen) == update.tiled_bytes
    shown = update.describe(formulas=True)
    assert shown.startswith(str(update)) and "tile footprint 8*T_i*T_j + 8*T_i*T_k + 8*T_j*T_k B" in shown


def _first_band_references(name):
    """The band names and band_references of the first tilable band of pluto's schedule (no model)."""
    from polyopt.transform import nodes as N
    kernel = po.suite.get(name).kernel
    band = next(b for _, b in N.bands(po.schedule(kernel, "pluto", model=False).root)
                if b.permutable and len(b.members) >= 2)
    return band.names, band_references(band.partial(), kernel.scop)


def test_cholesky_footprint_counts_what_its_statements_touch():
    # cholesky's wavefront band (c0, i, c2) = (k, i, j) also runs A[i][i] = sqrt(A[i][i]) (one
    # loop) at (i, i, i), A[i][j] /= A[j][j] (two) at (j, i, j) and A[i][i] -= A[i][k]^2 at
    # (k, i, i). A row of 32^3 tiles (one c0) touches at most 1056 distinct elements (isl, N = 200:
    # A[i][j] 32x31, the two columns, the diagonals); the model counts 32^2 + 3*32 + 1 = 1121,
    # 8968 B, under half a 32 KiB L1. It counted 27.3 KB (the diagonals as squares, iterators
    # split over the members in thirds), over half, and took 24^3 tiles (540 ms against 476 at 32).
    names, references = _first_band_references("cholesky")
    assert names == ("c0", "i", "c2")
    assert footprint_bytes(references, [1, 32, 32]) == 8 * (32 * 32 + 3 * 32 + 1)
    assert footprint_bytes(references, [32, 32, 32]) == 8 * (3 * 32 * 32 + 2 * 32)
    assert sorted(G.tolist() for _, G in references) == [
        [[0, 0, 1], [1, 0, 0]],   # A[j][k]
        [[0, 1, 0]],              # S2's A[i][i]: i is c1 (and c2), one element per i
        [[0, 1, 0], [0, 0, 1]],   # A[i][j]
        [[0, 1, 0], [1, 0, 0]],   # A[i][k], and S1's A[i][j] (j is c0 there)
        [[1, 0, 0]]]              # A[i][i] of S3 and A[j][j] of S1: one element per c0
    (band,) = _costs("cholesky")
    assert str(band.footprint_formula) == "8*T_c0*T_c2 + 8*T_c0*T_i + 8*T_c0 + 8*T_c2*T_i + 8*T_i"
    assert band.tile and not band.parallel
    if cache_bytes(1) >= 32 * 1024:
        assert band.tile_sizes == (32, 32, 32)


def test_full_dimensional_statements_keep_their_footprint():
    # every statement of seidel-2d's skewed band (t, t + i, 2t + i + j) runs in all its loops:
    # the subscripts in the members are unique, and the span rule (the bounding box of the
    # sheared tile) is what it was: a row of 32^3 tiles 8 * 33 * 65 B, over half a 32 KiB L1
    names, references = _first_band_references("seidel-2d")
    assert [G.tolist() for _, G in references] == [[[1, 1, 0], [1, 1, 1]]]
    assert footprint_bytes(references, [1, 32, 32]) == 8 * 33 * 65
    assert footprint_bytes(references, [24, 24, 24]) == 8 * 48 * 72
    (band,) = _costs("seidel-2d")
    if cache_bytes(1) == 32 * 1024:
        assert band.tile_sizes == (24, 24, 24)


@pytest.mark.parametrize("name", po.suite.names())
def test_footprint_formulas_agree_with_the_numeric_model(name):
    # two derivations of one rule: sympy's formula (cost_formulas) against numpy's footprint_bytes,
    # on every band of pluto's schedule at sizes from 1 to past the candidates
    from polyopt.transform import nodes as N
    kernel = po.suite.get(name).kernel
    for _, band in N.bands(po.schedule(kernel, "pluto", model=False).root):
        if not band.permutable or len(band.members) < 2:
            continue
        references = band_references(band.partial(), kernel.scop)
        formula = footprint_formula([(e, G.tolist()) for e, G in references], band.names)
        assert formula is not None
        for sizes in itertools.product((1, 3, 32, 257), repeat=len(band.names)):
            exact = formula.subs(dict(zip(tile_symbols(band.names), sizes)))
            assert float(exact) == footprint_bytes(references, sizes), (band.names, sizes)
    for cost in _costs(name):  # the formulas users get reproduce the estimates they see
        if cost.traffic_formula is not None:
            assert float(cost.traffic_formula.subs(dict(zip(cost.size_symbols, cost.tile_sizes)))) == cost.tiled_bytes


def test_the_default_compile_path_does_not_import_sympy():
    code = ("import sys, polyopt as po; k = po.suite.get('gemm').kernel; po.schedule(k, 'pluto'); "
            "print(po.compile(k).cost[0]); assert 'sympy' not in sys.modules")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]


def _with_threads(monkeypatch, threads):
    import polyopt.targets.arguments as arguments
    monkeypatch.setattr(arguments, "default_num_threads", lambda: threads)


def test_wavefront_speedup_counts_fronts_and_threads():
    speedup, fronts = wavefront_speedup((32, 32), 2)
    assert fronts == 63 and 1.7 < speedup < 1.8      # 32 tile rows and columns: 63 fronts
    assert wavefront_speedup((32, 32), 1)[0] < 1      # one thread: only the barriers
    assert wavefront_speedup((32, 32), 4)[0] > speedup
    assert wavefront_speedup((24, 24, 24), 2)[1] == 2 * 42 - 1  # fronts of the first two tile loops


@pytest.mark.parametrize("name, loops", [("trisolv", ("c0", "i@S1"))])
def test_one_thread_nest_is_tiled_as_a_wavefront_for_two_threads(monkeypatch, name, loops):
    # traffic alone leaves the band untiled (trisolv 0.92x); untiled, its nest ran on one
    # thread: the tiled wavefront was trisolv's only parallel code (docs/performance.md)
    _with_threads(monkeypatch, 2)
    kernel = po.suite.get(name).kernel
    chosen = po.schedule(kernel, "pluto")
    (band,) = [c for c in chosen.cost if c.loops == loops]
    gain = band.untiled_bytes / band.tiled_bytes
    assert not band.parallel and gain < 1 and band.tiled_bytes > 0
    assert gain >= WAVEFRONT_PARALLEL_GAIN and gain * band.speedup >= WAVEFRONT_PARALLEL_SPEEDUP
    assert band.tile and band.tile_sizes == (32, 32) and (band.threads, band.fronts) == (2, 63)
    notes = [step.note for step in chosen.trace if step.primitive == "tile"]
    assert len(notes) == 1 and "its nest runs on one thread" in notes[0] and "on 2 threads" in notes[0]
    assert any(step.primitive == "wavefront" for step in chosen.trace)
    assert "mark parallel" in chosen.pretty()
    # one thread: the barriers make the wavefront slower than the loops, which stay untiled
    _with_threads(monkeypatch, 1)
    (alone,) = [c for c in po.schedule(kernel, "pluto").cost if c.loops == loops]
    assert not alone.tile and alone.threads == 1 and alone.speedup < 1


def test_wavefront_rule_takes_a_band_inside_a_sequential_loop(monkeypatch):
    # floyd-warshall's (i, j) band inside k (gain 0.94x) repeats its wavefront in every k
    # iteration and still wins on 2 threads (1.26x at LARGE, 1.6x at MEDIUM); one thread: untiled
    _with_threads(monkeypatch, 2)
    (band,) = [c for c in po.schedule(po.suite.get("floyd-warshall").kernel, "pluto").cost if c.loops == ("i", "j")]
    assert band.tile and band.tile_sizes == (32, 32) and band.threads == 2 and band.fronts > 0
    _with_threads(monkeypatch, 1)
    (band,) = [c for c in po.schedule(po.suite.get("floyd-warshall").kernel, "pluto").cost if c.loops == ("i", "j")]
    assert not band.tile and band.threads == 1


@pytest.mark.parametrize("name", ["trisolv", "floyd-warshall"])
def test_wavefront_for_the_threads_computes_the_reference(monkeypatch, name):
    _with_threads(monkeypatch, 2)
    entry = po.suite.get(name)
    compiled = po.compile(entry.kernel, schedule=po.schedule(entry.kernel, "pluto"))
    assert any(c.tile and c.threads for c in compiled.cost)
    sizes = {k: v + 3 for k, v in entry.sizes("MINI").items()}  # odd sizes: partial tiles
    check_against_reference(entry, compiled, sizes)


@pytest.mark.parametrize("name", ["nussinov", "heat-3d", "jacobi-2d", "seidel-2d", "lu"])
def test_wavefront_rule_leaves_threaded_and_traffic_decided_bands(monkeypatch, name):
    # nussinov's untiled band (0.89x) already runs its inner loops on the threads; heat-3d's
    # (0.89x) and jacobi-2d's pluto schedules give way to the loops as written, which do;
    # seidel-2d and lu are tiled for their traffic
    _with_threads(monkeypatch, 2)
    for band in po.schedule(po.suite.get(name).kernel, "pluto").cost:
        assert band.threads == 0 and band.tile == (band.untiled_bytes >= WAVEFRONT_TILE_GAIN * band.tiled_bytes)
