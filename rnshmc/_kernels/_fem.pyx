"""Finite-element kernels of the elliptic PDE inverse problem.

``BandSystem`` assembles -div(kappa grad u) = f with kappa constant per element straight into
LAPACK band storage over the free nodes (Dirichlet lifting folded into the right-hand side),
factors it with the banded Cholesky ``dpbtrf`` and solves with ``dpbtrs``, reusing the factor
for the adjoint and sensitivity solves. Everything mesh-dependent (element matrices for
kappa = 1, the scatter positions of every element entry in band storage, the lifting values)
is precomputed by ``rnshmc.fem``; an assembly is then one multiply-add per stored entry.

``EllipticPDETarget`` is the C-level target of ``rnshmc.models.EllipticPDE``: log kappa is a
linear map of theta (a Karhunen-Loeve basis), u is observed through a sparse interpolation
operator, U = |y - u_obs|^2 / (2 s_y^2) + |theta|^2 / (2 s_theta^2), and the gradient costs
one adjoint solve with the same factor plus an element contraction. Its ``gauss_newton``
gives the Gauss-Newton metric J^T J / s_y^2 + I / s_theta^2 and its derivatives, again with the
one factor; ``GaussNewtonMetric`` is that metric behind the Riemannian metric interface (it
lives beside the model, so that the metrics and integrators load no model).
"""
from libc.math cimport exp, INFINITY, NAN
from libc.string cimport memcpy, memset

import numpy as np

from ._blas cimport RowMajor, NoTrans, Trans, Upper, Lower, _axpy, _dot, _gemm, _syrk
from ._lapack cimport _pbtrf, _pbtrs
from ._riemann cimport TensorMetric
from ._targets cimport CTarget

cdef double DBL_MAX = 1.7976931348623157e308
# OpenBLAS runs a GEMM on nthreads = m n k / 2^18 threads (interface/gemm.c: SMP_THRESHOLD_MIN
# 65536 times the default GEMM_MULTITHREAD_THRESHOLD 4), so products up to this size stay on
# the calling thread
cdef Py_ssize_t GEMM_SERIAL_SIZE = 262144


