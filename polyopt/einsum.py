"""``polyopt.einsum``: numpy.einsum's behaviour, computed by polyopt-generated code.

::

    C = po.einsum("ij,jk->ik", A, B)                 # compiled once per pattern, sizes are parameters
                                                     # (small calls: untiled kernels, see SMALL_CALL_ITERATIONS)
    ck = po.einsum_kernel("ij,jk->ik", A, B)         # the CompiledKernel: ck.scop, ck.schedule, ck.c_source

The subscripts are lowered by :mod:`polyopt.frontends.einsum` to one Scop (a zero-fill and an
accumulation per contraction step, one assignment where nothing is summed); dtypes follow
numpy's promotion and casting rules. How each dtype runs:

- float32, float64, int32, int64: natively compiled in that type.
- bool, int8, int16, uint8, uint16, uint32: compiled in int64, then cast back (exact: integer
  sums of products wrap identically modulo 2**bits; bool's nonzero is numpy's logical or/and).
- uint64: compiled in int64 on the same bits (two's complement arithmetic is exact mod 2**64).
- float16 (and ml_dtypes' bfloat16): the kernel reads the operands in their half type (f16,
  bf16) and converts each element to float32, where it multiplies and sums; the float32 result
  is rounded to the half type once. numpy's matmul does the same; numpy.einsum does so where
  its inner loop is the sum ('ij,j->i') and otherwise rounds every partial sum to float16
  ('ik,kj->ij'), which is less accurate: po.einsum's results are then within numpy's error.
  On the GPU a contraction kernel stores each sum rounded to the half type itself (no float32
  result in memory: :attr:`polyopt.targets.cuda.CudaKernel.half_outputs`); other kernels write
  float32 that a second kernel rounds.
- complex64, complex128: compiled on their float32/float64 (real, imaginary) pairs, numpy's
  memory layout of complex arrays: each statement becomes one per part
  (``einsum_scop(..., complex_parts=True)``).
- longdouble, clongdouble where numpy's longdouble is x87 extended precision (x86-64): compiled
  for the CPU in LLVM's ``x86_fp80`` (clongdouble as pairs of it); no GPU code.
- object (and longdouble where it is IEEE quad precision): polyopt's reference interpreter runs
  the same Scop on Python/numpy scalars of that type (slow, exact in that type).

On the GPU (``target="cuda"``, or any CuPy operand or ``out``) the same Scop is compiled by the
CUDA backend with the same storage types (so the same widening and reinterpreting rules hold);
the interpreted dtypes have no GPU code and raise :class:`TargetUnavailableError` naming the
dtype. CuPy operands give a CuPy result and never leave the GPU; PyTorch CUDA tensors give a
tensor (other ``__cuda_array_interface__`` or CUDA DLPack objects a CuPy array), computed on
zero-copy CuPy views of their memory; numpy operands with ``target="cuda"`` are copied to the
GPU and the result back (a numpy array, as on the CPU). A repeat of a call on CuPy arrays
replays its recorded launches (:mod:`polyopt.einsum_calls`). PyTorch bfloat16 tensors run as
float16 does (CuPy has no bfloat16: the kernel reads their bits through uint16 views and writes
the result's bits, or float32 rounded to bfloat16 on the GPU; needs ml_dtypes); bfloat16 numpy arrays
compute on the CPU only.

numpy (CuPy on the GPU) is used only to allocate, copy, cast and view arrays; every sum of
products is polyopt's. On the CPU, sums longer than ``SUM_BLOCK`` terms run in blocks whose
partial sums join the result one by one, as numpy.einsum sums its 8192-element buffers (same
accuracy on long reductions).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Any, Callable

import numpy as np

from polyopt import einsum_calls
from polyopt.analysis import expr as E
from polyopt.targets.contraction import check_precision
from polyopt.targets.cuda import (CudaKernel, LaunchRecord, as_cupy, check_one_device, cupy_module, is_cupy,
                                  is_device_array, other_device)
from polyopt.targets.torch_tensors import (check_untracked, is_torch_bfloat16, is_torch_cpu, is_torch_cuda,
                                           numpy_view, on_torch_stream, tensor_of)
from polyopt.errors import TargetUnavailableError
from polyopt.frontends.einsum import (EinsumSpec, OUTPUT, SUM_BLOCK, contraction_path, einsum_scop, is_partial_sum,
                                      iteration_count, label_sizes, merge_summed_runs, parse_subscripts, size_parameter,
                                      sublists_to_subscripts)
from polyopt.targets.interpreter import run as interpret_scop
from polyopt.schedulers.registry import DEFAULT_ALGORITHM
from polyopt.targets.arguments import default_num_threads
from polyopt.targets.cpu import CompiledKernel, compile, compiled_before
from polyopt.analysis.scop import Scop, Statement
from polyopt.types import ELEMENT_TYPES, DType, as_dtype, bf16, bf16_bits, f16, f80

_ORDERS = ("C", "F", "A", "K")
#: Below this many statement instances a call runs on one thread, whatever num_threads says:
#: waking a thread team costs microseconds, about what this much work takes on one core
#: (numpy's BLAS does the same; OpenMP's ``if`` clause is the same idea).
PARALLEL_MIN_ITERATIONS = 1 << 16
#: A CPU call that runs at most this many statement instances (all contraction steps together,
#: :func:`~polyopt.frontends.einsum.iteration_count`) runs its pattern's untiled plan (:data:`UNTILED`): Pluto's schedule
#: without the tiles and register tiles of :func:`default_schedule_options`. Everything such a
#: call touches fits in the L1 cache and it takes microseconds either way, while a register
#: tile's unrolled code takes seconds to generate and optimize (a pattern first seen on small
#: arrays, numpy's own tests, or a shape check, compiles in a fraction of that). Larger calls of
#: the pattern take the tiled plan as :data:`TILED_AFTER_ITERATIONS` says.
SMALL_CALL_ITERATIONS = PARALLEL_MIN_ITERATIONS
#: The schedule options of the untiled plan (sorted pairs): no tiles, no register tiles, and so
#: no cost model deciding them (``polyopt.compile``'s ``tile=None, register_tile=None``).
UNTILED = (("register_tile", None), ("tile", None))
#: A CPU call of at most this many statement instances runs the :data:`TINY` plan: the
#: program's own loop order (no scheduler) at LLVM's -O0, a few microseconds more per call than
#: vectorized code at these sizes, for a third of the compile time of Pluto's untiled schedule
#: at -O1 (scheduling and LLVM's passes are most of a tiny kernel's compile).
TINY_CALL_ITERATIONS = 1 << 10
#: The compile options of the tiny calls' plan (``algorithm`` replaces po.einsum's scheduler).
TINY = (("algorithm", "original"), ("llvm_level", 0))
#: A pattern's CPU calls above :data:`SMALL_CALL_ITERATIONS` run its untiled plan until their
#: statement instances add up to more than this; the call that passes it compiles the tiled
#: plan, which every later call runs (a single call of more compiles it at once; a tiled plan
#: found compiled already, in memory or in the disk cache, runs from the first call). Rent
#: before buying: the untiled code's extra time on this much work is a fraction of the tiled
#: compile (seconds of register-tile code), so one-off and few calls never pay for that compile.
TILED_AFTER_ITERATIONS = 1 << 26
#: Statement instances run untiled so far per pattern whose tiled plan is not compiled (the
#: newest :data:`MAX_PATTERNS` patterns kept; a pattern whose tiled plan runs is dropped).
_UNTILED_WORK: dict[tuple, int] = {}
MAX_PATTERNS = 4096
_CASTINGS = ("no", "equiv", "safe", "same_kind", "unsafe")
#: dtypes compiled in a wider polyopt type (the result is cast back exactly, see the module doc)
_WIDENED = {np.dtype(t): np.dtype(np.int64) for t in (np.bool_, np.int8, np.int16, np.uint8, np.uint16, np.uint32)}
#: half-precision dtypes, summed in float32, their operands read in their own type (bf16 only
#: as ml_dtypes' bfloat16: without it bf16 arrays are uint16 bits, numbers to numpy)
_HALVES = {t.numpy for t in (f16, bf16) if t.numpy.kind != "u"}
_WIDENED.update({half: np.dtype(np.float32) for half in _HALVES})
#: dtypes whose bits are reinterpreted as a polyopt type of the same width
_REINTERPRETED = {np.dtype(np.uint64): np.dtype(np.int64)}
#: complex dtypes, compiled as (real, imaginary) pairs of their part type
_COMPLEX_PARTS = {np.dtype(np.complex64): np.dtype(np.float32), np.dtype(np.complex128): np.dtype(np.float64)}
#: dtypes compiled for the CPU only (x87 extended precision has no GPU counterpart)
_CPU_ONLY: set[np.dtype] = set()
if f80 is not None:
    _COMPLEX_PARTS[np.dtype(np.clongdouble)] = np.dtype(np.longdouble)
    _CPU_ONLY |= {np.dtype(np.longdouble), np.dtype(np.clongdouble)}
#: dtypes run by the reference interpreter (longdouble is float64 on some platforms, or IEEE
#: quad, which polyopt does not compile)
_INTERPRETED = ({np.dtype(t) for t in (np.longdouble, np.clongdouble, object)}
                - {t.numpy for t in ELEMENT_TYPES.values()} - set(_COMPLEX_PARTS) - _CPU_ONLY)


@dataclass(frozen=True)
class _Plan:
    """What runs one einsum pattern: the Scop, its temporaries, and the compiled kernel (CPU or
    CUDA; None for dtypes that the reference interpreter runs)."""

    scop: Scop
    temporaries: tuple[tuple[str, tuple[str, ...]], ...]
    kernel: CompiledKernel | CudaKernel | None


def _storage_dtype(dtype: np.dtype) -> np.dtype:
    """The element type of the arrays the kernel works on for results of type ``dtype``."""
    dtype = dtype.newbyteorder("=")
    if dtype in _WIDENED:
        return _WIDENED[dtype]
    return _REINTERPRETED.get(dtype, dtype)


def _operand_storage(result: np.dtype) -> np.dtype | None:
    """The dtype the kernel reads the operands in where it is not the storage dtype: the half
    types' own (converted to float32 element by element); None for the others."""
    result = result.newbyteorder("=")
    return result if result in _HALVES else None


