"""A costly posterior (``rnshmc.models.lotka_volterra``: an ODE solved at each evaluation, a
few ms a gradient) sampled with defaults: exact NUTS, and ARNS-HMC with its surrogate NUTS
kernel, end converged (R-hat <= 1.02, bulk ESS >= 400 over 4 chains x 1000 draws) with each
posterior mean within 4 posterior standard deviations of the parameters the data were
simulated at. (The posterior's means are within about 1.4 sds of them for these data: a long
NUTS run, see ``benchmarks/bench_robust.py``; 4 sds is a property of any correct sampler
here, not a Monte Carlo tolerance.) The target pickles: the 4 chains run in worker
processes."""
import warnings

import numpy as np
import pytest

import rnshmc
from rnshmc.diagnostics import SamplingWarning
from rnshmc.models import lotka_volterra
from testkit import rng_seed


@pytest.fixture(scope="module")
def model():
    return lotka_volterra()


def sample(sampler, seed):
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # (no "run one after another")
        warnings.simplefilter("ignore", SamplingWarning)  # (the assertions below judge)
        return sampler.sample(1000, chains=4, rng=rng_seed(seed), progress=False)


def check(result, truth):
    health = result.health
    draws = result.samples.reshape(-1, truth.size)
    z = (draws.mean(axis=0) - truth) / draws.std(axis=0)
    summary = (f"{result.sampler}: R-hat {health['rhat_max']:.4f}, bulk ESS "
               f"{health['ess_bulk_min']:.0f}, (mean - truth) / sd {np.round(z, 2)}, "
               f"{result.cost['model_evals']} model evaluations ({result.cost['density_evals']} "
               f"densities, {result.cost['gradient_evals']} gradients)")
    print(summary)
    assert np.all(np.isfinite(draws)), summary
    assert health["rhat_max"] <= 1.02, summary
    assert health["ess_bulk_min"] >= 400, summary
    assert np.all(np.abs(z) <= 4), summary


@pytest.mark.slow  # (about 130 s on 2 cores: some 37,000 gradient solves)
def test_nuts(model):
    target, reference = model
    check(sample(rnshmc.NUTS(target), 0), reference["truth"])


@pytest.mark.slow  # (about 35 s: some 600 gradient and 4,600 density solves)
def test_arnshmc_with_the_nuts_kernel(model):
    target, reference = model
    check(sample(rnshmc.ARNSHMC(target, kernel="nuts"), 0), reference["truth"])
