"""Checkpoints of whole runs: write them atomically, resume them bit for bit.

A checkpoint (``.npz`` without pickle) holds every chain's :class:`~rnshmc.state.ChainState`
(the phase under way's outputs cut to the rows drawn), the sampler's class and the arguments
it was made with (with, for a model that checkpoints rebuild, its kind and spec: see
:func:`rnshmc.targets.rebuilt_from_checkpoints`), the run's arguments, a point with its log
density that the resumed run's target must reproduce, its layout (``format``) and the rnshmc
version that wrote it (``rnshmc_version``). Samplers register here (by class name) when they
are defined, so :func:`resume` finds the class of a saved run without importing the samplers.

A checkpoint written by another version of rnshmc is read if it can be; where it cannot (its
layout, its sampler or its arguments are not this version's), the ValueError names the version
that wrote it and the one running. A file without ``rnshmc_version`` was written before
checkpoints recorded it.
"""
import datetime
import os
import socket
import warnings

import numpy as np

from ..results import SampleResult, load as load_tree
from ..state import ChainState
from ..targets import as_ctarget, target_dim, target_from_spec
from ..validation import check_integer, user_stacklevel
from ..versions import __version__

__all__ = ["Checkpointer", "checkpoint_interval", "resume", "SAMPLERS"]

_CHECKPOINT_FORMAT = "rnshmc.Checkpoint/3"  # (the layout; another layout is not read)

# sampler classes by name (filled by rnshmc.samplers._base.Sampler.__init_subclass__)
SAMPLERS = {}

# the lock files this process's runs hold (see Checkpointer._holder)
_HELD_LOCKS = set()


def checkpoint_interval(every):
    """``sample()``'s ``checkpoint_every`` as (iterations, seconds), one of them None.

    Parameters
    ----------
    every : int, str or datetime.timedelta
        Iterations per chain, or a duration ("90s", "10min", "2h", "1.5h", a timedelta).

    Returns
    -------
    (int or None, float or None)

    Raises
    ------
    ValueError
        For anything else, or a duration or count that is not positive.
    """
    if isinstance(every, datetime.timedelta):
        seconds = every.total_seconds()
    elif isinstance(every, str):
        units = {"s": 1.0, "min": 60.0, "h": 3600.0}
        number = every.strip().rstrip("".join(sorted(set("".join(units)))))
        unit = every.strip()[len(number):]
        try:
            seconds = float(number) * units[unit]
        except (KeyError, ValueError):
            raise ValueError(f"checkpoint_every must be an int (iterations) or a duration such "
                             f"as '90s', '10min' or '2h', got {every!r}") from None
    else:
        return check_integer(every, "checkpoint_every", minimum=1), None
    if not seconds > 0 or not np.isfinite(seconds):
        raise ValueError(f"checkpoint_every must be a positive duration, got {every!r}")
    return None, float(seconds)


