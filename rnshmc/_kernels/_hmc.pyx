"""The HMC transition loop in C: momentum draw, leapfrog trajectory, Metropolis test.

One ``HMCKernel`` per chain. It holds the chain state (position, the dynamics potential and its
gradient, cached between steps and iterations, and the test potential), the mass matrix and all
scratch buffers, allocated once. ``run`` performs many transitions in one ``nogil`` block.

Two targets, two roles: the *dynamics* target drives the leapfrog; the *test* target's potential
enters the Metropolis test. For plain HMC they are the same object and the test potential is the
one computed with the last gradient (no extra evaluation). For a surrogate sampler the dynamics
are the surrogate's and the test target is evaluated once per transition (density only), or,
with delayed acceptance, only for proposals that pass a first test on the surrogate's energy.

Delayed acceptance (Christen and Fox 2005) is exact because the surrogate leapfrog (with the
momentum flip) is a deterministic, volume-preserving involution for each number of steps:
stage 1 accepts with min(1, exp(-dH_dyn)), stage 2 with min(1, exp(-(dH - dH_dyn))), so the
product satisfies detailed balance for exp(-H).
"""
from libc.math cimport exp, isfinite, INFINITY, NAN
from libc.stdint cimport int64_t
from libc.string cimport memcpy

import numpy as np

from ._blas cimport RowMajor, Lower, NoTrans, _axpy, _dot, _symv, _trmv
from ._random cimport bitgen_t, get_bitgen, random_standard_normal_fill, random_standard_uniform, random_interval
from ._targets cimport CTarget

cdef enum:
    METRIC_IDENTITY = 0
    METRIC_DIAGONAL = 1
    METRIC_DENSE = 2


