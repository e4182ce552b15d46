"""The papers' problems and the settings of their experiments, in one place.

Zhang, Shahbaba and Zhao (2017), *Hamiltonian Monte Carlo acceleration using surrogate
functions with random bases* (RNS-HMC, RNS-RMHMC, ARNS-HMC): Table 1 compares HMC, RMHMC,
RNS-HMC and RNS-RMHMC on a simulated logistic regression, Bank Marketing, a9a and an elliptic
PDE inverse problem; Figs 7 and 8 follow ARNS-HMC's surrogate learning online. Levy, Hoffman
and Sohl-Dickstein (2018), *Generalizing Hamiltonian Monte Carlo with neural networks* (L2HMC):
toy energies. The settings are those of docs/algorithms.md (section 1 for Table 1, section 7
for L2HMC).

Plain data (:data:`SETTINGS`, :data:`PROTOCOL`, :data:`TABLE1`, the L2HMC tables) and small
functions that build the models and samplers from them. ``rnshmc demo``, ``examples/`` and
``benchmarks/`` use them; the samplers, models and kernels never import this module.

Examples
--------
Table 1's Bank Marketing rows with the papers' protocol:

>>> from rnshmc import papers
>>> from rnshmc.experiments import compare, format_table
>>> model = papers.load_logistic("bank")
>>> samplers = papers.table1_samplers(model, "bank", methods=papers.TABLE1_METHODS)
>>> rows, results = compare(samplers, papers.PROTOCOL["draws"], papers.PROTOCOL["tune"],
...                         settings=papers.rmhmc_row_settings(model, "bank", samplers),
...                         on_error="report")  # doctest: +SKIP
>>> print(format_table(rows))  # doctest: +SKIP
"""
import functools
import os
import time
from pathlib import Path

import numpy as np

from . import datasets, models
from .experiments import find_mode
from .samplers import HMC, L2HMC, RMHMC, RNSHMC, RNSRMHMC

__all__ = ["LOGISTIC_PROBLEMS", "PROBLEMS", "SETTINGS", "PROTOCOL", "TABLE1", "TABLE1_METHODS",
           "SIMULATED_DATA", "A9A_COMPONENTS", "PRIOR_VARIANCE", "SYNTHETIC_PDE",
           "PAPERS_SURROGATE", "PAPERS_ALGORITHM", "L2HMC_TARGETS",
           "L2HMC_MIXTURE", "L2HMC_SETTINGS", "L2HMC_TRAINING", "L2HMC_HMC",
           "shared_data_dir", "authors_pde_path", "load_logistic", "load_pde", "load_model",
           "hmc_settings", "rns_settings", "rns_options", "merged", "settings_summary", "hmc", "rns_hmc",
           "table1_samplers", "rmhmc_start", "rmhmc_row_settings", "l2hmc",
           "training_points"]

# ----------------------------------------------------------------------------------------------
# Table 1 of the RNS-HMC paper

LOGISTIC_PROBLEMS = ("simulated", "bank", "a9a")
PROBLEMS = LOGISTIC_PROBLEMS + ("pde",)

