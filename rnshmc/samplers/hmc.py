"""Hamiltonian Monte Carlo (Algorithm 1 of the RNS-HMC paper) with Stan-style warm-up."""
from ._base import Sampler, warn_unadapted
from .phases.base import LeapfrogSettings, Phase
from .phases.exact import HMCPhase

__all__ = ["HMC"]


class HMC(Sampler):
    """Hamiltonian Monte Carlo with a leapfrog integrator whose gradient is cached between steps.

    Two phases per chain: ``"warmup"`` (``tune`` iterations, default 1000: Stan's adaptation
    of the step size and a diagonal mass matrix, or a burn-in at the given settings;
    discarded) and ``"sampling"``. See ``docs/algorithms.md`` (HMC).

    Parameters
    ----------
    target : rnshmc.Target, built-in model or BridgeStan-style object
        The log density to sample (see :class:`rnshmc.Target`, and ``help(rnshmc.targets)`` for the protocol). Must have a gradient.
    step_size : float, ndarray of shape (chains,) or None
        Leapfrog step size (one per chain, e.g. a result's ``step_size``, to continue a run).
        None (default) adapts it during warm-up by dual averaging to ``target_accept``.
    n_steps : int
        Number of leapfrog steps per iteration (the maximum when ``jitter`` is on).
    jitter : bool
        Draw the number of steps uniformly from {1, ..., n_steps} each iteration (Neal 2011), as
        the papers do.
    mass_matrix : None, ndarray of shape (dim,) or (dim, dim)
        The momentum covariance M (diagonal or dense). None means the identity (adapted to a
        diagonal estimate of the posterior precision during warm-up when
        ``adapt_mass_matrix``). Give this or ``inverse_mass_matrix``, not both.
    inverse_mass_matrix : None or ndarray
        M^{-1} instead of M: (dim,), (dim, dim), or one per chain — (chains, dim) or (chains,
        dim, dim), a result's ``inverse_mass_matrix`` — to continue a run. A square 2-d array
        is one dense matrix; a list of arrays is one per chain.
    adapt_mass_matrix : bool or None
        Estimate a diagonal mass matrix in Stan's warm-up windows. None (default) means: only
        when neither a step size nor a mass matrix is given.
    target_accept : float
        Target mean acceptance probability of the step-size adaptation (default 0.8).
    max_energy_error : float
        Proposals with a larger energy error, or a non-finite energy, are rejected and recorded
        as divergences (default 1000).

    Examples
    --------
    >>> import numpy as np, rnshmc
    >>> target = rnshmc.Target(lambda q: -0.5 * q @ q, grad_logp=lambda q: -q, dim=2)
    >>> res = rnshmc.HMC(target, n_steps=5).sample(500, tune=500, rng=0, progress=False)
    >>> res.samples.shape
    (4, 500, 2)
    """

    name = "HMC"
    WARM_FROM = Phase.SAMPLING

    def __init__(self, target, *, step_size=None, n_steps=10, jitter=True, mass_matrix=None,
                 inverse_mass_matrix=None, adapt_mass_matrix=None, target_accept=0.8,
                 max_energy_error=1000.0):
        super().__init__(target)
        self.leapfrog = LeapfrogSettings(step_size, n_steps, jitter, mass_matrix,
                                         inverse_mass_matrix, adapt_mass_matrix, target_accept,
                                         max_energy_error, dim=self.dim)
        self.phases = {Phase.WARMUP: HMCPhase(Phase.WARMUP, self.leapfrog, adapt=True),
                       Phase.SAMPLING: HMCPhase(Phase.SAMPLING, self.leapfrog,
                                                keep=("samples", "records"))}

    def plan(self, draws, tune, chains, dim):
        self.leapfrog.check_chains(chains)
        warn_unadapted(self.name, tune, self.leapfrog.step_size)
        return [[Phase.WARMUP, tune], [Phase.SAMPLING, draws]]