def _element_type(storage: np.dtype) -> DType:
    """The Scop's element type: a polyopt type, or (interpreter path) one that carries numpy's
    dtype so the interpreter keeps values in it (``is_float`` makes it convert with that type)."""
    if storage in _INTERPRETED:
        return DType(str(storage), storage, "", storage.itemsize * 8, True)
    if f80 is not None and storage == f80.numpy:
        return f80
    try:
        return as_dtype(storage)
    except TypeError:
        raise TypeError(f"einsum: invalid data type {storage} for einsum") from None


def _subscript_iterators(stmt: Statement) -> list[tuple[bool, list[frozenset[str]]]]:
    """Per array reference of an einsum statement other than partial sums (read once per block,
    not reused operands): whether it is the written array, and per subscript the iterators it
    uses, in order (constant subscripts -- broadcast dimensions, complex parts -- left out; a
    blocked sum's subscript uses its block and position iterators)."""
    accesses = [stmt.target] + [e for e in E.walk(stmt.value) if isinstance(e, E.Access)]
    subscripts = []
    for access in accesses:
        if is_partial_sum(access.array) and access.array != stmt.target.array:
            continue
        used = [frozenset(v.name for v in E.walk(index) if isinstance(v, E.Var)) for index in access.indices]
        subscripts.append((stmt.target.array == access.array, [names for names in used if names]))
    return subscripts


def reuses_operands(scop: Scop) -> bool:
    """Whether some statement reads an array element in more than one iteration: it has more
    loops than the array's subscripts use ('ij,jk->ik' reads A[i, j] for every k). Such
    contractions are compute-bound and pay for tiles and register tiles; the others
    ('ij,ij->i', 'ijk->kj') read every element once and are bound by memory."""
    return any(not written and len(frozenset().union(*names)) < len(stmt.iterators)  # not the accumulator
               for stmt in scop.statements for written, names in _subscript_iterators(stmt))


def transposes(scop: Scop) -> bool:
    """Whether some statement walks two arrays along each other's rows: the last (contiguous)
    subscript of one is a leading subscript of the other and vice versa ('ijk->kji', 'ijk->kj').
    Whatever the loop order, one of them is then walked with a stride unless tiles keep a
    block of both in the cache."""
    for stmt in scop.statements:
        walks = [(names[-1], set(names[:-1])) for _, names in _subscript_iterators(stmt) if names]
        if any(a != b and a in leading_b and b in leading_a for a, leading_a in walks for b, leading_b in walks):
            return True
    return False


def default_schedule_options(scop: Scop) -> dict[str, object]:
    """The CPU schedule options po.einsum compiles with. Where operands are reused
    (:func:`reuses_operands`): tiles from the cache sizes and register tiles of several rows
    (1000^3 matmul 0.95x of OpenBLAS on 2 threads). Where arrays are transposed: tiles that
    stay clear of cache-set conflicts for any row length (users' sizes are often powers of two),
    and register tiles where a sum runs along the transposition ('ijk->kj': the sums of a block
    of out[k, j] stay in registers while the input is read along its rows). Pluto's untiled
    schedule for the rest (a row-wise 'ij,ij->i' streams every array in order already)."""
    if reuses_operands(scop):
        return {"tile": "auto", "register_tile": "auto"}
    if transposes(scop):
        return {"tile": "auto", "conflict_free_tiles": True, "register_tile": "auto"}
    return {}


