"""The surrogate samplers' exploration with ``tune="auto"``: rounds that stop when a surrogate
fitted to them predicts the held-out transitions well (earlier on an easy target than on a
hard one), checkpoints inside a round, and the sampling kernel chosen from the pooled
exploration (mass matrix, step size on the surrogate)."""
import warnings

import numpy as np
import pytest

import rnshmc
from rnshmc.adaptation import RepeatedWarmup, WarmupSchedule, terminal_buffer
from rnshmc.samplers.phases.exploration import ExplorationCheck
from testkit import check_mean, correlated_gaussian, rng_seed


def banana(dim=8, bend=1.5):
    """Pairs (x, y) with x ~ N(0, 1) and y | x ~ N(bend (x^2 - 1), 1): curved, so a surrogate
    needs many points; E[x] = E[y] = 0."""
    def logp_and_grad(q):
        x, y = q[0::2], q[1::2]
        r = y - bend * (x ** 2 - 1)
        grad = np.empty_like(q)
        grad[0::2], grad[1::2] = -x + 2 * bend * x * r, -r
        return -0.5 * (x @ x + r @ r), grad
    return rnshmc.Target(None, logp_and_grad=logp_and_grad, dim=dim)


def test_a_repeated_warmup_has_the_round_schedule_in_every_round():
    one = WarmupSchedule(200, term_buffer=terminal_buffer(200))
    rounds = RepeatedWarmup(200, 600)
    assert one.ends  # (the round has a slow window to repeat)
    for i in range(600):
        assert rounds.window_end(i) == one.window_end(i % 200)
        assert rounds.in_slow_window(i) == one.in_slow_window(i % 200)
    expected = {b + k * 200 for b in one.boundaries() for k in range(3)} | {200, 400}
    assert rounds.boundaries() == sorted(expected)


def explore(target, seed):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return rnshmc.RNSHMC(target, n_hidden=300).sample(1000, rng=seed, progress=False,
                                                          pool=None)


@pytest.mark.parametrize("seed", [0, 1])
def test_the_exploration_stops_earlier_on_an_easy_target_than_on_a_hard_one(seed):
    easy_target, mean, _ = correlated_gaussian()
    easy, hard = explore(easy_target, seed), explore(banana(), seed)
    round_length = 50  # (4 chains sharing a surrogate)
    for res in (easy, hard):
        record = res.exploration
        assert len(record) == 4 and all(r == record[0] for r in record)  # (shared)
        record = record[0]
        checks = record["checks"]
        assert [c["iteration"] for c in checks] == list(
            range(round_length, record["iterations"] + 1, round_length))
        good = [c["predicted_acceptance"] >= ExplorationCheck.GOOD_ENOUGH
                * c["exact_acceptance"] for c in checks]
        # it goes on exactly while the check fails, and says why it stopped
        assert not any(good[:-1])
        assert record["reason"] == ("the surrogate predicts well" if good[-1]
                                    else "the longest exploration")
        assert res.n_density_evals_explore.min() > 0
        assert all(0 <= c["predicted_acceptance"] <= 1 for c in checks)
        assert all(np.isfinite(c["sigma"]) and c["sigma"] >= 0 for c in checks)
    assert easy.exploration[0]["iterations"] == round_length
    assert hard.exploration[0]["iterations"] > easy.exploration[0]["iterations"]
    # the rounds are exploration: the draws are still the posterior's (on the banana, the
    # means of x and of r = y - bend (x^2 - 1), both N(0, 1): y itself is skewed, and a run
    # of 4 x 1000 draws that misses its right tail underestimates its Monte Carlo error,
    # z -5.8 on one seed)
    check_mean(easy.samples, mean)
    x, y = hard.samples[..., 0::2], hard.samples[..., 1::2]
    check_mean(np.concatenate([x, y - 1.5 * (x ** 2 - 1)], axis=-1), np.zeros(8))


def test_a_given_tune_explores_that_long_without_checks():
    res = rnshmc.RNSHMC(banana(), n_hidden=300).sample(100, tune=60, rng=rng_seed(0),
                                                       progress=False,
                                                       pool=None)
    assert "exploration" not in res
    assert res.n_density_evals_explore.min() > 0


@pytest.mark.parametrize("steps", [[100], [100, 50], [100, 100, 100, 100, 20, 20]])
def test_a_run_stopped_inside_the_rounds_resumes_exactly(steps, tmp_path):
    """Stopped at a round's check, inside the next round, and in sampling."""
    from rnshmc.samplers.checkpoint import Checkpointer
    model = rnshmc.models.Gaussian(np.zeros(6), covariance=np.eye(6) + 0.8)
    sampler = rnshmc.RNSHMC(model, n_hidden=4)  # (too few units: every check fails)
    kwargs = dict(draws=100, chains=2, rng=rng_seed(8))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        full = sampler.sample(**kwargs, progress=False, pool=None)
        assert full.exploration[0]["iterations"] == 400  # (4 rounds of 100)
        states = sampler.init_states(**kwargs)
        for n in steps:  # as continue_run: join the chains when they all wait
            if all(sampler.waiting(s) or s.done for s in states) and any(
                    map(sampler.waiting, states)):
                sampler.join(states)
            states = sampler.run_states(states, progress=False, stop_after=n)
        path = tmp_path / "run.npz"
        Checkpointer(path, sampler, dict(draws=100, checkpoint_every=1000)).write(states)
        resumed = rnshmc.resume(path, progress=False)
    np.testing.assert_array_equal(resumed.samples, full.samples)
    np.testing.assert_array_equal(resumed.n_gradient_evals, full.n_gradient_evals)
    assert resumed.exploration == full.exploration


def test_the_sampling_kernel_comes_from_the_pooled_exploration():
    model, _, cov = correlated_gaussian()
    res = rnshmc.RNSHMC(model, n_hidden=300).sample(200, rng=rng_seed(3), progress=False)
    inverse_mass = np.asarray(res.inverse_mass_matrix)
    # one pooled estimate for the chains sharing the surrogate, near the posterior variances
    np.testing.assert_array_equal(inverse_mass, np.broadcast_to(inverse_mass[0],
                                                                 inverse_mass.shape))
    ratio = inverse_mass[0] / np.diag(cov)
    assert np.all((ratio > 1 / 3) & (ratio < 3)), ratio  # (0.48-1.48 over seeds 3-22)
    # the step size adapted to it on the surrogate: the exact acceptance near the target
    assert np.all(res.acceptance_rate > 0.6)
    # a given mass matrix is kept
    given = rnshmc.RNSHMC(model, n_hidden=300, explore=dict(
        inverse_mass_matrix=np.ones(4))).sample(50, tune=60, rng=rng_seed(3), progress=False)
    np.testing.assert_array_equal(np.asarray(given.inverse_mass_matrix), np.ones((4, 4)))
