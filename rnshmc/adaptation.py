"""Warm-up adaptation: Stan's windowed schedule, the shrunk variance estimate and the initial
step-size heuristic.

The per-iteration arithmetic (dual averaging of the step size, Welford's running variance of
the positions) runs inside the C chain loop (``rnshmc._kernels._transition``); Python is
re-entered only at the ends of the slow windows, where this module's functions turn the
accumulated variance into a new inverse mass matrix and restart the step size.

Both follow Stan's warm-up (Hoffman and Gelman 2014; Stan reference manual, "HMC algorithm
parameters"): an initial fast interval adapting only the step size, slow windows doubling in
length in which the (diagonal) posterior variance is estimated and installed as the inverse
mass matrix, and a final fast interval.
"""
import math

import numpy as np

from .parallel import one_blas_thread

__all__ = ["WarmupSchedule", "RepeatedWarmup", "regularized_variance", "initial_step_size",
           "trajectory_length_for_min_ess", "fisher_diagonal", "fisher_dense", "fisher_low_rank",
           "LowRankMetric"]

# The terminal buffer (step size only, after the last mass-matrix window) is the step size's
# last chance to settle; dual averaging needs a few dozen iterations for that. Stan's fixed 50
# left the acceptance at 0.90-0.94 for a target of 0.8 on Gaussians (min ESS -35%) with long
# warm-ups, hence a fifth of warm-up; with 20 <= tune < 50, Stan's 10% share (2-4 iterations)
# left 8 of 20 seeds with acceptance 0 and step sizes 1.7-6.4 on a unit Gaussian.
MIN_TERMINAL_BUFFER = 50
MIN_SLOW_WINDOW = 20


