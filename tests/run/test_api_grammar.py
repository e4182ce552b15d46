"""One grammar for the public API: every sampler's ``sample()`` has the same arguments, in the
same order, with the same kinds and defaults (only ``draws`` by position); a sampler's settings
after the target are keywords; ``rnshmc.sample`` shares their names and meanings; an earlier
run goes to ``warm_start=``, never to ``init=``."""
import inspect
import warnings

import numpy as np
import pytest

import rnshmc
from rnshmc.samplers._base import Sampler
from testkit import correlated_gaussian, rng_seed

P = inspect.Parameter
KEYWORD = P.KEYWORD_ONLY
# Sampler.sample's grammar: (name, kind, default)
SAMPLE = [("self", P.POSITIONAL_OR_KEYWORD, P.empty), ("draws", P.POSITIONAL_OR_KEYWORD, None),
          ("tune", KEYWORD, None), ("chains", KEYWORD, 4), ("rng", KEYWORD, None),
          ("init", KEYWORD, None), ("warm_start", KEYWORD, None), ("ess", KEYWORD, None),
          ("rhat", KEYWORD, 1.01), ("max_evals", KEYWORD, None), ("max_time", KEYWORD, None),
          ("progress", KEYWORD, True), ("pool", KEYWORD, "auto"), ("checkpoint", KEYWORD, None),
          ("checkpoint_every", KEYWORD, 1000)]
# rnshmc.sample's: the model by position, then keywords
FRONT_DOOR = [("model", P.POSITIONAL_OR_KEYWORD, P.empty), ("ess", KEYWORD, 1000),
              ("chains", KEYWORD, 4), ("rng", KEYWORD, None), ("init", KEYWORD, None),
              ("warm_start", KEYWORD, None), ("max_evals", KEYWORD, None),
              ("max_time", KEYWORD, None), ("progress", KEYWORD, True),
              ("pool", KEYWORD, "auto"), ("checkpoint", KEYWORD, None),
              ("checkpoint_every", KEYWORD, "10min"), ("sampler", KEYWORD, None),
              ("surrogate", KEYWORD, None)]
NAMED = {"HMC", "RMHMC", "RNSHMC", "ARNSHMC", "RNSRMHMC", "GradientFreeRNSHMC",
         "AdaptiveMetropolis", "L2HMC"}


def public_samplers():
    """Every Sampler subclass rnshmc exports, by name."""
    return {name: getattr(rnshmc, name) for name in rnshmc.__all__
            if isinstance(getattr(rnshmc, name), type) and issubclass(getattr(rnshmc, name),
                                                                      Sampler)}


def grammar(function):
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


def test_the_named_samplers_are_exported():
    assert NAMED <= set(public_samplers())


@pytest.mark.parametrize("name", sorted(public_samplers()))
def test_every_samplers_sample_has_the_grammar(name):
    assert grammar(public_samplers()[name].sample) == SAMPLE


@pytest.mark.parametrize("name", sorted(public_samplers()))
def test_every_samplers_settings_after_the_target_are_keywords(name):
    parameters = list(inspect.signature(public_samplers()[name].__init__).parameters.values())
    assert [p.name for p in parameters[:2]] == ["self", "target"]
    assert parameters[1].kind == P.POSITIONAL_OR_KEYWORD
    positional = [p.name for p in parameters[2:] if p.kind not in (KEYWORD, P.VAR_KEYWORD)]
    assert not positional, f"{name}: {positional} may be given by position"


# a setting's one meaning, wherever a sampler takes it: (its default, what it is)
ONE_MEANING = {
    "n_hidden": ("auto", "a surrogate's hidden units"),
    "surrogate": (None, "an unfitted surrogate's specification (a dict or an unfitted object)"),
    "target_accept": (None, "the acceptance the sampling kernel's step is adapted to"),
}


@pytest.mark.parametrize("name", sorted(public_samplers()))
def test_a_setting_has_one_meaning_in_every_sampler(name):
    """``n_hidden`` is a surrogate's hidden units with default "auto", ``surrogate`` an
    unfitted specification with default None (L2HMC's fitted surrogate is
    ``fitted_surrogate``, its networks' width ``net_width``), ``target_accept`` a number."""
    parameters = inspect.signature(public_samplers()[name].__init__).parameters
    for setting, (default, meaning) in ONE_MEANING.items():
        if setting not in parameters:
            continue
        if default is None and setting == "target_accept":
            assert isinstance(parameters[setting].default, float), (name, setting, meaning)
        else:
            assert parameters[setting].default == default, (name, setting, meaning)
    if name == "L2HMC":
        assert {"net_width", "fitted_surrogate"} <= set(parameters)


