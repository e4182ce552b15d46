"""HMC: the C leapfrog/transition kernel (rnshmc._kernels._hmc), the HMC front end
(rnshmc.samplers.hmc) and the warm-up adaptation (rnshmc.adaptation).

* the integrator against closed forms: for a Gaussian target U = x^T P x / 2 (x = q - mean) the
  leapfrog map conserves the modified energy  H~ = H - eps^2/8 * grad U^T M^-1 grad U  exactly,
  so  H(end) - H(start) = eps^2/8 (|grad U(end)|^2_{M^-1} - |grad U(start)|^2_{M^-1});
* reversibility, the exact flow for small eps (O(eps^2) global error), momentum covariance;
* statistical tests on targets with known moments, with ESS-based Monte Carlo errors, for
  several seeds (fixed seeds: a pass is deterministic, and the tolerances leave a margin so
  that other seeds pass too);
* a power check showing the moment test does fail for chains with a broken accept rule;
* reproducibility, parallel chains, divergences, input validation, adaptation, result fields.
"""
import concurrent.futures
import math
import multiprocessing
import os
import warnings

import numpy as np
import pytest
import scipy.linalg
from scipy import special, stats

import rnshmc
from rnshmc import HMC, Target
from rnshmc._kernels._hmc import HMCKernel
from rnshmc._kernels._targets import PyCallableTarget
from rnshmc.adaptation import DualAveraging, RunningVariance, WarmupSchedule, initial_step_size
from rnshmc.models import LogisticRegression
from rnshmc.targets import as_ctarget

SEEDS = [0, 1, 2]
# more seeds for the statistical tests, in the slow suite (pytest -m slow)
SLOW_SEEDS = [pytest.param(seed, marks=pytest.mark.slow) for seed in range(3, 11)]


# ============================================================================================
# helpers


def gaussian_target(mean, precision, dim=True):
    """N(mean, precision^{-1}) as an rnshmc.Target from one Python value-and-gradient callable."""
    mean = np.asarray(mean, dtype=np.float64)
    precision = np.asarray(precision, dtype=np.float64)

    def gaussian_logp_and_grad(q):
        x = q - mean
        g = precision @ x
        return -0.5 * (x @ g), -g

    return Target(None, logp_and_grad=gaussian_logp_and_grad, dim=mean.size if dim else None)


def make_random_covariance(rng, dim, condition):
    """Random SPD matrix with eigenvalues log-spaced over [1, condition] (condition number
    exactly ``condition``) in a Haar-random orthonormal basis."""
    Q, R = np.linalg.qr(rng.standard_normal((dim, dim)))
    Q = Q * np.sign(np.diag(R))
    eigenvalues = np.geomspace(1.0, condition, dim)
    rng.shuffle(eigenvalues)
    cov = (Q * eigenvalues) @ Q.T
    return 0.5 * (cov + cov.T)


def harmonic_target(dim=3):
    """U(q) = q^T q / 2 from two separate Python callables (logp and grad_logp)."""
    def harmonic_logp(q):
        return -0.5 * float(q @ q)

    def harmonic_grad(q):
        return -q

    return Target(harmonic_logp, grad_logp=harmonic_grad, dim=dim)


def make_kernel(target, dim, inverse_mass=None, test=None, max_energy_error=1000.0):
    kernel = HMCKernel(as_ctarget(target, dim), test=test, max_energy_error=max_energy_error)
    kernel.set_inverse_mass(inverse_mass)
    return kernel


def run_kernel(kernel, generator, n, step_size, n_steps, jitter=False):
    """kernel.run with freshly allocated outputs; returns them as a dict."""
    d = kernel.dim
    out = dict(samples=np.empty((n, d)), log_density=np.empty(n),
               accepted=np.empty(n, np.uint8), accept_prob=np.empty(n),
               diverging=np.empty(n, np.uint8), energy=np.empty(n),
               n_steps=np.empty(n, np.int64))
    kernel.run(generator, n, step_size, n_steps, jitter, *out.values())
    return out


def inverse_mass_matrix(kind, covariance):
    """None (identity), the diagonal of the covariance, or the covariance itself."""
    if kind == "identity":
        return None
    if kind == "diagonal":
        return np.diag(covariance).copy()
    return covariance.copy()


def dense_inverse_mass(inverse_mass, dim):
    if inverse_mass is None:
        return np.eye(dim)
    inverse_mass = np.asarray(inverse_mass)
    return np.diag(inverse_mass) if inverse_mass.ndim == 1 else inverse_mass


def gaussian_problem(seed, dim=10, condition=30.0):
    """Correlated Gaussian: random SPD covariance with condition number 30, nonzero mean."""
    rng = np.random.default_rng(1000 + seed)
    cov = make_random_covariance(rng, dim, condition)
    mean = rng.normal(0.0, 3.0, size=dim)
    return mean, cov, np.linalg.inv(cov)


def sample(target, draws=500, tune=0, chains=1, rng=0, **kwargs):
    init = kwargs.pop("init", None)
    pool = kwargs.pop("pool", None)
    return HMC(target, **kwargs).sample(draws, tune=tune, chains=chains, rng=rng, init=init,
                                        progress=False, pool=pool)


def assert_same_result(a, b):
    for key in ("samples", "log_density", "accepted", "accept_prob", "diverging", "energy",
                "n_steps", "step_size", "n_gradient_evals", "n_density_evals"):
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    if a.inverse_mass_matrix is None:
        assert b.inverse_mass_matrix is None
    else:
        np.testing.assert_array_equal(a.inverse_mass_matrix, b.inverse_mass_matrix)


# ============================================================================================
# the leapfrog integrator


def hamiltonian(U, p, inverse_mass):
    return U + 0.5 * p @ inverse_mass @ p


def step_by_step(kernel, q, p, eps, n):
    """n successive one-step leapfrog calls: (positions, momenta, potentials) incl. the start."""
    qs, ps, Us = [q], [p], []
    for _ in range(n):
        q, p, U, _ = kernel.leapfrog(q, p, eps, 1)
        qs.append(q), ps.append(p), Us.append(U)
    return np.array(qs), np.array(ps), np.array(Us)


