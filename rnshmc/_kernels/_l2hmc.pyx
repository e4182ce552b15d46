"""L2HMC's augmented leapfrog (Levy, Hoffman and Sohl-Dickstein 2018;
docs/algorithms.md section 7).

State (x, v, d) with the direction d in {-1, +1}. Step t of T, with the fixed binary mask m_t
(mbar_t = 1 - m_t) and the time features tau_t = (cos 2 pi t / T, sin 2 pi t / T), forward
(d = +1):

1. (S, Q, T) = Vnet(x, grad U(x), tau); v <- v * exp(eps/2 S) - eps/2 (exp(eps Q) * grad U(x) - T)
2. (S, Q, T) = Xnet(v, m * x, tau);     x <- m * x + mbar * [x * exp(eps S) + eps (exp(eps Q) * v + T)]
3. (S, Q, T) = Xnet(v, mbar * x, tau);  x <- mbar * x + m * [x * exp(eps S) + eps (exp(eps Q) * v + T)]
4. (S, Q, T) = Vnet(x, grad U(x), tau); v <- as in 1 at the new x

with log |det| = sum eps/2 S_1 + eps mbar S_2 + eps m S_3 + eps/2 S_4. Backward (d = -1) is the
exact inverse, t = T - 1, ..., 0, undoing 4, 3, 2, 1; its log |det| is minus the forward
formula on the states it passes through. One gradient of U per step (cached between steps).
With all heads zero the step is the leapfrog.

Each network: e = Wa a + Wb b + Wt tau + b0 (width H) for its inputs (a, b) = (x, grad U) or
(v, masked x), z1 = relu(e), z2 = relu(W2 z1 + b2), then the heads S = exp(lS) * tanh(WS z2 + bS),
Q = exp(lQ) * tanh(WQ z2 + bQ), T = WT z2 + bT. All weights live in one flat vector (log eps
first, then the V-network's, then the X-network's; ``parameter_layout``), which the integrator
reads in place: a trainer updating it changes the next trajectory.

Training runs the batch's trajectories on OpenMP threads (one workspace and target scratch
per thread); each thread adds its trajectories' gradients into the accumulator of a fixed
block of trajectories, and the blocks are summed in order afterwards, so the result does not
depend on the number of threads or on the scheduling.
"""
from cython.parallel cimport prange, threadid
from libc.math cimport exp, tanh, cos, sin, sqrt, pow, fabs, isfinite, INFINITY, NAN, M_PI
from libc.string cimport memcpy, memcmp, memset

import numpy as np

from ._blas cimport _gemv, _ger, RowMajor, NoTrans, Trans
from ._integrators cimport Integrator, TrajectoryInfo
from ._metrics cimport Metric
from ._openmp cimport omp_get_max_threads
from ._random cimport bitgen_t, get_bitgen, random_standard_normal_fill, random_standard_uniform
from ._targets cimport CTarget, PyCallableTarget

# the network's arrays in the order they sit in the flat parameter vector
_NET_FIELDS = ("Wa", "Wb", "Wt", "b0", "W2", "b2", "WS", "bS", "lS", "WQ", "bQ", "lQ", "WT", "bT")


def net_shapes(Py_ssize_t dim, Py_ssize_t hidden):
    """{field: shape} of one network's arrays, in storage order."""
    n, H = dim, hidden
    return {"Wa": (H, n), "Wb": (H, n), "Wt": (H, 2), "b0": (H,), "W2": (H, H), "b2": (H,),
            "WS": (n, H), "bS": (n,), "lS": (n,), "WQ": (n, H), "bQ": (n,), "lQ": (n,),
            "WT": (n, H), "bT": (n,)}


def parameter_layout(Py_ssize_t dim, Py_ssize_t hidden):
    """{name: (offset, shape)} of the flat parameter vector: "log_eps", then "V.<field>" and
    "X.<field>" for the two networks (fields as in ``net_shapes``), and its total size under
    the key "size"."""
    layout = {"log_eps": (0, ())}
    offset = 1
    for net in ("V", "X"):
        for field, shape in net_shapes(dim, hidden).items():
            layout[f"{net}.{field}"] = (offset, shape)
            offset += int(np.prod(shape))
    layout["size"] = offset
    return layout


cdef struct Net:
    # one network's arrays inside a flat vector: the parameters, or their gradient
    double* Wa
    double* Wb
    double* Wt
    double* b0
    double* W2
    double* b2
    double* WS
    double* bS
    double* lS
    double* WQ
    double* bQ
    double* lQ
    double* WT
    double* bT
    # computed once per training iteration (NULL: none): exp(lS), exp(lQ), and the heads'
    # matrices transposed (H x n), through which the heads are sums over the hidden units
    # that are on; a gradient's view of the transposed matrices' gradient in WS, WQ, WT
    double* eS
    double* eQ
    double* WSt
    double* WQt
    double* WTt


cdef Py_ssize_t net_view(double* base, Py_ssize_t n, Py_ssize_t H, Net* net) noexcept nogil:
    """Point ``net`` into ``base``; returns the number of doubles it spans."""
    cdef double* at = base
    net.Wa = at; at += H * n
    net.Wb = at; at += H * n
    net.Wt = at; at += H * 2
    net.b0 = at; at += H
    net.W2 = at; at += H * H
    net.b2 = at; at += H
    net.WS = at; at += n * H
    net.bS = at; at += n
    net.lS = at; at += n
    net.WQ = at; at += n * H
    net.bQ = at; at += n
    net.lQ = at; at += n
    net.WT = at; at += n * H
    net.bT = at; at += n
    net.eS = NULL
    net.eQ = NULL
    net.WSt = NULL
    net.WQt = NULL
    net.WTt = NULL
    return at - base


cdef class TransformedTarget(CTarget):
    """U_z(z) = beta U(shift + scale * z) of another target U, with its gradient and
    Hessian-vector product: L2HMC runs in standardised coordinates z (a fixed affine map,
    whose constant Jacobian cancels in the Metropolis test), and training anneals the
    inverse temperature beta towards 1 on multimodal targets. ``inverse_temperature`` is a
    setting of the one trainer or chain that owns this object, not shared scratch.

    With a ``wall`` w, the potential adds sum_i (|z_i| - w)_+^2 / 2: a confinement for a
    surrogate, which is fitted only where the exploration went and may fall without bound
    beyond it (softplus units are linear there); L2HMC trained on it learned to fly off
    there, where the surrogate promised acceptance 1, and every chain then stopped (on the
    authors' PDE). The wall changes the proposal map only, never the test.

    Parameters
    ----------
    base : CTarget
    shift, scale : None or ndarrays of shape (dim,)
        None: 0 and 1 (z = x).
    wall : None or float
        Half-width of the confinement in z (None: none).
    """

    cdef CTarget base
    cdef const double[::1] shift
    cdef const double[::1] scale
    cdef bint identity
    cdef double wall
    cdef object _arrays
    cdef public double inverse_temperature

    def __init__(self, CTarget base, shift=None, scale=None, wall=None):
        # scratch: the base's, then x = shift + scale z and scale * u
        super().__init__(base.dim, base.scratch_size + 2 * base.dim)
        self.base = base
        self.identity = shift is None and scale is None
        shift = np.zeros(base.dim) if shift is None else np.array(shift, dtype=np.float64)
        scale = np.ones(base.dim) if scale is None else np.array(scale, dtype=np.float64)
        if shift.shape != (base.dim,) or scale.shape != (base.dim,) \
                or not np.all(np.isfinite(shift)) or not np.all(np.isfinite(scale)) \
                or not np.all(scale > 0):
            raise ValueError(f"shift and scale must be {base.dim} finite numbers, scale > 0")
        self._arrays = (shift, scale)
        self.shift, self.scale = shift, scale
        self.inverse_temperature = 1.0
        if wall is not None and not (np.isfinite(wall) and wall > 0):
            raise ValueError(f"wall must be a positive number, got {wall!r}")
        self.wall = -1.0 if wall is None else float(wall)

    cdef double confine(self, const double* z, double* grad) noexcept nogil:
        """The wall's potential; adds its gradient into ``grad`` (if not NULL)."""
        cdef Py_ssize_t i
        cdef double excess, U = 0.0
        if self.wall < 0.0:
            return 0.0
        for i in range(self.dim):
            excess = fabs(z[i]) - self.wall
            if excess > 0.0:
                U += 0.5 * excess * excess
                if grad != NULL:
                    grad[i] += excess if z[i] > 0.0 else -excess
        return U

    cdef const double* point(self, const double* z, double* scratch) noexcept nogil:
        cdef Py_ssize_t i
        cdef double* x = scratch + self.base.scratch_size
        if self.identity:
            return z
        for i in range(self.dim):
            x[i] = self.shift[i] + self.scale[i] * z[i]
        return x

    cdef void rescale(self, double* v) noexcept nogil:
        """v <- scale * v (a derivative with respect to x, to one with respect to z; the
        inverse temperature is applied by the callers, after the wall's term)."""
        cdef Py_ssize_t i
        for i in range(self.dim):
            v[i] *= self.scale[i]

    cdef void temper(self, double* v) noexcept nogil:
        cdef Py_ssize_t i
        if self.inverse_temperature != 1.0:
            for i in range(self.dim):
                v[i] *= self.inverse_temperature

    cdef int potential(self, const double* q, double* U, double* scratch) except -1 nogil:
        self.base.potential(self.point(q, scratch), U, scratch)
        U[0] = self.inverse_temperature * (U[0] + self.confine(q, NULL))
        return 0

    cdef int untempered(self, const double* q, double* U, double* grad,
                        double* scratch) except -1 nogil:
        """U and grad U at ``q`` before the inverse temperature (what a training chain keeps
        between iterations, whose temperatures differ)."""
        self.base.potential_and_gradient(self.point(q, scratch), U, grad, scratch)
        self.rescale(grad)
        U[0] = U[0] + self.confine(q, grad)
        return 0

    cdef void tempered(self, double U_raw, const double* grad_raw, double* U,
                       double* grad) noexcept nogil:
        """U and grad U from ``untempered``'s (the same numbers as ``potential_and_gradient``)."""
        U[0] = self.inverse_temperature * U_raw
        memcpy(grad, grad_raw, self.dim * sizeof(double))
        self.temper(grad)

    cdef int potential_and_gradient(self, const double* q, double* U, double* grad,
                                    double* scratch) except -1 nogil:
        self.untempered(q, U, grad, scratch)
        U[0] = self.inverse_temperature * U[0]
        self.temper(grad)
        return 0

    cdef int gradient(self, const double* q, double* grad, double* scratch) except -1 nogil:
        self.base.gradient(self.point(q, scratch), grad, scratch)
        self.rescale(grad)
        self.confine(q, grad)
        self.temper(grad)
        return 0

    cdef int hessian_vector(self, const double* q, const double* u, double* out,
                            double* scratch) except -1 nogil:
        cdef Py_ssize_t i
        cdef double* w = scratch + self.base.scratch_size + self.dim
        for i in range(self.dim):
            w[i] = self.scale[i] * u[i]
        self.base.hessian_vector(self.point(q, scratch), w, out, scratch)
        self.rescale(out)
        if self.wall >= 0.0:
            for i in range(self.dim):
                if fabs(q[i]) > self.wall:
                    out[i] += u[i]
        self.temper(out)
        return 0

