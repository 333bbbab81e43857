"""What describing a local mdCATH file found, kept for the next run on the same file (trajscale's cache).

Describing a file and reading its atoms cost about 10 ms a file and h5py's import; a second run reads both from
one JSON entry instead (the first run's own result, checked again), so the features are the same bits. An entry
is named by the file's identity and status-change time (which no one can set back) and kept as every trajscale
cache is (:mod:`trajscale.cache_files`); a damaged entry is a miss. ``TRAJSCALE_TOPOLOGY_CACHE=0`` turns it off.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

import numpy as np

from ..cache_files import decode_array, encode_array
from ..cache_files import read as read_entry
from ..cache_files import write as write_entry
from ..storage.bytestore import ByteStore
from ..topology import caches_enabled
from ..util import cache_root

log = logging.getLogger(__name__)

#: The version of the entries (another version's are not read).
FORMAT = 2
#: At most so many entries (files), and bytes, in the folder: the least recently used go first.
MAX_ENTRIES = 20_000
MAX_BYTES = 512 * 1024**2
#: The kinds of the per-atom datasets kept: integers and fixed-width text, never objects.
TYPES = "iuSU"


def cache_dir() -> Path:
    return cache_root() / "mdcath"


def file_key(store: ByteStore) -> list | None:
    """What an entry of the file in ``store`` must match; None where nothing is kept."""
    path = store.node_local_copy
    if path is None or not caches_enabled():
        return None
    identity = list(store.identity)
    try:
        st = os.stat(path)
    except OSError:
        return None
    if (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) != tuple(identity[1:5]):   # changed since it was opened
        return None
    return [FORMAT, *identity, st.st_ctime_ns]


def _path(key: list, part: str) -> Path:
    digest = hashlib.sha256(json.dumps([key, part]).encode()).hexdigest()[:32]
    return cache_dir() / f"{digest}-{part}.json"


def load(key: list | None, part: str) -> dict | None:
    """The entry ``part`` (``"members"``, ``"atoms"``, ``"digest"``) of the file ``key`` names, or None."""
    if key is None:
        return None
    path = _path(key, part)
    data = read_entry(path)
    if data is None:
        return None
    try:
        entry = json.loads(data)
    except ValueError as exc:
        log.debug("ignoring the mdCATH cache entry %s: %s", path, exc)
        return None
    if not isinstance(entry, dict) or entry.get("key") != key or entry.get("part") != part:
        return None
    return entry


def store(key: list | None, part: str, value: dict) -> None:
    """Keep ``value`` as the entry ``part`` of the file ``key`` names (failures only cost the cache)."""
    if key is None:
        return
    entry = {"key": key, "part": part, **value}
    write_entry(_path(key, part), lambda fh: fh.write(json.dumps(entry).encode()), f"mdCATH {part} of {key[1]}",
                max_entries=MAX_ENTRIES, max_bytes=MAX_BYTES)


def encode(array: np.ndarray | None) -> dict | None:
    """A per-atom dataset as JSON values (its dtype as stored: :func:`~trajscale.cache_files.encode_array`)."""
    if array is None:
        return None
    if np.asarray(array).dtype.kind not in TYPES:
        raise ValueError(f"cannot keep a {np.asarray(array).dtype} dataset")
    return encode_array(array)


def decode(value: dict | None) -> np.ndarray | None:
    """The array :func:`encode` kept (a new array, of the dtype it was kept with)."""
    return None if value is None else decode_array(value, TYPES)


__all__ = ["cache_dir", "decode", "encode", "file_key", "load", "store"]
