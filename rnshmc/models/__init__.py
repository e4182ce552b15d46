"""Built-in models: C-level targets."""
from .logistic import LogisticRegression
from .pde import EllipticPDE
from .toy import Gaussian

__all__ = ["LogisticRegression", "EllipticPDE", "Gaussian"]
