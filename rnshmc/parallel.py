"""Seeding and running independent chains, serially or on an executor."""
import numpy as np

__all__ = ["chain_generators", "map_chains"]


def chain_generators(rng, chains):
    """Independent ``numpy.random.Generator`` streams, one per chain.

    Parameters
    ----------
    rng : None, int, array of ints, numpy.random.SeedSequence or numpy.random.Generator
        As in SPEC 7. The streams are children of its seed sequence (``SeedSequence.spawn``), so
        the same seed gives bit-identical chains.
    chains : int

    Returns
    -------
    list of numpy.random.Generator
    """
    if isinstance(chains, bool) or not isinstance(chains, (int, np.integer)) or chains < 1:
        raise ValueError(f"chains must be a positive integer, got {chains!r}")
    if isinstance(rng, np.random.RandomState):
        raise TypeError("rng must be None, an int, a SeedSequence or a Generator (not RandomState)")
    return np.random.default_rng(rng).spawn(int(chains))


def map_chains(function, tasks, pool=None):
    """``[function(task) for task in tasks]``, on ``pool`` (a concurrent.futures.Executor) if given.

    With a process pool ``function`` and the tasks must be picklable; with a thread pool the C
    loops run in parallel because they release the GIL.
    """
    if pool is None:
        return [function(task) for task in tasks]
    if not hasattr(pool, "submit"):
        raise TypeError("pool must be a concurrent.futures.Executor (with a submit method)")
    futures = [pool.submit(function, task) for task in tasks]
    return [future.result() for future in futures]