def test_target_accept_is_the_sampling_kernels_in_rns_hmc():
    """RNS-HMC's ``target_accept`` is its sampling step size's target on the surrogate, also
    when the exploration has its own (``explore=dict(target_accept=...)``): the sampling
    kernel's acceptance on the surrogate follows it."""
    model = correlated_gaussian(3)[0]
    rates = {}
    for target_accept in (0.6, 0.95):
        res = rnshmc.RNSHMC(model, n_hidden=200, target_accept=target_accept,
                            explore=dict(target_accept=0.8), trust=False).sample(
            400, tune=200, chains=2, rng=rng_seed(2), progress=False)
        rates[target_accept] = float(res.accept_prob.mean())
        assert res.exploration_acceptance_rate.min() > 0.5
    assert rates[0.95] > rates[0.6] + 0.1, rates


def test_the_front_door_has_the_grammar_of_the_samplers():
    front = grammar(rnshmc.sample)
    assert front == FRONT_DOOR
    # the arguments it shares with the samplers' sample() have the same names and kinds, come
    # in the same order (but ess, its purpose, first) and have the same defaults (but ess and
    # checkpoint_every, its own)
    samplers = {name: (kind, default) for name, kind, default in grammar(Sampler.sample)}
    names = [name for name, _, _ in front if name in samplers]
    assert names[0] == "ess"
    assert names[1:] == [name for name in samplers if name in names[1:]]
    assert {name for name, _, _ in front} - set(names) == {"model", "sampler", "surrogate"}
    for name, kind, default in front:
        if name in names:
            assert kind == samplers[name][0], name
            assert name in ("ess", "checkpoint_every") or default == samplers[name][1], name


def test_a_positional_ess_is_refused_naming_ess():
    model, _, _ = correlated_gaussian()
    with pytest.raises(TypeError, match=r"write ess=1000 \(the ESS to reach\)"):
        rnshmc.sample(model, 1000)
    with pytest.raises(TypeError, match="positional argument"):
        rnshmc.HMC(model).sample(100, 100)


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    """(the sampler, an HMC run's result, the path of its checkpoint)."""
    model, _, _ = correlated_gaussian()
    sampler = rnshmc.HMC(model, n_steps=5)
    path = tmp_path_factory.mktemp("warm") / "first.npz"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rnshmc.diagnostics.SamplingWarning)
        first = sampler.sample(100, tune=200, chains=2, rng=rng_seed(1), progress=False,
                               pool=None, checkpoint=path)
    return sampler, first, path


def test_an_earlier_run_given_as_init_is_refused_naming_warm_start(first_run):
    sampler, first, path = first_run
    for earlier in (first, path, str(path)):
        with pytest.raises(TypeError, match=r"HMC\.sample: init takes initial points.*use "
                                            r"warm_start="):
            sampler.sample(10, init=earlier, progress=False)
        with pytest.raises(TypeError, match=r"rnshmc\.sample: init takes initial points.*use "
                                            r"warm_start="):
            rnshmc.sample(sampler.target, init=earlier, sampler=sampler, progress=False)


def test_warm_start_with_init_or_tune_is_refused(first_run):
    sampler, first, _ = first_run
    for given in (dict(init=np.zeros(4)), dict(tune=10)):
        name = next(iter(given))
        with pytest.raises(ValueError, match=rf"give {name}= or warm_start=, not both: .*the "
                                             r"earlier run.* chains and its phases"):
            sampler.sample(10, warm_start=first, progress=False, **given)
    with pytest.raises(ValueError, match="give init= or warm_start=, not both"):
        rnshmc.sample(sampler.target, init=np.zeros(4), warm_start=first, sampler=sampler,
                      progress=False)
    with pytest.raises(TypeError, match="warm_start must be a result of sample"):
        sampler.sample(10, warm_start=np.zeros(4), progress=False)


def test_warm_start_continues_the_earlier_runs_chains(first_run):
    """``warm_start=`` a result, or its checkpoint, is the run of the earlier chains' warm
    states (Sampler.warm_states, docs/guide/checkpoints.md's driving by hand), bit for bit:
    its chains, step sizes and mass matrices, and no warm-up."""
    sampler, first, path = first_run
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rnshmc.diagnostics.SamplingWarning)
        by_hand = sampler.result(sampler.run_states(
            sampler.warm_states(first._chain_states, 300, rng=rng_seed(2)), progress=False))
        for earlier in (first, path):
            warm = sampler.sample(300, warm_start=earlier, rng=rng_seed(2), progress=False,
                                  pool=None)
            np.testing.assert_array_equal(warm.samples, by_hand.samples)
            np.testing.assert_array_equal(warm.n_gradient_evals, by_hand.n_gradient_evals)
            assert warm.samples.shape == (2, 300, 4)  # (the earlier run's 2 chains, not 4)
            np.testing.assert_array_equal(warm.step_size, first.step_size)
            np.testing.assert_array_equal(warm.inverse_mass_matrix, first.inverse_mass_matrix)
            np.testing.assert_array_equal(warm.n_gradient_evals, warm.n_gradient_evals_sampling)
