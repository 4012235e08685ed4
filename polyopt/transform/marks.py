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
