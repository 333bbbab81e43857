"""Frames written at their byte addresses with ``pwrite``: many writers, one file, no HDF5 in the writers.

An unfiltered dataset whose chunks hold whole rows and whose storage was allocated at creation keeps row ``f`` at
``chunk address + (f % chunk rows) * row bytes``. No metadata changes after the file was made, so workers
writing disjoint frames cannot corrupt it.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass

import h5py
import numpy as np

from ..errors import OutputError
from ..hdf5.chunks import NEVER_WRITTEN, chunk_info
from ..hdf5.chunks import ineligible as unreadable

log = logging.getLogger(__name__)


def ineligible(ds: h5py.Dataset) -> str | None:
    """Why rows of ``ds`` cannot be written at fixed byte addresses, or None."""
    why = unreadable(ds)
    if why:
        return why
    if not ds.dtype.isnative:
        return "not numbers in native byte order"
    if ds.file.driver != "sec2":
        return f"file driver {ds.file.driver}"
    if ds.id.get_create_plist().get_nfilters():
        return "filtered (compressed) storage"
    if ds.chunks is not None and ds.chunks[1:] != ds.shape[1:]:
        return "chunks that split a row"
    return None


def available() -> bool:
    """True where rows can be written at byte addresses (POSIX ``pwrite``)."""
    return hasattr(os, "pwrite")


@dataclass(frozen=True)
class RowTarget:
    """Where the rows of one dataset live in the file, as plain values sent to workers: ``chunk_rows`` rows per
    chunk (all rows when contiguous) at ``addresses`` (one per chunk, in row order), each row ``row_bytes`` of
    the stored type ``dtype`` (``numpy.dtype.str``)."""

    name: str
    n_rows: int
    row_bytes: int
    chunk_rows: int
    addresses: np.ndarray
    dtype: str

    def offsets(self, start: int, n: int) -> np.ndarray:
        """File offset of rows ``start .. start + n - 1``."""
        rows = start + np.arange(n, dtype=np.int64)
        chunk = rows // self.chunk_rows
        return self.addresses[chunk] + (rows - chunk * self.chunk_rows) * self.row_bytes


def _addresses(ds: h5py.Dataset) -> np.ndarray | None:
    """Every chunk's address, in row order (once per chunk, by the preparing process); None if one is unallocated."""
    if ds.chunks is None:
        off = ds.id.get_offset()
        return None if off is None else np.array([off], np.int64)
    out = [chunk_info(ds, (c * ds.chunks[0],) + (0,) * (ds.ndim - 1))[0]
           for c in range(-(-ds.shape[0] // ds.chunks[0]))]
    return None if NEVER_WRITTEN in out else np.array(out, np.int64)


def plan_writes(path: str | os.PathLike, names: list[str], probe: bool = True) -> dict[str, RowTarget]:
    """The row addresses of datasets ``names`` of the closed file ``path`` (keyed by absolute name).

    With ``probe`` (a file no worker has written yet) each dataset's last row is written with a pattern at its
    address and read back through HDF5, then restored: a misread layout fails here, before any worker writes.
    Raises :class:`OutputError` for a dataset not eligible or whose storage was not allocated."""
    targets: dict[str, RowTarget] = {}
    with h5py.File(path, "r") as f:
        for name in names:
            ds = f[name]
            why = ineligible(ds)
            addr = None if why else _addresses(ds)
            if why is None and addr is None:
                why = "storage not allocated"
            if why:
                raise OutputError(path, f"{name}: rows cannot be written at fixed addresses ({why})")
            if not ds.shape[0]:
                continue
            row_bytes = int(np.prod(ds.shape[1:], dtype=np.int64)) * ds.dtype.itemsize
            chunk_rows = ds.shape[0] if ds.chunks is None else ds.chunks[0]
            targets[ds.name] = RowTarget(ds.name, ds.shape[0], row_bytes, chunk_rows, addr, ds.dtype.str)
    bad = _probe(path, targets) if probe else []
    if bad:
        raise OutputError(path, f"{bad[0]}: a row written at its computed address did not read back through "
                                "HDF5")
    return targets


def _probe(path: str | os.PathLike, targets: dict[str, RowTarget]) -> list[str]:
    """The datasets whose last row, written at its computed address, HDF5 does not read back."""
    fd = os.open(path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
    kept = {}
    try:
        for t in targets.values():
            at = int(t.offsets(t.n_rows - 1, 1)[0])
            kept[t.name] = (at, os.pread(fd, t.row_bytes, at))
            os.pwrite(fd, _pattern(t.row_bytes), at)
        with h5py.File(path, "r") as f:
            bad = [n for n, t in targets.items() if f[n][t.n_rows - 1].tobytes() != _pattern(t.row_bytes)]
    finally:
        for at, data in kept.values():   # the row's own bytes back
            os.pwrite(fd, data, at)
        os.close(fd)
    return bad


def _pattern(n: int) -> bytes:
    """``n`` bytes no fill value looks like (no zero byte)."""
    return (np.arange(n, dtype=np.int64) % 251 + 1).astype(np.uint8).tobytes()


def _writeback_starter():
    """``start(fd, offset, nbytes)``: begin writing dirty pages back now (Linux ``sync_file_range``); else a no-op."""
    import ctypes
    import sys

    fn = getattr(ctypes.CDLL(None, use_errno=True), "sync_file_range", None) if sys.platform == "linux" else None
    if fn is None:
        return lambda fd, offset, nbytes: None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return lambda fd, offset, nbytes: fn(fd, offset, nbytes, 2)   # 2: SYNC_FILE_RANGE_WRITE


_start_writeback = _writeback_starter()


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    """All of ``data`` at ``offset`` (a short write is continued; an error raises OSError)."""
    while len(data):
        done = os.pwrite(fd, data, offset)
        if done <= 0:
            raise OSError(f"pwrite wrote nothing at byte {offset}")
        data, offset = data[done:], offset + done


class DirectWrites:
    """Writes rows of the datasets :func:`plan_writes` planned with ``pwrite`` at their addresses, never opening the
    file in HDF5 (a worker's side; no compiled loop: a slab's rows are mostly one run of adjacent addresses)."""

    def __init__(self, path: str | os.PathLike, targets: dict[str, RowTarget]) -> None:
        self.path = str(path)
        self.targets = targets
        self._fd = os.open(path, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))

    def write(self, name: str, start: int, rows: np.ndarray) -> None:
        """Rows ``start .. start + len(rows) - 1`` of dataset ``name`` (converted to its stored type)."""
        if not len(rows):
            return
        t = self.targets[name if name.startswith("/") else "/" + name]   # keyed by absolute names
        if start < 0 or start + len(rows) > t.n_rows:
            raise ValueError(f"{name}: rows {start}-{start + len(rows)} outside its {t.n_rows}")
        data = np.ascontiguousarray(rows, dtype=np.dtype(t.dtype)).reshape(len(rows), -1).view(np.uint8)
        if data.shape[1] != t.row_bytes:
            raise ValueError(f"{name}: rows of {data.shape[1]} bytes, the dataset's are {t.row_bytes}")
        offsets = t.offsets(start, len(rows))
        # one call per run of adjacent rows, usually one per slab
        cuts = [0, *(np.flatnonzero(np.diff(offsets) != t.row_bytes) + 1).tolist(), len(rows)]
        flat = memoryview(data.reshape(-1))
        for a, b in zip(cuts[:-1], cuts[1:], strict=False):
            try:
                _pwrite_all(self._fd, flat[a * t.row_bytes:b * t.row_bytes], int(offsets[a]))
                # the disk starts on these pages while the worker decodes the next slab (a hint)
                _start_writeback(self._fd, int(offsets[a]), (b - a) * t.row_bytes)
            except OSError as exc:
                raise OutputError(self.path, f"{name}: writing rows {start + a}-{start + b - 1} failed "
                                             f"({exc.strerror or exc})") from None

    def sync(self) -> None:
        """The rows written so far are on disk (``fdatasync``) before anyone counts them."""
        os.fdatasync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> DirectWrites:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):   # a finalizer never raises: it may run during interpreter shutdown
            self.close()
