"""rnshmc's NUTS with each warm-up metric on the hard posteriors (``rnshmc.models.hard``):
does it converge (R-hat <= 1.01, min bulk ESS), and at what cost in gradient evaluations
(warm-up included, and the sampling phase's alone) and seconds.

4 chains, one after another (``pool=None``: the seconds are one core's), ``--tune`` warm-up
and ``--draws`` draws each, from Stan's uniform (-2, 2) starts. The peers users would pick
instead (NumPyro's and nutpie's NUTS) are not run here yet: their figures for the same
posteriors are in the issue that asks for this benchmark.

    python benchmarks/bench_nuts.py [--seeds 0 1] [--posteriors "correlated regression"]
                                    [--metrics diagonal dense diagonal_grad dense_grad]
"""
import argparse
import time
import warnings

import numpy as np

import rnshmc
from rnshmc.diagnostics import ess_bulk, rhat
from rnshmc.models import hard_posteriors

METRICS = ("diagonal", "dense", "diagonal_grad", "dense_grad")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--posteriors", nargs="+", default=list(hard_posteriors()))
    parser.add_argument("--metrics", nargs="+", default=list(METRICS), choices=METRICS)
    parser.add_argument("--tune", type=int, default=1000)
    parser.add_argument("--draws", type=int, default=1000)
    args = parser.parse_args(argv)
    posteriors = hard_posteriors()
    print(f"{'posterior':22s} {'metric':14s} seed  R-hat  min ESS  gradients  (sampling)  "
          "divergent  depth  seconds")
    for name in args.posteriors:
        target = posteriors[name][0]
        for metric in args.metrics:
            for seed in args.seeds:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    start = time.perf_counter()
                    res = rnshmc.NUTS(target, metric=metric).sample(
                        args.draws, tune=args.tune, chains=4, rng=seed, progress=False,
                        pool=None)
                    seconds = time.perf_counter() - start
                print(f"{name:22s} {metric:14s} {seed:4d}  {np.max(rhat(res.samples)):.3f}  "
                      f"{np.min(ess_bulk(res.samples)):7.0f}  {int(res.n_gradient_evals.sum()):9d}  "
                      f"({int(res.n_gradient_evals_sampling.sum()):8d})  "
                      f"{int(res.diverging.sum()):9d}  {res.tree_depth.mean():5.1f}  "
                      f"{seconds:7.1f}", flush=True)


if __name__ == "__main__":
    main()
