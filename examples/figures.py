"""Figures 1-6 of the RNS-HMC paper (Zhang, Shahbaba and Zhao 2017) reproduced with rnshmc.

1. Fits of y = x^2 / 2 (the standard normal's potential) from N = 10, 20, 40 nested
   standard-normal points (the first 10, 20, 40 of one draw): an additive random network and
   an RBF network of 5 hidden units (softplus, ``RandomNetworkSurrogate``), the full GP and
   FITC with 5 inducing points (``GaussianProcessSurrogate``, zero prior mean, raw inputs,
   hyperparameters by marginal likelihood); the random networks and FITC averaged over 100
   fits (new random units or inducing points each; the full GP is deterministic). Numbers:
   each method's RMS error against the truth on [-3, 3] and its RMS misfit of the points.
2. The banana-shaped density (Girolami and Calderhead 2011): y_i = theta1 + theta2^2 + eps_i,
   eps_i ~ N(0, 4), 100 points generated with theta1 + theta2^2 = 1, prior N(0, I), written as
   an ``rnshmc.Target``. HMC and RNS-HMC (the papers' surrogate and algorithm: 30 additive
   units fitted to the values at the exploration's states) at eps = 0.07, L = 20 (the paper
   gives neither; these give HMC its acceptance 0.97). Panels: the forces -grad U (red) and
   -grad z (blue) over the banana; trajectories of the exact and the surrogate flow from one
   point with the same momenta (a plain leapfrog here). Numbers: acceptance of HMC and
   RNS-HMC (the paper: 0.97 and 0.88), the surrogate forces' error.
3. The 32-d narrow Gaussian (covariance ``rnshmc-original/Sigma.mat`` of the papers' data,
   eigenvalue 1 along (1, ..., 1) and 0.01 across; without the file built from that
   description in a random basis): full GP, FITC (1000 inducing points), additive and RBF
   networks (1000 units, the papers' surrogate) as RNS-HMC's surrogate, trained on N = 500,
   1000, 2000, 4000, 8000 exploration states (after 500 more), at the step size where exact
   HMC accepts about 0.7, L = 10 steps, 2000 draws; medians and 10%-90% bands over 10 runs of
   the fit seconds (the GPs' marginal-likelihood search included), the acceptance and the
   mean ESS per second of sampling. The GPs are rnshmc's defaults (whitened inputs, one
   lengthscale per coordinate), the networks the papers' (raw inputs, values only).
4. Acceptance of RNS-HMC's surrogate flow on simulated logistic regressions
   (``rnshmc.datasets.simulated_logistic``, 10000 rows) against the hidden units s = 125 ...
   2000 and the dimension d = 8 ... 64, at the step size where HMC accepts about 0.7, the
   papers' RNS-HMC (raw inputs, values only, 4000 training states of a 5000-iteration
   exploration, L = 6 jittered): a heat map and the slices d = 32 and s = 2000; 10 runs.
5. The same against s and the training states N = 200 ... 3200 at d = 32 (after 500
   exploration iterations): a heat map and the slices s = 1000 and N = 1600.
6. One- and two-dimensional posterior marginals of beta_1, beta_11, beta_21, beta_31, beta_41
   (indices 0, 10, 20, 30, 40) of the papers' simulated logistic regression (N = 100000,
   d = 50), HMC against RNS-HMC with the papers' settings and protocol (5000 warm-up
   iterations, 5000 draws, one chain). Numbers: each marginal's mean and sd under both and
   the difference of the means in Monte Carlo standard errors.

Where this departs from the paper: Figs 4-5 use 10000 rows, not the 100000 of sec. 5.1
(their 500 runs would take hours; the posterior is about three times wider, which the
papers' raw-input units see differently, so the acceptance at a given s need not match the
paper's); the grids of Figs 4-5, the step size, L and s of Fig. 2, L of Fig. 3 and the
chains' lengths of Figs 2-5 are our choice (the paper gives none). All runs use one
BLAS/OpenMP thread: the surrogates' small matrix-vector products gain nothing from more,
and on a busy machine threaded BLAS slowed surrogate sampling by up to 400 times.

``--quick`` (under a minute): Fig. 1 with 10 fits per method; Fig. 2 with 1000 exploration
iterations and 2000 draws (full: 2000 and 5000); Fig. 3 at N = 200 and 500 with 100
inducing points or units, 2 runs of 300 draws; Figs 4-5 on 2x2 grids (d = 4, 8; s = 50,
200; N = 100, 400 at d = 8) with 2000 rows, 2 runs of 200 draws; Fig. 6 with d = 21
(beta_1, beta_11, beta_21), 5000 rows, 200 units, 1000 + 1000 iterations. The full run took
35 minutes on one core (Fig. 3 6 minutes, Fig. 4 18, Fig. 5 7, Fig. 6 5; before the GPs'
searches counted distinct points only, so their Fig. 3 seconds differ now). PNGs
(``figure1.png`` ...) go to ``--out`` when matplotlib is installed; the numbers are printed
either way:

    python examples/figures.py [--quick] [--figures 1 2 3 4 5 6] [--out DIR] [--seed 0]
"""
import argparse
import time
import warnings
from pathlib import Path

import numpy as np
import scipy.io

