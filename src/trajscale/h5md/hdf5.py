"""Opening HDF5 files, with every failure turned into one clear error."""

from __future__ import annotations

import os
import re
from pathlib import Path

import h5py

from ..errors import InputFileError, OutputError
from ..storage.bytestore import ByteStore
from ..storage.opener import open_bytes
from ..util import check_input_file


def ensure_filters(ds: h5py.Dataset) -> None:
    """Register hdf5plugin's filters (Zstd, Blosc, LZ4...) if ``ds`` needs one HDF5 does not have.

    Without it a read fails as "can't open directory ... plugins" in every process that
    has not imported hdf5plugin (workers and ranks too). Importing it is a visible
    part of a short run, so only when a dataset asks for it.
    """
    dcpl = ds.id.get_create_plist()
    if all(h5py.h5z.filter_avail(dcpl.get_filter(i)[0]) for i in range(dcpl.get_nfilters())):
        return
    try:
        import hdf5plugin  # noqa: F401
    except ImportError:
        raise InputFileError(ds.file.filename, f"{ds.name} is compressed with a filter HDF5 does not have "
                                               "here; install hdf5plugin (pip install hdf5plugin)") from None


def open_h5(path: str | os.PathLike | ByteStore, mode: str = "r", driver: str | None = None,
            comm=None, **kw) -> h5py.File:
    """Open an HDF5 file, turning every failure into one clear InputFileError. ``path``: a location (its
    store is opened here), or the :class:`~trajscale.storage.ByteStore` a caller holds open already; a store
    with a local path is opened by name, other bytes (a URL's) through a caching file object over the store
    (:func:`.metadata.open_store_h5`)."""
    if mode == "r":
        store = path if isinstance(path, ByteStore) else _checked_store(path)
        if store.local_path is None:   # (HDF5 opens a local file by name; other bytes through a file object)
            from .metadata import open_store_h5

            return open_store_h5(store, True, None, kw.get("rdcc_nbytes", 1024**2))[1]
        if store is not path:
            store.close()
        elif not store.size:   # (a caller's store: its file, unlike a path, was never checked for bytes)
            raise InputFileError(Path(store.local_path), "file is empty")
        path = store.local_path
        if not h5py.is_hdf5(path):
            raise InputFileError(path, "not an HDF5 file (wrong format, or truncated before its superblock)")
    p = Path(path)
    if driver == "mpio":
        kw.update(driver="mpio", comm=comm)
    elif driver:
        kw["driver"] = driver
    try:
        try:
            return h5py.File(str(p), mode, **kw)
        except OSError as exc:
            if mode != "r" or LOCKING_MISMATCH not in str(exc):
                raise
            # HDF5 shares one open file per process, and this process has it open with the other locking
            # (a follower reads without the lock): the same file object, opened as it is
            return h5py.File(str(p), mode, **{**kw, "locking": kw.get("locking", True) is False})
    except OSError as exc:
        locked = lock_problem(exc)
        if mode != "r":   # a file to write: the folder or the disk is at fault, not the file's contents
            raise OutputError(p, locked or f"cannot create or write it ({_os_reason(exc)})") from None
        raise InputFileError(p, locked or f"cannot open as HDF5 ({_short(exc)}); the file may be truncated") from None


def _checked_store(path: str | os.PathLike) -> ByteStore:
    """The store of ``path``, a local file first checked (missing, a folder or empty, said as such; an
    object's first request says its own)."""
    check_input_file(path)
    return open_bytes(path)


#: HDF5's words when a file this process has open is opened again with other file locking.
LOCKING_MISMATCH = "file locking flag values don't match"

#: errno values HDF5's file lock fails with on file systems that have no locks (NFS without lockd: ENOLCK;
#: Lustre and others mounted without flock: ENOSYS, EOPNOTSUPP).
NO_LOCKS = {37, 38, 95}


def lock_problem(exc: OSError) -> str | None:
    """What a failed open says when HDF5's file lock is at fault (None when it is not): another process
    holds the lock (a writer has the file open), or the file system has no locks (network file systems)."""
    msg = str(exc)
    if "unable to lock file" not in msg:
        return None
    code = re.search(r"errno = (\d+)", msg)
    code = int(code.group(1)) if code else exc.errno
    if code in NO_LOCKS:
        said = re.search(r"error message = '([^']+)'", msg)
        return (f"HDF5 cannot lock it: this file system has no file locks ({said.group(1) if said else msg}, "
                "as on NFS or Lustre); set HDF5_USE_FILE_LOCKING=FALSE in the environment, and read a file "
                "only when no process writes it")
    return ("another process holds HDF5's lock on it (a writer still has it open); read it when the writer "
            "has closed it, or follow it while it grows (trajscale run --follow reads without the lock)")


def _os_reason(exc: OSError) -> str:
    """The operating system's words for a failed open (h5py puts them inside HDF5's message)."""
    if exc.strerror:
        return exc.strerror
    m = re.search(r"error message = '([^']+)'", str(exc))
    return m.group(1) if m else _short(exc)


def _short(exc: BaseException) -> str:
    msg = str(exc)
    return msg.split("(", 1)[0].strip() if "errno" in msg else msg.splitlines()[0]
