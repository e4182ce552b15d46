"""L2HMC against HMC, and L2HMC on a surrogate against RNS-HMC, side by side.

  a. The paper's toy targets (docs/algorithms.md sec. 7): the strongly correlated 2-d Gaussian, the
     50-d ill-conditioned Gaussian and the 2-d rough well. L2HMC trained with the reference
     settings (``--train-chains`` 200 chains, T = 10, eps0 = 0.1, Adam lr 1e-3 x 0.96 every
     1000 steps, lambda = 0.1, ``--train-iterations`` 5000), against HMC with the paper's
     settings (10 leapfrog steps, eps in {0.1, 0.15, 0.2}, identity mass, no jitter) and HMC at
     its best (Stan warm-up of the step size and a diagonal mass matrix, the best L of
     ``--hmc-lengths``), and between them HMC with the paper's L and identity mass whose step
     size is tuned (dual averaging to an acceptance of 0.65, 0.8 or 0.9, the best kept). Every sampler: ``--chains`` chains x ``--draws`` draws after a
     burn-in/warm-up of ``--tune`` from the same N(0, I) starting points. Also L2HMC in
     coordinates standardised by the variances of an HMC warm-up, from its step size (its
     gradients counted with the training's). Min ESS (pooled
     chains) per gradient of the sampling phase, and per gradient with training (its
     gradients and Hessian-vector products, one gradient each: analytic for these targets)
     or warm-up included, for this run's draws. "authors": the same per sampling gradient
     with the authors' ESS estimator (``authors_ess_per_draw``), which pools the coordinates
     weighted by their variances; "x^2/grad": min ESS of the squared centred draws per
     sampling gradient. ``--scale`` and ``--burnin-weight`` set the loss's lambda
     and burn-in weight (the authors' notebook: 0.1 and 1).
  b. The mixture of two Gaussians (sigma^2 = 0.1, means (+-2, 0)): L2HMC trained with the
     temperature annealed from ``--temperature`` to 1, against HMC at its best: the
     mode-switching rate (transitions that change the sign of x_1, per transition).
  c. L2HMC on the surrogate against RNS-HMC, on the authors' PDE (the papers' data beside
     the checkout, else the synthetic problem) and Bank Marketing: min ESS per exact
     evaluation (densities + gradients, from the first iteration: a PDE gradient is a
     forward and an adjoint solve) and per second (everything from the first iteration).
     L2HMC: one RNS-HMC exploration of ``--tune-explore`` iterations and its surrogate,
     ``--surrogate-train-iterations`` of training on the surrogate (standardised
     coordinates, ``--surrogate-train-chains``), then ``--chains`` chains. RNS-HMC: its
     defaults with the same exploration length, once with ``--chains`` chains (each explores
     and fits its own surrogate) and once as one chain of ``--chains`` x ``--draws`` draws
     (one exploration, as L2HMC's).

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/bench_l2hmc.py
        [--sections a b c] [--targets correlated ill rough] [--train-iterations 5000]
        [--draws 2000] [--chains 4] [--seed 0]
"""
import argparse
import time
import warnings

import numpy as np

import rnshmc
from rnshmc import papers

TARGETS = papers.L2HMC_TARGETS
PAPER_STEP_SIZES = papers.L2HMC_HMC["step_sizes"]
# the targets on the correlated Gaussian: L2HMC's ESS per gradient against HMC's
TARGET_VS_PAPER, TARGET_VS_BEST = 20.0, 2.0
# acceptance targets of the step-size tuning of HMC with the paper's L and identity mass
TUNED_ACCEPTANCE = (0.65, 0.8, 0.9)


