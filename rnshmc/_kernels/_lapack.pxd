# LAPACK for the kernels, wrapped once (the only cimport of scipy.linalg.cython_lapack).
# Band matrices are inherently column-major (LAPACK band storage), so these wrappers take no
# storage-order flag: ``ab`` is the (ldab, n) column-major band array, ``b`` is (ldb, nrhs)
# column-major (nrhs right-hand sides, each contiguous). All return LAPACK's ``info``.

from ._blas cimport BLAS_Order, BLAS_Uplo

cdef int _pbtrf(BLAS_Uplo uplo, int n, int kd, double* ab, int ldab) noexcept nogil
cdef int _pbtrs(BLAS_Uplo uplo, int n, int kd, int nrhs, const double* ab, int ldab, double* b,
                int ldb) noexcept nogil

# Dense symmetric matrices in either storage order (row-major: the other triangle is passed).
cdef int _potrf(BLAS_Order order, BLAS_Uplo uplo, int n, double* a, int lda) noexcept nogil
# eigenvalues (ascending) into w and, with vectors, the eigenvectors: the rows of the row-major
# ``a`` (the columns of a column-major one); ``work`` has lwork >= 3 n - 1 doubles
cdef int _syev(BLAS_Order order, bint vectors, int n, double* a, int lda, double* w, double* work,
               int lwork) noexcept nogil
# A general square A x = b by LU (partial pivoting): x overwrites b, the factors a
cdef int _gesv(BLAS_Order order, int n, double* a, int lda, int* ipiv, double* b) noexcept nogil
