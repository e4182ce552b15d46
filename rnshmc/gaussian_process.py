"""Gaussian-process surrogates of a potential energy: the full GP and the sparse FITC
approximation (Zhang, Shahbaba and Zhao 2017, sec. 3.3; docs/algorithms.md section 3).

The predictive mean of either is a network of Gaussian radial units: centred on the training
points (full GP) or on the inducing points (FITC), all of one width in the coordinates scaled
by the lengthscales. Once fitted, the surrogate is that network as the C-level
:class:`~rnshmc._kernels._surrogate.NetworkTarget` of the random networks: a gradient costs
O(N d) (full GP) or O(M d) (FITC) through BLAS, without the GIL.
"""
import math
import time

import numpy as np
import scipy.linalg
import scipy.optimize

from ._kernels._surrogate import NetworkTarget
from .parallel import one_blas_thread
from .surrogate import Surrogate, _all_finite, _real_array, _rms, _rng, gradient_flops

__all__ = ["GaussianProcessSurrogate"]

# the inducing points' covariance gets this much of the signal variance on its diagonal (the
# points may nearly coincide); the full GP's noise variance is at least this much of it
_JITTER = 1e-8
_LOG_2PI = math.log(2.0 * math.pi)


def _squared_distances(A, B):
    """|a_i - b_j|^2 for the rows of A and B (BLAS, clipped at 0 against rounding)."""
    sq = np.einsum("ij,ij->i", A, A)[:, None] + np.einsum("ij,ij->i", B, B)[None, :]
    sq -= 2.0 * (A @ B.T)
    return np.maximum(sq, 0.0, out=sq)


def _pair_sum(P, A, B):
    """sum_ij P_ij (a_ik - b_jk)^2 for each coordinate k: the lengthscales' derivatives."""
    return (P.sum(axis=1) @ (A * A) + P.sum(axis=0) @ (B * B)
            - 2.0 * np.einsum("ik,ik->k", P @ B, A))


class _Hyper:
    """The hyperparameters as one vector of logs for the optimiser: [log signal sd,
    log lengthscales (1 or dim), log noise sd], then the inducing points (flattened) when
    they are optimised; fixed ones are left out of the vector."""

    def __init__(self, dim, signal, lengths, noise, free, inducing=None):
        self.dim = dim
        self.values = dict(signal=math.log(signal), lengths=np.log(np.atleast_1d(lengths)),
                           noise=math.log(noise))
        self.free = free  # names of the optimised groups, in vector order
        self.inducing = inducing
        self.optimize_inducing = "inducing" in free

    def vector(self):
        parts = [np.atleast_1d(self.values[k]) for k in ("signal", "lengths", "noise")
                 if k in self.free]
        if self.optimize_inducing:
            parts.append(self.inducing.ravel())
        return np.concatenate(parts) if parts else np.empty(0)

    def set(self, vector):
        i = 0
        for key in ("signal", "lengths", "noise"):
            if key in self.free:
                size = np.size(self.values[key])
                self.values[key] = float(vector[i]) if key != "lengths" else vector[i:i + size].copy()
                i += size
        if self.optimize_inducing:
            self.inducing = vector[i:].reshape(self.inducing.shape).copy()

    def gradient_vector(self, grads):
        parts = [np.atleast_1d(grads[k]) for k in ("signal", "lengths", "noise")
                 if k in self.free]
        if self.optimize_inducing:
            parts.append(grads["inducing"].ravel())
        return np.concatenate(parts) if parts else np.empty(0)

    @property
    def signal(self):
        return math.exp(self.values["signal"])

    @property
    def noise(self):
        return math.exp(self.values["noise"])

    @property
    def lengthscales(self):
        lengths = np.exp(self.values["lengths"])
        return np.full(self.dim, lengths[0]) if lengths.size == 1 else lengths


def full_parts(Xs, y, signal, noise):
    """The full GP's noise-free covariance K_N of the scaled inputs ``Xs``, the Cholesky
    factor of K_N + noise^2 I, alpha = (K_N + noise^2 I)^-1 y and the log marginal
    likelihood."""
    n = len(y)
    Kf = signal ** 2 * np.exp(-0.5 * _squared_distances(Xs, Xs))
    K = Kf.copy()
    K[np.diag_indices(n)] += noise ** 2 + _JITTER * signal ** 2
    L = scipy.linalg.cholesky(K, lower=True, check_finite=False)
    alpha = scipy.linalg.cho_solve((L, True), y, check_finite=False)
    value = -0.5 * y @ alpha - np.log(np.diag(L)).sum() - 0.5 * n * _LOG_2PI
    return Kf, L, alpha, value


