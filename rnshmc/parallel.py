"""Seeding and running independent chains, serially or on an executor."""
import contextlib
import functools
import os
import sys
import threading

import numpy as np

__all__ = ["chain_generators", "map_chains", "local_pool", "blas_limits"]


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


def is_dask(pool):
    """Whether ``pool`` is a ``dask.distributed.Client`` or one of its executors."""
    return type(pool).__module__.split(".")[0] == "distributed"


def runs_in_other_processes(pool):
    """Whether the chains run in other processes on ``pool`` (a process pool or Dask: the
    sampler and its target are pickled there; a stop flag does not reach them)."""
    from concurrent.futures import ProcessPoolExecutor
    return isinstance(pool, ProcessPoolExecutor) or is_dask(pool)


# seconds between two calls of map_chains' while_waiting (a progress bar's refresh)
WAITING_INTERVAL = 0.2


def map_chains(function, tasks, pool=None, stop=None, while_waiting=None):
    """``[function(task) for task in tasks]``, on ``pool`` if given: a
    ``concurrent.futures.Executor`` or a ``dask.distributed.Client`` (or its executor; tasks
    are submitted with ``pure=False``: each is a new computation).

    With a process pool or Dask, ``function`` and the tasks must be picklable; with a thread
    pool the C loops run in parallel because they release the GIL. ``stop``: the run's stop
    flag (an int32 array of one element), set when the waiting thread is interrupted
    (Ctrl-C) so that the chains of a thread pool stop; the workers of a pool made by
    :func:`local_pool` are sent SIGINT. The tasks under way are then still awaited (they
    return within a transition) and the KeyboardInterrupt is raised with ``outcomes``: one
    per task, None for a task that never started. With ``stop``, a task that does not return
    (the pool failed: a Dask worker that died more often than the task may be retried, a
    broken process pool) raises its exception likewise, with ``outcomes`` of the finished
    tasks (None for the others, which are cancelled). ``while_waiting``: called every
    ``WAITING_INTERVAL`` seconds while the calling thread waits for the tasks of an executor
    (not a Dask client), and once at the end (where the chains' progress is drawn, see
    :class:`rnshmc.samplers._progress.ProgressBoard`).
    """
    if pool is None:
        return [function(task) for task in tasks]
    if not hasattr(pool, "submit"):
        raise TypeError("pool must be a concurrent.futures.Executor (with a submit method) "
                        "or a dask.distributed.Client")
    futures = []
    try:
        # a Ctrl-C (or SIGTERM) while submitting would raise inside the executor's
        # machinery: signals wait until every task is in (and are then handled below)
        with _signals_held():
            if is_dask(pool):
                client = getattr(pool, "_client", pool)  # a Client, or its executor's
                # the function (the sampler and its model: a large data set) goes to the
                # workers once, not once a task
                function = client.scatter(function, broadcast=True, hash=False)
                futures = [client.submit(_call, function, task, pure=False) for task in tasks]
            else:
                futures = [pool.submit(function, task) for task in tasks]
        if while_waiting is not None and not is_dask(pool):
            from concurrent.futures import wait
            while wait(futures, timeout=WAITING_INTERVAL)[1]:
                while_waiting()
            while_waiting()
        return [future.result() for future in futures]
    except KeyboardInterrupt as interrupt:
        if stop is None:
            raise
        stop[0] = 1
        for future in futures:
            future.cancel()
        _interrupt_workers(pool)
        if not is_dask(pool):
            # a worker that took its task just as the SIGINT came has not yet armed it (it
            # ignores SIGINT between tasks): signal again until every task under way is back
            from concurrent.futures import wait
            running = [future for future in futures if not future.cancelled()]
            while wait(running, timeout=0.5)[1]:
                _interrupt_workers(pool)
        interrupt.outcomes = [None if future.cancelled() else future.result()
                              for future in futures] + [None] * (len(tasks) - len(futures))
        raise
    except Exception as failure:
        # a task that did not return: the chains' own exceptions come back as values (see
        # rnshmc.samplers._execution._Guarded), so this is the pool's (Dask's KilledWorker,
        # once a task's workers have died more often than distributed.scheduler.allowed-
        # failures lets it be retried; a process pool's BrokenProcessPool). The run stops
        # with every chain's state, as at a Ctrl-C, so that its checkpoint is written: the
        # finished tasks' outcomes, None for the others (their chains continue from the
        # states they had). Those are cancelled, not awaited: on a cluster a segment can
        # take hours (a task already running there runs on, its result unused).
        if stop is None:
            raise
        stop[0] = 1
        failure.outcomes = [_finished(future) for future in futures] \
            + [None] * (len(tasks) - len(futures))
        for future in futures:
            future.cancel()
        raise


