"""Riemannian metrics G(q) behind the metric interface, with the derivative terms of the
generalized leapfrog (docs/algorithms.md section 5):

    H(q, p) = U(q) + 1/2 log det G(q) + 1/2 p^T G(q)^{-1} p,
    grad_i (1/2 log det G) = 1/2 tr(G^{-1} dG/dq_i),   nu_i(q, p) = r^T (dG/dq_i) r, r = G^{-1} p.

G is factorised once per position (``update``): a Cholesky factor, or with SoftAbs an
eigendecomposition, reused for velocities, the momentum draw and the log-determinant.

SoftAbs (Betancourt 2013) maps a symmetric H = Q diag(lam) Q^T that need not be positive
definite to G = Q diag(f(lam)) Q^T with f(lam) = lam coth(alpha lam) >= 1/alpha (|lam| for
|alpha lam| >> 1). Its derivatives follow the Daleckii-Krein formula
    dG/dq_i = Q (J o (Q^T dH/dq_i Q)) Q^T,  J_kl = (f(lam_k) - f(lam_l)) / (lam_k - lam_l),
    J_kk = f'(lam_k),
so  grad_i 1/2 log det G = 1/2 sum_k f'(lam_k)/f(lam_k) (Q^T dH_i Q)_kk  and
    nu_i = rho^T (J o Q^T dH_i Q) rho  with rho = Q^T r.
For a diagonal metric it acts elementwise.

Two families:

* ``LinearPredictorMetric``: potentials that are sums of functions of linear predictors,
  U = sum_j u_j(a_j . q + b_j) + q^T D q / 2, whose metric (the Hessian, or the Fisher metric of
  a logistic regression, which equals it) is G = A^T diag(kappa) A + D with kappa_j = u_j''
  and dG/dq_i = A^T diag(kappa' o A[:, i]) A. Then, with h_j = a_j^T G^{-1} a_j,
    grad 1/2 log det G = 1/2 A^T (kappa' o h),   nu = A^T (kappa' o (A r)^2):
  O(m d^2) and O(m d), never the d matrices dG/dq_i (the random-network surrogate:
  kappa_j = v_j a''(pre_j); logistic regression: kappa = pi (1 - pi)). Every pass over A runs
  in blocks of rows with BLAS 3.
* ``TensorMetric``: G and all dG/dq_i given as dense arrays (a user's callables, or the PDE's
  Gauss-Newton metric computed in C, ``_fem.GaussNewtonMetric``): O(d^3) per position, O(d^3)
  per nu.
"""
from libc.math cimport exp, log, sqrt, fabs, tanh, sinh, isfinite
from libc.string cimport memcmp, memcpy, memset

import numpy as np

from ._activations cimport activation_curvature, activation_kinds, activation_third
from ._blas cimport (RowMajor, Lower, Upper, NoTrans, Trans, Left, Right, _dot, _axpy, _scal,
                     _gemv, _gemm, _symv, _syrk, _trmv, _trsv, _trsm)
from ._lapack cimport _potrf, _syev
from ._random cimport bitgen_t, get_bitgen, random_standard_normal_fill

# rows of A per block of the passes over A (the block's scratch stays in cache)
DEF BLOCK_ROWS = 256
# kinds of LinearPredictorMetric curvature
DEF LOGISTIC = -1


cdef inline double softabs_value(double lam, double alpha) noexcept nogil:
    """lam coth(alpha lam), continuous at 0 (1/alpha)."""
    cdef double x = alpha * lam
    if fabs(x) < 1e-4:
        return (1.0 + x * x / 3.0) / alpha
    return lam / tanh(x)


cdef inline double softabs_slope(double lam, double alpha) noexcept nogil:
    """d/dlam lam coth(alpha lam) = coth(x) - x / sinh(x)^2, x = alpha lam."""
    cdef double x = alpha * lam, s
    if fabs(x) < 1e-4:
        return 2.0 * x / 3.0
    if fabs(x) > 40.0:  # x / sinh(x)^2 < 1e-32
        return 1.0 / tanh(x)
    s = sinh(x)
    return 1.0 / tanh(x) - x / (s * s)


