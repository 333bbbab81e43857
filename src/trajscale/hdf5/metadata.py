"""An HDF5 file behind a URL, opened by h5py on a :class:`~trajscale.storage.fileobj.CachingFile`.

HDF5 reads a file one piece after another (superblock, object headers, B-tree nodes), each a round trip over
the network. The preparing process ships the pieces it read to its workers and keeps them in trajscale's cache
(:mod:`trajscale.storage.cache`): a second analysis opens the object with the one request that checks its ETag.

The HDF5 format is read here, not in the transport: the chunk index's root in an object header, a B-tree node's
children, and what to fetch ahead from them, each sized to what HDF5 will read, not to whole blocks.
"""

from __future__ import annotations

import atexit
import base64
import binascii
import contextlib
import hashlib
import json
import logging
import weakref

import h5py
import numpy as np

from ..errors import InputFileError, ServerUnreachable
from ..storage import cache, redacted
from ..storage.bytestore import ByteStore
from ..storage.fileobj import CachingFile
from ..storage.objects import RemoteObject
from ..storage.retry import RemoteError
from ..util import HDF5_MAGIC
from .chunks import stored_chunks
from .superblock import cut_short, superblock_offset_size

log = logging.getLogger(__name__)


#: The version of the metadata cache's entries (another version's are not read).
METADATA_VERSION = 1


def _metadata_entry(obj: RemoteObject):
    return cache.entry(obj, "hdf5-metadata", f"{METADATA_VERSION}", ".json")


def cached_metadata(obj: RemoteObject) -> list | None:
    """The HDF5 metadata an earlier run read from this object, as ``[start, base64]`` pieces; None if none or bad."""
    path = _metadata_entry(obj)
    raw = None if path is None else cache.read(path)
    if raw is None:
        return None
    try:
        got = json.loads(raw)
        pieces = got["pieces"]
        ok = (got.get("url") == redacted(obj.url) and got.get("identity") == obj.object_identity.to_list()
              and isinstance(pieces, list) and got.get("sha256") == _digest(pieces)
              and all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], int) and isinstance(p[1], str)
                      and 0 <= p[0] and p[0] + len(base64.b64decode(p[1], validate=True)) <= obj.size
                      for p in pieces))
    except (ValueError, KeyError, TypeError, AttributeError, binascii.Error):
        ok = False
    if not ok:
        cache.drop(path)
        return None
    log.debug("%s: HDF5 metadata from the local cache %s", obj.url, path)
    return pieces


def cache_metadata(obj: RemoteObject, pieces: list) -> None:
    """Keep ``pieces`` (:meth:`~.fileobj.CachingFile.metadata`) for the next run on the same object."""
    path = _metadata_entry(obj)
    if path is None or not pieces:
        return
    # (the URL as shown, without its password: the entry's name is a digest of the whole URL)
    text = json.dumps({"url": redacted(obj.url), "identity": obj.object_identity.to_list(), "sha256": _digest(pieces),
                       "pieces": pieces})
    cache.write(path, lambda fh: fh.write(text.encode()), f"{obj.url}: HDF5 metadata")


def _digest(pieces: list) -> str:
    return hashlib.sha256(json.dumps(pieces).encode()).hexdigest()


def btree_children(node: bytes, sizeof_addr: int, file_size: int) -> list[int]:
    """The children's addresses of an HDF5 version-1 B-tree node of chunked raw data above the leaves
    (signature ``TREE``, type 1, level > 0), or [] for any other bytes.

    The dataset's rank is not in the node: it is the first for which each key ends in a 0 offset and every
    child lies inside the file (a wrong guess costs only bytes fetched ahead)."""
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
    """The address of a chunked dataset's B-tree root in its version-1 object header's first bytes, else None."""
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


def sizeof_addr(fh: CachingFile) -> int:
    """The file's "size of offsets" from its superblock, as ``fh`` holds it (8 where it cannot be told)."""
    head = fh.held(0, 16) if fh.store.size >= 16 else None
    return (superblock_offset_size(head) if head is not None else None) or 8


def held_chunk_index_root(fh: CachingFile, header_addr: int) -> int | None:
    """The chunk index root of the dataset whose header is at ``header_addr``, if ``fh`` holds its bytes; else None."""
    head = fh.held(header_addr, min(fh.store.size, header_addr + 16))
    if head is None or len(head) < 16:
        return None
    end = header_addr + 16 + int.from_bytes(head[8:12], "little")
    body = fh.held(header_addr, min(fh.store.size, end))
    return None if body is None else chunk_index_root(body, sizeof_addr(fh))


def children_ahead(fh: CachingFile, data: bytes) -> None:
    """``fh``'s ``on_read``: after HDF5 read a B-tree node above the leaves, fetch its children together."""
    if data[:4] == b"TREE":
        fh.fetch_ahead([(a, a + INDEX_NODE_BYTES) for a in btree_children(data, sizeof_addr(fh), fh.store.size)])


