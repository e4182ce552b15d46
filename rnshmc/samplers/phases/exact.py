"""Exact phases: HMC with the leapfrog, NUTS and adaptive Metropolis, and the warm-up of an
exact chain.

:class:`HMCPhase` runs exact HMC on the sampler's target (warm-up, burn-in, sampling, RMHMC's
approach), :class:`NUTSPhase` the No-U-Turn Sampler (``docs/algorithms.md`` section 13);
:class:`MetropolisPhase` adaptive Metropolis, whose adaptation runs inside its C
chain. The warm-up objects own the adaptation hooks the runner calls (after Stan's
``base_adapter``): :class:`StepSizeWarmup`, dual averaging of the step size from Stan's
heuristic start, the one step-size warm-up of every phase that adapts one (exact HMC, RMHMC,
RNS-RMHMC's adaptation on the surrogate); :class:`WindowedWarmup` adds Stan's windowed
diagonal mass matrix and the probe bound of a Euclidean chain's warm-up
(``docs/algorithms.md`` section 1).
"""
import dataclasses

import numpy as np

from ..._kernels._metropolis import MetropolisChain
from ...adaptation import (WarmupSchedule, fisher_dense, fisher_diagonal, fisher_low_rank,
                           initial_step_size, regularized_variance, terminal_buffer)
from ...parallel import one_blas_thread
from ...state import PartState
from .base import Phase, euclidean_chain, nuts_chain

# the first window of adaptive Metropolis's proposal covariance (then doubling, Stan's schedule)
FIRST_WINDOW = 50


class StepSizeWarmup:
    """Dual averaging of the step size to ``settings.target_accept``, unless the settings give
    one: it starts from Stan's heuristic (from 1) when the phase begins, and the final
    averaged step size is installed when the phase ends.

    Parameters
    ----------
    settings : rnshmc.samplers.phases.base.LeapfrogSettings
    """

    def __init__(self, settings):
        self.settings = settings

    def begin(self, run, chain):
        """At the phase's start (the chain positioned): the given step size, or Stan's
        heuristic with dual averaging started from it."""
        given = self.settings.step_size_of(run.state.chain)
        if given is None:
            target_accept = self.settings.target_accept
            chain.restart_step_size_adaptation(
                initial_step_size(chain, run.generator, target_accept=target_accept),
                target_accept)
        else:
            chain.step_size = given

    def adapts_step_size(self, run):
        """Whether the chain's transitions adapt the step size."""
        return self.settings.step_size_of(run.state.chain) is None

    def adapts_mass(self, run):
        """Whether the chain's transitions accumulate the mass matrix's variance."""
        return False

    def schedule(self, state, n_iter):
        """The mass matrix's windows over the phase's ``n_iter`` iterations."""
        return WarmupSchedule(n_iter, term_buffer=terminal_buffer(n_iter))

    def window_end(self, run, chain, adapt_step):
        """At the end of a slow window of the schedule."""

    def finish(self, run, chain):
        """After the phase's last iteration: the averaged step size."""
        if self.adapts_step_size(run) and run.state.phase_length(run.state.phase) > 0:
            chain.step_size = chain.final_step_size


class WindowedWarmup(StepSizeWarmup):
    """Stan's warm-up of an exact Euclidean chain: the step size as :class:`StepSizeWarmup`,
    and, when ``settings.adapt_mass_matrix``, a diagonal mass matrix estimated in Stan's
    windows; the chain's trajectories and step-size search stay near where it has been (the
    probe bound: a costly model is never asked for a point absurdly far out)."""

    def begin(self, run, chain):
        chain.bound_probes(True)
        super().begin(run, chain)

    def adapts_mass(self, run):
        return self.settings.adapt_mass_matrix

    def window_end(self, run, chain, adapt_step):
        # install the window's estimate as the inverse mass matrix and restart the step size
        # from Stan's heuristic
        inverse_mass = self.estimate(run, chain)
        chain.metric.set_inverse_mass(inverse_mass)
        run.state.inverse_mass = inverse_mass
        if adapt_step:
            target_accept = self.settings.target_accept
            step_size = initial_step_size(chain, run.generator, chain.step_size, target_accept)
            chain.restart_step_size_adaptation(step_size, target_accept)

    def estimate(self, run, chain):
        """The slow window's inverse mass matrix: the shrunk variance of its positions, which
        the C loop accumulated (starting the next window's)."""
        n, variance = chain.take_variance()
        return regularized_variance(n, variance)


