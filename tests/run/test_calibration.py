"""rnshmc.calibration: SBC ranks (Talts et al. 2018), thinning, and the uniformity tests
(chi-square; the simultaneous ECDF bands of Säilynoja, Bürkner and Vehtari 2022).

The statistical tests compare frequencies over simulated replications with their exact or
nominal values, with margins of 4-5 binomial standard errors, so they hold at any seed.
"""
import itertools

import numpy as np
import pytest
from scipy import stats

from rnshmc import calibration
from rnshmc.calibration import (chi_square_uniformity, ecdf_bands, ecdf_uniformity,
                                plot_ecdf_difference, rank_statistics, thin_to)
from testkit import rng_seed

ALPHA = 0.05


def binomial_se(p, m):
    return np.sqrt(p * (1 - p) / m)


def shifted_ranks(rng, n, draws, shift=0.0, scale=1.0):
    """``n`` SBC ranks of truths ~ N(0, 1) among ``draws`` draws of a wrong posterior
    N(shift, scale^2): each column one replication, all ranked in one call."""
    truth = rng.standard_normal(n)
    return rank_statistics(truth, shift + scale * rng.standard_normal((draws, n)), rng)


def ecdf_counts(ranks, n_ranks, thresholds):
    """ECDF counts (ranks below each threshold) of each row of ``ranks``."""
    m = len(ranks)
    hist = np.bincount((ranks + n_ranks * np.arange(m)[:, None]).ravel(),
                       minlength=m * n_ranks).reshape(m, n_ranks)
    return np.cumsum(hist, axis=1)[:, thresholds - 1]


def min_tail(counts, n, z):
    """The statistic T of each row of counts, straight from scipy: the smallest one-sided
    binomial tail probability over the evaluation points (brute force, no recursion)."""
    cdf = stats.binom.cdf(counts, n, z)
    sf = stats.binom.sf(counts - 1, n, z)
    return np.minimum(cdf, sf).min(axis=-1)


# ---------------------------------------------------------------------------
# rank_statistics
# ---------------------------------------------------------------------------


def test_ranks_of_exact_posterior_draws_are_uniform():
    # SBC of a conjugate model: theta ~ N(0, 1), y ~ N(theta, 1), so theta | y ~ N(y/2, 1/2);
    # exact posterior draws give ranks uniform on {0..L}
    rng = np.random.default_rng(rng_seed(1))
    L, reps, n_params = 9, 4000, 2
    ranks = []
    for _ in range(reps):
        theta = rng.standard_normal(n_params)
        y = theta + rng.standard_normal(n_params)
        draws = y / 2 + np.sqrt(0.5) * rng.standard_normal((L, n_params))
        ranks.append(rank_statistics(theta, draws, rng))
    ranks = np.concatenate(ranks)
    m, k = ranks.size, L + 1
    assert ranks.dtype.kind == "i" and ranks.min() >= 0 and ranks.max() <= L
    counts = np.bincount(ranks, minlength=k)
    assert np.all(np.abs(counts - m / k) < 5 * np.sqrt(m * (1 / k) * (1 - 1 / k))), counts
    var = (k**2 - 1) / 12  # the discrete uniform's variance and fourth central moment
    mu4 = (k**2 - 1) * (3 * k**2 - 7) / 240
    assert abs(ranks.mean() - L / 2) < 5 * np.sqrt(var / m)
    assert abs(ranks.var() - var) < 5 * np.sqrt((mu4 - var**2) / m)


def test_ties_are_broken_uniformly():
    rng = np.random.default_rng(rng_seed(2))
    reps = 5000
    # every draw equal to the truth: the rank is uniform on {0..L}
    L = 4
    ranks = rank_statistics(np.zeros(reps), np.zeros((L, reps)), rng)
    counts = np.bincount(ranks, minlength=L + 1)
    assert counts.size == L + 1
    se = np.sqrt(reps * (1 / (L + 1)) * (1 - 1 / (L + 1)))
    assert np.all(np.abs(counts - reps / (L + 1)) < 5 * se), counts
    # 2 draws below, 3 tied, 1 above: uniform on {2, 3, 4, 5}
    column = np.array([-1.0, -1.0, 0.0, 0.0, 0.0, 1.0])
    ranks = rank_statistics(np.zeros(reps), np.repeat(column[:, None], reps, axis=1), rng)
    assert set(np.unique(ranks)) == {2, 3, 4, 5}
    counts = np.bincount(ranks)[2:]
    assert np.all(np.abs(counts - reps / 4) < 5 * np.sqrt(reps * 0.25 * 0.75)), counts
    # no ties: the count of draws below, whatever the generator
    draws = np.array([[0.5, -3.0], [-0.5, -2.0], [2.0, 7.0]])
    assert rank_statistics([0.0, 1.0], draws, rng).tolist() == [1, 2]


