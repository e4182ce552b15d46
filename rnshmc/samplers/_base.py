"""The base of every sampler: settings, a plan of phases, and a thin ``sample()``.

A sampler declares its settings (checked in its constructor), its phases (objects from
:mod:`rnshmc.samplers.phases`, by name) and its plan (the phases' order and lengths for a
run); ``samplers/hmc.py`` is the model. Running the plan is the runner's job
(:mod:`._runner`: one chain), many chains the execution layer's (:mod:`._execution`),
checkpoints the checkpointer's (:mod:`.checkpoint`), results :mod:`._result`'s. ``sample()``
changes nothing on the sampler: every chain's state lives in its
:class:`~rnshmc.state.ChainState`, so two runs of one sampler may go on at once.
"""
import functools
import inspect
import os
import warnings

import numpy as np

from ..parallel import chain_generators, sigterm_as_ctrl_c
from ..state import ChainState, generator_to_json
from ..surrogate import Surrogate
from ..targets import (as_ctarget, check_target, model_init_point, target_dim, target_spec,
                       unknown_dim)
from ..validation import check_initial_points, check_integer, user_stacklevel
from . import _execution, _result
from .phases.base import GivenStart, Phase
from ._runner import Budget, run_chain
from ._stopping import StoppingRule
from .checkpoint import SAMPLERS, Checkpointer, checkpoint_interval, checkpoint_states

__all__ = ["Sampler"]


