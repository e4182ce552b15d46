"""Closed-form targets with known moments (tests, benchmarks, examples)."""
import numpy as np

from .._kernels._toy import GaussianTarget, MixtureTarget, RoughWellTarget
from ..targets import rebuilt_from_checkpoints
from ._base import CTargetModel

__all__ = ["Gaussian", "GaussianMixture", "RoughWell", "ill_conditioned_gaussian",
           "correlated_gaussian_2d"]


@rebuilt_from_checkpoints("Gaussian")
class Gaussian(CTargetModel):
    """Multivariate normal N(mean, covariance) as a C-level target, with
    U(q) = (q - mean)^T P (q - mean) / 2 (the log density up to its constant).

    A checkpoint of a run on it holds its mean and precision: :func:`rnshmc.resume`
    rebuilds it without being given the target.

    Parameters
    ----------
    mean : array_like of shape (dim,)
    covariance : array_like of shape (dim, dim), optional
        Symmetric positive definite. Give this or ``precision``.
    precision : array_like of shape (dim, dim), optional
        The inverse covariance.
    """

    def __init__(self, mean, covariance=None, precision=None):
        mean = np.ascontiguousarray(mean, dtype=np.float64)
        if mean.ndim != 1 or mean.size < 1 or not np.all(np.isfinite(mean)):
            raise ValueError("mean must be a finite 1-d array")
        if (covariance is None) == (precision is None):
            raise ValueError("give exactly one of covariance and precision")
        matrix = np.asarray(covariance if precision is None else precision, dtype=np.float64)
        dim = mean.size
        if matrix.shape != (dim, dim) or not np.all(np.isfinite(matrix)) or not np.allclose(matrix, matrix.T):
            raise ValueError(f"the covariance/precision must be a finite symmetric ({dim}, {dim}) matrix")
        try:
            np.linalg.cholesky(matrix)
        except np.linalg.LinAlgError:
            raise ValueError("the covariance/precision is not positive definite") from None
        self.mean = mean
        self.covariance = matrix.copy() if precision is None else np.linalg.inv(matrix)
        self.precision = np.ascontiguousarray(np.linalg.inv(matrix) if precision is None else matrix)
        self._ctarget = GaussianTarget(self.mean, self.precision)

    def __reduce__(self):
        return (type(self), (self.mean, None, self.precision))

    def checkpoint_spec(self):
        """What a checkpoint saves to rebuild this model: its mean and precision (see
        :func:`rnshmc.targets.rebuilt_from_checkpoints`)."""
        return dict(mean=self.mean, precision=self.precision)

    @classmethod
    def from_checkpoint_spec(cls, spec):
        """The model :meth:`checkpoint_spec` describes."""
        return cls(spec["mean"], precision=spec["precision"])


def ill_conditioned_gaussian(dim=50):
    """L2HMC's ill-conditioned Gaussian: zero mean, diagonal variances log-spaced from 1e-2 to
    1e2 (Levy et al. 2018, sec. 5.1).

    Parameters
    ----------
    dim : int

    Returns
    -------
    Gaussian
    """
    return Gaussian(np.zeros(dim), covariance=np.diag(np.logspace(-2.0, 2.0, dim)))


def correlated_gaussian_2d():
    """L2HMC's strongly correlated Gaussian: variances 1e2 and 1e-1 rotated by pi/4, i.e.
    covariance [[50.05, -49.95], [-49.95, 50.05]] (Levy et al. 2018, sec. 5.1).

    Returns
    -------
    Gaussian
    """
    return Gaussian(np.zeros(2), covariance=np.array([[50.05, -49.95], [-49.95, 50.05]]))


class GaussianMixture(CTargetModel):
    """An isotropic Gaussian mixture sum_k w_k N(mu_k, variance I) as a C-level target
    (normalised: U = -log density exactly).

    The default is L2HMC's mixture of two Gaussians: means (+-2, 0), variance 0.1, equal
    weights (Levy et al. 2018, sec. 5.1).

    Parameters
    ----------
    means : array_like of shape (n_components, dim)
    variance : float
        Per-coordinate variance of every component.
    weights : array_like of shape (n_components,), optional
        Positive; normalised to sum to 1 (default equal).

    Attributes
    ----------
    mean : ndarray of shape (dim,)
    covariance : ndarray of shape (dim, dim)
        The mixture's moments: variance I + sum_k w_k (mu_k - mean)(mu_k - mean)^T.
    """

    def __init__(self, means=((-2.0, 0.0), (2.0, 0.0)), variance=0.1, weights=None):
        means = np.ascontiguousarray(means, dtype=np.float64)
        if means.ndim != 2 or means.shape[0] < 1 or means.shape[1] < 1 \
                or not np.all(np.isfinite(means)):
            raise ValueError("means must be a finite (n_components, dim) array")
        if not (np.isfinite(variance) and variance > 0):
            raise ValueError(f"variance must be positive and finite, got {variance}")
        weights = np.full(len(means), 1.0) if weights is None else np.asarray(weights, float)
        if weights.shape != (len(means),) or not np.all(np.isfinite(weights) & (weights > 0)):
            raise ValueError(f"weights must be {len(means)} positive finite numbers")
        self.means = means
        self.variance = float(variance)
        self.weights = weights / weights.sum()
        self.mean = self.weights @ means
        centred = means - self.mean
        self.covariance = (self.variance * np.eye(means.shape[1])
                           + (centred * self.weights[:, None]).T @ centred)
        self._ctarget = MixtureTarget(means, self.variance, np.log(self.weights))

    def __reduce__(self):
        return (type(self), (self.means, self.variance, self.weights))


class RoughWell(CTargetModel):
    """L2HMC's rough well: ``U(q) = |q|^2 / 2 + eta sum_i cos(q_i / eta)`` (Levy et al. 2018,
    sec. 5.1), a Gaussian with fast small ripples whose gradients swing by +-1.

    Parameters
    ----------
    dim : int
    eta : float
        Ripple scale (default 1e-2).
    ripple : {"paper", "authors"}
        "paper" (default): cos(q_i / eta), as the paper writes it. "authors": cos(q_i /
        eta^2), the authors' code's default (``RoughWell(easy=False)`` in
        ``utils/distributions.py`` of brain-research/l2hmc): ripples eta times faster, whose
        gradients swing by +-1/eta (100 at eta = 1e-2), so that leapfrog steps of 0.05 and
        more are rejected almost always.
    """

    RIPPLES = ("paper", "authors")

    def __init__(self, dim=2, eta=1e-2, ripple="paper"):
        if not (isinstance(dim, (int, np.integer)) and dim >= 1):
            raise ValueError(f"dim must be a positive integer, got {dim!r}")
        if not (np.isfinite(eta) and eta > 0):
            raise ValueError(f"eta must be positive and finite, got {eta}")
        if ripple not in self.RIPPLES:
            raise ValueError(f"ripple must be one of {self.RIPPLES}, got {ripple!r}")
        self.eta, self.ripple = float(eta), ripple
        period = self.eta if ripple == "paper" else self.eta ** 2
        self._ctarget = RoughWellTarget(int(dim), self.eta, period)

    def __reduce__(self):
        return (type(self), (self.dim, self.eta, self.ripple))