cdef class BandSystem:
    """Banded finite-element system over the free nodes (built by ``rnshmc.fem``).

    Parameters
    ----------
    elem_ext : ndarray of intp, shape (n_elements * n_local,)
        Extended index of each element node (free nodes: band position; Dirichlet nodes:
        n_free + their index among the Dirichlet nodes).
    elem_stiffness : ndarray, shape (n_elements * n_local * n_local,)
        Element stiffness matrices for kappa = 1, row-major per element.
    scatter_ptr, scatter_pos, scatter_val : ndarrays
        Element ``e`` adds ``kappa[e] * scatter_val[p]`` to ``work[scatter_pos[p]]`` for
        ``p`` in ``[scatter_ptr[e], scatter_ptr[e + 1])``; positions below ``band_size`` are
        band entries, the others right-hand-side entries (lifting of the Dirichlet values).
    load : ndarray, shape (n_free,)
        Kappa-independent part of the right-hand side (a source term; zeros for the paper's
        problem).
    boundary : ndarray, shape (n_dirichlet,)
        Dirichlet values, in the order of the extended numbering.
    n_free, kd : int
        Number of unknowns and half-bandwidth.
    lower : bool
        Store the lower triangle (else the upper one).
    """

    def __init__(self, const Py_ssize_t[::1] elem_ext, const double[::1] elem_stiffness,
                 const Py_ssize_t[::1] scatter_ptr, const Py_ssize_t[::1] scatter_pos,
                 const double[::1] scatter_val, const double[::1] load,
                 const double[::1] boundary, Py_ssize_t n_free, int kd, bint lower):
        cdef Py_ssize_t n_elements = scatter_ptr.shape[0] - 1
        if n_free < 1 or kd < 0 or n_elements < 1:
            raise ValueError("need at least one unknown, one element and kd >= 0")
        if elem_ext.shape[0] % n_elements:
            raise ValueError("elem_ext does not hold n_local entries per element")
        self.n_elements = n_elements
        self.n_local = elem_ext.shape[0] // n_elements
        if elem_stiffness.shape[0] != n_elements * self.n_local * self.n_local:
            raise ValueError("elem_stiffness must hold one n_local x n_local matrix per element")
        if scatter_pos.shape[0] != scatter_val.shape[0] or scatter_ptr[n_elements] != scatter_pos.shape[0]:
            raise ValueError("scatter_ptr, scatter_pos and scatter_val do not match")
        if load.shape[0] != n_free:
            raise ValueError("load must have one entry per unknown")
        self.n_free = n_free
        self.n_ext = n_free + boundary.shape[0]
        self.kd = kd
        self.ldab = kd + 1
        self.lower = lower
        self.band_size = self.ldab * n_free
        arr = np.asarray(scatter_pos)
        if arr.size and (arr.min() < 0 or arr.max() >= self.band_size + n_free):
            raise ValueError("scatter positions out of range")
        arr = np.asarray(elem_ext)
        if arr.min() < 0 or arr.max() >= self.n_ext:
            raise ValueError("element indices out of range")
        self.elem_ext = elem_ext
        self.elem_stiffness = elem_stiffness
        self.scatter_ptr = scatter_ptr
        self.scatter_pos = scatter_pos
        self.scatter_val = scatter_val
        self.load = load
        self.boundary = boundary
        self.work_size = self.band_size + self.n_ext

    def _arguments(self):
        return (np.asarray(self.elem_ext), np.asarray(self.elem_stiffness),
                np.asarray(self.scatter_ptr), np.asarray(self.scatter_pos),
                np.asarray(self.scatter_val), np.asarray(self.load), np.asarray(self.boundary),
                self.n_free, self.kd, self.lower)

    def __reduce__(self):
        return (BandSystem, self._arguments())

    # ---------------------------------------------------------------------------------------
    # C level

    cdef inline double* solution(self, double* work) noexcept nogil:
        """The extended solution vector in ``work`` (unknowns, then Dirichlet values)."""
        return work + self.band_size

    cdef void assemble(self, const double* kappa, const double* scatter_val,
                       const double* load, double* work) noexcept nogil:
        """Band matrix and right-hand side for one kappa per element, and the Dirichlet values
        after them, into ``work`` (``work_size`` doubles)."""
        cdef double* w = work
        cdef const Py_ssize_t* ptr = &self.scatter_ptr[0]
        cdef const Py_ssize_t* pos = &self.scatter_pos[0]
        cdef Py_ssize_t e, p
        cdef double k
        memset(w, 0, self.band_size * sizeof(double))
        memcpy(w + self.band_size, load, self.n_free * sizeof(double))
        if self.n_ext > self.n_free:
            memcpy(w + self.band_size + self.n_free, &self.boundary[0],
                   (self.n_ext - self.n_free) * sizeof(double))
        for e in range(self.n_elements):
            k = kappa[e]
            for p in range(ptr[e], ptr[e + 1]):
                w[pos[p]] += k * scatter_val[p]

    cdef int factor(self, const double* kappa, double* work) noexcept nogil:
        """Assemble for ``kappa`` and factor; returns LAPACK's info (> 0: not positive definite).
        The right-hand side is left in ``solution(work)`` for ``solve_in_place``."""
        self.assemble(kappa, &self.scatter_val[0], &self.load[0], work)
        return _pbtrf(Lower if self.lower else Upper, <int> self.n_free, self.kd, work, self.ldab)

    cdef int solve_in_place(self, const double* work, double* b, int nrhs, int ldb) noexcept nogil:
        """A X = B with the factor in ``work``, B column-major (ldb, nrhs) overwritten by X."""
        return _pbtrs(Lower if self.lower else Upper, <int> self.n_free, self.kd, nrhs,
                      work, self.ldab, b, ldb)

    cdef void element_products(self, const double* kappa, const double* left, const double* right,
                               double* out) noexcept nogil:
        """out[e] = kappa[e] * left_e^T S_e right_e over the extended vectors left, right."""
        cdef const Py_ssize_t* ext = &self.elem_ext[0]
        cdef const double* S = &self.elem_stiffness[0]
        cdef Py_ssize_t e, a, b, m = self.n_local
        cdef double total, row
        if m == 3:
            for e in range(self.n_elements):
                out[e] = kappa[e] * _product3(S + 9 * e, ext + 3 * e, left, right)
            return
        if m == 4:
            for e in range(self.n_elements):
                out[e] = kappa[e] * _product4(S + 16 * e, ext + 4 * e, left, right)
            return
        for e in range(self.n_elements):
            total = 0.0
            for a in range(m):
                row = 0.0
                for b in range(m):
                    row = row + S[(e * m + a) * m + b] * right[ext[e * m + b]]
                total = total + left[ext[e * m + a]] * row
            out[e] = kappa[e] * total

    # ---------------------------------------------------------------------------------------
    # Python entry points (used by rnshmc.fem and the tests; inputs validated there)

    def solve(self, const double[::1] kappa, const double[::1] scatter_val=None,
              const double[::1] load=None, const double[::1] boundary=None):
        """(info, extended solution) for one kappa per element.

        ``scatter_val``, ``load`` and ``boundary`` replace the stored values for this call
        (other source terms or Dirichlet values); info > 0 means not positive definite.
        """
        self._check_kappa(kappa)
        cdef const double* sv = &self.scatter_val[0] if scatter_val is None else &scatter_val[0]
        cdef const double* ld = &self.load[0] if load is None else &load[0]
        cdef Py_ssize_t n_dir = self.n_ext - self.n_free
        cdef int info
        if scatter_val is not None and scatter_val.shape[0] != self.scatter_val.shape[0]:
            raise ValueError("scatter_val has the wrong length")
        if load is not None and load.shape[0] != self.n_free:
            raise ValueError("load has the wrong length")
        if boundary is not None and boundary.shape[0] != n_dir:
            raise ValueError("boundary has the wrong length")
        out = np.empty(self.n_ext)
        work_array = np.empty(self.work_size)
        cdef double[::1] work = work_array
        with nogil:
            self.assemble(&kappa[0], sv, ld, &work[0])
            info = _pbtrf(Lower if self.lower else Upper, <int> self.n_free, self.kd,
                          &work[0], self.ldab)
            if info == 0:
                self.solve_in_place(&work[0], self.solution(&work[0]), 1, <int> self.n_free)
        out[:self.n_free] = work_array[self.band_size:self.band_size + self.n_free]
        out[self.n_free:] = np.asarray(self.boundary if boundary is None else boundary)
        return info, out

    def assembled(self, const double[::1] kappa, const double[::1] scatter_val=None,
                  const double[::1] load=None):
        """(band array (ldab, n_free) in Fortran order, right-hand side) before factoring."""
        self._check_kappa(kappa)
        cdef const double* sv = &self.scatter_val[0] if scatter_val is None else &scatter_val[0]
        cdef const double* ld = &self.load[0] if load is None else &load[0]
        work_array = np.empty(self.work_size)
        cdef double[::1] work = work_array
        with nogil:
            self.assemble(&kappa[0], sv, ld, &work[0])
        band = work_array[:self.band_size].reshape(self.n_free, self.ldab).T.copy(order="F")
        rhs = work_array[self.band_size:self.band_size + self.n_free].copy()
        return band, rhs

    def element_contraction(self, const double[::1] kappa, const double[::1] left,
                            const double[::1] right):
        """kappa[e] * left_e^T S_e right_e per element (extended vectors)."""
        self._check_kappa(kappa)
        if left.shape[0] != self.n_ext or right.shape[0] != self.n_ext:
            raise ValueError("left and right must be extended vectors")
        out = np.empty(self.n_elements)
        cdef double[::1] o = out
        with nogil:
            self.element_products(&kappa[0], &left[0], &right[0], &o[0])
        return out

    def _check_kappa(self, const double[::1] kappa):
        if kappa.shape[0] != self.n_elements:
            raise ValueError(f"kappa must have {self.n_elements} entries, got {kappa.shape[0]}")


