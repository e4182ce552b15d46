"""Least-squares output weights updated as training rows arrive (ARNS-HMC).

Greville's recursion for the pseudo-inverse (Zhang, Shahbaba and Zhao 2017, Proposition 1;
docs/algorithms.md section 6): for rows h_j (hidden-unit vectors) and targets t_j seen so far,
stacked as H and T, keep v = H^+ T, Theta = H^+ H^{+T} and Phi = I - H^+ H (the projector onto
the orthogonal complement of the rows' span). A new row h with target t costs O(s^2):

- c = Phi h. If |c|^2 <= tol |h|^2 (h in the span of the rows so far; Phi = 0 once they span
  the whole space, or after a ridge start), the recursive-least-squares branch
  b = Theta h / (1 + h^T Theta h), Theta -= Theta h b^T;
- else b = c / |c|^2, Phi -= c b^T, Theta -= Theta h b^T + b h^T Theta - (1 + h^T Theta h) b b^T;
- v += (t - h^T v) b.

After a ridge start (Theta = (H^T H + lambda I)^{-1}, Phi = 0) only the first branch runs, and
v stays the ridge solution on all rows. (The surrogate's rows end with a column for its
unpenalised constant, 1 for a value row and 0 for a gradient row, and its start has lambda on
all diagonal entries but that column's: the same recursion, see docs/algorithms.md section 6.)

While Phi is exactly zero (no null-space tracking, as the surrogate's ridge start, or after a
full-rank start or a refresh) the k rows H_k of one ``update`` go as one block: Woodbury's form
of k recursive-least-squares steps, with BLAS 3,

    S = I_k + H_k Theta H_k^T = R^T R (dsymm, dgemm, Cholesky dpotrf),
    W = R^{-T} H_k Theta (dtrsm),  Theta -= W^T W (dsyrk),  v += W^T R^{-T} (t_k - H_k v),

i.e. K = Theta H_k^T S^{-1}, v += K (t_k - H_k v), Theta -= K H_k Theta. It does the per-row
flops (3 k s^2) at BLAS-3 speed instead of k memory-bound passes over Theta. The rows go in
chunks of ``block_rows`` = min(256, s) (the scratch is allocated once, at construction), so the
result depends only on the rows and how they are split into ``update`` calls; equal to the
per-row recursion up to rounding. A chunk whose S is not numerically positive definite (Theta
having lost its own) falls back to single rows. With null-space tracking and Phi != 0 (rows
not yet spanning the space) every row goes through Greville's branches one at a time.

Theta and Phi are stored as upper triangles and updated with dsymv/dsyr/dsyr2 (per row) or
dsyrk (per block), so they are symmetric by construction; the normal matrix H^T H (+ lambda I)
and H^T T are accumulated too (rows buffered and added 64 at a time by one dsyrk, whatever the
blocks) so that ``refresh`` can reset Theta and v from a batch solve and stop the recursion's
rounding drift.
"""
from libc.math cimport isfinite, sqrt

import numpy as np
import scipy.linalg

from libc.string cimport memcpy

from ._blas cimport (
    NoTrans, Right, Left, RowMajor, Trans, Upper, _axpy, _dot, _gemm, _gemv, _scal, _symm, _symv,
    _syr, _syr2, _syrk, _trsm, _trsv,
)
from ._lapack cimport _potrf

cdef enum:
    # rows buffered before they are added to the normal equations in one dsyrk
    PENDING = 64
    # the most rows one block update takes: an update's rows go in chunks of
    # min(BLOCK_ROWS, s) (the last one shorter). 128 to 256 were fastest at s = 2001 (one
    # thread; 32: 1.3 times slower, 1024: 1.25 times); the scratch is (BLOCK_ROWS + s) BLOCK_ROWS
    # doubles
    BLOCK_ROWS = 256


