"""Command line: ``rnshmc demo pde`` / ``rnshmc demo logistic`` / ``rnshmc serve SURROGATE.npz``
/ ``rnshmc info`` (also ``python -m rnshmc``)."""
import argparse
import math
import sys

from . import demos
from .demos import CommandLineError
from .serve import load_surrogate, serve_surrogate


def main(argv=None):
    """Entry point of ``python -m rnshmc`` and the ``rnshmc`` script.

    Parameters
    ----------
    argv : list of str or None
        The arguments (None: ``sys.argv[1:]``).

    Returns
    -------
    int
        The exit code (0). A command line that cannot work exits with code 2 and one line
        of error, before anything is written: a flag out of its range or unknown to the
        subcommand, with the subcommand's usage (argparse); a file that cannot be read or
        an --out that cannot be written, alone.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "demo":
        problem = demos.argument_error(args)
        if problem:  # (flags that contradict each other: the subcommand's usage says why)
            args.subparser.error(problem)
    try:  # inputs that cannot work are reported in one line, before any sampling
        return args.run(args)
    except demos.CommandLineError as error:
        parser.exit(2, f"rnshmc: error: {error}\n")


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that reports the arguments it does not know itself.

    argparse hands a subcommand's unknown arguments up to the top-level parser, whose error
    shows the top-level usage (``rnshmc demo pde --fast`` printed ``usage: rnshmc [-h]
    [--version] {demo,serve,info} ...``, which lists none of the flags meant); the
    subcommand that received them reports them here, with its own usage.
    """

    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras


def integer(minimum=None, why=""):
    """A ``type=`` for an integer flag of at least ``minimum`` (None: any; a range that
    depends on other flags is checked after parsing, in ``demos.argument_error``); ``why``:
    the reason for the minimum, shown in the error."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
        if minimum is not None and value < minimum:
            raise argparse.ArgumentTypeError(f"must be an integer >= {minimum}{why}, got {value}")
        return value
    return parse


def positive_real(text):
    """A ``type=`` for a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


# the ranges the runs need (a value outside fails inside the run, after --out is made)
DRAWS = integer(4, " (ESS and R-hat need 4 draws per chain)")
CHAINS = integer(1)
SEED = integer(0, " (NumPy seeds are non-negative)")


# Wall seconds of each run on two cores, rounded (medians of 3 runs of `rnshmc demo ...
# --no-progress`, from the shell to the exit, on a 2-core development VM: 15.5, 12.1, 54.2,
# 5.9, 27.9 and 3.0 s; runs varied by up to 20%, and on another day --papers took 54-68 s,
# median 61, as long as the version before this one did then). The README states the same;
# the help quotes them so that a user knows what to expect before starting one.
MEASURED_SECONDS = {"pde": 15, "pde --quick": 12, "pde --papers": 60,
                    "pde --papers --quick": 6, "logistic": 30, "logistic --quick": 3}