class Sampler:
    """Base of the samplers (see the module docstring).

    A subclass sets ``name``, builds ``self.phases`` (a dict: name -> Phase) in its
    constructor and defines :meth:`plan`; it may define :meth:`report` (keys and warnings
    of its own in the result).

    Attributes
    ----------
    target : the log density sampled
    phases : dict of {str: Phase}
    leapfrog : LeapfrogSettings or None
        The settings whose mass matrices start the chains (None: identity).
    """

    name = "sampler"
    # whether the target must have a gradient (a gradient-free sampler says False)
    NEEDS_GRADIENT = True
    # sample()'s default tune, and the words tune may be besides an integer
    DEFAULT_TUNE = 1000
    TUNE_WORDS = ()
    # arguments a sampler saves in another form (its checkpoint_arguments adds them)
    NOT_CHECKPOINTED = ()
    # the phase a warm start (``warm_start=`` an earlier run) re-enters: the phases before it are
    # kept as the earlier run left them (None: this sampler cannot start warm)
    WARM_FROM = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        SAMPLERS[cls.__name__] = cls
        if "__init__" in cls.__dict__:
            cls.__init__ = _recording_arguments(cls.__dict__["__init__"])

    def __init__(self, target):
        check_target(target)
        if self.NEEDS_GRADIENT and getattr(target, "has_gradient", True) is False:
            raise ValueError(f"{self.name} needs the gradient of the log density, which this "
                             "target does not have (has_gradient is False; for rnshmc.Target "
                             "give grad_logp or logp_and_grad). rnshmc.GradientFreeRNSHMC "
                             "samples targets without a gradient.")
        self.target = target
        self.phases = {}
        self.leapfrog = None

    @property
    def dim(self):
        """The target's dimension (None if it does not say)."""
        return target_dim(self.target) if hasattr(self.target, "dim") else None

    # ------------------------------------------------------------------------------------------
    # what a sampler declares

    def plan(self, draws, tune, chains, dim):
        """The phases of one chain: a list of [name, iterations]."""
        raise NotImplementedError

    def phase(self, name):
        """The :class:`~rnshmc.samplers.phases.base.Phase` named ``name``."""
        return self.phases[name]

    def report(self, result, states):
        """Add the sampler's own keys (and warnings) to a run's result."""

    def warm_parts(self, state):
        """Prepare the part states of a chain carried over from an earlier run for a warm
        start (see :meth:`warm_states`)."""

    def initial_parts(self, tune, chains):
        """The part states every chain starts with (a dict: name -> PartState; copied for
        each chain) for a run of ``tune`` (as given to ``sample()``) and ``chains``."""
        return {}

    def calls_python(self):
        """Whether the sampler calls Python functions besides the target's (a metric)."""
        return False

    # ------------------------------------------------------------------------------------------
    # sampling

    def sample(self, draws=None, *, tune=None, chains=4, rng=None, init=None, warm_start=None,
               ess=None, rhat=1.01, max_evals=None, max_time=None, progress=True, pool="auto",
               checkpoint=None, checkpoint_every=1000):
        """Draw samples.

        Only ``draws`` may be given by position; every other argument is keyword-only.

        Parameters
        ----------
        draws : int or None
            Number of kept iterations per chain. None (default): 1000, or with ``ess`` no
            limit (the run stops when the ESS is reached or a budget is spent); an int with
            ``ess`` is the most per chain.
        tune : int or None
            Iterations per chain before the draws (the sampler's docstring says what they
            do: warm-up, exploration); None: the sampler's default (``DEFAULT_TUNE``). Not
            with ``warm_start``.
        chains : int
            Number of independent chains (default 4: R-hat compares them; they run in
            parallel, see ``pool``). With ``warm_start``, the earlier run's chains are
            continued, as many as it had.
        rng : None, int, SeedSequence or Generator
            Source of randomness; each chain gets its own child stream (SeedSequence.spawn), so
            the same seed gives bit-identical draws, whatever ``pool`` runs the chains.
        init : None, ndarray of shape (dim,) or (chains, dim)
            Initial points. None: the model's own (``init_point(rng)``, called once per chain
            with the chain's random stream; :class:`rnshmc.Target`'s ``init_point``) where it
            has one, else each coordinate uniformly from (-2, 2), as Stan does. A chain whose
            start is not finite (its log density or gradient) tries up to 100 points in all:
            a given or model's point jittered by up to 1 in each coordinate, else new uniform
            draws. An earlier run goes to ``warm_start`` (given here it is a TypeError that
            says so).
        warm_start : None, SampleResult or path
            An earlier run of this sampler on the same model, to continue: its result (as
            :meth:`sample` returned it, in this process) or the path of its checkpoint file.
            Each chain continues from where that run's chain ended, with its step size, mass
            matrix and, for surrogate samplers, its surrogate and sampling kernel, without
            the phases before ``WARM_FROM`` (warm-up, exploration): the earlier run's chains
            and phases are used, so ``init`` and ``tune`` are refused with it (a
            ValueError). See :meth:`warm_states` and ``docs/guide/choosing-a-sampler.md``.
        ess : float or None
            Sample until the pooled minimum bulk ESS over the coordinates reaches ``ess`` (and
            the bulk and tail ESS at least 100 per chain) and the largest R-hat is at most
            ``rhat`` (:func:`rnshmc.diagnostics.ess_bulk`, :func:`rnshmc.diagnostics.rhat`,
            on the sampling draws of all chains), checked at sampling iteration 50 and then
            every 5% (at least 10 iterations apart), with ``draws`` as the most per chain.
            None (default): exactly ``draws`` iterations.
        rhat : float
            The largest R-hat allowed at the stop with ``ess`` (default 1.01).
        max_evals : int or None
            Stop when the chains have made this many exact density evaluations in all (every
            phase counts; a gradient evaluation counts as one), split equally among them.
        max_time : float or None
            Stop at the first chunk end past this many seconds (over a resumed run's
            sessions). A run stopped by a budget returns the draws so far, with a warning (a
            budget spent before the first sampling draw raises a ``RuntimeError``).
        progress : bool
            Show a progress bar per chain with its phase, acceptance and divergences (serial
            chains and thread pools; chains in other processes run without one).
        pool : "auto", None, concurrent.futures.Executor or dask.distributed.Client
            Where the chains run. "auto" (default): in parallel on this machine's cores when
            there are several chains — a thread pool for C-level targets (built-in models,
            surrogates: their loops release the GIL and keep no scratch of their own), a
            pool of spawned processes for targets with Python callables that pickle and are
            defined in an importable module (else serially: a Python function holds the GIL,
            need not be thread-safe, and one defined in a script or a lambda cannot reach a
            spawned process); BLAS threads are limited to cores / workers per chain
            (threadpoolctl). None: one chain after another. An executor runs them there (a
            process pool needs a picklable target). A ``dask.distributed.Client`` (or its
            executor) runs them on its cluster (tasks submitted with ``pure=False``; the
            sampler and its target are sent to the workers once).
        checkpoint : None or path
            Save the run here (``.npz``, written atomically) every ``checkpoint_every``,
            at a Ctrl-C and at a failure: every chain's state, the draws so far, the
            sampler's arguments and, for surrogate samplers, the fitted surrogates.
            :func:`rnshmc.resume` continues it to the draws of the uninterrupted run. An
            existing file is not overwritten (resume it, or remove it), and a second run
            pointed at a path in use refuses to start (a lock file beside it), as does a run
            whose folder cannot take the lock file (read-only). A write that fails during the
            run (the folder became read-only, the disk is full) leaves the last good
            checkpoint: the run goes on with a warning, and the result's
            ``checkpoint_failures`` lists them.
        checkpoint_every : int, a duration as a string ("90s", "10min", "2h") or datetime.timedelta
            An int: iterations per chain between checkpoints (default 1000; the chains wait
            for each other there). A duration: a checkpoint after each chain's first chunk
            boundary (1% of a phase) past that time.

        Returns
        -------
        SampleResult
            ``samples`` (chains, draws, dim), ``log_density``, ``accepted``, ``accept_prob``,
            ``acceptance_rate``, ``diverging``, ``energy``, ``step_size``, ``n_steps``,
            ``inverse_mass_matrix``, ``n_density_evals``, ``n_gradient_evals`` (a gradient
            evaluation also evaluates the density and is counted in both; the ``_sampling``
            variants count the sampling phase only), ``timings`` (seconds per phase, summed
            over chains), ``health``, ``cost``; with ``ess``, ``max_evals`` or ``max_time``,
            ``stopping`` (why and where the run stopped: ``reason`` "converged", "draws",
            "max_evals" or "max_time", ``draws``, ``ess``, ``rhat``); and the sampler's own
            keys (see its docstring).

            On Ctrl-C every chain stops after its current transition (within about a
            second, or a trajectory's evaluations of a Python model; a second Ctrl-C stops at
            once, abandoning the transition under way) and the draws made so far are
            returned: the chains that have sampling draws, cut to the shortest one's,
            with ``interrupted=True`` and a warning; with ``checkpoint``, they are saved there
            too and ``rnshmc.resume`` continues the run. Interrupted before any chain's
            sampling phase has a draw, the KeyboardInterrupt is raised (after the
            checkpoint is written). An exception from the model in one chain stops the others
            the same way and is raised, its ``states`` attribute holding every chain's state.
        """
        owner = f"{type(self).__name__}.sample"
        check_start(init, warm_start, owner, tune=tune)
        every, seconds = checkpoint_interval(checkpoint_every)
        if draws is None and ess is None:
            draws = 1000
        run = dict(draws=draws)
        limits = dict(ess=ess, max_evals=max_evals, max_time=max_time)
        if any(value is not None for value in limits.values()):
            run.update({k: v for k, v in limits.items() if v is not None}, rhat=rhat)
        rule = stopping_rule(run)
        run.update({"checkpoint_every": every} if seconds is None
                   else {"checkpoint_seconds": seconds})
        checkpointer = None
        if checkpoint is not None:
            checkpoint = os.fspath(checkpoint)
            if os.path.exists(checkpoint):
                raise FileExistsError(f"{checkpoint} exists: continue it with "
                                      "rnshmc.resume(), or remove it")
            self.checkpoint_arguments()  # fails now, not at the first checkpoint
            checkpointer = Checkpointer(checkpoint, self, run)
        previous = None if warm_start is None else earlier_run(warm_start, owner)
        if previous is not None:
            chains = len(previous)
        planned = draws if rule is None else rule.initial_draws(check_integer(
            chains, "chains", minimum=1))
        states = (self.init_states(planned, tune, chains, rng, init) if previous is None
                  else self.warm_states(previous, planned, rng))
        return self.continue_run(states, run, progress=progress, pool=pool,
                                 checkpointer=checkpointer)

    def continue_run(self, states, run, progress=True, pool="auto", checkpointer=None):
        """Run ``states`` to the end (writing checkpoints with ``checkpointer``) and return
        the result; on Ctrl-C what was drawn (see :meth:`sample`)."""
        rule = stopping_rule(run)
        serial = _execution.serial_reason(self, pool, len(states), states[0].dim)
        if serial:
            warnings.warn(serial, RuntimeWarning, stacklevel=user_stacklevel())
        if checkpointer is not None:
            checkpointer.acquire()  # (a second run on the same checkpoint refuses here)
        try:
            with sigterm_as_ctrl_c():  # (a batch scheduler's SIGTERM: saved as at a Ctrl-C)
                states, stopping = _execution.run_to_end(self, states, progress=progress,
                                                         pool=pool, checkpointer=checkpointer,
                                                         rule=rule)
        except KeyboardInterrupt as interrupt:
            drawn = _result.drawn_so_far(self.name, getattr(interrupt, "states", None),
                                         None if checkpointer is None else checkpointer.path)
            if drawn is None:
                raise
            result = self.result(drawn)
            result["interrupted"] = True
            self._report_checkpoint_failures(result, checkpointer)
            return result
        finally:
            if checkpointer is not None:
                checkpointer.release()
        result = self.result(states)
        self._report_checkpoint_failures(result, checkpointer)
        if stopping is not None:
            result["stopping"] = stopping
        if serial:
            result["serial_chains"] = serial
        object.__setattr__(result, "_chain_states", states)  # (for a warm start; not saved)
        return result

    @staticmethod
    def _report_checkpoint_failures(result, checkpointer):
        """``checkpoint_failures``: (iteration, error) of each checkpoint write that failed
        (the run went on; the checkpoint on disk is the last good one)."""
        if checkpointer is not None and checkpointer.failures:
            result["checkpoint_failures"] = [list(f) for f in checkpointer.failures]

    def init_states(self, draws=1000, tune=None, chains=1, rng=None, init=None):
        """The initial :class:`~rnshmc.ChainState` of each chain (arguments as for
        :meth:`sample`).

        Returns
        -------
        list of ChainState
        """
        draws = check_integer(draws, "draws", minimum=1)
        tune = self.DEFAULT_TUNE if tune is None else tune
        if not (isinstance(tune, str) and tune in self.TUNE_WORDS):  # (the plan reads those)
            tune = check_integer(tune, "tune", minimum=0)
        generators = chain_generators(rng, chains)
        chains = len(generators)
        inits, sources = self._initial_points(init, chains, generators)
        dim = inits.shape[1]
        plan = self.plan(draws, tune, chains, dim)
        parts = [self.initial_parts(tune, chains) for _ in range(chains)]
        for c in range(chains):
            if sources[c] is not None:  # (a chain's retries are jittered around it)
                parts[c][GivenStart.KEY] = GivenStart(point=inits[c].copy(), source=sources[c])
        inverse_masses = ([None] * chains if self.leapfrog is None
                          else self.leapfrog.inverse_masses(dim, chains))
        return [ChainState(
            sampler=self.name, chain=c, dim=dim, phases=[list(p) for p in plan], phase_index=0,
            iteration=0, phase_started=False, rng=generator_to_json(generators[c]),
            init=inits[c], kernel=None, inverse_mass=inverse_masses[c], outputs={}, evals={},
            timings={}, parts={name: part.copy() for name, part in parts[c].items()})
            for c in range(chains)]

    def warm_states(self, previous, draws=1000, rng=None):
        """The initial states of a warm start: each chain of an earlier run (its final
        :class:`~rnshmc.ChainState`) continued with a new sampling phase of ``draws``
        iterations and a new random stream, entering the plan at ``WARM_FROM`` (the phases
        before it are kept as they were, counted as no evaluations and no time).

        Parameters
        ----------
        previous : list of ChainState
            The earlier run's chains (of this sampler, past their phases before
            ``WARM_FROM``).
        draws : int
        rng : None, int, SeedSequence or Generator

        Returns
        -------
        list of ChainState

        Raises
        ------
        ValueError
            If this sampler cannot start warm, or the states are not from a run of it that
            reached ``WARM_FROM``.
        """
        if self.WARM_FROM is None:
            raise ValueError(f"{self.name} cannot start from an earlier run (warm_start=): "
                             "give initial points (init=) instead")
        draws = check_integer(draws, "draws", minimum=1)
        generators = chain_generators(rng, len(previous))
        states = []
        for state, generator in zip(previous, generators):
            names = [name for name, _ in state.phases]
            if state.sampler != self.name or self.WARM_FROM not in names:
                raise ValueError(f"warm_start: a run of {state.sampler}, not of {self.name}")
            if self.dim is not None and state.dim != self.dim:
                raise ValueError(f"warm_start: the earlier run's model has dimension {state.dim}, "
                                 f"this one {self.dim}")
            index = names.index(self.WARM_FROM)
            if state.phase_index <= index or state.kernel is None:
                raise ValueError(f"warm_start: chain {state.chain} of the earlier run did not get "
                                 f"past its {self.WARM_FROM} phase")
            new = state.copy()
            new.phases = [[name, int(length) if i < index else 0]
                          for i, (name, length) in enumerate(state.phases)]
            new.phases[-1][1] = draws  # (the sampling phase)
            new.phase_index, new.iteration, new.phase_started = index, 0, False
            new.outputs = {name: value for name, value in new.outputs.items()
                           if name in names[:index]}
            # (the phases kept cost this run nothing)
            new.evals = {name: [0] * len(counts) for name, counts in state.evals.items()
                         if name in names[:index]}
            new.timings = {name: 0.0 for name in state.timings if name in names[:index]}
            new.rng = generator_to_json(generator)
            new.init = np.array(new.kernel["position"], dtype=np.float64)
            self.warm_parts(new)
            states.append(new)
        return states

    def run_states(self, states, progress=True, pool=None, stop_after=None, deadline=None):
        """Continue every chain's state, for ``stop_after`` more iterations each (None: to the
        end), until the first chunk boundary past ``deadline`` (a ``time.monotonic()``
        value), or until they wait at a barrier (which this call does not pass: see
        :meth:`continue_run`); returns the states. ``pool``: as for :meth:`sample` (an
        executor, a Dask client or None).

        If a chain fails or the run is interrupted, the other chains stop after their current
        transition and the exception is raised with every state in its ``states`` attribute.
        """
        return _execution.run_states(self, states, progress=progress, pool=pool,
                                     budget=Budget(stop_after, deadline))

    def extend_sampling(self, states, length):
        """Lengthen every chain's sampling phase to ``length`` iterations (a run under a
        stopping rule), and tell the phases (see ``Phase.extended``)."""
        for state in states:
            state.extend_phase(Phase.SAMPLING, length)
        for name in dict.fromkeys(name for name, _ in states[0].phases):
            self.phase(name).extended(states, length)

    def waiting(self, state):
        """Whether the chain waits at a barrier of its phase (for :meth:`join`)."""
        return not state.done and self.phase(state.phase).waiting(state)

    def join(self, states):
        """Run the barriers' work once every chain is done or waits at one (what
        :meth:`sample` does between :meth:`run_states` calls); nothing otherwise."""
        _execution.join_barriers(self, states)

    def run_chain(self, state, progress=False, stop_after=None):
        """Continue one chain's state in this thread (see :meth:`run_states`)."""
        return run_chain(self, state, as_ctarget(self.target, state.dim), progress=progress,
                         budget=Budget(stop_after))

    def result(self, states):
        """The SampleResult of finished chains (see :meth:`sample`)."""
        result = _result.base_result(self.name, states)
        for name, _ in states[0].phases:
            self.phase(name).report(result, states)
        self.report(result, states)
        result["cost"] = _result.run_cost(self, states, result["health"]["ess_bulk_min"])
        return result

    # ------------------------------------------------------------------------------------------
    # checkpoints

    def checkpoint_arguments(self):
        """The arguments this sampler was made with, without the target, as a checkpoint
        saves them (plus ``target_spec`` for a model that checkpoints rebuild, such as a
        built-in Gaussian: see :func:`rnshmc.targets.rebuilt_from_checkpoints`).

        Raises
        ------
        ValueError
            If an argument cannot be saved without pickle (a Python function, an object).
        """
        arguments = {k: v for k, v in self._arguments.items()
                     if k != "target" and k not in self.NOT_CHECKPOINTED}
        for key, value in arguments.items():
            if isinstance(value, Surrogate):  # (an unfitted surrogate: its kind and settings)
                arguments[key] = value = dict(value.settings(), kind=value.kind)
            if not _savable(value):
                raise ValueError(f"{self.name} cannot checkpoint its argument {key}={value!r} "
                                 "(only numbers, strings, arrays and lists or dicts of them "
                                 "are saved without pickle)")
        spec = target_spec(self.target)
        if spec is not None:
            arguments["target_spec"] = spec
        return arguments

    @classmethod
    def from_checkpoint_arguments(cls, target, arguments):
        """The sampler of a checkpoint (inverse of :meth:`checkpoint_arguments`)."""
        return cls(target, **arguments)

    # ------------------------------------------------------------------------------------------

    def _initial_points(self, init, chains, generators):
        """(the chains' initial points, (chains, dim); where each came from: "init", "model"
        or None for the default uniform draw)."""
        owner = f"{type(self).__name__}.sample"
        if init is not None:
            return check_initial_points(init, chains, self.dim, owner), ["init"] * chains
        dim, points = self.dim, []
        for generator in generators:  # (each chain's from its own stream: pool-independent)
            point = model_init_point(self.target, generator, dim)
            if point is None and dim is None:
                raise unknown_dim(self.target, owner)
            dim = len(point) if point is not None else dim
            points.append(point)
        return (np.stack([generator.uniform(-2.0, 2.0, size=dim) if point is None else point
                          for point, generator in zip(points, generators)]),
                [None if point is None else "model" for point in points])


