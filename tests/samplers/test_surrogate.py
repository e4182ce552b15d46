"""RandomNetworkSurrogate: activations, value/gradient/Hessian against NumPy references and
finite differences, the fit against the explicitly stacked least-squares system."""
import pickle
import warnings

import numpy as np
import pytest
from scipy.special import expit

import rnshmc
from rnshmc import RandomNetworkSurrogate
from rnshmc._kernels._surrogate import activations
from testkit import rng_seed

CONFIGS = [("additive", "softplus"), ("additive", "sigmoid"), ("additive", "tanh"),
           ("rbf", "softplus")]


# --------------------------------------------------------------------------------------------
# NumPy references


def reference_activation(name, x):
    """(a, a', a'') in closed form with SciPy's overflow-safe logistic function."""
    sig, sig_minus = expit(x), expit(-x)  # sigmoid(x) and 1 - sigmoid(x), both accurate
    if name == "softplus":
        return np.logaddexp(0, x), sig, sig * sig_minus
    if name == "sigmoid":
        return sig, sig * sig_minus, sig * sig_minus * (sig_minus - sig)
    if name == "tanh":
        t = np.tanh(x)
        slope = 4 * expit(2 * x) * expit(-2 * x)  # 1 - tanh^2, without cancellation
        return t, slope, -2 * t * slope
    e = np.exp(x)
    return e, e, e


def reference_parts(sur, q):
    """x(q), the pre-activations, d pre / d x (s, d) and d x / d q, from the fitted attributes."""
    L = sur.input_factor_
    x = q if L is None else np.linalg.solve(L, q - sur.input_mean_)
    dx_dq = np.eye(sur.dim) if L is None else np.linalg.inv(L)
    if sur.nodes == "additive":
        pre = sur.input_weights @ x + sur.biases
        dpre = sur.input_weights
    else:
        diff = x - sur.centres_
        pre = -0.5 * np.sum(diff ** 2, axis=1) / sur.widths_ ** 2
        dpre = -diff / sur.widths_[:, None] ** 2
    return x, pre, dpre, dx_dq


def reference_value_gradient_hessian(sur, q):
    x, pre, dpre, dx_dq = reference_parts(sur, q)
    a, a1, a2 = reference_activation(sur.activation, pre)
    v = sur.output_weights
    value = v @ a + sur.offset_
    grad_x = dpre.T @ (v * a1)
    hess_x = (dpre.T * (v * a2)) @ dpre
    if sur.nodes == "rbf":  # d^2 pre / dx^2 = -I / width^2
        hess_x -= np.eye(sur.dim) * np.sum(v * a1 / sur.widths_ ** 2)
    return value, dx_dq.T @ grad_x, dx_dq.T @ hess_x @ dx_dq


def training_data(rng, n=120, dim=3):
    Q = rng.standard_normal((n, dim)) * [0.5, 2.0, 1.0][:dim] + 0.3
    U = 0.5 * np.sum(Q ** 2, axis=1) + np.sin(Q[:, 0]) + 0.1 * Q[:, 1] ** 3 / 3
    G = Q.copy()
    G[:, 0] += np.cos(Q[:, 0])
    G[:, 1] += 0.1 * Q[:, 1] ** 2
    return Q, U, G


def fitted(nodes, activation, whiten, gradients=True, n_hidden=60, ridge=1e-6, seed=0):
    Q, U, G = training_data(np.random.default_rng(rng_seed(seed)))
    sur = RandomNetworkSurrogate(3, n_hidden, nodes=nodes, activation=activation, ridge=ridge,
                                 whiten=whiten, rng=rng_seed(seed))
    return sur.fit(Q, U, gradients=G if gradients else None, gradient_weight=0.3), Q, U, G


# --------------------------------------------------------------------------------------------
# activations


@pytest.mark.parametrize("name", ["softplus", "sigmoid", "tanh", "exp"])
def test_activations_against_closed_forms(name):
    x = np.concatenate([np.linspace(-30, 30, 2001), [-700.0, -40.0, 0.0, 1e-12, -1e-12]])
    if name != "exp":
        x = np.concatenate([x, [40.0, 700.0, 800.0, -800.0]])
    else:
        x = x[x <= 0]
    value, slope, curvature = activations(name, x, slopes=True, curvatures=True)
    ref = reference_activation(name, x)
    # relative accuracy, except near x = 0 where tanh and sigmoid'' are computed from
    # 1 - exp(-2|x|): there the error is absolute, ~1e-17 (harmless in a sum of units of O(1))
    for got, want in zip((value, slope, curvature), ref):
        np.testing.assert_allclose(got, want, rtol=2e-14, atol=1e-16)
    assert np.all(np.isfinite(value))


