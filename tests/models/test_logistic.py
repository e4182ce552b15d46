"""Bayesian logistic regression (rnshmc.models.LogisticRegression, C kernel
rnshmc._kernels._logistic) against a NumPy reference, finite differences and itself.

U(b) = sum_i [softplus(x_i^T b) - y_i x_i^T b] + |b|^2 / (2 alpha).

The reference is written to be accurate everywhere, including |eta| ~ 800:
softplus(eta) - y eta = softplus((1 - 2y) eta) = np.logaddexp(0, +-eta) (never a difference of
two large numbers), the residual sigmoid(eta) - y = -expit(-eta) for y = 1 and expit(eta) for
y = 0, and the Fisher weight expit(eta) expit(-eta).

Tolerances: rtol 1e-12 against the magnitude of the sum being formed. The potential is a sum
of non-negative terms (rtol applies directly, plus 1e-15 per row for the kernel's
log-of-a-product-of-64-factors evaluation of sum log1p(exp(-|eta|))). For the gradient (and
metric), entries can cancel, so the bound is 1e-12 * (|X|^T (|r| + 1e-4) + |b| / alpha): the
kernel forms sigmoid(eta) - y as 1/(1 + t) - 1 for y = 1, eta > 0, which has an *absolute*
rounding error of ~1e-16, i.e. 1e-4 in units of 1e-12.
"""
import concurrent.futures
import copy
import pickle

import numpy as np
import pytest
from scipy import special

import rnshmc
from rnshmc import HMC
from rnshmc._kernels import _logistic
from rnshmc.datasets import simulated_logistic
from rnshmc.models import LogisticRegression

from testkit import check_covariance, check_mean, rng_seed

RTOL = 1e-12
ROWS = [1, 17, 1000, 10007]
DIMS = [1, 2, 50, 200]


# --------------------------------------------------------------------------------------------
# reference


def reference(X, y, alpha, q):
    eta = X @ q
    terms = np.logaddexp(0.0, np.where(y == 1, -eta, eta))
    U = terms.sum() + q @ q / (2 * alpha)
    residual = np.where(y == 1, -special.expit(-eta), special.expit(eta))
    grad = X.T @ residual + q / alpha
    w = special.expit(eta) * special.expit(-eta)
    G = (X * w[:, None]).T @ X + np.eye(X.shape[1]) / alpha
    return U, grad, G, residual, w


def check_against_reference(model, q):
    X, y, alpha = model.X, model.y, model.prior_variance
    U_ref, g_ref, G_ref, r, w = reference(X, y, alpha, q)
    U, g = model.potential_and_gradient(q)
    assert np.isfinite(U) and np.all(np.isfinite(g))
    assert abs(U - U_ref) <= RTOL * U_ref + 1e-15 * X.shape[0]
    absX = np.abs(X)
    g_bound = RTOL * (absX.T @ (np.abs(r) + 1e-4) + np.abs(q) / alpha)
    np.testing.assert_array_less(np.abs(g - g_ref), g_bound + 1e-300)
    G = model.fisher_metric(q)
    assert G.shape == (X.shape[1],) * 2
    np.testing.assert_array_equal(G, G.T)
    G_bound = RTOL * ((absX * (w + 1e-4)[:, None]).T @ absX + np.eye(X.shape[1]) / alpha)
    np.testing.assert_array_less(np.abs(G - G_ref), G_bound + 1e-300)
    # the density-only path (no gradient pass) gives the same potential
    assert model.potential(q) == U
    assert model.log_density(q) == -U
    lp, glp = model.log_density_gradient(q)
    assert lp == -U
    np.testing.assert_array_equal(glp, -g)
    return U, g, G


def random_problem(rng, n, d, scale=1.0):
    X = rng.standard_normal((n, d))
    y = (rng.uniform(size=n) < 0.5).astype(float)
    q = scale * rng.standard_normal(d) / np.sqrt(d)
    return X, y, q


# --------------------------------------------------------------------------------------------
# values against the reference


