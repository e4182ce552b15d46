"""RMHMC and RNS-RMHMC: the generalized leapfrog (reversibility, volume preservation, the
constant-metric limit), counted rejections of unconverged solves, and exactness of the chains
(moments within Monte Carlo error) on targets whose metric varies strongly with position."""
import warnings

import numpy as np
import pytest
from scipy import special

import rnshmc
from rnshmc import RMHMC, RNSRMHMC, Target
from rnshmc.experiments import summarize
from rnshmc._kernels._chain import TRANSITION
from rnshmc._kernels._integrators import GeneralizedLeapfrog, Leapfrog
from rnshmc._kernels._metrics import EuclideanMetric
from rnshmc._kernels._riemann import CallableMetric, LinearPredictorMetric
from rnshmc._kernels._transition import Chain
from rnshmc.targets import as_ctarget

from testkit import (check_covariance, check_mean, check_renamed, gaussian_problem,
                     gaussian_target, mean_within_mcse, rng_seed)

FUNNEL_SD = 1.5  # v ~ N(0, 1.5^2), x | v ~ N(0, e^v)


def funnel_logp_and_grad(q):
    x, v = q
    e = np.exp(-v)
    logp = -v * v / (2 * FUNNEL_SD ** 2) - 0.5 * x * x * e - 0.5 * v
    return logp, np.array([-x * e, -v / FUNNEL_SD ** 2 + 0.5 * x * x * e - 0.5])


def funnel_hessian(q):
    """The potential's Hessian: indefinite where x^2 > 2 e^v / sd^2 (SoftAbs needed)."""
    x, v = q
    e = np.exp(-v)
    return np.array([[e, -x * e], [-x * e, 1 / FUNNEL_SD ** 2 + 0.5 * x * x * e]])


def funnel_hessian_derivatives(q):
    x, v = q
    e = np.exp(-v)
    return np.array([[[0.0, -e], [-e, x * e]],
                     [[-e, x * e], [x * e, -0.5 * x * x * e]]])


def funnel_target():
    return Target(None, logp_and_grad=funnel_logp_and_grad, dim=2)


def funnel_statistics(samples):
    """Per-draw functions with known means and finite variances: x, v, v^2, 1{v > 1.5},
    x^2 e^{-v} (a chi-square(1): mean 1) and 1{|x| < e^{v/2}} (mean 0.6827) — these test the
    joint law; x^2 itself (lognormal tails, kurtosis ~30) has no usable Monte Carlo error."""
    x, v = samples[..., 0], samples[..., 1]
    standardised = x * np.exp(-0.5 * v)
    functions = np.stack([x, v, v * v, (v > 1.5) * 1.0, standardised ** 2,
                          (np.abs(standardised) < 1.0) * 1.0], axis=-1)
    truth = np.array([0.0, 0.0, FUNNEL_SD ** 2, special.ndtr(-1.5 / FUNNEL_SD), 1.0,
                      special.erf(1 / np.sqrt(2))])
    return functions, truth


def riemannian_chain(target, metric, dim, tol=1e-13, max_iterations=100, newton=False):
    return Chain(as_ctarget(target, dim), None, metric,
                 GeneralizedLeapfrog(dim, tol, max_iterations, newton))


def small_logistic(seed=0, n=300, dim=3):
    X, y, _ = rnshmc.datasets.simulated_logistic(n=n, dim=dim, rng=seed)
    return rnshmc.models.LogisticRegression(X, y, prior_variance=10.0)


def banana_metric(dim=3):
    """G = I + 4 u u^T with u = (q0, 1, q1^2, ...): strongly position dependent."""
    def u_and_du(q):
        u = np.ones(dim)
        u[0], u[2] = q[0], q[1] ** 2
        du = np.zeros((dim, dim))
        du[0, 0] = 1.0
        du[1, 2] = 2 * q[1]
        return u, du

    def G(q):
        u, _ = u_and_du(q)
        return np.eye(dim) + 4 * np.outer(u, u)

    def dG(q):
        u, du = u_and_du(q)
        return 4 * (np.einsum("ia,b->iab", du, u) + np.einsum("a,ib->iab", u, du))
    return CallableMetric(dim, G, dG)


