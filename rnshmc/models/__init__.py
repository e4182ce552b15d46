"""Built-in models: C-level targets, and small hard posteriors as Python targets (``hard``)."""
from .logistic import LogisticRegression
from .pde import EllipticPDE
from .toy import (Gaussian, GaussianMixture, RoughWell, correlated_gaussian_2d,
                  ill_conditioned_gaussian)
from .umbridge import UMBridgeModel
from .hard import correlated_regression, gp_poisson, hard_posteriors, neals_funnel
from .ode import LotkaVolterra, lotka_volterra

__all__ = ["LogisticRegression", "EllipticPDE", "Gaussian", "GaussianMixture", "RoughWell",
           "correlated_gaussian_2d", "ill_conditioned_gaussian", "UMBridgeModel",
           "correlated_regression", "neals_funnel", "gp_poisson", "hard_posteriors",
           "LotkaVolterra", "lotka_volterra"]