cdef class HMCKernel:
    """State and transitions of one HMC chain (internal; see ``rnshmc.HMC``).

    Parameters
    ----------
    dynamics : CTarget
        Target whose gradient drives the leapfrog.
    test : CTarget or None
        Target whose potential enters the Metropolis test; None means ``dynamics``.
    max_energy_error : float
        A proposal whose energy error exceeds this (or is not finite) is rejected and recorded
        as a divergence.
    """
    cdef CTarget dynamics
    cdef CTarget test
    cdef bint same_target
    cdef readonly bint delayed_acceptance
    cdef bint need_dynamics_potential
    cdef readonly Py_ssize_t dim
    cdef double max_energy_error
    # mass matrix: inverse mass (diagonal or dense) and a square root of the mass for momenta
    cdef int metric
    cdef object _metric_arrays
    cdef double* inv_mass
    cdef double* mass_sqrt
    # state and scratch, all in one buffer; the pointers into it are swapped on acceptance
    cdef object _buffer
    cdef double* q
    cdef double* grad
    cdef double* q_new
    cdef double* grad_new
    cdef double* p
    cdef double* v
    cdef double U_dyn
    cdef double U_test
    cdef bint has_state
    # n_density_evals counts evaluations of the test target (with a shared target, every
    # gradient evaluation is one too); n_gradient_evals counts gradients of the dynamics target.
    cdef public long long n_density_evals
    cdef public long long n_gradient_evals

    def __init__(self, CTarget dynamics, CTarget test=None, double max_energy_error=1000.0,
                 bint delayed_acceptance=False):
        self.dynamics = dynamics
        self.test = dynamics if test is None else test
        self.same_target = self.test is dynamics
        if self.test.dim != dynamics.dim:
            raise ValueError(f"dynamics and test targets differ in dim: {dynamics.dim} vs {self.test.dim}")
        if delayed_acceptance and self.same_target:
            raise ValueError("delayed acceptance needs a dynamics target other than the test target")
        self.delayed_acceptance = delayed_acceptance
        # the dynamics potential at the end of a trajectory is needed only when it is the test
        # potential or enters the first stage of delayed acceptance
        self.need_dynamics_potential = self.same_target or delayed_acceptance
        self.dim = dynamics.dim
        self.max_energy_error = max_energy_error
        self._buffer = np.zeros((6, self.dim))
        cdef double[:, ::1] b = self._buffer
        self.q, self.grad, self.q_new = &b[0, 0], &b[1, 0], &b[2, 0]
        self.grad_new, self.p, self.v = &b[3, 0], &b[4, 0], &b[5, 0]
        self.has_state = False
        self.set_inverse_mass(None)

    # ------------------------------------------------------------------------------------------
    # mass matrix

    def set_inverse_mass(self, inverse_mass):
        """Set the inverse mass matrix: None (identity), (dim,) diagonal or (dim, dim) dense.

        Momenta are drawn from N(0, M) as p = M^{1/2} z, with M^{1/2} = 1/sqrt(diag) for a
        diagonal and the lower Cholesky factor of M = inverse_mass^{-1} for a dense matrix.
        """
        cdef double[::1] flat_inv, flat_sqrt
        if inverse_mass is None:
            self.metric = METRIC_IDENTITY
            self._metric_arrays = None
            self.inv_mass = NULL
            self.mass_sqrt = NULL
            return
        inverse_mass = np.array(inverse_mass, dtype=np.float64, order="C")  # own copy
        if inverse_mass.shape == (self.dim,):
            if not (np.all(np.isfinite(inverse_mass)) and np.all(inverse_mass > 0)):
                raise ValueError("a diagonal inverse mass matrix must be finite and positive")
            mass_sqrt = 1.0 / np.sqrt(inverse_mass)
            self.metric = METRIC_DIAGONAL
        elif inverse_mass.shape == (self.dim, self.dim):
            if not np.all(np.isfinite(inverse_mass)) or not np.allclose(inverse_mass, inverse_mass.T):
                raise ValueError("a dense inverse mass matrix must be finite and symmetric")
            try:
                mass_sqrt = np.linalg.cholesky(np.linalg.inv(inverse_mass))
            except np.linalg.LinAlgError:
                raise ValueError("the inverse mass matrix is not positive definite") from None
            mass_sqrt = np.ascontiguousarray(mass_sqrt)
            self.metric = METRIC_DENSE
        else:
            raise ValueError(
                f"inverse mass matrix must have shape ({self.dim},) or ({self.dim}, {self.dim}), "
                f"got {inverse_mass.shape}")
        self._metric_arrays = (inverse_mass, mass_sqrt)
        flat_inv = inverse_mass.reshape(-1)
        flat_sqrt = mass_sqrt.reshape(-1)
        self.inv_mass = &flat_inv[0]
        self.mass_sqrt = &flat_sqrt[0]

    # ------------------------------------------------------------------------------------------
    # state

    def set_position(self, q):
        """Move the chain to ``q``, evaluating the potentials and the gradient there.

        Raises ValueError if the log density or its gradient is not finite at ``q``.
        """
        cdef double[::1] qv = np.ascontiguousarray(q, dtype=np.float64)
        if qv.shape[0] != self.dim:
            raise ValueError(f"initial point must have shape ({self.dim},), got {np.shape(q)}")
        cdef double U_dyn, U_test
        grad = np.empty(self.dim)
        cdef double[::1] g = grad
        self.dynamics.potential_and_gradient(&qv[0], &U_dyn, &g[0])
        self.n_gradient_evals += 1
        where = np.array2string(np.asarray(qv), precision=4, threshold=10)
        if self.same_target:
            U_test = U_dyn
            self.n_density_evals += 1
        else:
            self.test.potential(&qv[0], &U_test)
            self.n_density_evals += 1
            if not isfinite(U_test):
                raise ValueError(f"the log density is not finite ({-U_test}) at the initial point {where}")
        if not isfinite(U_dyn):
            role = "log density" if self.same_target else "dynamics log density"
            raise ValueError(f"the {role} is not finite ({-U_dyn}) at the initial point {where}")
        bad = np.flatnonzero(~np.isfinite(grad))
        if bad.size:
            raise ValueError(
                f"the gradient of the log density is not finite at the initial point {where} "
                f"(coordinates {bad.tolist()[:10]})")
        memcpy(self.q, &qv[0], self.dim * sizeof(double))
        memcpy(self.grad, &g[0], self.dim * sizeof(double))
        self.U_dyn = U_dyn
        self.U_test = U_test
        self.has_state = True

    @property
    def position(self):
        return np.array(<double[:self.dim]> self.q)

    @property
    def log_density(self):
        return -self.U_test

    @property
    def gradient(self):
        """Gradient of the dynamics potential at the current position."""
        return np.array(<double[:self.dim]> self.grad)

    # ------------------------------------------------------------------------------------------
    # the C parts

    cdef void draw_momentum(self, bitgen_t* bitgen) noexcept nogil:
        cdef Py_ssize_t i
        random_standard_normal_fill(bitgen, self.dim, self.p)
        if self.metric == METRIC_DIAGONAL:
            for i in range(self.dim):
                self.p[i] *= self.mass_sqrt[i]
        elif self.metric == METRIC_DENSE:
            _trmv(RowMajor, Lower, NoTrans, <int> self.dim, self.mass_sqrt, <int> self.dim,
                  self.p, 1)

    cdef double kinetic_and_velocity(self) noexcept nogil:
        """v = M^{-1} p; returns p^T M^{-1} p / 2."""
        cdef Py_ssize_t i
        cdef int n = <int> self.dim
        if self.metric == METRIC_IDENTITY:
            memcpy(self.v, self.p, self.dim * sizeof(double))
        elif self.metric == METRIC_DIAGONAL:
            for i in range(self.dim):
                self.v[i] = self.inv_mass[i] * self.p[i]
        else:
            _symv(RowMajor, Lower, n, 1.0, self.inv_mass, n, self.p, 1, 0.0, self.v, 1)
        return 0.5 * _dot(n, self.p, 1, self.v, 1)

    cdef Py_ssize_t trajectory(self, double step_size, Py_ssize_t n_steps, double* U_dyn_end,
                               double* kinetic_end) except -1 nogil:
        """Leapfrog from (q, p) into (q_new, p) with the gradient cached between steps.

        Only the last step evaluates the dynamics potential, and only if it is needed (else
        U_dyn_end is NaN). Stops early at a non-finite gradient or end potential, setting
        U_dyn_end and kinetic_end to +inf (the proposal is then rejected). Returns the number of
        steps taken.
        """
        cdef Py_ssize_t step
        cdef int n = <int> self.dim
        cdef double half = 0.5 * step_size
        cdef double U = NAN
        memcpy(self.q_new, self.q, self.dim * sizeof(double))
        memcpy(self.grad_new, self.grad, self.dim * sizeof(double))
        for step in range(n_steps):
            _axpy(n, -half, self.grad_new, 1, self.p, 1)
            self.kinetic_and_velocity()
            _axpy(n, step_size, self.v, 1, self.q_new, 1)
            if step == n_steps - 1 and self.need_dynamics_potential:
                self.dynamics.potential_and_gradient(self.q_new, &U, self.grad_new)
                if self.same_target:
                    self.n_density_evals += 1
            else:
                self.dynamics.gradient(self.q_new, self.grad_new)
                if self.same_target:  # a model's gradient evaluates its density as well
                    self.n_density_evals += 1
            self.n_gradient_evals += 1
            if (not isfinite(_dot(n, self.grad_new, 1, self.grad_new, 1))
                    or (self.need_dynamics_potential and step == n_steps - 1 and not isfinite(U))):
                U_dyn_end[0] = INFINITY
                kinetic_end[0] = INFINITY
                return step + 1
            _axpy(n, -half, self.grad_new, 1, self.p, 1)
        U_dyn_end[0] = U
        kinetic_end[0] = self.kinetic_and_velocity()
        return n_steps

    cdef double test_potential_of_proposal(self, double U_dyn_new) except? -1 nogil:
        cdef double U
        if self.same_target:
            return U_dyn_new
        self.test.potential(self.q_new, &U)
        self.n_density_evals += 1
        return U

    cdef int transitions(self, bitgen_t* bitgen, Py_ssize_t n_iter, double step_size,
                         Py_ssize_t n_steps, bint jitter, double* samples, double* log_density,
                         unsigned char* accepted, double* accept_prob, unsigned char* diverging,
                         double* energy, int64_t* steps_taken, double* gradients) except -1 nogil:
        cdef Py_ssize_t it, length
        cdef double kinetic0, H0, H1, dH, dH_dyn, U_dyn_new, U_test_new, kinetic_new, prob
        cdef bint accept, diverged
        cdef double* tmp
        for it in range(n_iter):
            self.draw_momentum(bitgen)
            length = <Py_ssize_t> random_interval(bitgen, n_steps - 1) + 1 if jitter else n_steps
            kinetic0 = self.kinetic_and_velocity()
            H0 = self.U_test + kinetic0
            length = self.trajectory(step_size, length, &U_dyn_new, &kinetic_new)
            diverged = not isfinite(kinetic_new)
            U_test_new = INFINITY
            if self.delayed_acceptance and not diverged:
                # stage 1 on the surrogate energy: a rejection here costs no exact evaluation
                dH_dyn = (U_dyn_new + kinetic_new) - (self.U_dyn + kinetic0)
                diverged = not isfinite(dH_dyn) or dH_dyn > self.max_energy_error
                prob = 0.0 if diverged else (1.0 if dH_dyn <= 0.0 else exp(-dH_dyn))
                accept = random_standard_uniform(bitgen) < prob
                if accept:
                    U_test_new = self.test_potential_of_proposal(U_dyn_new)
                    dH = U_test_new + kinetic_new - H0
                    if not isfinite(dH) or dH > self.max_energy_error:
                        diverged = True
                        prob = 0.0
                        accept = False
                    else:
                        # stage 2 corrects for the surrogate's energy error
                        prob *= 1.0 if dH - dH_dyn <= 0.0 else exp(-(dH - dH_dyn))
                        accept = random_standard_uniform(bitgen) < exp(dH_dyn - dH)
            else:
                if not diverged:
                    U_test_new = self.test_potential_of_proposal(U_dyn_new)
                dH = U_test_new + kinetic_new - H0
                diverged = not isfinite(dH) or dH > self.max_energy_error
                prob = 0.0 if diverged else (1.0 if dH <= 0.0 else exp(-dH))
                accept = random_standard_uniform(bitgen) < prob
            diverging[it] = diverged
            accept_prob[it] = prob
            if accept:
                tmp = self.q; self.q = self.q_new; self.q_new = tmp
                tmp = self.grad; self.grad = self.grad_new; self.grad_new = tmp
                self.U_dyn = U_dyn_new
                self.U_test = U_test_new
                accepted[it] = 1
                energy[it] = U_test_new + kinetic_new
            else:
                accepted[it] = 0
                energy[it] = H0
            memcpy(&samples[it * self.dim], self.q, self.dim * sizeof(double))
            if gradients != NULL:
                memcpy(&gradients[it * self.dim], self.grad, self.dim * sizeof(double))
            log_density[it] = -self.U_test
            steps_taken[it] = length
        return 0

    # ------------------------------------------------------------------------------------------
    # Python entry points

    def run(self, generator, Py_ssize_t n_iter, double step_size, Py_ssize_t n_steps, bint jitter,
            double[:, ::1] samples, double[::1] log_density, unsigned char[::1] accepted,
            double[::1] accept_prob, unsigned char[::1] diverging, double[::1] energy,
            int64_t[::1] steps_taken, double[:, ::1] gradients=None):
        """Run ``n_iter`` transitions, writing row ``i`` of each output for transition ``i``.

        Outputs are preallocated by the caller (no allocation here); ``generator`` is a
        ``numpy.random.Generator`` whose bit generator is locked for the whole call.
        ``gradients``, if given, receives the dynamics gradient at each kept state (the exact
        gradient for plain HMC: training data for a surrogate).
        """
        if not self.has_state:
            raise RuntimeError("set_position must be called before run")
        if n_iter < 0 or n_steps < 1 or not (step_size > 0.0 and isfinite(step_size)):
            raise ValueError("need n_iter >= 0, n_steps >= 1 and a finite step_size > 0")
        if (samples.shape[0] < n_iter or samples.shape[1] != self.dim or log_density.shape[0] < n_iter
                or accepted.shape[0] < n_iter or accept_prob.shape[0] < n_iter
                or diverging.shape[0] < n_iter or energy.shape[0] < n_iter
                or steps_taken.shape[0] < n_iter
                or (gradients is not None and (gradients.shape[0] < n_iter
                                               or gradients.shape[1] != self.dim))):
            raise ValueError("output buffers are too small")
        if n_iter == 0:
            return
        bit_generator = generator.bit_generator
        cdef bitgen_t* bitgen = get_bitgen(bit_generator)
        cdef double* gradient_rows = NULL if gradients is None else &gradients[0, 0]
        with bit_generator.lock:
            with nogil:
                self.transitions(bitgen, n_iter, step_size, n_steps, jitter, &samples[0, 0],
                                 &log_density[0], &accepted[0], &accept_prob[0], &diverging[0],
                                 &energy[0], &steps_taken[0], gradient_rows)

    def energy_error_of_one_step(self, generator, double step_size):
        """Energy error H(end) - H(start) of a single leapfrog step with a fresh momentum.

        The chain state is not changed (used by the initial step-size heuristic).
        Returns +inf for a non-finite end point.
        """
        if not self.has_state:
            raise RuntimeError("set_position must be called before energy_error_of_one_step")
        bit_generator = generator.bit_generator
        cdef bitgen_t* bitgen = get_bitgen(bit_generator)
        cdef double H0, U_dyn_new, kinetic_new
        cdef double U_test_new = INFINITY
        with bit_generator.lock:
            with nogil:
                self.draw_momentum(bitgen)
                H0 = self.U_test + self.kinetic_and_velocity()
                self.trajectory(step_size, 1, &U_dyn_new, &kinetic_new)
                if isfinite(kinetic_new):
                    U_test_new = self.test_potential_of_proposal(U_dyn_new)
        dH = U_test_new + kinetic_new - H0
        return dH if np.isfinite(dH) else np.inf

    def leapfrog(self, q, p, double step_size, Py_ssize_t n_steps):
        """Deterministic leapfrog from (q, p) (for tests): returns (q', p', U_dyn', U_test').

        The chain state is restored afterwards.
        """
        saved = (self.position, self.gradient, self.U_dyn, self.U_test, self.has_state)
        self.set_position(q)
        cdef double[::1] pv = np.ascontiguousarray(p, dtype=np.float64)
        if pv.shape[0] != self.dim:
            raise ValueError(f"p must have shape ({self.dim},)")
        memcpy(self.p, &pv[0], self.dim * sizeof(double))
        cdef double U_dyn_new, U_test_new, kinetic_new
        self.trajectory(step_size, n_steps, &U_dyn_new, &kinetic_new)
        U_test_new = self.test_potential_of_proposal(U_dyn_new) if isfinite(kinetic_new) else INFINITY
        result = (np.array(<double[:self.dim]> self.q_new), np.array(<double[:self.dim]> self.p),
                  U_dyn_new, U_test_new)
        cdef double[::1] q0, g0
        q0, g0, self.U_dyn, self.U_test, self.has_state = saved
        memcpy(self.q, &q0[0], self.dim * sizeof(double))
        memcpy(self.grad, &g0[0], self.dim * sizeof(double))
        return result
