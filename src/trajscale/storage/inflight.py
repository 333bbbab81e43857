"""Requests in flight: the process's request threads, each object's window of requests at once, and what
the requests cost (:class:`FetchStats`, for the RunReport).

obstore's calls release the GIL while they wait, so one pool of daemon threads serves every object of the
process (:func:`submit`); waits are in short slices (:func:`gather`, :meth:`Window.enter`) that look for a stop
signal and the object's failure, so neither a frozen server nor unread requests keep a run from ending.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

# (every wait on requests asks for a recorded stop signal: a read of a frozen server ends with the run)
from ..util import raise_if_stopped

TYPE_CHECKING = False
if TYPE_CHECKING:   # (the futures' module is imported with the first request: a local file's reader never needs it)
    from concurrent.futures import Future

#: Requests in flight at once per object and process, at least (``max_concurrency`` fixes it; docs/benchmarks.md).
MAX_CONCURRENCY = 64
#: Without ``max_concurrency``, the requests in flight grow with the shortest round trip seen, to keep about
#: this many requests a second going out: half the 5,500 GETs a second S3 serves a key prefix before SlowDown.
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


#: Every object's requests in this process together (:func:`trajscale.storage.fetched_here`).
PROCESS_STATS = FetchStats()
_PROCESS_LOCK = threading.Lock()


def count(requests: int = 0, nbytes: int = 0, wait_s: float = 0.0, retries: int = 0) -> None:
    """Add to this process's counts."""
    with _PROCESS_LOCK:
        PROCESS_STATS.requests += requests
        PROCESS_STATS.bytes += nbytes
        PROCESS_STATS.wait_s += wait_s
        PROCESS_STATS.retries += retries


#: Seconds a wait on requests sleeps at most before it looks for a stop signal or the object's failure.
WAIT_SLICE = 0.1


class _Threads:
    """The process's request threads: daemons (a ``ThreadPoolExecutor``'s are joined at exit, an ended run waiting)."""

    def __init__(self) -> None:
        import queue

        self._calls: queue.SimpleQueue = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self.threads = 0
        self.most = 0

    def submit(self, n: int, calls: list[tuple[Callable, tuple]]) -> list[Future]:
        from concurrent.futures import Future

        with self._lock:
            self.most = max(self.most, n, MOST_CONCURRENCY)
        futures = []
        for fn, args in calls:
            future = Future()
            self._calls.put((future, fn, args))
            futures.append(future)
            if not self._idle.acquire(timeout=0):   # no thread idle: one more, up to the most
                with self._lock:
                    if self.threads >= self.most:
                        continue
                    self.threads += 1
                threading.Thread(target=self._work, name=f"trajscale-fetch_{self.threads}", daemon=True).start()
        return futures

    def _work(self) -> None:
        while True:
            future, fn, args = self._calls.get()
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args))
                except BaseException as exc:   # noqa: BLE001 - the caller's, through its future
                    future.set_exception(exc)
            del future, fn, args   # (a finished request's bytes are its future's alone)
            self._idle.release()


_THREADS: _Threads | None = None
_THREADS_PID = 0
_THREADS_LOCK = threading.Lock()


def submit(n: int, calls: list[tuple[Callable, tuple]]) -> list[Future]:
    """Start ``calls`` (``(function, arguments)``) on the process's request threads (at least ``n`` of them, up
    to :data:`MOST_CONCURRENCY` or ``n``, started as requests come; each object's window lets its share go out)."""
    global _THREADS, _THREADS_PID
    with _THREADS_LOCK:
        if _THREADS is None or _THREADS_PID != os.getpid():   # (a forked child has none of its parent's threads)
            _THREADS, _THREADS_PID = _Threads(), os.getpid()
        threads = _THREADS
    return threads.submit(n, calls)


def gather(futures: list[Future], give_up: Callable[[], None] | None = None) -> list:
    """The results of ``futures`` in order: a failure raised at once; a stop or ``give_up()`` ends the wait."""
    from concurrent.futures import FIRST_EXCEPTION, wait

    pending = [f for f in futures if not f.done()]
    try:
        while pending:
            done, left = wait(pending, timeout=WAIT_SLICE, return_when=FIRST_EXCEPTION)
            for f in done:
                if not f.cancelled() and f.exception() is not None:
                    raise f.exception()
            pending = list(left)
            if pending:
                raise_if_stopped()
                if give_up is not None:
                    give_up()
        return [f.result() for f in futures]
    except BaseException:
        for f in futures:
            f.cancel()
        raise


class Window:
    """At most ``limit`` requests of an object in flight; ``grows``: from the shortest round trip seen."""

    def __init__(self, limit: int, grows: bool) -> None:
        self.limit, self.grows = limit, grows
        self._held = 0
        self.shortest = float("inf")
        self._cond = threading.Condition()

    def __enter__(self) -> None:
        self.enter()

    def enter(self, check: Callable[[], None] | None = None) -> None:
        """Take a place in the window; a stop signal or ``check()`` ends the wait (the place given back)."""
        with self._cond:
            while self._held >= self.limit:
                self._cond.wait(WAIT_SLICE)
                if self._held >= self.limit:
                    raise_if_stopped()
                    if check is not None:
                        check()
            self._held += 1
        if check is not None:
            try:
                check()
            except BaseException:
                self.__exit__()
                raise

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
