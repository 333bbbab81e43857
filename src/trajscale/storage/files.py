"""A store's bytes as a file that a compiled reader opens by its path and reads with C's stdio.

A decoder written against files (GROMACS's xdrfile reads through a ``FILE``) reads any
:class:`~.bytestore.ByteStore` through the :class:`FileView` of what the store offers (:func:`as_file`): a local
file's path (:class:`InPlace`), or (:class:`Fetched`) for each read the ranges it needs fetched into a fresh
anonymous in-memory file of the store's size, at their own offsets (a stdio buffer never holds bytes of an
earlier read). The reader asks the view, never whether the bytes are local.
"""

from __future__ import annotations

import contextlib
import os
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from .ranges import read_coalesced

Handle = TypeVar("Handle")

#: One request's most bytes when a read's ranges are fetched (longer ranges go out as concurrent requests).
MAX_REQUEST = 8 * 1024**2


def as_file(store) -> FileView:
    """The bytes of ``store`` as a file a compiled reader opens by its path: the file itself, or ranges fetched."""
    if store.c_openable_path is not None:
        return InPlace(store.c_openable_path)
    return Fetched(store, str(store.identity[0]))


class FileView(ABC):
    """A store's bytes as a file a compiled reader opens by its path (see the module's text)."""

    #: The bytes as messages name them: the path, or the object's.
    name: str

    @abstractmethod
    def holding(self, ranges: Callable[[], list[tuple[int, int]]],
                opener: Callable[[str], Handle]) -> contextlib.AbstractContextManager[Handle]:
        """A handle ``opener(path)`` opened on a file holding at least the ranges ``ranges()``, at their offsets."""

    @abstractmethod
    def scan_source(self, block_bytes: int):
        """What a scan of the bytes from start to end reads: a path, or a binary file object reading blocks."""

    def keeps(self, folder: str, kind: str, suffix: str) -> Path | None:
        """Where a scan's result is kept for the next run, by the bytes' identity; None where nothing is kept."""
        return None

    def shown(self, text: str) -> str:
        """``text`` (a reader's message) with the view's own file named as the store's bytes are."""
        return text

    def close(self) -> None:   # noqa: B027 - a view may hold nothing
        """Release what the view holds open."""

    def __enter__(self) -> FileView:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class InPlace(FileView):
    """A local file, read where it lies: one handle, opened at the first read and kept."""

    def __init__(self, path: str) -> None:
        self.path = self.name = path
        self._handle = None

    @contextlib.contextmanager
    def holding(self, ranges, opener):
        if self._handle is None:
            self._handle = opener(self.path)
        yield self._handle

    def scan_source(self, block_bytes: int) -> str:
        return self.path

    def close(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            with contextlib.suppress(OSError):
                handle.close()


#: How the in-memory file is named in a reader's messages (replaced by the store's name).
_OWN_NAME = re.compile(r"/proc/self/fd/\d+")


class Fetched(FileView):
    """Any store's bytes, fetched by the ranges each read asks for into an in-memory file."""

    def __init__(self, store, name: str) -> None:
        self.store = store
        self.name = name

    @contextlib.contextmanager
    def holding(self, ranges, opener) -> Iterator:
        fd = _spool(self.store, ranges())
        try:
            handle = opener(f"/proc/self/fd/{fd}")
            try:
                yield handle
            finally:
                handle.close()
        finally:
            os.close(fd)

    def scan_source(self, block_bytes: int):
        from .fileobj import CachingFile

        return CachingFile(self.store, block_bytes=block_bytes)

    def keeps(self, folder: str, kind: str, suffix: str) -> Path | None:
        from . import cache

        # (an object's ETag and size name its entry: a store with no such identity keeps nothing)
        return cache.entry(self.store, folder, kind, suffix) if hasattr(self.store, "object_identity") else None

    def shown(self, text: str) -> str:
        return _OWN_NAME.sub(self.name, text)


def _spool(store, ranges: list[tuple[int, int]]) -> int:
    """A descriptor of an anonymous file of the store's size holding ``ranges`` at their offsets (the rest a hole)."""
    spans = sorted((int(a), int(b)) for a, b in ranges if b > a)
    got = read_coalesced(store, spans, store.merge_gap, MAX_REQUEST) if spans else []
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("trajscale-bytes", os.MFD_CLOEXEC)
    else:   # a temporary file, unlinked at once
        import tempfile

        fd, name = tempfile.mkstemp(prefix="trajscale-bytes-")
        os.unlink(name)
    try:
        os.ftruncate(fd, store.size)
        for (a, _), data in zip(spans, got, strict=True):
            view, at = memoryview(data), a
            while len(view):
                n = os.pwrite(fd, view, at)
                view, at = view[n:], at + n
    except BaseException:
        os.close(fd)
        raise
    return fd


__all__ = ["MAX_REQUEST", "Fetched", "FileView", "InPlace", "as_file"]
