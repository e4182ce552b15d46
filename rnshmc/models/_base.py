"""The front end the built-in models share over their C-level targets."""


class CTargetModel:
    """What the built-in models share: a C-level target in ``_ctarget`` and the potential
    convention U = -log density (up to a constant unless a model's docstring says so)."""

    @property
    def dim(self):
        return self._ctarget.dim

    def potential(self, q):
        """U(q) = -log density."""
        return self._ctarget.eval_potential(q)

    def potential_and_gradient(self, q):
        """(U(q), grad U(q))."""
        return self._ctarget.eval_potential_and_gradient(q)

    def log_density(self, q):
        """Log density at ``q``."""
        return -self.potential(q)

    def log_density_gradient(self, q):
        """(log density, gradient) at ``q``."""
        U, grad = self.potential_and_gradient(q)
        return -U, -grad
