"""Side-by-side sampler comparisons in the form of the papers' Table 1.

Used by the examples, the benchmarks and ``rnshmc demo``: each sampler runs on the same model
with the same seed, and one row per sampler reports acceptance, ESS (min, median, max), seconds
per iteration, min(ESS)/s, the speed-up over the first row, and exact evaluations per min-ESS.
As in the papers, times are those of the sampling phase (after warm-up and training). Rows of
the Riemannian samplers (RMHMC, RNS-RMHMC) add the implicit solver's figures: proposals
rejected because a fixed-point solve failed, and fixed-point iterations per leapfrog step.
The papers' problems and each row's settings are in :mod:`rnshmc.papers`.
"""
import numpy as np

__all__ = ["compare", "summarize", "format_table", "find_mode"]


def summarize(name, result):
    """One table row (a dict) for a SampleResult.

    ``exact_evals`` counts the target's evaluations in the sampling phase, a density and a
    gradient each counting one (for a PDE model: forward and adjoint solves), and, for RMHMC,
    each evaluation of the model's metric and of its derivative terms one more (a lower bound
    of their work: the Gauss-Newton metric of the PDE costs d + 1 solves on one factorisation,
    its derivatives more; min(ESS)/s measures the whole cost). ``draws`` is the number of kept
    draws per chain.

    For a result of the generalized leapfrog (RMHMC, RNS-RMHMC: it has
    ``n_implicit_failures``), the row also has ``implicit_failures`` (proposals rejected
    because an implicit solve did not converge or met a metric that is not positive
    definite, summed over chains) and ``fixed_point_iterations`` (fixed-point iterations per
    leapfrog step, both implicit solves together, the mean over chains).
    """
    ess = result.ess()
    draws = result.samples.shape[0] * result.samples.shape[1]
    seconds = result.timings["sampling"]
    exact = int(np.sum(result.n_density_evals_sampling) + np.sum(result.n_gradient_evals_sampling)
                + np.sum(result.get("n_metric_evals_sampling", 0))
                + np.sum(result.get("n_metric_derivative_evals_sampling", 0)))
    row = dict(method=name, acceptance=float(np.mean(result.acceptance_rate)),
               ess_min=float(ess.min()), ess_median=float(np.median(ess)),
               ess_max=float(ess.max()), seconds_per_iter=seconds / draws,
               min_ess_per_second=float(ess.min()) / seconds, exact_evals=exact,
               exact_evals_per_min_ess=exact / float(ess.min()),
               rhat_max=float(np.nanmax(result.rhat())),
               train_seconds=float(result.timings.get("train", 0.0)),
               tune_seconds=float(result.timings.get("tune", 0.0)),
               draws=int(result.samples.shape[1]))
    if "n_implicit_failures" in result:
        row["implicit_failures"] = int(np.sum(result.n_implicit_failures))
        row["fixed_point_iterations"] = float(np.mean(result.mean_solver_iterations))
    return row


def compare(samplers, draws, tune, chains=1, rng=0, init=None, progress=False, settings=None,
            on_error="raise"):
    """Run each sampler with the same settings and seed; return (rows, results).

    Parameters
    ----------
    samplers : dict of {str: sampler}
        Row names and sampler objects (the first is the reference of the speed-ups).
    draws, tune, chains, rng, init, progress
        Passed to each sampler's ``sample``.
    settings : dict of {str: dict} or None
        Per-row overrides of those arguments, e.g. ``{"RMHMC": dict(draws=500, tune=200,
        init=mode)}`` for a sampler too slow for the full protocol. min(ESS)/s is a rate,
        so rows of different lengths stay comparable (a shorter run's ESS is noisier).
    on_error : {"raise", "report"}
        What a sampler raising an exception (e.g. RNS-RMHMC's ValueError where its surrogate
        Hessian is not positive definite) does: propagate it (default), or become a row
        ``{"method": name, "error": message}`` (printed as such by :func:`format_table`)
        while the other rows run.

    Returns
    -------
    rows : list of dict
        See :func:`summarize`, plus ``speedup`` in min(ESS)/s over the first row (that did
        not fail).
    results : dict of {str: SampleResult}
        Without the rows that failed.
    """
    if on_error not in ("raise", "report"):
        raise ValueError(f"on_error must be 'raise' or 'report', got {on_error!r}")
    rows, results = [], {}
    settings = {} if settings is None else settings
    unknown = set(settings) - set(samplers)
    if unknown:
        raise ValueError(f"settings for rows that are not compared: {sorted(unknown)}")
    for name, sampler in samplers.items():
        kwargs = dict(draws=draws, tune=tune, chains=chains, rng=rng, init=init,
                      progress=progress)
        kwargs.update(settings.get(name, {}))
        try:
            result = sampler.sample(kwargs.pop("draws"), **kwargs)
        except Exception as error:
            if on_error == "raise":
                raise
            rows.append(dict(method=name, error=f"{type(error).__name__}: {error}"))
            continue
        results[name] = result
        rows.append(summarize(name, result))
    ran = [row for row in rows if "error" not in row]
    for row in ran:
        row["speedup"] = row["min_ess_per_second"] / ran[0]["min_ess_per_second"]
    return rows, results


