"""The ``rnshmc demo`` commands (see ``rnshmc demo --help``)."""
import os
import tempfile
import time

import numpy as np

from . import papers

__all__ = ["logistic", "pde", "settings", "argument_error", "CommandLineError"]

# what each demo writes into --out (plots only with matplotlib)
OUTPUTS = {"pde": ("pde_front_door.npz", "pde_hmc.npz", "pde_rns_hmc.npz", "pde_table.txt",
                   "pde_marginals.png", "pde_log_kappa.png"),
           "logistic": ("logistic_hmc.npz",)}

#: Each run's defaults (``"pde"``: the main job, ``"pde --papers"``: the papers' protocol),
#: and what ``--quick`` changes of them. A value given on the command line always wins
#: (:func:`settings`); ``rnshmc demo ... --help`` prints these.
DEFAULTS = {
    "pde": dict(n=papers.SYNTHETIC_PDE["n"], ess=1000, chains=4),
    "pde --papers": dict(n=papers.SYNTHETIC_PDE["n"], draws=papers.PROTOCOL["draws"],
                         tune=papers.PROTOCOL["tune"], chains=papers.PROTOCOL["chains"],
                         n_hidden=papers.SETTINGS["pde"]["n_hidden"]),
    "logistic": dict(n=papers.SIMULATED_DATA["n"], draws=2000, tune=1000, chains=1,
                     step_size=papers.SETTINGS["simulated"]["step_size"]),
}
QUICK = {
    # 20 x 20 is the smallest Q1 mesh on which rnshmc.sample still picks surrogate dynamics
    # (a surrogate leapfrog step prices at 0.44 solves there, 0.53 on 19 x 19, against the
    # 0.5 it must stay under: auto.SURROGATE_STEP_SHARE), so the quick run compares the same
    # two samplers as the full one; the price comes from operation counts, so the choice is
    # the same on every machine. A smaller ESS alone shortened nothing: R-hat <= 1.01 is what
    # holds the runs (both pass ESS 1000 before it). The smaller mesh shortens HMC's run;
    # rnshmc.sample's is mostly the surrogate's own work, which it does not shrink.
    "pde": dict(n=20, ess=400),
    # (the papers' protocol runs both samplers on any mesh: a smaller one still)
    "pde --papers": dict(n=12, draws=400, tune=400, n_hidden=200),
    # the papers' step size 0.045 is tuned for N = 100000: fewer rows adapt it (None)
    "logistic": dict(n=20_000, draws=300, tune=300, step_size=None),
}

# The synthetic PDE problem has this many KL modes (EllipticPDE's n_modes), and kl_basis needs
# at least as many elements: n x n squares (Q1) or 2 n x n triangles (P1).
KL_MODES = 20
SMALLEST_MESH = {"Q1": 5, "P1": 4}


class CommandLineError(Exception):
    """A problem with the command line's inputs, reported in one line before any sampling."""


def run_name(args):
    """The key of :data:`DEFAULTS` and :data:`QUICK` of a parsed ``rnshmc demo`` line."""
    return "pde --papers" if args.demo == "pde" and args.papers else args.demo


def settings(args):
    """What a demo will run, from its parsed command line, without building or running
    anything.

    Parameters
    ----------
    args : argparse.Namespace
        ``rnshmc demo pde ...`` or ``rnshmc demo logistic ...`` as parsed by
        ``rnshmc.__main__.build_parser()``.

    Returns
    -------
    dict
        The given value of each setting, else the default of :data:`DEFAULTS`, or with
        ``--quick`` that of :data:`QUICK` where it has one. ``"run"``: the key of
        :data:`DEFAULTS`; ``"seed"``; for the PDE ``"element"`` and ``"data"`` (``"n"`` None
        with ``--data``: the file brings its mesh); the main job ``"ess"``, ``"chains"``; the
        papers' protocol ``"draws"``, ``"tune"``, ``"chains"``, ``"n_hidden"``; the logistic
        regression ``"n"``, ``"dim"``, ``"step_size"`` (None: adapted), ``"n_steps"``,
        ``"draws"``, ``"tune"``, ``"chains"``.
    """
    run = run_name(args)
    defaults = {**DEFAULTS[run], **(QUICK[run] if args.quick else {})}
    given = {name: value for name, value in vars(args).items() if value is not None}
    # (the flags that set these are None unless given: argument_error rejects the others)
    keys = {"pde": ("n", "ess", "chains"),
            "pde --papers": ("n", "draws", "tune", "chains", "n_hidden"),
            "logistic": ("n", "draws", "tune", "chains", "step_size")}[run]
    out = {"run": run, "seed": args.seed}
    out.update({key: given.get(key, defaults[key]) for key in keys})
    if args.demo == "pde":
        out["element"] = args.element or papers.SYNTHETIC_PDE["element"]
        out["data"] = args.data
        if args.data:
            out["n"] = None
    else:
        out.update(dim=args.dim, n_steps=args.n_steps)
    return out


