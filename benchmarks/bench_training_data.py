"""RNS-HMC trained on exploration states vs on whole exploration trajectories, authors' PDE.

For short explorations (the cold-start case ARNS-HMC is for), the sampling acceptance and min
ESS with ``training_data="states"`` against ``"trajectories"`` (every leapfrog step of the
training window, same exact evaluations). The papers' HMC settings (eps = 0.16, L = 10), s =
1000 hidden units, 2 chains, one run per row.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/bench_training_data.py
    python benchmarks/bench_training_data.py --tunes 100 200 --draws 1000    # ~1 minute
"""
import argparse
import time
import warnings

import numpy as np

from rnshmc import papers


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tunes", type=int, nargs="+", default=[100, 200, 500])
    parser.add_argument("--draws", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    model, title = papers.load_pde()  # the authors' problem, or a synthetic one without the data
    print(f"{title}; {args.draws} draws x 2 chains per row, seed {args.seed}")
    warnings.simplefilter("ignore", RuntimeWarning)  # the trust warning on poor fits
    for tune in args.tunes:
        for training_data in ("states", "trajectories"):
            start = time.perf_counter()
            res = papers.rns_hmc(model, "pde", surrogate=dict(training_data=training_data)).sample(
                args.draws, tune=tune, chains=2, rng=args.seed, progress=False,
                init=np.zeros(model.dim))
            print(f"tune {tune:4d}  {training_data:12s}  AP {np.round(res.acceptance_rate, 3)}  "
                  f"training points {res.n_train}  RMS misfit {np.round(res.fit_residual, 4)}  "
                  f"min ESS {res.ess().min():6.0f}  exploration evaluations "
                  f"{res.n_density_evals_explore.sum()}  ({time.perf_counter() - start:.0f} s)",
                  flush=True)


if __name__ == "__main__":
    main()
