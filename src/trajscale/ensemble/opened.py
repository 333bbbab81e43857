"""The member trajectories a worker has open: at most a few per thread, the least recently used closed first.

A worker keeps the last ``limit`` trajectories it read open (the next task often reads the same one) and
never more, so 10,000 trajectories run in one job without raising the open-file limit (their parts, for
segmented members, share the process's budget with them: :mod:`trajscale.sources.opened`).  One cache per
thread (a Source's read buffer serves one read at a time), closed by
:meth:`trajscale.ensemble.source.EnsembleSource.close`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Hashable

from ..sources import Source, source_from_config
from ..sources.opened import OpenSources

log = logging.getLogger(__name__)

#: Member trajectories a thread keeps open by default.
MAX_OPEN = 16


class MemberSources(OpenSources):
    """One thread's open member sources, keyed by their job's token and index, in the order last used (their
    counts include the closed ones; their paths are not listed: a worker reads thousands)."""

    def __init__(self) -> None:
        super().__init__(MAX_OPEN, _drop_buffer, list_paths=False)
        #: What the members this thread prepares share (a topology file's selections), made when first needed.
        self.topologies = None

    def get(self, key: Hashable, config: dict, limit: int, opener=None) -> tuple[Source, float]:
        """The source for ``config`` (opened now, by ``opener()`` when given, if it is not open) and the
        seconds spent opening it."""
        src = self.use(key)
        if src is not None:
            return src, 0.0
        self.limit = max(1, limit)
        self.make_room()
        t0 = time.perf_counter()
        src = opener() if opener is not None else source_from_config(config)
        src.reuse_buffers = True   # one read at a time per thread; map keeps no views of a block
        self.add(key, src)
        return src, time.perf_counter() - t0

    def drop_buffers(self, keep: set) -> None:
        """Let go of the read buffers of the open sources not in ``keep`` (a block's memory is then its own
        pieces', not one buffer per open trajectory)."""
        for key, src in self.items():
            if key not in keep:
                src.__dict__.pop("_scratch", None)


def _drop_buffer(key: Hashable, src: Source) -> None:
    """A member source closed: its read buffer goes with it."""
    src.__dict__.pop("_scratch", None)


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


__all__ = ["MAX_OPEN", "MemberSources", "close_member_sources", "member_sources"]
