"""Sampling on a surrogate's dynamics with the exact test, and the trust watch.

:class:`SurrogateSampling` is the "sampling" phase of the surrogate samplers: the surrogate's
leapfrog (or RNS-RMHMC's generalized leapfrog on its Hessian) with the Metropolis test on the
true density. Its chain runs in segments between the trust watch's reviews and the online
installs (``rnshmc.samplers.phases.online``): :class:`WatchedPhase` is that segment loop, which
L2HMC's learned dynamics on a surrogate use too. The :class:`TrustWatch` distrusts a window of
draws that accepts or moves much less than the exploration did; the chain then runs an exact
stretch and refits, or falls back to exact dynamics for good (``docs/algorithms.md``, RNS-HMC).
The chain's :class:`DynamicsState` records which dynamics run and every trust event; this
module also assembles a surrogate sampler's result keys and warnings.
"""
import dataclasses
import math
import warnings
from typing import Optional

import numpy as np

from ..._kernels._chain import TRANSITION
from ..._kernels._metropolis import MetropolisChain
from ...state import PartState
from ...validation import check_group, check_integer, check_real, user_stacklevel
from .base import Phase, euclidean_chain, nuts_chain
from .exact import ProposalState
from .exploration import ExploreChecks, evaluated_rows
from .fit import FitState, mean_jump, nuts_warmup

TRUST_KEYS = ("ratio", "window", "max_refits", "refit_iterations", "refit_growth",
              "jump_ratio", "kernel")
# the exact kernels of the trust watch's stretches and fallback, by name, and the name a
# warning gives each
EXACT_KERNELS = {"hmc": "exact HMC", "nuts": "exact NUTS", "metropolis": "adaptive Metropolis"}
# the most doublings of a fallback NUTS tree (rnshmc.NUTS's default)
FALLBACK_TREE_DEPTH = 10
# exact transitions run, not kept, when a chain turns to exact dynamics: its step size adapted
# afresh where the chain is, to Stan's default acceptance statistic. The exploration's need
# not suit it there: on the latent-GP Poisson posterior (rnshmc.models.hard.gp_poisson)
# chains handed to exact NUTS at the exploration's step size accepted 0.23 (the statistic)
# where the exploration had accepted 0.78.
REWARM_ITERATIONS, REWARM_TARGET_ACCEPT = 75, 0.8
# the warm-up (not kept) of a chain that samples with exact NUTS from the start: rnshmc.NUTS's
# (the step size and the metric from draws and gradients in Stan's windows). On the latent-GP
# Poisson posterior, with 75 transitions adapting the step size alone at the exploration's
# metric, such chains ended at R-hat 1.35 and 1.05 after 4 x 2000 draws (seeds 0, 1), against
# 1.019 and 1.039 for rnshmc.NUTS.
FALLBACK_WARMUP = 300
# sigma (the spread of U - U_surrogate over the exploration's held-out states at its last
# check) at which surrogate NUTS starts on its exact kernel: its test would accept about
# erfc(sigma / 2) < 0.005, some 200 exact evaluations per effective draw, several times what
# exact NUTS pays on the posteriors of benchmarks/bench_cost.py (36-47)
SIGMA_HOPELESS = 4.0
# what to try where a surrogate's acceptance collapsed without the trust watch
COLLAPSE_ADVICE = ("The trust watch (trust=True, the default) refits such a surrogate and falls "
                   "back to exact dynamics where it stays poor; without it, more hidden units "
                   "(n_hidden) or more training points (a longer tune or n_train).")


