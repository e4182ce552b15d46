"""The leapfrog (Störmer-Verlet) integrator with the gradient cached between steps, and the
generalized leapfrog of Riemannian-manifold HMC.

Only the last step of a trajectory evaluates the potential, and only if asked (a surrogate
trajectory whose end is judged by the true density never needs its own end value); every other
step uses the target's gradient-only path.
"""
from libc.math cimport isfinite, sqrt, INFINITY, NAN
from libc.string cimport memcpy

import numpy as np

from ._blas cimport _axpy, _dot, RowMajor
from ._lapack cimport _gesv


cdef class Integrator:
    """Interface of an integrator (abstract; see ``Leapfrog``)."""

    def __cinit__(self, *args, **kwargs):
        self.energy_limit = INFINITY  # (not watched until a chain says otherwise)

    cdef int begin(self, bitgen_t* bitgen) except -1 nogil:
        return 0

    cdef int run(self, CTarget target, Metric metric, double* scratch, double* q, double* p,
                 double* grad, double* v, double step_size, Py_ssize_t n_steps,
                 bint want_potential, double* U_end, double* kinetic_end,
                 TrajectoryInfo* info) except -1 nogil:
        with gil:
            raise NotImplementedError(f"{type(self).__name__} does not integrate")


cdef class Leapfrog(Integrator):
    """Explicit, symplectic, time-reversible with the momentum flip: log-Jacobian 0.

    With a record set (by the chain: ``Chain.run(..., trajectory=...)``) every step evaluates
    the potential with the gradient and appends (q, U, grad U) to it, while it has room: a
    surrogate's training data from whole trajectories. The dynamics are unchanged.
    """

    cdef int run(self, CTarget target, Metric metric, double* scratch, double* q, double* p,
                 double* grad, double* v, double step_size, Py_ssize_t n_steps,
                 bint want_potential, double* U_end, double* kinetic_end,
                 TrajectoryInfo* info) except -1 nogil:
        cdef Py_ssize_t step
        cdef int n = <int> metric.dim
        cdef double half = 0.5 * step_size
        cdef double U = NAN
        cdef double H
        cdef double* row
        cdef bint last, recording, finite
        # watching the energy needs the potential at every step (a model's gradient evaluates
        # it anyway; a surrogate's costs one dot product more)
        cdef bint watch = isfinite(self.energy_limit)
        info.converged = True
        info.residual = 0.0
        info.iterations = 0
        info.log_jacobian = 0.0
        info.diverged = False
        info.max_energy = -INFINITY
        for step in range(n_steps):
            _axpy(n, -half, grad, 1, p, 1)
            metric.kinetic_and_velocity(p, v)
            _axpy(n, step_size, v, 1, q, 1)
            if self.bound != NULL and outside(n, q, self.bound + 2 * n, self.bound + 3 * n):
                return diverged(info, step + 1, step, U_end, kinetic_end)
            last = step == n_steps - 1
            recording = self.record != NULL and self.record_count < self.record_capacity
            if recording or watch or (last and want_potential):
                target.potential_and_gradient(q, &U, grad, scratch)
            else:
                target.gradient(q, grad, scratch)
            finite = isfinite(_dot(n, grad, 1, grad, 1))
            if recording and finite and isfinite(U):
                row = self.record + self.record_count * (2 * n + 1)
                memcpy(row, q, n * sizeof(double))
                row[n] = U
                memcpy(row + n + 1, grad, n * sizeof(double))
                self.record_count += 1
            if not finite or ((watch or (last and want_potential)) and not isfinite(U)):
                return diverged(info, step + 1, step + 1, U_end, kinetic_end)
            _axpy(n, -half, grad, 1, p, 1)
            if watch:
                H = U + metric.kinetic_and_velocity(p, v)
                if H > info.max_energy:
                    info.max_energy = H
                if not H <= self.energy_limit:
                    return diverged(info, step + 1, step + 1, U_end, kinetic_end)
            if self.bound != NULL:  # a point the chain has seen (and found healthy)
                widen_bound(self.bound, n, q)
        info.n_steps = n_steps
        info.n_gradients = n_steps
        U_end[0] = U
        kinetic_end[0] = metric.kinetic_and_velocity(p, v)
        return 0


cdef inline int diverged(TrajectoryInfo* info, Py_ssize_t n_steps, Py_ssize_t n_gradients,
                         double* U_end, double* kinetic_end) noexcept nogil:
    """End a leapfrog trajectory as a divergence after ``n_steps`` steps."""
    info.n_steps = n_steps
    info.n_gradients = n_gradients
    info.diverged = True
    U_end[0] = INFINITY
    kinetic_end[0] = INFINITY
    return 0