@pytest.mark.parametrize("eps", [0.05, 0.2, 0.7, 1.5])
def test_leapfrog_harmonic_energy_error_is_the_modified_energy(eps):
    """U = |q|^2/2, M = I: the leapfrog conserves H~ = |p|^2/2 + (1 - eps^2/4)|q|^2/2, so
    dH_n = eps^2/8 (|q_n|^2 - |q_0|^2) exactly, and |dH_n| <= eps^2/4 H~ / (1 - eps^2/4) for
    every n: bounded over an arbitrarily long trajectory (no drift)."""
    rng = np.random.default_rng(1)
    kernel = make_kernel(harmonic_target(3), 3)
    q0, p0 = rng.standard_normal(3), rng.standard_normal(3)
    n = 1000
    qs, ps, Us = step_by_step(kernel, q0, p0, eps, n)
    H0 = 0.5 * q0 @ q0 + 0.5 * p0 @ p0
    dH = Us + 0.5 * np.sum(ps[1:] ** 2, axis=1) - H0
    predicted = eps ** 2 / 8 * (np.sum(qs[1:] ** 2, axis=1) - q0 @ q0)
    np.testing.assert_allclose(dH, predicted, rtol=0, atol=1e-11 * H0)
    H_modified = 0.5 * p0 @ p0 + (1 - eps ** 2 / 4) * 0.5 * q0 @ q0
    bound = eps ** 2 / 4 * H_modified / (1 - eps ** 2 / 4)
    assert np.max(np.abs(dH)) <= bound * (1 + 1e-9)
    # the potential returned is U at the returned position
    np.testing.assert_allclose(Us, 0.5 * np.sum(qs[1:] ** 2, axis=1), rtol=1e-14)
    # one call of n steps (gradient cached between steps) == n calls of one step, bit for bit
    q_n, p_n, U_n, U_test_n = kernel.leapfrog(q0, p0, eps, n)
    np.testing.assert_array_equal(q_n, qs[-1])
    np.testing.assert_array_equal(p_n, ps[-1])
    assert U_n == Us[-1] == U_test_n


def test_leapfrog_energy_error_scales_as_eps_squared():
    rng = np.random.default_rng(2)
    kernel = make_kernel(harmonic_target(2), 2)
    q0, p0 = rng.standard_normal(2), rng.standard_normal(2)
    H0 = 0.5 * (q0 @ q0 + p0 @ p0)
    worst = []
    for eps in (0.2, 0.1, 0.05):
        n = int(round(60.0 / eps))  # the same physical time, ~10 periods
        _, ps, Us = step_by_step(kernel, q0, p0, eps, n)
        worst.append(np.max(np.abs(Us + 0.5 * np.sum(ps[1:] ** 2, axis=1) - H0)))
    ratios = np.array(worst[:-1]) / np.array(worst[1:])
    assert np.all((ratios > 3.6) & (ratios < 4.4)), ratios


def exact_flow(q0, p0, precision, inverse_mass, mean, T):
    """Exact solution of dx/dt = M^-1 p, dp/dt = -P x (x = q - mean) at time T."""
    d = q0.size
    generator = np.block([[np.zeros((d, d)), inverse_mass], [-precision, np.zeros((d, d))]])
    z = scipy.linalg.expm(T * generator) @ np.concatenate([q0 - mean, p0])
    return z[:d] + mean, z[d:]


def test_leapfrog_harmonic_matches_exact_solution():
    """q(T) = q0 cos T + p0 sin T, p(T) = p0 cos T - q0 sin T; global error O(eps^2) with the
    harmonic-oscillator constant: phase error T eps^2/24 plus the eps^2/8 distortion of the
    conserved ellipse."""
    rng = np.random.default_rng(3)
    kernel = make_kernel(harmonic_target(3), 3)
    q0, p0 = rng.standard_normal(3), rng.standard_normal(3)
    T = 1.3
    radius = np.sqrt(q0 @ q0 + p0 @ p0)
    errors = []
    for n in (50, 100, 200, 400):
        eps = T / n
        q, p, _, _ = kernel.leapfrog(q0, p0, eps, n)
        qe, pe = q0 * np.cos(T) + p0 * np.sin(T), p0 * np.cos(T) - q0 * np.sin(T)
        err = np.sqrt(np.sum((q - qe) ** 2) + np.sum((p - pe) ** 2))
        assert err <= 1.5 * radius * eps ** 2 * (T / 24 + 1 / 8)
        errors.append(err)
    ratios = np.array(errors[:-1]) / np.array(errors[1:])
    assert np.all((ratios > 3.9) & (ratios < 4.1)), ratios


MASS_KINDS = ["identity", "diagonal", "dense"]


def gaussian_for_leapfrog(kind, seed=4, dim=5):
    """A dense-precision Gaussian as an rnshmc.Target and an inverse mass of the given kind
    that is deliberately *not* the covariance (so the mass matters)."""
    rng = np.random.default_rng(seed)
    cov = make_random_covariance(rng, dim, 20.0)
    mean = rng.normal(0, 2, dim)
    P = np.linalg.inv(cov)
    if kind == "identity":
        inv_mass = None
    elif kind == "diagonal":
        inv_mass = rng.uniform(0.3, 3.0, dim)
    else:
        inv_mass = make_random_covariance(rng, dim, 10.0)
    return gaussian_target(mean, P), mean, P, inv_mass


@pytest.mark.parametrize("kind", MASS_KINDS)
def test_leapfrog_gaussian_modified_energy_with_mass(kind):
    """dH_n = eps^2/8 (g_n^T M^-1 g_n - g_0^T M^-1 g_0), g = P (q - mean), for identity, diagonal
    and dense inverse mass (set_inverse_mass); and the closed-form bound
    |dH_n| <= eps^2 lam H~ / (4 (1 - eps^2 lam / 4)), lam = max eig(M^-1 P), over 1500 steps."""
    target, mean, P, inv_mass = gaussian_for_leapfrog(kind)
    d = mean.size
    Minv = dense_inverse_mass(inv_mass, d)
    kernel = make_kernel(target, d, inv_mass)
    lam = np.max(np.linalg.eigvals(Minv @ P).real)
    eps = 1.0 / np.sqrt(lam)  # half the stability limit 2 / sqrt(lam)
    rng = np.random.default_rng(5)
    q0 = mean + rng.standard_normal(d)
    p0 = np.linalg.cholesky(np.linalg.inv(Minv)) @ rng.standard_normal(d)
    qs, ps, Us = step_by_step(kernel, q0, p0, eps, 1500)
    H0 = hamiltonian(0.5 * (q0 - mean) @ P @ (q0 - mean), p0, Minv)
    H = np.array([hamiltonian(U, p, Minv) for U, p in zip(Us, ps[1:])])
    g = (qs - mean) @ P
    a = np.einsum("ni,ij,nj->n", g, Minv, g)
    np.testing.assert_allclose(H - H0, eps ** 2 / 8 * (a[1:] - a[0]), rtol=0, atol=1e-10 * H0)
    H_modified = H0 - eps ** 2 / 8 * a[0]
    bound = eps ** 2 * lam * H_modified / (4 * (1 - eps ** 2 * lam / 4))
    assert np.max(np.abs(H - H0)) <= bound * (1 + 1e-9)


@pytest.mark.parametrize("kind", MASS_KINDS)
def test_leapfrog_gaussian_matches_exact_flow(kind):
    target, mean, P, inv_mass = gaussian_for_leapfrog(kind, seed=6)
    d = mean.size
    Minv = dense_inverse_mass(inv_mass, d)
    kernel = make_kernel(target, d, inv_mass)
    rng = np.random.default_rng(7)
    q0, p0 = mean + rng.standard_normal(d), rng.standard_normal(d)
    T = 0.8
    qe, pe = exact_flow(q0, p0, P, Minv, mean, T)
    errors = []
    for n in (100, 200, 400):
        q, p, _, _ = kernel.leapfrog(q0, p0, T / n, n)
        errors.append(np.sqrt(np.sum((q - qe) ** 2) + np.sum((p - pe) ** 2)))
    ratios = np.array(errors[:-1]) / np.array(errors[1:])
    assert np.all((ratios > 3.8) & (ratios < 4.2)), ratios
    assert errors[-1] < 1e-3 * np.sqrt(q0 @ q0 + p0 @ p0)


