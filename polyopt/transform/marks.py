"""Names of the mark nodes polyopt puts into schedule trees, read by the verifier (which checks
what they promise) and by code generation (which acts on them)."""

#: Above a band whose outermost member runs its iterations on a thread team.
PARALLEL_MARK = "parallel"

#: Above the subtree one CUDA kernel runs, in the GPU mapping's tree
#: (:func:`polyopt.codegen.gpu_mapping.map_to_gpu`); the mark's name is this word, a space and
#: the kernel's name ("gpu_kernel polyopt_gemm_k1").
GPU_KERNEL_MARK = "gpu_kernel"
#: Above a band whose outermost member's values are spread over a kernel's thread blocks
#: (iterations in different blocks run at the same time).
GPU_BLOCK_MARK = "gpu_block"
#: Above a band whose outermost member's values are spread over the threads of a block.
GPU_THREAD_MARK = "gpu_thread"
#: Above a band of a kernel's per-thread subtree whose outermost member's iterations may be split
#: over the threads of a warp: it carries only dependences between sums ``X[f] = X[f] + e`` into
#: one element (:mod:`polyopt.analysis.reductions`), so each thread sums its iterations' terms and
#: the partial sums are added at the end.
GPU_REDUCE_MARK = "gpu_reduce"
#: Above a kernel's outermost ``gpu_block`` mark (:meth:`polyopt.Schedule.gpu_promote`): where the
#: kernel keeps the named arrays, as words "array=place" after this one, place "shared" (tiles of
#: a read-only array staged in shared memory), "registers" (the elements a loop updates kept in
#: registers) or "global" (neither). Arrays it does not name are placed as the CUDA backend
#: chooses. Placement does not change what runs when, so the verifier has nothing to check.
GPU_MEMORY_MARK = "gpu_memory"
#: The places :data:`GPU_MEMORY_MARK` names.
GPU_MEMORY_PLACES = ("shared", "registers", "global")


def memory_mark(placement: dict[str, str]) -> str:
    """The name of a :data:`GPU_MEMORY_MARK` mark for ``placement`` (array -> place)."""
    return " ".join([GPU_MEMORY_MARK] + [f"{a}={placement[a]}" for a in sorted(placement)])


def memory_placement(name: str) -> dict[str, str] | None:
    """The placement a mark named ``name`` gives (array -> place), None for another mark."""
    word, *pairs = name.split(" ")
    if word != GPU_MEMORY_MARK:
        return None
    return dict(pair.split("=", 1) for pair in pairs)
