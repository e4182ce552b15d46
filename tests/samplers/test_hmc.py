"""The HMC sampler (rnshmc.HMC, run by rnshmc.samplers._runner): what it samples
and how it is called. The parts it is built from are tested on their own: the metric
(test_metrics.py), the leapfrog and the gradient caching (test_integrators.py), the acceptance
step and divergences (test_transition.py) and the warm-up adaptation (test_adaptation.py).

* statistical tests on targets with known moments (a correlated Gaussian, the log-Gamma
  target), with ESS-based Monte Carlo errors, for several seeds (fixed seeds: a pass is
  deterministic, and the tolerances leave a margin so that other seeds pass too; the power
  check showing the moment test does fail for a broken accept rule is in test_transition.py);
* reproducibility and parallel chains (thread and process pools);
* exceptions from user callables, bad arguments, BridgeStan-style objects;
* the result's fields, saving it, and the progress bar.
"""
import concurrent.futures
import multiprocessing
import sys
import time

import numpy as np
import pytest
from scipy import stats

import rnshmc
from rnshmc import HMC, Target
from rnshmc.models import LogisticRegression

from testkit import (check_covariance, check_mean, dense_inverse_mass, gaussian_problem,
                     gaussian_target, harmonic_target, hmc_sample, log_gamma_statistics,
                     log_gamma_target, mean_within_mcse, rng_seed)

SEEDS = [0, 1, 2]
# more seeds for the statistical tests, in the slow suite (pytest -m slow)
SLOW_SEEDS = [pytest.param(seed, marks=pytest.mark.slow) for seed in range(3, 11)]

MASS_KINDS = ["identity", "diagonal", "dense"]


# ============================================================================================
# helpers


def inverse_mass_matrix(kind, covariance):
    """None (identity), the diagonal of the covariance, or the covariance itself."""
    if kind == "identity":
        return None
    if kind == "diagonal":
        return np.diag(covariance).copy()
    return covariance.copy()


def assert_same_result(a, b):
    for key in ("samples", "log_density", "accepted", "accept_prob", "diverging", "energy",
                "n_steps", "step_size", "n_gradient_evals", "n_density_evals"):
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    if a.inverse_mass_matrix is None:
        assert b.inverse_mass_matrix is None
    else:
        np.testing.assert_array_equal(a.inverse_mass_matrix, b.inverse_mass_matrix)


@pytest.fixture
def correlated_target():
    mean, cov, P = gaussian_problem(0, dim=4)
    return gaussian_target(mean, P)


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
def test_correlated_gaussian_moments(seed, mode, kind):
    """10-d Gaussian, condition number 30, nonzero mean.

    Means: |mean - true| < 4.5 MCSE per coordinate (MCSE = sd / sqrt(ESS)).
    Covariances: every entry (55 of them) within 5 MCSE, the MCSE of an entry being that of
    the mean of the products (x_i - mu_i)(x_j - mu_j), from their own ESS (see
    testkit.covariance_within_mcse).
    5 rather than 4.5 because 55 entries x 18 configurations are checked (two-sided normal
    tail at 5 sd: 6e-7 per entry) and ESS estimates of products are noisier. A 20%-of-scale
    error in any entry would be ~10 MCSE at these ESS (>= ~1000).
    """
    mean, cov, P = gaussian_problem(seed)
    settings = gaussian_sampler_settings(mode, kind, cov, P)
    res = hmc_sample(gaussian_target(mean, P), draws=1500, tune=1000, chains=2, rng=seed,
                     **settings)
    assert res.diverging.sum() == 0
    assert np.all(res.acceptance_rate > 0.5)
    check_mean(res.samples, mean)
    check_covariance(res.samples, mean, cov)
    if mode == "fixed":
        np.testing.assert_array_equal(res.step_size, settings["step_size"])


# ============================================================================================
# statistical tests: a skewed target with a large step


LOG_GAMMA_SHAPE = 2.0


@pytest.mark.parametrize("seed", SEEDS + [3, 4] + [pytest.param(seed, marks=pytest.mark.slow)
                                                     for seed in range(5, 15)])