import rnshmc
from rnshmc import papers
from rnshmc.diagnostics import mcse_mean
from rnshmc.parallel import blas_limits

FIGURES = (1, 2, 3, 4, 5, 6)
TARGET_ACCEPT = 0.7  # HMC's acceptance at the step size of Figs 3-6
PAPERS_RIDGE = papers.SETTINGS["simulated"]["ridge"]
PAPERS_L = papers.SETTINGS["simulated"]["n_steps"]  # leapfrog steps of Figs 4-6 (jittered)


# ----------------------------------------------------------------------------------------------
# helpers

def quiet(function, *args, **kwargs):
    """``function(*args, **kwargs)`` without warnings: short chains and poor surrogates are
    what these figures measure."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return function(*args, **kwargs)


def seed(args, *keys):
    """A seed of its own for each figure, run and grid cell (their results do not depend on
    which other figures run)."""
    return np.random.SeedSequence([args.seed, *keys])


def pyplot():
    """matplotlib's pyplot (Agg backend), or None without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no figure (pip install matplotlib)")
        return None
    return plt


def save(plt, fig, out, name):
    path = Path(out) / name
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"wrote {path}")
    return path


def bands(values):
    """Median and 10% and 90% quantiles over runs (axis 0), ignoring failed runs (NaN)."""
    values = np.asarray(values, dtype=float)
    if np.all(np.isnan(values)):
        return np.full((3,) + values.shape[1:], np.nan)
    return np.nanpercentile(values, [50, 10, 90], axis=0)


def hmc_step_size(model, n_steps, jitter, init, rng, draws):
    """The step size at which HMC (identity mass matrix) accepts about ``TARGET_ACCEPT``,
    and HMC's acceptance there.

    Stan's dual averaging to 0.7 left the realised acceptance off by up to 0.15 here (its
    final step size is an average), so a few multiplicative corrections follow, each measured
    over ``draws`` iterations at a fixed step size (1 - acceptance grows about as eps^2 in
    many dimensions; not monotonically with a fixed L on a narrow Gaussian, hence the best
    one measured is kept). Returns (eps, acceptance).
    """
    rngs = rng.spawn(5)
    warm = rnshmc.HMC(model, n_steps=n_steps, jitter=jitter, adapt_mass_matrix=False,
                      target_accept=TARGET_ACCEPT)
    eps = float(quiet(warm.sample, 10, tune=max(draws, 300), chains=1, rng=rngs[0], init=init,
                      progress=False).step_size[0])
    best = None
    for child in rngs[1:]:
        fixed = rnshmc.HMC(model, step_size=eps, n_steps=n_steps, jitter=jitter,
                           adapt_mass_matrix=False)
        accept = float(quiet(fixed.sample, draws, tune=draws // 4, chains=1, rng=child,
                             init=init, progress=False).acceptance_rate[0])
        if best is None or abs(accept - TARGET_ACCEPT) < abs(best[1] - TARGET_ACCEPT):
            best = eps, accept
        if abs(accept - TARGET_ACCEPT) < 0.05:
            break
        eps *= ((1 - TARGET_ACCEPT) / min(max(1 - accept, 0.05), 0.95)) ** 0.5
    return best


def papers_rns_hmc(model, step_size, n_steps, n_hidden, **options):
    """RNS-HMC with the papers' surrogate (raw inputs, values only, ridge 1e-6) and algorithm
    (trained on the exploration's states, the exploration's L on the surrogate, no trust
    watch), exploring with exact HMC at the same step size and steps."""
    settings = dict(step_size=step_size, n_steps=n_steps, n_hidden=n_hidden, ridge=PAPERS_RIDGE)
    return rnshmc.RNSHMC(model, **papers.rns_options(settings, papers_surrogate=True,
                                                     papers_algorithm=True,
                                                     share_surrogate=False, **options))


def logistic_model(n, dim, rng):
    """The papers' simulated logistic regression (sec. 5.1) with ``n`` rows and ``dim``
    coefficients, prior N(0, 100 I)."""
    X, y, _ = rnshmc.datasets.simulated_logistic(n, dim, rng=rng)
    return rnshmc.models.LogisticRegression(X, y, prior_variance=papers.PRIOR_VARIANCE)


def slice_at(values, wanted):
    """``wanted`` if the grid has it, else the grid's largest value (--quick's grids)."""
    return wanted if wanted in values else values[-1]


# ----------------------------------------------------------------------------------------------
# Fig. 1: fitting x^2 / 2

FIG1_N = (10, 20, 40)


def fig1_methods():
    """{name: (constructor of an unfitted surrogate from a seed, random?)}: five units or
    inducing points, the zero-mean GPs of the paper, on raw inputs."""
    return {
        "additive RN": (lambda rng: rnshmc.RandomNetworkSurrogate(
            1, n_hidden=5, nodes="additive", activation="softplus", rng=rng), True),
        "RBF RN": (lambda rng: rnshmc.RandomNetworkSurrogate(1, n_hidden=5, nodes="rbf",
                                                              rng=rng), True),
        "full GP": (lambda rng: rnshmc.GaussianProcessSurrogate(1, mean="zero", whiten=False,
                                                                 rng=rng), False),
        "FITC": (lambda rng: rnshmc.GaussianProcessSurrogate(
            1, sparse=True, n_inducing=5, mean="zero", whiten=False, rng=rng), True),
    }