def fitted_surrogate(dim=3, seed=0):
    rng = np.random.default_rng(seed)
    Q = rng.standard_normal((200, dim))
    surrogate = rnshmc.RandomNetworkSurrogate(dim, n_hidden=30, rng=seed, whiten=True)
    surrogate.fit(Q, 0.5 * np.sum(Q ** 2, axis=1) + 0.3 * Q[:, 0] ** 3)
    return surrogate


def integrator_cases(newton=False):
    """(name, chain factory, q, p) covering each metric family; ``newton``: the integrator's
    Newton iterations."""
    model = small_logistic()
    gaussian = Target(None, logp_and_grad=lambda q: (-0.5 * q @ q, -q), dim=3)
    surrogate = fitted_surrogate()
    return {
        "fisher": (lambda: riemannian_chain(model, LinearPredictorMetric(
            model.X, "logistic", prior_precision=0.1), 3, newton=newton), np.array([0.5, -0.3, 0.2])),
        "callable": (lambda: riemannian_chain(gaussian, banana_metric(), 3, newton=newton),
                     np.array([0.4, -0.7, 0.1])),
        "funnel_softabs": (lambda: riemannian_chain(funnel_target(), CallableMetric(
            2, funnel_hessian, funnel_hessian_derivatives, softabs=1.0), 2, newton=newton),
            np.array([1.2, -0.4])),
        "surrogate_softabs": (lambda: riemannian_chain(
            surrogate, surrogate.hessian_metric(softabs=2.0), 3, newton=newton),
            np.array([0.3, 0.2, -0.5])),
        "surrogate_diagonal": (lambda: riemannian_chain(
            surrogate, surrogate.hessian_metric(diagonal=True, softabs=2.0), 3, newton=newton),
            np.array([0.3, 0.2, -0.5])),
    }


CASES = ["fisher", "callable", "funnel_softabs", "surrogate_softabs", "surrogate_diagonal"]


def test_funnel_derivatives_are_those_of_its_hessian():
    """The funnel test's metric callables are consistent (else its exactness test would test
    nothing about the integrator)."""
    q, h = np.array([0.7, -0.3]), 1e-6
    for i in range(2):
        e = np.zeros(2)
        e[i] = h
        numeric = (funnel_hessian(q + e) - funnel_hessian(q - e)) / (2 * h)
        np.testing.assert_allclose(funnel_hessian_derivatives(q)[i], numeric, atol=1e-8)
        U = lambda z: -funnel_logp_and_grad(z)[0]
        grad = -funnel_logp_and_grad(q)[1]
        assert abs((U(q + e) - U(q - e)) / (2 * h) - grad[i]) < 1e-8


@pytest.mark.parametrize("newton", [False, True])
@pytest.mark.parametrize("case", CASES)
def test_generalized_leapfrog_is_reversible(case, newton):
    make, q = integrator_cases(newton)[case]
    chain = make()
    rng = np.random.default_rng(rng_seed(1))
    p = rng.standard_normal(q.size)
    q1, p1, _, _ = chain.integrate(q, p, 0.2, 4)
    assert np.max(np.abs(q1 - q)) > 0.05  # it moved
    q2, p2, _, _ = chain.integrate(q1, -p1, 0.2, 4)
    np.testing.assert_allclose(q2, q, rtol=0, atol=1e-10)
    np.testing.assert_allclose(-p2, p, rtol=0, atol=1e-10)


