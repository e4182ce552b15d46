"""The contract every sampler keeps (docs/architecture.md): the same seed gives the same draws
serially, on threads and on processes; a run stopped and resumed from a checkpoint gives the
draws of the uninterrupted run; a Ctrl-C returns what was drawn; bad input gives a clear
error."""
import multiprocessing
import warnings
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import numpy as np
import pytest

import rnshmc
from rnshmc.samplers.checkpoint import Checkpointer
from testkit import rng_seed

MEAN = np.array([0.5, -0.3, 0.2])
COVARIANCE = np.array([[1.0, 0.3, 0.0], [0.3, 0.5, 0.1], [0.0, 0.1, 0.8]])


def gaussian():
    return rnshmc.models.Gaussian(MEAN, covariance=COVARIANCE)


def gaussian60():
    return rnshmc.models.Gaussian(np.zeros(60), covariance=np.eye(60))


def one_round(sampler):
    sampler.MAX_ROUNDS = 1  # (an exploration of one round: its check ends it)
    return sampler


def logistic():
    X, y, _ = rnshmc.datasets.simulated_logistic(n=300, dim=3, rng=rng_seed(0))
    return rnshmc.models.LogisticRegression(X, y)


def trained_l2hmc(model):
    l2 = rnshmc.L2HMC(model, n_steps=3, net_width=5, step_size=0.3)
    return l2.train(10, chains=10, rng=rng_seed(0), progress=False)


# name -> (model, sampler of a model, sample() lengths): every sampler, small and fast
SAMPLERS = {
    "HMC": (gaussian, lambda m: rnshmc.HMC(m, n_steps=3), dict(draws=60, tune=60)),
    "NUTS": (gaussian, lambda m: rnshmc.NUTS(m, max_tree_depth=5), dict(draws=60, tune=60)),
    "RMHMC": (logistic, lambda m: rnshmc.RMHMC(m, metric="fisher", n_steps=2),
              dict(draws=40, tune=40)),
    "RNSHMC": (gaussian, lambda m: rnshmc.RNSHMC(m, n_hidden=30), dict(draws=80, tune=60)),
    "RNSRMHMC": (logistic, lambda m: rnshmc.RNSRMHMC(m, n_hidden=40, softabs=1.0, n_adapt=20,
                                                     n_steps=2), dict(draws=40, tune=60)),
    "ARNSHMC": (gaussian, lambda m: rnshmc.ARNSHMC(m, n_hidden=30, share_surrogate=True),
                dict(draws=80, tune=60)),
    "GradientFreeRNSHMC": (gaussian, lambda m: rnshmc.GradientFreeRNSHMC(m, n_hidden=40),
                           dict(draws=60, tune=150)),
    "AdaptiveMetropolis": (gaussian, lambda m: rnshmc.AdaptiveMetropolis(m),
                           dict(draws=100, tune=100)),
    "L2HMC": (gaussian, trained_l2hmc, dict(draws=60, tune=20)),
}
NAMES = list(SAMPLERS)
# and the kernels a sampler offers besides its default, under the same contract
SAMPLERS.update({
    "RNSHMC (surrogate NUTS)": (gaussian, lambda m: rnshmc.RNSHMC(m, n_hidden=30, kernel="nuts"),
                                dict(draws=80, tune=60)),
    "ARNSHMC (surrogate NUTS)": (gaussian, lambda m: rnshmc.ARNSHMC(
        m, n_hidden=30, kernel="nuts", inner_steps=2), dict(draws=80, tune=60)),
    "ARNSHMC (NUTS exploration from L-BFGS)": (gaussian, lambda m: rnshmc.ARNSHMC(
        m, n_hidden=30, kernel="nuts", explore=dict(kernel="nuts", start="lbfgs")),
        dict(draws=200, tune=30)),
    # (a dense metric at d = 60, where a threaded BLAS's sums would depend on its thread count)
    "NUTS (dense metric, d 60)": (gaussian60, lambda m: rnshmc.NUTS(m, metric="dense"),
                                  dict(draws=400, tune=300)),
    # (one unit cannot follow a 60-dimensional Gaussian: the check's sigma hands the chains to
    # exact NUTS, its own warm-up first, from the start of sampling)
    "RNSHMC (surrogate no use: exact NUTS from the start)": (
        gaussian60, lambda m: one_round(rnshmc.RNSHMC(m, n_hidden=1, kernel="nuts")),
        dict(draws=400, tune="auto")),
})
RUNS = list(SAMPLERS)
# Under the oldest supported NumPy (1.x, whose OpenBLAS differs) the d 60 runs still draw
# differently serially and on threads: a thread-count dependent sum remains somewhere in them
# (the dense metric's and the Gaussian's products, the one found under NumPy 2, are plain
# loops now). Not found yet: expected to fail there, and reported.
OLD_NUMPY = np.lib.NumpyVersion(np.__version__) < "2.0.0"
D60 = ("NUTS (dense metric, d 60)", "RNSHMC (surrogate no use: exact NUTS from the start)")
SAME_SEED_RUNS = [pytest.param(name, marks=pytest.mark.xfail(
    OLD_NUMPY, reason="a thread-count dependent sum under NumPy 1.x's OpenBLAS", strict=False))
    if name in D60 else name for name in RUNS]


