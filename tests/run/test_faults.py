"""Faults survived with nothing lost: a Dask worker killed mid-run, an UM-Bridge model that
hangs, answers NaN, answers the wrong shape or drops its connection mid-run, and a checkpoint
folder that becomes read-only or fills up.

Each run either finishes with the draws of the uninterrupted run (chains are deterministic per
seed, whatever runs them) or stops with a clear error, every chain's state and a checkpoint
that resumes. Everything runs on loopback (a LocalCluster, umbridge's own server in a thread or
a process) and each fault comes at a known point of the run (after the first checkpoint, or
after k good answers), not after a timer, so that the tests are deterministic and short.
"""
import contextlib
import errno
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest

import rnshmc
from rnshmc.diagnostics import SamplingWarning
from testkit import loopback_dask_client, rng_seed

POSIX = pytest.mark.skipif(os.name != "posix", reason="signals and mounts are POSIX")


def quietly(function, *args, **kwargs):
    """``function(*args, **kwargs)`` without warnings (short runs: health warnings expected)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return function(*args, **kwargs)


def saved_positions(path):
    """(phase, iteration) of every chain in the checkpoint ``path`` (which must be readable)."""
    from rnshmc.samplers.checkpoint import read_checkpoint
    _, states = read_checkpoint(path)
    return [(s.phase_index, s.iteration) for s in states]


# ------------------------------------------------------------------------------------------
# A Dask worker killed mid-run


def dask_target(delay=0.0, trigger=None, marker=None, client_pid=None):
    """A 2-d standard Gaussian as a Python callable that sleeps ``delay`` s an evaluation.

    With ``trigger``: the first evaluation in a worker process (not the client's, which
    evaluates the model for its checkpoints) after the file ``trigger`` exists kills that
    worker with SIGKILL, once for all processes (the file ``marker``, made atomically, holds
    its pid and address). A closure: Dask's workers receive it by value.
    """
    def logp_and_grad(q):
        time.sleep(delay)
        if (trigger is not None and os.getpid() != client_pid and os.path.exists(trigger)
                and not os.path.exists(marker)):
            try:
                descriptor = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                pass
            else:
                from distributed import get_worker
                os.write(descriptor, f"{os.getpid()} {get_worker().address}".encode())
                os.close(descriptor)
                os.kill(os.getpid(), signal.SIGKILL)
        return -0.5 * float(q @ q), -q
    return rnshmc.Target(None, logp_and_grad=logp_and_grad, dim=2)


DASK_RUN = dict(draws=150, tune=50, chains=2, rng=rng_seed(11), progress=False)
DASK_HMC = dict(step_size=0.3, n_steps=5)


@pytest.fixture(scope="module")
def fault_cluster():
    """A LocalCluster of its own (its workers get killed) on loopback: two worker processes
    of one thread, each restarted by its nanny when it dies."""
    with loopback_dask_client() as client:
        yield client


@pytest.fixture(scope="module")
def dask_reference():
    """The uninterrupted run, in this process (the same draws as on any executor)."""
    return quietly(rnshmc.HMC(dask_target(), **DASK_HMC).sample, **DASK_RUN, pool=None)


@contextlib.contextmanager
def allowed_failures(client, n):
    """While the block runs, a task may lose ``n`` workers (dying while they run it) and be
    rerun before it fails with KilledWorker (set on the live scheduler: the default, 3, may
    be configured otherwise)."""
    def swap(dask_scheduler, n):
        previous, dask_scheduler.allowed_failures = dask_scheduler.allowed_failures, n
        return previous

    previous = client.run_on_scheduler(swap, n=n)
    try:
        yield
    finally:
        client.run_on_scheduler(swap, n=previous)


def killed_worker_run(client, tmp_path):
    """HMC on ``client`` with a checkpoint every 100 of its 200 iterations; the worker of the
    first evaluation after the first checkpoint is SIGKILLed (mid-chain, in the last segment:
    no later task waits for the restarted worker to import rnshmc, which takes seconds).
    Returns the checkpoint's path, the marker's and the sampling call (to run under
    pytest.raises or not)."""
    path, marker = tmp_path / "run.npz", tmp_path / "killed"
    hmc = rnshmc.HMC(dask_target(0.0005, path, marker, os.getpid()), **DASK_HMC)
    return path, marker, lambda: quietly(hmc.sample, **DASK_RUN, pool=client,
                                         checkpoint=path, checkpoint_every=100)


@POSIX
def test_a_dask_worker_killed_mid_run_its_chain_is_rerun_to_the_uninterrupted_draws(
        fault_cluster, dask_reference, tmp_path):
    """Dask reruns the dead worker's task (distributed.scheduler.allowed-failures: 3 by
    default) on the remaining worker, from the state it was given: the run finishes with the
    uninterrupted draws."""
    before = set(fault_cluster.run(os.getpid).values())
    path, marker, run = killed_worker_run(fault_cluster, tmp_path)
    start = time.monotonic()
    with allowed_failures(fault_cluster, 3):
        result = run()
    assert time.monotonic() - start < 15
    pid, address = marker.read_text().split()
    assert int(pid) in before  # a worker of the run died mid-run...
    # (the scheduler's list: Client.run would wait for the worker its nanny restarts)
    assert address not in fault_cluster.scheduler_info()["workers"]
    np.testing.assert_array_equal(result.samples, dask_reference.samples)  # ...nothing lost
    np.testing.assert_array_equal(result.n_gradient_evals, dask_reference.n_gradient_evals)
    assert saved_positions(path) == [(2, 0), (2, 0)]  # (the last checkpoint: every chain done)


@POSIX
def test_a_dask_worker_killed_once_too_often_stops_the_run_with_every_chain_saved(
        fault_cluster, dask_reference, tmp_path):
    """With no rerun left (allowed-failures 0 here), the task fails with KilledWorker: the
    run stops at once with every chain's state and writes them to its checkpoint (a chain
    whose task had finished, as it ended; the others, their tasks cancelled, as they began),
    which resumes to the uninterrupted draws."""
    from distributed import KilledWorker
    path, marker, run = killed_worker_run(fault_cluster, tmp_path)
    start = time.monotonic()
    with allowed_failures(fault_cluster, 0), pytest.raises(KilledWorker) as raised:
        run()
    assert time.monotonic() - start < 10
    assert marker.exists()
    states = raised.value.states  # every chain's, as they were when the run stopped
    assert len(states) == 2
    assert saved_positions(path) == [(s.phase_index, s.iteration) for s in states]
    assert not (tmp_path / "run.npz.lock").exists()
    resumed = quietly(rnshmc.resume, path, target=dask_target(), progress=False, pool=None)
    np.testing.assert_array_equal(resumed.samples, dask_reference.samples)
    np.testing.assert_array_equal(resumed.n_gradient_evals, dask_reference.n_gradient_evals)


# ------------------------------------------------------------------------------------------
# An UM-Bridge model that fails mid-run

UM_MODEL = '''
import os
import threading

import numpy as np
import umbridge

MEAN = np.array([1.0, -0.5])
PRECISION = np.linalg.inv(np.array([[1.0, 0.6], [0.6, 2.0]]))


def log_density(q):
    d = np.asarray(q, dtype=float) - MEAN
    return float(-0.5 * d @ PRECISION @ d)


def gradient(q):
    return -(PRECISION @ (np.asarray(q, dtype=float) - MEAN))


class FaultyGaussian(umbridge.Model):
    """N(MEAN, PRECISION^-1) with its gradient; after ``after`` good answers to ``endpoint``
    ("Evaluate" or "Gradient"), the next ``lasting`` ones (None: all) are faulty: "hang" (until
    ``release`` is set), "nan", "shape" (one number too many) or "exit" (the server's process
    ends at once, dropping its connections)."""

    def __init__(self, fault=None, endpoint="Evaluate", after=0, lasting=None):
        super().__init__("posterior")
        self.fault, self.endpoint, self.after, self.lasting = fault, endpoint, after, lasting
        self.answers = {"Evaluate": 0, "Gradient": 0}
        self.release = threading.Event()
        self.lock = threading.Lock()

    def get_input_sizes(self, config):
        return [2]

    def get_output_sizes(self, config):
        return [1]

    def supports_evaluate(self):
        return True

    def supports_gradient(self):
        return True

    def faulty(self, endpoint):
        with self.lock:
            self.answers[endpoint] += 1
            n = self.answers[endpoint] - self.after
        if self.fault is None or endpoint != self.endpoint or n < 1:
            return None
        if self.lasting is not None and n > self.lasting:
            return None
        if self.fault == "hang":
            self.release.wait(30)
        elif self.fault == "exit":
            os._exit(1)
        return self.fault

    def __call__(self, parameters, config):
        fault = self.faulty("Evaluate")
        value = log_density(parameters[0])
        return [[float("nan")]] if fault == "nan" else [[value] * (2 if fault == "shape" else 1)]

    def gradient(self, out_wrt, in_wrt, parameters, sens, config):
        fault = self.faulty("Gradient")
        g = (sens[0] * gradient(parameters[0])).tolist()
        return [float("nan")] * 2 if fault == "nan" else g + [0.0] * (fault == "shape")
'''

SERVE = '''
import socket
import sys

from aiohttp import web
import umbridge

from faulty_model import FaultyGaussian

# umbridge.serve_models listens on every interface: its application is run on a socket bound
# to loopback instead (rnshmc.serve does the same, but importing rnshmc would take seconds)
sock = socket.socket()
sock.bind(("127.0.0.1", 0))
sock.listen()
print(f"http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
run_app = web.run_app
web.run_app = lambda app, **options: run_app(app, sock=sock, print=None, handle_signals=False)
umbridge.serve_models([FaultyGaussian(sys.argv[1], sys.argv[2], int(sys.argv[3]))], port=0)
'''

UM_RUN = dict(draws=40, tune=20, chains=2, rng=rng_seed(3), progress=False, pool=None)
UM_HMC = dict(step_size=0.9, n_steps=3)
# Evaluate answers before the fault: the chains run one after the other in segments of 20
# iterations (about 40 answers a chain; the first checkpoint asks once more); 100 comes in
# chain 0's sampling, in the second segment, after the first checkpoint
AFTER = 100


@pytest.fixture(scope="module")
def faulty_model(tmp_path_factory):
    """The module ``faulty_model`` (UM_MODEL), importable here and by a server process."""
    pytest.importorskip("umbridge")
    folder = tmp_path_factory.mktemp("umbridge_model")
    (folder / "faulty_model.py").write_text(UM_MODEL)
    sys.path.insert(0, str(folder))
    try:
        import faulty_model
        yield faulty_model
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("faulty_model", None)


@pytest.fixture
def serve(faulty_model):
    """``serve(model)``: umbridge's server for ``model`` in a thread on 127.0.0.1; returns its
    URL. Every server is stopped (a hung model released first) at the end of the test."""
    from rnshmc.serve import serve_models
    handles = []

    def start(model):  # (serve_models returns once the server listens)
        handles.append((model, serve_models([model], port=0, block=False)))
        return handles[-1][1].url

    yield start
    for model, handle in handles:
        model.release.set()
        handle.stop()


def twin(faulty_model):
    """The model's density computed in this process (bit-identical to the UM-Bridge model's:
    its numbers travel as their repr)."""
    m = faulty_model
    return rnshmc.Target(None, logp_and_grad=lambda q: (m.log_density(q), m.gradient(q)),
                         dim=2)


@pytest.fixture(scope="module")
def um_reference(faulty_model):
    """The uninterrupted run (on the model's twin in this process: the same draws)."""
    return quietly(rnshmc.HMC(twin(faulty_model), **UM_HMC).sample, **UM_RUN)


def logged(model):
    """``model`` with a log of its requests in ``model.log``: (endpoint, point or None)."""
    request, model.log = model._request, []

    def logging_request(endpoint, payload):
        model.log.append((endpoint, None if payload is None else payload.get("input")))
        return request(endpoint, payload)

    model._request = logging_request
    return model


def contexts(error):
    """The exceptions ``error`` was raised while handling (its __context__ chain)."""
    while error.__context__ is not None:
        error = error.__context__
        yield error


def start_process_server(faulty_model, tmp_path, *fault):
    """umbridge's server in a process of its own (a model that ends it drops its
    connections); returns (the process, its URL, whose socket listens already)."""
    (tmp_path / "serve.py").write_text(SERVE)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(faulty_model.__file__))
    process = subprocess.Popen([sys.executable, str(tmp_path / "serve.py"), *map(str, fault)],
                               env=env, stdout=subprocess.PIPE, text=True)
    return process, process.stdout.readline().strip()


