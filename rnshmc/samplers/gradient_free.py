"""RNS-HMC without model gradients (issue 12): an adaptive-Metropolis exploration, a surrogate
fitted to the potential's values, then Hamiltonian dynamics on the surrogate with the exact
Metropolis test; and adaptive Metropolis on its own."""
import math
import warnings

import numpy as np

from .._kernels._chain import TRANSITION
from .._kernels._metropolis import MetropolisChain
from .._kernels._targets import PotentialOnly
from ..adaptation import WarmupSchedule, initial_step_size, terminal_buffer
from ..targets import as_ctarget, target_dim
from ..validation import check_real
from .driver import ChainSampler, Phase, user_stacklevel
from .rns import RNSHMC

__all__ = ["GradientFreeRNSHMC", "AdaptiveMetropolis", "without_gradient"]

# the first window of the proposal covariance's estimate (then doubling, Stan's schedule)
FIRST_WINDOW = 50
# the additive units' weight scale on whitened inputs, times 1/sqrt(dim), for values-only fits
VALUES_WEIGHT_SCALE = 0.05


def adaptive_metropolis_chain(ctarget, state, n_adapt, target_accept):
    """The C chain of an adaptive-Metropolis phase of ``n_adapt`` transitions (frozen when
    ``n_adapt`` is 0): identity proposal covariance and scale 2.38 / sqrt(d) at first (the
    state restores the adapted ones); see :mod:`rnshmc._kernels._metropolis`."""
    ends = []
    if n_adapt > 0:
        ends = WarmupSchedule(n_adapt, init_buffer=0, term_buffer=terminal_buffer(n_adapt),
                              base_window=FIRST_WINDOW).ends
    return MetropolisChain(ctarget, np.eye(state.dim), 2.38 / np.sqrt(state.dim),
                           adapt=n_adapt > 0, n_adapt=n_adapt, window_ends=ends,
                           target_accept=target_accept)


def without_gradient(model):
    """A model seen without its gradient: a sampler given it can only evaluate densities, and
    asking for a gradient raises (for checks and comparisons).

    Parameters
    ----------
    model : built-in model, rnshmc.Target or BridgeStan-style object
        A built-in model (``rnshmc.models.*``) keeps its C-level density (and its
        ``density_flops``); a Python target is called through its ``log_density``.

    Returns
    -------
    object
        With ``dim``, ``log_density(q)`` and ``has_gradient`` False.

    Examples
    --------
    >>> import numpy as np, rnshmc
    >>> from rnshmc.samplers.gradient_free import without_gradient
    >>> model = without_gradient(rnshmc.models.Gaussian(np.zeros(2), np.eye(2)))
    >>> model.has_gradient, model.log_density(np.ones(2))
    (False, -1.0)
    """
    return _DensityOnly(model)


class _DensityOnly:
    has_gradient = False

    def __init__(self, model):
        self.model = model
        self.dim = target_dim(model)
        self.density_flops = getattr(model, "density_flops", None)
        self._ctarget = PotentialOnly(as_ctarget(model, self.dim))

    def log_density(self, q):
        return -self._ctarget.eval_potential(q)

    def __reduce__(self):
        return (_DensityOnly, (self.model,))


class AdaptiveMetropolis(ChainSampler):
    """Random-walk Metropolis with an adaptive Gaussian proposal (no gradient needed).

    During ``tune`` iterations the proposal's covariance is re-estimated from the chain's
    states in doubling windows (Haario et al. 2001's empirical covariance, over the latter half
    of the chain so far, shrunk towards its diagonal), and its scale adapted to the acceptance
    ``target_accept`` by Robbins-Monro (Andrieu and Thoms 2008); then it is frozen and the
    draws are those of a fixed Metropolis kernel. One density evaluation per iteration. See
    :mod:`rnshmc._kernels._metropolis`.

    Parameters
    ----------
    target : rnshmc.Target, built-in model or BridgeStan-style object
        Only its log density is used.
    target_accept : float
        Acceptance rate the scale is adapted to (default 0.234, optimal for random-walk
        proposals in many dimensions; about 0.44 is better in one or two).

    Examples
    --------
    >>> import numpy as np, rnshmc
    >>> target = rnshmc.Target(lambda q: -0.5 * q @ q, dim=2)
    >>> res = rnshmc.AdaptiveMetropolis(target).sample(5000, tune=1000, rng=0, progress=False)
    >>> res.samples.shape, int(res.n_gradient_evals[0])
    ((1, 5000, 2), 0)
    """

    name = "AM"
    NEEDS_GRADIENT = False
    PHASES = {"warmup": Phase(), "sampling": Phase(keep=("samples", "records"))}

    def __init__(self, target, target_accept=0.234):
        super().__init__(target, target_accept=target_accept)

    def plan(self, draws, tune):
        return [["warmup", tune], ["sampling", draws]]

    def phase_spec(self, name):
        return self.PHASES[name]

    def make_chain(self, name, state, ctarget):
        n_adapt = state.phases[0][1] if name == "warmup" else 0
        return adaptive_metropolis_chain(ctarget, state, n_adapt, self.target_accept)

    def begin_phase(self, name, chain, state, generator):
        super().begin_phase(name, chain, state, generator)
        if name == "sampling":  # the proposal adapted in warm-up, frozen
            state.inverse_mass = state.kernel["proposal_covariance"]  # reported in the result

    def result(self, states):
        result = super().result(states)
        result["proposal_covariance"] = result.pop("inverse_mass_matrix")
        return result


