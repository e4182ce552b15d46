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


def map_chains(function, tasks, pool=None, stop=None):
    """``[function(task) for task in tasks]``, on ``pool`` (a concurrent.futures.Executor) if given.

    With a process pool ``function`` and the tasks must be picklable; with a thread pool the C
    loops run in parallel because they release the GIL. ``stop``: the run's stop flag (an
    int32 array of one element), set when the waiting thread is interrupted (Ctrl-C) so that
    the chains stop; the tasks are then still awaited (they return within a transition) and
    the KeyboardInterrupt is raised with their results in its ``outcomes`` attribute
    (``complete``: whether every task had started).
    """
    if pool is None:
        return [function(task) for task in tasks]
    if not hasattr(pool, "submit"):
        raise TypeError("pool must be a concurrent.futures.Executor (with a submit method)")
    futures = [pool.submit(function, task) for task in tasks]
    try:
        return [future.result() for future in futures]
    except KeyboardInterrupt as interrupt:
        if stop is None:
            raise
        # the chains of a thread pool watch ``stop``; a process pool's workers got the
        # terminal's Ctrl-C themselves (a SIGINT sent to this process alone does not reach
        # them: their chains then run to the end of their tasks)
        stop[0] = 1
        for future in futures:
            future.cancel()
        interrupt.outcomes = [future.result() for future in futures if not future.cancelled()]
        interrupt.complete = len(interrupt.outcomes) == len(futures)
        raise
