"""Checkpoints: a run killed with SIGKILL (in sampling, and in RNS-HMC's
exploration) resumes from its checkpoint to the draws of the uninterrupted run; a Ctrl-C
writes one too; corrupted and mismatched checkpoints give a clear error and overwrite
nothing; a checkpoint of another version of rnshmc loads, or says which version wrote it."""
import json
import os
import signal
import subprocess
import sys
import re
import textwrap
import time
import warnings

import numpy as np
import pytest

import rnshmc
from testkit import rng_seed

CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    import rnshmc
    model = rnshmc.models.Gaussian(np.zeros(50), covariance=np.eye(50))
    sampler = {sampler}
    sampler.sample(**{kwargs}, progress=False, checkpoint=sys.argv[1], checkpoint_every=500)
""")

RUNS = {
    "sampling": ("rnshmc.HMC(model, step_size=0.05, n_steps=50)",
                 dict(draws=8000, tune=100, chains=2, rng=rng_seed(4))),
    # training on the states: the trajectories of this exploration would be 240 MB a chain
    "exploration": ("rnshmc.RNSHMC(model, n_hidden=60, step_size=0.05, jitter=False, "
                    "explore=dict(n_steps=50), surrogate=dict(training_data='states'))",
                    dict(draws=200, tune=6000, chains=2, rng=rng_seed(5))),
}


def wait_for(predicate, timeout):
    start = time.time()
    while not predicate():
        if time.time() - start > timeout:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL is POSIX")
@pytest.mark.parametrize("phase", ["sampling", "exploration"])
def test_a_killed_run_resumes_to_the_uninterrupted_draws(phase, tmp_path):
    code, kwargs = RUNS[phase]
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(sampler=code, kwargs=kwargs))
    path = tmp_path / "run.npz"
    child = subprocess.Popen([sys.executable, str(script), str(path)], cwd=tmp_path)
    try:
        assert wait_for(path.exists, 60), "no checkpoint written"
        time.sleep(0.5)
        assert child.poll() is None, "the run ended before it could be killed"
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        child.kill()
    saved = dict(rnshmc.load(path))
    reached = [s["iteration"] for s in saved["states"]]
    where = [s["phases"][s["phase_index"]][0] for s in saved["states"]]
    assert any(w == ("sampling" if phase == "sampling" else "exploration") for w in where)
    assert min(reached) > 0
    model = rnshmc.models.Gaussian(np.zeros(50), covariance=np.eye(50))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        resumed = rnshmc.resume(path, progress=False)
        full = eval(code, {"rnshmc": rnshmc, "model": model}).sample(**kwargs, progress=False)
    np.testing.assert_array_equal(resumed.samples, full.samples)
    np.testing.assert_array_equal(resumed.accepted, full.accepted)
    np.testing.assert_array_equal(resumed.n_gradient_evals, full.n_gradient_evals)


def ctrl_c_at(evaluation, model, times=1, signum=signal.SIGINT):
    """``model`` as a Python target that sends this process a SIGINT (or ``signum``) at its
    ``evaluation``-th gradient, and at the ``times - 1`` next ones (a Ctrl-C at a known point
    of the run, not after a timer that a busy machine can delay past the run's end; a C model
    interrupted without the GIL is test_interrupt.py's). Its ``count`` attribute counts the
    evaluations; ``sent`` is when the signal went (time.monotonic())."""
    def logp_and_grad(q):
        target.count += 1
        if evaluation is not None and 0 <= target.count - evaluation < times:
            target.sent = time.monotonic()
            os.kill(os.getpid(), signum)
        return model.log_density_gradient(q)
    target = rnshmc.Target(None, logp_and_grad=logp_and_grad, dim=model.dim)
    target.count = 0
    return target


def test_ctrl_c_writes_a_checkpoint_that_resumes_exactly(tmp_path, capfd):
    """A Ctrl-C in a Python model's evaluation stops the chain after that transition (the
    evaluations go on to the trajectory's end), so the checkpoint resumes to the
    uninterrupted run's draws."""
    model = rnshmc.models.Gaussian(np.zeros(50), covariance=np.eye(50))
    kwargs = dict(draws=2000, tune=100, chains=1, rng=rng_seed(6))
    path = tmp_path / "run.npz"
    # 10 gradients a trajectory (not jittered: the trajectories end at evaluations 1 + 10 k,
    # whatever the seed), tune 100 of them; the SIGINT comes within one, at about draw 900
    interrupted = ctrl_c_at(10005, model)
    with pytest.warns(RuntimeWarning, match="interrupted"):
        partial = rnshmc.HMC(interrupted, step_size=0.05, n_steps=10, jitter=False).sample(
            **kwargs, progress=False, checkpoint=path, checkpoint_every=10**6, pool=None)
    assert "stopping every chain after its current transition" in capfd.readouterr().err
    assert partial.interrupted and 0 < partial.samples.shape[1] < 2000
    # the rest of the trajectory, and the checkpoint's check
    assert interrupted.count == 10011 + 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        resumed = rnshmc.resume(path, target=ctrl_c_at(None, model), progress=False)
        full = rnshmc.HMC(ctrl_c_at(None, model), step_size=0.05, n_steps=10,
                          jitter=False).sample(**kwargs, progress=False, pool=None)
    np.testing.assert_array_equal(resumed.samples, full.samples)
    np.testing.assert_array_equal(partial.samples, full.samples[:, :partial.samples.shape[1]])


@pytest.mark.skipif(sys.platform == "win32", reason="SIGTERM from a batch scheduler is POSIX")
def test_sigterm_saves_and_stops_as_a_ctrl_c(tmp_path, capfd):
    """A batch scheduler's SIGTERM: the run stops after the transition under way, writes its
    checkpoint and returns the draws so far within 2 s; the checkpoint resumes to the
    uninterrupted draws. Outside a run, SIGTERM's handler is Python's again."""
    model = rnshmc.models.Gaussian(np.zeros(50), covariance=np.eye(50))
    kwargs = dict(draws=2000, tune=100, chains=1, rng=rng_seed(6))
    path = tmp_path / "run.npz"
    terminated = ctrl_c_at(10005, model, signum=signal.SIGTERM)
    with pytest.warns(RuntimeWarning, match="interrupted"):
        partial = rnshmc.HMC(terminated, step_size=0.05, n_steps=10).sample(
            **kwargs, progress=False, checkpoint=path, checkpoint_every=10**6, pool=None)
    assert time.monotonic() - terminated.sent < 2.0
    assert "SIGTERM received" in capfd.readouterr().err
    assert partial.interrupted and 0 < partial.samples.shape[1] < 2000
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        resumed = rnshmc.resume(path, target=ctrl_c_at(None, model), progress=False)
        full = rnshmc.HMC(ctrl_c_at(None, model), step_size=0.05, n_steps=10).sample(
            **kwargs, progress=False, pool=None)
    np.testing.assert_array_equal(resumed.samples, full.samples)
    np.testing.assert_array_equal(partial.samples, full.samples[:, :partial.samples.shape[1]])


POOL_TARGET = textwrap.dedent("""
    import numpy as np
    import rnshmc

    def logp_and_grad(q):
        return -0.5 * float(q @ q), -q

    TARGET = rnshmc.Target(None, logp_and_grad=logp_and_grad, dim=20)
""")
POOL_CHILD = textwrap.dedent("""
    import sys
    import rnshmc
    from pool_target import TARGET
    rnshmc.HMC(TARGET, step_size=0.1, n_steps=20).sample(
        4000, tune=100, chains=2, rng=4, progress=False, checkpoint=sys.argv[1],
        checkpoint_every=200)
""")


@pytest.mark.skipif(sys.platform == "win32", reason="SIGTERM from a batch scheduler is POSIX")
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="a process pool needs two cores")
def test_sigterm_to_every_process_of_a_process_pool_run_saves_it(tmp_path):
    """SIGTERM to the whole process group (as a batch scheduler sends it) of a run on a
    process pool (a Python model: spawned workers): the workers ignore it, the parent stops
    the chains as at a Ctrl-C, writes the checkpoint and exits within 2 s. (In about half
    of the tries a worker died all the same, which is not understood; the pool's shutdown
    then hung on its pipe until the run ends its workers on the way out.) The checkpoint
    holds the uninterrupted run's draws up to the interruption and resumes to a complete
    run (as after a Ctrl-C on a process pool, the transition a worker's Python model was in
    is cut, so the draws after it are a valid continuation, not the same ones)."""
    (tmp_path / "pool_target.py").write_text(POOL_TARGET)
    (tmp_path / "run.py").write_text(POOL_CHILD)
    path = tmp_path / "run.npz"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(tmp_path), os.path.dirname(os.path.dirname(os.path.abspath(rnshmc.__file__)))]))
    child = subprocess.Popen([sys.executable, "run.py", str(path)], cwd=tmp_path, env=env,
                             start_new_session=True, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(path.exists, 120), "no checkpoint was written"
        sent = time.monotonic()
        os.killpg(child.pid, signal.SIGTERM)
        child.wait(timeout=30)
        assert time.monotonic() - sent < 2.0
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
    assert "SIGTERM received" in child.stderr.read()
    sys.path.insert(0, str(tmp_path))
    try:
        from pool_target import TARGET
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            saved = dict(rnshmc.load(path))
            drawn = min(s["iteration"] if s["phases"][s["phase_index"]][0] == "sampling"
                        else 0 for s in saved["states"])
            resumed = rnshmc.resume(path, target=TARGET, progress=False, pool=None)
            full = rnshmc.HMC(TARGET, step_size=0.1, n_steps=20).sample(
                4000, tune=100, chains=2, rng=4, progress=False, pool=None)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("pool_target", None)
    assert drawn > 0 and resumed.samples.shape == full.samples.shape
    np.testing.assert_array_equal(resumed.samples[:, :drawn], full.samples[:, :drawn])


def test_a_second_ctrl_c_stops_at_once(tmp_path):
    """Two SIGINTs within a trajectory: the evaluation under way is the last; the draws so
    far are returned and the checkpoint resumes (a valid continuation, though the cut
    transition's random draws are gone)."""
    model = rnshmc.models.Gaussian(np.zeros(5), covariance=np.eye(5))
    interrupted = ctrl_c_at(5005, model, times=2)  # (trajectories end at 1 + 10 k)
    path = tmp_path / "run.npz"
    with pytest.warns(RuntimeWarning, match="interrupted"):
        partial = rnshmc.HMC(interrupted, step_size=0.3, n_steps=10, jitter=False).sample(
            2000, tune=100, chains=1, rng=rng_seed(0), progress=False, checkpoint=path,
            pool=None)
    # (the evaluation under way is the last of the run, then the checkpoint's check of the model)
    assert interrupted.count == 5006 + 1 and partial.interrupted
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        resumed = rnshmc.resume(path, target=ctrl_c_at(None, model), progress=False)
    n = partial.samples.shape[1]
    assert resumed.samples.shape == (1, 2000, 5)
    np.testing.assert_array_equal(resumed.samples[:, :n], partial.samples)


def test_a_second_ctrl_c_during_the_checkpoints_model_check_loses_nothing(tmp_path):
    """The first SIGINT at a trajectory's last evaluation, the second while the checkpoint's
    first write asks the model for its target check (a costly model makes that a while): the
    checkpoint is written without the check, the draws are returned, and the run resumes (with
    a warning that the target cannot be checked) to the uninterrupted draws."""
    model = rnshmc.models.Gaussian(np.zeros(5), covariance=np.eye(5))
    interrupted = ctrl_c_at(5001, model, times=2)  # (trajectories end at 1 + 10 k)
    path = tmp_path / "run.npz"
    kwargs = dict(draws=2000, tune=100, chains=1, rng=rng_seed(0), pool=None)
    sampler = rnshmc.HMC(interrupted, step_size=0.3, n_steps=10, jitter=False)
    with pytest.warns(RuntimeWarning, match="interrupted"):
        partial = sampler.sample(**kwargs, progress=False, checkpoint=path)
    assert interrupted.count == 5002 and partial.interrupted
    assert 0 < partial.samples.shape[1] < 2000
    with pytest.warns(RuntimeWarning, match="no log density of the run's model"):
        resumed = rnshmc.resume(path, target=ctrl_c_at(None, model), progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        full = rnshmc.HMC(ctrl_c_at(None, model), step_size=0.3, n_steps=10,
                          jitter=False).sample(**kwargs, progress=False)
    np.testing.assert_array_equal(resumed.samples, full.samples)


@pytest.mark.parametrize("stop", [1, 130, 200, 201, 260])
def test_checkpoints_in_any_phase_resume_exactly(stop, tmp_path):
    """RNS-HMC with its default training data (every leapfrog step of the exploration,
    which a checkpoint cuts to the rows drawn and restores), stopped in the exploration, at
    its end, and in sampling."""
    from rnshmc.samplers.checkpoint import Checkpointer
    model = rnshmc.models.Gaussian(np.arange(3.0), covariance=np.eye(3))
    sampler = rnshmc.RNSHMC(model, n_hidden=40)
    kwargs = dict(draws=100, tune=200, chains=2, rng=rng_seed(8))
    full = sampler.sample(**kwargs, progress=False)
    states = sampler.run_states(sampler.init_states(**kwargs), progress=False, stop_after=stop)
    path = tmp_path / "run.npz"
    Checkpointer(path, sampler, dict(draws=100, checkpoint_every=1000)).write(states)
    resumed = rnshmc.resume(path, progress=False)
    np.testing.assert_array_equal(resumed.samples, full.samples)
    np.testing.assert_array_equal(resumed.n_gradient_evals, full.n_gradient_evals)


@pytest.fixture
def saved_run(tmp_path):
    model = rnshmc.models.Gaussian(np.zeros(3), covariance=np.eye(3))
    path = tmp_path / "run.npz"
    rnshmc.HMC(model, n_steps=3).sample(50, tune=50, rng=rng_seed(0), progress=False,
                                        checkpoint=path,
                                        checkpoint_every=20)
    return model, path


def test_corrupted_and_mismatched_checkpoints_are_refused(saved_run, tmp_path):
    model, path = saved_run
    before = path.read_bytes()
    with pytest.raises(ValueError, match="dimension"):
        rnshmc.resume(path, target=rnshmc.models.Gaussian(np.zeros(4), covariance=np.eye(4)))
    with pytest.raises(ValueError, match="not the run's model"):
        rnshmc.resume(path, target=rnshmc.models.Gaussian(np.ones(3), covariance=np.eye(3)))
    assert path.read_bytes() == before  # nothing overwritten
    broken = tmp_path / "broken.npz"
    broken.write_bytes(before[: len(before) // 2])
    with pytest.raises(ValueError, match="checkpoint"):
        rnshmc.resume(broken)
    assert broken.read_bytes() == before[: len(before) // 2]
    result = tmp_path / "result.npz"
    rnshmc.HMC(model, n_steps=3).sample(20, tune=20, rng=rng_seed(0), progress=False).save(result)
    with pytest.raises(ValueError, match="not an rnshmc checkpoint"):
        rnshmc.resume(result)


# ----------------------------------------------------------------------------------------------
# checkpoints of other versions of rnshmc: they load, or name the version that wrote them

def rewritten(path, out, edit):
    """A copy of the checkpoint ``path`` at ``out``, its metadata changed by ``edit(entries)``
    and its arrays as they were, written with NumPy: a file as another version of rnshmc
    could have written it."""
    with np.load(path) as npz:
        arrays = {key: npz[key] for key in npz.files}
    meta = json.loads(arrays["__meta__"].item())
    edit(meta["entries"])
    arrays["__meta__"] = np.array(json.dumps(meta))
    np.savez_compressed(out, **arrays)
    return out


def written_by(version):
    """An edit: the checkpoint written by rnshmc ``version`` (None: by one that did not
    record its version)."""
    def edit(entries):
        if version is None:
            del entries["rnshmc_version"]
        else:
            entries["rnshmc_version"] = {"value": version}
    return edit


@pytest.fixture
def stopped_run(tmp_path):
    """(the uninterrupted run's result, the checkpoint of the same run stopped in its
    sampling phase)."""
    from rnshmc.samplers.checkpoint import Checkpointer
    model = rnshmc.models.Gaussian(np.arange(3.0), covariance=np.eye(3) + 0.5)
    sampler = rnshmc.HMC(model, n_steps=3)
    kwargs = dict(draws=60, tune=40, chains=2, rng=rng_seed(9))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rnshmc.diagnostics.SamplingWarning)  # (60 draws)
        full = sampler.sample(**kwargs, progress=False, pool=None)
    states = sampler.run_states(sampler.init_states(**kwargs), progress=False, stop_after=70)
    path = tmp_path / "run.npz"
    Checkpointer(path, sampler, dict(draws=60, checkpoint_every=1000)).write(states)
    return full, path


def resumed_quietly(path, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rnshmc.diagnostics.SamplingWarning)
        return rnshmc.resume(path, progress=False, pool=None, **kwargs)


def test_a_checkpoint_records_the_version_that_wrote_it(stopped_run):
    _, path = stopped_run
    assert rnshmc.load(path)["rnshmc_version"] == rnshmc.__version__


@pytest.mark.parametrize("version", ["0.0.1", None])
def test_a_checkpoint_of_another_version_that_this_one_reads_resumes_exactly(
        version, stopped_run, tmp_path):
    """Another version's checkpoint in this layout, or one written before checkpoints
    recorded their version (whose Gaussian target was saved as its mean and precision, without
    a kind), resumes to the draws of the uninterrupted run, without being given the target."""
    full, path = stopped_run

    def edit(entries):
        written_by(version)(entries)
        if version is None:
            arguments = entries["arguments"]["dict"]
            arguments["target_spec"] = arguments["target_spec"]["dict"]["spec"]

    old = rewritten(path, tmp_path / "old.npz", edit)
    if version is None:
        assert "kind" not in rnshmc.load(old)["arguments"]["target_spec"]
    resumed = resumed_quietly(old)
    np.testing.assert_array_equal(resumed.samples, full.samples)
    np.testing.assert_array_equal(resumed.n_gradient_evals, full.n_gradient_evals)


@pytest.mark.parametrize("version, said", [
    ("0.0.1", r"written by rnshmc 0\.0\.1"),
    (None, "written by an rnshmc from before checkpoints recorded their version")])
def test_a_checkpoint_this_version_cannot_read_names_the_version_that_wrote_it(
        version, said, stopped_run, tmp_path):
    """Another layout, a sampler or a sampler's argument this version does not have: a
    ValueError naming the version that wrote the checkpoint and the one running, from
    resume() and from a warm start alike; the file is left as it was."""
    _, path = stopped_run
    running = r", and this is rnshmc " + re.escape(rnshmc.__version__)

    def layout(entries):
        entries["format"] = {"value": "rnshmc.Checkpoint/2"}

    def sampler(entries):
        entries["sampler"] = {"value": "HMCv0"}

    def argument(entries):  # (a setting of that version's HMC, which this one has not)
        entries["arguments"]["dict"]["leapfrog_steps"] = entries["arguments"]["dict"].pop(
            "n_steps")

    for edit, problem in ((layout, "its layout is 'rnshmc.Checkpoint/2'"),
                          (sampler, "its sampler 'HMCv0' is not one of this version's"),
                          (argument, "its sampler's arguments are refused .*leapfrog_steps")):
        old = rewritten(path, tmp_path / f"{edit.__name__}.npz",
                        lambda entries: (written_by(version)(entries), edit(entries)))
        before = old.read_bytes()
        with pytest.raises(ValueError, match=said + running + ".*" + problem):
            rnshmc.resume(old, progress=False)
        assert old.read_bytes() == before
    with pytest.raises(ValueError, match=said + running + ".*its layout"):
        rnshmc.HMC(rnshmc.models.Gaussian(np.arange(3.0), covariance=np.eye(3) + 0.5)).sample(
            10, warm_start=tmp_path / "layout.npz", progress=False)


def test_an_existing_checkpoint_is_not_overwritten(saved_run):
    model, path = saved_run
    before = path.read_bytes()
    with pytest.raises(FileExistsError, match="resume"):
        rnshmc.HMC(model).sample(10, tune=10, progress=False, checkpoint=path)
    assert path.read_bytes() == before


def test_samplers_that_cannot_checkpoint_say_so_before_sampling(tmp_path):
    target = rnshmc.Target(lambda q: -0.5 * q @ q, lambda q: -q, dim=2)
    with pytest.raises(ValueError, match="custom adaptation_rate"):
        rnshmc.ARNSHMC(target, adaptation_rate=lambda t: 1 / t).sample(
            10, tune=50, progress=False, checkpoint=tmp_path / "a")
    metric = lambda q: np.eye(2)
    with pytest.raises(ValueError, match="cannot checkpoint its argument metric"):
        rnshmc.RMHMC(target, metric=metric, metric_derivatives=lambda q: np.zeros((2, 2, 2)),
                     step_size=0.1).sample(10, tune=10, progress=False,
                                           checkpoint=tmp_path / "b")
    assert not os.listdir(tmp_path)


def test_resume_needs_the_target_of_a_user_model(tmp_path):
    target = rnshmc.Target(lambda q: -0.5 * q @ q, lambda q: -q, dim=2)
    path = tmp_path / "run.npz"
    rnshmc.HMC(target, n_steps=3).sample(30, tune=30, rng=rng_seed(1), progress=False,
                                         checkpoint=path,
                                         checkpoint_every=10)
    with pytest.raises(ValueError, match="give the run's target"):
        rnshmc.resume(path)
    again = rnshmc.resume(path, target=target, progress=False)
    assert again.samples.shape == (4, 30, 2)


class Isotropic:
    """A Python model that checkpoints rebuild: N(0, scale^2 I)."""

    def __init__(self, scale, dim):
        self.scale, self.dim = scale, dim

    def log_density(self, q):
        return -0.5 * float(q @ q) / self.scale**2

    def log_density_gradient(self, q):
        return self.log_density(q), -q / self.scale**2

    def checkpoint_spec(self):
        return dict(scale=self.scale, dim=self.dim)

    @classmethod
    def from_checkpoint_spec(cls, spec):
        return cls(float(spec["scale"]), int(spec["dim"]))


def test_a_model_that_registers_its_kind_is_rebuilt_by_resume(tmp_path, monkeypatch):
    """The checkpoints know no model: one that defines checkpoint_spec and
    from_checkpoint_spec and registers a kind is rebuilt by resume (to the uninterrupted
    draws); a kind no model registers asks for the target."""
    from rnshmc.samplers.checkpoint import Checkpointer
    from rnshmc.targets import rebuilt_from_checkpoints
    monkeypatch.setattr(rnshmc.targets, "CHECKPOINT_KINDS",
                        dict(rnshmc.targets.CHECKPOINT_KINDS))  # (registered for this test)
    model = rebuilt_from_checkpoints("isotropic")(Isotropic)(2.0, 3)
    sampler = rnshmc.HMC(model, n_steps=3)
    kwargs = dict(draws=40, tune=30, chains=2, rng=rng_seed(6))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rnshmc.diagnostics.SamplingWarning)  # (40 draws)
        full = sampler.sample(**kwargs, progress=False, pool=None)
        states = sampler.run_states(sampler.init_states(**kwargs), progress=False,
                                    stop_after=50)
        path = tmp_path / "run.npz"
        Checkpointer(path, sampler, dict(draws=40, checkpoint_every=1000)).write(states)
        resumed = rnshmc.resume(path, progress=False, pool=None)
    np.testing.assert_array_equal(resumed.samples, full.samples)
    del rnshmc.targets.CHECKPOINT_KINDS["isotropic"]
    with pytest.raises(ValueError, match=r"its model cannot be rebuilt \(no model rebuilt from "
                                         r"checkpoints is of kind 'isotropic'.*give the run's "
                                         r"target"):
        rnshmc.resume(path, progress=False, pool=None)


def test_l2hmc_checkpoint_keeps_weights_and_standardisation(tmp_path):
    from rnshmc.samplers.checkpoint import Checkpointer
    model = rnshmc.models.Gaussian(np.array([3.0, -1.0]), covariance=np.diag([4.0, 0.25]))
    l2 = rnshmc.L2HMC(model, n_steps=4,
                      standardize=(np.array([3.0, -1.0]), np.array([2.0, 0.5]))).initialize(
                          np.random.default_rng(rng_seed(2)))
    l2.train(5, chains=8, rng=rng_seed(0), progress=False)
    kwargs = dict(draws=150, tune=50, chains=2, rng=rng_seed(9))
    full = l2.sample(**kwargs, progress=False)
    states = l2.run_states(l2.init_states(**kwargs), progress=False, stop_after=120)
    path = tmp_path / "run.npz"
    Checkpointer(path, l2, dict(draws=150, checkpoint_every=1000)).write(states)
    resumed = rnshmc.resume(path, progress=False)
    np.testing.assert_array_equal(resumed.samples, full.samples)


def test_l2hmc_on_a_surrogate_checkpoints_and_resumes_exactly(tmp_path):
    """The surrogate (as arrays), the weights and the exploration's record are saved; the
    resumed run gives the uninterrupted draws and counts."""
    from rnshmc.samplers.checkpoint import Checkpointer
    model = rnshmc.models.Gaussian(np.array([1.0, -1.0, 0.5]), covariance=np.eye(3) + 0.3)
    l2 = rnshmc.L2HMC.with_surrogate(model, tune=100, rng=rng_seed(0), progress=False, n_steps=3,
                                     rns_options=dict(n_hidden=40))
    l2.train(5, chains=8, rng=rng_seed(1), progress=False)
    kwargs = dict(draws=120, tune=30, chains=2, rng=rng_seed(4))
    full = l2.sample(**kwargs, progress=False)
    states = l2.run_states(l2.init_states(**kwargs), progress=False, stop_after=70)
    path = tmp_path / "run.npz"
    Checkpointer(path, l2, dict(draws=120, checkpoint_every=1000)).write(states)
    resumed = rnshmc.resume(path, progress=False)
    np.testing.assert_array_equal(resumed.samples, full.samples)
    np.testing.assert_array_equal(resumed.n_density_evals, full.n_density_evals)
    assert resumed.n_density_evals_explore == full.n_density_evals_explore


@pytest.mark.parametrize("share", [False, True])
@pytest.mark.parametrize("stop", [150, 260, 420])
def test_arns_checkpoints_keep_the_online_estimator(share, stop, tmp_path):
    """ARNS-HMC's chains (their online estimator: weights, Theta, the normal equations and
    their pending rows; the install stream), stopped at the end of the exploration and
    during sampling, resume to the uninterrupted draws; with a shared estimator too."""
    from rnshmc.samplers.checkpoint import Checkpointer
    model = rnshmc.models.Gaussian(np.arange(3.0), covariance=np.eye(3) + 0.5)
    sampler = rnshmc.ARNSHMC(model, n_hidden=15, share_surrogate=share)
    kwargs = dict(draws=400, tune=150, chains=2, rng=rng_seed(3))
    full = sampler.sample(**kwargs, progress=False, pool=None)
    states = sampler.init_states(**kwargs)
    while True:  # as continue_run: join the chains whenever they all wait
        states = sampler.run_states(states, progress=False, stop_after=stop)
        if all(sampler.waiting(s) or s.done for s in states) and any(map(sampler.waiting, states)):
            sampler.join(states)
        else:
            break
    path = tmp_path / "run.npz"
    Checkpointer(path, sampler, dict(draws=400, checkpoint_every=1000)).write(states)
    resumed = rnshmc.resume(path, progress=False)
    np.testing.assert_array_equal(resumed.samples, full.samples)
    np.testing.assert_array_equal(resumed.installed, full.installed)
    np.testing.assert_array_equal(resumed.n_online_points, full.n_online_points)


@pytest.mark.parametrize("share", [False, True])
def test_arns_checkpoints_between_installs_change_no_draw(share, tmp_path):
    """Checkpoints every 37 iterations end segments between ARNS-HMC's installs: the draws
    are those of the run without them, bit for bit. (A chain's points once went to its
    estimator a segment at a time: the hidden units of other batches of rows differed in
    the last bits, and so did the weights installed next.)"""
    model = rnshmc.models.Gaussian(np.arange(3.0), covariance=np.eye(3) + 0.5)
    kwargs = dict(draws=400, tune=150, chains=2, progress=False, pool=None)
    for seed in map(rng_seed, range(4)):
        sampler = rnshmc.ARNSHMC(model, n_hidden=15, share_surrogate=share)
        plain = sampler.sample(**kwargs, rng=seed)
        path = tmp_path / f"run{seed}.npz"
        segmented = sampler.sample(**kwargs, rng=seed, checkpoint=path, checkpoint_every=37)
        np.testing.assert_array_equal(segmented.samples, plain.samples)
        np.testing.assert_array_equal(segmented.installed, plain.installed)
        np.testing.assert_array_equal(segmented.n_online_points, plain.n_online_points)


def test_a_failing_checkpoint_write_keeps_the_last_good_one_and_the_run_goes_on(
        tmp_path, monkeypatch):
    """The disk fills after the first checkpoint (a failing rename, as ENOSPC would make the
    write fail): the run ends with all its draws, warns once, lists the failures, and the
    checkpoint on disk is the first one, which resumes to the uninterrupted draws."""
    import errno
    from rnshmc.samplers import checkpoint as checkpoint_module
    model = rnshmc.models.Gaussian(np.zeros(3), covariance=np.eye(3))
    kwargs = dict(draws=300, tune=100, chains=2, rng=rng_seed(3), progress=False, pool=None)
    full = rnshmc.HMC(model, n_steps=3).sample(**kwargs)
    path = tmp_path / "run.npz"
    replace, calls = os.replace, []

    def fills_up(source, target):
        calls.append(target)
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        replace(source, target)

    monkeypatch.setattr(checkpoint_module.os, "replace", fills_up)
    with pytest.warns(RuntimeWarning, match="checkpoint .* failed .*No space left.*iteration 100"
                                            ) as caught:
        result = rnshmc.HMC(model, n_steps=3).sample(**kwargs, checkpoint=path,
                                                     checkpoint_every=100)
    assert sum("checkpoint" in str(w.message) for w in caught) == 1
    np.testing.assert_array_equal(result.samples, full.samples)
    assert [f[0] for f in result["checkpoint_failures"]] == [200, 300, 400]
    assert not list(tmp_path.glob("*.partial.npz")) and not (tmp_path / "run.npz.lock").exists()
    monkeypatch.setattr(checkpoint_module.os, "replace", replace)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        resumed = rnshmc.resume(path, progress=False, pool=None)  # (from iteration 100)
    np.testing.assert_array_equal(resumed.samples, full.samples)


@pytest.mark.filterwarnings("ignore::rnshmc.diagnostics.SamplingWarning")  # (10 draws)
def test_two_runs_on_one_checkpoint_path_the_second_refuses(tmp_path):
    """A run holds a lock beside its checkpoint: a second sample() or resume() on that path
    refuses while the first runs; a lock left by a dead process is taken over."""
    from rnshmc.samplers.checkpoint import Checkpointer
    model = rnshmc.models.Gaussian(np.zeros(2), covariance=np.eye(2))
    sampler = rnshmc.HMC(model, n_steps=3)
    path = tmp_path / "run.npz"
    first = Checkpointer(path, sampler, dict(draws=10, checkpoint_every=10))
    first.acquire()  # (a run under way in this process)
    with pytest.raises(FileExistsError, match="in use by another run"):
        sampler.sample(10, tune=10, chains=1, rng=rng_seed(0), progress=False, checkpoint=path)
    first.release()
    sampler.sample(10, tune=10, chains=1, rng=rng_seed(0), progress=False, checkpoint=path,
                   checkpoint_every=5, pool=None)
    first.acquire()
    with pytest.raises(FileExistsError, match="in use by another run"):
        rnshmc.resume(path, progress=False)
    first.release()
    # a dead process's lock
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    import socket
    (tmp_path / "run.npz.lock").write_text(f"{int(gone.stdout)} {socket.gethostname()}")
    rnshmc.resume(path, progress=False, pool=None)
    assert not (tmp_path / "run.npz.lock").exists()
