"""The einsum frontend: numpy's subscript grammar -> label lists -> one Scop.

::

    spec = parse_subscripts("ij,jk->ik", [2, 2])         # EinsumSpec(inputs, output)
    sizes, broadcast = label_sizes(spec, [(3, 4), (4, 5)])
    path = contraction_path(spec, sizes, "greedy")        # numpy's path format
    scop, temporaries = einsum_scop(spec, broadcast, path, f64)

Every label becomes a loop iterator ``i_<label>`` with a size parameter ``N_<label>``; the dims
hidden by ``...`` get the generated labels ``"0"``, ``"1"``, ... (right-aligned across operands,
as numpy broadcasts them). A dimension of size 1 facing a larger label size is *broadcast*: its
subscript is the constant 0 (the kernel is specialized on that pattern). Each contraction step
is two statements, ``T[o] = 0`` over its result labels and ``T[o] += A[..] * B[..]`` over all its
labels; intermediate results ``t0, t1, ...`` are array arguments the caller allocates, and so are
the partial sums ``p0, p1, ...`` of steps whose long sums run in blocks (``blocked_sums``).
"""
from __future__ import annotations

import itertools
import operator
import string
from dataclasses import dataclass
from functools import lru_cache
from math import prod
from typing import Sequence

import islpy as isl
import numpy as np

from polyopt.analysis import expr as E
from polyopt.analysis.affine import isl_text
from polyopt.frontends.schedule_tree import Leaf, Loop, original_schedule
from polyopt.analysis.scop import AccessRef, Argument, Array, Scop, Statement
from polyopt.types import DType, i64

#: numpy's sublist integers 0..51 name the labels A..Z, a..z.
SUBLIST_LETTERS = string.ascii_uppercase + string.ascii_lowercase
#: The name of the result array in the Scop; operands are ``op0, op1, ...``.
OUTPUT = "out"


@dataclass(frozen=True)
class EinsumSpec:
    """Parsed subscripts: the labels of every operand dimension and of the output."""

    inputs: tuple[tuple[str, ...], ...]
    output: tuple[str, ...]

    def __str__(self) -> str:
        def text(labels):
            return "".join(label if label.isalpha() else f"<{label}>" for label in labels)
        return ",".join(text(labels) for labels in self.inputs) + "->" + text(self.output)


def describe(label: str) -> str:
    """A label as error messages name it."""
    return f"'{label}'" if label.isalpha() else f"dimension {label} of the ellipsis ('...')"


def sublists_to_subscripts(args: Sequence) -> tuple[str, list]:
    """The interleaved form ``op0, sublist0, op1, sublist1, ..., [sublistout]`` as a subscripts
    string and the operand list (numpy's rules: integers 0..51 or ``Ellipsis``)."""
    args = list(args)
    output = _sublist(args.pop()) if len(args) % 2 else None
    operands, parts = args[0::2], [_sublist(s) for s in args[1::2]]
    return ",".join(parts) + ("" if output is None else "->" + output), operands


def _sublist(sublist) -> str:
    text = []
    for item in sublist:
        if item is Ellipsis:
            text.append("...")
            continue
        try:
            index = int(item.__index__())
        except (AttributeError, TypeError):
            raise TypeError("each subscript must be either an integer or an ellipsis") from None
        if not 0 <= index < len(SUBLIST_LETTERS):
            raise ValueError(f"subscript {index} is not within the valid range [0, 52)")
        text.append(SUBLIST_LETTERS[index])
    return "".join(text)


def _labels(part: str, where: str) -> tuple[list[str], int | None]:
    """Letters of one operand's subscripts and the position of its ellipsis (or None)."""
    labels: list[str] = []
    ellipsis = None
    k = 0
    while k < len(part):
        char = part[k]
        if char == " ":  # numpy ignores spaces
            k += 1
            continue
        if char == ".":
            if part[k:k + 3] != "...":
                raise ValueError(f"einstein sum subscripts string contains a '.' that is not part "
                                 f"of an ellipsis ('...') in {where}")
            if ellipsis is not None:
                raise ValueError(f"einstein sum subscripts string contains more than one ellipsis "
                                 f"('...') in {where}")
            ellipsis, k = len(labels), k + 3
            continue
        if char not in SUBLIST_LETTERS:
            raise ValueError(f"invalid subscript '{char}' in einstein sum subscripts string, "
                             "subscripts must be letters")
        labels.append(char)
        k += 1
    return labels, ellipsis


