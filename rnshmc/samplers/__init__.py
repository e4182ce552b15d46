"""Sampler front ends."""
from .hmc import HMC

__all__ = ["HMC"]
