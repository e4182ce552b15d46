"""Models with a prior one can draw from and a simulator of their data: the problems of
simulation-based calibration (:func:`rnshmc.testing.sbc`; ``docs/guide/calibration.md``).

Each is a :class:`CalibrationProblem`: draw parameters from the prior, data given them, and
build the posterior's target from the data. They are cheap, so that hundreds of replications
run in minutes.
"""
import dataclasses
from typing import Callable, Optional, Sequence

import numpy as np

from .hard import eight_schools
from .logistic import LogisticRegression

__all__ = ["CalibrationProblem", "logistic_problem", "hierarchical_normal_problem"]


@dataclasses.dataclass(frozen=True)
class CalibrationProblem:
    """A Bayesian model as simulation-based calibration needs it.

    Attributes
    ----------
    name : str
    dim : int
        The number of parameters (the target's dimension).
    prior : callable
        ``prior(rng)``: one draw of the parameters (shape (dim,)) from the prior, in the
        target's coordinates, with a ``numpy.random.Generator``.
    simulate : callable
        ``simulate(theta, rng)``: data drawn given the parameters.
    model : callable
        ``model(data)``: the posterior's target (an ``rnshmc.Target`` or built-in model).
    names : sequence of str or None
        The parameters' names (for tables and plots).
    """
    name: str
    dim: int
    prior: Callable
    simulate: Callable
    model: Callable
    names: Optional[Sequence[str]] = None


def logistic_problem(n=40, covariates=5, prior_variance=1.0, seed=0):
    """A logistic regression with ``covariates`` coefficients and ``n`` observations:
    b ~ N(0, prior_variance I), y_i ~ Bernoulli(sigmoid(x_i^T b)), with covariates x_i ~
    N(0, I) drawn once (from ``seed``) and kept for every replication. Its target is the C-level
    :class:`~rnshmc.models.LogisticRegression` (the cheapest problem).

    Returns
    -------
    CalibrationProblem
    """
    X = np.random.default_rng(seed).standard_normal((n, covariates))
    scale = np.sqrt(prior_variance)

    def simulate(b, rng):
        return (rng.random(n) < 1.0 / (1.0 + np.exp(-X @ b))).astype(np.float64)

    return CalibrationProblem(
        name=f"logistic regression ({covariates} covariates, n = {n})", dim=covariates,
        prior=lambda rng: scale * rng.standard_normal(covariates), simulate=simulate,
        model=lambda y: LogisticRegression(X, y, prior_variance=prior_variance),
        names=[f"b{k}" for k in range(covariates)])


# eight schools' standard errors (rnshmc.models.hard.eight_schools)
SCHOOL_SIGMA = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])


def hierarchical_normal_problem():
    """Eight schools, non-centred (``rnshmc.models.hard.eight_schools``: mu ~ N(0, 5^2),
    tau ~ half-Cauchy(0, 5), eta_j ~ N(0, 1), y_j ~ N(mu + tau eta_j, sigma_j^2) with the
    schools' standard errors), its data simulated from the prior. The parameters are (mu,
    log tau, eta_1..eta_8).

    Returns
    -------
    CalibrationProblem
    """
    def prior(rng):
        tau = abs(5.0 * rng.standard_cauchy())
        return np.concatenate([[5.0 * rng.standard_normal(), np.log(tau)],
                               rng.standard_normal(8)])

    def simulate(theta, rng):
        mu, tau, eta = theta[0], np.exp(theta[1]), theta[2:]
        return mu + tau * eta + SCHOOL_SIGMA * rng.standard_normal(8)

    return CalibrationProblem(
        name="eight schools, non-centred", dim=10, prior=prior, simulate=simulate,
        model=lambda y: eight_schools(y=y)[0],
        names=["mu", "log tau"] + [f"eta{j}" for j in range(1, 9)])