@pytest.mark.parametrize("n_steps,jitter", [(3, False), (10, True)])
def test_non_gaussian_target_large_step(seed, n_steps, jitter):
    """log-Gamma(2) target sampled with a deliberately large step (acceptance ~0.5-0.6):
    mean, variance and two tail probabilities within 4.5 MCSE. Any accept-rule error shows up
    here, because the leapfrog error at this step size is large (see the power check in
    test_transition.py)."""
    res = hmc_sample(log_gamma_target(LOG_GAMMA_SHAPE), draws=10_000, tune=200, chains=2, rng=seed,
                     step_size=1.05, n_steps=n_steps, jitter=jitter, init=[0.4])
    assert np.all((res.acceptance_rate > 0.4) & (res.acceptance_rate < 0.7))
    functions, truth = log_gamma_statistics(res.samples[..., 0], LOG_GAMMA_SHAPE)
    z, tol = mean_within_mcse(functions, truth)
    assert np.all(np.abs(z) < tol), z


# ============================================================================================
# reproducibility and parallel chains


@pytest.mark.parametrize("settings", [dict(), dict(step_size=0.3, jitter=True)],
                         ids=["adapted", "fixed"])
def test_same_seed_same_draws(settings, correlated_target):
    target = correlated_target
    runs = [hmc_sample(target, draws=200, tune=150, chains=2, rng=rng, **settings)
            for rng in (rng_seed(7), rng_seed(7), np.random.SeedSequence(rng_seed(7)),
                        np.random.SeedSequence(rng_seed(7)),
                        np.random.default_rng(rng_seed(7)), np.random.default_rng(rng_seed(7)))]
    for other in runs[1:]:
        assert_same_result(runs[0], other)


@pytest.mark.parametrize("numpy_seed,python_seed", [(np.int64(7), 7), (np.array([7, 8]), [7, 8])],
                         ids=["int64", "int-array"])
def test_numpy_integer_seeds(numpy_seed, python_seed, correlated_target):
    """A NumPy integer (array) seed gives the draws of the same Python int (list) seed."""
    a = hmc_sample(correlated_target, draws=200, tune=150, chains=2, rng=python_seed)
    b = hmc_sample(correlated_target, draws=200, tune=150, chains=2, rng=numpy_seed)
    assert_same_result(a, b)


def test_different_seeds_and_chains_differ(correlated_target):
    target = correlated_target
    a = hmc_sample(target, draws=100, tune=50, chains=3, rng=rng_seed(1), step_size=0.3)
    b = hmc_sample(target, draws=100, tune=50, chains=3, rng=rng_seed(2), step_size=0.3)
    assert not np.array_equal(a.samples, b.samples)
    for i in range(3):
        for j in range(i):
            assert not np.any(np.all(a.samples[i] == a.samples[j], axis=-1))


def test_one_generator_used_twice_gives_fresh_streams(correlated_target):
    target = correlated_target
    rng = np.random.default_rng(rng_seed(3))
    a = hmc_sample(target, draws=50, chains=2, rng=rng, step_size=0.3)
    b = hmc_sample(target, draws=50, chains=2, rng=rng, step_size=0.3)
    assert not np.array_equal(a.samples, b.samples)


@pytest.mark.parametrize("settings", [dict(), dict(step_size=0.3)], ids=["adapted", "fixed"])
def test_thread_pool_equals_serial(settings, correlated_target):
    target = correlated_target
    serial = hmc_sample(target, draws=200, tune=200, chains=3, rng=rng_seed(11), **settings)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        threaded = hmc_sample(target, draws=200, tune=200, chains=3, rng=rng_seed(11), pool=pool,
                              **settings)
    assert_same_result(serial, threaded)


def small_logistic_model(n_threads=1):
    X, y, _ = rnshmc.datasets.simulated_logistic(n=3000, dim=4, rng=rng_seed(5))
    return LogisticRegression(X, y, n_threads=n_threads)


def test_thread_pool_equals_serial_c_target():
    """C-level target: one target shared by every chain (it holds no scratch: each chain owns
    its own) and the C loop runs without the GIL, chains truly in parallel."""
    model = small_logistic_model()
    serial = hmc_sample(model, draws=150, tune=100, chains=4, rng=rng_seed(3))
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        threaded = hmc_sample(model, draws=150, tune=100, chains=4, rng=rng_seed(3), pool=pool)
    assert_same_result(serial, threaded)


