"""A soak: every sampler for 10^6 iterations on a cheap target, memory flat.

Each sampler runs 50 segments of 20 000 iterations on a correlated 2-d Gaussian (a C-level
target), each segment starting where the last ended (a warm start from the earlier result
where the sampler has one, else its last draw with the adapted settings given). The process's
resident memory is read after each segment, once Python's garbage and the C allocator's free
pages are given back; a leak of a few bytes per iteration shows as a trend over the segments.
The draws of a segment are dropped when the next one starts, as in a long run done in pieces.

The surrogate samplers' trust watch refits with as many hidden units as before
(``refit_growth=1``): a refit with the default growth doubles the network, and with it the
memory its matrices take (by design, docs/algorithms.md section 4), which is not a leak.
"""
import ctypes
import gc
import sys

import numpy as np
import pytest

import rnshmc
from testkit import rng_seed

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not sys.platform.startswith("linux"),
                                 reason="reads the resident memory from /proc (Linux)")]

SEGMENTS = 50
SEGMENT = 20_000  # 10^6 iterations in all


def resident_mib():
    """This process's resident memory, after collecting garbage and trimming malloc's heap."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: the reading is noisier, the bound the same
        pass
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def model():
    return rnshmc.models.toy.Gaussian(np.zeros(2), np.array([[1.0, 0.5], [0.5, 2.0]]))


def warm(make):
    """Segments that start from the earlier result (its adapted settings and surrogate)."""
    sampler = make(model())
    result = sampler.sample(draws=SEGMENT, chains=1, rng=rng_seed(0), progress=False)
    yield result
    for k in range(1, SEGMENTS):
        result = sampler.sample(draws=SEGMENT, chains=1, rng=k, progress=False,
                                warm_start=result)
        yield result


def from_last_draw(make, tune=200):
    """Segments that start from the last draw with the sampler's (fixed or re-adapted)
    settings: for the samplers without warm starts."""
    sampler = make(model())
    init = np.zeros(2)
    for k in range(SEGMENTS):
        result = sampler.sample(draws=SEGMENT, tune=tune, chains=1, rng=k, progress=False,
                                init=init)
        init = result.samples[0, -1]
        yield result


def trained_l2hmc(target):
    sampler = rnshmc.L2HMC(target, n_steps=3, step_size=0.5)
    sampler.train(n_iterations=200, chains=20, rng=rng_seed(0), progress=False)
    return sampler


SAME_SIZE_REFITS = dict(refit_growth=1.0)

SAMPLERS = {
    "HMC": lambda: warm(lambda m: rnshmc.HMC(m, n_steps=3)),
    "RNSHMC": lambda: warm(lambda m: rnshmc.RNSHMC(m, trust=SAME_SIZE_REFITS)),
    "ARNSHMC": lambda: warm(lambda m: rnshmc.ARNSHMC(m, trust=SAME_SIZE_REFITS)),
    "GradientFreeRNSHMC": lambda: warm(lambda m: rnshmc.GradientFreeRNSHMC(
        m, trust=SAME_SIZE_REFITS)),
    "RMHMC": lambda: from_last_draw(lambda m: rnshmc.RMHMC(
        m, metric=lambda q: m.precision, metric_derivatives=lambda q: np.zeros((2, 2, 2)),
        step_size=0.8, n_steps=3), tune=0),
    "RNSRMHMC": lambda: from_last_draw(lambda m: rnshmc.RNSRMHMC(
        m, n_hidden=50, step_size=0.8, n_steps=3, trust=SAME_SIZE_REFITS)),
    "L2HMC": lambda: from_last_draw(trained_l2hmc, tune=0),
    "AdaptiveMetropolis": lambda: from_last_draw(rnshmc.AdaptiveMetropolis),
}


@pytest.mark.parametrize("name", SAMPLERS)
def test_a_million_iterations_keep_memory_flat(name):
    readings, moved, refits = [], 0, 0
    for result in SAMPLERS[name]():
        refits += int(np.sum(result.get("n_refits", 0)))
        draws = result.samples
        assert draws.shape[1] == SEGMENT and np.all(np.isfinite(draws))
        moved += np.count_nonzero(np.any(np.diff(draws[0], axis=0) != 0, axis=1))
        del draws, result
        readings.append(resident_mib())
    assert len(readings) == SEGMENTS
    assert moved > 0.1 * SEGMENTS * SEGMENT, f"{name}: the chain hardly moved ({moved} moves)"
    # after the first tenth (imports, first fits, caches filled), the last tenth's median is
    # within 5% of the second tenth's
    tenth = SEGMENTS // 10
    settled = np.median(readings[tenth:2 * tenth])
    final = np.median(readings[-tenth:])
    print(f"{name}: resident MiB after segments 1, {tenth + 1}-{2 * tenth}, last "
          f"{tenth}: {readings[0]:.1f}, {settled:.1f}, {final:.1f}; {refits} refits")
    assert final <= 1.05 * settled, (
        f"{name}: resident memory grew {100 * (final / settled - 1):.1f}% over "
        f"{SEGMENTS * SEGMENT} iterations ({settled:.1f} -> {final:.1f} MiB): {readings}")
