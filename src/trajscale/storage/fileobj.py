"""A read-only file object over a byte store, through a block cache: what HDF5 reads its metadata with.

h5py opens a Python file object with HDF5's ``fileobj`` driver; HDF5 then asks
for many small pieces (superblock, object headers, heaps, B-tree nodes). Each
would be a request over the network, so reads go by blocks of
:data:`BLOCK_BYTES`, kept in an LRU cache: the metadata of a file is fetched
once per process. The object's first block comes from the request that told
its format. Frame data never goes this way when a Source can read it at its
chunk addresses (:mod:`.chunks`).
"""

from __future__ import annotations

import io
import threading
from collections import OrderedDict

from .objects import HEAD_BYTES, RemoteObject

#: Bytes per cached block (the object's first request fetched the first one).
BLOCK_BYTES = HEAD_BYTES
#: Most bytes kept per file object.
CACHE_BYTES = 64 * 1024**2


class CachingFile(io.RawIOBase):
    """A seekable, read-only file over ``store`` whose reads go through a cache of whole blocks."""

    def __init__(self, store: RemoteObject, block_bytes: int = BLOCK_BYTES, cache_bytes: int = CACHE_BYTES) -> None:
        super().__init__()
        self.store = store
        self.block = int(block_bytes)
        self.max_blocks = max(4, cache_bytes // self.block)
        self._pos = 0
        self.failure: Exception | None = None
        self._blocks: OrderedDict[int, bytes] = OrderedDict()
        self._lock = threading.Lock()
        if store.head and block_bytes == HEAD_BYTES:
            self._blocks[0] = store.head
        self.name = store.url

    def __repr__(self) -> str:   # h5py names a file object's file by its repr: the URL, in every message
        return self.store.url

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_SET:
            self._pos = offset
        elif whence == io.SEEK_CUR:
            self._pos += offset
        elif whence == io.SEEK_END:
            self._pos = self.store.size + offset
        else:
            raise ValueError(f"invalid whence {whence}")
        return self._pos

    def readinto(self, buf) -> int:
        view = memoryview(buf).cast("B")
        start = self._pos
        stop = min(self.store.size, start + len(view))
        if stop <= start:
            return 0
        data = self.pread(start, stop)
        view[:len(data)] = data
        self._pos = start + len(data)
        return len(data)

    def pread(self, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)``, from cached blocks; the missing ones fetched together.

        A failure is also kept in :attr:`failure`: HDF5 turns an exception raised in a file object's
        read into its own error, and the Source raises the real one instead.
        """
        try:
            return self._pread(start, stop)
        except Exception as exc:
            self.failure = exc
            raise

    def _pread(self, start: int, stop: int) -> bytes:
        first, last = start // self.block, (stop - 1) // self.block
        with self._lock:
            missing = [k for k in range(first, last + 1) if k not in self._blocks]
        if missing:
            size = self.store.size
            got = self.store.read_ranges([(k * self.block, min(size, (k + 1) * self.block)) for k in missing])
            with self._lock:
                for k, data in zip(missing, got, strict=True):
                    self._blocks[k] = data
        with self._lock:
            parts = []
            for k in range(first, last + 1):
                blk = self._blocks.get(k)
                if blk is None:   # evicted meanwhile by another thread: fetched again
                    blk = self.store.read_ranges([(k * self.block, min(self.store.size, (k + 1) * self.block))])[0]
                    self._blocks[k] = blk
                self._blocks.move_to_end(k)
                lo = start - k * self.block if k == first else 0
                hi = stop - k * self.block if k == last else len(blk)
                parts.append(blk[lo:hi])
            while len(self._blocks) > self.max_blocks:
                self._blocks.popitem(last=False)
        return b"".join(parts)

    def flush(self) -> None:
        pass

    def truncate(self, size=None):   # HDF5 asks only of a file opened to write
        raise OSError("read-only file object")