def test_rank_statistics_rejects_bad_input():
    rng = np.random.default_rng(rng_seed(3))
    draws = np.zeros((5, 2))
    with pytest.raises(ValueError, match="shape"):
        rank_statistics(np.zeros(3), draws, rng)
    with pytest.raises(ValueError, match="2-d"):
        rank_statistics(np.zeros(2), np.zeros(5), rng)
    with pytest.raises(ValueError, match="1-d"):
        rank_statistics(np.zeros((2, 1)), draws, rng)
    with pytest.raises(ValueError, match="empty"):
        rank_statistics(np.zeros(2), np.zeros((0, 2)), rng)
    with pytest.raises(ValueError, match="non-finite"):
        rank_statistics([0.0, np.nan], draws, rng)
    with pytest.raises(ValueError, match="non-finite"):
        rank_statistics(np.zeros(2), np.full((5, 2), np.inf), rng)
    with pytest.raises(TypeError, match="Generator"):
        rank_statistics(np.zeros(2), draws, np.random.RandomState(0))


# ---------------------------------------------------------------------------
# thin_to
# ---------------------------------------------------------------------------


def test_thin_to_keeps_evenly_spaced_draws():
    draws = np.arange(100.0)[:, None] * [1.0, -1.0]  # draw i holds i: its index
    kept = thin_to(draws, 10)
    assert kept.shape == (10, 2)
    assert kept[:, 0].tolist() == list(range(5, 100, 10))
    assert np.array_equal(kept[:, 1], -kept[:, 0])
    assert thin_to(draws, 100).shape == (100, 2)
    # chains are thinned one by one, exactly n in all, the first ones taking the remainder
    chains = np.arange(3 * 50.0).reshape(3, 50, 1)  # chain c holds 50c .. 50c + 49
    kept = thin_to(chains, 10)[:, 0]
    assert kept.size == 10
    per_chain = [np.sum((kept >= 50 * c) & (kept < 50 * (c + 1))) for c in range(3)]
    assert per_chain == [4, 3, 3]
    # the middles of equal blocks: 50 / 4 and 50 / 3 apart, give or take the rounding
    assert kept[:4].tolist() == [6, 18, 31, 43] and kept[4:7].tolist() == [58, 75, 91]
    assert thin_to(chains, 2)[:, 0].tolist() == [25.0, 75.0]  # one chain gives none


def test_thin_to_makes_an_autocorrelated_chain_near_independent():
    # AR(1) with phi = 0.95: ESS about 20000 * 0.05 / 1.95, some 500; keep 200 (spacing 100)
    rng = np.random.default_rng(rng_seed(4))
    phi, n = 0.95, 20000
    noise = rng.standard_normal(n) * np.sqrt(1 - phi**2)
    x = np.empty(n)
    x[0] = rng.standard_normal()
    for t in range(1, n):
        x[t] = phi * x[t - 1] + noise[t]
    kept = thin_to(x[:, None], 200)[:, 0]
    lag1 = np.corrcoef(kept[:-1], kept[1:])[0, 1]
    assert abs(lag1) < 5 / np.sqrt(200)  # was 0.95 before thinning, 0.95**100 after


def test_thin_to_rejects_bad_input():
    with pytest.raises(ValueError, match="cannot keep"):
        thin_to(np.zeros((10, 2)), 11)
    with pytest.raises(ValueError, match=">= 1"):
        thin_to(np.zeros((10, 2)), 0)
    with pytest.raises(TypeError, match="integer"):
        thin_to(np.zeros((10, 2)), 2.5)
    with pytest.raises(ValueError, match="2 or 3-d"):
        thin_to(np.zeros(10), 2)
    with pytest.raises(ValueError, match="non-finite"):
        thin_to(np.full((2, 10, 1), np.nan), 2)


# ---------------------------------------------------------------------------
# chi_square_uniformity
# ---------------------------------------------------------------------------


