"""rnshmc.fem.EllipticSolver (and the LAPACK wrappers it uses) against independent references.

The reference here is plain NumPy/scipy.sparse: element matrices from quadrature of the basis
function gradients (not the solver's closed forms), COO assembly of the full matrix, Dirichlet
values eliminated by slicing, and ``scipy.sparse.linalg.spsolve``.
"""
import pickle

import numpy as np
import pytest
import scipy.io
import scipy.linalg
import scipy.sparse as sp
import scipy.sparse.linalg as spl

from rnshmc.fem import EllipticSolver, paper_dirichlet_values, structured_mesh
from rnshmc._kernels import _lapack


# --------------------------------------------------------------------------------------------
# independent reference


def reference_element_matrices(nodes, elements):
    """Stiffness matrices by quadrature of grad(phi_a) . grad(phi_b) (2 x 2 Gauss for quads)."""
    p = nodes[elements]
    if elements.shape[1] == 3:
        # P1: gradients from the inverse of [[1, x, y]] per triangle
        M = np.concatenate([np.ones((len(elements), 3, 1)), p], axis=2)
        C = np.linalg.inv(M)                          # columns: coefficients of phi_a
        grads = np.transpose(C[:, 1:, :], (0, 2, 1))  # (e, a, 2)
        area = 0.5 * np.abs(np.linalg.det(M))
        return area[:, None, None] * grads @ np.transpose(grads, (0, 2, 1))
    g = 1.0 / np.sqrt(3.0)
    K = np.zeros((len(elements), 4, 4))
    ref = np.array([[-1, -1], [1, -1], [1, 1], [-1, 1]], float)
    for s in (-g, g):
        for t in (-g, g):
            dN = np.column_stack([ref[:, 0] * (1 + ref[:, 1] * t), ref[:, 1] * (1 + ref[:, 0] * s)]) / 4
            J = np.einsum("ak,eal->ekl", dN, p)       # d x / d (s, t)
            detJ = np.linalg.det(J)
            grads = np.einsum("ak,elk->eal", dN, np.linalg.inv(J))   # J^-1 grad_ref
            K += np.abs(detJ)[:, None, None] * grads @ np.transpose(grads, (0, 2, 1))
    return K


def reference_matrix(nodes, elements, kappa):
    K = kappa[:, None, None] * reference_element_matrices(nodes, elements)
    m = elements.shape[1]
    rows = np.repeat(elements, m, axis=1).ravel()
    cols = np.tile(elements, (1, m)).ravel()
    return sp.coo_matrix((K.ravel(), (rows, cols)), shape=(len(nodes), len(nodes))).tocsr()


def reference_solve(nodes, elements, dirichlet, kappa, g=None, load=None):
    A = reference_matrix(nodes, elements, kappa)
    if g is None:
        g = np.where(nodes[dirichlet, 1] <= 0.5, nodes[dirichlet, 0], 1 - nodes[dirichlet, 0])
    free = np.setdiff1d(np.arange(len(nodes)), dirichlet)
    b = -A[free][:, dirichlet] @ g
    if load is not None:
        b = b + load[free]
    u = np.empty(len(nodes))
    u[dirichlet] = g
    u[free] = spl.spsolve(A[free][:, free].tocsc(), b)
    return u


def authors_mesh(shared_data):
    m = scipy.io.loadmat(shared_data / "rnshmc-original" / "ePDE.mat", squeeze_me=True,
                         struct_as_record=False)["PDE"]
    return m.node, m.elem.astype(int) - 1, m.bdNode.astype(int) - 1


def random_kappa(solver, seed=0):
    return np.exp(np.random.default_rng(seed).normal(0.0, 1.0, solver.n_elements))


