"""What NUTS costs from a cold start to a usable answer, rnshmc's against its peers: gradient
evaluations (warm-up included) and wall time to min bulk ESS 1000 with max R-hat <= 1.01,
4 chains, several seeds.

Posteriors (``--posteriors``; default all but Neal's funnel and the non-centred GP):
  "correlated regression", "Neal's funnel", "GP Poisson"
      the hard posteriors of ``rnshmc.models.hard_posteriors()`` (Python targets; the GP
      Poisson regression centred, a funnel);
  "GP Poisson non-centred"
      ``rnshmc.models.hard.gp_poisson(centred=False)``: the same model and data, non-centred;
  "eight schools"
      ``rnshmc.models.hard.eight_schools()``, non-centred (a Python target);
  "logistic regression"
      ``rnshmc.papers.load_logistic("simulated")``: N = 100000, d = 50, prior N(0, 100 I) (C);
  "PDE"
      ``rnshmc.papers.load_pde()``: the authors' elliptic PDE inverse problem (their
      ``ePDE.mat`` in ../shared/data, or $RNSHMC_SHARED_DATA), else the synthetic Q1 30x30 one;
      the header says which (C; a gradient is a forward and an adjoint solve).

Rows (``--rows``), each 4 chains of warm-up and ``--draws`` draws, the chains one after
another on one core, for each seed (``--seeds``). The warm-up is each library's default
unless ``--tune`` gives one for every row: rnshmc's NUTS 300 iterations, nutpie's 300,
NumPyro's (which has no default) Stan's 1000:
  nuts     ``rnshmc.NUTS(target).sample(draws, tune=tune, chains=4, rng=seed, pool=None)``,
           once per ``--metrics`` value (default "default"): "default" is NUTS with no
           ``metric`` argument (the library's default, whatever it is: today "auto", the
           low-rank-plus-diagonal metric), the others pass ``metric=`` that value; starts
           uniform in (-2, 2) (Stan's);
  numpyro  NumPyro's NUTS with a diagonal and with a dense mass matrix, its defaults otherwise
           (target acceptance 0.8, max tree depth 10), in the same process, ``chain_method=
           "sequential"``, on a ``potential_fn`` stated in JAX in float64 (``jax_enable_x64``)
           with the same data: the same parametrisations and priors (the GP Poisson
           regressions' data drawn again with ``hard.gp_poisson``'s seed); the PDE is the
           rnshmc model's own compiled solver called through ``jax.pure_callback`` with a
           ``jax.custom_vjp`` (one callback gives the potential and its adjoint gradient).
           Before any timing, each JAX potential is checked against the rnshmc target at
           two random points: its gradient equals minus rnshmc's, and its differences
           minus rnshmc's log density differences (an assertion: the benchmark stops if a
           statement differs). Starts uniform in (-2, 2) (``numpy.random.default_rng(seed)``);
  nutpie   nutpie's NUTS with its defaults (its gradient-based diagonal mass matrix, target
           acceptance 0.8, max depth 10) on the rnshmc target's own ``log_density_gradient``
           through ``nutpie.compiled_pyfunc.from_pyfunc``, ``cores=1``, starts uniform in
           (-2, 2) from the chain's seed;
  hmc      rnshmc's HMC at its best: ``rnshmc.HMC(target, n_steps=L)`` (its default
           adaptation: Stan's windowed warm-up of the step size and a diagonal mass matrix,
           the steps jittered) with ``--hmc-tune`` warm-up iterations (default 200, the
           "Stan warm-up 200" of ``bench_cost.py`` and ``rnshmc demo``'s HMC at its best) and
           ``--draws`` draws. L is hand-chosen where the repository has a choice: L = 10 for
           the PDE and the logistic regression (``bench_cost.py``'s and the demo's HMC at its
           best); no benchmark chooses one for the other posteriors, so there L is the best of
           the grid 5, 10, 20, 40, 80, 160 (the grid of ``bench_rns_logistic.py`` and
           benchmarks/README.md's "best L of 5-160"), chosen on the first seed by the fewest
           gradients to ESS 1000 among the converged runs (none converged: the lowest
           R-hat; every grid run is printed; the other seeds run the chosen L only).
           ``--hmc-steps`` gives the grid for every posterior instead. (The chosen L is the
           best of the first seed's runs: that row is slightly flattered by the choice.)

Columns, one line per run (divergences and depth are the sampling phase's):
  R-hat          the largest rank-normalised split R-hat over the coordinates;
  min ESS        the smallest bulk ESS (both from ``rnshmc.diagnostics``, for every row);
  depth          the mean tree depth (NumPyro: log2(leapfrog steps + 1); HMC: none);
  warm grads     gradient evaluations of the warm-up, all chains: rnshmc's
                 ``n_gradient_evals - n_gradient_evals_sampling``; NumPyro's and nutpie's
                 leapfrog steps (NumPyro's ``num_steps``, nutpie's ``n_steps``: their few
                 evaluations outside trajectories, at the starts and in NumPyro's step-size
                 searches, are not counted);
  samp grads     the same for the sampling phase;
  warm s, samp s wall seconds of each phase: rnshmc's per-phase ``timings`` ("tune",
                 "sampling"; the chains run serially, so their sum is wall time); NumPyro's
                 ``MCMC.warmup`` and ``MCMC.run`` timed apart, JAX's compilation included;
                 nutpie's run (``nutpie.sample``, its conversion to ArviZ included) timed
                 whole and split between the phases in proportion to their gradients (nutpie
                 reports no per-phase times);
  jit s          NumPyro's seconds of JAX compilation in both phases (the union of JAX's
                 compilation events, ``jax.monitoring``): with ``chain_method="sequential"``
                 NumPyro compiles its loop anew for each chain and phase (8 compilations per
                 run, about 2.5 s each for NUTS on a 10-d posterior on one core; more where the
                 data are large constants in the program, as the logistic regression's); on
                 the small posteriors they are nearly all of NumPyro's seconds;
  grads@1000     the cost to min bulk ESS 1000, extrapolated at the measured rate:
                 warm grads + samp grads x 1000 / min ESS (a run past 1000 is scaled down);
  s@1000         likewise, warm s + samp s x 1000 / min ESS, the sampling phase's
                 compilation counted once (NumPyro: warm s + c + (samp s - c) x 1000 / min
                 ESS, c its compilation seconds);
  ms/ESS         wall milliseconds per effective draw of the run as measured: 1000 x
                 (warm s + samp s) / min ESS (warm-up and compilation included, not
                 extrapolated).
The last three are printed only for a converged run (R-hat <= 1.01), else "not converged".
Each posterior ends with the medians over seeds of the converged runs.

    python benchmarks/bench_nuts.py [--seeds 0 1] [--tune 1000] [--draws 1000]
        [--posteriors "correlated regression" "GP Poisson" "eight schools"
                      "logistic regression" PDE "Neal's funnel" "GP Poisson non-centred"]
        [--rows nuts numpyro nutpie hmc] [--metrics default dense diagonal_grad ...]
        [--hmc-tune 200] [--hmc-steps 10 20]

Pin it to one core (``taskset -c 1`` with ``OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1``):
the seconds are then one core's for every row. What each row needs: rnshmc (with its
compiled kernels); NumPyro's rows ``pip install numpyro jax`` (tested with numpyro 0.22,
jax 0.10.2); nutpie's ``pip install nutpie`` (tested with 0.16.8, which installs arviz,
xarray and pandas; no PyMC or Stan needed). A row whose library is missing says so once and
is left out.
"""
import argparse
import sys
import time
import warnings