def test_chi_square_statistic_and_default_bins():
    # a perfectly flat histogram: statistic 0
    assert chi_square_uniformity(np.arange(20) % 10, 10) == (0.0, 1.0)
    # by hand: 4 ranks in 2 bins {0, 1}, {2, 3}; 15 and 5 where 10 and 10 are expected
    ranks = np.array([0] * 8 + [1] * 7 + [3] * 5)
    stat, p = chi_square_uniformity(ranks, 4, bins=2)
    assert stat == pytest.approx(5.0) and p == pytest.approx(stats.chi2.sf(5.0, 1))
    # the default: the most bins with every expected count >= 5; for 200 replications of
    # 100 ranks that is 33 (widths 3 or 4: 200 * 3 / 100 = 6 >= 5, while 34 bins would
    # have width-2 bins expecting 4)
    rng = np.random.default_rng(rng_seed(5))
    ranks = rng.integers(0, 100, 200)
    assert chi_square_uniformity(ranks, 100) == chi_square_uniformity(ranks, 100, bins=33)
    # 50 replications of 10 ranks: 10 bins expecting 5 each
    ranks = ranks[:50] % 10
    assert chi_square_uniformity(ranks, 10) == chi_square_uniformity(ranks, 10, bins=10)


def test_chi_square_rejects_bad_input():
    with pytest.raises(ValueError, match="too few replications"):
        chi_square_uniformity(np.arange(9) % 3, 3)
    with pytest.raises(ValueError, match="lie in"):
        chi_square_uniformity([0, 1, 5], 5)
    with pytest.raises(ValueError, match="lie in"):
        chi_square_uniformity([-1, 1, 2], 5)
    with pytest.raises(ValueError, match="whole numbers"):
        chi_square_uniformity([0.5, 1, 2], 5)
    with pytest.raises(ValueError, match="non-finite"):
        chi_square_uniformity([np.nan, 1, 2], 5)
    with pytest.raises(ValueError, match="at most n_ranks"):
        chi_square_uniformity(np.arange(100) % 5, 5, bins=6)
    with pytest.raises(ValueError, match=">= 2"):
        chi_square_uniformity(np.arange(100) % 5, 5, bins=1)


def test_chi_square_false_alarm_rate_is_nominal():
    # 2000 uniform rank sets of 200 replications of 100 ranks (33 bins, expected 6 or 8):
    # the rejection rate at 0.05 is 0.05 within Monte Carlo error (the chi-square
    # approximation is neither notably liberal nor conservative here)
    rng = np.random.default_rng(rng_seed(6))
    m = 2000
    p = np.array([chi_square_uniformity(rng.integers(0, 100, 200), 100)[1] for _ in range(m)])
    rate = np.mean(p <= ALPHA)
    assert abs(rate - ALPHA) < 4 * binomial_se(ALPHA, m), rate


def test_chi_square_power_against_a_wrong_posterior():
    # truth ~ N(0, 1) ranked among 99 draws of a wrong posterior, 200 replications
    rng = np.random.default_rng(rng_seed(7))
    m = 200
    shifted = np.mean([chi_square_uniformity(shifted_ranks(rng, 200, 99, shift=0.3), 100)[1]
                       <= ALPHA for _ in range(m)])
    narrow = np.mean([chi_square_uniformity(shifted_ranks(rng, 200, 99, scale=0.7), 100)[1]
                      <= ALPHA for _ in range(m)])
    # measured about 0.6 and 0.99: a shift spreads over the 33 bins, its weak spot
    assert shifted > 0.4, shifted
    assert narrow > 0.9, narrow


# ---------------------------------------------------------------------------
# ecdf_bands and ecdf_uniformity
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("n, n_ranks", [(6, 5), (5, 8), (4, 4)])
def test_ecdf_band_coverage_and_p_values_are_exact_by_enumeration(n, n_ranks):
    # every one of the n_ranks**n equally likely rank sets: the fraction inside the bands is
    # the coverage the recursion computed, and each p-value is the exact P(T <= t)
    bands = ecdf_bands(n, n_ranks)
    assert len(bands.z) == min(n, n_ranks) and bands.z[-1] == 1.0
    sets = np.array(list(itertools.product(range(n_ranks), repeat=n)))
    counts = (sets[:, :, None] < bands.thresholds).sum(axis=1)
    inside = np.all((bands.lower_count <= counts) & (counts <= bands.upper_count), axis=1)
    assert inside.mean() == pytest.approx(bands.coverage, abs=1e-12)
    assert bands.coverage >= 1 - ALPHA
    t = min_tail(counts, n, bands.z)
    rng = np.random.default_rng(rng_seed(8))
    for i in rng.choice(len(sets), 100, replace=False):
        result = ecdf_uniformity(sets[i], n_ranks)
        assert result["inside"] == inside[i]
        exact = np.mean(t <= t[i] * (1 + 1e-12))
        assert result["p_value"] == pytest.approx(exact, abs=1e-12)
        assert result["inside"] == (result["p_value"] > ALPHA)


