"""RNS-HMC against HMC on the papers' logistic regressions: ratios side by side.

The HMC baseline is the efficient one: the same C kernels, the gradient cached between steps.

  1. Papers' settings (docs/algorithms.md section 1; a9a at eps = 0.008, see
     rnshmc.papers.SETTINGS), 5000 warm-up + 5000 draws, one chain, same seed:
     min(ESS)/s of RNS-HMC over HMC (targets >= 2x simulated and a9a, >= 5x Bank Marketing)
     and exact evaluations (density + gradient) per min-ESS for both. RNS-HMC runs with the
     papers' surrogate (raw inputs, values only) and with rnshmc's (whitened, with gradients).
  2. Each at its best: HMC with an adapted step size and diagonal mass matrix at the best L
     of {5, 10, 20, 40, 80, 160}; RNS-HMC with the same adaptation in its exploration (at HMC's best
     L) and a trajectory of its own choosing (n_steps="auto").
  3. Kernel figures on the simulated data (N = 100000, d = 50, s = 2000):
     RNS-HMC seconds per iteration over one exact potential evaluation        target <= 1.5
     surrogate gradient over its two BLAS matrix-vector products                target <= 2
     surrogate fit, N = 4000 training points, s = 2000, d = 50                  target <= 2 s

Timings of one sampler run are single measurements (the sampling phase of 5000 iterations);
kernel figures are medians of interleaved rounds (benchmarks/_timing.py).

    python benchmarks/bench_rns_logistic.py [--data simulated bank a9a] [--draws 5000]
                                            [--tune 5000] [--repeats 7] [--skip-best]
"""
import argparse

import numpy as np

import rnshmc
from _timing import ratio_line, rounds, timed, verdict  # benchmarks/ is on sys.path
from rnshmc._kernels._integrators import Leapfrog
from rnshmc._kernels._metrics import EuclideanMetric
from rnshmc import papers
from rnshmc._kernels._chain import TRANSITION
from rnshmc._kernels._transition import Chain
from rnshmc.experiments import compare, format_table, summarize

TARGETS = {"simulated": 2.0, "bank": 5.0, "a9a": 2.0}


def papers_settings(name, model, args):
    samplers = papers.table1_samplers(model, name)
    rows, results = compare(samplers, args.draws, args.tune, rng=args.seed,
                            init=np.zeros(model.dim))
    print(format_table(rows, title=f"\n1. {name}, papers' settings "
                                   f"({args.tune} warm-up + {args.draws} draws)"))
    for row in rows[1:]:
        print(f"  {row['method']} over HMC in min(ESS)/s: {row['speedup']:.2f}x"
              f"{verdict(row['speedup'], TARGETS[name], 'higher')}; exact evaluations per "
              f"min-ESS {row['exact_evals_per_min_ess']:.2f} against HMC's "
              f"{rows[0]['exact_evals_per_min_ess']:.2f}")
    return samplers, results


def each_at_its_best(name, model, args):
    init = np.zeros(model.dim)
    candidates = []
    for L in (5, 10, 20, 40, 80, 160):
        result = rnshmc.HMC(model, n_steps=L).sample(args.draws, tune=args.tune, rng=args.seed,
                                                    init=init, progress=False)
        candidates.append((summarize(f"HMC (adapted eps {result.step_size[0]:.4f}, L={L})",
                                     result), L))
    best_hmc, best_L = max(candidates, key=lambda c: c[0]["min_ess_per_second"])
    settings = papers.SETTINGS[name]
    rns = rnshmc.RNSHMC(model, n_hidden=settings["n_hidden"],
                        surrogate=dict(ridge=settings["ridge"]), explore=dict(n_steps=best_L))
    result = rns.sample(args.draws, tune=args.tune, rng=args.seed, init=init, progress=False)
    row = summarize(f"RNS-HMC (auto L={result.surrogate_n_steps[0]})", result)
    rows = [c[0] for c in candidates] + [row]
    for r in rows:
        r["speedup"] = r["min_ess_per_second"] / best_hmc["min_ess_per_second"]
    print(format_table(rows, title=f"\n2. {name}, each at its best (speed-up over the best HMC)"))
    print(f"  RNS-HMC (its own L) over the best HMC in min(ESS)/s: {row['speedup']:.2f}x")
    if best_L == candidates[-1][1]:
        print(f"  (HMC's best L is the largest tried, {best_L}: a longer one might do better)")


