"""RNS-HMC: Hamiltonian dynamics on a random-network surrogate, exact Metropolis test
(Algorithm 3 of Zhang, Shahbaba and Zhao 2017; ``docs/algorithms.md``)."""
import math

import numpy as np

from ..surrogate import Surrogate, surrogate_from_state
from ..validation import (check_group, check_integer, check_per_chain_real, check_real,
                          refuse_renamed)
from ._base import Sampler
from .phases.base import LeapfrogSettings, Phase, by_name
from .phases.dynamics import SurrogateSampling, trust_watch, warn_about_surrogate
from .phases.exploration import (ExplorationCheck, ExploreChecks, HMCExploration,
                                 NUTSExploration)
from .phases.fit import (ExplorationKernel, SurrogateFit, SurrogateNUTS, SurrogateNUTSKernel,
                         SurrogateSettings)

__all__ = ["RNSHMC"]

NETWORK_KEYS = ("nodes", "activation", "ridge", "weight_scale", "whiten")
SURROGATE_KEYS = NETWORK_KEYS + ("gradient_weight", "n_train", "training_data", "step_cost")
EXPLORE_KEYS = ("step_size", "n_steps", "jitter", "mass_matrix", "inverse_mass_matrix",
                "adapt_mass_matrix", "target_accept", "kernel", "start")
# the exploration's kernels: static exact HMC, or exact NUTS with the metric from draws and
# gradients
EXPLORE_KERNELS = ("hmc", "nuts")
# earlier keyword arguments: (their group, their new name), named by the error they raise
RENAMED = dict({key: ("surrogate", key) for key in SURROGATE_KEYS if key != "step_cost"},
             surrogate_step_cost=("surrogate", "step_cost"), surrogate_n_steps=(None, "n_steps"),
             n_explore=("sample", "tune"),
             **{key: ("explore", key) for key in ("mass_matrix", "inverse_mass_matrix",
                                                  "adapt_mass_matrix")},
             trust_ratio=("trust", "ratio"), trust_window=("trust", "window"),
             max_refits=("trust", "max_refits"), refit_iterations=("trust", "refit_iterations"),
             refit_growth=("trust", "refit_growth"))


