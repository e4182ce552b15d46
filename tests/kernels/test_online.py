"""The online least-squares output weights (Greville / recursive least squares,
docs/algorithms.md section 6) against batch solutions on the same rows."""
import numpy as np
import pytest

from rnshmc._kernels._online import OnlineLeastSquares
from testkit import rng_seed


def rows(rng, k, s):
    # softplus-like hidden units: correlated positive columns, as a network's are
    return np.log1p(np.exp(rng.standard_normal((k, 3)) @ rng.standard_normal((3, s))
                           + 0.3 * rng.standard_normal((k, s))))


def relative(a, b):
    return np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("start,extra", [(10, 15), (10, 60), (50, 40)])
def test_ridge_start_stays_the_ridge_solution(seed, start, extra):
    """After a ridge start every update is the recursive-least-squares branch and v is the
    ridge solution on all rows, for k < s and k > s."""
    rng = np.random.default_rng(seed)
    s, ridge = 30, 1e-3
    H, t = rows(rng, start + extra, s), rng.standard_normal(start + extra)
    online = OnlineLeastSquares.from_rows(H[:start], t[:start], ridge=ridge)
    online.update(H[start:], t[start:])
    normal = H.T @ H + ridge * np.eye(s)
    assert relative(online.weights, np.linalg.solve(normal, H.T @ t)) < 1e-8
    assert relative(online.theta, np.linalg.inv(normal)) < 1e-8
    assert online.n_null_space_updates == 0 and online.n_updates == extra
    np.testing.assert_array_equal(online.theta, online.theta.T)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pseudo_inverse_start_follows_the_minimum_norm_solution(seed):
    """From a pseudo-inverse start on k < s rows, rows are added one at a time through both
    branches: v stays H^+ t (the minimum-norm least-squares solution) below, at and beyond s
    rows, and Theta and Phi keep their definitions."""
    rng = np.random.default_rng(seed)
    s = 12
    H, t = rows(rng, 40, s), rng.standard_normal(40)
    # a repeated row and one in the span of the first rows: the c = 0 branch below s rows
    H[6] = H[2]
    H[8] = 0.5 * H[0] - 2.0 * H[1]
    online = OnlineLeastSquares.from_rows(H[:3], t[:3])
    for k in range(3, 40):
        online.update(H[k], t[k])
        n = k + 1
        pinv = np.linalg.pinv(H[:n], rcond=1e-10)
        assert relative(online.weights, pinv @ t[:n]) < 1e-8, n
        assert relative(online.theta, pinv @ pinv.T) < 1e-8, n
        np.testing.assert_allclose(online.phi, np.eye(s) - pinv @ H[:n], atol=1e-8)
    # both branches ran: rank-raising rows (up to s) and the rest
    rank_raising = np.linalg.matrix_rank(H[:40]) - np.linalg.matrix_rank(H[:3])
    assert online.n_null_space_updates == rank_raising
    assert online.n_updates - online.n_null_space_updates >= 40 - 3 - rank_raising


def test_theta_stays_symmetric_and_drift_is_bounded_and_refresh_removes_it():
    """10^5 recursive updates: Theta exactly symmetric, close to the batch inverse; a refresh
    from the accumulated normal equations brings it back to the batch solution."""
    rng = np.random.default_rng(rng_seed(3))
    s, ridge, n = 20, 1e-4, 100_000
    H0, t0 = rows(rng, 30, s), rng.standard_normal(30)
    online = OnlineLeastSquares.from_rows(H0, t0, ridge=ridge)
    H, t = rows(rng, n, s), rng.standard_normal(n)
    online.update(H, t)
    allH, allt = np.vstack([H0, H]), np.concatenate([t0, t])
    normal = allH.T @ allH + ridge * np.eye(s)
    exact_theta, exact_v = np.linalg.inv(normal), np.linalg.solve(normal, allH.T @ allt)
    theta = online.theta
    np.testing.assert_array_equal(theta, theta.T)
    drift = relative(theta, exact_theta)
    assert drift < 1e-6, drift
    assert relative(online.weights, exact_v) < 1e-6
    assert relative(online.normal, normal) < 1e-12
    assert online.refresh()
    assert relative(online.theta, exact_theta) < 1e-9
    assert relative(online.weights, exact_v) < 1e-9