def full_log_marginal_likelihood(X, y, signal, lengthscales, noise, gradient=False):
    """The full GP's log marginal likelihood log N(y | 0, K + noise^2 I), K_ij =
    signal^2 exp(-|x_i - x_j|^2_l / 2), and optionally its gradient with respect to log
    signal, the log lengthscales and log noise (docs/algorithms.md section 3).

    Returns
    -------
    value : float
    grads : dict or None
        {"signal": float, "lengths": ndarray (dim,), "noise": float}.
    """
    n = len(y)
    Xs = X / lengthscales
    Kf, L, alpha, value = full_parts(Xs, y, signal, noise)
    if not gradient:
        return value, None
    # d lml = 1/2 tr((alpha alpha^T - K^-1) dK)
    W = np.outer(alpha, alpha) - scipy.linalg.cho_solve((L, True), np.eye(n), check_finite=False)
    P = W * Kf
    grads = dict(signal=float(P.sum() + _JITTER * signal ** 2 * np.trace(W)),
                 lengths=0.5 * _pair_sum(P, Xs, Xs),
                 noise=float(noise ** 2 * np.trace(W)))
    return value, grads


def fitc_parts(X, Z, y, signal, lengthscales, noise):
    """The FITC quantities for training inputs X, inducing points Z and targets y: the
    kernel blocks, Lambda = diag(K_N - Q_N) + noise^2, the Cholesky factors L_M of K_M and
    L_A of A = I + V Lambda^-1 V^T (V = L_M^-1 K_MN; Sigma_M = K_M + K_MN Lambda^-1 K_NM =
    L_M A L_M^T, factorised through A, whose eigenvalues are at least 1, because Sigma_M
    itself loses K_M in rounding when the noise is small), the predictive weights
    w = Sigma_M^-1 K_MN Lambda^-1 y and the log marginal likelihood (docs/algorithms.md
    section 3)."""
    n, m = len(y), len(Z)
    Xs, Zs = X / lengthscales, Z / lengthscales
    U = signal ** 2 * np.exp(-0.5 * _squared_distances(Xs, Zs))         # K_NM
    Km = signal ** 2 * np.exp(-0.5 * _squared_distances(Zs, Zs))
    Km[np.diag_indices(m)] += _JITTER * signal ** 2
    Lm = scipy.linalg.cholesky(Km, lower=True, check_finite=False)
    V = scipy.linalg.solve_triangular(Lm, U.T, lower=True, check_finite=False)  # Lm^-1 K_MN
    lam = signal ** 2 - np.einsum("ij,ij->j", V, V) + noise ** 2
    lam = np.maximum(lam, noise ** 2)  # (rounding: K_N - Q_N is positive semi-definite)
    Vl = V / lam
    A = Vl @ V.T
    A[np.diag_indices(m)] += 1.0
    La = scipy.linalg.cholesky(A, lower=True, check_finite=False)
    c = scipy.linalg.solve_triangular(La, Vl @ y, lower=True, check_finite=False)
    w = scipy.linalg.solve_triangular(                                  # Lm^-T A^-1 V Lambda^-1 y
        Lm, scipy.linalg.solve_triangular(La, c, lower=True, trans="T", check_finite=False),
        lower=True, trans="T", check_finite=False)
    value = (-0.5 * (y @ (y / lam) - c @ c)
             - (np.log(np.diag(La)).sum() + 0.5 * np.log(lam).sum())
             - 0.5 * n * _LOG_2PI)
    return dict(Xs=Xs, Zs=Zs, U=U, Km=Km, Lm=Lm, V=V, lam=lam, La=La, w=w, value=value)


