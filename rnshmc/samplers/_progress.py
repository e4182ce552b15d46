"""Progress bars: they only draw (tqdm when installed and wanted; silent otherwise)."""
import numpy as np

__all__ = ["Progress"]


class Progress:
    """A tqdm bar when tqdm is installed and progress is wanted; silent otherwise. A chain's
    bar shows the phase under way, its acceptance rate so far and its divergences.

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
        self.bar = None
        self.phase, self.accepted, self.divergent, self.transitions = None, 0, 0, 0
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

    def transitions_done(self, phase, records):
        """Advance by the transitions in ``records`` (TRANSITION rows) of ``phase``."""
        if self.bar is None:
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
