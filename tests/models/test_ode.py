"""The Lotka-Volterra ODE posterior (``rnshmc.models.lotka_volterra``): its log density against
an independent solve (``odeint`` on the populations themselves) with scipy.stats's densities,
its forward-sensitivity gradient against finite differences, -inf (and no exception or
warning) where the solve fails, the target pickled (its chains in spawned worker processes),
and a short HMC run."""
import copy
import multiprocessing
import pickle
import types
import warnings
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pytest
from scipy import stats
from scipy.integrate import odeint

import rnshmc
from rnshmc.diagnostics import SamplingWarning
from rnshmc.models import lotka_volterra, ode
from testkit import rng_seed


@pytest.fixture(scope="module")
def model():
    return lotka_volterra()


def populations(q, times):
    """(u, v) at ``times``, shape (2, n): odeint (LSODA) on du/dt = (alpha - beta v) u,
    dv/dt = (-gamma + delta u) v, not on the logs as the model does."""
    alpha, beta, gamma, delta, u0, v0 = np.exp(q[:6])

    def rhs(z, t):
        u, v = z
        return [(alpha - beta * v) * u, (-gamma + delta * u) * v]
    return odeint(rhs, [u0, v0], np.r_[0.0, times], rtol=1e-11, atol=1e-11)[1:].T


def scipy_log_density(q, times, y):
    """The log joint density from scipy.stats, on the log scale (the Jacobian, + q, added)."""
    x = np.exp(q)
    prior = (stats.truncnorm.logpdf(x[[0, 2]], -2.0, np.inf, loc=1.0, scale=0.5).sum()
             + stats.truncnorm.logpdf(x[[1, 3]], -1.0, np.inf, loc=0.05, scale=0.05).sum()
             + stats.lognorm.logpdf(x[4:6], 1.0, scale=10.0).sum()
             + stats.lognorm.logpdf(x[6:8], 1.0, scale=np.exp(-1.0)).sum() + q.sum())
    z = populations(q, times)
    return prior + stats.lognorm.logpdf(y, x[6:8, None], scale=z).sum()


def points(reference, n=2):
    """The truth, then points about it at the posterior's scale (about 0.1 on each log)."""
    yield reference["truth"]
    rng = np.random.default_rng(rng_seed(3))
    for _ in range(n):
        yield reference["truth"] + 0.15 * rng.standard_normal(8)


def test_dimension_and_reference(model):
    target, reference = model
    assert target.dim == 8 and target.has_gradient
    np.testing.assert_allclose(np.exp(reference["truth"]), [0.55, 0.028, 0.80, 0.024, 33.0,
                                                            6.0, 0.25, 0.25])
    np.testing.assert_allclose(reference["times"], np.arange(1.0, 21.0))
    assert reference["y"].shape == (2, 20) and np.all(reference["y"] > 0)
    # the data are the true populations with log-normal noise of scale 0.25
    noise = np.log(reference["y"]) - np.log(populations(reference["truth"], reference["times"]))
    assert 0.15 < noise.std() < 0.35 and abs(noise.mean()) < 0.15
    small, small_reference = lotka_volterra(n_times=5, seed=1)
    np.testing.assert_allclose(small_reference["times"], [4.0, 8.0, 12.0, 16.0, 20.0])
    assert small_reference["y"].shape == (2, 5)


def test_the_solve_matches_an_independent_one(model):
    _, reference = model
    times = reference["times"]
    for q in points(reference):
        expected = np.log(populations(q, times))
        for sensitivities in (False, True):
            solution = ode._solve(np.exp(q[:4]), q[4:6], times, 1e-8, 1e-8, sensitivities)
            assert solution.shape == (14 if sensitivities else 2, times.size)
            np.testing.assert_allclose(solution[:2], expected, rtol=0, atol=1e-6)


def test_the_right_hand_sides_take_several_states_at_once():
    rng = np.random.default_rng(rng_seed(5))
    rates = (0.55, 0.028, 0.80, 0.024)
    for rhs, size in ((ode._log_rhs, 2), (ode._log_sensitivity_rhs, 14)):
        states = rng.standard_normal((size, 3))
        expected = np.column_stack([rhs(states[:, k], rates) for k in range(3)])
        np.testing.assert_allclose(rhs(states, rates), expected, rtol=1e-15)


def test_log_density_is_scipys(model):
    target, reference = model
    for q in points(reference):
        expected = scipy_log_density(q, reference["times"], reference["y"])
        np.testing.assert_allclose(target.log_density(q), expected, rtol=1e-7)
        np.testing.assert_allclose(target.log_density_gradient(q)[0], expected, rtol=1e-7)


def test_gradient_matches_central_differences(model):
    target, reference = model
    h = 1e-4
    for q in points(reference):
        _, gradient = target.log_density_gradient(q)
        numeric = np.array([(target.log_density(q + h * e) - target.log_density(q - h * e))
                            / (2 * h) for e in np.eye(8)])
        # (the solves' errors, about 1e-8 relative, divided by h)
        np.testing.assert_allclose(gradient, numeric, rtol=1e-4,
                                   atol=1e-5 * np.abs(gradient).max())


