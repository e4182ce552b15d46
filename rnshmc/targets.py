"""Targets: the log densities samplers draw from.

Every density is a target. Samplers accept

* an :class:`rnshmc.Target` built from Python callables,
* a built-in model (``rnshmc.models.*``), whose density is evaluated in C,
* any object following the BridgeStan-style protocol: ``dim`` (an int or a method returning
  one), ``log_density(q) -> float`` and ``log_density_gradient(q) -> (float, ndarray)``.

Any of them may also define ``init_point(rng)``, where its chains start when ``sample()`` is
given no ``init`` (see ``model_init_point``).

Internally each is turned into a C-level target (``as_ctarget``); for Python callables the
C loop takes the GIL around each call, so exceptions propagate with their traceback. What a
Python callable returns is checked on the way (``ReturnsFloat``, ``ReturnsGradient``,
``ReturnsValueAndGradient``), so that a wrong return names the callable rather than surfacing
as NumPy's conversion error inside a chain.
"""
import numbers

import numpy as np

from ._kernels._targets import CTarget, PotentialOnly, PyCallableTarget
from .validation import check_point

__all__ = ["Target", "as_ctarget", "without_gradient", "rebuilt_from_checkpoints"]


class Target:
    """A target log density given by Python callables.

    Parameters
    ----------
    logp : callable or None
        ``logp(q) -> float``, the log density (up to a constant) at ``q``, an ndarray of shape
        (dim,). May be None when ``logp_and_grad`` is given.
    grad_logp : callable, optional
        ``grad_logp(q) -> ndarray of shape (dim,)``, the gradient of ``logp``.
    logp_and_grad : callable, optional
        ``logp_and_grad(q) -> (float, ndarray)``; preferred when value and gradient share work.
        Give either this or ``grad_logp``, not both.
    dim : int, optional
        Number of parameters. If None, it is ``init_point``'s length when that is an array,
        else the sampler infers it from ``init``.
    init_point : None, array of shape (dim,) or callable
        Where the chains start when ``sample()`` is given no ``init`` (None: uniformly in
        (-2, 2) in each coordinate, as Stan does). A point every chain starts at (a posterior
        mode, an estimate), or ``init_point(rng) -> ndarray of shape (dim,)``, called once per
        chain with that chain's own ``numpy.random.Generator`` (a draw from the prior, for
        example: the starts are then reproducible from ``sample()``'s ``rng``, whatever runs
        the chains). A callable needs ``dim``. The log density must be finite there; where it
        is not, the chain tries points jittered around it (see ``sample()``'s ``init``).

    Notes
    -----
    Gradient-based samplers (HMC) need ``grad_logp`` or ``logp_and_grad``. A callable that
    returns a non-finite value inside a trajectory makes that proposal a divergence (rejected);
    at the initial point it is a ``ValueError``. An exception raised by a callable propagates.
    What the callables return is checked at each call: a value that is not a float (an array,
    even of shape (1,), a string, None), a gradient that is not an array of shape (dim,), or
    a ``logp_and_grad`` return that is not such a pair raises a ``TypeError`` or
    ``ValueError`` naming the callable (a 0-d array or a NumPy scalar is a float). The check
    costs a few tenths of a microsecond per call, little beside a Python model's own call.

    Examples
    --------
    >>> import numpy as np, rnshmc
    >>> target = rnshmc.Target(lambda q: -0.5 * q @ q, grad_logp=lambda q: -q, dim=3)
    >>> target.log_density(np.ones(3))
    -1.5
    """

    def __init__(self, logp, grad_logp=None, logp_and_grad=None, dim=None, init_point=None):
        for name, f in (("logp", logp), ("grad_logp", grad_logp), ("logp_and_grad", logp_and_grad)):
            if f is not None and not callable(f):
                raise TypeError(f"{name} must be callable, got {type(f).__name__}")
        if grad_logp is not None and logp_and_grad is not None:
            raise ValueError("give grad_logp or logp_and_grad, not both")
        if grad_logp is not None and logp is None:
            raise ValueError("grad_logp needs logp")
        if logp is None and logp_and_grad is None:
            raise ValueError("give logp, or logp_and_grad")
        if dim is not None:
            dim = _check_dim(dim)
        if callable(init_point):
            if dim is None:  # (its length is not known before a chain calls it)
                raise ValueError("Target: init_point is a callable, so give dim= too (an "
                                 "init_point array gives it)")
        elif init_point is not None:
            init_point = check_point(init_point, "Target's init_point", dim)
            dim = len(init_point) if dim is None else dim
        # (the callables are kept checked: see ReturnsFloat)
        self._logp = None if logp is None else ReturnsFloat(logp, "logp")
        self._grad_logp = None if grad_logp is None else ReturnsGradient(grad_logp, "grad_logp")
        self._logp_and_grad = (None if logp_and_grad is None
                               else ReturnsValueAndGradient(logp_and_grad, "logp_and_grad"))
        self._init_point = init_point
        self.dim = dim

    @property
    def has_gradient(self):
        """Whether a gradient was given."""
        return self._grad_logp is not None or self._logp_and_grad is not None

    def log_density(self, q):
        """Log density at ``q`` (float)."""
        q = np.asarray(q, dtype=np.float64)  # (the checks compare a gradient's shape to q's)
        if self._logp is not None:
            return float(self._logp(q))
        return float(self._logp_and_grad(q)[0])

    def log_density_gradient(self, q):
        """(log density, gradient) at ``q``: (float, ndarray of shape (dim,))."""
        if not self.has_gradient:
            raise TypeError("this target has no gradient: give grad_logp or logp_and_grad")
        value, grad = self._value_and_gradient(np.asarray(q, dtype=np.float64))
        return float(value), grad

    def _value_and_gradient(self, q):
        # (the C target's logp_and_grad for grad_logp: q is a fresh float64 array there)
        if self._logp_and_grad is not None:
            return self._logp_and_grad(q)
        return self._logp(q), self._grad_logp(q)

    def init_point(self, rng):
        """Where a chain starts when ``sample()`` is given no ``init`` (see ``init_point``
        in the class docstring).

        Parameters
        ----------
        rng : numpy.random.Generator
            The chain's own random stream.

        Returns
        -------
        ndarray of shape (dim,) or None
            None when the target has no ``init_point`` (the sampler's default start).
        """
        if self._init_point is None:
            return None
        if callable(self._init_point):
            return check_point(self._init_point(rng),
                               f"init_point ({callable_name(self._init_point)})", self.dim)
        return self._init_point.copy()

    def _make_ctarget(self, dim):
        return PyCallableTarget(
            dim, logp=self._logp,
            logp_and_grad=(self._logp_and_grad if self._logp_and_grad is not None
                           else self._value_and_gradient if self._grad_logp is not None
                           else None))