def test_process_pool_with_picklable_model():
    model = small_logistic_model()
    serial = hmc_sample(model, draws=50, chains=2, rng=rng_seed(4), step_size=0.05, n_steps=5)
    with concurrent.futures.ProcessPoolExecutor(
            2, mp_context=multiprocessing.get_context("spawn")) as pool:
        parallel = hmc_sample(model, draws=50, chains=2, rng=rng_seed(4), step_size=0.05, n_steps=5,
                              pool=pool)
    assert_same_result(serial, parallel)


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
        hmc_sample(target, step_size=0.1)
    assert "failing_logp_at_start" in traceback_names(excinfo)


class RecordingGaussian:
    """N(mean, sd^2 I) as a model that keeps every point it is asked for."""

    def __init__(self, mean, sd):
        self.mean, self.sd, self.asked = np.asarray(mean, dtype=float), sd, []
        self.dim = len(self.mean)

    def log_density(self, q):
        return self.log_density_gradient(q)[0]

    def log_density_gradient(self, q):
        self.asked.append(np.array(q))
        r = (q - self.mean) / self.sd
        return -0.5 * float(r @ r), -r / self.sd


@pytest.mark.parametrize("seed", SEEDS[:2])
def test_the_warm_up_never_asks_the_model_for_points_far_out(seed):
    """A narrow Gaussian (sd 0.02) 4 units from the start: the gradient there is about 1e4,
    so the step-size search's first step of size 1 and the unstable early trajectories
    reached |q| ~ 6000 (and 4e13 with the trajectories run to their end). The warm-up's
    steps stay in a box around the points the chain has seen, widened by four times its width
    (at least 4) on each side: the origin and the mode span about 4 units, so nothing beyond
    about 4 + 4 * 4 is asked for (10 at most, measured), and the posterior is still right."""
    model = RecordingGaussian([-0.23, 3.92], 0.02)
    res = hmc_sample(model, draws=1000, tune=1000, rng=seed, init=[0.0, 0.0])
    asked = np.array(model.asked)
    assert np.max(np.abs(asked)) < 25.0
    check_mean(res.samples, model.mean)


@pytest.mark.parametrize("seed", SEEDS[:2])
def test_a_posterior_far_from_the_start_is_still_reached(seed):
    """The probe bound grows with every step (docs/algorithms.md, section 1): from the
    default start, 170 units from a posterior of scale 1, the warm-up still gets there and
    the chains converge to it."""
    mean = np.array([100.0, 90.0, 110.0])
    model = rnshmc.models.Gaussian(mean, covariance=np.eye(3))
    res = HMC(model).sample(1000, chains=4, rng=rng_seed(seed), progress=False)
    assert res.converged, res.convergence_problems
    check_mean(res.samples, mean)


def test_only_the_warm_up_is_bounded():
    """The probe bound lives in the warm-up's kernel state (so a checkpoint restores it) and
    is gone once the sampling phase starts."""
    model = RecordingGaussian([1.0, -1.0], 0.5)
    sampler = HMC(model)
    states = sampler.init_states(50, tune=100, chains=1, rng=rng_seed(4))
    states = sampler.run_states(states, progress=False, stop_after=60)
    assert states[0].phase == "warmup" and states[0].kernel["bound"].shape == (4, 2)
    states = sampler.run_states(states, progress=False)
    assert states[0].done and states[0].kernel["bound"].size == 0


@pytest.mark.parametrize("call", [5, 300])
@pytest.mark.parametrize("tune", [0, 100])
def test_exception_inside_the_c_loop_propagates(call, tune):
    failing = FailsLater(call)
    target = Target(None, logp_and_grad=failing.user_logp_and_grad_that_fails_later, dim=2)
    with pytest.raises(UserModelError, match=f"failed on call {call}") as excinfo:
        hmc_sample(target, draws=1000, tune=tune, step_size=None if tune else 0.3)
    assert "user_logp_and_grad_that_fails_later" in traceback_names(excinfo)
    assert failing.calls == call  # stopped at once


