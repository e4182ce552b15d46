"""L2HMC's augmented leapfrog (issue 11): zero heads are the leapfrog, the backward operator is
the exact inverse, the log-Jacobian is log |det| of the map, and a chain with any fixed weights
is exact because its acceptance test includes that log-Jacobian."""
import numpy as np
import pytest

from rnshmc._kernels._l2hmc import AugmentedLeapfrog, parameter_layout
from rnshmc._kernels._metrics import EuclideanMetric
from rnshmc._kernels._transition import TRANSITION, Chain
from rnshmc.models import Gaussian
from rnshmc.targets import as_ctarget

from conftest import covariance_within_mcse, mean_within_mcse


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
    rng = np.random.default_rng(1)
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
    """Against log |det| of a central-difference Jacobian of (x, v) -> (x', v')."""
    model = as_ctarget(gaussian(dim))
    step = integrator(dim, scale=0.7)
    rng = np.random.default_rng(3)
    z = rng.standard_normal(2 * dim)

    def F(w):
        x, v, *_ = step.apply(model, w[:dim], w[dim:], direction)
        return np.concatenate([x, v])

    h = 1e-6
    J = np.array([(F(z + h * e) - F(z - h * e)) / (2 * h) for e in np.eye(2 * dim)]).T
    log_jacobian = step.apply(model, z[:dim], z[dim:], direction)[2]
    assert abs(log_jacobian) > 0.05  # volume changes: the test has something to check
    assert log_jacobian == pytest.approx(np.linalg.slogdet(J)[1], abs=1e-6)


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
    rng = np.random.default_rng(0)
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
