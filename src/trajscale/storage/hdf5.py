"""An HDF5 file behind a URL, opened by h5py on a :class:`~.fileobj.CachingFile`."""

from __future__ import annotations

import atexit
import weakref

import h5py

from ..errors import InputFileError
from ..util import HDF5_MAGIC
from .fileobj import CachingFile
from .objects import Identity, RemoteError, RemoteObject


def open_remote_h5(url: str, storage_options: dict | None, identity: list | None, rdcc_nbytes: int,
                   metadata: list | None = None):
    """(the object, its caching file object, ``h5py.File`` reading through it); one-line errors as for a
    local file. ``identity`` and ``metadata`` come from the process that prepared the run (a worker's
    open): with them, HDF5 opens the file from the shipped bytes, without a request."""
    obj = RemoteObject.open(url, storage_options, Identity.of(identity))
    fh = CachingFile(obj, known=metadata)
    if identity is not None:
        # Without the shipped metadata, a worker's first block (HDF5 reads it first anyway), fetched before
        # HDF5 opens the file: an object replaced since the root's look is refused here, never inside HDF5
        # (whose failed open of a Python file object leaves it a reference it releases only at exit, after
        # Python is gone). With it, HDF5 opens from the root's bytes and the first request, for frames,
        # checks the object (If-Match).
        if not fh.covers(0, min(obj.size, 512)):
            fh.pread(0, min(obj.size, fh.block))
    elif obj.head[:8] != HDF5_MAGIC:
        raise InputFileError(url, "not an HDF5 file (wrong format, or truncated before its superblock)")
    try:
        f = h5py.File(fh, "r", rdcc_nbytes=rdcc_nbytes)
        _OPEN.add(f)
        return obj, fh, f
    except RemoteError:
        raise
    except OSError as exc:
        if isinstance(fh.failure, RemoteError):
            raise fh.failure from None
        raise InputFileError(url, f"cannot open as HDF5 ({str(exc).splitlines()[0]}); "
                                  "the object may be truncated") from None



#: HDF5 files open on Python file objects: closed before the interpreter ends (HDF5 closing one at its own
#: exit calls back into a Python that is gone).
_OPEN: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for f in list(_OPEN):
        try:
            f.close()
        except Exception:   # noqa: BLE001 - at exit, closing never raises
            pass
