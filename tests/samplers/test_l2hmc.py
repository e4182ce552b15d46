"""L2HMC's augmented leapfrog: zero heads are the leapfrog, the backward operator is
the exact inverse, the log-Jacobian is log |det| of the map, and a chain with any fixed weights
is exact because its acceptance test includes that log-Jacobian."""
import warnings

import numpy as np
import pytest

import rnshmc

from rnshmc import papers
from rnshmc._kernels._chain import TRANSITION
from rnshmc._kernels._l2hmc import AugmentedLeapfrog, parameter_layout
from rnshmc._kernels._metrics import EuclideanMetric
from rnshmc._kernels._transition import Chain
from rnshmc.models import Gaussian
from rnshmc.targets import as_ctarget

from testkit import (batch_means_within_mcse, check_renamed, correlated_gaussian,
                     covariance_within_mcse, mean_within_mcse, rng_seed)


def gaussian(dim, seed=0):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((dim, dim))
    return Gaussian(rng.standard_normal(dim), covariance=A @ A.T / dim + 0.5 * np.eye(dim))


def random_masks(rng, n_steps, dim):
    half = [1.0] * (dim // 2) + [0.0] * (dim - dim // 2)
    return np.array([rng.permutation(half) for _ in range(n_steps)])


def integrator(dim, n_steps=4, hidden=6, scale=0.5, eps=0.2, seed=0):
    """An AugmentedLeapfrog with random weights of the given scale (log eps = log(eps))."""
    rng = np.random.default_rng(seed)
    params = scale * rng.standard_normal(parameter_layout(dim, hidden)["size"])
    params[0] = np.log(eps)
    return AugmentedLeapfrog(dim, n_steps, hidden, params, random_masks(rng, n_steps, dim))


@pytest.mark.parametrize("dim", [1, 2, 5])
def test_zero_heads_are_the_leapfrog(dim):
    model = gaussian(dim)
    n_steps, eps = 7, 0.15
    params = np.zeros(parameter_layout(dim, 4)["size"])
    params[0] = np.log(eps)
    rng = np.random.default_rng(rng_seed(1))
    step = AugmentedLeapfrog(dim, n_steps, 4, params, random_masks(rng, n_steps, dim))
    x, v = rng.standard_normal(dim), rng.standard_normal(dim)
    for direction in (1, -1):
        x_end, v_end, log_jacobian, U, diverged = step.apply(as_ctarget(model), x, v, direction)
        q, p = x.copy(), v.copy()
        for _ in range(n_steps):  # the leapfrog is its own inverse up to the momentum sign
            p -= direction * 0.5 * eps * model.precision @ (q - model.mean)
            q += direction * eps * p
            p -= direction * 0.5 * eps * model.precision @ (q - model.mean)
        np.testing.assert_allclose(x_end, q, rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(v_end, p, rtol=1e-13, atol=1e-13)
        assert log_jacobian == 0.0 and not diverged
        assert U == pytest.approx(model.potential(q), rel=1e-13)


@pytest.mark.parametrize("dim", [1, 3, 5])
@pytest.mark.parametrize("seed", [0, 1])
def test_backward_inverts_forward(dim, seed):
    model = as_ctarget(gaussian(dim, seed))
    step = integrator(dim, seed=seed)
    rng = np.random.default_rng(seed + 10)
    x, v = rng.standard_normal(dim), rng.standard_normal(dim)
    for direction in (1, -1):
        x1, v1, ld1, _, _ = step.apply(model, x, v, direction)
        assert np.abs(x1 - x).max() > 1e-3  # it moved
        x2, v2, ld2, _, _ = step.apply(model, x1, v1, -direction)
        np.testing.assert_allclose(x2, x, rtol=0, atol=1e-12)
        np.testing.assert_allclose(v2, v, rtol=0, atol=1e-12)
        assert ld2 == pytest.approx(-ld1, abs=1e-12)


@pytest.mark.parametrize("dim", [1, 2, 5])
@pytest.mark.parametrize("direction", [1, -1])
def test_log_jacobian_is_log_det_of_the_map(dim, direction):
    """Against log |det| of a central-difference Jacobian of (x, v) -> (x', v'), at five
    random points."""
    model = as_ctarget(gaussian(dim))
    step = integrator(dim, scale=0.7)
    rng = np.random.default_rng(rng_seed(3))

    def F(w):
        x, v, *_ = step.apply(model, w[:dim], w[dim:], direction)
        return np.concatenate([x, v])

    h = 1e-6
    largest = 0.0
    for z in rng.standard_normal((5, 2 * dim)):
        J = np.array([(F(z + h * e) - F(z - h * e)) / (2 * h) for e in np.eye(2 * dim)]).T
        log_jacobian = step.apply(model, z[:dim], z[dim:], direction)[2]
        assert log_jacobian == pytest.approx(np.linalg.slogdet(J)[1], abs=1e-6)
        largest = max(largest, abs(log_jacobian))
    assert largest > 0.05  # volume changes: the test has something to check


def test_parameters_are_read_in_place():
    """A trainer updates the flat vector; the next trajectory uses the new weights."""
    dim = 3
    model = as_ctarget(gaussian(dim))
    layout = parameter_layout(dim, 6)
    vector = np.zeros(layout["size"])
    vector[0] = np.log(0.2)
    step = AugmentedLeapfrog(dim, 4, 6, vector, np.array([[1.0, 0.0, 1.0]] * 4))
    x, v = np.ones(dim), np.zeros(dim)
    before = step.apply(model, x, v, 1)[0]
    offset, _ = layout["V.bT"]
    vector[offset:offset + dim] = 1.0  # the V-network's T head: a constant push on v
    after = step.apply(model, x, v, 1)[0]
    assert np.abs(after - before).max() > 1e-3
    assert step.step_size == pytest.approx(0.2)


def test_bad_inputs():
    layout = parameter_layout(2, 3)
    good = np.zeros(layout["size"])
    masks = np.array([[1.0, 0.0]] * 4)
    with pytest.raises(ValueError, match="entries"):
        AugmentedLeapfrog(2, 4, 3, np.zeros(layout["size"] + 1), masks)
    with pytest.raises(TypeError, match="float64"):
        AugmentedLeapfrog(2, 4, 3, good.astype(np.float32), masks)
    with pytest.raises(ValueError, match="masks"):
        AugmentedLeapfrog(2, 4, 3, good, masks[:3])
    with pytest.raises(ValueError, match="masks"):
        AugmentedLeapfrog(2, 4, 3, good, masks * 0.5)
    step = AugmentedLeapfrog(2, 4, 3, good, masks)
    with pytest.raises(ValueError, match="direction"):
        step.apply(as_ctarget(gaussian(2)), np.zeros(2), np.zeros(2), 0)


def l2hmc_chain_draws(model, step, n, seed):
    chain = Chain(as_ctarget(model), metric=EuclideanMetric(model.dim), integrator=step)
    chain.set_position(model.mean)
    chain.step_size = step.step_size  # recorded only: the integrator uses its own eps
    samples, records = np.empty((n, model.dim)), np.empty(n, TRANSITION)
    chain.run(np.random.default_rng(seed), n, step.T, False, samples, records)
    return samples, records


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_untrained_l2hmc_chain_is_exact(seed):
    """Random (untrained) weights that change volume: the chain, whose test adds the
    log-Jacobian and draws the direction, keeps the correlated Gaussian's mean and covariance
    within Monte Carlo error."""
    cov = np.array([[1.0, 0.9], [0.9, 1.0]])
    model = Gaussian(np.array([0.5, -1.0]), covariance=cov)
    step = integrator(2, n_steps=5, hidden=10, scale=0.3, eps=0.3, seed=seed)
    samples, records = l2hmc_chain_draws(model, step, 20000, seed)
    assert 0.2 < records["accepted"].mean() < 0.95
    z, tol = mean_within_mcse(samples[None], model.mean)
    assert np.all(np.abs(z) < tol), z
    z, tol = covariance_within_mcse(samples[None], model.mean, cov)
    assert np.all(np.abs(z) < tol), z


def test_without_the_log_jacobian_the_chain_would_be_biased():
    """Power of the check above: the same proposals judged without the log-Jacobian (a
    Metropolis loop in Python over the integrator) fail it."""
    cov = np.array([[1.0, 0.9], [0.9, 1.0]])
    model = Gaussian(np.array([0.5, -1.0]), covariance=cov)
    step = integrator(2, n_steps=5, hidden=10, scale=0.3, eps=0.3, seed=0)
    target = as_ctarget(model)
    rng = np.random.default_rng(rng_seed(0))
    x, U = model.mean.copy(), model.potential(model.mean)
    out = np.empty((20000, 2))
    for i in range(len(out)):
        v = rng.standard_normal(2)
        direction = 1 if rng.random() < 0.5 else -1
        x1, v1, _, U1, diverged = step.apply(target, x, v, direction)
        if not diverged and np.log(rng.random()) < U + 0.5 * v @ v - U1 - 0.5 * v1 @ v1:
            x, U = x1, U1
        out[i] = x
    z_mean, tol = mean_within_mcse(out[None], model.mean)
    z_cov, _ = covariance_within_mcse(out[None], model.mean, cov)
    assert np.max(np.abs(np.concatenate([z_mean, np.ravel(z_cov)]))) > tol


# ---------------------------------------------------------------------------------------------
# training: the hand-written gradient of the loss


def finite_difference_gradient(trainer, params, target, x, v, directions, h=1e-6):
    gradient = np.empty_like(params)
    for i in range(params.size):
        old = params[i]
        params[i] = old + h
        up = trainer.loss_and_gradient(target, x, v, directions)[0]
        params[i] = old - h
        down = trainer.loss_and_gradient(target, x, v, directions)[0]
        params[i] = old
        gradient[i] = (up - down) / (2 * h)
    return gradient


def rough_well_3d():
    from rnshmc.models import RoughWell
    return RoughWell(dim=3, eta=0.5)


def quartic_callable():
    import rnshmc  # a Python callable: the Hessian-vector product by differences of gradients
    return rnshmc.Target(lambda q: -0.25 * np.sum(q ** 4) - 0.5 * q @ q,
                         lambda q: -q ** 3 - q, dim=3)


@pytest.mark.parametrize("dim,make,tol", [
    (1, lambda: gaussian(1), 1e-7), (3, lambda: gaussian(3, 1), 1e-7),
    (3, rough_well_3d, 1e-7), (3, quartic_callable, 1e-5)])
@pytest.mark.parametrize("seed", [0, 1])
def test_loss_gradient_matches_finite_differences(dim, make, tol, seed):
    """Every weight and log eps, both directions, accepted (A = 1) and partly accepted
    (A < 1) trajectories, through grad U (analytic Hessian-vector products, or differences of
    gradients for a Python callable)."""
    from rnshmc._kernels._l2hmc import Trainer
    rng = np.random.default_rng(seed)
    n_steps, hidden = 3, 4
    params = 0.3 * rng.standard_normal(parameter_layout(dim, hidden)["size"])
    params[0] = np.log(0.4)
    trainer = Trainer(dim, n_steps, hidden, params, random_masks(rng, n_steps, dim))
    target = as_ctarget(make())
    x = rng.standard_normal((10, dim))
    v = np.linspace(0.05, 2.5, 10)[:, None] * rng.standard_normal((10, dim))
    directions = np.array([1, -1] * 5)
    loss, gradient, accept, _ = trainer.loss_and_gradient(target, x, v, directions)
    assert accept.min() < 1.0 and accept.max() == 1.0  # both branches of min(1, .)
    reference = finite_difference_gradient(trainer, params, target, x, v, directions)
    assert np.abs(gradient).max() > 0.1
    np.testing.assert_allclose(gradient, reference, rtol=0,
                               atol=tol * max(1.0, np.abs(reference).max()))


def test_transformed_target_is_the_tempered_potential_in_standardised_coordinates():
    """U_z(z) = beta U(shift + scale z): its gradient and Hessian-vector product by the chain
    rule, against the Gaussian's closed forms."""
    from rnshmc._kernels._l2hmc import TransformedTarget
    model = gaussian(3)
    shift, scale = np.array([0.5, -1.0, 2.0]), np.array([2.0, 0.5, 1.5])
    for transformed, a, b in ((TransformedTarget(as_ctarget(model)), np.zeros(3), np.ones(3)),
                              (TransformedTarget(as_ctarget(model), shift, scale), shift, scale)):
        transformed.inverse_temperature = 0.25
        z, u = np.array([0.3, -0.2, 1.0]), np.arange(3.0)
        x = a + b * z
        assert transformed.eval_potential(z) == pytest.approx(0.25 * model.potential(x), rel=1e-14)
        np.testing.assert_allclose(transformed.eval_gradient(z),
                                   0.25 * b * (model.precision @ (x - model.mean)), rtol=1e-13)
        np.testing.assert_allclose(transformed.eval_hessian_vector(z, u),
                                   0.25 * b * (model.precision @ (b * u)), rtol=1e-12)
    with pytest.raises(ValueError, match="scale"):
        TransformedTarget(as_ctarget(model), shift, -scale)


def test_the_wall_confines_and_its_derivatives_match_differences():
    from rnshmc._kernels._l2hmc import TransformedTarget
    model = gaussian(3)
    walled = TransformedTarget(as_ctarget(model), np.zeros(3), np.ones(3), wall=1.5)
    walled.inverse_temperature = 0.5
    z = np.array([2.5, -0.3, -3.0])  # outside in coordinates 0 and 2
    inside = 0.5 * model.potential(z)
    assert walled.eval_potential(z) == pytest.approx(inside + 0.5 * 0.5 * (1.0 ** 2 + 1.5 ** 2))
    h, u = 1e-6, np.array([0.3, 1.0, -0.7])
    for point in (z, np.array([0.2, 0.1, -0.4])):
        grad = np.array([(walled.eval_potential(point + h * e) - walled.eval_potential(point - h * e))
                         / (2 * h) for e in np.eye(3)])
        np.testing.assert_allclose(walled.eval_gradient(point), grad, rtol=1e-7, atol=1e-8)
        hv = (walled.eval_gradient(point + h * u) - walled.eval_gradient(point - h * u)) / (2 * h)
        np.testing.assert_allclose(walled.eval_hessian_vector(point, u), hv, rtol=1e-6, atol=1e-8)


# ---------------------------------------------------------------------------------------------
# the sampler


def test_untrained_sampler_is_hmc_step_for_step():
    """Heads at zero: each transition is the leapfrog run forwards or backwards in time (the
    direction drawn after the momentum) and HMC's Metropolis test, replayed here in NumPy from
    the chain's own random stream."""
    import rnshmc
    model = gaussian(3, 2)
    l2 = rnshmc.L2HMC(model, n_steps=6, step_size=0.6).initialize(rng_seed(0))
    heads = [k for k in l2.weights() if k.split(".")[-1] in ("WS", "WQ", "WT")]
    for key in heads:
        l2.weights()[key][...] = 0.0
    start = np.array([0.5, -0.5, 1.0])
    res = l2.sample(50, tune=0, rng=rng_seed(4), init=start, progress=False)
    stream = np.random.default_rng(rng_seed(4)).spawn(1)[0]
    q, P = start.copy(), model.precision
    U = lambda z: 0.5 * (z - model.mean) @ P @ (z - model.mean)
    for i in range(50):
        p = stream.standard_normal(3)
        eps = 0.6 if stream.random() < 0.5 else -0.6
        qn, pn = q.copy(), p.copy()
        for _ in range(6):
            pn -= 0.5 * eps * P @ (qn - model.mean)
            qn += eps * pn
            pn -= 0.5 * eps * P @ (qn - model.mean)
        dH = U(qn) + 0.5 * pn @ pn - U(q) - 0.5 * p @ p
        if stream.random() < min(1.0, np.exp(-dH)):
            q = qn
        np.testing.assert_allclose(res.samples[0, i], q, rtol=1e-11, atol=1e-11)
    assert 0 < res.accepted.mean() < 1


@pytest.fixture(scope="module")
def trained_on_correlated():
    """L2HMC trained briefly on a strongly correlated 2-d Gaussian (variances 10 and 0.1)."""
    import rnshmc
    cov = np.array([[5.05, -4.95], [-4.95, 5.05]])
    model = Gaussian(np.array([1.0, -1.0]), covariance=cov)
    l2 = rnshmc.L2HMC(model, n_steps=5, step_size=0.1).initialize(rng_seed(0))
    l2.train(300, chains=50, rng=rng_seed(1), learning_rate=3e-3, progress=False)
    return model, cov, l2


def test_training_lowers_the_loss_and_moves_the_weights(trained_on_correlated):
    _, _, l2 = trained_on_correlated
    loss = l2.history["loss"]
    assert loss.shape == (300,) and np.all(np.isfinite(loss))
    assert loss[-50:].mean() < loss[:50].mean() - 1.0
    assert l2.step_size != pytest.approx(0.1)
    assert np.abs(l2.weights()["X.WT"]).max() > 1e-2  # heads left zero
    # per iteration 2 x 50 trajectories (chains and burn-in term) of 5 steps: a gradient per
    # step, and at the start of a burn-in one (a chain's start reuses the gradient of its
    # accepted proposal: evaluated only at the first iteration and after a recovery's
    # restore of the chains, at most 3); a Hessian-vector product per step (none if it
    # diverged)
    evals = l2.training_evals
    assert 0.99 * 300 * 50 * 11 <= evals["gradient"] <= 300 * 50 * 11 + 4 * 50
    assert 0.99 * 300 * 100 * 5 <= evals["hessian_vector"] <= 300 * 100 * 5
    assert evals["seconds"] > 0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_trained_sampler_is_exact(seed, trained_on_correlated):
    model, cov, l2 = trained_on_correlated
    res = l2.sample(6000, tune=200, chains=2, rng=seed, progress=False)
    assert 0.2 < res.acceptance_rate.mean() < 0.99
    z, tol = mean_within_mcse(res.samples, model.mean)
    assert np.all(np.abs(z) < tol), z
    z, tol = covariance_within_mcse(res.samples, model.mean, cov)
    assert np.all(np.abs(z) < tol), z


def rough_well_variance(model):
    """Var q_i of the rough well: its density factorises over the coordinates, so one
    1-d sum on a grid fine against the ripples (period 2 pi eta or 2 pi eta^2)."""
    x = np.linspace(-12.0, 12.0, 2_000_001)
    period = model.eta if model.ripple == "paper" else model.eta ** 2
    weight = np.exp(-(0.5 * x * x + model.eta * np.cos(x / period)))
    return float(weight @ (x * x) / weight.sum())


# The paper's four toy energies, each trained briefly with the paper's sampler settings: the
# ICG at lambda 10 (at the reference lambda 0.1 training collapses), the mixture the whole
# reference training with the temperature annealed, so that it switches modes. Each returns
# the model, the true means and the true variances.
FOUR_ENERGIES = {
    "correlated": (papers.L2HMC_TARGETS["correlated"][1], dict(n_iterations=500)),
    "ill": (papers.L2HMC_TARGETS["ill"][1], dict(n_iterations=500, scale=10.0)),
    "rough": (papers.L2HMC_TARGETS["rough"][1], dict(n_iterations=500)),
    "mixture": (papers.L2HMC_MIXTURE["model"],
                dict(n_iterations=5000, chains=200,
                     temperature=papers.L2HMC_MIXTURE["temperature"])),
}


@pytest.mark.slow
@pytest.mark.parametrize("energy", list(FOUR_ENERGIES))
def test_trained_sampler_is_exact_on_the_papers_four_energies(energy):
    """Means and variances within Monte Carlo error (batch means: the trained maps of the
    mixture and the ICG are near antithetic) for two sampling seeds."""
    make, training = FOUR_ENERGIES[energy]
    model = make()
    if energy == "rough":
        mean, variance = np.zeros(model.dim), np.full(model.dim, rough_well_variance(model))
    else:
        mean, variance = model.mean, np.diag(model.covariance)
    sampler = papers.l2hmc(model).initialize(rng_seed(0))
    sampler.train(**{"chains": 100, **training}, rng=rng_seed(1), progress=False)
    draws = 20000 if energy == "ill" else 4000  # the ICG's widest coordinate mixes slowly
    for seed in (0, 1):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", rnshmc.diagnostics.SamplingWarning)
            res = sampler.sample(draws, tune=200, chains=4, rng=seed, progress=False)
        assert 0.2 < res.acceptance_rate.mean() < 0.99
        z, tol = batch_means_within_mcse(res.samples, mean)
        assert np.all(np.abs(z) < tol), (seed, "mean", z)
        z, tol = batch_means_within_mcse((res.samples - mean) ** 2, variance)
        assert np.all(np.abs(z) < tol), (seed, "variance", z)
        if energy == "mixture":  # half the time in each mode, and every chain switches
            in_right_mode = (res.samples[..., :1] > 0).astype(float)
            z, tol = batch_means_within_mcse(in_right_mode, 0.5)
            assert abs(z[0]) < tol, (seed, "mode", z)
            assert np.all(np.abs(in_right_mode.mean(axis=(1, 2)) - 0.5) < 0.2)


def test_saved_weights_reload_to_identical_draws(tmp_path, trained_on_correlated):
    import rnshmc
    model, _, l2 = trained_on_correlated
    path = tmp_path / "l2hmc.npz"
    l2.save(path)
    again = rnshmc.L2HMC.load(path, model)
    np.testing.assert_array_equal(again.parameters, l2.parameters)
    np.testing.assert_array_equal(again.masks, l2.masks)
    assert again.training_evals == pytest.approx(l2.training_evals)
    for key in l2.history:
        np.testing.assert_array_equal(again.history[key], l2.history[key])
    a = l2.sample(300, tune=10, rng=rng_seed(5), progress=False)
    b = again.sample(300, tune=10, rng=rng_seed(5), progress=False)
    np.testing.assert_array_equal(a.samples, b.samples)
    # and training continues from the saved Adam state alike
    l2_copy = rnshmc.L2HMC.load(path, model)
    l2_copy.train(5, chains=8, rng=rng_seed(9), progress=False)
    again.train(5, chains=8, rng=rng_seed(9), progress=False)
    np.testing.assert_array_equal(again.parameters, l2_copy.parameters)


def test_load_refuses_other_files_and_dimensions(tmp_path, trained_on_correlated):
    import rnshmc
    model, _, l2 = trained_on_correlated
    path = tmp_path / "w.npz"
    l2.save(path)
    with pytest.raises(ValueError, match="dim"):
        rnshmc.L2HMC.load(path, gaussian(3))
    other = tmp_path / "other.npz"
    np.savez(other, a=np.zeros(3))
    with pytest.raises(ValueError, match="not an rnshmc L2HMC"):
        rnshmc.L2HMC.load(other, model)
    broken = tmp_path / "broken.npz"
    broken.write_bytes(b"not a zip file")
    with pytest.raises(ValueError, match="readable"):
        rnshmc.L2HMC.load(broken, model)


def test_a_chain_continues_only_with_its_own_weights():
    import rnshmc
    model = gaussian(2)
    l2 = rnshmc.L2HMC(model, n_steps=3).initialize(rng_seed(0))
    states = l2.init_states(draws=20, tune=0, rng=rng_seed(1))
    l2.run_states(states, progress=False, stop_after=10)
    l2.train(2, chains=4, rng=rng_seed(0), progress=False)
    with pytest.raises(ValueError, match="other L2HMC weights"):
        l2.run_states(states, progress=False)


def test_sampler_bad_inputs():
    import rnshmc
    model = gaussian(2)
    with pytest.raises(ValueError, match="step_size"):
        rnshmc.L2HMC(model, step_size=-1.0)
    with pytest.raises(ValueError, match="net_width"):
        rnshmc.L2HMC(model, net_width=0)
    l2 = rnshmc.L2HMC(model).initialize(rng_seed(0))
    with pytest.raises(ValueError, match="chains"):
        l2.train(5, chains=0)
    with pytest.raises(ValueError, match="dim"):
        l2.train(5, chains=2, target=gaussian(3), progress=False)
    with pytest.raises(ValueError, match="non-finite"):
        l2.train(5, chains=2, init=np.array([np.nan, 0.0]), progress=False)


# ---------------------------------------------------------------------------------------------
# L2HMC on a surrogate: trained without the model, exact through the test on the model

POOR_SURROGATE = dict(n_hidden=15, surrogate=dict(gradient_weight=0.0, whiten=False,
                                                  training_data="states"))


@pytest.fixture(scope="module")
def on_poor_surrogate():
    """L2HMC trained on a deliberately poor 15-unit surrogate of a 4-d correlated Gaussian."""
    import rnshmc
    model, mean, cov = correlated_gaussian()
    l2 = rnshmc.L2HMC.with_surrogate(model, tune=300, rng=rng_seed(0), progress=False, n_steps=5,
                                     rns_options=POOR_SURROGATE)
    l2.train(300, chains=50, rng=rng_seed(1), learning_rate=3e-3, progress=False)
    return model, mean, cov, l2


@pytest.mark.filterwarnings("ignore:.*no proposal of the sampling phase was accepted")
@pytest.mark.parametrize("seed", [2, 3])
def test_l2hmc_on_a_poor_surrogate_is_exact(seed, on_poor_surrogate):
    """200 independent chains of 200 draws, each started from an exact draw: a kernel that
    keeps the posterior keeps every chain's expectations, and the spread of the chain means
    gives an honest Monte Carlo error. (A long chain would not: on the poor surrogate it
    sticks for hundreds of iterations in the tails, and autocorrelation estimates of its
    error were too small there, |z| up to 4.5 on single 10000-draw runs.)"""
    model, mean, cov, l2 = on_poor_surrogate
    assert l2.exploration["fit_residual"] > 0.05  # the surrogate really is poor
    rng = np.random.default_rng(100 + seed)
    init = mean + rng.standard_normal((200, 4)) @ np.linalg.cholesky(cov).T
    res = l2.sample(200, tune=0, chains=200, rng=seed, init=init, progress=False)
    # (the chains move, and the test rejects some: 0.45-0.87 at seed offsets 0-3)
    assert 0.2 < res.acceptance_rate.mean() < 0.95
    centred = res.samples - mean
    functions = np.concatenate([res.samples, centred ** 2, centred[..., :1] * centred[..., 3:]],
                               axis=-1)
    truth = np.concatenate([mean, np.diag(cov), [cov[0, 3]]])
    per_chain = functions.mean(axis=1)
    z = (per_chain.mean(axis=0) - truth) / (per_chain.std(axis=0, ddof=1) / np.sqrt(200))
    assert np.all(np.abs(z) < 4.0), z


def check_learned_and_exact_counts(res, n_steps, tune):
    """One exact density per iteration on the learned dynamics and no exact gradient; exact
    HMC's after a fallback (the switch evaluates the gradient once); every chain on the
    surrogate until its first poor window, exact HMC from there on. (The initial state costs
    one density and one surrogate gradient; the warm-up one density per iteration.)"""
    exact, steps = res.exact_dynamics, res.n_steps
    # (the switch evaluates the gradient once, and the step size's re-adaptation there its own)
    switched = res.fallback.astype(int) + np.array(
        [sum(e.get("rewarm_evals", [0, 0])[1] for e in events) for events in res.trust_events])
    np.testing.assert_array_equal(res.n_gradient_evals, np.sum(steps * exact, axis=1) + switched)
    np.testing.assert_array_equal(res.n_density_evals_sampling,
                                  np.sum(~exact, axis=1) + res.n_gradient_evals)
    np.testing.assert_array_equal(res.n_density_evals,
                                  res.n_density_evals_sampling + tune + 1)
    np.testing.assert_array_equal(res.n_surrogate_gradient_evals,
                                  (tune + np.sum(~exact, axis=1)) * n_steps + 1)
    for chain, events in enumerate(res.trust_events):
        first = events[0]["iteration"] if events else exact.shape[1]
        assert not exact[chain, :first].any() and exact[chain, first:].all()
        if events:
            assert events[0]["window_acceptance"] < events[0]["surrogate_acceptance"] / 3


@pytest.mark.filterwarnings("ignore::rnshmc.diagnostics.SamplingWarning")
def test_l2hmc_on_a_surrogate_counts_one_exact_density_per_iteration(on_poor_surrogate,
                                                                        tmp_path):
    """The counts hold on every chain, whether the watch distrusts this poor surrogate there
    or not (which depends on the training's trajectory); and, with the same weights on a
    surrogate 40 standard deviations off, where the test on the model rejects every learned
    proposal, on chains that certainly fall back at the end of the first window."""
    model, mean, cov, l2 = on_poor_surrogate
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = l2.sample(200, tune=50, chains=4, rng=rng_seed(0), progress=False)
    check_learned_and_exact_counts(res, l2.n_steps, tune=50)
    assert res.n_density_evals_explore == l2.exploration["n_density_evals"] > 300

    l2.save(tmp_path / "weights.npz")
    far_off = Gaussian(mean + 40.0 * np.sqrt(np.diag(cov)), covariance=cov)
    misled = rnshmc.L2HMC.load(tmp_path / "weights.npz", model, fitted_surrogate=far_off)
    with pytest.warns(RuntimeWarning, match="replaced by exact HMC from draw"):
        res = misled.sample(200, tune=50, chains=4, rng=rng_seed(1), init=mean, progress=False)
    assert res.fallback.all()
    assert all(events[0]["iteration"] == misled.trust.window for events in res.trust_events)
    check_learned_and_exact_counts(res, misled.n_steps, tune=50)


def test_training_on_the_surrogate_evaluates_no_model():
    import rnshmc
    model, mean, cov = correlated_gaussian()
    calls = []

    def logp_and_grad(q):
        calls.append(1)
        return model.log_density_gradient(q)

    counted = rnshmc.Target(None, logp_and_grad=logp_and_grad, dim=4)
    l2 = rnshmc.L2HMC.with_surrogate(counted, tune=100, rng=rng_seed(0), progress=False, n_steps=3,
                                     rns_options=POOR_SURROGATE)
    explored = len(calls)
    assert explored == l2.exploration["n_gradient_evals"] > 100
    l2.train(20, chains=10, rng=rng_seed(1), progress=False)
    assert len(calls) == explored
    # the initial distribution of training is where the surrogate was fitted
    np.testing.assert_allclose(l2.exploration["mean"], l2.exploration["states"].mean(axis=0))


def test_surrogate_of_another_dimension_is_refused():
    import rnshmc
    with pytest.raises(ValueError, match="surrogate"):
        rnshmc.L2HMC(gaussian(2), fitted_surrogate=gaussian(3))


@pytest.mark.parametrize("seed", [0, 1])
def test_standardised_chain_is_exact_and_reports_samples_in_x(seed):
    """Random (untrained) weights in standardised coordinates on a Gaussian with sds 10 and
    0.1 and a far-off mean: the samples come back in x and keep the moments."""
    import rnshmc
    cov = np.array([[100.0, 0.5], [0.5, 0.01]])
    model = Gaussian(np.array([50.0, -3.0]), covariance=cov)
    l2 = rnshmc.L2HMC(model, n_steps=5, net_width=6, step_size=0.3,
                      standardize=(np.array([45.0, -3.1]), np.array([8.0, 0.12]))).initialize(seed)
    l2.parameters[1:] += 0.2 * np.random.default_rng(seed).standard_normal(l2.parameters.size - 1)
    res = l2.sample(10000, tune=200, chains=2, rng=seed, init=model.mean, progress=False)
    # (random weights: the chains move, 0.17-0.63 over seeds 0-5)
    assert 0.05 < res.acceptance_rate.mean() < 0.99
    z, tol = mean_within_mcse(res.samples, model.mean)
    assert np.all(np.abs(z) < tol), z
    z, tol = covariance_within_mcse(res.samples, model.mean, cov)
    assert np.all(np.abs(z) < tol), z
    # and training sees the same coordinates (chains start where init says, in x)
    l2.train(3, chains=4, rng=rng_seed(0), init=model.mean, progress=False)
    assert np.all(np.isfinite(l2.history["loss"]))


def test_thread_and_process_pools_give_the_serial_draws(on_poor_surrogate):
    """Each chain builds its own integrator (scratch, direction) over a copy of the weights."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
    _, mean, _, l2 = on_poor_surrogate
    serial = l2.sample(200, tune=20, chains=2, rng=rng_seed(1), init=mean, progress=False)
    for pool in (ThreadPoolExecutor(2),
                 ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn"))):
        with pool:
            pooled = l2.sample(200, tune=20, chains=2, rng=rng_seed(1), init=mean, progress=False,
                               pool=pool)
        np.testing.assert_array_equal(pooled.samples, serial.samples)


def test_earlier_names_are_refused_naming_the_new_spelling():
    """L2HMC's earlier names: ``hidden`` and ``n_hidden`` (now ``net_width``), ``surrogate``
    (now ``fitted_surrogate``) and the constructor's ``rng`` (now ``initialize(rng)``, or
    ``train(rng=...)``'s) raise a TypeError naming the new spelling."""
    import rnshmc
    model = gaussian(3)
    check_renamed(lambda **kw: rnshmc.L2HMC(model, n_steps=3, step_size=0.3, **kw),
                  dict(hidden=5, n_hidden=5, surrogate=gaussian(3), rng=rng_seed(4)),
                  {"hidden": "net_width=", "n_hidden": "net_width=",
                   "surrogate": "fitted_surrogate=",
                   "rng": "L2HMC(...).initialize(rng) (the same weights), or let "
                          "train(rng=...) draw them"})


def test_a_collapsing_training_is_recovered():
    """A 10-d Gaussian with variances 1e-2..1e2 from N(0, I) at a learning rate of 1e-2: the
    training chains' acceptance collapses (on 38 of seeds 0-39 here, between iterations 60 and
    290); each time, the best weights so far are restored at half the rate. Which iterations
    collapse, and how many times, is chaotic (differences of 1e-16 in the gradient's sums grow
    to another training within ~60 iterations), so the test asserts the mechanism on every
    seed and the outcome over four: a recovery on some, and trainings that end with chains
    that move (final acceptance 0.03-0.16 over seeds 0-39; without recoveries, under
    COLLAPSED_ACCEPTANCE on about half of them)."""
    import rnshmc.samplers.l2hmc as l2hmc_module
    model = rnshmc.models.ill_conditioned_gaussian(10)
    final, n_recoveries = [], []
    for seed in map(rng_seed, range(4)):
        l2hmc = rnshmc.L2HMC(model, n_steps=5)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            l2hmc.train(300, chains=20, rng=seed, progress=False, learning_rate=1e-2)
        recovered = l2hmc.history["recovered_at"].astype(int)
        acceptance = l2hmc.history["acceptance"]
        said = [str(w.message) for w in caught if "time(s) (the training" in str(w.message)]
        assert recovered.size <= l2hmc_module.MAX_RECOVERIES
        assert len(said) == (recovered.size > 0)  # one warning naming every recovery
        if recovered.size:
            assert f"collapsed {recovered.size} time(s)" in said[0]
        for at in recovered:  # a chunk (3 iterations) accepting under the threshold
            assert acceptance[at - 3:at].mean() < l2hmc_module.COLLAPSED_ACCEPTANCE
        final.append(acceptance[-10:].mean())
        n_recoveries.append(recovered.size)
    assert sum(n_recoveries) > 0
    final = np.array(final)
    standard_error = final.std(ddof=1) / np.sqrt(final.size)
    assert final.mean() > l2hmc_module.COLLAPSED_ACCEPTANCE + 3 * standard_error, final


def test_weights_that_do_not_move_are_refused_saying_why():
    """Weights whose training chains accepted (almost) nothing at the end are refused for
    sampling. Made certain, not left to a chaotic collapse: a step size of 1000 on variances
    of 1e-2..1e2 rejects every proposal, so the training's acceptance is exactly 0."""
    model = rnshmc.models.ill_conditioned_gaussian(10)
    dead = rnshmc.L2HMC(model, n_steps=5).initialize(rng_seed(0))
    dead.step_size = 1e3
    dead.train(30, chains=20, rng=rng_seed(1), progress=False, learning_rate=1e-2)
    assert not dead.history["acceptance"].any() and dead.history["recovered_at"].size == 0
    with pytest.raises(ValueError, match="trained weights accepted 0.000 .* would not move"):
        dead.sample(100, tune=10, chains=2, rng=rng_seed(0), progress=False)
    # the same weights after a training that moved are accepted
    alive = rnshmc.L2HMC(model, n_steps=5).initialize(rng_seed(0))
    alive.step_size = 0.01
    alive.train(30, chains=20, rng=rng_seed(1), progress=False, learning_rate=1e-4)
    assert alive.history["acceptance"][-10:].mean() > 0.5
    alive.plan(10, 10, 1, 10)


# ---------------------------------------------------------------------------------------------
# training cost beside sampling cost


def test_training_cost_and_break_even_against_a_baseline():
    """The result carries what training cost; break_even is where the two cost lines cross
    (overhead + draws x cost per effective draw, in model evaluations), and the summary
    says it."""
    import rnshmc
    model = rnshmc.models.correlated_gaussian_2d()
    l2 = rnshmc.L2HMC(model).train(30, chains=10, rng=rng_seed(1), progress=False)
    kwargs = dict(draws=400, tune=100, chains=2, rng=rng_seed(2), progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = l2.sample(**kwargs)
        baseline = rnshmc.HMC(model, step_size=0.1, n_steps=10, jitter=False).sample(**kwargs)
    training = result["training"]
    assert training["iterations"] == 30 and not training["on_surrogate"]
    assert training["gradient_equivalents"] == (l2.training_evals["gradient"]
                                                + l2.training_evals["hessian_vector"]) > 0

    def cost(run, draws, extra=0):
        c = run.cost
        sampling = c["phases"]["sampling"]["density_evals"]
        return c["density_evals"] - sampling + extra + draws * sampling / c["ess_bulk_min"]

    draws = rnshmc.L2HMC.break_even(result, baseline)
    extra = training["gradient_equivalents"]
    if 0 < draws < np.inf:
        assert cost(result, draws, extra) == pytest.approx(cost(baseline, draws))
        assert cost(result, 2 * draws, extra) < cost(baseline, 2 * draws)
    elif draws == 0:
        assert cost(result, 1, extra) <= cost(baseline, 1)
    else:
        assert cost(result, 1e9, extra) >= cost(baseline, 1e9)
    text = str(result.summary())
    assert "training (before sampling): 30 iterations" in text
    assert "HMC" in text.split("training (before sampling)")[1]

# The training kernel's speed-ups (threads, activations kept for the reverse pass, the chains'
# U and grad U reused between iterations) change no result


def training_setup(dim=3, chains=12, seed=0):
    """A Trainer on a shifted, scaled and walled Gaussian, the target, the parameters, the
    chains, and the masks."""
    from rnshmc._kernels._l2hmc import Trainer, TransformedTarget
    rng = np.random.default_rng(seed)
    n_steps, hidden = 4, 6
    params = 0.3 * rng.standard_normal(parameter_layout(dim, hidden)["size"])
    params[0] = np.log(0.2)
    masks = random_masks(rng, n_steps, dim)
    trainer = Trainer(dim, n_steps, hidden, params, masks)
    target = TransformedTarget(as_ctarget(gaussian(dim), dim), rng.standard_normal(dim),
                               np.exp(0.3 * rng.standard_normal(dim)), 1.5)
    z = rng.standard_normal((chains, dim))
    return trainer, target, params, z, masks


def run_training(trainer, target, params, z, generator, n_iterations, adam=None, step=0,
                 first=0, burnin_weight=1.0, **options):
    """``n_iterations`` of Trainer.train from iteration ``first`` of a schedule of 6 annealed
    temperatures; returns (losses, acceptance, skipped) and updates the arrays in place."""
    m, v = adam if adam is not None else (np.zeros_like(params), np.zeros_like(params))
    temperatures = np.linspace(4.0, 1.0, 6)[first:first + n_iterations]
    losses, acceptance = np.empty(n_iterations), np.empty(n_iterations)
    skipped = trainer.train(target, z, generator, n_iterations, m, v, step, 1e-2, 0.96, 1000,
                            0.1, burnin_weight, temperatures, np.zeros(z.shape[1]),
                            np.ones(z.shape[1]), losses, acceptance, **options)
    return losses, acceptance, skipped


@pytest.mark.parametrize("burnin_weight", [0.0, 1.0])
def test_training_on_one_or_two_threads_is_the_same(burnin_weight):
    results = []
    for threads in (1, 2):
        trainer, target, params, z, masks = training_setup()
        adam = (np.zeros_like(params), np.zeros_like(params))
        out = run_training(trainer, target, params, z, np.random.default_rng(rng_seed(5)), 5, adam,
                           burnin_weight=burnin_weight, threads=threads)
        results.append((out, params, adam, z, trainer.n_gradient_evals,
                        trainer.n_hessian_vector_evals))
    (one, p1, a1, z1, g1, h1), (two, p2, a2, z2, g2, h2) = results
    for x, y in [(one[0], two[0]), (one[1], two[1]), (p1, p2), (a1[0], a2[0]), (a1[1], a2[1]),
                 (z1, z2)]:
        np.testing.assert_allclose(y, x, rtol=1e-12, atol=0)
    assert (g1, h1) == (g2, h2)


def test_training_in_one_call_or_one_iteration_per_call_is_the_same():
    """The chains' U and grad U the trainer keeps carry over between calls; a chain set
    between calls (L2HMC.train's restore after a collapse) is evaluated afresh."""
    trainer, target, params, z, masks = training_setup()
    adam = (np.zeros_like(params), np.zeros_like(params))
    whole = run_training(trainer, target, params, z, np.random.default_rng(rng_seed(3)), 6, adam)
    trainer2, _, params2, z2, _ = training_setup()
    adam2 = (np.zeros_like(params2), np.zeros_like(params2))
    generator = np.random.default_rng(rng_seed(3))
    parts = [run_training(trainer2, target, params2, z2, generator, 1, adam2, step=i, first=i)
             for i in range(6)]
    np.testing.assert_allclose(np.concatenate([p[0] for p in parts]), whole[0], rtol=1e-12)
    np.testing.assert_allclose(np.concatenate([p[1] for p in parts]), whole[1], rtol=1e-12)
    for x, y in [(params, params2), (adam[0], adam2[0]), (adam[1], adam2[1]), (z, z2)]:
        np.testing.assert_allclose(y, x, rtol=1e-12, atol=0)
    # per iteration: T gradients per trajectory, one per fresh start, and the chains' starts
    # only at the first iteration
    chains, T = z.shape[0], trainer.T
    assert trainer.n_gradient_evals == trainer2.n_gradient_evals <= 6 * (2 * chains * T + chains) + chains
    # chains set between calls (L2HMC.train's restore after a collapse, here of half of them)
    # and weights restored: the same results as a new trainer's, which knows no U or grad U
    saved = (params.copy(), adam[0].copy(), adam[1].copy(), z.copy())
    run_training(trainer, target, params, z, np.random.default_rng(rng_seed(11)), 2, adam, step=6,
                 first=3)
    moved = np.any(z[::2] != saved[3][::2], axis=1).sum()  # (a chain may have stayed)
    z[::2] = saved[3][::2]
    for array, value in zip((params, adam[0], adam[1]), saved):
        array[...] = value
    start = z.copy()
    before = trainer.n_gradient_evals
    continued = run_training(trainer, target, params, z, np.random.default_rng(rng_seed(4)), 2,
                             adam,
                             step=6, first=3)
    new_trainer, _, params3, _, _ = training_setup()
    params3[...] = saved[0]
    adam3 = (saved[1].copy(), saved[2].copy())
    z3 = start.copy()
    again = run_training(new_trainer, target, params3, z3, np.random.default_rng(rng_seed(4)), 2,
                         adam3,
                         step=6, first=3)
    for x, y in [(again[0], continued[0]), (again[1], continued[1]), (params3, params),
                 (adam3[0], adam[0]), (z3, z)]:
        np.testing.assert_allclose(y, x, rtol=1e-12, atol=0)
    # the restored chains' starts were evaluated again (those set to another state than the
    # trainer's), the kept ones' were not
    assert moved > 0
    assert (trainer.n_gradient_evals - before
            == new_trainer.n_gradient_evals - z.shape[0] + moved)


@pytest.mark.parametrize("dim", [2, 12])
def test_training_proposals_are_the_integrators_trajectories(dim):
    """Trainer.train's chains move to AugmentedLeapfrog.apply's proposals from their starts
    with the momenta and directions drawn in one serial pass (or stay), as the Metropolis
    step with the iteration's uniforms decides."""
    trainer, target, params, z, masks = training_setup(dim=dim, chains=16, seed=2)
    start = z.copy()
    flow = AugmentedLeapfrog(dim, trainer.T, trainer.H, params.copy(), masks)
    target.inverse_temperature = 1 / 4.0
    draws = np.random.default_rng(rng_seed(8))
    momenta = draws.standard_normal(z.shape)
    directions = np.where(draws.random(z.shape[0]) < 0.5, 1, -1)
    uniforms = draws.random(z.shape[0])
    # loss_and_gradient's proposals (before the training's update of the weights)
    _, _, _, proposals = trainer.loss_and_gradient(target, start, momenta, directions)
    run_training(trainer, target, params, z, np.random.default_rng(rng_seed(8)), 1,
                 burnin_weight=0.0)
    moved = 0
    for b in range(z.shape[0]):
        U0, _ = target.eval_potential_and_gradient(start[b])
        x1, v1, log_jacobian, U1, diverged = flow.apply(target, start[b], momenta[b],
                                                        int(directions[b]))
        log_ratio = U0 + 0.5 * momenta[b] @ momenta[b] - U1 - 0.5 * v1 @ v1 + log_jacobian
        accept = 0.0 if diverged else min(1.0, np.exp(log_ratio))
        expected = x1 if uniforms[b] < accept else start[b]
        # (the same numbers to rounding: from dim 8 the trainer sums the heads' products in
        # another order)
        np.testing.assert_allclose(z[b], expected, rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(proposals[b], x1, rtol=1e-12, atol=1e-13)
        moved += uniforms[b] < accept
    assert moved > 0


def test_training_stops_when_the_loss_stops_improving():
    import rnshmc
    model = rnshmc.models.correlated_gaussian_2d()
    l2 = rnshmc.L2HMC(model).train(3000, chains=10, rng=rng_seed(1), patience=3, progress=False)
    stopped = int(l2.history["stopped_at"][0])
    assert len(l2.history["loss"]) == stopped < 3000
    chunk = 30
    means = l2.history["loss"].reshape(-1, chunk).mean(axis=1)
    best_before = means[:-3].min()
    assert np.all(means[-3:] >= best_before - 0.01 * abs(best_before))  # three flat chunks
    # without patience every iteration runs
    again = rnshmc.L2HMC(model).train(300, chains=10, rng=rng_seed(1), progress=False)
    assert len(again.history["loss"]) == 300 and again.history["stopped_at"].size == 0
    with pytest.raises(ValueError, match="patience"):
        rnshmc.L2HMC(model).train(10, chains=2, rng=rng_seed(1), patience=0, progress=False)
