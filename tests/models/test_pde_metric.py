"""The Gauss-Newton metric of rnshmc.models.EllipticPDE and its derivatives, computed in C
(EllipticPDETarget.gauss_newton): G against the NumPy J^T J / s_y^2 + I / s_theta^2 built
from the sensitivity Jacobian, dG against central differences of that reference, symmetry,
failure where kappa overflows, and the authors' problem."""
import pickle

import numpy as np
import pytest

from rnshmc.models import EllipticPDE
from testkit import rng_seed


@pytest.fixture(scope="module")
def models():
    """Q1 with observations off the nodes (x = 0.1 k on a 1/12 grid) and P1 on the nodes."""
    return {"Q1": EllipticPDE(n=12, element="Q1", n_modes=6, rng=rng_seed(1)),
            "P1": EllipticPDE(n=10, element="P1", n_modes=5, rng=rng_seed(0))}


def reference_metric(model, q):
    """J^T J / s_y^2 + I / s_theta^2 in NumPy from the sensitivity Jacobian."""
    J = model.jacobian(q)
    return J.T @ J / model.noise_sd ** 2 + np.eye(model.dim) / model.prior_sd ** 2


def metric_differences(model, q, step):
    """Central differences of the reference metric: array (dim, dim, dim), [i] = dG/dtheta_i."""
    return np.stack([(reference_metric(model, q + step * e) - reference_metric(model, q - step * e))
                     / (2 * step) for e in np.eye(model.dim)])


def random_points(model, seeds=(11, 12)):
    return [np.random.default_rng(seed).normal(0.0, 0.6, model.dim) for seed in seeds]


# --------------------------------------------------------------------------------------------
# the metric


@pytest.mark.parametrize("element", ["Q1", "P1"])
def test_metric_matches_numpy_reference(models, element):
    model = models[element]
    for q in random_points(model):
        G = model.gauss_newton_metric(q)
        reference = reference_metric(model, q)
        assert G.shape == (model.dim, model.dim)
        np.testing.assert_allclose(G, reference, rtol=1e-10, atol=1e-12 * np.abs(reference).max())
        np.testing.assert_array_equal(G, G.T)    # both triangles written, exactly symmetric
        assert np.linalg.eigvalsh(G).min() >= 1 / model.prior_sd ** 2 - 1e-9
        # the derivative path computes the same G, and so does the raw C entry point
        G2, _ = model.gauss_newton_metric_derivatives(q)
        np.testing.assert_array_equal(G2, G)
        ok, G3, dG3 = model._ctarget.eval_gauss_newton(q, derivatives=False)
        assert ok and dG3 is None
        np.testing.assert_array_equal(G3, G)


# --------------------------------------------------------------------------------------------
# its derivatives


@pytest.mark.parametrize("element", ["Q1", "P1"])
def test_metric_derivatives_match_finite_differences(models, element):
    model = models[element]
    d = model.dim
    for q in random_points(model):
        G, dG = model.gauss_newton_metric_derivatives(q)
        assert dG.shape == (d, d, d)
        # step 1e-5: truncation ~ h^2 |G'''| and rounding ~ eps |G| / h both far below 1e-6
        fd = metric_differences(model, q, 1e-5)
        error = np.abs(dG - fd).max() / np.abs(fd).max()
        assert error <= 1e-6, f"relative error {error:.2e}"
        np.testing.assert_allclose(dG, fd, rtol=1e-5, atol=1e-6 * np.abs(fd).max())
        # each dG[i] is symmetric (written so exactly)
        np.testing.assert_array_equal(dG, np.transpose(dG, (0, 2, 1)))


