"""Figures 7 and 8 of the RNS-HMC paper: ARNS-HMC's surrogate learning online.

Fig. 7, acceptance against the number of training points. ARNS-HMC starts at the posterior
mode (found by L-BFGS) with a short exact-HMC exploration (``--explore`` iterations, the last
80% of whose states are the first training points; by default 50 on the PDE, d = 20, and 600
on the logistic regressions, d = 50-60, where the papers found about 500 points needed for an
acceptance near 0.1 at d = 32) at the papers' step size and trajectory
length, with the papers' algorithm (fixed L, no trust watch); every evaluated proposal joins
the online fit, and the weights in use at a draw are those fitted to the exploration's states
plus the points (proposals with their exact potentials) added before the last install. The draws are grouped by that number
of training points in log-spaced bins; per bin, the median over ``--chains`` chains of each
chain's mean acceptance probability, with the 5%-95% band over chains. The line: exact HMC's
mean acceptance at the same step size and L.

Fig. 8, relative error of the mean ||qbar(t) - E q|| / ||E q|| against wall time from the
first iteration: HMC with a Stan-style warm-up (``--tune``; 10 leapfrog steps), RNS-HMC
with the papers' protocol (``--rns-tune`` exploration iterations at the papers' settings)
and RNS-HMC and ARNS-HMC with rnshmc's defaults (200 exploration iterations). qbar(t) is the
running mean of a chain's kept draws, placed at the chain's seconds before sampling plus its
sampling seconds spread evenly over the draws; the curve is the median over
``--fig8-chains`` chains. E q is the mean of the Fig. 7 runs' draws (exact chains,
independent of the Fig. 8 runs); its Monte Carlo error, as a relative error, is printed as
the floor below which a curve means nothing.

Problems: the simulated logistic regression (N = 100000, d = 50), Bank Marketing, a9a (60
features) and the authors' elliptic PDE, with the papers' settings (``rnshmc.papers``). PNG
figures (fig7_acceptance.png and
fig8_relative_error.png in ``--out``) when matplotlib is installed; the numbers are printed
either way. Run time on 2 quiet cores about 25 min for all four problems (the simulated
logistic regression about half of it); the PDE alone about 2 min:

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python examples/adaptive.py
    python examples/adaptive.py --problems pde --chains 20
"""
import argparse
import importlib.util
import warnings
from pathlib import Path

import numpy as np

import rnshmc
from rnshmc import papers

PROBLEMS = papers.PROBLEMS


def load(name, seed=0):
    """(model, papers' settings: step_size, n_steps, n_hidden, ridge) of a problem."""
    return papers.load_model(name, seed), papers.rns_settings(name)


def acceptance_by_points(result, edges):
    """(chains, bins): each chain's mean acceptance probability over the draws whose weights
    were fitted to a number of points in [edges[i], edges[i+1]) (NaN where there is none)."""
    points = papers.training_points(result)
    out = np.full((len(points), len(edges) - 1), np.nan)
    for c in range(len(points)):
        which = np.digitize(points[c], edges) - 1
        for b in range(len(edges) - 1):
            if np.any(which == b):
                out[c, b] = result.accept_prob[c][which == b].mean()
    return out


