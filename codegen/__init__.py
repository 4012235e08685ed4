"""Code generators: schedule tree -> loop AST (:mod:`.ast`) -> C source (:mod:`.c`) or native
code through LLVM (:mod:`.llvm`)."""
