"""Surrogate NUTS in C (rnshmc._kernels._transition.NUTSChain with a test target): NUTS on a
surrogate potential U~ proposes, the surrogate-transition test on the true U accepts
(docs/algorithms.md, surrogate NUTS):

* the test's probability against a direct computation, min(1, exp[(U(x) - U~(x)) - (U(y) -
  U~(y))]), one exact evaluation per transition that moves and none when the tree returns
  its start;
* exact with deliberately poor surrogates, over several seeds: a Gaussian surrogate of a
  banana, a shifted and mis-scaled surrogate of a correlated Gaussian, a surrogate with the
  wrong tails (a 1-d target's histogram against its density), with one and with several
  surrogate transitions per test; and a power check: without the test the same chains sample
  the surrogate, and the same moment check fails;
* a chain continued from its state draws what the uninterrupted one does;
* the tail guard (rnshmc._kernels._surrogate.TailGuard): the surrogate where it was fitted,
  rising beyond, its gradient against finite differences, and surrogate NUTS on a guarded
  surrogate whose own tails are flat (an improper density) exact.
"""
import numpy as np
import pytest
from scipy import stats

from rnshmc import Target
from rnshmc._kernels._chain import TRANSITION
from rnshmc._kernels._integrators import Leapfrog
from rnshmc._kernels._metrics import EuclideanMetric
from rnshmc._kernels._surrogate import TailGuard
from rnshmc._kernels._transition import NUTSChain
from rnshmc.models import Gaussian
from rnshmc.targets import as_ctarget

from testkit import banana, check_covariance, check_mean, correlated_gaussian, rng_seed

SEEDS = [0, 1, 2]


def surrogate_nuts(surrogate, target, dim, step_size, inverse_mass=None, inner_steps=1,
                   start=None, max_tree_depth=10):
    """A surrogate NUTS chain: trees on ``surrogate``, the test on ``target`` (None: NUTS on
    the surrogate alone, no test)."""
    chain = NUTSChain(as_ctarget(surrogate, dim), EuclideanMetric(dim, inverse_mass),
                      Leapfrog(), max_tree_depth=max_tree_depth,
                      test=None if target is None else as_ctarget(target, dim),
                      inner_steps=inner_steps)
    chain.set_position(np.zeros(dim) if start is None else start)
    chain.step_size = step_size
    return chain


def run(chain, generator, n):
    samples, records = np.empty((n, chain.dim)), np.empty(n, TRANSITION)
    chain.run(generator, n, 1, False, samples, records)
    return samples, records


def sample_chains(make, seed, n, chains=4):
    """(chains, n, dim) draws of ``chains`` chains from ``make()``, and their records."""
    out, records = [], []
    for c in range(chains):
        chain = make()
        samples, recs = run(chain, np.random.default_rng(rng_seed(100 * seed + c)), n)
        out.append(samples)
        records.append(recs)
    return np.array(out), np.array(records)


# --------------------------------------------------------------------------------------------
# the test itself


def test_the_acceptance_probability_is_the_surrogate_transition_ratio():
    """Each transition's recorded probability is min(1, exp[(U(x) - U~(x)) - (U(y) -
    U~(y))]) for its start x and its proposal y, computed here directly; a transition that
    moves costs one exact evaluation and lands on y or stays at x."""
    target, _, _ = banana(twist=0.15)
    surrogate = Gaussian(np.array([0.5, 0.0]), covariance=np.diag([2.0, 3.0]))
    U = lambda q: -target.log_density(q)
    U_tilde = lambda q: -surrogate.log_density(q)
    chain = surrogate_nuts(surrogate, target, 2, 0.6, start=np.array([1.0, 0.5]))
    generator = np.random.default_rng(rng_seed(3))
    samples, records = np.empty((1, 2)), np.empty(1, TRANSITION)
    proposal = np.empty((1, 3))
    probabilities = []
    for _ in range(200):
        x, evals = chain.position, chain.n_density_evals
        chain.run(generator, 1, 1, False, samples, records, proposals=proposal)
        y, U_y = proposal[0, :2], proposal[0, 2]
        if np.array_equal(y, x):  # (the tree returned its start)
            assert chain.n_density_evals == evals and np.isnan(U_y)
            assert records["accept_prob"][0] == 1.0 and not records["accepted"][0]
            continue
        assert chain.n_density_evals == evals + 1
        assert U_y == pytest.approx(U(y), rel=1e-12)
        direct = min(1.0, np.exp((U(x) - U_tilde(x)) - (U(y) - U_tilde(y))))
        assert records["accept_prob"][0] == pytest.approx(direct, rel=1e-10, abs=1e-14)
        probabilities.append(direct)
        np.testing.assert_array_equal(samples[0], y if records["accepted"][0] else x)
        assert chain.log_density == pytest.approx(-U(samples[0]), rel=1e-12)
    # (a poor surrogate: both outcomes occur)
    assert 0.05 < np.mean(probabilities) < 0.95


