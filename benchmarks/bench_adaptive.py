"""ARNS-HMC: the cost from a cold start to min ESS 1000, and of one online update.

  a. Cost from a cold start to min ESS >= 1000, every exact evaluation counted from the first
     iteration (a density and a gradient one each: forward and adjoint PDE solves), all
     chains pooled (4 chains, each RNS chain explores and fits its own surrogate):
       HMC, Stan-style warm-up (step size and diagonal mass matrix) of 200 or 1000
         iterations, at its best L and warm-up;
       RNS-HMC with the papers' protocol (5000 exploration iterations at the papers' fixed
         step size and L, 4000 training states, values only, raw inputs, s = 1000);
       RNS-HMC and ARNS-HMC with rnshmc's defaults at the given exploration lengths.
     Each run draws ``--draws`` per chain; the cost to min ESS 1000 is the cost before
     sampling plus the sampling phase's cost scaled by 1000 / min ESS (the sampling phase's
     cost and ESS both grow linearly with its length), with the run's measured min ESS shown.
     On the authors' PDE in solves (target: ARNS-HMC <= 1/5 of HMC's), on the simulated
     logistic regression (N = 100000, d = 50) in seconds (target <= 1/3 of HMC's).

  b. One online update of the output weights at s hidden units (default 1000; target <= 0.5 ms
     at s = 1000): ``OnlineLeastSquares.update`` per row, amortised over blocks of 64 rows
     (the recursive-least-squares branch after a ridge start: Theta h and a rank-one update
     of the s x s triangle, plus the normal matrix kept for the drift refresh, which takes
     the rows 64 at a time by one dsyrk), ``RandomNetworkSurrogate.partial_fit`` of one point
     (with the hidden layer and its checks), and a refit of the same data
     (``RandomNetworkSurrogate.fit``, values only) for comparison; medians of interleaved
     rounds (benchmarks/_timing.py).

  c. Acceptance against the number of training points, at the papers' step size and L
     (fixed, no trust watch): ARNS-HMC from a ``--points-explore``-iteration exploration (the
     last 80% of its states are its first points; then every evaluated proposal under the
     ceiling joins, examples/adaptive.py's Fig. 7), its draws binned by the number of points
     their weights were fitted to; against RNS-HMC fitted once to N exploration states
     (values and gradients, ``n_train`` = N of N / 0.8 exploration iterations), acceptance of
     its sampling draws. RNS-HMC is fitted to the same number of points, not ARNS-HMC's own
     ones: the online weights equal the batch fit on the same points (tests/kernels/test_online.py,
     1e-8), so a refit of those would only measure the install lag. With each, the exact
     evaluations spent to have the N points (ARNS-HMC: exploration plus one density per
     sampling iteration until the weights in use have N points; RNS-HMC: its exploration).

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/bench_adaptive.py
        [--sections a b c] [--problems pde logistic] [--draws 2000] [--tunes 200 500]
        [--hmc-lengths 5 10 20 40] [--hmc-tunes 200 1000] [--points 40 100 200 500 1000 2000]
"""
import argparse
import os
import warnings

import numpy as np

import rnshmc
from _common import cost_to_min_ess, load_problem  # benchmarks/ is on sys.path
from _timing import ratio_line, rounds
from rnshmc import papers
from rnshmc._kernels._online import OnlineLeastSquares

TARGET_MS = 0.5
BLOCK = 64  # as the estimator's pending-row buffer


