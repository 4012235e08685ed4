"""Sum loops split over the threads of a warp (parallel reductions on the GPU).

A kernel with at most one thread coordinate whose loops sum into one element per coordinate
(``tmp[i] = tmp[i] + A[i][j] * x[j]``: matrix-vector products, norms, dot products) has too
little parallelism for one thread per coordinate, or reads its rows with a stride across the
threads of a warp. Where the mapping marked a loop ``gpu_reduce`` (the verifier checked that it
carries only dependences between sums into one element, :mod:`polyopt.analysis.reductions`),
``parts`` threads of one warp share each coordinate: thread ``part`` runs iterations ``part``,
``part + parts``, ... of the loop, summing its terms in a register; the partial sums are added
by a butterfly of ``__shfl_xor_sync`` over the coordinate's threads (the same order on every
run: the result is deterministic) and the coordinate's first thread adds the total to the
element. Everything else in the body runs on that first thread alone; ``__syncwarp`` around each
split loop orders its reads after the first thread's earlier writes and its end before the
first thread's later ones.

Floating-point sums are reassociated (as torch's and cuBLAS's are): results differ from the
sequential order by rounding. ``reductions=False`` on the CUDA target keeps one thread per
coordinate.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import count

from polyopt.analysis import expr as E
from polyopt.analysis.reductions import sum_term
from polyopt.codegen.kernel_body import Assign, BodyNode, promote_accumulators, rewrite, walk
from polyopt.codegen.loop_nodes import Block, For, If
from polyopt.codegen.promotion import linear, mentions
from polyopt.types import boolean, i64

#: The thread's part of its coordinate's loop iterations (0 .. parts - 1), in the CUDA source.
PART = "_part"
#: The lanes of the warp that share the thread's coordinate (a mask), in the CUDA source.
GROUP = "_group"
#: Threads per coordinate where the sum reads rows along the loop (one warp a coordinate: each
#: load of the warp reads consecutive elements) and elsewhere (8 threads, 4 coordinates a warp:
#: a load reads 4 consecutive elements of each of 8 rows, whole 32-byte sectors in f64).
ROW_PARTS = 32
OTHER_PARTS = 8


@dataclass(frozen=True)
class SplitSum:
    """``loop`` run by the ``parts`` threads of a coordinate together, each from its own first
    iteration (``loop`` as emitted: init shifted by the part, step times the parts); ``partials``
    pairs a register with the element whose terms it sums (from -0.0, the additive identity);
    ``block``: the parts are all the threads of a one-block kernel (not one warp's)."""

    loop: For
    partials: tuple[tuple[str, E.Access], ...]
    parts: int
    block: bool = False


def first_part() -> E.Expr:
    """The condition "this thread is its coordinate's first"."""
    return E.Binary("==", E.Var(PART, "iter"), E.Const(0, i64), boolean)


def split_sums(body: BodyNode, sums: frozenset[str], coords: tuple[str, ...], private: set[str],
               block_threads: int | None = None) -> tuple[BodyNode, int] | None:
    """``body`` with its outermost loops that run only the statements in ``sums`` as
    :class:`SplitSum` loops and everything else guarded by :func:`first_part`, and the threads
    per coordinate (a kernel without coordinates is one warp); None when no loop splits (then
    the kernel runs as it is). ``private``: the local scalars each thread holds in a register
    (only the first thread's are current, so a split loop's terms must not read them).
    ``block_threads``: the body is a phase of a one-block kernel (no coordinates), whose loops
    split over all of the block's threads."""
    loops = [n for n in _outer_loops(body) if _splits(n, sums, private)]
    if not loops:
        return None
    rows = all(_reads_rows(loop, coords) for loop in loops)
    parts = block_threads or (ROW_PARTS if rows or not coords else OTHER_PARTS)
    registers = count()

    def visit(node: BodyNode) -> BodyNode:
        if isinstance(node, Block):
            return Block(tuple(visit(child) for child in node.body))
        if isinstance(node, If):
            return If(node.cond, visit(node.then), None if node.otherwise is None else visit(node.otherwise))
        if isinstance(node, For) and any(node is loop for loop in loops):
            return replace(_split(node, parts, registers), block=block_threads is not None)
        return If(first_part(), promote_accumulators(node))

    return visit(body), parts


def _outer_loops(node: BodyNode):
    """The loops of ``node`` inside no other loop."""
    if isinstance(node, For):
        yield node
    elif isinstance(node, Block):
        for child in node.body:
            yield from _outer_loops(child)
    elif isinstance(node, If):
        yield from _outer_loops(node.then)
        if node.otherwise is not None:
            yield from _outer_loops(node.otherwise)


def _sums_of(loop: For) -> list[Assign]:
    return [n for n in walk(loop) if isinstance(n, Assign)]


def _splits(loop: For, sums: frozenset[str], private: set[str]) -> bool:
    """Whether every assignment in ``loop`` is a sum of a statement in ``sums`` into an element
    the loop does not move (so a register holds it), of a type the shuffles take, whose term
    reads neither an element the loop sums into nor a ``private`` scalar."""
    assigns = _sums_of(loop)
    inner = {n.var for n in walk(loop) if isinstance(n, For)}
    accumulated = {a.target.array for a in assigns if isinstance(a.target, E.Access)}
    for a in assigns:
        if a.statement not in sums or not isinstance(a.target, E.Access) or mentions(a.target.indices, inner):
            return False
        term = sum_term(a.target, a.value)
        if a.target.dtype.name not in ("f32", "f64") or term is None:
            return False
        if any(isinstance(n, E.Access) and n.array in accumulated | private for n in E.walk(term)):
            return False
    return bool(assigns)


def _reads_rows(loop: For, coords: tuple[str, ...]) -> bool:
    """Whether the loop's terms read along the loop (the last subscript moves by one with it)
    and none along the coordinate (where one thread a coordinate already reads rows whole)."""
    along_loop = along_coordinate = False
    for a in _sums_of(loop):
        for n in E.walk(sum_term(a.target, a.value)):
            if isinstance(n, E.Access) and n.indices:
                last = linear(n.indices[-1]) or {}
                along_loop |= last.get(loop.var) == 1
                along_coordinate |= any(last.get(c) == 1 for c in coords)
    return along_loop and not along_coordinate


def _split(loop: For, parts: int, registers) -> SplitSum:
    elements: list[E.Access] = []
    for a in _sums_of(loop):
        if a.target not in elements:
            elements.append(a.target)
    partials = tuple((f"_s{next(registers)}", element) for element in elements)
    table = {element: E.Var(name, "register", element.dtype) for name, element in partials}
    body = rewrite(loop.body, lambda e: table.get(e) if isinstance(e, E.Access) else None)
    part = E.Binary("*", E.Var(PART, "iter"), E.Const(loop.step, i64), i64)
    start = E.Binary("+", loop.init, part, i64)
    return SplitSum(replace(loop, init=start, step=loop.step * parts, body=body), partials, parts)
