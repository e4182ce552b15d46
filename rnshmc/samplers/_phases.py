"""Phases, and the parts samplers assemble from them.

A sampler is a declared plan of phases (see ``docs/architecture.md``). A :class:`Phase` says
how it makes its C chain from the chain's state, what it does at its start and end, how it
iterates (by default: the runner's chunks), which outputs it keeps, whether it adapts the
kernel, and optionally a barrier: ``waiting(state)`` is True where the chain must stop until
``join(states)`` has run on every chain (a surrogate fitted to all the chains' explorations,
the installs of a shared online estimator). The execution layer runs the joins.

The parts here are shared by the samplers: exact HMC (warm-up, exploration, sampling), the
generalized leapfrog of RMHMC, adaptive Metropolis, the surrogate fit (per chain or shared),
surrogate dynamics with the trust watch and the online installs, and the Riemannian dynamics
on a surrogate's Hessian. A part that must remember something per chain keeps it in a typed
:class:`~rnshmc.state.PartState` in ``state.parts``.
"""
import dataclasses
import math
import warnings
from typing import Optional

import numpy as np

from .._kernels._integrators import GeneralizedLeapfrog, Leapfrog
from .._kernels._metrics import EuclideanMetric
from .._kernels._metropolis import MetropolisChain
from .._kernels._chain import TRANSITION, NonFiniteStart
from .._kernels._transition import Chain
from ..adaptation import (RepeatedWarmup, WarmupSchedule, initial_step_size, regularized_variance,
                          terminal_buffer, trajectory_length_for_min_ess)
from ..state import PartState, generator_from_json, generator_to_json
from ..surrogate import (RandomNetworkSurrogate, Surrogate, gradient_flops,
                         surrogate_from_state)
from ..validation import (check_integer, check_inverse_mass, check_per_chain_real, check_real,
                          user_stacklevel)

# the first window of adaptive Metropolis's proposal covariance (then doubling, Stan's schedule)
FIRST_WINDOW = 50
# the largest number of leapfrog steps the automatic trajectory length considers
MAX_AUTO_STEPS = 1024


# ---------------------------------------------------------------------------------------------
# settings of exact HMC chains


class LeapfrogSettings:
    """The settings of an exact-HMC chain: leapfrog step size and steps, mass matrix, and
    their adaptation (checked once, here).

    Parameters
    ----------
    step_size : float, ndarray of shape (chains,) or None
        None adapts it (dual averaging to ``target_accept``) where a phase adapts.
    n_steps : int
    jitter : bool
    mass_matrix, inverse_mass_matrix : None or ndarray
        Give one of them, or neither (the identity). ``inverse_mass_matrix`` may be one per
        chain: (chains, dim), (chains, dim, dim) or a list.
    adapt_mass_matrix : bool or None
        None: only when neither a step size nor a mass matrix is given.
    target_accept : float
    max_energy_error : float
    dim : int or None
        The target's dimension, to check the mass matrix at once.
    """

    def __init__(self, step_size=None, n_steps=10, jitter=True, mass_matrix=None,
                 inverse_mass_matrix=None, adapt_mass_matrix=None, target_accept=0.8,
                 max_energy_error=1000.0, dim=None):
        self.step_size = None if step_size is None else check_per_chain_real(step_size, "step_size")
        self.n_steps = check_integer(n_steps, "n_steps", minimum=1)
        self.jitter = bool(jitter)
        if mass_matrix is not None and inverse_mass_matrix is not None:
            raise ValueError("give mass_matrix or inverse_mass_matrix, not both")
        self.mass_matrix = mass_matrix
        self.inverse_mass_matrix = inverse_mass_matrix
        if dim is not None:  # check now rather than at sample()
            self.inverse_masses(dim, None)
        if adapt_mass_matrix is None:
            adapt_mass_matrix = (step_size is None and mass_matrix is None
                                 and inverse_mass_matrix is None)
        self.adapt_mass_matrix = bool(adapt_mass_matrix)
        self.target_accept = check_real(target_accept, "target_accept", lower=0.0, upper=1.0)
        self.max_energy_error = check_real(max_energy_error, "max_energy_error", lower=0.0)

    def step_size_of(self, chain):
        """The step size given for chain ``chain`` (None: adapted)."""
        if self.step_size is None:
            return None
        return float(self.step_size) if np.ndim(self.step_size) == 0 \
            else float(self.step_size[chain])

    def check_chains(self, chains):
        """Raise ValueError unless per-chain settings have one entry per chain."""
        if self.step_size is not None and np.ndim(self.step_size) \
                and len(self.step_size) != chains:
            raise ValueError(f"step_size has {len(self.step_size)} entries (one per chain), "
                             f"sampling {chains} chains")

    def inverse_masses(self, dim, chains):
        """The inverse mass matrix of each chain (None: identity), checked; with chains=None
        only checks."""
        if self.mass_matrix is None and self.inverse_mass_matrix is None:
            return [None] * (chains or 1)
        if self.mass_matrix is not None:
            M = check_inverse_mass(self.mass_matrix, "mass_matrix", dim)
            _check_mass(M, dim, "mass matrix")
            matrices = [1.0 / M if M.ndim == 1 else np.linalg.inv(M)]
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
                _check_mass(m, dim, "inverse mass matrix")
            if per_chain:
                if chains is not None and len(matrices) != chains:
                    raise ValueError(f"inverse_mass_matrix has {len(matrices)} per-chain "
                                     f"entries, sampling {chains} chains")
                return matrices
        return matrices * (chains or 1)


def _check_mass(m, dim, what):
    """Raise ValueError unless ``m`` is a positive (dim,) diagonal or a symmetric positive
    definite (dim, dim) matrix."""
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


def euclidean_chain(dynamics, state, max_energy_error, test=None, delayed_acceptance=False):
    """A leapfrog chain over ``dynamics`` (Metropolis test on ``test``, default the dynamics)
    with the chain's inverse mass matrix."""
    return Chain(dynamics, test, EuclideanMetric(state.dim, state.inverse_mass), Leapfrog(),
                 max_energy_error=max_energy_error, delayed_acceptance=delayed_acceptance)


def continue_from_previous(run, chain):
    """Put ``chain`` where the previous phase left the chain (the first phase: at its initial
    point, see :func:`start_where_finite`); the new phase's counters start at zero."""
    if run.state.kernel is None:
        start_where_finite(run, chain)
    else:
        chain.set_state(run.state.kernel, counters=False)


# starting points a chain tries before giving up (Stan's number)
MAX_START_TRIES = 100


@dataclasses.dataclass
class GivenStart(PartState):
    """The starting point a chain was given (tries after it are jittered around it): by the
    user (``source`` "init") or by the model (``source`` "model": its ``init_point``)."""
    point: Optional[np.ndarray] = None
    source: str = "init"


def start_where_finite(run, chain, shift=0.0, scale=1.0):
    """Put a new chain at its initial point or, where the log density or its gradient is not
    finite there (-inf, NaN), at new points until one is, at most ``MAX_START_TRIES`` in all,
    as Stan does: uniform in (-2, 2), or, for an ``init`` the user gave or the model's
    ``init_point``, that point plus a jitter uniform in (-1, 1). Each try is a model
    evaluation, counted; the chain's ``state.init`` becomes the point it started at. A model
    that raises is not retried.
    Points are the target's; a chain whose dynamics run on ``(q - shift) / scale`` (L2HMC's
    standardised coordinates) is given those.

    Raises
    ------
    ValueError
        Naming the sampler, the chain, the last point tried and what the model returned.
    """
    state = run.state
    given = state.parts.get("start")
    for attempt in range(MAX_START_TRIES):
        point = state.init if attempt == 0 else (
            given.point + run.generator.uniform(-1.0, 1.0, size=state.dim) if given is not None
            else run.generator.uniform(-2.0, 2.0, size=state.dim))
        try:
            chain.set_position((np.asarray(point, dtype=np.float64) - shift) / scale)
        except NonFiniteStart as error:
            failure = error
            continue
        state.init = np.array(point, dtype=np.float64)
        return
    where = ("uniform in (-2, 2)" if given is None else "around the given init (jittered by "
             "up to 1)" if given.source == "init" else "around the model's init_point "
             "(jittered by up to 1)")
    last = str(failure)
    if np.any(np.asarray(shift) != 0.0) or np.any(np.asarray(scale) != 1.0):
        last += f" (standardised; the target's point: {np.array2string(point)})"
    raise ValueError(f"{run.sampler.name} chain {state.chain}: no starting point where the "
                     f"model is finite in {MAX_START_TRIES} tries {where}; at the last, "
                     f"{last}. Give init= a point (one per chain: shape (chains, dim)) "
                     "where the log density and its gradient are finite.") from failure


# ---------------------------------------------------------------------------------------------
# phases


class Phase:
    """One phase of a plan (see the module docstring). The base is a phase without a chain.

    Attributes
    ----------
    name : str
        Its name in the plan (and in ``state.outputs``, ``state.evals``, ``state.timings``).
    keep : tuple of str
        Outputs kept for every iteration: "samples", "records", "gradients" (the dynamics
        gradient at each state), "trajectory" (every leapfrog step's (q, U, grad U), with
        "trajectory_ends"), "proposals" (each proposal and its exact potential, NaN where it
        was not evaluated). Others go to reused chunk buffers.
    adapt : bool
        Whether its iterations adapt the kernel (see :meth:`adapts_step_size`).
    """

    keep = ()
    adapt = False

    def __init__(self, name):
        self.name = name

    def trajectory(self, run):
        """(n_steps, jitter) of its transitions."""
        return 1, False

    def make_chain(self, run):
        """Its C chain (None: a phase without iterations)."""
        return None

    def begin(self, run, chain):
        """One-time work when the phase starts (``chain`` may be None)."""
        if chain is not None:
            continue_from_previous(run, chain)

    def iterate(self, run, chain, budget):
        """Run at most ``budget`` iterations from ``state.iteration``; return how many ran."""
        return run.run_chunks(self, chain, budget)

    def end(self, run, chain):
        """One-time work when the phase has run all its iterations."""

    def waiting(self, state):
        """Whether the chain waits at this phase's barrier (see :meth:`join`)."""
        return False

    def join(self, states):
        """The barrier's work, on every chain's state at once, in chain order, in the calling
        process (so the draws do not depend on where the chains run)."""

    def adapts_step_size(self, run):
        return False

    def adapts_mass(self, run):
        return False

    def warmup_schedule(self, state, n_iter):
        """The windows of the mass matrix's adaptation over the phase's ``n_iter``
        iterations in a chain (where it adapts the mass matrix)."""
        return WarmupSchedule(n_iter, term_buffer=terminal_buffer(n_iter))

    def window_end(self, run, chain, adapt_step):
        """At the end of a slow window of the warm-up (see :meth:`adapts_mass`)."""

    def finish_adaptation(self, run, chain):
        """After the last iteration of an adapting phase."""

    def report(self, result, states):
        """Add what this phase knows to a run's result (after the base assembly)."""

    def exact_evals(self, state):
        """[density, gradient, metric] evaluations of the model (exact ones: a surrogate's
        are not counted) this phase has made in a chain."""
        return (list(state.evals.get(self.name, [])) + [0, 0, 0])[:3]

    def extended(self, states, length):
        """The sampling phase of every chain was lengthened to ``length`` iterations (a run
        under a stopping rule: see ``Sampler.extend_sampling``)."""


