"""rnshmc.models.EllipticPDE: forward map and potential against a NumPy/scipy.sparse reference,
adjoint gradient and Jacobian against finite differences, the authors' problem, and its use as
an HMC target."""
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
import scipy.sparse.linalg as spl

import rnshmc
from rnshmc.fem import EllipticSolver
from rnshmc.models import EllipticPDE
from rnshmc.models.pde import (CLUSTER_TOL, SIGN_TIE_TOL, canonical_eigenbasis, kl_basis,
                               observation_grid)
from testkit import rng_seed


def authors_file(shared_data):
    return shared_data / "rnshmc-original" / "ePDE.mat"


@pytest.fixture(scope="module")
def small_models():
    """Q1 and P1 synthetic models, small enough for dense finite differences."""
    return {"Q1": EllipticPDE(n=12, element="Q1", n_modes=6, rng=rng_seed(1)),
            "P1": EllipticPDE(n=10, element="P1", n_modes=6, obs_grid=6, rng=rng_seed(2))}


# --------------------------------------------------------------------------------------------
# independent reference of the forward map and the potential


def reference_stiffness(nodes, elements, kappa):
    """Full stiffness matrix: P1 by the gradient formula, Q1 by 2 x 2 Gauss quadrature."""
    p = nodes[elements]
    if elements.shape[1] == 3:
        M = np.concatenate([np.ones((len(elements), 3, 1)), p], axis=2)
        grads = np.transpose(np.linalg.inv(M)[:, 1:, :], (0, 2, 1))
        K = 0.5 * np.abs(np.linalg.det(M))[:, None, None] * grads @ np.transpose(grads, (0, 2, 1))
    else:
        h = p[:, 2, 0] - p[:, 0, 0]
        K = np.zeros((len(elements), 4, 4))
        corners = np.array([[0, 0], [1, 0], [1, 1], [0, 1]], float)
        for s in (0.5 - 0.5 / np.sqrt(3), 0.5 + 0.5 / np.sqrt(3)):
            for t in (0.5 - 0.5 / np.sqrt(3), 0.5 + 0.5 / np.sqrt(3)):
                ds = np.where(corners[:, 0] == 1, 1, -1) * np.where(corners[:, 1] == 1, t, 1 - t)
                dt = np.where(corners[:, 1] == 1, 1, -1) * np.where(corners[:, 0] == 1, s, 1 - s)
                g = np.column_stack([ds, dt])              # gradients on the unit square
                K += 0.25 * (g @ g.T)[None] * np.ones_like(h)[:, None, None]
    K = kappa[:, None, None] * K
    m = elements.shape[1]
    return sp.coo_matrix((K.ravel(), (np.repeat(elements, m, axis=1).ravel(),
                                      np.tile(elements, (1, m)).ravel())),
                         shape=(len(nodes),) * 2).tocsr()


def reference_forward(model, q):
    solver = model.solver
    kappa = np.exp(model.basis @ q)
    A = reference_stiffness(solver.nodes, solver.elements, kappa)
    d = solver.dirichlet_nodes
    g = np.where(solver.nodes[d, 1] <= 0.5, solver.nodes[d, 0], 1 - solver.nodes[d, 0])
    free = np.setdiff1d(np.arange(solver.n_nodes), d)
    u = np.empty(solver.n_nodes)
    u[d] = g
    u[free] = spl.spsolve(A[free][:, free].tocsc(), -A[free][:, d] @ g)
    return u, reference_interpolation(solver, model.observation_points) @ u


def reference_interpolation(solver, points):
    """Nodal values at nodes; bilinear/barycentric interpolation inside an element otherwise."""
    P = np.zeros((len(points), solver.n_nodes))
    corners = solver.nodes[solver.elements]
    box_lo, box_hi = corners.min(axis=1), corners.max(axis=1)
    for k, x in enumerate(points):
        near = np.all((x >= box_lo - 1e-12) & (x <= box_hi + 1e-12), axis=1)
        for element in solver.elements[near]:
            c = solver.nodes[element]
            if len(element) == 4:
                lo, hi = c[0], c[2]
                if np.all(x >= lo - 1e-12) and np.all(x <= hi + 1e-12):
                    s, t = (x - lo) / (hi - lo)
                    P[k, element] = [(1 - s) * (1 - t), s * (1 - t), s * t, (1 - s) * t]
                    break
            else:
                lam = np.linalg.solve(np.vstack([np.ones(3), c.T]), np.r_[1.0, x])
                if lam.min() >= -1e-12:
                    P[k, element] = lam
                    break
    return P


