"""Sampling the elliptic PDE from exact densities alone: GradientFreeRNSHMC against
delayed-acceptance Metropolis and adaptive Metropolis, in min ESS per exact PDE solve.

The model is the authors' problem (``ePDE.mat`` of the papers' data, through
$RNSHMC_SHARED_DATA or ../shared/data beside the repository) or, without it, the synthetic
Q1 30x30 problem, seen without its gradient (``without_gradient``: a gradient cannot be asked
for). Every exact solve is counted, from the first iteration, exploration included.

  run. Per seed (``--seeds``), ``--chains`` chains of ``--draws`` draws each:
     a. GradientFreeRNSHMC with its defaults: adaptive-Metropolis explorations of
        ``exploration_length(d, chains)`` iterations per chain (1000 at d = 20 for 4
        chains), one values-only surrogate fitted to their pooled evaluations, surrogate HMC
        with the exact test; and with ``share_surrogate=False`` (each chain fits its own to
        its ``exploration_length(d)`` = 2800 iterations);
     b. tinyDA (Lykkegaard et al.; ``tinyDA.DAChain``, subchain length 1): two-stage
        delayed-acceptance random-walk Metropolis (Christen and Fox 2005) from the end of
        row a's explorations (which row b pays for too), the coarse level row a's surrogate,
        the proposal tinyDA's ``GaussianRandomWalk`` with each exploration's adapted
        proposal covariance and scale, the scale then adapted by tinyDA to a coarse
        acceptance of 0.24 (``adaptive=True``), or fixed at ``--da-scale`` times the
        exploration's (1.5 was the best of 1, 1.5, 2, 3 in solves to min ESS 1000, one
        seed); each chain runs ``--baseline-draws`` fine-level iterations. Skipped, with a
        message, when tinyDA is not installed (``pip install --no-deps tinyDA``: its metadata
        pins numpy < 2, which rnshmc's kernels are not built against; it imports ray too);
     c. AdaptiveMetropolis alone, warm-up as long as a chain's exploration without a shared
        fit (2800: with 1000 its proposal adapted less well, min ESS 23-118), then
        ``--baseline-draws`` draws per chain (random walks mix slowly: their min ESS from
        2000 draws would be a few dozen, too few for a stable figure);
     and, for reference, RNS-HMC with its defaults on the model with its gradient (an adjoint
     solve counted as a solve).
     Columns: acceptance (for tinyDA the fine level's), min ESS over the coordinates (Geyer,
     the chains pooled), exact solves, min ESS per solve, the solves to min ESS 1000 (what
     was spent before the draws plus the draws' share scaled to 1000 / min ESS: the draws'
     cost and ESS both grow linearly with their number), seconds from the first iteration
     (wall clock, the chains run one after the other) and min ESS per second.

  fit. The question of repeated rows: values-only fits (s = 1000, the default weight scale)
     to row a's pooled explorations, the training rows taken as their states over the last
     80% (repeated rows from rejections: the papers' RNS-HMC), those distinct states, their
     proposals over the last 80% (every evaluation there), or over all (the default); error
     (centred RMS) of the fitted potential against the exact one at row a's draws.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/bench_gradient_free.py
        [--seeds 0 1] [--draws 2000] [--baseline-draws 8000] [--chains 4] [--da-scale 1.5]

Timings are wall clock on whatever else the machine runs: compare them within a run.
"""
import argparse
import time
import warnings

import numpy as np

import rnshmc
from rnshmc import papers
from rnshmc.samplers.gradient_free import VALUES_WEIGHT_SCALE, without_gradient


