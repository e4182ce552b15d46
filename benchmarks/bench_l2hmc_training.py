"""Seconds per L2HMC training iteration at 200 chains on the paper's four toy energies.

The strongly correlated 2-d Gaussian, the 50-d ill-conditioned Gaussian, the 2-d rough well
and the mixture of two Gaussians (temperature annealed from 10): ``papers.l2hmc(model)``
(T = 10, width 10) from the initial weights of ``initialize(0)``, ``--iterations`` training
iterations (default 50) at ``--chains`` chains (default 200), burn-in weight 1 (the default).
Each figure is the median of ``--repeats`` (default 3) timed calls of ``L2HMC.train`` divided
by the iterations, with the OpenMP threads limited to each of ``--threads`` (default 1 2,
threadpoolctl; BLAS on one thread).

    python benchmarks/bench_l2hmc_training.py [--iterations 50] [--chains 200] [--repeats 3]
        [--threads 1 2]
"""
import argparse
import time

import numpy as np
from threadpoolctl import threadpool_limits

from rnshmc import papers


def energies():
    for name, (_, make) in papers.L2HMC_TARGETS.items():
        yield name, make(), 1.0
    yield "mixture", papers.L2HMC_MIXTURE["model"](), papers.L2HMC_MIXTURE["temperature"]


def seconds_per_iteration(model, temperature, iterations, chains, repeats, threads):
    times = []
    with threadpool_limits(limits=1, user_api="blas"), \
            threadpool_limits(limits=threads, user_api="openmp"):
        for _ in range(repeats):
            l2 = papers.l2hmc(model).initialize(0)
            start = time.perf_counter()
            l2.train(iterations, chains=chains, rng=1, temperature=temperature, progress=False)
            times.append((time.perf_counter() - start) / iterations)
    return float(np.median(times))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--chains", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    print(f"seconds per training iteration, {args.chains} chains, median of {args.repeats} "
          f"runs of {args.iterations} iterations")
    print(f"{'energy':<12}" + "".join(f"{f'{t} thread(s)':>14}" for t in args.threads))
    for name, model, temperature in energies():
        row = [seconds_per_iteration(model, temperature, args.iterations, args.chains,
                                     args.repeats, t) for t in args.threads]
        print(f"{name:<12}" + "".join(f"{s:>14.5f}" for s in row), flush=True)


if __name__ == "__main__":
    main()
