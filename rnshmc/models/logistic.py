"""Bayesian logistic regression with a Gaussian prior, evaluated in C."""
import numpy as np

from .._kernels._logistic import LogisticTarget, openmp_enabled
from ._base import CTargetModel

__all__ = ["LogisticRegression"]


class LogisticRegression(CTargetModel):
    """Posterior of logistic-regression coefficients under an isotropic Gaussian prior.

    ``U(b) = sum_i [log(1 + exp(x_i^T b)) - y_i x_i^T b] + |b|^2 / (2 prior_variance)``.

    Parameters
    ----------
    X : array_like of shape (n_rows, dim)
        Design matrix (include a column of ones for an intercept). Copied to a C-contiguous
        float64 array unless it already is one.
    y : array_like of shape (n_rows,)
        Labels in {0, 1} (booleans and {-1, +1} are accepted and mapped to {0, 1}).
    prior_variance : float
        Variance alpha of the N(0, alpha I) prior (default 100, as in the papers).
    n_threads : int or None
        Threads used per evaluation. None follows the OpenMP limit at call time
        (``OMP_NUM_THREADS`` or a ``threadpoolctl`` limit, all cores by default). Either way
        a thread gets at least 65536 entries of X (small problems run serially). Builds
        without OpenMP are serial.

    Notes
    -----
    One evaluation makes one pass over the rows of X in cache-sized blocks, computing the linear
    predictor and the gradient contribution of each block together; blocks are split among
    threads and reduced in a fixed order, so results do not depend on the thread count.
    ``potential`` alone (no gradient) skips the second pass over each block.
    """

    def __init__(self, X, y, prior_variance=100.0, n_threads=None):
        X = np.ascontiguousarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[0] < 1 or X.shape[1] < 1:
            raise ValueError(f"X must be a non-empty 2-d array, got shape {X.shape}")
        if not np.all(np.isfinite(X)):
            raise ValueError("X contains non-finite values")
        y = np.asarray(y)
        if y.shape != (X.shape[0],):
            raise ValueError(f"y must have shape ({X.shape[0]},) to match X, got {y.shape}")
        y = y.astype(np.float64)
        values = set(np.unique(y).tolist())
        if values <= {-1.0, 1.0} and -1.0 in values:
            y = (y > 0).astype(np.float64)
        elif not values <= {0.0, 1.0}:
            raise ValueError(f"y must hold labels in {{0, 1}} or {{-1, +1}}, got values {sorted(values)[:5]}")
        if not (np.isfinite(prior_variance) and prior_variance > 0):
            raise ValueError(f"prior_variance must be positive and finite, got {prior_variance}")
        if n_threads is not None and (not isinstance(n_threads, (int, np.integer)) or n_threads < 1):
            raise ValueError(f"n_threads must be a positive integer or None, got {n_threads!r}")
        self.X = X
        self.y = np.ascontiguousarray(y)
        self.prior_variance = float(prior_variance)
        self.n_threads = n_threads
        self._ctarget = LogisticTarget(self.X, self.y, self.prior_variance, n_threads or 0)

    openmp_enabled = openmp_enabled

    @property
    def density_flops(self):
        """Floating-point operations of one density evaluation, an estimate: the linear
        predictor (2 d per row) and log(1 + exp) with the likelihood terms (about 20 per row).
        Surrogate samplers use it to price their leapfrog steps against exact evaluations."""
        n, d = self.X.shape
        return float(n * (2 * d + 20))

    def fisher_metric(self, q):
        """Expected Fisher information plus prior precision: X^T diag(pi(1-pi)) X + I/alpha.

        Parameters
        ----------
        q : ndarray of shape (dim,)

        Returns
        -------
        ndarray of shape (dim, dim)
        """
        return self._ctarget.fisher_metric(q)

    def __reduce__(self):
        # the C kernel holds scratch buffers: rebuild it from the data
        return (type(self), (self.X, self.y, self.prior_variance, self.n_threads))

    def __repr__(self):
        return (f"LogisticRegression(n_rows={self.X.shape[0]}, dim={self.dim}, "
                f"prior_variance={self.prior_variance})")
