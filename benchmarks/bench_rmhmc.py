"""RMHMC and RNS-RMHMC on the papers' four problems: ratios measured side by side in one run.

  a. RNS-RMHMC over RMHMC in min(ESS)/s with the papers' settings (docs/algorithms.md section 1:
     RMHMC/RNS-RMHMC eps, L fixed; Fisher metric for the logistic regressions, Gauss-Newton for
     the PDE; RNS-RMHMC with the surrogate's full Hessian (logistic) or its diagonal (PDE),
     exploring by HMC with the HMC settings), 5000 warm-up + 5000 draws, one chain, same seed,
     on the simulated logistic regression (N = 100000, d = 50), Bank Marketing, a9a (60
     features) and the authors' elliptic PDE                              target >= 10x each
     The RNS samplers run with the papers' surrogate (raw inputs, values only; no safeguard
     for an indefinite Hessian, as in the papers: such a row fails and is reported) and with
     rnshmc's (whitened inputs, values and gradients); each is judged.
  b. RMHMC and RNS-RMHMC against HMC and RNS-HMC in min(ESS)/s, the same runs, each ratio
     beside the papers' Table 1 ratio (MISSED: below the papers').
  c. Kernel figures of the Fisher metric on the simulated data (N = 100000, d = 50), medians of
     interleaved rounds (benchmarks/_timing.py): one metric update + Cholesky (``.metric``)
     and the derivative pass (``.log_det_terms`` minus ``.metric``) against the memory floor
     of one read of X (``X @ b``, ``np.sum(X)``) and against their flop count (N d^2 each: the
     syrk pass; the triangular solves of the derivative pass), with NumPy's X^T X (the same
     syrk flops in one BLAS call) as the machine's attainable rate; then seconds per
     generalized-leapfrog step of an RMHMC chain at the papers' eps = 0.54, L = 2 from the
     posterior mode, against the sum of its metric updates and derivative passes (counted).

Sampler timings are single runs (the sampling phase; the RNS samplers' exploration and
training are not timed, as in the papers). RMHMC starts at the posterior mode on the logistic
regressions (--rmhmc-init; from q = 0 it diverges on every proposal at the papers' step sizes
on Bank Marketing and a9a) and at q = 0 on the PDE. --rmhmc-draws / --rmhmc-tune shorten the
RMHMC runs alone: min(ESS)/s is a rate, so the ratios stay comparable (noisier).

Run time of the full protocol on 2 quiet cores: RMHMC ~1 h (simulated, ~0.38 s/iter), ~40 min
(Bank Marketing, ~0.25 s/iter), ~1 h (a9a, ~0.38 s/iter), ~10 min (PDE, ~0.06 s/iter); the
other rows ~30 min together; section c ~1 min. Then

    python benchmarks/bench_rmhmc.py                                  # ~3.5 hours
    python benchmarks/bench_rmhmc.py --rmhmc-draws 1000 --rmhmc-tune 200   # ~1 hour
    python benchmarks/bench_rmhmc.py --problems bank pde --draws 2000 --tune 2000
    python benchmarks/bench_rmhmc.py --skip-samplers --repeats 7           # section c only

On a machine shared with other jobs, OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 steadies the
figures: threaded kernels (the logistic target's OpenMP loops, OpenBLAS) slow down many-fold
when another process holds a core.
"""
import argparse
import itertools
import os
import shlex
import sys
import time

import numpy as np

import rnshmc
from _timing import ratio_line, timed  # benchmarks/ is on sys.path
from rnshmc import papers
from rnshmc._kernels._chain import TRANSITION
from rnshmc._kernels._integrators import GeneralizedLeapfrog
from rnshmc._kernels._riemann import LinearPredictorMetric
from rnshmc._kernels._transition import Chain
from rnshmc.experiments import compare, find_mode, format_table

PROBLEMS = papers.PROBLEMS
TARGET = 10.0
# the rows: Table 1's four, the RNS samplers each with the papers' surrogate (raw inputs, values
# only) and rnshmc's (whitened inputs, values and gradients); row name -> Table 1's method
ROWS = {"HMC": "HMC", "RMHMC": "RMHMC", "RNS-HMC (papers)": "RNS-HMC",
        "RNS-HMC (rnshmc)": "RNS-HMC", "RNS-RMHMC (papers)": "RNS-RMHMC",
        "RNS-RMHMC (rnshmc)": "RNS-RMHMC"}
VARIANTS = ("papers", "rnshmc")