def reference_potential(model, q):
    u_obs = reference_forward(model, q)[1]
    return (np.sum((model.observations - u_obs) ** 2) / (2 * model.noise_sd ** 2)
            + q @ q / (2 * model.prior_sd ** 2))


@pytest.mark.parametrize("element", ["Q1", "P1"])
def test_forward_and_potential_match_reference(small_models, element):
    model = small_models[element]
    for seed in range(2):
        q = np.random.default_rng(seed).normal(0.0, 0.7, model.dim)
        u, u_obs = reference_forward(model, q)
        np.testing.assert_allclose(model.solve(q), u, rtol=1e-11, atol=1e-12)
        np.testing.assert_allclose(model.forward(q), u_obs, rtol=1e-11, atol=1e-12)
        U = reference_potential(model, q)
        assert model.potential(q) == pytest.approx(U, rel=1e-11)
        assert model.log_density(q) == pytest.approx(-U, rel=1e-11)
        np.testing.assert_allclose(model.log_coefficient(q), model.basis @ q, rtol=1e-14)


def test_authors_problem_matches_reference(shared_data):
    model = EllipticPDE.from_mat(authors_file(shared_data))
    q = np.random.default_rng(rng_seed(4)).normal(0.0, 0.5, model.dim)
    u, u_obs = reference_forward(model, q)
    np.testing.assert_allclose(model.forward(q), u_obs, rtol=1e-11, atol=1e-12)
    assert model.potential(q) == pytest.approx(reference_potential(model, q), rel=1e-11)


# --------------------------------------------------------------------------------------------
# gradient, Jacobian, metric


def central_differences(f, q, eps=1e-6):
    return np.stack([(f(q + eps * e) - f(q - eps * e)) / (2 * eps) for e in np.eye(q.size)], axis=-1)


@pytest.mark.parametrize("element", ["Q1", "P1"])
def test_adjoint_gradient_and_jacobian_match_finite_differences(small_models, element):
    model = small_models[element]
    q = np.random.default_rng(rng_seed(7)).normal(0.0, 0.5, model.dim)
    U, grad = model.potential_and_gradient(q)
    assert U == pytest.approx(model.potential(q), rel=1e-14)
    fd = central_differences(model.potential, q)
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-6 * np.abs(fd).max())
    logp, glogp = model.log_density_gradient(q)
    assert logp == -U
    np.testing.assert_array_equal(glogp, -grad)
    J = model.jacobian(q)
    assert J.shape == (model.observations.size, model.dim)
    fdJ = central_differences(model.forward, q)
    np.testing.assert_allclose(J, fdJ, rtol=1e-6, atol=1e-7 * np.abs(fdJ).max())
    # the gradient is J^T r / s_y^2 + q / s_theta^2
    r = model.forward(q) - model.observations
    np.testing.assert_allclose(grad, J.T @ r / model.noise_sd ** 2 + q / model.prior_sd ** 2,
                               rtol=1e-10, atol=1e-10 * np.abs(grad).max())
    G = model.gauss_newton_metric(q)
    np.testing.assert_allclose(G, J.T @ J / model.noise_sd ** 2 + np.eye(model.dim) / model.prior_sd ** 2,
                               rtol=1e-12)
    assert np.linalg.eigvalsh(G).min() >= 1 / model.prior_sd ** 2 - 1e-9


def test_authors_gradient_matches_finite_differences(shared_data):
    model = EllipticPDE.from_mat(authors_file(shared_data))
    q = np.random.default_rng(rng_seed(8)).normal(0.0, 0.5, model.dim)
    grad = model.potential_and_gradient(q)[1]
    fd = central_differences(model.potential, q)
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-6 * np.abs(fd).max())