@pytest.mark.parametrize("newton", [False, True])
@pytest.mark.parametrize("case", CASES)
def test_generalized_leapfrog_preserves_volume(case, newton):
    """|det d(q', p')/d(q, p)| = 1 by central finite differences of the map."""
    make, q = integrator_cases(newton)[case]
    chain = make()
    p = np.random.default_rng(rng_seed(2)).standard_normal(q.size)
    d = q.size
    z = np.concatenate([q, p])

    def flow(z):
        q1, p1, _, _ = chain.integrate(z[:d], z[d:], 0.2, 3)
        return np.concatenate([q1, p1])

    h = 1e-5
    J = np.empty((2 * d, 2 * d))
    for k in range(2 * d):
        e = np.zeros(2 * d)
        e[k] = h
        J[:, k] = (flow(z + e) - flow(z - e)) / (2 * h)
    assert abs(np.linalg.det(J) - 1.0) < 1e-6
    # and it is symplectic: J^T Omega J = Omega
    omega = np.block([[np.zeros((d, d)), np.eye(d)], [-np.eye(d), np.zeros((d, d))]])
    np.testing.assert_allclose(J.T @ omega @ J, omega, atol=1e-6)


@pytest.mark.parametrize("case", CASES)
def test_newton_and_fixed_point_solve_the_same_equations(case):
    """Newton iterations are another solver of the same implicit equations: the same map."""
    (make_fp, q), (make_newton, _) = integrator_cases()[case], integrator_cases(True)[case]
    p = np.random.default_rng(rng_seed(4)).standard_normal(q.size)
    for fp, newton in zip(make_fp().integrate(q, p, 0.2, 4), make_newton().integrate(q, p, 0.2, 4)):
        np.testing.assert_allclose(newton, fp, rtol=1e-10, atol=1e-10)


def test_newton_takes_fewer_iterations_and_stays_exact():
    """Newton converges quadratically: fewer iterations per step than fixed-point iteration at
    the same tolerance, and the chain targets the same posterior."""
    X, y, _ = rnshmc.datasets.simulated_logistic(n=150, dim=2, rng=rng_seed(7))
    model = rnshmc.models.LogisticRegression(X, y, prior_variance=4.0)
    mean, cov = logistic_posterior_moments(model)
    iterations = {}
    for newton in (False, True):
        res = RMHMC(model, metric="fisher", step_size=0.7, n_steps=3, jitter=True,
                    newton=newton).sample(1500, tune=100, chains=2, rng=rng_seed(11),
                                          progress=False)
        iterations[newton] = res.mean_solver_iterations.mean()
        assert res.n_implicit_failures.sum() == 0
        check_mean(res.samples, mean)
        check_covariance(res.samples, mean, cov)
    assert iterations[True] < 0.8 * iterations[False], iterations


def test_constant_metric_is_the_leapfrog():
    rng = np.random.default_rng(rng_seed(3))
    A = rng.standard_normal((3, 3))
    M = A @ A.T + np.eye(3)
    target = Target(None, logp_and_grad=lambda q: (-0.5 * q @ q - q[0] ** 4 / 12,
                                                   -q - np.array([q[0] ** 3 / 3, 0, 0])), dim=3)
    riemann = riemannian_chain(target, CallableMetric(3, lambda q: M, lambda q: np.zeros((3, 3, 3))), 3)
    euclid = Chain(as_ctarget(target, 3), None, EuclideanMetric(3, np.linalg.inv(M)), Leapfrog())
    q, p = rng.standard_normal(3), rng.standard_normal(3)
    for r, e in zip(riemann.integrate(q, p, 0.3, 5), euclid.integrate(q, p, 0.3, 5)):
        np.testing.assert_allclose(r, e, rtol=1e-11, atol=1e-12)


def test_unconverged_solve_is_a_counted_rejection():
    """One fixed-point iteration never meets the tolerance: every proposal fails, none is
    accepted, each failure is counted and warned about."""
    model = small_logistic()
    sampler = RMHMC(model, metric="fisher", step_size=0.5, n_steps=3, max_fixed_point_iterations=1)
    with pytest.warns(RuntimeWarning, match="did not converge"):
        res = sampler.sample(50, tune=0, chains=1, rng=rng_seed(0), progress=False)
    assert res.n_implicit_failures[0] == 50
    assert res.implicit_failed.all()
    assert not res.accepted.any()
    assert np.all(res.samples == res.samples[0, 0])