import numpy as np

import rnshmc
from rnshmc import papers
from rnshmc.diagnostics import rhat_and_ess_bulk
from rnshmc.models import hard_posteriors
from rnshmc.models.hard import eight_schools, gp_poisson

METRICS = ("default", "auto") + tuple(rnshmc.NUTS.METRICS)
ROWS = ("nuts", "numpyro", "nutpie", "hmc")
POSTERIORS = ("correlated regression", "Neal's funnel", "GP Poisson", "GP Poisson non-centred",
              "eight schools", "logistic regression", "PDE")
DEFAULT_POSTERIORS = ("correlated regression", "GP Poisson", "eight schools",
                      "logistic regression", "PDE")
ESS = 1000.0
RHAT = 1.01
CHAINS = 4
# HMC at its best: the repository's hand-chosen L (bench_cost.py, rnshmc demo), else a grid
HMC_HAND_CHOSEN = {"logistic regression": (10,), "PDE": (10,)}
HMC_GRID = (5, 10, 20, 40, 80, 160)
HMC_TUNE = 200
# eight schools' data (as rnshmc.models.hard.eight_schools states them)
SCHOOLS_Y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
SCHOOLS_SIGMA = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])


# ----------------------------------------------------------------------------------------------
# the posteriors

def load_posterior(name):
    """(target, data, title) of the posterior ``name``: the rnshmc target, and the data its
    JAX statement needs."""
    if name in ("correlated regression", "Neal's funnel", "GP Poisson"):
        target, reference = hard_posteriors()[name]
        if name == "GP Poisson":
            reference = gp_poisson_data()
        return target, reference, name
    if name == "GP Poisson non-centred":
        return gp_poisson(centred=False)[0], gp_poisson_data(), name
    if name == "eight schools":
        return eight_schools()[0], dict(y=SCHOOLS_Y, sigma=SCHOOLS_SIGMA), \
            "eight schools, non-centred"
    if name == "logistic regression":
        model = papers.load_logistic("simulated")
        return model, dict(X=model.X, y=model.y, prior_variance=model.prior_variance), \
            "simulated logistic regression, N = {}, d = {}".format(*model.X.shape)
    if name == "PDE":
        model, title = papers.load_pde()
        return model, dict(model=model), f"elliptic PDE, {title}"
    raise ValueError(f"unknown posterior {name!r}: one of {POSTERIORS}")