@pytest.mark.parametrize("n", ROWS)
@pytest.mark.parametrize("d", DIMS)
def test_matches_reference_for_all_block_remainders(n, d):
    """Rows not a multiple of the block size (and fewer rows than one block), dims 1 to 200."""
    rng = np.random.default_rng(n * 1000 + d)
    X, y, q = random_problem(rng, n, d)
    model = LogisticRegression(X, y, prior_variance=3.0)
    assert model.dim == d
    for point in (q, 3.0 * q, np.zeros(d)):
        check_against_reference(model, point)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("magnitude", [20.0, 40.0, 700.0, 800.0, 1e5])
def test_large_linear_predictors(seed, magnitude):
    """Rows scaled so that eta = x_i^T b = +-magnitude: no overflow, finite, reference to 1e-12
    (t = exp(-|eta|) underflows: exp(-800) = 0)."""
    rng = np.random.default_rng(seed)
    n, d = 300, 5
    X, y, q = random_problem(rng, n, d)
    signs = rng.choice([-1.0, 1.0], size=n)
    X = X * (magnitude * signs / (X @ q))[:, None]
    model = LogisticRegression(X, y, prior_variance=100.0)
    np.testing.assert_allclose(X @ q, magnitude * signs, rtol=1e-12)
    U, g, G = check_against_reference(model, q)
    assert U > 0.5 * magnitude * min(np.sum(y == (signs < 0)), 1)
    # a mixture of huge and ordinary rows
    X2 = np.vstack([X, rng.standard_normal((n, d))])
    y2 = np.concatenate([y, y])
    check_against_reference(LogisticRegression(X2, y2), q)


@pytest.mark.parametrize("seed", [0, 1])
def test_separable_data_large_margin(seed):
    """All rows correctly classified with margin |eta| >= 30: U is the prior plus a sum of
    tiny softplus(-|eta|) terms, still to the reference's accuracy in absolute terms."""
    rng = np.random.default_rng(seed)
    X, _, q = random_problem(rng, 500, 4)
    eta = X @ q
    X = X * (30.0 / np.abs(eta) + 1.0)[:, None]
    y = (X @ q > 0).astype(float)
    check_against_reference(LogisticRegression(X, y), q)


# --------------------------------------------------------------------------------------------
# derivatives


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("d", [1, 3, 8])
def test_gradient_matches_finite_differences(seed, d):
    rng = np.random.default_rng(seed)
    X, y, q = random_problem(rng, 400, d, scale=2.0)
    model = LogisticRegression(X, y, prior_variance=2.0)
    _, g = model.potential_and_gradient(q)
    h = 1e-5
    fd = np.array([(model.potential(q + h * e) - model.potential(q - h * e)) / (2 * h)
                   for e in np.eye(d)])
    # central differences: truncation O(h^2 U''') ~ 1e-8, rounding ~ U * 1e-16 / h ~ 1e-9
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-6 * (1 + np.abs(g).max()))


@pytest.mark.parametrize("seed", [0, 1])
def test_fisher_metric_is_the_hessian(seed):
    """For the canonical (logit) link the expected Fisher information plus the prior
    precision is the Hessian of U: compare with central differences of the gradient."""
    rng = np.random.default_rng(seed)
    d = 6
    X, y, q = random_problem(rng, 400, d, scale=2.0)
    model = LogisticRegression(X, y, prior_variance=5.0)
    G = model.fisher_metric(q)
    h = 1e-5
    H = np.column_stack([(model.potential_and_gradient(q + h * e)[1]
                          - model.potential_and_gradient(q - h * e)[1]) / (2 * h)
                         for e in np.eye(d)])
    np.testing.assert_allclose(G, H, rtol=1e-6, atol=1e-6 * np.abs(G).max())
    assert np.all(np.linalg.eigvalsh(G) > 0)


# --------------------------------------------------------------------------------------------
# threads, copies, pickling


def test_thread_count_does_not_change_results():
    """Blocks are reduced in a fixed order: bit-identical for 1, 2 or the default threads."""
    rng = np.random.default_rng(rng_seed(7))
    X, y, q = random_problem(rng, 10007, 50)
    models = [LogisticRegression(X, y, n_threads=k) for k in (1, 2, None)]
    results = [m.potential_and_gradient(q) for m in models]
    for U, g in results[1:]:
        assert U == results[0][0]
        np.testing.assert_array_equal(g, results[0][1])
    potentials = [m.potential(q) for m in models]
    assert potentials[0] == potentials[1] == potentials[2] == results[0][0]
    metrics = [m.fisher_metric(q) for m in models]
    np.testing.assert_array_equal(metrics[0], metrics[1])


