"""The papers' simulated logistic-regression design."""
import numpy as np

__all__ = ["simulated_logistic"]


def simulated_logistic(n=100_000, dim=50, rng=None):
    """Simulated Bayesian logistic-regression data of the RNS-HMC paper (section 5.1).

    The first column of X is the constant 0.1; the others are N(0, 0.01) (standard deviation
    0.1); the true coefficients are U[0, 1]^dim and y_i ~ Bernoulli(sigmoid(x_i^T beta)).

    Parameters
    ----------
    n : int
        Number of rows (default 100,000).
    dim : int
        Number of coefficients, including the constant column (default 50).
    rng : None, int, SeedSequence or Generator

    Returns
    -------
    X : ndarray of shape (n, dim)
    y : ndarray of shape (n,), values in {0, 1}
    beta : ndarray of shape (dim,), the true coefficients
    """
    for name, value in (("n", n), ("dim", dim)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    rng = np.random.default_rng(rng)
    X = np.empty((n, dim))
    X[:, 0] = 0.1
    X[:, 1:] = 0.1 * rng.standard_normal((n, dim - 1))
    beta = rng.uniform(0.0, 1.0, size=dim)
    probability = 1.0 / (1.0 + np.exp(-(X @ beta)))
    y = (rng.uniform(size=n) < probability).astype(np.float64)
    return X, y, beta