# The networks' matrix-vector products. At the paper's sizes (dim 2 or 50, width 10) a BLAS
# call costs more than its arithmetic. Measured per training iteration at 200 chains (T = 10,
# one thread, OpenBLAS): the 2-d Gaussian 7.4 ms with the loops below against 20.5 ms with
# dgemv/dger for every product; the 50-d one at width 10 70.7 ms against 98.7 ms; at width 100
# BLAS wins, 389 ms against 438 ms. So BLAS from BLAS_MIN_ELEMENTS entries of the Wa block
# (H * dim; 500 at 50 x 10, 5000 at 50 x 100).
cdef enum:
    BLAS_MIN_ELEMENTS = 4096
    # fixed blocks of a batch's trajectories whose gradients are summed apart and then in
    # block order: the rounding does not depend on the threads
    MAX_BLOCKS = 16
    TRANSPOSED_MIN_DIM = 8

cdef extern from *:
    """
    #if defined(_OPENMP) && !defined(_MSC_VER)
    #define RNSHMC_L2HMC_SIMD_SUM _Pragma("omp simd reduction(+:s)")
    #else
    #define RNSHMC_L2HMC_SIMD_SUM
    #endif
    /* x . y in the fixed order of partial sums of this build's vector width */
    static inline double rnshmc_l2hmc_dot(Py_ssize_t n, const double* x, const double* y)
    {
        double s = 0.0;
        Py_ssize_t j;
        RNSHMC_L2HMC_SIMD_SUM
        for (j = 0; j < n; j++)
            s += x[j] * y[j];
        return s;
    }
    #if defined(_OPENMP) && !defined(_MSC_VER)
    #define RNSHMC_L2HMC_SIMD _Pragma("omp simd")
    #else
    #define RNSHMC_L2HMC_SIMD
    #endif
    /* y += a x (x and y do not overlap) */
    static inline void rnshmc_l2hmc_axpy(Py_ssize_t n, double a, const double* x, double* y)
    {
        Py_ssize_t j;
        RNSHMC_L2HMC_SIMD
        for (j = 0; j < n; j++)
            y[j] += a * x[j];
    }
    """
    double small_dot "rnshmc_l2hmc_dot" (Py_ssize_t n, const double* x,
                                          const double* y) noexcept nogil
    void small_axpy "rnshmc_l2hmc_axpy" (Py_ssize_t n, double a, const double* x,
                                          double* y) noexcept nogil


cdef struct Model:
    # what every trajectory reads: the networks (views of the parameters), log eps, masks
    Net vnet
    Net xnet
    const double* log_eps
    const double* masks
    Py_ssize_t n, H, T
    bint blas               # products by BLAS (large networks)


cdef struct Work:
    # one trajectory's buffers (one per thread)
    double* slot            # one network evaluation's activations when none are recorded
    double* tmp
    double* mbar
    double* tau
    # a record for the reverse pass (NULL: none): per step, in the order the steps run, the
    # rows x, grad U(x), v at its start, v after the first v-update and x after the first
    # x-update (5 dim doubles), then x, grad U, v at the end (3 dim) ...
    double* tape
    # ... and per step the activations of its four network evaluations (slot_size each)
    double* acts
    # the reverse pass (trainer only)
    double* q
    double* p
    double* g
    double* vel
    double* xbar
    double* vbar
    double* gbar
    double* bbar
    double* hv
    double* gS
    double* gQ
    double* gT
    double* hidden
    double* g_raw           # grad U at the end point before the inverse temperature
    double U_raw
    double* grad            # where the parameters' gradient is added (laid out like them)
    Net vgrad
    Net xgrad
    double* scratch         # the target's
    Py_ssize_t n_gradient_evals
    Py_ssize_t n_hessian_vector_evals


cdef inline Py_ssize_t slot_size(Py_ssize_t n, Py_ssize_t H) noexcept nogil:
    # e1, z1, e2, z2 (H each), then the heads S, Q, T (n each)
    return 4 * H + 3 * n


cdef Py_ssize_t work_size(Py_ssize_t n, Py_ssize_t H, Py_ssize_t T, bint reverse) noexcept nogil:
    cdef Py_ssize_t size = slot_size(n, H) + 2 * n + 2
    if reverse:
        size += 5 * n * T + 3 * n + 4 * T * slot_size(n, H) + 13 * n + 2 * H
    return size


cdef void work_view(double* base, Py_ssize_t n, Py_ssize_t H, Py_ssize_t T, bint reverse,
                    Work* w) noexcept nogil:
    """Point ``w`` into ``base`` (``work_size`` doubles); grad and scratch are left NULL."""
    cdef double* at = base
    memset(w, 0, sizeof(Work))
    w.slot = at; at += slot_size(n, H)
    w.tmp = at; at += n
    w.mbar = at; at += n
    w.tau = at; at += 2
    if not reverse:
        return
    w.tape = at; at += 5 * n * T + 3 * n
    w.acts = at; at += 4 * T * slot_size(n, H)
    w.q = at; at += n
    w.p = at; at += n
    w.g = at; at += n
    w.vel = at; at += n
    w.xbar = at; at += n
    w.vbar = at; at += n
    w.gbar = at; at += n
    w.bbar = at; at += n
    w.hv = at; at += n
    w.gS = at; at += n
    w.gQ = at; at += n
    w.gT = at; at += n
    w.g_raw = at; at += n
    w.hidden = at


cdef void work_gradient(Work* w, double* grad, Py_ssize_t n, Py_ssize_t H) noexcept nogil:
    """Let ``w`` add the parameters' gradient into ``grad``."""
    w.grad = grad
    cdef Py_ssize_t span = net_view(grad + 1, n, H, &w.vgrad)
    net_view(grad + 1 + span, n, H, &w.xgrad)


