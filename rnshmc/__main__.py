"""Command line: ``rnshmc demo pde`` / ``rnshmc demo logistic`` (also ``python -m rnshmc``)."""
import argparse
import sys

from . import demos


def main(argv=None):
    """Entry point of ``python -m rnshmc`` and the ``rnshmc`` script."""
    parser = argparse.ArgumentParser(prog="rnshmc", description="rnshmc demonstrations")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run a demonstration")
    which = demo.add_subparsers(dest="demo", required=True)
    pde = which.add_parser(
        "pde", help="HMC against RNS-HMC on the elliptic PDE inverse problem (the main job)",
        description="HMC and RNS-HMC with the papers' settings (eps=0.16, L=10 jittered, "
                    "s=1000, ridge=1e-7) on the elliptic PDE inverse problem; prints a "
                    "Table-1-style comparison and writes samples, the table and (with "
                    "matplotlib) plots to --out.")
    pde.add_argument("--data", default=None, metavar="ePDE.mat",
                     help="the authors' problem file (default: synthetic data on --n x --n)")
    pde.add_argument("--n", type=int, default=30, help="mesh size (default 30)")
    pde.add_argument("--element", default="Q1", choices=["Q1", "P1"])
    pde.add_argument("--draws", type=int, default=5000)
    pde.add_argument("--tune", type=int, default=5000,
                     help="warm-up; for RNS-HMC the exploration, whose last 80%% train the "
                          "surrogate (default 5000, the papers' protocol)")
    pde.add_argument("--chains", type=int, default=1)
    pde.add_argument("--seed", type=int, default=0)
    pde.add_argument("--out", default="rnshmc_output")
    pde.add_argument("--quick", action="store_true", help="a few-second smoke run")
    pde.add_argument("--no-progress", action="store_true")
    pde.set_defaults(run=demos.pde)
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
    logistic.set_defaults(run=demos.logistic)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