# (a trajectory in free fall, under a constant force, moves three times as far in its second
# step as in its first, and less than that relative to its extent after: a margin of 4 never
# stops it; a step that jumps four times past everything seen is stopped)
PROBE_MARGIN = 4.0


cdef void widen_bound(double* bound, Py_ssize_t n, const double* q) noexcept nogil:
    """Add ``q`` to the points a probe bound has seen, and widen its box to match."""
    cdef Py_ssize_t i
    cdef double margin
    cdef double* seen_lo = bound
    cdef double* seen_hi = bound + n
    for i in range(n):
        if q[i] < seen_lo[i]:
            seen_lo[i] = q[i]
        if q[i] > seen_hi[i]:
            seen_hi[i] = q[i]
        margin = PROBE_MARGIN * max(1.0, seen_hi[i] - seen_lo[i])
        bound[2 * n + i] = seen_lo[i] - margin
        bound[3 * n + i] = seen_hi[i] + margin


cdef inline bint outside(int n, const double* q, const double* lo,
                         const double* hi) noexcept nogil:
    """Whether ``q`` is outside the box [lo, hi] (or not a number)."""
    cdef int i
    for i in range(n):
        if not (lo[i] <= q[i] <= hi[i]):
            return True
    return False


cdef inline double distance(Py_ssize_t n, const double* a, const double* b) noexcept nogil:
    cdef Py_ssize_t i
    cdef double total = 0.0
    for i in range(n):
        total = total + (a[i] - b[i]) * (a[i] - b[i])
    return sqrt(total)


