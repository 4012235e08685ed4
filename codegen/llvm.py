"""LLVM IR for a loop AST (llvmlite), optimized at -O3 for the host CPU and JIT-compiled.

Loop iterators live in stack slots that LLVM's mem2reg promotes; array arguments are ``noalias``
flat pointers indexed row-major with strides computed once from the parameters. Floating-point
multiply-adds may be contracted into FMAs (as gcc does by default); nothing else is reassociated.
"""
from __future__ import annotations

import ctypes
import ctypes.util
from dataclasses import dataclass
from functools import lru_cache

import llvmlite.binding as llvm
import llvmlite.ir as ir

from polyopt import expr as E
from polyopt.affine import extent_expr
from polyopt.codegen.ast import Block, For, If, Node, Run, abi_arguments, instantiate
from polyopt.errors import CodegenError
from polyopt.scop import Scop
from polyopt.types import DType

_I1, _I32, _I64 = ir.IntType(1), ir.IntType(32), ir.IntType(64)
_PTR = ir.PointerType()
_FLOAT_FLAGS = ("contract",)
_INTRINSICS = {"sqrt": "llvm.sqrt", "exp": "llvm.exp", "log": "llvm.log", "sin": "llvm.sin",
               "cos": "llvm.cos", "pow": "llvm.pow", "floor": "llvm.floor", "abs": "llvm.fabs"}
_FCMP = {"<": "<", "<=": "<=", ">": ">", ">=": ">=", "==": "==", "!=": "!="}


def llvm_type(dtype: DType) -> ir.Type:
    return {"f32": ir.FloatType(), "f64": ir.DoubleType(), "i32": _I32, "i64": _I64,
            "bool": _I1}[dtype.name]


