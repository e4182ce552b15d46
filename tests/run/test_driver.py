"""The chain driver: ChainState round trips, chunking, and what a sampler may not do."""
import numpy as np
import pytest

import rnshmc
from rnshmc import ChainState
from rnshmc.models import Gaussian

from testkit import check_mean, without_seconds, rng_seed


def correlated_gaussian(dim=3):
    rng = np.random.default_rng(rng_seed(0))
    A = rng.standard_normal((dim, dim))
    return Gaussian(np.arange(dim, dtype=float), A @ A.T / dim + np.eye(dim))


def assert_same_result(a, b):
    assert a.keys() == b.keys()
    for key in a:
        if key in ("timings", "surrogate"):
            continue
        if key == "trust_events":
            assert a[key] == b[key], key
            continue
        x, y = a[key], b[key]
        if isinstance(x, np.ndarray):
            np.testing.assert_array_equal(x, y, err_msg=key)
        else:
            assert without_seconds(x) == without_seconds(y), key


def interrupted_run(sampler, stops, tmp_path, save=True, **kwargs):
    """Run in pieces: after each stop the states go through an .npz file and are reloaded
    (``save=False``: continued in memory)."""
    states = sampler.init_states(**kwargs)
    done = 0
    for k, stop in enumerate(stops):
        while done < stop:  # (a shared surrogate's barrier stops the chains before)
            before = states[0].iterations_left()
            states = sampler.run_states(states, progress=False, stop_after=stop - done)
            done += before - states[0].iterations_left()
            sampler.join(states)
        if not save:
            continue
        for c, state in enumerate(states):
            state.save(tmp_path / f"chain{c}-{k}.npz")
        states = [ChainState.load(tmp_path / f"chain{c}-{k}.npz") for c in range(len(states))]
    while not all(s.done for s in states):
        states = sampler.run_states(states, progress=False)
        sampler.join(states)
    return sampler.result(states)


# HMC with full adaptation: tune=300 has windows ending at 99, 124, 174, 249 (Stan's
# schedule with a terminal buffer of 50); stops inside the initial buffer, at a window end,
# inside a window, at the end of warm-up and in the sampling phase.
HMC_STOPS = [[1], [37, 100], [125, 180], [300], [301, 450], [100, 101, 102, 299, 300, 301]]


@pytest.mark.parametrize("stops", HMC_STOPS)
def test_hmc_state_saved_and_continued_equals_uninterrupted(stops, tmp_path):
    hmc = rnshmc.HMC(correlated_gaussian(), n_steps=5)
    kwargs = dict(draws=200, tune=300, chains=2, rng=rng_seed(7))
    full = hmc.sample(progress=False, **kwargs)
    assert_same_result(interrupted_run(hmc, stops, tmp_path, **kwargs), full)


# RNS-HMC: stops in the exploration (adapting), at its end (the surrogate fitted: training has
# no iterations, so it runs with the exploration's last chunk), and in the sampling phase.
RNS_STOPS = [[50], [199], [200], [200, 201], [250], [60, 200, 399]]


@pytest.mark.parametrize("delayed", [False, True])
@pytest.mark.parametrize("stops", RNS_STOPS)
def test_rnshmc_state_saved_and_continued_equals_uninterrupted(stops, delayed, tmp_path):
    rns = rnshmc.RNSHMC(correlated_gaussian(), n_hidden=40, explore=dict(n_steps=5),
                        delayed_acceptance=delayed)
    kwargs = dict(draws=200, tune=200, chains=2, rng=rng_seed(3))
    full = rns.sample(progress=False, **kwargs)
    resumed = interrupted_run(rns, stops, tmp_path, **kwargs)
    assert_same_result(resumed, full)
    for a, b in zip(rnshmc.RNSHMC.fitted_surrogates(resumed), rnshmc.RNSHMC.fitted_surrogates(full)):
        np.testing.assert_array_equal(a.output_weights, b.output_weights)


@pytest.mark.parametrize("stops", [[1], [99, 100], [150, 260]])
def test_l2hmc_state_saved_and_continued_equals_uninterrupted(stops, tmp_path):
    """L2HMC in standardised coordinates on a surrogate: the saved states (in z) continue to
    the uninterrupted draws (mapped back to x)."""
    model = correlated_gaussian()
    l2 = rnshmc.L2HMC.with_surrogate(model, tune=100, rng=rng_seed(0), progress=False, n_steps=4,
                                     rns_options=dict(n_hidden=40))
    l2.train(5, chains=8, rng=rng_seed(1), progress=False)
    kwargs = dict(draws=200, tune=100, chains=2, rng=rng_seed(5))
    full = l2.sample(progress=False, **kwargs)
    assert_same_result(interrupted_run(l2, stops, tmp_path, **kwargs), full)


