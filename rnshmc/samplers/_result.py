"""A run's result from its chains' states: assembly, the draws of an interrupted run, and the
warnings about what went wrong (stuck chains, failed health checks, a poor surrogate)."""
import warnings

import numpy as np

from ..diagnostics import DIVERGENCE_ADVICE, ESS_PER_CHAIN, SamplingWarning, health
from ..results import SampleResult
from ..state import ChainState
from ..validation import user_stacklevel
from .phases.base import Phase

__all__ = ["base_result", "cut_to"]

# result["timings"] keys of the phases (others are keyed by their names)
TIMING_NAMES = {Phase.WARMUP: "tune", Phase.EXPLORATION: "tune", Phase.TRAINING: "train"}



def base_result(name, states):
    """The result of finished chains: the sampling phase's draws and records, the step sizes
    and mass matrices, evaluation counts (each phase's chain counters summed) and timings.

    Parameters
    ----------
    name : str
        The sampler's name.
    states : list of ChainState

    Returns
    -------
    SampleResult
    """
    stack = lambda key: np.stack([s.outputs[Phase.SAMPLING][key] for s in states])
    records = stack("records")
    evals = lambda phase, i: np.array([s.evals.get(phase, [0, 0])[i] for s in states],
                                      dtype=np.int64)
    total = lambda i: sum(evals(phase, i) for phase, _ in states[0].phases)
    timings = {}
    for s in states:
        for phase, seconds in s.timings.items():
            key = TIMING_NAMES.get(phase, phase)
            timings[key] = timings.get(key, 0.0) + seconds
    inverse_mass = [s.inverse_mass for s in states]
    accepted = records["accepted"].astype(bool)
    result = SampleResult(
        sampler=name,
        samples=stack("samples"),
        log_density=records["log_density"].copy(),
        accepted=accepted,
        accept_prob=records["accept_prob"].copy(),
        acceptance_rate=accepted.mean(axis=1),
        diverging=records["diverging"].astype(bool),
        energy=records["energy"].copy(),
        step_size=np.array([s.kernel["step_size"] for s in states]),
        n_steps=records["n_steps"].copy(),
        inverse_mass_matrix=None if inverse_mass[0] is None else np.stack(inverse_mass),
        n_density_evals=total(0),
        n_gradient_evals=total(1),
        n_density_evals_sampling=evals(Phase.SAMPLING, 0),
        n_gradient_evals_sampling=evals(Phase.SAMPLING, 1),
        timings=timings,
    )
    warn_about_stuck_chains(name, result)
    warn_about_lagging_chains(name, result)
    warn_about_health(name, result)
    result["convergence_problems"] = convergence_problems(result)
    result["converged"] = not result["convergence_problems"]
    return result


def convergence_problems(result, ess_per_chain=ESS_PER_CHAIN):
    """Why a result's draws are not yet a usable answer (empty: they are): R-hat above
    1.01 (or the run's ``rhat=``), bulk or tail ESS under ``ess_per_chain`` per chain
    (Vehtari et al. 2021), too few draws to tell, or a chain that never moved. A stopping
    rule's "converged" checks the same (see :class:`~rnshmc.samplers._stopping.StoppingRule`).
    Divergences are warned about but are not in this list: they say where the draws may be
    biased, not that the chains have not mixed.

    Parameters
    ----------
    result : SampleResult
        With its ``health`` (see :func:`warn_about_health`).

    Returns
    -------
    list of str
    """
    checks = result["health"]
    chains = result.samples.shape[0]
    rhat_limit = result.get("stopping", {}).get("rhat_target", 1.01)
    problems = []
    if np.isnan(checks["rhat_max"]) or np.isnan(checks["ess_bulk_min"]):
        problems.append(f"too few draws ({result.samples.shape[1]} per chain) to tell")
    else:
        if checks["rhat_max"] > rhat_limit:
            problems.append(f"R-hat {checks['rhat_max']:.3g} > {rhat_limit}")
        for key, kind in (("ess_bulk_min", "bulk"), ("ess_tail_min", "tail")):
            if not checks[key] >= ess_per_chain * chains:
                problems.append(f"{kind} ESS {checks[key]:.0f} < {ess_per_chain:.0f} per chain "
                                f"({ess_per_chain * chains:.0f})")
    stuck = [chain for chain in range(chains) if not np.any(result.accepted[chain])]
    if stuck:
        problems.append(f"chains {stuck} never moved")
    return problems