cdef inline double* slot_of(const Model* M, Work* w, Py_ssize_t step, int k) noexcept nogil:
    """Where the k-th network evaluation (0-3) of ``step`` keeps its activations."""
    if w.acts == NULL:
        return w.slot
    return w.acts + (4 * step + k) * slot_size(M.n, M.H)


cdef void net_eval(const Model* M, const Net* net, const double* a, const double* b,
                   const double* tau, double* slot) noexcept nogil:
    """The heads (S, Q, T) of ``net`` for inputs (a, b, tau), into ``slot`` after the first
    layer's pre-activation and activation and the second's (kept for a reverse pass)."""
    cdef Py_ssize_t i
    cdef Py_ssize_t n = M.n, H = M.H
    cdef double* e1 = slot
    cdef double* z1 = slot + H
    cdef double* e2 = slot + 2 * H
    cdef double* z2 = slot + 3 * H
    cdef double* S = slot + 4 * H
    cdef double* Q = S + n
    cdef double* T = Q + n
    for i in range(H):
        e1[i] = net.b0[i] + net.Wt[2 * i] * tau[0] + net.Wt[2 * i + 1] * tau[1]
    if M.blas:
        _gemv(RowMajor, NoTrans, <int> H, <int> n, 1.0, net.Wa, <int> n, a, 1, 1.0, e1, 1)
        _gemv(RowMajor, NoTrans, <int> H, <int> n, 1.0, net.Wb, <int> n, b, 1, 1.0, e1, 1)
    else:
        for i in range(H):
            e1[i] += small_dot(n, net.Wa + i * n, a)
            e1[i] += small_dot(n, net.Wb + i * n, b)
    for i in range(H):
        z1[i] = e1[i] if e1[i] > 0.0 else 0.0
    if M.blas:
        memcpy(e2, net.b2, H * sizeof(double))
        _gemv(RowMajor, NoTrans, <int> H, <int> H, 1.0, net.W2, <int> H, z1, 1, 1.0, e2, 1)
    else:
        for i in range(H):
            e2[i] = net.b2[i] + small_dot(H, net.W2 + i * H, z1)
    for i in range(H):
        z2[i] = e2[i] if e2[i] > 0.0 else 0.0
    if M.blas:
        memcpy(S, net.bS, n * sizeof(double))
        _gemv(RowMajor, NoTrans, <int> n, <int> H, 1.0, net.WS, <int> H, z2, 1, 1.0, S, 1)
        memcpy(Q, net.bQ, n * sizeof(double))
        _gemv(RowMajor, NoTrans, <int> n, <int> H, 1.0, net.WQ, <int> H, z2, 1, 1.0, Q, 1)
        memcpy(T, net.bT, n * sizeof(double))
        _gemv(RowMajor, NoTrans, <int> n, <int> H, 1.0, net.WT, <int> H, z2, 1, 1.0, T, 1)
    elif net.WSt != NULL:
        memcpy(S, net.bS, n * sizeof(double))
        memcpy(Q, net.bQ, n * sizeof(double))
        memcpy(T, net.bT, n * sizeof(double))
        for i in range(H):
            if z2[i] != 0.0:
                small_axpy(n, z2[i], net.WSt + i * n, S)
                small_axpy(n, z2[i], net.WQt + i * n, Q)
                small_axpy(n, z2[i], net.WTt + i * n, T)
    else:
        for i in range(n):
            S[i] = net.bS[i] + small_dot(H, net.WS + i * H, z2)
            Q[i] = net.bQ[i] + small_dot(H, net.WQ + i * H, z2)
            T[i] = net.bT[i] + small_dot(H, net.WT + i * H, z2)
    if net.eS != NULL:
        for i in range(n):
            S[i] = net.eS[i] * tanh(S[i])
            Q[i] = net.eQ[i] * tanh(Q[i])
    else:
        for i in range(n):
            S[i] = exp(net.lS[i]) * tanh(S[i])
            Q[i] = exp(net.lQ[i]) * tanh(Q[i])


cdef inline void time_features(const Model* M, Work* w, Py_ssize_t t) noexcept nogil:
    w.tau[0] = cos(2.0 * M_PI * t / M.T)
    w.tau[1] = sin(2.0 * M_PI * t / M.T)


cdef double v_update(const Model* M, Work* w, double* slot, const double* x, const double* grad,
                     double* v, double eps, bint inverse) noexcept nogil:
    """Sub-update 1 or 4 (or its inverse) of v at x; returns its log |det| (forward)."""
    cdef Py_ssize_t i
    cdef double logdet = 0.0
    cdef double* S = slot + 4 * M.H
    cdef double* Q = S + M.n
    cdef double* Tv = Q + M.n
    net_eval(M, &M.vnet, x, grad, w.tau, slot)
    for i in range(M.n):
        if inverse:
            v[i] = (v[i] + 0.5 * eps * (exp(eps * Q[i]) * grad[i] - Tv[i])) \
                * exp(-0.5 * eps * S[i])
        else:
            v[i] = v[i] * exp(0.5 * eps * S[i]) - 0.5 * eps * (exp(eps * Q[i]) * grad[i] - Tv[i])
        logdet += 0.5 * eps * S[i]
    return logdet


cdef double x_update(const Model* M, Work* w, double* slot, double* x, const double* v,
                     const double* keep, double eps, bint inverse) noexcept nogil:
    """Sub-update 2 or 3 (or its inverse): the coordinates where ``keep`` is 0 change, driven
    by (v, keep * x); returns its log |det| (forward)."""
    cdef Py_ssize_t i
    cdef double logdet = 0.0
    cdef double* S = slot + 4 * M.H
    cdef double* Q = S + M.n
    cdef double* Tv = Q + M.n
    for i in range(M.n):
        w.tmp[i] = keep[i] * x[i]
    net_eval(M, &M.xnet, v, w.tmp, w.tau, slot)
    for i in range(M.n):
        if keep[i] == 0.0:
            if inverse:
                x[i] = (x[i] - eps * (exp(eps * Q[i]) * v[i] + Tv[i])) * exp(-eps * S[i])
            else:
                x[i] = x[i] * exp(eps * S[i]) + eps * (exp(eps * Q[i]) * v[i] + Tv[i])
            logdet += eps * S[i]
    return logdet


cdef inline bint all_finite(Py_ssize_t n, const double* x) noexcept nogil:
    return isfinite(small_dot(n, x, x))


cdef int trajectory(const Model* M, Work* w, CTarget target, TransformedTarget raw,
                    Metric metric, double* scratch, double* q, double* p, double* grad,
                    double* v, int direction, bint want_potential, double* U_end,
                    double* kinetic_end, TrajectoryInfo* info) except -1 nogil:
    """T steps in ``direction`` from (q, p) in place (``AugmentedLeapfrog.run``), recorded in
    ``w.tape`` and ``w.acts`` unless NULL. With ``raw`` (``target`` itself, or None) the end
    point's potential and gradient before the inverse temperature go to ``w.U_raw`` and
    ``w.g_raw`` as well."""
    cdef Py_ssize_t step, t, i
    cdef Py_ssize_t n = M.n
    cdef double eps = exp(M.log_eps[0])
    cdef double logdet = 0.0
    cdef double U = NAN
    cdef const double* m
    cdef bint last, finite
    cdef double* row
    info.converged = True
    info.residual = 0.0
    info.iterations = 0
    info.diverged = False
    for step in range(M.T):
        t = step if direction == 1 else M.T - 1 - step
        m = M.masks + t * n
        for i in range(n):
            w.mbar[i] = 1.0 - m[i]
        time_features(M, w, t)
        row = w.tape + 5 * n * step if w.tape != NULL else NULL
        if row != NULL:
            memcpy(row, q, n * sizeof(double))
            memcpy(row + n, grad, n * sizeof(double))
            memcpy(row + 2 * n, p, n * sizeof(double))
        if direction == 1:
            logdet += v_update(M, w, slot_of(M, w, step, 0), q, grad, p, eps, False)
            if row != NULL:
                memcpy(row + 3 * n, p, n * sizeof(double))
            logdet += x_update(M, w, slot_of(M, w, step, 1), q, p, m, eps, False)
            if row != NULL:
                memcpy(row + 4 * n, q, n * sizeof(double))
            logdet += x_update(M, w, slot_of(M, w, step, 2), q, p, w.mbar, eps, False)
        else:
            logdet -= v_update(M, w, slot_of(M, w, step, 0), q, grad, p, eps, True)
            if row != NULL:
                memcpy(row + 3 * n, p, n * sizeof(double))
            logdet -= x_update(M, w, slot_of(M, w, step, 1), q, p, w.mbar, eps, True)
            if row != NULL:
                memcpy(row + 4 * n, q, n * sizeof(double))
            logdet -= x_update(M, w, slot_of(M, w, step, 2), q, p, m, eps, True)
        last = step == M.T - 1
        if last and want_potential:
            if raw is not None:
                raw.untempered(q, &w.U_raw, w.g_raw, scratch)
                raw.tempered(w.U_raw, w.g_raw, &U, grad)
            else:
                target.potential_and_gradient(q, &U, grad, scratch)
        else:
            target.gradient(q, grad, scratch)
        finite = all_finite(n, grad) and all_finite(n, q)
        if not finite or (last and want_potential and not isfinite(U)):
            info.n_steps = step + 1
            info.n_gradients = step + 1
            info.diverged = True
            info.log_jacobian = 0.0
            U_end[0] = INFINITY
            kinetic_end[0] = INFINITY
            return 0
        if direction == 1:
            logdet += v_update(M, w, slot_of(M, w, step, 3), q, grad, p, eps, False)
        else:
            logdet -= v_update(M, w, slot_of(M, w, step, 3), q, grad, p, eps, True)
    if w.tape != NULL:
        row = w.tape + 5 * n * M.T
        memcpy(row, q, n * sizeof(double))
        memcpy(row + n, grad, n * sizeof(double))
        memcpy(row + 2 * n, p, n * sizeof(double))
    info.n_steps = M.T
    info.n_gradients = M.T
    info.log_jacobian = logdet
    U_end[0] = U
    kinetic_end[0] = metric.kinetic_and_velocity(p, v)
    if not (isfinite(kinetic_end[0]) and isfinite(logdet)):
        info.diverged = True
        U_end[0] = INFINITY
        kinetic_end[0] = INFINITY
    return 0


