"""Sampler front ends."""
from .hmc import HMC
from .rmhmc import RMHMC, RNSRMHMC
from .rns import RNSHMC

__all__ = ["HMC", "RNSHMC", "RMHMC", "RNSRMHMC"]