def gp_poisson_data(n=8, seed=0):
    """The data of ``rnshmc.models.hard.gp_poisson(n, seed)`` (``hard_posteriors``'s
    defaults), drawn again the same way (it returns no reference to take them from)."""
    rng = np.random.default_rng(seed)
    x = np.linspace(0.0, 1.0, n)
    return dict(x=x, y=rng.poisson(np.exp(1.0 + np.sin(2 * np.pi * x))).astype(np.float64))


def jax_potential(name, data, dim):
    """The posterior ``name`` as a JAX potential (minus the log density, up to a constant)."""
    import jax
    import jax.numpy as jnp
    if name == "correlated regression":
        X, y, noise = (jnp.asarray(data[k]) for k in ("X", "y", "noise"))

        def potential(beta):
            residual = y - X @ beta
            return 0.5 * residual @ residual / noise ** 2 + 0.5 * beta @ beta / 100.0
        return potential
    if name == "Neal's funnel":
        scale = data["sd_v"]

        def potential(q):
            v, x = q[0], q[1:]
            return 0.5 * v * v / scale ** 2 + 0.5 * jnp.sum(x * x) * jnp.exp(-v) + \
                0.5 * (dim - 1) * v
        return potential
    if name == "GP Poisson":  # (log sigma, log l, f), f ~ GP(0, K) centred, as hard.gp_poisson
        x, y = jnp.asarray(data["x"]), jnp.asarray(data["y"])
        squared = (x[:, None] - x[None, :]) ** 2
        jitter = 1e-6 * jnp.eye(x.size)

        def potential(q):
            log_sigma, log_l, f = q[0], q[1], q[2:]
            K = jnp.exp(2 * log_sigma) * jnp.exp(-0.5 * squared * jnp.exp(-2 * log_l)) + jitter
            factor = jnp.linalg.cholesky(K)
            alpha = jax.scipy.linalg.cho_solve((factor, True), f)
            return -(y @ f - jnp.sum(jnp.exp(f)) - 0.5 * f @ alpha
                     - jnp.sum(jnp.log(jnp.diag(factor))) - 0.5 * log_sigma ** 2
                     - 0.5 * ((log_l - jnp.log(0.3)) / 0.5) ** 2)
        return potential
    if name == "GP Poisson non-centred":  # (log sigma, log l, z), f = sigma L_l z
        x, y = jnp.asarray(data["x"]), jnp.asarray(data["y"])
        squared = (x[:, None] - x[None, :]) ** 2
        jitter = 1e-6 * jnp.eye(x.size)

        def potential(q):
            log_sigma, log_l, z = q[0], q[1], q[2:]
            factor = jnp.linalg.cholesky(jnp.exp(-0.5 * squared * jnp.exp(-2 * log_l)) + jitter)
            f = jnp.exp(log_sigma) * (factor @ z)
            return -(y @ f - jnp.sum(jnp.exp(f)) - 0.5 * z @ z - 0.5 * log_sigma ** 2
                     - 0.5 * ((log_l - jnp.log(0.3)) / 0.5) ** 2)
        return potential
    if name == "eight schools":  # (mu, log tau, eta), non-centred, as hard.eight_schools
        y, sigma = jnp.asarray(data["y"]), jnp.asarray(data["sigma"])

        def potential(q):
            mu, log_tau, eta = q[0], q[1], q[2:]
            tau = jnp.exp(log_tau)
            theta = mu + tau * eta
            return (0.5 * (mu / 5.0) ** 2 + jnp.log1p((tau / 5.0) ** 2) - log_tau
                    + 0.5 * eta @ eta + 0.5 * jnp.sum(((y - theta) / sigma) ** 2))
        return potential
    if name == "logistic regression":
        X, y = jnp.asarray(data["X"]), jnp.asarray(data["y"])
        variance = data["prior_variance"]

        def potential(beta):
            z = X @ beta
            return jnp.sum(jnp.logaddexp(0.0, z) - y * z) + 0.5 * beta @ beta / variance
        return potential
    if name == "PDE":
        return callback_potential(data["model"])
    raise ValueError(f"no JAX statement of {name!r}")


