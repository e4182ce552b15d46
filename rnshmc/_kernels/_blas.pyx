"""BLAS wrappers over scipy.linalg.cython_blas, with test twins (``_*_memview``).

The ``cdef`` wrappers are what kernels call; the ``cpdef`` twins exist only so the tests can
check each wrapper against NumPy.
"""
from scipy.linalg.cython_blas cimport (
    ddot, daxpy, dscal, dcopy, dnrm2, dgemv, dger, dsymv, dsyr, dsyr2, dtrmv, dtrsv, dgemm, dsymm,
    dsyrk, dtrsm,
)


cdef inline char _flip_trans(BLAS_Trans t) noexcept nogil:
    return NoTrans if t == Trans else Trans


cdef inline char _flip_uplo(BLAS_Uplo u) noexcept nogil:
    return Lower if u == Upper else Upper


cdef double _dot(int n, const double* x, int incx, const double* y, int incy) noexcept nogil:
    return ddot(&n, <double*> x, &incx, <double*> y, &incy)


cdef void _axpy(int n, double alpha, const double* x, int incx, double* y, int incy) noexcept nogil:
    daxpy(&n, &alpha, <double*> x, &incx, y, &incy)


cdef void _scal(int n, double alpha, double* x, int incx) noexcept nogil:
    dscal(&n, &alpha, x, &incx)


cdef void _copy(int n, const double* x, int incx, double* y, int incy) noexcept nogil:
    dcopy(&n, <double*> x, &incx, y, &incy)


cdef double _nrm2(int n, const double* x, int incx) noexcept nogil:
    return dnrm2(&n, <double*> x, &incx)


cdef void _gemv(BLAS_Order order, BLAS_Trans ta, int m, int n, double alpha, const double* A,
                int lda, const double* x, int incx, double beta, double* y, int incy) noexcept nogil:
    """y = alpha * op(A) x + beta * y, A of shape (m, n) in the given storage order."""
    cdef char ta_ = ta
    if order == RowMajor:
        # A row-major (m, n) matrix is the column-major (n, m) matrix A^T.
        ta_ = _flip_trans(ta)
        dgemv(&ta_, &n, &m, &alpha, <double*> A, &lda, <double*> x, &incx, &beta, y, &incy)
    else:
        dgemv(&ta_, &m, &n, &alpha, <double*> A, &lda, <double*> x, &incx, &beta, y, &incy)


cdef void _symv(BLAS_Order order, BLAS_Uplo uplo, int n, double alpha, const double* A, int lda,
                const double* x, int incx, double beta, double* y, int incy) noexcept nogil:
    """y = alpha * A x + beta * y for symmetric A stored in the triangle ``uplo``."""
    cdef char uplo_ = uplo
    if order == RowMajor:
        uplo_ = _flip_uplo(uplo)
    dsymv(&uplo_, &n, &alpha, <double*> A, &lda, <double*> x, &incx, &beta, y, &incy)


cdef void _ger(BLAS_Order order, int m, int n, double alpha, const double* x, int incx,
               const double* y, int incy, double* A, int lda) noexcept nogil:
    """A += alpha x y^T, A of shape (m, n) in the given storage order."""
    if order == RowMajor:
        # row-major A is column-major A^T, and A^T += alpha y x^T
        dger(&n, &m, &alpha, <double*> y, &incy, <double*> x, &incx, A, &lda)
    else:
        dger(&m, &n, &alpha, <double*> x, &incx, <double*> y, &incy, A, &lda)


cdef void _syr(BLAS_Order order, BLAS_Uplo uplo, int n, double alpha, const double* x, int incx,
               double* A, int lda) noexcept nogil:
    """A += alpha x x^T in the triangle ``uplo`` of symmetric A."""
    cdef char uplo_ = uplo
    if order == RowMajor:
        uplo_ = _flip_uplo(uplo)
    dsyr(&uplo_, &n, &alpha, <double*> x, &incx, A, &lda)


cdef void _syr2(BLAS_Order order, BLAS_Uplo uplo, int n, double alpha, const double* x, int incx,
                const double* y, int incy, double* A, int lda) noexcept nogil:
    """A += alpha (x y^T + y x^T) in the triangle ``uplo`` of symmetric A."""
    cdef char uplo_ = uplo
    if order == RowMajor:
        uplo_ = _flip_uplo(uplo)
    dsyr2(&uplo_, &n, &alpha, <double*> x, &incx, <double*> y, &incy, A, &lda)


cdef void _trmv(BLAS_Order order, BLAS_Uplo uplo, BLAS_Trans ta, int n, const double* A, int lda,
                double* x, int incx) noexcept nogil:
    """x = op(A) x for triangular A (non-unit diagonal)."""
    cdef char uplo_ = uplo
    cdef char ta_ = ta
    cdef char diag = b'n'
    if order == RowMajor:
        uplo_ = _flip_uplo(uplo)
        ta_ = _flip_trans(ta)
    dtrmv(&uplo_, &ta_, &diag, &n, <double*> A, &lda, x, &incx)