def figure1(args):
    """Mean fits of y = x^2 / 2 and their errors, for N = 10, 20, 40 nested points."""
    x = np.random.default_rng(seed(args, 1)).standard_normal(max(FIG1_N))
    grid = np.linspace(-4.0, 4.0, 161)
    inner = np.abs(grid) <= 3.0
    truth = grid ** 2 / 2
    numbers = dict(x=x, grid=grid, N=list(FIG1_N), fits={}, rmse={}, residual={},
                   runs=args.fig1_runs)
    for name, (make, random) in fig1_methods().items():
        # the full GP has nothing random with N <= max_optimize_points: one fit is its mean
        runs = args.fig1_runs if random else 1
        fits, rmse, residual = [], [], []
        for N in FIG1_N:
            Q, t = x[:N, None], x[:N] ** 2 / 2
            curves, misfits = [], []
            for run in range(runs):
                surrogate = quiet(make(seed(args, 1, N, run)).fit, Q, t)
                curves.append(surrogate.predict(grid[:, None]))
                misfits.append(surrogate.fit_residual_)
            mean = np.mean(curves, axis=0)
            fits.append(mean)
            rmse.append(float(np.sqrt(np.mean((mean - truth)[inner] ** 2))))
            residual.append(float(np.mean(misfits)))
        numbers["fits"][name], numbers["rmse"][name] = fits, rmse
        numbers["residual"][name] = residual

    print(f"\nFig. 1: fits of x^2/2 (RN and FITC: mean of {args.fig1_runs} fits)")
    print(f"  {'method':12s} " + "  ".join(f"RMSE N={N:<3d} misfit N={N:<3d}" for N in FIG1_N))
    for name in numbers["rmse"]:
        print(f"  {name:12s} " + "  ".join(
            f"{e:10.3f} {r:13.2g}" for e, r in zip(numbers["rmse"][name],
                                                   numbers["residual"][name])))
    print("  (RMSE of the mean fit against x^2/2 on [-3, 3]; misfit: RMS at the N points)")
    numbers["png"] = plot_figure1(numbers, args.out)
    return numbers


def plot_figure1(numbers, out):
    plt = pyplot()
    if plt is None:
        return None
    grid, x = numbers["grid"], numbers["x"]
    fig, axes = plt.subplots(1, len(numbers["N"]), figsize=(12, 3.6), sharey=True)
    for i, (ax, N) in enumerate(zip(axes, numbers["N"])):
        ax.plot(grid, grid ** 2 / 2, "k", lw=2, label="truth x^2/2")
        for name, fits in numbers["fits"].items():
            ax.plot(grid, fits[i], lw=1.2, label=f"{name} ({numbers['rmse'][name][i]:.2f})")
        ax.plot(x[:N], x[:N] ** 2 / 2, "ko", ms=4, mfc="none", label="observations")
        ax.set_ylim(-1, 9)
        ax.set_title(f"N = {N}")
        ax.set_xlabel("x")
        ax.legend(fontsize=7, title="RMSE on [-3, 3]", title_fontsize=7)
    axes[0].set_ylabel("y")
    return save(plt, fig, out, "figure1.png")


# ----------------------------------------------------------------------------------------------
# Fig. 2: the banana-shaped density

BANANA = dict(n=100, noise_sd=2.0, step_size=0.07, n_steps=20, n_hidden=30)


def banana(rng):
    """The banana-shaped posterior as an ``rnshmc.Target``, with its potential and gradient.

    y_i = theta1 + theta2^2 + eps_i (eps_i ~ N(0, 4)), 100 points made with
    theta1 + theta2^2 = 1, prior N(0, I): U = sum_i (y_i - theta1 - theta2^2)^2 / 8 +
    |theta|^2 / 2, written with the sums of y and y^2 so that an evaluation is O(1).
    """
    y = 1.0 + BANANA["noise_sd"] * np.random.default_rng(rng).standard_normal(BANANA["n"])
    n, s1, s2, var = y.size, y.sum(), (y ** 2).sum(), BANANA["noise_sd"] ** 2

    def potential(q):
        m = q[0] + q[1] ** 2
        return (s2 - 2 * m * s1 + n * m * m) / (2 * var) + 0.5 * (q[0] ** 2 + q[1] ** 2)

    def gradient(q):
        r = (n * (q[0] + q[1] ** 2) - s1) / var  # dU/dm
        return np.array([r + q[0], 2 * q[1] * r + q[1]])

    target = rnshmc.Target(lambda q: -potential(q), grad_logp=lambda q: -gradient(q), dim=2)
    return target, potential, gradient


def leapfrog(gradient, q, p, step_size, n_steps):
    """The positions of a leapfrog trajectory (identity mass) and its final momentum."""
    path = [q]
    p = p - 0.5 * step_size * gradient(q)
    for step in range(n_steps):
        q = q + step_size * p
        g = gradient(q)
        p = p - (step_size if step < n_steps - 1 else 0.5 * step_size) * g
        path.append(q)
    return np.array(path), p