class RNSHMC(Sampler):
    """HMC whose trajectories follow a random-network surrogate of the potential.

    Three phases per chain (named ``"exploration"``, ``"training"``, ``"sampling"``):

    1. **exploration**: exact HMC (step size and mass matrix adapted here unless given), whose
       chain states, with their potentials and gradients, are recorded;
    2. **training**: one fit of the surrogate (by default a
       :class:`~rnshmc.RandomNetworkSurrogate`) to the exploration's training data (see
       ``training_data``);
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
    surrogate : dict, RandomNetworkSurrogate or GaussianProcessSurrogate, optional
        The surrogate and its fit. An unfitted surrogate object gives its class and settings
        (a :class:`~rnshmc.RandomNetworkSurrogate` its ``n_hidden``, ``nodes``,
        ``activation``, ``ridge``, ``weight_scale`` and ``whiten``; each fit draws new random
        units); a :class:`~rnshmc.GaussianProcessSurrogate` makes this sampler GP-HMC
        (Rasmussen 2003: the full GP or FITC, fitted to values only; see
        docs/algorithms.md section 3). A dict may name the class by ``kind``
        ("random_network", the default, or "gaussian_process", then with that class's
        settings, e.g. ``sparse`` and ``n_inducing``) and hold:

        - ``nodes``, ``activation``, ``ridge`` (default 1e-6), ``weight_scale``, ``whiten``:
          the network (see :class:`~rnshmc.RandomNetworkSurrogate`). ``whiten=True``
          (default) lets the random units act on inputs standardised with the training
          states' mean and covariance; the papers use False.
        - ``gradient_weight``: weight of the gradient misfit in the fit (the exploration
          computes exact gradients anyway). Default 1; 0 fits values only, as the papers
          do. On the authors' elliptic PDE (s = 1000, 4000 training states) whitening and
          gradients raised the acceptance from 0.75 to 0.82 and min ESS from 2577 to 3664
          of 5000 draws.
        - ``n_train``: the final exploration iterations used for training. None (default):
          the papers' protocol scaled to the exploration (its first 20% discarded).
        - ``training_data``: what those iterations contribute: every leapfrog step of their
          trajectories with its exact potential and gradient ("trajectories", default; no
          evaluation is added), except steps of diverging trajectories and steps whose
          potential lies above the window's highest state's plus the states' range; or
          their chain states ("states", the papers' protocol; repeated rows from
          rejections included, which weight a state by how long the chain stayed there,
          where the RNS paper's Algorithm 3 adds each accepted proposal once; a GP
          surrogate uses each distinct state once). On the simulated logistic regression (d = 50, 200 exploration
          iterations, s = 2000) trajectories cut the surrogate's held-out error on posterior
          draws from 0.37 to 0.09; on the authors' PDE they were as good as states.
        - ``step_cost``: a surrogate leapfrog step's cost in exact densities, for
          ``n_steps="auto"``. "auto" (default): the surrogate's
          ``rnshmc.surrogate.gradient_flops`` over the target's ``density_flops`` where
          it has one (0.10 for the authors' PDE at s = 1000, 0.037 for a logistic regression
          with N = 100000, d = 50 at s = 2000), else 0 (steps free). An estimate from
          operation counts, not timings, so that the same seed gives the same draws on any
          machine.
    step_size : float, ndarray of shape (chains,) or None
        The sampling phase's leapfrog step size. None (default): where the exploration
        adapted its mass matrix and step size, the sampling's inverse mass matrix is the
        training window's variance (pooled over the chains sharing a surrogate, shrunk as
        Stan's) and the step size is adapted to it on the surrogate alone (HMC on the
        surrogate from training states: no exact evaluation); else the exploration's. A
        given step size is also the exploration's unless ``explore`` says otherwise (the
        papers' protocol).
    n_steps : int, "auto" or None
        Leapfrog steps (the maximum with ``jitter``) of the sampling phase, where steps are
        cheap. "auto" (default): the shortest L whose predicted min ESS per unit of cost is
        within 90% of the best (``rnshmc.adaptation.trajectory_length_for_min_ess``: the
        posterior approximated by a Gaussian with the training states' covariance, under
        the sampling step size and mass matrix; an iteration costs one exact density plus
        ``step_cost`` per step), at most 1024; no exact evaluations of its own. None: the
        exploration's.
    jitter : bool
        Draw the number of steps uniformly from {1, ..., L} each iteration (default True).
    delayed_acceptance : bool
        Two-stage Metropolis test (Christen and Fox 2005): stage 1 on the surrogate's energy,
        stage 2 on the true one only for proposals that pass stage 1. Exact as well.
    explore : dict, optional
        The exploration's exact HMC: ``step_size`` (default: ``step_size``, None adapting
        it), ``n_steps`` (default 5: its trajectories only have to adapt the kernel and
        spread the training states; on the authors' PDE 5 cost 20-30% fewer exact
        evaluations to min ESS 1000 from a cold start than 10), ``jitter``,
        ``mass_matrix``, ``inverse_mass_matrix``, ``adapt_mass_matrix`` and
        ``target_accept`` as for :class:`~rnshmc.HMC`. A given mass matrix (or
        ``adapt_mass_matrix=False``) is kept for sampling. The exploration's length is
        ``sample()``'s ``tune``. ``kernel``: "hmc" (default) or "nuts", exact NUTS (trees of
        at most 6 doublings, the metric from draws and gradients) whose every leapfrog step is
        training data (no ``n_steps`` or ``jitter``); ``start``: "init" (default) or
        "lbfgs", each chain first moved from its initial point by L-BFGS on the exact
        potential (at most 50 evaluations with gradients). Both are exact; on the authors'
        PDE both cost more solves than the defaults (``docs/algorithms.md`` section 14).
    trust : dict or bool
        The trust watch (default True: on, with the defaults below). The surrogate is
        watched where the chain is: over every ``window`` (default 50) sampling iterations
        on the surrogate's dynamics, an acceptance rate under ``ratio`` (default 0.5) times
        the exploration's (over its training window) distrusts it, and so does a window
        whose mean squared jump, each coordinate scaled by the training window's variance, is
        under ``jump_ratio`` (default 0.1) times the exploration's (a chain that accepts only
        tiny moves). The chain then runs
        ``refit_iterations`` (default 200) iterations of its exact ``kernel`` (kept draws), the
        surrogate is refitted to the training data plus those exact states with
        ``refit_growth`` (default 2) times as many hidden units, and the chain goes back to
        the surrogate's dynamics. After ``max_refits`` (default 2) refits a further distrust
        makes the rest of the chain exact (fallback). ``kernel`` is the exact stretches' and
        the fallback's kernel: "nuts" (default) or "hmc" (static trajectories of
        ``exact_n_steps``), with the exploration's mass matrix and a step size adapted afresh
        where the chain is (``docs/algorithms.md`` section 4). Each refit and fallback is
        recorded in the result (``trust_events``, ``exact_dynamics``) and warned about. False
        turns the watch off (then only a warning when acceptance collapses).
    share_surrogate : bool
        Fit one surrogate to the training data of all the chains' explorations, pooled, and
        sample every chain on it (default True; False: each chain fits its own to its own
        exploration, and pays its own exploration). The chains wait for each other at the end of their explorations (the
        fit runs once, in the calling process); the trajectory length is chosen from the
        pooled exploration's covariance. A chain whose surrogate the trust watch distrusts
        refits a surrogate of its own. Pooling k chains' explorations gives the fit k times
        the points for the same exact evaluations, so a shorter ``tune`` may do.
    target_accept : float
        The acceptance the step sizes are adapted to (default 0.8): the sampling's, on the
        surrogate, and the exploration's unless ``explore`` gives its own (as in every
        sampler, ``target_accept`` is the sampling kernel's).
    max_energy_error : float
        Proposals with a larger energy error are rejected as divergences (default 1000).
    kernel : {"hmc", "nuts"}
        The sampling kernel on the surrogate: "hmc" (default), the static trajectory of
        ``n_steps`` tested on the true Hamiltonian; "nuts", surrogate NUTS: ``inner_steps``
        NUTS transitions on the surrogate propose, the surrogate-transition test on the true
        density accepts (one exact density per transition that moves; no ``n_steps``, no
        ``delayed_acceptance``), with a metric and step size adapted by NUTS on the surrogate
        alone (``docs/algorithms.md`` section 14). Exact either way.
    max_tree_depth : int
        (kernel "nuts") The most doublings of a surrogate NUTS tree (default 10).
    inner_steps : int
        (kernel "nuts") Surrogate NUTS transitions per exact test (default 1).

    Attributes
    ----------
    DEFAULT_TUNE : "auto"
        ``sample()``'s default ``tune``: an exploration that goes on until the surrogate is
        good enough, in rounds of 200 iterations for a chain with its own surrogate, or,
        with a shared one, of 200 over all the chains, at least 50 each (50 for 4 chains);
        at most ``MAX_ROUNDS`` (4) rounds. After each round a surrogate fitted to the data
        but the round's last fifth predicts the acceptance of those held-out transitions;
        the exploration stops when that is at least 0.85 times their exact acceptance (with
        ``kernel="nuts"`` or a NUTS exploration: when another round is predicted to save fewer
        exact evaluations than it costs, from sigma, the spread of the surrogate's error over
        those states; a sigma of 4 or more hands the chains to the trust watch's exact kernel
        from the start, warned and recorded; see ``ExplorationCheck`` in
        ``rnshmc.samplers.phases.exploration``, ``docs/algorithms.md`` section 14 and
        ``docs/guide/surrogate.md``). This
        aims at the least total cost from a cold start (``benchmarks/bench_cost.py``). An
        integer ``tune`` explores exactly that long (the papers' protocol is
        ``tune=5000``; with ``training_data="states"`` "auto" is one round).

    Notes
    -----
    Earlier names (``nodes``, ``activation``, ``ridge``, ``weight_scale``, ``whiten``,
    ``gradient_weight``, ``n_train``, ``training_data``, ``surrogate_step_cost``,
    ``surrogate_n_steps``, ``n_explore``, ``mass_matrix``, ``inverse_mass_matrix``,
    ``adapt_mass_matrix``, ``trust_ratio``, ``trust_window``, ``max_refits``,
    ``refit_iterations``, ``refit_growth``) raise a TypeError naming the new spelling.

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
    points). With ``tune="auto"``, ``exploration`` (per chain): its ``iterations``, the
    ``reason`` it stopped and its ``checks`` (each: the iteration, the predicted and exact
    acceptance of the held-out transitions, the RMS change of the surrogate's error along
    them, ``sigma``, the standard deviation of U - U_surrogate over the held-out states, the
    training points, the held-out states and the exploration's exact ``evaluations`` so far;
    with the sigma check, ``predicted_saving`` and ``round_evaluations`` instead of the
    acceptances). ``n_gradient_evals_sampling`` counts the exact gradients of exact stretches
    (``n_surrogate_gradient_evals`` the surrogate's).

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
    (4, 1000, 5)
    """

    name = "RNS-HMC"
    DEFAULT_TUNE = "auto"
    TUNE_WORDS = ("auto",)
    # "auto": exploration iterations of one chain alone, and of all the chains together when
    # they share a surrogate (each at least MIN_SHARED_TUNE)
    AUTO_TUNE, MIN_SHARED_TUNE = 200, 50
    MAX_ROUNDS = 4  # of an exploration with tune="auto"
    WARM_FROM = Phase.TRAINING

    KERNELS = ("hmc", "nuts")

    def __init__(self, target, *, n_hidden="auto", surrogate=None, step_size=None,
                 n_steps="auto", jitter=True, delayed_acceptance=False, explore=None, trust=True,
                 share_surrogate=True, target_accept=0.8, max_energy_error=1000.0,
                 kernel="hmc", max_tree_depth=10, inner_steps=1, **renamed):
        super().__init__(target)
        refuse_renamed(type(self).__name__, renamed, RENAMED)
        surrogate = surrogate_group(surrogate)
        n_hidden = surrogate.pop("n_hidden", n_hidden)
        explore = check_group(explore, "explore", EXPLORE_KEYS)
        self.leapfrog = LeapfrogSettings(
            explore.get("step_size", step_size), explore.get("n_steps", 5),
            explore.get("jitter", jitter), explore.get("mass_matrix"),
            explore.get("inverse_mass_matrix"), explore.get("adapt_mass_matrix"),
            explore.get("target_accept", target_accept), max_energy_error, dim=self.dim)
        self.sampling_step_size = (None if step_size is None
                                   else check_per_chain_real(step_size, "step_size"))
        self.jitter = bool(jitter)
        self.surrogate_settings = SurrogateSettings.from_group(n_hidden, surrogate)
        self.trust = trust_watch(trust)
        self.delayed_acceptance = bool(delayed_acceptance)
        self.share_surrogate = bool(share_surrogate)
        if kernel not in self.KERNELS:
            raise ValueError(f"kernel must be one of {self.KERNELS}, got {kernel!r}")
        self.exploration = exploration_phase(
            self, explore, surrogate, sigma_check=kernel == "nuts")
        target_accept = check_real(target_accept, "target_accept", lower=0.0, upper=1.0)
        self.nuts = None
        if kernel == "nuts":
            if self.delayed_acceptance:
                raise ValueError("delayed_acceptance is a test of the static trajectory: "
                                 "kernel='nuts' has its own (the surrogate-transition test)")
            self.nuts = SurrogateNUTS(max_tree_depth, inner_steps)
            self.kernel = SurrogateNUTSKernel(self.nuts, self.sampling_step_size,
                                              self.leapfrog, target_accept)
        else:
            self.kernel = ExplorationKernel(
                check_n_steps(n_steps, self.leapfrog.n_steps), self.sampling_step_size,
                self.leapfrog, target_accept)
        self.step_cost_setting = check_step_cost(surrogate.get("step_cost", "auto"))
        self.fit, self.phases = surrogate_hmc_phases(self)

    def auto_tune(self, chains):
        """The length of an exploration round with ``tune="auto"``."""
        return (max(self.MIN_SHARED_TUNE, math.ceil(self.AUTO_TUNE / chains))
                if self.share_surrogate else self.AUTO_TUNE)

    def initial_parts(self, tune, chains):
        if tune != "auto" or self.exploration.training_data != "trajectories":
            return {}
        round_length = self.auto_tune(chains)
        return {ExploreChecks.KEY: ExploreChecks(round_length=round_length,
                                                 max_length=self.MAX_ROUNDS * round_length)}

    def warm_parts(self, state):
        self.phases[Phase.SAMPLING].warm(state)

    def plan(self, draws, tune, chains, dim):
        if tune == "auto":
            tune = self.auto_tune(chains)
        n_explore = self.exploration.length(tune)
        self.leapfrog.check_chains(chains)
        if self.sampling_step_size is not None and np.ndim(self.sampling_step_size) \
                and len(self.sampling_step_size) != chains:
            raise ValueError(f"step_size has {len(self.sampling_step_size)} entries (one per "
                             f"chain), sampling {chains} chains")
        return [[Phase.EXPLORATION, n_explore], [Phase.TRAINING, 0], [Phase.SAMPLING, draws]]

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
        """The fitted surrogate (:class:`~rnshmc.RandomNetworkSurrogate` or
        :class:`~rnshmc.GaussianProcessSurrogate`) of each chain of a result."""
        return [surrogate_from_state(state) for state in result["surrogate"]]

    def report(self, result, states):
        result["delayed_acceptance"] = self.delayed_acceptance
        result["share_surrogate"] = self.share_surrogate
        warn_about_surrogate(self.name, self.trust, result, result.exploration_acceptance_rate,
                             "the exploration's acceptance")


