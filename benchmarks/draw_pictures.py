"""Regenerate the pictures of docs/pictures.md (docs/img/pictures_*.png) with po.plot.

    python benchmarks/draw_pictures.py [--out docs/img]

Needs matplotlib (pip install polyopt[plot]); draws with the Agg backend at 80 dpi, so the
files stay a few tens of KB. Each picture is built exactly as docs/pictures.md shows it.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import polyopt as po  # noqa: E402
from polyopt import plot  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DPI = 80
JACOBI = {"N": 18, "TSTEPS": 8}
JACOBI_DEPS = {"N": 9, "TSTEPS": 4}      # fewer points: every dependence arrow stays visible


def jacobi_schedules():
    """jacobi-1d's loops as written, time-skewed (S1 shifted by one and fused into S0's loop,
    then i skewed by 2t), tiled 4x4, and two wavefronts: of the points and of the tiles."""
    k = po.suite.get("jacobi-1d").kernel
    original = po.schedule(k, "original")
    skewed = original.shift("i@S1", offset=1).fuse("i", "i@S1").skew("t", "i", factor=2)
    tiled = skewed.tile("t", "i", sizes=(4, 4))
    return k, {"original": original, "skewed": skewed, "tiled": tiled,
               "wavefront": skewed.wavefront("t", "i"), "tile_wavefront": tiled.wavefront("t_0", "i_0")}


def pictures():
    """(file name, function drawing into a new Axes) for every picture of the docs page."""
    k, s = jacobi_schedules()
    gemm = po.suite.get("gemm").kernel
    seidel = po.suite.get("seidel-2d").kernel
    return [
        ("pictures_jacobi1d_original.png",
         lambda: plot.domain(k, "S0", sizes=JACOBI_DEPS, dims=("i", "t"), schedule=s["original"],
                             kinds=("RAW",), indirect=True)),
        ("pictures_jacobi1d_tiled.png",
         lambda: plot.domain(k, "S0", sizes=JACOBI, dims=("i", "t"), schedule=s["tiled"], color_by="tile",
                             kinds=())),
        ("pictures_jacobi1d_wavefront.png",
         lambda: plot.domain(k, "S0", sizes=JACOBI, dims=("i", "t"), schedule=s["wavefront"], color_by="time",
                             kinds=())),
        ("pictures_jacobi1d_tile_wavefront.png",
         lambda: plot.domain(k, "S0", sizes=JACOBI, dims=("i", "t"), schedule=s["tile_wavefront"],
                             color_by="time", kinds=())),
        ("pictures_gemm_slice.png",
         lambda: plot.domain(gemm, "S1", sizes={"NI": 6, "NJ": 6, "NK": 8}, dims=("k", "j"), fix={"i": 0},
                             schedule=po.schedule(gemm, "pluto", tile=4), color_by="tile")),
        ("pictures_seidel2d_slice.png",
         lambda: plot.domain(seidel, "S0", sizes={"N": 8, "TSTEPS": 3}, dims=("j", "i"), fix={"t": 1})),
        ("pictures_gemm_pluto_tree.png",
         lambda: plot.schedule_tree(po.schedule(gemm, "pluto"))),
    ]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "img"))
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, draw in pictures():
        ax = draw()
        ax.figure.savefig(out / name, dpi=DPI, bbox_inches="tight", pil_kwargs={"optimize": True})
        plt.close(ax.figure)
        print(f"{out / name}: {(out / name).stat().st_size // 1024} KB")


if __name__ == "__main__":
    main()