@pytest.mark.parametrize("tol, max_iterations, per_step", [(1e-12, 50, 3), (None, 4, 8)])
def test_implicit_solves_report_their_iterations(tol, max_iterations, per_step):
    """Both implicit solves of a step go through one fixed-point solver. With a constant
    metric the momentum equation is explicit, so its second iterate repeats its first, and the
    position equation's first guess q + eps G^{-1} p' is its solution: 2 + 1 iterations a step
    to a tolerance; without one, max_iterations for each equation."""
    metric = CallableMetric(3, lambda q: np.eye(3), lambda q: np.zeros((3, 3, 3)))
    gaussian = Target(None, logp_and_grad=lambda q: (-0.5 * q @ q, -q), dim=3)
    chain = riemannian_chain(gaussian, metric, 3, tol=tol, max_iterations=max_iterations)
    chain.set_position(np.array([0.5, -0.2, 0.1]))
    chain.step_size = 0.2
    samples, records = np.empty((20, 3)), np.empty(20, TRANSITION)
    chain.run(np.random.default_rng(rng_seed(0)), 20, 4, False, samples, records)
    assert np.all(records["n_steps"] == 4)
    assert np.all(records["solver_iterations"] == 4 * per_step)
    assert not records["solver_failed"].any()


def test_an_unconverged_solve_ends_the_trajectory_where_it_failed():
    """The momentum solve of the first step, cut at one iteration, ends the trajectory there:
    one step, one iteration, a failed solve, the proposal rejected."""
    model = small_logistic()
    chain = riemannian_chain(model, LinearPredictorMetric(model.X, "logistic",
                                                          prior_precision=0.1), 3,
                             tol=1e-12, max_iterations=1)
    chain.set_position(np.array([0.5, -0.3, 0.2]))
    chain.step_size = 0.3
    samples, records = np.empty((5, 3)), np.empty(5, TRANSITION)
    chain.run(np.random.default_rng(rng_seed(1)), 5, 3, False, samples, records)
    assert np.all(records["n_steps"] == 1)
    assert np.all(records["solver_iterations"] == 1)
    assert records["solver_failed"].all() and not records["accepted"].any()
    assert chain.n_solver_failures == 5


def test_papers_fixed_iterations_warn():
    model = small_logistic()
    with pytest.warns(UserWarning, match="not exactly invariant"):
        sampler = RMHMC(model, step_size=0.5, n_steps=2, fixed_point_tol=None,
                        max_fixed_point_iterations=5)
    res = sampler.sample(30, tune=0, rng=rng_seed(0), progress=False)
    assert np.all(res.solver_iterations[res.n_steps > 0] == 10 * res.n_steps[res.n_steps > 0])
    assert res.n_implicit_failures[0] == 0


def logistic_posterior_moments(model, half_width=4.0, n=161):
    """Mean and covariance of a 2-d logistic posterior by quadrature on a grid around the mode."""
    from scipy import optimize
    mode = optimize.minimize(lambda b: model.potential_and_gradient(b), np.zeros(2), jac=True).x
    H = model.fisher_metric(mode)
    sd = np.sqrt(np.diag(np.linalg.inv(H)))
    axes = [np.linspace(m - half_width * 1.5 * s, m + half_width * 1.5 * s, n) for m, s in zip(mode, sd)]
    B0, B1 = np.meshgrid(*axes, indexing="ij")
    points = np.stack([B0.ravel(), B1.ravel()], axis=1)
    U = np.array([model.potential(b) for b in points])
    w = np.exp(-(U - U.min()))
    w /= w.sum()
    mean = w @ points
    cov = (points - mean).T @ ((points - mean) * w[:, None])
    return mean, cov


