"""The stopping rule of ``sample(ess=..., max_evals=..., max_time=...)``: it stops at the first
check where the pooled min bulk ESS and R-hat hold, never earlier; budgets stop a run with a
warning; a stopped-and-resumed ``ess=`` run gives the uninterrupted run's draws."""
import warnings

import numpy as np
import pytest

import rnshmc
from rnshmc.diagnostics import SamplingWarning
from rnshmc.samplers._stopping import FIRST_CHECK, BudgetSpent, StoppingRule, convergence
from testkit import correlated_gaussian, without_seconds, rng_seed


@pytest.fixture(autouse=True)
def quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SamplingWarning)
        yield


def checks_up_to(n):
    """The fixed check points up to ``n`` sampling iterations."""
    points, check = [], FIRST_CHECK
    while check <= n:
        points.append(check)
        check = StoppingRule.next_check(check)
    return points


def test_check_points_are_fixed_and_grow():
    points = checks_up_to(2000)
    assert points[:3] == [50, 60, 70]
    steps = np.diff(points)
    assert np.all(steps >= 10) and np.all(steps <= np.ceil(0.05 * np.array(points[:-1])) + 10)
    assert all(StoppingRule.next_check(p - 1) == p for p in points)
    assert all(StoppingRule.next_check(p) == q for p, q in zip(points, points[1:]))
    with pytest.raises(ValueError, match="draws, ess"):
        StoppingRule()


@pytest.mark.parametrize("name, seed", [("HMC", 0), ("HMC", 1), ("ARNSHMC", 2)])
def test_stops_at_the_first_check_where_every_condition_holds(name, seed):
    """The rule stops at the first check where the bulk ESS reaches the target, R-hat holds
    and the bulk and tail ESS are 100 per chain: the result's ``converged`` then agrees."""
    model, _, _ = correlated_gaussian()
    sampler = getattr(rnshmc, name)(model)
    ess = 600
    res = sampler.sample(tune=150, chains=4, rng=seed, progress=False, ess=ess, pool=None)
    stop = res.stopping
    n = res.samples.shape[1]
    assert stop["reason"] == "converged" and stop["draws"] == n and n in checks_up_to(n)
    bulk, rhat, tail = convergence(res.samples)
    assert bulk >= ess and rhat <= 1.01 and tail >= 400
    assert (stop["ess"], stop["rhat"], stop["ess_tail"]) == (bulk, rhat, tail)
    assert res.converged and not res.convergence_problems
    # the same seed with a planned length draws the same chains: no earlier check holds
    longer = sampler.sample(n + 100, tune=150, chains=4, rng=seed, progress=False, pool=None)
    np.testing.assert_array_equal(longer.samples[:, :n], res.samples)
    for check in checks_up_to(n)[:-1]:
        bulk, rhat, tail = convergence(longer.samples[:, :check])
        assert not (bulk >= ess and rhat <= 1.01 and tail >= 400), check


def test_converged_means_one_thing():
    """A run stopped as converged is ``converged``, whatever ESS was asked for (a target
    under 100 per chain is raised to that floor), and its summary's table and footer give
    the same bulk ESS, ArviZ's."""
    model, _, _ = correlated_gaussian()
    for seed in (rng_seed(7), rng_seed(8)):
        res = rnshmc.HMC(model).sample(tune=150, chains=4, rng=seed, progress=False, ess=50,
                                       pool=None)
        assert res.stopping["reason"] == "converged" and res.converged
        assert res.stopping["ess"] >= 400 and res.stopping["ess_tail"] >= 400
        table = res.summary()
        assert np.min(table["ess_bulk"]) == pytest.approx(res.stopping["ess"])
        assert np.min(table["ess_tail"]) == pytest.approx(res.stopping["ess_tail"])
        assert f"min bulk ESS {res.stopping['ess']:.0f}" in str(table)


def test_draws_cap_an_ess_run_and_warn():
    model, _, _ = correlated_gaussian()
    with pytest.warns(SamplingWarning, match="draws limit at 80 draws per chain"):
        res = rnshmc.HMC(model).sample(80, tune=100, rng=rng_seed(0), progress=False, ess=10**6)
    assert res.samples.shape[1] == 80 and res.stopping["reason"] == "draws"