class HMCPhase(Phase):
    """Exact HMC with the leapfrog (the sampler's target for dynamics and test).

    Parameters
    ----------
    name : str
    leapfrog : LeapfrogSettings
    adapt : bool
        Stan's warm-up in this phase: dual averaging of the step size unless it is given,
        and the windowed diagonal mass matrix when ``leapfrog.adapt_mass_matrix``.
    keep : tuple of str
    """

    def __init__(self, name, leapfrog, adapt=False, keep=()):
        super().__init__(name)
        self.leapfrog, self.adapt, self.keep = leapfrog, adapt, tuple(keep)

    def trajectory(self, run):
        return self.leapfrog.n_steps, self.leapfrog.jitter

    def make_chain(self, run):
        return euclidean_chain(run.target, run.state, self.leapfrog.max_energy_error)

    def begin(self, run, chain):
        continue_from_previous(run, chain)
        if self.adapt:
            # the warm-up's trajectories, and its step-size search, stay near where the chain
            # has been: a costly model is never asked for a point absurdly far out
            chain.bound_probes(True)
            start_step_size(run, chain, self.leapfrog.step_size_of(run.state.chain),
                            self.leapfrog.target_accept)

    def adapts_step_size(self, run):
        return self.adapt and self.leapfrog.step_size_of(run.state.chain) is None

    def adapts_mass(self, run):
        return self.adapt and self.leapfrog.adapt_mass_matrix

    def window_end(self, run, chain, adapt_step):
        # install the shrunk variance estimate as the inverse mass matrix and restart the
        # step size from Stan's heuristic
        n, variance = chain.take_variance()
        inverse_mass = regularized_variance(n, variance)
        chain.metric.set_inverse_mass(inverse_mass)
        run.state.inverse_mass = inverse_mass
        if adapt_step:
            step_size = initial_step_size(chain, run.generator, chain.step_size,
                                          self.leapfrog.target_accept)
            chain.restart_step_size_adaptation(step_size, self.leapfrog.target_accept)

    def finish_adaptation(self, run, chain):
        if self.adapts_step_size(run) and run.state.phase_length(self.name) > 0:
            chain.step_size = chain.final_step_size


def start_step_size(run, chain, given, target_accept):
    """At the start of an adapting phase: the given step size, or Stan's heuristic from 1
    with dual averaging started from it."""
    if given is None:
        step_size = initial_step_size(chain, run.generator, target_accept=target_accept)
        chain.restart_step_size_adaptation(step_size, target_accept)
    else:
        chain.step_size = given


class TrainingWindow:
    """What an exploration phase shares: its length, the final ``n_train`` iterations that
    train the surrogate (None: all but the first fifth, the papers' protocol scaled to the
    exploration), and the check that the chain moved in them."""

    KIND = "exploration"  # its name in messages

    def __init__(self, n_train):
        self.n_train = None if n_train is None else check_integer(n_train, "n_train", 1)

    def length(self, n_explore):
        """The exploration's iterations, checked against ``n_train``."""
        n_explore = check_integer(n_explore, "tune (exploration iterations)", minimum=2)
        n_train = n_explore - n_explore // 5 if self.n_train is None else self.n_train
        if n_train > n_explore:
            raise ValueError(f"n_train ({n_train}) exceeds the exploration length ({n_explore})")
        return n_explore

    def window(self, state):
        """The training window: a slice of the exploration's iterations."""
        n_explore = state.phase_length("exploration")
        n_train = n_explore - n_explore // 5 if self.n_train is None else self.n_train
        return slice(n_explore - n_train, n_explore)

    def check_moved(self, state, sampler_name):
        """Raise RuntimeError if the window has no accepted move; else its acceptance rate."""
        accepted = state.outputs["exploration"]["records"]["accepted"][self.window(state)]
        if not accepted.any():
            raise RuntimeError(
                f"{sampler_name} chain {state.chain}: the {self.KIND} accepted no move in its "
                f"last {accepted.size} iterations, so there is nothing to fit a surrogate to. "
                f"{self.ADVICE}")
        return float(accepted.mean())


class HMCExploration(TrainingWindow, HMCPhase):
    """Exact HMC whose states (with potentials and gradients) are a surrogate's training data.

    Parameters
    ----------
    leapfrog : LeapfrogSettings
    n_train : int or None
        The final iterations used for training; None: all but the first fifth (the papers'
        protocol scaled to the exploration).
    training_data : {"trajectories", "states"}
        Every leapfrog step of the window's trajectories (with its exact potential and
        gradient), or the chain states (repeated rows from rejections included).
    check : ExplorationCheck or None
        Where a chain's state has ``ExploreChecks`` (``tune="auto"`` with training data
        "trajectories", whose last rows are the proposals it needs), the exploration runs in
        rounds and, after each, this check decides whether it goes on (see
        :class:`ExplorationCheck`).
    """

    KIND = "exact-HMC exploration"
    ADVICE = ("Its step size or mass matrix is unsuitable: give a smaller step_size, a longer "
              "exploration, or let the exploration adapt (step_size=None).")

    def __init__(self, leapfrog, n_train=None, training_data="trajectories", check=None):
        if training_data not in ("states", "trajectories"):
            raise ValueError(f"training_data must be 'states' or 'trajectories', got "
                             f"{training_data!r}")
        keep = ("samples", "records", "gradients")
        if training_data == "trajectories":  # (also the checks' proposals)
            keep += ("trajectory",)
        HMCPhase.__init__(self, "exploration", leapfrog, adapt=True, keep=keep)
        TrainingWindow.__init__(self, n_train)
        self.training_data, self.check = training_data, check

    def training_rows(self, state, stop=None):
        """The window's training rows (up to exploration iteration ``stop``, default the
        end): (Q, U, gradients)."""
        history = state.outputs[self.name]
        window = self.window(state)
        window = slice(window.start, window.stop if stop is None else stop)
        if self.training_data == "trajectories":
            # the steps of the window's trajectories, except those of diverging ones (whose
            # far-out points would dominate the least-squares fit)
            ends = history["trajectory_ends"][:window.stop]
            rows_per_iteration = np.diff(ends, prepend=0)
            wanted = np.zeros(len(ends), dtype=bool)
            wanted[window] = ~history["records"]["diverging"][window].astype(bool)
            rows = history["trajectory"][:ends[-1]][np.repeat(wanted, rows_per_iteration)]
            d = state.dim
            # and steps above the window's highest state potential plus the states' range:
            # early trajectories, before the step size settles, reach far into the tails
            U = -history["records"]["log_density"][window]
            rows = rows[rows[:, d] <= 2 * np.max(U) - np.min(U)]
            return rows[:, :d], rows[:, d], rows[:, d + 1:]
        return (history["samples"][window], -history["records"]["log_density"][window],
                history["gradients"][window])

    def proposals(self, state, iterations):
        """The exact potentials (U0, U1) at the start and the proposal of each of the
        exploration's ``iterations`` (a slice; its first iteration > 0), their positions
        (Q0, Q1), and each transition's acceptance probability."""
        history = state.outputs[self.name]
        records = history["records"]
        before = slice(iterations.start - 1, iterations.stop - 1)
        last_rows = history["trajectory"][history["trajectory_ends"][iterations] - 1]
        d = state.dim
        return (history["samples"][before], -records["log_density"][before],
                last_rows[:, :d], last_rows[:, d], records["accept_prob"][iterations])

    def waiting(self, state):
        checks = state.parts.get("explore_checks")
        return (checks is not None and state.phase == self.name and state.phase_started
                and state.iteration == state.phase_length(self.name)
                and checks.checked_at < state.iteration)

    def warmup_schedule(self, state, n_iter):
        checks = state.parts.get("explore_checks")
        if checks is None:
            return HMCPhase.warmup_schedule(self, state, n_iter)
        return RepeatedWarmup(checks.round_length, n_iter)  # (rounds may be added)

    def join(self, states):
        waiting = [s for s in states if self.waiting(s)]
        if waiting:
            self.check(self, waiting)

    def report(self, result, states):
        if all("explore_checks" in s.parts for s in states):
            result["exploration"] = [dict(iterations=s.phase_length(self.name),
                                          reason=s.parts["explore_checks"].reason,
                                          checks=list(s.parts["explore_checks"].checks))
                                     for s in states]


@dataclasses.dataclass
class ExploreChecks(PartState):
    """An exploration that goes on, in rounds, until a surrogate fitted to it predicts the
    next states well (see :class:`ExplorationCheck`)."""
    round_length: int = 0
    max_length: int = 0
    checked_at: int = 0                      # the exploration iteration of the last check
    checks: list = dataclasses.field(default_factory=list)
    reason: str = ""                         # why it stopped

    @classmethod
    def from_tree(cls, tree):
        tree = dict(tree)
        tree.pop("kind", None)
        tree["checks"] = [{k: (v.item() if isinstance(v, np.ndarray) else v)
                           for k, v in dict(c).items()} for c in tree.get("checks") or []]
        return cls(**{k: (int(v) if k in ("round_length", "max_length", "checked_at") else v)
                      for k, v in tree.items()})


