"""The surrogate's fit: its settings, the training phase, and the choice of the sampling
kernel.

:class:`SurrogateSettings` says which surrogate is fitted and how (a random network by
default, or a Gaussian process); :class:`SurrogateFit` is the "training" phase, without
iterations: it fits the surrogate to the exploration's training data (per chain, or once for
all chains at its barrier, :class:`SharedFit`), records in the chain's :class:`FitState` what
the trust watch compares with, and lets a kernel object choose the sampling kernel without an
exact evaluation (:class:`ExplorationKernel`, :class:`PilotKernel`; RNS-RMHMC's is in
``riemannian``).
"""
import dataclasses
import math
from typing import Optional

import numpy as np
import scipy.linalg

from ...adaptation import (fisher_low_rank, initial_step_size, regularized_variance,
                           trajectory_length_for_min_ess)
from ...parallel import one_blas_thread
from ...state import PartState, generator_from_json, generator_to_json
from ...surrogate import Surrogate, gradient_flops, surrogate_from_state
from ...validation import check_integer, check_real
from ..._kernels._chain import TRANSITION
from ..._kernels._surrogate import TailGuard
from .base import Phase, euclidean_chain, nuts_chain
from .exact import MetricWarmup

# the largest number of leapfrog steps the automatic trajectory length considers
MAX_AUTO_STEPS = 1024