FAULTS = {
    # fault, endpoint: (exception, what its message says)
    ("hang", "Evaluate"): ("UMBridgeTimeoutError",
                           (r"did not answer Evaluate at q = \[.*\] \(model 'posterior'\) "
                            r"within timeout=0.3 s")),
    ("shape", "Gradient"): ("UMBridgeError",
                            (r"model 'posterior' at .* answered Gradient at q = \[.*\] "
                             r"with InvalidOutput")),
    ("exit", "Evaluate"): ("UMBridgeConnectionError",
                           (r"closed the connection without answering Evaluate at q = "
                            r"\[.*\] \(model 'posterior'\): did it crash")),
}


@pytest.mark.parametrize("fault, endpoint", list(FAULTS), ids=["-".join(k) for k in FAULTS])
def test_an_umbridge_model_failing_mid_run_stops_it_with_its_checkpoint_intact(
        fault, endpoint, faulty_model, serve, um_reference, tmp_path):
    """After AFTER good answers the model hangs (past the client's timeout), answers the wrong
    shape (which umbridge's server reports), or its server process dies mid-request. The run
    stops at once with an error naming the request, the point and the model; the model is not
    asked again (a hung or dead one would fail again and hide the first error); every chain's
    state is in the checkpoint, which resumes on a healthy server: chain 1, stopped between
    transitions, to the uninterrupted draws, chain 0 to them up to its failed transition
    (whose random draws were spent: a valid continuation after it)."""
    from rnshmc.models import UMBridgeModel
    from rnshmc.models import umbridge as client
    path = tmp_path / "run.npz"
    process = None
    if fault == "exit":
        process, url = start_process_server(faulty_model, tmp_path, fault, endpoint, AFTER)
    else:
        url = serve(faulty_model.FaultyGaussian(fault, endpoint, AFTER))
    try:
        # (a short timeout for the hung model; the process server may still be starting)
        model = logged(UMBridgeModel(url, "posterior", timeout=0.3 if fault == "hang" else 30))
        exception, message = FAULTS[fault, endpoint]
        with pytest.raises(getattr(client, exception), match=message) as raised:
            quietly(rnshmc.HMC(model, **UM_HMC).sample, **UM_RUN, checkpoint=path,
                    checkpoint_every=20)
    finally:
        if process is not None:
            process.kill()
            process.wait()
            process.stdout.close()
    # the error is the failed request's, the model's last (not a second failure while the
    # checkpoint was written: no check of the model after it)
    assert not any(isinstance(e, client.UMBridgeError) for e in contexts(raised.value))
    last, point = model.log[-1]
    assert last == endpoint and client._call(last, point[0]) in str(raised.value)
    states = raised.value.states
    phases = [s.phases[s.phase_index][0] for s in states]
    drawn = [s.iteration for s in states]
    assert phases == ["sampling", "sampling"] and drawn[0] > 0 and drawn[1] == 0
    assert saved_positions(path) == [(s.phase_index, s.iteration) for s in states]
    assert not (tmp_path / "run.npz.lock").exists()
    healthy = UMBridgeModel(serve(faulty_model.FaultyGaussian()), "posterior")
    resumed = quietly(rnshmc.resume, path, target=healthy, progress=False, pool=None)
    assert resumed.samples.shape == um_reference.samples.shape
    np.testing.assert_array_equal(resumed.samples[1], um_reference.samples[1])
    np.testing.assert_array_equal(resumed.samples[0, :drawn[0]],
                                  um_reference.samples[0, :drawn[0]])
    assert resumed.accepted[0, drawn[0]:].mean() > 0.5  # (moving on, on the healthy model)


