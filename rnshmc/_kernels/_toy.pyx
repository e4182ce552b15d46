"""Closed-form C-level targets for tests and overhead benchmarks."""
from libc.math cimport cos, exp, log, sin, INFINITY, M_PI

import numpy as np

from ._blas cimport _dot, matrix_times
from ._targets cimport CTarget


cdef class GaussianTarget(CTarget):
    """U(q) = (q - mean)^T P (q - mean) / 2 with a dense precision matrix P."""
    cdef const double[::1] mean
    cdef const double[:, ::1] precision

    def __init__(self, const double[::1] mean, const double[:, ::1] precision):
        # scratch: q - mean, and P (q - mean) when no gradient is wanted
        super().__init__(mean.shape[0], 2 * mean.shape[0])
        self.mean = mean
        self.precision = precision

    def __reduce__(self):
        return (GaussianTarget, (np.asarray(self.mean), np.asarray(self.precision)))

    cdef int potential(self, const double* q, double* U, double* scratch) except -1 nogil:
        return self.potential_and_gradient(q, U, scratch + self.dim, scratch)

    cdef int potential_and_gradient(self, const double* q, double* U, double* grad,
                                    double* scratch) except -1 nogil:
        cdef Py_ssize_t i
        cdef int n = <int> self.dim
        cdef double* centred = scratch
        for i in range(self.dim):
            centred[i] = q[i] - self.mean[i]
        matrix_times(&self.precision[0, 0], n, centred, grad)
        U[0] = 0.5 * _dot(n, centred, 1, grad, 1)
        return 0

    cdef int hessian_vector(self, const double* q, const double* u, double* out,
                            double* scratch) except -1 nogil:
        cdef int n = <int> self.dim
        matrix_times(&self.precision[0, 0], n, u, out)
        return 0


cdef class MixtureTarget(CTarget):
    """U(q) = -log sum_k w_k N(q; mu_k, s^2 I), by log-sum-exp (stable far from every mode)."""
    cdef const double[:, ::1] means
    cdef const double[::1] log_weights
    cdef double variance

    def __init__(self, const double[:, ::1] means, double variance, const double[::1] log_weights):
        # scratch: the K log-terms, then a gradient for the Hessian-vector product
        super().__init__(means.shape[1], means.shape[0] + means.shape[1])
        self.means = means
        self.variance = variance
        self.log_weights = log_weights

    def __reduce__(self):
        return (MixtureTarget, (np.asarray(self.means), self.variance,
                                np.asarray(self.log_weights)))

    cdef int potential_and_gradient(self, const double* q, double* U, double* grad,
                                    double* scratch) except -1 nogil:
        cdef Py_ssize_t i, k
        cdef Py_ssize_t K = self.means.shape[0]
        cdef double d, top = -INFINITY, total = 0.0, r
        for k in range(K):  # log w_k - |q - mu_k|^2 / (2 s^2)
            scratch[k] = 0.0
            for i in range(self.dim):
                d = q[i] - self.means[k, i]
                scratch[k] += d * d
            scratch[k] = self.log_weights[k] - 0.5 * scratch[k] / self.variance
            if scratch[k] > top:
                top = scratch[k]
        for k in range(K):
            scratch[k] = exp(scratch[k] - top)
            total += scratch[k]
        U[0] = -(top + log(total)) + 0.5 * self.dim * log(2.0 * M_PI * self.variance)
        for i in range(self.dim):  # sum_k r_k (q - mu_k) / s^2, r_k the responsibilities
            grad[i] = 0.0
        for k in range(K):
            r = scratch[k] / total
            for i in range(self.dim):
                grad[i] += r * (q[i] - self.means[k, i]) / self.variance
        return 0

    cdef int hessian_vector(self, const double* q, const double* u, double* out,
                            double* scratch) except -1 nogil:
        # H = I / s^2 - Cov_r[(q - mu_k) / s^2] (the responsibilities' covariance), so
        # H u = u / s^2 - sum_k r_k a_k (a_k . u) + g (g . u), a_k = (q - mu_k) / s^2, g = sum r_k a_k
        cdef Py_ssize_t i, k
        cdef Py_ssize_t K = self.means.shape[0]
        cdef double U, r, au, gu = 0.0
        cdef double* grad = scratch + K
        self.potential_and_gradient(q, &U, grad, scratch)  # leaves exp(l_k - top) in scratch
        cdef double total = 0.0
        for k in range(K):
            total += scratch[k]
        for i in range(self.dim):
            out[i] = u[i] / self.variance
            gu += grad[i] * u[i]
        for k in range(K):
            r = scratch[k] / total
            au = 0.0
            for i in range(self.dim):
                au += (q[i] - self.means[k, i]) * u[i]
            au /= self.variance
            for i in range(self.dim):
                out[i] -= r * au * (q[i] - self.means[k, i]) / self.variance
        for i in range(self.dim):
            out[i] += grad[i] * gu
        return 0


cdef class RoughWellTarget(CTarget):
    """U(q) = |q|^2 / 2 + eta sum_i cos(q_i / period)."""
    cdef double eta, period

    def __init__(self, Py_ssize_t dim, double eta, double period):
        super().__init__(dim, 0)
        self.eta, self.period = eta, period

    def __reduce__(self):
        return (RoughWellTarget, (self.dim, self.eta, self.period))

    cdef int potential_and_gradient(self, const double* q, double* U, double* grad,
                                    double* scratch) except -1 nogil:
        cdef Py_ssize_t i
        cdef double amplitude = self.eta / self.period
        U[0] = 0.0
        for i in range(self.dim):
            U[0] += 0.5 * q[i] * q[i] + self.eta * cos(q[i] / self.period)
            grad[i] = q[i] - amplitude * sin(q[i] / self.period)
        return 0

    cdef int hessian_vector(self, const double* q, const double* u, double* out,
                            double* scratch) except -1 nogil:
        cdef Py_ssize_t i
        cdef double curvature = self.eta / (self.period * self.period)
        for i in range(self.dim):
            out[i] = (1.0 - curvature * cos(q[i] / self.period)) * u[i]
        return 0
