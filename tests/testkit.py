"""Shared helpers for the rnshmc tests, imported by the test modules
(``from testkit import check_mean, correlated_gaussian``): Monte Carlo error checks for
statistical tests, the papers' data folder, and the targets, chains and sampler calls the
sampler and kernel tests build on, and the tests' seeds (``rng_seed``).

A plain module, not a conftest: it lives in ``tests/`` beside ``conftest.py``, and pytest puts
that folder on ``sys.path`` when it loads ``tests/conftest.py`` (the default "prepend" import
mode), so ``import testkit`` works from every subfolder, whether the tests run in the checkout
or from a copy outside the source tree against an installed package.
"""
import contextlib
import os
import re
from pathlib import Path

import numpy as np
from scipy import special, stats

from rnshmc import HMC, Target, diagnostics
from rnshmc._kernels._integrators import Leapfrog
from rnshmc._kernels._metrics import EuclideanMetric
from rnshmc._kernels._chain import TRANSITION
from rnshmc._kernels._transition import Chain
from rnshmc.targets import as_ctarget


# --------------------------------------------------------------------------------------------
# Seeds


def _seed_offset():
    text = os.environ.get("RNSHMC_TEST_SEED_OFFSET", "0").strip() or "0"
    try:
        offset = int(text)
    except ValueError:
        raise ValueError(f"RNSHMC_TEST_SEED_OFFSET must be a non-negative integer, not {text!r}")
    if offset < 0:
        raise ValueError(f"RNSHMC_TEST_SEED_OFFSET must be a non-negative integer, not {offset}")
    return offset


#: Added to every seed the tests pick (``rng_seed``, and a test parameter named ``seed``, which
#: conftest.py shifts). A test asserts a property of the sampler, which holds at any offset;
#: one that holds for one seed's trajectory only (chaotic dynamics turn an ulp of another CPU's
#: BLAS kernel into another trajectory) fails at another offset, on this machine.
#: ``.ci/run`` runs the surrogate samplers' tests at a second offset.
SEED_OFFSET = _seed_offset()


def rng_seed(seed):
    """The seed ``seed`` shifted by ``$RNSHMC_TEST_SEED_OFFSET`` (0 unless set): what a test
    passes as ``rng=`` or to ``numpy.random.default_rng`` in place of a literal."""
    return int(seed) + SEED_OFFSET


# --------------------------------------------------------------------------------------------
# Monte Carlo checks


def without_seconds(value):
    """A result's value without its wall-clock times (which differ between equal runs)."""
    if isinstance(value, dict):
        return {k: without_seconds(v) for k, v in value.items() if k != "seconds"}
    return value


