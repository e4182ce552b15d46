"""Side-by-side sampler comparisons in the form of the papers' Table 1.

Used by the examples, the benchmarks and ``rnshmc demo``: each sampler runs on the same model
with the same seed, and one row per sampler reports acceptance, ESS (min, median, max), seconds
per iteration, min(ESS)/s, the speed-up over the first row, and exact evaluations per min-ESS.
As in the papers, times are those of the sampling phase (after warm-up and training).
"""
import numpy as np

__all__ = ["compare", "summarize", "format_table"]


def summarize(name, result):
    """One table row (a dict) for a SampleResult.

    ``exact_evals`` counts the target's evaluations in the sampling phase, a density and a
    gradient each counting one (for a PDE model: forward and adjoint solves).
    """
    ess = result.ess()
    draws = result.samples.shape[0] * result.samples.shape[1]
    seconds = result.timings["sampling"]
    exact = int(np.sum(result.n_density_evals_sampling) + np.sum(result.n_gradient_evals_sampling))
    return dict(method=name, acceptance=float(np.mean(result.acceptance_rate)),
                ess_min=float(ess.min()), ess_median=float(np.median(ess)),
                ess_max=float(ess.max()), seconds_per_iter=seconds / draws,
                min_ess_per_second=float(ess.min()) / seconds, exact_evals=exact,
                exact_evals_per_min_ess=exact / float(ess.min()),
                train_seconds=float(result.timings.get("train", 0.0)),
                tune_seconds=float(result.timings.get("tune", 0.0)))


def compare(samplers, draws, tune, chains=1, rng=0, init=None, progress=False):
    """Run each sampler with the same settings and seed; return (rows, results).

    Parameters
    ----------
    samplers : dict of {str: sampler}
        Row names and sampler objects (the first is the reference of the speed-ups).
    draws, tune, chains, rng, init, progress
        Passed to each sampler's ``sample``.

    Returns
    -------
    rows : list of dict
        See :func:`summarize`, plus ``speedup`` in min(ESS)/s over the first row.
    results : dict of {str: SampleResult}
    """
    rows, results = [], {}
    for name, sampler in samplers.items():
        result = sampler.sample(draws, tune=tune, chains=chains, rng=rng, init=init,
                                progress=progress)
        results[name] = result
        rows.append(summarize(name, result))
    for row in rows:
        row["speedup"] = row["min_ess_per_second"] / rows[0]["min_ess_per_second"]
    return rows, results


def format_table(rows, title=None, evals_label="exact evals / min ESS"):
    """The rows as a plain-text table in the layout of the papers' Table 1."""
    header = ["method", "AP", "ESS (min, median, max)", "s/iter", "min(ESS)/s", "speed-up",
              evals_label]
    lines = []
    for r in rows:
        lines.append([r["method"], f"{r['acceptance']:.2f}",
                      f"({r['ess_min']:.0f}, {r['ess_median']:.0f}, {r['ess_max']:.0f})",
                      f"{r['seconds_per_iter']:.5f}", f"{r['min_ess_per_second']:.1f}",
                      f"{r.get('speedup', 1.0):.2f}", f"{r['exact_evals_per_min_ess']:.2f}"])
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(header)]
    fmt = lambda cells: "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                                  for i, (c, w) in enumerate(zip(cells, widths)))
    text = [fmt(header), fmt(["-" * w for w in widths])] + [fmt(line) for line in lines]
    if title:
        text.insert(0, title)
    return "\n".join(text)