def test_no_exact_evaluation_when_the_tree_returns_its_start():
    """A step size past the stability limit diverges on the first step: the tree returns its
    start, the test needs no evaluation, and the chain stays."""
    target, _, _ = banana(twist=0.15)
    surrogate = Gaussian(np.zeros(2), covariance=np.eye(2) * 1e-4)
    chain = surrogate_nuts(surrogate, target, 2, 10.0, start=np.array([0.01, 0.0]))
    before = chain.n_density_evals
    samples, records = run(chain, np.random.default_rng(rng_seed(0)), 20)
    assert chain.n_density_evals == before
    assert not records["accepted"].any() and records["diverging"].all()
    assert (records["accept_prob"] == 1.0).all()
    np.testing.assert_array_equal(samples, np.tile([0.01, 0.0], (20, 1)))


def test_refuses_what_it_cannot_do():
    target, _, _ = banana(twist=0.15)
    surrogate = Gaussian(np.zeros(2), covariance=np.eye(2))
    chain = surrogate_nuts(surrogate, target, 2, 0.5)
    samples, records = np.empty((5, 2)), np.empty(5, TRANSITION)
    chain.restart_step_size_adaptation(0.5, 0.8)
    with pytest.raises(ValueError, match="surrogate alone"):
        chain.run(np.random.default_rng(0), 5, 1, False, samples, records,
                  adapt_step_size=True)
    with pytest.raises(ValueError, match="inner_steps"):
        NUTSChain(as_ctarget(surrogate, 2), EuclideanMetric(2, None), Leapfrog(),
                  inner_steps=0, test=as_ctarget(target, 2))
    with pytest.raises(ValueError, match="test target"):
        NUTSChain(as_ctarget(surrogate, 2), EuclideanMetric(2, None), Leapfrog(),
                  inner_steps=2)


# --------------------------------------------------------------------------------------------
# exact with poor surrogates


@pytest.mark.parametrize("inner_steps", [1, 3])
@pytest.mark.parametrize("seed", SEEDS)
def test_a_gaussian_surrogate_of_a_banana(seed, inner_steps):
    """The banana's moments from trees on a Gaussian blind to its bend (twice its
    covariance), within Monte Carlo error. (Where the surrogate's tails are lighter than the
    target's the chains are exact too but sticky where they reach them, and short runs
    under-visit them: with twist 0.3 and the banana's own covariance, 3000 draws per chain
    put the mean of x2 6 standard errors low, 30000 within 0.3. The histogram test below
    has such tails, and long chains.)"""
    target, mean, cov = banana(twist=0.15)
    surrogate = Gaussian(np.zeros(2), covariance=2 * cov)
    samples, records = sample_chains(
        lambda: surrogate_nuts(surrogate, target, 2, 0.7, inner_steps=inner_steps), seed, 4000)
    assert 0.2 < records["accept_prob"].mean() < 0.9  # (poor, not useless)
    check_mean(samples, mean)
    check_covariance(samples, mean, cov)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_shifted_and_mis_scaled_surrogate_of_a_correlated_gaussian(seed):
    model, mean, cov = correlated_gaussian(dim=4, seed=seed)
    shift = 0.5 * np.sqrt(np.diag(cov))
    surrogate = Gaussian(mean + shift, covariance=np.diag(1.5 * np.diag(cov)))
    samples, _ = sample_chains(
        lambda: surrogate_nuts(surrogate, model, 4, 0.5, np.diag(cov), start=mean), seed, 3000)
    check_mean(samples, mean)
    check_covariance(samples, mean, cov)