@lru_cache(maxsize=256)
def _pattern_scop(spec: EinsumSpec, broadcast: tuple, path: tuple, storage: np.dtype, blocked_sums: bool,
                  operands: np.dtype | None) -> tuple[Scop, tuple]:
    """(Scop, temporaries) of one pattern in its storage type, shared by its plans (tiled,
    untiled, tiny) so that each is parsed once."""
    element = _element_type(_COMPLEX_PARTS.get(storage, storage))
    return einsum_scop(spec, broadcast, path, element, complex_parts=storage in _COMPLEX_PARTS,
                       blocked_sums=blocked_sums, operand_dtype=None if operands is None else _element_type(operands))


def _compile_options(scop: Scop, target: str, options: tuple | None) -> dict[str, object]:
    """The keyword arguments of a plan's compile besides the target: ``options`` as a dict,
    or the defaults where None (CPU: :func:`default_schedule_options`; CUDA: the backend's own
    tiles and blocks); on the CPU sums run as partial sums in vector lanes, as numpy.einsum's
    loops do."""
    if options is not None:
        chosen = dict(options)
    else:
        chosen = default_schedule_options(scop) if target == "cpu" else {}
    if target == "cpu":
        chosen["reassociate"] = True
    return chosen


@lru_cache(maxsize=256)
def _plan(spec: EinsumSpec, broadcast: tuple, path: tuple, storage: np.dtype, algorithm: str,
          target: str = "cpu", options: tuple | None = None, blocked_sums: bool = False,
          operands: np.dtype | None = None) -> _Plan:
    """The (cached) plan of one pattern; sizes are parameters, so new shapes reuse it.
    ``options``: compile options as sorted (name, value) pairs (e.g. :data:`UNTILED`; an
    ``algorithm`` among them replaces ``algorithm``); None: the defaults (:func:`_compile_options`).
    ``blocked_sums``: long sums in blocks (``einsum_scop``; see :func:`_long_sums`).
    ``operands``: the operands' dtype where it is not ``storage`` (:func:`_operand_storage`)."""
    scop, temporaries = _pattern_scop(spec, broadcast, path, storage, blocked_sums, operands)
    if target == "cuda" and storage in _CPU_ONLY:
        raise TargetUnavailableError(
            f"einsum: {storage} data (x87 extended precision) has no CUDA code; the GPU compiles "
            "bool, integer, float16/32/64 and complex64/128 data: pass numpy arrays and target=None")
    if storage not in _INTERPRETED:
        chosen = _compile_options(scop, target, options)
        algorithm = chosen.pop("algorithm", algorithm)
        return _Plan(scop, temporaries, compile(scop, target=target, algorithm=algorithm, **chosen))
    if target == "cuda":
        raise TargetUnavailableError(
            f"einsum: {storage} data has no CUDA code in polyopt (the GPU compiles bool, integer "
            "and float16/32/64 data); pass numpy arrays and target=None for the CPU")
    return _Plan(scop, temporaries, None)


def _long_sums(spec: EinsumSpec, sizes: dict[str, int], target: str) -> bool:
    """Whether a CPU call sums some label over more than SUM_BLOCK terms: then its plan sums in
    blocks (numpy's accuracy). A sum no longer than a block is the same sum unblocked, which
    skips the partial sums' stores (short rows: 'ij,ij->i' on 250000x4 ran 0.5 -> 1.1 ms with
    them). The GPU's kernels sum as they are."""
    return target == "cpu" and any(size > SUM_BLOCK for label, size in sizes.items() if label not in spec.output)


@lru_cache(maxsize=1024)
def _shape_of(spec: EinsumSpec, broadcast: tuple, path: tuple) -> Scop:
    """The pattern's Scop in float64: its statements and their iterators, the same in every
    element type, for counting a call's statement instances before its plan is chosen."""
    return einsum_scop(spec, broadcast, path, as_dtype(np.float64))[0]


def _plan_options(where: str, precision: str, pattern: tuple, sizes: dict[str, int]) -> tuple[tuple | None, bool]:
    """(plan options, final) of a call of ``pattern`` (the arguments of :func:`_pattern_scop`):
    :data:`TINY` or :data:`UNTILED` for a small CPU call (see :data:`TINY_CALL_ITERATIONS`,
    :data:`SMALL_CALL_ITERATIONS`), :data:`UNTILED` for a larger one while the pattern rents
    (:func:`_rents_untiled`; not final: a later call of that size may take the tiled plan), the
    GPU's precision where it is not the default, else None (the defaults)."""
    if where == "cpu":
        spec, broadcast, path, storage = pattern[:4]
        iterations = iteration_count(_shape_of(spec, broadcast, path), sizes)
        if iterations <= SMALL_CALL_ITERATIONS:
            return (TINY if iterations <= TINY_CALL_ITERATIONS else UNTILED), True
        if storage not in _INTERPRETED and _rents_untiled(pattern, iterations):
            return UNTILED, False
    return ((("precision", precision),) if where == "cuda" and precision != "exact" else None), True


def _rents_untiled(pattern: tuple, iterations: int) -> bool:
    """Whether a CPU call of ``iterations`` statement instances (above
    :data:`SMALL_CALL_ITERATIONS`) of ``pattern`` runs the untiled plan: while the pattern's
    untiled work, this call's included, stays within :data:`TILED_AFTER_ITERATIONS` and its
    tiled plan is not compiled (looked up on the pattern's first such call). Counts the call."""
    done = _UNTILED_WORK.get(pattern)
    if done is None:
        if not _tiles(pattern) or _tiled_compiled(pattern):
            return False
        done = 0
    if done + iterations > TILED_AFTER_ITERATIONS:
        _UNTILED_WORK.pop(pattern, None)
        return False
    _UNTILED_WORK[pattern] = done + iterations
    if len(_UNTILED_WORK) > MAX_PATTERNS:
        del _UNTILED_WORK[next(iter(_UNTILED_WORK))]
    return True


def _tiles(pattern: tuple) -> bool:
    """Whether the pattern's default CPU plan tiles (:func:`default_schedule_options`); where
    it does not, that plan is the untiled one and there is nothing to defer."""
    return bool(default_schedule_options(_pattern_scop(*pattern)[0]))


def _tiled_compiled(pattern: tuple) -> bool:
    """Whether the pattern's default (tiled) CPU plan is compiled already, in this process or
    in the disk cache (then the first call loads and runs it)."""
    scop = _pattern_scop(*pattern)[0]
    return compiled_before(scop, algorithm=DEFAULT_ALGORITHM, **_compile_options(scop, "cpu", None)) is not None