def fitc_log_marginal_likelihood(X, Z, y, signal, lengthscales, noise, gradient=False,
                                 inducing_gradient=False):
    """FITC's log marginal likelihood log N(y | 0, Q_N + Lambda) and optionally its gradient
    (log signal, log lengthscales, log noise, and with ``inducing_gradient`` the inducing
    points).

    With C = Q_N + Lambda, W = C^-1 - alpha alpha^T (alpha = C^-1 y) and B = K_M^-1 K_MN,
    d lml = -1/2 tr(W dC) = tr(G_U^T dK_NM) + tr(G_M dK_M) - 1/2 sum_j W_jj dK_jj
    - 1/2 tr(W) d noise^2, with G_U = (diag(W) - W) B^T and G_M = B (W - diag(W)) B^T / 2:
    O(N M^2) through the Woodbury form C^-1 = Lambda^-1 - Lambda^-1 V^T A^-1 V Lambda^-1,
    never an N x N matrix.
    """
    parts = fitc_parts(X, Z, y, signal, lengthscales, noise)
    if not gradient:
        return parts["value"], None
    U, Km, Lm, V, lam, La = (parts[k] for k in ("U", "Km", "Lm", "V", "lam", "La"))
    Xs, Zs = parts["Xs"], parts["Zs"]

    def a_solve(R):  # A^-1 R
        return scipy.linalg.cho_solve((La, True), R, check_finite=False)

    Vl = V / lam
    alpha = y / lam - Vl.T @ a_solve(Vl @ y)
    Bt = scipy.linalg.solve_triangular(Lm, V, lower=True, trans="T",
                                       check_finite=False).T            # B^T = K_NM K_M^-1
    # C^-1 B^T and diag(C^-1), by Woodbury
    CiBt = Bt / lam[:, None] - Vl.T @ a_solve(Vl @ Bt)
    LaVl = scipy.linalg.solve_triangular(La, Vl, lower=True, check_finite=False)
    diag_Ci = 1.0 / lam - np.einsum("ij,ij->j", LaVl, LaVl)
    WBt = CiBt - np.outer(alpha, alpha @ Bt)
    wd = diag_Ci - alpha ** 2                                            # diag(W)
    G_U = wd[:, None] * Bt - WBt
    BWBt = Bt.T @ WBt
    G_M = 0.5 * (BWBt - (Bt * wd[:, None]).T @ Bt)
    G_M = 0.5 * (G_M + G_M.T)
    PU, PM = G_U * U, G_M * Km
    PM_off = PM - np.diag(np.diag(PM))  # the jitter does not depend on the lengthscales
    grads = dict(
        signal=float(2.0 * PU.sum() + 2.0 * PM.sum() - wd.sum() * signal ** 2),
        lengths=_pair_sum(PU, Xs, Zs) + _pair_sum(PM_off, Zs, Zs),
        noise=float(-wd.sum() * noise ** 2))
    if inducing_gradient:
        l2 = lengthscales ** 2
        # d/dz_m: K_NM's column m and K_M's row and column m
        du = (PU.T @ X - PU.sum(axis=0)[:, None] * Z) / l2
        dm = 2.0 * (PM_off @ Z - PM_off.sum(axis=1)[:, None] * Z) / l2
        grads["inducing"] = du + dm
    return parts["value"], grads


