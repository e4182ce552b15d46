"""Chains at scale: chains run in parallel by default (threads for C-level
targets, spawned processes for Python callables from a module, serially otherwise) with BLAS
threads limited per worker; Dask runs them on a LocalCluster bound to loopback; the same rng
gives the same draws whatever runs the chains."""
import os
import sys
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import rnshmc
from rnshmc.samplers._execution import chain_pool
from testkit import loopback_dask_client, rng_seed

CORES = os.cpu_count() or 1
MODULE = '''
import numpy as np
PRECISION = np.array([[2.0, 0.6], [0.6, 1.0]])

def logp(q):
    return -0.5 * q @ PRECISION @ q

def grad_logp(q):
    return -PRECISION @ q

def logp_failing_past_one(q):
    if q[0] > 1.0:
        raise ArithmeticError("pools_model could not evaluate q[0] > 1")
    return logp(q)
'''


@pytest.fixture(autouse=True)
def quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # short runs: health warnings are expected
        yield


@pytest.fixture
def module_target(tmp_path, monkeypatch):
    """A Python-callable target whose functions live in an importable module (as a user's
    model module would), so that spawned processes can import them."""
    (tmp_path / "pools_model.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    import pools_model
    return rnshmc.Target(pools_model.logp, grad_logp=pools_model.grad_logp, dim=2)


def pool_kind(sampler, chains, dim):
    with chain_pool(sampler, "auto", chains, dim) as pool:
        return None if pool is None else type(pool).__name__


@pytest.mark.skipif(CORES < 2, reason="one core: pool='auto' runs chains serially")
def test_auto_pool_picks_threads_processes_or_serial(module_target):
    model = rnshmc.models.Gaussian(np.zeros(2), covariance=np.eye(2))
    assert pool_kind(rnshmc.HMC(model), 4, 2) == "ThreadPoolExecutor"
    assert pool_kind(rnshmc.HMC(model), 1, 2) is None
    assert pool_kind(rnshmc.HMC(module_target), 2, 2) == "ProcessPoolExecutor"
    # a lambda, or a function of the user's script (__main__), cannot reach a spawned worker
    lam = rnshmc.Target(lambda q: -0.5 * q @ q, grad_logp=lambda q: -q, dim=2)
    assert pool_kind(rnshmc.HMC(lam), 2, 2) is None


@pytest.mark.skipif(CORES < 2, reason="one core: nothing to limit")
def test_a_thread_pool_limits_blas_threads_per_chain():
    from threadpoolctl import threadpool_info
    model = rnshmc.models.Gaussian(np.zeros(2), covariance=np.eye(2))
    with chain_pool(rnshmc.HMC(model), "auto", CORES, 2):
        inside = {lib["internal_api"]: lib["num_threads"] for lib in threadpool_info()}
    assert all(n == 1 for n in inside.values()), inside


@pytest.mark.skipif(CORES < 2, reason="one core: nothing to limit")
def test_chains_on_pool_threads_limit_their_openmp_threads():
    """OpenMP's thread limit is per thread: each chain's thread sets its own, so that two
    chains' OpenMP kernels (the logistic model's) do not each take every core."""
    import threading
    from threadpoolctl import threadpool_info
    import rnshmc._kernels._logistic  # noqa: F401 - loads the OpenMP runtime
    if not any(lib["user_api"] == "openmp" for lib in threadpool_info()):
        pytest.skip("no OpenMP runtime loaded")
    seen = {}

    def logp(q):
        seen[threading.get_ident()] = [lib["num_threads"] for lib in threadpool_info()
                                       if lib["user_api"] == "openmp"]
        return -0.5 * q @ q

    target = rnshmc.Target(logp, grad_logp=lambda q: -q, dim=2)
    with ThreadPoolExecutor(2) as pool:
        rnshmc.HMC(target, step_size=0.5, n_steps=2).sample(5, tune=0, chains=2, rng=rng_seed(0),
                                                            progress=False, pool=pool)
    assert seen and all(n == [CORES // 2] * len(n) for n in seen.values()), seen


def test_default_parallel_chains_equal_serial_chains():
    model = rnshmc.models.Gaussian(np.array([1.0, -1.0, 0.5]),
                                   covariance=np.diag([1.0, 2.0, 0.5]))
    for sampler in (rnshmc.HMC(model, n_steps=5), rnshmc.RNSHMC(model, n_hidden=50)):
        kwargs = dict(draws=200, tune=100, chains=3, rng=rng_seed(2), progress=False)
        serial = sampler.sample(**kwargs, pool=None)
        parallel = sampler.sample(**kwargs)
        np.testing.assert_array_equal(parallel.samples, serial.samples)


def test_python_callables_from_a_module_run_in_processes_by_default(module_target):
    hmc = rnshmc.HMC(module_target, step_size=0.3, n_steps=5)
    kwargs = dict(draws=100, tune=0, chains=2, rng=rng_seed(5), progress=False)
    np.testing.assert_array_equal(hmc.sample(**kwargs).samples,
                                  hmc.sample(**kwargs, pool=None).samples)


def test_bad_pool_is_refused():
    model = rnshmc.models.Gaussian(np.zeros(2), covariance=np.eye(2))
    with pytest.raises(ValueError, match="pool must be"):
        rnshmc.HMC(model).sample(10, tune=10, chains=2, pool="threads", progress=False)
    with pytest.raises(TypeError, match="pool must be"):
        rnshmc.HMC(model).sample(10, tune=10, chains=2, pool=object(), progress=False)


def test_progress_bars_under_a_thread_pool(capsys):
    model = rnshmc.models.Gaussian(np.zeros(2), covariance=np.eye(2))
    with ThreadPoolExecutor(2) as pool:
        rnshmc.HMC(model, n_steps=3).sample(200, tune=50, chains=2, rng=rng_seed(0), pool=pool)
    err = capsys.readouterr().err
    assert "HMC chain 0" in err and "HMC chain 1" in err


@pytest.mark.skipif(CORES < 2, reason="one core: pool='auto' runs chains serially")
def test_chains_on_processes_show_their_progress(module_target, capsys):
    """Chains in spawned processes draw nothing themselves: their status lines reach the
    calling process (here a log: standard error is not a terminal), the same as threads'."""
    rnshmc.HMC(module_target, n_steps=3).sample(200, tune=50, chains=2, rng=rng_seed(0))
    err = capsys.readouterr().err
    for chain in (0, 1):
        assert f"HMC chain {chain}: " in err and "iterations, phase warmup" in err


@pytest.mark.skipif(CORES < 2, reason="one core: pool='auto' runs chains serially")
def test_a_model_error_in_a_process_keeps_the_models_traceback(module_target):
    """The exception raised in a worker reaches the caller chained to its traceback there,
    which shows the model's own file and line, and names the chain."""
    import pools_model
    failing = rnshmc.Target(pools_model.logp_failing_past_one, grad_logp=pools_model.grad_logp,
                            dim=2)
    with pytest.raises(ArithmeticError, match="could not evaluate") as caught:
        rnshmc.HMC(failing).sample(200, tune=100, chains=2, rng=rng_seed(1), progress=False,
                                   init=[[1.5, 0.0], [1.5, 0.0]])
    remote = caught.value.__cause__
    assert remote is not None and "worker process" in str(remote)
    assert "pools_model.py" in str(remote) and "logp_failing_past_one" in str(remote)
    assert "HMC chain" in str(remote)
    if sys.version_info >= (3, 11):  # (exception notes: the point the model failed at)
        assert "rnshmc: raised by logp (logp_failing_past_one) at q = [1.5" in str(remote)
    assert len(caught.value.states) == 2  # and nothing is lost


# ------------------------------------------------------------------------------------------
# Dask


@pytest.fixture(scope="module")
def dask_client():
    with loopback_dask_client() as client:
        yield client


def test_dask_cluster_is_on_loopback(dask_client):
    workers = dask_client.scheduler_info()["workers"]
    assert len(workers) == 2
    assert all(address.startswith("tcp://127.0.0.1:") for address in workers)
    assert dask_client.scheduler.address.startswith("tcp://127.0.0.1:")


def test_dask_chains_equal_serial_chains(dask_client):
    model = rnshmc.models.Gaussian(np.array([1.0, -1.0, 0.5]),
                                   covariance=np.diag([1.0, 2.0, 0.5]))
    kwargs = dict(draws=200, tune=100, chains=3, rng=rng_seed(7), progress=False)
    for sampler in (rnshmc.HMC(model, n_steps=5),
                    rnshmc.RNSHMC(model, n_hidden=50, share_surrogate=True)):
        serial = sampler.sample(**kwargs, pool=None)
        on_client = sampler.sample(**kwargs, pool=dask_client)
        on_executor = sampler.sample(**kwargs, pool=dask_client.get_executor())
        np.testing.assert_array_equal(on_client.samples, serial.samples)
        np.testing.assert_array_equal(on_executor.samples, serial.samples)


def test_dask_tasks_are_not_pure(dask_client):
    """The same state submitted twice is run twice (pure=False), not looked up."""
    model = rnshmc.models.Gaussian(np.zeros(2), covariance=np.eye(2))
    hmc = rnshmc.HMC(model, n_steps=3)
    states = hmc.init_states(draws=20, tune=10, chains=2, rng=rng_seed(0))
    first = hmc.run_states([s.copy() for s in states], progress=False, pool=dask_client)
    second = hmc.run_states([s.copy() for s in states], progress=False, pool=dask_client)
    assert all(a.done and b.done for a, b in zip(first, second))
    np.testing.assert_array_equal(first[0].outputs["sampling"]["samples"],
                                  second[0].outputs["sampling"]["samples"])


def test_a_failing_model_on_dask_raises_with_the_states(dask_client, module_target):
    def bad_logp(q):
        raise ArithmeticError("solver failed")
    import pools_model  # noqa: F401 - the cluster's workers import the module from PYTHONPATH
    target = rnshmc.Target(bad_logp, grad_logp=bad_logp, dim=2)
    hmc = rnshmc.HMC(target, step_size=0.1, n_steps=3)
    with pytest.raises(ArithmeticError, match="solver failed") as raised:
        hmc.run_states(hmc.init_states(draws=10, tune=10, chains=2, rng=rng_seed(0)),
                       progress=False,
                       pool=dask_client)
    assert len(raised.value.states) == 2
