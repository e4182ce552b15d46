"""Progress bars: they only draw (tqdm when installed and wanted, on a terminal or in a
notebook; a status line now and then when the output goes to a file or a pipe; silent
otherwise).

Chains in other processes (a process pool) draw nothing themselves: their bars are
:class:`RelayedProgress`, which send what they would draw through a queue to the calling
process, where a :class:`ProgressBoard` draws it while the run waits for the chains (a bar, or
the status lines of a log, as for chains on threads).
"""
import contextlib
import math
import queue as queues
import sys
import time

import numpy as np

__all__ = ["Progress", "RelayedProgress", "ProgressBoard", "progress_board", "new_run"]

# seconds between a chain's status lines when standard error is not a terminal (a batch job's
# log): a bar's carriage returns would fill the log with partial lines
LOG_INTERVAL = 60.0
_last_logged = {}  # a bar's description -> time.monotonic() of its last status line


def new_run():
    """A run starts: each of its chains prints its first status line at once."""
    _last_logged.clear()


def _logs_lines():
    """Whether progress goes to a log (standard error neither a terminal nor a notebook)."""
    if "ipykernel" in sys.modules:
        return False
    isatty = getattr(sys.stderr, "isatty", None)
    return not (isatty is not None and isatty())


class Progress:
    """A tqdm bar when tqdm is installed and progress is wanted; silent otherwise. A chain's
    bar shows the phase under way, its acceptance rate so far and its divergences. When
    standard error is not a terminal (a file, a pipe) and not a notebook, a chain prints one
    status line instead, at its start and then at most every ``LOG_INTERVAL`` seconds.

    Parameters
    ----------
    enabled : bool
    total : int
        Steps of the bar (nothing is shown for 0).
    desc : str
    position : int or None
        The terminal line (one per chain on a thread pool).
    """

    # the phase under way and its counts so far (transitions_done restarts them per phase)
    phase, accepted, divergent, transitions = None, 0, 0, 0

    def __init__(self, enabled, total, desc, position=None):
        self.bar, self.log = None, False
        if enabled and total > 0 and _logs_lines():
            self.log, self.desc, self.total, self.done = True, desc, total, 0
            return
        if enabled and total > 0:
            try:
                from tqdm.auto import tqdm
            except ImportError:
                return
            self.bar = tqdm(total=total, desc=desc, leave=False, position=position)

    def update(self, n, **postfix):
        """Advance by ``n``; ``postfix`` (e.g. loss=...) is shown after the bar."""
        if self.bar is not None:
            if postfix:
                self.bar.set_postfix(postfix, refresh=False)
            self.bar.update(n)
        elif self.log:
            self.done += n
            now = time.monotonic()
            if now - _last_logged.get(self.desc, -math.inf) >= LOG_INTERVAL:
                _last_logged[self.desc] = now
                status = "".join(f", {key} {value}" for key, value in postfix.items())
                print(f"{self.desc}: {self.done} of {self.total} iterations{status}",
                      file=sys.stderr, flush=True)

    def shown(self):
        """Whether anything is drawn (a bar or status lines)."""
        return self.bar is not None or self.log

    def transitions_done(self, phase, records):
        """Advance by the transitions in ``records`` (TRANSITION rows) of ``phase``."""
        if not self.shown():
            return
        if phase != self.phase:
            self.phase, self.accepted, self.divergent, self.transitions = phase, 0, 0, 0
        self.accepted += int(np.sum(records["accepted"]))
        self.divergent += int(np.sum(records["diverging"]))
        self.transitions += len(records)
        self.update(len(records), phase=phase,
                    accept=f"{self.accepted / max(self.transitions, 1):.2f}",
                    divergent=self.divergent)

    def close(self):
        if self.bar is not None:
            self.bar.close()


class RelayedProgress(Progress):
    """A chain's bar in another process: what it would draw goes to ``relay`` (a queue
    proxy of :class:`ProgressBoard`), as ``(chain, event, ...)`` messages."""

    def __init__(self, relay, chain, total, desc):
        self.relay, self.chain = relay, chain
        self.send("open", total, desc)

    def send(self, *message):
        try:
            self.relay.put((self.chain,) + message)
        except (OSError, EOFError):  # the calling process has gone: nobody to draw for
            pass

    def shown(self):
        return True

    def update(self, n, **postfix):
        self.send("update", n, postfix)

    def close(self):
        self.send("close")


class ProgressBoard:
    """The calling process's bars of chains that run elsewhere (see the module docstring).

    Parameters
    ----------
    relay : queue-like
        Where the chains' :class:`RelayedProgress` send their messages (a
        ``multiprocessing.Manager().Queue()`` proxy, which pickles to the workers).
    """

    def __init__(self, relay):
        self.relay, self.bars = relay, {}

    def draw(self):
        """Draw every message sent so far."""
        while True:
            try:
                chain, event, *args = self.relay.get_nowait()
            except (queues.Empty, OSError, EOFError):
                return
            if event == "open":
                total, desc = args
                self.bars[chain] = Progress(True, total, desc, position=chain)
            elif event == "update" and chain in self.bars:
                n, postfix = args
                self.bars[chain].update(n, **postfix)
            elif event == "close" and chain in self.bars:
                self.bars.pop(chain).close()

    def close(self):
        self.draw()
        for bar in self.bars.values():
            bar.close()
        self.bars.clear()


@contextlib.contextmanager
def progress_board(wanted):
    """A :class:`ProgressBoard` for chains on a process pool while the block runs (None if
    progress is not ``wanted``): its queue lives in a manager process of its own (spawned:
    a fork of a process with threads may deadlock), started here and stopped at the end."""
    if not wanted:
        yield None
        return
    import multiprocessing
    from ..parallel import main_module_hidden
    with main_module_hidden():  # (the manager starts here: see main_module_hidden)
        manager = multiprocessing.get_context("spawn").Manager()
    try:
        board = ProgressBoard(manager.Queue())
        try:
            yield board
        finally:
            board.close()
    finally:
        manager.shutdown()
