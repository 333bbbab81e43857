"""Requests in flight: the process's request threads, each object's window of requests at once, and what
the requests cost (:class:`FetchStats`, for the RunReport).

obstore's calls release Python's lock while they wait, so a pool of threads keeps many requests going
at once. One pool serves every object of the process; a pool asked for more threads than it has is
replaced by a larger one, and the old one is let go only once nothing is submitted to it any more (every
submission goes through :func:`submit`, under the pool's lock).
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

TYPE_CHECKING = False
if TYPE_CHECKING:   # (the pool's module is imported with the first request: a local file's reader never needs it)
    from concurrent.futures import Future, ThreadPoolExecutor

#: Requests in flight at once per object and process, at least (``max_concurrency`` fixes the number). 64
#: rather than 32: the benchmark's 1,000 CA spans (40 kB, one a frame) through a 20 ms, 100 MB/s link took
#: 0.75x the time (paired whole runs, docs/benchmarks.md); a plain client replaying them was no faster at 128.
MAX_CONCURRENCY = 64
#: Without ``max_concurrency``, the requests in flight grow with the link's round trip (the shortest wait
#: for a response's headers seen so far), to keep about this many requests a second going out: a round
#: trip of 100 ms needs 250 in flight for what 64 do at 20 ms. Half the 5,500 GETs a second S3 serves a key
#: prefix before it answers SlowDown, so that two processes on one object stay within it.
REQUESTS_PER_SECOND = 2500
#: ... and at most this many.
MOST_CONCURRENCY = 256


@dataclass(slots=True)
class FetchStats:
    """What reading an object cost this process: requests, bytes, seconds waiting on them, retries."""

    requests: int = 0
    bytes: int = 0
    wait_s: float = 0.0
    retries: int = 0

    def as_dict(self) -> dict:
        return {"requests": self.requests, "bytes": self.bytes, "wait_s": self.wait_s, "retries": self.retries}


#: Every object's requests in this process together (what :func:`trajscale.storage.fetched_here` reads: the
#: requests of the process that prepares a run, whichever objects made them, the registry's look included).
PROCESS_STATS = FetchStats()
_PROCESS_LOCK = threading.Lock()


def count(requests: int = 0, nbytes: int = 0, wait_s: float = 0.0, retries: int = 0) -> None:
    """Add to this process's counts."""
    with _PROCESS_LOCK:
        PROCESS_STATS.requests += requests
        PROCESS_STATS.bytes += nbytes
        PROCESS_STATS.wait_s += wait_s
        PROCESS_STATS.retries += retries


_POOL: ThreadPoolExecutor | None = None
_POOL_PID = 0
_POOL_LOCK = threading.Lock()


def submit(n: int, calls: list[tuple[Callable, tuple]]) -> list[Future]:
    """Start ``calls`` (``(function, arguments)``) on the process's request threads, a pool of at least
    ``n`` threads (started as requests come, up to :data:`MOST_CONCURRENCY` or ``n``; each object's window
    lets its share go out). A pool asked for more threads than it has is replaced; the old one ends its
    threads once its requests are done: it is never shut while another object may still submit to it,
    since every submission happens here, under the lock that replaces it."""
    from concurrent.futures import ThreadPoolExecutor

    global _POOL, _POOL_PID
    with _POOL_LOCK:
        if _POOL is None or _POOL_PID != os.getpid() or _POOL._max_workers < n:
            old = _POOL if _POOL_PID == os.getpid() else None
            _POOL = ThreadPoolExecutor(max_workers=max(n, MOST_CONCURRENCY), thread_name_prefix="trajscale-fetch")
            _POOL_PID = os.getpid()
            if old is not None:
                old.shutdown(wait=False)   # its queued requests still run; nothing is submitted to it again
        return [_POOL.submit(fn, *args) for fn, args in calls]


class Window:
    """At most ``limit`` requests of an object in flight at once; a window that ``grows`` takes its limit from
    the shortest round trip seen (:data:`REQUESTS_PER_SECOND` x it, from :data:`MAX_CONCURRENCY` to
    :data:`MOST_CONCURRENCY`); the shortest, not the latest, so the queueing its own requests cause at a
    server does not widen it further."""

    def __init__(self, limit: int, grows: bool) -> None:
        self.limit, self.grows = limit, grows
        self._held = 0
        self.shortest = float("inf")
        self._cond = threading.Condition()

    def __enter__(self) -> None:
        with self._cond:
            while self._held >= self.limit:
                self._cond.wait()
            self._held += 1

    def __exit__(self, *exc) -> None:
        with self._cond:
            self._held -= 1
            self._cond.notify()

    def saw_round_trip(self, seconds: float) -> None:
        if seconds >= self.shortest:
            return
        with self._cond:
            self.shortest = min(self.shortest, seconds)
            if not self.grows:
                return
            limit = min(MOST_CONCURRENCY, max(MAX_CONCURRENCY, math.ceil(REQUESTS_PER_SECOND * self.shortest)))
            if limit > self.limit:
                self._cond.notify_all()
            self.limit = limit
