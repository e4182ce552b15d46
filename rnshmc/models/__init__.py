"""Built-in models: C-level targets."""
from .logistic import LogisticRegression

__all__ = ["LogisticRegression"]
