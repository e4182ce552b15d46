"""Table 1 of the RNS-HMC paper, elliptic PDE rows: HMC, RMHMC, RNS-HMC and RNS-RMHMC with the
papers' protocol.

The authors' problem (their mesh, KL basis, observations; ``ePDE.mat`` from the papers' data,
found through $RNSHMC_SHARED_DATA or ../shared/data beside the repository, or given with
--data) or, without it, the synthetic 30x30 Q1 problem. The papers' settings: HMC and RNS-HMC
eps = 0.16, L = 10 jittered; RMHMC (Gauss-Newton metric J^T J / sigma_y^2 + I / sigma_theta^2)
and RNS-RMHMC (the diagonal of the surrogate's Hessian) eps = 0.8, L = 3 fixed, fixed-point
solves to 1e-9 (at most 50 iterations); s = 1000 hidden units, ridge 1e-7; 5000 warm-up
iterations (for the RNS samplers exact HMC with the HMC settings, whose last 4000 states train
the surrogate), then 5000 draws.

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
import os
from pathlib import Path

import numpy as np

import rnshmc
from rnshmc import experiments
from rnshmc.experiments import compare, format_table

SETTINGS = dict(step_size=0.16, n_steps=10, n_hidden=1000, ridge=1e-7,
                rm_step_size=0.8, rm_n_steps=3)

METHODS = ("hmc", "rmhmc", "rns-hmc", "rns-rmhmc")


def authors_problem_path():
    """ePDE.mat of the papers' data, or None if it is not available."""
    root = os.environ.get("RNSHMC_SHARED_DATA")
    root = Path(root) if root else Path(__file__).resolve().parents[2] / "shared" / "data"
    path = root / "rnshmc-original" / "ePDE.mat"
    return path if path.is_file() else None


def load(path=None):
    """(model, description): the authors' problem at ``path`` (default: the papers' data if
    present), else the synthetic Q1 30x30 problem."""
    path = path or authors_problem_path()
    if path:
        return rnshmc.models.EllipticPDE.from_mat(path), f"the authors' problem ({path})"
    return rnshmc.models.EllipticPDE(n=30, element="Q1", rng=0), "synthetic Q1 30x30"


def samplers_for(model, extra_rows=True, methods=("hmc", "rns-hmc"), softabs=None):
    """{row name: sampler} with the papers' settings for the chosen ``methods`` (of METHODS;
    the default, HMC and RNS-HMC, is what benchmarks/bench_pde.py compares). ``softabs``:
    RNS-RMHMC's SoftAbs sharpness (None: the surrogate's Hessian diagonal as it is)."""
    eps, L, s, ridge = (SETTINGS[k] for k in ("step_size", "n_steps", "n_hidden", "ridge"))
    rm = dict(step_size=SETTINGS["rm_step_size"], n_steps=SETTINGS["rm_n_steps"], jitter=False)
    common = dict(n_hidden=s, ridge=ridge, step_size=eps, n_steps=L)
    samplers = {}
    if "hmc" in methods:
        samplers["HMC"] = rnshmc.HMC(model, step_size=eps, n_steps=L)
    if "rmhmc" in methods:
        samplers["RMHMC"] = rnshmc.RMHMC(model, metric="gauss_newton", **rm)
    if "rns-hmc" in methods:
        samplers["RNS-HMC (papers)"] = rnshmc.RNSHMC(model, whiten=False, gradient_weight=0.0,
                                                     training_data="states",
                                                     surrogate_n_steps=None, trust_ratio=None,
                                                     **common)
        samplers["RNS-HMC (rnshmc)"] = rnshmc.RNSHMC(model, **common)
        if extra_rows:
            samplers["RNS-HMC (rnshmc, DA)"] = rnshmc.RNSHMC(model, delayed_acceptance=True,
                                                             **common)
            samplers[f"RNS-HMC (rnshmc, L={L})"] = rnshmc.RNSHMC(
                model, surrogate_n_steps=None, **common)
    if "rns-rmhmc" in methods:
        rns_rm = dict(metric="diagonal", n_hidden=s, ridge=ridge, explore_step_size=eps,
                      explore_n_steps=L, explore_jitter=True, softabs=softabs, **rm)
        samplers["RNS-RMHMC (papers)"] = rnshmc.RNSRMHMC(model, whiten=False,
                                                         gradient_weight=0.0, **rns_rm)
        samplers["RNS-RMHMC (rnshmc)"] = rnshmc.RNSRMHMC(model, **rns_rm)
    return samplers


def rmhmc_run_settings(model, samplers, args, out=print):
    """compare()'s per-row overrides of the RMHMC row (shared with benchmarks/bench_rmhmc.py)."""
    return experiments.rmhmc_run_settings(model, samplers, args, model.gauss_newton_metric,
                                          "Gauss-Newton", out)


def add_rmhmc_arguments(parser):
    """--methods and the RMHMC rows' options (shared with benchmarks/bench_rmhmc.py)."""
    experiments.add_rmhmc_arguments(parser, METHODS, default_init="zero")


def print_details(rows, results, out=print):
    for row in rows:
        if "error" in row:
            out(f"  {row['method']} failed: {row['error']}")
        else:
            out(f"  {row['method']}: min ESS per 1000 model evaluations "
                f"{1000 / row['exact_evals_per_min_ess']:.0f}")
    for label, res in results.items():
        solver = experiments.implicit_solver_summary(label, res)
        if solver is not None:
            out(solver)
    rns = results.get("RNS-HMC (rnshmc)")
    if rns is not None and "surrogate_n_steps" in rns:
        out(f"  RNS-HMC (rnshmc) chose L = {rns.surrogate_n_steps.tolist()} steps for sampling")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=None, help="ePDE.mat (default: the papers' data)")
    parser.add_argument("--draws", type=int, default=5000)
    parser.add_argument("--tune", type=int, default=5000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    add_rmhmc_arguments(parser)
    args = parser.parse_args(argv)
    methods = [m for m in METHODS if m in args.methods]
    model, problem = load(args.data)
    for seed in args.seeds:
        samplers = samplers_for(model, methods=methods, softabs=args.softabs)
        print(f"\nelliptic PDE, {problem}, seed {seed}: {experiments.settings_summary(SETTINGS)}; "
              f"{args.tune} warm-up + {args.draws} draws")
        rows, results = compare(samplers, args.draws, args.tune, rng=seed,
                                init=np.zeros(model.dim),
                                settings=rmhmc_run_settings(model, samplers, args),
                                on_error="report")
        print(format_table(rows, evals_label="model evals / min ESS"))
        print_details(rows, results)


if __name__ == "__main__":
    main()