def figure2(args):
    """HMC against RNS-HMC on the banana: acceptance, force fields, trajectories."""
    target, potential, gradient = banana(seed(args, 2))
    eps, L, s = BANANA["step_size"], BANANA["n_steps"], BANANA["n_hidden"]
    init = np.array([1.0, 0.0])  # on the ridge theta1 + theta2^2 = 1
    hmc = rnshmc.HMC(target, step_size=eps, n_steps=L, jitter=False, adapt_mass_matrix=False)
    rns = papers_rns_hmc(target, eps, L, s, jitter=False)
    common = dict(chains=1, init=init, progress=False)
    # (HMC's warm-up is a burn-in at the given settings: it needs no exploration's length)
    hmc_result = quiet(hmc.sample, args.fig2_draws, tune=args.fig2_tune // 2,
                       rng=seed(args, 2, 1), **common)
    rns_result = quiet(rns.sample, args.fig2_draws, tune=args.fig2_tune, rng=seed(args, 2, 2),
                       **common)
    surrogate = rnshmc.RNSHMC.fitted_surrogates(rns_result)[0]

    # the force fields where the posterior is (potential within 8 of its lowest on the grid)
    t1, t2 = np.meshgrid(np.linspace(-2.5, 1.7, 15), np.linspace(-2.0, 2.0, 15))
    points = np.column_stack([t1.ravel(), t2.ravel()])
    U = np.array([potential(q) for q in points])
    points = points[U < U.min() + 8]
    true_force = -np.array([gradient(q) for q in points])
    surrogate_force = -np.array([surrogate.gradient(q) for q in points])
    force_error = float(np.median(np.linalg.norm(surrogate_force - true_force, axis=1)
                                  / np.linalg.norm(true_force, axis=1)))

    # trajectories from one point with the same momenta on the two flows
    start = np.array([-0.4, -1.1])
    momenta = np.random.default_rng(seed(args, 2, 3)).standard_normal((5, 2))
    trajectories = {}
    for name, flow in (("HMC", gradient), ("RNS-HMC", surrogate.gradient)):
        paths, accept = [], []
        for p in momenta:
            path, p_end = leapfrog(flow, start, p, eps, L)
            energy_error = potential(path[-1]) + 0.5 * p_end @ p_end - potential(start) \
                - 0.5 * p @ p  # the Metropolis test uses the true energy on both flows
            paths.append(path)
            accept.append(float(min(1.0, np.exp(-energy_error))))
        trajectories[name] = dict(paths=paths, accept_prob=accept)

    numbers = dict(step_size=eps, n_steps=L, n_hidden=s,
                   hmc_acceptance=float(hmc_result.acceptance_rate[0]),
                   rns_acceptance=float(rns_result.acceptance_rate[0]),
                   n_train=int(rns_result.n_train[0]),
                   fit_residual=float(rns_result.fit_residual[0]),
                   force_error=force_error, points=points, true_force=true_force,
                   surrogate_force=surrogate_force, start=start, trajectories=trajectories)
    print(f"\nFig. 2: banana-shaped density, eps={eps}, L={L} (no jitter), {args.fig2_draws} "
          f"draws; RNS-HMC: {s} additive units fitted to {numbers['n_train']} exploration "
          f"states (RMS misfit {numbers['fit_residual']:.3g})")
    print(f"  acceptance: HMC {numbers['hmc_acceptance']:.3f}, RNS-HMC "
          f"{numbers['rns_acceptance']:.3f}  (paper: 0.97 and 0.88)")
    print(f"  surrogate force error |grad z - grad U| / |grad U| on the banana: median "
          f"{force_error:.3f}")
    for name, t in trajectories.items():
        print(f"  the drawn {name} trajectories' acceptance probabilities: "
              + ", ".join(f"{a:.2f}" for a in t["accept_prob"]))
    numbers["png"] = plot_figure2(numbers, potential, args.out)
    return numbers


def plot_figure2(numbers, potential, out):
    plt = pyplot()
    if plt is None:
        return None
    t1, t2 = np.meshgrid(np.linspace(-2.5, 1.7, 120), np.linspace(-2.0, 2.0, 120))
    U = np.array([potential(q) for q in np.column_stack([t1.ravel(), t2.ravel()])])
    U = U.reshape(t1.shape) - U.min()
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2), sharex=True, sharey=True)
    points = numbers["points"]
    scale = 2.5 * np.percentile(np.linalg.norm(numbers["true_force"], axis=1), 90)
    ax = axes[0]
    for force, color, label in ((numbers["true_force"], "red", "-grad U (HMC)"),
                                (numbers["surrogate_force"], "blue", "-grad z (surrogate)")):
        ax.quiver(points[:, 0], points[:, 1], force[:, 0], force[:, 1], color=color,
                  angles="xy", scale_units="xy", scale=scale, width=0.004, label=label)
    ax.set_title("force fields")
    ax.legend(fontsize=8, loc="lower left")
    for ax, (name, t) in zip(axes[1:], numbers["trajectories"].items()):
        for k, path in enumerate(t["paths"]):
            ax.plot(path[:, 0], path[:, 1], "-", color="0.3", lw=1,
                    label="trajectories" if k == 0 else None)
            ax.plot(*path[-1], "o", color="blue", ms=5, label="proposals" if k == 0 else None)
        ax.plot(*numbers["start"], "s", color="red", ms=7, label="start")
        key = "hmc_acceptance" if name == "HMC" else "rns_acceptance"
        ax.set_title(f"{name} (acceptance {numbers[key]:.2f})")
        ax.legend(fontsize=8, loc="lower left")
    for ax in axes:
        ax.contour(t1, t2, U, levels=[0.5, 2, 4.5, 8, 12], colors="0.75", linewidths=0.7)
        ax.set_xlabel("theta1")
    axes[0].set_ylabel("theta2")
    return save(plt, fig, out, "figure2.png")


