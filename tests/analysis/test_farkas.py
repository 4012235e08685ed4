"""The affine Farkas lemma's dual cones (polyopt.analysis.farkas): a product's cone, built as the
sum of its factors' cones, is the one isl computes for the whole relation."""
import islpy as isl
import pytest

from polyopt.analysis.farkas import Unknowns, nonnegative_on, product_cone

PRODUCTS = [
    "[N] -> { A[i, j] -> B[k] : 0 <= i < N and 0 <= j <= i and 0 <= k < N and k >= N - 5 }",
    "[N, M] -> { A[i] -> B[k, l] : 0 <= i < N and 2i >= N - 3 and 0 <= k < M and k <= l <= N }",
    "[N, M] -> { A[i] -> B[k, l] : 0 <= i < N and 0 <= k < M and k <= l <= N and M <= N }",
    "[N] -> { A[i] -> B[k] : 0 <= i < N and 0 <= k < 3 }",
    # strided and shifted, as the long fuzz's random nests write them (a mod 2 on the source)
    "[N] -> { S0[a, b, c] -> S1[x, y] : c = 5 - N + a and (a) mod 2 = 0 and 0 <= a < N and "
    "4 - N + a <= b <= 7 - N + a and 0 <= x < N and x - 2 <= y <= x + 1 and y < N }",
]


def _integer_rows(cone: isl.BasicSet) -> isl.BasicSet:
    """The cone's constraints read as constraints on integers (as nonnegative_on reads them)."""
    rows = isl.BasicSet.universe(cone.get_space())
    for constraint in cone.get_constraints():
        rows = rows.add_constraint(constraint)
    return rows


@pytest.mark.parametrize("relation", PRODUCTS)
def test_a_products_cone_is_the_sum_of_its_factors_cones(relation):
    wrapped = isl.BasicMap(relation).detect_equalities().remove_divs().wrap()
    summed = product_cone(wrapped)
    assert summed is not None
    assert _integer_rows(summed).is_equal(_integer_rows(wrapped.coefficients()))


def test_a_linked_relation_is_no_product():
    wrapped = isl.BasicMap("[N] -> { A[i] -> B[k] : 0 <= i < k < N }").wrap()
    assert product_cone(wrapped) is None


def test_nonnegative_on_a_product_is_farkas_exact():
    """f = c + p*N - i + k >= 0 on { A[i] -> B[k] : 0 <= i < N, 0 <= k < N } (N >= 1): its
    minimum, at i = N - 1 and k = 0, is c + (p - 1) N + 1, so the valid (c, p) are p >= 1 with
    c + p >= 0 -- no more, no fewer."""
    relation = isl.BasicMap("[N] -> { A[i] -> B[k] : 0 <= i < N and 0 <= k < N }")
    rows = nonnegative_on(relation, {"c": 1}, {"N": {"p": 1}}, [{1: -1}], [{1: 1}])
    valid = Unknowns(("c", "p")).basic_set(rows)
    assert valid.is_equal(isl.BasicSet("{ [c, p] : p >= 1 and c + p >= 0 }"))