def callback_potential(model):
    """The potential of an rnshmc C model (``potential``, ``potential_and_gradient``) as a JAX
    function: ``jax.pure_callback`` to the model, its gradient by ``jax.custom_vjp`` (the
    forward pass calls ``potential_and_gradient`` once: one solve and one adjoint solve)."""
    import jax
    import jax.numpy as jnp
    dim = model.dim
    value = jax.ShapeDtypeStruct((), jnp.float64)
    pair = (value, jax.ShapeDtypeStruct((dim,), jnp.float64))

    def host_value(q):
        q = np.array(q, dtype=np.float64)  # (a copy: JAX's buffer is read-only)
        return np.float64(model.potential(q) if np.all(np.isfinite(q)) else np.inf)

    def host_pair(q):
        q = np.array(q, dtype=np.float64)
        if not np.all(np.isfinite(q)):
            return np.float64(np.inf), np.zeros(dim)
        U, gradient = model.potential_and_gradient(q)
        return np.float64(U), np.asarray(gradient, dtype=np.float64)

    @jax.custom_vjp
    def potential(q):
        return jax.pure_callback(host_value, value, q, vmap_method="sequential")

    def forward(q):
        U, gradient = jax.pure_callback(host_pair, pair, q, vmap_method="sequential")
        return U, gradient

    def backward(gradient, cotangent):
        return (cotangent * gradient,)

    potential.defvjp(forward, backward)
    return potential


def check_points(name, dim, rng, n=2):
    """Points where the JAX statement is compared with the rnshmc target: about where the
    posterior is (the GP's length scale near its prior's 0.3, its latent values smooth
    log-rates near 1: rough ones make K^-1 f huge and both statements' rounding large)."""
    points = []
    for _ in range(n):
        q = 0.5 * rng.standard_normal(dim)
        if name == "GP Poisson":
            q[1] += np.log(0.3)
            q[2:] = 1.0 + 0.3 * np.sin(2 * np.pi * np.linspace(0, 1, dim - 2)
                                       + rng.uniform(0, 2 * np.pi))
        points.append(q)
    return points


