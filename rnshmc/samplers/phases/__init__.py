"""The phases samplers are declared from, one module per stage of a run, in its time order.

``base`` (the phase protocol, the exact leapfrog's settings, a chain's first position) <
``exact`` (exact HMC and adaptive Metropolis, and the warm-up) < ``exploration`` (an exact
chain as training data, and the check that ends it) < ``fit`` (the surrogate's fit and the
sampling kernel's choice) < ``dynamics`` (sampling on the surrogate with the trust watch);
beside them ``online`` (ARNS-HMC's installs) and ``riemannian`` (the generalized leapfrog).
A module imports only those before it (``docs/architecture.md``).
"""
