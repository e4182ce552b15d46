"""Progress bars: they only draw (tqdm when installed and wanted, on a terminal or in a
notebook; a status line now and then when the output goes to a file or a pipe; silent
otherwise)."""
import math
import sys
import time

import numpy as np

__all__ = ["Progress", "new_run"]

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

    def __init__(self, enabled, total, desc, position=None):
        self.bar, self.log = None, False
        self.phase, self.accepted, self.divergent, self.transitions = None, 0, 0, 0
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

    def transitions_done(self, phase, records):
        """Advance by the transitions in ``records`` (TRANSITION rows) of ``phase``."""
        if self.bar is None and not self.log:
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
