"""Chains at scale, checkpoint overhead and shared surrogates.

  a. Chains per second against serial for 1, 2 and 4 chains, on the simulated logistic
     regression (N = 100000, d = 50) and the authors' PDE (the synthetic one without the
     papers' data): HMC at fixed settings (the logistic model's C kernel pinned to one thread
     so that chains are what runs in parallel), serially, on a thread pool, on a process
     pool of 2 workers (this machine's cores) and on a Dask LocalCluster of 2 single-threaded
     worker processes on loopback (workers started outside the timing). The same seed gives
     the same draws on each (checked here).
  b. Checkpoint overhead: the same HMC run on the PDE with checkpoint_every=1000 against
     none, side by side in interleaved rounds; the seconds per write and the share of the
     run (target <= 1%).
  c. Shared against per-chain surrogates: RNS-HMC and ARNS-HMC with rnshmc's defaults, 4
     chains x ``--shared-draws``, each chain fitting its own surrogate to its own
     ``tune``-iteration exploration, or one surrogate (share_surrogate=True) fitted to the
     pooled explorations, at several exploration lengths: acceptance, exact evaluations
     (densities + gradients) of the explorations and in all, min ESS, max R-hat, and the
     cost from the first iteration to min ESS 1000 (benchmarks/_common.py's
     cost_to_min_ess; PDE in solves, logistic regression in seconds), with HMC's best from
     bench_adaptive (Stan warm-up 200, L = 10) for the ratio.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/bench_scale.py [--draws 200]
        [--checkpoint-draws 5000] [--rounds 3] [--shared-draws 2000] [--tunes 200 100 50]
        [--problems pde logistic] [--seed 0]
"""
import argparse
import multiprocessing
import os
import tempfile
import time
import warnings
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import numpy as np

import rnshmc
from _common import cost_to_min_ess, load_problem  # benchmarks/ is on sys.path
from rnshmc import papers

TARGET_OVERHEAD = 0.01


def problems():
    logistic = papers.load_logistic("simulated", seed=0, n_threads=1)
    pde, title = papers.load_pde()
    return {"logistic regression (N = 100000, d = 50)": (logistic,
                                                         papers.hmc_settings("simulated")),
            f"elliptic PDE, {title}": (pde, papers.hmc_settings("pde"))}


def run(model, settings, chains, draws, pool):
    sampler = rnshmc.HMC(model, **settings)
    start = time.perf_counter()
    result = sampler.sample(draws, tune=0, chains=chains, rng=1, init=np.zeros(model.dim),
                            progress=False, pool=pool)
    return time.perf_counter() - start, result


def chains_section(args):
    from distributed import Client, LocalCluster
    print(f"\na. chains per second against serial ({args.draws} draws per chain, HMC at fixed "
          "settings, tune 0)", flush=True)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None) as cluster, Client(cluster) as client:
        for title, (model, settings) in problems().items():
            print(f"\n  {title}")
            print(f"  {'chains':>6s} {'serial s':>9s} {'threads s':>10s} {'processes s':>12s} "
                  f"{'dask s':>7s} {'threads x':>10s} {'processes x':>12s} {'dask x':>7s}"
                  "  same draws")
            run(model, settings, 2, 10, client)  # the model reaches the workers untimed
            for chains in (1, 2, 4):
                serial, reference = run(model, settings, chains, args.draws, None)
                with ThreadPoolExecutor(2) as pool:
                    threads, threaded = run(model, settings, chains, args.draws, pool)
                with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
                    run(model, settings, 1, 10, pool)  # start the workers outside the timing
                    processes, forked = run(model, settings, chains, args.draws, pool)
                dask, distributed = run(model, settings, chains, args.draws, client)
                same = all(np.array_equal(reference.samples, other.samples)
                           for other in (threaded, forked, distributed))
                print(f"  {chains:6d} {serial:9.2f} {threads:10.2f} {processes:12.2f} "
                      f"{dask:7.2f} {serial / threads:10.2f} {serial / processes:12.2f} "
                      f"{serial / dask:7.2f}  {same}", flush=True)


