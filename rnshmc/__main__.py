"""Command line: ``rnshmc demo pde`` / ``rnshmc demo logistic`` / ``rnshmc serve SURROGATE.npz``
/ ``rnshmc info`` (also ``python -m rnshmc``)."""
import argparse
import sys

from . import demos
from .demos import CommandLineError
from .serve import load_surrogate, serve_surrogate


def main(argv=None):
    """Entry point of ``python -m rnshmc`` and the ``rnshmc`` script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:  # inputs that cannot work are reported in one line, before any sampling
        if args.command == "demo":
            demos.check_output_folder(args)
        return args.run(args)
    except demos.CommandLineError as error:
        parser.exit(2, f"rnshmc: error: {error}\n")


def build_parser():
    """The argument parser of the ``rnshmc`` command."""
    from . import __version__, papers
    simulated = papers.SETTINGS["simulated"]
    parser = argparse.ArgumentParser(prog="rnshmc", description="rnshmc demonstrations")
    parser.add_argument("--version", action="version", version=f"rnshmc {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run a demonstration")
    which = demo.add_subparsers(dest="demo", required=True)
    pde = which.add_parser(
        "pde", help="the elliptic PDE inverse problem sampled end to end (the main job)",
        description="Samples the elliptic PDE inverse problem with rnshmc.sample (the sampler "
                    "rnshmc picks, with its defaults) and with HMC at its best (Stan warm-up "
                    "200, L=10), 4 chains each until min bulk ESS 1000 and R-hat <= 1.01, "
                    "and prints the PDE solves and seconds each took from the first "
                    "iteration; writes samples, the table and (with matplotlib) plots to "
                    "--out. About 10 s on two cores. --papers runs the papers' protocol "
                    "instead (HMC against RNS-HMC, eps=0.16, L=10 jittered, s=1000, "
                    "ridge=1e-7, a Table-1-style comparison of the sampling phase; about "
                    "25 s).")
    pde.add_argument("--papers", action="store_true",
                     help="the papers' protocol: HMC and RNS-HMC for --draws after --tune")
    pde.add_argument("--ess", type=int, default=None,
                     help="the min bulk ESS both runs go to (default 1000; --quick: 400)")
    pde.add_argument("--data", default=None, metavar="ePDE.mat",
                     help="the authors' problem file (default: synthetic data on --n x --n)")
    pde.add_argument("--n", type=int, default=None,
                     help=f"mesh size of the synthetic problem (default "
                          f"{papers.SYNTHETIC_PDE['n']}; --quick: 12)")
    pde.add_argument("--element", default="Q1", choices=["Q1", "P1"],
                     help="finite elements of the synthetic problem: bilinear quadrilaterals "
                          "(Q1, the papers') or linear triangles (P1)")
    protocol = papers.PROTOCOL
    add_run_options(pde, draws=protocol["draws"], tune=protocol["tune"], quick_draws=400,
                    quick_tune=400,
                    tune_help=f"with --papers: warm-up; for RNS-HMC the exploration, whose "
                              f"last 80%% train the surrogate (default {protocol['tune']}, the "
                              "papers' protocol; --quick: 400)", chains=4)
    pde.set_defaults(run=demos.pde)
    logistic = which.add_parser(
        "logistic", help="HMC on the papers' simulated logistic regression",
        description="HMC with the papers' settings on their simulated logistic regression; "
                    "prints acceptance, ESS, R-hat and timings and writes the samples to --out.")
    n, dim = papers.SIMULATED_DATA["n"], papers.SIMULATED_DATA["dim"]
    logistic.add_argument("--n", type=int, default=None,
                          help=f"rows of data (default {n}; --quick: 20000)")
    logistic.add_argument("--dim", type=int, default=dim, help=f"coefficients (default {dim})")
    logistic.add_argument("--step-size", type=float, default=None,
                          help=f"leapfrog step size (default the papers' "
                               f"{simulated['step_size']}; --quick: adapted, as "
                               f"{simulated['step_size']} is tuned for N={n})")
    logistic.add_argument("--n-steps", type=int, default=simulated["n_steps"],
                          help=f"leapfrog steps, jittered (default the papers' "
                               f"{simulated['n_steps']})")
    add_run_options(logistic, draws=2000, tune=1000, quick_draws=300, quick_tune=300,
                    tune_help="warm-up iterations (default 1000; --quick: 300)")
    logistic.set_defaults(run=demos.logistic)
    serve = sub.add_parser(
        "serve", help="serve a fitted surrogate as an UM-Bridge model",
        description="Serve the random-network surrogate saved in SURROGATE.npz as an UM-Bridge "
                    "model (needs pip install rnshmc[umbridge]): input sizes [dim], output "
                    "sizes [1], output the log density -z(q) (minus the surrogate's "
                    "potential), with gradient. SURROGATE.npz is a saved RNS-HMC result, or "
                    "rnshmc.SampleResult(surrogate=surrogate.get_state()).save(path). Serves "
                    "until Ctrl-C.")
    serve.add_argument("surrogate", metavar="SURROGATE.npz",
                       help="saved RNS-HMC result (or SampleResult) holding the surrogate")
    serve.add_argument("--port", type=int, default=4242,
                       help="TCP port (default 4242; 0 picks a free one)")
    serve.add_argument("--host", default="127.0.0.1",
                       help="address to listen on (default 127.0.0.1: this machine only; "
                            "0.0.0.0 serves the network)")
    serve.add_argument("--name", default="surrogate",
                       help="the model name clients ask for (default surrogate)")
    serve.add_argument("--chain", type=int, default=0,
                       help="which chain's surrogate of a result of several chains (default 0)")
    serve.set_defaults(run=_serve)
    info = sub.add_parser(
        "info", help="print the versions, build and thread pools rnshmc runs with",
        description="Print rnshmc's version, Python, NumPy and SciPy, the BLAS and OpenMP "
                    "libraries threadpoolctl sees, whether the kernels were built with OpenMP "
                    "and bounds checks, and the CPU count (for bug reports).")
    info.set_defaults(run=_info)
    return parser


def _info(args):
    """``rnshmc info``: rnshmc.show_versions()."""
    from .versions import show_versions
    show_versions()
    return 0


def _serve(args):
    """``rnshmc serve SURROGATE.npz``: serve the file's surrogate until Ctrl-C."""
    if not 0 <= args.port <= 65535:
        raise CommandLineError(f"--port must be from 0 to 65535, got {args.port}")
    try:
        surrogate = load_surrogate(args.surrogate, chain=args.chain)
    except FileNotFoundError:
        raise CommandLineError(f"{args.surrogate!r}: no such file") from None
    except OSError as error:
        raise CommandLineError(f"cannot read {args.surrogate!r}: "
                               f"{error.strerror or error}") from None
    except ValueError as error:
        raise CommandLineError(str(error)) from None
    try:
        server = serve_surrogate(surrogate, port=args.port, host=args.host, name=args.name,
                                 block=False)
    except (ImportError, OSError, ValueError) as error:
        raise CommandLineError(str(error)) from None
    print(f"rnshmc: serving the surrogate of {args.surrogate} (dim {surrogate.dim}) as the "
          f"UM-Bridge model {args.name!r} at {server.url}; Ctrl-C stops", flush=True)
    server.wait()
    return 0