#: Each problem's sampler settings (docs/algorithms.md section 1). ``step_size``, ``n_steps``:
#: HMC's and RNS-HMC's leapfrog (the steps jittered), also RNS-RMHMC's exploration;
#: ``n_hidden``, ``ridge``: the surrogate's hidden units and ridge; ``rm_step_size``,
#: ``rm_n_steps``: the generalized leapfrog of RMHMC and RNS-RMHMC (fixed steps); ``metric``:
#: RMHMC's metric (the exact Fisher metric of a logistic regression, the Gauss-Newton metric
#: J^T J / sigma_y^2 + I / sigma_theta^2 of the PDE); ``surrogate_metric``: RNS-RMHMC's (the
#: surrogate's full Hessian, or its diagonal); ``rmhmc_start``: where rnshmc's RMHMC row
#: starts by default, ``"zero"`` like the other rows (the papers' protocol) or ``"mode"``, the
#: posterior mode (:func:`rmhmc_start`): on the logistic regressions RMHMC at the papers' step
#: sizes diverges on every proposal from q = 0 (Bank Marketing, a9a).
SETTINGS = {
    "simulated": dict(step_size=0.045, n_steps=6, n_hidden=2000, ridge=1e-6,
                      rm_step_size=0.54, rm_n_steps=2, metric="fisher",
                      surrogate_metric="hessian", rmhmc_start="mode"),
    "bank": dict(step_size=0.012, n_steps=45, n_hidden=1000, ridge=1e-7,
                 rm_step_size=0.4, rm_n_steps=6, metric="fisher", surrogate_metric="hessian",
                 rmhmc_start="mode"),
    # The papers' a9a step size is 0.012; on our a9a design (a seeded Gaussian projection,
    # standardised, not the authors' own) 0.012 is past the leapfrog's stability limit (every
    # proposal diverges) and 0.008 gives the papers' HMC acceptance (0.71 against their 0.72).
    "a9a": dict(step_size=0.008, n_steps=10, n_hidden=2500, ridge=1e-9,
                rm_step_size=0.5, rm_n_steps=4, metric="fisher", surrogate_metric="hessian",
                rmhmc_start="mode"),
    "pde": dict(step_size=0.16, n_steps=10, n_hidden=1000, ridge=1e-7,
                rm_step_size=0.8, rm_n_steps=3, metric="gauss_newton",
                surrogate_metric="diagonal", rmhmc_start="zero"),
}

#: The papers' protocol: ``tune`` warm-up iterations (for the RNS samplers an exact-HMC
#: exploration with the HMC settings, whose last ``n_train`` states train the surrogate), then
#: ``draws`` draws, one chain.
PROTOCOL = dict(tune=5000, draws=5000, n_train=4000, chains=1)

#: min(ESS)/s of Table 1 of the RNS-HMC paper (MATLAB, 2016 hardware; docs/algorithms.md
#: section 1), by problem and method.
TABLE1 = {
    "simulated": {"HMC": 14.17, "RMHMC": 0.06, "RNS-HMC": 123.56, "RNS-RMHMC": 2.17},
    "bank": {"HMC": 6.52, "RMHMC": 0.56, "RNS-HMC": 52.22, "RNS-RMHMC": 14.41},
    "a9a": {"HMC": 11.96, "RMHMC": 0.29, "RNS-HMC": 81.80, "RNS-RMHMC": 2.68},
    "pde": {"HMC": 1.17, "RMHMC": 0.23, "RNS-HMC": 7.10, "RNS-RMHMC": 4.38},
}

#: Table 1's methods, as :func:`table1_samplers` names them.
TABLE1_METHODS = ("hmc", "rmhmc", "rns-hmc", "rns-rmhmc")

#: The simulated logistic regression's size (:func:`rnshmc.datasets.simulated_logistic`).
SIMULATED_DATA = dict(n=100_000, dim=50)
#: a9a's 123 binary features reduced to this many (:func:`rnshmc.datasets.load_a9a`).
A9A_COMPONENTS = 60
#: The logistic regressions' prior variance: beta ~ N(0, 100 I).
PRIOR_VARIANCE = 100.0
#: The synthetic elliptic PDE problem used without the authors' ``ePDE.mat``: mesh size and
#: elements (:class:`rnshmc.models.EllipticPDE`).
SYNTHETIC_PDE = dict(n=30, element="Q1")

#: The papers' surrogate (RNSHMC's ``surrogate=`` settings): raw inputs (no whitening),
#: fitted to values only.
PAPERS_SURROGATE = dict(whiten=False, gradient_weight=0.0)
#: The papers' RNS-HMC algorithm as RNSHMC/ARNSHMC arguments: trained on the exploration's
#: states, the exploration's trajectory length on the surrogate, no trust watch.
PAPERS_ALGORITHM = dict(n_steps=None, trust=False, surrogate=dict(training_data="states"))
# the grouped settings of the surrogate samplers (merged, not replaced, by options)
_GROUPS = ("surrogate", "explore", "trust")

# the model's method of each RMHMC metric, and the name of the mode search it makes
_METRICS = {"fisher": ("fisher_metric", "Newton with the Fisher metric"),
            "gauss_newton": ("gauss_newton_metric", "Gauss-Newton")}

# ----------------------------------------------------------------------------------------------
# L2HMC's toy energies (Levy et al. 2018, sec. 5.1; docs/algorithms.md section 7)

