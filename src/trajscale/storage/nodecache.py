"""A node-local copy of a store, shared by every worker on the node (fsspec's ``simplecache``): what a library
that opens files by path (HDF5, MDAnalysis) reads of bytes behind a URL (:func:`at_hand`).

The first process copies under an exclusive ``flock`` (temporary name, fsync, size check, rename: never half a
copy); the others block, then read it under a shared lock, and eviction (LRU) removes only entries whose
exclusive lock it can take. Entries are keyed by the original's :meth:`~trajscale.storage.ByteStore.stamp`, so
a replaced original gets a new entry and one replaced mid-copy is refused. A copy that does not fit is not made:
a local file is read in place, an object refused.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputFileError, StoreError
from .bytestore import ByteStore
from .cache import node_copy
from .location import Location

log = logging.getLogger(__name__)

#: Room left free in the cache's file system besides the copy.
HEADROOM_BYTES = 64 * 1024**2
#: A store is copied in reads of this many bytes, this many at once (an object's: concurrent requests).
_FETCH_BYTES = 8 * 1024**2
_FETCH_AT_ONCE = 8
_warned: set[str] = set()


@dataclass
class CachedStore:
    """An opened entry: ``path`` to read, whether this call ``copied`` it; ``close()``."""

    path: str
    copied: bool
    _lock: object = None

    def close(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None


class NodeCache:
    """Node-local copies of stores under ``directory``.

    Parameters
    ----------
    directory
        Cache folder on node-local storage (created if missing).
    max_bytes
        Budget for all entries together (default: whatever is free).
    """

    def __init__(self, directory: str | os.PathLike, max_bytes: int | None = None) -> None:
        self.directory = Path(directory)
        self.max_bytes = max_bytes

    def entry(self, location: str | os.PathLike | Location | ByteStore, identity=None) -> Path:
        """Where the copy of ``location`` (a path, a URL, a Location or its opened store; as it is now) lives; for
        a URL, of the object with ``identity`` (``[etag, size]``)."""
        original = location if isinstance(location, ByteStore) else opened(Location.of(location), identity)
        try:
            return node_copy(self.directory, original)
        finally:
            if original is not location:
                original.close()

    def open(self, location: str | os.PathLike | Location | ByteStore, identity=None) -> CachedStore:
        """Where to read ``location`` (a path, a URL, a Location or its opened store) from; the entry stays in use
        (not evictable) until closed.  ``identity`` (``[etag, size]``) names the object version to read: with it a
        finished entry is used without a request.  An object that does not fit is refused (:class:`StoreError`).
        """
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(self.directory, f"cache directory cannot be created ({exc.strerror})") from None
        original = location if isinstance(location, ByteStore) else opened(Location.of(location), identity)
        try:
            return self._open(original)
        finally:
            if original is not location:
                original.close()

    def _open(self, original: ByteStore) -> CachedStore:
        name, size, _ = original.stamp()
        entry = self.entry(original)
        copied = False
        for _ in range(3):   # an eviction can slip in between the copy and the shared lock
            if not entry.exists():
                # One copier per entry: the others block here, then find the copy made.
                with open(_lock_name(entry, "copy"), "a+b") as copy_lock:
                    fcntl.flock(copy_lock, fcntl.LOCK_EX)
                    if not entry.exists():
                        if not self._copy(original, entry, size):
                            if original.node_local_copy is None:
                                raise StoreError(name, f"({size / 1e6:.1f} MB) does not fit in the cache "
                                                       f"{self.directory}; give it more room (cache_bytes, "
                                                       "or a larger cache_dir)")
                            return CachedStore(original.node_local_copy, False, None)
                        copied = True
            lock = open(_lock_name(entry), "a+b")
            try:
                fcntl.flock(lock, fcntl.LOCK_SH)   # in use: eviction skips it
                if entry.exists():
                    # (the copy has its original's size and, where that is a local file, its first bytes)
                    try:
                        got = entry.stat().st_size
                        with open(entry, "rb") as b:
                            same = original.costs_request or _as_store_error(original.first_bytes, 4096) == b.read(4096)
                    except OSError as exc:
                        raise StoreError(entry, f"cached copy of {name} cannot be read ({exc.strerror})") from None
                    if got != size or not same:
                        raise StoreError(entry, f"cached copy of {name} is corrupt ({got} bytes, expected {size}"
                                                f"{'' if same else ', different header'}); delete it to copy again")
                    os.utime(entry)   # recently used
                    return CachedStore(str(entry), copied, lock)
            except BaseException:
                lock.close()
                raise
            lock.close()
        raise StoreError(entry, "cached copy keeps being evicted; give the cache more room")

    def _copy(self, original: ByteStore, entry: Path, size: int) -> bool:
        """Copy ``original``'s bytes to ``entry`` (we hold its exclusive lock); False if it does not fit."""
        name = original.stamp()[0]
        if not self._make_room(size, keep=entry):
            if name not in _warned and original.node_local_copy is not None:
                _warned.add(name)
                log.warning("%s (%.1f MB) does not fit in the cache %s; reading the original",
                            name, size / 1e6, self.directory)
            return False
        tmp = entry.with_name(f".{entry.name}.tmp-{os.getpid()}")
        t0 = time.perf_counter()
        pieces = [(a, min(size, a + _FETCH_BYTES)) for a in range(0, size, _FETCH_BYTES)]
        try:
            with open(tmp, "wb") as dst:
                for i in range(0, len(pieces), _FETCH_AT_ONCE):
                    for data in _as_store_error(original.read_ranges, pieces[i:i + _FETCH_AT_ONCE]):
                        dst.write(data)
                dst.flush()
                os.fsync(dst.fileno())
            if os.path.getsize(tmp) != size:
                raise StoreError(name, f"changed while it was copied to {self.directory}")
            os.replace(tmp, entry)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        log.info("copied %s to %s (%.1f MB in %.2f s)", name, entry, size / 1e6, time.perf_counter() - t0)
        return True

    def _make_room(self, size: int, keep: Path) -> bool:
        """Evict unused entries, oldest use first, until ``size`` bytes fit."""
        import shutil

        def fits() -> bool:
            free = shutil.disk_usage(self.directory).free - HEADROOM_BYTES
            used = sum(p.stat().st_size for p in self.entries())
            return size <= free and (self.max_bytes is None or used + size <= self.max_bytes)

        if fits():
            return True
        for old in sorted(self.entries(), key=lambda p: p.stat().st_mtime):
            if old != keep and _evict(old):
                log.info("evicted %s from the cache", old)
                if fits():
                    return True
        return fits()

    def entries(self) -> list[Path]:
        """Finished copies in the cache (not temporaries, locks or metadata)."""
        return [p for p in self.directory.iterdir() if not p.name.startswith(".") and p.is_file()]