def argument_error(args):
    """What is wrong with a parsed ``rnshmc demo`` line beyond each flag's own range (the
    ``type=`` checks of ``build_parser``): flags that the chosen run does not read, and a
    mesh too small for its element. Returns the message (argparse's style: ``argument
    --flag: ...``), or None."""
    if args.demo != "pde":
        return None
    if not args.papers:
        for flag, value in (("--draws", args.draws), ("--tune", args.tune)):
            if value is not None:
                return (f"argument {flag}: sets the papers' protocol (--papers); the main job "
                        "samples until --ess")
    elif args.ess is not None:
        return ("argument --ess: the main job's stopping rule; --papers samples a fixed "
                "--draws after --tune")
    if args.data:
        for flag, value in (("--n", args.n), ("--element", args.element)):
            if value is not None:
                return (f"argument {flag}: sets the synthetic problem's mesh; --data brings "
                        "its own")
    elif args.n is not None:
        element = args.element or papers.SYNTHETIC_PDE["element"]
        if args.n < SMALLEST_MESH[element]:
            cells = "n x n squares" if element == "Q1" else "2 n x n triangles"
            return (f"argument --n: the {element} mesh needs n >= {SMALLEST_MESH[element]} "
                    f"(its {KL_MODES} KL modes need as many elements: {cells}), got {args.n}")
    return None


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


def logistic(args):
    """HMC on the papers' simulated logistic regression (``rnshmc demo logistic``)."""
    import rnshmc

    run = settings(args)
    check_output_folder(args)
    n, dim, step_size, n_steps = run["n"], run["dim"], run["step_size"], run["n_steps"]
    draws, tune, chains = run["draws"], run["tune"], run["chains"]
    print(f"Bayesian logistic regression, simulated data of the RNS-HMC paper: N={n}, d={dim}")
    X, y, beta = rnshmc.datasets.simulated_logistic(n, dim, rng=args.seed)
    model = rnshmc.models.LogisticRegression(X, y)
    sampler = rnshmc.HMC(model, step_size=step_size, n_steps=n_steps, jitter=True)
    start = time.perf_counter()
    result = sampler.sample(draws, tune=tune, chains=chains, rng=args.seed,
                            init=np.zeros(dim), progress=not args.no_progress)
    elapsed = time.perf_counter() - start
    ess = result.ess()
    sampling = result.timings["sampling"]
    print(f"  HMC (eps={step_size if step_size else 'adapted'}, L={n_steps} "
          f"jittered), {chains} chain(s) x {draws} draws after {tune} warm-up, {elapsed:.1f} s")
    print(f"  acceptance {np.mean(result.acceptance_rate):.3f}, divergences {int(result.diverging.sum())}")
    print(f"  ESS (min, median, max) = ({ess.min():.0f}, {np.median(ess):.0f}, {ess.max():.0f}); "
          f"max R-hat {np.max(result.rhat()):.3f} (split chains; under 1.01 is good)")
    print(f"  s/iter {sampling / (draws * chains):.4f}, min(ESS)/s {ess.min() / sampling:.1f}")
    print(f"  gradient evaluations {int(result.n_gradient_evals.sum())}")
    error = np.linalg.norm(result.samples.reshape(-1, dim).mean(0) - beta) / np.linalg.norm(beta)
    print(f"  relative distance of the posterior mean from the true coefficients: {error:.3f}")
    path = os.path.join(args.out, "logistic_hmc.npz")
    result.save(path)
    print(f"  samples written to {path}")
    return 0


def pde_samplers(model, quick=False, n_hidden=None):
    """The PDE demo's rows: HMC and RNS-HMC (rnshmc's surrogate) with the papers' settings
    of the elliptic PDE (:data:`rnshmc.papers.SETTINGS`); RNS-HMC with ``n_hidden`` hidden
    units (None: the papers' 1000, or with ``quick`` --quick's 200)."""
    if n_hidden is None:
        n_hidden = (QUICK["pde --papers"]["n_hidden"] if quick
                    else papers.SETTINGS["pde"]["n_hidden"])
    return {"HMC": papers.hmc(model, "pde"),
            "RNS-HMC": papers.rns_hmc(model, "pde", n_hidden=n_hidden)}


def pde(args):
    """The elliptic PDE inverse problem (``rnshmc demo pde``): what rnshmc recommends
    (``rnshmc.sample``) against HMC at its best, every solve counted from the first
    iteration; with ``--papers`` HMC against RNS-HMC with the papers' protocol."""
    run = settings(args)
    model, problem = pde_model(run)  # (--data's errors before --out is made)
    check_output_folder(args)
    return (pde_papers if args.papers else pde_front_door)(args, run, model, problem)


def pde_model(run):
    """The demo's model and a line saying what it is, from :func:`settings`' ``run``."""
    import rnshmc
    if run["data"]:
        try:
            model = rnshmc.models.EllipticPDE.from_mat(run["data"])
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise CommandLineError(f"cannot read --data {run['data']!r}: "
                                   f"{getattr(error, 'strerror', None) or error}") from None
        problem = f"the authors' problem from {run['data']}"
    else:
        n, element = run["n"], run["element"]
        model = rnshmc.models.EllipticPDE(n=n, element=element, rng=run["seed"])
        problem = (f"synthetic data on the {n}x{n} {element} mesh, true theta drawn from "
                   "the prior")
    return model, problem