class GaussianProcessSurrogate(Surrogate):
    """The predictive mean of a Gaussian process fitted to values of the potential, full or
    sparse (FITC), as a surrogate (Rasmussen 2003's GP-HMC; Zhang, Shahbaba and Zhao 2017,
    sec. 3.3; docs/algorithms.md section 3).

    z(q) = mu + k(q)^T w: k(q) the squared-exponential covariances of q with the training
    points (full GP, w = (K_N + sigma^2 I)^-1 (t - mu)) or with M inducing points (FITC, w =
    Sigma_M^-1 K_MN (Lambda + sigma^2 I)^-1 (t - mu)), mu the training targets' mean. The
    hyperparameters (signal sd sigma_f, lengthscales, noise sd sigma) maximise the log
    marginal likelihood (L-BFGS-B on its analytic gradient), on at most
    ``max_optimize_points`` of the training points; the final fit uses them all.

    Parameters
    ----------
    dim : int
        Input dimension.
    kernel : {"squared_exponential"}
        The covariance function sigma_f^2 exp(-sum_k (q_k - q'_k)^2 / (2 l_k^2)).
    lengthscale : "ard", "shared", float or array of shape (dim,)
        One lengthscale per input coordinate ("ard", default) or one for all ("shared"),
        optimised; or fixed values.
    signal_sd, noise_sd : float or None
        Fixed sigma_f and sigma (in the potential's units); None (default) optimises them.
        An optimised noise sd stays between 1e-6 and 10 times the targets' sd (a potential
        has no noise, but an exact interpolant is ill-conditioned).
    sparse : bool
        FITC with ``n_inducing`` inducing points (default False: the full GP).
    n_inducing : int
        M, the inducing points: training points picked at random (all of them when there
        are fewer).
    optimize_inducing : bool
        Also move the inducing points to maximise FITC's marginal likelihood (M d more
        parameters).
    whiten : bool
        Act on inputs standardised with the training inputs' mean and covariance (default
        True), so that one lengthscale suits a correlated posterior.
    mean : {"constant", "zero"}
        The prior mean: the training targets' mean (default), or 0 (the paper's Fig. 1).
    max_optimize_points : int
        The hyperparameters are optimised on at most this many training points (a random
        subset): the full GP's marginal likelihood costs O(N^3) per evaluation.
    rng : None, int, SeedSequence or Generator
        Source of the random subsets and inducing points.

    Attributes
    ----------
    signal_sd_, noise_sd_ : float
    lengthscales_ : ndarray of shape (dim,)
        The fitted hyperparameters (lengthscales in whitened coordinates with ``whiten``).
        Where the covariance of all the training points did not factorise with the noise
        found on a subset, the noise was raised (to 1e-3, then 1e-2 times the signal sd):
        ``noise_sd_`` is the noise used.
    centres_ : ndarray of shape (n_units, dim)
        The training or inducing points, in the whitened coordinates.
    output_weights : ndarray of shape (n_units,)
        sigma_f^2 w: the network's output weights.
    offset_ : float
        mu.
    log_marginal_likelihood_ : float
        At the fitted hyperparameters, on all the training points.
    n_train_, n_hidden : int
        Training points, and units of the predictive mean (N or M).
    fit_residual_ : float
        Root-mean-square misfit on the training set.
    gradient_residual_ : None
        (A GP fits no gradients; the random networks' attribute of that name.)
    fit_time_, optimize_time_ : float
        Seconds of the last fit, and of its hyperparameter search within it.
    """

    kind = "gaussian_process"
    OPTIONS = ("kernel", "lengthscale", "signal_sd", "noise_sd", "sparse", "n_inducing",
               "optimize_inducing", "whiten", "mean", "max_optimize_points")
    KERNELS = ("squared_exponential",)

    def __init__(self, dim, kernel="squared_exponential", lengthscale="ard", signal_sd=None,
                 noise_sd=None, sparse=False, n_inducing=500, optimize_inducing=False,
                 whiten=True, mean="constant", max_optimize_points=1000, rng=None):
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
            raise ValueError(f"dim must be a positive integer, got {dim!r}")
        if kernel not in self.KERNELS:
            raise ValueError(f"kernel must be one of {self.KERNELS}, got {kernel!r}")
        if isinstance(lengthscale, str):
            if lengthscale not in ("ard", "shared"):
                raise ValueError(f"lengthscale must be 'ard', 'shared' or positive numbers, "
                                 f"got {lengthscale!r}")
        else:
            values = _real_array(lengthscale, "lengthscale")
            if values.shape not in ((), (dim,)) or not np.all(np.isfinite(values) & (values > 0)):
                raise ValueError(f"a fixed lengthscale must be a positive number or {dim} of "
                                 f"them, got {lengthscale!r}")
            lengthscale = np.broadcast_to(values, (dim,)).copy()
        for name, value in (("signal_sd", signal_sd), ("noise_sd", noise_sd)):
            if value is not None and not (np.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be positive and finite or None, got {value!r}")
        for name, value in (("n_inducing", n_inducing), ("max_optimize_points", max_optimize_points)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if mean not in ("constant", "zero"):
            raise ValueError(f"mean must be 'constant' or 'zero', got {mean!r}")
        self.dim = int(dim)
        self.kernel = kernel
        self.lengthscale = lengthscale
        self.signal_sd = None if signal_sd is None else float(signal_sd)
        self.noise_sd = None if noise_sd is None else float(noise_sd)
        self.sparse = bool(sparse)
        self.n_inducing = int(n_inducing)
        self.optimize_inducing = bool(optimize_inducing)
        self.whiten = bool(whiten)
        self.mean = mean
        self.max_optimize_points = int(max_optimize_points)
        self._rng = _rng(rng)
        self._ctarget = None

    # ------------------------------------------------------------------------------------------
    # fitting

    @one_blas_thread
    def fit(self, Q, t, gradients=None, gradient_weight=0.0, online=False, like=None):
        """Fit the hyperparameters and the predictive mean to values of the potential.

        Parameters
        ----------
        Q : ndarray of shape (N, dim)
            Training inputs. Repeated rows (a chain's history repeats rejected states) are
            used once.
        t : ndarray of shape (N,)
            Potential values U(q_j).
        gradients : None or ndarray of shape (N, dim)
            Ignored unless ``gradient_weight`` > 0, which is refused: a GP with derivative
            observations costs O((N (d + 1))^3); this surrogate fits values only.
        gradient_weight : float
            Must be 0.
        online : bool
            Must be False (the GP has no online update: ARNS-HMC needs a random network).
        like : GaussianProcessSurrogate or None
            A fitted GP whose hyperparameters, whitening and inducing points to keep (no
            search): the same predictive mean form, refitted to these data.

        Returns
        -------
        self

        Raises
        ------
        ValueError
            For wrong shapes or non-finite values, gradients asked to be fitted, online
            updates, a training-input covariance that cannot be whitened, or a covariance
            matrix that is not positive definite even with the noise floor.
        """
        start = time.perf_counter()
        if gradient_weight:
            raise ValueError("a GaussianProcessSurrogate fits values only: use "
                             "gradient_weight=0 (a GP with gradient observations costs "
                             "O((N (d + 1))^3))")
        if online:
            raise ValueError("a GaussianProcessSurrogate has no online update (ARNS-HMC's): "
                             "use a RandomNetworkSurrogate")
        Q, t, _ = self._check_training_data(Q, t, None)
        n = len(t)
        # a potential is a function: a repeated point (a chain's history repeats its state at
        # every rejection) adds nothing, and exact repeats drove the search astray (noise to
        # its floor; on 2000 states of a 32-d Gaussian a lengthscale of 4.6 against 75 from
        # the distinct states, and acceptance 0): each distinct point counts once
        Q, first = np.unique(Q, axis=0, return_index=True)
        t = t[first]
        if like is not None and not (isinstance(like, GaussianProcessSurrogate) and like.fitted
                                     and like.dim == self.dim and like.sparse == self.sparse):
            raise ValueError("like must be a fitted GaussianProcessSurrogate of this dim and "
                             "sparsity")
        offset = float(t.mean()) if self.mean == "constant" else 0.0
        y = t - offset
        if like is not None:
            mean, factor = like.input_mean_, like.input_factor_
        elif self.whiten:
            mean, factor = self._input_transform(Q)
        else:
            mean, factor = None, None
        X = Q if factor is None else scipy.linalg.solve_triangular(
            factor, (Q - mean).T, lower=True).T
        X = np.ascontiguousarray(X)
        spread = float(y.std()) or 1.0
        if like is not None:
            hyper = _Hyper(self.dim, like.signal_sd_, like.lengthscales_, like.noise_sd_,
                           free=(), inducing=None if not self.sparse else like.centres_.copy())
            optimize_seconds = 0.0
        else:
            optimize_start = time.perf_counter()
            hyper = self._search(X, y, spread)
            optimize_seconds = time.perf_counter() - optimize_start
        signal, lengths, noise = hyper.signal, hyper.lengthscales, hyper.noise
        # Hyperparameters found on a subset can leave all the points' covariance numerically
        # singular (repeated states, long lengthscales): the noise is then raised, up to
        # 1e-2 signal sd, until it factorises (noise_sd_ is the noise used).
        for floor in (0.0, 1e-3, 1e-2):
            noise = max(noise, floor * signal)
            try:
                if self.sparse:
                    parts = fitc_parts(X, hyper.inducing, y, signal, lengths, noise)
                    centres, w, value = hyper.inducing, parts["w"], parts["value"]
                else:
                    centres = X
                    _, _, w, value = full_parts(X / lengths, y, signal, noise)
                break
            except np.linalg.LinAlgError:
                continue
        else:
            raise ValueError(f"the GP's covariance matrix is not positive definite ({n} points, "
                             f"signal sd {signal:.3g}, noise sd {noise:.3g}): give a larger "
                             "noise_sd or fewer repeated points")
        v = signal ** 2 * w
        if not _all_finite(v) or not math.isfinite(value):
            raise ValueError("the GP's fit gave non-finite weights: rescale the potential")
        ctarget = self._make_ctarget(centres, lengths, v, offset, mean, factor)
        # only now, with nothing left to fail, replace the previous fit's state
        self.signal_sd_, self.noise_sd_, self.lengthscales_ = signal, noise, lengths
        self.centres_ = np.ascontiguousarray(centres)
        self.output_weights = v
        self.offset_ = offset
        self.input_mean_, self.input_factor_ = mean, factor
        self.log_marginal_likelihood_ = float(value)
        self.n_train_ = n  # (the points given; the distinct ones are the full GP's units)
        self.n_hidden = len(centres)
        self._ctarget = ctarget
        self.fit_residual_ = _rms(ctarget.predict(np.ascontiguousarray(Q)) - t)
        self.gradient_residual_ = None  # (values only, as every surrogate reports)
        self.optimize_time_ = optimize_seconds
        self.fit_time_ = time.perf_counter() - start
        return self

    def _search(self, X, y, spread):
        """The hyperparameters: the free ones maximise the marginal likelihood on a random
        subset of at most ``max_optimize_points`` points. ARD lengthscales start from the
        best shared one: started from the inputs' sds, on a 32-d quadratic they stalled with
        some lengthscales at their upper bound (coordinates ignored) and a lower likelihood."""
        hyper = self._initial_hyper(X, spread, shared=self.lengthscale == "shared")
        if not hyper.free:
            return hyper
        if len(y) > self.max_optimize_points:
            rows = np.sort(self._rng.choice(len(y), size=self.max_optimize_points, replace=False))
            X, y = X[rows], y[rows]
        if self.lengthscale == "ard" and self.dim > 1:
            first = _Hyper(self.dim, hyper.signal, hyper.lengthscales.mean(), hyper.noise,
                           tuple(k for k in hyper.free if k != "inducing"), hyper.inducing)
            self._optimize(first, X, y)
            hyper.values.update(signal=first.values["signal"], noise=first.values["noise"],
                                lengths=np.full(self.dim, first.values["lengths"][0]))
        self._optimize(hyper, X, y)
        return hyper

    def _initial_hyper(self, X, spread, shared):
        """Starting values: the targets' sd as the signal sd, lengthscales the inputs' sd
        (their mean if ``shared``), noise 1% of the signal; fixed values where given; the
        inducing points picked."""
        free = []
        if self.signal_sd is None:
            free.append("signal")
        if isinstance(self.lengthscale, str):
            free.append("lengths")
            sd = X.std(axis=0)
            sd = np.where(sd > 0, sd, 1.0)
            lengths = np.array([sd.mean()]) if shared else sd
        else:
            lengths = self.lengthscale
        if self.noise_sd is None:
            free.append("noise")
        inducing = None
        if self.sparse:
            # distinct training points (a chain's history repeats rejected states, and
            # coinciding inducing points make K_M singular)
            distinct = np.unique(X, axis=0)
            m = min(self.n_inducing, len(distinct))
            inducing = distinct[np.sort(self._rng.choice(len(distinct), size=m,
                                                          replace=False))].copy()
            if self.optimize_inducing:
                free.append("inducing")
        signal = self.signal_sd if self.signal_sd is not None else spread
        noise = self.noise_sd if self.noise_sd is not None else 0.01 * signal
        return _Hyper(self.dim, signal, lengths, noise, tuple(free), inducing)

    def _optimize(self, hyper, X, y):
        """Maximise the log marginal likelihood over the free hyperparameters of ``hyper`` (in
        place; L-BFGS-B on its analytic gradient)."""
        spread = float(y.std()) or 1.0
        bounds = []
        for key in ("signal", "lengths", "noise"):
            if key in hyper.free:
                low, high = dict(signal=(spread * 1e-3, spread * 1e3),
                                 lengths=(1e-3, 1e3),
                                 noise=(spread * 1e-6, spread * 10.0))[key]
                bounds += [(math.log(low), math.log(high))] * np.size(hyper.values[key])
        if hyper.optimize_inducing:
            bounds += [(None, None)] * hyper.inducing.size
        best = [math.inf, hyper.vector()]

        def objective(vector):
            hyper.set(vector)
            try:
                if self.sparse:
                    value, grads = fitc_log_marginal_likelihood(
                        X, hyper.inducing, y, hyper.signal, hyper.lengthscales, hyper.noise,
                        gradient=True, inducing_gradient=hyper.optimize_inducing)
                else:
                    value, grads = full_log_marginal_likelihood(
                        X, y, hyper.signal, hyper.lengthscales, hyper.noise, gradient=True)
            except np.linalg.LinAlgError:
                return 1e300, np.zeros_like(vector)
            grads["lengths"] = (np.atleast_1d(grads["lengths"]).sum(keepdims=True)
                                if hyper.values["lengths"].size == 1 else grads["lengths"])
            if -value < best[0]:
                best[0], best[1] = -value, vector.copy()
            return -value, -hyper.gradient_vector(grads)

        scipy.optimize.minimize(objective, hyper.vector(), jac=True, method="L-BFGS-B",
                                bounds=bounds, options=dict(maxiter=200))
        hyper.set(best[1])

    def _make_ctarget(self, centres, lengths, v, offset, mean, factor):
        """The predictive mean as a radial-unit network in the coordinates x / l: units of
        precision 1 centred on the scaled centres (the kernel NetworkTarget evaluates
        exp(W x + b - |x|^2 / 2) with W = centres, b = -|centre|^2 / 2)."""
        C = np.ascontiguousarray(centres / lengths)
        gamma = np.ones(len(C))
        bias = -0.5 * np.einsum("ij,ij->i", C, C)
        # x = A (q - mean): A = diag(1 / l) L^-1 with whitening, diag(1 / l) without
        A = np.diag(1.0 / lengths)
        if factor is not None:
            A = A @ scipy.linalg.solve_triangular(factor, np.eye(self.dim), lower=True)
        if mean is None:
            mean = np.zeros(self.dim)
        if not _all_finite(A, C):
            raise ValueError("the GP's input scaling overflows float64 (the training inputs' "
                             "spread is tiny against their magnitude): use whiten=False or "
                             "centre the inputs")
        return NetworkTarget("exp", C, bias, v, offset, gamma, np.tril(A), mean)

    @classmethod
    def settings_dim(cls, options):
        """The dimension to check ``options`` in: a fixed lengthscale per coordinate's."""
        lengthscale = options.get("lengthscale")
        if lengthscale is None or isinstance(lengthscale, str) or not np.ndim(lengthscale):
            return 2
        return np.size(lengthscale)

    def gradient_flops(self):
        """Floating-point operations of one gradient: a random network's of as many units,
        with the input scaling always applied (by the lengthscales, whitened or not)."""
        return gradient_flops(self.dim, self.n_hidden, True)

    def log_marginal_likelihood(self, Q, t, signal_sd, lengthscales, noise_sd, gradient=False):
        """The log marginal likelihood of this surrogate's kind (full GP or FITC on its fitted
        inducing points) for data (Q, t) in the fitted input coordinates and the given
        hyperparameters, with its gradient (log signal sd, log lengthscales, log noise sd;
        FITC also the inducing points) if asked: what :meth:`fit` maximises.

        Returns
        -------
        value : float
        grads : dict or None
        """
        X = np.asarray(Q, dtype=float)
        if self.input_factor_ is not None:
            X = scipy.linalg.solve_triangular(self.input_factor_, (X - self.input_mean_).T,
                                              lower=True).T
        y = np.asarray(t, dtype=float) - self.offset_
        lengths = np.broadcast_to(np.asarray(lengthscales, dtype=float), (self.dim,))
        if self.sparse:
            return fitc_log_marginal_likelihood(X, self.centres_, y, signal_sd, lengths,
                                                noise_sd, gradient, inducing_gradient=gradient)
        return full_log_marginal_likelihood(X, y, signal_sd, lengths, noise_sd, gradient)

    def __repr__(self):
        state = f"fitted on {self.n_train_} points" if self.fitted else "not fitted"
        kind = f"sparse=True, n_inducing={self.n_inducing}" if self.sparse else "full"
        return f"GaussianProcessSurrogate(dim={self.dim}, {kind}, whiten={self.whiten}; {state})"
