"""Riemannian dynamics: the generalized leapfrog on the model's metric (RMHMC) or on a
surrogate's Hessian (RNS-RMHMC).

:class:`RiemannianPhase` runs exact RMHMC with a position-dependent metric;
:class:`SurrogateMetric` is RNS-RMHMC's generalized leapfrog on a fitted surrogate's Hessian
(with SoftAbs where it is not positive definite), which the training phase chooses with
:class:`RiemannianKernel`, whose step size :class:`RiemannianSurrogateAdaptation` adapts on the
surrogate, and which the sampling phase (``rnshmc.samplers.phases.dynamics``) runs with the
exact test. :func:`riemannian_report` adds the implicit solver's statistics to a result.
"""
import warnings

import numpy as np

from ..._kernels._integrators import GeneralizedLeapfrog
from ..._kernels._transition import Chain
from ...validation import user_stacklevel
from .base import Phase, continue_from_previous
from .dynamics import start_on_surrogate
from .exact import StepSizeWarmup
from .fit import FitState


class RiemannianPhase(Phase):
    """Exact RMHMC: the generalized leapfrog with a position-dependent metric.

    Parameters
    ----------
    name : str
    make_metric : callable
        ``make_metric(dim)``: a new metric object (each chain factorises its own G).
    solver : dict
        ``GeneralizedLeapfrog``'s settings: tol, max_iterations, newton.
    step_size, n_steps, jitter, target_accept, max_energy_error
        As for :class:`LeapfrogSettings` (no mass matrix).
    adapt : bool
        Dual averaging of the step size, unless given (:class:`StepSizeWarmup`).
    keep : tuple of str
    """

    def __init__(self, name, make_metric, solver, leapfrog, adapt=False, keep=()):
        super().__init__(name)
        self.make_metric, self.solver, self.leapfrog = make_metric, solver, leapfrog
        self.keep = tuple(keep)
        self.warmup = StepSizeWarmup(leapfrog) if adapt else None

    def trajectory(self, run):
        return self.leapfrog.n_steps, self.leapfrog.jitter

    def make_chain(self, run):
        return riemannian_chain(run.target, None, self.make_metric(run.state.dim),
                                run.state.dim, self.solver, self.leapfrog.max_energy_error)

    def begin(self, run, chain):
        state = run.state
        if state.phase_index and state.phases[state.phase_index - 1][0] == Phase.APPROACH:
            # after the exact-HMC approach: only its position carries over
            chain.set_position(state.kernel["position"])
        else:
            continue_from_previous(run, chain)


def riemannian_chain(dynamics, test, metric, dim, solver, max_energy_error):
    """A generalized-leapfrog chain with ``metric``."""
    return Chain(dynamics, test, metric,
                 GeneralizedLeapfrog(dim, solver["tol"], solver["max_iterations"],
                                     solver["newton"]),
                 max_energy_error=max_energy_error)


def riemannian_report(result, states, phase=Phase.SAMPLING, exact_metric=False):
    """Add the implicit solver's statistics of ``phase`` to a result: ``solver_iterations``
    (chains, draws): fixed-point iterations of each transition's trajectory;
    ``mean_solver_iterations`` per chain; ``n_implicit_failures`` per chain (unconverged
    solves: rejected proposals). With ``exact_metric`` (the metric is the model's own, not a
    surrogate's: its evaluations are exact model work), per chain ``n_metric_evals`` and
    ``n_metric_derivative_evals`` over all phases and their ``_sampling`` counts."""
    if exact_metric:
        def counts(index, phases):
            return np.array([sum(s.evals.get(p, [0] * 4)[index] for p in phases)
                             for s in states], dtype=np.int64)
        every = [name for name, _ in states[0].phases]
        for index, key in ((2, "n_metric_evals"), (3, "n_metric_derivative_evals")):
            result[key] = counts(index, every)
            result[key + "_sampling"] = counts(index, [phase])
    records = np.stack([s.outputs[phase]["records"] for s in states])
    result["solver_iterations"] = records["solver_iterations"].copy()
    result["implicit_failed"] = records["solver_failed"].astype(bool)
    result["n_implicit_failures"] = records["solver_failed"].sum(axis=1).astype(np.int64)
    steps = np.maximum(records["n_steps"], 1)
    result["mean_solver_iterations"] = (records["solver_iterations"] / steps).mean(axis=1)
    failures = result["n_implicit_failures"]
    if failures.sum():
        warnings.warn(
            f"{result.sampler}: {int(failures.sum())} proposals were rejected because an "
            "implicit step of the generalized leapfrog did not converge or reached a point "
            "where the metric is not positive definite (counted in n_implicit_failures). Use a "
            "smaller step size or a larger max_fixed_point_iterations; for an indefinite "
            "metric, softabs (the chain only visits points where the metric is positive "
            "definite, so without SoftAbs it samples the posterior restricted to them).",
            RuntimeWarning, stacklevel=user_stacklevel())
    return result



