# BLAS for the kernels, wrapped once (the only cimport of scipy.linalg.cython_blas).
# All wrappers are `noexcept nogil`, take every argument by value and handle row-major
# (C-contiguous) storage by swapping dimensions and flipping the transpose flag, as
# scikit-learn's _cython_blas does.

ctypedef enum BLAS_Order:
    RowMajor
    ColMajor

ctypedef enum BLAS_Trans:
    NoTrans = 110  # 'n'
    Trans = 116    # 't'

ctypedef enum BLAS_Uplo:
    Upper = 117    # 'u'
    Lower = 108    # 'l'

ctypedef enum BLAS_Side:
    Left = 108     # 'l'
    Right = 114    # 'r'

# Level 1
cdef double _dot(int n, const double* x, int incx, const double* y, int incy) noexcept nogil
cdef void _axpy(int n, double alpha, const double* x, int incx, double* y, int incy) noexcept nogil
cdef void _scal(int n, double alpha, double* x, int incx) noexcept nogil
cdef void _copy(int n, const double* x, int incx, double* y, int incy) noexcept nogil
cdef double _nrm2(int n, const double* x, int incx) noexcept nogil

# Level 2
cdef void _gemv(BLAS_Order order, BLAS_Trans ta, int m, int n, double alpha, const double* A,
                int lda, const double* x, int incx, double beta, double* y, int incy) noexcept nogil
cdef void _symv(BLAS_Order order, BLAS_Uplo uplo, int n, double alpha, const double* A, int lda,
                const double* x, int incx, double beta, double* y, int incy) noexcept nogil
cdef void _ger(BLAS_Order order, int m, int n, double alpha, const double* x, int incx,
               const double* y, int incy, double* A, int lda) noexcept nogil
cdef void _syr(BLAS_Order order, BLAS_Uplo uplo, int n, double alpha, const double* x, int incx,
               double* A, int lda) noexcept nogil
cdef void _syr2(BLAS_Order order, BLAS_Uplo uplo, int n, double alpha, const double* x, int incx,
                const double* y, int incy, double* A, int lda) noexcept nogil
cdef void _trmv(BLAS_Order order, BLAS_Uplo uplo, BLAS_Trans ta, int n, const double* A, int lda,
                double* x, int incx) noexcept nogil
cdef void _trsv(BLAS_Order order, BLAS_Uplo uplo, BLAS_Trans ta, int n, const double* A, int lda,
                double* x, int incx) noexcept nogil

# Level 3
cdef void _gemm(BLAS_Order order, BLAS_Trans ta, BLAS_Trans tb, int m, int n, int k, double alpha,
                const double* A, int lda, const double* B, int ldb, double beta, double* C,
                int ldc) noexcept nogil
cdef void _symm(BLAS_Order order, BLAS_Side side, BLAS_Uplo uplo, int m, int n, double alpha,
                const double* A, int lda, const double* B, int ldb, double beta, double* C,
                int ldc) noexcept nogil
cdef void _syrk(BLAS_Order order, BLAS_Uplo uplo, BLAS_Trans trans, int n, int k, double alpha,
                const double* A, int lda, double beta, double* C, int ldc) noexcept nogil
cdef void _trsm(BLAS_Order order, BLAS_Side side, BLAS_Uplo uplo, BLAS_Trans ta, int m, int n,
                double alpha, const double* A, int lda, double* B, int ldb) noexcept nogil


# Small matrix products as plain loops, not BLAS, inside a chain's transitions: a threaded
# BLAS (symv, trmv, and gemv in the OpenBLAS of the oldest supported NumPy) sums in an order
# that depends on its thread count, and a serial run has more BLAS threads than a pool's
# chain, so the same seed drew differently serially and on threads (NUTS with a dense metric
# on a 60-d Gaussian). n^2 operations, small beside a gradient at the dimensions they serve.
cdef inline void matrix_times(const double* A, Py_ssize_t n, const double* p,
                              double* v) noexcept nogil:
    """v <- A p (row-major, n x n)."""
    cdef Py_ssize_t i, j
    cdef double total
    for i in range(n):
        total = 0.0
        for j in range(n):
            total += A[i * n + j] * p[j]
        v[i] = total


cdef inline void lower_times(const double* L, Py_ssize_t n, double* p) noexcept nogil:
    """p <- L p in place, L lower triangular (row-major, n x n)."""
    cdef Py_ssize_t i, j
    cdef double total
    for i in range(n - 1, -1, -1):  # (from the last row: p[j < i] still the input's)
        total = 0.0
        for j in range(i + 1):
            total += L[i * n + j] * p[j]
        p[i] = total
