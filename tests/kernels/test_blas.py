"""The BLAS wrappers of rnshmc._kernels._blas (through their cpdef test twins) against NumPy.

The twins pass row-major (C-contiguous) arrays, so every test exercises the row-major ->
column-major translation (swapped dimensions, flipped transpose / triangle flags).

Tolerance: rtol 1e-12, plus an absolute term 1e-12 * (the same expression evaluated on |A|,
|x|, ...): the standard forward error bound of a floating-point sum, which matters only for
entries that cancel to ~0.
"""
import itertools

import numpy as np
import pytest

from rnshmc._kernels import _blas
from testkit import rng_seed

RTOL = 1e-12
SEEDS = [0, 1, 2]
VECTOR_SIZES = [1, 2, 3, 7, 64, 1001]
# (rows, cols): square, tall, wide, vectors-as-matrices, and larger than a BLAS block
MATRIX_SHAPES = [(1, 1), (1, 5), (5, 1), (3, 3), (4, 7), (7, 4), (50, 13), (13, 50), (64, 64)]
SQUARE_SIZES = [1, 2, 3, 8, 33]
ALPHA_BETA = [(1.0, 0.0), (1.0, 1.0), (-0.7, 2.5), (2.0, 0.0), (0.0, 1.5), (0.3, -1.0)]