cdef inline double _product3(const double* S, const Py_ssize_t* ext, const double* left,
                             const double* right) noexcept nogil:
    cdef double r0 = right[ext[0]], r1 = right[ext[1]], r2 = right[ext[2]]
    return (left[ext[0]] * (S[0] * r0 + S[1] * r1 + S[2] * r2)
            + left[ext[1]] * (S[3] * r0 + S[4] * r1 + S[5] * r2)
            + left[ext[2]] * (S[6] * r0 + S[7] * r1 + S[8] * r2))


cdef inline double _product4(const double* S, const Py_ssize_t* ext, const double* left,
                             const double* right) noexcept nogil:
    cdef double r0 = right[ext[0]], r1 = right[ext[1]], r2 = right[ext[2]], r3 = right[ext[3]]
    return (left[ext[0]] * (S[0] * r0 + S[1] * r1 + S[2] * r2 + S[3] * r3)
            + left[ext[1]] * (S[4] * r0 + S[5] * r1 + S[6] * r2 + S[7] * r3)
            + left[ext[2]] * (S[8] * r0 + S[9] * r1 + S[10] * r2 + S[11] * r3)
            + left[ext[3]] * (S[12] * r0 + S[13] * r1 + S[14] * r2 + S[15] * r3))


cdef inline Py_ssize_t _packed_index(Py_ssize_t i, Py_ssize_t a, Py_ssize_t d) noexcept nogil:
    """Position of (i, a) in the row-major packed upper triangle of a symmetric d x d matrix."""
    cdef Py_ssize_t t
    if i > a:
        t = i
        i = a
        a = t
    return i * d - i * (i - 1) // 2 + a - i