def quiet(function, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return function(*args, **kwargs)


def run(name, **options):
    model, make, lengths = SAMPLERS[name]
    sampler = make(model())
    return quiet(sampler.sample, chains=2, rng=rng_seed(11), progress=False, **lengths, **options)


def assert_same(a, b):
    np.testing.assert_array_equal(a.samples, b.samples)
    np.testing.assert_array_equal(a.log_density, b.log_density)
    np.testing.assert_array_equal(a.accepted, b.accepted)
    np.testing.assert_array_equal(a.n_density_evals, b.n_density_evals)
    np.testing.assert_array_equal(a.n_gradient_evals, b.n_gradient_evals)


@pytest.fixture(scope="module")
def process_pool():
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        yield pool


def test_every_sampler_is_covered():
    assert set(NAMES) == set(rnshmc.samplers.__all__)


@pytest.mark.parametrize("name", SAME_SEED_RUNS)
def test_same_seed_same_draws_serially_on_threads_and_on_processes(name, process_pool):
    serial = run(name, pool=None)
    with ThreadPoolExecutor(2) as threads:
        assert_same(run(name, pool=threads), serial)
    assert_same(run(name, pool=process_pool), serial)
    assert_same(run(name, pool=None), serial)  # and again: sample() changed nothing


@pytest.mark.parametrize("name", RUNS)
@pytest.mark.parametrize("where", ["before sampling", "in sampling"])
def test_stopped_and_resumed_equals_uninterrupted(name, where, tmp_path):
    model, make, lengths = SAMPLERS[name]
    sampler = make(model())
    full = run(name, pool=None)
    kwargs = dict(chains=2, rng=rng_seed(11), **lengths)
    states = sampler.init_states(**kwargs)
    before = sum(n for phase, n in states[0].phases if phase != "sampling")
    stop = before // 2 + 1 if where == "before sampling" else before + lengths["draws"] // 2
    states = quiet(sampler.run_states, states, progress=False, stop_after=stop)
    path = tmp_path / "run.npz"
    Checkpointer(path, sampler, dict(draws=lengths["draws"], checkpoint_every=1000)).write(states)
    target = None if isinstance(sampler.target, rnshmc.models.Gaussian) else sampler.target
    resumed = quiet(rnshmc.resume, path, target=target, progress=False, pool=None)
    assert_same(resumed, full)


class Interrupting:
    """The model as Python callables that raise KeyboardInterrupt at the ``at``-th call (as a
    Ctrl-C inside the model does)."""

    def __init__(self, model, at):
        self.model, self.at, self.calls = model, at, 0
        self.dim = model.dim

    def tick(self):
        self.calls += 1
        if self.calls == self.at:
            raise KeyboardInterrupt

    def log_density(self, q):
        self.tick()
        return self.model.log_density(q)

    def log_density_gradient(self, q):
        self.tick()
        return self.model.log_density_gradient(q)


@pytest.mark.parametrize("name", [n for n in RUNS if n not in ("RMHMC", "RNSRMHMC")] +
                         ["RMHMC (callable metric)"])
def test_ctrl_c_returns_what_was_drawn(name):
    if name == "RMHMC (callable metric)":
        precision = np.linalg.inv(COVARIANCE)
        make = lambda m: rnshmc.RMHMC(m, metric=lambda q: precision, n_steps=2, step_size=0.5,
                                      metric_derivatives=lambda q: np.zeros((3, 3, 3)))
        lengths = dict(draws=40, tune=40)
    else:
        _, make, lengths = SAMPLERS[name]
    counting = Interrupting(gaussian(), at=10 ** 9)
    sampler = make(counting)
    before = counting.calls  # (L2HMC's training calls it too)
    quiet(sampler.sample, chains=1, rng=rng_seed(3), progress=False, pool=None, **lengths)
    calls = counting.calls - before  # one chain's evaluations; interrupt three quarters in
    counting.calls, counting.at = 0, int(0.75 * calls)
    result = quiet(sampler.sample, chains=1, rng=rng_seed(3), progress=False, pool=None, **lengths)
    assert result.interrupted
    assert 0 < result.samples.shape[1] < lengths["draws"]
    assert np.all(np.isfinite(result.samples))


@pytest.mark.parametrize("name", NAMES)
def test_bad_input_gives_a_clear_error(name):
    model, make, lengths = SAMPLERS[name]
    sampler = make(model())
    with pytest.raises(ValueError, match="init must have shape"):
        sampler.sample(10, tune=lengths["tune"], init=np.zeros(5), progress=False)
    with pytest.raises(ValueError, match="non-finite"):
        sampler.sample(10, tune=lengths["tune"], init=np.full(3, np.nan), progress=False)
    with pytest.raises(TypeError, match="draws must be an integer"):
        sampler.sample("10", tune=lengths["tune"], progress=False)
    with pytest.raises(TypeError, match="must be an integer"):
        sampler.sample(10, tune="100" if name != "GradientFreeRNSHMC" else 1.5, progress=False)
    with pytest.raises(ValueError, match="chains"):
        sampler.sample(10, tune=lengths["tune"], chains=0, progress=False)
    nan_model = rnshmc.Target(lambda q: np.nan, grad_logp=lambda q: np.zeros(3), dim=3)
    if name in ("RMHMC", "RNSRMHMC"):
        return  # (their metrics are the logistic model's; the NaN model has none)
    if name == "L2HMC":
        nan_sampler = rnshmc.L2HMC(nan_model, n_steps=2, net_width=3).initialize(rng_seed(0))
    else:
        nan_sampler = make(nan_model)
    with pytest.raises(ValueError, match="not finite|non-finite|NaN"):
        quiet(nan_sampler.sample, 10, tune=lengths["tune"], progress=False, pool=None)


@pytest.mark.parametrize("name", NAMES)
def test_settings_are_keywords_and_an_unknown_one_is_named(name):
    """Every setting after the target is keyword-only, and a keyword that is neither a
    setting nor an earlier (renamed) name is a TypeError naming it, as Python's own."""
    model, _, _ = SAMPLERS[name]
    sampler = getattr(rnshmc, name)
    with pytest.raises(TypeError, match="unexpected keyword argument 'n_hiden'"):
        sampler(model(), n_hiden=10)
    with pytest.raises(TypeError, match="positional argument"):
        sampler(model(), 10)