cdef class RiemannianMetric(Metric):
    """Interface and shared linear algebra of the position-dependent metrics (abstract).

    Subclasses implement ``compute`` (the raw metric at q), ``update_derivatives`` and ``nu``.
    """

    def __init__(self, Py_ssize_t dim, bint diagonal=False, double softabs=0.0,
                 str description="the metric"):
        if dim < 1:
            raise ValueError("dim must be positive")
        if not (softabs >= 0.0 and isfinite(softabs)):
            raise ValueError(f"softabs must be a positive number (or 0: none), got {softabs}")
        self.dim = dim
        self.position_dependent = True
        self.diagonal = diagonal
        self.softabs = softabs
        self.description = description
        self.lwork = <int> max(1, 66 * dim)
        square = np.zeros((4, dim, dim))
        vectors = np.zeros((8, dim))
        work = np.zeros(self.lwork)
        self._arrays = [square, vectors, work]
        cdef double[:, :, ::1] sq = square
        cdef double[:, ::1] vec = vectors
        cdef double[::1] w = work
        self.G, self.factor, self.jmat = &sq[0, 0, 0], &sq[1, 0, 0], &sq[2, 0, 0]
        self.q_at, self.lam, self.fval, self.fprime = &vec[0, 0], &vec[1, 0], &vec[2, 0], &vec[3, 0]
        self.grad_hld, self.tmp, self.tmp2 = &vec[4, 0], &vec[5, 0], &vec[6, 0]
        self.lapack_work = &w[0]
        self.hld = 0.0
        self._indefinite = np.zeros(dim)
        cdef double[::1] at = self._indefinite
        self.indefinite_at = &at[0]

    # ------------------------------------------------------------------------------------------
    # what subclasses provide

    cdef int compute(self, const double* q, double* G) except -1 nogil:
        with gil:
            raise NotImplementedError(f"{type(self).__name__} does not compute a metric")

    cdef int update_derivatives(self) except -1 nogil:
        with gil:
            raise NotImplementedError(f"{type(self).__name__} has no derivatives")

    cdef int nu(self, const double* v, double* out) except -1 nogil:
        with gil:
            raise NotImplementedError(f"{type(self).__name__} has no derivatives")

    # ------------------------------------------------------------------------------------------
    # the factorisation and what it serves

    cdef int update(self, const double* q, double* scratch) except -1 nogil:
        cdef Py_ssize_t i
        cdef int status
        for i in range(self.dim):
            if not isfinite(q[i]):
                return 1
        if self.factor_current and memcmp(q, self.q_at, self.dim * sizeof(double)) == 0:
            return 0
        memcpy(self.q_at, q, self.dim * sizeof(double))
        self.derivatives_current = False
        self.factor_current = False
        self.n_updates += 1
        if self.compute(q, self.G) != 0:
            return 1
        status = self.factorize()
        self.factor_current = status == 0
        return status

    cdef int factorize(self) except -1 nogil:
        cdef Py_ssize_t i, j, d = self.dim
        cdef int info, n = <int> d
        cdef double a = self.softabs, total = 0.0
        if self.diagonal:
            for i in range(d):
                self.lam[i] = self.G[i]
                if not isfinite(self.G[i]):
                    return 1
                if a > 0.0:
                    self.fval[i] = softabs_value(self.G[i], a)
                    self.fprime[i] = softabs_slope(self.G[i], a)
                else:
                    if not self.G[i] > 0.0:
                        return self.not_positive(<int> i + 1)
                    self.fval[i] = self.G[i]
                    self.fprime[i] = 1.0
                total += log(self.fval[i])
            self.hld = 0.5 * total
            return 0
        for i in range(d * d):
            if not isfinite(self.G[i]):
                return 1
        memcpy(self.factor, self.G, d * d * sizeof(double))
        if a == 0.0:
            info = _potrf(RowMajor, Lower, n, self.factor, n)
            if info != 0:
                return self.not_positive(info)
            for i in range(d):
                total += log(self.factor[i * d + i])
            self.hld = total
            return 0
        info = _syev(RowMajor, True, n, self.factor, n, self.lam, self.lapack_work, self.lwork)
        if info != 0:
            return 1
        for i in range(d):
            self.fval[i] = softabs_value(self.lam[i], a)
            self.fprime[i] = softabs_slope(self.lam[i], a)
            total += log(self.fval[i])
        self.hld = 0.5 * total
        # divided differences of f; nearly equal eigenvalues take the slope at their midpoint
        for i in range(d):
            for j in range(d):
                if fabs(self.lam[i] - self.lam[j]) <= 1e-8 * (1.0 + fabs(self.lam[i])):
                    self.jmat[i * d + j] = softabs_slope(0.5 * (self.lam[i] + self.lam[j]), a)
                else:
                    self.jmat[i * d + j] = ((self.fval[i] - self.fval[j])
                                            / (self.lam[i] - self.lam[j]))
        return 0

    cdef int not_positive(self, int minor) noexcept nogil:
        """Record where G was not positive definite; returns 2 (see ``update``)."""
        self.n_indefinite += 1
        self.indefinite_minor = minor
        memcpy(self.indefinite_at, self.q_at, self.dim * sizeof(double))
        return 2

    def indefinite_message(self):
        """Where G was last found not positive definite (None if never), as an error message."""
        if self.n_indefinite == 0:
            return None
        where = np.array2string(np.array(<double[:self.dim]> self.indefinite_at), precision=4,
                                threshold=8)
        what = "diagonal entry" if self.diagonal else "leading minor of order"
        return (f"{self.description} is not positive definite at q = {where} ({what} "
                f"{self.indefinite_minor} is not positive). Pass softabs=alpha (e.g. "
                "softabs=1e2) to map it to a positive definite metric with the SoftAbs "
                "transform.")

    cdef double half_log_det(self) noexcept nogil:
        return self.hld

    cdef void velocity(self, const double* p, double* v) noexcept nogil:
        cdef Py_ssize_t i
        cdef int n = <int> self.dim
        if self.diagonal:
            for i in range(self.dim):
                v[i] = p[i] / self.fval[i]
        elif self.softabs == 0.0:
            memcpy(v, p, self.dim * sizeof(double))
            _trsv(RowMajor, Lower, NoTrans, n, self.factor, n, v, 1)
            _trsv(RowMajor, Lower, Trans, n, self.factor, n, v, 1)
        else:  # v = Q diag(1/f) Q^T p, Q^T = the row-major eigenvector array E
            _gemv(RowMajor, NoTrans, n, n, 1.0, self.factor, n, p, 1, 0.0, self.tmp2, 1)
            for i in range(self.dim):
                self.tmp2[i] /= self.fval[i]
            _gemv(RowMajor, Trans, n, n, 1.0, self.factor, n, self.tmp2, 1, 0.0, v, 1)

    cdef double kinetic_and_velocity(self, const double* p, double* v) noexcept nogil:
        self.velocity(p, v)
        return 0.5 * _dot(<int> self.dim, p, 1, v, 1)

    cdef void draw_momentum(self, bitgen_t* bitgen, double* p) noexcept nogil:
        cdef Py_ssize_t i
        cdef int n = <int> self.dim
        random_standard_normal_fill(bitgen, self.dim, p)
        if self.diagonal:
            for i in range(self.dim):
                p[i] *= sqrt(self.fval[i])
        elif self.softabs == 0.0:
            _trmv(RowMajor, Lower, NoTrans, n, self.factor, n, p, 1)
        else:
            for i in range(self.dim):
                self.tmp2[i] = p[i] * sqrt(self.fval[i])
            _gemv(RowMajor, Trans, n, n, 1.0, self.factor, n, self.tmp2, 1, 0.0, p, 1)

    # ------------------------------------------------------------------------------------------
    # Python entry points (for tests and diagnostics)

    def _point(self, q):
        cdef double[::1] qv = np.ascontiguousarray(q, dtype=np.float64)
        if qv.shape[0] != self.dim:
            raise ValueError(f"q must have shape ({self.dim},)")
        status = self.update(&qv[0], NULL)
        if status == 2:
            raise ValueError(self.indefinite_message())
        if status != 0:
            raise FloatingPointError(f"{self.description} is not defined at this q")
        return qv

    def metric(self, q):
        """G(q) as used (after SoftAbs): ndarray of shape (dim, dim)."""
        self._point(q)
        d = self.dim
        if self.diagonal:
            return np.diag(np.array(<double[:d]> self.fval))
        if self.softabs == 0.0:
            return np.array(<double[:d * d]> self.G).reshape(d, d)
        E = np.array(<double[:d * d]> self.factor).reshape(d, d)
        return (E.T * np.array(<double[:d]> self.fval)) @ E

    def raw_metric(self, q):
        """The metric before SoftAbs: (dim, dim), or (dim,) for a diagonal one."""
        self._point(q)
        cdef Py_ssize_t d = self.dim
        if self.diagonal:
            return np.array(<double[:d]> self.G)
        return np.array(<double[:d * d]> self.G).reshape(d, d)

    def log_det_terms(self, q):
        """(1/2 log det G(q), its gradient)."""
        self._point(q)
        self.update_derivatives()
        return self.hld, np.array(<double[:self.dim]> self.grad_hld)

    def nu_at(self, q, p):
        """nu(q, p): nu_i = r^T dG/dq_i r with r = G(q)^{-1} p."""
        self._point(q)
        self.update_derivatives()
        cdef double[::1] pv = np.ascontiguousarray(p, dtype=np.float64)
        if pv.shape[0] != self.dim:
            raise ValueError(f"p must have shape ({self.dim},)")
        v = np.empty(self.dim)
        out = np.empty(self.dim)
        cdef double[::1] vv = v
        cdef double[::1] ov = out
        self.velocity(&pv[0], &vv[0])
        self.nu(&vv[0], &ov[0])
        return out

    def velocity_at(self, q, p):
        """G(q)^{-1} p."""
        self._point(q)
        cdef double[::1] pv = np.ascontiguousarray(p, dtype=np.float64)
        v = np.empty(self.dim)
        cdef double[::1] vv = v
        self.velocity(&pv[0], &vv[0])
        return v

    def draw_at(self, q, generator, Py_ssize_t n):
        """``n`` momenta drawn from N(0, G(q)) with ``generator``: (n, dim)."""
        self._point(q)
        out = np.empty((n, self.dim))
        cdef double[:, ::1] o = out
        cdef Py_ssize_t i
        bit_generator = generator.bit_generator
        cdef bitgen_t* bitgen = get_bitgen(bit_generator)
        with bit_generator.lock:
            for i in range(n):
                self.draw_momentum(bitgen, &o[i, 0])
        return out


