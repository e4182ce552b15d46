"""Gaussian-process surrogates: the full GP's and FITC's predictive means and gradients against
NumPy references of the formulas of the RNS paper's section 3.3 (and scikit-learn where
installed), the log marginal likelihoods' gradients against finite differences, the paper's
equivalence with RBF networks fitted by (weighted) regularised least squares, and saved
states."""
import numpy as np
import pytest
from scipy import stats

import rnshmc
from rnshmc.gaussian_process import (fitc_log_marginal_likelihood,
                                     full_log_marginal_likelihood)
from rnshmc.surrogate import surrogate_from_state
from testkit import rng_seed


def data(seed=0, n=40, dim=3):
    rng = np.random.default_rng(seed)
    Q = rng.standard_normal((n, dim))
    t = 0.5 * np.sum(Q ** 2, axis=1) + 0.3 * np.sin(2 * Q[:, 0]) + 2.0
    return Q, t, rng.standard_normal((7, dim))


def se_kernel(A, B, signal, lengths):
    diff = (A[:, None, :] - B[None, :, :]) / lengths
    return signal ** 2 * np.exp(-0.5 * np.sum(diff ** 2, axis=-1))


def finite_differences(f, x, h=1e-6):
    """Central differences of f (scalar or vector valued) along each entry of x: an array of
    x's shape (scalar f) or of shape (x.size, len(f)) (vector f, a Jacobian's rows)."""
    columns = []
    for i in range(x.size):
        e = np.zeros_like(x)
        e.flat[i] = h
        columns.append((np.asarray(f(x + e)) - np.asarray(f(x - e))) / (2 * h))
    columns = np.array(columns)
    return columns.reshape(x.shape) if columns.ndim == 1 else columns


HYPER = dict(signal_sd=1.7, lengthscale=np.array([0.9, 1.3, 1.1]), noise_sd=0.05)


def test_full_gp_mean_and_gradient_match_numpy():
    Q, t, test = data()
    gp = rnshmc.GaussianProcessSurrogate(3, whiten=False, **HYPER).fit(Q, t)
    s, l, sn = HYPER["signal_sd"], HYPER["lengthscale"], HYPER["noise_sd"]
    mu = t.mean()
    K = se_kernel(Q, Q, s, l) + (sn ** 2 + 1e-8 * s ** 2) * np.eye(len(Q))
    alpha = np.linalg.solve(K, t - mu)
    expected = mu + se_kernel(test, Q, s, l) @ alpha
    np.testing.assert_allclose(gp.predict(test), expected, rtol=1e-10, atol=1e-10)
    for q in test[:3]:
        k = se_kernel(q[None], Q, s, l)[0]
        grad = -((q - Q) / l ** 2 * (k * alpha)[:, None]).sum(axis=0)
        np.testing.assert_allclose(gp.gradient(q), grad, rtol=1e-9, atol=1e-10)
        np.testing.assert_allclose(gp.hessian(q), finite_differences(gp.gradient, q),
                                   rtol=1e-5, atol=1e-6)
    assert gp.n_hidden == len(Q) and gp.fit_residual_ < 0.05


def test_full_gp_matches_scikit_learn():
    gaussian_process = pytest.importorskip("sklearn.gaussian_process")
    kernels = gaussian_process.kernels
    Q, t, test = data(1)
    s, l, sn = HYPER["signal_sd"], HYPER["lengthscale"], HYPER["noise_sd"]
    gp = rnshmc.GaussianProcessSurrogate(3, whiten=False, **HYPER).fit(Q, t)
    reference = gaussian_process.GaussianProcessRegressor(
        kernels.ConstantKernel(s ** 2, "fixed") * kernels.RBF(l, "fixed"),
        alpha=sn ** 2 + 1e-8 * s ** 2, optimizer=None).fit(Q, t - t.mean())
    np.testing.assert_allclose(gp.predict(test), reference.predict(test) + t.mean(), rtol=1e-9)
    lml, _ = full_log_marginal_likelihood(Q, t - t.mean(), s, l, sn)
    assert lml == pytest.approx(reference.log_marginal_likelihood_value_, rel=1e-9)


