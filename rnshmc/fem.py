"""Finite elements for the elliptic PDE of the papers' inverse problem.

-div(kappa grad u) = f on the unit square, kappa constant on each element, with Dirichlet
values on some nodes (the paper: u = x1 on x2 = 0 and u = 1 - x1 on x2 = 1) and zero flux on
the rest of the boundary (the natural condition of the weak form).

The mesh work happens once, here, in NumPy: element stiffness matrices for kappa = 1, a band
ordering of the free nodes, and for every element entry its position in LAPACK band storage
(or, for a Dirichlet column, its contribution to the right-hand side). Each solve is then
done in C (``rnshmc._kernels._fem.BandSystem``): one multiply-add per stored entry to
assemble, LAPACK's banded Cholesky ``dpbtrf``, and ``dpbtrs`` for the solve, whose factor
the adjoint and sensitivity solves reuse.
"""
import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import reverse_cuthill_mckee

from ._kernels._fem import BandSystem

__all__ = ["EllipticSolver", "structured_mesh", "paper_dirichlet_values"]

# Q1 stiffness of a square (any size: in 2-d it is scale invariant), nodes counter-clockwise
_Q1_STIFFNESS = np.array([[4.0, -1.0, -2.0, -1.0],
                          [-1.0, 4.0, -1.0, -2.0],
                          [-2.0, -1.0, 4.0, -1.0],
                          [-1.0, -2.0, -1.0, 4.0]]) / 6.0

# The lower triangle is stored: OpenBLAS runs the rank-1 updates of dpbtf2 for the upper
# triangle multithreaded, which costs ~10x at this size when it has more than one thread.
_LOWER = True


def structured_mesh(n, element="Q1"):
    """The uniform n x n mesh of the unit square.

    Parameters
    ----------
    n : int
        Squares per side (n + 1 nodes per side), at least 2.
    element : {"Q1", "P1"}
        Bilinear squares, or each square cut into two linear triangles along its diagonal from
        (x1, x2) to (x1 + h, x2 + h), numbered as in the authors' code.

    Returns
    -------
    nodes : ndarray of shape ((n + 1)**2, 2)
        Node (i, j) at (i / n, j / n) has index i * (n + 1) + j (x1-major, as the authors').
    elements : ndarray of shape (n**2, 4) or (2 n**2, 3)
        Node indices per element, counter-clockwise. Square (i, j) is element i * n + j; for
        P1 its two triangles are elements i * n + j and n**2 + i * n + j.
    dirichlet_nodes : ndarray
        The nodes on x2 = 0 and x2 = 1, ascending.
    """
    n = _check_n(n)
    element = _check_element(element)
    x = np.linspace(0.0, 1.0, n + 1)
    i, j = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
    nodes = np.column_stack([x[i.ravel()], x[j.ravel()]])
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    n00 = (i * (n + 1) + j).ravel()
    n10 = n00 + (n + 1)
    n11 = n10 + 1
    n01 = n00 + 1
    if element == "Q1":
        elements = np.column_stack([n00, n10, n11, n01])
    else:
        elements = np.vstack([np.column_stack([n10, n11, n00]), np.column_stack([n01, n00, n11])])
    jj = np.arange((n + 1) ** 2) % (n + 1)
    dirichlet = np.flatnonzero((jj == 0) | (jj == n))
    return nodes, elements.astype(np.intp), dirichlet


def paper_dirichlet_values(points):
    """The paper's boundary values: u = x1 on x2 = 0, u = 1 - x1 on x2 = 1.

    Points with x2 <= 1/2 get x1, the others 1 - x1.
    """
    points = np.asarray(points, dtype=np.float64)
    return np.where(points[:, 1] <= 0.5, points[:, 0], 1.0 - points[:, 0])


