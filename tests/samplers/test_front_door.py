"""``rnshmc.sample(model, ess=...)``: the sampler it picks from what the model offers, and each
of its default paths exact on targets with known moments (several seeds)."""
import warnings

import pytest

import rnshmc
from rnshmc.auto import choose_sampler
from rnshmc.diagnostics import SamplingWarning
from rnshmc.targets import without_gradient
from testkit import check_covariance, check_mean, correlated_gaussian, rng_seed


class CostlyGaussian(rnshmc.models.Gaussian):
    """A Gaussian that declares the operation count of a costly model (a PDE solve's), so
    that surrogate dynamics pay."""
    density_flops = 1e7


def costly_gaussian():
    model, mean, cov = correlated_gaussian()
    return CostlyGaussian(mean, covariance=cov), mean, cov


def test_the_sampler_follows_what_the_model_offers():
    model, _, _ = correlated_gaussian()
    cheap, why = choose_sampler(model)  # (timed: a 4-d Gaussian is cheaper than a surrogate)
    assert isinstance(cheap, rnshmc.NUTS) and "exact NUTS" in why
    costly, why = choose_sampler(costly_gaussian()[0])
    assert isinstance(costly, rnshmc.ARNSHMC) and costly.share_surrogate
    assert "operation counts" in why
    blind, why = choose_sampler(without_gradient(costly_gaussian()[0]))
    assert isinstance(blind, rnshmc.GradientFreeRNSHMC) and "no gradient" in why
    pde = rnshmc.models.EllipticPDE(n=30, element="Q1",
                                    rng=rng_seed(0))  # (a smaller mesh is cheap)
    assert isinstance(choose_sampler(pde)[0], rnshmc.ARNSHMC)


def run(model, seed, ess=1000):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SamplingWarning)
        return rnshmc.sample(model, ess=ess, rng=seed, progress=False)


@pytest.mark.parametrize("path", ["cheap", "costly", "no gradient"])
def test_each_default_path_reaches_its_target_and_is_exact(path):
    model, mean, cov = costly_gaussian() if path != "cheap" else correlated_gaussian()
    if path == "no gradient":
        model = without_gradient(model)
    res = run(model, seed=0)
    assert res.stopping["reason"] == "converged"
    assert res.stopping["ess"] >= 1000 and res.stopping["rhat"] <= 1.01
    assert res.samples.shape[0] == 4
    assert res.choice["sampler"] == {"cheap": "NUTS", "costly": "ARNS-HMC",
                                     "no gradient": "GF-RNS-HMC"}[path]
    check_mean(res.samples, mean)
    check_covariance(res.samples, mean, cov)
    assert res.cost["model_evals"] == res.cost["density_evals"] + res.cost["gradient_evals"]
    text = str(res.summary())
    assert "sampler: " in text and "stopped: converged" in text and "per effective draw" in text


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("path", ["cheap", "costly", "no gradient"])
def test_each_default_path_is_exact_over_seeds(path, seed):
    model, mean, cov = costly_gaussian() if path != "cheap" else correlated_gaussian()
    if path == "no gradient":
        model = without_gradient(model)
    res = run(model, seed=seed, ess=2000)
    check_mean(res.samples, mean)
    check_covariance(res.samples, mean, cov)


class CostlyLogistic(rnshmc.models.LogisticRegression):
    density_flops = 1e7


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_the_surrogate_path_matches_a_long_reference_on_a_logistic_model(seed):
    X, y, _ = rnshmc.datasets.simulated_logistic(n=300, dim=4, rng=rng_seed(0))
    model = CostlyLogistic(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SamplingWarning)
        reference = rnshmc.HMC(rnshmc.models.LogisticRegression(X, y)).sample(
            20000, tune=1000, chains=4, rng=rng_seed(100), progress=False)
    res = run(model, seed=seed, ess=2000)
    assert res.choice["sampler"] == "ARNS-HMC"
    # the reference's Monte Carlo error is a tenth of the run's: compare with its mean
    check_mean(res.samples, reference.samples.reshape(-1, 4).mean(axis=0))

