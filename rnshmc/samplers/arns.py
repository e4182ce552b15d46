"""ARNS-HMC: RNS-HMC whose surrogate keeps learning during sampling, with vanishing adaptation
(Algorithm 4 of Zhang, Shahbaba and Zhao 2017; ``docs/algorithms.md``)."""
from .phases.online import OnlineInstalls, inverse_sqrt
from .rns import RNSHMC, surrogate_hmc_phases

__all__ = ["ARNSHMC"]


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
        As for :class:`~rnshmc.RNSHMC`; the surrogate must be a random network (the online
        update is its own; a GP surrogate is refused), with ``ridge`` positive (the estimator
        starts from the ridge fit's inverse normal matrix).

    Attributes
    ----------
    DEFAULT_TUNE : "auto"
        As RNS-HMC's.

    Notes
    -----
    The result has the keys of :class:`~rnshmc.RNSHMC`'s (``surrogate``: the last installed
    weights), plus ``installed`` (chains, draws): whether new weights were installed after
    each draw; ``online_added`` (chains, draws): the points each draw added to the
    estimator (0 or 1); ``n_installs`` and ``n_online_points`` (points added to the
    estimator) per chain.

    The install times do not depend on the chain, so the C chain loop runs uninterrupted from
    one install to the next (about 2 sqrt(n) of them in n iterations) and the points in
    between are added in one batch. What remains is the O(s^2) update per point (three passes
    over s x s triangles: about 0.35 ms at s = 1000).
    """

    name = "ARNS-HMC"
    # saved as the default's absence (a Python function cannot be saved without pickle)
    NOT_CHECKPOINTED = ("adaptation_rate",)

    def __init__(self, target, *, adaptation_rate=inverse_sqrt, online_points="proposals",
                 freeze_after=None, **kwargs):
        super().__init__(target, **kwargs)
        self.online = OnlineInstalls(adaptation_rate, online_points, freeze_after)
        if not self.surrogate_settings.cls.supports_online:
            raise ValueError(f"ARNS-HMC updates its surrogate online: a "
                             f"{self.surrogate_settings.cls.__name__} has no online update (use "
                             "a random network, or RNS-HMC with this surrogate)")
        if self.surrogate_settings.options["ridge"] <= 0:
            raise ValueError("ARNS-HMC needs ridge > 0 (the online estimator starts from the "
                             "ridge fit)")
        self.fit, self.phases = surrogate_hmc_phases(self, self.online)

    def checkpoint_arguments(self):
        if self.online.adaptation_rate is not inverse_sqrt:
            raise ValueError("ARNS-HMC cannot checkpoint a run with a custom adaptation_rate "
                             "(a Python function is not saved without pickle): use the "
                             "default 1/sqrt(t)")
        return super().checkpoint_arguments()
