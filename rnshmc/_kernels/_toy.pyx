"""Closed-form C-level targets for tests and overhead benchmarks."""
import numpy as np

from ._blas cimport RowMajor, Lower, _dot, _symv
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
        _symv(RowMajor, Lower, n, 1.0, &self.precision[0, 0], n, centred, 1, 0.0, grad, 1)
        U[0] = 0.5 * _dot(n, centred, 1, grad, 1)
        return 0
