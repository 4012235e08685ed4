"""LLVM IR for a loop AST (llvmlite), optimized at -O3 (or a lower level on request) for the host
CPU and JIT-compiled.

Loop iterators live in stack slots that LLVM's mem2reg promotes; array arguments are ``noalias``
flat pointers, aligned to their element size (checked at call time), indexed row-major with
strides computed once from the parameters. Floating-point multiply-adds may be contracted into
FMAs (as gcc does by default) except in a statement that accumulates into one element along the
innermost loop (``w = w - A[i][k] * A[k][j]`` in a ``k`` loop) when it is the loop's only such
chain: the add's latency then decides the speed, and a separate multiply keeps it off the chain
(an add takes 3 cycles, an FMA 4 on current x86 cores), as gcc's vectorized in-order reductions
do. Several chains in one loop (a register tile's) keep their FMAs: throughput counts there.
Nothing is reassociated; the vectorizer may vectorize such in-order (strict) reductions, keeping
the order of the adds (LLVM's ``-force-ordered-reductions``, set only while our own modules are
optimized), but not where one of the loop's accesses is strided (a column walk): then only the
multiplies would run on vectors, and gathering their operands costs more than that saves
(doitgen, ludcmp).

Parallel loops that run a loop in each iteration (:func:`~polyopt.codegen.ast.runs_on_threads`;
innermost parallel loops are vectorized instead) run on a thread team of the OpenMP runtime
libgomp through its ``GOMP_*`` entry points, as Polly does: the loop is outlined into a function
that receives the values it uses in a struct, ``GOMP_parallel`` runs it on every thread, and each
thread takes one contiguous chunk of the iterations (static schedule). A sequential loop around a
parallel loop (a wavefront) is outlined whole: every thread walks the fronts, shares out each
parallel loop and meets the others at ``GOMP_barrier``; code outside the parallel loops runs on
thread 0 only. A parallel loop inside another one's chunk runs sequentially. The kernel function
takes the team size as one extra, last ``i32`` argument after
:func:`~polyopt.codegen.ast.abi_arguments`, and returns an ``i32`` status: integer division or
remainder by zero does not trap (the divisor is guarded), it sets the status to
:data:`STATUS_ZERO_DIVISION` (atomically: any thread may) and the runtime raises
ZeroDivisionError after the call.

Innermost loops the schedule proves parallel carry ``llvm.loop.vectorize.enable`` and put their
array accesses in an access group named by ``llvm.loop.parallel_accesses``, so the vectorizer needs
no run-time alias checks (other loops are left to LLVM's cost model: forcing one that cannot be
vectorized only prints a warning). Functions prefer the widest vectors of the host, but 256-bit ones
where the vectorizer may take in-order sums (:data:`ORDERED_SUM_VECTOR_BITS`).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import threading
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from itertools import groupby
from typing import Callable

import llvmlite.binding as llvm
import llvmlite.ir as ir
import numpy as np

from polyopt.analysis import expr as E
from polyopt.analysis.affine import extent_expr
from polyopt.codegen.loop_nodes import Block, For, If, Node, Run, nodes, runs_on_threads
from polyopt.codegen.ast import abi_arguments, instantiate
from polyopt.codegen.promotion import elements_to_promote
from polyopt.errors import CodegenError
from polyopt.analysis.scop import Scop
from polyopt.types import DType, bf16_bits

_I1, _I32, _I64 = ir.IntType(1), ir.IntType(32), ir.IntType(64)
_PTR = ir.PointerType()
_FLOAT_FLAGS = ("contract",)
#: The widest vectors the vectorizers prefer, on a host with wider ones (AVX-512), in a function
#: where they may vectorize an innermost loop's in-order sums: those adds run one after another
#: whatever the width, and 512-bit vectors only add the shuffles that extract each lane, on the
#: port the adds need (durbin, syrk, the dot products of mvt and gesummv on an AVX-512 Xeon:
#: docs/performance.md). Elsewhere -- register tiles vectorized across the tile, loops without
#: sums -- the host's widest vectors pay (gemm, doitgen).
ORDERED_SUM_VECTOR_BITS = 256
_INTRINSICS = {"sqrt": "llvm.sqrt", "exp": "llvm.exp", "log": "llvm.log", "sin": "llvm.sin",
               "cos": "llvm.cos", "pow": "llvm.pow", "floor": "llvm.floor", "abs": "llvm.fabs"}
_FCMP = {"<": "<", "<=": "<=", ">": ">", ">=": ">=", "==": "==", "!=": "!="}
#: The kernel function's return value: it ran to the end without error, or it divided an integer
#: by zero (it still ran to the end; the quotient was taken as if the divisor were one).
STATUS_OK, STATUS_ZERO_DIVISION = 0, 1


class _X86FP80Type(ir.Type):
    """LLVM's ``x86_fp80`` (llvmlite has no class for it): the element type of numpy's longdouble
    on x86-64. Constants are written in LLVM's ``0xK`` form, the 80 bits most significant first."""

    def __str__(self) -> str:
        return "x86_fp80"

    def __eq__(self, other) -> bool:
        return isinstance(other, _X86FP80Type)

    def __hash__(self) -> int:
        return hash(_X86FP80Type)

    def format_constant(self, value) -> str:
        return "0xK" + np.longdouble(value).tobytes()[:10][::-1].hex().upper()


class _BFloatType(ir.Type):
    """LLVM's ``bfloat`` (llvmlite has no class for it): bf16 arrays. Constants are written in
    LLVM's ``0xR`` form, the 16 bits in hex. Kernels only load, store and convert it (arithmetic
    runs in f32, :func:`polyopt.analysis.expr.binary`); LLVM expands the conversions inline."""

    def __str__(self) -> str:
        return "bfloat"

    def __eq__(self, other) -> bool:
        return isinstance(other, _BFloatType)

    def __hash__(self) -> int:
        return hash(_BFloatType)

    def format_constant(self, value) -> str:
        return f"0xR{int(bf16_bits(value)):04X}"


def llvm_type(dtype: DType) -> ir.Type:
    """The IR type of ``dtype``; LLVM's integers carry no sign (u8 and i8 are both ``i8``): the
    operations choose it (:meth:`_FunctionEmitter.binary`, :meth:`_FunctionEmitter.convert`)."""
    if dtype.is_float:
        return {"f16": ir.HalfType(), "bf16": _BFloatType(), "f32": ir.FloatType(), "f64": ir.DoubleType(),
                "f80": _X86FP80Type()}[dtype.name]
    return ir.IntType(dtype.bits)


