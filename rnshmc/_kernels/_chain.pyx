"""The chain base: the run loop every C chain shares (see _chain.pxd).

``BaseChain.run`` performs many transitions in one ``nogil`` block, writing row ``i`` of each
output for transition ``i``: the state, a ``TRANSITION`` record, and optionally the dynamics
gradient, the proposal and the trajectory's extent. A subclass implements ``transition`` (and
its own state, ``set_position``, ``get_state``/``set_state``); ``_transition.Chain`` and
``_metropolis.MetropolisChain`` are the two.

Stopping early. The loop polls the chain's stop flag (``set_stop_flag``: an int shared by the
chains of one run) before each transition and stops when it is set (by the run's main thread on
Ctrl-C, or by a chain that failed, so that the others stop within a transition); and every
SIGNAL_CHECK_SECONDS of processor time it takes the GIL to let Python run its signal handlers
(effective in the main thread only, where a Ctrl-C arrives). Either way the loop stops between
two transitions, with the chain's state whole and ``completed`` saying how many transitions
were made; ``run`` then raises the handler's exception (KeyboardInterrupt) or
:class:`StopRequested`.
"""
from libc.string cimport memcpy
from libc.time cimport clock, clock_t, CLOCKS_PER_SEC

import numpy as np

from ._random cimport get_bitgen

SIGNAL_CHECK_SECONDS = 0.005

TRANSITION = np.dtype([
    ("log_density", "f8"), ("accept_prob", "f8"), ("energy", "f8"), ("step_size", "f8"),
    ("n_steps", "i8"), ("solver_iterations", "i8"), ("tree_depth", "i8"), ("accepted", "u1"),
    ("diverging", "u1"), ("solver_failed", "u1")], align=True)


class NonFiniteStart(ValueError):
    """The log density (or its gradient) is not finite at the point a chain was put at
    (``set_position``): a starting point to try again elsewhere."""


class StopRequested(KeyboardInterrupt):
    """A chain loop stopped because request_stop was called (another chain failed or was
    interrupted)."""