@pytest.mark.parametrize("seed", [0, 1])
def test_rmhmc_fisher_is_exact(seed):
    X, y, _ = rnshmc.datasets.simulated_logistic(n=150, dim=2, rng=rng_seed(7))
    model = rnshmc.models.LogisticRegression(X, y, prior_variance=4.0)
    mean, cov = logistic_posterior_moments(model)
    res = RMHMC(model, metric="fisher", step_size=0.7, n_steps=3, jitter=True).sample(
        1500, tune=100, chains=2, rng=seed, progress=False)
    assert 0.5 < res.acceptance_rate.mean() < 0.999
    check_mean(res.samples, mean)
    check_covariance(res.samples, mean, cov)


def funnel_check(res):
    functions, truth = funnel_statistics(res.samples)
    z, tol = mean_within_mcse(functions, truth)
    assert np.all(np.abs(z) < tol), f"standardised errors {np.round(z, 2)}"


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow),
                                  pytest.param(2, marks=pytest.mark.slow)])
def test_rmhmc_softabs_funnel_is_exact(seed):
    """A funnel whose Hessian is indefinite in its neck and the metric varies by orders of
    magnitude: RMHMC with the SoftAbs Hessian metric keeps the law of x given v and the tail
    probability of v within Monte Carlo error."""
    sampler = RMHMC(funnel_target(), metric=funnel_hessian,
                    metric_derivatives=funnel_hessian_derivatives, softabs=1.0, step_size=0.5,
                    n_steps=4, jitter=True)
    res = sampler.sample(1200, tune=0, chains=2, rng=seed, init=np.array([[0.5, 0.0], [-0.5, 0.5]]),
                         progress=False)
    assert res.n_implicit_failures.sum() < 0.05 * res.accepted.size
    funnel_check(res)


def poor_rns_rmhmc(metric, seed, gaussian):
    # trust=False: the poor surrogate stays (the watch would refit it or fall back to exact
    # HMC on some seeds' chains; tested below with a surrogate certain to fail)
    return RNSRMHMC(gaussian, metric=metric, softabs=1.0, n_hidden=15,
                    surrogate=dict(n_train=60), n_adapt=150, n_steps=3, jitter=True,
                    trust=False).sample(1500, tune=300, chains=2, rng=seed, progress=False)


@pytest.mark.parametrize("metric", ["hessian", "diagonal"])
@pytest.mark.parametrize("seed", [0, 1])
def test_rns_rmhmc_is_exact_with_a_poor_surrogate(metric, seed):
    """15 units fitted to 60 exploration states of a correlated 4-d Gaussian: a poor surrogate
    potential and metric, kept for the whole run; the exact test keeps the mean and every
    covariance entry."""
    mean, cov, precision = gaussian_problem(seed, dim=4, condition=10.0)
    res = poor_rns_rmhmc(metric, seed, gaussian_target(mean, precision))
    assert res.fit_residual.max() > 1e-3  # the surrogate is indeed poor
    assert res.acceptance_rate.mean() > 0.2
    check_mean(res.samples, mean)
    check_covariance(res.samples, mean, cov)
    # one exact density per sampling iteration; no exact gradient after exploration
    assert np.all(res.n_density_evals_sampling == 1500)
    assert np.all(res.n_gradient_evals_sampling == 0)


