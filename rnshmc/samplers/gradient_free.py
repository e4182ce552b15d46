"""RNS-HMC without model gradients: an adaptive-Metropolis exploration, a surrogate fitted to
the potential's values, then Hamiltonian dynamics on the surrogate with the exact Metropolis
test; and adaptive Metropolis on its own (``docs/algorithms.md``)."""
import math

import numpy as np

from ..validation import check_group, check_real, refuse_renamed
from ._base import Sampler
from .phases.base import LeapfrogSettings, Phase, by_name
from .phases.dynamics import SurrogateSampling, trust_watch, warn_about_surrogate
from .phases.exact import MetropolisPhase
from .phases.exploration import MetropolisExploration
from .phases.fit import FitState, PilotKernel, SurrogateFit, SurrogateSettings
from .rns import NETWORK_KEYS, check_n_steps, check_step_cost, surrogate_group

__all__ = ["GradientFreeRNSHMC", "AdaptiveMetropolis"]

# the additive units' weight scale on whitened inputs, times 1/sqrt(dim), for values-only fits
VALUES_WEIGHT_SCALE = 0.05
# the step-size pilot's trajectory length with n_steps="auto"
PILOT_STEPS = 10
# the trust watch's defaults where they differ from RNS-HMC's: a window of draws is distrusted
# under a third of the surrogate's own acceptance (the collapse warning's threshold)
TRUST_DEFAULTS = dict(ratio=1 / 3)
SURROGATE_KEYS = NETWORK_KEYS + ("n_train", "training_data", "step_cost")
# earlier keyword arguments: (their group, their new name), named by the error they raise
RENAMED = dict({key: ("surrogate", key) for key in NETWORK_KEYS + ("n_train", "training_data")},
             surrogate_step_cost=("surrogate", "step_cost"), surrogate_n_steps=(None, "n_steps"),
             n_explore=("sample", "tune"), explore_accept=("explore", "target_accept"))


class AdaptiveMetropolis(Sampler):
    """Random-walk Metropolis with an adaptive Gaussian proposal (no gradient needed).

    During ``tune`` iterations the proposal's covariance is re-estimated from the chain's
    states in doubling windows (Haario et al. 2001's empirical covariance, over the latter half
    of the chain so far, shrunk towards its diagonal), and its scale adapted to the acceptance
    ``target_accept`` by Robbins-Monro (Andrieu and Thoms 2008); then it is frozen and the
    draws are those of a fixed Metropolis kernel. One density evaluation per iteration. See
    ``rnshmc/_kernels/_metropolis.pyx``.

    Two phases per chain: ``"warmup"`` (``tune`` iterations, default 1000, adapting) and
    ``"sampling"``; the result's ``proposal_covariance`` (chains, dim, dim) is the frozen
    proposal's.

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
    >>> res.samples.shape, int(res.n_gradient_evals.sum())
    ((4, 5000, 2), 0)
    """

    name = "AM"
    NEEDS_GRADIENT = False

    def __init__(self, target, *, target_accept=0.234):
        super().__init__(target)
        self.target_accept = check_real(target_accept, "target_accept", lower=0.0, upper=1.0)
        self.phases = by_name(
            MetropolisPhase(Phase.WARMUP, self.target_accept, adapting=True),
            MetropolisPhase(Phase.SAMPLING, self.target_accept, adapting=False,
                            keep=("samples", "records")))

    def plan(self, draws, tune, chains, dim):
        return [[Phase.WARMUP, tune], [Phase.SAMPLING, draws]]

    def report(self, result, states):
        # the proposal adapted in warm-up, frozen
        result.pop("inverse_mass_matrix")
        result["proposal_covariance"] = np.stack([s.kernel["proposal_covariance"]
                                                  for s in states])