def test_l2hmc_continued_across_its_fallback_equals_uninterrupted(tmp_path):
    """L2HMC on a poor surrogate (15 units, values only) under a strict watch: it hands some
    chains to exact HMC; stops at the window that does it, just after it, and inside the
    exact stretch."""
    l2 = rnshmc.L2HMC.with_surrogate(
        correlated_gaussian(), tune=300, rng=rng_seed(0), progress=False, n_steps=5,
        trust=dict(ratio=0.9, window=20),
        rns_options=dict(n_hidden=15, surrogate=dict(gradient_weight=0.0, whiten=False,
                                                     training_data="states")))
    l2.train(300, chains=50, rng=rng_seed(1), learning_rate=3e-3, progress=False)
    kwargs = dict(draws=200, tune=50, chains=4, rng=rng_seed(0))
    with pytest.warns(RuntimeWarning, match="replaced by exact HMC"):
        full = l2.sample(progress=False, **kwargs)
    switch = 50 + min(e[0]["iteration"] for e in full.trust_events if e)
    for stops in ([switch], [switch + 1], [switch - 1, switch + 30]):
        with pytest.warns(RuntimeWarning, match="replaced by exact HMC"):
            resumed = interrupted_run(l2, stops, tmp_path, **kwargs)
        assert_same_result(resumed, full)
        assert resumed.trust_events == full.trust_events


@pytest.mark.parametrize("name, kernel", [("RNSHMC", "hmc"), ("ARNSHMC", "hmc"),
                                          ("RNSRMHMC", "hmc"), ("RNSHMC", "nuts")])
def test_continued_across_refits_and_fallback_equals_uninterrupted(name, kernel, tmp_path):
    """Stops where the trust watch switches to exact dynamics, inside an exact stretch, at
    the refit that ends it, and after the last switch (RNS-HMC: the fallback); the exact
    kernel HMC or NUTS."""
    riemannian = dict(n_adapt=40, n_steps=3) if name == "RNSRMHMC" else {}
    sampler = getattr(rnshmc, name)(
        correlated_gaussian(), n_hidden=8,
        surrogate=dict(n_train=50, gradient_weight=0.0, whiten=False), explore=dict(n_steps=5),
        trust=dict(ratio=1.0, window=20, max_refits=1, refit_iterations=60, kernel=kernel),
        **riemannian)
    kwargs = dict(draws=400, tune=200, chains=2, rng=rng_seed(5))
    with pytest.warns(RuntimeWarning, match="surrogate was poor"):
        full = sampler.sample(progress=False, **kwargs)
    # (which chains the strict watch distrusts depends on the seed; the warning says one did)
    events = next(events for events in full.trust_events if events)
    assert events[0]["action"] == "refit"
    before = 200 + riemannian.get("n_adapt", 0)  # (the iterations before sampling)
    first, last = before + events[0]["iteration"], before + events[-1]["iteration"]
    for stops in ([first], [first + 30, first + 60], [first + 59, first + 61, last + 5]):
        with pytest.warns(RuntimeWarning, match="surrogate was poor"):
            # ARNS-HMC's states hold the online estimator, not savable to .npz yet
            resumed = interrupted_run(sampler, stops, tmp_path, save=name == "RNSHMC", **kwargs)
        assert_same_result(resumed, full)


def test_state_of_a_stopped_chain_says_where_it_is(tmp_path):
    rns = rnshmc.RNSHMC(correlated_gaussian(), n_hidden=30, step_size=0.3,
                        explore=dict(n_steps=4))
    states = rns.run_states(rns.init_states(draws=100, tune=100, rng=rng_seed(0)), progress=False,
                            stop_after=150)
    assert states[0].phase == "training"  # the shared surrogate's barrier: join() passes it
    rns.join(states)
    state, = rns.run_states(states, progress=False, stop_after=50)
    assert (state.phase, state.iteration, state.iterations_left()) == ("sampling", 50, 50)
    assert state.parts["fit"].surrogate is not None and state.outputs["sampling"]["samples"].shape == (100, 3)
    assert "sampling" in repr(state)
    state.save(tmp_path / "s.npz")
    with pytest.raises(ValueError, match="belongs to a RNS-HMC chain"):
        rnshmc.HMC(correlated_gaussian(), step_size=0.3).run_chain(ChainState.load(tmp_path / "s.npz"))
    with pytest.raises(ValueError, match="dim"):
        rnshmc.RNSHMC(Gaussian(np.zeros(2), np.eye(2)), n_hidden=30).run_chain(
            ChainState.load(tmp_path / "s.npz"))
    rnshmc.SampleResult(samples=np.zeros(3)).save(tmp_path / "other.npz")
    with pytest.raises(ValueError, match="ChainState"):
        ChainState.load(tmp_path / "other.npz")


def test_sample_mutates_nothing_on_the_sampler():
    rns = rnshmc.RNSHMC(correlated_gaussian(), n_hidden=30, explore=dict(n_steps=4))
    before = {k: repr(v) for k, v in vars(rns).items()}
    rns.sample(100, tune=100, chains=2, rng=rng_seed(0), progress=False)
    assert {k: repr(v) for k, v in vars(rns).items()} == before


# --------------------------------------------------------------------------------------------
# warm-up


