"""When a run stops: after its planned draws, or as soon as it has what the user asked for.

A :class:`StoppingRule` lets ``sample(ess=...)`` sample **until** the pooled minimum bulk ESS
reaches ``ess`` and the largest R-hat is at most ``rhat`` (both over the coordinates, on the
sampling draws of all chains: :func:`rnshmc.diagnostics.ess_bulk`, :func:`~rnshmc.diagnostics.rhat`),
or a budget of exact evaluations (``max_evals``) or of wall time (``max_time``) is spent.

The conditions are checked at fixed sampling iterations (:meth:`StoppingRule.next_check`: 50,
then every 5%, at least every 10): the chains run in segments that end there (the
execution layer's loop), so a check reads the draws made and re-runs nothing, and a run
stopped and resumed checks at the same points and stops at the same draw. The sampling
phase is planned short and lengthened as the run goes on (the random streams do not depend
on a phase's planned length). The evaluation budget is split equally among the chains and
checked at each chain's chunk ends; the time budget is a deadline at chunk ends.
"""
import math
import time
import warnings

import numpy as np

from ..diagnostics import ESS_PER_CHAIN, SamplingWarning, ess_tail, rhat_and_ess_bulk
from ..validation import check_integer, check_real, user_stacklevel
from ._result import cut_to, sampling_draws
from ._runner import Budget, exact_evaluations
from .phases.base import Phase

__all__ = ["StoppingRule", "BudgetSpent"]

# the first check (fewer draws per chain give unreliable ESS and R-hat estimates), and the
# checks' spacing: at most a twentieth of the draws are run past the first sufficient point
FIRST_CHECK = 50
CHECK_GROWTH = 0.05
MIN_CHECK_SPACING = 10


class BudgetSpent(RuntimeError):
    """The evaluation or time budget ran out before the sampling phase drew anything (the
    exception's ``states`` attribute holds every chain's state)."""


