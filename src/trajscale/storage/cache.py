"""What reading a remote object learned, kept on disk for the next run on the same object.

An entry is one file under :func:`~trajscale.util.cache_root`, named by a digest of its kind, the
object's URL, ETag and size: a replaced object has another ETag or size, so its entry is never used,
and an object without an ETag gets none (nothing would say it is the same object). Entries are written
to a temporary name and renamed, in a folder and as files only their owner may write, and read only
when their owner wrote them and no one else may change them. One that cannot be read is ignored and one
that cannot be written is skipped: a cache never fails a run. Each folder keeps at most
:data:`MAX_FOLDER_BYTES`: the entries used least recently go first.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from ..util import cache_root
from .objects import RemoteObject

log = logging.getLogger(__name__)

#: Most bytes of entries one folder keeps (a segment index of thousands of parts makes as many entries).
MAX_FOLDER_BYTES = 512 * 1024**2


def entry(obj: RemoteObject, folder: str, kind: str, suffix: str) -> Path | None:
    """The entry of ``kind`` for ``obj`` in ``cache_root()/folder``; None for an object without an ETag."""
    ident = obj.object_identity
    if not ident.etag:
        return None
    key = json.dumps([kind, obj.url, ident.etag, ident.size])
    return cache_root() / folder / (hashlib.sha256(key.encode()).hexdigest() + suffix)


def trusted(path: Path) -> bool:
    """Whether ``path`` exists, is this user's, and no one else may write it (then marked as used now)."""
    try:
        st = path.stat()
    except OSError:
        return False
    if st.st_uid != os.getuid() or st.st_mode & 0o022:
        return False
    with contextlib.suppress(OSError):
        os.utime(path)
    return True


def _prune(folder: Path, keep: Path) -> None:
    """Remove the entries used least recently until the folder holds at most :data:`MAX_FOLDER_BYTES`."""
    entries = []
    with contextlib.suppress(OSError), os.scandir(folder) as it:
        for e in it:
            if not e.name.startswith(".") and e.is_file(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    st = e.stat(follow_symlinks=False)
                    entries.append((st.st_mtime, st.st_size, Path(e.path)))
    total = sum(size for _, size, _ in entries)
    for _, size, path in sorted(entries):
        if total <= MAX_FOLDER_BYTES:
            break
        if path != keep:
            drop(path)
            total -= size


def write(path: Path, fill: Callable[[object], None], what: str) -> None:
    """Write an entry atomically (``fill`` writes into the open binary file); skipped, with a debug
    message, when it cannot be written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
        try:
            with os.fdopen(fd, "wb") as fh:
                fill(fh)
            os.chmod(tmp, 0o600)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError as exc:
        log.debug("%s was not written to the cache %s (%s)", what, path, exc)
        return
    log.debug("%s cached in %s", what, path)
    _prune(path.parent, path)


def drop(path: Path | None) -> None:
    """Remove an entry found wrong."""
    if path is not None:
        with contextlib.suppress(OSError):
            path.unlink()


__all__ = ["drop", "entry", "trusted", "write"]