def mean_within_mcse(samples, true_mean, n_sigma=4.5):
    """Standardised errors (mean - true) / MCSE per coordinate, MCSE = sd / sqrt(ESS), and
    the tolerance: a test asserts |z| < n_sigma (or, in a power check, that it fails).

    ``samples``: (chains, draws, dim). The ESS pools the chains (rnshmc.diagnostics.ess,
    Geyer's initial monotone sequence, docs/algorithms.md section 2, itself tested in
    test_diagnostics.py).
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


def check_mean(samples, true_mean, n_sigma=4.5):
    """Assert every coordinate's mean is within ``n_sigma`` Monte Carlo standard errors of
    ``true_mean``; returns the standardised errors."""
    z, tol = mean_within_mcse(samples, true_mean, n_sigma)
    assert np.all(np.abs(z) < tol), f"standardised mean errors {np.round(z, 2)}"
    return z


def check_covariance(samples, true_mean, true_cov, n_sigma=5.0):
    """Assert every covariance entry is within ``n_sigma`` Monte Carlo standard errors of
    ``true_cov``; returns the standardised errors."""
    z, tol = covariance_within_mcse(samples, true_mean, true_cov, n_sigma)
    assert np.all(np.abs(z) < tol), f"largest standardised error {np.max(np.abs(z)):.2f}"
    return z



def batch_means_within_mcse(series, truth, n_batches=40, n_sigma=5.0):
    """Standardised errors (mean - truth) / MCSE per column, the MCSE from batch means, and
    the tolerance.

    ``series``: (chains, draws, k); each chain is cut into ``n_batches / chains`` batches of
    equal, even length (a trailing remainder is dropped). Unlike an ESS from autocorrelations,
    batch means stay valid for antithetic chains (negative lag-1 autocorrelation, where the
    initial monotone sequence can make the ESS infinite): a batch of even length averages
    out a sign flip. With 40 batches, |z| > 5 has probability about 1e-5 under exactness.
    """
    series = np.asarray(series, dtype=float)
    chains, draws = series.shape[:2]
    per_chain = max(n_batches // chains, 2)
    length = (draws // per_chain) // 2 * 2
    if length < 2:
        raise ValueError("too few draws for the batches")
    batches = series[:, :per_chain * length].reshape(chains * per_chain, length, -1).mean(axis=1)
    mcse = batches.std(axis=0, ddof=1) / np.sqrt(batches.shape[0])
    z = (batches.mean(axis=0) - truth) / mcse
    return z, n_sigma

# --------------------------------------------------------------------------------------------
# The papers' data sets (../shared/data beside the checkout, or $RNSHMC_SHARED_DATA)


def shared_data_dir():
    """Path of the papers' data folder ($RNSHMC_SHARED_DATA, else ../shared/data beside the
    checkout), or None when it is absent (the ``shared_data`` fixture then skips)."""
    candidates = []
    if os.environ.get("RNSHMC_SHARED_DATA"):
        candidates.append(Path(os.environ["RNSHMC_SHARED_DATA"]))
    candidates.append(Path(__file__).resolve().parents[2] / "shared" / "data")
    for path in candidates:
        if path.is_dir():
            return path
    return None


# --------------------------------------------------------------------------------------------
# Targets with known answers, C chains and sampler calls


def gaussian_target(mean, precision, dim=True):
    """N(mean, precision^{-1}) as an rnshmc.Target from one Python value-and-gradient callable
    (``dim=False``: the target does not declare its dimension)."""
    mean = np.asarray(mean, dtype=np.float64)
    precision = np.asarray(precision, dtype=np.float64)

    def gaussian_logp_and_grad(q):
        x = q - mean
        g = precision @ x
        return -0.5 * (x @ g), -g

    return Target(None, logp_and_grad=gaussian_logp_and_grad, dim=mean.size if dim else None)


def make_random_covariance(rng, dim, condition):
    """Random SPD matrix with eigenvalues log-spaced over [1, condition] (condition number
    exactly ``condition``) in a Haar-random orthonormal basis."""
    Q, R = np.linalg.qr(rng.standard_normal((dim, dim)))
    Q = Q * np.sign(np.diag(R))
    eigenvalues = np.geomspace(1.0, condition, dim)
    rng.shuffle(eigenvalues)
    cov = (Q * eigenvalues) @ Q.T
    return 0.5 * (cov + cov.T)


def gaussian_problem(seed, dim=10, condition=30.0):
    """Correlated Gaussian: random SPD covariance with condition number 30, nonzero mean;
    returns (mean, covariance, precision)."""
    rng = np.random.default_rng(1000 + seed)
    cov = make_random_covariance(rng, dim, condition)
    mean = rng.normal(0.0, 3.0, size=dim)
    return mean, cov, np.linalg.inv(cov)


def harmonic_target(dim=3):
    """U(q) = q^T q / 2 from two separate Python callables (logp and grad_logp)."""
    def harmonic_logp(q):
        return -0.5 * float(q @ q)

    def harmonic_grad(q):
        return -q

    return Target(harmonic_logp, grad_logp=harmonic_grad, dim=dim)


def log_gamma_target(shape=2.0, dim=1):
    """dim independent x_k = log(Y_k), Y_k ~ Gamma(shape, 1): log p(x) = sum shape x - e^x
    (skewed, non-Gaussian)."""
    def log_gamma_logp_and_grad(q):
        e = np.exp(q)
        return float(np.sum(shape * q - e)), shape - e
    return Target(None, logp_and_grad=log_gamma_logp_and_grad, dim=dim)


def log_gamma_statistics(x, shape=2.0):
    """Per-draw functions whose means are known for x = log Gamma(shape, 1) variates: x,
    (x - E x)^2 and the tail indicators x < -1, x > 1; returns (functions, their means)."""
    m = special.digamma(shape)
    functions = np.stack([x, (x - m) ** 2, (x < -1.0) * 1.0, (x > 1.0) * 1.0], axis=-1)
    truth = np.array([m, special.polygamma(1, shape), stats.gamma(shape).cdf(np.exp(-1.0)),
                      stats.gamma(shape).sf(np.e)])
    return functions, truth


def dense_inverse_mass(inverse_mass, dim):
    """An inverse mass matrix (None, diagonal or dense) as a dense matrix."""
    if inverse_mass is None:
        return np.eye(dim)
    inverse_mass = np.asarray(inverse_mass)
    return np.diag(inverse_mass) if inverse_mass.ndim == 1 else inverse_mass


def gaussian_for_leapfrog(kind, seed=4, dim=5):
    """A dense-precision Gaussian as an rnshmc.Target and an inverse mass of the given kind
    ("identity", "diagonal", "dense") that is deliberately *not* the covariance (so the mass
    matters): returns (target, mean, precision, inverse mass)."""
    rng = np.random.default_rng(seed)
    cov = make_random_covariance(rng, dim, 20.0)
    mean = rng.normal(0, 2, dim)
    P = np.linalg.inv(cov)
    if kind == "identity":
        inv_mass = None
    elif kind == "diagonal":
        inv_mass = rng.uniform(0.3, 3.0, dim)
    else:
        inv_mass = make_random_covariance(rng, dim, 10.0)
    return gaussian_target(mean, P), mean, P, inv_mass


def make_chain(target, dim, inverse_mass=None, test=None, max_energy_error=1000.0,
               delayed_acceptance=False):
    """A C chain (Euclidean metric, leapfrog) over ``target`` as the samplers build it."""
    return Chain(as_ctarget(target, dim), test=test, metric=EuclideanMetric(dim, inverse_mass),
                 integrator=Leapfrog(), max_energy_error=max_energy_error,
                 delayed_acceptance=delayed_acceptance)


def run_chain(chain, generator, n, step_size, n_steps, jitter=False, **flags):
    """``chain.run`` with freshly allocated outputs (after setting ``chain.step_size``, unless
    ``step_size`` is None); ``flags`` are run's keyword arguments (``adapt_step_size``,
    ``accumulate_variance``, ``gradients``). Returns a dict: "samples", "records" and every
    field of the records (``log_density``, ``accepted``, ``n_steps``, ...)."""
    if step_size is not None:
        chain.step_size = step_size
    samples = np.empty((n, chain.dim))
    records = np.empty(n, TRANSITION)
    chain.run(generator, n, n_steps, jitter, samples, records, **flags)
    out = {name: records[name] for name in TRANSITION.names}
    out.update(samples=samples, records=records)
    return out


def hmc_sample(target, draws=500, tune=0, chains=1, rng=rng_seed(0), **kwargs):
    """HMC(target, **settings).sample(...) without a progress bar (``init`` and ``pool`` are
    sample's, every other keyword goes to HMC)."""
    init = kwargs.pop("init", None)
    pool = kwargs.pop("pool", None)
    return HMC(target, **kwargs).sample(draws, tune=tune, chains=chains, rng=rng, init=init,
                                        progress=False, pool=pool)


def banana(sd=2.0, twist=0.3):
    """A twisted Gaussian as an rnshmc.Target: x1 ~ N(0, sd^2), x2 = z + twist (x1^2 - sd^2),
    z ~ N(0, 1); returns (target, mean, covariance): mean 0, covariance
    diag(sd^2, 1 + 2 twist^2 sd^4)."""
    def banana_logp_and_grad(x):
        r = x[1] - twist * (x[0] ** 2 - sd ** 2)
        return (-0.5 * x[0] ** 2 / sd ** 2 - 0.5 * r ** 2,
                np.array([-x[0] / sd ** 2 + 2 * twist * x[0] * r, -r]))
    return (Target(None, logp_and_grad=banana_logp_and_grad, dim=2), np.zeros(2),
            np.diag([sd ** 2, 1 + 2 * twist ** 2 * sd ** 4]))


def correlated_gaussian(dim=4, seed=0):
    """(rnshmc.models.Gaussian, mean, covariance): a correlated Gaussian for the surrogate
    samplers' exactness tests."""
    from rnshmc.models import Gaussian
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((dim, dim))
    cov = A @ A.T / dim + 0.2 * np.eye(dim)
    mean = rng.standard_normal(dim)
    return Gaussian(mean, covariance=cov), mean, cov


def funnel_target(dim=10, scale=1.0):
    """A hierarchical posterior with a log-scale parameter (Neal's funnel): v ~ N(0, scale^2),
    x_k | v ~ N(0, e^v) for k = 1..dim-1; E v = 0, Var v = scale^2, E x_k^2 = e^(scale^2/2)."""
    def funnel_logp_and_grad(q):
        v, x = q[0], q[1:]
        with np.errstate(over="ignore"):
            precision = np.exp(-v)
        squares = float(np.dot(x, x))
        gradient = np.empty_like(q)
        gradient[0] = -v / scale**2 + 0.5 * squares * precision - 0.5 * (dim - 1)
        gradient[1:] = -x * precision
        return -0.5 * v * v / scale**2 - 0.5 * squares * precision - 0.5 * (dim - 1) * v, gradient
    return Target(None, logp_and_grad=funnel_logp_and_grad, dim=dim)


# ----------------------------------------------------------------------------------------------
# earlier keyword names (refused with a TypeError that names the new spelling)


def check_renamed(make, old, spellings):
    """``make(**old)``, a sampler built with earlier keyword names, raises one TypeError that
    names each of them with its new spelling (``spellings``: old name -> the spelling, every
    earlier name in ``old``), as "Owner: name= was renamed: use spelling", and nothing else.
    Returns the message."""
    import pytest
    with pytest.raises(TypeError) as raised:
        make(**old)
    message = str(raised.value)
    for name, spelling in spellings.items():
        assert re.search(rf"(: |; ){name}= was renamed: use {re.escape(spelling)}(;|$)",
                         message), (name, message)
    assert message.count(" was renamed: ") == len(spellings), message
    return message


@contextlib.contextmanager
def loopback_dask_client():
    """A client of a fresh dask.distributed LocalCluster on loopback: two worker processes of
    one thread each, no dashboard (the test skips without distributed)."""
    import pytest
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  host="127.0.0.1", dashboard_address=None,
                                  protocol="tcp://") as cluster, \
            distributed.Client(cluster) as client:
        yield client