cdef void _trsv(BLAS_Order order, BLAS_Uplo uplo, BLAS_Trans ta, int n, const double* A, int lda,
                double* x, int incx) noexcept nogil:
    """x = op(A)^{-1} x for triangular A (non-unit diagonal)."""
    cdef char uplo_ = uplo
    cdef char ta_ = ta
    cdef char diag = b'n'
    if order == RowMajor:
        uplo_ = _flip_uplo(uplo)
        ta_ = _flip_trans(ta)
    dtrsv(&uplo_, &ta_, &diag, &n, <double*> A, &lda, x, &incx)


cdef void _gemm(BLAS_Order order, BLAS_Trans ta, BLAS_Trans tb, int m, int n, int k, double alpha,
                const double* A, int lda, const double* B, int ldb, double beta, double* C,
                int ldc) noexcept nogil:
    """C = alpha * op(A) op(B) + beta * C with C of shape (m, n)."""
    cdef char ta_ = ta
    cdef char tb_ = tb
    if order == RowMajor:
        # Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T.
        dgemm(&tb_, &ta_, &n, &m, &k, &alpha, <double*> B, &ldb, <double*> A, &lda, &beta, C, &ldc)
    else:
        dgemm(&ta_, &tb_, &m, &n, &k, &alpha, <double*> A, &lda, <double*> B, &ldb, &beta, C, &ldc)


cdef void _symm(BLAS_Order order, BLAS_Side side, BLAS_Uplo uplo, int m, int n, double alpha,
                const double* A, int lda, const double* B, int ldb, double beta, double* C,
                int ldc) noexcept nogil:
    """C = alpha * A B + beta * C (Left, A of shape (m, m)) or alpha * B A + beta * C (Right,
    A of shape (n, n)) for symmetric A stored in the triangle ``uplo``; B and C are (m, n)."""
    cdef char side_ = side
    cdef char uplo_ = uplo
    if order == RowMajor:
        # row-major C = A B is column-major C^T = B^T A (A symmetric), and the row-major
        # triangle ``uplo`` of A is the column-major other one
        side_ = Right if side == Left else Left
        uplo_ = _flip_uplo(uplo)
        dsymm(&side_, &uplo_, &n, &m, &alpha, <double*> A, &lda, <double*> B, &ldb, &beta, C,
              &ldc)
    else:
        dsymm(&side_, &uplo_, &m, &n, &alpha, <double*> A, &lda, <double*> B, &ldb, &beta, C,
              &ldc)


cdef void _syrk(BLAS_Order order, BLAS_Uplo uplo, BLAS_Trans trans, int n, int k, double alpha,
                const double* A, int lda, double beta, double* C, int ldc) noexcept nogil:
    """C = alpha * A A^T + beta * C (NoTrans, A is (n, k)) or alpha * A^T A + beta * C (Trans,
    A is (k, n)); only the triangle ``uplo`` of C is referenced and written."""
    cdef char uplo_ = uplo
    cdef char trans_ = trans
    if order == RowMajor:
        uplo_ = _flip_uplo(uplo)
        trans_ = _flip_trans(trans)
    dsyrk(&uplo_, &trans_, &n, &k, &alpha, <double*> A, &lda, &beta, C, &ldc)


cdef void _trsm(BLAS_Order order, BLAS_Side side, BLAS_Uplo uplo, BLAS_Trans ta, int m, int n,
                double alpha, const double* A, int lda, double* B, int ldb) noexcept nogil:
    """B = alpha * op(A)^{-1} B (Left) or alpha * B op(A)^{-1} (Right), B of shape (m, n),
    triangular A (non-unit diagonal)."""
    cdef char side_ = side
    cdef char uplo_ = uplo
    cdef char ta_ = ta
    cdef char diag = b'n'
    if order == RowMajor:
        # row-major B is column-major B^T: op(A) X = B becomes X^T op(A)^T = B^T, and the
        # row-major A is the column-major A^T (the other triangle)
        side_ = Right if side == Left else Left
        uplo_ = _flip_uplo(uplo)
        dtrsm(&side_, &uplo_, &ta_, &diag, &n, &m, &alpha, <double*> A, &lda, B, &ldb)
    else:
        dtrsm(&side_, &uplo_, &ta_, &diag, &m, &n, &alpha, <double*> A, &lda, B, &ldb)


# ---------------------------------------------------------------------------------------------
# Test twins: row-major (C-contiguous) arrays only.

cpdef double _dot_memview(const double[::1] x, const double[::1] y):
    return _dot(<int> x.shape[0], &x[0], 1, &y[0], 1)


