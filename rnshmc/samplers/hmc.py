"""Hamiltonian Monte Carlo (Algorithm 1 of the RNS-HMC paper) with Stan-style warm-up."""
import time
import warnings

import numpy as np

from .._kernels._hmc import HMCKernel
from ..adaptation import DualAveraging, RunningVariance, WarmupSchedule, initial_step_size
from ..parallel import chain_generators, map_chains
from ..results import SampleResult
from ..targets import as_ctarget, check_target, target_dim

__all__ = ["HMC"]


def _positive_int(value, name, minimum=1):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _inverse_mass(mass_matrix, dim):
    """The inverse of a user's mass matrix (None, (dim,) diagonal or (dim, dim) dense)."""
    if mass_matrix is None:
        return None
    M = np.asarray(mass_matrix, dtype=np.float64)
    if M.shape == (dim,):
        if not (np.all(np.isfinite(M)) and np.all(M > 0)):
            raise ValueError("a diagonal mass matrix must be finite and positive")
        return 1.0 / M
    if M.shape == (dim, dim):
        if not np.all(np.isfinite(M)) or not np.allclose(M, M.T):
            raise ValueError("the mass matrix must be finite and symmetric")
        try:
            np.linalg.cholesky(M)
        except np.linalg.LinAlgError:
            raise ValueError("the mass matrix is not positive definite") from None
        return np.linalg.inv(M)
    raise ValueError(f"mass_matrix must have shape ({dim},) or ({dim}, {dim}), got {M.shape}")


class _Progress:
    """A tqdm bar when tqdm is installed and progress is wanted; silent otherwise."""

    def __init__(self, enabled, total, desc):
        self.bar = None
        if enabled:
            try:
                from tqdm.auto import tqdm
            except ImportError:
                return
            self.bar = tqdm(total=total, desc=desc, leave=False)

    def update(self, n):
        if self.bar is not None:
            self.bar.update(n)

    def close(self):
        if self.bar is not None:
            self.bar.close()


class _Buffers:
    """Per-transition outputs of the C loop, preallocated for a whole phase (with the
    gradients at the kept states if asked)."""

    def __init__(self, n, dim, gradients=False):
        self.gradients = np.empty((n, dim)) if gradients else None
        self.samples = np.empty((n, dim))
        self.log_density = np.empty(n)
        self.accepted = np.empty(n, dtype=np.uint8)
        self.accept_prob = np.empty(n)
        self.diverging = np.empty(n, dtype=np.uint8)
        self.energy = np.empty(n)
        self.n_steps = np.empty(n, dtype=np.int64)

    def rows(self, start, stop):
        """The arguments of HMCKernel.run for rows start..stop."""
        return (self.samples[start:stop], self.log_density[start:stop],
                self.accepted[start:stop], self.accept_prob[start:stop],
                self.diverging[start:stop], self.energy[start:stop], self.n_steps[start:stop],
                None if self.gradients is None else self.gradients[start:stop])


