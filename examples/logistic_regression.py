"""Table 1 of the RNS-HMC paper, logistic-regression rows: HMC against RNS-HMC.

Runs the efficient HMC baseline (the same C kernels, gradient cached between steps) and RNS-HMC
with the papers' settings on the simulated data (N = 100000, d = 50), Bank Marketing (d = 25)
and a9a reduced to 60 features (d = 61), and prints acceptance, ESS (min, median, max), s/iter,
min(ESS)/s, the speed-up and exact evaluations (density + gradient) per min-ESS.

The papers' protocol is the default: 5000 warm-up iterations (for RNS-HMC: exact HMC whose last
4000 states train the surrogate), then 5000 draws, one chain. A third row runs RNS-HMC with
rnshmc's defaults (whitened inputs, values and gradients fitted); ``--delayed`` adds a row
with the two-stage test.

    python examples/logistic_regression.py                       # all three, ~3 minutes
    python examples/logistic_regression.py --data bank --draws 2000 --tune 2000
"""
import argparse

import numpy as np

import rnshmc
from rnshmc.experiments import compare, format_table

# step size, leapfrog steps (jittered), hidden units, ridge: the table in algorithms.md
PAPER_SETTINGS = {
    "simulated": dict(step_size=0.045, n_steps=6, n_hidden=2000, ridge=1e-6),
    "bank": dict(step_size=0.012, n_steps=45, n_hidden=1000, ridge=1e-7),
    # The papers' a9a step size is 0.012; on our a9a design (a seeded Gaussian projection,
    # standardised, not the authors' own) 0.012 is past the leapfrog's stability limit (every
    # proposal diverges) and 0.008 gives the papers' HMC acceptance (0.71 against their 0.72).
    "a9a": dict(step_size=0.008, n_steps=10, n_hidden=2500, ridge=1e-9),
}


def load(name, seed):
    if name == "simulated":
        X, y, _ = rnshmc.datasets.simulated_logistic(n=100_000, dim=50, rng=seed)
    elif name == "bank":
        X, y = rnshmc.datasets.load_bank_marketing()
    else:
        X, y = rnshmc.datasets.load_a9a(n_components=60, rng=seed)
    return rnshmc.models.LogisticRegression(X, y, prior_variance=100.0)


def samplers_for(model, settings, delayed=False):
    eps, L, s, ridge = (settings[k] for k in ("step_size", "n_steps", "n_hidden", "ridge"))
    samplers = {
        "HMC": rnshmc.HMC(model, step_size=eps, n_steps=L),
        "RNS-HMC (papers)": rnshmc.RNSHMC(model, n_hidden=s, ridge=ridge, step_size=eps,
                                          n_steps=L, whiten=False, gradient_weight=0.0),
        "RNS-HMC (rnshmc)": rnshmc.RNSHMC(model, n_hidden=s, ridge=ridge, step_size=eps,
                                          n_steps=L),
    }
    if delayed:
        samplers["RNS-HMC (rnshmc, DA)"] = rnshmc.RNSHMC(
            model, n_hidden=s, ridge=ridge, step_size=eps, n_steps=L, delayed_acceptance=True)
    return samplers


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", nargs="+", default=list(PAPER_SETTINGS),
                        choices=list(PAPER_SETTINGS))
    parser.add_argument("--draws", type=int, default=5000)
    parser.add_argument("--tune", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--delayed", action="store_true", help="add a delayed-acceptance row")
    parser.add_argument("--progress", action="store_true")
    args = parser.parse_args(argv)
    for name in args.data:
        model = load(name, args.seed)
        rows, results = compare(samplers_for(model, PAPER_SETTINGS[name], args.delayed),
                                args.draws, args.tune, rng=args.seed, init=np.zeros(model.dim),
                                progress=args.progress)
        settings = PAPER_SETTINGS[name]
        print(format_table(rows, title=(
            f"\n{name}: N={model.X.shape[0]}, d={model.dim}, eps={settings['step_size']}, "
            f"L={settings['n_steps']} jittered, s={settings['n_hidden']}, "
            f"ridge={settings['ridge']:g}; {args.tune} warm-up + {args.draws} draws")))
        for label, res in results.items():
            if "fit_residual" in res:
                print(f"  {label}: training {res.n_train[0]} states, fit in "
                      f"{res.timings['train']:.2f} s, RMS residual {res.fit_residual[0]:.3g}; "
                      f"exploration acceptance {res.exploration_acceptance_rate[0]:.2f}")


if __name__ == "__main__":
    main()
