"""Bayesian logistic regression as a C-level target.

U(b) = sum_i [softplus(x_i^T b) - y_i x_i^T b] + |b|^2 / (2 alpha), y_i in {0, 1}.

One pass over the rows of X per evaluation (the fused row kernel of ``_logistic_block.h``: linear
predictors, softplus terms and residuals, gradient contribution, group by group while the rows
are in L1). X is split into row blocks shared among OpenMP threads (static schedule); per-block
partial sums are reduced serially in block order, so the result is bit-identical whatever the
number of threads.
"""
from cython.parallel cimport prange
from libc.math cimport exp, log1p, fabs, fmax, sqrt

import numpy as np

from ._blas cimport RowMajor, Lower, NoTrans, Trans, _gemv, _syrk
from ._openmp cimport omp_get_max_threads, RNSHMC_OPENMP_ENABLED
from ._targets cimport CTarget

# Rows per block ~ 8192 / d: enough blocks to balance the threads, few enough that the serial
# reduction of the per-block gradients (n_blocks * d additions) stays negligible.
# A thread gets at least MIN_THREAD_ELEMENTS entries of X (~30 us of work): below that the
# fork/join costs more than it saves, and on a busy machine a descheduled thread stalls the
# barrier of every evaluation.
cdef enum:
    BLOCK_ELEMENTS = 8192
    PREFETCH_BYTES = 4 * 1024 * 1024
    MIN_THREAD_ELEMENTS = 65536

openmp_enabled = bool(RNSHMC_OPENMP_ENABLED)


cdef inline double softplus_and_sigmoid(double eta, double* sigmoid) noexcept nogil:
    """log(1 + e^eta) and 1/(1 + e^-eta), overflow-safe, sharing one exp."""
    cdef double t = exp(-fabs(eta))
    sigmoid[0] = (1.0 if eta >= 0.0 else t) / (1.0 + t)
    return fmax(eta, 0.0) + log1p(t)


cdef extern from "_logistic_block.h":
    double logistic_rows "rnshmc_logistic_rows" (
        const double* X, const double* y, const double* beta, Py_ssize_t n, Py_ssize_t d,
        double* eta, double* grad, int prefetch) noexcept nogil
    double logistic_terms "rnshmc_logistic_terms" (
        double* eta, const double* y, Py_ssize_t n, int want_residual) noexcept nogil
    double exp_nonpositive "rnshmc_exp_nonpositive" (double x) noexcept nogil


def _exp_nonpositive_memview(const double[::1] x):
    """Test twin of the vectorisable exp used for exp(-|eta|) (x <= 0)."""
    out = np.empty(x.shape[0])
    cdef double[::1] o = out
    cdef Py_ssize_t i
    for i in range(x.shape[0]):
        o[i] = exp_nonpositive(x[i])
    return out


def _logistic_block_memview(double[::1] eta, const double[::1] y, bint want_residual):
    """Test twin of the per-block row work (overwrites eta with residuals if asked)."""
    return logistic_terms(&eta[0], &y[0], eta.shape[0], want_residual)


