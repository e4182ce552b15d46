"""The exploration's other kernels and its stop on sigma (docs/algorithms.md section 14): an
exact-NUTS exploration whose every leapfrog step is training data, an L-BFGS start, the
check that stops when another round would cost more than it saves, the acceptance that
sigma predicts, and a surrogate no use after the exploration handed to the exact kernel
from the start (warned, recorded, exact)."""
import math
import warnings

import numpy as np
import pytest

import rnshmc
from rnshmc.samplers.phases.base import approach_mode
from rnshmc.samplers.phases.exploration import (ExplorationCheck,
                                                effective_draws_per_evaluation)
from testkit import (check_covariance, check_mean, correlated_gaussian, gaussian_problem,
                     gaussian_target, make_chain, rng_seed)


def quiet(sampler, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sampler.sample(*args, progress=False, **kwargs)


def test_lbfgs_reaches_the_mode_of_a_gaussian_within_its_budget():
    mean, _, precision = gaussian_problem(0, dim=6)
    chain = make_chain(gaussian_target(mean, precision), 6)
    chain.set_position(mean + 40.0)
    approach_mode(chain, max_evals=50)
    # (L-BFGS on a quadratic of condition 30 in 6 dimensions: near exact in 50 evaluations)
    np.testing.assert_allclose(chain.position, mean, atol=1e-4)
    assert chain.n_gradient_evals <= 1 + 50 + 1  # (the start, L-BFGS, the final position)
    # deterministic
    again = make_chain(gaussian_target(mean, precision), 6)
    again.set_position(mean + 40.0)
    approach_mode(again, max_evals=50)
    assert np.array_equal(again.position, chain.position)


def test_lbfgs_stops_at_its_budget_and_keeps_the_best_point():
    mean, _, precision = gaussian_problem(1, dim=6)
    chain = make_chain(gaussian_target(mean, precision), 6)
    chain.set_position(mean + 40.0)
    start = -chain.log_density
    approach_mode(chain, max_evals=3)
    assert chain.n_gradient_evals <= 1 + 3 + 1
    assert -chain.log_density < start


def test_lbfgs_steps_over_points_where_the_model_is_not_finite():
    # a log density that is -inf beyond 3 from the mean: L-BFGS's first long step lands
    # there, is taken as +inf, and the line search comes back
    mean, _, precision = gaussian_problem(2, dim=4)

    def logp_and_grad(q):
        grad = -precision @ (q - mean)
        value = 0.5 * (q - mean) @ grad
        return (value if np.abs(q - mean).max() < 3.0 else -np.inf), grad

    chain = make_chain(rnshmc.Target(None, logp_and_grad=logp_and_grad, dim=4), 4)
    chain.set_position(mean + 2.5)
    approach_mode(chain, max_evals=50)
    assert np.isfinite(chain.log_density)
    np.testing.assert_allclose(chain.position, mean, atol=1e-3)


@pytest.mark.parametrize("sigma", [0.3, 1.0, 2.0])
def test_an_independence_sampler_accepts_erfc_of_half_sigma(sigma):
    """The acceptance the sigma check assumes: an independence sampler proposing from pi~
    whose log weight log(pi / pi~) is normal with sd sigma (here pi~ = N(0, 1), pi =
    N(sigma, 1)) accepts erfc(sigma / 2) on average; measured on such a chain, within its
    Monte Carlo error (batch means)."""
    rng = np.random.default_rng(rng_seed(7))
    n = 200_000
    proposals, uniforms = rng.standard_normal(n), rng.random(n)
    log_weight = lambda x: sigma * x - 0.5 * sigma ** 2
    x, probs = sigma, np.empty(n)
    for i in range(n):
        probs[i] = min(1.0, math.exp(log_weight(proposals[i]) - log_weight(x)))
        if uniforms[i] < probs[i]:
            x = proposals[i]
    batches = probs.reshape(100, -1).mean(axis=1)
    error = batches.std(ddof=1) / math.sqrt(len(batches))
    assert abs(probs.mean() - math.erfc(sigma / 2)) < 5 * error
    accept = math.erfc(sigma / 2)
    assert effective_draws_per_evaluation(sigma) == pytest.approx(accept / (2 - accept))


def test_effective_draws_fall_with_sigma_to_zero():
    values = [effective_draws_per_evaluation(s) for s in (0.0, 0.1, 0.3, 1.0, 3.0, 60.0)]
    assert values[0] == 1.0 and values[-1] == 0.0
    assert all(a > b for a, b in zip(values, values[1:-1]))
    assert math.isnan(effective_draws_per_evaluation(math.nan))


@pytest.mark.parametrize("seed", [0, 1])
def test_a_nuts_exploration_trains_on_every_leapfrog_step_and_stays_exact(seed):
    model, mean, cov = correlated_gaussian(dim=4, seed=seed)
    sampler = rnshmc.ARNSHMC(model, n_hidden=200, kernel="nuts",
                             explore=dict(kernel="nuts"))
    result = quiet(sampler, 1500, chains=4, rng=rng_seed(seed))
    check_mean(result.samples, mean)
    check_covariance(result.samples, mean, cov)
    record = result.exploration[0]
    assert record["checks"] and all(np.isfinite(c["sigma"]) for c in record["checks"])
    # each round's check trained on the trees' steps: more points than the training
    # window's transitions (a tree has at least one step), not only their states
    first = record["checks"][0]
    window = first["iteration"] - first["iteration"] // 5 - first["held_out"] // 4
    assert first["training_points"] > 4 * window


def test_a_nuts_exploration_records_every_step_of_its_trees():
    model, _, _ = correlated_gaussian(dim=3, seed=0)
    sampler = rnshmc.RNSHMC(model, n_hidden=50, kernel="nuts", explore=dict(kernel="nuts"),
                            trust=False)
    states = sampler.init_states(10, tune=40, chains=1, rng=rng_seed(0))
    state = sampler.run_states(states, pool=None, progress=False)[0]
    history = state.outputs["exploration"]
    steps = history["records"]["n_steps"]
    recorded = np.diff(history["trajectory_ends"], prepend=0)
    # (a diverging tree's last step, far out, is not recorded; the training leaves out
    # diverging trees anyway)
    diverging = history["records"]["diverging"].astype(bool)
    assert np.array_equal(recorded[~diverging], steps[~diverging])
    assert np.all(recorded[diverging] <= steps[diverging])
    assert steps.max() <= 2 ** 6 - 1
    rows = history["trajectory"][:history["trajectory_ends"][-1]]
    # each row is (q, U, grad U) of the model
    for q, U, grad in zip(rows[:, :3], rows[:, 3], rows[:, 4:]):
        value, gradient = model.log_density_gradient(q)
        # (the model's potential is the log density up to a constant: compared by differences)
        assert -value - U == pytest.approx(-model.log_density(rows[0, :3]) - rows[0, 3],
                                           abs=1e-9)
        np.testing.assert_allclose(-gradient, grad, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("seed", [0, 1])
def test_an_lbfgs_start_from_far_out_stays_exact(seed):
    model, mean, cov = correlated_gaussian(dim=4, seed=seed)
    sampler = rnshmc.ARNSHMC(model, n_hidden=200, kernel="nuts",
                             explore=dict(start="lbfgs"))
    result = quiet(sampler, 1500, chains=4, rng=rng_seed(seed), init=np.full((4, 4), 30.0))
    check_mean(result.samples, mean)
    check_covariance(result.samples, mean, cov)


@pytest.mark.parametrize("seed", [0, 1])
def test_the_sigma_check_goes_on_exactly_while_a_round_is_predicted_to_pay(seed):
    easy, _, _ = correlated_gaussian(dim=4, seed=seed)
    result = quiet(rnshmc.ARNSHMC(easy, n_hidden=20, kernel="nuts", trust=False), 1000,
                   chains=4, rng=rng_seed(seed))
    record = result.exploration[0]
    checks = record["checks"]
    pays = [c["predicted_saving"] > c["round_evaluations"] for c in checks]
    assert not any(pays[:-1])  # (every earlier check said go on)
    assert record["reason"] == ("another round would cost more than it saves"
                                if not pays[-1] else "the longest exploration")
    evaluations = [c["evaluations"] for c in checks]
    assert [c["round_evaluations"] for c in checks] == np.diff(evaluations, prepend=0).tolist()
    # (the surrogate's error would have to be exactly 0 for the saving to be 0)
    assert all(c["predicted_saving"] >= 0 for c in checks)


def test_a_surrogate_no_use_after_the_exploration_samples_exactly_from_the_start():
    """One hidden unit cannot follow a 60-dimensional Gaussian's potential (sd sqrt(30) over
    the posterior): sigma stays above ExplorationCheck's hopeless level, and the chains sample
    with exact NUTS from their first draw, warned and recorded, with the posterior's
    moments."""
    from rnshmc.samplers.phases.dynamics import SIGMA_HOPELESS
    model = rnshmc.models.Gaussian(np.zeros(60), covariance=np.eye(60))
    sampler = rnshmc.ARNSHMC(model, n_hidden=1, kernel="nuts")
    with pytest.warns(RuntimeWarning, match="no use after the exploration"):
        result = sampler.sample(400, chains=2, rng=rng_seed(0), progress=False)
    assert result["fallback"].all() and result["exact_dynamics"].all()
    for chain in range(2):
        sigma = result.exploration[chain]["checks"][-1]["sigma"]
        event, = result["trust_events"][chain]
        assert event["iteration"] == 0 and event["sigma"] == sigma >= SIGMA_HOPELESS
        assert "rewarm_step_size" in event
    check_mean(result.samples, np.zeros(60))
    assert result.accept_prob.mean() > 0.6  # (exact NUTS, its step size adapted afresh)
