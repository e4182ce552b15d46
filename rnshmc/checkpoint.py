"""ChainState: everything that makes one chain continue, as plain arrays and numbers.

A chain driven by :mod:`rnshmc.samplers.driver` keeps all of its state here between C calls:
where it is in its plan of phases, the C chain's state (position, cached potentials and
gradient, step size, dual-averaging and running-variance accumulators, evaluation counters),
the inverse mass matrix, its random stream (bit-generator state and seed sequence), the
outputs drawn so far and whatever the sampler needs (a fitted surrogate). Continuing a state,
in this process or after ``save`` and ``load``, gives the draws of the uninterrupted run bit for
bit.
"""
import json

import numpy as np

from .results import SampleResult, load as _load_tree

__all__ = ["ChainState"]

_FIELDS = ("sampler", "chain", "dim", "phases", "phase_index", "iteration", "phase_started",
           "rng", "init", "kernel", "inverse_mass", "outputs", "evals", "timings", "extras")


def generator_to_json(generator):
    """The complete state of a ``numpy.random.Generator`` as a JSON string (its bit generator's
    state and its seed sequence, so ``spawn`` continues as well)."""
    bit_generator = generator.bit_generator
    seq = bit_generator.seed_seq
    seed = None
    if isinstance(seq, np.random.SeedSequence):
        # plain ints for JSON (a NumPy integer or array of integers is a valid seed too)
        entropy = None if seq.entropy is None else np.asarray(seq.entropy, dtype=object)
        entropy = None if entropy is None else (int(entropy) if entropy.ndim == 0
                                                else [int(x) for x in entropy.ravel()])
        seed = dict(entropy=entropy, spawn_key=[int(k) for k in seq.spawn_key],
                    pool_size=int(seq.pool_size), n_children_spawned=int(seq.n_children_spawned))
    return json.dumps(dict(state=bit_generator.state, seed_sequence=seed))


def generator_from_json(text):
    """Inverse of :func:`generator_to_json`."""
    saved = json.loads(text)
    name = saved["state"]["bit_generator"]
    bit_generator_class = getattr(np.random, name, None)
    if not (isinstance(bit_generator_class, type)
            and issubclass(bit_generator_class, np.random.BitGenerator)):
        raise ValueError(f"unknown bit generator {name!r}")
    seed = saved["seed_sequence"]
    if seed is not None:
        seq = np.random.SeedSequence(seed["entropy"], spawn_key=tuple(seed["spawn_key"]),
                                     pool_size=seed["pool_size"],
                                     n_children_spawned=seed["n_children_spawned"])
        bit_generator = bit_generator_class(seq)
    else:
        bit_generator = bit_generator_class()
    bit_generator.state = saved["state"]
    return np.random.Generator(bit_generator)


class ChainState:
    """One chain's complete state (see the module docstring).

    Attributes
    ----------
    sampler : str
        Name of the sampler that made it.
    chain : int
        Index of the chain.
    dim : int
    phases : list of [str, int]
        The plan: (phase name, iterations) in order.
    phase_index, iteration : int
        The phase under way and the iterations done in it.
    phase_started : bool
        Whether the phase's one-time start (e.g. the initial step-size search) is done.
    rng : str
        The chain's random stream (JSON; see :func:`generator_to_json`).
    init : ndarray of shape (dim,)
        The initial point.
    kernel : dict or None
        The C chain's state (``Chain.get_state``); None before the first phase starts.
    inverse_mass : None or ndarray
        The inverse mass matrix in use.
    outputs : dict
        Per phase, the arrays kept ("samples", "records", "gradients"), with one row per
        iteration of the phase (rows past ``iteration`` not yet drawn).
    evals : dict
        Per phase, [density evaluations, gradient evaluations] of its dynamics/test targets.
    timings : dict
        Seconds per phase.
    extras : dict
        The sampler's own (a fitted surrogate's arrays, a chosen trajectory length).
    """

    def __init__(self, **fields):
        missing = set(_FIELDS) - set(fields)
        unknown = set(fields) - set(_FIELDS)
        if missing or unknown:
            raise TypeError(f"ChainState fields missing {sorted(missing)}, unknown {sorted(unknown)}")
        for name in _FIELDS:
            setattr(self, name, fields[name])

    @property
    def done(self):
        """Whether every phase of the plan has run."""
        return self.phase_index >= len(self.phases)

    @property
    def phase(self):
        """Name of the phase under way (None when done)."""
        return None if self.done else self.phases[self.phase_index][0]

    def iterations_left(self):
        """Iterations still to run over the rest of the plan."""
        if self.done:
            return 0
        rest = sum(n for _, n in self.phases[self.phase_index:])
        return rest - self.iteration

    def copy(self):
        """A deep copy (arrays copied)."""
        return ChainState.from_dict(_copy_tree(self.to_dict()))

    def to_dict(self):
        return {name: getattr(self, name) for name in _FIELDS}

    @classmethod
    def from_dict(cls, fields):
        return cls(**fields)

    def save(self, path):
        """Write to a ``.npz`` file readable without pickle (see :meth:`load`)."""
        tree = self.to_dict()
        tree["phases"] = [list(p) for p in self.phases]
        SampleResult(format="rnshmc.ChainState", **tree).save(path)

    @classmethod
    def load(cls, path):
        """Read a state written by :meth:`save`.

        Raises
        ------
        ValueError
            If the file does not hold a ChainState.
        """
        tree = dict(_load_tree(path))
        if tree.pop("format", None) != "rnshmc.ChainState":
            raise ValueError(f"{path!r} does not hold an rnshmc ChainState")
        tree["phases"] = [[str(name), int(n)] for name, n in tree["phases"]]
        try:
            return cls(**tree)
        except TypeError as error:
            raise ValueError(f"{path!r}: malformed ChainState ({error})") from None

    def __repr__(self):
        return (f"ChainState(sampler={self.sampler!r}, chain={self.chain}, phase={self.phase!r}, "
                f"iteration={self.iteration}, left={self.iterations_left()})")


