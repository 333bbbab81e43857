"""A read-only file object over a byte store, through a block cache: what HDF5 reads its metadata with.

h5py opens a Python file object with HDF5's ``fileobj`` driver; HDF5 then asks
for many small pieces (superblock, object headers, heaps, B-tree nodes). Each
would be a request over the network, so reads go by blocks of
:data:`BLOCK_BYTES`, kept in an LRU cache: the metadata of a file is fetched
once per process. The object's first block comes from the request that told
its format. Frame data never goes this way when a Source can read it at its
chunk addresses (:mod:`.chunks`).

The process that prepares a run keeps the bytes HDF5 asked for (:meth:`CachingFile.metadata`: a few
tens of kB, the superblock, object headers, heaps and B-tree nodes it walked) and they travel with the
job; a worker's file object starts with them (``known``), so HDF5 opens the file on a worker without a
request, and the worker's first request is for frames.
"""

from __future__ import annotations

import base64
import bisect
import io
import threading
from collections import OrderedDict

from ..util import HDF5_MAGIC
from .objects import HEAD_BYTES, RemoteObject

#: Bytes per cached block (the object's first request fetched the first one).
BLOCK_BYTES = HEAD_BYTES
#: Most bytes kept per file object.
CACHE_BYTES = 64 * 1024**2
#: Most bytes of metadata a run ships to its workers (:meth:`CachingFile.metadata`; a job's config carries
#: them to every worker, and an array's to every task).
SHIP_BYTES = 1024**2
#: Pieces HDF5 asked for closer than this are shipped as one.
SHIP_GAP = 4096


def _decoded(data) -> bytes:
    return base64.b64decode(data) if isinstance(data, str) else bytes(data)


def btree_children(node: bytes, sizeof_addr: int, file_size: int) -> list[int]:
    """The children's addresses of an HDF5 version-1 B-tree node of chunked raw data above the leaves
    (signature ``TREE``, type 1, level > 0), or [] for any other bytes.

    Its keys hold a chunk's size and filter mask (4 bytes each) and one 8-byte offset per dimension and one
    more, 0 in the key before each child; the dataset's rank is not in the node, so it is the first for
    which each of those keys ends in that 0 and every child lies inside the file (a wrong guess costs only
    blocks fetched ahead).
    """
    if len(node) < 8 or node[:4] != b"TREE" or node[4] != 1 or node[5] == 0:
        return []
    used = int.from_bytes(node[6:8], "little")
    head = 8 + 2 * sizeof_addr
    for rank in range(1, 33):
        key = 8 + 8 * (rank + 1)
        step = key + sizeof_addr
        if head + used * step + key > len(node):
            break
        if any(node[head + i * step + key - 8:head + i * step + key] != bytes(8) for i in range(used)):
            continue
        kids = [int.from_bytes(node[head + i * step + key:head + (i + 1) * step], "little") for i in range(used)]
        if all(0 < a < file_size for a in kids):
            return kids
    return []


def chunk_index_root(header: bytes, sizeof_addr: int) -> int | None:
    """The address of a chunked dataset's chunk index (the root of its B-tree) from the first bytes of its
    version-1 object header, or None for any other header or layout (a version-2 header, a layout message
    past the header's first block, a contiguous or compact dataset)."""
    if len(header) < 16 or header[0] != 1:
        return None
    end = min(len(header), 16 + int.from_bytes(header[8:12], "little"))
    at = 16   # (messages start 8-aligned after the 12-byte prefix)
    while at + 8 <= end:
        kind, size = int.from_bytes(header[at:at + 2], "little"), int.from_bytes(header[at + 2:at + 4], "little")
        body = header[at + 8:at + 8 + size]
        if kind == 8 and len(body) == size:   # the data layout message
            if len(body) >= 3 + sizeof_addr and body[0] == 3 and body[1] == 2:
                addr = int.from_bytes(body[3:3 + sizeof_addr], "little")
            elif len(body) >= 8 + sizeof_addr and body[0] in (1, 2) and body[2] == 2:
                addr = int.from_bytes(body[8:8 + sizeof_addr], "little")
            else:
                return None
            return None if addr == (1 << 8 * sizeof_addr) - 1 else addr   # (all ones: not yet allocated)
        at += 8 + size
    return None


