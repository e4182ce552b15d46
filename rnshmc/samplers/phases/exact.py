"""Exact phases: HMC with the leapfrog and adaptive Metropolis, and the warm-up of an exact
chain.

:class:`HMCPhase` runs exact HMC on the sampler's target (warm-up, burn-in, sampling, RMHMC's
approach); :class:`MetropolisPhase` adaptive Metropolis, whose adaptation runs inside its C
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
from ...adaptation import (WarmupSchedule, initial_step_size, regularized_variance,
                           terminal_buffer)
from ...state import PartState
from .base import Phase, euclidean_chain

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
        # install the shrunk variance estimate as the inverse mass matrix and restart the
        # step size from Stan's heuristic
        n, variance = chain.take_variance()
        inverse_mass = regularized_variance(n, variance)
        chain.metric.set_inverse_mass(inverse_mass)
        run.state.inverse_mass = inverse_mass
        if adapt_step:
            target_accept = self.settings.target_accept
            step_size = initial_step_size(chain, run.generator, chain.step_size, target_accept)
            chain.restart_step_size_adaptation(step_size, target_accept)


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


@dataclasses.dataclass
class ProposalState(PartState):
    """The exploration's final random-walk proposal: scale times a Cholesky factor of the
    covariance."""
    KEY = "proposal"
    covariance: np.ndarray
    scale: float

