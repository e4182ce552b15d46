"""Sampler front ends."""
from .hmc import HMC
from .rmhmc import RMHMC, RNSRMHMC
from .rns import RNSHMC
from .arns import ARNSHMC
from .l2hmc import L2HMC

__all__ = ["HMC", "RNSHMC", "ARNSHMC", "RMHMC", "RNSRMHMC", "L2HMC"]
