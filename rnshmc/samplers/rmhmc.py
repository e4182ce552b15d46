"""Riemannian-manifold HMC (Girolami and Calderhead 2011) with the generalized leapfrog, and
RNS-RMHMC: the generalized leapfrog on a random-network surrogate's potential and Hessian
metric, with the exact Metropolis test (Zhang, Shahbaba and Zhao 2017)."""
import warnings

import numpy as np

from .._kernels._integrators import GeneralizedLeapfrog
from .._kernels._fem import GaussNewtonMetric
from .._kernels._riemann import CallableMetric, LinearPredictorMetric
from .._kernels._transition import Chain
from ..adaptation import initial_step_size
from ..surrogate import RandomNetworkSurrogate
from ..targets import as_ctarget, target_dim
from ..validation import check_integer, check_per_chain_real, check_real
from .driver import Phase, user_stacklevel
from .hmc import HMC
from .rns import RNSHMC

__all__ = ["RMHMC", "RNSRMHMC"]


def _check_solver_settings(fixed_point_tol, max_fixed_point_iterations, softabs):
    """Validated (tol or None, iterations, softabs alpha or 0), warning about the papers'
    unchecked fixed iterations."""
    iterations = check_integer(max_fixed_point_iterations, "max_fixed_point_iterations", minimum=1)
    if fixed_point_tol is None:
        warnings.warn(
            f"fixed_point_tol=None runs {iterations} fixed-point iterations per implicit step "
            "without a convergence check, as the papers' code did: the generalized leapfrog is "
            "then reversible and volume preserving only up to the iterations' error, so the "
            "chain is not exactly invariant. Use it only to reproduce the papers.",
            UserWarning, stacklevel=user_stacklevel())
    else:
        fixed_point_tol = check_real(fixed_point_tol, "fixed_point_tol", lower=0.0)
    softabs = 0.0 if softabs is None else check_real(softabs, "softabs", lower=0.0)
    return fixed_point_tol, iterations, softabs


def riemannian_stats(result, states, phase="sampling", exact_metric=False):
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


