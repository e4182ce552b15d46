"""Riemannian metrics (rnshmc._kernels._riemann): G(q), its log-determinant term, the
gradient of 1/2 log det G and nu_i = r^T dG/dq_i r against brute-force references (G built in
NumPy, derivatives by central finite differences of the metric itself), for the logistic
Fisher metric, the random-network Hessian (full and diagonal, with and without SoftAbs) and a
user's callable metric; the momentum draw's covariance; clear errors for an indefinite metric.
"""
import numpy as np
import pytest
from scipy import special

from rnshmc._kernels._riemann import CallableMetric, LinearPredictorMetric
from testkit import rng_seed


def effective_metric(raw, softabs, diagonal):
    """The metric after SoftAbs, in NumPy."""
    if diagonal:
        g = raw if softabs == 0 else raw / np.tanh(softabs * raw)
        return np.diag(g)
    if softabs == 0:
        return raw
    lam, Q = np.linalg.eigh(raw)
    return (Q * (lam / np.tanh(softabs * lam))) @ Q.T


def network_hessian(A, b, v, q, activation="softplus"):
    pre = A @ q + b
    s = special.expit(pre)
    curv = {"softplus": s * (1 - s), "sigmoid": s * (1 - s) * (1 - 2 * s),
            "tanh": -2 * np.tanh(pre) * (1 - np.tanh(pre) ** 2)}[activation]
    return (A.T * (v * curv)) @ A


def numerical_derivatives(metric, q, h=1e-5):
    """dG/dq_i of the metric as used (after SoftAbs), by central differences: (d, d, d)."""
    d = q.size
    out = np.empty((d, d, d))
    for i in range(d):
        e = np.zeros(d)
        e[i] = h
        out[i] = (metric.metric(q + e) - metric.metric(q - e)) / (2 * h)
    return out


def check_derivative_terms(metric, q, p, rtol=1e-6):
    """1/2 log det G, its gradient and nu against NumPy and finite differences."""
    G = metric.metric(q)
    hld, grad_hld = metric.log_det_terms(q)
    sign, logdet = np.linalg.slogdet(G)
    assert sign > 0
    assert hld == pytest.approx(0.5 * logdet, rel=1e-10, abs=1e-10)
    dG = numerical_derivatives(metric, q)
    expected_grad = 0.5 * np.einsum("ab,iba->i", np.linalg.inv(G), dG)
    np.testing.assert_allclose(grad_hld, expected_grad, rtol=rtol, atol=rtol * np.abs(expected_grad).max())
    r = np.linalg.solve(G, p)
    expected_nu = np.einsum("a,iab,b->i", r, dG, r)
    nu = metric.nu_at(q, p)
    np.testing.assert_allclose(nu, expected_nu, rtol=rtol, atol=rtol * np.abs(expected_nu).max())
    np.testing.assert_allclose(metric.velocity_at(q, p), r, rtol=1e-9)


@pytest.fixture
def logistic_data():
    rng = np.random.default_rng(rng_seed(0))
    X = rng.standard_normal((500, 4))
    return X


def test_fisher_metric_equals_the_model(logistic_data):
    import rnshmc
    X = logistic_data
    y = (np.random.default_rng(rng_seed(1)).random(X.shape[0]) < 0.4).astype(float)
    model = rnshmc.models.LogisticRegression(X, y, prior_variance=10.0)
    metric = LinearPredictorMetric(X, "logistic", prior_precision=0.1)
    q = np.array([0.3, -0.2, 0.5, 0.1])
    np.testing.assert_allclose(metric.metric(q), model.fisher_metric(q), rtol=1e-12)
    pi = special.expit(X @ q)
    np.testing.assert_allclose(metric.metric(q), (X.T * (pi * (1 - pi))) @ X + 0.1 * np.eye(4),
                               rtol=1e-12)


@pytest.mark.parametrize("seed", [0, 1])
def test_fisher_metric_derivatives(logistic_data, seed):
    rng = np.random.default_rng(seed)
    metric = LinearPredictorMetric(logistic_data, "logistic", prior_precision=0.01)
    q = 0.5 * rng.standard_normal(4)
    check_derivative_terms(metric, q, rng.standard_normal(4))


def random_network(seed, s=60, d=4):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((s, d)), rng.standard_normal(s), rng.standard_normal(s)


@pytest.mark.parametrize("activation, softabs", [("softplus", 0.0), ("softplus", 0.7),
                                                  ("sigmoid", 0.7), ("tanh", 0.7)])