cdef void model_view(double* params, const double* masks, Py_ssize_t n, Py_ssize_t H,
                     Py_ssize_t T, Model* M) noexcept nogil:
    M.n, M.H, M.T = n, H, T
    M.blas = H * n >= BLAS_MIN_ELEMENTS
    M.log_eps = params
    M.masks = masks
    cdef Py_ssize_t span = net_view(params + 1, n, H, &M.vnet)
    net_view(params + 1 + span, n, H, &M.xnet)


cdef class AugmentedLeapfrog(Integrator):
    """L2HMC's learned leapfrog as an integrator of the chain (one object per chain: it holds
    the chain's scratch and direction; the parameters are shared and read in place).

    Parameters
    ----------
    dim, n_steps, hidden : int
        Dimension n, steps T per trajectory, network width H.
    params : ndarray of shape (size,)
        The flat parameter vector (``parameter_layout``), float64, C-contiguous; referenced,
        not copied.
    masks : ndarray of shape (n_steps, dim)
        The binary masks m_t (0.0 or 1.0).
    """

    cdef readonly Py_ssize_t dim, T, H
    cdef public int direction
    cdef object _params
    cdef object _masks
    cdef object _scratch
    cdef Model model
    cdef Work fwd

    def __init__(self, Py_ssize_t dim, Py_ssize_t n_steps, Py_ssize_t hidden, params, masks):
        layout = parameter_layout(dim, hidden)
        if not (isinstance(params, np.ndarray) and params.dtype == np.float64
                and params.ndim == 1 and params.flags.c_contiguous):
            raise TypeError("params must be a C-contiguous float64 ndarray")
        if params.shape[0] != layout["size"]:
            raise ValueError(f"params must have {layout['size']} entries for dim={dim}, "
                             f"hidden={hidden}, got {params.shape[0]}")
        masks = np.ascontiguousarray(masks, dtype=np.float64)
        if masks.shape != (n_steps, dim) or not np.all((masks == 0.0) | (masks == 1.0)):
            raise ValueError(f"masks must be an ({n_steps}, {dim}) array of zeros and ones")
        self.riemannian = False
        self.dim, self.T, self.H = dim, n_steps, hidden
        self._params = params
        self._masks = masks
        self._scratch = np.zeros(work_size(dim, hidden, n_steps, False))
        self.direction = 1
        cdef double[::1] p = params
        cdef double[:, ::1] m = masks
        cdef double[::1] s = self._scratch
        model_view(&p[0], &m[0, 0], dim, hidden, n_steps, &self.model)
        work_view(&s[0], dim, hidden, n_steps, False, &self.fwd)

    @property
    def step_size(self):
        """eps = exp(log eps), the current parameter's."""
        return exp(self.model.log_eps[0])

    cdef int begin(self, bitgen_t* bitgen) except -1 nogil:
        self.direction = 1 if random_standard_uniform(bitgen) < 0.5 else -1
        return 0

    cdef int run(self, CTarget target, Metric metric, double* scratch, double* q, double* p,
                 double* grad, double* v, double step_size, Py_ssize_t n_steps,
                 bint want_potential, double* U_end, double* kinetic_end,
                 TrajectoryInfo* info) except -1 nogil:
        """T steps in the current direction from (q, p) in place (``step_size`` and
        ``n_steps`` are the parameters' eps and T; the arguments are ignored)."""
        return trajectory(&self.model, &self.fwd, target, None, metric, scratch, q, p, grad, v,
                          self.direction, want_potential, U_end, kinetic_end, info)

    def apply(self, CTarget target, x, v, int direction):
        """One trajectory from (x, v) in ``direction`` (+1 or -1), for checks.

        Returns
        -------
        x, v : ndarrays of shape (dim,)
        log_jacobian : float
        potential : float
            U at the end point.
        diverged : bool
        """
        from ._metrics import EuclideanMetric
        if direction not in (1, -1):
            raise ValueError(f"direction must be +1 or -1, got {direction}")
        if target.dim != self.dim:
            raise ValueError(f"the target has dimension {target.dim}, the integrator {self.dim}")
        cdef double[::1] q = np.array(x, dtype=np.float64).ravel()
        cdef double[::1] p = np.array(v, dtype=np.float64).ravel()
        if q.shape[0] != self.dim or p.shape[0] != self.dim:
            raise ValueError(f"x and v must have shape ({self.dim},)")
        cdef double[::1] grad = np.empty(self.dim)
        cdef double[::1] vel = np.empty(self.dim)
        cdef double[::1] scratch = np.empty(max(target.scratch_size, 1))
        cdef Metric metric = EuclideanMetric(self.dim)
        cdef double U0, U_end, kinetic_end
        cdef TrajectoryInfo info
        target.potential_and_gradient(&q[0], &U0, &grad[0], &scratch[0])
        self.direction = direction
        self.run(target, metric, &scratch[0], &q[0], &p[0], &grad[0], &vel[0], 0.0, self.T,
                 True, &U_end, &kinetic_end, &info)
        return np.asarray(q), np.asarray(p), info.log_jacobian, U_end, bool(info.diverged)


# ---------------------------------------------------------------------------------------------
# Training: the loss of a batch of trajectories and its gradient by a hand-written reverse pass


