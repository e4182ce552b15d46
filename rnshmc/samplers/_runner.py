"""One chain through its plan of phases, in chunks of C transitions, under a budget.

:func:`run_chain` takes a :class:`~rnshmc.state.ChainState` and the sampler that made it, and
runs the phases of its plan (:mod:`rnshmc.samplers.phases`): each phase makes its C chain,
does its one-time start (then its warm-up's), iterates, and does its end. Iterating is the
runner's alone: it runs the phase's segments (the whole phase, or the stretches between a
surrogate sampler's trust reviews and installs), calling the phase after each, and each
segment in chunks of transitions of the C loop (a hundredth of the phase, cut at the
warm-up's window ends). Python is re-entered only at chunk ends, where the state is made
current (so a chain stopped there continues bit for bit), the progress bar moves and the
budget is checked. Step-size and mass-matrix adaptation accumulate inside the C loop; at a
window's end the phase's warm-up installs the new mass matrix.

The runner stops a chain when its plan is done, its :class:`Budget` is spent (iterations, or a
deadline checked at chunk ends), or it reaches a barrier of its phase (a step that needs every
chain: the execution layer runs the phase's ``join`` and calls the runner again).
"""
import time

import numpy as np

from .._kernels._chain import TRANSITION
from ..state import generator_from_json, generator_to_json
from ._progress import Progress, RelayedProgress
from .phases.base import Phase

__all__ = ["Budget", "ChainRun", "run_chain", "exact_evaluations", "CHUNKS_PER_PHASE"]

# chunks per phase: the progress bar moves and the state is current this often
CHUNKS_PER_PHASE = 100


class Budget:
    """How far one call of the runner may take a chain.

    Parameters
    ----------
    iterations : int or None
        At most this many more iterations (None: to the end of the plan).
    deadline : float or None
        A ``time.monotonic()`` value: stop at the first chunk end past it (after at least
        one chunk, so that every call moves the chain on).
    until : int or None
        Stop when the sampling phase has done this many iterations (a stopping rule's next
        check).
    evals : int or None
        Stop at the first chunk end where the chain has made this many exact density
        evaluations (over all its phases; a gradient evaluation counts as one).
    """

    def __init__(self, iterations=None, deadline=None, until=None, evals=None):
        self.iterations = iterations
        self.deadline = deadline
        self.until = until
        self.evals = evals

    def iterations_for(self, state):
        """The iterations this budget allows ``state``."""
        n = state.iterations_left() if self.iterations is None else self.iterations
        if self.until is not None:
            n = min(n, state.iterations_until(Phase.SAMPLING, self.until))
        return n

    def spent(self, sampler, state):
        """Whether the deadline has passed or the chain has made its evaluations."""
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return True
        return self.evals is not None and exact_evaluations(sampler, state) >= self.evals


def exact_evaluations(sampler, state):
    """The exact density evaluations of a chain so far, over its phases (a gradient
    evaluation counts as one: it evaluates the density too)."""
    return int(sum(sampler.phase(name).exact_evals(state)[0] for name, _ in state.phases))


