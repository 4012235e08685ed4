"""Tile sizes from the machine's caches: a footprint model of one band's tiles.

For a band (members m_0..m_{n-1}) every array reference of every statement in it is rewritten in
band coordinates: subscript row d = sum_k G[d, k] m_k. A tile of sizes T then touches about
``prod_d sum_k |G[d, k]| T_k`` elements of that reference (references to one array with the same
linear part, like stencil neighbours, count once). For a statement in fewer loops than the band
(cholesky's ``A[i][i] = sqrt(A[i][i])`` at (i, i, i) of its (k, i, j) band) G uses the outermost
members that give its iterators, and a subscript linear in the later ones counts nothing more
(the diagonal ``A[i][i]``: one element per i, not a square); see :func:`band_references`. The
sizes chosen minimise the elements moved per iteration (footprint / tile volume) under two
capacity limits read from the OS:

- the whole tile's working set fits half the L2 cache (it is reused across the tile), and
- the working set of one iteration of the outermost point loop fits half the L1 cache (it is
  reused across that loop).

Subscript dimensions not expressible in the band's members (they vary outside the band) are
left out of the footprint: the model is for the band alone.

With ``conflict_free``, the working set of one iteration of the outermost point loop may also
hold at most as many rows (elements differing outside the last subscript) of each array as the
L1 cache has ways. Rows of an array whose row length is a multiple of 4 KiB (512 doubles) map to
the same cache sets, so a taller tile evicts its own rows before they are reused: gemm's
256x48x32 tiles run 3-4x slower at 512^3 than at 500^3. The limit costs about 10 % where row
lengths are not such multiples (kept off for the suite's sizes; po.einsum, whose sizes come from
the user, turns it on).
"""
from __future__ import annotations

import itertools
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import islpy as isl
import numpy as np

from polyopt.analysis.scop import Scop

#: Sizes tried per band member (each filtered by its ``multiple_of``).
CANDIDATE_SIZES = (8, 16, 24, 32, 48, 64, 96, 128, 192, 256)
#: Where a tile's outermost point loop walks the rows of a transposed array with conflict-free
#: tiles, each tile reads this many bytes of every row: 8 cache lines, a run the hardware
#: prefetcher follows (einsum 'ijk->kj' at 128^3: 64 elements 1.1 ms, 8 elements 2.0 ms).
STREAM_RUN_BYTES = 512
#: Largest "auto" tile size of a band without parallel members (it gets a wavefront): isl's AST
#: generation time grows steeply with the tile size of such skewed bands (jacobi-1d: 0.5 s at
#: 32, 6.6 s at 64, over 30 s at 192).
WAVEFRONT_TILE_CAP = 32
#: Used when the model cannot describe a band (no affine accesses in its members).
FALLBACK_SIZE = 32
_DEFAULT_CACHES = {1: 32 * 1024, 2: 512 * 1024}
_DEFAULT_WAYS = 8


def _data_cache_entry(level: int, entry: str) -> str | None:
    """One sysfs attribute (``size``, ``ways_of_associativity``) of the data cache of ``level``."""
    root = Path("/sys/devices/system/cpu/cpu0/cache")
    for index in sorted(root.glob("index*")) if root.is_dir() else []:
        try:
            if int((index / "level").read_text()) != level or "Instruction" in (index / "type").read_text():
                continue
            return (index / entry).read_text().strip().upper()
        except (OSError, ValueError):
            continue
    return None


@lru_cache(maxsize=None)
def cache_bytes(level: int) -> int:
    """Size of the CPU data cache of ``level`` from sysfs (Linux); a common size when unknown."""
    text = _data_cache_entry(level, "size")
    if not text:
        return _DEFAULT_CACHES.get(level, _DEFAULT_CACHES[2])
    scale = {"K": 1024, "M": 1024 ** 2}.get(text[-1], 1)
    return int(text.rstrip("KM")) * scale


@lru_cache(maxsize=None)
def cache_ways(level: int) -> int:
    """Associativity of the CPU data cache of ``level`` from sysfs; 8 when unknown."""
    text = _data_cache_entry(level, "ways_of_associativity")
    return int(text) if text and text.isdigit() and int(text) > 0 else _DEFAULT_WAYS


@lru_cache(maxsize=None)
def vector_bytes() -> int:
    """Width of the host's widest SIMD registers in bytes (64 with AVX-512, 32 with AVX2)."""
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return 16
    return 64 if "avx512f" in flags else 32 if "avx2" in flags else 16


