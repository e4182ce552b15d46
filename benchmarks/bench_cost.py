"""What a user pays from a cold start to a usable answer: every exact model evaluation (and
the wall time) until the pooled min bulk ESS reaches 1000 and max R-hat <= 1.01, 4 chains,
each run stopped by the samplers' own stopping rule (``sample(ess=1000)``).

Competitors, side by side in one run, for each seed:
  - ``rnshmc.sample(model)``: the front door with its defaults;
  - its warm start: ``rnshmc.sample(model, warm_start=first)`` from the run above, to another
    ESS 1000 (``--skip warm`` leaves it out; ``--skip hmc`` leaves out HMC at its best);
  - HMC at its best (Stan warm-up 200, L = 10; the gradient cached, the same C kernels);
  - rnshmc's NUTS with its defaults (``rnshmc.NUTS(model)``: metric "auto", warm-up 300);
    the exact baseline of the ratios is whichever of these two costs fewer evaluations
    (median over the seeds);
  - the samplers' own defaults: RNSHMC(model) and ARNSHMC(model) (4 chains, a shared
    surrogate), and ARNS-HMC with a surrogate per chain (the earlier default);
  - both with surrogate NUTS (``kernel="nuts"``) instead of static surrogate trajectories;
  - ARNS-HMC with surrogate NUTS after an exact-NUTS exploration (``explore=dict(kernel=
    "nuts")``), with and without an L-BFGS start (``start="lbfgs"``), and ARNS-HMC with static
    or NUTS sampling after an L-BFGS start;
  - adaptive Metropolis (warm-up 1000), where it can finish within its budget.
Each row also gives the exploration's (and training's) evaluations and sigma, the spread of
log(pi / pi~) on the held-out states at the exploration's last check.

Problems (``--problems``):
  pde        the authors' elliptic PDE (the synthetic Q1 30x30 one without the papers' data):
             model evaluations are PDE solves (forward and adjoint count one each);
  pde60      the papers' setup on a 60x60 Q1 grid (synthetic data), where solves cost more;
  logistic   the simulated logistic regression (N = 100000, d = 50): wall time matters;
  ode        the Lotka-Volterra predator-prey posterior (rnshmc.models.lotka_volterra: 8
             parameters, an ODE solve with forward sensitivities per gradient, ~5 ms):
             model evaluations are ODE solves;
  schools    eight schools, non-centred and centred (a funnel): the front door must end
             converged and exact (means of mu and log tau against a long HMC reference on
             the non-centred form).

    python benchmarks/bench_cost.py [--seeds 0 1] [--problems pde pde60 logistic schools]
        [--skip am warm hmc] [--only NUTS defaults ...]
"""
import argparse
import time
import warnings

import numpy as np

import rnshmc
from rnshmc import papers
from rnshmc.diagnostics import SamplingWarning
from rnshmc.models.hard import eight_schools

ESS = 1000
HMC_AT_ITS_BEST = "HMC at its best (warm-up 200, L = 10)"
NUTS_DEFAULTS = "NUTS defaults"


def competitors(model, skip, only=()):
    runs = {"rnshmc.sample (defaults)": (None, None),
            HMC_AT_ITS_BEST: (rnshmc.HMC(model, n_steps=10), 200),
            NUTS_DEFAULTS: (rnshmc.NUTS(model), None),
            "RNSHMC defaults": (rnshmc.RNSHMC(model), None),
            "ARNSHMC defaults": (rnshmc.ARNSHMC(model), None),
            "ARNSHMC, surrogate per chain": (rnshmc.ARNSHMC(model, share_surrogate=False),
                                             None),
            "RNSHMC, surrogate NUTS": (rnshmc.RNSHMC(model, kernel="nuts"), None),
            "ARNSHMC, surrogate NUTS": (rnshmc.ARNSHMC(model, kernel="nuts"), None),
            "ARNSHMC, surrogate NUTS, NUTS exploration": (
                rnshmc.ARNSHMC(model, kernel="nuts", explore=dict(kernel="nuts")), None),
            "ARNSHMC, surrogate NUTS, NUTS exploration from L-BFGS": (
                rnshmc.ARNSHMC(model, kernel="nuts", explore=dict(kernel="nuts",
                                                                  start="lbfgs")), None),
            "ARNSHMC, surrogate NUTS from L-BFGS": (
                rnshmc.ARNSHMC(model, kernel="nuts", explore=dict(start="lbfgs")), None),
            "ARNSHMC defaults from L-BFGS": (
                rnshmc.ARNSHMC(model, explore=dict(start="lbfgs")), None)}
    if only:  # (the runs named, the exact baselines always)
        runs = {name: run for name, run in runs.items()
                if name in (HMC_AT_ITS_BEST, NUTS_DEFAULTS)
                or any(word in name for word in only)}
    if "hmc" in skip:  # (HMC at its best: 812k ODE solves, over an hour a seed)
        runs.pop(HMC_AT_ITS_BEST)
    if "am" not in skip:
        runs["adaptive Metropolis (warm-up 1000)"] = (rnshmc.AdaptiveMetropolis(model), 1000)
    return runs


