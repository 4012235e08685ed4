"""Pieces of CUDA C that every contraction kernel shares, whatever its engine: the batch and
outer-K slots it decodes, the run strides that are literal, the grid-stride loops over tiles,
the offsets of a batch and of an outer-K number, an element's initial value and its store
through the epilogue statements, and for an output domain cut out of its bounding box
(:attr:`~polyopt.analysis.contraction.Contraction.domain`) the tests of a tile and of an
element against it. :mod:`polyopt.codegen.cuda_contraction` (SIMT and ``mma.sync``
kernels) and :mod:`polyopt.codegen.cuda_wgmma` (Hopper ``wgmma`` kernels) both build on them.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from polyopt.analysis import expr as E
from polyopt.analysis.contraction import ELEMENT, Contraction, Operand, epilogue_indices
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
    #: Operand pairs (:attr:`~polyopt.analysis.contraction.Contraction.pairs`): each pair after
    #: the first has its own run, batch and outer-K strides.
    pairs: int = 1

    @staticmethod
    def of(c: Contraction) -> "Slots":
        """Also, per output index an epilogue reads by or a batch index the output domain's
        constraints name (:func:`epilogue_indices`), where its value comes from: the coordinate
        (0: M run, 1: N run, 2: batch), divisor, modulus."""
        return Slots(len(c.batch) + len(c.m) + len(c.n) - 2, len(c.k) - 1, len(epilogue_indices(c)), len(c.pairs))


@dataclass(frozen=True)
class UnitStrides:
    """Which run strides are 1 whatever the sizes: the innermost M index (last in output order)
    is the left operand's last subscript (``lm``), and so on; those strides are literal in the
    code and the tile loads walk them. With several operand pairs a stride is literal only
    where it is 1 in every pair (the K loop of every pair shares the kernel's tile layouts)."""

    lm: bool
    lk: bool
    rk: bool
    rn: bool
    cm: bool
    cn: bool

    @staticmethod
    def of(c: Contraction) -> "UnitStrides":
        m, n, k = c.m[-1], c.n[-1], c.k[-1]
        lefts, rights = [left.index[-1] for left, _ in c.pairs], [right.index[-1] for _, right in c.pairs]
        return UnitStrides(all(i == m for i in lefts), all(i == k for i in lefts), all(i == k for i in rights),
                           all(i == n for i in rights), c.output_index[-1] == m, c.output_index[-1] == n)


def scalar_text(scop: Scop, value: E.Expr, element: str) -> str:
    """C of a staged value with its element as the C expression ``element``."""
    return CExpr(scop)(E.substitute(value, lambda x: E.Var(element, "scalar", x.dtype)
                                    if isinstance(x, E.Var) and x.name == ELEMENT else None))


def batch_offsets(slots: Slots, arrays: str = "LRC") -> list[str]:
    """Decode batch index ``_z`` into the offsets ``_off{a}`` of each of ``arrays`` (``L``,
    ``R``, ``C``; innermost slot first)."""
    offsets = ", ".join(f"_off{a} = 0" for a in arrays)
    if not slots.batch:
        return [f"    const long {offsets};"]
    out = [f"    long {offsets}, _zr = _z;"]
    for j in reversed(range(slots.batch)):
        out.append(f"    {{ const long _i = _zr % _zE{j}; _zr /= _zE{j}; "
                   + " ".join(f"_off{a} += _i * _z{a}{j};" for a in arrays) + " }")
    return out


#: The operands' run strides as the kernel's prologue names them (constants: 1, or the launch
#: argument of the name with ``_`` before it).
RUN_STRIDES = ("sLm", "sLk", "sRk", "sRn")


def pair_stride_names(slots: Slots) -> tuple[str, ...]:
    """The names of the operand strides a K loop reads -- :data:`RUN_STRIDES`, then per batch
    slot ``j`` the kernel parameters ``_zL{j}``, ``_zR{j}``, per outer-K slot ``_kL{j}``,
    ``_kR{j}`` -- in the order of the launch arguments of each pair after the first."""
    return (RUN_STRIDES + tuple(f"_z{o}{j}" for j in range(slots.batch) for o in "LR") +
            tuple(f"_k{o}{j}" for j in range(slots.outer_k) for o in "LR"))


def pair_argument(name: str, pair: int) -> str:
    """The launch argument holding stride ``name`` (:func:`pair_stride_names`) of pair
    ``pair`` >= 1 (a run stride's argument is its name with ``_`` before it)."""
    return f"{'_' if name in RUN_STRIDES else ''}{name}_{pair}"


def _pair_scope(c: Contraction, slots: Slots, unit: UnitStrides, pair: int) -> list[str]:
    """The opening of the block running the K loop of operand pair ``pair`` (0: none, the
    kernel's names are the first pair's): it binds the names the K loop reads -- the run
    strides (literal 1 where :class:`UnitStrides` says), the batch and outer-K slots' strides,
    the batch offsets ``_offL``/``_offR`` decoded from ``_z`` -- to that pair's, so one K loop
    text serves every pair. Closed by :func:`_pair_scope_end`."""
    if not pair:
        return []
    left, right = c.pairs[pair]
    literal = dict(zip(RUN_STRIDES, (unit.lm, unit.lk, unit.rk, unit.rn)))
    names = pair_stride_names(slots)
    out = [f"    {{ /* operand pair {pair + 1} of {slots.pairs}: {left.array}[{', '.join(left.index)}] x "
           f"{right.array}[{', '.join(right.index)}] */",
           "    const long " + ", ".join(f"{name} = {'1' if literal.get(name) else pair_argument(name, pair)}"
                                         for name in names) + ";"]
    return out + batch_offsets(slots, "LR")


def _pair_scope_end(pair: int) -> list[str]:
    """The end of :func:`_pair_scope`'s block."""
    return ["    }"] if pair else []


def pair_k_loops(c: Contraction, k_loop: Callable[[tuple[Operand, Operand]], list[str]]) -> list[str]:
    """The K loops of every operand pair one after the other into the same accumulators
    (``k_loop(pair)``: the text of one pair's K loop, reading its operands' arrays and values),
    each pair after the first in its :func:`_pair_scope`; one pair: its K loop alone."""
    slots, unit = Slots.of(c), UnitStrides.of(c)
    out = []
    for pair, operands in enumerate(c.pairs):
        out += _pair_scope(c, slots, unit, pair) + k_loop(operands) + _pair_scope_end(pair)
    return out


def outer_k_offsets(slots: Slots) -> list[str]:
    """Decode outer-K number ``_nko`` into the offsets ``_nkL``/``_nkR`` of its indices."""
    out = ["        _nkL = 0; _nkR = 0;", "        { long _kr = _nko;"]
    for j in reversed(range(slots.outer_k)):
        out.append(f"          {{ const long _i = _kr % _kE{j}; _kr /= _kE{j}; "
                   f"_nkL += _i * _kL{j}; _nkR += _i * _kR{j}; }}")
    return out + ["        }"]


def grid_loops(c: Contraction, slots: Slots, t: str, split_k: int = 0) -> list[str]:
    """The grid-stride loops over batch, M tiles and N tiles, and the init of the block; for a
    cut box, the test that skips a tile with no element in it (:func:`_tile_skip`).
    ``split_k``: the blocks of a cluster that many along x share each tile (the kernel splits
    its K among them), so every block of a cluster walks the same tiles."""
    x, blocks_x = ("blockIdx.x", "gridDim.x") if not split_k else (f"(blockIdx.x / {split_k})",
                                                                   f"(gridDim.x / {split_k})")
    out = ["  for (long _z = blockIdx.z; _z < _Z; _z += gridDim.z) {"]
    out += batch_offsets(slots)
    out += ["    for (long _m0 = (long)blockIdx.y * BM; _m0 < _M; _m0 += (long)gridDim.y * BM) {",
            f"    for (long _n0 = (long){x} * BN; _n0 < _N; _n0 += (long){blocks_x} * BN) {{"]
    return out + _tile_skip(c)


def _linear(e: E.Expr) -> dict[E.Var | None, int]:
    """The coefficients of an integer affine expression (iterators and parameters), the
    constant under None."""
    if isinstance(e, E.Const):
        return {None: int(e.value)}
    if isinstance(e, E.Var):
        return {e: 1}
    if isinstance(e, E.Cast):
        return _linear(e.operand)
    if isinstance(e, E.Unary) and e.op == "neg":
        return {x: -v for x, v in _linear(e.operand).items()}
    if isinstance(e, E.Binary) and e.op in ("+", "-", "*"):
        lhs, rhs = _linear(e.lhs), _linear(e.rhs)
        if e.op == "*":
            scale, other = (lhs[None], rhs) if set(lhs) == {None} else (rhs[None], lhs)
            return {x: scale * v for x, v in other.items()}
        sign = 1 if e.op == "+" else -1
        return {x: lhs.get(x, 0) + sign * rhs.get(x, 0) for x in lhs.keys() | rhs.keys()}
    raise ValueError(f"not an affine constraint: {E.to_source(e)}")


def _constraint_text(e: E.Expr, value) -> str:
    """C of ``e`` (an affine constraint's expression), each output index ``x`` as
    ``value(x, coefficient)``, the parameters by name (positive terms first, in name order)."""
    terms = []
    def order(item):
        return item[0] is None, item[1] < 0, item[0] and item[0].name
    for x, v in sorted(_linear(e).items(), key=order):
        if v:
            term = str(abs(v)) if x is None else value(x.name, v) if x.kind == "iter" else x.name
            terms.append(("- " if v < 0 else "+ " if terms else "") +
                         (term if abs(v) == 1 or x is None else f"{abs(v)} * {term}"))
    return " ".join(terms) or "0"


def _index_value(c: Contraction, name: str) -> str:
    """C of output index ``name`` (one the output domain's constraints name) at the element
    ``_m``, ``_n`` of the tile: the M or N coordinate itself (a constrained M or N index is its
    group's only one: the run is that index), or for a batch index its value in this tile."""
    if name in c.m:
        return "_m"
    if name in c.n:
        return "_n"
    return f"_ix{epilogue_indices(c).index(name)}"


def element_test(c: Contraction) -> str:
    """The C condition (``" && ..."``, to follow the test of ``_m``, ``_n`` against the run
    extents) that the element at ``_m``, ``_n`` lies in the output domain; empty for a box. An
    element outside is neither read nor written: the kernel computes the bounding box's tiles,
    the statements only the domain's elements."""
    return "".join(f" && {_constraint_text(e, lambda name, v: _index_value(c, name))} >= 0" for e in c.domain)


def _tile_skip(c: Contraction) -> list[str]:
    """For a cut box (:attr:`~polyopt.analysis.contraction.Contraction.domain`), at the start of
    a tile: the value of each batch index the constraints name (``_ix``, decoded from ``_z``),
    and the next tile where one constraint fails on every element of this one (its greatest
    value over the tile's M and N coordinates is negative: no work, half the tiles of a
    triangle)."""
    if not c.domain:
        return []
    named = {x.name for e in c.domain for x in E.walk(e) if isinstance(x, E.Var)}
    out = [f"      const long _ix{d} = (_z / _xd{d}) % _xm{d};"
           for d, i in enumerate(epilogue_indices(c)) if i in c.batch and i in named]

    def greatest(name: str, coefficient: int) -> str:
        if name in c.m:
            return "_m0" if coefficient < 0 else "((_m0 + BM < _M ? _m0 + BM : _M) - 1)"
        if name in c.n:
            return "_n0" if coefficient < 0 else "((_n0 + BN < _N ? _n0 + BN : _N) - 1)"
        return _index_value(c, name)
    none = " || ".join(f"{_constraint_text(e, greatest)} < 0" for e in c.domain)
    return out + [f"      if ({none}) continue;  /* no element of the tile in the output domain */"]


#: The launch argument of a kernel whose output may be stored in a half type (:func:`half_store`):
#: 0 stores the declared f32 elements, 1 the half type's.
HALF_STORE_ARGUMENT = "_Ch"
#: Per half type: its C type and the conversion of a float to it, its pair type and the
#: conversion of two floats to a pair (to nearest even, as numpy's ``astype`` and torch's
#: ``Tensor.to`` round).
HALF_STORES = {"f16": ("__half", "__float2half_rn", "__half2", "__floats2half2_rn"),
                "bf16": ("__nv_bfloat16", "__float2bfloat16_rn", "__nv_bfloat162", "__floats2bfloat162_rn")}


def half_store(scop: Scop, c: Contraction) -> str | None:
    """The half type (``"f16"`` or ``"bf16"``) a kernel of ``c`` may store its output in, each
    finished f32 sum rounded to it once: the operands' type where they are all of one half type
    and the output is f32 and written only -- its init sets it without reading it, so no f32
    value of the output is ever read and the caller may hand over an array of the operands'
    half type instead (the result torch's half matmul gives, written once: no f32 result in
    memory and no second kernel to round it). In a program of contractions (``scop`` the whole
    program) only where no other statement touches the output (2mm's ``tmp`` is read by the
    next product). None otherwise. Such a kernel takes :data:`HALF_STORE_ARGUMENT` after the
    others, the caller saying which type it passed."""
    types = {scop.arrays[a].dtype.name for a in c.operand_arrays}
    if len(types) != 1 or not types <= set(HALF_STORES) or scop.arrays[c.output].dtype.name != "f32":
        return None
    if reads_output(c):
        return None
    if any(ref.array == c.output for stmt in scop.statements if stmt.name not in c.statements for ref in stmt.accesses):
        return None
    return types.pop()


def reads_output(c: Contraction) -> bool:
    """Whether the sums of ``c`` start from the output's own elements (no init statement, or
    one reading its element: PolyBench gemm's ``beta * C``) rather than from values set anew."""
    return c.init is None or any(isinstance(x, E.Var) and x.name == ELEMENT for x in E.walk(c.init))


def element_value(scop: Scop, c: Contraction, acc: str, t: str) -> list[str]:
    """``_v``, the finished element ``acc`` (at ``_m``, ``_n`` of batch ``_z``) through the
    epilogue statements in order, each reading the value so far as its element and other
    arrays at the output indices (decoded from the coordinates with the launch's divisors)."""
    out = [f"              {t} _v = ({t}){acc};"]
    names = {}
    read = {i.name for e in c.epilogue for x in E.walk(e) if isinstance(x, E.Access) for i in x.indices}
    for d, index in enumerate(epilogue_indices(c)):
        if index not in read:  # an index only the output domain's constraints name
            continue
        names[index] = f"_x{d}"
        out.append(f"              const long _x{d} = ((_xs{d} == 0 ? _m : _xs{d} == 1 ? _n : _z) / _xd{d}) % _xm{d};")
    emit = CudaExpr(scop)
    for value in c.epilogue:
        value = E.substitute(value, lambda x: E.Var(names[x.name], "iter", x.dtype)
                             if isinstance(x, E.Var) and x.kind == "iter" else None)
        out.append(f"              _v = {emit(E.substitute(value, lambda x: E.Var('_v', 'scalar', x.dtype) if isinstance(x, E.Var) and x.name == ELEMENT else None))};")
    return out


def _element_write(scop: Scop, c: Contraction, at: str, value: str) -> list[str]:
    """The store of ``value`` at element offset ``at`` of the output: as declared, or where the
    output may be half (:func:`half_store`) rounded to it if the launch says so."""
    half = half_store(scop, c)
    if half is None:
        return [f"              {c.output}[{at}] = {value};"]
    c_type, convert, _, _ = HALF_STORES[half]
    return [f"              if ({HALF_STORE_ARGUMENT}) (({c_type} *){c.output})[{at}] = {convert}({value});",
            f"              else {c.output}[{at}] = {value};"]


def element_store(scop: Scop, c: Contraction, acc: str, t: str) -> list[str]:
    """The store of a finished element ``acc`` (at ``_m``, ``_n`` of batch ``_z``): its value
    through the epilogue statements, stored as declared or, where the output may be half
    (:func:`half_store`), rounded to it if the launch says so."""
    return element_value(scop, c, acc, t) + _element_write(scop, c, "_offC + _m * sCm + _n * sCn", "_v")


#: Per C type of an MMA kernel's output: the type of two adjacent elements, its constructor and size.
PAIR_TYPES = {"float": ("float2", "make_float2", 8), "double": ("double2", "make_double2", 16)}


def pair_values(scop: Scop, c: Contraction, row: str, col: str, acc: str, t: str, offset: bool = True
                ) -> list[str]:
    """The finished elements ``acc`` of fragment registers ``_r0`` and ``_r0 + 1`` (adjacent
    columns of one row, at tile row ``row``, column ``col``) through the epilogue statements:
    ``_p[q]`` the value, ``_in[q]`` whether it lies in the output box (and domain); with
    ``offset``, ``_at`` the first one's offset in the output, else ``_p[q]`` is 0 outside."""
    return [f"            {t} _p[2]; bool _in[2];{' long _at = 0;' if offset else ''}",
            "            #pragma unroll\n            for (int _q = 0; _q < 2; _q++) {",
            "              const int _r = _r0 + _q;",
            f"              const long _m = _m0 + {row}, _n = _n0 + {col};",
            f"              _in[_q] = _m < _M && _n < _N{element_test(c)};",
            *(["              if (_q == 0) _at = _offC + _m * sCm + _n * sCn;"] if offset else
              ["              _p[_q] = 0;"]),
            "              if (_in[_q]) {", *element_value(scop, c, acc, t), "              _p[_q] = _v; }",
            "            }"]


def fragment_stores(scop: Scop, c: Contraction, row: str, col: str, acc: str, t: str) -> list[str]:
    """The loop storing an MMA fragment's four finished elements ``acc`` (``_r`` = 0..3 at tile
    row ``row``, column ``col``; elements 2q and 2q + 1 are adjacent columns of one row), each
    through the epilogue statements (:func:`element_value`) where it lies in the output box (and
    domain). A pair lying whole in the output, its columns adjacent in memory and aligned to
    the pair's size, goes as one store of both (two halves, a ``float2``, a ``double2``): a
    warp's stores then cover whole 16-, 32- or 64-byte runs of eight rows, where one element
    at a time wrote every other element of each sector; where the output may be half
    (:func:`half_store`), in the type the launch says. Other elements go one at a time, and
    so do all of a float or double output that epilogue statements compute (holding a pair
    and its epilogue's loads, the register-limited ``wgmma`` kernels spilled hundreds of bytes)."""
    half = half_store(scop, c)
    if half is None and c.epilogue:
        return ["          #pragma unroll\n          for (int _r = 0; _r < 4; _r++) {",
                f"            const long _m = _m0 + {row}, _n = _n0 + {col};",
                f"            if (_m < _M && _n < _N{element_test(c)}) {{", *element_store(scop, c, acc, t),
                "            }",
                "          }"]
    pair_type, make_pair, pair_bytes = PAIR_TYPES[t]
    wide = [f"            {t} *const _w = {c.output} + _at;",
            f"            if (_whole && ((unsigned long long)_w & {pair_bytes - 1}) == 0)"
            f" *({pair_type} *)_w = {make_pair}(_p[0], _p[1]);",
            "            else",
            "              #pragma unroll\n              for (int _q = 0; _q < 2; _q++)"
            " if (_in[_q]) _w[_q * sCn] = _p[_q];"]
    if half is not None:
        c_type, convert, half_pair, convert_pair = HALF_STORES[half]
        wide = [f"            if ({HALF_STORE_ARGUMENT}) {{",
                f"            {c_type} *const _h = ({c_type} *){c.output} + _at;",
                f"            if (_whole && ((unsigned long long)_h & 3) == 0)"
                f" *({half_pair} *)_h = {convert_pair}(_p[0], _p[1]);",
                "            else",
                "              #pragma unroll\n              for (int _q = 0; _q < 2; _q++)"
                f" if (_in[_q]) _h[_q * sCn] = {convert}(_p[_q]);",
                "            } else {", *wide, "            }"]
    return ["          #pragma unroll\n          for (int _r0 = 0; _r0 < 4; _r0 += 2) {",
            *pair_values(scop, c, row, col, acc, t),
            "            const bool _whole = _in[0] && _in[1] && sCn == 1;",
            *wide,
            "          }"]


#: Elements of padding after each row of a staged output tile: rows stay 16-byte aligned, and
#: the fragments' pair stores fall into distinct banks (16, 32 and 64 bytes of padding for
#: halves, floats and doubles: the accesses of a warp's 4-, 8- and 16-byte stores are served a
#: whole, a half and a quarter warp at a time).
STAGED_PAD = 8


@dataclass(frozen=True)
class StagedType:
    """An element type a kernel may stage its output tile in (:func:`staged_stores`): its C
    type, the pair type and constructor of two adjacent elements, the launch condition under
    which the output holds it ("" for always) and its bytes."""

    c_type: str
    pair_type: str
    pair_make: str
    when: str
    size: int

    @staticmethod
    def half(name: str) -> "StagedType":
        """Half type ``name`` (f16, bf16) where the launch passes a half output
        (:data:`HALF_STORE_ARGUMENT`, :func:`half_store`)."""
        c_type, _, pair_type, pair_make = HALF_STORES[name]
        return StagedType(c_type, pair_type, pair_make, HALF_STORE_ARGUMENT, 2)


@dataclass(frozen=True)
class StagingScope:
    """Who writes back the rows of a staged output tile they staged (:func:`staged_stores`): the
    whole block (every row of the tile, after a block barrier) or one warp (its own rows of
    fragments, after a warp barrier: no other warp waits). ``first``: this thread's first
    vector, ``threads``: the vectors' stride, ``rows`` from tile row ``row0``."""

    first: str
    threads: int
    rows: int
    row0: str
    sync: str

    @staticmethod
    def block(threads: int, rows: int) -> "StagingScope":
        return StagingScope("threadIdx.x", threads, rows, "0", "__syncthreads()")

    @staticmethod
    def warp(row0: str) -> "StagingScope":
        """The 16 rows of a warp's fragments from ``row0`` (mma.sync's m16, a wgmma warp's quarter)."""
        return StagingScope("_lane", 32, 16, row0, "__syncwarp()")


def staged_stores(scop: Scop, c: Contraction, fragments: list[str], row: str, col: str, acc: str, t: str,
                  buffer: str, bn: int, scope: StagingScope, kind: StagedType, alternative: bool, whole: bool,
                  chunk: int = 0) -> list[str]:
    """The stores of an output tile through shared memory in unit column stride (and
    ``kind.when``, a launch condition): each thread's pairs of finished elements (``fragments``:
    the loop headers over its fragments' pairs, ``_r0`` the first register of a pair, ``acc``
    the finished value of register ``_r``, at tile row ``row``, column ``col``), as
    ``kind.c_type`` pairs, into the tile at ``buffer`` (``bn`` columns and :data:`STAGED_PAD`
    a row), then the ``scope`` writes its rows in 16-byte vectors (an element at a time at a
    ragged edge or where a row is not 16-byte aligned): a warp's fragment stores cover 16 to 64
    bytes of eight rows each, which left a short sum's tile store-bound (attention's
    ``bhqd,bhkd->bhqk``, K = 64). An opening ``if`` (``else if`` for an ``alternative``),
    closed by the caller's ``else`` with the fragment stores.

    A tile lying whole in the output (every tile but the last row and column of the grid)
    takes a path without element tests: with K = 64 the tests of each element against the
    extents, and the 64-bit address of each vector, were most of the kernel's instructions.
    Its pairs are staged without tests only where ``whole`` (no epilogue statement follows the
    sum: a second copy of them cost the register-limited kernels spills).

    ``chunk``: columns staged at a time (0: all ``bn``), for a buffer that holds only that many:
    the stages and write-backs go in ``bn / chunk`` rounds ``_h``, whose ``fragments`` are the
    caller's (those of columns ``_h * chunk`` on)."""
    per_vector, cols = 16 // kind.size, chunk or bn
    pitch, per_row = cols + STAGED_PAD, cols // per_vector
    shift = f" - _h * {cols}" if cols < bn else ""  # the round's first column, in the staged tile
    test = f"{kind.when} && sCn == 1" if kind.when else "sCn == 1"
    opening = "} else if" if alternative else "if"
    pair_store = ["              const int _r = _r0;",
                  f"              *({kind.pair_type} *)&_Cs[({row}) * {pitch} + {col}{shift}] = "
                  f"{kind.pair_make}(_p[0], _p[1]);",
                  "            }"]
    tested = [*fragments, *pair_values(scop, c, row, col, acc, t, offset=False), *pair_store]
    untested = [*fragments, f"            {t} _p[2];",
                "            #pragma unroll\n            for (int _q = 0; _q < 2; _q++) {",
                f"              const int _r = _r0 + _q; _p[_q] = ({t})({acc});",
                "            }", *pair_store]
    staged = (["        if (_inside) {  /* no element outside the output */", *untested, "        } else {", *tested,
               "        }"] if whole else tested)
    vectors = f"{scope.rows} * {per_row}"
    row_of = f"{scope.row0} + _c / {per_row}" if scope.row0 != "0" else f"_c / {per_row}"
    first_column = f" + _h * {cols}" if shift else ""
    head = [f"      {opening} ({test}) {{  /* the tile through shared memory, 16-byte rows */",
            f"        {kind.c_type} *const _Cs = ({kind.c_type} *)({buffer});",
            "        const bool _inside = _m0 + BM <= _M && _n0 + BN <= _N;"]
    if shift:
        head += [f"        #pragma unroll\n        for (int _h = 0; _h < {bn // cols}; _h++) {{"
                 f"  /* {cols} columns at a time */"]
    return [*head,
            f"        {kind.c_type} *const _d0 = ({kind.c_type} *){c.output} + _offC + _m0 * sCm + _n0{first_column};",
            *staged,
            f"        {scope.sync};",
            f"        if (_inside && ((unsigned long long)_d0 & 15) == 0 && sCm % {per_vector} == 0) {{"
            "  /* whole aligned rows */",
            "          #pragma unroll 4",
            f"          for (int _c = {scope.first}; _c < {vectors}; _c += {scope.threads}) {{",
            f"            const int _row = {row_of}, _col = _c % {per_row} * {per_vector};",
            f"            *(uint4 *)(_d0 + _row * sCm + _col) = *(const uint4 *)(_Cs + _row * {pitch} + _col);",
            "          }",
            "        } else {",
            f"        for (int _c = {scope.first}; _c < {vectors}; _c += {scope.threads}) {{",
            f"          const int _row = {row_of}, _col = _c % {per_row} * {per_vector};",
            f"          const long _m = _m0 + _row, _n = _n0{first_column} + _col;",
            "          if (_m < _M && _n < _N) {",
            f"            {kind.c_type} *const _d = _d0 + _row * sCm + _col;",
            f"            const {kind.c_type} *const _s = _Cs + _row * {pitch} + _col;",
            f"            if (_n + {per_vector} <= _N && ((unsigned long long)_d & 15) == 0)"
            " *(uint4 *)_d = *(const uint4 *)_s;",
            f"            else for (int _e = 0; _e < {per_vector} && _n + _e < _N; _e++) _d[_e] = _s[_e];",
            "          }",
            "        }",
            "        }",
            f"        {scope.sync};  /* the staged tile's space is reused next */",
            *(["        }"] if shift else [])]


def init_text(scop: Scop, c: Contraction, element: str) -> str:
    """C of the output element's starting value (the init statement's value of ``element``, or
    ``element`` itself)."""
    return element if c.init is None else scalar_text(scop, c.init, element)


__all__ = ["HALF_STORES", "HALF_STORE_ARGUMENT", "PAIR_TYPES", "RUN_STRIDES", "STAGED_PAD", "Slots", "StagedType",
           "StagingScope", "UnitStrides", "batch_offsets", "element_store", "element_test", "element_value",
           "fragment_stores", "grid_loops", "half_store", "init_text", "outer_k_offsets", "pair_argument",
           "pair_k_loops", "pair_stride_names", "pair_values", "reads_output", "scalar_text", "staged_stores"]