#: The toy energies: {key: (title, model constructor)}.
L2HMC_TARGETS = {
    "correlated": ("strongly correlated 2-d Gaussian", models.correlated_gaussian_2d),
    "ill": ("50-d ill-conditioned Gaussian", models.ill_conditioned_gaussian),
    "rough": ("2-d rough well", models.RoughWell),
    # the authors' code's rough well, cos(x / eta^2), at the eta of their last run of it
    # (brain-research/l2hmc history, commit 89ce5ff: RoughWell(dim=2, easy=False, eps=0.05))
    "rough-authors": ("2-d rough well, the authors' code's ripple (eta 0.05)",
                      functools.partial(models.RoughWell, eta=0.05, ripple="authors")),
}
#: The mixture of two Gaussians (sigma^2 = 0.1, means (+-2, 0)) and the temperature L2HMC's
#: training anneals from to 1.
L2HMC_MIXTURE = dict(title="mixture of two Gaussians", model=models.GaussianMixture,
                     temperature=10.0)
#: The sampler: T = 10 leapfrog steps, networks of 10 hidden units, initial step size 0.1.
L2HMC_SETTINGS = dict(n_steps=10, net_width=10, step_size=0.1)
#: The reference training: chains and iterations (Adam and the loss at L2HMC's defaults).
L2HMC_TRAINING = dict(chains=200, iterations=5000)
#: The paper's HMC baseline: 10 leapfrog steps, no jitter, identity mass, these step sizes.
L2HMC_HMC = dict(n_steps=10, step_sizes=(0.1, 0.15, 0.2))


# ----------------------------------------------------------------------------------------------
# models

def shared_data_dir():
    """The folder of the papers' data: ``$RNSHMC_SHARED_DATA`` if set, else ``shared/data``
    beside the source checkout (``../shared/data`` from its root).

    Returns
    -------
    pathlib.Path
        The folder (which need not exist: an installed package has no checkout beside it).
    """
    root = os.environ.get("RNSHMC_SHARED_DATA")
    return Path(root) if root else Path(__file__).resolve().parents[2] / "shared" / "data"


def authors_pde_path():
    """The authors' elliptic PDE problem, ``rnshmc-original/ePDE.mat`` of the papers' data
    (:func:`shared_data_dir`).

    Returns
    -------
    pathlib.Path or None
        None when the file is absent.
    """
    path = shared_data_dir() / "rnshmc-original" / "ePDE.mat"
    return path if path.is_file() else None


def load_logistic(problem, seed=0, **options):
    """A logistic regression of Table 1, prior N(0, 100 I).

    Parameters
    ----------
    problem : {"simulated", "bank", "a9a"}
        The simulated data (N = 100000, d = 50), Bank Marketing (d = 25) or a9a reduced to
        60 features (d = 61).
    seed : int
        Seed of the simulated data, or of a9a's projection (Bank Marketing has none).
    **options
        More arguments of :class:`rnshmc.models.LogisticRegression` (e.g. ``n_threads``).

    Returns
    -------
    rnshmc.models.LogisticRegression
    """
    if problem == "simulated":
        X, y, _ = datasets.simulated_logistic(**SIMULATED_DATA, rng=seed)
    elif problem == "bank":
        X, y = datasets.load_bank_marketing()
    elif problem == "a9a":
        X, y = datasets.load_a9a(n_components=A9A_COMPONENTS, rng=seed)
    else:
        raise ValueError(f"problem must be one of {LOGISTIC_PROBLEMS}, got {problem!r}")
    return models.LogisticRegression(X, y, prior_variance=PRIOR_VARIANCE, **options)


def load_pde(path=None):
    """The elliptic PDE inverse problem: the authors' (their mesh, KL basis and observations)
    or, without their file, the synthetic problem on the 30x30 Q1 mesh (true theta drawn from
    the prior with seed 0).

    Parameters
    ----------
    path : str or path-like, optional
        The authors' ``ePDE.mat`` (default :func:`authors_pde_path`).

    Returns
    -------
    model : rnshmc.models.EllipticPDE
    description : str
        "the authors' problem (PATH)" or "synthetic Q1 30x30".
    """
    path = path or authors_pde_path()
    if path:
        return models.EllipticPDE.from_mat(path), f"the authors' problem ({path})"
    n, element = SYNTHETIC_PDE["n"], SYNTHETIC_PDE["element"]
    return models.EllipticPDE(n=n, element=element, rng=0), f"synthetic {element} {n}x{n}"


