# The C half of rnshmc.fem.EllipticSolver: assembly straight into LAPACK band storage over the
# free nodes, banded Cholesky, solves that reuse the factor, element contractions.
#
# Vectors over the "extended" numbering: entries [0, n_free) are the unknowns in band order,
# entries [n_free, n_ext) the Dirichlet nodes. Element connectivity and observation operators
# index this numbering, so gathering a nodal field needs no branch on the node kind.

from ._targets cimport CTarget

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


cdef class EllipticPDETarget(CTarget):
    # ``dim`` (number of KL modes) and ``scratch_size`` come from CTarget.
    cdef readonly BandSystem system
    cdef const double[:, ::1] basis_t          # (dim, n_elements): log kappa = basis_t.T @ theta
    cdef const double[:, ::1] basis            # (n_elements, dim): the same, one row per element
    cdef const Py_ssize_t[::1] obs_ptr         # observation k: entries [obs_ptr[k], obs_ptr[k+1])
    cdef const Py_ssize_t[::1] obs_ext         # ... of extended indices
    cdef const double[::1] obs_weight          # ... and interpolation weights
    cdef const double[::1] observations        # (n_obs) data y
    cdef readonly double noise_sd, prior_sd
    cdef double noise_precision, prior_precision
    cdef readonly Py_ssize_t n_obs
    # scratch layout: [work (the system's) | kappa | element_grad | residual | adjoint]
    #   kappa: log kappa, then kappa, per element; element_grad: dU/dlog kappa per element;
    #   residual: u_obs - y; adjoint: the extended adjoint vector
    cdef Py_ssize_t kappa_at, element_grad_at, residual_at, adjoint_at
    # Doubles of ``work`` that gauss_newton needs: the target's scratch (scratch_size) at its
    # head, then [sens | du | jac | rhs2 | contraction | vectors] at the offsets below.
    cdef readonly Py_ssize_t metric_work_size
    cdef Py_ssize_t sens_at, du_at, jac_at, rhs2_at, contraction_at, vectors_at

    cdef bint set_coefficient(self, const double* q, double* scratch) noexcept nogil
    cdef bint solve_forward(self, const double* q, double* scratch) noexcept nogil
    cdef double misfit(self, double* scratch) noexcept nogil
    cdef double prior(self, const double* q) noexcept nogil
    # G = J^T J / noise_sd^2 + I / prior_sd^2 at q (d x d, row-major, both triangles) and, if
    # dG != NULL, dG[i*d*d + a*d + b] = dG_ab / dtheta_i. Returns 0, or 1 where kappa is not
    # finite and positive or the factorisation fails (G, dG unspecified then). ``work``:
    # metric_work_size doubles, the only scratch; no allocation, no Python objects.
    cdef int gauss_newton(self, const double* q, double* G, double* dG, double* work) noexcept nogil
