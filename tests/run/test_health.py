"""Health warnings after sampling: R-hat, bulk and tail ESS per chain and
divergences, as Stan and PyMC give them; each fires when it should and not on a healthy run.
And the bulk/tail ESS against ArviZ's."""
import warnings

import numpy as np
import pytest

import rnshmc
from rnshmc.diagnostics import SamplingWarning, ess_bulk, ess_tail, health
from rnshmc.models import Gaussian, GaussianMixture
from testkit import rng_seed


def sample_recording(sampler, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = sampler.sample(progress=False, **kwargs)
    return result, [str(w.message) for w in caught if issubclass(w.category, SamplingWarning)]


def test_a_healthy_run_gives_no_warning():
    model = Gaussian(np.zeros(3), covariance=np.eye(3))
    result, messages = sample_recording(rnshmc.HMC(model, n_steps=5), draws=1000, tune=500,
                                        chains=4, rng=rng_seed(0))
    assert messages == [] and result.health["problems"] == []
    assert result.health["rhat_max"] < 1.01 and result.health["ess_bulk_min"] > 400
    assert result.health["n_divergent"] == 0
    assert result.converged is True and result.convergence_problems == []


def test_chains_in_different_modes_fail_rhat():
    """Two well-separated modes, two chains started in each: every chain stays in its own."""
    model = GaussianMixture(means=((-4.0, 0.0), (4.0, 0.0)), variance=0.1)
    init = np.array([[-4.0, 0.0], [4.0, 0.0]])
    result, messages = sample_recording(rnshmc.HMC(model, n_steps=5), draws=500, tune=200,
                                        chains=2, rng=rng_seed(1), init=init)
    assert result.health["rhat_max"] > 1.5
    assert len(messages) == 1 and "R-hat above 1.01" in messages[0]
    assert not result.converged and result.convergence_problems[0].startswith("R-hat ")


def test_too_few_effective_draws_fail_the_ess_checks():
    """A strongly correlated Gaussian, HMC with a tiny fixed step: a slow random walk."""
    model = rnshmc.models.correlated_gaussian_2d()
    result, messages = sample_recording(rnshmc.HMC(model, step_size=0.02, n_steps=3),
                                        draws=400, tune=0, chains=2, rng=rng_seed(2))
    assert result.health["ess_bulk_min"] < 200
    assert len(messages) == 1 and "bulk ESS" in messages[0] and "tail ESS" in messages[0]
    assert not result.converged
    assert [p.split()[0] for p in result.convergence_problems if "ESS" in p] == ["bulk", "tail"]


def test_divergences_are_counted_and_warned():
    model = Gaussian(np.zeros(2), covariance=np.diag([1.0, 1e-4]))
    result, messages = sample_recording(
        rnshmc.HMC(model, step_size=0.021, n_steps=10, max_energy_error=50.0),
        draws=500, tune=0, chains=2, rng=rng_seed(3), init=np.zeros(2))
    n = int(result.diverging.sum())
    assert n > 0 and result.health["n_divergent"] == n
    assert any(f"{n} divergent transitions" in m for m in messages)
    assert not any("diverg" in p for p in result.convergence_problems)  # (not a convergence check)


def test_health_checks_survive_saving(tmp_path):
    model = Gaussian(np.zeros(2), covariance=np.eye(2))
    result, _ = sample_recording(rnshmc.HMC(model, n_steps=3), draws=30, tune=30, chains=2,
                                 rng=rng_seed(4))
    path = tmp_path / "r.npz"
    result.save(path)
    again = rnshmc.load(path)
    assert again.health["problems"] == result.health["problems"]
    assert again.health["rhat_max"] == result.health["rhat_max"]
    assert again.converged == result.converged is False  # (30 draws: too few ESS)
    assert again.convergence_problems == result.convergence_problems


def test_a_chain_that_never_moves_or_a_short_run_has_not_converged():
    model = Gaussian(np.zeros(2), covariance=np.eye(2))
    # chain 1's step is so long that every proposal is rejected
    result, _ = sample_recording(rnshmc.HMC(model, step_size=[0.5, 1e3], n_steps=3),
                                 draws=400, tune=0, chains=2, rng=rng_seed(5))
    assert not result.accepted[1].any() and not result.converged
    assert "chains [1] never moved" in result.convergence_problems
    short, _ = sample_recording(rnshmc.HMC(model, n_steps=3), draws=5, tune=20, chains=2,
                                rng=rng_seed(5))
    assert short.convergence_problems == ["too few draws (5 per chain) to tell"]


def test_too_short_runs_are_not_checked():
    checks, problems = health(np.zeros((2, 5, 3)))
    assert problems == [] and np.isnan(checks["rhat_max"])


@pytest.mark.parametrize("seed", [0, 1])
def test_bulk_and_tail_ess_match_arviz(seed):
    az = pytest.importorskip("arviz")
    rng = np.random.default_rng(seed)
    x = np.zeros((4, 1500, 3))
    for t in range(1, x.shape[1]):
        x[:, t] = 0.8 * x[:, t - 1] + rng.standard_normal((4, 3))
    x[..., 2] = np.exp(x[..., 2])  # skewed: the tail ESS differs from the bulk's
    for k in range(3):
        assert ess_bulk(x)[k] == pytest.approx(float(az.ess(x[..., k], method="bulk")), rel=0.01)
        assert ess_tail(x)[k] == pytest.approx(float(az.ess(x[..., k], method="tail")), rel=0.01)
