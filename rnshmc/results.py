"""Container for sampler output, with diagnostics, ArviZ export and ``.npz`` I/O.

Every sampler in :mod:`rnshmc` returns a :class:`SampleResult`: a ``dict``
whose keys can also be read as attributes.  Results are saved with
:meth:`SampleResult.save` and read back with :func:`load`; the file is a plain
compressed ``.npz`` that needs no pickling to read.
"""

import inspect
import json
import math
import os
import tokenize
import zipfile
import zlib

import numpy as np

__all__ = ["SampleResult", "load"]

# Version of the ``.npz`` layout written by ``SampleResult.save``.
_FORMAT = "rnshmc.SampleResult"
_VERSION = 1
_META_KEY = "__meta__"
# Names that cannot be passed to ``np.savez_compressed`` as keywords, or that
# would be mistaken for the prefixed names used for nested entries.
_RESERVED_NAMES = {"file", "allow_pickle", "args", "kwds", _META_KEY}
_RESERVED_PREFIXES = ("dict::", "list::", "tuple::", "array::")
_JSON_TYPES = (type(None), bool, int, float, str)
# The first bytes of a zip file: a member, or the end record of an empty zip.
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
# What reading a malformed file raises besides ValueError: np.load and zipfile
# (EOFError for an empty file, BadZipFile, zlib.error, OSError for a seek to a
# bad offset, RuntimeError for encrypted members, NotImplementedError for an
# unknown compression), NumPy's .npy header parser (SyntaxError,
# tokenize.TokenError), json (RecursionError on deep nesting), and MemoryError
# for an .npy header declaring an impossibly large array.  `load` turns them
# into ValueError; it opens the file outside, so a missing one still raises
# FileNotFoundError.
_MALFORMED = (
    ValueError, TypeError, KeyError, IndexError, AttributeError, EOFError,
    OSError, zipfile.BadZipFile, zlib.error, RuntimeError, SyntaxError,
    tokenize.TokenError, OverflowError, MemoryError,
)