def test_softabs_auto_keeps_a_positive_definite_hessian_and_maps_an_indefinite_one():
    """"auto": the surrogate's Hessian as it is where it is positive definite at the training
    states (a Gaussian's), SoftAbs with alpha their largest variance where it is not (a
    double well's, concave between its wells)."""
    from rnshmc.samplers.phases.base import LeapfrogSettings
    from rnshmc.samplers.phases.fit import FitState
    from rnshmc.samplers.phases.riemannian import SurrogateMetric
    rng = np.random.default_rng(rng_seed(0))
    Q = rng.uniform(-2.0, 2.0, size=(300, 2)) * [1.0, 0.5]
    wells = {"gaussian": (0.5 * (Q ** 2).sum(1), Q),
             "double well": ((Q[:, 0] ** 2 - 1) ** 2 + 0.5 * Q[:, 1] ** 2,
                             np.stack([4 * Q[:, 0] * (Q[:, 0] ** 2 - 1), Q[:, 1]], axis=1))}
    for name, (U, G) in wells.items():
        surrogate = rnshmc.RandomNetworkSurrogate(2, n_hidden=200, rng=rng_seed(1)).fit(Q, U, G)
        for kind in ("hessian", "diagonal"):
            fit = FitState()
            SurrogateMetric(kind, "auto", {}, LeapfrogSettings()).choose_softabs(
                fit, surrogate, Q, start=Q[0])
            if name == "gaussian":
                assert fit.softabs == 0.0
            else:
                assert fit.softabs == pytest.approx(np.linalg.eigvalsh(np.cov(Q.T))[-1])
            fit = FitState()
            SurrogateMetric(kind, 2.5, {}, LeapfrogSettings()).choose_softabs(fit, surrogate, Q,
                                                                            start=Q[0])
            assert fit.softabs == 2.5  # a given sharpness is kept


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow)])
def test_an_indefinite_surrogate_hessian_gets_softabs_and_the_chain_stays_exact(seed):
    """On the funnel the surrogate's Hessian is indefinite in the neck: with the defaults
    (softabs="auto") RNS-RMHMC maps it with SoftAbs instead of stopping with an error, and
    the draws keep the funnel's law within Monte Carlo error."""
    res = RNSRMHMC(funnel_target(), n_hidden=200, n_adapt=200).sample(
        2000, tune=500, chains=2, rng=seed, progress=False)
    assert np.all(res["softabs"] > 0)
    funnel_check(res)


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow)])
def test_a_useless_surrogate_metric_is_refitted_then_replaced_and_the_draws_stay_exact(seed):
    """3 units on a correlated 4-d Gaussian: the chain accepts most proposals but hardly
    moves (its step size adapted to a poor metric). The trust watch sees the short jumps,
    refits twice, falls back to exact NUTS and says so; the draws stay exact."""
    mean, cov, precision = gaussian_problem(seed, dim=4, condition=10.0)
    sampler = RNSRMHMC(gaussian_target(mean, precision), n_hidden=3, surrogate=dict(n_train=60),
                       n_adapt=100, n_steps=3, jitter=True)
    with pytest.warns(RuntimeWarning, match="its moves .* times as long") as caught:
        res = sampler.sample(3000, tune=300, chains=2, rng=seed, progress=False)
    assert sum("replaced by exact NUTS" in str(w.message) for w in caught) == 2
    assert np.all(res.n_refits == 2) and np.all(res.fallback)
    for events in res.trust_events:
        assert events[0]["window_jump"] < 0.1 * events[0]["exploration_jump"]
        assert [e["n_hidden"] for e in events[:2]] == [6, 12]
    assert 0.5 < res.exact_dynamics.mean() < 1.0
    check_mean(res.samples, mean)
    check_covariance(res.samples, mean, cov)


def test_rns_rmhmc_logistic_agrees_with_rmhmc():
    X, y, _ = rnshmc.datasets.simulated_logistic(n=150, dim=2, rng=rng_seed(7))
    model = rnshmc.models.LogisticRegression(X, y, prior_variance=4.0)
    mean, cov = logistic_posterior_moments(model)
    res = RNSRMHMC(model, n_hidden=100, step_size=0.7, n_steps=3, jitter=True).sample(
        1500, tune=500, chains=2, rng=rng_seed(3), progress=False)
    assert res.acceptance_rate.mean() > 0.6
    assert res.sampler == "RNS-RMHMC" and res.metric == "hessian"
    check_mean(res.samples, mean)


def test_indefinite_metric_at_the_initial_point_is_a_clear_error():
    sampler = RMHMC(funnel_target(), metric=funnel_hessian,
                    metric_derivatives=funnel_hessian_derivatives, step_size=0.3, n_steps=2)
    with pytest.raises(ValueError, match=r"not positive definite at q = .*softabs"):
        sampler.sample(10, tune=0, rng=rng_seed(0), init=np.array([3.0, -1.0]), progress=False)


