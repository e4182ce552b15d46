"""Random-walk Metropolis with an adaptive Gaussian proposal, in C: the gradient-free chain of
``rnshmc.GradientFreeRNSHMC``'s exploration (and a frozen kernel of its own).

A proposal is q* = q + s L z, z ~ N(0, I), L L^T = Sigma (the proposal covariance), s the
global scale; the Metropolis test uses the exact potential only (no gradient is ever asked
for). While ``adapt`` is on, each transition adapts (Andrieu and Thoms 2008, Algorithm 4,
with Haario et al.'s 2001 empirical covariance):

- the scale, by Robbins-Monro on log s towards an acceptance probability ``target_accept``
  (0.234 by default, the optimum of Roberts, Gelman and Gilks 1997): log s += gamma_k
  (alpha - target_accept), gamma_k = k^-0.6, k counted from the last covariance install;
- the covariance, re-estimated at the ends of doubling windows (``window_ends``, Stan's
  schedule): the positions of the window (Welford's running mean and cross-products), shrunk
  towards their diagonal by d / (a + 1 + d) for a accepted moves in the window, become Sigma,
  and the scale restarts from 2.38 / sqrt(d) (the optimum for a Gaussian target when Sigma is
  its covariance). Each window is as long as the chain before it, so the burn-in is forgotten;
  after the last window only the scale adapts.

The adaptation stops after ``n_adapt`` transitions; with ``adapt`` off the kernel is a fixed
random-walk Metropolis kernel. Like ``_transition.Chain`` (whose Python interface this
follows, so the chain driver runs either), it is a ``_chain.BaseChain``: the base's ``run``
makes many transitions in one ``nogil`` block, writes one ``TRANSITION`` record per
transition and stops on the stop flag or a signal as every chain does; this chain owns every
buffer, and ``get_state``/``set_state`` carry everything (adaptation included) so a continued
chain repeats the uninterrupted one bit for bit.
"""
from libc.math cimport exp, pow, sqrt, isfinite, NAN
from libc.string cimport memcpy

import numpy as np

from ._blas cimport RowMajor, Lower
from ._chain cimport BaseChain, RunSettings, Transition
from ._chain import NonFiniteStart
from ._lapack cimport _potrf
from ._random cimport bitgen_t, random_standard_normal_fill, random_standard_uniform
from ._targets cimport CTarget

# the Robbins-Monro step of log s after k adaptive transitions: k^-SCALE_DECAY (in (1/2, 1]:
# a vanishing adaptation that still moves s by orders of magnitude in a hundred transitions)
cdef double SCALE_DECAY = 0.6