class SurrogateSettings:
    """How a surrogate sampler fits its surrogate: which kind (a
    :class:`~rnshmc.RandomNetworkSurrogate` by default, or a
    :class:`~rnshmc.GaussianProcessSurrogate`), with which settings.

    Parameters
    ----------
    n_hidden : int or "auto"
        Hidden units of a random network ("auto": :meth:`hidden_units`); of a sparse GP, its
        inducing points (default: its ``n_inducing``); ignored by a full GP (a unit per
        training point).
    kind : str
        The surrogate's class, by its ``kind`` (:class:`rnshmc.surrogate.Surrogate`).
    gradient_weight : float or None
        Weight of the gradient misfit in the fit (0: values only). None: 1 for a surrogate
        that fits gradients, else 0 (a GP fits values only; more is refused).
    values_weight_scale : float or None
        With ``weight_scale`` None, additive units on whitened inputs: this over sqrt(dim)
        (the smoother units of values-only fits); None: the surrogate's default.
    **options
        The class's settings (its ``OPTIONS``). For a random network the defaults are
        ``nodes="additive"``, ``activation="softplus"``, ``ridge=1e-6``, ``whiten=True``.
    """

    NETWORK_DEFAULTS = dict(nodes="additive", activation="softplus", ridge=1e-6,
                            weight_scale=None, whiten=True)

    def __init__(self, n_hidden="auto", kind="random_network", gradient_weight=None,
                 values_weight_scale=None, **options):
        if kind not in Surrogate.kinds:
            raise ValueError(f"the surrogate kind must be one of {sorted(Surrogate.kinds)}, "
                             f"got {kind!r}")
        self.kind, self.cls = kind, Surrogate.kinds[kind]
        unknown = sorted(set(options) - set(self.cls.OPTIONS))
        if unknown:
            raise TypeError(f"a {self.cls.__name__} has no setting {', '.join(map(repr, unknown))}"
                            f" (it takes {', '.join(self.cls.OPTIONS)})")
        if n_hidden != "auto":
            n_hidden = check_integer(n_hidden, "n_hidden", minimum=1)
        self.n_hidden = n_hidden
        if gradient_weight is None:
            gradient_weight = 1.0 if self.cls.fits_gradients else 0.0
        self.gradient_weight = check_real(gradient_weight, "gradient_weight", lower=0.0,
                                          lower_inclusive=True)
        if self.gradient_weight > 0 and not self.cls.fits_gradients:
            raise ValueError(f"a {self.cls.__name__} fits values only: gradient_weight must "
                             f"be 0, got {gradient_weight!r}")
        options.pop("n_hidden", None)
        self.options = (dict(self.NETWORK_DEFAULTS, **options) if kind == "random_network"
                        else dict(options))
        self.values_weight_scale = values_weight_scale
        dim = self.cls.settings_dim(self.options)
        self.cls(dim, rng=0, **self.options_for(dim, 2))  # checks the options

    @classmethod
    def from_group(cls, n_hidden, group, values_weight_scale=None):
        """The settings of a sampler's ``surrogate=`` group (a dict; its other keys, such as
        ``n_train``, are the exploration's)."""
        kind = group.get("kind", "random_network")
        surrogate_class = Surrogate.kinds.get(kind)
        options = {k: group[k] for k in getattr(surrogate_class, "OPTIONS", ())
                   if k in group and k != "n_hidden"}
        return cls(group.get("n_hidden", n_hidden), kind,
                   gradient_weight=group.get("gradient_weight"),
                   values_weight_scale=values_weight_scale, **options)

    @property
    def whiten(self):
        """Whether the surrogate acts on whitened inputs."""
        return self.options.get("whiten", True)

    def hidden_units(self, dim):
        """The units of a fit in ``dim`` dimensions. A random network: ``n_hidden``, or with
        "auto" 1.5 times the d (d + 1) / 2 coefficients of a quadratic form, rounded up to a
        hundred, at least 1000 and at most 4000 (a random network's Hessian is a sum of s
        rank-one terms: with fewer units it cannot match even a Gaussian's). A sparse GP: its
        inducing points. A full GP: None (one per training point)."""
        if self.kind == "random_network":
            return auto_hidden_units(dim) if self.n_hidden == "auto" else self.n_hidden
        if not self.options.get("sparse", False):
            return None
        if self.n_hidden != "auto":
            return self.n_hidden
        return self.options.get("n_inducing", self.cls(1).n_inducing)

    def options_for(self, dim, n_hidden):
        """The surrogate class's arguments for a fit in ``dim`` dimensions with ``n_hidden``
        units (a random network's hidden units, a sparse GP's inducing points)."""
        options = dict(self.options)
        if self.kind == "random_network":
            options["n_hidden"] = n_hidden
            if (self.values_weight_scale is not None and options["weight_scale"] is None
                    and options["whiten"] and options["nodes"] == "additive"):
                options["weight_scale"] = self.values_weight_scale / math.sqrt(dim)
        elif options.get("sparse", False) and n_hidden is not None:
            options["n_inducing"] = n_hidden
        return options

    def fit(self, dim, generator, Q, U, G, n_hidden, online=False):
        """A new surrogate fitted to potentials ``U`` at ``Q`` (gradients ``G``), its random
        parts drawn from a child stream of ``generator`` (``online``: with the online
        estimator started)."""
        surrogate = self.cls(dim, rng=generator.spawn(1)[0], **self.options_for(dim, n_hidden))
        surrogate.fit(Q, U, gradients=G if self.gradient_weight > 0 else None,
                      gradient_weight=self.gradient_weight, online=online)
        return surrogate

    def step_cost(self, target, dim, setting, surrogate=None):
        """A surrogate leapfrog step's cost in exact densities: ``setting`` if a number, else
        (``"auto"``) the surrogate's gradient operation count (of the fitted ``surrogate``
        where given, else of one with :meth:`hidden_units`) over the target's
        ``density_flops`` where it has one (0 otherwise: steps free). NaN for a full GP
        before its fit (its units are its training points)."""
        if setting != "auto":
            return setting
        density_flops = getattr(target, "density_flops", None)
        if not density_flops:
            return 0.0
        if surrogate is not None:
            return surrogate.gradient_flops() / density_flops
        units = self.hidden_units(dim)
        if units is None:
            return math.nan
        return gradient_flops(dim, units, self.whiten) / density_flops


def auto_hidden_units(dim):
    """A random network's hidden units for a ``dim``-dimensional target with
    ``n_hidden="auto"`` (see :meth:`SurrogateSettings.hidden_units`)."""
    quadratic = 0.75 * dim * (dim + 1)
    return int(min(4000, max(1000, 100 * math.ceil(quadratic / 100))))


