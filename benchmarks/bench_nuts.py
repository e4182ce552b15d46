"""rnshmc's NUTS with each warm-up metric on the hard posteriors (``rnshmc.models.hard``):
does it converge (R-hat <= 1.01, min bulk ESS), and at what cost in gradient evaluations
(warm-up included, and the sampling phase's alone) and seconds.

4 chains, one after another (``pool=None``: the seconds are one core's), ``--tune`` warm-up
and ``--draws`` draws each, from Stan's uniform (-2, 2) starts. With ``--peers``, NumPyro's
NUTS (diagonal and dense mass matrix, its defaults otherwise: target acceptance 0.8) runs in
the same process on the same posteriors, stated in JAX with the same data, with the same
warm-up and draws (install ``numpyro`` and ``jax`` from the package index into the
benchmark's environment; the posteriors with a JAX statement: the correlated regression and
Neal's funnel). Its gradients are counted as its trees' leapfrog steps (``num_steps``), warm-up
included; its seconds include JAX's compilation.

    python benchmarks/bench_nuts.py [--seeds 0 1] [--posteriors "correlated regression"]
                                    [--metrics diagonal dense diagonal_grad dense_grad]
                                    [--peers]
"""
import argparse
import time
import warnings

import numpy as np

import rnshmc
from rnshmc.diagnostics import ess_bulk, rhat
from rnshmc.models import hard_posteriors

METRICS = ("diagonal", "dense", "diagonal_grad", "dense_grad")


def jax_potential(name, reference, dim):
    """The posterior ``name`` as a JAX potential (minus the log density), or None."""
    import jax.numpy as jnp
    if name == "correlated regression":
        X, y, noise = (jnp.asarray(reference[k]) for k in ("X", "y", "noise"))

        def potential(beta):
            residual = y - X @ beta
            return 0.5 * residual @ residual / noise ** 2 + 0.5 * beta @ beta / 100.0
        return potential
    if name == "Neal's funnel":
        scale = reference["sd_v"]

        def potential(q):
            v, x = q[0], q[1:]
            return 0.5 * v * v / scale ** 2 + 0.5 * jnp.sum(x * x) * jnp.exp(-v) + \
                0.5 * (dim - 1) * v
        return potential
    return None


def numpyro_row(name, reference, dim, dense, seed, tune, draws):
    """(R-hat, min ESS, gradients, sampling gradients, divergences, depth, seconds) of
    NumPyro's NUTS, or None where the posterior has no JAX statement."""
    import jax
    from numpyro.infer import MCMC, NUTS as NumPyroNUTS
    potential = jax_potential(name, reference, dim)
    if potential is None:
        return None
    starts = np.random.default_rng(seed).uniform(-2, 2, size=(4, dim))
    start = time.perf_counter()
    mcmc = MCMC(NumPyroNUTS(potential_fn=potential, dense_mass=dense), num_warmup=tune,
                num_samples=draws, num_chains=4, chain_method="sequential", progress_bar=False)
    mcmc.warmup(jax.random.PRNGKey(seed), init_params=starts, collect_warmup=True,
                extra_fields=("num_steps",))
    warmup_steps = int(np.sum(mcmc.get_extra_fields()["num_steps"]))
    mcmc.run(jax.random.PRNGKey(seed + 1), extra_fields=("num_steps", "diverging",
                                                            "adapt_state.step_size"))
    seconds = time.perf_counter() - start
    samples = np.asarray(mcmc.get_samples(group_by_chain=True))
    extra = mcmc.get_extra_fields(group_by_chain=True)
    steps = np.asarray(extra["num_steps"])
    return (np.max(rhat(samples)), np.min(ess_bulk(samples)), warmup_steps + int(steps.sum()),
            int(steps.sum()), int(np.sum(extra["diverging"])),
            float(np.mean(np.log2(steps + 1))), seconds)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--posteriors", nargs="+", default=list(hard_posteriors()))
    parser.add_argument("--metrics", nargs="+", default=list(METRICS), choices=METRICS)
    parser.add_argument("--tune", type=int, default=1000)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--peers", action="store_true",
                        help="also NumPyro's NUTS (diagonal and dense) on the same posteriors")
    args = parser.parse_args(argv)
    posteriors = hard_posteriors()
    print(f"{'posterior':22s} {'metric':14s} seed  R-hat  min ESS  gradients  (sampling)  "
          "divergent  depth  seconds")
    for name in args.posteriors:
        target = posteriors[name][0]
        for metric in args.metrics:
            for seed in args.seeds:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    start = time.perf_counter()
                    res = rnshmc.NUTS(target, metric=metric).sample(
                        args.draws, tune=args.tune, chains=4, rng=seed, progress=False,
                        pool=None)
                    seconds = time.perf_counter() - start
                print_row(name, metric, seed, (
                    np.max(rhat(res.samples)), np.min(ess_bulk(res.samples)),
                    int(res.n_gradient_evals.sum()), int(res.n_gradient_evals_sampling.sum()),
                    int(res.diverging.sum()), res.tree_depth.mean(), seconds))
        if not args.peers:
            continue
        for dense in (False, True):
            for seed in args.seeds:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    row = numpyro_row(name, posteriors[name][1], target.dim, dense, seed,
                                      args.tune, args.draws)
                if row is not None:
                    print_row(name, "NumPyro " + ("dense" if dense else "diag"), seed, row)


def print_row(name, metric, seed, row):
    r_hat, ess, gradients, sampling, divergent, depth, seconds = row
    print(f"{name:22s} {metric:14s} {seed:4d}  {r_hat:.3f}  {ess:7.0f}  {gradients:9d}  "
          f"({sampling:8d})  {divergent:9d}  {depth:5.1f}  {seconds:7.1f}", flush=True)


if __name__ == "__main__":
    main()
