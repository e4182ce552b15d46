"""Small posteriors that are hard for samplers with defaults: a Bayesian linear regression with
strongly correlated coefficients, Neal's funnel, and a latent Gaussian-process Poisson
regression (a funnel between its hyperparameters and its latent values). Python targets with
analytic gradients; each knows what a converged run's draws must match (``reference``). Used
by the robustness tests and ``benchmarks/bench_robust.py``.
"""
import numpy as np

from ..targets import Target

__all__ = ["correlated_regression", "neals_funnel", "gp_poisson", "hard_posteriors",
           "eight_schools"]


def correlated_regression(n=60, dim=8, correlation=0.995, noise=0.5, seed=0):
    """Bayesian linear regression y = X beta + N(0, noise^2), beta ~ N(0, 10^2 I), whose
    covariates share one factor (pairwise correlation about ``correlation``): the posterior is
    a Gaussian with strongly correlated coefficients (condition number in the thousands).

    Returns
    -------
    target : rnshmc.Target
    reference : dict
        The exact posterior ``mean`` and ``covariance``, and the data (``X``, ``y``,
        ``noise``: to state the same posterior in another library).
    """
    rng = np.random.default_rng(seed)
    factor = rng.standard_normal((n, 1))
    X = np.sqrt(correlation) * factor + np.sqrt(1 - correlation) * rng.standard_normal((n, dim))
    y = X @ (1.0 + rng.standard_normal(dim)) + noise * rng.standard_normal(n)
    precision = X.T @ X / noise**2 + np.eye(dim) / 100.0
    covariance = np.linalg.inv(precision)
    mean = covariance @ X.T @ y / noise**2

    def logp_and_grad(beta):
        residual = y - X @ beta
        return (-0.5 * residual @ residual / noise**2 - 0.5 * beta @ beta / 100.0,
                X.T @ residual / noise**2 - beta / 100.0)
    return (Target(None, logp_and_grad=logp_and_grad, dim=dim),
            dict(mean=mean, covariance=covariance, X=X, y=y, noise=noise))


def neals_funnel(dim=10, scale=3.0):
    """Neal's funnel: v ~ N(0, scale^2) and x_k | v ~ N(0, e^v), k = 1..dim-1 (Neal 2003).

    Returns
    -------
    target : rnshmc.Target
    reference : dict
        The exact ``mean`` (zero) and the marginal standard deviation of v (``sd_v``).
    """
    def logp_and_grad(q):
        v, x = q[0], q[1:]
        with np.errstate(over="ignore"):
            precision = np.exp(-v)
        squares = float(x @ x)
        gradient = np.empty_like(q)
        gradient[0] = -v / scale**2 + 0.5 * squares * precision - 0.5 * (dim - 1)
        gradient[1:] = -x * precision
        return (-0.5 * v * v / scale**2 - 0.5 * squares * precision - 0.5 * (dim - 1) * v,
                gradient)
    return (Target(None, logp_and_grad=logp_and_grad, dim=dim),
            dict(mean=np.zeros(dim), sd_v=scale))


def gp_poisson(n=8, seed=0, centred=True):
    """Counts y_i ~ Poisson(exp(f_i)) at n points in [0, 1], f ~ GP(0, sigma^2 exp(-r^2 /
    (2 l^2))) in the centred parametrisation; parameters (log sigma, log l, f_1..f_n) with
    log sigma ~ N(0, 1) and log l ~ N(log 0.3, 0.5^2). With few counts the latent values
    shrink towards zero as sigma does: a funnel, which no constant mass matrix fits.

    ``centred=False`` is the same model non-centred: parameters (log sigma, log l,
    z_1..z_n), z ~ N(0, I) and f = sigma L_l z with L_l the Cholesky factor of the kernel's
    shape (jitter 1e-6 sigma^2 on its diagonal instead of 1e-6): the funnel is gone.

    Returns
    -------
    target : rnshmc.Target
    reference : None
        (No closed form: compare with a long exact-HMC run.)
    """
    rng = np.random.default_rng(seed)
    x = np.linspace(0.0, 1.0, n)
    y = rng.poisson(np.exp(1.0 + np.sin(2 * np.pi * x)))
    squared = (x[:, None] - x[None, :]) ** 2
    jitter = 1e-6 * np.eye(n)
    if not centred:
        return _gp_poisson_noncentred(y, squared, jitter), None

    def logp_and_grad(q):
        log_sigma, log_l, f = q[0], q[1], q[2:]
        shape = np.exp(-0.5 * squared * np.exp(-2 * log_l))
        K = np.exp(2 * log_sigma) * shape + jitter
        try:
            factor = np.linalg.cholesky(K)
        except np.linalg.LinAlgError:
            return -np.inf, np.zeros_like(q)
        alpha = np.linalg.solve(K, f)
        K_inverse = np.linalg.inv(K)
        with np.errstate(over="ignore"):
            rate = np.exp(f)
        logp = (y @ f - rate.sum() - 0.5 * f @ alpha - np.log(np.diag(factor)).sum()
                - 0.5 * log_sigma**2 - 0.5 * ((log_l - np.log(0.3)) / 0.5) ** 2)
        gradient = np.empty_like(q)
        for k, dK in enumerate((2 * (K - jitter),
                                (K - jitter) * squared * np.exp(-2 * log_l))):
            gradient[k] = 0.5 * alpha @ dK @ alpha - 0.5 * np.sum(K_inverse * dK)
        gradient[0] -= log_sigma
        gradient[1] -= (log_l - np.log(0.3)) / 0.25
        gradient[2:] = y - rate - alpha
        return logp, gradient
    return Target(None, logp_and_grad=logp_and_grad, dim=n + 2), None


