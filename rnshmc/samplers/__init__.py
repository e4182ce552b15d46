"""Sampler front ends."""
from .hmc import HMC
from .nuts import NUTS
from .rmhmc import RMHMC, RNSRMHMC
from .rns import RNSHMC
from .arns import ARNSHMC
from .l2hmc import L2HMC
from .gradient_free import AdaptiveMetropolis, GradientFreeRNSHMC

__all__ = ["HMC", "NUTS", "RNSHMC", "ARNSHMC", "RMHMC", "RNSRMHMC", "L2HMC", "GradientFreeRNSHMC", "AdaptiveMetropolis"]