cdef void net_backward(const Model* M, const Net* net, const Net* grad, const double* a,
                       const double* b, const double* tau, const double* slot, double* gS,
                       double* gQ, const double* gT, double* ga, double* gb,
                       double* hidden) noexcept nogil:
    """Reverse pass of ``net_eval`` (whose ``slot`` it takes): given the adjoints of the heads
    (gS, gQ, gT), add the weights' gradients into ``grad`` (a Net view of a vector laid out
    like the parameters) and the inputs' adjoints into ``ga`` and ``gb``. gS and gQ are
    overwritten (with the adjoints of the heads' pre-activations); ``hidden`` holds 2 H
    doubles of scratch. Rows whose adjoint is exactly 0 (the coordinates an x-update keeps,
    units off at a ReLU) are skipped: they would add zeros."""
    cdef Py_ssize_t i, k
    cdef Py_ssize_t n = M.n, H = M.H
    cdef double scale, th, gs, gq, gt, gi
    cdef const double* e1 = slot
    cdef const double* z1 = slot + H
    cdef const double* e2 = slot + 2 * H
    cdef const double* z2 = slot + 3 * H
    cdef const double* S = slot + 4 * H
    cdef const double* Q = S + n
    cdef double* g1 = hidden
    cdef double* g2 = hidden + H
    for i in range(n):  # S = exp(lS) tanh(s): dS/dlS = S, dS/ds = exp(lS) (1 - tanh^2)
        scale = net.eS[i] if net.eS != NULL else exp(net.lS[i])
        th = S[i] / scale
        grad.lS[i] += gS[i] * S[i]
        gS[i] *= scale * (1.0 - th * th)
        scale = net.eQ[i] if net.eQ != NULL else exp(net.lQ[i])
        th = Q[i] / scale
        grad.lQ[i] += gQ[i] * Q[i]
        gQ[i] *= scale * (1.0 - th * th)
        grad.bS[i] += gS[i]
        grad.bQ[i] += gQ[i]
        grad.bT[i] += gT[i]
    if M.blas:
        _ger(RowMajor, <int> n, <int> H, 1.0, gS, 1, z2, 1, grad.WS, <int> H)
        _ger(RowMajor, <int> n, <int> H, 1.0, gQ, 1, z2, 1, grad.WQ, <int> H)
        _ger(RowMajor, <int> n, <int> H, 1.0, gT, 1, z2, 1, grad.WT, <int> H)
        _gemv(RowMajor, Trans, <int> n, <int> H, 1.0, net.WS, <int> H, gS, 1, 0.0, g2, 1)
        _gemv(RowMajor, Trans, <int> n, <int> H, 1.0, net.WQ, <int> H, gQ, 1, 1.0, g2, 1)
        _gemv(RowMajor, Trans, <int> n, <int> H, 1.0, net.WT, <int> H, gT, 1, 1.0, g2, 1)
    elif net.WSt != NULL:  # grad's WS, WQ, WT hold the transposed matrices' gradient
        for k in range(H):
            g2[k] = 0.0
            if z2[k] == 0.0:  # off at the second ReLU
                continue
            small_axpy(n, z2[k], gS, grad.WS + k * n)
            small_axpy(n, z2[k], gQ, grad.WQ + k * n)
            small_axpy(n, z2[k], gT, grad.WT + k * n)
            g2[k] = small_dot(n, net.WSt + k * n, gS) + small_dot(n, net.WQt + k * n, gQ) \
                + small_dot(n, net.WTt + k * n, gT)
    else:
        for k in range(H):
            g2[k] = 0.0
        for i in range(n):
            gs, gq, gt = gS[i], gQ[i], gT[i]
            if gs == 0.0 and gq == 0.0 and gt == 0.0:
                continue
            small_axpy(H, gs, z2, grad.WS + i * H)
            small_axpy(H, gq, z2, grad.WQ + i * H)
            small_axpy(H, gt, z2, grad.WT + i * H)
            small_axpy(H, gs, net.WS + i * H, g2)
            small_axpy(H, gq, net.WQ + i * H, g2)
            small_axpy(H, gt, net.WT + i * H, g2)
    for k in range(H):  # through the second ReLU
        if e2[k] <= 0.0:
            g2[k] = 0.0
        grad.b2[k] += g2[k]
    if M.blas:
        _ger(RowMajor, <int> H, <int> H, 1.0, g2, 1, z1, 1, grad.W2, <int> H)
        _gemv(RowMajor, Trans, <int> H, <int> H, 1.0, net.W2, <int> H, g2, 1, 0.0, g1, 1)
    else:
        for k in range(H):
            g1[k] = 0.0
        for i in range(H):
            gi = g2[i]
            if gi == 0.0:
                continue
            small_axpy(H, gi, z1, grad.W2 + i * H)
            small_axpy(H, gi, net.W2 + i * H, g1)
    for i in range(H):  # through the first ReLU
        if e1[i] <= 0.0:
            g1[i] = 0.0
        grad.b0[i] += g1[i]
        grad.Wt[2 * i] += g1[i] * tau[0]
        grad.Wt[2 * i + 1] += g1[i] * tau[1]
    if M.blas:
        _ger(RowMajor, <int> H, <int> n, 1.0, g1, 1, a, 1, grad.Wa, <int> n)
        _ger(RowMajor, <int> H, <int> n, 1.0, g1, 1, b, 1, grad.Wb, <int> n)
        _gemv(RowMajor, Trans, <int> H, <int> n, 1.0, net.Wa, <int> n, g1, 1, 1.0, ga, 1)
        _gemv(RowMajor, Trans, <int> H, <int> n, 1.0, net.Wb, <int> n, g1, 1, 1.0, gb, 1)
    else:
        for i in range(H):
            gi = g1[i]
            if gi == 0.0:
                continue
            small_axpy(n, gi, a, grad.Wa + i * n)
            small_axpy(n, gi, b, grad.Wb + i * n)
            small_axpy(n, gi, net.Wa + i * n, ga)
            small_axpy(n, gi, net.Wb + i * n, gb)


cdef double v_backward(const Model* M, Work* w, const double* slot, const double* x,
                       const double* g, const double* v_in, const double* v_out,
                       double log_jacobian_bar, double eps, bint inverse) noexcept nogil:
    """Reverse of a v-update (or its inverse) at (x, g), whose network evaluation ``slot``
    holds: ``vbar`` goes from the adjoint of the output to that of the input; adds to ``xbar``
    and ``gbar``; returns d loss / d eps."""
    cdef Py_ssize_t i
    cdef double eQ, e, eps_bar = 0.0
    cdef const double* S = slot + 4 * M.H
    cdef const double* Q = S + M.n
    cdef const double* Tv = Q + M.n
    for i in range(M.n):
        eQ = exp(eps * Q[i])
        if not inverse:  # v_out = v e^{eps S/2} - eps/2 (e^{eps Q} g - T)
            e = exp(0.5 * eps * S[i])
            w.gS[i] = w.vbar[i] * v_in[i] * e * 0.5 * eps + log_jacobian_bar * 0.5 * eps
            w.gQ[i] = -w.vbar[i] * 0.5 * eps * eps * eQ * g[i]
            w.gT[i] = w.vbar[i] * 0.5 * eps
            w.gbar[i] -= w.vbar[i] * 0.5 * eps * eQ
            eps_bar += w.vbar[i] * (v_in[i] * e * 0.5 * S[i]
                                    - 0.5 * (eQ * g[i] - Tv[i])
                                    - 0.5 * eps * Q[i] * eQ * g[i]) \
                + log_jacobian_bar * 0.5 * S[i]
        else:  # v_out = (v + eps/2 (e^{eps Q} g - T)) e^{-eps S/2}
            e = exp(-0.5 * eps * S[i])
            w.gS[i] = -w.vbar[i] * 0.5 * eps * v_out[i] - log_jacobian_bar * 0.5 * eps
            w.gQ[i] = w.vbar[i] * e * 0.5 * eps * eps * eQ * g[i]
            w.gT[i] = -w.vbar[i] * e * 0.5 * eps
            w.gbar[i] += w.vbar[i] * e * 0.5 * eps * eQ
            eps_bar += w.vbar[i] * (e * (0.5 * (eQ * g[i] - Tv[i])
                                         + 0.5 * eps * Q[i] * eQ * g[i])
                                    - 0.5 * S[i] * v_out[i]) \
                - log_jacobian_bar * 0.5 * S[i]
        w.vbar[i] *= e
    net_backward(M, &M.vnet, &w.vgrad, x, g, w.tau, slot, w.gS, w.gQ, w.gT, w.xbar, w.gbar,
                 w.hidden)
    return eps_bar


cdef double x_backward(const Model* M, Work* w, const double* slot, const double* x_in,
                       const double* v, const double* x_out, const double* keep,
                       double log_jacobian_bar, double eps, bint inverse) noexcept nogil:
    """Reverse of an x-update (or its inverse) that changes the coordinates where ``keep`` is
    0, whose network evaluation ``slot`` holds: ``xbar`` goes from the adjoint of the output
    to that of the input; adds to ``vbar``; returns d loss / d eps."""
    cdef Py_ssize_t i
    cdef Py_ssize_t n = M.n
    cdef double eQ, e, eps_bar = 0.0
    cdef const double* S = slot + 4 * M.H
    cdef const double* Q = S + n
    cdef const double* Tv = Q + n
    for i in range(n):
        w.tmp[i] = keep[i] * x_in[i]
    for i in range(n):
        w.bbar[i] = 0.0
        if keep[i] != 0.0:
            w.gS[i] = w.gQ[i] = w.gT[i] = 0.0
            continue
        eQ = exp(eps * Q[i])
        if not inverse:  # x_out = x e^{eps S} + eps (e^{eps Q} v + T)
            e = exp(eps * S[i])
            w.gS[i] = w.xbar[i] * eps * x_in[i] * e + log_jacobian_bar * eps
            w.gQ[i] = w.xbar[i] * eps * eps * eQ * v[i]
            w.gT[i] = w.xbar[i] * eps
            w.vbar[i] += w.xbar[i] * eps * eQ
            eps_bar += w.xbar[i] * (S[i] * x_in[i] * e + eQ * v[i] + Tv[i]
                                    + eps * Q[i] * eQ * v[i]) \
                + log_jacobian_bar * S[i]
        else:  # x_out = (x - eps (e^{eps Q} v + T)) e^{-eps S}
            e = exp(-eps * S[i])
            w.gS[i] = -w.xbar[i] * eps * x_out[i] - log_jacobian_bar * eps
            w.gQ[i] = -w.xbar[i] * eps * eps * eQ * v[i] * e
            w.gT[i] = -w.xbar[i] * eps * e
            w.vbar[i] -= w.xbar[i] * eps * eQ * e
            eps_bar -= w.xbar[i] * (S[i] * x_out[i]
                                    + e * (eQ * v[i] + Tv[i] + eps * Q[i] * eQ * v[i])) \
                + log_jacobian_bar * S[i]
        w.xbar[i] *= e
    net_backward(M, &M.xnet, &w.xgrad, v, w.tmp, w.tau, slot, w.gS, w.gQ, w.gT, w.vbar,
                 w.bbar, w.hidden)
    for i in range(n):
        w.xbar[i] += keep[i] * w.bbar[i]
    return eps_bar


