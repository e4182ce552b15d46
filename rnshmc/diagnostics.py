"""Convergence and efficiency diagnostics for MCMC output.

Shape convention used by every function here:

* ``(draws,)`` or ``(draws, dim)`` is **one** chain;
* ``(chains, draws, dim)`` is several chains.

Per-coordinate results have shape ``(dim,)``; for a 1-d input they are a
Python ``float``.  Every diagnostic needs at least 4 draws per chain and
finite values, otherwise a :class:`ValueError` naming the problem is raised.

The ESS of one chain is Geyer's, truncated by the initial monotone sequence [1]_; R-hat and the
bulk and tail ESS are the rank-normalised ones of Vehtari et al. [2]_.

References
----------
.. [1] C. J. Geyer (1992). Practical Markov chain Monte Carlo.
   *Statistical Science* 7(4), 473-483.
.. [2] A. Vehtari, A. Gelman, D. Simpson, B. Carpenter, P.-C. Bürkner
   (2021). Rank-normalization, folding, and localization: an improved
   R-hat for assessing convergence of MCMC. *Bayesian Analysis* 16(2).
"""

import numpy as np
from scipy.special import ndtri
from scipy.stats import rankdata

from .validation import numeric_array

__all__ = [
    "autocorrelation",
    "ess",
    "ess_bulk",
    "ess_tail",
    "rhat_and_ess_bulk",
    "rhat",
    "health",
    "SamplingWarning",
    "relative_error_of_mean",
    "mcse_mean",
    "e_bfmi",
    "summary",
    "Summary",
]

_MIN_DRAWS = 4
# the bulk and tail ESS a usable answer needs at least, per chain (Vehtari et al. 2021): the
# one floor of `health`, a result's `converged` and the stopping rule's check
ESS_PER_CHAIN = 100.0


# ---------------------------------------------------------------------------
# input handling
# ---------------------------------------------------------------------------


def _as_chains(x, name="x", multi=True):
    """Validate ``x`` and return it as ``(chains, draws, dim)`` plus a flag
    telling whether the input was 1-d (so results are returned as scalars)."""
    arr = numeric_array(x, name)
    allowed = (1, 2, 3) if multi else (1, 2)
    if arr.ndim not in allowed:
        shapes = "(draws,), (draws, dim)" + (
            " or (chains, draws, dim)" if multi else "")
        raise ValueError(
            f"{name} must have shape {shapes}; got a {arr.ndim}-d array "
            f"with shape {arr.shape}")
    scalar = arr.ndim == 1
    if arr.ndim == 1:
        arr = arr[None, :, None]
    elif arr.ndim == 2:
        arr = arr[None]
    chains, draws, dim = arr.shape
    if chains < 1:
        raise ValueError(f"{name} must contain at least one chain")
    if dim < 1:
        raise ValueError(f"{name} must have at least one coordinate")
    if draws < _MIN_DRAWS:
        raise ValueError(
            f"{name} needs at least {_MIN_DRAWS} draws per chain, got {draws}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains non-finite values (nan or inf)")
    return arr, scalar


def _out(values, scalar):
    """Return a per-coordinate result as a float for 1-d inputs."""
    return float(values[0]) if scalar else values


def _autocov(x):
    """Biased autocovariance along axis -2 of ``(..., draws, dim)``.

    Zero-padding to a power of two >= 2n makes the circular FFT correlation
    equal to the linear one (no wrap-around) and keeps the FFT fast.
    """
    n = x.shape[-2]
    xc = x - x.mean(axis=-2, keepdims=True)
    nfft = 1 << int(np.ceil(np.log2(2 * n)))
    f = np.fft.rfft(xc, n=nfft, axis=-2)
    return np.fft.irfft(f * np.conj(f), n=nfft, axis=-2)[..., :n, :] / n


# ---------------------------------------------------------------------------
# autocorrelation and effective sample size
# ---------------------------------------------------------------------------


