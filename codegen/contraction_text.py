"""Pieces of CUDA C that every contraction kernel shares, whatever its engine: the batch and
outer-K slots it decodes, the run strides that are literal, the grid-stride loops over tiles,
the offsets of a batch and of an outer-K number, an element's initial value and its store
through the epilogue statements. :mod:`polyopt.codegen.cuda_contraction` (SIMT and ``mma.sync``
kernels) and :mod:`polyopt.codegen.cuda_wgmma` (Hopper ``wgmma`` kernels) both build on them.
"""
from __future__ import annotations

from dataclasses import dataclass

from polyopt.analysis import expr as E
from polyopt.analysis.contraction import ELEMENT, Contraction, epilogue_indices
from polyopt.analysis.scop import Scop
from polyopt.codegen.c import CExpr
from polyopt.codegen.cuda import CudaExpr


@dataclass(frozen=True)
class Slots:
    """How many batch slots (grid z) and outer-K slots the kernel decodes: every output index
    but the innermost M and N ones may land in a batch slot, every K index but one in an outer-K
    slot (:func:`polyopt.targets.contraction.launch_layout` fills the unused ones with extent 1)."""

    batch: int
    outer_k: int
    epilogue: int = 0

    @staticmethod
    def of(c: Contraction) -> "Slots":
        """Also, per output index an epilogue reads by (:func:`epilogue_indices`), where its
        value comes from: the coordinate (0: M run, 1: N run, 2: batch), divisor, modulus."""
        return Slots(len(c.batch) + len(c.m) + len(c.n) - 2, len(c.k) - 1, len(epilogue_indices(c)))


@dataclass(frozen=True)
class UnitStrides:
    """Which run strides are 1 whatever the sizes: the innermost M index (last in output order)
    is the left operand's last subscript (``lm``), and so on; those strides are literal in the
    code and the tile loads walk them."""

    lm: bool
    lk: bool
    rk: bool
    rn: bool
    cm: bool
    cn: bool

    @staticmethod
    def of(c: Contraction) -> "UnitStrides":
        m, n, k = c.m[-1], c.n[-1], c.k[-1]
        return UnitStrides(c.left.index[-1] == m, c.left.index[-1] == k, c.right.index[-1] == k,
                           c.right.index[-1] == n, c.output_index[-1] == m, c.output_index[-1] == n)


def scalar_text(scop: Scop, value: E.Expr, element: str) -> str:
    """C of a staged value with its element as the C expression ``element``."""
    return CExpr(scop)(E.substitute(value, lambda x: E.Var(element, "scalar", x.dtype)
                                    if isinstance(x, E.Var) and x.name == ELEMENT else None))


def batch_offsets(slots: Slots) -> list[str]:
    """Decode batch index ``_z`` into the offsets of L, R and C (innermost slot first)."""
    if not slots.batch:
        return ["    const long _offL = 0, _offR = 0, _offC = 0;"]
    out = ["    long _offL = 0, _offR = 0, _offC = 0, _zr = _z;"]
    for j in reversed(range(slots.batch)):
        out.append(f"    {{ const long _i = _zr % _zE{j}; _zr /= _zE{j}; "
                   f"_offL += _i * _zL{j}; _offR += _i * _zR{j}; _offC += _i * _zC{j}; }}")
    return out


def outer_k_offsets(slots: Slots) -> list[str]:
    """Decode outer-K number ``_nko`` into the offsets ``_nkL``/``_nkR`` of its indices."""
    out = ["        _nkL = 0; _nkR = 0;", "        { long _kr = _nko;"]
    for j in reversed(range(slots.outer_k)):
        out.append(f"          {{ const long _i = _kr % _kE{j}; _kr /= _kE{j}; "
                   f"_nkL += _i * _kL{j}; _nkR += _i * _kR{j}; }}")
    return out + ["        }"]


def grid_loops(c: Contraction, slots: Slots, t: str) -> list[str]:
    """The grid-stride loops over batch, M tiles and N tiles, and the init of the block."""
    out = ["  for (long _z = blockIdx.z; _z < _Z; _z += gridDim.z) {"]
    out += batch_offsets(slots)
    out += ["    for (long _m0 = (long)blockIdx.y * BM; _m0 < _M; _m0 += (long)gridDim.y * BM) {",
            "    for (long _n0 = (long)blockIdx.x * BN; _n0 < _N; _n0 += (long)gridDim.x * BN) {"]
    return out


def element_store(scop: Scop, c: Contraction, acc: str, t: str) -> list[str]:
    """The store of a finished element ``acc`` (at ``_m``, ``_n`` of batch ``_z``): through
    the epilogue statements in order, each reading the value so far as its element and other
    arrays at the output indices (decoded from the coordinates with the launch's divisors)."""
    out = [f"              {t} _v = ({t}){acc};"]
    names = {}
    for d, index in enumerate(epilogue_indices(c)):
        names[index] = f"_x{d}"
        out.append(f"              const long _x{d} = ((_xs{d} == 0 ? _m : _xs{d} == 1 ? _n : _z) / _xd{d}) % _xm{d};")
    emit = CudaExpr(scop)
    for value in c.epilogue:
        value = E.substitute(value, lambda x: E.Var(names[x.name], "iter", x.dtype)
                             if isinstance(x, E.Var) and x.kind == "iter" else None)
        out.append(f"              _v = {emit(E.substitute(value, lambda x: E.Var('_v', 'scalar', x.dtype) if isinstance(x, E.Var) and x.name == ELEMENT else None))};")
    out.append(f"              {c.output}[_offC + _m * sCm + _n * sCn] = _v;")
    return out


def init_text(scop: Scop, c: Contraction, element: str) -> str:
    """C of the output element's starting value (the init statement's value of ``element``, or
    ``element`` itself)."""
    return element if c.init is None else scalar_text(scop, c.init, element)


__all__ = ["Slots", "UnitStrides", "batch_offsets", "element_store", "grid_loops", "init_text", "outer_k_offsets",
           "scalar_text"]
