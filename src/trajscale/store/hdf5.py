"""Opening HDF5 files, with every failure turned into one clear error."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import h5py

from ..errors import InputFileError
from ..util import check_input_file


@functools.cache
def register_plugin_filters() -> bool:
    """Make hdf5plugin's filters (Blosc, Zstd, ...) known to HDF5, if it is installed."""
    try:
        import hdf5plugin  # noqa: F401 - importing registers the filters
    except ImportError:
        return False
    return True


def open_h5(path: str | os.PathLike, mode: str = "r", driver: str | None = None,
            comm=None, **kw) -> h5py.File:
    """Open an HDF5 file, turning every failure into one clear InputFileError."""
    p = Path(path)
    if mode == "r":
        check_input_file(p)
        if not h5py.is_hdf5(str(p)):
            raise InputFileError(p, "not an HDF5 file (wrong format, or truncated before its superblock)")
    register_plugin_filters()   # a Blosc/Zstd file reads like any other
    if driver == "mpio":
        kw.update(driver="mpio", comm=comm)
    elif driver:
        kw["driver"] = driver
    try:
        return h5py.File(str(p), mode, **kw)
    except OSError as exc:
        raise InputFileError(p, f"cannot open as HDF5 ({_short(exc)}); the file may be truncated") from None


def _short(exc: BaseException) -> str:
    msg = str(exc)
    return msg.split("(", 1)[0].strip() if "errno" in msg else msg.splitlines()[0]