def test_an_umbridge_model_failing_before_the_first_checkpoint_leaves_one_resume_warns_of(
        faulty_model, serve, um_reference, tmp_path):
    """Hung at its 10th answer, before any checkpoint: the checkpoint is still written (the
    model is not asked for its check, which it could not give); resume says it cannot check
    the target, and continues (here on the model's twin in this process: a checkpoint does
    not hold the model, any target of the same density continues it)."""
    from rnshmc.models import UMBridgeModel
    from rnshmc.models.umbridge import UMBridgeTimeoutError
    path = tmp_path / "run.npz"
    model = UMBridgeModel(serve(faulty_model.FaultyGaussian("hang", "Evaluate", 10)),
                          "posterior", timeout=0.3)
    with pytest.raises(UMBridgeTimeoutError):
        quietly(rnshmc.HMC(model, **UM_HMC).sample, **UM_RUN, checkpoint=path,
                checkpoint_every=20)
    tree = dict(rnshmc.load(path))
    assert np.isnan(tree["target_check"][1])
    drawn = saved_positions(path)[0][1]
    with pytest.warns(RuntimeWarning, match="target given is not checked"):
        resumed = rnshmc.resume(path, target=twin(faulty_model), progress=False, pool=None)
    assert resumed.samples.shape == um_reference.samples.shape
    np.testing.assert_array_equal(resumed.samples[1], um_reference.samples[1])
    assert drawn > 0  # (chain 0 had started its warm-up)


