"""An ODE posterior: the Lotka-Volterra predator-prey model of Carpenter's Stan case study
("Predator-Prey Population Dynamics: the Lotka-Volterra model in Stan", 2018), on simulated
data. Each log density solves the ODE (``scipy.integrate.solve_ivp``), each gradient the ODE
with its forward sensitivities: a costly Python target, for benchmarks and slow tests of the
surrogate samplers.
"""
import threading

import numpy as np
from scipy.integrate import solve_ivp
from scipy.special import log_ndtr

__all__ = ["lotka_volterra", "LotkaVolterra"]

# the true (alpha, beta, gamma, delta, u0, v0, sigma_u, sigma_v) the data are simulated at:
# near the case study's posterior means for the Hudson's Bay lynx and hare pelts
TRUTH = np.array([0.55, 0.028, 0.80, 0.024, 33.0, 6.0, 0.25, 0.25])
HORIZON = 20.0  # T: the data are at T/n, 2T/n, ..., T

# priors: alpha, gamma ~ N(1, 0.5^2), beta, delta ~ N(0.05, 0.05^2), each truncated to (0, inf);
# u0, v0 ~ LogNormal(log 10, 1); sigma_u, sigma_v ~ LogNormal(-1, 1)
RATE_MEAN = np.array([1.0, 0.05, 1.0, 0.05])
RATE_SD = np.array([0.5, 0.05, 0.5, 0.05])
LOG_MEAN = np.array([np.log(10.0), np.log(10.0), -1.0, -1.0])  # of log u0, log v0, log sigmas
LOG_SD = np.ones(4)

# a solve is abandoned (the log density is -inf) once its right-hand side has been evaluated
# this often (about 35 times a solve's count near the posterior: a few tenths of a second),
# or when a population leaves (1e-150, 1e150) or stops being finite: only far in the tails,
# where the dynamics explode
MAX_RHS_EVALUATIONS = 20_000
LOG_HUGE = np.log(1e150)


class _SolveAbandoned(Exception):
    """Raised by the right-hand side to stop a solve that will not give a finite density."""


def _log_rhs(y, rates):
    """d/dt (log u, log v) = (alpha - beta v, -gamma + delta u) at y = (log u, log v) (shape
    (2,), or (2, k) for k states at once): the Lotka-Volterra equations for the logs."""
    alpha, beta, gamma, delta = rates
    return np.array([alpha - beta * np.exp(y[1]), -gamma + delta * np.exp(y[0])])


def _log_sensitivity_rhs(y, rates):
    """The right-hand side of the log populations and their forward sensitivities.

    ``y`` (shape (14,), or (14, k) for k states at once) holds w = log u, x = log v, then
    dw/dp and dx/dp for p = (log alpha, log beta, log gamma, log delta, log u0, log v0):
    d/dt (dz/dp) = J(z) dz/dp + df/dp, with J = [[0, -beta v], [delta u, 0]] the Jacobian
    of the right-hand side in z = (w, x).
    """
    alpha, beta, gamma, delta = rates
    beta_v = beta * np.exp(y[1])
    delta_u = delta * np.exp(y[0])
    out = np.empty_like(y)
    out[0] = alpha - beta_v
    out[1] = delta_u - gamma
    out[2:8] = -beta_v * y[8:14]
    out[8:14] = delta_u * y[2:8]
    # df/dp: the rates' columns (the initial values' are zero)
    out[2] += alpha
    out[3] -= beta_v
    out[10] -= gamma
    out[11] += delta_u
    return out


def _solve(rates, log_initial, times, rtol, atol, sensitivities):
    """(log u, log v) at ``times``, shape (2, n), with their sensitivities below (shape
    (14, n)) if asked; None when the solve fails, is abandoned, or is not finite."""
    if sensitivities:
        y0 = np.zeros(14)
        y0[6] = y0[13] = 1.0  # d log u / d log u0, d log v / d log v0 at t = 0
        rhs = _log_sensitivity_rhs
    else:
        y0 = np.empty(2)
        rhs = _log_rhs
    y0[:2] = log_initial
    rates = tuple(float(x) for x in rates)  # (Python floats: a faster right-hand side)
    calls = [0]

    def fun(t, y):
        calls[0] += 1
        if calls[0] > MAX_RHS_EVALUATIONS or not (abs(y[0]) < LOG_HUGE and abs(y[1]) < LOG_HUGE):
            raise _SolveAbandoned  # (a NaN fails the comparison too)
        return rhs(y, rates)

    with np.errstate(all="ignore"):
        try:
            sol = solve_ivp(fun, (0.0, times[-1]), y0, method="DOP853", t_eval=times,
                            rtol=rtol, atol=atol)
        except _SolveAbandoned:
            return None
    if not sol.success or sol.y.shape != (y0.size, times.size) or not np.all(np.isfinite(sol.y)):
        return None
    return sol.y