# --------------------------------------------------------------------------------------------
# LAPACK band wrappers


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("n, kd", [(1, 0), (5, 2), (40, 7), (30, 40)])
def test_band_cholesky_wrappers_match_scipy(lower, n, kd):
    rng = np.random.default_rng(n + kd)
    kd = min(kd, n - 1)
    A = np.zeros((n, n))
    for k in range(kd + 1):
        v = rng.normal(size=n - k)
        A += np.diag(v, k) + (np.diag(v, -k) if k else 0)
    A += np.eye(n) * (2 * kd + 2 + np.abs(A).sum(axis=1).max())
    band = np.zeros((kd + 1, n))
    for k in range(kd + 1):
        if lower:
            band[k, :n - k] = np.diag(A, -k)
        else:
            band[kd - k, k:] = np.diag(A, k)
    factor = band.copy(order="F")
    assert _lapack._pbtrf_memview(lower, factor) == 0
    expected = scipy.linalg.cholesky_banded(band, lower=lower)
    np.testing.assert_allclose(factor, expected, rtol=1e-12, atol=1e-12 * np.abs(expected).max())
    B = np.asfortranarray(rng.normal(size=(n, 3)))
    X = B.copy(order="F")
    assert _lapack._pbtrs_memview(lower, factor, X) == 0
    np.testing.assert_allclose(A @ X, B, rtol=1e-10, atol=1e-10)


def test_band_cholesky_reports_indefinite():
    band = np.asfortranarray([[1.0, -1.0, 1.0]])   # diagonal matrix diag(1, -1, 1)
    assert _lapack._pbtrf_memview(True, band) == 2


# --------------------------------------------------------------------------------------------
# meshes


@pytest.mark.parametrize("element, per_square", [("Q1", 1), ("P1", 2)])
def test_structured_mesh_sizes_and_bandwidth(element, per_square):
    n = 7
    solver = EllipticSolver(n, element)
    assert solver.nodes.shape == ((n + 1) ** 2, 2)
    assert solver.elements.shape == (per_square * n * n, 4 if element == "Q1" else 3)
    assert solver.dirichlet_nodes.size == 2 * (n + 1)
    assert np.all(np.isin(solver.nodes[solver.dirichlet_nodes, 1], [0.0, 1.0]))
    assert solver.free_nodes.size == (n + 1) * (n - 1)
    # x1-major numbering of the unknowns: half-bandwidth n for Q1 and for P1
    assert solver.bandwidth == n
    np.testing.assert_allclose(solver.element_centres, solver.nodes[solver.elements].mean(axis=1))
    np.testing.assert_array_equal(
        solver.dirichlet_values, paper_dirichlet_values(solver.nodes[solver.dirichlet_nodes]))


def test_structured_p1_mesh_is_the_authors(shared_data):
    nodes, elements, dirichlet = authors_mesh(shared_data)
    mine = structured_mesh(30, "P1")
    np.testing.assert_allclose(mine[0], nodes, atol=1e-15)
    np.testing.assert_array_equal(mine[1], elements)
    np.testing.assert_array_equal(mine[2], np.sort(dirichlet))


# --------------------------------------------------------------------------------------------
# the assembled matrix and the banded solve


def solver_cases():
    return [EllipticSolver(9, "Q1"), EllipticSolver(9, "P1"), permuted_p1_solver(9)]


def permuted_p1_solver(n, seed=3):
    """The structured P1 mesh with nodes and elements shuffled: a general mesh whose natural
    order has a large bandwidth (so reverse Cuthill-McKee is used)."""
    nodes, elements, dirichlet = structured_mesh(n, "P1")
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(nodes))           # new index of old node i is inverse[i]
    inverse = np.argsort(perm)
    elements = inverse[elements][rng.permutation(len(elements))][:, [1, 2, 0]]
    return EllipticSolver.from_mesh(nodes[perm], elements, inverse[dirichlet])