def run_one(model, sampler, tune, seed, max_evals, warm_start=None):
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SamplingWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        if sampler is None:
            result = rnshmc.sample(model, ess=ESS, rng=seed, progress=False,
                                   max_evals=max_evals, warm_start=warm_start)
        else:
            result = sampler.sample(None, tune=tune, chains=4, rng=seed, progress=False,
                                    ess=ESS, max_evals=max_evals)
    return result, time.perf_counter() - start


def exploration_cost(result):
    """The exploration's (and training's) model evaluations of a surrogate run ("" for an
    exact one)."""
    phases = result.cost["phases"]
    if "exploration" not in phases or "training" not in phases:
        return ""
    return str(sum(phases[name]["density_evals"] + phases[name]["gradient_evals"]
                   for name in ("exploration", "training")))


def final_sigma(result):
    """The spread of log(pi / pi~) over the held-out states at the exploration's last check
    (chain 0's; "" without checks)."""
    checks = (result.get("exploration") or [{}])[0].get("checks") or []
    return f"{checks[-1]['sigma']:.2f}" if checks and "sigma" in checks[-1] else ""


def cost_table(title, model, seeds, skip, max_evals, unit="solves", only=()):
    print(f"\n{title}: to min bulk ESS {ESS} and R-hat <= 1.01, 4 chains "
          f"(model evaluations = densities + gradients)", flush=True)
    print(f"  {'run':40s} {'seed':>4s} {unit:>9s} {'wall s':>7s} {'draws':>6s} "
          f"{'min ESS':>7s} {'R-hat':>6s} {'stop':>10s} {'explore':>7s} {'sigma':>5s}  chosen")
    table = {}
    warm = "rnshmc.sample, warm_start=run above"
    for seed in seeds:
        runs = competitors(model, skip, only)
        if "warm" not in skip and not only:  # (a second run to another ESS 1000, from the front door's)
            runs = dict([next(iter(runs.items())), (warm, (None, None))], **runs)
        first = None
        for name, (sampler, tune) in runs.items():
            result, seconds = run_one(model, sampler, tune,
                                      seed + 1000 if name == warm else seed, max_evals,
                                      warm_start=first if name == warm else None)
            if first is None:
                first = result
            stop, cost = result.stopping, result.cost
            table.setdefault(name, []).append((cost["model_evals"], seconds,
                                               stop["reason"] == "converged"))
            chosen = result.get("choice", {}).get("sampler", "")
            print(f"  {name:40s} {seed:4d} {cost['model_evals']:9d} {seconds:7.1f} "
                  f"{stop['draws']:6d} {stop['ess']:7.0f} {stop['rhat']:6.3f} "
                  f"{stop['reason']:>10s} {exploration_cost(result):>7s} "
                  f"{final_sigma(result):>5s}  {chosen}", flush=True)
    medians = {name: (np.median([r[0] for r in rows]), np.median([r[1] for r in rows]))
               for name, rows in table.items()}
    # the exact baseline: the cheaper of HMC at its best and NUTS (converged runs' medians)
    ran = [name for name in (HMC_AT_ITS_BEST, NUTS_DEFAULTS) if name in table]
    exact = [name for name in ran if all(r[2] for r in table[name])] or ran
    baseline = min(exact, key=lambda name: medians[name][0])
    print(f"\n  medians over seeds, and the exact baseline ({baseline}, the cheaper exact "
          f"kernel) over each ({unit} and wall time):")
    base = medians[baseline]
    for name, rows in table.items():
        evals, seconds = medians[name]
        done = sum(r[2] for r in rows)
        print(f"  {name:40s} {evals:9.0f} {seconds:7.1f}  baseline/this: {base[0] / evals:5.2f}x "
              f"{unit}, {base[1] / seconds:5.2f}x time  ({done}/{len(rows)} converged)")
    return table


