"""Targets: the log densities samplers draw from.

Every density is a target. Samplers accept

* an :class:`rnshmc.Target` built from Python callables,
* a built-in model (``rnshmc.models.*``), whose density is evaluated in C,
* any object following the BridgeStan-style protocol: ``dim`` (an int or a method returning
  one), ``log_density(q) -> float`` and ``log_density_gradient(q) -> (float, ndarray)``.

Internally each is turned into a C-level target (``as_ctarget``); for Python callables the
C loop takes the GIL around each call, so exceptions propagate with their traceback.
"""
import numpy as np

from ._kernels._targets import CTarget, PotentialOnly, PyCallableTarget

__all__ = ["Target", "as_ctarget", "without_gradient"]


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
        Number of parameters. If None, the sampler infers it from ``init``.

    Notes
    -----
    Gradient-based samplers (HMC) need ``grad_logp`` or ``logp_and_grad``. A callable that
    returns a non-finite value inside a trajectory makes that proposal a divergence (rejected);
    at the initial point it is a ``ValueError``. An exception raised by a callable propagates.

    Examples
    --------
    >>> import numpy as np, rnshmc
    >>> target = rnshmc.Target(lambda q: -0.5 * q @ q, grad_logp=lambda q: -q, dim=3)
    >>> target.log_density(np.ones(3))
    -1.5
    """

    def __init__(self, logp, grad_logp=None, logp_and_grad=None, dim=None):
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
        self._logp = logp
        self._grad_logp = grad_logp
        self._logp_and_grad = logp_and_grad
        self.dim = dim

    @property
    def has_gradient(self):
        """Whether a gradient was given."""
        return self._grad_logp is not None or self._logp_and_grad is not None

    def log_density(self, q):
        """Log density at ``q`` (float)."""
        if self._logp is not None:
            return float(self._logp(q))
        return float(self._logp_and_grad(q)[0])

    def log_density_gradient(self, q):
        """(log density, gradient) at ``q``: (float, ndarray of shape (dim,))."""
        if self._logp_and_grad is not None:
            value, grad = self._logp_and_grad(q)
        elif self._grad_logp is not None:
            value, grad = self._logp(q), self._grad_logp(q)
        else:
            raise TypeError("this target has no gradient: give grad_logp or logp_and_grad")
        return float(value), np.asarray(grad, dtype=np.float64)

    def _make_ctarget(self, dim):
        return PyCallableTarget(
            dim, logp=self._logp,
            logp_and_grad=self.log_density_gradient if self.has_gradient else None)


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
            raise ValueError("the target's dim is unknown: pass dim= to Target or give init=")
        return target._make_ctarget(dim)
    if callable(getattr(target, "log_density", None)):
        if dim is None:
            raise ValueError("the target's dim is unknown: give it a dim attribute or pass init=")
        gradient = getattr(target, "log_density_gradient", None)
        return PyCallableTarget(dim, logp=target.log_density,
                                logp_and_grad=gradient if callable(gradient) else None)
    raise _not_a_target(target)


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

    def __reduce__(self):
        return (_DensityOnly, (self.model,))
