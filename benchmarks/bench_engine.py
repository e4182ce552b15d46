"""Engine benchmark (issue 2): prints ratios measured side by side in one run.

On the papers' simulated logistic regression (d=50, N=100,000 by default):
  1. C-level potential-and-gradient vs the NumPy formulation (X @ b, then X.T @ r)   target >= 2x
  2. vs the memory floor, one X @ b with NumPy's threaded BLAS:
     potential-and-gradient <= 1.3x, potential alone <= 1.1x
  3. HMC seconds per iteration, C-level model vs the same model behind Python callables
  4. C loop overhead per leapfrog step beyond the gradient, at d=50               target <= 2 us

Each figure is the median over ``--repeats`` rounds; within a round the competitors run one
after the other (interleaved), each as a block of consecutive calls whose median is taken, so
ratios of medians compare like with like on a noisy machine.
The spread (min..max of the per-round ratio) is printed beside each ratio.

    python benchmarks/bench_engine.py [--n 100000] [--dim 50] [--repeats 15]

On machines that set OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE (older-OpenBLAS workarounds), NumPy's
BLAS runs a slower kernel; unset both for this command to compare against NumPy at its best.
"""
import argparse
import time

import numpy as np
import scipy.special

import rnshmc
from _timing import ratio_line, rounds, timed  # benchmarks/ is on sys.path
from rnshmc._kernels._hmc import HMCKernel


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()

    print(f"rnshmc {rnshmc.__version__}, OpenMP kernels: {rnshmc.models.LogisticRegression.openmp_enabled}")
    try:  # optional: only to report the BLAS and OpenMP runtimes in use
        from threadpoolctl import threadpool_info
    except ImportError:
        threadpool_info = list
    for info in threadpool_info():
        print(f"  {info['user_api']:7s} {info['internal_api']:9s} threads={info['num_threads']} "
              f"{info.get('architecture', '')} {info['filepath'].split('/')[-1]}")

    X, y, beta = rnshmc.datasets.simulated_logistic(args.n, args.dim, rng=1)
    model = rnshmc.models.LogisticRegression(X, y)
    ctarget = model._ctarget
    q = beta.copy()
    inv_alpha = 1.0 / model.prior_variance

    def numpy_potential_and_gradient():
        eta = X @ q
        U = np.sum(np.logaddexp(0.0, eta) - y * eta) + 0.5 * inv_alpha * q @ q
        r = scipy.special.expit(eta) - y
        return U, X.T @ r + inv_alpha * q

    U_ref, g_ref = numpy_potential_and_gradient()
    U_c, g_c = ctarget.eval_potential_and_gradient(q)
    assert abs(U_c - U_ref) <= 1e-10 * abs(U_ref) and np.allclose(g_c, g_ref, rtol=1e-9, atol=1e-9)

    print(f"\n1-2. density on simulated logistic regression, N={args.n}, d={args.dim} "
          f"(median of {args.repeats} interleaved rounds)")
    t = rounds({
        "c_pg": lambda: ctarget.eval_potential_and_gradient(q),
        "c_p": lambda: ctarget.eval_potential(q),
        "numpy_pg": numpy_potential_and_gradient,
        "xb": lambda: X @ q,
    }, args.repeats, inner=30)
    for name, label in [("c_pg", "C potential+gradient"), ("c_p", "C potential only"),
                        ("numpy_pg", "NumPy potential+gradient"), ("xb", "one X @ b (memory floor)")]:
        print(f"  {label:<34s} {1e6 * np.median(t[name]):9.1f} us  (min {1e6 * t[name].min():.1f})")
    ratio_line("speed-up of C potential+gradient over NumPy", t["numpy_pg"], t["c_pg"], 2.0, "higher")
    ratio_line("C potential+gradient / one X @ b", t["c_pg"], t["xb"], 1.3)
    ratio_line("C potential only / one X @ b", t["c_p"], t["xb"], 1.1)

    print("\n3. HMC seconds per iteration (eps=0.045, L=6 jittered), same model")
    d = 50
    A = np.random.default_rng(2).standard_normal((d, d))
    gaussian = rnshmc.models.Gaussian(np.zeros(d), precision=A @ A.T / d + np.eye(d))
    iters = 20
    for label, model_, init, n_iter in [
            (f"logistic regression, N={args.n}", model, beta, iters),
            ("Gaussian, d=50 (cheap gradient: shows the per-call cost)", gaussian, np.zeros(d), 2000)]:
        python_target = rnshmc.Target(None, logp_and_grad=model_.log_density_gradient, dim=model_.dim)
        samplers = {"c": rnshmc.HMC(model_, step_size=0.045, n_steps=6),
                    "py": rnshmc.HMC(python_target, step_size=0.045, n_steps=6)}

        def run(sampler, init=init, n_iter=n_iter):
            return lambda: sampler.sample(n_iter, tune=0, rng=0, init=init, progress=False)

        t = rounds({k: run(s) for k, s in samplers.items()}, max(5, args.repeats // 3), inner=1)
        print(f"  {label}")
        for k, name in [("c", "C-level model"), ("py", "same model behind Python callables")]:
            print(f"    {name:<36s} {1e6 * np.median(t[k]) / n_iter:10.1f} us/iter")
        ratio_line("  Python callables / C-level (s/iter)", t["py"], t["c"])

    print("\n4. C loop overhead per leapfrog step beyond the gradient (Gaussian target, d=50)")
    kernel = HMCKernel(gaussian._ctarget)
    kernel.set_position(np.zeros(d))
    n_iter, n_steps = 2000, 10
    out = [np.empty((n_iter, d)), np.empty(n_iter), np.empty(n_iter, np.uint8), np.empty(n_iter),
           np.empty(n_iter, np.uint8), np.empty(n_iter), np.empty(n_iter, np.int64)]
    generator = np.random.default_rng(0)
    q0 = np.zeros(d)
    t = rounds({
        "loop": lambda: kernel.run(generator, n_iter, 0.1, n_steps, False, *out),
        "grad": lambda: gaussian._ctarget.time_evaluations(q0, n_iter * n_steps),
    }, args.repeats, inner=1)
    per_step = t["loop"] / (n_iter * n_steps)
    per_grad = t["grad"] / (n_iter * n_steps)
    overhead = per_step - per_grad
    print(f"  time per leapfrog step        {1e6 * np.median(per_step):7.3f} us")
    print(f"  of which the gradient         {1e6 * np.median(per_grad):7.3f} us")
    med = 1e6 * np.median(overhead)
    print(f"  overhead per step             {med:7.3f} us (per-round {1e6 * overhead.min():.3f}.."
          f"{1e6 * overhead.max():.3f})  target <= 2 us: {'met' if med <= 2 else 'MISSED'}")
    print("  (includes per iteration: d normal draws, one uniform, the Metropolis test and the"
          " copy of the state into the output)")


if __name__ == "__main__":
    main()