def test_indefinite_metric_inside_a_trajectory_is_a_counted_rejection():
    """Without SoftAbs the funnel's Hessian is indefinite where x^2 > 2 e^v / sd^2: proposals
    that reach there are rejected, counted and warned about (the chain then only samples where
    the metric is positive definite, which the warning says)."""
    sampler = RMHMC(funnel_target(), metric=funnel_hessian,
                    metric_derivatives=funnel_hessian_derivatives, step_size=0.8, n_steps=5)
    with pytest.warns(RuntimeWarning, match="not positive definite"):
        res = sampler.sample(300, tune=0, rng=rng_seed(0), init=np.array([0.5, 0.5]),
                             progress=False)
    assert res.n_implicit_failures[0] > 0


def test_solver_statistics_in_arviz():
    az = pytest.importorskip("arviz")
    res = RMHMC(small_logistic(), step_size=0.5, n_steps=2).sample(20, tune=0, chains=2,
                                                                   rng=rng_seed(0),
                                                                   progress=False)
    data = res.to_arviz()
    stats = data["sample_stats"]
    assert stats["solver_iterations"].shape == (2, 20)
    np.testing.assert_array_equal(np.asarray(stats["solver_iterations"]), res.solver_iterations)
    assert "implicit_failed" in stats
    del az


def test_continuing_a_run_is_bit_identical():
    model = small_logistic()
    sampler = RMHMC(model, n_steps=2)
    full = sampler.sample(60, tune=40, chains=1, rng=rng_seed(5), progress=False)
    states = sampler.init_states(60, 40, 1, rng_seed(5))
    sampler.run_states(states, progress=False, stop_after=55)
    sampler.run_states(states, progress=False)
    continued = sampler.result(states)
    np.testing.assert_array_equal(continued.samples, full.samples)
    for key in ("n_gradient_evals", "n_metric_evals_sampling", "n_metric_derivative_evals"):
        # counts continue across the interruption; only a resumed chain's refactorisation of
        # G at its state is extra work
        assert 0 <= continued[key][0] - full[key][0] <= 1, key


def test_metric_evaluations_are_counted_as_exact_work():
    model = small_logistic()
    # hmc_warmup=0: all of tune is RMHMC warm-up, whose metric evaluations count too
    res = RMHMC(model, step_size=0.5, n_steps=2, hmc_warmup=0).sample(40, tune=10, chains=1,
                                                                      rng=rng_seed(0),
                                                                      progress=False)
    steps = res.n_steps.sum()
    # every step evaluates G at least at its end point and its derivative terms there
    assert res.n_metric_evals_sampling[0] >= steps
    assert res.n_metric_derivative_evals_sampling[0] >= steps
    assert res.n_metric_evals[0] > res.n_metric_evals_sampling[0]  # warm-up's too
    row = summarize("RMHMC", res)
    assert row["exact_evals"] == (res.n_density_evals_sampling[0] + res.n_gradient_evals_sampling[0]
                                  + res.n_metric_evals_sampling[0]
                                  + res.n_metric_derivative_evals_sampling[0])
    # a surrogate's metric is not the model's: RNS-RMHMC has no such counts
    rns = RNSRMHMC(model, softabs=1.0, n_hidden=15, surrogate=dict(n_train=50), n_adapt=20,
                   n_steps=2).sample(10, tune=100, rng=rng_seed(0), progress=False)
    assert "n_metric_evals" not in rns