class _Distinct(ir.values.NamedValue):
    """A ``distinct`` metadata node, optionally naming itself first (a loop ID): llvmlite's
    ``add_metadata`` makes only uniqued nodes, which cannot refer to themselves."""

    name_prefix = "!"

    def __init__(self, module: ir.Module, operands: list, *, self_reference: bool):
        super().__init__(module, ir.MetaDataType(), name=str(len(module.metadata)))
        self.operands = ([self] if self_reference else []) + list(operands)
        module.metadata.append(self)

    def descr(self, buf) -> None:
        buf += ("distinct !{" + ", ".join(op.get_reference() for op in self.operands) + "}", "\n")

    def _get_reference(self) -> str:
        return f"!{self.name}"


def _upper_bound(loop: For) -> E.Expr | None:
    """``u`` such that ``loop`` runs while ``var < u``, from the conditions isl's AST builder
    writes (``var < u``, or ``var <= v`` giving ``u = v + 1``); None for any other condition."""
    cond = loop.cond
    if not (isinstance(cond, E.Binary) and cond.op in ("<", "<=") and isinstance(cond.lhs, E.Var)
            and cond.lhs.name == loop.var):
        return None
    if any(isinstance(v, E.Var) and v.name == loop.var for v in E.walk(cond.rhs)):
        return None
    return cond.rhs if cond.op == "<" else E.Binary("+", cond.rhs, E.Const(1, cond.rhs.dtype), cond.rhs.dtype)


def _shared(loop: Node) -> bool:
    """A loop whose iterations a thread team shares out (:func:`runs_on_threads`), with a plain
    upper bound."""
    return runs_on_threads(loop) and _upper_bound(loop) is not None


def _has_shared_loop(node: Node) -> bool:
    return any(_shared(n) for n in nodes(node))


def _innermost(loop: For) -> bool:
    return not any(isinstance(n, For) for n in nodes(loop.body))


def _step(index: E.Expr, var: str) -> int | None:
    """How much the integer expression ``index`` grows when ``var`` grows by one; None when it is
    not affine in ``var``."""
    if not any(isinstance(v, E.Var) and v.name == var for v in E.walk(index)):
        return 0
    if isinstance(index, E.Var):
        return 1
    if isinstance(index, E.Cast):
        return _step(index.operand, var)
    if isinstance(index, E.Unary) and index.op == "neg":
        step = _step(index.operand, var)
        return None if step is None else -step
    if isinstance(index, E.Binary) and index.op in ("+", "-"):
        lhs, rhs = _step(index.lhs, var), _step(index.rhs, var)
        if lhs is None or rhs is None:
            return None
        return lhs + rhs if index.op == "+" else lhs - rhs
    if isinstance(index, E.Binary) and index.op == "*":
        for factor, term in ((index.lhs, index.rhs), (index.rhs, index.lhs)):
            step = _step(term, var)
            if isinstance(factor, E.Const) and step is not None:
                return int(factor.value) * step
    return None


def _unconditional_runs(node: Node):
    """The statement instances ``node`` runs whenever it runs (those not under a loop or a
    condition inside it)."""
    if isinstance(node, Run):
        yield node
    elif isinstance(node, Block):
        for child in node.body:
            yield from _unconditional_runs(child)


def _contiguous(access: E.Access, var: str) -> bool:
    """Whether consecutive ``var`` touch the same or neighbouring elements of ``access``."""
    steps = [_step(index, var) for index in access.indices]
    return all(step == 0 for step in steps[:-1]) and (not steps or steps[-1] in (-1, 0, 1))


