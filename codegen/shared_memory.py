"""Shared-memory promotion of reused read-only tile footprints (register-tiled kernels).

In an innermost loop of a register-tiled kernel body (a reduction loop, e.g. gemm's ``k``), a
read of an array the kernel does not write, whose subscripts walk the loop and some but not all
thread coordinates (``A[i][k]`` is the same for every ``j``), is reused by the threads of a
block; so is a subexpression of such a read and of kernel scalars (``alpha * A[i][k]``). The loop is strip-mined by ``chunk``; per chunk the block copies the footprint of each
such read group (a box: per subscript, a coordinate's block extent, the chunk, or one element)
from global into shared memory cooperatively, with ``__syncthreads`` before and after, and the
loop reads the copy. Subscripts must be affine, each walking at most one coordinate or the loop
variable with coefficient 1, so the box is exactly what the block reads (plus the edges of the
last chunk, where the copy is guarded by the array bounds).

The kernel runs the staged body only when the whole block tile is inside the domain, so all
threads of a block take it together and reach every barrier.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from math import prod

from polyopt.analysis import expr as E
from polyopt.codegen.loop_nodes import Block, For
from polyopt.codegen.kernel_body import Assign, BodyNode, Promote, rewrite
from polyopt.codegen.promotion import linear
from polyopt.types import i64

#: Largest shared memory a kernel's buffers may take (bytes; the default static limit).
SHARED_BYTES = 48 * 1024
#: Strip-mining lengths of a staged loop, longest (fewest barriers) first.
CHUNKS = (16, 8, 4)
#: Padding of a transposed buffer's rows (bytes): one vector load's worth, so rows stay
#: 16-byte aligned for vector reads while consecutive rows start in different banks.
ROW_PAD_BYTES = 16
#: The variable selecting the half of the double buffers the loop reads (0 or 1).
HALF = "_half"


@dataclass(frozen=True)
class SharedBuffer:
    """``name[size]`` holding ``value`` at ``array[base + d]`` for ``0 <= d < extents``
    (per array dimension), stored with the array dimensions in ``order`` (outermost first): the
    dimension the loop walks goes first, so a thread's consecutive coordinates are adjacent.
    Rows of the innermost stored dimension are ``pad`` elements longer than its extent: where
    ``order`` transposes the array, the copy's consecutive elements land a row apart, and
    unpadded rows of a multiple of 32 words would put them all in one shared-memory bank.
    ``exact``: every element of the footprint of a chunk the loop runs whole is read by the
    program, when the whole block tile is inside the domain (so it needs no bounds check).

    ``value`` is the staged read: the element ``array[_g0, _g1, ...]`` itself, or an expression
    of it and of block-uniform values (``alpha * A[i][k]`` is computed once per element, in
    the copy, instead of once per use)."""

    name: str
    array: str
    dtype: object
    base: tuple[E.Expr, ...]
    extents: tuple[int, ...]
    order: tuple[int, ...]
    value: E.Expr
    pad: int = 0
    exact: bool = False

    def _stored(self, d: int) -> int:
        return self.extents[d] + (self.pad if d == self.order[-1] else 0)

    @property
    def size(self) -> int:
        """Elements of one half of the (double) buffer, padding included."""
        return prod(self._stored(d) for d in self.order)

    def local_index(self, offsets: list[E.Expr]) -> E.Expr:
        """The buffer position of the element at ``offsets`` from ``base`` (array order)."""
        flat: E.Expr = E.Const(0, i64)
        for d in self.order:
            flat = E.Binary("+", E.Binary("*", flat, E.Const(self._stored(d), i64), i64),
                            offsets[d], i64)
        return flat


@dataclass(frozen=True)
class Staged:
    """``loop`` strip-mined by ``chunk`` (chunk variable ``chunk_var``) over double-buffered
    ``buffers``: the block's ``threads`` load the next chunk into registers while the loop runs
    on the current half (:data:`HALF` selects it), then store them into the other half."""

    loop: For
    chunk: int
    chunk_var: str
    buffers: tuple[SharedBuffer, ...]
    threads: int


def stage_reads(node: BodyNode, coords: tuple[str, ...], threads: tuple[int, ...],
                read_only: set[str], element_bytes: int, block_threads: int
                ) -> tuple[BodyNode, list[SharedBuffer]]:
    """``node`` with reused read-only footprints of its innermost loops staged in shared
    memory (see the module docstring); ``threads[k]`` is how far coordinate ``k`` reaches over
    a block's threads (its values span ``threads[k]`` consecutive integers, jam offsets aside).
    The loops are strip-mined by the longest of :data:`CHUNKS` whose buffers all fit in
    :data:`SHARED_BYTES` (large block tiles of 8-byte elements need shorter chunks)."""
    for chunk in CHUNKS:
        buffers: list[SharedBuffer] = []
        left_out: list[tuple] = []

        def visit(n: BodyNode) -> BodyNode:
            if isinstance(n, For):
                if _straight_line(n.body) and n.step == 1:
                    return _stage(n, coords, threads, read_only, element_bytes, block_threads,
                                  chunk, buffers, left_out)
                return replace(n, body=visit(n.body))
            if isinstance(n, Promote):
                return Promote(n.registers, visit(n.loop))
            if isinstance(n, Block):
                return Block(tuple(visit(c) for c in n.body))
            return n  # statements; conditionals keep their loops in global memory

        staged = visit(node)
        if chunk == CHUNKS[0]:
            first = staged, buffers
        if not left_out:
            return staged, buffers
    return first


def _straight_line(node: BodyNode) -> bool:
    body = node.body if isinstance(node, Block) else (node,)
    return all(isinstance(c, Assign) for c in body)


def _classify(index: E.Expr, loop_var: str, coords: tuple[str, ...]):
    """(walking variable or None, uniform part without constant, constant) of an affine
    subscript, or None when it is not of the supported form."""
    form = linear(index)
    if form is None:
        return None
    walking = [v for v in form if v in coords or v == loop_var]
    if len(walking) > 1 or (walking and form[walking[0]] != 1):
        return None
    var = walking[0] if walking else None
    uniform = tuple(sorted((k, v) for k, v in form.items() if k not in (1, var) and v))
    return var, uniform, form.get(1, 0)


def _covered(dims, constants: list[list[int]], loop_var: str, coords, threads) -> bool:
    """Whether the reads (subscript constants ``constants[d]`` per dimension) of a whole chunk
    and block tile cover their box: along a coordinate each constant covers the block's reach
    from it, so consecutive constants may be at most that far apart; along the loop or a fixed
    subscript the reads must share one constant."""
    for (var, _), values in zip(dims, constants):
        values = sorted(set(values))
        reach = threads[coords.index(var)] if var in coords else 1
        if var == loop_var and len(values) > 1:
            return False
        if any(b - a > reach for a, b in zip(values, values[1:])):
            return False
    return True


def _reads(value: E.Expr, read_only: set[str]):
    """The largest subexpressions of ``value`` that read one element of a ``read_only`` array
    and otherwise only kernel scalars, parameters and constants: (subexpression, access)."""
    accesses = [n for n in E.walk(value) if isinstance(n, E.Access)]
    if len(accesses) == 1 and accesses[0].array in read_only and accesses[0].indices:
        inside = {id(n) for n in E.walk(accesses[0])}
        if all(n.kind in ("scalar", "param") for n in E.walk(value)
               if isinstance(n, E.Var) and id(n) not in inside):
            yield value, accesses[0]
            return
    for child in value.children():
        yield from _reads(child, read_only)


def _stage(loop: For, coords, threads, read_only, element_bytes, block_threads, chunk,
           buffers, left_out) -> BodyNode:
    """``loop`` strip-mined by ``chunk`` with its staged reads (appended to ``buffers``); the
    read groups that do not fit in shared memory are appended to ``left_out``."""
    groups: dict[tuple, list[tuple[E.Expr, E.Access, tuple]]] = {}
    for assign in (loop.body.body if isinstance(loop.body, Block) else (loop.body,)):
        for read, access in _reads(assign.value, read_only):
            parts = [_classify(i, loop.var, coords) for i in access.indices]
            if any(p is None for p in parts):
                continue
            walked = [p[0] for p in parts if p[0] is not None]
            if loop.var not in walked or len(set(walked)) != len(walked) or \
                    set(coords) <= set(walked):
                continue  # no reuse across the block, or a subscript pattern not handled
            element = E.Access(access.array, tuple(E.Var(f"_g{d}", "iter", i64)
                                                   for d in range(len(parts))), access.dtype)
            value = E.substitute(read, lambda n, a=access, g=element: g if n == a else None)
            key = (value, tuple((p[0], p[1]) for p in parts))
            groups.setdefault(key, []).append((read, access, tuple(p[2] for p in parts)))
    chunk_var = f"{loop.var}_chunk"
    new_buffers, table = [], {}
    used = sum(2 * b.size for b in buffers) * element_bytes
    for (value, dims), members in groups.items():
        low = [min(m[2][d] for m in members) for d in range(len(dims))]
        high = [max(m[2][d] for m in members) for d in range(len(dims))]
        extents, base = [], []
        for d, (var, uniform) in enumerate(dims):
            spread = high[d] - low[d]
            if var == loop.var:
                origin, size = E.Var(chunk_var, "iter", i64), chunk + spread
            elif var is not None:
                k = coords.index(var)
                origin, size = E.Var(f"_b{k}", "iter", i64), threads[k] + spread
            else:
                origin, size = None, spread + 1
            term = E.Const(low[d], i64)
            for name, coef in uniform:
                term = E.Binary("+", term, E.Binary("*", E.Const(coef, i64), E.Var(name, "iter", i64), i64), i64)
            base.append(term if origin is None else E.Binary("+", origin, term, i64))
            extents.append(size)
        walked_first = [d for d, (var, _) in enumerate(dims) if var == loop.var]
        order = tuple(walked_first + [d for d in range(len(dims)) if d not in walked_first])
        pad = ROW_PAD_BYTES // element_bytes if order != tuple(sorted(order)) else 0
        array = members[0][1].array
        buffer = SharedBuffer(f"_s{len(buffers) + len(new_buffers)}", array, value.dtype,
                              tuple(base), tuple(extents), order, value, pad,
                              _covered(dims, [[m[2][d] for m in members] for d in range(len(dims))],
                                       loop.var, coords, threads))
        size_bytes = 2 * buffer.size * element_bytes  # double-buffered
        if used + size_bytes > SHARED_BYTES:
            left_out.append((value, dims))
            continue
        used += size_bytes
        new_buffers.append(buffer)
        for read, access, _ in members:
            offsets = [E.Binary("-", index, origin, i64)
                       for index, origin in zip(access.indices, buffer.base)]
            half = E.Binary("*", E.Var(HALF, "iter", i64), E.Const(buffer.size, i64), i64)
            table[read] = E.Access(buffer.name, (E.Binary("+", half, buffer.local_index(offsets), i64),),
                                   read.dtype)
    if not new_buffers:
        return loop
    buffers.extend(new_buffers)
    body = rewrite(loop.body, table.get)
    return Staged(replace(loop, body=body), chunk, chunk_var, tuple(new_buffers), block_threads)