cdef class OnlineLeastSquares:
    """Output weights kept equal to the (ridge or minimum-norm) least-squares solution on all
    rows seen, updated in O(s^2) per row with no allocation: a call's rows as blocks of up to
    ``block_rows`` (BLAS 3) while Phi = 0, else one at a time.

    Build it with :meth:`from_rows` (a batch start) or from explicit ``(v, theta, phi)``.

    Parameters
    ----------
    weights : ndarray of shape (s,)
        v.
    theta : ndarray of shape (s, s)
        Theta (symmetric; its upper triangle is used).
    phi : ndarray of shape (s, s) or None
        Phi; None after a ridge start (Phi = 0: the recursive-least-squares branch only).
    normal, rhs : ndarrays of shapes (s, s) and (s,)
        H^T H (+ the ridge) and H^T T of the start, kept up to date for :meth:`refresh`.
    tol : float
        Relative rank test of Greville's branch, |Phi h|^2 <= tol |h|^2 (default 1e-10).
    """
    cdef readonly Py_ssize_t n_hidden
    cdef readonly double tol
    cdef readonly bint tracks_null_space
    cdef bint has_normal
    # rows not yet added to the normal equations: added PENDING rows at a time by one dsyrk
    # (BLAS 3) instead of a dsyr pass over the s x s triangle per row
    cdef double* pending
    cdef double* pending_targets
    cdef Py_ssize_t n_pending
    # rows per block update (min(BLOCK_ROWS, s)) and its scratch: U = H Theta (rows, s), the
    # rows' k x k matrix I + H Theta H^T and their residuals t - H v
    cdef readonly Py_ssize_t block_rows
    cdef object _block
    cdef double* block_u
    cdef double* block_s
    cdef double* block_e
    # Phi is exactly zero (no null-space tracking, or a start or refresh with full rank):
    # every row takes the recursive-least-squares branch, and k rows go as one block
    cdef bint phi_zero
    cdef readonly long long n_updates            # rows since the start
    cdef readonly long long n_null_space_updates  # of which by Greville's branch (c != 0)
    cdef object _arrays
    cdef object _pending
    cdef double* v
    cdef double* theta
    cdef double* phi
    cdef double* normal
    cdef double* rhs
    cdef double* u
    cdef double* c

    def __init__(self, weights, theta, phi=None, normal=None, rhs=None, double tol=1e-10):
        v = np.array(weights, dtype=np.float64)
        if v.ndim != 1 or v.size < 1:
            raise ValueError(f"weights must be a non-empty vector, got shape {v.shape}")
        s = v.size
        squares = np.zeros((4, s, s))
        vectors = np.zeros((4, s))
        for name, value, index in (("theta", theta, 0), ("phi", phi, 1), ("normal", normal, 2)):
            if value is None:
                continue
            a = np.asarray(value, dtype=np.float64)
            if a.shape != (s, s):
                raise ValueError(f"{name} must have shape ({s}, {s}), got {a.shape}")
            squares[index] = a
        if normal is not None:
            r = np.asarray(rhs, dtype=np.float64)
            if r.shape != (s,):
                raise ValueError(f"rhs must have shape ({s},), got {r.shape}")
            vectors[1] = r
        vectors[0] = v
        if not (np.all(np.isfinite(squares)) and np.all(np.isfinite(vectors))):
            raise ValueError("the online estimator's start must be finite")
        if not (tol > 0 and isfinite(tol)):
            raise ValueError(f"tol must be positive and finite, got {tol!r}")
        self.n_hidden = s
        self.tol = tol
        self.tracks_null_space = phi is not None
        self.has_normal = normal is not None
        self._arrays = (squares, vectors)
        cdef double[:, :, ::1] sq = squares
        cdef double[:, ::1] vec = vectors
        self.theta, self.phi, self.normal = &sq[0, 0, 0], &sq[1, 0, 0], &sq[2, 0, 0]
        self.v, self.rhs, self.u, self.c = &vec[0, 0], &vec[1, 0], &vec[2, 0], &vec[3, 0]
        self._pending = (np.zeros((PENDING, s)), np.zeros(PENDING))
        cdef double[:, ::1] pending_rows = self._pending[0]
        cdef double[::1] pending_targets = self._pending[1]
        self.pending, self.pending_targets = &pending_rows[0, 0], &pending_targets[0]
        self.n_pending = 0
        self.phi_zero = phi is None or not np.any(squares[1])
        self.block_rows = min(<Py_ssize_t> BLOCK_ROWS, s)
        b = self.block_rows
        self._block = (np.zeros((b, s)), np.zeros((b, b)), np.zeros(b))
        cdef double[:, ::1] block_u = self._block[0]
        cdef double[:, ::1] block_s = self._block[1]
        cdef double[::1] block_e = self._block[2]
        self.block_u, self.block_s, self.block_e = &block_u[0, 0], &block_s[0, 0], &block_e[0]

    def __reduce__(self):
        # the pending rows travel as they are (not flushed): a copy must go on summing the
        # normal equations in the original's order, or its periodic refresh would differ
        # from the original's in the last bits
        squares, vectors = self._arrays
        k = self.n_pending
        # (inside the class, self.theta etc. are the C pointers: use the arrays)
        return (_rebuild, (vectors[0].copy(), _symmetric(squares[0]),
                           _symmetric(squares[1]) if self.tracks_null_space else None,
                           _symmetric(squares[2]) if self.has_normal else None,
                           vectors[1].copy() if self.has_normal else None, self.tol,
                           self.n_updates, self.n_null_space_updates,
                           self._pending[0][:k].copy(), self._pending[1][:k].copy()))

    @classmethod
    def from_rows(cls, H, t, double ridge=0.0, double tol=1e-10):
        """The batch start on rows ``H`` (k, s) with targets ``t`` (k,): with ``ridge`` > 0,
        Theta = (H^T H + ridge I)^{-1} and Phi = 0; with ridge 0, the pseudo-inverse H^+,
        Theta = H^+ H^{+T}, Phi = I - H^+ H (rank decided with the same relative ``tol``)."""
        H = np.atleast_2d(np.asarray(H, dtype=np.float64))
        t = np.asarray(t, dtype=np.float64)
        if t.shape != (H.shape[0],):
            raise ValueError(f"t must have shape ({H.shape[0]},), got {t.shape}")
        if not (np.all(np.isfinite(H)) and np.all(np.isfinite(t))):
            raise ValueError("rows and targets must be finite")
        if ridge < 0 or not isfinite(ridge):
            raise ValueError(f"ridge must be finite and >= 0, got {ridge!r}")
        s = H.shape[1]
        normal = H.T @ H + ridge * np.eye(s)
        rhs = H.T @ t
        if ridge > 0:
            theta = scipy.linalg.cho_solve(scipy.linalg.cho_factor(normal), np.eye(s))
            return cls(theta @ rhs, theta, None, normal, rhs, tol)
        pinv = np.linalg.pinv(H, rcond=sqrt(tol))  # (s, k)
        theta = pinv @ pinv.T
        phi = np.eye(s) - pinv @ H
        return cls(pinv @ t, theta, phi, normal, rhs, tol)

    cdef void update_row(self, const double* h, double t) noexcept nogil:
        """Add the row h (s doubles) with target t."""
        cdef int n = <int> self.n_hidden
        cdef double cc = 0.0, hu, residual
        if self.tracks_null_space:
            _symv(RowMajor, Upper, n, 1.0, self.phi, n, h, 1, 0.0, self.c, 1)
            cc = _dot(n, self.c, 1, self.c, 1)
        self.n_updates += 1
        residual = t - _dot(n, h, 1, self.v, 1)
        _symv(RowMajor, Upper, n, 1.0, self.theta, n, h, 1, 0.0, self.u, 1)  # u = Theta h
        hu = _dot(n, h, 1, self.u, 1)
        if self.tracks_null_space and cc > self.tol * _dot(n, h, 1, h, 1):
            self.n_null_space_updates += 1
            self.phi_zero = False
            _scal(n, 1.0 / cc, self.c, 1)  # b = c / |c|^2
            # Phi -= (Phi h) b^T = |c|^2 b b^T; Theta -= u b^T + b u^T - (1 + h^T u) b b^T
            _syr(RowMajor, Upper, n, -cc, self.c, 1, self.phi, n)
            _syr2(RowMajor, Upper, n, -1.0, self.u, 1, self.c, 1, self.theta, n)
            _syr(RowMajor, Upper, n, 1.0 + hu, self.c, 1, self.theta, n)
            _axpy(n, residual, self.c, 1, self.v, 1)
        else:
            # b = u / (1 + h^T u): Theta -= u u^T / (1 + h^T u), v += residual b
            _syr(RowMajor, Upper, n, -1.0 / (1.0 + hu), self.u, 1, self.theta, n)
            _axpy(n, residual / (1.0 + hu), self.u, 1, self.v, 1)
        self.add_pending(h, t)

    cdef bint update_block(self, const double* H, const double* t, int k) noexcept nogil:
        """Add the k rows H (k x s, row-major) with targets t at once, by the block form of the
        recursive-least-squares branch (Phi = 0; 1 <= k <= block_rows):
        S = I_k + H Theta H^T = R^T R, W = R^{-T} H Theta, Theta -= W^T W,
        v += W^T R^{-T} (t - H v). Returns False, changing nothing, if S is not numerically
        positive definite (only if Theta has lost its own positive definiteness)."""
        cdef int n = <int> self.n_hidden, j, info
        cdef double* U = self.block_u
        cdef double* S = self.block_s
        cdef double* e = self.block_e
        # U = H Theta (k x s), e = t - H v, S = I + U H^T (its upper triangle is used)
        _symm(RowMajor, Right, Upper, k, n, 1.0, self.theta, n, H, n, 0.0, U, n)
        memcpy(e, t, k * sizeof(double))
        _gemv(RowMajor, NoTrans, k, n, -1.0, H, n, self.v, 1, 1.0, e, 1)
        _gemm(RowMajor, NoTrans, Trans, k, k, n, 1.0, U, n, H, n, 0.0, S, k)
        for j in range(k):
            S[j * k + j] += 1.0
        # S = R^T R, R upper triangular (row-major upper triangle)
        info = _potrf(RowMajor, Upper, k, S, k)
        if info != 0:
            return False
        # W = R^{-T} U in place: Theta -= W^T W = Theta H^T S^{-1} H Theta (a symmetric rank-k
        # update of the upper triangle), v += W^T R^{-T} e = Theta H^T S^{-1} e
        _trsm(RowMajor, Left, Upper, Trans, k, n, 1.0, S, k, U, n)
        _syrk(RowMajor, Upper, Trans, n, k, -1.0, U, n, 1.0, self.theta, n)
        _trsv(RowMajor, Upper, Trans, k, S, k, e, 1)
        _gemv(RowMajor, Trans, k, n, 1.0, U, n, e, 1, 1.0, self.v, 1)
        self.n_updates += k
        for j in range(k):
            self.add_pending(H + j * n, t[j])
        return True

    cdef void update_rows(self, const double* H, const double* t, Py_ssize_t k) noexcept nogil:
        """Add the k rows H (k x s, row-major) with targets t, in order: in chunks of
        block_rows rows by :meth:`update_block` while Phi is zero, else one row at a time."""
        cdef Py_ssize_t n = self.n_hidden, j = 0, i, m
        while j < k:
            if self.tracks_null_space and not self.phi_zero:
                self.update_row(H + j * n, t[j])
                j += 1
                continue
            m = min(self.block_rows, k - j)
            if m == 1 or not self.update_block(H + j * n, t + j, <int> m):
                for i in range(j, j + m):
                    self.update_row(H + i * n, t[i])
            j += m

    cdef void add_pending(self, const double* h, double t) noexcept nogil:
        """Queue the row h with target t for the normal equations (added PENDING at a time)."""
        cdef int n = <int> self.n_hidden
        if not self.has_normal:
            return
        memcpy(self.pending + self.n_pending * n, h, n * sizeof(double))
        self.pending_targets[self.n_pending] = t
        self.n_pending += 1
        if self.n_pending == PENDING:
            self.flush()

    cdef void flush(self) noexcept nogil:
        """Add the pending rows R and targets y to the normal equations: N += R^T R,
        r += R^T y."""
        cdef int n = <int> self.n_hidden, k = <int> self.n_pending
        if k == 0:
            return
        _syrk(RowMajor, Upper, Trans, n, k, 1.0, self.pending, n, 1.0, self.normal, n)
        _gemv(RowMajor, Trans, k, n, 1.0, self.pending, n, self.pending_targets, 1, 1.0,
              self.rhs, 1)
        self.n_pending = 0

    def update(self, rows, targets):
        """Add rows (k, s) with targets (k,), in order: in chunks of ``block_rows`` rows, each
        one block update, while Phi = 0 (a chunk of one row, or one whose I + H Theta H^T is
        not numerically positive definite, goes row by row); else one row at a time.

        Raises
        ------
        ValueError
            On wrong shapes or non-finite values (nothing is updated then).
        """
        cdef double[:, ::1] R = np.ascontiguousarray(np.atleast_2d(rows), dtype=np.float64)
        cdef double[::1] y = np.ascontiguousarray(np.atleast_1d(targets), dtype=np.float64)
        if R.shape[1] != self.n_hidden or y.shape[0] != R.shape[0]:
            raise ValueError(f"rows must have shape (k, {self.n_hidden}) and targets (k,), got "
                             f"{(R.shape[0], R.shape[1])} and ({y.shape[0]},)")
        if not (np.all(np.isfinite(R)) and np.all(np.isfinite(y))):
            raise ValueError("rows and targets must be finite")
        if R.shape[0] == 0:
            return
        with nogil:
            self.update_rows(&R[0, 0], &y[0], R.shape[0])

    def refresh(self):
        """Reset Theta and v from the accumulated normal equations (a batch solve: O(s^3)),
        discarding the recursion's rounding drift. Returns False (nothing changed) if there
        are none or they are not positive definite (rows not yet spanning the hidden space
        without a ridge: Phi is still tracked then)."""
        squares, vectors = self._arrays
        if not self.has_normal:
            return False
        self.flush()
        normal = np.triu(squares[2]) + np.triu(squares[2], 1).T
        try:
            factor = scipy.linalg.cho_factor(normal)
        except np.linalg.LinAlgError:
            return False
        theta = scipy.linalg.cho_solve(factor, np.eye(self.n_hidden))
        if not np.all(np.isfinite(theta)):
            return False
        squares[0] = theta
        vectors[0] = theta @ vectors[1]
        if self.tracks_null_space:
            squares[1] = 0.0  # a positive-definite normal matrix: the rows span everything
        self.phi_zero = True
        return True

    @property
    def weights(self):
        """v (a copy)."""
        return self._arrays[1][0].copy()

    @property
    def theta(self):
        """Theta, symmetric (a copy)."""
        return _symmetric(self._arrays[0][0])

    @property
    def phi(self):
        """Phi, symmetric (a copy; zeros without null-space tracking)."""
        return _symmetric(self._arrays[0][1])

    @property
    def normal(self):
        """The accumulated H^T H (+ ridge), symmetric (a copy), or None."""
        self.flush()
        return _symmetric(self._arrays[0][2]) if self.has_normal else None


def _rebuild(weights, theta, phi, normal, rhs, tol, n_updates, n_null_space_updates,
             pending_rows=None, pending_targets=None):
    cdef OnlineLeastSquares estimator = OnlineLeastSquares(weights, theta, phi, normal, rhs, tol)
    estimator.n_updates, estimator.n_null_space_updates = n_updates, n_null_space_updates
    if pending_rows is not None and len(pending_rows):
        k = len(pending_rows)
        estimator._pending[0][:k] = pending_rows
        estimator._pending[1][:k] = pending_targets
        estimator.n_pending = k
    return estimator


def _symmetric(upper):
    return np.triu(upper) + np.triu(upper, 1).T
