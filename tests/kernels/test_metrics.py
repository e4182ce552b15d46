"""The Euclidean metric (rnshmc._kernels._metrics.EuclideanMetric): momenta p ~ N(0, M) and
the kinetic energy p^T M^-1 p / 2 for an identity, diagonal and dense inverse mass matrix, and
the validation of the inverse mass matrix."""
import numpy as np
import pytest

from rnshmc._kernels._metrics import EuclideanMetric

from testkit import dense_inverse_mass, gaussian_for_leapfrog, make_chain, rng_seed

MASS_KINDS = ["identity", "diagonal", "dense"]


@pytest.mark.parametrize("kind", MASS_KINDS)
def test_momentum_covariance_is_the_mass_matrix(kind):
    """energy_error_of_one_step draws p ~ N(0, M) and takes one step. From the mode of a
    Gaussian (g0 = 0) the energy error is eps^4/8 p^T M^-1 P M^-1 P M^-1 p, whose mean is
    eps^4/8 tr((M^-1 P)^2) exactly when Cov(p) = M (a momentum drawn with the wrong
    covariance, e.g. M^-1 or the wrong Cholesky factor, gives another value)."""
    target, mean, P, inv_mass = gaussian_for_leapfrog(kind, seed=10, dim=4)
    Minv = dense_inverse_mass(inv_mass, mean.size)
    chain = make_chain(target, mean.size, inv_mass)
    chain.set_position(mean)
    eps = 0.5 / np.sqrt(np.max(np.linalg.eigvals(Minv @ P).real))
    generator = np.random.default_rng(rng_seed(11))
    dH = np.array([chain.energy_error_of_one_step(generator, eps) for _ in range(4000)])
    expected = eps ** 4 / 8 * np.trace(Minv @ P @ Minv @ P)
    assert np.all(dH >= -1e-12 * expected)
    assert abs(dH.mean() - expected) < 5 * dH.std() / np.sqrt(dH.size)
    # the chain state is untouched
    np.testing.assert_array_equal(chain.position, mean)
    assert chain.log_density == 0.0


@pytest.mark.parametrize("kind", MASS_KINDS)
def test_kinetic_energy(kind):
    """kinetic_energy(p) = p^T M^-1 p / 2 with the inverse mass as given; ``inverse_mass``
    returns it (None for the identity) as a copy, and the metric keeps its own copy."""
    _, mean, _, inv_mass = gaussian_for_leapfrog(kind, seed=12, dim=4)
    d = mean.size
    metric = EuclideanMetric(d, inv_mass)
    assert metric.dim == d
    Minv = dense_inverse_mass(inv_mass, d).copy()
    rng = np.random.default_rng(rng_seed(13))
    for p in rng.standard_normal((5, d)) * 3.0:
        assert metric.kinetic_energy(p) == pytest.approx(0.5 * p @ Minv @ p, rel=1e-13)
    if inv_mass is None:
        assert metric.inverse_mass is None
    else:
        given = inv_mass.copy()
        np.testing.assert_array_equal(metric.inverse_mass, given)
        metric.inverse_mass[...] = 7.0     # a copy: the metric is unchanged
        inv_mass[...] = 7.0                # and so is changing the caller's array afterwards
        np.testing.assert_array_equal(metric.inverse_mass, given)
        p = np.ones(d)
        assert metric.kinetic_energy(p) == pytest.approx(0.5 * p @ Minv @ p, rel=1e-13)
    with pytest.raises(ValueError):
        metric.kinetic_energy(np.ones(d + 1))


def test_set_inverse_mass_switches_the_kind():
    metric = EuclideanMetric(2, np.array([2.0, 0.5]))
    p = np.array([1.0, 2.0])
    assert metric.kinetic_energy(p) == pytest.approx(0.5 * (2.0 + 0.5 * 4.0))
    metric.set_inverse_mass(np.array([[2.0, 0.5], [0.5, 1.0]]))
    assert metric.kinetic_energy(p) == pytest.approx(0.5 * (2.0 + 2 * 0.5 * 2.0 + 4.0))
    metric.set_inverse_mass(None)
    assert metric.inverse_mass is None
    assert metric.kinetic_energy(p) == pytest.approx(0.5 * 5.0)


@pytest.mark.parametrize("bad", [
    np.ones(3),                                   # wrong shape
    -np.ones(2),                                  # not positive
    np.array([1.0, np.nan]),                      # not finite
    np.array([[1.0, 2.0], [0.0, 1.0]]),           # not symmetric
    np.array([[1.0, 2.0], [2.0, 1.0]]),           # not positive definite
    np.ones((2, 3)),                              # wrong shape
], ids=["shape-3", "negative", "nan", "asymmetric", "not-pd", "shape-2x3"])
def test_set_inverse_mass_rejects_bad_matrices(bad):
    metric = EuclideanMetric(2)
    with pytest.raises(ValueError):
        metric.set_inverse_mass(bad)
    with pytest.raises(ValueError):
        EuclideanMetric(2, bad)
    # a rejected matrix leaves the metric as it was (the identity)
    assert metric.inverse_mass is None
    assert metric.kinetic_energy(np.array([1.0, 2.0])) == pytest.approx(2.5)