def test_repeated_evaluation_is_deterministic():
    rng = np.random.default_rng(rng_seed(8))
    X, y, q = random_problem(rng, 5000, 20)
    model = LogisticRegression(X, y, n_threads=2)
    first = model.potential_and_gradient(q)
    model.potential_and_gradient(-q)  # scratch buffers now hold other values
    again = model.potential_and_gradient(q)
    assert first[0] == again[0]
    np.testing.assert_array_equal(first[1], again[1])


def test_pickle_round_trip():
    rng = np.random.default_rng(rng_seed(9))
    X, y, q = random_problem(rng, 1234, 7)
    model = LogisticRegression(X, y, prior_variance=4.0, n_threads=2)
    for clone in (pickle.loads(pickle.dumps(model)), copy.deepcopy(model)):
        assert isinstance(clone, LogisticRegression) and clone is not model
        assert clone.dim == 7 and clone.prior_variance == 4.0 and clone.n_threads == 2
        np.testing.assert_array_equal(clone.X, model.X)
        np.testing.assert_array_equal(clone.y, model.y)
        assert clone.potential(q) == model.potential(q)
        np.testing.assert_array_equal(clone.potential_and_gradient(q)[1],
                                      model.potential_and_gradient(q)[1])
    assert "LogisticRegression" in repr(model) and "1234" in repr(model)


def test_chains_in_threads_share_one_target():
    """Chains on a thread pool share the model's one C target concurrently (the C loop drops
    the GIL); any shared scratch buffer would change the draws."""
    X, y, _ = simulated_logistic(n=4000, dim=5, rng=rng_seed(1))
    model = LogisticRegression(X, y, n_threads=1)
    hmc = HMC(model, step_size=0.2, n_steps=8)
    serial = hmc.sample(300, tune=50, chains=4, rng=rng_seed(2), progress=False)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        threaded = hmc.sample(300, tune=50, chains=4, rng=rng_seed(2), progress=False, pool=pool)
    np.testing.assert_array_equal(serial.samples, threaded.samples)
    np.testing.assert_array_equal(serial.log_density, threaded.log_density)


# --------------------------------------------------------------------------------------------
# inputs


def test_labels_and_dtypes():
    rng = np.random.default_rng(rng_seed(11))
    X, y, q = random_problem(rng, 200, 3)
    base = LogisticRegression(X, y).potential(q)
    for labels in (2 * y - 1, (2 * y - 1).astype(int), y.astype(bool), y.astype(np.int8),
                   list(y), y.astype(np.float32)):
        assert LogisticRegression(X, labels).potential(q) == base
    # a single class, in either coding
    ones = LogisticRegression(X, np.ones(200)).potential(q)
    assert LogisticRegression(X, np.ones(200, dtype=bool)).potential(q) == ones
    zeros = LogisticRegression(X, np.zeros(200)).potential(q)
    assert LogisticRegression(X, -np.ones(200)).potential(q) == zeros
    # X: any layout / dtype, copied to C order
    for X_like in (np.asfortranarray(X), X.tolist()):
        np.testing.assert_allclose(LogisticRegression(X_like, y).potential(q), base, rtol=1e-15)
    wide = np.repeat(X, 2, axis=1)
    np.testing.assert_allclose(LogisticRegression(wide[:, ::2], y).potential(q), base,
                               rtol=1e-15)
    read_only = X.copy()
    read_only.setflags(write=False)
    assert LogisticRegression(read_only, y).potential(q) == base
    Xi = rng.integers(-3, 4, size=(50, 2))
    yi = rng.integers(0, 2, size=50)
    qi = np.array([0.3, -0.2])
    check_against_reference(LogisticRegression(Xi, yi), qi)


