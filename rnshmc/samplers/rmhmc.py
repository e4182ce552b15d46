"""Riemannian-manifold HMC (Girolami and Calderhead 2011) with the generalized leapfrog, and
RNS-RMHMC: the generalized leapfrog on a random-network surrogate's potential and Hessian
metric, with the exact Metropolis test (Zhang, Shahbaba and Zhao 2017; ``docs/algorithms.md``)."""
import warnings

import numpy as np

from .._kernels._fem import GaussNewtonMetric
from .._kernels._riemann import CallableMetric, LinearPredictorMetric
from ..models import EllipticPDE, LogisticRegression
from ..targets import as_ctarget
from ..surrogate import Surrogate
from ..validation import (check_group, check_integer, check_real, refuse_renamed,
                          user_stacklevel)
from ._base import Sampler, warn_unadapted
from .phases.base import LeapfrogSettings, Phase, by_name
from .phases.dynamics import SurrogateSampling, trust_watch, warn_about_surrogate
from .phases.exact import HMCPhase
from .phases.exploration import HMCExploration
from .phases.fit import FitState, SurrogateFit, SurrogateSettings
from .phases.riemannian import (RiemannianKernel, RiemannianPhase,
                                RiemannianSurrogateAdaptation, SurrogateMetric,
                                riemannian_report)
from .rns import EXPLORE_KEYS, NETWORK_KEYS, surrogate_group

__all__ = ["RMHMC", "RNSRMHMC"]

SURROGATE_KEYS = NETWORK_KEYS + ("gradient_weight", "n_train")
# RNS-RMHMC's earlier keyword arguments: (their group, their new name), named by the error
# they raise
RENAMED = dict({key: ("surrogate", key) for key in SURROGATE_KEYS},
             explore_step_size=("explore", "step_size"), explore_n_steps=("explore", "n_steps"),
             explore_jitter=("explore", "jitter"), n_explore=("sample", "tune"),
             **{key: ("explore", key) for key in ("mass_matrix", "inverse_mass_matrix",
                                                  "adapt_mass_matrix")})


def _check_solver_settings(fixed_point_tol, max_fixed_point_iterations, softabs,
                           auto=False):
    """Validated (tol or None, iterations, softabs alpha or 0, or "auto" where ``auto``),
    warning about the papers' unchecked fixed iterations."""
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
    if not (auto and isinstance(softabs, str) and softabs == "auto"):
        softabs = 0.0 if softabs is None else check_real(softabs, "softabs", lower=0.0)
    return fixed_point_tol, iterations, softabs