class GradientFreeRNSHMC(Sampler):
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
       HMC over the surrogate alone (a pilot of 300 trajectories, each
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
    n_hidden : int or "auto"
        As for :class:`~rnshmc.RNSHMC`.
    surrogate : dict, RandomNetworkSurrogate or GaussianProcessSurrogate, optional
        As for :class:`~rnshmc.RNSHMC` (a GP surrogate included; no ``gradient_weight``: the
        fit is to values), except:

        - ``training_data``: the rows the surrogate is fitted to. "evaluations" (default):
          every exact evaluation of the exploration (of its last ``n_train`` iterations if
          given), i.e. every proposal, accepted or rejected, except non-finite ones and
          those above the highest state potential of the exploration's last 80% plus those
          states' range (the burn-in's far-out points, which would dominate the
          least-squares fit). "states": the chain states of its last ``n_train`` iterations
          (by default 80%), repeated rows from rejections included. About three in four
          random-walk proposals are rejected, so "evaluations" fits four times as many
          distinct points at no extra cost. On the authors' elliptic PDE
          (``benchmarks/bench_gradient_free.py``: 4 chains' explorations of 1000 iterations,
          pooled) the fit's error at posterior draws was 0.47-0.51 against 0.57-0.62 with
          the states; from one chain's 2800 iterations, 0.49-0.53 against 0.64-0.73; from
          one chain's 1000, the sampling acceptance was 0.37-0.46 against 0.01-0.02.
        - ``weight_scale``: None (default) means 0.05 / sqrt(dim) for additive units on
          whitened inputs (``VALUES_WEIGHT_SCALE``): smoother units suit a fit to values
          alone. On the authors' PDE (2000 exploration iterations, values from the last
          80%) the sampling acceptance was 0.54-0.59 at 0.1 / sqrt(dim), 0.24 at RNS-HMC's
          0.2 / sqrt(dim), and 0.65 at 0.05 / sqrt(dim) (0.56-0.60 at 0.02 / sqrt(dim)).
    step_size : float, ndarray of shape (chains,) or None
        The leapfrog step size of the sampling phase; None (default) adapts it on the
        surrogate (see above).
    n_steps : int, "auto" or None
        Leapfrog steps (the maximum with ``jitter``) of the sampling phase: "auto" (default)
        as for :class:`~rnshmc.RNSHMC`. (The step-size pilot's trajectories have up to 10.)
    jitter : bool
        Draw the number of steps uniformly from {1, ..., L} (default True).
    delayed_acceptance : bool
        As for :class:`~rnshmc.RNSHMC`.
    explore : dict, optional
        The adaptive-Metropolis exploration: ``target_accept`` of its proposal scale
        (default 0.234). Its length is ``sample()``'s ``tune``.
    trust : dict or bool
        The trust watch (default True), as :class:`~rnshmc.RNSHMC`'s with two differences.
        A window of ``window`` (default 50) draws is distrusted when its acceptance is under
        ``ratio`` (default 1/3) times the surrogate's own acceptance on its pilot
        (``surrogate_acceptance_rate``): an adaptive-Metropolis exploration's acceptance
        says nothing of the dynamics'. And the exact kernel is the exploration's random walk,
        its proposal frozen: ``refit_iterations`` (default 200) of it, then a refit to the
        training data plus the values of the proposals it evaluated, with ``refit_growth``
        (default 2) times the hidden units; after ``max_refits`` (default 2) refits the rest
        of the chain is adaptive Metropolis (fallback), warned about and recorded
        (``trust_events``, ``exact_dynamics``, ``fallback``). With three hidden units on a
        5-d Gaussian every chain is stuck without the watch (acceptance 0) and falls back
        with it (then within Monte Carlo error); on well-fitted Gaussians it stays quiet.
        False turns it off (then a warning when acceptance collapses).
    mass_matrix, inverse_mass_matrix
        The sampling phase's mass matrix; None (default) uses the exploration's proposal
        covariance as the inverse mass matrix.
    target_accept : float
        Of the step size's adaptation on the surrogate (default 0.8).
    max_energy_error : float
        As for :class:`~rnshmc.HMC`.
    share_surrogate : bool
        Fit one surrogate to the pooled explorations of all the chains (default True, unlike
        RNS-HMC: values-only fits are hungry for points), which wait for each other at the end
        of their explorations; see :class:`~rnshmc.RNSHMC`. False: each chain fits its own.
        On the authors' PDE (4 chains x 2000 draws, the default exploration lengths: 1000
        iterations per chain pooled, 2800 each alone; 3 and 5 seeds) min ESS per exact solve,
        exploration included, was 0.23-0.32 pooled against 0.13-0.18 alone.

    Attributes
    ----------
    DEFAULT_TUNE : "auto"
        ``sample()``'s default ``tune``: :meth:`exploration_length` iterations of exploration
        per chain (each costs one exact density).

    Notes
    -----
    Earlier names (``nodes``, ``activation``, ``ridge``, ``weight_scale``, ``whiten``,
    ``n_train``, ``training_data``, ``surrogate_step_cost``, ``surrogate_n_steps``,
    ``n_explore``, ``explore_accept``) raise a TypeError naming the new spelling.

    The result has the keys of :class:`~rnshmc.RNSHMC`'s (``n_gradient_evals`` is 0;
    ``exploration_acceptance_rate`` is the adaptive Metropolis's over the training window;
    ``exact_dynamics`` marks the random walk's draws), plus ``surrogate_acceptance_rate`` (per chain:
    the pilot's mean acceptance on the surrogate alone at the sampling step size and
    length), ``proposal_covariance`` (chains, dim, dim) and ``proposal_scale`` (chains,):
    the exploration's final random-walk proposal, scale times a Cholesky factor of the
    covariance.

    The chain is exact whichever kernel runs: each (the surrogate's dynamics with the exact
    test, the frozen random walk) leaves the posterior invariant, and which one runs is
    decided by the draws already made (``docs/algorithms.md``, RNS-HMC's trust watch).

    Examples
    --------
    >>> import numpy as np, rnshmc
    >>> target = rnshmc.Target(lambda q: -0.5 * q @ q, dim=3)      # no gradient
    >>> rns = rnshmc.GradientFreeRNSHMC(target, n_hidden=100)
    >>> res = rns.sample(1000, tune=500, rng=0, progress=False)
    >>> res.samples.shape, int(res.n_gradient_evals.sum())
    ((4, 1000, 3), 0)
    """

    name = "GF-RNS-HMC"
    NEEDS_GRADIENT = False
    DEFAULT_TUNE = "auto"
    TUNE_WORDS = ("auto",)
    WARM_FROM = Phase.TRAINING

    def __init__(self, target, *, n_hidden="auto", surrogate=None, step_size=None,
                 n_steps="auto", jitter=True, delayed_acceptance=False, explore=None,
                 trust=True, share_surrogate=True, mass_matrix=None, inverse_mass_matrix=None,
                 target_accept=0.8, max_energy_error=1000.0, **renamed):
        super().__init__(target)
        refuse_renamed(type(self).__name__, renamed, RENAMED)
        surrogate = surrogate_group(surrogate, SURROGATE_KEYS)
        n_hidden = surrogate.pop("n_hidden", n_hidden)
        explore = check_group(explore, "explore", ("target_accept",))
        n_steps = check_n_steps(n_steps, PILOT_STEPS)
        # the sampling's leapfrog (its step size adapted on the surrogate by a pilot)
        self.leapfrog = LeapfrogSettings(step_size, PILOT_STEPS, jitter, mass_matrix,
                                         inverse_mass_matrix, False, target_accept,
                                         max_energy_error, dim=self.dim)
        self.surrogate_settings = SurrogateSettings.from_group(
            n_hidden, dict(surrogate, gradient_weight=0.0),
            values_weight_scale=VALUES_WEIGHT_SCALE)
        self.explore_accept = check_real(explore.get("target_accept", 0.234),
                                         "explore target_accept", lower=0.0, upper=1.0)
        self.share_surrogate = bool(share_surrogate)
        self.delayed_acceptance = bool(delayed_acceptance)
        exploration = MetropolisExploration(self.explore_accept, surrogate.get("n_train"),
                                            surrogate.get("training_data", "evaluations"))
        self.fit = SurrogateFit(self.name, exploration, self.surrogate_settings,
                                self.share_surrogate, PilotKernel(self.leapfrog, n_steps),
                                step_cost=check_step_cost(surrogate.get("step_cost", "auto")),
                                jitter=self.leapfrog.jitter)
        self.trust = trust_watch(trust, reference="surrogate", kernels=("metropolis",),
                                 kernel="metropolis", **TRUST_DEFAULTS)
        self.phases = by_name(exploration, self.fit, SurrogateSampling(
            self.fit, self.leapfrog, self.delayed_acceptance, trust=self.trust,
            keep_gradients=False))

    def warm_parts(self, state):
        self.phases[Phase.SAMPLING].warm(state)

    def plan(self, draws, tune, chains, dim):
        if tune == "auto":
            tune = self.exploration_length(dim, chains if self.share_surrogate else 1)
        n_explore = self.fit.exploration.length(tune)
        self.leapfrog.check_chains(chains)
        return [[Phase.EXPLORATION, n_explore], [Phase.TRAINING, 0], [Phase.SAMPLING, draws]]

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

    def report(self, result, states):
        result["delayed_acceptance"] = self.delayed_acceptance
        result["share_surrogate"] = self.share_surrogate
        result["surrogate_acceptance_rate"] = np.array(
            [FitState.of(s).surrogate_acceptance_rate for s in states])
        warn_about_surrogate(
            self.name, self.trust, result, result.surrogate_acceptance_rate,
            "the acceptance the surrogate's dynamics reach on the surrogate itself",
            # what fixed such falls in the tests: more units for a network too small (10 on
            # a 5-d Gaussian); on a curved 6-d banana neither four or eight times the
            # exploration nor three times the units did, a gradient or more draws did
            "A network too small for the posterior needs more hidden units (n_hidden); "
            "otherwise a longer exploration rarely helps: more draws do (rnshmc.sample(..., "
            "ess=1000) draws until enough), and so does a gradient of the model "
            "(rnshmc.RNSHMC fits the surrogate to gradients too).")
