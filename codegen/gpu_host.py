"""Statements the GPU program's host runs itself: setup scalars such as deriche's
``k = (1.0 - exp(-alpha)) * ...; a1 = k`` would otherwise each be a one-thread kernel launch.

A local scalar is a *host scalar* (:func:`host_scalars`) when every statement writing it writes
nothing else and reads no array, only size parameters, scalar arguments, iterators and other
host scalars; the mapping (:mod:`polyopt.codegen.gpu_mapping`) runs such a statement on the host
where each of its instances is alone at a leaf of the tree outside every kernel (one instance
per iteration of the host loops around it), and keeps the scalar a host scalar only where every
writer is so placed. Kernels reading a host scalar take its current value as a trailing
argument, after the host loop variables. The host computes with the generated code's typing:
the Python launcher through :func:`polyopt.analysis.evaluate.evaluate` (numpy scalars of the
statement's types), the nvcc host wrapper in C with the same expressions in the same order; math
functions are the host's libm (numpy's in Python), within an ulp or so of CUDA's.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from polyopt.analysis.evaluate import evaluate
from polyopt.analysis.scop import Scop, Statement
from polyopt.codegen.kernel_body import Assign, BodyNode, assignments
from polyopt.codegen.loop_nodes import Block, If, Node


@dataclass(frozen=True)
class HostStatement:
    """One instance of ``statement`` (it writes a host scalar) run by the host program between
    launches: ``body`` is its loop AST (guards and the statement, no loop), in terms of the
    size parameters and the host loop variables."""

    statement: str
    body: Node


def writers(scop: Scop) -> dict[str, list[Statement]]:
    """The statements writing each array or scalar, by name."""
    found: dict[str, list[Statement]] = {}
    for stmt in scop.statements:
        for ref in stmt.writes:
            found.setdefault(ref.array, []).append(stmt)
    return found


def host_scalars(scop: Scop, allowed: frozenset[str] | None = None) -> frozenset[str]:
    """The local scalars (among ``allowed``, default all) whose every writer writes only that
    scalar and reads only other such scalars (besides parameters, scalar arguments and
    iterators); half types are left to the device (the host has no ``__half`` arithmetic)."""
    by_array = writers(scop)
    found = {name for name, array in scop.arrays.items()
             if array.local and not array.shape and not array.dtype.is_half
             and (allowed is None or name in allowed)}
    while True:
        kept = {name for name in found
                if all(len(s.writes) == 1 and all(r.array in found for r in s.reads)
                       for s in by_array.get(name, ()))}
        if kept == found:
            return frozenset(found)
        found = kept


def host_storage(scop: Scop, scalars) -> dict[str, np.ndarray]:
    """Zero-initialized 0-d arrays holding the host scalars ``scalars`` (their value is 0 until
    a statement writes them, as a local scalar's is in the interpreter)."""
    return {name: np.zeros((), scop.arrays[name].dtype.numpy) for name in scalars}


def run_host_statement(scop: Scop, step: HostStatement, env: dict, storage: dict[str, np.ndarray]) -> None:
    """Run ``step`` in Python: ``env`` binds the parameters, the scalar arguments (typed) and
    the host loop variables; the host scalars live in ``storage`` (:func:`host_storage`)."""

    def walk(node: BodyNode) -> None:
        if isinstance(node, Block):
            for child in node.body:
                walk(child)
        elif isinstance(node, If):
            if evaluate(node.cond, env, storage):
                walk(node.then)
            elif node.otherwise is not None:
                walk(node.otherwise)
        elif isinstance(node, Assign):
            storage[node.target.array][()] = evaluate(node.value, env, storage)
        else:
            raise TypeError(f"host statement {step.statement}: unexpected {node!r}")

    with np.errstate(all="ignore"):
        walk(assignments(scop, step.body))


def host_values(kernel_scalars: tuple[str, ...], storage: dict[str, np.ndarray]) -> tuple:
    """The current values of the host scalars a kernel takes (numpy scalars of their types)."""
    return tuple(storage[name][()] for name in kernel_scalars)


def reads_of(scop: Scop, statements) -> set[str]:
    """The arrays and scalars the named statements read."""
    return {ref.array for name in statements for ref in scop.statement(name).reads}

