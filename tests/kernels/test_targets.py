"""Targets: rnshmc.Target validation and evaluation, as_ctarget for every accepted kind, the
Python-callable C target (potential convention U = -log density), dim inference."""
import numpy as np
import pytest

import rnshmc
from rnshmc import HMC, Target
from rnshmc._kernels._targets import CTarget, PyCallableTarget
from rnshmc.models import LogisticRegression
from rnshmc.targets import as_ctarget, target_dim
from testkit import rng_seed


def quadratic_logp(q):
    return -0.5 * float(q @ q) + float(q[0])


def quadratic_grad(q):
    g = -np.array(q, dtype=float)
    g[0] += 1.0
    return g


def quadratic_logp_and_grad(q):
    return quadratic_logp(q), quadratic_grad(q)


# --------------------------------------------------------------------------------------------
# rnshmc.Target


def test_target_validation():
    with pytest.raises(TypeError, match="logp"):
        Target(3.0)
    with pytest.raises(TypeError, match="grad_logp"):
        Target(quadratic_logp, grad_logp="not callable")
    with pytest.raises(TypeError, match="logp_and_grad"):
        Target(None, logp_and_grad=np.zeros(3))
    with pytest.raises(ValueError):
        Target(None)
    with pytest.raises(ValueError, match="not both"):
        Target(quadratic_logp, grad_logp=quadratic_grad, logp_and_grad=quadratic_logp_and_grad)
    with pytest.raises(ValueError, match="logp"):
        Target(None, grad_logp=quadratic_grad)  # a gradient without a density
    for bad_dim in (0, -1, 2.5, "3", True, False, np.float64(3.0)):
        with pytest.raises(ValueError, match="dim"):
            Target(quadratic_logp, dim=bad_dim)
    assert Target(quadratic_logp, dim=np.int32(4)).dim == 4
    assert isinstance(Target(quadratic_logp, dim=np.int64(4)).dim, int)
    assert Target(quadratic_logp).dim is None


@pytest.mark.parametrize("form", ["logp+grad", "logp_and_grad", "logp+logp_and_grad"])
def test_target_evaluation(form):
    if form == "logp+grad":
        target = Target(quadratic_logp, grad_logp=quadratic_grad, dim=3)
    elif form == "logp_and_grad":
        target = Target(None, logp_and_grad=quadratic_logp_and_grad, dim=3)
    else:
        target = Target(quadratic_logp, logp_and_grad=quadratic_logp_and_grad, dim=3)
    q = np.array([0.5, -1.0, 2.0])
    assert target.has_gradient
    value = target.log_density(q)
    assert isinstance(value, float) and value == quadratic_logp(q)
    value, grad = target.log_density_gradient(q)
    assert isinstance(value, float) and value == quadratic_logp(q)
    assert grad.dtype == np.float64
    np.testing.assert_array_equal(grad, quadratic_grad(q))


def test_target_without_gradient():
    target = Target(quadratic_logp, dim=2)
    assert not target.has_gradient
    assert target.log_density(np.array([1.0, 0.0])) == 0.5
    with pytest.raises(TypeError, match="gradient"):
        target.log_density_gradient(np.zeros(2))
    ct = as_ctarget(target)
    assert ct.eval_potential(np.array([1.0, 0.0])) == -0.5
    with pytest.raises(TypeError, match="gradient"):
        ct.eval_potential_and_gradient(np.zeros(2))


def test_gradient_list_is_converted():
    target = Target(quadratic_logp, grad_logp=lambda q: list(quadratic_grad(q)), dim=2)
    value, grad = target.log_density_gradient(np.array([1.0, 2.0]))
    assert isinstance(grad, np.ndarray)
    np.testing.assert_array_equal(grad, [0.0, -2.0])


def test_docstring_example():
    target = rnshmc.Target(lambda q: -0.5 * q @ q, grad_logp=lambda q: -q, dim=3)
    assert target.log_density(np.ones(3)) == -1.5


