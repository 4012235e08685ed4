"""Every construct the DSL refuses raises FrontendError at the right line and column, with a
message naming the construct."""
from __future__ import annotations

import pytest

import polyopt as po
from polyopt import f64

# (name, source, line, column, fragments of the message, construct or None).
# Sources start with a newline: the ``def`` is line 2.
CASES = [
    ("non_affine_subscript", '''
def k(A: f64["N", "N"]):
    for i in range(N):
        for j in range(N):
            A[i * j, 0] = 1.0
''', 5, 15, ["non-affine subscript of 'A'", "product of two non-constant terms"], "i * j"),
    ("non_affine_bound", '''
def k(A: f64["N"]):
    for i in range(N * N):
        A[0] = 1.0
''', 3, 20, ["not affine", "product"], "N * N"),
    ("data_dependent_subscript", '''
def k(A: f64["N"], B: i64["N"]):
    for i in range(N):
        A[B[i]] = 1.0
''', 4, 11, ["non-affine subscript of 'A'", "array element B[i] is data"], "B[i]"),
    ("float_data_subscript", '''
def k(A: f64["N"], B: f64["N"]):
    for i in range(N):
        A[i] = A[B[i]]
''', 4, 18, ["integer expression is needed", "f64"], "B[i]"),
    ("data_dependent_bound", '''
def k(A: f64["N"], B: i64["N"]):
    for i in range(B[0]):
        A[i] = 1.0
''', 3, 20, ["not affine", "array element B[0] is data"], "B[0]"),
    ("scalar_argument_in_bound", '''
def k(n: i64, A: f64["N"]):
    for i in range(1, n):
        A[i] = 1.0
''', 3, 23, ["not affine", "'n' is a data value"], "n"),
    ("scalar_argument_in_subscript", '''
def k(A: f64["N"], m: i64):
    for i in range(N):
        A[m] = 1.0
''', 4, 11, ["non-affine subscript", "'m' is a data value"], "m"),
    ("non_constant_step", '''
def k(A: f64["N"]):
    for i in range(0, N, N):
        A[i] = 1.0
''', 3, 26, ["step of range() must be a nonzero integer constant"], "N"),
    ("step_zero", '''
def k(A: f64["N"]):
    for i in range(0, N, 0):
        A[i] = 1.0
''', 3, 26, ["step of range() must be a nonzero integer constant"], "0"),
    ("float_step", '''
def k(A: f64["N"]):
    for i in range(0, N, 1.5):
        A[i] = 1.0
''', 3, 26, ["step of range()"], "1.5"),
    ("while_loop", '''
def k(A: f64["N"]):
    A[0] = 0.0
    while True:
        A[0] = 1.0
''', 4, 5, ["while loops are not supported"], "while True:"),
    ("break", '''
def k(A: f64["N"]):
    for i in range(N):
        A[i] = 1.0
        break
''', 5, 9, ["break statements are not supported"], "break"),
    ("continue", '''
def k(A: f64["N"]):
    for i in range(N):
        continue
''', 4, 9, ["continue statements are not supported"], "continue"),
    ("return", '''
def k(A: f64["N"]):
    for i in range(N):
        A[i] = 1.0
    return A
''', 5, 5, ["return statements are not supported"], "return A"),
    ("unknown_function", '''
def k(A: f64["N"]):
    for i in range(N):
        A[i] = 2.0 * foo(A[i])
''', 4, 22, ["call to 'foo' is not allowed", "sqrt"], "foo(A[i])"),
    ("method_call", '''
def k(A: f64["N"]):
    for i in range(N):
        A[i] = A.sum()
''', 4, 16, ["only math functions can be called"], "A.sum()"),
    ("wrong_arity", '''
def k(A: f64["N"]):
    for i in range(N):
        A[i] = sqrt(A[i], 2.0)
''', 4, 16, ["sqrt() takes 1 argument(s), got 2"], "sqrt(A[i], 2.0)"),
    ("unknown_name", '''
def k(A: f64["N"]):
    for i in range(N):
        A[i] = A[i] + x
''', 4, 23, ["unknown name 'x'"], "x"),
    ("unknown_array", '''
def k(A: f64["N"]):
    for i in range(N):
        A[i] = Z[i]
''', 4, 16, ["'Z' is not an array argument"], "Z[i]"),
    ("chained_subscripts", '''
def k(A: f64["N", "N"]):
    for i in range(N):
        A[i][i] = 1.0
''', 4, 9, ["write A[i, j], not A[i][j]"], "A[i][i]"),
    ("chained_subscripts_read", '''
def k(A: f64["N", "N"], B: f64["N"]):
    for i in range(N):
        B[i] = A[i][0]
''', 4, 16, ["not A[i][j]"], "A[i][0]"),
    ("too_few_subscripts", '''
def k(A: f64["N", "N"]):
    for i in range(N):
        A[i] = 1.0
''', 4, 9, ["array 'A' has 2 dimensions, subscripted with 1"], "A[i]"),
    ("too_many_subscripts", '''
def k(A: f64["N"], B: f64["N"]):
    for i in range(N):
        B[i] = A[i, 0]
''', 4, 16, ["array 'A' has 1 dimensions, subscripted with 2"], "A[i, 0]"),
    ("array_without_subscript", '''
def k(A: f64["N"], B: f64["N"]):
    for i in range(N):
        A[i] = B
''', 4, 16, ["array 'B' is used without a subscript"], "B"),
    ("assign_parameter", '''
def k(A: f64["N"]):
    for i in range(N):
        N = 1
''', 4, 9, ["cannot assign to size parameter or loop variable 'N'"], "N"),
    ("assign_loop_variable", '''
def k(A: f64["N"]):
    for i in range(N):
        i = i + 1
''', 4, 9, ["cannot assign to size parameter or loop variable 'i'"], "i"),
    ("assign_scalar_argument", '''
def k(alpha: f64, A: f64["N"]):
    for i in range(N):
        alpha = 2.0
''', 4, 9, ["cannot assign to argument 'alpha'"], "alpha"),
    ("assign_array_argument", '''
def k(A: f64["N"]):
    A = 2.0
''', 3, 5, ["cannot assign to argument 'A'"], "A"),
    ("local_read_before_assignment", '''
def k(A: f64["N"]):
    for i in range(N):
        A[i] = s
        s = 1.0
''', 4, 16, ["unknown name 's'", "local scalar"], "s"),
    ("local_updated_before_assignment", '''
def k(A: f64["N"]):
    for i in range(N):
        s += A[i]
''', 4, 9, ["local scalar 's' is updated before it is assigned"], "s"),
    ("integer_local_would_truncate", '''
def k(A: f64["N"], B: f64["N"]):
    s = 0
    for i in range(N):
        s += A[i]
    B[0] = s
''', 5, 9, ["local scalar 's' holds integers", "0.0"], "s += A[i]"),
    ("boolean_local", '''
def k(A: f64["N"]):
    for i in range(N):
        t = A[i] > 0
''', 4, 9, ["local scalars hold numbers, not booleans"], "t"),
    ("missing_annotation", '''
def k(alpha: f64, A):
    A[0] = alpha
''', 2, 19, ["argument 'A' needs an annotation"], "A"),
    ("bad_annotation", '''
def k(A: list):
    A[0] = 1.0
''', 2, 10, ["unknown annotation for 'A'"], "list"),
    ("bad_element_type", '''
def k(A: f8["N"]):
    A[0] = 1.0
''', 2, 10, ["unknown element type 'f8' for array 'A'"], "f8['N']"),
    ("non_affine_extent", '''
def k(A: f64["N * M"]):
    A[0] = 1.0
''', 2, 1, ["extent 'N * M' of array 'A' is not an affine expression"], None),
    ("extent_names_a_data_argument", '''
def k(N: f64, A: f64["N"]):
    A[0] = 1.0
''', 2, 1, ["'N' is used as an array extent and as a data argument"], None),
    ("varargs", '''
def k(*A):
    A[0] = 1.0
''', 2, 1, ["no *args/**kwargs"], None),
    ("shadowed_loop_variable", '''
def k(A: f64["N", "N"]):
    for i in range(N):
        for i in range(N):
            A[i, i] = 1.0
''', 4, 13, ["loop variable 'i' shadows another name"], "i"),
    ("loop_variable_shadows_parameter", '''
def k(A: f64["N"]):
    for N in range(3):
        A[0] = 1.0
''', 3, 9, ["loop variable 'N' shadows another name"], "N"),
    ("slice", '''
def k(A: f64["N"]):
    for i in range(N):
        A[1:N] = 1.0
''', 4, 11, ["slices are not supported"], "1:N"),
    ("non_affine_if_condition", '''
def k(A: f64["N"]):
    for i in range(N):
        if i * i < N:
            A[i] = 1.0
''', 4, 12, ["not affine", "product"], "i * i"),
    ("data_dependent_if_condition", '''
def k(A: f64["N"], B: i64["N"]):
    for i in range(N):
        if B[i] > 0:
            A[i] = 1.0
''', 4, 12, ["not affine", "array element B[i] is data"], "B[i]"),
    ("float_if_condition", '''
def k(A: f64["N"]):
    for i in range(N):
        if A[i] > 0:
            A[i] = 1.0
''', 4, 12, ["integer expression is needed"], "A[i]"),
    ("scalar_in_if_condition", '''
def k(A: f64["N"], n: i64):
    for i in range(N):
        if i < n:
            A[i] = 1.0
''', 4, 16, ["not affine", "'n' is a data value"], "n"),
    ("if_on_a_call", '''
def k(A: f64["N"]):
    for i in range(N):
        if foo(i):
            A[i] = 1.0
''', 4, 12, ["if conditions must be affine comparisons"], "foo(i)"),
    ("min_in_subscript", '''
def k(A: f64["N"]):
    for i in range(N):
        A[min(i, 3)] = 1.0
''', 4, 11, ["min() is only allowed in loop bounds"], "min(i, 3)"),
    ("no_statements", '''
def k(A: f64["N"]):
    for i in range(N):
        pass
''', 2, 1, ["kernel 'k' has no statements"], None),
    ("only_a_docstring", '''
def k(A: f64["N"]):
    """Nothing to do."""
''', 2, 1, ["has no statements"], None),
    ("for_else", '''
def k(A: f64["N"]):
    for i in range(N):
        A[i] = 1.0
    else:
        A[0] = 2.0
''', 3, 5, ["for ... else is not supported"], None),
    ("tuple_loop_target", '''
def k(A: f64["N"]):
    for i, j in range(N):
        A[i] = 1.0
''', 3, 9, ["a loop variable must be a plain name"], "(i, j)"),
    ("iterating_an_array", '''
def k(A: f64["N"]):
    for x in A:
        A[0] = x
''', 3, 14, ["loops must iterate over range"], "A"),
    ("several_targets", '''
def k(A: f64["N"], B: f64["N"]):
    for i in range(N):
        A[i] = B[i] = 1.0
''', 4, 9, ["assign to one target at a time"], "A[i] = B[i] = 1.0"),
    ("string_literal", '''
def k(A: f64["N"]):
    for i in range(N):
        A[i] = "x"
''', 4, 16, ["unsupported literal 'x'"], "'x'"),
    ("keyword_argument", '''
def k(A: f64["N"]):
    for i in range(N):
        A[i] = pow(A[i], exp=2.0)
''', 4, 16, ["pow() takes no keyword arguments"], "pow(A[i], exp=2.0)"),
    ("syntax_error", '''
def k(A: f64["N"]):
    for i in range(N)
        A[i] = 1.0
''', 3, 22, ["syntax error"], None),
]


