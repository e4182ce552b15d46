"""Surrogate NUTS as the sampling kernel of the surrogate samplers (``kernel="nuts"``;
docs/algorithms.md, surrogate NUTS): exact with deliberately poor surrogates (a network of a
few units, a GP of a few points) on targets with known moments, for more than one seed; the
kernel's metric and step size adapted on the surrogate alone, with no exact evaluation; and
a chain handed to exact dynamics adapts its step size afresh there. (Same draws on threads and
processes, resume and Ctrl-C: tests/samplers/test_contract.py.)"""
import warnings

import numpy as np
import pytest

import rnshmc
from testkit import banana, check_covariance, check_mean, correlated_gaussian, rng_seed


def quiet(sampler, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sampler.sample(*args, progress=False, **kwargs)


SAMPLERS = {
    "RNSHMC": lambda m: rnshmc.RNSHMC(m, n_hidden=20, kernel="nuts", trust=False),
    "ARNSHMC": lambda m: rnshmc.ARNSHMC(m, n_hidden=20, kernel="nuts", trust=False),
    "ARNSHMC, 3 inner": lambda m: rnshmc.ARNSHMC(m, n_hidden=20, kernel="nuts", inner_steps=3,
                                                  trust=False),
    "GP-HMC": lambda m: rnshmc.RNSHMC(m, kernel="nuts", trust=False, surrogate=dict(
        kind="gaussian_process", n_train=15, training_data="states")),
}


@pytest.mark.parametrize("name", list(SAMPLERS))
@pytest.mark.parametrize("seed", [0, 1])
def test_exact_on_a_correlated_gaussian_with_a_poor_surrogate(name, seed):
    model, mean, cov = correlated_gaussian(dim=4, seed=seed)
    result = quiet(SAMPLERS[name](model), 2000, tune=100, chains=4, rng=rng_seed(seed))
    assert result["surrogate_n_steps"].tolist() == [0] * 4  # (trees: no static length)
    check_mean(result.samples, mean)
    check_covariance(result.samples, mean, cov)


@pytest.mark.parametrize("seed", [0, 1])
def test_exact_on_a_banana(seed):
    target, mean, cov = banana(twist=0.15)
    result = quiet(SAMPLERS["ARNSHMC"](target), 2000, tune=100, chains=4, rng=rng_seed(seed),
                   pool=None)
    check_mean(result.samples, mean)
    check_covariance(result.samples, mean, cov)


def test_the_kernel_is_adapted_on_the_surrogate_alone():
    """The metric and step size come from NUTS on the surrogate: training costs one exact
    density per chain (where sampling starts), and sampling one per transition that moved."""
    model, _, cov = correlated_gaussian(dim=4, seed=0)
    sampler = rnshmc.RNSHMC(model, n_hidden=200, kernel="nuts", trust=False)
    result = quiet(sampler, 300, tune=100, chains=2, rng=rng_seed(0))
    assert result.cost["phases"]["training"]["density_evals"] == 2
    assert result.cost["phases"]["training"]["gradient_evals"] == 0
    moved = (np.diff(result.samples, axis=1) != 0).any(axis=2).sum(axis=1)
    assert np.all(result["n_density_evals_sampling"] >= moved)
    assert np.all(result["n_density_evals_sampling"] <= 300)
    # a dense metric from the surrogate's draws and gradients: the correlations are in it
    inverse_mass = result.inverse_mass_matrix[0]
    assert inverse_mass.shape == (4, 4)
    correlation = lambda m: m / np.sqrt(np.outer(np.diag(m), np.diag(m)))
    np.testing.assert_allclose(correlation(inverse_mass), correlation(cov), atol=0.25)


def test_refuses_what_it_cannot_combine():
    model, _, _ = correlated_gaussian(dim=2, seed=0)
    with pytest.raises(ValueError, match="kernel must be one of"):
        rnshmc.RNSHMC(model, kernel="static")
    with pytest.raises(ValueError, match="delayed_acceptance"):
        rnshmc.RNSHMC(model, kernel="nuts", delayed_acceptance=True)
    with pytest.raises(ValueError, match="inner_steps"):
        rnshmc.RNSHMC(model, kernel="nuts", inner_steps=0)


@pytest.mark.parametrize("kernel", ["nuts", "hmc"])
def test_a_fallen_back_chain_accepts_as_the_exploration_did(kernel):
    """A surrogate of 3 units, watched with ratio 1 (a window accepting less than the
    exploration did distrusts it), falls back to exact dynamics; the fallen-back chain
    re-adapts its step size where it is (recorded in the trust event) and accepts as the
    exploration did."""
    model, mean, cov = correlated_gaussian(dim=4, seed=0)
    sampler = rnshmc.RNSHMC(model, n_hidden=3, kernel="nuts",
                            trust=dict(ratio=1.0, max_refits=0, kernel=kernel))
    result = quiet(sampler, 600, tune=200, chains=2, rng=rng_seed(0), pool=None)
    assert result["fallback"].all()
    for chain in range(2):
        exact = result["exact_dynamics"][chain]
        event = result["trust_events"][chain][-1]
        assert event["action"] == "fallback" and "rewarm_step_size" in event
        assert exact[event["iteration"]:].all() and not exact[:event["iteration"]].any()
        reference = result["exploration_acceptance_rate"][chain]
        assert result.accept_prob[chain][exact].mean() > 0.75 * reference


def test_a_window_whose_metric_cannot_be_estimated_keeps_the_metric(monkeypatch):
    """Where the surrogate's gradients in a warm-up window give no metric (a surrogate far off
    extrapolates with huge gradients: eigh fails on the latent-GP Poisson posterior), the
    warm-up keeps the metric it had and the sampler stays exact."""
    from rnshmc.samplers.phases import fit

    calls = []

    def fails(draws, gradients):
        calls.append(len(draws))
        raise np.linalg.LinAlgError("Eigenvalues did not converge")

    monkeypatch.setattr(fit, "fisher_low_rank", fails)
    model, mean, cov = correlated_gaussian(dim=4, seed=0)
    sampler = rnshmc.RNSHMC(model, n_hidden=200, kernel="nuts", trust=False,
                            explore=dict(inverse_mass_matrix=np.diag(np.diag(cov))))
    result = quiet(sampler, 2000, tune=100, chains=4, rng=rng_seed(0))
    assert calls  # (the warm-up's windows tried)
    np.testing.assert_array_equal(result.inverse_mass_matrix[0], np.diag(np.diag(cov)))
    check_mean(result.samples, mean)
    check_covariance(result.samples, mean, cov)