def log_gamma_target(shape=2.0):
    """x = log(Y), Y ~ Gamma(shape, 1): log p(x) = shape x - e^x (skewed, non-Gaussian)."""
    def log_gamma_logp_and_grad(q):
        e = np.exp(q[0])
        return shape * q[0] - e, np.array([shape - e])
    return Target(None, logp_and_grad=log_gamma_logp_and_grad, dim=1)


@pytest.mark.parametrize("case", ["harmonic", "log-gamma"] + [f"gaussian-{k}" for k in MASS_KINDS])
def test_leapfrog_is_reversible(case):
    """L steps forward, negate p, L steps back: the start again, to 1e-10."""
    rng = np.random.default_rng(8)
    if case == "harmonic":
        kernel, q0, eps = make_kernel(harmonic_target(4), 4), rng.standard_normal(4), 0.3
    elif case == "log-gamma":
        kernel, q0, eps = make_kernel(log_gamma_target(), 1), np.array([0.3]), 0.2
    else:
        target, mean, P, inv_mass = gaussian_for_leapfrog(case.split("-")[1], seed=9)
        Minv = dense_inverse_mass(inv_mass, mean.size)
        eps = 1.2 / np.sqrt(np.max(np.linalg.eigvals(Minv @ P).real))
        kernel = make_kernel(target, mean.size, inv_mass)
        q0 = mean + rng.standard_normal(mean.size)
    p0 = rng.standard_normal(q0.size)
    q1, p1, U1, _ = kernel.leapfrog(q0, p0, eps, 200)
    assert not np.allclose(q1, q0)
    q2, p2, U2, _ = kernel.leapfrog(q1, -p1, eps, 200)
    scale = 1.0 + np.max(np.abs(q0)) + np.max(np.abs(p0))
    np.testing.assert_allclose(q2, q0, rtol=0, atol=1e-10 * scale)
    np.testing.assert_allclose(-p2, p0, rtol=0, atol=1e-10 * scale)


def test_leapfrog_leaves_the_chain_state_alone():
    kernel = make_kernel(log_gamma_target(), 1)
    kernel.set_position([0.25])
    before = (kernel.position, kernel.gradient, kernel.log_density)
    grads = kernel.n_gradient_evals
    kernel.leapfrog(np.array([-1.0]), np.array([0.7]), 0.1, 12)
    assert kernel.n_gradient_evals == grads + 1 + 12  # the start point, then one per step
    np.testing.assert_array_equal(kernel.position, before[0])
    np.testing.assert_array_equal(kernel.gradient, before[1])
    assert kernel.log_density == before[2]
    np.testing.assert_allclose(kernel.gradient, -(2.0 - np.exp(0.25)))  # grad U = -grad logp
    with pytest.raises(ValueError):
        kernel.leapfrog(np.array([0.0]), np.array([1.0, 2.0]), 0.1, 3)


@pytest.mark.parametrize("kind", MASS_KINDS)
def test_momentum_covariance_is_the_mass_matrix(kind):
    """energy_error_of_one_step draws p ~ N(0, M) and takes one step. From the mode of a
    Gaussian (g0 = 0) the energy error is eps^4/8 p^T M^-1 P M^-1 P M^-1 p, whose mean is
    eps^4/8 tr((M^-1 P)^2) exactly when Cov(p) = M (a momentum drawn with the wrong
    covariance, e.g. M^-1 or the wrong Cholesky factor, gives another value)."""
    target, mean, P, inv_mass = gaussian_for_leapfrog(kind, seed=10, dim=4)
    Minv = dense_inverse_mass(inv_mass, mean.size)
    kernel = make_kernel(target, mean.size, inv_mass)
    kernel.set_position(mean)
    eps = 0.5 / np.sqrt(np.max(np.linalg.eigvals(Minv @ P).real))
    generator = np.random.default_rng(11)
    dH = np.array([kernel.energy_error_of_one_step(generator, eps) for _ in range(4000)])
    expected = eps ** 4 / 8 * np.trace(Minv @ P @ Minv @ P)
    assert np.all(dH >= -1e-12 * expected)
    assert abs(dH.mean() - expected) < 5 * dH.std() / np.sqrt(dH.size)
    # the chain state is untouched
    np.testing.assert_array_equal(kernel.position, mean)
    assert kernel.log_density == 0.0


def test_energy_error_of_one_step_is_inf_for_a_divergent_step():
    def spike_logp(q):
        return 0.0 if np.all(q == 0.0) else -np.inf

    def spike_grad(q):
        return np.zeros_like(q)

    kernel = make_kernel(Target(spike_logp, grad_logp=spike_grad, dim=2), 2)
    kernel.set_position(np.zeros(2))
    assert kernel.energy_error_of_one_step(np.random.default_rng(0), 0.5) == np.inf


# ============================================================================================
# gradient caching and evaluation counts


class CountingTarget:
    """BridgeStan-style Gaussian that counts its calls."""

    def __init__(self, dim=3):
        self.dim = dim
        self.density_calls = 0
        self.gradient_calls = 0

    def log_density(self, q):
        self.density_calls += 1
        return -0.5 * float(q @ q)

    def log_density_gradient(self, q):
        self.gradient_calls += 1
        return -0.5 * float(q @ q), -q


@pytest.mark.parametrize("jitter", [False, True])
@pytest.mark.parametrize("chains", [1, 3])
def test_gradient_is_cached(jitter, chains):
    """One gradient per leapfrog step (the end point's gradient is reused for the next step
    and the next iteration) plus one at the initial point, for a fixed step and tune=0."""
    target = CountingTarget()
    res = sample(target, draws=300, chains=chains, step_size=0.4, n_steps=7, jitter=jitter)
    expected = res.n_steps.sum(axis=1) + 1
    np.testing.assert_array_equal(res.n_gradient_evals, expected)
    np.testing.assert_array_equal(res.n_density_evals, expected)  # counted in both
    assert target.gradient_calls == expected.sum()
    assert target.density_calls == 0  # plain HMC never needs a density-only evaluation
    if not jitter:
        assert np.all(res.n_steps == 7)


def test_n_steps_counts_steps_actually_taken_when_diverging():
    def walled_logp_and_grad(q):
        return (-np.inf if q[0] > 1.0 else -0.5 * float(q @ q)), -q

    target = Target(None, logp_and_grad=walled_logp_and_grad, dim=1)
    res = sample(target, draws=500, step_size=1.0, n_steps=8, init=[0.0])
    assert res.diverging.any()
    np.testing.assert_array_equal(res.n_gradient_evals, res.n_steps.sum(axis=1) + 1)


# ============================================================================================
# statistical tests: correlated Gaussian