@dataclasses.dataclass
class DynamicsState(PartState):
    """Which dynamics a surrogate chain runs, and the trust watch's record."""
    KEY = "dynamics"
    mode: str = "surrogate"                  # or "exact"
    surrogate_since: int = 0                 # the sampling iteration the surrogate came back
    exact_until: Optional[int] = None        # the end of an exact stretch (None: to the end)
    n_refits: int = 0
    events: list = dataclasses.field(default_factory=list)
    # evaluations of the chains of past stretches, by dynamics: [densities, gradients]
    mode_evals: dict = dataclasses.field(
        default_factory=lambda: {"exact": [0, 0], "surrogate": [0, 0]})
    # the exact kernel's own metric where it was adapted afresh (a chain that samples with it
    # from the start); None: the exploration's
    exact_inverse_mass: Optional[np.ndarray] = None

    @classmethod
    def from_tree(cls, tree):
        tree = dict(tree)
        tree.pop("kind", None)
        if tree.get("exact_until") is not None:
            tree["exact_until"] = int(tree["exact_until"])
        tree["events"] = [dict(e) for e in tree.get("events") or []]
        tree["mode_evals"] = {k: [int(x) for x in v] for k, v in tree["mode_evals"].items()}
        if tree.get("exact_inverse_mass") is not None:
            tree["exact_inverse_mass"] = np.asarray(tree["exact_inverse_mass"])
        return cls(**tree)