def load_model(problem, seed=0):
    """The model of any Table 1 problem (:func:`load_logistic`, or :func:`load_pde`'s model).

    Parameters
    ----------
    problem : {"simulated", "bank", "a9a", "pde"}
    seed : int
        See :func:`load_logistic` (not used for the PDE).

    Returns
    -------
    rnshmc.models.LogisticRegression or rnshmc.models.EllipticPDE
    """
    return load_pde()[0] if problem == "pde" else load_logistic(problem, seed)


# ----------------------------------------------------------------------------------------------
# samplers

def _settings(problem):
    try:
        return SETTINGS[problem]
    except KeyError:
        raise ValueError(f"problem must be one of {PROBLEMS}, got {problem!r}") from None


def hmc_settings(problem):
    """HMC's settings of a problem: ``step_size`` and ``n_steps``."""
    s = _settings(problem)
    return dict(step_size=s["step_size"], n_steps=s["n_steps"])


def rns_settings(problem):
    """RNS-HMC's settings of a problem: ``step_size``, ``n_steps``, ``n_hidden``, ``ridge``
    (to build a sampler from them: :func:`rns_options`)."""
    s = _settings(problem)
    return dict(hmc_settings(problem), n_hidden=s["n_hidden"], ridge=s["ridge"])


def merged(arguments, **options):
    """``arguments`` updated with ``options``, the grouped settings (``surrogate=``,
    ``explore=``, ``trust=``) merged key by key rather than replaced."""
    out = dict(arguments)
    for key, value in options.items():
        if key in _GROUPS and isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = dict(out[key], **value)
        else:
            out[key] = value
    return out


def rns_options(problem, papers_surrogate=False, papers_algorithm=False, **options):
    """:class:`rnshmc.RNSHMC` (or :class:`rnshmc.ARNSHMC`) arguments with a problem's
    settings: the exploration and the sampling at its step size, the exploration at its
    leapfrog steps (the sampling's chosen by rnshmc unless ``papers_algorithm``), its hidden
    units and ridge.

    Parameters
    ----------
    problem : {"simulated", "bank", "a9a", "pde"} or dict
        A problem, or settings as :func:`rns_settings` gives them.
    papers_surrogate, papers_algorithm : bool
        The papers' surrogate (:data:`PAPERS_SURROGATE`) and algorithm
        (:data:`PAPERS_ALGORITHM`) instead of rnshmc's.
    **options
        More arguments, or ones that override these (grouped settings are merged).

    Returns
    -------
    dict
    """
    s = rns_settings(problem) if isinstance(problem, str) else problem
    arguments = dict(n_hidden=s["n_hidden"], step_size=s["step_size"],
                     explore=dict(n_steps=s["n_steps"]), surrogate=dict(ridge=s["ridge"]))
    if papers_surrogate:
        arguments = merged(arguments, surrogate=PAPERS_SURROGATE)
    if papers_algorithm:
        arguments = merged(arguments, **PAPERS_ALGORITHM)
    return merged(arguments, **options)


def settings_summary(problem):
    """A problem's Table 1 settings as one line of text.

    Parameters
    ----------
    problem : {"simulated", "bank", "a9a", "pde"}

    Returns
    -------
    str
    """
    s = _settings(problem)
    return (f"HMC/RNS-HMC eps={s['step_size']}, L={s['n_steps']} jittered; "
            f"RMHMC/RNS-RMHMC eps={s['rm_step_size']}, L={s['rm_n_steps']} fixed; "
            f"s={s['n_hidden']}, ridge={s['ridge']:g}")


def hmc(model, problem, **options):
    """HMC with a problem's step size and (jittered) leapfrog steps.

    Parameters
    ----------
    model
        The problem's model.
    problem : {"simulated", "bank", "a9a", "pde"}
    **options
        More arguments of :class:`rnshmc.HMC`, or ones that override the settings.

    Returns
    -------
    rnshmc.HMC
    """
    return HMC(model, **{**hmc_settings(problem), **options})