class HMC:
    """Hamiltonian Monte Carlo with a leapfrog integrator whose gradient is cached between steps.

    Parameters
    ----------
    target : rnshmc.Target, built-in model or BridgeStan-style object
        The log density to sample (see :mod:`rnshmc.targets`). Must have a gradient.
    step_size : float or None
        Leapfrog step size. If None (default) it is adapted during the ``tune`` phase by dual
        averaging to ``target_accept``; if given, it is used as is (the papers' runs).
    n_steps : int
        Number of leapfrog steps per iteration (the maximum when ``jitter`` is on).
    jitter : bool
        Draw the number of steps uniformly from {1, ..., n_steps} each iteration (Neal 2011), as
        the papers do.
    mass_matrix : None, ndarray of shape (dim,) or (dim, dim)
        The momentum covariance M (diagonal or dense). None means the identity, adapted to a
        diagonal estimate of the posterior precision during tuning when ``adapt_mass_matrix``.
    adapt_mass_matrix : bool or None
        Estimate a diagonal mass matrix in Stan's warm-up windows. None (default) means: only
        when neither ``step_size`` nor ``mass_matrix`` is given.
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
    (1, 500, 2)
    """

    name = "HMC"

    def __init__(self, target, step_size=None, n_steps=10, jitter=True, mass_matrix=None,
                 adapt_mass_matrix=None, target_accept=0.8, max_energy_error=1000.0):
        if step_size is not None and not (np.isfinite(step_size) and step_size > 0):
            raise ValueError(f"step_size must be a finite positive number or None, got {step_size!r}")
        if not 0.0 < target_accept < 1.0:
            raise ValueError(f"target_accept must be in (0, 1), got {target_accept}")
        if not max_energy_error > 0:
            raise ValueError("max_energy_error must be positive")
        check_target(target)
        if getattr(target, "has_gradient", True) is False:
            raise ValueError("HMC needs the gradient of the log density: give grad_logp or "
                             "logp_and_grad to rnshmc.Target")
        self.target = target
        self.step_size = None if step_size is None else float(step_size)
        self.n_steps = _positive_int(n_steps, "n_steps")
        self.jitter = bool(jitter)
        self.mass_matrix = mass_matrix
        if adapt_mass_matrix is None:
            adapt_mass_matrix = step_size is None and mass_matrix is None
        self.adapt_mass_matrix = bool(adapt_mass_matrix)
        self.target_accept = float(target_accept)
        self.max_energy_error = float(max_energy_error)

    # ------------------------------------------------------------------------------------------

    def sample(self, draws=1000, tune=1000, chains=1, rng=None, init=None, progress=True,
               pool=None):
        """Draw samples.

        Parameters
        ----------
        draws : int
            Number of kept iterations per chain.
        tune : int
            Number of warm-up iterations per chain (adaptation, if any, then discarded).
        chains : int
            Number of independent chains.
        rng : None, int, SeedSequence or Generator
            Source of randomness; each chain gets its own child stream (SeedSequence.spawn), so
            the same seed gives bit-identical draws.
        init : None or ndarray of shape (dim,) or (chains, dim)
            Initial points. None draws each coordinate uniformly from (-2, 2), as Stan does.
        progress : bool
            Show a progress bar (needs tqdm; silent without it).
        pool : concurrent.futures.Executor, optional
            Run chains on this executor. A thread pool runs C-level targets in parallel (the C
            loop releases the GIL); a process pool needs a picklable target.

        Returns
        -------
        SampleResult
            ``samples`` (chains, draws, dim), ``log_density``, ``accepted``, ``accept_prob``,
            ``acceptance_rate``, ``diverging``, ``energy``, ``step_size``, ``n_steps``,
            ``inverse_mass_matrix``, ``n_density_evals``, ``n_gradient_evals`` (a gradient
            evaluation also evaluates the density and is counted in both; the ``_sampling``
            variants count the sampling phase only), ``timings``.
        """
        draws = _positive_int(draws, "draws")
        tune = _positive_int(tune, "tune", minimum=0)
        if tune == 0 and self.step_size is None:
            warnings.warn("tune=0 with step_size=None: sampling with the heuristic initial step "
                          "size, unadapted", stacklevel=2)
        generators = chain_generators(rng, chains)
        chains = len(generators)
        inits = self._initial_points(init, chains, generators)
        dim = inits.shape[1]
        ctarget = as_ctarget(self.target, dim)
        inverse_mass = _inverse_mass(self.mass_matrix, dim)
        tasks = [(ctarget if pool is None else ctarget.spawn(), generators[c], inits[c],
                  inverse_mass, draws, tune, progress and pool is None, c) for c in range(chains)]
        runs = map_chains(self._run_chain, tasks, pool)
        return self._combine(runs)

    def _initial_points(self, init, chains, generators):
        dim = target_dim(self.target) if hasattr(self.target, "dim") else None
        if init is None:
            if dim is None:
                raise ValueError("the target's dim is unknown: give init= (or dim to the target)")
            return np.stack([g.uniform(-2.0, 2.0, size=dim) for g in generators])
        init = np.array(init, dtype=np.float64)
        if init.ndim == 1:
            init = np.tile(init, (chains, 1))
        if init.ndim != 2 or init.shape[0] != chains or (dim is not None and init.shape[1] != dim):
            want = f"({dim},) or ({chains}, {dim})" if dim is not None else "(dim,) or (chains, dim)"
            raise ValueError(f"init must have shape {want}, got {np.shape(init)}")
        if not np.all(np.isfinite(init)):
            raise ValueError("init contains non-finite values")
        return init

    def _make_kernel(self, ctarget):
        return HMCKernel(ctarget, max_energy_error=self.max_energy_error)

    def _run_chain(self, task):
        ctarget, generator, init, inverse_mass, draws, tune, progress, chain = task
        kernel = self._make_kernel(ctarget)
        kernel.set_inverse_mass(inverse_mass)
        kernel.set_position(init)
        bar = _Progress(progress, tune + draws, f"{self.name} chain {chain}")
        timings = {}
        try:
            start = time.perf_counter()
            step_size, inverse_mass = self._tune(kernel, generator, tune, inverse_mass, bar)
            timings["tune"] = time.perf_counter() - start
            out = _Buffers(draws, kernel.dim)
            tuning_evals = kernel.n_density_evals, kernel.n_gradient_evals
            start = time.perf_counter()
            self._run_in_chunks(kernel, generator, draws, step_size, bar, out)
            timings["sampling"] = time.perf_counter() - start
        finally:
            bar.close()
        return dict(out=out, step_size=step_size, inverse_mass=inverse_mass, timings=timings,
                    n_density_evals=kernel.n_density_evals,
                    n_gradient_evals=kernel.n_gradient_evals,
                    n_density_evals_sampling=kernel.n_density_evals - tuning_evals[0],
                    n_gradient_evals_sampling=kernel.n_gradient_evals - tuning_evals[1])

    def _run_in_chunks(self, kernel, generator, n_iter, step_size, bar, out=None, n_steps=None):
        """``n_iter`` transitions in about 100 C calls (so the progress bar moves), written to
        ``out`` (a _Buffers of n_iter rows), or to one reused chunk of scratch if None."""
        chunk = max(1, n_iter // 100)
        scratch = _Buffers(chunk, kernel.dim) if out is None else None
        for first in range(0, n_iter, chunk):
            n = min(chunk, n_iter - first)
            rows = scratch.rows(0, n) if out is None else out.rows(first, first + n)
            kernel.run(generator, n, step_size, n_steps or self.n_steps, self.jitter, *rows)
            bar.update(n)

    def _tune(self, kernel, generator, tune, inverse_mass, bar, record=None):
        """Warm-up: burn-in with the given step size, or Stan's adaptation. Returns the final
        (step size, inverse mass matrix). ``record``: a _Buffers of ``tune`` rows that keeps
        every warm-up transition (a surrogate's training data), or None."""
        if self.step_size is not None and not self.adapt_mass_matrix:
            self._run_in_chunks(kernel, generator, tune, self.step_size, bar, out=record)
            return self.step_size, inverse_mass
        adapt_step = self.step_size is None
        step_size = self.step_size if not adapt_step else initial_step_size(
            kernel, generator, target_accept=self.target_accept)
        averaging = DualAveraging(step_size, self.target_accept)
        # Stan's schedule, but with a terminal buffer of a fifth of warm-up (Stan: 50
        # iterations): averaging the step size over only 50 iterations after the last restart
        # left the acceptance at 0.90-0.94 for a target of 0.8 on Gaussians (min ESS -35%).
        schedule = WarmupSchedule(tune, term_buffer=max(50, tune // 5))
        variance = RunningVariance(kernel.dim)
        out = _Buffers(1, kernel.dim) if record is None else record
        for i in range(tune):
            row = 0 if record is None else i
            kernel.run(generator, 1, step_size, self.n_steps, self.jitter, *out.rows(row, row + 1))
            if adapt_step:
                step_size = averaging.update(out.accept_prob[row])
            if self.adapt_mass_matrix and schedule.in_slow_window(i):
                variance.add(out.samples[row])
                if schedule.window_end(i):
                    inverse_mass = variance.regularized_variance()
                    kernel.set_inverse_mass(inverse_mass)
                    variance.reset()
                    if adapt_step:
                        step_size = initial_step_size(kernel, generator, step_size,
                                                      self.target_accept)
                        averaging.restart(step_size)
            bar.update(1)
        if adapt_step and tune > 0:
            step_size = averaging.final_step_size
        return step_size, inverse_mass

    def _combine(self, runs):
        stack = lambda key: np.stack([getattr(r["out"], key) for r in runs])
        counts = lambda key: np.array([r[key] for r in runs], dtype=np.int64)
        accepted = stack("accepted").astype(bool)
        timings = {}
        for r in runs:
            for phase, seconds in r["timings"].items():
                timings[phase] = timings.get(phase, 0.0) + seconds
        inverse_mass = [r["inverse_mass"] for r in runs]
        return SampleResult(
            sampler=self.name,
            samples=stack("samples"),
            log_density=stack("log_density"),
            accepted=accepted,
            accept_prob=stack("accept_prob"),
            acceptance_rate=accepted.mean(axis=1),
            diverging=stack("diverging").astype(bool),
            energy=stack("energy"),
            step_size=np.array([r["step_size"] for r in runs]),
            n_steps=stack("n_steps"),
            inverse_mass_matrix=None if inverse_mass[0] is None else np.stack(inverse_mass),
            n_density_evals=counts("n_density_evals"),
            n_gradient_evals=counts("n_gradient_evals"),
            n_density_evals_sampling=counts("n_density_evals_sampling"),
            n_gradient_evals_sampling=counts("n_gradient_evals_sampling"),
            timings=timings,
        )