cpdef void _axpy_memview(double alpha, const double[::1] x, double[::1] y):
    _axpy(<int> x.shape[0], alpha, &x[0], 1, &y[0], 1)


cpdef void _scal_memview(double alpha, double[::1] x):
    _scal(<int> x.shape[0], alpha, &x[0], 1)


cpdef void _copy_memview(const double[::1] x, double[::1] y):
    _copy(<int> x.shape[0], &x[0], 1, &y[0], 1)


cpdef double _nrm2_memview(const double[::1] x):
    return _nrm2(<int> x.shape[0], &x[0], 1)


cpdef void _gemv_memview(bint transpose, double alpha, const double[:, ::1] A, const double[::1] x,
                         double beta, double[::1] y):
    cdef int m = <int> A.shape[0], n = <int> A.shape[1]
    _gemv(RowMajor, Trans if transpose else NoTrans, m, n, alpha, &A[0, 0], n, &x[0], 1, beta,
          &y[0], 1)


cpdef void _symv_memview(bint lower, double alpha, const double[:, ::1] A, const double[::1] x,
                         double beta, double[::1] y):
    cdef int n = <int> A.shape[0]
    _symv(RowMajor, Lower if lower else Upper, n, alpha, &A[0, 0], n, &x[0], 1, beta, &y[0], 1)


cpdef void _ger_memview(double alpha, const double[::1] x, const double[::1] y,
                        double[:, ::1] A):
    cdef int m = <int> A.shape[0], n = <int> A.shape[1]
    _ger(RowMajor, m, n, alpha, &x[0], 1, &y[0], 1, &A[0, 0], n)


cpdef void _syr_memview(bint lower, double alpha, const double[::1] x, double[:, ::1] A):
    cdef int n = <int> A.shape[0]
    _syr(RowMajor, Lower if lower else Upper, n, alpha, &x[0], 1, &A[0, 0], n)


cpdef void _syr2_memview(bint lower, double alpha, const double[::1] x, const double[::1] y,
                         double[:, ::1] A):
    cdef int n = <int> A.shape[0]
    _syr2(RowMajor, Lower if lower else Upper, n, alpha, &x[0], 1, &y[0], 1, &A[0, 0], n)


cpdef void _trmv_memview(bint lower, bint transpose, const double[:, ::1] A, double[::1] x):
    cdef int n = <int> A.shape[0]
    _trmv(RowMajor, Lower if lower else Upper, Trans if transpose else NoTrans, n, &A[0, 0], n,
          &x[0], 1)


cpdef void _gemm_memview(bint transpose_a, bint transpose_b, double alpha, const double[:, ::1] A,
                         const double[:, ::1] B, double beta, double[:, ::1] C):
    cdef int m = <int> C.shape[0], n = <int> C.shape[1]
    cdef int k = <int> (A.shape[0] if transpose_a else A.shape[1])
    _gemm(RowMajor, Trans if transpose_a else NoTrans, Trans if transpose_b else NoTrans, m, n, k,
          alpha, &A[0, 0], <int> A.shape[1], &B[0, 0], <int> B.shape[1], beta, &C[0, 0], n)


cpdef void _symm_memview(bint left, bint lower, double alpha, const double[:, ::1] A,
                         const double[:, ::1] B, double beta, double[:, ::1] C):
    cdef int m = <int> C.shape[0], n = <int> C.shape[1]
    _symm(RowMajor, Left if left else Right, Lower if lower else Upper, m, n, alpha, &A[0, 0],
          <int> A.shape[1], &B[0, 0], <int> B.shape[1], beta, &C[0, 0], n)


cpdef void _syrk_memview(bint lower, bint transpose, double alpha, const double[:, ::1] A,
                         double beta, double[:, ::1] C):
    cdef int n = <int> C.shape[0]
    cdef int k = <int> (A.shape[0] if transpose else A.shape[1])
    _syrk(RowMajor, Lower if lower else Upper, Trans if transpose else NoTrans, n, k, alpha,
          &A[0, 0], <int> A.shape[1], beta, &C[0, 0], n)


cpdef void _trsv_memview(bint lower, bint transpose, const double[:, ::1] A, double[::1] x):
    cdef int n = <int> A.shape[0]
    _trsv(RowMajor, Lower if lower else Upper, Trans if transpose else NoTrans, n, &A[0, 0], n,
          &x[0], 1)


cpdef void _trsm_memview(bint left, bint lower, bint transpose, double alpha,
                         const double[:, ::1] A, double[:, ::1] B):
    cdef int m = <int> B.shape[0], n = <int> B.shape[1]
    _trsm(RowMajor, Left if left else Right, Lower if lower else Upper,
          Trans if transpose else NoTrans, m, n, alpha, &A[0, 0], <int> A.shape[0], &B[0, 0], n)
