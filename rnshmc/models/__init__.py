"""Built-in models: C-level targets."""
from .logistic import LogisticRegression
from .pde import EllipticPDE
from .toy import (Gaussian, GaussianMixture, RoughWell, correlated_gaussian_2d,
                  ill_conditioned_gaussian)
from .umbridge import UMBridgeModel

__all__ = ["LogisticRegression", "EllipticPDE", "Gaussian", "GaussianMixture", "RoughWell",
           "correlated_gaussian_2d", "ill_conditioned_gaussian", "UMBridgeModel"]