def rns_hmc(model, problem, variant="rnshmc", **options):
    """RNS-HMC with a problem's step size, leapfrog steps, hidden units and ridge.

    Parameters
    ----------
    model
        The problem's model.
    problem : {"simulated", "bank", "a9a", "pde"}
    variant : {"rnshmc", "papers"}
        rnshmc's surrogate and algorithm (whitened inputs, values and gradients fitted,
        training on the exploration's trajectories, the trajectory length chosen on the
        surrogate, the trust watch), or the papers' (:data:`PAPERS_SURROGATE` and
        :data:`PAPERS_ALGORITHM`).
    **options
        More arguments of :class:`rnshmc.RNSHMC`, or ones that override the above.

    Returns
    -------
    rnshmc.RNSHMC
    """
    if variant not in ("rnshmc", "papers"):
        raise ValueError(f"variant must be 'rnshmc' or 'papers', got {variant!r}")
    papers = variant == "papers"
    return RNSHMC(model, **rns_options(problem, papers_surrogate=papers,
                                       papers_algorithm=papers, **options))


def table1_samplers(model, problem, methods=("hmc", "rns-hmc"), delayed=False,
                    fixed_length=False, softabs=None):
    """Table 1's rows of a problem: {row name: sampler}, with the papers' settings.

    Parameters
    ----------
    model
        The problem's model (:func:`load_model`).
    problem : {"simulated", "bank", "a9a", "pde"}
    methods : sequence of {"hmc", "rmhmc", "rns-hmc", "rns-rmhmc"}
        The methods (:data:`TABLE1_METHODS`) whose rows to build, in the table's order
        whatever the order given: "HMC" (the efficient baseline: the same kernels, the
        gradient cached); "RMHMC" (the generalized leapfrog with the exact metric);
        "RNS-HMC (papers)" and "RNS-HMC (rnshmc)" (:func:`rns_hmc`'s two variants);
        "RNS-RMHMC (papers)" and "RNS-RMHMC (rnshmc)" (the generalized leapfrog on the
        surrogate with its Hessian or the Hessian's diagonal as the metric, exploring by HMC
        with the HMC settings; the papers' surrogate or rnshmc's).
    delayed : bool
        Add "RNS-HMC (rnshmc, DA)", with the two-stage (delayed-acceptance) test.
    fixed_length : bool
        Add "RNS-HMC (rnshmc, L=...)", with the HMC trajectory length on the surrogate.
    softabs : float or None
        RNS-RMHMC's SoftAbs sharpness (None: the surrogate's Hessian as it is, as in the
        papers; where it is not positive definite the sampler raises ValueError).

    Returns
    -------
    dict of {str: sampler}
    """
    s = _settings(problem)
    rm = dict(step_size=s["rm_step_size"], n_steps=s["rm_n_steps"], jitter=False)
    samplers = {}
    if "hmc" in methods:
        samplers["HMC"] = hmc(model, problem)
    if "rmhmc" in methods:
        samplers["RMHMC"] = RMHMC(model, metric=s["metric"], **rm)
    if "rns-hmc" in methods:
        samplers["RNS-HMC (papers)"] = rns_hmc(model, problem, variant="papers")
        samplers["RNS-HMC (rnshmc)"] = rns_hmc(model, problem)
        if delayed:
            samplers["RNS-HMC (rnshmc, DA)"] = rns_hmc(model, problem, delayed_acceptance=True)
        if fixed_length:
            samplers[f"RNS-HMC (rnshmc, L={s['n_steps']})"] = rns_hmc(model, problem,
                                                                     n_steps=None)
    if "rns-rmhmc" in methods:
        common = dict(metric=s["surrogate_metric"], n_hidden=s["n_hidden"],
                      explore=dict(step_size=s["step_size"], n_steps=s["n_steps"], jitter=True),
                      softabs=softabs, **rm)
        samplers["RNS-RMHMC (papers)"] = RNSRMHMC(
            model, surrogate=dict(ridge=s["ridge"], **PAPERS_SURROGATE), trust=False, **common)
        samplers["RNS-RMHMC (rnshmc)"] = RNSRMHMC(model, surrogate=dict(ridge=s["ridge"]),
                                                  **common)
    return samplers


