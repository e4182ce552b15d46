"""Models with a prior one can draw from and a simulator of their data: the problems of
simulation-based calibration (:func:`rnshmc.testing.sbc`; ``docs/guide/calibration.md``).

Each is a :class:`CalibrationProblem`: draw parameters from the prior, data given them, and
build the posterior's target from the data. They are cheap, so that hundreds of replications
run in minutes.
"""
import dataclasses
from typing import Callable, Optional, Sequence

import numpy as np
from scipy.integrate import solve_ivp

from ..targets import Target
from .hard import eight_schools
from .logistic import LogisticRegression
from .pde import EllipticPDE

__all__ = ["CalibrationProblem", "logistic_problem", "hierarchical_normal_problem",
           "ode_problem", "pde_problem"]


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


# the logistic-growth ODE's observation times, and the noise sd of its log observations
ODE_TIMES = np.arange(1.0, 11.0)
ODE_NOISE = 0.1


def _logistic_growth(log_r, log_k):
    """The solution y(t) of dy/dt = r y (1 - y / K), y(0) = 1, at ``ODE_TIMES`` by
    ``scipy.integrate.solve_ivp`` (LSODA, tolerances 1e-8: a proposal far out, r in the
    hundreds, is stiff, where RK45 took 50 ms a solve against LSODA's 1.2); None where the
    solve fails. The simulator and the model use this same solution."""
    r, k = np.exp(log_r), np.exp(log_k)
    solution = solve_ivp(lambda t, y: r * y * (1.0 - y / k), (0.0, ODE_TIMES[-1]), [1.0],
                         t_eval=ODE_TIMES, rtol=1e-8, atol=1e-8, method="LSODA")
    if not solution.success or not np.all(solution.y[0] > 0):
        return None
    return solution.y[0]


def ode_problem():
    """A two-parameter ODE without a gradient (the gradient-free path): logistic growth
    dy/dt = r y (1 - y / K), y(0) = 1, solved by ``scipy.integrate.solve_ivp`` and observed at
    t = 1, ..., 10 with log-normal noise (sd 0.1 on log y); log r ~ N(log 0.8, 0.3^2),
    log K ~ N(log 10, 0.3^2). Its target has a log density only.

    Returns
    -------
    CalibrationProblem
    """
    mean = np.array([np.log(0.8), np.log(10.0)])

    def prior(rng):
        return mean + 0.3 * rng.standard_normal(2)

    def simulate(theta, rng):
        path = _logistic_growth(*theta)
        if path is None:
            raise ValueError(f"the ODE solve failed at the prior draw {theta}")
        return np.log(path) + ODE_NOISE * rng.standard_normal(path.size)

    def model(log_y):
        def log_density(theta):
            path = _logistic_growth(*theta)
            if path is None:
                return -np.inf
            residual = (log_y - np.log(path)) / ODE_NOISE
            z = (theta - mean) / 0.3
            return float(-0.5 * residual @ residual - 0.5 * z @ z)
        return Target(log_density, dim=2)

    return CalibrationProblem(name="logistic-growth ODE (2 parameters, no gradient)", dim=2,
                              prior=prior, simulate=simulate, model=model,
                              names=["log r", "log K"])


def pde_problem(n=8, n_modes=4, obs_grid=5):
    """The papers' elliptic PDE on a coarse mesh (:class:`~rnshmc.models.EllipticPDE`: an
    ``n`` x ``n`` Q1 mesh, ``n_modes`` KL coefficients with their N(0, 0.5^2) prior, u
    observed on an ``obs_grid`` x ``obs_grid`` grid with noise sd 0.1), its data simulated
    from the prior.

    Returns
    -------
    CalibrationProblem
    """
    base = EllipticPDE(n=n, element="Q1", n_modes=n_modes, obs_grid=obs_grid, rng=0)

    def simulate(theta, rng):
        u = base.forward(theta)
        return u + base.noise_sd * rng.standard_normal(u.size)

    return CalibrationProblem(
        name=f"elliptic PDE ({n} x {n} mesh, {n_modes} modes)", dim=n_modes,
        prior=lambda rng: base.prior_sd * rng.standard_normal(n_modes), simulate=simulate,
        model=lambda y: EllipticPDE.from_solver(base.solver, base.basis, y,
                                                base.observation_points, base.noise_sd,
                                                base.prior_sd),
        names=[f"theta{k}" for k in range(n_modes)])
