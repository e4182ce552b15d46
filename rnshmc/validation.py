"""Argument checks shared by the front ends (one place, as scikit-learn's ``check_scalar``).

Each check raises ``TypeError`` naming the argument when the value is of the wrong kind (a
string or a complex number where a real number belongs) and ``ValueError`` when it is of the
right kind but out of range; it returns the value converted to a plain Python or NumPy type.
"""
import numbers

import numpy as np

__all__ = ["check_integer", "check_real", "check_per_chain_real", "check_inverse_mass"]


def check_integer(value, name, minimum=None):
    """``value`` as an int (bools and floats are not integers)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def check_real(value, name, lower=None, upper=None, lower_inclusive=False,
               upper_inclusive=False):
    """``value`` as a finite float within the given bounds (exclusive unless said)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r} ({type(value).__name__})")
    value = float(value)
    bad = not np.isfinite(value)
    if lower is not None:
        bad |= value < lower if lower_inclusive else value <= lower
    if upper is not None:
        bad |= value > upper if upper_inclusive else value >= upper
    if bad:
        lo = "" if lower is None else f"{lower} {'<=' if lower_inclusive else '<'} "
        hi = "" if upper is None else f" {'<=' if upper_inclusive else '<'} {upper}"
        raise ValueError(f"{name} must be a finite number with {lo}{name}{hi}, got {value!r}")
    return value


def _real_array(value, name):
    array = np.asarray(value)
    if array.dtype.kind not in "iuf":
        raise TypeError(f"{name} must hold real numbers, got an array of dtype {array.dtype}")
    return array.astype(np.float64)


def check_per_chain_real(value, name, lower=0.0):
    """A positive number, or one per chain (ndarray of shape (chains,), e.g. a result's
    ``step_size``): returns a float or a float array of finite values > ``lower``."""
    if np.ndim(value) == 0:
        return check_real(value.item() if isinstance(value, np.ndarray) else value, name,
                          lower=lower)
    array = _real_array(value, name)
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"{name} must be a number or one number per chain, got shape {array.shape}")
    if not (np.all(np.isfinite(array)) and np.all(array > lower)):
        raise ValueError(f"{name} must hold finite numbers > {lower}, got {array}")
    return array


def check_inverse_mass(value, name, dim=None):
    """An inverse mass matrix: (dim,) diagonal or (dim, dim) dense, or one per chain (chains,
    dim) / (chains, dim, dim) as a result's ``inverse_mass_matrix``. Returns a float array
    (checked for finiteness, positivity of a diagonal and symmetry of a dense matrix)."""
    array = _real_array(value, name)
    if array.ndim not in (1, 2, 3) or array.size == 0:
        raise ValueError(f"{name} must have shape (dim,), (dim, dim) or one of those per chain, "
                         f"got {array.shape}")
    if dim is not None and array.shape[-1] != dim:
        raise ValueError(f"{name} has shape {array.shape}, the target's dim is {dim}")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} contains non-finite values")
    return array