def autocorrelation(x):
    """Biased autocorrelation of one chain, per coordinate, via FFT.

    Parameters
    ----------
    x : array_like, shape (draws,) or (draws, dim)
        One chain.

    Returns
    -------
    rho : ndarray, same shape as `x`
        ``rho[k] = c_k / c_0`` with ``c_k = sum_{t<n-k} (x_t - xbar)
        (x_{t+k} - xbar) / n`` (the biased autocovariance, divided by `n`
        at every lag).  ``rho[0] == 1``.  A constant coordinate gives
        ``nan`` throughout.

    Raises
    ------
    ValueError
        If `x` is not 1-d or 2-d, has fewer than 4 draws or non-finite values.
    """
    arr, scalar = _as_chains(x, multi=False)
    acov = _autocov(arr[0])
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = acov / acov[0]
    rho[:, np.ptp(arr[0], axis=0) == 0] = np.nan
    return rho[:, 0] if scalar else rho


def _geyer_tau(rho, cap):
    """Integrated autocorrelation time from ``rho`` of shape (n, dim) using
    Geyer's initial positive, monotone sequence estimator."""
    k = rho.shape[0] // 2
    pairs = rho[0:2 * k:2] + rho[1:2 * k:2]          # Gamma_k
    # keep pair sums up to (excluding) the first non-positive one
    keep = np.cumprod(pairs > 0, axis=0).astype(bool)
    # monotone: each pair sum is replaced by the minimum of itself and all
    # earlier ones (running min of positive values stays positive)
    mono = np.minimum.accumulate(pairs, axis=0)
    tau = -1.0 + 2.0 * np.where(keep, mono, 0.0).sum(axis=0)
    return np.maximum(tau, 1.0) if cap else tau


def ess(x, method="geyer", cap=True):
    """Effective sample size per coordinate.

    Parameters
    ----------
    x : array_like, shape (draws,), (draws, dim) or (chains, draws, dim)
        One chain (1-d or 2-d input) or several chains (3-d input).
    method : {"geyer"}
        Truncation rule; only Geyer's initial monotone sequence is supported.
    cap : bool, default True
        If True, the integrated autocorrelation time ``tau`` is floored at 1,
        so ``ESS <= total number of draws`` (as reported in the papers'
        tables).  If False there is no floor and antithetic chains may give
        an ESS larger than the number of draws.

    Returns
    -------
    ess : float or ndarray of shape (dim,)
        ``ESS = N / tau`` with ``N`` the total number of draws.  A constant
        coordinate gives ``nan``.  With ``cap=False`` a non-positive
        estimate of ``tau`` (only possible for strongly alternating chains)
        gives ``inf``.

    Raises
    ------
    ValueError
        On bad shape, fewer than 4 draws, non-finite values or an unknown
        `method`.

    Notes
    -----
    **One chain** of length ``n`` (Geyer 1992): with ``rho_t`` the biased
    autocorrelation (see :func:`autocorrelation`),

    * ``Gamma_k = rho_{2k} + rho_{2k+1}``, ``k = 0, 1, ..., n//2 - 1``;
    * the pair sums are summed while positive (stop at the first
      non-positive one), each replaced by the minimum of itself and all
      earlier ones (initial monotone sequence);
    * ``tau = -1 + 2 * sum_k Gamma_k`` and ``ESS = n / tau``.

    **Several chains** (``M`` chains of ``n`` draws) are pooled as in
    Vehtari et al. (2021) / Stan: with ``acov_m(t)`` the biased
    autocovariance of chain ``m``, ``s_m^2 = n/(n-1) acov_m(0)`` and
    ``rho_{t,m} = acov_m(t) / acov_m(0)``,

    * ``W = mean_m s_m^2``;
    * ``var_plus = (n-1)/n W + B/n`` with ``B/n`` the variance (ddof=1) of
      the chain means (taken as 0 when ``M = 1``);
    * ``rho_t = 1 - (W - mean_m(s_m^2 rho_{t,m})) / var_plus``;

    then the same truncated, monotone pair-sum rule gives ``tau`` and
    ``ESS = M n / tau``.  Chains that disagree on the mean inflate
    ``var_plus`` and hence ``rho_t``, lowering the ESS.
    """
    if method != "geyer":
        raise ValueError(f"unknown ESS method {method!r}; only 'geyer'")
    arr, scalar = _as_chains(x)
    m, n, _ = arr.shape
    if np.ndim(x) < 3:
        rho = autocorrelation(arr[0])
    else:
        acov = _autocov(arr)                          # (M, n, dim)
        w = acov[:, 0].mean(axis=0) * n / (n - 1)
        b_over_n = arr.mean(axis=1).var(axis=0, ddof=1) if m > 1 else 0.0
        var_plus = (n - 1) / n * w + b_over_n
        # s_m^2 rho_{t,m} == n/(n-1) acov_m(t); this form avoids 0/0 for
        # chains that are constant on their own
        with np.errstate(invalid="ignore", divide="ignore"):
            rho = 1.0 - (w - acov.mean(axis=0) * n / (n - 1)) / var_plus
    tau = _geyer_tau(rho, cap)
    with np.errstate(divide="ignore"):
        out = np.where(tau > 0, m * n / np.where(tau > 0, tau, 1.0), np.inf)
    out[np.ptp(arr, axis=(0, 1)) == 0] = np.nan
    return _out(out, scalar)