cdef int backward(const Model* M, Work* w, CTarget target, int direction,
                  double log_jacobian_bar, double eps) except -1 nogil:
    """Reverse pass over the trajectory recorded in ``w``: ``xbar`` and ``vbar`` hold the
    adjoints of its end point on entry; adds the parameters' gradient into ``w.grad``."""
    cdef Py_ssize_t step, t, i
    cdef Py_ssize_t n = M.n
    cdef bint inverse = direction == -1
    cdef const double* m
    cdef const double* first
    cdef const double* second
    cdef double* row
    cdef double* end
    cdef double eps_bar = 0.0
    for i in range(n):
        w.gbar[i] = 0.0
    for step in range(M.T - 1, -1, -1):
        t = step if not inverse else M.T - 1 - step
        m = M.masks + t * n
        for i in range(n):
            w.mbar[i] = 1.0 - m[i]
        time_features(M, w, t)
        if inverse:  # the inverse step undoes the x-updates in the other order
            first, second = w.mbar, m
        else:
            first, second = m, w.mbar
        row = w.tape + 5 * n * step    # x, g, v at the start, v1, y
        end = w.tape + 5 * n * (step + 1)  # x, g, v at the end
        # the forward pass's network evaluations of this step, in reverse
        eps_bar += v_backward(M, w, slot_of(M, w, step, 3), end, end + n, row + 3 * n,
                              end + 2 * n, log_jacobian_bar, eps, inverse)
        # every use of grad U at the step's end point is behind: through it to x
        target.hessian_vector(end, w.gbar, w.hv, w.scratch)
        w.n_hessian_vector_evals += 1
        for i in range(n):
            w.xbar[i] += w.hv[i]
            w.gbar[i] = 0.0
        eps_bar += x_backward(M, w, slot_of(M, w, step, 2), row + 4 * n, row + 3 * n, end,
                              second, log_jacobian_bar, eps, inverse)
        eps_bar += x_backward(M, w, slot_of(M, w, step, 1), row, row + 3 * n, row + 4 * n,
                              first, log_jacobian_bar, eps, inverse)
        eps_bar += v_backward(M, w, slot_of(M, w, step, 0), row, row + n, row + 2 * n,
                              row + 3 * n, log_jacobian_bar, eps, inverse)
    w.grad[0] += eps_bar * eps  # eps = exp(log eps)
    return 0


