# Riemannian metrics G(q) for RMHMC's generalized leapfrog (see _riemann.pyx). One object per
# chain: it holds G at its current point, factorised once and reused for velocities, the
# momentum draw and the log-determinant, plus the derivative terms the integrator needs there.
from ._metrics cimport Metric

cdef class RiemannianMetric(Metric):
    cdef readonly bint diagonal        # G is diagonal (stored as a vector)
    cdef readonly double softabs       # SoftAbs sharpness alpha (0: G used as it is)
    cdef readonly str description      # named in errors ("the Fisher metric", ...)
    cdef object _arrays
    cdef double* q_at                  # the point of the last update
    cdef double* G                     # the metric as computed (before SoftAbs): d*d or d
    cdef double* factor                # Cholesky L (row-major lower) or eigenvectors (rows)
    cdef double* lam                   # eigenvalues (SoftAbs) or the diagonal
    cdef double* fval                  # f(lam): the metric's eigenvalues / diagonal
    cdef double* fprime                # f'(lam) (1 without SoftAbs)
    cdef double* jmat                  # SoftAbs divided differences of f (d*d)
    cdef double* grad_hld              # grad of half_log_det at q_at (update_derivatives)
    cdef double* tmp
    cdef double* tmp2
    cdef double* lapack_work
    cdef int lwork
    cdef double hld
    # G is factorised at q_at / its derivative terms are current there (so the chain's state,
    # already factorised at the end of an accepted trajectory, is not factorised again)
    cdef bint factor_current
    cdef bint derivatives_current
    cdef readonly long long n_updates
    cdef readonly long long n_derivative_updates

    # where G was last not positive definite (without SoftAbs), and how often
    cdef object _indefinite
    cdef double* indefinite_at
    cdef int indefinite_minor
    cdef readonly long long n_indefinite

    # G at q, factorised; 0 on success, 1 where G is not defined (a divergence: e.g. the PDE
    # solve failed), 2 where it is not positive definite (without SoftAbs; recorded: see
    # indefinite_message). At a chain's state either is an error; inside a trajectory a
    # failed step (the proposal is rejected and counted).
    cdef int update(self, const double* q, double* scratch) except -1 nogil
    # grad (1/2 log det G) at the last update's point into grad_hld (and what nu needs there)
    cdef int update_derivatives(self) except -1 nogil
    # nu_i = v^T dG/dq_i v for v = G^{-1} p at the last update's point
    cdef int nu(self, const double* v, double* out) except -1 nogil
    cdef void velocity(self, const double* p, double* v) noexcept nogil
    # subclasses: the raw metric (d*d, both triangles; or d for a diagonal one) at q
    cdef int compute(self, const double* q, double* G) except -1 nogil
    cdef int factorize(self) except -1 nogil
    cdef int not_positive(self, int minor) noexcept nogil


cdef class TensorMetric(RiemannianMetric):
    # a dense metric whose partial derivatives come as d matrices; subclasses (a user's
    # callables here, the PDE model's Gauss-Newton metric in _fem) fill them in
    cdef double* dG          # d * d * d: dG[i] = dG/dq_i (of the raw metric)
    cdef double* M           # SoftAbs: Q^T dG[i] Q; else unused
    cdef double* Ginv
    cdef double* Gtmp
    cdef object _tensors
    # G (d*d, both triangles) at q and, if dG != NULL, its partial derivatives into dG; 0, or
    # 1 where G is not defined there
    cdef int compute_derivatives(self, const double* q, double* G, double* dG) except -1 nogil