def check_jax_potential(name, potential, target, dim, seed=12345):
    """Assert that ``potential`` is minus ``target``'s log density up to a constant, with
    minus its gradient, at two random points."""
    import jax
    import jax.numpy as jnp
    value_and_grad = jax.jit(jax.value_and_grad(potential))
    values = []
    for q in check_points(name, dim, np.random.default_rng(seed)):
        U, gradient = value_and_grad(jnp.asarray(q))
        logp, grad_logp = target.log_density_gradient(q)
        scale = max(1.0, abs(logp))
        np.testing.assert_allclose(
            np.asarray(gradient), -np.asarray(grad_logp), rtol=1e-6,
            atol=1e-8 * max(1.0, np.abs(grad_logp).max()),
            err_msg=f"{name}: the JAX potential's gradient is not minus rnshmc's")
        values.append((float(U), logp, scale))
    (U_a, logp_a, scale_a), (U_b, logp_b, scale_b) = values
    np.testing.assert_allclose(U_a - U_b, -(logp_a - logp_b), rtol=0,
                               atol=1e-9 * max(scale_a, scale_b),
                               err_msg=f"{name}: the JAX potential is not minus rnshmc's log "
                                       "density up to a constant")


# ----------------------------------------------------------------------------------------------
# the runs

class Run:
    """One run's figures (all chains): convergence, gradients and seconds per phase."""

    def __init__(self, samples, divergent, depth, warm_grads, samp_grads, warm_s, samp_s,
                 compile_s=None, samp_compile_s=0.0):
        r_hat, ess = rhat_and_ess_bulk(samples)
        self.r_hat, self.ess = float(np.max(r_hat)), float(np.min(ess))
        self.divergent, self.depth = int(divergent), depth
        self.warm_grads, self.samp_grads = int(warm_grads), int(samp_grads)
        self.warm_s, self.samp_s = float(warm_s), float(samp_s)
        # JAX's compilation: in all (None: no JIT), and the sampling phase's share (a fixed
        # cost, not scaled with the draws)
        self.compile_s, self.samp_compile_s = compile_s, float(samp_compile_s)

    @property
    def converged(self):
        return bool(self.r_hat <= RHAT)

    @property
    def grads_to_ess(self):
        return self.warm_grads + self.samp_grads * ESS / self.ess

    @property
    def seconds_to_ess(self):
        fixed = self.samp_compile_s
        return self.warm_s + fixed + (self.samp_s - fixed) * ESS / self.ess

    @property
    def ms_per_ess(self):
        return 1000.0 * (self.warm_s + self.samp_s) / self.ess


# the peers' warm-up when --tune is not given: nutpie.sample's default, and for NumPyro (whose
# MCMC has none) Stan's
NUTPIE_TUNE, NUMPYRO_TUNE = 300, 1000


def rnshmc_run(sampler, draws, tune, seed):
    """A run of an rnshmc sampler: 4 chains one after another."""
    res = sampler.sample(draws, tune=tune, chains=CHAINS, rng=seed, progress=False, pool=None)
    gradients = int(res.n_gradient_evals.sum())
    sampling = int(res.n_gradient_evals_sampling.sum())
    depth = float(res.tree_depth.mean()) if "tree_depth" in res else None
    return Run(res.samples, res.diverging.sum(), depth, gradients - sampling, sampling,
               sum(s for phase, s in res.timings.items() if phase != "sampling"),
               res.timings["sampling"])


def nuts_sampler(target, metric):
    """rnshmc's NUTS: with no ``metric`` argument for "default" (the library's default)."""
    return rnshmc.NUTS(target) if metric == "default" else rnshmc.NUTS(target, metric=metric)


