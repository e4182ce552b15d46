"""Models for tests/run/test_first_contact.py that must reach spawned worker processes: their
functions are defined here, at the top level of an importable module (pytest puts ``tests/`` on
``sys.path``, and a spawned worker is given the parent's ``sys.path``), as a user's model
module would be."""
import numpy as np

import rnshmc

# a standard normal centred far from the default starts' box (-2, 2)
CENTRE = np.array([40.0, -25.0])


def logp(q):
    """The log density of N(CENTRE, I)."""
    d = q - CENTRE
    return -0.5 * d @ d


def grad_logp(q):
    return CENTRE - q


def prior_draw(rng):
    """A draw from the prior N(CENTRE, 3^2 I): an ``init_point`` callable."""
    return rng.normal(CENTRE, 3.0)


def far_target():
    """N(CENTRE, I) as an rnshmc.Target starting at a prior draw per chain."""
    return rnshmc.Target(logp, grad_logp=grad_logp, dim=len(CENTRE), init_point=prior_draw)


class FarModel:
    """N(CENTRE, I) in the BridgeStan style, with an ``init_point(rng)`` method (a prior
    draw)."""

    dim = len(CENTRE)

    def log_density(self, q):
        return logp(q)

    def log_density_gradient(self, q):
        return logp(q), grad_logp(q)

    def init_point(self, rng):
        return prior_draw(rng)
