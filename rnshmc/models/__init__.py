"""Built-in models: C-level targets."""
from .logistic import LogisticRegression
from .toy import Gaussian

__all__ = ["LogisticRegression", "Gaussian"]