def test_softplus_value_accuracy_in_ulps():
    x = np.linspace(-700, 700, 400001)
    (value,) = activations("softplus", x)
    ref = np.logaddexp(0, x)
    assert np.max(np.abs(value - ref) / ref) < 1e-15


# --------------------------------------------------------------------------------------------
# value, gradient, Hessian


@pytest.mark.parametrize("nodes,activation", CONFIGS)
@pytest.mark.parametrize("whiten", [False, True])
def test_value_gradient_hessian_against_numpy(nodes, activation, whiten):
    sur, Q, _, _ = fitted(nodes, activation, whiten)
    rng = np.random.default_rng(rng_seed(5))
    for q in Q[:3] + 0.2 * rng.standard_normal((3, 3)):
        value, grad, hess = reference_value_gradient_hessian(sur, q)
        # z is a sum of terms v_i a_i and c larger than z (the constant is fitted): its
        # rounding error is relative to their magnitudes, not z's
        terms = np.abs(sur.output_weights) @ np.abs(
            reference_activation(sur.activation, reference_parts(sur, q)[1])[0])
        np.testing.assert_allclose(sur.potential(q), value, rtol=1e-12,
                                   atol=8 * np.finfo(float).eps * (terms + abs(sur.offset_)))
        np.testing.assert_allclose(sur.gradient(q), grad, rtol=1e-10, atol=1e-12 * np.abs(grad).max())
        U, g = sur.potential_and_gradient(q)
        assert U == sur.potential(q) and np.array_equal(g, sur.gradient(q))
        np.testing.assert_allclose(sur.hessian(q), hess, rtol=1e-9, atol=1e-11 * np.abs(hess).max())
        u = rng.standard_normal(3)  # the C Hessian-vector product (L2HMC's training uses it)
        hu = hess @ u
        np.testing.assert_allclose(sur._ctarget.eval_hessian_vector(q, u), hu, rtol=1e-9,
                                   atol=1e-11 * np.abs(hu).max())
        assert sur.log_density(q) == -U
        np.testing.assert_array_equal(sur.log_density_gradient(q)[1], -g)
    np.testing.assert_allclose(sur.predict(Q[:7]), [sur.potential(q) for q in Q[:7]], rtol=1e-14)


@pytest.mark.parametrize("nodes,activation", CONFIGS)
@pytest.mark.parametrize("whiten", [False, True])
def test_gradient_and_hessian_against_finite_differences(nodes, activation, whiten):
    sur, Q, _, _ = fitted(nodes, activation, whiten)
    q = Q[4] + 0.1
    h = 1e-5
    E = np.eye(3)
    fd_grad = np.array([(sur.potential(q + h * e) - sur.potential(q - h * e)) / (2 * h) for e in E])
    fd_hess = np.array([(sur.gradient(q + h * e) - sur.gradient(q - h * e)) / (2 * h) for e in E])
    grad, hess = sur.gradient(q), sur.hessian(q)
    np.testing.assert_allclose(grad, fd_grad, atol=1e-6 * max(1, np.abs(grad).max()))
    np.testing.assert_allclose(hess, fd_hess, atol=1e-5 * max(1, np.abs(hess).max()))
    np.testing.assert_array_equal(hess, hess.T)


# --------------------------------------------------------------------------------------------
# the fit