def _target_of(target: str | None, operands: list, out) -> str:
    """Where this call runs: 'cuda' when asked or when an operand or ``out`` is a GPU array
    (:func:`~polyopt.targets.cuda.is_device_array`; TargetUnavailableError without CuPy and a
    GPU), else 'cpu'."""
    if target not in (None, "cpu", "cuda"):
        raise ValueError(f"einsum: unknown target {target!r}; available: 'cpu', 'cuda'")
    on_gpu = any(is_device_array(a) for a in [*operands, out])
    if target == "cpu" and on_gpu:
        raise ValueError("einsum: GPU arrays are on the GPU: pass target='cuda' (or None) for "
                         "them, or numpy arrays for target='cpu'")
    if target == "cuda" or on_gpu:
        cupy_module()
        return "cuda"
    return "cpu"


def _stand_in(value):
    """A CuPy array as numpy's checks see it: a zero-size-in-memory numpy array of its shape and
    dtype (other values as numpy would convert them)."""
    if is_cupy(value):
        return np.broadcast_to(np.empty((), value.dtype), value.shape)
    return np.asarray(value)


def _prepare(subscripts, operands, dtype, casting: str, out, optimize):
    """Parse and check everything numpy checks; returns (arrays, spec, sizes, broadcast, path,
    result dtype). CuPy operands are checked through stand-ins (:func:`_stand_in`). The checks
    depend on shapes and dtypes only, so a call like an earlier one reuses their outcome."""
    arrays = [_stand_in(op) for op in operands]
    if out is not None and not isinstance(out, np.ndarray) and not is_cupy(out):
        raise TypeError("keyword parameter out must be an array for einsum")
    key = (subscripts, tuple((a.shape, a.dtype) for a in arrays), dtype, casting,
           None if out is None else (out.shape, out.dtype), optimize)
    try:
        hash(key)
    except TypeError:  # an explicit path given as a list, an unhashable dtype spelling
        return (arrays, *_checked.__wrapped__(*key))
    return (arrays, *_checked(*key))


@lru_cache(maxsize=1024)
def _checked(subscripts, signature: tuple, dtype, casting: str, out_signature: tuple | None, optimize):
    """The part of :func:`_prepare` that depends on the operands' (shape, dtype) ``signature``
    and ``out``'s: (spec, sizes, broadcast, path, result dtype); errors as numpy's."""
    spec = parse_subscripts(subscripts, [len(shape) for shape, _ in signature])
    sizes, broadcast = label_sizes(spec, [shape for shape, _ in signature])
    if dtype is not None:
        result = np.dtype(dtype)
    else:
        result = np.result_type(*(d for _, d in signature), *([] if out_signature is None else [out_signature[1]]))
    for k, (_, operand_dtype) in enumerate(signature):
        if not np.can_cast(operand_dtype, result, casting):
            raise TypeError(f"Iterator operand {k} dtype could not be cast from {operand_dtype!r} to "
                            f"{result!r} according to the rule '{casting}'")
    if out_signature is not None:
        out_shape, out_dtype = out_signature
        if len(out_shape) != len(spec.output):
            raise ValueError(f"out parameter does not have the correct number of dimensions, has "
                             f"{len(out_shape)} but should have {len(spec.output)}")
        expected = tuple(sizes[label] for label in spec.output)
        if out_shape != expected:
            raise ValueError(f"out parameter has shape {out_shape}, but the result of "
                             f"'{subscripts}' has shape {expected}")
        if not np.can_cast(result, out_dtype, casting):
            raise TypeError(f"Iterator requested dtype could not be cast from {result!r} to "
                            f"{out_dtype!r}, the operand {len(signature)} dtype, according to the rule '{casting}'")
    path = contraction_path(spec, sizes, optimize)
    return spec, sizes, broadcast, path, result


def _single_operand_view(spec: EinsumSpec) -> einsum_calls.ViewCall | None:
    """How numpy.einsum makes its view of one operand whose labels all reach the output
    (transpositions, diagonals such as 'ii->i', their ellipsis forms): no data moves, and writes
    through the view change the operand. numpy does this whatever ``dtype``, ``order`` and
    ``casting`` say, so polyopt does too. None when a label is summed or the result is 0-d."""
    labels = spec.inputs[0]
    if not spec.output or set(labels) != set(spec.output):
        return None
    return einsum_calls.ViewCall.of(labels, spec.output)


def _order(order) -> str:
    """``order`` as numpy reads it: 'K', 'A', 'C' or 'F' in either case (None: 'K')."""
    if order is None:
        return "K"
    if not isinstance(order, str) or order.upper() not in _ORDERS:
        raise ValueError(f"order must be one of 'C', 'F', 'A', or 'K' (got {order!r})")
    return order.upper()


def _combined_dims(labels: tuple[str, ...], array: np.ndarray) -> dict[str, tuple[int, int]]:
    """(extent, stride in bytes) per label of an operand, in order of first appearance: numpy
    views a repeated label's dimensions as one, their diagonal, whose stride is their sum."""
    dims: dict[str, tuple[int, int]] = {}
    for label, extent, stride in zip(labels, array.shape, array.strides):
        dims[label] = (extent, dims.get(label, (extent, 0))[1] + stride)
    return dims


def _fortran_contiguous(dims: dict[str, tuple[int, int]], itemsize: int) -> bool:
    """numpy's F_CONTIGUOUS flag of a view with these dimensions (extent-1 dimensions and
    empty arrays do not count)."""
    if any(extent == 0 for extent, _ in dims.values()):
        return True
    expected = itemsize
    for extent, stride in dims.values():
        if extent != 1:
            if stride != expected:
                return False
            expected *= extent
    return True


def _result_axes(spec: EinsumSpec, arrays: list[np.ndarray], order: str) -> tuple[int, ...]:
    """The result's axes from outermost to innermost in memory, as numpy.einsum's iterator lays
    out the array it allocates: 'C' in order, 'F' reversed, 'A' as 'F' where every operand
    (its diagonals taken) is F-contiguous, else 'C'; 'K' as the iterator's axis order, which
    sorts the iteration axes (the output's, then the summed labels in character order) by
    the operands' strides (numpy's stable insertion sort, ``npyiter_find_best_axis_ordering``:
    an operand with a zero stride on either axis has no say; where operands disagree, C order
    wins)."""
    n = len(spec.output)
    if n <= 1 or order == "C":
        return tuple(range(n))
    dims = [_combined_dims(labels, array) for labels, array in zip(spec.inputs, arrays)]
    if order == "A":
        fortran = all(_fortran_contiguous(d, a.itemsize) for d, a in zip(dims, arrays))
        order = "F" if fortran else "C"
    if order != "K":
        return tuple(range(n)) if order == "C" else tuple(reversed(range(n)))
    labels = list(spec.output) + sorted(set().union(*spec.inputs) - set(spec.output))
    # numpy's axis data run from the innermost iteration axis out: position j is axis ndim-1-j
    strides = [[0 if d.get(label, (1, 0))[0] == 1 else d[label][1] for d in dims] for label in reversed(labels)]
    perm = list(range(len(labels)))
    for i0 in range(1, len(perm)):
        j0, insert_at = perm[i0], i0
        for i1 in range(i0 - 1, -1, -1):
            decided, swap = False, False
            for s0, s1 in zip(strides[j0], strides[perm[i1]]):
                if s0 != 0 and s1 != 0:
                    if abs(s1) <= abs(s0):
                        swap = False
                    elif not decided:
                        swap = True
                    decided = True
            if decided:
                if not swap:
                    break
                insert_at = i1
        perm[insert_at + 1:i0 + 1] = perm[insert_at:i0]
        perm[insert_at] = j0
    innermost_first = [len(labels) - 1 - j for j in perm if len(labels) - 1 - j < n]
    return tuple(reversed(innermost_first))


