"""The two real data sets of the papers' Bayesian logistic-regression experiments.

Both files ship inside the package (``rnshmc/datasets/data``, see the README there for the
sources, licences and citations) and are read with numpy and the standard library only.
"""
import csv
import gzip
from importlib.resources import files

import numpy as np

__all__ = ["load_bank_marketing", "load_a9a"]

_BANK_FILE = "bank-additional-full.csv.gz"
_A9A_FILE = "a9a.gz"
_A9A_FEATURES = 123

# Education as the authors coded it: 1..8 in alphabetical order of the category names, which
# puts "unknown" last (8). Not a meaningful order ("illiterate" is 5), but it is the design the
# paper's posterior was computed on, so it is kept.
_EDUCATION = ("basic.4y", "basic.6y", "basic.9y", "high.school", "illiterate",
              "professional.course", "university.degree", "unknown")
# Job dummies in alphabetical order; "unknown" is the reference level (no column).
_JOBS = ("admin.", "blue-collar", "entrepreneur", "housemaid", "management", "retired",
         "self-employed", "services", "student", "technician", "unemployed")
# Binary categoricals: the level coded 1 (the other is 0). Only the sign of the standardised
# column depends on this choice; these reproduce the signs in the authors' matrix.
_BINARY = (("housing", "yes", "no"), ("loan", "yes", "no"), ("contact", "telephone", "cellular"))
_NUMERIC = ("duration", "campaign", "previous", "emp.var.rate", "cons.price.idx",
            "cons.conf.idx", "euribor3m", "nr.employed")

_BANK_NAMES = (("intercept", "age", "education") + tuple(b[0] for b in _BINARY)
               + _NUMERIC + tuple(f"job={job}" for job in _JOBS))


def _open_data(name):
    """Binary stream of a packaged data file (works from a wheel, an sdist or a checkout)."""
    return (files("rnshmc.datasets") / "data" / name).open("rb")


def _standardise(X):
    """Centre and scale the columns of X in place (sample sd, ddof=1, as MATLAB's zscore).

    X should be Fortran-ordered: numpy sums a contiguous column pairwise, but accumulates the
    columns of a C-ordered array row by row, whose rounding error (relative ~ n * eps) leaves
    means of 1e-10 on columns such as cons.price.idx (values ~93, sd ~0.6).
    """
    X -= X.mean(axis=0)
    X /= X.std(axis=0, ddof=1)


def _codes(values, levels, column):
    """Integer codes (index into ``levels``) of a sequence of category names."""
    lookup = {level: code for code, level in enumerate(levels)}
    try:
        return np.array([lookup[v] for v in values], dtype=np.intp)
    except KeyError as error:
        raise ValueError(f"bank data: unexpected {column} category {error.args[0]!r}") from None


