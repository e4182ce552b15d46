"""The grid of simulation-based calibration (docs/guide/calibration.md): every sampler with its
defaults, the front door, and the paths that make rnshmc different forced on purpose (a tiny
surrogate that the trust watch refits and falls back from, frequent ARNS installs, a
surrogate per chain, warm starts, runs stopped and resumed from a checkpoint mid-exploration
and mid-sampling, the GP surrogate, L2HMC on a surrogate, surrogate NUTS, the NUTS exploration
from L-BFGS). One place for it: tests/samplers/test_sbc.py runs it (slow, 500 replications
each) and benchmarks/bench_sbc.py prints its table.

Each entry: name -> (problem factory, sampler or None, ``run`` or None, sbc() options).
"""
import dataclasses
import tempfile


import rnshmc
from rnshmc.models.calibration import (hierarchical_normal_problem, logistic_problem,
                                       ode_problem, pde_problem)
from rnshmc.samplers.checkpoint import Checkpointer
from rnshmc.targets import without_gradient


def values_only(factory):
    """A problem whose targets offer their log density alone (the gradient-free path)."""

    def make():
        problem = factory()
        return dataclasses.replace(problem, model=lambda data: without_gradient(
            problem.model(data)))
    return make


def stopped_and_resumed(make, draws, where):
    """``run``: the sampler's run stopped ``where`` ("exploration": half way through the
    phases before sampling; "sampling": half way through sampling), written to a checkpoint
    and resumed from it."""
    def run(target, seed):
        sampler = make(target)
        states = sampler.init_states(draws, chains=2, rng=seed)
        before = sum(n for phase, n in states[0].phases if phase != "sampling")
        stop = max(1, before // 2) if where == "exploration" else before + draws // 2
        states = sampler.run_states(states, progress=False, stop_after=stop, pool=None)
        with tempfile.TemporaryDirectory() as folder:
            path = f"{folder}/run.npz"
            Checkpointer(path, sampler, dict(draws=draws, checkpoint_every=10 ** 6)).write(states)
            return rnshmc.resume(path, target=target, progress=False, pool=None)
    return run


def warm_started(make, draws):
    """``run``: a first run of 100 draws, then the sampler warm-started from it."""
    def run(target, seed):
        first_seed, second_seed = seed.spawn(2)
        first = make(target).sample(100, chains=2, rng=first_seed, progress=False, pool=None)
        return make(target).sample(draws, chains=2, rng=second_seed, warm_start=first,
                                   progress=False, pool=None)
    return run


def l2hmc_on_a_surrogate(target, seed):
    """L2HMC on a random-network surrogate (``L2HMC.with_surrogate``), briefly trained."""
    explore_seed, train_seed, sample_seed = seed.spawn(3)
    sampler = rnshmc.L2HMC.with_surrogate(target, tune=200, rng=explore_seed, progress=False,
                                          rns_options=dict(n_hidden=100), n_steps=5)
    sampler.train(200, chains=20, rng=train_seed, progress=False)
    return sampler.sample(1600, tune=200, chains=2, rng=sample_seed, progress=False, pool=None)


# (the logistic regression unless said: the cheapest problem with a gradient)
SMALL = dict(n_hidden=100)
GRID = {
    "HMC": (logistic_problem, lambda t: rnshmc.HMC(t), None, dict(draws=400, tune=200)),
    "NUTS": (logistic_problem, lambda t: rnshmc.NUTS(t), None, dict(draws=300, tune=200)),
    "NUTS, eight schools": (hierarchical_normal_problem, lambda t: rnshmc.NUTS(t), None,
                            dict(draws=500)),
    "RMHMC": (logistic_problem, lambda t: rnshmc.RMHMC(t, metric="fisher"), None,
              dict(draws=400, tune=200)),
    "RNSHMC": (logistic_problem, lambda t: rnshmc.RNSHMC(t, **SMALL), None, dict(draws=400)),
    "ARNSHMC": (logistic_problem, lambda t: rnshmc.ARNSHMC(t, **SMALL), None, dict(draws=400)),
    # (its static L = 6 without jitter mixes slowly: 1600 draws keep its min ESS above 49)
    "RNSRMHMC": (logistic_problem, lambda t: rnshmc.RNSRMHMC(t, **SMALL), None,
                 dict(draws=1600)),
    "GradientFreeRNSHMC": (values_only(logistic_problem),
                           lambda t: rnshmc.GradientFreeRNSHMC(t, **SMALL), None,
                           dict(draws=400)),
    "AdaptiveMetropolis": (values_only(logistic_problem), lambda t: rnshmc.AdaptiveMetropolis(t),
                           None, dict(draws=2000, tune=1000)),
    "rnshmc.sample": (logistic_problem, None, None, {}),
    "L2HMC on a surrogate": (logistic_problem, None, l2hmc_on_a_surrogate, {}),
    # the special paths
    "RNSHMC, surrogate NUTS": (logistic_problem,
                               lambda t: rnshmc.RNSHMC(t, kernel="nuts", **SMALL), None,
                               dict(draws=400)),
    "ARNSHMC, surrogate NUTS, NUTS exploration from L-BFGS": (
        logistic_problem, lambda t: rnshmc.ARNSHMC(
            t, kernel="nuts", explore=dict(kernel="nuts", start="lbfgs"), **SMALL), None,
        dict(draws=400)),
    "RNSHMC, 3 units: refits and fallbacks": (
        logistic_problem, lambda t: rnshmc.RNSHMC(t, n_hidden=3, trust=dict(ratio=1.0)), None,
        dict(draws=1600)),
    "ARNSHMC, installs every few draws": (
        logistic_problem, lambda t: rnshmc.ARNSHMC(
            t, adaptation_rate=lambda i: min(1.0, 10.0 / i ** 0.5), **SMALL), None,
        dict(draws=400)),
    "ARNSHMC, a surrogate per chain": (
        logistic_problem, lambda t: rnshmc.ARNSHMC(t, share_surrogate=False, **SMALL), None,
        dict(draws=400)),
    "GP-HMC": (logistic_problem, lambda t: rnshmc.RNSHMC(t, surrogate=dict(
        kind="gaussian_process", n_train=100, training_data="states")), None, dict(draws=400)),
    "ARNSHMC, warm start": (logistic_problem, None, warm_started(
        lambda t: rnshmc.ARNSHMC(t, **SMALL), 400), {}),
    "NUTS, warm start": (logistic_problem, None, warm_started(lambda t: rnshmc.NUTS(t), 300),
                         {}),
    "ARNSHMC, resumed mid-exploration": (logistic_problem, None, stopped_and_resumed(
        lambda t: rnshmc.ARNSHMC(t, **SMALL), 400, "exploration"), {}),
    "ARNSHMC, resumed mid-sampling": (logistic_problem, None, stopped_and_resumed(
        lambda t: rnshmc.ARNSHMC(t, **SMALL), 400, "sampling"), {}),
    "GradientFreeRNSHMC, ODE": (ode_problem, lambda t: rnshmc.GradientFreeRNSHMC(t, **SMALL),
                                None, dict(draws=400)),
    "ARNSHMC, elliptic PDE": (pde_problem, lambda t: rnshmc.ARNSHMC(t, **SMALL), None,
                              dict(draws=400)),
}

# the chains of a replication, and the draws ranks are taken among
CHAINS, THIN = 2, 49


def calibrate(name, replications, rng=0, pool=None):
    """sbc() of one grid entry."""
    from rnshmc.testing import sbc
    factory, sampler, run, options = GRID[name]
    options = dict(dict(chains=CHAINS), **options)
    if run is not None:
        return sbc(factory(), run=run, replications=replications, thin=THIN, rng=rng,
                   pool=pool)
    return sbc(factory(), sampler, replications=replications, thin=THIN, rng=rng, pool=pool,
               **options)


__all__ = ["GRID", "calibrate"]
