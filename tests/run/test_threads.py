"""One model or surrogate shared by several threads gives the numbers of serial use.

Targets hold no scratch of their own (every evaluation writes into its caller's buffer), so two
samplers, or a sampler and the user's own calls, can use one object at once. Before Engine v2,
two HMC runs in two threads on one model corrupted each other (acceptance 0.98 -> 0.01-0.58,
variances up to 11.5 instead of 1): these tests reproduce that situation.
"""
import threading

import numpy as np
import pytest

import rnshmc
from rnshmc.models import EllipticPDE, Gaussian, LogisticRegression
from testkit import rng_seed


def run_in_threads(functions):
    """Call every function in its own thread, all started together; return their results."""
    results = [None] * len(functions)
    errors = []
    barrier = threading.Barrier(len(functions))

    def call(i, f):
        try:
            barrier.wait()
            results[i] = f()
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=call, args=(i, f)) for i, f in enumerate(functions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def models():
    X, y, _ = rnshmc.datasets.simulated_logistic(n=3000, dim=6, rng=rng_seed(0))
    Q = np.random.default_rng(rng_seed(1)).standard_normal((400, 3))
    surrogate = rnshmc.RandomNetworkSurrogate(3, 200, rng=rng_seed(0), whiten=True).fit(
        Q, 0.5 * np.sum(Q ** 2, axis=1), Q)
    return {
        "gaussian": (Gaussian(np.zeros(4), np.diag([1.0, 2.0, 3.0, 4.0])), 0.5),
        "logistic": (LogisticRegression(X, y, n_threads=1), 0.05),
        "logistic-openmp": (LogisticRegression(X, y), 0.05),
        "pde": (EllipticPDE(n=8, n_modes=4, rng=rng_seed(0)), 0.2),
        "surrogate": (surrogate, 0.5),
    }


@pytest.fixture(scope="module", params=list(models()))
def shared_model(request):
    return models()[request.param]


def test_two_samplers_on_one_model_equal_serial(shared_model):
    model, step_size = shared_model
    hmc = rnshmc.HMC(model, step_size=step_size, n_steps=8)
    draws = 400 if not isinstance(model, EllipticPDE) else 150

    def run(seed):
        return lambda: hmc.sample(draws, tune=20, rng=seed, progress=False,
                                  init=np.full(model.dim, 0.1))

    serial = [run(seed)() for seed in (1, 2)]
    points = np.random.default_rng(rng_seed(3)).standard_normal((200, model.dim)) * 0.3
    expected = [model.log_density(q) for q in points]
    # two samplers and the user's own calls of the model, all at once
    threaded = run_in_threads([run(1), run(2), lambda: [model.log_density(q) for q in points]])
    for a, b in zip(serial, threaded[:2]):
        np.testing.assert_array_equal(a.samples, b.samples)
        np.testing.assert_array_equal(a.log_density, b.log_density)
    assert threaded[2] == expected


def test_concurrent_surrogate_predictions_equal_serial():
    surrogate = models()["surrogate"][0]
    batches = [np.random.default_rng(seed).standard_normal((3000, 3)) for seed in range(3)]
    serial = [surrogate.predict(Q) for Q in batches]
    threaded = run_in_threads([lambda Q=Q: surrogate.predict(Q) for Q in batches])
    for a, b in zip(serial, threaded):
        np.testing.assert_array_equal(a, b)
    gradients = run_in_threads([lambda Q=Q: [surrogate.gradient(q) for q in Q[:300]]
                                for Q in batches])
    for Q, g in zip(batches, gradients):
        np.testing.assert_array_equal(g, [surrogate.gradient(q) for q in Q[:300]])


def test_two_sample_calls_on_one_rnshmc_sampler_at_once():
    """A sampler is configuration only: concurrent sample() calls do not interfere."""
    model = Gaussian(np.zeros(3), np.eye(3))
    rns = rnshmc.RNSHMC(model, n_hidden=40, step_size=0.4, explore=dict(n_steps=6))
    serial = [rns.sample(200, tune=200, rng=seed, progress=False) for seed in (5, 6)]
    threaded = run_in_threads([lambda s=seed: rns.sample(200, tune=200, rng=s, progress=False)
                               for seed in (5, 6)])
    for a, b in zip(serial, threaded):
        np.testing.assert_array_equal(a.samples, b.samples)
        np.testing.assert_array_equal(a.fit_residual, b.fit_residual)