@pytest.mark.skipif(sys.version_info < (3, 11), reason="exception notes are Python 3.11's")
def test_a_models_exception_names_the_callable_and_the_point():
    failing = FailsLater(5)
    target = Target(None, logp_and_grad=failing.user_logp_and_grad_that_fails_later, dim=2)
    with pytest.raises(UserModelError) as excinfo:
        hmc_sample(target, draws=100, step_size=0.3, init=[0.5, -0.5])
    notes = getattr(excinfo.value, "__notes__", [])
    assert any("logp_and_grad (FailsLater.user_logp_and_grad_that_fails_later) at q = ["
               in note for note in notes), notes


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
            hmc_sample(target, draws=500, chains=2, step_size=0.3, pool=pool)
    assert "user_gradient_that_fails" in traceback_names(excinfo)


def test_non_finite_log_density_at_initial_point():
    for bad in (-np.inf, np.nan, np.inf):
        target = Target(lambda q, bad=bad: bad, grad_logp=standard_grad, dim=2)
        with pytest.raises(ValueError, match="initial point"):
            hmc_sample(target, step_size=0.1, init=[1.0, 2.0])


def test_non_finite_gradient_at_initial_point():
    target = Target(lambda q: -0.5 * float(q @ q), grad_logp=lambda q: np.array([np.nan, 1.0]),
                    dim=2)
    with pytest.raises(ValueError, match="gradient") as excinfo:
        hmc_sample(target, step_size=0.1, init=[1.0, 2.0])
    assert "initial point" in str(excinfo.value)


def test_gradient_of_wrong_shape():
    for wrong in (np.zeros(3), np.zeros((2, 1)), 0.0):
        target = Target(lambda q: 0.0, grad_logp=lambda q, wrong=wrong: wrong, dim=2)
        with pytest.raises(ValueError, match="shape"):
            hmc_sample(target, step_size=0.1)


@pytest.mark.parametrize("arguments,error", [
    (dict(init=np.zeros(3)), ValueError),                   # init: wrong dim
    (dict(init=np.zeros((2, 2)), chains=3), ValueError),    # wrong chains
    (dict(init=np.zeros((1, 1, 2))), ValueError),
    (dict(init=[0.0, np.nan]), ValueError),
    (dict(init=[0.0, np.inf]), ValueError),
    (dict(draws=0), ValueError),
    (dict(draws=-5), ValueError),
    (dict(draws=2.5), TypeError),                          # not an integer (validation.py:
                                                           # TypeError for the wrong kind)
    (dict(tune=-1), ValueError),
    (dict(chains=0), ValueError),
    (dict(chains=-1), ValueError),
    (dict(chains=1.5), ValueError),
    (dict(step_size=0.0), ValueError),
    (dict(step_size=-0.1), ValueError),
    (dict(step_size=np.nan), ValueError),
    (dict(step_size=np.inf), ValueError),
    (dict(n_steps=0), ValueError),
    (dict(n_steps=-3), ValueError),
    (dict(n_steps=2.5), TypeError),
    (dict(target_accept=0.0), ValueError),
    (dict(target_accept=1.0), ValueError),
    (dict(target_accept=1.5), ValueError),
    (dict(target_accept=np.nan), ValueError),
    (dict(max_energy_error=0.0), ValueError),
    (dict(mass_matrix=np.ones(3)), ValueError),             # wrong shape
    (dict(mass_matrix=np.ones((2, 3))), ValueError),
    (dict(mass_matrix=np.array([1.0, -1.0])), ValueError),  # not positive
    (dict(mass_matrix=np.array([1.0, np.nan])), ValueError),
    (dict(mass_matrix=np.array([[1.0, 2.0], [2.0, 1.0]])), ValueError),  # not PD
    (dict(mass_matrix=np.array([[1.0, 0.5], [0.0, 1.0]])), ValueError),  # asym.
    (dict(rng=np.random.RandomState(0)), TypeError),
    (dict(pool=object()), TypeError),
])
def test_bad_arguments(arguments, error):
    target = Target(lambda q: -0.5 * float(q @ q), grad_logp=standard_grad, dim=2)
    with pytest.raises(error):
        hmc_sample(target, **arguments)


def test_target_without_gradient():
    with pytest.raises(ValueError, match="gradient"):
        HMC(Target(lambda q: -0.5 * float(q @ q), dim=2))

    class NoGradient:
        dim = 2

        def log_density(self, q):
            return -0.5 * float(q @ q)

    with pytest.raises((TypeError, ValueError), match="gradient"):
        hmc_sample(NoGradient(), step_size=0.1)