@dataclasses.dataclass
class FitState(PartState):
    """A chain's fitted surrogate and the sampling kernel chosen with it."""
    KEY = "fit"
    surrogate: Optional[dict] = None        # the surrogate's get_state()
    covariance: Optional[np.ndarray] = None  # the pooled explorations' (shared fits)
    covariance_states: int = 0                # the states it is estimated from
    exploration_acceptance_rate: float = math.nan
    explore_step_size: float = math.nan
    # the exploration's inverse mass matrix, which its step size was adapted with: the exact
    # stretches' and the fallback's (the sampling's may be another, the step size too)
    explore_inverse_mass: Optional[np.ndarray] = None
    sampling_step_size: float = math.nan
    surrogate_n_steps: int = 0
    exact_n_steps: int = 0
    surrogate_acceptance_rate: float = math.nan  # the pilot's (values-only fits)
    softabs: float = 0.0  # a Hessian metric's SoftAbs sharpness (0: the Hessian as it is)
    # the exploration's training window: its states' variances, and its mean squared jump
    # scaled by them (the trust watch's reference for how far the chain moves)
    jump_scale: Optional[np.ndarray] = None
    exploration_jump: float = math.nan
    warm_start: bool = False  # carried over from an earlier run (see Sampler.warm_states)
    # the surrogate's tail guard: its training inputs' mean, covariance factor and largest
    # whitened norm (tail_guard)
    guard: Optional[dict] = None


def tail_guard(surrogate, Q):
    """The tail guard of a surrogate fitted to inputs ``Q`` (``docs/algorithms.md`` section
    14): a dict of the inputs' ``mean``, the lower Cholesky ``factor`` of their covariance
    (the surrogate's whitening, where it whitens) and the ``radius``, the largest whitened
    norm of an input."""
    mean, factor = surrogate.input_mean_, surrogate.input_factor_
    if factor is None:
        mean, factor = surrogate._input_transform(Q)
    whitened = scipy.linalg.solve_triangular(factor, (Q - mean).T, lower=True)
    return dict(mean=np.array(mean), factor=np.array(factor),
                radius=float(np.sqrt(np.max(np.sum(whitened ** 2, axis=0)))))


def mean_jump(samples, scale):
    """The mean squared distance between consecutive ``samples``, each coordinate divided by
    its ``scale`` (a variance): how far a chain moves per iteration."""
    if len(samples) < 2:
        return math.nan
    return float(np.mean(np.sum(np.diff(samples, axis=0) ** 2 / scale, axis=1)))


def jump_reference(samples):
    """(scale, jump) of a chain's ``samples``: each coordinate's variance (1 where it is 0),
    and the mean squared jump between consecutive samples scaled by it (the trust watch's
    reference for how far a chain moves)."""
    variance = samples.var(axis=0)
    scale = np.where(variance > 0, variance, 1.0)
    return scale, mean_jump(samples, scale)


def exploration_covariance(exploration, states):
    """The covariance of the chains' training-window states (pooled)."""
    samples = np.concatenate([s.outputs[exploration.name]["samples"][exploration.window(s)]
                              for s in states])
    dim = samples.shape[1]
    covariance = np.atleast_2d(np.cov(samples, rowvar=False))
    distinct = len(np.unique(samples, axis=0))
    if distinct <= dim:
        # too few distinct states (a short exploration in many dimensions) for a full-rank
        # covariance: shrink it towards its diagonal (positive: the fit made sure the chain
        # moved, and a move changes every coordinate)
        weight = dim / (distinct + dim)
        covariance = (1 - weight) * covariance + weight * np.diag(np.diag(covariance))
    return covariance