def _check_dim(dim):
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
        raise ValueError(f"dim must be a positive integer, got {dim!r}")
    return int(dim)


def target_dim(target):
    """The dimension a target declares, or None if it does not say."""
    dim = getattr(target, "dim", None)
    if callable(dim):
        dim = dim()
    return None if dim is None else _check_dim(dim)


def _not_a_target(target):
    return TypeError(
        "a target must be an rnshmc.Target, a built-in model, or an object with dim, "
        f"log_density and log_density_gradient; got {type(target).__name__}")


def check_target(target):
    """Raise TypeError unless ``target`` is something :func:`as_ctarget` accepts."""
    if isinstance(target, (CTarget, Target)) or isinstance(getattr(target, "_ctarget", None), CTarget):
        return
    if not callable(getattr(target, "log_density", None)):
        raise _not_a_target(target)


def as_ctarget(target, dim=None):
    """The C-level target behind ``target`` (see the module docstring for what is accepted).

    Parameters
    ----------
    target : Target, model, CTarget or BridgeStan-style object
    dim : int, optional
        Dimension to use when the target does not declare one.

    Returns
    -------
    CTarget
    """
    if isinstance(target, CTarget):
        return target
    ctarget = getattr(target, "_ctarget", None)
    if isinstance(ctarget, CTarget):
        return ctarget
    declared = target_dim(target) if hasattr(target, "dim") else None
    if declared is not None and dim is not None and declared != dim:
        raise ValueError(f"the target has dim {declared} but the initial point has {dim} entries")
    dim = declared if declared is not None else dim
    if isinstance(target, Target):
        if dim is None:
            raise unknown_dim(target)
        return target._make_ctarget(dim)
    if callable(getattr(target, "log_density", None)):
        if dim is None:
            raise unknown_dim(target)
        gradient = getattr(target, "log_density_gradient", None)
        return PyCallableTarget(
            dim, logp=ReturnsFloat(target.log_density, "log_density"),
            logp_and_grad=(ReturnsValueAndGradient(gradient, "log_density_gradient")
                           if callable(gradient) else None))
    raise _not_a_target(target)