def numpyro_run(potential, dim, dense, seed, tune, draws):
    """A run of NumPyro's NUTS on ``potential``: warm-up and sampling timed apart."""
    import jax
    from numpyro.infer import MCMC, NUTS as NumPyroNUTS
    starts = np.random.default_rng(seed).uniform(-2, 2, size=(CHAINS, dim))
    mcmc = MCMC(NumPyroNUTS(potential_fn=potential, dense_mass=dense), num_warmup=tune,
                num_samples=draws, num_chains=CHAINS, chain_method="sequential",
                progress_bar=False)
    compiling = COMPILE_CLOCK.seconds
    start = time.perf_counter()
    mcmc.warmup(jax.random.PRNGKey(seed), init_params=starts, collect_warmup=True,
                extra_fields=("num_steps",))
    warmup_steps = int(np.sum(mcmc.get_extra_fields()["num_steps"]))
    middle, compiled = time.perf_counter(), COMPILE_CLOCK.seconds
    mcmc.run(jax.random.PRNGKey(seed + 1), extra_fields=("num_steps", "diverging"))
    end = time.perf_counter()
    samples = np.asarray(mcmc.get_samples(group_by_chain=True))
    extra = mcmc.get_extra_fields(group_by_chain=True)
    steps = np.asarray(extra["num_steps"])
    return Run(samples, np.sum(extra["diverging"]), float(np.mean(np.log2(steps + 1))),
               warmup_steps, steps.sum(), middle - start, end - middle,
               compile_s=COMPILE_CLOCK.seconds - compiling,
               samp_compile_s=COMPILE_CLOCK.seconds - compiled)


class CompileClock:
    """Seconds JAX spends compiling (tracing, lowering to MLIR, XLA's compilation): the union
    of the spans of its compilation events, so that nested traces count once."""

    EVENTS = ("/jax/core/compile/jaxpr_trace_duration",
              "/jax/core/compile/jaxpr_to_mlir_module_duration",
              "/jax/core/compile/backend_compile_duration")

    def __init__(self):
        self.spans = []

    def __call__(self, event, start, end, **_):
        if event in self.EVENTS:
            self.spans.append((start, end))

    @property
    def seconds(self):
        """The union's length so far (an inner trace ends, and is reported, before the
        outer one that contains it)."""
        total, reach = 0.0, -np.inf
        for start, end in sorted(self.spans):
            if end > reach:
                total += end - max(start, reach)
                reach = end
        return total


COMPILE_CLOCK = CompileClock()


def nutpie_model(target, dim):
    """The rnshmc target as a nutpie model (``from_pyfunc``): its ``log_density_gradient``,
    the draws kept as one variable "q", starts uniform in (-2, 2) from the chain's seed."""
    from nutpie.compiled_pyfunc import from_pyfunc

    def make_logp():
        def logp(x, **_):
            x = np.asarray(x, dtype=np.float64)
            if not np.all(np.isfinite(x)):
                return -np.inf, np.zeros(dim)
            value, gradient = target.log_density_gradient(x)
            return float(value), np.ascontiguousarray(gradient, dtype=np.float64)
        return logp

    def make_expand(seed1, seed2, chain):
        return lambda x, **_: {"q": np.array(x, dtype=np.float64)}

    return from_pyfunc(dim, make_logp, make_expand, [np.dtype("float64")], [(dim,)], ["q"],
                       make_initial_point_fn=lambda seed: np.random.default_rng(seed).uniform(
                           -2, 2, dim))


def nutpie_run(model, seed, tune, draws):
    """A run of nutpie's NUTS: timed whole, the seconds split by the phases' gradients."""
    import nutpie
    start = time.perf_counter()
    trace = nutpie.sample(model, draws=draws, tune=tune, chains=CHAINS, cores=1, seed=seed,
                          progress_bar=False)
    seconds = time.perf_counter() - start
    stats, warm = trace.sample_stats, trace.warmup_sample_stats
    samp_grads, warm_grads = int(stats["n_steps"].sum()), int(warm["n_steps"].sum())
    share = samp_grads / max(1, samp_grads + warm_grads)
    return Run(trace.posterior["q"].values, stats["diverging"].sum(),
               float(stats["depth"].mean()), warm_grads, samp_grads, seconds * (1 - share),
               seconds * share)


