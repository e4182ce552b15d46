"""The No-U-Turn transition in C (rnshmc._kernels._transition.NUTSChain):

* the same draws, tree depths, leapfrog steps, acceptance statistics and energies as a plain
  NumPy implementation of Stan's algorithm fed the same random numbers (nuts_reference.py),
  on a Gaussian, a non-Gaussian target and with divergences;
* exact: the moments of Gaussians (scales 1e-2..1e2, correlation 0.99; identity, diagonal and
  dense metrics) within Monte Carlo error, at several seeds, and a power check showing that
  the same test catches a biased tree (a proposal taken from the last subtree only);
* the tree's limits (max_tree_depth, divergences) and its state: a chain continued from
  get_state draws what the uninterrupted one does.
"""
import numpy as np
import pytest

from rnshmc import Target
from rnshmc._kernels._chain import TRANSITION
from rnshmc._kernels._integrators import Leapfrog
from rnshmc._kernels._metrics import EuclideanMetric
from rnshmc._kernels._transition import NUTSChain
from rnshmc.models import Gaussian
from rnshmc.targets import as_ctarget

from nuts_reference import ReferenceNUTS
from testkit import check_covariance, check_mean, rng_seed

SEEDS = [0, 1]


def gaussian_problem(seed, dim=4, correlation=None, scales=(1.0, 1.0)):
    """(model, mean, covariance): a Gaussian with coordinate scales log-spaced over
    ``scales`` and a random correlation (all pairs ``correlation`` if given)."""
    rng = np.random.default_rng(seed)
    sd = np.logspace(np.log10(scales[0]), np.log10(scales[1]), dim)
    if correlation is None:
        A = rng.standard_normal((dim, dim))
        S = A @ A.T + dim * np.eye(dim)
        R = S / np.sqrt(np.outer(np.diag(S), np.diag(S)))
    else:
        R = np.full((dim, dim), correlation) + (1 - correlation) * np.eye(dim)
    cov = sd[:, None] * R * sd[None, :]
    mean = rng.standard_normal(dim) * sd
    return Gaussian(mean, covariance=cov), mean, cov


def nuts_chain(model, inverse_mass=None, step_size=0.3, max_tree_depth=10,
               max_energy_error=1000.0, start=None):
    dim = model.dim
    chain = NUTSChain(as_ctarget(model, dim), EuclideanMetric(dim, inverse_mass), Leapfrog(),
                      max_energy_error=max_energy_error, max_tree_depth=max_tree_depth)
    chain.set_position(np.zeros(dim) if start is None else start)
    chain.step_size = step_size
    return chain


def run(chain, generator, n, adapt=False):
    samples, records = np.empty((n, chain.dim)), np.empty(n, TRANSITION)
    chain.run(generator, n, 1, False, samples, records, adapt_step_size=adapt)
    return samples, records


# --------------------------------------------------------------------------------------------
# the same algorithm as the reference


def quartic_model(dim=3):
    """A non-Gaussian target: U = |q|^2 / 2 + q_0^4 / 4 (its trajectories are nonlinear)."""
    def logp(q):
        return -0.5 * float(q @ q) - 0.25 * float(q[0]) ** 4

    def grad(q):
        g = -q.copy()
        g[0] -= q[0] ** 3
        return g
    return Target(logp, grad_logp=grad, dim=dim), lambda q: (-logp(q), -grad(q))


@pytest.mark.parametrize("case", ["gaussian, diagonal metric", "quartic", "divergences",
                                  "shallow trees"])
