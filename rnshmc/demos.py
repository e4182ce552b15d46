"""The ``rnshmc demo`` commands (see ``rnshmc demo --help``)."""
import os
import tempfile
import time

import numpy as np

__all__ = ["logistic", "pde", "CommandLineError"]

# what each demo writes into --out (plots only with matplotlib)
OUTPUTS = {"pde": ("pde_front_door.npz", "pde_hmc.npz", "pde_rns_hmc.npz", "pde_table.txt",
                   "pde_marginals.png", "pde_log_kappa.png"),
           "logistic": ("logistic_hmc.npz",)}


class CommandLineError(Exception):
    """A problem with the command line's inputs, reported in one line before any sampling."""


def check_output_folder(args):
    """Before any sampling: --out can be created and written, and holds no earlier outputs
    of this demo unless --overwrite."""
    out = args.out
    try:
        os.makedirs(out, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as error:
        raise CommandLineError(f"--out {out!r} is not a writable folder ({error.strerror or error})") from None
    existing = [name for name in OUTPUTS[args.demo] if os.path.exists(os.path.join(out, name))]
    if existing and not args.overwrite:
        raise CommandLineError(f"--out {out!r} already holds {', '.join(existing)} from an "
                               "earlier run: choose another --out or pass --overwrite")


def run_lengths(args):
    """(draws, tune): the command line's where given, else the demo's defaults (--quick's
    shorter ones with --quick)."""
    defaults = args.quick_lengths if args.quick else args.default_lengths
    return tuple(given if given is not None else default
                 for given, default in zip((args.draws, args.tune), defaults))


def logistic(args):
    """HMC on the papers' simulated logistic regression (``rnshmc demo logistic``)."""
    import rnshmc
    from rnshmc import papers

    draws, tune = run_lengths(args)
    n = args.n if args.n is not None else (20_000 if args.quick else papers.SIMULATED_DATA["n"])
    # the papers' 0.045 is tuned for N = 100000: a quick run on fewer rows adapts it
    step_size = args.step_size if args.step_size is not None else (
        None if args.quick else papers.SETTINGS["simulated"]["step_size"])
    print(f"Bayesian logistic regression, simulated data of the RNS-HMC paper: N={n}, d={args.dim}")
    X, y, beta = rnshmc.datasets.simulated_logistic(n, args.dim, rng=args.seed)
    model = rnshmc.models.LogisticRegression(X, y)
    sampler = rnshmc.HMC(model, step_size=step_size, n_steps=args.n_steps, jitter=True)
    start = time.perf_counter()
    result = sampler.sample(draws, tune=tune, chains=args.chains or 1, rng=args.seed,
                            init=np.zeros(args.dim), progress=not args.no_progress)
    elapsed = time.perf_counter() - start
    ess = result.ess()
    sampling = result.timings["sampling"]
    print(f"  HMC (eps={step_size if step_size else 'adapted'}, L={args.n_steps} "
          f"jittered), {args.chains or 1} chain(s) x {draws} draws after {tune} warm-up, {elapsed:.1f} s")
    print(f"  acceptance {np.mean(result.acceptance_rate):.3f}, divergences {int(result.diverging.sum())}")
    print(f"  ESS (min, median, max) = ({ess.min():.0f}, {np.median(ess):.0f}, {ess.max():.0f}); "
          f"max R-hat {np.max(result.rhat()):.3f} (split chains; under 1.01 is good)")
    print(f"  s/iter {sampling / (draws * (args.chains or 1)):.4f}, min(ESS)/s {ess.min() / sampling:.1f}")
    print(f"  gradient evaluations {int(result.n_gradient_evals.sum())}")
    error = np.linalg.norm(result.samples.reshape(-1, args.dim).mean(0) - beta) / np.linalg.norm(beta)
    print(f"  relative distance of the posterior mean from the true coefficients: {error:.3f}")
    path = os.path.join(args.out, "logistic_hmc.npz")
    result.save(path)
    print(f"  samples written to {path}")
    return 0


def pde_samplers(model, quick=False):
    """The PDE demo's rows: HMC and RNS-HMC (rnshmc's surrogate) with the papers' settings
    of the elliptic PDE (:data:`rnshmc.papers.SETTINGS`), with ``quick`` a small network of 200
    hidden units."""
    from rnshmc import papers
    n_hidden = 200 if quick else papers.SETTINGS["pde"]["n_hidden"]
    return {"HMC": papers.hmc(model, "pde"),
            "RNS-HMC": papers.rns_hmc(model, "pde", n_hidden=n_hidden)}


def pde(args):
    """The elliptic PDE inverse problem (``rnshmc demo pde``): what rnshmc recommends
    (``rnshmc.sample``) against HMC at its best, every solve counted from the first
    iteration; with ``--papers`` HMC against RNS-HMC with the papers' protocol."""
    model, problem = pde_model(args)
    return (pde_papers if args.papers else pde_front_door)(args, model, problem)


def pde_model(args):
    """The demo's model and a line saying what it is."""
    import rnshmc
    from rnshmc import papers
    quick_mesh = args.quick and args.papers  # (the front door needs a costly model)
    n = args.n if args.n is not None else (12 if quick_mesh else papers.SYNTHETIC_PDE["n"])
    if args.data:
        try:
            model = rnshmc.models.EllipticPDE.from_mat(args.data)
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise CommandLineError(f"cannot read --data {args.data!r}: "
                                   f"{getattr(error, 'strerror', None) or error}") from None
        problem = f"the authors' problem from {args.data}"
    else:
        model = rnshmc.models.EllipticPDE(n=n, element=args.element, rng=args.seed)
        problem = (f"synthetic data on the {n}x{n} {args.element} mesh, true theta drawn from "
                   "the prior")
    return model, problem


def pde_front_door(args, model, problem):
    """``rnshmc.sample`` and HMC at its best (Stan warm-up 200, L = 10), both until min bulk
    ESS ``--ess`` and R-hat <= 1.01: the solves and seconds from the first iteration."""
    import rnshmc
    if args.draws is not None or args.tune is not None:
        raise CommandLineError("--draws and --tune set the papers' protocol (--papers); the "
                               "main job samples until --ess")
    ess = args.ess if args.ess is not None else (400 if args.quick else 1000)
    chains = args.chains or 4
    progress = not args.no_progress
    print(f"Elliptic PDE inverse problem: {problem}")
    print(f"  d={model.dim} KL coefficients, {model.solver.n_nodes} nodes, "
          f"{model.solver.n_elements} elements, {model.observations.size} observations; "
          f"one density evaluation = one FEM solve, its gradient one adjoint solve more")
    print(f"  {chains} chains each, until min bulk ESS {ess} and max R-hat <= 1.01; every "
          "solve counted from the first iteration")
    results, seconds = {}, {}
    for name, run in (
            ("rnshmc.sample", lambda: rnshmc.sample(model, ess=ess, chains=chains,
                                                    rng=args.seed, progress=progress)),
            ("HMC at its best", lambda: rnshmc.HMC(model, n_steps=10).sample(
                None, tune=200, chains=chains, rng=args.seed, progress=progress, ess=ess))):
        start = time.perf_counter()
        results[name] = run()
        seconds[name] = time.perf_counter() - start
    front, hmc = results["rnshmc.sample"], results["HMC at its best"]
    lines = [f"  {'run':16s} {'sampler':9s} {'PDE solves':>10s} {'seconds':>8s} "
             f"{'draws':>6s} {'min ESS':>8s} {'R-hat':>6s} {'solves/ESS':>10s}"]
    for name, result in results.items():
        cost, stop = result.cost, result.stopping
        lines.append(f"  {name:16s} {result.sampler:9s} {cost['model_evals']:10d} "
                     f"{seconds[name]:8.1f} {stop['draws']:6d} {stop['ess']:8.0f} "
                     f"{stop['rhat']:6.3f} {cost['model_evals'] / stop['ess']:10.2f}")
    lines += [
        f"  rnshmc.sample used {hmc.cost['model_evals'] / front.cost['model_evals']:.1f}x "
        f"fewer PDE solves than HMC, in {seconds['rnshmc.sample'] / seconds['HMC at its best']:.2f}"
        f" times its seconds (draws are per chain; solves/ESS: PDE solves per effective draw)",
        f"  rnshmc.sample chose {front.choice['sampler']}: {front.choice['reason']}",
        "  the papers' protocol (a fixed warm-up, times of the sampling phase): --papers"]
    table = "\n".join(lines)
    print("\n" + table)
    written = []
    for name, result in (("pde_front_door.npz", front), ("pde_hmc.npz", hmc)):
        result.save(os.path.join(args.out, name))
        written.append(name)
    written.append("pde_table.txt")
    with open(os.path.join(args.out, written[-1]), "w") as f:
        f.write(f"Elliptic PDE inverse problem: {problem}\n\n{table}\n")
    written += _plot_pde(model, {"rnshmc.sample": front, "HMC": hmc}, args.out,
                         "rnshmc.sample")
    print(f"  written to {args.out}/: {', '.join(written)}")
    return 0


def pde_papers(args, model, problem):
    """HMC against RNS-HMC with the papers' protocol (``--papers``)."""
    from rnshmc import papers
    from rnshmc.experiments import compare, format_table

    draws, tune = run_lengths(args)
    samplers = pde_samplers(model, args.quick)
    settings = papers.SETTINGS["pde"]
    eps, L, ridge = settings["step_size"], settings["n_steps"], settings["ridge"]
    n_hidden = samplers["RNS-HMC"].hidden_units(model.dim)
    print(f"Elliptic PDE inverse problem: {problem}")
    print(f"  d={model.dim} KL coefficients, {model.solver.n_nodes} nodes, "
          f"{model.solver.n_elements} elements, {model.observations.size} observations; "
          f"one density evaluation = one FEM solve")
    print(f"  HMC and RNS-HMC with the papers' settings: eps={eps}, L={L} jittered; RNS-HMC "
          f"s={n_hidden}, ridge={ridge:g}; {args.chains or 1} chain(s) x ({tune} warm-up + {draws} "
          "draws)")
    start = time.perf_counter()
    rows, results = compare(samplers, draws, tune, chains=args.chains or 1, rng=args.seed,
                            init=np.zeros(model.dim), progress=not args.no_progress)
    table = format_table(rows, evals_label="PDE solves / min ESS", legend=True)
    rns = results["RNS-HMC"]
    notes = [
        f"RNS-HMC surrogate: {int(rns.n_train[0])} training states, fit in "
        f"{rns.timings['train']:.2f} s, RMS residual {rns.fit_residual[0]:.3g}",
        f"min ESS per 1000 PDE solves (sampling phase): HMC "
        f"{1000 / rows[0]['exact_evals_per_min_ess']:.0f}, RNS-HMC "
        f"{1000 / rows[1]['exact_evals_per_min_ess']:.0f} (an adjoint solve counts as one)",
        f"times are of the sampling phase, as in the papers; whole run "
        f"{time.perf_counter() - start:.1f} s",
    ]
    print("\n" + table + "\n" + "\n".join("  " + line for line in notes))
    written = []
    for name, result in results.items():
        written.append(f"pde_{name.lower().replace('-', '_')}.npz")
        result.save(os.path.join(args.out, written[-1]))
    written.append("pde_table.txt")
    with open(os.path.join(args.out, written[-1]), "w") as f:
        f.write(f"Elliptic PDE inverse problem: {problem}\n\n{table}\n" + "\n".join(notes) + "\n")
    written += _plot_pde(model, results, args.out, "RNS-HMC")
    print(f"  written to {args.out}/: {', '.join(written)}")
    return 0


def _plot_pde(model, results, out, main):
    """Posterior marginals (of each result) and the posterior mean and sd of log kappa (of
    ``results[main]``), if matplotlib is installed. Returns the names of the files
    written."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.collections import PolyCollection
    except ImportError:
        print("  (install matplotlib for plots of the posterior)")
        return []
    dim = model.dim
    cols = 5
    fig, axes = plt.subplots((dim + cols - 1) // cols, cols, figsize=(2.4 * cols, 1.9 * ((dim + cols - 1) // cols)))
    for i, ax in enumerate(axes.flat):
        if i >= dim:
            ax.axis("off")
            continue
        for name, result in results.items():
            ax.hist(result.samples[..., i].ravel(), bins=40, density=True, histtype="step",
                    label=name)
        if model.true_theta is not None:
            ax.axvline(model.true_theta[i], color="k", lw=0.8)
        ax.set_title(f"theta[{i}]", fontsize=8)
        ax.tick_params(labelsize=6)
    axes.flat[0].legend(fontsize=6)
    fig.suptitle("posterior marginals (black: true theta)" if model.true_theta is not None
                 else "posterior marginals")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "pde_marginals.png"), dpi=120)
    plt.close(fig)

    log_kappa = results[main].samples.reshape(-1, dim) @ model.basis.T
    fields = [(f"posterior mean of log kappa ({main})", log_kappa.mean(axis=0)),
              (f"posterior sd of log kappa ({main})", log_kappa.std(axis=0))]
    if model.true_theta is not None:
        fields.insert(0, ("true log kappa", model.log_coefficient(model.true_theta)))
    polygons = model.solver.nodes[model.solver.elements]
    fig, axes = plt.subplots(1, len(fields), figsize=(4.2 * len(fields), 3.6))
    for ax, (title, values) in zip(np.atleast_1d(axes), fields):
        cells = PolyCollection(polygons, array=values, cmap="viridis", edgecolors="face")
        ax.add_collection(cells)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_aspect("equal")
        ax.set_title(title, fontsize=9)
        fig.colorbar(cells, ax=ax, shrink=0.8)
    points = model.observation_points
    np.atleast_1d(axes)[-1].plot(points[:, 0], points[:, 1], "w.", ms=2)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "pde_log_kappa.png"), dpi=120)
    plt.close(fig)
    return ["pde_marginals.png", "pde_log_kappa.png"]
