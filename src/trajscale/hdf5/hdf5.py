"""Opening HDF5 files, with every failure turned into one clear error."""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

import h5py

from ..errors import CutShortError, InputFileError, OutputError
from ..storage.bytestore import ByteStore
from ..storage.location import Location
from ..util import check_input_file
from .superblock import cut_short, stored_size


def ensure_filters(ds: h5py.Dataset) -> None:
    """Register hdf5plugin's filters if ``ds`` needs one (its import is a visible part of a short run)."""
    dcpl = ds.id.get_create_plist()
    if all(h5py.h5z.filter_avail(dcpl.get_filter(i)[0]) for i in range(dcpl.get_nfilters())):
        return
    try:
        import hdf5plugin  # noqa: F401
    except ImportError:
        raise InputFileError(ds.file.filename, f"{ds.name} is compressed with a filter HDF5 does not have "
                                               "here; install hdf5plugin (pip install hdf5plugin)") from None


def open_h5(path: str | os.PathLike | ByteStore, mode: str = "r", driver: str | None = None,
            comm=None, kept_metadata: bool = True, **kw) -> h5py.File:
    """Open an HDF5 file (a location, or a store held open), turning every failure into one clear InputFileError;
    the metadata of bytes behind a URL as an earlier run kept them (``kept_metadata``), or read afresh."""
    if mode == "r":
        store = path if isinstance(path, ByteStore) else checked_store(path)
        if store.c_openable_path is None:   # (HDF5 opens a local file by name; other bytes through a file object)
            from .metadata import open_store_h5

            return open_store_h5(store, True, None, kw.get("rdcc_nbytes", 1024**2), kept_metadata)[1]
        if store is not path:
            store.close()
        elif not store.size:   # (a caller's store: its file, unlike a path, was never checked for bytes)
            raise InputFileError(Path(store.c_openable_path), "file is empty")
        path = store.c_openable_path
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
            # HDF5 shares one open file per process, open here with the other locking: reuse it as it is
            return h5py.File(str(p), mode, **{**kw, "locking": kw.get("locking", True) is False})
    except OSError as exc:
        locked = lock_problem(exc)
        short = None if locked else _cut_short(p, exc)
        if mode != "r":   # a file to write: the folder or the disk is at fault, not the file's contents
            raise OutputError(p, locked or (short.cut if short else f"cannot create or write it "
                                                                     f"({_os_reason(exc)})")) from None
        if short is not None:
            raise short from None
        raise InputFileError(p, locked or f"cannot open as HDF5 ({_short(exc)}); the file may be truncated") from None


def cover_allocated(f: h5py.File, grown: int = 0, comm=None, path: str | None = None) -> tuple[int, int] | None:
    """Extend the file of ``f`` to the end of the space HDF5 has allocated in it, if it is shorter.

    A flush writes the superblock (the allocated size) before it extends the file: a process killed in between
    leaves a file HDF5 refuses to open ("truncated file"). Extended first, it never is.

    Under ``mpio`` HDF5 does not tell the allocated end, so ``grown`` (storage given since the last flush)
    bounds it: rank 0 extends the file (at ``path`` if renamed) by that and room for metadata, every rank waits.
    Returns the sizes before and after for :func:`trim_cover`; None when nothing grew."""
    if f.driver == "sec2":
        end, fd = allocated_end(f), f.id.get_vfd_handle()   # (the file itself, whatever its name now)
        if end is not None and os.fstat(fd).st_size < end:
            os.ftruncate(fd, end)
    elif f.driver == "mpio" and grown > 0:
        cover = None
        room = 2 * f.id.get_access_plist().get_meta_block_size() + 2**20   # (collective: dups the comm)
        if comm is None or comm.Get_rank() == 0:
            path = path or f.filename
            before = os.stat(path).st_size
            cover = before, before + grown + room
            os.truncate(path, cover[1])
        if comm is not None:
            comm.Barrier()
        return cover
    return None


def trim_cover(path: str, cover: tuple[int, int] | None) -> None:
    """After the flush: cut what :func:`cover_allocated` added that HDF5 did not (to the larger of old and new)."""
    if cover is None:
        return
    before, extended = cover
    end, size = stored_size(path)
    if size == extended and end is not None and end < extended:
        os.truncate(path, max(before, end))


def allocated_end(f: h5py.File) -> int | None:
    """The end of HDF5's allocated space in ``f``'s file (``H5Fget_eoa``, unwrapped by h5py; None if unavailable)."""
    get_eoa = _h5fget_eoa()
    if get_eoa is None:
        return None
    import ctypes

    eoa = ctypes.c_uint64()
    return eoa.value if get_eoa(f.id.id, ctypes.byref(eoa)) >= 0 else None


@functools.cache
def _h5fget_eoa():
    """``H5Fget_eoa`` of the libhdf5 this process has loaded (h5py's), or None where it is not found."""
    import ctypes

    try:
        with open("/proc/self/maps") as maps:   # (Linux: the library's path, whatever h5py's build named it)
            paths = {line.split()[-1] for line in maps if "/libhdf5" in line}
    except OSError:
        return None
    for path in sorted(paths):
        name = os.path.basename(path)
        if name.startswith("libhdf5") and ".so" in name and "_hl" not in name:
            try:
                fn = ctypes.CDLL(path).H5Fget_eoa   # (the library already loaded: the same one, not another)
            except (OSError, AttributeError):
                continue
            fn.argtypes, fn.restype = [ctypes.c_int64, ctypes.POINTER(ctypes.c_uint64)], ctypes.c_int
            return fn
    return None


def _cut_short(p: Path, exc: OSError) -> CutShortError | None:
    """The error of a failed open of a file shorter than its superblock records (None otherwise), with the
    hint that ``trajscale repair`` mends the H5MD file a killed writer left so."""
    if "truncated file" not in str(exc):
        return None
    try:
        with open(p, "rb") as fh:
            said = cut_short(fh.read(64), os.fstat(fh.fileno()).st_size)
    except OSError:
        return None
    if said is None:
        return None
    return CutShortError(p, said, f"; `trajscale repair {p}` extends a writer's H5MD file so and keeps its "
                                  "complete frames")


def opens_collectively(store: ByteStore) -> bool:
    """Whether MPI ranks may open the file in ``store`` together (HDF5's MPI-IO driver opens a file by its path)."""
    return store.c_openable_path is not None


def checked_store(path: str | os.PathLike) -> ByteStore:
    """The store of ``path``, a local file first checked (missing, a folder or empty, said as such)."""
    check_input_file(path)
    return Location(path).store()


#: HDF5's words when a file this process has open is opened again with other file locking.
LOCKING_MISMATCH = "file locking flag values don't match"

#: errno values HDF5's file lock fails with on file systems that have no locks (NFS without lockd: ENOLCK;
#: Lustre and others mounted without flock: ENOSYS, EOPNOTSUPP).
NO_LOCKS = {37, 38, 95}


def lock_problem(exc: OSError) -> str | None:
    """What a failed open says when HDF5's file lock is at fault (held by a writer, or a file system without locks)."""
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
