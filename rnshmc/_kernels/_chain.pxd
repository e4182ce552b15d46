# What every C chain shares (the HMC family's _transition.Chain, the random-walk
# _metropolis.MetropolisChain): the per-transition record, the stop poll and the chain base that
# owns the run loop. A chain subclass implements its transition and keeps its own state; the
# loop, its outputs and the way it stops are the base's, so they cannot drift apart.
from cpython.exc cimport PyErr_CheckSignals
from libc.stdint cimport int64_t
from libc.time cimport clock, clock_t

from ._random cimport bitgen_t

# One record per transition (the NumPy dtype _chain.TRANSITION has the same layout).
cdef struct Transition:
    double log_density       # of the test target at the chain's state after the transition
    double accept_prob       # the Metropolis acceptance probability (product of both stages)
    double energy            # H of the state after the transition (test target's potential)
    double step_size         # the step size used
    int64_t n_steps          # integrator steps taken
    int64_t solver_iterations
    int64_t tree_depth       # NUTS: the depth of the trajectory's tree (0 for other chains)
    unsigned char accepted
    unsigned char diverging
    unsigned char solver_failed

# The arguments of BaseChain.run that a transition reads (each chain reads those it has).
cdef struct RunSettings:
    Py_ssize_t n_steps          # integrator steps of a trajectory (its upper bound with jitter)
    bint jitter                 # draw the number of steps uniformly from 1..n_steps
    bint adapt_step_size        # dual averaging of the step size after the transition
    bint accumulate_variance    # add the kept position to the running variance


cdef inline int poll_stop(volatile int* stop_flag, clock_t interval,
                          clock_t* last_check) except -1 nogil:
    """Between two transitions: 1 if ``stop_flag`` (NULL: none) is raised, else 0; and when
    more than ``interval`` of processor time has passed since ``last_check``, the GIL for
    Python's signal handlers, whose exception (KeyboardInterrupt on Ctrl-C) is raised here.
    Handlers run in the main thread only, where a Ctrl-C arrives; chains on other threads
    stop by the flag, which the main thread raises."""
    if stop_flag != NULL and stop_flag[0] != 0:
        return 1
    if clock() - last_check[0] > interval:
        with gil:
            PyErr_CheckSignals()
        last_check[0] = clock()
    return 0


cdef class BaseChain:
    cdef readonly Py_ssize_t dim
    cdef readonly bint has_state
    cdef public double step_size
    # n_density_evals counts evaluations of the test target, n_gradient_evals gradients of
    # the dynamics target (none for a gradient-free chain)
    cdef public long long n_density_evals
    cdef public long long n_gradient_evals
    cdef readonly Py_ssize_t completed         # transitions made by the last run (all of them
                                               # unless it was stopped early)
    cdef volatile int* stop_flag               # nonzero: stop (NULL: no flag)
    cdef object _stop_flag
    # what the loop writes after each transition, kept current by the subclass: the state
    # (and the dynamics gradient there, NULL for a gradient-free chain), the last proposal (a
    # rejected one is left in q_new) and its test potential (NaN: not evaluated)
    cdef double* q
    cdef double* grad
    cdef double* q_new
    cdef double U_proposal
    # rows of the trajectory record written so far, while a run records one (else NULL)
    cdef Py_ssize_t* recorded

    # the subclass's refusals of a run's arguments (raised with the GIL, before any output is
    # touched)
    cdef int check_run(self, Py_ssize_t n_iter, const RunSettings* settings, bint gradients,
                       bint trajectory) except -1
    # start recording trajectories into ``trajectory`` (None: no record), pointing
    # ``recorded`` at the count of rows written; stop_recording ends it, whatever happened
    cdef int start_recording(self, object trajectory) except -1
    cdef void stop_recording(self) noexcept
    # one transition from the state, filling ``record``: the only part a chain implements
    cdef int transition(self, bitgen_t* bitgen, const RunSettings* settings,
                        Transition* record) except -1 nogil
