"""Opening HDF5 files, with every failure turned into one clear error."""

from __future__ import annotations

import os
from pathlib import Path

import h5py

from ..errors import InputFileError
from ..util import check_input_file


def open_h5(path: str | os.PathLike, mode: str = "r", driver: str | None = None,
            comm=None, **kw) -> h5py.File:
    """Open an HDF5 file, turning every failure into one clear InputFileError."""
    p = Path(path)
    if mode == "r":
        check_input_file(p)
        if not h5py.is_hdf5(str(p)):
            raise InputFileError(p, "not an HDF5 file (wrong format, or truncated before its superblock)")
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
