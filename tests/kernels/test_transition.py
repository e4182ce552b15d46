"""The acceptance step of a C chain (rnshmc._kernels._transition.Chain):

* a power check showing that the moment test used on the samplers does fail for chains built
  from the same leapfrog with a broken accept rule;
* a surrogate driving the dynamics with the true target's Metropolis test (Chain(dynamics,
  test)): exact, with one density-only evaluation of the true target per transition;
* divergences (non-finite densities or gradients, energy errors above max_energy_error) are
  rejections, recorded as such;
* the Chain's argument and state checks, and energy_error_of_one_step.
"""
import math

import numpy as np
import pytest
from scipy import stats

from rnshmc import Target
from rnshmc._kernels._chain import TRANSITION
from rnshmc._kernels._integrators import Leapfrog
from rnshmc._kernels._metrics import EuclideanMetric
from rnshmc._kernels._targets import PyCallableTarget
from rnshmc._kernels._transition import Chain
from rnshmc.targets import as_ctarget

from testkit import (check_covariance, check_mean, covariance_within_mcse, harmonic_target,
                     hmc_sample, log_gamma_statistics, log_gamma_target, make_chain, mean_within_mcse,
                     run_chain, rng_seed)

SEEDS = [0, 1, 2]
# more seeds for the statistical tests, in the slow suite (pytest -m slow)
SLOW_SEEDS = [pytest.param(seed, marks=pytest.mark.slow) for seed in range(3, 11)]

LOG_GAMMA_SHAPE = 2.0


# ============================================================================================
# a biased chain must be caught


@pytest.mark.parametrize("rule", ["always accept", "inverted comparison", "sign of dH"])
def test_power_check_broken_accept_rules_fail(rule):
    """The moment check of test_hmc's log-Gamma test on chains built from the same leapfrog
    with a broken Metropolis rule must fail: the statistical test has power against the bugs
    it is for. (Its leapfrog does not watch the energy: a broken chain climbing to ever
    higher energies would otherwise be held back where a trajectory rises by 1000.)"""
    chain = make_chain(log_gamma_target(LOG_GAMMA_SHAPE), 1, max_energy_error=math.inf)
    generator = np.random.default_rng(rng_seed(0))
    eps, n_steps, draws = 1.05, 3, 3000
    chains = []
    for _ in range(2):
        q = np.array([0.4])
        U = -(LOG_GAMMA_SHAPE * q[0] - np.exp(q[0]))
        draws_ = np.empty(draws)
        for i in range(draws):
            p = generator.standard_normal(1)
            q_new, p_new, U_new, _ = chain.integrate(q, p, eps, n_steps)
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
    functions, truth = log_gamma_statistics(np.array(chains), LOG_GAMMA_SHAPE)
    z, tol = mean_within_mcse(functions, truth)
    assert np.max(np.abs(z)) > 2 * tol, z


# ============================================================================================
# a surrogate drives the dynamics, the true target decides (Chain(dynamics, test))


