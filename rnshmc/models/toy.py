"""Closed-form targets with known moments (tests, benchmarks, examples)."""
import numpy as np

from .._kernels._toy import GaussianTarget

__all__ = ["Gaussian"]


class Gaussian:
    """Multivariate normal N(mean, covariance) as a C-level target.

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

    @property
    def dim(self):
        return self.mean.size

    def potential(self, q):
        """U(q) = (q - mean)^T P (q - mean) / 2."""
        return self._ctarget.eval_potential(q)

    def log_density(self, q):
        """Log density at ``q`` up to the normalising constant."""
        return -self.potential(q)

    def log_density_gradient(self, q):
        """(log density, gradient) at ``q``."""
        U, grad = self._ctarget.eval_potential_and_gradient(q)
        return -U, -grad

    def __reduce__(self):
        return (type(self), (self.mean, None, self.precision))
