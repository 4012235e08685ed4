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
            return b.select(self.expr(e.cond), self.expr(e.then), self.expr(e.otherwise))
        if isinstance(e, E.Call):
            return self.call(e)
        if isinstance(e, E.Binary):
            return self.binary(e)
        raise CodegenError(f"cannot emit {e!r}")

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
        t = llvm_type(dtype)
        suffix = "f32" if dtype.name == "f32" else "f64"
        name = f"{_INTRINSICS[func]}.{suffix}" if func in _INTRINSICS else (
            func + "f" if dtype.name == "f32" else func)
        if name in self.module.globals:
            return self.module.globals[name]
        arity = E.MATH_FUNCTIONS[func]
        return ir.Function(self.module, ir.FunctionType(t, [t] * arity), name=name)

    def binary(self, e: E.Binary) -> ir.Value:
        b, op, t = self.builder, e.op, e.lhs.dtype
        if op == "**":
            exponent = e.rhs.value if isinstance(e.rhs, E.Const) else None
            if exponent is not None and float(exponent).is_integer() and 0 <= exponent <= 4:
                base = self.expr(e.lhs)
                result = ir.Constant(llvm_type(e.dtype), 1.0 if e.dtype.is_float else 1)
                for _ in range(int(exponent)):
                    result = b.fmul(result, base, flags=_FLOAT_FLAGS) if e.dtype.is_float else b.mul(result, base)
                return result
            if not e.dtype.is_float:
                raise CodegenError("integer ** needs a literal exponent between 0 and 4")
            return b.call(self.math_function("pow", e.dtype), [self.expr(e.lhs), self.expr(e.rhs)])
        x, y = self.expr(e.lhs), self.expr(e.rhs)
        if op in ("and", "or"):
            return b.and_(x, y) if op == "and" else b.or_(x, y)
        if op in E.COMPARISON_OPS:
            if t.is_float:
                return b.fcmp_unordered(op, x, y) if op == "!=" else b.fcmp_ordered(op, x, y)
            return b.icmp_signed(op, x, y)
        if op in ("min", "max"):  # Python: min(a, b) = b if b < a else a
            better = (b.fcmp_ordered if t.is_float else b.icmp_signed)("<" if op == "min" else ">", y, x)
            return b.select(better, y, x)
        return self._float_arith(op, x, y, t) if t.is_float else self._int_arith(op, x, y)

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
        if op == "//":
            return b.call(self.math_function("floor", t), [b.fdiv(x, y)])
        if op == "%":  # Python: the result takes the sign of the divisor
            r = b.frem(x, y)
            zero = ir.Constant(x.type, 0.0)
            fix = b.and_(b.fcmp_ordered("!=", r, zero),
                         b.xor(b.fcmp_ordered("<", r, zero), b.fcmp_ordered("<", y, zero)))
            return b.select(fix, b.fadd(r, y), r)
        raise CodegenError(f"unsupported floating-point operator {op}")

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
    module.triple = _target_machine().triple
    module.data_layout = str(_target_machine().target_data)
    emitter = _FunctionEmitter(module, scop, function_name)
    emitter.emit(loops)
    emitter.builder.ret_void()
    return str(module)


@lru_cache(maxsize=None)
def _target_machine() -> llvm.TargetMachine:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    libm = ctypes.util.find_library("m")
    if libm:
        llvm.load_library_permanently(libm)
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(cpu=llvm.get_host_cpu_name(),
                                        features=llvm.get_host_cpu_features().flatten(),
                                        opt=3, jit=True)


@dataclass
class NativeFunction:
    """A JIT-compiled kernel: keeps its execution engine alive while the function is in use."""

    engine: object
    address: int
    optimized_ir: str


def jit_compile(ir_text: str, function_name: str) -> NativeFunction:
    """Verify, optimize (-O3 pipeline with vectorizers on) and JIT-compile ``ir_text``."""
    tm = _target_machine()
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