def parse_subscripts(subscripts: str, ndims: Sequence[int]) -> EinsumSpec:
    """Check ``subscripts`` against operands of ranks ``ndims``; expand ``...`` and the implicit
    output (the labels used once, sorted, after the broadcast dimensions). Raises ValueError
    with numpy's messages. Cached: an einsum call in a loop parses its pattern once."""
    if not isinstance(subscripts, str):
        raise TypeError(f"einsum subscripts must be a string, got {type(subscripts).__name__}")
    return _parse(subscripts, tuple(ndims))


@lru_cache(maxsize=1024)
def _parse(subscripts: str, ndims: tuple[int, ...]) -> EinsumSpec:
    inputs_text, arrow, output_text = subscripts.partition("->")
    parts = inputs_text.split(",")
    if len(parts) > len(ndims):
        raise ValueError("fewer operands provided to einstein sum function than specified in the "
                         "subscripts string")
    if len(parts) < len(ndims):
        raise ValueError("more operands provided to einstein sum function than specified in the "
                         "subscripts string")
    parsed = [_labels(part, f"operand {k}") for k, part in enumerate(parts)]
    n_broadcast = 0
    for k, ((labels, ellipsis), ndim) in enumerate(zip(parsed, ndims)):
        if len(labels) > ndim:
            raise ValueError(f"einstein sum subscripts string contains too many subscripts for operand {k}")
        if ellipsis is None and len(labels) < ndim:
            raise ValueError("operand has more dimensions than subscripts given in einstein sum, "
                             "but no '...' ellipsis provided to broadcast the extra dimensions.")
        n_broadcast = max(n_broadcast, ndim - len(labels))
    broadcast_labels = tuple(str(d) for d in range(n_broadcast))
    inputs = []
    for (labels, ellipsis), ndim in zip(parsed, ndims):
        if ellipsis is None:
            inputs.append(tuple(labels))
        else:
            hidden = broadcast_labels[n_broadcast - (ndim - len(labels)):]
            inputs.append(tuple(labels[:ellipsis]) + hidden + tuple(labels[ellipsis:]))
    used = [label for labels, _ in parsed for label in labels]
    if arrow:
        labels, ellipsis = _labels(output_text, "the output")
        for label in labels:
            if label not in used:
                raise ValueError(f"einstein sum subscripts string included output subscript "
                                 f"'{label}' which never appeared in an input")
            if labels.count(label) > 1:
                raise ValueError(f"einstein sum subscripts string includes output subscript "
                                 f"'{label}' multiple times")
        if ellipsis is None and n_broadcast:
            raise ValueError("output has more dimensions than subscripts given in einstein sum, "
                             "but no '...' ellipsis provided to broadcast the extra dimensions.")
        at = len(labels) if ellipsis is None else ellipsis
        output = tuple(labels[:at]) + broadcast_labels + tuple(labels[at:])
    else:
        output = broadcast_labels + tuple(sorted(label for label in set(used) if used.count(label) == 1))
    return EinsumSpec(tuple(inputs), output)


