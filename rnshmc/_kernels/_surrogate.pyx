"""The random-network surrogate as a C-level target, the hidden layer used by its fit, and the
tail guard that keeps any surrogate's potential rising beyond its training data.

z(q) = sum_i v_i a(pre_i(x)) + offset, x = q (or A (q - mean) for whitened RBF networks), with
  additive nodes:  pre = W x + bias,                     grad_x pre_i = W_i
  RBF nodes:       pre_i = -gamma_i |x - c_i|^2 / 2
                         = (W x)_i + bias_i - gamma_i |x|^2 / 2,  W_i = gamma_i c_i,
                                                                  bias_i = -gamma_i |c_i|^2 / 2,
                   grad_x pre_i = W_i - gamma_i x,  and a = exp.
So grad_x z = W^T coef - (gamma . coef) x with coef = v * a'(pre): two matrix-vector products
and one pass over the hidden units, into the caller's scratch. Additive networks fold any input
whitening into W and bias (the Python front end does this), so they never transform inputs.
"""
import numpy as np

from ._activations cimport activation_kinds, activation_table, weighted_slopes, weighted_values
from libc.math cimport sqrt
from libc.string cimport memcpy

from ._blas cimport RowMajor, Lower, NoTrans, Trans, _gemv, _gemm, _trmv, _trsv, _dot, _axpy
from ._targets cimport CTarget

ACTIVATIONS = activation_kinds()


def hidden_layer(str activation, const double[:, ::1] X, const double[:, ::1] W,
                 const double[::1] bias, gamma=None, bint slopes=False, bint curvatures=False):
    """Pre-activations of N inputs and their activation values (and first/second derivatives).

    Parameters
    ----------
    activation : {"softplus", "sigmoid", "tanh", "exp"}
    X : ndarray of shape (N, d)
    W, bias : the layer, shapes (s, d) and (s,)
    gamma : None or ndarray of shape (s,)
        RBF precisions: subtract gamma_i |x_j|^2 / 2 from pre-activation (j, i).
    slopes, curvatures : bool
        Also return a'(pre) and a''(pre).

    Returns
    -------
    tuple of ndarrays of shape (N, s): values, then slopes and curvatures if asked.
    """
    cdef int kind = ACTIVATIONS[activation]
    cdef Py_ssize_t n = X.shape[0], s = W.shape[0], d = X.shape[1], j, i
    if W.shape[1] != d or bias.shape[0] != s:
        raise ValueError("inconsistent layer shapes")
    pre = np.empty((n, s))
    cdef double[:, ::1] P = pre
    cdef const double[::1] g
    cdef double half_sq
    for j in range(n):
        P[j, :] = bias
    if n > 0:
        _gemm(RowMajor, NoTrans, Trans, <int> n, <int> s, <int> d, 1.0, &X[0, 0], <int> d,
              &W[0, 0], <int> d, 1.0, &P[0, 0], <int> s)
    if gamma is not None:
        g = gamma
        for j in range(n):
            half_sq = 0.5 * _dot(<int> d, &X[j, 0], 1, &X[j, 0], 1)
            for i in range(s):
                P[j, i] -= g[i] * half_sq
    return activations(activation, pre, slopes, curvatures)


def activations(str activation, pre, bint slopes=False, bint curvatures=False):
    """a(pre), and a'(pre) and a''(pre) if asked, elementwise: a tuple of arrays shaped as pre."""
    cdef int kind = ACTIVATIONS[activation]
    pre = np.ascontiguousarray(pre, dtype=np.float64)
    cdef const double[::1] p = pre.reshape(-1)
    cdef Py_ssize_t n = p.shape[0]
    out = [np.empty(pre.shape) for _ in range(1 + slopes + curvatures)]
    cdef double[::1] values = out[0].reshape(-1)
    cdef double[::1] view
    cdef double* first = NULL
    cdef double* second = NULL
    if n == 0:
        return tuple(out)
    if slopes:
        view = out[1].reshape(-1)
        first = &view[0]
    if curvatures:
        view = out[len(out) - 1].reshape(-1)
        second = &view[0]
    with nogil:
        activation_table(kind, &p[0], n, &values[0], first, second)
    return tuple(out)