def terminal_buffer(n_tune):
    """Iterations of the final step-size-only interval for ``n_tune`` warm-up iterations."""
    return max(MIN_TERMINAL_BUFFER, n_tune // 5)


class WarmupSchedule:
    """Stan's windowed warm-up schedule for ``n_tune`` iterations.

    Iterations are split into an initial buffer (75), slow windows starting at 25 iterations and
    doubling, and a terminal buffer (``term_buffer``); a window that would leave less than twice
    its doubled size before the terminal buffer is stretched to it. With fewer than
    init_buffer + base_window + term_buffer iterations the split is 15%, 75%, 10%, as in Stan,
    except that the terminal buffer keeps at least ``min(term_buffer, n_tune // 2)``
    iterations; when the slow window left would be shorter than 20 iterations there are no
    windows (only the step size adapts; ``min_window``, 20 by default, is that least slow
    window). ``window_end(i)`` is True at the last iteration of a
    slow window, when the variance estimate is installed. Otherwise a port of Stan's
    ``windowed_adaptation``.
    """

    def __init__(self, n_tune, init_buffer=75, term_buffer=50, base_window=25,
                 min_window=MIN_SLOW_WINDOW):
        self.n_tune = n_tune
        self.ends = []
        if n_tune < init_buffer + term_buffer + base_window:
            term_buffer = max(int(0.1 * n_tune), min(term_buffer, n_tune // 2))
            init_buffer = int(0.15 * n_tune)
            base_window = n_tune - init_buffer - term_buffer
        if n_tune < 20 or base_window < min_window:
            self.slow_start = self.slow_end = n_tune
            self._ends = set()
            return
        self.slow_start = init_buffer
        self.slow_end = n_tune - term_buffer
        last = self.slow_end - 1
        size = base_window
        end = init_buffer + size - 1
        self.ends.append(end)
        while end != last:
            size *= 2
            end += size
            if end != last and end + 2 * size >= self.slow_end:
                end = last
            self.ends.append(end)
        self._ends = set(self.ends)

    def in_slow_window(self, i):
        return self.slow_start <= i < self.slow_end

    def window_end(self, i):
        return i in self._ends

    def boundaries(self):
        """Iterations at which the adaptation flags change or a window ends (sorted): where the
        C loop must hand back to Python."""
        points = {self.slow_start, self.slow_end} | {end + 1 for end in self.ends}
        return sorted(p for p in points if 0 < p < self.n_tune)


class RepeatedWarmup:
    """``n_tune`` iterations in rounds of ``round_length``, each with Stan's schedule for a
    warm-up of that length (:class:`WarmupSchedule`): a warm-up that may be lengthened by
    whole rounds (an exploration that goes on until its surrogate is good enough), whose
    windows do not move when it is. ``round`` is a round's schedule (default Stan's for
    ``round_length`` iterations); ``slow_start`` is a round's, ``ends`` every round's window
    ends."""

    def __init__(self, round_length, n_tune, round=None):
        self.round = round if round is not None else WarmupSchedule(
            round_length, term_buffer=terminal_buffer(round_length))
        self.round_length, self.n_tune = round_length, n_tune
        self.slow_start = self.round.slow_start
        self.ends = [start + end for start in range(0, n_tune, round_length)
                     for end in self.round.ends if start + end < n_tune]

    def in_slow_window(self, i):
        return self.round.in_slow_window(i % self.round_length)

    def window_end(self, i):
        return self.round.window_end(i % self.round_length)

    def boundaries(self):
        points = set()
        for start in range(0, self.n_tune, self.round_length):
            points |= {start} | {start + p for p in self.round.boundaries()}
        return sorted(p for p in points if 0 < p < self.n_tune)


def regularized_variance(n, variance):
    """Stan's shrunk estimate of ``n`` positions' variance: (n / (n + 5)) var + 1e-3 (5 / (n + 5))
    (``variance`` a vector), or of their covariance, shrunk towards 1e-3 times the identity (a
    matrix)."""
    variance = np.asarray(variance)
    shrinkage = 1e-3 * (5.0 / (n + 5.0))
    if variance.ndim == 2:
        return (n / (n + 5.0)) * variance + shrinkage * np.eye(len(variance))
    return (n / (n + 5.0)) * variance + shrinkage


def _draws_and_gradients(draws, gradients, minimum):
    """The rows (n, dim) of draws and of gradients of the log density there, checked."""
    draws = np.asarray(draws, dtype=np.float64)
    gradients = np.asarray(gradients, dtype=np.float64)
    if draws.ndim != 2 or draws.shape != gradients.shape:
        raise ValueError(f"draws and gradients must be (n, dim) arrays of one shape, got "
                         f"{draws.shape} and {gradients.shape}")
    if len(draws) < minimum:
        raise ValueError(f"need at least {minimum} draws, got {len(draws)}")
    if not (np.all(np.isfinite(draws)) and np.all(np.isfinite(gradients))):
        raise ValueError("draws and gradients must be finite")
    return draws, gradients


def fisher_diagonal(draws, gradients, limits=(1e-20, 1e20)):
    """The diagonal inverse mass matrix sqrt(Var x / Var grad log p), per coordinate, from
    ``draws`` and the gradients of the log density at them: the diagonal metric that
    minimises the Fisher divergence of the preconditioned posterior from a standard normal
    (Seyboldt et al.'s estimator, nutpie's default). Exact for a Gaussian with a diagonal
    covariance from any 2 or more distinct draws: there Var grad = Var x / sigma^4.

    Parameters
    ----------
    draws, gradients : ndarray of shape (n, dim)
    limits : (float, float)
        Each variance is clipped to this range (a coordinate that did not move, or whose
        gradient did not change, gives 0 or inf).

    Returns
    -------
    ndarray of shape (dim,)
    """
    draws, gradients = _draws_and_gradients(draws, gradients, 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.sqrt(draws.var(axis=0) / gradients.var(axis=0))
    return np.clip(np.where(np.isnan(ratio), 1.0, ratio), *limits)


def _symmetric_power(matrix, power):
    values, vectors = np.linalg.eigh(matrix)
    return (vectors * values ** power) @ vectors.T


def _geometric_mean_with_inverse(A, B):
    """The SPD S with S B S = A: the geometric mean of A and B^-1."""
    B_half, B_inverse_half = _symmetric_power(B, 0.5), _symmetric_power(B, -0.5)
    S = B_inverse_half @ _symmetric_power(B_half @ A @ B_half, 0.5) @ B_inverse_half
    return 0.5 * (S + S.T)


@one_blas_thread
def fisher_dense(draws, gradients, regularization=0.0):
    """The dense inverse mass matrix S with S Cov(grad log p) S = Cov(x): the geometric mean
    of Cov(x) and Cov(grad log p)^-1, from ``draws`` and the gradients of the log density at
    them, the dense metric that minimises the Fisher divergence of the preconditioned
    posterior from a standard normal (Seyboldt et al.). Exact for any Gaussian from more than
    dim + 1 draws: there the gradients' covariance is P Cov(x) P (P the precision), and S = P^-1
    solves the equation whatever the draws.

    Parameters
    ----------
    draws, gradients : ndarray of shape (n, dim)
    regularization : float
        Added to both covariances' diagonals (for fewer draws than dim + 2, or coordinates
        that did not move).

    Returns
    -------
    ndarray of shape (dim, dim)
        Symmetric positive definite.

    Raises
    ------
    ValueError
        Where a covariance is not positive definite (too few distinct draws and no
        regularization).
    """
    draws, gradients = _draws_and_gradients(draws, gradients, 2)
    dim = draws.shape[1]
    A = np.atleast_2d(np.cov(draws, rowvar=False)) + regularization * np.eye(dim)
    B = np.atleast_2d(np.cov(gradients, rowvar=False)) + regularization * np.eye(dim)
    smallest = min(np.linalg.eigvalsh(A)[0], np.linalg.eigvalsh(B)[0])
    if not smallest > 0:
        raise ValueError(f"the draws' or the gradients' covariance is singular ({len(draws)} "
                         f"draws in {dim} dimensions): give more distinct draws or a "
                         "regularization > 0")
    return _geometric_mean_with_inverse(A, B)


class LowRankMetric:
    """An inverse mass matrix diag(s) (I + U (diag(lam) - I) U^T) diag(s): a diagonal scaling
    ``s`` and, in the scaled space, the eigenvalues ``lam`` and orthonormal eigenvectors ``U``
    (columns) of the directions where the posterior's scale differs from 1 (the rest are
    left at 1). What :func:`~rnshmc.adaptation.fisher_low_rank` returns.

    Attributes
    ----------
    scale : ndarray of shape (dim,)
    values : ndarray of shape (rank,)
    vectors : ndarray of shape (dim, rank)
    """

    def __init__(self, scale, values, vectors):
        self.scale, self.values, self.vectors = scale, values, vectors

    @property
    def rank(self):
        """The number of directions kept."""
        return len(self.values)

    def dense(self):
        """The inverse mass matrix as a (dim, dim) array (symmetric positive definite)."""
        inner = np.eye(len(self.scale)) + (self.vectors * (self.values - 1.0)) @ self.vectors.T
        matrix = self.scale[:, None] * inner * self.scale[None, :]
        return 0.5 * (matrix + matrix.T)


@one_blas_thread
def fisher_low_rank(draws, gradients, gamma=1e-5, cutoff=2.0):
    """A low-rank-plus-diagonal inverse mass matrix from ``draws`` and the gradients of the
    log density at them, after nutpie's (Seyboldt et al.): the diagonal of
    :func:`~rnshmc.adaptation.fisher_diagonal` scales the space; in the scaled space, the
    geometric mean of the draws' and the inverse gradients' covariances (the estimate of
    :func:`~rnshmc.adaptation.fisher_dense`) is formed on the subspace the draws and
    gradients span, each covariance regularised towards the
    identity by ``gamma`` relative to the other's scale; its eigendirections whose
    eigenvalue is above ``cutoff`` or below ``1 / cutoff`` are kept, the rest of the space
    left at the diagonal. Needs no more draws than dimensions (the directions they do not
    span keep the diagonal), so it suits a larger ``dim`` than the dense estimate; with a
    ``cutoff`` of 1 and ``gamma`` -> 0 it is the dense estimate. See
    ``docs/algorithms.md`` (section 13).

    Parameters
    ----------
    draws, gradients : ndarray of shape (n, dim)
    gamma : float
        The regularisation (> 0) of the scaled covariances, as a share of their trace
        normalisation (nutpie's default 1e-5).
    cutoff : float
        Eigenvalues within [1 / cutoff, cutoff] are dropped (>= 1; default 2). nutpie drops
        those within a factor 100, to save work per leapfrog step, which NUTS here does not
        need (it applies the metric as a dense matrix); on the correlated regression of
        ``rnshmc.models.hard`` a cutoff of 100 kept no direction and cost 7x the gradients to
        ESS 1000, 10 cost 17% more than 2.

    Returns
    -------
    LowRankMetric
    """
    draws, gradients = _draws_and_gradients(draws, gradients, 2)
    if not gamma > 0:
        raise ValueError(f"gamma must be positive, got {gamma}")
    if not cutoff >= 1:
        raise ValueError(f"cutoff must be at least 1, got {cutoff}")
    n = len(draws)
    scale = np.sqrt(fisher_diagonal(draws, gradients))
    # centred and scaled (the 1/n's make Z Z^T and G G^T covariances divided by n, which
    # cancel in the mean but set gamma's meaning)
    Z = ((draws - draws.mean(axis=0)) / scale).T / n
    G = ((gradients - gradients.mean(axis=0)) * scale).T / n
    # an orthonormal basis of the span of both sets of points
    basis, singular, _ = np.linalg.svd(np.hstack([Z, G]), full_matrices=False)
    basis = basis[:, singular > singular[0] * max(Z.shape) * np.finfo(float).eps]
    Zp, Gp = basis.T @ Z, basis.T @ G
    k = basis.shape[1]
    A = Zp @ Zp.T / gamma + np.eye(k)
    B = Gp @ Gp.T / gamma + np.eye(k)
    values, vectors = np.linalg.eigh(_geometric_mean_with_inverse(A, B))
    keep = (values > cutoff) | (values < 1.0 / cutoff)
    return LowRankMetric(scale, values[keep], basis @ vectors[:, keep])


def initial_step_size(chain, generator, step_size=1.0, target_accept=0.8, max_doublings=100):
    """Stan's heuristic: double or halve ``step_size`` until one step's acceptance probability
    crosses ``target_accept``'s neighbourhood (0.8 by default, as in Stan).

    ``chain`` is a C chain (``energy_error_of_one_step``); ``generator`` draws the momenta.
    """
    log_target = math.log(target_accept)

    def log_accept(eps):
        return -chain.energy_error_of_one_step(generator, eps)

    direction = 1 if log_accept(step_size) > log_target else -1
    for _ in range(max_doublings):
        candidate = step_size * (2.0 ** direction)
        above = log_accept(candidate) > log_target
        if (direction == 1 and not above) or (direction == -1 and above):
            return candidate
        step_size = candidate
    raise RuntimeError("could not find a reasonable initial step size: the posterior may be "
                       "improper or its gradient wrong")


def trajectory_length_for_min_ess(covariance, inverse_mass, step_size, jitter=True,
                                  max_steps=1024, fraction=0.9, per="iteration", step_cost=0.0):
    """The shortest number of leapfrog steps whose predicted min ESS per unit of cost (an
    iteration, or a leapfrog step) is within ``fraction`` of the best, for a posterior
    approximated by a Gaussian with ``covariance``.

    On a Gaussian the leapfrog (step size eps, inverse mass M^-1) rotates each eigendirection
    of M^-1 Sigma^-1 (frequency omega_i) by theta_i = arccos(1 - eps^2 omega_i^2 / 2) per step,
    so an iteration of l steps with fresh momentum leaves lag-1 autocorrelation
    rho_i = cos(l theta_i) along it, and a uniform l in {1, ..., L} (``jitter``) the mean of
    those. The chain of each direction is then AR(1) with effective samples per iteration
    (1 - rho_i) / (1 + rho_i) (capped at 1: antithetic resonances are not relied on); the
    slowest direction's is the min ESS. Past the point where it stops growing, steps only cost,
    hence the shortest L within ``fraction`` of the best. (A choice from the covariance alone,
    not from timings, so the same seed gives the same draws.)

    Parameters
    ----------
    covariance : ndarray of shape (dim, dim)
        The posterior covariance (e.g. of exploration states).
    inverse_mass : None or ndarray of shape (dim,) or (dim, dim)
        M^-1 (None: the identity).
    step_size : float
    jitter : bool
        Whether the number of steps is drawn uniformly from {1, ..., L}.
    max_steps : int
        The largest L considered.
    fraction : float
        In (0, 1].
    per : {"iteration", "step"}
        What an iteration costs: one exact density plus ``step_cost`` per leapfrog step
        (surrogate dynamics), or its leapfrog steps (exact dynamics, one gradient per step).
        An iteration has L steps on average without jitter and (L + 1) / 2 with.
    step_cost : float
        With ``per="iteration"``: the cost of one leapfrog step in exact densities (a
        surrogate gradient's; 0 treats the steps as free).

    Returns
    -------
    n_steps : int
    min_ess_per_iteration : float
        The predicted min ESS per iteration at ``n_steps`` (no rejections).
    """
    if per not in ("iteration", "step"):
        raise ValueError(f"per must be 'iteration' or 'step', got {per!r}")
    if not (np.isfinite(step_cost) and step_cost >= 0):
        raise ValueError(f"step_cost must be finite and >= 0, got {step_cost!r}")
    import scipy.linalg
    covariance = np.atleast_2d(np.asarray(covariance, dtype=np.float64))
    dim = covariance.shape[0]
    inverse_mass = np.ones(dim) if inverse_mass is None else np.asarray(inverse_mass, np.float64)
    minv = np.diag(inverse_mass) if inverse_mass.ndim == 1 else inverse_mass
    # omega^2: the generalized eigenvalues of M^-1 v = omega^2 Sigma v
    try:
        omega2 = scipy.linalg.eigh(minv, covariance, eigvals_only=True)
    except np.linalg.LinAlgError:
        raise ValueError("covariance must be symmetric positive definite (from fewer states "
                         "than dimensions it is singular: shrink it first)") from None
    cos_theta = np.clip(1.0 - 0.5 * step_size ** 2 * np.maximum(omega2, 0.0), -1.0, 1.0)
    steps = np.arange(1, max_steps + 1)
    rho = np.cos(np.outer(steps, np.arccos(cos_theta)))  # (max_steps, dim): l steps exactly
    if jitter:
        rho = np.cumsum(rho, axis=0) / steps[:, None]
    ess = np.minimum((1.0 - rho) / np.maximum(1.0 + rho, 1e-12), 1.0).min(axis=1)
    mean_steps = (steps + 1) / 2 if jitter else steps
    value = ess / mean_steps if per == "step" else ess / (1.0 + step_cost * mean_steps)
    best = int(np.argmax(value >= fraction * value.max()))
    return best + 1, float(ess[best])