# --------------------------------------------------------------------------------------------
# the C-level wrapper


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ctarget_potential_convention(seed):
    """U = -logp, grad U = -grad logp; the callables receive fresh float64 arrays."""
    rng = np.random.default_rng(seed)
    seen = []

    def recording_logp_and_grad(q):
        seen.append(q)
        return quadratic_logp_and_grad(q)

    ct = as_ctarget(Target(None, logp_and_grad=recording_logp_and_grad, dim=4))
    assert isinstance(ct, CTarget) and ct.dim == 4
    for _ in range(3):
        q = rng.standard_normal(4)
        U, g = ct.eval_potential_and_gradient(q)
        assert U == -quadratic_logp(q)
        np.testing.assert_array_equal(g, -quadratic_grad(q))
        assert ct.eval_potential(q) == U
    assert all(s.dtype == np.float64 and s.shape == (4,) for s in seen)
    assert len({id(s) for s in seen}) == len(seen)  # never the same buffer twice
    with pytest.raises(ValueError, match="shape"):
        ct.eval_potential(np.zeros(3))
    with pytest.raises(ValueError, match="shape"):
        ct.eval_potential_and_gradient(np.zeros((4, 1)))


def test_ctarget_callable_errors():
    def broken_gradient(q):
        return 0.0, np.zeros(len(q) + 1)

    ct = PyCallableTarget(3, logp_and_grad=broken_gradient)
    with pytest.raises(ValueError, match="shape"):
        ct.eval_potential_and_gradient(np.zeros(3))

    class Boom(ArithmeticError):
        pass

    def explode(q):
        raise Boom("inside the user's callable")

    ct = PyCallableTarget(2, logp=explode, logp_and_grad=lambda q: (0.0, np.zeros(2)))
    with pytest.raises(Boom) as excinfo:
        ct.eval_potential(np.zeros(2))
    assert "explode" in [entry.name for entry in excinfo.traceback]
    with pytest.raises(ValueError):
        PyCallableTarget(2)
    for bad in (0, -3):
        with pytest.raises(ValueError, match="dim"):
            PyCallableTarget(bad, logp=quadratic_logp)


def test_non_finite_values_are_not_errors_in_the_wrapper():
    """Non-finite values pass through (the sampler decides: divergence or initial-point
    error)."""
    ct = PyCallableTarget(1, logp_and_grad=lambda q: (-np.inf, np.array([np.nan])))
    U, g = ct.eval_potential_and_gradient(np.zeros(1))
    assert U == np.inf and np.isnan(g[0])


def test_base_ctarget():
    ct = CTarget(2)
    assert ct.dim == 2 and ct.scratch_size >= 2
    with pytest.raises(NotImplementedError):
        ct.eval_potential(np.zeros(2))
    with pytest.raises(ValueError):
        CTarget(0)


# --------------------------------------------------------------------------------------------
# as_ctarget


class BridgeStanLike:
    def __init__(self, dim, as_method=False, with_gradient=True):
        self._dim = dim
        self.dim = (lambda: self._dim) if as_method else dim
        if with_gradient:
            self.log_density_gradient = quadratic_logp_and_grad

    def log_density(self, q):
        return quadratic_logp(q)


def small_logistic():
    rng = np.random.default_rng(rng_seed(0))
    X = rng.standard_normal((30, 3))
    y = (rng.uniform(size=30) < 0.5).astype(float)
    return LogisticRegression(X, y)


