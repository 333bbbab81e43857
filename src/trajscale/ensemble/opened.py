"""The member trajectories a worker has open: at most a few per thread, the least recently used closed first.

An ensemble's tasks read many trajectories, each from its own files; a worker keeps the last
``limit`` it read open (the next task often reads the same one, or its next frames), closes the
least recently used one when it opens another, and never holds more: 10,000 trajectories run in
one job without raising the open-file limit.  Member sources live here, one cache per thread (a
Source's read buffer serves one read at a time), and are closed by whoever closes the executor's
sources (:meth:`trajscale.ensemble.source.EnsembleSource.close`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict

from ..sources import Source, source_from_config

log = logging.getLogger(__name__)

#: Member trajectories a thread keeps open by default.
MAX_OPEN = 16


def _release(src: Source) -> None:
    """Close a member source and drop its read buffer."""
    try:
        src.close()
    finally:
        src.__dict__.pop("_scratch", None)


class MemberSources:
    """One thread's open member sources, keyed by their configs' keys, in the order last used."""

    def __init__(self) -> None:
        self._open: OrderedDict[str, Source] = OrderedDict()
        #: What the members this thread prepares share (a topology file's selections), made when first needed.
        self.topologies = None
        #: Member sources opened so far, and their paths, in order (the tasks' ``files`` records).
        self.opens = 0
        self.opened: list[str] = []
        # what closed sources had read, so that this thread's totals only grow
        self._closed_bytes = 0
        self._closed_net: dict | None = None

    def get(self, key: str, config: dict, limit: int, opener=None) -> tuple[Source, float]:
        """The source for ``config`` (opened now if it is not open: the least recently used one closed
        first when ``limit`` are open; by ``opener()`` when given) and the seconds spent opening it (0 when
        it was open)."""
        src = self._open.get(key)
        if src is not None:
            self._open.move_to_end(key)
            return src, 0.0
        while len(self._open) >= max(1, limit):
            self._close(self._open.popitem(last=False)[1])
        t0 = time.perf_counter()
        src = opener() if opener is not None else source_from_config(config)
        src.reuse_buffers = True   # one read at a time per thread; map keeps no views of a block
        self._open[key] = src
        self.opens += 1
        self.opened.append(src.path)
        return src, time.perf_counter() - t0

    def drop_buffers(self, keep: set[str]) -> None:
        """Let go of the read buffers of the open sources not in ``keep`` (a block's memory is then its own
        pieces', not one buffer per open trajectory)."""
        for key, src in self._open.items():
            if key not in keep:
                src.__dict__.pop("_scratch", None)

    def _close(self, src: Source) -> None:
        self._closed_bytes += src.bytes_read
        net = src.remote_stats()
        if net is not None:
            self._closed_net = _added(self._closed_net, net)
        _release(src)

    @property
    def n_open(self) -> int:
        return len(self._open)

    @property
    def bytes_read(self) -> int:
        """Bytes read by this thread's member sources so far, those closed included."""
        return self._closed_bytes + sum(s.bytes_read for s in self._open.values())

    def remote_stats(self) -> dict | None:
        """Requests, bytes, network wait and retries of this thread's member sources behind URLs so far."""
        total = self._closed_net
        for s in self._open.values():
            net = s.remote_stats()
            if net is not None:
                total = _added(total, net)
        return total

    def close(self) -> None:
        while self._open:
            self._close(self._open.popitem(last=False)[1])


def _added(a: dict | None, b: dict) -> dict:
    return dict(b) if a is None else {k: a.get(k, 0) + v for k, v in b.items()}


_BY_THREAD: dict[int, MemberSources] = {}
_LOCK = threading.Lock()


def member_sources() -> MemberSources:
    """This thread's open member sources."""
    ident = threading.get_ident()
    got = _BY_THREAD.get(ident)
    if got is None:
        with _LOCK:
            got = _BY_THREAD.setdefault(ident, MemberSources())
    return got


def close_member_sources() -> None:
    """Close every thread's member sources; no task may be running in this process."""
    with _LOCK:
        caches = list(_BY_THREAD.values())
        _BY_THREAD.clear()
    for cache in caches:
        cache.close()


def open_count() -> int:
    """Member sources open in this process now (every thread's)."""
    return sum(c.n_open for c in list(_BY_THREAD.values()))


__all__ = ["MAX_OPEN", "MemberSources", "close_member_sources", "member_sources", "open_count"]
