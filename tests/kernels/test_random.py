"""Normal draws made from C (rnshmc._kernels._random) are NumPy's draws, bit for bit.

The kernels never own an RNG: they draw from the bitgen_t of the user's Generator. That only
makes seeds meaningful if the C loop consumes exactly the stream Generator.standard_normal
would, for every bit generator NumPy ships.
"""
import threading

import numpy as np
import pytest

from rnshmc._kernels._random import _standard_normal_memview
from testkit import rng_seed

BIT_GENERATORS = [np.random.PCG64, np.random.PCG64DXSM, np.random.Philox, np.random.SFC64,
                  np.random.MT19937]
SEEDS = [0, 1, 12345]
SIZES = [1, 2, 3, 255, 1000, 10_001]


def same_bits(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and np.array_equal(a.view(np.uint64), b.view(np.uint64))


@pytest.mark.parametrize("bit_generator", BIT_GENERATORS, ids=lambda b: b.__name__)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("n", SIZES)
def test_equals_generator_standard_normal(bit_generator, seed, n):
    ours = _standard_normal_memview(np.random.Generator(bit_generator(seed)), n)
    numpys = np.random.Generator(bit_generator(seed)).standard_normal(n)
    assert ours.dtype == np.float64
    assert same_bits(ours, numpys)


@pytest.mark.parametrize("bit_generator", BIT_GENERATORS, ids=lambda b: b.__name__)
def test_stream_continues_where_c_left_off(bit_generator):
    """C and NumPy draws interleaved from one Generator equal one NumPy stream: the C loop
    advances the shared bit generator state and leaves no cached values behind."""
    ours_gen = np.random.Generator(bit_generator(7))
    parts = []
    for k, n in enumerate([5, 1, 17, 1000, 3, 64]):
        if k % 2 == 0:
            parts.append(_standard_normal_memview(ours_gen, n))
        else:
            parts.append(ours_gen.standard_normal(n))
    parts.append(ours_gen.random(4))  # a different distribution afterwards
    reference = np.random.Generator(bit_generator(7))
    expected = [reference.standard_normal(len(p)) for p in parts[:-1]]
    expected.append(reference.random(4))
    assert same_bits(np.concatenate(parts), np.concatenate(expected))


def test_default_rng_and_spawned_children():
    """The generators the sampler actually uses: default_rng(seed).spawn(k)."""
    children_a = np.random.default_rng(rng_seed(2024)).spawn(3)
    children_b = np.random.default_rng(rng_seed(2024)).spawn(3)
    for a, b in zip(children_a, children_b):
        assert same_bits(_standard_normal_memview(a, 333), b.standard_normal(333))


def test_zero_draws():
    gen = np.random.default_rng(rng_seed(0))
    out = _standard_normal_memview(gen, 0)
    assert out.shape == (0,)
    # and the stream did not move
    assert same_bits(gen.standard_normal(3), np.random.default_rng(rng_seed(0)).standard_normal(3))


def test_distribution_sanity():
    """A large C draw is standard normal (guards against e.g. a wrong distribution function
    being linked in, independently of the bit-equality tests)."""
    x = _standard_normal_memview(np.random.default_rng(rng_seed(99)), 200_000)
    assert abs(x.mean()) < 5 / np.sqrt(x.size)
    assert abs(x.var() - 1.0) < 5 * np.sqrt(2.0 / x.size)
    assert abs(np.mean(x ** 3)) < 5 * np.sqrt(15.0 / x.size)


def test_concurrent_draws_hold_the_generator_lock():
    """Two threads drawing from one Generator through C: the bit generator's lock is held for
    each call, so every call gets a contiguous block of the stream and together they use
    exactly the first 2 * reps * n values (in some order of blocks)."""
    gen = np.random.default_rng(rng_seed(5))
    n, reps = 5000, 20
    results = {0: [], 1: []}

    def work(k):
        for _ in range(reps):
            results[k].append(_standard_normal_memview(gen, n))

    threads = [threading.Thread(target=work, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    reference = np.random.default_rng(rng_seed(5)).standard_normal((2 * reps, n))
    blocks = {r.tobytes() for r in reference}
    drawn = [b.tobytes() for b in results[0] + results[1]]
    assert len(set(drawn)) == 2 * reps
    assert set(drawn) == blocks


def test_not_a_generator():
    with pytest.raises((AttributeError, TypeError, ValueError)):
        _standard_normal_memview(np.random.RandomState(0), 3)