def test_as_ctarget_for_each_kind():
    q = np.array([0.3, -0.2, 1.1])
    # an rnshmc.Target, dim declared or given
    for ct in (as_ctarget(Target(quadratic_logp, grad_logp=quadratic_grad, dim=3)),
               as_ctarget(Target(quadratic_logp, grad_logp=quadratic_grad), dim=3),
               as_ctarget(BridgeStanLike(3)), as_ctarget(BridgeStanLike(3, as_method=True)),
               as_ctarget(BridgeStanLike(3), dim=3)):
        assert isinstance(ct, PyCallableTarget) and ct.dim == 3
        assert ct.eval_potential(q) == -quadratic_logp(q)
        np.testing.assert_array_equal(ct.eval_potential_and_gradient(q)[1], -quadratic_grad(q))
    # a BridgeStan-style object without a gradient: density only
    ct = as_ctarget(BridgeStanLike(3, with_gradient=False))
    assert not ct.has_gradient and ct.eval_potential(q) == -quadratic_logp(q)
    # a built-in model: its own C kernel, not a wrapper
    model = small_logistic()
    assert as_ctarget(model) is model._ctarget
    assert as_ctarget(model).eval_potential(q) == model.potential(q)
    # a CTarget passes through
    raw = PyCallableTarget(3, logp=quadratic_logp)
    assert as_ctarget(raw) is raw
    assert as_ctarget(model._ctarget) is model._ctarget


def test_as_ctarget_errors():
    with pytest.raises(ValueError, match="dim"):
        as_ctarget(Target(quadratic_logp))                       # unknown dim
    with pytest.raises(ValueError, match="dim"):
        as_ctarget(Target(quadratic_logp, dim=3), dim=4)         # disagreeing dims
    with pytest.raises(ValueError, match="dim"):
        as_ctarget(BridgeStanLike(3), dim=2)

    class NoDim:
        def log_density(self, q):
            return 0.0

    with pytest.raises(ValueError, match="dim"):
        as_ctarget(NoDim())
    assert as_ctarget(NoDim(), dim=2).dim == 2
    for thing in (None, 3, "target", object(), quadratic_logp, np.zeros(3)):
        with pytest.raises(TypeError, match="target"):
            as_ctarget(thing, dim=2)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="dim"):
            as_ctarget(BridgeStanLike(bad))


def test_target_dim():
    assert target_dim(Target(quadratic_logp, dim=5)) == 5
    assert target_dim(Target(quadratic_logp)) is None
    assert target_dim(BridgeStanLike(4, as_method=True)) == 4
    assert target_dim(small_logistic()) == 3
    assert target_dim(object()) is None


# --------------------------------------------------------------------------------------------
# dim inference in the sampler


@pytest.mark.parametrize("init_shape", [(4,), (2, 4)])
def test_dim_inferred_from_init(init_shape):
    target = Target(quadratic_logp, grad_logp=quadratic_grad)
    init = np.full(init_shape, 0.25)
    res = HMC(target, step_size=0.4, n_steps=3).sample(30, tune=0, chains=2, rng=rng_seed(1),
                                                       init=init,
                                                       progress=False)
    assert res.samples.shape == (2, 30, 4)
    assert target.dim is None  # the user's object is not modified


def test_dim_from_bridgestan_method_and_default_init():
    res = HMC(BridgeStanLike(2, as_method=True), step_size=0.4).sample(20, tune=0, rng=rng_seed(0),
                                                                      progress=False)
    assert res.samples.shape == (4, 20, 2)
    with pytest.raises(ValueError, match="dim"):
        HMC(Target(quadratic_logp, grad_logp=quadratic_grad), step_size=0.4).sample(
            20, tune=0, progress=False)


def test_default_init_is_uniform_in_minus_two_two():
    """init=None: each coordinate uniform on (-2, 2), drawn from the chain's own stream."""
    calls = []

    def first_call_logp_and_grad(q):
        calls.append(q.copy())
        return quadratic_logp_and_grad(q)

    target = Target(None, logp_and_grad=first_call_logp_and_grad, dim=200)
    HMC(target, step_size=0.1, n_steps=1).sample(1, tune=0, chains=3, rng=rng_seed(4),
                                                 progress=False)
    starts = [calls[0], calls[2], calls[4]]  # per chain: initial point, then one step
    for start in starts:
        assert np.all((start > -2) & (start < 2))
        assert start.std() > 0.8  # uniform(-2, 2) has sd 1.15
    expected = [g.uniform(-2.0, 2.0, size=200) for g in np.random.default_rng(rng_seed(4)).spawn(3)]
    np.testing.assert_array_equal(np.array(starts), np.array(expected))
