"""RNS-HMC: Hamiltonian dynamics on a random-network surrogate, exact Metropolis test
(Algorithm 3 of Zhang, Shahbaba and Zhao 2017)."""
import time
import warnings

import numpy as np

from ..surrogate import RandomNetworkSurrogate
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
    n_hidden, nodes, activation, ridge, weight_scale, whiten
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
        for sampling.
    surrogate_n_steps : int, "auto" or None
        Number of leapfrog steps (the maximum with jitter) in the sampling phase, where steps
        are cheap. None means ``n_steps``. "auto" chooses among n_steps x {1, 2, 4, 8} by
        short pilot runs of the sampling kernel after the fit (``PILOT_ITERATIONS`` each): the
        one with the largest expected squared jump distance (scaled by the inverse mass
        matrix) per second of the pilot run. Pilot draws are discarded; their time and
        evaluations count to the training and exploration phases.
    n_explore : int or None
        Exploration iterations per chain. None means the ``tune`` given to :meth:`sample`.
    n_train : int or None
        Number of final exploration iterations used for training. None means the papers'
        protocol scaled to the exploration: its first 20% are discarded, the rest used.
    training_data : {"states", "trajectories"}
        What those iterations contribute to the fit: their chain states (the papers'; repeated
        rows from rejections included), or every leapfrog step of their trajectories with its
        exact potential and gradient (the exploration computes the gradient at every step
        anyway; the potential then comes with it, and for a model a gradient evaluation is
        counted as a density evaluation already, so no evaluation is added).
    delayed_acceptance : bool
        Two-stage Metropolis test (Christen and Fox 2005): stage 1 on the surrogate's energy,
        stage 2 on the true one only for proposals that pass stage 1. Exact as well.

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
    PILOT_ITERATIONS = 100
    PILOT_FACTORS = (1, 2, 4, 8)
    PHASES = {"exploration": Phase(adapt=True, keep=("samples", "records", "gradients")),
              "training": Phase(),
              "sampling": Phase(keep=("samples", "records"))}

    def __init__(self, target, n_hidden=1000, nodes="additive", activation="softplus",
                 ridge=1e-6, step_size=None, n_steps=10, jitter=True, n_explore=None,
                 n_train=None, training_data="states", delayed_acceptance=False, whiten=True,
                 gradient_weight=1.0,
                 weight_scale=None, surrogate_n_steps=None, mass_matrix=None,
                 inverse_mass_matrix=None, adapt_mass_matrix=None, target_accept=0.8,
                 max_energy_error=1000.0):
        super().__init__(target, step_size=step_size, n_steps=n_steps, jitter=jitter,
                         mass_matrix=mass_matrix, inverse_mass_matrix=inverse_mass_matrix,
                         adapt_mass_matrix=adapt_mass_matrix, target_accept=target_accept,
                         max_energy_error=max_energy_error)
        self.n_hidden = check_integer(n_hidden, "n_hidden", minimum=1)
        self.gradient_weight = check_real(gradient_weight, "gradient_weight", lower=0.0,
                                          lower_inclusive=True)
        self.surrogate_options = dict(n_hidden=self.n_hidden, nodes=nodes, activation=activation,
                                      ridge=ridge, weight_scale=weight_scale, whiten=whiten)
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
        self.n_explore = None if n_explore is None else check_integer(n_explore, "n_explore", 2)
        self.n_train = None if n_train is None else check_integer(n_train, "n_train", 1)
        self.delayed_acceptance = bool(delayed_acceptance)
        if training_data not in ("states", "trajectories"):
            raise ValueError(f"training_data must be 'states' or 'trajectories', got "
                             f"{training_data!r}")
        self.training_data = training_data

    def sample(self, draws=1000, tune=1000, chains=1, rng=None, init=None, progress=True,
               pool=None):
        """Explore with exact HMC, fit the surrogate, then draw samples.

        Parameters
        ----------
        draws : int
            Number of kept iterations per chain (sampling phase).
        tune : int
            Exploration iterations per chain (unless ``n_explore`` was given), discarded.
        chains, rng, init, progress, pool
            As for :meth:`rnshmc.HMC.sample`. Each chain fits its own surrogate.

        Returns
        -------
        SampleResult
            The keys of :meth:`rnshmc.HMC.sample` (``n_density_evals`` and
            ``n_gradient_evals`` count exact evaluations of the target over all phases), plus
            ``n_density_evals_explore``, ``n_density_evals_sampling``,
            ``n_surrogate_gradient_evals``, ``surrogate_n_steps`` (per chain), ``n_train``,
            ``fit_residual`` (RMS misfit of the training values), ``gradient_residual``,
            ``exploration_acceptance_rate`` (over the training window), ``surrogate`` (per
            chain, the fitted surrogate as arrays: :meth:`fitted_surrogates` rebuilds them),
            and ``timings`` with ``"tune"`` (exploration), ``"train"`` and ``"sampling"``.
        """
        return super().sample(draws=draws, tune=tune, chains=chains, rng=rng, init=init,
                              progress=progress, pool=pool)

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
            surrogate = RandomNetworkSurrogate.from_state(state.extras["surrogate"])
            return self.new_chain(surrogate._ctarget, state, test=ctarget,
                                  delayed_acceptance=self.delayed_acceptance)
        return None

    def begin_phase(self, name, chain, state, generator):
        if name == "exploration":
            super().begin_phase(name, chain, state, generator)
            self.start_adaptation(chain, state, generator)
        elif name == "training":
            self._train(state, generator)
        else:
            self._start_sampling(chain, state)

    def trajectory(self, name, state):
        if name == "sampling":
            return state.extras["surrogate_n_steps"], self.jitter
        return self.n_steps, self.jitter

    # ------------------------------------------------------------------------------------------

    def _training_window(self, state):
        n_explore = state.phases[0][1]
        n_train = n_explore - n_explore // 5 if self.n_train is None else self.n_train
        return slice(n_explore - n_train, n_explore)

    def _train(self, state, generator):
        """Fit the surrogate to the exploration's last states (and choose the sampling
        trajectory length if asked)."""
        history = state.outputs["exploration"]
        window = self._training_window(state)
        accepted = history["records"]["accepted"][window]
        if not accepted.any():
            raise RuntimeError(
                f"{self.name} chain {state.chain}: the exact-HMC exploration accepted no move in "
                f"its last {accepted.size} iterations, so there is nothing to fit a surrogate "
                "to. Its step size or mass matrix is unsuitable: give a smaller step_size, a "
                "longer exploration, or let the exploration adapt (step_size=None).")
        surrogate = RandomNetworkSurrogate(state.dim, rng=generator.spawn(1)[0],
                                           **self.surrogate_options)
        if self.training_data == "trajectories":
            # the steps of the window's trajectories, except those of diverging ones (whose
            # far-out points would dominate the least-squares fit)
            ends = history["trajectory_ends"]
            rows_per_iteration = np.diff(ends, prepend=0)
            wanted = np.zeros(len(ends), dtype=bool)
            wanted[window] = ~history["records"]["diverging"][window].astype(bool)
            rows = history["trajectory"][:ends[-1]][np.repeat(wanted, rows_per_iteration)]
            d = state.dim
            Q, U, G = rows[:, :d], rows[:, d], rows[:, d + 1:]
        else:
            Q, U = history["samples"][window], -history["records"]["log_density"][window]
            G = history["gradients"][window]
        surrogate.fit(Q, U, gradients=G if self.gradient_weight > 0 else None,
                      gradient_weight=self.gradient_weight, online=self.ONLINE)
        state.extras["surrogate"] = surrogate.get_state()
        self._fitted(state, surrogate)
        state.extras["exploration_acceptance_rate"] = float(accepted.mean())
        n_steps = self.surrogate_n_steps
        state.evals["training"] = [0, 0]
        if n_steps == "auto":
            n_steps = self._choose_n_steps(state, generator)
        state.extras["surrogate_n_steps"] = n_steps

    def _fitted(self, state, surrogate):
        """Called with the surrogate just fitted (ARNS-HMC keeps the object)."""

    def _start_sampling(self, chain, state):
        """Continue from the exploration's last state on the surrogate's dynamics; the exact
        evaluation there counts to training (as the pilot runs' do)."""
        chain.set_position(state.kernel["position"])
        chain.step_size = state.kernel["step_size"]
        state.evals["training"][0] += chain.n_density_evals
        chain.n_density_evals = chain.n_gradient_evals = 0

    def _choose_n_steps(self, state, generator):
        """The sampling phase's number of steps by pilot runs (see ``surrogate_n_steps``)."""
        from .._kernels._transition import TRANSITION
        from ..targets import as_ctarget
        pilot_chain = self.make_chain("sampling", state, as_ctarget(self.target, state.dim))
        pilot_chain.set_position(state.kernel["position"])
        pilot_chain.step_size = state.kernel["step_size"]
        scale = np.ones(state.dim) if state.inverse_mass is None else np.asarray(state.inverse_mass)
        scale = np.diag(scale) if scale.ndim == 2 else scale  # jumps in units of the scales
        samples = np.empty((self.PILOT_ITERATIONS, state.dim))
        records = np.empty(self.PILOT_ITERATIONS, TRANSITION)
        best, best_score = self.n_steps, -np.inf
        for factor in self.PILOT_FACTORS:
            n_steps = self.n_steps * factor
            previous = pilot_chain.position
            start = time.perf_counter()
            pilot_chain.run(generator, self.PILOT_ITERATIONS, n_steps, self.jitter, samples, records)
            seconds = time.perf_counter() - start
            path = np.vstack([previous, samples])
            jump = np.mean(np.sum(np.diff(path, axis=0) ** 2 / scale, axis=1))
            if jump / seconds > best_score:
                best, best_score = n_steps, jump / seconds
        state.evals["training"][0] += pilot_chain.n_density_evals
        return best

    # ------------------------------------------------------------------------------------------

    def result(self, states):
        result = super().result(states)
        per_chain = lambda f, dtype=None: np.array([f(s) for s in states], dtype=dtype)
        result["n_density_evals_explore"] = per_chain(
            lambda s: s.evals["exploration"][0] + s.evals["training"][0], np.int64)
        result["n_gradient_evals"] = per_chain(lambda s: s.evals["exploration"][1], np.int64)
        result["n_density_evals"] = (result["n_density_evals_explore"]
                                     + result["n_density_evals_sampling"])
        result["n_surrogate_gradient_evals"] = result["n_gradient_evals_sampling"]
        result["n_gradient_evals_sampling"] = np.zeros(len(states), dtype=np.int64)
        result["surrogate_n_steps"] = per_chain(lambda s: s.extras["surrogate_n_steps"], np.int64)
        result["exploration_acceptance_rate"] = per_chain(
            lambda s: s.extras["exploration_acceptance_rate"])
        surrogates = [s.extras["surrogate"] for s in states]
        result["n_train"] = np.array([s["n_train_"] for s in surrogates], dtype=np.int64)
        result["fit_residual"] = np.array([s["fit_residual_"] for s in surrogates])
        result["gradient_residual"] = np.array(
            [np.nan if s["gradient_residual_"] is None else s["gradient_residual_"]
             for s in surrogates])
        result["delayed_acceptance"] = self.delayed_acceptance
        result["surrogate"] = surrogates
        self._warn_if_acceptance_collapsed(result)
        return result

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