def surrogate_hmc_phases(sampler, online=None):
    """The phases of HMC on a surrogate (exact-HMC exploration, fit, sampling with the trust
    watch), from the sampler's settings; with ``online`` (an ``OnlineInstalls``), the
    surrogate keeps learning during sampling. Returns (fit, phases)."""
    fit = SurrogateFit(sampler.name, sampler.exploration, sampler.surrogate_settings,
                       sampler.share_surrogate, sampler.kernel, online=online,
                       step_cost=sampler.step_cost_setting, jitter=sampler.jitter)
    sampling = SurrogateSampling(fit, sampler.leapfrog, sampler.delayed_acceptance,
                                 sampler.trust, online, jitter=sampler.jitter,
                                 nuts=sampler.nuts)
    return fit, by_name(sampler.exploration, fit, sampling)


def exploration_phase(sampler, explore, surrogate, sigma_check):
    """The exact exploration of ``sampler`` (its ``leapfrog``, ``surrogate_settings`` and
    ``share_surrogate`` set) from the ``explore`` group's ``kernel`` and ``start``: with
    ``tune="auto"`` its check is on sigma (``ExplorationCheck``) where the exploration is NUTS
    or ``sigma_check`` (the sampling kernel is surrogate NUTS)."""
    kernel = explore.get("kernel", "hmc")
    if kernel not in EXPLORE_KERNELS:
        raise ValueError(f"explore['kernel'] must be one of {EXPLORE_KERNELS}, got {kernel!r}")
    start = explore.get("start", "init")
    criterion = "sigma" if sigma_check or kernel == "nuts" else "acceptance"
    check = ExplorationCheck(sampler.name, sampler.surrogate_settings, sampler.share_surrogate,
                             criterion)
    if kernel == "nuts":
        if surrogate.get("training_data", "trajectories") != "trajectories":
            raise ValueError("a NUTS exploration's training data are its trajectories")
        if "n_steps" in explore or "jitter" in explore:
            raise ValueError("a NUTS exploration sets its own trajectory lengths: give no "
                             "explore['n_steps'] or explore['jitter']")
        return NUTSExploration(sampler.leapfrog, surrogate.get("n_train"), check=check,
                               start=start)
    return HMCExploration(sampler.leapfrog, surrogate.get("n_train"),
                          surrogate.get("training_data", "trajectories"), check=check,
                          start=start)


