"""ARNS-HMC's online learning: the surrogate's output weights updated during sampling and
installed with vanishing probability.

:class:`OnlineInstalls` adds each evaluated proposal (or accepted state) to the online
estimator (Greville's recursion, ``RandomNetworkSurrogate.partial_fit``) and installs its
weights into the dynamics at times drawn ahead with probability a_t (``docs/algorithms.md``,
ARNS-HMC). The sampling phase (``rnshmc.samplers.phases.dynamics``) asks it where its
segments end and tells it when one is done; with one estimator shared by every chain, it is
the sampling phase's barrier, installing every chain's points at once. Its chain state is
:class:`OnlineState`.
"""
import dataclasses
import math
from typing import Optional

import numpy as np

from ...state import PartState, generator_from_json, generator_to_json
from ...surrogate import RandomNetworkSurrogate
from ...validation import check_integer
from .base import Phase
from .dynamics import DynamicsState
from .fit import FitState


@dataclasses.dataclass
class OnlineState(PartState):
    """ARNS-HMC's online estimator and its install schedule."""
    KEY = "online"
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
        online = state.parts.setdefault(OnlineState.KEY, OnlineState())
        sampling = state.phase == Phase.SAMPLING
        if sampling and Phase.SAMPLING in state.outputs:
            # a refit: the points since the last install never reach an estimator in use
            added = state.outputs[Phase.SAMPLING].get("online_added")
            if added is not None:
                added[online.pending_from:state.iteration] = 0
        online.pending_from = state.iteration if sampling else 0
        online.estimator, online.shared = surrogate, False
        # twice the fitted potentials' range above their minimum
        online.ceiling = float(2 * np.max(U) - np.min(U))
        if online.install_times is not None:
            # a chain leaving the shared estimator (a refit of its own) installs by its own
            # coins from here on, not at the shared times (one may be due right now: left
            # pending, it would stop every segment where it starts)
            online.install_times, online.install_at, online.install_drawn = None, None, False
            online.coins_drawn = state.iteration if sampling else 0

    def shared_fit(self, states):
        """After a shared fit: the install times, common to all chains, drawn ahead from
        chain 0's stream (not after the last draw: an install there changes no draw)."""
        generator = generator_from_json(states[0].rng)
        coins = generator.spawn(1)[0]
        states[0].rng = generator_to_json(generator)
        for state in states:
            online = OnlineState.of(state)
            online.shared, online.install_times = True, np.zeros(0, np.int64)
            online.coins_rng, online.coins_until = generator_to_json(coins), 0
            online.pending_from = 0
        self.draw_shared_installs(states, states[0].phase_length(Phase.SAMPLING))

    def draw_shared_installs(self, states, length):
        """Draw the shared install times of a sampling phase of ``length`` iterations (those
        not drawn yet: the coins continue their stream when the phase grows)."""
        sharing = [s for s in states if OnlineState.of(s).install_times is not None]
        first = OnlineState.of(sharing[0])
        coins = generator_from_json(first.coins_rng)
        last = length - 1 if self.freeze_after is None else min(length - 1, self.freeze_after)
        times = [t for t in range(first.coins_until + 1, last + 1)
                 if coins.random() < self.rate(t)]
        for state in sharing:
            online = OnlineState.of(state)
            online.install_times = np.concatenate([online.install_times,
                                                   np.array(times, np.int64)])
            online.coins_rng, online.coins_until = generator_to_json(coins), max(
                last, first.coins_until)

    def extended(self, states, length):
        """The sampling phase grew: the install times past its old end are drawn (shared)
        or will be (a chain's own coins, which it draws as it goes)."""
        onlines = [OnlineState.find(s) for s in states]
        if any(online is None for online in onlines):
            return  # not fitted yet: the fit plans for the new length
        if any(online.install_times is not None for online in onlines):
            self.draw_shared_installs(states, length)
        for online in onlines:
            if online.install_at is None:
                online.install_drawn = False  # (no install was left before the old end)

    # what the fit asks of the online estimator
    def estimator(self, state):
        """The chain's estimator: the surrogate its dynamics run on."""
        return OnlineState.of(state).estimator

    def restart_schedule(self, state):
        """A warm start: the chain's install schedule is drawn anew."""
        OnlineState.of(state).restart_schedule()

    def unshared(self, state):
        """Whether a warm-started chain's estimator waits to be shared again."""
        online = OnlineState.find(state)
        return online is not None and online.shared and online.install_times is None

    def share_again(self, states):
        """A warm start of a shared estimator: a checkpoint or a copy holds one estimator per
        chain; chain 0's becomes every chain's again, with new shared install times."""
        for state in states:
            OnlineState.of(state).estimator = OnlineState.of(states[0]).estimator
        self.shared_fit(states)

    def start(self, run):
        # spawned after the surrogate's child stream, and not advancing the chain's stream:
        # with adaptation frozen at 0 the draws are RNS-HMC's
        OnlineState.of(run.state).install_rng = run.generator.spawn(1)[0]

    def next_install(self, state, n_iter):
        """The sampling iteration (1-based) after which the next install happens, or None.
        The coin flips (u_t < a_t for t = 1, 2, ...) are drawn in order from their own
        stream."""
        online = OnlineState.of(state)
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
        online = OnlineState.of(state)
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
        outputs = state.outputs[Phase.SAMPLING]
        online = OnlineState.of(state)
        installed = outputs.setdefault("installed", np.zeros(len(outputs["records"]), dtype=bool))
        added = outputs.setdefault("online_added", np.zeros(len(outputs["records"]), np.int64))
        end = first + n if self.freeze_after is None else min(first + n, self.freeze_after)
        if DynamicsState.of(state).mode == "surrogate" and first < end:
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
        records = state.outputs[Phase.SAMPLING]["records"][block]
        new = records["accepted"].astype(bool)
        if self.points == "proposals":
            # rejected proposals only under the ceiling set at the last fit: farther out, a
            # few huge values would dominate the least-squares fit
            under = state.outputs[Phase.SAMPLING]["proposals"][block][:, -1] \
                <= OnlineState.of(state).ceiling
            new |= under & ~records["diverging"].astype(bool)
        return new

    def add_pending(self, state, estimator):
        """Add the chain's points since the last install (or fit) to ``estimator``."""
        online = OnlineState.of(state)
        Q, U = self.added_points(state, slice(online.pending_from, state.iteration))
        if len(U):
            estimator.partial_fit(Q, U, install=False)
        online.pending_from = state.iteration

    def added_points(self, state, block):
        """(Q, U): the points the iterations in ``block`` added."""
        outputs = state.outputs[Phase.SAMPLING]
        new = outputs["online_added"][block].astype(bool)
        if self.points == "proposals":
            rows = outputs["proposals"][block][new]
            return rows[:, :-1], rows[:, -1]
        return outputs["samples"][block][new], -outputs["records"]["log_density"][block][new]

    # the sampling phase's barrier: a chain on the shared estimator waits at each install for
    # the others' points
    def waiting(self, phase, state):
        online = OnlineState.find(state)
        return (online is not None and online.shared and state.phase == phase.name
                and online.install_drawn and online.install_at is not None
                and state.iteration == online.install_at)

    def join(self, phase, states):
        sharing = [s for s in states if OnlineState.find(s) is not None
                   and OnlineState.of(s).shared]
        if not sharing or not all(self.waiting(phase, s) for s in sharing) \
                or any(s.phase != phase.name for s in sharing):
            return
        # every chain's points since the last install, in chain order, then one install for all
        estimator = OnlineState.of(sharing[0]).estimator
        for state in sharing:
            self.add_pending(state, estimator)
        estimator.install()
        for state in sharing:
            online = OnlineState.of(state)
            state.outputs[Phase.SAMPLING]["installed"][state.iteration - 1] = True
            online.estimator = estimator
            online.install_drawn = False
            online.refresh = True

    def refresh(self, run, chain, mode):
        """After an install: the chain's cached potential and gradient of the dynamics are
        the new weights' (the surrogate's own evaluation, no exact one). Without this, the
        first trajectory after an install starts from the old surrogate's gradient and its
        energy: not a reversible map of the new surrogate, so its test would not be exact."""
        online = OnlineState.of(run.state)
        if not online.refresh:
            return
        if mode == "surrogate":  # (an exact stretch's chain has no surrogate cached)
            chain.refresh_dynamics()  # (its dynamics target, the tail guard's included)
            run.keep_current(Phase.SAMPLING, chain)
        online.refresh = False

    def end(self, state):
        online = OnlineState.of(state)
        if online.shared:
            # the points after the last install never reach the shared estimator (they would
            # change no draw)
            state.outputs[Phase.SAMPLING]["online_added"][online.pending_from:] = 0
        else:  # a chain's own estimator learns them (a warm start continues from it)
            self.add_pending(state, online.estimator)
        FitState.of(state).surrogate = online.estimator.get_state()

    def report(self, result, states):
        outputs = [s.outputs[Phase.SAMPLING] for s in states]
        result["installed"] = np.stack([o["installed"] for o in outputs])
        result["online_added"] = np.stack([o["online_added"] for o in outputs])
        result["n_installs"] = result["installed"].sum(axis=1).astype(np.int64)
        result["n_online_points"] = np.array(
            [OnlineState.of(s).estimator.n_online_points_ for s in states], dtype=np.int64)