def gaussian_sampler_settings(mode, kind, cov, P):
    inv_mass = inverse_mass_matrix(kind, cov)
    mass = None if inv_mass is None else (1.0 / inv_mass if inv_mass.ndim == 1 else P.copy())
    if mode == "adapt":
        return dict(step_size=None, mass_matrix=mass, n_steps=10)
    Minv = dense_inverse_mass(inv_mass, cov.shape[0])
    lam = np.max(np.linalg.eigvals(Minv @ P).real)
    return dict(step_size=1.2 / np.sqrt(lam), mass_matrix=mass, n_steps=10, jitter=True)


@pytest.mark.parametrize("seed", SEEDS + SLOW_SEEDS)
@pytest.mark.parametrize("mode", ["adapt", "fixed"])
@pytest.mark.parametrize("kind", MASS_KINDS)
def test_correlated_gaussian_moments(seed, mode, kind, check_mean, check_covariance):
    """10-d Gaussian, condition number 30, nonzero mean.

    Means: |mean - true| < 4.5 MCSE per coordinate (MCSE = sd / sqrt(ESS)).
    Covariances: every entry (55 of them) within 5 MCSE, the MCSE of an entry being that of
    the mean of the products (x_i - mu_i)(x_j - mu_j), from their own ESS (see conftest).
    5 rather than 4.5 because 55 entries x 18 configurations are checked (two-sided normal
    tail at 5 sd: 6e-7 per entry) and ESS estimates of products are noisier. A 20%-of-scale
    error in any entry would be ~10 MCSE at these ESS (>= ~1000).
    """
    mean, cov, P = gaussian_problem(seed)
    settings = gaussian_sampler_settings(mode, kind, cov, P)
    res = sample(gaussian_target(mean, P), draws=1500, tune=1000, chains=2, rng=seed, **settings)
    assert res.diverging.sum() == 0
    assert np.all(res.acceptance_rate > 0.5)
    check_mean(res.samples, mean)
    check_covariance(res.samples, mean, cov)
    if mode == "fixed":
        np.testing.assert_array_equal(res.step_size, settings["step_size"])


# ============================================================================================
# statistical tests: a biased chain must be caught


LOG_GAMMA_SHAPE = 2.0


def log_gamma_statistics(x):
    """Per-draw functions whose means are known for x = log Gamma(2, 1) variates."""
    k = LOG_GAMMA_SHAPE
    m = special.digamma(k)
    functions = np.stack([x, (x - m) ** 2, (x < -1.0) * 1.0, (x > 1.0) * 1.0], axis=-1)
    truth = np.array([m, special.polygamma(1, k), stats.gamma(k).cdf(np.exp(-1.0)),
                      stats.gamma(k).sf(np.e)])
    return functions, truth


@pytest.mark.parametrize("seed", SEEDS + [3, 4] + [pytest.param(seed, marks=pytest.mark.slow)
                                                     for seed in range(5, 15)])
@pytest.mark.parametrize("n_steps,jitter", [(3, False), (10, True)])
def test_non_gaussian_target_large_step(seed, n_steps, jitter, mcse_z):
    """log-Gamma(2) target sampled with a deliberately large step (acceptance ~0.5-0.6):
    mean, variance and two tail probabilities within 4.5 MCSE. Any accept-rule error shows up
    here, because the leapfrog error at this step size is large (see the power check)."""
    res = sample(log_gamma_target(LOG_GAMMA_SHAPE), draws=10_000, tune=200, chains=2, rng=seed,
                 step_size=1.05, n_steps=n_steps, jitter=jitter, init=[0.4])
    assert np.all((res.acceptance_rate > 0.4) & (res.acceptance_rate < 0.7))
    functions, truth = log_gamma_statistics(res.samples[..., 0])
    z, tol = mcse_z(functions, truth)
    assert np.all(np.abs(z) < tol), z


@pytest.mark.parametrize("rule", ["always accept", "inverted comparison", "sign of dH"])
def test_power_check_broken_accept_rules_fail(rule, mcse_z):
    """The same moment check as above on chains built from the same leapfrog with a broken
    Metropolis rule must fail: the statistical test has power against the bugs it is for."""
    kernel = make_kernel(log_gamma_target(LOG_GAMMA_SHAPE), 1)
    generator = np.random.default_rng(0)
    eps, n_steps, draws = 1.05, 3, 3000
    chains = []
    for _ in range(2):
        q = np.array([0.4])
        U = -(LOG_GAMMA_SHAPE * q[0] - np.exp(q[0]))
        draws_ = np.empty(draws)
        for i in range(draws):
            p = generator.standard_normal(1)
            q_new, p_new, U_new, _ = kernel.leapfrog(q, p, eps, n_steps)
            dH = U_new + 0.5 * p_new @ p_new - U - 0.5 * p @ p
            if np.isfinite(dH):
                u = generator.uniform()
                prob = math.exp(min(0.0, -dH))
                accept = {"always accept": True,
                          "inverted comparison": u > prob,
                          "sign of dH": u < math.exp(min(0.0, dH))}[rule]
                if accept:
                    q, U = q_new, U_new
            draws_[i] = q[0]
        chains.append(draws_)
    functions, truth = log_gamma_statistics(np.array(chains))
    z, tol = mcse_z(functions, truth)
    assert np.max(np.abs(z)) > 2 * tol, z


# ============================================================================================
# a surrogate drives the dynamics, the true target decides (HMCKernel(dynamics, test))


def test_surrogate_dynamics_true_metropolis_test(check_mean, check_covariance):
    """Leapfrog driven by a wrong Gaussian (surrogate), Metropolis test on the true one: the
    chain targets the true distribution (the leapfrog is still volume preserving and
    reversible). Also: U_test is evaluated once per transition, density only."""
    true_mean, true_sd = np.array([1.0, -2.0]), np.array([1.0, 0.5])

    def true_logp(q):
        return -0.5 * float(np.sum(((q - true_mean) / true_sd) ** 2))

    true_target = PyCallableTarget(2, logp=true_logp)

    def surrogate_logp_and_grad(q):
        x = (q - 0.8 * true_mean) / (1.3 * true_sd)
        return -0.5 * float(x @ x), -x / (1.3 * true_sd)

    kernel = HMCKernel(PyCallableTarget(2, logp_and_grad=surrogate_logp_and_grad), true_target)
    kernel.set_position(true_mean)
    chains, steps = [], 0
    for c in range(2):
        kernel.set_position(true_mean)
        out = run_kernel(kernel, np.random.default_rng([12, c]), 6000, 0.5, 5, jitter=True)
        np.testing.assert_allclose(out["log_density"],
                                   [true_logp(q) for q in out["samples"]], rtol=1e-12)
        chains.append(out["samples"])
        steps += out["n_steps"].sum()
    samples = np.array(chains)
    check_mean(samples, true_mean)
    check_covariance(samples, true_mean, np.diag(true_sd ** 2))
    # dynamics gradients: one per leapfrog step (+ the 3 starts); test densities: one per
    # transition (+ the starts), and none during the trajectories
    assert kernel.n_gradient_evals == steps + 3
    assert kernel.n_density_evals == 2 * 6000 + 3