def best_hmc(runs):
    """The L of the cheapest run to ESS 1000 among the converged ones (if none converged, of
    the run with the lowest R-hat)."""
    return min(runs, key=lambda L: (0, runs[L].grads_to_ess) if runs[L].converged
               else (1, runs[L].r_hat))


# ----------------------------------------------------------------------------------------------
# the table

HEADER = (f"{'posterior':22s} {'run':18s} {'seed':>4s} {'R-hat':>6s} {'min ESS':>7s} "
          f"{'div':>5s} {'depth':>5s} {'warm grads':>10s} {'samp grads':>10s} {'warm s':>7s} "
          f"{'samp s':>7s} {'jit s':>6s} {'grads@1000':>10s} {'s@1000':>8s} {'ms/ESS':>7s}")


def print_row(name, label, seed, run):
    depth = "-" if run.depth is None else f"{run.depth:5.2f}"
    jit = "-" if run.compile_s is None else f"{run.compile_s:6.1f}"
    if run.converged:
        cost = f"{run.grads_to_ess:10.0f} {run.seconds_to_ess:8.1f} {run.ms_per_ess:7.2f}"
    else:
        cost = f"{'not converged':>19s} {'-':>7s}"
    print(f"{name[:22]:22s} {label[:18]:18s} {seed:4d} {run.r_hat:6.3f} {run.ess:7.0f} "
          f"{run.divergent:5d} {depth:>5s} {run.warm_grads:10d} {run.samp_grads:10d} "
          f"{run.warm_s:7.1f} {run.samp_s:7.1f} {jit:>6s} {cost}", flush=True)


def print_failure(name, label, seed, error):
    print(f"{name[:22]:22s} {label[:18]:18s} {seed:4d} failed: {type(error).__name__}: "
          f"{str(error).splitlines()[0] if str(error) else ''}", flush=True)


def print_medians(name, table):
    """The medians over seeds of each run's converged figures."""
    print(f"  {name}: medians over the converged seeds "
          f"({'grads@1000':>10s} {'s@1000':>8s} {'ms/ESS':>7s})", flush=True)
    for label, runs in table.items():
        done = [r for r in runs if r.converged]
        if done:
            figures = (f"{np.median([r.grads_to_ess for r in done]):10.0f} "
                       f"{np.median([r.seconds_to_ess for r in done]):8.1f} "
                       f"{np.median([r.ms_per_ess for r in done]):7.2f}")
        else:
            figures = f"{'-':>10s} {'-':>8s} {'-':>7s}"
        print(f"    {label:18s} {figures}   {len(done)}/{len(runs)} converged", flush=True)