@pytest.mark.parametrize("sparse", [False, True])
def test_log_marginal_likelihood_gradients_match_finite_differences(sparse):
    Q, t, _ = data(2, n=30)
    y = t - t.mean()
    Z = Q[:8] + 0.05
    theta = np.array([0.3, -0.1, 0.2, 0.05, np.log(0.1)])

    def lml(theta, Z=Z):
        s, l, sn = np.exp(theta[0]), np.exp(theta[1:4]), np.exp(theta[4])
        if sparse:
            return fitc_log_marginal_likelihood(Q, Z, y, s, l, sn, gradient=True,
                                                inducing_gradient=True)
        return full_log_marginal_likelihood(Q, y, s, l, sn, gradient=True)

    _, grads = lml(theta)
    analytic = np.concatenate([[grads["signal"]], grads["lengths"], [grads["noise"]]])
    numeric = finite_differences(lambda x: lml(x)[0], theta)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-6)
    if sparse:
        numeric = finite_differences(lambda z: lml(theta, z)[0], Z)
        np.testing.assert_allclose(grads["inducing"], numeric, rtol=1e-5, atol=1e-6)


def fitc_reference(Q, Z, t, mu, s, l, sn):
    """Section 3.3's FITC, with dense N x N matrices: the predictive weights
    Sigma_M^-1 K_MN (A + sigma^2 I)^-1 (t - mu) and the log density of t - mu under
    N(0, K_NM K_M^-1 K_MN + A + sigma^2 I), A = diag(K_N - K_NM K_M^-1 K_MN)."""
    KM = se_kernel(Z, Z, s, l) + 1e-8 * s ** 2 * np.eye(len(Z))
    KNM = se_kernel(Q, Z, s, l)
    Qn = KNM @ np.linalg.solve(KM, KNM.T)
    A = np.diag(np.diag(se_kernel(Q, Q, s, l) - Qn))
    D = A + sn ** 2 * np.eye(len(Q))
    SigmaM = KM + KNM.T @ np.linalg.solve(D, KNM)
    weights = np.linalg.solve(SigmaM, KNM.T @ np.linalg.solve(D, t - mu))
    lml = stats.multivariate_normal(np.zeros(len(Q)), Qn + D).logpdf(t - mu)
    return weights, lml, KNM, KM, D


def test_fitc_matches_the_papers_formulas():
    Q, t, test = data(3, n=50)
    gp = rnshmc.GaussianProcessSurrogate(3, whiten=False, sparse=True, n_inducing=9,
                                         rng=rng_seed(0),
                                         **HYPER).fit(Q, t)
    Z = gp.centres_
    assert Z.shape == (9, 3) and all(any(np.array_equal(z, q) for q in Q) for z in Z)
    s, l, sn = HYPER["signal_sd"], HYPER["lengthscale"], HYPER["noise_sd"]
    weights, lml, *_ = fitc_reference(Q, Z, t, t.mean(), s, l, sn)
    np.testing.assert_allclose(gp.predict(test), t.mean() + se_kernel(test, Z, s, l) @ weights,
                               rtol=1e-8)
    assert gp.log_marginal_likelihood_ == pytest.approx(lml, rel=1e-8)


