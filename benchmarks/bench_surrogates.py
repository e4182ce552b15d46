"""Random networks against Gaussian processes as the surrogate of surrogate HMC, side by side,
against the number of training points.

Problems (``--problems``): the RNS paper's 32-d narrow Gaussian (its Fig. 3, covariance
``rnshmc-original/Sigma.mat`` of the papers' data; without the data, the paper's description:
eigenvalue 1 along (1, ..., 1), 0.01 across, in a random basis) and the authors' elliptic
PDE (``ePDE.mat``; without the data the synthetic problem). For each: one exact HMC chain
(Stan warm-up to acceptance 0.7, as the paper's Fig. 3 sets HMC's step size; ``--n-steps``
leapfrog steps) whose first N states, with their potentials and gradients, are the training
points, for N in ``--n-train``. Each surrogate is fitted to them:

- ``RN grad``: :class:`rnshmc.RandomNetworkSurrogate` with ``--n-hidden`` additive softplus
  units on whitened inputs, fitted to values and gradients (RNS-HMC's default fit);
- ``RN values``: the same fitted to values only, as the GPs are;
- ``full GP``: :class:`rnshmc.GaussianProcessSurrogate` (ARD squared exponential, whitened
  inputs, hyperparameters by marginal likelihood on at most 1000 of the points);
- ``FITC``: the same with ``--n-inducing`` inducing points (at most N).

Surrogate HMC then runs ``--chains`` chains of ``--draws`` iterations from the last training
state (leapfrog on the surrogate's gradient, Metropolis test on the exact density: rnshmc's C
chain, the HMC run's step size and inverse mass matrix, ``--n-steps`` steps jittered).
Columns: fit seconds; surrogate gradient microseconds (median of ``--repeats`` interleaved
rounds over the classes); acceptance; min ESS per second of sampling (the chains' seconds,
exact densities included). The last lines say, per N, which class had the best min ESS per
second and the random network's ratio to the best GP.

    OMP_NUM_THREADS=1 python benchmarks/bench_surrogates.py [--problems gaussian pde]
        [--n-train 500 1000 2000 4000 8000] [--draws 2000] [--chains 3] [--seed 0]
"""
import argparse
import time
import warnings

import numpy as np
import scipy.io

import rnshmc
from _timing import rounds  # benchmarks/ is on sys.path
from rnshmc import papers
from rnshmc._kernels._chain import TRANSITION
from rnshmc._kernels._integrators import Leapfrog
from rnshmc._kernels._metrics import EuclideanMetric
from rnshmc._kernels._transition import Chain
from rnshmc.targets import as_ctarget


def narrow_gaussian(seed):
    """The RNS paper's Fig. 3 target and where its covariance came from."""
    path = papers.shared_data_dir() / "rnshmc-original" / "Sigma.mat"
    if path.is_file():
        covariance = scipy.io.loadmat(path)["Sigma"]
        source = f"{path.name} of the papers' data"
    else:
        rng = np.random.default_rng(seed)
        basis, _ = np.linalg.qr(np.column_stack([np.ones(32), rng.standard_normal((32, 31))]))
        covariance = basis @ np.diag([1.0] + [0.01] * 31) @ basis.T
        source = "built from the paper's description (no papers' data)"
    return rnshmc.models.Gaussian(np.zeros(32), covariance=covariance), \
        f"32-d narrow Gaussian ({source})"


def load(name, seed):
    if name == "gaussian":
        return narrow_gaussian(seed)
    model, title = papers.load_pde()
    return model, f"elliptic PDE, {title}"