cdef class LinearPredictorMetric(RiemannianMetric):
    """G(q) = A^T diag(kappa(A q + b)) A + diag(prior_precision), or its diagonal.

    Parameters
    ----------
    rows : ndarray of shape (m, dim)
        The linear predictors' coefficients A (kept by reference: not copied).
    curvature : "logistic" or an activation name of the random network
        "logistic": kappa = pi (1 - pi), pi = sigmoid(A q) (the Fisher metric of a logistic
        regression); an activation: kappa_j = weights_j a''(A_j q + offsets_j) (the Hessian of
        a random-network surrogate with output weights ``weights``).
    offsets, weights : None or ndarrays of shape (m,)
    prior_precision : float or ndarray of shape (dim,)
    diagonal : bool
        Keep only the diagonal of G.
    softabs : float
        SoftAbs sharpness alpha; 0 uses G as it is (it must be positive definite).
    description : str
    """
    cdef const double[:, ::1] A
    cdef const double[:, ::1] A2
    cdef const double[::1] offsets
    cdef const double[::1] weights
    cdef const double[::1] prior
    cdef int kind
    cdef bint has_offsets
    cdef Py_ssize_t m
    cdef object _inputs
    cdef double* pre
    cdef double* kappa
    cdef double* kappa1
    cdef double* rowbuf
    cdef double* block
    cdef double* block2
    cdef double* block3

    def __init__(self, rows, str curvature, offsets=None, weights=None, prior_precision=0.0,
                 bint diagonal=False, double softabs=0.0, str description="the metric"):
        A = np.ascontiguousarray(rows, dtype=np.float64)
        if A.ndim != 2 or A.shape[0] < 1:
            raise ValueError("rows must be a non-empty 2-d array")
        super().__init__(A.shape[1], diagonal, softabs, description)
        self.m = A.shape[0]
        kinds = activation_kinds()
        if curvature == "logistic":
            self.kind = LOGISTIC
        elif curvature in kinds and curvature != "exp":
            self.kind = kinds[curvature]
        else:
            raise ValueError(f"unknown curvature {curvature!r}")
        if self.kind != LOGISTIC and weights is None:
            raise ValueError("a network curvature needs the output weights")
        prior = np.broadcast_to(np.asarray(prior_precision, dtype=np.float64), (self.dim,)).copy()
        offsets = None if offsets is None else np.ascontiguousarray(offsets, dtype=np.float64)
        weights = None if weights is None else np.ascontiguousarray(weights, dtype=np.float64)
        for name, a in (("offsets", offsets), ("weights", weights)):
            if a is not None and a.shape != (self.m,):
                raise ValueError(f"{name} must have shape ({self.m},)")
        A2 = A * A if diagonal else np.zeros((1, 1))
        buffers = np.zeros((4, self.m))
        blocks = np.zeros((3, BLOCK_ROWS, self.dim))
        self._inputs = (A, A2, offsets, weights, prior, buffers, blocks)
        self.A, self.A2, self.prior = A, A2, prior
        self.has_offsets = offsets is not None
        if offsets is not None:
            self.offsets = offsets
        if weights is not None:
            self.weights = weights
        cdef double[:, ::1] b = buffers
        cdef double[:, :, ::1] bl = blocks
        self.pre, self.kappa, self.kappa1, self.rowbuf = &b[0, 0], &b[1, 0], &b[2, 0], &b[3, 0]
        self.block, self.block2, self.block3 = &bl[0, 0, 0], &bl[1, 0, 0], &bl[2, 0, 0]

    def __reduce__(self):
        raise TypeError("metrics belong to one chain and are not pickled: build a new one")

    cdef int compute(self, const double* q, double* G) except -1 nogil:
        cdef Py_ssize_t j, k, start, stop, n_pos, n_neg, d = self.dim
        cdef int n = <int> d
        cdef double s, e, x, c
        # predictors and the curvatures kappa, kappa'
        _gemv(RowMajor, NoTrans, <int> self.m, n, 1.0, &self.A[0, 0], n, q, 1, 0.0, self.pre, 1)
        for j in range(self.m):
            x = self.pre[j]
            if self.has_offsets:
                x = x + self.offsets[j]
                self.pre[j] = x
            if self.kind == LOGISTIC:
                e = exp(-fabs(x))
                s = (1.0 if x >= 0.0 else e) / (1.0 + e)
                self.kappa[j] = s * (1.0 - s)
                self.kappa1[j] = self.kappa[j] * (1.0 - 2.0 * s)
            else:
                self.kappa[j] = self.weights[j] * activation_curvature(self.kind, x)
                self.kappa1[j] = self.weights[j] * activation_third(self.kind, x)
        if self.diagonal:
            _gemv(RowMajor, Trans, <int> self.m, n, 1.0, &self.A2[0, 0], n, self.kappa, 1, 0.0,
                  G, 1)
            for k in range(d):
                G[k] += self.prior[k]
            return 0
        # G = A+^T A+ - A-^T A- in blocks: rows with kappa > 0 scaled by sqrt(kappa) into one
        # block, the others by sqrt(-kappa) into another, one symmetric rank-k update each
        memset(G, 0, d * d * sizeof(double))
        for start in range(0, self.m, BLOCK_ROWS):
            stop = min(start + BLOCK_ROWS, self.m)
            n_pos = n_neg = 0
            for j in range(start, stop):
                c = self.kappa[j]
                if c > 0.0:
                    s = sqrt(c)
                    for k in range(d):
                        self.block[n_pos * d + k] = s * self.A[j, k]
                    n_pos += 1
                elif c < 0.0:
                    s = sqrt(-c)
                    for k in range(d):
                        self.block2[n_neg * d + k] = s * self.A[j, k]
                    n_neg += 1
            if n_pos:
                _syrk(RowMajor, Lower, Trans, n, <int> n_pos, 1.0, self.block, n, 1.0, G, n)
            if n_neg:
                _syrk(RowMajor, Lower, Trans, n, <int> n_neg, -1.0, self.block2, n, 1.0, G, n)
        for j in range(d):
            G[j * d + j] += self.prior[j]
            for k in range(j):
                G[k * d + j] = G[j * d + k]
        return 0

    cdef void projected_norms(self, const double* rho) noexcept nogil:
        """rowbuf_j = kappa'_j * h_j with h_j = a_j^T G^{-1} a_j (rho NULL) or, with SoftAbs and
        rho = Q^T r, h_j = (b_j o rho)^T J (b_j o rho) for b_j = Q^T a_j (nu's row terms)."""
        cdef Py_ssize_t j, k, start, stop, rows, d = self.dim
        cdef int n = <int> d
        cdef double total
        for start in range(0, self.m, BLOCK_ROWS):
            stop = min(start + BLOCK_ROWS, self.m)
            rows = stop - start
            if self.softabs == 0.0:
                # B = A_blk L^{-T}: |B_j|^2 = a_j^T G^{-1} a_j
                memcpy(self.block, &self.A[start, 0], rows * d * sizeof(double))
                _trsm(RowMajor, Right, Lower, Trans, <int> rows, n, 1.0, self.factor, n,
                      self.block, n)
                for j in range(rows):
                    self.rowbuf[start + j] = self.kappa1[start + j] * _dot(
                        n, &self.block[j * d], 1, &self.block[j * d], 1)
                continue
            # B = A_blk Q (Q's columns are the rows of the eigenvector array E)
            _gemm(RowMajor, NoTrans, Trans, <int> rows, n, n, 1.0, &self.A[start, 0], n,
                  self.factor, n, 0.0, self.block, n)
            if rho == NULL:
                for j in range(rows):
                    total = 0.0
                    for k in range(d):
                        total = total + self.tmp[k] * self.block[j * d + k] * self.block[j * d + k]
                    self.rowbuf[start + j] = self.kappa1[start + j] * total
            else:
                for j in range(rows):
                    for k in range(d):
                        self.block[j * d + k] *= rho[k]
                _gemm(RowMajor, NoTrans, NoTrans, <int> rows, n, n, 1.0, self.block, n,
                      self.jmat, n, 0.0, self.block2, n)
                for j in range(rows):
                    self.rowbuf[start + j] = self.kappa1[start + j] * _dot(
                        n, &self.block[j * d], 1, &self.block2[j * d], 1)

    cdef int update_derivatives(self) except -1 nogil:
        cdef Py_ssize_t k
        cdef int n = <int> self.dim
        if self.derivatives_current:
            return 0
        self.derivatives_current = True
        self.n_derivative_updates += 1
        if self.diagonal:
            # d g_k / dq_i = sum_j kappa'_j A_ji A_jk^2: grad = 1/2 A^T (kappa' o A2 (f'/f))
            for k in range(self.dim):
                self.tmp[k] = self.fprime[k] / self.fval[k]
            _gemv(RowMajor, NoTrans, <int> self.m, n, 1.0, &self.A2[0, 0], n, self.tmp, 1, 0.0,
                  self.rowbuf, 1)
            for k in range(self.m):
                self.rowbuf[k] *= self.kappa1[k]
        else:
            if self.softabs != 0.0:
                for k in range(self.dim):
                    self.tmp[k] = self.fprime[k] / self.fval[k]
            self.projected_norms(NULL)
        _gemv(RowMajor, Trans, <int> self.m, n, 0.5, &self.A[0, 0], n, self.rowbuf, 1, 0.0,
              self.grad_hld, 1)
        return 0

    cdef int nu(self, const double* v, double* out) except -1 nogil:
        cdef Py_ssize_t j, k
        cdef int n = <int> self.dim
        if self.diagonal:
            for k in range(self.dim):
                self.tmp[k] = self.fprime[k] * v[k] * v[k]
            _gemv(RowMajor, NoTrans, <int> self.m, n, 1.0, &self.A2[0, 0], n, self.tmp, 1, 0.0,
                  self.rowbuf, 1)
            for j in range(self.m):
                self.rowbuf[j] *= self.kappa1[j]
        elif self.softabs == 0.0:
            _gemv(RowMajor, NoTrans, <int> self.m, n, 1.0, &self.A[0, 0], n, v, 1, 0.0,
                  self.rowbuf, 1)
            for j in range(self.m):
                self.rowbuf[j] = self.kappa1[j] * self.rowbuf[j] * self.rowbuf[j]
        else:
            _gemv(RowMajor, NoTrans, n, n, 1.0, self.factor, n, v, 1, 0.0, self.tmp2, 1)  # rho
            self.projected_norms(self.tmp2)
        _gemv(RowMajor, Trans, <int> self.m, n, 1.0, &self.A[0, 0], n, self.rowbuf, 1, 0.0, out, 1)
        return 0


