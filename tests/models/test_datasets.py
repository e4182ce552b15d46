"""The real data sets of the logistic-regression experiments (rnshmc.datasets loaders).

Expected values are recomputed here from the packaged raw files with a separate, plain parser
(csv / str.split), so a wrong filter, coding or column order in the loaders shows up as a
mismatch; the comparison with the authors' own matrix needs ../shared/data (skips otherwise).
"""
import csv
import gzip
import io
from collections import Counter
from importlib.resources import files

import numpy as np
import pytest

from rnshmc.datasets import load_a9a, load_bank_marketing

DATA = files("rnshmc.datasets") / "data"
N_BANK, N_A9A = 40_198, 32_561
EDUCATION = ["basic.4y", "basic.6y", "basic.9y", "high.school", "illiterate",
             "professional.course", "university.degree", "unknown"]
JOBS = ["admin.", "blue-collar", "entrepreneur", "housemaid", "management", "retired",
        "self-employed", "services", "student", "technician", "unemployed"]
NUMERIC = {1: "age", 6: "duration", 7: "campaign", 8: "previous", 9: "emp.var.rate",
           10: "cons.price.idx", 11: "cons.conf.idx", 12: "euribor3m", 13: "nr.employed"}


# --------------------------------------------------------------------------------------------
# Fixtures: each loader runs once per module (the checks below only read the arrays)


@pytest.fixture(scope="module")
def bank():
    return load_bank_marketing(return_names=True)


@pytest.fixture(scope="module")
def bank_csv():
    """The kept CSV rows as {column name: list of strings}."""
    with (DATA / "bank-additional-full.csv.gz").open("rb") as raw:
        text = gzip.decompress(raw.read()).decode("ascii")
    rows = list(csv.DictReader(io.StringIO(text, newline=""), delimiter=";"))
    assert len(rows) == 41_188
    kept = [r for r in rows if r["housing"] != "unknown" and r["loan"] != "unknown"]
    return {name: [r[name] for r in kept] for name in rows[0]}


@pytest.fixture(scope="module")
def a9a_default():
    return load_a9a()


@pytest.fixture(scope="module")
def a9a_dense():
    """The a9a 0/1 matrix and {0, 1} labels, parsed token by token."""
    with (DATA / "a9a.gz").open("rb") as raw:
        lines = gzip.decompress(raw.read()).decode("ascii").splitlines()
    X = np.zeros((len(lines), 123))
    y = np.empty(len(lines))
    for i, line in enumerate(lines):
        label, *entries = line.split()
        y[i] = {"+1": 1.0, "-1": 0.0}[label]
        for entry in entries:
            index, value = entry.split(":")
            X[i, int(index) - 1] = float(value)
    return X, y


def standardise(A):
    return (A - A.mean(axis=0)) / A.std(axis=0, ddof=1)


# --------------------------------------------------------------------------------------------
# Bank Marketing


def test_bank_shape_dtype_and_intercept(bank):
    X, y, names = bank
    assert X.shape == (N_BANK, 25) and y.shape == (N_BANK,)
    assert X.dtype == np.float64 and y.dtype == np.float64
    assert X.flags.c_contiguous
    assert np.all(X[:, 0] == 1.0)
    assert np.all(np.isfinite(X))
    assert len(names) == 25 and names[:6] == ["intercept", "age", "education", "housing",
                                             "loan", "contact"]
    assert names[14:] == [f"job={job}" for job in JOBS]


def test_bank_default_returns_pair_with_same_arrays(bank):
    X, y = load_bank_marketing()
    np.testing.assert_array_equal(X, bank[0])
    np.testing.assert_array_equal(y, bank[1])


