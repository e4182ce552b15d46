"""LAPACK wrappers over scipy.linalg.cython_lapack, with test twins (``_*_memview``).

The ``cdef`` wrappers are what kernels call; the ``cpdef`` twins exist only so the tests can
check each wrapper against SciPy.
"""
from scipy.linalg.cython_lapack cimport dpbtrf, dpbtrs

from ._blas cimport Upper, Lower


cdef int _pbtrf(BLAS_Uplo uplo, int n, int kd, double* ab, int ldab) noexcept nogil:
    """Cholesky factorisation of a symmetric positive definite band matrix, in place.

    ``ab`` holds the triangle ``uplo`` in LAPACK band storage: A[i, j] at
    ab[kd + i - j + j * ldab] (Upper, i <= j) or ab[i - j + j * ldab] (Lower, i >= j).
    Returns 0, or k > 0 if the leading minor of order k is not positive definite.
    """
    cdef char uplo_ = uplo
    cdef int info = 0
    dpbtrf(&uplo_, &n, &kd, ab, &ldab, &info)
    return info


cdef int _pbtrs(BLAS_Uplo uplo, int n, int kd, int nrhs, const double* ab, int ldab, double* b,
                int ldb) noexcept nogil:
    """Solve A X = B in place in ``b`` with the factor from ``_pbtrf``."""
    cdef char uplo_ = uplo
    cdef int info = 0
    dpbtrs(&uplo_, &n, &kd, &nrhs, <double*> ab, &ldab, b, &ldb, &info)
    return info


cpdef int _pbtrf_memview(bint lower, double[::1, :] ab):
    """Test twin: factor the band array ``ab`` of shape (kd + 1, n) (Fortran order) in place."""
    return _pbtrf(Lower if lower else Upper, <int> ab.shape[1], <int> ab.shape[0] - 1, &ab[0, 0],
                  <int> ab.shape[0])


cpdef int _pbtrs_memview(bint lower, const double[::1, :] ab, double[::1, :] b):
    """Test twin: solve in place in ``b`` of shape (n, nrhs) (Fortran order)."""
    return _pbtrs(Lower if lower else Upper, <int> ab.shape[1], <int> ab.shape[0] - 1,
                  <int> b.shape[1], &ab[0, 0], <int> ab.shape[0], &b[0, 0], <int> b.shape[0])
