# Metrics: the kinetic energy K(q, p) = p^T G^{-1} p / 2 (+ log det G(q) / 2 when G depends on q)
# and the momentum distribution N(0, G). One object per chain (it holds that chain's mass
# matrix, which warm-up adapts); targets stay shared.
from ._random cimport bitgen_t

cdef enum MetricKind:
    METRIC_IDENTITY = 0
    METRIC_DIAGONAL = 1
    METRIC_DENSE = 2

cdef class Metric:
    cdef readonly Py_ssize_t dim
    # True for Riemannian metrics: then update() factorises G(q) before the other methods are
    # used at q, half_log_det() enters the energy, and the generalized leapfrog needs the
    # derivative terms; a Euclidean metric is constant and these are no-ops / zero.
    cdef readonly bint position_dependent
    cdef int update(self, const double* q, double* scratch) except -1 nogil
    cdef double half_log_det(self) noexcept nogil
    cdef void draw_momentum(self, bitgen_t* bitgen, double* p) noexcept nogil
    # v = G^{-1} p; returns p^T G^{-1} p / 2
    cdef double kinetic_and_velocity(self, const double* p, double* v) noexcept nogil
    # the kinetic term of H at the metric's point: half_log_det() + p^T G^{-1} p / 2 (v as above)
    cdef double kinetic(self, const double* p, double* v) noexcept nogil

cdef class EuclideanMetric(Metric):
    cdef readonly int kind
    cdef object _arrays
    cdef double* inv_mass
    cdef double* mass_sqrt