def running_exact(state):
    """Whether the chain runs its exact kernel (not before its sampling phase has begun)."""
    dynamics = DynamicsState.find(state)
    return dynamics is not None and dynamics.mode == "exact"


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
    exploration's acceptance says nothing of the dynamics').

    ``kernel`` is the exact stretches' and the fallback's kernel where the sampler offers a
    choice (``kernels``; None: the first of them): "nuts" (the No-U-Turn Sampler: no
    trajectory length to choose) or "hmc" (static trajectories of ``exact_n_steps``), each
    with the exploration's step size and the inverse mass matrix it was adapted with. (On the
    latent-GP Poisson posterior of ``rnshmc.models.hard.gp_poisson`` the static length chosen
    for min ESS per gradient from the exploration's covariance was 922 steps, and fallen-back
    chains accepted 0.00-0.21 against 0.77-0.81 in the exploration.)"""

    REFERENCES = ("exploration", "surrogate")

    def __init__(self, ratio=0.5, window=50, max_refits=2, refit_iterations=200,
                 refit_growth=2.0, reference="exploration", jump_ratio=0.1, kernel=None,
                 kernels=("nuts", "hmc")):
        if reference not in self.REFERENCES:
            raise ValueError(f"the trust watch's reference must be one of {self.REFERENCES}, "
                             f"got {reference!r}")
        if kernel is None:
            kernel = kernels[0]
        if kernel not in kernels:
            raise ValueError(f"the trust watch's kernel must be one of {tuple(kernels)} for "
                             f"this sampler, got {kernel!r}")
        self.reference, self.kernel = reference, kernel
        self.ratio = check_real(ratio, "trust ratio", lower=0.0, upper=1.0, upper_inclusive=True)
        self.window = check_integer(window, "trust window", minimum=10)
        self.max_refits = check_integer(max_refits, "trust max_refits", minimum=0)
        self.refit_iterations = check_integer(refit_iterations, "trust refit_iterations", minimum=1)
        self.refit_growth = check_real(refit_growth, "trust refit_growth", lower=1.0,
                                       lower_inclusive=True)
        self.jump_ratio = check_real(jump_ratio, "trust jump_ratio", lower=0.0, upper=1.0,
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



class WatchedPhase(Phase):
    """A phase whose chain runs on a surrogate's dynamics in segments: between the trust
    watch's reviews (every ``trust.window`` iterations on the surrogate; the end of an exact
    stretch) and the online installs. At a review a poor window hands the chain to its exact
    kernel: for ``trust.refit_iterations`` before a refit (:meth:`refit`, where
    ``REFITS``), or for good (fallback). Which dynamics run is the chain's
    :class:`DynamicsState`, which the subclass's ``begin`` creates (none: no watch).

    Parameters
    ----------
    name : str
    trust : TrustWatch or None
    online : OnlineInstalls or None
    exact_kernel : {"hmc", "nuts", "metropolis"}
        The exact stretches' and the fallback's kernel: exact HMC or NUTS with the
        exploration's step size (``FitState.explore_step_size``), or a random walk with its
        own proposal.
    """

    # whether a distrust may refit the surrogate (else it falls back at once)
    REFITS = True

    def __init__(self, name, trust=None, online=None, exact_kernel="hmc"):
        super().__init__(name)
        if exact_kernel not in EXACT_KERNELS:
            raise ValueError(f"exact_kernel must be one of {tuple(EXACT_KERNELS)}, got "
                             f"{exact_kernel!r}")
        self.trust, self.online, self.exact_kernel = trust, online, exact_kernel
        self.barrier = online  # (the installs of a shared online estimator)

    def segment_stop(self, run, n_iter):
        state = run.state
        dynamics = DynamicsState.find(state)
        if dynamics is None:
            return n_iter
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

    def begin_segment(self, run, chain, first, stop):
        state = run.state
        dynamics = DynamicsState.find(state)
        if dynamics is None:
            return
        if self.online is not None:  # (weights installed at a join, while it waited)
            self.online.refresh(run, chain, dynamics.mode)
        # which dynamics made each draw (marked ahead: a segment runs on one dynamics, and a
        # segment cut short by a Ctrl-C keeps its marks)
        outputs = state.outputs.setdefault(self.name, {})
        exact = outputs.setdefault("exact_dynamics",
                                   np.zeros(state.phase_length(self.name), dtype=bool))
        exact[first:stop] = dynamics.mode == "exact"

    def end_segment(self, run, chain, first, stop):
        state = run.state
        dynamics = DynamicsState.find(state)
        if dynamics is None:
            return False
        if self.online is not None:
            self.online.segment_done(state, first, state.iteration - first)
            self.online.refresh(run, chain, dynamics.mode)
        return (state.iteration == stop < state.phase_length(self.name)
                and self.review_trust(run, chain))

    def review_trust(self, run, chain):
        """At a segment's end: distrust the surrogate after a poor window, refit after an exact
        stretch. Returns True when the dynamics changed."""
        state = run.state
        dynamics = DynamicsState.of(state)
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
        fit = FitState.of(state)
        reference = (fit.surrogate_acceptance_rate if trust.reference == "surrogate"
                     else fit.exploration_acceptance_rate)
        event = trust.distrusts(state.outputs[self.name], t, reference, fit.jump_scale,
                                fit.exploration_jump)
        if event is None:
            return False
        refit = self.REFITS and dynamics.n_refits < trust.max_refits
        dynamics.events.append(dict(event, action="refit" if refit else "fallback"))
        dynamics.exact_until = t + trust.refit_iterations if refit else None
        self.switch_dynamics(run, chain, "exact")
        return True

    def refit(self, run):
        """Refit the surrogate after an exact stretch (where ``REFITS``)."""
        raise NotImplementedError

    def switch_dynamics(self, run, chain, mode):
        """Carry the chain over to the exact or the surrogate's dynamics at its position; its
        evaluation counters so far are kept per kind of dynamics."""
        state = run.state
        dynamics = DynamicsState.of(state)
        counts = dynamics.mode_evals[dynamics.mode]
        counts[0] += chain.n_density_evals
        counts[1] += chain.n_gradient_evals
        dynamics.mode = mode
        new = self.make_chain(run)
        new.set_position(chain.position)
        fit = FitState.of(state)
        if mode == "surrogate":
            new.step_size = fit.sampling_step_size
        elif self.exact_kernel != "metropolis":  # (a random walk keeps its proposal's scale)
            new.step_size = self.rewarm(run, new, fit.explore_step_size)
        run.keep_current(self.name, new)

    def rewarm(self, run, chain, step_size):
        """The exact kernel's step size adapted afresh where the chain is: dual averaging
        from ``step_size`` over ``REWARM_ITERATIONS`` exact transitions, which are not kept
        (their evaluations are counted); the chain goes on from where they end. Recorded in
        the trust event: ``rewarm_step_size``, and ``rewarm_evals`` (exact densities and
        gradients)."""
        n_steps, jitter = self.trajectory(run)
        chain.restart_step_size_adaptation(step_size, REWARM_TARGET_ACCEPT)
        samples = np.empty((REWARM_ITERATIONS, chain.dim))
        records = np.empty(REWARM_ITERATIONS, TRANSITION)
        before = chain.n_density_evals, chain.n_gradient_evals
        chain.run(run.generator, REWARM_ITERATIONS, n_steps, jitter, samples, records,
                  adapt_step_size=True)
        step_size = chain.final_step_size
        DynamicsState.of(run.state).events[-1].update(
            rewarm_step_size=float(step_size),
            rewarm_evals=[chain.n_density_evals - before[0], chain.n_gradient_evals - before[1]])
        return step_size

    def exact_evals(self, state):
        if DynamicsState.find(state) is None:
            return super().exact_evals(state)
        density, gradient, _ = sampling_evals(state)
        return [density, gradient, 0]


class SurrogateSampling(WatchedPhase):
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
    exact_kernel : {"hmc", "nuts", "metropolis"} or None
        The exact stretches' and the fallback's kernel: exact HMC or NUTS with the
        exploration's step size and mass matrix, or the exploration's last adaptive
        Metropolis proposal, frozen. None: the trust watch's ``kernel`` (HMC without one).
    metric : SurrogateMetric or None
        The generalized leapfrog on the surrogate's Hessian metric (its own steps and jitter)
        instead of the leapfrog on its gradient.
    after_adaptation : bool
        (with ``metric``) An adaptation phase came before: continue from its last state with
        its step size, else from the exploration's with the metric's given step size.
    nuts : SurrogateNUTS or None
        Surrogate NUTS instead of the static trajectory: NUTS trees on the surrogate propose,
        the surrogate-transition test on the true density accepts (``docs/algorithms.md``,
        surrogate NUTS).
    """

    def __init__(self, fit, leapfrog, delayed_acceptance=False, trust=None, online=None,
                 keep_gradients=True, jitter=None, exact_kernel=None, metric=None,
                 after_adaptation=False, nuts=None):
        if exact_kernel is None:
            exact_kernel = "hmc" if trust is None else trust.kernel
        super().__init__(Phase.SAMPLING, trust, online, exact_kernel)
        self.metric, self.after_adaptation, self.nuts = metric, after_adaptation, nuts
        self.fit, self.leapfrog, self.delayed_acceptance = fit, leapfrog, delayed_acceptance
        self.jitter = leapfrog.jitter if jitter is None else jitter
        # a random walk's refits are fitted to the values of its proposals
        proposals = (online is not None and online.points == "proposals") or (
            trust is not None and exact_kernel == "metropolis")
        self.keep = ("samples", "records") + (("gradients",) if keep_gradients else ()) \
            + (("proposals",) if proposals else ())

    def hopeless(self, state):
        """The exploration's last sigma where it says surrogate NUTS cannot pay (at least
        ``SIGMA_HOPELESS``, with the trust watch on: the chain then samples with its exact
        kernel from the start), else None."""
        checks = ExploreChecks.find(state)
        if self.nuts is None or self.trust is None or checks is None or not checks.checks:
            return None
        sigma = checks.checks[-1]["sigma"]
        return sigma if not sigma < SIGMA_HOPELESS else None

    def make_chain(self, run):
        state = run.state
        if running_exact(state) or (DynamicsState.find(state) is None
                                    and self.hopeless(state) is not None):
            if self.exact_kernel == "metropolis":  # the exploration's last proposal, frozen
                proposal = ProposalState.of(state)
                return MetropolisChain(run.target, proposal.covariance, proposal.scale)
            # (the exploration's metric, its step size adapted with it; or the exact kernel's
            # own)
            dynamics = DynamicsState.find(state)
            inverse_mass = (dynamics.exact_inverse_mass if dynamics is not None
                            and dynamics.exact_inverse_mass is not None
                            else FitState.of(state).explore_inverse_mass)
            if self.exact_kernel == "nuts":
                return nuts_chain(run.target, state, self.leapfrog.max_energy_error,
                                  FALLBACK_TREE_DEPTH, inverse_mass=inverse_mass)
            return euclidean_chain(run.target, state, self.leapfrog.max_energy_error,
                                   inverse_mass=inverse_mass)
        if self.metric is not None:
            return self.metric.make_chain(run, self.fit.surrogate(state))
        if self.nuts is not None:
            return nuts_chain(self.fit.dynamics(state, guarded=True), state,
                              self.leapfrog.max_energy_error, self.nuts.max_tree_depth,
                              test=run.target, inner_steps=self.nuts.inner_steps)
        return euclidean_chain(self.fit.surrogate(state)._ctarget, state,
                               self.leapfrog.max_energy_error, test=run.target,
                               delayed_acceptance=self.delayed_acceptance)

    def trajectory(self, run):
        fit = FitState.of(run.state)
        exact = running_exact(run.state)
        if exact:  # (a random walk makes one step, NUTS one tree)
            return (fit.exact_n_steps if self.exact_kernel == "hmc" else 1), self.jitter
        if self.metric is not None:
            return self.metric.leapfrog.n_steps, self.metric.leapfrog.jitter
        if self.nuts is not None:
            return 1, False  # (one test of inner_steps trees)
        return fit.surrogate_n_steps, self.jitter

    def begin(self, run, chain):
        state = run.state
        state.parts[DynamicsState.KEY] = DynamicsState()
        if self.after_adaptation:  # (its last state, evaluated there, and its step size)
            chain.set_state(state.kernel, counters=False)
            FitState.of(state).sampling_step_size = chain.step_size
            return
        sigma = self.hopeless(state)
        if sigma is not None:  # (make_chain made the exact kernel's chain)
            dynamics = DynamicsState.of(state)
            dynamics.mode = "exact"
            dynamics.events.append(dict(iteration=0, action="fallback", sigma=float(sigma),
                                        reason="the exploration's sigma"))
            chain.set_position(state.kernel["position"])
            if self.exact_kernel == "nuts":  # (its own warm-up: it is all the chain will run)
                before = chain.n_density_evals, chain.n_gradient_evals
                dynamics.exact_inverse_mass, chain.step_size = nuts_warmup(
                    chain, run.generator, state, self.leapfrog, REWARM_TARGET_ACCEPT,
                    FALLBACK_WARMUP, FitState.of(state).explore_inverse_mass)
                dynamics.events[-1].update(
                    rewarm_step_size=float(chain.step_size),
                    rewarm_evals=[chain.n_density_evals - before[0],
                                  chain.n_gradient_evals - before[1]])
            else:
                chain.step_size = self.rewarm(run, chain, FitState.of(state).explore_step_size)
            return
        start_on_surrogate(run, chain)
        if self.metric is not None:
            chain.step_size = self.metric.leapfrog.step_size_of(state.chain)
            FitState.of(state).sampling_step_size = chain.step_size

    def warm(self, state):
        """A chain carried over from an earlier run (a warm start: ``Sampler.warm_states``)
        samples anew with the surrogate and kernel it has: the earlier run's trust record is
        not this run's."""
        state.parts.pop(DynamicsState.KEY, None)
        self.fit.warm(state)

    def extended(self, states, length):
        if self.online is not None:
            self.online.extended(states, length)

    def refit(self, run):
        """Refit the surrogate to the exploration's training data plus the exact stretches'
        states (with their gradients; a random walk's: its evaluated proposals), with
        ``refit_growth`` times the hidden units."""
        state = run.state
        dynamics = DynamicsState.of(state)
        outputs = state.outputs[self.name]
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
            self.metric.choose_softabs(FitState.of(state), surrogate, np.vstack([Q0, Q]),
                                       start=state.kernel["position"])
        dynamics.n_refits += 1
        dynamics.events[-1].update(
            misfit_before=float(np.sqrt(np.mean((misfit - misfit.mean()) ** 2))),
            fit_residual=float(surrogate.fit_residual_), n_hidden=int(surrogate.n_hidden),
            n_train=int(surrogate.n_train_))

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
    FitState.of(state).sampling_step_size = chain.step_size
    state.evals[Phase.TRAINING][0] += chain.n_density_evals
    chain.n_density_evals = chain.n_gradient_evals = 0