def open_store_h5(store: ByteStore, prepares: bool, metadata: list | None, rdcc_nbytes: int,
                  use_cache: bool = True):
    """(caching file object over ``store``, ``h5py.File`` through it); a worker starts from the shipped ``metadata``,
    the preparing process from an earlier run's cache (unless ``use_cache=False``)."""
    from_cache = False
    if prepares and metadata is None and use_cache:
        metadata = cached_metadata(store)
        from_cache = metadata is not None
    fh = CachingFile(store, known=metadata, on_read=children_ahead)
    fh.cached = metadata if from_cache else None
    if not prepares:
        # Without shipped metadata, the first block is fetched before HDF5 opens the file: a replaced object is
        # refused here, never inside HDF5 (whose failed open of a Python file object leaks a reference until
        # exit). With it, the first request, for frames, checks the object (If-Match).
        if not fh.covers(0, min(store.size, 512)):
            fh.pread(0, min(store.size, fh.block))
    elif fh.pread(0, min(store.size, len(HDF5_MAGIC))) != HDF5_MAGIC:   # (a known object's first block: fetched now)
        raise InputFileError(store.url, "not an HDF5 file (wrong format, or truncated before its superblock)")
    try:
        f = h5py.File(fh, "r", rdcc_nbytes=rdcc_nbytes)
        _OPEN.add(f)
        return fh, f
    except (RemoteError, ServerUnreachable):
        raise
    except OSError as exc:
        if isinstance(fh.failure, RemoteError | ServerUnreachable):
            raise fh.failure from None
        if from_cache:   # (an entry HDF5 cannot open from is dropped, and the object opened as it is)
            cache.drop(_metadata_entry(store))
            return open_store_h5(store, prepares, None, rdcc_nbytes, use_cache=False)
        short = cut_short(store.first_bytes(64), store.size) if "truncated file" in str(exc) else None
        if short is not None:   # (said as of a local file; no repair of an object in place)
            raise InputFileError(store.url, short) from None
        raise InputFileError(store.url, f"cannot open as HDF5 ({str(exc).splitlines()[0]}); "
                                        "the object may be truncated") from None


#: Most chunks of a small dataset whose addresses are looked up to fetch them ahead.
AHEAD_CHUNKS = 16
#: Bytes fetched at a B-tree node not yet read (3 kB for rank 3; a small dataset's first chunk follows it).
INDEX_NODE_BYTES = 4096


def fetch_ahead(fh: CachingFile, datasets) -> None:
    """Start fetching, together, what reading ``datasets`` will need next where it can be told without a request
    (a B-tree root or its nodes, a small dataset's chunks). Only a hint."""
    ranges = []
    for ds in datasets:
        try:
            if ds.chunks is None:
                offset = ds.id.get_offset()
                if offset is not None:
                    ranges.append((offset, offset + ds.id.get_storage_size()))
                continue
            # (the object header's address; H5Oget_info would walk the chunk index to tell its size)
            root = held_chunk_index_root(fh, h5py.h5g.get_objinfo(ds.id).objno[0])
            if root is None:
                continue
            node = fh.held(root, min(fh.store.size, root + INDEX_NODE_BYTES))
            if node is None or node[:4] != b"TREE":
                ranges.append((root, root + INDEX_NODE_BYTES))
            elif node[5] > 0:
                ranges += [(a, a + INDEX_NODE_BYTES) for a in btree_children(node, sizeof_addr(fh), fh.store.size)]
            elif int.from_bytes(node[6:8], "little") <= AHEAD_CHUNKS:   # (HDF5 reads them from the node here)
                ranges += written_rows(ds, stored_chunks(ds, 2 * AHEAD_CHUNKS))
        except (AttributeError, IndexError, OSError, RuntimeError, ValueError):   # (no addresses; a damaged header)
            continue
    fh.fetch_ahead(ranges)


def written_rows(ds, chunks: list[tuple[int, int, int]]) -> list[tuple[int, int]]:
    """The byte ranges of ``chunks`` holding ``ds``'s rows (HDF5 reads only an unfiltered last chunk's written rows)."""
    row = ds.dtype.itemsize * int(np.prod(ds.chunks[1:], dtype=np.int64))
    whole = tuple(ds.chunks[1:]) == tuple(ds.shape[1:]) and len(chunks) == -(-ds.shape[0] // ds.chunks[0])
    out = []
    for k, (a, size, _) in enumerate(chunks):
        rows = min(ds.chunks[0], ds.shape[0] - k * ds.chunks[0])
        out.append((a, a + (rows * row if whole and size == ds.chunks[0] * row and rows > 0 else size)))
    return out


#: HDF5 files open on Python file objects: closed before the interpreter ends (HDF5's own exit calls back).
_OPEN: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for f in list(_OPEN):
        with contextlib.suppress(Exception):   # at exit, closing never raises
            f.close()
