"""The leapfrog integrator (rnshmc._kernels._integrators.Leapfrog), driven through a C chain's
deterministic ``Chain.integrate(q, p, step_size, n_steps)``, against closed forms:

* for a Gaussian target U = x^T P x / 2 (x = q - mean) the leapfrog map conserves the modified
  energy  H~ = H - eps^2/8 * grad U^T M^-1 grad U  exactly, so
  H(end) - H(start) = eps^2/8 (|grad U(end)|^2_{M^-1} - |grad U(start)|^2_{M^-1});
* the exact flow for small eps (O(eps^2) global error), reversibility;
* the gradient cached between steps and the evaluation counts, and a divergent trajectory
  stopping at the step where it diverged.
"""
import numpy as np
import pytest
import scipy.linalg

from rnshmc import Target

from testkit import (dense_inverse_mass, gaussian_for_leapfrog, harmonic_target, hmc_sample,
                     log_gamma_target, make_chain, rng_seed)

MASS_KINDS = ["identity", "diagonal", "dense"]


def hamiltonian(U, p, inverse_mass):
    return U + 0.5 * p @ inverse_mass @ p


def step_by_step(chain, q, p, eps, n):
    """n successive one-step integrations: (positions, momenta, potentials) incl. the start."""
    qs, ps, Us = [q], [p], []
    for _ in range(n):
        q, p, U, _ = chain.integrate(q, p, eps, 1)
        qs.append(q), ps.append(p), Us.append(U)
    return np.array(qs), np.array(ps), np.array(Us)


@pytest.mark.parametrize("eps", [0.05, 0.2, 0.7, 1.5])
def test_leapfrog_harmonic_energy_error_is_the_modified_energy(eps):
    """U = |q|^2/2, M = I: the leapfrog conserves H~ = |p|^2/2 + (1 - eps^2/4)|q|^2/2, so
    dH_n = eps^2/8 (|q_n|^2 - |q_0|^2) exactly, and |dH_n| <= eps^2/4 H~ / (1 - eps^2/4) for
    every n: bounded over an arbitrarily long trajectory (no drift)."""
    rng = np.random.default_rng(rng_seed(1))
    chain = make_chain(harmonic_target(3), 3)
    q0, p0 = rng.standard_normal(3), rng.standard_normal(3)
    n = 1000
    qs, ps, Us = step_by_step(chain, q0, p0, eps, n)
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
    q_n, p_n, U_n, U_test_n = chain.integrate(q0, p0, eps, n)
    np.testing.assert_array_equal(q_n, qs[-1])
    np.testing.assert_array_equal(p_n, ps[-1])
    assert U_n == Us[-1] == U_test_n


def test_leapfrog_energy_error_scales_as_eps_squared():
    rng = np.random.default_rng(rng_seed(2))
    chain = make_chain(harmonic_target(2), 2)
    q0, p0 = rng.standard_normal(2), rng.standard_normal(2)
    H0 = 0.5 * (q0 @ q0 + p0 @ p0)
    worst = []
    for eps in (0.2, 0.1, 0.05):
        n = int(round(60.0 / eps))  # the same physical time, ~10 periods
        _, ps, Us = step_by_step(chain, q0, p0, eps, n)
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
    rng = np.random.default_rng(rng_seed(3))
    chain = make_chain(harmonic_target(3), 3)
    q0, p0 = rng.standard_normal(3), rng.standard_normal(3)
    T = 1.3
    radius = np.sqrt(q0 @ q0 + p0 @ p0)
    errors = []
    for n in (50, 100, 200, 400):
        eps = T / n
        q, p, _, _ = chain.integrate(q0, p0, eps, n)
        qe, pe = q0 * np.cos(T) + p0 * np.sin(T), p0 * np.cos(T) - q0 * np.sin(T)
        err = np.sqrt(np.sum((q - qe) ** 2) + np.sum((p - pe) ** 2))
        assert err <= 1.5 * radius * eps ** 2 * (T / 24 + 1 / 8)
        errors.append(err)
    ratios = np.array(errors[:-1]) / np.array(errors[1:])
    assert np.all((ratios > 3.9) & (ratios < 4.1)), ratios


@pytest.mark.parametrize("kind", MASS_KINDS)
def test_leapfrog_gaussian_modified_energy_with_mass(kind):
    """dH_n = eps^2/8 (g_n^T M^-1 g_n - g_0^T M^-1 g_0), g = P (q - mean), for identity, diagonal
    and dense inverse mass (the chain's metric); and the closed-form bound
    |dH_n| <= eps^2 lam H~ / (4 (1 - eps^2 lam / 4)), lam = max eig(M^-1 P), over 1500 steps."""
    target, mean, P, inv_mass = gaussian_for_leapfrog(kind)
    d = mean.size
    Minv = dense_inverse_mass(inv_mass, d)
    chain = make_chain(target, d, inv_mass)
    lam = np.max(np.linalg.eigvals(Minv @ P).real)
    eps = 1.0 / np.sqrt(lam)  # half the stability limit 2 / sqrt(lam)
    rng = np.random.default_rng(rng_seed(5))
    q0 = mean + rng.standard_normal(d)
    p0 = np.linalg.cholesky(np.linalg.inv(Minv)) @ rng.standard_normal(d)
    qs, ps, Us = step_by_step(chain, q0, p0, eps, 1500)
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
    chain = make_chain(target, d, inv_mass)
    rng = np.random.default_rng(rng_seed(7))
    q0, p0 = mean + rng.standard_normal(d), rng.standard_normal(d)
    T = 0.8
    qe, pe = exact_flow(q0, p0, P, Minv, mean, T)
    errors = []
    for n in (100, 200, 400):
        q, p, _, _ = chain.integrate(q0, p0, T / n, n)
        errors.append(np.sqrt(np.sum((q - qe) ** 2) + np.sum((p - pe) ** 2)))
    ratios = np.array(errors[:-1]) / np.array(errors[1:])
    assert np.all((ratios > 3.8) & (ratios < 4.2)), ratios
    assert errors[-1] < 1e-3 * np.sqrt(q0 @ q0 + p0 @ p0)


