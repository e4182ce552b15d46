"""RNS-HMC trained on exploration states vs on whole exploration trajectories, authors' PDE.

For short explorations (the cold-start case ARNS-HMC is for), the sampling acceptance and min
ESS with ``training_data="states"`` against ``"trajectories"`` (every leapfrog step of the
training window, same exact evaluations). The papers' HMC settings (eps = 0.16, L = 10), s =
1000 hidden units, 2 chains, one run per row.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/bench_training_data.py
    python benchmarks/bench_training_data.py --tunes 100 200 --draws 1000    # ~1 minute
"""
import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

import rnshmc

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import elliptic_pde  # noqa: E402  (the authors' problem, or a synthetic one without the data)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tunes", type=int, nargs="+", default=[100, 200, 500])
    parser.add_argument("--draws", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    model, title = elliptic_pde.load()
    print(f"{title}; {args.draws} draws x 2 chains per row, seed {args.seed}")
    warnings.simplefilter("ignore", RuntimeWarning)  # the trust warning on poor fits
    for tune in args.tunes:
        for training_data in ("states", "trajectories"):
            start = time.perf_counter()
            res = rnshmc.RNSHMC(model, n_hidden=1000, ridge=1e-7, step_size=0.16, n_steps=10,
                                training_data=training_data).sample(
                args.draws, tune=tune, chains=2, rng=args.seed, progress=False,
                init=np.zeros(model.dim))
            print(f"tune {tune:4d}  {training_data:12s}  AP {np.round(res.acceptance_rate, 3)}  "
                  f"training points {res.n_train}  RMS misfit {np.round(res.fit_residual, 4)}  "
                  f"min ESS {res.ess().min():6.0f}  exploration evaluations "
                  f"{res.n_density_evals_explore.sum()}  ({time.perf_counter() - start:.0f} s)",
                  flush=True)


if __name__ == "__main__":
    main()