def peers(rows):
    """{"numpyro": None or why not, "nutpie": ...}: which peers can run, and their versions."""
    available, versions = {}, []
    if "numpyro" in rows:
        try:
            import jax
            import numpyro
            numpyro.enable_x64()  # (float64, as rnshmc; before any JAX array is made)
            jax.monitoring.register_event_time_span_listener(COMPILE_CLOCK)
            available["numpyro"] = None
            versions.append(f"numpyro {numpyro.__version__}, jax {jax.__version__} (x64)")
        except ImportError as error:
            available["numpyro"] = f"NumPyro rows left out: {error} (pip install numpyro jax)"
    if "nutpie" in rows:
        try:
            import nutpie
            available["nutpie"] = None
            versions.append(f"nutpie {nutpie.__version__}")
        except ImportError as error:
            available["nutpie"] = f"nutpie rows left out: {error} (pip install nutpie)"
    return available, versions


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--posteriors", nargs="+", choices=POSTERIORS,
                        default=list(DEFAULT_POSTERIORS))
    parser.add_argument("--rows", nargs="+", choices=ROWS, default=list(ROWS))
    parser.add_argument("--metrics", nargs="+", choices=METRICS, default=["default"],
                        help="rnshmc NUTS rows: 'default' (no metric argument) or a metric "
                             "(default: %(default)s)")
    parser.add_argument("--tune", type=int, default=None,
                        help="every row's warm-up (default: each library's, see above)")
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--numpyro-mass", nargs="+", choices=("diag", "dense"),
                        default=["diag", "dense"], help="NumPyro's mass matrices")
    parser.add_argument("--hmc-tune", type=int, default=HMC_TUNE,
                        help="HMC's warm-up iterations (default %(default)s)")
    parser.add_argument("--hmc-steps", type=int, nargs="+", default=None,
                        help="HMC's grid of L for every posterior (default: L = 10 for the "
                             f"PDE and the logistic regression, else {HMC_GRID})")
    args = parser.parse_args(argv)
    available, versions = peers(args.rows)
    print(f"rnshmc {rnshmc.__version__}; {'; '.join(versions) or 'no peers'}; "
          f"Python {sys.version.split()[0]}")
    warmup = (f"{args.tune}" if args.tune is not None else
              f"the libraries' defaults (rnshmc NUTS {rnshmc.NUTS.DEFAULT_TUNE}, nutpie "
              f"{NUTPIE_TUNE}, NumPyro {NUMPYRO_TUNE})")
    print(f"{CHAINS} chains one after another, warm-up {warmup} (HMC {args.hmc_tune}), "
          f"{args.draws} draws, seeds {args.seeds}; cost to min bulk ESS {ESS:.0f} at "
          f"R-hat <= {RHAT}, extrapolated at the measured rate")
    for why in available.values():
        if why:
            print(why)
    for name in args.posteriors:
        target, data, title = load_posterior(name)
        dim = target.dim
        print(f"\n{title} (d = {dim})\n{HEADER}", flush=True)
        table = {}

        def record(label, seed, make_run):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    run = make_run()
            except Exception as error:  # (a peer's failure is a row, not the end)
                print_failure(name, label, seed, error)
                return None
            print_row(name, label, seed, run)
            table.setdefault(label, []).append(run)
            return run

        if "nuts" in args.rows:
            for metric in args.metrics:
                for seed in args.seeds:
                    record(f"NUTS {metric}", seed, lambda: rnshmc_run(
                        nuts_sampler(target, metric), args.draws, args.tune, seed))
        numpyro_tune = NUMPYRO_TUNE if args.tune is None else args.tune
        nutpie_tune = NUTPIE_TUNE if args.tune is None else args.tune
        if "numpyro" in args.rows and available["numpyro"] is None:
            potential = jax_potential(name, data, dim)
            check_jax_potential(name, potential, target, dim)
            for dense in (kind == "dense" for kind in args.numpyro_mass):
                for seed in args.seeds:
                    record("NumPyro " + ("dense" if dense else "diag"), seed,
                           lambda: numpyro_run(potential, dim, dense, seed, numpyro_tune,
                                               args.draws))
        if "nutpie" in args.rows and available["nutpie"] is None:
            model = nutpie_model(target, dim)
            for seed in args.seeds:
                record("nutpie", seed, lambda: nutpie_run(model, seed, nutpie_tune,
                                                          args.draws))
        if "hmc" in args.rows:
            grid = args.hmc_steps or HMC_HAND_CHOSEN.get(name, HMC_GRID)
            for i, seed in enumerate(args.seeds):
                runs = {}
                for L in grid:
                    run = record(f"HMC L={L}", seed, lambda: rnshmc_run(
                        rnshmc.HMC(target, n_steps=L), args.draws, args.hmc_tune, seed))
                    if run is not None:
                        runs[L] = run
                if i == 0 and len(grid) > 1:
                    if not runs:
                        break
                    grid = (best_hmc(runs),)
                    print(f"  (HMC at its best on {name}: L = {grid[0]}, chosen on seed {seed} "
                          f"by the fewest gradients to ESS {ESS:.0f}; the next seeds run it "
                          "alone)", flush=True)
        print_medians(name, table)


if __name__ == "__main__":
    main()