def stacked_solution(sur, Q, t, G, gradient_weight):
    """Output weights and constant (v, c) from numpy.linalg.lstsq on the explicitly stacked
    system [H 1; sqrt(gw) D 0; sqrt(ridge) I 0] (v, c) = [t; sqrt(gw) g; 0] (c unpenalised),
    built from the references."""
    rows, targets = [], []
    for q, tj in zip(Q, t):
        x, pre, dpre, dx_dq = reference_parts(sur, q)
        a, a1, _ = reference_activation(sur.activation, pre)
        rows.append(np.append(a, 1.0)[None, :])
        targets.append([tj])
    if G is not None:
        # misfits |L^T (grad z - g)| with L L^T the training inputs' covariance
        L = np.linalg.cholesky(np.cov(Q, rowvar=False))
        for q, g in zip(Q, G):
            x, pre, dpre, dx_dq = reference_parts(sur, q)
            _, a1, _ = reference_activation(sur.activation, pre)
            D = dx_dq.T @ (dpre * a1[:, None]).T  # d z / d q = D v
            rows.append(np.sqrt(gradient_weight) * np.hstack([L.T @ D, np.zeros((3, 1))]))
            targets.append(np.sqrt(gradient_weight) * L.T @ g)
    rows.append(np.sqrt(sur.ridge) * np.eye(sur.n_hidden, sur.n_hidden + 1))
    targets.append(np.zeros(sur.n_hidden))
    A, b = np.vstack(rows), np.concatenate(targets)
    return np.linalg.lstsq(A, b, rcond=None)[0], A, b


@pytest.mark.parametrize("nodes,activation", CONFIGS)
@pytest.mark.parametrize("whiten", [False, True])
@pytest.mark.parametrize("with_gradients", [False, True])
def test_fit_matches_lstsq_on_the_stacked_system(nodes, activation, whiten, with_gradients):
    sur, Q, U, G = fitted(nodes, activation, whiten, gradients=with_gradients, ridge=1e-3)
    v_ref, A, b = stacked_solution(sur, Q, U, G if with_gradients else None, 0.3)
    # compare the objective (the solution is unique, but conditioning limits the weights' match)
    objective = lambda v: np.sum((A @ v - b) ** 2)
    solution = np.append(sur.output_weights, sur.offset_)
    assert objective(solution) <= objective(v_ref) * (1 + 1e-9)
    np.testing.assert_allclose(solution, v_ref, rtol=1e-5, atol=1e-6 * np.abs(v_ref).max())
    assert sur.n_train_ == Q.shape[0]
    resid = np.sqrt(np.mean((sur.predict(Q) - U) ** 2))
    np.testing.assert_allclose(sur.fit_residual_, resid, rtol=1e-8)
    assert (sur.gradient_residual_ is not None) == with_gradients


def test_gradient_fit_improves_gradients():
    """With gradients in the fit, the surrogate's gradients at held-out points are closer: on
    every one of four seeds, and by 40% on average (the ratio of the errors was 0.17-0.67
    over seeds 0-39, 0.36 on average; 0.74 on one seed of the test's)."""
    ratios = []
    for seed in range(4):
        rng = np.random.default_rng(rng_seed(3 + 10 * seed))
        Q, U, G = training_data(rng, n=60)
        Qt, _, Gt = training_data(rng, n=200)
        errors = []
        for gw in (0.0, 1.0):
            sur = RandomNetworkSurrogate(3, 200, ridge=1e-6, rng=rng_seed(1 + 10 * seed),
                                         whiten=True)
            sur.fit(Q, U, gradients=G, gradient_weight=gw)
            errors.append(np.sqrt(np.mean([(sur.gradient(q) - g) ** 2
                                           for q, g in zip(Qt, Gt)])))
        ratios.append(errors[1] / errors[0])
    assert max(ratios) < 1 and np.mean(ratios) < 0.6, ratios


@pytest.mark.parametrize("ridge", [1e-6, 10.0])
def test_a_shift_of_the_targets_shifts_only_the_constant(ridge):
    """The constant is not penalised: the targets' shift (their minimum, for the numerics)
    does not change the weights, whatever the ridge."""
    sur, Q, U, _ = fitted("additive", "softplus", False, gradients=False, ridge=ridge)
    assert sur.target_shift_ == U.min()
    sur2 = RandomNetworkSurrogate(3, 60, ridge=ridge, rng=rng_seed(0)).fit(Q, U + 1000.0)
    np.testing.assert_allclose(sur2.predict(Q), sur.predict(Q) + 1000.0, rtol=1e-9)
    # (the predictions are well determined; their split between the weights and the
    # constant is not, at a small ridge: a rounding of the shifted targets moves both by up
    # to the system's condition number times it: 5e-9 of the constant, 2.4e-8 of the largest
    # weight, on some seeds)
    np.testing.assert_allclose(sur2.output_weights, sur.output_weights, rtol=1e-6,
                               atol=1e-7 * np.abs(sur.output_weights).max())
    np.testing.assert_allclose(sur2.offset_, sur.offset_ + 1000.0, rtol=1e-7)


