"""The exploration: an exact chain whose draws are a surrogate's training data, and the check
that ends it.

:class:`HMCExploration` (exact HMC with Stan's warm-up, keeping every leapfrog step with its
potential and gradient) and :class:`MetropolisExploration` (adaptive Metropolis, keeping every
evaluated proposal) share a :class:`TrainingWindow`: the final iterations that train the
surrogate, and the check that the chain moved in them. With ``tune="auto"`` an exploration
runs in rounds, and its barrier, :class:`ExplorationCheck`, fits a trial surrogate after each
round and lets the exploration end once that surrogate predicts the held-out transitions well.
"""
import dataclasses
import math

import numpy as np

from ...adaptation import RepeatedWarmup
from ...state import PartState, generator_from_json, generator_to_json
from ...validation import check_integer
from .base import Phase, approach_mode
from .exact import (HMCPhase, MetricWarmup, MetropolisPhase, NUTSPhase, ProposalState,
                    WindowedWarmup)


class TrainingWindow:
    """What an exploration phase shares: its length, the final ``n_train`` iterations that
    train the surrogate (None: all but the first fifth, the papers' protocol scaled to the
    exploration), the check that the chain moved in them, and where a new chain starts
    (``start``: "init", the chain's initial point, or "lbfgs", from there L-BFGS on the exact
    potential towards the mode: :func:`~rnshmc.samplers.phases.base.approach_mode`)."""

    KIND = "exploration"  # its name in messages
    STARTS = ("init", "lbfgs")

    def __init__(self, n_train, start="init"):
        self.n_train = None if n_train is None else check_integer(n_train, "n_train", 1)
        if start not in self.STARTS:
            raise ValueError(f"the exploration's start must be one of {self.STARTS}, got "
                             f"{start!r}")
        self.start = start

    def begin(self, run, chain):
        new = run.state.kernel is None
        super().begin(run, chain)
        if new and self.start == "lbfgs":
            approach_mode(chain)

    def length(self, n_explore):
        """The exploration's iterations, checked against ``n_train``."""
        n_explore = check_integer(n_explore, "tune (exploration iterations)", minimum=2)
        n_train = n_explore - n_explore // 5 if self.n_train is None else self.n_train
        if n_train > n_explore:
            raise ValueError(f"n_train ({n_train}) exceeds the exploration length ({n_explore})")
        return n_explore

    def window(self, state):
        """The training window: a slice of the exploration's iterations."""
        n_explore = state.phase_length(Phase.EXPLORATION)
        n_train = n_explore - n_explore // 5 if self.n_train is None else self.n_train
        return slice(n_explore - n_train, n_explore)

    def check_moved(self, state, sampler_name):
        """Raise RuntimeError if the window has no accepted move; else its acceptance rate."""
        accepted = state.outputs[Phase.EXPLORATION]["records"]["accepted"][self.window(state)]
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
        The phase's barrier: where a chain's state has ``ExploreChecks`` (``tune="auto"``
        with training data "trajectories", whose last rows are the proposals it needs), the
        exploration runs in rounds and, after each, this check decides whether it goes on
        (see :class:`ExplorationCheck`).
    """

    KIND = "exact-HMC exploration"
    ADVICE = ("Its step size or mass matrix is unsuitable: give a smaller step_size, a longer "
              "exploration, or let the exploration adapt (step_size=None).")

    def __init__(self, leapfrog, n_train=None, training_data="trajectories", check=None,
                 start="init"):
        if training_data not in ("states", "trajectories"):
            raise ValueError(f"training_data must be 'states' or 'trajectories', got "
                             f"{training_data!r}")
        keep = ("samples", "records", "gradients")
        if training_data == "trajectories":  # (also the checks' proposals)
            keep += ("trajectory",)
        HMCPhase.__init__(self, Phase.EXPLORATION, leapfrog, keep=keep)
        TrainingWindow.__init__(self, n_train, start)
        self.training_data = training_data
        self.warmup = ExplorationWarmup(leapfrog)
        self.barrier = check

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

    def held_out_states(self, state, iterations):
        """The states of the exploration's ``iterations`` (a slice) and their exact
        potentials: (Q, U)."""
        history = state.outputs[self.name]
        return history["samples"][iterations], -history["records"]["log_density"][iterations]

    def report(self, result, states):
        if all(ExploreChecks.find(s) is not None for s in states):
            result["exploration"] = [dict(iterations=s.phase_length(self.name),
                                          reason=ExploreChecks.of(s).reason,
                                          checks=list(ExploreChecks.of(s).checks))
                                     for s in states]



class NUTSExploration(HMCExploration, NUTSPhase):
    """Exact NUTS whose every leapfrog step (with its potential and gradient) is a surrogate's
    training data, with a metric learned from the draws and gradients (:class:`MetricWarmup`,
    in rounds when the exploration runs in rounds).

    A tree spreads its steps along the whole of a U-turn-free path, so its training points
    cover more of the posterior per exact gradient than short static trajectories do, and the
    metric from draws and gradients is exact for a Gaussian from a handful of draws. Its check
    (with ``tune="auto"``) is on sigma, the spread of U - U_surrogate over the held-out states
    (:class:`ExplorationCheck`).

    Parameters
    ----------
    leapfrog : LeapfrogSettings
        The step size, mass matrix, their adaptation and target_accept (its steps and jitter
        are not used).
    n_train : int or None
        As for :class:`HMCExploration`.
    check : ExplorationCheck or None
    metric : str
        The warm-up's metric (one of :attr:`MetricWarmup.METRICS`; default "low_rank").
    max_tree_depth : int
        The deepest tree (default 6: at most 63 leapfrog steps a transition, all recorded).
    """

    KIND = "exact-NUTS exploration"
    ADVICE = ("Give a longer exploration, an init nearer the posterior's bulk, or let the "
              "exploration adapt (step_size=None).")

    def __init__(self, leapfrog, n_train=None, check=None, metric="low_rank", max_tree_depth=6,
                 start="init"):
        NUTSPhase.__init__(self, Phase.EXPLORATION, leapfrog, max_tree_depth, adapt=True,
                           keep=("samples", "records", "gradients", "trajectory"),
                           metric=metric)
        TrainingWindow.__init__(self, n_train, start)
        self.training_data = "trajectories"
        if leapfrog.adapt_mass_matrix:
            self.warmup = ExplorationMetricWarmup(leapfrog, metric)
        else:
            self.warmup = ExplorationWarmup(leapfrog)
        self.barrier = check

    def recorded_steps(self, run):
        return 2 ** self.max_tree_depth - 1

    def proposals(self, state, iterations):
        raise TypeError("a NUTS exploration has no single proposal per transition: its check "
                        "is on sigma")


@dataclasses.dataclass
class ExploreChecks(PartState):
    """An exploration that goes on, in rounds, until a surrogate fitted to it predicts the
    next states well (see :class:`ExplorationCheck`)."""
    KEY = "explore_checks"
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
    the round's last fifth (with a shared surrogate, all the chains' data pooled) and judged
    on those held-out transitions, which cost nothing extra. Every check records sigma, the
    standard deviation of U - U_surrogate over the held-out states (``docs/algorithms.md``
    section 14), and the exploration stops by ``criterion``:

    - "acceptance" (a static sampling trajectory after an exact-HMC exploration): where the
      exact transition from q0 to the proposal q1 had acceptance min(1, exp(-dH)), the
      surrogate's dynamics would have had (their energy error being the same leapfrog's)
      min(1, exp(-dH - (e(q1) - e(q0)))), e = U - U_surrogate (dH <= 0 taken as 0: the
      prediction errs low). The exploration stops when the predicted mean acceptance is at
      least ``GOOD_ENOUGH`` times the exact one.
    - "sigma" (surrogate NUTS, or a NUTS exploration): surrogate NUTS's moves are long, so its
      test is close to an independence sampler's, whose acceptance a = erfc(sigma / 2) and
      effective draws per exact evaluation a / (2 - a) depend on sigma alone (0.83 and 0.71 at
      sigma 0.3; :func:`effective_draws_per_evaluation`). The exploration stops when another
      round is predicted to save fewer evaluations than it costs: the sampling phase's planned
      transitions N (over the chains sharing the check; with a stopping rule ``ess=``, about
      the wanted ESS) would cost N / eff(sigma) at this sigma and N / eff(sigma') after a
      round that lowers sigma by the factor the last round did (a half after the first),
      against the evaluations of the round just run.

    Either way it stops at ``max_length``, and else goes on for another round. Every check is
    recorded (``result["exploration"]``). The training phase then fits the surrogate to all
    the data, held-out rounds included.
    """

    CRITERIA = ("acceptance", "sigma")
    GOOD_ENOUGH = 0.85
    # the factor a round is predicted to lower sigma by, where no earlier round says (on the
    # authors' PDE the second of 50 iterations per chain lowered it by 0.42-0.86, 4 seeds)
    FIRST_SIGMA_GAIN = 0.5
    HELD_OUT = 5  # the round's last 1/HELD_OUT iterations are held out

    def __init__(self, sampler_name, settings, share, criterion="acceptance"):
        if criterion not in self.CRITERIA:
            raise ValueError(f"criterion must be one of {self.CRITERIA}, got {criterion!r}")
        self.sampler_name, self.settings, self.share = sampler_name, settings, share
        self.criterion = criterion

    def waiting(self, exploration, state):
        """Whether the chain waits at the end of a round for its check."""
        checks = ExploreChecks.find(state)
        return (checks is not None and state.phase == exploration.name and state.phase_started
                and state.iteration == state.phase_length(exploration.name)
                and checks.checked_at < state.iteration)

    def join(self, exploration, states):
        """Check the waiting chains (together, with a shared surrogate)."""
        waiting = [s for s in states if self.waiting(exploration, s)]
        if not waiting:
            return
        groups = [waiting] if self.share else [[s] for s in waiting]
        for group in groups:
            self.check_group(exploration, group)

    def check_group(self, exploration, states):
        first = states[0]
        checks = ExploreChecks.of(first)
        n = first.phase_length(exploration.name)
        held_out = slice(n - max(1, checks.round_length // self.HELD_OUT), n)
        for state in states:
            exploration.check_moved(state, self.sampler_name)
        Q, U, G = (None if parts[0] is None else np.concatenate(parts) for parts in
                   zip(*(exploration.training_rows(s, stop=held_out.start) for s in states)))
        generator = generator_from_json(first.rng)
        surrogate = self.settings.fit(first.dim, generator, Q, U, G,
                                      self.settings.hidden_units(first.dim))
        first.rng = generator_to_json(generator)
        # sigma: the spread of log(pi / pi~) = U~ - U over the posterior, here the held-out
        # states (proposals reach into the tails, where a few misfits would dominate it)
        Q_held, U_held = (np.concatenate(parts) for parts in zip(
            *(exploration.held_out_states(s, held_out) for s in states)))
        errors = U_held - surrogate.predict(Q_held)
        errors = errors[np.isfinite(errors)]
        record = dict(iteration=n, sigma=float(errors.std()) if errors.size > 1 else np.nan,
                      training_points=int(len(U)), held_out=int(len(U_held)),
                      evaluations=int(sum(sum(s.evals.get(exploration.name, [0, 0])[:2])
                                          for s in states)))
        if self.criterion == "acceptance":
            good = self.acceptance_check(exploration, states, held_out, surrogate, record)
            reason = "the surrogate predicts well"
        else:
            good = self.sigma_check(states, checks.checks, record)
            reason = "another round would cost more than it saves"
        longest = n + checks.round_length > checks.max_length
        for state in states:
            checks = ExploreChecks.of(state)
            checks.checks.append(dict(record))
            checks.checked_at = n
            if good or longest:
                checks.reason = reason if good else "the longest exploration"
            else:
                state.extend_phase(exploration.name, n + checks.round_length)

    def sigma_check(self, states, earlier, record):
        """The "sigma" criterion (recorded in ``record``): whether another round is predicted
        to save fewer exact evaluations than the last round cost."""
        sigma = record["sigma"]
        before = earlier[-1] if earlier else dict(sigma=np.inf, evaluations=0)
        gain = (min(1.0, sigma / before["sigma"]) if np.isfinite(before["sigma"])
                else self.FIRST_SIGMA_GAIN)
        transitions = sum(s.phase_length(Phase.SAMPLING) for s in states)
        with np.errstate(divide="ignore", invalid="ignore"):  # (eff 0: an infinite cost)
            saving = transitions * (1.0 / np.float64(effective_draws_per_evaluation(sigma))
                                    - 1.0 / np.float64(effective_draws_per_evaluation(
                                        gain * sigma)))
        record.update(predicted_saving=float(saving),
                      round_evaluations=record["evaluations"] - before["evaluations"])
        if effective_draws_per_evaluation(sigma) == 0.0:
            return False  # (a surrogate no use as it is: another round, if one is left)
        return not saving > record["round_evaluations"]  # (NaN sigma: stop)

    def acceptance_check(self, exploration, states, held_out, surrogate, record):
        """The "acceptance" criterion on the held-out transitions (recorded in ``record``):
        whether the surrogate's predicted acceptance is good enough."""
        Q0, U0, Q1, U1, exact = (np.concatenate(parts) for parts in zip(
            *(exploration.proposals(s, held_out) for s in states)))
        error_change = (U1 - surrogate.predict(Q1)) - (U0 - surrogate.predict(Q0))
        with np.errstate(divide="ignore", over="ignore"):
            predicted = np.exp(np.minimum(0.0, np.log(exact) - error_change))
        record.update(predicted_acceptance=float(predicted.mean()),
                      exact_acceptance=float(exact.mean()),
                      error_change_rms=float(np.sqrt(np.mean(error_change ** 2))))
        return record["predicted_acceptance"] >= self.GOOD_ENOUGH * record["exact_acceptance"]


def effective_draws_per_evaluation(sigma):
    """Effective draws per exact evaluation of surrogate NUTS where sigma is the spread of
    log(pi / pi~) over the posterior, its trees taken as independent proposals from pi~: the
    test then accepts a = erfc(sigma / 2) on average (log-normal weights), and a chain that
    rejects independently with probability 1 - a has integrated autocorrelation time
    (2 - a) / a (``docs/algorithms.md`` section 14)."""
    accept = math.erfc(sigma / 2.0)
    return accept / (2.0 - accept)


class ExplorationWarmup(WindowedWarmup):
    """Stan's warm-up over an exploration; one that runs in rounds (``ExploreChecks``) repeats
    the schedule of a round, so that the windows do not move when a round is added."""

    def schedule(self, state, n_iter):
        checks = ExploreChecks.find(state)
        if checks is None:
            return super().schedule(state, n_iter)
        return RepeatedWarmup(checks.round_length, n_iter,
                              super().schedule(state, checks.round_length))


class ExplorationMetricWarmup(ExplorationWarmup, MetricWarmup):
    """:class:`MetricWarmup` over an exploration, its schedule repeated in rounds as
    :class:`ExplorationWarmup`'s."""


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
        MetropolisPhase.__init__(self, Phase.EXPLORATION, target_accept, adapting=True,
                                 keep=("samples", "records", "proposals"))
        TrainingWindow.__init__(self, n_train)
        self.training_data = training_data

    def end(self, run, chain):
        # the adapted proposal: reported, and the sampling phase's inverse mass matrix unless
        # one was given
        state = run.state
        proposal = ProposalState(chain.get_state()["proposal_covariance"], float(chain.step_size))
        state.parts[ProposalState.KEY] = proposal
        if state.inverse_mass is None:
            state.inverse_mass = proposal.covariance

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
        result["proposal_covariance"] = np.array([ProposalState.of(s).covariance for s in states])
        result["proposal_scale"] = np.array([ProposalState.of(s).scale for s in states])


def evaluated_rows(proposals, U):
    """The rows (proposal, its potential) of a random walk's evaluated proposals that a
    values-only fit takes: finite, and at most the highest of the states' potentials ``U``
    plus their range (a few far-out values would dominate the least-squares fit)."""
    return proposals[proposals[:, -1] <= 2 * np.max(U) - np.min(U)]  # (NaN fails too)

