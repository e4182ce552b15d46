"""Tests for rnshmc.diagnostics."""

import numpy as np
import pytest
from scipy.signal import lfilter

from rnshmc import diagnostics
from testkit import rng_seed

SEEDS = [0, 1, 2, 3, 4]


def ar1(rng, rho, n, shape=()):
    """x_t = rho x_{t-1} + sqrt(1 - rho^2) eps_t started in stationarity."""
    eps = rng.standard_normal((n,) + shape)
    innov = np.sqrt(1.0 - rho**2) * eps
    innov[0] = eps[0]  # x_0 ~ N(0, 1), the stationary law
    return lfilter([1.0], [1.0, -rho], innov, axis=0)


def direct_autocorrelation(x):
    """O(n^2) biased autocorrelation of a 1-d chain, straight from the
    definition."""
    n = len(x)
    xc = x - x.mean()
    acov = np.array([np.dot(xc[: n - k], xc[k:]) / n for k in range(n)])
    return acov / acov[0]


def reference_ess(x, cap=True):
    """Geyer initial monotone sequence ESS of a 1-d chain (docs/algorithms.md, section 2),
    written with plain loops (no FFT, no vectorisation)."""
    n = len(x)
    rho = direct_autocorrelation(x)
    total, prev = 0.0, np.inf
    for k in range(n // 2):
        gamma = rho[2 * k] + rho[2 * k + 1]
        if gamma <= 0:
            break
        prev = min(prev, gamma)
        total += prev
    tau = -1.0 + 2.0 * total
    if cap:
        tau = max(tau, 1.0)
    return np.inf if tau <= 0 else n / tau


# ---------------------------------------------------------------------------
# autocorrelation
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_autocorrelation_matches_direct(seed):
    rng = np.random.default_rng(seed)
    n = 257  # odd, not a power of two: exercises the zero padding
    x = ar1(rng, 0.7, n, (3,))
    rho = diagnostics.autocorrelation(x)
    assert rho.shape == (n, 3)
    for j in range(3):
        np.testing.assert_allclose(
            rho[:, j], direct_autocorrelation(x[:, j]), rtol=1e-10, atol=1e-13)
    rho1 = diagnostics.autocorrelation(x[:, 0])
    assert rho1.shape == (n,)
    np.testing.assert_allclose(rho1, rho[:, 0], rtol=1e-12, atol=1e-15)


def test_autocorrelation_hand_example():
    # x = 1, 2, 3, 4: centred -1.5, -.5, .5, 1.5; c_0 = 5/4,
    # c_1 = 5/16, c_2 = -3/8, c_3 = -9/16
    rho = diagnostics.autocorrelation([1.0, 2.0, 3.0, 4.0])
    np.testing.assert_allclose(rho, [1.0, 0.25, -0.3, -0.45], rtol=1e-12)


# ---------------------------------------------------------------------------
# single-chain ESS
# ---------------------------------------------------------------------------


def test_ess_hand_example_truncation():
    # rho = 1, 1/4, -3/10, -9/20: Gamma_0 = 5/4, Gamma_1 = -3/4 stops the
    # sum, so tau = -1 + 2 * 5/4 = 3/2 and ESS = 4 / (3/2) = 8/3
    assert diagnostics.ess([1.0, 2.0, 3.0, 4.0]) == pytest.approx(8 / 3)
    assert diagnostics.ess([1.0, 2.0, 3.0, 4.0], cap=False) == pytest.approx(
        8 / 3)


def test_ess_hand_example_monotone():
    # exact autocorrelations of this chain (computed with fractions):
    x = np.array([0, 0, 1, 2, 0, 2, 0, 2], dtype=float)
    rho = np.array([440, -201, 134, -131, 60, -5, -14, -63]) / 440
    np.testing.assert_allclose(diagnostics.autocorrelation(x), rho,
                               rtol=1e-12, atol=1e-14)
    # pair sums 239/440, 3/440, 55/440, -77/440: the third rises, so the
    # monotone rule replaces it by 3/440; the fourth is negative and stops.
    # tau = -1 + 2 * (239 + 3 + 3) / 440 = 5/44  ->  ESS = 8 * 44 / 5
    assert diagnostics.ess(x, cap=False) == pytest.approx(70.4)
    # without the monotone step tau would be 7/20 and ESS 160/7
    assert diagnostics.ess(x, cap=True) == pytest.approx(8.0)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("rho", [-0.6, 0.0, 0.3, 0.8])
def test_ess_matches_loop_reference(seed, rho):
    rng = np.random.default_rng(seed)
    x = ar1(rng, rho, 61, (2,))
    for cap in (True, False):
        got = diagnostics.ess(x, cap=cap)
        want = [reference_ess(x[:, j], cap=cap) for j in range(2)]
        np.testing.assert_allclose(got, want, rtol=1e-9)
        assert diagnostics.ess(x[:, 1], cap=cap) == pytest.approx(want[1])


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("rho", [0.5, 0.9])
def test_ess_ar1(seed, rho):
    n = 20000
    x = ar1(np.random.default_rng(seed), rho, n, (16,))
    ratio = diagnostics.ess(x) / (n * (1 - rho) / (1 + rho))
    # a single coordinate's estimate has ~8% relative sd at rho = 0.9, so
    # the 10% check is on the average of 16 independent coordinates
    assert abs(ratio.mean() - 1) < 0.10
    assert np.all(np.abs(ratio - 1) < 0.40)


@pytest.mark.parametrize("seed", SEEDS)
def test_ess_iid(seed):
    n = 5000
    x = np.random.default_rng(seed).standard_normal((n, 4))
    capped = diagnostics.ess(x)
    uncapped = diagnostics.ess(x, cap=False)
    assert np.all(capped <= n)
    # the estimate for iid draws has ~5% relative sd
    assert np.all(capped > 0.7 * n)
    np.testing.assert_allclose(uncapped, n, rtol=0.3)
    np.testing.assert_array_equal(capped, np.minimum(uncapped, n))


def test_ess_antithetic_uncapped_exceeds_n():
    x = ar1(np.random.default_rng(rng_seed(0)), -0.5, 5000)
    assert diagnostics.ess(x) == 5000
    assert diagnostics.ess(x, cap=False) > 2 * 5000


def test_ess_constant_coordinate_is_nan():
    x = np.random.default_rng(rng_seed(0)).standard_normal((100, 2))
    x[:, 1] = 0.1
    out = diagnostics.ess(x)
    assert np.isfinite(out[0]) and np.isnan(out[1])
    out = diagnostics.ess(np.stack([x, x]))
    assert np.isfinite(out[0]) and np.isnan(out[1])


# ---------------------------------------------------------------------------
# multi-chain ESS
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_ess_multichain_iid(seed):
    m, n = 4, 2000
    x = np.random.default_rng(seed).standard_normal((m, n, 3))
    np.testing.assert_allclose(diagnostics.ess(x, cap=False), m * n, rtol=0.2)
    assert np.all(diagnostics.ess(x) <= m * n)


@pytest.mark.parametrize("seed", SEEDS)
def test_ess_multichain_shifted_means(seed):
    m, n = 4, 2000
    x = np.random.default_rng(seed).standard_normal((m, n, 3))
    x[0] += 3.0
    assert np.all(diagnostics.ess(x) < 0.05 * m * n)


@pytest.mark.parametrize("seed", SEEDS)
def test_ess_one_chain_pooled_matches_single(seed):
    x = ar1(np.random.default_rng(seed), 0.5, 5000, (3,))
    np.testing.assert_allclose(diagnostics.ess(x[None], cap=False),
                               diagnostics.ess(x, cap=False), rtol=0.01)


def test_ess_unknown_method():
    with pytest.raises(ValueError, match="method"):
        diagnostics.ess(np.zeros(10) + np.arange(10), method="batch")


# ---------------------------------------------------------------------------
# R-hat
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_rhat_iid(seed):
    x = np.random.default_rng(seed).standard_normal((4, 2000, 3))
    r = diagnostics.rhat(x)
    assert r.shape == (3,)
    assert np.all(r < 1.01)


@pytest.mark.parametrize("seed", SEEDS)
def test_rhat_shifted_chain(seed):
    x = np.random.default_rng(seed).standard_normal((4, 2000, 3))
    x[2] += 2.0
    assert np.all(diagnostics.rhat(x) > 1.1)


@pytest.mark.parametrize("seed", SEEDS)
def test_rhat_cauchy(seed):
    x = np.random.default_rng(seed).standard_cauchy((4, 2000, 3))
    assert np.all(diagnostics.rhat(x) < 1.01)


@pytest.mark.parametrize("seed", SEEDS)
def test_rhat_single_chain_trend(seed):
    n = 2000
    x = np.random.default_rng(seed).standard_normal((n, 2))
    x += np.linspace(0.0, 2.0, n)[:, None]
    assert np.all(diagnostics.rhat(x) > 1.05)
    assert diagnostics.rhat(x[:, 0]) > 1.05


def test_rhat_scale_difference_caught_by_tail():
    # same location, different scale: bulk R-hat misses it, tail catches it
    x = np.random.default_rng(rng_seed(0)).standard_normal((4, 2000))
    x[0] *= 3.0
    assert diagnostics.rhat(x[..., None])[0] > 1.05


def test_rhat_scalar_and_odd_draws():
    x = np.random.default_rng(rng_seed(1)).standard_normal(1001)
    r = diagnostics.rhat(x)
    assert isinstance(r, float) and r < 1.05


# ---------------------------------------------------------------------------
# relative error of the mean and MCSE
# ---------------------------------------------------------------------------


def test_rem_hand_example():
    x = np.array([[1.0, 0.0], [3.0, 0.0], [2.0, 2.0], [2.0, 2.0]])
    # running means (1,0), (2,0), (2,2/3), (2,1); ||E q|| = 2
    want = [0.5, 0.0, 1 / 3, 0.5]
    rem = diagnostics.relative_error_of_mean(x, [2.0, 0.0])
    assert rem.shape == (4,)
    np.testing.assert_allclose(rem, want, atol=1e-15)
    rem = diagnostics.relative_error_of_mean(np.stack([x, x[::-1]]), [2, 0])
    assert rem.shape == (2, 4)
    np.testing.assert_allclose(rem[0], want, atol=1e-15)
    # reversed chain: running means (2,2), (2,2), (7/3,4/3), (2,1)
    np.testing.assert_allclose(rem[1], [1.0, 1.0, np.sqrt(17) / 6, 0.5],
                               atol=1e-15)


def test_rem_one_dimensional():
    rem = diagnostics.relative_error_of_mean([2.0, 4.0, 0.0, 2.0], 2.0)
    np.testing.assert_allclose(rem, [0.0, 0.5, 0.0, 0.0], atol=1e-15)


@pytest.mark.parametrize("seed", SEEDS)
def test_mcse_mean(seed):
    n = 20000
    x = ar1(np.random.default_rng(seed), 0.5, n, (8,))
    got = diagnostics.mcse_mean(x)
    want = x.std(axis=0, ddof=1) / np.sqrt(diagnostics.ess(x, cap=False))
    np.testing.assert_allclose(got, want, rtol=1e-12)
    # for AR(1) the true value is sqrt((1 + rho) / ((1 - rho) n)); the
    # estimate is noisy per coordinate, so check the median of 8
    assert np.median(got) == pytest.approx(np.sqrt(3 / n), rel=0.1)
    assert np.all(np.abs(got / np.sqrt(3 / n) - 1) < 0.3)
    chains = np.random.default_rng(seed).standard_normal((4, 1000))
    assert diagnostics.mcse_mean(chains[..., None])[0] == pytest.approx(
        np.sqrt(1 / 4000), rel=0.2)


# ---------------------------------------------------------------------------
# summary
# ---------------------------------------------------------------------------


def test_summary():
    x = np.random.default_rng(rng_seed(0)).standard_normal((4, 500, 3)) + [0, 1, 2]
    s = diagnostics.summary(x)
    keys = ["names", "mean", "sd", "mcse_mean", "q5", "q50", "q95", "ess_bulk", "ess_tail",
            "rhat"]
    assert list(s) == keys
    for k in keys:
        assert np.shape(s[k]) == (3,)
    flat = x.reshape(-1, 3)
    np.testing.assert_allclose(s["mean"], flat.mean(axis=0))
    np.testing.assert_allclose(s.sd, flat.std(axis=0, ddof=1))
    np.testing.assert_allclose(s.q95, np.quantile(flat, 0.95, axis=0))
    np.testing.assert_allclose(s.ess_bulk, diagnostics.ess_bulk(x))
    np.testing.assert_allclose(s.ess_tail, diagnostics.ess_tail(x))
    np.testing.assert_allclose(s.rhat, diagnostics.rhat(x))
    assert list(s.names) == ["q[0]", "q[1]", "q[2]"]

    lines = str(s).splitlines()
    assert len(lines) == 1 + 3
    assert lines[0].split() == ["name"] + keys[1:]
    assert lines[2].startswith("q[1]")
    assert len({len(line) for line in lines}) == 1  # aligned
    assert repr(s) == str(s) == s.to_text()
    with pytest.raises(AttributeError):
        s.nonexistent


def test_summary_names_quantiles_and_1d():
    x = np.random.default_rng(rng_seed(1)).standard_normal((200, 2))
    s = diagnostics.summary(x, names=["alpha", "beta"], quantiles=(0.1, 0.9))
    assert "q10" in s and "q90" in s and "q5" not in s
    assert str(s).splitlines()[1].startswith("alpha")
    np.testing.assert_allclose(s.ess_bulk, diagnostics.ess_bulk(x))
    np.testing.assert_allclose(s.ess_tail, diagnostics.ess_tail(x))
    s1 = diagnostics.summary(x[:, 0])
    assert s1.mean.shape == (1,) and s1.ess_bulk.shape == (1,)
    with pytest.raises(ValueError, match="names"):
        diagnostics.summary(x, names=["only one"])
    with pytest.raises(ValueError, match="quantiles"):
        diagnostics.summary(x, quantiles=(0.5, 1.5))


# ---------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------

GOOD = np.random.default_rng(rng_seed(0)).standard_normal((2, 50, 3))
FUNCS = [diagnostics.ess, diagnostics.rhat, diagnostics.mcse_mean,
         diagnostics.summary,
         lambda x: diagnostics.relative_error_of_mean(x, np.ones(3))]


@pytest.mark.parametrize("func", FUNCS)
def test_bad_ndim(func):
    with pytest.raises(ValueError, match="4-d"):
        func(GOOD[None])


@pytest.mark.parametrize("func", FUNCS + [diagnostics.autocorrelation])
def test_too_few_draws(func):
    with pytest.raises(ValueError, match="at least 4 draws"):
        func(GOOD[0, :2])


@pytest.mark.parametrize("func", FUNCS + [diagnostics.autocorrelation])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite(func, bad):
    x = GOOD[0].copy()
    x[3, 1] = bad
    with pytest.raises(ValueError, match="non-finite"):
        func(x)


def test_autocorrelation_rejects_multichain():
    with pytest.raises(ValueError, match="3-d"):
        diagnostics.autocorrelation(GOOD)


def test_rem_bad_true_mean():
    with pytest.raises(ValueError, match="true_mean must have shape"):
        diagnostics.relative_error_of_mean(GOOD, np.ones(2))
    with pytest.raises(ValueError, match="true_mean must have shape"):
        diagnostics.relative_error_of_mean(GOOD, np.ones((3, 1)))
    with pytest.raises(ValueError, match="zero norm"):
        diagnostics.relative_error_of_mean(GOOD, np.zeros(3))


def test_non_numeric():
    with pytest.raises(ValueError, match="numeric"):
        diagnostics.ess(["a", "b", "c", "d"])


# ---------------------------------------------------------------------------
# real MCMC output: the authors' stored HMC run on their a9a model
# ---------------------------------------------------------------------------


def test_ess_and_rhat_on_the_authors_hmc_draws(shared_data):
    from scipy.io import loadmat
    draws = loadmat(shared_data / "rnshmc-original" / "a9a_hmc_draws.mat",
                    squeeze_me=True)["betaPosterior"]
    assert draws.shape == (1000, 61)
    ess = diagnostics.ess(draws)
    for k in range(0, 61, 6):  # the FFT estimate equals the loop reference on real output
        assert ess[k] == pytest.approx(reference_ess(draws[:, k]), rel=1e-10)
    assert np.all((ess > 0) & (ess <= 1000))
    rhat = diagnostics.rhat(draws)
    assert rhat.shape == (61,) and np.all(np.isfinite(rhat)) and np.all(rhat > 0.99)


@pytest.mark.parametrize("shape", [(400,), (300, 3), (4, 250, 3)])
def test_rhat_and_ess_bulk_together_equal_each_alone(shape):
    """One ranking for both gives rhat's and ess_bulk's own values (ties and a constant
    coordinate included)."""
    x = np.round(np.random.default_rng(rng_seed(3)).standard_normal(shape), 1)  # many ties
    if len(shape) > 1:
        x[..., -1] = 2.0
    r, bulk = diagnostics.rhat_and_ess_bulk(x)
    np.testing.assert_array_equal(r, diagnostics.rhat(x))
    np.testing.assert_array_equal(bulk, diagnostics.ess_bulk(x))
