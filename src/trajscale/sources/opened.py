"""Sources kept open for the next read: at most a bounded number, the least recently used closed first.

:class:`OpenSources` is the one mechanism that bounds what a process holds open (a segmented trajectory's
parts, an ensemble worker's members, the ML dataset's files), counting what it opened and keeping what the
closed ones read. All of a process's caches together hold at most :data:`BUDGET` sources however they nest
(an ensemble of segmented members holds ``BUDGET``, not members times parts); past it, the opening thread closes
its own least recently used source, never one that contains the cache it adds to, nor one another live thread
last used. What nobody uses any more leaves the budget: a cache no one holds is closed when it is collected, and
the sources a finished thread last used may be closed by any thread, so sources left open by an old run never
leave a new one without room for its own.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator

#: Sources a process keeps open, all its caches together: below the 256 open files a process may hold by
#: default on macOS (Linux: 1,024), leaving room for the run's own files, sockets and libraries.
BUDGET = 128

# every open source of the process, least recently used first: (cache id, key) -> (cache, using thread); the
# cache is held weakly (an entry whose cache is gone is dropped when next seen)
_ALL: OrderedDict[tuple[int, Hashable], tuple[weakref.ref, int]] = OrderedDict()
_HELD_BY: dict[int, tuple[int, Hashable]] = {}   # id(source) -> its entry in _ALL
_LOCK = threading.Lock()


def _forget_all() -> None:
    """A fork's inherited sources are the parent's: dropped from the budget, not closed."""
    global _LOCK
    _ALL.clear()
    _HELD_BY.clear()
    _LOCK = threading.Lock()


os.register_at_fork(after_in_child=_forget_all)


def _prune() -> None:
    """Drop the entries of caches collected since (their sources were closed with them); under ``_LOCK``."""
    gone = {e for e, (ref, _) in _ALL.items() if ref() is None}
    if gone:
        for entry in gone:
            del _ALL[entry]
        for held in [s for s, e in _HELD_BY.items() if e in gone]:
            del _HELD_BY[held]


def open_now() -> int:
    """Sources open in this process now, every cache's."""
    with _LOCK:
        _prune()
        return len(_ALL)


def _close_left(sources: OrderedDict) -> None:
    """A collected cache's sources, closed (nobody can read them any more)."""
    while sources:
        sources.popitem()[1].close()


class OpenSources:
    """Open sources, keyed, in the order last used, at most ``limit``; ``on_close(key, source)`` is called before
    one is closed. ``list_paths``: keep every opened path; ``owner``: the source these are parts of."""

    def __init__(self, limit: int, on_close: Callable[[Hashable, object], None] | None = None,
                 list_paths: bool = True, owner: object = None) -> None:
        self.limit = max(1, int(limit))
        self._open: OrderedDict[Hashable, object] = OrderedDict()
        self._on_close = on_close
        self._owner = owner
        #: sources opened so far, and their paths in order (empty without ``list_paths``)
        self.opens = 0
        self.opened: list[str] = []
        self._list_paths = bool(list_paths)
        #: the most held open at once
        self.most_open = 0
        # what the closed sources had read
        self._closed_bytes = 0
        self._closed_net: dict | None = None
        weakref.finalize(self, _close_left, self._open).atexit = False

    def use(self, key: Hashable):
        """The open source of ``key``, now the most recently used; None when it is not open."""
        src = self._open.get(key)
        if src is not None:
            self._open.move_to_end(key)
            self._touch((id(self), key))
        return src

    def _touch(self, entry: tuple[int, Hashable] | None) -> None:
        """``entry`` and the sources holding it, used now by this thread (under its budget)."""
        me = threading.get_ident()
        with _LOCK:
            while entry in _ALL:
                _ALL.move_to_end(entry)
                ref = _ALL[entry][0]
                _ALL[entry] = (ref, me)
                cache = ref()
                entry = None if cache is None else _HELD_BY.get(id(cache._owner))

    def _holders(self) -> set[tuple[int, Hashable]]:
        """The entries of the sources this cache is part of (never closed to make room in it)."""
        held, entry = set(), _HELD_BY.get(id(self._owner))
        while entry in _ALL and entry not in held:
            held.add(entry)
            cache = _ALL[entry][0]()
            entry = None if cache is None else _HELD_BY.get(id(cache._owner))
        return held

    def make_room(self) -> None:
        """Close the least recently used sources until one more may be opened within the limit and budget."""
        while len(self._open) >= self.limit:
            self.drop(next(iter(self._open)))
        me = threading.get_ident()
        while True:
            with _LOCK:
                if len(_ALL) >= BUDGET:   # (pruned only then: pruning lowers the count)
                    _prune()
                if len(_ALL) < BUDGET:
                    return
                keep = self._holders()
                live = {t.ident for t in threading.enumerate()} - {me}
                victim = next(((c, k) for (_, k), (ref, t) in _ALL.items()
                               if t not in live and (c := ref()) is not None and (id(c), k) not in keep), None)
            if victim is None:
                return   # (what is open is this thread's chain, or in use by a live thread)
            victim[0].drop(victim[1])

    def add(self, key: Hashable, src, path: str | None = None) -> None:
        """Keep ``src``, just opened, as ``key``'s (room made first); ``path`` names its file (default: its own)."""
        self.make_room()
        self._open[key] = src
        with _LOCK:
            _ALL[(id(self), key)] = (weakref.ref(self), threading.get_ident())
            _HELD_BY[id(src)] = (id(self), key)
        self._touch(_HELD_BY.get(id(self._owner)))
        self.opens += 1
        if self._list_paths:
            self.opened.append(str(path if path is not None else src.path))
        self.most_open = max(self.most_open, len(self._open))

    def drop(self, key: Hashable) -> None:
        """Close ``key``'s source, keeping what it read in the totals."""
        src = self._open.pop(key)
        with _LOCK:
            _ALL.pop((id(self), key), None)
            _HELD_BY.pop(id(src), None)
        try:
            if self._on_close is not None:
                self._on_close(key, src)
            self._closed_bytes += int(src.bytes_read)
            self._closed_net = added_stats(self._closed_net, src.remote_stats())
        finally:
            src.close()

    def __contains__(self, key: Hashable) -> bool:
        return key in self._open

    def __len__(self) -> int:
        return len(self._open)

    def __iter__(self) -> Iterator[Hashable]:
        """The keys open, least recently used first."""
        return iter(list(self._open))

    def items(self) -> Iterator[tuple[Hashable, object]]:
        return iter(list(self._open.items()))

    def values(self) -> Iterator[object]:
        return iter(list(self._open.values()))

    @property
    def bytes_read(self) -> int:
        """Bytes read by the sources opened so far, those closed included."""
        return self._closed_bytes + sum(int(s.bytes_read) for s in self._open.values())

    def remote_stats(self) -> dict | None:
        """Requests, bytes, network wait and retries of the sources behind URLs opened so far (None: none)."""
        total = self._closed_net
        for src in self._open.values():
            total = added_stats(total, src.remote_stats())
        return total

    def close(self) -> None:
        """Close every open source, the most recently used first."""
        while self._open:
            self.drop(next(reversed(self._open)))


def added_stats(a: dict | None, b: dict | None) -> dict | None:
    """Two sets of request counts added (None: no requests)."""
    if a is None or b is None:
        return a if b is None else dict(b)
    return {k: a.get(k, 0) + v for k, v in b.items()}


__all__ = ["BUDGET", "OpenSources", "added_stats", "open_now"]