def sampling_evals(state):
    """Exact density, exact gradient and surrogate gradient evaluations of the sampling phase
    (over its exact and surrogate dynamics)."""
    dynamics = DynamicsState.find(state)
    if dynamics is None:
        return 0, 0, 0  # (not begun)
    counts = {k: list(v) for k, v in dynamics.mode_evals.items()}
    current = state.evals.get(Phase.SAMPLING, [0, 0])
    counts[dynamics.mode][0] += current[0]
    counts[dynamics.mode][1] += current[1]
    return (counts["exact"][0] + counts["surrogate"][0], counts["exact"][1],
            counts["surrogate"][1])


def surrogate_report(result, states):
    """A surrogate sampler's evaluation counts (the exploration's, training's and any other
    phase before sampling count as ``_explore``), its fits and its trust record."""
    per_chain = lambda f, dtype=None: np.array([f(s) for s in states], dtype=dtype)
    sampling = per_chain(sampling_evals, np.int64)
    before = [name for name, _ in states[0].phases if name != Phase.SAMPLING]
    result["n_density_evals_sampling"] = sampling[:, 0]
    result["n_gradient_evals_sampling"] = sampling[:, 1]
    result["n_surrogate_gradient_evals"] = sampling[:, 2]
    result["n_density_evals_explore"] = per_chain(
        lambda s: sum(s.evals.get(name, [0, 0])[0] for name in before), np.int64)
    result["n_gradient_evals"] = (per_chain(lambda s: s.evals[Phase.EXPLORATION][1], np.int64)
                                  + result["n_gradient_evals_sampling"])
    result["n_density_evals"] = (result["n_density_evals_explore"]
                                 + result["n_density_evals_sampling"])
    fits = [FitState.of(s) for s in states]
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
    trust_report(result, states)


