"""Table 1 of the RNS-HMC paper, elliptic PDE rows: HMC, RMHMC, RNS-HMC and RNS-RMHMC with the
papers' protocol.

The authors' problem (their mesh, KL basis, observations; ``ePDE.mat`` from the papers' data,
found through $RNSHMC_SHARED_DATA or ../shared/data beside the repository, or given with
--data) or, without it, the synthetic 30x30 Q1 problem. The papers' settings: HMC and RNS-HMC
eps = 0.16, L = 10 jittered; RMHMC (Gauss-Newton metric J^T J / sigma_y^2 + I / sigma_theta^2)
and RNS-RMHMC (the diagonal of the surrogate's Hessian) eps = 0.8, L = 3 fixed, fixed-point
solves to 1e-9 (at most 50 iterations); s = 1000 hidden units, ridge 1e-7; 5000 warm-up
iterations (for the RNS samplers exact HMC with the HMC settings, whose last 4000 states train
the surrogate), then 5000 draws (docs/algorithms.md section 1; ``rnshmc.papers.SETTINGS``).

Rows: the efficient HMC baseline (the same kernels, gradient cached); RMHMC; RNS-HMC with the
papers' surrogate (raw inputs, values only), with rnshmc's (whitened, values and gradients),
with delayed acceptance, and with a trajectory length of its own choosing; RNS-RMHMC with the
papers' surrogate and with rnshmc's (no safeguard for a Hessian diagonal that is not positive at
the exploration's last state, as in the papers: the row then fails, printed as FAILED;
--softabs ALPHA applies SoftAbs instead). The RMHMC rows add the proposals rejected for a failed implicit solve
("implicit fails") and the fixed-point iterations per generalized-leapfrog step ("FP it/step").
"model evals / min ESS" counts the sampling phase's evaluations of the potential (a forward
solve) and its gradient (an adjoint solve) and, for RMHMC, each evaluation of the Gauss-Newton
metric (a forward and d = 20 sensitivity solves on one factorisation) and of its derivatives
(second-order sensitivities) as one more: a lower bound of RMHMC's work, whose s/iter has it all.
RMHMC starts at q = 0 like the other rows (the papers' protocol); --rmhmc-init mode starts it
at the posterior mode (Gauss-Newton with a line search), as the logistic-regression example
must (there RMHMC at the papers' step sizes never leaves q = 0).

Run time on the authors' problem (2 cores): the HMC and RNS rows take about a minute each;
an RMHMC iteration ~0.06 s (each fixed-point iteration of the position update recomputes the
Gauss-Newton metric from d = 20 sensitivity solves; ~20 fixed-point iterations per step), so
its row of the full protocol takes ~10 minutes and the whole table ~20 minutes per seed.
--rmhmc-draws and --rmhmc-tune shorten the RMHMC row alone (min(ESS)/s is a rate; a "draws"
column then shows each row's length), --methods picks rows.

    python examples/elliptic_pde.py [--data path/to/ePDE.mat] [--seeds 0 1 2]
    python examples/elliptic_pde.py --methods hmc rmhmc rns-rmhmc --rmhmc-draws 1000
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
    start = papers.SETTINGS["pde"]["rmhmc_start"]
    parser.add_argument("--rmhmc-init", choices=("mode", "zero"), default=start,
                        help=f"RMHMC's starting point: the posterior mode or q = 0 like the "
                        f"other rows (default {start})")
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
        else:
            out(f"  {row['method']}: min ESS per 1000 model evaluations "
                f"{1000 / row['exact_evals_per_min_ess']:.0f}")
    for label, res in results.items():
        solver = implicit_solver_summary(label, res)
        if solver is not None:
            out(solver)
    rns = results.get("RNS-HMC (rnshmc)")
    if rns is not None and "surrogate_n_steps" in rns:
        out(f"  RNS-HMC (rnshmc) chose L = {rns.surrogate_n_steps.tolist()} steps for sampling")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=None, help="ePDE.mat (default: the papers' data)")
    parser.add_argument("--draws", type=int, default=papers.PROTOCOL["draws"])
    parser.add_argument("--tune", type=int, default=papers.PROTOCOL["tune"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    add_rmhmc_arguments(parser)
    args = parser.parse_args(argv)
    model, problem = papers.load_pde(args.data)
    for seed in args.seeds:
        # every row of the table, with delayed acceptance and the fixed trajectory length
        samplers = papers.table1_samplers(model, "pde", args.methods, delayed=True,
                                          fixed_length=True, softabs=args.softabs)
        print(f"\nelliptic PDE, {problem}, seed {seed}: {papers.settings_summary('pde')}; "
              f"{args.tune} warm-up + {args.draws} draws")
        settings = papers.rmhmc_row_settings(model, "pde", samplers, args.rmhmc_draws,
                                             args.rmhmc_tune, args.rmhmc_init, out=print)
        rows, results = compare(samplers, args.draws, args.tune, rng=seed,
                                init=np.zeros(model.dim), settings=settings, on_error="report")
        print(format_table(rows, evals_label="model evals / min ESS"))
        print_details(rows, results)


if __name__ == "__main__":
    main()