def test_kernel_checks():
    t2 = as_ctarget(harmonic_target(2), 2)
    t3 = as_ctarget(harmonic_target(3), 3)
    with pytest.raises(ValueError, match="dim"):
        HMCKernel(t2, t3)
    kernel = HMCKernel(t2)
    with pytest.raises(RuntimeError, match="set_position"):
        run_kernel(kernel, np.random.default_rng(0), 5, 0.1, 3)
    with pytest.raises(RuntimeError, match="set_position"):
        kernel.energy_error_of_one_step(np.random.default_rng(0), 0.1)
    with pytest.raises(ValueError):
        kernel.set_position(np.zeros(3))
    kernel.set_position(np.zeros(2))
    for bad in (0.0, -1.0, np.nan, np.inf):
        with pytest.raises(ValueError):
            run_kernel(kernel, np.random.default_rng(0), 5, bad, 3)
    with pytest.raises(ValueError):
        run_kernel(kernel, np.random.default_rng(0), 5, 0.1, 0)
    for bad in (np.ones(3), -np.ones(2), np.array([1.0, np.nan]),
                np.array([[1.0, 2.0], [0.0, 1.0]]), np.array([[1.0, 2.0], [2.0, 1.0]]),
                np.ones((2, 3))):
        with pytest.raises(ValueError):
            kernel.set_inverse_mass(bad)


# ============================================================================================
# reproducibility and parallel chains


def correlated_target():
    mean, cov, P = gaussian_problem(0, dim=4)
    return gaussian_target(mean, P)


@pytest.mark.parametrize("settings", [dict(), dict(step_size=0.3, jitter=True)],
                         ids=["adapted", "fixed"])
def test_same_seed_same_draws(settings):
    target = correlated_target()
    runs = [sample(target, draws=200, tune=150, chains=2, rng=rng, **settings)
            for rng in (7, 7, np.random.SeedSequence(7), np.random.SeedSequence(7),
                        np.random.default_rng(7), np.random.default_rng(7), np.int64(7))]
    for other in runs[1:]:
        assert_same_result(runs[0], other)


def test_different_seeds_and_chains_differ():
    target = correlated_target()
    a = sample(target, draws=100, tune=50, chains=3, rng=1, step_size=0.3)
    b = sample(target, draws=100, tune=50, chains=3, rng=2, step_size=0.3)
    assert not np.array_equal(a.samples, b.samples)
    for i in range(3):
        for j in range(i):
            assert not np.any(np.all(a.samples[i] == a.samples[j], axis=-1))


def test_one_generator_used_twice_gives_fresh_streams():
    target = correlated_target()
    rng = np.random.default_rng(3)
    a = sample(target, draws=50, chains=2, rng=rng, step_size=0.3)
    b = sample(target, draws=50, chains=2, rng=rng, step_size=0.3)
    assert not np.array_equal(a.samples, b.samples)


@pytest.mark.parametrize("settings", [dict(), dict(step_size=0.3)], ids=["adapted", "fixed"])
def test_thread_pool_equals_serial(settings):
    target = correlated_target()
    serial = sample(target, draws=200, tune=200, chains=3, rng=11, **settings)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        threaded = sample(target, draws=200, tune=200, chains=3, rng=11, pool=pool, **settings)
    assert_same_result(serial, threaded)


def small_logistic_model(n_threads=1):
    X, y, _ = rnshmc.datasets.simulated_logistic(n=3000, dim=4, rng=5)
    return LogisticRegression(X, y, n_threads=n_threads)


def test_thread_pool_equals_serial_c_target():
    """C-level target: each chain gets target.spawn() (own scratch) and the C loop runs
    without the GIL, chains truly in parallel."""
    model = small_logistic_model()
    serial = sample(model, draws=150, tune=100, chains=4, rng=3)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        threaded = sample(model, draws=150, tune=100, chains=4, rng=3, pool=pool)
    assert_same_result(serial, threaded)


def test_process_pool_with_picklable_model():
    model = small_logistic_model()
    serial = sample(model, draws=50, chains=2, rng=4, step_size=0.05, n_steps=5)
    with concurrent.futures.ProcessPoolExecutor(
            2, mp_context=multiprocessing.get_context("spawn")) as pool:
        parallel = sample(model, draws=50, chains=2, rng=4, step_size=0.05, n_steps=5, pool=pool)
    assert_same_result(serial, parallel)


# ============================================================================================
# divergences


def walled_normal(kind, wall=1.0):
    """N(0, 1) in 1-d with the region q > wall made impossible: log density -inf or NaN, or
    a NaN gradient there."""
    def walled_logp_and_grad(q):
        inside = q[0] <= wall
        logp = -0.5 * q[0] ** 2
        grad = -q
        if not inside:
            if kind == "-inf":
                logp = -np.inf
            elif kind == "nan":
                logp = np.nan
            else:
                grad = np.array([np.nan])
        return logp, grad
    return Target(None, logp_and_grad=walled_logp_and_grad, dim=1)


@pytest.mark.parametrize("seed", SEEDS + SLOW_SEEDS[:3])
@pytest.mark.parametrize("kind", ["-inf", "nan", "nan-gradient"])
def test_divergences_are_rejected_and_recorded(seed, kind, mcse_z):
    res = sample(walled_normal(kind), draws=6000, tune=100, chains=2, rng=seed, step_size=1.0,
                 n_steps=8, init=[0.0])
    x = res.samples[..., 0]
    assert res.diverging.mean() > 0.1
    assert np.all(x <= 1.0)                                  # never moved into the region
    assert not np.any(res.accepted & res.diverging)          # a divergence is a rejection
    assert np.all(res.accept_prob[res.diverging] == 0.0)
    assert np.all(np.isfinite(res.log_density)) and np.all(np.isfinite(res.energy))
    # and the chain samples the truncated normal N(0, 1 | q <= 1)
    truncated = stats.truncnorm(-np.inf, 1.0)
    functions = np.stack([x, (x - truncated.mean()) ** 2], axis=-1)
    z, tol = mcse_z(functions, np.array([truncated.mean(), truncated.var()]))
    assert np.all(np.abs(z) < tol), z


def test_max_energy_error_is_respected():
    """A proposal with dH > max_energy_error is a divergence with acceptance 0; any other has
    acceptance min(1, exp(-dH)) >= exp(-max_energy_error)."""
    target = harmonic_target(2)
    common = dict(draws=3000, chains=2, rng=5, step_size=1.9, n_steps=3, init=[0.5, -0.5])
    strict = sample(target, max_energy_error=0.5, **common)
    lenient = sample(target, **common)                        # default 1000
    assert 0.05 < strict.diverging.mean() < 0.95
    assert lenient.diverging.sum() == 0                       # same dynamics, far below 1000
    ok = ~strict.diverging
    assert np.all(strict.accept_prob[ok] >= math.exp(-0.5) * (1 - 1e-12))
    assert np.all(strict.accept_prob[strict.diverging] == 0.0)
    assert not np.any(strict.accepted & strict.diverging)
    # the lenient run does have such proposals, accepted now and then
    assert np.any((lenient.accept_prob < math.exp(-0.5)) & lenient.accepted)


# ============================================================================================
# errors


class UserModelError(RuntimeError):
    pass


def failing_logp_at_start(q):
    raise UserModelError("the user's model failed")


def standard_grad(q):
    return -q