def schools_section(args):
    print("\neight schools: the front door on a funnel (Python targets: the front door times "
          "them)", flush=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = rnshmc.HMC(eight_schools(centred=False)[0], n_steps=20).sample(
            20000, tune=2000, chains=4, rng=99, progress=False)
    mu = reference.samples[..., 0].mean()
    log_tau = reference.samples[..., 1].mean()
    print(f"  reference (non-centred HMC, 4 x 20000): mean mu {mu:.3f}, mean log tau "
          f"{log_tau:.3f}, R-hat {reference.health['rhat_max']:.3f}")
    for centred in (False, True):
        model = eight_schools(centred=centred)[0]
        for seed in args.seeds:
            result, seconds = run_one(model, None, None, seed, 10 ** 6)
            s, stop = result.samples, result.stopping
            mcse = rnshmc.diagnostics.mcse_mean(s[..., :2])
            z = (np.array([s[..., 0].mean(), s[..., 1].mean()]) - [mu, log_tau]) / mcse
            print(f"  {'centred' if centred else 'non-centred':12s} seed {seed}: "
                  f"{result.choice['sampler']}, {stop['reason']}, {stop['draws']} draws, "
                  f"min ESS {stop['ess']:.0f}, R-hat {stop['rhat']:.3f}, "
                  f"{result.cost['model_evals']} evaluations, {seconds:.1f} s, "
                  f"divergent {int(result.diverging.sum())}; mean error in MCSE: "
                  f"mu {z[0]:+.1f}, log tau {z[1]:+.1f}", flush=True)
            if centred:  # (is it the funnel or the front door? exact HMC, the same budget)
                hmc, seconds = run_one(model, rnshmc.HMC(model, n_steps=10), 200, seed, 10 ** 6)
                s = hmc.stopping
                print(f"  {'':12s} seed {seed}: HMC at its best, {s['reason']}, {s['draws']} "
                      f"draws, min ESS {s['ess']:.0f}, R-hat {s['rhat']:.3f}, "
                      f"{hmc.cost['model_evals']} evaluations, {seconds:.1f} s, divergent "
                      f"{int(hmc.diverging.sum())}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--problems", nargs="+", default=["pde", "pde60", "logistic",
                                                          "schools"])
    parser.add_argument("--skip", nargs="*", default=[])
    parser.add_argument("--only", nargs="*", default=[],
                        help="run only the runs whose names contain one of these words (and "
                             "the exact baselines)")
    args = parser.parse_args()
    print(f"rnshmc {rnshmc.__version__}; seeds {args.seeds}")
    if "pde" in args.problems:
        model, title = papers.load_pde()
        cost_table(f"elliptic PDE, {title}", model, args.seeds, args.skip, 500_000,
                   only=args.only)
    if "pde60" in args.problems:
        model = rnshmc.models.EllipticPDE(n=60, element="Q1", rng=0)
        cost_table("elliptic PDE, the papers' setup on a 60x60 Q1 grid (synthetic data)",
                   model, args.seeds, args.skip, 500_000, only=args.only)
    if "logistic" in args.problems:
        model = papers.load_logistic("simulated", seed=0)
        cost_table("simulated logistic regression, N = 100000, d = 50", model, args.seeds,
                   ["am"] + list(args.skip), 400_000, unit="evals", only=args.only)
    if "ode" in args.problems:
        model, _ = rnshmc.models.lotka_volterra()
        cost_table("Lotka-Volterra ODE posterior", model, args.seeds, ["am"] + list(args.skip),
                   500_000, only=args.only)
    if "schools" in args.problems:
        schools_section(args)


if __name__ == "__main__":
    main()
