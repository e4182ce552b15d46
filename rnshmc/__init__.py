"""rnshmc: Hamiltonian Monte Carlo with C-level kernels and random-network surrogates."""
try:
    from ._kernels import _targets as _compiled  # noqa: F401  (probe for the built kernels)
except ImportError as error:  # pragma: no cover - depends on how the package is imported
    raise ImportError(
        f"rnshmc's compiled kernels are missing ({error}). This usually means Python imported "
        f"the source checkout at {__path__[0]} rather than the installed package: run from "
        "another directory (or use the `rnshmc` command), or build in place with "
        "`python setup.py build_ext --inplace`.") from error
from . import datasets, diagnostics, fem, models
from .state import ChainState
from .results import SampleResult, load
from .samplers.checkpoint import resume
from .samplers import (ARNSHMC, HMC, L2HMC, NUTS, RMHMC, RNSHMC, RNSRMHMC, AdaptiveMetropolis,
                       GradientFreeRNSHMC)
from .serve import serve_surrogate
from .surrogate import RandomNetworkSurrogate
from .gaussian_process import GaussianProcessSurrogate
from .targets import Target
from .auto import sample
from . import calibration, testing
from .versions import __version__, show_versions


__all__ = ["sample", "HMC", "NUTS", "RNSHMC", "ARNSHMC", "RMHMC", "RNSRMHMC", "L2HMC", "GradientFreeRNSHMC",
           "AdaptiveMetropolis", "RandomNetworkSurrogate", "GaussianProcessSurrogate", "serve_surrogate", "Target", "SampleResult", "load", "ChainState", "resume",
           "models", "datasets", "diagnostics", "fem", "show_versions",
           "__version__"]