def test_rbf_networks_fitted_by_least_squares_give_the_gp_means():
    """Sec. 3.3: centres at the inducing points, the weighted regularised least squares
    min |D^-1/2 (H v - t)|^2 + v^T K_M v gives FITC's mean; centres at the training points,
    min |H v - t|^2 + sigma^2 v^T K_N v gives the full GP's. Solved here as stacked
    least-squares problems, not by the GP's formulas."""
    Q, t, test = data(4, n=45)
    s, l, sn = HYPER["signal_sd"], HYPER["lengthscale"], HYPER["noise_sd"]
    y = t - t.mean()
    fitc = rnshmc.GaussianProcessSurrogate(3, whiten=False, sparse=True, n_inducing=10,
                                           rng=rng_seed(1),
                                           **HYPER).fit(Q, t)
    Z = fitc.centres_
    _, _, H, KM, D = fitc_reference(Q, Z, t, t.mean(), s, l, sn)
    root = np.linalg.cholesky(KM).T  # v^T K_M v = |root v|^2
    d = 1 / np.sqrt(np.diag(D))
    v = np.linalg.lstsq(np.vstack([d[:, None] * H, root]),
                        np.concatenate([d * y, np.zeros(len(Z))]), rcond=None)[0]
    np.testing.assert_allclose(fitc.predict(test), t.mean() + se_kernel(test, Z, s, l) @ v,
                               rtol=1e-7)

    full = rnshmc.GaussianProcessSurrogate(3, whiten=False, **HYPER).fit(Q, t)
    KN = se_kernel(Q, Q, s, l) + 1e-8 * s ** 2 * np.eye(len(Q))
    root = np.linalg.cholesky(KN).T
    v = np.linalg.lstsq(np.vstack([KN, sn * root]), np.concatenate([y, np.zeros(len(Q))]),
                        rcond=None)[0]
    np.testing.assert_allclose(full.predict(test), t.mean() + se_kernel(test, Q, s, l) @ v,
                               rtol=1e-6)


@pytest.mark.parametrize("options", [dict(), dict(lengthscale="shared"),
                                     dict(sparse=True, n_inducing=20),
                                     dict(sparse=True, n_inducing=8, optimize_inducing=True)])
def test_fitted_hyperparameters_raise_the_marginal_likelihood(options):
    Q, t, test = data(5, n=60)
    gp = rnshmc.GaussianProcessSurrogate(3, rng=rng_seed(0), **options).fit(Q, t)
    start = rnshmc.GaussianProcessSurrogate(3, rng=rng_seed(0), **options)
    # the starting values (:meth:`_initial_hyper`): the targets' sd, the inputs' sds, 1% noise
    X = np.linalg.solve(gp.input_factor_, (Q - gp.input_mean_).T).T
    sd = X.std(axis=0)
    lengths = np.full(3, sd.mean()) if options.get("lengthscale") == "shared" else sd
    y_sd = t.std()
    initial, _ = gp.log_marginal_likelihood(Q, t, y_sd, lengths, 0.01 * y_sd)
    if options.get("optimize_inducing"):  # moved, to a higher likelihood than when kept
        assert not any(np.array_equal(z, x) for z in gp.centres_ for x in X)
        kept = rnshmc.GaussianProcessSurrogate(3, rng=rng_seed(0), sparse=True,
                                               n_inducing=options["n_inducing"]).fit(Q, t)
        assert gp.log_marginal_likelihood_ > kept.log_marginal_likelihood_
    else:
        assert gp.log_marginal_likelihood_ > initial + 1.0
    assert start.fitted is False
    # (FITC's residual depends on where its inducing points start: 0.05-0.21 of the targets'
    # sd with 20, 0.13-0.29 with 8, over seeds 0-9; the full GP's 0.001)
    assert gp.fit_residual_ < (0.4 if options.get("sparse") else 0.1) * t.std()
    truth = 0.5 * np.sum(test ** 2, axis=1) + 0.3 * np.sin(2 * test[:, 0]) + 2.0
    assert np.sqrt(np.mean((gp.predict(test) - truth) ** 2)) < 0.5 * truth.std()
    if options.get("lengthscale") == "shared":
        assert np.ptp(gp.lengthscales_) == 0


@pytest.mark.parametrize("sparse", [False, True])
def test_saved_state_predicts_identically(sparse, tmp_path):
    Q, t, test = data(6)
    gp = rnshmc.GaussianProcessSurrogate(3, sparse=sparse, n_inducing=12, rng=rng_seed(0)).fit(Q, t)
    state = gp.get_state()
    assert state["kind"] == "gaussian_process"
    np.savez(tmp_path / "gp.npz", **{k: np.asarray(v, dtype=object) if isinstance(v, list)
                                     else v for k, v in state.items() if v is not None})
    rebuilt = surrogate_from_state(state)
    assert isinstance(rebuilt, rnshmc.GaussianProcessSurrogate)
    np.testing.assert_array_equal(rebuilt.predict(test), gp.predict(test))
    np.testing.assert_array_equal(rebuilt.gradient(test[0]), gp.gradient(test[0]))
    network = rnshmc.RandomNetworkSurrogate(3, n_hidden=20, rng=rng_seed(0)).fit(Q, t)
    assert isinstance(surrogate_from_state(network.get_state()), rnshmc.RandomNetworkSurrogate)
    with pytest.raises(ValueError, match="unknown surrogate kind"):
        surrogate_from_state(dict(state, kind="spline"))


