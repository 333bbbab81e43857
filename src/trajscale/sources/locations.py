"""Where a trajectory file is: located once, where it enters trajscale (the API, the command line), as the
value every process opens: a URL as given, a local path absolute.  A list of URLs is a list of locations,
never paths joined to the working folder."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..util import scheme_of

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..storage.bytestore import ByteStore


def is_local(location: str | os.PathLike | None) -> bool:
    """Whether ``location`` is a local file's path, not an object behind a URL a store serves (told without I/O,
    from the scheme table every layer shares: :data:`trajscale.util.SCHEME_PREFIXES`)."""
    return scheme_of(os.fspath(location) if isinstance(location, os.PathLike) else location) is None


def locate(trajectory: str | os.PathLike) -> str:
    """``trajectory`` as every process opens it: a URL as given (``s3://``, ``http(s)://``: never a path,
    so nothing joins it to a folder), a local path absolute with its links resolved (workers and ranks in
    another directory open the same file)."""
    text = os.fspath(trajectory)
    return str(Path(text).resolve()) if is_local(text) else text


def beside(location: str | os.PathLike, name: str) -> str:
    """``name`` as a file beside ``location`` names it (a segment index its parts): relative to a local file's
    folder, or to an object's URL prefix (``..`` climbing it, never above the bucket or host); a URL or an
    absolute path as it is."""
    if not is_local(name) or os.path.isabs(name):
        return name
    where = os.fspath(location)
    if is_local(where):
        return str(Path(where).parent / name)
    from ..storage import resolve

    return resolve(where, name)


def local_beside(location: str | os.PathLike, name: str) -> str:
    """``name`` as a local file a file at ``location`` names (a segment index its topology): beside a local
    file; as given (the working folder's) for a file behind a URL, as topologies are read from local disk."""
    where = os.fspath(location)
    return str(Path(where).parent / name) if is_local(where) and not os.path.isabs(name) else name


def identity(location: str | os.PathLike) -> tuple | None:
    """What tells ``location``'s bytes from a replacement's now, as cheaply as it can be told: a local file's
    (device, inode, size, mtime_ns) from one ``stat`` (no link resolved: metadata calls a parallel file
    system pays for), None when it is missing or not a file; an object's URL, ETag and size (its first
    request, shared for a few seconds with its opening; a missing, denied or unreachable one said in one
    line)."""
    where = os.fspath(location)
    if is_local(where):
        try:
            st = os.stat(where)
        except OSError:
            return None
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) if stat.S_ISREG(st.st_mode) else None
    from ..storage.opener import open_bytes

    return open_bytes(where).identity


def store_class(location: str | os.PathLike) -> type[ByteStore]:
    """The class of :class:`~trajscale.storage.ByteStore` that ``location``'s bytes are read through
    (:func:`trajscale.storage.opener.open_bytes` opens one), told without I/O: what it declares
    (:attr:`~trajscale.storage.ByteStore.remote`, :attr:`~trajscale.storage.ByteStore.worker_modules`) is
    what a caller asks, before or without opening it. The network's modules are imported only for a URL."""
    if is_local(location):
        from ..storage.bytestore import LocalFile

        return LocalFile
    from ..storage.objects import RemoteObject

    return RemoteObject


__all__ = ["beside", "identity", "is_local", "local_beside", "locate", "store_class"]