@pytest.mark.parametrize("X_change,y_change,kwargs", [
    (lambda X: np.where(np.arange(X.size).reshape(X.shape) == 5, np.nan, X), None, {}),
    (lambda X: np.where(np.arange(X.size).reshape(X.shape) == 5, np.inf, X), None, {}),
    (lambda X: X[:, 0], None, {}),                        # 1-d X
    (lambda X: X[None], None, {}),                        # 3-d X
    (lambda X: X[:0], lambda y: y[:0], {}),               # no rows
    (lambda X: X[:, :0], None, {}),                       # no columns
    (None, lambda y: y[:-1], {}),                         # wrong length
    (None, lambda y: y[:, None], {}),                     # wrong shape
    (None, lambda y: np.where(np.arange(y.size) == 3, 2.0, y), {}),    # label 2
    (None, lambda y: np.where(np.arange(y.size) == 3, -1.0, y), {}),   # {-1, 0, 1}
    (None, lambda y: np.where(np.arange(y.size) == 3, 0.5, y), {}),
    (None, lambda y: np.where(np.arange(y.size) == 3, np.nan, y), {}),
    (None, None, dict(prior_variance=0.0)),
    (None, None, dict(prior_variance=-1.0)),
    (None, None, dict(prior_variance=np.nan)),
    (None, None, dict(prior_variance=np.inf)),
    (None, None, dict(n_threads=0)),
    (None, None, dict(n_threads=-2)),
    (None, None, dict(n_threads=1.5)),
])
def test_bad_inputs(X_change, y_change, kwargs):
    rng = np.random.default_rng(rng_seed(12))
    X, y, _ = random_problem(rng, 20, 3)
    X = X_change(X) if X_change else X
    y = y_change(y) if y_change else y
    with pytest.raises(ValueError):
        LogisticRegression(X, y, **kwargs)


def test_point_of_wrong_shape():
    rng = np.random.default_rng(rng_seed(13))
    X, y, _ = random_problem(rng, 20, 3)
    model = LogisticRegression(X, y)
    for bad in (np.zeros(2), np.zeros(4), np.zeros((3, 1)), np.zeros((1, 3))):
        for method in (model.potential, model.potential_and_gradient, model.fisher_metric):
            with pytest.raises(ValueError):
                method(bad)


# --------------------------------------------------------------------------------------------
# test twins of the row kernel's pieces (_logistic_block.h)


def twin(name):
    return getattr(_logistic, name)


def test_exp_nonpositive_twin():
    exp_nonpositive = twin("_exp_nonpositive_memview")
    rng = np.random.default_rng(rng_seed(14))
    x = np.concatenate([np.linspace(-708.0, 0.0, 100_001), -rng.exponential(5.0, 50_000),
                        [0.0, -0.0, -1e-300, -5e-324, -708.0]])
    np.testing.assert_allclose(exp_nonpositive(x), np.exp(x), rtol=4e-16, atol=0)
    assert np.all(exp_nonpositive(np.array([0.0, -0.0])) == 1.0)
    # below -708 the argument is clamped: tiny, positive, finite, never NaN
    far = exp_nonpositive(np.array([-708.5, -745.0, -800.0, -1e10, -np.inf]))
    assert np.all(np.isfinite(far)) and np.all((far > 0) & (far <= np.exp(-708.0) * (1 + 1e-15)))


@pytest.mark.parametrize("n", [1, 63, 64, 65, 1000])
@pytest.mark.parametrize("want_residual", [False, True])
def test_logistic_block_twin(n, want_residual):
    block = twin("_logistic_block_memview")
    rng = np.random.default_rng(n)
    eta = rng.standard_normal(n) * rng.choice([0.1, 1.0, 30.0, 800.0], size=n)
    y = (rng.uniform(size=n) < 0.5).astype(float)
    terms = np.logaddexp(0.0, np.where(y == 1, -eta, eta))
    residual = np.where(y == 1, -special.expit(-eta), special.expit(eta))
    work = eta.copy()
    total = block(work, y, want_residual)
    assert abs(total - terms.sum()) <= RTOL * terms.sum() + 1e-15 * n
    if want_residual:
        np.testing.assert_allclose(work, residual, rtol=1e-13, atol=3e-16)
    else:
        np.testing.assert_array_equal(work, eta)


# --------------------------------------------------------------------------------------------
# sampling the posterior (2-d, against quadrature)


