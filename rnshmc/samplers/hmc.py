"""Hamiltonian Monte Carlo (Algorithm 1 of the RNS-HMC paper) with Stan-style warm-up."""
from .driver import ChainSampler, Phase

__all__ = ["HMC"]


class HMC(ChainSampler):
    """Hamiltonian Monte Carlo with a leapfrog integrator whose gradient is cached between steps.

    Two phases per chain: ``"warmup"`` (``tune`` iterations: Stan's adaptation of the step
    size and a diagonal mass matrix, or a burn-in at the given settings; discarded) and
    ``"sampling"``.

    Parameters
    ----------
    target : rnshmc.Target, built-in model or BridgeStan-style object
        The log density to sample (see :mod:`rnshmc.targets`). Must have a gradient.
    step_size, n_steps, jitter, mass_matrix, inverse_mass_matrix, adapt_mass_matrix, \
target_accept, max_energy_error
        See :class:`~rnshmc.samplers.driver.ChainSampler`: the leapfrog's step size (None:
        adapted during warm-up) and number of steps, the momentum covariance and its
        adaptation.

    Examples
    --------
    >>> import numpy as np, rnshmc
    >>> target = rnshmc.Target(lambda q: -0.5 * q @ q, grad_logp=lambda q: -q, dim=2)
    >>> res = rnshmc.HMC(target, n_steps=5).sample(500, tune=500, rng=0, progress=False)
    >>> res.samples.shape
    (1, 500, 2)
    """

    name = "HMC"
    PHASES = {"warmup": Phase(adapt=True), "sampling": Phase(keep=("samples", "records"))}

    def plan(self, draws, tune):
        return [["warmup", tune], ["sampling", draws]]

    def phase_spec(self, name):
        return self.PHASES[name]

    def begin_phase(self, name, chain, state, generator):
        super().begin_phase(name, chain, state, generator)
        if name == "warmup":
            self.start_adaptation(chain, state, generator)

    def sample(self, draws=1000, tune=1000, chains=1, rng=None, init=None, progress=True,
               pool="auto", checkpoint=None, checkpoint_every=1000):
        """Draw samples (see :meth:`ChainSampler.sample` for the arguments).

        Returns
        -------
        SampleResult
            ``samples`` (chains, draws, dim), ``log_density``, ``accepted``, ``accept_prob``,
            ``acceptance_rate``, ``diverging``, ``energy``, ``step_size``, ``n_steps``,
            ``inverse_mass_matrix``, ``n_density_evals``, ``n_gradient_evals`` (a gradient
            evaluation also evaluates the density and is counted in both; the ``_sampling``
            variants count the sampling phase only), ``timings`` (seconds per phase, summed
            over chains: ``"tune"``, ``"sampling"``).
        """
        return super().sample(draws=draws, tune=tune, chains=chains, rng=rng, init=init,
                              progress=progress, pool=pool,
                              checkpoint=checkpoint, checkpoint_every=checkpoint_every)
