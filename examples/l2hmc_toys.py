"""Figure 1 of the L2HMC paper (Levy, Hoffman and Sohl-Dickstein 2018) on rnshmc's L2HMC.

For each toy energy (``rnshmc.papers.L2HMC_TARGETS``: the strongly correlated 2-d Gaussian,
the 50-d ill-conditioned Gaussian, the rough well as the paper writes it and as the authors'
code computes it), L2HMC is trained with the reference settings (200 chains, T = 10, Adam
1e-3 decayed 0.96 every 1000 steps, lambda = 0.1, 5000 steps; ``--quick``: 40 steps of 20
chains) and sampled beside HMC with the same 10 leapfrog steps at the paper's step sizes
0.1, 0.15 and 0.2 (identity mass, no jitter), every sampler ``--chains`` chains x
``--draws`` draws after ``--tune`` iterations from the same N(0, I) starting points. A
panel per energy: the autocorrelation, against gradient evaluations (lag x 10), of the
coordinate with the smallest ESS of each sampler, averaged over its chains (the paper
plotted a variance-weighted autocorrelation pooled over the coordinates, which a slow
small-variance coordinate hardly moves: see ``benchmarks/bench_l2hmc.py``). The mixture of
two Gaussians (L2HMC trained with the temperature annealed from 10 to 1): the first
coordinate of one chain of L2HMC and of HMC (eps 0.15), and the rate of mode switches.

The numbers (ESS per gradient, acceptance, autocorrelation at 10, 100 and 1000 gradients,
switch rates) are printed; ``l2hmc_toys.png`` in ``--out`` when matplotlib is installed.
The full run trains five samplers of 5000 steps (minutes each on two cores):

    python examples/l2hmc_toys.py [--quick] [--out DIR]
"""
import argparse
import warnings
from pathlib import Path

import numpy as np

import rnshmc
from rnshmc import papers
from rnshmc.diagnostics import autocorrelation

N_STEPS = papers.L2HMC_HMC["n_steps"]
STEP_SIZES = papers.L2HMC_HMC["step_sizes"]


def quiet(function, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return function(*args, **kwargs)


def trained(model, args, **train):
    """L2HMC with the paper's sampler settings, trained with the reference settings."""
    l2 = papers.l2hmc(model).initialize(args.seed)
    quiet(l2.train, args.train_iterations, chains=args.train_chains, rng=args.seed + 1,
          progress=False, **train)
    return l2


def slowest_autocorrelation(result, lags):
    """Mean over chains of the autocorrelation (lags 0..lags-1) of the coordinate with the
    smallest ESS."""
    worst = int(np.argmin(result.ess()))
    draws = result.samples[:, :, worst]
    return np.mean([autocorrelation(chain)[:lags] for chain in draws], axis=0)


def energy_panel(key, args):
    """{sampler: (autocorrelation by lag, ESS per gradient, acceptance)} for one energy."""
    title, make = papers.L2HMC_TARGETS[key]
    model = make()
    init = np.random.default_rng(args.seed).standard_normal((args.chains, model.dim))
    kwargs = dict(draws=args.draws, tune=args.tune, chains=args.chains, rng=args.seed + 2,
                  init=init, progress=False)
    lags = min(args.draws // 2, 200)
    samplers = {"L2HMC": trained(model, args)}
    for eps in STEP_SIZES:
        samplers[f"HMC eps {eps}"] = rnshmc.HMC(model, step_size=eps, n_steps=N_STEPS,
                                                jitter=False)
    panel = {}
    for label, sampler in samplers.items():
        result = quiet(sampler.sample, **kwargs)
        ess_per_gradient = float(result.ess().min()
                                 / np.sum(result.n_gradient_evals_sampling))
        panel[label] = (slowest_autocorrelation(result, lags), ess_per_gradient,
                        float(result.acceptance_rate.mean()))
    return title, panel


def mixture_panel(args):
    """(L2HMC's and HMC's first coordinate of chain 0, their switch rates)."""
    model = papers.L2HMC_MIXTURE["model"]()
    init = np.random.default_rng(args.seed).standard_normal((args.chains, 2))
    kwargs = dict(draws=args.draws, tune=args.tune, chains=args.chains, rng=args.seed + 2,
                  init=init, progress=False)
    l2 = trained(model, args, temperature=papers.L2HMC_MIXTURE["temperature"])
    hmc = rnshmc.HMC(model, step_size=0.15, n_steps=N_STEPS, jitter=False)
    traces = {}
    for label, sampler in (("L2HMC", l2), ("HMC eps 0.15", hmc)):
        x1 = quiet(sampler.sample, **kwargs).samples[..., 0]
        switches = float(np.mean(np.sign(x1[:, 1:]) != np.sign(x1[:, :-1])))
        traces[label] = (x1[0], switches)
    return traces


def report(panels, traces):
    for title, panel in panels:
        print(f"\n{title}")
        print(f"  {'sampler':14s} {'accept':>6s} {'min ESS/grad':>12s}  autocorrelation at "
              "10, 100, 1000 gradients")
        for label, (rho, per_gradient, accept) in panel.items():
            at = [f"{rho[g // N_STEPS]:+.3f}" if g // N_STEPS < len(rho) else "   -  "
                  for g in (10, 100, 1000)]
            print(f"  {label:14s} {accept:6.2f} {per_gradient:12.5f}  {'  '.join(at)}")
    print("\nmixture of two Gaussians: mode switches per transition")
    for label, (_, switches) in traces.items():
        print(f"  {label:14s} {switches:.4f}")


def plot(panels, traces, out):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no figure (pip install matplotlib)")
        return None
    fig, axes = plt.subplots(1, len(panels) + 1, figsize=(4 * (len(panels) + 1), 3.4))
    for ax, (title, panel) in zip(axes, panels):
        for label, (rho, per_gradient, _) in panel.items():
            ax.plot(np.arange(len(rho)) * N_STEPS, rho,
                    label=f"{label} ({per_gradient:.2g} ESS/grad)")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("gradient evaluations")
        ax.set_ylabel("autocorrelation (slowest coordinate)")
        ax.legend(fontsize=7)
    ax = axes[-1]
    for label, (x1, switches) in traces.items():
        ax.plot(x1, lw=0.6, label=f"{label} ({switches:.2f} switches per step)")
    ax.set_title("mixture of two Gaussians", fontsize=9)
    ax.set_xlabel("iteration")
    ax.set_ylabel("x_1 of one chain")
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = Path(out) / "l2hmc_toys.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"wrote {path}")
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="40 training steps of 20 chains, 300 draws (seconds)")
    parser.add_argument("--energies", nargs="+", default=list(papers.L2HMC_TARGETS),
                        choices=list(papers.L2HMC_TARGETS))
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=".")
    args = parser.parse_args(argv)
    args.train_iterations, args.train_chains = ((40, 20) if args.quick else
                                                (papers.L2HMC_TRAINING["iterations"],
                                                 papers.L2HMC_TRAINING["chains"]))
    args.draws, args.tune = (300, 100) if args.quick else (2000, 1000)
    panels = [energy_panel(key, args) for key in args.energies]
    traces = mixture_panel(args)
    report(panels, traces)
    plot(panels, traces, args.out)
    return panels, traces


if __name__ == "__main__":
    main()