def test_refresh_without_a_positive_definite_normal_matrix_changes_nothing():
    rng = np.random.default_rng(rng_seed(4))
    H, t = rows(rng, 5, 10), rng.standard_normal(5)
    online = OnlineLeastSquares.from_rows(H, t)  # rank 5 < 10, no ridge
    before = online.weights
    assert not online.refresh()
    np.testing.assert_array_equal(online.weights, before)


def test_bad_input_is_rejected_and_changes_nothing():
    rng = np.random.default_rng(rng_seed(5))
    H, t = rows(rng, 8, 6), rng.standard_normal(8)
    online = OnlineLeastSquares.from_rows(H, t, ridge=1e-3)
    before = online.weights
    with pytest.raises(ValueError, match="shape"):
        online.update(np.ones((2, 5)), np.ones(2))
    with pytest.raises(ValueError, match="finite"):
        online.update(np.full((1, 6), np.nan), np.ones(1))
    with pytest.raises(ValueError, match="finite"):
        OnlineLeastSquares.from_rows(H, np.full(8, np.inf))
    with pytest.raises(ValueError, match="ridge"):
        OnlineLeastSquares.from_rows(H, t, ridge=-1.0)
    np.testing.assert_array_equal(online.weights, before)
    assert online.n_updates == 0


# ---------------------------------------------------------------------------------------------
# The block (rank-k) update: while Phi = 0, an update's rows go in chunks of block_rows rows,
# one BLAS-3 Woodbury step each (docs/algorithms.md section 6)

def ridge_start(rng, s, n0, ridge, constant):
    """(estimator, its rows, targets and penalty diagonal) on n0 Gaussian rows: with
    ``constant``, as the surrogate starts it: the last column 1 on value rows and 0 on gradient
    rows (every other row here) and no penalty on it, through the explicit constructor."""
    H, t = rng.standard_normal((n0, s)), rng.standard_normal(n0)
    penalty = np.full(s, ridge)
    if constant:
        H[:, -1] = np.arange(n0) % 2 == 0
        penalty[-1] = 0.0
    normal, rhs = H.T @ H + np.diag(penalty), H.T @ t
    theta = np.linalg.inv(normal)
    return OnlineLeastSquares(np.linalg.solve(normal, rhs), theta, None, normal, rhs), H, t, penalty


def new_rows(rng, k, s, constant):
    H = rng.standard_normal((k, s))
    if constant:
        H[:, -1] = rng.random(k) < 0.3  # value rows (1) among gradient rows (0)
    return H, rng.standard_normal(k)


@pytest.mark.parametrize("constant", [False, True])
@pytest.mark.parametrize("k", [1, 3, 64, 600])
def test_block_update_equals_the_per_row_update_and_the_batch_ridge_solution(k, constant):
    """k rows in one update (600 > block_rows = 256: chunks of 256, 256, 88) against the same
    rows one update each (the per-row recursion) and against the batch ridge solution
    (H^T H + Lambda)^{-1} H^T t on all rows, Lambda = ridge on all diagonal entries but the
    unpenalised constant's when there is one: equal to 1e-10, Theta exactly symmetric."""
    rng = np.random.default_rng(rng_seed(10 + k + constant))
    s, ridge = 300, 1e-2
    block, H0, t0, penalty = ridge_start(rng, s, 400, ridge, constant)
    per_row = ridge_start(np.random.default_rng(rng_seed(10 + k + constant)), s, 400, ridge,
                          constant)[0]
    assert block.block_rows == 256
    H, t = new_rows(rng, k, s, constant)
    block.update(H, t)
    for j in range(k):
        per_row.update(H[j], t[j])
    allH, allt = np.vstack([H0, H]), np.concatenate([t0, t])
    normal = allH.T @ allH + np.diag(penalty)
    exact_theta, exact_v = np.linalg.inv(normal), np.linalg.solve(normal, allH.T @ allt)
    assert relative(block.weights, per_row.weights) < 1e-10
    assert relative(block.theta, per_row.theta) < 1e-10
    assert relative(block.weights, exact_v) < 1e-10
    assert relative(block.theta, exact_theta) < 1e-10
    theta = block.theta
    np.testing.assert_array_equal(theta, theta.T)
    assert block.n_updates == per_row.n_updates == k and block.n_null_space_updates == 0
    # the normal equations get the same rows in the same order, 64 at a time
    np.testing.assert_array_equal(block.normal, per_row.normal)
    assert relative(block.normal, normal) < 1e-13
    assert block.refresh() and per_row.refresh()
    np.testing.assert_array_equal(block.weights, per_row.weights)