cdef class GeneralizedLeapfrog(Integrator):
    """The generalized (Störmer-Verlet) leapfrog of RMHMC for H = U + 1/2 log det G + K.

    One step of size eps from (q, p), with the metric factorised at q
    (docs/algorithms.md section 5):

    1. p' = p - eps/2 [grad U(q) + grad 1/2 log det G(q) - nu(q, p')/2], implicit in p';
    2. q' = q + eps/2 [G(q)^{-1} + G(q')^{-1}] p', implicit in q';
    3. p'' = p' - eps/2 [grad U(q') + grad 1/2 log det G(q') - nu(q', p')/2], explicit.

    Both implicit equations are solved by fixed-point iteration from p and from the explicit
    guess q + eps G(q)^{-1} p', until the change of an iterate is at most
    ``tol * (1 + |iterate|)`` (Euclidean norms), at most ``max_iterations`` times; an
    unconverged solve ends the trajectory with ``converged = False`` (the chain rejects it and
    counts it: the map would not be reversible). With ``newton`` the iterations are Newton's
    on the same equations (same stopping rule on the same residual, so the same map to the
    tolerance): quadratic convergence near the solution for a costlier iteration, and no line
    search (far from the solution, at large steps, it can fail where fixed-point iteration
    does not; either failure is a counted rejection). The
    Jacobians need d/dq_k [G^{-1} p] = -G^{-1} (dG/dq_k) v, got exactly from the metric's nu
    by polarisation (nu is a quadratic form in v): 2d nu evaluations and d solves with the
    factor per Newton iteration, plus the metric's derivative terms at each position iterate. With ``tol`` None (stored as -1) every solve
    runs exactly ``max_iterations`` iterations unchecked, as the papers' code did: then the
    map is reversible and volume preserving only up to the iterations' error.

    The step is symmetric and symplectic, so with the momentum flip it is a volume-preserving
    involution (log-Jacobian 0) and the Metropolis test on H is exact.

    Parameters
    ----------
    dim : int
    tol : float or None
        Default 1e-9.
    max_iterations : int
        Default 50.
    newton : bool
        Newton iterations instead of fixed-point ones (default False).
    """

    def __init__(self, Py_ssize_t dim, tol=1e-9, Py_ssize_t max_iterations=50, bint newton=False):
        if dim < 1 or max_iterations < 1:
            raise ValueError("need dim >= 1 and max_iterations >= 1")
        if tol is not None and not (tol > 0 and np.isfinite(tol)):
            raise ValueError(f"tol must be a positive number or None, got {tol!r}")
        self.riemannian = True
        self.dim = dim
        self.tol = -1.0 if tol is None else float(tol)
        self.max_iterations = max_iterations
        self._arrays = np.zeros((5, dim))
        cdef double[:, ::1] a = self._arrays
        self.p0, self.q0, self.v0, self.nu, self.x = &a[0, 0], &a[1, 0], &a[2, 0], &a[3, 0], &a[4, 0]
        self.newton = newton
        cdef double[:, :, ::1] squares
        cdef double[:, ::1] vectors
        cdef int[::1] pivots
        if newton:
            self._newton_arrays = (np.zeros((2, dim, dim)), np.zeros((2, dim)),
                                   np.zeros(dim, dtype=np.intc))
            squares, vectors, pivots = self._newton_arrays
            self.jac, self.dv = &squares[0, 0, 0], &squares[1, 0, 0]
            self.probe, self.nu_minus, self.pivots = &vectors[0, 0], &vectors[1, 0], &pivots[0]

    cdef int velocity_derivatives(self, RiemannianMetric g, const double* v) except -1 nogil:
        """Row k of dv = G^{-1} (dG/dq_k) v at the metric's point (derivatives current).

        nu_k(w) = w^T dG_k w is a quadratic form, so nu_k(v + s e_j) - nu_k(v - s e_j) =
        4 s (dG_k v)_j exactly (polarisation); s ~ |v| keeps the two terms' rounding relative.
        """
        cdef Py_ssize_t j, k, d = self.dim
        cdef double s = max(1.0, sqrt(_dot(<int> d, v, 1, v, 1)))
        memcpy(self.probe, v, d * sizeof(double))
        for j in range(d):
            self.probe[j] = v[j] + s
            g.nu(self.probe, self.nu)
            self.probe[j] = v[j] - s
            g.nu(self.probe, self.nu_minus)
            self.probe[j] = v[j]
            for k in range(d):
                self.jac[k * d + j] = (self.nu[k] - self.nu_minus[k]) / (4.0 * s)
        for k in range(d):  # dG_k v is row k of jac; G^{-1} of it is row k of dv
            g.velocity(&self.jac[k * d], &self.dv[k * d])
        return 0

    cdef int newton_step(self, RiemannianMetric g, double* x, const double* v, double sign,
                         double half) except -1 nogil:
        """One Newton step on F(x) = x - map(x), where self.x holds map(x) and v = G^{-1} p:
        the momentum equation (sign -1: dF/dp = I - half dv) or the position one (sign +1,
        the metric's derivatives current at x: dF/dq = I + half dv^T). Returns 1 (x unchanged)
        if the Jacobian is singular."""
        cdef Py_ssize_t j, k, d = self.dim
        self.velocity_derivatives(g, v)
        for k in range(d):
            for j in range(d):
                self.jac[k * d + j] = sign * half * (self.dv[k * d + j] if sign < 0.0
                                                     else self.dv[j * d + k])
            self.jac[k * d + k] += 1.0
            self.probe[k] = x[k] - self.x[k]  # F
        if _gesv(RowMajor, <int> d, self.jac, <int> d, self.pivots, self.probe) != 0:
            return 1
        for k in range(d):
            x[k] -= self.probe[k]
        return 0

    cdef int advance(self, RiemannianMetric g, double* current, const double* v, double sign,
                     double half, TrajectoryInfo* info, double* relative) except -1 nogil:
        """One iteration of an implicit solve, with self.x holding the map's image of
        ``current`` (the momentum equation: sign -1; the position one: +1): count it and
        return 1 (converged: current = x), 2 (stop: diverged, or a singular Newton system;
        ``info`` says which) or 0 (current moved on by a fixed-point or Newton step).
        ``relative`` gets the change relative to 1 + |x| (the solve's residual)."""
        cdef Py_ssize_t d = self.dim
        cdef double change = distance(d, self.x, current)
        cdef double size = sqrt(_dot(<int> d, self.x, 1, self.x, 1))
        info.iterations += 1
        if not isfinite(change + size):
            info.diverged = True
            return 2
        relative[0] = change / (1.0 + size)
        if self.tol >= 0.0 and change <= self.tol * (1.0 + size):
            memcpy(current, self.x, d * sizeof(double))
            return 1
        if not self.newton:
            memcpy(current, self.x, d * sizeof(double))
            return 0
        if sign > 0.0:  # the position equation's Jacobian needs the derivatives at current
            g.update_derivatives()
        if self.newton_step(g, current, v, sign, half) != 0:
            info.converged = False
            return 2
        return 0

    cdef void metric_failed(self, int status, TrajectoryInfo* info) noexcept nogil:
        # an undefined metric (status 1) is a divergence; an indefinite one (2) fails the step
        # like an unconverged solve: a counted rejection, reported by the samplers
        if status == 2:
            info.converged = False
        else:
            info.diverged = True

    cdef int momentum_update(self, RiemannianMetric g, const double* start, double* p,
                             const double* grad, double* v, double half) except -1 nogil:
        """x = start - half (grad + grad 1/2 log det G - nu(p)/2) at the metric's point."""
        cdef Py_ssize_t i
        g.velocity(p, v)
        g.nu(v, self.nu)
        for i in range(self.dim):
            self.x[i] = start[i] - half * (grad[i] + g.grad_hld[i] - 0.5 * self.nu[i])
        return 0

    cdef int solve(self, RiemannianMetric g, ImplicitEquation equation, double* current,
                   const double* p, const double* grad, double* v, double half,
                   double* scratch, TrajectoryInfo* info) except -1 nogil:
        """Solve one implicit equation of the step for ``current``, which holds the first
        iterate: p' of step 1 (MOMENTUM: from the start self.p0, with ``grad`` at q), or q'
        of step 2 (POSITION: from self.q0 and self.v0 = G(q)^{-1} p', with p = p'), by at
        most max_iterations iterations of ``advance`` (docs/algorithms.md section 5).

        Returns 0 when solved (with tol None: when the iterations are done), or 1 when the
        trajectory ends here: a divergence, a metric undefined or not positive definite at an
        iterate, a singular Newton system or an unconverged solve (``info`` says which). The
        two equations share it so that they stop, count and report alike."""
        cdef Py_ssize_t k, i
        cdef int status, outcome
        cdef double relative = 0.0
        cdef bint converged = False
        for k in range(self.max_iterations):
            # self.x = the equation's map at current
            if equation == MOMENTUM:
                self.momentum_update(g, self.p0, current, grad, v, half)
            else:
                status = g.update(current, scratch)
                if status != 0:
                    self.metric_failed(status, info)
                    return 1
                g.velocity(p, v)
                for i in range(self.dim):
                    self.x[i] = self.q0[i] + half * (self.v0[i] + v[i])
            outcome = self.advance(g, current, v, -1.0 if equation == MOMENTUM else 1.0, half,
                                   info, &relative)
            if outcome == 2:
                return 1
            if outcome == 1:
                converged = True
                break
        info.residual = max(info.residual, relative)
        if self.tol >= 0.0 and not converged:
            info.converged = False
            return 1
        return 0

    cdef int run(self, CTarget target, Metric metric, double* scratch, double* q, double* p,
                 double* grad, double* v, double step_size, Py_ssize_t n_steps,
                 bint want_potential, double* U_end, double* kinetic_end,
                 TrajectoryInfo* info) except -1 nogil:
        # the chain only pairs this integrator with a RiemannianMetric
        return self.run_riemannian(target, <RiemannianMetric> metric, scratch, q, p, grad, v,
                                   step_size, n_steps, want_potential, U_end, kinetic_end, info)

    cdef int run_riemannian(self, CTarget target, RiemannianMetric g, double* scratch, double* q,
                            double* p, double* grad, double* v, double step_size,
                            Py_ssize_t n_steps, bint want_potential, double* U_end,
                            double* kinetic_end, TrajectoryInfo* info) except -1 nogil:
        cdef Py_ssize_t step, i, d = self.dim
        cdef int status
        cdef double half = 0.5 * step_size, U = NAN
        cdef bint last
        cdef size_t bytes = d * sizeof(double)
        info.converged = True
        info.residual = 0.0
        info.iterations = 0
        info.log_jacobian = 0.0
        info.diverged = False
        info.n_gradients = 0
        U_end[0] = INFINITY
        kinetic_end[0] = INFINITY
        g.update_derivatives()  # the chain has factorised G at q
        for step in range(n_steps):
            info.n_steps = step + 1
            # 1. implicit momentum half-step
            memcpy(self.p0, p, bytes)
            if self.solve(g, MOMENTUM, p, p, grad, v, half, scratch, info) != 0:
                return 0
            # 2. implicit position step
            g.velocity(p, self.v0)
            memcpy(self.q0, q, bytes)
            for i in range(d):
                q[i] = self.q0[i] + step_size * self.v0[i]
            if self.solve(g, POSITION, q, p, grad, v, half, scratch, info) != 0:
                return 0
            status = g.update(q, scratch)
            if status != 0:
                self.metric_failed(status, info)
                return 0
            # 3. explicit momentum half-step at q'
            last = step == n_steps - 1
            if last and want_potential:
                target.potential_and_gradient(q, &U, grad, scratch)
            else:
                target.gradient(q, grad, scratch)
            info.n_gradients += 1
            if not isfinite(_dot(<int> d, grad, 1, grad, 1)) or (last and want_potential and not isfinite(U)):
                info.diverged = True
                return 0
            g.update_derivatives()
            memcpy(self.p0, p, bytes)
            self.momentum_update(g, self.p0, p, grad, v, half)
            memcpy(p, self.x, bytes)
            if not isfinite(_dot(<int> d, p, 1, p, 1)):
                info.diverged = True
                return 0
        U_end[0] = U
        kinetic_end[0] = g.kinetic(p, v)
        return 0
