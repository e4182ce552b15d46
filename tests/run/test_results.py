import io
import json
import math
import re
import struct
import sys
import zipfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


# -- malformed files -----------------------------------------------------------
# Every file `load` cannot read raises ValueError naming it; a missing file,
# FileNotFoundError.
def valid_file():
    """A small saved file: (bytes, metadata, arrays), computed once."""
    if not hasattr(valid_file, "cache"):
        buffer = io.BytesIO()
        SampleResult(
            samples=np.arange(12.0).reshape(1, 4, 3),
            timings={"tune": 0.5, "per_phase": np.arange(2)},
            names=["a", 1, None],
            step=np.float32(0.25),
            rate=float("nan"),
        ).save(buffer)
        data = buffer.getvalue()
        with np.load(io.BytesIO(data)) as npz:
            arrays = {name: npz[name] for name in npz.files if name != "__meta__"}
            meta = json.loads(npz["__meta__"].item())
        valid_file.cache = data, meta, arrays
    return valid_file.cache


def npy_bytes(array):
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=True)
    return buffer.getvalue()


def npy_with_header(header):
    """An .npy file (format 1.0) whose header text is `header`, then 64 zero bytes."""
    header = header.encode("latin1")
    header += b" " * (-(10 + len(header) + 1) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + b"\0" * 64


def zip_bytes(members):
    """An uncompressed zip of {name: bytes} members, or of arrays as name + '.npy'."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        for name, value in members.items():
            if isinstance(value, bytes):
                z.writestr(name, value)
            else:
                z.writestr(name + ".npy", npy_bytes(value))
    return buffer.getvalue()


def with_meta(meta, **members):
    """A file with `meta` (JSON-encoded unless a str) as its metadata, and `members`."""
    text = meta if isinstance(meta, str) else json.dumps(meta)
    return zip_bytes({"__meta__": np.array(text), **members})


def with_entries(entries, version=1, **members):
    meta = {"format": "rnshmc.SampleResult", "version": version, "entries": entries}
    return with_meta(meta, **members)


def patch_zip_headers(data, fields, value):
    """Set a 2-byte field of every (local, central) zip header, at offsets `fields`."""
    out = bytearray(data)
    for signature, field in zip((b"PK\x03\x04", b"PK\x01\x02"), fields):
        start = 0
        while (start := out.find(signature, start)) >= 0:
            struct.pack_into("<H", out, start + field, value)
            start += 4
    return bytes(out)


def patch_end_record(data, field, value):
    """Set a 4-byte field of the zip's end-of-central-directory record."""
    out = bytearray(data)
    struct.pack_into("<I", out, out.rfind(b"PK\x05\x06") + field, value)
    return bytes(out)


def flip_member_byte(data):
    """Flip a byte inside the first member's compressed data (not in a zip header)."""
    out = bytearray(data)
    name_len, extra_len = struct.unpack_from("<HH", out, 26)
    out[30 + name_len + extra_len + 20] ^= 0xFF
    return bytes(out)


def entry(node, **members):
    """A file whose only entry, 'x', is `node`."""
    return with_entries({"x": node}, **members)


RESULT = "rnshmc.SampleResult"
NPY_HEADER = "{'descr': '<f8', 'fortran_order': False, 'shape': "
UNCLOSED_NPY = npy_with_header(NPY_HEADER + "(3,")  # a syntax error
HUGE_NPY = npy_with_header(NPY_HEADER + f"({10**15},)}}")  # 8e15 bytes declared, 64 stored
# (case, the file's bytes from the valid file's); the comment says what `load`
# raised before it turned every failure into ValueError ("returned": no error).
MALFORMED_FILES = [
    ("empty file", lambda v: b""),  # EOFError
    ("text file", lambda v: b"not an npz\n"),  # ValueError: "...load it unsafely"
    ("npy file", lambda v: npy_bytes(np.arange(3))),  # TypeError: context manager
    ("truncated to 10 bytes", lambda v: v[:10]),  # BadZipFile
    ("truncated to half", lambda v: v[: len(v) // 2]),  # BadZipFile
    ("truncated end record", lambda v: v[:-10]),  # BadZipFile
    ("member data corrupted", flip_member_byte),  # BadZipFile: Bad CRC-32
    ("bad directory offset", lambda v: patch_end_record(v, 16, 2**32 - 1)),  # OSError
    ("encrypted", lambda v: patch_zip_headers(entry({"value": 1}), (6, 8), 1)),
    # ^ RuntimeError: password required
    ("unknown compression", lambda v: patch_zip_headers(entry({"value": 1}), (8, 10), 99)),
    # ^ NotImplementedError
    ("no metadata", lambda v: zip_bytes({"a": np.arange(3)})),  # ValueError
    ("metadata not npy", lambda v: zip_bytes({"__meta__.npy": b"{}"})),  # AttributeError
    ("metadata an int", lambda v: zip_bytes({"__meta__": np.array(3)})),  # TypeError
    ("metadata 1-d", lambda v: zip_bytes({"__meta__": np.array(["{}"] * 2)})),
    # ^ ValueError: can only convert an array of size 1
    ("metadata objects", lambda v: zip_bytes({"__meta__": np.array([{}], dtype=object)})),
    # ^ ValueError: Object arrays cannot be loaded when allow_pickle=False
    ("metadata npy header", lambda v: zip_bytes({"__meta__.npy": UNCLOSED_NPY})),
    # ^ tokenize.TokenError (NumPy's header parser)
    ("metadata not JSON", lambda v: with_meta("{'format': 1")),  # JSONDecodeError
    ("metadata a list", lambda v: with_meta([1, 2])),  # AttributeError
    ("metadata null", lambda v: with_meta("null")),  # AttributeError
    ("metadata too deep", lambda v: with_meta("[" * 10**5 + "]" * 10**5)),
    # ^ RecursionError
    ("wrong format", lambda v: with_meta({"format": "x", "version": 1, "entries": {}})),
    # ^ ValueError
    ("version a string", lambda v: with_entries({}, version="1")),  # TypeError
    ("version too new", lambda v: with_entries({}, version=2)),  # ValueError
    ("no entries", lambda v: with_meta({"format": RESULT, "version": 1})),  # KeyError
    ("entries a list", lambda v: with_entries([])),  # AttributeError
    ("entry a number", lambda v: entry(5)),  # AttributeError
    ("entry without kind", lambda v: entry({})),  # ValueError: not enough values to unpack
    ("entry with two kinds", lambda v: entry({"value": 1, "float": "1"})),  # ValueError
    ("unknown kind", lambda v: entry({"pickle": "x"})),  # ValueError
    ("value a list", lambda v: entry({"value": [1, 2]})),  # returned [1, 2]
    ("float not a string", lambda v: entry({"float": None})),  # TypeError
    ("float not a number", lambda v: entry({"float": "fast"})),  # ValueError
    ("missing array", lambda v: entry({"array": "gone"})),  # KeyError
    ("array name a number", lambda v: entry({"array": 5})),  # KeyError
    ("array name a list", lambda v: entry({"array": ["a"]})),  # TypeError: unhashable
    ("array not npy", lambda v: entry({"array": "raw"}, raw=b"12345")),  # returned bytes
    ("object array", lambda v: entry({"array": "a"}, a=np.array([None], dtype=object))),
    # ^ ValueError: Object arrays cannot be loaded when allow_pickle=False
    ("scalar not 0-d", lambda v: entry({"scalar": "a"}, a=np.arange(3))),  # returned array
    ("dict payload a list", lambda v: entry({"dict": []})),  # AttributeError
    ("list payload a number", lambda v: entry({"list": 3})),  # TypeError
    ("tuple payload a dict", lambda v: entry({"tuple": {"a": {"value": 1}}})),
    # ^ AttributeError
    ("nested entry broken", lambda v: entry({"dict": {"y": {"list": [7]}}})),
    # ^ AttributeError
    ("array npy header", lambda v: entry({"array": "a"}, **{"a.npy": UNCLOSED_NPY})),
    # ^ tokenize.TokenError
    ("array bigger than data", lambda v: entry({"array": "a"}, **{"a.npy": HUGE_NPY})),
    # ^ MemoryError: Unable to allocate 7.11 PiB
]


@pytest.mark.parametrize(
    "make", [m for _, m in MALFORMED_FILES], ids=[case for case, _ in MALFORMED_FILES]
)
def test_load_malformed_file_raises_value_error(tmp_path, make):
    path = tmp_path / "bad.npz"
    path.write_bytes(make(valid_file()[0]))
    with pytest.raises(ValueError, match=re.escape(repr(path))):
        load(path)
    with open(path, "rb") as f:  # file objects too
        with pytest.raises(ValueError, match="not a valid saved SampleResult"):
            load(f)


def test_load_missing_file_raises_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        load(tmp_path / "missing.npz")
    with pytest.raises(FileNotFoundError):
        load(str(tmp_path / "missing.npz"))


# -- fuzzing: a damaged file loads, or raises ValueError; nothing else ----------
def assert_loads_or_value_error(data):
    try:
        result = load(io.BytesIO(data))
    except ValueError:
        return
    assert type(result) is SampleResult


# deterministic (derandomize) and bounded, for CI: about a second each
FUZZ = settings(max_examples=150, derandomize=True, deadline=None, database=None)


@FUZZ
@given(
    edits=st.lists(
        st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), max_size=6
    ),
    keep=st.one_of(st.none(), st.floats(0, 1)),
)
def test_fuzz_damaged_bytes(edits, keep):
    """Bytes overwritten anywhere (zip headers, compressed data); the file truncated."""
    data = bytearray(valid_file()[0])
    for where, byte in edits:
        data[int(where * len(data))] = byte
    if keep is not None:
        data = data[: int(keep * len(data))]
    assert_loads_or_value_error(bytes(data))


KINDS = ["value", "float", "array", "scalar", "dict", "list", "tuple"]
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4)
    | st.sampled_from(["nan", "-inf", "samples", "dict::timings::per_phase", "step"]),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.sampled_from(KINDS + ["format", "version", "entries"]), inner,
                      max_size=2),
    max_leaves=8,
)


@FUZZ
@given(path=st.lists(st.integers(0, 20), max_size=5), value=JSON)
def test_fuzz_damaged_metadata(path, value):
    """A random JSON value put somewhere in the valid metadata (with real array
    names and kinds likely, so that the checks of every entry are reached)."""
    _, meta, arrays = valid_file()
    holder = {"root": json.loads(json.dumps(meta))}  # a copy; the root replaceable
    parent, key = holder, "root"
    for step in path:  # walk down existing keys and indices, as far as they go
        child = parent[key]
        if isinstance(child, dict) and child:
            parent, key = child, sorted(child)[step % len(child)]
        elif isinstance(child, list) and child:
            parent, key = child, step % len(child)
        else:
            break
    parent[key] = value
    assert_loads_or_value_error(with_meta(json.dumps(holder["root"]), **arrays))
