"""Bayesian logistic regression as a C-level target.

U(b) = sum_i [softplus(x_i^T b) - y_i x_i^T b] + |b|^2 / (2 alpha), y_i in {0, 1}.

One pass over the rows of X per evaluation: X is split into row blocks small enough to stay in
cache, and for each block the linear predictor (one BLAS gemv) and the gradient contribution
(a second gemv over the same, now cached, block) are computed together. Blocks are shared among
OpenMP threads (static schedule); per-block partial sums are reduced serially in block order, so
the result is bit-identical whatever the number of threads.
"""
from cython.parallel cimport prange
from libc.math cimport exp, log, log1p, fabs, fmax, sqrt

import numpy as np

from ._blas cimport RowMajor, Lower, NoTrans, Trans, _gemv, _syrk
from ._openmp cimport omp_get_max_threads, RNSHMC_OPENMP_ENABLED
from ._targets cimport CTarget

# OpenBLAS runs gemv single-threaded below about 9216 elements; blocks stay under that so that
# BLAS called from our threads never starts threads of its own, and a block (<= 64 KiB) stays
# in L2 between its two passes.
cdef enum:
    BLOCK_ELEMENTS = 8192
    LOG_CHUNK = 64

openmp_enabled = bool(RNSHMC_OPENMP_ENABLED)


cdef inline double softplus_and_sigmoid(double eta, double* sigmoid) noexcept nogil:
    """log(1 + e^eta) and 1/(1 + e^-eta), overflow-safe, sharing one exp."""
    cdef double t = exp(-fabs(eta))
    sigmoid[0] = (1.0 if eta >= 0.0 else t) / (1.0 + t)
    return fmax(eta, 0.0) + log1p(t)


cdef class LogisticTarget(CTarget):
    """C kernel of ``rnshmc.models.LogisticRegression`` (inputs validated there)."""
    cdef const double[:, ::1] X
    cdef const double[::1] y
    cdef double inv_prior_variance
    cdef public int n_threads
    cdef Py_ssize_t n_rows, block_rows, n_blocks
    cdef double[::1] eta
    cdef double[::1] block_potential
    cdef double[:, ::1] block_gradient
    cdef double[:, ::1] scaled_block

    def __init__(self, const double[:, ::1] X, const double[::1] y, double prior_variance,
                 int n_threads=0):
        super().__init__(X.shape[1])
        self.X = X
        self.y = y
        self.n_rows = X.shape[0]
        self.inv_prior_variance = 1.0 / prior_variance
        self.n_threads = n_threads
        self.block_rows = max(16, BLOCK_ELEMENTS // self.dim)
        self.n_blocks = (self.n_rows + self.block_rows - 1) // self.block_rows
        self.eta = np.empty(self.n_rows)
        self.block_potential = np.empty(self.n_blocks)
        self.block_gradient = np.empty((self.n_blocks, self.dim))
        self.scaled_block = np.empty((self.block_rows, self.dim))

    def spawn(self):
        """An independent copy (own scratch, shared X and y) for use from another thread."""
        return LogisticTarget(self.X, self.y, 1.0 / self.inv_prior_variance, self.n_threads)

    cdef int threads(self) noexcept nogil:
        # 0 means "follow the OpenMP limit" (OMP_NUM_THREADS, threadpoolctl) at call time.
        cdef int limit = omp_get_max_threads()
        if self.n_threads <= 0 or self.n_threads > limit:
            return limit
        return self.n_threads

    cdef void evaluate(self, const double* q, double* U, double* grad) noexcept nogil:
        """U(q), and grad U(q) into ``grad`` unless it is NULL."""
        cdef Py_ssize_t b, i, j, start, stop
        cdef int d = <int> self.dim
        cdef double total, s, eta, t, product
        cdef Py_ssize_t c, chunk, chunk_end
        cdef bint want_gradient = grad != NULL
        for b in prange(self.n_blocks, schedule="static", num_threads=self.threads()):
            start = b * self.block_rows
            stop = min(start + self.block_rows, self.n_rows)
            _gemv(RowMajor, NoTrans, <int> (stop - start), d, 1.0, &self.X[start, 0], d, q, 1,
                  0.0, &self.eta[start], 1)
            # softplus(eta) = max(eta, 0) + log(1 + t), t = exp(-|eta|) in (0, 1]: the logs of a
            # chunk are summed as the log of the product of its (1 + t) factors (each <= 2, so
            # LOG_CHUNK of them cannot overflow), one log per chunk instead of one per row.
            s = 0.0
            for c in range((stop - start + LOG_CHUNK - 1) // LOG_CHUNK):
                chunk = start + c * LOG_CHUNK
                chunk_end = min(chunk + LOG_CHUNK, stop)
                product = 1.0
                for i in range(chunk, chunk_end):
                    eta = self.eta[i]
                    t = exp(-fabs(eta))
                    product = product * (1.0 + t)
                    s = s + fmax(eta, 0.0) - self.y[i] * eta
                    if want_gradient:
                        # residual sigmoid(eta) - y, reused by the gradient pass over the block
                        self.eta[i] = (1.0 if eta >= 0.0 else t) / (1.0 + t) - self.y[i]
                s = s + log(product)
            self.block_potential[b] = s
            if want_gradient:
                _gemv(RowMajor, Trans, <int> (stop - start), d, 1.0, &self.X[start, 0], d,
                      &self.eta[start], 1, 0.0, &self.block_gradient[b, 0], 1)
        total = 0.0
        for j in range(self.dim):
            total = total + q[j] * q[j]
        total = 0.5 * self.inv_prior_variance * total
        for b in range(self.n_blocks):
            total = total + self.block_potential[b]
        U[0] = total
        if want_gradient:
            for j in range(self.dim):
                grad[j] = self.inv_prior_variance * q[j]
            for b in range(self.n_blocks):
                for j in range(self.dim):
                    grad[j] += self.block_gradient[b, j]

    cdef int potential(self, const double* q, double* U) except -1 nogil:
        self.evaluate(q, U, NULL)
        return 0

    cdef int potential_and_gradient(self, const double* q, double* U, double* grad) except -1 nogil:
        self.evaluate(q, U, grad)
        return 0

    def fisher_metric(self, q):
        """X^T diag(pi (1 - pi)) X + I / alpha at ``q`` (ndarray (dim, dim))."""
        cdef double[::1] qv = self._checked_point(q)
        G = np.zeros((self.dim, self.dim))
        cdef double[:, ::1] Gv = G
        cdef Py_ssize_t b, i, j, start, stop
        cdef int d = <int> self.dim
        cdef double sig, w
        with nogil:
            for b in range(self.n_blocks):
                start = b * self.block_rows
                stop = min(start + self.block_rows, self.n_rows)
                _gemv(RowMajor, NoTrans, <int> (stop - start), d, 1.0, &self.X[start, 0], d,
                      &qv[0], 1, 0.0, &self.eta[start], 1)
                for i in range(start, stop):
                    softplus_and_sigmoid(self.eta[i], &sig)
                    w = sqrt(sig * (1.0 - sig))
                    for j in range(self.dim):
                        self.scaled_block[i - start, j] = w * self.X[i, j]
                _syrk(RowMajor, Lower, Trans, d, <int> (stop - start), 1.0, &self.scaled_block[0, 0],
                      d, 1.0, &Gv[0, 0], d)
        G = np.tril(G) + np.tril(G, -1).T
        G[np.diag_indices(self.dim)] += self.inv_prior_variance
        return G
