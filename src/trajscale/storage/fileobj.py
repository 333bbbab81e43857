"""A read-only file object over a byte store, through a block cache: what HDF5 reads its metadata with.

HDF5 asks a file object for many small pieces (superblock, object headers, heaps, B-tree nodes), each a request
over the network, so reads go by blocks of :data:`BLOCK_BYTES` in one LRU cache of the process, by the object's
identity: a file's metadata is fetched once per process however often it is opened (an ensemble's members
listed, then prepared), its first block from the request that told its format.

A format that can tell what HDF5 will read next asks for exactly those bytes ahead
(:meth:`CachingFile.fetch_ahead`), kept as pieces of their own size, not whole blocks. This module knows nothing
of HDF5's format: the format's hook (``on_read``) sees each read.

The preparing process keeps the bytes HDF5 asked for (:meth:`CachingFile.metadata`, a few tens of kB) and they
travel with the job: a worker's file object starts with them (``known``), so its first request is for frames.
"""

from __future__ import annotations

import base64
import bisect
import itertools
import threading
from collections.abc import Callable

from ..util import LRU
from .bytestore import ReadOnlyFile
from .objects import HEAD_BYTES, RemoteObject

#: Bytes per cached block (the object's first request fetched the first one).
BLOCK_BYTES = HEAD_BYTES
#: Most bytes of blocks kept by the process (every file object's together).
CACHE_BYTES = 64 * 1024**2
#: Most bytes of metadata a run ships to its workers (:meth:`CachingFile.metadata`) in every job's config.
SHIP_BYTES = 1024**2
#: Pieces HDF5 asked for closer than this are shipped as one.
SHIP_GAP = 4096
#: Ranges fetched ahead closer than this are fetched by one request (as well as those within one block).
AHEAD_GAP = 16 * 1024


def _decoded(data) -> bytes:
    return base64.b64decode(data) if isinstance(data, str) else bytes(data)


#: Blocks by (object, block size, index), every file object's together.
_BLOCKS = LRU(max_bytes=CACHE_BYTES)
#: A file object over bytes whose replacement might go unseen keeps its blocks under a name of its own.
_PRIVATE = itertools.count()


