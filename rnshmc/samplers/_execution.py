"""Many chains at once: serially, on threads, on processes or on a Dask cluster.

The execution layer owns what concerns all the chains of a run: the executor (``pool``), the
run's stop flag (a Ctrl-C or one chain's failure stops the others between transitions), the
barriers of the phases (every chain stops there, then one ``join`` runs on all the states, in
this process, whatever the pool: the draws do not depend on the executor) and the segments
between checkpoints. One chain's run is :func:`rnshmc.samplers._runner.run_chain`.
"""
import contextlib
import os
import pickle
import time
import traceback

import numpy as np

from .._kernels._targets import PyCallableTarget
from .._kernels._chain import StopRequested
from ..parallel import (blas_limits, interruptible, is_dask, local_pool, map_chains,
                        runs_in_other_processes, stop_after_transition, threads_per_chain)
from ..targets import as_ctarget
from ._progress import new_run, progress_board
from ._runner import Budget, run_chain
from .phases.base import Phase

__all__ = ["chain_pool", "run_states", "run_to_end", "join_barriers"]


def uses_python_callables(sampler, dim):
    """Whether sampling a ``dim``-dimensional target calls Python functions (a Python target
    or metric): they hold the GIL, so ``pool="auto"`` runs such chains in processes rather
    than threads."""
    return (sampler.calls_python() or
            isinstance(as_ctarget(sampler.target, dim), PyCallableTarget))


def pickles_without_main(sampler):
    """Whether ``sampler`` can go to a spawned process: it pickles, and without functions of
    ``__main__`` (a spawned worker would re-run the user's script to find them, which fails
    in a script without an ``if __name__ == "__main__":`` guard)."""
    try:
        data = pickle.dumps(sampler)
    except Exception:  # noqa: BLE001 - whatever pickle raises for a lambda, a closure...
        return False
    return b"__main__" not in data


def serial_reason(sampler, pool, chains, dim):
    """Why ``pool="auto"`` runs several chains one after another (None: it does not): a
    target of Python functions that cannot reach a spawned process."""
    if pool != "auto" or chains < 2 or not uses_python_callables(sampler, dim):
        return None
    if pickles_without_main(sampler):
        return None
    return (f"{sampler.name}: the {chains} chains run one after another, not in parallel: the "
            "target's Python functions cannot be sent to worker processes (a lambda, a "
            "closure, or a function defined in the script you run). Define them at the top "
            "level of an importable module (a .py file beside your script) to run the chains "
            "in parallel, or pass pool=None to run serially without this message.")


@contextlib.contextmanager
def chain_pool(sampler, pool, chains, dim):
    """The executor of ``pool`` (see ``sample()``; "auto" makes one for the run), with a
    thread pool's BLAS threads limited to the chains' share of the cores."""
    with contextlib.ExitStack() as stack:
        if isinstance(pool, str):
            if pool != "auto":
                raise ValueError(f"pool must be 'auto', None, an executor or a Dask "
                                 f"client, got {pool!r}")
            processes = uses_python_callables(sampler, dim)
            if serial_reason(sampler, pool, chains, dim):
                processes, chains = False, 1  # serially: see sample()
            pool = stack.enter_context(local_pool(chains, processes))
        if pool is not None and not runs_in_other_processes(pool):
            stack.enter_context(blas_limits(threads_per_chain(pool, chains)))
        yield pool


class _RunInProcess:
    """A picklable chain run for other processes (the target is rebuilt there; the stop flag
    is the worker's own; a SIGINT stops the chain, see ``parallel.interruptible``). Its
    progress goes to ``relay`` (a :class:`~rnshmc.samplers._progress.ProgressBoard`'s queue,
    or None), and an exception keeps its traceback (see :func:`with_remote_traceback`)."""

    def __init__(self, sampler, budget, relay=None):
        # (a deadline travels as seconds from the task's start: clocks differ between hosts)
        self.sampler, self.budget, self.relay = sampler, budget, relay
        self.seconds = None if budget.deadline is None else budget.deadline - time.monotonic()

    def __call__(self, state):
        b = self.budget
        deadline = None if self.seconds is None else time.monotonic() + self.seconds
        try:
            with interruptible():
                return run_chain(self.sampler, state,
                                 as_ctarget(self.sampler.target, state.dim),
                                 progress=self.relay is not None,
                                 budget=Budget(b.iterations, deadline, b.until, b.evals),
                                 stop_flag=np.zeros(1, dtype=np.int32), relay=self.relay)
        except Exception as error:  # (a Ctrl-C's KeyboardInterrupt needs no traceback)
            raise with_remote_traceback(error, f"{self.sampler.name} chain {state.chain}, in "
                                               f"worker process {os.getpid()}")