cdef class MetropolisChain(BaseChain):
    """State and transitions of one random-walk Metropolis chain (internal; see the module
    docstring).

    Parameters
    ----------
    test : CTarget
        The target; only its potential is evaluated.
    covariance : ndarray of shape (dim, dim)
        The proposal covariance Sigma (symmetric positive definite).
    step_size : float
        The global scale s of the proposal.
    adapt : bool
        Adapt the scale and the covariance (see the module docstring) during the first
        ``n_adapt`` transitions counted by the state.
    n_adapt : int
        Transitions that adapt.
    window_ends : sequence of int
        0-based transitions after which the covariance is re-estimated (ascending, each
        below ``n_adapt``); the covariance accumulates from transition 0 to the last end.
    target_accept : float
        Of the scale's adaptation, in (0, 1).
    """
    cdef readonly CTarget test
    cdef readonly bint adapt
    cdef readonly long long n_adapt
    cdef double target_accept
    cdef object _window_ends
    cdef const long long[::1] window_ends
    # state: position, potential, proposal (q and q_new: the base's; no gradient, and
    # n_gradient_evals stays 0); adaptation counters and accumulators
    cdef object _vectors   # q, q_new, z, window mean, delta
    cdef double* z
    cdef double* mean
    cdef double* delta
    cdef object _matrices  # Sigma, its factor L, window cross-products
    cdef double* covariance
    cdef double* factor
    cdef double* m2
    cdef object _scratch
    cdef double* scratch
    cdef double U
    cdef long long adapted          # adaptive transitions made
    cdef long long scale_count      # since the last covariance install
    cdef long long window_count
    cdef long long window_accepted
    cdef readonly long long windows_done

    def __init__(self, CTarget test, covariance, double step_size, bint adapt=False,
                 long long n_adapt=0, window_ends=(), double target_accept=0.234):
        if not (0.0 < target_accept < 1.0):
            raise ValueError(f"target_accept must be in (0, 1), got {target_accept}")
        if not (step_size > 0.0 and isfinite(step_size)):
            raise ValueError(f"the proposal scale must be positive and finite, got {step_size}")
        self.test = test
        self.dim = test.dim
        self.step_size = step_size
        self.adapt = adapt
        self.n_adapt = n_adapt
        self.target_accept = target_accept
        ends = np.ascontiguousarray(window_ends, dtype=np.int64)
        if ends.ndim != 1 or np.any(np.diff(ends) <= 0) or (ends.size and (
                ends.min() < 0 or ends.max() >= n_adapt)):
            raise ValueError("window_ends must be ascending transitions below n_adapt")
        self._window_ends = np.append(ends, -1)  # a sentinel: never reached
        self.window_ends = self._window_ends
        d = self.dim
        self._vectors = np.zeros((5, d))
        cdef double[:, ::1] vec = self._vectors
        self.q, self.q_new, self.z = &vec[0, 0], &vec[1, 0], &vec[2, 0]
        self.mean, self.delta = &vec[3, 0], &vec[4, 0]
        self._matrices = np.zeros((3, d, d))
        cdef double[:, :, ::1] mat = self._matrices
        self.covariance, self.factor, self.m2 = &mat[0, 0, 0], &mat[1, 0, 0], &mat[2, 0, 0]
        self._scratch = test.new_scratch()
        cdef double[::1] s = self._scratch
        self.scratch = &s[0]
        self.set_covariance(covariance)
        self.has_state = False

    def set_covariance(self, covariance):
        """Make ``covariance`` (dim, dim), symmetric positive definite, the proposal's."""
        covariance = np.array(covariance, dtype=np.float64, order="C")
        if covariance.shape != (self.dim, self.dim) or not np.all(np.isfinite(covariance)) \
                or not np.allclose(covariance, covariance.T):
            raise ValueError(f"the proposal covariance must be a finite symmetric "
                             f"({self.dim}, {self.dim}) matrix")
        factor = np.tril(covariance)
        cdef double[:, ::1] f = factor
        if _potrf(RowMajor, Lower, <int> self.dim, &f[0, 0], <int> self.dim) != 0:
            raise ValueError("the proposal covariance is not positive definite")
        self._matrices[0] = covariance
        self._matrices[1] = factor

    # ------------------------------------------------------------------------------------------
    # state

    def set_position(self, q):
        """Move the chain to ``q``, evaluating the potential there (ValueError if it is not
        finite)."""
        cdef double[::1] qv = np.ascontiguousarray(q, dtype=np.float64)
        if qv.shape[0] != self.dim:
            raise ValueError(f"initial point must have shape ({self.dim},), got {np.shape(q)}")
        cdef double U
        self.test.potential(&qv[0], &U, self.scratch)
        self.n_density_evals += 1
        if not isfinite(U):
            where = np.array2string(np.asarray(qv), precision=4, threshold=10)
            raise NonFiniteStart(f"the log density is not finite ({-U}) at the initial point {where}")
        memcpy(self.q, &qv[0], self.dim * sizeof(double))
        self.U = U
        self.has_state = True

    @property
    def position(self):
        return np.array(<double[:self.dim]> self.q)

    @property
    def log_density(self):
        return -self.U

    @property
    def covariance_matrix(self):
        """The proposal covariance Sigma (a copy)."""
        return self._matrices[0].copy()

    @property
    def n_metric_evals(self):
        return 0

    @property
    def n_metric_derivative_evals(self):
        return 0

    def get_state(self):
        """The chain's state as plain arrays and numbers (see ``set_state``)."""
        if not self.has_state:
            raise RuntimeError("the chain has no state yet")
        return dict(position=self.position, potential_test=self.U, step_size=self.step_size,
                    n_density_evals=self.n_density_evals, n_gradient_evals=0,
                    proposal_covariance=self._matrices[0].copy(),
                    proposal_factor=self._matrices[1].copy(), adapted=self.adapted,
                    scale_count=self.scale_count, window_count=self.window_count,
                    window_accepted=self.window_accepted, windows_done=self.windows_done,
                    window_mean=self._vectors[3].copy(), window_m2=self._matrices[2].copy())

    def set_state(self, state, bint counters=True):
        """Restore a state of ``get_state`` exactly (no evaluation). ``counters=False``
        starts the evaluation counter from zero."""
        d = self.dim
        for name, shape in (("position", (d,)), ("window_mean", (d,)),
                            ("proposal_covariance", (d, d)), ("proposal_factor", (d, d)),
                            ("window_m2", (d, d))):
            if np.shape(state[name]) != shape:
                raise ValueError(f"state[{name!r}] must have shape {shape}, got "
                                 f"{np.shape(state[name])}")
        self._vectors[0] = state["position"]
        self._vectors[3] = state["window_mean"]
        self._matrices[0] = state["proposal_covariance"]
        self._matrices[1] = state["proposal_factor"]
        self._matrices[2] = state["window_m2"]
        self.U = float(state["potential_test"])
        self.step_size = float(state["step_size"])
        self.n_density_evals = int(state["n_density_evals"]) if counters else 0
        self.adapted = int(state["adapted"])
        self.scale_count = int(state["scale_count"])
        self.window_count = int(state["window_count"])
        self.window_accepted = int(state["window_accepted"])
        self.windows_done = int(state["windows_done"])
        self.has_state = True

    # ------------------------------------------------------------------------------------------
    # the transition and the adaptation

    cdef int transition(self, bitgen_t* bitgen, const RunSettings* settings,
                        Transition* record) except -1 nogil:
        """One proposal and its test, then (while adapting) the adaptation; the record's
        energy is the potential, its n_steps 1."""
        cdef Py_ssize_t i, j, d = self.dim
        cdef double U_new, prob, Lz
        cdef bint accepted, diverged
        record.step_size = self.step_size  # the scale this proposal is drawn with
        random_standard_normal_fill(bitgen, d, self.z)
        # q_new = q + s L z, L lower triangular (a loop, not BLAS dtrmv: OpenBLAS threads it
        # from d = 20 on, at ~100 us per call on a busy machine against 0.2 us here)
        for i in range(d):
            Lz = 0.0
            for j in range(i + 1):
                Lz += self.factor[i * d + j] * self.z[j]
            self.q_new[i] = self.q[i] + self.step_size * Lz
        self.test.potential(self.q_new, &U_new, self.scratch)
        self.n_density_evals += 1
        diverged = not isfinite(U_new)
        prob = 0.0 if diverged else (1.0 if U_new <= self.U else exp(self.U - U_new))
        accepted = random_standard_uniform(bitgen) < prob
        self.U_proposal = NAN if diverged else U_new
        if accepted:
            memcpy(self.q, self.q_new, self.dim * sizeof(double))
            self.U = U_new
        if self.adapt and self.adapted < self.n_adapt:
            self.adapt_after(prob, accepted)
        record.log_density = -self.U
        record.energy = self.U
        record.accept_prob = prob
        record.accepted = accepted
        record.diverging = diverged
        record.n_steps = 1
        record.solver_iterations = 0
        record.tree_depth = 0
        record.solver_failed = 0
        return 0

    cdef void adapt_after(self, double prob, bint accepted) noexcept nogil:
        """One adaptive transition's updates (see the module docstring)."""
        cdef Py_ssize_t i, j, d = self.dim
        cdef double weight
        cdef long long t = self.adapted
        self.adapted += 1
        self.scale_count += 1
        self.step_size *= exp(pow(<double> self.scale_count, -SCALE_DECAY)
                              * (prob - self.target_accept))
        if self.window_ends[self.windows_done] < 0:
            return  # after the last window: the scale only
        # Welford: the window's mean and cross-products of its positions
        self.window_count += 1
        self.window_accepted += accepted
        for i in range(d):
            self.delta[i] = self.q[i] - self.mean[i]
            self.mean[i] += self.delta[i] / self.window_count
        weight = (self.window_count - 1.0) / self.window_count
        for i in range(d):
            for j in range(i + 1):
                self.m2[i * d + j] += weight * self.delta[i] * self.delta[j]
        if t == self.window_ends[self.windows_done]:
            self.install()

    cdef void install(self) noexcept nogil:
        """End of a window: its shrunk covariance becomes the proposal's (unless the window
        has no accepted move), the scale restarts; the accumulators restart."""
        cdef Py_ssize_t i, j, d = self.dim
        cdef double shrink = d / (self.window_accepted + 1.0 + d)
        cdef double n1 = self.window_count - 1.0
        cdef bint usable = self.window_accepted > 0 and n1 > 0
        if usable:
            for i in range(d):
                usable = usable and self.m2[i * d + i] > 0.0
        if usable:
            # into the factor's buffer first: a failed factorisation leaves Sigma as it was
            for i in range(d):
                for j in range(i + 1):
                    self.factor[i * d + j] = self.m2[i * d + j] / n1 * (
                        1.0 if i == j else 1.0 - shrink)
            if _potrf(RowMajor, Lower, <int> d, self.factor, <int> d) == 0:
                for i in range(d):
                    for j in range(i + 1):
                        self.covariance[i * d + j] = self.m2[i * d + j] / n1 * (
                            1.0 if i == j else 1.0 - shrink)
                        self.covariance[j * d + i] = self.covariance[i * d + j]
                self.step_size = 2.38 / sqrt(<double> d)
                self.scale_count = 0
            else:  # restore the factor of the covariance kept
                for i in range(d):
                    for j in range(i + 1):
                        self.factor[i * d + j] = self.covariance[i * d + j]
                _potrf(RowMajor, Lower, <int> d, self.factor, <int> d)
        self.windows_done += 1
        self.window_count = 0
        self.window_accepted = 0
        for i in range(d):
            self.mean[i] = 0.0
            for j in range(d):
                self.m2[i * d + j] = 0.0

    # ------------------------------------------------------------------------------------------
    # the run loop's hooks (the loop is BaseChain.run)

    cdef int check_run(self, Py_ssize_t n_iter, const RunSettings* settings, bint gradients,
                       bint trajectory) except -1:
        # n_steps and jitter are ignored: one random-walk step
        if settings.adapt_step_size or settings.accumulate_variance or gradients or trajectory:
            raise ValueError("a random-walk Metropolis chain has no gradients, trajectories or "
                             "HMC adaptation (it adapts by its own settings)")
        return 0