@pytest.mark.parametrize("name,source,line,column,fragments,construct", CASES, ids=[c[0] for c in CASES])
def test_refusals(name, source, line, column, fragments, construct):
    with pytest.raises(po.FrontendError) as info:
        po.kernel_from_source(source).scop
    error = info.value
    assert (error.line, error.column) == (line, column), str(error)
    for fragment in fragments:
        assert fragment in error.reason, error.reason
    assert error.construct == construct
    assert error.source_name == "<string>"
    text = str(error)
    assert text.startswith(f"<string>, line {line}, column {column}: ")
    if construct:
        assert text.endswith("\n    " + construct)
    assert isinstance(error, po.PolyoptError)


def test_no_function_definition():
    with pytest.raises(po.FrontendError, match="no function definition"):
        po.kernel_from_source("x = 1\n")


def test_refusal_is_raised_when_the_scop_is_first_needed_not_at_decoration():
    k = po.kernel_from_source('''
def k(A: f64["N"]):
    while True:
        A[0] = 1.0
''')
    assert isinstance(k, po.Kernel)
    for _ in range(2):  # not cached as a success after a failure
        with pytest.raises(po.FrontendError, match="while loops"):
            k.scop
    with pytest.raises(po.FrontendError, match="while loops"):
        po.compile(k)


