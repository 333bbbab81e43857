"""The ByteStore interface, and the local file's store: what every format reads its bytes through.

A :class:`ByteStore` answers a file's size and identity and reads byte ranges of it; :class:`LocalFile` also
offers a descriptor for the compiled gather (:mod:`.pread`). :meth:`~.location.Location.store` imports
:class:`~.objects.RemoteObject` (and its clients) only for a URL.
"""

from __future__ import annotations

import contextlib
import io
import os
import stat
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from functools import cached_property

from ..errors import InputFileError
from .ranges import MERGE_GAP


@dataclass(frozen=True, slots=True)
class Validator:
    """What tells a store's bytes from a replacement's, and what that can see.

    ``kind``: ``"version"`` (reads pinned to a version id), ``"etag"`` (follows the content), ``"mtime-etag"``
    (nginx's: a same-size replacement within the same second is not seen), ``"weak-etag"`` (``W/``), ``"size"``
    (no ETag) or ``"file"`` (a local file's device, inode, size and mtime). ``complete``: whether every
    replacement is seen. ``says``: one line for ``inspect`` and the run report."""

    kind: str
    complete: bool
    says: str



class NoFile(InputFileError):
    """A local path with no file's bytes behind it (missing, or a folder), told from a file that cannot be read."""


class ByteStore(ABC):
    """A file's bytes: its size, its identity, and ranges of it."""

    @property
    @abstractmethod
    def size(self) -> int: ...

    @property
    @abstractmethod
    def identity(self) -> tuple: ...

    @property
    @abstractmethod
    def validator(self) -> Validator:
        """What tells these bytes from a replacement's, and whether it sees every replacement."""

    @abstractmethod
    def read_ranges(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """The bytes ``[start, stop)`` of each range, in order; every one exactly that long, or an error."""

    @abstractmethod
    def stamp(self) -> tuple[str, int, int]:
        """(name, size, version) a resume records of an input: a local file's mtime, an object's ETag as a number."""

    #: Ranges closer than this are read as one (:data:`MERGE_GAP`; an object's ``merge_gap`` option).
    merge_gap: int = MERGE_GAP

    #: The path a C library (HDF5's own driver, xdrfile's stdio) may open these bytes at, None where they must be
    #: fetched: asked only where such a library is handed a path (storage/, hdf5/, the XDR reader's open).
    c_openable_path: str | None = None

    #: Whether each read costs a request (told of the class): worth asking ahead, and a pool's workers preload
    #: the client; reading a little more to check or tell a file costs nothing where it does not.
    costs_request: bool = False

    #: What a process imports to read through this store (preloaded before a pool's workers start).
    worker_modules: tuple[str, ...] = ()

    @property
    def node_local_copy(self) -> str | None:
        """A file on this node holding these bytes, or None: read in place instead of copied to a node's cache,
        and what an entry of a cache kept beside it is keyed by (its inode and times)."""
        return self.c_openable_path

    def first_bytes(self, n: int) -> bytes:
        """The first ``n`` bytes (all of them, for a shorter file): what a format is told from."""
        return self.read_ranges([(0, min(n, self.size))])[0]

    def state(self) -> dict | None:
        """What another process opens these bytes with, without asking again; None for a local file."""
        return None

    def fetched(self) -> dict | None:
        """What reading these bytes cost over the network (requests, bytes, wait_s, retries); None for a local file."""
        return None

    def descriptor(self) -> int | None:
        """A descriptor that ``pread`` reads these bytes from, open until :meth:`close`; None if not a local file."""
        return None

    def being_written(self) -> None:  # noqa: B027 - an object behind a URL is never rewritten in place
        """These bytes are a file a writer still appends to and updates in place (a followed H5MD file, whose
        rows and metadata the writer rewrites at the same size): from now on only another file under the name,
        or one that shrank, is refused."""

    def close(self) -> None:  # noqa: B027 - a store that holds nothing open closes nothing
        """Let go of what the store holds open (a descriptor)."""


class ReadOnlyFile(io.RawIOBase):
    """A seekable read-only binary file object over :meth:`end` bytes; a subclass reads from ``_pos``."""

    _pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def end(self) -> int:
        """The size of the file."""
        raise NotImplementedError

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_SET:
            self._pos = offset
        elif whence == io.SEEK_CUR:
            self._pos += offset
        elif whence == io.SEEK_END:
            self._pos = self.end() + offset
        else:
            raise ValueError(f"invalid whence {whence}")
        return self._pos


class LocalFile(ByteStore):
    """A local file read with ``pread`` (the local twin of :class:`RemoteObject`)."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            st = os.stat(path)
        except FileNotFoundError:
            raise NoFile(path, "no such file") from None
        if stat.S_ISDIR(st.st_mode):
            raise NoFile(path, "a folder, not a file: give a file in it, or its segment index "
                               "(index.json, as trajscale split writes it)")
        self._seen = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)   # (what each read checks)
        self._size = st.st_size
        self._in_place = False   # (being_written: rewrites in place are the writer's, not a new file)
        self._fd = -1
        self._fd_lock = threading.Lock()

    @property
    def size(self) -> int:
        return self._size

    @cached_property
    def identity(self) -> tuple:
        return (os.path.realpath(self.path), *self._seen)   # (its links resolved only when asked: a read needs none)

    @property
    def validator(self) -> Validator:
        return Validator("file", True, "device, inode, size and modification time (ns)")

    def stamp(self) -> tuple[str, int, int]:
        return self.identity[0], self._size, self._seen[3]

    @property
    def c_openable_path(self) -> str:
        return self.path

    def read_ranges(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        for a, b in ranges:
            if a < 0 or b > self._size or b < a:
                raise InputFileError(self.path, f"bytes {a} to {b} are outside the file's {self._size} bytes: "
                                                "the file is damaged")
        # (each read checks the file is still the one first seen: the kept descriptor's, else a new one's)
        kept = self._fd
        fd = kept if kept >= 0 else self._open_checked()
        try:
            if fd == kept:
                self._check(os.fstat(fd))
            out = [os.pread(fd, b - a, a) for a, b in ranges]
        finally:
            if fd != kept:
                os.close(fd)
        for (a, b), data in zip(ranges, out, strict=True):
            if len(data) != b - a:
                raise InputFileError(self.path, f"short read at byte {a}: the file is truncated")
        return out

    def first_bytes(self, n: int) -> bytes:
        # (read as the file is now, unchecked: a file being written may change at the same size meanwhile)
        kept = self._fd
        fd = kept if kept >= 0 else os.open(self.path, os.O_RDONLY)
        try:
            return os.pread(fd, n, 0)
        finally:
            if fd != kept:
                os.close(fd)

    def _open_checked(self) -> int:
        """A new descriptor of the file, checked to be the one first seen: not replaced, not rewritten."""
        fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            self._check(os.fstat(fd))
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _check(self, st: os.stat_result) -> None:
        """Refuse a file that is not the one first seen (another inode; shrunk; rewritten at the same size)."""
        dev, ino, size, mtime = self._seen
        # (a file that only grew, as one being appended to, still holds the bytes first seen)
        rewritten = st.st_size == size and st.st_mtime_ns != mtime and not self._in_place
        if (st.st_dev, st.st_ino) != (dev, ino) or st.st_size < size or rewritten:
            from .retry import Replaced  # (the error's module, with the network's: imported when it is raised)

            raise Replaced(self.path, "the file was replaced or rewritten during the run (its inode, size or "
                                      "modification time changed); run again on the new file")

    def being_written(self) -> None:
        self._in_place = True

    def descriptor(self) -> int:
        """The file's descriptor, opened (and checked) on the first call and kept until :meth:`close`."""
        if self._fd < 0:
            with self._fd_lock:
                if self._fd < 0:
                    self._fd = self._open_checked()
        return self._fd

    def close(self) -> None:
        with self._fd_lock:
            fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):   # a finalizer never raises: it may run during interpreter shutdown
            self.close()

    def __getstate__(self) -> dict:
        # (how to open the file travels, never a descriptor)
        return {**{k: v for k, v in vars(self).items() if k != "_fd_lock"}, "_fd": -1}

    def __setstate__(self, state: dict) -> None:
        vars(self).update(state)
        self._fd_lock = threading.Lock()


__all__ = ["ByteStore", "LocalFile", "NoFile", "ReadOnlyFile", "Validator"]