class ExplorationCheck:
    """Whether an exploration has gathered enough for the surrogate (``tune="auto"``).

    After each round of the exploration, a surrogate is fitted to the training data except
    the round's last fifth (with a shared surrogate, all the chains' data pooled), and its
    acceptance is predicted on those held-out transitions, which cost nothing extra: where
    the exact transition from q0 to the proposal q1 had acceptance min(1, exp(-dH)), the
    surrogate's dynamics would have had (their energy error being the same leapfrog's)
    min(1, exp(-dH - (e(q1) - e(q0)))), e = U - U_surrogate (dH <= 0 taken as 0: the
    prediction errs low). The exploration stops when the predicted mean acceptance is at
    least ``GOOD_ENOUGH`` times the exact one, or at ``max_length``; else it goes on for
    another round. Every check is recorded (``result["exploration"]``). The training phase
    then fits the surrogate to all the data, held-out rounds included.
    """

    GOOD_ENOUGH = 0.85
    HELD_OUT = 5  # the round's last 1/HELD_OUT iterations are held out

    def __init__(self, sampler_name, settings, share):
        self.sampler_name, self.settings, self.share = sampler_name, settings, share

    def __call__(self, exploration, states):
        groups = [states] if self.share else [[s] for s in states]
        for group in groups:
            self.check_group(exploration, group)

    def check_group(self, exploration, states):
        first = states[0]
        checks = first.parts["explore_checks"]
        n = first.phase_length(exploration.name)
        held_out = max(1, checks.round_length // self.HELD_OUT)
        for state in states:
            exploration.check_moved(state, self.sampler_name)
        Q, U, G = (None if parts[0] is None else np.concatenate(parts) for parts in
                   zip(*(exploration.training_rows(s, stop=n - held_out) for s in states)))
        generator = generator_from_json(first.rng)
        surrogate = self.settings.fit(first.dim, generator, Q, U, G,
                                      self.settings.hidden_units(first.dim))
        first.rng = generator_to_json(generator)
        Q0, U0, Q1, U1, exact = (np.concatenate(parts) for parts in zip(
            *(exploration.proposals(s, slice(n - held_out, n)) for s in states)))
        error_change = (U1 - surrogate.predict(Q1)) - (U0 - surrogate.predict(Q0))
        with np.errstate(divide="ignore", over="ignore"):
            log_exact = np.log(exact)
            predicted = np.exp(np.minimum(0.0, log_exact - error_change))
        record = dict(iteration=n, predicted_acceptance=float(predicted.mean()),
                      exact_acceptance=float(exact.mean()),
                      error_change_rms=float(np.sqrt(np.mean(error_change ** 2))),
                      training_points=int(len(U)), held_out=int(len(exact)))
        good = record["predicted_acceptance"] >= self.GOOD_ENOUGH * record["exact_acceptance"]
        longest = n + checks.round_length > checks.max_length
        for state in states:
            checks = state.parts["explore_checks"]
            checks.checks.append(dict(record))
            checks.checked_at = n
            if good or longest:
                checks.reason = ("the surrogate predicts well" if good
                                 else "the longest exploration")
            else:
                state.extend_phase(exploration.name, n + checks.round_length)


class RiemannianPhase(Phase):
    """Exact RMHMC: the generalized leapfrog with a position-dependent metric.

    Parameters
    ----------
    name : str
    make_metric : callable
        ``make_metric(dim)``: a new metric object (each chain factorises its own G).
    solver : dict
        ``GeneralizedLeapfrog``'s settings: tol, max_iterations, newton.
    step_size, n_steps, jitter, target_accept, max_energy_error
        As for :class:`LeapfrogSettings` (no mass matrix).
    adapt : bool
        Dual averaging of the step size (unless given).
    keep : tuple of str
    """

    def __init__(self, name, make_metric, solver, leapfrog, adapt=False, keep=()):
        super().__init__(name)
        self.make_metric, self.solver, self.leapfrog = make_metric, solver, leapfrog
        self.adapt, self.keep = adapt, tuple(keep)

    def trajectory(self, run):
        return self.leapfrog.n_steps, self.leapfrog.jitter

    def make_chain(self, run):
        return riemannian_chain(run.target, None, self.make_metric(run.state.dim),
                                run.state.dim, self.solver, self.leapfrog.max_energy_error)

    def begin(self, run, chain):
        state = run.state
        if state.phase_index and state.phases[state.phase_index - 1][0] == "approach":
            # after the exact-HMC approach: only its position carries over
            chain.set_position(state.kernel["position"])
        else:
            continue_from_previous(run, chain)
        if self.adapt:
            start_step_size(run, chain, self.leapfrog.step_size_of(run.state.chain),
                            self.leapfrog.target_accept)

    def adapts_step_size(self, run):
        return self.adapt and self.leapfrog.step_size_of(run.state.chain) is None

    def finish_adaptation(self, run, chain):
        if self.adapts_step_size(run) and run.state.phase_length(self.name) > 0:
            chain.step_size = chain.final_step_size


def riemannian_chain(dynamics, test, metric, dim, solver, max_energy_error):
    """A generalized-leapfrog chain with ``metric``."""
    return Chain(dynamics, test, metric,
                 GeneralizedLeapfrog(dim, solver["tol"], solver["max_iterations"],
                                     solver["newton"]),
                 max_energy_error=max_energy_error)


def riemannian_report(result, states, phase="sampling", exact_metric=False):
    """Add the implicit solver's statistics of ``phase`` to a result: ``solver_iterations``
    (chains, draws): fixed-point iterations of each transition's trajectory;
    ``mean_solver_iterations`` per chain; ``n_implicit_failures`` per chain (unconverged
    solves: rejected proposals). With ``exact_metric`` (the metric is the model's own, not a
    surrogate's: its evaluations are exact model work), per chain ``n_metric_evals`` and
    ``n_metric_derivative_evals`` over all phases and their ``_sampling`` counts."""
    if exact_metric:
        def counts(index, phases):
            return np.array([sum(s.evals.get(p, [0] * 4)[index] for p in phases)
                             for s in states], dtype=np.int64)
        every = [name for name, _ in states[0].phases]
        for index, key in ((2, "n_metric_evals"), (3, "n_metric_derivative_evals")):
            result[key] = counts(index, every)
            result[key + "_sampling"] = counts(index, [phase])
    records = np.stack([s.outputs[phase]["records"] for s in states])
    result["solver_iterations"] = records["solver_iterations"].copy()
    result["implicit_failed"] = records["solver_failed"].astype(bool)
    result["n_implicit_failures"] = records["solver_failed"].sum(axis=1).astype(np.int64)
    steps = np.maximum(records["n_steps"], 1)
    result["mean_solver_iterations"] = (records["solver_iterations"] / steps).mean(axis=1)
    failures = result["n_implicit_failures"]
    if failures.sum():
        warnings.warn(
            f"{result.sampler}: {int(failures.sum())} proposals were rejected because an "
            "implicit step of the generalized leapfrog did not converge or reached a point "
            "where the metric is not positive definite (counted in n_implicit_failures). Use a "
            "smaller step size or a larger max_fixed_point_iterations; for an indefinite "
            "metric, softabs (the chain only visits points where the metric is positive "
            "definite, so without SoftAbs it samples the posterior restricted to them).",
            RuntimeWarning, stacklevel=user_stacklevel())
    return result


class MetropolisPhase(Phase):
    """Adaptive Metropolis (see ``rnshmc._kernels._metropolis``): the proposal's covariance
    re-estimated in doubling windows and its scale adapted to ``target_accept`` over the
    first phase of the plan when ``adapting``, frozen otherwise.

    Parameters
    ----------
    name : str
    target_accept : float
    adapting : bool
    keep : tuple of str
    """

    def __init__(self, name, target_accept, adapting, keep=()):
        super().__init__(name)
        self.target_accept, self.adapting, self.keep = target_accept, adapting, tuple(keep)

    def make_chain(self, run):
        state = run.state
        n_adapt = state.phases[0][1] if self.adapting else 0
        ends = []
        if n_adapt > 0:
            ends = WarmupSchedule(n_adapt, init_buffer=0, term_buffer=terminal_buffer(n_adapt),
                                  base_window=FIRST_WINDOW).ends
        # identity covariance and scale 2.38 / sqrt(d) at first (the state restores the
        # adapted ones)
        return MetropolisChain(run.target, np.eye(state.dim), 2.38 / np.sqrt(state.dim),
                               adapt=n_adapt > 0, n_adapt=n_adapt, window_ends=ends,
                               target_accept=self.target_accept)


@dataclasses.dataclass
class ProposalState(PartState):
    """The exploration's final random-walk proposal: scale times a Cholesky factor of the
    covariance."""
    covariance: np.ndarray
    scale: float


class MetropolisExploration(TrainingWindow, MetropolisPhase):
    """Adaptive Metropolis whose evaluations are a surrogate's training data (values only).

    Parameters
    ----------
    target_accept : float
    n_train : int or None
        The final iterations whose states (or evaluations) are used; None: with "states",
        all but the first fifth; with "evaluations", every evaluation of the exploration.
    training_data : {"evaluations", "states"}
        Every proposal evaluated (except non-finite ones and those above the window's highest
        state potential plus its range), or the chain states.
    """

    KIND = "adaptive-Metropolis exploration"
    ADVICE = "Give a longer exploration (tune) or a better init."

    def __init__(self, target_accept, n_train=None, training_data="evaluations"):
        if training_data not in ("evaluations", "states"):
            raise ValueError(f"training_data must be 'evaluations' or 'states', got "
                             f"{training_data!r}")
        MetropolisPhase.__init__(self, "exploration", target_accept, adapting=True,
                                 keep=("samples", "records", "proposals"))
        TrainingWindow.__init__(self, n_train)
        self.training_data = training_data

    def end(self, run, chain):
        # the adapted proposal: reported, and the sampling phase's inverse mass matrix unless
        # one was given
        state = run.state
        state.parts["proposal"] = ProposalState(chain.get_state()["proposal_covariance"],
                                                float(chain.step_size))
        if state.inverse_mass is None:
            state.inverse_mass = state.parts["proposal"].covariance

    def training_rows(self, state):
        """The training rows: (Q, U, None: no gradients)."""
        history = state.outputs[self.name]
        window = self.window(state)
        U = -history["records"]["log_density"][window]
        if self.training_data == "states":
            return history["samples"][window], U, None
        # all of the exploration's by default: the cap below leaves out its burn-in's far-out
        # points (a few huge values would dominate the least-squares fit)
        rows = evaluated_rows(history["proposals"][window if self.n_train is not None
                                                   else slice(None)], U)
        return rows[:, :-1], rows[:, -1], None

    def report(self, result, states):
        result["proposal_covariance"] = np.array([s.parts["proposal"].covariance for s in states])
        result["proposal_scale"] = np.array([s.parts["proposal"].scale for s in states])


def evaluated_rows(proposals, U):
    """The rows (proposal, its potential) of a random walk's evaluated proposals that a
    values-only fit takes: finite, and at most the highest of the states' potentials ``U``
    plus their range (a few far-out values would dominate the least-squares fit)."""
    return proposals[proposals[:, -1] <= 2 * np.max(U) - np.min(U)]  # (NaN fails too)


# ---------------------------------------------------------------------------------------------
# the surrogate: settings, fit, and the choice of the sampling kernel


class SurrogateSettings:
    """How a surrogate sampler fits its surrogate: which kind (a
    :class:`~rnshmc.RandomNetworkSurrogate` by default, or a
    :class:`~rnshmc.GaussianProcessSurrogate`), with which settings.

    Parameters
    ----------
    n_hidden : int or "auto"
        Hidden units of a random network ("auto": :meth:`hidden_units`); of a sparse GP, its
        inducing points (default: its ``n_inducing``); ignored by a full GP (a unit per
        training point).
    kind : str
        The surrogate's class, by its ``kind`` (:class:`rnshmc.surrogate.Surrogate`).
    gradient_weight : float or None
        Weight of the gradient misfit in the fit (0: values only). None: 1 for a surrogate
        that fits gradients, else 0 (a GP fits values only; more is refused).
    values_weight_scale : float or None
        With ``weight_scale`` None, additive units on whitened inputs: this over sqrt(dim)
        (the smoother units of values-only fits); None: the surrogate's default.
    **options
        The class's settings (its ``OPTIONS``). For a random network the defaults are
        ``nodes="additive"``, ``activation="softplus"``, ``ridge=1e-6``, ``whiten=True``.
    """

    NETWORK_DEFAULTS = dict(nodes="additive", activation="softplus", ridge=1e-6,
                            weight_scale=None, whiten=True)

    def __init__(self, n_hidden="auto", kind="random_network", gradient_weight=None,
                 values_weight_scale=None, **options):
        if kind not in Surrogate.kinds:
            raise ValueError(f"the surrogate kind must be one of {sorted(Surrogate.kinds)}, "
                             f"got {kind!r}")
        self.kind, self.cls = kind, Surrogate.kinds[kind]
        unknown = sorted(set(options) - set(self.cls.OPTIONS))
        if unknown:
            raise TypeError(f"a {self.cls.__name__} has no setting {', '.join(map(repr, unknown))}"
                            f" (it takes {', '.join(self.cls.OPTIONS)})")
        if n_hidden != "auto":
            n_hidden = check_integer(n_hidden, "n_hidden", minimum=1)
        self.n_hidden = n_hidden
        if gradient_weight is None:
            gradient_weight = 1.0 if self.cls.fits_gradients else 0.0
        self.gradient_weight = check_real(gradient_weight, "gradient_weight", lower=0.0,
                                          lower_inclusive=True)
        if self.gradient_weight > 0 and not self.cls.fits_gradients:
            raise ValueError(f"a {self.cls.__name__} fits values only: gradient_weight must "
                             f"be 0, got {gradient_weight!r}")
        options.pop("n_hidden", None)
        self.options = (dict(self.NETWORK_DEFAULTS, **options) if kind == "random_network"
                        else dict(options))
        self.values_weight_scale = values_weight_scale
        dim = self.cls.settings_dim(self.options)
        self.cls(dim, rng=0, **self.options_for(dim, 2))  # checks the options

    @classmethod
    def from_group(cls, n_hidden, group, values_weight_scale=None):
        """The settings of a sampler's ``surrogate=`` group (a dict; its other keys, such as
        ``n_train``, are the exploration's)."""
        kind = group.get("kind", "random_network")
        surrogate_class = Surrogate.kinds.get(kind)
        options = {k: group[k] for k in getattr(surrogate_class, "OPTIONS", ())
                   if k in group and k != "n_hidden"}
        return cls(group.get("n_hidden", n_hidden), kind,
                   gradient_weight=group.get("gradient_weight"),
                   values_weight_scale=values_weight_scale, **options)

    @property
    def whiten(self):
        """Whether the surrogate acts on whitened inputs."""
        return self.options.get("whiten", True)

    def hidden_units(self, dim):
        """The units of a fit in ``dim`` dimensions. A random network: ``n_hidden``, or with
        "auto" 1.5 times the d (d + 1) / 2 coefficients of a quadratic form, rounded up to a
        hundred, at least 1000 and at most 4000 (a random network's Hessian is a sum of s
        rank-one terms: with fewer units it cannot match even a Gaussian's). A sparse GP: its
        inducing points. A full GP: None (one per training point)."""
        if self.kind == "random_network":
            if self.n_hidden != "auto":
                return self.n_hidden
            quadratic = 0.75 * dim * (dim + 1)
            return int(min(4000, max(1000, 100 * math.ceil(quadratic / 100))))
        if not self.options.get("sparse", False):
            return None
        if self.n_hidden != "auto":
            return self.n_hidden
        return self.options.get("n_inducing", self.cls(1).n_inducing)

    def options_for(self, dim, n_hidden):
        """The surrogate class's arguments for a fit in ``dim`` dimensions with ``n_hidden``
        units (a random network's hidden units, a sparse GP's inducing points)."""
        options = dict(self.options)
        if self.kind == "random_network":
            options["n_hidden"] = n_hidden
            if (self.values_weight_scale is not None and options["weight_scale"] is None
                    and options["whiten"] and options["nodes"] == "additive"):
                options["weight_scale"] = self.values_weight_scale / math.sqrt(dim)
        elif options.get("sparse", False) and n_hidden is not None:
            options["n_inducing"] = n_hidden
        return options

    def fit(self, dim, generator, Q, U, G, n_hidden, online=False):
        """A new surrogate fitted to potentials ``U`` at ``Q`` (gradients ``G``), its random
        parts drawn from a child stream of ``generator`` (``online``: with the online
        estimator started)."""
        surrogate = self.cls(dim, rng=generator.spawn(1)[0], **self.options_for(dim, n_hidden))
        surrogate.fit(Q, U, gradients=G if self.gradient_weight > 0 else None,
                      gradient_weight=self.gradient_weight, online=online)
        return surrogate

    def step_cost(self, target, dim, setting, surrogate=None):
        """A surrogate leapfrog step's cost in exact densities: ``setting`` if a number, else
        (``"auto"``) the surrogate's gradient operation count (of the fitted ``surrogate``
        where given, else of one with :meth:`hidden_units`) over the target's
        ``density_flops`` where it has one (0 otherwise: steps free). NaN for a full GP
        before its fit (its units are its training points)."""
        if setting != "auto":
            return setting
        density_flops = getattr(target, "density_flops", None)
        if not density_flops:
            return 0.0
        if surrogate is not None:
            return surrogate.gradient_flops() / density_flops
        units = self.hidden_units(dim)
        if units is None:
            return math.nan
        return gradient_flops(dim, units, self.whiten) / density_flops


@dataclasses.dataclass
class FitState(PartState):
    """A chain's fitted surrogate and the sampling kernel chosen with it."""
    surrogate: Optional[dict] = None        # the surrogate's get_state()
    covariance: Optional[np.ndarray] = None  # the pooled explorations' (shared fits)
    covariance_states: int = 0                # the states it is estimated from
    exploration_acceptance_rate: float = math.nan
    explore_step_size: float = math.nan
    sampling_step_size: float = math.nan
    surrogate_n_steps: int = 0
    exact_n_steps: int = 0
    surrogate_acceptance_rate: float = math.nan  # the pilot's (values-only fits)
    softabs: float = 0.0  # a Hessian metric's SoftAbs sharpness (0: the Hessian as it is)
    # the exploration's training window: its states' variances, and its mean squared jump
    # scaled by them (the trust watch's reference for how far the chain moves)
    jump_scale: Optional[np.ndarray] = None
    exploration_jump: float = math.nan
    warm_start: bool = False  # carried over from an earlier run (see Sampler.warm_states)


def mean_jump(samples, scale):
    """The mean squared distance between consecutive ``samples``, each coordinate divided by
    its ``scale`` (a variance): how far a chain moves per iteration."""
    if len(samples) < 2:
        return math.nan
    return float(np.mean(np.sum(np.diff(samples, axis=0) ** 2 / scale, axis=1)))


def jump_reference(samples):
    """(scale, jump) of a chain's ``samples``: each coordinate's variance (1 where it is 0),
    and the mean squared jump between consecutive samples scaled by it (the trust watch's
    reference for how far a chain moves)."""
    variance = samples.var(axis=0)
    scale = np.where(variance > 0, variance, 1.0)
    return scale, mean_jump(samples, scale)


def exploration_covariance(exploration, states):
    """The covariance of the chains' training-window states (pooled)."""
    samples = np.concatenate([s.outputs[exploration.name]["samples"][exploration.window(s)]
                              for s in states])
    dim = samples.shape[1]
    covariance = np.atleast_2d(np.cov(samples, rowvar=False))
    distinct = len(np.unique(samples, axis=0))
    if distinct <= dim:
        # too few distinct states (a short exploration in many dimensions) for a full-rank
        # covariance: shrink it towards its diagonal (positive: the fit made sure the chain
        # moved, and a move changes every coordinate)
        weight = dim / (distinct + dim)
        covariance = (1 - weight) * covariance + weight * np.diag(np.diag(covariance))
    return covariance


class SurrogateFit(Phase):
    """The "training" phase: fit the surrogate to the exploration's training data (or receive
    the shared fit), then choose the sampling kernel. No iterations.

    Parameters
    ----------
    sampler_name : str
    exploration : HMCExploration or MetropolisExploration
    settings : SurrogateSettings
    share : bool
        One surrogate for all chains, fitted at a barrier to their pooled training data.
    kernel : callable
        ``kernel(run, fit, fit_state)``: chooses the sampling kernel once the surrogate is
        fitted (sets ``fit_state.surrogate_n_steps``, ``exact_n_steps``, and may set the
        step size in ``state.kernel``; see :class:`ExplorationKernel`, :class:`PilotKernel`).
    online : OnlineInstalls or None
        Told of every fit (ARNS-HMC keeps the fitted object as its online estimator).
    """

    def __init__(self, sampler_name, exploration, settings, share, kernel, online=None,
                 step_cost="auto", jitter=True):
        super().__init__("training")
        self.sampler_name, self.exploration, self.settings = sampler_name, exploration, settings
        self.share, self.kernel, self.online = share, kernel, online
        self.step_cost_setting, self.jitter = step_cost, jitter

    # a chain with a shared surrogate waits at the start of training for the pooled fit, and
    # at a warm start for its shared online estimator to be shared again
    def waiting(self, state):
        if not (self.share and state.phase == self.name and not state.phase_started):
            return False
        fit = state.parts.get("fit")
        if fit is None:
            return True
        online = state.parts.get("online")
        return (fit.warm_start and online is not None and online.shared
                and online.install_times is None)

    def join(self, states):
        if not any(self.waiting(s) for s in states):
            return
        warm = [s for s in states if self.waiting(s) and "fit" in s.parts]
        if warm:  # (a checkpoint or a copy holds one estimator per chain: chain 0's is theirs)
            for state in warm:
                state.parts["online"].estimator = warm[0].parts["online"].estimator
            self.online.shared_fit(warm)
            return
        for state in states:  # (before the fit: a chain that never moved says so)
            self.exploration.check_moved(state, self.sampler_name)
        # one surrogate fitted to every chain's training data (in chain order, with chain 0's
        # random stream), given to every chain, and the pooled exploration's covariance for
        # their trajectory lengths
        Q, U, G = (None if parts[0] is None else np.concatenate(parts)  # (G: None without
                   for parts in zip(*map(self.exploration.training_rows, states)))  # gradients)
        generator = generator_from_json(states[0].rng)
        surrogate = self.fit(states[0], generator, Q, U, G,
                             self.settings.hidden_units(states[0].dim))
        states[0].rng = generator_to_json(generator)
        covariance = exploration_covariance(self.exploration, states)
        for state in states:
            state.parts["fit"] = FitState(
                surrogate=states[0].parts["fit"].surrogate, covariance=covariance,
                covariance_states=sum(len(s.outputs[self.exploration.name]["samples"][
                    self.exploration.window(s)]) for s in states))
            if state is not states[0] and self.online is not None:
                self.online.fitted(state, surrogate, U)
        if self.online is not None:
            self.online.shared_fit(states)

    def warm(self, state):
        """A chain carried over from an earlier run starts its sampling with the surrogate
        and kernel it has (a warm start: see ``Sampler.warm_states``), its online install
        schedule drawn anew."""
        state.parts["fit"].warm_start = True
        if "online" in state.parts:
            state.parts["online"].restart_schedule()

    def fit(self, state, generator, Q, U, G, n_hidden):
        """Fit a new surrogate and make it the chain's."""
        surrogate = self.settings.fit(state.dim, generator, Q, U, G, n_hidden,
                                      online=self.online is not None)
        fit = state.parts.setdefault("fit", FitState())
        fit.surrogate = surrogate.get_state()
        if self.online is not None:
            self.online.fitted(state, surrogate, U)
        return surrogate

    def begin(self, run, chain):
        state = run.state
        fit = state.parts.get("fit")
        if fit is not None and fit.warm_start:  # the surrogate and kernel of an earlier run
            state.parts["dynamics"] = DynamicsState()
            state.evals[self.name] = [0, 0]
            if self.online is not None:
                self.online.start(run)
            return
        rate = self.exploration.check_moved(state, self.sampler_name)
        if "fit" not in state.parts:  # (fitted already when shared)
            self.fit(state, run.generator, *self.exploration.training_rows(state),
                     self.settings.hidden_units(state.dim))
        fit = state.parts["fit"]
        fit.exploration_acceptance_rate = rate
        fit.explore_step_size = float(state.kernel["step_size"])
        fit.jump_scale, fit.exploration_jump = jump_reference(
            state.outputs[self.exploration.name]["samples"][self.exploration.window(state)])
        state.parts["dynamics"] = DynamicsState()
        state.evals[self.name] = [0, 0]
        self.kernel(run, self, fit)
        if self.online is not None:
            self.online.start(run)

    def choose_n_steps(self, run, per="iteration"):
        """The number of steps for min ESS per unit of cost: an exact density plus the
        surrogate's steps (``per="iteration"``), or an exact gradient per step (exact
        dynamics, ``per="step"``); see ``rnshmc.adaptation.trajectory_length_for_min_ess``."""
        state = run.state
        covariance = state.parts["fit"].covariance
        if covariance is None:
            covariance = exploration_covariance(self.exploration, [state])
        n_steps, _ = trajectory_length_for_min_ess(
            covariance, state.inverse_mass, state.kernel["step_size"], self.jitter,
            MAX_AUTO_STEPS, per=per,
            step_cost=self.settings.step_cost(run.sampler.target, state.dim,
                                              self.step_cost_setting, self.surrogate(state)))
        return n_steps

    def surrogate(self, state):
        """The surrogate the chain's dynamics run on."""
        if self.online is not None:
            return state.parts["online"].estimator
        return surrogate_from_state(state.parts["fit"].surrogate)


class ExplorationKernel:
    """Sample with ``n_steps`` surrogate steps per iteration ("auto": the shortest L with the
    best predicted min ESS per unit of cost), and choose the exact stretches' L for min ESS
    per exact gradient.

    The mass matrix and step size: given ones are kept (``step_size``: the sampling's, a
    float or one per chain); else, where the exploration adapted them (``leapfrog``), the
    inverse mass matrix becomes the (pooled, with a shared surrogate) training window's
    variance, shrunk as Stan's, and the step size is adapted to it on the surrogate alone
    (:func:`surrogate_pilot`: no exact evaluation). A short exploration's own estimate is
    one chain's few states (none at all under 150 iterations: Stan's warm-up has no slow
    window there), so the chains would sample with the identity.
    """

    def __init__(self, n_steps="auto", step_size=None, leapfrog=None):
        self.n_steps = n_steps
        self.step_size = step_size  # the sampling's, if given (float or one per chain)
        self.leapfrog = leapfrog    # the exploration's (None: keep its kernel)

    def __call__(self, run, fit, fit_state):
        state = run.state
        if self.step_size is not None:
            step_size = (float(self.step_size) if np.ndim(self.step_size) == 0
                         else float(self.step_size[state.chain]))
            state.kernel = dict(state.kernel, step_size=step_size)
        elif (self.leapfrog is not None and self.leapfrog.adapt_mass_matrix
              and self.leapfrog.step_size_of(state.chain) is None):
            covariance = fit_state.covariance
            if covariance is None:
                covariance = exploration_covariance(fit.exploration, [state])
            state.inverse_mass = regularized_variance(fit_state.covariance_states or len(
                state.outputs[fit.exploration.name]["samples"][fit.exploration.window(state)]),
                np.diag(covariance).copy())
            step_size, _ = surrogate_pilot(run, fit, self.leapfrog, None,
                                           self.leapfrog.n_steps, PILOT_ITERATIONS)
            state.kernel = dict(state.kernel, step_size=step_size)
        fit_state.surrogate_n_steps = (fit.choose_n_steps(run) if self.n_steps == "auto"
                                       else self.n_steps)
        # exact stretches and the fallback pay a gradient per step: their L is chosen for min
        # ESS per gradient (the exploration's L only had to adapt and spread training states)
        fit_state.exact_n_steps = fit.choose_n_steps(run, per="step")


# a pilot's trajectories: the step size's adaptation on the surrogate alone, and the check of
# the surrogate's own acceptance at the chosen kernel
PILOT_ITERATIONS, PILOT_CHECK = 300, 100


def surrogate_pilot(run, fit, leapfrog, step_size, n_steps, n_iter):
    """(step size, mean acceptance probability) of ``n_iter`` trajectories of HMC on the
    surrogate alone (no exact evaluation), each from a training-window state drawn at random,
    so that it cannot drift where the surrogate is wrong; with ``step_size`` None it is
    adapted by dual averaging to ``leapfrog.target_accept``."""
    state, generator = run.state, run.generator
    chain = euclidean_chain(fit.surrogate(state)._ctarget, state, leapfrog.max_energy_error)
    starts = state.outputs[fit.exploration.name]["samples"][fit.exploration.window(state)]
    picks = generator.integers(len(starts), size=n_iter)
    chain.set_position(starts[picks[0]])
    adapt = step_size is None
    if adapt:
        step_size = initial_step_size(chain, generator, target_accept=leapfrog.target_accept)
        chain.restart_step_size_adaptation(step_size, leapfrog.target_accept)
    else:
        chain.step_size = step_size
    samples, records = np.empty((1, state.dim)), np.empty(n_iter, TRANSITION)
    for i, pick in enumerate(picks):
        chain.set_position(starts[pick])
        chain.run(generator, 1, n_steps, leapfrog.jitter, samples, records[i:i + 1],
                  adapt_step_size=adapt)
    return (chain.final_step_size if adapt else step_size,
            float(records["accept_prob"].mean()))


class PilotKernel:
    """Choose the sampling kernel without exact evaluations (values-only fits): the step size
    adapted on the surrogate alone (unless given; :func:`surrogate_pilot`), the steps as
    :class:`ExplorationKernel`, and the surrogate's own acceptance at that kernel (the
    reference of a warning)."""

    def __init__(self, leapfrog, n_steps="auto"):
        self.leapfrog, self.n_steps = leapfrog, n_steps

    def __call__(self, run, fit, fit_state):
        state = run.state
        step_size = self.leapfrog.step_size_of(state.chain)
        if step_size is None:
            step_size, _ = surrogate_pilot(run, fit, self.leapfrog, None,
                                           self.leapfrog.n_steps, PILOT_ITERATIONS)
        state.kernel = dict(state.kernel, step_size=step_size)  # where sampling starts
        n_steps = fit.choose_n_steps(run) if self.n_steps == "auto" else self.n_steps
        _, fit_state.surrogate_acceptance_rate = surrogate_pilot(
            run, fit, self.leapfrog, step_size, n_steps, PILOT_CHECK)
        fit_state.surrogate_n_steps, fit_state.exact_n_steps = n_steps, 0


class RiemannianKernel:
    """The sampling kernel is given (RNS-RMHMC): ``n_steps`` steps of the generalized leapfrog
    on the surrogate's Hessian metric, with its SoftAbs sharpness chosen for the fit
    (:meth:`SurrogateMetric.choose_softabs`); the exact stretches' L chosen as
    :class:`ExplorationKernel` does (reported)."""

    def __init__(self, metric):
        self.metric = metric

    def __call__(self, run, fit, fit_state):
        fit_state.surrogate_n_steps = self.metric.leapfrog.n_steps
        fit_state.exact_n_steps = fit.choose_n_steps(run, per="step")
        Q, _, _ = fit.exploration.training_rows(run.state)
        self.metric.choose_softabs(fit_state, fit.surrogate(run.state), Q)


class SurrogateMetric:
    """The generalized leapfrog on a surrogate's potential with its Hessian (or the Hessian's
    diagonal) as the metric, and the exact test on the true density (RNS-RMHMC).

    Parameters
    ----------
    kind : {"hessian", "diagonal"}
    softabs : float or "auto"
        SoftAbs sharpness alpha (0: the Hessian as it is). "auto": the Hessian as it is where
        it is positive definite at every training state (at most ``CHECKED_STATES`` of them),
        else SoftAbs with alpha the training states' largest variance, so that the metric's
        smallest eigenvalue, 1/alpha, is their smallest precision. Chosen again at each refit.
    solver : dict
        ``GeneralizedLeapfrog``'s settings.
    leapfrog : LeapfrogSettings
        The step size (None: adapted), steps, jitter, target_accept and max_energy_error.
    """

    CHECKED_STATES = 200

    def __init__(self, kind, softabs, solver, leapfrog):
        self.kind, self.softabs, self.solver, self.leapfrog = kind, softabs, solver, leapfrog

    def choose_softabs(self, fit_state, surrogate, Q):
        """Set ``fit_state.softabs`` for ``surrogate`` fitted to the states ``Q``."""
        if self.softabs != "auto":
            fit_state.softabs = float(self.softabs)
            return
        Q = np.unique(Q, axis=0)
        rows = Q[np.linspace(0, len(Q) - 1, min(len(Q), self.CHECKED_STATES)).astype(int)]
        fit_state.softabs = 0.0 if all(map(self._positive_definite, (surrogate.hessian(q)
                                                                      for q in rows))) \
            else float(np.linalg.eigvalsh(np.atleast_2d(np.cov(Q, rowvar=False)))[-1])

    def _positive_definite(self, hessian):
        if self.kind == "diagonal":
            return bool(np.all(np.diag(hessian) > 0))
        try:
            np.linalg.cholesky(hessian)
        except np.linalg.LinAlgError:
            return False
        return True

    def make_chain(self, run, surrogate):
        """A chain on ``surrogate``'s dynamics with the chain's SoftAbs sharpness."""
        metric = surrogate.hessian_metric(diagonal=self.kind == "diagonal",
                                          softabs=run.state.parts["fit"].softabs)
        return riemannian_chain(surrogate._ctarget, run.target, metric, run.state.dim,
                                self.solver, self.leapfrog.max_energy_error)


# ---------------------------------------------------------------------------------------------
# sampling on the surrogate: trust watch and online installs


@dataclasses.dataclass
class DynamicsState(PartState):
    """Which dynamics a surrogate chain runs, and the trust watch's record."""
    mode: str = "surrogate"                  # or "exact"
    surrogate_since: int = 0                 # the sampling iteration the surrogate came back
    exact_until: Optional[int] = None        # the end of an exact stretch (None: to the end)
    n_refits: int = 0
    events: list = dataclasses.field(default_factory=list)
    # evaluations of the chains of past stretches, by dynamics: [densities, gradients]
    mode_evals: dict = dataclasses.field(
        default_factory=lambda: {"exact": [0, 0], "surrogate": [0, 0]})

    @classmethod
    def from_tree(cls, tree):
        tree = dict(tree)
        tree.pop("kind", None)
        if tree.get("exact_until") is not None:
            tree["exact_until"] = int(tree["exact_until"])
        tree["events"] = [dict(e) for e in tree.get("events") or []]
        tree["mode_evals"] = {k: [int(x) for x in v] for k, v in tree["mode_evals"].items()}
        return cls(**tree)


class TrustWatch:
    """The surrogate watched where the chain is: over every ``window`` sampling iterations on
    the surrogate's dynamics, an acceptance rate under ``ratio`` times the reference
    distrusts it; the chain then runs ``refit_iterations`` of its exact kernel (HMC, or the
    exploration's random walk for a values-only sampler: see :class:`SurrogateSampling`),
    the surrogate is refitted with that stretch's evaluations and ``refit_growth`` times the
    hidden units, and the chain goes back to it; after ``max_refits`` refits, a distrust makes
    the rest exact (fallback). A window whose mean squared jump (each coordinate scaled by the
    exploration's variance) is under ``jump_ratio`` times the exploration's distrusts it too:
    a chain that accepts tiny moves (a step size adapted to a poor metric) is as stuck as one
    that rejects. See ``docs/algorithms.md`` (RNS-HMC) for why the chain stays
    exact.

    The reference (``reference``) is the exploration's acceptance over its training window
    ("exploration": an exact HMC exploration's, which the surrogate's dynamics should
    match), or the surrogate's own acceptance on its pilot ("surrogate": a random-walk
    exploration's acceptance says nothing of the dynamics')."""

    REFERENCES = ("exploration", "surrogate")

    def __init__(self, ratio=0.5, window=50, max_refits=2, refit_iterations=200,
                 refit_growth=2.0, reference="exploration", jump_ratio=0.1):
        if reference not in self.REFERENCES:
            raise ValueError(f"the trust watch's reference must be one of {self.REFERENCES}, "
                             f"got {reference!r}")
        self.reference = reference
        self.ratio = check_real(ratio, "trust_ratio", lower=0.0, upper=1.0, upper_inclusive=True)
        self.window = check_integer(window, "trust_window", minimum=10)
        self.max_refits = check_integer(max_refits, "max_refits", minimum=0)
        self.refit_iterations = check_integer(refit_iterations, "refit_iterations", minimum=1)
        self.refit_growth = check_real(refit_growth, "refit_growth", lower=1.0,
                                       lower_inclusive=True)
        self.jump_ratio = check_real(jump_ratio, "jump_ratio", lower=0.0, upper=1.0,
                                     lower_inclusive=True, upper_inclusive=True)

    def distrusts(self, outputs, t, reference, jump_scale=None, reference_jump=math.nan):
        """The event (a dict) if the window of sampling draws before ``t`` in ``outputs`` is
        poor: its acceptance under ``ratio`` times ``reference``, or its mean squared jump
        (scaled by ``jump_scale``) under ``jump_ratio`` times ``reference_jump``; else None."""
        rate = float(outputs["records"]["accepted"][t - self.window:t].mean())
        # (the jump from the window's previous draw included, if it was a sampling draw)
        jump = (math.nan if jump_scale is None else mean_jump(
            outputs["samples"][max(t - self.window - 1, 0):t], jump_scale))
        # (a reference that is not known, NaN, tests nothing)
        if not (rate < self.ratio * reference or jump < self.jump_ratio * reference_jump):
            return None
        return {"iteration": t, "window_acceptance": rate,
                f"{self.reference}_acceptance": reference, "window_jump": jump,
                "exploration_jump": reference_jump}


@dataclasses.dataclass
class OnlineState(PartState):
    """ARNS-HMC's online estimator and its install schedule."""
    estimator: object = None          # a RandomNetworkSurrogate fitted with online=True
    shared: bool = False              # one estimator for all chains (installs at a barrier)
    ceiling: float = math.inf         # rejected proposals above it are not added
    install_rng: object = None        # the coin flips' stream (per chain)
    coins_drawn: int = 0
    install_times: Optional[np.ndarray] = None  # shared: drawn ahead for all chains
    coins_rng: Optional[str] = None   # shared: the coins' stream after install_times (JSON)
    coins_until: int = 0              # shared: the last iteration install_times cover
    install_at: Optional[int] = None  # the next install (after this sampling iteration)
    install_drawn: bool = False       # whether install_at is the current draw
    pending_from: int = 0             # the first iteration whose point is not yet added
    # weights were installed since the chain cached its dynamics potential and gradient
    refresh: bool = False

    def restart_schedule(self):
        """Forget the install schedule (a warm start's sampling phase draws a new one)."""
        self.install_rng, self.coins_drawn, self.install_times = None, 0, None
        self.coins_rng, self.coins_until, self.install_at = None, 0, None
        self.install_drawn, self.pending_from, self.refresh = False, 0, False

    def to_tree(self):
        tree = super().to_tree()
        tree["estimator"] = None if self.estimator is None \
            else self.estimator.get_state(online=True)
        tree["install_rng"] = None if self.install_rng is None \
            else generator_to_json(self.install_rng)
        return tree

    @classmethod
    def from_tree(cls, tree):
        tree = dict(tree)
        tree.pop("kind", None)
        if tree["estimator"] is not None:
            tree["estimator"] = RandomNetworkSurrogate.from_state(tree["estimator"])
        if tree["install_rng"] is not None:
            tree["install_rng"] = generator_from_json(tree["install_rng"])
        for key in ("install_at",):
            if tree[key] is not None:
                tree[key] = int(tree[key])
        return cls(**tree)


def inverse_sqrt(t):
    return 1.0 / np.sqrt(t)


class OnlineInstalls:
    """ARNS-HMC's learning during sampling: each proposal the exact test evaluated (or each
    accepted state) is added to the online estimator, whose weights are installed into the
    dynamics after sampling iteration t with probability a_t (default 1/sqrt(t)). The coin
    flips do not depend on the chain, so they are drawn ahead and the C loop runs
    uninterrupted from one install to the next. See ``docs/algorithms.md`` (ARNS-HMC).

    Parameters
    ----------
    adaptation_rate : callable
        a(t), t = 1, 2, ...
    points : {"proposals", "accepted"}
    freeze_after : int or None
    """

    def __init__(self, adaptation_rate=inverse_sqrt, points="proposals", freeze_after=None):
        if points not in ("proposals", "accepted"):
            raise ValueError(f"online_points must be 'proposals' or 'accepted', got {points!r}")
        if not callable(adaptation_rate):
            raise TypeError("adaptation_rate must be a callable a(t)")
        self.adaptation_rate, self.points = adaptation_rate, points
        self.freeze_after = None if freeze_after is None else check_integer(
            freeze_after, "freeze_after", minimum=0)

    def rate(self, t):
        rate = float(self.adaptation_rate(t))
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"adaptation_rate({t}) = {rate!r} is not a probability")
        return rate

    def fitted(self, state, surrogate, U):
        """A surrogate was just fitted to potentials ``U``: it is the chain's estimator."""
        online = state.parts.setdefault("online", OnlineState())
        if state.phase == "sampling" and "sampling" in state.outputs:
            # a refit: the points since the last install never reach an estimator in use
            added = state.outputs["sampling"].get("online_added")
            if added is not None:
                added[online.pending_from:state.iteration] = 0
        online.pending_from = state.iteration if state.phase == "sampling" else 0
        online.estimator, online.shared = surrogate, False
        # twice the fitted potentials' range above their minimum
        online.ceiling = float(2 * np.max(U) - np.min(U))
        if online.install_times is not None:
            # a chain leaving the shared estimator (a refit of its own) installs by its own
            # coins from here on, not at the shared times (one may be due right now: left
            # pending, it would stop every segment where it starts)
            online.install_times, online.install_at, online.install_drawn = None, None, False
            online.coins_drawn = state.iteration if state.phase == "sampling" else 0

    def shared_fit(self, states):
        """After a shared fit: the install times, common to all chains, drawn ahead from
        chain 0's stream (not after the last draw: an install there changes no draw)."""
        generator = generator_from_json(states[0].rng)
        coins = generator.spawn(1)[0]
        states[0].rng = generator_to_json(generator)
        for state in states:
            online = state.parts["online"]
            online.shared, online.install_times = True, np.zeros(0, np.int64)
            online.coins_rng, online.coins_until = generator_to_json(coins), 0
            online.pending_from = 0
        self.draw_shared_installs(states, states[0].phase_length("sampling"))

    def draw_shared_installs(self, states, length):
        """Draw the shared install times of a sampling phase of ``length`` iterations (those
        not drawn yet: the coins continue their stream when the phase grows)."""
        sharing = [s for s in states if s.parts["online"].install_times is not None]
        first = sharing[0].parts["online"]
        coins = generator_from_json(first.coins_rng)
        last = length - 1 if self.freeze_after is None else min(length - 1, self.freeze_after)
        times = [t for t in range(first.coins_until + 1, last + 1)
                 if coins.random() < self.rate(t)]
        for state in sharing:
            online = state.parts["online"]
            online.install_times = np.concatenate([online.install_times,
                                                   np.array(times, np.int64)])
            online.coins_rng, online.coins_until = generator_to_json(coins), max(
                last, first.coins_until)

    def extended(self, states, length):
        """The sampling phase grew: the install times past its old end are drawn (shared)
        or will be (a chain's own coins, which it draws as it goes)."""
        onlines = [s.parts.get("online") for s in states]
        if any(online is None for online in onlines):
            return  # not fitted yet: the fit plans for the new length
        if any(online.install_times is not None for online in onlines):
            self.draw_shared_installs(states, length)
        for online in onlines:
            if online.install_at is None:
                online.install_drawn = False  # (no install was left before the old end)

    def start(self, run):
        # spawned after the surrogate's child stream, and not advancing the chain's stream:
        # with adaptation frozen at 0 the draws are RNS-HMC's
        run.state.parts["online"].install_rng = run.generator.spawn(1)[0]

    def next_install(self, state, n_iter):
        """The sampling iteration (1-based) after which the next install happens, or None.
        The coin flips (u_t < a_t for t = 1, 2, ...) are drawn in order from their own
        stream."""
        online = state.parts["online"]
        t = online.coins_drawn
        if online.install_times is not None:  # shared: drawn ahead for all chains
            times = online.install_times
            following = times[np.searchsorted(times, t, side="right"):]
            # (with none left, times past t may still come: the phase can grow)
            online.coins_drawn = int(following[0]) if len(following) else t
            return int(following[0]) if len(following) else None
        last = n_iter if self.freeze_after is None else min(n_iter, self.freeze_after)
        while t < last:
            t += 1
            rate = self.rate(t)
            if rate > 0.0 and online.install_rng.random() < rate:
                online.coins_drawn = t
                return t
        online.coins_drawn = t
        return None

    def segment_stop(self, state, n_iter, stop):
        """Segments also end at the next install."""
        online = state.parts["online"]
        if not online.install_drawn:
            online.install_at = self.next_install(state, n_iter)
            online.install_drawn = True
        return stop if online.install_at is None else min(stop, online.install_at)

    def segment_done(self, state, first, n):
        """After sampling iterations first, ..., first + n - 1: mark the points they add, and
        at an install time add the points since the last one to the estimator (a chain's
        own) and install. (The points go in one batch an install interval, whatever the
        segments: a checkpoint or a stopping rule's check between installs changes no
        draw, not even in the last bits of the batch's hidden-unit products.)"""
        outputs = state.outputs["sampling"]
        online = state.parts["online"]
        installed = outputs.setdefault("installed", np.zeros(len(outputs["records"]), dtype=bool))
        added = outputs.setdefault("online_added", np.zeros(len(outputs["records"]), np.int64))
        end = first + n if self.freeze_after is None else min(first + n, self.freeze_after)
        if state.parts["dynamics"].mode == "surrogate" and first < end:
            # the exact potentials the test computed; an exact stretch's states go to the
            # refit that ends it instead
            added[first:end] = self.online_points(state, slice(first, end))
        if online.shared:
            return  # the points wait for the other chains' (join)
        if online.install_at is not None and state.iteration == online.install_at:
            self.add_pending(state, online.estimator)
            online.estimator.install()
            installed[online.install_at - 1] = True
            online.install_drawn = False
            online.refresh = True

    def online_points(self, state, block):
        """Which sampling iterations in ``block`` add their point to the estimator."""
        records = state.outputs["sampling"]["records"][block]
        new = records["accepted"].astype(bool)
        if self.points == "proposals":
            # rejected proposals only under the ceiling set at the last fit: farther out, a
            # few huge values would dominate the least-squares fit
            under = state.outputs["sampling"]["proposals"][block][:, -1] \
                <= state.parts["online"].ceiling
            new |= under & ~records["diverging"].astype(bool)
        return new

    def add_pending(self, state, estimator):
        """Add the chain's points since the last install (or fit) to ``estimator``."""
        online = state.parts["online"]
        Q, U = self.added_points(state, slice(online.pending_from, state.iteration))
        if len(U):
            estimator.partial_fit(Q, U, install=False)
        online.pending_from = state.iteration

    def added_points(self, state, block):
        """(Q, U): the points the iterations in ``block`` added."""
        outputs = state.outputs["sampling"]
        new = outputs["online_added"][block].astype(bool)
        if self.points == "proposals":
            rows = outputs["proposals"][block][new]
            return rows[:, :-1], rows[:, -1]
        return outputs["samples"][block][new], -outputs["records"]["log_density"][block][new]

    # a chain on the shared estimator waits at each install for the others' points
    def waiting(self, state):
        online = state.parts.get("online")
        return (online is not None and online.shared and state.phase == "sampling"
                and online.install_drawn and online.install_at is not None
                and state.iteration == online.install_at)

    def join(self, states):
        sharing = [s for s in states if "online" in s.parts and s.parts["online"].shared]
        if not sharing or not all(self.waiting(s) for s in sharing) \
                or any(s.phase != "sampling" for s in sharing):
            return
        # every chain's points since the last install, in chain order, then one install for all
        estimator = sharing[0].parts["online"].estimator
        for state in sharing:
            self.add_pending(state, estimator)
        estimator.install()
        for state in sharing:
            online = state.parts["online"]
            state.outputs["sampling"]["installed"][state.iteration - 1] = True
            online.estimator = estimator
            online.install_drawn = False
            online.refresh = True

    def refresh(self, run, chain, mode):
        """After an install: the chain's cached potential and gradient of the dynamics are
        the new weights' (the surrogate's own evaluation, no exact one). Without this, the
        first trajectory after an install starts from the old surrogate's gradient and its
        energy: not a reversible map of the new surrogate, so its test would not be exact."""
        online = run.state.parts["online"]
        if not online.refresh:
            return
        if mode == "surrogate":  # (an exact stretch's chain has no surrogate cached)
            kernel = chain.get_state()
            potential, gradient = online.estimator.potential_and_gradient(kernel["position"])
            chain.set_state(dict(kernel, potential_dynamics=potential, gradient=gradient,
                                 n_gradient_evals=kernel["n_gradient_evals"] + 1))
            run.keep_current("sampling", chain)
        online.refresh = False

    def end(self, state):
        online = state.parts["online"]
        if online.shared:
            # the points after the last install never reach the shared estimator (they would
            # change no draw)
            state.outputs["sampling"]["online_added"][online.pending_from:] = 0
        else:  # a chain's own estimator learns them (a warm start continues from it)
            self.add_pending(state, online.estimator)
        state.parts["fit"].surrogate = online.estimator.get_state()

    def report(self, result, states):
        result["installed"] = np.stack([s.outputs["sampling"]["installed"] for s in states])
        result["online_added"] = np.stack([s.outputs["sampling"]["online_added"]
                                           for s in states])
        result["n_installs"] = result["installed"].sum(axis=1).astype(np.int64)
        result["n_online_points"] = np.array(
            [s.parts["online"].estimator.n_online_points_ for s in states], dtype=np.int64)


