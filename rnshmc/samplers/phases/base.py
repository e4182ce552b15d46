"""The phase protocol, and what every phase shares.

A sampler is a declared plan of phases (``docs/architecture.md``): a list of [name,
iterations] whose names are :class:`Phase`'s constants. A phase has three roles, kept apart:

- its **kernel**: how it makes its C chain from the chain's state (:meth:`Phase.make_chain`,
  :meth:`Phase.trajectory`), where the chain starts (:meth:`Phase.begin`), where its
  segments of iterations stop and what happens after one (:meth:`Phase.segment_stop`,
  :meth:`Phase.end_segment`: a trust review, an install), which outputs it keeps and what it
  reports;
- its **warm-up** (``Phase.warmup``, None for a phase that adapts nothing): the object that
  owns the adaptation of the step size and the mass matrix (``rnshmc.samplers.phases.exact``);
- its **barrier** (``Phase.barrier``, None for a phase whose chains never wait for each
  other): ``waiting(phase, state)`` is True where the chain must stop until
  ``join(phase, states)`` has run on every chain (a surrogate fitted to all the chains'
  explorations, the installs of a shared online estimator). The execution layer runs the
  joins.

The runner (``rnshmc.samplers._runner``) alone runs chunks of C transitions: it asks the phase
where each segment stops and calls it after each. This module also holds the settings of an
exact leapfrog chain (checked once) and a chain's first position
(:func:`start_where_finite`). It imports nothing of the other phase modules.
"""
import contextlib
import dataclasses
from typing import Optional

import numpy as np
from scipy.optimize import minimize

from ..._kernels._chain import NonFiniteStart
from ..._kernels._integrators import Leapfrog
from ..._kernels._metrics import EuclideanMetric
from ..._kernels._transition import Chain, NUTSChain
from ...state import PartState
from ...validation import check_integer, check_inverse_mass, check_per_chain_real, check_real


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


def euclidean_chain(dynamics, state, max_energy_error, test=None, delayed_acceptance=False,
                    inverse_mass=None):
    """A leapfrog chain over ``dynamics`` (Metropolis test on ``test``, default the dynamics)
    with ``inverse_mass`` (None: the chain's inverse mass matrix)."""
    if inverse_mass is None:
        inverse_mass = state.inverse_mass
    return Chain(dynamics, test, EuclideanMetric(state.dim, inverse_mass), Leapfrog(),
                 max_energy_error=max_energy_error, delayed_acceptance=delayed_acceptance)


def nuts_chain(target, state, max_energy_error, max_tree_depth, test=None, inner_steps=1,
               inverse_mass=None):
    """A NUTS chain on ``target`` with ``inverse_mass`` (None: the chain's inverse mass
    matrix); with ``test``, surrogate NUTS (trees on ``target``, ``inner_steps`` of them per
    surrogate-transition test on ``test``)."""
    if inverse_mass is None:
        inverse_mass = state.inverse_mass
    return NUTSChain(target, EuclideanMetric(state.dim, inverse_mass), Leapfrog(),
                     max_energy_error=max_energy_error, max_tree_depth=max_tree_depth,
                     test=test, inner_steps=inner_steps)


def continue_from_previous(run, chain):
    """Put ``chain`` where the previous phase left the chain (the first phase: at its initial
    point, see :func:`start_where_finite`); the new phase's counters start at zero."""
    if run.state.kernel is None:
        start_where_finite(run, chain)
    else:
        chain.set_state(run.state.kernel, counters=False)


# starting points a chain tries before giving up (Stan's number)
MAX_START_TRIES = 100

# the most exact evaluations (each with its gradient) an L-BFGS start spends
LBFGS_START_EVALS = 50


class _EvaluationsSpent(Exception):
    """L-BFGS stopped at its budget of evaluations."""


def approach_mode(chain, max_evals=LBFGS_START_EVALS):
    """Move a positioned chain towards the posterior's mode: L-BFGS on the exact potential
    from where the chain stands, at most ``max_evals`` evaluations of the model with its
    gradient (each counted as the chain's), a point where it is not finite taken as +inf. The
    chain ends at the lowest potential found (``state.init`` is left as the point it started
    from). Deterministic: the same start gives the same point.

    A chain started far out reaches the posterior's bulk in a few dozen evaluations of
    quasi-Newton steps, where Stan's warm-up would first spend its early iterations there
    (``docs/algorithms.md`` section 14).
    """
    best = dict(U=-chain.log_density, q=chain.position)
    spent = [0]
    last = [best["q"]]

    def potential_and_gradient(q):
        if spent[0] >= max_evals:
            raise _EvaluationsSpent
        spent[0] += 1
        try:
            chain.set_position(q)
        except NonFiniteStart:
            last[0] = None
            return np.inf, np.zeros_like(q)
        U = -chain.log_density
        last[0] = np.array(q)
        if U < best["U"]:
            best.update(U=U, q=np.array(q))
        return U, chain.gradient

    # (L-BFGS-B may ask for a few evaluations past maxfun: the budget is enforced by the
    # exception, and the best point found so far is kept either way)
    with contextlib.suppress(_EvaluationsSpent):
        minimize(potential_and_gradient, best["q"], jac=True, method="L-BFGS-B",
                 options=dict(maxfun=max_evals, maxiter=max_evals))
    if last[0] is None or not np.array_equal(last[0], best["q"]):
        chain.set_position(best["q"])