@pytest.mark.parametrize("case", range(3))
def test_assembled_matrix_symmetric_positive_definite_and_equal_to_reference(case):
    solver = solver_cases()[case]
    kappa = random_kappa(solver, case)
    A = solver.stiffness_matrix(kappa)
    assert (A - A.T).count_nonzero() == 0 or abs(A - A.T).max() == 0.0
    assert np.linalg.eigvalsh(A.toarray()).min() > 0
    ref = reference_matrix(solver.nodes, solver.elements, kappa)
    free = solver.free_nodes
    np.testing.assert_allclose(A.toarray(), ref[free][:, free].toarray(), atol=1e-12)
    # the band holds every entry
    rows, cols = A.nonzero()
    assert np.abs(rows - cols).max() <= solver.bandwidth


def natural_order_bandwidth(solver, kappa):
    """Half-bandwidth of the stiffness matrix over the free nodes in the mesh's own order."""
    free = np.sort(solver.free_nodes)
    ref = reference_matrix(solver.nodes, solver.elements, kappa)[free][:, free].tocoo()
    return int(np.abs(ref.row - ref.col).max())


def assert_band_holds_the_matrix_and_beats_the_natural_order(solver, kappa):
    """Properties of the band ordering, not the exact output of SciPy's heuristic (reverse
    Cuthill-McKee gave half-bandwidth 30 on the authors' mesh before SciPy 1.17, 29 since)."""
    rows, cols = solver.stiffness_matrix(kappa).nonzero()
    assert np.abs(rows - cols).max() <= solver.bandwidth
    assert solver.bandwidth <= natural_order_bandwidth(solver, kappa)


def test_general_mesh_uses_reverse_cuthill_mckee():
    solver = permuted_p1_solver(9)
    assert solver.ordering == "reverse Cuthill-McKee"
    kappa = random_kappa(solver, 0)
    assert_band_holds_the_matrix_and_beats_the_natural_order(solver, kappa)
    assert solver.bandwidth < natural_order_bandwidth(solver, kappa)


@pytest.mark.parametrize("case", range(3))
def test_banded_solve_matches_spsolve_on_the_same_matrix(case):
    solver = solver_cases()[case]
    kappa = random_kappa(solver, 10 + case)
    A, b = solver.linear_system(kappa)
    u = solver.solve(kappa)
    np.testing.assert_allclose(u[solver.free_nodes], spl.spsolve(A.tocsc(), b), rtol=1e-11, atol=1e-12)
    np.testing.assert_array_equal(u[solver.dirichlet_nodes], solver.dirichlet_values)


@pytest.mark.parametrize("case", range(3))
def test_solve_matches_independent_reference(case):
    solver = solver_cases()[case]
    kappa = random_kappa(solver, 20 + case)
    expected = reference_solve(solver.nodes, solver.elements, solver.dirichlet_nodes, kappa)
    np.testing.assert_allclose(solver.solve(kappa), expected, rtol=1e-11, atol=1e-12)