# ----------------------------------------------------------------------------------------------
# Fig. 3: the 32-d narrow Gaussian

FIG3_L = 10
FIG3_WARMUP = 500  # exploration iterations before the N training states


def narrow_gaussian(rng):
    """The 32-d Gaussian of Fig. 3 and where its covariance came from."""
    path = papers.shared_data_dir() / "rnshmc-original" / "Sigma.mat"
    if path.is_file():
        covariance, source = scipy.io.loadmat(path)["Sigma"], f"{path.name} of the papers' data"
    else:
        # the paper's description: eigenvalue 1 along (1, ..., 1), 0.01 across, in a random
        # orthonormal basis
        first = np.column_stack([np.ones(32),
                                 np.random.default_rng(rng).standard_normal((32, 31))])
        basis, _ = np.linalg.qr(first)
        covariance = basis @ np.diag([1.0] + [0.01] * 31) @ basis.T
        source = "built from the paper's description: no Sigma.mat in the papers' data"
    return rnshmc.models.Gaussian(np.zeros(32), covariance=covariance), source


def fig3_surrogates(size):
    """{name: the sampler's ``surrogate=`` settings}: rnshmc's GPs (whitened inputs, ARD
    lengthscales by marginal likelihood on the distinct training states) and the papers'
    networks (raw inputs, values only)."""
    return {
        "full GP": dict(kind="gaussian_process"),
        "FITC": dict(kind="gaussian_process", sparse=True, n_inducing=size),
        "additive RN": dict(papers.PAPERS_SURROGATE, kind="random_network", n_hidden=size,
                            nodes="additive"),
        "RBF RN": dict(papers.PAPERS_SURROGATE, kind="random_network", n_hidden=size,
                       nodes="rbf"),
    }


def surrogate_run(model, surrogate, eps, n_train, draws, rng):
    """(fit seconds, acceptance, mean ESS per second of sampling) of one RNS-HMC run with
    the papers' algorithm: N = ``n_train`` exploration states train ``surrogate``."""
    options = papers.merged(dict(step_size=eps, jitter=False, share_surrogate=False,
                                 explore=dict(n_steps=FIG3_L)), **papers.PAPERS_ALGORITHM)
    options = papers.merged(options, surrogate=dict(surrogate, n_train=n_train))
    sampler = rnshmc.RNSHMC(model, **options)
    result = quiet(sampler.sample, draws, tune=FIG3_WARMUP + n_train, chains=1, rng=rng,
                   init=np.zeros(model.dim), progress=False)
    # a chain that never moved has no effective draws (its ESS is NaN)
    ess = np.nan_to_num(result.ess(), nan=0.0)
    return (result.timings["train"], float(result.acceptance_rate[0]),
            float(ess.mean() / result.timings["sampling"]))


def figure3(args):
    """Fit time, acceptance and mean ESS/s of four surrogates against N."""
    model, source = narrow_gaussian(seed(args, 3))
    init = np.zeros(model.dim)
    eps, hmc_accept = hmc_step_size(model, FIG3_L, False, init, seed(args, 3, 0), 1000)
    keys = ("fit_seconds", "acceptance", "ess_per_second")
    numbers = dict(source=source, step_size=eps, n_steps=FIG3_L, hmc_acceptance=hmc_accept,
                   N=list(args.fig3_N), runs=args.fig3_runs, size=args.fig3_size, methods={})
    for m, (name, surrogate) in enumerate(fig3_surrogates(args.fig3_size).items()):
        runs = np.full((args.fig3_runs, len(args.fig3_N), 3), np.nan)
        for j, N in enumerate(args.fig3_N):
            for run in range(args.fig3_runs):
                try:
                    runs[run, j] = surrogate_run(model, surrogate, eps, N, args.fig3_draws,
                                                 seed(args, 3, m, N, run))
                except (ValueError, RuntimeError) as error:  # a failed fit: reported, NaN
                    print(f"  Fig. 3 {name} N={N} run {run} failed: {error}")
        numbers["methods"][name] = {key: bands(runs[..., k]) for k, key in enumerate(keys)}
        numbers["methods"][name]["runs"] = runs

    print(f"\nFig. 3: 32-d narrow Gaussian ({source}); eps={eps:.4f} (exact HMC accepts "
          f"{hmc_accept:.2f}), L={FIG3_L}, {args.fig3_draws} draws; {args.fig3_size} inducing "
          f"points / hidden units; median [10%, 90%] over {args.fig3_runs} runs")
    print(f"  {'method':12s} {'N':>5s} {'fit s':>26s} {'acceptance':>20s} "
          f"{'mean ESS / s':>26s}")
    for name, result in numbers["methods"].items():
        for j, N in enumerate(args.fig3_N):
            cells = [f"{b[0, j]:.3g} [{b[1, j]:.3g}, {b[2, j]:.3g}]"
                     for b in (result[k] for k in keys)]
            print(f"  {name:12s} {N:5d} {cells[0]:>26s} {cells[1]:>20s} {cells[2]:>26s}")
    numbers["png"] = plot_figure3(numbers, args.out)
    return numbers