class RMHMC(HMC):
    """Riemannian-manifold HMC: momenta p ~ N(0, G(q)) and the generalized leapfrog.

    H(q, p) = U(q) + 1/2 log det G(q) + 1/2 p^T G(q)^{-1} p; each step solves two implicit
    equations by fixed-point iteration (see ``GeneralizedLeapfrog``). A proposal whose solve
    did not converge is rejected and counted (``n_implicit_failures``).

    Two phases per chain: ``"warmup"`` (``tune`` iterations: the step size adapted by dual
    averaging when ``step_size`` is None, else a burn-in; discarded) and ``"sampling"``.

    The starting point matters with a fixed step size: far out in the tails, where the metric
    is much flatter than at the posterior, a step size tuned for the posterior (e.g. the
    papers' on Bank Marketing or a9a, started at q = 0) makes every proposal diverge, and the
    chain never moves (the result warns about a stuck chain). Start at the mode
    (:func:`rnshmc.experiments.find_mode`, Newton's method with this metric) or let
    ``step_size=None`` adapt during warm-up.

    Parameters
    ----------
    target : rnshmc.models.LogisticRegression, rnshmc.models.EllipticPDE, rnshmc.Target, ...
        The log density to sample; it must have a gradient.
    metric : {"fisher", "gauss_newton"} or callable
        "fisher": the exact Fisher metric of a :class:`~rnshmc.models.LogisticRegression`,
        X^T diag(pi (1 - pi)) X + I / prior_variance (dG/dq_k = X^T diag(pi (1 - pi)(1 - 2 pi)
        x_k) X, in one blocked pass over X). "gauss_newton": J^T J / noise_sd^2 +
        I / prior_sd^2 of an :class:`~rnshmc.models.EllipticPDE`. A callable ``G(q)`` -> (dim,
        dim) array: a user's metric; then ``metric_derivatives(q)`` -> (dim, dim, dim), whose
        ``[i]`` is dG/dq_i, is required.
    metric_derivatives : callable or None
    step_size : float, ndarray of shape (chains,) or None
        Of the generalized leapfrog; None adapts it during warm-up (dual averaging).
    n_steps : int
        Steps per trajectory (the maximum with ``jitter``).
    jitter : bool
        Draw the number of steps uniformly from {1, ..., n_steps} (default False: the papers
        ran RMHMC with a fixed number of steps).
    softabs : float or None
        SoftAbs sharpness alpha: G = Q diag(lam coth(alpha lam)) Q^T from the eigenvalues of
        the metric, positive definite whatever the metric. None uses the metric as it is; it
        must then be positive definite (a ValueError names the point where it is not).
    fixed_point_tol : float or None
        Tolerance of the implicit solves on the iterates' change, relative to 1 + |iterate|
        (default 1e-9). None runs exactly ``max_fixed_point_iterations`` unchecked iterations
        (the papers' code: 5), with a warning that the chain is then not exact.
    max_fixed_point_iterations : int
        Default 50.
    newton : bool
        Solve the implicit steps by Newton iterations instead of fixed-point ones (default
        False): the same equations, tolerance and iteration cap, so the same exact chain.
        Newton converges quadratically near the solution, so it takes fewer iterations
        (about 6 instead of 9-10 per step on a 2-d logistic posterior), but each costs 2d
        evaluations of the metric's nu term, a d x d solve and, in the position step, the
        metric's derivatives; it has no line search, so at step sizes near the stability
        limit it can fail more often than fixed-point iteration (each failure a counted
        rejection).
    target_accept, max_energy_error
        As for :class:`~rnshmc.HMC`.

    Examples
    --------
    >>> import rnshmc
    >>> X, y, _ = rnshmc.datasets.simulated_logistic(n=1000, dim=3, rng=0)
    >>> model = rnshmc.models.LogisticRegression(X, y)
    >>> res = rnshmc.RMHMC(model, metric="fisher", step_size=0.5, n_steps=3).sample(
    ...     200, tune=100, rng=0, progress=False)
    >>> res.samples.shape
    (1, 200, 3)
    """

    name = "RMHMC"
    PHASES = {"warmup": Phase(adapt=True, adapt_mass=False),
              "sampling": Phase(keep=("samples", "records"))}

    def __init__(self, target, metric="fisher", metric_derivatives=None, step_size=None,
                 n_steps=6, jitter=False, softabs=None, fixed_point_tol=1e-9,
                 max_fixed_point_iterations=50, newton=False, target_accept=0.8,
                 max_energy_error=1000.0):
        # HMC's plan (warm-up, sampling) with a Riemannian chain and no mass matrix
        super().__init__(target, step_size=step_size, n_steps=n_steps, jitter=jitter,
                         adapt_mass_matrix=False, target_accept=target_accept,
                         max_energy_error=max_energy_error)
        self.fixed_point_tol, self.max_fixed_point_iterations, self.softabs = \
            _check_solver_settings(fixed_point_tol, max_fixed_point_iterations, softabs)
        self.newton = bool(newton)
        self.metric = metric
        self.metric_derivatives = metric_derivatives
        dim = target_dim(target) if hasattr(target, "dim") else None
        self._make_metric(dim if dim is not None else 1, check_only=dim is None)

    def _make_metric(self, dim, check_only=False):
        """A new metric object for one chain (each chain factorises its own G)."""
        from ..models import EllipticPDE, LogisticRegression
        metric, target = self.metric, self.target
        if callable(metric):
            if not callable(self.metric_derivatives):
                raise TypeError("a callable metric needs metric_derivatives: a callable "
                                "returning the (dim, dim, dim) array of dG/dq_i")
            return CallableMetric(dim, metric, self.metric_derivatives, softabs=self.softabs)
        if self.metric_derivatives is not None:
            raise ValueError("metric_derivatives goes with a callable metric only")
        if metric == "fisher":
            if not isinstance(target, LogisticRegression):
                raise ValueError("metric='fisher' is the Fisher metric of "
                                 "rnshmc.models.LogisticRegression; for another target give "
                                 "the metric as callables")
            return LinearPredictorMetric(target.X, "logistic",
                                         prior_precision=1.0 / target.prior_variance,
                                         softabs=self.softabs, description="the Fisher metric")
        if metric == "gauss_newton":
            if not isinstance(target, EllipticPDE):
                raise ValueError("metric='gauss_newton' is the Gauss-Newton metric of "
                                 "rnshmc.models.EllipticPDE; for another target give the metric "
                                 "as callables")
            return GaussNewtonMetric(as_ctarget(target, target.dim), softabs=self.softabs)
        raise ValueError(f"metric must be 'fisher', 'gauss_newton' or a callable, got {metric!r}")

    def uses_python_callables(self, dim):
        return callable(self.metric) or super().uses_python_callables(dim)

    def new_chain(self, dynamics, state, test=None, delayed_acceptance=False):
        return Chain(dynamics, test, self._make_metric(state.dim),
                     GeneralizedLeapfrog(state.dim, self.fixed_point_tol,
                                         self.max_fixed_point_iterations, self.newton),
                     max_energy_error=self.max_energy_error,
                     delayed_acceptance=delayed_acceptance)

    def sample(self, draws=1000, tune=1000, chains=1, rng=None, init=None, progress=True,
               pool="auto", checkpoint=None, checkpoint_every=1000):
        """Draw samples (arguments as for :meth:`rnshmc.HMC.sample`; a process pool needs a
        picklable target and metric callables).

        Returns
        -------
        SampleResult
            The keys of :meth:`rnshmc.HMC.sample` (``energy`` includes 1/2 log det G), plus
            ``solver_iterations`` (chains, draws), ``implicit_failed`` (chains, draws),
            ``mean_solver_iterations`` (per step, per chain) and ``n_implicit_failures`` (per
            chain) of the sampling phase; and the exact metric's evaluations per chain,
            ``n_metric_evals`` and ``n_metric_derivative_evals`` (all phases) and their
            ``_sampling`` counts. A metric evaluation is exact model work not in
            ``n_gradient_evals``: the Fisher metric is a pass over the data; the Gauss-Newton
            metric of a PDE is the forward solve plus one sensitivity solve per parameter on
            its factorisation, and its derivatives second-order sensitivities.
        """
        return super().sample(draws=draws, tune=tune, chains=chains, rng=rng, init=init,
                              progress=progress, pool=pool,
                              checkpoint=checkpoint, checkpoint_every=checkpoint_every)

    def result(self, states):
        return riemannian_stats(super().result(states), states, exact_metric=True)