class EllipticSolver:
    """Finite-element solver of -div(kappa grad u) = 0 on the unit square, kappa per element.

    Dirichlet conditions u = x1 on x2 = 0 and u = 1 - x1 on x2 = 1 (lifted into the
    right-hand side), zero flux on x1 = 0 and x1 = 1.

    Parameters
    ----------
    n : int
        The structured n x n mesh of the unit square (see :func:`structured_mesh`).
    element : {"Q1", "P1"}
        Bilinear quadrilaterals (the paper's text) or each square cut into two linear
        triangles (the authors' code).

    Attributes
    ----------
    nodes : ndarray of shape (n_nodes, 2)
    elements : ndarray of shape (n_elements, 3) or (n_elements, 4)
        Node indices of each element.
    dirichlet_nodes : ndarray of shape (n_dirichlet,)
    dirichlet_values : ndarray of shape (n_dirichlet,)
        Values of u at ``dirichlet_nodes``.
    free_nodes : ndarray of shape (n_free,)
        The unknowns, in the order of the band matrix.
    bandwidth : int
        Half-bandwidth of the band matrix (n for the structured meshes).
    element_centres : ndarray of shape (n_elements, 2)
        Centroids of the elements.
    element : str
        "Q1" or "P1".

    Notes
    -----
    The stiffness matrix over the free nodes is assembled straight into LAPACK band storage
    (lower triangle, ldab = bandwidth + 1), factored by the banded Cholesky ``dpbtrf`` and
    solved by ``dpbtrs``. On the structured meshes the free nodes are numbered x1-major (a
    column of n - 1 free nodes after another), which gives half-bandwidth n for Q1 and P1. For
    a general mesh the natural order of the free nodes and the reverse Cuthill-McKee order
    are compared and the one with the smaller bandwidth is used.

    Examples
    --------
    >>> import numpy as np
    >>> from rnshmc.fem import EllipticSolver
    >>> solver = EllipticSolver(n=8, element="P1")
    >>> u = solver.solve(np.ones(len(solver.elements)))
    >>> u.shape
    (81,)
    """

    def __init__(self, n=30, element="Q1"):
        nodes, elements, dirichlet = structured_mesh(n, element)
        self.n = int(n)
        self._setup(nodes, elements, dirichlet, None, _check_element(element), structured=True)

    @classmethod
    def from_mesh(cls, nodes, elements, dirichlet_nodes, dirichlet_values=None):
        """A solver on a triangle mesh given as nodes and elements (linear P1 elements).

        Parameters
        ----------
        nodes : array_like of shape (n_nodes, 2)
            Node coordinates, in the unit square for the default boundary values.
        elements : array_like of int, shape (n_elements, 3)
            Node indices (0-based) of each triangle, either orientation.
        dirichlet_nodes : array_like of int
            The nodes (0-based) where u is prescribed; the rest of the boundary has zero flux.
        dirichlet_values : array_like, optional
            u at ``dirichlet_nodes``. Default: the paper's, x1 where x2 <= 1/2 and 1 - x1
            elsewhere (see :func:`paper_dirichlet_values`).

        Returns
        -------
        EllipticSolver
        """
        nodes = np.array(nodes, dtype=np.float64)
        if nodes.ndim != 2 or nodes.shape[1] != 2 or nodes.shape[0] < 3:
            raise ValueError(f"nodes must have shape (n_nodes, 2), got {nodes.shape}")
        if not np.all(np.isfinite(nodes)):
            raise ValueError("nodes contain non-finite coordinates")
        elements = _index_array(elements, "elements", nodes.shape[0])
        if elements.ndim != 2 or elements.shape[1] != 3 or elements.shape[0] < 1:
            raise ValueError(f"elements must have shape (n_elements, 3) (triangles), got {elements.shape}")
        dirichlet = _index_array(dirichlet_nodes, "dirichlet_nodes", nodes.shape[0]).ravel()
        if dirichlet.size == 0:
            raise ValueError("need at least one Dirichlet node (else u is defined up to a constant)")
        if np.unique(dirichlet).size != dirichlet.size:
            raise ValueError("dirichlet_nodes contains repeated nodes")
        self = cls.__new__(cls)
        self.n = None
        self._setup(nodes, elements, dirichlet, dirichlet_values, "P1", structured=False)
        return self

    # ---------------------------------------------------------------------------------------
    # set-up

    def _setup(self, nodes, elements, dirichlet, dirichlet_values, element, structured):
        n_nodes = nodes.shape[0]
        for k, row in enumerate(np.sort(elements, axis=1)):
            if np.any(row[1:] == row[:-1]):
                raise ValueError(f"element {k} repeats a node: {elements[k].tolist()}")
        used = np.zeros(n_nodes, bool)
        used[elements.ravel()] = True
        if not used.all():
            raise ValueError(f"node {np.flatnonzero(~used)[0]} belongs to no element")
        if dirichlet_values is None:
            dirichlet_values = paper_dirichlet_values(nodes[dirichlet])
        dirichlet_values = np.array(dirichlet_values, dtype=np.float64).ravel()
        if dirichlet_values.shape != dirichlet.shape or not np.all(np.isfinite(dirichlet_values)):
            raise ValueError(f"dirichlet_values must be {dirichlet.size} finite values")
        self.nodes = nodes
        self.elements = elements
        self.element = element
        self.dirichlet_nodes = dirichlet
        self.dirichlet_values = dirichlet_values
        self.element_centres = nodes[elements].mean(axis=1)
        if element == "Q1":
            h = nodes[elements[:, 2]] - nodes[elements[:, 0]]
            self._element_size = h[:, 0]
            stiffness = np.broadcast_to(_Q1_STIFFNESS, (len(elements), 4, 4)).copy()
        else:
            stiffness = _p1_stiffness(nodes, elements)

        is_free = np.ones(n_nodes, bool)
        is_free[dirichlet] = False
        free = np.flatnonzero(is_free)
        n_free = free.size
        if n_free == 0:
            raise ValueError("every node is a Dirichlet node: nothing to solve")
        # band ordering of the unknowns
        local = np.full(n_nodes, -1)
        local[free] = np.arange(n_free)
        order, ordering = np.arange(n_free), "natural"
        if not structured:
            graph = _free_graph(elements, local, n_free)
            rcm = reverse_cuthill_mckee(graph, symmetric_mode=True)
            if _bandwidth(graph, rcm) < _bandwidth(graph, order):
                order, ordering = rcm, "reverse Cuthill-McKee"
        free = free[order]
        ext = np.empty(n_nodes, np.intp)   # extended index: unknowns, then Dirichlet nodes
        ext[free] = np.arange(n_free)
        ext[dirichlet] = n_free + np.arange(dirichlet.size)
        elem_ext = ext[elements]
        self.free_nodes = free
        self.ordering = ordering
        self._ext = ext
        self._elem_stiffness = stiffness

        # Scatter of every element entry: band entries of the stored triangle over the
        # unknowns, then one right-hand-side entry per free node of an element touching a
        # Dirichlet node (the lifting); grouped per element, in this order.
        n_e, m = elements.shape
        rows = np.broadcast_to(elem_ext[:, :, None], stiffness.shape)
        cols = np.broadcast_to(elem_ext[:, None, :], stiffness.shape)
        both_free = (rows < n_free) & (cols < n_free)
        kd = int(np.max(np.abs(rows - cols), where=both_free, initial=0))
        ldab = kd + 1
        band_size = ldab * n_free
        stored = both_free & ((rows >= cols) if _LOWER else (rows <= cols))
        band_pos = (rows - cols if _LOWER else kd + rows - cols) + cols * ldab
        lift_rows = (elem_ext < n_free) & (elem_ext >= n_free).any(axis=1)[:, None]
        mask = np.concatenate([stored.reshape(n_e, m * m), lift_rows], axis=1)
        positions = np.concatenate([band_pos.reshape(n_e, m * m), band_size + elem_ext], axis=1)
        ptr = np.zeros(n_e + 1, np.intp)
        np.cumsum(mask.sum(axis=1), out=ptr[1:])
        self._scatter_mask = mask
        self.bandwidth = kd
        self._system = BandSystem(
            np.ascontiguousarray(elem_ext.ravel()), np.ascontiguousarray(stiffness.ravel()),
            ptr, np.ascontiguousarray(positions[mask], dtype=np.intp),
            self._scatter_values(dirichlet_values), np.zeros(n_free), dirichlet_values.copy(),
            n_free, kd, _LOWER)

    def _scatter_values(self, dirichlet_values):
        """Values of the scatter entries for the Dirichlet values ``dirichlet_values``."""
        stiffness = self._elem_stiffness
        n_e, m = self.elements.shape
        g_ext = np.zeros(self.free_nodes.size + self.dirichlet_nodes.size)
        g_ext[self.free_nodes.size:] = dirichlet_values
        lift = -np.einsum("eab,eb->ea", stiffness, g_ext[self._ext[self.elements]])
        values = np.concatenate([stiffness.reshape(n_e, m * m), lift], axis=1)
        return np.ascontiguousarray(values[self._scatter_mask])

    # ---------------------------------------------------------------------------------------
    # public

    @property
    def n_nodes(self):
        """Number of nodes."""
        return self.nodes.shape[0]

    @property
    def n_elements(self):
        """Number of elements (the length of ``kappa``)."""
        return self.elements.shape[0]

    def solve(self, kappa, source=None, dirichlet_values=None):
        """Nodal values of the finite-element solution for one kappa per element.

        Parameters
        ----------
        kappa : array_like of shape (n_elements,)
            The coefficient on each element, finite and positive.
        source : callable, optional
            f(x) for x an ndarray of shape (m, 2), returning shape (m,): solve
            -div(kappa grad u) = f instead of the paper's f = 0 (for manufactured solutions).
            Integrated with a quadrature exact for quadratics (P1: 3 points per triangle,
            Q1: 2 x 2 Gauss points).
        dirichlet_values : array_like of shape (n_dirichlet,), optional
            u at ``dirichlet_nodes`` for this solve instead of ``self.dirichlet_values``.

        Returns
        -------
        ndarray of shape (n_nodes,)
        """
        kappa = self._check_kappa(kappa)
        scatter_val, load, g = self._boundary_data(source, dirichlet_values)
        info, u_ext = self._system.solve(kappa, scatter_val, load, g)
        if info != 0:
            raise np.linalg.LinAlgError(
                f"the stiffness matrix is not positive definite (LAPACK dpbtrf info={info})")
        return u_ext[self._ext]

    def linear_system(self, kappa, source=None, dirichlet_values=None):
        """The linear system the solver factors: A u_free = b over ``free_nodes``.

        Parameters
        ----------
        kappa, source, dirichlet_values
            As for :meth:`solve`.

        Returns
        -------
        A : scipy.sparse.csr_array of shape (n_free, n_free)
            Rebuilt from the band storage the C kernel assembled (rows and columns in the
            order of ``free_nodes``).
        b : ndarray of shape (n_free,)
        """
        kappa = self._check_kappa(kappa)
        scatter_val, load, _ = self._boundary_data(source, dirichlet_values)
        band, rhs = self._system.assembled(kappa, scatter_val, load)
        kd, n_free = self.bandwidth, self.free_nodes.size
        diagonals = [band[k, :n_free - k] for k in range(kd + 1)] if _LOWER else \
            [band[kd - k, k:] for k in range(kd + 1)]
        lower = sp.diags_array(diagonals, offsets=[-k for k in range(kd + 1)], shape=(n_free, n_free))
        A = (lower + sp.triu(lower.T, k=1)).tocsr()
        return sp.csr_array(A), rhs

    def stiffness_matrix(self, kappa):
        """The assembled stiffness matrix over the free nodes (see :meth:`linear_system`).

        Parameters
        ----------
        kappa : array_like of shape (n_elements,)

        Returns
        -------
        scipy.sparse.csr_array of shape (n_free, n_free)
        """
        return self.linear_system(kappa)[0]

    def interpolation_matrix(self, points):
        """The sparse matrix mapping nodal values to values at ``points``.

        Parameters
        ----------
        points : array_like of shape (n_points, 2)
            Points in the mesh. A point within 1e-10 of a node takes that node's value.

        Returns
        -------
        scipy.sparse.csr_array of shape (n_points, n_nodes)
        """
        points = np.array(points, dtype=np.float64)
        if points.ndim != 2 or points.shape[1] != 2 or not np.all(np.isfinite(points)):
            raise ValueError(f"points must be a finite array of shape (n_points, 2), got {points.shape}")
        rows, cols, vals = [], [], []
        scale = np.ptp(self.nodes, axis=0).max()
        for k, point in enumerate(points):
            distance = np.abs(self.nodes - point).max(axis=1)
            nearest = int(np.argmin(distance))
            if distance[nearest] <= 1e-10 * scale:
                nodes, weights = [nearest], [1.0]
            else:
                nodes, weights = self._locate(point)
            rows += [k] * len(nodes)
            cols += list(nodes)
            vals += list(weights)
        return sp.csr_array((vals, (rows, cols)), shape=(len(points), self.n_nodes))

    def __repr__(self):
        mesh = f"n={self.n}" if self.n is not None else f"n_nodes={self.n_nodes}"
        return (f"EllipticSolver({mesh}, element={self.element!r}, n_elements={self.n_elements}, "
                f"bandwidth={self.bandwidth})")

    def __reduce__(self):
        if self.n is not None:
            return (type(self), (self.n, self.element))
        return (type(self).from_mesh, (self.nodes, self.elements, self.dirichlet_nodes,
                                       self.dirichlet_values))

    # ---------------------------------------------------------------------------------------
    # helpers

    def _check_kappa(self, kappa):
        kappa = np.ascontiguousarray(kappa, dtype=np.float64)
        if kappa.shape != (self.n_elements,):
            raise ValueError(f"kappa must have shape ({self.n_elements},), got {kappa.shape}")
        if not np.all(np.isfinite(kappa)) or not np.all(kappa > 0):
            raise ValueError("kappa must be finite and positive on every element")
        return kappa

    def _boundary_data(self, source, dirichlet_values):
        scatter_val = load = g = None
        if dirichlet_values is not None:
            g = np.array(dirichlet_values, dtype=np.float64).ravel()
            if g.shape != self.dirichlet_nodes.shape or not np.all(np.isfinite(g)):
                raise ValueError(f"dirichlet_values must be {self.dirichlet_nodes.size} finite values")
            scatter_val = self._scatter_values(g)
        if source is not None:
            if not callable(source):
                raise TypeError("source must be a callable f(x) with x of shape (m, 2)")
            load = np.ascontiguousarray(self._load_vector(source)[self.free_nodes])
        return scatter_val, load, g

    def _load_vector(self, source):
        """Nodal load vector: the integral of f times each basis function."""
        coords = self.nodes[self.elements]                       # (n_e, m, 2)
        if self.element == "P1":
            # degree-2 rule, points at barycentric (2/3, 1/6, 1/6) and permutations
            bary = np.full((3, 3), 1.0 / 6.0) + np.eye(3) * 0.5
            d1 = coords[:, 1] - coords[:, 0]
            d2 = coords[:, 2] - coords[:, 0]
            area = 0.5 * np.abs(d1[:, 0] * d2[:, 1] - d1[:, 1] * d2[:, 0])
            weights = area[:, None] * np.full(3, 1.0 / 3.0)     # (n_e, q)
            shape = bary                                         # (q, m)
        else:
            g = 0.5 / np.sqrt(3.0)
            ref = np.array([[0.5 - g, 0.5 - g], [0.5 + g, 0.5 - g], [0.5 + g, 0.5 + g], [0.5 - g, 0.5 + g]])
            s, t = ref[:, 0], ref[:, 1]
            shape = np.column_stack([(1 - s) * (1 - t), s * (1 - t), s * t, (1 - s) * t])
            weights = (self._element_size ** 2)[:, None] * np.full(4, 0.25)
        points = np.einsum("qm,emk->eqk", shape, coords)
        f = np.asarray(source(points.reshape(-1, 2)), dtype=np.float64).reshape(weights.shape)
        if not np.all(np.isfinite(f)):
            raise ValueError("the source returned non-finite values")
        local = np.einsum("eq,qm->em", weights * f, shape)
        return np.bincount(self.elements.ravel(), local.ravel(), minlength=self.n_nodes)

    def _locate(self, point):
        """(nodes, weights) of the element containing ``point``."""
        coords = self.nodes[self.elements]
        if self.element == "Q1":
            lo, hi = coords[:, 0], coords[:, 2]
            inside = np.all((point >= lo - 1e-12) & (point <= hi + 1e-12), axis=1)
            if not inside.any():
                raise ValueError(f"point {point.tolist()} is outside the mesh")
            e = int(np.flatnonzero(inside)[0])
            s, t = (point - lo[e]) / (hi[e] - lo[e])
            weights = np.array([(1 - s) * (1 - t), s * (1 - t), s * t, (1 - s) * t])
        else:
            d1 = coords[:, 1] - coords[:, 0]
            d2 = coords[:, 2] - coords[:, 0]
            det = d1[:, 0] * d2[:, 1] - d1[:, 1] * d2[:, 0]
            r = point - coords[:, 0]
            l1 = (r[:, 0] * d2[:, 1] - r[:, 1] * d2[:, 0]) / det
            l2 = (d1[:, 0] * r[:, 1] - d1[:, 1] * r[:, 0]) / det
            bary = np.column_stack([1 - l1 - l2, l1, l2])
            worst = bary.min(axis=1)
            e = int(np.argmax(worst))
            if worst[e] < -1e-10:
                raise ValueError(f"point {point.tolist()} is outside the mesh")
            weights = np.clip(bary[e], 0.0, 1.0)
        keep = weights > 1e-13
        weights = weights[keep] / weights[keep].sum()
        return self.elements[e][keep], weights