cdef class TensorMetric(RiemannianMetric):
    """A dense metric whose partial derivatives come as d matrices (abstract: subclasses fill
    them in ``compute_derivatives``)."""
    # attributes declared in _riemann.pxd (so that the PDE model's metric can subclass it)

    def __init__(self, Py_ssize_t dim, double softabs=0.0, str description="the metric"):
        super().__init__(dim, False, softabs, description)
        tensors = np.zeros((2, dim, dim, dim))
        squares = np.zeros((2, dim, dim))
        self._tensors = (tensors, squares)
        cdef double[:, :, :, ::1] t = tensors
        cdef double[:, :, ::1] s = squares
        self.dG, self.M = &t[0, 0, 0, 0], &t[1, 0, 0, 0]
        self.Ginv, self.Gtmp = &s[0, 0, 0], &s[1, 0, 0]

    def __reduce__(self):
        raise TypeError("metrics belong to one chain and are not pickled: build a new one")

    cdef int compute_derivatives(self, const double* q, double* G, double* dG) except -1 nogil:
        with gil:
            raise NotImplementedError

    cdef int compute(self, const double* q, double* G) except -1 nogil:
        return self.compute_derivatives(q, G, NULL)

    cdef int update_derivatives(self) except -1 nogil:
        cdef Py_ssize_t i, k, d = self.dim
        cdef int n = <int> d
        if self.derivatives_current:
            return 0
        self.n_derivative_updates += 1
        if self.compute_derivatives(self.q_at, self.Gtmp, self.dG) != 0:
            with gil:
                raise FloatingPointError(f"{self.description}: the derivatives failed where the "
                                         "metric itself was computed")
        if self.softabs == 0.0:
            # G^{-1} = L^{-T} L^{-1}; grad_i = 1/2 <G^{-1}, dG_i>
            memset(self.Ginv, 0, d * d * sizeof(double))
            for i in range(d):
                self.Ginv[i * d + i] = 1.0
            _trsm(RowMajor, Left, Lower, NoTrans, n, n, 1.0, self.factor, n, self.Ginv, n)
            _trsm(RowMajor, Left, Lower, Trans, n, n, 1.0, self.factor, n, self.Ginv, n)
            for i in range(d):
                self.grad_hld[i] = 0.5 * _dot(n * n, self.Ginv, 1, &self.dG[i * d * d], 1)
            self.derivatives_current = True
            return 0
        # M_i = E dG_i E^T (E: eigenvectors as rows); grad_i = 1/2 sum_k f'/f (M_i)_kk
        for i in range(d):
            _gemm(RowMajor, NoTrans, NoTrans, n, n, n, 1.0, self.factor, n, &self.dG[i * d * d],
                  n, 0.0, self.Gtmp, n)
            _gemm(RowMajor, NoTrans, Trans, n, n, n, 1.0, self.Gtmp, n, self.factor, n, 0.0,
                  &self.M[i * d * d], n)
            self.grad_hld[i] = 0.0
            for k in range(d):
                self.grad_hld[i] += 0.5 * self.fprime[k] / self.fval[k] * self.M[i * d * d + k * d + k]
        self.derivatives_current = True
        return 0

    cdef int nu(self, const double* v, double* out) except -1 nogil:
        cdef Py_ssize_t i, k, l, d = self.dim
        cdef int n = <int> d
        if self.softabs == 0.0:
            for i in range(d):
                _symv(RowMajor, Lower, n, 1.0, &self.dG[i * d * d], n, v, 1, 0.0, self.tmp, 1)
                out[i] = _dot(n, v, 1, self.tmp, 1)
            return 0
        _gemv(RowMajor, NoTrans, n, n, 1.0, self.factor, n, v, 1, 0.0, self.tmp2, 1)  # rho
        for k in range(d):
            for l in range(d):
                self.Gtmp[k * d + l] = self.jmat[k * d + l] * self.tmp2[k] * self.tmp2[l]
        for i in range(d):
            out[i] = _dot(n * n, self.Gtmp, 1, &self.M[i * d * d], 1)
        return 0


