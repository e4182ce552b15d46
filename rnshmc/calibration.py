"""Simulation-based calibration (SBC): rank statistics and tests of their uniformity.

SBC [1]_ checks a sampler against its own model: draw ``theta ~ prior``, data ``y ~ p(y |
theta)``, run the sampler on ``y``, thin its output to ``L`` near-independent draws
(:func:`thin_to`), and record the rank of ``theta`` among them (:func:`rank_statistics`). If
the sampler draws from the exact posterior, each rank is uniform on ``{0, ..., L}``; a
histogram or ECDF of the ranks of many replications that is not uniform points at a bias
(a shift), or at a posterior too wide or too narrow.

Two tests of uniformity are here, for ranks on ``{0, ..., n_ranks - 1}`` (``n_ranks = L +
1``):

* :func:`chi_square_uniformity`, Pearson's test on a binned rank histogram;
* :func:`ecdf_uniformity`, the graphical test of Säilynoja, Bürkner and Vehtari [2]_: the
  ECDF of the ranks must stay inside simultaneous ``1 - alpha`` bands (:func:`ecdf_bands`)
  at every evaluation point, with :func:`plot_ecdf_difference` for the picture.

This module is at the package's lowest floor: numpy, scipy and ``rnshmc.validation``
(matplotlib inside the plot function).

References
----------
.. [1] S. Talts, M. Betancourt, D. Simpson, A. Vehtari, A. Gelman (2018). Validating Bayesian
   inference algorithms with simulation-based calibration. arXiv:1804.06788.
.. [2] T. Säilynoja, P.-C. Bürkner, A. Vehtari (2022). Graphical test for discrete uniformity
   and its applications in goodness-of-fit evaluation and multiple sample comparison.
   *Statistics and Computing* 32, 32. arXiv:2103.10522.
"""
import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy import special, stats

from .validation import check_integer, check_real, numeric_array

__all__ = [
    "rank_statistics",
    "thin_to",
    "chi_square_uniformity",
    "ecdf_bands",
    "ECDFBands",
    "ecdf_uniformity",
    "plot_ecdf_difference",
]

# Pearson's rule of thumb for the chi-square approximation: an expected count of 5 per bin
_MIN_EXPECTED = 5


# ---------------------------------------------------------------------------
# input handling
# ---------------------------------------------------------------------------


def _finite(x, name, ndims):
    """``x`` as a float array with ``ndim`` in ``ndims``, non-empty and finite."""
    arr = numeric_array(x, name)
    if arr.ndim not in ndims:
        raise ValueError(f"{name} must be a {' or '.join(map(str, ndims))}-d array; got shape "
                         f"{arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty (shape {arr.shape})")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains non-finite values (nan or inf)")
    return arr


def _ranks(ranks, n_ranks):
    """Validated ranks as an int array, with ``n_ranks`` as an int."""
    n_ranks = check_integer(n_ranks, "n_ranks", 2)
    arr = _finite(ranks, "ranks", (1,))
    if np.any(arr != np.round(arr)):
        raise ValueError("ranks must be whole numbers")
    if arr.min() < 0 or arr.max() > n_ranks - 1:
        raise ValueError(f"ranks must lie in {{0, ..., {n_ranks - 1}}} (n_ranks = {n_ranks}); "
                         f"got values in [{arr.min():g}, {arr.max():g}]")
    if arr.size < 2:
        raise ValueError(f"need at least 2 replications (ranks), got {arr.size}")
    return arr.astype(np.int64), n_ranks


# ---------------------------------------------------------------------------
# ranks and thinning
# ---------------------------------------------------------------------------