def test_a_resumed_run_whose_model_fails_at_once_keeps_the_checkpoints_target_check(
        tmp_path):
    """The check that resume verified goes on into the checkpoint written when the resumed
    run's model fails before its first checkpoint (the model is not asked for it then), so
    that the next resume checks its target as the first did."""
    from rnshmc.samplers.checkpoint import Checkpointer
    model = rnshmc.models.Gaussian(np.zeros(3), covariance=np.eye(3))
    hmc = rnshmc.HMC(model, n_steps=3)
    states = hmc.run_states(hmc.init_states(50, tune=50, chains=1, rng=rng_seed(0)), progress=False,
                            stop_after=60)
    path = tmp_path / "run.npz"
    Checkpointer(path, hmc, dict(draws=50, checkpoint_every=1000)).write(states)
    check = dict(rnshmc.load(path))["target_check"]
    calls = []

    def failing(q):  # (its first call is resume's check)
        calls.append(1)
        if len(calls) > 1:
            raise ArithmeticError("solver failed")
        return model.log_density_gradient(q)

    with pytest.raises(ArithmeticError, match="solver failed"):
        rnshmc.resume(path, target=rnshmc.Target(None, logp_and_grad=failing, dim=3),
                      progress=False, pool=None)
    assert len(calls) == 2  # (not asked for the check when the failure was saved)
    saved = dict(rnshmc.load(path))["target_check"]
    assert np.isfinite(check[1]) and saved[1] == check[1]
    np.testing.assert_array_equal(saved[0], check[0])
    assert saved_positions(path) == [(1, 10)]