def test_the_moment_check_catches_the_surrogate_without_its_test():
    """The power check: the same trees without the test sample the surrogate, and the moment
    checks above fail on them, for each poor surrogate."""
    target, mean, cov = banana(twist=0.15)
    samples, _ = sample_chains(
        lambda: surrogate_nuts(Gaussian(np.zeros(2), covariance=2 * cov), None, 2, 0.7), 0,
        4000)
    with pytest.raises(AssertionError):
        check_covariance(samples, mean, cov)
    model, mean, cov = correlated_gaussian(dim=4, seed=0)
    surrogate = Gaussian(mean + 0.5 * np.sqrt(np.diag(cov)),
                         covariance=np.diag(1.5 * np.diag(cov)))
    samples, _ = sample_chains(
        lambda: surrogate_nuts(surrogate, None, 4, 0.5, np.diag(cov), start=mean), 0, 3000)
    with pytest.raises(AssertionError):
        check_mean(samples, mean)


def logistic_target():
    """A standard logistic density (its tails e^-|x|, heavier than a Gaussian's)."""
    def logistic_logp_and_grad(x):
        return float(-x[0] - 2 * np.logaddexp(0.0, -x[0])), np.array([-np.tanh(x[0] / 2)])
    return Target(None, logp_and_grad=logistic_logp_and_grad, dim=1)


@pytest.mark.parametrize("inner_steps", [1, 2])
@pytest.mark.parametrize("seed", SEEDS)
def test_a_surrogate_wrong_in_the_tails_histogram(seed, inner_steps):
    """A 1-d logistic target, a Gaussian surrogate with its variance (tails far too light: a
    chain that reaches them sticks there a while, so the chains are long): the share of draws
    in each of 12 bins (the outer ones holding 1 in 100 on each side) against the
    logistic's probabilities, within Monte Carlo error."""
    target = logistic_target()
    surrogate = Gaussian(np.zeros(1), covariance=np.array([[np.pi ** 2 / 3]]))
    samples, _ = sample_chains(
        lambda: surrogate_nuts(surrogate, target, 1, 1.0, inner_steps=inner_steps), seed, 20000)
    edges = stats.logistic.ppf(np.linspace(0.01, 0.99, 11))
    edges = np.concatenate([[-np.inf], edges, [np.inf]])
    probabilities = np.diff(stats.logistic.cdf(edges))
    x = samples[..., 0]
    indicators = np.stack([(x >= lo) & (x < hi) for lo, hi in zip(edges[:-1], edges[1:])],
                          axis=-1).astype(float)
    check_mean(indicators, probabilities)


def test_continued_from_its_state_the_chain_draws_the_uninterrupted_draws():
    target, _, cov = banana(twist=0.15)
    surrogate = Gaussian(np.zeros(2), covariance=cov)
    whole = surrogate_nuts(surrogate, target, 2, 0.7)
    generator = np.random.default_rng(rng_seed(5))
    expected, _ = run(whole, generator, 60)
    part = surrogate_nuts(surrogate, target, 2, 0.7)
    generator = np.random.default_rng(rng_seed(5))
    first, _ = run(part, generator, 25)
    state = part.get_state()
    again = surrogate_nuts(surrogate, target, 2, 0.7)
    again.set_state(state)
    second, _ = run(again, generator, 35)
    np.testing.assert_array_equal(np.vstack([first, second]), expected)
    assert again.n_density_evals == whole.n_density_evals


def test_the_recorded_energy_is_the_draws_potential_plus_a_kinetic_energy():
    """Each record's energy is U at the chain's state after the transition plus the kinetic
    energy of a momentum (the first tree's, where the chain stayed): never below U, also with
    several trees per test."""
    target, _, cov = banana(twist=0.15)
    samples, records = sample_chains(
        lambda: surrogate_nuts(Gaussian(np.zeros(2), covariance=2 * cov), target, 2, 0.7,
                               inner_steps=3), 0, 500, chains=2)
    assert not records["accepted"].all()
    assert np.all(records["energy"] + records["log_density"] >= 0.0)


# --------------------------------------------------------------------------------------------
# the tail guard


