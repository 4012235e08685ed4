"""Unrolled statements read back as loops, so that the loop-AST check reads them once, not once per copy.

A register tile reaches the loop AST unrolled: a block of runs of one statement whose
arguments' integer constants step evenly from run to run -- ``S1(c0 + c4, c1 + 0, ...)``,
``S1(c0 + c4, c1 + 1, ...)``, ... (32 of them in a block of gemm's loops). Consecutive runs of
a block that differ only in such constants are one *template* over the run's position ``k`` in
the block: each constant ``v`` becomes ``v0 + d * k``. The template, read once over the
positions ``start <= k < stop``, runs exactly the union of what the runs run, at the same times
(a run's position is its time at the block's position), so the check
(:mod:`polyopt.codegen.ast_check`) reads it as a loop over those positions and decides the
same: it is a reading of the runs, not an assumption about them. Only runs are read this way:
templates of larger subtrees (guards around runs) cost more to find than they saved, and
their constants' steps of more than one left the check with existential variables to project.
"""
from __future__ import annotations

from dataclasses import fields, is_dataclass, replace
from typing import Any, Hashable, Iterator

from polyopt.analysis import expr as E
from polyopt.codegen.loop_nodes import Node, Run


def rolled_runs(body: tuple[Node, ...], position: E.Var) -> list[tuple[int, int, Node]]:
    """``body`` (a block's children) as consecutive groups ``(start, stop, node)``: where the
    children ``start .. stop - 1`` (at least two) are runs of one statement whose arguments
    differ only in integer constants that step evenly with their position, ``node`` is their
    template over ``position`` (standing for the position); elsewhere ``stop == start + 1``
    and ``node`` is the child itself."""
    shapes = [_shape(child) if isinstance(child, Run) else None for child in body]
    groups: list[tuple[int, int, Node]] = []
    start = 0
    while start < len(body):
        stop = start + 1
        if shapes[start] is not None and stop < len(body) and shapes[stop] is not None \
                and shapes[stop][0] == shapes[start][0]:
            key, first = shapes[start]
            steps = [b - a for a, b in zip(first, shapes[stop][1])]
            while stop < len(body) and shapes[stop] is not None and shapes[stop][0] == key and all(
                    value == a + d * (stop - start) for value, a, d in zip(shapes[stop][1], first, steps)):
                stop += 1
            affine = iter([(a - d * start, d) for a, d in zip(first, steps)])
            groups.append((start, stop, _template(body[start], affine, position)))
        else:
            groups.append((start, stop, body[start]))
        start = stop
    return groups


def _is_integer_constant(node: Any) -> bool:
    return isinstance(node, E.Const) and type(node.value) is int


def _shape(node: Any) -> tuple[Hashable, list[int]]:
    """``node``'s structure with its integer constants left out, and those constants in the
    order :func:`_template` meets them."""
    constants: list[int] = []

    def key(obj: Any) -> Hashable:
        if _is_integer_constant(obj):
            constants.append(obj.value)
            return ("const", obj.dtype, obj.weak)
        if is_dataclass(obj):
            return (type(obj).__name__,) + tuple(key(getattr(obj, f.name)) for f in fields(obj))
        if isinstance(obj, tuple):
            return ("tuple",) + tuple(key(item) for item in obj)
        return obj

    return key(node), constants


def _template(node: Any, affine: Iterator[tuple[int, int]], position: E.Var) -> Any:
    """``node`` with each integer constant replaced by the next ``(base, step)`` of ``affine``
    as ``base + step * position`` (the constant itself where the step is 0)."""
    if _is_integer_constant(node):
        base, step = next(affine)
        if step == 0:
            return node
        scaled = E.Binary("*", E.Const(step, node.dtype), position, node.dtype)
        return E.Binary("+", E.Const(base, node.dtype), scaled, node.dtype)
    if is_dataclass(node):
        return replace(node, **{f.name: _template(getattr(node, f.name), affine, position) for f in fields(node)})
    if isinstance(node, tuple):
        return tuple(_template(item, affine, position) for item in node)
    return node


__all__ = ["rolled_runs"]
