"""Frames written at their byte addresses with ``pwrite``: many writers, one file, no HDF5 in the writers.

The mirror of :mod:`trajscale.store.direct`.  A dataset that is uncompressed
(no filter at all), whose chunks hold whole rows (frames; or a contiguous
dataset) and whose storage was allocated when it was created
(``ALLOC_TIME_EARLY``, fixed length) keeps row ``f`` at a fixed address:
``chunk address + (f % chunk rows) * row bytes``.  The process that prepares a
job creates such a file, closes it and takes every chunk's address once
(:func:`plan_writes`, checked against HDF5's own read); workers then write
their rows' bytes there (:class:`DirectWrites`) without opening the file in
HDF5.  No HDF5 metadata changes after the file was made, so workers writing
disjoint frames at once cannot corrupt it, and no segment files need joining.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from dataclasses import dataclass

import h5py
import numpy as np

from ..errors import OutputError

log = logging.getLogger(__name__)


def _kernel():
    try:
        from ._numba_pwrite import pwrite_rows
    except ImportError:   # no numba: outputs are written through HDF5
        return None
    return pwrite_rows


def available() -> bool:
    """True where the compiled ``pwrite`` loop can be used (numba installed; not imported here, so
    the process that only plans a job does not pay for loading it)."""
    return importlib.util.find_spec("numba") is not None


@dataclass(frozen=True)
class RowTarget:
    """Where the rows of one dataset live in the file: plain values, sent to workers.

    Attributes
    ----------
    name
        The dataset's path in the file.
    n_rows, row_bytes
        Rows (frames) of the dataset and the bytes of one.
    chunk_rows
        Rows per stored chunk (all rows for a contiguous dataset).
    addresses
        File offset of each chunk, in row order (one for a contiguous dataset).
    dtype
        The stored type (``numpy.dtype.str``): rows are written as its bytes.
    """

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


def ineligible(ds: h5py.Dataset) -> str | None:
    """Why rows of ``ds`` cannot be written at fixed addresses, or None when they can."""
    if ds.ndim < 1 or ds.dtype.kind not in "biuf" or not ds.dtype.isnative:
        return "not numbers in native byte order"
    if ds.is_virtual or ds.external:
        return "virtual or external storage"
    if ds.file.driver != "sec2" or ds.file.userblock_size:
        return f"file driver {ds.file.driver}"
    if ds.id.get_create_plist().get_nfilters():
        return "filtered (compressed) storage"
    if ds.chunks is not None and ds.chunks[1:] != ds.shape[1:]:
        return "chunks that split a row"
    return None


def _addresses(ds: h5py.Dataset) -> np.ndarray | None:
    if ds.chunks is None:
        off = ds.id.get_offset()
        return None if off is None else np.array([off], np.int64)
    cr = ds.chunks[0]
    n_chunks = -(-ds.shape[0] // cr)
    out = np.empty(n_chunks, np.int64)
    zeros = (0,) * (ds.ndim - 1)
    for c in range(n_chunks):   # once per chunk, by the preparing process only
        info = ds.id.get_chunk_info_by_coord((c * cr, *zeros))
        if info.byte_offset is None:
            return None
        out[c] = info.byte_offset
    return out


def plan_writes(path: str | os.PathLike, names: list[str], probe: bool = True) -> dict[str, RowTarget]:
    """The row addresses of datasets ``names`` of the closed file ``path`` (keyed by absolute name).

    With ``probe`` (for a file no worker has written yet) each dataset's last
    row is written with a pattern at its computed address and read back
    through HDF5, then given its bytes back: addresses are HDF5's to define, so
    a layout this module misreads fails here, before any worker writes.  A
    resumed file was probed when it was made, and its counted rows are left
    untouched.  Raises :class:`OutputError` for a dataset that is not eligible
    (:func:`ineligible`) or whose storage was not allocated.
    """
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


class DirectWrites:
    """Writes rows of planned datasets with ``pwrite`` at their addresses (a worker's side).

    Parameters
    ----------
    path
        The file :func:`plan_writes` planned (never opened in HDF5 here).
    targets
        Its result.
    """

    def __init__(self, path: str | os.PathLike, targets: dict[str, RowTarget]) -> None:
        self._kernel = _kernel()
        if self._kernel is None:
            raise OutputError(path, "direct writes need numba")
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
        failed = self._kernel(self._fd, t.offsets(start, len(rows)), data)
        if failed >= 0:
            err = OSError(f"pwrite failed at row {start + failed}")
            raise OutputError(self.path, f"{name}: {err}")

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
        try:
            self.close()
        except Exception:   # interpreter shutdown
            pass