def test_off_node_observations():
    model = EllipticPDE(n=8, element="Q1", n_modes=4, obs_grid=5,
                        rng=rng_seed(0))   # points at x = 0.25k
    q = np.array([0.3, -0.2, 0.1, 0.4])
    np.testing.assert_allclose(model.forward(q), reference_forward(model, q)[1], rtol=1e-11)
    fd = central_differences(model.potential, q)
    np.testing.assert_allclose(model.potential_and_gradient(q)[1], fd, rtol=1e-6, atol=1e-6)


# --------------------------------------------------------------------------------------------
# construction: KL basis, synthetic data, the authors' file


def test_kl_basis_is_the_scaled_eigenvectors_of_the_covariance():
    centres = EllipticSolver(6, "P1").element_centres
    B = kl_basis(centres, n_modes=5, length_scale=0.3, variance=2.0)
    d2 = np.sum((centres[:, None] - centres[None]) ** 2, axis=-1)
    C = 2.0 * np.exp(-d2 / (2 * 0.3 ** 2))
    values, vectors = np.linalg.eigh(C)
    norms = np.linalg.norm(B, axis=0)
    np.testing.assert_allclose(norms ** 2, values[::-1][:5], rtol=1e-10)
    np.testing.assert_allclose(C @ (B / norms), (B / norms) * norms ** 2, atol=1e-9)
    # the first entry of (relatively, up to SIGN_TIE_TOL) largest magnitude is positive; the
    # grid's symmetry ties entries exactly (column 4: +-0.608), so rounding must not decide
    magnitude = np.abs(B)
    first = np.argmax(magnitude >= (1 - SIGN_TIE_TOL) * magnitude.max(axis=0), axis=0)
    assert np.all(B[first, np.arange(5)] > 0)


def test_synthetic_model_holds_truth_and_data():
    model = EllipticPDE(n=10, element="P1", n_modes=5, prior_sd=0.5, noise_sd=0.01, rng=rng_seed(3))
    assert model.dim == 5 and model.true_theta.shape == (5,)
    assert model.observations.shape == (121,)
    residual = model.observations - model.forward(model.true_theta)
    assert np.std(residual) == pytest.approx(0.01, rel=0.3)
    again = EllipticPDE(n=10, element="P1", n_modes=5, prior_sd=0.5, noise_sd=0.01,
                        rng=np.random.default_rng(rng_seed(3)))
    np.testing.assert_array_equal(again.observations, model.observations)


