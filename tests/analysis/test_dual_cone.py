"""The double description's dual cones (polyopt.analysis.dual_cone) are isl's ``coefficients``
of the same rational polyhedra, on hand-picked ones (equalities, lines, unbounded directions,
parameters, a single point) and on random ones; ``coefficients`` is isl's where isl finishes
within its budget, the double description's where it does not."""
import islpy as isl
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from polyopt.analysis import dual_cone
from polyopt.analysis.dual_cone import by_double_description, coefficients, generators

POLYHEDRA = [
    "{ [i] : 0 <= i <= 10 }",
    "{ [i, j] : 0 <= i and 0 <= j }",                              # a pointed cone: rays only
    "{ [i, j] : i + j = 3 }",                                       # a line
    "{ [i, j] : 0 <= i <= 4 }",                                     # j free: a line in the cone
    "{ [i, j, k] : i = 2j and 0 <= j <= 5 and k >= i }",
    "{ [i, j] : i = 3 and j = -2 }",                                # one point
    "[N] -> { [i, j] : 0 <= i < N and i <= j < N }",
    "[N, M] -> { [i] : 0 <= i < N and i <= M }",
    # the dependence piece on which isl's own elimination took 10 s (issue 19, seed 4102)
    "[N] -> { [S1[i0_1, i0_2, i0_3] -> S1[i0_1', i0_2', i0_3']] : i0_1 >= 0 and i0_2 >= 0 and "
    "i0_3 >= -4 + N + i0_1 and i0_3 >= 0 and i0_1' >= i0_3 and 3 - N + i0_1 + i0_2 <= i0_1' <= "
    "6 - N + i0_1 - 2i0_2 and i0_1' <= -2 + N and 2i0_1' <= 1 + i0_1 + i0_3 and i0_2' > 2i0_1 + "
    "i0_2 - 2i0_1' and 0 <= i0_2' <= 1 + i0_2 and i0_2' <= 2 + 2i0_1 - 2i0_1' and i0_3' >= -3 + N "
    "- i0_2 + i0_1' and 2i0_1 + i0_3 - 2i0_1' < i0_3' <= 1 + i0_3 and i0_3' <= 2 + i0_1 - i0_2 }",
]


def _rational(points: isl.BasicSet) -> isl.BasicSet:
    """The same constraints over the rationals (isl tightens integer sets' constraints)."""
    return isl.BasicSet(str(points).replace("{ ", "{ rat: ", 1))


@pytest.mark.parametrize("text", POLYHEDRA[:-1])
def test_the_double_description_gives_isls_cone(text):
    points = isl.BasicSet(text)
    cone = by_double_description(points)
    assert cone.get_space() == points.coefficients().get_space()
    assert cone.is_rational()
    assert cone.is_equal(_rational(points).coefficients())
    assert coefficients(points).is_equal(points.coefficients())  # (isl's, within its budget)


def test_a_cone_isl_takes_seconds_for_comes_from_the_double_description():
    points = isl.BasicSet(POLYHEDRA[-1])
    fast = coefficients(points)
    assert fast.is_equal(by_double_description(points))
    assert len(fast.get_constraints()) == 88  # as many rows as isl's own cone (after 10 s)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dims=st.integers(1, 3), params=st.integers(0, 1),
       rows=st.lists(st.tuples(st.lists(st.integers(-3, 3), min_size=4, max_size=4), st.integers(-6, 6),
                               st.booleans()), min_size=1, max_size=6))
def test_random_polyhedra(dims, params, rows):
    names = [f"x{k}" for k in range(dims)]
    pars = [f"p{k}" for k in range(params)]
    terms = pars + names
    constraints = []
    for coeffs, constant, equality in rows:
        form = " + ".join(f"{c}*{v}" for c, v in zip(coeffs, terms) if c) or "0"
        constraints.append(f"{form} + {constant} {'=' if equality and len(constraints) % 3 == 0 else '>='} 0")
    text = f"[{', '.join(pars)}] -> {{ rat: [{', '.join(names)}] : {' and '.join(constraints)} }}"
    points = isl.BasicSet(text).remove_divs()
    if points.is_empty():
        return
    assert by_double_description(points).is_equal(points.coefficients()), text


def test_generators_of_a_quadrant_with_a_line():
    """{ y : y0 >= 0, y1 >= 0 } in three dimensions: rays e0 and e1, the line e2."""
    rays, lines = generators(3, [(1, 0, 0), (0, 1, 0)])
    assert sorted(rays) == [(0, 1, 0), (1, 0, 0)]
    assert len(lines) == 1 and lines[0] in ((0, 0, 1), (0, 0, -1))


def test_too_many_generators_hand_the_cone_to_isl(monkeypatch):
    monkeypatch.setattr(dual_cone, "MAX_GENERATORS", 1)
    points = isl.BasicSet("{ [i, j, k] : 0 <= i <= 1 and 0 <= j <= 1 and 0 <= k <= 1 }")
    assert by_double_description(points).is_equal(points.coefficients())