def _allocate_result(shape: tuple[int, ...], dtype: np.dtype, axes: tuple[int, ...]) -> np.ndarray:
    """A new array of ``shape`` that owns its memory, laid out with ``axes`` from outermost to
    innermost (as numpy's iterator allocates: contiguous, strides in that order)."""
    if axes == tuple(range(len(shape))):
        return np.empty(shape, dtype)
    strides, step = [0] * len(shape), dtype.itemsize
    for axis in reversed(axes):
        strides[axis], step = step, step * shape[axis]
    return np.ndarray(shape, dtype, strides=tuple(strides))


def _kernel_array(array, storage: np.dtype):
    """What the kernel receives for a storage array: complex data as its (real, imaginary)
    pairs, a real array with one more dimension of extent 2 (same memory); others as they are."""
    if storage not in _COMPLEX_PARTS:
        return array
    return array.reshape(-1).view(_COMPLEX_PARTS[storage]).reshape(array.shape + (2,))


def _as_storage(xp, array, result: np.dtype, storage: np.dtype, out):
    """A C-contiguous array (of the array module ``xp``: numpy or CuPy) of the kernel's element
    type, never sharing memory with ``out``. Like numpy, each operand is cast to the result
    type first (checked against ``casting`` already): widening a float or complex operand
    straight to int64 storage would turn 0.5 or 1j into 0 where bool makes them True, and
    float16 results round their operands to float16 first."""
    if array.dtype != result and storage != result:
        array = array.astype(result)
    if array.dtype in _REINTERPRETED and _REINTERPRETED[array.dtype] == storage:
        array = xp.asarray(array, order="C").view(storage)
    if out is not None and xp.may_share_memory(array, out):
        return xp.array(array, dtype=storage, order="C")
    return xp.asarray(array, dtype=storage, order="C")


def _kernel_call(plan: _Plan, sizes: dict[str, int], result: np.ndarray, num_threads: int | None
                 ) -> einsum_calls.KernelCall:
    """What a repeat of a call that ran ``plan``'s CPU kernel on these sizes into an array laid
    out like ``result`` needs (see :mod:`polyopt.einsum_calls`)."""
    params = {size_parameter(label): size for label, size in sizes.items()}
    temporaries = [name for name, _ in plan.temporaries]
    operands = len(plan.scop.arguments) - 1 - len(temporaries)  # the rest: op0, op1, ...
    order = []  # positions in [operands..., out, temporaries...]
    for argument in plan.scop.arguments:
        if argument.name == OUTPUT:
            order.append(operands)
        elif argument.name in temporaries:
            order.append(operands + 1 + temporaries.index(argument.name))
        else:  # op0, op1, ...
            order.append(int(argument.name[2:]))
    shapes = tuple(tuple(sizes[label] for label in labels) for _, labels in plan.temporaries)
    strides = None if result.flags.c_contiguous else result.strides
    return einsum_calls.KernelCall(plan.kernel.native_function, tuple(params[p] for p in plan.scop.params),
                                   tuple(order), shapes, result.shape, strides, result.dtype,
                                   num_threads or default_num_threads())


def _astype(dtype: np.dtype) -> Callable:
    """The conversion of a half-precision call's float32 result into ``dtype``."""
    return lambda value: value.astype(dtype)


def _device_call(plan: _Plan, buffers: dict, cupy, final: Callable | None = None
                 ) -> einsum_calls.DeviceCall | None:
    """What a repeat of a GPU call that ran ``plan``'s CUDA kernel on ``buffers`` (CuPy arrays
    by argument name) needs: the kernel's recorded launches and the result's and temporaries'
    shapes (see :class:`polyopt.einsum_calls.DeviceCall`; ``final``: its conversion of a half
    result); None where the kernel recorded none."""
    launches = plan.kernel.recorded(plan.kernel.call_key(plan.kernel.named((), buffers)))
    if not isinstance(launches, LaunchRecord):  # (none, or a graph per result address: no use)
        return None
    temporaries = tuple((name, buffers[name].shape, buffers[name].dtype) for name, _ in plan.temporaries)
    operands = tuple(name for name in buffers if name.startswith("op"))
    result = buffers[OUTPUT]
    return einsum_calls.DeviceCall(launches, cupy.empty, operands, OUTPUT, temporaries, result.shape,
                                   result.dtype, final)


#: :func:`einsum`'s options and their defaults, in the order of its call key (:func:`_call_key`).
_OPTION_DEFAULTS = (("dtype", None), ("order", "K"), ("casting", "safe"), ("optimize", "greedy"), ("target", None),
                    ("num_threads", None), ("precision", "exact"))


def _with_defaults(options: dict) -> dict:
    """:func:`einsum`'s options as given in ``options``, the rest at their defaults, in key order."""
    return {name: options.get(name, default) for name, default in _OPTION_DEFAULTS}


def _call_key(operands: tuple, out, dtype, order, casting, optimize, target, num_threads, precision
              ) -> tuple | None:
    """The key under which a call is recorded (:func:`polyopt.einsum_calls.call_key` with the
    precision); None for a call that is never recorded."""
    key = einsum_calls.call_key(operands, out, dtype, order, casting, optimize, target, num_threads)
    return None if key is None else key + (precision,)