def test_gamma_matches_a_brute_force_simulation():
    # the paper's simulation method, by brute force: gamma is the alpha-quantile of the
    # point-wise level 2T at which uniform ECDFs first leave a point-wise interval, so
    # P(2T < gamma) <= alpha < P(2T <= gamma); for 50 replications of 20 ranks
    n, n_ranks, m = 50, 20, 20000
    bands = ecdf_bands(n, n_ranks)
    assert len(bands.z) == 20 and np.allclose(bands.z, np.arange(1, 21) / 20)
    rng = np.random.default_rng(rng_seed(9))
    ranks = rng.integers(0, n_ranks, size=(m, n))
    levels = 2 * min_tail(ecdf_counts(ranks, n_ranks, bands.thresholds), n, bands.z)
    se = binomial_se(ALPHA, m)
    below = np.mean(levels < bands.gamma * (1 - 1e-9))
    at_or_below = np.mean(levels <= bands.gamma * (1 + 1e-9))
    assert below < ALPHA + 4 * se, (below, bands.gamma)
    assert at_or_below > ALPHA - 4 * se, (at_or_below, bands.gamma)
    assert 1 - below == pytest.approx(bands.coverage, abs=4 * se)
    # and far below alpha: the point-wise intervals need widening for 20 points
    assert 0.005 < bands.gamma < 0.02, bands.gamma  # 0.0103


def test_coverage_matches_an_independent_recursion():
    # the paper's recursion written afresh as bayesplot writes it (scipy's binomial pmf and
    # quantiles, point-wise interval [ppf(gamma/2), ppf(1 - gamma/2)]), at the bands' gamma
    # nudged down past rounding: the same exact coverage, for sizes enumeration cannot reach
    for n, n_ranks in [(100, 100), (200, 50)]:
        bands = ecdf_bands(n, n_ranks)
        gamma = bands.gamma * (1 - 1e-9)
        lower = stats.binom.ppf(gamma / 2, n, bands.z).astype(int)
        upper = stats.binom.ppf(1 - gamma / 2, n, bands.z).astype(int)
        assert np.array_equal(lower, bands.lower_count)
        assert np.array_equal(upper, bands.upper_count)
        x_prev, p, z_prev = np.array([0]), np.array([1.0]), 0.0
        for z, lo, hi in zip(bands.z, lower, upper):
            x = np.arange(lo, hi + 1)
            q = (z - z_prev) / (1 - z_prev)
            p = stats.binom.pmf(x[:, None] - x_prev, n - x_prev, q) @ p
            x_prev, z_prev = x, z
        assert p.sum() == pytest.approx(bands.coverage, abs=1e-10)


@pytest.mark.parametrize("n, n_ranks", [(100, 100), (200, 1000)])
def test_ecdf_bands_have_simultaneous_coverage(n, n_ranks):
    # the method's point: uniform ECDFs stay inside all K intervals with probability
    # 1 - alpha, where the point-wise alpha intervals alone are left far more often
    bands = ecdf_bands(n, n_ranks, alpha=ALPHA)
    assert len(bands.z) == min(n, n_ranks)
    assert 1 - ALPHA <= bands.coverage < 1 - ALPHA + 0.005  # the discreteness is small here
    rng = np.random.default_rng(rng_seed(10))
    m = 2000
    ranks = rng.integers(0, n_ranks, size=(m, n))
    counts = ecdf_counts(ranks, n_ranks, bands.thresholds)
    inside = np.all((bands.lower_count <= counts) & (counts <= bands.upper_count), axis=1)
    assert abs(inside.mean() - bands.coverage) < 4 * binomial_se(ALPHA, m), inside.mean()
    pointwise_lower = stats.binom.ppf(ALPHA / 2, n, bands.z)
    pointwise_upper = stats.binom.ppf(1 - ALPHA / 2, n, bands.z)
    pointwise = np.all((pointwise_lower <= counts) & (counts <= pointwise_upper), axis=1)
    assert pointwise.mean() < 0.8, pointwise.mean()
    # the bands as ECDF values; the band holds the uniform CDF
    assert np.allclose(bands.lower, bands.lower_count / n)
    assert np.all((bands.lower <= bands.z) & (bands.z <= bands.upper))
    # ecdf_uniformity agrees with the bands, and p_value > alpha exactly when inside
    for row, rank_set in zip(counts[:50], ranks):
        result = ecdf_uniformity(rank_set, n_ranks)
        assert np.allclose(result["ecdf"] * n, row)
        assert result["inside"] == bool(np.all((bands.lower_count <= row)
                                               & (row <= bands.upper_count)))
        assert result["inside"] == (result["p_value"] > ALPHA)
        assert result["inside"] == (result["min_tail"] >= bands.gamma)