@pytest.mark.parametrize("lasting", [6, None], ids=["for-6-answers", "for-ever"])
def test_an_umbridge_model_answering_nan_mid_run_makes_counted_divergences(
        lasting, faulty_model, serve, um_reference, tmp_path):
    """NaN is not an error: as docs/algorithms.md says (the Metropolis test), a proposal
    whose trajectory meets a non-finite value is a divergence, rejected and recorded. The run
    goes on: each affected transition of chain 0 stays where it was and is flagged, the
    result warns of the divergences (not silently stuck), the chain moves again when the
    model recovers, chain 1 is untouched, and the checkpoint keeps the check made while the
    model was healthy. A model that answers NaN for ever leaves its chains where they are
    from then on, every transition flagged, and a chain with no other draw is warned of."""
    from rnshmc.models import UMBridgeModel
    path = tmp_path / "run.npz"
    model = UMBridgeModel(serve(faulty_model.FaultyGaussian("nan", "Evaluate", AFTER,
                                                           lasting)), "posterior")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = rnshmc.HMC(model, **UM_HMC).sample(**UM_RUN, checkpoint=path,
                                                    checkpoint_every=20)
    reference = um_reference
    messages = [str(w.message) for w in caught]
    diverging = np.flatnonzero(result.diverging[0])
    assert len(diverging) >= 1 and not reference.diverging.any()
    first = diverging[0]
    np.testing.assert_array_equal(result.samples[0, :first], reference.samples[0, :first])
    # a divergence is a rejection: the chain stays where it was
    assert not result.accepted[result.diverging].any()
    np.testing.assert_array_equal(result.samples[0, diverging],
                                  result.samples[0, diverging - 1])
    n = int(result.diverging.sum())
    assert any(isinstance(w.message, SamplingWarning) and f"{n} divergent transitions"
               in str(w.message) for w in caught), messages
    if lasting is None:  # every transition after the fault: stuck there, and said so
        assert np.all(result.diverging[0, first:])
        assert np.all(result.diverging[1])  # (chain 1's sampling began after the fault)
        assert any("chain 1: every proposal of the sampling phase diverged" in m
                   for m in messages), messages
    else:
        np.testing.assert_array_equal(result.samples[1], reference.samples[1])
        assert len(diverging) <= lasting
        assert result.accepted[0, diverging[-1] + 1:].mean() > 0.5  # moving again
    check = dict(rnshmc.load(path))["target_check"]
    assert np.isfinite(check[1])  # (the check was made once, before the fault)
    assert saved_positions(path) == [(2, 0), (2, 0)]