class StoppingRule:
    """When a run stops (see the module docstring).

    Parameters
    ----------
    ess : float or None
        Stop when the draws have converged: the pooled minimum bulk ESS reaches it, R-hat
        holds, and the bulk and tail ESS are at least ``ESS_PER_CHAIN`` (100) per chain, the
        same check as a result's ``converged``; None: after ``draws``.
    rhat : float
        The largest R-hat allowed at the stop (default 1.01).
    max_evals : int or None
        Stop when the chains have made this many exact density evaluations in all (a
        gradient evaluation counts as one; every phase counts).
    max_time : float or None
        Stop at the first chunk end past this many seconds of sampling (over a resumed run's
        sessions).
    draws : int or None
        The most sampling iterations per chain (None with ``ess``: no limit).
    elapsed : float
        Seconds spent before this session (a resumed run's).
    """

    def __init__(self, ess=None, rhat=1.01, max_evals=None, max_time=None, draws=None,
                 elapsed=0.0):
        self.ess = None if ess is None else check_real(ess, "ess", lower=0.0)
        self.rhat = check_real(rhat, "rhat", lower=1.0, lower_inclusive=True)
        self.max_evals = None if max_evals is None else check_integer(max_evals, "max_evals",
                                                                      minimum=1)
        self.max_time = None if max_time is None else check_real(max_time, "max_time",
                                                                 lower=0.0)
        self.draws = None if draws is None else check_integer(draws, "draws", minimum=1)
        if self.ess is None and self.draws is None:
            raise ValueError("give draws, ess or both")
        self.elapsed = float(elapsed)
        self.started = time.monotonic()
        self.checked = None  # (draws, min bulk ESS, max R-hat, min tail ESS) of the last check

    @classmethod
    def from_run(cls, run):
        """The rule of a run's arguments (``sample()``'s, as a checkpoint keeps them)."""
        return cls(ess=run.get("ess"), rhat=run.get("rhat", 1.01),
                   max_evals=run.get("max_evals"), max_time=run.get("max_time"),
                   draws=run.get("draws"), elapsed=run.get("elapsed", 0.0))

    @property
    def open_ended(self):
        """Whether the sampling phase's length is decided by the checks."""
        return self.ess is not None

    def initial_draws(self, chains):
        """The sampling phase's planned length at the start."""
        if not self.open_ended:
            return self.draws
        guess = max(FIRST_CHECK, math.ceil(self.ess / chains))  # one ESS per draw
        return guess if self.draws is None else min(guess, self.draws)

    @staticmethod
    def next_check(n):
        """The first check after ``n`` sampling iterations (the checks are fixed: 50, then
        each 5% past the last, at least 10 past it)."""
        check = FIRST_CHECK
        while check <= n:
            check += max(MIN_CHECK_SPACING, math.ceil(CHECK_GROWTH * check))
        return check

    def seconds_used(self):
        return self.elapsed + time.monotonic() - self.started

    # ------------------------------------------------------------------------------------------

    def budget(self, sampler, states, iterations=None, deadline=None):
        """The next segment's :class:`Budget` (on top of a checkpoint's ``iterations`` and
        ``deadline``), after lengthening the sampling phase to cover its next check
        (``sampler.extend_sampling``)."""
        until = evals = None
        if self.open_ended:
            drawn = min(sampling_draws(s) for s in states)
            until = self.next_check(drawn)
            if self.draws is not None:
                until = min(until, self.draws)
            planned = states[0].phase_length(Phase.SAMPLING)
            # (longer than the check: a chain that ends its plan is done for good)
            if until >= planned and (self.draws is None or planned < self.draws):
                grown = max(until + 1, math.ceil(1.5 * planned))
                if self.draws is not None:
                    grown = min(grown, self.draws)
                sampler.extend_sampling(states, grown)
        if self.max_time is not None:
            end = time.monotonic() + self.max_time - self.seconds_used()
            deadline = end if deadline is None else min(deadline, end)
        if self.max_evals is not None:
            evals = math.ceil(self.max_evals / len(states))
        return Budget(iterations, deadline, until, evals)

    def verdict(self, sampler, states):
        """Why the run stops now (a string), or None to go on."""
        if self.open_ended:
            drawn = [sampling_draws(s) for s in states]
            n = min(drawn)
            if n == max(drawn) and n >= FIRST_CHECK and self.is_check(n):
                samples = np.stack([s.outputs[Phase.SAMPLING]["samples"][:n] for s in states])
                self.checked = (n,) + convergence(samples)
                if self.converged(*self.checked[1:], chains=len(states)):
                    return "converged"
        if all(s.done for s in states):
            return "draws"
        if self.max_time is not None and self.seconds_used() >= self.max_time:
            return "max_time"
        if self.max_evals is not None and sum(exact_evaluations(sampler, s) for s in states) \
                >= self.max_evals:
            return "max_evals"
        return None

    def converged(self, ess, rhat, ess_tail, chains):
        """Whether a check's (min bulk ESS, max R-hat, min tail ESS) is a usable answer."""
        floor = ESS_PER_CHAIN * chains
        return ess >= max(self.ess, floor) and ess_tail >= floor and rhat <= self.rhat

    def is_check(self, n):
        """Whether sampling iteration ``n`` is one of the checks."""
        return n >= FIRST_CHECK and self.next_check(n - 1) == n or (
            self.draws is not None and n == self.draws)

    def stop(self, sampler, states, reason):
        """The states cut to the draws every chain has made, and the run's ``stopping``
        record; warns when the run stopped short of what was asked."""
        name = sampler.name
        n = min(sampling_draws(s) for s in states)
        record = dict(reason=reason, draws=n, ess_target=self.ess, rhat_target=self.rhat,
                      exact_evaluations=int(sum(exact_evaluations(sampler, s) for s in states)),
                      seconds=self.seconds_used())
        if n == 0:
            error = BudgetSpent(f"{name}: the {reason_text(reason)} was spent before the "
                                f"sampling phase began ({record['exact_evaluations']} exact "
                                "evaluations): nothing was drawn. Raise it, or resume the "
                                "run from its checkpoint.")
            error.states = states
            raise error
        if self.open_ended:
            if self.checked is not None and self.checked[0] == n:  # (checked at n already)
                record["ess"], record["rhat"], record["ess_tail"] = self.checked[1:]
            else:
                samples = np.stack([s.outputs[Phase.SAMPLING]["samples"][:n] for s in states])
                record["ess"], record["rhat"], record["ess_tail"] = convergence(samples)
            if reason != "converged":
                warnings.warn(
                    f"{name}: stopped by the {reason_text(reason)} at {n} draws per chain, "
                    f"before the target: min bulk ESS {record['ess']:.0f} of {self.ess:g}, "
                    f"max R-hat {record['rhat']:.3f} (at most {self.rhat:g} wanted). The "
                    "draws so far are returned.", SamplingWarning,
                    stacklevel=user_stacklevel())
        elif reason in ("max_time", "max_evals"):
            warnings.warn(f"{name}: stopped by the {reason_text(reason)} at {n} of "
                          f"{self.draws} draws per chain; the draws so far are returned.",
                          SamplingWarning, stacklevel=user_stacklevel())
        # (in place: the run ends here)
        cut = [cut_to(s, n, copy=False) if not (s.done and sampling_draws(s) == n) else s
               for s in states]
        return cut, record


def reason_text(reason):
    return {"max_time": "time budget (max_time)", "max_evals": "evaluation budget (max_evals)",
            "draws": "draws limit", "converged": "convergence check"}[reason]


def convergence(samples):
    """(min bulk ESS, max R-hat, min tail ESS) over the coordinates of ``samples`` (chains,
    draws, dim); a constant coordinate (NaN) counts as not converged."""
    with np.errstate(invalid="ignore", divide="ignore"):
        r, bulk = map(np.atleast_1d, rhat_and_ess_bulk(samples))
        tail = np.atleast_1d(ess_tail(samples))
    if np.any(np.isnan(bulk)) or np.any(np.isnan(r)) or np.any(np.isnan(tail)):
        return 0.0, math.inf, 0.0
    return float(bulk.min()), float(r.max()), float(tail.min())
