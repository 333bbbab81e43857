"""What reading a remote object learned, kept on disk for the next run on the same object.

An entry is one file under :func:`~trajscale.util.cache_root`, named by a digest of its kind, the
object's URL, ETag and size: a replaced object has another ETag or size, so its entry is never used,
and an object without an ETag gets none (nothing would say it is the same object). Entries are written
to a temporary name and renamed, in a folder and as files only their owner may write, and read (never
through a link) only when their owner wrote them and no one else may change them or their folder. One
that cannot be read is ignored and one that cannot be written is skipped: a cache never fails a run.
Each folder keeps at most :data:`MAX_FOLDER_BYTES`: the entries used least recently go first.
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

from ..util import cache_root, why_untrusted
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


def read(path: Path) -> bytes | None:
    """The entry's bytes, then marked as used now; None where there is none, or it is a link, or it or its
    folder is another user's or others may write it (:func:`~trajscale.util.why_untrusted`): what is
    checked is the file opened, not a name that could change in between."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as fh:
            why = why_untrusted(os.fstat(fh.fileno())) or why_untrusted(os.stat(path.parent))
            if why:
                log.debug("not reading the cache entry %s: %s", path, why)
                return None
            data = fh.read()
        os.utime(path)
    except OSError:
        return None
    return data


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
        why = why_untrusted(os.stat(path.parent))
        if why:
            log.debug("%s was not written to the cache folder %s: %s", what, path.parent, why)
            return
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


__all__ = ["drop", "entry", "read", "write"]
