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
