"""One chain's transitions in C: momentum draw, trajectory, acceptance step, and the in-loop
warm-up adaptation (dual averaging of the step size, running variance of the positions).

A ``Chain`` composes the transition parts: a *metric* (``_metrics``), an *integrator*
(``_integrators``) and the acceptance step below, over two targets in two roles: the
*dynamics* target drives the integrator, the *test* target's potential enters the Metropolis
test. For plain HMC they are the same object and the test potential is the one computed with
the last gradient (no extra evaluation). For a surrogate sampler the dynamics are the
surrogate's and the test target is evaluated once per transition (density only), or, with
delayed acceptance, only for proposals that pass a first test on the surrogate's energy.

The acceptance step takes the log-Jacobian of the proposal map (zero for symplectic
integrators, not for L2HMC's learned leapfrog), and a proposal whose implicit solves did not
converge is a counted rejection (never accepted: the map would not be reversible).

With a position-dependent metric G(q) (RMHMC, RNS-RMHMC) the chain targets
exp(-H(q, p)) with H = U_test(q) + 1/2 log det G(q) + 1/2 p^T G(q)^{-1} p, whose q-marginal is
exp(-U_test(q)) whatever G is (the p-integral of exp(-1/2 log det G - K) is a constant). The
momentum draw p ~ N(0, G(q)) is a Gibbs step of that joint density; the generalized leapfrog
on U_dyn + 1/2 log det G + K is, with the momentum flip, a volume-preserving involution for any
smooth U_dyn and G (the surrogate's potential and metric in RNS-RMHMC); so the Metropolis test
must use the same G and its 1/2 log det in both energies and the true U_test: the metric's
``kinetic`` supplies both terms at the start and the integrator's ``kinetic_end`` at the
end. The metric is refactorised at the chain's state before each momentum draw.

Delayed acceptance (Christen and Fox 2005) is exact because the surrogate flow with the
momentum flip is a deterministic, volume-preserving involution for each number of steps: stage
1 accepts with min(1, exp(-dH_dyn)), stage 2 with min(1, exp(-(dH - dH_dyn))), so the product
satisfies detailed balance for exp(-H).

The chain owns every mutable buffer (state, proposal, scratch of both targets), so targets can
be shared between threads. The run loop, its outputs (one ``TRANSITION`` record per
transition) and the stop flag are the chain base's (``_chain.BaseChain``); a ``Chain`` is its
transition and its state.
"""
from libc.math cimport exp, log, pow, sqrt, isfinite, INFINITY, NAN
from libc.stdint cimport int64_t
from libc.string cimport memcmp, memcpy, memset

import numpy as np

from ._blas cimport _axpy, _dot
from ._chain cimport BaseChain, RunSettings, Transition
from ._chain import NonFiniteStart
from ._integrators cimport Integrator, Leapfrog, TrajectoryInfo, widen_bound
from ._metrics cimport Metric
from ._random cimport bitgen_t, get_bitgen, random_standard_uniform, random_interval
from ._targets cimport CTarget


cdef struct DualAveraging:
    # Nesterov dual averaging of log(step size) (Hoffman and Gelman 2014), Stan's constants
    double target_accept, gamma, t0, kappa
    double mu, log_step, log_step_bar, error_sum
    int64_t count

DUAL_AVERAGING_FIELDS = ("target_accept", "gamma", "t0", "kappa", "mu", "log_step",
                         "log_step_bar", "error_sum", "count")


cdef inline double dual_averaging_update(DualAveraging* da, double accept_prob) noexcept nogil:
    """Feed one acceptance probability; returns the next step size."""
    cdef double t, weight
    da.count += 1
    t = <double> da.count
    da.error_sum += da.target_accept - accept_prob
    da.log_step = da.mu - sqrt(t) / da.gamma * da.error_sum / (t + da.t0)
    weight = pow(t, -da.kappa)
    da.log_step_bar = weight * da.log_step + (1.0 - weight) * da.log_step_bar
    return exp(da.log_step)