def label_sizes(spec: EinsumSpec, shapes: Sequence[tuple[int, ...]]
                ) -> tuple[dict[str, int], tuple[tuple[bool, ...], ...]]:
    """The size of every label and, per operand dimension, whether it is size-1 broadcast.

    A label repeated inside one operand needs equal extents there; across operands, extents must
    agree or be 1 (numpy's broadcasting). Raises ValueError naming the label and the sizes.
    """
    seen: dict[str, tuple[int, int]] = {}  # label -> (size other than 1, operand that has it)
    for k, (labels, shape) in enumerate(zip(spec.inputs, shapes)):
        mine: dict[str, int] = {}
        for label, extent in zip(labels, shape):
            if mine.setdefault(label, extent) != extent:
                raise ValueError(f"dimensions in operand {k} for collapsing index {describe(label)} "
                                 f"don't match ({mine[label]} != {extent})")
            if extent == 1:
                continue
            size, where = seen.setdefault(label, (extent, k))
            if size != extent:
                raise ValueError(f"operands could not be broadcast together: label {describe(label)} "
                                 f"has size {size} in operand {where} but {extent} in operand {k} "
                                 f"(shapes {', '.join(str(tuple(s)) for s in shapes)})")
    sizes = {label: seen.get(label, (1,))[0] for labels in spec.inputs for label in labels}
    broadcast = tuple(tuple(extent == 1 and sizes[label] != 1 for label, extent in zip(labels, shape))
                      for labels, shape in zip(spec.inputs, shapes))
    return sizes, broadcast



def merge_summed_runs(spec: EinsumSpec, sizes: dict[str, int], broadcast: tuple[tuple[bool, ...], ...],
                      arrays: Sequence) -> tuple[EinsumSpec, dict[str, int], tuple[tuple[bool, ...], ...], list]:
    """Summed labels that run together through memory as one label, as numpy's iterator
    coalesces dimensions: where labels ``x`` then ``y`` are both summed, adjacent (in that order,
    once each) in every operand that has either, never broadcast, and each such operand's ``x``
    stride is its ``y`` stride times ``y``'s extent, ``y`` goes and ``x`` spans both
    (``'ij->'`` on a (1000000, 3) array sums one run of 3e6 terms). The long sum then runs in
    numpy's blocks (``blocked_sums``), so many short rows keep numpy's accuracy. Returns the new
    spec, sizes, broadcast flags and operand views (views of the same memory: the strides
    allow it)."""
    inputs, arrays = [list(labels) for labels in spec.inputs], list(arrays)
    sizes = dict(sizes)

    def mergeable(x: str, y: str) -> bool:
        if x in spec.output or y in spec.output or not (x.isalpha() and y.isalpha()):
            return False
        for k, labels in enumerate(inputs):
            if (x in labels) != (y in labels):
                return False
            if x not in labels:
                continue
            if labels.count(x) != 1 or labels.count(y) != 1 or labels.index(y) != labels.index(x) + 1:
                return False
            a, at = arrays[k], labels.index(x)
            if a.shape[at] != sizes[x] or a.shape[at + 1] != sizes[y] or a.strides[at] != a.strides[at + 1] * a.shape[at + 1]:
                return False
        return True

    merged = True
    while merged:
        merged = False
        for labels in inputs:
            pair = next(((x, y) for x, y in zip(labels, labels[1:]) if mergeable(x, y)), None)
            if pair is None:
                continue
            x, y = pair
            for k, mine in enumerate(inputs):
                if x in mine:
                    at = mine.index(x)
                    shape = arrays[k].shape
                    arrays[k] = arrays[k].reshape(shape[:at] + (shape[at] * shape[at + 1],) + shape[at + 2:])
                    del mine[at + 1]
            sizes[x] *= sizes.pop(y)
            merged = True
            break
    if len(sizes) == len({label for labels in spec.inputs for label in labels}):
        return spec, sizes, broadcast, arrays
    new_broadcast = tuple(tuple(extent == 1 and sizes[label] != 1 for label, extent in zip(labels, a.shape))
                          for labels, a in zip(inputs, arrays))
    return EinsumSpec(tuple(tuple(labels) for labels in inputs), spec.output), sizes, new_broadcast, arrays


# --- contraction order ---------------------------------------------------------------------------

