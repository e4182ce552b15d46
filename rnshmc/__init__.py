"""rnshmc: Hamiltonian Monte Carlo with C-level kernels and random-network surrogates."""
from . import datasets, diagnostics, models
from .results import SampleResult, load
from .samplers import HMC
from .targets import Target

__version__ = "0.1.0"

__all__ = ["HMC", "Target", "SampleResult", "load", "models", "datasets", "diagnostics",
           "__version__"]