def _linear_part(aff: isl.Aff) -> list[int] | None:
    """Coefficients of the input dimensions; None when integer divisions appear."""
    if aff.dim(isl.dim_type.div):
        return None
    return [aff.get_coefficient_val(isl.dim_type.in_, k).to_python() for k in range(aff.dim(isl.dim_type.in_))]


def _single_affs(pw_multi: isl.PwMultiAff) -> list[isl.Aff] | None:
    pieces: list[isl.MultiAff] = []
    pw_multi.foreach_piece(lambda _, multi: pieces.append(multi))
    if len(pieces) != 1:
        return None
    return [pieces[0].get_at(d) for d in range(pieces[0].dim(isl.dim_type.out))]


def _member_matrices(partial: isl.MultiUnionPwAff) -> dict[str, np.ndarray]:
    """Per statement, the band members as rows of coefficients over its iterators."""
    rows: dict[str, list] = {}
    for k in range(partial.dim(isl.dim_type.set)):
        def piece(pa: isl.PwAff, k=k) -> None:
            name = pa.get_space().get_tuple_name(isl.dim_type.in_)
            affs: list[isl.Aff] = []
            pa.foreach_piece(lambda _, aff: affs.append(aff))
            row = _linear_part(affs[0]) if len(affs) == 1 else None
            rows.setdefault(name, [None] * partial.dim(isl.dim_type.set))[k] = row
        partial.get_at(k).foreach_pw_aff(piece)
    return {name: np.array(r, dtype=float) for name, r in rows.items() if all(x is not None for x in r)}


