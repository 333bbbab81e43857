"""A node-local copy of a store, shared by every worker on the node (Devarajan, HUG 2024's DYAD step).

The first process on a node that needs the store copies it into ``cache_dir``
(``/dev/shm``, local NVMe) while holding an exclusive ``flock`` on the entry's
lock file; the others block on that lock, then find the finished copy and read
it. A copy is written under a temporary name, fsynced, size-checked and
renamed, so a reader never sees half a copy. Readers hold a shared lock on the
entry while they use it; eviction (least recently used first, across stores)
only removes entries whose exclusive lock it can take, i.e. that nobody reads.

Entries are keyed by the original's real path, size and modification time: a
rewritten store gets a new entry. A store behind a URL (``s3://``, ``http(s)://``)
is fetched into the cache the same way, by concurrent range requests (each
checked, every one asking for the object's ETag), its entry keyed by the URL,
ETag and size: an object replaced in the store gets a new entry, and a dataset
made on the old one is refused rather than mixed with the new. A copy that does not fit (after evicting
unused entries) is not made: the store is read from its original place and the
fallback is logged once per process. A cached copy whose size or header no
longer matches its original is reported as corrupt.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputFileError, StoreError
from ..sources.locations import is_local

log = logging.getLogger(__name__)

#: Room left free in the cache's file system besides the copy.
HEADROOM_BYTES = 64 * 1024**2
_COPY_BYTES = 16 * 1024**2
#: An object is fetched in requests of this many bytes, this many at once.
_FETCH_BYTES = 8 * 1024**2
_FETCH_AT_ONCE = 8
_warned: set[str] = set()


@dataclass
class CachedStore:
    """An opened cache entry: ``path`` to read, whether this call ``copied`` it; ``close()`` releases it.

    ``path`` is the original store when the copy did not fit; ``identity`` is a URL's object's
    ``[etag, size]`` (None for a local store).
    """

    path: str
    copied: bool
    _lock: object = None
    identity: list | None = None

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

    def entry(self, store: str | os.PathLike, identity=None) -> Path:
        """Where the copy of ``store`` (as it is now) lives; for a URL, of the object with ``identity``
        (an :class:`~trajscale.storage.objects.Identity` or ``[etag, size]``)."""
        if not is_local(str(store)):
            from ..storage.objects import Identity

            ident = identity if isinstance(identity, Identity) else Identity.of(identity)
            key = repr((str(store), ident.etag, ident.size))
            name = str(store).rstrip("/").rsplit("/", 1)[-1] or "object"
            stem, dot, suffix = name.rpartition(".")
            stem, suffix = (stem, f".{suffix}") if dot and stem else (name, "")
        else:
            st = os.stat(store)
            key = repr((os.path.realpath(store), st.st_size, st.st_mtime_ns))
            stem, suffix = Path(store).stem, Path(store).suffix
        digest = hashlib.sha256(key.encode()).hexdigest()[:16]
        return self.directory / f"{stem}-{digest}{suffix}"

    def open(self, store: str | os.PathLike, storage_options: dict | None = None,
             identity=None) -> CachedStore:
        """Where to read ``store`` from; the entry stays in use (not evictable) until closed.

        A URL is fetched into the cache once (the first user on the node fetches, the others wait for
        it); ``identity`` (``[etag, size]``, from the process that made the dataset) names the object
        version to read, and with it a finished entry is used without a request. A URL that does not
        fit is refused (:class:`StoreError`): it has no local original to fall back on.
        """
        store = str(store)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(self.directory, f"cache directory cannot be created ({exc.strerror})") from None
        remote = None
        if not is_local(store):
            from ..storage.objects import Identity

            remote = _Remote(store, storage_options, Identity.of(identity) if identity is not None else None)
            size = remote.identity.size
            entry = self.entry(store, remote.identity)
        else:
            size = os.path.getsize(store)
            entry = self.entry(store)
        copied = False
        for _ in range(3):   # an eviction can slip in between the copy and the shared lock
            if not entry.exists():
                # One copier per entry: the others block here, then find the copy made.
                with open(_lock_name(entry, "copy"), "a+b") as copy_lock:
                    fcntl.flock(copy_lock, fcntl.LOCK_EX)
                    if not entry.exists():
                        if not self._copy(store, entry, size, remote):
                            if remote is not None:
                                raise StoreError(store, f"({size / 1e6:.1f} MB) does not fit in the cache "
                                                        f"{self.directory}; give it more room (cache_bytes, "
                                                        "or a larger cache_dir)")
                            return CachedStore(store, False, None)
                        copied = True
            lock = open(_lock_name(entry), "a+b")
            try:
                fcntl.flock(lock, fcntl.LOCK_SH)   # in use: eviction skips it
                if entry.exists():
                    if remote is None:
                        _check_copy(store, entry, size)
                    else:
                        _check_fetched(store, entry, size)
                    os.utime(entry)   # recently used
                    return CachedStore(str(entry), copied, lock,
                                       None if remote is None else remote.identity.to_list())
            except BaseException:
                lock.close()
                raise
            lock.close()
        raise StoreError(entry, "cached copy keeps being evicted; give the cache more room")

    def _copy(self, store: str, entry: Path, size: int, remote: _Remote | None = None) -> bool:
        """Copy ``store`` to ``entry`` (we hold its exclusive lock); False if it does not fit."""
        if not self._make_room(size, keep=entry):
            if store not in _warned and remote is None:
                _warned.add(store)
                log.warning("%s (%.1f MB) does not fit in the cache %s; reading the original",
                            store, size / 1e6, self.directory)
            return False
        tmp = entry.with_name(f".{entry.name}.tmp-{os.getpid()}")
        t0 = time.perf_counter()
        try:
            with open(tmp, "wb") as dst:
                if remote is None:
                    with open(store, "rb") as src:
                        shutil.copyfileobj(src, dst, _COPY_BYTES)
                else:
                    remote.fetch_into(dst)
                dst.flush()
                os.fsync(dst.fileno())
            if os.path.getsize(tmp) != size:
                raise StoreError(store, f"changed while it was copied to {self.directory}")
            meta = ({"source": os.path.realpath(store), "size": size} if remote is None
                    else {"source": store, "etag": remote.identity.etag, "size": size})
            _meta_name(entry).write_text(json.dumps(meta))
            os.replace(tmp, entry)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        log.info("%s %s to %s (%.1f MB in %.2f s)", "copied" if remote is None else "fetched", store, entry,
                 size / 1e6, time.perf_counter() - t0)
        return True

    def _make_room(self, size: int, keep: Path) -> bool:
        """Evict unused entries, oldest use first, until ``size`` bytes fit."""

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
        return [p for p in self.directory.iterdir()
                if not p.name.startswith(".") and p.is_file()]


class _Remote:
    """An object behind a URL, opened once per :meth:`NodeCache.open` (one request without a known
    identity, none with one), fetched by concurrent, checked range requests."""

    def __init__(self, url: str, options: dict | None, identity) -> None:
        from ..storage.objects import RemoteObject

        try:
            self.obj = RemoteObject.open(url, options, identity)
        except InputFileError as exc:   # as a StoreError, which a DataLoader worker can hand back
            raise StoreError(exc.path, exc.problem) from None
        self.identity = self.obj.object_identity

    def fetch_into(self, dst) -> None:
        size = self.identity.size
        pieces = [(a, min(size, a + _FETCH_BYTES)) for a in range(0, size, _FETCH_BYTES)]
        try:
            for i in range(0, len(pieces), _FETCH_AT_ONCE):
                for data in self.obj.read_ranges(pieces[i:i + _FETCH_AT_ONCE]):
                    dst.write(data)
        except InputFileError as exc:
            raise StoreError(exc.path, exc.problem) from None


def _lock_name(entry: Path, kind: str = "use") -> Path:
    """``use``: shared while read, exclusive to evict; ``copy``: held by the one copier."""
    return entry.with_name(f".{entry.name}.{kind}.lock")


def _meta_name(entry: Path) -> Path:
    return entry.with_name(f".{entry.name}.json")


def _evict(entry: Path) -> bool:
    """Remove ``entry`` if nobody holds it (non-blocking exclusive lock)."""
    with open(_lock_name(entry), "a+b") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        entry.unlink(missing_ok=True)
        _meta_name(entry).unlink(missing_ok=True)
        return True


def _check_copy(store: str, entry: Path, size: int) -> None:
    """The copy has its original's size and the same first bytes (HDF5 superblock), else it is corrupt."""
    try:
        got = entry.stat().st_size
        with open(store, "rb") as a, open(entry, "rb") as b:
            same_head = a.read(4096) == b.read(4096)
    except OSError as exc:
        raise StoreError(entry, f"cached copy of {store} cannot be read ({exc.strerror})") from None
    if got != size or not same_head:
        raise StoreError(entry, f"cached copy of {store} is corrupt ({got} bytes, expected {size}"
                                    f"{'' if same_head else ', different header'}); delete it to copy again")


def _check_fetched(url: str, entry: Path, size: int) -> None:
    """A fetched object's copy has the object's size (its name holds the ETag and size), else it is corrupt."""
    try:
        got = entry.stat().st_size
    except OSError as exc:
        raise StoreError(entry, f"cached copy of {url} cannot be read ({exc.strerror})") from None
    if got != size:
        raise StoreError(entry, f"cached copy of {url} is corrupt ({got} bytes, expected {size}); "
                                "delete it to fetch again")


__all__ = ["CachedStore", "NodeCache"]