def rank_statistics(truth, draws, rng):
    """The SBC rank of each true parameter among the posterior draws (Talts et al. 2018).

    Parameters
    ----------
    truth : array_like, shape (n_params,)
        The parameters the data were simulated from (one prior draw).
    draws : array_like, shape (L, n_params)
        ``L >= 1`` posterior draws given those data, already thinned to be near-independent
        (:func:`thin_to`); ``L`` must be the same in every replication.
    rng : numpy.random.Generator
        Breaks ties. It is consumed once per call whether or not there are ties, so a
        replication's stream does not depend on its data.

    Returns
    -------
    ranks : ndarray of int64, shape (n_params,)
        In ``{0, ..., L}``: the number of draws below the truth, plus, for ``t`` draws equal
        to it, an integer uniform on ``{0, ..., t}``. Randomising ties keeps the ranks uniform
        for discrete parameters or draws rounded to a grid, where counting ``<`` alone would
        pile them at low values.

    Raises
    ------
    ValueError
        On wrong shapes (``truth`` not 1-d, ``draws`` not ``(L, n_params)``), no draws, or
        non-finite values.
    TypeError
        If ``rng`` is not a ``numpy.random.Generator``.
    """
    truth = _finite(truth, "truth", (1,))
    draws = _finite(draws, "draws", (2,))
    if draws.shape[1] != truth.shape[0]:
        raise ValueError(f"draws must have shape (L, n_params) = (L, {truth.shape[0]}) to "
                         f"match truth; got {draws.shape}")
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    below = np.count_nonzero(draws < truth, axis=0)
    ties = np.count_nonzero(draws == truth, axis=0)
    return (below + rng.integers(0, ties + 1)).astype(np.int64)


