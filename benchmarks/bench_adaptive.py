"""ARNS-HMC's online output weights: the cost of one update against a refit (issue 10).

  b. One online update of the output weights at s hidden units (default 1000; target <= 0.5 ms
     at s = 1000): ``OnlineLeastSquares.update`` per row, amortised over blocks of 64 rows
     (the recursive-least-squares branch after a ridge start: Theta h and a rank-one update
     of the s x s triangle, plus the normal matrix kept for the drift refresh, which takes
     the rows 64 at a time by one dsyrk), ``RandomNetworkSurrogate.partial_fit`` of one point
     (with the hidden layer and its checks), and a refit of the same data
     (``RandomNetworkSurrogate.fit``, values only) for comparison; medians of interleaved
     rounds (benchmarks/_timing.py).

Sections a (cost from a cold start to min ESS >= 1000) and c (acceptance against training
points) are still to come.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/bench_adaptive.py
"""
import argparse
import os

import numpy as np

import rnshmc
from _timing import ratio_line, rounds  # benchmarks/ is on sys.path
from rnshmc._kernels._online import OnlineLeastSquares

TARGET_MS = 0.5
BLOCK = 64  # as the estimator's pending-row buffer


def update_section(args):
    rng = np.random.default_rng(args.seed)
    s, dim, n = args.n_hidden, 10, args.points
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n-hidden", type=int, default=1000)
    parser.add_argument("--points", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"rnshmc {rnshmc.__version__}, {os.cpu_count()} CPUs, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}, OPENBLAS_NUM_THREADS="
          f"{os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}")
    update_section(args)


if __name__ == "__main__":
    main()