def kernel_figures(model, rns_result, surrogate, repeats):
    q = rns_result.samples[0, -1]
    exact, network = model._ctarget, surrogate._ctarget
    # one RNS-HMC iteration (the papers' eps and L, jittered) against one exact potential
    settings = papers.SETTINGS["simulated"]
    chain = Chain(network, exact, EuclideanMetric(model.dim), Leapfrog())
    chain.set_position(q)
    chain.step_size = settings["step_size"]
    n_iter, n_calls = 100, 2000
    samples, records = np.empty((n_iter, model.dim)), np.empty(n_iter, TRANSITION)
    generator = np.random.default_rng(0)
    L = settings["n_steps"]
    t = rounds({"iteration": lambda: chain.run(generator, n_iter, L, True, samples, records),
                "potential": lambda: exact.time_evaluations(q, n_iter, "potential"),
                "gradient": lambda: network.time_evaluations(q, n_calls, "gradient"),
                "matvecs": lambda: network.time_matvecs(n_calls)}, repeats, 3)
    iteration, potential = t["iteration"] / n_iter, t["potential"] / n_iter
    gradient, matvecs = t["gradient"] / n_calls, t["matvecs"] / n_calls
    print(f"\n3. kernel figures, simulated data (N=100000, d=50, s=2000), median of {repeats} "
          "interleaved rounds")
    ratio_line(f"RNS-HMC iteration {np.median(iteration) * 1e6:.0f} us / exact potential "
               f"{np.median(potential) * 1e6:.0f} us", iteration, potential, target=1.5)
    ratio_line(f"surrogate gradient {np.median(gradient) * 1e6:.1f} us / its two BLAS matvecs "
               f"{np.median(matvecs) * 1e6:.1f} us", gradient, matvecs, target=2)
    rng = np.random.default_rng(0)
    Q = rns_result.samples[0, :4000] if rns_result.samples.shape[1] >= 4000 else \
        q + 0.01 * rng.standard_normal((4000, model.dim))
    U = np.array([model.potential(x) for x in Q])
    G = np.array([model.potential_and_gradient(x)[1] for x in Q])
    for label, kwargs in (("values", {}), ("values and gradients", dict(gradients=G))):
        fit = lambda: rnshmc.RandomNetworkSurrogate(model.dim, 2000, ridge=1e-6, rng=0).fit(
            Q, U, **kwargs)
        seconds = timed(fit, max(3, repeats // 2))
        print(f"  fit of {label}, N=4000, s=2000, d=50: {seconds:.2f} s (median of "
              f"{max(3, repeats // 2)}){verdict(seconds, 2, 'lower')}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", nargs="+", default=list(papers.LOGISTIC_PROBLEMS),
                        choices=list(papers.LOGISTIC_PROBLEMS))
    parser.add_argument("--draws", type=int, default=papers.PROTOCOL["draws"])
    parser.add_argument("--tune", type=int, default=papers.PROTOCOL["tune"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--skip-best", action="store_true", help="skip section 2")
    args = parser.parse_args()
    for name in args.data:
        model = papers.load_logistic(name, args.seed)
        samplers, results = papers_settings(name, model, args)
        if name == "simulated":
            kernel_figures(model, results["RNS-HMC (papers)"],
                           rnshmc.RNSHMC.fitted_surrogates(results["RNS-HMC (papers)"])[0],
                           args.repeats)
        if not args.skip_best:
            each_at_its_best(name, model, args)


if __name__ == "__main__":
    main()
