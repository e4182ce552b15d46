"""Sampler front ends."""
from .hmc import HMC
from .rns import RNSHMC

__all__ = ["HMC", "RNSHMC"]