class FailsLater:
    """logp_and_grad that raises on its n-th call (inside the nogil C loop)."""

    def __init__(self, n):
        self.n = n
        self.calls = 0

    def user_logp_and_grad_that_fails_later(self, q):
        self.calls += 1
        if self.calls >= self.n:
            raise UserModelError(f"failed on call {self.calls}")
        return -0.5 * float(q @ q), -q


def traceback_names(excinfo):
    return [entry.name for entry in excinfo.traceback]


def test_exception_at_initial_point_propagates():
    target = Target(failing_logp_at_start, grad_logp=standard_grad, dim=2)
    with pytest.raises(UserModelError, match="user's model failed") as excinfo:
        sample(target, step_size=0.1)
    assert "failing_logp_at_start" in traceback_names(excinfo)


@pytest.mark.parametrize("call", [5, 300])
@pytest.mark.parametrize("tune", [0, 100])
def test_exception_inside_the_c_loop_propagates(call, tune):
    failing = FailsLater(call)
    target = Target(None, logp_and_grad=failing.user_logp_and_grad_that_fails_later, dim=2)
    with pytest.raises(UserModelError, match=f"failed on call {call}") as excinfo:
        sample(target, draws=1000, tune=tune, step_size=None if tune else 0.3)
    assert "user_logp_and_grad_that_fails_later" in traceback_names(excinfo)
    assert failing.calls == call  # stopped at once


def test_exception_in_grad_logp_propagates_from_thread_pool():
    calls = {"n": 0}

    def user_gradient_that_fails(q):
        calls["n"] += 1
        if calls["n"] > 50:
            raise UserModelError("gradient failed")
        return -q

    target = Target(lambda q: -0.5 * float(q @ q), grad_logp=user_gradient_that_fails, dim=2)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        with pytest.raises(UserModelError) as excinfo:
            sample(target, draws=500, chains=2, step_size=0.3, pool=pool)
    assert "user_gradient_that_fails" in traceback_names(excinfo)


def test_non_finite_log_density_at_initial_point():
    for bad in (-np.inf, np.nan, np.inf):
        target = Target(lambda q, bad=bad: bad, grad_logp=standard_grad, dim=2)
        with pytest.raises(ValueError, match="initial point"):
            sample(target, step_size=0.1, init=[1.0, 2.0])


def test_non_finite_gradient_at_initial_point():
    target = Target(lambda q: -0.5 * float(q @ q), grad_logp=lambda q: np.array([np.nan, 1.0]),
                    dim=2)
    with pytest.raises(ValueError, match="gradient") as excinfo:
        sample(target, step_size=0.1, init=[1.0, 2.0])
    assert "initial point" in str(excinfo.value)


def test_gradient_of_wrong_shape():
    for wrong in (np.zeros(3), np.zeros((2, 1)), 0.0):
        target = Target(lambda q: 0.0, grad_logp=lambda q, wrong=wrong: wrong, dim=2)
        with pytest.raises(ValueError, match="shape"):
            sample(target, step_size=0.1)


@pytest.mark.parametrize("make_call,error", [
    (lambda t: sample(t, init=np.zeros(3)), ValueError),                   # init: wrong dim
    (lambda t: sample(t, init=np.zeros((2, 2)), chains=3), ValueError),    # wrong chains
    (lambda t: sample(t, init=np.zeros((1, 1, 2))), ValueError),
    (lambda t: sample(t, init=[0.0, np.nan]), ValueError),
    (lambda t: sample(t, init=[0.0, np.inf]), ValueError),
    (lambda t: sample(t, draws=0), ValueError),
    (lambda t: sample(t, draws=-5), ValueError),
    (lambda t: sample(t, draws=2.5), ValueError),
    (lambda t: sample(t, tune=-1), ValueError),
    (lambda t: sample(t, chains=0), ValueError),
    (lambda t: sample(t, chains=-1), ValueError),
    (lambda t: sample(t, chains=1.5), ValueError),
    (lambda t: sample(t, step_size=0.0), ValueError),
    (lambda t: sample(t, step_size=-0.1), ValueError),
    (lambda t: sample(t, step_size=np.nan), ValueError),
    (lambda t: sample(t, step_size=np.inf), ValueError),
    (lambda t: sample(t, n_steps=0), ValueError),
    (lambda t: sample(t, n_steps=-3), ValueError),
    (lambda t: sample(t, n_steps=2.5), ValueError),
    (lambda t: sample(t, target_accept=0.0), ValueError),
    (lambda t: sample(t, target_accept=1.0), ValueError),
    (lambda t: sample(t, target_accept=1.5), ValueError),
    (lambda t: sample(t, target_accept=np.nan), ValueError),
    (lambda t: sample(t, max_energy_error=0.0), ValueError),
    (lambda t: sample(t, mass_matrix=np.ones(3)), ValueError),             # wrong shape
    (lambda t: sample(t, mass_matrix=np.ones((2, 3))), ValueError),
    (lambda t: sample(t, mass_matrix=np.array([1.0, -1.0])), ValueError),  # not positive
    (lambda t: sample(t, mass_matrix=np.array([1.0, np.nan])), ValueError),
    (lambda t: sample(t, mass_matrix=np.array([[1.0, 2.0], [2.0, 1.0]])), ValueError),  # not PD
    (lambda t: sample(t, mass_matrix=np.array([[1.0, 0.5], [0.0, 1.0]])), ValueError),  # asym.
    (lambda t: sample(t, rng=np.random.RandomState(0)), TypeError),
    (lambda t: sample(t, pool=object()), TypeError),
])
def test_bad_arguments(make_call, error):
    target = Target(lambda q: -0.5 * float(q @ q), grad_logp=standard_grad, dim=2)
    with pytest.raises(error):
        make_call(target)


def test_target_without_gradient():
    with pytest.raises(ValueError, match="gradient"):
        HMC(Target(lambda q: -0.5 * float(q @ q), dim=2))

    class NoGradient:
        dim = 2

        def log_density(self, q):
            return -0.5 * float(q @ q)

    with pytest.raises((TypeError, ValueError), match="gradient"):
        sample(NoGradient(), step_size=0.1)


def test_not_a_target():
    for thing in (42, "model", object(), lambda q: 0.0):
        with pytest.raises(TypeError, match="target"):
            sample(thing, init=np.zeros(2), step_size=0.1)


def test_not_a_target_without_init_is_a_type_error():
    with pytest.raises(TypeError):
        sample(object(), step_size=0.1)


def test_dim_of_target_and_init_must_agree():
    with pytest.raises(ValueError):
        sample(harmonic_target(3), init=np.zeros(2))
    # no declared dim: inferred from init
    target = Target(lambda q: -0.5 * float(q @ q), grad_logp=standard_grad)
    res = sample(target, draws=20, chains=2, init=np.zeros((2, 4)), step_size=0.5)
    assert res.samples.shape == (2, 20, 4)
    with pytest.raises(ValueError, match="dim"):
        sample(target, draws=20)


# ============================================================================================
# BridgeStan-style objects


