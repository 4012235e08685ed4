"""Names of the mark nodes polyopt puts into schedule trees, read by the verifier (which checks
what they promise) and by code generation (which acts on them)."""

#: Above a band whose outermost member runs its iterations on a thread team.
PARALLEL_MARK = "parallel"
