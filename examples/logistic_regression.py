"""Table 1 of the RNS-HMC paper, logistic-regression rows: HMC, RMHMC, RNS-HMC and RNS-RMHMC.

Runs the efficient HMC baseline (the same C kernels, gradient cached between steps), RMHMC
(the generalized leapfrog with the exact Fisher metric), RNS-HMC and RNS-RMHMC (the generalized
leapfrog on the surrogate's potential with its full Hessian as the metric, the exact Metropolis
test) with the papers' settings on the simulated data (N = 100000, d = 50), Bank Marketing
(d = 25) and a9a reduced to 60 features (d = 61), and prints acceptance, ESS (min, median,
max), s/iter, min(ESS)/s, the speed-up over HMC and exact evaluations (density + gradient) per
min-ESS; the RMHMC rows add the proposals rejected for a failed implicit solve ("implicit
fails") and the fixed-point iterations per generalized-leapfrog step ("FP it/step"). The
exact evaluations do not count RMHMC's Fisher-metric factorisations (its main cost, in s/iter).

Settings (docs/algorithms.md section 1; ``rnshmc.papers.SETTINGS``): HMC and RNS-HMC with
eps and L jittered; RMHMC and RNS-RMHMC with their own eps and a fixed L (no jitter),
fixed-point solves to 1e-9 (at most 50 iterations); RNS-RMHMC explores with the HMC settings
(the a9a step size is 0.008, not the papers' 0.012: see ``rnshmc.papers.SETTINGS``). The
papers' protocol is the default: 5000 warm-up iterations (for the RNS samplers: exact HMC
whose last 4000 states train the surrogate), then 5000 draws, one chain. Rows: HMC; RMHMC;
RNS-HMC and RNS-RMHMC each with the papers' surrogate (raw inputs, values only) and with
rnshmc's (whitened inputs, values and gradients fitted); ``--delayed`` adds RNS-HMC with the
two-stage test.

The papers' RNS-RMHMC has no safeguard for a surrogate Hessian that is not positive definite:
where it is not at the exploration's last state the row fails (printed as FAILED with the
point; with the papers' surrogate this happens on our a9a design, and with short warm-ups);
``--softabs ALPHA`` maps it to a positive-definite metric (SoftAbs) instead.

RMHMC starts at the posterior mode (Newton's method with the Fisher metric, a fraction of a
second) unless ``--rmhmc-init zero``: from q = 0, where the other rows start, RMHMC at the
papers' step sizes diverged on every proposal tried on Bank Marketing and a9a (the potential
there is ~10^4 above its posterior values; energy errors beyond 1000), so the chain stays at
q = 0 through the warm-up and the row reports a chain that never moved.

Run time on 2 quiet cores (OpenBLAS; on a machine shared with other jobs set
OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1: the threaded kernels slow down many-fold when another
process holds a core). An RMHMC iteration costs ~0.38 s on the simulated data, ~0.25 s on Bank
Marketing and ~0.38 s on a9a (each generalized-leapfrog step refactorises the Fisher metric,
O(N d^2), once per fixed-point iteration of its position update and once more at the new
point, ~5-7 times in all), so the RMHMC rows of the full protocol take about 1 h, 40 min and
1 h; all the other rows together about 10 min per data set. ``--rmhmc-draws`` /
``--rmhmc-tune`` shorten the RMHMC rows alone (min(ESS)/s is a rate, so the rows stay
comparable, with a noisier ESS; a "draws" column then shows each row's length):

    python examples/logistic_regression.py                                  # ~3 hours
    python examples/logistic_regression.py --rmhmc-draws 1000 --rmhmc-tune 200  # ~45 min
    python examples/logistic_regression.py --data bank --draws 2000 --tune 2000
    python examples/logistic_regression.py --data a9a --methods hmc rns-hmc rns-rmhmc
"""
import argparse

import numpy as np

from rnshmc import papers
from rnshmc.experiments import compare, format_table


def add_rmhmc_arguments(parser):
    """--methods and the RMHMC rows' options."""
    parser.add_argument("--methods", nargs="+", default=list(papers.TABLE1_METHODS),
                        type=str.lower, choices=papers.TABLE1_METHODS,
                        help="rows to run (default all; the first one is the reference of the "
                        "speed-ups)")
    parser.add_argument("--rmhmc-draws", type=int, default=None,
                        help="draws of the RMHMC row (default --draws)")
    parser.add_argument("--rmhmc-tune", type=int, default=None,
                        help="burn-in of the RMHMC row (default --tune)")
    parser.add_argument("--rmhmc-init", choices=("mode", "zero"), default=None,
                        help="RMHMC's starting point: the posterior mode or q = 0 like the "
                        "other rows (default: the data set's rmhmc_start in "
                        "rnshmc.papers.SETTINGS, mode)")
    parser.add_argument("--softabs", type=float, default=None,
                        help="SoftAbs sharpness of RNS-RMHMC's surrogate metric (default none, "
                        "as in the papers: the run fails where it is not positive definite)")


def implicit_solver_summary(label, result):
    """One line on a generalized-leapfrog result's implicit solves (None for other results)."""
    if "n_implicit_failures" not in result:
        return None
    iterations = result.solver_iterations[0]
    return (f"  {label}: fixed-point iterations per trajectory median "
            f"{np.median(iterations):.0f}, max {iterations.max()}; "
            f"{int(result.n_implicit_failures.sum())} implicit failures, "
            f"{int(result.diverging.sum())} divergences in {result.samples.shape[1]} draws")


def print_details(rows, results, out=print):
    for row in rows:
        if "error" in row:
            out(f"  {row['method']} failed: {row['error']}")
    for label, res in results.items():
        if "fit_residual" in res:
            line = (f"  {label}: training {res.n_train[0]} states, fit in "
                    f"{res.timings['train']:.2f} s, RMS residual {res.fit_residual[0]:.3g}; "
                    f"exploration acceptance {res.exploration_acceptance_rate[0]:.2f}")
            out(line)
        solver = implicit_solver_summary(label, res)
        if solver is not None:
            out(solver)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", nargs="+", default=list(papers.LOGISTIC_PROBLEMS),
                        choices=papers.LOGISTIC_PROBLEMS)
    parser.add_argument("--draws", type=int, default=papers.PROTOCOL["draws"])
    parser.add_argument("--tune", type=int, default=papers.PROTOCOL["tune"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--delayed", action="store_true", help="add a delayed-acceptance row")
    parser.add_argument("--progress", action="store_true")
    add_rmhmc_arguments(parser)
    args = parser.parse_args(argv)
    for name in args.data:
        model = papers.load_logistic(name, args.seed)
        samplers = papers.table1_samplers(model, name, args.methods, delayed=args.delayed,
                                          softabs=args.softabs)
        print(f"\n{name}: N={model.X.shape[0]}, d={model.dim}; "
              f"{papers.settings_summary(name)}; {args.tune} warm-up + "
              f"{args.draws} draws")
        settings = papers.rmhmc_row_settings(model, name, samplers, args.rmhmc_draws,
                                             args.rmhmc_tune, args.rmhmc_init, out=print)
        rows, results = compare(samplers, args.draws, args.tune, rng=args.seed,
                                init=np.zeros(model.dim), progress=args.progress,
                                settings=settings, on_error="report")
        print(format_table(rows))
        print_details(rows, results)


if __name__ == "__main__":
    main()
