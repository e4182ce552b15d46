"""Command line: ``python -m rnshmc demo logistic`` (also the ``rnshmc`` console script)."""
import argparse
import os
import sys
import time

import numpy as np


def _demo_logistic(args):
    import rnshmc

    n, draws, tune = (20_000, 300, 300) if args.quick else (args.n, args.draws, args.tune)
    step_size = None if args.quick else args.step_size  # the papers' 0.045 is tuned for N=100k
    print(f"Bayesian logistic regression, simulated data of the RNS-HMC paper: N={n}, d={args.dim}")
    X, y, beta = rnshmc.datasets.simulated_logistic(n, args.dim, rng=args.seed)
    model = rnshmc.models.LogisticRegression(X, y)
    sampler = rnshmc.HMC(model, step_size=step_size, n_steps=args.n_steps, jitter=True)
    start = time.perf_counter()
    result = sampler.sample(draws, tune=tune, chains=args.chains, rng=args.seed,
                            init=np.zeros(args.dim), progress=not args.no_progress)
    elapsed = time.perf_counter() - start
    ess = result.ess()
    sampling = result.timings["sampling"]
    print(f"  HMC (eps={sampler.step_size if sampler.step_size else 'adapted'}, L={args.n_steps} "
          f"jittered), {args.chains} chain(s) x {draws} draws after {tune} warm-up, {elapsed:.1f} s")
    print(f"  acceptance {np.mean(result.acceptance_rate):.3f}, divergences {int(result.diverging.sum())}")
    print(f"  ESS (min, median, max) = ({ess.min():.0f}, {np.median(ess):.0f}, {ess.max():.0f}); "
          f"max R-hat {np.max(result.rhat()):.3f}")
    print(f"  s/iter {sampling / (draws * args.chains):.4f}, min(ESS)/s {ess.min() / sampling:.1f}")
    print(f"  gradient evaluations {int(result.n_gradient_evals.sum())}")
    error = np.linalg.norm(result.samples.reshape(-1, args.dim).mean(0) - beta) / np.linalg.norm(beta)
    print(f"  relative distance of the posterior mean from the true coefficients: {error:.3f}")
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "logistic_hmc.npz")
    result.save(path)
    print(f"  samples written to {path}")
    return 0


def main(argv=None):
    """Entry point of ``python -m rnshmc`` and the ``rnshmc`` script."""
    parser = argparse.ArgumentParser(prog="rnshmc", description="rnshmc demonstrations")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run a demonstration")
    which = demo.add_subparsers(dest="demo", required=True)
    logistic = which.add_parser("logistic", help="HMC on the papers' simulated logistic regression")
    logistic.add_argument("--n", type=int, default=100_000, help="rows of data (default 100000)")
    logistic.add_argument("--dim", type=int, default=50)
    logistic.add_argument("--draws", type=int, default=2000)
    logistic.add_argument("--tune", type=int, default=1000)
    logistic.add_argument("--chains", type=int, default=1)
    logistic.add_argument("--step-size", type=float, default=0.045, help="papers' 0.045")
    logistic.add_argument("--n-steps", type=int, default=6, help="papers' 6 (jittered)")
    logistic.add_argument("--seed", type=int, default=0)
    logistic.add_argument("--out", default="rnshmc_output")
    logistic.add_argument("--quick", action="store_true", help="a few-second smoke run")
    logistic.add_argument("--no-progress", action="store_true")
    logistic.set_defaults(run=_demo_logistic)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
