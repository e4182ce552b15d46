"""Stopping a run: Ctrl-C stops every chain within about a second, serially and on
a thread pool, and sample() returns the draws made; a failing model in one chain stops the
others and its exception comes out with every chain's state."""
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import rnshmc
from rnshmc._kernels._chain import TRANSITION, StopRequested
from rnshmc._kernels._integrators import Leapfrog
from rnshmc._kernels._metrics import EuclideanMetric
from rnshmc._kernels._metropolis import MetropolisChain
from rnshmc._kernels._targets import PyCallableTarget
from rnshmc._kernels._transition import Chain
from rnshmc.targets import as_ctarget
from testkit import rng_seed

CHILD = textwrap.dedent("""
    import sys, time, warnings
    import numpy as np
    from concurrent.futures import ThreadPoolExecutor
    import rnshmc
    pool = ThreadPoolExecutor(2) if sys.argv[1] == "threads" else None
    model = rnshmc.models.Gaussian(np.zeros(50), covariance=np.eye(50))
    if sys.argv[1] == "processes":  # Python callables from a module: pool="auto" spawns
        import interrupt_model      # processes, which the parent's SIGINT alone must stop
        model, pool = rnshmc.Target(interrupt_model.logp, grad_logp=interrupt_model.grad,
                                    dim=50), "auto"
    print("sampling", flush=True)
    warnings.simplefilter("ignore")
    result = rnshmc.HMC(model, step_size=0.05, n_steps=200).sample(
        50000, tune=50, chains=2, rng=0, progress=False, pool=pool)
    print("returned", time.perf_counter(), result.samples.shape[0], result.samples.shape[1],
          result.get("interrupted", False), flush=True)
""")


MODULE = """
def logp(q):
    return -0.5 * q @ q

def grad(q):
    return -q
"""


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process is POSIX")
@pytest.mark.parametrize("mode", ["serial", "threads", "processes"])
def test_sigint_returns_the_draws_within_two_seconds(mode, tmp_path):
    """SIGINT sent to the sampling process alone (not to its process group, as a terminal's
    Ctrl-C is): serially, on a thread pool, and on the spawned process pool of
    pool="auto", whose workers the parent must stop itself."""
    if mode == "processes" and (os.cpu_count() or 1) < 2:
        pytest.skip("one core: pool='auto' runs the chains serially")
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    (tmp_path / "interrupt_model.py").write_text(MODULE)
    env = dict(os.environ, PYTHONPATH=str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    child = subprocess.Popen([sys.executable, str(script), mode], stdout=subprocess.PIPE,
                             text=True, cwd=tmp_path, env=env)
    try:
        assert child.stdout.readline().strip() == "sampling"
        # well into the sampling phase (50000 draws take over 15 s; spawned workers start
        # in about a second)
        time.sleep(4.0 if mode == "processes" else 1.5)
        sent = time.perf_counter()
        child.send_signal(signal.SIGINT)
        line = child.stdout.readline().split()
        child.wait(timeout=30)
    finally:
        child.kill()
    assert line[0] == "returned", line
    assert float(line[1]) - sent < 2.0
    chains, draws, interrupted = int(line[2]), int(line[3]), line[4] == "True"
    assert interrupted and 0 < draws < 50000
    assert chains == (1 if mode == "serial" else 2)  # serially, chain 1 never started


def test_a_failing_model_stops_the_other_chains_and_keeps_their_states():
    calls = {"n": 0}
    lock = threading.Lock()

    def logp_and_grad(q):
        with lock:
            calls["n"] += 1
            if calls["n"] == 3000:
                raise ArithmeticError("the model failed")
        return -0.5 * float(q @ q), -q

    target = rnshmc.Target(None, logp_and_grad=logp_and_grad, dim=2)
    sampler = rnshmc.HMC(target, step_size=0.3, n_steps=5, jitter=False)
    states = sampler.init_states(draws=10**6, tune=0, chains=2, rng=rng_seed(1), init=np.zeros(2))
    start = time.perf_counter()
    with ThreadPoolExecutor(2) as pool, pytest.raises(ArithmeticError) as raised:
        sampler.run_states(states, progress=False, pool=pool)
    assert time.perf_counter() - start < 10  # not the 10^6 draws
    kept = raised.value.states
    assert [s.chain for s in kept] == [0, 1]
    assert all(0 < s.iteration < 10**6 for s in kept)
    # whatever the chains drew is there, and they continue from where they stopped
    for state in kept:
        assert np.all(np.isfinite(state.outputs["sampling"]["samples"][:state.iteration]))
    calls["n"] = 10**9  # the model works again
    more = sampler.run_states(kept, progress=False, stop_after=10)
    assert all(s.iteration == k.iteration for s, k in zip(more, kept))


def test_states_stopped_between_transitions_continue_bit_identically():
    """A stop flag raised from another thread stops a C chain between two transitions; the
    kept state then continues to the draws of a run that was never stopped."""
    model = rnshmc.models.Gaussian(np.zeros(3), covariance=np.eye(3))
    sampler = rnshmc.HMC(model, n_steps=10)
    kwargs = dict(draws=300000, tune=300, chains=1, rng=rng_seed(5))
    full = sampler.sample(progress=False, **kwargs)
    started = time.perf_counter()
    sampler.run_states(sampler.init_states(**kwargs), progress=False)
    # (the Ctrl-C a third of the way into a run as long as that one: a fixed delay of 0.3 s
    # found the run (0.28 s) finished on a quiet machine, and its signal hit the next test)
    timer = threading.Timer((time.perf_counter() - started) / 3,
                            lambda: os.kill(os.getpid(), signal.SIGINT))
    states = sampler.init_states(**kwargs)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt) as raised:
            sampler.run_states(states, progress=False)
    finally:
        timer.cancel()
    assert 0 < raised.value.states[0].iteration < 300000
    resumed = sampler.result(sampler.run_states(raised.value.states, progress=False))
    np.testing.assert_array_equal(resumed.samples, full.samples)


