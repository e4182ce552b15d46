"""Argument checks shared by the front ends (one place, as scikit-learn's ``check_scalar``).

Each check raises ``TypeError`` naming the argument when the value is of the wrong kind (a
string or a complex number where a real number belongs) and ``ValueError`` when it is of the
right kind but out of range; it returns the value converted to a plain Python or NumPy type.
"""
import numbers
import os
import sys

import numpy as np

__all__ = ["check_integer", "check_real", "check_per_chain_real", "check_inverse_mass",
           "check_point", "check_initial_points", "check_group", "refuse_renamed",
           "user_stacklevel"]


def user_stacklevel():
    """The ``stacklevel`` that makes a warning raised by the caller point at the first caller
    outside rnshmc."""
    package = os.path.dirname(os.path.abspath(__file__))
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame, level = frame.f_back, level + 1
    return level


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


def numeric_array(value, name):
    """``value`` as a float64 array (ValueError for complex or non-numeric input)."""
    if np.iscomplexobj(value):
        raise ValueError(f"{name} must be real-valued, got a complex array")
    try:
        return np.asarray(value, dtype=float)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a numeric array: {err}") from None


def _real_array(value, name):
    array = np.asarray(value)
    if array.dtype.kind not in "iuf":
        raise TypeError(f"{name} must hold real numbers, got "
                        + (f"an array of dtype {array.dtype}" if isinstance(value, np.ndarray)
                           else f"{type(value).__name__} {value!r:.60}"))
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


def check_point(value, name, dim=None):
    """A point of a target: a float array of shape (dim,) (any length if ``dim`` is None) of
    finite values (a new array)."""
    array = _real_array(value, name)
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"{name} must be an array of shape (dim,)"
                         f"{'' if dim is None else f' = ({dim},)'}, got shape {array.shape}")
    if dim is not None and array.size != dim:
        raise ValueError(f"{name} has {array.size} entries but the target has dim {dim}")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} contains non-finite values: {array}")
    return array


def check_initial_points(init, chains, dim=None, owner="sample"):
    """``sample()``'s ``init``: one point for every chain, shape (dim,), or one per chain,
    (chains, dim) (``dim`` None: any length). Returns a new float array of shape
    (chains, dim) of finite values; the errors name ``owner`` (the function given ``init``)
    and say which of the two shapes is wrong."""
    array = _real_array(init, f"{owner}: init")
    want = (f"({dim},) or ({chains}, {dim})" if dim is not None
            else f"(dim,) or ({chains}, dim)")
    if array.ndim not in (1, 2) or array.size == 0:
        raise ValueError(f"{owner}: init must have shape {want}, got {array.shape}")
    if dim is not None and array.shape[-1] != dim:
        raise ValueError(f"{owner}: init must have shape {want}: it has {array.shape[-1]} "
                         f"entries per chain but the target has dim {dim}")
    if array.ndim == 2 and array.shape[0] != chains:
        raise ValueError(f"{owner}: init must have shape {want}: it has {array.shape[0]} rows "
                         f"(one per chain) but chains={chains}")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{owner}: init contains non-finite values")
    return np.tile(array, (chains, 1)) if array.ndim == 1 else array


def check_group(value, name, keys):
    """A group of settings (``explore=``, ``trust=``, ...): None or a dict whose keys are in
    ``keys``; returns a new dict."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise TypeError(f"{name} must be a dict of settings, got {type(value).__name__}")
    unknown = sorted(set(value) - set(keys))
    if unknown:
        raise TypeError(f"{name} has no setting {', '.join(map(repr, unknown))} (it takes "
                        f"{', '.join(sorted(keys))})")
    return dict(value)


def refuse_renamed(owner, given, moves):
    """Refuse earlier keyword names: each ``given`` name must be in ``moves`` (old name ->
    (group or None, new name); group "sample": an argument of ``sample()``; or (group, new
    name, the new spelling to name)), and a TypeError names the new spelling of each. There
    has been no release with the earlier names, so they are not kept for a deprecation cycle.

    Raises
    ------
    TypeError
        For a name that is neither an argument nor a moved one (as Python would), and for
        every moved one: "``owner``: X= was renamed: use Y", one clause per name given.
    """
    renamed = []
    for old in given:
        if old not in moves:
            raise TypeError(f"{owner}() got an unexpected keyword argument {old!r}")
        group, new = moves[old][:2]
        spelling = (moves[old][2] if len(moves[old]) > 2 else f"{new}=" if group is None
                    else f"sample({new}=...)" if group == "sample" else f"{group}=dict({new}=...)")
        renamed.append(f"{old}= was renamed: use {spelling}")
    if renamed:
        raise TypeError(f"{owner}: {'; '.join(renamed)}")