def _finished(future):
    """A finished task's value, or None (not finished, failed, or lost with its worker)."""
    if not future.done():
        return None
    try:
        return future.result(timeout=5)
    except Exception:  # noqa: BLE001 - a lost result is as good as no result here
        return None


@contextlib.contextmanager
def _signals_held():
    """SIGINT and SIGTERM held back from this thread while the block runs (POSIX), delivered
    when it ends."""
    import signal
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    held = {signal.SIGINT, signal.SIGTERM}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _call(function, task):
    return function(task)


def _interrupt_workers(pool):
    """Send SIGINT to the workers of a process pool made by :func:`local_pool` (they ignore it
    between tasks): a SIGINT to this process alone would not reach them."""
    import signal
    if os.name != "posix":  # (Windows has no SIGINT to send to another process)
        return
    if getattr(pool, "_rnshmc_owned", False) and hasattr(pool, "_processes"):
        for pid in list(pool._processes or {}):
            try:
                os.kill(pid, signal.SIGINT)
            except (ProcessLookupError, PermissionError):  # pragma: no cover - racy exit
                pass


def _ignore_sigint():
    """Process-pool worker initializer: ignore SIGINT between tasks (a chain's task turns it
    into a KeyboardInterrupt while it runs, see :func:`interruptible`), so that an idle
    worker survives a Ctrl-C and the pool stays usable; and ignore SIGTERM, which a batch
    scheduler sends to every process of the job: the parent turns it into the Ctrl-C it
    forwards (see :func:`sigterm_as_ctrl_c`)."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


@contextlib.contextmanager
def sigterm_as_ctrl_c():
    """While a run goes on in the main thread: SIGTERM (what batch schedulers send before
    they kill a job) does what a Ctrl-C does, through the SIGINT handler in place (every
    chain stops after its current transition, the checkpoint is written, the draws so far
    are returned). Nothing is changed outside the main thread or where the user has a
    SIGTERM handler of their own."""
    import signal
    if (threading.current_thread() is not threading.main_thread()
            or not hasattr(signal, "SIGTERM")
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL):
        yield
        return

    def as_ctrl_c(signum, frame):
        handler = signal.getsignal(signal.SIGINT)
        if callable(handler):
            sys.stderr.write("\nrnshmc: SIGTERM received: stopping as at a Ctrl-C\n")
            handler(signal.SIGINT, frame)

    previous = signal.signal(signal.SIGTERM, as_ctrl_c)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def interruptible():
    """In a process-pool worker: SIGINT raises KeyboardInterrupt while this block runs, once
    (a terminal's Ctrl-C and the parent's forwarded SIGINT both arrive: a second
    KeyboardInterrupt while the chain saves its state would leave it half-saved)."""
    import signal
    import threading
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt_once(signum, frame):
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, interrupt_once)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def stop_after_transition(stop):
    """While chains run in this process (serially or on threads), from its main thread: the
    first SIGINT (Ctrl-C) raises the run's stop flag ``stop``, so that every chain stops
    after its current transition, and a second one raises KeyboardInterrupt at once.

    A KeyboardInterrupt raised inside a Python model would cut its transition short: its
    random draws would be spent but not its state, and a run resumed from its checkpoint
    would differ from the uninterrupted run. Elsewhere (a worker thread, or a handler of the
    user's own) nothing is changed. Yields a list whose one element becomes True at the
    first SIGINT.
    """
    import signal
    interrupted = [False]
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield interrupted
        return

    def first_interrupt(signum, frame):
        interrupted[0] = True
        stop[0] = 1
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.stderr.write("\nrnshmc: stopping every chain after its current transition "
                         "(Ctrl-C again to stop at once)\n")

    previous = signal.signal(signal.SIGINT, first_interrupt)
    try:
        yield interrupted
    finally:
        signal.signal(signal.SIGINT, previous)


_worker_limits = None  # a process-pool worker's BLAS limits (see _limit_blas)


def _limit_blas(threads):
    """Process-pool worker initializer: ``threads`` BLAS/OpenMP threads per worker."""
    _ignore_sigint()
    from threadpoolctl import threadpool_limits
    global _worker_limits
    _worker_limits = threadpool_limits(limits=threads)  # kept for the worker's lifetime


@contextlib.contextmanager
def local_pool(chains, processes):
    """The executor that runs ``chains`` chains in parallel on this machine's cores by default:
    None (serial) for one chain or one core; a thread pool (``processes=False``: C-level
    targets, whose loops release the GIL; the caller limits its BLAS threads, see
    :func:`threads_per_chain`) or a process pool (spawned workers: Python callables, which
    hold the GIL) whose workers each limit theirs to ``cores // workers``."""
    cores = os.cpu_count() or 1
    workers = min(chains, cores)
    if workers < 2:
        yield None
        return
    if processes:
        blas = max(1, cores // workers)
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor
        pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_limit_blas, initargs=(blas,))
        pool._rnshmc_owned = True
        with pool:
            with main_module_hidden():  # the workers start on these submits
                for started in [pool.submit(os.getpid) for _ in range(workers)]:
                    started.result()
            try:
                yield pool
            except BaseException:
                # interrupted or failed: the chains' outcomes are in, and a worker that died
                # (a signal to the whole process group) would leave the pool's threads
                # blocked on its pipe at shutdown: end the workers first
                for process in list((pool._processes or {}).values()):
                    process.kill()
                raise
    else:
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(workers) as pool:
            yield pool


@contextlib.contextmanager
def main_module_hidden():
    """Spawned processes started in this block do not import the user's main module.

    A spawned worker first runs the parent's ``__main__`` (found by its ``__spec__`` or
    ``__file__``) as ``__mp_main__``: a user's script without an ``if __name__ ==
    "__main__":`` guard would sample again in every worker and fail. The chains' workers need
    only rnshmc and the target's own module (a target with functions of ``__main__`` is
    not run in processes, see ``rnshmc.samplers._execution.chain_pool``)."""
    import sys
    main = sys.modules.get("__main__")
    saved = {key: main.__dict__[key] for key in ("__spec__", "__file__")
             if main is not None and key in main.__dict__}
    try:
        if "__spec__" in saved:
            main.__spec__ = None
        if "__file__" in saved:
            del main.__file__
        yield
    finally:
        for key, value in saved.items():
            setattr(main, key, value)


_CONTROLLER = [None, None]  # (sys.modules' size when made, threadpoolctl controller)
_CONTROLLER_LOCK = threading.Lock()


def _controller():
    """A threadpoolctl controller, made again only when modules were imported since (making
    one scans the loaded libraries: about 2.5 ms, against 25 us for a limit through it, and
    the chains set limits at every segment and online update)."""
    with _CONTROLLER_LOCK:
        if _CONTROLLER[0] != len(sys.modules):
            from threadpoolctl import ThreadpoolController
            _CONTROLLER[1] = ThreadpoolController()
            _CONTROLLER[0] = len(sys.modules)
        return _CONTROLLER[1]


@contextlib.contextmanager
def blas_limits(threads, user_api=None):
    """At most ``threads`` BLAS/OpenMP threads while the block runs: BLAS's limit is the
    process's; OpenMP's is the calling thread's own (``user_api="openmp"`` in a pool's
    thread limits that thread's OpenMP kernels)."""
    with _controller().limit(limits=threads, user_api=user_api):
        yield


def one_blas_thread(function):
    """Run ``function`` with one BLAS thread: a multi-threaded BLAS sums in an order that
    depends on its thread count, and a fit or a metric estimate that changed in its last bits
    with the number of chains running beside it (a serial run has the machine's threads, a
    pool of chains fewer each) would change the draws (the same seed must give the same draws
    whatever the pool). On two cores one thread was no slower."""
    @functools.wraps(function)
    def single_threaded(*args, **kwargs):
        with blas_limits(1):
            return function(*args, **kwargs)
    return single_threaded


def threads_per_chain(pool, chains):
    """The BLAS/OpenMP threads each of ``chains`` chains on the thread pool ``pool`` gets:
    this machine's cores shared among the chains that run at once."""
    workers = min(chains, getattr(pool, "_max_workers", chains))
    return max(1, (os.cpu_count() or 1) // max(workers, 1))