@pytest.mark.parametrize("element", ["Q1", "P1"])
def test_metric_derivatives_are_the_second_order_sensitivities(models, element):
    """dG[i, a, b] = sum_o (T[o, i, a] J[o, b] + J[o, a] T[o, i, b]) / s_y^2 with T the
    central differences of the Jacobian: checks the formula, not only dG/dtheta as a whole,
    and that T (hence dG's construction) is symmetric in (i, a)."""
    model = models[element]
    q = random_points(model, seeds=(13,))[0]
    step = 1e-5
    J = model.jacobian(q)
    T = np.stack([(model.jacobian(q + step * e) - model.jacobian(q - step * e)) / (2 * step)
                  for e in np.eye(model.dim)], axis=1)                      # (n_obs, i, a)
    np.testing.assert_allclose(T, np.transpose(T, (0, 2, 1)), rtol=1e-5,
                               atol=1e-6 * np.abs(T).max())
    M = np.einsum("oia,ob->iab", T, J)
    expected = (M + np.transpose(M, (0, 2, 1))) / model.noise_sd ** 2
    _, dG = model.gauss_newton_metric_derivatives(q)
    np.testing.assert_allclose(dG, expected, rtol=1e-5, atol=1e-6 * np.abs(expected).max())


def test_metric_at_zero_and_after_pickling(models):
    model = models["P1"]
    q = np.zeros(model.dim)
    G, dG = model.gauss_newton_metric_derivatives(q)
    np.testing.assert_allclose(G, reference_metric(model, q), rtol=1e-10)
    again = pickle.loads(pickle.dumps(model))
    G2, dG2 = again.gauss_newton_metric_derivatives(q)
    np.testing.assert_array_equal(G2, G)
    np.testing.assert_array_equal(dG2, dG)


# --------------------------------------------------------------------------------------------
# failure


@pytest.mark.parametrize("element", ["Q1", "P1"])
def test_metric_fails_where_kappa_overflows(models, element):
    model = models[element]
    q = 1e3 * np.ones(model.dim)                  # log kappa ~ 1e3: kappa = inf
    for derivatives in (False, True):
        ok, G, dG = model._ctarget.eval_gauss_newton(q, derivatives=derivatives)
        assert ok is False
    with pytest.raises(FloatingPointError):
        model.gauss_newton_metric(q)
    with pytest.raises(FloatingPointError):
        model.gauss_newton_metric_derivatives(q)
    # and the target still works afterwards (no state is kept)
    q = random_points(model)[0]
    np.testing.assert_allclose(model.gauss_newton_metric(q), reference_metric(model, q),
                               rtol=1e-10)


def test_metric_checks_its_input(models):
    model = models["P1"]
    with pytest.raises(ValueError):
        model.gauss_newton_metric_derivatives(np.zeros(model.dim + 1))
    with pytest.raises(ValueError):
        model.gauss_newton_metric(np.full(model.dim, np.nan))


def test_work_size_formula(models):
    for model in models.values():
        target, system = model._ctarget, model.solver._system
        d, packed = model.dim, model.dim * (model.dim + 1) // 2
        assert target.metric_work_size == (target.scratch_size + 2 * d * system.n_ext
                                           + target.n_obs * d + (system.n_free + d) * packed
                                           + 2 * d)


# --------------------------------------------------------------------------------------------
# the authors' problem (d = 20, 961 nodes, 1800 P1 triangles, 121 observations)


def test_authors_metric_and_derivatives(shared_data):
    path = shared_data / "rnshmc-original" / "ePDE.mat"
    if not path.is_file():
        pytest.skip(f"needs the authors' ePDE.mat at {path}; absent here")
    model = EllipticPDE.from_mat(path)
    q = np.random.default_rng(rng_seed(14)).normal(0.0, 0.5, model.dim)
    G, dG = model.gauss_newton_metric_derivatives(q)
    reference = reference_metric(model, q)
    np.testing.assert_allclose(G, reference, rtol=1e-10, atol=1e-12 * np.abs(reference).max())
    np.testing.assert_array_equal(G, G.T)
    np.testing.assert_array_equal(dG, np.transpose(dG, (0, 2, 1)))
    fd = metric_differences(model, q, 1e-5)
    error = np.abs(dG - fd).max() / np.abs(fd).max()
    assert error <= 1e-6, f"relative error {error:.2e}"