def stoppable_chain(kind, target):
    """Either kind of C chain over ``target``, at a point: an HMC chain of one leapfrog step
    (one gradient evaluation a transition) or a random-walk Metropolis chain (one potential
    evaluation a transition)."""
    if kind == "hmc":
        chain = Chain(target, metric=EuclideanMetric(target.dim), integrator=Leapfrog())
        chain.step_size = 0.3
    else:
        chain = MetropolisChain(target, np.eye(target.dim), 0.5)
    chain.set_position(np.full(target.dim, 0.1))
    return chain


def check_stopped_after(chain, outputs, completed):
    """The chain made ``completed`` transitions, wrote exactly those rows, and its state is
    the last row written."""
    samples, records, proposals = outputs
    assert chain.completed == completed
    assert np.all(np.isfinite(samples[:completed])) and np.all(np.isnan(samples[completed:]))
    assert np.all(np.isfinite(proposals[:completed, :-1]))
    assert np.all(records["n_steps"][:completed] == 1) and not records["n_steps"][completed:].any()
    if completed:
        np.testing.assert_array_equal(samples[completed - 1], chain.position)


@pytest.mark.parametrize("kind", ["hmc", "metropolis"])
def test_a_raised_stop_flag_stops_both_chains_alike(kind):
    """The flag, raised during transition 3 (by the model here, as the run's main thread or a
    failing chain would), stops either chain before transition 4: StopRequested, completed
    == 3, exactly three rows written. A flag still raised stops the next run before its first
    transition."""
    flag = np.zeros(1, dtype=np.int32)
    calls = {"n": 0}

    def logp_and_grad(q):
        calls["n"] += 1
        if calls["n"] == 4:  # the initial point's evaluation, then one a transition
            flag[0] = 1
        return -0.5 * float(q @ q), -q

    target = PyCallableTarget(2, lambda q: logp_and_grad(q)[0], logp_and_grad)
    chain = stoppable_chain(kind, target)
    chain.set_stop_flag(flag)
    for completed in (3, 0):
        outputs = (np.full((10, 2), np.nan), np.zeros(10, TRANSITION), np.full((10, 3), np.nan))
        with pytest.raises(StopRequested) as raised:
            chain.run(np.random.default_rng(rng_seed(0)), 10, 1, False, outputs[0], outputs[1],
                      proposals=outputs[2])
        assert type(raised.value) is StopRequested
        check_stopped_after(chain, outputs, completed)
    assert calls["n"] == 4


@pytest.mark.skipif(sys.platform == "win32", reason="os.kill(SIGINT) to this process is POSIX")
@pytest.mark.parametrize("kind", ["hmc", "metropolis"])
def test_ctrl_c_stops_both_chains_alike(kind):
    """A SIGINT while a chain runs a C model without the GIL: the loop's signal poll lets
    the handler raise KeyboardInterrupt itself (not StopRequested) between two transitions,
    and the rows of the transitions made are written."""
    model = rnshmc.models.EllipticPDE(n=10, element="Q1", n_modes=6, rng=rng_seed(0))
    chain = stoppable_chain(kind, as_ctarget(model, model.dim))
    n_iter = 200000  # tens of seconds
    samples, records = np.full((n_iter, model.dim), np.nan), np.zeros(n_iter, TRANSITION)
    proposals = np.full((n_iter, model.dim + 1), np.nan)
    timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt) as raised:
            chain.run(np.random.default_rng(rng_seed(0)), n_iter, 1, False, samples, records,
                      proposals=proposals)
    finally:
        timer.cancel()
    assert type(raised.value) is KeyboardInterrupt
    assert 0 < chain.completed < n_iter
    check_stopped_after(chain, (samples, records, proposals), chain.completed)
