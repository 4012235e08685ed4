"""Every suite kernel, compiled for the CPU with each available scheduler, matches its numpy
reference at MINI and SMALL sizes; and the reference interpreter agrees at MINI."""
import numpy as np
import pytest

import polyopt as po
from polyopt.codegen.ast_interpreter import run_loop_ast
from polyopt.targets.interpreter import instances
from polyopt.targets.arguments import bind_arguments

ALGORITHMS = ("original", "isl", "isl-feautrier")
RTOL, ATOL = 1e-9, 1e-12


def _copies(args):
    return {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in args.items()}


def assert_same_arrays(actual, expected, rtol=RTOL, atol=ATOL):
    for name, value in expected.items():
        if isinstance(value, np.ndarray):
            np.testing.assert_allclose(actual[name], value, rtol=rtol, atol=atol, err_msg=name)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("preset", ["MINI", "SMALL"])
@pytest.mark.parametrize("name", po.suite.names())
def test_compiled_matches_reference(name, preset, algorithm):
    entry = po.suite.get(name)
    args = entry.inputs(entry.sizes(preset))
    expected = _copies(args)
    entry.reference(**expected)
    compiled = po.compile(entry.kernel, algorithm=algorithm)
    po.verify(entry.kernel.scop, compiled.schedule)
    compiled(**args)
    assert_same_arrays(args, expected)


def _instance_count(entry, sizes) -> int:
    params = {p: sizes[p] for p in entry.kernel.scop.params}
    return len(instances(entry.kernel.scop, params))


def _python_case(name: str, most_instances: int, shrink: int):
    """(entry, arguments, expected arrays) at MINI, or MINI divided by ``shrink`` where MINI has
    more than ``most_instances`` statement instances: for checks that run in plain Python."""
    entry = po.suite.get(name)
    sizes = entry.sizes("MINI")
    if _instance_count(entry, sizes) > most_instances:
        sizes = {k: max(2, v // shrink) for k, v in sizes.items()}
    args = entry.inputs(sizes)
    expected = _copies(args)
    entry.reference(**expected)
    return entry, args, expected


@pytest.mark.parametrize("name", po.suite.names())
def test_interpreter_matches_reference(name):
    entry, args, expected = _python_case(name, 60_000, 2)
    po.interpret(entry.kernel, **args)
    assert_same_arrays(args, expected)


@pytest.mark.parametrize("algorithm", ["pluto", "feautrier"])
@pytest.mark.parametrize("name", po.suite.names())
def test_loops_with_parallel_loops_run_backwards_match_reference(name, algorithm):
    """The loop AST the emitters get, run in Python with every parallel loop's iterations in
    reverse order (polyopt.codegen.ast_interpreter): a parallel mark on a loop that carries a
    dependence fails here deterministically, where the threaded code fails only sometimes."""
    entry, args, expected = _python_case(name, 20_000, 3)
    compiled = po.compile(entry.kernel, algorithm=algorithm)
    bound = bind_arguments(compiled.scop, (), args)  # (the kernel's Scop, or its scalar expansion)
    run_loop_ast(compiled.scop, compiled.loops, bound.params, bound.scalars, bound.arrays)
    assert_same_arrays(args, expected)
