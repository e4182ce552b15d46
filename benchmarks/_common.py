"""Helpers shared by the benchmark scripts (beside benchmarks/_timing.py's timings): the
problems of the cold-start comparisons and their cost to a target ESS."""
import numpy as np

from rnshmc import papers


def load_problem(name, seed):
    """(model, title, RNS-HMC settings of the papers) of a cold-start comparison's problem:
    "pde", the authors' elliptic PDE (the synthetic one without the papers' data), or
    "logistic", the simulated logistic regression (N = 100000, d = 50, data seed ``seed``)."""
    if name == "pde":
        model, title = papers.load_pde()
        return model, title, papers.rns_settings("pde")
    return (papers.load_logistic("simulated", seed), "simulated logistic regression, "
            "N = 100000, d = 50", papers.rns_settings("simulated"))


def cost_to_min_ess(result, wanted=1000.0):
    """(exact evaluations, seconds) from the first iteration to min ESS ``wanted``: what was
    spent before sampling plus the sampling phase's share scaled to ``wanted``; and the run's
    min ESS."""
    ess = float(result.ess().min())
    total = float(np.sum(result.n_density_evals) + np.sum(result.n_gradient_evals))
    sampling = float(np.sum(result.n_density_evals_sampling)
                     + np.sum(result.n_gradient_evals_sampling))
    seconds = sum(result.timings.values())
    scale = wanted / ess
    return (total - sampling + sampling * scale,
            seconds - result.timings["sampling"] + result.timings["sampling"] * scale, ess)