def run_cost(sampler, states, ess):
    """What the run paid, per phase and in all (every chain summed), and per effective draw.

    Parameters
    ----------
    sampler : Sampler
        The sampler of the states (its phases count their exact evaluations).
    states : list of ChainState
    ess : float
        The run's minimum bulk ESS (NaN if unknown).

    Returns
    -------
    dict
        ``phases``: per phase name, ``density_evals``, ``gradient_evals``,
        ``metric_evals`` (exact evaluations of the model: a gradient evaluation also
        evaluates the density and counts in both) and ``seconds`` (summed over chains);
        the same four keys in all; ``model_evals`` (density plus gradient evaluations: for a
        model with an adjoint gradient, forward plus adjoint solves), ``ess_bulk_min`` and
        ``model_evals_per_effective_draw``.
    """
    phases = {}
    for name, _ in states[0].phases:
        counts = np.sum([sampler.phase(name).exact_evals(s) for s in states], axis=0)
        phases[name] = dict(density_evals=int(counts[0]), gradient_evals=int(counts[1]),
                            metric_evals=int(counts[2]),
                            seconds=float(sum(s.timings.get(name, 0.0) for s in states)))
    cost = dict(phases=phases)
    for key in ("density_evals", "gradient_evals", "metric_evals", "seconds"):
        cost[key] = sum(p[key] for p in phases.values())
    cost["model_evals"] = cost["density_evals"] + cost["gradient_evals"]
    cost["ess_bulk_min"] = float(ess)
    cost["model_evals_per_effective_draw"] = (cost["model_evals"] / ess if ess > 0
                                              else float("nan"))
    return cost


def cut_to(state, draws, copy=True):
    """A copy of a chain's state whose sampling phase ends after ``draws`` iterations (what
    was drawn of a run that was stopped), for a result; ``copy=False`` cuts the state itself
    (a run that ends there: a deep copy of a surrogate sampler's online estimator took a
    second)."""
    index = [name for name, _ in state.phases].index(Phase.SAMPLING)
    n = state.phases[index][1]
    sampling = state.outputs.get(Phase.SAMPLING, {})
    if copy:
        state = ChainState.from_dict(dict(state.to_dict(),
                                          outputs=dict(state.outputs, sampling={}))).copy()
    state.phases[index] = [Phase.SAMPLING, draws]
    state.outputs[Phase.SAMPLING] = {key: value[:draws].copy() if isinstance(value, np.ndarray)
                                 and value.shape[:1] == (n,) else value
                                 for key, value in sampling.items()}
    state.phase_index, state.iteration = len(state.phases), 0
    return state


def sampling_draws(state):
    """The sampling iterations a chain has made."""
    if state.done:
        return state.phase_length(Phase.SAMPLING)
    return state.iteration if state.phase == Phase.SAMPLING else 0


def drawn_so_far(name, states, checkpoint=None):
    """The states of an interrupted run cut to what every chain with sampling draws has
    drawn (warned about), or None when no chain has a draw."""
    drawn = [(s, sampling_draws(s)) for s in states or []]
    drawn = [(s, n) for s, n in drawn if n > 0]
    if not drawn:
        return None
    kept = min(n for _, n in drawn)
    draws = drawn[0][0].phase_length(Phase.SAMPLING)
    saved = "" if checkpoint is None else f" (the run is saved in {checkpoint})"
    warnings.warn(f"{name}: interrupted; returning the first {kept} of {draws} draws of "
                  f"chains {[s.chain for s, _ in drawn]} (the chains with sampling "
                  f"draws){saved}", RuntimeWarning, stacklevel=user_stacklevel())
    return [cut_to(s, kept) for s, _ in drawn]


def warn_about_health(name, result):
    """Stan's and PyMC's checks after sampling (R-hat, bulk and tail ESS per chain,
    divergences: :func:`rnshmc.diagnostics.health`): kept in ``result["health"]``, and one
    :class:`~rnshmc.diagnostics.SamplingWarning` saying what failed."""
    checks, problems = health(result.samples, result.diverging)
    result["health"] = dict(checks, problems=problems)
    if problems:
        warnings.warn(f"{name}: " + "; ".join(problems) + ".", SamplingWarning,
                      stacklevel=user_stacklevel())


def warn_about_stuck_chains(name, result):
    """Warn about chains that never moved or whose every proposal diverged while sampling."""
    for chain in range(result.samples.shape[0]):
        if np.all(result.diverging[chain]):
            warnings.warn(f"{name} chain {chain}: every proposal of the sampling phase diverged, "
                          f"so its draws are all the same point: {DIVERGENCE_ADVICE}.",
                          RuntimeWarning, stacklevel=user_stacklevel())
        elif not np.any(result.accepted[chain]):
            warnings.warn(f"{name} chain {chain}: no proposal of the sampling phase was "
                          "accepted: its draws are all the same point and tell nothing about "
                          "the posterior. Use a smaller step size (or longer warm-up).",
                          RuntimeWarning, stacklevel=user_stacklevel())


def warn_about_lagging_chains(name, result):
    """Warn about a chain whose sampling acceptance rate is under a third of the median of
    the other chains' (itself above 0.1): stuck in a corner, or where its kernel does not
    fit, while the pooled diagnostics may still look passable."""
    rates = result.accepted.mean(axis=1)
    if len(rates) < 2:
        return
    for chain, rate in enumerate(rates):
        others = np.median(np.delete(rates, chain))
        if 0 < rate < others / 3 and others > 0.1:  # (0: warned about as stuck)
            warnings.warn(
                f"{name} chain {chain}: its acceptance rate while sampling is {rate:.2f}, "
                f"under a third of the other chains' ({others:.2f}). It is stuck in a part of "
                "the posterior the others do not reach, or its kernel does not fit there; its "
                "draws mix slowly. Look at its trace and R-hat; a longer warm-up (tune) or a "
                "start nearer the others (init) usually helps.", RuntimeWarning,
                stacklevel=user_stacklevel())