class SurrogateFit(Phase):
    """The "training" phase: fit the surrogate to the exploration's training data (or receive
    the shared fit), then choose the sampling kernel. No iterations.

    Parameters
    ----------
    sampler_name : str
    exploration : HMCExploration or MetropolisExploration
    settings : SurrogateSettings
    share : bool
        One surrogate for all chains, fitted at a barrier (:class:`SharedFit`) to their
        pooled training data.
    kernel : callable
        ``kernel(run, fit, fit_state)``: chooses the sampling kernel once the surrogate is
        fitted (sets ``fit_state.surrogate_n_steps``, ``exact_n_steps``, and may set the
        step size in ``state.kernel``; see :class:`ExplorationKernel`, :class:`PilotKernel`).
    online : OnlineInstalls or None
        Told of every fit (ARNS-HMC keeps the fitted object as its online estimator).
    """

    def __init__(self, sampler_name, exploration, settings, share, kernel, online=None,
                 step_cost="auto", jitter=True):
        super().__init__(Phase.TRAINING)
        self.sampler_name, self.exploration, self.settings = sampler_name, exploration, settings
        self.share, self.kernel, self.online = share, kernel, online
        self.step_cost_setting, self.jitter = step_cost, jitter
        self.barrier = SharedFit() if share else None

    def warm(self, state):
        """A chain carried over from an earlier run starts its sampling with the surrogate
        and kernel it has (a warm start: see ``Sampler.warm_states``), its online install
        schedule drawn anew."""
        FitState.of(state).warm_start = True
        if self.online is not None:
            self.online.restart_schedule(state)

    def fit(self, state, generator, Q, U, G, n_hidden):
        """Fit a new surrogate and make it the chain's."""
        surrogate = self.settings.fit(state.dim, generator, Q, U, G, n_hidden,
                                      online=self.online is not None)
        fit = state.parts.setdefault(FitState.KEY, FitState())
        fit.surrogate = surrogate.get_state()
        fit.guard = tail_guard(surrogate, Q)
        if self.online is not None:
            self.online.fitted(state, surrogate, U)
        return surrogate

    def begin(self, run, chain):
        state = run.state
        fit = FitState.find(state)
        if fit is not None and fit.warm_start:  # the surrogate and kernel of an earlier run
            state.evals[self.name] = [0, 0]
            if self.online is not None:
                self.online.start(run)
            return
        rate = self.exploration.check_moved(state, self.sampler_name)
        if fit is None:  # (fitted already when shared)
            self.fit(state, run.generator, *self.exploration.training_rows(state),
                     self.settings.hidden_units(state.dim))
        fit = FitState.of(state)
        fit.exploration_acceptance_rate = rate
        fit.explore_step_size = float(state.kernel["step_size"])
        if state.inverse_mass is not None:
            fit.explore_inverse_mass = np.array(state.inverse_mass, dtype=np.float64)
        fit.jump_scale, fit.exploration_jump = jump_reference(
            state.outputs[self.exploration.name]["samples"][self.exploration.window(state)])
        state.evals[self.name] = [0, 0]
        self.kernel(run, self, fit)
        if self.online is not None:
            self.online.start(run)

    def choose_n_steps(self, run, per="iteration"):
        """The number of steps for min ESS per unit of cost: an exact density plus the
        surrogate's steps (``per="iteration"``), or an exact gradient per step (exact
        dynamics, ``per="step"``); see ``rnshmc.adaptation.trajectory_length_for_min_ess``."""
        state = run.state
        covariance = FitState.of(state).covariance
        if covariance is None:
            covariance = exploration_covariance(self.exploration, [state])
        n_steps, _ = trajectory_length_for_min_ess(
            covariance, state.inverse_mass, state.kernel["step_size"], self.jitter,
            MAX_AUTO_STEPS, per=per,
            step_cost=self.settings.step_cost(run.sampler.target, state.dim,
                                              self.step_cost_setting, self.surrogate(state)))
        return n_steps

    def dynamics(self, state, guarded=False):
        """The C target of the chain's surrogate dynamics; ``guarded``: in its tail guard
        (:class:`rnshmc._kernels._surrogate.TailGuard`)."""
        target = self.surrogate(state)._ctarget
        guard = FitState.of(state).guard
        if not guarded or guard is None:
            return target
        return TailGuard(target, guard["mean"], guard["factor"], float(guard["radius"]))

    def surrogate(self, state):
        """The surrogate the chain's dynamics run on."""
        if self.online is not None:
            return self.online.estimator(state)
        return surrogate_from_state(FitState.of(state).surrogate)



