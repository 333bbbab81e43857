"""An HDF5 file behind a URL, opened by h5py on a :class:`~.fileobj.CachingFile`."""

from __future__ import annotations

import h5py

from ..errors import InputFileError
from ..util import HDF5_MAGIC
from .fileobj import CachingFile
from .objects import Identity, RemoteError, RemoteObject


def open_remote_h5(url: str, storage_options: dict | None, identity: list | None, rdcc_nbytes: int):
    """(the object, its caching file object, ``h5py.File`` reading through it); one-line errors as for a
    local file."""
    obj = RemoteObject.open(url, storage_options, Identity.of(identity))
    fh = CachingFile(obj)
    if identity is None and obj.head[:8] != HDF5_MAGIC:
        raise InputFileError(url, "not an HDF5 file (wrong format, or truncated before its superblock)")
    try:
        return obj, fh, h5py.File(fh, "r", rdcc_nbytes=rdcc_nbytes)
    except RemoteError:
        raise
    except OSError as exc:
        if isinstance(fh.failure, RemoteError):
            raise fh.failure from None
        raise InputFileError(url, f"cannot open as HDF5 ({str(exc).splitlines()[0]}); "
                                  "the object may be truncated") from None