def update_section(args):
    rng = np.random.default_rng(args.seed)
    s, dim, n = args.n_hidden, 10, args.fitted_points
    Q = rng.standard_normal((n + 1, dim))
    t = 0.5 * np.sum(Q ** 2, axis=1)
    surrogate = rnshmc.RandomNetworkSurrogate(dim, n_hidden=s, ridge=1e-6, whiten=True, rng=0)
    surrogate.fit(Q[:n], t[:n], online=True)
    H = np.log1p(np.exp(rng.standard_normal((n, s))))
    estimator = OnlineLeastSquares.from_rows(H, rng.standard_normal(n), ridge=1e-6)
    # a block of BLOCK rows per call: the normal equations take the rows BLOCK at a time, so
    # the per-row time of a block is the amortised cost
    block = np.ascontiguousarray(H[:BLOCK])
    targets = rng.standard_normal(BLOCK)
    refit = rnshmc.RandomNetworkSurrogate(dim, n_hidden=s, ridge=1e-6, whiten=True, rng=0)
    times = rounds({
        "update": lambda: estimator.update(block, targets),
        "partial_fit": lambda: surrogate.partial_fit(Q[n], t[n]),
        "refit": lambda: refit.fit(Q[:n], t[:n]),
    }, repeats=args.repeats, inner=5)
    times["update"] = times["update"] / BLOCK
    print(f"b. one online update at s = {s} ({n} points fitted first), median of "
          f"{args.repeats} interleaved rounds of 5 calls ({BLOCK} rows per update call)")
    for name, label in (("update", "OnlineLeastSquares.update, per row"),
                        ("partial_fit", "partial_fit, one point (values)"),
                        ("refit", f"fit of {n} points (values)")):
        x = times[name] * 1e3
        print(f"  {label:40s} {np.median(x):9.3f} ms (min..max {x.min():.3f}..{x.max():.3f})")
    median = np.median(times["update"]) * 1e3
    print(f"  one update {median:.3f} ms: target <= {TARGET_MS} ms "
          f"{'met' if median <= TARGET_MS else 'MISSED'}")
    ratio_line("refit / one update", times["refit"], times["update"])


def cold_start_section(problem, args):
    model, title, settings = load_problem(problem, args.seed)
    unit, column = ("solves", 0) if problem == "pde" else ("seconds", 1)
    print(f"\na. {title}: cost from a cold start to min ESS 1000 ({args.chains} chains x "
          f"{args.draws} draws per run; exact evaluations = densities + gradients)", flush=True)
    kwargs = dict(draws=args.draws, chains=args.chains, rng=args.seed, progress=False)
    runs = {}
    for tune in args.hmc_tunes:  # a short warm-up is HMC's best chance at a low total too
        for L in args.hmc_lengths:
            runs[f"HMC, Stan warm-up {tune}, L={L}"] = (rnshmc.HMC(model, n_steps=L), tune)
    runs["RNS-HMC, papers' protocol"] = (rnshmc.RNSHMC(
        model, **papers.rns_options(settings, papers_surrogate=True, papers_algorithm=True,
                                    surrogate=dict(n_train=papers.PROTOCOL["n_train"]))),
        papers.PROTOCOL["tune"])
    for tune in args.tunes:
        runs[f"RNS-HMC, defaults, tune {tune}"] = (rnshmc.RNSHMC(model), tune)
        runs[f"ARNS-HMC, defaults, tune {tune}"] = (rnshmc.ARNSHMC(model), tune)
    costs = {}
    print(f"  {'method':34s} {'to min ESS 1000: evals':>22s} {'seconds':>8s}  {'run min ESS':>11s}"
          f"  {'acceptance':>10s}  notes")
    for label, (sampler, tune) in runs.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = sampler.sample(tune=tune, init=np.zeros(model.dim), **kwargs)
        evals, seconds, ess = cost_to_min_ess(result)
        costs[label] = (evals, seconds)
        notes = []
        if "surrogate_n_steps" in result:
            notes.append(f"L {sorted(set(result.surrogate_n_steps.tolist()))}")
            if result.n_refits.sum() or result.fallback.any():
                notes.append(f"refits {result.n_refits.tolist()}, fallback {result.fallback.tolist()}")
        notes += [str(w.message)[:60] for w in caught[:1]]
        print(f"  {label:34s} {evals:22.0f} {seconds:8.1f}  {ess:11.0f}  "
              f"{np.mean(result.acceptance_rate):10.2f}  {'; '.join(notes)}", flush=True)
    hmc = min((c for k, c in costs.items() if k.startswith("HMC")), key=lambda c: c[column])
    target = 5.0 if problem == "pde" else 3.0
    for label, cost in costs.items():
        if label.startswith("ARNS") or label.startswith("RNS"):
            ratio = hmc[column] / cost[column]
            print(f"  {label}: {ratio:.2f}x fewer {unit} than HMC at its best"
                  + (f" (target >= {target:.0f}x: {'met' if ratio >= target else 'MISSED'})"
                     if label.startswith("ARNS") else ""))