def unknown_dim(target, owner="sample"):
    """The ValueError for a ``target`` whose dimension is not known: it says how to give it
    (``owner``: the function that takes ``init``)."""
    if isinstance(target, Target):
        where = "rnshmc.Target was given neither dim= nor an init_point array: pass dim= to it"
    else:
        where = (f"the {type(target).__name__} object has no dim attribute: give it one "
                 "(an int, or a method returning one)")
    return ValueError(f"the target's dimension is unknown: {where}, or pass init= (an array "
                      f"of shape (dim,) or (chains, dim)) to {owner}()")


def model_init_point(target, rng, dim=None):
    """Where ``target`` starts a chain when ``sample()`` is given no ``init``: its
    ``init_point(rng)``, checked, or None.

    Parameters
    ----------
    target : model
        Any target; one without an ``init_point`` method has no point of its own.
    rng : numpy.random.Generator
        The chain's own random stream (the point may be a draw from the prior).
    dim : int, optional
        The dimension the point must have (None: any).

    Returns
    -------
    ndarray of shape (dim,) or None
        None when the target has no ``init_point`` or it returns None (the sampler's default
        start).

    Raises
    ------
    TypeError, ValueError
        If the point is not a finite real array of shape (dim,).
    """
    method = getattr(target, "init_point", None)
    if not callable(method):
        return None
    point = method(rng)
    return None if point is None else check_point(point, f"{callable_name(method)}(rng)", dim)


# ---------------------------------------------------------------------------------------------
# checked callables: what a model's Python callable returns, checked at each call. They are
# module-level classes, not closures, so that they pickle when the callables do (chains run
# in spawned processes), and the common return (a float; a float64 array of q's shape) takes
# one type test before it goes back to the C loop.

# what a log density may be returned as without further conversion (the C loop calls float())
_FLOAT_TYPES = frozenset([float, int, np.float64, np.float32, np.int64, np.int32])
# (NumPy's float64 dtype is a singleton: an identity test is the fast path's, and an equal
# dtype that is not it takes the full check)
_FLOAT64 = np.dtype(np.float64)


def callable_name(function):
    """How an error names a user's callable: its ``__qualname__`` (a bound method's
    ``Class.method``), else its type and repr."""
    name = getattr(function, "__qualname__", None)
    return name if isinstance(name, str) else f"{type(function).__name__} {function!r:.80}"


def _returned(value):
    """What a callable returned, for an error message: its type, and shape where it has one."""
    if isinstance(value, np.generic):
        return type(value).__name__
    if isinstance(value, np.ndarray) or (hasattr(value, "shape") and hasattr(value, "dtype")):
        return f"{type(value).__name__} of shape {tuple(value.shape)} and dtype {value.dtype}"
    if isinstance(value, (str, bytes)):
        return f"{type(value).__name__} {value!r:.60}"
    if isinstance(value, (list, tuple)):
        return f"{type(value).__name__} of length {len(value)}"
    return "None" if value is None else type(value).__name__