def test_not_a_target():
    for thing in (42, "model", object(), lambda q: 0.0):
        with pytest.raises(TypeError, match="target"):
            hmc_sample(thing, init=np.zeros(2), step_size=0.1)


def test_not_a_target_without_init_is_a_type_error():
    with pytest.raises(TypeError):
        hmc_sample(object(), step_size=0.1)


def test_dim_of_target_and_init_must_agree():
    with pytest.raises(ValueError):
        hmc_sample(harmonic_target(3), init=np.zeros(2))
    # no declared dim: inferred from init
    target = Target(lambda q: -0.5 * float(q @ q), grad_logp=standard_grad)
    res = hmc_sample(target, draws=20, chains=2, init=np.zeros((2, 4)), step_size=0.5)
    assert res.samples.shape == (2, 20, 4)
    with pytest.raises(ValueError, match="dim"):
        hmc_sample(target, draws=20)


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
def test_bridgestan_style_object(dim_as_method):
    mean, cov, P = gaussian_problem(1, dim=3)
    model = BridgeStanLikeGaussian(mean, P, dim_as_method)
    res = hmc_sample(model, draws=800, tune=500, chains=2, rng=rng_seed(9))
    assert res.samples.shape == (2, 800, 3)
    # the same density written as an rnshmc.Target gives the same draws, bit for bit
    same = hmc_sample(gaussian_target(mean, P), draws=800, tune=500, chains=2, rng=rng_seed(9))
    np.testing.assert_array_equal(res.samples, same.samples)
    check_mean(res.samples, mean)


# ============================================================================================
# the result


@pytest.mark.parametrize("chains", [1, 3])
def test_result_fields(chains):
    d, draws, L = 3, 400, 6
    target = harmonic_target(d)
    started = time.perf_counter()
    res = hmc_sample(target, draws=draws, tune=300, chains=chains, rng=rng_seed(2), n_steps=L)
    elapsed = time.perf_counter() - started
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
    # the phases' seconds are parts of the call's (summed over the chains, which run serially
    # here: a test target of Python callables)
    assert sum(res.timings.values()) <= elapsed
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
    fixed = hmc_sample(target, draws=10, chains=chains, step_size=0.5)
    assert fixed.inverse_mass_matrix is None
    np.testing.assert_array_equal(fixed.step_size, np.full(chains, 0.5))
    dense = hmc_sample(target, draws=10, chains=chains, step_size=0.5, mass_matrix=2 * np.eye(d))
    np.testing.assert_allclose(dense.inverse_mass_matrix, np.broadcast_to(np.eye(d) / 2,
                                                                          (chains, d, d)))


def test_jitter_is_uniform():
    res = hmc_sample(harmonic_target(1), draws=20_000, step_size=0.3, n_steps=5, rng=rng_seed(8))
    counts = np.bincount(res.n_steps.ravel(), minlength=6)[1:]
    assert stats.chisquare(counts).pvalue > 1e-4


def test_docstring_example():
    target = rnshmc.Target(lambda q: -0.5 * q @ q, grad_logp=lambda q: -q, dim=2)
    res = rnshmc.HMC(target, n_steps=5).sample(500, tune=500, rng=rng_seed(0), progress=False)
    assert res.samples.shape == (4, 500, 2)


def test_result_save_load_round_trip(tmp_path):
    res = hmc_sample(harmonic_target(2), draws=100, tune=100, chains=2, rng=rng_seed(3))
    path = tmp_path / "hmc_result.npz"
    res.save(path)
    loaded = rnshmc.load(path)
    assert loaded.sampler == "HMC"
    assert_same_result(res, loaded)
    assert loaded.timings == res.timings


def test_progress_bar_does_not_change_the_draws(capsys):
    target = harmonic_target(2)
    quiet = HMC(target, n_steps=4).sample(250, tune=120, chains=2, rng=rng_seed(6), progress=False)
    shown = HMC(target, n_steps=4).sample(250, tune=120, chains=2, rng=rng_seed(6), progress=True)
    capsys.readouterr()
    assert_same_result(quiet, shown)
