"""The static control part (Scop): what every frontend produces and every later pass reads.

A Scop is parameters with their context, arrays, statements (iteration domain, body, access
relations) and the original schedule tree. It is immutable; passes return new values.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import cached_property, lru_cache

import islpy as isl

from polyopt.analysis.affine import extent_isl
from polyopt.analysis.expr import Access, Expr
from polyopt.errors import FrontendError
from polyopt.islutil import coalesced, fresh_stem
from polyopt.types import DType


@dataclass(frozen=True)
class Argument:
    """One argument of the compiled kernel, in call order.

    ``kind`` is "array" (a numpy array), "scalar" (a data value) or "param" (an integer size
    parameter that cannot be inferred from array shapes).
    """

    name: str
    kind: str
    dtype: DType

    def __post_init__(self):
        """Half types are for arrays: the native calls (ctypes, CUDA launches) pass no half
        scalars, and an f32 scalar computes in f32 with half arrays as numpy does."""
        if self.kind == "scalar" and self.dtype.is_half:
            raise FrontendError(f"scalar argument '{self.name}' cannot be of half type {self.dtype}: "
                                "declare it f32 (half types are for arrays)")


@dataclass(frozen=True)
class Array:
    """An array: element type and extents as affine text (Python syntax) over the parameters.

    ``local`` arrays (kernel-local scalar temporaries, 0-d) are allocated by the generated code.
    ``temporary`` arrays (a kernel-local scalar expanded along loops, see
    :mod:`polyopt.transform.scalar_expansion`) are no argument of the kernel: the runtime
    allocates them for each call and passes them after the arguments
    (:func:`~polyopt.codegen.ast.abi_arguments`).
    """

    name: str
    dtype: DType
    shape: tuple[str, ...]
    local: bool = False
    temporary: bool = False


@dataclass(frozen=True, eq=False)
class AccessRef:
    """One array reference of a statement: ``relation`` maps statement instances to elements."""

    ref_id: str
    array: str
    relation: isl.Map
    is_write: bool


@dataclass(frozen=True, eq=False)
class Statement:
    """An assignment ``target = value`` executed once for every point of ``domain``."""

    name: str
    iterators: tuple[str, ...]
    domain: isl.Set
    target: Access
    value: Expr
    accesses: tuple[AccessRef, ...]
    line: int | None = None
    text: str = ""

    @property
    def reads(self) -> tuple[AccessRef, ...]:
        return tuple(a for a in self.accesses if not a.is_write)

    @property
    def writes(self) -> tuple[AccessRef, ...]:
        return tuple(a for a in self.accesses if a.is_write)


@dataclass(frozen=True, eq=False)
class Scop:
    """A static control part. ``schedule`` is the original (textual) execution order.

    ``origin``: the Scop this one was made from by a Scop-level transformation that keeps its
    statement instances and what each read reads (scalar expansion,
    :mod:`polyopt.transform.scalar_expansion`); None for a frontend's Scop."""

    name: str
    params: tuple[str, ...]
    context: isl.Set
    arrays: dict[str, Array]
    statements: tuple[Statement, ...]
    schedule: isl.Schedule
    arguments: tuple[Argument, ...]
    source: str = field(default="", repr=False)
    origin: "Scop | None" = field(default=None, repr=False)

    # ----- union views used by the analyses ----------------------------------------------------
    @cached_property
    def domain(self) -> isl.UnionSet:
        """All statement instances, restricted to the context."""
        result = isl.UnionSet.empty(self.context.get_space())
        for stmt in self.statements:
            result = result.union(isl.UnionSet.from_set(stmt.domain))
        return result.intersect_params(self.context)

    def _union(self, refs) -> isl.UnionMap:
        result = isl.UnionMap.empty(self.context.get_space())
        for ref in refs:
            result = result.union(isl.UnionMap.from_map(ref.relation))
        return result

    @cached_property
    def reads(self) -> isl.UnionMap:
        return self._union(r for s in self.statements for r in s.reads)

    @cached_property
    def writes(self) -> isl.UnionMap:
        return self._union(w for s in self.statements for w in s.writes)

    def statement(self, name: str) -> Statement:
        for stmt in self.statements:
            if stmt.name == name:
                return stmt
        raise KeyError(f"no statement {name!r} in scop {self.name!r}")

    @cached_property
    def in_bounds_params(self) -> isl.Set:
        """Parameter values for which every access stays inside its array's extents."""
        unsafe = isl.Set.empty(self.context.get_space())
        for stmt in self.statements:
            for ref in stmt.accesses:
                array = self.arrays[ref.array]
                if not array.shape:
                    continue
                touched = ref.relation.intersect_domain(stmt.domain).range()
                outside = touched.subtract(self.array_bounds(array))
                unsafe = unsafe.union(outside.params())
        return coalesced(self.context.subtract(unsafe))

    def array_bounds(self, array: Array) -> isl.Set:
        """``{ A[d0, ...] : 0 <= dk < extent_k }`` as an isl set."""
        stem = fresh_stem("d", self.params)
        dims = [f"{stem}{k}" for k in range(len(array.shape))]
        cons = " and ".join(f"0 <= {d} < {extent_isl(e, self.params)}"
                            for d, e in zip(dims, array.shape)) or "true"
        return isl.Set(f"[{', '.join(self.params)}] -> {{ {array.name}[{', '.join(dims)}] : {cons} }}")

    # ----- printing ------------------------------------------------------------------------------
    def __str__(self) -> str:
        from polyopt.analysis.expr import to_source
        lines = [f"Scop {self.name}",
                 f"  parameters: {', '.join(self.params) or '(none)'}",
                 f"  context:    {self.context}",
                 "  arrays:"]
        for a in self.arrays.values():
            shape = ", ".join(a.shape)
            kind = "  (local)" if a.local else "  (temporary)" if a.temporary else ""
            lines.append(f"    {a.name}: {a.dtype}[{shape}]" + kind)
        lines.append("  statements:")
        for s in self.statements:
            where = f"  (line {s.line})" if s.line else ""
            lines.append(f"    {s.name}: {to_source(s.target)} = {to_source(s.value)}{where}")
            lines.append(f"      domain: {s.domain}")
            for ref in s.accesses:
                lines.append(f"      {'write' if ref.is_write else 'read '}: {ref.relation}")
        lines.append(f"  schedule: {self.schedule}")
        return "\n".join(lines)


@lru_cache(maxsize=1024)
def scop_fingerprint(scop: Scop) -> str:
    """A SHA-256 of everything in ``scop`` that the generated code depends on: name,
    parameters and context, arrays (element types, extents), statements (domains, typed
    expression trees of targets and values, access relations), the original schedule and the
    arguments. Source positions are left out. Cached per Scop object (Scops are immutable)."""
    parts = [scop.name, repr(scop.params), str(scop.context), repr(scop.arguments), str(scop.schedule)]
    parts += [repr(array) for array in scop.arrays.values()]
    for stmt in scop.statements:
        parts += [stmt.name, repr(stmt.iterators), str(stmt.domain), repr(stmt.target), repr(stmt.value)]
        parts += [f"{ref.ref_id} {ref.array} {ref.is_write} {ref.relation}" for ref in stmt.accesses]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()
