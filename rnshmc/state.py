"""ChainState: everything that makes one chain continue, as plain arrays and numbers.

A chain run by :mod:`rnshmc.samplers` keeps all of its state here between C calls: where it
is in its plan of phases, the C chain's state (position, cached potentials and gradient, step
size, dual-averaging and running-variance accumulators, evaluation counters), the inverse
mass matrix, its random stream (bit-generator state and seed sequence), the outputs drawn so
far and the typed states of the sampler's parts (a fitted surrogate, the trust watch, the
online estimator). Continuing a state, in this process or after ``save`` and ``load``, gives
the draws of the uninterrupted run bit for bit.

A low floor: this module imports nothing of the samplers (their part states register
themselves here by subclassing :class:`PartState`).
"""
import dataclasses
import json

import numpy as np

from ._kernels._chain import TRANSITION
from .results import SampleResult, load as _load_tree

__all__ = ["ChainState", "PartState", "generator_to_json", "generator_from_json"]

_FIELDS = ("sampler", "chain", "dim", "phases", "phase_index", "iteration", "phase_started",
           "rng", "init", "kernel", "inverse_mass", "outputs", "evals", "timings", "parts")


def generator_to_json(generator):
    """The complete state of a ``numpy.random.Generator`` as a JSON string (its bit generator's
    state and its seed sequence, so ``spawn`` continues as well).

    Parameters
    ----------
    generator : numpy.random.Generator

    Returns
    -------
    str
    """
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
    """Inverse of :func:`generator_to_json`.

    Parameters
    ----------
    text : str

    Returns
    -------
    numpy.random.Generator
    """
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


class PartState:
    """Base of the typed chain state of a sampler's part (a dataclass).

    Fields hold numbers, strings, None, arrays and lists or dicts of them, which a checkpoint
    saves without pickle; a part whose state holds an object (a fitted estimator, a random
    stream) overrides :meth:`to_tree` and :meth:`from_tree`. Subclasses register themselves
    by class name, so a saved state finds its class again.
    """

    _registry = {}
    # its key in ``ChainState.parts`` (each part's class constant)
    KEY = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        PartState._registry[cls.__name__] = cls

    @classmethod
    def of(cls, state):
        """This part's state in the chain state ``state`` (KeyError where it has none)."""
        return state.parts[cls.KEY]

    @classmethod
    def find(cls, state):
        """This part's state in the chain state ``state``, or None."""
        return state.parts.get(cls.KEY)

    def to_tree(self):
        """The fields as a plain tree (with ``kind``: the class name)."""
        tree = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return dict(tree, kind=type(self).__name__)

    @classmethod
    def from_tree(cls, tree):
        """Inverse of :meth:`to_tree`."""
        tree = dict(tree)
        tree.pop("kind", None)
        return cls(**tree)

    @staticmethod
    def restore(tree):
        """The part state of a saved tree (whatever its class)."""
        kind = str(tree.get("kind"))
        if kind not in PartState._registry:
            raise ValueError(f"unknown part state {kind!r}")
        return PartState._registry[kind].from_tree(tree)

    def copy(self):
        """A deep copy."""
        return PartState.restore(_copy_tree(self.to_tree()))


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
        The chain's random stream (JSON; see ``rnshmc.state.generator_to_json``).
    init : ndarray of shape (dim,)
        The initial point.
    kernel : dict or None
        The C chain's state (``Chain.get_state``); None before the first phase starts.
    inverse_mass : None or ndarray
        The inverse mass matrix in use.
    outputs : dict
        Per phase, the arrays kept ("samples", "records", "gradients", ...), with one row per
        iteration of the phase (rows past ``iteration`` not yet drawn).
    evals : dict
        Per phase, the counters of its current C chain: [density, gradient, metric, metric
        derivative] evaluations.
    timings : dict
        Seconds per phase.
    parts : dict of {str: PartState}
        The typed states of the sampler's parts, by part name.
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

    def phase_length(self, name):
        """The iterations of phase ``name`` in the plan (0 if the plan has no such phase)."""
        return dict((p, int(n)) for p, n in self.phases).get(name, 0)

    def iterations_left(self):
        """Iterations still to run over the rest of the plan."""
        if self.done:
            return 0
        rest = sum(n for _, n in self.phases[self.phase_index:])
        return rest - self.iteration

    def iterations_done(self):
        """Iterations run over the plan so far (all phases)."""
        return sum(int(n) for _, n in self.phases) - self.iterations_left()

    def iterations_until(self, name, iteration):
        """Iterations to run until phase ``name`` has done ``iteration`` iterations (0 if it
        has, or is past them)."""
        names = [p for p, _ in self.phases]
        index = names.index(name)
        if self.done or self.phase_index > index:
            return 0
        if self.phase_index == index:
            return max(0, iteration - self.iteration)
        between = sum(int(n) for _, n in self.phases[self.phase_index:index])
        return between - self.iteration + iteration

    def extend_phase(self, name, length):
        """Lengthen phase ``name`` of the plan to ``length`` iterations (a run whose sampling
        goes on until a stopping rule holds): its outputs' rows grow to match, with the rows
        drawn kept (the random stream does not depend on a phase's planned length)."""
        index = [p for p, _ in self.phases].index(name)
        old = int(self.phases[index][1])
        if length < old:
            raise ValueError(f"cannot shorten phase {name} from {old} to {length} iterations")
        self.phases[index] = [name, int(length)]
        outputs = self.outputs.get(name, {})
        for key, value in outputs.items():
            if not isinstance(value, np.ndarray) or value.ndim == 0 or old == 0:
                continue
            if value.shape[0] == old:
                rows = length
            elif key == "trajectory" and value.shape[0] % old == 0:  # (old x n_steps rows)
                rows = value.shape[0] // old * length
            else:
                continue
            grown = np.zeros((rows,) + value.shape[1:], dtype=value.dtype)
            grown[:value.shape[0]] = value
            outputs[key] = grown

    def copy(self):
        """A deep copy (arrays and part states copied)."""
        return ChainState.from_dict(_copy_tree(self.to_dict()))

    def to_dict(self):
        """The fields, part states as trees (see :meth:`from_dict`)."""
        fields = {name: getattr(self, name) for name in _FIELDS}
        fields["parts"] = {name: part.to_tree() for name, part in self.parts.items()}
        return fields

    @classmethod
    def from_dict(cls, fields):
        """Inverse of :meth:`to_dict`."""
        fields = dict(fields)
        fields["parts"] = {name: PartState.restore(tree)
                           for name, tree in (fields.get("parts") or {}).items()}
        fields["outputs"] = {phase: {key: (current_records(value) if key == "records" else value)
                                     for key, value in dict(outputs).items()}
                             for phase, outputs in (fields.get("outputs") or {}).items()}
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
            return cls.from_dict(tree)
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


def current_records(records):
    """Transition records in today's layout (``TRANSITION``): a state saved before a field was
    added (NUTS's ``tree_depth``) continues with the field 0 for its earlier transitions."""
    records = np.asarray(records)
    if records.dtype == TRANSITION or records.dtype.names is None:
        return records
    missing = set(TRANSITION.names) - set(records.dtype.names)
    if missing - {"tree_depth"} or set(records.dtype.names) - set(TRANSITION.names):
        raise ValueError(f"transition records with fields {records.dtype.names}: not a layout "
                         "of this version's or an earlier one")
    upgraded = np.zeros(records.shape, TRANSITION)
    for name in records.dtype.names:
        upgraded[name] = records[name]
    return upgraded