def test_solve_on_the_authors_mesh_matches_reference(shared_data):
    solver = EllipticSolver.from_mesh(*authors_mesh(shared_data))
    assert (solver.n_nodes, solver.n_elements, solver.dirichlet_nodes.size) == (961, 1800, 62)
    kappa = random_kappa(solver, 5)
    assert_band_holds_the_matrix_and_beats_the_natural_order(solver, kappa)
    expected = reference_solve(solver.nodes, solver.elements, solver.dirichlet_nodes, kappa)
    np.testing.assert_allclose(solver.solve(kappa), expected, rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("case", range(3))
def test_element_contraction_sums_to_the_energy(case):
    """The C element contraction kappa_e u_e^T S_e v_e (used by the adjoint gradient) summed
    over the elements is u^T A v with the full reference matrix."""
    solver = solver_cases()[case]
    kappa = random_kappa(solver, 30 + case)
    rng = np.random.default_rng(case)
    u, v = rng.normal(size=(2, solver.n_nodes))
    per_element = solver._system.element_contraction(
        kappa, u[np.argsort(solver._ext)], v[np.argsort(solver._ext)])
    A = reference_matrix(solver.nodes, solver.elements, kappa)
    assert per_element.sum() == pytest.approx(u @ (A @ v), rel=1e-12)


def test_constant_kappa_does_not_change_the_solution():
    solver = EllipticSolver(6, "P1")
    u1 = solver.solve(np.ones(solver.n_elements))
    np.testing.assert_allclose(solver.solve(np.full(solver.n_elements, 7.5)), u1, rtol=1e-12)


# --------------------------------------------------------------------------------------------
# manufactured solutions


def exact(x):
    return np.cos(np.pi * x[:, 0]) * (1 + x[:, 1] ** 2)


def source(x):
    # -laplace(exact); zero flux at x1 = 0, 1 holds for exact
    return np.cos(np.pi * x[:, 0]) * (np.pi ** 2 * (1 + x[:, 1] ** 2) - 2)


def l2_error(solver, u):
    """|u_h - exact|_L2 by a 3 x 3 Gauss rule on the squares (P1: per triangle, by mapping)."""
    g = np.array([-np.sqrt(0.6), 0.0, np.sqrt(0.6)]) / 2 + 0.5
    w = np.array([5.0, 8.0, 5.0]) / 18
    p = solver.nodes[solver.elements]
    total = 0.0
    for i, s in enumerate(g):
        for j, t in enumerate(g):
            if solver.element == "Q1":
                shape = np.array([(1 - s) * (1 - t), s * (1 - t), s * t, (1 - s) * t])
                jac = (p[:, 2, 0] - p[:, 0, 0]) * (p[:, 2, 1] - p[:, 0, 1])
            else:   # collapsed square (Duffy) onto the triangle: l1 = s, l2 = t (1 - s)
                shape = np.array([1 - s - t * (1 - s), s, t * (1 - s)])
                d1, d2 = p[:, 1] - p[:, 0], p[:, 2] - p[:, 0]
                jac = np.abs(d1[:, 0] * d2[:, 1] - d1[:, 1] * d2[:, 0]) * (1 - s)
            x = np.einsum("a,eak->ek", shape, p)
            uh = u[solver.elements] @ shape
            total += w[i] * w[j] * np.sum(jac * (uh - exact(x)) ** 2)
    return np.sqrt(total)


@pytest.mark.parametrize("element", ["Q1", "P1"])
def test_manufactured_solution_converges_at_rate_two(element):
    errors = []
    for n in (8, 16, 32):
        solver = EllipticSolver(n, element)
        g = exact(solver.nodes[solver.dirichlet_nodes])
        u = solver.solve(np.ones(solver.n_elements), source=source, dirichlet_values=g)
        errors.append(l2_error(solver, u))
    rates = np.log2(np.array(errors[:-1]) / np.array(errors[1:]))
    assert np.all((rates > 1.85) & (rates < 2.15)), (errors, rates)
    assert errors[-1] < 2e-3


@pytest.mark.parametrize("element", ["Q1", "P1"])
def test_layered_coefficient_is_solved_exactly(element):
    """kappa = k1 below x2 = 1/2 and k2 above: the exact u is piecewise linear in x2 (flux
    continuity at the interface), which both element types reproduce at the nodes."""
    n, k1, k2 = 8, 0.3, 4.0
    solver = EllipticSolver(n, element)
    kappa = np.where(solver.element_centres[:, 1] < 0.5, k1, k2)
    slope1 = 1.0 / (0.5 + 0.5 * k1 / k2)          # u(0) = 0, u(1) = 1
    def u_exact(x2):
        return np.where(x2 <= 0.5, slope1 * x2, slope1 * 0.5 + slope1 * k1 / k2 * (x2 - 0.5))
    g = u_exact(solver.nodes[solver.dirichlet_nodes, 1])
    u = solver.solve(kappa, dirichlet_values=g)
    np.testing.assert_allclose(u, u_exact(solver.nodes[:, 1]), atol=1e-12)
    # the stored boundary values are untouched by a call with other values
    np.testing.assert_allclose(solver.solve(kappa), reference_solve(
        solver.nodes, solver.elements, solver.dirichlet_nodes, kappa), atol=1e-12)


# --------------------------------------------------------------------------------------------
# interpolation, pickling, bad inputs


@pytest.mark.parametrize("case", range(3))
def test_interpolation_reproduces_linear_functions(case):
    solver = solver_cases()[case]
    points = np.random.default_rng(case).uniform(0, 1, size=(25, 2))
    points = np.vstack([points, solver.nodes[:5], [[0.0, 0.0], [1.0, 1.0]]])
    P = solver.interpolation_matrix(points)
    f = 0.3 + 2 * solver.nodes[:, 0] - 1.5 * solver.nodes[:, 1]
    np.testing.assert_allclose(P @ f, 0.3 + 2 * points[:, 0] - 1.5 * points[:, 1], atol=1e-12)
    with pytest.raises(ValueError, match="outside"):
        solver.interpolation_matrix([[1.5, 0.5]])


def test_pickle_round_trip():
    for solver in solver_cases():
        clone = pickle.loads(pickle.dumps(solver))
        kappa = random_kappa(solver, 1)
        np.testing.assert_array_equal(clone.solve(kappa), solver.solve(kappa))
        np.testing.assert_array_equal(clone.free_nodes, solver.free_nodes)


def test_bad_inputs_raise():
    solver = EllipticSolver(4, "Q1")
    with pytest.raises(ValueError, match="shape"):
        solver.solve(np.ones(3))
    for bad in (np.nan, -1.0, 0.0, np.inf):
        kappa = np.ones(solver.n_elements)
        kappa[2] = bad
        with pytest.raises(ValueError, match="finite and positive"):
            solver.solve(kappa)
    with pytest.raises(ValueError, match="dirichlet_values"):
        solver.solve(np.ones(solver.n_elements), dirichlet_values=np.ones(3))
    with pytest.raises(TypeError, match="callable"):
        solver.solve(np.ones(solver.n_elements), source=np.ones(3))
    for n in (1, 2.5, "3", True):
        with pytest.raises(ValueError, match="n must be"):
            EllipticSolver(n)
    with pytest.raises(ValueError, match="element"):
        EllipticSolver(4, "P2")
    nodes, elements, dirichlet = structured_mesh(3, "P1")
    with pytest.raises(ValueError, match="shape"):
        EllipticSolver.from_mesh(nodes[:, :1], elements, dirichlet)
    with pytest.raises(ValueError, match="triangles"):
        EllipticSolver.from_mesh(nodes, elements[:, :2], dirichlet)
    with pytest.raises(ValueError, match="outside"):
        EllipticSolver.from_mesh(nodes, elements + 100, dirichlet)
    with pytest.raises(ValueError, match="at least one Dirichlet"):
        EllipticSolver.from_mesh(nodes, elements, [])
    with pytest.raises(ValueError, match="repeated"):
        EllipticSolver.from_mesh(nodes, elements, [0, 0, 1])
    with pytest.raises(ValueError, match="repeats a node"):
        EllipticSolver.from_mesh(nodes, np.vstack([elements, [[0, 0, 1]]]), dirichlet)
    flat = nodes.copy()
    flat[:, 1] = 0.0
    with pytest.raises(ValueError, match="degenerate"):
        EllipticSolver.from_mesh(flat, elements, dirichlet)
    with pytest.raises(ValueError, match="belongs to no element"):
        EllipticSolver.from_mesh(np.vstack([nodes, [[0.5, 0.5]]]), elements, dirichlet)
    with pytest.raises(ValueError, match="non-finite"):
        EllipticSolver.from_mesh(np.where(nodes == 0, np.nan, nodes), elements, dirichlet)
    with pytest.raises(ValueError, match="integer"):
        EllipticSolver.from_mesh(nodes, elements + 0.5, dirichlet)
