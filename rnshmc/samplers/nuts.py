"""The No-U-Turn Sampler (Hoffman and Gelman 2014, as Stan runs it) with Stan-style warm-up."""
import warnings

import numpy as np

from ..diagnostics import e_bfmi
from ..validation import check_integer, user_stacklevel
from ._base import Sampler, warn_unadapted
from .phases.base import LeapfrogSettings, Phase, by_name
from .phases.exact import NUTSPhase

__all__ = ["NUTS"]

# the share of draws at the largest tree depth above which a run is warned about
SATURATION_WARNING = 0.01
# the E-BFMI under which a chain is warned about (Stan's threshold)
E_BFMI_WARNING = 0.3


class NUTS(Sampler):
    """The No-U-Turn Sampler: HMC whose trajectory doubles until it turns back on itself,
    the draw taken from the whole trajectory by multinomial sampling (Stan's algorithm: the
    generalized no-U-turn criterion, checked across merged subtrees too; biased progressive
    sampling between subtrees). No trajectory length to tune. See ``docs/algorithms.md``
    (section 13).

    Two phases per chain: ``"warmup"`` (``tune`` iterations, default 300: Stan's adaptation
    of the step size, to NUTS's acceptance statistic, and of the mass matrix in windows, or a
    burn-in at the given settings; discarded) and ``"sampling"``.

    Parameters
    ----------
    target : rnshmc.Target, built-in model or BridgeStan-style object
        The log density to sample (see :class:`rnshmc.Target`). Must have a gradient.
    step_size : float, ndarray of shape (chains,) or None
        Leapfrog step size (one per chain to continue a run). None (default) adapts it during
        warm-up by dual averaging to ``target_accept``.
    max_tree_depth : int
        The most doublings of a trajectory (default 10: at most 1023 leapfrog steps per
        draw). A run whose draws reach it more than 1% of the time is warned about.
    metric : {"auto", "diagonal", "dense", "diagonal_grad", "dense_grad", "low_rank"}
        The mass matrix the warm-up estimates in each of its slow windows. "auto" (default)
        is "low_rank", which measured the fewest gradients to ESS 1000, warm-up included,
        on the benchmark's posteriors (``benchmarks/bench_nuts.py``; it applies as a dense
        matrix, d^2 operations per leapfrog step: for thousands of dimensions and a cheap
        gradient "diagonal_grad" costs less per step). "diagonal" and "dense" are Stan's
        (the window's variances or covariance, shrunk, in Stan's windows);
        "diagonal_grad", "dense_grad" and "low_rank" use the gradients at the window's draws
        too (:func:`rnshmc.adaptation.fisher_diagonal` and
        :func:`~rnshmc.adaptation.fisher_dense`, exact for a Gaussian from a few draws;
        :func:`~rnshmc.adaptation.fisher_low_rank`, the diagonal plus the directions that
        stand out, from fewer draws than dimensions).
        See ``docs/algorithms.md`` (section 13).
    mass_matrix, inverse_mass_matrix, adapt_mass_matrix
        As for :class:`~rnshmc.HMC` (a given mass matrix is not adapted, whatever
        ``metric``).
    target_accept : float
        The mean acceptance statistic the step size is adapted to (default 0.8; higher for
        posteriors with divergences).
    max_energy_error : float
        A point of a trajectory whose energy exceeds the start's by more than this ends it as
        a divergence (default 1000).

    Notes
    -----
    The result has the keys of :meth:`rnshmc.HMC.sample`'s (``n_steps``: the leapfrog steps
    of each draw's tree; ``accept_prob``: NUTS's acceptance statistic, the mean over the
    tree's points of min(1, exp(H0 - H)); ``accepted``: whether the draw is not the starting
    point), plus ``tree_depth`` (chains, draws) and ``e_bfmi`` (per chain: the energy
    Bayesian fraction of missing information, :func:`rnshmc.diagnostics.e_bfmi`; a chain
    under 0.3 is warned about).

    Examples
    --------
    >>> import numpy as np, rnshmc
    >>> target = rnshmc.Target(lambda q: -0.5 * q @ q, grad_logp=lambda q: -q, dim=2)
    >>> res = rnshmc.NUTS(target).sample(500, tune=500, rng=0, progress=False)
    >>> res.samples.shape, int(res.tree_depth.max()) <= 10
    ((4, 500, 2), True)
    """

    name = "NUTS"
    WARM_FROM = Phase.SAMPLING
    # Measured with the default metric (3 seeds, gradients to ESS 1000, warm-up included):
    # 300 iterations cost 0.55-0.75 of 1000's on the correlated regression, eight schools and
    # a logistic regression, and less than 500's; 200 was 10-20% cheaper still there, but on
    # the non-centred GP Poisson left one seed unconverged (R-hat 1.011) with 2-5x the
    # divergences. nutpie tunes for 300 too, Stan for 1000.
    DEFAULT_TUNE = 300

    METRICS = ("diagonal", "dense", "diagonal_grad", "dense_grad", "low_rank")
    # what metric="auto" is (see the docstring)
    AUTO_METRIC = "low_rank"

    def __init__(self, target, *, step_size=None, max_tree_depth=10, metric="auto",
                 mass_matrix=None, inverse_mass_matrix=None, adapt_mass_matrix=None,
                 target_accept=0.8, max_energy_error=1000.0):
        super().__init__(target)
        if metric == "auto":
            metric = self.AUTO_METRIC
        if metric not in self.METRICS:
            raise ValueError(f"metric must be 'auto' or one of {self.METRICS}, got {metric!r}")
        self.metric = metric
        self.max_tree_depth = check_integer(max_tree_depth, "max_tree_depth", minimum=1)
        self.leapfrog = LeapfrogSettings(step_size, 1, False, mass_matrix, inverse_mass_matrix,
                                         adapt_mass_matrix, target_accept, max_energy_error,
                                         dim=self.dim)
        self.phases = by_name(
            NUTSPhase(Phase.WARMUP, self.leapfrog, self.max_tree_depth, adapt=True,
                      metric=metric),
            NUTSPhase(Phase.SAMPLING, self.leapfrog, self.max_tree_depth,
                      keep=("samples", "records")))

    def plan(self, draws, tune, chains, dim):
        self.leapfrog.check_chains(chains)
        warn_unadapted(self.name, tune, self.leapfrog.step_size)
        return [[Phase.WARMUP, tune], [Phase.SAMPLING, draws]]

    def report(self, result, states):
        records = np.stack([s.outputs[Phase.SAMPLING]["records"] for s in states])
        depth = records["tree_depth"][:, :result.samples.shape[1]]
        result["tree_depth"] = depth.astype(np.int64)
        if depth.shape[1] >= 3:
            result["e_bfmi"] = e_bfmi(result["energy"])
            warn_if_low_e_bfmi(self.name, result["e_bfmi"])
        saturated = float(np.mean(depth >= self.max_tree_depth)) if depth.size else 0.0
        if saturated > SATURATION_WARNING:
            warnings.warn(
                f"{self.name}: {saturated:.1%} of the draws reached the largest tree depth "
                f"({self.max_tree_depth}): their trajectories were cut before they turned, so "
                "the chains move less per gradient than they could. A posterior whose scales "
                "differ widely (or change from place to place, as in a funnel) needs a better "
                "metric or a reparameterisation; a larger max_tree_depth only lets each draw "
                "cost more.", RuntimeWarning, stacklevel=user_stacklevel())


def warn_if_low_e_bfmi(name, values):
    """Warn about the chains whose E-BFMI (``values``, per chain) is under
    ``E_BFMI_WARNING``."""
    low = [(chain, value) for chain, value in enumerate(values) if value < E_BFMI_WARNING]
    if low:
        listed = ", ".join(f"chain {chain} {value:.2f}" for chain, value in low)
        warnings.warn(
            f"{name}: E-BFMI under {E_BFMI_WARNING} ({listed}): a momentum draw moves these "
            "chains across too little of the posterior's energy, so they explore its tails "
            "slowly and their tail estimates may be off. The metric misfits the posterior's "
            "shape: reparameterise it (a hierarchical model non-centred, a scale parameter on "
            "the log scale); a longer warm-up rarely helps.", RuntimeWarning,
            stacklevel=user_stacklevel())
