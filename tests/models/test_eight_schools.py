"""Eight schools (``rnshmc.models.hard.eight_schools``), both parametrisations: the log density
against scipy.stats's densities, and the gradient against finite differences."""
import numpy as np
import pytest
from scipy import stats

from rnshmc.models.hard import eight_schools
from testkit import rng_seed

Y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
SIGMA = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])


def scipy_log_density(q, centred):
    """The same posterior from scipy.stats, with the Jacobian of tau = exp(log tau)."""
    mu, log_tau, z = q[0], q[1], q[2:]
    tau = np.exp(log_tau)
    theta = z if centred else mu + tau * z
    school = (stats.norm.logpdf(theta, mu, tau) if centred
              else stats.norm.logpdf(z)).sum()
    return (stats.norm.logpdf(mu, 0, 5) + stats.halfcauchy.logpdf(tau, scale=5) + log_tau
            + school + stats.norm.logpdf(Y, theta, SIGMA).sum())


def points(centred, n=3):
    rng = np.random.default_rng(rng_seed(11))
    for _ in range(n):
        q = rng.standard_normal(10)
        q[0] = 5 * q[0]
        if centred:  # (school effects about mu, at the scale tau)
            q[2:] = q[0] + np.exp(q[1]) * q[2:]
        yield q


@pytest.mark.parametrize("centred", [False, True])
def test_log_density_is_scipys(centred):
    target, reference = eight_schools(centred=centred)
    assert reference is None and target.dim == 10
    for q in points(centred):
        np.testing.assert_allclose(target.log_density(q), scipy_log_density(q, centred),
                                   rtol=1e-12, atol=1e-10)


@pytest.mark.parametrize("centred", [False, True])
def test_gradient_matches_finite_differences(centred):
    target, _ = eight_schools(centred=centred)
    for q in points(centred):
        logp, gradient = target.log_density_gradient(q)
        h = 1e-5 * max(1.0, np.abs(q).max())
        numeric = [(target.log_density(q + h * e) - target.log_density(q - h * e)) / (2 * h)
                   for e in np.eye(target.dim)]
        np.testing.assert_allclose(gradient, numeric, rtol=1e-6,
                                   atol=1e-7 * max(1.0, abs(logp)))


def test_an_overflowing_tau_is_outside_the_support():
    target, _ = eight_schools()
    q = np.zeros(10)
    q[1] = 1000.0
    logp, gradient = target.log_density_gradient(q)
    assert logp == -np.inf and np.all(gradient == 0)
