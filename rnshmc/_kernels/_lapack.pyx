"""LAPACK wrappers over scipy.linalg.cython_lapack, with test twins (``_*_memview``).

The ``cdef`` wrappers are what kernels call; the ``cpdef`` twins exist only so the tests can
check each wrapper against SciPy.
"""
import numpy as np

from scipy.linalg.cython_lapack cimport dgetrf, dgetrs, dpbtrf, dpbtrs, dpotrf, dsyev

from ._blas cimport RowMajor, ColMajor, Upper, Lower


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


cdef int _potrf(BLAS_Order order, BLAS_Uplo uplo, int n, double* a, int lda) noexcept nogil:
    """Cholesky factor of a symmetric positive definite matrix, in place in the triangle
    ``uplo`` (A = L L^T for Lower). Returns 0, or k > 0 if the leading minor of order k is not
    positive definite."""
    cdef char uplo_ = uplo
    cdef int info = 0
    if order == RowMajor:  # the row-major lower triangle is the column-major upper one
        uplo_ = Upper if uplo == Lower else Lower
    dpotrf(&uplo_, &n, a, &lda, &info)
    return info


cdef int _syev(BLAS_Order order, bint vectors, int n, double* a, int lda, double* w, double* work,
               int lwork) noexcept nogil:
    """Eigenvalues of a symmetric matrix (either triangle suffices: it is symmetric) in w,
    ascending; with ``vectors`` the eigenvectors overwrite ``a``: row k of a row-major array,
    column k of a column-major one, belongs to w[k]. Returns LAPACK's info."""
    cdef char jobz = b'v' if vectors else b'n'
    cdef char uplo = b'l'
    cdef int info = 0
    dsyev(&jobz, &uplo, &n, a, &lda, w, work, &lwork, &info)
    return info


cdef int _gesv(BLAS_Order order, int n, double* a, int lda, int* ipiv, double* b) noexcept nogil:
    """Solve A x = b for a general square A by LU with partial pivoting: x overwrites ``b``,
    the LU factors ``a``. Returns 0, or k > 0 if U[k-1, k-1] is exactly zero (A singular)."""
    cdef char trans = b'N'
    cdef int info = 0, one = 1
    if order == RowMajor:  # the row-major A is the column-major A^T: solve with its transpose
        trans = b'T'
    dgetrf(&n, &n, a, &lda, ipiv, &info)
    if info != 0:
        return info
    dgetrs(&trans, &n, &one, a, &lda, ipiv, b, &n, &info)
    return info


cpdef int _gesv_memview(double[:, ::1] a, double[::1] b):
    """Test twin: solve row-major ``a`` x = b in place in b."""
    cdef int n = <int> a.shape[0]
    cdef int[::1] ipiv = np.zeros(n, dtype=np.intc)
    return _gesv(RowMajor, n, &a[0, 0], n, &ipiv[0], &b[0])


cpdef int _potrf_memview(double[:, ::1] a):
    """Test twin: the lower Cholesky factor of row-major ``a`` in its lower triangle."""
    return _potrf(RowMajor, Lower, <int> a.shape[0], &a[0, 0], <int> a.shape[0])


cpdef int _syev_memview(double[:, ::1] a, double[::1] w):
    """Test twin: eigenvalues into w, eigenvectors into the rows of row-major ``a``."""
    cdef int n = <int> a.shape[0]
    cdef double[::1] work = np.empty(max(1, 66 * n))
    return _syev(RowMajor, True, n, &a[0, 0], n, &w[0], &work[0], <int> work.shape[0])


cpdef int _pbtrf_memview(bint lower, double[::1, :] ab):
    """Test twin: factor the band array ``ab`` of shape (kd + 1, n) (Fortran order) in place."""
    return _pbtrf(Lower if lower else Upper, <int> ab.shape[1], <int> ab.shape[0] - 1, &ab[0, 0],
                  <int> ab.shape[0])


cpdef int _pbtrs_memview(bint lower, const double[::1, :] ab, double[::1, :] b):
    """Test twin: solve in place in ``b`` of shape (n, nrhs) (Fortran order)."""
    return _pbtrs(Lower if lower else Upper, <int> ab.shape[1], <int> ab.shape[0] - 1,
                  <int> b.shape[1], &ab[0, 0], <int> ab.shape[0], &b[0, 0], <int> b.shape[0])