class SampleResult(dict):
    """The output of a sampler: a ``dict`` with attribute access.

    Keys can be read, set and deleted as attributes (``res.samples`` is
    ``res["samples"]``), in the manner of :class:`scipy.optimize.OptimizeResult`.
    Reading a missing attribute raises :class:`AttributeError`.

    Attributes
    ----------
    samples : ndarray of float64, shape (chains, draws, dim)
        The draws, after tuning.
    log_density : ndarray, shape (chains, draws)
        Log density (up to a constant) of each draw.
    accepted : ndarray of bool, shape (chains, draws)
        Whether the proposal of each draw was accepted.
    accept_prob : ndarray, shape (chains, draws)
        Metropolis acceptance probability ``min(1, exp(-dH))`` of each draw.
    acceptance_rate : ndarray, shape (chains,)
        Mean of `accepted` over the draws of each chain.
    diverging : ndarray of bool, shape (chains, draws)
        Whether the trajectory of each draw diverged.
    energy : ndarray, shape (chains, draws)
        Hamiltonian at the kept state of each draw.
    step_size : ndarray of float, shape (chains,)
        Leapfrog step size used for sampling in each chain.
    n_steps : ndarray of int, shape (chains, draws)
        Leapfrog steps taken for each draw.
    n_density_evals : ndarray of int, shape (chains,)
        Log-density evaluations per chain.
    n_gradient_evals : ndarray of int, shape (chains,)
        Gradient evaluations per chain.
    timings : dict of {str: float}
        Wall-clock seconds per phase, e.g. ``'tune'`` and ``'sampling'``.
    inverse_mass_matrix : ndarray, shape (chains, dim) or (chains, dim, dim), optional
        Adapted diagonal or dense inverse mass matrix of each chain.
    sampler : str
        Name of the sampler that produced the result.
    converged : bool
        Whether the draws are a usable answer: max R-hat <= 1.01, bulk and tail ESS >= 100
        per chain, and every chain moved (``docs/guide/diagnostics.md``).
    convergence_problems : list of str
        Why not, when `converged` is False (empty otherwise).

    Notes
    -----
    Samplers may add further keys: ints, floats, bools, strings, ``None``,
    arrays, and (nested) dicts of these.  All of them survive
    :meth:`save` / :func:`load`.

    Examples
    --------
    >>> import numpy as np
    >>> from rnshmc import SampleResult
    >>> res = SampleResult(samples=np.zeros((2, 100, 3)), sampler="hmc")
    >>> res.samples.shape
    (2, 100, 3)
    >>> res
    SampleResult(samples: float64 (2, 100, 3), sampler: 'hmc')
    """

    # -- attribute access -------------------------------------------------
    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(
                f"{type(self).__name__!s} has no attribute or key {name!r}"
            ) from None

    def __setattr__(self, name, value):
        self[name] = value

    def __delattr__(self, name):
        try:
            del self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __dir__(self):
        keys = [k for k in self.keys() if isinstance(k, str)]
        return sorted(set(keys) | set(super().__dir__()))

    def copy(self):
        """Return a shallow copy, as a `SampleResult`."""
        return type(self)(self)

    def __repr__(self):
        name = type(self).__name__
        if not self:
            return f"{name}()"
        parts = [f"{k}: {_short(v)}" for k, v in self.items()]
        one_line = f"{name}({', '.join(parts)})"
        if len(one_line) <= 88:
            return one_line
        return name + "(\n" + "".join(f"    {p},\n" for p in parts) + ")"

    # -- diagnostics ------------------------------------------------------
    def ess(self, cap=True):
        """Effective sample size of each coordinate, pooled over chains.

        Parameters
        ----------
        cap : bool, optional
            Passed to :func:`rnshmc.diagnostics.ess`.

        Returns
        -------
        ndarray, shape (dim,)
        """
        from . import diagnostics

        return diagnostics.ess(self.samples, cap=cap)

    def min_ess(self, cap=True):
        """Smallest effective sample size over the coordinates.

        Parameters
        ----------
        cap : bool, optional
            Passed to :meth:`ess`.

        Returns
        -------
        float
        """
        return float(np.min(self.ess(cap=cap)))

    def rhat(self):
        """Potential scale reduction factor of each coordinate.

        Returns
        -------
        ndarray, shape (dim,)
            See :func:`rnshmc.diagnostics.rhat`.
        """
        from . import diagnostics

        return diagnostics.rhat(self.samples)

    def summary(self, names=None):
        """Table of posterior summaries and diagnostics per coordinate.

        Parameters
        ----------
        names : sequence of str, optional
            Coordinate names; passed to :func:`rnshmc.diagnostics.summary`.

        Returns
        -------
        Summary
            A printable, dict-like summary; printed, it ends with the sampler's notes (which
            sampler ran and why it stopped) and the run's cost (``result.cost``: exact
            evaluations and seconds per phase, model evaluations per effective draw).
        """
        from . import diagnostics

        table = diagnostics.summary(self.samples, names=names)
        table.footer = run_lines(self)
        return table

    def draws(self, discard=0, thin=1, flat=False):
        """Return the samples, optionally burned in, thinned and flattened.

        Like ``emcee``'s ``get_chain``.

        Parameters
        ----------
        discard : int, optional
            Number of leading draws of each chain to drop.
        thin : int, optional
            Keep every `thin`-th draw after `discard`.
        flat : bool, optional
            If true, stack the chains (chain 0's draws first).

        Returns
        -------
        ndarray
            ``samples[:, discard::thin]``, shape ``(chains, n, dim)``, or
            shape ``(chains * n, dim)`` when `flat` is true.
        """
        discard, thin = int(discard), int(thin)
        if discard < 0:
            raise ValueError(f"discard must be >= 0, got {discard}")
        if thin < 1:
            raise ValueError(f"thin must be >= 1, got {thin}")
        x = np.asarray(self.samples)[:, discard::thin]
        if flat:
            x = x.reshape(-1, *x.shape[2:])
        return x

    # -- ArviZ ------------------------------------------------------------
    def to_arviz(self):
        """Convert to an ArviZ ``InferenceData`` (ArviZ 0.x) or ``DataTree`` (1.x).

        The posterior holds one variable ``q`` with dims
        ``(chain, draw, q_dim_0)``.  ``sample_stats`` holds those of ``lp``
        (from `log_density`), ``acceptance_rate`` (from `accept_prob`),
        ``diverging``, ``energy``, ``step_size`` (repeated for each draw),
        ``n_steps``, for NUTS ``tree_depth``, and for the Riemannian samplers
        ``solver_iterations`` and ``implicit_failed``, that are present in the result.

        Returns
        -------
        arviz.InferenceData or xarray.DataTree

        Raises
        ------
        ImportError
            If ArviZ is not installed.
        """
        try:
            import arviz as az
        except ImportError as exc:
            raise ImportError(
                "SampleResult.to_arviz needs ArviZ: pip install rnshmc[arviz] "
                "(or pip install arviz)"
            ) from exc

        samples = np.asarray(self.samples)
        chains, n_draws = samples.shape[:2]
        posterior = {"q": samples.reshape(chains, n_draws, -1)}
        stats = {}
        for ours, theirs in [
            ("log_density", "lp"),
            ("accept_prob", "acceptance_rate"),
            ("diverging", "diverging"),
            ("energy", "energy"),
            ("n_steps", "n_steps"),
            ("solver_iterations", "solver_iterations"),
            ("tree_depth", "tree_depth"),
            ("implicit_failed", "implicit_failed"),
        ]:
            if ours in self:
                stats[theirs] = np.asarray(self[ours])
        if "step_size" in self:
            step = np.asarray(self.step_size, dtype=float).reshape(-1, 1)
            stats["step_size"] = np.repeat(
                np.broadcast_to(step, (chains, 1)), n_draws, axis=1
            )
        dims = {"q": ["q_dim_0"]}

        params = inspect.signature(az.from_dict).parameters
        if "posterior" in params:  # ArviZ 0.x: one keyword per group
            return az.from_dict(posterior=posterior, sample_stats=stats, dims=dims)
        # ArviZ 1.x: a single mapping of groups.
        return az.from_dict({"posterior": posterior, "sample_stats": stats}, dims=dims)

    # -- I/O --------------------------------------------------------------
    def save(self, path):
        """Save to a compressed ``.npz`` file readable without pickle.

        Arrays are stored as arrays under their own key (prefixed with
        ``"array::"`` if the key is reserved, e.g. ``"file"``); arrays inside
        dicts, lists and tuples under keys like ``"dict::timings::tune"``.
        Everything else is described by a JSON string stored under
        ``"__meta__"``, which also records the name and type of every entry.

        Parameters
        ----------
        path : str, path-like or file-like
            Destination.  As with :func:`numpy.savez_compressed`, ``".npz"``
            is appended to a file name that does not already end with it.

        Raises
        ------
        TypeError
            If a key is not a string, or a value is not one of: ndarray
            (without Python objects), NumPy scalar, ``None``, bool, int,
            float, str, or a list, tuple or str-keyed dict of these.

        See Also
        --------
        load
        """
        arrays = {}
        entries = {}
        for key, value in self.items():
            if not isinstance(key, str):
                raise TypeError(f"cannot save key {key!r}: keys must be str")
            if type(value) in (dict, list, tuple):
                array_name = f"{type(value).__name__}::{key}"
            elif key in _RESERVED_NAMES or key.startswith(_RESERVED_PREFIXES):
                array_name = "array::" + key
            else:
                array_name = key
            entries[key] = _encode(value, repr(key), array_name, arrays)
        meta = {"format": _FORMAT, "version": _VERSION, "entries": entries}
        arrays[_META_KEY] = np.array(json.dumps(meta))
        np.savez_compressed(path, **arrays)