def quietly(function, *args, **kwargs):
    """Call with warnings recorded; returns (value, first warning's text or "")."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = function(*args, **kwargs)
    return value, (str(caught[0].message)[:70] if caught else "")


def authors_ess_per_draw(samples, total_variance):
    """The L2HMC authors' ESS (``utils/func_utils.py`` of brain-research/l2hmc: ``ESS`` of
    ``acl_spectrum(X, scale=sqrt(trace(cov)))``), per draw of one chain: the autocovariance
    at lag tau is the mean over t of sum over chains and coordinates of x_t x_{t+tau}, over
    the number of chains, on x / sqrt(trace(cov)) -- the known mean 0 and total variance,
    coordinates pooled with weights their variances -- and ESS = 1 / (1 + 2 sum of the lags
    >= 1 whose autocovariance is above 0.05), no truncation at the first small lag. FFT
    for the sums over t; the same numbers as their loop."""
    chains, draws, _ = samples.shape
    x = samples / np.sqrt(total_variance)
    size = 2 ** int(np.ceil(np.log2(2 * draws)))
    spectrum = np.fft.rfft(x, n=size, axis=1)
    lagged = np.fft.irfft(spectrum * np.conj(spectrum), n=size, axis=1)[:, :draws]
    autocovariance = lagged.sum(axis=(0, 2)) / chains / (draws - np.arange(draws))
    kept = autocovariance[1:draws - 1] * (autocovariance[1:draws - 1] > 0.05)
    return 1.0 / (1.0 + 2.0 * kept.sum())


def sampling_row(result, extra_gradients=0, total_variance=None):
    """(acceptance, min ESS, ESS per sampling gradient, ESS per gradient incl. extra, the
    authors' ESS per sampling gradient, min ESS of the squared centred draws per sampling
    gradient). The last sees what the ESS of x cannot: a map that jumps to the antipode
    (negative autocorrelation of x) while the energy level hardly mixes."""
    ess = float(result.ess().min())
    sampling = float(np.sum(result.n_gradient_evals_sampling))
    total = float(np.sum(result.n_gradient_evals)) + extra_gradients
    draws = result.samples.shape[0] * result.samples.shape[1]
    authors = (np.nan if total_variance is None else
               authors_ess_per_draw(result.samples, total_variance) * draws / sampling)
    draws_ = result.samples
    centred = draws_ - draws_.reshape(-1, draws_.shape[-1]).mean(axis=0)
    squares = float(rnshmc.diagnostics.ess(centred ** 2).min())
    return (float(np.mean(result.acceptance_rate)), ess, ess / sampling, ess / total, authors,
            squares / sampling)


def train_l2hmc(model, args, standardize=None, step_size=papers.L2HMC_SETTINGS["step_size"],
                **train):
    l2 = papers.l2hmc(model, step_size=step_size, standardize=standardize).initialize(args.seed)
    l2.train(args.train_iterations, chains=args.train_chains, rng=args.seed + 1,
             progress=False, scale=args.scale, burnin_weight=args.burnin_weight, **train)
    return l2


def total_variance(model, args):
    """trace(cov) of a toy target (for the authors' ESS): its own, or (rough wells) a long
    HMC run's."""
    covariance = getattr(model, "covariance", None)
    if covariance is not None:
        return float(np.trace(covariance))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        long = rnshmc.HMC(model).sample(20000, tune=1000, chains=4, rng=args.seed + 99,
                                        progress=False)
    return float(long.samples.reshape(-1, model.dim).var(axis=0).sum())


def toy_section(args):
    print(f"\na. ESS per gradient: L2HMC (reference training: {args.train_chains} chains, "
          f"{args.train_iterations} steps) against HMC; {args.chains} chains x {args.draws} draws "
          f"after {args.tune} burn-in/warm-up", flush=True)
    for key in args.targets:
        title, make = TARGETS[key]
        model = make()
        init = np.random.default_rng(args.seed).standard_normal((args.chains, model.dim))
        kwargs = dict(draws=args.draws, tune=args.tune, chains=args.chains, rng=args.seed + 2,
                      init=init, progress=False)
        print(f"\n  {title}")
        print(f"  {'method':36s} {'accept':>6s} {'min ESS':>8s} {'ESS/grad':>9s} "
              f"{'incl. train/warm-up':>19s}  {'authors':>9s}  {'x^2/grad':>9s}  {'seconds':>7s}  "
              "notes")
        variance = total_variance(model, args)
        rows = {}
        start = time.perf_counter()
        l2 = train_l2hmc(model, args)
        train_seconds = time.perf_counter() - start
        training = l2.training_evals["gradient"] + l2.training_evals["hessian_vector"]
        try:
            result, note = quietly(l2.sample, **kwargs)
        except ValueError as refused:  # (weights whose training chains accept nothing)
            print(f"  L2HMC (trained): refused to sample: {refused}", flush=True)
            continue
        l2_result = result
        rows["L2HMC"] = sampling_row(result, training, variance)
        print_row("L2HMC (trained)", rows["L2HMC"], train_seconds + sum(result.timings.values()),
                  f"eps {l2.step_size:.3f}, training {train_seconds:.0f} s, "
                  f"{training:.3g} gradient-equivalents {note}")
        # standardised by the variances of an HMC warm-up (as a diagonal mass matrix)
        start = time.perf_counter()
        warm = rnshmc.HMC(model, n_steps=10).sample(1, tune=args.tune, rng=args.seed,
                                                    init=init[0], progress=False)
        scale = np.sqrt(warm.inverse_mass_matrix[0])
        # starting from the warm-up's step size, which is in those coordinates
        l2s = train_l2hmc(model, args, standardize=(np.zeros(model.dim), scale),
                          step_size=float(warm.step_size[0]))
        seconds = time.perf_counter() - start
        extra = (l2s.training_evals["gradient"] + l2s.training_evals["hessian_vector"]
                 + int(np.sum(warm.n_gradient_evals)))
        result, note = quietly(l2s.sample, **kwargs)
        rows["L2HMC standardised"] = sampling_row(result, extra, variance)
        print_row("L2HMC, standardised by a warm-up", rows["L2HMC standardised"],
                  seconds + sum(result.timings.values()),
                  f"eps {l2s.step_size:.3f}, scales {scale.min():.3g}..{scale.max():.3g} {note}")
        untrained = papers.l2hmc(model).initialize(args.seed)
        result, note = quietly(untrained.sample, **kwargs)
        print_row(f"L2HMC (untrained, eps {papers.L2HMC_SETTINGS['step_size']:g})",
                  sampling_row(result, total_variance=variance), sum(result.timings.values()), note)
        for eps in PAPER_STEP_SIZES:
            hmc = rnshmc.HMC(model, step_size=eps, n_steps=papers.L2HMC_HMC["n_steps"],
                             jitter=False)
            result, note = quietly(hmc.sample, **kwargs)
            rows[f"HMC eps {eps}"] = sampling_row(result, total_variance=variance)
            print_row(f"HMC, paper's settings, eps {eps}", rows[f"HMC eps {eps}"],
                      sum(result.timings.values()), note)
        # the paper's protocol, well tuned: the same L, identity mass, no jitter, the step
        # size by dual averaging to each acceptance target, the best of them kept
        tuned = None
        for accept in TUNED_ACCEPTANCE:
            hmc = rnshmc.HMC(model, n_steps=papers.L2HMC_HMC["n_steps"], jitter=False,
                             adapt_mass_matrix=False, target_accept=accept)
            result, note = quietly(hmc.sample, **kwargs)
            row = sampling_row(result, total_variance=variance)
            print_row(f"HMC, same L, tuned eps (accept {accept})", row,
                      sum(result.timings.values()), f"eps {np.mean(result.step_size):.3g} {note}")
            if tuned is None or row[2] > tuned[1][2]:
                tuned = (accept, row)
        rows["HMC tuned"] = tuned[1]
        best = None
        for L in args.hmc_lengths:
            result, note = quietly(rnshmc.HMC(model, n_steps=L).sample, **kwargs)
            row = sampling_row(result, total_variance=variance)
            print_row(f"HMC, Stan warm-up, L={L}", row, sum(result.timings.values()),
                      f"eps {np.mean(result.step_size):.3g} {note}")
            if best is None or row[2] > best[1][2]:
                best = (L, row, result)
        rows["HMC best"] = best[1]
        ours = rows["L2HMC"][2]
        print(f"  L2HMC standardised / HMC at its best (L={best[0]}): "
              f"{rows['L2HMC standardised'][2] / rows['HMC best'][2]:8.2f}x ESS per gradient")
        for eps in PAPER_STEP_SIZES:
            ratio = ours / rows[f"HMC eps {eps}"][2]
            target = f"  (target >= {TARGET_VS_PAPER:.0f}x: {'met' if ratio >= TARGET_VS_PAPER else 'MISSED'})" \
                if key == "correlated" else ""
            authors = rows["L2HMC"][4] / rows[f"HMC eps {eps}"][4]
            print(f"  L2HMC / HMC paper eps {eps}: {ratio:8.2f}x ESS per gradient{target} "
                  f"(the authors' ESS: {authors:.2f}x)")
        print(f"  L2HMC / HMC same L, tuned eps (accept {tuned[0]}): "
              f"{ours / rows['HMC tuned'][2]:8.2f}x ESS per gradient "
              f"(the authors' ESS: {rows['L2HMC'][4] / rows['HMC tuned'][4]:.2f}x)")
        ratio = ours / rows["HMC best"][2]
        target = f"  (target >= {TARGET_VS_BEST:.0f}x: {'met' if ratio >= TARGET_VS_BEST else 'MISSED'})" \
            if key == "correlated" else ""
        print(f"  L2HMC / HMC at its best (L={best[0]}): {ratio:8.2f}x ESS per gradient{target}")
        print(f"  with training / warm-up counted: {rows['L2HMC'][3] / rows['HMC best'][3]:8.4f}x",
              flush=True)
        draws = rnshmc.L2HMC.break_even(l2_result, best[2])
        print(f"  break-even against HMC at its best: {draws:.3g} effective draws "
              "(model evaluations, training and warm-ups included)", flush=True)


def print_row(label, row, seconds, note=""):
    accept, ess, per_gradient, included, authors, squares = row
    print(f"  {label:36s} {accept:6.2f} {ess:8.0f} {per_gradient:9.5f} {included:19.6f}  "
          f"{authors:9.5f}  {squares:9.5f}  {seconds:7.1f}  {note}", flush=True)


def switching_rate(samples):
    signs = np.sign(samples[..., 0])
    return float(np.mean(signs[:, 1:] != signs[:, :-1]))


def mixture_section(args):
    model = papers.L2HMC_MIXTURE["model"]()
    print(f"\nb. Mixture of two Gaussians: mode-switching rate per transition ({args.chains} "
          f"chains x {args.draws} draws; L2HMC trained with the temperature annealed from "
          f"{args.temperature} to 1)", flush=True)
    init = np.random.default_rng(args.seed).standard_normal((args.chains, 2))
    kwargs = dict(draws=args.draws, tune=args.tune, chains=args.chains, rng=args.seed + 2,
                  init=init, progress=False)
    start = time.perf_counter()
    l2 = train_l2hmc(model, args, temperature=args.temperature)
    seconds = time.perf_counter() - start
    result, note = quietly(l2.sample, **kwargs)
    print(f"  L2HMC: switching rate {switching_rate(result.samples):.4f}, mean x_1 "
          f"{result.samples[..., 0].mean():+.3f} (0 exact), acceptance "
          f"{np.mean(result.acceptance_rate):.2f}, training {seconds:.0f} s {note}")
    for L in args.hmc_lengths:
        result, note = quietly(rnshmc.HMC(model, n_steps=L).sample, **kwargs)
        print(f"  HMC, Stan warm-up, L={L}: switching rate {switching_rate(result.samples):.4f}, "
              f"mean x_1 {result.samples[..., 0].mean():+.3f} {note}", flush=True)


def load_costly(name):
    if name == "pde":
        model, title = papers.load_pde()
        return model, f"elliptic PDE, {title}", "solves"
    return papers.load_logistic("bank"), "Bank Marketing logistic regression", "evaluations"


def surrogate_section(args):
    print(f"\nc. L2HMC on the surrogate against RNS-HMC: min ESS per exact evaluation and per "
          f"second, everything from the first iteration ({args.chains} chains x {args.draws} "
          f"draws, exploration {args.tune_explore} iterations)", flush=True)
    for name in args.problems:
        model, title, unit = load_costly(name)
        init = np.zeros(model.dim)
        print(f"\n  {title} (d = {model.dim}); exact {unit} = densities + gradients")
        print(f"  {'method':40s} {'accept':>6s} {'min ESS':>8s} {'exact':>8s} {'ESS/exact':>9s} "
              f"{'seconds':>8s} {'ESS/s':>7s}  notes")
        rows = {}
        start = time.perf_counter()
        l2, note = quietly(rnshmc.L2HMC.with_surrogate, model, tune=args.tune_explore,
                           rng=args.seed, init=init, progress=False,
                           n_steps=papers.L2HMC_SETTINGS["n_steps"])
        l2.train(args.surrogate_train_iterations, chains=args.surrogate_train_chains,
                 rng=args.seed + 1, learning_rate=args.surrogate_learning_rate, progress=False)
        starts = l2.exploration["states"][-args.chains:]
        result, note2 = quietly(l2.sample, draws=args.draws, tune=50, chains=args.chains,
                                rng=args.seed + 2, init=starts, progress=False)
        seconds = time.perf_counter() - start
        exact = (l2.exploration["n_density_evals"] + l2.exploration["n_gradient_evals"]
                 + np.sum(result.n_density_evals) + np.sum(result.n_gradient_evals))
        rows["L2HMC"] = surrogate_row("L2HMC on the surrogate", result, exact, seconds,
                                      f"eps {l2.step_size:.3f}, training "
                                      f"{l2.training_evals['seconds']:.0f} s, fit residual "
                                      f"{l2.exploration['fit_residual']:.3f} {note} {note2}")
        for label, chains, draws in (("RNS-HMC defaults", args.chains, args.draws),
                                     ("RNS-HMC defaults, one chain", 1, args.chains * args.draws)):
            start = time.perf_counter()
            result, note = quietly(rnshmc.RNSHMC(model).sample, draws=draws,
                                   tune=args.tune_explore, chains=chains, rng=args.seed + 3,
                                   init=init, progress=False)
            seconds = time.perf_counter() - start
            exact = np.sum(result.n_density_evals) + np.sum(result.n_gradient_evals)
            rows[label] = surrogate_row(label, result, exact, seconds,
                                        f"L {result.surrogate_n_steps.tolist()} {note}")
        for label in ("RNS-HMC defaults", "RNS-HMC defaults, one chain"):
            per_exact = rows["L2HMC"][0] / rows[label][0]
            per_second = rows["L2HMC"][1] / rows[label][1]
            print(f"  L2HMC / {label}: {per_exact:.2f}x min ESS per exact evaluation, "
                  f"{per_second:.2f}x per second", flush=True)


def surrogate_row(label, result, exact, seconds, note):
    ess = float(result.ess().min())
    print(f"  {label:40s} {np.mean(result.acceptance_rate):6.2f} {ess:8.0f} {exact:8.0f} "
          f"{ess / exact:9.4f} {seconds:8.1f} {ess / seconds:7.1f}  {note}", flush=True)
    return ess / exact, ess / seconds


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sections", nargs="+", default=["a", "b", "c"], choices=["a", "b", "c"])
    parser.add_argument("--targets", nargs="+", default=list(TARGETS), choices=list(TARGETS))
    parser.add_argument("--problems", nargs="+", default=["pde", "bank"], choices=["pde", "bank"])
    parser.add_argument("--train-iterations", type=int,
                        default=papers.L2HMC_TRAINING["iterations"])
    parser.add_argument("--train-chains", type=int, default=papers.L2HMC_TRAINING["chains"])
    parser.add_argument("--scale", type=float, default=0.1,
                        help="the loss's lambda (the authors' notebook: 0.1)")
    parser.add_argument("--burnin-weight", type=float, default=1.0,
                        help="weight of the loss's burn-in term (the authors': 1)")
    parser.add_argument("--temperature", type=float,
                        default=papers.L2HMC_MIXTURE["temperature"])
    parser.add_argument("--hmc-lengths", type=int, nargs="+", default=[5, 10, 20, 40, 80, 160])
    parser.add_argument("--draws", type=int, default=2000)
    parser.add_argument("--tune", type=int, default=1000)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--tune-explore", type=int, default=200)
    parser.add_argument("--surrogate-train-iterations", type=int, default=1500)
    parser.add_argument("--surrogate-train-chains", type=int, default=50)
    parser.add_argument("--surrogate-learning-rate", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if "a" in args.sections:
        toy_section(args)
    if "b" in args.sections:
        mixture_section(args)
    if "c" in args.sections:
        surrogate_section(args)


if __name__ == "__main__":
    main()
