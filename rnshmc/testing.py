"""Simulation-based calibration of a sampler on a model (Talts, Betancourt, Simpson, Vehtari
and Gelman 2018; ``docs/guide/calibration.md``).

Draw parameters from the prior and data given them, sample the posterior, and record the
rank of the true parameters among near-independent posterior draws: over many replications
the ranks of an exact sampler are uniform, and any bias of the sampler (of its adaptation,
its surrogate, its fallbacks, its resumes) shows as a non-uniform rank distribution. The
statistics are :mod:`rnshmc.calibration`'s: the graphical ECDF test of Säilynoja, Bürkner and
Vehtari (2022) with its p-value, and the chi-square test of the rank histogram.

This module is public so that a user can calibrate a sampler on a model of their own: give
a :class:`rnshmc.models.calibration.CalibrationProblem` (a prior sampler, a simulator and
the model built from data).
"""
import dataclasses
import functools
import time
import warnings

import numpy as np

from .auto import sample as front_door
from .calibration import (chi_square_uniformity, ecdf_uniformity, plot_ecdf_difference,
                          rank_statistics, thin_to)
from .validation import check_integer, check_real

__all__ = ["sbc", "SBCResult"]


@dataclasses.dataclass
class SBCResult:
    """What :func:`rnshmc.testing.sbc` found.

    Attributes
    ----------
    ranks : ndarray of shape (replications, dim)
        The rank of each replication's true parameter among its ``thin`` posterior draws, in
        {0, ..., thin}.
    n_ranks : int
        ``thin + 1``, the number of possible ranks.
    names : list of str
    ecdf_p : ndarray of shape (dim,)
        Each parameter's p-value of the ECDF test (:func:`rnshmc.calibration.ecdf_uniformity`).
    chi_square_p : ndarray of shape (dim,)
        Each parameter's p-value of the rank histogram's chi-square test.
    alpha : float
        The family-wise level of :attr:`passed`: every parameter's ECDF p-value above
        ``alpha / dim`` (Bonferroni), so a calibrated sampler fails with probability at most
        ``alpha``.
    min_ess : ndarray of shape (replications,)
        Each replication's smallest bulk ESS (ranks need near-independent draws: fewer than
        ``thin`` are warned about).
    seconds : float
    """
    ranks: np.ndarray
    n_ranks: int
    names: list
    ecdf_p: np.ndarray
    chi_square_p: np.ndarray
    alpha: float
    min_ess: np.ndarray
    seconds: float

    @property
    def worst_p(self):
        """The smallest ECDF p-value over the parameters."""
        return float(self.ecdf_p.min())

    @property
    def passed(self):
        """Whether no parameter's ranks leave their bands at the family-wise level ``alpha``."""
        return bool(self.worst_p > self.alpha / len(self.ecdf_p))

    def plot(self, parameters=None, axes=None):
        """The ECDF difference plots of the parameters' ranks, with their simultaneous bands
        at the family-wise level (matplotlib; :func:`rnshmc.calibration.plot_ecdf_difference`).

        Returns
        -------
        list of matplotlib Axes
        """
        import matplotlib.pyplot as plt

        parameters = range(len(self.names)) if parameters is None else parameters
        parameters = list(parameters)
        if axes is None:
            _, axes = plt.subplots(1, len(parameters), figsize=(3 * len(parameters), 2.6),
                                   squeeze=False)
            axes = axes[0]
        level = self.alpha / len(self.names)
        return [plot_ecdf_difference(self.ranks[:, k], self.n_ranks, alpha=level, ax=ax,
                                     label=self.names[k]) for k, ax in zip(parameters, axes)]