class RemoteTraceback(Exception):
    """The traceback of an exception raised in another process (its ``__cause__`` when it is
    raised here, as ``concurrent.futures`` does: the user's frames are shown)."""

    def __init__(self, text):
        super().__init__(text)
        self.text = text

    def __str__(self):
        return self.text


def with_remote_traceback(error, where):
    """``error`` (raised in this worker process, on its way to the calling one) with its
    formatted traceback attached as ``remote_traceback``: pickling drops a traceback. An
    exception that does not pickle becomes a RuntimeError with its type and message."""
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:  # noqa: BLE001 - whatever an unpicklable exception raises
        error = RuntimeError(f"{type(error).__name__}: {error} (an exception that cannot be "
                             "sent back from a worker process)")
    error.remote_traceback = f'\n"""\n{where}:\n{text}"""'
    return error


def raise_with_remote_traceback(error):
    """Raise ``error``, chained to its traceback from another process if it has one."""
    text = getattr(error, "remote_traceback", None)
    if text is None:
        raise error
    del error.remote_traceback  # (raised again later, e.g. by sample(), it keeps its cause)
    raise error from RemoteTraceback(text)


class _Guarded:
    """``run(state)`` as ``(state, None)``, or ``(state, exception)`` after setting the run's
    stop flag (so the other chains stop); a chain not yet started when the flag is up is not
    started. Picklable when ``run`` is."""

    def __init__(self, run, stop):
        self.run, self.stop = run, stop

    def __call__(self, state):
        if self.stop[0]:
            return state, StopRequested("not started: another chain failed or the run was "
                                        "interrupted")
        try:
            return self.run(state), None
        except BaseException as error:  # noqa: B902 - Ctrl-C too: the state is kept
            self.stop[0] = 1
            return state, error


def run_states(sampler, states, progress=True, pool=None, budget=None, board=None):
    """Continue every chain's state (on ``pool`` if given: an executor or a Dask client) until
    each is done, has spent ``budget`` or waits at a barrier; returns the states.

    If a chain fails (an exception from the model) or the run is interrupted (Ctrl-C), the
    other chains stop after their current transition, every state keeps the transitions
    made, and the exception is raised with the states in its ``states`` attribute (the first
    failure's exception; a Ctrl-C's KeyboardInterrupt). An exception from a chain in another
    process is chained to its traceback there (the model's frames).

    ``board``: where the progress of chains on a process pool is drawn (a
    :class:`~rnshmc.samplers._progress.ProgressBoard`; made for this call if None)."""
    budget = budget or Budget()
    if board is None and progress and relays_progress(pool):
        with progress_board(True) as board:
            return run_states(sampler, states, progress, pool, budget, board)
    stop = np.zeros(1, dtype=np.int32)  # this run's stop flag, watched by its C loops
    if pool is not None and runs_in_other_processes(pool):
        # (the target is rebuilt there)
        run = _RunInProcess(sampler, budget, board.relay if progress and board else None)
    else:
        target = as_ctarget(sampler.target, states[0].dim)  # shared: it holds no scratch
        several = len(states) > 1 and pool is not None
        # a pool thread's OpenMP kernels (the logistic model's) share the cores with the
        # other chains' (OpenMP's limit is per thread; BLAS's is set by chain_pool)
        threads = threads_per_chain(pool, len(states)) if several else None

        def run(state):
            with blas_limits(threads, "openmp") if threads else contextlib.nullcontext():
                return run_chain(sampler, state, target, progress=progress, budget=budget,
                                 stop_flag=stop, position=state.chain if several else None)
    # (a pool of other processes forwards a Ctrl-C to its workers: see map_chains)
    here = pool is None or not runs_in_other_processes(pool)
    try:
        with stop_after_transition(stop) if here else contextlib.nullcontext([False]) as ctrl_c:
            outcomes = map_chains(_Guarded(run, stop), states, pool, stop,
                                  while_waiting=board.draw if board else None)
    except BaseException as error:
        # a Ctrl-C while waiting for a pool's chains, or the pool failed (a Dask worker died
        # more often than the task may, a process pool broke): map_chains gives each chain's
        # outcome, None for a chain whose task did not return (it continues from the state
        # it had)
        outcomes = getattr(error, "outcomes", None)
        if outcomes is None:
            raise
        error.states = [state if outcome is None else outcome[0]
                        for state, outcome in zip(states, outcomes)]
        raise
    states = [state for state, _ in outcomes]
    errors = [error for _, error in outcomes if error is not None]
    failure = next((e for e in errors if not isinstance(e, StopRequested)), None)
    if ctrl_c[0] and failure is None:
        errors = [KeyboardInterrupt("interrupted (Ctrl-C)")]
    if errors:
        error = failure or errors[0]
        error.states = states
        raise_with_remote_traceback(error)
    return states