def guard_problem(seed=0, dim=3):
    """(inner model, mean, factor, radius) of a guard around a correlated Gaussian's inputs."""
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((dim, dim))
    factor = np.linalg.cholesky(A @ A.T + dim * np.eye(dim))
    return Gaussian(np.zeros(dim), covariance=np.eye(dim)), rng.standard_normal(dim), factor, 1.5


def test_the_guard_is_the_surrogate_inside_its_radius_and_rises_beyond():
    model, mean, factor, radius = guard_problem()
    guard = TailGuard(as_ctarget(model, 3), mean, factor, radius, stiffness=2.0)
    rng = np.random.default_rng(rng_seed(0))
    # (points at whitened radii 0.1-3 times a standard normal's: inside and beyond 1.5)
    for q in mean + (rng.standard_normal((20, 3)) * rng.uniform(0.1, 3.0, (20, 1))) @ factor.T:
        z = np.linalg.solve(factor, q - mean)
        excess = max(0.0, np.linalg.norm(z) - radius)
        U, grad = guard.eval_potential_and_gradient(q)
        U_model, grad_model = -model.log_density(q), -model.log_density_gradient(q)[1]
        assert U == pytest.approx(U_model + excess ** 2, rel=1e-12, abs=1e-12)
        assert guard.eval_potential(q) == U
        np.testing.assert_allclose(guard.eval_gradient(q), grad, rtol=1e-12, atol=1e-12)
        h = 1e-6
        numeric = [(guard.eval_potential(q + h * e) - guard.eval_potential(q - h * e)) / (2 * h)
                   for e in np.eye(3)]
        np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-6)
        if excess == 0.0:
            assert U == U_model
            np.testing.assert_array_equal(grad, grad_model)


def test_the_guard_pickles_and_refuses_bad_settings():
    import pickle
    model, mean, factor, radius = guard_problem()
    guard = TailGuard(as_ctarget(model, 3), mean, factor, radius)
    copy = pickle.loads(pickle.dumps(guard))
    q = mean + 4.0
    assert copy.eval_potential(q) == guard.eval_potential(q)
    with pytest.raises(ValueError, match="lower triangular"):
        TailGuard(as_ctarget(model, 3), mean, factor.T, radius)
    with pytest.raises(ValueError, match="shapes"):
        TailGuard(as_ctarget(model, 3), mean[:2], factor, radius)
    with pytest.raises(ValueError, match="radius"):
        TailGuard(as_ctarget(model, 3), mean, factor, -1.0)


def flat_tailed_surrogate():
    """U~(x) = x^2 / 2 exp(-x^2 / 32): a standard normal's potential near 0 that flattens out
    to 0 beyond |x| = 5.7 (exp(-U~) is not normalisable: what a network with saturating units
    does where it has no data)."""
    def flat_logp_and_grad(x):
        w = np.exp(-x[0] ** 2 / 32)
        return float(-0.5 * x[0] ** 2 * w), np.array([-(x[0] - x[0] ** 3 / 32) * w])
    return Target(None, logp_and_grad=flat_logp_and_grad, dim=1)


@pytest.mark.parametrize("seed", SEEDS)
def test_surrogate_nuts_on_a_guarded_flat_tailed_surrogate(seed):
    """The guard (radius 3) makes the flat-tailed surrogate a proper density to run trees on;
    the chains sample the standard normal target: its moments and tail shares within Monte
    Carlo error."""
    target = Target(None, logp_and_grad=lambda x: (-0.5 * float(x @ x), -x), dim=1)
    guarded = TailGuard(as_ctarget(flat_tailed_surrogate(), 1), np.zeros(1), np.eye(1), 3.0)

    def make():
        chain = NUTSChain(guarded, EuclideanMetric(1, None), Leapfrog(),
                          test=as_ctarget(target, 1))
        chain.set_position(np.zeros(1))
        chain.step_size = 0.8
        return chain
    samples, _ = sample_chains(make, seed, 5000)
    x = samples[..., 0]
    functions = np.stack([x, x ** 2, (np.abs(x) > 2.0) * 1.0], axis=-1)
    check_mean(functions, np.array([0.0, 1.0, 2 * stats.norm.sf(2.0)]))