@pytest.mark.parametrize("calls", [(5, 7, 1, 300), (256, 256, 1), (40,) * 12])
def test_block_updates_in_uneven_calls_stay_the_ridge_solution(calls):
    """Calls of uneven lengths (chunks of min(256, s) = 30 rows and shorter), a copy taken
    through pickling midway going on bit for bit as the original, and both at the batch
    ridge solution."""
    import pickle
    rng = np.random.default_rng(rng_seed(20 + len(calls)))
    s, ridge = 30, 1e-2
    online, H0, t0, penalty = ridge_start(rng, s, 40, ridge, True)
    assert online.block_rows == s
    H, t = new_rows(rng, sum(calls), s, True)
    ends = np.cumsum(calls)
    copy = None
    for i, (end, k) in enumerate(zip(ends, calls)):
        if i == len(calls) // 2:
            copy = pickle.loads(pickle.dumps(online))
        for model in (online,) if copy is None else (online, copy):
            model.update(H[end - k:end], t[end - k:end])
    np.testing.assert_array_equal(copy.weights, online.weights)
    np.testing.assert_array_equal(copy.theta, online.theta)
    np.testing.assert_array_equal(copy.normal, online.normal)
    allH, allt = np.vstack([H0, H]), np.concatenate([t0, t])
    normal = allH.T @ allH + np.diag(penalty)
    assert relative(online.weights, np.linalg.solve(normal, allH.T @ allt)) < 1e-10
    assert relative(online.theta, np.linalg.inv(normal)) < 1e-10
    assert online.n_updates == copy.n_updates == sum(calls)


def test_null_space_tracking_goes_row_by_row_until_phi_is_zero():
    """A pseudo-inverse start (Phi != 0): the rows of one update go through Greville's
    branches one at a time (v = H^+ t as rows raise the rank to s and beyond); after a
    refresh sets Phi = 0, the rows go as blocks and v stays the least-squares solution."""
    rng = np.random.default_rng(rng_seed(30))
    s = 12
    H, t = rows(rng, 100, s), rng.standard_normal(100)
    online = OnlineLeastSquares.from_rows(H[:3], t[:3])
    online.update(H[3:40], t[3:40])
    pinv = np.linalg.pinv(H[:40], rcond=1e-10)
    assert relative(online.weights, pinv @ t[:40]) < 1e-8
    assert online.n_null_space_updates == s - 3
    assert online.refresh()
    np.testing.assert_array_equal(online.phi, 0.0)
    online.update(H[40:], t[40:])
    assert online.n_null_space_updates == s - 3
    assert relative(online.weights, np.linalg.lstsq(H, t, rcond=None)[0]) < 1e-8


def test_a_block_whose_matrix_is_not_positive_definite_goes_row_by_row():
    """With Theta not positive definite (not reachable from a ridge start, but the fallback
    must not change a thing): I + H Theta H^T fails its Cholesky factorisation (its first
    diagonal entry is 1 - |h_1|^2 < 0), and the chunk's rows take the per-row recursion, bit
    for bit."""
    rng = np.random.default_rng(rng_seed(40))
    s = 10
    start = dict(weights=np.zeros(s), theta=-np.eye(s), normal=np.eye(s), rhs=np.zeros(s))
    block, per_row = OnlineLeastSquares(**start), OnlineLeastSquares(**start)
    H, t = 3.0 + rng.standard_normal((s, s)), rng.standard_normal(s)  # one chunk
    block.update(H, t)
    for j in range(s):
        per_row.update(H[j], t[j])
    np.testing.assert_array_equal(block.weights, per_row.weights)
    np.testing.assert_array_equal(block.theta, per_row.theta)


