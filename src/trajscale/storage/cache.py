"""What reading a remote object learned, kept on disk for the next run on the same object.

An entry is one file under :func:`~trajscale.util.cache_root`, named by a digest of its kind, the
object's URL, ETag and size: a replaced object has another ETag or size, so its entry is never used,
and an object without an ETag gets none (nothing would say it is the same object). Entries are read,
written and pruned as every trajscale cache's (:mod:`trajscale.cache_files`): each folder keeps at most
:data:`MAX_FOLDER_BYTES`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from ..cache_files import drop, read
from ..cache_files import write as write_entry
from ..util import cache_root
from .bytestore import ByteStore
from .objects import RemoteObject

#: Most bytes of entries one folder keeps (a segment index of thousands of parts makes as many entries).
MAX_FOLDER_BYTES = 512 * 1024**2


def entry(obj: RemoteObject, folder: str, kind: str, suffix: str) -> Path | None:
    """The entry of ``kind`` for ``obj`` in ``cache_root()/folder``; None for an object without an ETag."""
    ident = obj.object_identity
    if not ident.etag:
        return None
    key = json.dumps([kind, obj.url, ident.etag, ident.size])
    return cache_root() / folder / (hashlib.sha256(key.encode()).hexdigest() + suffix)


def node_copy(directory: Path, store: ByteStore) -> Path:
    """Where a node keeps its copy of ``store`` as it is now (:class:`~.nodecache.NodeCache`): its name's last
    part, with a digest of its name, size and version."""
    name, size, version = store.stamp()
    base = Path(name.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1] or "object")
    digest = hashlib.sha256(repr((name, size, version)).encode()).hexdigest()[:16]
    return directory / f"{base.stem}-{digest}{base.suffix}"


def write(path: Path, fill: Callable[[object], None], what: str) -> None:
    """Write an entry whole (:func:`trajscale.cache_files.write`), its folder kept to :data:`MAX_FOLDER_BYTES`."""
    write_entry(path, fill, what, max_bytes=MAX_FOLDER_BYTES)


__all__ = ["drop", "entry", "node_copy", "read", "write"]