def quietly(sampler, **kwargs):
    """Sample with the trust watch's and the health checks' warnings collected, not shown
    (the figures show acceptance; the warnings are counted in the output)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = sampler.sample(progress=False, **kwargs)
    return result, len(caught)


def posterior_mode(model):
    """The posterior mode by L-BFGS from zero: Fig. 7's start. The papers' fixed step size is
    tuned for the posterior; from zero, far out where the logistic regressions' gradients are
    large, a chain at that step size can reject every move of a short exploration."""
    import scipy.optimize
    found = scipy.optimize.minimize(model.potential_and_gradient, np.zeros(model.dim),
                                    jac=True, method="L-BFGS-B")
    return found.x


def figure7(model, settings, args):
    """ARNS-HMC's acceptance by training points and HMC's at the same step size and L, both
    from the posterior mode."""
    step = dict(step_size=settings["step_size"], n_steps=settings["n_steps"])
    start = posterior_mode(model)
    # the papers' algorithm (fixed L, no trust watch) with rnshmc's surrogate
    arns = rnshmc.ARNSHMC(model, **papers.rns_options(settings, papers_algorithm=True))
    explore = args.explore or (50 if model.dim <= 20 else 600)
    res, _ = quietly(arns, draws=args.draws, tune=explore, chains=args.chains,
                     rng=args.seed, init=start)
    hmc, _ = quietly(rnshmc.HMC(model, **step), draws=args.hmc_draws, tune=explore,
                     chains=2, rng=args.seed + 1, init=start)
    points = papers.training_points(res)
    edges = np.unique(np.geomspace(points.min(), points.max() + 1, args.bins + 1).astype(int))
    by_bin = acceptance_by_points(res, edges)
    return dict(edges=edges, median=np.nanmedian(by_bin, axis=0),
                low=np.nanpercentile(by_bin, 5, axis=0),
                high=np.nanpercentile(by_bin, 95, axis=0),
                hmc=float(np.mean(hmc.acceptance_rate)), samples=res.samples,
                ess=float(res.ess().min()), installs=res.n_installs)


def figure8(model, settings, args, reference):
    """{method: (seconds, median REM)} of HMC, RNS-HMC (papers') and (A)RNS-HMC (defaults)."""
    runs = {
        "HMC": (rnshmc.HMC(model), args.tune),
        "RNS-HMC, papers' protocol": (rnshmc.RNSHMC(model, **papers.rns_options(
            settings, papers_surrogate=True, papers_algorithm=True)),
                                      args.rns_tune),
        "RNS-HMC, defaults": (rnshmc.RNSHMC(model), 200),
        "ARNS-HMC, defaults": (rnshmc.ARNSHMC(model), 200),
    }
    curves = {}
    for label, (sampler, tune) in runs.items():
        res, n_warnings = quietly(sampler, draws=args.draws, tune=tune, chains=args.fig8_chains,
                                  rng=args.seed + 2, init=np.zeros(model.dim))
        per_chain = {k: v / args.fig8_chains for k, v in res.timings.items()}
        before = sum(per_chain.values()) - per_chain["sampling"]
        seconds = before + per_chain["sampling"] * np.arange(1, args.draws + 1) / args.draws
        rem = rnshmc.diagnostics.relative_error_of_mean(res.samples, reference)
        curves[label] = (seconds, np.median(rem, axis=0), n_warnings)
    return curves


def print_figure7(name, fig):
    print(f"  Fig. 7: ARNS-HMC acceptance by training points (median over chains, 5%-95%); "
          f"HMC at the same step size and L: {fig['hmc']:.2f}")
    for lo, hi, m, a, b in zip(fig["edges"][:-1], fig["edges"][1:], fig["median"], fig["low"],
                               fig["high"]):
        print(f"    points {lo:6d}-{hi - 1:<6d} acceptance {m:5.2f}  ({a:.2f}-{b:.2f})")
    print(f"    (min ESS of the run {fig['ess']:.0f}; installs per chain "
          f"{fig['installs'].min()}-{fig['installs'].max()})")


def print_figure8(curves, floor, n_times=8):
    start = min(c[0][0] for c in curves.values())
    end = max(c[0][-1] for c in curves.values())
    times = np.geomspace(start, end, n_times)
    print(f"  Fig. 8: relative error of the mean (median over chains) at wall time from the "
          f"first iteration (reference's own relative MC error {floor:.4f}); '-' = not "
          "sampling yet, 'done' = its draws ended")

    def cell(seconds, rem, t):
        if t < seconds[0]:
            return f"{'-':>8s}"
        if t > seconds[-1] * (1 + 1e-9):
            return f"{'done':>8s}"
        return f"{rem[np.searchsorted(seconds, t, side='right') - 1]:8.4f}"
    print("    " + f"{'seconds':28s}" + "".join(f"{t:8.1f}" for t in times) + "  warnings")
    for label, (seconds, rem, n_warnings) in curves.items():
        cells = [cell(seconds, rem, t) for t in times]
        print(f"    {label:28s}" + "".join(cells) + f"  {n_warnings}")


def plot(figures, out):
    import matplotlib
    import matplotlib.ticker
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = list(figures)
    fig7, axes7 = plt.subplots(1, len(names), figsize=(4 * len(names), 3.2), squeeze=False)
    fig8, axes8 = plt.subplots(1, len(names), figsize=(4 * len(names), 3.2), squeeze=False)
    for ax7, ax8, name in zip(axes7[0], axes8[0], names):
        f7, curves, floor = figures[name]
        centres = np.sqrt(f7["edges"][:-1] * f7["edges"][1:])
        ax7.fill_between(centres, f7["low"], f7["high"], alpha=0.3, label="ARNS-HMC 90%")
        ax7.plot(centres, f7["median"], label="ARNS-HMC median")
        ax7.axhline(f7["hmc"], color="red", label="HMC")
        ax7.set(xscale="log", xlabel="training points", ylabel="acceptance", title=name,
                ylim=(0, 1.02))
        for label, (seconds, rem, _) in curves.items():
            ax8.plot(seconds, rem, label=label)
        ax8.axhline(floor, color="grey", ls=":", label="reference MC error")
        ax8.set(xscale="log", yscale="log", xlabel="seconds", ylabel="REM", title=name)
        ax8.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    axes7[0][0].legend(fontsize=7)
    axes8[0][0].legend(fontsize=7)
    out.mkdir(parents=True, exist_ok=True)
    for fig, file in ((fig7, "fig7_acceptance.png"), (fig8, "fig8_relative_error.png")):
        fig.tight_layout()
        fig.savefig(out / file, dpi=120)
        print(f"wrote {out / file}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--problems", nargs="+", default=list(PROBLEMS), choices=PROBLEMS)
    parser.add_argument("--draws", type=int, default=2000, help="draws per chain (both figures)")
    parser.add_argument("--chains", type=int, default=10, help="ARNS-HMC chains of Fig. 7")
    parser.add_argument("--explore", type=int, default=None,
                        help="ARNS-HMC's exploration in Fig. 7 and HMC's warm-up there "
                        "(default 50 for d <= 20, else 600)")
    parser.add_argument("--hmc-draws", type=int, default=500, help="HMC draws of Fig. 7's line")
    parser.add_argument("--bins", type=int, default=8)
    parser.add_argument("--fig8-chains", type=int, default=2)
    parser.add_argument("--tune", type=int, default=500, help="HMC's warm-up in Fig. 8")
    parser.add_argument("--rns-tune", type=int, default=2000,
                        help="the papers' RNS-HMC exploration in Fig. 8 (papers: 5000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("adaptive-figures"))
    args = parser.parse_args(argv)
    figures = {}
    for name in args.problems:
        model, settings = load(name, args.seed)
        print(f"\n{name} (d = {model.dim}), papers' settings {settings}", flush=True)
        fig7 = figure7(model, settings, args)
        print_figure7(name, fig7)
        samples = fig7["samples"].reshape(-1, model.dim)
        reference = samples.mean(axis=0)
        mcse = rnshmc.diagnostics.mcse_mean(fig7["samples"])
        floor = float(np.linalg.norm(mcse) / np.linalg.norm(reference))
        curves = figure8(model, settings, args, reference)
        print_figure8(curves, floor)
        figures[name] = (fig7, curves, floor)
    if importlib.util.find_spec("matplotlib") is None:
        print("matplotlib is not installed: no PNG figures (the numbers are above)")
    else:
        plot(figures, args.out)


if __name__ == "__main__":
    main()
