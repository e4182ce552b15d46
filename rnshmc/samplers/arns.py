"""ARNS-HMC: RNS-HMC whose surrogate keeps learning during sampling, with vanishing adaptation
(Algorithm 4 of Zhang, Shahbaba and Zhao 2017)."""
import numpy as np

from ..validation import check_integer
from .rns import RNSHMC

__all__ = ["ARNSHMC"]


def _inverse_sqrt(t):
    return 1.0 / np.sqrt(t)


class ARNSHMC(RNSHMC):
    """RNS-HMC with online output weights: the surrogate improves with every new state.

    The phases are RNS-HMC's (exact-HMC exploration, one fit, then surrogate dynamics with the
    exact Metropolis test), except that the fit also starts an online least-squares estimator
    (:meth:`~rnshmc.RandomNetworkSurrogate.partial_fit`: Greville's / recursive least-squares
    updates, O(s^2) per point) and, during sampling, each proposal is added to it with its
    exact potential (which the Metropolis test computed anyway; ``online_points``). The
    updated weights are installed into the dynamics after iteration t of the sampling phase only with probability
    a_t (``adaptation_rate``, default 1/sqrt(t)): a_t -> 0 with sum a_t infinite, the
    diminishing adaptation of Roberts and Rosenthal (2007, Theorem 5) that keeps the chain
    ergodic for the true posterior. Between installs the dynamics are a fixed surrogate's, so
    every transition is an exact RNS-HMC transition.

    Parameters
    ----------
    adaptation_rate : callable
        ``a(t)`` for t = 1, 2, ... (sampling iterations): the install probability, in [0, 1].
    online_points : {"proposals", "accepted"}
        The points added to the estimator: every proposal the exact test evaluated (default:
        a rejected proposal is where the surrogate's dynamics went wrong, the most
        informative point there is), except rejected ones of diverging transitions or with a
        potential above the last fit's highest plus its range (far out, a few huge values
        would dominate the least-squares fit); or only the accepted ones (the new chain
        states). On the authors' PDE from 40 training states at the papers' step size and L
        (4 chains x 2000 draws), proposals raised the final acceptance from 0.13 to 0.64 and
        min ESS from 28 to 614; uncapped, they ruined a 15-unit surrogate of a Gaussian
        (acceptance 0.02).
    freeze_after : int or None
        No installs, and no more points added to the estimator, after this many sampling
        iterations (the draws after it are plain RNS-HMC with a fixed surrogate); 0 never
        installs.
    **kwargs
        As for :class:`~rnshmc.RNSHMC` (``ridge`` must be positive: the estimator starts from
        the ridge fit's inverse normal matrix).

    Notes
    -----
    The install times do not depend on the chain, so the C chain loop runs uninterrupted from
    one install to the next (about 2 sqrt(n) of them in n iterations) and the points in
    between are added in one batch. What remains is the O(s^2) update per point (three passes
    over s x s triangles: about 0.35 ms at s = 1000).
    """

    name = "ARNS-HMC"
    ONLINE = True

    def __init__(self, target, adaptation_rate=_inverse_sqrt, online_points="proposals",
                 freeze_after=None, **kwargs):
        super().__init__(target, **kwargs)
        if online_points not in ("proposals", "accepted"):
            raise ValueError(f"online_points must be 'proposals' or 'accepted', got "
                             f"{online_points!r}")
        self.online_points = online_points
        if not callable(adaptation_rate):
            raise TypeError("adaptation_rate must be a callable a(t)")
        if self.surrogate_options["ridge"] <= 0:
            raise ValueError("ARNS-HMC needs ridge > 0 (the online estimator starts from the "
                             "ridge fit)")
        self.adaptation_rate = adaptation_rate
        self.freeze_after = None if freeze_after is None else check_integer(
            freeze_after, "freeze_after", minimum=0)

    # saved as the default's absence (a Python function cannot be saved without pickle)
    NOT_CHECKPOINTED = ("adaptation_rate",)

    def checkpoint_arguments(self):
        if self.adaptation_rate is not _inverse_sqrt:
            raise ValueError("ARNS-HMC cannot checkpoint a run with a custom adaptation_rate "
                             "(a Python function is not saved without pickle): use the "
                             "default 1/sqrt(t)")
        return super().checkpoint_arguments()

    @staticmethod
    def extras_to_save(extras):
        # the online estimator (weights, Theta, Phi, normal equations, pending rows) as
        # arrays, the install stream as JSON
        from ..checkpoint import generator_to_json
        extras = dict(extras)
        if "online_surrogate" in extras:
            extras["online_surrogate"] = extras["online_surrogate"].get_state(online=True)
        if "install_rng" in extras:
            extras["install_rng"] = generator_to_json(extras["install_rng"])
        return extras

    @staticmethod
    def extras_restored(extras):
        from ..checkpoint import generator_from_json
        from ..surrogate import RandomNetworkSurrogate
        extras = dict(extras)
        if "online_surrogate" in extras:
            extras["online_surrogate"] = RandomNetworkSurrogate.from_state(
                extras["online_surrogate"])
        if "install_rng" in extras:
            extras["install_rng"] = generator_from_json(extras["install_rng"])
        return extras

    def sample(self, draws=1000, tune=200, chains=1, rng=None, init=None, progress=True,
               pool="auto", checkpoint=None, checkpoint_every=1000):
        """Explore with exact HMC, fit the surrogate, then draw samples while it learns.

        Parameters
        ----------
        draws, tune, chains, rng, init, progress, pool
            As for :meth:`rnshmc.RNSHMC.sample`.

        Returns
        -------
        SampleResult
            The keys of :meth:`rnshmc.RNSHMC.sample` (``surrogate``: the last installed
            weights), plus ``installed`` (chains, draws): whether new weights were installed
            after each draw; ``online_added`` (chains, draws): the points each draw added to
            the estimator (0 or 1); ``n_installs`` and ``n_online_points`` (points added to
            the estimator) per chain.
        """
        return super().sample(draws=draws, tune=tune, chains=chains, rng=rng, init=init,
                              progress=progress, pool=pool,
                              checkpoint=checkpoint, checkpoint_every=checkpoint_every)

    # ------------------------------------------------------------------------------------------

    def phase_spec(self, name):
        spec = super().phase_spec(name)
        if name == "sampling" and self.online_points == "proposals":
            spec = spec._replace(keep=spec.keep + ("proposals",))
        return spec

    def _fitted(self, state, surrogate, U):
        state.extras["online_surrogate"] = surrogate
        state.extras["shared_estimator"] = False  # (until _fit_shared says otherwise)
        # twice the fitted potentials' range above their minimum
        state.extras["online_ceiling"] = float(2 * np.max(U) - np.min(U))

    def _train(self, state, generator):
        super()._train(state, generator)
        # spawned after the surrogate's child stream, and not advancing the chain's stream:
        # with adaptation frozen at 0 the draws are RNS-HMC's
        state.extras["install_rng"] = generator.spawn(1)[0]

    def _sampling_surrogate(self, state):
        return state.extras["online_surrogate"]

    def _next_install(self, state, n_iter):
        """The sampling iteration (1-based) after which the next install happens, or None.

        The coin flips (u_t < a_t for t = 1, 2, ...) do not depend on the chain, so they are
        drawn ahead, in order, from their own stream: the chain then runs uninterrupted up to
        the next install, and its accepted states are added to the estimator in one batch.
        That is the per-iteration algorithm exactly (added states change nothing until the
        weights are installed)."""
        t = state.extras.get("coins_drawn", 0)
        if "install_times" in state.extras:  # shared: drawn ahead for all chains
            times = state.extras["install_times"]
            following = times[np.searchsorted(times, t, side="right"):]
            state.extras["coins_drawn"] = int(following[0]) if len(following) else n_iter
            return int(following[0]) if len(following) else None
        install_rng = state.extras["install_rng"]
        last = n_iter if self.freeze_after is None else min(n_iter, self.freeze_after)
        while t < last:
            t += 1
            rate = self._rate(t)
            if rate > 0.0 and install_rng.random() < rate:
                state.extras["coins_drawn"] = t
                return t
        state.extras["coins_drawn"] = t
        return None

    def _segment_stop(self, state, n_iter):
        # segments also end at the next install
        if "install_at" not in state.extras:
            state.extras["install_at"] = self._next_install(state, n_iter)
        install_at = state.extras["install_at"]
        stop = super()._segment_stop(state, n_iter)
        return stop if install_at is None else min(stop, install_at)

    def _segment_done(self, state, first, n):
        outputs = state.outputs["sampling"]
        installed = outputs.setdefault("installed", np.zeros(len(outputs["records"]), dtype=bool))
        added = outputs.setdefault("online_added", np.zeros(len(outputs["records"]), np.int64))
        end = first + n if self.freeze_after is None else min(first + n, self.freeze_after)
        if state.extras["dynamics"] == "surrogate" and first < end:
            # the exact potentials the test computed; an exact stretch's states go to the
            # refit that ends it instead
            added[first:end] = self._online_points(state, slice(first, end))
        if state.extras.get("shared_estimator"):
            return  # the points wait for the other chains' (join)
        Q, U = self._added_points(state, slice(first, end))
        if len(U):
            state.extras["online_surrogate"].partial_fit(Q, U, install=False)
        install_at = state.extras["install_at"]
        if install_at is not None and state.iteration == install_at:
            state.extras["online_surrogate"].install()
            installed[install_at - 1] = True
            del state.extras["install_at"]

    def _online_points(self, state, block):
        """Which sampling iterations in ``block`` add their point to the estimator."""
        records = state.outputs["sampling"]["records"][block]
        new = records["accepted"].astype(bool)
        if self.online_points == "proposals":
            # rejected proposals only under the ceiling set at the last fit: farther out, a
            # few huge values would dominate the least-squares fit
            under = state.outputs["sampling"]["proposals"][block][:, -1] \
                <= state.extras["online_ceiling"]
            new |= under & ~records["diverging"].astype(bool)
        return new

    def _added_points(self, state, block):
        """(Q, U): the points the iterations in ``block`` added."""
        outputs = state.outputs["sampling"]
        new = outputs["online_added"][block].astype(bool)
        if self.online_points == "proposals":
            rows = outputs["proposals"][block][new]
            return rows[:, :-1], rows[:, -1]
        return outputs["samples"][block][new], -outputs["records"]["log_density"][block][new]

    # ------------------------------------------------------------------------------------------
    # one estimator shared by all chains (share_surrogate=True)

    def waiting(self, state):
        # a chain on the shared estimator waits at each install for the others' points
        extras = state.extras
        return super().waiting(state) or (
            bool(extras.get("shared_estimator")) and state.phase == "sampling"
            and extras.get("install_at") is not None and state.iteration == extras["install_at"])

    def _fit_shared(self, states):
        from ..checkpoint import generator_from_json, generator_to_json
        super()._fit_shared(states)
        # the install times, common to all chains, drawn ahead from chain 0's stream
        generator = generator_from_json(states[0].rng)
        coins = generator.spawn(1)[0]
        states[0].rng = generator_to_json(generator)
        # (not after the last draw: an install there changes no draw)
        n_iter = dict(states[0].phases)["sampling"] - 1
        last = n_iter if self.freeze_after is None else min(n_iter, self.freeze_after)
        times = [t for t in range(1, last + 1) if coins.random() < self._rate(t)]
        for state in states:
            state.extras.update(shared_estimator=True, install_times=np.array(times, np.int64),
                                pending_from=0)

    def join(self, states):
        super().join(states)
        sharing = [s for s in states if s.extras.get("shared_estimator")]
        if not sharing or not all(self.waiting(s) for s in sharing) \
                or any(s.phase != "sampling" for s in sharing):
            return
        # every chain's points since the last install, in chain order, then one install for all
        estimator = sharing[0].extras["online_surrogate"]
        for state in sharing:
            t = state.iteration
            Q, U = self._added_points(state, slice(state.extras["pending_from"], t))
            if len(U):
                estimator.partial_fit(Q, U, install=False)
        estimator.install()
        for state in sharing:
            state.outputs["sampling"]["installed"][state.iteration - 1] = True
            state.extras["online_surrogate"] = estimator
            state.extras["pending_from"] = state.iteration
            del state.extras["install_at"]

    def _rate(self, t):
        rate = float(self.adaptation_rate(t))
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"adaptation_rate({t}) = {rate!r} is not a probability")
        return rate

    def end_phase(self, name, chain, state, generator):
        super().end_phase(name, chain, state, generator)
        if name == "sampling" and state.extras.get("shared_estimator"):
            # the points after the last install never reach the shared estimator (they would
            # change no draw)
            state.outputs["sampling"]["online_added"][state.extras["pending_from"]:] = 0
        if name == "sampling":
            state.extras["surrogate"] = state.extras["online_surrogate"].get_state()

    def result(self, states):
        result = super().result(states)
        result["installed"] = np.stack([s.outputs["sampling"]["installed"] for s in states])
        result["online_added"] = np.stack([s.outputs["sampling"]["online_added"]
                                           for s in states])
        result["n_installs"] = result["installed"].sum(axis=1).astype(np.int64)
        result["n_online_points"] = np.array(
            [s.extras["online_surrogate"].n_online_points_ for s in states], dtype=np.int64)
        return result