def plot_figure3(numbers, out):
    plt = pyplot()
    if plt is None:
        return None
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    labels = {"fit_seconds": "fit time (s)", "acceptance": "acceptance",
              "ess_per_second": "mean ESS / s (sampling)"}
    N = numbers["N"]
    for ax, (key, label) in zip(axes, labels.items()):
        for name, result in numbers["methods"].items():
            median, low, high = result[key]
            line, = ax.plot(N, median, "o-", label=name)
            ax.fill_between(N, low, high, color=line.get_color(), alpha=0.2)
        ax.set_xscale("log")
        ax.set_xticks(N, [str(n) for n in N])
        ax.set_xticks([], minor=True)
        ax.set_xlabel("training points N")
        ax.set_ylabel(label)
        if key == "fit_seconds":
            ax.set_yscale("log")
    axes[1].axhline(numbers["hmc_acceptance"], color="k", ls=":", label="exact HMC")
    axes[1].set_ylim(-0.02, 1.02)
    axes[1].legend(fontsize=8)
    fig.suptitle("32-d narrow Gaussian: medians and 10%-90% bands", fontsize=10)
    return save(plt, fig, out, "figure3.png")


# ----------------------------------------------------------------------------------------------
# Figs 4 and 5: acceptance against s and d, and against s and N

def acceptance_grid(args, figure, rows, columns, run_cell):
    """Mean acceptance over ``args.grid_runs`` runs for each (row, column) of a grid:
    ``run_cell(row, column, rng)`` gives one run's acceptance."""
    grid = np.full((args.grid_runs, len(rows), len(columns)), np.nan)
    for i, row in enumerate(rows):
        for j, column in enumerate(columns):
            for run in range(args.grid_runs):
                grid[run, i, j] = run_cell(row, column, seed(args, figure, row, column, run))
    return grid.mean(axis=0), grid


def figure4(args):
    """Acceptance of RNS-HMC (papers' settings) against hidden units s and dimension d."""
    d_values, s_values = args.fig4_d, args.grid_s
    tune, n_train = args.grid_tune, args.grid_n_train
    step = {}
    for d in d_values:
        model = logistic_model(args.grid_rows, d, seed(args, 4, d))
        step[d] = (model,) + hmc_step_size(model, PAPERS_L, True, np.zeros(d),
                                           seed(args, 4, d, 0), args.grid_draws * 2)

    def cell(d, s, rng):
        model, eps, _ = step[d]
        sampler = papers_rns_hmc(model, eps, PAPERS_L, s, surrogate=dict(n_train=n_train))
        result = quiet(sampler.sample, args.grid_draws, tune=tune, chains=1, rng=rng,
                       init=np.zeros(d), progress=False)
        return float(result.acceptance_rate[0])

    mean, runs = acceptance_grid(args, 4, d_values, s_values, cell)
    numbers = dict(d=list(d_values), s=list(s_values), acceptance=mean, runs=runs,
                   step_size={d: step[d][1] for d in d_values},
                   hmc_acceptance={d: step[d][2] for d in d_values},
                   d_slice=slice_at(d_values, 32), s_slice=slice_at(s_values, 2000))
    print(f"\nFig. 4: RNS-HMC acceptance against s and d (simulated logistic regression, "
          f"{args.grid_rows} rows; {n_train} training states of {tune} exploration "
          f"iterations; L={PAPERS_L} jittered; mean of {args.grid_runs} runs of "
          f"{args.grid_draws} draws)")
    print_grid("d", d_values, "s", s_values, mean, numbers["step_size"],
               numbers["hmc_acceptance"])
    numbers["png"] = plot_grid(numbers, "d", "s", numbers["d_slice"], numbers["s_slice"],
                               "dimension d", args.out, "figure4.png")
    return numbers


def figure5(args):
    """Acceptance of RNS-HMC (papers' settings) against hidden units s and training
    states N, at one dimension."""
    d, N_values, s_values = args.fig5_d, args.fig5_N, args.grid_s
    model = logistic_model(args.grid_rows, d, seed(args, 5, d))
    eps, hmc_accept = hmc_step_size(model, PAPERS_L, True, np.zeros(d), seed(args, 5, 0),
                                    args.grid_draws * 2)

    def cell(N, s, rng):
        sampler = papers_rns_hmc(model, eps, PAPERS_L, s, surrogate=dict(n_train=N))
        result = quiet(sampler.sample, args.grid_draws, tune=args.fig5_warmup + N, chains=1,
                       rng=rng, init=np.zeros(d), progress=False)
        return float(result.acceptance_rate[0])

    mean, runs = acceptance_grid(args, 5, N_values, s_values, cell)
    numbers = dict(d=d, N=list(N_values), s=list(s_values), acceptance=mean, runs=runs,
                   step_size={N: eps for N in N_values},
                   hmc_acceptance={N: hmc_accept for N in N_values},
                   N_slice=slice_at(N_values, 1600), s_slice=slice_at(s_values, 1000))
    print(f"\nFig. 5: RNS-HMC acceptance against s and N at d={d} (simulated logistic "
          f"regression, {args.grid_rows} rows; N training states after "
          f"{args.fig5_warmup} exploration iterations; L={PAPERS_L} jittered; mean of "
          f"{args.grid_runs} runs of {args.grid_draws} draws)")
    print_grid("N", N_values, "s", s_values, mean, numbers["step_size"],
               numbers["hmc_acceptance"])
    numbers["png"] = plot_grid(numbers, "N", "s", numbers["N_slice"], numbers["s_slice"],
                               "training points N", args.out, "figure5.png")
    return numbers


