# The one target interface. Potential convention: U(q) = -log density.
# Methods return 0 on success and -1 with a Python exception set (a Python callable raised),
# so C-level targets run entirely without the GIL while exceptions from user callables still
# propagate with their traceback. Non-finite values are *not* errors here: samplers treat them
# as divergences (or as a ValueError at the initial point).

cdef class CTarget:
    cdef readonly Py_ssize_t dim
    cdef int potential(self, const double* q, double* U) except -1 nogil
    cdef int potential_and_gradient(self, const double* q, double* U, double* grad) except -1 nogil
    # gradient alone: inside a trajectory only the last step needs the potential
    cdef int gradient(self, const double* q, double* grad) except -1 nogil


cdef class PyCallableTarget(CTarget):
    cdef object _logp
    cdef object _logp_and_grad
