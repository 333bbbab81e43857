"""Progress display: a tqdm bar on a terminal, a log line about every 10 % elsewhere, or nothing.

A bar redrawn in a batch job's log leaves hundreds of carriage-return fragments, so off a terminal
the display is a log line per tenth (from :data:`PROGRESS_LINE_DELAY` s on: a short run stays quiet)."""

from __future__ import annotations

import logging
import sys
import time
from typing import Self

log = logging.getLogger("trajscale.progress")

#: Seconds before a display without a terminal prints its first line (short runs stay quiet in a log).
PROGRESS_LINE_DELAY = 2.0


def progress_bar(total: int, enabled: bool, desc: str = "tasks", unit: str = "task", initial: int = 0,
                 leave: bool = False):
    """A tqdm bar on a terminal, log lines elsewhere, a no-op unless ``enabled``; ``update(n)``, ``show(n)``."""
    if not enabled:
        return _NoProgress(total, initial)
    if not sys.stderr.isatty():
        return _LineProgress(total, desc, unit, initial)
    from tqdm import tqdm

    class Bar(tqdm):
        # No monitor thread (tqdm starts one even for a disabled bar): a running thread rules out a fork.
        monitor_interval = 0

        def show(self, n: int) -> None:
            if n > self.n:
                self.update(n - self.n)

    return Bar(total=total, initial=initial, desc=desc, unit=unit, leave=leave)


class _NoProgress:
    """Counts and shows nothing."""

    def __init__(self, total: int, initial: int = 0) -> None:
        self.total, self.n = total, initial

    def update(self, n: int = 1) -> None:
        self.n += n

    def show(self, n: int) -> None:
        """Advance to ``n`` done (no step back)."""
        if n > self.n:
            self.update(n - self.n)

    def close(self) -> None:
        pass

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        pass


class _LineProgress(_NoProgress):
    """Logs ``desc: 40% (4/10 tasks, 3.2 s)`` each time another tenth is done."""

    def __init__(self, total: int, desc: str, unit: str = "task", initial: int = 0) -> None:
        super().__init__(max(1, total), initial)
        self.desc, self.unit = desc, unit
        self._t0 = time.perf_counter()
        self._shown = min(10, initial * 10 // self.total)   # tenths already done (or printed)

    def update(self, n: int = 1) -> None:
        self.n += n
        tenths = min(10, self.n * 10 // self.total)
        elapsed = time.perf_counter() - self._t0
        if tenths > self._shown and elapsed >= PROGRESS_LINE_DELAY:
            self._shown = tenths
            log.info("%s: %d%% (%d/%d %ss, %.1f s)", self.desc, 100 * self.n // self.total, self.n,
                     self.total, self.unit, elapsed)
