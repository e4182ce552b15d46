"""The toy targets of L2HMC's experiments (rnshmc.models): densities against SciPy or the
formula, gradients against finite differences, the stated moments, pickling, bad input."""
import pickle

import numpy as np
import pytest
import scipy.integrate
import scipy.special
import scipy.stats

import rnshmc
from rnshmc.models import GaussianMixture, RoughWell
from testkit import rng_seed


def finite_difference_gradient(model, q, h=1e-6):
    return np.array([(model.potential(q + h * e) - model.potential(q - h * e)) / (2 * h)
                     for e in np.eye(len(q))])


MODELS = {
    "mixture": lambda: GaussianMixture(),
    "mixture3": lambda: GaussianMixture([[0.0, 1.0, 2.0], [1.0, -1.0, 0.0], [3.0, 0.0, 0.0]],
                                        variance=0.5, weights=[1.0, 2.0, 3.0]),
    "rough": lambda: RoughWell(3, eta=0.05),
    "rough (authors' ripple)": lambda: RoughWell(3, eta=0.3, ripple="authors"),
    "ill": lambda: rnshmc.models.ill_conditioned_gaussian(6),
    "correlated": rnshmc.models.correlated_gaussian_2d,
}


@pytest.mark.parametrize("name", MODELS)
def test_gradients_match_finite_differences(name):
    model = MODELS[name]()
    rng = np.random.default_rng(rng_seed(0))
    for _ in range(3):
        q = rng.standard_normal(model.dim)
        U, grad = model.potential_and_gradient(q)
        assert U == pytest.approx(model.potential(q), rel=1e-14)
        np.testing.assert_allclose(grad, finite_difference_gradient(model, q), rtol=1e-6,
                                   atol=1e-6)
        logp, dlogp = model.log_density_gradient(q)
        assert logp == -U and np.array_equal(dlogp, -grad)


def test_mixture_density_and_moments_against_scipy():
    model = MODELS["mixture3"]()
    rng = np.random.default_rng(rng_seed(1))
    for q in rng.standard_normal((5, 3)) * 2:
        reference = scipy.special.logsumexp(
            [scipy.stats.multivariate_normal(m, 0.5 * np.eye(3)).logpdf(q) for m in model.means],
            b=model.weights)
        assert model.log_density(q) == pytest.approx(reference, rel=1e-12)
    # far from every mode the log-sum-exp stays finite
    U, grad = model.potential_and_gradient(np.full(3, 1e3))
    assert np.isfinite(U) and np.all(np.isfinite(grad))
    # the stated moments against draws from the mixture
    component = rng.choice(3, size=400_000, p=model.weights)
    draws = model.means[component] + np.sqrt(0.5) * rng.standard_normal((400_000, 3))
    np.testing.assert_allclose(draws.mean(0), model.mean, atol=0.01)
    np.testing.assert_allclose(np.cov(draws, rowvar=False), model.covariance, atol=0.02)


def test_default_mixture_and_gaussians_are_the_papers():
    mixture = GaussianMixture()
    np.testing.assert_array_equal(mixture.means, [[-2.0, 0.0], [2.0, 0.0]])
    assert mixture.variance == 0.1
    np.testing.assert_allclose(mixture.covariance, [[4.1, 0.0], [0.0, 0.1]])
    correlated = rnshmc.models.correlated_gaussian_2d()
    np.testing.assert_allclose(np.linalg.eigvalsh(correlated.covariance), [0.1, 100.0])
    ill = rnshmc.models.ill_conditioned_gaussian()
    assert ill.dim == 50
    np.testing.assert_allclose(np.diag(ill.covariance)[[0, -1]], [1e-2, 1e2])


def test_rough_well_formula_and_variance():
    model = RoughWell(2, eta=0.01)
    q = np.array([0.3, -1.2])
    assert model.potential(q) == pytest.approx(0.5 * q @ q + 0.01 * np.cos(q / 0.01).sum(),
                                               rel=1e-14)
    # one coordinate's density by quadrature: symmetric, variance near 1
    density = lambda x: np.exp(-0.5 * x * x - 0.01 * np.cos(x / 0.01))
    Z = scipy.integrate.quad(density, -12, 12, limit=4000)[0]
    var = scipy.integrate.quad(lambda x: x * x * density(x), -12, 12, limit=4000)[0] / Z
    assert var == pytest.approx(1.0, abs=0.01)
    # the authors' code's ripple: cos(q / eta^2)
    authors = RoughWell(2, eta=0.1, ripple="authors")
    assert authors.potential(q) == pytest.approx(0.5 * q @ q + 0.1 * np.cos(q / 0.01).sum(),
                                                 rel=1e-14)


@pytest.mark.parametrize("name", MODELS)
def test_pickle_round_trip(name):
    model = MODELS[name]()
    back = pickle.loads(pickle.dumps(model))
    q = np.linspace(-1, 1, model.dim)
    assert back.potential(q) == model.potential(q)


@pytest.mark.parametrize("kwargs", [dict(means=[[np.nan, 0.0]]), dict(variance=0.0),
                                    dict(weights=[1.0, -1.0]), dict(weights=[1.0]),
                                    dict(means=[1.0, 2.0])])
def test_mixture_bad_input(kwargs):
    with pytest.raises(ValueError):
        GaussianMixture(**kwargs)


@pytest.mark.parametrize("kwargs", [dict(dim=0), dict(eta=0.0), dict(eta=np.inf),
                                    dict(ripple="smooth")])
def test_rough_well_bad_input(kwargs):
    with pytest.raises(ValueError):
        RoughWell(**kwargs)


@pytest.mark.parametrize("name", MODELS)
def test_hessian_vector_products_match_differences_of_gradients(name):
    """The analytic H u (L2HMC's training differentiates through grad U) against central
    differences of the gradient along u."""
    target = rnshmc.targets.as_ctarget(MODELS[name]())
    rng = np.random.default_rng(rng_seed(2))
    for _ in range(3):
        q, u = rng.standard_normal(target.dim), rng.standard_normal(target.dim)
        h = 1e-6
        reference = (target.eval_gradient(q + h * u) - target.eval_gradient(q - h * u)) / (2 * h)
        np.testing.assert_allclose(target.eval_hessian_vector(q, u), reference,
                                   rtol=1e-6, atol=1e-6 * np.abs(reference).max())


def test_hessian_vector_fallback_differences_the_gradient():
    """A target without its own H u (here Python callables) gets central differences of its
    gradient: U = sum q^4 / 4 has H u = 3 q^2 u."""
    target = rnshmc.targets.as_ctarget(
        rnshmc.Target(lambda q: -0.25 * np.sum(q ** 4), lambda q: -q ** 3, dim=4))
    rng = np.random.default_rng(rng_seed(3))
    q, u = 2 * rng.standard_normal(4), rng.standard_normal(4)
    # (a difference's error is relative to the whole vector's scale, not to each entry's)
    expected = 3 * q ** 2 * u
    np.testing.assert_allclose(target.eval_hessian_vector(q, u), expected, rtol=1e-8,
                               atol=1e-8 * np.abs(expected).max())
    np.testing.assert_array_equal(target.eval_hessian_vector(q, np.zeros(4)), 0.0)