def pde_front_door(args, run, model, problem):
    """``rnshmc.sample``, HMC at its best (Stan warm-up 200, L = 10) and NUTS with its
    defaults, each until min bulk ESS ``--ess`` and R-hat <= 1.01: the solves and seconds
    from the first iteration, and ``rnshmc.sample``'s against the cheaper exact kernel."""
    import rnshmc
    ess, chains = run["ess"], run["chains"]
    progress = not args.no_progress
    print(f"Elliptic PDE inverse problem: {problem}")
    print(f"  d={model.dim} KL coefficients, {model.solver.n_nodes} nodes, "
          f"{model.solver.n_elements} elements, {model.observations.size} observations; "
          f"one density evaluation = one FEM solve, its gradient one adjoint solve more")
    print(f"  {chains} chains each, until min bulk ESS {ess} and max R-hat <= 1.01; every "
          "solve counted from the first iteration")
    results, seconds = {}, {}
    for name, sample in (
            ("rnshmc.sample", lambda: rnshmc.sample(model, ess=ess, chains=chains,
                                                    rng=args.seed, progress=progress)),
            ("HMC at its best", lambda: rnshmc.HMC(model, n_steps=10).sample(
                None, tune=200, chains=chains, rng=args.seed, progress=progress, ess=ess)),
            ("NUTS", lambda: rnshmc.NUTS(model).sample(
                None, chains=chains, rng=args.seed, progress=progress, ess=ess))):
        start = time.perf_counter()
        results[name] = sample()
        seconds[name] = time.perf_counter() - start
    front = results["rnshmc.sample"]
    # the exact baseline: whichever exact kernel cost fewer solves (a converged one first)
    exact = min(("HMC at its best", "NUTS"), key=lambda name: (
        results[name].stopping["reason"] != "converged", results[name].cost["model_evals"]))
    hmc = results[exact]
    lines = [f"  {'run':16s} {'sampler':9s} {'PDE solves':>10s} {'seconds':>8s} "
             f"{'draws':>6s} {'min ESS':>8s} {'R-hat':>6s} {'solves/ESS':>10s}"]
    for name, result in results.items():
        cost, stop = result.cost, result.stopping
        lines.append(f"  {name:16s} {result.sampler:9s} {cost['model_evals']:10d} "
                     f"{seconds[name]:8.1f} {stop['draws']:6d} {stop['ess']:8.0f} "
                     f"{stop['rhat']:6.3f} {cost['model_evals'] / stop['ess']:10.2f}")
    lines += [
        f"  rnshmc.sample used {hmc.cost['model_evals'] / front.cost['model_evals']:.1f}x "
        f"fewer PDE solves than {exact} (the cheaper exact kernel here), in "
        f"{seconds['rnshmc.sample'] / seconds[exact]:.2f} times its seconds (draws are per "
        "chain; solves/ESS: PDE solves per effective draw)",
        f"  rnshmc.sample chose {front.choice['sampler']}: {front.choice['reason']}",
        "  the papers' protocol (a fixed warm-up, times of the sampling phase): --papers"]
    table = "\n".join(lines)
    print("\n" + table)
    written = []
    for name, result in (("pde_front_door.npz", front),
                         ("pde_hmc.npz", results["HMC at its best"]),
                         ("pde_nuts.npz", results["NUTS"])):
        result.save(os.path.join(args.out, name))
        written.append(name)
    written.append("pde_table.txt")
    with open(os.path.join(args.out, written[-1]), "w") as f:
        f.write(f"Elliptic PDE inverse problem: {problem}\n\n{table}\n")
    written += _plot_pde(model, {"rnshmc.sample": front, "HMC": results["HMC at its best"],
                                 "NUTS": results["NUTS"]}, args.out, "rnshmc.sample")
    print(f"  written to {args.out}/: {', '.join(written)}")
    return 0


def pde_papers(args, run, model, problem):
    """HMC against RNS-HMC with the papers' protocol (``--papers``)."""
    from rnshmc.experiments import compare, format_table

    draws, tune, chains = run["draws"], run["tune"], run["chains"]
    samplers = pde_samplers(model, n_hidden=run["n_hidden"])
    pde_settings = papers.SETTINGS["pde"]
    eps, L, ridge = pde_settings["step_size"], pde_settings["n_steps"], pde_settings["ridge"]
    n_hidden = samplers["RNS-HMC"].hidden_units(model.dim)
    print(f"Elliptic PDE inverse problem: {problem}")
    print(f"  d={model.dim} KL coefficients, {model.solver.n_nodes} nodes, "
          f"{model.solver.n_elements} elements, {model.observations.size} observations; "
          f"one density evaluation = one FEM solve")
    print(f"  HMC and RNS-HMC with the papers' settings: eps={eps}, L={L} jittered; RNS-HMC "
          f"s={n_hidden}, ridge={ridge:g}; {chains} chain(s) x ({tune} warm-up + {draws} "
          "draws)")
    start = time.perf_counter()
    rows, results = compare(samplers, draws, tune, chains=chains, rng=args.seed,
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