def test_the_same_draws_as_the_reference(case):
    """Fed the same stream, the C tree and the NumPy reference make the same draws (to
    rounding), with the same depths, steps, choices and statistics, transition by
    transition."""
    depth, max_error, step = 10, 1000.0, 0.3
    if case == "quartic":
        model, f = quartic_model()
        inverse_mass = np.ones(3)
    else:
        model, mean, cov = gaussian_problem(rng_seed(0), dim=3, scales=(0.5, 2.0))
        precision = np.linalg.inv(cov)
        f = lambda q: (0.5 * (q - mean) @ precision @ (q - mean), precision @ (q - mean))
        inverse_mass = np.diag(cov).copy()
        if case == "divergences":
            step, max_error = 1.2, 0.5
        elif case == "shallow trees":
            depth = 2
    chain = nuts_chain(model, inverse_mass, step, depth, max_error)
    samples, records = run(chain, np.random.default_rng(rng_seed(5)), 300)
    reference = ReferenceNUTS(f, inverse_mass, step, depth, max_error)
    generator = np.random.default_rng(rng_seed(5))
    q = np.zeros(model.dim)
    U, grad = f(q)
    for i in range(len(samples)):
        q, U, grad, record = reference.transition(q, U, grad, generator)
        np.testing.assert_allclose(samples[i], q, rtol=1e-9, atol=1e-9, err_msg=f"draw {i}")
        for key in ("tree_depth", "n_steps", "diverging", "accepted"):
            assert records[key][i] == record[key], (i, key)
        np.testing.assert_allclose(records["accept_prob"][i], record["accept_prob"], rtol=1e-9)
        np.testing.assert_allclose(records["energy"][i], record["energy"], rtol=1e-9)
    if case == "divergences":
        assert records["diverging"].any() and not records["diverging"].all()
    if case == "shallow trees":
        assert (records["tree_depth"] == 2).any()
        assert records["tree_depth"].max() == 2


# --------------------------------------------------------------------------------------------
# exactness


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("case", ["isotropic", "scales 1e-2..1e2, diagonal metric",
                                  "correlation 0.99, dense metric",
                                  "correlation 0.99, identity"])
def test_gaussian_moments(case, seed):
    if case == "isotropic":
        model, mean, cov = gaussian_problem(rng_seed(seed), dim=5, correlation=0.0)
        inverse_mass, step = None, 0.8
    elif case.startswith("scales"):
        model, mean, cov = gaussian_problem(rng_seed(seed), dim=5, scales=(1e-2, 1e2))
        inverse_mass, step = np.diag(cov).copy(), 0.5
    elif case.endswith("dense metric"):
        model, mean, cov = gaussian_problem(rng_seed(seed), dim=4, correlation=0.99)
        inverse_mass, step = cov.copy(), 0.6
    else:
        model, mean, cov = gaussian_problem(rng_seed(seed), dim=4, correlation=0.99)
        inverse_mass, step = None, 0.1
    chains = []
    for c in range(4):
        chain = nuts_chain(model, inverse_mass, step, start=mean)
        chains.append(run(chain, np.random.default_rng(rng_seed(100 * seed + c)), 3000)[0])
    samples = np.stack(chains)
    check_mean(samples, mean)
    check_covariance(samples, mean, cov)


class EnergyBlindNUTS(ReferenceNUTS):
    """A biased tree (for the power check): every point weighs the same in the multinomial
    draw, whatever its energy."""

    def log_weight(self, H0, h):
        return 0.0 if np.isfinite(h) else -np.inf


@pytest.mark.parametrize("seed", SEEDS)
def test_the_moment_check_catches_a_tree_blind_to_energy(seed):
    """The power check: at a step size where energy errors are large, a tree that draws its
    points without their weights exp(H0 - H) is biased, and the moment check of
    test_gaussian_moments fails on it; the reference with the weights passes."""
    model, mean, cov = gaussian_problem(rng_seed(seed), dim=3, correlation=0.0)
    precision = np.linalg.inv(cov)
    f = lambda q: (0.5 * (q - mean) @ precision @ (q - mean), precision @ (q - mean))
    outcomes = {}
    for name, cls in (("weighted", ReferenceNUTS), ("blind", EnergyBlindNUTS)):
        chains = []
        for c in range(2):
            sampler = cls(f, np.ones(3), 1.7, 6)
            generator = np.random.default_rng(rng_seed(10 * seed + c))
            q = mean.copy()
            U, grad = f(q)
            draws = []
            for _ in range(2000):
                q, U, grad, _ = sampler.transition(q, U, grad, generator)
                draws.append(q)
            chains.append(draws)
        try:
            check_covariance(np.array(chains), mean, cov)
            outcomes[name] = "passed"
        except AssertionError:
            outcomes[name] = "failed"
    assert outcomes == {"weighted": "passed", "blind": "failed"}


