"""Chains at scale and checkpoint overhead (issue 12; more rows to come with Dask and shared
surrogates).

  a. Chains per second against serial for 1, 2 and 4 chains, on the simulated logistic
     regression (N = 100000, d = 50) and the authors' PDE (the synthetic one without the
     papers' data): HMC at fixed settings (the logistic model's C kernel pinned to one thread
     so that chains are what runs in parallel), serially, on a thread pool and on a process
     pool of 2 workers (this machine's cores). The same seed gives the same draws on each
     (checked here).
  b. Checkpoint overhead: the same HMC run on the PDE with checkpoint_every=1000 against
     none, side by side in interleaved rounds; the seconds per write and the share of the
     run (target <= 1%).

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/bench_scale.py [--draws 200]
        [--checkpoint-draws 5000] [--rounds 3]
"""
import argparse
import multiprocessing
import os
import sys
import tempfile
import time
import warnings
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import numpy as np

import rnshmc

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

TARGET_OVERHEAD = 0.01


def problems():
    import elliptic_pde
    X, y, _ = rnshmc.datasets.simulated_logistic(n=100_000, dim=50, rng=0)
    logistic = rnshmc.models.LogisticRegression(X, y, n_threads=1)
    pde, title = elliptic_pde.load()
    return {"logistic regression (N = 100000, d = 50)": (logistic, dict(step_size=0.045, n_steps=6)),
            f"elliptic PDE, {title}": (pde, dict(step_size=0.16, n_steps=10))}


def run(model, settings, chains, draws, pool):
    sampler = rnshmc.HMC(model, **settings)
    start = time.perf_counter()
    result = sampler.sample(draws, tune=0, chains=chains, rng=1, init=np.zeros(model.dim),
                            progress=False, pool=pool)
    return time.perf_counter() - start, result


def chains_section(args):
    print(f"\na. chains per second against serial ({args.draws} draws per chain, HMC at fixed "
          "settings, tune 0)", flush=True)
    for title, (model, settings) in problems().items():
        print(f"\n  {title}")
        print(f"  {'chains':>6s} {'serial s':>9s} {'threads s':>10s} {'processes s':>12s} "
              f"{'threads x':>10s} {'processes x':>12s}  same draws")
        for chains in (1, 2, 4):
            serial, reference = run(model, settings, chains, args.draws, None)
            with ThreadPoolExecutor(2) as pool:
                threads, threaded = run(model, settings, chains, args.draws, pool)
            with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
                run(model, settings, 1, 10, pool)  # start the workers outside the timing
                processes, forked = run(model, settings, chains, args.draws, pool)
            same = (np.array_equal(reference.samples, threaded.samples)
                    and np.array_equal(reference.samples, forked.samples))
            print(f"  {chains:6d} {serial:9.2f} {threads:10.2f} {processes:12.2f} "
                  f"{serial / threads:10.2f} {serial / processes:12.2f}  {same}", flush=True)


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
                           progress=False)
            plain.append(time.perf_counter() - start)
            start = time.perf_counter()
            sampler.sample(draws, tune=0, chains=2, rng=1, init=np.zeros(model.dim),
                           progress=False, checkpoint=path, checkpoint_every=every)
            checkpointed.append(time.perf_counter() - start)
            sizes.append(os.path.getsize(path))
    plain, checkpointed = np.median(plain), np.median(checkpointed)
    writes = -(-draws // every)
    overhead = (checkpointed - plain) / plain
    print(f"  without {plain:.2f} s, with {checkpointed:.2f} s: {writes} writes of up to "
          f"{max(sizes) / 1e6:.1f} MB, {(checkpointed - plain) / writes * 1e3:.0f} ms each; "
          f"overhead {100 * overhead:.1f}% (target <= {100 * TARGET_OVERHEAD:.0f}%: "
          f"{'met' if overhead <= TARGET_OVERHEAD else 'MISSED'})")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sections", nargs="+", default=["a", "b"], choices=["a", "b"])
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


if __name__ == "__main__":
    main()