def test_surrogate_dynamics_true_metropolis_test():
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

    chain = Chain(PyCallableTarget(2, logp_and_grad=surrogate_logp_and_grad), true_target,
                  metric=EuclideanMetric(2), integrator=Leapfrog())
    chain.set_position(true_mean)
    chains, steps = [], 0
    for c in range(2):
        chain.set_position(true_mean)
        out = run_chain(chain, np.random.default_rng([12, c]), 6000, 0.5, 5, jitter=True)
        np.testing.assert_allclose(out["log_density"],
                                   [true_logp(q) for q in out["samples"]], rtol=1e-12)
        chains.append(out["samples"])
        steps += out["n_steps"].sum()
    samples = np.array(chains)
    check_mean(samples, true_mean)
    check_covariance(samples, true_mean, np.diag(true_sd ** 2))
    # dynamics gradients: one per leapfrog step (+ the 3 starts); test densities: one per
    # transition (+ the starts), and none during the trajectories
    assert chain.n_gradient_evals == steps + 3
    assert chain.n_density_evals == 2 * 6000 + 3


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
def test_divergences_are_rejected_and_recorded(seed, kind):
    res = hmc_sample(walled_normal(kind), draws=6000, tune=100, chains=2, rng=seed, step_size=1.0,
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
    z, tol = mean_within_mcse(functions, np.array([truncated.mean(), truncated.var()]))
    assert np.all(np.abs(z) < tol), z


def test_max_energy_error_is_respected():
    """A proposal with dH > max_energy_error is a divergence with acceptance 0; any other has
    acceptance min(1, exp(-dH)) >= exp(-max_energy_error)."""
    target = harmonic_target(2)
    common = dict(draws=3000, chains=2, rng=rng_seed(5), step_size=1.9, n_steps=3, init=[0.5, -0.5])
    strict = hmc_sample(target, max_energy_error=0.5, **common)
    lenient = hmc_sample(target, **common)                    # default 1000
    assert 0.05 < strict.diverging.mean() < 0.95
    assert lenient.diverging.sum() == 0                       # same dynamics, far below 1000
    ok = ~strict.diverging
    assert np.all(strict.accept_prob[ok] >= math.exp(-0.5) * (1 - 1e-12))
    assert np.all(strict.accept_prob[strict.diverging] == 0.0)
    assert not np.any(strict.accepted & strict.diverging)
    # the lenient run does have such proposals, accepted now and then
    assert np.any((lenient.accept_prob < math.exp(-0.5)) & lenient.accepted)


def recording_harmonic(dim):
    """U = q^T q / 2 as a Python target that keeps every point it is asked for."""
    asked = []

    def logp_and_grad(q):
        asked.append(np.array(q))
        return -0.5 * float(q @ q), -q

    return Target(None, logp_and_grad=logp_and_grad, dim=dim), asked


def test_a_trajectory_stops_at_its_first_diverging_step():
    """An unstable leapfrog (step 2.5 on a unit harmonic oscillator: each step multiplies the
    amplitude by about 4) stops at the first step whose energy rises max_energy_error above
    the start: nothing is evaluated past it, where 40 steps would reach |q| ~ 1e24."""
    target, asked = recording_harmonic(2)
    chain = make_chain(target, 2, max_energy_error=50.0)
    chain.set_position(np.array([0.3, -0.2]))
    asked.clear()
    out = run_chain(chain, np.random.default_rng(rng_seed(3)), 20, 2.5, 40)
    assert np.all(out["diverging"]) and np.all(out["n_steps"] < 40)
    assert len(asked) == out["n_steps"].sum()          # one evaluation a step, none after
    # every point but a trajectory's last is within the energy limit (H0 + 50, H0 < 20 here)
    assert np.max(np.abs(np.concatenate(asked))) < 100.0


def simulated_chain_with_one_sided_watch(eps, n_steps, limit, draws, generator):
    """A NumPy HMC chain on N(0, 1) whose trajectories stop where the energy rises ``limit``
    above the start, without the same check from the end (the rule the chain must not have):
    returns its draws."""
    q, draws_ = 0.0, np.empty(draws)
    for i in range(draws):
        p = generator.standard_normal()
        H0, x, v, stopped = 0.5 * (q * q + p * p), q, p, False
        for _ in range(n_steps):
            v -= 0.5 * eps * x
            x += eps * v
            v -= 0.5 * eps * x
            if 0.5 * (x * x + v * v) > H0 + limit:
                stopped = True
                break
        H1 = 0.5 * (x * x + v * v)
        if not stopped and generator.uniform() < math.exp(min(0.0, H0 - H1)):
            q = x
        draws_[i] = q
    return draws_


@pytest.mark.parametrize("seed", SEEDS[:2])
def test_stopping_diverging_trajectories_keeps_the_chain_exact(seed):
    """The energy watch rejects a trajectory whose highest energy is more than
    max_energy_error above its start or its end, a rule that reads the same from either end
    (docs/algorithms.md, section 1). With a watch that trips on a third of the trajectories
    the chain still samples N(0, I); the one-sided rule (stop above the start only) would
    shrink the variance to about 0.43, and the same check catches it."""
    eps, n_steps, limit, draws = 1.2, 3, 0.3, 20000
    out = []
    for c in range(2):
        chain = make_chain(harmonic_target(2), 2, max_energy_error=limit)
        chain.set_position(np.zeros(2))
        out.append(run_chain(chain, np.random.default_rng(rng_seed(seed) + 100 * c), draws,
                             eps, n_steps))
    samples = np.stack([o["samples"] for o in out])
    assert 0.1 < np.mean([o["diverging"].mean() for o in out]) < 0.9
    check_covariance(samples, np.zeros(2), np.eye(2))
    # power: the one-sided rule fails the same check
    generator = np.random.default_rng(rng_seed(seed))
    one_sided = np.stack([simulated_chain_with_one_sided_watch(eps, n_steps, limit, draws,
                                                               generator)[:, None]
                          for _ in range(2)])
    z, tol = covariance_within_mcse(one_sided, np.zeros(1), np.eye(1))
    assert np.any(np.abs(z) > tol)


# ============================================================================================
# the chain's checks and energy_error_of_one_step


def test_chain_checks():
    t2 = as_ctarget(harmonic_target(2), 2)
    t3 = as_ctarget(harmonic_target(3), 3)
    def parts():  # a chain's own metric and integrator
        return dict(metric=EuclideanMetric(2), integrator=Leapfrog())

    with pytest.raises(ValueError, match="dim"):
        Chain(t2, t3, **parts())
    with pytest.raises(ValueError, match="dim"):
        Chain(t3, metric=EuclideanMetric(2), integrator=Leapfrog())
    with pytest.raises(TypeError, match="metric"):
        Chain(t2, integrator=Leapfrog())
    with pytest.raises(TypeError, match="integrator"):
        Chain(t2, metric=EuclideanMetric(2))
    with pytest.raises(ValueError, match="delayed acceptance"):
        Chain(t2, delayed_acceptance=True, **parts())
    chain = Chain(t2, **parts())
    with pytest.raises(RuntimeError, match="set_position"):
        run_chain(chain, np.random.default_rng(rng_seed(0)), 5, 0.1, 3)
    with pytest.raises(RuntimeError, match="set_position"):
        chain.energy_error_of_one_step(np.random.default_rng(rng_seed(0)), 0.1)
    with pytest.raises(RuntimeError, match="state"):
        chain.get_state()
    with pytest.raises(ValueError):
        chain.set_position(np.zeros(3))
    chain.set_position(np.zeros(2))
    fresh = Chain(t2, **parts())
    fresh.set_position(np.zeros(2))
    with pytest.raises(ValueError):
        run_chain(fresh, np.random.default_rng(rng_seed(0)), 5, None,
                  3)     # no step size yet (NaN)
    for bad in (0.0, -1.0, np.nan, np.inf):
        with pytest.raises(ValueError):
            run_chain(chain, np.random.default_rng(rng_seed(0)), 5, bad, 3)
    with pytest.raises(ValueError):
        run_chain(chain, np.random.default_rng(rng_seed(0)), 5, 0.1, 0)
    # output buffers: too few rows or the wrong dim
    chain.step_size = 0.1
    generator = np.random.default_rng(rng_seed(0))
    with pytest.raises(ValueError, match="buffers"):
        chain.run(generator, 5, 3, False, np.empty((4, 2)), np.empty(5, TRANSITION))
    with pytest.raises(ValueError, match="buffers"):
        chain.run(generator, 5, 3, False, np.empty((5, 3)), np.empty(5, TRANSITION))
    with pytest.raises(ValueError, match="buffers"):
        chain.run(generator, 5, 3, False, np.empty((5, 2)), np.empty(4, TRANSITION))
    with pytest.raises(ValueError, match="buffers"):
        chain.run(generator, 5, 3, False, np.empty((5, 2)), np.empty(5, TRANSITION),
                  np.empty((5, 3)))
    # step-size adaptation needs a start
    with pytest.raises(RuntimeError, match="restart_step_size_adaptation"):
        run_chain(chain, np.random.default_rng(rng_seed(0)), 5, 0.1, 3, adapt_step_size=True)
    for bad in (0.0, 1.0, 1.5, np.nan):
        with pytest.raises(ValueError, match="target_accept"):
            chain.restart_step_size_adaptation(0.1, bad)
    with pytest.raises(ValueError, match="shape"):
        chain.set_state(dict(chain.get_state(), position=np.zeros(3)))


def test_run_writes_the_gradients():
    """``gradients`` receives the dynamics gradient at each kept state (-q for the harmonic
    target), and a zero-iteration run writes nothing."""
    chain = make_chain(harmonic_target(3), 3)
    chain.set_position(np.ones(3))
    gradients = np.full((200, 3), np.nan)
    out = run_chain(chain, np.random.default_rng(rng_seed(1)), 200, 0.5, 4, jitter=True,
                    gradients=gradients)
    np.testing.assert_array_equal(gradients, out["samples"])     # grad U(q) = q
    np.testing.assert_array_equal(chain.position, out["samples"][-1])
    empty = run_chain(chain, np.random.default_rng(rng_seed(1)), 0, 0.5, 4)
    assert empty["samples"].shape == (0, 3)


def test_run_writes_the_proposals_with_their_exact_potentials():
    """``proposals`` receives each proposal and the test's potential there: an accepted one is
    the new state with U = -log_density, a rejected one is a point the chain never visits
    with its true potential; NaN where the test did not evaluate (a divergence, a stage-1
    rejection); the draws do not change."""
    def true_logp(q):
        return -0.5 * float(np.sum(q ** 2 / np.array([1.0, 0.25])))

    def surrogate_logp_and_grad(q):  # a wrong Gaussian drives the dynamics
        return -0.5 * float(q @ q) / 1.5, -q / 1.5

    true_target = PyCallableTarget(2, logp=true_logp)
    for delayed in (False, True):
        outs, rows = [], np.full((300, 3), -1.0)
        for proposals in (None, rows):
            chain = make_chain(PyCallableTarget(2, logp_and_grad=surrogate_logp_and_grad), 2,
                               test=true_target, delayed_acceptance=delayed)
            chain.set_position(np.ones(2))
            outs.append(run_chain(chain, np.random.default_rng(rng_seed(3)), 300, 0.9, 6,
                                  jitter=True,
                                  proposals=proposals))
        plain, out = outs
        np.testing.assert_array_equal(out["samples"], plain["samples"])
        accepted = out["accepted"].astype(bool)
        assert 0 < accepted.sum() < 300
        np.testing.assert_array_equal(rows[accepted, :2], out["samples"][accepted])
        np.testing.assert_allclose(rows[accepted, 2], -out["log_density"][accepted], rtol=1e-12)
        evaluated = ~np.isnan(rows[:, 2])
        for row in rows[evaluated]:
            assert row[2] == pytest.approx(-true_logp(row[:2]), rel=1e-12)
        rejected = ~accepted & evaluated
        assert rejected.any()
        assert not np.any(np.all(rows[rejected, None, :2] == out["samples"][None], axis=2))
        if delayed:
            assert (~evaluated).any()  # stage-1 rejections cost no exact evaluation
    chain = make_chain(PyCallableTarget(2, logp_and_grad=surrogate_logp_and_grad), 2)
    chain.set_position(np.ones(2))
    with pytest.raises(ValueError, match="too small"):
        run_chain(chain, np.random.default_rng(rng_seed(0)), 5, 0.5, 2, proposals=np.empty((5, 2)))


def test_energy_error_of_one_step_is_inf_for_a_divergent_step():
    def spike_logp(q):
        return 0.0 if np.all(q == 0.0) else -np.inf

    def spike_grad(q):
        return np.zeros_like(q)

    chain = make_chain(Target(spike_logp, grad_logp=spike_grad, dim=2), 2)
    chain.set_position(np.zeros(2))
    assert chain.energy_error_of_one_step(np.random.default_rng(rng_seed(0)), 0.5) == np.inf


def test_energy_error_of_one_step_leaves_the_chain_alone():
    """The one-step energy error is that of a fresh momentum from the current position; the
    step size, position and (apart from the evaluations) counters of the chain are kept."""
    chain = make_chain(harmonic_target(2), 2)
    chain.set_position(np.array([1.0, -0.5]))
    chain.step_size = 0.25
    before = chain.get_state()
    generator = np.random.default_rng(rng_seed(3))
    twin = np.random.default_rng(rng_seed(3))
    dH = chain.energy_error_of_one_step(generator, 0.8)
    # the same momentum through integrate: the same energy error
    p = twin.standard_normal(2)
    q1, p1, U1, _ = chain.integrate(np.array([1.0, -0.5]), p, 0.8, 1)
    expected = U1 + 0.5 * p1 @ p1 - (0.5 * 1.25 + 0.5 * p @ p)
    assert dH == pytest.approx(expected, rel=1e-12, abs=1e-14)
    assert chain.step_size == 0.25
    np.testing.assert_array_equal(chain.position, before["position"])
    assert chain.n_gradient_evals == before["n_gradient_evals"] + 1


def test_trajectory_record_holds_every_step_and_changes_nothing():
    """Chain.run(trajectory=...) records each leapfrog step's (q, U, grad U), exactly the
    model's values, without changing the draws or the evaluation counts; it stops at the
    buffer's end, and trajectory_ends tells where each transition's rows end."""
    import rnshmc
    from rnshmc._kernels._integrators import GeneralizedLeapfrog
    from rnshmc._kernels._riemann import CallableMetric
    X, y, _ = rnshmc.datasets.simulated_logistic(n=400, dim=3, rng=rng_seed(0))
    model = rnshmc.models.LogisticRegression(X, y)

    def run(rows=None, n_iter=40):
        chain = Chain(model._ctarget, None, EuclideanMetric(3, np.ones(3)), Leapfrog())
        chain.set_position(np.zeros(3))
        chain.step_size = 0.05
        samples, records = np.empty((n_iter, 3)), np.empty(n_iter, TRANSITION)
        record = None if rows is None else np.full((rows, 7), np.nan)
        ends = None if rows is None else np.zeros(n_iter, dtype=np.intp)
        chain.run(np.random.default_rng(rng_seed(0)), n_iter, 8, True, samples, records,
                  trajectory=record, trajectory_ends=ends)
        return samples, records, record, ends, chain

    plain, plain_records, _, _, plain_chain = run()
    samples, records, record, ends, chain = run(rows=400)
    np.testing.assert_array_equal(samples, plain)
    assert (chain.n_density_evals, chain.n_gradient_evals) == (plain_chain.n_density_evals,
                                                               plain_chain.n_gradient_evals)
    assert chain.trajectory_rows == records["n_steps"].sum() == ends[-1]
    np.testing.assert_array_equal(ends, np.cumsum(records["n_steps"]))
    for row in record[:chain.trajectory_rows:7]:
        U, grad = model.potential_and_gradient(row[:3])
        assert row[3] == U and np.array_equal(row[4:], grad)
    # accepted states are the last step of their trajectory
    accepted = np.flatnonzero(records["accepted"])
    np.testing.assert_array_equal(record[ends[accepted] - 1, :3], samples[accepted])
    # a short buffer fills up and no more
    _, _, short, short_ends, short_chain = run(rows=25)
    assert short_chain.trajectory_rows == 25 and short_ends[-1] == 25
    np.testing.assert_array_equal(short, record[:25])
    # the generalized leapfrog does not record
    riemann = Chain(model._ctarget, None, CallableMetric(3, lambda q: np.eye(3),
                                                         lambda q: np.zeros((3, 3, 3))),
                    GeneralizedLeapfrog(3))
    riemann.set_position(np.zeros(3))
    riemann.step_size = 0.05
    with pytest.raises(ValueError, match="only the leapfrog"):
        riemann.run(np.random.default_rng(rng_seed(0)), 2, 2, False, np.empty((2, 3)),
                    np.empty(2, TRANSITION), trajectory=np.empty((10, 7)))