def load_bank_marketing(return_names=False):
    """UCI Bank Marketing data as preprocessed for the RNS-HMC paper's logistic regression.

    The design reproduces the authors' ``bankmarket.mat`` (Zhang, Shahbaba & Zhao, 2017) from
    ``bank-additional-full.csv``: rows with ``housing`` or ``loan`` equal to "unknown" are
    dropped (the same 990 rows for both), leaving 40,198 rows; the columns are

    - 0: intercept (ones);
    - 1: age;
    - 2: education, coded 1..8 in alphabetical order of the category names ("basic.4y" = 1,
      ..., "university.degree" = 7, "unknown" = 8);
    - 3: housing (yes = 1, no = 0); 4: loan (yes = 1, no = 0);
    - 5: contact (telephone = 1, cellular = 0);
    - 6-13: duration, campaign, previous, emp.var.rate, cons.price.idx, cons.conf.idx,
      euribor3m, nr.employed;
    - 14-24: job dummies in alphabetical order (admin., blue-collar, entrepreneur, housemaid,
      management, retired, self-employed, services, student, technician, unemployed);
      the reference level is "unknown".

    Columns 1-24 are all z-scored (mean 0, sample standard deviation 1), the job dummies
    included, exactly as in the authors' matrix; a dummy is therefore two-valued, positive
    where the client has that job. The target is 1 if the client subscribed a term deposit.

    Parameters
    ----------
    return_names : bool, optional
        Also return the 25 column names (default False).

    Returns
    -------
    X : ndarray of shape (40198, 25), float64, C-contiguous
    y : ndarray of shape (40198,), float64, values in {0, 1} (4,533 ones)
    names : list of str
        Only if ``return_names``; "intercept", "age", "education", "housing", "loan",
        "contact", the eight numeric names and "job=<level>" for the dummies.

    Notes
    -----
    The authors' file has 40,197 rows: it lacks the first data row of the CSV (a 56-year-old
    housemaid, y = "no"), presumably lost together with the header line. All other rows agree
    in order, so ``X[1:]`` with columns 1-24 standardised again reproduces their matrix (to
    about 1e-10) and ``y[1:]`` their labels. ``duration`` is known only after the call (the
    UCI notes recommend dropping it for a realistic predictive model); it is kept because the
    paper's benchmark uses it.

    Data: S. Moro, P. Cortez and P. Rita, "A data-driven approach to predict the success of bank
    telemarketing", Decision Support Systems 62:22-31, 2014, doi:10.1016/j.dss.2014.03.001;
    Moro, Rita & Cortez (2014), Bank Marketing [Dataset], UCI Machine Learning Repository,
    doi:10.24432/C5K306. Licence CC BY 4.0. Preprocessing: C. Zhang, B. Shahbaba and H. Zhao,
    "Hamiltonian Monte Carlo acceleration using surrogate functions with random bases",
    Statistics and Computing, 2017.
    """
    if not isinstance(return_names, (bool, np.bool_)):
        raise ValueError(f"return_names must be True or False, got {return_names!r}")
    with _open_data(_BANK_FILE) as raw, gzip.open(raw, "rt", encoding="ascii", newline="") as f:
        rows = list(csv.reader(f, delimiter=";"))
    header, rows = rows[0], rows[1:]
    column = {name: i for i, name in enumerate(header)}
    needed = ("age", "job", "education", "y") + tuple(b[0] for b in _BINARY) + _NUMERIC
    missing = [name for name in needed if name not in column]
    if missing:
        raise ValueError(f"bank data: columns {missing} missing from {_BANK_FILE}")
    housing, loan = column["housing"], column["loan"]
    rows = [r for r in rows if r[housing] != "unknown" and r[loan] != "unknown"]
    # One tuple per CSV column: numpy then parses each numeric column in a single call.
    cols = list(zip(*rows))

    n = len(rows)
    X = np.empty((n, len(_BANK_NAMES)), order="F")  # column-wise filling and standardising
    X[:, 0] = 1.0
    X[:, 1] = np.array(cols[column["age"]], dtype=np.float64)
    X[:, 2] = _codes(cols[column["education"]], _EDUCATION, "education") + 1
    for j, (name, one, zero) in enumerate(_BINARY, start=3):
        X[:, j] = _codes(cols[column[name]], (zero, one), name)
    for j, name in enumerate(_NUMERIC, start=3 + len(_BINARY)):
        X[:, j] = np.array(cols[column[name]], dtype=np.float64)
    jobs = _codes(cols[column["job"]], _JOBS + ("unknown",), "job")
    first_job = 3 + len(_BINARY) + len(_NUMERIC)
    X[:, first_job:] = 0.0
    known = jobs < len(_JOBS)
    X[np.flatnonzero(known), first_job + jobs[known]] = 1.0
    _standardise(X[:, 1:])
    X = np.ascontiguousarray(X)  # the C kernels read rows
    y = _codes(cols[column["y"]], ("no", "yes"), "y").astype(np.float64)
    if return_names:
        return X, y, list(_BANK_NAMES)
    return X, y