cdef class Chain(BaseChain):
    """State and transitions of one chain (internal; the samplers build it).

    Parameters
    ----------
    dynamics : CTarget
        Target whose gradient drives the integrator.
    test : CTarget or None
        Target whose potential enters the Metropolis test; None means ``dynamics``.
    metric : Metric
        This chain's metric (not shared: warm-up adapts it).
    integrator : Integrator
    max_energy_error : float
        A proposal whose energy error exceeds this (or is not finite) is rejected and recorded
        as a divergence.
    delayed_acceptance : bool
        The two-stage test (needs a test target other than the dynamics target).
    """
    cdef readonly CTarget dynamics
    cdef readonly CTarget test
    cdef readonly Metric metric
    cdef readonly Integrator integrator
    cdef bint same_target
    cdef readonly bint delayed_acceptance
    cdef bint need_dynamics_potential
    cdef double max_energy_error
    # state and proposal buffers in one array (pointers q, grad, q_new and grad_new swapped on
    # acceptance), and the scratch of whichever target is evaluated (one at a time); with a
    # shared target, every gradient evaluation counts as a density evaluation too
    cdef object _buffer
    cdef object _scratch
    cdef double* grad_new
    cdef double* p
    cdef double* v
    cdef double* scratch
    cdef double U_dyn
    cdef double U_test
    cdef public long long n_solver_failures
    cdef readonly Py_ssize_t trajectory_rows   # rows written by the last run's trajectory record
    cdef Leapfrog recorder                     # the integrator, while a run records trajectories
    # a Riemannian metric's evaluations (G, and its derivative terms) are counted by the metric
    # object; these offsets let a restored state continue its counts
    cdef long long metric_evals_offset
    cdef long long metric_derivative_evals_offset
    # warm-up adaptation
    cdef DualAveraging da
    cdef object _variance
    cdef double* var_mean
    cdef double* var_m2
    cdef public long long variance_count
    # the warm-up's probe bound (bound_probes; _integrators.widen_bound)
    cdef object _bound
    cdef double* bound
    cdef readonly bint bounded

    def __init__(self, CTarget dynamics, CTarget test=None, Metric metric=None,
                 Integrator integrator=None, double max_energy_error=1000.0,
                 bint delayed_acceptance=False):
        self.dynamics = dynamics
        self.test = dynamics if test is None else test
        self.same_target = self.test is dynamics
        if self.test.dim != dynamics.dim:
            raise ValueError(f"dynamics and test targets differ in dim: {dynamics.dim} vs {self.test.dim}")
        if delayed_acceptance and self.same_target:
            raise ValueError("delayed acceptance needs a dynamics target other than the test target")
        if metric is None or integrator is None:
            raise TypeError("a Chain needs a metric and an integrator")
        if metric.dim != dynamics.dim:
            raise ValueError(f"the metric has dim {metric.dim}, the targets {dynamics.dim}")
        if metric.position_dependent != integrator.riemannian:
            raise ValueError(f"{type(integrator).__name__} cannot integrate with a "
                             f"{type(metric).__name__}: a position-dependent metric needs the "
                             "generalized leapfrog, a constant one the leapfrog")
        self.metric = metric
        self.integrator = integrator
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
        self._scratch = np.empty(max(dynamics.scratch_size, self.test.scratch_size, 1))
        cdef double[::1] s = self._scratch
        self.scratch = &s[0]
        self._variance = np.zeros((2, self.dim))
        cdef double[:, ::1] var = self._variance
        self.var_mean, self.var_m2 = &var[0, 0], &var[1, 0]
        self._bound = np.zeros((4, self.dim))
        cdef double[:, ::1] bound = self._bound
        self.bound = &bound[0, 0]
        self.bounded = False
        self.has_state = False
        self.step_size = NAN

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
        self.dynamics.potential_and_gradient(&qv[0], &U_dyn, &g[0], self.scratch)
        self.n_gradient_evals += 1
        where = np.array2string(np.asarray(qv), precision=4, threshold=10)
        if self.same_target:
            U_test = U_dyn
            self.n_density_evals += 1
        else:
            self.test.potential(&qv[0], &U_test, self.scratch)
            self.n_density_evals += 1
            if not isfinite(U_test):
                raise NonFiniteStart(f"the log density is not finite ({-U_test}) at the initial point {where}")
        if not isfinite(U_dyn):
            role = "log density" if self.same_target else "dynamics log density"
            raise NonFiniteStart(f"the {role} is not finite ({-U_dyn}) at the initial point {where}")
        bad = np.flatnonzero(~np.isfinite(grad))
        if bad.size:
            raise NonFiniteStart(
                f"the gradient of the log density is not finite at the initial point {where} "
                f"(coordinates {bad.tolist()[:10]})")
        if self.metric.position_dependent and self.metric.update(&qv[0], self.scratch) != 0:
            message = getattr(self.metric, "indefinite_message", lambda: None)()
            raise ValueError(message or f"the metric is not defined at the initial point {where}")
        memcpy(self.q, &qv[0], self.dim * sizeof(double))
        memcpy(self.grad, &g[0], self.dim * sizeof(double))
        self.U_dyn = U_dyn
        self.U_test = U_test
        self.has_state = True

    def refresh_dynamics(self):
        """Evaluate the dynamics potential and gradient at the chain's state again (after the
        dynamics target changed in place: an online install), counting one gradient; the
        test potential is kept."""
        if not self.has_state:
            raise RuntimeError("set_position must be called before refresh_dynamics")
        cdef double U
        self.dynamics.potential_and_gradient(self.q, &U, self.grad, self.scratch)
        self.U_dyn = U
        self.n_gradient_evals += 1

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

    def _metric_counts(self):
        return (getattr(self.metric, "n_updates", 0),
                getattr(self.metric, "n_derivative_updates", 0))

    @property
    def n_metric_evals(self):
        """Evaluations of a position-dependent metric G(q) (0 for a constant one)."""
        return self.metric_evals_offset + self._metric_counts()[0]

    @property
    def n_metric_derivative_evals(self):
        """Evaluations of a position-dependent metric's derivative terms."""
        return self.metric_derivative_evals_offset + self._metric_counts()[1]

    def get_state(self):
        """The chain's state as plain arrays and numbers (see ``set_state``)."""
        if not self.has_state:
            raise RuntimeError("the chain has no state yet")
        cdef dict da = self.da  # Cython converts the struct to a dict
        return dict(position=self.position, gradient=self.gradient,
                    potential_dynamics=self.U_dyn, potential_test=self.U_test,
                    step_size=self.step_size, n_density_evals=self.n_density_evals,
                    n_gradient_evals=self.n_gradient_evals,
                    n_solver_failures=self.n_solver_failures,
                    n_metric_evals=self.n_metric_evals,
                    n_metric_derivative_evals=self.n_metric_derivative_evals, dual_averaging=da,
                    variance_count=self.variance_count,
                    variance_mean=self._variance[0].copy(), variance_m2=self._variance[1].copy(),
                    bound=self._bound.copy() if self.bounded else np.zeros((0, self.dim)))

    def set_state(self, state, bint counters=True):
        """Restore a state of ``get_state`` exactly (no evaluation: the cached potentials and
        gradient are taken as they were, so a continued chain repeats the uninterrupted one).
        ``counters=False`` (a new phase from where the last one ended) starts the evaluation
        counters from zero instead, and without the probe bound (see ``bound_probes``)."""
        position = np.asarray(state["position"], dtype=np.float64)
        gradient = np.asarray(state["gradient"], dtype=np.float64)
        mean = np.asarray(state["variance_mean"], dtype=np.float64)
        m2 = np.asarray(state["variance_m2"], dtype=np.float64)
        for name, a in (("position", position), ("gradient", gradient),
                        ("variance_mean", mean), ("variance_m2", m2)):
            if a.shape != (self.dim,):
                raise ValueError(f"state[{name!r}] must have shape ({self.dim},), got {a.shape}")
        self._buffer[0] = position
        self._buffer[1] = gradient
        # the pointers may have been swapped: point them back at rows 0 and 1
        cdef double[:, ::1] b = self._buffer
        self.q, self.grad, self.q_new = &b[0, 0], &b[1, 0], &b[2, 0]
        self.grad_new = &b[3, 0]
        self.U_dyn = float(state["potential_dynamics"])
        self.U_test = float(state["potential_test"])
        self.step_size = float(state["step_size"])
        self.n_density_evals = int(state["n_density_evals"]) if counters else 0
        self.n_gradient_evals = int(state["n_gradient_evals"]) if counters else 0
        self.n_solver_failures = int(state["n_solver_failures"]) if counters else 0
        metric, derivatives = self._metric_counts()
        self.metric_evals_offset = -metric
        self.metric_derivative_evals_offset = -derivatives
        if counters:
            self.metric_evals_offset += int(state.get("n_metric_evals", 0))
            self.metric_derivative_evals_offset += int(state.get("n_metric_derivative_evals", 0))
        da = state["dual_averaging"]
        self.da = {name: da[name] for name in DUAL_AVERAGING_FIELDS}  # and a dict to the struct
        self.variance_count = int(state["variance_count"])
        self._variance[0] = mean
        self._variance[1] = m2
        bound = state.get("bound") if counters else None  # (older checkpoints have none)
        self.bounded = bound is not None and np.size(bound) > 0
        if self.bounded:
            self._bound[:] = np.asarray(bound, dtype=np.float64).reshape(4, self.dim)
        self.has_state = True

    # ------------------------------------------------------------------------------------------
    # warm-up adaptation

    def bound_probes(self, bint on):
        """Bound where the warm-up's trajectories go (``on``), or stop bounding them.

        While bounded, a leapfrog step that would leave a box around the points the chain has
        seen is stopped there as a divergence, before the model is evaluated at that point:
        the box is the bounding box of the chain's start and of every step of its trajectories
        that did not diverge, widened on each side by ``PROBE_MARGIN`` (4) times its width in
        that coordinate (at least ``PROBE_MARGIN``), so it grows as the trajectories go. A
        trajectory of steps small next to what the chain has seen is never stopped; a step
        that jumps far past all of it is. Early in a warm-up a step size or metric that does not fit the posterior yet
        makes a trajectory diverge exponentially; without the bound the model is asked for
        points absurdly far out (where a stiff ODE solve may never return). The bound makes
        the transitions depend on the chain's past, so it is for the warm-up only: a new phase
        starts without it (``set_state(..., counters=False)``).
        """
        if on and not self.has_state:
            raise RuntimeError("set_position must be called before bound_probes")
        self.bounded = on
        if on:
            self._bound[0] = self._bound[1] = self.position
            widen_bound(self.bound, self.dim, self.q)

    def restart_step_size_adaptation(self, double step_size, double target_accept):
        """Start dual averaging from ``step_size`` (shrinking towards log(10 step_size))."""
        if not (0.0 < target_accept < 1.0):
            raise ValueError(f"target_accept must be in (0, 1), got {target_accept}")
        self.da.target_accept = target_accept
        self.da.gamma, self.da.t0, self.da.kappa = 0.05, 10.0, 0.75
        self.da.mu = log(10.0 * step_size)
        self.da.log_step = log(step_size)
        self.da.log_step_bar = 0.0
        self.da.error_sum = 0.0
        self.da.count = 0
        self.step_size = step_size

    @property
    def final_step_size(self):
        """The averaged step size to sample with once warm-up ends."""
        return exp(self.da.log_step_bar) if self.da.count else exp(self.da.log_step)

    def take_variance(self):
        """(number of positions, their per-coordinate variance) accumulated since the last call
        (Welford), and start a new accumulation."""
        n = self.variance_count
        variance = self._variance[1] / max(n - 1, 1)
        self.variance_count = 0
        self._variance[:] = 0.0
        return n, variance

    # ------------------------------------------------------------------------------------------
    # the transition

    cdef double test_potential_of_proposal(self, double U_dyn_new) except? -1 nogil:
        cdef double U
        if self.same_target:
            return U_dyn_new
        self.test.potential(self.q_new, &U, self.scratch)
        self.n_density_evals += 1
        return U

    cdef int prepare_metric(self) except -1 nogil:
        """Factorise a position-dependent metric at the chain's state (a rejected proposal
        left it at the proposal)."""
        if self.metric.position_dependent and self.metric.update(self.q, self.scratch) != 0:
            with gil:  # it was defined when the state was accepted: the metric is not a function
                raise FloatingPointError("the metric is no longer defined at the chain's state "
                                         "(a metric that changes between calls?)")
        return 0

    cdef int trajectory(self, Py_ssize_t n_steps, double start_energy, double* U_dyn_new,
                        double* kinetic_new, TrajectoryInfo* info) except -1 nogil:
        """Integrate from (q, p) into (q_new, p), counting the evaluations; the leapfrog
        stops at a step whose energy of the dynamics exceeds ``start_energy`` (that of (q, p))
        by more than ``max_energy_error``, or that leaves the probe bound."""
        memcpy(self.q_new, self.q, self.dim * sizeof(double))
        memcpy(self.grad_new, self.grad, self.dim * sizeof(double))
        self.integrator.energy_limit = (start_energy + self.max_energy_error
                                        if isfinite(start_energy) else INFINITY)
        self.integrator.bound = self.bound if self.bounded else NULL
        info.max_energy = -INFINITY
        self.integrator.run(self.dynamics, self.metric, self.scratch, self.q_new, self.p,
                            self.grad_new, self.v, self.step_size, n_steps,
                            self.need_dynamics_potential, U_dyn_new, kinetic_new, info)
        self.n_gradient_evals += info.n_gradients
        if self.same_target:  # a model's gradient evaluates its density as well
            self.n_density_evals += info.n_gradients
        return 0

    cdef int transition(self, bitgen_t* bitgen, const RunSettings* settings,
                        Transition* record) except -1 nogil:
        cdef Py_ssize_t length
        cdef double kinetic0, H0, H0_dyn, dH, dH_dyn, U_dyn_new, U_test_new, kinetic_new, prob
        cdef bint accept, diverged, failed
        cdef double* tmp
        cdef TrajectoryInfo info
        self.prepare_metric()
        self.metric.draw_momentum(bitgen, self.p)
        self.integrator.begin(bitgen)
        length = (<Py_ssize_t> random_interval(bitgen, settings.n_steps - 1) + 1
                  if settings.jitter else settings.n_steps)
        kinetic0 = self.metric.kinetic(self.p, self.v)
        H0 = self.U_test + kinetic0
        H0_dyn = self.U_dyn + kinetic0
        self.trajectory(length, H0_dyn, &U_dyn_new, &kinetic_new, &info)
        diverged = info.diverged
        if not diverged and info.max_energy > -INFINITY:
            # The leapfrog stopped any trajectory that rose max_energy_error above its start;
            # the reversed trajectory, from the end, must have been stopped by the same rule:
            # the rule is then a function of the trajectory's set of states, and the proposal
            # stays an involution (docs/algorithms.md, section 1)
            diverged = (max(info.max_energy, H0_dyn) - min(H0_dyn, U_dyn_new + kinetic_new)
                        > self.max_energy_error)
        failed = not info.converged
        if failed:
            self.n_solver_failures += 1
        U_test_new = INFINITY
        if failed:
            prob = 0.0
            accept = False
        elif self.delayed_acceptance and not diverged:
            # stage 1 on the surrogate energy: a rejection here costs no exact evaluation
            dH_dyn = (U_dyn_new + kinetic_new) - (self.U_dyn + kinetic0) - info.log_jacobian
            diverged = not isfinite(dH_dyn) or dH_dyn > self.max_energy_error
            prob = 0.0 if diverged else (1.0 if dH_dyn <= 0.0 else exp(-dH_dyn))
            accept = random_standard_uniform(bitgen) < prob
            if accept:
                U_test_new = self.test_potential_of_proposal(U_dyn_new)
                dH = U_test_new + kinetic_new - H0 - info.log_jacobian
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
            dH = U_test_new + kinetic_new - H0 - info.log_jacobian
            diverged = not isfinite(dH) or dH > self.max_energy_error
            prob = 0.0 if diverged else (1.0 if dH <= 0.0 else exp(-dH))
            accept = random_standard_uniform(bitgen) < prob
        self.U_proposal = U_test_new if isfinite(U_test_new) else NAN
        record.diverging = diverged
        record.solver_failed = failed
        record.solver_iterations = info.iterations
        record.tree_depth = 0
        record.accept_prob = prob
        record.step_size = self.step_size
        record.n_steps = info.n_steps
        if accept:
            tmp = self.q; self.q = self.q_new; self.q_new = tmp
            tmp = self.grad; self.grad = self.grad_new; self.grad_new = tmp
            self.U_dyn = U_dyn_new
            self.U_test = U_test_new
            record.accepted = 1
            record.energy = U_test_new + kinetic_new
        else:
            record.accepted = 0
            record.energy = H0
        record.log_density = -self.U_test
        self.adapt(settings, record)
        return 0

    cdef inline void adapt(self, const RunSettings* settings,
                           const Transition* record) noexcept nogil:
        """The warm-up's adaptation after a transition, from what it recorded: dual averaging
        of the step size, the running variance of the positions."""
        if settings.adapt_step_size:
            self.step_size = dual_averaging_update(&self.da, record.accept_prob)
        if settings.accumulate_variance:
            self.add_to_variance()

    cdef void add_to_variance(self) noexcept nogil:
        cdef Py_ssize_t i
        cdef double delta
        self.variance_count += 1
        for i in range(self.dim):
            delta = self.q[i] - self.var_mean[i]
            self.var_mean[i] += delta / self.variance_count
            self.var_m2[i] += delta * (self.q[i] - self.var_mean[i])

    # ------------------------------------------------------------------------------------------
    # the run loop's hooks (the loop is BaseChain.run)

    cdef int check_run(self, Py_ssize_t n_iter, const RunSettings* settings, bint gradients,
                       bint trajectory) except -1:
        if n_iter < 0 or settings.n_steps < 1 or not (self.step_size > 0.0
                                                       and isfinite(self.step_size)):
            raise ValueError("need n_iter >= 0, n_steps >= 1 and a finite step_size > 0")
        if settings.adapt_step_size and self.da.target_accept == 0.0:
            raise RuntimeError("restart_step_size_adaptation must be called before adapting")
        return 0

    cdef int start_recording(self, object trajectory) except -1:
        cdef double[:, ::1] rows
        self.trajectory_rows = 0
        if trajectory is None:
            return 0
        if not isinstance(self.integrator, Leapfrog):
            raise ValueError("only the leapfrog records trajectories")
        rows = trajectory
        if rows.shape[1] != 2 * self.dim + 1:
            raise ValueError(f"trajectory must have {2 * self.dim + 1} columns")
        self.recorder = <Leapfrog> self.integrator
        if rows.shape[0] > 0:
            self.recorder.record = &rows[0, 0]
        self.recorder.record_capacity = rows.shape[0]
        self.recorder.record_count = 0
        self.recorded = &self.recorder.record_count
        return 0

    cdef void stop_recording(self) noexcept:
        if self.recorder is not None:
            self.trajectory_rows = self.recorder.record_count
            self.recorder.record = NULL
            self.recorder.record_capacity = self.recorder.record_count = 0
            self.recorder = None
        self.recorded = NULL

    # ------------------------------------------------------------------------------------------
    # Python entry points

    def energy_error_of_one_step(self, generator, double step_size):
        """Energy error H(end) - H(start) of a single step with a fresh momentum.

        The chain state (and its step size) is not changed (used by the initial step-size
        heuristic). Returns +inf for a non-finite end point.
        """
        if not self.has_state:
            raise RuntimeError("set_position must be called before energy_error_of_one_step")
        bit_generator = generator.bit_generator
        cdef bitgen_t* bitgen = get_bitgen(bit_generator)
        cdef double H0, kinetic0, U_dyn_new, kinetic_new, saved = self.step_size
        cdef double U_test_new = INFINITY
        cdef TrajectoryInfo info
        self.step_size = step_size
        try:
            with bit_generator.lock, nogil:
                self.prepare_metric()
                self.metric.draw_momentum(bitgen, self.p)
                kinetic0 = self.metric.kinetic(self.p, self.v)
                H0 = self.U_test + kinetic0
                self.trajectory(1, self.U_dyn + kinetic0, &U_dyn_new, &kinetic_new, &info)
                if isfinite(kinetic_new) and info.converged:
                    U_test_new = self.test_potential_of_proposal(U_dyn_new)
        finally:
            self.step_size = saved
        dH = U_test_new + kinetic_new - H0 - info.log_jacobian
        return dH if np.isfinite(dH) else np.inf

    def integrate(self, q, p, double step_size, Py_ssize_t n_steps):
        """Deterministic trajectory from (q, p) (for tests): returns (q', p', U_dyn', U_test').

        The chain state is restored afterwards.
        """
        cdef double[::1] pv = np.ascontiguousarray(p, dtype=np.float64)
        if pv.shape[0] != self.dim:
            raise ValueError(f"p must have shape ({self.dim},)")
        saved = self.get_state() if self.has_state else None
        counts = (self.n_density_evals, self.n_gradient_evals)
        self.set_position(q)
        memcpy(self.p, &pv[0], self.dim * sizeof(double))
        cdef double U_dyn_new, U_test_new, kinetic_new
        cdef TrajectoryInfo info
        self.step_size = step_size
        self.trajectory(n_steps, self.U_dyn + self.metric.kinetic(self.p, self.v), &U_dyn_new,
                        &kinetic_new, &info)
        U_test_new = self.test_potential_of_proposal(U_dyn_new) if isfinite(kinetic_new) else INFINITY
        result = (np.array(<double[:self.dim]> self.q_new), np.array(<double[:self.dim]> self.p),
                  U_dyn_new, U_test_new)
        if saved is not None:
            self.set_state(saved)
        else:
            self.has_state = False
        self.n_density_evals, self.n_gradient_evals = counts
        return result



