"""L2HMC's augmented leapfrog (Levy, Hoffman and Sohl-Dickstein 2018; algorithms.md sec. 7).

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
"""
from libc.math cimport exp, tanh, cos, sin, isfinite, INFINITY, NAN, M_PI
from libc.string cimport memcpy

import numpy as np

from ._blas cimport _gemv, _dot, RowMajor, NoTrans
from ._integrators cimport Integrator, TrajectoryInfo
from ._metrics cimport Metric
from ._random cimport bitgen_t, random_standard_uniform
from ._targets cimport CTarget

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
    const double* Wa
    const double* Wb
    const double* Wt
    const double* b0
    const double* W2
    const double* b2
    const double* WS
    const double* bS
    const double* lS
    const double* WQ
    const double* bQ
    const double* lQ
    const double* WT
    const double* bT


cdef Py_ssize_t net_view(const double* base, Py_ssize_t n, Py_ssize_t H, Net* net) noexcept nogil:
    """Point ``net`` into ``base``; returns the number of doubles it spans."""
    cdef const double* at = base
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
    return at - base


cdef void net_eval(const Net* net, int n, int H, const double* a, const double* b,
                   const double* tau, double* work, double* S, double* Q, double* T) noexcept nogil:
    """The heads (S, Q, T) for inputs (a, b, tau); ``work`` holds 4 H doubles: the first
    layer's pre-activation and activation, then the second's (kept for a backward pass)."""
    cdef Py_ssize_t i
    cdef double* e1 = work
    cdef double* z1 = work + H
    cdef double* e2 = work + 2 * H
    cdef double* z2 = work + 3 * H
    for i in range(H):
        e1[i] = net.b0[i] + net.Wt[2 * i] * tau[0] + net.Wt[2 * i + 1] * tau[1]
    _gemv(RowMajor, NoTrans, H, n, 1.0, net.Wa, n, a, 1, 1.0, e1, 1)
    _gemv(RowMajor, NoTrans, H, n, 1.0, net.Wb, n, b, 1, 1.0, e1, 1)
    for i in range(H):
        z1[i] = e1[i] if e1[i] > 0.0 else 0.0
    memcpy(e2, net.b2, H * sizeof(double))
    _gemv(RowMajor, NoTrans, H, H, 1.0, net.W2, H, z1, 1, 1.0, e2, 1)
    for i in range(H):
        z2[i] = e2[i] if e2[i] > 0.0 else 0.0
    memcpy(S, net.bS, n * sizeof(double))
    _gemv(RowMajor, NoTrans, n, H, 1.0, net.WS, H, z2, 1, 1.0, S, 1)
    memcpy(Q, net.bQ, n * sizeof(double))
    _gemv(RowMajor, NoTrans, n, H, 1.0, net.WQ, H, z2, 1, 1.0, Q, 1)
    memcpy(T, net.bT, n * sizeof(double))
    _gemv(RowMajor, NoTrans, n, H, 1.0, net.WT, H, z2, 1, 1.0, T, 1)
    for i in range(n):
        S[i] = exp(net.lS[i]) * tanh(S[i])
        Q[i] = exp(net.lQ[i]) * tanh(Q[i])


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
    cdef Net vnet
    cdef Net xnet
    cdef const double* log_eps
    cdef const double* masks
    cdef double* work
    cdef double* S
    cdef double* Q
    cdef double* Tv
    cdef double* y
    cdef double* tmp
    cdef double* mbar
    cdef double* tau

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
        self._scratch = np.zeros(4 * hidden + 6 * dim + 2)
        self.direction = 1
        cdef double[::1] p = params
        cdef double[:, ::1] m = masks
        cdef double[::1] s = self._scratch
        self.log_eps = &p[0]
        cdef Py_ssize_t span = net_view(&p[1], dim, hidden, &self.vnet)
        net_view(&p[1 + span], dim, hidden, &self.xnet)
        self.masks = &m[0, 0]
        self.work = &s[0]
        self.S = self.work + 4 * hidden
        self.Q = self.S + dim
        self.Tv = self.Q + dim
        self.y = self.Tv + dim
        self.tmp = self.y + dim
        self.mbar = self.tmp + dim
        self.tau = self.mbar + dim

    @property
    def step_size(self):
        """eps = exp(log eps), the current parameter's."""
        return exp(self.log_eps[0])

    cdef int begin(self, bitgen_t* bitgen) except -1 nogil:
        self.direction = 1 if random_standard_uniform(bitgen) < 0.5 else -1
        return 0

    cdef void time_features(self, Py_ssize_t t) noexcept nogil:
        self.tau[0] = cos(2.0 * M_PI * t / self.T)
        self.tau[1] = sin(2.0 * M_PI * t / self.T)

    cdef double v_update(self, const double* x, const double* grad, double* v, double eps,
                         bint inverse) noexcept nogil:
        """Sub-update 1 or 4 (or its inverse) of v at x; returns its log |det| (forward)."""
        cdef Py_ssize_t i
        cdef double logdet = 0.0
        net_eval(&self.vnet, <int> self.dim, <int> self.H, x, grad, self.tau, self.work,
                 self.S, self.Q, self.Tv)
        for i in range(self.dim):
            if inverse:
                v[i] = (v[i] + 0.5 * eps * (exp(eps * self.Q[i]) * grad[i] - self.Tv[i])) \
                    * exp(-0.5 * eps * self.S[i])
            else:
                v[i] = v[i] * exp(0.5 * eps * self.S[i]) \
                    - 0.5 * eps * (exp(eps * self.Q[i]) * grad[i] - self.Tv[i])
            logdet += 0.5 * eps * self.S[i]
        return logdet

    cdef double x_update(self, double* x, const double* v, const double* keep, double eps,
                         bint inverse) noexcept nogil:
        """Sub-update 2 or 3 (or its inverse): the coordinates where ``keep`` is 0 change,
        driven by (v, keep * x); returns its log |det| (forward)."""
        cdef Py_ssize_t i
        cdef double logdet = 0.0
        for i in range(self.dim):
            self.tmp[i] = keep[i] * x[i]
        net_eval(&self.xnet, <int> self.dim, <int> self.H, v, self.tmp, self.tau, self.work,
                 self.S, self.Q, self.Tv)
        for i in range(self.dim):
            if keep[i] == 0.0:
                if inverse:
                    x[i] = (x[i] - eps * (exp(eps * self.Q[i]) * v[i] + self.Tv[i])) \
                        * exp(-eps * self.S[i])
                else:
                    x[i] = x[i] * exp(eps * self.S[i]) \
                        + eps * (exp(eps * self.Q[i]) * v[i] + self.Tv[i])
                logdet += eps * self.S[i]
        return logdet

    cdef int run(self, CTarget target, Metric metric, double* scratch, double* q, double* p,
                 double* grad, double* v, double step_size, Py_ssize_t n_steps,
                 bint want_potential, double* U_end, double* kinetic_end,
                 TrajectoryInfo* info) except -1 nogil:
        """T steps in the current direction from (q, p) in place (``step_size`` and
        ``n_steps`` are the parameters' eps and T; the arguments are ignored)."""
        cdef Py_ssize_t step, t, i
        cdef Py_ssize_t n = self.dim
        cdef double eps = exp(self.log_eps[0])
        cdef double logdet = 0.0
        cdef double U = NAN
        cdef const double* m
        cdef bint last, finite
        info.converged = True
        info.residual = 0.0
        info.iterations = 0
        info.diverged = False
        for step in range(self.T):
            t = step if self.direction == 1 else self.T - 1 - step
            m = self.masks + t * n
            for i in range(n):
                self.mbar[i] = 1.0 - m[i]
            self.time_features(t)
            if self.direction == 1:
                logdet += self.v_update(q, grad, p, eps, False)
                logdet += self.x_update(q, p, m, eps, False)
                logdet += self.x_update(q, p, self.mbar, eps, False)
            else:
                logdet -= self.v_update(q, grad, p, eps, True)
                logdet -= self.x_update(q, p, self.mbar, eps, True)
                logdet -= self.x_update(q, p, m, eps, True)
            last = step == self.T - 1
            if last and want_potential:
                target.potential_and_gradient(q, &U, grad, scratch)
            else:
                target.gradient(q, grad, scratch)
            finite = isfinite(_dot(<int> n, grad, 1, grad, 1)) and isfinite(_dot(<int> n, q, 1, q, 1))
            if not finite or (last and want_potential and not isfinite(U)):
                info.n_steps = step + 1
                info.n_gradients = step + 1
                info.diverged = True
                info.log_jacobian = 0.0
                U_end[0] = INFINITY
                kinetic_end[0] = INFINITY
                return 0
            if self.direction == 1:
                logdet += self.v_update(q, grad, p, eps, False)
            else:
                logdet -= self.v_update(q, grad, p, eps, True)
        info.n_steps = self.T
        info.n_gradients = self.T
        info.log_jacobian = logdet
        U_end[0] = U
        kinetic_end[0] = metric.kinetic_and_velocity(p, v)
        if not (isfinite(kinetic_end[0]) and isfinite(logdet)):
            info.diverged = True
            U_end[0] = INFINITY
            kinetic_end[0] = INFINITY
        return 0

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
