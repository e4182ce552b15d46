"""Record every sampler's draws for fixed seeds, or compare them with a recording.

A guard for refactoring: run ``record`` on the code before a change and ``compare`` after it;
every configuration's draws and the numbers in its result must be bit-identical (or the change
of a default was meant, and said so).

    python benchmarks/guard_draws.py record guard.npz
    python benchmarks/guard_draws.py compare guard.npz

Each configuration runs 2 chains serially (``pool=None``), short runs, with a sampler's main
options; the arguments are the ones users call. (The earlier keyword names, a TypeError now,
were replaced by their new spelling under the same configuration names: recordings made with
the earlier names compare with them.)
"""
import argparse
import sys
import time
import warnings

import numpy as np

import rnshmc


def _gaussian(dim=3):
    rng = np.random.default_rng(0)
    a = rng.normal(size=(dim, dim))
    return rnshmc.models.Gaussian(np.arange(dim) * 0.5, covariance=a @ a.T / dim + np.eye(dim))


def _logistic(n=500, dim=4):
    X, y, _ = rnshmc.datasets.simulated_logistic(n=n, dim=dim, rng=0)
    return rnshmc.models.LogisticRegression(X, y)


def _pde():
    return rnshmc.models.EllipticPDE(n=10, element="Q1", n_modes=6, rng=0)


def _python_target(dim=2):
    return rnshmc.Target(lambda q: -0.5 * float(q @ q) - 0.1 * float(q[0]) ** 4,
                         grad_logp=lambda q: -q - np.r_[0.4 * q[0] ** 3, np.zeros(len(q) - 1)],
                         dim=dim)


def _l2hmc(target):
    l2 = rnshmc.L2HMC(target, n_steps=4, net_width=6, step_size=0.2).initialize(0)
    l2.train(60, chains=20, rng=1, progress=False)
    return l2


def _l2hmc_surrogate():
    l2 = rnshmc.L2HMC.with_surrogate(_logistic(), tune=120, rng=0, progress=False,
                                     rns_options=dict(n_hidden=150), n_steps=4, net_width=6)
    l2.train(40, chains=20, learning_rate=3e-3, rng=1, progress=False)
    return l2


# name -> (make sampler, sample() arguments)
CONFIGS = {
    "hmc_adapt": (lambda: rnshmc.HMC(_gaussian(), n_steps=5), dict(draws=150, tune=150)),
    "hmc_fixed": (lambda: rnshmc.HMC(_gaussian(), step_size=0.3, n_steps=4, jitter=False),
                  dict(draws=100, tune=20)),
    "hmc_dense_mass": (lambda: rnshmc.HMC(_gaussian(), step_size=0.2, n_steps=5,
                                          inverse_mass_matrix=np.eye(3) * 1.5 + 0.2),
                       dict(draws=100, tune=30)),
    "hmc_python": (lambda: rnshmc.HMC(_python_target(), n_steps=4), dict(draws=100, tune=100)),
    "hmc_logistic": (lambda: rnshmc.HMC(_logistic(), n_steps=5), dict(draws=100, tune=100)),
    "hmc_pde": (lambda: rnshmc.HMC(_pde(), n_steps=5), dict(draws=60, tune=60)),
    # (hmc_warmup=0: RMHMC from the start, as before the exact-HMC approach became the default)
    "rmhmc_fisher": (lambda: rnshmc.RMHMC(_logistic(), metric="fisher", step_size=0.3,
                                          n_steps=3, hmc_warmup=0), dict(draws=60, tune=20)),
    "rmhmc_adapt": (lambda: rnshmc.RMHMC(_logistic(), metric="fisher", n_steps=3,
                                         hmc_warmup=0), dict(draws=50, tune=50)),
    "rmhmc_newton": (lambda: rnshmc.RMHMC(_logistic(), metric="fisher", step_size=0.3,
                                          n_steps=3, newton=True, hmc_warmup=0),
                     dict(draws=40, tune=10)),
    "rmhmc_gauss_newton": (lambda: rnshmc.RMHMC(_pde(), metric="gauss_newton", step_size=0.3,
                                                n_steps=3, hmc_warmup=0),
                           dict(draws=30, tune=10)),
    "rns_default": (lambda: rnshmc.RNSHMC(_logistic(), n_hidden=200),
                    dict(draws=150, tune=150)),
    "rns_states_da": (lambda: rnshmc.RNSHMC(
        _logistic(), n_hidden=200, delayed_acceptance=True, n_steps=6,
        surrogate=dict(training_data="states", whiten=False, gradient_weight=0.0)),
        dict(draws=120, tune=150)),
    "rns_shared": (lambda: rnshmc.RNSHMC(_logistic(), n_hidden=200, share_surrogate=True),
                   dict(draws=120, tune=100)),
    "rns_trust": (lambda: rnshmc.RNSHMC(_gaussian(5), n_hidden=12,
                                        trust=dict(window=20, refit_iterations=30, max_refits=1,
                                                   ratio=0.95)),
                  dict(draws=200, tune=80)),
    "rns_pde": (lambda: rnshmc.RNSHMC(_pde(), n_hidden=150), dict(draws=80, tune=80)),
    "rns_given_step": (lambda: rnshmc.RNSHMC(_gaussian(), n_hidden=100, step_size=0.3,
                                             explore=dict(n_steps=4),
                                             surrogate=dict(n_train=40)),
                       dict(draws=80, tune=60)),
    "arns_default": (lambda: rnshmc.ARNSHMC(_logistic(), n_hidden=150),
                     dict(draws=150, tune=100)),
    "arns_accepted_freeze": (lambda: rnshmc.ARNSHMC(_logistic(), n_hidden=150,
                                                    online_points="accepted", freeze_after=60),
                             dict(draws=120, tune=100)),
    "arns_shared": (lambda: rnshmc.ARNSHMC(_logistic(), n_hidden=150, share_surrogate=True),
                    dict(draws=150, tune=80)),
    "rnsrm_diagonal": (lambda: rnshmc.RNSRMHMC(_logistic(), metric="diagonal", n_hidden=150,
                                               softabs=1.0, step_size=0.3, n_steps=3),
                       dict(draws=50, tune=120)),
    "rnsrm_hessian_adapt": (lambda: rnshmc.RNSRMHMC(_logistic(), metric="hessian",
                                                    n_hidden=150, softabs=1.0, n_adapt=30,
                                                    n_steps=3), dict(draws=40, tune=120)),
    "gf_shared": (lambda: rnshmc.GradientFreeRNSHMC(_gaussian(), n_hidden=100),
                  dict(draws=120, tune=300)),
    "gf_own_states": (lambda: rnshmc.GradientFreeRNSHMC(_gaussian(), n_hidden=100,
                                                        share_surrogate=False,
                                                        surrogate=dict(training_data="states")),
                      dict(draws=100, tune=400)),
    "gf_auto_tune": (lambda: rnshmc.GradientFreeRNSHMC(_gaussian(2), n_hidden=80),
                     dict(draws=100)),
    "am": (lambda: rnshmc.AdaptiveMetropolis(_gaussian()), dict(draws=300, tune=200)),
    "am_pde": (lambda: rnshmc.AdaptiveMetropolis(_pde()), dict(draws=100, tune=100)),
    "l2hmc": (lambda: _l2hmc(rnshmc.models.correlated_gaussian_2d()), dict(draws=80, tune=20)),
    "l2hmc_surrogate": (_l2hmc_surrogate, dict(draws=60, tune=10)),
    # the same runs spelled with the grouped settings (compared with the recordings above)
    "rns_states_da_grouped": (lambda: rnshmc.RNSHMC(
        _logistic(), n_hidden=200, n_steps=6, delayed_acceptance=True,
        surrogate=dict(training_data="states", whiten=False, gradient_weight=0.0)),
        dict(draws=120, tune=150)),
    "rns_trust_grouped": (lambda: rnshmc.RNSHMC(
        _gaussian(5), n_hidden=12, trust=dict(window=20, refit_iterations=30, max_refits=1,
                                              ratio=0.95)), dict(draws=200, tune=80)),
    "gf_own_states_grouped": (lambda: rnshmc.GradientFreeRNSHMC(
        _gaussian(), n_hidden=100, share_surrogate=False,
        surrogate=dict(training_data="states")), dict(draws=100, tune=400)),
}
# configurations compared with another's recording
SAME_AS = {"rns_states_da_grouped": "rns_states_da", "rns_trust_grouped": "rns_trust",
           "gf_own_states_grouped": "gf_own_states"}