def assert_close(actual, expected, magnitude):
    """|actual - expected| <= RTOL * |expected| + RTOL * magnitude, elementwise."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape
    np.testing.assert_array_less(np.abs(actual - expected),
                                 RTOL * (np.abs(expected) + magnitude) + 1e-300)


def C(a):
    return np.ascontiguousarray(a, dtype=np.float64)


# ------------------------------------------------------------------------------------------
# level 1


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("n", VECTOR_SIZES)
def test_dot(seed, n):
    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal(n), rng.standard_normal(n)
    x0, y0 = x.copy(), y.copy()
    assert_close(_blas._dot_memview(x, y), x @ y, np.abs(x) @ np.abs(y))
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(y, y0)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("n", VECTOR_SIZES)
@pytest.mark.parametrize("alpha", [1.0, 0.0, -2.5, 1e-3])
def test_axpy(seed, n, alpha):
    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal(n), rng.standard_normal(n)
    x0, expected = x.copy(), alpha * x + y
    _blas._axpy_memview(alpha, x, y)
    assert_close(y, expected, np.abs(alpha * x0) + np.abs(expected))
    np.testing.assert_array_equal(x, x0)  # x is read only


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("n", VECTOR_SIZES)
@pytest.mark.parametrize("alpha", [1.0, 0.0, -2.5, 1e-3])
def test_scal(seed, n, alpha):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n)
    expected = alpha * x
    _blas._scal_memview(alpha, x)
    assert_close(x, expected, 0.0)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("n", VECTOR_SIZES)
def test_copy(seed, n):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n)
    y = np.full(n, np.nan)
    _blas._copy_memview(x, y)
    np.testing.assert_array_equal(y, x)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("n", VECTOR_SIZES)
def test_nrm2(seed, n):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n)
    assert_close(_blas._nrm2_memview(x), np.linalg.norm(x), 0.0)


@pytest.mark.parametrize("scale", [1e200, 1e-200])
def test_nrm2_does_not_overflow_or_underflow(scale):
    x = np.array([3.0, -4.0, 0.0]) * scale
    value = _blas._nrm2_memview(x)
    assert np.isfinite(value) and value > 0
    assert_close(value, 5.0 * scale, 0.0)


# ------------------------------------------------------------------------------------------
# level 2


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("shape", MATRIX_SHAPES)
@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("alpha,beta", ALPHA_BETA)
def test_gemv(seed, shape, transpose, alpha, beta):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal(shape)
    opA = A.T if transpose else A
    x = rng.standard_normal(opA.shape[1])
    y = rng.standard_normal(opA.shape[0])
    A0, x0 = A.copy(), x.copy()
    expected = alpha * opA @ x + beta * y
    magnitude = abs(alpha) * np.abs(opA) @ np.abs(x) + abs(beta) * np.abs(y)
    _blas._gemv_memview(transpose, alpha, C(A), x, beta, y)
    assert_close(y, expected, magnitude)
    np.testing.assert_array_equal(A, A0)
    np.testing.assert_array_equal(x, x0)


@pytest.mark.parametrize("transpose", [False, True])
def test_gemv_beta_zero_ignores_output_contents(transpose):
    """With beta = 0 the output is write-only (the kernels pass np.empty buffers)."""
    rng = np.random.default_rng(rng_seed(3))
    A = rng.standard_normal((6, 4))
    opA = A.T if transpose else A
    x = rng.standard_normal(opA.shape[1])
    y = np.full(opA.shape[0], np.nan)
    _blas._gemv_memview(transpose, 1.5, C(A), x, 0.0, y)
    assert_close(y, 1.5 * opA @ x, 1.5 * np.abs(opA) @ np.abs(x))


def symmetric_with_garbage(rng, n, lower):
    """(symmetric matrix S, storage in which only the ``lower``/upper triangle holds S and the
    other strict triangle holds unrelated values that must not be read)."""
    S = rng.standard_normal((n, n))
    S = S + S.T
    garbage = 1e3 * rng.standard_normal((n, n))
    keep = np.tril(np.ones((n, n), bool)) if lower else np.triu(np.ones((n, n), bool))
    return S, C(np.where(keep, S, garbage))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("n", SQUARE_SIZES)
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("alpha,beta", ALPHA_BETA)
def test_symv(seed, n, lower, alpha, beta):
    rng = np.random.default_rng(seed)
    S, stored = symmetric_with_garbage(rng, n, lower)
    x, y = rng.standard_normal(n), rng.standard_normal(n)
    expected = alpha * S @ x + beta * y
    magnitude = abs(alpha) * np.abs(S) @ np.abs(x) + abs(beta) * np.abs(y)
    _blas._symv_memview(lower, alpha, stored, x, beta, y)
    assert_close(y, expected, magnitude)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("shape", MATRIX_SHAPES)
@pytest.mark.parametrize("alpha", [1.0, -0.7, 0.0])
def test_ger(seed, shape, alpha):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal(shape)
    x, y = rng.standard_normal(shape[0]), rng.standard_normal(shape[1])
    out = C(A.copy())
    _blas._ger_memview(alpha, x, y, out)
    assert_close(out, A + alpha * np.outer(x, y), np.abs(A) + abs(alpha) * np.outer(np.abs(x), np.abs(y)))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("n", SQUARE_SIZES)
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("alpha", [1.0, -0.7])
def test_syr_and_syr2_update_one_triangle(seed, n, lower, alpha):
    rng = np.random.default_rng(seed)
    S, stored = symmetric_with_garbage(rng, n, lower)
    x, y = rng.standard_normal(n), rng.standard_normal(n)
    keep = np.tril(np.ones((n, n), bool)) if lower else np.triu(np.ones((n, n), bool))
    for update, expected in (
            (lambda A: _blas._syr_memview(lower, alpha, x, A), S + alpha * np.outer(x, x)),
            (lambda A: _blas._syr2_memview(lower, alpha, x, y, A),
             S + alpha * (np.outer(x, y) + np.outer(y, x)))):
        A = stored.copy()
        update(A)
        magnitude = np.abs(S) + 2 * abs(alpha) * np.outer(np.abs(x) + np.abs(y), np.abs(x) + np.abs(y))
        assert_close(A[keep], expected[keep], magnitude[keep])
        np.testing.assert_array_equal(A[~keep], stored[~keep])  # the other triangle untouched


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("n", SQUARE_SIZES)
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("transpose", [False, True])
def test_trmv(seed, n, lower, transpose):
    """x <- op(T) x for a triangular T with a non-unit diagonal; the other strict triangle of
    the storage holds garbage that must not be read."""
    rng = np.random.default_rng(seed)
    full = rng.standard_normal((n, n)) + 2.0 * np.eye(n)
    mask = np.tril(np.ones((n, n), bool)) if lower else np.triu(np.ones((n, n), bool))
    T = np.where(mask, full, 0.0)
    stored = C(np.where(mask, full, 1e3 * rng.standard_normal((n, n))))
    opT = T.T if transpose else T
    x = rng.standard_normal(n)
    expected = opT @ x
    magnitude = np.abs(opT) @ np.abs(x)
    _blas._trmv_memview(lower, transpose, stored, x)
    assert_close(x, expected, magnitude)


# ------------------------------------------------------------------------------------------
# level 3


GEMM_SIZES = [(1, 1, 1), (2, 3, 4), (4, 3, 2), (5, 1, 7), (1, 6, 3), (7, 7, 7), (33, 17, 9)]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("m,n,k", GEMM_SIZES)
@pytest.mark.parametrize("ta,tb", list(itertools.product([False, True], repeat=2)))
@pytest.mark.parametrize("alpha,beta", ALPHA_BETA)
def test_gemm(seed, m, n, k, ta, tb, alpha, beta):
    rng = np.random.default_rng(seed)
    opA = rng.standard_normal((m, k))
    opB = rng.standard_normal((k, n))
    A = C(opA.T) if ta else C(opA)  # stored so that op(A) has shape (m, k)
    B = C(opB.T) if tb else C(opB)
    Cm = rng.standard_normal((m, n))
    A0, B0 = A.copy(), B.copy()
    expected = alpha * opA @ opB + beta * Cm
    magnitude = abs(alpha) * np.abs(opA) @ np.abs(opB) + abs(beta) * np.abs(Cm)
    _blas._gemm_memview(ta, tb, alpha, A, B, beta, Cm)
    assert_close(Cm, expected, magnitude)
    np.testing.assert_array_equal(A, A0)
    np.testing.assert_array_equal(B, B0)


def test_gemm_beta_zero_ignores_output_contents():
    rng = np.random.default_rng(rng_seed(4))
    A, B = rng.standard_normal((3, 5)), rng.standard_normal((5, 2))
    Cm = np.full((3, 2), np.nan)
    _blas._gemm_memview(False, False, 1.0, C(A), C(B), 0.0, Cm)
    assert_close(Cm, A @ B, np.abs(A) @ np.abs(B))


SYRK_SIZES = [(1, 1), (1, 4), (4, 1), (3, 3), (5, 2), (2, 5), (20, 7), (7, 20)]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("n,k", SYRK_SIZES)
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("alpha,beta", ALPHA_BETA)
def test_syrk(seed, n, k, lower, transpose, alpha, beta):
    """C <- alpha A A^T + beta C (A (n, k)) or alpha A^T A + beta C (A (k, n)); only the chosen
    triangle of C is written, the other strict triangle is left untouched."""
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((k, n) if transpose else (n, k))
    AAt = A.T @ A if transpose else A @ A.T
    absAAt = np.abs(A).T @ np.abs(A) if transpose else np.abs(A) @ np.abs(A).T
    S = rng.standard_normal((n, n))
    Cm = C(S + S.T)
    C0 = Cm.copy()
    expected = alpha * AAt + beta * C0
    magnitude = abs(alpha) * absAAt + abs(beta) * np.abs(C0)
    _blas._syrk_memview(lower, transpose, alpha, C(A), beta, Cm)
    tri = np.tril_indices(n) if lower else np.triu_indices(n)
    other = np.triu_indices(n, 1) if lower else np.tril_indices(n, -1)
    assert_close(Cm[tri], expected[tri], magnitude[tri])
    np.testing.assert_array_equal(Cm[other], C0[other])


def test_syrk_accumulates_row_blocks():
    """The Fisher-metric pattern: summing syrk over row blocks with beta = 1 gives A^T A."""
    rng = np.random.default_rng(rng_seed(5))
    A = rng.standard_normal((103, 6))
    G = np.zeros((6, 6))
    for start in range(0, 103, 16):
        _blas._syrk_memview(True, True, 1.0, C(A[start:start + 16]), 1.0, G)
    full = np.tril(G) + np.tril(G, -1).T
    assert_close(full, A.T @ A, np.abs(A).T @ np.abs(A))
    assert np.all(np.triu(G, 1) == 0)  # the upper triangle was never written
