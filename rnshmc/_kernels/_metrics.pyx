"""Euclidean metrics (identity, diagonal, dense mass matrix) behind the metric interface that
Riemannian metrics implement too (see ``_metrics.pxd``)."""
from libc.string cimport memcpy

import numpy as np

from ._blas cimport _dot, lower_times, matrix_times
from ._random cimport random_standard_normal_fill




cdef class Metric:
    """Interface of a metric (abstract; see ``EuclideanMetric``)."""

    cdef int update(self, const double* q, double* scratch) except -1 nogil:
        return 0

    cdef double half_log_det(self) noexcept nogil:
        return 0.0

    cdef void draw_momentum(self, bitgen_t* bitgen, double* p) noexcept nogil:
        pass

    cdef double kinetic_and_velocity(self, const double* p, double* v) noexcept nogil:
        return 0.0

    cdef double kinetic(self, const double* p, double* v) noexcept nogil:
        return self.half_log_det() + self.kinetic_and_velocity(p, v)


cdef class EuclideanMetric(Metric):
    """A constant mass matrix M: momenta p ~ N(0, M), kinetic energy p^T M^{-1} p / 2.

    Parameters
    ----------
    dim : int
    inverse_mass : None, ndarray of shape (dim,) or (dim, dim)
        None is the identity, a vector a diagonal, a matrix a dense inverse mass matrix.
        Momenta are drawn as p = M^{1/2} z, with M^{1/2} = 1/sqrt(diag) for a diagonal and the
        lower Cholesky factor of M = inverse_mass^{-1} for a dense matrix.
    """

    def __init__(self, Py_ssize_t dim, inverse_mass=None):
        self.dim = dim
        self.position_dependent = False
        self.set_inverse_mass(inverse_mass)

    @property
    def inverse_mass(self):
        """The inverse mass matrix: None (identity), (dim,) or (dim, dim) (a copy)."""
        return None if self._arrays is None else self._arrays[0].copy()

    def set_inverse_mass(self, inverse_mass):
        cdef double[::1] flat_inv, flat_sqrt
        if inverse_mass is None:
            self.kind = METRIC_IDENTITY
            self._arrays = None
            self.inv_mass = NULL
            self.mass_sqrt = NULL
            return
        inverse_mass = np.array(inverse_mass, dtype=np.float64, order="C")  # own copy
        if inverse_mass.shape == (self.dim,):
            if not (np.all(np.isfinite(inverse_mass)) and np.all(inverse_mass > 0)):
                raise ValueError("a diagonal inverse mass matrix must be finite and positive")
            mass_sqrt = 1.0 / np.sqrt(inverse_mass)
            kind = METRIC_DIAGONAL
        elif inverse_mass.shape == (self.dim, self.dim):
            if not np.all(np.isfinite(inverse_mass)) or not np.allclose(inverse_mass, inverse_mass.T):
                raise ValueError("a dense inverse mass matrix must be finite and symmetric")
            try:
                mass_sqrt = np.linalg.cholesky(np.linalg.inv(inverse_mass))
            except np.linalg.LinAlgError:
                raise ValueError("the inverse mass matrix is not positive definite") from None
            mass_sqrt = np.ascontiguousarray(mass_sqrt)
            kind = METRIC_DENSE
        else:
            raise ValueError(
                f"inverse mass matrix must have shape ({self.dim},) or ({self.dim}, {self.dim}), "
                f"got {inverse_mass.shape}")
        self.kind = kind
        self._arrays = (inverse_mass, mass_sqrt)
        flat_inv = inverse_mass.reshape(-1)
        flat_sqrt = mass_sqrt.reshape(-1)
        self.inv_mass = &flat_inv[0]
        self.mass_sqrt = &flat_sqrt[0]

    cdef void draw_momentum(self, bitgen_t* bitgen, double* p) noexcept nogil:
        cdef Py_ssize_t i
        random_standard_normal_fill(bitgen, self.dim, p)
        if self.kind == METRIC_DIAGONAL:
            for i in range(self.dim):
                p[i] *= self.mass_sqrt[i]
        elif self.kind == METRIC_DENSE:
            lower_times(self.mass_sqrt, self.dim, p)

    cdef double kinetic_and_velocity(self, const double* p, double* v) noexcept nogil:
        cdef Py_ssize_t i
        cdef int n = <int> self.dim
        if self.kind == METRIC_IDENTITY:
            memcpy(v, p, self.dim * sizeof(double))
        elif self.kind == METRIC_DIAGONAL:
            for i in range(self.dim):
                v[i] = self.inv_mass[i] * p[i]
        else:
            matrix_times(self.inv_mass, self.dim, p, v)
        return 0.5 * _dot(n, p, 1, v, 1)

    def kinetic_energy(self, p):
        """p^T M^{-1} p / 2 (for tests)."""
        cdef double[::1] pv = np.ascontiguousarray(p, dtype=np.float64)
        if pv.shape[0] != self.dim:
            raise ValueError(f"p must have shape ({self.dim},)")
        cdef double[::1] v = np.empty(self.dim)
        return self.kinetic_and_velocity(&pv[0], &v[0])