class MetricWarmup(WindowedWarmup):
    """Stan's warm-up with the metric of each slow window estimated from the window's draws
    (and the gradients there): ``metric`` "dense" is Stan's dense estimate (the draws'
    covariance, shrunk as Stan shrinks it); "diagonal_grad", "dense_grad" and "low_rank" are
    the estimators from draws and gradients (:func:`rnshmc.adaptation.fisher_diagonal`,
    :func:`~rnshmc.adaptation.fisher_dense`, :func:`~rnshmc.adaptation.fisher_low_rank`;
    ``docs/algorithms.md`` section 13). The phase keeps its draws and gradients for them
    (``KEEP``)."""

    METRICS = ("dense", "diagonal_grad", "dense_grad", "low_rank")
    KEEP = ("samples", "gradients")
    # The estimators from draws and gradients are exact for a Gaussian from a handful of
    # draws, so their windows start early and short (Stan's 75 + 25 are for the draws'
    # variance, which needs many): the first metric is installed after 15 iterations instead
    # of 100. On the correlated regression of rnshmc.models.hard (300 iterations, low_rank)
    # this cut the warm-up's gradients from ~58k to ~14k, at the same ESS per gradient after.
    GRADIENT_BUFFER, GRADIENT_WINDOW = 5, 10
    # ... and their last window ends a third of the warm-up before its end (Stan: a fifth,
    # at least 50), which leaves dual averaging time to settle on the final metric: with 60
    # of 300 iterations its step size came out 10-20% smaller than after a 1000-iteration
    # warm-up (eight schools, the correlated regression), and the draws after cost 25% and
    # 18% more; with 100, eight schools' cost the same and the regression's 9% more.
    GRADIENT_TERMINAL_SHARE = 3

    def __init__(self, settings, metric):
        if metric not in self.METRICS:
            raise ValueError(f"metric must be one of {self.METRICS}, got {metric!r}")
        super().__init__(settings)
        self.metric = metric

    def schedule(self, state, n_iter):
        if self.metric == "dense":
            return super().schedule(state, n_iter)
        return WarmupSchedule(n_iter, init_buffer=self.GRADIENT_BUFFER,
                              term_buffer=max(terminal_buffer(n_iter),
                                              n_iter // self.GRADIENT_TERMINAL_SHARE),
                              base_window=self.GRADIENT_WINDOW, min_window=self.GRADIENT_WINDOW)

    @one_blas_thread
    def estimate(self, run, chain):
        chain.take_variance()  # (the C loop's running variance of the draws is not used)
        state = run.state
        end = state.iteration
        schedule = self.schedule(state, state.phase_length(state.phase))
        starts = [schedule.slow_start] + [e + 1 for e in schedule.ends]
        start = max(s for s in starts if s < end)
        outputs = state.outputs[state.phase]
        draws, gradients = outputs["samples"][start:end], outputs["gradients"][start:end]
        if self.metric == "diagonal_grad":
            return fisher_diagonal(draws, gradients)
        if self.metric == "low_rank":
            # (applied as a dense matrix: d^2 per leapfrog step, small beside a gradient for
            # the dimensions NUTS is used at)
            return fisher_low_rank(draws, gradients).dense()
        try:
            inverse_mass = (fisher_dense(draws, gradients) if self.metric == "dense_grad"
                            else np.atleast_2d(np.cov(draws, rowvar=False)))
            np.linalg.cholesky(inverse_mass)
        except (ValueError, np.linalg.LinAlgError):
            # fewer distinct draws than dimensions: what they span (dense_grad), or the
            # window's variances only
            if self.metric == "dense_grad":
                return fisher_low_rank(draws, gradients, cutoff=1.0).dense()
            inverse_mass = np.diag(draws.var(axis=0) + 1e-12)
        if self.metric == "dense":  # Stan's shrinkage towards 1e-3 times the identity
            inverse_mass = regularized_variance(len(draws), inverse_mass)
        return inverse_mass


class HMCPhase(Phase):
    """Exact HMC with the leapfrog (the sampler's target for dynamics and test).

    Parameters
    ----------
    name : str
    leapfrog : LeapfrogSettings
    adapt : bool
        Stan's warm-up in this phase (:class:`WindowedWarmup`): dual averaging of the step
        size unless it is given, and the windowed diagonal mass matrix when
        ``leapfrog.adapt_mass_matrix``.
    keep : tuple of str
    """

    def __init__(self, name, leapfrog, adapt=False, keep=()):
        super().__init__(name)
        self.leapfrog, self.keep = leapfrog, tuple(keep)
        self.warmup = WindowedWarmup(leapfrog) if adapt else None

    def trajectory(self, run):
        return self.leapfrog.n_steps, self.leapfrog.jitter

    def make_chain(self, run):
        return euclidean_chain(run.target, run.state, self.leapfrog.max_energy_error)


class MetropolisPhase(Phase):
    """Adaptive Metropolis (see ``rnshmc._kernels._metropolis``): the proposal's covariance
    re-estimated in doubling windows and its scale adapted to ``target_accept`` over the
    first phase of the plan when ``adapting``, frozen otherwise.

    Parameters
    ----------
    name : str
    target_accept : float
    adapting : bool
    keep : tuple of str
    """

    def __init__(self, name, target_accept, adapting, keep=()):
        super().__init__(name)
        self.target_accept, self.adapting, self.keep = target_accept, adapting, tuple(keep)

    def make_chain(self, run):
        state = run.state
        n_adapt = state.phases[0][1] if self.adapting else 0
        ends = []
        if n_adapt > 0:
            ends = WarmupSchedule(n_adapt, init_buffer=0, term_buffer=terminal_buffer(n_adapt),
                                  base_window=FIRST_WINDOW).ends
        # identity covariance and scale 2.38 / sqrt(d) at first (the state restores the
        # adapted ones)
        return MetropolisChain(run.target, np.eye(state.dim), 2.38 / np.sqrt(state.dim),
                               adapt=n_adapt > 0, n_adapt=n_adapt, window_ends=ends,
                               target_accept=self.target_accept)


class NUTSPhase(HMCPhase):
    """Exact NUTS (``docs/algorithms.md`` section 13): trees of at most ``max_tree_depth``
    doublings of the leapfrog with the chain's step size and mass matrix; with ``adapt``,
    Stan's warm-up (:class:`WindowedWarmup`), whose dual averaging follows NUTS's acceptance
    statistic.

    Parameters
    ----------
    name : str
    leapfrog : LeapfrogSettings
        The step size, mass matrix, their adaptation, target_accept and max_energy_error
        (its steps and jitter are not used: a tree sets its own length).
    max_tree_depth : int
    adapt : bool
    keep : tuple of str
    metric : {"diagonal", "dense", "diagonal_grad", "dense_grad", "low_rank"}
        The warm-up's metric: Stan's diagonal (:class:`WindowedWarmup`), or one of
        :class:`MetricWarmup`'s.
    """

    def __init__(self, name, leapfrog, max_tree_depth, adapt=False, keep=(), metric="diagonal"):
        super().__init__(name, leapfrog, adapt, keep)
        self.max_tree_depth = max_tree_depth
        if adapt and metric != "diagonal" and leapfrog.adapt_mass_matrix:
            self.warmup = MetricWarmup(leapfrog, metric)
            self.keep = tuple(dict.fromkeys(self.keep + MetricWarmup.KEEP))

    def trajectory(self, run):
        return 1, False  # (one tree per transition)

    def make_chain(self, run):
        return nuts_chain(run.target, run.state, self.leapfrog.max_energy_error,
                          self.max_tree_depth)


@dataclasses.dataclass
class ProposalState(PartState):
    """The exploration's final random-walk proposal: scale times a Cholesky factor of the
    covariance."""
    KEY = "proposal"
    covariance: np.ndarray
    scale: float

