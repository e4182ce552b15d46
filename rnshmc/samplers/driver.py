"""The chain driver shared by every sampler.

A sampler is configuration: it declares the *phases* a chain goes through (warm-up or
exploration, training, sampling), how to build the C chain of each phase and what to do at a
phase's start and end. :class:`ChainSampler` runs any such plan over a
:class:`~rnshmc.checkpoint.ChainState`: each phase in chunks of C transitions, with Python
re-entered only at chunk ends (progress, the state kept current for checkpoints) and at the
ends of the warm-up's slow windows (a new mass matrix, the step size restarted). Dual averaging
and the running variance accumulate inside the C loop.

``sample()`` mutates nothing on the sampler (every chain's state lives in its ChainState), so
two ``sample()`` calls on one sampler may run at once; and a chain continued from a saved state
gives the draws of the uninterrupted run, bit for bit, because every chunk boundary is a point
where the whole state is in the ChainState.
"""
import contextlib
import functools
import inspect
import os
import sys
import time
import warnings
from typing import NamedTuple

import numpy as np

from .._kernels._chain import TRANSITION
from .._kernels._integrators import Leapfrog
from .._kernels._metrics import EuclideanMetric
from .._kernels._transition import Chain
from ..adaptation import WarmupSchedule, initial_step_size, regularized_variance, terminal_buffer
from ..checkpoint import ChainState, checkpoint_interval, generator_from_json, generator_to_json
from ..results import SampleResult
from ..parallel import (blas_limits, chain_generators, interruptible, local_pool, map_chains,
                        runs_in_other_processes, threads_per_chain)
from ..targets import as_ctarget, check_target, target_dim
from ..validation import check_integer, check_per_chain_real, check_real

__all__ = ["ChainSampler", "Phase", "Progress"]

# chunks per phase: the progress bar moves and the state is current this often
CHUNKS_PER_PHASE = 100


class Phase(NamedTuple):
    """How the driver runs one phase of a plan.

    adapt : bool
        Stan's windowed adaptation of the step size and mass matrix runs in it (as the
        sampler's settings say).
    keep : tuple of str
        Outputs kept for every iteration: "samples", "records", "gradients" (the dynamics
        gradient at each state: training data), "trajectory" (every leapfrog step's (q, U,
        grad U), with "trajectory_ends": training data from whole trajectories), "proposals"
        (each proposal and its exact potential, NaN where it was not evaluated: ARNS-HMC's
        online points). Others go to reused chunk buffers.
    adapt_mass : bool
        With ``adapt``, the mass matrix too (when the sampler's settings say so); False for a
        position-dependent metric, which has no mass matrix.
    """
    adapt: bool = False
    keep: tuple = ()
    adapt_mass: bool = True


class Progress:
    """A tqdm bar when tqdm is installed and progress is wanted; silent otherwise. A chain's
    bar shows the phase under way, its acceptance rate so far and its divergences."""

    def __init__(self, enabled, total, desc, position=None):
        self.bar = None
        self.deadline = None  # a run's time.monotonic() limit (run_chain's ``deadline``)
        self.phase, self.accepted, self.divergent, self.transitions = None, 0, 0, 0
        if enabled and total > 0:
            try:
                from tqdm.auto import tqdm
            except ImportError:
                return
            self.bar = tqdm(total=total, desc=desc, leave=False, position=position)

    def past_deadline(self):
        return self.deadline is not None and time.monotonic() >= self.deadline

    def update(self, n, **postfix):
        """Advance by ``n``; ``postfix`` (e.g. loss=...) is shown after the bar."""
        if self.bar is not None:
            if postfix:
                self.bar.set_postfix(postfix, refresh=False)
            self.bar.update(n)

    def transitions_done(self, phase, records):
        """Advance by the transitions in ``records`` (TRANSITION rows) of ``phase``."""
        if self.bar is None:
            return
        if phase != self.phase:
            self.phase, self.accepted, self.divergent, self.transitions = phase, 0, 0, 0
        self.accepted += int(np.sum(records["accepted"]))
        self.divergent += int(np.sum(records["diverging"]))
        self.transitions += len(records)
        self.update(len(records), phase=phase,
                    accept=f"{self.accepted / max(self.transitions, 1):.2f}",
                    divergent=self.divergent)

    def close(self):
        if self.bar is not None:
            self.bar.close()


