import math
import re
import sys

import numpy as np
import pytest

import rnshmc
from rnshmc.results import SampleResult, load

CHAINS, DRAWS, DIM = 4, 500, 3


def make_result(seed=0, dense=False):
    """A result with every standard key, shaped and typed as samplers make them."""
    rng = np.random.default_rng(seed)
    samples = rng.standard_normal((CHAINS, DRAWS, DIM))
    accept_prob = rng.uniform(0.5, 1.0, (CHAINS, DRAWS))
    accepted = rng.uniform(size=(CHAINS, DRAWS)) < accept_prob
    if dense:
        imm = np.broadcast_to(np.eye(DIM), (CHAINS, DIM, DIM)).copy()
    else:
        imm = np.ones((CHAINS, DIM))
    return SampleResult(
        samples=samples,
        log_density=-0.5 * (samples**2).sum(axis=-1),
        accepted=accepted,
        accept_prob=accept_prob,
        acceptance_rate=accepted.mean(axis=1),
        diverging=np.zeros((CHAINS, DRAWS), dtype=bool),
        energy=rng.standard_normal((CHAINS, DRAWS)) + 3.0,
        step_size=np.array([0.3, 0.31, 0.29, 0.305]),
        n_steps=rng.integers(1, 20, (CHAINS, DRAWS)),
        n_density_evals=np.full(CHAINS, 12345, dtype=np.int64),
        n_gradient_evals=np.full(CHAINS, 12000, dtype=np.int64),
        timings={"tune": 0.125, "sampling": 1.5},
        inverse_mass_matrix=imm,
        sampler="hmc",
        n_tune=1000,
        seed=None,
        adapt_info={"target_accept": 0.8, "final_log_step": -1.2, "converged": True},
    )


def assert_same(a, b):
    """Exact equality of values and of their types, recursively."""
    assert type(a) is type(b), (a, b)
    if isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b)
    else:
        assert a == b


# -- dict / attribute behaviour ------------------------------------------------
def test_attribute_access():
    res = SampleResult(samples=np.zeros((1, 2, 3)), sampler="hmc")
    assert isinstance(res, dict)
    assert res.sampler == "hmc" and res.samples is res["samples"]
    res.step_size = np.array([0.1])
    assert "step_size" in res
    del res.sampler
    assert "sampler" not in res
    with pytest.raises(AttributeError, match="nope"):
        res.nope
    with pytest.raises(AttributeError):
        del res.nope
    assert not hasattr(res, "sampler")
    assert getattr(res, "missing", 42) == 42
    assert {"samples", "step_size", "ess", "draws"} <= set(dir(res))
    assert type(res.copy()) is SampleResult


def test_repr_shows_shapes_not_contents():
    res = make_result()
    text = repr(res)
    assert text.startswith("SampleResult(")
    assert f"samples: float64 ({CHAINS}, {DRAWS}, {DIM})" in text
    assert f"accepted: bool ({CHAINS}, {DRAWS})" in text
    assert "acceptance_rate: [" in text  # short vectors show their values
    assert "sampler: 'hmc'" in text and "tune: 0.125" in text
    assert len(text) < 2000  # no array contents dumped
    assert repr(SampleResult()) == "SampleResult()"
    assert repr(SampleResult(a=1)) == "SampleResult(a: 1)"


# -- save / load ---------------------------------------------------------------
@pytest.mark.parametrize("dense", [False, True])
def test_save_load_round_trip(tmp_path, dense):
    res = make_result(dense=dense)
    res.update(
        flag=False,
        rate=float("nan"),
        big=2**40,
        np_scalar=np.float32(1.5),
        names=["a", "b", "c"],
        shape=(2, 3),
        per_phase={"tune": np.arange(3), "sampling": np.ones((2, 2), np.float32)},
        file=np.arange(2),  # clashes with np.savez_compressed's own argument
        __meta__="user value",
    )
    path = tmp_path / "run.npz"
    res.save(path)
    back = load(path)
    assert type(back) is SampleResult
    assert list(back) == list(res)
    assert_same(dict(back), dict(res))
    assert back.samples.dtype == np.float64 and back.accepted.dtype == np.bool_
    assert type(back.n_tune) is int and back.seed is None
    assert type(back.timings["tune"]) is float
    assert rnshmc.load(path).sampler == "hmc"

    # A plain npz, readable without pickle; arrays under their own names.
    with np.load(path, allow_pickle=False) as npz:
        np.testing.assert_array_equal(npz["samples"], res.samples)
        assert npz["__meta__"].shape == () and npz["__meta__"].dtype.kind == "U"
        assert npz["dict::per_phase::tune"].shape == (3,)
        assert all(npz[name].dtype != object for name in npz.files)


