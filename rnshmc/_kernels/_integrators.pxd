# Integrators: map (q, p) with the gradient cached at q to a proposal, reporting what happened.
from ._metrics cimport Metric
from ._random cimport bitgen_t
from ._riemann cimport RiemannianMetric
from ._targets cimport CTarget

cdef struct TrajectoryInfo:
    Py_ssize_t n_steps          # steps taken (fewer than asked if the trajectory diverged)
    Py_ssize_t n_gradients      # gradient evaluations of the target
    bint diverged               # a non-finite gradient or end potential
    bint converged              # implicit solves converged (always True for explicit ones)
    double residual             # largest final residual of an implicit solve (0 if explicit)
    Py_ssize_t iterations       # fixed-point iterations of the implicit solves (0 if explicit)
    double log_jacobian         # log |det d(proposal)/d(start)|: 0 for symplectic maps
    double max_energy           # the highest energy of the dynamics at a step (the leapfrog,
                                # when it watches the energy; -inf: not watched)

# the two implicit equations of a generalized leapfrog step (GeneralizedLeapfrog.solve)
cdef enum ImplicitEquation:
    MOMENTUM    # p' = p - eps/2 [grad U(q) + grad 1/2 log det G(q) - nu(q, p')/2]
    POSITION    # q' = q + eps/2 [G(q)^{-1} + G(q')^{-1}] p'

cdef class Integrator:
    # integrates the dynamics of a position-dependent (Riemannian) metric; the chain then
    # updates the metric at the start point before run() and reads its log-determinant
    cdef readonly bint riemannian
    # set by the chain before each trajectory (docs/algorithms.md, section 1): the leapfrog
    # stops a trajectory as a divergence, with nothing evaluated past it, at the first step
    # whose energy of the dynamics exceeds energy_limit (INFINITY: not watched), or whose
    # position leaves the probe bound before it is evaluated (NULL: no bound; the warm-up's,
    # see widen_bound). The other integrators ignore them.
    cdef double energy_limit
    cdef double* bound
    # draws what the integrator itself randomises per transition (L2HMC's direction), before
    # the trajectory; nothing for the others
    cdef int begin(self, bitgen_t* bitgen) except -1 nogil
    # Integrate n_steps of step_size from (q, p) in place; grad holds the target's gradient at
    # q on entry and at the end point on return; v is scratch for the velocity. U_end gets the
    # end potential if want_potential (else NaN), kinetic_end the end kinetic energy; both +inf
    # on divergence.
    cdef int run(self, CTarget target, Metric metric, double* scratch, double* q, double* p,
                 double* grad, double* v, double step_size, Py_ssize_t n_steps,
                 bint want_potential, double* U_end, double* kinetic_end,
                 TrajectoryInfo* info) except -1 nogil

# The warm-up's probe bound: 4 rows of dim doubles, the box of the points seen (lowest, highest
# coordinates) and the box a trajectory may not leave (the first widened on each side by
# PROBE_MARGIN times its width in that coordinate, at least PROBE_MARGIN). widen_bound adds a
# point to the points seen.
cdef double PROBE_MARGIN
cdef void widen_bound(double* bound, Py_ssize_t n, const double* q) noexcept nogil

cdef class Leapfrog(Integrator):
    # optional record of every step: rows of (q, U(q), grad U(q)), 2 dim + 1 doubles each (the
    # potential is then evaluated with the gradient at every step); NULL: no record
    cdef double* record
    cdef Py_ssize_t record_capacity    # rows
    cdef Py_ssize_t record_count       # rows written


cdef class GeneralizedLeapfrog(Integrator):
    cdef readonly Py_ssize_t dim
    cdef readonly double tol                # < 0: a fixed number of iterations, unchecked
    cdef readonly Py_ssize_t max_iterations
    cdef readonly bint newton               # Newton iterations instead of fixed-point ones
    cdef object _arrays
    cdef object _newton_arrays
    cdef double* jac                        # d*d: the Newton system, then its LU factors
    cdef double* dv                         # d*d: row k is G^{-1} dG/dq_k v
    cdef double* probe
    cdef double* nu_minus
    cdef int* pivots
    cdef double* p0
    cdef double* q0
    cdef double* v0
    cdef double* nu
    cdef double* x
    cdef int velocity_derivatives(self, RiemannianMetric g, const double* v) except -1 nogil
    cdef int newton_step(self, RiemannianMetric g, double* x, const double* v, double sign,
                         double half) except -1 nogil
    cdef int advance(self, RiemannianMetric g, double* current, const double* v, double sign,
                     double half, TrajectoryInfo* info, double* relative) except -1 nogil
    cdef void metric_failed(self, int status, TrajectoryInfo* info) noexcept nogil
    cdef int solve(self, RiemannianMetric g, ImplicitEquation equation, double* current,
                   const double* p, const double* grad, double* v, double half,
                   double* scratch, TrajectoryInfo* info) except -1 nogil
    cdef int momentum_update(self, RiemannianMetric g, const double* start, double* p,
                             const double* grad, double* v, double half) except -1 nogil
    cdef int run_riemannian(self, CTarget target, RiemannianMetric g, double* scratch, double* q,
                            double* p, double* grad, double* v, double step_size,
                            Py_ssize_t n_steps, bint want_potential, double* U_end,
                            double* kinetic_end, TrajectoryInfo* info) except -1 nogil