# ---------------------------------------------------------------------------------------------
# the No-U-Turn Sampler

# the tree's points, each a row of (q, p, grad U, U): the point the integrator moves, the
# trajectory's two ends, the sample, the subtree's proposal, the tree's start, then one
# proposal per tree level
cdef enum NUTSPoint:
    Z_NOW = 0
    Z_FORWARD = 1
    Z_BACKWARD = 2
    Z_SAMPLE = 3
    Z_PROPOSE = 4
    Z_START = 5
    Z_LEVELS = 6
# the vectors of the top of the tree: the sharp momenta (M^-1 p) and momenta at the inner and
# outer ends of the forward and backward subtrees, the momentum sums
cdef enum NUTSVector:
    PS_FWD_BCK = 0
    PS_FWD_FWD = 1
    PS_BCK_FWD = 2
    PS_BCK_BCK = 3
    P_FWD_BCK = 4
    P_FWD_FWD = 5
    P_BCK_FWD = 6
    P_BCK_BCK = 7
    RHO = 8
    RHO_FWD = 9
    RHO_BCK = 10
    RHO_EXTENDED = 11
    TOP_VECTORS = 12
# and those of each level of the recursion: the initial subtree's end, the final subtree's
# beginning, their momentum sums
cdef enum NUTSLevelVector:
    PS_INIT_END = 0
    P_INIT_END = 1
    RHO_INIT = 2
    PS_FINAL_BEG = 3
    P_FINAL_BEG = 4
    RHO_FINAL = 5
    RHO_SUBTREE = 6
    RHO_LEVEL_EXTENDED = 7
    LEVEL_VECTORS = 8