@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (7, 3), (64, 33)])
def test_symm_wrapper(left, lower, shape):
    """The dsymm wrapper the block update uses (row-major): C = alpha A B + beta C or
    alpha B A + beta C with only the triangle ``lower``/upper of A read."""
    from rnshmc._kernels import _blas
    rng = np.random.default_rng(rng_seed(50))
    m, n = shape
    size = m if left else n
    A = rng.standard_normal((size, size))
    A = A + A.T
    keep = np.tril(np.ones((size, size), bool)) if lower else np.triu(np.ones((size, size), bool))
    stored = np.ascontiguousarray(np.where(keep, A, 1e3 * rng.standard_normal((size, size))))
    B, C = rng.standard_normal((m, n)), rng.standard_normal((m, n))
    expected = -0.7 * (A @ B if left else B @ A) + 1.5 * C
    _blas._symm_memview(left, lower, -0.7, stored, B, 1.5, C)
    np.testing.assert_allclose(C, expected, rtol=1e-12, atol=1e-11)


# ---------------------------------------------------------------------------------------------
# RandomNetworkSurrogate.partial_fit

import rnshmc  # noqa: E402


def training_points(seed, n, dim=3):
    rng = np.random.default_rng(seed)
    Q = rng.standard_normal((n, dim)) @ np.diag([1.0, 0.5, 2.0])[:dim, :dim]
    U = lambda q: 0.5 * np.sum(q ** 2, axis=-1) + 0.2 * q[..., 0] ** 3
    grad = lambda q: q + np.eye(dim)[0] * 0.6 * q[..., :1] ** 2
    # the smallest target last: a first fit's target shift (its minimum) is not the batch's
    lowest = np.argmin(U(Q))
    Q = np.concatenate([np.delete(Q, lowest, axis=0), Q[lowest:lowest + 1]])
    return Q, U(Q), grad(Q)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("refresh_every", [5000, 7])
def test_partial_fit_equals_a_fit_on_all_points(seed, refresh_every):
    """Values only, raw inputs, additive units: a fit's features do not depend on its
    points, and the target shift (the minimum of the first 40 targets, not of all 100) does
    not change the problem, so partial_fit of the other 60 (in uneven batches) must give
    the weights and constant of a plain fit on all 100."""
    Q, t, _ = training_points(seed, 100)
    online = rnshmc.RandomNetworkSurrogate(3, n_hidden=25, ridge=1e-4, rng=seed)
    online.refresh_every = refresh_every
    online.fit(Q[:40], t[:40], online=True)
    for batch in (slice(40, 41), slice(41, 70), slice(70, 100)):
        online.partial_fit(Q[batch], t[batch])
    batch_fit = rnshmc.RandomNetworkSurrogate(3, n_hidden=25, ridge=1e-4, rng=seed).fit(Q, t)
    assert online.target_shift_ > batch_fit.target_shift_
    assert relative(online.output_weights, batch_fit.output_weights) < 1e-8
    # (the unpenalised constant is nearly collinear with the units' sum, so rounding moves
    # it more than the predictions: by 1.1e-8 of it on one seed)
    assert abs(online.offset_ - batch_fit.offset_) < 1e-7 * (1 + abs(batch_fit.offset_))
    q = np.array([0.3, -0.2, 0.5])
    assert abs(online.potential(q) - batch_fit.potential(q)) < 1e-8 * (1 + abs(batch_fit.potential(q)))
    assert online.n_train_ == 100 and online.n_online_points_ == 60


