"""The front door: ``rnshmc.sample(model, ess=1000)`` picks the sampler that reaches the user's
ESS with the fewest exact model evaluations, and samples until it has
(``docs/guide/choosing-a-sampler.md``).
"""
import functools
import math

import numpy as np

from .samplers import ARNSHMC, NUTS, RNSHMC, GradientFreeRNSHMC
from .samplers._base import Sampler, check_start
from .samplers.checkpoint import SAMPLERS
from .samplers.phases.fit import auto_hidden_units
from .samplers.rns import surrogate_group
from .surrogate import RandomNetworkSurrogate, Surrogate, gradient_flops
from .targets import as_ctarget, check_target, target_dim, unknown_dim
from .validation import check_initial_points, check_integer

__all__ = ["sample", "choose_sampler"]

# A surrogate leapfrog step must cost at most this share of an exact density evaluation for
# surrogate dynamics to pay (besides saving exact gradients, they add a fit and an
# exploration; a model whose gradient is as cheap as a surrogate's is run exactly).
SURROGATE_STEP_SHARE = 0.5


def choose_sampler(model, dim=None, init=None, surrogate=None):
    """The sampler :func:`~rnshmc.sample` uses for ``model``, and why.

    - no gradient (``has_gradient`` False): :class:`~rnshmc.GradientFreeRNSHMC`;
    - a ``surrogate`` given: surrogate dynamics with it, whatever the model's cost (the user
      chose them): :class:`~rnshmc.ARNSHMC` where the surrogate has online updates (a random
      network), else :class:`~rnshmc.RNSHMC` (a Gaussian process), one surrogate shared by
      the chains;
    - a model cheaper than a surrogate (a surrogate's leapfrog step would cost more than
      half an exact density evaluation: from the model's ``density_flops`` where it has
      one, else from timing one evaluation of each): :class:`~rnshmc.NUTS` with its
      defaults (no trajectory length to tune; its metric from draws and gradients);
    - otherwise :class:`~rnshmc.ARNSHMC` with one surrogate shared by the chains and
      refined online.

    Parameters
    ----------
    model : the log density (as for the samplers)
    dim : int or None
        The dimension, if the model does not say.
    init : ndarray of shape (dim,) or None
        Where to time the model (default: zeros).
    surrogate : None, dict or surrogate object
        The surrogate, as the samplers' ``surrogate`` argument (None: their default random
        network).

    Returns
    -------
    sampler : rnshmc.samplers._base.Sampler
    reason : str
    """
    check_target(model)
    dim = target_dim(model) if dim is None else check_integer(dim, "dim", minimum=1)
    if dim is None:
        raise unknown_dim(model, "rnshmc.sample")
    if getattr(model, "has_gradient", True) is False:
        return (GradientFreeRNSHMC(model, share_surrogate=True, surrogate=surrogate),
                "the model has no gradient: gradient-free RNS-HMC")
    if surrogate is not None:
        kind = surrogate_group(surrogate).get("kind", "random_network")
        if Surrogate.kinds[kind].supports_online:
            return (ARNSHMC(model, share_surrogate=True, surrogate=surrogate),
                    "a surrogate was given: ARNS-HMC with it, shared and refined online")
        return (RNSHMC(model, share_surrogate=True, surrogate=surrogate),
                "a surrogate without online updates was given: RNS-HMC with it, shared by "
                "the chains")
    n_hidden = auto_hidden_units(dim)  # (ARNS-HMC's default surrogate)
    share, how = surrogate_step_share(model, dim, n_hidden, init)
    if share > SURROGATE_STEP_SHARE:
        return NUTS(model), (f"a surrogate leapfrog step would cost {share:.2g} exact "
                             f"densities ({how}): exact NUTS")
    return (ARNSHMC(model, share_surrogate=True),
            f"a surrogate leapfrog step costs {share:.2g} exact densities ({how}): ARNS-HMC "
            "with a shared surrogate refined online")


def surrogate_step_share(model, dim, n_hidden, init=None):
    """(cost of a surrogate gradient over an exact density evaluation, how it was found)."""
    flops = getattr(model, "density_flops", None)
    if flops:
        return gradient_flops(dim, n_hidden) / flops, "operation counts"
    point = np.zeros(dim) if init is None else np.asarray(init, dtype=np.float64)
    target = as_ctarget(model, dim)
    model_seconds = target.time_evaluations(point, 1, "potential")
    if not math.isfinite(model_seconds):
        model_seconds = 0.0
    surrogate = surrogate_for_timing(dim, n_hidden)
    surrogate_seconds = surrogate.time_evaluations(np.zeros(dim), 20, "gradient")
    if model_seconds < 10 * surrogate_seconds:  # close: time the model a few more times
        model_seconds = min(model_seconds, target.time_evaluations(point, 5, "potential"))
    return surrogate_seconds / max(model_seconds, 1e-12), "timed"


def surrogate_for_timing(dim, n_hidden):
    """A fitted surrogate's C target of the size a surrogate sampler would use."""
    generator = np.random.default_rng(0)
    points = generator.standard_normal((2 * dim + 2, dim))
    surrogate = RandomNetworkSurrogate(dim, n_hidden=n_hidden, rng=generator, ridge=1e-3)
    surrogate.fit(points, 0.5 * np.sum(points ** 2, axis=1))
    return surrogate._target()


def _ess_by_name(function):
    """``function`` with a clear TypeError for a positional argument after the model (its
    signature, which help() and the docs show, stays ``function``'s)."""
    @functools.wraps(function)
    def checked(*args, **kwargs):
        if len(args) > 1:
            raise TypeError(f"rnshmc.sample takes the model as its only positional argument: "
                            f"write ess={args[1]!r} (the ESS to reach), and give every other "
                            "argument by name")
        return function(*args, **kwargs)
    return checked