@po.kernel
def bad_at_module_level(A: f64["N", "N"]):
    for i in range(N):
        for j in range(N):
            A[i, j * i] = 1.0


def test_positions_are_those_of_the_file():
    with pytest.raises(po.FrontendError) as info:
        bad_at_module_level.scop
    first = bad_at_module_level.py_function.__code__.co_firstlineno  # the decorator line
    assert info.value.source_name == __file__
    assert (info.value.line, info.value.column) == (first + 4, 18)
    assert info.value.construct == "j * i"


def test_positions_of_a_kernel_defined_inside_a_function():
    @po.kernel
    def nested(A: f64["N"]):
        for i in range(N):
            A[i] = A[i] + undefined_name  # noqa: F821

    with pytest.raises(po.FrontendError) as info:
        nested.scop
    first = nested.py_function.__code__.co_firstlineno
    assert info.value.line == first + 3
    # the column is the one in this file, not in the dedented source
    line_text = open(__file__).read().splitlines()[info.value.line - 1]
    assert line_text.index("undefined_name") + 1 == info.value.column == 27
    # with_dtype keeps the positions
    with pytest.raises(po.FrontendError) as again:
        nested.with_dtype("f32").scop
    assert (again.value.line, again.value.column) == (info.value.line, info.value.column)


def test_positions_in_indented_source_text():
    source = '''
        def k(A: f64["N"]):
            for i in range(N):
                A[i * i] = 1.0
    '''
    with pytest.raises(po.FrontendError) as info:
        po.kernel_from_source(source).scop
    assert (info.value.line, info.value.column) == (4, 19)
    assert source.splitlines()[3][18:23] == "i * i"


def test_interactive_function_without_source():
    namespace = {"f64": f64}
    exec("def k(A: f64['N']):\n    A[0] = 1.0\n", namespace)
    with pytest.raises(po.FrontendError, match="cannot read the source"):
        po.kernel(namespace["k"])