def contraction_path(spec: EinsumSpec, sizes: dict[str, int], optimize) -> tuple[tuple[int, ...], ...]:
    """A contraction order in numpy's format: each step names positions in the current operand
    list, which are removed and their result appended; the last step takes all that is left.

    ``optimize`` as numpy.einsum_path reads it: False or None (one step: everything at once),
    True or "greedy" (repeatedly the pair with the smallest result, then fewest operations),
    "optimal" (fewest operations over every pairwise order; greedy beyond 4 operands), a
    ``(name, memory_limit)`` pair (no intermediate larger than ``memory_limit`` elements), or an
    explicit ``["einsum_path", (i, j), ...]``. numpy's errors: TypeError for other types,
    KeyError for an unknown name where a path has to be searched, and for explicit paths
    TypeError / IndexError / ValueError for bad positions, RuntimeError for a path that does not
    end in one result.
    """
    n = len(spec.inputs)
    name, limit, explicit = _path_request(optimize)
    if explicit is not None:
        return _checked_path(explicit, n)
    summed = set().union(*spec.inputs) != set(spec.output)
    if name is False or n <= 2 or not summed:  # nothing to order (numpy's rule)
        return (tuple(range(n)),)
    operands, output = list(map(frozenset, spec.inputs)), frozenset(spec.output)
    if name == "greedy" or (name == "optimal" and n > 4):
        return _greedy(operands, output, sizes, limit)
    if name == "optimal":
        return _optimal(operands, output, sizes, limit)[1]
    raise KeyError(f"einsum: path name {name!r} not found (use 'greedy' or 'optimal')")


def _path_request(optimize) -> tuple[str | bool, int | None, Sequence | None]:
    """(algorithm name or False, memory limit, explicit steps) of an ``optimize`` value, with
    numpy.einsum_path's TypeError for values it does not understand."""
    if optimize is True:
        return "greedy", None, None
    if optimize is None or optimize is False:
        return False, None, None
    if isinstance(optimize, str):
        return optimize, None, None
    try:
        length = len(optimize)
    except TypeError:
        length = None
    if length and isinstance(optimize[0], str) and optimize[0] == "einsum_path":
        return False, None, optimize[1:]
    if length == 2 and isinstance(optimize[0], str) and isinstance(optimize[1], (int, float)):
        return optimize[0], int(optimize[1]), None
    raise TypeError(f"Did not understand the path: {optimize!r} (use False, True, 'greedy', 'optimal', "
                    "(name, memory_limit) or ['einsum_path', (i, j), ...])")


def _checked_path(steps: Sequence, n: int) -> tuple[tuple[int, ...], ...]:
    """An explicit path's steps as position tuples, checked as numpy checks them (TypeError for
    a step that is not a sequence of integers, IndexError for a position past the operands,
    RuntimeError where operands are left over); repeated or negative positions, which numpy
    misreads, raise ValueError."""
    path, count = [], n
    for step in steps:
        try:
            step = tuple(operator.index(k) for k in step)
        except TypeError as error:
            raise TypeError(f"einsum_path step {step!r} is not a sequence of operand positions: {error}") from None
        if any(k >= count for k in step):
            raise IndexError(f"einsum_path step {step} names an operand past the {count} left")
        if len(set(step)) != len(step) or any(k < 0 for k in step):
            raise ValueError(f"einsum_path step {step} repeats a position or has a negative one")
        if not step:
            raise RuntimeError("Invalid einsum_path is specified: a step contracts no operand")
        path.append(step)
        count -= len(step) - 1
    if count != 1:
        raise RuntimeError(f"Invalid einsum_path is specified: {count - 1} more operands has to be contracted.")
    return tuple(path)


def _step(operands: list[frozenset], picked: tuple[int, ...], output: frozenset, sizes):
    """Result labels and operation count of contracting ``picked`` (positions in ``operands``)."""
    rest = set(output).union(*(ops for k, ops in enumerate(operands) if k not in picked))
    labels = frozenset().union(*(operands[k] for k in picked))
    return labels & rest, prod(sizes[label] for label in labels)


def _greedy(operands: list[frozenset], output: frozenset, sizes, limit: int | None) -> tuple[tuple[int, ...], ...]:
    """Pairs by smallest result, then fewest operations; pairs whose result has more than
    ``limit`` elements are passed over, and where none is left the rest is one step."""
    path = []
    while len(operands) > 2:
        def cost(pair):
            result, flops = _step(operands, pair, output, sizes)
            removed = sum(prod(sizes[label] for label in operands[k]) for k in pair)
            return prod(sizes[label] for label in result) - removed, flops
        pairs = [pair for pair in itertools.combinations(range(len(operands)), 2)
                 if _fits(_step(operands, pair, output, sizes)[0], sizes, limit)]
        if not pairs:
            break
        pair = min(pairs, key=cost)
        result, _ = _step(operands, pair, output, sizes)
        operands = [ops for k, ops in enumerate(operands) if k not in pair] + [result]
        path.append(pair)
    return tuple(path) + (tuple(range(len(operands))),)