def _flatten(prefix, value, out):
    """Numbers and numeric arrays in a result (nested dicts and lists), by dotted key."""
    if isinstance(value, dict):
        for key, item in value.items():
            _flatten(f"{prefix}.{key}", item, out)
    elif isinstance(value, (list, tuple)) and value and not np.isscalar(value[0]) \
            and not isinstance(value[0], np.ndarray):
        for i, item in enumerate(value):
            _flatten(f"{prefix}[{i}]", item, out)
    elif "timings" in prefix or "seconds" in prefix or "time_" in prefix:
        return
    else:
        try:
            array = np.asarray(value)
        except Exception:  # noqa: BLE001
            return
        if array.dtype.kind in "biuf" and array.size:
            out[prefix] = array


def run(name):
    make, arguments = CONFIGS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sampler = make()
        result = sampler.sample(chains=2, rng=12345, pool=None, progress=False, **arguments)
    out = {}
    for key, value in result.items():
        if key in ("timings", "health"):
            continue
        _flatten(key, value, out)
    if isinstance(sampler, rnshmc.L2HMC):
        out["l2hmc.parameters"] = sampler.parameters.copy()
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["record", "compare"])
    parser.add_argument("path")
    parser.add_argument("--only", nargs="*", help="configuration names")
    args = parser.parse_args(argv)
    names = args.only or list(CONFIGS)
    if args.mode == "record":
        names = [name for name in names if name not in SAME_AS]
        data = {}
        for name in names:
            start = time.perf_counter()
            for key, value in run(name).items():
                data[f"{name}/{key}"] = value
            print(f"{name}: {time.perf_counter() - start:.1f} s", flush=True)
        np.savez(args.path, **data)
        return 0
    with np.load(args.path) as npz:
        reference = {key: npz[key] for key in npz.files}
    failed = 0
    for name in names:
        recorded = SAME_AS.get(name, name)
        expected = {k.split("/", 1)[1]: v for k, v in reference.items()
                    if k.split("/", 1)[0] == recorded}
        try:
            got = run(name)
        except Exception as error:  # noqa: BLE001 - report and go on
            print(f"{name}: FAILED {type(error).__name__}: {error}")
            failed += 1
            continue
        differ = [k for k in expected if k in got and (
            expected[k].shape != got[k].shape or not np.array_equal(expected[k], got[k],
                                                                    equal_nan=True))]
        missing = [k for k in expected if k not in got]
        new = [k for k in got if k not in expected]
        same_draws = "samples" in got and "samples" not in differ
        status = "identical" if not differ and not missing else (
            "DRAWS DIFFER" if not same_draws else "draws identical, other keys differ")
        failed += not (same_draws and not differ)
        print(f"{name}: {status}" + (f"; differ {differ}" if differ else "")
              + (f"; missing {missing}" if missing else "") + (f"; new {new}" if new else ""),
              flush=True)
    print(f"{failed} of {len(names)} configurations not identical")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
