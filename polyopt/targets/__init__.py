"""Where a schedule runs: argument binding and checking shared by every target, the compile
cache, the CPU target (LLVM JIT), the CUDA target (CuPy/NVRTC), gcc-built C (for comparisons)
and the plain interpreter of the original order (the reference)."""
