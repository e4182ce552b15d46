"""The elliptic PDE inverse problem of the papers, evaluated in C."""
import numpy as np
import scipy.linalg

from .._kernels._fem import EllipticPDETarget
from ..fem import EllipticSolver
from ..parallel import blas_limits

__all__ = ["EllipticPDE", "kl_basis", "canonical_eigenbasis", "observation_grid"]


#: Eigenvalues closer than this times the largest eigenvalue count as one (degenerate)
#: eigenvalue in :func:`kl_basis`. About sqrt(machine epsilon): a gap delta (relative to the
#: largest eigenvalue) determines the eigenvectors only to ~eps / delta, while merging the pair
#: moves the columns off the exact eigenvectors by ~delta; the two errors balance here.
CLUSTER_TOL = 1e-8

#: Magnitudes within this relative distance of the largest entry of a vector are ties for the
#: sign convention of :func:`kl_basis`. Symmetric grids tie exactly, so rounding would decide;
#: the tolerance is far above the ~eps / CLUSTER_TOL to which unmerged eigenvectors are known.
SIGN_TIE_TOL = 1e-6


def kl_basis(centres, n_modes=20, length_scale=0.2, variance=1.0):
    """Truncated Karhunen-Loeve basis of a squared-exponential Gaussian field, as the authors.

    The covariance matrix C[e, f] = variance * exp(-|c_e - c_f|^2 / (2 length_scale^2)) of the
    element centres is diagonalised directly (no quadrature weights); the basis vectors are
    its unit-norm eigenvectors times the square roots of its eigenvalues, largest first, so
    that log kappa = basis @ theta has covariance ~C when theta ~ N(0, I).

    On symmetric grids C has repeated eigenvalues, whose eigenspaces have no preferred basis,
    and ``scipy.linalg.eigh`` returns different bases of them under different BLAS thread
    counts; each cluster of (numerically) equal eigenvalues is therefore given the canonical
    basis of :func:`canonical_eigenbasis`, which depends on the eigenspace only.

    Parameters
    ----------
    centres : array_like of shape (n_elements, 2)
    n_modes : int
    length_scale, variance : float

    Returns
    -------
    ndarray of shape (n_elements, n_modes)
        Column i is sqrt(lambda_i) phi_i, lambda_i the eigenvalue (for a cluster, the mean of
        its eigenvalues). Sign convention: the entry of largest magnitude of each phi_i is
        positive (ties, within a relative ``SIGN_TIE_TOL``: the first one).

    Notes
    -----
    Eigenvalues whose consecutive gaps are at most ``CLUSTER_TOL`` times the largest one form
    a cluster. Eigenpairs beyond ``n_modes`` are computed until the cluster holding the last
    kept mode is complete; if the truncation splits a cluster, the first columns of the
    canonical basis of the whole cluster are kept (deterministic, but a subspace that C does
    not single out). The columns are orthogonal, basis^T basis = diag(lambda), and
    C phi_i = lambda_i phi_i holds to rounding, or to the cluster's spread (at most
    ``CLUSTER_TOL`` times the largest eigenvalue per gap) for clusters of unequal eigenvalues.

    The result is a function of C only, but it is computed from LAPACK's eigenvectors, which
    differ in the last bits between BLAS thread counts (the tridiagonal reduction sums in a
    thread-dependent order): the decomposition runs on one BLAS thread, so that on one machine
    it is the same bit for bit whatever the thread limits around it. Between machines (other
    BLAS builds or CPUs) it agrees to rounding (measured: 1e-14 relative on the 30 x 30 Q1
    grid); eigenvectors of nearly equal but unmerged eigenvalues agree to ~eps / gap (2e-12 on
    the 30 x 30 P1 mesh).
    """
    centres = np.asarray(centres, dtype=np.float64)
    n = centres.shape[0]
    if isinstance(n_modes, bool) or not isinstance(n_modes, (int, np.integer)) or not 1 <= n_modes <= n:
        raise ValueError(f"n_modes must be an integer in [1, {n}], got {n_modes!r}")
    for name, value in (("length_scale", length_scale), ("variance", variance)):
        if not (np.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be positive and finite, got {value!r}")
    sq = np.sum((centres[:, None, :] - centres[None, :, :]) ** 2, axis=-1)
    cov = variance * np.exp(-sq / (2.0 * length_scale ** 2))
    n_computed = min(n, n_modes + 4)          # a few more, so that a cluster is not cut
    while True:
        # one BLAS thread: LAPACK's tridiagonal reduction sums in a thread-dependent order,
        # and the same seed must give the same problem bit for bit on any thread count
        with blas_limits(1, user_api="blas"):
            values, vectors = scipy.linalg.eigh(cov, subset_by_index=[n - n_computed, n - 1])
        values, vectors = values[::-1], vectors[:, ::-1]
        # the cluster holding the last kept mode is complete once a gap follows it
        gaps = values[n_modes - 1:-1] - values[n_modes:]
        closed = np.flatnonzero(gaps > CLUSTER_TOL * values[0])
        if closed.size or n_computed == n:
            end = n_modes + (closed[0] if closed.size else n_computed - n_modes)
            break
        n_computed = min(n, 2 * n_computed)
    values, vectors = canonical_eigenbasis(values[:end], vectors[:, :end], scale=values[0])
    values, vectors = values[:n_modes], vectors[:, :n_modes]
    if values[-1] <= 0:
        raise ValueError(f"only {np.sum(values > 0)} KL eigenvalues are positive at this "
                         f"resolution: use fewer than {n_modes} modes")
    return np.ascontiguousarray(vectors * np.sqrt(values))


def _probes(n, k):
    """Fixed pseudo-random probe vectors: ndarray of shape (n, k), entries uniform in [-1/2, 1/2).

    Entry (i, j) is the SplitMix64 hash of the counter j * 2^32 + i, so it depends on i and j
    only (not on n, k, the platform or the NumPy version).
    """
    with np.errstate(over="ignore"):
        i, j = np.arange(n, dtype=np.uint64)[:, None], np.arange(k, dtype=np.uint64)
        z = ((j << np.uint64(32)) + i + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    return (z >> np.uint64(11)).astype(np.float64) * 2.0 ** -53 - 0.5


def canonical_eigenbasis(values, vectors, scale=None, tol=CLUSTER_TOL):
    """A basis of eigenvectors that depends only on the eigenspaces, not on the basis given.

    Parameters
    ----------
    values : array_like of shape (k,)
        Eigenvalues of a symmetric matrix, in decreasing order.
    vectors : array_like of shape (n, k)
        Orthonormal eigenvectors, column i for ``values[i]``.
    scale : float, optional
        Clusters are runs of eigenvalues whose consecutive gaps are at most ``tol * scale``;
        default the largest ``|values|`` (the matrix norm if ``values`` holds the top of the
        spectrum).
    tol : float
        Relative gap below which eigenvalues count as equal (default ``CLUSTER_TOL``).

    Returns
    -------
    values : ndarray of shape (k,)
        Each eigenvalue replaced by the mean of its cluster.
    vectors : ndarray of shape (n, k)
        Within each cluster of size m, with V its given columns and P = V V^T its orthogonal
        projector (which does not depend on the choice of V), the columns are the Q factor of
        P G = Q R with diag(R) > 0, G the first m of the fixed probe vectors of
        :func:`_probes`; then every column (singletons too) is signed so that its entry of
        largest magnitude is positive (ties within a relative ``SIGN_TIE_TOL``: the first).
        The result is a function of the eigenspaces only, up to rounding.
    """
    values = np.array(values, dtype=np.float64)
    vectors = np.array(vectors, dtype=np.float64)
    k = values.size
    if vectors.ndim != 2 or vectors.shape[1] != k:
        raise ValueError(f"vectors must have shape (n, {k}), got {vectors.shape}")
    if k == 0:
        return values, vectors
    if scale is None:
        scale = np.max(np.abs(values))
    starts = np.flatnonzero(np.r_[True, values[:-1] - values[1:] > tol * scale])
    stops = np.r_[starts[1:], k]
    if np.any(stops - starts > 1):
        probes = _probes(vectors.shape[0], int(np.max(stops - starts)))
        for start, stop in zip(starts, stops):
            if stop - start > 1:
                V = vectors[:, start:stop]
                # P G = V (V^T G) = V Q_w R_w, so the Q factor of P G is V Q_w
                Q_w, R_w = np.linalg.qr(V.T @ probes[:, :stop - start])
                vectors[:, start:stop] = V @ (Q_w * np.where(np.diag(R_w) < 0, -1.0, 1.0))
                values[start:stop] = np.mean(values[start:stop])
    magnitude = np.abs(vectors)
    ties = magnitude >= (1.0 - SIGN_TIE_TOL) * magnitude.max(axis=0)
    first = np.argmax(ties, axis=0)
    vectors *= np.where(vectors[first, np.arange(k)] < 0, -1.0, 1.0)
    return values, vectors


def observation_grid(size=11):
    """The size x size grid {0, 1/(size-1), ..., 1}^2, point k at (x_(k // size), x_(k % size)).

    This is the authors' order (x1-major).

    Returns
    -------
    ndarray of shape (size**2, 2)
    """
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 2:
        raise ValueError(f"obs_grid must be an integer >= 2, got {size!r}")
    x = np.linspace(0.0, 1.0, size)
    i, j = np.meshgrid(np.arange(size), np.arange(size), indexing="ij")
    return np.column_stack([x[i.ravel()], x[j.ravel()]])


class EllipticPDE:
    """Posterior of the KL coefficients of an elliptic PDE's log-coefficient (the papers' problem).

    -div(kappa grad u) = 0 on the unit square with u = x1 on x2 = 0, u = 1 - x1 on x2 = 1 and
    zero flux on x1 = 0, 1; kappa is constant per element with
    log kappa = basis @ theta (a truncated Karhunen-Loeve expansion of a squared-exponential
    Gaussian field); u is observed with Gaussian noise, and theta has an isotropic Gaussian
    prior::

        U(theta) = |y - u_obs(theta)|^2 / (2 noise_sd^2) + |theta|^2 / (2 prior_sd^2).

    The constructor builds a synthetic problem: the structured mesh, the KL basis at the
    element centres, and data simulated from a ``true_theta`` drawn from the prior.
    :meth:`from_mat` reads the authors' problem instead, :meth:`from_solver` any other.

    Parameters
    ----------
    n : int
        Squares per side of the structured mesh.
    element : {"Q1", "P1"}
        Bilinear squares (the paper's text) or two linear triangles per square (the authors'
        code).
    n_modes : int
        Number of KL modes, the dimension of theta.
    length_scale, variance : float
        Of the squared-exponential covariance of log kappa.
    prior_sd : float
        Standard deviation of each theta_i.
    noise_sd : float
        Standard deviation of the observation noise.
    obs_grid : int
        u is observed at the obs_grid x obs_grid grid of points {0, ..., 1}^2 (see
        ``rnshmc.models.pde.observation_grid``); off-node points are interpolated with the basis functions.
    rng : None, int, SeedSequence or Generator
        Draws ``true_theta`` and the noise.

    Attributes
    ----------
    solver : rnshmc.fem.EllipticSolver
    basis : ndarray of shape (n_elements, dim)
        log kappa = basis @ theta.
    observation_points : ndarray of shape (n_obs, 2)
    observations : ndarray of shape (n_obs,)
    true_theta : ndarray of shape (dim,) or None
        The parameter the synthetic data were simulated from (None for :meth:`from_mat`).
    noise_sd, prior_sd : float

    Notes
    -----
    Each evaluation runs in C: log kappa, assembly into LAPACK band storage, the banded
    Cholesky factorisation and one solve; the gradient adds one adjoint solve with the same
    factor and a contraction over the elements. Where kappa overflows or the matrix is not
    positive definite the potential is +inf (a divergence for the samplers).

    Examples
    --------
    >>> import rnshmc
    >>> model = rnshmc.models.EllipticPDE(n=10, element="P1", n_modes=5, rng=0)
    >>> model.dim
    5
    """

    def __init__(self, n=30, element="Q1", n_modes=20, length_scale=0.2, variance=1.0,
                 prior_sd=0.5, noise_sd=0.1, obs_grid=11, rng=None):
        solver = EllipticSolver(n, element)
        basis = kl_basis(solver.element_centres, n_modes, length_scale, variance)
        points = observation_grid(obs_grid)
        _check_sd(prior_sd, "prior_sd")
        _check_sd(noise_sd, "noise_sd")
        generator = np.random.default_rng(rng)
        true_theta = prior_sd * generator.standard_normal(n_modes)
        noiseless = EllipticPDE.from_solver(solver, basis, np.zeros(len(points)), points,
                                            noise_sd, prior_sd)
        u_obs = noiseless.forward(true_theta)
        observations = u_obs + noise_sd * generator.standard_normal(u_obs.size)
        self._setup(solver, basis, observations, points, noise_sd, prior_sd)
        self.true_theta = true_theta
        self.settings = dict(n=n, element=element, n_modes=n_modes, length_scale=length_scale,
                             variance=variance, prior_sd=prior_sd, noise_sd=noise_sd,
                             obs_grid=obs_grid)

    @classmethod
    def from_solver(cls, solver, basis, observations, observation_points, noise_sd=0.1,
                    prior_sd=0.5):
        """A model on any mesh, coefficient basis and observations.

        Parameters
        ----------
        solver : rnshmc.fem.EllipticSolver
        basis : array_like of shape (solver.n_elements, dim)
            log kappa = basis @ theta.
        observations : array_like of shape (n_obs,)
        observation_points : array_like of shape (n_obs, 2)
            Where u is observed (nodal values at nodes, basis-function interpolation elsewhere).
        noise_sd, prior_sd : float

        Returns
        -------
        EllipticPDE
        """
        if not isinstance(solver, EllipticSolver):
            raise TypeError(f"solver must be an rnshmc.fem.EllipticSolver, got {type(solver).__name__}")
        self = cls.__new__(cls)
        self._setup(solver, basis, observations, observation_points, noise_sd, prior_sd)
        self.true_theta = None
        self.settings = None
        return self

    @classmethod
    def from_mat(cls, path):
        """The authors' problem from their ``ePDE.mat`` (mesh, KL basis, data, noise, prior).

        Parameters
        ----------
        path : str or path-like
            The file ``ellipticPDE/Data/ePDE.mat`` of the authors' code (not shipped with
            rnshmc): ``PDE.node`` (961 x 2), ``PDE.elem`` (1800 x 3, 1-based), ``PDE.bdNode``
            (62 Dirichlet nodes, 1-based), ``PDE.evc_KL`` (1800 x 20 unit-norm KL vectors at
            the triangle centroids), ``PDE.rtev_KL`` (square roots of the KL eigenvalues),
            ``y`` (121 observations), ``sigmay``, ``sigmatheta``.

        Returns
        -------
        EllipticPDE
            Observation k is the value of u at (floor(k / 11) / 10, (k mod 11) / 10), as in the
            authors' code; log kappa = evc_KL @ (rtev_KL * theta) per triangle.
        """
        import scipy.io
        try:
            contents = scipy.io.loadmat(path, squeeze_me=True, struct_as_record=False)
        except scipy.io.matlab.MatReadError as error:
            raise ValueError(f"{path} is not a readable MATLAB file ({error})") from None
        try:
            pde = contents["PDE"]
            nodes, elements, dirichlet = pde.node, pde.elem, pde.bdNode
            vectors, root_values = np.atleast_2d(pde.evc_KL), np.atleast_1d(pde.rtev_KL)
            y = np.atleast_1d(contents["y"]).astype(np.float64)
            noise_sd, prior_sd = float(contents["sigmay"]), float(contents["sigmatheta"])
        except (KeyError, AttributeError) as error:
            raise ValueError(f"{path} is not the authors' ePDE.mat: missing {error}") from None
        solver = EllipticSolver.from_mesh(nodes, np.asarray(elements, np.int64) - 1,
                                          np.asarray(dirichlet, np.int64) - 1)
        if vectors.shape[1] != root_values.size:
            raise ValueError("PDE.evc_KL and PDE.rtev_KL have different numbers of modes")
        size = int(round(np.sqrt(y.size)))
        if size * size != y.size:
            raise ValueError(f"expected a square grid of observations, got {y.size}")
        points = observation_grid(size)
        return cls.from_solver(solver, vectors * root_values, y, points, noise_sd, prior_sd)

    def _setup(self, solver, basis, observations, points, noise_sd, prior_sd):
        basis = np.array(basis, dtype=np.float64)
        if basis.ndim != 2 or basis.shape[0] != solver.n_elements or basis.shape[1] < 1:
            raise ValueError(f"basis must have shape ({solver.n_elements}, dim), got {basis.shape}")
        if not np.all(np.isfinite(basis)):
            raise ValueError("basis contains non-finite values")
        observations = np.array(observations, dtype=np.float64).ravel()
        points = np.array(points, dtype=np.float64)
        if points.shape != (observations.size, 2):
            raise ValueError(f"observation_points must have shape ({observations.size}, 2) to "
                             f"match the observations, got {points.shape}")
        if not np.all(np.isfinite(observations)):
            raise ValueError("observations contain non-finite values")
        _check_sd(noise_sd, "noise_sd")
        _check_sd(prior_sd, "prior_sd")
        operator = solver.interpolation_matrix(points)
        self.solver = solver
        self.basis = basis
        self.observations = observations
        self.observation_points = points
        self.noise_sd = float(noise_sd)
        self.prior_sd = float(prior_sd)
        self._ctarget = EllipticPDETarget(
            solver._system, np.ascontiguousarray(basis.T), operator.indptr.astype(np.intp),
            solver._ext[operator.indices].astype(np.intp), operator.data.astype(np.float64),
            observations, self.noise_sd, self.prior_sd)

    # ---------------------------------------------------------------------------------------

    @property
    def dim(self):
        """Number of KL modes."""
        return self.basis.shape[1]

    @property
    def density_flops(self):
        """Floating-point operations of one density evaluation, an estimate: log kappa
        (2 dim + 20 per element), assembly (2 k^2 per element of k nodes), the banded Cholesky
        factorisation (n kd^2 for n unknowns and half-bandwidth kd) and the two triangular
        solves (4 n kd). Surrogate samplers use it to price their leapfrog steps against exact
        evaluations."""
        solver = self.solver
        n, kd = solver.free_nodes.size, solver.bandwidth
        per_element = 2 * self.dim + 20 + 2 * solver.elements.shape[1] ** 2
        return float(solver.n_elements * per_element + n * kd * kd + 4 * n * kd)

    def _check(self, q):
        q = np.ascontiguousarray(q, dtype=np.float64)
        if q.shape != (self.dim,):
            raise ValueError(f"q must have shape ({self.dim},), got {q.shape}")
        if not np.all(np.isfinite(q)):
            raise ValueError("q contains non-finite values")
        return q

    def potential(self, q):
        """U(q) = -log posterior density (up to a constant); +inf where the solve fails.

        Parameters
        ----------
        q : array_like of shape (dim,)

        Returns
        -------
        float
        """
        return self._ctarget.eval_potential(self._check(q))

    def potential_and_gradient(self, q):
        """(U(q), grad U(q)), the gradient by one adjoint solve.

        Parameters
        ----------
        q : array_like of shape (dim,)

        Returns
        -------
        (float, ndarray of shape (dim,))
        """
        return self._ctarget.eval_potential_and_gradient(self._check(q))

    def log_density(self, q):
        """Log posterior density at ``q`` (up to a constant)."""
        return -self.potential(q)

    def log_density_gradient(self, q):
        """(log density, its gradient) at ``q``."""
        U, grad = self.potential_and_gradient(q)
        return -U, -grad

    def log_coefficient(self, q):
        """log kappa on each element, ``basis @ q``.

        Parameters
        ----------
        q : array_like of shape (dim,)

        Returns
        -------
        ndarray of shape (n_elements,)
        """
        return self.basis @ self._check(q)

    def _solution(self, q):
        ok, u_ext, u_obs = self._ctarget.solution(self._check(q))
        if not ok:
            raise FloatingPointError("kappa overflows or the stiffness matrix is not positive "
                                     "definite at this q")
        return u_ext, u_obs

    def forward(self, q):
        """u at the observation points (the forward map).

        Parameters
        ----------
        q : array_like of shape (dim,)

        Returns
        -------
        ndarray of shape (n_obs,)

        Raises
        ------
        FloatingPointError
            Where kappa overflows or the matrix is not positive definite.
        """
        return self._solution(q)[1]

    def solve(self, q):
        """Nodal values of u at ``q``: ndarray of shape (solver.n_nodes,)."""
        return self._solution(q)[0][self.solver._ext]

    def jacobian(self, q):
        """d u_obs / d theta by sensitivity solves that share one factorisation.

        Parameters
        ----------
        q : array_like of shape (dim,)

        Returns
        -------
        ndarray of shape (n_obs, dim)
        """
        ok, J = self._ctarget.jacobian(self._check(q))
        if not ok:
            raise FloatingPointError("kappa overflows or the stiffness matrix is not positive "
                                     "definite at this q")
        return J

    def gauss_newton_metric(self, q):
        """J^T J / noise_sd^2 + I / prior_sd^2 (the Fisher metric of the likelihood plus the
        prior precision), J = d u_obs / d theta.

        Computed in C (``EllipticPDETarget.gauss_newton``): one factorisation and ``dim``
        sensitivity solves with it.

        Parameters
        ----------
        q : array_like of shape (dim,)

        Returns
        -------
        ndarray of shape (dim, dim)
            Symmetric positive definite.

        Raises
        ------
        FloatingPointError
            Where kappa overflows or the matrix is not positive definite.
        """
        ok, G, _ = self._ctarget.eval_gauss_newton(self._check(q), derivatives=False)
        if not ok:
            raise FloatingPointError("kappa overflows or the stiffness matrix is not positive "
                                     "definite at this q")
        return G

    def gauss_newton_metric_derivatives(self, q):
        """The Gauss-Newton metric and its partial derivatives (for Riemannian HMC).

        Computed in C (``EllipticPDETarget.gauss_newton``) with one factorisation, ``dim``
        sensitivity solves and ``dim`` adjoint solves (the second-order sensitivities are
        contracted with J before solving), plus element-level products.

        Parameters
        ----------
        q : array_like of shape (dim,)

        Returns
        -------
        G : ndarray of shape (dim, dim)
            J^T J / noise_sd^2 + I / prior_sd^2, as :meth:`gauss_newton_metric`.
        dG : ndarray of shape (dim, dim, dim)
            dG[i] = dG / dtheta_i, each symmetric:
            dG[i, a, b] = sum_o (T[o, i, a] J[o, b] + J[o, a] T[o, i, b]) / noise_sd^2 with
            T[o, i, a] = d^2 u_obs[o] / dtheta_i dtheta_a.

        Raises
        ------
        FloatingPointError
            Where kappa overflows or the matrix is not positive definite.
        """
        ok, G, dG = self._ctarget.eval_gauss_newton(self._check(q), derivatives=True)
        if not ok:
            raise FloatingPointError("kappa overflows or the stiffness matrix is not positive "
                                     "definite at this q")
        return G, dG

    def __reduce__(self):
        return (_rebuild, (self.solver, self.basis, self.observations, self.observation_points,
                           self.noise_sd, self.prior_sd, self.true_theta, self.settings))

    def __repr__(self):
        return (f"EllipticPDE(dim={self.dim}, solver={self.solver!r}, n_obs={self.observations.size}, "
                f"noise_sd={self.noise_sd}, prior_sd={self.prior_sd})")


def _rebuild(solver, basis, observations, points, noise_sd, prior_sd, true_theta, settings):
    model = EllipticPDE.from_solver(solver, basis, observations, points, noise_sd, prior_sd)
    model.true_theta = true_theta
    model.settings = settings
    return model


def _check_sd(value, name):
    if isinstance(value, bool) or not (np.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be positive and finite, got {value!r}")
