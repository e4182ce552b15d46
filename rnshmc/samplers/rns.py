"""RNS-HMC: Hamiltonian dynamics on a random-network surrogate, exact Metropolis test
(Algorithm 3 of Zhang, Shahbaba and Zhao 2017; ``docs/algorithms.md``)."""
import warnings

from ..surrogate import RandomNetworkSurrogate
from ..validation import check_integer, check_real
from ._base import Sampler
from ._phases import (ExplorationKernel, HMCExploration, LeapfrogSettings, SurrogateFit,
                      SurrogateSampling, SurrogateSettings, TrustWatch)
from ._result import user_stacklevel, warn_if_acceptance_collapsed

__all__ = ["RNSHMC"]


class RNSHMC(Sampler):
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
        ``surrogate_step_cost`` per step), at most 1024; no exact evaluations
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

    Attributes
    ----------
    DEFAULT_TUNE : int
        ``sample()``'s default ``tune`` (exploration iterations per chain): 200, which aims at
        the least total cost from a cold start (the trust watch refits a surrogate that
        proves poor); the papers' protocol is ``tune=5000``.

    The result has the keys of :meth:`rnshmc.HMC.sample` (``n_density_evals`` and
    ``n_gradient_evals`` count exact evaluations of the target over all phases), plus
    ``n_density_evals_explore``, ``n_density_evals_sampling``, ``n_surrogate_gradient_evals``,
    ``surrogate_n_steps`` and ``exact_n_steps`` (per chain: the sampling phase's number of
    steps on either dynamics), ``n_train``, ``fit_residual`` (RMS misfit of the training
    values), ``gradient_residual``, ``exploration_acceptance_rate`` (over the training
    window), ``surrogate`` (per chain, the fitted surrogate as arrays:
    :meth:`fitted_surrogates` rebuilds them), and ``timings`` with ``"tune"``
    (exploration), ``"train"`` and ``"sampling"``. The trust watch adds ``exact_dynamics``
    (chains, draws): draws made on exact dynamics; ``n_refits`` and ``fallback`` per chain;
    ``trust_events`` (per chain, a list of dicts: the iteration, the window's and the
    exploration's acceptance, the action, and for a refit the old surrogate's centred RMS
    misfit at the new exact states, the new fit's residual, hidden units and training
    points). ``n_gradient_evals_sampling`` counts the exact gradients of exact stretches
    (``n_surrogate_gradient_evals`` the surrogate's).

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
    DEFAULT_TUNE = 200

    def __init__(self, target, n_hidden="auto", nodes="additive", activation="softplus",
                 ridge=1e-6, step_size=None, n_steps=5, jitter=True, n_explore=None,
                 n_train=None, training_data="trajectories", delayed_acceptance=False, whiten=True,
                 gradient_weight=1.0,
                 weight_scale=None, surrogate_n_steps="auto", surrogate_step_cost="auto",
                 mass_matrix=None,
                 inverse_mass_matrix=None, adapt_mass_matrix=None, target_accept=0.8,
                 max_energy_error=1000.0, trust_ratio=0.5, trust_window=50, max_refits=2,
                 refit_iterations=200, refit_growth=2.0, share_surrogate=False):
        super().__init__(target)
        self.leapfrog = LeapfrogSettings(step_size, n_steps, jitter, mass_matrix,
                                         inverse_mass_matrix, adapt_mass_matrix, target_accept,
                                         max_energy_error, dim=self.dim)
        self.surrogate_settings = SurrogateSettings(n_hidden, nodes, activation, ridge,
                                                    weight_scale, whiten, gradient_weight)
        self.n_explore = None if n_explore is None else check_integer(n_explore, "n_explore", 2)
        self.n_train = None if n_train is None else check_integer(n_train, "n_train", 1)
        if training_data not in ("states", "trajectories"):
            raise ValueError(f"training_data must be 'states' or 'trajectories', got "
                             f"{training_data!r}")
        self.trust = None if trust_ratio is None else TrustWatch(
            trust_ratio, trust_window, max_refits, refit_iterations, refit_growth)
        self.delayed_acceptance = bool(delayed_acceptance)
        self.share_surrogate = bool(share_surrogate)
        self.exploration = HMCExploration(self.leapfrog, self.n_train, training_data)
        self.kernel = ExplorationKernel(check_n_steps(surrogate_n_steps, n_steps))
        self.step_cost_setting = check_step_cost(surrogate_step_cost)
        self.fit, self.phases = surrogate_hmc_phases(self)

    def plan(self, draws, tune, chains, dim):
        n_explore = tune if self.n_explore is None else self.n_explore
        n_explore = check_integer(n_explore, "tune (exploration iterations)", minimum=2)
        n_train = n_explore - n_explore // 5 if self.n_train is None else self.n_train
        if n_train > n_explore:
            raise ValueError(f"n_train ({n_train}) exceeds the exploration length ({n_explore})")
        self.leapfrog.check_chains(chains)
        return [["exploration", n_explore], ["training", 0], ["sampling", draws]]

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
        return self.surrogate_settings.hidden_units(dim)

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
        return self.surrogate_settings.step_cost(self.target, dim, self.step_cost_setting)

    @staticmethod
    def fitted_surrogates(result):
        """The fitted :class:`~rnshmc.RandomNetworkSurrogate` of each chain of a result."""
        return [RandomNetworkSurrogate.from_state(state) for state in result["surrogate"]]

    def report(self, result, states):
        result["delayed_acceptance"] = self.delayed_acceptance
        result["share_surrogate"] = self.share_surrogate
        if self.trust is None:
            warn_if_acceptance_collapsed(
                self.name, result.accepted, result.exploration_acceptance_rate,
                "the exploration's acceptance", "Try more hidden units (n_hidden) or more training points "
                "(a longer tune or n_train).")
        else:
            warn_about_trust_events(self.name, self.trust, result)


def surrogate_hmc_phases(sampler, online=None):
    """The phases of HMC on a surrogate (exact-HMC exploration, fit, sampling with the trust
    watch), from the sampler's settings; with ``online`` (an ``OnlineInstalls``), the
    surrogate keeps learning during sampling. Returns (fit, phases)."""
    fit = SurrogateFit(sampler.name, sampler.exploration, sampler.surrogate_settings,
                       sampler.share_surrogate, sampler.kernel, online=online,
                       step_cost=sampler.step_cost_setting, jitter=sampler.leapfrog.jitter)
    sampling = SurrogateSampling(fit, sampler.leapfrog, sampler.delayed_acceptance,
                                 sampler.trust, online)
    return fit, {"exploration": sampler.exploration, "training": fit, "sampling": sampling}


def check_n_steps(surrogate_n_steps, n_steps):
    """``surrogate_n_steps`` checked: an int, "auto", or None (then ``n_steps``)."""
    if surrogate_n_steps is None:
        return n_steps
    if isinstance(surrogate_n_steps, str):
        if surrogate_n_steps != "auto":
            raise ValueError(f"surrogate_n_steps must be an integer, 'auto' or None, got "
                             f"{surrogate_n_steps!r}")
        return surrogate_n_steps
    return check_integer(surrogate_n_steps, "surrogate_n_steps", minimum=1)


def check_step_cost(surrogate_step_cost):
    """``surrogate_step_cost`` checked: "auto" or a number >= 0."""
    if isinstance(surrogate_step_cost, str) and surrogate_step_cost == "auto":
        return surrogate_step_cost
    return check_real(surrogate_step_cost, "surrogate_step_cost", lower=0.0,
                      lower_inclusive=True)


def warn_about_trust_events(name, trust, result):
    """One warning per chain whose surrogate was distrusted: what happened."""
    for chain, events in enumerate(result["trust_events"]):
        if not events:
            continue
        first = events[0]
        what = (f"refitted {result.n_refits[chain]} time(s) (after exact-HMC stretches of "
                f"{trust.refit_iterations} iterations, with more hidden units)")
        if result.fallback[chain]:
            what += (f"{' and then' if result.n_refits[chain] else ''} replaced by exact "
                     f"HMC from draw {events[-1]['iteration']} on")
        warnings.warn(
            f"{name} chain {chain}: the surrogate was poor where the chain went "
            f"(acceptance {first['window_acceptance']:.2f} over draws "
            f"{first['iteration'] - trust.window}-{first['iteration'] - 1}, against "
            f"{first['exploration_acceptance']:.2f} in exploration); it was {what}. "
            f"{result.exact_dynamics[chain].mean():.0%} of the draws used exact dynamics; "
            "the chain is exact either way (result['trust_events'] has the details).",
            RuntimeWarning, stacklevel=user_stacklevel())