def training_pool(model, n_max, n_steps, seed):
    """An exact HMC chain of ``n_max`` states after a Stan warm-up to acceptance 0.7: its
    states, potentials, gradients, step size and inverse mass matrix."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run = rnshmc.HMC(model, n_steps=n_steps, target_accept=0.7).sample(
            n_max, tune=1000, chains=1, rng=seed, init=np.zeros(model.dim), progress=False,
            pool=None)
    Q = run.samples[0]
    U, G = zip(*(model.potential_and_gradient(q) for q in Q))
    return Q, np.array(U), np.array(G), float(run.step_size[0]), run.inverse_mass_matrix[0]


def surrogates(dim, n, args):
    """{label: unfitted surrogate, fit keyword arguments} of the compared classes."""
    network = dict(n_hidden=args.n_hidden, whiten=True, ridge=1e-6)
    return {
        "RN grad": (rnshmc.RandomNetworkSurrogate(dim, rng=args.seed, **network), True),
        "RN values": (rnshmc.RandomNetworkSurrogate(dim, rng=args.seed, **network), False),
        "full GP": (rnshmc.GaussianProcessSurrogate(dim, rng=args.seed), False),
        "FITC": (rnshmc.GaussianProcessSurrogate(dim, sparse=True, rng=args.seed,
                                                 n_inducing=min(args.n_inducing, n)), False),
    }


def surrogate_hmc(model, surrogate, start, step_size, inverse_mass, args):
    """(acceptance, min ESS per second) of surrogate HMC on the fitted ``surrogate``."""
    exact = as_ctarget(model, model.dim)
    samples = np.empty((args.chains, args.draws, model.dim))
    accepted, seconds = [], 0.0
    for c in range(args.chains):
        chain = Chain(surrogate._ctarget, exact, EuclideanMetric(model.dim, inverse_mass),
                      Leapfrog())  # (the surrogate's C target: the samplers' own chain)
        chain.set_position(start)
        chain.step_size = step_size
        records = np.empty(args.draws, TRANSITION)
        begin = time.perf_counter()
        chain.run(np.random.default_rng([args.seed, c]), args.draws, args.n_steps, True,
                  samples[c], records)
        seconds += time.perf_counter() - begin
        accepted.append(records["accepted"].mean())
    ess = float(np.min(rnshmc.diagnostics.ess(samples)))
    return float(np.mean(accepted)), ess / seconds, ess


def problem(name, args):
    model, title = load(name, args.seed)
    start = time.perf_counter()
    Q, U, G, step_size, inverse_mass = training_pool(model, max(args.n_train), args.n_steps,
                                                     args.seed)
    print(f"\n{title}: d = {model.dim}; training pool {len(Q)} exact HMC states "
          f"({time.perf_counter() - start:.0f} s), step size {step_size:.3g}, L = "
          f"{args.n_steps} jittered; {args.chains} chains x {args.draws} iterations per fit",
          flush=True)
    print(f"  {'N':>5s}  {'surrogate':10s} {'fit s':>8s} {'grad us':>9s} {'accept':>7s} "
          f"{'min ESS':>8s} {'min ESS/s':>10s}")
    summary = []
    for n in args.n_train:
        fitted = {}
        for label, (surrogate, with_gradients) in surrogates(model.dim, n, args).items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                surrogate.fit(Q[:n], U[:n], gradients=G[:n] if with_gradients else None,
                              gradient_weight=1.0 if with_gradients else 0.0)
            fitted[label] = surrogate
        calls = 2000
        times = rounds({label: (lambda s=s: s._ctarget.time_evaluations(Q[n - 1], calls,
                                                                          "gradient"))
                        for label, s in fitted.items()}, args.repeats, 1)
        rows = {}
        for label, surrogate in fitted.items():
            accept, per_second, ess = surrogate_hmc(model, surrogate, Q[n - 1], step_size,
                                                    inverse_mass, args)
            gradient_us = float(np.median(times[label])) / calls * 1e6
            rows[label] = per_second
            print(f"  {n:5d}  {label:10s} {surrogate.fit_time_:8.2f} {gradient_us:9.1f} "
                  f"{accept:7.2f} {ess:8.0f} {per_second:10.1f}", flush=True)
        best = max(rows, key=rows.get)
        network = max(rows["RN grad"], rows["RN values"])
        gp = max(rows["full GP"], rows["FITC"])
        summary.append(f"  N = {n}: best {best}; the better random network / the better GP in "
                       f"min ESS per second: {network / gp:.2f}x")
    print("\n".join(summary), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--problems", nargs="+", default=["gaussian", "pde"],
                        choices=["gaussian", "pde"])
    parser.add_argument("--n-train", type=int, nargs="+", default=[500, 1000, 2000, 4000, 8000])
    parser.add_argument("--n-hidden", type=int, default=1000)
    parser.add_argument("--n-inducing", type=int, default=1000)
    parser.add_argument("--n-steps", type=int, default=10)
    parser.add_argument("--draws", type=int, default=2000)
    parser.add_argument("--chains", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for name in args.problems:
        problem(name, args)


if __name__ == "__main__":
    main()
