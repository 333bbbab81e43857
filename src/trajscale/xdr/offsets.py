"""XTC and TRR files behind a URL: their frame offsets index, and their frames' bytes by range requests.

An XTC/TRR has no index of its own: a frame is found by reading every header before it. Behind a URL
the offsets come, in this order of preference, from

* the segment index that ``trajscale index`` wrote beside the parts (its segments' ``offsets``);
* a local cache keyed by the object's URL, ETag and size (:func:`load_offsets`, :func:`save_offsets`;
  :mod:`.cache`), under ``offsets/`` of trajscale's cache folder (``~/.cache/trajscale`` by default):
  a replaced object has another ETag, so its stale entry is never used;
* one scan of the frames' headers through a caching file object of :data:`SCAN_BLOCK_BYTES` blocks
  (:func:`scan_file`): the scan reads the object from start to end in a few large requests, never one
  request per frame header. Its result is cached.

A task then fetches its frames' bytes (:func:`fetch_frames`): one span per run of consecutive frames,
merged across small gaps and split into concurrent requests of at most 8 MiB, written into an
anonymous in-memory file at their own offsets, where the compiled xdrfile decodes them as it decodes
a local file.
"""

from __future__ import annotations

import io
import json
import logging
import os
import tempfile

import numpy as np

from ..storage import cache
from ..storage.fileobj import CachingFile
from ..storage.objects import RemoteObject

log = logging.getLogger(__name__)

#: Block size of the caching file object a header scan reads through: the scan reads the whole object in
#: order, so few large requests (a 100 MB XTC: 13 requests).
SCAN_BLOCK_BYTES = 8 * 1024**2
#: One request's most bytes when a task fetches its frames (larger spans go out as concurrent requests).
MAX_REQUEST = 8 * 1024**2
#: The cache's version: entries of another layout are ignored.
CACHE_VERSION = 1


def _entry(obj: RemoteObject, fmt: str):
    return cache.entry(obj, "offsets", f"{CACHE_VERSION}:{fmt}", ".npz")


def load_offsets(obj: RemoteObject, fmt: str) -> dict | None:
    """The cached scan of ``obj`` (``n_atoms``, ``offsets``, ``fields``, ``steps``, ``times``, ``damaged``),
    None when there is none for its URL, ETag and size (or the object has no ETag: nothing says it is the
    same object)."""
    path = _entry(obj, fmt)
    raw = None if path is None else cache.read(path)
    if raw is None:
        return None
    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            if meta.get("url") != obj.url or meta.get("identity") != obj.object_identity.to_list():
                return None
            found = {"n_atoms": int(meta["n_atoms"]), "fields": tuple(meta["fields"]),
                     "damaged": meta.get("damaged"), "offsets": np.asarray(z["offsets"], np.int64),
                     "steps": np.asarray(z["steps"], np.int64), "times": np.asarray(z["times"], np.float64)}
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if len(found["offsets"]) and int(found["offsets"][-1]) >= obj.size:
        return None
    log.debug("%s: frame offsets from the local cache %s (%d frames)", obj.url, path, len(found["offsets"]))
    return found


def save_offsets(obj: RemoteObject, fmt: str, found: dict) -> None:
    """Cache a scan of ``obj`` (:mod:`.cache`: atomically, the user's only; skipped when it cannot be
    written)."""
    path = _entry(obj, fmt)
    if path is None:
        return
    meta = {"url": obj.url, "identity": obj.object_identity.to_list(), "n_atoms": int(found["n_atoms"]),
            "fields": list(found["fields"]), "damaged": found.get("damaged")}
    cache.write(path, lambda fh: np.savez(fh, meta=np.array(json.dumps(meta)),
                                          offsets=np.asarray(found["offsets"], np.int64),
                                          steps=np.asarray(found["steps"], np.int64),
                                          times=np.asarray(found["times"], np.float64)),
                f"{obj.url}: frame offsets")


def scan_file(obj: RemoteObject) -> CachingFile:
    """A file object over ``obj`` for a header scan: blocks of :data:`SCAN_BLOCK_BYTES`, few kept (the scan
    goes forward)."""
    return CachingFile(obj, block_bytes=SCAN_BLOCK_BYTES, cache_bytes=4 * SCAN_BLOCK_BYTES)


def frame_spans(offsets: np.ndarray, size: int, frames: np.ndarray) -> list[tuple[int, int]]:
    """Byte ranges holding ``frames`` (sorted frame numbers): consecutive frames in one range."""
    ends = np.append(offsets[1:], size)
    spans: list[list[int]] = []
    last = None
    for k in frames:
        a, b = int(offsets[k]), int(ends[k])
        if spans and last is not None and k == last + 1:
            spans[-1][1] = b
        else:
            spans.append([a, b])
        last = k
    return [(a, b) for a, b in spans]


def fetch_frames(obj: RemoteObject, offsets: np.ndarray, frames: np.ndarray) -> tuple[int, int]:
    """``frames``' bytes of ``obj`` in an anonymous in-memory file: (its descriptor, the byte at its start),
    the frames at ``offsets - start`` in it. The caller closes the descriptor."""
    from ..storage.objects import read_coalesced

    spans = frame_spans(offsets, obj.size, frames)
    base = spans[0][0]
    got = read_coalesced(obj, spans, obj.merge_gap, MAX_REQUEST)
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("trajscale-xdr", os.MFD_CLOEXEC)
    else:   # a temporary file, unlinked at once
        fd, name = tempfile.mkstemp(prefix="trajscale-xdr-")
        os.unlink(name)
    try:
        os.ftruncate(fd, spans[-1][1] - base)
        for (a, _), data in zip(spans, got, strict=True):
            view, at = memoryview(data), a - base
            while len(view):
                n = os.pwrite(fd, view, at)
                view, at = view[n:], at + n
    except BaseException:
        os.close(fd)
        raise
    return fd, base


__all__ = ["MAX_REQUEST", "SCAN_BLOCK_BYTES", "fetch_frames", "frame_spans", "load_offsets",
           "save_offsets", "scan_file"]