def points_section(problem, args):
    model, title, settings = load_problem(problem, args.seed)
    fixed = papers.rns_options(settings, papers_algorithm=True)
    kwargs = dict(chains=args.chains, rng=args.seed, progress=False, init=np.zeros(model.dim))
    print(f"\nc. {title}: acceptance against training points (papers' step size "
          f"{settings['step_size']} and L = {settings['n_steps']}, s = {settings['n_hidden']}; "
          f"{args.chains} chains; median over chains, min..max)", flush=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # acceptance collapse at few points is the point here
        arns = rnshmc.ARNSHMC(model, **fixed).sample(draws=args.points_draws,
                                                     tune=args.points_explore, **kwargs)
    points = papers.training_points(arns)
    explore_evals = arns.n_density_evals - arns.n_density_evals_sampling \
        + arns.n_gradient_evals - arns.n_gradient_evals_sampling
    print(f"  {'points':>6s}  {'ARNS-HMC acceptance':>22s} {'exact evals':>11s}   "
          f"{'RNS-HMC acceptance':>22s} {'exact evals':>11s}")
    grid = [n for n in args.points if n >= points.min()]
    for lo, hi in zip(grid, grid[1:] + [np.inf]):
        per_chain, evals = [], []
        for c in range(args.chains):
            where = (points[c] >= lo) & (points[c] < hi)
            if where.any():
                per_chain.append(arns.accept_prob[c][where].mean())
                # exploration plus one density per sampling iteration up to the first such draw
                evals.append(explore_evals[c] + np.argmax(where))
        arns_cell = (f"{np.median(per_chain):5.2f} ({min(per_chain):.2f}..{max(per_chain):.2f})"
                     f" {len(per_chain):>2d}ch" if per_chain else f"{'-':>22s}")
        arns_evals = f"{np.median(evals):11.0f}" if evals else f"{'-':>11s}"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rns = rnshmc.RNSHMC(model, **papers.merged(fixed, surrogate=dict(n_train=lo))).sample(
                draws=args.points_rns_draws, tune=int(np.ceil(lo / 0.8)), **kwargs)
        acc = rns.acceptance_rate
        rns_evals = np.median(rns.n_density_evals - rns.n_density_evals_sampling
                              + rns.n_gradient_evals - rns.n_gradient_evals_sampling)
        print(f"  {lo:6d}  {arns_cell:>22s} {arns_evals}   {np.median(acc):5.2f} "
              f"({acc.min():.2f}..{acc.max():.2f})      {rns_evals:11.0f}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sections", nargs="+", default=["a", "b", "c"],
                        choices=["a", "b", "c"])
    parser.add_argument("--problems", nargs="+", default=["pde", "logistic"],
                        choices=["pde", "logistic"])
    parser.add_argument("--draws", type=int, default=2000)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--tunes", type=int, nargs="+", default=[200, 500])
    parser.add_argument("--hmc-lengths", type=int, nargs="+", default=[5, 10, 20, 40])
    parser.add_argument("--hmc-tunes", type=int, nargs="+", default=[200, 1000])
    parser.add_argument("--n-hidden", type=int, default=1000)
    parser.add_argument("--fitted-points", type=int, default=2000,
                        help="points fitted before the timed update (b)")
    parser.add_argument("--points", type=int, nargs="+",
                        default=[40, 100, 200, 500, 1000, 2000], help="(c)")
    parser.add_argument("--points-explore", type=int, default=50, help="(c)")
    parser.add_argument("--points-draws", type=int, default=2000, help="ARNS-HMC draws (c)")
    parser.add_argument("--points-rns-draws", type=int, default=500, help="RNS-HMC draws (c)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"rnshmc {rnshmc.__version__}, {os.cpu_count()} CPUs, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}, OPENBLAS_NUM_THREADS="
          f"{os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}")
    if "a" in args.sections:
        for problem in args.problems:
            cold_start_section(problem, args)
    if "b" in args.sections:
        update_section(args)
    if "c" in args.sections:
        for problem in args.problems:
            points_section(problem, args)


if __name__ == "__main__":
    main()