@pytest.mark.parametrize("seed", [0, 1])
def test_partial_fit_with_gradients_is_the_least_squares_solution(seed):
    """Values and gradients, raw inputs: against the weighted ridge least-squares problem
    written out directly (gradient misfits in the metric of the first fit's input
    covariance factor M: rows M^T W^T diag(a'(W q + b)), targets M^T g; an unpenalised
    constant, absent from the gradient rows)."""
    Q, t, G = training_points(seed, 60)
    s, ridge, weight = 20, 1e-5, 0.7
    online = rnshmc.RandomNetworkSurrogate(3, n_hidden=s, ridge=ridge, rng=seed)
    online.fit(Q[:25], t[:25], gradients=G[:25], gradient_weight=weight, online=True)
    online.partial_fit(Q[25:], t[25:], gradients=G[25:])
    W, b = online.input_weights, online.biases
    M = np.linalg.cholesky(np.cov(Q[:25], rowvar=False) + 1e-10 * np.trace(np.cov(Q[:25], rowvar=False)) / 3 * np.eye(3))
    pre = Q @ W.T + b
    H = np.log1p(np.exp(pre))
    slopes = 1.0 / (1.0 + np.exp(-pre))
    D = np.einsum("ji,ik,kl->jli", slopes, W, M)  # (points, dim, s): M^T grad_v of grad z
    constant = np.r_[np.ones(len(t)), np.zeros(D[:, :, 0].size + s)]
    rows = np.vstack([H, np.sqrt(weight) * D.reshape(-1, s), np.sqrt(ridge) * np.eye(s)])
    rows = np.hstack([rows, constant[:, None]])
    targets = np.concatenate([t, np.sqrt(weight) * (G @ M).reshape(-1), np.zeros(s)])
    reference = np.linalg.lstsq(rows, targets, rcond=None)[0]
    assert relative(np.append(online.output_weights, online.offset_), reference) < 1e-7


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("nodes", ["additive", "rbf"])
@pytest.mark.parametrize("whiten", [False, True])
@pytest.mark.parametrize("with_gradients", [False, True])
@pytest.mark.parametrize("ridge", [1e-6, 0.1])
def test_partial_fits_solve_the_batch_problem_on_the_same_features(seed, nodes, whiten,
                                                                   with_gradients, ridge):
    """A fit on 30 points and 70 one-point partial fits against one fit on all 100 with the
    same features (like=: hidden units, RBF centres and widths, whitening and gradient metric
    of the first fit): the same weights, constant and predictions (docs/algorithms.md
    sections 3 and 6), although the first fit's target shift is not the batch's.
    The weights themselves are compared, so the normal matrix is kept well enough
    conditioned (condition number below ~1e9) for them to be determined to 1e-8 by any
    solver: 20 units with weight_scale=1. With more, nearly collinear units (the whitened
    additive default 0.2/sqrt(d) makes them nearly linear) the weights at ridge 1e-6 are
    determined only to cond * eps, and a batch fit differs as much from itself with its rows
    permuted; the predictions still agree."""
    Q, t, G = training_points(seed, 100)
    Qt = training_points(seed + 10, 50)[0]
    G = G if with_gradients else None
    options = dict(n_hidden=20, nodes=nodes, ridge=ridge, whiten=whiten, weight_scale=1.0)
    online = rnshmc.RandomNetworkSurrogate(3, rng=seed, **options)
    online.fit(Q[:30], t[:30], gradients=None if G is None else G[:30], gradient_weight=0.5,
               online=True)
    for j in range(30, 100):
        online.partial_fit(Q[j], t[j], gradients=None if G is None else G[j])
    batch = rnshmc.RandomNetworkSurrogate(3, rng=seed + 1, **options)
    batch.fit(Q, t, gradients=G, gradient_weight=0.5, like=online)
    assert online.target_shift_ > batch.target_shift_
    assert relative(np.append(online.output_weights, online.offset_),
                    np.append(batch.output_weights, batch.offset_)) < 1e-8
    assert relative(online.predict(Qt), batch.predict(Qt)) < 1e-8
    assert relative(online.gradient(Qt[0]), batch.gradient(Qt[0])) < 1e-8


