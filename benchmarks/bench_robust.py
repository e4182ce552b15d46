"""Every sampler with its defaults on small posteriors that are hard for them
(``rnshmc.models.hard``) and on a costly ODE posterior (``rnshmc.models.lotka_volterra``: 8
parameters, about 5 ms a gradient): does the run end converged (``result.converged``: R-hat <=
1.01, bulk and tail ESS >= 100 per chain, every chain moved), did a fallback engage, what did
it cost, and are its means right. RNSHMC-nuts and ARNSHMC-nuts are those samplers with
surrogate NUTS (``kernel="nuts"``) as their sampling kernel, their other settings default.

Each sampler draws 2000 per chain (4 chains) after its default tune, and ``rnshmc.sample``
draws until min ESS 1000 (at most 10^6 exact evaluations); the gradient-free ones see the log
density alone. "mean z" is the largest |mean - reference| / (posterior sd) over
the coordinates: against the closed form (correlated regression), the exact zero mean (Neal's
funnel), or a long exact run (GP Poisson: HMC, 4 chains x 20000 draws, L = 20, target
acceptance 0.95; Lotka-Volterra: NUTS with its defaults, 4 chains x 2000 draws after its
default tune, some 65,000 gradient solves, about 3 minutes on 2 cores), made once per
problem when the script runs; a converged run's is typically under 0.1.

    python benchmarks/bench_robust.py [--seeds 0 1] [--samplers HMC NUTS RNSHMC ...]
                                      [--problems regression funnel gp-poisson ode]
"""
import argparse
import time
import warnings

import numpy as np

import rnshmc
from rnshmc.models import hard_posteriors, lotka_volterra
from rnshmc.targets import without_gradient

SAMPLERS = {
    "HMC": lambda t: rnshmc.HMC(t),
    "NUTS": lambda t: rnshmc.NUTS(t),
    "RNSHMC": lambda t: rnshmc.RNSHMC(t),
    "ARNSHMC": lambda t: rnshmc.ARNSHMC(t),
    "RNSHMC-nuts": lambda t: rnshmc.RNSHMC(t, kernel="nuts"),
    "ARNSHMC-nuts": lambda t: rnshmc.ARNSHMC(t, kernel="nuts"),
    "RNSRMHMC": lambda t: rnshmc.RNSRMHMC(t),
    "GradientFreeRNSHMC": lambda t: rnshmc.GradientFreeRNSHMC(without_gradient(t)),
    "AdaptiveMetropolis": lambda t: rnshmc.AdaptiveMetropolis(without_gradient(t)),
    "rnshmc.sample": None,
}


# --problems name -> title in the table; their (target, reference): problems()
PROBLEMS = {"regression": "correlated regression", "funnel": "Neal's funnel",
            "gp-poisson": "GP Poisson", "ode": "Lotka-Volterra ODE"}
# the Lotka-Volterra posterior's long exact run: NUTS's defaults, 4 chains of this many draws
ODE_REFERENCE_DRAWS = 2000


def problems(names):
    """Title -> (target, reference) of the problems ``names`` (keys of PROBLEMS), in order."""
    hard = hard_posteriors() if set(names) - {"ode"} else {}
    return {PROBLEMS[name]: (lotka_volterra() if name == "ode" else hard[PROBLEMS[name]])
            for name in names}


def reference_moments(target, reference):
    """(mean, sd) a converged run must match."""
    if reference is not None and "truth" in reference:  # Lotka-Volterra: a long NUTS run
        started = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            long = rnshmc.NUTS(target).sample(ODE_REFERENCE_DRAWS, chains=4, rng=12345,
                                              progress=False)
        draws = long.samples.reshape(-1, target.dim)
        print(f"(reference: NUTS, 4 x {ODE_REFERENCE_DRAWS} draws, R-hat "
              f"{long.health['rhat_max']:.3f}, min ESS {long.health['ess_bulk_min']:.0f}, "
              f"{long.cost['model_evals']} evaluations, {time.perf_counter() - started:.0f} s)",
              flush=True)
        return draws.mean(axis=0), draws.std(axis=0)
    if reference is not None and "covariance" in reference:
        return reference["mean"], np.sqrt(np.diag(reference["covariance"]))
    if reference is not None:  # Neal's funnel: x's sd is that of a log-normal scale mixture
        sd = np.full(target.dim, np.exp(reference["sd_v"] ** 2 / 4))
        sd[0] = reference["sd_v"]
        return reference["mean"], sd
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        long = rnshmc.HMC(target, n_steps=20, target_accept=0.95).sample(
            20000, tune=2000, chains=4, rng=12345, progress=False)
    draws = long.samples.reshape(-1, target.dim)
    return draws.mean(axis=0), draws.std(axis=0)


def run(name, target, seed):
    started = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if name == "rnshmc.sample":
            # (until min ESS 1000 and R-hat <= 1.01, at most 10^6 exact evaluations)
            result = rnshmc.sample(target, rng=seed, progress=False, max_evals=10**6)
        else:
            result = SAMPLERS[name](target).sample(2000, chains=4, rng=seed, progress=False)
    seconds = time.perf_counter() - started
    fallback = bool(np.any(result.get("fallback", False)))
    return result, seconds, fallback, len(caught)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--samplers", nargs="+", default=list(SAMPLERS), choices=list(SAMPLERS))
    parser.add_argument("--problems", nargs="+", default=list(PROBLEMS), choices=list(PROBLEMS))
    args = parser.parse_args()
    print(f"{'posterior':22s} {'sampler':19s} {'seed':>4s} {'conv':>5s} {'refits':>6s} {'fallbk':>6s} "
          f"{'evals':>8s} {'min ESS':>8s} {'R-hat':>7s} {'mean z':>7s} {'accept':>6s} "
          f"{'seconds':>7s}")
    for title, (target, reference) in problems(args.problems).items():
        mean, sd = reference_moments(target, reference)
        for name in args.samplers:
            for seed in args.seeds:
                try:
                    result, seconds, fallback, _ = run(name, target, seed)
                except Exception as error:  # (a sampler that cannot run here says why)
                    print(f"{title:22s} {name:19s} {seed:4d} failed: {type(error).__name__}: "
                          f"{str(error)[:90]}")
                    continue
                health = result.health
                z = np.max(np.abs(result.samples.reshape(-1, target.dim).mean(axis=0) - mean)
                           / sd)
                refits = int(np.sum(result.get("n_refits", 0)))
                label = (f"sample: {result.sampler}" if name == "rnshmc.sample"
                         else f"{result.sampler}, nuts" if name.endswith("-nuts")
                         else result.sampler)
                print(f"{title:22s} {label:19s} {seed:4d} {str(result.converged):>5s} "
                      f"{refits:6d} {str(fallback):>6s} {result.cost['model_evals']:8d} "
                      f"{health['ess_bulk_min']:8.0f} {health['rhat_max']:7.3f} {z:7.2f} "
                      f"{result.acceptance_rate.mean():6.2f} {seconds:7.1f}", flush=True)


if __name__ == "__main__":
    main()