class CachingFile(io.RawIOBase):
    """A seekable, read-only file over ``store`` whose reads go through a cache of whole blocks."""

    def __init__(self, store: RemoteObject, block_bytes: int = BLOCK_BYTES, cache_bytes: int = CACHE_BYTES,
                 known: list | None = None) -> None:
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
        #: pieces of the file known without a request ((start, bytes), by start): the preparing process's
        self._known = sorted((int(a), _decoded(data)) for a, data in known or () if len(data))
        self._known_starts = [a for a, _ in self._known]
        #: ranges HDF5 asked for (what :meth:`metadata` ships), and whether more were asked than are kept
        self._asked: list[tuple[int, int]] = []
        #: ``known`` where it came from trajscale's cache of an earlier run (:mod:`.hdf5`), else None
        self.cached: list | None = None
        #: blocks asked for ahead of HDF5 (:meth:`_read_children_ahead`), and the file's address size
        self._ahead_blocks: set[int] = set()
        self._addr_size: int | None = None

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
        """The bytes HDF5 has asked for so far, as ``[start, base64 text]`` pieces (nearby ones merged; JSON
        and pickle carry them as they are), at most ``max_bytes`` of them, each taken from what this file
        object holds (never fetched now): what a worker's file object starts with (``known``)."""
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
        if data is not None:
            return data
        parts = []
        with self._lock:
            for k in range(start // self.block, (stop - 1) // self.block + 1):
                blk = self._blocks.get(k)
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
        if data[:4] == b"TREE":
            self._read_children_ahead(data)
        return data

    def _read_children_ahead(self, node: bytes) -> None:
        """When HDF5 has just read a node of a chunk index's B-tree above its leaves, fetch the blocks of its
        children now, together: HDF5 walks them one after another, a round trip each (a default-layout
        store's leaves lie between its chunks, one every ~100 MB). Only a hint: what HDF5 then asks for is
        read as always, from these blocks where they came."""
        self.fetch_ahead([(a, a + 1) for a in btree_children(node, self.sizeof_addr(), self.store.size)])

    def fetch_ahead(self, ranges: list[tuple[int, int]]) -> None:
        """Start fetching, together, the blocks holding byte ranges ``ranges`` that are not held, known or
        already on their way: a hint of what HDF5 will read next, which then comes from these blocks."""
        if not hasattr(self.store, "prefetch"):
            return
        size = self.store.size
        wanted = {k for a, b in ranges if 0 <= a < min(b, size) and self.held(a, min(b, size)) is None
                  for k in range(a // self.block, (min(b, size) - 1) // self.block + 1)}
        with self._lock:
            wanted = sorted(wanted - self._blocks.keys() - self._ahead_blocks)
            self._ahead_blocks.update(wanted)
        if wanted:
            self.store.prefetch([(k * self.block, min(size, (k + 1) * self.block)) for k in wanted])

    def chunk_index_root(self, header_addr: int) -> int | None:
        """The chunk index root of the dataset whose object header is at ``header_addr``, from the header's
        bytes if they are held (never fetched); None otherwise (:func:`chunk_index_root`)."""
        head = self.held(header_addr, min(self.store.size, header_addr + 16))
        if head is None or len(head) < 16:
            return None
        end = header_addr + 16 + int.from_bytes(head[8:12], "little")
        body = self.held(header_addr, min(self.store.size, end))
        return None if body is None else chunk_index_root(body, self.sizeof_addr())

    def sizeof_addr(self) -> int:
        """The file's "size of offsets" from its superblock (8 where it cannot be told)."""
        if self._addr_size is None:
            head = self.held(0, 16) if self.store.size >= 16 else None
            self._addr_size = 8
            if head is not None and head[:8] == HDF5_MAGIC:
                at = 13 if head[8] in (0, 1) else 9   # superblock versions 0-1, 2-3
                if head[at] in (2, 4, 8):
                    self._addr_size = head[at]
        return self._addr_size

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