class ChainRun:
    """One chain's run, as its phases see it: the sampler (settings), the chain's state, the
    C target, the chain's random stream, the progress bar and the stop flag."""

    def __init__(self, sampler, state, target, generator, bar, stop_flag, budget):
        self.sampler, self.state, self.target = sampler, state, target
        self.generator, self.bar, self.stop_flag, self.budget = generator, bar, stop_flag, budget

    def budget_spent(self):
        """Whether the chain must pause at this chunk end (see :meth:`Budget.spent`)."""
        return self.budget.spent(self.sampler, self.state)

    def keep_current(self, name, chain):
        """Copy the C chain's state, its counters and the random stream into the state."""
        state = self.state
        state.kernel = chain.get_state()
        state.evals[name] = [chain.n_density_evals, chain.n_gradient_evals,
                             chain.n_metric_evals, chain.n_metric_derivative_evals]
        state.rng = generator_to_json(self.generator)

    def run_chunks(self, phase, chain, budget):
        """Run ``phase`` from ``state.iteration`` for at most ``budget`` iterations, in chunks
        (cut at the warm-up's window ends); returns the iterations run."""
        state = self.state
        n_iter = state.phase_length(phase.name)
        if n_iter == 0 or budget <= 0:
            return 0
        dim = state.dim
        outputs = state.outputs.setdefault(phase.name, {})
        n_steps, jitter = phase.trajectory(self)
        for key in phase.keep:
            if key in outputs:
                continue
            if key == "trajectory":  # every leapfrog step's (q, U, grad U), and where each
                # transition's rows end
                outputs[key] = np.zeros((n_iter * phase.recorded_steps(self), 2 * dim + 1))
                outputs["trajectory_ends"] = np.zeros(n_iter, dtype=np.intp)
            elif key == "proposals":  # each proposal and its exact potential (NaN: none)
                outputs[key] = np.zeros((n_iter, dim + 1))
            else:
                outputs[key] = (np.zeros(n_iter, TRANSITION) if key == "records"
                                else np.zeros((n_iter, dim)))
        chunk = max(1, n_iter // CHUNKS_PER_PHASE)
        warmup = phase.warmup
        adapt_step = warmup is not None and warmup.adapts_step_size(self)
        schedule = (warmup.schedule(state, n_iter)
                    if warmup is not None and warmup.adapts_mass(self) else None)
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
                    chain.run(self.generator, n, n_steps, jitter, rows["samples"],
                              rows["records"], rows["gradients"], adapt_step, accumulate,
                              proposals=rows["proposals"])
                else:
                    chain.run(self.generator, n, n_steps, jitter, rows["samples"],
                              rows["records"], rows["gradients"], adapt_step, accumulate,
                              outputs["trajectory"][start:], ends[:n],
                              proposals=rows["proposals"])
            except BaseException:
                # stopped between two transitions (Ctrl-C, another chain's failure) or failed
                # in one: keep the transitions made, so that the state continues from there
                done = chain.completed
                if ends is not None:
                    outputs["trajectory_ends"][first:first + done] = ends[:done] + start
                state.iteration = first + done
                self.keep_current(phase.name, chain)
                self.bar.transitions_done(phase.name, rows["records"][:done])
                raise
            if ends is not None:
                outputs["trajectory_ends"][first:stop] = ends[:n] + start
            state.iteration = stop
            ran += n
            if accumulate and schedule.window_end(stop - 1):
                warmup.window_end(self, chain, adapt_step)
            self.keep_current(phase.name, chain)
            self.bar.transitions_done(phase.name, rows["records"])
            if stop < boundary or self.budget_spent():
                break
        if state.iteration == n_iter and warmup is not None and not phase.waiting(state):
            warmup.finish(self, chain)
        return ran

    def iterate(self, phase, chain, budget):
        """Run ``phase`` from ``state.iteration`` for at most ``budget`` iterations, segment by
        segment (:meth:`Phase.segment_stop`), each in chunks; returns the iterations run. It
        stops early where the phase's dynamics changed after a segment (its chain must be
        made anew), at a barrier, or when the budget's deadline or evaluations are spent."""
        state = self.state
        n_iter = state.phase_length(phase.name)
        ran = 0
        while ran < budget and state.iteration < n_iter:
            first = state.iteration
            stop = min(phase.segment_stop(self, n_iter), n_iter)
            if stop <= first:  # never loop in silence
                raise RuntimeError(f"{self.sampler.name} chain {state.chain}: a {phase.name} "
                                   f"segment ends where it starts ({first}; a bug)")
            phase.begin_segment(self, chain, first, stop)
            n = self.run_chunks(phase, chain, min(budget - ran, stop - first))
            if n == 0:
                break
            ran += n
            if phase.end_segment(self, chain, first, stop):
                break  # (the runner makes the phase's new chain)
            if phase.waiting(state) or self.budget_spent():
                break
        return ran

    def run(self):
        """Continue the chain until its plan is done, its budget is spent or it waits at a
        barrier; the state is updated in place."""
        state, sampler = self.state, self.sampler
        budget = self.budget.iterations_for(state)
        started = budget
        while not state.done and (budget > 0 or state.phases[state.phase_index][1] == 0):
            name, n_iter = state.phases[state.phase_index]
            phase = sampler.phase(name)
            # (the deadline only after some progress: a run must move forward)
            if phase.waiting(state) or (budget < started and self.budget_spent()):
                break
            start = time.perf_counter()
            chain = phase.make_chain(self)
            if chain is not None:
                chain.set_stop_flag(self.stop_flag)
            if not state.phase_started:
                phase.begin(self, chain)
                if phase.warmup is not None:
                    phase.warmup.begin(self, chain)
                state.phase_started = True
                if chain is not None:
                    self.keep_current(name, chain)
            elif chain is not None:
                chain.set_state(state.kernel)
            budget -= self.iterate(phase, chain, budget) if n_iter else 0
            # (a phase may wait at its end: a check there can lengthen it)
            if state.iteration == n_iter and not phase.waiting(state):
                phase.end(self, chain)
                if chain is not None:
                    self.keep_current(name, chain)
                state.phase_index += 1
                state.iteration = 0
                state.phase_started = False
            state.rng = generator_to_json(self.generator)
            state.timings[name] = state.timings.get(name, 0.0) + time.perf_counter() - start
        return state


def run_chain(sampler, state, target, progress=False, budget=None, stop_flag=None,
              position=None, relay=None):
    """Continue one chain from ``state`` until its plan is done, its ``budget`` is spent
    (:class:`Budget`), or it waits at a barrier; ``state`` is updated in place and returned.

    Parameters
    ----------
    sampler : rnshmc.samplers._base.Sampler
        The sampler whose plan the state follows.
    state : rnshmc.ChainState
    target : CTarget
        The sampler's target as a C-level target (shared between chains: it holds no scratch).
    progress : bool
    budget : Budget or None
    stop_flag : None or ndarray of one int32
        A raised flag stops the C loop between transitions (see ``Chain.set_stop_flag``).
    position : int or None
        The progress bar's line.
    relay : queue-like or None
        In another process: the calling process's progress queue, where the bar sends what
        it would draw (see :class:`rnshmc.samplers._progress.ProgressBoard`).
    """
    if state.sampler != sampler.name:
        raise ValueError(f"this state belongs to a {state.sampler} chain, not {sampler.name}")
    if target.dim != state.dim:
        raise ValueError(f"the state has dim {state.dim}, the target {target.dim}")
    budget = budget or Budget()
    generator = generator_from_json(state.rng)
    total = min(budget.iterations_for(state), state.iterations_left())
    desc = f"{sampler.name} chain {state.chain}"
    bar = RelayedProgress(relay, state.chain, total, desc) if progress and relay is not None \
        else Progress(progress, total, desc, position)
    try:
        return ChainRun(sampler, state, target, generator, bar, stop_flag, budget).run()
    except BaseException:
        state.rng = generator_to_json(generator)
        raise
    finally:
        bar.close()
