"""The dense LAPACK wrappers of ``rnshmc._kernels._lapack`` against NumPy (the band ones are
tested with the FEM solver in test_fem.py)."""
import numpy as np
import pytest

from rnshmc._kernels import _lapack


def spd(rng, n):
    a = rng.standard_normal((n, n))
    return a @ a.T + n * np.eye(n)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("n", [1, 3, 17])
def test_potrf_is_the_lower_cholesky_factor(seed, n):
    a = spd(np.random.default_rng(seed), n)
    work = a.copy()
    assert _lapack._potrf_memview(work) == 0
    np.testing.assert_allclose(np.tril(work), np.linalg.cholesky(a), rtol=1e-12, atol=1e-12)


def test_potrf_reports_the_first_non_positive_minor():
    a = np.diag([1.0, 2.0, -1.0, 4.0])
    assert _lapack._potrf_memview(a) == 3


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("n", [1, 4, 12])
def test_syev_eigenpairs(seed, n):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n, n))
    a = a + a.T
    vectors, w = a.copy(), np.empty(n)
    assert _lapack._syev_memview(vectors, w) == 0
    np.testing.assert_allclose(w, np.linalg.eigvalsh(a), rtol=1e-12, atol=1e-12)
    # rows are the eigenvectors, orthonormal
    np.testing.assert_allclose(vectors @ a, w[:, None] * vectors, atol=1e-11)
    np.testing.assert_allclose(vectors @ vectors.T, np.eye(n), atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("n", [1, 2, 9])
def test_gesv_solves_a_nonsymmetric_system(seed, n):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n, n)) + 2 * np.eye(n)
    b = rng.standard_normal(n)
    x = b.copy()
    assert _lapack._gesv_memview(a.copy(), x) == 0
    np.testing.assert_allclose(x, np.linalg.solve(a, b), rtol=1e-10, atol=1e-12)


def test_gesv_reports_a_singular_matrix():
    a = np.array([[1.0, 2.0], [2.0, 4.0]])
    assert _lapack._gesv_memview(a, np.ones(2)) > 0
