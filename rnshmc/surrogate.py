"""Random-network (extreme learning machine) surrogate of a potential energy."""
import functools
import math
import time
import warnings

import numpy as np
import scipy.linalg
from scipy.linalg.blas import dnrm2, dsyrk

from ._kernels._online import OnlineLeastSquares
from ._kernels._surrogate import NetworkTarget, hidden_layer
from .parallel import one_blas_thread

__all__ = ["Surrogate", "RandomNetworkSurrogate", "surrogate_from_state"]

# the explicitly stacked least-squares system of the rank-revealing fallback is used while it
# stays below this many entries; beyond, the fallback works on the normal equations
_STACKED_LIMIT = 2 ** 25


def _rng(rng):
    return rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)


def _real_array(x, name, contiguous=False):
    """``x`` as a float64 array, with a ValueError naming ``name`` if it is not real numbers."""
    try:
        x = np.asarray(x)
        if np.iscomplexobj(x):  # float64 conversion would silently drop the imaginary parts
            raise TypeError("got complex values")
        x = x.astype(np.float64, copy=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be an array of real numbers: {exc}") from None
    return np.ascontiguousarray(x) if contiguous else x


def _rms(r):
    """Root mean square of ``r`` without overflow in the squares (BLAS nrm2 rescales)."""
    r = np.ascontiguousarray(r, dtype=np.float64).ravel()
    return float(dnrm2(r) / math.sqrt(r.size)) if r.size else 0.0


def _all_finite(*arrays):
    return all(a is None or np.all(np.isfinite(a)) for a in arrays)


def gradient_flops(dim, n_hidden, whiten=True):
    """Floating-point operations of one surrogate gradient (an estimate).

    Two matrix-vector products with the s x d input weights (4 s d), the activation and its
    slope per unit (about 20 s), and with whitening two triangular products (2 d^2). The
    surrogate samplers weigh it against a model's ``density_flops`` to price a leapfrog step.

    Parameters
    ----------
    dim, n_hidden : int
    whiten : bool

    Returns
    -------
    float
    """
    return 4.0 * n_hidden * dim + 20.0 * n_hidden + (2.0 * dim * dim if whiten else 0.0)


class Surrogate:
    """What every surrogate of a potential shares: validation of training data, the whitening
    transform, and evaluation through its fitted C-level target (``self._ctarget``).

    A subclass sets ``kind`` (the name its saved state carries:
    :func:`~rnshmc.surrogate.surrogate_from_state` rebuilds it), implements ``fit``,
    ``get_state`` and ``from_state``, and says what it supports: ``online`` updates
    (:meth:`RandomNetworkSurrogate.partial_fit`, ARNS-HMC), ``fits_gradients`` (gradient
    observations in the fit), ``hessian_metric`` (RNS-RMHMC).
    """

    kind = None
    kinds = {}  # kind -> class, filled as the subclasses are defined
    OPTIONS = ()  # the constructor's settings (besides dim and rng) a sampler may be given
    supports_online = False
    fits_gradients = False
    has_hessian_metric = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.kind is not None:
            Surrogate.kinds[cls.kind] = cls

    # attributes not saved by get_state (from_state rebuilds them), and saved entries that
    # are not attributes (handed to _restore)
    TRANSIENT = ("_rng", "_ctarget")
    EXTRA_STATE = ()

    def get_state(self, online=False):
        """The surrogate as a dict of arrays, numbers and strings (saveable without pickle),
        its ``kind`` included; :meth:`from_state` (or
        :func:`~rnshmc.surrogate.surrogate_from_state`) rebuilds it, predicting identically.
        ``online``: see :meth:`RandomNetworkSurrogate.get_state` (no other kind has an online
        estimator)."""
        state = {key: value for key, value in vars(self).items() if key not in self.TRANSIENT}
        state["kind"] = self.kind
        if self._ctarget is not None:
            state["network"] = list(self._ctarget.__reduce__()[1])
        return state

    @classmethod
    def from_state(cls, state):
        """Rebuild a surrogate of this class from :meth:`get_state` (its random stream is not
        kept)."""
        surrogate = cls.__new__(cls)
        state = dict(state)
        state.pop("kind", None)
        network = state.pop("network", None)
        extra = {key: state.pop(key) for key in cls.EXTRA_STATE if key in state}
        surrogate.__dict__.update(state)
        surrogate._rng = np.random.default_rng()
        surrogate._ctarget = None if network is None else NetworkTarget(*network)
        surrogate._restore(extra)
        return surrogate

    def _restore(self, extra):
        """Rebuild what ``get_state`` saved besides the attributes (``EXTRA_STATE``)."""

    @classmethod
    def settings_dim(cls, options):
        """The dimension in which a sampler checks these ``options`` (before it knows the
        target's): 2 unless an option's size says otherwise."""
        return 2

    def settings(self):
        """The constructor's settings (``OPTIONS``) of this surrogate, as a dict: what a
        sampler given this (unfitted) surrogate fits with."""
        return {key: getattr(self, key) for key in self.OPTIONS}

    def gradient_flops(self):
        """Floating-point operations of one gradient of the fitted surrogate (an estimate:
        :func:`gradient_flops` with its units)."""
        return gradient_flops(self.dim, self.n_hidden, self.whiten)

    def _check_training_data(self, Q, t, gradients):
        Q = _real_array(Q, "Q", contiguous=True)
        t = _real_array(t, "t")
        if Q.ndim != 2 or Q.shape[1] != self.dim or Q.shape[0] < 1:
            raise ValueError(f"Q must have shape (N, {self.dim}) with N >= 1, got {Q.shape}")
        if t.shape != (Q.shape[0],):
            raise ValueError(f"t must have shape ({Q.shape[0]},), got {t.shape}")
        if not (np.all(np.isfinite(Q)) and np.all(np.isfinite(t))):
            raise ValueError("training inputs and targets must be finite")
        G = None
        if gradients is not None:
            G = _real_array(gradients, "gradients", contiguous=True)
            if G.shape != Q.shape:
                raise ValueError(f"gradients must have shape {Q.shape}, got {G.shape}")
            if not np.all(np.isfinite(G)):
                raise ValueError("gradients must be finite")
        return Q, t, G

    def _input_transform(self, Q):
        """(mean, lower Cholesky factor of the covariance) of the inputs."""
        # used to whiten the inputs, and (without whitening) as the gradient misfits' metric
        purpose, remedy = (("whitening", "use whiten=False or more distinct points")
                           if self.whiten else
                           ("scaling the gradient misfits by it",
                            "fit without gradients or with more distinct points"))
        if Q.shape[0] < 2:
            raise ValueError(f"the training inputs' covariance needs at least two points: "
                             f"{purpose} is impossible; {remedy}")
        mean = Q.mean(axis=0)
        with np.errstate(over="ignore", invalid="ignore"):  # reported below, as a ValueError
            cov = np.atleast_2d(np.cov(Q, rowvar=False))
        trace = np.trace(cov)
        if not np.all(np.isfinite(cov)):
            raise ValueError(f"the training inputs' covariance overflows float64 (inputs up to "
                             f"{np.abs(Q).max():.3g}): {purpose} is impossible; rescale them")
        identical = bool(np.all(Q == Q[0]))
        if identical or not trace > 0:
            # A zero covariance would leave only the absolute jitter below: a factor ~1e-150
            # that blows the mean's rounding errors up into inputs ~1e133 (NaN RBF weights).
            why = f"all {Q.shape[0]} points are identical" if identical else "it underflows"
            raise ValueError(f"the training inputs have a singular covariance ({why}): "
                             f"{purpose} is impossible; {remedy}")
        # a small jitter keeps the factor defined for degenerate histories (few distinct points)
        cov += np.eye(self.dim) * (1e-10 * trace / self.dim + 1e-300)
        try:
            L = np.linalg.cholesky(cov)
        except np.linalg.LinAlgError:
            raise ValueError("the training inputs' covariance is singular: cannot whiten them "
                             "or scale gradient misfits (use more distinct training points)"
                             ) from None
        return mean, L

    @property
    def fitted(self):
        """Whether ``fit`` has been called."""
        return self._ctarget is not None

    def _target(self):
        if self._ctarget is None:
            raise RuntimeError("the surrogate is not fitted: call fit(Q, t) first")
        return self._ctarget

    def potential(self, q):
        """Surrogate potential z(q) at ``q`` (ndarray of shape (dim,))."""
        return self._target().eval_potential(q)

    def gradient(self, q):
        """Gradient of z at ``q``: ndarray of shape (dim,)."""
        return self._target().eval_gradient(q)

    def potential_and_gradient(self, q):
        """(z(q), grad z(q))."""
        return self._target().eval_potential_and_gradient(q)

    def hessian(self, q):
        """Hessian of z at ``q``: ndarray of shape (dim, dim)."""
        return self._target().hessian(q)

    def predict(self, Q):
        """z at each row of ``Q`` (ndarray of shape (N, dim)): ndarray of shape (N,)."""
        target = self._target()
        Q = np.ascontiguousarray(Q, dtype=np.float64)
        if Q.ndim != 2 or Q.shape[1] != self.dim:
            raise ValueError(f"Q must have shape (N, {self.dim}), got {Q.shape}")
        return target.predict(Q)

    def log_density(self, q):
        """-z(q): the surrogate in the log-density convention."""
        return -self.potential(q)

    def log_density_gradient(self, q):
        """(-z(q), -grad z(q))."""
        U, grad = self.potential_and_gradient(q)
        return -U, -grad


class RandomNetworkSurrogate(Surrogate):
    """A one-hidden-layer network with random hidden units and fitted output weights.

    z(q) = sum_i v_i a(q; gamma_i) + c: the hidden units gamma_i are drawn at random once and
    only the output weights v and the constant c are fitted, by ridge least squares with c
    unpenalised (Huang et al. 2006; Zhang, Shahbaba and Zhao 2017, whose network has this
    output bias; docs/algorithms.md section 3).

    Parameters
    ----------
    dim : int
        Input dimension.
    n_hidden : int
        Number of hidden units s.
    nodes : {"additive", "rbf"}
        Additive units a(w_i^T x + d_i) with w_i ~ N(0, weight_scale^2 I), d_i ~ N(0, 1) (the
        authors' draws, weight_scale = 1/sqrt(dim)); or Gaussian radial units
        ``exp(-|x - c_i|^2 / (2 l_i^2))`` whose centres c_i are training inputs picked at random at
        the fit and whose widths are l_i = u_i / weight_scale times the inputs' mean standard
        deviation, u_i ~ Uniform(0.5, 1.5), drawn here.
    activation : {"softplus", "sigmoid", "tanh"}
        Activation of additive units (RBF units are Gaussian).
    ridge : float
        Ridge penalty lambda >= 0 on the output weights.
    weight_scale : float or None
        See ``nodes``. None means 1/sqrt(dim) (the authors'), except for additive units on
        whitened inputs, where it means 0.2/sqrt(dim): on unit-scale inputs, 1/sqrt(dim) puts
        the units in their strongly nonlinear regime, which fitted near-Gaussian posteriors
        poorly (RNS-HMC acceptance 0.57 against 0.78 on the simulated logistic regression,
        d = 50), while 0.1-0.5 times 1/sqrt(dim) all did well there and on the elliptic PDE.
    whiten : bool
        Let the random units act on inputs standardised with the training inputs' mean and
        covariance (x = L^{-1}(q - mean), L the Cholesky factor), which matches their scale to
        the posterior's. The papers' networks act on q directly (False).
    rng : None, int, SeedSequence or Generator
        Source of the random hidden units.

    Attributes
    ----------
    output_weights : ndarray of shape (n_hidden,)
        The fitted v.
    offset_ : float
        The fitted constant c.
    target_shift_ : float
        The number subtracted from the targets before solving (the minimum of the first
        fit's targets; partial fits keep it): numerics only, since c is not penalised.
    input_mean_, input_factor_ : ndarrays of shapes (dim,) and (dim, dim), or None
        The whitening ``x = input_factor_^{-1} (q - input_mean_)`` (None without ``whiten``).
    gradient_metric_ : ndarray of shape (dim, dim) or None
        M, the lower Cholesky factor of the training inputs' covariance in which gradient
        misfits are measured (``input_factor_`` with ``whiten``; None for a values-only fit
        without whitening).
    centres_, widths_ : ndarrays of shapes (n_hidden, dim) and (n_hidden,)
        RBF centres (in x coordinates) and widths, chosen at the fit.
    n_train_ : int
        Number of training points of the last fit.
    fit_residual_ : float
        Root-mean-square misfit of the values on the training set.
    gradient_residual_ : float or None
        Root-mean-square misfit of the gradients (per component, in the metric of the fit)
        when they were fitted.
    fit_time_ : float
        Seconds taken by the last fit.

    Notes
    -----
    The surrogate is a C-level target once fitted: samplers evaluate its gradient without the
    GIL (two matrix-vector products and one pass over the hidden units, into preallocated
    scratch).
    """

    kind = "random_network"
    OPTIONS = ("n_hidden", "nodes", "activation", "ridge", "weight_scale", "whiten")
    TRANSIENT = Surrogate.TRANSIENT + ("_online", "_fit_layer", "_fit_gradient")
    EXTRA_STATE = ("online",)
    supports_online = True
    fits_gradients = True
    has_hessian_metric = True  # (additive units with a softplus, sigmoid or tanh activation)

    def __init__(self, dim, n_hidden=1000, nodes="additive", activation="softplus", ridge=1e-6,
                 weight_scale=None, whiten=False, rng=None):
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
            raise ValueError(f"dim must be a positive integer, got {dim!r}")
        if isinstance(n_hidden, bool) or not isinstance(n_hidden, (int, np.integer)) or n_hidden < 1:
            raise ValueError(f"n_hidden must be a positive integer, got {n_hidden!r}")
        if nodes not in ("additive", "rbf"):
            raise ValueError(f"nodes must be 'additive' or 'rbf', got {nodes!r}")
        if activation not in ("softplus", "sigmoid", "tanh"):
            raise ValueError(f"activation must be 'softplus', 'sigmoid' or 'tanh', got {activation!r}")
        if not (np.isfinite(ridge) and ridge >= 0):
            raise ValueError(f"ridge must be finite and >= 0, got {ridge!r}")
        if weight_scale is None:
            weight_scale = (0.2 if whiten and nodes == "additive" else 1.0) / np.sqrt(dim)
        if not (np.isfinite(weight_scale) and weight_scale > 0):
            raise ValueError(f"weight_scale must be positive and finite, got {weight_scale!r}")
        self.dim = int(dim)
        self.n_hidden = int(n_hidden)
        self.nodes = nodes
        self.activation = activation if nodes == "additive" else "exp"
        self.ridge = float(ridge)
        self.weight_scale = float(weight_scale)
        self.whiten = bool(whiten)
        self.refresh_every = 5000
        self._rng = _rng(rng)
        if nodes == "additive":
            self.input_weights = self._rng.standard_normal((self.n_hidden, self.dim)) * weight_scale
            self.biases = self._rng.standard_normal(self.n_hidden)
        else:
            self.width_factors = self._rng.uniform(0.5, 1.5, size=self.n_hidden) / weight_scale
        self._ctarget = None

    # ------------------------------------------------------------------------------------------
    # fitting

    @one_blas_thread
    def fit(self, Q, t, gradients=None, gradient_weight=1.0, online=False, like=None):
        """Fit the output weights to values (and optionally gradients) of the potential.

        Minimises ``sum_j (z(q_j) - t_j)^2 + gradient_weight * sum_j |M^T (grad z(q_j) - g_j)|^2
        + ridge |v|^2`` over the output weights v and the constant c (not penalised, so a
        constant shift of the targets shifts c alone), through the normal equations (BLAS
        dsyrk, LAPACK Cholesky). M is the Cholesky factor of the training inputs' covariance:
        the gradient misfit is measured along the posterior's own scales (a gradient error
        times a typical displacement is an error in potential differences), which makes
        ``gradient_weight`` dimensionless. The problem solved is that of
        docs/algorithms.md section 3; :meth:`partial_fit` solves the same one.
        When the normal matrix is not numerically positive definite (Cholesky fails), or is
        numerically singular with ``ridge=0`` (repeated points, say), a rank-revealing
        least-squares solve is used instead, with a warning.

        Parameters
        ----------
        Q : ndarray of shape (N, dim)
            Training inputs (repeated rows are allowed: a chain's history repeats rejected
            states).
        t : ndarray of shape (N,)
            Potential values U(q_j).
        gradients : None or ndarray of shape (N, dim)
            Gradients of U at the training inputs.
        gradient_weight : float
            Weight gamma >= 0 of the gradient misfit.
        online : bool
            Also start the online estimator of :meth:`partial_fit` (O(s^3) more work and
            O(s^2) memory: the inverse of the normal matrix). Needs ``ridge`` > 0, or a
            normal matrix that is positive definite (the rows span the hidden space).
        like : RandomNetworkSurrogate or None
            A fitted surrogate whose features to use instead of deriving them from ``Q``:
            its hidden units (RBF centres and widths included), whitening and gradient
            metric. With the same features, this fit on all the points a surrogate has seen
            (its last fit's and its partial fits') solves the problem its online estimator
            solves, and gives the same weights up to rounding. Its dim, n_hidden, nodes,
            activation and whiten must be this surrogate's; its hidden units (and
            weight_scale) are copied into this one.

        Returns
        -------
        self

        Raises
        ------
        ValueError
            If the inputs have wrong shapes or non-finite values; if whitening (or the metric of
            the gradient misfits) is asked for but the training inputs' covariance is singular
            (fewer than two distinct points) or overflows; if ``like`` is not a fitted surrogate
            of the same layout (or has no gradient metric and gradients are given); or if the
            fit cannot be done in
            float64 (targets spanning more than ~1.8e308, hidden units or normal equations
            overflowing): the fit never leaves non-finite weights behind.
        """
        start = time.perf_counter()
        Q, t, G = self._check_training_data(Q, t, gradients)
        if not (np.isfinite(gradient_weight) and gradient_weight >= 0):
            raise ValueError(f"gradient_weight must be finite and >= 0, got {gradient_weight!r}")
        if G is None or gradient_weight == 0:
            G, gradient_weight = None, 0.0
        offset, top = float(t.min()), float(t.max())
        if not math.isfinite(top - offset):  # Python floats: overflows to inf, no warning
            raise ValueError(f"the training targets span {offset:.3g} to {top:.3g}, too wide to "
                             "fit: their differences from the minimum overflow float64 "
                             "(rescale the potential)")
        t = t - offset  # numerics only: the unpenalised constant absorbs any shift
        if like is not None:
            mean, L, metric, units = self._features_of(like, G is not None)
        else:
            mean, L = self._input_transform(Q) if self.whiten else (None, None)
            metric, units = L, None
        X = Q if L is None else scipy.linalg.solve_triangular(L, (Q - mean).T, lower=True).T
        X = np.ascontiguousarray(X)
        W, bias, gamma, rbf_units = self._layer(X, units)
        H, S = hidden_layer(self.activation, X, W, bias, gamma, slopes=True)
        if not _all_finite(W, bias, gamma, H, S):
            raise ValueError("the hidden units are not finite on the training inputs (largest "
                             f"|x| {np.abs(X).max():.3g}, weight_scale={self.weight_scale:g}): "
                             "rescale the inputs, use whiten=True or a moderate weight_scale")
        gradient_terms = None
        if G is not None:
            # Gradient misfits are measured in the metric of the inputs' covariance,
            # |M^T (grad_x z - g_x)| with M M^T = cov(x), so that gradient_weight does not
            # depend on the posterior's scale: write the gradient rows in coordinates M^{-1} x.
            if metric is None:
                metric = self._input_transform(Q)[1]
            M = metric
            G = G @ M  # rows M^T g
            if L is not None:
                M = np.eye(self.dim)  # x is already whitened
            gradient_terms = (X @ M, W @ M, gamma, np.ascontiguousarray(G), gradient_weight)
        with np.errstate(over="ignore", invalid="ignore"):  # reported below, as a ValueError
            normal, rhs = self._normal_equations(t, H, S, gradient_terms)
        if not _all_finite(normal, rhs):
            raise ValueError(
                "the surrogate's normal equations overflow float64 (hidden-unit outputs up to "
                f"{np.abs(H).max():.3g}, shifted targets up to {top - offset:.3g}"
                + ("" if G is None else f", gradients up to {np.abs(G).max():.3g} weighted "
                   f"{gradient_weight:g}") + "): rescale the inputs or the potential")
        solution = self._solve(normal, rhs, t, H, S, gradient_terms)
        v, constant = solution[:-1], float(solution[-1])
        if not _all_finite(solution) or not math.isfinite(offset + constant):
            # a safety net: the weights would make every surrogate evaluation NaN or inf
            raise ValueError(f"solving the surrogate's normal equations gave non-finite output "
                             f"weights (ridge={self.ridge:g}, {len(t)} training points, "
                             f"{self.n_hidden} hidden units)")
        ctarget = self._make_ctarget(W, bias, gamma, v, offset + constant, mean, L)
        estimator = None
        if online:
            full = np.triu(normal) + np.triu(normal, 1).T
            try:
                theta = scipy.linalg.cho_solve(scipy.linalg.cho_factor(full),
                                               np.eye(len(solution)))
            except np.linalg.LinAlgError:
                raise ValueError("online=True needs a positive-definite normal matrix: use "
                                 "ridge > 0 or more training points than hidden units") from None
            estimator = OnlineLeastSquares(solution, theta, None, full, rhs)

        # only now, with nothing left to fail, replace the previous fit's state
        if rbf_units is not None:
            self.centres_, self.widths_ = rbf_units
        if like is not None:  # the units are like's
            self.weight_scale = like.weight_scale
            if self.nodes == "additive":
                self.input_weights, self.biases = W.copy(), bias.copy()
            else:
                self.width_factors = like.width_factors.copy()
        self.output_weights = v
        self.input_mean_, self.input_factor_ = mean, L
        self.gradient_metric_ = metric
        self.offset_ = offset + constant
        self.target_shift_ = offset
        self.n_train_ = Q.shape[0]
        self.fit_residual_ = _rms(H @ v + constant - t)
        self.gradient_residual_ = None
        if gradient_terms is not None:
            Xg, Wg, _, Gg, _ = gradient_terms
            fitted_gradients = (S * v) @ Wg
            if gamma is not None:
                fitted_gradients -= ((S * v) @ gamma)[:, None] * Xg
            self.gradient_residual_ = _rms(fitted_gradients - Gg)
        self._ctarget = ctarget
        self._online = estimator
        # what partial_fit needs to build new rows as the fit built these
        self._fit_layer = (W, bias, gamma)
        # (the rows' metric: identity on whitened inputs; the gradients' transform: M)
        self._fit_gradient = None if gradient_terms is None else (M, metric, gradient_weight)
        self.n_online_points_ = 0
        self.fit_time_ = time.perf_counter() - start
        return self

    @one_blas_thread
    def partial_fit(self, Q, t, gradients=None, install=True):
        """Update the output weights with new points, as if they had been in the last fit.

        The weights v and the constant c stay the solution of the fit's problem on all points
        (the last ``fit``'s and every ``partial_fit``'s) with the fit's features (hidden
        units, whitening and gradient metric): the solution ``fit(Q_all, t_all, like=self)``
        would give, up to rounding (docs/algorithms.md section 6). They are updated by
        recursive least squares in O(s^2) per row (one row per value, ``dim`` more per
        gradient; s = n_hidden + 1 unknowns) instead of a refit (O(s^3)). The call's rows go
        in blocks of min(256, s), each one rank-k update of the weights and of Theta (the
        inverse normal matrix) with BLAS 3 (Woodbury's formula through a k x k Cholesky
        factorisation): the result depends only on the points and on how they are split
        into calls, and equals the row-by-row recursion up to rounding. The rows'
        normal equations are accumulated and Theta refreshed from them every
        ``refresh_every`` rows (default 5000; checked at the end of a call) to stop rounding
        drift. The fitted surrogate then uses the new weights.

        Parameters
        ----------
        Q : ndarray of shape (N, dim) or (dim,)
        t : ndarray of shape (N,) or float
            Potential values.
        gradients : None or ndarray of the shape of Q
            Gradients of U, used if the last fit used gradients (else ignored).
        install : bool
            Use the updated weights at once (default); False only updates the estimator,
            whose weights :meth:`install` puts in use later (ARNS-HMC's vanishing adaptation).

        Returns
        -------
        self

        Raises
        ------
        RuntimeError
            If the surrogate was not fitted with ``online=True`` (or was rebuilt from a saved
            state, which does not keep the online estimator).
        ValueError
            On wrong shapes or non-finite values (nothing changes then).
        """
        estimator = getattr(self, "_online", None)
        if estimator is None:
            raise RuntimeError("partial_fit needs a fit with online=True first")
        Q = np.atleast_2d(np.asarray(Q, dtype=np.float64))
        t = np.atleast_1d(np.asarray(t, dtype=np.float64))
        if gradients is not None:
            gradients = np.atleast_2d(np.asarray(gradients, dtype=np.float64))
        Q, t, G = self._check_training_data(Q, t, gradients)
        W, bias, gamma = self._fit_layer
        X = Q if self.input_factor_ is None else scipy.linalg.solve_triangular(
            self.input_factor_, (Q - self.input_mean_).T, lower=True).T
        X = np.ascontiguousarray(X)
        H, S = hidden_layer(self.activation, X, W, bias, gamma, slopes=True)
        # rows [h_j, 1] (the constant's column) with targets t_j minus the first fit's shift;
        # gradient rows [sqrt(gamma_g) M^T D_j, 0] (a constant has no gradient)
        R, y = np.hstack([H, np.ones((len(t), 1))]), t - self.target_shift_
        if G is not None and self._fit_gradient is not None:
            M, to_rows, gradient_weight = self._fit_gradient
            root = np.sqrt(gradient_weight)
            terms = (X @ M, W @ M, gamma, G @ to_rows, gradient_weight)
            D = np.zeros((len(t), self.dim, self.n_hidden + 1))
            D[:, :, :-1] = root * self._gradient_rows(S, terms).reshape(len(t), self.dim, -1)
            R = np.concatenate([R[:, None, :], D], axis=1).reshape(-1, self.n_hidden + 1)
            y = np.concatenate([y[:, None], root * (G @ to_rows)], axis=1).reshape(-1)
        if not _all_finite(R, y):
            raise ValueError("the new points' hidden units or targets are not finite")
        before = estimator.n_updates
        estimator.update(R, y)
        every = getattr(self, "refresh_every", 5000)
        if estimator.n_updates // every > before // every:
            estimator.refresh()
        self.n_train_ += len(t)
        self.n_online_points_ += len(t)
        if install:
            self.install()
        return self

    def install(self):
        """Put the online estimator's current weights in use (see :meth:`partial_fit`): the
        fitted target is updated in place, so a chain built on it uses them from its next
        trajectory.

        Raises
        ------
        ValueError
            If the weights are not finite (the previous ones stay in use).
        """
        estimator = getattr(self, "_online", None)
        if estimator is None:
            raise RuntimeError("install needs a fit with online=True first")
        solution = estimator.weights
        v, offset = solution[:-1], self.target_shift_ + solution[-1]
        if not (_all_finite(solution) and math.isfinite(offset)):
            raise ValueError("the online update gave non-finite output weights")
        self._ctarget.set_output_weights(v, offset)
        self.output_weights, self.offset_ = v, offset

    def settings(self):
        settings = super().settings()
        if self.nodes == "rbf":
            settings["activation"] = "softplus"  # (ignored by RBF units, which are Gaussian)
        return settings

    def _features_of(self, like, with_gradients):
        """(whitening mean, whitening factor, gradient metric, hidden units) of the fitted
        surrogate ``like``: the hidden units are (input weights, biases) or RBF (centres,
        widths)."""
        if not isinstance(like, RandomNetworkSurrogate) or not like.fitted:
            raise ValueError("like must be a fitted RandomNetworkSurrogate")
        layout = ("dim", "n_hidden", "nodes", "activation", "whiten")
        differ = [k for k in layout if getattr(like, k) != getattr(self, k)]
        if differ:
            raise ValueError(f"like has another layout ({', '.join(differ)} differ): its "
                             "features cannot be this surrogate's")
        metric = getattr(like, "gradient_metric_", like.input_factor_)
        if with_gradients and metric is None:
            raise ValueError("like was fitted without gradients (and without whitening), so it "
                             "has no gradient metric: fit it with gradients, or fit this one "
                             "without like")
        units = ((like.input_weights, like.biases) if self.nodes == "additive"
                 else (like.centres_, like.widths_))
        return like.input_mean_, like.input_factor_, metric, units

    def _layer(self, X, units=None):
        """The hidden layer acting on x: (W, bias, gamma) in the kernel's form, and the RBF
        (centres, widths) (None for additive units); ``units``: another fit's (see
        :meth:`_features_of`) instead of this surrogate's."""
        if self.nodes == "additive":
            W, bias = (self.input_weights, self.biases) if units is None else units
            return W, bias, None, None
        if units is not None:
            centres, widths = units
        else:
            # RBF: centres are training inputs picked at random; widths scale with the
            # inputs' spread
            n = X.shape[0]
            picks = self._rng.choice(n, size=self.n_hidden, replace=n < self.n_hidden)
            centres = X[picks]
            spread = float(np.mean(X.std(axis=0)))
            # identical inputs: their std is rounding noise (their mean need not be exact),
            # and widths of that size would overflow the units: unit widths instead
            if spread <= 64 * np.finfo(np.float64).eps * float(np.abs(X).max(initial=0.0)):
                spread = 1.0
            widths = self.width_factors * spread
        gamma = 1.0 / widths ** 2
        W = np.ascontiguousarray(gamma[:, None] * centres)
        bias = -0.5 * gamma * np.einsum("ij,ij->i", centres, centres)
        return W, bias, gamma, (centres, widths)

    def _normal_equations(self, t, H, S, gradient_terms):
        """The normal equations of (v, c), of order s + 1, upper triangle valid: A^T A +
        lambda diag(1, ..., 1, 0) + gradient terms and A^T t + gradient terms, A = [H, 1]
        (the constant c is the last unknown, unpenalised).

        The gradient of z at x_j is D_j v with column i of D_j equal to S_ji W_i (additive) or
        S_ji (W_i - gamma_i x_j) (RBF, W_i = gamma_i c_i); sum_j D_j^T D_j and sum_j D_j^T g_j
        reduce to products of N x s matrices, never forming the D_j. They do not involve c.
        """
        s = self.n_hidden
        normal, rhs = np.zeros((s + 1, s + 1)), np.empty(s + 1)
        normal[:s, :s] = dsyrk(1.0, H, trans=1, lower=0)  # H^T H (upper)
        normal[:s, s], normal[s, s] = H.sum(axis=0), H.shape[0]  # H^T 1, 1^T 1
        rhs[:s], rhs[s] = H.T @ t, t.sum()
        if gradient_terms is not None:
            X, W, gamma, G, gw = gradient_terms
            StS = dsyrk(1.0, S, trans=1, lower=0)
            StS = np.triu(StS) + np.triu(StS, 1).T
            normal[:s, :s] += gw * (StS * (W @ W.T))         # (S^T S) o (W W^T)
            rhs[:s] += gw * np.einsum("ji,ji->i", S, G @ W.T)  # column sums of S o (G W^T)
            if gamma is not None:
                M = (S * (X @ W.T)).T @ S
                sq = np.einsum("ij,ij->i", X, X)
                normal[:s, :s] += gw * (np.outer(gamma, gamma) * ((S * sq[:, None]).T @ S)
                                        - M * gamma[None, :] - gamma[:, None] * M.T)
                rhs[:s] -= gw * gamma * (S.T @ np.einsum("ij,ij->i", X, G))
        normal[np.arange(s), np.arange(s)] += self.ridge
        return normal, rhs

    def _solve(self, normal, rhs, t, H, S, gradient_terms):
        try:
            factor = scipy.linalg.cho_factor(normal, lower=False, overwrite_a=False,
                                             check_finite=False)
            anorm = np.abs(np.triu(normal) + np.triu(normal, 1).T).sum(axis=0).max()
            rcond, info = scipy.linalg.lapack.dpocon(factor[0], anorm, uplo="U")
            # With a ridge the Cholesky solve is the regularised solution the user asked for,
            # however ill-conditioned (its residual, not the weights, is what matters); without
            # one, a numerically singular matrix means the minimum-norm solution is wanted.
            if info == 0 and (self.ridge > 0 or rcond > np.finfo(float).eps):
                return scipy.linalg.cho_solve(factor, rhs, check_finite=False)
            reason = f"its reciprocal condition number is {rcond:.1e}"
        except np.linalg.LinAlgError:
            reason = "its Cholesky factorisation failed"
        warnings.warn(f"the surrogate's normal equations are singular ({reason}; ridge="
                      f"{self.ridge:g}, {len(t)} training points, {self.n_hidden} hidden "
                      "units): falling back to a rank-revealing least-squares solve",
                      RuntimeWarning, stacklevel=3)
        # The constant is eliminated first (c = mean(t - H v) minimises over c for any v),
        # so that with ridge=0 the minimum-norm solution is that of v alone: the limit of the
        # ridge solutions as the ridge goes to zero. (Singular values below eps max(shape)
        # times the largest count as zero, NumPy's default: centring leaves rounding noise
        # ~ eps |H| in the directions it removes.)
        rows = len(t) * (1 + (0 if gradient_terms is None else self.dim))
        if rows * self.n_hidden <= _STACKED_LIMIT:
            mean_row = H.mean(axis=0)
            blocks, targets = [H - mean_row], [t - t.mean()]
            if gradient_terms is not None:
                root = np.sqrt(gradient_terms[4])
                blocks.append(root * self._gradient_rows(S, gradient_terms))
                targets.append(root * gradient_terms[3].reshape(-1))
            if self.ridge > 0:
                blocks.append(np.sqrt(self.ridge) * np.eye(self.n_hidden))
                targets.append(np.zeros(self.n_hidden))
            A, b = np.vstack(blocks), np.concatenate(targets)
        else:  # the same elimination on the normal equations (a Schur complement)
            full = np.triu(normal) + np.triu(normal, 1).T
            a, n = full[:-1, -1], full[-1, -1]
            A, b = full[:-1, :-1] - np.outer(a, a) / n, rhs[:-1] - a * rhs[-1] / n
            mean_row = a / n
        v = scipy.linalg.lstsq(A, b, cond=np.finfo(float).eps * max(A.shape),
                               lapack_driver="gelsd")[0]
        return np.append(v, t.mean() - mean_row @ v)

    def _gradient_rows(self, S, gradient_terms):
        """The D_j stacked: ndarray of shape (N * dim, n_hidden), row j * dim + k = d/dx_k."""
        X, W, gamma, _, _ = gradient_terms
        D = S[:, None, :] * W.T[None, :, :]
        if gamma is not None:
            D -= S[:, None, :] * gamma[None, None, :] * X[:, :, None]
        return D.reshape(-1, self.n_hidden)

    def _make_ctarget(self, W, bias, gamma, v, offset, mean, L):
        if L is None:
            return NetworkTarget(self.activation, W, bias, v, offset, gamma)
        A = scipy.linalg.solve_triangular(L, np.eye(self.dim), lower=True)  # x = A (q - mean)
        if gamma is None:
            # fold the whitening into the layer: W x + b = (W A) q + (b - W A mean)
            with np.errstate(over="ignore", invalid="ignore"):  # reported below
                W_q = W @ A
                parts = (W_q, bias - W_q @ mean)
        else:
            parts = (A,)
        if not _all_finite(*parts):
            raise ValueError("the whitening transform overflows float64 (the training inputs' "
                             "spread is tiny against their magnitude): use whiten=False or "
                             "centre the inputs")
        if gamma is None:
            return NetworkTarget(self.activation, *parts, v, offset)
        return NetworkTarget(self.activation, W, bias, v, offset, gamma, np.tril(A), mean)

    # ------------------------------------------------------------------------------------------
    # evaluation

    def hessian_metric(self, diagonal=False, softabs=0.0):
        """The Hessian of z as a Riemannian metric (with its derivative terms) for the
        generalized leapfrog: a new object (one per chain).

        Parameters
        ----------
        diagonal : bool
            Only the Hessian's diagonal.
        softabs : float
            SoftAbs sharpness alpha; 0 uses the Hessian as it is (it must then be positive
            definite where it is used).

        Returns
        -------
        rnshmc._kernels._riemann.LinearPredictorMetric
            With G = W^T diag(v a''(W q + b)) W (whitening folded into W and b).

        Raises
        ------
        ValueError
            For RBF nodes or the exp activation (the metric's derivatives are for additive
            softplus, sigmoid and tanh units).
        """
        from ._kernels._riemann import LinearPredictorMetric
        target = self._target()
        if self.nodes != "additive" or self.activation == "exp":
            raise ValueError("the Hessian metric needs additive nodes with a softplus, sigmoid "
                             "or tanh activation")
        activation, W, bias, v = target.__reduce__()[1][:4]
        return LinearPredictorMetric(W, activation, offsets=bias, weights=v, diagonal=diagonal,
                                     softabs=0.0 if softabs is None else softabs,
                                     description="the surrogate's Hessian")

    def __repr__(self):
        state = f"fitted on {self.n_train_} points" if self.fitted else "not fitted"
        return (f"RandomNetworkSurrogate(dim={self.dim}, n_hidden={self.n_hidden}, "
                f"nodes={self.nodes!r}, activation={self.activation!r}, ridge={self.ridge:g}, "
                f"whiten={self.whiten}; {state})")

    # ------------------------------------------------------------------------------------------
    # state as plain arrays (checkpoints, results)

    def get_state(self, online=False):
        """The surrogate as a dict of arrays, numbers and strings (saveable without pickle);
        :meth:`from_state` rebuilds it, predicting identically.

        Parameters
        ----------
        online : bool
            Also keep the online estimator of :meth:`partial_fit` (its weights, Theta, Phi,
            normal equations and pending rows: O(s^2) numbers), so that the rebuilt surrogate
            goes on learning exactly as this one would. Default False: the estimator is
            dropped (a rebuilt surrogate then needs a new fit with ``online=True``).
        """
        state = super().get_state()
        if online and getattr(self, "_online", None) is not None:
            state["online"] = dict(estimator=list(self._online.__reduce__()[1]),
                                   fit_layer=list(self._fit_layer),
                                   fit_gradient=None if self._fit_gradient is None
                                   else list(self._fit_gradient))
        return state

    def _restore(self, extra):
        online = extra.get("online")
        if online is None:
            return
        from ._kernels._online import _rebuild
        if len(online["estimator"][0]) != self.n_hidden + 1:
            raise ValueError("the saved online estimator has no constant term (saved by an "
                             "earlier version of rnshmc): it cannot go on learning; fit "
                             "the surrogate again")
        self._online = _rebuild(*online["estimator"])
        self._fit_layer = tuple(online["fit_layer"])
        self._fit_gradient = (None if online["fit_gradient"] is None
                              else tuple(online["fit_gradient"]))


def surrogate_from_state(state):
    """Rebuild a surrogate of any kind from its ``get_state()`` (a state without a kind was
    saved by a random network).

    Parameters
    ----------
    state : dict

    Returns
    -------
    Surrogate
    """
    kind = state.get("kind", RandomNetworkSurrogate.kind)
    if isinstance(kind, np.ndarray):  # (a saved string may come back as a 0-d array)
        kind = str(kind)
    if kind not in Surrogate.kinds:
        raise ValueError(f"unknown surrogate kind {kind!r} in a saved state (known: "
                         f"{sorted(Surrogate.kinds)})")
    return Surrogate.kinds[kind].from_state(state)