class ChainSampler:
    """Base of the HMC-family samplers: the leapfrog settings, the warm-up adaptation, the
    plan of phases and the driver that runs it (see the module docstring).

    Parameters
    ----------
    target : rnshmc.Target, built-in model or BridgeStan-style object
        The log density to sample (see :mod:`rnshmc.targets`). Must have a gradient.
    step_size : float, ndarray of shape (chains,) or None
        Leapfrog step size (one per chain, e.g. a result's ``step_size``, to continue a run).
        None (default) adapts it during warm-up by dual averaging to ``target_accept``.
    n_steps : int
        Number of leapfrog steps per iteration (the maximum when ``jitter`` is on).
    jitter : bool
        Draw the number of steps uniformly from {1, ..., n_steps} each iteration (Neal 2011), as
        the papers do.
    mass_matrix : None, ndarray of shape (dim,) or (dim, dim)
        The momentum covariance M (diagonal or dense). None means the identity (adapted to a
        diagonal estimate of the posterior precision during warm-up when
        ``adapt_mass_matrix``). Give this or ``inverse_mass_matrix``, not both.
    inverse_mass_matrix : None or ndarray
        M^{-1} instead of M: (dim,), (dim, dim), or one per chain — (chains, dim) or (chains,
        dim, dim), a result's ``inverse_mass_matrix`` — to continue a run. A square 2-d array
        is one dense matrix; a list of arrays is one per chain.
    adapt_mass_matrix : bool or None
        Estimate a diagonal mass matrix in Stan's warm-up windows. None (default) means: only
        when neither a step size nor a mass matrix is given.
    target_accept : float
        Target mean acceptance probability of the step-size adaptation (default 0.8).
    max_energy_error : float
        Proposals with a larger energy error, or a non-finite energy, are rejected and recorded
        as divergences (default 1000).
    """

    name = "sampler"
    # whether the target must have a gradient (a gradient-free sampler says False)
    NEEDS_GRADIENT = True

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "__init__" in cls.__dict__:
            cls.__init__ = _recording_arguments(cls.__dict__["__init__"])

    def __init__(self, target, step_size=None, n_steps=10, jitter=True, mass_matrix=None,
                 inverse_mass_matrix=None, adapt_mass_matrix=None, target_accept=0.8,
                 max_energy_error=1000.0):
        check_target(target)
        if self.NEEDS_GRADIENT and getattr(target, "has_gradient", True) is False:
            raise ValueError(f"{self.name} needs the gradient of the log density, which this "
                             "target does not have (has_gradient is False; for rnshmc.Target "
                             "give grad_logp or logp_and_grad). rnshmc.GradientFreeRNSHMC "
                             "samples targets without a gradient.")
        self.target = target
        self.step_size = None if step_size is None else check_per_chain_real(step_size, "step_size")
        self.n_steps = check_integer(n_steps, "n_steps", minimum=1)
        self.jitter = bool(jitter)
        if mass_matrix is not None and inverse_mass_matrix is not None:
            raise ValueError("give mass_matrix or inverse_mass_matrix, not both")
        self.mass_matrix = mass_matrix
        self.inverse_mass_matrix = inverse_mass_matrix
        dim = target_dim(target) if hasattr(target, "dim") else None
        if dim is not None:  # check now rather than at sample()
            self._inverse_masses(dim, None)
        if adapt_mass_matrix is None:
            adapt_mass_matrix = step_size is None and mass_matrix is None and inverse_mass_matrix is None
        self.adapt_mass_matrix = bool(adapt_mass_matrix)
        self.target_accept = check_real(target_accept, "target_accept", lower=0.0, upper=1.0)
        self.max_energy_error = check_real(max_energy_error, "max_energy_error", lower=0.0)

    # ------------------------------------------------------------------------------------------
    # checkpoints

    # arguments a sampler saves in another form (its checkpoint_arguments adds them)
    NOT_CHECKPOINTED = ()

    def checkpoint_arguments(self):
        """The arguments this sampler was made with, without the target, as a checkpoint
        saves them (plus ``target_spec`` for a built-in Gaussian target).

        Raises
        ------
        ValueError
            If an argument cannot be saved without pickle (a Python function, an object).
        """
        from ..models import Gaussian
        arguments = {k: v for k, v in self._arguments.items()
                     if k != "target" and k not in self.NOT_CHECKPOINTED}
        for key, value in arguments.items():
            if not _savable(value):
                raise ValueError(f"{self.name} cannot checkpoint its argument {key}={value!r} "
                                 "(only numbers, strings, arrays and lists or dicts of them "
                                 "are saved without pickle)")
        if isinstance(self.target, Gaussian):
            arguments["target_spec"] = dict(mean=self.target.mean,
                                            precision=self.target.precision)
        return arguments

    @classmethod
    def from_checkpoint_arguments(cls, target, arguments):
        """The sampler of a checkpoint (inverse of :meth:`checkpoint_arguments`)."""
        return cls(target, **arguments)

    @staticmethod
    def extras_to_save(extras):
        """A chain state's ``extras`` as a checkpoint saves them: objects as arrays (a copy
        where anything changes; see :meth:`extras_restored`)."""
        return extras

    @staticmethod
    def extras_restored(extras):
        """Inverse of :meth:`extras_to_save`."""
        return extras

    # ------------------------------------------------------------------------------------------
    # what a sampler declares (overridden by the samplers)

    def plan(self, draws, tune):
        """The phases of one chain: a list of [name, iterations]."""
        raise NotImplementedError

    def phase_spec(self, name):
        """The :class:`Phase` of a phase name."""
        raise NotImplementedError

    def make_chain(self, name, state, ctarget):
        """The C chain of phase ``name`` (None for a phase without iterations)."""
        return self.new_chain(ctarget, state)

    def begin_phase(self, name, chain, state, generator):
        """One-time work when phase ``name`` starts: put the chain where the previous phase
        left it (the first phase: at ``state.init``)."""
        if state.kernel is None:
            chain.set_position(state.init)
        else:
            chain.set_state(state.kernel, counters=False)

    def end_phase(self, name, chain, state, generator):
        """One-time work when phase ``name`` has run all its iterations."""

    def trajectory(self, name, state):
        """(n_steps, jitter) of phase ``name``."""
        return self.n_steps, self.jitter

    def waiting(self, state):
        """Whether the chain waits for the others before it can go on (a step that needs
        every chain, e.g. one surrogate fitted to all their explorations): the driver then
        returns it as it is, and :meth:`continue_run` calls :meth:`join` once every chain
        is done or waiting."""
        return False

    def join(self, states):
        """The work every chain waited for (see :meth:`waiting`), on all the states at once,
        in chain order: it runs in the calling process whatever the pool, so the draws do not
        depend on the executor."""

    TIMING_NAMES = {"warmup": "tune", "exploration": "tune", "training": "train"}

    def result(self, states):
        """The SampleResult of finished chains: the sampling phase's draws and records, the
        step sizes and mass matrices, evaluation counts and timings."""
        stack = lambda key: np.stack([s.outputs["sampling"][key] for s in states])
        records = stack("records")
        evals = lambda phase, i: np.array([s.evals.get(phase, [0, 0])[i] for s in states],
                                          dtype=np.int64)
        total = lambda i: sum(evals(phase, i) for phase, _ in states[0].phases)
        timings = {}
        for s in states:
            for phase, seconds in s.timings.items():
                key = self.TIMING_NAMES.get(phase, phase)
                timings[key] = timings.get(key, 0.0) + seconds
        inverse_mass = [s.inverse_mass for s in states]
        accepted = records["accepted"].astype(bool)
        result = SampleResult(
            sampler=self.name,
            samples=stack("samples"),
            log_density=records["log_density"].copy(),
            accepted=accepted,
            accept_prob=records["accept_prob"].copy(),
            acceptance_rate=accepted.mean(axis=1),
            diverging=records["diverging"].astype(bool),
            energy=records["energy"].copy(),
            step_size=np.array([s.kernel["step_size"] for s in states]),
            n_steps=records["n_steps"].copy(),
            inverse_mass_matrix=None if inverse_mass[0] is None else np.stack(inverse_mass),
            n_density_evals=total(0),
            n_gradient_evals=total(1),
            n_density_evals_sampling=evals("sampling", 0),
            n_gradient_evals_sampling=evals("sampling", 1),
            timings=timings,
        )
        warn_about_stuck_chains(self.name, result)
        warn_about_health(self.name, result)
        return result



    # ------------------------------------------------------------------------------------------
    # sampling

    def sample(self, draws=1000, tune=1000, chains=1, rng=None, init=None, progress=True,
               pool="auto", checkpoint=None, checkpoint_every=1000):
        """Draw samples.

        Parameters
        ----------
        draws : int
            Number of kept iterations per chain.
        tune : int
            Number of warm-up iterations per chain (adaptation, if any, then discarded).
        chains : int
            Number of independent chains.
        rng : None, int, SeedSequence or Generator
            Source of randomness; each chain gets its own child stream (SeedSequence.spawn), so
            the same seed gives bit-identical draws, whatever ``pool`` runs the chains.
        init : None or ndarray of shape (dim,) or (chains, dim)
            Initial points. None draws each coordinate uniformly from (-2, 2), as Stan does.
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
            (threadpoolctl). None: one chain after another. An
            executor runs them there (a process pool needs a picklable target). A
            ``dask.distributed.Client`` (or its executor) runs them on its cluster (tasks
            submitted with ``pure=False``; the target is pickled to the workers).
        checkpoint : None or path
            Save the run here (``.npz``, written atomically) every ``checkpoint_every``,
            at a Ctrl-C and at a failure: every chain's state, the draws so far, the
            sampler's arguments and, for surrogate samplers, the fitted surrogates.
            :func:`rnshmc.resume` continues it to the draws of the uninterrupted run. An
            existing file is not overwritten (resume it, or remove it).
        checkpoint_every : int, float seconds as a string ("90s", "10min", "2h") or datetime.timedelta
            An int: iterations per chain between checkpoints (default 1000; the chains wait
            for each other there). A duration: a checkpoint after each chain's first chunk
            boundary (1% of a phase) past that time.

        Returns
        -------
        SampleResult
            On Ctrl-C every chain stops after its current transition (within about a
            second; a Python model's evaluation under way is abandoned) and the draws made so
            far are returned: the chains that have sampling draws (serially run chains after
            the interrupted one have none), cut to the shortest one's, with
            ``interrupted=True`` and a warning; with ``checkpoint``, they are saved there
            too and ``rnshmc.resume`` continues the run. Interrupted before any chain's
            sampling phase has a draw, the KeyboardInterrupt is raised (after the
            checkpoint is written). An exception from the model in one chain stops the others
            the same way and is raised, its ``states`` attribute holding every chain's state.
        """
        run = dict(draws=draws, **checkpoint_interval(checkpoint_every))
        if checkpoint is not None:
            checkpoint = os.fspath(checkpoint)
            if os.path.exists(checkpoint):
                raise FileExistsError(f"{checkpoint} exists: continue it with "
                                      "rnshmc.resume(), or remove it")
            self.checkpoint_arguments()  # fails now, not at the first checkpoint
        states = self.init_states(draws, tune, chains, rng, init)
        return self.continue_run(states, run, progress=progress, pool=pool,
                                 checkpoint=checkpoint)

    def continue_run(self, states, run, progress=True, pool="auto", checkpoint=None):
        """Run ``states`` to the end (writing checkpoints if ``checkpoint``) and return the
        result; on Ctrl-C what was drawn (see :meth:`sample`)."""
        from ..checkpoint import write_checkpoint
        draws = run["draws"]
        every, seconds = run.get("checkpoint_every"), run.get("checkpoint_seconds")
        try:
            with self._pool(pool, len(states), states[0].dim) as executor:
                while not all(s.done for s in states):
                    deadline = None
                    if checkpoint is not None and seconds is not None:
                        deadline = time.monotonic() + seconds
                    try:
                        states = self.run_states(
                            states, progress=progress, pool=executor, deadline=deadline,
                            stop_after=every if checkpoint is not None and seconds is None
                            else None)
                        if any(self.waiting(s) for s in states) and \
                                all(s.done or self.waiting(s) for s in states):
                            self.join(states)
                            if any(self.waiting(s) for s in states):
                                raise RuntimeError(f"{self.name}: chains still wait after "
                                                   "their join (a bug)")
                    except BaseException as error:
                        if checkpoint is not None and getattr(error, "states", None) is not None:
                            write_checkpoint(checkpoint, self, error.states, run)
                        raise
                    if checkpoint is not None:
                        write_checkpoint(checkpoint, self, states, run)
        except KeyboardInterrupt as interrupt:
            drawn = [(s, s.iteration if s.phase == "sampling" else (draws if s.done else 0))
                     for s in getattr(interrupt, "states", None) or []]
            drawn = [(s, n) for s, n in drawn if n > 0]
            if not drawn:
                raise
            kept = min(n for _, n in drawn)
            saved = "" if checkpoint is None else f" (the run is saved in {checkpoint})"
            warnings.warn(f"{self.name}: interrupted; returning the first {kept} of {draws} "
                          f"draws of chains {[s.chain for s, _ in drawn]} (the chains with "
                          f"sampling draws){saved}", RuntimeWarning,
                          stacklevel=user_stacklevel())
            result = self.result([_cut_to(s, kept) for s, _ in drawn])
            result["interrupted"] = True
            return result
        return self.result(states)

    def uses_python_callables(self, dim):
        """Whether sampling a ``dim``-dimensional target calls Python functions (a Python
        target or metric): they hold the GIL, so ``pool="auto"`` runs such chains in
        processes rather than threads."""
        from .._kernels._targets import PyCallableTarget
        return isinstance(as_ctarget(self.target, dim), PyCallableTarget)

    @contextlib.contextmanager
    def _pool(self, pool, chains, dim):
        """The executor of ``pool`` (see :meth:`sample`; "auto" makes one for the run), with
        a thread pool's BLAS threads limited to the chains' share of the cores."""
        with contextlib.ExitStack() as stack:
            if isinstance(pool, str):
                if pool != "auto":
                    raise ValueError(f"pool must be 'auto', None, an executor or a Dask "
                                     f"client, got {pool!r}")
                processes = self.uses_python_callables(dim)
                if processes and not _pickles(self):
                    processes, chains = False, 1  # serially: see sample()
                pool = stack.enter_context(local_pool(chains, processes))
            if pool is not None and not runs_in_other_processes(pool):
                stack.enter_context(blas_limits(threads_per_chain(pool, chains)))
            yield pool

    def init_states(self, draws=1000, tune=1000, chains=1, rng=None, init=None):
        """The initial :class:`~rnshmc.checkpoint.ChainState` of each chain (arguments as for
        :meth:`sample`)."""
        draws = check_integer(draws, "draws", minimum=1)
        tune = check_integer(tune, "tune", minimum=0)
        generators = chain_generators(rng, chains)
        chains = len(generators)
        inits = self._initial_points(init, chains, generators)
        dim = inits.shape[1]
        plan = self.plan(draws, tune)
        inverse_masses = self._inverse_masses(dim, chains)
        step_sizes = self._per_chain(self.step_size, chains, "step_size")
        if tune == 0 and self.step_size is None:
            warnings.warn(f"tune=0 with step_size=None: {self.name} samples with the heuristic "
                          "initial step size, unadapted", stacklevel=user_stacklevel())
        return [ChainState(
            sampler=self.name, chain=c, dim=dim, phases=plan, phase_index=0, iteration=0,
            phase_started=False, rng=generator_to_json(generators[c]), init=inits[c],
            kernel=None, inverse_mass=inverse_masses[c],
            outputs={}, evals={}, timings={},
            extras={"step_size": None if step_sizes is None else float(step_sizes[c])})
            for c in range(chains)]

    def run_states(self, states, progress=True, pool=None, stop_after=None, deadline=None):
        """Continue every chain's state (on ``pool`` if given: an executor or a Dask client,
        see :meth:`sample`); returns the states. ``stop_after``, ``deadline``: see
        :meth:`run_chain`.

        If a chain fails (an exception from the model) or the run is interrupted (Ctrl-C),
        the other chains stop after their current transition, every state keeps the
        transitions made, and the exception is raised with the states in its ``states``
        attribute (the first failure's exception; a Ctrl-C's KeyboardInterrupt)."""
        stop = np.zeros(1, dtype=np.int32)  # this run's stop flag, watched by its C loops
        if pool is not None and runs_in_other_processes(pool):
            # the target is rebuilt there; the deadline becomes seconds from the task's start
            run = _RunChain(self, stop_after,
                            None if deadline is None else deadline - time.monotonic())
        else:
            ctarget = as_ctarget(self.target, states[0].dim)  # shared: it holds no scratch
            several = len(states) > 1 and pool is not None
            # a pool thread's OpenMP kernels (the logistic model's) share the cores with the
            # other chains' (OpenMP's limit is per thread; BLAS's is set by _pool)
            threads = threads_per_chain(pool, len(states)) if several else None

            def run(state):
                with blas_limits(threads, "openmp") if threads else contextlib.nullcontext():
                    return self.run_chain(state, ctarget, progress=progress,
                                          stop_after=stop_after, stop_flag=stop,
                                          deadline=deadline,
                                          position=state.chain if several else None)
        try:
            outcomes = map_chains(_Guarded(run, stop), states, pool, stop)
        except KeyboardInterrupt as interrupt:  # while waiting for a pool's chains
            interrupt.states = [state if outcome is None else outcome[0]
                                for state, outcome in zip(states, interrupt.outcomes)]
            raise
        states = [state for state, _ in outcomes]
        errors = [error for _, error in outcomes if error is not None]
        if errors:
            from .._kernels._chain import StopRequested
            error = next((e for e in errors if not isinstance(e, StopRequested)), errors[0])
            error.states = states
            raise error
        return states

    def run_chain(self, state, ctarget=None, progress=False, stop_after=None, stop_flag=None,
                  deadline=None, position=None):
        """Continue one chain from ``state`` until its plan is done, for ``stop_after`` more
        iterations, until it waits for the other chains (:meth:`waiting`), or until the first
        chunk boundary after ``deadline`` (a ``time.monotonic()`` value); ``state`` is updated
        in place and returned. ``stop_flag``: see :meth:`Chain.set_stop_flag`; ``position``:
        the progress bar's line."""
        if state.sampler != self.name:
            raise ValueError(f"this state belongs to a {state.sampler} chain, not {self.name}")
        if ctarget is None:
            ctarget = as_ctarget(self.target, state.dim)
        if ctarget.dim != state.dim:
            raise ValueError(f"the state has dim {state.dim}, the target {ctarget.dim}")
        generator = generator_from_json(state.rng)
        budget = state.iterations_left() if stop_after is None else stop_after
        bar = Progress(progress, min(budget, state.iterations_left()),
                       f"{self.name} chain {state.chain}", position)
        bar.deadline = deadline
        started = budget
        try:
            while not state.done and (budget > 0 or state.phases[state.phase_index][1] == 0):
                # (the deadline only after some progress: a run must move forward)
                if self.waiting(state) or (budget < started and bar.past_deadline()):
                    break
                name, n_iter = state.phases[state.phase_index]
                start = time.perf_counter()
                chain = self.make_chain(name, state, ctarget)
                if chain is not None:
                    chain.set_stop_flag(stop_flag)
                if not state.phase_started:
                    self.begin_phase(name, chain, state, generator)
                    state.phase_started = True
                    if chain is not None:
                        self._keep_current(name, chain, state, generator)
                elif chain is not None:
                    chain.set_state(state.kernel)
                budget -= self._iterate(name, n_iter, chain, state, generator, budget, bar)
                if state.iteration == n_iter:
                    self.end_phase(name, chain, state, generator)
                    if chain is not None:
                        self._keep_current(name, chain, state, generator)
                    state.phase_index += 1
                    state.iteration = 0
                    state.phase_started = False
                state.rng = generator_to_json(generator)
                state.timings[name] = state.timings.get(name, 0.0) + time.perf_counter() - start
        except BaseException:
            state.rng = generator_to_json(generator)
            raise
        finally:
            bar.close()
        return state

    # ------------------------------------------------------------------------------------------
    # the driver's parts

    def new_chain(self, dynamics, state, test=None, delayed_acceptance=False):
        """A C chain over ``dynamics`` (and ``test``) with this chain's metric."""
        return Chain(dynamics, test, EuclideanMetric(state.dim, state.inverse_mass), Leapfrog(),
                     max_energy_error=self.max_energy_error,
                     delayed_acceptance=delayed_acceptance)

    def adapts_step_size(self, state):
        return state.extras["step_size"] is None

    def start_adaptation(self, chain, state, generator):
        """At the start of an adapting phase: the initial step size (Stan's heuristic from 1,
        unless given) and dual averaging started from it."""
        if self.adapts_step_size(state):
            step_size = initial_step_size(chain, generator, target_accept=self.target_accept)
            chain.restart_step_size_adaptation(step_size, self.target_accept)
        else:
            chain.step_size = state.extras["step_size"]

    def finish_adaptation(self, chain, state, n_iter):
        if self.adapts_step_size(state) and n_iter > 0:
            chain.step_size = chain.final_step_size

    def _keep_current(self, name, chain, state, generator):
        state.kernel = chain.get_state()
        state.evals[name] = [chain.n_density_evals, chain.n_gradient_evals,
                             chain.n_metric_evals, chain.n_metric_derivative_evals]
        state.rng = generator_to_json(generator)

    def _iterate(self, name, n_iter, chain, state, generator, budget, bar):
        """Run phase ``name`` from ``state.iteration`` for at most ``budget`` iterations."""
        if n_iter == 0 or budget <= 0:
            return 0
        spec = self.phase_spec(name)
        dim = state.dim
        outputs = state.outputs.setdefault(name, {})
        n_steps, jitter = self.trajectory(name, state)
        for key in spec.keep:
            if key in outputs:
                continue
            if key == "trajectory":  # every leapfrog step's (q, U, grad U), and where each
                # transition's rows end
                outputs[key] = np.zeros((n_iter * n_steps, 2 * dim + 1))
                outputs["trajectory_ends"] = np.zeros(n_iter, dtype=np.intp)
            elif key == "proposals":  # each proposal and its exact potential (NaN: none)
                outputs[key] = np.zeros((n_iter, dim + 1))
            else:
                outputs[key] = (np.zeros(n_iter, TRANSITION) if key == "records"
                                else np.zeros((n_iter, dim)))
        chunk = max(1, n_iter // CHUNKS_PER_PHASE)
        adapt_step = spec.adapt and self.adapts_step_size(state)
        adapt_mass = spec.adapt and spec.adapt_mass and self.adapt_mass_matrix
        schedule = WarmupSchedule(n_iter, term_buffer=terminal_buffer(n_iter)) if adapt_mass else None
        boundaries = set(range(chunk, n_iter, chunk)) | {n_iter}
        if schedule is not None:
            boundaries |= set(schedule.boundaries())
        # outputs not kept go to chunk-sized scratch (a segment never exceeds a chunk)
        scratch = {"samples": np.empty((chunk, dim)), "records": np.empty(chunk, TRANSITION)}
        ends = np.empty(chunk, dtype=np.intp) if "trajectory" in outputs else None
        ran = 0
        for boundary in sorted(boundaries):
            first = state.iteration
            if boundary <= first:
                continue
            stop = min(boundary, first + budget - ran)
            if stop <= first:
                break
            n = stop - first
            rows = {key: (outputs[key][first:stop] if key in outputs else scratch[key][:n])
                    for key in ("samples", "records")}
            for key in ("gradients", "proposals"):
                rows[key] = outputs[key][first:stop] if key in outputs else None
            accumulate = schedule is not None and schedule.in_slow_window(first)
            start = (outputs["trajectory_ends"][first - 1] if first > 0 else 0) \
                if ends is not None else 0
            try:
                if ends is None:
                    chain.run(generator, n, n_steps, jitter, rows["samples"], rows["records"],
                              rows["gradients"], adapt_step, accumulate,
                              proposals=rows["proposals"])
                else:
                    chain.run(generator, n, n_steps, jitter, rows["samples"], rows["records"],
                              rows["gradients"], adapt_step, accumulate,
                              outputs["trajectory"][start:], ends[:n], proposals=rows["proposals"])
            except BaseException:
                # stopped between two transitions (Ctrl-C, another chain's failure) or failed
                # in one: keep the transitions made, so that the state continues from there
                done = chain.completed
                if ends is not None:
                    outputs["trajectory_ends"][first:first + done] = ends[:done] + start
                state.iteration = first + done
                self._keep_current(name, chain, state, generator)
                bar.transitions_done(name, rows["records"][:done])
                raise
            if ends is not None:
                outputs["trajectory_ends"][first:stop] = ends[:n] + start
            state.iteration = stop
            ran += n
            if accumulate and schedule.window_end(stop - 1):
                self._window_end(chain, state, generator, adapt_step)
            self._keep_current(name, chain, state, generator)
            bar.transitions_done(name, rows["records"])
            if stop < boundary or bar.past_deadline():
                break
        if state.iteration == n_iter and spec.adapt:
            self.finish_adaptation(chain, state, n_iter)
        return ran

    def _window_end(self, chain, state, generator, adapt_step):
        """End of a slow window: install the shrunk variance estimate as the inverse mass
        matrix and restart the step size from Stan's heuristic."""
        n, variance = chain.take_variance()
        inverse_mass = regularized_variance(n, variance)
        chain.metric.set_inverse_mass(inverse_mass)
        state.inverse_mass = inverse_mass
        if adapt_step:
            step_size = initial_step_size(chain, generator, chain.step_size, self.target_accept)
            chain.restart_step_size_adaptation(step_size, self.target_accept)

    # ------------------------------------------------------------------------------------------
    # arguments

    def _initial_points(self, init, chains, generators):
        dim = target_dim(self.target) if hasattr(self.target, "dim") else None
        if init is None:
            if dim is None:
                raise ValueError("the target's dim is unknown: give init= (or dim to the target)")
            return np.stack([g.uniform(-2.0, 2.0, size=dim) for g in generators])
        init = np.array(init)
        if init.dtype.kind not in "iuf":
            raise TypeError(f"init must hold real numbers, got dtype {init.dtype}")
        init = init.astype(np.float64)
        if init.ndim == 1:
            init = np.tile(init, (chains, 1))
        if init.ndim != 2 or init.shape[0] != chains or (dim is not None and init.shape[1] != dim):
            want = f"({dim},) or ({chains}, {dim})" if dim is not None else "(dim,) or (chains, dim)"
            raise ValueError(f"init must have shape {want}, got {np.shape(init)}")
        if not np.all(np.isfinite(init)):
            raise ValueError("init contains non-finite values")
        return init

    @staticmethod
    def _per_chain(value, chains, name):
        if value is None or np.ndim(value) == 0:
            return None if value is None else np.full(chains, float(value))
        if len(value) != chains:
            raise ValueError(f"{name} has {len(value)} entries (one per chain), sampling {chains} chains")
        return np.asarray(value, dtype=np.float64)

    def _inverse_masses(self, dim, chains):
        """The inverse mass matrix of each chain (None: identity), checked; with chains=None
        only checks."""
        from ..validation import check_inverse_mass
        if self.mass_matrix is None and self.inverse_mass_matrix is None:
            return [None] * (chains or 1)
        if self.mass_matrix is not None:
            M = check_inverse_mass(self.mass_matrix, "mass_matrix", dim)
            matrices = [_invert_mass(M, dim)]
        else:
            value = self.inverse_mass_matrix
            if isinstance(value, (list, tuple)):
                matrices = [check_inverse_mass(m, "inverse_mass_matrix", dim) for m in value]
                per_chain = True
            else:
                array = check_inverse_mass(value, "inverse_mass_matrix", dim)
                per_chain = array.ndim == 3 or (array.ndim == 2 and array.shape != (dim, dim))
                matrices = list(array) if per_chain else [array]
            for m in matrices:
                _check_inverse_mass_matrix(m, dim)
            if per_chain:
                if chains is not None and len(matrices) != chains:
                    raise ValueError(f"inverse_mass_matrix has {len(matrices)} per-chain entries, "
                                     f"sampling {chains} chains")
                return matrices
        return matrices * (chains or 1)


def _check_inverse_mass_matrix(m, dim, what="inverse mass matrix"):
    """Raise ValueError unless ``m`` is a positive (dim,) diagonal or a symmetric positive
    definite (dim, dim) matrix (a mass matrix or its inverse)."""
    if m.shape == (dim,):
        if not np.all(m > 0):
            raise ValueError(f"a diagonal {what} must be positive")
    elif m.shape == (dim, dim):
        if not np.allclose(m, m.T):
            raise ValueError(f"the {what} must be symmetric")
        try:
            np.linalg.cholesky(m)
        except np.linalg.LinAlgError:
            raise ValueError(f"the {what} is not positive definite") from None
    else:
        raise ValueError(f"the {what} must have shape ({dim},) or ({dim}, {dim}), got {m.shape}")


def _invert_mass(M, dim):
    """The inverse of a user's mass matrix ((dim,) diagonal or (dim, dim) dense)."""
    _check_inverse_mass_matrix(M, dim, "mass matrix")
    return 1.0 / M if M.ndim == 1 else np.linalg.inv(M)


def user_stacklevel():
    """The ``stacklevel`` that makes a warning point at the first caller outside rnshmc."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame, level = frame.f_back, level + 1
    return level


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


ChainSampler.__init__ = _recording_arguments(ChainSampler.__init__)


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


def _cut_to(state, draws):
    """A copy of a chain's state whose sampling phase ends after ``draws`` iterations (what
    was drawn of a run that was stopped), for a result."""
    index = [name for name, _ in state.phases].index("sampling")
    n = state.phases[index][1]
    sampling = state.outputs.get("sampling", {})
    state = ChainState.from_dict(dict(state.to_dict(),
                                      outputs=dict(state.outputs, sampling={}))).copy()
    state.phases[index] = ["sampling", draws]
    state.outputs["sampling"] = {key: value[:draws].copy() if isinstance(value, np.ndarray)
                                 and value.shape[:1] == (n,) else value
                                 for key, value in sampling.items()}
    state.phase_index, state.iteration = len(state.phases), 0
    return state


def _pickles(sampler):
    """Whether ``sampler`` can go to a spawned process: it pickles, and without functions of
    ``__main__`` (a spawned worker would re-run the user's script to find them, which fails
    in a script without an ``if __name__ == "__main__":`` guard)."""
    import pickle
    try:
        data = pickle.dumps(sampler)
    except Exception:  # noqa: BLE001 - whatever pickle raises for a lambda, a closure...
        return False
    return b"__main__" not in data


class _RunChain:
    """A picklable ``run_chain`` call for other processes (the target is rebuilt there; the
    stop flag is the worker's own; a SIGINT stops the chain, see parallel.interruptible)."""

    def __init__(self, sampler, stop_after, seconds):
        self.sampler, self.stop_after, self.seconds = sampler, stop_after, seconds

    def __call__(self, state):
        deadline = None if self.seconds is None else time.monotonic() + self.seconds
        with interruptible():
            return self.sampler.run_chain(state, stop_after=self.stop_after,
                                          stop_flag=np.zeros(1, dtype=np.int32),
                                          deadline=deadline)


class _Guarded:
    """``run(state)`` as ``(state, None)``, or ``(state, exception)`` after setting the run's
    stop flag (so the other chains stop); a chain not yet started when the flag is up is not
    started. Picklable when ``run`` is."""

    def __init__(self, run, stop):
        self.run, self.stop = run, stop

    def __call__(self, state):
        from .._kernels._chain import StopRequested
        if self.stop[0]:
            return state, StopRequested("not started: another chain failed or the run was "
                                        "interrupted")
        try:
            return self.run(state), None
        except BaseException as error:  # noqa: B902 - Ctrl-C too: the state is kept
            self.stop[0] = 1
            return state, error


def transition_stats(states, phase):
    """Per-chain arrays of a phase's kept outputs, stacked: (chains, n, ...)."""
    return {key: np.stack([s.outputs[phase][key] for s in states])
            for key in states[0].outputs[phase]}


def warn_about_health(name, result):
    """Stan's and PyMC's checks after sampling (R-hat, bulk and tail ESS per chain,
    divergences: :func:`rnshmc.diagnostics.health`): kept in ``result["health"]``, and one
    :class:`~rnshmc.diagnostics.SamplingWarning` saying what failed."""
    from ..diagnostics import SamplingWarning, health
    checks, problems = health(result.samples, result.diverging)
    result["health"] = dict(checks, problems=problems)
    if problems:
        warnings.warn(f"{name}: " + "; ".join(problems) + ".", SamplingWarning,
                      stacklevel=user_stacklevel())


def warn_about_stuck_chains(name, result):
    """Warn about chains that never moved or whose every proposal diverged while sampling."""
    for chain in range(result.samples.shape[0]):
        if np.all(result.diverging[chain]):
            warnings.warn(f"{name} chain {chain}: every proposal of the sampling phase diverged "
                          "(energy error above max_energy_error or non-finite): its draws are "
                          "all the same point. Use a smaller step size.",
                          RuntimeWarning, stacklevel=user_stacklevel())
        elif not np.any(result.accepted[chain]):
            warnings.warn(f"{name} chain {chain}: no proposal of the sampling phase was "
                          "accepted: its draws are all the same point and tell nothing about "
                          "the posterior. Use a smaller step size (or longer warm-up).",
                          RuntimeWarning, stacklevel=user_stacklevel())
