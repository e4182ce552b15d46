"""Simulation-based calibration of every sampler and path (the grid of ``tests/sbc_grid.py``;
``docs/guide/calibration.md``): for each configuration, ``--replications`` posteriors of its
problem (the 5-covariate logistic regression unless its name says otherwise), 2 chains each,
ranks among 49 thinned draws, the replications on a pool of ``--threads`` threads. The table
gives each configuration's worst ECDF p-value over its parameters (Säilynoja et al. 2022,
exact for discrete-uniform ranks) and chi-square p-value, the smallest min ESS of a
replication, the seconds, and whether it passed at the family-wise level 0.01 (every
parameter's ECDF p-value above 0.01 / dim). ``--figure`` saves the ECDF difference plots
of one parameter of each configuration.

    python benchmarks/bench_sbc.py [--replications 500] [--configurations HMC NUTS ...]
        [--threads 2] [--seed 0] [--figure docs/_static/sbc.png]
"""
import argparse
import pathlib
import sys
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))
import sbc_grid  # noqa: E402  (the grid's one place, beside the tests that run it)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replications", type=int, default=500)
    parser.add_argument("--configurations", nargs="+", default=list(sbc_grid.GRID),
                        choices=list(sbc_grid.GRID))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--figure", default=None)
    args = parser.parse_args()
    print(f"{'configuration':55s} {'reps':>5s} {'ECDF p':>8s} {'chi2 p':>8s} {'min ESS':>7s} "
          f"{'seconds':>8s}  passed", flush=True)
    results = {}
    with ThreadPoolExecutor(args.threads) as pool:
        for name in args.configurations:
            started = time.perf_counter()
            try:
                result = sbc_grid.calibrate(name, args.replications, rng=args.seed,
                                            pool=pool if args.threads > 1 else None)
            except Exception as error:  # (a configuration that cannot run says why)
                print(f"{name:55s} failed: {type(error).__name__}: {str(error)[:120]}",
                      flush=True)
                continue
            results[name] = result
            print(f"{name:55s} {args.replications:5d} {result.worst_p:8.3g} "
                  f"{result.chi_square_p.min():8.3g} {result.min_ess.min():7.0f} "
                  f"{time.perf_counter() - started:8.1f}  {result.passed}", flush=True)
    if args.figure:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        names = list(results)
        columns = 4
        rows = -(-len(names) // columns)
        figure, axes = plt.subplots(rows, columns, figsize=(3.2 * columns, 2.6 * rows),
                                    squeeze=False)
        for ax, name in zip(axes.flat, names):
            results[name].plot(parameters=[0], axes=[ax])
            ax.set_title(name, fontsize=7)
        for ax in list(axes.flat)[len(names):]:
            ax.set_visible(False)
        figure.tight_layout()
        figure.savefig(args.figure, dpi=110)
        print(f"(figure: {args.figure})")


if __name__ == "__main__":
    main()
