"""Data sets of the papers' experiments."""
from .loaders import load_a9a, load_bank_marketing
from .simulated import simulated_logistic

__all__ = ["simulated_logistic", "load_bank_marketing", "load_a9a"]