class SharedFit:
    """The barrier of a fit shared by every chain: a chain waits at the start of training for
    the surrogate fitted to every chain's training data, pooled (in chain order, with chain
    0's random stream), and at a warm start for its shared online estimator to be shared
    again."""

    def waiting(self, fit, state):
        if not (state.phase == fit.name and not state.phase_started):
            return False
        fit_state = FitState.find(state)
        if fit_state is None:
            return True
        return fit_state.warm_start and fit.online is not None and fit.online.unshared(state)

    def join(self, fit, states):
        if not any(self.waiting(fit, s) for s in states):
            return
        warm = [s for s in states if self.waiting(fit, s) and FitState.find(s) is not None]
        if warm:  # (a checkpoint or a copy holds one estimator per chain: chain 0's is theirs)
            fit.online.share_again(warm)
            return
        for state in states:  # (before the fit: a chain that never moved says so)
            fit.exploration.check_moved(state, fit.sampler_name)
        # one surrogate fitted to every chain's training data, given to every chain, and the
        # pooled exploration's covariance for their trajectory lengths
        Q, U, G = (None if parts[0] is None else np.concatenate(parts)  # (G: None without
                   for parts in zip(*map(fit.exploration.training_rows, states)))  # gradients)
        generator = generator_from_json(states[0].rng)
        surrogate = fit.fit(states[0], generator, Q, U, G,
                            fit.settings.hidden_units(states[0].dim))
        states[0].rng = generator_to_json(generator)
        covariance = exploration_covariance(fit.exploration, states)
        guard = FitState.of(states[0]).guard
        for state in states:
            state.parts[FitState.KEY] = FitState(
                surrogate=FitState.of(states[0]).surrogate, covariance=covariance, guard=guard,
                covariance_states=sum(len(s.outputs[fit.exploration.name]["samples"][
                    fit.exploration.window(s)]) for s in states))
            if state is not states[0] and fit.online is not None:
                fit.online.fitted(state, surrogate, U)
        if fit.online is not None:
            fit.online.shared_fit(states)


class ExplorationKernel:
    """Sample with ``n_steps`` surrogate steps per iteration ("auto": the shortest L with the
    best predicted min ESS per unit of cost), and choose the exact stretches' L for min ESS
    per exact gradient.

    The mass matrix and step size: given ones are kept (``step_size``: the sampling's, a
    float or one per chain); else, where the exploration adapted them (``leapfrog``), the
    inverse mass matrix becomes the (pooled, with a shared surrogate) training window's
    variance, shrunk as Stan's, and the step size is adapted to it on the surrogate alone
    (:func:`surrogate_pilot`: no exact evaluation). A short exploration's own estimate is
    one chain's few states (none at all under 150 iterations: Stan's warm-up has no slow
    window there), so the chains would sample with the identity. The pilot adapts the step
    size to ``target_accept`` (None: the exploration's).
    """

    def __init__(self, n_steps="auto", step_size=None, leapfrog=None, target_accept=None):
        self.n_steps = n_steps
        self.step_size = step_size  # the sampling's, if given (float or one per chain)
        self.leapfrog = leapfrog    # the exploration's (None: keep its kernel)
        self.target_accept = target_accept

    def __call__(self, run, fit, fit_state):
        state = run.state
        if self.step_size is not None:
            step_size = (float(self.step_size) if np.ndim(self.step_size) == 0
                         else float(self.step_size[state.chain]))
            state.kernel = dict(state.kernel, step_size=step_size)
        elif (self.leapfrog is not None and self.leapfrog.adapt_mass_matrix
              and self.leapfrog.step_size_of(state.chain) is None):
            covariance = fit_state.covariance
            if covariance is None:
                covariance = exploration_covariance(fit.exploration, [state])
            state.inverse_mass = regularized_variance(fit_state.covariance_states or len(
                state.outputs[fit.exploration.name]["samples"][fit.exploration.window(state)]),
                np.diag(covariance).copy())
            step_size, _ = surrogate_pilot(run, fit, self.leapfrog, None,
                                           self.leapfrog.n_steps, PILOT_ITERATIONS,
                                           self.target_accept)
            state.kernel = dict(state.kernel, step_size=step_size)
        fit_state.surrogate_n_steps = (fit.choose_n_steps(run) if self.n_steps == "auto"
                                       else self.n_steps)
        # exact stretches and the fallback pay a gradient per step: their L is chosen for min
        # ESS per gradient (the exploration's L only had to adapt and spread training states)
        fit_state.exact_n_steps = fit.choose_n_steps(run, per="step")


# a pilot's trajectories: the step size's adaptation on the surrogate alone, and the check of
# the surrogate's own acceptance at the chosen kernel
PILOT_ITERATIONS, PILOT_CHECK = 300, 100