def test_ecdf_p_values_are_valid():
    # P(p_value <= a) <= a under uniformity, within Monte Carlo error
    rng = np.random.default_rng(rng_seed(11))
    m = 400
    p = np.array([ecdf_uniformity(rng.integers(0, 50, 100), 50)["p_value"]
                  for _ in range(m)])
    for a in (0.05, 0.2, 0.5):
        assert np.mean(p <= a) < a + 4 * binomial_se(a, m), (a, np.mean(p <= a))
    assert np.mean(p <= 0.5) > 0.5 - 4 * binomial_se(0.5, m)  # and not far too large


def test_ecdf_power_against_a_wrong_posterior():
    rng = np.random.default_rng(rng_seed(12))
    m = 100
    for shift, scale in [(0.3, 1.0), (0.0, 0.7), (0.0, 1.5)]:
        rejected = np.mean([not ecdf_uniformity(shifted_ranks(rng, 200, 99, shift, scale),
                                                100)["inside"] for _ in range(m)])
        assert rejected > 0.85, (shift, scale, rejected)  # measured 0.97, 0.995, 1.0


def test_ecdf_uniformity_details():
    # all ranks 0 of 4: ECDF 1 at every threshold, 0.75 above the uniform CDF at 1/4
    result = ecdf_uniformity(np.zeros(40, dtype=int), 4)
    assert not result["inside"] and result["p_value"] < 1e-10
    assert result["max_abs_difference"] == pytest.approx(0.75)
    # a perfectly flat set is inside, with p_value near 1
    result = ecdf_uniformity(np.arange(40) % 4, 4)
    assert result["inside"] and result["p_value"] > 0.9 and result["max_abs_difference"] == 0
    assert set(result) >= {"inside", "p_value", "min_tail", "max_abs_difference", "z", "ecdf",
                           "bands"}


def test_ecdf_rejects_bad_input():
    with pytest.raises(ValueError, match="n_replications"):
        ecdf_bands(1, 10)
    with pytest.raises(ValueError, match="n_ranks"):
        ecdf_bands(10, 1)
    with pytest.raises(ValueError, match="alpha"):
        ecdf_bands(10, 10, alpha=1.0)
    with pytest.raises(TypeError, match="integer"):
        ecdf_bands(10.5, 10)
    with pytest.raises(ValueError, match="lie in"):
        ecdf_uniformity([0, 1, 10], 10)
    with pytest.raises(ValueError, match="1-d"):
        ecdf_uniformity(np.zeros((3, 2), dtype=int), 10)
    with pytest.raises(ValueError, match="at least 2 replications"):
        ecdf_uniformity([3], 10)
    with pytest.raises(ValueError, match="non-finite"):
        ecdf_uniformity([0, np.inf], 10)
    bands = ecdf_bands(20, 10)
    with pytest.raises(ValueError):
        bands.lower[0] = 0.0  # cached: read-only


def test_calibration_imports_nothing_of_rnshmc():
    import ast
    import pathlib
    tree = ast.parse(pathlib.Path(calibration.__file__).read_text())
    modules = {a.name for node in ast.walk(tree) if isinstance(node, ast.Import)
               for a in node.names}
    modules |= {node.module or "." for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom)}
    assert not any(m.startswith(("rnshmc", ".")) for m in modules), modules


# ---------------------------------------------------------------------------
# plot
# ---------------------------------------------------------------------------


def test_plot_ecdf_difference_returns_axes():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rng = np.random.default_rng(rng_seed(13))
    fig, ax = plt.subplots()
    try:
        out = plot_ecdf_difference(rng.integers(0, 100, 200), 100, ax=ax, label="theta")
        assert out is ax
        assert [line.get_label() for line in ax.get_lines()][0] == "theta"
        assert len(ax.collections) == 1  # the band
        new = plot_ecdf_difference(shifted_ranks(rng, 200, 99, shift=0.5), 100)
        assert new is not ax and hasattr(new, "fill_between")
        plt.close(new.figure)
    finally:
        plt.close(fig)


def test_plot_without_matplotlib_says_how_to_install_it(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ImportError, match="pip install matplotlib"):
        plot_ecdf_difference(np.arange(20) % 10, 10)
