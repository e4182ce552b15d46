"""Data sets of the papers' experiments."""
from .simulated import simulated_logistic

__all__ = ["simulated_logistic"]