# ------------------------------------------------------------------------------------------
# A checkpoint folder that becomes read-only or full


def run_command(*command):
    """``command``'s completed process (its output captured; a failure is the caller's)."""
    return subprocess.run(command, capture_output=True, text=True, check=False)


@pytest.fixture
def small_disk(tmp_path):
    """A real 256 KiB tmpfs mounted on a folder of ``tmp_path`` (needs the privilege to
    mount: root with CAP_SYS_ADMIN; skipped otherwise), unmounted at the end."""
    if os.name != "posix" or shutil.which("mount") is None:
        pytest.skip("needs mount (POSIX)")
    folder = tmp_path / "disk"
    folder.mkdir()
    mounted = run_command("mount", "-t", "tmpfs", "-o", "size=256k,mode=0755", "tmpfs",
                          str(folder))
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN): "
                    f"{mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        if run_command("umount", str(folder)).returncode != 0:
            run_command("umount", "-l", str(folder))


@pytest.fixture
def lockable_folder(tmp_path, request):
    """(folder, ``read_only(flag)`` that makes it read-only or writable again, the words of
    the error a write then meets): chmod 0o555 where that stops writes (not as root); as
    root, which writes through any mode, a tmpfs remounted read-only (skipped where one
    cannot be mounted)."""
    folder = tmp_path / "folder"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        (folder / "probe").touch()
    except PermissionError:  # chmod works here
        folder.chmod(0o755)

        def read_only(flag):
            folder.chmod(0o555 if flag else 0o755)

        try:
            yield folder, read_only, "Permission denied"
        finally:
            folder.chmod(0o755)
        return
    (folder / "probe").unlink()
    folder.chmod(0o755)
    disk = request.getfixturevalue("small_disk")  # (root: chmod does not stop writes)

    def read_only(flag):
        remounted = run_command("mount", "-o", "remount," + ("ro" if flag else "rw"),
                                str(disk))
        assert remounted.returncode == 0, remounted.stderr

    try:
        yield disk, read_only, "Read-only file system"
    finally:
        read_only(False)


def gaussian_with_hook(hook):
    """A 3-d standard Gaussian as a Python callable that calls ``hook()`` before each
    evaluation (a fault arriving at a known point of the run)."""
    def logp_and_grad(q):
        hook()
        return -0.5 * float(q @ q), -q
    return rnshmc.Target(None, logp_and_grad=logp_and_grad, dim=3)


DISK_RUN = dict(draws=300, tune=100, chains=2, rng=rng_seed(3), progress=False, pool=None)


@pytest.fixture(scope="module")
def disk_reference():
    return quietly(rnshmc.HMC(gaussian_with_hook(lambda: None), n_steps=3).sample, **DISK_RUN)


def once_checkpointed(path, fault):
    """A hook that calls ``fault()`` at the first evaluation after ``path`` exists."""
    done = []

    def hook():
        if not done and os.path.exists(path):
            done.append(True)
            fault()
    return hook