def check_n_steps(n_steps, default):
    """The sampling phase's ``n_steps`` checked: an int, "auto", or None (then ``default``)."""
    if n_steps is None:
        return default
    if isinstance(n_steps, str):
        if n_steps != "auto":
            raise ValueError(f"n_steps must be an integer, 'auto' or None, got {n_steps!r}")
        return n_steps
    return check_integer(n_steps, "n_steps", minimum=1)


def surrogate_group(surrogate, keys=SURROGATE_KEYS):
    """The ``surrogate=`` settings as a dict. A
    surrogate object (its fit, if any, is not used) gives its ``kind`` and its settings; a
    dict may name a ``kind`` (default "random_network") and hold that class's settings
    (:attr:`rnshmc.surrogate.Surrogate.OPTIONS`) besides the sampler's own ``keys``."""
    if isinstance(surrogate, Surrogate):
        settings = dict(surrogate.settings(), kind=surrogate.kind)
    else:
        kind = surrogate.get("kind", "random_network") if isinstance(surrogate, dict) \
            else "random_network"
        if kind not in Surrogate.kinds:
            raise ValueError(f"the surrogate kind must be one of {sorted(Surrogate.kinds)}, "
                             f"got {kind!r}")
        options = list(Surrogate.kinds[kind].OPTIONS)
        settings = check_group(surrogate, "surrogate",
                               [k for k in keys if k not in NETWORK_KEYS] + ["kind"] + options)
    return dict(settings)


def check_step_cost(surrogate_step_cost):
    """``surrogate_step_cost`` checked: "auto" or a number >= 0."""
    if isinstance(surrogate_step_cost, str) and surrogate_step_cost == "auto":
        return surrogate_step_cost
    return check_real(surrogate_step_cost, "step_cost", lower=0.0, lower_inclusive=True)