class RNSRMHMC(RNSHMC):
    """RNS-RMHMC: the generalized leapfrog on a random-network surrogate's potential and metric
    (its Hessian), with the exact Metropolis test on the true density.

    Exploration and training are those of :class:`~rnshmc.RNSHMC` (exact HMC with its own
    step size and mass matrix, adapted unless ``explore_step_size`` is given; then one fit of
    the surrogate z). Sampling then runs the generalized leapfrog on H_z = z(q) + 1/2 log det
    G(q) + 1/2 p^T G(q)^{-1} p with G the Hessian of z (or its diagonal), and accepts with the
    true H = U(q) + 1/2 log det G(q) + 1/2 p^T G(q)^{-1} p: the target exp(-H) has q-marginal
    exp(-U) whatever G is, p ~ N(0, G(q)) is a Gibbs step of it, and the surrogate flow is a
    volume-preserving involution with the momentum flip, so the chain is exact whatever the
    surrogate's quality. Each iteration costs one exact density evaluation.

    Parameters
    ----------
    target
        As for :class:`~rnshmc.RNSHMC`.
    metric : {"hessian", "diagonal"}
        The surrogate's full Hessian (the papers' choice for logistic regression) or its
        diagonal (their choice for the PDE). Additive nodes only (``nodes="additive"``, the
        default) with a softplus, sigmoid or tanh activation.
    softabs : float or None
        SoftAbs sharpness alpha (a surrogate Hessian need not be positive definite; without
        SoftAbs a ValueError names the point where it is not).
    step_size, n_steps, jitter
        Of the generalized leapfrog in the sampling phase (the papers' table gives these).
        ``step_size=None`` adapts it by dual averaging in ``n_adapt`` iterations on the
        surrogate after training (their exact evaluations count to training).
    n_adapt : int
        Iterations of that adaptation (default 500).
    explore_step_size, explore_n_steps, explore_jitter
        The exploration's exact HMC (step size None: adapted, with the mass matrix).
    fixed_point_tol, max_fixed_point_iterations, newton
        As for :class:`RMHMC`.
    n_hidden, nodes, activation, ridge, weight_scale, whiten, gradient_weight, n_explore, \
n_train, target_accept, max_energy_error, mass_matrix, inverse_mass_matrix, adapt_mass_matrix
        As for :class:`~rnshmc.RNSHMC` (the mass matrix is the exploration's).
    """

    name = "RNS-RMHMC"
    PHASES = dict(RNSHMC.PHASES, adaptation=Phase(adapt=True, adapt_mass=False))

    def __init__(self, target, metric="hessian", softabs=None, n_hidden=1000, step_size=None,
                 n_steps=6, jitter=False, n_adapt=500, explore_step_size=None,
                 explore_n_steps=10, explore_jitter=True, fixed_point_tol=1e-9,
                 max_fixed_point_iterations=50, newton=False, nodes="additive",
                 activation="softplus",
                 ridge=1e-6, whiten=True, gradient_weight=1.0, weight_scale=None,
                 n_explore=None, n_train=None, mass_matrix=None, inverse_mass_matrix=None,
                 adapt_mass_matrix=None, target_accept=0.8, max_energy_error=1000.0):
        super().__init__(target, n_hidden=n_hidden, nodes=nodes, activation=activation,
                         ridge=ridge, step_size=explore_step_size, n_steps=explore_n_steps,
                         jitter=explore_jitter, n_explore=n_explore, n_train=n_train,
                         training_data="states", whiten=whiten, gradient_weight=gradient_weight,
                         weight_scale=weight_scale, mass_matrix=mass_matrix,
                         inverse_mass_matrix=inverse_mass_matrix,
                         adapt_mass_matrix=adapt_mass_matrix, target_accept=target_accept,
                         max_energy_error=max_energy_error, trust_ratio=None)
        if metric not in ("hessian", "diagonal"):
            raise ValueError(f"metric must be 'hessian' or 'diagonal', got {metric!r}")
        if nodes != "additive" or activation == "exp":
            raise ValueError("RNS-RMHMC needs additive nodes with a softplus, sigmoid or tanh "
                             "activation (the Hessian metric's derivatives are for those)")
        self.metric = metric
        self.fixed_point_tol, self.max_fixed_point_iterations, self.softabs = \
            _check_solver_settings(fixed_point_tol, max_fixed_point_iterations, softabs)
        self.newton = bool(newton)
        self.rm_step_size = None if step_size is None else check_per_chain_real(step_size, "step_size")
        self.rm_n_steps = check_integer(n_steps, "n_steps", minimum=1)
        self.rm_jitter = bool(jitter)
        self.n_adapt = check_integer(n_adapt, "n_adapt", minimum=1)

    def sample(self, draws=1000, tune=1000, chains=1, rng=None, init=None, progress=True,
               pool="auto", checkpoint=None, checkpoint_every=1000):
        """Explore with exact HMC, fit the surrogate, then draw samples with the generalized
        leapfrog on it.

        Parameters
        ----------
        draws, chains, rng, init, progress, pool
            As for :meth:`rnshmc.RNSHMC.sample`.
        tune : int
            Exploration iterations per chain (default 1000: RNS-RMHMC has no trust watch yet,
            and its metric, the surrogate's Hessian, needs a surrogate fitted well around the
            posterior, so it keeps a longer exploration than RNS-HMC's default 200).

        Returns
        -------
        SampleResult
            The keys of :meth:`rnshmc.RNSHMC.sample` and the implicit solver's of
            :meth:`rnshmc.RMHMC.sample`.
        """
        return super().sample(draws=draws, tune=tune, chains=chains, rng=rng, init=init,
                              progress=progress, pool=pool,
                              checkpoint=checkpoint, checkpoint_every=checkpoint_every)

    def init_states(self, draws=1000, tune=1000, chains=1, rng=None, init=None):
        states = super().init_states(draws, tune, chains, rng, init)
        if np.ndim(self.rm_step_size) and len(self.rm_step_size) != len(states):
            raise ValueError(f"step_size has {len(self.rm_step_size)} entries (one per chain), "
                             f"sampling {len(states)} chains")
        return states

    def plan(self, draws, tune):
        phases = super().plan(draws, tune)
        if self.rm_step_size is None:
            phases.insert(2, ["adaptation", self.n_adapt])
        return phases

    def make_chain(self, name, state, ctarget):
        if name not in ("adaptation", "sampling"):
            return super().make_chain(name, state, ctarget)
        surrogate = RandomNetworkSurrogate.from_state(state.extras["surrogate"])
        metric = surrogate.hessian_metric(diagonal=self.metric == "diagonal", softabs=self.softabs)
        return Chain(surrogate._ctarget, ctarget, metric,
                     GeneralizedLeapfrog(state.dim, self.fixed_point_tol,
                                         self.max_fixed_point_iterations, self.newton),
                     max_energy_error=self.max_energy_error)

    def adapts_step_size(self, state):
        name = state.phases[state.phase_index][0]
        if name in ("adaptation", "sampling"):
            return self.rm_step_size is None
        return super().adapts_step_size(state)

    def trajectory(self, name, state):
        if name in ("adaptation", "sampling"):
            return self.rm_n_steps, self.rm_jitter
        return super().trajectory(name, state)

    def _sampling_n_steps(self, state, generator):
        return self.rm_n_steps

    def begin_phase(self, name, chain, state, generator):
        if name == "adaptation":
            self._start_sampling(chain, state)
            step_size = initial_step_size(chain, generator, target_accept=self.target_accept)
            chain.restart_step_size_adaptation(step_size, self.target_accept)
        elif name == "sampling" and "adaptation" in dict(state.phases):
            # continue from the adaptation's last state with its averaged step size
            chain.set_state(state.kernel, counters=False)
        elif name == "sampling":
            self._start_sampling(chain, state)
            chain.step_size = (float(self.rm_step_size) if np.ndim(self.rm_step_size) == 0
                               else float(self.rm_step_size[state.chain]))
        else:
            super().begin_phase(name, chain, state, generator)

    def result(self, states):
        result = super().result(states)
        adaptation = np.array([s.evals.get("adaptation", [0, 0])[0] for s in states], dtype=np.int64)
        result["n_density_evals_explore"] = result["n_density_evals_explore"] + adaptation
        result["n_density_evals"] = result["n_density_evals"] + adaptation
        result["metric"] = self.metric
        return riemannian_stats(result, states)