def checkpoint_section(args):
    model, settings = list(problems().values())[1]
    draws, every = args.checkpoint_draws, 1000
    print(f"\nb. checkpoint overhead: HMC on the PDE, 2 chains x {draws} draws, serially, "
          f"checkpoint_every={every} (a write after every {every} iterations of every chain), "
          f"median of {args.rounds} interleaved rounds", flush=True)
    plain, checkpointed, sizes = [], [], []
    with tempfile.TemporaryDirectory() as folder:
        for k in range(args.rounds):
            path = os.path.join(folder, f"run{k}.npz")
            sampler = rnshmc.HMC(model, **settings)
            start = time.perf_counter()
            sampler.sample(draws, tune=0, chains=2, rng=1, init=np.zeros(model.dim),
                           progress=False, pool=None)
            plain.append(time.perf_counter() - start)
            start = time.perf_counter()
            sampler.sample(draws, tune=0, chains=2, rng=1, init=np.zeros(model.dim),
                           progress=False, pool=None, checkpoint=path,
                           checkpoint_every=every)
            checkpointed.append(time.perf_counter() - start)
            sizes.append(os.path.getsize(path))
    plain, checkpointed = np.median(plain), np.median(checkpointed)
    writes = -(-draws // every)
    overhead = (checkpointed - plain) / plain
    print(f"  without {plain:.2f} s, with {checkpointed:.2f} s: {writes} writes of up to "
          f"{max(sizes) / 1e6:.1f} MB, {(checkpointed - plain) / writes * 1e3:.0f} ms each; "
          f"overhead {100 * overhead:.1f}% (target <= {100 * TARGET_OVERHEAD:.0f}%: "
          f"{'met' if overhead <= TARGET_OVERHEAD else 'MISSED'})")


def shared_section(args):
    for problem in args.problems:
        model, title, _ = load_problem(problem, 0)
        unit, column = ("solves", 0) if problem == "pde" else ("seconds", 1)
        print(f"\nc. {title}: shared against per-chain surrogates (4 chains x "
              f"{args.shared_draws} draws, cost to min ESS 1000 in {unit})", flush=True)
        print(f"  {'method':34s} {'accept':>6s} {'explore evals':>13s} {'all evals':>9s} "
              f"{'min ESS':>7s} {'R-hat':>6s} {'to 1000: evals':>14s} {'seconds':>8s} "
              f"{'x HMC':>6s}")
        runs = [("HMC, Stan warm-up 200, L=10", rnshmc.HMC(model, n_steps=10), 200)]
        for cls in (rnshmc.RNSHMC, rnshmc.ARNSHMC):
            runs.append((f"{cls.name}, own, tune 200", cls(model), 200))
            for tune in args.tunes:
                runs.append((f"{cls.name}, shared, tune {tune}",
                             cls(model, share_surrogate=True), tune))
        hmc = None
        for label, sampler, tune in runs:
            result = sampler.sample(args.shared_draws, tune=tune, chains=4, rng=args.seed,
                                    init=np.zeros(model.dim), progress=False)
            evals, seconds, ess = cost_to_min_ess(result)
            cost = (evals, seconds)
            hmc = hmc or cost
            total = np.sum(result.n_density_evals) + np.sum(result.n_gradient_evals)
            sampling = (np.sum(result.n_density_evals_sampling)
                        + np.sum(result.n_gradient_evals_sampling))
            rhat = float(np.max(result.rhat())) if hasattr(result, "rhat") else float("nan")
            print(f"  {label:34s} {np.mean(result.acceptance_rate):6.2f} "
                  f"{total - sampling:13.0f} {total:9.0f} {ess:7.0f} {rhat:6.3f} "
                  f"{evals:14.0f} {seconds:8.1f} {hmc[column] / cost[column]:6.2f}", flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sections", nargs="+", default=["a", "b", "c"],
                        choices=["a", "b", "c"])
    parser.add_argument("--problems", nargs="+", default=["pde", "logistic"],
                        choices=["pde", "logistic"], help="section c's problems")
    parser.add_argument("--shared-draws", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0, help="section c's chains' seed")
    parser.add_argument("--tunes", type=int, nargs="+", default=[200, 100, 50])
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--checkpoint-draws", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    # short timing runs: their R-hat and ESS are not the point
    warnings.simplefilter("ignore", rnshmc.diagnostics.SamplingWarning)
    if "a" in args.sections:
        chains_section(args)
    if "b" in args.sections:
        checkpoint_section(args)
    if "c" in args.sections:
        shared_section(args)


if __name__ == "__main__":
    main()