@pytest.mark.parametrize("diagonal", [False, True])
def test_network_hessian_metric(activation, diagonal, softabs):
    """Positive output weights make the softplus Hessian positive definite (needed without
    SoftAbs); with SoftAbs the weights have both signs, so the Hessian is indefinite."""
    A, b, v = random_network(3)
    if softabs == 0.0:
        v = np.abs(v) + 0.5
    metric = LinearPredictorMetric(A, activation, offsets=b, weights=v, diagonal=diagonal,
                                   softabs=softabs)
    rng = np.random.default_rng(rng_seed(4))
    q = 0.3 * rng.standard_normal(4)
    H = network_hessian(A, b, v, q, activation)
    raw = np.diag(H) if diagonal else H
    np.testing.assert_allclose(metric.raw_metric(q), raw, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(metric.metric(q), effective_metric(raw, softabs, diagonal),
                               rtol=1e-9, atol=1e-12)
    if softabs:
        assert np.linalg.eigvalsh(H).min() < 0 or diagonal  # the case SoftAbs exists for
    check_derivative_terms(metric, q, rng.standard_normal(4), rtol=2e-6)


def test_softabs_with_nearly_repeated_eigenvalues():
    """Equal eigenvalues take the divided difference's limit f'(lam): no 0/0."""
    def G(q):
        return np.diag([1.0 + q[0] ** 2, 1.0 + q[1] ** 2, 2.0])

    def dG(q):
        out = np.zeros((3, 3, 3))
        out[0, 0, 0] = 2 * q[0]
        out[1, 1, 1] = 2 * q[1]
        return out

    metric = CallableMetric(3, G, dG, softabs=2.0)
    q = np.array([0.3, 0.3 + 1e-12, 0.0])
    check_derivative_terms(metric, q, np.array([0.5, -1.0, 0.7]), rtol=1e-5)


def banana_metric_callables():
    """A smooth metric varying strongly with q: G = I + 4 u u^T, u = (q1, 1, q2^2)."""
    def G(q):
        u = np.array([q[0], 1.0, q[1] ** 2])
        return np.eye(3) + 4 * np.outer(u, u)

    def dG(q):
        u = np.array([q[0], 1.0, q[1] ** 2])
        du = np.zeros((3, 3))
        du[0, 0] = 1.0
        du[1, 2] = 2 * q[1]
        return 4 * (np.einsum("ia,b->iab", du, u) + np.einsum("a,ib->iab", u, du))

    return G, dG


@pytest.mark.parametrize("softabs", [0.0, 1.5])
def test_callable_metric(softabs):
    G, dG = banana_metric_callables()
    metric = CallableMetric(3, G, dG, softabs=softabs)
    q = np.array([0.4, -0.8, 0.2])
    np.testing.assert_allclose(metric.metric(q), effective_metric(G(q), softabs, False), rtol=1e-10)
    check_derivative_terms(metric, q, np.array([1.0, 0.3, -0.6]))


@pytest.mark.parametrize("kind", ["cholesky", "softabs", "diagonal"])
def test_momentum_covariance_is_the_metric(kind):
    A, b, v = random_network(5)
    v = np.abs(v) + 0.5
    metric = LinearPredictorMetric(A, "softplus", offsets=b, weights=v,
                                   diagonal=kind == "diagonal",
                                   softabs=1.0 if kind == "softabs" else 0.0)
    q = np.array([0.1, -0.2, 0.3, 0.0])
    p = metric.draw_at(q, np.random.default_rng(rng_seed(6)), 40000)
    G = metric.metric(q)
    cov = np.cov(p.T)
    scale = np.sqrt(np.outer(np.diag(G), np.diag(G)))
    # entrywise standard error of a sample covariance ~ scale * sqrt(2 / n)
    assert np.all(np.abs(cov - G) < 6 * scale * np.sqrt(2 / p.shape[0]))


def test_indefinite_metric_raises_a_clear_error():
    A, b, v = random_network(7)
    metric = LinearPredictorMetric(A, "tanh", offsets=b, weights=v,
                                   description="the surrogate's Hessian")
    with pytest.raises(ValueError, match=r"the surrogate's Hessian is not positive definite at "
                                         r"q = .*softabs"):
        metric.metric(np.zeros(4))
    diag = LinearPredictorMetric(A, "tanh", offsets=b, weights=-np.abs(v), diagonal=True)
    with pytest.raises(ValueError, match="diagonal entry"):
        diag.metric(np.zeros(4))


def test_callable_metric_bad_output():
    metric = CallableMetric(2, lambda q: np.ones((3, 3)), lambda q: np.zeros((2, 2, 2)))
    with pytest.raises(ValueError, match=r"returned shape \(3, 3\)"):
        metric.metric(np.zeros(2))
    asym = CallableMetric(2, lambda q: np.array([[2.0, 1.0], [0.0, 2.0]]),
                          lambda q: np.zeros((2, 2, 2)))
    with pytest.raises(ValueError, match="not symmetric"):
        asym.metric(np.zeros(2))
    nan = CallableMetric(2, lambda q: np.full((2, 2), np.nan), lambda q: np.zeros((2, 2, 2)))
    with pytest.raises(FloatingPointError, match="not defined"):
        nan.metric(np.zeros(2))
    with pytest.raises(TypeError):
        CallableMetric(2, None, None)


@pytest.mark.parametrize("element", ["P1", "Q1"])
@pytest.mark.parametrize("softabs", [0.0, 0.5])
def test_gauss_newton_metric(element, softabs):
    import rnshmc
    from rnshmc._kernels._fem import GaussNewtonMetric
    from rnshmc.targets import as_ctarget
    model = rnshmc.models.EllipticPDE(n=8, element=element, n_modes=4, rng=rng_seed(0))
    metric = GaussNewtonMetric(as_ctarget(model, 4), softabs=softabs)
    q = np.array([0.3, -0.2, 0.1, 0.4])
    G = model.gauss_newton_metric(q)
    np.testing.assert_allclose(metric.raw_metric(q), G, rtol=1e-10)
    np.testing.assert_allclose(metric.metric(q), effective_metric(G, softabs, False), rtol=1e-9)
    check_derivative_terms(metric, q, np.array([0.5, -1.0, 0.2, 0.8]), rtol=1e-5)
    with pytest.raises(FloatingPointError, match="not defined"):
        metric.metric(np.full(4, 1e3))
