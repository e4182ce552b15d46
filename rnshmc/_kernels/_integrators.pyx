"""The leapfrog (Störmer-Verlet) integrator with the gradient cached between steps.

Only the last step of a trajectory evaluates the potential, and only if asked (a surrogate
trajectory whose end is judged by the true density never needs its own end value); every other
step uses the target's gradient-only path.
"""
from libc.math cimport isfinite, INFINITY, NAN

from ._blas cimport _axpy, _dot


cdef class Integrator:
    """Interface of an integrator (abstract; see ``Leapfrog``)."""

    cdef int run(self, CTarget target, Metric metric, double* scratch, double* q, double* p,
                 double* grad, double* v, double step_size, Py_ssize_t n_steps,
                 bint want_potential, double* U_end, double* kinetic_end,
                 TrajectoryInfo* info) except -1 nogil:
        with gil:
            raise NotImplementedError(f"{type(self).__name__} does not integrate")


cdef class Leapfrog(Integrator):
    """Explicit, symplectic, time-reversible with the momentum flip: log-Jacobian 0."""

    cdef int run(self, CTarget target, Metric metric, double* scratch, double* q, double* p,
                 double* grad, double* v, double step_size, Py_ssize_t n_steps,
                 bint want_potential, double* U_end, double* kinetic_end,
                 TrajectoryInfo* info) except -1 nogil:
        cdef Py_ssize_t step
        cdef int n = <int> metric.dim
        cdef double half = 0.5 * step_size
        cdef double U = NAN
        cdef bint last
        info.converged = True
        info.residual = 0.0
        info.iterations = 0
        info.log_jacobian = 0.0
        info.diverged = False
        for step in range(n_steps):
            _axpy(n, -half, grad, 1, p, 1)
            metric.kinetic_and_velocity(p, v)
            _axpy(n, step_size, v, 1, q, 1)
            last = step == n_steps - 1
            if last and want_potential:
                target.potential_and_gradient(q, &U, grad, scratch)
            else:
                target.gradient(q, grad, scratch)
            if not isfinite(_dot(n, grad, 1, grad, 1)) or (last and want_potential and not isfinite(U)):
                info.n_steps = step + 1
                info.n_gradients = step + 1
                info.diverged = True
                U_end[0] = INFINITY
                kinetic_end[0] = INFINITY
                return 0
            _axpy(n, -half, grad, 1, p, 1)
        info.n_steps = n_steps
        info.n_gradients = n_steps
        U_end[0] = U
        kinetic_end[0] = metric.kinetic_and_velocity(p, v)
        return 0
