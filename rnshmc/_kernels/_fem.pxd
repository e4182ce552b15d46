# The C half of rnshmc.fem.EllipticSolver: assembly straight into LAPACK band storage over the
# free nodes, banded Cholesky, solves that reuse the factor, element contractions.
#
# Vectors over the "extended" numbering: entries [0, n_free) are the unknowns in band order,
# entries [n_free, n_ext) the Dirichlet nodes. Element connectivity and observation operators
# index this numbering, so gathering a nodal field needs no branch on the node kind.

cdef class BandSystem:
    cdef readonly Py_ssize_t n_free, n_ext, n_elements, n_local, band_size, work_size
    cdef readonly int kd, ldab
    cdef readonly bint lower
    cdef const Py_ssize_t[::1] elem_ext        # (n_elements * n_local) extended indices
    cdef const double[::1] elem_stiffness      # (n_elements * n_local * n_local) for kappa = 1
    cdef const Py_ssize_t[::1] scatter_ptr     # (n_elements + 1) entries of element e: [ptr[e], ptr[e+1])
    cdef const Py_ssize_t[::1] scatter_pos     # offsets into work: band entries, then rhs entries
    cdef const double[::1] scatter_val         # stiffness value (band) or lifting value (rhs)
    cdef const double[::1] load                # (n_free) kappa-independent load vector
    cdef const double[::1] boundary            # (n_ext - n_free) Dirichlet values
    # The caller's scratch ``work`` (work_size doubles): [band (ldab * n_free) | extended
    # solution (n_ext)]; assemble() writes all of it (the tail holds `boundary`).

    cdef double* solution(self, double* work) noexcept nogil
    cdef void assemble(self, const double* kappa, const double* scatter_val,
                       const double* load, double* work) noexcept nogil
    cdef int factor(self, const double* kappa, double* work) noexcept nogil
    cdef int solve_in_place(self, const double* work, double* b, int nrhs, int ldb) noexcept nogil
    cdef void element_products(self, const double* kappa, const double* left, const double* right,
                               double* out) noexcept nogil