def print_grid(row_name, rows, column_name, columns, mean, step_size, hmc_acceptance):
    print(f"  {row_name:>5s} {'eps':>7s} {'HMC':>5s} | " + " ".join(
        f"{column_name}={c:<5d}" for c in columns))
    for i, row in enumerate(rows):
        print(f"  {row:5d} {step_size[row]:7.4f} {hmc_acceptance[row]:5.2f} | " + " ".join(
            f"{a:7.2f}" for a in mean[i]))
    print("  (eps: the step size at which exact HMC accepts about 0.7, its acceptance 'HMC')")


def plot_grid(numbers, row_key, column_key, row_slice, column_slice, row_label, out, name):
    """A heat map of the acceptance over the grid, the slice along s at ``row_slice`` and
    the slice along the rows at ``column_slice``."""
    plt = pyplot()
    if plt is None:
        return None
    rows, columns, mean = numbers[row_key], numbers[column_key], numbers["acceptance"]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    ax = axes[0]
    image = ax.imshow(mean, origin="lower", aspect="auto", vmin=0, vmax=1, cmap="viridis")
    for (i, j), value in np.ndenumerate(mean):
        ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=7,
                color="white" if value < 0.5 else "black")
    ax.set_xticks(range(len(columns)), [str(c) for c in columns])
    ax.set_yticks(range(len(rows)), [str(r) for r in rows])
    ax.set_xlabel("hidden units s")
    ax.set_ylabel(row_label)
    fig.colorbar(image, ax=ax, label="acceptance")
    i, j = rows.index(row_slice), columns.index(column_slice)
    runs = numbers["runs"]
    for ax, x, values, spread, xlabel, title, hmc in (
            (axes[1], columns, mean[i], runs[:, i, :], "hidden units s",
             f"{row_key} = {row_slice}", [numbers["hmc_acceptance"][row_slice]] * len(columns)),
            (axes[2], rows, mean[:, j], runs[:, :, j], row_label, f"s = {column_slice}",
             [numbers["hmc_acceptance"][r] for r in rows])):
        ax.plot(x, values, "o-", label="RNS-HMC (mean)")
        ax.fill_between(x, spread.min(axis=0), spread.max(axis=0), alpha=0.2,
                        label="RNS-HMC (range over runs)")
        ax.plot(x, hmc, "k:", label="exact HMC")
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("acceptance")
        ax.set_title(title)
        ax.legend(fontsize=8)
    return save(plt, fig, out, name)


# ----------------------------------------------------------------------------------------------
# Fig. 6: posterior marginals, HMC against RNS-HMC

FIG6_INDICES = (0, 10, 20, 30, 40)


def fig6_samplers(args):
    """(model, {name: sampler}, description): the papers' simulated data and settings, or
    --quick's smaller problem with the same kind of settings."""
    if not args.quick:
        model = papers.load_logistic("simulated", args.seed)
        samplers = {"HMC": papers.hmc(model, "simulated"),
                    "RNS-HMC": papers.rns_hmc(model, "simulated", variant="papers")}
        return model, samplers, (f"N={model.X.shape[0]}, d={model.dim}, "
                                 f"{papers.settings_summary('simulated').split(';')[0]}, s="
                                 f"{papers.SETTINGS['simulated']['n_hidden']}")
    model = logistic_model(args.fig6_rows, args.fig6_d, seed(args, 6))
    eps, _ = hmc_step_size(model, PAPERS_L, True, np.zeros(model.dim), seed(args, 6, 0), 400)
    samplers = {"HMC": rnshmc.HMC(model, step_size=eps, n_steps=PAPERS_L),
                "RNS-HMC": papers_rns_hmc(model, eps, PAPERS_L, args.fig6_hidden)}
    return model, samplers, (f"N={args.fig6_rows}, d={model.dim}, eps={eps:.3f}, "
                             f"L={PAPERS_L} jittered, s={args.fig6_hidden}")