def rmhmc_start(model, problem):
    """The posterior mode, RMHMC's start on the logistic regressions: Newton's method with
    the problem's RMHMC metric as the curvature (:func:`rnshmc.experiments.find_mode`).

    Parameters
    ----------
    model
        The problem's model.
    problem : {"simulated", "bank", "a9a", "pde"}

    Returns
    -------
    mode : ndarray of shape (dim,)
    info : dict
        :func:`~rnshmc.experiments.find_mode`'s, plus ``method`` (the search's name, e.g.
        "Gauss-Newton") and ``seconds``.
    """
    attribute, method = _METRICS[_settings(problem)["metric"]]
    start = time.perf_counter()
    mode, info = find_mode(model, getattr(model, attribute))
    info.update(method=method, seconds=time.perf_counter() - start)
    return mode, info


def rmhmc_row_settings(model, problem, samplers, draws=None, tune=None, start=None, out=None):
    """:func:`rnshmc.experiments.compare`'s per-row settings of the RMHMC row: its own
    lengths (RMHMC is the slow row; min(ESS)/s is a rate, so rows of different lengths stay
    comparable) and its start.

    Parameters
    ----------
    model
        The problem's model.
    problem : {"simulated", "bank", "a9a", "pde"}
    samplers : dict of {str: sampler}
        The rows compared; without an "RMHMC" row there is nothing to set.
    draws, tune : int or None
        The RMHMC row's lengths (None: the other rows').
    start : {"mode", "zero"} or None
        The posterior mode (:func:`rmhmc_start`) or q = 0 like the other rows (None: the
        problem's ``rmhmc_start`` in :data:`SETTINGS`).
    out : callable or None
        Called with one line on the mode search (iterations, seconds, potential).

    Returns
    -------
    dict
        ``{"RMHMC": {...}}``, or ``{}`` without an RMHMC row.
    """
    if "RMHMC" not in samplers:
        return {}
    start = _settings(problem)["rmhmc_start"] if start is None else start
    if start not in ("mode", "zero"):
        raise ValueError(f"start must be 'mode' or 'zero', got {start!r}")
    settings = {}
    if draws is not None:
        settings["draws"] = draws
    if tune is not None:
        settings["tune"] = tune
    if start == "mode":
        mode, info = rmhmc_start(model, problem)
        if out is not None:
            out(f"  RMHMC starts at the posterior mode: {info['method']}, {info['iterations']} "
                f"iterations, {info['seconds']:.2f} s, U = {info['potential']:.2f}"
                f"{'' if info['converged'] else ' (NOT converged)'}")
        settings["init"] = mode
    return {"RMHMC": settings}


def l2hmc(model, **options):
    """L2HMC with the paper's sampler settings (:data:`L2HMC_SETTINGS`), untrained.

    Parameters
    ----------
    model
        The target.
    **options
        More arguments of :class:`rnshmc.L2HMC` (e.g. ``standardize``), or ones that
        override the settings.

    Returns
    -------
    rnshmc.L2HMC
    """
    return L2HMC(model, **{**L2HMC_SETTINGS, **options})


# ----------------------------------------------------------------------------------------------
# Fig. 7: ARNS-HMC's acceptance against the number of training points

def training_points(result):
    """The number of points the output weights in use at each draw of an ARNS-HMC result
    were fitted to: the training states plus the points added before the last install (an
    install after draw k uses the points of draws 0..k). Fig. 7's abscissa.

    Parameters
    ----------
    result : rnshmc.SampleResult
        Of :class:`rnshmc.ARNSHMC`, with the trust watch off (no refits).

    Returns
    -------
    ndarray of int64, shape (chains, draws)
    """
    added = np.cumsum(result.online_added, axis=1)
    points = np.empty(result.online_added.shape, dtype=np.int64)
    # the final fit's n_train counts the online points too (no refits: the trust watch is off)
    first_fit = result.n_train - result.n_online_points
    for c, (installed, n_train) in enumerate(zip(result.installed, first_fit)):
        # the install in force at draw t is the last one after a draw before t
        last = np.maximum.accumulate(np.where(installed, np.arange(installed.size), -1))
        last = np.concatenate([[-1], last[:-1]])
        points[c] = n_train + np.where(last >= 0, added[c][np.maximum(last, 0)], 0)
    return points