def _p1_stiffness(nodes, elements):
    """Element stiffness matrices of linear triangles, shape (n_elements, 3, 3)."""
    p = nodes[elements]
    d1 = p[:, 1] - p[:, 0]
    d2 = p[:, 2] - p[:, 0]
    det = d1[:, 0] * d2[:, 1] - d1[:, 1] * d2[:, 0]
    scale = np.maximum(np.abs(d1).max(axis=1), np.abs(d2).max(axis=1)) ** 2
    bad = np.flatnonzero(np.abs(det) <= 1e-12 * scale)
    if bad.size:
        raise ValueError(f"element {bad[0]} is degenerate (zero area)")
    # gradients of the barycentric coordinates
    g1 = np.column_stack([d2[:, 1], -d2[:, 0]]) / det[:, None]
    g2 = np.column_stack([-d1[:, 1], d1[:, 0]]) / det[:, None]
    grads = np.stack([-g1 - g2, g1, g2], axis=1)                # (n_e, 3, 2)
    return 0.5 * np.abs(det)[:, None, None] * np.einsum("eak,ebk->eab", grads, grads)


def _free_graph(elements, local, n_free):
    """Adjacency (CSR) of the free nodes (``local`` maps nodes to 0..n_free-1 or -1)."""
    m = elements.shape[1]
    a = np.repeat(elements, m, axis=1).ravel()
    b = np.tile(elements, (1, m)).ravel()
    la, lb = local[a], local[b]
    keep = (la >= 0) & (lb >= 0)
    graph = sp.csr_array((np.ones(keep.sum()), (la[keep], lb[keep])), shape=(n_free, n_free))
    graph.sum_duplicates()
    return graph


def _bandwidth(graph, order):
    """Half-bandwidth of ``graph`` with its nodes renumbered so that order[k] becomes k."""
    position = np.empty_like(order)
    position[order] = np.arange(order.size)
    coo = graph.tocoo()
    return int(np.abs(position[coo.row] - position[coo.col]).max(initial=0))


def _index_array(values, name, n_nodes):
    array = np.asarray(values)
    if array.size and not (np.issubdtype(array.dtype, np.integer)
                           or (np.issubdtype(array.dtype, np.floating)
                               and np.all(array == np.round(array)))):
        raise ValueError(f"{name} must hold integer node indices")
    array = array.astype(np.intp)
    if array.size and (array.min() < 0 or array.max() >= n_nodes):
        raise ValueError(f"{name} holds node indices outside [0, {n_nodes})")
    return array


def _check_n(n):
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 2:
        raise ValueError(f"n must be an integer >= 2, got {n!r}")
    return int(n)


def _check_element(element):
    if element not in ("Q1", "P1"):
        raise ValueError(f"element must be 'Q1' or 'P1', got {element!r}")
    return element