def _simulate(params, times, seed):
    """Data from the model at ``params`` (natural scale, as TRUTH): (y_u, y_v), shape
    (2, n), the ODE solved with tight tolerances."""
    rng = np.random.default_rng(seed)
    sol = solve_ivp(lambda t, y: _log_rhs(y, params[:4]), (0.0, times[-1]),
                    np.log(params[4:6]), method="DOP853", t_eval=times, rtol=1e-12, atol=1e-12)
    return np.exp(sol.y + params[6:8, None] * rng.standard_normal((2, times.size)))


def lotka_volterra(n_times=20, seed=0, rtol=1e-8, atol=1e-8):
    """The Lotka-Volterra predator-prey posterior (Carpenter's Stan case study
    "Predator-Prey Population Dynamics"), on data simulated from the model.

    Prey u and predators v follow

        du/dt = (alpha - beta v) u,   dv/dt = (-gamma + delta u) v,   (u, v)(0) = (u0, v0),

    observed at ``n_times`` times t_i = i T / n_times (i = 1..n_times, T = 20) with
    log-normal noise,

        log y_u(t_i) ~ N(log u(t_i), sigma_u^2),   log y_v(t_i) ~ N(log v(t_i), sigma_v^2).

    The data are simulated (``numpy.random.default_rng(seed)``) at alpha = 0.55,
    beta = 0.028, gamma = 0.80, delta = 0.024, u0 = 33, v0 = 6, sigma_u = sigma_v = 0.25
    (about the case study's posterior means for the Hudson's Bay lynx and hare): two cycles
    over T = 20, which identify every parameter.

    The 8 parameters are on the log scale: q = (log alpha, log beta, log gamma, log delta,
    log u0, log v0, log sigma_u, log sigma_v). The priors are the case study's, on the
    natural scale,

        alpha, gamma ~ N(1, 0.5^2) truncated to (0, inf),
        beta, delta ~ N(0.05, 0.05^2) truncated to (0, inf),
        u0, v0 ~ LogNormal(log 10, 1),   sigma_u, sigma_v ~ LogNormal(-1, 1),

    with the Jacobian of the logs (+ log x for each): so log u0, log v0 ~ N(log 10, 1) and
    log sigma_u, log sigma_v ~ N(-1, 1) on the sampled scale. The posterior is proper (every
    prior is).

    Parameters
    ----------
    n_times : int
        Number of observation times (of each species).
    seed : int
        Seed of the simulated noise.
    rtol, atol : float
        Relative and absolute tolerances of the ODE solves (``solve_ivp``'s), on the states
        and on their sensitivities alike.

    Returns
    -------
    target : LotkaVolterra
        A BridgeStan-style target (``dim``, ``log_density``, ``log_density_gradient``,
        ``init_point``) that pickles, so that ``sample()`` runs its chains in worker
        processes; ``LotkaVolterra(reference["times"], reference["y"], rtol, atol)`` is the
        same target. dim 8. The log density is the log joint density log p(y, q) (every
        constant of the densities above kept: the log posterior plus the log evidence).
        ``log_density`` solves the ODE alone (2 states); ``log_density_gradient`` solves it
        with its forward sensitivities (14 states: the two and their derivatives in
        log alpha, log beta, log gamma, log delta, log u0, log v0), the gradient following
        by the chain rule.
        Both solve for (log u, log v), d/dt log u = alpha - beta v, d/dt log v =
        -gamma + delta u, so that the populations stay positive, with ``solve_ivp``'s
        DOP853 (``t_eval`` the observation times). The log density is -inf (with a zero
        gradient) where a coordinate of q is not finite or is 700 or more in magnitude
        (exp overflows), where the density overflows, and where a solve fails or is
        abandoned: a population leaves (1e-150, 1e150) or is not finite, or the right-hand
        side has been evaluated 20,000 times (about 35 times a solve's count near the
        posterior); all only far in the tails, where the two kinds of solve may disagree on
        which points are -inf. Two
        counters, ``target.n_solves`` (every solve) and ``target.n_gradient_solves`` (those
        with sensitivities), count the solves made through this object in this process:
        not those in the workers of a process pool, whose copies count their own (from 0)
        and keep their counts; a run's result counts its evaluations in every process,
        ``n_density_evals`` and ``n_gradient_evals``. Set them to 0 to start a count.
        Chains start (``init_point``) at the true parameters with N(0, 0.1^2) jitter on each
        coordinate: the posterior (standard deviations about 0.07 to 0.17 on the log scale,
        correlations up to about 0.95) has a local mode about 44 lower in log density
        (sigma_u, sigma_v about 0.5 and 0.7, a poorer fit), where optimisers started as
        Stan starts chains, uniformly in (-2, 2), often end up.
    reference : dict
        ``truth``: the true q (log scale, shape (8,)) the data were simulated at; ``times``
        (shape (n_times,)) and ``y`` (shape (2, n_times): prey, predators), to state the same
        posterior elsewhere. No closed form of the posterior: compare with a long exact-HMC
        run.

    Notes
    -----
    Cost: with the defaults, near the posterior one ``log_density_gradient`` takes about
    5 ms on a core of its own (about 600 evaluations of the 14-state right-hand side, each
    a few NumPy operations: the cost is Python's, per step) and one ``log_density`` about
    3 ms (about 500 of the 2-state one); far from the posterior the dynamics are more violent
    and a solve may take ten times as long, the cap above bounding it (a few tenths of a
    second). The cost grows about linearly with the number of cycles in (0, T], hardly with
    ``n_times``, and slowly as ``rtol`` and ``atol`` shrink (DOP853 is of order 8).
    """
    if isinstance(n_times, bool) or not isinstance(n_times, (int, np.integer)) or n_times < 2:
        raise ValueError(f"n_times must be an integer >= 2, got {n_times!r}")
    times = HORIZON * np.arange(1, n_times + 1) / n_times
    y = _simulate(TRUTH, times, seed)
    return LotkaVolterra(times, y, rtol=rtol, atol=atol), dict(truth=np.log(TRUTH), times=times,
                                                               y=y)


