"""Simulation-based calibration in CI (rnshmc.testing.sbc; docs/guide/calibration.md): a
fast subset of samplers on the cheapest problem (a 5-covariate logistic regression, 100
replications, ranks among 49 thinned draws), each passing at the family-wise level 0.01 (a
calibrated sampler fails with probability at most 0.01 on any machine); and the test's power:
a posterior tempered by 3 (too narrow) fails."""
import dataclasses

import numpy as np
import pytest

import rnshmc
from rnshmc.models.calibration import (CalibrationProblem, hierarchical_normal_problem,
                                       logistic_problem)
from rnshmc.testing import sbc
from testkit import rng_seed

CONFIGURATIONS = {
    "NUTS": (lambda t: rnshmc.NUTS(t), dict(draws=300, tune=200)),
    "HMC": (lambda t: rnshmc.HMC(t), dict(draws=400, tune=200)),
    "ARNSHMC": (lambda t: rnshmc.ARNSHMC(t, n_hidden=100), dict(draws=400)),
    "rnshmc.sample": (None, {}),
}


@pytest.mark.parametrize("name", list(CONFIGURATIONS))
def test_calibrated_on_a_logistic_regression(name):
    make, lengths = CONFIGURATIONS[name]
    result = sbc(logistic_problem(), make, replications=100, chains=2, thin=49,
                 rng=rng_seed(1), pool=None, **lengths)
    assert result.ranks.shape == (100, 5) and result.ranks.min() >= 0
    assert result.ranks.max() <= 49 and result.n_ranks == 50
    assert result.passed, (f"{name}: ECDF p-values {np.round(result.ecdf_p, 4)} (family-wise "
                           f"0.01: each above {0.01 / 5})")


def tempered(problem, power):
    """``problem`` whose posterior is raised to ``power`` (narrower than the true one)."""
    def model(data):
        target = problem.model(data)
        return rnshmc.Target(None, logp_and_grad=lambda q: tuple(
            power * v for v in target.log_density_gradient(q)), dim=target.dim)
    return dataclasses.replace(problem, model=model)


def test_a_posterior_too_narrow_fails():
    result = sbc(tempered(logistic_problem(), 3.0), lambda t: rnshmc.NUTS(t),
                 replications=100, draws=300, tune=200, chains=2, thin=49, rng=rng_seed(2),
                 pool=None)
    assert not result.passed
    assert result.worst_p < 1e-4


def test_the_same_seed_gives_the_same_ranks():
    a = sbc(logistic_problem(), lambda t: rnshmc.NUTS(t), replications=10, draws=100, tune=100,
            chains=2, thin=19, rng=rng_seed(3), pool=None)
    b = sbc(logistic_problem(), lambda t: rnshmc.NUTS(t), replications=10, draws=100, tune=100,
            chains=2, thin=19, rng=rng_seed(3), pool=None)
    np.testing.assert_array_equal(a.ranks, b.ranks)


def test_too_few_draws_or_effective_draws_are_said():
    with pytest.raises(ValueError, match="fewer than thin"):
        sbc(logistic_problem(), lambda t: rnshmc.NUTS(t), replications=10, draws=5, tune=50,
            chains=2, thin=19, rng=rng_seed(4), pool=None)
    with pytest.warns(RuntimeWarning, match="min bulk ESS under thin"):
        sbc(logistic_problem(), lambda t: rnshmc.HMC(t, n_steps=1, step_size=0.01),
            replications=10, draws=200, tune=0, chains=1, thin=99, rng=rng_seed(5),
            pool=None)


def test_the_problems_draw_from_their_priors_and_simulate_their_data():
    rng = np.random.default_rng(rng_seed(6))
    for problem in (logistic_problem(), hierarchical_normal_problem()):
        assert isinstance(problem, CalibrationProblem)
        theta = problem.prior(rng)
        assert theta.shape == (problem.dim,) and np.all(np.isfinite(theta))
        target = problem.model(problem.simulate(theta, rng))
        assert target.dim == problem.dim and np.isfinite(target.log_density(theta))
        assert len(problem.names) == problem.dim
    # the logistic prior's draws: N(0, I) coefficients
    draws = np.array([logistic_problem().prior(rng) for _ in range(4000)])
    assert abs(draws.mean()) < 4 * 1 / np.sqrt(draws.size)
    assert abs(draws.var() - 1.0) < 4 * np.sqrt(2.0 / draws.size)