cdef class EllipticPDETarget(CTarget):
    """C kernel of ``rnshmc.models.EllipticPDE`` (inputs validated there).

    Parameters
    ----------
    system : BandSystem
    basis_t : ndarray, shape (dim, n_elements)
        Transposed coefficient basis: log kappa = basis_t.T @ theta.
    obs_ptr, obs_ext, obs_weight : ndarrays
        Observation k is sum(obs_weight[p] * u_ext[obs_ext[p]]) over p in
        [obs_ptr[k], obs_ptr[k + 1]).
    observations : ndarray, shape (n_obs,)
    noise_sd, prior_sd : float
    """
    # attributes declared in _fem.pxd (so that other kernels can cimport this class)

    def __init__(self, BandSystem system, const double[:, ::1] basis_t,
                 const Py_ssize_t[::1] obs_ptr, const Py_ssize_t[::1] obs_ext,
                 const double[::1] obs_weight, const double[::1] observations, double noise_sd,
                 double prior_sd):
        if basis_t.shape[1] != system.n_elements:
            raise ValueError("the basis must have one column per element")
        if obs_ptr.shape[0] != observations.shape[0] + 1 or obs_ext.shape[0] != obs_weight.shape[0] \
                or obs_ptr[obs_ptr.shape[0] - 1] != obs_ext.shape[0]:
            raise ValueError("the observation operator does not match the observations")
        if obs_ext.shape[0] and (np.min(obs_ext) < 0 or np.max(obs_ext) >= system.n_ext):
            raise ValueError("observation indices out of range")
        if not (noise_sd > 0 and prior_sd > 0):
            raise ValueError("noise_sd and prior_sd must be positive")
        self.system = system
        self.basis_t = basis_t
        self.obs_ptr = obs_ptr
        self.obs_ext = obs_ext
        self.obs_weight = obs_weight
        self.observations = observations
        self.n_obs = observations.shape[0]
        self.noise_sd = noise_sd
        self.prior_sd = prior_sd
        self.noise_precision = 1.0 / (noise_sd * noise_sd)
        self.prior_precision = 1.0 / (prior_sd * prior_sd)
        self.kappa_at = system.work_size
        self.element_grad_at = self.kappa_at + system.n_elements
        self.residual_at = self.element_grad_at + system.n_elements
        self.adjoint_at = self.residual_at + self.n_obs
        super().__init__(basis_t.shape[0], self.adjoint_at + system.n_ext)
        # element rows of the basis: the metric's element loops read one row per element
        self.basis = np.ascontiguousarray(np.asarray(basis_t).T)
        # gauss_newton's work: [scratch | sens (d x n_ext) | du (n_ext x d) | jac (n_obs x d)
        #   | rhs2 (n_free x d(d+1)/2) | contraction (d x d(d+1)/2) | vectors (2 d)]
        cdef Py_ssize_t d = self.dim, packed = self.dim * (self.dim + 1) // 2
        self.sens_at = self.scratch_size
        self.du_at = self.sens_at + d * system.n_ext
        self.jac_at = self.du_at + system.n_ext * d
        self.rhs2_at = self.jac_at + self.n_obs * d
        self.contraction_at = self.rhs2_at + system.n_free * packed
        self.vectors_at = self.contraction_at + d * packed
        self.metric_work_size = self.vectors_at + 2 * d

    def _arguments(self):
        return (np.asarray(self.basis_t), np.asarray(self.obs_ptr), np.asarray(self.obs_ext),
                np.asarray(self.obs_weight), np.asarray(self.observations), self.noise_sd,
                self.prior_sd)

    def __reduce__(self):
        return (EllipticPDETarget, (self.system,) + self._arguments())

    # ---------------------------------------------------------------------------------------
    # C level: no Python objects and no allocation

    cdef bint set_coefficient(self, const double* q, double* scratch) noexcept nogil:
        """kappa = exp(basis_t.T q) per element; False if some kappa is not finite and > 0."""
        cdef Py_ssize_t i, e, n = self.system.n_elements
        cdef double* k = scratch + self.kappa_at
        cdef bint ok = True
        memset(k, 0, n * sizeof(double))
        for i in range(self.dim):
            # level-1 BLAS (single-threaded at this size, SIMD kernels chosen at run time)
            _axpy(<int> n, q[i], &self.basis_t[i, 0], 1, k, 1)
        for e in range(n):
            k[e] = exp(k[e])
        for e in range(n):
            # also catches NaN (the comparisons are false) and underflow to 0
            if not (k[e] > 0.0 and k[e] <= DBL_MAX):
                ok = False
        return ok

    cdef bint solve_forward(self, const double* q, double* scratch) noexcept nogil:
        """Coefficient, assembly, factor, forward solve; False if any of them fails."""
        if not self.set_coefficient(q, scratch):
            return False
        if self.system.factor(scratch + self.kappa_at, scratch) != 0:
            return False
        self.system.solve_in_place(scratch, self.system.solution(scratch), 1,
                                   <int> self.system.n_free)
        return True

    cdef double misfit(self, double* scratch) noexcept nogil:
        """residual = u_obs - y; returns |residual|^2 / (2 s_y^2)."""
        cdef const double* u = self.system.solution(scratch)
        cdef double* residual = scratch + self.residual_at
        cdef Py_ssize_t k, p
        cdef double value, total = 0.0
        for k in range(self.n_obs):
            value = 0.0
            for p in range(self.obs_ptr[k], self.obs_ptr[k + 1]):
                value = value + self.obs_weight[p] * u[self.obs_ext[p]]
            value = value - self.observations[k]
            residual[k] = value
            total = total + value * value
        return 0.5 * self.noise_precision * total

    cdef double prior(self, const double* q) noexcept nogil:
        cdef Py_ssize_t i
        cdef double total = 0.0
        for i in range(self.dim):
            total = total + q[i] * q[i]
        return 0.5 * self.prior_precision * total

    cdef int potential(self, const double* q, double* U, double* scratch) except -1 nogil:
        if not self.solve_forward(q, scratch):
            U[0] = INFINITY
            return 0
        U[0] = self.misfit(scratch) + self.prior(q)
        return 0

    cdef int potential_and_gradient(self, const double* q, double* U, double* grad,
                                    double* scratch) except -1 nogil:
        cdef Py_ssize_t i, e, k, p
        cdef Py_ssize_t n = self.system.n_elements, n_free = self.system.n_free
        cdef double* lam = scratch + self.adjoint_at
        cdef double* w = scratch + self.element_grad_at
        cdef const double* residual = scratch + self.residual_at
        cdef double r
        if not self.solve_forward(q, scratch):
            U[0] = INFINITY
            for i in range(self.dim):
                grad[i] = NAN
            return 0
        U[0] = self.misfit(scratch) + self.prior(q)
        # adjoint: A lam = dU/du = O^T residual / s_y^2 over the unknowns
        memset(lam, 0, self.system.n_ext * sizeof(double))
        for k in range(self.n_obs):
            r = self.noise_precision * residual[k]
            for p in range(self.obs_ptr[k], self.obs_ptr[k + 1]):
                lam[self.obs_ext[p]] += self.obs_weight[p] * r
        memset(lam + n_free, 0, (self.system.n_ext - n_free) * sizeof(double))
        self.system.solve_in_place(scratch, lam, 1, <int> n_free)
        # dU/dkappa_e = -lam^T (S_e u)  =>  dU/dlog kappa_e = -kappa_e lam_e^T S_e u_e
        self.system.element_products(scratch + self.kappa_at, lam, self.system.solution(scratch), w)
        for i in range(self.dim):
            grad[i] = self.prior_precision * q[i] - _dot(<int> n, &self.basis_t[i, 0], 1, w, 1)
        return 0

    cdef int gauss_newton(self, const double* q, double* G, double* dG, double* work) noexcept nogil:
        """Gauss-Newton metric G = J^T J / s_y^2 + I / s_theta^2 and, if ``dG`` is not NULL,
        its derivatives dG[i, a, b] = dG_ab / dtheta_i (row-major d x d x d); 0, or 1 where
        the coefficient or the factorisation fails. ``work``: ``metric_work_size`` doubles.

        Derivation. With the extended solution u (unknowns, then the Dirichlet values) the
        discrete equations over the unknowns are

            F(theta, u) = sum_e kappa_e P S_e u_e - load = 0,

        P the restriction to free rows: the kappa-dependent lifting -sum_e kappa_e S_e g is
        just the Dirichlet columns of the same element products. With dkappa_e/dtheta_i =
        kappa_e b_ei (b = basis) and A = sum_e kappa_e P S_e P^T, differentiating once gives

            A du_i = -sum_e kappa_e b_ei P S_e u_e                              (1)

        (du_i vanishes at the Dirichlet nodes), J[o, i] = O_o du_i, and differentiating (1)
        along theta_a

            A d2u_ia = -r_ia,
            r_ia = sum_e kappa_e P S_e (b_ei b_ea u_e + b_ei du_a,e + b_ea du_i,e).

        With T[o, i, a] = O_o d2u_ia, dG_ab/dtheta_i = (M[i, a, b] + M[i, b, a]) / s_y^2 where
        M[i, a, b] = sum_o T[o, i, a] J[o, b]. Contracting over the observations before
        solving (A symmetric),

            M[i, a, b] = -(O^T J[:, b])^T A^{-1} r_ia = -mu_b^T r_ia,   A mu_b = P O^T J[:, b],

        so the derivatives need d adjoint solves (nrhs = d) on top of the d sensitivity solves
        of J, instead of d(d+1)/2 second-order solves or n_obs adjoint solves, all with the
        factor of the forward solve. r_ia is symmetric in (i, a); at a free node n it is
        sum over the element corners (e, k) at n of c_i g_a + g_i c_a with c = kappa_e b_e and
        g = (S_e du_e)_k + (S_e u_e)_k b_e / 2, so it is assembled packed (upper triangle,
        d(d+1)/2 per node) by one symmetric rank-2 update per element corner, and
        K = mu^T R ((d x n_free) times (n_free x d(d+1)/2)) is a GEMM (in slices, below):
        M[i, a, b] = -K[b, (i, a)].
        """
        cdef Py_ssize_t d = self.dim, n = self.system.n_elements, m = self.system.n_local
        cdef Py_ssize_t n_free = self.system.n_free, n_ext = self.system.n_ext
        cdef Py_ssize_t packed = d * (d + 1) // 2
        cdef Py_ssize_t e, k, l, i, a, b, o, p, ek, node, rows
        cdef Py_ssize_t slice_rows = max(1, GEMM_SERIAL_SIZE // (d * packed))
        cdef const Py_ssize_t* ext = &self.system.elem_ext[0]
        cdef const double* S = &self.system.elem_stiffness[0]
        cdef const double* basis = &self.basis[0, 0]
        cdef double* sens = work + self.sens_at       # right-hand sides, column-major (n_ext, d)
        cdef double* du = work + self.du_at           # du_i at node n: du[n * d + i]
        cdef double* J = work + self.jac_at           # (n_obs, d) row-major
        cdef double* R = work + self.rhs2_at          # r_ia at free node n, packed upper
        cdef double* K = work + self.contraction_at   # (d, packed)
        cdef double* c = work + self.vectors_at
        cdef double* g = c + d
        cdef const double* u
        cdef const double* kappa
        cdef const double* be
        cdef const double* Srow
        cdef const double* row
        cdef double* out
        cdef double v, w, ke, ci, gi, z0, scale
        if not self.solve_forward(q, work):
            return 1
        u = self.system.solution(work)
        kappa = work + self.kappa_at

        # (1): right-hand sides gathered per node first (rows of d, contiguous in the element
        # loop), then transposed into LAPACK's one-column-per-mode layout
        memset(du, 0, n_ext * d * sizeof(double))
        for e in range(n):
            be = basis + e * d
            for k in range(m):
                ek = ext[e * m + k]
                if ek >= n_free:
                    continue
                Srow = S + (e * m + k) * m
                v = 0.0
                for l in range(m):
                    v = v + Srow[l] * u[ext[e * m + l]]
                v = -kappa[e] * v
                out = du + ek * d
                for i in range(d):
                    out[i] += v * be[i]
        for node in range(n_free):
            for i in range(d):
                sens[i * n_ext + node] = du[node * d + i]
        if self.system.solve_in_place(work, sens, <int> d, <int> n_ext) != 0:
            return 1
        # back to node rows; the Dirichlet rows stay zero (du vanishes there)
        for node in range(n_free):
            for i in range(d):
                du[node * d + i] = sens[i * n_ext + node]

        # J = O du (the Dirichlet entries of O multiply zeros)
        memset(J, 0, self.n_obs * d * sizeof(double))
        for o in range(self.n_obs):
            for p in range(self.obs_ptr[o], self.obs_ptr[o + 1]):
                ek = self.obs_ext[p]
                if ek < n_free:
                    w = self.obs_weight[p]
                    row = du + ek * d
                    for i in range(d):
                        J[o * d + i] += w * row[i]

        # G: SYRK fills the upper triangle (row-major), mirrored for the full matrix
        _syrk(RowMajor, Upper, Trans, <int> d, <int> self.n_obs, self.noise_precision, J,
              <int> d, 0.0, G, <int> d)
        for a in range(d):
            G[a * d + a] += self.prior_precision
            for b in range(a):
                G[a * d + b] = G[b * d + a]
        if dG == NULL:
            return 0

        # mu_b = A^{-1} O^T J[:, b], column b of sens (the sensitivities now live in du)
        memset(sens, 0, d * n_ext * sizeof(double))
        for o in range(self.n_obs):
            for p in range(self.obs_ptr[o], self.obs_ptr[o + 1]):
                ek = self.obs_ext[p]
                if ek < n_free:
                    w = self.obs_weight[p]
                    for b in range(d):
                        sens[b * n_ext + ek] += w * J[o * d + b]
        if self.system.solve_in_place(work, sens, <int> d, <int> n_ext) != 0:
            return 1

        # R: r_ia per free node, packed upper triangle, by c g^T + g c^T per element corner
        memset(R, 0, n_free * packed * sizeof(double))
        for e in range(n):
            be = basis + e * d
            ke = kappa[e]
            for i in range(d):
                c[i] = ke * be[i]
            for k in range(m):
                ek = ext[e * m + k]
                if ek >= n_free:
                    continue
                Srow = S + (e * m + k) * m
                z0 = 0.0
                for l in range(m):
                    z0 = z0 + Srow[l] * u[ext[e * m + l]]
                z0 = 0.5 * z0
                for a in range(d):
                    g[a] = z0 * be[a]
                for l in range(m):
                    v = Srow[l]
                    row = du + ext[e * m + l] * d      # zero rows at Dirichlet nodes
                    for a in range(d):
                        g[a] += v * row[a]
                out = R + ek * packed
                for i in range(d):
                    ci = c[i]
                    gi = g[i]
                    # out[a - i] for a in [i, d): contiguous, vectorised by the compiler
                    for a in range(i, d):
                        out[a - i] += ci * g[a] + gi * c[a]
                    out += d - i

        # K[b, (i, a)] = mu_b^T r_ia over the unknowns, in slices of the unknowns small enough
        # for OpenBLAS to run each GEMM on the calling thread: at this size its threads cost
        # more than they save, and they compete with the samplers' own (one chain per thread)
        memset(K, 0, d * packed * sizeof(double))
        node = 0
        while node < n_free:
            rows = slice_rows if node + slice_rows <= n_free else n_free - node
            _gemm(RowMajor, NoTrans, NoTrans, <int> d, <int> packed, <int> rows, 1.0,
                  sens + node, <int> n_ext, R + node * packed, <int> packed, 1.0, K, <int> packed)
            node += rows

        # dG[i, a, b] = (M[i, a, b] + M[i, b, a]) / s_y^2 with M[i, a, b] = -K[b, (i, a)]
        scale = -self.noise_precision
        for i in range(d):
            for a in range(d):
                for b in range(a, d):
                    v = scale * (K[b * packed + _packed_index(i, a, d)]
                                 + K[a * packed + _packed_index(i, b, d)])
                    dG[(i * d + a) * d + b] = v
                    dG[(i * d + b) * d + a] = v
        return 0

    # ---------------------------------------------------------------------------------------
    # Python entry points (validated by rnshmc.models.EllipticPDE)

    def solution(self, q):
        """(ok, extended solution, u at the observations) at ``q``."""
        cdef double[::1] qv = self._checked_point(q)
        cdef bint ok
        cdef Py_ssize_t k, p
        scratch_array = self.new_scratch()
        cdef double[::1] scratch = scratch_array
        with nogil:
            ok = self.solve_forward(&qv[0], &scratch[0])
        u = scratch_array[self.system.band_size:self.system.work_size].copy()
        u_obs = np.zeros(self.n_obs)
        cdef double[::1] uv = u
        cdef double[::1] ov = u_obs
        if ok:
            for k in range(self.n_obs):
                for p in range(self.obs_ptr[k], self.obs_ptr[k + 1]):
                    ov[k] += self.obs_weight[p] * uv[self.obs_ext[p]]
        return ok, u, u_obs

    def jacobian(self, q):
        """(ok, d u_obs / d theta) at ``q``: one factor, ``dim`` sensitivity solves (nrhs=dim)."""
        cdef double[::1] qv = self._checked_point(q)
        cdef Py_ssize_t d = self.dim, n = self.system.n_elements, m = self.system.n_local
        cdef Py_ssize_t n_free = self.system.n_free, n_ext = self.system.n_ext
        cdef Py_ssize_t e, a, b, i, k, p, ea
        cdef bint ok
        cdef double va
        cdef const Py_ssize_t* ext = &self.system.elem_ext[0]
        cdef const double* S = &self.system.elem_stiffness[0]
        cdef double* u
        cdef const double* kappa
        cdef double[::1] scratch = self.new_scratch()
        sens = np.zeros((d, n_ext))   # column-major (n_ext, d): one right-hand side per mode
        J = np.zeros((self.n_obs, d))
        cdef double[:, ::1] F = sens
        cdef double[:, ::1] Jv = J
        with nogil:
            ok = self.solve_forward(&qv[0], &scratch[0])
            if ok:
                u = self.system.solution(&scratch[0])
                kappa = &scratch[self.kappa_at]
                # right-hand side of mode i: -sum_e kappa_e basis[e, i] (S_e u_e) over unknowns
                for e in range(n):
                    for a in range(m):
                        ea = ext[e * m + a]
                        if ea >= n_free:
                            continue
                        va = 0.0
                        for b in range(m):
                            va = va + S[(e * m + a) * m + b] * u[ext[e * m + b]]
                        va = va * kappa[e]
                        for i in range(d):
                            F[i, ea] -= va * self.basis_t[i, e]
                self.system.solve_in_place(&scratch[0], &F[0, 0], <int> d, <int> n_ext)
                for k in range(self.n_obs):
                    for p in range(self.obs_ptr[k], self.obs_ptr[k + 1]):
                        ea = self.obs_ext[p]
                        if ea < n_free:
                            for i in range(d):
                                Jv[k, i] += self.obs_weight[p] * F[i, ea]
        return ok, J

    def eval_gauss_newton(self, q, bint derivatives=True):
        """The Gauss-Newton metric at ``q`` through the C path ``gauss_newton``.

        Parameters
        ----------
        q : array_like of shape (dim,)
        derivatives : bool
            Also compute the derivatives of the metric.

        Returns
        -------
        ok : bool
            False where kappa is not finite and positive or the factorisation fails (then
            ``G`` and ``dG`` hold no meaningful values).
        G : ndarray of shape (dim, dim)
            J^T J / noise_sd^2 + I / prior_sd^2, J = d u_obs / d theta.
        dG : ndarray of shape (dim, dim, dim) or None
            dG[i] = dG / dtheta_i (None unless ``derivatives``).
        """
        cdef double[::1] qv = self._checked_point(q)
        cdef Py_ssize_t d = self.dim
        cdef int status
        G = np.empty((d, d))
        dG = np.empty((d, d, d)) if derivatives else None
        cdef double[:, ::1] Gv = G
        cdef double[:, :, ::1] dGv = dG
        cdef double* dG_ptr = &dGv[0, 0, 0] if derivatives else NULL
        cdef double[::1] work = np.empty(self.metric_work_size)
        with nogil:
            status = self.gauss_newton(&qv[0], &Gv[0, 0], dG_ptr, &work[0])
        return status == 0, G, dG

    def time_gauss_newton(self, q, Py_ssize_t repeats, bint derivatives=True):
        """Seconds per ``gauss_newton`` call at ``q`` over ``repeats`` calls from C, reusing
        one work buffer (for benchmarks; compare ``time_evaluations``)."""
        from time import perf_counter
        cdef double[::1] qv = self._checked_point(q)
        cdef Py_ssize_t d = self.dim, r
        cdef double[::1] G = np.empty(d * d)
        cdef double[::1] dG = np.empty(d * d * d)
        cdef double* dG_ptr = &dG[0] if derivatives else NULL
        cdef double[::1] work = np.empty(self.metric_work_size)
        start = perf_counter()
        with nogil:
            for r in range(repeats):
                self.gauss_newton(&qv[0], &G[0], dG_ptr, &work[0])
        return (perf_counter() - start) / max(repeats, 1)


cdef class GaussNewtonMetric(TensorMetric):
    """The Gauss-Newton (Fisher) metric of the elliptic PDE model, J^T J / noise_sd^2 +
    I / prior_sd^2 with its derivatives from second-order sensitivities, all solves on one
    banded factorisation (``EllipticPDETarget.gauss_newton``).

    Parameters
    ----------
    model : EllipticPDETarget
        The C target of an ``rnshmc.models.EllipticPDE`` (shared; the work buffer is this
        object's).
    softabs : float
    """
    cdef EllipticPDETarget model
    cdef object _work
    cdef double* work

    def __init__(self, EllipticPDETarget model, double softabs=0.0):
        super().__init__(model.dim, softabs, "the Gauss-Newton metric")
        self.model = model
        self._work = np.zeros(max(model.metric_work_size, 1))
        cdef double[::1] w = self._work
        self.work = &w[0]

    cdef int compute_derivatives(self, const double* q, double* G, double* dG) except -1 nogil:
        return self.model.gauss_newton(q, G, dG, self.work)