# ---------------------------------------------------------------------------
# R-hat
# ---------------------------------------------------------------------------


def _rank_normalise(x):
    """Jointly rank-normalise ``(chains, draws, dim)`` per coordinate
    (average ranks for ties, Blom offset as in Vehtari et al. 2021)."""
    c, n, d = x.shape
    flat = x.reshape(c * n, d)
    r = rankdata(flat, method="average", axis=0)
    return ndtri((r - 3.0 / 8.0) / (c * n + 0.25)).reshape(c, n, d)


def _classic_rhat(x):
    """sqrt(var_plus / W) for ``(chains, draws, dim)``."""
    n = x.shape[1]
    w = x.var(axis=1, ddof=1).mean(axis=0)
    b_over_n = x.mean(axis=1).var(axis=0, ddof=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.sqrt(((n - 1) / n * w + b_over_n) / w)


def _split_chains(arr):
    """``(chains, draws, dim)`` -> ``(2 chains, draws // 2, dim)``: each chain's halves (the
    middle draw dropped when the number of draws is odd)."""
    n = arr.shape[1]
    half = n // 2
    return np.concatenate([arr[:, :half], arr[:, n - half:]], axis=0)


def ess_bulk(x):
    """Bulk effective sample size (Vehtari et al. 2021): the ESS of the rank-normalised split
    chains, per coordinate (input as for :func:`ess`; a constant coordinate gives ``nan``).

    It measures how well the centre of the distribution is explored and, as split chains
    that disagree inflate the between-chain variance, also catches chains that did not mix.
    """
    arr, scalar = _as_chains(x)
    split = _split_chains(arr)
    return _out(_ess_bulk_of(split, _rank_normalise(split)), scalar)


def _ess_bulk_of(split, ranked):
    """Bulk ESS of split chains, given their rank-normalised draws ``ranked``."""
    out = np.asarray(ess(ranked), dtype=float).reshape(-1)
    out[np.ptp(split, axis=(0, 1)) == 0] = np.nan
    return out


def ess_tail(x):
    """Tail effective sample size (Vehtari et al. 2021): the smaller ESS of the indicators
    x <= q_5% and x >= q_95% over the split chains, per coordinate (input as for
    :func:`ess`): how well the 5% and 95% quantiles are estimated."""
    arr, scalar = _as_chains(x)
    split = _split_chains(arr)
    out = np.full(split.shape[2], np.nan)
    for k in range(split.shape[2]):
        lower, upper = np.quantile(split[..., k], [0.05, 0.95])
        values = [ess((split[..., k:k + 1] <= lower).astype(float)),
                  ess((split[..., k:k + 1] >= upper).astype(float))]
        values = [float(np.ravel(v)[0]) for v in values]
        if not any(np.isnan(values)):
            out[k] = min(values)
    return _out(out, scalar)


def rhat(x):
    """Rank-normalised split R-hat (Vehtari et al. 2021), per coordinate.

    Parameters
    ----------
    x : array_like, shape (draws,), (draws, dim) or (chains, draws, dim)
        One or several chains.  A single chain works too: it is split in
        two halves, so a trend is detected.

    Returns
    -------
    rhat : float or ndarray of shape (dim,)
        ``max(bulk R-hat, tail R-hat)``.  Values close to 1 (say < 1.01)
        indicate agreement between (split) chains.  A constant coordinate
        gives ``nan``.

    Raises
    ------
    ValueError
        On bad shape, fewer than 4 draws or non-finite values.

    Notes
    -----
    1. Each chain is split in half (the middle draw is dropped when the
       number of draws is odd), giving ``2M`` chains of ``n//2`` draws.
    2. All ``S`` draws are ranked jointly per coordinate (average ranks
       for ties) and mapped to ``z = Phi^{-1}((r - 3/8) / (S + 1/4))``.
    3. Bulk R-hat is the classic ``sqrt(var_plus / W)`` of ``z``; tail
       R-hat is the same for the rank-normalised folded draws
       ``|x - median(x)|``, which catches differences in scale.
    """
    arr, scalar = _as_chains(x)
    split = _split_chains(arr)
    return _out(_rhat_of(split, _rank_normalise(split)), scalar)


def _rhat_of(split, ranked):
    """R-hat of split chains, given their rank-normalised draws ``ranked``."""
    bulk = _classic_rhat(ranked)
    med = np.median(split, axis=(0, 1))
    tail = _classic_rhat(_rank_normalise(np.abs(split - med)))
    out = np.fmax(bulk, tail)
    out[np.ptp(split, axis=(0, 1)) == 0] = np.nan
    return out


def rhat_and_ess_bulk(x):
    """``(rhat(x), ess_bulk(x))`` with the draws ranked once (both rank-normalise the same
    split chains; ranking is most of their cost on long runs).

    Parameters
    ----------
    x : array_like, shape (draws,), (draws, dim) or (chains, draws, dim)

    Returns
    -------
    rhat, ess_bulk : float or ndarray of shape (dim,)
        As :func:`rhat` and :func:`ess_bulk` give them.
    """
    arr, scalar = _as_chains(x)
    split = _split_chains(arr)
    ranked = _rank_normalise(split)
    return _out(_rhat_of(split, ranked), scalar), _out(_ess_bulk_of(split, ranked), scalar)


# ---------------------------------------------------------------------------
# health of a run
# ---------------------------------------------------------------------------


# What a divergence means, and what to do. A chain's records do not tell a log density that
# was not finite from an energy error past max_energy_error (both are a rejected proposal
# marked diverging), so the advice names both, the model's case first: a smaller step size
# does not help where the model is undefined.
DIVERGENCE_ADVICE = (
    "a proposal diverges where the log density is not finite (NaN or -inf) on its trajectory, "
    "or where the energy error grows past max_energy_error. A log density that is not finite "
    "inside the support means the model is undefined there: if a parameter is constrained "
    "(positive, in (0, 1)), sample an unconstrained transform of it (log, logit), or return "
    "-inf outside its support. Otherwise the integrator failed there and the region may be "
    "under-explored: use a smaller step size (or a higher target_accept); where the "
    "divergences persist, the posterior's scale changes from place to place (a funnel: "
    "latent values whose spread is a parameter), which no mass matrix fits and a "
    "reparameterisation fixes (non-centre it: sample standardised latent values z and set "
    "the latent values to location + scale * z)")


class SamplingWarning(RuntimeWarning):
    """The diagnostics of a run say its draws are not to be trusted as they are."""


def health(samples, diverging=None, rhat_limit=1.01, ess_per_chain=ESS_PER_CHAIN):
    """The checks Stan and PyMC make after sampling, and what failed.

    Parameters
    ----------
    samples : ndarray of shape (chains, draws, dim)
    diverging : None or ndarray of shape (chains, draws) of bool
    rhat_limit : float
        R-hat above this fails (default 1.01, Vehtari et al. 2021).
    ess_per_chain : float
        Bulk or tail ESS under this many per chain fails (default 100).

    Returns
    -------
    checks : dict
        ``rhat_max``, ``ess_bulk_min``, ``ess_tail_min`` (over the coordinates; NaN when
        there are fewer than 4 draws or every coordinate is constant) and ``n_divergent``.
    problems : list of str
        One sentence per failed check (empty for a healthy run).
    """
    samples = np.asarray(samples, dtype=float)
    chains, draws = samples.shape[:2]
    checks = dict(rhat_max=np.nan, ess_bulk_min=np.nan, ess_tail_min=np.nan,
                  n_divergent=0 if diverging is None else int(np.sum(diverging)))
    problems = []
    if draws >= 2 * _MIN_DRAWS and np.all(np.isfinite(samples)):
        with np.errstate(invalid="ignore", divide="ignore"):
            r, bulk = map(np.atleast_1d, rhat_and_ess_bulk(samples))
            tail = np.atleast_1d(ess_tail(samples))
        for key, values, pick in (("rhat_max", r, np.nanmax), ("ess_bulk_min", bulk, np.nanmin),
                                  ("ess_tail_min", tail, np.nanmin)):
            if not np.all(np.isnan(values)):
                checks[key] = float(pick(values))
        bad = np.flatnonzero(r > rhat_limit)
        if bad.size:
            problems.append(f"R-hat above {rhat_limit} for {bad.size} of {r.size} coordinates "
                            f"(largest {checks['rhat_max']:.3g}, coordinate "
                            f"{int(np.nanargmax(r))}): the chains (or their halves) disagree; "
                            "run longer or check for multimodality")
        wanted = ess_per_chain * chains
        for key, name in (("ess_bulk_min", "bulk"), ("ess_tail_min", "tail")):
            if checks[key] < wanted:
                problems.append(f"{name} ESS {checks[key]:.0f} is under {ess_per_chain:.0f} "
                                f"per chain ({wanted:.0f} for {chains}): too few effective "
                                f"draws for reliable {'means' if name == 'bulk' else 'quantiles'}")
    if checks["n_divergent"]:
        problems.append(f"{checks['n_divergent']} divergent transitions of {chains * draws} "
                        f"({checks['n_divergent'] / (chains * draws):.1%}): {DIVERGENCE_ADVICE}")
    return checks, problems


# ---------------------------------------------------------------------------
# errors of the mean
# ---------------------------------------------------------------------------


def e_bfmi(energy):
    """The energy Bayesian fraction of missing information of each chain (Betancourt 2016):
    the mean squared change of the Hamiltonian between consecutive draws over its variance,
    E-BFMI = sum_n (E_n - E_{n-1})^2 / sum_n (E_n - mean E)^2.

    Near 1 (about 2 for independent energies), each momentum draw moves the chain across the
    energy levels of the posterior; under about 0.3 (Stan's threshold) it cannot, and the
    chain explores the tails slowly: the metric misfits the posterior (a funnel, scales that
    change from place to place), which a reparameterisation fixes.

    Parameters
    ----------
    energy : array_like, shape (draws,) or (chains, draws)
        The Hamiltonian at each draw (a result's ``energy``).

    Returns
    -------
    float or ndarray of shape (chains,)
        NaN for a chain whose energy never changed.

    Raises
    ------
    ValueError
        For fewer than 3 draws or non-finite energies.
    """
    values = np.asarray(energy, dtype=float)
    one = values.ndim == 1
    values = np.atleast_2d(values)
    if values.ndim != 2 or values.shape[1] < 3:
        raise ValueError(f"energy must be (draws,) or (chains, draws) with at least 3 draws, "
                         f"got shape {np.shape(energy)}")
    if not np.all(np.isfinite(values)):
        raise ValueError("energy contains non-finite values")
    numerator = np.sum(np.diff(values, axis=1) ** 2, axis=1)
    denominator = np.sum((values - values.mean(axis=1, keepdims=True)) ** 2, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        result = np.where(denominator > 0, numerator / denominator, np.nan)
    return float(result[0]) if one else result


def relative_error_of_mean(x, true_mean):
    """Relative error of the running mean against a known mean.

    Parameters
    ----------
    x : array_like, shape (draws,), (draws, dim) or (chains, draws, dim)
        One or several chains.
    true_mean : array_like, shape (dim,)
        The exact expectation ``E[q]``; a scalar is also accepted for 1-d
        `x`.  It must not be the zero vector.

    Returns
    -------
    rem : ndarray, shape (draws,) for one chain, (chains, draws) otherwise
        ``REM(t) = ||qbar(t) - E[q]||_2 / ||E[q]||_2`` with ``qbar(t)`` the
        mean of the first ``t + 1`` draws of the chain.

    Raises
    ------
    ValueError
        On bad `x`, if `true_mean` does not have shape ``(dim,)``, is not
        finite or has zero norm.
    """
    arr, _ = _as_chains(x)
    dim = arr.shape[2]
    mu = np.asarray(true_mean, dtype=float)
    if mu.ndim == 0 and np.ndim(x) == 1:
        mu = mu[None]
    if mu.shape != (dim,):
        raise ValueError(
            f"true_mean must have shape ({dim},) to match x, got {mu.shape}")
    if not np.all(np.isfinite(mu)):
        raise ValueError("true_mean contains non-finite values")
    norm = np.linalg.norm(mu)
    if norm == 0:
        raise ValueError("true_mean has zero norm; relative error undefined")
    running = np.cumsum(arr, axis=1) / np.arange(1, arr.shape[1] + 1)[:, None]
    rem = np.linalg.norm(running - mu, axis=2) / norm
    return rem if np.ndim(x) == 3 else rem[0]


def mcse_mean(x):
    """Monte Carlo standard error of the mean, per coordinate.

    Parameters
    ----------
    x : array_like, shape (draws,), (draws, dim) or (chains, draws, dim)
        One or several chains.

    Returns
    -------
    mcse : float or ndarray of shape (dim,)
        ``sd / sqrt(ess(x, cap=False))`` with ``sd`` the standard deviation
        (ddof=1) of all draws pooled.  ``nan`` for a constant coordinate.

    Raises
    ------
    ValueError
        On bad shape, fewer than 4 draws or non-finite values.
    """
    arr, scalar = _as_chains(x)
    sd = arr.reshape(-1, arr.shape[2]).std(axis=0, ddof=1)
    n_eff = np.atleast_1d(ess(x, cap=False))
    return _out(sd / np.sqrt(n_eff), scalar)


# ---------------------------------------------------------------------------
# summary table
# ---------------------------------------------------------------------------


class Summary(dict):
    """Dict of per-coordinate diagnostics with attribute access.

    Every value is an array of shape ``(dim,)``.  ``str(summary)`` (also
    ``repr`` and :meth:`to_text`) renders an aligned table with one row per
    coordinate, then the lines of its ``footer`` attribute (a run's notes), if any.
    """

    def __getattr__(self, key):
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None

    def to_text(self):
        """Render the summary as an aligned text table.

        Returns
        -------
        text : str
            A header line followed by one line per coordinate.
        """
        cols = [k for k in self if k != "names"]
        rows = [["name"] + cols]
        for i, name in enumerate(self["names"]):
            row = [str(name)]
            for k in cols:
                v = float(self[k][i])
                fmt = {"ess_bulk": ".0f", "ess_tail": ".0f", "rhat": ".3f"}.get(k, ".4g")
                row.append(format(v, fmt))
            rows.append(row)
        widths = [max(len(r[j]) for r in rows) for j in range(len(rows[0]))]
        lines = [
            "  ".join([r[0].ljust(widths[0])]
                      + [c.rjust(w) for c, w in zip(r[1:], widths[1:])])
            for r in rows
        ]
        return "\n".join(lines + list(getattr(self, "footer", [])))

    __str__ = to_text
    __repr__ = to_text


def summary(x, names=None, quantiles=(0.05, 0.5, 0.95)):
    """Per-coordinate posterior summary and diagnostics.

    Parameters
    ----------
    x : array_like, shape (draws,), (draws, dim) or (chains, draws, dim)
        One or several chains.
    names : sequence of str, optional
        One name per coordinate; defaults to ``'q[0]', 'q[1]', ...``.
    quantiles : sequence of float, default (0.05, 0.5, 0.95)
        Probabilities in [0, 1]; each gives a key ``f"q{round(100*q):g}"``.

    Returns
    -------
    Summary
        Dict (with attribute access) with keys ``'names'``, ``'mean'``,
        ``'sd'``, ``'mcse_mean'``, the quantile keys, ``'ess_bulk'`` and
        ``'ess_tail'`` (:func:`ess_bulk` and :func:`ess_tail`: the rank-normalised
        ESS of Vehtari et al. that ArviZ's ``summary`` reports under the same names, and
        that a run's stopping rule and ``converged`` check) and ``'rhat'``; each value has
        shape ``(dim,)``. Mean, sd (ddof=1) and quantiles are over all draws pooled.

    Raises
    ------
    ValueError
        On bad `x`, a wrong number of `names`, or quantiles outside [0, 1]
        or mapping to the same key.
    """
    arr, _ = _as_chains(x)
    dim = arr.shape[2]
    if names is None:
        names = [f"q[{i}]" for i in range(dim)]
    names = np.asarray([str(s) for s in names])
    if names.shape != (dim,):
        raise ValueError(f"names must have {dim} entries, got {names.size}")
    qs = np.asarray(quantiles, dtype=float).reshape(-1)
    if np.any((qs < 0) | (qs > 1)) or not np.all(np.isfinite(qs)):
        raise ValueError(f"quantiles must lie in [0, 1], got {quantiles}")
    qkeys = [f"q{round(100 * q):g}" for q in qs]
    if len(set(qkeys)) != len(qkeys):
        raise ValueError(f"quantiles {quantiles} give duplicate keys {qkeys}")

    flat = arr.reshape(-1, dim)
    out = Summary(names=names)
    out["mean"] = flat.mean(axis=0)
    out["sd"] = flat.std(axis=0, ddof=1)
    # pass the original x so one chain uses the single-chain ESS definition;
    # atleast_1d keeps shape (dim,) for 1-d input
    out["mcse_mean"] = np.atleast_1d(mcse_mean(x))
    for key, q in zip(qkeys, np.quantile(flat, qs, axis=0)):
        out[key] = q
    with np.errstate(invalid="ignore", divide="ignore"):  # (a constant coordinate: NaN)
        out["ess_bulk"] = np.atleast_1d(ess_bulk(x))
        out["ess_tail"] = np.atleast_1d(ess_tail(x))
    out["rhat"] = np.atleast_1d(rhat(x))
    return out