cdef class NetworkTarget(CTarget):
    """A fitted random network as a C-level target (internal; see RandomNetworkSurrogate).

    Parameters
    ----------
    activation : {"softplus", "sigmoid", "tanh", "exp"}
    weights : ndarray of shape (n_hidden, dim_x)
        Input weights W (additive) or gamma_i c_i (RBF), acting on x.
    bias : ndarray of shape (n_hidden,)
    output_weights : ndarray of shape (n_hidden,)
    offset : float
        Constant c added to the network output (fitted, unpenalised: docs/algorithms.md
        section 3).
    gamma : None or ndarray of shape (n_hidden,)
        RBF precisions 1 / width^2; None for additive nodes.
    input_transform, input_mean : None or ndarrays of shapes (dim, dim) lower-triangular and
        (dim,): x = input_transform @ (q - input_mean) (whitened RBF networks only).
    """
    cdef readonly str activation
    cdef int kind
    cdef readonly Py_ssize_t n_hidden
    cdef const double[:, ::1] W
    cdef const double[::1] bias
    cdef const double[::1] v
    cdef readonly double offset
    cdef bint rbf
    cdef const double[::1] gamma
    cdef bint transformed
    cdef const double[:, ::1] A
    cdef const double[::1] mean
    cdef object _arrays
    # scratch layout: [pre (n_hidden) | coef (n_hidden) | x (dim) | grad_x (dim)]

    def __init__(self, str activation, weights, bias, output_weights, double offset,
                 gamma=None, input_transform=None, input_mean=None):
        arrays = [np.ascontiguousarray(a, dtype=np.float64) if a is not None else None
                  for a in (weights, bias, output_weights, gamma, input_transform, input_mean)]
        arrays[2] = arrays[2].copy()  # owned: set_output_weights writes into it
        weights, bias, output_weights, gamma, input_transform, input_mean = arrays
        super().__init__(weights.shape[1], 2 * weights.shape[0] + 2 * weights.shape[1])
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}")
        self.activation = activation
        self.kind = ACTIVATIONS[activation]
        self.n_hidden = weights.shape[0]
        if bias.shape != (self.n_hidden,) or output_weights.shape != (self.n_hidden,):
            raise ValueError("inconsistent network shapes")
        self._arrays = arrays  # keeps the read-only views' owners alive; pickling
        self.W, self.bias, self.v, self.offset = weights, bias, output_weights, offset
        self.rbf = gamma is not None
        if self.rbf:
            self.gamma = gamma
        self.transformed = input_transform is not None
        if self.transformed:
            if input_transform.shape != (self.dim, self.dim) or input_mean.shape != (self.dim,):
                raise ValueError("inconsistent input transform shapes")
            self.A, self.mean = input_transform, input_mean

    def set_output_weights(self, weights, offset=None):
        """Replace the output weights v (and the constant ``offset``, if given) in place
        (ARNS-HMC's installs; a chain using this target must not be running meanwhile)."""
        v = np.asarray(weights, dtype=np.float64)
        if v.shape != (self.n_hidden,) or not np.all(np.isfinite(v)):
            raise ValueError(f"output weights must be {self.n_hidden} finite numbers")
        if offset is not None and not np.isfinite(offset):
            raise ValueError(f"the offset must be finite, got {offset!r}")
        self._arrays[2][...] = v
        if offset is not None:
            self.offset = offset

    def __reduce__(self):
        weights, bias, output_weights, gamma, input_transform, input_mean = self._arrays
        return (NetworkTarget, (self.activation, weights, bias, output_weights, self.offset,
                                gamma, input_transform, input_mean))

    # ------------------------------------------------------------------------------------------

    cdef const double* inputs(self, const double* q, double* scratch) noexcept nogil:
        """x for q: q itself, or A (q - mean) in scratch."""
        cdef Py_ssize_t k
        cdef double* x = scratch + 2 * self.n_hidden
        if not self.transformed:
            return q
        for k in range(self.dim):
            x[k] = q[k] - self.mean[k]
        _trmv(RowMajor, Lower, NoTrans, <int> self.dim, &self.A[0, 0], <int> self.dim, x, 1)
        return x

    cdef double* pre_activations(self, const double* x, double* scratch) noexcept nogil:
        """The pre-activations, into the head of scratch (returned)."""
        cdef Py_ssize_t i
        cdef int s = <int> self.n_hidden, d = <int> self.dim
        cdef double half_sq
        cdef double* pre = scratch
        _gemv(RowMajor, NoTrans, s, d, 1.0, &self.W[0, 0], d, x, 1, 0.0, pre, 1)
        if self.rbf:
            half_sq = 0.5 * _dot(d, x, 1, x, 1)
            for i in range(self.n_hidden):
                pre[i] += self.bias[i] - self.gamma[i] * half_sq
        else:
            for i in range(self.n_hidden):
                pre[i] += self.bias[i]
        return pre

    cdef void gradient_at(self, const double* x, double* grad, double* scratch) noexcept nogil:
        """grad = dz/dq from the pre-activations in scratch (through coef = v * a'(pre))."""
        cdef int s = <int> self.n_hidden, d = <int> self.dim
        cdef Py_ssize_t k
        cdef double* coef = scratch + self.n_hidden
        cdef double* out = scratch + 2 * self.n_hidden + self.dim if self.transformed else grad
        weighted_slopes(self.kind, scratch, &self.v[0], self.n_hidden, coef)
        _gemv(RowMajor, Trans, s, d, 1.0, &self.W[0, 0], d, coef, 1, 0.0, out, 1)
        if self.rbf:
            _axpy(d, -_dot(s, &self.gamma[0], 1, coef, 1), x, 1, out, 1)
        if self.transformed:  # dz/dq = A^T dz/dx
            _trmv(RowMajor, Lower, Trans, d, &self.A[0, 0], d, out, 1)
            for k in range(self.dim):
                grad[k] = out[k]

    cdef int potential(self, const double* q, double* U, double* scratch) except -1 nogil:
        cdef double* pre = self.pre_activations(self.inputs(q, scratch), scratch)
        U[0] = weighted_values(self.kind, pre, &self.v[0], self.n_hidden) + self.offset
        return 0

    cdef int gradient(self, const double* q, double* grad, double* scratch) except -1 nogil:
        cdef const double* x = self.inputs(q, scratch)
        self.pre_activations(x, scratch)
        self.gradient_at(x, grad, scratch)
        return 0

    cdef int potential_and_gradient(self, const double* q, double* U, double* grad,
                                    double* scratch) except -1 nogil:
        cdef const double* x = self.inputs(q, scratch)
        cdef double* pre = self.pre_activations(x, scratch)
        U[0] = weighted_values(self.kind, pre, &self.v[0], self.n_hidden) + self.offset
        self.gradient_at(x, grad, scratch)
        return 0

    cdef int hessian_vector(self, const double* q, const double* u, double* out,
                            double* scratch) except -1 nogil:
        # H_x u = sum_i v_i a''_i r_i (r_i . u) - (sum_i v_i a'_i gamma_i) u, r_i = grad_x pre_i
        # (the second term for RBF nodes only); dz/dq: H_q u = A^T H_x (A u) when transformed
        cdef int s = <int> self.n_hidden, d = <int> self.dim
        cdef Py_ssize_t i
        cdef const double* x = self.inputs(q, scratch)
        cdef double* pre = self.pre_activations(x, scratch)
        cdef double* coef = scratch + self.n_hidden
        cdef double* ux = scratch + 2 * self.n_hidden + self.dim
        cdef double slope, curvature, xu = 0.0, slope_sum = 0.0, gamma_coef = 0.0
        for i in range(self.dim):
            ux[i] = u[i]
        if self.transformed:
            _trmv(RowMajor, Lower, NoTrans, d, &self.A[0, 0], d, ux, 1)
        _gemv(RowMajor, NoTrans, s, d, 1.0, &self.W[0, 0], d, ux, 1, 0.0, coef, 1)
        if self.rbf:
            xu = _dot(d, x, 1, ux, 1)
        for i in range(self.n_hidden):
            activation_table(self.kind, pre + i, 1, NULL, &slope, &curvature)
            if self.rbf:
                coef[i] -= self.gamma[i] * xu
                slope_sum += self.v[i] * slope * self.gamma[i]
            coef[i] *= self.v[i] * curvature
        _gemv(RowMajor, Trans, s, d, 1.0, &self.W[0, 0], d, coef, 1, 0.0, out, 1)
        if self.rbf:
            gamma_coef = _dot(s, &self.gamma[0], 1, coef, 1)
            _axpy(d, -gamma_coef, x, 1, out, 1)
            _axpy(d, -slope_sum, ux, 1, out, 1)
        if self.transformed:
            _trmv(RowMajor, Lower, Trans, d, &self.A[0, 0], d, out, 1)
        return 0

    # ------------------------------------------------------------------------------------------
    # Python entry points (batch prediction and the Hessian; validation is the front end's)

    def predict(self, const double[:, ::1] Q):
        """z at each row of Q (ndarray of shape (N, dim)) -> ndarray of shape (N,)."""
        out = np.empty(Q.shape[0])
        cdef double[::1] o = out
        cdef double[::1] scratch = self.new_scratch()
        cdef Py_ssize_t j
        with nogil:
            for j in range(Q.shape[0]):
                self.potential(&Q[j, 0], &o[j], &scratch[0])
        return out

    def time_matvecs(self, Py_ssize_t repeats):
        """Seconds per pair of the gradient's two BLAS matrix-vector products (W x and W^T c),
        timed from C over ``repeats`` calls: the floor a gradient evaluation is compared with."""
        from time import perf_counter
        cdef int s = <int> self.n_hidden, d = <int> self.dim
        cdef Py_ssize_t i
        x = np.ones(self.dim)
        cdef double[::1] xv = x
        cdef double[::1] pre = np.empty(self.n_hidden)
        start = perf_counter()
        with nogil:
            for i in range(repeats):
                _gemv(RowMajor, NoTrans, s, d, 1.0, &self.W[0, 0], d, &xv[0], 1, 0.0,
                      &pre[0], 1)
                _gemv(RowMajor, Trans, s, d, 1.0, &self.W[0, 0], d, &pre[0], 1, 0.0,
                      &xv[0], 1)
                xv[0] = 1.0
        return (perf_counter() - start) / max(repeats, 1)

    def hessian(self, q):
        """The Hessian of z at q: ndarray of shape (dim, dim)."""
        cdef double[::1] qv = self._checked_point(q)
        scratch_array = self.new_scratch()
        cdef double[::1] scratch = scratch_array
        cdef const double* x = self.inputs(&qv[0], &scratch[0])
        self.pre_activations(x, &scratch[0])
        pre = scratch_array[:self.n_hidden].copy()
        xa = np.array(<const double[:self.dim]> x)
        _, slopes, curvatures = activations(self.activation, pre, slopes=True, curvatures=True)
        W = np.asarray(self._arrays[0])
        v = np.asarray(self._arrays[2])
        if self.rbf:
            gamma = np.asarray(self._arrays[3])
            rows = W - np.outer(gamma, xa)            # grad_x pre_i
            H = (rows.T * (v * curvatures)) @ rows
            H -= np.eye(self.dim) * np.dot(v * slopes, gamma)
        else:
            H = (W.T * (v * curvatures)) @ W
        if self.transformed:
            A = np.asarray(self._arrays[4])
            H = A.T @ H @ A
        return 0.5 * (H + H.T)