def _on_cupy_views(operands: tuple, out, **options):
    """:func:`einsum` on GPU arrays other than CuPy's (PyTorch CUDA tensors, any
    ``__cuda_array_interface__`` or CUDA DLPack object): computed on CuPy views of the same
    memory (no copies); returns ``out`` itself when given, else the result as the kind of the
    first such operand (:func:`_same_kind`)."""
    like = next(v for v in (*operands, out) if is_device_array(v) and not is_cupy(v))
    check_untracked(operands[1:] if isinstance(operands[0], str) else operands[::2], "einsum")
    if any(is_torch_bfloat16(v) for v in (*operands, out)):
        return _on_bf16_tensors(operands, out, like, **options)
    given = _with_defaults(options)
    torch_key = einsum_calls.torch_call_key(operands, out, tuple(given.values()))
    known = einsum_calls.recorded(torch_key)
    if known is not None:
        return known(operands[1:])
    views = tuple(as_cupy(v) if is_device_array(v) else v for v in operands)
    with on_torch_stream(cupy_module(), like):  # (a torch tensor's work goes on torch's current stream)
        result = einsum(*views, out=None if out is None else as_cupy(out), **options)
    if out is not None:
        return out
    result = _same_kind(result, like)
    if torch_key is not None:
        _record_torch_call(torch_key, einsum_calls.recorded(_call_key(views, None, *given.values())), result.dtype)
    return result


def _on_numpy_views(operands: tuple, out, **options):
    """``einsum`` on PyTorch CPU tensors (numpy arrays and numbers beside them), as
    ``torch.einsum`` takes them: computed on numpy views of their memory (no copies; the call
    on the views is recorded like any numpy call), the result a tensor on the result array's
    memory, or ``out`` (a tensor: written in place through its view)."""
    check_untracked(operands[1:] if isinstance(operands[0], str) else operands[::2], "einsum")
    check_untracked((out,), "einsum", names=("out=",))
    views = tuple(numpy_view(v, "einsum") if is_torch_cpu(v) else v for v in operands)
    out_view = numpy_view(out, "einsum out=", written=True) if is_torch_cpu(out) else out
    result = einsum(*views, out=out_view, **options)
    return out if out is not None else tensor_of(result)


def _record_torch_call(torch_key: tuple, device_call, dtype) -> None:
    """Record under ``torch_key`` the :class:`~polyopt.einsum_calls.TorchCall` of the call on
    CuPy views that ``device_call`` replays (where it is a recorded launch that allows one), its
    result a tensor of torch dtype ``dtype``: for a half-precision result the kernel's float32
    sums rounded by torch (``Tensor.to``, to nearest even as the CuPy path rounds), the
    intermediate arrays of a contraction path tensors of the same dtypes, so a repeat makes no
    CuPy views and no CuPy kernel."""
    if not isinstance(device_call, einsum_calls.DeviceCall):
        return
    import torch
    half = device_call.final is not None  # (else the kernel wrote the result in its own type)
    final = (lambda value: value.to(dtype)) if half else None
    torch_call = einsum_calls.TorchCall.of(device_call, torch.float32 if half else dtype, _new_tensor,
                                           partial(on_torch_stream, cupy_module()), final,
                                           lambda kind: getattr(torch, np.dtype(kind).name, None))
    if torch_call is not None:
        einsum_calls.record(torch_key, torch_call)


def _new_tensor(like, shape: tuple, dtype):
    """A new tensor on the device of tensor ``like`` (the result of a :class:`~polyopt.einsum_calls.TorchCall`)."""
    return like.new_empty(shape, dtype=dtype)


def _on_bf16_tensors(operands: tuple, out, like, dtype=None, **options):
    """:func:`einsum` where an operand or ``out`` is a PyTorch bfloat16 CUDA tensor. Every
    operand bfloat16 (``out`` too, or None) and no other ``dtype``: computed as for float16 --
    the kernel reads the operands' bits (CuPy uint16 views of the tensors' memory: CuPy has no
    bfloat16) as bf16, converts each element to float32, multiplies and sums in float32, and
    the float32 result is rounded to bfloat16 once (:func:`polyopt.types.bf16_bits`); returns
    a bfloat16 tensor or ``out``. Otherwise the bfloat16 operands are widened to float32 first
    (numpy's promotion with ml_dtypes' bfloat16 gives float32 or wider there too)."""
    import torch

    ops = [v for v in operands if not isinstance(v, (str, list, tuple))]
    if dtype not in (None, torch.bfloat16, bf16.numpy, "bfloat16") or not all(map(is_torch_bfloat16, ops)) \
            or (out is not None and not is_torch_bfloat16(out)):
        if out is not None and is_torch_bfloat16(out):
            raise TypeError("einsum: a bfloat16 out needs bfloat16 operands (and no other dtype)")
        widened = tuple(v.float() if is_torch_bfloat16(v) else v for v in operands)
        return _on_cupy_views(widened, out, dtype=dtype, **options)
    if bf16.numpy.kind != "V":
        raise TargetUnavailableError("einsum: bfloat16 tensors need ml_dtypes (pip install polyopt[bf16])")
    given = _with_defaults({**options, "dtype": dtype})
    torch_key = einsum_calls.torch_call_key(operands, out, tuple(given.values()))
    known = einsum_calls.recorded(torch_key)
    if known is not None:
        return known(operands[1:])
    bits = tuple(as_cupy(v) if is_torch_bfloat16(v) else v for v in operands)
    out_bits = None if out is None else as_cupy(out)
    key = _call_key(bits, out_bits, *_with_defaults({**options, "dtype": BF16_BITS}).values())
    known = einsum_calls.recorded(key)
    with on_torch_stream(cupy_module(), like):
        result = None if known is None else known(bits[1:], out_bits)
        if result is None:
            result = _bf16_einsum(bits, out_bits, key=key, **options)
    if out is not None:
        return out
    if torch_key is not None:
        _record_torch_call(torch_key, einsum_calls.recorded(key), torch.bfloat16)
    return torch.as_tensor(result.view(cupy_module().int16), device=like.device).view(torch.bfloat16)


#: The ``dtype`` slot of the call key (:func:`polyopt.einsum_calls.call_key`) of a bfloat16 call
#: on the bits of PyTorch tensors: apart from an einsum of the same uint16 arrays as numbers.
BF16_BITS = "bfloat16 bits"