def _gp_poisson_noncentred(y, squared, jitter):
    """The target of ``gp_poisson(centred=False)``."""
    n = len(y)
    lower = np.tril(np.ones((n, n)), -1) + 0.5 * np.eye(n)  # (the derivative's Phi)

    def logp_and_grad(q):
        log_sigma, log_l, z = q[0], q[1], q[2:]
        sigma = np.exp(log_sigma)
        shape = np.exp(-0.5 * squared * np.exp(-2 * log_l)) + jitter
        L = np.linalg.cholesky(shape)
        f = sigma * (L @ z)
        with np.errstate(over="ignore"):
            rate = np.exp(f)
        logp = (y @ f - rate.sum() - 0.5 * z @ z - 0.5 * log_sigma ** 2
                - 0.5 * ((log_l - np.log(0.3)) / 0.5) ** 2)
        residual = y - rate
        # d L = L Phi(L^-1 dS L^-T) (Phi: the lower triangle, half the diagonal)
        dS = (shape - jitter) * squared * np.exp(-2 * log_l)
        inner = np.linalg.solve(L, np.linalg.solve(L, dS).T)
        dL = L @ (inner * lower)
        gradient = np.empty_like(q)
        gradient[0] = residual @ f - log_sigma
        gradient[1] = sigma * residual @ (dL @ z) - (log_l - np.log(0.3)) / 0.25
        gradient[2:] = sigma * (L.T @ residual) - z
        return logp, gradient
    return Target(None, logp_and_grad=logp_and_grad, dim=n + 2)


def hard_posteriors():
    """Name -> (target, reference) of the three posteriors above, at their defaults."""
    return {"correlated regression": correlated_regression(), "Neal's funnel": neals_funnel(),
            "GP Poisson": gp_poisson()}


def eight_schools(centred=False, y=None):
    """Eight schools (Rubin 1981; Gelman et al., *Bayesian Data Analysis*, section 5.5): the
    effects y_j of coaching in eight schools, observed with standard errors sigma_j,

        y_j ~ N(theta_j, sigma_j^2),  theta_j ~ N(mu, tau^2),
        mu ~ N(0, 5^2),  tau ~ half-Cauchy(0, 5),

    with y = (28, 8, -3, 7, -1, 1, 18, 12) and sigma = (15, 10, 16, 11, 9, 11, 10, 18). The
    parameters are (mu, log tau, eta_1..eta_8) with theta_j = mu + tau eta_j and
    eta_j ~ N(0, 1) (non-centred, the default), or (mu, log tau, theta_1..theta_8)
    (centred: a funnel between log tau and the theta_j). tau is sampled as log tau, the
    Jacobian (+ log tau) included.

    Parameters
    ----------
    centred : bool
        The centred parametrisation instead of the non-centred one.
    y : array_like of shape (8,), optional
        Other effects with the same standard errors (simulated data: ``rnshmc.models.
        calibration``); default the schools' own.

    Returns
    -------
    target : rnshmc.Target
        dim 10; the log density is normalised (every constant of the densities above kept),
        and is -inf where tau = exp(log tau) overflows.
    reference : None
        (No closed form: compare with a long exact-HMC run of the non-centred form.)
    """
    y = (np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0]) if y is None
         else np.asarray(y, dtype=np.float64))
    sigma = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])
    if y.shape != sigma.shape or not np.all(np.isfinite(y)):
        raise ValueError(f"y must hold 8 finite effects, got {y!r}")
    mu_sd, tau_scale = 5.0, 5.0
    half_log_2pi = 0.5 * np.log(2 * np.pi)
    # the normal densities' and the half-Cauchy's constants
    constant = (-np.log(mu_sd) - half_log_2pi + np.log(2 / (np.pi * tau_scale))
                - y.size * half_log_2pi - np.log(sigma).sum() - y.size * half_log_2pi)

    def logp_and_grad(q):
        mu, log_tau, z = q[0], q[1], q[2:]
        with np.errstate(over="ignore", invalid="ignore"):
            tau = np.exp(log_tau)
            ratio = (tau / tau_scale) ** 2
            gradient = np.empty_like(q)
            # mu's prior; tau's half-Cauchy prior and the Jacobian of log tau
            logp = -0.5 * (mu / mu_sd) ** 2 - np.log1p(ratio) + log_tau
            gradient[0] = -mu / mu_sd**2
            gradient[1] = 1.0 - 2 * ratio / (1 + ratio)
            if centred:  # theta_j ~ N(mu, tau^2)
                theta = z
                r = (theta - mu) / tau
                logp += -0.5 * r @ r - y.size * log_tau
                gradient[0] += r.sum() / tau
                gradient[1] += r @ r - y.size
                gradient[2:] = -r / tau
            else:  # eta_j ~ N(0, 1)
                theta = mu + tau * z
                logp += -0.5 * z @ z
                gradient[2:] = -z
            residual = (y - theta) / sigma**2  # the likelihood's gradient in theta
            logp += -0.5 * np.sum((y - theta) ** 2 / sigma**2)
            if centred:
                gradient[2:] += residual
            else:
                gradient[0] += residual.sum()
                gradient[1] += tau * (residual @ z)
                gradient[2:] += tau * residual
        logp = float(logp + constant)
        if not np.isfinite(logp) or not np.all(np.isfinite(gradient)):
            return -np.inf, np.zeros_like(q)
        return logp, gradient
    return Target(None, logp_and_grad=logp_and_grad, dim=y.size + 2), None