class CachingFile(ReadOnlyFile):
    """A seekable, read-only file over ``store`` whose reads go through a cache of whole blocks."""

    def __init__(self, store: RemoteObject, block_bytes: int = BLOCK_BYTES, known: list | None = None,
                 on_read: Callable[[CachingFile, bytes], None] | None = None) -> None:
        super().__init__()
        self.store = store
        self.block = int(block_bytes)
        self._pos = 0
        self.failure: Exception | None = None
        # (blocks are shared by the file objects of one object only where every replacement of it is refused)
        self._blocks_of = (tuple(store.identity) if store.validator.complete else (next(_PRIVATE),), self.block)
        self._lock = threading.Lock()
        if store.head and block_bytes == HEAD_BYTES:
            _BLOCKS.put((*self._blocks_of, 0), store.head)
        self.name = store.url
        #: pieces of the file known without a request ((start, bytes), by start): the preparing process's
        self._known = sorted((int(a), _decoded(data)) for a, data in known or () if len(data))
        self._known_starts = [a for a, _ in self._known]
        #: ranges HDF5 asked for (what :meth:`metadata` ships), and whether more were asked than are kept
        self._asked: list[tuple[int, int]] = []
        #: ``known`` where it came from trajscale's cache of an earlier run (:mod:`.hdf5`), else None
        self.cached: list | None = None
        #: ranges fetched ahead, on their way (sorted); those come, by start: (stop, bytes), in LRU order
        self._ahead: list[tuple[int, int]] = []
        self._pieces = LRU(max_bytes=max(self.block, CACHE_BYTES // 4), size=lambda piece: len(piece[1]))
        self._piece_starts: list[int] = []
        #: the format's look at each read fetched (not known): what it tells to fetch ahead
        self.on_read = on_read

    def covers(self, start: int, stop: int) -> bool:
        """True when bytes ``[start, stop)`` are known without a request (shipped by the preparing process)."""
        return self._from_known(start, stop) is not None

    def _from_known(self, start: int, stop: int) -> bytes | None:
        i = bisect.bisect_right(self._known_starts, start) - 1
        if i < 0:
            return None
        a, data = self._known[i]
        return data[start - a:stop - a] if stop <= a + len(data) else None

    def metadata(self, max_bytes: int = SHIP_BYTES, gap: int = SHIP_GAP) -> list[list]:
        """HDF5 metadata read so far as ``[start, base64]`` pieces, at most ``max_bytes``: a worker's ``known``."""
        with self._lock:
            asked = sorted(self._asked)
        merged: list[list[int]] = []
        for a, b in asked:
            if merged and a <= merged[-1][1] + gap:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        out, total = [], 0
        for a, b in merged:
            if total + b - a > max_bytes:
                continue
            data = self.held(a, b)
            if data is not None:
                out.append([a, base64.b64encode(data).decode("ascii")])
                total += b - a
        return out

    def held(self, start: int, stop: int) -> bytes | None:
        """Bytes ``[start, stop)`` if this file object holds them all (known pieces or cached blocks)."""
        data = self._from_known(start, stop)
        if data is None:
            data = self._from_pieces(start, stop)
        if data is not None:
            return data
        parts = []
        for k in range(start // self.block, (stop - 1) // self.block + 1):
            blk = _BLOCKS.get((*self._blocks_of, k))
            lo, hi = max(start, k * self.block), min(stop, (k + 1) * self.block)
            if blk is None:
                known = self._from_known(lo, hi)
                if known is None:
                    return None
                parts.append(known)
            else:
                parts.append(blk[lo - k * self.block:hi - k * self.block])
        return b"".join(parts)

    def __repr__(self) -> str:   # h5py names a file object's file by its repr: the URL, in every message
        return self.store.url

    def end(self) -> int:
        return self.store.size

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
        """Bytes ``[start, stop)``, the missing blocks fetched together; a failure is kept in :attr:`failure` too."""
        with self._lock:
            if len(self._asked) < 100_000:   # (HDF5 walks metadata in small reads; frames never come this way)
                self._asked.append((start, stop))
        known = self._from_known(start, stop)
        if known is not None:
            return known
        try:
            data = self._pread(start, stop)
        except Exception as exc:
            self.failure = exc
            raise
        if self.on_read is not None:
            self.on_read(self, data)
        return data

    def _from_pieces(self, start: int, stop: int) -> bytes | None:
        """Bytes ``[start, stop)`` from one piece fetched ahead, if one holds them all."""
        with self._lock:
            i = bisect.bisect_right(self._piece_starts, start)
            for a in self._piece_starts[max(0, i - 2):i]:   # (the pieces starting nearest before it)
                b, data = self._pieces.peek(a)
                if stop <= b:
                    self._pieces.get(a)
                    return data[start - a:stop - a]
        return None

    def _on_way(self, start: int, stop: int) -> tuple[int, int] | None:
        """The range asked for ahead and not yet taken that holds ``[start, stop)``, if one does."""
        i = bisect.bisect_right(self._ahead, (start, float("inf")))
        return next(((a, b) for a, b in self._ahead[max(0, i - 2):i] if stop <= b), None)

    def _from_ahead(self, start: int, stop: int) -> bytes | None:
        """Bytes ``[start, stop)`` from a range asked for ahead that holds them all (kept as a piece), or None."""
        with self._lock:
            got = self._on_way(start, stop)
            if got is None:
                return None
            self._ahead.remove(got)
        data = bytes(self.store.read_ranges([got])[0])
        with self._lock:
            if got[0] not in self._pieces:
                bisect.insort(self._piece_starts, got[0])
            for a, _ in self._pieces.put(got[0], (got[1], data)):
                self._piece_starts.remove(a)
        return data[start - got[0]:stop - got[0]]

    def fetch_ahead(self, ranges: list[tuple[int, int]]) -> None:
        """Start fetching ``ranges`` not held, known or on their way; ranges within :data:`AHEAD_GAP` go together."""
        if not hasattr(self.store, "prefetch"):
            return
        size = self.store.size
        wanted = sorted((a, min(b, size)) for a, b in ranges if 0 <= a < min(b, size)
                        and self.held(a, min(b, size)) is None)
        with self._lock:
            wanted = [(a, b) for a, b in wanted if self._on_way(a, b) is None]
        spans: list[list[int]] = []
        for a, b in wanted:
            if spans and (a - spans[-1][1] <= AHEAD_GAP or a // self.block == spans[-1][0] // self.block):
                spans[-1][1] = max(spans[-1][1], b)
            else:
                spans.append([a, b])
        if spans:
            with self._lock:
                for a, b in spans:
                    bisect.insort(self._ahead, (a, b))
            self.store.prefetch([(a, b) for a, b in spans])

    def _pread(self, start: int, stop: int) -> bytes:
        data = self._from_pieces(start, stop)
        if data is None:
            data = self._from_ahead(start, stop)
        if data is not None:
            return data
        first, last = start // self.block, (stop - 1) // self.block
        blocks = {k: _BLOCKS.get((*self._blocks_of, k)) for k in range(first, last + 1)}
        missing = [k for k, blk in blocks.items() if blk is None]
        if missing:
            size = self.store.size
            got = self.store.read_ranges([(k * self.block, min(size, (k + 1) * self.block)) for k in missing])
            for k, data in zip(missing, got, strict=True):
                blocks[k] = data
                _BLOCKS.put((*self._blocks_of, k), data)
        parts = [blk[start - k * self.block if k == first else 0:stop - k * self.block if k == last else len(blk)]
                 for k, blk in blocks.items()]
        return b"".join(parts)

    def flush(self) -> None:
        pass

    def truncate(self, size=None):   # HDF5 asks only of a file opened to write
        raise OSError("read-only file object")