class _Checked:
    """A model's callable ``function`` (the model's ``role``: "logp", "log_density", ...)
    whose returns are checked; picklable when ``function`` is."""

    __slots__ = ("function", "role")

    def __init__(self, function, role):
        self.function = function
        self.role = role

    def __reduce__(self):
        return (type(self), (self.function, self.role))

    def __repr__(self):
        return f"{type(self).__name__}({self.function!r}, {self.role!r})"

    def _call(self, q):
        """``function(q)``. An exception it raises gets a note (Python 3.11 on) naming the
        callable and the point, which a traceback shows after the message."""
        try:
            return self.function(q)
        except Exception as error:
            add_note = getattr(error, "add_note", None)
            if add_note is not None:
                add_note(f"rnshmc: raised by {self.role} ({callable_name(self.function)}) at "
                         f"q = {np.array2string(np.asarray(q), precision=6, threshold=20)}")
            raise

    def _error(self, kind, value, expected, part=""):
        return kind(f"{self.role} ({callable_name(self.function)}) returned "
                    f"{_returned(value)}{part}; it must return {expected}")

    def _float(self, value, part=""):
        """``value`` as a float, or the error saying what was returned instead."""
        if isinstance(value, (bool, np.bool_)):
            raise self._error(TypeError, value, "a float (the log density at q)", part)
        if isinstance(value, numbers.Real):
            return float(value)
        shape = getattr(value, "shape", None)
        if shape is not None and tuple(shape) != ():
            hint = (": return value.item() or value[0] (NumPy deprecates, then refuses, "
                    "converting a 1-element array to a float)" if tuple(shape) == (1,) else "")
            raise self._error(ValueError, value, f"a float (the log density at q){hint}", part)
        dtype = getattr(value, "dtype", None)
        if (dtype is None or np.dtype(dtype).kind in "iuf") and hasattr(value, "__float__"):
            return float(value)  # (a 0-d array, or another library's scalar)
        raise self._error(TypeError, value, "a float (the log density at q)", part)

    def _gradient(self, gradient, q, part=""):
        """``gradient`` as a float64 array of ``q``'s shape, or the error saying what was
        returned instead."""
        expected = f"an ndarray of shape (dim,) = {q.shape} (the gradient at q)"
        try:
            array = np.asarray(gradient)
        except (TypeError, ValueError):  # (a ragged list)
            raise self._error(ValueError, gradient, expected, part) from None
        if array.dtype.kind not in "iuf":
            raise self._error(TypeError, gradient, expected, part)
        if array.shape != q.shape:
            raise self._error(ValueError, gradient, expected, part)
        return array.astype(np.float64, copy=False)


class ReturnsFloat(_Checked):
    """``function(q)`` checked to be a float (a NumPy scalar or 0-d array is one): a log
    density. See ``_Checked``."""

    __slots__ = ()

    def __call__(self, q):
        value = self._call(q)
        if type(value) in _FLOAT_TYPES:
            return value
        return self._float(value)


class ReturnsGradient(_Checked):
    """``function(q)`` checked to be an array of ``q``'s shape: a gradient (returned as
    float64)."""

    __slots__ = ()

    def __call__(self, q):
        gradient = self._call(q)
        if (type(gradient) is np.ndarray and gradient.dtype is _FLOAT64
                and gradient.shape == q.shape):
            return gradient
        return self._gradient(gradient, q)


class ReturnsValueAndGradient(_Checked):
    """``function(q)`` checked to be a (float, array of ``q``'s shape) pair: the log density
    and its gradient (returned as a (value, float64 array) tuple)."""

    __slots__ = ()

    def __call__(self, q):
        pair = self._call(q)
        if type(pair) is tuple and len(pair) == 2:
            value, gradient = pair
            if (type(value) in _FLOAT_TYPES and type(gradient) is np.ndarray
                    and gradient.dtype is _FLOAT64 and gradient.shape == q.shape):
                return pair
        return self._pair(pair, q)

    def _pair(self, pair, q):
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise self._error(TypeError, pair, f"a (float, ndarray of shape (dim,) = {q.shape}) "
                                               "pair: the log density at q and its gradient")
        return (self._float(pair[0], " as the log density (its first element)"),
                self._gradient(pair[1], q, " as the gradient (its second element)"))


def without_gradient(model):
    """A model seen without its gradient: a sampler given it can only evaluate densities, and
    asking for a gradient raises (for checks and comparisons).

    Parameters
    ----------
    model : built-in model, rnshmc.Target or BridgeStan-style object
        A built-in model (``rnshmc.models.*``) keeps its C-level density (and its
        ``density_flops``); a Python target is called through its ``log_density``.

    Returns
    -------
    object
        With ``dim``, ``log_density(q)`` and ``has_gradient`` False.

    Examples
    --------
    >>> import numpy as np, rnshmc
    >>> from rnshmc.targets import without_gradient
    >>> model = without_gradient(rnshmc.models.Gaussian(np.zeros(2), np.eye(2)))
    >>> model.has_gradient, model.log_density(np.ones(2))
    (False, -1.0)
    """
    return _DensityOnly(model)


class _DensityOnly:
    has_gradient = False

    def __init__(self, model):
        self.model = model
        self.dim = target_dim(model)
        self.density_flops = getattr(model, "density_flops", None)
        self._ctarget = PotentialOnly(as_ctarget(model, self.dim))

    def log_density(self, q):
        return -self._ctarget.eval_potential(q)

    def init_point(self, rng):
        return model_init_point(self.model, rng, self.dim)

    def __reduce__(self):
        return (_DensityOnly, (self.model,))