class RMHMC(Sampler):
    """Riemannian-manifold HMC: momenta p ~ N(0, G(q)) and the generalized leapfrog.

    H(q, p) = U(q) + 1/2 log det G(q) + 1/2 p^T G(q)^{-1} p; each step solves two implicit
    equations by fixed-point iteration (see ``GeneralizedLeapfrog``). A proposal whose solve
    did not converge is rejected and counted (``n_implicit_failures``).

    Three phases per chain: ``"approach"`` (the first ``hmc_warmup`` of the ``tune``
    iterations, default 1000: exact HMC with its step size adapted, which brings the chain
    from its starting point into the posterior's bulk), ``"warmup"`` (the rest of ``tune``:
    RMHMC with its step size adapted by dual averaging when ``step_size`` is None, else a
    burn-in; both discarded) and ``"sampling"``. See ``docs/algorithms.md`` (RMHMC).

    The approach is there because the starting point matters with a fixed step size: far out
    in the tails, where the metric is much flatter than at the posterior, a step size tuned
    for the posterior (e.g. the papers' on Bank Marketing, 0.4, started from draws in
    (-2, 2)) made every proposal diverge, and the chain never moved; after 50 iterations of
    exact HMC the same RMHMC accepted 0.96 of its proposals. ``hmc_warmup=0`` starts RMHMC
    at the initial point, as the papers did (start at the mode then:
    ``rnshmc.experiments.find_mode``, Newton's method with this metric).

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
        Tolerance of the implicit solves on the iterates' change, relative to ``1 + |iterate|``
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
    hmc_warmup : int or "auto"
        Warm-up iterations of exact HMC (step size adapted, L = 10 jittered) before the
        RMHMC warm-up. "auto" (default): a quarter of ``tune``, at most 200; 0: none.
    target_accept, max_energy_error
        As for :class:`~rnshmc.HMC`.

    Notes
    -----
    The result has the keys of :meth:`rnshmc.HMC.sample`'s (``energy`` includes 1/2 log det
    G), plus ``solver_iterations`` (chains, draws), ``implicit_failed`` (chains, draws),
    ``mean_solver_iterations`` (per step, per chain) and ``n_implicit_failures`` (per chain)
    of the sampling phase; and the exact metric's evaluations per chain, ``n_metric_evals``
    and ``n_metric_derivative_evals`` (all phases) and their ``_sampling`` counts. A metric
    evaluation is exact model work not in ``n_gradient_evals``: the Fisher metric is a pass
    over the data; the Gauss-Newton metric of a PDE is the forward solve plus one
    sensitivity solve per parameter on its factorisation, and its derivatives second-order
    sensitivities.

    Examples
    --------
    >>> import rnshmc
    >>> X, y, _ = rnshmc.datasets.simulated_logistic(n=1000, dim=3, rng=0)
    >>> model = rnshmc.models.LogisticRegression(X, y)
    >>> res = rnshmc.RMHMC(model, metric="fisher", step_size=0.5, n_steps=3).sample(
    ...     200, tune=100, rng=0, progress=False)
    >>> res.samples.shape
    (4, 200, 3)
    """

    name = "RMHMC"

    def __init__(self, target, *, metric="fisher", metric_derivatives=None, step_size=None,
                 n_steps=6, jitter=False, softabs=None, fixed_point_tol=1e-9,
                 max_fixed_point_iterations=50, newton=False, hmc_warmup="auto",
                 target_accept=0.8, max_energy_error=1000.0):
        super().__init__(target)
        if not (isinstance(hmc_warmup, str) and hmc_warmup == "auto"):
            hmc_warmup = check_integer(hmc_warmup, "hmc_warmup", minimum=0)
        self.hmc_warmup = hmc_warmup
        # no mass matrix: the metric is position-dependent
        self.leapfrog = LeapfrogSettings(step_size, n_steps, jitter, adapt_mass_matrix=False,
                                         target_accept=target_accept,
                                         max_energy_error=max_energy_error)
        tol, iterations, self.softabs = _check_solver_settings(
            fixed_point_tol, max_fixed_point_iterations, softabs)
        self.solver = dict(tol=tol, max_iterations=iterations, newton=bool(newton))
        self.metric = metric
        self.metric_derivatives = metric_derivatives
        dim = self.dim
        self._make_metric(dim if dim is not None else 1, check_only=dim is None)
        approach = LeapfrogSettings(None, 10, True, adapt_mass_matrix=False,
                                    target_accept=target_accept,
                                    max_energy_error=max_energy_error)
        self.phases = by_name(
            HMCPhase(Phase.APPROACH, approach, adapt=True),
            RiemannianPhase(Phase.WARMUP, self._make_metric, self.solver, self.leapfrog,
                            adapt=True),
            RiemannianPhase(Phase.SAMPLING, self._make_metric, self.solver, self.leapfrog,
                            keep=("samples", "records")))

    def plan(self, draws, tune, chains, dim):
        self.leapfrog.check_chains(chains)
        warn_unadapted(self.name, tune, self.leapfrog.step_size)
        approach = min(200, tune // 4) if self.hmc_warmup == "auto" else self.hmc_warmup
        if approach > tune:
            raise ValueError(f"hmc_warmup ({approach}) exceeds tune ({tune})")
        phases = [[Phase.WARMUP, tune - approach], [Phase.SAMPLING, draws]]
        return ([[Phase.APPROACH, approach]] + phases) if approach else phases

    def _make_metric(self, dim, check_only=False):
        """A new metric object for one chain (each chain factorises its own G)."""
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

    def calls_python(self):
        return callable(self.metric)

    def report(self, result, states):
        riemannian_report(result, states, exact_metric=True)


class RNSRMHMC(Sampler):
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
    softabs : float, "auto" or None
        SoftAbs sharpness alpha: a surrogate's Hessian need not be positive definite. "auto"
        (default): the Hessian as it is where it is positive definite at every training
        state, else SoftAbs with alpha the training states' largest variance (the metric's
        smallest eigenvalue is then their smallest precision); chosen again at each refit
        (``result["softabs"]``). None: the Hessian as it is, as in the papers (a ValueError
        names a starting point where it is not positive definite; trajectories that reach
        such a point are rejected).
    step_size, n_steps, jitter
        Of the generalized leapfrog in the sampling phase (the papers' table gives these).
        ``step_size=None`` adapts it by dual averaging in ``n_adapt`` iterations on the
        surrogate after training (their exact evaluations count to training).
    n_adapt : int
        Iterations of that adaptation (default 500).
    explore : dict, optional
        The exploration's exact HMC: ``step_size`` (None, default: adapted, with the mass
        matrix), ``n_steps`` (default 10), ``jitter`` (default True), ``mass_matrix``,
        ``inverse_mass_matrix``, ``adapt_mass_matrix``, ``target_accept``, as for
        :class:`~rnshmc.HMC`. Its length is ``sample()``'s ``tune``.
    fixed_point_tol, max_fixed_point_iterations, newton
        As for :class:`RMHMC`.
    n_hidden : int or "auto"
        Hidden units of the surrogate: "auto" (default) as for :class:`~rnshmc.RNSHMC`
        (1000 up to d = 36, then 1.5 times the d (d + 1) / 2 coefficients of a quadratic
        form, at most 4000).
    surrogate : dict or RandomNetworkSurrogate, optional
        As for :class:`~rnshmc.RNSHMC`: ``nodes`` (additive only), ``activation``, ``ridge``,
        ``weight_scale``, ``whiten``, ``gradient_weight``, ``n_train``; the training data
        are the exploration's states. A random network only: its Hessian is the metric (a
        GP surrogate is refused).
    trust : dict or bool
        The trust watch, as for :class:`~rnshmc.RNSHMC` (default True): a window of sampling
        acceptance under ``ratio`` times the exploration's refits the surrogate after a
        stretch of exact HMC (the exploration's step size and mass matrix; a general target
        has no exact metric), and after ``max_refits`` refits the rest of the chain is exact
        HMC (fallback; NUTS with ``kernel`` "nuts"), recorded in the result and warned about.
    target_accept, max_energy_error
        As for :class:`~rnshmc.HMC` (the step sizes are adapted to ``target_accept``).

    Attributes
    ----------
    DEFAULT_TUNE : int
        ``sample()``'s default ``tune`` (exploration iterations per chain): 1000.
        Its metric, the surrogate's Hessian, needs a surrogate fitted well around the
        posterior, so it keeps a longer exploration than RNS-HMC's 200.

    Notes
    -----
    Earlier names (``explore_step_size``, ``explore_n_steps``, ``explore_jitter``,
    ``mass_matrix``, ``inverse_mass_matrix``, ``adapt_mass_matrix``, ``nodes``,
    ``activation``, ``ridge``, ``weight_scale``, ``whiten``, ``gradient_weight``,
    ``n_train``, ``n_explore``) raise a TypeError naming the new spelling.

    The result has the keys of :class:`~rnshmc.RNSHMC`'s (the trust watch's included) and
    the implicit solver's of :class:`rnshmc.RMHMC`'s, ``metric``, and ``softabs`` (per
    chain, the SoftAbs sharpness its last fit used; 0: the Hessian as it is).
    """

    name = "RNS-RMHMC"

    def __init__(self, target, *, metric="hessian", softabs="auto", n_hidden="auto",
                 surrogate=None, step_size=None, n_steps=6, jitter=False, n_adapt=500,
                 explore=None, fixed_point_tol=1e-9, max_fixed_point_iterations=50,
                 newton=False, trust=True, target_accept=0.8, max_energy_error=1000.0,
                 **renamed):
        super().__init__(target)
        refuse_renamed(type(self).__name__, renamed, RENAMED)
        surrogate = surrogate_group(surrogate, SURROGATE_KEYS)
        n_hidden = surrogate.pop("n_hidden", n_hidden)
        explore = check_group(explore, "explore", EXPLORE_KEYS)
        nodes, activation = surrogate.get("nodes", "additive"), surrogate.get("activation",
                                                                              "softplus")
        if metric not in ("hessian", "diagonal"):
            raise ValueError(f"metric must be 'hessian' or 'diagonal', got {metric!r}")
        if not Surrogate.kinds[surrogate.get("kind", "random_network")].has_hessian_metric:
            raise ValueError("RNS-RMHMC needs a surrogate whose Hessian gives the metric (a "
                             f"random network): a {surrogate['kind']} surrogate has none")
        if nodes != "additive" or activation == "exp":
            raise ValueError("RNS-RMHMC needs additive nodes with a softplus, sigmoid or tanh "
                             "activation (the Hessian metric's derivatives are for those)")
        self.metric = metric
        # the exploration's exact HMC; the sampling's generalized leapfrog
        self.leapfrog = LeapfrogSettings(
            explore.get("step_size"), explore.get("n_steps", 10), explore.get("jitter", True),
            explore.get("mass_matrix"), explore.get("inverse_mass_matrix"),
            explore.get("adapt_mass_matrix"), explore.get("target_accept", target_accept),
            max_energy_error, dim=self.dim)
        self.sampling_leapfrog = LeapfrogSettings(step_size, n_steps, jitter,
                                                  adapt_mass_matrix=False,
                                                  target_accept=target_accept,
                                                  max_energy_error=max_energy_error)
        tol, iterations, self.softabs = _check_solver_settings(
            fixed_point_tol, max_fixed_point_iterations, softabs, auto=True)
        self.solver = dict(tol=tol, max_iterations=iterations, newton=bool(newton))
        self.trust = trust_watch(trust)
        self.n_adapt = check_integer(n_adapt, "n_adapt", minimum=1)
        settings = SurrogateSettings.from_group(n_hidden, surrogate)
        exploration = HMCExploration(self.leapfrog, surrogate.get("n_train"),
                                     training_data="states")
        riemannian = SurrogateMetric(metric, self.softabs, self.solver, self.sampling_leapfrog)
        self.fit = SurrogateFit(self.name, exploration, settings, share=False,
                                kernel=RiemannianKernel(riemannian), jitter=self.leapfrog.jitter)
        self.phases = by_name(
            exploration, self.fit, RiemannianSurrogateAdaptation(self.fit, riemannian),
            SurrogateSampling(self.fit, self.leapfrog, trust=self.trust, metric=riemannian,
                              after_adaptation=self.sampling_leapfrog.step_size is None))

    def plan(self, draws, tune, chains, dim):
        n_explore = self.fit.exploration.length(tune)
        self.leapfrog.check_chains(chains)
        self.sampling_leapfrog.check_chains(chains)
        phases = [[Phase.EXPLORATION, n_explore], [Phase.TRAINING, 0], [Phase.SAMPLING, draws]]
        if self.sampling_leapfrog.step_size is None:
            phases.insert(2, [Phase.ADAPTATION, self.n_adapt])
        return phases

    def report(self, result, states):
        result["delayed_acceptance"] = False
        result["share_surrogate"] = False
        warn_about_surrogate(self.name, self.trust, result, result.exploration_acceptance_rate,
                             "the exploration's acceptance")
        result["metric"] = self.metric
        result["softabs"] = np.array([FitState.of(s).softabs for s in states])
        riemannian_report(result, states)
