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
"""
from libc.math cimport exp, tanh, cos, sin, sqrt, pow, fabs, isfinite, INFINITY, NAN, M_PI
from libc.string cimport memcpy

import numpy as np

from ._blas cimport _gemv, _dot, _ger, _scal, RowMajor, NoTrans, Trans
from ._integrators cimport Integrator, TrajectoryInfo
from ._metrics cimport Metric
from ._random cimport bitgen_t, get_bitgen, random_standard_normal_fill, random_standard_uniform
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
    # optional record of the trajectory for a backward pass (NULL: none): per step, in the
    # order the steps run, the rows x, grad U(x), v at its start, v after the first v-update
    # and x after the first x-update (5 dim doubles), then x, grad U, v at the end (3 dim)
    cdef double* tape

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
        self.tape = NULL
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
        cdef double* row
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
            row = self.tape + 5 * n * step if self.tape != NULL else NULL
            if row != NULL:
                memcpy(row, q, n * sizeof(double))
                memcpy(row + n, grad, n * sizeof(double))
                memcpy(row + 2 * n, p, n * sizeof(double))
            if self.direction == 1:
                logdet += self.v_update(q, grad, p, eps, False)
                if row != NULL:
                    memcpy(row + 3 * n, p, n * sizeof(double))
                logdet += self.x_update(q, p, m, eps, False)
                if row != NULL:
                    memcpy(row + 4 * n, q, n * sizeof(double))
                logdet += self.x_update(q, p, self.mbar, eps, False)
            else:
                logdet -= self.v_update(q, grad, p, eps, True)
                if row != NULL:
                    memcpy(row + 3 * n, p, n * sizeof(double))
                logdet -= self.x_update(q, p, self.mbar, eps, True)
                if row != NULL:
                    memcpy(row + 4 * n, q, n * sizeof(double))
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
        if self.tape != NULL:
            row = self.tape + 5 * n * self.T
            memcpy(row, q, n * sizeof(double))
            memcpy(row + n, grad, n * sizeof(double))
            memcpy(row + 2 * n, p, n * sizeof(double))
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


# ---------------------------------------------------------------------------------------------
# Training: the loss of a batch of trajectories and its gradient by a hand-written reverse pass


cdef void net_backward(const Net* net, const Net* grad, int n, int H, const double* a,
                       const double* b, const double* tau, const double* work, const double* S,
                       const double* Q, double* gS, double* gQ, const double* gT, double* ga,
                       double* gb, double* hidden) noexcept nogil:
    """Reverse pass of ``net_eval`` (whose ``work``, S and Q it takes): given the adjoints of
    the heads (gS, gQ, gT), add the weights' gradients into ``grad`` (a Net view of a vector
    laid out like the parameters) and the inputs' adjoints into ``ga`` and ``gb``. gS and gQ
    are overwritten (with the adjoints of the heads' pre-activations); ``hidden`` holds 2 H
    doubles of scratch."""
    cdef Py_ssize_t i
    cdef double scale, th
    cdef const double* e1 = work
    cdef const double* z1 = work + H
    cdef const double* e2 = work + 2 * H
    cdef const double* z2 = work + 3 * H
    cdef double* g1 = hidden
    cdef double* g2 = hidden + H
    for i in range(n):  # S = exp(lS) tanh(s): dS/dlS = S, dS/ds = exp(lS) (1 - tanh^2)
        scale = exp(net.lS[i])
        th = S[i] / scale
        grad.lS[i] += gS[i] * S[i]
        gS[i] *= scale * (1.0 - th * th)
        scale = exp(net.lQ[i])
        th = Q[i] / scale
        grad.lQ[i] += gQ[i] * Q[i]
        gQ[i] *= scale * (1.0 - th * th)
        grad.bS[i] += gS[i]
        grad.bQ[i] += gQ[i]
        grad.bT[i] += gT[i]
    _ger(RowMajor, n, H, 1.0, gS, 1, z2, 1, grad.WS, H)
    _ger(RowMajor, n, H, 1.0, gQ, 1, z2, 1, grad.WQ, H)
    _ger(RowMajor, n, H, 1.0, gT, 1, z2, 1, grad.WT, H)
    _gemv(RowMajor, Trans, n, H, 1.0, net.WS, H, gS, 1, 0.0, g2, 1)
    _gemv(RowMajor, Trans, n, H, 1.0, net.WQ, H, gQ, 1, 1.0, g2, 1)
    _gemv(RowMajor, Trans, n, H, 1.0, net.WT, H, gT, 1, 1.0, g2, 1)
    for i in range(H):  # through the second ReLU
        if e2[i] <= 0.0:
            g2[i] = 0.0
        grad.b2[i] += g2[i]
    _ger(RowMajor, H, H, 1.0, g2, 1, z1, 1, grad.W2, H)
    _gemv(RowMajor, Trans, H, H, 1.0, net.W2, H, g2, 1, 0.0, g1, 1)
    for i in range(H):  # through the first ReLU
        if e1[i] <= 0.0:
            g1[i] = 0.0
        grad.b0[i] += g1[i]
        grad.Wt[2 * i] += g1[i] * tau[0]
        grad.Wt[2 * i + 1] += g1[i] * tau[1]
    _ger(RowMajor, H, n, 1.0, g1, 1, a, 1, grad.Wa, n)
    _ger(RowMajor, H, n, 1.0, g1, 1, b, 1, grad.Wb, n)
    _gemv(RowMajor, Trans, H, n, 1.0, net.Wa, n, g1, 1, 1.0, ga, 1)
    _gemv(RowMajor, Trans, H, n, 1.0, net.Wb, n, g1, 1, 1.0, gb, 1)


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

    cdef int potential_and_gradient(self, const double* q, double* U, double* grad,
                                    double* scratch) except -1 nogil:
        self.base.potential_and_gradient(self.point(q, scratch), U, grad, scratch)
        self.rescale(grad)
        U[0] = self.inverse_temperature * (U[0] + self.confine(q, grad))
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


cdef class Trainer(AugmentedLeapfrog):
    """The loss of L2HMC (docs/algorithms.md section 7) over batches of trajectories, its gradient
    with respect to the flat parameter vector by a reverse pass written by hand, and Adam.

    For a start (x, v, d) and its proposal (x', v') with log-Jacobian J, the acceptance
    probability A = min(1, exp(U(x) + |v|^2/2 - U(x') - |v'|^2/2 + J)), delta = |x' - x|^2 A +
    1e-4 and the loss of the trajectory is scale / delta - delta / scale. The reverse pass runs
    the recorded trajectory backwards through every sub-update, its networks and log-Jacobian,
    and through grad U by one Hessian-vector product of the target per step (the start point
    is data, so its gradient needs none). Parameters as for :class:`AugmentedLeapfrog`.
    """

    cdef object _buffers
    cdef readonly Py_ssize_t size  # of the parameter vector
    # the target's evaluations so far: gradients (each with its potential where the
    # trajectory needs one) and Hessian-vector products
    cdef readonly Py_ssize_t n_gradient_evals, n_hessian_vector_evals
    cdef Net vgrad
    cdef Net xgrad
    cdef double* grad            # the loss's gradient, laid out like the parameters
    cdef double* tape_buffer
    cdef double* xbar
    cdef double* vbar
    cdef double* gbar
    cdef double* bbar
    cdef double* hv
    cdef double* gS
    cdef double* gQ
    cdef double* gT
    cdef double* hidden
    cdef double* q
    cdef double* p
    cdef double* g
    cdef double* vel
    cdef Metric metric

    def __init__(self, Py_ssize_t dim, Py_ssize_t n_steps, Py_ssize_t hidden, params, masks):
        super().__init__(dim, n_steps, hidden, params, masks)
        from ._metrics import EuclideanMetric
        self.metric = EuclideanMetric(dim)
        cdef Py_ssize_t size = parameter_layout(dim, hidden)["size"]
        cdef Py_ssize_t n = dim
        self.size = size
        self._buffers = np.zeros(size + 5 * n * n_steps + 3 * n + 12 * n + 2 * hidden)
        cdef double[::1] b = self._buffers
        self.grad = &b[0]
        cdef Py_ssize_t span = net_view(self.grad + 1, dim, hidden, &self.vgrad)
        net_view(self.grad + 1 + span, dim, hidden, &self.xgrad)
        self.tape_buffer = self.grad + size
        cdef double* at = self.tape_buffer + 5 * n * n_steps + 3 * n
        self.xbar = at; at += n
        self.vbar = at; at += n
        self.gbar = at; at += n
        self.bbar = at; at += n
        self.hv = at; at += n
        self.gS = at; at += n
        self.gQ = at; at += n
        self.gT = at; at += n
        self.q = at; at += n
        self.p = at; at += n
        self.g = at; at += n
        self.vel = at; at += n
        self.hidden = at

    cdef double v_backward(self, const double* x, const double* g, const double* v_in,
                           const double* v_out, double log_jacobian_bar, double eps,
                           bint inverse) noexcept nogil:
        """Reverse of a v-update (or its inverse) at (x, g): ``vbar`` goes from the adjoint of
        the output to that of the input; adds to ``xbar`` and ``gbar``; returns d loss / d eps."""
        cdef Py_ssize_t i
        cdef int n = <int> self.dim
        cdef double eQ, e, eps_bar = 0.0
        net_eval(&self.vnet, n, <int> self.H, x, g, self.tau, self.work, self.S, self.Q,
                 self.Tv)
        for i in range(n):
            eQ = exp(eps * self.Q[i])
            if not inverse:  # v_out = v e^{eps S/2} - eps/2 (e^{eps Q} g - T)
                e = exp(0.5 * eps * self.S[i])
                self.gS[i] = self.vbar[i] * v_in[i] * e * 0.5 * eps + log_jacobian_bar * 0.5 * eps
                self.gQ[i] = -self.vbar[i] * 0.5 * eps * eps * eQ * g[i]
                self.gT[i] = self.vbar[i] * 0.5 * eps
                self.gbar[i] -= self.vbar[i] * 0.5 * eps * eQ
                eps_bar += self.vbar[i] * (v_in[i] * e * 0.5 * self.S[i]
                                           - 0.5 * (eQ * g[i] - self.Tv[i])
                                           - 0.5 * eps * self.Q[i] * eQ * g[i]) \
                    + log_jacobian_bar * 0.5 * self.S[i]
            else:  # v_out = (v + eps/2 (e^{eps Q} g - T)) e^{-eps S/2}
                e = exp(-0.5 * eps * self.S[i])
                self.gS[i] = -self.vbar[i] * 0.5 * eps * v_out[i] - log_jacobian_bar * 0.5 * eps
                self.gQ[i] = self.vbar[i] * e * 0.5 * eps * eps * eQ * g[i]
                self.gT[i] = -self.vbar[i] * e * 0.5 * eps
                self.gbar[i] += self.vbar[i] * e * 0.5 * eps * eQ
                eps_bar += self.vbar[i] * (e * (0.5 * (eQ * g[i] - self.Tv[i])
                                                + 0.5 * eps * self.Q[i] * eQ * g[i])
                                           - 0.5 * self.S[i] * v_out[i]) \
                    - log_jacobian_bar * 0.5 * self.S[i]
            self.vbar[i] *= e
        net_backward(&self.vnet, &self.vgrad, n, <int> self.H, x, g, self.tau, self.work,
                     self.S, self.Q, self.gS, self.gQ, self.gT, self.xbar, self.gbar,
                     self.hidden)
        return eps_bar

    cdef double x_backward(self, const double* x_in, const double* v, const double* x_out,
                           const double* keep, double log_jacobian_bar, double eps,
                           bint inverse) noexcept nogil:
        """Reverse of an x-update (or its inverse) that changes the coordinates where ``keep``
        is 0: ``xbar`` goes from the adjoint of the output to that of the input; adds to
        ``vbar``; returns d loss / d eps."""
        cdef Py_ssize_t i
        cdef int n = <int> self.dim
        cdef double eQ, e, eps_bar = 0.0
        for i in range(n):
            self.tmp[i] = keep[i] * x_in[i]
        net_eval(&self.xnet, n, <int> self.H, v, self.tmp, self.tau, self.work, self.S,
                 self.Q, self.Tv)
        for i in range(n):
            self.bbar[i] = 0.0
            if keep[i] != 0.0:
                self.gS[i] = self.gQ[i] = self.gT[i] = 0.0
                continue
            eQ = exp(eps * self.Q[i])
            if not inverse:  # x_out = x e^{eps S} + eps (e^{eps Q} v + T)
                e = exp(eps * self.S[i])
                self.gS[i] = self.xbar[i] * eps * x_in[i] * e + log_jacobian_bar * eps
                self.gQ[i] = self.xbar[i] * eps * eps * eQ * v[i]
                self.gT[i] = self.xbar[i] * eps
                self.vbar[i] += self.xbar[i] * eps * eQ
                eps_bar += self.xbar[i] * (self.S[i] * x_in[i] * e + eQ * v[i] + self.Tv[i]
                                           + eps * self.Q[i] * eQ * v[i]) \
                    + log_jacobian_bar * self.S[i]
            else:  # x_out = (x - eps (e^{eps Q} v + T)) e^{-eps S}
                e = exp(-eps * self.S[i])
                self.gS[i] = -self.xbar[i] * eps * x_out[i] - log_jacobian_bar * eps
                self.gQ[i] = -self.xbar[i] * eps * eps * eQ * v[i] * e
                self.gT[i] = -self.xbar[i] * eps * e
                self.vbar[i] -= self.xbar[i] * eps * eQ * e
                eps_bar -= self.xbar[i] * (self.S[i] * x_out[i]
                                           + e * (eQ * v[i] + self.Tv[i]
                                                  + eps * self.Q[i] * eQ * v[i])) \
                    + log_jacobian_bar * self.S[i]
            self.xbar[i] *= e
        net_backward(&self.xnet, &self.xgrad, n, <int> self.H, v, self.tmp, self.tau,
                     self.work, self.S, self.Q, self.gS, self.gQ, self.gT, self.vbar,
                     self.bbar, self.hidden)
        for i in range(n):
            self.xbar[i] += keep[i] * self.bbar[i]
        return eps_bar

    cdef int backward(self, CTarget target, double* scratch, double log_jacobian_bar,
                      double eps) except -1 nogil:
        """Reverse pass over the recorded trajectory: ``xbar`` and ``vbar`` hold the adjoints
        of its end point on entry; adds the parameters' gradient into ``grad``."""
        cdef Py_ssize_t step, t, i
        cdef Py_ssize_t n = self.dim
        cdef bint inverse = self.direction == -1
        cdef const double* m
        cdef const double* first
        cdef const double* second
        cdef double* row
        cdef double* end
        cdef double eps_bar = 0.0
        for i in range(n):
            self.gbar[i] = 0.0
        for step in range(self.T - 1, -1, -1):
            t = step if not inverse else self.T - 1 - step
            m = self.masks + t * n
            for i in range(n):
                self.mbar[i] = 1.0 - m[i]
            self.time_features(t)
            if inverse:  # the inverse step undoes the x-updates in the other order
                first, second = self.mbar, m
            else:
                first, second = m, self.mbar
            row = self.tape_buffer + 5 * n * step    # x, g, v at the start, v1, y
            end = self.tape_buffer + 5 * n * (step + 1)  # x, g, v at the end
            eps_bar += self.v_backward(end, end + n, row + 3 * n, end + 2 * n,
                                       log_jacobian_bar, eps, inverse)
            # every use of grad U at the step's end point is behind: through it to x
            target.hessian_vector(end, self.gbar, self.hv, scratch)
            self.n_hessian_vector_evals += 1
            for i in range(n):
                self.xbar[i] += self.hv[i]
                self.gbar[i] = 0.0
            eps_bar += self.x_backward(row + 4 * n, row + 3 * n, end, second,
                                       log_jacobian_bar, eps, inverse)
            eps_bar += self.x_backward(row, row + 3 * n, row + 4 * n, first,
                                       log_jacobian_bar, eps, inverse)
            eps_bar += self.v_backward(row, row + n, row + 2 * n, row + 3 * n,
                                       log_jacobian_bar, eps, inverse)
        self.grad[0] += eps_bar * eps  # eps = exp(log eps)
        return 0

    cdef double trajectory_loss(self, CTarget target, double* scratch, const double* x0,
                                const double* v0, int direction, double weight, double scale,
                                bint with_gradient, double* accept, double* x_end) except? -1 nogil:
        """The loss of one trajectory from (x0, v0) in ``direction``; with ``with_gradient``
        adds ``weight`` times its gradient into ``grad``. Writes A and the proposal's x."""
        cdef Py_ssize_t i
        cdef Py_ssize_t n = self.dim
        cdef double U0, U1, K1, K0 = 0.0, delta_H, A, d2 = 0.0, delta, c, D_bar
        cdef double eps = exp(self.log_eps[0])
        cdef TrajectoryInfo info
        memcpy(self.q, x0, n * sizeof(double))
        memcpy(self.p, v0, n * sizeof(double))
        for i in range(n):
            K0 += 0.5 * v0[i] * v0[i]
        target.potential_and_gradient(self.q, &U0, self.g, scratch)
        self.direction = direction
        self.tape = self.tape_buffer
        self.run(target, self.metric, scratch, self.q, self.p, self.g, self.vel, eps, self.T,
                 True, &U1, &K1, &info)
        self.tape = NULL
        self.n_gradient_evals += 1 + info.n_gradients
        delta_H = U0 + K0 - U1 - K1 + info.log_jacobian
        if info.diverged or not isfinite(U0) or not isfinite(delta_H):
            accept[0] = 0.0
            memcpy(x_end, x0, n * sizeof(double))
            delta = 1e-4
            return scale / delta - delta / scale
        A = 1.0 if delta_H >= 0.0 else exp(delta_H)
        for i in range(n):
            d2 += (self.q[i] - x0[i]) ** 2
        delta = d2 * A + 1e-4
        accept[0] = A
        memcpy(x_end, self.q, n * sizeof(double))
        if with_gradient:
            c = weight * (-scale / (delta * delta) - 1.0 / scale)  # d loss / d delta
            D_bar = c * d2 * A if delta_H < 0.0 else 0.0           # through A = exp(delta_H)
            for i in range(n):
                self.xbar[i] = 2.0 * c * A * (self.q[i] - x0[i]) - D_bar * self.g[i]
                self.vbar[i] = -D_bar * self.p[i]
            self.backward(target, scratch, D_bar, eps)
        return scale / delta - delta / scale

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
        cdef double[::1] scratch = target.new_scratch()
        cdef double loss = 0.0
        with nogil:
            for i in range(self.size):
                self.grad[i] = 0.0
            for b in range(B):
                loss += self.trajectory_loss(target, &scratch[0], &xs[b, 0], &vs[b, 0],
                                             <int> ds[b], 1.0 / B, scale, True, &a[b],
                                             &out[b, 0])
        return loss / B, np.array(self._buffers[:self.size]), accept, proposals

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
              losses, acceptance):
        """``n_iterations`` training iterations on the chains ``x`` (batch, dim), in place:
        per iteration fresh momenta and directions, the mean loss of the chains' trajectories
        plus ``burnin_weight`` times that of trajectories started afresh from N(burnin_mean,
        diag(burnin_sd^2)), its gradient, one Adam step (``adam_m``, ``adam_v`` updated in
        place; learning rate ``learning_rate * decay_rate ** (step // decay_steps)``, ``step``
        counting earlier iterations), then a Metropolis step of every chain to its proposal.
        The dynamics of iteration i use U / ``temperatures[i]`` (``target``'s inverse
        temperature is set; it is left at the last one). Writes the loss and the
        chains' mean acceptance probability of each iteration into ``losses`` and
        ``acceptance``; returns the number of updates skipped for a non-finite gradient."""
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
        cdef double[::1] params = self._params
        cdef double[::1] scratch = target.new_scratch()
        cdef double[:, ::1] momenta = np.empty((B, n))
        cdef double[:, ::1] fresh = np.empty((B, n))
        cdef double[:, ::1] proposals = np.empty((B, n))
        cdef double[::1] accept = np.empty(B)
        cdef double[::1] fresh_end = np.empty(n)
        cdef double loss, mean_accept, A_fresh
        cdef Py_ssize_t it, b, i, skipped = 0
        cdef int direction
        bit_generator = generator.bit_generator
        cdef bitgen_t* bitgen = get_bitgen(bit_generator)
        with bit_generator.lock, nogil:
            for it in range(n_iterations):
                target.inverse_temperature = 1.0 / temps[it]
                for i in range(self.size):
                    self.grad[i] = 0.0
                loss = 0.0
                mean_accept = 0.0
                random_standard_normal_fill(bitgen, B * n, &momenta[0, 0])
                for b in range(B):
                    direction = 1 if random_standard_uniform(bitgen) < 0.5 else -1
                    loss += self.trajectory_loss(target, &scratch[0], &xs[b, 0],
                                                 &momenta[b, 0], direction, 1.0 / B, scale,
                                                 True, &accept[b], &proposals[b, 0]) / B
                    mean_accept += accept[b] / B
                if burnin_weight > 0.0:
                    random_standard_normal_fill(bitgen, B * n, &fresh[0, 0])
                    random_standard_normal_fill(bitgen, B * n, &momenta[0, 0])
                    for b in range(B):
                        for i in range(n):
                            fresh[b, i] = mean[i] + sd[i] * fresh[b, i]
                        direction = 1 if random_standard_uniform(bitgen) < 0.5 else -1
                        # only the chains move: these starts are drawn afresh each time
                        loss += burnin_weight * self.trajectory_loss(
                            target, &scratch[0], &fresh[b, 0], &momenta[b, 0], direction,
                            burnin_weight / B, scale, True, &A_fresh, &fresh_end[0]) / B
                for b in range(B):
                    if random_standard_uniform(bitgen) < accept[b]:
                        memcpy(&xs[b, 0], &proposals[b, 0], n * sizeof(double))
                step += 1
                skipped += self.adam(&params[0], &m_[0], &v_[0], step,
                                     learning_rate * pow(decay_rate, <double> ((step - 1) // decay_steps)))
                loss_out[it] = loss
                accept_out[it] = mean_accept
        return skipped
