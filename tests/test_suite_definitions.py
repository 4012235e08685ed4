"""The kernel suite's definitions: registry, presets, inputs, and, for every kernel at MINI size,
agreement of its DSL body (run as plain Python loops) with its numpy reference."""
from __future__ import annotations

import inspect

import numpy as np
import pytest

try:
    from polyopt import suite
except (ImportError, AttributeError) as exc:  # the core (polyopt.kernel, f64, ...) is missing
    pytest.skip(f"polyopt.suite cannot be imported yet: {exc}", allow_module_level=True)

from python_loops import run_python_loops

PRESETS = ("MINI", "SMALL", "MEDIUM", "LARGE", "EXTRALARGE")
NAMES = ["correlation", "covariance", "gemm", "gemver", "gesummv", "symm", "syr2k", "syrk",
         "trmm", "2mm", "3mm", "atax", "bicg", "doitgen", "mvt", "cholesky", "durbin",
         "gramschmidt", "lu", "ludcmp", "trisolv", "deriche", "floyd-warshall", "nussinov", "adi",
         "fdtd-2d", "heat-3d", "jacobi-1d", "jacobi-2d", "seidel-2d"]
CATEGORIES = {"datamining", "linear-algebra/blas", "linear-algebra/kernels",
              "linear-algebra/solvers", "medley", "stencils"}


def _python_function(kernel):
    return getattr(kernel, "py_function", None) or kernel.__wrapped__


def _mini_inputs(entry):
    return entry.inputs(entry.sizes("MINI"))


def _arrays(args):
    return {k: v for k, v in args.items() if isinstance(v, np.ndarray)}


def test_names_are_the_30_polybench_kernels_in_order():
    assert suite.names() == NAMES


def test_unknown_name_raises_key_error_listing_valid_names():
    with pytest.raises(KeyError, match="floyd-warshall"):
        suite.get("floyd_warshall")


@pytest.mark.parametrize("name", NAMES)
def test_entry_describes_its_kernel(name):
    entry = suite.get(name)
    assert entry.name == name
    assert entry.category in CATEGORIES
    assert _python_function(entry.kernel).__name__.isidentifier()


@pytest.mark.parametrize("name", NAMES)
def test_sizes_exist_for_all_presets(name):
    entry = suite.get(name)
    params = entry.sizes("MINI").keys()
    for preset in PRESETS:
        sizes = entry.sizes(preset)
        assert sizes.keys() == params
        assert all(type(v) is int and v > 0 for v in sizes.values())
        assert entry.flops(sizes) > 0
    assert entry.flops(entry.sizes("EXTRALARGE")) > 100 * entry.flops(entry.sizes("MINI"))
    with pytest.raises(ValueError):
        entry.sizes("HUGE")


@pytest.mark.parametrize("name", NAMES)
def test_inputs_are_deterministic_finite_and_contiguous(name):
    entry = suite.get(name)
    first, second = _mini_inputs(entry), _mini_inputs(entry)
    assert sorted(first) == sorted(inspect.signature(_python_function(entry.kernel)).parameters)
    for key, value in first.items():
        if isinstance(value, np.ndarray):
            assert value.dtype == np.float64 and value.flags.c_contiguous and value.flags.writeable
            assert np.isfinite(value).all(), key
            assert value is not second[key]
            np.testing.assert_array_equal(value, second[key])
        else:
            assert type(value) in (int, float) and value == second[key], key
    for value in _arrays(entry.inputs(entry.sizes("MINI"), dtype=np.float32)).values():
        assert value.dtype == np.float32 and value.flags.c_contiguous


@pytest.mark.parametrize("name", NAMES)
def test_reference_matches_python_loops(name):
    entry = suite.get(name)
    initial, expected, actual = _mini_inputs(entry), _mini_inputs(entry), _mini_inputs(entry)
    entry.reference(**expected)
    run_python_loops(entry.kernel, actual)
    changed = False
    for key, value in _arrays(expected).items():
        assert np.isfinite(value).all(), f"{name}: {key} is not finite"
        np.testing.assert_allclose(actual[key], value, rtol=1e-10, atol=1e-12,
                                   err_msg=f"{name}: array {key}")
        changed |= not np.array_equal(value, initial[key])
    assert changed, f"{name}: the kernel changed no array"


@pytest.mark.parametrize("name", NAMES)
def test_frontend_accepts_kernel(name):
    kernel = suite.get(name).kernel
    if not hasattr(type(kernel), "scop"):
        pytest.skip("this polyopt kernel object exposes no parsed scop")
    assert kernel.scop.statements


def test_python_loops_infers_and_checks_sizes():
    source = '''
def scale(alpha: f64, TSTEPS: int, x: f64["N"], y: f64["N+1"]):
    for t in range(TSTEPS):
        for i in range(N):
            y[i + 1] = y[i] + alpha * x[i]
'''
    x, y = np.ones(3), np.zeros(4)
    run_python_loops(source, dict(alpha=2.0, TSTEPS=1, x=x, y=y))
    np.testing.assert_array_equal(y, [0.0, 2.0, 4.0, 6.0])
    with pytest.raises(ValueError):
        run_python_loops(source, dict(alpha=2.0, TSTEPS=1, x=x, y=np.zeros(5)))