def test_refit_like_keeps_the_hyperparameters():
    Q, t, test = data(7)
    gp = rnshmc.GaussianProcessSurrogate(3, rng=rng_seed(0)).fit(Q, t)
    again = rnshmc.GaussianProcessSurrogate(3, rng=rng_seed(1)).fit(Q[:30], t[:30], like=gp)
    assert again.signal_sd_ == gp.signal_sd_ and again.optimize_time_ == 0
    np.testing.assert_array_equal(again.lengthscales_, gp.lengthscales_)
    assert again.n_hidden == 30


def test_bad_inputs():
    GP = rnshmc.GaussianProcessSurrogate
    Q, t, _ = data()
    for kwargs, match in [(dict(dim=0), "dim"), (dict(dim=3, kernel="matern"), "kernel"),
                          (dict(dim=3, lengthscale="wide"), "lengthscale"),
                          (dict(dim=3, lengthscale=[1.0, -1.0, 1.0]), "lengthscale"),
                          (dict(dim=3, noise_sd=0.0), "noise_sd"),
                          (dict(dim=3, n_inducing=0), "n_inducing"),
                          (dict(dim=3, mean="linear"), "mean")]:
        with pytest.raises(ValueError, match=match):
            GP(**kwargs)
    gp = GP(3)
    with pytest.raises(RuntimeError, match="not fitted"):
        gp.potential(np.zeros(3))
    with pytest.raises(ValueError, match="values only"):
        gp.fit(Q, t, gradients=Q, gradient_weight=1.0)
    with pytest.raises(ValueError, match="online"):
        gp.fit(Q, t, online=True)
    with pytest.raises(ValueError, match="shape"):
        gp.fit(Q[:, :2], t)
    with pytest.raises(ValueError, match="finite"):
        gp.fit(Q, np.where(np.arange(len(t)) == 3, np.nan, t))
    with pytest.raises(ValueError, match="like"):
        gp.fit(Q, t, like=rnshmc.RandomNetworkSurrogate(3, n_hidden=5, rng=rng_seed(0)).fit(Q, t))


# --------------------------------------------------------------------------------------------
# the surrogate as a sampler's part


SURROGATES = {
    "random network": None,
    "full GP": rnshmc.GaussianProcessSurrogate(4),
    "FITC": rnshmc.GaussianProcessSurrogate(4, sparse=True, n_inducing=60),
}


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("kind", list(SURROGATES))
def test_rns_hmc_with_each_surrogate_class_is_exact(kind, seed):
    """RNS-HMC on a correlated 4-d Gaussian with each surrogate class: means and covariances
    within Monte Carlo error (GP-HMC, Rasmussen 2003, is RNS-HMC with a GP)."""
    from testkit import check_covariance, check_mean, correlated_gaussian
    model, mean, cov = correlated_gaussian(dim=4, seed=3)
    res = rnshmc.RNSHMC(model, surrogate=SURROGATES[kind]).sample(
        1500, chains=2, rng=seed, progress=False)
    assert res.acceptance_rate.mean() > 0.5
    surrogates = rnshmc.RNSHMC.fitted_surrogates(res)
    expected = rnshmc.RandomNetworkSurrogate if kind == "random network" \
        else rnshmc.GaussianProcessSurrogate
    assert all(isinstance(s, expected) for s in surrogates)
    if kind == "FITC":
        assert all(s.n_hidden == 60 for s in surrogates)
    check_mean(res.samples, mean)
    check_covariance(res.samples, mean, cov)