cdef class LogisticTarget(CTarget):
    """C kernel of ``rnshmc.models.LogisticRegression`` (inputs validated there)."""
    cdef const double[:, ::1] X
    cdef const double[::1] y
    cdef double inv_prior_variance
    cdef public int n_threads
    cdef Py_ssize_t n_rows, block_rows, n_blocks
    cdef bint prefetch

    def __init__(self, const double[:, ::1] X, const double[::1] y, double prior_variance,
                 int n_threads=0, Py_ssize_t block_rows=0):
        self.X = X
        self.y = y
        self.n_rows = X.shape[0]
        dim = X.shape[1]
        self.inv_prior_variance = 1.0 / prior_variance
        self.n_threads = n_threads
        self.block_rows = block_rows if block_rows > 0 else max(16, BLOCK_ELEMENTS // dim)
        self.n_blocks = (self.n_rows + self.block_rows - 1) // self.block_rows
        # X larger than a typical last-level cache share: prefetch rows ahead of use
        self.prefetch = self.n_rows * dim * sizeof(double) > PREFETCH_BYTES
        # scratch: eta (one per row), then per block its potential and its gradient
        super().__init__(dim, self.n_rows + self.n_blocks * (1 + dim))

    def __reduce__(self):
        return (LogisticTarget, (np.asarray(self.X), np.asarray(self.y),
                                 1.0 / self.inv_prior_variance, self.n_threads, self.block_rows))

    cdef int threads(self) noexcept nogil:
        # 0 means "follow the OpenMP limit" (OMP_NUM_THREADS, threadpoolctl) at call time.
        cdef int limit = omp_get_max_threads()
        cdef Py_ssize_t useful = max(1, self.n_rows * self.dim // MIN_THREAD_ELEMENTS)
        if self.n_threads > 0 and self.n_threads < limit:
            limit = self.n_threads
        return <int> min(limit, useful)

    cdef void evaluate(self, const double* q, double* U, double* grad,
                       double* scratch) noexcept nogil:
        """U(q), and grad U(q) into ``grad`` unless it is NULL."""
        cdef Py_ssize_t b, j, start, stop
        cdef double total
        cdef bint want_gradient = grad != NULL
        cdef double* eta = scratch
        cdef double* block_potential = scratch + self.n_rows
        cdef double* block_gradient = block_potential + self.n_blocks
        for b in prange(self.n_blocks, schedule="static", num_threads=self.threads()):
            start = b * self.block_rows
            stop = min(start + self.block_rows, self.n_rows)
            block_potential[b] = logistic_rows(
                &self.X[start, 0], &self.y[start], q, stop - start, self.dim, eta + start,
                block_gradient + b * self.dim if want_gradient else NULL, self.prefetch)
        total = 0.0
        for j in range(self.dim):
            total = total + q[j] * q[j]
        total = 0.5 * self.inv_prior_variance * total
        for b in range(self.n_blocks):
            total = total + block_potential[b]
        U[0] = total
        if want_gradient:
            for j in range(self.dim):
                grad[j] = self.inv_prior_variance * q[j]
            for b in range(self.n_blocks):
                for j in range(self.dim):
                    grad[j] += block_gradient[b * self.dim + j]

    cdef int potential(self, const double* q, double* U, double* scratch) except -1 nogil:
        self.evaluate(q, U, NULL, scratch)
        return 0

    cdef int potential_and_gradient(self, const double* q, double* U, double* grad,
                                    double* scratch) except -1 nogil:
        self.evaluate(q, U, grad, scratch)
        return 0

    def fisher_metric(self, q):
        """X^T diag(pi (1 - pi)) X + I / alpha at ``q`` (ndarray (dim, dim))."""
        cdef double[::1] qv = self._checked_point(q)
        G = np.zeros((self.dim, self.dim))
        cdef double[:, ::1] Gv = G
        cdef double[::1] eta = np.empty(self.block_rows)
        cdef double[:, ::1] scaled_block = np.empty((self.block_rows, self.dim))
        cdef Py_ssize_t b, i, j, start, stop
        cdef int d = <int> self.dim
        cdef double sig, w
        with nogil:
            for b in range(self.n_blocks):
                start = b * self.block_rows
                stop = min(start + self.block_rows, self.n_rows)
                _gemv(RowMajor, NoTrans, <int> (stop - start), d, 1.0, &self.X[start, 0], d,
                      &qv[0], 1, 0.0, &eta[0], 1)
                for i in range(start, stop):
                    softplus_and_sigmoid(eta[i - start], &sig)
                    w = sqrt(sig * (1.0 - sig))
                    for j in range(self.dim):
                        scaled_block[i - start, j] = w * self.X[i, j]
                _syrk(RowMajor, Lower, Trans, d, <int> (stop - start), 1.0, &scaled_block[0, 0],
                      d, 1.0, &Gv[0, 0], d)
        G = np.tril(G) + np.tril(G, -1).T
        G[np.diag_indices(self.dim)] += self.inv_prior_variance
        return G