def stopping_rule(run):
    """The :class:`~rnshmc.samplers._stopping.StoppingRule` of a run's arguments, or None for
    a run of planned length without budgets."""
    if all(run.get(key) is None for key in ("ess", "max_evals", "max_time")):
        return None
    return StoppingRule.from_run(run)


def warn_unadapted(name, tune, step_size):
    """Warn that a run without warm-up samples with the heuristic initial step size."""
    if tune == 0 and step_size is None:
        warnings.warn(f"tune=0 with step_size=None: {name} samples with the heuristic "
                      "initial step size, unadapted", stacklevel=user_stacklevel())


def check_start(init, warm_start, owner, tune=None):
    """Refuse an earlier run given as ``init`` (it goes to ``warm_start``), and ``init`` or
    ``tune`` with ``warm_start`` (the earlier run's chains and phases are used); ``owner``
    names the function in the errors."""
    if isinstance(init, (dict, str, os.PathLike)):
        raise TypeError(f"{owner}: init takes initial points (an array of shape (dim,) or "
                        "(chains, dim)); to continue an earlier run (its result or the path "
                        "of its checkpoint) use warm_start=")
    if warm_start is None:
        return
    for name, value in (("init", init), ("tune", tune)):
        if value is not None:
            raise ValueError(f"{owner}: give {name}= or warm_start=, not both: a warm start "
                             "continues each chain of the earlier run from where it ended, "
                             "with its chains and its phases before the sampling (its "
                             "warm-up or exploration)")