cdef inline double log_sum_exp(double a, double b) noexcept nogil:
    if a == -INFINITY:
        return b
    if b == -INFINITY:
        return a
    if a > b:
        return a + log(1.0 + exp(b - a))
    return b + log(1.0 + exp(a - b))


cdef class NUTSChain(Chain):
    """The No-U-Turn Sampler as Stan runs it (internal; the NUTS samplers build it): a
    trajectory doubled in a random direction until its ends turn back on each other (the
    generalized criterion on the sharp momenta M^-1 p, across the merged subtrees too) or
    ``max_tree_depth`` doublings, the draw chosen from it by multinomial sampling (biased
    progressive between subtrees, uniform within them), a divergence where a point's energy
    exceeds the start's by ``max_energy_error``. See ``docs/algorithms.md`` (NUTS).

    Without a ``test`` target the dynamics target is the target (exact NUTS). Each
    transition's record holds the tree depth, the leapfrog steps, the energy of the draw and
    Stan's acceptance statistic (the mean over the tree's points of min(1, exp(H0 - H))),
    which the step size's dual averaging follows. ``accepted`` says whether the draw is not
    the starting point.

    With a ``test`` target (surrogate NUTS) the trees run on the dynamics target (a
    surrogate, potential U~) and are a proposal: ``inner_steps`` NUTS transitions on U~, which
    leave exp(-U~) invariant and are reversible for it, from the chain's state x to y, then
    the surrogate-transition test (Liu 2001, section 9.4.3; Christen and Fox 2005) accepts y
    with probability min(1, exp[(U(x) - U~(x)) - (U(y) - U~(y))]) on the test target's U,
    which makes the chain reversible for exp(-U) whatever U~ is. One test evaluation per
    transition, none when y is x. ``accept_prob`` is that test's probability (1 when y is x),
    ``accepted`` whether the chain moved, ``tree_depth`` the deepest tree's. Its step size is
    not adapted here (a surrogate NUTS chain's warm-up is exact NUTS on the surrogate alone).
    See ``docs/algorithms.md`` (surrogate NUTS).
    """
    cdef readonly int max_tree_depth
    cdef object _points
    cdef object _vectors
    cdef double* points
    cdef double* vectors
    cdef Py_ssize_t point_size
    cdef readonly int inner_steps
    cdef double sum_metro_prob
    cdef bint divergent

    def __init__(self, CTarget target, Metric metric=None, Integrator integrator=None,
                 double max_energy_error=1000.0, int max_tree_depth=10, CTarget test=None,
                 int inner_steps=1):
        if not isinstance(integrator, Leapfrog):
            raise TypeError("NUTS runs the leapfrog")
        if max_tree_depth < 1:
            raise ValueError(f"max_tree_depth must be at least 1, got {max_tree_depth}")
        if inner_steps < 1:
            raise ValueError(f"inner_steps must be at least 1, got {inner_steps}")
        if inner_steps > 1 and test is None:
            raise ValueError("inner_steps > 1 needs a test target (surrogate NUTS)")
        Chain.__init__(self, target, test, metric, integrator, max_energy_error)
        self.max_tree_depth = max_tree_depth
        self.inner_steps = inner_steps
        self.point_size = 3 * self.dim + 1
        self._points = np.zeros((Z_LEVELS + max_tree_depth, self.point_size))
        self._vectors = np.zeros((TOP_VECTORS + LEVEL_VECTORS * (max_tree_depth + 1), self.dim))
        cdef double[:, ::1] pts = self._points
        cdef double[:, ::1] vec = self._vectors
        self.points, self.vectors = &pts[0, 0], &vec[0, 0]

    cdef inline double* point(self, Py_ssize_t k) noexcept nogil:
        return self.points + k * self.point_size

    cdef inline double* top(self, Py_ssize_t k) noexcept nogil:
        return self.vectors + k * self.dim

    cdef inline double* level(self, int depth, Py_ssize_t k) noexcept nogil:
        return self.vectors + (TOP_VECTORS + LEVEL_VECTORS * depth + k) * self.dim

    cdef inline void copy_point(self, Py_ssize_t source, Py_ssize_t target) noexcept nogil:
        memcpy(self.point(target), self.point(source), self.point_size * sizeof(double))

    cdef inline void copy_vector(self, const double* source, double* target) noexcept nogil:
        memcpy(target, source, self.dim * sizeof(double))

    cdef inline void add_vectors(self, const double* a, const double* b,
                                 double* out) noexcept nogil:
        cdef Py_ssize_t i
        for i in range(self.dim):
            out[i] = a[i] + b[i]

    cdef inline bint no_u_turn(self, const double* p_sharp_minus, const double* p_sharp_plus,
                               const double* rho) noexcept nogil:
        """Stan's generalized criterion: the momentum sum still points along both ends."""
        cdef int n = <int> self.dim
        return _dot(n, p_sharp_plus, 1, rho, 1) > 0.0 and _dot(n, p_sharp_minus, 1, rho, 1) > 0.0

    cdef int build_tree(self, bitgen_t* bitgen, int depth, Py_ssize_t propose,
                        double* p_sharp_beg, double* p_sharp_end, double* rho, double* p_beg,
                        double* p_end, double H0, double sign, Py_ssize_t* n_leapfrog,
                        double* log_sum_weight) except -1 nogil:
        """A subtree of 2^depth leapfrog steps from Z_NOW in direction ``sign``: its proposal
        into point ``propose``, its weight added to ``log_sum_weight``, its ends' momenta and
        its momentum sum added to ``rho``. Returns 1 if it is valid (no divergence, no U-turn
        inside it), else 0."""
        cdef double* z = self.point(Z_NOW)
        cdef Py_ssize_t d = self.dim
        cdef double U, kinetic, h, log_weight_init, log_weight_final, log_weight_subtree
        cdef TrajectoryInfo info
        cdef int valid
        cdef bint persist
        if depth == 0:
            self.integrator.energy_limit = INFINITY
            self.integrator.bound = self.bound if self.bounded else NULL
            self.integrator.run(self.dynamics, self.metric, self.scratch, z, z + d, z + 2 * d,
                                self.v, sign * self.step_size, 1, True, &U, &kinetic, &info)
            self.n_gradient_evals += info.n_gradients
            if self.same_target:  # (a model's gradient evaluates its density as well)
                self.n_density_evals += info.n_gradients
            n_leapfrog[0] += 1
            z[3 * d] = U
            h = U + kinetic
            if h != h:
                h = INFINITY
            if h - H0 > self.max_energy_error:
                self.divergent = True
            log_sum_weight[0] = log_sum_exp(log_sum_weight[0], H0 - h)
            self.sum_metro_prob += 1.0 if H0 - h > 0.0 else exp(H0 - h)
            self.copy_point(Z_NOW, propose)
            # (self.v holds M^-1 p at the new point: the leapfrog's last kinetic energy)
            self.copy_vector(self.v, p_sharp_beg)
            self.copy_vector(self.v, p_sharp_end)
            _axpy(<int> d, 1.0, z + d, 1, rho, 1)
            self.copy_vector(z + d, p_beg)
            self.copy_vector(z + d, p_end)
            return 0 if self.divergent else 1
        # the initial subtree, then the final one
        cdef double* ps_init_end = self.level(depth, PS_INIT_END)
        cdef double* p_init_end = self.level(depth, P_INIT_END)
        cdef double* rho_init = self.level(depth, RHO_INIT)
        cdef double* ps_final_beg = self.level(depth, PS_FINAL_BEG)
        cdef double* p_final_beg = self.level(depth, P_FINAL_BEG)
        cdef double* rho_final = self.level(depth, RHO_FINAL)
        cdef double* rho_subtree = self.level(depth, RHO_SUBTREE)
        cdef double* rho_extended = self.level(depth, RHO_LEVEL_EXTENDED)
        cdef Py_ssize_t propose_final = Z_LEVELS + depth - 1
        memset(rho_init, 0, d * sizeof(double))
        log_weight_init = -INFINITY
        valid = self.build_tree(bitgen, depth - 1, propose, p_sharp_beg, ps_init_end, rho_init,
                                p_beg, p_init_end, H0, sign, n_leapfrog, &log_weight_init)
        if not valid:
            return 0
        memset(rho_final, 0, d * sizeof(double))
        log_weight_final = -INFINITY
        valid = self.build_tree(bitgen, depth - 1, propose_final, ps_final_beg, p_sharp_end,
                                rho_final, p_final_beg, p_end, H0, sign, n_leapfrog,
                                &log_weight_final)
        if not valid:
            return 0
        # uniform within the subtree: the final half's proposal with its share of the weight
        log_weight_subtree = log_sum_exp(log_weight_init, log_weight_final)
        log_sum_weight[0] = log_sum_exp(log_sum_weight[0], log_weight_subtree)
        if log_weight_final > log_weight_subtree:
            self.copy_point(propose_final, propose)
        elif random_standard_uniform(bitgen) < exp(log_weight_final - log_weight_subtree):
            self.copy_point(propose_final, propose)
        self.add_vectors(rho_init, rho_final, rho_subtree)
        _axpy(<int> d, 1.0, rho_subtree, 1, rho, 1)
        persist = self.no_u_turn(p_sharp_beg, p_sharp_end, rho_subtree)
        # and across the merged halves (Stan's extra checks)
        self.add_vectors(rho_init, p_final_beg, rho_extended)
        persist = persist and self.no_u_turn(p_sharp_beg, ps_final_beg, rho_extended)
        self.add_vectors(rho_final, p_init_end, rho_extended)
        persist = persist and self.no_u_turn(ps_init_end, p_sharp_end, rho_extended)
        return 1 if persist else 0

    cdef double tree(self, bitgen_t* bitgen, int* depth_out,
                     Py_ssize_t* n_leapfrog) except? -1 nogil:
        """One NUTS transition on the dynamics target from the point Z_START (its q, grad U
        and U; a fresh momentum): the draw into Z_SAMPLE with its momentum. Returns the
        start's kinetic energy; counts the leapfrog steps into ``n_leapfrog`` and says how
        deep the tree grew."""
        cdef Py_ssize_t d = self.dim
        cdef double* z = self.point(Z_NOW)
        cdef double H0, z0_potential, log_sum_weight, log_weight_subtree
        cdef Py_ssize_t k
        cdef int depth = 0, valid
        cdef bint persist
        self.copy_point(Z_START, Z_NOW)
        self.metric.draw_momentum(bitgen, z + d)
        z0_potential = z[3 * d]
        H0 = z0_potential + self.metric.kinetic(z + d, self.v)
        self.copy_point(Z_NOW, Z_FORWARD)
        self.copy_point(Z_NOW, Z_BACKWARD)
        self.copy_point(Z_NOW, Z_SAMPLE)
        for k in range(PS_FWD_BCK, PS_BCK_BCK + 1):  # (the sharp momenta, M^-1 p)
            self.copy_vector(self.v, self.top(k))
        for k in range(P_FWD_BCK, RHO + 1):  # (the momenta and their sum)
            self.copy_vector(z + d, self.top(k))
        log_sum_weight = 0.0  # the start's weight, exp(H0 - H0)
        while depth < self.max_tree_depth:
            memset(self.top(RHO_FWD), 0, d * sizeof(double))
            memset(self.top(RHO_BCK), 0, d * sizeof(double))
            log_weight_subtree = -INFINITY
            if random_standard_uniform(bitgen) > 0.5:
                self.copy_point(Z_FORWARD, Z_NOW)
                self.copy_vector(self.top(RHO), self.top(RHO_BCK))
                self.copy_vector(self.top(P_FWD_BCK), self.top(P_BCK_FWD))
                self.copy_vector(self.top(PS_FWD_BCK), self.top(PS_BCK_FWD))
                valid = self.build_tree(bitgen, depth, Z_PROPOSE, self.top(PS_FWD_BCK),
                                        self.top(PS_FWD_FWD), self.top(RHO_FWD),
                                        self.top(P_FWD_BCK), self.top(P_FWD_FWD), H0, 1.0,
                                        n_leapfrog, &log_weight_subtree)
                self.copy_point(Z_NOW, Z_FORWARD)
            else:
                self.copy_point(Z_BACKWARD, Z_NOW)
                self.copy_vector(self.top(RHO), self.top(RHO_FWD))
                self.copy_vector(self.top(P_BCK_FWD), self.top(P_FWD_BCK))
                self.copy_vector(self.top(PS_BCK_FWD), self.top(PS_FWD_BCK))
                valid = self.build_tree(bitgen, depth, Z_PROPOSE, self.top(PS_BCK_FWD),
                                        self.top(PS_BCK_BCK), self.top(RHO_BCK),
                                        self.top(P_BCK_FWD), self.top(P_BCK_BCK), H0, -1.0,
                                        n_leapfrog, &log_weight_subtree)
                self.copy_point(Z_NOW, Z_BACKWARD)
            if not valid:
                break
            depth += 1
            # biased progressive sampling between the old tree and the new subtree
            if log_weight_subtree > log_sum_weight:
                self.copy_point(Z_PROPOSE, Z_SAMPLE)
            elif random_standard_uniform(bitgen) < exp(log_weight_subtree - log_sum_weight):
                self.copy_point(Z_PROPOSE, Z_SAMPLE)
            log_sum_weight = log_sum_exp(log_sum_weight, log_weight_subtree)
            self.add_vectors(self.top(RHO_BCK), self.top(RHO_FWD), self.top(RHO))
            persist = self.no_u_turn(self.top(PS_BCK_BCK), self.top(PS_FWD_FWD), self.top(RHO))
            self.add_vectors(self.top(RHO_BCK), self.top(P_FWD_BCK), self.top(RHO_EXTENDED))
            persist = persist and self.no_u_turn(self.top(PS_BCK_BCK), self.top(PS_FWD_BCK),
                                                 self.top(RHO_EXTENDED))
            self.add_vectors(self.top(RHO_FWD), self.top(P_BCK_FWD), self.top(RHO_EXTENDED))
            persist = persist and self.no_u_turn(self.top(PS_BCK_FWD), self.top(PS_FWD_FWD),
                                                 self.top(RHO_EXTENDED))
            if not persist:
                break
        depth_out[0] = depth
        return H0 - z0_potential

    cdef int transition(self, bitgen_t* bitgen, const RunSettings* settings,
                        Transition* record) except -1 nogil:
        cdef Py_ssize_t d = self.dim
        cdef double* start = self.point(Z_START)
        cdef double* sample = self.point(Z_SAMPLE)
        cdef double kinetic0 = 0.0, kinetic, U_test_new, log_ratio, prob
        cdef Py_ssize_t n_leapfrog = 0
        cdef int depth = 0, deepest = 0, step
        cdef bint moved, accept
        # the start: the chain's state (its dynamics potential and gradient)
        memcpy(start, self.q, d * sizeof(double))
        memcpy(start + 2 * d, self.grad, d * sizeof(double))
        start[3 * d] = self.U_dyn
        self.sum_metro_prob = 0.0
        self.divergent = False
        for step in range(self.inner_steps):
            if step > 0:
                self.copy_point(Z_SAMPLE, Z_START)
            kinetic = self.tree(bitgen, &depth, &n_leapfrog)
            if step == 0:  # (the transition's momentum: its energy, if it stays, is x's)
                kinetic0 = kinetic
            deepest = depth if depth > deepest else deepest
        record.step_size = self.step_size
        record.n_steps = n_leapfrog
        record.solver_iterations = 0
        record.tree_depth = deepest
        record.diverging = self.divergent
        record.solver_failed = False
        # (Stan's acceptance statistic: the mean over the tree's points, that step size
        # adaptation follows)
        prob = self.sum_metro_prob / n_leapfrog if n_leapfrog else 0.0
        moved = memcmp(sample, self.q, d * sizeof(double)) != 0
        memcpy(self.q_new, sample, d * sizeof(double))  # (the proposal, kept or not)
        self.U_proposal = NAN
        if self.same_target:
            accept = moved
        elif not moved:  # (y is x: the test accepts, and needs no evaluation)
            prob = 1.0
            accept = False
        else:
            # the surrogate-transition test on the test target's potential at y
            self.test.potential(sample, &U_test_new, self.scratch)
            self.n_density_evals += 1
            log_ratio = (self.U_test - self.U_dyn) - (U_test_new - sample[3 * d])
            if isfinite(U_test_new):
                self.U_proposal = U_test_new
            if not (isfinite(U_test_new) and log_ratio == log_ratio):
                prob = 0.0
            else:
                prob = 1.0 if log_ratio >= 0.0 else exp(log_ratio)
            accept = random_standard_uniform(bitgen) < prob
            if accept:
                self.U_test = U_test_new
        if accept:
            memcpy(self.q, sample, d * sizeof(double))
            memcpy(self.grad, sample + 2 * d, d * sizeof(double))
            self.U_dyn = sample[3 * d]
            if self.same_target:
                self.U_test = self.U_dyn
            record.energy = self.U_test + self.metric.kinetic(sample + d, self.v)
        else:
            record.energy = self.U_test + kinetic0
        record.accept_prob = prob
        record.accepted = accept
        record.log_density = -self.U_test
        self.adapt(settings, record)
        return 0

    cdef int check_run(self, Py_ssize_t n_iter, const RunSettings* settings, bint gradients,
                       bint trajectory) except -1:
        if settings.adapt_step_size and not self.same_target:
            raise ValueError("surrogate NUTS does not adapt its step size: adapt it with "
                             "exact NUTS on the surrogate alone")
        return Chain.check_run(self, n_iter, settings, gradients, trajectory)