def run_lines(result):
    """Which sampler ran and why, why it stopped, and its cost, as lines of text."""
    lines = []
    if "choice" in result:
        lines.append(f"sampler: {result['choice']['sampler']} ({result['choice']['reason']})")
    if "stopping" in result:
        stop = result["stopping"]
        line = f"stopped: {stop['reason']} after {stop['draws']} draws per chain"
        if stop.get("ess") is not None:
            line += (f" (min bulk ESS {stop['ess']:.0f} for {stop['ess_target']:g} wanted"
                     + (f", min tail ESS {stop['ess_tail']:.0f}" if "ess_tail" in stop else "")
                     + f", max R-hat {stop['rhat']:.3f})")
        lines.append(line + f", {stop['seconds']:.3g} s")
    if "cost" in result:
        lines += cost_lines(result["cost"])
    if "training" in result:  # (L2HMC's, before this run)
        training = result["training"]
        line = (f"training (before sampling): {training['iterations']} iterations, "
                f"{training['gradient_equivalents']} gradient-equivalents of the "
                f"{'surrogate' if training['on_surrogate'] else 'model'}, "
                f"{training['seconds']:.3g} s")
        if "break_even" in training:
            even = training["break_even"]
            line += (f"; against {even['baseline']} it never pays for itself (no cheaper "
                     "effective draws)" if math.isinf(even["draws"]) else
                     f"; it pays for itself against {even['baseline']} from "
                     f"{even['draws']:.3g} effective draws on")
        lines.append(line)
    return lines