def at_hand(original: ByteStore | Location | str, cache_dir: str | None = None, max_bytes: int | None = None,
            in_place: bool = True) -> CachedStore:
    """Where a library opens ``original``'s bytes by path: the local file holding them (unless ``in_place`` is
    False and ``cache_dir`` given), else the node's copy in ``cache_dir``, made once per node."""
    if not isinstance(original, ByteStore):
        location = Location.of(original)
        if not location.costs_request and (in_place or not cache_dir):
            return CachedStore(location.where, False)   # (asked nothing: its reader says what is wrong with it)
        store = opened(location)
        try:
            return at_hand(store, cache_dir, max_bytes, in_place)
        finally:
            store.close()
    here = original.node_local_copy
    if here is not None and (in_place or not cache_dir):
        return CachedStore(here, False)
    return NodeCache(cache_dir or default_dir(), max_bytes).open(original)


def default_dir() -> str:
    """The node's cache folder: ``$TRAJSCALE_CACHE_DIR``, else ``trajscale-cache-UID`` in the temporary folder."""
    import tempfile

    return os.environ.get("TRAJSCALE_CACHE_DIR") or os.path.join(tempfile.gettempdir(),
                                                                 f"trajscale-cache-{os.getuid()}")


def opened(location: Location, identity=None) -> ByteStore:
    """The store of ``location`` (pinned to ``identity``), failing as :class:`StoreError` (a worker hands it back)."""
    return _as_store_error(location.store, identity)


def _as_store_error(call, *args):
    try:
        return call(*args)
    except InputFileError as exc:
        raise StoreError(exc.path, exc.problem) from None


def _lock_name(entry: Path, kind: str = "use") -> Path:
    """``use``: shared while read, exclusive to evict; ``copy``: held by the one copier."""
    return entry.with_name(f".{entry.name}.{kind}.lock")


def _evict(entry: Path) -> bool:
    """Remove ``entry`` if nobody holds it (non-blocking exclusive lock)."""
    with open(_lock_name(entry), "a+b") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        entry.unlink(missing_ok=True)
        return True


__all__ = ["CachedStore", "NodeCache", "at_hand", "default_dir", "opened"]