def test_evaluation_budget_stops_and_warns():
    model, _, _ = correlated_gaussian()
    hmc = rnshmc.HMC(model, n_steps=5, jitter=False)
    full = hmc.sample(1000, tune=100, chains=2, rng=rng_seed(3), progress=False)
    budget = int(full.cost["density_evals"] // 2)
    with pytest.warns(SamplingWarning, match="evaluation budget"):
        cut = hmc.sample(1000, tune=100, chains=2, rng=rng_seed(3), progress=False,
                         max_evals=budget)
    n = cut.samples.shape[1]
    assert cut.stopping["reason"] == "max_evals" and 0 < n < 1000
    # at the first chunk end past its share, each chain stops: at most a chunk more
    assert budget <= cut.cost["density_evals"] <= budget + 2 * 6 * (1000 // 100 + 1)
    np.testing.assert_array_equal(cut.samples, full.samples[:, :n])
    with pytest.raises(BudgetSpent, match="before the sampling phase began") as raised:
        hmc.sample(1000, tune=100, chains=2, rng=rng_seed(3), progress=False, max_evals=50)
    assert len(raised.value.states) == 2


def test_time_budget_stops_and_warns():
    model = rnshmc.models.Gaussian(np.zeros(50), covariance=np.eye(50))
    hmc = rnshmc.HMC(model, step_size=0.05, n_steps=50)
    with pytest.warns(SamplingWarning, match="time budget"):
        res = hmc.sample(10**6, tune=0, chains=2, rng=rng_seed(0), progress=False, max_time=0.5,
                         pool=None)
    assert res.stopping["reason"] == "max_time" and 0 < res.samples.shape[1] < 10**6
    assert 0.5 <= res.stopping["seconds"] < 5


def test_a_run_without_limits_records_nothing_and_planned_runs_say_draws():
    model, _, _ = correlated_gaussian()
    plain = rnshmc.HMC(model).sample(50, tune=50, rng=rng_seed(0), progress=False)
    assert "stopping" not in plain
    budgeted = rnshmc.HMC(model).sample(50, tune=50, rng=rng_seed(0), progress=False,
                                        max_evals=10**9)
    assert budgeted.stopping["reason"] == "draws"
    np.testing.assert_array_equal(plain.samples, budgeted.samples)


@pytest.mark.parametrize("sampler_name", ["HMC", "ARNSHMC"])
def test_an_ess_run_resumed_from_a_checkpoint_gives_the_uninterrupted_draws(
        sampler_name, tmp_path, monkeypatch):
    """The first checkpoint written in the sampling phase (a kill after it loses nothing
    more), resumed: the same checks, the same stop, the same draws."""
    from rnshmc.samplers.checkpoint import Checkpointer
    model, _, _ = correlated_gaussian()
    kwargs = dict(tune=100, chains=2, rng=rng_seed(4), progress=False, pool=None, ess=400)
    sampler = getattr(rnshmc, sampler_name)(model, **(
        {} if sampler_name == "HMC" else dict(n_hidden=100)))  # (small checkpoints)
    full = sampler.sample(**kwargs)
    path, copy = tmp_path / "run.npz", tmp_path / "third.npz"
    write, writes = Checkpointer.write, []

    def write_and_keep_the_first_in_sampling(self, states, rule=None):
        write(self, states, rule)
        drawn = min(s.iteration if s.phase == "sampling" else 0 for s in states)
        if drawn > 0 and not writes:
            copy.write_bytes(path.read_bytes())
            writes.append(drawn)

    monkeypatch.setattr(Checkpointer, "write", write_and_keep_the_first_in_sampling)
    sampler.sample(**kwargs, checkpoint=path, checkpoint_every=40)
    monkeypatch.undo()
    assert 0 < writes[0] < full.samples.shape[1]
    resumed = rnshmc.resume(copy, progress=False, pool=None)
    np.testing.assert_array_equal(resumed.samples, full.samples)
    assert without_seconds(resumed.stopping) == without_seconds(full.stopping)


@pytest.mark.parametrize("seed", [1, 2])
def test_a_chain_that_left_the_shared_surrogate_does_not_stall_the_others(seed):
    """A chain whose surrogate the trust watch distrusted refits one of its own and stops
    waiting at the shared installs; at a check it pauses, and the join of the chains still
    waiting must run then (once, a livelock: every segment moved nothing). Chain 3 leaves for
    certain: its sampling step size (5, over three times the posterior's largest sd) rejects
    nearly every proposal on the surrogate; the others stay at a lenient ratio."""
    model, mean, cov = correlated_gaussian()
    sampler = rnshmc.ARNSHMC(model, n_hidden=20, step_size=[0.3, 0.3, 0.3, 5.0],
                             explore=dict(step_size=None, n_steps=8, adapt_mass_matrix=False),
                             surrogate=dict(training_data="states", gradient_weight=0.0,
                                            whiten=False),
                             trust=dict(ratio=0.3, window=20, refit_iterations=50))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # (chain 3's trust events)
        res = sampler.sample(tune=100, chains=4, rng=seed, progress=False, ess=400, pool=None)
        longer = sampler.sample(res.samples.shape[1] + 50, tune=100, chains=4, rng=seed,
                                progress=False, pool=None)
    assert res.stopping["reason"] == "converged"
    assert res.n_refits[3] > 0 and res.n_refits[:3].min() == 0  # one chain left, some not
    np.testing.assert_array_equal(longer.samples[:, :res.samples.shape[1]], res.samples)
