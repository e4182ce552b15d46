"""A warm start (``warm_start=`` an earlier run): the chains continue with the earlier run's
surrogate, mass matrix and step size, pay no new exploration or warm-up, stay exact, and start
the same from the result in memory and from its checkpoint file."""
import warnings

import numpy as np
import pytest

import rnshmc
from rnshmc.diagnostics import SamplingWarning
from rnshmc.targets import without_gradient
from testkit import check_covariance, check_mean, correlated_gaussian, rng_seed


class CostlyGaussian(rnshmc.models.Gaussian):
    """A Gaussian that declares a costly model's operation count (surrogate dynamics pay)."""
    density_flops = 1e7


def costly_gaussian():
    _, mean, cov = correlated_gaussian()
    return CostlyGaussian(mean, covariance=cov), mean, cov


def quietly(run, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SamplingWarning)
        return run(*args, **kwargs)


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow)])
def test_a_warm_start_of_the_front_door_explores_nothing_and_stays_exact(seed, tmp_path):
    model, mean, cov = costly_gaussian()
    first = quietly(rnshmc.sample, model, ess=300, rng=seed, progress=False,
                    checkpoint=tmp_path / "first.npz")
    assert first.choice["sampler"] == "ARNS-HMC"
    second = quietly(rnshmc.sample, model, ess=1000, rng=seed + 10, warm_start=first,
                     progress=False)
    assert second.stopping["reason"] == "converged"
    phases = second.cost["phases"]
    assert phases["exploration"]["density_evals"] == phases["exploration"]["gradient_evals"] == 0
    assert np.all(second.n_density_evals_explore == 1)  # (the start's exact density)
    assert second.cost["model_evals"] < first.cost["model_evals"] + 4 * second.stopping["draws"]
    np.testing.assert_array_equal(second.inverse_mass_matrix, first.inverse_mass_matrix)
    check_mean(second.samples, mean)
    check_covariance(second.samples, mean, cov)
    # the same start from the checkpoint file
    from_file = quietly(rnshmc.sample, model, ess=1000, rng=seed + 10,
                        warm_start=tmp_path / "first.npz", progress=False)
    np.testing.assert_array_equal(from_file.samples, second.samples)


@pytest.mark.slow
def test_a_warm_start_of_the_gradient_free_sampler_explores_nothing_and_stays_exact():
    model, mean, cov = costly_gaussian()
    blind = without_gradient(model)
    first = quietly(rnshmc.sample, blind, ess=300, rng=rng_seed(4), progress=False)
    assert first.choice["sampler"] == "GF-RNS-HMC"
    second = quietly(rnshmc.sample, blind, ess=1000, rng=rng_seed(5), warm_start=first,
                     progress=False)
    assert second.cost["phases"]["exploration"]["density_evals"] == 0
    assert second.stopping["reason"] == "converged"
    check_mean(second.samples, mean)
    check_covariance(second.samples, mean, cov)


def test_a_warm_start_of_hmc_skips_the_warmup():
    model, mean, cov = correlated_gaussian()
    sampler = rnshmc.HMC(model, n_steps=5)
    first = sampler.sample(200, tune=300, rng=rng_seed(2), progress=False)
    second = sampler.sample(3000, rng=rng_seed(3), warm_start=first, progress=False)
    assert second.samples.shape == (4, 3000, 4)
    np.testing.assert_array_equal(second.step_size, first.step_size)
    assert np.all(second.n_gradient_evals == second.n_gradient_evals_sampling)
    check_mean(second.samples, mean)
    check_covariance(second.samples, mean, cov)


def test_a_warm_start_from_what_cannot_start_one_is_refused():
    model, _, _ = correlated_gaussian()
    hmc = rnshmc.HMC(model, n_steps=3).sample(20, tune=30, rng=rng_seed(0), progress=False)
    with pytest.raises(ValueError, match="a run of HMC, not of RNS-HMC"):
        rnshmc.RNSHMC(model, n_hidden=20).sample(20, warm_start=hmc, progress=False)
    with pytest.raises(ValueError, match="cannot start from an earlier run"):
        rnshmc.AdaptiveMetropolis(model).sample(20, warm_start=hmc, progress=False)
    saved = rnshmc.SampleResult(dict(hmc))  # (a result without its chains' states)
    with pytest.raises(ValueError, match="does not hold its chains' final states"):
        rnshmc.HMC(model).sample(20, warm_start=saved, progress=False)