def header(args):
    print("command: " + " ".join(shlex.quote(a) for a in [sys.executable] + sys.argv))
    print(f"rnshmc {rnshmc.__version__}, NumPy {np.__version__}, {os.cpu_count()} CPUs, load "
          f"average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, " + ", ".join(
              f"{name}={os.environ.get(name, '(unset)')}"
              for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")))


def problem_samplers(problem, args):
    """(model, samplers of the four rows, per-row run settings, title); prints the title."""
    if problem == "pde":
        model, description = papers.load_pde(args.pde_data)
        title = f"elliptic PDE, {description}"
    else:
        model = papers.load_logistic(problem, args.seed)
        title = f"{problem}: N={model.X.shape[0]}, d={model.dim}"
    samplers = papers.table1_samplers(model, problem, methods=papers.TABLE1_METHODS,
                                      softabs=args.softabs)
    samplers = {name: sampler for name, sampler in samplers.items() if name in ROWS}
    init = args.rmhmc_init or papers.SETTINGS[problem]["rmhmc_start"]
    title += (f"; {papers.settings_summary(problem)}; {args.tune} warm-up + {args.draws} draws; "
              f"RMHMC from {'the posterior mode' if init == 'mode' else 'q = 0'}")
    print(f"\n{title}")
    settings = papers.rmhmc_row_settings(model, problem, samplers, args.rmhmc_draws,
                                         args.rmhmc_tune, init, out=print)
    return model, samplers, settings, title


def samplers_section(args):
    """a and b: one comparison per problem, then the ratios."""
    rates, problems = {}, [p for p in PROBLEMS if p in args.problems]
    for problem in problems:
        model, samplers, settings, title = problem_samplers(problem, args)
        start = time.perf_counter()
        rows, results = compare(samplers, args.draws, args.tune, rng=args.seed,
                                init=np.zeros(model.dim), settings=settings, on_error="report")
        print(format_table(rows, evals_label="exact evals / min ESS"))
        for row in rows:
            if "error" in row:
                print(f"  {row['method']} FAILED: {row['error']}")
        print(f"  ({time.perf_counter() - start:.0f} s for the {len(rows)} rows)")
        rates[problem] = {r["method"]: (None if "error" in r else r["min_ess_per_second"])
                          for r in rows}

    print(f"\na. RNS-RMHMC over RMHMC in min(ESS)/s, papers' settings (target >= {TARGET:g}x "
          "each)")
    verdicts = {}
    for problem in problems:
        for variant in VARIANTS:
            verdicts[problem, variant] = ratio_report(
                problem, rates[problem], f"RNS-RMHMC ({variant})", "RMHMC", TARGET)
    for variant in VARIANTS:
        ok = [p for p in problems if verdicts[p, variant] is True]
        bad = [p for p in problems if verdicts[p, variant] is not True]
        print(f"  RNS-RMHMC ({variant}): {len(ok)} of {len(problems)} problems met the "
              f"{TARGET:g}x target" + (f"; MISSED or not measured: {', '.join(bad)}" if bad
                                       else ""))

    print("\nb. RMHMC and RNS-RMHMC against HMC and RNS-HMC in min(ESS)/s (target: the papers' "
          "ratio; each RNS-RMHMC against the RNS-HMC with the same surrogate)")
    misses = []
    for problem in problems:
        pairs = [("RMHMC", "HMC")] + [("RMHMC", f"RNS-HMC ({v})") for v in VARIANTS]
        for variant in VARIANTS:
            pairs += [(f"RNS-RMHMC ({variant})", "HMC"),
                      (f"RNS-RMHMC ({variant})", f"RNS-HMC ({variant})")]
        for num, den in pairs:
            if ratio_report(problem, rates[problem], num, den) is not True:
                misses.append(f"{problem} {num} / {den}")
    print(f"  misses or not measured ({len(misses)}): {'; '.join(misses) if misses else 'none'}")


def ratio_report(problem, rates, num, den, target=None):
    """Print rates[num] / rates[den] beside the papers' ratio of the same methods (Table 1);
    ``target`` defaults to the papers' ratio. Returns True (met), False (MISSED) or None (a
    row missing or failed)."""
    table1 = papers.TABLE1[problem]
    reported = table1[ROWS[num]] / table1[ROWS[den]]
    target = reported if target is None else target
    label = f"{problem:<9s} {num} / {den}"
    failed = [name for name in (num, den) if rates.get(name) is None]
    unusable = [name for name in (num, den) if name not in failed
                and not (np.isfinite(rates[name]) and rates[name] > 0)]
    if failed or unusable:
        reason = "; ".join(([", ".join(failed) + " failed"] if failed else []) +
                           ([", ".join(unusable) + " has no positive finite min(ESS)/s "
                             "(a chain that never moved)"] if unusable else []))
        print(f"  {label:<50s}      n/a   (papers {reported:8.4g}x)  NOT MEASURED: {reason}")
        return None
    value = rates[num] / rates[den]
    ok = bool(value >= target)
    print(f"  {label:<50s} {value:8.4g}x  (papers {reported:8.4g}x)  target >= {target:.4g}: "
          f"{'met' if ok else 'MISSED'}")
    return ok


def kernel_section(args):
    """c. the Fisher metric's passes over X and the generalized-leapfrog step, simulated data."""
    model = papers.load_logistic("simulated", args.seed)
    X = model.X
    N, d = X.shape
    metric = LinearPredictorMetric(X, "logistic", prior_precision=1.0 / model.prior_variance)
    mode, _ = find_mode(model, model.fisher_metric)
    b = np.random.default_rng(0).standard_normal(d)
    flops = N * d * d  # the syrk pass: N d (d + 1) / 2 multiply-adds; the trsm pass: N d^2 / 2
    settings = papers.SETTINGS["simulated"]
    chain = Chain(model._ctarget, None,
                  LinearPredictorMetric(X, "logistic", prior_precision=1.0 / model.prior_variance),
                  GeneralizedLeapfrog(d, 1e-9, 50))
    chain.set_position(mode)
    chain.step_size = settings["rm_step_size"]
    L, n_iter, n_burn = settings["rm_n_steps"], args.chain_iterations, 20
    samples = np.empty((max(n_iter, n_burn), d))
    records = np.empty(max(n_iter, n_burn), TRANSITION)
    generator = np.random.default_rng(args.seed)
    chain.run(generator, n_burn, L, False, samples, records)  # from the mode to typical points
    records = records[:n_iter]

    # the metric skips refactorising at the point it is current at: alternate two points
    points = itertools.cycle([mode, mode + 1e-3 * b])
    names = ("metric", "log_det_terms", "X @ b", "np.sum(X)", "X.T @ X", "step")
    t = {name: [] for name in names}
    per_step = {"updates": [], "derivatives": [], "iterations": [], "restarts": []}
    for _ in range(args.repeats):
        t["metric"].append(timed(lambda: metric.metric(next(points)), 6))
        t["log_det_terms"].append(timed(lambda: metric.log_det_terms(next(points)), 6))
        t["X @ b"].append(timed(lambda: X @ b, 10))
        t["np.sum(X)"].append(timed(lambda: np.sum(X), 10))
        t["X.T @ X"].append(timed(lambda: X.T @ X, 5))
        g = chain.metric
        updates, derivatives = g.n_updates, g.n_derivative_updates
        start = time.perf_counter()
        chain.run(generator, n_iter, L, False, samples, records)
        seconds = time.perf_counter() - start
        steps = int(records["n_steps"][:n_iter].sum())
        t["step"].append(seconds / steps)
        per_step["updates"].append((g.n_updates - updates) / steps)
        per_step["derivatives"].append((g.n_derivative_updates - derivatives) / steps)
        per_step["iterations"].append(records["solver_iterations"].sum() / steps)
        # a transition after a rejection factorises G and derives its terms at its start state
        # again (after an acceptance both are current from the trajectory's end)
        per_step["restarts"].append((~records["accepted"][:n_iter].astype(bool)).sum() / steps)
    t = {name: np.array(v) for name, v in t.items()}
    per_step = {name: np.array(v) for name, v in per_step.items()}
    derivative = t["log_det_terms"] - t["metric"]  # the derivative pass alone
    # Per step: U metric updates = Q position iterations + 1 (at q') + R (R: the transitions
    # after a rejection, which factorise G at their start state again, per step); D
    # derivative passes = 1 + R; P = iterations - Q momentum iterations, each one nu (two
    # passes over X: A v, A^T w), plus the explicit half step's nu and one gradient (about
    # one pass).
    U, D, I, R = (per_step[k] for k in ("updates", "derivatives", "iterations", "restarts"))
    Q = U - 1.0 - R
    P = I - Q
    reads = 2.0 * (P + 1.0) + 1.0
    model_step = U * t["metric"] + D * derivative + reads * t["X @ b"]
    step_flops = (U + D) * flops + reads * 2.0 * N * d

    def ms(x):
        return f"{np.median(x) * 1e3:8.2f} ms (min..max {x.min() * 1e3:.2f}..{x.max() * 1e3:.2f})"

    def rate(x, n=flops):
        return f"{np.median(n / x) / 1e9:6.2f} GFLOP/s"

    print(f"\nc. Fisher metric kernels, simulated data N={N}, d={d} (X: {X.nbytes / 1e6:.0f} MB; "
          f"N d^2 = {flops / 1e9:.2f} GFLOP), median of {args.repeats} interleaved rounds")
    print(f"  one read of X:  X @ b                       {ms(t['X @ b'])}  "
          f"{X.nbytes / np.median(t['X @ b']) / 1e9:5.1f} GB/s")
    print(f"                  np.sum(X)                   {ms(t['np.sum(X)'])}  "
          f"{X.nbytes / np.median(t['np.sum(X)']) / 1e9:5.1f} GB/s")
    print(f"  NumPy X.T @ X (one syrk, N d^2 flops)       {ms(t['X.T @ X'])}  {rate(t['X.T @ X'])}")
    print(f"  metric update + Cholesky (.metric)          {ms(t['metric'])}  {rate(t['metric'])}")
    print(f"  derivative pass (.log_det_terms - .metric)  {ms(derivative)}  {rate(derivative)}")
    floor = np.minimum(t["X @ b"], t["np.sum(X)"])
    ratio_line("metric update+Cholesky / one read of X (memory floor)", t["metric"], floor)
    ratio_line("metric update+Cholesky / NumPy X.T @ X (same flops)", t["metric"], t["X.T @ X"])
    ratio_line("derivative pass / metric update+Cholesky (same flops)", derivative, t["metric"])
    print(f"  RMHMC chain at eps={settings['rm_step_size']}, L={L} fixed, {n_iter} transitions "
          f"per round (after {n_burn} from the mode); per generalized-leapfrog step (medians):")
    print(f"    {np.median(I):.1f} fixed-point iterations ({np.median(Q):.1f} position, "
          f"{np.median(P):.1f} momentum); {np.median(U):.2f} metric updates and "
          f"{np.median(D):.2f} derivative passes (N d^2 flops each; {np.median(R):.2f} of each "
          f"at a transition's start after a rejection); "
          f"{np.median(reads):.1f} reads of X by nu and the gradient (2 N d flops each)")
    print(f"    seconds per step {ms(t['step'])}: {np.median(step_flops) / 1e9:.2f} GFLOP, "
          f"{rate(t['step'], step_flops)}")
    ratio_line("step / its parts (updates, passes, reads timed above)", t["step"], model_step)
    ratio_line("step / its flops at NumPy X.T @ X's rate", t["step"],
               step_flops / flops * t["X.T @ X"])
    ratio_line("step / one read of X", t["step"], floor)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--problems", nargs="+", default=list(PROBLEMS), choices=PROBLEMS)
    parser.add_argument("--draws", type=int, default=papers.PROTOCOL["draws"])
    parser.add_argument("--tune", type=int, default=papers.PROTOCOL["tune"])
    parser.add_argument("--rmhmc-draws", type=int, default=None,
                        help="draws of the RMHMC runs (default --draws)")
    parser.add_argument("--rmhmc-tune", type=int, default=None,
                        help="burn-in of the RMHMC runs (default --tune)")
    parser.add_argument("--rmhmc-init", choices=("mode", "zero"), default=None,
                        help="RMHMC's start (default: the mode for the logistic regressions, "
                        "q = 0 for the PDE)")
    parser.add_argument("--softabs", type=float, default=None,
                        help="RNS-RMHMC's SoftAbs sharpness (default none, as in the papers)")
    parser.add_argument("--pde-data", default=None, help="ePDE.mat (default: the papers' data)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=7, help="rounds of section c")
    parser.add_argument("--chain-iterations", type=int, default=10,
                        help="RMHMC transitions per round in section c")
    parser.add_argument("--skip-samplers", action="store_true", help="skip sections a and b")
    parser.add_argument("--skip-kernels", action="store_true", help="skip section c")
    args = parser.parse_args()
    header(args)
    start = time.perf_counter()
    if not args.skip_samplers:
        samplers_section(args)
    if not args.skip_kernels:
        kernel_section(args)
    print(f"\ntotal {time.perf_counter() - start:.0f} s; load average now "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