def figure6(args):
    """Posterior marginals of beta_1, beta_11, ... under HMC and RNS-HMC."""
    model, samplers, description = fig6_samplers(args)
    indices = [i for i in FIG6_INDICES if i < model.dim]
    draws = {}
    acceptance = {}
    for k, (name, sampler) in enumerate(samplers.items()):
        result = quiet(sampler.sample, args.fig6_draws, tune=args.fig6_tune, chains=1,
                       rng=seed(args, 6, k + 1), init=np.zeros(model.dim), progress=False)
        draws[name] = result.samples[:, :, indices]
        acceptance[name] = float(result.acceptance_rate[0])
    stats = {name: dict(mean=x.reshape(-1, len(indices)).mean(axis=0),
                        sd=x.reshape(-1, len(indices)).std(axis=0, ddof=1),
                        mcse=np.atleast_1d(mcse_mean(x)))
             for name, x in draws.items()}
    h, r = stats["HMC"], stats["RNS-HMC"]
    z = (h["mean"] - r["mean"]) / np.sqrt(h["mcse"] ** 2 + r["mcse"] ** 2)
    numbers = dict(indices=indices, acceptance=acceptance, stats=stats, z=z, draws=draws,
                   description=description)
    print(f"\nFig. 6: posterior marginals, simulated logistic regression ({description}); "
          f"{args.fig6_tune} warm-up + {args.fig6_draws} draws, one chain each")
    print("  acceptance: " + ", ".join(f"{n} {a:.3f}" for n, a in acceptance.items()))
    print(f"  {'coef':8s} {'HMC mean':>9s} {'sd':>7s} {'RNS mean':>9s} {'sd':>7s} "
          f"{'diff/MCSE':>9s}")
    for k, i in enumerate(indices):
        print(f"  beta_{i + 1:<3d} {h['mean'][k]:9.4f} {h['sd'][k]:7.4f} {r['mean'][k]:9.4f} "
              f"{r['sd'][k]:7.4f} {z[k]:9.2f}")
    print("  (diff/MCSE: the difference of the means over its Monte Carlo standard error)")
    numbers["png"] = plot_figure6(numbers, args.out)
    return numbers


def plot_figure6(numbers, out):
    plt = pyplot()
    if plt is None:
        return None
    indices, draws = numbers["indices"], numbers["draws"]
    k = len(indices)
    fig, axes = plt.subplots(k, k, figsize=(2.4 * k + 1, 2.4 * k + 0.5), squeeze=False)
    colors = {"HMC": "tab:red", "RNS-HMC": "tab:blue"}
    for a in range(k):
        for b in range(k):
            ax = axes[a, b]
            if b > a:
                ax.axis("off")
                continue
            for name, x in draws.items():
                x = x.reshape(-1, k)
                if a == b:
                    ax.hist(x[:, a], bins=40, density=True, histtype="step",
                            color=colors[name], label=name)
                else:
                    thin = max(1, len(x) // 1000)  # (a thousand points of each sampler)
                    ax.plot(x[::thin, b], x[::thin, a], ".", ms=1.5, alpha=0.4,
                            color=colors[name], label=name)
            ax.tick_params(labelsize=6)
            if a == k - 1:
                ax.set_xlabel(f"beta_{indices[b] + 1}")
            if b == 0:
                ax.set_ylabel(f"beta_{indices[a] + 1}" if a else "density")
    axes[0, 0].legend(fontsize=7)
    fig.suptitle("posterior marginals: HMC (red) and RNS-HMC (blue)", fontsize=10)
    return save(plt, fig, out, "figure6.png")


# ----------------------------------------------------------------------------------------------

def sizes(args):
    """The runs' sizes: the paper's (full) or --quick's."""
    quick = args.quick
    args.fig1_runs = 10 if quick else 100
    args.fig2_draws, args.fig2_tune = (2000, 1000) if quick else (5000, 2000)
    args.fig3_N = (200, 500) if quick else (500, 1000, 2000, 4000, 8000)
    args.fig3_size = 100 if quick else 1000
    args.fig3_runs, args.fig3_draws = (2, 300) if quick else (10, 2000)
    args.grid_rows = 2000 if quick else 10_000
    args.grid_s = (50, 200) if quick else (125, 250, 500, 1000, 2000)
    args.grid_runs, args.grid_draws = (2, 200) if quick else (10, 1000)
    args.fig4_d = (4, 8) if quick else (8, 16, 32, 48, 64)
    args.grid_tune, args.grid_n_train = (500, 400) if quick else (
        papers.PROTOCOL["tune"], papers.PROTOCOL["n_train"])
    args.fig5_d = 8 if quick else 32
    args.fig5_N = (100, 400) if quick else (200, 400, 800, 1600, 3200)
    args.fig5_warmup = 200 if quick else 500
    args.fig6_rows, args.fig6_d, args.fig6_hidden = 5000, 21, 200  # (--quick only)
    args.fig6_draws, args.fig6_tune = (1000, 1000) if quick else (
        papers.PROTOCOL["draws"], papers.PROTOCOL["tune"])
    return args


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="fewer runs, points and draws, smaller problems (< 1 minute)")
    parser.add_argument("--figures", nargs="+", type=int, default=list(FIGURES),
                        choices=FIGURES, help="which figures (default all)")
    parser.add_argument("--out", default=".", help="folder of the PNGs (default .)")
    parser.add_argument("--seed", type=int, default=0)
    args = sizes(parser.parse_args(argv))
    Path(args.out).mkdir(parents=True, exist_ok=True)
    functions = {1: figure1, 2: figure2, 3: figure3, 4: figure4, 5: figure5, 6: figure6}
    numbers = {}
    # one BLAS/OpenMP thread: see the module docstring
    with blas_limits(1):
        for figure in sorted(set(args.figures)):
            start = time.perf_counter()
            numbers[figure] = functions[figure](args)
            print(f"  (Fig. {figure}: {time.perf_counter() - start:.1f} s)")
    return numbers


if __name__ == "__main__":
    main()
