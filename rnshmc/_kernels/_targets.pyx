"""The C-level target interface and the wrapper around Python callables."""
from libc.math cimport fabs

import numpy as np


cdef class CTarget:
    """Base class of every target whose potential can be evaluated from C.

    Subclasses implement ``potential`` and ``potential_and_gradient`` as ``nogil`` C methods on
    raw pointers to ``dim`` doubles, using only the caller's ``scratch`` (``scratch_size``
    doubles) for intermediate results: a target is immutable once built, so it is safe to
    share between threads. The ``def`` methods below are the Python entry points (validation,
    a fresh scratch buffer per call), used by the model front ends and the tests.
    """

    def __init__(self, Py_ssize_t dim, Py_ssize_t scratch_size=0):
        if dim < 1:
            raise ValueError(f"dim must be a positive integer, got {dim}")
        self.dim = dim
        # after the subclass's own scratch, the fallbacks' room: a gradient for the potential,
        # a shifted point and a gradient for the Hessian-vector product
        self.scratch_size = scratch_size + 2 * dim

    cdef int potential(self, const double* q, double* U, double* scratch) except -1 nogil:
        # Fallback for targets without a cheaper density-only path.
        return self.potential_and_gradient(q, U, scratch + self.scratch_size - 2 * self.dim,
                                           scratch)

    cdef int hessian_vector(self, const double* q, const double* u, double* out,
                            double* scratch) except -1 nogil:
        # Fallback: central differences of the gradient along u, step 1e-5 (1 + max|q|) /
        # max|u| (relative error about 1e-10 for a smooth U; two gradient evaluations)
        cdef Py_ssize_t i
        cdef double q_max = 0.0, u_max = 0.0, h
        cdef double* shifted = scratch + self.scratch_size - 2 * self.dim
        cdef double* plus = shifted + self.dim
        for i in range(self.dim):
            q_max = max(q_max, fabs(q[i]))
            u_max = max(u_max, fabs(u[i]))
        if u_max == 0.0:
            for i in range(self.dim):
                out[i] = 0.0
            return 0
        h = 1e-5 * (1.0 + q_max) / u_max
        for i in range(self.dim):
            shifted[i] = q[i] + h * u[i]
        self.gradient(shifted, plus, scratch)
        for i in range(self.dim):
            shifted[i] = q[i] - h * u[i]
        self.gradient(shifted, out, scratch)
        for i in range(self.dim):
            out[i] = (plus[i] - out[i]) / (2.0 * h)
        return 0

    cdef int potential_and_gradient(self, const double* q, double* U, double* grad,
                                    double* scratch) except -1 nogil:
        with gil:
            raise NotImplementedError(f"{type(self).__name__} does not implement a gradient")

    cdef int gradient(self, const double* q, double* grad, double* scratch) except -1 nogil:
        # Fallback for targets whose gradient costs as much as potential and gradient together.
        cdef double U
        return self.potential_and_gradient(q, &U, grad, scratch)

    def new_scratch(self):
        """A scratch buffer for one caller (ndarray of ``scratch_size`` doubles, at least 1)."""
        return np.empty(max(self.scratch_size, 1))

    def time_evaluations(self, q, Py_ssize_t repeats, str what="potential_and_gradient"):
        """Seconds per evaluation at ``q``, timed over ``repeats`` calls from C (for
        benchmarks). ``what``: "potential_and_gradient", "gradient" or "potential"."""
        from time import perf_counter
        cdef int kind = {"potential_and_gradient": 0, "gradient": 1, "potential": 2}[what]
        cdef double[::1] qv = self._checked_point(q)
        cdef double[::1] g = np.empty(self.dim)
        cdef double[::1] scratch = self.new_scratch()
        cdef double U
        cdef Py_ssize_t i
        start = perf_counter()
        with nogil:
            for i in range(repeats):
                if kind == 0:
                    self.potential_and_gradient(&qv[0], &U, &g[0], &scratch[0])
                elif kind == 1:
                    self.gradient(&qv[0], &g[0], &scratch[0])
                else:
                    self.potential(&qv[0], &U, &scratch[0])
        return (perf_counter() - start) / max(repeats, 1)

    def _checked_point(self, q):
        q = np.ascontiguousarray(q, dtype=np.float64)
        if q.shape != (self.dim,):
            raise ValueError(f"q must have shape ({self.dim},), got {q.shape}")
        return q

    def eval_potential(self, q):
        """U(q) = -log density at ``q`` (ndarray of shape (dim,))."""
        cdef double[::1] qv = self._checked_point(q)
        cdef double[::1] scratch = self.new_scratch()
        cdef double U = 0.0
        with nogil:
            self.potential(&qv[0], &U, &scratch[0])
        return U

    def eval_gradient(self, q):
        """grad U(q) at ``q`` (ndarray of shape (dim,)), through the gradient-only path."""
        cdef double[::1] qv = self._checked_point(q)
        grad = np.empty(self.dim)
        cdef double[::1] g = grad
        cdef double[::1] scratch = self.new_scratch()
        with nogil:
            self.gradient(&qv[0], &g[0], &scratch[0])
        return grad

    def eval_hessian_vector(self, q, u):
        """(Hessian of U at ``q``) times ``u`` (ndarrays of shape (dim,)): exact for the targets
        that implement it, else central differences of the gradient."""
        cdef double[::1] qv = self._checked_point(q)
        cdef double[::1] uv = self._checked_point(u)
        out = np.empty(self.dim)
        cdef double[::1] o = out
        cdef double[::1] scratch = self.new_scratch()
        with nogil:
            self.hessian_vector(&qv[0], &uv[0], &o[0], &scratch[0])
        return out

    def eval_potential_and_gradient(self, q):
        """(U(q), grad U(q)) at ``q`` (ndarray of shape (dim,))."""
        cdef double[::1] qv = self._checked_point(q)
        grad = np.empty(self.dim)
        cdef double[::1] g = grad
        cdef double[::1] scratch = self.new_scratch()
        cdef double U = 0.0
        with nogil:
            self.potential_and_gradient(&qv[0], &U, &g[0], &scratch[0])
        return U, grad