def cost_lines(cost):
    """A run's ``cost`` (see ``Sampler.sample``) as lines of text."""
    lines = ["cost (all chains): " + "; ".join(
        f"{name} {p['density_evals']} densities, {p['gradient_evals']} gradients"
        + (f", {p['metric_evals']} metrics" if p["metric_evals"] else "")
        + f", {p['seconds']:.3g} s" for name, p in cost["phases"].items())]
    lines.append(f"model evaluations (densities + gradients): {cost['model_evals']}; per "
                 f"effective draw (min bulk ESS {cost['ess_bulk_min']:.0f}): "
                 f"{cost['model_evals_per_effective_draw']:.3g}")
    return lines


def load(path):
    """Load a `SampleResult` written by :meth:`SampleResult.save`.

    Parameters
    ----------
    path : str, path-like or file-like
        The ``.npz`` file.

    Returns
    -------
    SampleResult
        With the same keys, in the same order, and values of the same types
        (arrays keep their dtype and shape).

    Raises
    ------
    FileNotFoundError
        If `path` does not exist (other errors opening it, such as
        :class:`PermissionError`, are raised as they are too).
    ValueError
        If the file is not a ``.npz`` written by :meth:`SampleResult.save`
        or is damaged: not a zip file, truncated or corrupted, without the
        ``"__meta__"`` entry, with metadata that is not the JSON ``save``
        writes (wrong format or version, unknown or ill-typed entries,
        references to missing arrays), or holding object arrays (which would
        need pickle).  The message names the file and the problem; the
        original exception, if any, is chained.
    """
    if hasattr(path, "read"):
        return _load(path, path)
    with open(os.fspath(path), "rb") as file:
        return _load(file, path)


def _load(file, path):
    """`load` from the open `file`; `path` names it in error messages."""
    try:
        # np.load would read an .npy file as an array, and suggest unpickling
        # anything else
        magic = file.read(len(_ZIP_MAGIC[0]))
        file.seek(-len(magic), 1)
        if magic not in _ZIP_MAGIC:
            raise ValueError("not an .npz file (it does not start like a zip)")
        with np.load(file, allow_pickle=False) as npz:
            if _META_KEY not in npz.files:
                raise ValueError(f"no {_META_KEY!r} entry")
            meta = _array(npz, _META_KEY)
            if meta.shape != () or meta.dtype.kind != "U":
                raise ValueError(f"{_META_KEY!r} is not a string")
            meta = json.loads(meta.item())
            if not isinstance(meta, dict) or meta.get("format") != _FORMAT:
                raise ValueError("the metadata do not describe a SampleResult")
            version = meta.get("version")
            if type(version) is not int or not 1 <= version <= _VERSION:
                raise ValueError(f"unsupported version {version!r}")
            entries = meta.get("entries")
            if not isinstance(entries, dict):
                raise ValueError("the metadata have no 'entries' object")
            return SampleResult(
                (key, _decode(node, npz, repr(key))) for key, node in entries.items()
            )
    except _MALFORMED as exc:
        problem = f"{type(exc).__name__}: {exc}"
        if type(exc) is ValueError:
            problem = str(exc)
        raise ValueError(
            f"{path!r} is not a valid saved SampleResult: {problem}"
        ) from exc