def band_references(partial: isl.MultiUnionPwAff, scop: Scop) -> list[tuple[int, np.ndarray]]:
    """(element bytes, |G|) per distinct array reference of the band's statements, where row d of
    G gives subscript d in the band's members; rows outside the band's span are dropped.

    Where a statement sits in fewer loops than the band, some of its members are linear in the
    others (cholesky's ``A[i][i] = sqrt(A[i][i])`` runs at (i, i, i) of a three-member band): G
    writes its iterators in the outermost independent members alone (:func:`_outermost_basis`),
    where a tile has the fewest values of them (one in a row of tiles), not in least squares'
    even split over all of them. And a subscript linear in the reference's later ones is dropped
    (the diagonal ``A[i][i]`` touches one element per value of i, not a square)."""
    seen: dict[tuple, tuple[int, np.ndarray]] = {}
    for name, members in _member_matrices(partial).items():
        stmt = scop.statement(name)
        basis = _outermost_basis(members)
        for ref in stmt.accesses:
            if ref.relation.dim(isl.dim_type.out) == 0:
                continue
            affs = _single_affs(isl.PwMultiAff.from_map(ref.relation))
            subscripts = [_linear_part(a) for a in affs] if affs is not None else None
            if not subscripts or any(s is None for s in subscripts):
                continue
            F = np.array(subscripts, dtype=float)
            G = np.zeros((F.shape[0], members.shape[0]))
            if basis:  # F = G^T M with G zero outside the basis
                G_basis, *_ = np.linalg.lstsq(members[basis].T, F.T, rcond=None)
                G[:, basis] = G_basis.T
            exact = np.all(np.abs(G @ members - F) < 1e-9, axis=1)
            G = np.round(G[exact], 9)
            G = np.abs(G[_independent_rows(G)])
            key = (ref.array, G.tobytes(), G.shape)
            seen.setdefault(key, (scop.arrays[ref.array].dtype.bits // 8, G))
    return list(seen.values())


def _outermost_basis(members: np.ndarray) -> list[int]:
    """A basis of a statement's band members (rows of ``members``: coefficients over its
    iterators), outermost first: each member in it is linearly independent of those before it."""
    basis: list[int] = []
    for k in range(members.shape[0]):
        if np.linalg.matrix_rank(members[basis + [k]]) > len(basis):
            basis.append(k)
    return basis


def _independent_rows(G: np.ndarray) -> list[int]:
    """The rows of ``G`` that are zero (a constant subscript, a factor 1) or linearly independent
    of the nonzero rows after them, in order (the last subscript stays the last)."""
    kept: list[int] = []
    nonzero: list[int] = []
    for d in reversed(range(G.shape[0])):
        if not G[d].any():
            kept.insert(0, d)
        elif np.linalg.matrix_rank(G[[d] + nonzero]) > len(nonzero):
            kept.insert(0, d)
            nonzero.append(d)
    return kept


def _elements(G: np.ndarray, grids: list[np.ndarray]) -> np.ndarray:
    """Elements a reference with subscript matrix ``G`` touches in a tile of sizes ``grids``."""
    count = np.ones(np.broadcast(*grids).shape)
    for row in G:
        count = count * np.maximum(1.0, sum(c * g for c, g in zip(row, grids)))
    return count


def _footprints(references: list[tuple[int, np.ndarray]], grids: list[np.ndarray]) -> np.ndarray:
    """Bytes touched by a tile, for every combination of sizes in the broadcast ``grids``."""
    return sum((element_bytes * _elements(G, grids) for element_bytes, G in references),
               np.zeros(np.broadcast(*grids).shape))


def footprint_bytes(references: list[tuple[int, np.ndarray]], extents: Sequence[float]) -> float:
    """Bytes the references touch in a block of the band's iteration space with these extents
    per member (a tile, or the whole loop nest with its extents assumed)."""
    return float(_footprints(references, [np.array(float(e)) for e in extents]))


def _most_rows(references: list[tuple[int, np.ndarray]], grids: list[np.ndarray]) -> np.ndarray:
    """The most rows (elements differing outside the last subscript) one reference touches."""
    return np.max([_elements(G[:-1], grids) for _, G in references], axis=0)


def band_tile_sizes(partial: isl.MultiUnionPwAff, scop: Scop, *,
                    multiple_of: Sequence[int] | None = None, uniform: bool = False,
                    largest: int | None = None, conflict_free: bool = False) -> list[int]:
    """Tile sizes for a band with the given partial schedule (see the module docstring).

    ``multiple_of[k]`` (default 1) constrains member k's size, e.g. to whole register tiles;
    ``uniform`` asks for one size for all members (a wavefront over tile origins has unit-step
    fronts only then, and the verifier's sets stay small); ``largest`` caps every size;
    ``conflict_free`` limits the rows of each array reused across the outermost point loop to
    the L1 cache's ways (module docstring)."""
    n = partial.dim(isl.dim_type.set)
    multiples = list(multiple_of or []) + [1] * n
    references = band_references(partial, scop)
    if not references:
        return [-(-FALLBACK_SIZE // m) * m for m in multiples[:n]]  # whole multiples
    choices = []
    for k in range(n):
        sizes = [s for s in CANDIDATE_SIZES if s % multiples[k] == 0 and s <= (largest or s)] or [multiples[k]]
        choices.append(np.array(sizes, dtype=float))
    grids = list(np.meshgrid(*choices, indexing="ij"))
    volume = np.prod(np.stack(grids), axis=0)
    whole = _footprints(references, grids)
    one_row_grids = [np.ones_like(grids[0])] + grids[1:]
    one_row = _footprints(references, one_row_grids)
    feasible = (whole <= cache_bytes(2) / 2) & (one_row <= cache_bytes(1) / 2)
    if conflict_free:  # the fewest rows that fit the ways, or the fewest possible
        rows = np.where(feasible, _most_rows(references, one_row_grids), np.inf)
        feasible &= rows <= max(cache_ways(1), rows.min())
    if uniform:
        feasible &= np.all(np.stack(grids) == grids[0], axis=0)
    cost = np.where(feasible, whole / volume, np.inf)
    if not np.isfinite(cost).any():  # nothing fits: the smallest tiles
        return [int(c[0]) for c in choices]
    # ties go to the smaller outermost size (a member without reuse, like a batch dimension,
    # then leaves iterations to the thread team), then to the larger inner sizes; with
    # conflict_free, where the outermost member walks the rows of the widest reference, to the
    # size nearest a run of STREAM_RUN_BYTES along each row
    outermost = choices[0]
    element_bytes, widest = max(references, key=lambda ref: ref[1].shape[0])
    if conflict_free and _streams_rows(widest, member=0):
        outermost = np.abs(choices[0] * element_bytes - STREAM_RUN_BYTES)
    best = min(itertools.product(*(range(len(c)) for c in choices)),
               key=lambda idx: (cost[idx], outermost[idx[0]], idx[0], [-i for i in idx[:0:-1]]))
    return [int(choices[k][i]) for k, i in enumerate(best)]


def _streams_rows(G: np.ndarray, member: int) -> bool:
    """Whether ``member`` indexes only the last subscript of a reference with subscript matrix
    ``G`` (for the reference with the most subscripts: a transposition's input, read along its
    rows). False for a reference without subscripts (nothing to stream)."""
    return G.shape[0] > 0 and bool(G[-1, member]) and not G[:-1, member].any()