def sbc(problem, sampler=None, *, run=None, replications=100, draws=400, chains=4, tune=None,
        thin=99, rng=0, alpha=0.01, pool=None, **options):
    """Simulation-based calibration of ``sampler`` on ``problem``.

    For each replication: parameters from the prior, data given them, the posterior sampled
    (``chains`` chains of ``draws`` after ``tune``), its draws thinned evenly to ``thin``
    (:func:`rnshmc.calibration.thin_to`), and the rank of the true parameters among them.

    Parameters
    ----------
    problem : rnshmc.models.calibration.CalibrationProblem
    sampler : callable or None
        ``sampler(target)``: a sampler (``rnshmc.HMC(target)``, ...), whose ``sample`` is
        called with ``draws``, ``tune``, ``chains``, ``rng`` and ``options`` (its chains one
        after another); None: :func:`rnshmc.sample` (the front door) to an ESS of
        ``2 * thin``.
    run : callable, optional
        Instead of ``sampler``: ``run(target, rng)`` returns the result (a
        :class:`~rnshmc.SampleResult`) of any way of sampling, e.g. a run stopped and resumed
        from a checkpoint, or a warm start from an earlier run; ``rng`` is the replication's
        ``numpy.random.SeedSequence``.
    replications : int
        How many posteriors (default 100).
    draws, chains, tune :
        ``sample()``'s (default 400 draws, 4 chains, the sampler's tune).
    thin : int
        Posterior draws per replication the ranks are taken among (default 99: ranks in
        {0, ..., 99}). Ranks need near-independent draws: a replication whose min bulk ESS is
        below ``thin`` is counted and warned about.
    rng : int or numpy.random.SeedSequence
        The seed: replication i draws from the i-th child of ``SeedSequence(rng)``.
    alpha : float
        The family-wise level of :attr:`SBCResult.passed` (default 0.01).
    pool : executor or None
        Where the replications run (a ``concurrent.futures`` executor: threads, or processes
        where the problem and sampler pickle); None: one after another. A replication's
        draws depend on its seed alone, so the ranks are the same either way.
    **options
        More keyword arguments of ``sample()``.

    Returns
    -------
    SBCResult
    """
    replications = check_integer(replications, "replications", minimum=10)
    thin = check_integer(thin, "thin", minimum=1)
    alpha = check_real(alpha, "alpha", lower=0.0, upper=1.0)
    if run is not None and sampler is not None:
        raise ValueError("give sampler or run, not both")
    if run is None:
        run = functools.partial(_sample, sampler, dict(options, draws=draws, tune=tune,
                                                        chains=chains), thin)
    replicate = functools.partial(_replicate, problem, run, thin)
    seeds = np.random.SeedSequence(rng).spawn(replications)
    started = time.perf_counter()
    with warnings.catch_warnings():
        # (the replications' own warnings: the calibration is the verdict)
        warnings.simplefilter("ignore")
        done = list(map(replicate, seeds) if pool is None else pool.map(replicate, seeds))
    ranks = np.array([rank for rank, _ in done], dtype=np.int64)
    min_ess = np.array([ess for _, ess in done])
    short = int(np.sum(~(min_ess >= thin)))
    if short:
        warnings.warn(f"SBC on {problem.name}: {short} of {replications} replications had a "
                      f"min bulk ESS under thin ({thin}); their thinned draws are correlated, "
                      "which makes ranks non-uniform even for an exact sampler. Draw more "
                      "(draws) or thin to fewer.", RuntimeWarning, stacklevel=2)
    n_ranks = thin + 1
    tests = [ecdf_uniformity(ranks[:, k], n_ranks) for k in range(problem.dim)]
    chi_square = [chi_square_uniformity(ranks[:, k], n_ranks)[1] for k in range(problem.dim)]
    names = list(problem.names) if problem.names is not None else [
        f"x{k}" for k in range(problem.dim)]
    return SBCResult(ranks=ranks, n_ranks=n_ranks, names=names,
                     ecdf_p=np.array([t["p_value"] for t in tests]),
                     chi_square_p=np.array(chi_square), alpha=alpha, min_ess=min_ess,
                     seconds=time.perf_counter() - started)


def _sample(sampler, settings, thin, target, seed):
    """One replication's posterior draws by ``sampler`` (None: the front door)."""
    if sampler is None:
        return front_door(target, ess=2 * thin, chains=settings["chains"], rng=seed,
                          progress=False, pool=None)
    options = dict(settings)
    draws = options.pop("draws")
    return sampler(target).sample(draws, rng=seed, progress=False, pool=None, **options)


def _replicate(problem, run, thin, seed):
    """One replication: (the ranks of the prior draw among ``thin`` posterior draws, the
    run's min bulk ESS)."""
    data_seed, sampler_seed, rank_seed = seed.spawn(3)
    generator = np.random.default_rng(data_seed)
    truth = np.asarray(problem.prior(generator), dtype=np.float64)
    result = run(problem.model(problem.simulate(truth, generator)), sampler_seed)
    samples = result.samples
    if samples.shape[0] * samples.shape[1] < thin:
        raise ValueError(f"a replication drew {samples.shape[0]} x {samples.shape[1]} draws, "
                         f"fewer than thin ({thin})")
    ranks = rank_statistics(truth, thin_to(samples, thin), np.random.default_rng(rank_seed))
    return ranks, float(result.health["ess_bulk_min"])