def _bf16_einsum(operands: tuple, out_bits, order: str = "K", casting: str = "safe", optimize="greedy",
                 target: str | None = None, num_threads: int | None = None, precision: str = "exact",
                 key: tuple | None = None):
    """The bfloat16 einsum of :func:`_on_bf16_tensors` on CuPy uint16 arrays holding bf16 bits
    (and the interleaved form's sublists): the result's bits, a new C-contiguous CuPy array, or
    written into ``out_bits``. A call without ``out_bits`` whose plan is final and whose kernel
    recorded its launches is recorded under ``key`` (its repeats launch those and the rounding
    kernel only), as :func:`einsum` records its calls."""
    check_precision(precision)
    if num_threads is not None:
        raise ValueError("einsum: num_threads is an option of the CPU (thread teams)")
    if target == "cpu":
        raise ValueError("einsum: GPU arrays are on the GPU: pass target='cuda' (or None) for them")
    cupy = cupy_module()
    subscripts, ops = (operands[0], list(operands[1:])) if isinstance(operands[0], str) \
        else sublists_to_subscripts(operands)
    stand_ins = [np.broadcast_to(np.empty((), bf16.numpy), op.shape) for op in ops]
    out_stand_in = None if out_bits is None else np.broadcast_to(np.empty((), bf16.numpy), out_bits.shape)
    _, spec, sizes, broadcast, path, result = _prepare(subscripts, stand_ins, None, casting, out_stand_in, optimize)
    storage = _storage_dtype(result)
    pattern = (spec, broadcast, path, storage, _long_sums(spec, sizes, "cuda"), _operand_storage(result))
    options, final = _plan_options("cuda", precision, pattern, sizes)
    plan = _plan(*pattern[:4], DEFAULT_ALGORITHM, "cuda", options, *pattern[4:])
    buffers = {f"op{k}": cupy.ascontiguousarray(op) for k, op in enumerate(ops)}
    for name, labels in plan.temporaries:
        buffers[name] = cupy.empty(tuple(sizes[label] for label in labels), dtype=storage)
    stored = OUTPUT in plan.kernel.half_outputs  # the kernel rounds its sums to bf16 bits itself
    buffers[OUTPUT] = cupy.empty(tuple(sizes[label] for label in spec.output), dtype=np.uint16 if stored else storage)
    plan.kernel(**buffers)
    if final and key is not None and out_bits is None and _order(order) != "F" \
            and all(op.flags.c_contiguous and op.dtype == np.uint16 for op in ops):
        device_call = _device_call(plan, buffers, cupy, None if stored else lambda value: bf16_bits(value, cupy))
        if device_call is not None:
            einsum_calls.record(key, device_call)
    rounded = buffers[OUTPUT] if stored else bf16_bits(buffers[OUTPUT], cupy)
    if out_bits is None:
        return cupy.asfortranarray(rounded) if _order(order) == "F" else rounded
    out_bits[...] = rounded
    return out_bits


def _same_kind(result, like):
    """The CuPy array ``result`` as the kind of GPU array ``like``, on the same memory: a PyTorch
    tensor (``torch.as_tensor`` on its ``__cuda_array_interface__``) for a PyTorch operand;
    the CuPy array itself for others (no general way back to an arbitrary producer's type)."""
    if not is_torch_cuda(like):
        return result
    import torch
    return torch.as_tensor(result, device=like.device)


def einsum(*operands: Any, out: np.ndarray | None = None, dtype=None, order: str = "K",
           casting: str = "safe", optimize="greedy", target: str | None = None,
           num_threads: int | None = None, precision: str = "exact"):
    """Evaluate the Einstein summation convention on the operands, exactly as ``numpy.einsum``.

    ``einsum("ij,jk->ik", A, B)`` or the interleaved form ``einsum(A, [0, 1], B, [1, 2], [0, 2])``;
    ``out``, ``dtype``, ``order``, ``casting`` and ``optimize`` (False, None, True, "greedy",
    "optimal", ``(name, memory_limit)`` or an ``["einsum_path", ...]`` list; numpy's errors for
    others) as numpy's, except that the default contraction order
    is greedy (numpy's default, False, sums all operands in one nest: 'ij,jk,kl->il' then costs
    n^4 instead of two n^3 steps). The arithmetic is polyopt-compiled code (or
    its reference interpreter for complex, longdouble and object data). ``target="cuda"`` or
    GPU operands (CuPy, torch, ``__cuda_array_interface__``) run polyopt's CUDA code (module
    docstring; without CuPy and a GPU: :class:`TargetUnavailableError`). ``order`` lays the result out as numpy does (on the GPU:
    "F" Fortran order, others C order).
    ``num_threads``: the most threads of the CPU team (default: every core; numpy.einsum uses
    one); below :data:`PARALLEL_MIN_ITERATIONS` statement instances one thread runs.
    ``precision="tf32"`` lets an f32 contraction on the GPU run on the TF32 tensor cores
    (10-bit mantissas: results change, like torch's ``allow_tf32``); "exact" (the default)
    keeps each element's arithmetic. The CPU computes exactly either way.
    """
    # first a call like an earlier one (which passed every check below): see einsum_calls
    if out is None and len(operands) > 1 and is_torch_cuda(operands[1]):  # on PyTorch tensors (_on_cupy_views)
        known = einsum_calls.recorded(einsum_calls.torch_call_key(
            operands, None, (dtype, order, casting, optimize, target, num_threads, precision)))
        if known is not None:
            return known(operands[1:])
    device = other_device((*operands, out))
    if device is not None:  # CuPy arrays of another GPU: the call runs there (as one on torch tensors does)
        with cupy_module().cuda.Device(device):
            return einsum(*operands, out=out, dtype=dtype, order=order, casting=casting, optimize=optimize,
                          target=target, num_threads=num_threads, precision=precision)
    # a key exists only where every operand is a numpy or CuPy array
    key = _call_key(operands, out, dtype, order, casting, optimize, target, num_threads, precision)
    known = einsum_calls.recorded(key)
    if known is not None:
        result = known(operands[1:], out)
        if result is not None:
            return result
    if key is None and any(is_device_array(v) and not is_cupy(v) for v in (*operands, out)):
        return _on_cupy_views(operands, out, dtype=dtype, order=order, casting=casting, optimize=optimize,
                              target=target, num_threads=num_threads, precision=precision)
    if key is None and any(is_torch_cpu(v) for v in (*operands, out)):
        return _on_numpy_views(operands, out, dtype=dtype, order=order, casting=casting, optimize=optimize,
                               target=target, num_threads=num_threads, precision=precision)
    check_precision(precision)
    order = _order(order)
    if casting not in _CASTINGS:
        raise ValueError(f"casting must be one of 'no', 'equiv', 'safe', 'same_kind', 'unsafe' (got {casting!r})")
    if not operands or (not isinstance(operands[0], str) and len(operands) < 2):
        raise ValueError("must specify the einstein sum subscripts string and at least one operand, "
                         "or at least one operand and its corresponding subscripts list")
    if isinstance(operands[0], str):
        subscripts, ops = operands[0], list(operands[1:])
    else:
        subscripts, ops = sublists_to_subscripts(operands)
    where = _target_of(target, ops, out)
    if len(ops) == 1 and out is None and where == "cpu":
        single = np.asarray(ops[0])
        spec = parse_subscripts(subscripts, [single.ndim])
        label_sizes(spec, [single.shape])  # numpy's checks: a diagonal's extents agree
        view = _single_operand_view(spec)
        if view is not None:
            einsum_calls.record(key, view)
            return view((single,))
    arrays, spec, sizes, broadcast, path, result = _prepare(subscripts, ops, dtype, casting, out, optimize)
    if where == "cuda" and result == bf16.numpy and result.kind == "V":
        raise TargetUnavailableError(
            "einsum: bfloat16 numpy arrays have no CUDA einsum in polyopt (CuPy has no bfloat16 dtype); "
            "pass PyTorch bfloat16 CUDA tensors, or target=None for the CPU")
    if where == "cpu":  # summed labels adjacent in memory as one long sum, as numpy's iterator does
        spec, sizes, broadcast, arrays = merge_summed_runs(spec, sizes, broadcast, arrays)
    storage = _storage_dtype(result)
    shape = tuple(sizes[label] for label in spec.output)
    # the result in numpy's layout: the kernel writes it as a C-contiguous array whose output
    # labels run in memory order, a transposed view of the result
    axes = _result_axes(spec, arrays, order) if out is None and where == "cpu" else tuple(range(len(shape)))
    operands = _operand_storage(result)
    pattern = (EinsumSpec(spec.inputs, tuple(spec.output[a] for a in axes)), broadcast, path, storage,
               _long_sums(spec, sizes, where), operands)
    options, final = _plan_options(where, precision, pattern, sizes)
    plan = _plan(*pattern[:4], DEFAULT_ALGORITHM, where, options, *pattern[4:])
    on_gpu = where == "cuda" and (any(is_cupy(a) for a in ops) or is_cupy(out))
    if on_gpu and out is not None and not is_cupy(out):
        raise TypeError("einsum: out must be a CuPy array when the operands are on the GPU")
    if on_gpu:
        check_one_device([*((f"operand {k}", op) for k, op in enumerate(ops)), ("out", out)], "einsum")
    xp = cupy_module() if on_gpu else np
    buffers = {f"op{k}": _as_storage(xp, op if is_cupy(op) else a, result, operands or storage, out)
               for k, (op, a) in enumerate(zip(ops, arrays))}
    for name, labels in plan.temporaries:
        buffers[name] = xp.empty(tuple(sizes[label] for label in labels), dtype=storage)
    # a half result stored by the contraction kernel itself, each float32 sum rounded once
    rounded = where == "cuda" and result in _HALVES and OUTPUT in getattr(plan.kernel, "half_outputs", ())
    written = result if rounded else storage  # the element type the kernel writes
    direct = (out is not None and out.dtype == written and out.flags.c_contiguous
              and getattr(out.flags, "writeable", True))  # CuPy arrays are always writeable
    if direct:
        value = out
    else:
        value = xp.empty(shape, dtype=written) if xp is not np else _allocate_result(shape, written, axes)
    buffers[OUTPUT] = value.transpose(axes)
    if num_threads is not None and where == "cuda":
        raise ValueError("einsum: num_threads is an option of the CPU (thread teams)")
    if where == "cpu" and plan.kernel is not None:
        if iteration_count(plan.scop, sizes) < PARALLEL_MIN_ITERATIONS:
            num_threads = 1  # a team costs more than it saves (num_threads is the most threads)
        if num_threads is not None:
            buffers["num_threads"] = num_threads
    if plan.kernel is not None:
        plan.kernel(**{name: value if name == "num_threads" else _kernel_array(value, storage)
                       for name, value in buffers.items()})
        half = on_gpu and result in _HALVES and out is None and not rounded  # float32 sums, rounded after
        if (final and key is not None and (written == result or half) and storage not in _COMPLEX_PARTS
                and all(op.dtype == (operands or storage) and op.flags.c_contiguous for op in ops)
                and (out is None or direct)):
            if where == "cpu":
                einsum_calls.record(key, _kernel_call(plan, sizes, value, num_threads))
            elif on_gpu and order != "F":
                device_call = _device_call(plan, buffers, xp, _astype(result) if half else None)
                if device_call is not None:
                    einsum_calls.record(key, device_call)
    else:
        params = {size_parameter(label): size for label, size in sizes.items()}
        interpret_scop(plan.scop, params, {}, buffers)
    if written != result:
        value = value.view(result) if result in _REINTERPRETED else value.astype(result)
    if out is not None:
        if not direct:
            xp.copyto(out, value, casting="unsafe")
        return out
    if order == "F" and xp is not np:
        value = xp.asfortranarray(value)
    return value[()] if value.ndim == 0 and xp is np else value