def add_run_options(parser, draws, tune, quick_draws, quick_tune, tune_help, chains=1):
    """The options every demo has. Defaults that --quick shortens are None here, so that a
    value given on the command line always wins (``demos.run_lengths``)."""
    parser.add_argument("--draws", type=int, default=None,
                        help=f"kept draws per chain (default {draws}; --quick: {quick_draws})")
    parser.add_argument("--tune", type=int, default=None, help=tune_help)
    parser.add_argument("--chains", type=int, default=None,
                        help=f"chains per sampler (default {chains}"
                             + ("; with --papers 1)" if chains != 1 else ")"))
    parser.add_argument("--seed", type=int, default=0,
                        help="random seed of the data and the chains (default 0)")
    parser.add_argument("--out", default="rnshmc_output",
                        help="folder for the outputs (default rnshmc_output; created if needed)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace outputs of an earlier run in --out (default: refuse)")
    parser.add_argument("--quick", action="store_true",
                        help="a few-second smoke run: shorter defaults (the options above "
                             "still apply when given)")
    parser.add_argument("--no-progress", action="store_true",
                        help="no progress bars (they show each chain's iterations)")
    parser.set_defaults(default_lengths=(draws, tune), quick_lengths=(quick_draws, quick_tune))


if __name__ == "__main__":
    sys.exit(main())