cdef class CallableMetric(TensorMetric):
    """A user's metric: Python callables for G(q) and its partial derivatives.

    Parameters
    ----------
    dim : int
    metric : callable
        ``metric(q)`` -> ndarray of shape (dim, dim), symmetric.
    metric_derivatives : callable
        ``metric_derivatives(q)`` -> ndarray of shape (dim, dim, dim) whose ``[i]`` is
        dG/dq_i.
    softabs : float
    """
    cdef object _metric
    cdef object _derivatives

    def __init__(self, Py_ssize_t dim, metric, metric_derivatives, double softabs=0.0):
        super().__init__(dim, softabs, "the user's metric")
        if not callable(metric) or not callable(metric_derivatives):
            raise TypeError("metric and metric_derivatives must be callables")
        self._metric = metric
        self._derivatives = metric_derivatives

    cdef int compute_derivatives(self, const double* q, double* G, double* dG) except -1 nogil:
        with gil:
            return self._call(q, G, dG)

    cdef int _call(self, const double* q, double* G, double* dG) except -1:
        cdef Py_ssize_t d = self.dim
        qa = np.array(<const double[:d]> q)
        value = np.asarray(self._metric(qa.copy()), dtype=np.float64)
        if value.shape != (d, d):
            raise ValueError(f"the metric callable returned shape {value.shape}, expected ({d}, {d})")
        if not np.all(np.isfinite(value)):
            return 1
        if not np.allclose(value, value.T, rtol=1e-10, atol=1e-12 * np.abs(value).max()):
            raise ValueError("the metric callable returned a matrix that is not symmetric")
        cdef double[:, ::1] gv = np.ascontiguousarray(0.5 * (value + value.T))
        memcpy(G, &gv[0, 0], d * d * sizeof(double))
        if dG == NULL:
            return 0
        deriv = np.asarray(self._derivatives(qa.copy()), dtype=np.float64)
        if deriv.shape != (d, d, d):
            raise ValueError(f"metric_derivatives returned shape {deriv.shape}, expected "
                             f"({d}, {d}, {d})")
        if not np.all(np.isfinite(deriv)):
            return 1
        cdef double[:, :, ::1] dv = np.ascontiguousarray(0.5 * (deriv + deriv.transpose(0, 2, 1)))
        memcpy(dG, &dv[0, 0, 0], d * d * d * sizeof(double))
        return 0