# ----------------------------------------------------------------------------------------------
# models a checkpoint rebuilds by itself

#: kind -> model class, for the models a checkpoint rebuilds without being given them
#: (filled by :func:`rebuilt_from_checkpoints`)
CHECKPOINT_KINDS = {}


def rebuilt_from_checkpoints(kind):
    """Class decorator: a model class that checkpoints save and :func:`rnshmc.resume`
    rebuilds, so that resuming its runs needs no ``target``.

    The class defines ``checkpoint_spec(self)``, which returns a dict of str to numbers and
    arrays of numbers (what rebuilds the model), and a classmethod
    ``from_checkpoint_spec(cls, spec)``, its inverse. Subclasses are saved as the class
    decorated. The checkpoints read the protocol through ``rnshmc.targets.target_spec`` and
    ``target_from_spec``, and import no model (``docs/architecture.md``).

    Parameters
    ----------
    kind : str
        The name checkpoints record (unique among the registered classes).

    Returns
    -------
    callable
        The decorator, which returns the class unchanged but for its ``checkpoint_kind``.

    Raises
    ------
    ValueError
        If another class registered ``kind`` already (not the same class defined again).
    TypeError
        If the class lacks one of the two methods.

    Examples
    --------
    >>> import numpy as np
    >>> from rnshmc.targets import rebuilt_from_checkpoints
    >>> @rebuilt_from_checkpoints("isotropic_normal")
    ... class IsotropicNormal:
    ...     def __init__(self, scale, dim):
    ...         self.scale, self.dim = scale, dim
    ...     def log_density(self, q):
    ...         return -0.5 * float(q @ q) / self.scale**2
    ...     def log_density_gradient(self, q):
    ...         return self.log_density(q), -q / self.scale**2
    ...     def checkpoint_spec(self):
    ...         return dict(scale=self.scale, dim=self.dim)
    ...     @classmethod
    ...     def from_checkpoint_spec(cls, spec):
    ...         return cls(float(spec["scale"]), int(spec["dim"]))
    >>> IsotropicNormal.checkpoint_kind
    'isotropic_normal'
    """
    def register(cls):
        known = CHECKPOINT_KINDS.get(kind, cls)
        if (known.__module__, known.__qualname__) != (cls.__module__, cls.__qualname__):
            raise ValueError(f"the checkpoint kind {kind!r} is {known.__qualname__}'s already "
                             f"(of {known.__module__})")  # (a class defined again may take it)
        for method in ("checkpoint_spec", "from_checkpoint_spec"):
            if not callable(getattr(cls, method, None)):
                raise TypeError(f"{cls.__name__} must define {method} to be rebuilt from "
                                "checkpoints")
        cls.checkpoint_kind = kind
        CHECKPOINT_KINDS[kind] = cls
        return cls
    return register


def target_spec(target):
    """What a checkpoint saves to rebuild ``target``: ``{"kind": ..., "spec": {...}}`` for a
    model registered with :func:`rebuilt_from_checkpoints`, else None.

    Raises
    ------
    TypeError
        If the model's ``checkpoint_spec()`` holds anything but numbers and arrays of numbers.
    """
    kind = getattr(type(target), "checkpoint_kind", None)
    if CHECKPOINT_KINDS.get(kind) is None or not isinstance(target, CHECKPOINT_KINDS[kind]):
        return None
    spec = target.checkpoint_spec()
    for key, value in spec.items():
        if not (isinstance(key, str)
                and isinstance(value, (numbers.Number, np.ndarray, np.generic))
                and np.asarray(value).dtype.kind in "biuf"):
            raise TypeError(f"{type(target).__name__}.checkpoint_spec(): {key!r} must be a "
                            f"number or an array of numbers, got {type(value).__name__}")
    return {"kind": kind, "spec": dict(spec)}


def target_from_spec(saved):
    """The model :func:`target_spec` saved as ``saved``.

    Raises
    ------
    ValueError
        If no model class registered its kind (its module not imported, or a kind of
        another version of rnshmc).
    """
    kind = saved["kind"]
    if kind not in CHECKPOINT_KINDS:
        raise ValueError(f"no model rebuilt from checkpoints is of kind {kind!r} (known: "
                         f"{', '.join(sorted(CHECKPOINT_KINDS)) or 'none'})")
    return CHECKPOINT_KINDS[kind].from_checkpoint_spec(dict(saved["spec"]))