def quietly(function, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return function(*args, **kwargs)


class Row:
    """One method's figures."""

    def __init__(self, label, samples, acceptance, solves, solves_before, seconds):
        self.label, self.acceptance, self.solves, self.seconds = label, acceptance, solves, seconds
        self.min_ess = float(rnshmc.diagnostics.ess(samples).min())
        self.to_1000 = solves_before + (solves - solves_before) * 1000.0 / self.min_ess

    def print(self):
        print(f"  {self.label:46s} {self.acceptance:6.2f} {self.min_ess:8.0f} {self.solves:8d} "
              f"{self.min_ess / self.solves:9.4f} {self.to_1000:12.0f} {self.seconds:8.1f} "
              f"{self.min_ess / self.seconds:8.1f}", flush=True)


def explore(sampler, chains, draws, seed, init):
    """Row a's start: the chains' explorations and the shared fit (the states as the sampling
    phase will start from them); and the seconds taken."""
    start = time.perf_counter()
    states = sampler.init_states(draws=draws, chains=chains, rng=seed, init=init)
    states = quietly(sampler.run_states, states, progress=False,
                     stop_after=states[0].phases[0][1])
    sampler.join(states)  # every chain waits for the fit to the pooled explorations
    return states, time.perf_counter() - start


def gradient_free_row(label, sampler, states, seconds):
    """Row a: the states run to the end."""
    start = time.perf_counter()
    result = quietly(sampler.continue_run, states, dict(draws=states[0].phases[-1][1]),
                     progress=False, pool=None)
    seconds += time.perf_counter() - start
    return result, Row(label, result.samples, float(result.acceptance_rate.mean()),
                       int(np.sum(result.n_density_evals)),
                       int(np.sum(result.n_density_evals_explore)), seconds)


def tinyda_row(model, explored, seconds, draws, seed, scale):
    """Row b: tinyDA's two-stage delayed acceptance from each explored state, the coarse
    level its (shared) surrogate, the proposal its exploration's final one."""
    import tinyDA

    class Flat:  # the whole log density is tinyDA's log-likelihood
        def logpdf(self, x):
            return 0.0

        def rvs(self):
            return np.zeros(model.dim)

    class Identity:
        def loglike(self, output):
            return output[0]

    fine_solves = [0]

    def fine(q):
        fine_solves[0] += 1
        return np.array([model.log_density(q)])

    chains, accepted = [], []
    start = time.perf_counter()
    for state in explored:
        surrogate = rnshmc.RandomNetworkSurrogate.from_state(state.parts["fit"].surrogate)
        coarse = tinyDA.Posterior(Flat(), Identity(),
                                  lambda q, s=surrogate: np.array([s.log_density(q)]))
        adaptive = scale is None
        proposal = tinyDA.GaussianRandomWalk(  # (the adaptive Metropolis chain's final state)
            C=state.kernel["proposal_covariance"],
            scaling=state.kernel["step_size"] * (1.0 if adaptive else scale), adaptive=adaptive)
        np.random.seed(1000 * seed + state.chain)  # tinyDA draws from NumPy's global stream
        chain = tinyDA.DAChain(coarse, tinyDA.Posterior(Flat(), Identity(), fine), proposal, 1,
                               initial_parameters=state.kernel["position"].copy(),
                               store_coarse_chain=False)
        quietly(chain.sample, draws, progressbar=False)
        chains.append([link.parameters for link in chain.chain_fine[1:]])
        accepted.append(np.mean(chain.accepted_fine[1:]))
    before = sum(s.evals["exploration"][0] for s in explored)
    seconds += time.perf_counter() - start
    label = ("b. tinyDA DA-MH, scale adapted (tinyDA's)" if scale is None
             else f"b. tinyDA DA-MH, scale x{scale:g} (fixed)")
    return Row(label, np.array(chains), float(np.mean(accepted)), before + fine_solves[0],
               before, seconds)


def run_section(args, model):
    hidden = without_gradient(model)
    dim = model.dim
    tune = rnshmc.GradientFreeRNSHMC.exploration_length(dim, args.chains)
    alone = rnshmc.GradientFreeRNSHMC.exploration_length(dim)
    print(f"\nrun. {args.chains} chains x {args.draws} draws ({args.baseline_draws} for rows b "
          f"and c), d = {dim}; exact solves counted from the first iteration")
    print(f"  {'method':46s} {'accept':>6s} {'min ESS':>8s} {'solves':>8s} {'ESS/solve':>9s} "
          f"{'to ESS 1000':>12s} {'seconds':>8s} {'ESS/s':>8s}")
    init = np.zeros(dim)
    results = {}
    for seed in args.seeds:
        print(f" seed {seed}")
        sampler = rnshmc.GradientFreeRNSHMC(hidden)
        states, seconds = explore(sampler, args.chains, args.draws, seed, init)
        explored = [state.copy() for state in states]
        result, row = gradient_free_row(f"a. GradientFreeRNSHMC, defaults (tune {tune})",
                                        sampler, states, seconds)
        results[seed] = (explored, result)
        row.print()
        alone_sampler = rnshmc.GradientFreeRNSHMC(hidden, share_surrogate=False)
        start = time.perf_counter()
        own = quietly(alone_sampler.sample, args.draws, chains=args.chains, rng=seed, init=init,
                      progress=False, pool=None)
        Row(f"a. ... share_surrogate=False (tune {alone})", own.samples,
            float(own.acceptance_rate.mean()), int(np.sum(own.n_density_evals)),
            int(np.sum(own.n_density_evals_explore)), time.perf_counter() - start).print()
        try:
            import tinyDA  # noqa: F401
        except ImportError as error:
            print(f"  b. tinyDA DA-MH: skipped ({error}; pip install --no-deps tinyDA, and ray)")
        else:
            for scale in (None, args.da_scale):
                tinyda_row(hidden, explored, seconds, args.baseline_draws, seed, scale).print()
        start = time.perf_counter()
        am = quietly(rnshmc.AdaptiveMetropolis(hidden).sample, args.baseline_draws, tune=alone,
                     chains=args.chains, rng=seed, init=init, progress=False, pool=None)
        Row(f"c. AdaptiveMetropolis (tune {alone})", am.samples,
            float(am.acceptance_rate.mean()), int(np.sum(am.n_density_evals)),
            args.chains * (alone + 1), time.perf_counter() - start).print()
        start = time.perf_counter()
        rns = quietly(rnshmc.RNSHMC(model).sample, args.draws, chains=args.chains, rng=seed,
                      init=init, progress=False, pool=None)
        solves = int(np.sum(rns.n_density_evals) + np.sum(rns.n_gradient_evals))
        before = solves - int(np.sum(rns.n_density_evals_sampling)
                              + np.sum(rns.n_gradient_evals_sampling))
        Row("(reference: RNS-HMC with gradients, defaults)", rns.samples,
            float(rns.acceptance_rate.mean()), solves, before,
            time.perf_counter() - start).print()
    return results


def fit_section(args, model, results):
    print("\nfit. values-only fits (s = 1000, the default weight scale) to row a's pooled "
          "explorations; error (centred RMS) of the potential at row a's draws")
    for seed, (explored, result) in results.items():
        parts = {key: [] for key in ("states", "distinct", "last", "all")}
        for state in explored:
            history = state.outputs["exploration"]
            n = len(history["records"])
            states, U = history["samples"][n // 5:], -history["records"]["log_density"][n // 5:]
            parts["states"].append(np.column_stack([states, U]))
            parts["distinct"].append(np.unique(parts["states"][-1], axis=0))
            proposals = history["proposals"]
            kept = proposals[:, -1] <= 2 * U.max() - U.min()  # the sampler's cap
            parts["last"].append(proposals[kept & (np.arange(n) >= n // 5)])
            parts["all"].append(proposals[kept])
        labels = {"states": "states (repeated rows)", "distinct": "distinct states",
                  "last": "evaluations, last 80%", "all": "evaluations, all (default)"}
        held_out = result.samples.reshape(-1, model.dim)
        exact = -result.log_density.ravel()
        for key, label in labels.items():
            rows = np.concatenate(parts[key])
            surrogate = rnshmc.RandomNetworkSurrogate(
                model.dim, n_hidden=1000, whiten=True, rng=seed,
                weight_scale=VALUES_WEIGHT_SCALE / np.sqrt(model.dim))
            surrogate.fit(rows[:, :-1], rows[:, -1])
            misfit = surrogate.predict(held_out) - exact
            print(f"  seed {seed} {label:28s} {len(rows):6d} rows: error "
                  f"{np.sqrt(np.mean((misfit - misfit.mean()) ** 2)):.3f} "
                  f"(training RMS {surrogate.fit_residual_:.3f})", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--draws", type=int, default=2000)
    parser.add_argument("--baseline-draws", type=int, default=8000)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--da-scale", type=float, default=1.5)
    args = parser.parse_args()
    model, title = papers.load_pde()  # the authors' problem if present, else the synthetic one
    print(f"Gradient-free sampling of the elliptic PDE: {title}")
    fit_section(args, model, run_section(args, model))  # (fit uses run's explorations, draws)


if __name__ == "__main__":
    main()