def _fits(labels: frozenset, sizes, limit: int | None) -> bool:
    """Whether an intermediate over ``labels`` stays within ``limit`` elements (None: no limit)."""
    return limit is None or prod(sizes[label] for label in labels) <= limit


def _optimal(operands: list[frozenset], output: frozenset, sizes, limit: int | None) -> tuple[int, tuple]:
    """(operation count, path) of the cheapest pairwise order (exhaustive) among those whose
    intermediates stay within ``limit`` elements; all at once where no pair fits."""
    everything = tuple(range(len(operands)))
    at_once = (_step(operands, everything, output, sizes)[1], (everything,))
    if len(operands) <= 2:
        return at_once
    best = None
    for pair in itertools.combinations(everything, 2):
        result, flops = _step(operands, pair, output, sizes)
        if not _fits(result, sizes, limit):
            continue
        rest = [ops for k, ops in enumerate(operands) if k not in pair] + [result]
        cost, path = _optimal(rest, output, sizes, limit)
        if best is None or flops + cost < best[0]:
            best = (flops + cost, (pair,) + path)
    return best or at_once


# --- lowering ------------------------------------------------------------------------------------

iterator_prefix = "i_"
#: Terms a blocked sum adds into one partial sum before the partial sum joins the result:
#: numpy.einsum's reductions run in its iterator's buffers of 8192 elements, each summed apart.
SUM_BLOCK = 8192


def iterator(label: str) -> str:
    """The loop iterator of ``label``."""
    return f"{iterator_prefix}{label}"


def block_iterators(label: str) -> tuple[str, str]:
    """The iterators of a blocked sum over ``label``: the block and the position in it
    (``label`` = SUM_BLOCK * block + position)."""
    return f"b_{label}", f"r_{label}"


