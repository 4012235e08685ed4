"""Kernels of the general GPU mapping that are contractions run as contraction kernels.

PolyBench's correlation and covariance, or a batched matmul followed by a reduction, are no
contraction and no program of them (:mod:`polyopt.targets.contraction`): the CUDA target maps
them the general way (:func:`~polyopt.codegen.gpu_mapping.map_to_gpu`). One of their kernels
may still be a product (``corr[i][j] += data[k][i] * data[k][j]``) that the batched-GEMM
kernels of :mod:`polyopt.codegen.cuda_contraction` run much faster than the general kernel.
After the general mapping has been chosen and verified, :func:`substitute_contractions` runs
such kernels as contraction kernels: a :class:`~polyopt.codegen.gpu_mapping.Kernel` step of
the host program's top level (not in a host loop, not a one-block kernel, without host loop
variables or host scalars, not a kernel whose sums are split over a warp) whose instances are
all the instances of its statements (:func:`whole_statements`) and whose statements' Scop
(:func:`~polyopt.analysis.contraction.nest_scop`) is a contraction with an engine in the plan's
precision (:func:`~polyopt.targets.contraction.contraction_engine`), once the verifier accepts
the contraction's order on that Scop (:func:`kernel_contraction`).

Why this is sound. The general host program runs its top-level steps one after the other, each
launch whole before the next starts; the substituted kernel runs in its place, between the same
launches, and runs exactly the instances the general kernel ran (all its statements' instances,
nothing else). So every dependence between one of its instances and an instance of another step
keeps its order (before or after the launch, as before), and the only dependences whose order
can change are those among the kernel's own statements: :func:`kernel_contraction` checks
exactly those, verifying the contraction kernel's tree (one coordinate per output index, in each
thread the init, the K loops in order, the epilogue:
:func:`~polyopt.transform.contraction_tree.coordinate_tree`) on the Scop of those statements,
as :func:`~polyopt.targets.contraction.contraction_plan` does for a whole contraction. In that
Scop an array another step writes is read-only (the contraction's operands may not be written
by its own statements, :func:`~polyopt.analysis.contraction.find_contraction`), as it is while
the kernel runs.

The translation unit is the general one with the contraction kernels appended
(:func:`~polyopt.codegen.cuda_contraction.contraction_kernel_text`: their helpers once, then per
substituted kernel its tile shapes, named ``<kernel>_c``, ``<kernel>_c_1``, ...). The general
kernel stays in the unit, and the nvcc ``extern "C"`` host function still launches it: that
host function is correct but does not get the faster kernel; the CuPy launches
(:func:`polyopt.targets.cuda._launch`) launch the contraction kernel with
:func:`polyopt.targets.contraction.launch`, its tile chosen per launch.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from functools import reduce

import islpy as isl

from polyopt.analysis.contraction import Contraction, nest_scop
from polyopt.analysis.scop import Scop
from polyopt.codegen.ast import abi_arguments
from polyopt.codegen.contraction_text import half_store
from polyopt.codegen.cuda import CudaSource
from polyopt.codegen.cuda_contraction import ContractionSource, Variant, contraction_kernel_text
from polyopt.codegen.gpu_mapping import GpuProgram, Kernel, kernel_mark
from polyopt.targets.contraction import describe_tiles, mapped_contraction, tile_kernels
from polyopt.transform.schedule import Schedule


@dataclass(frozen=True)
class SubstitutedSource(CudaSource):
    """The source of a general mapping some of whose kernels run as contraction kernels:
    ``contractions`` maps a general kernel's name to the :class:`ContractionSource` launched in
    its place (its ``program.tree``: the contraction kernel's verified tree on the Scop of the
    kernel's statements; its ``source``: this whole unit). ``program`` is still the general
    mapping (its tree the program's verified tree) and the general kernels are all in the
    unit, which the nvcc host function launches (module docstring)."""

    contractions: dict[str, ContractionSource] = field(default_factory=dict)


@dataclass(frozen=True)
class KernelContraction:
    """What :func:`kernel_contraction` finds for one general kernel: the Scop of its statements,
    the contraction it computes, the engine, the contraction kernel's verified mapping and the
    name of its kernels (``name``, ``name_1``... per tile shape)."""

    kernel: Kernel
    scop: Scop
    contraction: Contraction
    engine: str
    program: GpuProgram
    name: str


def candidate_kernels(program: GpuProgram, source: CudaSource) -> list[Kernel]:
    """The kernels that may run as contraction kernels: :class:`Kernel` steps of the host
    program's top level with no host loop variables or host scalars, whose sums are not split
    over a warp (their launch shape has one thread per coordinate)."""
    return [step for step in program.host
            if isinstance(step, Kernel) and not step.host_vars and not step.host_scalars
            and source.shapes[step.name].parts == 1]


def statements_scop(scop: Scop, kernel: Kernel) -> Scop:
    """The Scop of ``kernel``'s statements (:func:`~polyopt.analysis.contraction.nest_scop`:
    their instances, the original order among them, the whole Scop's arrays and arguments)."""
    domains = [isl.UnionSet.from_set(scop.statement(name).domain) for name in sorted(kernel.statements)]
    return nest_scop(scop, reduce(isl.UnionSet.union, domains))


def whole_statements(tree: isl.Schedule, kernel: Kernel, statements: Scop) -> bool:
    """Whether ``kernel``'s instances in the mapped ``tree`` are all the instances of its
    statements (``statements``: their Scop), not a part of them (a kernel holding part of a
    statement's instances leaves the rest to other launches)."""
    found, mark = [], kernel_mark(kernel.name).get_name()

    def look(node: isl.ScheduleNode) -> bool:
        if node.get_type() == isl.schedule_node_type.mark and node.mark_get_id().get_name() == mark:
            found.append(node.get_domain())
        return not found

    tree.get_root().foreach_descendant_top_down(look)
    return len(found) == 1 and found[0].intersect_params(statements.context).is_equal(statements.domain)


def kernel_contraction(statements: Scop, kernel: Kernel, precision: str, name: str) -> KernelContraction | None:
    """The contraction general ``kernel`` computes -- the Scop of its statements
    (``statements``, :func:`statements_scop`) is a contraction with an engine in ``precision``
    -- once the verifier accepts the contraction kernel's order on that Scop (its coordinate
    tree mapped as kernels ``name``..., as :func:`~polyopt.targets.contraction.contraction_plan`
    checks it); None otherwise (the general kernel stays). Whether the kernel holds all its
    statements' instances is the caller's to check (:func:`whole_statements`)."""
    mapped = mapped_contraction(statements, precision, name)
    return None if mapped is None else KernelContraction(kernel, statements, *mapped, name)


def contraction_name(kernel: str, text: str) -> str:
    """The first name of ``kernel``'s contraction kernels (``<kernel>_c``; its other tile shapes
    add ``_1``, ``_2``...), with more ``c`` where such names are in the unit ``text`` already."""
    base = f"{kernel}_c"
    while re.search(rf"\b{base}(_\d+)?\b", text):
        base += "c"
    return base


def substitute_contractions(scop: Scop, schedule: Schedule, source: CudaSource,
                            precision: str) -> tuple[Schedule, CudaSource]:
    """The general mapping's schedule value and source with every kernel that computes a
    contraction (module docstring) run as contraction kernels: the source a
    :class:`SubstitutedSource` (the contraction kernels appended to the unit), the schedule
    with a note per substituted kernel. Unchanged where none is. The contraction kernels of one
    unit share their helpers, so they have one operand element type (the first substituted
    kernel's; a contraction of another is left to its general kernel)."""
    found = []
    for kernel in candidate_kernels(source.program, source):
        statements = statements_scop(scop, kernel)
        if not whole_statements(source.program.tree, kernel, statements):
            continue
        made = kernel_contraction(statements, kernel, precision, contraction_name(kernel.name, source.source))
        if made is not None and (not found or _operand_type(found[0]) == _operand_type(made)):
            found.append(made)
    if not found:
        return schedule, source
    parts = [(k.contraction, tile_kernels(k.scop, k.contraction, k.engine, k.name)) for k in found]
    text = source.source + contraction_kernel_text(scop, tuple(parts)) + "\n"
    steps = {k.kernel.name: ContractionSource(k.program, text, {}, source.host_function, contraction=c,
                                              variants=variants, half_store=half_store(scop, c))
             for k, (c, variants) in zip(found, parts)}
    notes = tuple(_note(k, variants, precision) for k, (_, variants) in zip(found, parts))
    return (replace(schedule, notes=tuple(schedule.notes) + notes),
            SubstitutedSource(source.program, text, source.shapes, source.host_function, source.wide,
                              contractions=steps))


def _operand_type(k: KernelContraction) -> str:
    return k.scop.arrays[k.contraction.left.array].dtype.name


def _note(k: KernelContraction, variants: tuple[tuple[str, Variant], ...], precision: str) -> str:
    """The schedule's note on a substituted kernel."""
    c = k.contraction
    return (f"kernel {k.kernel.name} ({', '.join(c.statements)}) runs as a contraction kernel ({k.engine}, "
            f"precision={precision!r}): {c.output} as {c.describe()}; block tile {describe_tiles(variants)}; the "
            "tile, the M/N runs and the batch are chosen per launch from the sizes and strides (the nvcc host "
            "function launches the general kernel)")


def substituted(source: CudaSource) -> dict[str, ContractionSource]:
    """The contraction kernels ``source`` launches in place of general kernels, by the general
    kernel's name (none for a source that is no :class:`SubstitutedSource`)."""
    return source.contractions if isinstance(source, SubstitutedSource) else {}


def arrays_by_name(scop: Scop, values: list) -> dict:
    """The arrays among the ABI argument ``values`` of ``scop``, by name."""
    return {a.name: v for a, v in zip(abi_arguments(scop), values) if a.kind == "array"}


__all__ = ["KernelContraction", "SubstitutedSource", "arrays_by_name", "candidate_kernels", "contraction_name",
           "kernel_contraction", "statements_scop", "substitute_contractions", "substituted", "whole_statements"]