class RiemannianKernel:
    """The sampling kernel is given (RNS-RMHMC): ``n_steps`` steps of the generalized leapfrog
    on the surrogate's Hessian metric, with its SoftAbs sharpness chosen for the fit
    (:meth:`SurrogateMetric.choose_softabs`); the exact stretches' L chosen as
    :class:`ExplorationKernel` does (reported)."""

    def __init__(self, metric):
        self.metric = metric

    def __call__(self, run, fit, fit_state):
        fit_state.surrogate_n_steps = self.metric.leapfrog.n_steps
        fit_state.exact_n_steps = fit.choose_n_steps(run, per="step")
        Q, _, _ = fit.exploration.training_rows(run.state)
        self.metric.choose_softabs(fit_state, fit.surrogate(run.state), Q,
                                   start=run.state.kernel["position"])


class SurrogateMetric:
    """The generalized leapfrog on a surrogate's potential with its Hessian (or the Hessian's
    diagonal) as the metric, and the exact test on the true density (RNS-RMHMC).

    Parameters
    ----------
    kind : {"hessian", "diagonal"}
    softabs : float or "auto"
        SoftAbs sharpness alpha (0: the Hessian as it is). "auto": the Hessian as it is where
        it is positive definite at every training state (at most ``CHECKED_STATES`` of them)
        and where the chain starts on it, else SoftAbs with alpha the training states' largest
        variance, so that the metric's smallest eigenvalue, 1/alpha, is their smallest
        precision. Chosen again at each refit.
    solver : dict
        ``GeneralizedLeapfrog``'s settings.
    leapfrog : LeapfrogSettings
        The step size (None: adapted), steps, jitter, target_accept and max_energy_error.
    """

    CHECKED_STATES = 200

    def __init__(self, kind, softabs, solver, leapfrog):
        self.kind, self.softabs, self.solver, self.leapfrog = kind, softabs, solver, leapfrog

    def choose_softabs(self, fit_state, surrogate, Q, start):
        """Set ``fit_state.softabs`` for ``surrogate`` fitted to the states ``Q``, on which the
        chain starts at ``start`` (a chain cannot start where the metric is not defined: with
        the Hessian checked at training states alone, one of 500 simulated logistic
        regressions started RNS-RMHMC where it was not positive definite, an error)."""
        if self.softabs != "auto":
            fit_state.softabs = float(self.softabs)
            return
        Q = np.unique(Q, axis=0)
        rows = np.vstack([Q[np.linspace(0, len(Q) - 1, min(len(Q), self.CHECKED_STATES))
                            .astype(int)], np.reshape(start, (1, -1))])
        fit_state.softabs = 0.0 if all(map(self._positive_definite, (surrogate.hessian(q)
                                                                      for q in rows))) \
            else float(np.linalg.eigvalsh(np.atleast_2d(np.cov(Q, rowvar=False)))[-1])

    def _positive_definite(self, hessian):
        if self.kind == "diagonal":
            return bool(np.all(np.diag(hessian) > 0))
        try:
            np.linalg.cholesky(hessian)
        except np.linalg.LinAlgError:
            return False
        return True

    def make_chain(self, run, surrogate):
        """A chain on ``surrogate``'s dynamics with the chain's SoftAbs sharpness."""
        metric = surrogate.hessian_metric(diagonal=self.kind == "diagonal",
                                          softabs=FitState.of(run.state).softabs)
        return riemannian_chain(surrogate._ctarget, run.target, metric, run.state.dim,
                                self.solver, self.leapfrog.max_energy_error)



class RiemannianSurrogateAdaptation(Phase):
    """RNS-RMHMC's "adaptation" phase: dual averaging of the generalized leapfrog's step size
    on the surrogate's Hessian metric (:class:`SurrogateMetric`), from the exploration's last
    state, with the exact test; its exact densities count to training."""

    def __init__(self, fit, metric):
        super().__init__(Phase.ADAPTATION)
        self.fit, self.metric = fit, metric
        # (the phase is planned only where the sampling step size is not given)
        self.warmup = StepSizeWarmup(metric.leapfrog)

    def trajectory(self, run):
        return self.metric.leapfrog.n_steps, self.metric.leapfrog.jitter

    def make_chain(self, run):
        return self.metric.make_chain(run, self.fit.surrogate(run.state))

    def begin(self, run, chain):
        start_on_surrogate(run, chain)

    def exact_evals(self, state):
        # (the dynamics' gradients and metrics are the surrogate's)
        return [(list(state.evals.get(self.name, [])) + [0])[0], 0, 0]