def test_bank_columns_are_zscored(bank):
    X = bank[0][:, 1:]
    np.testing.assert_allclose(X.mean(axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(X.std(axis=0, ddof=1), 1.0, rtol=1e-12)


def test_bank_labels(bank, bank_csv):
    y = bank[1]
    assert set(np.unique(y)) == {0.0, 1.0}
    yes = sum(v == "yes" for v in bank_csv["y"])
    assert yes == 4_533  # of 4,640 in the full file: the dropped rows hold 107 'yes'
    assert y.sum() == yes
    np.testing.assert_array_equal(y, [v == "yes" for v in bank_csv["y"]])


def test_bank_numeric_columns_are_the_raw_values(bank, bank_csv):
    X = bank[0]
    for j, name in NUMERIC.items():
        raw = np.array(bank_csv[name], dtype=float)
        np.testing.assert_allclose(X[:, j], standardise(raw), atol=1e-10, err_msg=name)


def test_bank_education_codes(bank, bank_csv):
    col = bank[0][:, 2]
    levels = np.unique(col)
    assert len(levels) == 8
    # codes 1..8 z-scored: eight equally spaced values, code k at levels[k - 1]
    np.testing.assert_allclose(np.diff(levels), np.diff(levels)[0], rtol=1e-9)
    codes = np.searchsorted(levels, col) + 1
    expected = np.array([EDUCATION.index(v) + 1 for v in bank_csv["education"]])
    np.testing.assert_array_equal(codes, expected)
    assert np.sum(codes == 8) == Counter(bank_csv["education"])["unknown"] == 1_691


@pytest.mark.parametrize("j, name, one", [(3, "housing", "yes"), (4, "loan", "yes"),
                                          (5, "contact", "telephone")])
def test_bank_binary_codings(bank, bank_csv, j, name, one):
    col = bank[0][:, j]
    assert len(np.unique(col)) == 2
    # the level coded 1 is the larger standardised value
    np.testing.assert_array_equal(col > 0, [v == one for v in bank_csv[name]])


def test_bank_job_dummies(bank, bank_csv):
    dummies = bank[0][:, 14:]
    high = dummies > 0  # standardised 0/1 columns: positive exactly where the dummy is 1
    for j in range(dummies.shape[1]):
        assert len(np.unique(dummies[:, j])) == 2
        np.testing.assert_allclose(dummies[:, j], standardise(high[:, j].astype(float)),
                                   atol=1e-12)
    assert high.sum(axis=1).max() == 1
    jobs = bank_csv["job"]
    expected = np.array([[v == job for job in JOBS] for v in jobs])
    np.testing.assert_array_equal(high, expected)
    assert np.sum(~high.any(axis=1)) == Counter(jobs)["unknown"] == 325


def test_bank_rejects_bad_return_names():
    with pytest.raises(ValueError, match="return_names"):
        load_bank_marketing(return_names="yes")


def test_bank_matches_the_authors_matrix(bank, shared_data):
    scipy_io = pytest.importorskip("scipy.io")
    mat = scipy_io.loadmat(shared_data / "rnshmc-original" / "bankmarket.mat",
                           squeeze_me=True, struct_as_record=False)
    theirs_X, theirs_y = np.asarray(mat["X"], dtype=float), np.asarray(mat["y"], dtype=float)
    X, y = bank[0], bank[1]
    assert theirs_X.shape == (N_BANK - 1, 25)
    assert abs(theirs_y.sum() - y.sum()) <= 1
    # Loose, hypothesis-free: same distinct-value counts per column, and the sorted distinct
    # values (standardised over one row more) agree to the effect of one row in 40,000.
    for j in range(25):
        ours_values, theirs_values = np.unique(X[:, j]), np.unique(theirs_X[:, j])
        assert len(ours_values) == len(theirs_values), j
        np.testing.assert_allclose(ours_values, theirs_values, atol=5e-3, err_msg=str(j))
    # Exact: theirs is ours without the CSV's first data row, standardised again.
    ours = X[1:].copy()
    ours[:, 1:] = standardise(ours[:, 1:])
    np.testing.assert_allclose(ours, theirs_X, atol=1e-9)
    np.testing.assert_array_equal(y[1:], theirs_y)


# --------------------------------------------------------------------------------------------
# a9a


def test_a9a_shape_dtype_intercept_and_scaling(a9a_default):
    X, y = a9a_default
    assert X.shape == (N_A9A, 61) and y.shape == (N_A9A,)
    assert X.dtype == np.float64 and y.dtype == np.float64
    assert X.flags.c_contiguous
    assert np.all(X[:, 0] == 1.0)
    np.testing.assert_allclose(X[:, 1:].mean(axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(X[:, 1:].std(axis=0, ddof=1), 1.0, rtol=1e-12)


def test_a9a_labels(a9a_default, a9a_dense):
    y = a9a_default[1]
    assert set(np.unique(y)) == {0.0, 1.0}
    assert y.sum() == 7_841
    np.testing.assert_array_equal(y, a9a_dense[1])


def test_a9a_is_the_specified_projection(a9a_dense):
    X01 = a9a_dense[0]
    assert X01.sum() == 451_592  # nonzeros of the LIBSVM file
    k, seed = 7, 123
    R = np.random.default_rng(seed).normal(0.0, np.sqrt(1.0 / k), size=(123, k))
    X, _ = load_a9a(n_components=k, rng=seed)
    assert X.shape == (N_A9A, k + 1)
    np.testing.assert_allclose(X[:, 1:], standardise(X01 @ R), atol=1e-10)


def test_a9a_reproducible_per_seed(a9a_default):
    # (each load parses the file again, ~0.1 s: kept to four)
    X0 = a9a_default[0]  # rng=0
    np.testing.assert_array_equal(load_a9a(60, rng=np.random.SeedSequence(0))[0], X0)
    X1 = load_a9a(rng=1)[0]
    assert not np.allclose(X1[:, 1:], X0[:, 1:])
    # a Generator is used as given, as everywhere in rnshmc
    np.testing.assert_array_equal(load_a9a(3, rng=np.random.default_rng(5))[0],
                                  load_a9a(3, rng=5)[0])


@pytest.mark.parametrize("n_components", [0, -1, 124, 2.5, True, "60", None])
def test_a9a_rejects_bad_n_components(n_components):
    with pytest.raises(ValueError, match="n_components"):
        load_a9a(n_components=n_components)


def test_a9a_rejects_bad_rng():
    with pytest.raises(ValueError):
        load_a9a(rng=-1)


def test_data_files_and_attribution_are_packaged():
    for name in ("bank-additional-full.csv.gz", "a9a.gz", "README.md"):
        assert (DATA / name).is_file(), name
    readme = (DATA / "README.md").read_text(encoding="utf-8")
    for needle in ("CC BY 4.0", "10.1016/j.dss.2014.03.001", "10.24432/C5K306",
                   "10.24432/C5XW20", "LIBSVM"):
        assert needle in readme, needle