def test_a_gp_surrogate_in_a_dict_and_in_the_other_samplers():
    model = rnshmc.models.Gaussian(np.zeros(3), covariance=np.diag([1.0, 2.0, 0.5]))
    sampler = rnshmc.RNSHMC(model, surrogate=dict(kind="gaussian_process", sparse=True,
                                                  n_inducing=30, lengthscale="shared"))
    assert sampler.surrogate_settings.cls is rnshmc.GaussianProcessSurrogate
    assert sampler.hidden_units(3) == 30
    assert rnshmc.RNSHMC(model, surrogate=SURROGATES["full GP"]).hidden_units(3) is None
    free = rnshmc.GradientFreeRNSHMC(model, surrogate=rnshmc.GaussianProcessSurrogate(3))
    res = free.sample(300, tune=300, chains=2, rng=rng_seed(0), progress=False)
    assert isinstance(rnshmc.RNSHMC.fitted_surrogates(res)[0], rnshmc.GaussianProcessSurrogate)
    assert res.acceptance_rate.mean() > 0.3
    with pytest.raises(ValueError, match="online"):
        rnshmc.ARNSHMC(model, surrogate=rnshmc.GaussianProcessSurrogate(3))
    with pytest.raises(ValueError, match="Hessian"):
        rnshmc.RNSRMHMC(model, surrogate=dict(kind="gaussian_process"))
    with pytest.raises(ValueError, match="values only"):
        rnshmc.RNSHMC(model, surrogate=dict(kind="gaussian_process", gradient_weight=1.0))
    with pytest.raises(ValueError, match="kind"):
        rnshmc.RNSHMC(model, surrogate=dict(kind="spline"))
    with pytest.raises(TypeError, match="no setting 'nodes'"):
        rnshmc.RNSHMC(model, surrogate=dict(kind="gaussian_process", nodes="rbf"))


@pytest.mark.parametrize("stop", [150, 230])
def test_gp_surrogate_runs_checkpoint_resume_and_save(stop, tmp_path):
    """Stopped in exploration or in sampling, a checkpointed RNS-HMC run with a FITC
    surrogate resumes to the uninterrupted draws; its saved result rebuilds the GP."""
    from rnshmc.samplers.checkpoint import Checkpointer
    model = rnshmc.models.Gaussian(np.arange(3.0), covariance=np.eye(3))
    sampler = rnshmc.RNSHMC(model, surrogate=rnshmc.GaussianProcessSurrogate(
        3, sparse=True, n_inducing=40))
    kwargs = dict(draws=100, tune=200, chains=2, rng=rng_seed(8))
    full = sampler.sample(**kwargs, progress=False)
    states = sampler.run_states(sampler.init_states(**kwargs), progress=False, stop_after=stop)
    path = tmp_path / "run.npz"
    Checkpointer(path, sampler, dict(draws=100, checkpoint_every=1000)).write(states)
    resumed = rnshmc.resume(path, progress=False)
    np.testing.assert_array_equal(resumed.samples, full.samples)
    full.save(tmp_path / "result.npz")
    loaded = rnshmc.load(tmp_path / "result.npz")
    test = np.random.default_rng(rng_seed(0)).standard_normal((5, 3))
    for a, b in zip(rnshmc.RNSHMC.fitted_surrogates(loaded),
                    rnshmc.RNSHMC.fitted_surrogates(full)):
        assert isinstance(a, rnshmc.GaussianProcessSurrogate)
        np.testing.assert_array_equal(a.predict(test), b.predict(test))


def test_the_front_door_samples_with_a_given_gp_surrogate():
    model = rnshmc.models.Gaussian(np.zeros(2), covariance=np.array([[1.0, 0.6], [0.6, 1.0]]))
    res = rnshmc.sample(model, ess=300, chains=2, rng=rng_seed(0), progress=False, pool=None,
                        surrogate=rnshmc.GaussianProcessSurrogate(2, sparse=True,
                                                                  n_inducing=50))
    assert res.choice["sampler"] == "RNS-HMC" and "surrogate" in res.choice["reason"]
    assert isinstance(rnshmc.RNSHMC.fitted_surrogates(res)[0], rnshmc.GaussianProcessSurrogate)
    assert res.stopping["reason"] == "converged" or res.ess().min() >= 300
    with pytest.raises(ValueError, match="not both"):
        rnshmc.sample(model, sampler=rnshmc.HMC(model), surrogate=dict(kind="gaussian_process"))