def test_save_appends_npz_like_numpy(tmp_path):
    res = SampleResult(samples=np.zeros((1, 2, 1)))
    res.save(str(tmp_path / "a"))
    res.save(tmp_path / "b.npz")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.npz", "b.npz"]
    with open(tmp_path / "c.bin", "wb") as f:  # file objects are left alone
        res.save(f)
    assert load(tmp_path / "c.bin").samples.shape == (1, 2, 1)


@pytest.mark.parametrize(
    "key, value, where",
    [
        ("callback", object(), "'callback'"),
        ("objs", np.array([1, "a", None], dtype=object), "'objs'"),
        ("info", {"ok": 1.0, "bad": {1, 2}}, "'info'['bad']"),
        ("info", {3: 1.0}, "'info'"),
    ],
)
def test_save_unstorable_raises_type_error(tmp_path, key, value, where):
    res = make_result()
    res[key] = value
    with pytest.raises(TypeError, match=re.escape(where)):
        res.save(tmp_path / "x.npz")


def test_load_rejects_other_npz(tmp_path):
    np.savez(tmp_path / "plain.npz", a=np.arange(3))
    with pytest.raises(ValueError, match="SampleResult"):
        load(tmp_path / "plain.npz")


# -- draws ---------------------------------------------------------------------
def test_draws():
    res = make_result()
    s = res.samples
    assert res.draws().shape == (CHAINS, DRAWS, DIM)
    d = res.draws(discard=100, thin=7)
    n = len(range(100, DRAWS, 7))
    assert d.shape == (CHAINS, n, DIM)
    np.testing.assert_array_equal(d[2, 1], s[2, 107])
    f = res.draws(discard=100, thin=7, flat=True)
    assert f.shape == (CHAINS * n, DIM)
    np.testing.assert_array_equal(f[n + 1], s[1, 107])  # chain-major order
    assert res.draws(discard=DRAWS).shape == (CHAINS, 0, DIM)
    with pytest.raises(ValueError):
        res.draws(thin=0)
    with pytest.raises(ValueError):
        res.draws(discard=-1)


# -- diagnostics (delegated to rnshmc.diagnostics) ------------------------------
def test_diagnostics_delegate_iid_normal():
    from rnshmc import diagnostics

    res = make_result(seed=1)
    n_total = CHAINS * DRAWS
    ess = res.ess()
    assert ess.shape == (DIM,)
    assert np.all(ess > 0.6 * n_total) and np.all(ess < 1.6 * n_total)
    np.testing.assert_allclose(ess, diagnostics.ess(res.samples, cap=True))
    np.testing.assert_allclose(res.ess(cap=False), diagnostics.ess(res.samples, cap=False))
    assert isinstance(res.min_ess(), float) and res.min_ess() == pytest.approx(ess.min())
    rhat = res.rhat()
    assert rhat.shape == (DIM,) and np.all(np.abs(rhat - 1) < 0.02)
    text = str(res.summary(names=["alpha", "beta", "gamma"]))
    assert "alpha" in text and "gamma" in text


# -- ArviZ ---------------------------------------------------------------------
def test_to_arviz_without_arviz(monkeypatch):
    monkeypatch.setitem(sys.modules, "arviz", None)  # makes `import arviz` fail
    with pytest.raises(ImportError, match="pip install"):
        make_result().to_arviz()


def test_to_arviz():
    pytest.importorskip("arviz")
    data = make_result().to_arviz()
    q = data.posterior["q"]
    assert q.shape == (CHAINS, DRAWS, DIM)
    assert q.dims == ("chain", "draw", "q_dim_0")
    np.testing.assert_array_equal(q.values, make_result().samples)
    stats = data.sample_stats
    assert {"lp", "acceptance_rate", "diverging", "energy", "step_size", "n_steps"} <= set(
        stats.data_vars
    )
    assert stats["step_size"].shape == (CHAINS, DRAWS)
    np.testing.assert_array_equal(stats["step_size"].values[:, 0], make_result().step_size)
    np.testing.assert_array_equal(stats["lp"].values, make_result().log_density)