class BridgeStanLikeGaussian:
    """The BridgeStan protocol: dim, log_density(q), log_density_gradient(q) -> (float, arr)."""

    def __init__(self, mean, precision, dim_as_method=False):
        self.mean, self.precision = mean, precision
        if dim_as_method:
            self.dim = lambda: mean.size
        else:
            self.dim = mean.size

    def log_density(self, q):
        x = q - self.mean
        return -0.5 * (x @ (self.precision @ x))

    def log_density_gradient(self, q):
        x = q - self.mean
        g = self.precision @ x
        return -0.5 * (x @ g), -g


@pytest.mark.parametrize("dim_as_method", [False, True])
def test_bridgestan_style_object(dim_as_method, check_mean):
    mean, cov, P = gaussian_problem(1, dim=3)
    model = BridgeStanLikeGaussian(mean, P, dim_as_method)
    res = sample(model, draws=800, tune=500, chains=2, rng=9)
    assert res.samples.shape == (2, 800, 3)
    # the same density written as an rnshmc.Target gives the same draws, bit for bit
    np.testing.assert_array_equal(res.samples, sample(gaussian_target(mean, P), draws=800,
                                                      tune=500, chains=2, rng=9).samples)
    check_mean(res.samples, mean)


# ============================================================================================
# adaptation


@pytest.mark.parametrize("target_accept", [0.75, 0.8, 0.9])
@pytest.mark.parametrize("jitter", [False, True])
def test_dual_averaging_reaches_target_accept(target_accept, jitter):
    """Fixed (identity) mass, step size adapted over 1000 iterations: the mean acceptance
    probability while sampling is within 0.1 of target_accept, and a higher target gives a
    smaller step."""
    d = 10
    sd = np.geomspace(1.0, 3.0, d)
    target = gaussian_target(np.ones(d), np.diag(1 / sd ** 2))
    results = {}
    for ta in sorted({target_accept, 0.6}):
        results[ta] = sample(target, draws=1000, tune=1000, chains=2, rng=21, n_steps=10,
                             jitter=jitter, target_accept=ta, adapt_mass_matrix=False)
    res = results[target_accept]
    assert abs(res.accept_prob.mean() - target_accept) < 0.1
    assert np.all(np.abs(res.accept_prob.mean(axis=1) - target_accept) < 0.1)
    assert res.step_size.max() < results[0.6].step_size.min()


def test_dual_averaging_matches_hoffman_gelman_recursion():
    """DualAveraging == Algorithm 5 of Hoffman & Gelman (2014) written with the H-bar
    recursion, and it converges to the root of a deterministic acceptance curve."""
    def acceptance(step):            # decreasing in the step size, 0.8 at sqrt(-log 0.8)
        return math.exp(-step ** 2)

    eps0, delta, gamma, t0, kappa = 2.0, 0.8, 0.05, 10.0, 0.75
    averaging = DualAveraging(eps0, delta)
    mu, H_bar, log_eps_bar, step = math.log(10 * eps0), 0.0, 0.0, eps0
    for m in range(1, 3001):
        a = acceptance(step)
        H_bar = (1 - 1 / (m + t0)) * H_bar + (delta - a) / (m + t0)
        log_eps = mu - math.sqrt(m) / gamma * H_bar
        eta = m ** -kappa
        log_eps_bar = eta * log_eps + (1 - eta) * log_eps_bar
        new_step = averaging.update(a)
        assert new_step == pytest.approx(math.exp(log_eps), rel=1e-12)
        step = new_step
    assert averaging.final_step_size == pytest.approx(math.exp(log_eps_bar), rel=1e-10)
    assert averaging.final_step_size == pytest.approx(math.sqrt(-math.log(0.8)), rel=0.02)
    # restart forgets everything but the new starting point
    averaging.restart(0.3)
    assert averaging.final_step_size == pytest.approx(0.3)
    assert averaging.mu == pytest.approx(math.log(3.0))
    with pytest.raises(ValueError):
        DualAveraging(1.0, 1.0)


def stan_window_ends(num_warmup, init_buffer=75, term_buffer=50, base_window=25):
    """The last iteration of each metric window of Stan's windowed_adaptation
    (stan/mcmc/windowed_adaptation.hpp), simulated iteration by iteration."""
    if num_warmup < 20:
        return []                                   # no metric estimation at all
    if init_buffer + base_window + term_buffer > num_warmup:
        init_buffer = int(0.15 * num_warmup)
        term_buffer = int(0.1 * num_warmup)
        base_window = num_warmup - (init_buffer + term_buffer)
    size, next_end, ends = base_window, init_buffer + base_window - 1, []
    last = num_warmup - term_buffer - 1
    for counter in range(num_warmup):
        in_window = init_buffer <= counter < num_warmup - term_buffer
        if in_window and counter == next_end:
            ends.append(counter)
            if next_end == last:
                continue
            size *= 2
            next_end = counter + size
            if next_end != last and next_end + 2 * size >= num_warmup - term_buffer:
                next_end = last
    return ends


def test_warmup_schedule_for_1000_is_stans():
    s = WarmupSchedule(1000)
    assert (s.slow_start, s.slow_end) == (75, 950)
    assert s.ends == [99, 149, 249, 449, 949]
    starts = [75] + [e + 1 for e in s.ends[:-1]]
    assert [e - b + 1 for b, e in zip(starts, s.ends)] == [25, 50, 100, 200, 500]
    assert [i for i in range(1000) if s.window_end(i)] == s.ends
    assert not s.in_slow_window(74) and s.in_slow_window(75)
    assert s.in_slow_window(949) and not s.in_slow_window(950)
    assert s.ends == stan_window_ends(1000)


@pytest.mark.parametrize("tune", [20, 21, 50, 100, 149, 150, 200, 201, 300, 500, 999, 1000,
                                  1001, 1500, 2000, 2345, 5000])
def test_warmup_schedule_windows_cover_the_slow_phase(tune):
    """Windows are contiguous, double in length (the last one stretched), start at the end
    of the initial buffer and end exactly where the terminal buffer begins; the split is
    15/75/10 % below 150 iterations; and the window ends are Stan's."""
    s = WarmupSchedule(tune)
    if tune < 150:
        assert (s.slow_start, s.slow_end) == (int(0.15 * tune), tune - int(0.1 * tune))
    else:
        assert (s.slow_start, s.slow_end) == (75, tune - 50)
    starts = [s.slow_start] + [e + 1 for e in s.ends[:-1]]
    sizes = [e - b + 1 for b, e in zip(starts, s.ends)]
    assert s.ends[-1] == s.slow_end - 1
    assert all(size > 0 for size in sizes)
    assert all(b >= 2 * a for a, b in zip(sizes[:-2], sizes[1:-1]))
    assert all(s.in_slow_window(i) == (s.slow_start <= i < s.slow_end) for i in range(tune))
    if tune == 100:
        assert (s.slow_start, s.slow_end, s.ends) == (15, 90, [89])
    if not 150 < tune < 200:
        assert s.ends == stan_window_ends(tune)


def test_warmup_schedule_first_window_like_stan():
    assert WarmupSchedule(175).ends == stan_window_ends(175) == [99, 124]


@pytest.mark.parametrize("tune", [2, 5, 10, 19])
def test_no_metric_adaptation_below_20(tune):
    assert WarmupSchedule(tune).ends == []