cdef class TailGuard(CTarget):
    """A surrogate's potential with a guard in its tails (internal; see
    ``docs/algorithms.md`` section 14):

        U_g(q) = U(q) + stiffness / 2 * max(0, r(q) - radius)^2,  r(q) = |L^{-1} (q - mean)|,

    with ``mean`` and the lower Cholesky factor ``L`` of the training inputs' covariance and
    ``radius`` the largest r of a training input: equal to the surrogate where it was fitted,
    and rising at least as a Gaussian of unit scale (in whitened units) beyond, where a fitted
    network can fall off. grad U_g = grad U + stiffness (r - radius) / r L^{-T} z, z =
    L^{-1} (q - mean). The inner target is held by reference (an online install reaches it).

    Parameters
    ----------
    inner : CTarget
    mean : ndarray of shape (dim,)
    factor : ndarray of shape (dim, dim)
        Lower triangular, positive diagonal.
    radius : float
    stiffness : float
    """
    cdef readonly CTarget inner
    cdef const double[::1] mean
    cdef const double[:, ::1] factor
    cdef readonly double radius
    cdef readonly double stiffness
    cdef object _arrays
    # scratch layout: [the inner target's | z (dim) | w (dim)]

    def __init__(self, CTarget inner, mean, factor, double radius, double stiffness=1.0):
        mean = np.ascontiguousarray(mean, dtype=np.float64)
        factor = np.ascontiguousarray(factor, dtype=np.float64)
        d = inner.dim
        if mean.shape != (d,) or factor.shape != (d, d):
            raise ValueError(f"the guard's mean and factor must have shapes ({d},) and ({d}, {d})")
        if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(factor))
                and np.all(np.diag(factor) > 0) and not np.any(np.triu(factor, 1))):
            raise ValueError("the guard's factor must be finite and lower triangular with a "
                             "positive diagonal, its mean finite")
        if not (radius >= 0 and stiffness > 0 and np.isfinite(radius) and np.isfinite(stiffness)):
            raise ValueError(f"the guard needs a finite radius >= 0 and stiffness > 0, got "
                             f"{radius!r} and {stiffness!r}")
        super().__init__(d, inner.scratch_size + 2 * d)
        self.inner, self.radius, self.stiffness = inner, radius, stiffness
        self._arrays = (mean, factor)
        self.mean, self.factor = mean, factor

    def __reduce__(self):
        return (TailGuard, (self.inner, self._arrays[0], self._arrays[1], self.radius,
                            self.stiffness))

    cdef double excess(self, const double* q, double* scratch) noexcept nogil:
        """r(q) - radius (z = L^{-1} (q - mean) left in the scratch; r in its last slot)."""
        cdef Py_ssize_t k
        cdef int d = <int> self.dim
        cdef double* z = scratch + self.inner.scratch_size
        for k in range(d):
            z[k] = q[k] - self.mean[k]
        _trsv(RowMajor, Lower, NoTrans, d, &self.factor[0, 0], d, z, 1)
        return sqrt(_dot(d, z, 1, z, 1)) - self.radius

    cdef void add_gradient(self, double excess, double* grad, double* scratch) noexcept nogil:
        """grad += stiffness excess / r L^{-T} z, for excess = r - radius > 0."""
        cdef int d = <int> self.dim
        cdef double* z = scratch + self.inner.scratch_size
        cdef double* w = z + d
        memcpy(w, z, d * sizeof(double))
        _trsv(RowMajor, Lower, Trans, d, &self.factor[0, 0], d, w, 1)
        _axpy(d, self.stiffness * excess / (excess + self.radius), w, 1, grad, 1)

    cdef int potential(self, const double* q, double* U, double* scratch) except -1 nogil:
        cdef double excess = self.excess(q, scratch)
        self.inner.potential(q, U, scratch)
        if excess > 0.0:
            U[0] += 0.5 * self.stiffness * excess * excess
        return 0

    cdef int gradient(self, const double* q, double* grad, double* scratch) except -1 nogil:
        cdef double excess = self.excess(q, scratch)
        self.inner.gradient(q, grad, scratch)
        if excess > 0.0:
            self.add_gradient(excess, grad, scratch)
        return 0

    cdef int potential_and_gradient(self, const double* q, double* U, double* grad,
                                    double* scratch) except -1 nogil:
        cdef double excess = self.excess(q, scratch)
        self.inner.potential_and_gradient(q, U, grad, scratch)
        if excess > 0.0:
            U[0] += 0.5 * self.stiffness * excess * excess
            self.add_gradient(excess, grad, scratch)
        return 0