class Checkpointer:
    """Writes a run's checkpoints to ``path``.

    While a run holds it (:meth:`acquire` to :meth:`release`), a lock file ``path + ".lock"``
    (this process's id and host) makes a second run pointed at the same path refuse to start,
    instead of the two overwriting each other's checkpoints. A lock left by a process that has
    died (same host, no such process) is taken over.

    A write that fails (a read-only folder, a full disk) leaves the previous checkpoint as it
    was: the run goes on, with one warning naming the error, and its result lists the
    failures (``checkpoint_failures``).

    Parameters
    ----------
    path : str or path-like
    sampler : rnshmc.samplers._base.Sampler
    run : dict
        The run's arguments (``draws``, ``checkpoint_every`` or ``checkpoint_seconds``).
    target_check : (point, log density) or None
        A check already verified (a resumed run's: see :meth:`target_check`); None: the first
        write evaluates the model for one.
    """

    def __init__(self, path, sampler, run, target_check=None):
        self.path, self.sampler, self.run = os.fspath(path), sampler, dict(run)
        self.every = run.get("checkpoint_every")
        self.seconds = run.get("checkpoint_seconds")
        self.failures = []     # (iteration of the slowest chain, error) of each failed write
        self.written_at = None  # the slowest chain's iteration at the last good write
        self._locked = False
        # the target check (see target_check): one model evaluation, kept once it is finite
        self._check = None
        if target_check is not None and np.isfinite(target_check[1]):
            self._check = [np.array(target_check[0], dtype=np.float64), float(target_check[1])]

    @property
    def lock_path(self):
        return f"{self.path}.lock"

    def acquire(self):
        """Take the checkpoint's lock for this run.

        Raises
        ------
        FileExistsError
            If another live process holds it.
        """
        owner = f"{os.getpid()} {socket.gethostname()}"
        for _ in range(2):
            try:
                descriptor = os.open(self.lock_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                holder = self._holder()
                if holder is not None:
                    raise FileExistsError(
                        f"{self.path} is in use by another run (process {holder}, lock file "
                        f"{self.lock_path}): two runs writing one checkpoint would overwrite "
                        "each other's; wait for it, or remove the lock file if that run is "
                        "gone") from None
                os.remove(self.lock_path)  # (a dead process's lock)
                continue
            with os.fdopen(descriptor, "w") as f:
                f.write(owner)
            self._locked = True
            _HELD_LOCKS.add(self.lock_path)
            return
        raise FileExistsError(f"{self.lock_path}: cannot take the checkpoint's lock")

    def _holder(self):
        """The live process holding the lock ("pid host"), or None if its holder is gone."""
        try:
            with open(self.lock_path) as f:
                pid, host = f.read().split(maxsplit=1)
            pid = int(pid)
        except (OSError, ValueError):
            return "unknown"  # (being written, or not ours: do not take it)
        if host.strip() != socket.gethostname():
            return f"{pid} on {host.strip()}"  # (another machine's: cannot tell if it lives)
        if pid == os.getpid():
            # this process's lock is live only while a Checkpointer holds it: one left behind
            # (its release could not remove it, e.g. on a folder that became read-only) would
            # otherwise refuse every later run on this path in this process
            return f"{pid} (this process)" if self.lock_path in _HELD_LOCKS else None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass  # (alive, another user's)
        return str(pid)

    def release(self):
        """Give the lock back (at the end of the run, whatever the outcome)."""
        if self._locked:
            self._locked = False
            _HELD_LOCKS.discard(self.lock_path)
            try:
                os.remove(self.lock_path)
            except FileNotFoundError:
                pass
            except OSError as error:
                # (a folder that became read-only, or its disk gone): the run's result must
                # not be lost for its lock file, which a later run takes over (its process
                # is gone, or in this process, no longer holds it: see _holder)
                warnings.warn(f"{self.sampler.name}: could not remove the checkpoint's lock "
                              f"file {self.lock_path} ({type(error).__name__}: {error}); a "
                              "later run on this path takes it over", RuntimeWarning,
                              stacklevel=user_stacklevel())

    def target_check(self, state, ask_model=True):
        """(point, log density there) that a resumed run's target must reproduce: the first
        chain's starting point, the same for the whole run.

        It costs one model evaluation, made at the first write and kept once it is finite (a
        write does not evaluate the model again). With ``ask_model=False`` (the checkpoint
        of a run that failed, maybe in its model: a model that hangs or has gone would fail
        again, or make the run wait another timeout, and hide the first error) nothing is
        evaluated and, before any check is known, its log density is NaN: :func:`resume`
        then cannot check the target and says so.
        """
        if self._check is not None:
            return self._check
        if not ask_model:
            return [np.array(state.init, dtype=np.float64), np.nan]
        check = _target_check(self.sampler.target, state)
        if np.isfinite(check[1]):  # (a model answering NaN for now is asked again next time)
            self._check = check
        return check

    def write(self, states, rule=None, ask_model=True):
        """Write every chain's state, the sampler's configuration and the run's arguments
        atomically (a temporary file beside the checkpoint, flushed to disk, then renamed over
        it): a reader sees the previous checkpoint or this one, never a part. With the run's
        stopping ``rule``, the seconds it has used so far are kept (for ``max_time``).
        ``ask_model``: see :meth:`target_check` (False at a failure)."""
        sampler = self.sampler
        if rule is not None:
            self.run["elapsed"] = rule.seconds_used()
        tree = SampleResult(format=_CHECKPOINT_FORMAT, rnshmc_version=__version__,
                            sampler=type(sampler).__name__,
                            arguments=sampler.checkpoint_arguments(), run=self.run,
                            states=[_state_tree(state) for state in states],
                            target_check=self.target_check(states[0], ask_model))
        temporary = f"{self.path}.partial.npz"  # the .npz suffix keeps numpy from adding one
        iteration = min(state.iterations_done() for state in states)
        try:
            with open(temporary, "wb") as f:
                tree.save(f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(temporary, self.path)
            self.written_at = iteration
        except OSError as error:  # the previous checkpoint stands; the run goes on
            self.failures.append((iteration, f"{type(error).__name__}: {error}"))
            if len(self.failures) == 1:
                before = ("the previous checkpoint (at iteration "
                          f"{self.written_at}) is intact" if self.written_at is not None
                          else "no checkpoint has been written yet")
                warnings.warn(f"{self.sampler.name}: writing the checkpoint {self.path} "
                              f"failed ({type(error).__name__}: {error}); {before}. The run "
                              "goes on and keeps trying at each checkpoint; its result lists "
                              "the failures (checkpoint_failures).", RuntimeWarning,
                              stacklevel=user_stacklevel())
        finally:  # interrupted or failed while writing: the previous checkpoint stands
            try:
                os.remove(temporary)
            except OSError:
                pass


def _state_tree(state):
    """A state for a checkpoint: the phase under way's outputs cut to the rows drawn (their
    full lengths kept in ``rows``: restored by :func:`_state_from_tree`)."""
    tree = state.to_dict()
    tree["phases"] = [list(p) for p in state.phases]
    tree["rows"] = {}
    if not state.done:
        name, n_iter = state.phases[state.phase_index]
        outputs = dict(state.outputs.get(name, {}))
        for key, value in outputs.items():
            if not isinstance(value, np.ndarray) or value.ndim == 0:
                continue
            if key == "trajectory":  # n_iter x n_steps rows, filled up to the last end
                used = int(outputs["trajectory_ends"][state.iteration - 1]) if state.iteration else 0
            elif value.shape[0] == n_iter:
                used = state.iteration
            else:
                continue
            tree["rows"][key] = value.shape[0]
            outputs[key] = value[:used]
        tree["outputs"] = dict(state.outputs, **{name: outputs})
    return tree


def read_checkpoint(path):
    """(the checkpoint's tree, its chains' states).

    Raises
    ------
    ValueError
        If the file is not a readable rnshmc checkpoint; for one written by another version
        of rnshmc that this one cannot read, naming both versions (see :func:`unreadable`).
    """
    try:
        tree = dict(load_tree(path))
    except Exception as error:  # noqa: BLE001 - any unreadable file is reported the same way
        raise ValueError(f"{path}: not a readable rnshmc checkpoint ({error})") from None
    layout = tree.get("format")
    if not (isinstance(layout, str) and layout.startswith("rnshmc.Checkpoint/")):
        raise ValueError(f"{path}: not an rnshmc checkpoint")
    if layout != _CHECKPOINT_FORMAT:
        raise unreadable(path, tree, f"its layout is {layout!r}, this version reads "
                                     f"{_CHECKPOINT_FORMAT!r}")
    try:
        return tree, [_state_from_tree(s) for s in tree["states"]]
    except (KeyError, TypeError, AttributeError, ValueError) as error:
        raise unreadable(path, tree, f"its chains' states cannot be read ({error!r})") from None


def written_by(tree):
    """The rnshmc that wrote a checkpoint's ``tree``, in words (a file without
    ``rnshmc_version`` was written before checkpoints recorded it)."""
    version = tree.get("rnshmc_version")
    return (f"rnshmc {version}" if isinstance(version, str) else
            "an rnshmc from before checkpoints recorded their version")


def unreadable(path, tree, problem):
    """The ValueError for a checkpoint this version cannot use because of ``problem``: for
    one written by another version (or by one that did not record it), naming the version
    that wrote it and this one; else a malformed checkpoint."""
    if tree.get("rnshmc_version") == __version__:
        return ValueError(f"{path}: malformed rnshmc checkpoint: {problem}")
    return ValueError(f"{path}: this checkpoint was written by {written_by(tree)}, and this is "
                      f"rnshmc {__version__}, which cannot use it: {problem}. Continue it with "
                      "the version that wrote it, or start a new run")


def checkpoint_states(path):
    """The chains' states saved in the checkpoint ``path`` (a warm start's)."""
    return read_checkpoint(path)[1]


def _state_from_tree(tree):
    tree = dict(tree)
    rows = tree.pop("rows", {}) or {}
    tree["phases"] = [[str(name), int(n)] for name, n in tree["phases"]]
    state = ChainState.from_dict(tree)
    if rows:
        name = state.phases[state.phase_index][0]
        outputs = state.outputs[name]
        for key, n in rows.items():
            value = outputs[key]
            full = np.zeros((int(n),) + value.shape[1:], dtype=value.dtype)
            full[:value.shape[0]] = value
            outputs[key] = full
    return state


def _target_check(target, state):
    """(point, log density there) that a resumed run's target must reproduce."""
    point = np.array(state.init, dtype=np.float64)
    return [point, -float(as_ctarget(target, state.dim).eval_potential(point))]


def resume(path, target=None, progress=True, pool="auto"):
    """Continue the run saved in the checkpoint ``path`` to its end.

    The draws equal those of the uninterrupted ``sample()`` call bit for bit (for a run
    stopped between transitions: a checkpoint written every ``checkpoint_every``
    iterations, at a Ctrl-C of a C-level model, or at a failure in another chain), and the
    result holds all of them. The run goes on writing checkpoints to ``path``.

    Parameters
    ----------
    path : str or path-like
    target : the model
        The run's target. A checkpoint does not hold the model (a Python function cannot be
        saved without pickle); a model that checkpoints rebuild (a built-in
        :class:`rnshmc.models.Gaussian`: see :func:`rnshmc.targets.rebuilt_from_checkpoints`)
        is rebuilt when not given.
    progress, pool
        As for ``sample()``.

    Returns
    -------
    SampleResult

    Raises
    ------
    ValueError
        If the file is not a readable checkpoint, or ``target`` is not the run's model (its
        dimension, or its log density at the run's first starting point, differs). For a
        checkpoint of another version of rnshmc that this one cannot continue (its layout,
        sampler or arguments differ), the message names the version that wrote it and this
        one. Nothing is written then.

    Warns
    -----
    RuntimeWarning
        If the checkpoint holds no log density to check ``target`` against (one written
        when the model failed before the run's first checkpoint).
    """
    tree, states = read_checkpoint(path)
    try:
        arguments, run = dict(tree["arguments"]), dict(tree["run"])
        point, log_density = tree["target_check"]
        name = tree["sampler"]
    except (KeyError, TypeError, AttributeError, ValueError) as error:
        raise unreadable(path, tree, f"{error!r}") from None
    if name not in SAMPLERS:
        raise unreadable(path, tree, f"its sampler {name!r} is not one of this version's")
    spec = arguments.pop("target_spec", None)
    if target is None:
        if spec is None:
            raise ValueError(f"{path}: give the run's target to resume (a checkpoint holds "
                             "the model only for models it rebuilds, such as built-in "
                             "Gaussians)")
        if "kind" not in spec:  # (written before models named their kind: only Gaussians were
            spec = {"kind": "Gaussian", "spec": spec}  # saved, as their mean and precision)
        try:
            target = target_from_spec(spec)
        except (KeyError, TypeError, ValueError) as error:
            problem = f"its model cannot be rebuilt ({error}): give the run's target"
            if tree.get("rnshmc_version") == __version__:
                raise ValueError(f"{path}: {problem}") from None
            raise unreadable(path, tree, problem) from None
    if hasattr(target, "dim") and target_dim(target) != states[0].dim:
        raise ValueError(f"{path}: the run's model has dimension {states[0].dim}, the target "
                         f"given {target_dim(target)}")
    try:
        sampler = SAMPLERS[name].from_checkpoint_arguments(target, arguments)
    except (TypeError, ValueError) as error:
        if tree.get("rnshmc_version") == __version__:
            raise
        raise unreadable(path, tree, f"its sampler's arguments are refused ({error})") from error
    check = _target_check(target, states[0])[1]
    if not np.isfinite(float(log_density)):
        # written at a failure before any check was known, or while the model answered
        # NaN (see Checkpointer.target_check): refusing would make the checkpoint useless
        warnings.warn(f"{path}: the checkpoint holds no log density of the run's model at "
                      "its starting point (the model had failed, or answered "
                      f"{float(log_density)}, when it was written): the target given is not "
                      "checked; make sure it is the run's model", RuntimeWarning,
                      stacklevel=user_stacklevel())
    elif not np.isclose(check, float(log_density), rtol=1e-10, atol=1e-12):
        raise ValueError(f"{path}: the target is not the run's model (log density "
                         f"{check!r} at the run's starting point, the run's {float(log_density)!r})")
    # (the check holds: the resumed run's checkpoints keep it, even one written when its
    # model fails before it has written another, see Checkpointer.target_check)
    checkpointer = Checkpointer(path, sampler, run, target_check=(point, float(log_density)))
    return sampler.continue_run(states, run, progress=progress, pool=pool,
                                checkpointer=checkpointer)