def _read_a9a():
    """Dense 0/1 matrix (32561, 123) and {0, 1} labels of the LIBSVM a9a training file."""
    with _open_data(_A9A_FILE) as raw:
        text = gzip.decompress(raw.read()).decode("ascii")
    # Every entry of a9a is "index:1" followed by a space (lines end with a space). Dropping
    # ":1 " leaves plain integers, and the count check proves no other value was present.
    if text.count(":") != text.count(":1 "):
        raise ValueError(f"a9a: {_A9A_FILE} has entries whose value is not 1")
    text = text.replace(":1 ", " ")
    labels, indices, counts = [], [], []
    for line in text.splitlines():
        tokens = line.split()
        if not tokens:
            continue
        labels.append(tokens[0])
        indices.extend(tokens[1:])
        counts.append(len(tokens) - 1)
    label_set = set(labels)
    if not label_set <= {"+1", "-1"}:
        raise ValueError(f"a9a: labels must be +1/-1, found {sorted(label_set)}")
    indices = np.array(indices, dtype=np.intp)
    if indices.size and (indices.min() < 1 or indices.max() > _A9A_FEATURES):
        raise ValueError(f"a9a: feature indices must lie in 1..{_A9A_FEATURES}")
    n = len(labels)
    X = np.zeros((n, _A9A_FEATURES))
    X[np.repeat(np.arange(n), counts), indices - 1] = 1.0
    y = np.array([label == "+1" for label in labels], dtype=np.float64)
    return X, y


def load_a9a(n_components=60, rng=0):
    """LIBSVM a9a (UCI Adult) reduced by a Gaussian random projection, as in the RNS-HMC paper.

    The 32,561 training rows of a9a have 123 binary features (Platt's binarisation of the Adult
    census data); the target is 1 if the income exceeds 50K. The paper reduces them to 60
    features by a random projection: with R of shape (123, n_components) and independent
    N(0, 1/n_components) entries, the projected data are X01 @ R. Each projected column is then
    standardised (mean 0, sample standard deviation 1), which makes the scale of R irrelevant,
    and an intercept column is prepended.

    Parameters
    ----------
    n_components : int, optional
        Number of projected features, 1 <= n_components <= 123 (default 60, the paper's).
        The 0/1 matrix has rank 108 (one-hot blocks sum to one), so from 108 components on
        the returned design (with its intercept) is rank deficient.
    rng : None, int, SeedSequence or Generator, optional
        Seed or generator of the projection matrix, passed to ``numpy.random.default_rng``
        (default 0, so the default data set is reproducible). The authors' own projection
        (MATLAB) cannot be reproduced, so their draws are on a different 60-feature design.

    Returns
    -------
    X : ndarray of shape (32561, n_components + 1), float64, C-contiguous
        Column 0 is the intercept (ones), columns 1.. the standardised projections.
    y : ndarray of shape (32561,), float64, values in {0, 1} (7,841 ones)

    Notes
    -----
    Data: LIBSVM data sets, https://www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/ (C.-C.
    Chang and C.-J. Lin, "LIBSVM: a library for support vector machines", ACM TIST 2(3):27,
    2011), from the UCI Adult data (B. Becker and R. Kohavi, 1996, doi:10.24432/C5XW20;
    R. Kohavi, "Scaling up the accuracy of naive-Bayes classifiers: a decision-tree hybrid",
    KDD-96), licence CC BY 4.0; binarised as in J. C. Platt, "Fast training of support vector
    machines using sequential minimal optimization", 1998. Projection: C. Zhang, B. Shahbaba
    and H. Zhao, "Hamiltonian Monte Carlo acceleration using surrogate functions with random
    bases", Statistics and Computing, 2017.
    """
    if (isinstance(n_components, (bool, np.bool_))
            or not isinstance(n_components, (int, np.integer))
            or not 1 <= n_components <= _A9A_FEATURES):
        raise ValueError(f"n_components must be an integer in 1..{_A9A_FEATURES}, "
                         f"got {n_components!r}")
    n_components = int(n_components)
    # Draw R before reading the file so that a bad rng fails fast.
    rng = np.random.default_rng(rng)
    R = rng.normal(0.0, np.sqrt(1.0 / n_components), size=(_A9A_FEATURES, n_components))
    X01, y = _read_a9a()
    projected = (R.T @ X01.T).T  # = X01 @ R, Fortran-ordered for _standardise
    _standardise(projected)
    X = np.empty((X01.shape[0], n_components + 1))
    X[:, 0] = 1.0
    X[:, 1:] = projected
    return X, y