def format_table(rows, title=None, evals_label="exact evals / min ESS", legend=False):
    """The rows as a plain-text table in the layout of the papers' Table 1, plus the largest
    R-hat; with ``legend``, lines defining the columns below it.

    A "draws" column appears when the rows ran different numbers of draws, and two columns
    of the generalized leapfrog when a row has them (see :func:`summarize`; "-" in the other
    rows): "implicit fails" (proposals rejected for a failed implicit solve) and "FP it/step"
    (fixed-point iterations per leapfrog step).
    """
    header = ["method", "AP", "ESS (min, median, max)", "s/iter", "min(ESS)/s", "speed-up",
              evals_label, "max R-hat"]
    with_draws = len({r["draws"] for r in rows if "draws" in r}) > 1
    riemannian = any("implicit_failures" in r for r in rows)
    if with_draws:
        header.insert(1, "draws")
    if riemannian:
        header += ["implicit fails", "FP it/step"]
    lines, failed = [], {}
    for r in rows:
        if "error" in r:
            failed[len(lines)] = r
            lines.append([r["method"]] + [""] * (len(header) - 1))
            continue
        line = [r["method"], f"{r['acceptance']:.2f}",
                f"({r['ess_min']:.0f}, {r['ess_median']:.0f}, {r['ess_max']:.0f})",
                f"{r['seconds_per_iter']:.5f}", f"{_short(r['min_ess_per_second'])}",
                f"{r.get('speedup', 1.0):.2f}", f"{r['exact_evals_per_min_ess']:.2f}",
                f"{r['rhat_max']:.3f}"]
        if with_draws:
            line.insert(1, str(r.get("draws", "-")))
        if riemannian:
            if "implicit_failures" in r:
                line += [str(r["implicit_failures"]), f"{r['fixed_point_iterations']:.1f}"]
            else:
                line += ["-", "-"]
        lines.append(line)
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(header)]
    fmt = lambda cells: "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                                  for i, (c, w) in enumerate(zip(cells, widths)))
    text = [fmt(header), fmt(["-" * w for w in widths])] + [
        fmt(line) if i not in failed else
        f"{line[0].ljust(widths[0])}  FAILED: {_first_line(failed[i]['error'])}"
        for i, line in enumerate(lines)]
    if title:
        text.insert(0, title)
    if legend:
        text += ["", "AP: mean acceptance probability. ESS: effective sample sizes of the "
                 "coordinates (chains pooled).",
                 "s/iter: seconds per kept iteration of the sampling phase (after warm-up and "
                 "training, as in the papers).",
                 "min(ESS)/s: the smallest ESS per second of sampling; speed-up: that over the "
                 "first row.",
                 f"{evals_label}: exact evaluations of the sampling phase (a gradient counts "
                 "one more) per unit of min ESS.",
                 "max R-hat: the largest rank-normalised split R-hat (chains split in halves); "
                 "above 1.01 the chains disagree."]
    return "\n".join(text)


def _first_line(message, width=150):
    line = message.splitlines()[0] if message else ""
    return line if len(line) <= width else line[:width - 3] + "..."


def _short(value):
    """min(ESS)/s with one decimal, or two significant digits below 1 (RMHMC's can be 0.06)."""
    return f"{value:.1f}" if not 0 < abs(value) < 1 else f"{value:.2g}"


def find_mode(model, metric, init=None, max_iterations=100, tol=1e-8):
    """The posterior mode by Newton's method with ``metric`` as the curvature and a
    backtracking line search on the potential.

    For a Riemannian sampler with a fixed step size the starting point matters: far from the
    posterior (where the potential is far above its typical values) the papers' step sizes
    make every proposal diverge, so the chain never moves. With the Fisher metric of a
    logistic regression this is Newton's method (the metric is the Hessian); with the
    Gauss-Newton metric of the PDE, Gauss-Newton.

    Parameters
    ----------
    model
        With ``potential(q)`` and ``potential_and_gradient(q)``.
    metric : callable
        ``metric(q)`` -> (dim, dim) positive-definite array, e.g. ``model.fisher_metric`` or
        ``model.gauss_newton_metric``.
    init : array_like or None
        Starting point (default zeros).
    max_iterations : int
    tol : float
        Stop when the Newton decrement g^T G^{-1} g / 2 falls below ``tol``.

    Returns
    -------
    mode : ndarray of shape (dim,)
    info : dict
        ``iterations``, ``potential`` (at the mode), ``decrement`` (the last Newton
        decrement), ``converged``.
    """
    q = np.zeros(model.dim) if init is None else np.array(init, dtype=np.float64)
    U, g = model.potential_and_gradient(q)
    decrement = np.inf
    for iteration in range(1, max_iterations + 1):
        step = np.linalg.solve(metric(q), g)
        decrement = 0.5 * float(g @ step)
        if decrement <= tol:
            return q, dict(iterations=iteration, potential=float(U), decrement=decrement,
                           converged=True)
        t = 1.0
        while True:
            candidate = q - t * step
            try:
                U_new = model.potential(candidate)
            except (FloatingPointError, ValueError):  # e.g. a PDE solve that failed
                U_new = np.inf
            if np.isfinite(U_new) and U_new <= U - 0.5 * t * decrement:  # Armijo, c = 1/4
                break
            t *= 0.5
            if t < 1e-10:
                return q, dict(iterations=iteration, potential=float(U), decrement=decrement,
                               converged=False)
        q = candidate
        U, g = model.potential_and_gradient(q)
    return q, dict(iterations=max_iterations, potential=float(U), decrement=decrement,
                   converged=False)