def trust_report(result, states):
    """The trust watch's result keys: ``exact_dynamics`` (chains, draws), ``n_refits``,
    ``trust_events`` and ``fallback`` per chain."""
    draws = result.samples.shape[1]
    result["exact_dynamics"] = np.stack(
        [s.outputs[Phase.SAMPLING].get("exact_dynamics", np.zeros(draws, dtype=bool))
         for s in states])
    dynamics = [DynamicsState.of(s) for s in states]
    result["n_refits"] = np.array([d.n_refits for d in dynamics], dtype=np.int64)
    result["trust_events"] = [list(d.events) for d in dynamics]
    result["fallback"] = np.array([any(e["action"] == "fallback" for e in events)
                                   for events in result["trust_events"]])


def warn_about_surrogate(name, trust, result, reference, reference_is,
                         advice=COLLAPSE_ADVICE):
    """A surrogate sampler's warnings: with the trust watch, about each chain whose surrogate
    it distrusted (:func:`warn_about_trust_events`); without, about chains whose acceptance
    collapsed under a third of ``reference`` (:func:`warn_if_acceptance_collapsed`)."""
    if trust is not None:
        warn_about_trust_events(name, trust, result,
                                None if trust.reference == "surrogate" else
                                EXACT_KERNELS[trust.kernel])
    else:
        warn_if_acceptance_collapsed(name, result.accepted, reference, reference_is, advice)


