"""Table 1 of the RNS-HMC paper, elliptic PDE row: HMC against RNS-HMC with the papers' protocol.

The authors' problem (their mesh, KL basis, observations; ``ePDE.mat`` from the papers' data,
found through $RNSHMC_SHARED_DATA or ../shared/data beside the repository, or given with
--data) or, without it, the synthetic 30x30 Q1 problem. The papers' settings: eps = 0.16,
L = 10 jittered, s = 1000 hidden units, ridge 1e-7; 5000 warm-up iterations (for RNS-HMC exact
HMC whose last 4000 states train the surrogate), then 5000 draws. Rows: the efficient HMC
baseline (the same kernels, gradient cached), RNS-HMC with the papers' surrogate (raw inputs,
values only), with rnshmc's (whitened, values and gradients), with delayed acceptance, and with
a trajectory length of its own choosing.

    python examples/elliptic_pde.py [--data path/to/ePDE.mat] [--seeds 0 1 2]
"""
import argparse
import os
from pathlib import Path

import numpy as np

import rnshmc
from rnshmc.experiments import compare, format_table

SETTINGS = dict(step_size=0.16, n_steps=10, n_hidden=1000, ridge=1e-7)


def authors_problem_path():
    """ePDE.mat of the papers' data, or None if it is not available."""
    root = os.environ.get("RNSHMC_SHARED_DATA")
    root = Path(root) if root else Path(__file__).resolve().parents[2] / "shared" / "data"
    path = root / "rnshmc-original" / "ePDE.mat"
    return path if path.is_file() else None


def samplers_for(model, extra_rows=True):
    eps, L, s, ridge = (SETTINGS[k] for k in ("step_size", "n_steps", "n_hidden", "ridge"))
    common = dict(n_hidden=s, ridge=ridge, step_size=eps, n_steps=L)
    samplers = {
        "HMC": rnshmc.HMC(model, step_size=eps, n_steps=L),
        "RNS-HMC (papers)": rnshmc.RNSHMC(model, whiten=False, gradient_weight=0.0, **common),
        "RNS-HMC (rnshmc)": rnshmc.RNSHMC(model, **common),
    }
    if extra_rows:
        samplers["RNS-HMC (rnshmc, DA)"] = rnshmc.RNSHMC(model, delayed_acceptance=True,
                                                         **common)
        samplers["RNS-HMC (rnshmc, auto L)"] = rnshmc.RNSHMC(model, surrogate_n_steps="auto",
                                                             **common)
    return samplers


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=None, help="ePDE.mat (default: the papers' data)")
    parser.add_argument("--draws", type=int, default=5000)
    parser.add_argument("--tune", type=int, default=5000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    args = parser.parse_args(argv)
    path = args.data or authors_problem_path()
    if path:
        model, problem = rnshmc.models.EllipticPDE.from_mat(path), f"the authors' problem ({path})"
    else:
        model, problem = rnshmc.models.EllipticPDE(n=30, element="Q1", rng=0), "synthetic Q1 30x30"
    for seed in args.seeds:
        rows, results = compare(samplers_for(model), args.draws, args.tune, rng=seed,
                                init=np.zeros(model.dim))
        print(format_table(rows, evals_label="PDE solves / min ESS", title=(
            f"\nelliptic PDE, {problem}, seed {seed}: eps={SETTINGS['step_size']}, "
            f"L={SETTINGS['n_steps']} jittered, s={SETTINGS['n_hidden']}, "
            f"ridge={SETTINGS['ridge']:g}; {args.tune} warm-up + {args.draws} draws")))
        for row in rows:
            print(f"  {row['method']}: min ESS per 1000 PDE solves "
                  f"{1000 / row['exact_evals_per_min_ess']:.0f}")
        auto = results.get("RNS-HMC (rnshmc, auto L)")
        if auto is not None:
            print(f"  auto L chose {auto.surrogate_n_steps[0]} steps")


if __name__ == "__main__":
    main()