@dataclasses.dataclass
class GivenStart(PartState):
    """The starting point a chain was given (tries after it are jittered around it): by the
    user (``source`` "init") or by the model (``source`` "model": its ``init_point``)."""
    KEY = "start"
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
    given = GivenStart.find(state)
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



class Phase:
    """One phase of a plan (see the module docstring). The base is a phase without a chain.

    Attributes
    ----------
    name : str
        Its name in the plan (and in ``state.outputs``, ``state.evals``, ``state.timings``):
        one of the constants below.
    keep : tuple of str
        Outputs kept for every iteration: "samples", "records", "gradients" (the dynamics
        gradient at each state), "trajectory" (every leapfrog step's (q, U, grad U), with
        "trajectory_ends"), "proposals" (each proposal and its exact potential, NaN where it
        was not evaluated). Others go to reused chunk buffers.
    warmup : object or None
        Its adaptation (``rnshmc.samplers.phases.exact.StepSizeWarmup`` and subclasses).
    barrier : object or None
        Its barrier: ``waiting(phase, state)`` and ``join(phase, states)``.
    """

    # the names of the phases in plans
    WARMUP = "warmup"
    APPROACH = "approach"          # RMHMC's exact-HMC start
    EXPLORATION = "exploration"    # a surrogate sampler's exact chain, its training data
    TRAINING = "training"          # the surrogate's fit (no iterations)
    ADAPTATION = "adaptation"      # RNS-RMHMC's step size on the surrogate
    SAMPLING = "sampling"          # the kept draws

    keep = ()
    warmup = None
    barrier = None

    def __init__(self, name):
        self.name = name

    def trajectory(self, run):
        """(n_steps, jitter) of its transitions."""
        return 1, False

    def recorded_steps(self, run):
        """The most leapfrog steps one transition records: the "trajectory" output's rows per
        iteration (a static trajectory's ``n_steps``)."""
        return self.trajectory(run)[0]

    def make_chain(self, run):
        """Its C chain (None: a phase without iterations)."""
        return None

    def begin(self, run, chain):
        """One-time work when the phase starts (``chain`` may be None), before its warm-up
        begins."""
        if chain is not None:
            continue_from_previous(run, chain)

    def segment_stop(self, run, n_iter):
        """The iteration where the segment starting at ``state.iteration`` ends (at most
        ``n_iter``, the phase's length): the runner runs chunks up to it, then calls
        :meth:`end_segment`. By default one segment: the whole phase."""
        return n_iter

    def begin_segment(self, run, chain, first, stop):
        """Before the runner runs iterations ``first`` to ``stop`` (or fewer, if its budget
        ends sooner)."""

    def end_segment(self, run, chain, first, n):
        """After iterations ``first``, ..., ``first + n - 1``; returns True when the chain's
        dynamics changed (the runner then makes the phase's chain anew)."""
        return False

    def end(self, run, chain):
        """One-time work when the phase has run all its iterations."""

    def waiting(self, state):
        """Whether the chain waits at this phase's barrier (see :meth:`join`)."""
        return self.barrier is not None and self.barrier.waiting(self, state)

    def join(self, states):
        """The barrier's work, on every chain's state at once, in chain order, in the calling
        process (so the draws do not depend on where the chains run)."""
        if self.barrier is not None:
            self.barrier.join(self, states)

    def report(self, result, states):
        """Add what this phase knows to a run's result (after the base assembly)."""

    def exact_evals(self, state):
        """[density, gradient, metric] evaluations of the model (exact ones: a surrogate's
        are not counted) this phase has made in a chain."""
        return (list(state.evals.get(self.name, [])) + [0, 0, 0])[:3]

    def extended(self, states, length):
        """The sampling phase of every chain was lengthened to ``length`` iterations (a run
        under a stopping rule: see ``Sampler.extend_sampling``)."""


def by_name(*phases):
    """A sampler's phases as a dict from name to phase (``Sampler.phases``)."""
    return {phase.name: phase for phase in phases}