def test_from_mat_reads_the_authors_problem(shared_data):
    model = EllipticPDE.from_mat(authors_file(shared_data))
    solver = model.solver
    assert solver.n_nodes == 961
    assert solver.n_elements == 1800
    assert solver.dirichlet_nodes.size == 62
    assert model.dim == 20
    assert model.observations.size == 121
    assert (model.noise_sd, model.prior_sd) == (0.1, 0.5)
    raw = scipy.io.loadmat(authors_file(shared_data), squeeze_me=True, struct_as_record=False)
    np.testing.assert_allclose(model.basis, raw["PDE"].evc_KL * raw["PDE"].rtev_KL, rtol=1e-15)
    np.testing.assert_array_equal(model.observations, raw["y"])
    # observation k at (floor(k / 11) / 10, (k mod 11) / 10), a node of the mesh
    k = np.arange(121)
    np.testing.assert_allclose(model.observation_points, np.column_stack([k // 11, k % 11]) / 10)
    P = solver.interpolation_matrix(model.observation_points)
    assert np.all(np.diff(P.indptr) == 1) and np.all(P.data == 1.0)


def test_synthetic_p1_basis_reproduces_the_authors_eigenvalues(shared_data):
    raw = scipy.io.loadmat(authors_file(shared_data), squeeze_me=True, struct_as_record=False)
    B = kl_basis(EllipticSolver(30, "P1").element_centres, n_modes=20)
    np.testing.assert_allclose(np.linalg.norm(B, axis=0), raw["PDE"].rtev_KL, rtol=1e-6)
    # well-separated modes agree up to sign with the authors' eigenvectors
    overlap = np.abs(np.sum(B / np.linalg.norm(B, axis=0) * raw["PDE"].evc_KL, axis=0))
    assert overlap[0] == pytest.approx(1.0, abs=1e-8)


# --------------------------------------------------------------------------------------------
# the KL basis does not depend on which basis of a repeated eigenvalue's eigenspace LAPACK returns


def symmetric_grid(n=8, length_scale=0.2):
    """Centres of the n x n Q1 grid and their covariance, with exactly repeated eigenvalues."""
    centres = EllipticSolver(n, "Q1").element_centres
    d2 = np.sum((centres[:, None] - centres[None]) ** 2, axis=-1)
    return centres, np.exp(-d2 / (2 * length_scale ** 2))


def clusters(values):
    starts = np.flatnonzero(np.r_[True, values[:-1] - values[1:] > CLUSTER_TOL * values[0]])
    return [slice(a, b) for a, b in zip(starts, np.r_[starts[1:], values.size])]


def test_canonical_eigenbasis_ignores_the_basis_of_each_eigenspace():
    _, C = symmetric_grid()
    values, vectors = np.linalg.eigh(C)
    values, vectors = values[::-1][:15], vectors[:, ::-1][:, :15]   # a gap follows mode 15
    groups = clusters(values)
    assert sum(g.stop - g.start == 2 for g in groups) == 6          # the grid's symmetric pairs
    rng = np.random.default_rng(rng_seed(0))
    rotated = vectors.copy()
    for g in groups:   # another orthonormal basis of every eigenspace (singletons: the sign)
        m = g.stop - g.start
        rotated[:, g] = vectors[:, g] @ np.linalg.qr(rng.standard_normal((m, m)))[0]
    assert np.abs(rotated - vectors).max() > 0.1
    a_values, a = canonical_eigenbasis(values, vectors)
    b_values, b = canonical_eigenbasis(values, rotated)
    np.testing.assert_allclose(b, a, rtol=0, atol=1e-13)
    np.testing.assert_array_equal(b_values, a_values)
    # still an orthonormal eigenbasis with the (cluster-mean) eigenvalues
    np.testing.assert_allclose(a.T @ a, np.eye(15), rtol=0, atol=1e-14)
    np.testing.assert_allclose(C @ a, a * a_values, rtol=0, atol=1e-13 * values[0])
    np.testing.assert_allclose(a_values, values, rtol=1e-14)


def test_kl_basis_does_not_depend_on_the_eigensolver():
    centres, C = symmetric_grid()
    B = kl_basis(centres, n_modes=12)                        # SciPy's eigh, a subset (syevr)
    values, vectors = np.linalg.eigh(C)                      # NumPy's, all of them (syevd)
    values, vectors = canonical_eigenbasis(values[::-1][:13], vectors[:, ::-1][:, :13])
    np.testing.assert_allclose(B, vectors[:, :12] * np.sqrt(values[:12]), rtol=0, atol=1e-13)
    lam = np.sum(B ** 2, axis=0)
    np.testing.assert_allclose(B.T @ B, np.diag(lam), rtol=0, atol=1e-13 * lam[0])
    np.testing.assert_allclose(C @ (B / np.sqrt(lam)), B / np.sqrt(lam) * lam, rtol=0,
                               atol=1e-13 * lam[0])
    np.testing.assert_allclose(lam, np.linalg.eigvalsh(C)[::-1][:12], rtol=1e-13)


def test_kl_basis_truncated_inside_a_repeated_eigenvalue():
    # modes 2 and 3 of the grid share an eigenvalue: n_modes=2 keeps the first canonical vector
    centres, _ = symmetric_grid()
    np.testing.assert_allclose(kl_basis(centres, n_modes=2), kl_basis(centres, n_modes=3)[:, :2],
                               rtol=0, atol=1e-13)
    # far-apart points: C = I, one eigenspace of dimension 8, which a cut at any n_modes splits
    far = 10.0 * np.column_stack([np.arange(8), np.arange(8) % 3])
    full = kl_basis(far, n_modes=8)
    np.testing.assert_allclose(full.T @ full, np.eye(8), rtol=0, atol=1e-14)
    for n_modes in (1, 3, 7):
        np.testing.assert_array_equal(kl_basis(far, n_modes=n_modes), full[:, :n_modes])


_SNAPSHOT = """
import sys
import numpy as np
import rnshmc
from rnshmc.models import EllipticPDE
arrays = {"rnshmc_file": np.array(rnshmc.__file__)}
for element in ("Q1", "P1"):
    model = EllipticPDE(n=30, element=element, rng=0)
    arrays[element + "_basis"] = model.basis
    arrays[element + "_true_theta"] = model.true_theta
    arrays[element + "_observations"] = model.observations
    arrays[element + "_log_density"] = np.array(model.log_density(np.full(model.dim, 0.1)))
np.savez(sys.argv[1], **arrays)
"""


def model_in_subprocess(path, threads):
    """EllipticPDE(n=30, rng=0), Q1 and P1, built by a new interpreter with this BLAS thread
    count; it imports the rnshmc this test imported (a checkout or an installed wheel)."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads),
               MKL_NUM_THREADS=str(threads))
    here = os.path.dirname(os.path.dirname(os.path.abspath(rnshmc.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([here] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    subprocess.run([sys.executable, "-c", _SNAPSHOT, str(path)], env=env, cwd=path.parent,
                   check=True, timeout=300)
    return np.load(path)


def test_synthetic_model_is_the_same_under_any_blas_thread_count(tmp_path):
    """EllipticPDE(n=30, rng=0) is the same model, bit for bit, under 1 and 2 BLAS threads
    (it once was not: basis vectors of repeated eigenvalues rotated, signs flipped; log
    density at 0.1: -61.52 and -62.23; then LAPACK's eigenvectors still differed in the last
    bits, its tridiagonal reduction summing in a thread-dependent order, until the basis was
    computed on one BLAS thread). (On one core, two threads may or may not sum differently;
    the test holds either way.)"""
    one = model_in_subprocess(tmp_path / "one.npz", 1)
    two = model_in_subprocess(tmp_path / "two.npz", 2)
    assert str(one["rnshmc_file"]) == str(two["rnshmc_file"]) == os.path.abspath(rnshmc.__file__)
    for element in ("Q1", "P1"):
        for part in ("basis", "true_theta", "observations", "log_density"):
            np.testing.assert_array_equal(two[f"{element}_{part}"], one[f"{element}_{part}"])


# --------------------------------------------------------------------------------------------
# as a sampler target; failure modes; pickling; bad inputs


def test_hmc_runs_on_the_model():
    model = EllipticPDE(n=10, element="P1", n_modes=8, rng=rng_seed(0))
    result = rnshmc.HMC(model, step_size=0.16, n_steps=10).sample(
        draws=50, tune=0, chains=1, rng=rng_seed(0), init=np.zeros(model.dim), progress=False)
    assert result.samples.shape == (1, 50, model.dim)
    assert np.all(np.isfinite(result.samples)) and np.all(np.isfinite(result.log_density))
    assert result.acceptance_rate[0] > 0.3


def test_hmc_with_default_initial_points_and_thread_pool():
    from concurrent.futures import ThreadPoolExecutor
    model = EllipticPDE(n=8, element="Q1", n_modes=5, rng=rng_seed(1))
    sampler = rnshmc.HMC(model, step_size=0.16, n_steps=10)
    serial = sampler.sample(draws=30, tune=0, chains=2, rng=rng_seed(0), progress=False)
    assert np.all(np.isfinite(serial.samples))
    with ThreadPoolExecutor(2) as pool:   # each chain gets a spawned target with its own scratch
        threaded = sampler.sample(draws=30, tune=0, chains=2, rng=rng_seed(0), progress=False,
                                  pool=pool)
    np.testing.assert_array_equal(threaded.samples, serial.samples)


def test_authors_problem_under_hmc(shared_data):
    model = EllipticPDE.from_mat(authors_file(shared_data))
    result = rnshmc.HMC(model, step_size=0.16, n_steps=10).sample(
        draws=50, tune=0, chains=1, rng=rng_seed(0), init=np.zeros(model.dim), progress=False)
    assert np.all(np.isfinite(result.samples)) and result.acceptance_rate[0] > 0.3


def test_overflowing_coefficient_gives_infinite_potential(small_models):
    model = small_models["P1"]
    q = np.full(model.dim, 1e4)                   # kappa = exp(huge) overflows
    assert model.potential(q) == np.inf
    U, grad = model._ctarget.eval_potential_and_gradient(q)
    assert U == np.inf and np.all(np.isnan(grad))
    assert model._ctarget.eval_potential(np.full(model.dim, np.nan)) == np.inf
    with pytest.raises(FloatingPointError):
        model.forward(q)
    with pytest.raises(FloatingPointError):
        model.jacobian(q)
    # and the target recovers
    assert np.isfinite(model.potential(np.zeros(model.dim)))


def test_pickle_round_trip(small_models):
    for model in small_models.values():
        q = np.linspace(-0.5, 0.5, model.dim)
        clone = pickle.loads(pickle.dumps(model))
        assert clone.potential_and_gradient(q)[0] == model.potential(q)
        np.testing.assert_array_equal(clone.potential_and_gradient(q)[1],
                                      model.potential_and_gradient(q)[1])
        np.testing.assert_array_equal(clone.true_theta, model.true_theta)
        target = pickle.loads(pickle.dumps(model._ctarget))
        assert target.eval_potential(q) == model.potential(q)


def test_bad_inputs_raise(small_models):
    model = small_models["Q1"]
    with pytest.raises(ValueError, match="shape"):
        model.potential(np.zeros(model.dim + 1))
    with pytest.raises(ValueError, match="non-finite"):
        model.log_density_gradient(np.full(model.dim, np.nan))
    with pytest.raises(ValueError, match="n_modes"):
        EllipticPDE(n=3, n_modes=100)
    with pytest.raises(ValueError, match="noise_sd"):
        EllipticPDE(n=4, n_modes=2, noise_sd=0.0)
    with pytest.raises(ValueError, match="prior_sd"):
        EllipticPDE(n=4, n_modes=2, prior_sd=np.nan)
    with pytest.raises(ValueError, match="length_scale"):
        EllipticPDE(n=4, n_modes=2, length_scale=-1.0)
    with pytest.raises(ValueError, match="obs_grid"):
        EllipticPDE(n=4, n_modes=2, obs_grid=1)
    with pytest.raises(ValueError, match="element"):
        EllipticPDE(n=4, n_modes=2, element="Q2")
    solver = EllipticSolver(4, "Q1")
    with pytest.raises(ValueError, match="basis"):
        EllipticPDE.from_solver(solver, np.ones((3, 2)), np.zeros(4), observation_grid(2))
    with pytest.raises(ValueError, match="observation_points"):
        EllipticPDE.from_solver(solver, np.ones((16, 2)), np.zeros(5), observation_grid(2))
    with pytest.raises(TypeError, match="EllipticSolver"):
        EllipticPDE.from_solver(object(), np.ones((16, 2)), np.zeros(4), observation_grid(2))


def test_from_mat_rejects_another_file(shared_data):
    with pytest.raises(ValueError, match="ePDE"):
        EllipticPDE.from_mat(shared_data / "rnshmc-original" / "Sigma.mat")


def test_density_flops_grows_as_the_banded_factorisation():
    """The operation count surrogate samplers price steps against: dominated by the banded
    Cholesky factorisation, n kd^2 with n ~ N^2 unknowns and kd ~ N on an N x N mesh, so it
    grows about 16x when the mesh side doubles (assembly and log kappa grow 4x)."""
    small = rnshmc.models.EllipticPDE(n=16, element="P1", n_modes=5, rng=rng_seed(0))
    large = rnshmc.models.EllipticPDE(n=32, element="P1", n_modes=5, rng=rng_seed(0))
    solver = small.solver
    assert small.density_flops > solver.free_nodes.size * solver.bandwidth ** 2
    assert 10 < large.density_flops / small.density_flops < 16.5