def test_like_needs_a_fitted_surrogate_of_the_same_layout():
    Q, t, G = training_points(3, 40)
    base = rnshmc.RandomNetworkSurrogate(3, n_hidden=10, rng=rng_seed(0)).fit(Q, t)
    with pytest.raises(ValueError, match="fitted"):
        base.fit(Q, t, like=rnshmc.RandomNetworkSurrogate(3, n_hidden=10))
    for other, differ in ((rnshmc.RandomNetworkSurrogate(3, n_hidden=11), "n_hidden"),
                          (rnshmc.RandomNetworkSurrogate(3, n_hidden=10, whiten=True), "whiten"),
                          (rnshmc.RandomNetworkSurrogate(3, n_hidden=10, nodes="rbf"), "nodes")):
        with pytest.raises(ValueError, match=f"another layout \\(.*{differ}"):
            other.fit(Q, t, like=base)
        assert not other.fitted
    with pytest.raises(ValueError, match="gradient metric"):
        rnshmc.RandomNetworkSurrogate(3, n_hidden=10).fit(Q, t, gradients=G, like=base)
    # refitting with one's own features is a plain refit when they do not depend on the points
    refit = rnshmc.RandomNetworkSurrogate(3, n_hidden=10, rng=rng_seed(5)).fit(Q, t, like=base)
    np.testing.assert_array_equal(refit.input_weights, base.input_weights)
    assert relative(refit.output_weights, base.output_weights) < 1e-12


def test_saved_online_state_carries_the_constant(tmp_path):
    """get_state(online=True) / from_state through an .npz file: the rebuilt surrogate has
    the installed constant and goes on learning exactly as the original; an install moves
    the C target's constant (partial fits without install do not)."""
    Q, t, G = training_points(4, 90)
    surrogate = rnshmc.RandomNetworkSurrogate(3, n_hidden=15, ridge=1e-3, rng=rng_seed(0))
    surrogate.fit(Q[:30], t[:30] + 100.0, gradients=G[:30], online=True)
    before = surrogate.offset_, surrogate.predict(Q[:5])
    surrogate.partial_fit(Q[30:60], t[30:60], gradients=G[30:60], install=False)
    assert (surrogate.offset_, *surrogate.predict(Q[:5])) == (before[0], *before[1])
    surrogate.install()  # (the new points' targets are 100 lower)
    assert surrogate.offset_ != before[0] and surrogate._ctarget.offset == surrogate.offset_
    rnshmc.SampleResult(state=surrogate.get_state(online=True)).save(tmp_path / "s.npz")
    rebuilt = rnshmc.RandomNetworkSurrogate.from_state(rnshmc.load(tmp_path / "s.npz")["state"])
    assert rebuilt.offset_ == surrogate.offset_
    np.testing.assert_array_equal(rebuilt.predict(Q), surrogate.predict(Q))
    for model in (surrogate, rebuilt):
        model.partial_fit(Q[60:], t[60:], gradients=G[60:])
    np.testing.assert_array_equal(rebuilt.predict(Q), surrogate.predict(Q))
    assert rebuilt.offset_ == surrogate.offset_


def test_partial_fit_errors_change_nothing():
    Q, t, _ = training_points(2, 50)
    surrogate = rnshmc.RandomNetworkSurrogate(3, n_hidden=10, ridge=1e-4, rng=rng_seed(0))
    surrogate.fit(Q, t)
    with pytest.raises(RuntimeError, match="online=True"):
        surrogate.partial_fit(Q[:2], t[:2])
    surrogate.fit(Q, t, online=True)
    before = surrogate.output_weights.copy()
    with pytest.raises(ValueError, match="shape"):
        surrogate.partial_fit(Q[:2, :2], t[:2])
    with pytest.raises(ValueError, match="finite"):
        surrogate.partial_fit(Q[:2], np.array([1.0, np.nan]))
    np.testing.assert_array_equal(surrogate.output_weights, before)
    assert surrogate.n_online_points_ == 0
    with pytest.raises(ValueError, match="positive-definite"), \
            pytest.warns(RuntimeWarning, match="singular"):
        singular = rnshmc.RandomNetworkSurrogate(3, n_hidden=80, ridge=0.0, rng=rng_seed(0))
        singular.fit(Q[:20], t[:20], online=True)