def grid_posterior_moments(model, center, scale, points=401):
    """Posterior mean and covariance of a 2-d model by quadrature on a +-8 sd grid."""
    u = np.linspace(-8, 8, points)
    b0, b1 = np.meshgrid(center[0] + scale[0] * u, center[1] + scale[1] * u, indexing="ij")
    B = np.stack([b0.ravel(), b1.ravel()], axis=1)
    eta = B @ model.X.T                                     # (grid, rows)
    U = np.logaddexp(0.0, np.where(model.y == 1, -eta, eta)).sum(1)
    U += np.sum(B ** 2, 1) / (2 * model.prior_variance)
    w = np.exp(-(U - U.min()))
    w /= w.sum()
    mean = w @ B
    cov = (B - mean).T @ ((B - mean) * w[:, None])
    return mean, cov


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_hmc_recovers_quadrature_posterior(seed):
    rng = np.random.default_rng(100 + seed)
    n = 80
    X = np.column_stack([np.ones(n), rng.standard_normal(n)])
    y = (rng.uniform(size=n) < special.expit(X @ np.array([0.5, -1.0]))).astype(float)
    model = LogisticRegression(X, y, prior_variance=10.0)
    # center/scale of the grid from a few Newton steps (the Laplace approximation)
    b = np.zeros(2)
    for _ in range(30):
        b = b - np.linalg.solve(model.fisher_metric(b), model.potential_and_gradient(b)[1])
    scale = np.sqrt(np.diag(np.linalg.inv(model.fisher_metric(b))))
    mean, cov = grid_posterior_moments(model, b, scale)
    res = HMC(model, n_steps=8).sample(3000, tune=700, chains=2, rng=seed, progress=False)
    check_mean(res.samples, mean)
    check_covariance(res.samples, mean, cov)


# --------------------------------------------------------------------------------------------
# the simulated data set


@pytest.mark.parametrize("n,dim", [(1, 1), (7, 2), (20_000, 6)])
def test_simulated_logistic(n, dim):
    X, y, beta = simulated_logistic(n=n, dim=dim, rng=rng_seed(3))
    assert X.shape == (n, dim) and y.shape == (n,) and beta.shape == (dim,)
    assert X.dtype == y.dtype == beta.dtype == np.float64
    assert np.all(X[:, 0] == 0.1)
    assert set(np.unique(y)) <= {0.0, 1.0}
    assert np.all((beta >= 0) & (beta <= 1))
    if n >= 1000 and dim > 1:
        other = X[:, 1:]
        # N(0, 0.01): sd 0.1; the sd of a sample sd is 0.1 / sqrt(2 n)
        assert np.all(np.abs(other.std(axis=0) - 0.1) < 5 * 0.1 / np.sqrt(2 * n))
        assert np.all(np.abs(other.mean(axis=0)) < 5 * 0.1 / np.sqrt(n))
        p = special.expit(X @ beta)
        assert abs(y.mean() - p.mean()) < 5 * np.sqrt(np.mean(p * (1 - p)) / n)
        assert abs(np.corrcoef(other[:, 0], other[:, 1])[0, 1]) < 5 / np.sqrt(n)
    # reproducible, and a usable model
    X2, y2, beta2 = simulated_logistic(n=n, dim=dim, rng=rng_seed(3))
    np.testing.assert_array_equal(X, X2)
    np.testing.assert_array_equal(y, y2)
    np.testing.assert_array_equal(beta, beta2)
    check_against_reference(LogisticRegression(X, y), beta)


def test_simulated_logistic_defaults_and_errors():
    X, y, beta = simulated_logistic(rng=np.random.default_rng(rng_seed(0)))
    assert X.shape == (100_000, 50) and beta.shape == (50,)
    a = simulated_logistic(n=10, dim=3, rng=np.random.SeedSequence(rng_seed(4)))
    b = simulated_logistic(n=10, dim=3, rng=rng_seed(4))
    np.testing.assert_array_equal(a[0], b[0])
    assert not np.array_equal(simulated_logistic(n=10, dim=3, rng=rng_seed(5))[0], b[0])
    for bad in (dict(n=0), dict(dim=0), dict(n=2.5), dict(dim=True), dict(n=-1)):
        with pytest.raises(ValueError):
            simulated_logistic(**{**dict(n=10, dim=3), **bad})


def test_openmp_flag_is_a_bool():
    assert isinstance(LogisticRegression.openmp_enabled, bool)
    assert isinstance(rnshmc.models.LogisticRegression.openmp_enabled, bool)