def _extent(name: str, sizes: dict[str, int]) -> int:
    """How many values the einsum iterator ``name`` takes for these label sizes."""
    kind, label = name.split("_", 1)
    if kind == "b":
        return -(-sizes[label] // SUM_BLOCK)
    if kind == "r":
        return min(sizes[label], SUM_BLOCK)
    return sizes[label]


def iteration_count(scop: Scop, sizes: dict[str, int]) -> int:
    """How many statement instances an einsum Scop runs for these label sizes (blocked sums:
    whole blocks)."""
    return sum(prod(_extent(name, sizes) for name in stmt.iterators) for stmt in scop.statements)


def size_parameter(label: str) -> str:
    """The size parameter of ``label``."""
    return f"N_{label}"


def is_partial_sum(array: str) -> bool:
    """Whether ``array`` of an einsum Scop holds the partial sums of a blocked sum (``p0``,
    ``p1``, ...; they are caller-allocated temporaries, read once per block)."""
    return array[:1] == "p" and array[1:].isdigit()


@dataclass(frozen=True)
class _Term:
    """An array referenced in a step: its labels and which of its dims are size-1 broadcast.
    Complex arrays are real arrays with one more, last, dimension of extent 2 (real and
    imaginary part, numpy's layout of complex numbers)."""

    array: str
    labels: tuple[str, ...]
    broadcast: tuple[bool, ...]
    complex_parts: bool = False

    def access(self, dtype: DType, part: int | None = None, at: dict[str, E.Expr] | None = None) -> E.Access:
        """The element at the labels' iterators (``at``: other subscripts of some labels)."""
        at = at or {}
        indices = tuple(E.Const(0, i64) if bc else at.get(label, E.Var(iterator(label), "iter"))
                        for label, bc in zip(self.labels, self.broadcast))
        if self.complex_parts:
            indices += (E.Const(part, i64),)
        return E.Access(self.array, indices, dtype)

    def parts(self, dtype: DType, at: dict[str, E.Expr] | None = None) -> tuple[E.Expr, E.Expr | None]:
        """(real part, imaginary part) of the element; None as imaginary part of real data."""
        if not self.complex_parts:
            return self.access(dtype, at=at), None
        return self.access(dtype, 0, at), self.access(dtype, 1, at)

    def shape(self) -> tuple[str, ...]:
        extents = tuple("1" if bc else size_parameter(label) for label, bc in zip(self.labels, self.broadcast))
        return extents + (("2",) if self.complex_parts else ())


def einsum_scop(spec: EinsumSpec, broadcast: Sequence[tuple[bool, ...]], path: Sequence[tuple[int, ...]],
                dtype: DType, complex_parts: bool = False, blocked_sums: bool = False,
                operand_dtype: DType | None = None) -> tuple[Scop, tuple[tuple[str, tuple[str, ...]], ...]]:
    """The Scop computing ``spec`` along ``path`` in element type ``dtype``, and its temporaries
    as (array name, labels) pairs (array arguments the caller allocates, in label sizes).
    ``operand_dtype``: the element type of the operands where it is not ``dtype`` (f16 operands
    of f32 sums): each element read is converted to ``dtype``, and all arithmetic is in ``dtype``.

    Arrays: ``op0, op1, ...`` (with extent 1 where broadcast), the temporaries ``t0, t1, ...``
    and ``out``; parameters ``N_<label>``. With ``complex_parts`` every array holds complex
    numbers as (real, imaginary) pairs of ``dtype`` in a last dimension of extent 2, and each
    statement becomes one for the real and one for the imaginary part.

    ``blocked_sums``: a step that streams its operands (reads every element once) and sums along
    its innermost loop ('i->', 'i,i->', 'ij,ij->i') sums blocks of :data:`SUM_BLOCK` terms into
    partial sums ``p0, p1, ...`` (the target's shape; temporaries too), each added to the
    target after its block, as numpy.einsum sums its buffers: a million-term sum then has
    numpy's accuracy instead of one accumulator's. Steps that reuse operands (matmul-shaped)
    keep their sums: their tiles and register tiles are what makes them fast.
    """
    terms = [_Term(f"op{k}", labels, tuple(bc), complex_parts)
             for k, (labels, bc) in enumerate(zip(spec.inputs, broadcast))]
    arrays = {t.array: Array(t.array, operand_dtype or dtype, t.shape()) for t in terms}
    params = tuple(sorted({size_parameter(label) for labels in spec.inputs for label in labels}))
    builder = _Builder(params, dtype, {name: array.dtype for name, array in arrays.items()})
    current, temporaries, tree, partials = list(terms), [], [], 0
    for step in path:
        picked = [current[k] for k in step]
        current = [t for k, t in enumerate(current) if k not in step]
        if current:
            rest = set(spec.output).union(*(t.labels for t in current))
            labels = tuple(dict.fromkeys(l for t in picked for l in t.labels if l in rest))
            target = _Term(f"t{len(temporaries) - partials}", labels, (False,) * len(labels), complex_parts)
            temporaries.append((target.array, labels))
        else:
            target = _Term(OUTPUT, spec.output, (False,) * len(spec.output), complex_parts)
        current.append(target)
        arrays[target.array] = Array(target.array, dtype, target.shape())
        order = _loop_order(target, picked)
        partial = None
        if blocked_sums and _streams_a_sum(order, target, picked):
            partial = _Term(f"p{partials}", target.labels, target.broadcast, complex_parts)
            partials += 1
            temporaries.append((partial.array, target.labels))
            arrays[partial.array] = Array(partial.array, dtype, partial.shape())
        tree += builder.contraction(target, picked, order, partial)
    if len(current) != 1 or current[0].array != OUTPUT:
        raise ValueError(f"einsum: the contraction path {tuple(path)} does not end in one result")
    context = isl.Set(f"[{', '.join(params)}] -> {{ : {' and '.join(f'{p} >= 0' for p in params) or 'true'} }}")
    domain = isl.UnionSet.empty(context.get_space())
    for stmt in builder.statements:
        domain = domain.union(isl.UnionSet.from_set(stmt.domain))
    order = [a for a in arrays if a != OUTPUT] + [OUTPUT]
    arguments = tuple(Argument(name, "array", arrays[name].dtype) for name in order)
    scop = Scop("einsum", params, context, {n: arrays[n] for n in order}, tuple(builder.statements),
                original_schedule(domain, tree, params), arguments, source=str(spec))
    return scop, tuple(temporaries)


def _loop_order(target: _Term, inputs: list[_Term]) -> tuple[str, ...]:
    """The loops of a contraction step: the target's labels, then the summed ones; innermost
    the label that most arrays have as their last, contiguous, dimension."""
    labels = list(dict.fromkeys(target.labels + tuple(l for t in inputs for l in t.labels)))
    if labels:
        last = [t.labels[-1] for t in [target, *inputs] if t.labels]
        labels.append(labels.pop(labels.index(max(reversed(labels), key=last.count))))
    return tuple(labels)


def _streams_a_sum(order: tuple[str, ...], target: _Term, inputs: list[_Term]) -> bool:
    """Whether a step sums along its innermost loop and reads each operand element once (every
    operand has every label of the step, none broadcast): the steps whose long sums
    ``blocked_sums`` splits."""
    return (bool(order) and order[-1] not in target.labels
            and all(set(l for l, bc in zip(t.labels, t.broadcast) if not bc) == set(order) for t in inputs))


class _Builder:
    """Creates the statements of the contraction steps (with their access relations)."""

    def __init__(self, params: tuple[str, ...], dtype: DType, operand_dtypes: dict[str, DType]):
        self.params = f"[{', '.join(params)}]"
        self.dtype = dtype
        self.operand_dtypes = operand_dtypes  # of the operand arrays (the others hold ``dtype``)
        self.statements: list[Statement] = []

    def contraction(self, target: _Term, inputs: list[_Term], labels: tuple[str, ...],
                    partial: _Term | None = None) -> list[Loop | Leaf]:
        """``target = 0`` over its labels, then ``target += prod(inputs)`` over all ``labels``
        (in loop order); ``target = prod(inputs)`` alone where no label is summed. With a
        ``partial`` sum array, the innermost (summed) label runs in blocks: per block
        ``partial = 0``, ``partial += prod(inputs)`` over the block, ``target += partial``.
        Complex data: one statement per part in each nest."""
        lhs = target.parts(self.dtype)
        if set(labels) == set(target.labels):  # nothing summed: one write per element
            parts = [(l, v) for l, v in zip(lhs, self._product(inputs)) if l is not None]
            iters = tuple(map(iterator, labels))
            return _nest(iters, [self._statement(iters, _bounds(labels), l, v) for l, v in parts])
        # 0.0 for floats; an int for integers and object data (Python's 0 keeps Fractions exact)
        zero = E.Const(0.0 if self.dtype.is_float and self.dtype.numpy != np.dtype(object) else 0, self.dtype)
        target_iters = tuple(map(iterator, target.labels))
        init = [self._statement(target_iters, _bounds(target.labels), l, zero) for l in lhs if l is not None]
        if partial is None:
            iters = tuple(map(iterator, labels))
            update = [self._statement(iters, _bounds(labels), l, E.binary("+", l, v))
                      for l, v in zip(lhs, self._product(inputs)) if l is not None]
            return _nest(target_iters, init) + _nest(iters, update)
        summed, outer = labels[-1], labels[:-1]
        block, position = block_iterators(summed)
        at = {summed: E.binary("+", E.binary("*", E.Const(SUM_BLOCK, i64), E.Var(block, "iter")),
                               E.Var(position, "iter"))}
        per_block = tuple(map(iterator, outer)) + (block,)
        size = size_parameter(summed)
        blocks = _bounds(outer, f"0 <= {block}", f"{SUM_BLOCK} * {block} < {size}")
        in_block = _bounds(outer, f"0 <= {block}", f"0 <= {position} < {SUM_BLOCK}",
                           f"{SUM_BLOCK} * {block} + {position} < {size}")
        sums = [(l, p, v) for l, p, v in zip(lhs, partial.parts(self.dtype), self._product(inputs, at))
                if l is not None]
        reset = [self._statement(per_block, blocks, p, zero) for _, p, _ in sums]
        accumulate = [self._statement(per_block + (position,), in_block, p, E.binary("+", p, v)) for _, p, v in sums]
        add = [self._statement(per_block, blocks, l, E.binary("+", l, p)) for l, p, _ in sums]
        return _nest(target_iters, init) + _nest(per_block, reset + [Loop(position, 1, accumulate)] + add)

    def _product(self, inputs: list[_Term], at: dict[str, E.Expr] | None = None) -> tuple[E.Expr, E.Expr | None]:
        """The product of the inputs' elements, in (real, imaginary or None) parts, in ``dtype``."""
        product = self._element(inputs[0], at)
        for term in inputs[1:]:
            product = _times(product, self._element(term, at))
        return product

    def _element(self, term: _Term, at: dict[str, E.Expr] | None) -> tuple[E.Expr, E.Expr | None]:
        """``term``'s element in (real, imaginary or None) parts, converted to ``dtype``."""
        parts = term.parts(self.operand_dtypes.get(term.array, self.dtype), at)
        return tuple(None if p is None else E.cast(p, self.dtype) for p in parts)

    def _statement(self, iters: tuple[str, ...], bounds: str, target: E.Access, value: E.Expr) -> Leaf:
        name = f"S{len(self.statements)}"
        space = f"{name}[{', '.join(iters)}]"
        domain = isl.Set(f"{self.params} -> {{ {space} : {bounds} }}")
        refs = [(r, False) for r in E.walk(value) if isinstance(r, E.Access)] + [(target, True)]
        accesses = []
        for k, (ref, is_write) in enumerate(refs):
            index = ", ".join(isl_text(i) for i in ref.indices)
            relation = isl.Map(f"{self.params} -> {{ {space} -> {ref.array}[{index}] }}").intersect_domain(domain)
            accesses.append(AccessRef(f"{name}_R{k}", ref.array, relation, is_write))
        text = f"{E.to_source(target)} = {E.to_source(value)}"
        self.statements.append(Statement(name, iters, domain, target, value, tuple(accesses), None, text))
        return Leaf(name, iters)


def _bounds(labels: Sequence[str], *more: str) -> str:
    """isl constraints of the loops over ``labels`` (0 <= iterator < size) and ``more``."""
    return " and ".join([f"0 <= {iterator(l)} < {size_parameter(l)}" for l in labels] + list(more)) or "true"


def _times(x: tuple[E.Expr, E.Expr | None], y: tuple[E.Expr, E.Expr | None]) -> tuple[E.Expr, E.Expr | None]:
    """The product of two (real, imaginary or None) numbers, in parts."""
    (a, b), (c, d) = x, y
    if b is None and d is None:
        return E.binary("*", a, c), None
    if b is None or d is None:  # a real factor scales both parts
        real, (p, q) = (a, (c, d)) if b is None else (c, (a, b))
        return E.binary("*", real, p), E.binary("*", real, q)
    return (E.binary("-", E.binary("*", a, c), E.binary("*", b, d)),
            E.binary("+", E.binary("*", a, d), E.binary("*", b, c)))


def _nest(iterators: tuple[str, ...], leaves: list) -> list[Loop | Leaf]:
    """The loops over ``iterators`` around ``leaves`` (the leaves alone when there are none)."""
    nodes: list[Loop | Leaf] = leaves
    for name in reversed(iterators):
        nodes = [Loop(name, 1, nodes)]
    return nodes


__all__ = ["EinsumSpec", "OUTPUT", "SUM_BLOCK", "block_iterators", "contraction_path", "describe", "einsum_scop",
           "is_partial_sum", "iteration_count", "iterator", "label_sizes", "merge_summed_runs", "parse_subscripts", "size_parameter",
           "sublists_to_subscripts"]