@pytest.mark.parametrize("case", ["harmonic", "log-gamma"] + [f"gaussian-{k}" for k in MASS_KINDS])
def test_leapfrog_is_reversible(case):
    """L steps forward, negate p, L steps back: the start again, to 1e-10."""
    rng = np.random.default_rng(rng_seed(8))
    if case == "harmonic":
        chain, q0, eps = make_chain(harmonic_target(4), 4), rng.standard_normal(4), 0.3
    elif case == "log-gamma":
        chain, q0, eps = make_chain(log_gamma_target(), 1), np.array([0.3]), 0.2
    else:
        target, mean, P, inv_mass = gaussian_for_leapfrog(case.split("-")[1], seed=9)
        Minv = dense_inverse_mass(inv_mass, mean.size)
        eps = 1.2 / np.sqrt(np.max(np.linalg.eigvals(Minv @ P).real))
        chain = make_chain(target, mean.size, inv_mass)
        q0 = mean + rng.standard_normal(mean.size)
    p0 = rng.standard_normal(q0.size)
    q1, p1, U1, _ = chain.integrate(q0, p0, eps, 200)
    assert not np.allclose(q1, q0)
    q2, p2, U2, _ = chain.integrate(q1, -p1, eps, 200)
    scale = 1.0 + np.max(np.abs(q0)) + np.max(np.abs(p0))
    np.testing.assert_allclose(q2, q0, rtol=0, atol=1e-10 * scale)
    np.testing.assert_allclose(-p2, p0, rtol=0, atol=1e-10 * scale)


def test_integrate_leaves_the_chain_state_alone():
    """integrate() evaluates the start point, then one gradient per step (the gradient is
    cached between steps), and restores the chain's state and counters afterwards."""
    calls = {"n": 0}

    def counted_log_gamma(q):
        calls["n"] += 1
        e = np.exp(q[0])
        return 2.0 * q[0] - e, np.array([2.0 - e])

    chain = make_chain(Target(None, logp_and_grad=counted_log_gamma, dim=1), 1)
    chain.set_position([0.25])
    chain.step_size = 0.5
    before = chain.get_state()
    counters = (chain.n_density_evals, chain.n_gradient_evals)
    assert calls["n"] == 1
    chain.integrate(np.array([-1.0]), np.array([0.7]), 0.1, 12)
    assert calls["n"] == 1 + 1 + 12  # the start point, then one per step
    assert (chain.n_density_evals, chain.n_gradient_evals) == counters
    after = chain.get_state()
    assert after.keys() == before.keys()
    for key in before:
        np.testing.assert_equal(after[key], before[key], err_msg=key)
    np.testing.assert_array_equal(chain.position, [0.25])
    assert chain.step_size == 0.5
    assert chain.log_density == 2.0 * 0.25 - np.exp(0.25)
    np.testing.assert_allclose(chain.gradient, -(2.0 - np.exp(0.25)))  # grad U = -grad logp
    with pytest.raises(ValueError):
        chain.integrate(np.array([0.0]), np.array([1.0, 2.0]), 0.1, 3)


def test_integrate_with_a_bad_momentum_leaves_the_chain_alone():
    chain = make_chain(harmonic_target(1), 1)
    chain.set_position([0.25])
    counters = (chain.n_density_evals, chain.n_gradient_evals)
    with pytest.raises(ValueError):
        chain.integrate(np.array([0.0]), np.array([1.0, 2.0]), 0.1, 3)
    np.testing.assert_array_equal(chain.position, [0.25])
    assert (chain.n_density_evals, chain.n_gradient_evals) == counters


def test_integrate_stops_at_a_divergence():
    """A trajectory that reaches a non-finite gradient stops there: the end potential is +inf
    and no gradient is evaluated after that step."""
    calls = {"n": 0}

    def nan_gradient_beyond_1(q):
        calls["n"] += 1
        return -0.5 * float(q @ q), (-q if q[0] <= 1.0 else np.array([np.nan]))

    chain = make_chain(Target(None, logp_and_grad=nan_gradient_beyond_1, dim=1), 1)
    # from 0 with p = 2 and eps = 0.3, q passes 1 at the 2nd step (q_1 = 0.6, q_2 = 1.146)
    _, _, U, U_test = chain.integrate(np.array([0.0]), np.array([2.0]), 0.3, 20)
    assert U == np.inf and U_test == np.inf
    assert calls["n"] == 1 + 2


# ============================================================================================
# gradient caching and evaluation counts in the sampler


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
    res = hmc_sample(target, draws=300, chains=chains, step_size=0.4, n_steps=7, jitter=jitter)
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
    res = hmc_sample(target, draws=500, step_size=1.0, n_steps=8, init=[0.0])
    assert res.diverging.any()
    np.testing.assert_array_equal(res.n_gradient_evals, res.n_steps.sum(axis=1) + 1)