@pytest.mark.parametrize("tune", [20, 25, 30, 40, 49])
def test_short_warmups_do_not_stick(tune):
    """With 20 <= tune < 50 Stan's split left a 2-4 iteration terminal buffer: 8 of 20 seeds
    ended with acceptance 0 and step sizes 1.7-6.4 on a unit Gaussian."""
    target = Gaussian(np.zeros(2), np.eye(2))
    for seed in range(20):
        res = rnshmc.HMC(target, n_steps=10).sample(200, tune=tune, rng=seed, progress=False)
        assert res.acceptance_rate[0] > 0.5, (seed, res.step_size)
        assert 0.3 < res.step_size[0] < 1.5, seed


def test_continue_with_a_results_per_chain_settings():
    """A result's per-chain step sizes and inverse mass matrices are accepted back."""
    target = correlated_gaussian()
    first = rnshmc.HMC(target, n_steps=5).sample(100, tune=300, chains=2, rng=rng_seed(0),
                                                 progress=False)
    more = rnshmc.HMC(target, n_steps=5, step_size=first.step_size,
                      inverse_mass_matrix=first.inverse_mass_matrix).sample(
        100, tune=0, chains=2, rng=rng_seed(1), init=first.samples[:, -1], progress=False)
    np.testing.assert_array_equal(more.step_size, first.step_size)
    np.testing.assert_array_equal(more.inverse_mass_matrix, first.inverse_mass_matrix)
    # a list is one matrix per chain, also when a (chains, dim) array would be square
    dense = [np.eye(3) * (c + 1) for c in range(3)]
    res = rnshmc.HMC(target, step_size=0.2, inverse_mass_matrix=dense).sample(
        10, tune=0, chains=3, rng=rng_seed(0), progress=False)
    np.testing.assert_array_equal(res.inverse_mass_matrix, np.stack(dense))
    with pytest.raises(ValueError, match="per chain|per-chain"):
        rnshmc.HMC(target, step_size=first.step_size).sample(10, chains=3, progress=False)


@pytest.mark.parametrize("name, value", [
    ("step_size", "0.1"), ("step_size", 0.1j), ("n_steps", 2.0), ("n_steps", "3"),
    ("target_accept", "0.8"), ("max_energy_error", 1j), ("inverse_mass_matrix", ["a", "b"]),
    ("step_size", np.array([0.1 + 0j, 0.2]))])
def test_wrong_types_raise_type_error_naming_the_argument(name, value):
    with pytest.raises(TypeError, match=name):
        rnshmc.HMC(Gaussian(np.zeros(2), np.eye(2)), **{name: value})


def test_rnshmc_accepts_a_target_whose_dim_is_a_method():
    class BridgeStanLike:
        def dim(self):
            return 2

        def log_density(self, q):
            return -0.5 * q @ q

        def log_density_gradient(self, q):
            return -0.5 * q @ q, -q

    res = rnshmc.RNSHMC(BridgeStanLike(), n_hidden=30, explore=dict(n_steps=5)).sample(
        2000, tune=300, rng=rng_seed(0), progress=False)
    check_mean(res.samples, np.zeros(2))


def test_chains_that_never_move_are_reported():
    target = Gaussian(np.zeros(2), np.eye(2) * 1e-6)
    with pytest.warns(RuntimeWarning, match="chain 0: (every proposal|no proposal)"):
        rnshmc.HMC(target, step_size=5.0, n_steps=3).sample(50, tune=0, rng=rng_seed(0),
                                                            progress=False)


def test_exploration_without_accepted_moves_says_so():
    target = Gaussian(np.zeros(2), np.eye(2) * 1e-6)
    with pytest.raises(RuntimeError, match="accepted no move"):
        rnshmc.RNSHMC(target, n_hidden=10, step_size=5.0, explore=dict(n_steps=3)).sample(
            50, tune=50, rng=rng_seed(0), progress=False)


def test_a_state_saved_before_the_records_had_tree_depth_continues_as_the_uninterrupted_run(
        tmp_path):
    """Transition records gained NUTS's ``tree_depth``: a state whose records lack it (saved
    before) loads with the field 0 for its earlier transitions, and its chain continues to the
    uninterrupted draws."""
    from rnshmc._kernels._chain import TRANSITION
    sampler = rnshmc.HMC(correlated_gaussian(), n_steps=5)
    kwargs = dict(draws=200, tune=100, chains=1, rng=rng_seed(2))
    expected = sampler.sample(progress=False, **kwargs)
    state = sampler.run_states(sampler.init_states(**kwargs), progress=False, stop_after=150)[0]
    old = np.dtype([(name, TRANSITION.fields[name][0]) for name in TRANSITION.names
                    if name != "tree_depth"])
    for outputs in state.outputs.values():
        if "records" in outputs:
            records = np.zeros(len(outputs["records"]), old)
            for name in old.names:
                records[name] = outputs["records"][name]
            outputs["records"] = records
    state.save(tmp_path / "old.npz")
    loaded = ChainState.load(tmp_path / "old.npz")
    assert loaded.outputs["sampling"]["records"].dtype == TRANSITION
    assert not loaded.outputs["sampling"]["records"]["tree_depth"].any()
    result = sampler.result(sampler.run_states([loaded], progress=False))
    np.testing.assert_array_equal(result.samples[0], expected.samples[0])
