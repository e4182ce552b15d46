"""Shared helpers for the rnshmc tests: Monte Carlo error checks for statistical tests.

The helpers are handed to tests as fixtures (``check_mean``, ``check_covariance``, ``mcse_z``)
so the test modules need no imports from here.
"""
import numpy as np
import pytest

from rnshmc import diagnostics


def pytest_configure(config):
    # registered here too, so the marker is known when the tests run outside the checkout
    config.addinivalue_line("markers", "slow: long statistical tests (deselect with -m 'not slow')")


# --------------------------------------------------------------------------------------------
# Monte Carlo checks


def mean_within_mcse(samples, true_mean, n_sigma=4.5):
    """Standardised errors (mean - true) / MCSE per coordinate, MCSE = sd / sqrt(ESS), and
    the tolerance: a test asserts |z| < n_sigma (or, in a power check, that it fails).

    ``samples``: (chains, draws, dim). The ESS pools the chains (rnshmc.diagnostics.ess,
    Geyer's initial monotone sequence, itself tested in test_diagnostics.py).
    """
    samples = np.asarray(samples)
    flat = samples.reshape(-1, samples.shape[-1])
    ess = np.atleast_1d(diagnostics.ess(samples, cap=False))
    mcse = flat.std(axis=0, ddof=1) / np.sqrt(ess)
    z = (flat.mean(axis=0) - true_mean) / mcse
    return z, n_sigma


def covariance_within_mcse(samples, true_mean, true_cov, n_sigma=5.0):
    """Standardised errors of every covariance entry (upper triangle incl. diagonal).

    Entry (i, j) is estimated by the mean of the products z_ij = (x_i - mu_i)(x_j - mu_j)
    around the *true* mean (an unbiased estimator of Sigma_ij, no O(1/n) centring bias); its
    Monte Carlo standard error is sd(z_ij) / sqrt(ESS(z_ij)), with the ESS of the product
    series itself (products mix more slowly than the coordinates). Returns the standardised
    errors (estimate - Sigma_ij) / MCSE and the tolerance.
    """
    samples = np.asarray(samples)
    dim = samples.shape[-1]
    iu = np.triu_indices(dim)
    centred = samples - true_mean
    products = centred[..., iu[0]] * centred[..., iu[1]]  # (chains, draws, n_entries)
    flat = products.reshape(-1, products.shape[-1])
    ess = np.atleast_1d(diagnostics.ess(products, cap=False))
    mcse = flat.std(axis=0, ddof=1) / np.sqrt(ess)
    z = (flat.mean(axis=0) - true_cov[iu]) / mcse
    return z, n_sigma


@pytest.fixture
def check_mean():
    def check(samples, true_mean, n_sigma=4.5):
        z, tol = mean_within_mcse(samples, true_mean, n_sigma)
        assert np.all(np.abs(z) < tol), f"standardised mean errors {np.round(z, 2)}"
        return z
    return check


@pytest.fixture
def check_covariance():
    def check(samples, true_mean, true_cov, n_sigma=5.0):
        z, tol = covariance_within_mcse(samples, true_mean, true_cov, n_sigma)
        assert np.all(np.abs(z) < tol), f"largest standardised error {np.max(np.abs(z)):.2f}"
        return z
    return check


@pytest.fixture
def mcse_z():
    """The raw standardised-error functions (for power checks that expect a failure)."""
    return mean_within_mcse


@pytest.fixture
def mcse_cov_z():
    """The covariance twin of ``mcse_z``."""
    return covariance_within_mcse


# --------------------------------------------------------------------------------------------
# The papers' data sets (../shared/data beside the checkout, or $RNSHMC_SHARED_DATA)


def _shared_data_dir():
    import os
    from pathlib import Path
    candidates = []
    if os.environ.get("RNSHMC_SHARED_DATA"):
        candidates.append(Path(os.environ["RNSHMC_SHARED_DATA"]))
    candidates.append(Path(__file__).resolve().parents[2] / "shared" / "data")
    for path in candidates:
        if path.is_dir():
            return path
    return None


@pytest.fixture
def shared_data():
    """Path of the papers' data folder; skips the test when it is absent (a user's clone)."""
    path = _shared_data_dir()
    if path is None:
        pytest.skip("needs the papers' data in ../shared/data beside the checkout (or "
                    "$RNSHMC_SHARED_DATA); absent here")
    return path
