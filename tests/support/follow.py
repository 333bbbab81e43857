"""A test's reader of an H5MD file while a job writes it: each new complete frame count, as a follower sees it.

Each poll opens the file afresh (HDF5 caches metadata per open) without HDF5's file lock (the writer holds
it); an open that catches the writer mid-flush is retried at the next poll.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import h5py

from trajscale.h5md.schema import describe

log = logging.getLogger(__name__)


def complete_frames(path: str) -> int | None:
    """Complete frames in ``path`` now, or None if it cannot be read at this instant."""
    try:
        with h5py.File(path, "r", locking=False) as f:
            return describe(f, being_written=True).n_frames   # reserved rows are frames in flight
    except (OSError, KeyError, ValueError):   # missing yet, or caught mid-flush
        return None


def follow(path: str, interval: float = 0.5, idle: float = 30.0) -> Iterator[int]:
    """Yield the complete frame count each time it grows; stop after ``idle`` s without growth."""
    last, quiet_since = -1, time.monotonic()
    while time.monotonic() - quiet_since < idle:
        n = complete_frames(path)
        if n is not None and n > last:
            last, quiet_since = n, time.monotonic()
            yield n
        time.sleep(interval)