def relays_progress(pool):
    """Whether the chains' progress on ``pool`` goes through a :class:`ProgressBoard`: a
    process pool (a Dask cluster shows its tasks on its own dashboard)."""
    return pool is not None and runs_in_other_processes(pool) and not is_dask(pool)


def join_barriers(sampler, states, until=None):
    """Run the joins of the phases where chains wait, once every chain is done, waits, or
    has reached sampling iteration ``until`` (a stopping rule's check, which it passes only
    once the waiting chains have caught up: a chain that left a shared barrier, a surrogate
    of its own, does not wait there)."""
    waiting = [s for s in states if sampler.waiting(s)]
    paused = lambda s: until is not None and s.phase == Phase.SAMPLING and s.iteration >= until
    if not waiting or not all(s.done or sampler.waiting(s) or paused(s) for s in states):
        return
    for name in dict.fromkeys(s.phase for s in waiting):  # (in chain order, once each)
        sampler.phase(name).join(states)
    if any(sampler.waiting(s) for s in states):
        raise RuntimeError(f"{sampler.name}: chains still wait after their join (a bug)")


def run_to_end(sampler, states, progress=True, pool="auto", checkpointer=None, rule=None):
    """Run ``states`` to the end of their plans, through the barriers, writing a checkpoint
    after every segment if ``checkpointer`` (:class:`rnshmc.samplers.checkpoint.Checkpointer`)
    is given; returns the states and the stopping record (None without ``rule``).

    With a ``rule`` (:class:`rnshmc.samplers._stopping.StoppingRule`), segments also end at
    its checks and budgets, and the run ends when it says so (the states cut to the draws
    every chain has made). Exceptions carry the states (see :func:`run_states`), and the
    checkpointer has written them before they are raised."""
    every = seconds = None
    if checkpointer is not None:
        every, seconds = checkpointer.every, checkpointer.seconds
    record = None
    new_run()  # (status lines in a log: every chain's first at once)
    written = (time.monotonic(), progress_of(states))  # (when and where the last checkpoint)
    with contextlib.ExitStack() as stack:
        executor = stack.enter_context(chain_pool(sampler, pool, len(states), states[0].dim))
        board = stack.enter_context(progress_board(progress and relays_progress(executor)))
        while not all(s.done for s in states) or (rule is not None and record is None):
            # a rule's checks end segments too: the checkpoint's interval counts from the last
            deadline = None if seconds is None else written[0] + seconds
            iterations = None if every is None else max(1, every - (progress_of(states)
                                                                   - written[1]))
            try:
                reason = None if rule is None else rule.verdict(sampler, states)
                if reason is not None:
                    states, record = rule.stop(sampler, states, reason)
                elif all(s.done for s in states):
                    break
                else:
                    budget = Budget(iterations, deadline) if rule is None \
                        else rule.budget(sampler, states, iterations, deadline)
                    before = positions(sampler, states)
                    states = run_states(sampler, states, progress=progress, pool=executor,
                                        budget=budget, board=board)
                    join_barriers(sampler, states, budget.until)
                    if positions(sampler, states) == before:  # never loop in silence
                        raise RuntimeError(f"{sampler.name}: no chain moved in a segment (a "
                                           f"bug): {[repr(s) for s in states]}")
            except BaseException as error:
                if checkpointer is not None and getattr(error, "states", None) is not None:
                    # (after a failure other than a Ctrl-C the model is not evaluated for the
                    # checkpoint's target check: it may be what failed, see target_check)
                    try:
                        checkpointer.write(error.states, rule,
                                           ask_model=isinstance(error, KeyboardInterrupt))
                    except KeyboardInterrupt:
                        # another Ctrl-C while the model was asked for that check (a costly
                        # model takes a while): the draws are saved without it (resume then
                        # says it cannot check the target)
                        checkpointer.write(error.states, rule, ask_model=False)
                raise
            due = record is not None or all(s.done for s in states) or (
                every is not None and progress_of(states) - written[1] >= every) or (
                seconds is not None and time.monotonic() >= deadline)
            if checkpointer is not None and due:
                checkpointer.write(states, rule)
                written = (time.monotonic(), progress_of(states))
    return states, record


def positions(sampler, states):
    """Where every chain is (phase, iteration, whether it waits at a barrier)."""
    return [(s.phase_index, s.iteration, sampler.waiting(s)) for s in states]


def progress_of(states):
    """The iterations the slowest chain has run (over its plan so far)."""
    return min(s.iterations_done() for s in states)