def test_singular_system_falls_back_to_rank_revealing_lstsq():
    """ridge=0 with repeated points (a chain's history) and more units than distinct points:
    warn, and return the minimum-norm least-squares solution, which interpolates."""
    rng = np.random.default_rng(rng_seed(2))
    Q = np.repeat(rng.standard_normal((15, 2)), 3, axis=0)
    t = np.sum(Q ** 2, axis=1)
    sur = RandomNetworkSurrogate(2, 40, ridge=0.0, rng=rng_seed(0))
    with pytest.warns(RuntimeWarning, match="rank-revealing"):
        sur.fit(Q, t)
    H = reference_activation("softplus", Q @ sur.input_weights.T + sur.biases)[0]
    # the constant eliminated (c = mean(t - H v)), then the minimum-norm v: the limit of the
    # ridge solutions as the ridge goes to zero
    v_ref = np.linalg.lstsq(H - H.mean(axis=0), t - t.mean(), rcond=None)[0]
    np.testing.assert_allclose(sur.output_weights, v_ref, rtol=1e-6, atol=1e-8 * np.abs(v_ref).max())
    np.testing.assert_allclose(sur.offset_, np.mean(t - H @ v_ref), rtol=1e-6, atol=1e-8)
    assert sur.fit_residual_ < 1e-6


def test_regular_system_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fitted("additive", "softplus", True)


# --------------------------------------------------------------------------------------------
# the surrogate as a target; housekeeping


def test_surrogate_is_a_c_level_target_for_hmc():
    """HMC on a surrogate fitted to a standard normal samples (approximately) that normal."""
    rng = np.random.default_rng(rng_seed(0))
    Q = rng.standard_normal((2000, 2))
    sur = RandomNetworkSurrogate(2, 300, rng=rng_seed(0), whiten=True)
    sur.fit(Q, 0.5 * np.sum(Q ** 2, 1), Q)
    res = rnshmc.HMC(sur, step_size=0.5, n_steps=5).sample(2000, tune=100, rng=rng_seed(1),
                                                           progress=False)
    assert abs(res.samples.mean()) < 0.15 and abs(res.samples.std() - 1) < 0.1


@pytest.mark.parametrize("nodes, whiten", [("rbf", True), ("additive", True), ("additive", False)])
def test_pickle_and_state_round_trip(tmp_path, nodes, whiten):
    """Pickle, and get_state/from_state through an .npz file without pickle (checkpoints)."""
    sur, Q, _, _ = fitted(nodes, "softplus", whiten)
    clone = pickle.loads(pickle.dumps(sur))
    np.testing.assert_array_equal(clone.predict(Q), sur.predict(Q))
    rnshmc.SampleResult(state=sur.get_state()).save(tmp_path / "s.npz")
    rebuilt = RandomNetworkSurrogate.from_state(rnshmc.load(tmp_path / "s.npz")["state"])
    np.testing.assert_array_equal(rebuilt.predict(Q), sur.predict(Q))
    np.testing.assert_array_equal(rebuilt.gradient(Q[0]), sur.gradient(Q[0]))
    assert rebuilt.n_train_ == sur.n_train_ and rebuilt.fit_residual_ == sur.fit_residual_


def test_same_seed_same_network():
    a = RandomNetworkSurrogate(4, 10, rng=rng_seed(3))
    b = RandomNetworkSurrogate(4, 10, rng=np.random.default_rng(rng_seed(3)))
    np.testing.assert_array_equal(a.input_weights, b.input_weights)
    # the authors' draws: w ~ N(0, I/dim), d ~ N(0, 1)
    big = RandomNetworkSurrogate(16, 20000, rng=rng_seed(0))
    assert abs(big.input_weights.std() - 0.25) < 0.005 and abs(big.biases.std() - 1) < 0.02


@pytest.mark.parametrize("kwargs", [dict(dim=0), dict(dim=2.5), dict(n_hidden=0),
                                    dict(nodes="mlp"), dict(activation="relu"),
                                    dict(ridge=-1.0), dict(ridge=np.nan),
                                    dict(weight_scale=0.0)])