def einsum_kernel(subscripts: str, *shapes_or_arrays, dtype=None, optimize="greedy",
                  algorithm: str = DEFAULT_ALGORITHM, target: str = "cpu",
                  **schedule_options) -> CompiledKernel | CudaKernel:
    """The compiled kernel that :func:`einsum` runs for these subscripts, operand shapes (tuples)
    or arrays, and result ``dtype`` (default: numpy's result type of the arrays, else float64)
    on calls larger than :data:`SMALL_CALL_ITERATIONS` once :data:`TILED_AFTER_ITERATIONS` says
    so (before that, and on smaller calls, the untiled kernel,
    ``einsum_kernel(..., tile=None, register_tile=None)``; at most :data:`TINY_CALL_ITERATIONS`
    ``einsum_kernel(..., algorithm="original", llvm_level=0)``).

    Inspect it (``.scop``, ``.schedule``, ``.c_source``, ``.llvm_ir``; ``.cuda_source`` with
    ``target="cuda"``, which needs no GPU to compile) or call it with keyword arrays
    ``op0, op1, ..., out`` (and the temporaries ``t0, ...`` of a contraction path). The kernel
    is cached: other sizes with the same pattern return the same object. ``schedule_options``
    (``tile=``, ``register_tile=``, ``fuse=``, ... as for :func:`polyopt.compile`) replace the
    defaults (:func:`default_schedule_options`), e.g. to explore schedules of one contraction.
    """
    if target not in ("cpu", "cuda"):
        raise ValueError(f"einsum_kernel: unknown target {target!r}; available: 'cpu', 'cuda'")
    arrays = [_stand_in(a) if hasattr(a, "shape") and hasattr(a, "dtype")
              else np.broadcast_to(np.int8(0), tuple(a)) for a in shapes_or_arrays]
    if dtype is None:
        given = [a for a, raw in zip(arrays, shapes_or_arrays) if hasattr(raw, "dtype")]
        dtype = np.result_type(*given) if given else np.float64
    _, spec, sizes, broadcast, path, result = _prepare(subscripts, arrays, dtype, "unsafe", None, optimize)
    storage = _storage_dtype(result)
    if storage in _INTERPRETED:
        raise TypeError(f"einsum on {result} data runs on polyopt's reference interpreter and has no "
                        "compiled kernel (polyopt.frontends.einsum.einsum_scop builds its Scop)")
    options = tuple(sorted(schedule_options.items())) if schedule_options else None
    return _plan(spec, broadcast, path, storage, algorithm, target, options, _long_sums(spec, sizes, target),
                 _operand_storage(result)).kernel


__all__ = ["TargetUnavailableError", "default_schedule_options", "einsum", "einsum_kernel", "reuses_operands",
           "transposes"]