class LotkaVolterra:
    """The Lotka-Volterra posterior of :func:`lotka_volterra` given its data: a picklable
    target (module-level, holding only arrays and numbers), so that its chains can run in
    worker processes.

    Parameters
    ----------
    times : array_like of shape (n,)
        The observation times, increasing, positive and finite (the ODE starts at t = 0).
    y : array_like of shape (2, n)
        The observed prey (row 0) and predators (row 1) at ``times``, positive and finite.
    rtol, atol : float
        The tolerances of the ODE solves (see :func:`lotka_volterra`).

    Attributes
    ----------
    dim : int
        8.
    has_gradient : bool
        True.
    n_solves, n_gradient_solves : int
        The solves made through this object in this process (every solve; those with
        sensitivities). A copy (``pickle``, ``copy.copy``: what a worker process of a pool
        receives) starts both at 0 and counts its own solves, which stay in its process: a
        run's result counts its evaluations in every process (``n_density_evals``,
        ``n_gradient_evals``). Set them to 0 to start a count. Thread-safe.

    Notes
    -----
    ``init_point(rng)`` starts chains about the parameters :func:`lotka_volterra` simulates
    its data at: with data of your own, pass ``init=`` to ``sample()``.

    See :func:`lotka_volterra` for the model, the log density and its cost.
    """

    dim = 8
    has_gradient = True

    def __init__(self, times, y, rtol=1e-8, atol=1e-8):
        times = np.array(times, dtype=np.float64)
        y = np.array(y, dtype=np.float64)
        if times.ndim != 1 or times.size < 1 or not np.all(np.isfinite(times)):
            raise ValueError(f"times must be a non-empty 1-d array of finite numbers, got "
                             f"shape {times.shape}")
        if times[0] <= 0 or np.any(np.diff(times) <= 0):
            raise ValueError("times must be positive and increasing")
        if y.shape != (2, times.size) or not np.all(np.isfinite(y) & (y > 0)):
            raise ValueError(f"y must be of shape (2, {times.size}), positive and finite")
        for name, value in (("rtol", rtol), ("atol", atol)):
            if isinstance(value, bool) or not (np.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be positive and finite, got {value!r}")
        times.flags.writeable = y.flags.writeable = False
        self.times, self.y, self.rtol, self.atol = times, y, float(rtol), float(atol)
        self._log_y = np.log(y)
        n = times.size
        # the constants: the truncations' normalisers (Phi(mean / sd)), the normal densities',
        # and the log-normal observations' Jacobian (-sum log y)
        self._constant = float(-4 * 0.5 * np.log(2 * np.pi) - np.log(RATE_SD).sum()
                               - log_ndtr(RATE_MEAN / RATE_SD).sum()
                               - 4 * 0.5 * np.log(2 * np.pi) - np.log(LOG_SD).sum()
                               - 2 * n * 0.5 * np.log(2 * np.pi) - self._log_y.sum())
        self._lock = threading.Lock()
        self.n_solves = 0
        self.n_gradient_solves = 0

    # a copy (pickled for a worker process) has a lock of its own and counts from 0:
    # a lock does not pickle, and the counts are this object's in this process
    def __getstate__(self):
        state = dict(self.__dict__)
        del state["_lock"]
        state["n_solves"] = state["n_gradient_solves"] = 0
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self):
        return (f"LotkaVolterra(n_times={self.times.size}, T={self.times[-1]:g}, "
                f"rtol={self.rtol:g}, atol={self.atol:g})")

    def _count(self, gradient):
        with self._lock:
            self.n_solves += 1
            self.n_gradient_solves += gradient

    def _prior(self, q):
        """The log prior density of q (its constant left out) and its gradient."""
        rates = np.exp(q[:4])
        z = (rates - RATE_MEAN) / RATE_SD
        w = (q[4:] - LOG_MEAN) / LOG_SD
        logp = -0.5 * z @ z + q[:4].sum() - 0.5 * w @ w
        return logp, np.concatenate([1.0 - z * rates / RATE_SD, -w / LOG_SD])

    def _log_likelihood(self, q, log_z):
        """The log likelihood (its constant left out) and the residuals / sigma^2."""
        residual = self._log_y - log_z
        scaled = residual * np.exp(-2 * q[6:8, None])
        return (-self.times.size * q[6:8].sum() - 0.5 * np.sum(residual * scaled), residual,
                scaled)

    @staticmethod
    def _outside(q):
        return not np.all(np.abs(q) < 700)  # (exp overflows; NaN too)

    def log_density(self, q):
        """The log joint density at ``q`` (float; -inf outside the support, see
        :func:`lotka_volterra`): one solve of the ODE."""
        q = np.asarray(q, dtype=np.float64)
        if self._outside(q):
            return -np.inf
        self._count(False)
        with np.errstate(all="ignore"):  # (far out, overflows: -inf below)
            log_z = _solve(np.exp(q[:4]), q[4:6], self.times, self.rtol, self.atol,
                           sensitivities=False)
            if log_z is None:
                return -np.inf
            value = self._prior(q)[0] + self._log_likelihood(q, log_z)[0] + self._constant
        return float(value) if np.isfinite(value) else -np.inf

    def log_density_gradient(self, q):
        """(log density, gradient) at ``q``: (float, ndarray of shape (8,)), (-inf, zeros)
        outside the support; one solve with forward sensitivities."""
        q = np.asarray(q, dtype=np.float64)
        if self._outside(q):
            return -np.inf, np.zeros_like(q)
        self._count(True)
        with np.errstate(all="ignore"):  # (far out, overflows: -inf below)
            sol = _solve(np.exp(q[:4]), q[4:6], self.times, self.rtol, self.atol,
                         sensitivities=True)
            if sol is None:
                return -np.inf, np.zeros_like(q)
            value, gradient = self._prior(q)
            likelihood, residual, scaled = self._log_likelihood(q, sol[:2])
            value += likelihood + self._constant
            # d/d log z(t_i) = residual_i / sigma^2, times d log z(t_i) / dq: the sensitivities
            gradient[:6] += scaled[0] @ sol[2:8].T + scaled[1] @ sol[8:14].T
            gradient[6:8] += np.sum(residual * scaled, axis=1) - self.times.size
        if not (np.isfinite(value) and np.all(np.isfinite(gradient))):
            return -np.inf, np.zeros_like(q)
        return float(value), gradient

    def init_point(self, rng):
        """Where a chain starts: the true parameters of :func:`lotka_volterra`'s simulated
        data with N(0, 0.1^2) jitter on each coordinate (``rng``: the chain's generator)."""
        return np.log(TRUTH) + 0.1 * rng.standard_normal(8)
