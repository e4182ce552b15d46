"""RNS-HMC: Hamiltonian dynamics on a random-network surrogate, exact Metropolis test
(Algorithm 3 of Zhang, Shahbaba and Zhao 2017)."""
import math
import warnings

import numpy as np

from ..surrogate import RandomNetworkSurrogate, gradient_flops
from ..validation import check_integer, check_real
from ..targets import target_dim
from .driver import ChainSampler, Phase, user_stacklevel

__all__ = ["RNSHMC"]


class RNSHMC(ChainSampler):
    """HMC whose trajectories follow a random-network surrogate of the potential.

    Three phases per chain (named ``"exploration"``, ``"training"``, ``"sampling"``):

    1. **exploration**: exact HMC (step size and mass matrix adapted here unless given), whose
       chain states, with their potentials and gradients, are recorded;
    2. **training**: one fit of a :class:`~rnshmc.RandomNetworkSurrogate` to the last
       ``n_train`` exploration states (repeated rows from rejections included, as in the
       papers);
    3. **sampling**: the leapfrog runs on the surrogate's gradient; the Metropolis test uses
       the true density, so the chain targets the true posterior whatever the surrogate's
       quality (the surrogate flow is reversible and volume preserving). Each iteration costs
       one exact density evaluation and no exact gradient — or, with ``delayed_acceptance``,
       an exact evaluation only for proposals the surrogate itself accepts.

    Parameters
    ----------
    target : rnshmc.Target, built-in model or BridgeStan-style object
        The log density to sample. Must have a gradient (exploration is exact HMC).
    n_hidden : int or "auto"
        Hidden units s of the surrogate. "auto" (default): 1.5 times the d (d + 1) / 2
        coefficients of a quadratic form in d dimensions, rounded up to a hundred, at least
        1000 and at most 4000 (:meth:`hidden_units`). A random network's Hessian is a sum of
        s rank-one terms, so with fewer units than that it cannot match even a Gaussian's:
        on the simulated logistic regression (d = 50, 1275 coefficients) a surrogate fitted
        to posterior draws with gradients erred by 0.8-1.0 in potential (held out) at
        s = 1000 whatever the number of points, 0.03-0.12 at s = 2000. Above d = 72 the cap
        leaves fewer units than that; give a larger s if the fit time (growing as s^3)
        allows.
    nodes, activation, ridge, weight_scale, whiten
        The surrogate (see :class:`~rnshmc.RandomNetworkSurrogate`). ``whiten=True`` (default)
        lets the random units act on inputs standardised with the training states' mean and
        covariance; the papers use ``whiten=False``.
    gradient_weight : float
        Weight of the gradient misfit in the fit (the exploration computes exact gradients
        anyway). Default 1; 0 fits values only, as the papers do. On the authors' elliptic PDE
        (s = 1000, 4000 training states) whitening and gradients raised the acceptance from
        0.75 to 0.82 and min ESS from 2577 to 3664 of 5000 draws.
    step_size, n_steps, jitter, mass_matrix, inverse_mass_matrix, adapt_mass_matrix, \
target_accept, max_energy_error
        As for :class:`~rnshmc.HMC`; the step size and mass matrix of the exploration are kept
        for sampling. ``n_steps`` (default 5) is the exploration's number of leapfrog steps:
        its trajectories only have to adapt the kernel and spread the training states, and on
        the authors' PDE 5 cost 20-30% fewer exact evaluations to min ESS 1000 from a cold
        start than 10 (``benchmarks/bench_adaptive.py``).
    surrogate_n_steps : int, "auto" or None
        Number of leapfrog steps (the maximum with jitter) in the sampling phase, where steps
        are cheap. None means ``n_steps``. "auto" (default) chooses the shortest L whose
        predicted min ESS per unit of cost is within 90% of the best
        (:func:`rnshmc.adaptation.trajectory_length_for_min_ess`: the posterior approximated
        by a Gaussian with the training states' covariance, under the exploration's step
        size and mass matrix; an iteration costs one exact density plus
        ``surrogate_step_cost`` per step), at most ``MAX_AUTO_STEPS``; no exact evaluations
        of its own.
    surrogate_step_cost : float or "auto"
        The cost of one surrogate leapfrog step (a surrogate gradient) in exact densities,
        for ``surrogate_n_steps="auto"``. "auto" (default): the surrogate's
        :func:`~rnshmc.surrogate.gradient_flops` over the target's ``density_flops``
        attribute where it has one (the models in :mod:`rnshmc.models` do: 0.10 for the
        authors' PDE at s = 1000, 0.037 for a logistic regression with N = 100000, d = 50 at
        s = 2000), else 0 (steps free: a costly model given as a Python callable). An
        estimate from operation counts rather than timings, so that the same seed gives the
        same draws on any machine.
    n_explore : int or None
        Exploration iterations per chain. None means the ``tune`` given to :meth:`sample`.
    n_train : int or None
        Number of final exploration iterations used for training. None means the papers'
        protocol scaled to the exploration: its first 20% are discarded, the rest used.
    training_data : {"trajectories", "states"}
        What those iterations contribute to the fit: every leapfrog step of their
        trajectories with its exact potential and gradient (default; the exploration computes
        the gradient at every step anyway, the potential comes with it, and for a model a
        gradient evaluation is counted as a density evaluation already, so no evaluation is
        added), except steps of diverging trajectories and steps whose potential lies above
        the window's highest state's plus the states' range (early trajectories, before the
        step size settles, reach far into the tails); or their chain states (the papers';
        repeated rows from rejections included). On the simulated logistic regression
        (d = 50, 200 exploration iterations, s = 2000) trajectories cut the surrogate's
        held-out error on posterior draws from 0.37 to 0.09; on the authors' PDE they were
        as good as states (4 chains x 2000 draws: cost to min ESS 1000 6627 against 6715
        solves for ARNS-HMC, 7418 against 7150 for RNS-HMC, single runs).
    delayed_acceptance : bool
        Two-stage Metropolis test (Christen and Fox 2005): stage 1 on the surrogate's energy,
        stage 2 on the true one only for proposals that pass stage 1. Exact as well.
    trust_ratio : float or None
        The surrogate is watched where the chain is: over every ``trust_window`` sampling
        iterations on the surrogate's dynamics, an acceptance rate under ``trust_ratio`` times
        the exploration's (over its training window) distrusts it. The chain then runs
        ``refit_iterations`` iterations of exact HMC (kept draws; the exploration's step size
        and mass matrix, and the number of steps with the best predicted min ESS per exact
        gradient, ``exact_n_steps`` in the result, by the rule of ``surrogate_n_steps``
        priced per step), the surrogate is refitted to the training data
        plus those exact states with ``refit_growth`` times as many hidden units, and the
        chain goes back to the surrogate's dynamics. After ``max_refits`` refits a further
        distrust makes the rest of the chain exact HMC (fallback). Each refit and fallback is
        recorded in the result (``trust_events``, ``exact_dynamics``) and warned about.
        None turns the watch off (then only a warning when acceptance collapses).
    trust_window, max_refits, refit_iterations, refit_growth
        See ``trust_ratio`` (defaults 50, 2, 200, 2.0).
    share_surrogate : bool
        Fit one surrogate to the training data of all the chains' explorations, pooled, and
        sample every chain on it (default False: each chain fits its own to its own
        exploration). The chains wait for each other at the end of their explorations (the
        fit runs once, in the calling process); the trajectory length is chosen from the
        pooled exploration's covariance. A chain whose surrogate the trust watch distrusts
        refits a surrogate of its own. Pooling k chains' explorations gives the fit k times
        the points for the same exact evaluations, so a shorter ``tune`` may do.

    Notes
    -----
    Every transition, on the surrogate's dynamics or the exact ones, leaves the posterior
    invariant. The switches between them depend on the chain's past, as adaptation does; there
    are at most ``2 max_refits + 1`` of them, so after the last one the chain is a fixed exact
    kernel's (finite adaptation: the draws converge to the posterior as an ergodic chain's do).

    Examples
    --------
    >>> import rnshmc
    >>> X, y, _ = rnshmc.datasets.simulated_logistic(n=2000, dim=5, rng=0)
    >>> model = rnshmc.models.LogisticRegression(X, y)
    >>> res = rnshmc.RNSHMC(model, n_hidden=200).sample(1000, tune=1000, rng=0, progress=False)
    >>> res.samples.shape
    (1, 1000, 5)
    """

    name = "RNS-HMC"
    ONLINE = False  # fit with the online estimator (ARNS-HMC)
    MAX_AUTO_STEPS = 1024
    # the sampling phase keeps the gradients: an exact-dynamics stretch's states (with them)
    # are training data for a refit
    PHASES = {"exploration": Phase(adapt=True, keep=("samples", "records", "gradients")),
              "training": Phase(),
              "sampling": Phase(keep=("samples", "records", "gradients"))}

    def __init__(self, target, n_hidden="auto", nodes="additive", activation="softplus",
                 ridge=1e-6, step_size=None, n_steps=5, jitter=True, n_explore=None,
                 n_train=None, training_data="trajectories", delayed_acceptance=False, whiten=True,
                 gradient_weight=1.0,
                 weight_scale=None, surrogate_n_steps="auto", surrogate_step_cost="auto",
                 mass_matrix=None,
                 inverse_mass_matrix=None, adapt_mass_matrix=None, target_accept=0.8,
                 max_energy_error=1000.0, trust_ratio=0.5, trust_window=50, max_refits=2,
                 refit_iterations=200, refit_growth=2.0, share_surrogate=False):
        super().__init__(target, step_size=step_size, n_steps=n_steps, jitter=jitter,
                         mass_matrix=mass_matrix, inverse_mass_matrix=inverse_mass_matrix,
                         adapt_mass_matrix=adapt_mass_matrix, target_accept=target_accept,
                         max_energy_error=max_energy_error)
        if not (isinstance(n_hidden, str) and n_hidden == "auto"):
            n_hidden = check_integer(n_hidden, "n_hidden", minimum=1)
        self.n_hidden = n_hidden
        self.gradient_weight = check_real(gradient_weight, "gradient_weight", lower=0.0,
                                          lower_inclusive=True)
        self.surrogate_options = dict(nodes=nodes, activation=activation, ridge=ridge,
                                      weight_scale=weight_scale, whiten=whiten)
        dim = target_dim(target) if hasattr(target, "dim") else None
        if dim is not None:
            # validate the surrogate options now rather than after the exploration
            RandomNetworkSurrogate(dim, **dict(self.surrogate_options, n_hidden=1))
        if surrogate_n_steps is None:
            surrogate_n_steps = self.n_steps
        elif isinstance(surrogate_n_steps, str):
            if surrogate_n_steps != "auto":
                raise ValueError(f"surrogate_n_steps must be an integer, 'auto' or None, got "
                                 f"{surrogate_n_steps!r}")
        else:
            surrogate_n_steps = check_integer(surrogate_n_steps, "surrogate_n_steps", minimum=1)
        self.surrogate_n_steps = surrogate_n_steps
        if not (isinstance(surrogate_step_cost, str) and surrogate_step_cost == "auto"):
            surrogate_step_cost = check_real(surrogate_step_cost, "surrogate_step_cost",
                                             lower=0.0, lower_inclusive=True)
        self.surrogate_step_cost = surrogate_step_cost
        self.n_explore = None if n_explore is None else check_integer(n_explore, "n_explore", 2)
        self.n_train = None if n_train is None else check_integer(n_train, "n_train", 1)
        self.delayed_acceptance = bool(delayed_acceptance)
        if training_data not in ("states", "trajectories"):
            raise ValueError(f"training_data must be 'states' or 'trajectories', got "
                             f"{training_data!r}")
        self.training_data = training_data
        self.trust_ratio = None if trust_ratio is None else check_real(
            trust_ratio, "trust_ratio", lower=0.0, upper=1.0, upper_inclusive=True)
        self.trust_window = check_integer(trust_window, "trust_window", minimum=10)
        self.max_refits = check_integer(max_refits, "max_refits", minimum=0)
        self.refit_iterations = check_integer(refit_iterations, "refit_iterations", minimum=1)
        self.refit_growth = check_real(refit_growth, "refit_growth", lower=1.0,
                                       lower_inclusive=True)
        self.share_surrogate = bool(share_surrogate)

    def sample(self, draws=1000, tune=200, chains=1, rng=None, init=None, progress=True,
               pool="auto", checkpoint=None, checkpoint_every=1000):
        """Explore with exact HMC, fit the surrogate, then draw samples.

        Parameters
        ----------
        draws : int
            Number of kept iterations per chain (sampling phase).
        tune : int
            Exploration iterations per chain (unless ``n_explore`` was given), discarded.
            The default 200 aims at the least total cost from a cold start (the trust watch
            refits a surrogate that proves poor); the papers' protocol is ``tune=5000``.
        chains, rng, init, progress, pool
            As for :meth:`rnshmc.HMC.sample`. Each chain fits its own surrogate.

        Returns
        -------
        SampleResult
            The keys of :meth:`rnshmc.HMC.sample` (``n_density_evals`` and
            ``n_gradient_evals`` count exact evaluations of the target over all phases), plus
            ``n_density_evals_explore``, ``n_density_evals_sampling``,
            ``n_surrogate_gradient_evals``, ``surrogate_n_steps`` and ``exact_n_steps`` (per
            chain: the sampling phase's number of steps on either dynamics), ``n_train``,
            ``fit_residual`` (RMS misfit of the training values), ``gradient_residual``,
            ``exploration_acceptance_rate`` (over the training window), ``surrogate`` (per
            chain, the fitted surrogate as arrays: :meth:`fitted_surrogates` rebuilds them),
            and ``timings`` with ``"tune"`` (exploration), ``"train"`` and ``"sampling"``.
            The trust watch adds ``exact_dynamics`` (chains, draws): draws made on exact
            dynamics; ``n_refits`` and ``fallback`` per chain; ``trust_events`` (per chain, a
            list of dicts: the iteration, the window's and the exploration's acceptance, the
            action, and for a refit the old surrogate's centred RMS misfit at the new exact
            states, the new fit's residual, hidden units and training points).
            ``n_gradient_evals_sampling`` counts the exact gradients of exact stretches
            (``n_surrogate_gradient_evals`` the surrogate's).
        """
        return super().sample(draws=draws, tune=tune, chains=chains, rng=rng, init=init,
                              progress=progress, pool=pool,
                              checkpoint=checkpoint, checkpoint_every=checkpoint_every)

    @staticmethod
    def fitted_surrogates(result):
        """The fitted :class:`~rnshmc.RandomNetworkSurrogate` of each chain of a result."""
        return [RandomNetworkSurrogate.from_state(state) for state in result["surrogate"]]

    # ------------------------------------------------------------------------------------------
    # the plan

    def plan(self, draws, tune):
        n_explore = tune if self.n_explore is None else self.n_explore
        n_explore = check_integer(n_explore, "tune (exploration iterations)", minimum=2)
        n_train = n_explore - n_explore // 5 if self.n_train is None else self.n_train
        if n_train > n_explore:
            raise ValueError(f"n_train ({n_train}) exceeds the exploration length ({n_explore})")
        return [["exploration", n_explore], ["training", 0], ["sampling", draws]]

    def phase_spec(self, name):
        spec = self.PHASES[name]
        if name == "exploration" and self.training_data == "trajectories":
            spec = spec._replace(keep=spec.keep + ("trajectory",))
        return spec

    def make_chain(self, name, state, ctarget):
        if name == "exploration":
            return self.new_chain(ctarget, state)
        if name == "sampling":
            if state.extras.get("dynamics") == "exact":
                return self.new_chain(ctarget, state)
            return self.new_chain(self._sampling_surrogate(state)._ctarget, state, test=ctarget,
                                  delayed_acceptance=self.delayed_acceptance)
        return None

    def _sampling_surrogate(self, state):
        """The surrogate whose dynamics the sampling phase runs."""
        return RandomNetworkSurrogate.from_state(state.extras["surrogate"])

    def begin_phase(self, name, chain, state, generator):
        if name == "exploration":
            super().begin_phase(name, chain, state, generator)
            self.start_adaptation(chain, state, generator)
        elif name == "training":
            self._train(state, generator)
        else:
            self._start_sampling(chain, state)

    def waiting(self, state):
        # with a shared surrogate, a chain that has explored waits for the pooled fit
        return (self.share_surrogate and state.phase == "training" and not state.phase_started
                and "surrogate" not in state.extras)

    def join(self, states):
        if any(RNSHMC.waiting(self, s) for s in states):
            self._fit_shared(states)

    def _fit_shared(self, states):
        """One surrogate fitted to every chain's training data (in chain order, with chain
        0's random stream), given to every chain, and the pooled exploration's covariance
        for their trajectory lengths."""
        from ..checkpoint import generator_from_json, generator_to_json
        Q, U, G = (None if parts[0] is None else np.concatenate(parts)  # (G: None without
                   for parts in zip(*map(self._training_data, states)))     # gradients)
        generator = generator_from_json(states[0].rng)
        surrogate = self._fit(states[0], generator, Q, U, G, self.hidden_units(states[0].dim))
        states[0].rng = generator_to_json(generator)
        covariance = self._exploration_covariance(states)
        for state in states:
            state.extras["surrogate"] = states[0].extras["surrogate"]
            state.extras["exploration_covariance"] = covariance
            if state is not states[0]:
                self._fitted(state, surrogate, U)

    def trajectory(self, name, state):
        if name == "sampling":
            exact = state.extras.get("dynamics") == "exact"
            return state.extras["exact_n_steps" if exact else "surrogate_n_steps"], self.jitter
        return self.n_steps, self.jitter

    # ------------------------------------------------------------------------------------------

    def _training_window(self, state):
        n_explore = state.phases[0][1]
        n_train = n_explore - n_explore // 5 if self.n_train is None else self.n_train
        return slice(n_explore - n_train, n_explore)

    def _training_data(self, state):
        """The exploration's training rows: (Q, U, gradients)."""
        history = state.outputs["exploration"]
        window = self._training_window(state)
        if self.training_data == "trajectories":
            # the steps of the window's trajectories, except those of diverging ones (whose
            # far-out points would dominate the least-squares fit)
            ends = history["trajectory_ends"]
            rows_per_iteration = np.diff(ends, prepend=0)
            wanted = np.zeros(len(ends), dtype=bool)
            wanted[window] = ~history["records"]["diverging"][window].astype(bool)
            rows = history["trajectory"][:ends[-1]][np.repeat(wanted, rows_per_iteration)]
            d = state.dim
            # and steps above the window's highest state potential plus the states' range:
            # early trajectories, before the step size settles, reach far into the tails
            U = -history["records"]["log_density"][window]
            rows = rows[rows[:, d] <= 2 * np.max(U) - np.min(U)]
            return rows[:, :d], rows[:, d], rows[:, d + 1:]
        return (history["samples"][window], -history["records"]["log_density"][window],
                history["gradients"][window])

    def _fit(self, state, generator, Q, U, G, n_hidden):
        """Fit a new surrogate and make it the chain's."""
        surrogate = RandomNetworkSurrogate(state.dim, rng=generator.spawn(1)[0],
                                           **self._surrogate_options(state.dim, n_hidden))
        surrogate.fit(Q, U, gradients=G if self.gradient_weight > 0 else None,
                      gradient_weight=self.gradient_weight, online=self.ONLINE)
        state.extras["surrogate"] = surrogate.get_state()
        self._fitted(state, surrogate, U)
        return surrogate

    def _surrogate_options(self, dim, n_hidden):
        """The RandomNetworkSurrogate arguments of a fit in ``dim`` dimensions."""
        return dict(self.surrogate_options, n_hidden=n_hidden)

    def _train(self, state, generator):
        """Fit the surrogate to the exploration's last states (and choose the sampling
        trajectory length if asked)."""
        history = state.outputs["exploration"]
        accepted = history["records"]["accepted"][self._training_window(state)]
        if not accepted.any():
            raise RuntimeError(
                f"{self.name} chain {state.chain}: the exact-HMC exploration accepted no move in "
                f"its last {accepted.size} iterations, so there is nothing to fit a surrogate "
                "to. Its step size or mass matrix is unsuitable: give a smaller step_size, a "
                "longer exploration, or let the exploration adapt (step_size=None).")
        if "surrogate" not in state.extras:  # (fitted already when shared)
            self._fit(state, generator, *self._training_data(state),
                      self.hidden_units(state.dim))
        state.extras.update(exploration_acceptance_rate=float(accepted.mean()),
                            explore_step_size=float(state.kernel["step_size"]),
                            dynamics="surrogate", surrogate_since=0, exact_until=None,
                            n_refits=0, trust_events=[],
                            mode_evals={"exact": [0, 0], "surrogate": [0, 0]})
        state.evals["training"] = [0, 0]
        state.extras["surrogate_n_steps"] = self._sampling_n_steps(state, generator)
        # exact stretches and the fallback pay a gradient per step: their L is chosen for min
        # ESS per gradient (the exploration's L only had to adapt and spread training states)
        state.extras["exact_n_steps"] = self._choose_n_steps(state, per="step")

    def _sampling_n_steps(self, state, generator):
        """The sampling phase's number of leapfrog steps."""
        if self.surrogate_n_steps == "auto":
            return self._choose_n_steps(state)
        return self.surrogate_n_steps

    def _fitted(self, state, surrogate, U):
        """Called with the surrogate just fitted to potentials ``U`` (ARNS-HMC keeps the
        object)."""

    def _start_sampling(self, chain, state):
        """Continue from the exploration's last state on the surrogate's dynamics; the exact
        evaluation there counts to training (as the pilot runs' do)."""
        chain.set_position(state.kernel["position"])
        chain.step_size = state.kernel["step_size"]
        state.extras["sampling_step_size"] = chain.step_size
        state.evals["training"][0] += chain.n_density_evals
        chain.n_density_evals = chain.n_gradient_evals = 0

    def _choose_n_steps(self, state, per="iteration"):
        """The number of steps for min ESS per unit of cost: an exact density plus the
        surrogate's steps (surrogate dynamics, see ``surrogate_n_steps``), or an exact
        gradient per step (exact dynamics)."""
        from ..adaptation import trajectory_length_for_min_ess
        covariance = state.extras.get("exploration_covariance")
        if covariance is None:
            covariance = self._exploration_covariance([state])
        n_steps, _ = trajectory_length_for_min_ess(
            covariance, state.inverse_mass, state.kernel["step_size"],
            self.jitter, self.MAX_AUTO_STEPS, per=per, step_cost=self.step_cost(state.dim))
        return n_steps

    def _exploration_covariance(self, states):
        """The covariance of the chains' training-window states (pooled)."""
        samples = np.concatenate([s.outputs["exploration"]["samples"][self._training_window(s)]
                                  for s in states])
        dim = samples.shape[1]
        covariance = np.atleast_2d(np.cov(samples, rowvar=False))
        distinct = len(np.unique(samples, axis=0))
        if distinct <= dim:
            # too few distinct states (a short exploration in many dimensions) for a full-rank
            # covariance: shrink it towards its diagonal (positive: _train made sure the
            # chain moved, and a move changes every coordinate)
            weight = dim / (distinct + dim)
            covariance = (1 - weight) * covariance + weight * np.diag(np.diag(covariance))
        return covariance

    def step_cost(self, dim):
        """A surrogate leapfrog step's cost in exact densities (see ``surrogate_step_cost``).

        Parameters
        ----------
        dim : int
            The target's dimension.

        Returns
        -------
        float
        """
        if self.surrogate_step_cost != "auto":
            return self.surrogate_step_cost
        density_flops = getattr(self.target, "density_flops", None)
        if not density_flops:
            return 0.0
        return (gradient_flops(dim, self.hidden_units(dim), self.surrogate_options["whiten"])
                / density_flops)

    def hidden_units(self, dim):
        """The surrogate's number of hidden units for a ``dim``-dimensional target (see
        ``n_hidden``).

        Parameters
        ----------
        dim : int

        Returns
        -------
        int
        """
        if self.n_hidden != "auto":
            return self.n_hidden
        quadratic = 0.75 * dim * (dim + 1)
        return int(min(4000, max(1000, 100 * math.ceil(quadratic / 100))))

    # ------------------------------------------------------------------------------------------
    # the sampling phase: segments between trust reviews

    def _iterate(self, name, n_iter, chain, state, generator, budget, bar):
        if name != "sampling":
            return super()._iterate(name, n_iter, chain, state, generator, budget, bar)
        outputs = state.outputs.setdefault(name, {})
        exact = outputs.setdefault("exact_dynamics", np.zeros(n_iter, dtype=bool))
        ran = 0
        while ran < budget and state.iteration < n_iter:
            first = state.iteration
            stop = min(self._segment_stop(state, n_iter), n_iter)
            n = super()._iterate(name, n_iter, chain, state, generator,
                                 min(budget - ran, stop - first), bar)
            if n == 0:
                break
            ran += n
            exact[first:first + n] = state.extras["dynamics"] == "exact"
            self._segment_done(state, first, n)
            if state.iteration == stop < n_iter and self._review_trust(state, chain, generator):
                break  # the dynamics changed: run_chain builds the new chain
            if self.waiting(state) or bar.past_deadline():
                break
        return ran

    def _segment_stop(self, state, n_iter):
        """The sampling iteration where the current segment ends (a trust review)."""
        extras = state.extras
        if extras["dynamics"] == "exact":
            return n_iter if extras["exact_until"] is None else extras["exact_until"]
        if self.trust_ratio is None:
            return n_iter
        since = extras["surrogate_since"]
        return since + ((state.iteration - since) // self.trust_window + 1) * self.trust_window

    def _segment_done(self, state, first, n):
        """Called after sampling iterations first, ..., first + n - 1 (ARNS-HMC learns)."""

    def _review_trust(self, state, chain, generator):
        """At a segment's end: distrust the surrogate after a poor window, refit after an exact
        stretch. Returns True when the dynamics changed."""
        extras = state.extras
        t = state.iteration
        if extras["dynamics"] == "exact":
            if extras["exact_until"] != t:
                return False
            self._refit(state, generator)
            self._switch_dynamics(state, chain, generator, "surrogate")
            extras.update(surrogate_since=t, exact_until=None)
            return True
        if self.trust_ratio is None or (t - extras["surrogate_since"]) % self.trust_window:
            return False
        rate = float(state.outputs["sampling"]["records"]["accepted"][t - self.trust_window:t].mean())
        reference = extras["exploration_acceptance_rate"]
        if rate >= self.trust_ratio * reference:
            return False
        refit = extras["n_refits"] < self.max_refits
        extras["trust_events"].append(dict(
            iteration=t, window_acceptance=rate, exploration_acceptance=reference,
            action="refit" if refit else "fallback"))
        extras["exact_until"] = t + self.refit_iterations if refit else None
        self._switch_dynamics(state, chain, generator, "exact")
        return True

    def _refit(self, state, generator):
        """Refit the surrogate to the exploration's training data plus the exact stretches'
        states, with ``refit_growth`` times the hidden units."""
        extras = state.extras
        outputs = state.outputs["sampling"]
        t = state.iteration
        exact = outputs["exact_dynamics"][:t]
        Q, U, G = (outputs["samples"][:t][exact], -outputs["records"]["log_density"][:t][exact],
                   outputs["gradients"][:t][exact])
        # the old surrogate's misfit at the newest exact states (out of sample: where the
        # chain went), centred (a constant offset does not matter)
        newest = slice(-(t - extras["trust_events"][-1]["iteration"]), None)
        old = self._sampling_surrogate(state)
        misfit = old.predict(Q[newest]) - U[newest]
        Q0, U0, G0 = self._training_data(state)
        n_hidden = int(round(old.n_hidden * self.refit_growth))
        surrogate = self._fit(state, generator, np.vstack([Q0, Q]), np.concatenate([U0, U]),
                              np.vstack([G0, G]), n_hidden)
        extras["n_refits"] += 1
        extras["trust_events"][-1].update(
            misfit_before=float(np.sqrt(np.mean((misfit - misfit.mean()) ** 2))),
            fit_residual=float(surrogate.fit_residual_), n_hidden=n_hidden,
            n_train=int(surrogate.n_train_))

    def _switch_dynamics(self, state, chain, generator, dynamics):
        """Carry the chain over to the exact or the surrogate's dynamics at its position; its
        evaluation counters so far are kept per kind of dynamics."""
        extras = state.extras
        counts = extras["mode_evals"][extras["dynamics"]]
        counts[0] += chain.n_density_evals
        counts[1] += chain.n_gradient_evals
        extras["dynamics"] = dynamics
        new = self.make_chain("sampling", state, chain.test)
        new.set_position(chain.position)
        new.step_size = (extras["explore_step_size"] if dynamics == "exact"
                         else extras["sampling_step_size"])
        self._keep_current("sampling", new, state, generator)

    # ------------------------------------------------------------------------------------------

    @staticmethod
    def _sampling_evals(state):
        """Exact density, exact gradient and surrogate gradient evaluations of the sampling
        phase (over its exact and surrogate dynamics)."""
        extras = state.extras
        counts = {k: list(v) for k, v in extras["mode_evals"].items()}
        current = state.evals.get("sampling", [0, 0])
        counts[extras["dynamics"]][0] += current[0]
        counts[extras["dynamics"]][1] += current[1]
        return (counts["exact"][0] + counts["surrogate"][0], counts["exact"][1],
                counts["surrogate"][1])

    def result(self, states):
        result = super().result(states)
        per_chain = lambda f, dtype=None: np.array([f(s) for s in states], dtype=dtype)
        sampling = per_chain(self._sampling_evals, np.int64)
        result["n_density_evals_sampling"] = sampling[:, 0]
        result["n_gradient_evals_sampling"] = sampling[:, 1]
        result["n_surrogate_gradient_evals"] = sampling[:, 2]
        result["n_density_evals_explore"] = per_chain(
            lambda s: s.evals["exploration"][0] + s.evals["training"][0], np.int64)
        result["n_gradient_evals"] = (per_chain(lambda s: s.evals["exploration"][1], np.int64)
                                      + result["n_gradient_evals_sampling"])
        result["n_density_evals"] = (result["n_density_evals_explore"]
                                     + result["n_density_evals_sampling"])
        result["surrogate_n_steps"] = per_chain(lambda s: s.extras["surrogate_n_steps"], np.int64)
        result["exact_n_steps"] = per_chain(lambda s: s.extras["exact_n_steps"], np.int64)
        result["exploration_acceptance_rate"] = per_chain(
            lambda s: s.extras["exploration_acceptance_rate"])
        surrogates = [s.extras["surrogate"] for s in states]
        result["n_train"] = np.array([s["n_train_"] for s in surrogates], dtype=np.int64)
        result["fit_residual"] = np.array([s["fit_residual_"] for s in surrogates])
        result["gradient_residual"] = np.array(
            [np.nan if s["gradient_residual_"] is None else s["gradient_residual_"]
             for s in surrogates])
        result["delayed_acceptance"] = self.delayed_acceptance
        result["share_surrogate"] = self.share_surrogate
        result["surrogate"] = surrogates
        result["exact_dynamics"] = np.stack(
            [s.outputs["sampling"].get("exact_dynamics", np.zeros(0, dtype=bool)) for s in states])
        result["n_refits"] = per_chain(lambda s: s.extras.get("n_refits", 0), np.int64)
        result["trust_events"] = [list(s.extras.get("trust_events", [])) for s in states]
        result["fallback"] = np.array([any(e["action"] == "fallback" for e in events)
                                       for events in result["trust_events"]])
        if self.trust_ratio is None:
            self._warn_if_acceptance_collapsed(result)
        else:
            self._warn_about_trust_events(result)
        return result

    def _warn_about_trust_events(self, result):
        """One warning per chain whose surrogate was distrusted: what happened."""
        for chain, events in enumerate(result["trust_events"]):
            if not events:
                continue
            first = events[0]
            what = (f"refitted {result.n_refits[chain]} time(s) (after exact-HMC stretches of "
                    f"{self.refit_iterations} iterations, with more hidden units)")
            if result.fallback[chain]:
                what += (f"{' and then' if result.n_refits[chain] else ''} replaced by exact "
                         f"HMC from draw {events[-1]['iteration']} on")
            warnings.warn(
                f"{self.name} chain {chain}: the surrogate was poor where the chain went "
                f"(acceptance {first['window_acceptance']:.2f} over draws "
                f"{first['iteration'] - self.trust_window}-{first['iteration'] - 1}, against "
                f"{first['exploration_acceptance']:.2f} in exploration); it was {what}. "
                f"{result.exact_dynamics[chain].mean():.0%} of the draws used exact dynamics; "
                "the chain is exact either way (result['trust_events'] has the details).",
                RuntimeWarning, stacklevel=user_stacklevel())

    def _warn_if_acceptance_collapsed(self, result):
        """Warn when sampling acceptance over some window is under a third of exploration's."""
        draws = result.accepted.shape[1]
        width = max(50, draws // 10)
        for chain, accepted in enumerate(result.accepted):
            reference = result.exploration_acceptance_rate[chain]
            for first in range(0, max(draws - width, 0) + 1, width):
                rate = accepted[first:first + width].mean()
                if rate < reference / 3:
                    warnings.warn(
                        f"{self.name} chain {chain}: acceptance fell to {rate:.2f} over draws "
                        f"{first}-{first + width - 1}, under a third of the exploration's "
                        f"{reference:.2f}. The surrogate is poor in part of the posterior: the "
                        "chain is still exact but mixes slowly there. Try more hidden units "
                        "(n_hidden) or more training points (a longer tune or n_train).",
                        RuntimeWarning, stacklevel=user_stacklevel())
                    return