def check_run_survived_its_checkpoint_failures(result, folder, path, reference, words,
                                               caught):
    """The run ended with all its draws, warned once of its failing writes (naming the
    error) and lists them; the checkpoint on disk is the first one, no partial file left."""
    np.testing.assert_array_equal(result.samples, reference.samples)
    failures = result["checkpoint_failures"]
    assert [f[0] for f in failures] == [200, 300, 400]
    assert all(words in f[1] for f in failures), failures
    written = [str(w.message) for w in caught if "writing the checkpoint" in str(w.message)]
    assert len(written) == 1 and "at iteration 100) is intact" in written[0]
    assert saved_positions(path) == [(1, 0), (1, 0)]  # (after the 100 warm-up iterations)
    assert not list(folder.glob("*.partial.npz"))


@POSIX
def test_a_checkpoint_folder_made_read_only_mid_run_the_run_ends_and_resumes(
        lockable_folder, disk_reference):
    """The folder turns read-only after the first checkpoint: the run goes on to the end
    (the result is not lost for the lock file it cannot remove either: a warning says so),
    and once the folder is writable again the first checkpoint resumes, in this very
    process, to the uninterrupted draws."""
    folder, read_only, words = lockable_folder
    path = folder / "run.npz"
    target = gaussian_with_hook(once_checkpointed(path, lambda: read_only(True)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = rnshmc.HMC(target, n_steps=3).sample(**DISK_RUN, checkpoint=path,
                                                      checkpoint_every=100)
    check_run_survived_its_checkpoint_failures(result, folder, path, disk_reference, words,
                                               caught)
    assert any("could not remove the checkpoint's lock file" in str(w.message) for w in caught)
    assert (folder / "run.npz.lock").exists()
    read_only(False)
    resumed = quietly(rnshmc.resume, path, target=gaussian_with_hook(lambda: None),
                      progress=False, pool=None)  # (takes over the lock left behind)
    np.testing.assert_array_equal(resumed.samples, disk_reference.samples)
    assert not (folder / "run.npz.lock").exists()


@POSIX
def test_a_checkpoint_folder_read_only_from_the_start_is_refused_before_sampling(
        lockable_folder):
    """Nothing to save yet: the run refuses at once, naming the lock file it cannot write,
    rather than sampling for hours without a checkpoint."""
    folder, read_only, _ = lockable_folder
    calls = []
    read_only(True)
    with pytest.raises(OSError) as raised:
        rnshmc.HMC(gaussian_with_hook(lambda: calls.append(1)), n_steps=3).sample(
            **DISK_RUN, checkpoint=folder / "run.npz")
    assert raised.value.errno in (errno.EROFS, errno.EACCES)
    assert "run.npz.lock" in str(raised.value)
    assert not calls and not os.listdir(folder)


@POSIX
def test_a_checkpoint_disk_that_fills_up_mid_run_the_run_ends_and_resumes(
        small_disk, disk_reference):
    """A real full disk (a 256 KiB tmpfs filled after the first checkpoint): every later
    write fails with ENOSPC partway through its temporary file, which is removed; the run
    ends with all its draws, and once space is freed the first checkpoint resumes to the
    uninterrupted draws."""
    path = small_disk / "run.npz"
    filler = small_disk / "filler"

    def fill_up():
        with open(filler, "wb", buffering=0) as f:  # (unbuffered: nothing left to flush)
            try:
                while True:
                    f.write(b"\0" * 4096)
            except OSError as error:
                assert error.errno == errno.ENOSPC

    target = gaussian_with_hook(once_checkpointed(path, fill_up))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = rnshmc.HMC(target, n_steps=3).sample(**DISK_RUN, checkpoint=path,
                                                      checkpoint_every=100)
    check_run_survived_its_checkpoint_failures(result, small_disk, path, disk_reference,
                                               "No space left on device", caught)
    filler.unlink()
    resumed = quietly(rnshmc.resume, path, target=gaussian_with_hook(lambda: None),
                      progress=False, pool=None)
    np.testing.assert_array_equal(resumed.samples, disk_reference.samples)
