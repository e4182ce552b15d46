"""Least-squares output weights updated one training row at a time (ARNS-HMC).

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
all diagonal entries but that column's: the same recursion, see docs/algorithms.md section 6.) Theta and Phi are stored as upper triangles and updated
with dsymv/dsyr/dsyr2, so they are symmetric by construction; the normal matrix H^T H (+
lambda I) and H^T T are accumulated too (rows buffered and added 64 at a time by one dsyrk) so
that ``refresh`` can reset Theta and v from a batch solve and stop the recursion's rounding
drift.
"""
from libc.math cimport isfinite, sqrt

import numpy as np
import scipy.linalg

from libc.string cimport memcpy

from ._blas cimport RowMajor, Trans, Upper, _axpy, _dot, _gemv, _scal, _symv, _syr, _syr2, _syrk

# rows buffered before they are added to the normal equations in one dsyrk
cdef enum:
    PENDING = 64


cdef class OnlineLeastSquares:
    """Output weights kept equal to the (ridge or minimum-norm) least-squares solution on all
    rows seen, updated per row in O(s^2) with no allocation.

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
        if self.has_normal:
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
        """Add rows (k, s) with targets (k,), in order.

        Raises
        ------
        ValueError
            On wrong shapes or non-finite values (nothing is updated then).
        """
        cdef double[:, ::1] R = np.ascontiguousarray(np.atleast_2d(rows), dtype=np.float64)
        cdef double[::1] y = np.ascontiguousarray(np.atleast_1d(targets), dtype=np.float64)
        cdef Py_ssize_t j
        if R.shape[1] != self.n_hidden or y.shape[0] != R.shape[0]:
            raise ValueError(f"rows must have shape (k, {self.n_hidden}) and targets (k,), got "
                             f"{(R.shape[0], R.shape[1])} and ({y.shape[0]},)")
        if not (np.all(np.isfinite(R)) and np.all(np.isfinite(y))):
            raise ValueError("rows and targets must be finite")
        with nogil:
            for j in range(R.shape[0]):
                self.update_row(&R[j, 0], y[j])

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