class GradientFreeRNSHMC(RNSHMC):
    """RNS-HMC for models without a gradient: only exact densities are evaluated.

    Three phases per chain, as in :class:`~rnshmc.RNSHMC`:

    1. **exploration**: adaptive Metropolis (:class:`AdaptiveMetropolis`'s warm-up: the
       proposal covariance re-estimated in doubling windows, the scale adapted to acceptance
       ``explore_accept``), one exact density per iteration;
    2. **training**: a :class:`~rnshmc.RandomNetworkSurrogate` fitted to potential values
       only (the exploration has no gradients), by default one for all the chains, to their
       pooled explorations (``share_surrogate``); then each chain's sampling kernel, chosen
       without any
       exact evaluation: the inverse mass matrix is the exploration's proposal covariance
       (dense), the leapfrog step size is adapted by dual averaging to ``target_accept`` on
       HMC over the surrogate alone (a pilot of ``PILOT_ITERATIONS`` trajectories, each
       started from an exploration state drawn at random, so it cannot drift where the
       surrogate is wrong), and the number of steps chosen as RNS-HMC's
       ``surrogate_n_steps="auto"`` does;
    3. **sampling**: leapfrog on the surrogate's gradient, Metropolis test on the true density
       (one exact density per iteration, none for a diverging trajectory): exact whatever the
       surrogate's quality.

    Parameters
    ----------
    target : rnshmc.Target, built-in model or BridgeStan-style object
        Only its log density is used (e.g. ``rnshmc.Target(logp, dim=d)``).
    training_data : {"evaluations", "states"}
        The rows the surrogate is fitted to. "evaluations" (default): every exact evaluation
        of the exploration (of its last ``n_train`` iterations if given), i.e. every proposal,
        accepted or rejected, except non-finite ones and those above the highest state
        potential of the exploration's last 80% plus those states' range (the burn-in's
        far-out points, which would dominate the least-squares fit). "states": the chain
        states of its last ``n_train`` iterations (by default 80%), repeated rows from
        rejections included (the papers' choice for RNS-HMC). About three in four random-walk
        proposals are rejected, so "evaluations" fits four times as many distinct points at
        no extra cost. On the authors' elliptic PDE (``benchmarks/bench_gradient_free.py``:
        4 chains' explorations of 1000 iterations, pooled) the fit's error at posterior draws
        was 0.47-0.51 against 0.57-0.62 with the states, whose repeated rows neither helped
        nor hurt (the same with the distinct states only); from one chain's 2800 iterations,
        0.49-0.53 against 0.64-0.73; from one chain's 1000, the sampling acceptance was
        0.37-0.46 against 0.01-0.02.
    weight_scale : float or None
        As for :class:`~rnshmc.RNSHMC`, but None means 0.05 / sqrt(dim) for additive units on
        whitened inputs (``VALUES_WEIGHT_SCALE``): smoother units suit a fit to values alone.
        On the authors' PDE (2000 exploration iterations, values from the last 80%) the
        sampling acceptance was 0.54-0.59 at 0.1 / sqrt(dim), 0.24 at RNS-HMC's
        0.2 / sqrt(dim), and 0.65 at 0.05 / sqrt(dim) (0.56-0.60 at 0.02 / sqrt(dim)).
    n_hidden, nodes, activation, ridge, whiten, n_explore, n_train, delayed_acceptance, \
surrogate_n_steps, surrogate_step_cost, max_energy_error
        As for :class:`~rnshmc.RNSHMC`.
    step_size : float, ndarray of shape (chains,) or None
        The leapfrog step size of the sampling phase; None (default) adapts it on the
        surrogate (see above).
    n_steps : int
        Leapfrog steps (the maximum with ``jitter``) of the step-size pilot, and of sampling
        when ``surrogate_n_steps`` is None.
    jitter : bool
        Draw the number of steps uniformly from {1, ..., L} (default True).
    mass_matrix, inverse_mass_matrix
        The sampling phase's mass matrix; None (default) uses the exploration's proposal
        covariance as the inverse mass matrix.
    target_accept : float
        Of the step size's adaptation on the surrogate (default 0.8).
    explore_accept : float
        Of the exploration's proposal scale (default 0.234).
    share_surrogate : bool
        Fit one surrogate to the pooled explorations of all the chains (default True, unlike
        RNS-HMC: values-only fits are hungry for points), which wait for each other at the end
        of their explorations; see :class:`~rnshmc.RNSHMC`. False: each chain fits its own.
        On the authors' PDE (4 chains x 2000 draws, the default exploration lengths: 1000
        iterations per chain pooled, 2800 each alone; 3 and 5 seeds) min ESS per exact solve,
        exploration included, was 0.23-0.32 pooled against 0.13-0.18 alone.

    Notes
    -----
    There is no trust watch (RNS-HMC's falls back to exact HMC, which needs gradients). After
    sampling, a window of draws whose acceptance is under a third of what the surrogate's own
    dynamics accept (``surrogate_acceptance_rate``, the pilot's mean acceptance probability
    at the sampling step size and length) is warned about: the surrogate is poor there (the
    chain is still exact, but mixes slowly).

    Examples
    --------
    >>> import numpy as np, rnshmc
    >>> target = rnshmc.Target(lambda q: -0.5 * q @ q, dim=3)      # no gradient
    >>> rns = rnshmc.GradientFreeRNSHMC(target, n_hidden=100)
    >>> res = rns.sample(1000, tune=500, rng=0, progress=False)
    >>> res.samples.shape, int(res.n_gradient_evals[0])
    ((1, 1000, 3), 0)
    """

    name = "GF-RNS-HMC"
    NEEDS_GRADIENT = False
    PHASES = {"exploration": Phase(keep=("samples", "records", "proposals")),
              "training": Phase(),
              "sampling": Phase(keep=("samples", "records"))}
    # the step size's pilot on the surrogate: adapting trajectories, then trajectories at the
    # chosen step size and length whose mean acceptance is the reference of the warning
    PILOT_ITERATIONS = 300
    PILOT_CHECK = 100

    def __init__(self, target, n_hidden="auto", nodes="additive", activation="softplus",
                 ridge=1e-6, step_size=None, n_steps=10, jitter=True, n_explore=None,
                 n_train=None, training_data="evaluations", delayed_acceptance=False,
                 whiten=True, weight_scale=None, surrogate_n_steps="auto",
                 surrogate_step_cost="auto", mass_matrix=None, inverse_mass_matrix=None,
                 target_accept=0.8, explore_accept=0.234, max_energy_error=1000.0,
                 share_surrogate=True):
        super().__init__(target, n_hidden=n_hidden, nodes=nodes, activation=activation,
                         ridge=ridge, step_size=step_size, n_steps=n_steps, jitter=jitter,
                         n_explore=n_explore, n_train=n_train, training_data="states",
                         delayed_acceptance=delayed_acceptance, whiten=whiten,
                         gradient_weight=0.0, weight_scale=weight_scale,
                         surrogate_n_steps=surrogate_n_steps,
                         surrogate_step_cost=surrogate_step_cost, mass_matrix=mass_matrix,
                         inverse_mass_matrix=inverse_mass_matrix, adapt_mass_matrix=False,
                         target_accept=target_accept, max_energy_error=max_energy_error,
                         trust_ratio=None, share_surrogate=share_surrogate)
        if training_data not in ("evaluations", "states"):
            raise ValueError(f"training_data must be 'evaluations' or 'states', got "
                             f"{training_data!r}")
        self.training_data = training_data
        self.explore_accept = check_real(explore_accept, "explore_accept", lower=0.0, upper=1.0)

    def sample(self, draws=1000, tune="auto", chains=1, rng=None, init=None, progress=True,
               pool="auto", checkpoint=None, checkpoint_every=1000):
        """Explore with adaptive Metropolis, fit the surrogate, then draw samples.

        Parameters
        ----------
        draws : int
            Number of kept iterations per chain (sampling phase).
        tune : int or "auto"
            Exploration iterations per chain (unless ``n_explore`` was given), discarded;
            each costs one exact density. "auto" (default): :meth:`exploration_length`.
        chains, rng, init, progress, pool, checkpoint, checkpoint_every
            As for :meth:`rnshmc.RNSHMC.sample`.

        Returns
        -------
        SampleResult
            The keys of :meth:`rnshmc.RNSHMC.sample` (``n_gradient_evals`` is 0;
            ``exploration_acceptance_rate`` is the adaptive Metropolis's over the training
            window; no exact dynamics, refits or fallback), plus
            ``surrogate_acceptance_rate`` (per chain: the pilot's mean acceptance on the
            surrogate alone at the sampling step size and length), ``proposal_covariance``
            (chains, dim, dim) and ``proposal_scale`` (chains,): the exploration's final
            random-walk proposal, scale times a Cholesky factor of the covariance.
        """
        return super().sample(draws=draws, tune=tune, chains=chains, rng=rng, init=init,
                              progress=progress, pool=pool, checkpoint=checkpoint,
                              checkpoint_every=checkpoint_every)

    def init_states(self, draws=1000, tune="auto", chains=1, rng=None, init=None):
        """The initial state of each chain (arguments as for :meth:`sample`)."""
        if isinstance(tune, str):
            if tune != "auto":
                raise ValueError(f"tune must be an integer or 'auto', got {tune!r}")
            dim = target_dim(self.target) if hasattr(self.target, "dim") else None
            if dim is None and init is not None:
                dim = np.shape(init)[-1]
            tune = self.exploration_length(  # (no dim: init_states says what is missing)
                dim or 1, chains if self.share_surrogate else 1)
        return super().init_states(draws, tune, chains, rng, init)

    @staticmethod
    def exploration_length(dim, chains=1):
        """The default exploration length per chain for a ``dim``-dimensional target: twelve
        times the (d + 1)(d + 2) / 2 coefficients of a quadratic form in d dimensions, shared
        among the ``chains`` whose explorations a shared surrogate pools, rounded up to a
        hundred; at least 50 d (the adaptive Metropolis's own adaptation) and 500.

        A values-only fit needs many more points than one with gradients (one equation per
        point, not d + 1); with ``training_data="evaluations"`` about ten per coefficient
        were enough. Chains fitting their own surrogates: the sampling acceptance of
        correlated Gaussians reached 0.85 (d = 2, 5, 10) from 250, 500 and 500-1000
        exploration iterations, 0.79 (d = 20) from 2000; on the authors' elliptic PDE
        (d = 20, 4 chains x 2000 draws, 4 seeds) 2000, 2800 and 4000 iterations gave
        acceptance 0.62-0.68, 0.68-0.70 and 0.71-0.72 and min ESS per exact solve,
        exploration included, 0.11-0.18, 0.15-0.17 and 0.13-0.16. With the 4 chains'
        explorations pooled (2 seeds): 700, 1000, 1400 and 2800 iterations per chain gave
        0.19-0.23, 0.28-0.32, 0.24-0.26 and 0.18-0.22.

        Parameters
        ----------
        dim : int
        chains : int
            The number of chains whose explorations one surrogate's fit pools.

        Returns
        -------
        int
        """
        coefficients = (dim + 1) * (dim + 2) / 2
        return int(max(500, 50 * dim, 100 * math.ceil(12 * coefficients / chains / 100)))

    # ------------------------------------------------------------------------------------------

    def make_chain(self, name, state, ctarget):
        if name == "exploration":
            return adaptive_metropolis_chain(ctarget, state, state.phases[0][1],
                                             self.explore_accept)
        return super().make_chain(name, state, ctarget)

    def begin_phase(self, name, chain, state, generator):
        if name == "exploration":  # the chain adapts by itself: no HMC step-size search
            ChainSampler.begin_phase(self, name, chain, state, generator)
        else:
            super().begin_phase(name, chain, state, generator)

    def _surrogate_options(self, dim, n_hidden):
        # the default weight scale of values-only fits for this dimension
        options = super()._surrogate_options(dim, n_hidden)
        if options["weight_scale"] is None and options["whiten"] and options["nodes"] == "additive":
            options["weight_scale"] = VALUES_WEIGHT_SCALE / math.sqrt(dim)
        return options

    def _training_data(self, state):
        """The exploration's training rows: (Q, U, None: no gradients)."""
        history = state.outputs["exploration"]
        window = self._training_window(state)
        U = -history["records"]["log_density"][window]
        if self.training_data == "states":
            Q = history["samples"][window]
        else:
            # all of the exploration's by default: the cap below leaves out its burn-in's
            # far-out points (a few huge values would dominate the least-squares fit)
            rows = history["proposals"][window if self.n_train is not None else slice(None)]
            rows = rows[rows[:, -1] <= 2 * np.max(U) - np.min(U)]  # NaN (not finite) fails too
            Q, U = rows[:, :-1], rows[:, -1]
        return Q, U, None

    def _train(self, state, generator):
        accepted = state.outputs["exploration"]["records"]["accepted"][self._training_window(state)]
        if not accepted.any():
            raise RuntimeError(
                f"{self.name} chain {state.chain}: the adaptive-Metropolis exploration accepted "
                f"no move in its last {accepted.size} iterations, so there is nothing to fit a "
                "surrogate to: give a longer exploration (tune) or a better init.")
        state.extras["proposal_covariance"] = state.kernel["proposal_covariance"]
        state.extras["proposal_scale"] = float(state.kernel["step_size"])
        if state.inverse_mass is None:
            state.inverse_mass = state.kernel["proposal_covariance"]
        super()._train(state, generator)
        state.extras["exact_n_steps"] = 0  # no exact dynamics

    def _sampling_n_steps(self, state, generator):
        # (called by RNSHMC._train once the surrogate is fitted: the sampling kernel is chosen
        # here, the step size first, since the number of steps depends on it)
        step_size = state.extras["step_size"]
        if step_size is None:
            step_size, _ = self._pilot(state, generator, None, self.n_steps,
                                       self.PILOT_ITERATIONS)
        state.kernel = dict(state.kernel, step_size=step_size)  # where sampling starts
        n_steps = super()._sampling_n_steps(state, generator)
        _, state.extras["surrogate_acceptance_rate"] = self._pilot(
            state, generator, step_size, n_steps, self.PILOT_CHECK)
        return n_steps

    def _pilot(self, state, generator, step_size, n_steps, n_iter):
        """HMC on the surrogate alone (no exact evaluation): ``n_iter`` trajectories of up to
        ``n_steps`` steps, each from an exploration state of the training window drawn at
        random. With ``step_size`` None the step size is adapted by dual averaging (from
        Stan's heuristic); returns (step size, mean acceptance probability)."""
        chain = self.new_chain(self._sampling_surrogate(state)._ctarget, state)
        starts = state.outputs["exploration"]["samples"][self._training_window(state)]
        picks = generator.integers(len(starts), size=n_iter)
        chain.set_position(starts[picks[0]])
        adapt = step_size is None
        if adapt:
            step_size = initial_step_size(chain, generator, target_accept=self.target_accept)
            chain.restart_step_size_adaptation(step_size, self.target_accept)
        else:
            chain.step_size = step_size
        samples, records = np.empty((1, state.dim)), np.empty(n_iter, TRANSITION)
        for i, pick in enumerate(picks):
            chain.set_position(starts[pick])
            chain.run(generator, 1, n_steps, self.jitter, samples, records[i:i + 1],
                      adapt_step_size=adapt)
        return (chain.final_step_size if adapt else step_size,
                float(records["accept_prob"].mean()))

    # ------------------------------------------------------------------------------------------

    def result(self, states):
        result = super().result(states)
        per_chain = lambda key: np.array([s.extras[key] for s in states])
        result["surrogate_acceptance_rate"] = per_chain("surrogate_acceptance_rate")
        result["proposal_covariance"] = per_chain("proposal_covariance")
        result["proposal_scale"] = per_chain("proposal_scale")
        self._warn_if_acceptance_collapsed(result)
        return result

    def _warn_if_acceptance_collapsed(self, result):
        """Warn about a chain whose acceptance over a window of draws (a tenth, at least 50)
        is under a third of the surrogate's own (called by :meth:`result` once that is in
        the result; RNS-HMC's call, before, compares with the exploration's instead)."""
        if "surrogate_acceptance_rate" not in result:
            return
        draws = result.accepted.shape[1]
        width = min(max(50, draws // 10), draws)
        windows = result.accepted[:, :draws // width * width].reshape(
            len(result.accepted), -1, width).mean(axis=2)
        for chain, (rates, reference) in enumerate(zip(windows, result.surrogate_acceptance_rate)):
            low = np.flatnonzero(rates < reference / 3)
            if low.size:
                warnings.warn(
                    f"{self.name} chain {chain}: acceptance fell to {rates[low[0]]:.2f} over "
                    f"draws {low[0] * width}-{(low[0] + 1) * width - 1}, under a third of the "
                    f"{reference:.2f} the surrogate's dynamics reach on the surrogate itself. "
                    "The surrogate is poor in part of the posterior: the chain is still exact "
                    "but mixes slowly there. Try a longer exploration (tune), more hidden units "
                    "(n_hidden) or a smaller step_size.",
                    RuntimeWarning, stacklevel=user_stacklevel())
