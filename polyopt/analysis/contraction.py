"""Recognizing a tensor contraction in a Scop: ``C[out] = init(C[out]); C[out] += L * R``.

A contraction is what GPU libraries run as (batched) GEMM: every index of the nest is a batch,
M, N or K index once the indices are grouped. polyopt recognizes it on the Scop, whatever wrote
it (``po.einsum``, a DSL kernel, C), so one mapping serves einsum strings, batched matmuls, 1x1
convolutions and attention products:

- an *update* statement over a box domain (each iterator from 0 to a parameter expression), or
  over a box cut by affine constraints among the output indices and parameters (a *cut* box:
  ``j <= i`` of a symmetric rank-k update) with the K indices still ranging over a box,
  ``C[o1, ..., op] = C[o1, ..., op] + L * R`` (or ``L * R + C[...]``), where the subscripts of
  ``C`` are distinct iterators, ``L`` and ``R`` each read one array element whose subscripts are
  distinct iterators, and everything else in them is constants and scalar arguments
  (``alpha * A[i, k]``); or, for a sum of several products, ``C[out] += L1 * R1 + L2 * R2 + ...``
  (PolyBench's syr2k: ``A[j, k] * alpha * B[i, k] + B[j, k] * alpha * A[i, k]``), each product
  an operand *pair* as above whose left operand reads the same set of indices as the first
  pair's left one and whose right operand the same set as its right one (a pair written the
  other way round is turned round: IEEE products commute), so every pair has the same output
  and the same M, N and K indices (subscripts in any order: the kernels read each pair with
  strides of its own);
- optionally, before it, an *init* statement over the output box (or the update's cut output
  domain) ``C[out] = f(C[out])`` with constants and scalars (``0``, ``beta * C[i, j]``);
- optionally, after it, *epilogue* statements over the same output domain, element-wise on ``C``:
  ``C[out] = f(C[out], bias[j], ...)`` reading arrays no statement writes at plain iterators
  (bias, ReLU, scaling: they run on each element once its sum is complete).

The indices group by where they appear: in ``C`` and in both operands (or neither): *batch*; in
``C`` and ``L`` only: *M*; in ``C`` and ``R`` only: *N*; not in ``C``: *K* (summed). A
contraction needs at least one M, N and K index (a matrix-vector product is no GEMM).

A kernel computes a cut box's contraction over its bounding box and leaves alone the elements
outside the cut (:attr:`Contraction.domain`), so a cut box is taken only where the operands'
reads over the bounding box stay inside their arrays.

Recognition is structural; that the order the mapping runs (per output element: init, then the
K indices in order) is legal is left to the verifier, which checks the mapped schedule tree.

A Scop that is no contraction may be a *program* of them (:func:`find_contractions`): PolyBench's
2mm and 3mm are products one after another, each nest of the top level a contraction of its own,
reading what an earlier nest wrote as an operand.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import islpy as isl

from polyopt.analysis import expr as E
from polyopt.analysis.affine import NotAffine, isl_text
from polyopt.analysis.reductions import sum_term
from polyopt.analysis.scop import Scop, Statement
from polyopt.codegen.ast import IslAstTranslator
from polyopt.islutil import fresh_stem, tuple_names
from polyopt.types import i64


@dataclass(frozen=True)
class Operand:
    """One array read of the product: ``array[index[0], index[1], ...]``, staged as ``value``
    (an expression of the element, which appears in it as :data:`ELEMENT`, and of scalars)."""

    array: str
    index: tuple[str, ...]
    value: E.Expr


#: The name standing for an operand's element (or the output's) in a staged value.
ELEMENT = "_elem"
#: Precision modes a user may ask for: "exact" keeps each element's arithmetic (f64 on the FP64
#: tensor cores, which round each product and sum as IEEE double; f16/bf16 operands, whose
#: products are exact in f32, summed in f32); "tf32" lets f32 contractions run on TF32 tensor
#: cores (operands rounded to 10-bit mantissas: results change, never the default).
PRECISIONS = ("exact", "tf32")


@dataclass(frozen=True)
class Contraction:
    """A recognized contraction (module docstring). Indices are the update statement's
    iterators; ``extent[i]`` is index ``i``'s extent (an expression of the parameters).
    ``batch``, ``m`` and ``n`` list their indices in the output's order, ``k`` in loop order
    (the order the sum runs in).
    ``init`` is the init statement's value with the output element as :data:`ELEMENT` (None:
    the update starts from the output's values). ``domain``: where the output domain is a box
    cut by constraints (module docstring), those constraints, each ``e >= 0`` for an integer
    affine expression ``e`` of the output indices and parameters; ``extent`` is then the
    bounding box's (empty: the output domain is the box). ``more_pairs``: for a sum of several
    products, the operand pairs after the first (``left``, ``right``), in the statement's order,
    each turned so that its left operand reads the M indices; the kernels run the K loop over
    the pairs one after the other (the contraction of the pairs' operands concatenated along K,
    which adds the products in another order than the statement's per-K sum)."""

    output: str
    output_index: tuple[str, ...]
    left: Operand
    right: Operand
    init: E.Expr | None
    extent: dict[str, E.Expr]
    batch: tuple[str, ...]
    m: tuple[str, ...]
    n: tuple[str, ...]
    k: tuple[str, ...]
    statements: tuple[str, ...]
    update_statement: str = ""
    epilogue: tuple[E.Expr, ...] = ()
    domain: tuple[E.Expr, ...] = ()
    more_pairs: tuple[tuple[Operand, Operand], ...] = ()

    @property
    def pairs(self) -> tuple[tuple[Operand, Operand], ...]:
        """Every operand pair (left, right), the first one first."""
        return ((self.left, self.right),) + self.more_pairs

    @cached_property
    def operand_arrays(self) -> tuple[str, ...]:
        """The arrays the operands read, each once, in the pairs' order (found once: each
        launch asks)."""
        return tuple(dict.fromkeys(o.array for pair in self.pairs for o in pair))

    def describe(self) -> str:
        """One line naming the index groups, e.g. ``batch (b, h) x M (q) x N (k) x K (d)``, and
        with several operand pairs their number (``..., 2 operand pairs``)."""
        groups = (("batch", self.batch), ("M", self.m), ("N", self.n), ("K", self.k))
        text = " x ".join(f"{name} ({', '.join(index)})" for name, index in groups if index)
        return text + (f", {len(self.pairs)} operand pairs" if self.more_pairs else "")


def find_contraction(scop: Scop) -> Contraction | None:
    """The contraction ``scop`` computes (module docstring), or None."""
    for position in range(min(2, len(scop.statements))):
        update = scop.statements[position]
        parts = _update_parts(scop, update)
        if parts is not None:
            break
    else:
        return None
    output_index, pairs = parts
    (left, right), more_pairs = pairs[0], pairs[1:]
    extent, domain, region = _box_extents(scop, update), (), None
    if extent is None:
        cut = _cut_box(scop, update, output_index, tuple(o for pair in pairs for o in pair))
        if cut is None:
            return None
        extent, domain = cut
        region = _cut_region(scop, output_index, extent, domain)
        if region is None:
            return None
    output = update.target.array
    init_value = None
    if position == 1:
        init_value = _init_value(scop, scop.statements[0], output, output_index, extent, region)
        if init_value is None:
            return None
    epilogue = []
    for stmt in scop.statements[position + 1:]:
        value = _epilogue_value(scop, stmt, output, output_index, extent, region)
        if value is None:
            return None
        epilogue.append(value)
    in_out = set(output_index)
    in_left, in_right = set(left.index), set(right.index)
    if any(i not in in_out | in_left | in_right for i in update.iterators):
        return None  # an index nothing reads: the sum repeats one product
    batch = tuple(i for i in output_index if (i in in_left) == (i in in_right))
    m = tuple(i for i in output_index if i in in_left and i not in in_right)
    n = tuple(i for i in output_index if i in in_right and i not in in_left)
    k = tuple(i for i in update.iterators if i not in in_out)  # in loop order: the sum's order
    if not (m and n and k):
        return None
    found = Contraction(output, output_index, left, right, init_value, extent, batch, m, n, k,
                        tuple(s.name for s in scop.statements), update.name, tuple(epilogue), domain, more_pairs)
    if any(len(group) > 1 and _constrained(found) & set(group) for group in (m, n)):
        return None  # the kernel tests an M or N index as its coordinate: the only index of its group
    return found


def find_contractions(scop: Scop) -> tuple[tuple[Scop, Contraction], ...] | None:
    """The contractions a program of them computes, in program order: per child of the original
    schedule's top-level sequence, the Scop of that nest's statements (:func:`nest_scop`) and the
    contraction it is; None where the schedule has no top-level sequence or a nest is no
    contraction. In a nest's Scop an array an earlier nest wrote is read-only (2mm's ``tmp`` is
    an operand of the second product): each nest runs whole before the next, as in the program.
    That the order inside each nest is legal is left to the verifier, as for one contraction."""
    top = scop.schedule.get_root().child(0)
    if top.get_type() != isl.schedule_node_type.sequence:
        return None
    found = []
    for k in range(top.n_children()):
        nest = nest_scop(scop, top.child(k).filter_get_filter())
        c = find_contraction(nest)
        if c is None:
            return None
        found.append((nest, c))
    return tuple(found)


def nest_scop(scop: Scop, instances: isl.UnionSet) -> Scop:
    """The Scop of the statements with instances in ``instances`` (in ``scop``'s order), its
    original schedule restricted to them; the arrays and arguments stay the whole Scop's."""
    names = set(tuple_names(instances))
    return replace(scop, statements=tuple(s for s in scop.statements if s.name in names),
                   schedule=scop.schedule.intersect_domain(instances))


def _plain_index(access: E.Access) -> tuple[str, ...] | None:
    """The iterators subscripting ``access``, when each subscript is one distinct iterator."""
    names = tuple(i.name for i in access.indices if isinstance(i, E.Var) and i.kind == "iter")
    return names if len(names) == len(access.indices) == len(set(names)) else None


def _only_scalars(e: E.Expr) -> bool:
    """Whether ``e`` has no array elements and no iterators (constants and scalar arguments)."""
    return not any(isinstance(x, E.Access) or (isinstance(x, E.Var) and x.kind == "iter")
                   for x in E.walk(e))


def _operand(scop: Scop, e: E.Expr, written: set[str]) -> Operand | None:
    """``e`` as one staged operand: exactly one read-only array element, scalars around it."""
    reads = [x for x in E.walk(e) if isinstance(x, E.Access)]
    if len(reads) != 1 or reads[0].array in written or not scop.arrays[reads[0].array].shape:
        return None
    index = _plain_index(reads[0])
    if index is None:
        return None
    element = reads[0]
    value = E.substitute(e, lambda x: E.Var(ELEMENT, "scalar", x.dtype) if x is element else None)
    return Operand(element.array, index, value) if _only_scalars(value) else None


def _update_parts(scop: Scop, update: Statement) -> tuple[tuple[str, ...], tuple[tuple[Operand, Operand], ...]] | None:
    """(output index, operand pairs) of ``C[o] = C[o] + L * R`` or ``C[o] = C[o] + (L1 * R1 +
    L2 * R2 + ...)``, each pair after the first turned to read the first one's index sets
    (:func:`_turned`), or None. Several pairs are all turned round where the output's last
    subscript would be an M index: the kernels store along their N coordinates (as for syrk's
    ``C[i, j] += A[i, k] * A[j, k]``; syr2k writes its first product ``A[j, k] * B[i, k]``); one
    pair keeps the statement's order."""
    target = update.target
    output_index = _plain_index(target)
    added = sum_term(target, update.value)
    if output_index is None or added is None:
        return None
    written = {s.target.array for s in scop.statements}
    pairs = []
    for product in _summands(added):
        if not isinstance(product, E.Binary) or product.op != "*" or product.dtype != target.dtype:
            return None
        left, right = _operand(scop, product.lhs, written), _operand(scop, product.rhs, written)
        if left is None or right is None:
            return None
        pair = (left, right) if not pairs else _turned(pairs[0], (left, right))
        if pair is None:
            return None
        pairs.append(pair)
    if len(pairs) > 1 and output_index[-1] in pairs[0][0].index and output_index[-1] not in pairs[0][1].index:
        pairs = [pair[::-1] for pair in pairs]  # the output's contiguous index an N index (docstring)
    return output_index, tuple(pairs)


def _summands(e: E.Expr) -> list[E.Expr]:
    """The terms of a sum ``a + b + ...`` of the output's type, left to right (``e`` itself
    where it is no sum)."""
    if isinstance(e, E.Binary) and e.op == "+" and e.lhs.dtype == e.rhs.dtype == e.dtype:
        return _summands(e.lhs) + _summands(e.rhs)
    return [e]


def _turned(first: tuple[Operand, Operand], pair: tuple[Operand, Operand]) -> tuple[Operand, Operand] | None:
    """``pair`` as (left, right) with the index sets of ``first``'s left and right operands
    (itself or turned round), None where it has other index sets (another output or other
    contracted indices: no pair of the same contraction)."""
    sets = [set(o.index) for o in first]
    for candidate in (pair, pair[::-1]):
        if [set(o.index) for o in candidate] == sets:
            return candidate
    return None


def _output_box_index(scop: Scop, stmt: Statement, output: str, output_index: tuple[str, ...],
                      extent: dict[str, E.Expr], region: isl.Set | None = None) -> tuple[str, ...] | None:
    """The iterators subscripting ``stmt``'s target, when it writes each element of the
    output's box once (``output[its iterators]`` over the same extents), or with ``region``
    (the output elements of a cut box's kernel, :func:`_cut_region`) each element of it; else
    None."""
    index = _plain_index(stmt.target)
    if stmt.target.array != output or index is None or len(index) != len(stmt.iterators):
        return None
    if region is not None:
        return index if _output_region(scop, stmt, index).is_equal(region) else None
    mine = _box_extents(scop, stmt)
    if mine is None or any(mine[i] != extent[o] for i, o in zip(index, output_index)):
        return None
    return index


def _init_value(scop: Scop, init: Statement, output: str, output_index: tuple[str, ...],
                extent: dict[str, E.Expr], region: isl.Set | None = None) -> E.Expr | None:
    """The init statement's value with its output element as :data:`ELEMENT`, when it writes
    every output element once from that element and scalars; else None."""
    target = init.target
    if _output_box_index(scop, init, output, output_index, extent, region) is None:
        return None
    value = E.substitute(init.value, lambda x: E.Var(ELEMENT, "scalar", x.dtype) if x == target else None)
    return value if _only_scalars(value) else None


def _epilogue_value(scop: Scop, stmt: Statement, output: str, output_index: tuple[str, ...],
                    extent: dict[str, E.Expr], region: isl.Set | None = None) -> E.Expr | None:
    """An element-wise statement after the update (``C[o] = max(C[o] + bias[j], 0)``): its
    value with the output element as :data:`ELEMENT` and the other reads (arrays no statement
    writes, subscripted by plain iterators) subscripted by the output indices; None otherwise."""
    target = stmt.target
    index = _output_box_index(scop, stmt, output, output_index, extent, region)
    if index is None:
        return None
    rename = dict(zip(index, output_index))
    written = {s.target.array for s in scop.statements}
    reads = [x for x in E.walk(stmt.value) if isinstance(x, E.Access) and x != target]
    if any(r.array in written or _plain_index(r) is None for r in reads):
        return None

    def replace(x: E.Expr) -> E.Expr | None:
        if x == target:
            return E.Var(ELEMENT, "scalar", x.dtype)
        if isinstance(x, E.Access):
            return E.Access(x.array, tuple(E.Var(rename[i.name], "iter", i.dtype) for i in x.indices), x.dtype)
        return None
    value = E.substitute(stmt.value, replace)
    plain = E.substitute(value, lambda x: E.Const(0, x.dtype) if isinstance(x, E.Access) else None)
    return value if _only_scalars(plain) else None


def epilogue_indices(c: Contraction) -> tuple[str, ...]:
    """The output indices the kernel decodes from an element's coordinates (output order):
    those the epilogue's reads are subscripted by, and the batch indices the output domain's
    constraints name (:attr:`Contraction.domain`: the kernel tests each tile and element
    against them; a constrained M or N index is its coordinate itself)."""
    used = {i.name for e in c.epilogue for x in E.walk(e) if isinstance(x, E.Access) for i in x.indices}
    used |= _constrained(c) & set(c.batch)
    return tuple(i for i in c.output_index if i in used)


def _constrained(c: Contraction) -> set[str]:
    """The output indices the output domain's constraints name."""
    return {x.name for e in c.domain for x in E.walk(e) if isinstance(x, E.Var) and x.kind == "iter"}


def _box_extents(scop: Scop, stmt: Statement) -> dict[str, E.Expr] | None:
    """Each iterator's extent, when the domain is the box ``0 <= i < extent(params)`` (a box
    from another constant is a cut box, :func:`_cut_box`: the kernel's coordinates start at 0)."""
    bounds = _bounding_box(scop, stmt)
    if bounds is None:
        return None
    domain, box, extents = bounds
    from_zero = all(low.is_cst() and low.get_constant_val().is_zero()
                    for d in range(len(stmt.iterators)) for _, low in domain.dim_min(d).get_pieces())
    return extents if from_zero and box.is_equal(domain) else None


def _bounding_box(scop: Scop, stmt: Statement) -> tuple[isl.Set, isl.Set, dict[str, E.Expr]] | None:
    """(the domain in the scop's context, its bounding box, each iterator's extent), when each
    iterator's least value is a constant and its greatest one expression of the parameters."""
    domain = stmt.domain.intersect_params(scop.context.align_params(stmt.domain.get_space()))
    if domain.is_empty():
        return None
    build = isl.AstBuild.from_context(domain.params())
    translate = IslAstTranslator(set(scop.params))
    n = len(stmt.iterators)
    box, extents = None, {}
    for d, name in enumerate(stmt.iterators):
        low, high = domain.dim_min(d), domain.dim_max(d)
        if low.n_piece() != 1 or high.n_piece() != 1 or not low.is_cst():
            return None
        own = domain.project_out(isl.dim_type.set, d + 1, n - d - 1).project_out(isl.dim_type.set, 0, d)
        box = own if box is None else box.flat_product(own)
        extents[name] = translate.expr(build.expr_from_pw_aff(high.add(_one(high))))
    if box is None:  # no iterators: one instance
        return domain, domain, extents
    box = box.set_tuple_id(domain.get_tuple_id()) if domain.has_tuple_id() else box
    return domain, box, extents


def _cut_box(scop: Scop, update: Statement, output_index: tuple[str, ...],
             operands: tuple[Operand, ...]) -> tuple[dict[str, E.Expr], tuple[E.Expr, ...]] | None:
    """(the bounding box's extents, the constraints cutting it as ``e >= 0`` expressions, see
    :attr:`Contraction.domain`), when ``update``'s domain is its bounding box from 0 (each
    iterator from 0 to its greatest value: the kernel's coordinates and K loop start at 0) cut by
    affine constraints of the output indices and parameters alone (the K indices then range over
    a box whatever the output element), and each operand's reads over the whole bounding box lie
    inside the array (the kernel reads them there); else None."""
    bounds = _bounding_box(scop, update)
    if bounds is None:
        return None
    domain, box, extents = bounds
    x, y = fresh_stem("x", scop.params), fresh_stem("y", scop.params)
    n, name = range(len(update.iterators)), domain.get_tuple_name()
    down = isl.Map(f"[{', '.join(scop.params)}] -> {{ {name}[{', '.join(f'{y}{d}' for d in n)}] -> "
                   f"{name}[{', '.join(f'{x}{d}' for d in n)}] : {' and '.join(f'0 <= {x}{d} <= {y}{d}' for d in n)} }}")
    box = box.apply(down)  # each iterator from 0
    if not domain.is_subset(box):
        return None  # an iterator from a negative value
    cut = domain.gist(box).coalesce()
    if cut.n_basic_set() != 1:
        return None
    (basic,) = cut.get_basic_sets()
    if basic.dim(isl.dim_type.div):
        return None
    outputs = [update.iterators.index(i) for i in output_index]
    constraints = []
    for constraint in basic.get_constraints():
        coefficient = [constraint.get_coefficient_val(isl.dim_type.set, d).to_python()
                       for d in range(len(update.iterators))]
        if any(coefficient[d] for d in range(len(coefficient)) if d not in outputs) or not any(coefficient):
            return None  # a K index bounded by an output index, or a condition on the parameters alone
        terms = [(v, E.Var(update.iterators[d], "iter")) for d, v in enumerate(coefficient) if v]
        terms += [(constraint.get_coefficient_val(isl.dim_type.param, p).to_python(),
                   E.Var(basic.get_dim_name(isl.dim_type.param, p), "param"))
                  for p in range(basic.dim(isl.dim_type.param))]
        constant = constraint.get_constant_val().to_python()
        constraints.append(_affine(terms, constant))
        if constraint.is_equality():
            constraints.append(_affine([(-v, var) for v, var in terms], -constant))
    if not constraints:
        return None
    for operand in operands:
        read = isl.Map(f"[{', '.join(scop.params)}] -> {{ {box.get_tuple_name()}[{', '.join(update.iterators)}] -> "
                       f"{operand.array}[{', '.join(operand.index)}] }}")
        bounds = scop.array_bounds(scop.arrays[operand.array])
        if not box.apply(read).is_subset(bounds.intersect_params(scop.context.align_params(bounds.get_space()))):
            return None
    return extents, tuple(constraints)


def _affine(terms: list[tuple[int, E.Var]], constant: int) -> E.Expr:
    """``sum(v * var) + constant`` as an expression (``i - j``, ``N - i - 1``: terms of 0 left
    out, the first term with a positive coefficient first)."""
    terms = sorted(((v, var) for v, var in terms if v), key=lambda term: term[0] < 0)
    e = None
    for v, var in terms + [(constant, None)] * bool(constant):
        part = E.Const(abs(v), i64) if var is None else var if abs(v) == 1 else E.binary("*", E.Const(abs(v), i64), var)
        e = (part if v > 0 else E.negate(part)) if e is None else E.binary("+" if v > 0 else "-", e, part)
    return e


def _cut_region(scop: Scop, output_index: tuple[str, ...], extent: dict[str, E.Expr],
                constraints: tuple[E.Expr, ...]) -> isl.Set | None:
    """The output elements a cut-box contraction's kernel computes, for every parameter value
    of the context: the bounding box of ``extent`` cut by ``constraints`` (``e >= 0``), an
    unnamed set over ``output_index`` (the update's own region lacks the parameter values where
    its K box is empty, for which the kernel still runs the init and epilogue statements); None
    where an extent has no isl form."""
    try:
        bounds = [f"0 <= {i} < {isl_text(extent[i], allow_min_max=True)}" for i in output_index]
    except NotAffine:
        return None
    bounds += [f"{isl_text(e)} >= 0" for e in constraints]
    region = isl.Set(f"[{', '.join(scop.params)}] -> {{ [{', '.join(output_index)}] : {' and '.join(bounds)} }}")
    return region.intersect_params(scop.context.align_params(region.get_space()))


def _output_region(scop: Scop, stmt: Statement, index: tuple[str, ...]) -> isl.Set:
    """The output elements ``stmt`` writes: its domain (in the scop's context) mapped onto its
    target's subscripts ``index`` (iterators, in the output's order), an unnamed set."""
    domain = stmt.domain.intersect_params(scop.context.align_params(stmt.domain.get_space()))
    onto = isl.Map(f"[{', '.join(scop.params)}] -> {{ {domain.get_tuple_name()}[{', '.join(stmt.iterators)}] -> "
                   f"[{', '.join(index)}] }}")
    return domain.apply(onto)


def _one(pa: isl.PwAff) -> isl.PwAff:
    return isl.PwAff.val_on_domain(pa.domain(), isl.Val.one(pa.get_ctx()))