def test_bad_construction(kwargs):
    args = dict(dim=3, n_hidden=10)
    args.update(kwargs)
    with pytest.raises(ValueError):
        RandomNetworkSurrogate(**args)


def test_bad_fit_inputs_and_unfitted_use():
    sur = RandomNetworkSurrogate(3, 10, rng=rng_seed(0))
    with pytest.raises(RuntimeError, match="not fitted"):
        sur.potential(np.zeros(3))
    Q = np.random.default_rng(rng_seed(0)).standard_normal((20, 3))
    t = np.sum(Q ** 2, 1)
    with pytest.raises(ValueError, match="shape"):
        sur.fit(Q[:, :2], t)
    with pytest.raises(ValueError, match="shape"):
        sur.fit(Q, t[:-1])
    with pytest.raises(ValueError, match="shape"):
        sur.fit(Q, t, gradients=Q[:-1])
    bad = Q.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="finite"):
        sur.fit(bad, t)
    with pytest.raises(ValueError, match="finite"):
        sur.fit(Q, np.where(np.arange(20) == 2, np.inf, t))
    with pytest.raises(ValueError, match="finite"):
        sur.fit(Q, t, gradients=bad)
    with pytest.raises(ValueError, match="gradient_weight"):
        sur.fit(Q, t, gradients=Q, gradient_weight=-1)
    sur.fit(Q, t)
    with pytest.raises(ValueError, match="shape"):
        sur.potential(np.zeros(4))
    with pytest.raises(ValueError, match="shape"):
        sur.predict(np.zeros(3))
    with pytest.raises(ValueError, match="whiten"):
        RandomNetworkSurrogate(3, 10, whiten=True, rng=rng_seed(0)).fit(Q[:1], t[:1])


# --------------------------------------------------------------------------------------------
# degenerate fits: each either works or raises a ValueError saying why, never leaves NaN weights


def test_targets_too_wide_to_fit_raise():
    """Finite targets spanning +-1e308: their differences from the minimum overflow (the fit
    used to return NaN weights silently)."""
    Q = np.random.default_rng(rng_seed(0)).standard_normal((20, 3))
    t = np.where(np.arange(20) % 2 == 0, 1e308, -1e308)
    for nodes in ("additive", "rbf"):
        with pytest.raises(ValueError, match="targets span .* too wide to fit"):
            RandomNetworkSurrogate(3, 10, nodes=nodes, rng=rng_seed(0)).fit(Q, t)


@pytest.mark.parametrize("nodes", ["additive", "rbf"])
@pytest.mark.parametrize("whiten,with_gradients", [(True, False), (True, True), (False, True)])
def test_identical_points_cannot_be_whitened(nodes, whiten, with_gradients):
    """Identical points have a zero covariance: whitening (or the gradient misfits' metric)
    is impossible. It used to be 'regularised' by an absolute jitter 1e-300, whose factor
    1e-150 blew the mean's rounding errors up into inputs ~1e133: NaN weights with RBF units."""
    Q = np.full((10, 3), 0.1)
    sur = RandomNetworkSurrogate(3, 20, nodes=nodes, whiten=whiten, ridge=1e-6, rng=rng_seed(0))
    with pytest.raises(ValueError, match=r"singular covariance \(all 10 points are identical\)"):
        sur.fit(Q, np.full(10, 2.0), gradients=np.ones_like(Q) if with_gradients else None)
    with pytest.raises(ValueError, match="at least two points"):
        sur.fit(Q[:1], [2.0], gradients=np.ones((1, 3)) if with_gradients else None)


@pytest.mark.parametrize("case, kwargs, scale, match", [
    # normal equations overflowed to inf, and the fit was garbage (constant), silently
    ("additive, huge inputs", {}, 1e200, "normal equations overflow"),
    ("additive, huge weights", dict(weight_scale=1e300), 1.0, "normal equations overflow"),
    # the RBF widths overflowed: NaN weights
    ("rbf, huge inputs", dict(nodes="rbf"), 1e200, "hidden units are not finite"),
    ("rbf, tiny widths", dict(nodes="rbf", weight_scale=1e300), 1.0, "hidden units are not finite"),
    # the covariance overflowed (a SciPy 'array must not contain infs or NaNs' error)
    ("whitened, huge inputs", dict(whiten=True), 1e200, "covariance overflows"),
    # the covariance underflowed to zero
    ("whitened, tiny spread", dict(whiten=True), 1e-200, "singular covariance"),
])
def test_overflowing_fits_raise(case, kwargs, scale, match):
    Q, U, _ = training_data(np.random.default_rng(rng_seed(0)), n=20)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(ValueError, match=match):
            RandomNetworkSurrogate(3, 10, rng=rng_seed(0), **kwargs).fit(Q * scale, U)