class _FunctionEmitter:
    """Emits the body of one function; ``values`` maps parameter/scalar/iterator names to IR.

    ``mode`` says how parallel loops are emitted: "spawn" (the kernel: start a thread team),
    "team" (inside an outlined region that every thread runs) or "serial" (sequentially)."""

    def __init__(self, module: ir.Module, scop: Scop, function: ir.Function, mode: str):
        self.module, self.scop, self.function, self.mode = module, scop, function, mode
        _host_function_attributes(function)
        self.builder = ir.IRBuilder(function.append_basic_block("entry"))
        # whether this function divided by zero: an "or" along its loops (a reduction the
        # vectorizer handles), reported into the status once at its end (:meth:`finish`)
        self.zero_division = self.builder.alloca(_I1, name="zero_division")
        self.builder.store(ir.Constant(_I1, 0), self.zero_division)
        self.values: dict[str, ir.Value] = {}
        self.pointers: dict[str, ir.Value] = {}
        self.strides: dict[str, list[ir.Value]] = {}
        self.loop_slots: dict[str, ir.Value] = {}
        self.registers: dict[E.Access, ir.Value] = {}  # promoted elements in the loop being emitted
        self.threads: ir.Value | None = None  # the kernel's team-size argument
        self.status: ir.Value | None = None  # the i32 slot of the kernel's status (_STATUS_*)
        self.team: tuple[ir.Value, ir.Value] | None = None  # (thread number, team size), i64
        self.access_group: _Distinct | None = None  # of the innermost parallel loop being emitted
        self.ordered_sums = False  # whether an innermost loop's in-order sums are left to the vectorizer
        self.innermost_var: str | None = None  # iterator of the innermost loop being emitted
        self.chains = 0  # floating-point accumulations along that loop (see _chains)
        self.float_flags: tuple[str, ...] = _FLOAT_FLAGS
        self.sum_flags: tuple[str, ...] = ()  # of statements that accumulate along the innermost loop

    @classmethod
    def kernel(cls, module: ir.Module, scop: Scop, name: str, parallel: bool,
               reassociate: bool = False) -> "_FunctionEmitter":
        """The kernel function: :func:`abi_arguments`, then the ``i32`` team size; it returns
        its ``i32`` status (:data:`STATUS_OK` or :data:`STATUS_ZERO_DIVISION`)."""
        args = abi_arguments(scop)
        types = [_PTR if a.kind == "array" else llvm_type(a.dtype) for a in args] + [_I32]
        function = ir.Function(module, ir.FunctionType(_I32, types), name=name)
        self = cls(module, scop, function, "spawn" if parallel else "serial")
        if reassociate:
            self.sum_flags = ("reassoc", "contract")
        for arg, value in zip(args, function.args):
            value.name = arg.name
            if arg.kind == "array":
                value.add_attribute("noalias")
                value.attributes.align = arg.dtype.bits // 8
                self.pointers[arg.name] = value
            else:
                self.values[arg.name] = value
        self.threads = function.args[-1]
        self.threads.name = "num_threads"
        self.status = self.builder.alloca(_I32, name="status")
        self.builder.store(ir.Constant(_I32, STATUS_OK), self.status)
        self.strides = {name: self._strides(array.shape) for name, array in scop.arrays.items()
                        if not array.local}
        for array in scop.arrays.values():
            if array.local:
                slot = self.builder.alloca(llvm_type(array.dtype), name=array.name)
                self.builder.store(ir.Constant(llvm_type(array.dtype), 0), slot)
                self.pointers[array.name] = slot
        return self

    def _strides(self, shape: tuple[str, ...]) -> list[ir.Value]:
        """Row-major strides (in elements) of an array, computed from the parameters."""
        strides: list[ir.Value] = []
        running: ir.Value = ir.Constant(_I64, 1)
        for extent in reversed(shape[1:]):
            strides.insert(0, running)
            running = self.builder.mul(running, self.expr(extent_expr(extent, self.scop.params)),
                                       flags=("nsw",))
        strides.insert(0, running)
        return strides

    @contextmanager
    def _in_mode(self, mode: str):
        saved, self.mode = self.mode, mode
        try:
            yield
        finally:
            self.mode = saved

    # ----- statements -----------------------------------------------------------------------
    def emit(self, node: Node) -> None:
        if self.mode == "spawn" and isinstance(node, For) and _has_shared_loop(node):
            self._spawn(node)
        elif self.mode == "team":
            self._emit_in_team(node)
        elif isinstance(node, Block):
            for child in node.body:
                self.emit(child)
        elif isinstance(node, For):
            self._loop(node, self.expr(node.init), lambda: self.expr(node.cond))
        elif isinstance(node, If):
            self._if(node)
        else:
            target, value = instantiate(self.scop.statement(node.statement), node.args)
            self.float_flags = self._statement_flags(target, value)
            result = self.expr(value)
            self.float_flags = _FLOAT_FLAGS
            if target in self.registers:
                self.builder.store(result, self.registers[target])
                return
            store = self.builder.store(result, self.address(target), align=target.dtype.bits // 8)
            self._tag(store)

    @staticmethod
    def _accumulates(target: E.Access, value: E.Expr, var: str | None) -> bool:
        """Whether ``target = value`` reads and writes one element in every iteration of the
        innermost loop ``var`` around it (a loop-carried chain through ``target``)."""
        if var is None or any(_step(index, var) != 0 for index in target.indices):
            return False
        return any(a == target for a in E.walk(value))

    def _statement_flags(self, target: E.Access, value: E.Expr) -> tuple[str, ...]:
        """Floating-point flags of a statement's arithmetic: ``sum_flags`` for an accumulation
        along the innermost loop that is the loop's only chain (no FMA on the chain, or partial
        sums in vector lanes where sums may be reassociated); the contractible default for the
        rest. A register tile's many chains keep their FMAs and their order: reassociated, LLVM
        vectorizes them along the reduction loop instead of across the tile's columns (einsum's
        1000^3 matmul: 85 -> 205 ms). A statement with half values gets none: LLVM narrows
        the f32 operations between conversions to half ones (exact, one rounding each), and
        contracting those would skip a rounding (a half FMA where the host has AVX512-FP16)."""
        if any(e.dtype.is_half for e in E.walk(value)) or target.dtype.is_half:
            return ()
        if not self._accumulates(target, value, self.innermost_var):
            return _FLOAT_FLAGS
        return self.sum_flags if self.chains == 1 else _FLOAT_FLAGS

    def _statements(self, loop: For):
        """(target, value) of every statement in ``loop``'s body, its iterators bound."""
        for run in nodes(loop.body):
            if isinstance(run, Run):
                yield instantiate(self.scop.statement(run.statement), run.args)

    def _chains(self, loop: For) -> int:
        """Floating-point accumulations along innermost ``loop`` (see :meth:`_accumulates`)."""
        return sum(target.dtype.is_float and self._accumulates(target, value, loop.var)
                   for target, value in self._statements(loop))

    def _strided(self, loop: For) -> bool:
        """Whether innermost ``loop`` walks some array with a stride."""
        return any(isinstance(a, E.Access) and not _contiguous(a, loop.var)
                   for target, value in self._statements(loop) for a in (target, *E.walk(value)))

    def _if(self, node: If) -> None:
        b = self.builder
        cond = self.expr(node.cond)
        if node.otherwise is None:
            with b.if_then(cond):
                self.emit(node.then)
        else:
            with b.if_else(cond) as (then, otherwise):
                with then:
                    self.emit(node.then)
                with otherwise:
                    self.emit(node.otherwise)

    def _loop(self, node: For, start: ir.Value, more: Callable[[], ir.Value]) -> None:
        """``for (var = start; more(); var += step) body``; an innermost parallel loop gets loop
        metadata for the vectorizer; an innermost loop keeps the elements it updates at
        invariant indices in registers (:mod:`polyopt.codegen.promotion`)."""
        b = self.builder
        slot = self._entry_alloca(_I64, node.var)
        self.loop_slots[node.var] = slot
        b.store(start, slot)
        elements = self._promotable(node)
        if not elements:
            self._loop_from_slot(node, slot, more)
            return
        # loaded before and stored after the loop, only if it runs: its subscripts need not be
        # in bounds otherwise
        with b.if_then(more()):
            registers = {element: self._entry_alloca(llvm_type(element.dtype), "promoted")
                         for element in elements}
            for element, register in registers.items():
                b.store(self.expr(element), register)
            saved, self.registers = self.registers, {**self.registers, **registers}
            self._loop_from_slot(node, slot, more)
            self.registers = saved
            for element, register in registers.items():
                store = b.store(b.load(register, typ=llvm_type(element.dtype)), self.address(element),
                                align=element.dtype.bits // 8)
                self._tag(store)

    def _entry_alloca(self, typ: ir.Type, name: str) -> ir.Value:
        """A stack slot allocated at the function's entry (where LLVM promotes it to SSA values)."""
        b = self.builder
        with b.goto_block(self.function.entry_basic_block):
            b.position_at_start(self.function.entry_basic_block)
            return b.alloca(typ, name=name)

    def _promotable(self, loop: For) -> list[E.Access]:
        """The elements innermost ``loop`` updates at invariant indices and may keep in
        registers: targets of the statements its body runs unconditionally (one under a
        condition may have subscripts out of bounds where the condition fails), checked against
        every access in the loop."""
        if not _innermost(loop):
            return []
        targets = [instantiate(self.scop.statement(run.statement), run.args)[0]
                   for run in _unconditional_runs(loop.body)]
        accesses = [a for target, value in self._statements(loop) for e in (target, value)
                    for a in E.walk(e) if isinstance(a, E.Access)]
        return elements_to_promote(targets, accesses, {loop.var})

    def _loop_from_slot(self, node: For, slot: ir.Value, more: Callable[[], ir.Value]) -> None:
        b = self.builder
        header = self.function.append_basic_block(f"{node.var}.header")
        body = self.function.append_basic_block(f"{node.var}.body")
        done = self.function.append_basic_block(f"{node.var}.done")
        b.branch(header)
        b.position_at_end(header)
        b.cbranch(more(), body, done)
        b.position_at_end(body)
        innermost = _innermost(node)
        vectorize, saved_group = node.parallel and innermost, self.access_group
        if vectorize:
            self.access_group = _Distinct(self.module, [], self_reference=False)
        saved = self.innermost_var, self.chains
        self.innermost_var, self.chains = (node.var, self._chains(node)) if innermost else (None, 0)
        chains = self.chains
        self.emit(node.body)
        self.innermost_var, self.chains = saved
        value = b.load(slot, typ=_I64)
        b.store(b.add(value, ir.Constant(_I64, node.step), flags=("nsw",)), slot)
        back = b.branch(header)
        if vectorize:
            back.set_metadata("llvm.loop", self._loop_id())
        elif chains == 1 and self._strided(node):  # one in-order sum: gathers do not pay
            back.set_metadata("llvm.loop", self._no_vectorize_id())
        elif len(self.registers) > 1 and self._strided(node):
            # a register tile: its accumulators are vectorized across the tile (SLP), not each
            # one along the loop as an in-order sum (einsum 1000^3 matmul, 6x32 tiles: 10x slower).
            # Where the loop walks every array with unit stride (a tile of rows of dot products,
            # w[i + r] += A[i + r, j] * x[j]), SLP across the tile would gather the rows: the loop
            # vectorizer interleaves the rows' in-order sums instead (2000^2, 8 rows: 3.5 -> 1.5 ms)
            back.set_metadata("llvm.loop", self._no_vectorize_id())
        elif chains and not self.sum_flags:
            self.ordered_sums = True
        self.access_group = saved_group
        b.position_at_end(done)
        del self.loop_slots[node.var]

    def _loop_id(self) -> _Distinct:
        """The ``llvm.loop`` ID of an innermost parallel loop: vectorize it, and its accesses
        (all in ``self.access_group``) carry no dependence between iterations."""
        md = self.module.add_metadata
        return _Distinct(self.module, [
            md([ir.MetaDataString(self.module, "llvm.loop.vectorize.enable"), ir.Constant(_I1, 1)]),
            md([ir.MetaDataString(self.module, "llvm.loop.parallel_accesses"), self.access_group]),
        ], self_reference=True)

    def _no_vectorize_id(self) -> _Distinct:
        """The ``llvm.loop`` ID of a loop the vectorizer must leave alone."""
        flag = self.module.add_metadata([ir.MetaDataString(self.module, "llvm.loop.vectorize.enable"),
                                         ir.Constant(_I1, 0)])
        return _Distinct(self.module, [flag], self_reference=True)

    def _tag(self, instruction) -> None:
        """Put an array access into the access group of the parallel loop around it."""
        if self.access_group is not None:
            instruction.set_metadata("llvm.access.group", self.access_group)

    def address(self, access: E.Access) -> ir.Value:
        base = self.pointers[access.array]
        if not access.indices:
            return base
        offset = None
        for index, stride in zip(access.indices, self.strides[access.array]):
            term = self.builder.mul(self.expr(index), stride, flags=("nsw",))
            offset = term if offset is None else self.builder.add(offset, term, flags=("nsw",))
        return self.builder.gep(base, [offset], inbounds=True, source_etype=llvm_type(access.dtype))

    # ----- parallel loops ---------------------------------------------------------------------
    def _spawn(self, node: For) -> None:
        """Run ``node`` on a thread team: outline it and call ``GOMP_parallel`` on it. A parallel
        loop is shared out; a sequential loop around parallel ones runs on every thread."""
        captured = self._captured()
        region = _FunctionEmitter.outlined(self, captured)
        with region._in_mode("team"):
            if _shared(node):
                region._shared_loop(node)
            else:
                region.emit(node)
        region.finish()
        b = self.builder
        variables = [value for _, _, value in captured]
        frame = ir.LiteralStructType([v.type for v in variables])
        data = self._entry_alloca(frame, "captured")
        for k, value in enumerate(variables):
            b.store(value, b.gep(data, [ir.Constant(_I32, 0), ir.Constant(_I32, k)], inbounds=True))
        entry = _trampoline(self.module, region.function, frame, region.vector_bits())
        b.call(_runtime_function(self.module, "GOMP_parallel"), [entry, data, self.threads, ir.Constant(_I32, 0)])

    def _captured(self) -> list[tuple[str, object, ir.Value]]:
        """(kind, key, value) of every non-constant value the outlined code may use."""
        b = self.builder
        found = [("value", n, v) for n, v in self.values.items()]
        found += [("value", n, b.load(slot, typ=_I64)) for n, slot in self.loop_slots.items()]
        found += [("pointer", n, p) for n, p in self.pointers.items()]
        found += [("stride", (n, k), s) for n, ss in self.strides.items() for k, s in enumerate(ss)]
        found.append(("status", None, self.status))
        return [item for item in found if not isinstance(item[2], ir.Constant)]

    @classmethod
    def outlined(cls, parent: "_FunctionEmitter", captured: list) -> "_FunctionEmitter":
        """An internal function taking ``captured`` as arguments (pointers ``noalias``, as in the
        kernel), with the parent's constants, and its thread number and team size at hand."""
        types = [value.type for _, _, value in captured]
        name = parent.module.get_unique_name(f"{parent.function.name}.region")
        function = ir.Function(parent.module, ir.FunctionType(ir.VoidType(), types), name=name)
        function.linkage = "internal"
        self = cls(parent.module, parent.scop, function, "serial")
        self.sum_flags = parent.sum_flags
        self.values = {n: v for n, v in parent.values.items() if isinstance(v, ir.Constant)}
        self.pointers = {n: v for n, v in parent.pointers.items() if isinstance(v, ir.Constant)}
        self.strides = {n: list(ss) for n, ss in parent.strides.items()}
        for (kind, key, _), arg in zip(captured, function.args):
            if kind == "value":
                self.values[key] = arg
            elif kind == "pointer":
                arg.add_attribute("noalias")
                self.pointers[key] = arg
            elif kind == "status":
                self.status = arg
            else:
                self.strides[key[0]][key[1]] = arg
        b = self.builder
        number = b.call(_runtime_function(self.module, "omp_get_thread_num"), [])
        size = b.call(_runtime_function(self.module, "omp_get_num_threads"), [])
        self.team = (b.sext(number, _I64), b.sext(size, _I64))
        return self

    def _shared_loop(self, node: For) -> None:
        """This thread's chunk of parallel loop ``node``: iterations [lo, hi) of ``trips``, in
        contiguous chunks of ceil(trips / team size) (OpenMP's static schedule)."""
        b = self.builder
        number, size = self.team
        start, bound = self.expr(node.init), self.expr(_upper_bound(node))
        step = ir.Constant(_I64, node.step)
        span = b.sub(bound, start)
        positive = b.icmp_signed(">", span, ir.Constant(_I64, 0))
        trips = b.select(positive, b.sdiv(b.add(span, ir.Constant(_I64, node.step - 1)), step),
                         ir.Constant(_I64, 0))
        chunk = b.sdiv(b.add(trips, b.sub(size, ir.Constant(_I64, 1))), size)
        lo = self._min(b.mul(number, chunk), trips)
        hi = self._min(b.add(lo, chunk), trips)
        first = b.add(start, b.mul(lo, step))
        last = b.add(start, b.mul(hi, step))
        with self._in_mode("serial"):
            self._loop(node, first, lambda: b.icmp_signed("<", b.load(self.loop_slots[node.var], typ=_I64), last))

    def _min(self, x: ir.Value, y: ir.Value) -> ir.Value:
        return self.builder.select(self.builder.icmp_signed("<", x, y), x, y)

    def _emit_in_team(self, node: Node) -> None:
        """``node`` run by every thread of the team: parallel loops are shared out (then all
        threads wait at a barrier), code without parallel loops runs on thread 0 (then a barrier),
        and loops, conditions and blocks around parallel loops are walked by every thread (their
        bounds and conditions are affine in parameters and iterators: all threads agree)."""
        if _shared(node):
            self._shared_loop(node)
            self._barrier()
        elif not _has_shared_loop(node):
            self._on_one_thread(node)
        elif isinstance(node, Block):  # runs of children without parallel loops: one barrier each
            for threaded, children in groupby(node.body, key=_has_shared_loop):
                if threaded:
                    for child in children:
                        self.emit(child)
                else:
                    self._on_one_thread(Block(tuple(children)))
        elif isinstance(node, For):
            self._loop(node, self.expr(node.init), lambda: self.expr(node.cond))
        else:
            self._if(node)

    def _on_one_thread(self, node: Node) -> None:
        """``node`` on thread 0 while the others wait at the barrier after it."""
        b = self.builder
        with b.if_then(b.icmp_signed("==", self.team[0], ir.Constant(_I64, 0))):
            with self._in_mode("serial"):
                self.emit(node)
        self._barrier()

    def _barrier(self) -> None:
        self.builder.call(_runtime_function(self.module, "GOMP_barrier"), [])

    # ----- expressions --------------------------------------------------------------------------
    def expr(self, e: E.Expr) -> ir.Value:
        b = self.builder
        if isinstance(e, E.Const):
            value = float(e.value) if e.dtype.is_float else int(e.value)
            return ir.Constant(llvm_type(e.dtype), value)
        if isinstance(e, E.Var):
            if e.name in self.loop_slots:
                return b.load(self.loop_slots[e.name], typ=_I64)
            return self.values[e.name]
        if isinstance(e, E.Access) and e in self.registers:
            return b.load(self.registers[e], typ=llvm_type(e.dtype))
        if isinstance(e, E.Access):
            load = b.load(self.address(e), typ=llvm_type(e.dtype), align=e.dtype.bits // 8)
            self._tag(load)
            return load
        if isinstance(e, E.Unary):
            operand = self.expr(e.operand)
            if e.op == "not":
                return b.xor(operand, ir.Constant(_I1, 1))
            return b.fneg(operand) if e.dtype.is_float else b.neg(operand)
        if isinstance(e, E.Cast):
            return self.convert(self.expr(e.operand), e.operand.dtype, e.dtype)
        if isinstance(e, E.Select):
            return self.select(e.cond, e.then, e.otherwise)
        if isinstance(e, E.Call):
            return self.call(e)
        if isinstance(e, E.Binary):
            return self.binary(e)
        raise CodegenError(f"cannot emit {e!r}")

    def select(self, cond: E.Expr, then: E.Expr, otherwise: E.Expr) -> ir.Value:
        """``then if cond else otherwise``, evaluating only the chosen side (as Python does: a
        guarded ``x // y if y != 0 else 0`` must not divide by zero). LLVM turns it back into
        a ``select`` where that is safe."""
        b = self.builder
        with b.if_else(self.expr(cond)) as (then_block, otherwise_block):
            with then_block:
                then_value, then_end = self.expr(then), b.block
            with otherwise_block:
                otherwise_value, otherwise_end = self.expr(otherwise), b.block
        phi = b.phi(then_value.type)
        phi.add_incoming(then_value, then_end)
        phi.add_incoming(otherwise_value, otherwise_end)
        return phi

    def convert(self, value: ir.Value, source: DType, target: DType) -> ir.Value:
        """C's conversions: integers widen by their source's signedness and narrow by wrapping
        (keeping the low bits); floats convert to and from signed or unsigned integers."""
        b, to = self.builder, llvm_type(target)
        unsigned = source.unsigned or source.name == "bool"
        if target.is_half and source.name == "f64":  # (other types reach half types through f32)
            return b.fptrunc(self._rounded_to_odd(value), to)
        if source.is_float and target.is_float:
            return b.fpext(value, to) if target.bits > source.bits else b.fptrunc(value, to)
        if source.is_float:
            return b.fptoui(value, to) if target.unsigned else b.fptosi(value, to)
        if target.is_float:
            return b.uitofp(value, to) if unsigned else b.sitofp(value, to)
        if target.bits == source.bits:
            return value
        if target.bits < source.bits:
            return b.trunc(value, to)
        return b.zext(value, to) if unsigned else b.sext(value, to)

    def _rounded_to_odd(self, value: ir.Value) -> ir.Value:
        """The double ``value`` as a float rounded to odd (toward zero, the last bit set where
        inexact), on its way to a half type: rounding that to nearest gives the correctly
        rounded half (f32 has more than twice the half types' digits), where a direct
        ``fptrunc`` from double calls compiler-rt's ``__truncdfhf2``/``__truncdfbf2``, which
        the JIT does not link."""
        b, single = self.builder, ir.FloatType()
        nearest = b.fptrunc(value, single)
        widened = b.fpext(nearest, value.type)
        inexact = b.fcmp_unordered("!=", widened, value)
        away = b.xor(b.fcmp_ordered(">", widened, value), b.fcmp_ordered("<", value, ir.Constant(value.type, 0.0)))
        bits = b.bitcast(nearest, _I32)
        toward_zero = b.select(away, b.sub(bits, ir.Constant(_I32, 1)), bits)
        odd = b.select(inexact, b.or_(toward_zero, ir.Constant(_I32, 1)), bits)
        return b.bitcast(odd, single)

    def call(self, e: E.Call) -> ir.Value:
        args = [self.expr(a) for a in e.args]
        if e.func == "abs" and e.dtype.unsigned:
            return args[0]
        if e.func == "abs" and not e.dtype.is_float:
            negative = self.builder.icmp_signed("<", args[0], ir.Constant(args[0].type, 0))
            return self.builder.select(negative, self.builder.neg(args[0]), args[0])
        return self.builder.call(self.math_function(e.func, e.dtype), args)

    def math_function(self, func: str, dtype: DType) -> ir.Function:
        arity = E.MATH_FUNCTIONS[func]
        if func in _INTRINSICS:
            return self._intrinsic(_INTRINSICS[func], dtype, arity)
        t = llvm_type(dtype)
        name = func + "f" if dtype.name == "f32" else func
        if name in self.module.globals:
            return self.module.globals[name]
        return ir.Function(self.module, ir.FunctionType(t, [t] * arity), name=name)

    def binary(self, e: E.Binary) -> ir.Value:
        b, op, t = self.builder, e.op, e.lhs.dtype
        if op == "**":
            exponent = e.rhs.value if isinstance(e.rhs, E.Const) else None
            if not e.dtype.is_float:  # the exponent is a literal >= 0 (see expr.binary)
                if exponent is None or exponent < 0:
                    raise CodegenError("integer ** needs a non-negative literal exponent")
                return self._int_power(self.expr(e.lhs), int(exponent))
            if exponent is not None and float(exponent).is_integer() and 0 <= exponent <= 4:
                base = self.expr(e.lhs)
                result = ir.Constant(llvm_type(e.dtype), 1.0)
                for _ in range(int(exponent)):
                    result = b.fmul(result, base, flags=self.float_flags)
                return result
            return b.call(self.math_function("pow", e.dtype), [self.expr(e.lhs), self.expr(e.rhs)])
        if op in ("and", "or"):  # short-circuit, as in Python
            false, true = E.Const(0, e.dtype), E.Const(1, e.dtype)
            return self.select(e.lhs, e.rhs, false) if op == "and" else self.select(e.lhs, true, e.rhs)
        x, y = self.expr(e.lhs), self.expr(e.rhs)
        compare = b.fcmp_ordered if t.is_float else b.icmp_unsigned if t.unsigned else b.icmp_signed
        if op in E.COMPARISON_OPS:
            return b.fcmp_unordered(op, x, y) if t.is_float and op == "!=" else compare(op, x, y)
        if op in ("min", "max"):  # Python: min(a, b) = b if b < a else a
            return b.select(compare("<" if op == "min" else ">", y, x), y, x)
        return self._float_arith(op, x, y, t) if t.is_float else self._int_arith(op, x, y, t)

    def _int_power(self, base: ir.Value, exponent: int) -> ir.Value:
        """``base ** exponent`` by squaring and multiplying (wrapping like C on overflow)."""
        b, result = self.builder, ir.Constant(base.type, 1)
        while exponent:
            if exponent & 1:
                result = b.mul(result, base)
            exponent >>= 1
            if exponent:
                base = b.mul(base, base)
        return result

    def _float_arith(self, op: str, x, y, t: DType) -> ir.Value:
        b, f = self.builder, self.float_flags
        if op == "+":
            return b.fadd(x, y, flags=f)
        if op == "-":
            return b.fsub(x, y, flags=f)
        if op == "*":
            return b.fmul(x, y, flags=f)
        if op == "/":
            return b.fdiv(x, y)
        if op in ("//", "%"):
            return self._float_divmod(x, y, t)[0 if op == "//" else 1]
        raise CodegenError(f"unsupported floating-point operator {op}")

    def _float_divmod(self, x, y, t: DType) -> tuple[ir.Value, ir.Value]:
        """Python's float ``(x // y, x % y)`` (CPython's ``_float_div_mod``): the remainder takes
        the sign of the divisor, and the quotient is rounded from ``(x - x % y) / y``, which is
        not always ``floor(x / y)`` (``1.0 // 0.1 == 9.0``)."""
        b = self.builder
        zero, one, half = (ir.Constant(x.type, v) for v in (0.0, 1.0, 0.5))
        copysign = self._intrinsic("llvm.copysign", t, 2)
        mod = b.frem(x, y)
        div = b.fdiv(b.fsub(x, mod), y)
        nonzero = b.fcmp_unordered("!=", mod, zero)
        fix = b.and_(nonzero, b.xor(b.fcmp_ordered("<", y, zero), b.fcmp_ordered("<", mod, zero)))
        mod = b.select(nonzero, b.select(fix, b.fadd(mod, y), mod), b.call(copysign, [zero, y]))
        div = b.select(fix, b.fsub(div, one), div)
        floor = b.call(self.math_function("floor", t), [div])
        floor = b.select(b.fcmp_ordered(">", b.fsub(div, floor), half), b.fadd(floor, one), floor)
        quotient = b.select(b.fcmp_unordered("!=", div, zero), floor,
                            b.call(copysign, [zero, b.fdiv(x, y)]))
        return quotient, mod

    def _intrinsic(self, name: str, dtype: DType, arity: int) -> ir.Function:
        """The LLVM intrinsic ``name`` for ``dtype`` (declared once per module)."""
        t = llvm_type(dtype)
        full = f"{name}.{'f32' if dtype.name == 'f32' else 'f64'}"
        if full in self.module.globals:
            return self.module.globals[full]
        return ir.Function(self.module, ir.FunctionType(t, [t] * arity), name=full)

    def vector_bits(self) -> int:
        """The widest vectors the vectorizers should prefer in this function: the host's widest,
        but at most :data:`ORDERED_SUM_VECTOR_BITS` where the vectorizer may take an innermost
        loop's in-order sums."""
        widest = _widest_vector_bits()
        return min(widest, ORDERED_SUM_VECTOR_BITS) if self.ordered_sums else widest

    def finish(self) -> None:
        """End the function: report a division by zero into the status (atomically: every
        thread of a team may), then return (the kernel returns its status)."""
        _prefer_vector_bits(self.function, self.vector_bits())
        b = self.builder
        with b.if_then(b.load(self.zero_division, typ=_I1), likely=False):
            b.store_atomic(ir.Constant(_I32, STATUS_ZERO_DIVISION), self.status, "monotonic", 4)
        if self.function.function_type.return_type == _I32:  # the kernel
            b.ret(b.load(self.status, typ=_I32))
        else:  # an outlined region
            b.ret_void()

    def _int_arith(self, op: str, x, y, t: DType) -> ir.Value:
        b = self.builder
        simple = {"+": b.add, "-": b.sub, "*": b.mul}
        if op in simple:
            return simple[op](x, y)
        if op in ("//", "%", "tdiv", "tmod"):
            return self._int_division(op, x, y, t)
        raise CodegenError(f"unsupported integer operator {op}")

    def _int_division(self, op: str, x, y, t: DType) -> ir.Value:
        """Integer floor (``//``, ``%``) or truncating (``tdiv``, ``tmod``) division that never
        traps: a zero divisor sets the status to :data:`STATUS_ZERO_DIVISION` (the runtime then
        raises ZeroDivisionError) and divides by one instead; ``x // -1`` is ``-x`` wrapped at
        the type's width (``INT64_MIN // -1 == INT64_MIN``, numpy's result; ``sdiv`` would trap)
        and ``x % -1`` is 0. Unsigned types divide unsigned (``udiv``: floor is truncation). A
        constant divisor other than 0 and -1 (isl's bounds) needs no guard."""
        b = self.builder
        zero, one = ir.Constant(x.type, 0), ir.Constant(x.type, 1)
        guarded = not isinstance(y, ir.Constant) or y.constant in (0, -1)
        minus_one = None
        if guarded:
            by_zero = b.icmp_signed("==", y, zero)
            b.store(b.or_(b.load(self.zero_division, typ=_I1), by_zero), self.zero_division)
            unsafe = by_zero
            if not t.unsigned:
                minus_one = b.icmp_signed("==", y, ir.Constant(x.type, -1))
                unsafe = b.or_(by_zero, minus_one)
            y = b.select(unsafe, one, y)
        if t.unsigned:  # floor and truncation agree
            return b.udiv(x, y) if op in ("//", "tdiv") else b.urem(x, y)
        q, r = b.sdiv(x, y), b.srem(x, y)
        if minus_one is not None:
            q = b.select(minus_one, b.neg(x), q)
        if op == "tdiv":
            return q
        if op == "tmod":
            return r
        fix = b.and_(b.icmp_signed("!=", r, zero),
                     b.xor(b.icmp_signed("<", r, zero), b.icmp_signed("<", y, zero)))
        return b.sub(q, b.zext(fix, x.type)) if op == "//" else b.select(fix, b.add(r, y), r)


def llvm_ir(scop: Scop, loops: Node, function_name: str, *, parallel: bool | None = None,
            reassociate: bool = False) -> str:
    """Unoptimized LLVM IR text of the kernel function. Parallel loops start a thread team when
    ``parallel`` (default: when the OpenMP runtime is available), else they run sequentially.
    ``reassociate`` lets LLVM reorder the floating-point sums carried along innermost loops
    (partial sums in vector lanes, as numpy's own reductions and einsum do); by default they
    keep the program's order."""
    module = ir.Module(name=function_name)
    module.triple, module.data_layout = host_layout()
    emitter = _FunctionEmitter.kernel(module, scop, function_name,
                                      openmp_available() if parallel is None else parallel, reassociate)
    emitter.emit(loops)
    emitter.finish()
    return str(module)


_RUNTIME_SIGNATURES = {
    "GOMP_parallel": ir.FunctionType(ir.VoidType(), [_PTR, _PTR, _I32, _I32]),
    "GOMP_barrier": ir.FunctionType(ir.VoidType(), []),
    "omp_get_thread_num": ir.FunctionType(_I32, []),
    "omp_get_num_threads": ir.FunctionType(_I32, []),
}


def _runtime_function(module: ir.Module, name: str) -> ir.Function:
    """The libgomp entry point ``name`` (declared once per module)."""
    if name in module.globals:
        return module.globals[name]
    function = ir.Function(module, _RUNTIME_SIGNATURES[name], name=name)
    function.attributes.add("nounwind")
    return function


def _host_function_attributes(function: ir.Function) -> None:
    """``nounwind`` (the vectors' preferred width is set when the body is done:
    :func:`_prefer_vector_bits`)."""
    function.attributes.add("nounwind")


def _prefer_vector_bits(function: ir.Function, bits: int) -> None:
    """The vectorizers' preferred width in ``function``: without it LLVM takes 256 bits on
    AVX-512 hosts (a parallel region's trampoline lacked it, and the tiled gemm's loops inlined
    there were vectorized 4 doubles wide instead of 8)."""
    # llvmlite knows only enum attributes; string attributes go into the set as they are
    set.add(function.attributes, f'"prefer-vector-width"="{bits}"')


def _trampoline(module: ir.Module, region: ir.Function, frame: ir.LiteralStructType, bits: int) -> ir.Function:
    """``void f(void *data)`` for GOMP_parallel: unpacks the struct ``data`` and calls ``region``
    (inlined here: its loops are vectorized here, preferring ``bits``-wide vectors as it does)."""
    function = ir.Function(module, ir.FunctionType(ir.VoidType(), [_PTR]),
                           name=module.get_unique_name(f"{region.name}.entry"))
    function.linkage = "internal"
    _host_function_attributes(function)
    _prefer_vector_bits(function, bits)
    b = ir.IRBuilder(function.append_basic_block("entry"))
    data = function.args[0]
    args = [b.load(b.gep(data, [ir.Constant(_I32, 0), ir.Constant(_I32, k)], source_etype=frame, inbounds=True),
                   typ=element) for k, element in enumerate(frame.elements)]
    b.call(region, args)
    b.ret_void()
    return function


@lru_cache(maxsize=None)
def openmp_available() -> bool:
    """Load the OpenMP runtime libgomp for the JIT (once). When it cannot be loaded, warn once
    and return False: parallel loops then run sequentially."""
    _initialize()
    path = ctypes.util.find_library("gomp")
    try:
        if path is None:
            raise OSError("no libgomp found on the library path")
        llvm.load_library_permanently(path)
    except (OSError, RuntimeError) as exc:
        warnings.warn(f"polyopt: cannot load the OpenMP runtime libgomp ({exc}); parallel loops "
                      "will run sequentially", RuntimeWarning, stacklevel=2)
        return False
    return True


@lru_cache(maxsize=None)
def _widest_vector_bits() -> int:
    """The widest SIMD registers of the host CPU, in bits (AVX-512: 512, AVX: 256, else 128)."""
    _initialize()
    features = llvm.get_host_cpu_features()
    if features.get("avx512f"):
        return 512
    return 256 if features.get("avx") else 128


@lru_cache(maxsize=None)
def _initialize() -> None:
    """LLVM's native target, and the libraries JIT-compiled code calls: libm's math functions,
    and libgcc's half-precision conversions (``__truncsfhf2``, ``__extendhfsf2``: GCC 12 on),
    which LLVM calls for f16 on an x86 host without F16C (with it, they are instructions)."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    for name in ("m", "gcc_s"):
        path = ctypes.util.find_library(name)
        if path:
            llvm.load_library_permanently(path)


def _new_target_machine() -> llvm.TargetMachine:
    """A target machine for the host CPU (an execution engine takes ownership of its own)."""
    _initialize()
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(cpu=llvm.get_host_cpu_name(),
                                        features=llvm.get_host_cpu_features().flatten(),
                                        opt=3, jit=True)


@lru_cache(maxsize=None)
def host_layout() -> tuple[str, str]:
    """(triple, data layout) of the host, for the IR module header."""
    tm = _new_target_machine()
    return tm.triple, str(tm.target_data)


@dataclass
class NativeFunction:
    """A JIT-compiled kernel: keeps its execution engine alive while the function is in use."""

    engine: object
    address: int
    optimized_ir: str


#: LLVM's global context and command-line options belong to the whole process: one compilation
#: at a time (two Python threads may compile kernels at once; they take turns here).
_LLVM_LOCK = threading.Lock()


#: LLVM's loop access analysis widens the overlap check of an inner loop to the whole range of
#: the loop around it where that makes the check loop-invariant (``-hoist-runtime-checks``, on
#: by default since LLVM 18). For an in-place update of a tile's rows (floyd-warshall's
#: ``path[i][j]`` against row ``path[k]`` and ``path[i][k]``, lu's rows against its pivot row),
#: the widened ranges span all of the tile's rows and always overlap, so the vector loop never
#: runs; per-row checks pass on all rows but one. Off for our pipeline (docs/performance.md,
#: "LLVM's hoisted overlap checks"). Older LLVMs lack the option (and the widening): an unknown
#: option would end the process, so it is only set where it exists.
_HOIST_RUNTIME_CHECKS = llvm.llvm_version_info >= (18,)


@contextmanager
def _pipeline_options():
    """LLVM's process-wide options for our module's optimization, restored to LLVM's defaults
    right after, so other llvmlite users in the process (numba) compile as they expect:

    - ``-force-ordered-reductions``: in-order floating-point reductions may be vectorized (their
      adds keep their order); LLVM enables that only for targets with in-order reduction
      instructions unless asked;
    - ``-hoist-runtime-checks=false``: see :data:`_HOIST_RUNTIME_CHECKS`."""
    llvm.set_option("polyopt", "-force-ordered-reductions=true")
    if _HOIST_RUNTIME_CHECKS:
        llvm.set_option("polyopt", "-hoist-runtime-checks=false")
    try:
        yield
    finally:
        llvm.set_option("polyopt", "-force-ordered-reductions=false")
        if _HOIST_RUNTIME_CHECKS:
            llvm.set_option("polyopt", "-hoist-runtime-checks=true")


#: The optimization levels of :func:`jit_compile` (LLVM's -O0 to -O3).
LEVELS = (0, 1, 2, 3)


def jit_compile(ir_text: str, function_name: str,
                object_sink: Callable[[bytes], None] | None = None, level: int = 3) -> NativeFunction:
    """Verify, optimize and JIT-compile ``ir_text``: LLVM's -O``level`` pass pipeline, with the
    loop and SLP vectorizers and the unroller on from level 2 (level 1: scalar code for a
    fraction of the compile time, for kernels that run too briefly to gain from vectors), and
    the -O3 code generator. ``object_sink`` receives the object code MCJIT emits (llvmlite's object
    cache ``notify`` hook), for :func:`jit_load` in a later process (polyopt/targets/disk_cache.py)."""
    with _LLVM_LOCK:
        tm = _new_target_machine()
        module = llvm.parse_assembly(ir_text)
        module.verify()
        options = llvm.create_pipeline_tuning_options(speed_level=level)
        options.loop_vectorization = level >= 2
        options.slp_vectorization = level >= 2
        options.loop_unrolling = level >= 2
        builder = llvm.create_pass_builder(tm, options)
        with _pipeline_options():
            builder.getModulePassManager().run(module, builder)
        engine = llvm.create_mcjit_compiler(module, tm)
        if object_sink is not None:
            engine.set_object_cache(notify_func=lambda _module, buffer: object_sink(bytes(buffer)))
        engine.finalize_object()
        return NativeFunction(engine, engine.get_function_address(function_name), str(module))


def jit_load(object_code: bytes, function_name: str, optimized_ir: str = "") -> NativeFunction:
    """A :class:`NativeFunction` from object code that :func:`jit_compile` emitted (its
    ``object_sink``) in this or another process, with no optimizer and no code generator: a fresh
    MCJIT engine gets an empty module of the host's triple whose object the cache hook supplies.
    The object links as a compiled one does: its external symbols (libgomp's ``GOMP_*``, libm)
    resolve against the libraries loaded for the process (:func:`openmp_available`,
    ``_initialize``); the thread trampolines are internal to the object. Raises RuntimeError
    where the engine finds no ``function_name`` in it."""
    openmp_available()  # loads libgomp (and libm) before the object's symbols are resolved
    with _LLVM_LOCK:
        module = llvm.parse_assembly('target triple = "{}"\ntarget datalayout = "{}"\n'.format(*host_layout()))
        engine = llvm.create_mcjit_compiler(module, _new_target_machine())
        engine.set_object_cache(getbuffer_func=lambda _module: object_code)
        engine.finalize_object()
        address = engine.get_function_address(function_name)
        if not address:
            raise RuntimeError(f"cached object code has no function {function_name!r}")
        return NativeFunction(engine, address, optimized_ir)