@_ess_by_name
def sample(model, *, ess=1000, chains=4, rng=None, init=None, warm_start=None, max_evals=None,
           max_time=None, progress=True, pool="auto", checkpoint=None,
           checkpoint_every="10min", sampler=None, surrogate=None):
    """Sample ``model`` until the pooled minimum bulk ESS reaches ``ess`` and every R-hat is at
    most 1.01, with the fewest exact evaluations rnshmc knows how to spend.

    The sampler is chosen from what the model offers (:func:`~rnshmc.auto.choose_sampler`):
    ARNS-HMC with one surrogate shared by the chains and refined online for a model with a
    gradient, gradient-free RNS-HMC for one without, exact NUTS for a model cheaper than a
    surrogate. Its defaults are the best measured configuration (``benchmarks/bench_cost.py``).
    The run stops at the first check where both conditions hold (see ``ess`` in
    :meth:`rnshmc.HMC.sample`, every sampler's ``sample()``), or when ``max_evals`` or
    ``max_time`` is spent (with a warning and the draws so far). The arguments it shares with
    the samplers' ``sample()`` have the same names and meanings; only ``model`` is given by
    position (``rnshmc.sample(model, 1000)`` is a TypeError: write ``ess=1000``).

    Parameters
    ----------
    model : the log density
        A built-in model, an :class:`rnshmc.Target` or a BridgeStan-style object.
    ess : float
        The pooled minimum bulk ESS wanted (default 1000).
    chains : int
        Chains, run in parallel on this machine's cores (default 4: R-hat needs several).
        With ``warm_start``, the earlier run's chains are continued, as many as it had.
    rng : None, int, SeedSequence or Generator
    init : None, ndarray of shape (dim,) or (chains, dim)
        Initial points (None: the model's ``init_point`` where it has one, else uniform in
        (-2, 2), as Stan).
    warm_start : None, SampleResult or path
        An earlier run on the same model (its result or checkpoint file), to continue: its
        chains go on with their surrogate, mass matrix and step size, without a new
        exploration (see :meth:`rnshmc.HMC.sample`). Not with ``init``.
    max_evals : int or None
        Budget of exact density evaluations (all chains and phases).
    max_time : float or None
        Budget of seconds.
    progress : bool
    pool : "auto", None, executor or dask.distributed.Client
        As for :meth:`rnshmc.HMC.sample` (every sampler's ``sample()``).
    checkpoint : None or path
        Save the run there as it goes; :func:`rnshmc.resume` continues it (to the same
        draws as the uninterrupted run).
    checkpoint_every : int, str or datetime.timedelta
        As for :meth:`rnshmc.HMC.sample` (default every 10 minutes).
    sampler : None, a sampler, a sampler class or its name
        Use this sampler instead of the chosen one (its own settings; the stopping rule
        and budgets still apply). A class (``rnshmc.HMC``) or its name (``"HMC"``, or the
        name results show, ``"ARNS-HMC"``) is made with its default settings on ``model``.
    surrogate : None, dict or surrogate object
        Sample with surrogate dynamics on this surrogate (for example a
        :class:`~rnshmc.GaussianProcessSurrogate`: GP-HMC), as
        :func:`~rnshmc.auto.choose_sampler` says; None (default): the default random network
        where surrogate dynamics pay.

    Returns
    -------
    SampleResult
        The sampler's result (see :meth:`rnshmc.HMC.sample`), with ``stopping`` (why and where it
        stopped), ``cost`` (exact evaluations and seconds per phase, model evaluations per
        effective draw) and ``choice`` (the sampler's name and why it was chosen).
    """
    check_start(init, warm_start, "rnshmc.sample")
    if sampler is None:
        point = None
        if init is not None:  # (checked here: the model is timed there)
            check_target(model)
            point = check_initial_points(init, check_integer(chains, "chains", minimum=1),
                                         target_dim(model), "rnshmc.sample")[0]
        sampler, reason = choose_sampler(model, dim=None if point is None else len(point),
                                         init=point, surrogate=surrogate)
    elif surrogate is not None:
        raise ValueError("give a sampler or a surrogate, not both (a sampler has its own)")
    else:
        sampler, reason = given_sampler(sampler, model), "given"
    result = sampler.sample(None, chains=chains, rng=rng, init=init, warm_start=warm_start,
                            ess=ess, max_evals=max_evals, max_time=max_time, progress=progress,
                            pool=pool, checkpoint=checkpoint, checkpoint_every=checkpoint_every)
    result["choice"] = dict(sampler=sampler.name, reason=reason)
    return result


def given_sampler(sampler, model):
    """``sample()``'s ``sampler``: a sampler as it is, a sampler class, or the name of one
    (its class name, or its ``name``), made on ``model`` with its default settings.

    Raises
    ------
    TypeError
        For anything else, listing what is accepted.
    """
    if isinstance(sampler, Sampler):
        return sampler
    if isinstance(sampler, type) and issubclass(sampler, Sampler):
        return sampler(model)
    # (a subclass that keeps its parent's ``name`` is found by its class name only)
    names = {cls.name: cls for cls in SAMPLERS.values() if "name" in vars(cls)}
    names.update(SAMPLERS)
    if isinstance(sampler, str) and sampler in names:
        return names[sampler](model)
    raise TypeError(f"rnshmc.sample: sampler must be None (chosen for the model), a sampler "
                    f"(such as rnshmc.HMC(model)), a sampler class or the name of one: "
                    f"{', '.join(map(repr, sorted(names)))}; got {sampler!r:.80}")
