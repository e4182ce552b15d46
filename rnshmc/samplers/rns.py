"""RNS-HMC: Hamiltonian dynamics on a random-network surrogate, exact Metropolis test
(Algorithm 3 of Zhang, Shahbaba and Zhao 2017)."""
import time
import warnings

import numpy as np

from .._kernels._hmc import HMCKernel
from ..surrogate import RandomNetworkSurrogate
from .hmc import HMC, _Buffers, _Progress, _positive_int

__all__ = ["RNSHMC"]


class RNSHMC(HMC):
    """HMC whose trajectories follow a random-network surrogate of the potential.

    Three phases per chain:

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
    step_size, n_steps, jitter, mass_matrix, adapt_mass_matrix, target_accept, max_energy_error
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
        Number of final exploration states used for training. None means the papers'
        protocol scaled to the exploration: its first 20% are discarded, the rest used.
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
    PILOT_ITERATIONS = 100
    PILOT_FACTORS = (1, 2, 4, 8)

    def __init__(self, target, n_hidden=1000, nodes="additive", activation="softplus",
                 ridge=1e-6, step_size=None, n_steps=10, jitter=True, n_explore=None,
                 n_train=None, delayed_acceptance=False, whiten=True, gradient_weight=1.0,
                 weight_scale=None, surrogate_n_steps=None, mass_matrix=None,
                 adapt_mass_matrix=None, target_accept=0.8, max_energy_error=1000.0):
        super().__init__(target, step_size=step_size, n_steps=n_steps, jitter=jitter,
                         mass_matrix=mass_matrix, adapt_mass_matrix=adapt_mass_matrix,
                         target_accept=target_accept, max_energy_error=max_energy_error)
        self.n_hidden = _positive_int(n_hidden, "n_hidden")
        if not (np.isfinite(gradient_weight) and gradient_weight >= 0):
            raise ValueError(f"gradient_weight must be finite and >= 0, got {gradient_weight!r}")
        self.surrogate_options = dict(n_hidden=self.n_hidden, nodes=nodes, activation=activation,
                                      ridge=ridge, weight_scale=weight_scale, whiten=whiten)
        if getattr(target, "dim", None) is not None:
            # validate the surrogate options now rather than after the exploration
            RandomNetworkSurrogate(int(target.dim), **dict(self.surrogate_options, n_hidden=1))
        self.gradient_weight = float(gradient_weight)
        if surrogate_n_steps is None:
            surrogate_n_steps = self.n_steps
        elif surrogate_n_steps != "auto":
            surrogate_n_steps = _positive_int(surrogate_n_steps, "surrogate_n_steps")
        self.surrogate_n_steps = surrogate_n_steps
        self.n_explore = None if n_explore is None else _positive_int(n_explore, "n_explore", 2)
        self.n_train = None if n_train is None else _positive_int(n_train, "n_train")
        self.delayed_acceptance = bool(delayed_acceptance)
        self.surrogates_ = []

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
            ``n_surrogate_gradient_evals``, ``surrogate_n_steps`` (per chain), ``n_train``, ``fit_residual`` (RMS misfit of the
            training values), ``gradient_residual``, ``exploration_acceptance_rate`` (over the
            training window), and ``timings`` with ``"tune"`` (exploration), ``"train"`` and
            ``"sampling"``. The fitted surrogates are kept in ``self.surrogates_``.
        """
        n_explore = tune if self.n_explore is None else self.n_explore
        n_explore = _positive_int(n_explore, "tune (exploration iterations)", minimum=2)
        n_train = n_explore - n_explore // 5 if self.n_train is None else self.n_train
        if n_train > n_explore:
            raise ValueError(f"n_train ({n_train}) exceeds the exploration length ({n_explore})")
        self._n_train_now = n_train
        return super().sample(draws=draws, tune=n_explore, chains=chains, rng=rng, init=init,
                              progress=progress, pool=pool)

    # ------------------------------------------------------------------------------------------

    def _run_chain(self, task):
        ctarget, generator, init, inverse_mass, draws, tune, progress, chain = task
        explorer = self._make_kernel(ctarget)
        explorer.set_inverse_mass(inverse_mass)
        explorer.set_position(init)
        bar = _Progress(progress, tune + draws, f"{self.name} chain {chain}")
        timings = {}
        try:
            start = time.perf_counter()
            history = _Buffers(tune, explorer.dim, gradients=True)
            step_size, inverse_mass = self._tune(explorer, generator, tune, inverse_mass, bar,
                                                 record=history)
            timings["tune"] = time.perf_counter() - start

            start = time.perf_counter()
            window = slice(tune - self._n_train_now, tune)  # the training states
            surrogate = self._fit_surrogate(history, window, generator)

            sampler = HMCKernel(surrogate._ctarget, ctarget, max_energy_error=self.max_energy_error,
                                delayed_acceptance=self.delayed_acceptance)
            sampler.set_inverse_mass(inverse_mass)
            sampler.set_position(explorer.position)
            n_steps = self.surrogate_n_steps
            if n_steps == "auto":
                n_steps = self._choose_n_steps(sampler, generator, step_size, inverse_mass)
            timings["train"] = time.perf_counter() - start
            pilot_evals = sampler.n_density_evals, sampler.n_gradient_evals
            out = _Buffers(draws, explorer.dim)
            start = time.perf_counter()
            self._run_in_chunks(sampler, generator, draws, step_size, bar, out, n_steps=n_steps)
            timings["sampling"] = time.perf_counter() - start
        finally:
            bar.close()
        return dict(out=out, step_size=step_size, inverse_mass=inverse_mass, timings=timings,
                    n_density_evals=explorer.n_density_evals + sampler.n_density_evals,
                    n_gradient_evals=explorer.n_gradient_evals,
                    n_density_evals_explore=explorer.n_density_evals + pilot_evals[0],
                    n_density_evals_sampling=sampler.n_density_evals - pilot_evals[0],
                    n_gradient_evals_sampling=0,
                    n_surrogate_gradient_evals=sampler.n_gradient_evals - pilot_evals[1],
                    surrogate_n_steps=n_steps,
                    exploration_acceptance_rate=float(history.accepted[window].mean()),
                    surrogate=surrogate, chain=chain)

    def _choose_n_steps(self, sampler, generator, step_size, inverse_mass):
        """The sampling phase's number of steps by pilot runs (see ``surrogate_n_steps``)."""
        scale = np.ones(sampler.dim) if inverse_mass is None else np.asarray(inverse_mass)
        scale = np.diag(scale) if scale.ndim == 2 else scale  # jumps in units of the scales
        pilot = _Buffers(self.PILOT_ITERATIONS, sampler.dim)
        best, best_score = self.n_steps, -np.inf
        for factor in self.PILOT_FACTORS:
            n_steps = self.n_steps * factor
            previous = sampler.position
            start = time.perf_counter()
            sampler.run(generator, self.PILOT_ITERATIONS, step_size, n_steps, self.jitter,
                        *pilot.rows(0, self.PILOT_ITERATIONS))
            seconds = time.perf_counter() - start
            path = np.vstack([previous, pilot.samples])
            jump = np.mean(np.sum(np.diff(path, axis=0) ** 2 / scale, axis=1))
            if jump / seconds > best_score:
                best, best_score = n_steps, jump / seconds
        return best

    def _fit_surrogate(self, history, window, generator):
        surrogate = RandomNetworkSurrogate(history.samples.shape[1], rng=generator.spawn(1)[0],
                                           **self.surrogate_options)
        gradients = history.gradients[window] if self.gradient_weight > 0 else None
        return surrogate.fit(history.samples[window], -history.log_density[window],
                             gradients=gradients, gradient_weight=self.gradient_weight)

    def _combine(self, runs):
        result = super()._combine(runs)
        self.surrogates_ = [r["surrogate"] for r in runs]
        for key in ("n_density_evals_explore", "n_surrogate_gradient_evals",
                    "surrogate_n_steps"):
            result[key] = np.array([r[key] for r in runs], dtype=np.int64)
        result["exploration_acceptance_rate"] = np.array(
            [r["exploration_acceptance_rate"] for r in runs])
        result["n_train"] = np.array([s.n_train_ for s in self.surrogates_], dtype=np.int64)
        result["fit_residual"] = np.array([s.fit_residual_ for s in self.surrogates_])
        result["gradient_residual"] = np.array(
            [np.nan if s.gradient_residual_ is None else s.gradient_residual_
             for s in self.surrogates_])
        result["delayed_acceptance"] = self.delayed_acceptance
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
                        RuntimeWarning, stacklevel=4)
                    return