def trust_watch(trust, reference="exploration", kernels=("nuts", "hmc"), **defaults):
    """The :class:`TrustWatch` of a sampler's ``trust`` argument (True or None: the defaults;
    False: None, no watch; a dict: its ``TRUST_KEYS``), with the sampler's own ``defaults``,
    ``reference`` and exact ``kernels`` (those it can run, the default first) under it."""
    if trust is False:
        return None
    given = {} if trust is True or trust is None else check_group(trust, "trust", TRUST_KEYS)
    return TrustWatch(**{**defaults, **given}, reference=reference, kernels=kernels)


def warn_about_trust_events(name, trust, result, exact=None):
    """One warning per chain whose surrogate was distrusted: what happened (``exact``: the
    name of the exact kernel; by default exact HMC after an HMC exploration, else adaptive
    Metropolis)."""
    if exact is None:
        exact = "exact HMC" if trust.reference == "exploration" else "adaptive Metropolis"
    against = ("in exploration" if trust.reference == "exploration"
               else "on the surrogate itself")
    for chain, events in enumerate(result["trust_events"]):
        if not events:
            continue
        first = events[0]
        if "sigma" in first:  # (an exploration that found the surrogate no use)
            warnings.warn(
                f"{name} chain {chain}: the surrogate was no use after the exploration (sigma, "
                f"the spread of its error over the held-out states, {first['sigma']:.3g} >= "
                f"{SIGMA_HOPELESS}), so the chain sampled with {exact} instead. It is exact; "
                "a surrogate with more hidden units (n_hidden), a longer exploration or "
                "another parameterisation of the model may help (result['exploration'] has "
                "the checks).", RuntimeWarning, stacklevel=user_stacklevel())
            continue
        what = []
        if result.n_refits[chain]:
            what.append(f"refitted {result.n_refits[chain]} time(s) (after {exact} stretches "
                        f"of {trust.refit_iterations} iterations, with more hidden units)")
        if result.fallback[chain]:
            what.append(f"replaced by {exact} from draw {events[-1]['iteration']} on")
        what = " and then ".join(what) or (f"handed to {exact} for a stretch the run's end "
                                           "cut short")
        jump = first.get("window_jump", math.nan) / first.get("exploration_jump", math.nan)
        moved = (f"; its moves {jump:.2g} times as long (squared) as the exploration's"
                 if jump < trust.jump_ratio else "")
        warnings.warn(
            f"{name} chain {chain}: the surrogate was poor where the chain went "
            f"(acceptance {first['window_acceptance']:.2f} over draws "
            f"{first['iteration'] - trust.window}-{first['iteration'] - 1}, against "
            f"{first[trust.reference + '_acceptance']:.2f} {against}{moved}); it was {what}. "
            f"{result.exact_dynamics[chain].mean():.0%} of the draws used exact dynamics; "
            "the chain is exact either way (result['trust_events'] has the details).",
            RuntimeWarning, stacklevel=user_stacklevel())