def surrogate_pilot(run, fit, leapfrog, step_size, n_steps, n_iter, target_accept=None):
    """(step size, mean acceptance probability) of ``n_iter`` trajectories of HMC on the
    surrogate alone (no exact evaluation), each from a training-window state drawn at random,
    so that it cannot drift where the surrogate is wrong; with ``step_size`` None it is
    adapted by dual averaging to ``target_accept`` (None: ``leapfrog.target_accept``)."""
    state, generator = run.state, run.generator
    if target_accept is None:
        target_accept = leapfrog.target_accept
    chain = euclidean_chain(fit.surrogate(state)._ctarget, state, leapfrog.max_energy_error)
    starts = state.outputs[fit.exploration.name]["samples"][fit.exploration.window(state)]
    picks = generator.integers(len(starts), size=n_iter)
    chain.set_position(starts[picks[0]])
    adapt = step_size is None
    if adapt:
        step_size = initial_step_size(chain, generator, target_accept=target_accept)
        chain.restart_step_size_adaptation(step_size, target_accept)
    else:
        chain.step_size = step_size
    samples, records = np.empty((1, state.dim)), np.empty(n_iter, TRANSITION)
    for i, pick in enumerate(picks):
        chain.set_position(starts[pick])
        chain.run(generator, 1, n_steps, leapfrog.jitter, samples, records[i:i + 1],
                  adapt_step_size=adapt)
    return (chain.final_step_size if adapt else step_size,
            float(records["accept_prob"].mean()))


class PilotKernel:
    """Choose the sampling kernel without exact evaluations (values-only fits): the step size
    adapted on the surrogate alone (unless given; :func:`surrogate_pilot`), the steps as
    :class:`ExplorationKernel`, and the surrogate's own acceptance at that kernel (the
    reference of a warning)."""

    def __init__(self, leapfrog, n_steps="auto"):
        self.leapfrog, self.n_steps = leapfrog, n_steps

    def __call__(self, run, fit, fit_state):
        state = run.state
        step_size = self.leapfrog.step_size_of(state.chain)
        if step_size is None:
            step_size, _ = surrogate_pilot(run, fit, self.leapfrog, None,
                                           self.leapfrog.n_steps, PILOT_ITERATIONS)
        state.kernel = dict(state.kernel, step_size=step_size)  # where sampling starts
        n_steps = fit.choose_n_steps(run) if self.n_steps == "auto" else self.n_steps
        _, fit_state.surrogate_acceptance_rate = surrogate_pilot(
            run, fit, self.leapfrog, step_size, n_steps, PILOT_CHECK)
        fit_state.surrogate_n_steps, fit_state.exact_n_steps = n_steps, 0



class SurrogateNUTSKernel:
    """Sample with surrogate NUTS (``docs/algorithms.md``, surrogate NUTS): its metric and
    step size adapted by NUTS on the surrogate alone (:func:`surrogate_nuts_warmup`: no exact
    evaluation), unless a step size is given (then the exploration's metric). The exact
    stretches' static length is chosen as :class:`ExplorationKernel` chooses it, for the
    exploration's step size and metric.

    Parameters
    ----------
    settings : SurrogateNUTS
        The sampling kernel's tree depth and surrogate transitions per test.
    step_size : float, ndarray of shape (chains,) or None
        The sampling's step size, if given.
    leapfrog : LeapfrogSettings
        The exploration's (its max_energy_error, and the target acceptance statistic of the
        warm-up on the surrogate unless ``target_accept`` is given).
    target_accept : float or None
    """

    def __init__(self, settings, step_size=None, leapfrog=None, target_accept=None):
        self.settings, self.step_size, self.leapfrog = settings, step_size, leapfrog
        self.target_accept = target_accept

    def __call__(self, run, fit, fit_state):
        state = run.state
        fit_state.exact_n_steps = fit.choose_n_steps(run, per="step")
        fit_state.surrogate_n_steps = 0  # (a tree sets its own length)
        if self.step_size is not None:
            step_size = (float(self.step_size) if np.ndim(self.step_size) == 0
                         else float(self.step_size[state.chain]))
        else:
            state.inverse_mass, step_size = surrogate_nuts_warmup(
                run, fit, self.leapfrog, self.settings.max_tree_depth,
                self.leapfrog.target_accept if self.target_accept is None
                else self.target_accept)
        state.kernel = dict(state.kernel, step_size=step_size)


