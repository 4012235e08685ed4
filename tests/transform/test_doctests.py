"""The before/after examples in the docstrings of the Schedule primitives run as doctests, on the
five kernels the Schedule class docstring describes."""
import doctest

import polyopt as po
import polyopt.transform.schedule as schedule_module

KERNELS = {
    "scale": '''
def scale(A: f64["N", "N"]):
    for i in range(N):
        for j in range(N):
            A[i, j] = 2.0 * A[i, j]
''',
    "sweep": '''
def sweep(A: f64["T", "N"]):
    for t in range(1, T):
        for i in range(1, N):
            A[t, i] = A[t - 1, i] + A[t, i - 1]
''',
    "pair": '''
def pair(A: f64["N"], B: f64["N"], C: f64["N"]):
    for i in range(N):
        B[i] = 2.0 * A[i]
        C[i] = B[i] + 1.0
''',
    "apart": '''
def apart(A: f64["N"], B: f64["N"], C: f64["N"]):
    for i in range(N):
        B[i] = 2.0 * A[i]
    for i in range(N):
        C[i] = B[i] + 1.0
''',
    "mm": '''
def mm(C: f64["N", "N"], A: f64["N", "N"], B: f64["N", "N"]):
    for i in range(N):
        for k in range(N):
            for j in range(N):
                C[i, j] += A[i, k] * B[k, j]
''',
}


def test_primitive_docstrings_show_the_loops_before_and_after():
    kernels = {name: po.kernel_from_source(text) for name, text in KERNELS.items()}
    result = doctest.testmod(schedule_module, extraglobs={"po": po, **kernels}, verbose=False,
                             optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 30 and result.failed == 0
