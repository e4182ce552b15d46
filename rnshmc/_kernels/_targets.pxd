# The one target interface. Potential convention: U(q) = -log density.
# Methods return 0 on success and -1 with a Python exception set (a Python callable raised),
# so C-level targets run entirely without the GIL while exceptions from user callables still
# propagate with their traceback. Non-finite values are *not* errors here: samplers treat them
# as divergences (or as a ValueError at the initial point).
#
# A target holds no mutable state: every method writes its intermediate results into
# ``scratch``, ``scratch_size`` doubles owned by the caller (a chain, or one Python-level call).
# So one model or surrogate can serve any number of threads at once.

cdef class CTarget:
    cdef readonly Py_ssize_t dim
    cdef readonly Py_ssize_t scratch_size
    cdef int potential(self, const double* q, double* U, double* scratch) except -1 nogil
    cdef int potential_and_gradient(self, const double* q, double* U, double* grad,
                                    double* scratch) except -1 nogil
    # gradient alone: inside a trajectory only the last step needs the potential
    cdef int gradient(self, const double* q, double* grad, double* scratch) except -1 nogil
    # out = (Hessian of U at q) u: L2HMC's training differentiates through grad U
    cdef int hessian_vector(self, const double* q, const double* u, double* out,
                            double* scratch) except -1 nogil


cdef class PyCallableTarget(CTarget):
    cdef object _logp
    cdef object _logp_and_grad