# -- helpers ----------------------------------------------------------------
def _short(value):
    """One-line description of `value` for ``SampleResult.__repr__``."""
    if isinstance(value, np.ndarray):
        if value.ndim <= 1 and value.size <= 6:
            return np.array2string(value, precision=3, separator=" ")
        return f"{value.dtype} {value.shape}"
    if isinstance(value, (float, np.floating)):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_short(v)}" for k, v in value.items()) + "}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _encode(value, where, array_name, arrays):
    """Describe `value` as a JSON node, moving any arrays into `arrays`.

    `where` names the value in error messages and `array_name` is the
    ``.npz`` key used if `value` is an array; items of a container are named
    ``array_name + "::" + item_key``.
    """
    if type(value) in _JSON_TYPES:
        if isinstance(value, float) and not np.isfinite(value):
            return {"float": repr(value)}  # nan/inf: keep the JSON standard
        return {"value": value}
    if type(value) is np.ndarray or isinstance(value, np.generic):
        if value.dtype.hasobject:
            raise TypeError(f"cannot save {where}: arrays of Python objects need pickle")
        if array_name in arrays:
            raise ValueError(f"cannot save {where}: name {array_name!r} is used twice")
        arrays[array_name] = np.asarray(value)
        return {"array" if type(value) is np.ndarray else "scalar": array_name}
    if type(value) is dict:
        items = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"cannot save {where}: dict key {k!r} is not str")
            items[k] = _encode(v, f"{where}[{k!r}]", f"{array_name}::{k}", arrays)
        return {"dict": items}
    if type(value) in (list, tuple):
        items = [
            _encode(v, f"{where}[{i}]", f"{array_name}::{i}", arrays)
            for i, v in enumerate(value)
        ]
        return {type(value).__name__: items}
    raise TypeError(
        f"cannot save {where}: unsupported type {type(value).__name__} "
        "(use ndarray, NumPy scalar, int, float, bool, str, None, "
        "or dict/list/tuple of these)"
    )


def _decode(node, npz, where):
    """Inverse of `_encode`; `where` names the node in error messages.

    Every node is checked to be what `_encode` writes, so a damaged file
    raises ValueError rather than returning values of the wrong types.
    """
    if not (isinstance(node, dict) and len(node) == 1):
        raise ValueError(f"entry {where} is not a one-key object: {node!r:.60}")
    (kind, payload), = node.items()
    expected = {
        "value": _JSON_TYPES, "float": (str,), "array": (str,), "scalar": (str,),
        "dict": (dict,), "list": (list,), "tuple": (list,),
    }.get(kind)
    if expected is None:
        raise ValueError(f"entry {where} has an unknown kind {kind!r}")
    if type(payload) not in expected:
        raise ValueError(
            f"entry {where} of kind {kind!r} holds a {type(payload).__name__}"
        )
    if kind == "value":
        return payload
    if kind == "float":
        try:
            return float(payload)
        except ValueError:
            raise ValueError(f"entry {where}: {payload!r:.40} is not a float") from None
    if kind == "array":
        return _array(npz, payload, where)
    if kind == "scalar":
        array = _array(npz, payload, where)
        if array.shape != ():
            raise ValueError(f"entry {where}: array {payload!r} is not a scalar")
        return array[()]
    if kind == "dict":
        return {k: _decode(v, npz, f"{where}[{k!r}]") for k, v in payload.items()}
    items = [_decode(v, npz, f"{where}[{i}]") for i, v in enumerate(payload)]
    return items if kind == "list" else tuple(items)


def _array(npz, name, where=None):
    """The array `name` of `npz` (NpzFile returns non-.npy members as bytes)."""
    where = "" if where is None else f"entry {where}: "
    if name not in npz.files:
        raise ValueError(f"{where}no array {name!r} in the file")
    try:
        array = npz[name]  # object arrays: ValueError, as allow_pickle=False
    except _MALFORMED as exc:  # name the member (a bad CRC, header, data...)
        raise ValueError(
            f"{where}cannot read {name!r}: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(array, np.ndarray):
        raise ValueError(f"{where}{name!r} is not an .npy array")
    return array