@pytest.mark.parametrize("shift", [
    {0: 30.0},                   # alpha ~ 6e12: the prey explode at once
    {0: 4.0},                    # alpha ~ 30: cycles of many orders of magnitude
    {2: 10.0},                   # gamma ~ 2e4: the predators vanish at once
    {1: 30.0, 3: 30.0},          # both interaction rates huge
    {4: 50.0},                   # u0 ~ 1e23
    {6: 800.0},                  # sigma_u overflows
    {6: -600.0},                 # 1 / sigma_u^2 overflows
    {0: 650.0},                  # alpha ~ 1e282
    {7: np.nan},
])
def test_far_out_points_are_outside_the_support(model, shift):
    target, reference = model
    q = reference["truth"].copy()
    for k, dq in shift.items():
        q[k] += dq
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        logp, gradient = target.log_density_gradient(q)
        value = target.log_density(q)
    assert logp == -np.inf and value == -np.inf
    assert gradient.shape == (8,) and np.all(gradient == 0)


def test_a_failed_or_abandoned_solve_is_minus_infinity(model, monkeypatch):
    target, reference = model
    q = reference["truth"]
    monkeypatch.setattr(ode, "MAX_RHS_EVALUATIONS", 50)  # abandoned
    assert target.log_density(q) == -np.inf
    logp, gradient = target.log_density_gradient(q)
    assert logp == -np.inf and np.all(gradient == 0)
    monkeypatch.undo()

    def failing_solve(fun, t_span, y0, **kwargs):
        return types.SimpleNamespace(success=False, y=np.empty((len(y0), 0)))
    monkeypatch.setattr(ode, "solve_ivp", failing_solve)
    assert target.log_density(q) == -np.inf
    assert target.log_density_gradient(q)[0] == -np.inf


def test_the_solves_are_counted():
    target, reference = lotka_volterra(n_times=4)
    assert target.n_solves == 0 and target.n_gradient_solves == 0
    target.log_density(reference["truth"])
    target.log_density_gradient(reference["truth"])
    target.log_density_gradient(reference["truth"])
    assert target.n_solves == 3 and target.n_gradient_solves == 2


def test_the_target_is_the_class_given_the_data(model):
    target, reference = model
    assert isinstance(target, ode.LotkaVolterra) and target.dim == 8
    again = ode.LotkaVolterra(reference["times"], reference["y"])
    q = reference["truth"] + 0.05
    assert again.log_density(q) == target.log_density(q)
    for bad in (dict(times=reference["times"][::-1]), dict(y=-reference["y"]),
                dict(y=reference["y"][:, 1:]), dict(rtol=0.0), dict(atol=np.nan)):
        arguments = dict(times=reference["times"], y=reference["y"]) | bad
        with pytest.raises(ValueError):
            ode.LotkaVolterra(**arguments)


def test_the_target_pickles(model):
    target, reference = model
    for clone in (pickle.loads(pickle.dumps(target)), copy.deepcopy(target)):
        assert type(clone) is ode.LotkaVolterra and clone.dim == 8
        for q in points(reference):
            assert clone.log_density(q) == target.log_density(q)
            value, gradient = clone.log_density_gradient(q)
            expected_value, expected_gradient = target.log_density_gradient(q)
            assert value == expected_value
            np.testing.assert_array_equal(gradient, expected_gradient)
    # (no function of __main__ in it: a spawned worker imports rnshmc.models.ode alone)
    assert b"__main__" not in pickle.dumps(target)


def test_a_copy_counts_its_own_solves():
    target, reference = lotka_volterra(n_times=4)
    target.log_density(reference["truth"])
    target.log_density_gradient(reference["truth"])
    clone = pickle.loads(pickle.dumps(target))
    assert (clone.n_solves, clone.n_gradient_solves) == (0, 0)  # (its own lock, too)
    clone.log_density_gradient(reference["truth"])
    assert (clone.n_solves, clone.n_gradient_solves) == (1, 1)
    assert (target.n_solves, target.n_gradient_solves) == (2, 1)


def test_chains_in_spawned_worker_processes_draw_what_serial_chains_do(model):
    target, _ = model
    sampler = rnshmc.HMC(target, n_steps=5)
    run = dict(draws=20, tune=20, chains=2, rng=rng_seed(1), progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # (no "run one after another")
        warnings.simplefilter("ignore", SamplingWarning)  # (a short run)
        with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
            in_processes = sampler.sample(pool=pool, **run)
        serial = sampler.sample(pool=None, **run)
    np.testing.assert_array_equal(in_processes.samples, serial.samples)
    np.testing.assert_array_equal(in_processes.n_gradient_evals, serial.n_gradient_evals)


def test_the_chains_start_near_the_truth(model):
    target, reference = model
    start = target.init_point(np.random.default_rng(rng_seed(0)))
    assert start.shape == (8,) and np.abs(start - reference["truth"]).max() < 0.5
    assert np.isfinite(target.log_density(start))


@pytest.mark.slow  # (about 25 s: some 4,000 gradient solves)
def test_a_short_hmc_run(model):
    target, reference = model
    with warnings.catch_warnings():  # (200 draws: the health checks warn of a small ESS)
        warnings.simplefilter("ignore", SamplingWarning)
        result = rnshmc.HMC(target).sample(200, tune=200, chains=2, rng=rng_seed(0),
                                           progress=False, pool=None)
    draws = result.samples
    assert draws.shape == (2, 200, 8) and np.all(np.isfinite(draws))
    # the draws are about the truth (posterior standard deviations are 0.07 to 0.17)
    assert np.abs(draws.reshape(-1, 8).mean(axis=0) - reference["truth"]).max() < 0.6