cdef class PyCallableTarget(CTarget):
    """A target defined by Python callables in the log-density convention.

    Parameters
    ----------
    dim : int
    logp : callable or None
        ``logp(q) -> float``. If None, the potential is taken from ``logp_and_grad``.
    logp_and_grad : callable or None
        ``logp_and_grad(q) -> (float, ndarray of shape (dim,))``. If None, gradients raise.
    """

    def __init__(self, Py_ssize_t dim, logp=None, logp_and_grad=None):
        super().__init__(dim)
        if logp is None and logp_and_grad is None:
            raise ValueError("need logp or logp_and_grad")
        self._logp = logp
        self._logp_and_grad = logp_and_grad

    @property
    def has_gradient(self):
        return self._logp_and_grad is not None

    def __reduce__(self):
        # picklable when the callables are (for process pools)
        return (PyCallableTarget, (self.dim, self._logp, self._logp_and_grad))

    cdef int potential(self, const double* q, double* U, double* scratch) except -1 nogil:
        with gil:
            qa = np.array(<double[:self.dim]> q)  # a fresh array: the callable may keep it
            if self._logp is not None:
                U[0] = -float(self._logp(qa))
            else:
                U[0] = -float(self._logp_and_grad(qa)[0])
        return 0

    cdef int potential_and_gradient(self, const double* q, double* U, double* grad,
                                    double* scratch) except -1 nogil:
        cdef Py_ssize_t i
        cdef double[::1] g
        with gil:
            if self._logp_and_grad is None:
                raise TypeError("this target has no gradient: give grad_logp or logp_and_grad")
            qa = np.array(<double[:self.dim]> q)
            value, gradient = self._logp_and_grad(qa)
            gradient = np.asarray(gradient, dtype=np.float64)
            if gradient.shape != (self.dim,):
                raise ValueError(
                    f"the gradient callable returned shape {gradient.shape}, expected ({self.dim},)")
            g = np.ascontiguousarray(gradient)
            U[0] = -float(value)
            for i in range(self.dim):
                grad[i] = -g[i]
        return 0


cdef class PotentialOnly(CTarget):
    """A target's potential without its gradient (asking for one raises): a model seen as a
    gradient-free one, e.g. to check that a sampler never asks for a gradient."""
    cdef readonly CTarget inner

    def __init__(self, CTarget inner):
        super().__init__(inner.dim, inner.scratch_size)
        self.inner = inner

    def __reduce__(self):
        return (PotentialOnly, (self.inner,))

    cdef int potential(self, const double* q, double* U, double* scratch) except -1 nogil:
        return self.inner.potential(q, U, scratch)