def earlier_run(warm_start, owner="sample"):
    """The chain states of the earlier run given as ``warm_start`` (a result of
    ``sample()``, or the path of its checkpoint)."""
    if isinstance(warm_start, (str, os.PathLike)):
        return checkpoint_states(warm_start)
    if not isinstance(warm_start, dict):
        raise TypeError(f"{owner}: warm_start must be a result of sample() or the path of a "
                        f"run's checkpoint, got {type(warm_start).__name__}")
    states = getattr(warm_start, "_chain_states", None)
    if states is None:
        raise ValueError(f"{owner}: warm_start: this result does not hold its chains' final "
                         "states (a result loaded from a file, or an interrupted run): give "
                         "the run's checkpoint file instead")
    return states


def _recording_arguments(init):
    """``init`` that first records the arguments a sampler was made with (the outermost
    __init__'s, as given) in ``_arguments``, for checkpoints: resume() makes the same sampler
    again."""
    signature = inspect.signature(init)

    @functools.wraps(init)
    def recording_init(self, *args, **kwargs):
        if "_arguments" not in self.__dict__:
            bound = signature.bind(self, *args, **kwargs)
            arguments = {}
            for key, value in list(bound.arguments.items())[1:]:
                if signature.parameters[key].kind is inspect.Parameter.VAR_KEYWORD:
                    arguments.update(value)
                else:
                    arguments[key] = value
            self._arguments = arguments
        init(self, *args, **kwargs)
    return recording_init


def _savable(value):
    if value is None or isinstance(value, (bool, int, float, str, np.generic)):
        return True
    if isinstance(value, np.ndarray):
        return value.dtype != object
    if isinstance(value, (list, tuple)):
        return all(_savable(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _savable(v) for k, v in value.items())
    return False