cdef class BaseChain:
    """The run loop, outputs and stop flag of a C chain (abstract: subclasses implement
    ``transition``; internal, the samplers build the chains)."""

    def set_stop_flag(self, flag):
        """Watch ``flag`` (an int32 ndarray of one element, shared with other chains; None:
        none): ``run`` stops after the transition during which it became nonzero and raises
        :class:`StopRequested`."""
        if flag is None:
            self.stop_flag, self._stop_flag = NULL, None
            return
        if not (isinstance(flag, np.ndarray) and flag.dtype == np.int32 and flag.size == 1):
            raise TypeError("the stop flag must be an int32 ndarray of one element")
        cdef int[::1] view = flag.reshape(1)
        self._stop_flag = flag
        self.stop_flag = &view[0]

    cdef int check_run(self, Py_ssize_t n_iter, const RunSettings* settings, bint gradients,
                       bint trajectory) except -1:
        return 0

    cdef int start_recording(self, object trajectory) except -1:
        if trajectory is not None:
            raise ValueError(f"a {type(self).__name__} records no trajectories")
        return 0

    cdef void stop_recording(self) noexcept:
        self.recorded = NULL

    cdef int transition(self, bitgen_t* bitgen, const RunSettings* settings,
                        Transition* record) except -1 nogil:
        with gil:
            raise NotImplementedError

    def run(self, generator, Py_ssize_t n_iter, Py_ssize_t n_steps, bint jitter,
            double[:, ::1] samples, Transition[::1] records, double[:, ::1] gradients=None,
            bint adapt_step_size=False, bint accumulate_variance=False,
            double[:, ::1] trajectory=None, Py_ssize_t[::1] trajectory_ends=None,
            double[:, ::1] proposals=None):
        """Run ``n_iter`` transitions, writing row ``i`` of each output for transition ``i``.

        Outputs are preallocated by the caller (no allocation here): ``samples`` (n_iter, dim),
        ``records`` (n_iter,) of dtype ``TRANSITION``, and, if given, ``gradients`` (n_iter,
        dim), which receives the dynamics gradient at each kept state (the exact gradient for
        plain HMC: training data for a surrogate). ``generator`` is a
        ``numpy.random.Generator`` whose bit generator is locked for the whole call.
        ``n_steps`` is the number of integrator steps of a trajectory (the upper bound of a
        uniform draw with ``jitter``). ``adapt_step_size`` updates the step size by dual
        averaging after every transition; ``accumulate_variance`` adds every kept position to
        the running variance. ``trajectory`` (rows, 2 dim + 1), leapfrog only: every leapfrog
        step's (q, U, grad U) is written to its rows in order, while they last (the potential
        is then evaluated with the gradient at every step; no evaluation is counted twice: a
        model's gradient counts as a density evaluation already); ``trajectory_rows`` tells
        how many were written, and ``trajectory_ends`` (n_iter,), if given, receives the rows
        written up to the end of each transition (a trajectory cut short by a non-finite value
        records fewer rows than its steps). ``proposals`` (n_iter, dim + 1), if given,
        receives each transition's proposal and its exact (test) potential, NaN where the test
        did not evaluate it (a divergence of the dynamics, a failed implicit solve, a stage-1
        rejection). A chain refuses what it has not: a random-walk Metropolis chain ignores
        ``n_steps`` and ``jitter`` (one step) and has no gradients, trajectories or HMC
        adaptation (it adapts by its own settings).

        The loop stops early, between two transitions, on the stop flag (raising
        :class:`StopRequested`) or on a signal whose handler raises (Ctrl-C:
        KeyboardInterrupt); ``completed`` says how many transitions were made and written.
        """
        if not self.has_state:
            raise RuntimeError("set_position must be called before run")
        cdef RunSettings settings
        settings.n_steps = n_steps
        settings.jitter = jitter
        settings.adapt_step_size = adapt_step_size
        settings.accumulate_variance = accumulate_variance
        self.check_run(n_iter, &settings, gradients is not None,
                       trajectory is not None or trajectory_ends is not None)
        if (samples.shape[0] < n_iter or samples.shape[1] != self.dim or records.shape[0] < n_iter
                or (gradients is not None and (gradients.shape[0] < n_iter
                                               or gradients.shape[1] != self.dim))
                or (proposals is not None and (proposals.shape[0] < n_iter
                                               or proposals.shape[1] != self.dim + 1))):
            raise ValueError("output buffers are too small")
        self.completed = 0
        if n_iter == 0:
            return
        cdef Py_ssize_t it, d = self.dim
        cdef Py_ssize_t* ends = NULL
        cdef double* gradient_rows = NULL if gradients is None else &gradients[0, 0]
        cdef double* proposal_rows = NULL if proposals is None else &proposals[0, 0]
        cdef clock_t interval = <clock_t> (SIGNAL_CHECK_SECONDS * CLOCKS_PER_SEC)
        cdef clock_t last_check
        bit_generator = generator.bit_generator
        cdef bitgen_t* bitgen = get_bitgen(bit_generator)
        self.start_recording(trajectory)
        try:
            if trajectory_ends is not None:
                if self.recorded == NULL or trajectory_ends.shape[0] < n_iter:
                    raise ValueError("trajectory_ends needs a trajectory and n_iter entries")
                ends = &trajectory_ends[0]
            last_check = clock()
            with bit_generator.lock, nogil:
                for it in range(n_iter):
                    if poll_stop(self.stop_flag, interval, &last_check):
                        break
                    self.transition(bitgen, &settings, &records[it])
                    self.completed = it + 1
                    memcpy(&samples[it, 0], self.q, d * sizeof(double))
                    if proposal_rows != NULL:
                        # an accepted proposal is the new state; a rejected one is left in q_new
                        memcpy(&proposal_rows[it * (d + 1)],
                               self.q if records[it].accepted else self.q_new,
                               d * sizeof(double))
                        proposal_rows[it * (d + 1) + d] = self.U_proposal
                    if gradient_rows != NULL:
                        memcpy(&gradient_rows[it * d], self.grad, d * sizeof(double))
                    if ends != NULL:
                        ends[it] = self.recorded[0]
        finally:
            self.stop_recording()
        if self.completed < n_iter:
            raise StopRequested("stopped: another chain failed or the run was interrupted")