@pytest.mark.parametrize("tune", [10, 15, 19])
def test_short_tune_gives_a_usable_step_size(tune):
    res = sample(gaussian_target(np.zeros(5), np.eye(5)), draws=300, tune=tune, chains=4, rng=1)
    assert np.all(res.acceptance_rate > 0.3), res.acceptance_rate


@pytest.mark.parametrize("seed", SEEDS + SLOW_SEEDS)
def test_adapted_inverse_mass_matches_the_variances(seed):
    """Diagonal Gaussian with standard deviations from 0.1 to 10 (100x): after tune=2000 the
    adapted diagonal inverse mass is within 30% of the true variances (the last window has
    1100 draws; the relative sd of a variance estimate is sqrt(2/ESS) ~ 5-10%)."""
    d = 10
    sd = np.geomspace(0.1, 10.0, d)
    res = sample(gaussian_target(np.arange(d, dtype=float), np.diag(1 / sd ** 2)), draws=200,
                 tune=2000, chains=2, rng=seed)
    assert res.inverse_mass_matrix.shape == (2, d)
    ratio = res.inverse_mass_matrix / sd ** 2
    assert np.all((ratio > 0.7) & (ratio < 1.3)), ratio


def test_running_variance_and_regularisation():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((57, 3)) * [1.0, 10.0, 0.01] + 5.0
    rv = RunningVariance(3)
    for row in x:
        rv.add(row)
    np.testing.assert_allclose(rv.mean, x.mean(0), rtol=1e-13)
    n = 57
    expected = n / (n + 5) * x.var(0, ddof=1) + 1e-3 * 5 / (n + 5)
    np.testing.assert_allclose(rv.regularized_variance(), expected, rtol=1e-12)
    rv.reset()
    assert rv.count == 0 and np.all(rv.mean == 0)


def test_initial_step_size_heuristic():
    kernel = make_kernel(harmonic_target(3), 3)
    kernel.set_position(np.ones(3))
    step = initial_step_size(kernel, np.random.default_rng(0))
    assert 0.1 < step < 4.0
    # a flat density never lowers the acceptance: the heuristic gives up
    flat = make_kernel(Target(lambda q: 0.0, grad_logp=np.zeros_like, dim=2), 2)
    flat.set_position(np.zeros(2))
    with pytest.raises(RuntimeError, match="step size"):
        initial_step_size(flat, np.random.default_rng(0))


def test_tune_zero_without_step_size_warns():
    with pytest.warns(UserWarning, match="tune=0"):
        res = sample(harmonic_target(2), draws=50, tune=0)
    assert np.isfinite(res.step_size).all()


def test_tune_zero_warning_points_at_the_caller():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sample(harmonic_target(2), draws=10, tune=0)
    assert [os.path.basename(w.filename) for w in caught] == [os.path.basename(__file__)]


# ============================================================================================
# the result


@pytest.mark.parametrize("chains", [1, 3])
def test_result_fields(chains):
    d, draws, L = 3, 400, 6
    target = harmonic_target(d)
    res = sample(target, draws=draws, tune=300, chains=chains, rng=2, n_steps=L)
    assert isinstance(res, rnshmc.SampleResult)
    assert res.sampler == "HMC"
    shapes = dict(samples=(chains, draws, d), log_density=(chains, draws),
                  accepted=(chains, draws), accept_prob=(chains, draws),
                  diverging=(chains, draws), energy=(chains, draws), n_steps=(chains, draws),
                  acceptance_rate=(chains,), step_size=(chains,), n_density_evals=(chains,),
                  n_gradient_evals=(chains,), inverse_mass_matrix=(chains, d))
    kinds = dict(samples="f", log_density="f", accepted="b", accept_prob="f", diverging="b",
                 energy="f", n_steps="i", acceptance_rate="f", step_size="f",
                 n_density_evals="i", n_gradient_evals="i", inverse_mass_matrix="f")
    for key, shape in shapes.items():
        assert res[key].shape == shape, key
        assert res[key].dtype.kind == kinds[key], key
    assert res.samples.dtype == np.float64
    assert res.n_steps.dtype == np.int64
    assert res.n_gradient_evals.dtype == np.int64 and res.n_density_evals.dtype == np.int64
    np.testing.assert_array_equal(res.acceptance_rate, res.accepted.mean(axis=1))
    assert set(res.timings) >= {"tune", "sampling"}
    assert all(v >= 0 for v in res.timings.values())
    # internal consistency of the per-draw records
    np.testing.assert_allclose(res.log_density, -0.5 * np.sum(res.samples ** 2, axis=-1),
                               rtol=1e-12, atol=1e-300)
    assert np.all(res.energy >= -res.log_density - 1e-12)   # H = U + K >= U
    assert np.all((res.accept_prob >= 0) & (res.accept_prob <= 1))
    assert np.all((res.n_steps >= 1) & (res.n_steps <= L))
    assert set(np.unique(res.n_steps)) == set(range(1, L + 1))  # jitter is uniform on 1..L
    moved = np.any(res.samples[:, 1:] != res.samples[:, :-1], axis=-1)
    np.testing.assert_array_equal(moved, res.accepted[:, 1:])
    assert np.all(res.n_gradient_evals >= res.n_steps.sum(axis=1) + 1)
    # fixed step size and identity mass: no inverse mass matrix to report
    fixed = sample(target, draws=10, chains=chains, step_size=0.5)
    assert fixed.inverse_mass_matrix is None
    np.testing.assert_array_equal(fixed.step_size, np.full(chains, 0.5))
    dense = sample(target, draws=10, chains=chains, step_size=0.5, mass_matrix=2 * np.eye(d))
    np.testing.assert_allclose(dense.inverse_mass_matrix, np.broadcast_to(np.eye(d) / 2,
                                                                          (chains, d, d)))


def test_jitter_is_uniform():
    res = sample(harmonic_target(1), draws=20_000, step_size=0.3, n_steps=5, rng=8)
    counts = np.bincount(res.n_steps.ravel(), minlength=6)[1:]
    assert stats.chisquare(counts).pvalue > 1e-4


def test_docstring_example():
    target = rnshmc.Target(lambda q: -0.5 * q @ q, grad_logp=lambda q: -q, dim=2)
    res = rnshmc.HMC(target, n_steps=5).sample(500, tune=500, rng=0, progress=False)
    assert res.samples.shape == (1, 500, 2)


def test_result_save_load_round_trip(tmp_path):
    res = sample(harmonic_target(2), draws=100, tune=100, chains=2, rng=3)
    path = tmp_path / "hmc_result.npz"
    res.save(path)
    loaded = rnshmc.load(path)
    assert loaded.sampler == "HMC"
    assert_same_result(res, loaded)
    assert loaded.timings == res.timings


def test_progress_bar_does_not_change_the_draws(capsys):
    target = harmonic_target(2)
    quiet = HMC(target, n_steps=4).sample(250, tune=120, chains=2, rng=6, progress=False)
    shown = HMC(target, n_steps=4).sample(250, tune=120, chains=2, rng=6, progress=True)
    capsys.readouterr()
    assert_same_result(quiet, shown)