class SurrogateNUTS:
    """The settings of a surrogate NUTS sampling kernel: ``max_tree_depth`` doublings of a
    tree, ``inner_steps`` surrogate NUTS transitions per exact test."""

    def __init__(self, max_tree_depth=10, inner_steps=1):
        self.max_tree_depth = check_integer(max_tree_depth, "max_tree_depth", minimum=1)
        self.inner_steps = check_integer(inner_steps, "inner_steps", minimum=1)


# the iterations of NUTS on the surrogate alone before sampling (rnshmc.NUTS's warm-up)
SURROGATE_WARMUP = 300


def surrogate_nuts_warmup(run, fit, leapfrog, max_tree_depth, target_accept,
                          n_iter=SURROGATE_WARMUP):
    """(inverse mass, step size) of NUTS adapted on the surrogate alone (no exact
    evaluation): :func:`nuts_warmup` over ``n_iter`` transitions, each from a training-window
    state drawn at random (so the warm-up cannot drift where the surrogate is wrong)."""
    state, generator = run.state, run.generator
    chain = nuts_chain(fit.dynamics(state, guarded=True), state, leapfrog.max_energy_error,
                       max_tree_depth)
    starts = state.outputs[fit.exploration.name]["samples"][fit.exploration.window(state)]
    picks = generator.integers(len(starts), size=n_iter)
    chain.set_position(starts[picks[0]])
    return nuts_warmup(chain, generator, state, leapfrog, target_accept, n_iter,
                       state.inverse_mass, starts=starts[picks])


@one_blas_thread
def window_metric(draws, gradients, previous):
    """A warm-up window's dense inverse mass matrix from its draws and gradients
    (:func:`rnshmc.adaptation.fisher_low_rank`), or ``previous`` where they give none: the
    gradients in the window are not usable (a surrogate far off, with huge gradients where it
    extrapolates)."""
    try:
        estimate = fisher_low_rank(draws, gradients).dense()
        if not np.all(np.isfinite(estimate)):
            raise np.linalg.LinAlgError("not finite")
        np.linalg.cholesky(estimate)
        return estimate
    except (ValueError, np.linalg.LinAlgError):
        return previous


def nuts_warmup(chain, generator, state, leapfrog, target_accept, n_iter, inverse_mass,
                starts=None):
    """Adapt a positioned NUTS ``chain``'s step size and metric over ``n_iter`` transitions
    (not kept) and return (inverse mass, step size): the step size by dual averaging to
    ``target_accept`` from Stan's heuristic, and the metric, in the windows of the exact NUTS
    warm-up with the gradient metrics (:class:`MetricWarmup`), by
    :func:`rnshmc.adaptation.fisher_low_rank` from the transitions' draws and gradients; the
    last third adapts the step size alone. ``starts`` (n_iter, dim), if given: each
    transition starts there instead of where the last one ended. The chain ends at its last
    draw with the adapted metric and step size; ``inverse_mass`` is the chain's metric (kept
    where no window gives one)."""
    chain.restart_step_size_adaptation(
        initial_step_size(chain, generator, target_accept=target_accept), target_accept)
    # (the windows of the exact NUTS warm-up with the metrics from draws and gradients)
    schedule = MetricWarmup(leapfrog, "low_rank").schedule(state, n_iter)
    samples, gradients = np.empty((n_iter, state.dim)), np.empty((n_iter, state.dim))
    records = np.empty(n_iter, TRANSITION)
    window_start = schedule.slow_start
    for i in range(n_iter):
        if starts is not None:
            chain.set_position(starts[i])
        chain.run(generator, 1, 1, False, samples[i:i + 1], records[i:i + 1],
                  gradients=gradients[i:i + 1], adapt_step_size=True)
        if schedule.window_end(i):
            inverse_mass = window_metric(samples[window_start:i + 1],
                                         gradients[window_start:i + 1], inverse_mass)
            if inverse_mass is not None:
                chain.metric.set_inverse_mass(inverse_mass)
            chain.restart_step_size_adaptation(
                initial_step_size(chain, generator, chain.step_size, target_accept),
                target_accept)
            window_start = i + 1
    chain.step_size = chain.final_step_size
    return inverse_mass, chain.step_size