def test_nonfinite_solution_raises_and_keeps_the_previous_fit(monkeypatch):
    """The safety net after the solve, and a failed fit leaves the previous one intact."""
    sur, Q, U, _ = fitted("rbf", "softplus", True, gradients=False)
    before = sur.predict(Q), sur.output_weights, sur.centres_
    monkeypatch.setattr(sur, "_solve", lambda normal, *args: np.full(len(normal), np.nan))
    with pytest.raises(ValueError, match="non-finite output weights"):
        sur.fit(Q, U)
    np.testing.assert_array_equal(sur.predict(Q), before[0])
    assert sur.output_weights is before[1] and sur.centres_ is before[2]


@pytest.mark.parametrize("nodes", ["additive", "rbf"])
def test_degenerate_fits_that_work(nodes):
    rng = np.random.default_rng(rng_seed(0))
    Q = rng.standard_normal((20, 3))
    # one point, or identical points, without whitening or gradients: the constant (five
    # copies of this point had a standard deviation of 1e-16 in one coordinate, not 0, with
    # NumPy 2.4 on x86-64: RBF widths of that size overflowed the units)
    point = np.array([[0.345584192064786, 0.8216181435011584, 0.33043707618338714]])
    for train in (Q[:1], np.repeat(Q[:1], 5, axis=0), np.repeat(point, 5, axis=0)):
        sur = RandomNetworkSurrogate(3, 10, nodes=nodes, rng=rng_seed(0))
        sur.fit(train, np.full(len(train), 4.0))
        np.testing.assert_allclose(sur.predict(Q), 4.0)
    # equal targets, whitened, with zero gradients: the constant, all weights zero
    sur = RandomNetworkSurrogate(3, 10, nodes=nodes, whiten=True, rng=rng_seed(0))
    sur.fit(Q, np.full(20, 5.0), gradients=np.zeros_like(Q))
    np.testing.assert_array_equal(sur.output_weights, 0.0)
    np.testing.assert_array_equal(sur.predict(Q), 5.0)
    assert sur.fit_residual_ == 0.0 and sur.gradient_residual_ == 0.0


def test_residuals_do_not_overflow():
    """Targets spanning 1e160 fit fine; their RMS misfit used to overflow to inf in the squares."""
    Q, U, G = training_data(np.random.default_rng(rng_seed(0)), n=30)
    sur = RandomNetworkSurrogate(3, 20, rng=rng_seed(0)).fit(Q, 1e160 * U, 1e160 * G)
    rms = 1e160 * np.sqrt(np.mean(((sur.predict(Q) - 1e160 * U) / 1e160) ** 2))
    np.testing.assert_allclose(sur.fit_residual_, rms, rtol=1e-6)
    assert np.isfinite(sur.gradient_residual_) and sur.gradient_residual_ > 0


@pytest.mark.parametrize("arg, value, match", [
    ("Q", "abc", "Q must be an array of real numbers"),
    ("Q", [[1.0, 2.0, 3.0], [4.0]], "Q must be an array of real numbers"),
    ("Q", np.ones((4, 3)) + 1j, "Q must be .* real .* complex"),  # was: imaginary part dropped
    ("t", np.ones(4) * 1j, "t must be .* real .* complex"),
    ("gradients", np.full((4, 3), "x"), "gradients must be an array of real numbers"),
])
def test_fit_inputs_that_are_not_real_numbers(arg, value, match):
    args = dict(Q=np.random.default_rng(rng_seed(0)).standard_normal((4, 3)), t=np.arange(4.0),
                gradients=None)
    args[arg] = value
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no ComplexWarning: an error instead
        with pytest.raises(ValueError, match=match):
            RandomNetworkSurrogate(3, 10, rng=rng_seed(0)).fit(**args)