# --------------------------------------------------------------------------------------------
# limits and state


def test_tree_depth_saturates_at_max_tree_depth():
    """A step size far below the posterior's scale never turns: every tree reaches
    max_tree_depth, 2^depth - 1 steps each."""
    model, mean, _ = gaussian_problem(rng_seed(0), dim=2, correlation=0.0)
    chain = nuts_chain(model, step_size=1e-3, max_tree_depth=4, start=mean)
    _, records = run(chain, np.random.default_rng(rng_seed(0)), 50)
    assert (records["tree_depth"] == 4).all()
    assert (records["n_steps"] == 2 ** 4 - 1).all()


def test_a_diverging_tree_stops_and_keeps_a_point_from_before():
    """With a step size past the stability limit every first step diverges: the tree stops
    at depth 0, recorded as a divergence, and the chain stays where it was."""
    model, mean, _ = gaussian_problem(rng_seed(0), dim=2, correlation=0.0)
    chain = nuts_chain(model, step_size=50.0, max_energy_error=10.0, start=mean)
    samples, records = run(chain, np.random.default_rng(rng_seed(0)), 30)
    assert records["diverging"].all()
    assert (records["tree_depth"] == 0).all() and (records["n_steps"] == 1).all()
    assert not records["accepted"].any()
    np.testing.assert_array_equal(samples, np.tile(mean, (30, 1)))


def test_continued_from_its_state_the_chain_draws_the_uninterrupted_draws():
    model, mean, cov = gaussian_problem(rng_seed(0), dim=3)
    whole = nuts_chain(model, np.diag(cov).copy(), 0.4, start=mean)
    expected, _ = run(whole, np.random.default_rng(rng_seed(3)), 200)
    first = nuts_chain(model, np.diag(cov).copy(), 0.4, start=mean)
    generator = np.random.default_rng(rng_seed(3))
    head, _ = run(first, generator, 80)
    second = nuts_chain(model, np.diag(cov).copy(), 0.4)
    second.set_state(first.get_state())
    tail, _ = run(second, generator, 120)
    np.testing.assert_array_equal(np.vstack([head, tail]), expected)


def test_the_step_size_adapts_to_the_target_acceptance_statistic():
    model, mean, cov = gaussian_problem(rng_seed(1), dim=4)
    means = []
    for target_accept in (0.6, 0.9):
        chain = nuts_chain(model, np.diag(cov).copy(), 1.0, start=mean)
        chain.restart_step_size_adaptation(1.0, target_accept)
        run(chain, np.random.default_rng(rng_seed(2)), 1000, adapt=True)
        chain.step_size = chain.final_step_size
        _, records = run(chain, np.random.default_rng(rng_seed(4)), 1000)
        means.append(records["accept_prob"].mean())
    assert abs(means[0] - 0.6) < 0.1 and abs(means[1] - 0.9) < 0.06, means


def test_refuses_other_integrators_and_depths():
    model, _, _ = gaussian_problem(0, dim=2)
    with pytest.raises(ValueError, match="max_tree_depth"):
        NUTSChain(as_ctarget(model, 2), EuclideanMetric(2), Leapfrog(), max_tree_depth=0)
    with pytest.raises(TypeError, match="leapfrog"):
        NUTSChain(as_ctarget(model, 2), EuclideanMetric(2), None)