class _FunctionEmitter:
    """Emits one kernel function; ``values`` maps parameter/scalar/iterator names to IR."""

    def __init__(self, module: ir.Module, scop: Scop, name: str):
        self.module, self.scop = module, scop
        args = abi_arguments(scop)
        types = [_PTR if a.kind == "array" else llvm_type(a.dtype) for a in args]
        self.function = ir.Function(module, ir.FunctionType(ir.VoidType(), types), name=name)
        self.function.attributes.add("nounwind")
        entry = self.function.append_basic_block("entry")
        self.builder = ir.IRBuilder(entry)
        self.values: dict[str, ir.Value] = {}
        self.pointers: dict[str, ir.Value] = {}
        self.loop_slots: dict[str, ir.Value] = {}
        for arg, value in zip(args, self.function.args):
            value.name = arg.name
            if arg.kind == "array":
                value.add_attribute("noalias")
                self.pointers[arg.name] = value
            else:
                self.values[arg.name] = value
        self.strides = {name: self._strides(array.shape) for name, array in scop.arrays.items()
                        if not array.local}
        for array in scop.arrays.values():
            if array.local:
                slot = self.builder.alloca(llvm_type(array.dtype), name=array.name)
                self.builder.store(ir.Constant(llvm_type(array.dtype), 0), slot)
                self.pointers[array.name] = slot

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

    # ----- statements -----------------------------------------------------------------------
    def emit(self, node: Node) -> None:
        b = self.builder
        if isinstance(node, Block):
            for child in node.body:
                self.emit(child)
        elif isinstance(node, For):
            with b.goto_block(self.function.entry_basic_block):
                b.position_at_start(self.function.entry_basic_block)
                slot = b.alloca(_I64, name=node.var)
            self.loop_slots[node.var] = slot
            b.store(self.expr(node.init), slot)
            header = self.function.append_basic_block(f"{node.var}.header")
            body = self.function.append_basic_block(f"{node.var}.body")
            done = self.function.append_basic_block(f"{node.var}.done")
            b.branch(header)
            b.position_at_end(header)
            b.cbranch(self.expr(node.cond), body, done)
            b.position_at_end(body)
            self.emit(node.body)
            value = b.load(slot, typ=_I64)
            b.store(b.add(value, ir.Constant(_I64, node.step), flags=("nsw",)), slot)
            b.branch(header)
            b.position_at_end(done)
            del self.loop_slots[node.var]
        elif isinstance(node, If):
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
        else:
            target, value = instantiate(self.scop.statement(node.statement), node.args)
            result = self.expr(value)
            b.store(result, self.address(target), align=target.dtype.bits // 8)

    def address(self, access: E.Access) -> ir.Value:
        base = self.pointers[access.array]
        if not access.indices:
            return base
        offset = None
        for index, stride in zip(access.indices, self.strides[access.array]):
            term = self.builder.mul(self.expr(index), stride, flags=("nsw",))
            offset = term if offset is None else self.builder.add(offset, term, flags=("nsw",))
        return self.builder.gep(base, [offset], inbounds=True, source_etype=llvm_type(access.dtype))

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
        if isinstance(e, E.Access):
            return b.load(self.address(e), typ=llvm_type(e.dtype), align=e.dtype.bits // 8)
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
        b, to = self.builder, llvm_type(target)
        if source.name == "bool":
            return b.uitofp(value, to) if target.is_float else b.zext(value, to)
        if source.is_float and target.is_float:
            return b.fpext(value, to) if target.bits > source.bits else b.fptrunc(value, to)
        if source.is_float:
            return b.fptosi(value, to)
        if target.is_float:
            return b.sitofp(value, to)
        if target.bits == source.bits:
            return value
        return b.sext(value, to) if target.bits > source.bits else b.trunc(value, to)

    def call(self, e: E.Call) -> ir.Value:
        args = [self.expr(a) for a in e.args]
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
                    result = b.fmul(result, base, flags=_FLOAT_FLAGS)
                return result
            return b.call(self.math_function("pow", e.dtype), [self.expr(e.lhs), self.expr(e.rhs)])
        if op in ("and", "or"):  # short-circuit, as in Python
            false, true = E.Const(0, e.dtype), E.Const(1, e.dtype)
            return self.select(e.lhs, e.rhs, false) if op == "and" else self.select(e.lhs, true, e.rhs)
        x, y = self.expr(e.lhs), self.expr(e.rhs)
        if op in E.COMPARISON_OPS:
            if t.is_float:
                return b.fcmp_unordered(op, x, y) if op == "!=" else b.fcmp_ordered(op, x, y)
            return b.icmp_signed(op, x, y)
        if op in ("min", "max"):  # Python: min(a, b) = b if b < a else a
            better = (b.fcmp_ordered if t.is_float else b.icmp_signed)("<" if op == "min" else ">", y, x)
            return b.select(better, y, x)
        return self._float_arith(op, x, y, t) if t.is_float else self._int_arith(op, x, y)

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
        b, f = self.builder, _FLOAT_FLAGS
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

    def _int_arith(self, op: str, x, y) -> ir.Value:
        b = self.builder
        simple = {"+": b.add, "-": b.sub, "*": b.mul, "tdiv": b.sdiv, "tmod": b.srem}
        if op in simple:
            return simple[op](x, y)
        zero = ir.Constant(x.type, 0)
        if op == "//":
            q, r = b.sdiv(x, y), b.srem(x, y)
            fix = b.and_(b.icmp_signed("!=", r, zero),
                         b.xor(b.icmp_signed("<", r, zero), b.icmp_signed("<", y, zero)))
            return b.sub(q, b.zext(fix, x.type))
        if op == "%":
            r = b.srem(x, y)
            fix = b.and_(b.icmp_signed("!=", r, zero),
                         b.xor(b.icmp_signed("<", r, zero), b.icmp_signed("<", y, zero)))
            return b.select(fix, b.add(r, y), r)
        raise CodegenError(f"unsupported integer operator {op}")


def llvm_ir(scop: Scop, loops: Node, function_name: str) -> str:
    """Unoptimized LLVM IR text of the kernel function."""
    module = ir.Module(name=function_name)
    module.triple, module.data_layout = _host_layout()
    emitter = _FunctionEmitter(module, scop, function_name)
    emitter.emit(loops)
    emitter.builder.ret_void()
    return str(module)


@lru_cache(maxsize=None)
def _initialize() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    libm = ctypes.util.find_library("m")
    if libm:
        llvm.load_library_permanently(libm)


def _new_target_machine() -> llvm.TargetMachine:
    """A target machine for the host CPU (an execution engine takes ownership of its own)."""
    _initialize()
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(cpu=llvm.get_host_cpu_name(),
                                        features=llvm.get_host_cpu_features().flatten(),
                                        opt=3, jit=True)


@lru_cache(maxsize=None)
def _host_layout() -> tuple[str, str]:
    """(triple, data layout) of the host, for the IR module header."""
    tm = _new_target_machine()
    return tm.triple, str(tm.target_data)


@dataclass
class NativeFunction:
    """A JIT-compiled kernel: keeps its execution engine alive while the function is in use."""

    engine: object
    address: int
    optimized_ir: str


def jit_compile(ir_text: str, function_name: str) -> NativeFunction:
    """Verify, optimize (-O3 pipeline with vectorizers on) and JIT-compile ``ir_text``."""
    tm = _new_target_machine()
    module = llvm.parse_assembly(ir_text)
    module.verify()
    options = llvm.create_pipeline_tuning_options(speed_level=3)
    options.loop_vectorization = True
    options.slp_vectorization = True
    options.loop_unrolling = True
    builder = llvm.create_pass_builder(tm, options)
    builder.getModulePassManager().run(module, builder)
    engine = llvm.create_mcjit_compiler(module, tm)
    engine.finalize_object()
    return NativeFunction(engine, engine.get_function_address(function_name), str(module))