cdef class Trainer(AugmentedLeapfrog):
    """The loss of L2HMC (docs/algorithms.md section 7) over batches of trajectories, its gradient
    with respect to the flat parameter vector by a reverse pass written by hand, and Adam.

    For a start (x, v, d) and its proposal (x', v') with log-Jacobian J, the acceptance
    probability A = min(1, exp(U(x) + |v|^2/2 - U(x') - |v'|^2/2 + J)), delta = |x' - x|^2 A +
    1e-4 and the loss of the trajectory is scale / delta - delta / scale. The reverse pass runs
    the recorded trajectory backwards through every sub-update and log-Jacobian, and its
    networks from the activations recorded on the way forward, and through grad U by one
    Hessian-vector product of the target per step (the start point is data, so its gradient
    needs none). Parameters as for :class:`AugmentedLeapfrog`.

    The trainer keeps, per training chain, U and grad U (before the inverse temperature) at
    the chain's state: a chain's next trajectory starts from them instead of evaluating the
    target again, as long as the chain's state is bit for bit the one they belong to (a chain
    restored or set by the caller is evaluated afresh).
    """

    cdef object _buffers
    cdef readonly Py_ssize_t size  # of the parameter vector
    # the target's evaluations so far: gradients (each with its potential where the
    # trajectory needs one) and Hessian-vector products
    cdef readonly Py_ssize_t n_gradient_evals, n_hessian_vector_evals
    cdef double* grad            # the loss's gradient, laid out like the parameters
    # training reads the parameters through this model, with exp(lS) and exp(lQ) computed
    # once per iteration (``model``, which ``run`` uses, computes them where it needs them)
    cdef Model tmodel
    cdef object _derived
    cdef double* tgrad          # the gradient in the workspaces' layout (heads transposed)
    cdef object _tgrad
    cdef Metric metric
    # one workspace per thread, and the target scratch of each (for ``_scratch_target``)
    cdef Py_ssize_t n_workers
    cdef object _work_structs
    cdef object _work_buffers
    cdef object _scratches
    cdef object _scratch_target
    cdef Work* works
    # the training chains' U and grad U before the inverse temperature, at the states
    # cache_x, for the target _cache_target (cache_ok: computed)
    cdef object _cache_target
    cdef double[:, ::1] cache_x
    cdef double[:, ::1] cache_g
    cdef double[::1] cache_U
    cdef unsigned char[::1] cache_ok

    def __init__(self, Py_ssize_t dim, Py_ssize_t n_steps, Py_ssize_t hidden, params, masks):
        super().__init__(dim, n_steps, hidden, params, masks)
        from ._metrics import EuclideanMetric
        self.metric = EuclideanMetric(dim)
        cdef Py_ssize_t size = parameter_layout(dim, hidden)["size"]
        self.size = size
        self._buffers = np.zeros(size)
        cdef double[::1] b = self._buffers
        self.grad = &b[0]
        self.tmodel = self.model
        # the heads by the transposed matrices: 1.15x less time per training iteration on the
        # 50-d Gaussian, 1.1x more on the 2-d targets (dim < TRANSPOSED_MIN_DIM)
        cdef bint transposed = not self.model.blas and dim >= TRANSPOSED_MIN_DIM
        self._derived = np.zeros(4 * dim + (6 * hidden * dim if transposed else 0))
        self._tgrad = np.zeros(size)
        cdef double[::1] t = self._tgrad
        self.tgrad = &t[0]
        cdef double[::1] s = self._derived
        cdef double* at = &s[0]
        cdef Net* net
        cdef int j
        for j in range(2):
            net = &self.tmodel.vnet if j == 0 else &self.tmodel.xnet
            net.eS = at; at += dim
            net.eQ = at; at += dim
            if transposed:
                net.WSt = at; at += hidden * dim
                net.WQt = at; at += hidden * dim
                net.WTt = at; at += hidden * dim
        self.n_workers = 0
        self.works = NULL
        self._cache_target = None

    cdef void refresh_scales(self) noexcept nogil:
        """exp(lS), exp(lQ) and the transposed heads of the current parameters, for
        ``tmodel``."""
        cdef Py_ssize_t i, k, n = self.tmodel.n, H = self.tmodel.H
        cdef Net* net
        cdef int j
        for j in range(2):
            net = &self.tmodel.vnet if j == 0 else &self.tmodel.xnet
            for i in range(n):
                net.eS[i] = exp(net.lS[i])
                net.eQ[i] = exp(net.lQ[i])
            if net.WSt != NULL:
                for i in range(n):
                    for k in range(H):
                        net.WSt[k * n + i] = net.WS[i * H + k]
                        net.WQt[k * n + i] = net.WQ[i * H + k]
                        net.WTt[k * n + i] = net.WT[i * H + k]

    cdef void gradient_from_work_layout(self) noexcept nogil:
        """``grad`` from ``tgrad`` (the heads' gradients transposed back)."""
        cdef Py_ssize_t i, k, n = self.tmodel.n, H = self.tmodel.H
        cdef Net src[2]
        cdef Net dst[2]
        cdef Py_ssize_t span, j
        memcpy(self.grad, self.tgrad, self.size * sizeof(double))
        if self.tmodel.vnet.WSt == NULL:
            return
        span = net_view(self.tgrad + 1, n, H, &src[0])
        net_view(self.tgrad + 1 + span, n, H, &src[1])
        net_view(self.grad + 1, n, H, &dst[0])
        net_view(self.grad + 1 + span, n, H, &dst[1])
        for j in range(2):
            for i in range(n):
                for k in range(H):
                    dst[j].WS[i * H + k] = src[j].WS[k * n + i]
                    dst[j].WQ[i * H + k] = src[j].WQ[k * n + i]
                    dst[j].WT[i * H + k] = src[j].WT[k * n + i]

    def _prepare_workers(self, CTarget target, Py_ssize_t count):
        """At least ``count`` workspaces, each with a scratch of ``target``'s."""
        cdef Py_ssize_t k, n = self.dim
        cdef double[:, ::1] buffers
        cdef double[::1] scratch
        if count > self.n_workers:
            self._work_structs = np.zeros(count * sizeof(Work), dtype=np.uint8)
            self._work_buffers = np.zeros((count, work_size(n, self.H, self.T, True)))
            self.works = <Work*> <size_t> self._work_structs.ctypes.data
            buffers = self._work_buffers
            for k in range(count):
                work_view(&buffers[k, 0], n, self.H, self.T, True, &self.works[k])
            self.n_workers = count
            self._scratch_target = None
        if target is not self._scratch_target:
            self._scratches = [target.new_scratch() for _ in range(self.n_workers)]
            for k in range(self.n_workers):
                scratch = self._scratches[k]
                self.works[k].scratch = &scratch[0]
            self._scratch_target = target

    def _prepare_cache(self, TransformedTarget target, Py_ssize_t chains):
        """The chains' cache, forgotten for another target or number of chains."""
        if target is not self._cache_target or self.cache_ok.shape[0] != chains:
            self.cache_x = np.zeros((chains, self.dim))
            self.cache_g = np.zeros((chains, self.dim))
            self.cache_U = np.zeros(chains)
            self.cache_ok = np.zeros(chains, dtype=np.uint8)
            self._cache_target = target

    cdef void count_evaluations(self) noexcept nogil:
        """Move the workspaces' counts of evaluations to the trainer's."""
        cdef Py_ssize_t k
        for k in range(self.n_workers):
            self.n_gradient_evals += self.works[k].n_gradient_evals
            self.n_hessian_vector_evals += self.works[k].n_hessian_vector_evals
            self.works[k].n_gradient_evals = 0
            self.works[k].n_hessian_vector_evals = 0

    cdef int trajectory_loss(self, Work* w, CTarget target, TransformedTarget raw,
                             const double* x0, const double* v0, int direction, double weight,
                             double scale, double* U_start, double* g_start, bint start_known,
                             double* U_end, double* g_end, double* loss, double* accept,
                             double* x_end) except -1 nogil:
        """The loss of one trajectory from (x0, v0) in ``direction`` into ``loss``, and
        ``weight`` times its gradient added into ``w.grad``; writes A and the proposal's x.

        ``raw`` is ``target`` (a TransformedTarget) or None. With it, ``U_start`` and
        ``g_start`` hold U and grad U at x0 before the inverse temperature (read if
        ``start_known``, else evaluated and written), and ``U_end`` and ``g_end`` (unless NULL)
        get those at the proposal."""
        cdef Py_ssize_t i
        cdef const Model* M = &self.tmodel
        cdef Py_ssize_t n = M.n
        cdef double U0, U1, K1, K0 = 0.0, delta_H, A, d2 = 0.0, delta, c, D_bar
        cdef double eps = exp(M.log_eps[0])
        cdef TrajectoryInfo info
        memcpy(w.q, x0, n * sizeof(double))
        memcpy(w.p, v0, n * sizeof(double))
        for i in range(n):
            K0 += 0.5 * v0[i] * v0[i]
        if raw is None:
            target.potential_and_gradient(w.q, &U0, w.g, w.scratch)
            w.n_gradient_evals += 1
        else:
            if not start_known:
                raw.untempered(w.q, U_start, g_start, w.scratch)
                w.n_gradient_evals += 1
            raw.tempered(U_start[0], g_start, &U0, w.g)
        trajectory(M, w, target, raw, self.metric, w.scratch, w.q, w.p, w.g, w.vel, direction,
                   True, &U1, &K1, &info)
        w.n_gradient_evals += info.n_gradients
        delta_H = U0 + K0 - U1 - K1 + info.log_jacobian
        if info.diverged or not isfinite(U0) or not isfinite(delta_H):
            accept[0] = 0.0
            memcpy(x_end, x0, n * sizeof(double))
            if U_end != NULL:
                U_end[0] = U_start[0]
                memcpy(g_end, g_start, n * sizeof(double))
            delta = 1e-4
            loss[0] = scale / delta - delta / scale
            return 0
        A = 1.0 if delta_H >= 0.0 else exp(delta_H)
        for i in range(n):
            d2 += (w.q[i] - x0[i]) ** 2
        delta = d2 * A + 1e-4
        accept[0] = A
        memcpy(x_end, w.q, n * sizeof(double))
        if U_end != NULL:
            U_end[0] = w.U_raw
            memcpy(g_end, w.g_raw, n * sizeof(double))
        c = weight * (-scale / (delta * delta) - 1.0 / scale)  # d loss / d delta
        D_bar = c * d2 * A if delta_H < 0.0 else 0.0           # through A = exp(delta_H)
        for i in range(n):
            w.xbar[i] = 2.0 * c * A * (w.q[i] - x0[i]) - D_bar * w.g[i]
            w.vbar[i] = -D_bar * w.p[i]
        backward(M, w, target, direction, D_bar, eps)
        loss[0] = scale / delta - delta / scale
        return 0

    def loss_and_gradient(self, CTarget target, x, v, directions, double scale=0.1):
        """The mean loss of trajectories from the rows of ``x`` and ``v`` (ndarrays of shape
        (batch, dim)) in ``directions`` (+1 or -1 each), and its gradient with respect to the
        parameter vector (for checks against finite differences).

        Returns
        -------
        loss : float
        gradient : ndarray of shape (size,)
        accept : ndarray of shape (batch,)
            The acceptance probabilities A.
        proposals : ndarray of shape (batch, dim)
        """
        cdef double[:, ::1] xs = np.ascontiguousarray(x, dtype=np.float64)
        cdef double[:, ::1] vs = np.ascontiguousarray(v, dtype=np.float64)
        cdef long long[::1] ds = np.ascontiguousarray(directions, dtype=np.longlong)
        cdef Py_ssize_t B = xs.shape[0], b, i
        if xs.shape[1] != self.dim or vs.shape[0] != B or vs.shape[1] != self.dim \
                or ds.shape[0] != B or target.dim != self.dim:
            raise ValueError("x and v must have shape (batch, dim), directions (batch,), "
                             "and the target the integrator's dimension")
        accept = np.empty(B)
        proposals = np.empty((B, self.dim))
        cdef double[::1] a = accept
        cdef double[:, ::1] out = proposals
        cdef double loss = 0.0, one
        self._prepare_workers(target, 1)
        cdef Work* w = &self.works[0]
        work_gradient(w, self.tgrad, self.dim, self.H)
        with nogil:
            self.refresh_scales()
            for i in range(self.size):
                self.tgrad[i] = 0.0
            for b in range(B):
                self.trajectory_loss(w, target, None, &xs[b, 0], &vs[b, 0], <int> ds[b],
                                     1.0 / B, scale, NULL, NULL, False, NULL, NULL, &one,
                                     &a[b], &out[b, 0])
                loss += one
            self.gradient_from_work_layout()
            self.count_evaluations()
        return loss / B, np.array(self._buffers), accept, proposals

    cdef int adam(self, double* params, double* m, double* v, Py_ssize_t step,
                  double learning_rate) noexcept nogil:
        """One Adam step (beta1 0.9, beta2 0.999, eps 1e-8) on ``grad``, the ``step``-th
        (from 1); skipped, returning 1, if the gradient is not finite."""
        cdef Py_ssize_t i
        cdef double c1 = 1.0 - pow(0.9, <double> step), c2 = 1.0 - pow(0.999, <double> step)
        for i in range(self.size):
            if not isfinite(self.grad[i]):
                return 1
        for i in range(self.size):
            m[i] = 0.9 * m[i] + 0.1 * self.grad[i]
            v[i] = 0.999 * v[i] + 0.001 * self.grad[i] * self.grad[i]
            params[i] -= learning_rate * (m[i] / c1) / (sqrt(v[i] / c2) + 1e-8)
        return 0

    def train(self, TransformedTarget target, x, generator, Py_ssize_t n_iterations, adam_m, adam_v,
              Py_ssize_t step, double learning_rate, double decay_rate, Py_ssize_t decay_steps,
              double scale, double burnin_weight, temperatures, burnin_mean, burnin_sd,
              losses, acceptance, threads=None):
        """``n_iterations`` training iterations on the chains ``x`` (batch, dim), in place:
        per iteration fresh momenta and directions, the mean loss of the chains' trajectories
        plus ``burnin_weight`` times that of trajectories started afresh from N(burnin_mean,
        diag(burnin_sd^2)), its gradient, one Adam step (``adam_m``, ``adam_v`` updated in
        place; learning rate ``learning_rate * decay_rate ** (step // decay_steps)``, ``step``
        counting earlier iterations), then a Metropolis step of every chain to its proposal.
        The dynamics of iteration i use U / ``temperatures[i]`` (``target``'s inverse
        temperature is set; it is left at the last one). Writes the loss and the
        chains' mean acceptance probability of each iteration into ``losses`` and
        ``acceptance``; returns the number of updates skipped for a non-finite gradient.

        The trajectories run on ``threads`` OpenMP threads (None: OpenMP's limit, e.g.
        OMP_NUM_THREADS or threadpoolctl's; always one for a target that calls Python); the results
        do not depend on the number. Each iteration draws all its random numbers before the
        trajectories, in the order of one serial pass. A chain's trajectory starts from the U
        and grad U the trainer kept from the chain's last accepted proposal (or start), so
        ``n_gradient_evals`` grows by the T gradients of each trajectory plus one for each
        start evaluated: the burn-in batch's fresh starts and the chains whose state the
        trainer has not seen (the first iteration's, or ones changed between calls)."""
        cdef double[:, ::1] xs = x
        cdef Py_ssize_t B = xs.shape[0], n = self.dim
        cdef double[::1] m_ = adam_m
        cdef double[::1] v_ = adam_v
        cdef double[::1] temps = np.ascontiguousarray(temperatures, dtype=np.float64)
        cdef double[::1] mean = np.ascontiguousarray(burnin_mean, dtype=np.float64)
        cdef double[::1] sd = np.ascontiguousarray(burnin_sd, dtype=np.float64)
        cdef double[::1] loss_out = losses
        cdef double[::1] accept_out = acceptance
        if (xs.shape[1] != n or target.dim != n or m_.shape[0] != self.size
                or v_.shape[0] != self.size or temps.shape[0] < n_iterations
                or mean.shape[0] != n or sd.shape[0] != n or loss_out.shape[0] < n_iterations
                or accept_out.shape[0] < n_iterations):
            raise ValueError("train: inconsistent shapes")
        cdef bint burnin = burnin_weight > 0.0
        # the trajectories of an iteration: the chains', then the fresh starts'
        cdef Py_ssize_t n_traj = B * (2 if burnin else 1)
        cdef Py_ssize_t n_blocks = min(<Py_ssize_t> MAX_BLOCKS, n_traj)
        cdef int n_threads = omp_get_max_threads() if threads is None else max(1, int(threads))
        if isinstance(target.base, PyCallableTarget):
            n_threads = 1  # its calls take the GIL in turn
        n_threads = <int> min(<Py_ssize_t> n_threads, n_blocks)
        self._prepare_workers(target, n_threads)
        self._prepare_cache(target, B)
        cdef double[::1] params = self._params
        cdef double[:, ::1] momenta = np.empty((n_traj, n))
        cdef double[:, ::1] fresh = np.empty((B, n))
        cdef double[:, ::1] fresh_g = np.empty((B, n))
        cdef double[:, ::1] fresh_end = np.empty((B, n))
        cdef double[::1] fresh_U = np.empty(B)
        cdef double[:, ::1] proposals = np.empty((B, n))
        cdef double[:, ::1] proposal_g = np.empty((B, n))
        cdef double[::1] proposal_U = np.empty(B)
        cdef double[::1] traj_loss = np.empty(n_traj)
        cdef double[::1] accept = np.empty(n_traj)
        cdef double[::1] uniforms = np.empty(B)
        cdef int[::1] directions = np.empty(n_traj, dtype=np.intc)
        cdef double[:, ::1] block_grad = np.empty((n_blocks, self.size))
        cdef unsigned char[::1] ok = self.cache_ok
        cdef double[:, ::1] cx = self.cache_x
        cdef double[:, ::1] cg = self.cache_g
        cdef double[::1] cU = self.cache_U
        cdef double loss, mean_accept
        cdef Py_ssize_t it, b, i, k, blk, skipped = 0
        cdef bint known
        cdef Work* w
        bit_generator = generator.bit_generator
        cdef bitgen_t* bitgen = get_bitgen(bit_generator)
        with bit_generator.lock, nogil:
            for it in range(n_iterations):
                target.inverse_temperature = 1.0 / temps[it]
                self.refresh_scales()
                # the draws, in the order of a serial pass over the trajectories
                random_standard_normal_fill(bitgen, B * n, &momenta[0, 0])
                for b in range(B):
                    directions[b] = 1 if random_standard_uniform(bitgen) < 0.5 else -1
                if burnin:
                    random_standard_normal_fill(bitgen, B * n, &fresh[0, 0])
                    random_standard_normal_fill(bitgen, B * n, &momenta[B, 0])
                    for b in range(B):
                        for i in range(n):
                            fresh[b, i] = mean[i] + sd[i] * fresh[b, i]
                        directions[B + b] = 1 if random_standard_uniform(bitgen) < 0.5 else -1
                for b in range(B):
                    uniforms[b] = random_standard_uniform(bitgen)
                for blk in prange(n_blocks, schedule="dynamic", num_threads=n_threads):
                    w = &self.works[threadid()]
                    memset(&block_grad[blk, 0], 0, self.size * sizeof(double))
                    work_gradient(w, &block_grad[blk, 0], n, self.H)
                    for k in range(blk * n_traj // n_blocks, (blk + 1) * n_traj // n_blocks):
                        if k < B:
                            known = ok[k] and memcmp(&cx[k, 0], &xs[k, 0],
                                                     n * sizeof(double)) == 0
                            if not known:
                                memcpy(&cx[k, 0], &xs[k, 0], n * sizeof(double))
                                ok[k] = 1
                            self.trajectory_loss(
                                w, target, target, &xs[k, 0], &momenta[k, 0], directions[k],
                                1.0 / B, scale, &cU[k], &cg[k, 0], known, &proposal_U[k],
                                &proposal_g[k, 0], &traj_loss[k], &accept[k],
                                &proposals[k, 0])
                        else:
                            # only the chains move: these starts are drawn afresh each time
                            b = k - B
                            self.trajectory_loss(
                                w, target, target, &fresh[b, 0], &momenta[k, 0], directions[k],
                                burnin_weight / B, scale, &fresh_U[b], &fresh_g[b, 0], False,
                                NULL, NULL, &traj_loss[k], &accept[k], &fresh_end[b, 0])
                # the sums in a fixed order
                for i in range(self.size):
                    self.tgrad[i] = 0.0
                for blk in range(n_blocks):
                    for i in range(self.size):
                        self.tgrad[i] += block_grad[blk, i]
                self.gradient_from_work_layout()
                loss = 0.0
                mean_accept = 0.0
                for b in range(B):
                    loss += traj_loss[b] / B
                    mean_accept += accept[b] / B
                if burnin:
                    for b in range(B):
                        loss += burnin_weight * traj_loss[B + b] / B
                for b in range(B):
                    if uniforms[b] < accept[b]:
                        # the proposal's U and grad U are the chain's from now on
                        memcpy(&xs[b, 0], &proposals[b, 0], n * sizeof(double))
                        memcpy(&cx[b, 0], &proposals[b, 0], n * sizeof(double))
                        memcpy(&cg[b, 0], &proposal_g[b, 0], n * sizeof(double))
                        cU[b] = proposal_U[b]
                step += 1
                skipped += self.adam(&params[0], &m_[0], &v_[0], step,
                                     learning_rate * pow(decay_rate, <double> ((step - 1) // decay_steps)))
                loss_out[it] = loss
                accept_out[it] = mean_accept
            self.count_evaluations()
        return skipped