def warn_if_acceptance_collapsed(name, accepted, reference, reference_is, advice):
    """Warn, once for all chains, about chains whose acceptance over a window of draws (a
    tenth, at least 50) is under a third of ``reference`` (per chain).

    Parameters
    ----------
    name : str
    accepted : ndarray of bool, shape (chains, draws)
    reference : ndarray of shape (chains,)
    reference_is : str
        What the reference is, for the message.
    advice : str
        What to try, for the message: what fixed such a fall in the tests.
    """
    draws = accepted.shape[1]
    width = min(max(50, draws // 10), draws)
    windows = accepted[:, :draws // width * width].reshape(len(accepted), -1, width).mean(axis=2)
    falls = []
    for chain, (rates, rate) in enumerate(zip(windows, reference)):
        low = np.flatnonzero(rates < rate / 3)
        if low.size:
            falls.append(f"chain {chain} to {rates[low[0]]:.2f} over draws {low[0] * width}-"
                         f"{(low[0] + 1) * width - 1} (of {rate:.2f})")
    if falls:
        warnings.warn(
            f"{name}: acceptance fell under a third of {reference_is}: {'; '.join(falls)}. "
            f"The surrogate is poor in part of the posterior: the chains are still exact but "
            f"mix slowly there. {advice}", RuntimeWarning, stacklevel=user_stacklevel())