def thin_to(draws, n):
    """Exactly ``n`` draws, evenly spaced within each chain, to rank a truth against.

    SBC needs (near-)independent draws: autocorrelated ones make the rank histogram
    non-uniform (a bump in the middle) even for a correct sampler. The caller chooses ``n``
    from the effective sample size, e.g. ``n <= min ESS`` over the parameters (bulk and tail),
    as Talts et al. (2018) recommend; ``n`` must also be the same in every replication, as the
    ranks' range ``{0, ..., n}`` is.

    Parameters
    ----------
    draws : array_like, shape (n_draws, n_params) or (chains, n_draws, n_params)
    n : int
        How many draws to keep, ``1 <= n <= chains * n_draws``.

    Returns
    -------
    thinned : ndarray, shape (n, n_params)
        Chain ``c`` gives ``n // chains`` draws, one more for the first ``n % chains`` chains,
        each the middle draw of one of that many equal blocks of the chain (spacing about
        ``n_draws * chains / n``); the chains are concatenated in order.

    Raises
    ------
    ValueError
        On a wrong shape, non-finite values, or ``n`` out of range.
    """
    x = _finite(draws, "draws", (2, 3))
    if x.ndim == 2:
        x = x[None]
    chains, n_draws, _ = x.shape
    n = check_integer(n, "n", 1)
    if n > chains * n_draws:
        raise ValueError(f"cannot keep n = {n} draws out of {chains} chain(s) of {n_draws}")
    parts = []
    for c in range(chains):
        m = n // chains + (c < n % chains)
        if m:
            # the middles of m equal blocks: even spacing, and symmetric in the chain
            parts.append(x[c, ((2 * np.arange(m) + 1) * n_draws) // (2 * m)])
    return np.concatenate(parts, axis=0)


# ---------------------------------------------------------------------------
# chi-square test
# ---------------------------------------------------------------------------


def _default_bins(n_replications, n_ranks):
    """The most bins (at most ``n_ranks``) whose smallest expected count is at least 5."""
    for bins in range(min(n_ranks, n_replications // _MIN_EXPECTED), 1, -1):
        if n_replications * (n_ranks // bins) >= _MIN_EXPECTED * n_ranks:
            return bins
    raise ValueError(
        f"too few replications ({n_replications}) for a chi-square test with an expected "
        f"count of at least {_MIN_EXPECTED} in each of 2 or more bins of {n_ranks} ranks")


def chi_square_uniformity(ranks, n_ranks, bins=None):
    """Pearson's chi-square test that ranks are uniform on ``{0, ..., n_ranks - 1}``.

    The rank histogram test of Talts et al. (2018), with its bins merged so that the
    chi-square approximation holds.

    Parameters
    ----------
    ranks : array_like of int, shape (n_replications,)
        One rank per SBC replication, in ``{0, ..., n_ranks - 1}``.
    n_ranks : int
        The number of possible ranks, ``L + 1`` for ``L`` posterior draws.
    bins : int, optional
        ``2 <= bins <= n_ranks``. Rank ``r`` goes to bin ``floor(r * bins / n_ranks)``, so the
        bins hold ``floor`` or ``ceil`` of ``n_ranks / bins`` consecutive ranks (as even as the
        range allows) and a bin's expected count is ``n_replications * width / n_ranks``
        exactly. The default is the largest ``bins <= n_ranks`` for which every expected count
        is at least 5 (Pearson's rule of thumb): ``n_replications * floor(n_ranks / bins) >=
        5 * n_ranks``; e.g. 33 bins for 200 replications of 100 ranks.

    Returns
    -------
    statistic : float
        ``sum((observed - expected)**2 / expected)`` over the bins.
    p_value : float
        ``scipy.stats.chi2.sf(statistic, bins - 1)``: approximate (the exact null distribution
        is discrete), accurate when every expected count is at least 5.

    Raises
    ------
    ValueError
        On invalid ranks, ``bins`` out of range, or (default bins) too few replications for
        two bins with an expected count of 5.
    """
    ranks, n_ranks = _ranks(ranks, n_ranks)
    n = ranks.size
    if bins is None:
        bins = _default_bins(n, n_ranks)
    else:
        bins = check_integer(bins, "bins", 2)
        if bins > n_ranks:
            raise ValueError(f"bins must be at most n_ranks = {n_ranks}, got {bins}")
    observed = np.bincount((ranks * bins) // n_ranks, minlength=bins)
    widths = np.bincount((np.arange(n_ranks) * bins) // n_ranks, minlength=bins)
    expected = n * widths / n_ranks
    statistic = float(np.sum((observed - expected) ** 2 / expected))
    return statistic, float(stats.chi2.sf(statistic, bins - 1))


# ---------------------------------------------------------------------------
# simultaneous ECDF bands (Säilynoja, Bürkner and Vehtari 2022)
# ---------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class ECDFBands:
    """Simultaneous confidence bands for the ECDF of uniform ranks
    (:func:`rnshmc.calibration.ecdf_bands`).

    Attributes
    ----------
    z : ndarray, shape (K,)
        The evaluation points ``thresholds / n_ranks``, increasing, the last one 1.
    thresholds : ndarray of int, shape (K,)
        The ECDF at ``z[k]`` is the fraction of ranks below ``thresholds[k]``.
    lower, upper : ndarray, shape (K,)
        The band as ECDF values (fractions in [0, 1]): ``lower_count / n_replications``.
    lower_count, upper_count : ndarray of int, shape (K,)
        The band as counts of ranks below ``thresholds[k]``, both ends included.
    gamma : float
        The adjusted point-wise level: ``[lower_count[k], upper_count[k]]`` is the point-wise
        binomial interval of level ``gamma``, the counts ``x`` with both tails ``P(X <= x)``
        and ``P(X >= x)`` of ``X ~ Binomial(n_replications, z[k])`` at least ``gamma / 2``.
    coverage : float
        The exact probability that the ECDF of uniform ranks stays in the band at every
        point: at least ``1 - alpha``, and above it only by the discreteness of the counts.
    alpha, n_replications, n_ranks
        The arguments.
    """

    z: np.ndarray
    thresholds: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    lower_count: np.ndarray
    upper_count: np.ndarray
    gamma: float
    coverage: float
    alpha: float
    n_replications: int
    n_ranks: int


class _Grid:
    """The evaluation points of the ECDF of ``n`` ranks on ``{0..n_ranks-1}`` and the binomial
    tail probabilities of every count there."""

    def __init__(self, n, n_ranks):
        self.n = n
        k = min(n_ranks, n)
        # thresholds on the rank grid, as evenly spaced as it allows: the ECDF of discrete
        # ranks there has exactly the law of a continuous uniform sample's at z (increments
        # multinomial), so the recursion below is exact for ranks too
        self.thresholds = (np.arange(1, k + 1) * n_ranks) // k
        self.z = self.thresholds / n_ranks
        x = np.arange(n + 1)
        # P(X >= x) for X ~ Binomial(n, z) is P(Y <= n - x) for Y ~ Binomial(n, 1 - z).
        # Computed so, with 1 - z as (n_ranks - threshold) / n_ranks, the counts x at z and
        # n - x at 1 - z get bit-identical tail probabilities: exact ties stay ties, where
        # rounding would otherwise split them (a band asymmetric by an ulp, a p-value missing
        # the tied half). The running maxima keep the CDFs monotone despite rounding, so that
        # {x : tail >= level} is an interval.
        def cdf(z):
            return np.maximum.accumulate(stats.binom.cdf(x, n, z[:, None]), axis=1)
        upper_tail = cdf((n_ranks - self.thresholds) / n_ranks)[:, ::-1]
        # tail[k, x]: the smaller one-sided tail probability of count x at z[k]; the
        # point-wise interval of level gamma is {x : tail >= gamma / 2}
        self.tail = np.minimum(cdf(self.z), upper_tail)
        self.log_factorial = special.gammaln(x + 1.0)

    def band(self, level, strict=False):
        """Count bounds ``{x : tail > level}`` (``>=`` unless strict) at each point; an empty
        interval has ``lower > upper``."""
        inside = self.tail > level if strict else self.tail >= level
        lower = np.argmax(inside, axis=1)
        upper = self.n - np.argmax(inside[:, ::-1], axis=1)
        empty = ~inside.any(axis=1)
        lower[empty], upper[empty] = 1, 0
        return lower, upper

    def coverage(self, lower, upper):
        """P(lower[k] <= X(z[k]) <= upper[k] for all k), X the ECDF counts of uniform ranks.

        The recursion of Säilynoja et al. (2022): given the count ``x'`` at the
        previous point ``z'``, the other ``n - x'`` values are uniform above ``z'``, so the
        count at ``z`` is ``x' + Binomial(n - x', (z - z') / (1 - z'))``; carry the
        probability of each in-band count from point to point.
        """
        n, lf = self.n, self.log_factorial
        x_prev, p = np.zeros(1, dtype=np.int64), np.ones(1)
        z_prev = 0.0
        for z, lo, hi in zip(self.z, lower, upper):
            if lo > hi:
                return 0.0
            if z >= 1.0:  # every value is below 1: the count there is n, always inside
                break
            x = np.arange(lo, hi + 1)
            step = x[:, None] - x_prev[None, :]
            left = n - x_prev[None, :]
            q = (z - z_prev) / (1.0 - z_prev)
            safe = np.maximum(step, 0)
            log_pmf = (lf[left] - lf[safe] - lf[left - safe]
                       + safe * math.log(q) + (left - safe) * math.log1p(-q))
            p = np.where(step >= 0, np.exp(log_pmf), 0.0) @ p
            x_prev, z_prev = x, z
        return float(p.sum())


@functools.lru_cache(maxsize=32)
def _grid(n, n_ranks):
    return _Grid(n, n_ranks)


@functools.lru_cache(maxsize=64)
def _bands(n, n_ranks, alpha):
    grid = _grid(n, n_ranks)
    target = 1.0 - alpha
    # The band, hence the coverage, changes with the level only where the level crosses a
    # tail probability of the table: bisect over those (and 0, the full band of coverage 1)
    # for the largest level whose band still covers 1 - alpha. Exact, and about
    # log2(K * n) coverage evaluations. All levels, not only those below alpha / 2 as
    # bayesplot searches: with very few replications the point-wise alpha intervals can already cover
    # 1 - alpha simultaneously, and then the next level is what makes `inside` exactly
    # `p_value > alpha`.
    levels = np.unique(np.concatenate([[0.0], grid.tail.ravel()]))
    # Bonferroni's level alpha / (2 K) covers 1 - alpha for sure (each point's two tails
    # below it have probability <= alpha / K): start there, sparing the recursion the wide
    # bands of the many tiny levels
    good = int(np.searchsorted(levels, alpha / (2 * grid.z.size), side="right")) - 1
    bad = len(levels)  # coverage(levels[good]) >= target; levels[bad:] fall short
    while bad - good > 1:
        mid = (good + bad) // 2
        if grid.coverage(*grid.band(levels[mid])) >= target:
            good = mid
        else:
            bad = mid
    lower, upper = grid.band(levels[good])
    arrays = dict(z=grid.z, thresholds=grid.thresholds, lower=lower / n, upper=upper / n,
                  lower_count=lower, upper_count=upper)
    for value in arrays.values():
        value.setflags(write=False)  # shared by the cache
    return ECDFBands(**arrays, gamma=2.0 * float(levels[good]),
                     coverage=grid.coverage(lower, upper), alpha=alpha, n_replications=n,
                     n_ranks=n_ranks)


def ecdf_bands(n_replications, n_ranks, alpha=0.05):
    """Simultaneous ``1 - alpha`` bands for the ECDF of uniform ranks (Säilynoja et al. 2022).

    Under uniformity the ECDF count at each evaluation point is binomial; point-wise
    intervals of level ``alpha`` would be crossed somewhere far more often than ``alpha``.
    The method widens them to the point-wise level ``gamma`` at which the ECDF of
    ``n_replications`` uniform ranks stays inside *all* of them with probability ``1 -
    alpha``.

    ``gamma`` is found by the paper's "optimization" method, not by simulation: the
    probability of staying inside the band is computed exactly by the paper's recursion over
    the evaluation points (as bayesplot's ``adjust_gamma_optimize`` does), and the level is
    chosen by bisection over the finitely many values where the band changes. Since the
    counts are discrete, the coverage cannot be exactly ``1 - alpha`` in general: this
    returns the narrowest band whose coverage is at least ``1 - alpha`` (bayesplot instead
    minimises ``|coverage - (1 - alpha)|``, which may fall slightly short); the exact
    coverage is returned too. No randomness is involved.

    Parameters
    ----------
    n_replications : int
        The number of ranks (SBC replications), at least 2.
    n_ranks : int
        The number of possible rank values, ``L + 1`` for ``L`` posterior draws, at least 2.
    alpha : float
        One minus the simultaneous coverage, in (0, 1) (bayesplot's ``prob`` is ``1 - alpha``).

    Returns
    -------
    ECDFBands
        ``z``, ``lower``, ``upper`` (ECDF values, fractions), ``lower_count``,
        ``upper_count`` (counts), ``gamma``, ``coverage``. There are ``K = min(n_ranks,
        n_replications)`` evaluation points, as in bayesplot and the SBC package: ``z =
        thresholds / n_ranks`` with ``thresholds = floor(k * n_ranks / K)``, ``k = 1..K``,
        i.e. ``z_i = (i + 1) / n_ranks`` for every rank when ``n_ranks <= n_replications``;
        the ECDF at ``z`` is the fraction of ranks below ``thresholds``. Thresholds on the
        rank grid make the discrete ECDF's law the continuous one's, so the coverage is exact
        for ranks.

    Notes
    -----
    Cost: a table of ``K * (n_replications + 1)`` binomial tail probabilities (8 bytes
    each), and about ``log2(K * n_replications)`` recursions of ``O(sum_k width_k**2)``
    operations, bisecting from Bonferroni's level ``alpha / K`` (which surely covers): some
    0.02 s at ``K = n_replications = 100`` and 1.3 s at 1000.
    Results are cached per ``(n_replications, n_ranks, alpha)``, and their arrays are
    read-only.
    """
    n = check_integer(n_replications, "n_replications", 2)
    n_ranks = check_integer(n_ranks, "n_ranks", 2)
    return _bands(n, n_ranks, check_real(alpha, "alpha", lower=0.0, upper=1.0))


def ecdf_uniformity(ranks, n_ranks, alpha=0.05):
    """The graphical uniformity test of Säilynoja et al. (2022) on SBC ranks.

    Parameters
    ----------
    ranks : array_like of int, shape (n_replications,)
        One rank per SBC replication, in ``{0, ..., n_ranks - 1}``.
    n_ranks : int
        The number of possible ranks, ``L + 1`` for ``L`` posterior draws.
    alpha : float
        One minus the simultaneous coverage of the bands.

    Returns
    -------
    dict
        ``inside`` : bool
            The ECDF is within the simultaneous ``1 - alpha`` bands at every evaluation
            point: ``False`` rejects uniformity at level ``alpha`` (the false-alarm rate is
            ``1 - bands.coverage <= alpha``).
        ``p_value`` : float
            The smallest ``alpha`` at which the ECDF leaves the bands: ``inside`` is exactly
            ``p_value > alpha``. It is the exact null probability ``P(T <= t)`` of the
            statistic ``T``, the smallest one-sided binomial tail probability of the ECDF
            counts over the evaluation points (computed by the bands' recursion, no
            simulation), so ``P(p_value <= a) <= a`` for every ``a``. For a family of ``m``
            parameters tested at once, reject any whose ``p_value <= alpha / m``
            (Bonferroni; equivalently, test each with ``ecdf_uniformity(..., alpha / m)``).
        ``min_tail`` : float
            ``2 T``: the point-wise level (the paper's ``gamma`` scale) at which the ECDF
            first leaves a point-wise interval; ``inside`` is ``min_tail >= bands.gamma``.
        ``max_abs_difference`` : float
            ``max |ECDF - uniform CDF|`` over all ``n_ranks`` rank thresholds ``i /
            n_ranks``, ``i = 1..n_ranks``.
        ``z``, ``ecdf`` : ndarray, shape (K,)
            The evaluation points and the ECDF there (fraction of ranks below
            ``bands.thresholds``).
        ``bands`` : ECDFBands
            From :func:`rnshmc.calibration.ecdf_bands`.
    """
    ranks, n_ranks = _ranks(ranks, n_ranks)
    n = ranks.size
    bands = _bands(n, n_ranks, check_real(alpha, "alpha", lower=0.0, upper=1.0))
    grid = _grid(n, n_ranks)
    below = np.cumsum(np.bincount(ranks, minlength=n_ranks))  # below[i] = #(ranks <= i)
    counts = below[bands.thresholds - 1]
    t = float(grid.tail[np.arange(counts.size), counts].min())
    # P(T <= t) = 1 - P(every count's tail > t): the coverage of the strict band at t
    p_value = 1.0 - grid.coverage(*grid.band(t, strict=True))
    inside = bool(np.all((bands.lower_count <= counts) & (counts <= bands.upper_count)))
    uniform = np.arange(1, n_ranks + 1) / n_ranks
    return dict(inside=inside, p_value=min(max(p_value, 0.0), 1.0), min_tail=2.0 * t,
                max_abs_difference=float(np.max(np.abs(below / n - uniform))),
                z=bands.z, ecdf=counts / n, bands=bands)


def plot_ecdf_difference(ranks, n_ranks, alpha=0.05, ax=None, label=None):
    """The ECDF difference plot of Säilynoja et al. (2022): ECDF of the ranks minus the uniform
    CDF, over the simultaneous ``1 - alpha`` band (shaded).

    Parameters
    ----------
    ranks, n_ranks, alpha
        As for :func:`ecdf_uniformity`.
    ax : matplotlib.axes.Axes, optional
        Where to draw; a new figure's axes by default.
    label : str, optional
        The legend label of the ECDF line.

    Returns
    -------
    matplotlib.axes.Axes

    Raises
    ------
    ImportError
        If matplotlib is not installed.
    """
    try:
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise ImportError("plot_ecdf_difference needs matplotlib: pip install matplotlib") \
            from err
    result = ecdf_uniformity(ranks, n_ranks, alpha)
    bands = result["bands"]
    if ax is None:
        _, ax = plt.subplots()
    # the ECDF starts at 0 at z = 0; draw it and the band as steps between evaluation points
    z = np.concatenate([[0.0], bands.z])
    ax.fill_between(z, np.concatenate([[0.0], bands.lower - bands.z]),
                    np.concatenate([[0.0], bands.upper - bands.z]), step="post",
                    color="0.85", label=f"{1 - bands.alpha:.0%} simultaneous band")
    ax.step(z, np.concatenate([[0.0], result["ecdf"] - bands.z]), where="post",
            color="C0" if result["inside"] else "C3", label=label)
    ax.axhline(0.0, color="0.5", linewidth=0.8)
    ax.set_xlim(0.0, 1.0)
    ax.set_xlabel("normalised rank")
    ax.set_ylabel("ECDF difference")
    return ax