def test_bad_arguments():
    model = small_logistic()
    gaussian = Target(None, logp_and_grad=lambda q: (-0.5 * q @ q, -q), dim=2)
    with pytest.raises(ValueError, match="Fisher metric of"):
        RMHMC(gaussian, metric="fisher")
    with pytest.raises(ValueError, match="Gauss-Newton metric of"):
        RMHMC(model, metric="gauss_newton")
    with pytest.raises(TypeError, match="metric_derivatives"):
        RMHMC(gaussian, metric=lambda q: np.eye(2))
    with pytest.raises(ValueError, match="metric must be"):
        RMHMC(model, metric="hessian")
    with pytest.raises(ValueError, match="softabs"):
        RMHMC(model, softabs=-1.0)
    with pytest.raises(ValueError, match="max_fixed_point_iterations"):
        RMHMC(model, max_fixed_point_iterations=0)
    with pytest.raises(ValueError, match="metric must be 'hessian' or 'diagonal'"):
        RNSRMHMC(model, metric="fisher")
    with pytest.raises(ValueError, match="additive nodes"):
        RNSRMHMC(model, surrogate=dict(nodes="rbf"))
    with pytest.raises(ValueError, match="step_size has 3 entries"):
        RNSRMHMC(model, step_size=[0.1, 0.2, 0.3], n_hidden=10).sample(
            10, tune=20, chains=2, rng=rng_seed(0), progress=False)


def test_rns_rmhmc_earlier_names_are_refused_naming_the_new_spelling():
    """RNS-RMHMC's earlier names (the exploration's explore_*, mass matrix and length, the
    surrogate's settings) raise a TypeError naming the new spelling, whose settings the run
    follows."""
    model = small_logistic()
    inverse_mass = np.diag([0.5, 1.0, 2.0])
    surrogate = dict(nodes="additive", activation="tanh", ridge=1e-5, weight_scale=0.3,
                     whiten=False, gradient_weight=0.5, n_train=50)
    explore = dict(step_size=0.3, n_steps=4, jitter=False)
    old = dict(surrogate, explore_step_size=0.3, explore_n_steps=4, explore_jitter=False,
               inverse_mass_matrix=inverse_mass, adapt_mass_matrix=False, n_explore=80)
    new = dict(surrogate=surrogate, explore=dict(explore, inverse_mass_matrix=inverse_mass,
                                                 adapt_mass_matrix=False))
    spellings = {name: f"surrogate=dict({name}=...)" for name in surrogate}
    spellings.update({f"explore_{name}": f"explore=dict({name}=...)" for name in explore})
    spellings.update(inverse_mass_matrix="explore=dict(inverse_mass_matrix=...)",
                     adapt_mass_matrix="explore=dict(adapt_mass_matrix=...)",
                     n_explore="sample(tune=...)")
    settings = dict(softabs=1.0, n_hidden=20, n_adapt=20, n_steps=2)
    check_renamed(lambda **kw: RNSRMHMC(model, **settings, **kw), old, spellings)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # (a short run's SamplingWarning)
        result = RNSRMHMC(model, **settings, **new).sample(40, tune=80, rng=rng_seed(0),
                                                           progress=False, pool=None)
    np.testing.assert_array_equal(result.n_gradient_evals, 80 * 4 + 1)  # 4 fixed steps
    np.testing.assert_array_equal(result.n_train, 50)


class QuadraticSurrogate:
    """A surrogate whose Hessian is the identity, except negative definite in its first
    coordinate beyond q[0] > 5 (the choice of SoftAbs needs only ``hessian``)."""

    def hessian(self, q):
        hessian = np.eye(len(q))
        if q[0] > 5.0:
            hessian[0, 0] = -1.0
        return hessian


@pytest.mark.parametrize("start, softabs", [([0.0, 0.0], False), ([6.0, 0.0], True)])
def test_softabs_auto_where_the_chain_starts_is_indefinite(start, softabs):
    """The Hessian as it is only where it is positive definite at the training states and
    where the chain starts on it (a start where it is not raised an error: one of 500
    simulated logistic regressions in the calibration grid)."""
    from rnshmc.samplers.phases.base import LeapfrogSettings
    from rnshmc.samplers.phases.fit import FitState
    from rnshmc.samplers.phases.riemannian import SurrogateMetric
    fit_state = FitState()
    Q = np.random.default_rng(rng_seed(0)).uniform(-1.0, 1.0, size=(50, 2))
    SurrogateMetric("hessian", "auto", {}, LeapfrogSettings()).choose_softabs(
        fit_state, QuadraticSurrogate(), Q, start=np.array(start))
    assert (fit_state.softabs > 0) == softabs