def test_a_singular_covariance_raises_the_noise_until_it_factorises(monkeypatch):
    """Where the covariance of all the points does not factorise with the noise found on a
    subset (repeated states, rounding in the squared distances), the fit raises the noise to
    1e-3, then 1e-2 times the signal sd, and says so in noise_sd_; beyond, a clear error.
    (The failure is simulated: a Cholesky factorisation that fails below a noise floor.)"""
    import rnshmc.gaussian_process as gp_module
    Q, t, test = data(8)
    factorise = gp_module.full_parts

    def fails_below(floor):
        def parts(Xs, y, signal, noise):
            if noise < floor * signal:
                raise np.linalg.LinAlgError("not positive definite")
            return factorise(Xs, y, signal, noise)
        return parts

    monkeypatch.setattr(gp_module, "full_parts", fails_below(5e-3))
    gp = rnshmc.GaussianProcessSurrogate(3, signal_sd=2.0, noise_sd=1e-6).fit(Q, t)
    assert gp.noise_sd_ == pytest.approx(2e-2)  # the second floor: 1e-2 x the signal sd
    assert np.all(np.isfinite(gp.predict(test)))
    monkeypatch.setattr(gp_module, "full_parts", fails_below(1.0))
    with pytest.raises(ValueError, match="not positive definite"):
        rnshmc.GaussianProcessSurrogate(3, signal_sd=2.0, noise_sd=1e-6).fit(Q, t)


def test_fitc_on_every_training_point_is_the_full_gp():
    """With all (distinct) training points as inducing points, FITC's covariance is the full
    GP's, so their searches and means agree, also at the tiny noise an exact potential
    drives the search to (where Sigma_M formed directly lost K_M in rounding)."""
    Q, t, test = data(9, n=80)
    Q = np.vstack([Q, Q[:20]])  # repeated states, as in a chain's history
    t = np.concatenate([t, t[:20]])
    full = rnshmc.GaussianProcessSurrogate(3, rng=rng_seed(0)).fit(Q, t)
    assert full.noise_sd_ < 1e-5 * full.signal_sd_
    fixed = dict(signal_sd=full.signal_sd_, noise_sd=full.noise_sd_,
                 lengthscale=full.lengthscales_)
    fitc = rnshmc.GaussianProcessSurrogate(3, sparse=True, n_inducing=200, rng=rng_seed(0),
                                           **fixed).fit(Q, t)
    assert fitc.n_hidden == 80 and fitc.noise_sd_ == full.noise_sd_  # (not raised)
    # (the two differ only by where the 1e-8 jitter sits: on K_N, or on K_M)
    np.testing.assert_allclose(fitc.predict(test), full.predict(test), rtol=1e-2)
    searched = rnshmc.GaussianProcessSurrogate(3, sparse=True, n_inducing=200,
                                               rng=rng_seed(0)).fit(Q, t)
    assert searched.log_marginal_likelihood_ > full.log_marginal_likelihood_ - 1.0


def test_repeated_points_count_once_and_fixed_lengthscales_reach_the_samplers():
    """A chain's history repeats rejected states: the GP fits the distinct points (the same
    surrogate as from them alone). A fixed lengthscale per coordinate is a valid sampler
    setting."""
    Q, t, test = data(10, n=50)
    repeated = np.vstack([Q, Q[:30], Q[:10]])
    values = np.concatenate([t, t[:30], t[:10]])
    once = rnshmc.GaussianProcessSurrogate(3, rng=rng_seed(0)).fit(Q, t)
    again = rnshmc.GaussianProcessSurrogate(3, rng=rng_seed(0)).fit(repeated, values)
    assert again.n_hidden == 50 and again.n_train_ == 90
    np.testing.assert_allclose(again.predict(test), once.predict(test), rtol=1e-6)
    model = rnshmc.models.Gaussian(np.zeros(3), covariance=np.eye(3))
    sampler = rnshmc.RNSHMC(model, surrogate=rnshmc.GaussianProcessSurrogate(
        3, lengthscale=[1.0, 2.0, 3.0], signal_sd=2.0))
    assert list(sampler.surrogate_settings.options["lengthscale"]) == [1.0, 2.0, 3.0]