def build_parser():
    """The argument parser of the ``rnshmc`` command.

    Returns
    -------
    argparse.ArgumentParser
        Each subcommand's parser checks its flags' ranges (``type=``) and reports unknown
        flags with its own usage; ``demos.argument_error`` checks the flags against each
        other after parsing (``main``).
    """
    from . import __version__, papers
    defaults, quick = demos.DEFAULTS, demos.QUICK
    simulated = papers.SETTINGS["simulated"]
    times = MEASURED_SECONDS
    parser = _Parser(prog="rnshmc", description="rnshmc demonstrations")
    parser.add_argument("--version", action="version", version=f"rnshmc {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run a demonstration")
    which = demo.add_subparsers(dest="demo", required=True)
    main_job, protocol = defaults["pde"], defaults["pde --papers"]
    pde = which.add_parser(
        "pde", help="the elliptic PDE inverse problem sampled end to end (the main job)",
        description="Samples the elliptic PDE inverse problem with rnshmc.sample (the sampler "
                    "rnshmc picks, with its defaults) and with HMC at its best (Stan warm-up "
                    f"200, L=10), {main_job['chains']} chains each until min bulk ESS "
                    f"{main_job['ess']} and R-hat <= 1.01, and prints the PDE solves and "
                    "seconds each took from the first iteration; writes samples, the table "
                    "and (with matplotlib) plots to --out. "
                    f"About {times['pde']} s on two cores ({times['pde --quick']} s with "
                    "--quick). --papers runs the papers' protocol instead (HMC against "
                    "RNS-HMC, eps=0.16, L=10 jittered, s=1000, ridge=1e-7, "
                    f"{protocol['tune']} warm-up + {protocol['draws']} draws, a "
                    "Table-1-style comparison of the sampling phase; about "
                    f"{times['pde --papers']} s on two cores, {times['pde --papers --quick']} s "
                    "with --quick).")
    pde.add_argument("--papers", action="store_true",
                     help="the papers' protocol: HMC and RNS-HMC for --draws after --tune")
    pde.add_argument("--ess", type=integer(1), default=None,
                     help=f"the min bulk ESS both runs go to (default {main_job['ess']}; "
                          f"--quick: {quick['pde']['ess']}; not with --papers)")
    pde.add_argument("--data", default=None, metavar="ePDE.mat",
                     help="the authors' problem file (default: synthetic data on --n x --n)")
    pde.add_argument("--n", type=integer(), default=None,
                     help=f"mesh size of the synthetic problem (default {main_job['n']}; "
                          f"--quick: {quick['pde']['n']}, with --papers "
                          f"{quick['pde --papers']['n']}; at least "
                          f"{demos.SMALLEST_MESH['Q1']} for Q1, {demos.SMALLEST_MESH['P1']} "
                          "for P1)")
    pde.add_argument("--element", default=None, choices=["Q1", "P1"],
                     help="finite elements of the synthetic problem: bilinear quadrilaterals "
                          "(Q1, the papers', the default) or linear triangles (P1)")
    add_run_options(
        pde, "pde --papers", chains_help=f"chains per sampler (default {main_job['chains']}; "
                                         f"with --papers {protocol['chains']})",
        draws_help="with --papers: kept draws per chain",
        tune=integer(2, " (RNS-HMC's exploration)"),
        tune_help="with --papers: warm-up; for RNS-HMC the exploration, whose last 80%% train "
                  "the surrogate",
        quick_help=f"a shorter run: the main job on the {quick['pde']['n']}x"
                   f"{quick['pde']['n']} mesh (the smallest on which rnshmc.sample still "
                   f"picks a surrogate) to min ESS {quick['pde']['ess']}, about "
                   f"{times['pde --quick']} s on two cores; with --papers the "
                   f"{quick['pde --papers']['n']}x{quick['pde --papers']['n']} mesh, "
                   f"{quick['pde --papers']['tune']} warm-up + {quick['pde --papers']['draws']} "
                   f"draws and {quick['pde --papers']['n_hidden']} hidden units, about "
                   f"{times['pde --papers --quick']} s (with --data, whose mesh is the "
                   "file's, the rest only; options given still apply)")
    pde.set_defaults(run=demos.pde, subparser=pde)
    logistic = which.add_parser(
        "logistic", help="HMC on the papers' simulated logistic regression",
        description="HMC with the papers' settings on their simulated logistic regression; "
                    "prints acceptance, ESS, R-hat and timings and writes the samples to "
                    f"--out. About {times['logistic']} s on two cores "
                    f"({times['logistic --quick']} s with --quick).")
    n, dim = papers.SIMULATED_DATA["n"], papers.SIMULATED_DATA["dim"]
    fast = quick["logistic"]
    logistic.add_argument("--n", type=integer(1), default=None,
                          help=f"rows of data (default {n}; --quick: {fast['n']})")
    logistic.add_argument("--dim", type=integer(1), default=dim,
                          help=f"coefficients (default {dim})")
    logistic.add_argument("--step-size", type=positive_real, default=None,
                          help=f"leapfrog step size (default the papers' "
                               f"{simulated['step_size']}; --quick: adapted, as "
                               f"{simulated['step_size']} is tuned for N={n})")
    logistic.add_argument("--n-steps", type=integer(1), default=simulated["n_steps"],
                          help=f"leapfrog steps, jittered (default the papers' "
                               f"{simulated['n_steps']})")
    add_run_options(
        logistic, "logistic", chains_help=f"chains (default {defaults['logistic']['chains']})",
        draws_help="kept draws per chain", tune=integer(0), tune_help="warm-up iterations",
        quick_help=f"a shorter run: {fast['n']} rows, {fast['tune']} warm-up + "
                   f"{fast['draws']} draws, the step size adapted; about "
                   f"{times['logistic --quick']} s on two cores (options given still apply)")
    logistic.set_defaults(run=demos.logistic, subparser=logistic)
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
    serve.add_argument("--chain", type=integer(0), default=0,
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


def add_run_options(parser, run, chains_help, draws_help, tune, tune_help, quick_help):
    """The options every demo has.

    Parameters
    ----------
    parser : argparse.ArgumentParser
        The demo's parser.
    run : str
        The key of ``demos.DEFAULTS`` and ``demos.QUICK`` whose draws and warm-up the help
        quotes.
    chains_help, draws_help, tune_help, quick_help : str
        The help of --chains, --draws (the defaults are appended), --tune (likewise) and
        --quick.
    tune : callable
        The ``type=`` of --tune (its smallest value differs between the demos).

    Notes
    -----
    The defaults are None here (``settings`` fills them in), so that a value given on the
    command line always wins over --quick's (``demos.settings``).
    """
    default, quick = demos.DEFAULTS[run], demos.QUICK[run]
    parser.add_argument("--draws", type=DRAWS, default=None,
                        help=f"{draws_help} (default {default['draws']}; --quick: "
                             f"{quick['draws']})")
    parser.add_argument("--tune", type=tune, default=None,
                        help=f"{tune_help} (default {default['tune']}; --quick: "
                             f"{quick['tune']})")
    parser.add_argument("--chains", type=CHAINS, default=None, help=chains_help)
    parser.add_argument("--seed", type=SEED, default=0,
                        help="random seed of the data and the chains (default 0)")
    parser.add_argument("--out", default="rnshmc_output",
                        help="folder for the outputs (default rnshmc_output; created if needed)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace outputs of an earlier run in --out (default: refuse)")
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--no-progress", action="store_true",
                        help="no progress bars (they show each chain's iterations)")


if __name__ == "__main__":
    sys.exit(main())