def _copy_tree(value):
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, dict):
        return {k: _copy_tree(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_copy_tree(v) for v in value)
    return value


# ---------------------------------------------------------------------------------------------
# checkpoints of whole runs

_CHECKPOINT_FORMAT = "rnshmc.Checkpoint"


def checkpoint_interval(every):
    """``sample()``'s ``checkpoint_every`` as a run's entry: {"checkpoint_every": iterations}
    for an int, {"checkpoint_seconds": seconds} for a duration ("90s", "10min", "2h", "1.5h"
    or a ``datetime.timedelta``).

    Raises
    ------
    ValueError
        For anything else, or a duration or count that is not positive.
    """
    import datetime
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
        from .validation import check_integer
        return {"checkpoint_every": check_integer(every, "checkpoint_every", minimum=1)}
    if not seconds > 0 or not np.isfinite(seconds):
        raise ValueError(f"checkpoint_every must be a positive duration, got {every!r}")
    return {"checkpoint_seconds": float(seconds)}


def write_checkpoint(path, sampler, states, run):
    """Write every chain's state, the sampler's configuration and the run's arguments to
    ``path`` atomically (a temporary file beside it, flushed to disk, then renamed over it):
    a reader sees the previous checkpoint or this one, never a part. ``.npz`` without
    pickle."""
    import os
    tree = SampleResult(format=_CHECKPOINT_FORMAT, sampler=type(sampler).__name__,
                        arguments=sampler.checkpoint_arguments(), run=dict(run),
                        states=[_state_tree(state, sampler) for state in states],
                        target_check=_target_check(sampler.target, states[0]))
    path = os.fspath(path)
    temporary = f"{path}.partial.npz"  # the .npz suffix keeps numpy from adding one
    try:
        with open(temporary, "wb") as f:
            tree.save(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    finally:  # interrupted while writing: the previous checkpoint stands
        if os.path.exists(temporary):
            os.remove(temporary)


def _state_tree(state, sampler):
    """A state for a checkpoint: the phase under way's outputs cut to the rows drawn (their
    full lengths kept in ``rows``: restored by :func:`_state_from_tree`), the sampler's
    objects in its extras as arrays (``sampler.extras_to_save``)."""
    tree = state.to_dict()
    tree["extras"] = sampler.extras_to_save(tree["extras"])
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


def _state_from_tree(tree):
    tree = dict(tree)
    rows = tree.pop("rows", {}) or {}
    tree["phases"] = [[str(name), int(n)] for name, n in tree["phases"]]
    state = ChainState(**tree)
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
    from .targets import as_ctarget
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
        saved without pickle); a built-in :class:`rnshmc.models.Gaussian` is rebuilt when
        not given.
    progress, pool
        As for ``sample()``.

    Returns
    -------
    SampleResult

    Raises
    ------
    ValueError
        If the file is not a readable checkpoint, or ``target`` is not the run's model (its
        dimension, or its log density at the run's first starting point, differs). Nothing
        is written then.
    """
    from . import samplers
    from .results import load as load_tree
    try:
        tree = dict(load_tree(path))
    except Exception as error:  # noqa: BLE001 - any unreadable file is reported the same way
        raise ValueError(f"{path}: not a readable rnshmc checkpoint ({error})") from None
    if tree.get("format") != _CHECKPOINT_FORMAT:
        raise ValueError(f"{path}: not an rnshmc checkpoint")
    try:
        cls = getattr(samplers, tree["sampler"])
        states = [_state_from_tree(s) for s in tree["states"]]
        for state in states:
            state.extras = cls.extras_restored(state.extras)
        arguments, run = dict(tree["arguments"]), dict(tree["run"])
        point, log_density = tree["target_check"]
    except (KeyError, TypeError, AttributeError, ValueError) as error:
        raise ValueError(f"{path}: malformed rnshmc checkpoint ({error!r})") from None
    if target is None:
        target = _rebuilt_target(arguments.pop("target_spec", None), path)
    arguments.pop("target_spec", None)
    from .targets import target_dim
    if hasattr(target, "dim") and target_dim(target) != states[0].dim:
        raise ValueError(f"{path}: the run's model has dimension {states[0].dim}, the target "
                         f"given {target_dim(target)}")
    sampler = cls.from_checkpoint_arguments(target, arguments)
    check = _target_check(target, states[0])[1]
    if not np.isclose(check, float(log_density), rtol=1e-10, atol=1e-12):
        raise ValueError(f"{path}: the target is not the run's model (log density "
                         f"{check!r} at the run's starting point, the run's {float(log_density)!r})")
    return sampler.continue_run(states, run, progress=progress, pool=pool, checkpoint=path)


def _rebuilt_target(spec, path):
    from . import models
    if spec is None:
        raise ValueError(f"{path}: give the run's target to resume (a checkpoint holds the "
                         "model only for built-in Gaussians)")
    return models.Gaussian(spec["mean"], precision=spec["precision"])