class SurrogateSampling(Phase):
    """The "sampling" phase on a surrogate's dynamics with the exact Metropolis test (one
    exact density per iteration), in segments between the trust watch's reviews and the
    online installs.

    Parameters
    ----------
    fit : SurrogateFit
    leapfrog : LeapfrogSettings
        The exploration's (the exact stretches' max_energy_error).
    delayed_acceptance : bool
        Two-stage test: stage 1 on the surrogate's energy, the exact density only for
        proposals that pass it.
    trust : TrustWatch or None
    online : OnlineInstalls or None
    keep_gradients : bool
        Keep the dynamics gradient of every draw (an exact stretch's are a refit's data).
    jitter : bool or None
        Draw each trajectory's steps uniformly from {1, ..., L} (None: as the exploration).
    exact_kernel : {"hmc", "metropolis"}
        The exact stretches' and the fallback's kernel: exact HMC with the exploration's step
        size and mass matrix, or the exploration's last adaptive Metropolis proposal, frozen.
    metric : SurrogateMetric or None
        The generalized leapfrog on the surrogate's Hessian metric (its own steps and jitter)
        instead of the leapfrog on its gradient.
    after_adaptation : bool
        (with ``metric``) An adaptation phase came before: continue from its last state with
        its step size, else from the exploration's with the metric's given step size.
    """

    def __init__(self, fit, leapfrog, delayed_acceptance=False, trust=None, online=None,
                 keep_gradients=True, jitter=None, exact_kernel="hmc", metric=None,
                 after_adaptation=False):
        super().__init__("sampling")
        self.metric, self.after_adaptation = metric, after_adaptation
        if exact_kernel not in ("hmc", "metropolis"):
            raise ValueError(f"exact_kernel must be 'hmc' or 'metropolis', got {exact_kernel!r}")
        self.fit, self.leapfrog, self.delayed_acceptance = fit, leapfrog, delayed_acceptance
        self.jitter = leapfrog.jitter if jitter is None else jitter
        self.trust, self.online, self.exact_kernel = trust, online, exact_kernel
        # a random walk's refits are fitted to the values of its proposals
        proposals = (online is not None and online.points == "proposals") or (
            trust is not None and exact_kernel == "metropolis")
        self.keep = ("samples", "records") + (("gradients",) if keep_gradients else ()) \
            + (("proposals",) if proposals else ())

    def make_chain(self, run):
        state = run.state
        if state.parts["dynamics"].mode == "exact":
            if self.exact_kernel == "metropolis":  # the exploration's last proposal, frozen
                proposal = state.parts["proposal"]
                return MetropolisChain(run.target, proposal.covariance, proposal.scale)
            return euclidean_chain(run.target, state, self.leapfrog.max_energy_error)
        if self.metric is not None:
            return self.metric.make_chain(run, self.fit.surrogate(state))
        return euclidean_chain(self.fit.surrogate(state)._ctarget, state,
                               self.leapfrog.max_energy_error, test=run.target,
                               delayed_acceptance=self.delayed_acceptance)

    def trajectory(self, run):
        fit = run.state.parts["fit"]
        exact = run.state.parts["dynamics"].mode == "exact"
        if exact:  # (a random walk makes one step)
            return (fit.exact_n_steps if self.exact_kernel == "hmc" else 1), self.jitter
        if self.metric is not None:
            return self.metric.leapfrog.n_steps, self.metric.leapfrog.jitter
        return fit.surrogate_n_steps, self.jitter

    def begin(self, run, chain):
        if self.after_adaptation:  # (its last state, evaluated there, and its step size)
            chain.set_state(run.state.kernel, counters=False)
            run.state.parts["fit"].sampling_step_size = chain.step_size
            return
        start_on_surrogate(run, chain)
        if self.metric is not None:
            chain.step_size = self.metric.leapfrog.step_size_of(run.state.chain)
            run.state.parts["fit"].sampling_step_size = chain.step_size

    def iterate(self, run, chain, budget):
        state = run.state
        n_iter = state.phase_length(self.name)
        outputs = state.outputs.setdefault(self.name, {})
        exact = outputs.setdefault("exact_dynamics", np.zeros(n_iter, dtype=bool))
        dynamics = state.parts["dynamics"]
        ran = 0
        while ran < budget and state.iteration < n_iter:
            if self.online is not None:  # (weights installed at a join, while it waited)
                self.online.refresh(run, chain, dynamics.mode)
            first = state.iteration
            stop = min(self.segment_stop(state, n_iter), n_iter)
            if stop <= first:  # never loop in silence
                raise RuntimeError(f"{run.sampler.name} chain {state.chain}: a sampling "
                                   f"segment ends where it starts ({first}; a bug)")
            n = run.run_chunks(self, chain, min(budget - ran, stop - first))
            if n == 0:
                break
            ran += n
            exact[first:first + n] = dynamics.mode == "exact"
            if self.online is not None:
                self.online.segment_done(state, first, n)
                self.online.refresh(run, chain, dynamics.mode)
            if state.iteration == stop < n_iter and self.review_trust(run, chain):
                break  # the dynamics changed: the runner builds the new chain
            if self.waiting(state) or run.budget_spent():
                break
        return ran

    def extended(self, states, length):
        if self.online is not None:
            self.online.extended(states, length)

    def exact_evals(self, state):
        density, gradient, _ = sampling_evals(state)
        return [density, gradient, 0]

    def segment_stop(self, state, n_iter):
        """The sampling iteration where the current segment ends (a trust review, an
        install)."""
        dynamics = state.parts["dynamics"]
        if dynamics.mode == "exact":
            stop = n_iter if dynamics.exact_until is None else dynamics.exact_until
        elif self.trust is None:
            stop = n_iter
        else:
            since, window = dynamics.surrogate_since, self.trust.window
            stop = since + ((state.iteration - since) // window + 1) * window
        if self.online is not None:
            stop = self.online.segment_stop(state, n_iter, stop)
        return stop

    def review_trust(self, run, chain):
        """At a segment's end: distrust the surrogate after a poor window, refit after an exact
        stretch. Returns True when the dynamics changed."""
        state = run.state
        dynamics = state.parts["dynamics"]
        t = state.iteration
        if dynamics.mode == "exact":
            if dynamics.exact_until != t:
                return False
            self.refit(run)
            self.switch_dynamics(run, chain, "surrogate")
            dynamics.surrogate_since, dynamics.exact_until = t, None
            return True
        trust = self.trust
        if trust is None or (t - dynamics.surrogate_since) % trust.window:
            return False
        fit = state.parts["fit"]
        reference = (fit.surrogate_acceptance_rate if trust.reference == "surrogate"
                     else fit.exploration_acceptance_rate)
        event = trust.distrusts(state.outputs["sampling"], t, reference, fit.jump_scale,
                                fit.exploration_jump)
        if event is None:
            return False
        refit = dynamics.n_refits < trust.max_refits
        dynamics.events.append(dict(event, action="refit" if refit else "fallback"))
        dynamics.exact_until = t + trust.refit_iterations if refit else None
        self.switch_dynamics(run, chain, "exact")
        return True

    def refit(self, run):
        """Refit the surrogate to the exploration's training data plus the exact stretches'
        states (with their gradients; a random walk's: its evaluated proposals), with
        ``refit_growth`` times the hidden units."""
        state = run.state
        dynamics = state.parts["dynamics"]
        outputs = state.outputs["sampling"]
        t = state.iteration
        exact = outputs["exact_dynamics"][:t]
        Q, U = outputs["samples"][:t][exact], -outputs["records"]["log_density"][:t][exact]
        # the old surrogate's misfit at the newest exact states (out of sample: where the
        # chain went), centred (a constant offset does not matter)
        newest = slice(-(t - dynamics.events[-1]["iteration"]), None)
        old = self.fit.surrogate(state)
        misfit = old.predict(Q[newest]) - U[newest]
        Q0, U0, G0 = self.fit.exploration.training_rows(state)
        if self.exact_kernel == "metropolis":
            rows = evaluated_rows(outputs["proposals"][:t][exact], U)
            Q, U, G = rows[:, :-1], rows[:, -1], None
        else:
            G = np.vstack([G0, outputs["gradients"][:t][exact]])
        n_hidden = int(round(old.n_hidden * self.trust.refit_growth))
        surrogate = self.fit.fit(state, run.generator, np.vstack([Q0, Q]),
                                 np.concatenate([U0, U]), G, n_hidden)
        if self.metric is not None:
            self.metric.choose_softabs(state.parts["fit"], surrogate, np.vstack([Q0, Q]))
        dynamics.n_refits += 1
        dynamics.events[-1].update(
            misfit_before=float(np.sqrt(np.mean((misfit - misfit.mean()) ** 2))),
            fit_residual=float(surrogate.fit_residual_), n_hidden=int(surrogate.n_hidden),
            n_train=int(surrogate.n_train_))

    def switch_dynamics(self, run, chain, mode):
        """Carry the chain over to the exact or the surrogate's dynamics at its position; its
        evaluation counters so far are kept per kind of dynamics."""
        state = run.state
        dynamics = state.parts["dynamics"]
        counts = dynamics.mode_evals[dynamics.mode]
        counts[0] += chain.n_density_evals
        counts[1] += chain.n_gradient_evals
        dynamics.mode = mode
        new = self.make_chain(run)
        new.set_position(chain.position)
        fit = state.parts["fit"]
        if mode == "surrogate":
            new.step_size = fit.sampling_step_size
        elif self.exact_kernel == "hmc":  # (a random walk keeps its proposal's scale)
            new.step_size = fit.explore_step_size
        run.keep_current(self.name, new)

    def waiting(self, state):
        return self.online is not None and self.online.waiting(state)

    def join(self, states):
        if self.online is not None:
            self.online.join(states)

    def end(self, run, chain):
        if self.online is not None:
            self.online.end(run.state)

    def report(self, result, states):
        surrogate_report(result, states)
        if self.online is not None:
            self.online.report(result, states)


def start_on_surrogate(run, chain):
    """Continue from the exploration's last state on the surrogate's dynamics; the exact
    evaluation there counts to training."""
    state = run.state
    chain.set_position(state.kernel["position"])
    chain.step_size = state.kernel["step_size"]
    state.parts["fit"].sampling_step_size = chain.step_size
    state.evals["training"][0] += chain.n_density_evals
    chain.n_density_evals = chain.n_gradient_evals = 0


def sampling_evals(state):
    """Exact density, exact gradient and surrogate gradient evaluations of the sampling phase
    (over its exact and surrogate dynamics)."""
    if "dynamics" not in state.parts:
        return 0, 0, 0  # (not begun)
    dynamics = state.parts["dynamics"]
    counts = {k: list(v) for k, v in dynamics.mode_evals.items()}
    current = state.evals.get("sampling", [0, 0])
    counts[dynamics.mode][0] += current[0]
    counts[dynamics.mode][1] += current[1]
    return (counts["exact"][0] + counts["surrogate"][0], counts["exact"][1],
            counts["surrogate"][1])


def surrogate_report(result, states):
    """A surrogate sampler's evaluation counts (the exploration's, training's and any other
    phase before sampling count as ``_explore``), its fits and its trust record."""
    per_chain = lambda f, dtype=None: np.array([f(s) for s in states], dtype=dtype)
    sampling = per_chain(sampling_evals, np.int64)
    before = [name for name, _ in states[0].phases if name != "sampling"]
    result["n_density_evals_sampling"] = sampling[:, 0]
    result["n_gradient_evals_sampling"] = sampling[:, 1]
    result["n_surrogate_gradient_evals"] = sampling[:, 2]
    result["n_density_evals_explore"] = per_chain(
        lambda s: sum(s.evals.get(name, [0, 0])[0] for name in before), np.int64)
    result["n_gradient_evals"] = (per_chain(lambda s: s.evals["exploration"][1], np.int64)
                                  + result["n_gradient_evals_sampling"])
    result["n_density_evals"] = (result["n_density_evals_explore"]
                                 + result["n_density_evals_sampling"])
    fits = [s.parts["fit"] for s in states]
    result["surrogate_n_steps"] = np.array([f.surrogate_n_steps for f in fits], dtype=np.int64)
    result["exact_n_steps"] = np.array([f.exact_n_steps for f in fits], dtype=np.int64)
    result["exploration_acceptance_rate"] = np.array(
        [f.exploration_acceptance_rate for f in fits])
    surrogates = [f.surrogate for f in fits]
    result["n_train"] = np.array([s["n_train_"] for s in surrogates], dtype=np.int64)
    result["fit_residual"] = np.array([s["fit_residual_"] for s in surrogates])
    result["gradient_residual"] = np.array(
        [np.nan if s["gradient_residual_"] is None else s["gradient_residual_"]
         for s in surrogates])
    result["surrogate"] = surrogates
    draws = result.samples.shape[1]
    result["exact_dynamics"] = np.stack(
        [s.outputs["sampling"].get("exact_dynamics", np.zeros(draws, dtype=bool))
         for s in states])
    dynamics = [s.parts["dynamics"] for s in states]
    result["n_refits"] = np.array([d.n_refits for d in dynamics], dtype=np.int64)
    result["trust_events"] = [list(d.events) for d in dynamics]
    result["fallback"] = np.array([any(e["action"] == "fallback" for e in events)
                                   for events in result["trust_events"]])


class RiemannianSurrogateAdaptation(Phase):
    """RNS-RMHMC's "adaptation" phase: dual averaging of the generalized leapfrog's step size
    on the surrogate's Hessian metric (:class:`SurrogateMetric`), from the exploration's last
    state, with the exact test; its exact densities count to training."""

    def __init__(self, fit, metric):
        super().__init__("adaptation")
        self.fit, self.metric, self.adapt = fit, metric, True

    def trajectory(self, run):
        return self.metric.leapfrog.n_steps, self.metric.leapfrog.jitter

    def make_chain(self, run):
        return self.metric.make_chain(run, self.fit.surrogate(run.state))

    def begin(self, run, chain):
        start_on_surrogate(run, chain)
        target_accept = self.metric.leapfrog.target_accept
        chain.restart_step_size_adaptation(
            initial_step_size(chain, run.generator, target_accept=target_accept), target_accept)

    def adapts_step_size(self, run):
        return True

    def finish_adaptation(self, run, chain):
        if run.state.phase_length(self.name) > 0:
            chain.step_size = chain.final_step_size

    def exact_evals(self, state):
        # (the dynamics' gradients and metrics are the surrogate's)
        return [(list(state.evals.get(self.name, [])) + [0])[0], 0, 0]
