"""Uncompressed frames read at their byte addresses, without HDF5's per-call work.

An uncompressed float32 ``(n_frames, n_atoms, 3)`` dataset whose chunks hold
whole frames (or a contiguous one) stores frame ``f`` at a fixed address:
``chunk address + (f % chunk_frames) * frame bytes``.  HDF5 gives each chunk's
address once (``H5Dget_chunk_info_by_coord``); after that a compiled loop
``pread``\\ s each frame's atom runs into a row buffer that stays in cache and
gathers the selected atoms from it while it is there.  HDF5 reading the same
span moves it through a slab buffer in memory first, and a gather from that
slab costs as much again (docs/benchmarks.md measures both paths).

The file stays an ordinary HDF5 file; only reads of eligible datasets take
this path, and every other case (compressed, unallocated chunks, chunks that
split a frame, another driver, a short read) goes through HDF5 as before.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict

import h5py
import numpy as np

from ..storage.pread import pread_gather

log = logging.getLogger(__name__)

_NATIVE_F32 = np.dtype("float32").newbyteorder("=")
#: Chunk addresses looked up in this process, by (device, inode, size, mtime_ns, dataset):
#: a session's repeated runs on a file skip the lookups; a rewritten file is looked up anew.
_ADDRESSES: OrderedDict[tuple, np.ndarray] = OrderedDict()
ADDRESSES_MAX = 64


def ineligible(ds: h5py.Dataset) -> str | None:
    """Why rows of ``ds`` are not at fixed byte addresses (for reads and writes alike), or None.

    Rows must be numbers in native byte order, in the file's own storage
    (not virtual or external) of a plain file (no MPI-IO or other driver, no
    userblock), unfiltered, in chunks that hold whole rows (or contiguous).
    """
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


def chunk_address(ds: h5py.Dataset, chunk: int) -> int | None:
    """File offset of ``ds``'s ``chunk``-th chunk along rows (its storage if contiguous); None if never written."""
    if ds.chunks is None:
        return ds.id.get_offset()
    return ds.id.get_chunk_info_by_coord((chunk * ds.chunks[0],) + (0,) * (ds.ndim - 1)).byte_offset


def row_offsets(addresses: np.ndarray, chunk_rows: int, row_bytes: int, rows: np.ndarray) -> np.ndarray:
    """File offset of each row in ``rows``, given the address of every chunk of ``chunk_rows`` rows."""
    chunk = rows // chunk_rows
    return addresses[chunk] + (rows - chunk * chunk_rows) * row_bytes


class DirectReads:
    """Reads frames of one eligible dataset with ``pread`` at their byte addresses.

    Use :meth:`of`, which returns None for a dataset this cannot read exactly.
    """

    def __init__(self, ds: h5py.Dataset, path: str, n_frames: int | None = None) -> None:
        self._ds = ds
        self._path = path
        self._checked: bool | None = None   # None: not compared with HDF5 yet; then whether it agreed
        rows, n_atoms, _ = ds.shape
        # the frames read (rows a writer reserved past them are never read: no address kept for them)
        n_frames = self._n_frames = rows if n_frames is None else min(rows, n_frames)
        self._frame_bytes = n_atoms * 3 * 4
        self._chunk_frames = max(1, n_frames) if ds.chunks is None else ds.chunks[0]
        self._fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        self._rows = threading.local()   # a row buffer per thread (Dask runs tasks in threads)
        st = os.fstat(self._fd)
        # the shape too: a file being written can show two extents within one mtime tick and size
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, ds.name, n_frames)
        self._addresses = _ADDRESSES.get(key)
        if self._addresses is None:   # -1: not looked up yet; -2: never written (HDF5 gives its fill value)
            self._addresses = np.full(-(-n_frames // self._chunk_frames), -1, dtype=np.int64)
            _ADDRESSES[key] = self._addresses
            while len(_ADDRESSES) > ADDRESSES_MAX:
                _ADDRESSES.popitem(last=False)
        _ADDRESSES.move_to_end(key)

    @classmethod
    def of(cls, ds: h5py.Dataset, path: str, n_frames: int | None = None) -> DirectReads | None:
        """A reader for the first ``n_frames`` (default: all) of ``ds``, or None when only HDF5 can read it exactly."""
        if ds.ndim != 3 or ds.shape[2] != 3 or ds.dtype != _NATIVE_F32:
            return None
        if ineligible(ds) or (ds.chunks is None and chunk_address(ds, 0) is None):   # (contiguous, never written)
            return None
        try:
            return cls(ds, path, n_frames)
        except OSError:
            return None

    def ready(self) -> bool:
        """True when reads take this path (the file is open and its addresses gave HDF5's values)."""
        if self._fd < 0:
            return False
        if self._checked is None:
            self._checked = self._agrees_with_hdf5()
            if not self._checked:
                log.debug("%s: %s: addresses do not give HDF5's values; reading through HDF5",
                          self._path, self._ds.name)
        return self._checked

    def _agrees_with_hdf5(self) -> bool:
        """One frame's first atoms read both ways must be the same bytes (addresses are HDF5's to define)."""
        if not self._n_frames or not self._ds.shape[1]:
            return False
        frame = self._n_frames - 1
        width = min(self._ds.shape[1], 64)
        mine = np.empty((1, width, 3), np.float32)
        if not self._read(frame, 1, 1, np.array([[0, width]]), None, mine):
            return False
        theirs = self._ds[frame:frame + 1, :width]
        return mine.tobytes() == theirs.tobytes()

    def _frame_offsets(self, start: int, n: int, stride: int) -> np.ndarray | None:
        """File offset of each frame ``start + i * stride``; None if a chunk was never written."""
        frames = start + stride * np.arange(n, dtype=np.int64)
        chunk = frames // self._chunk_frames
        addr = self._addresses
        for c in np.unique(chunk[addr[chunk] == -1]).tolist():   # once per chunk and file, not per read
            at = chunk_address(self._ds, c)
            addr[c] = -2 if at is None else at
        if (addr[chunk] < 0).any():
            return None
        return row_offsets(addr, self._chunk_frames, self._frame_bytes, frames)

    def read(self, start: int, n: int, stride: int, runs: np.ndarray, index: np.ndarray | None,
             out: np.ndarray) -> bool:
        """Frames ``start, start + stride, ...`` (``n`` of them), atom ``runs`` side by side, into ``out``.

        ``index`` (None: ``out`` takes the runs as read) picks columns of the runs.
        Returns False, having read nothing usable, when HDF5 must read instead.
        """
        if not self.ready():
            return False
        return self._read(start, n, stride, runs, index, out)

    def _read(self, start: int, n: int, stride: int, runs: np.ndarray, index: np.ndarray | None,
              out: np.ndarray) -> bool:
        offsets = self._frame_offsets(start, n, stride)
        if offsets is None:
            return False
        widths = runs[:, 1] - runs[:, 0]
        table = np.stack([runs[:, 0] * 12, np.r_[0, np.cumsum(widths)[:-1]], widths], axis=1).astype(np.int64)
        if index is None:
            index = np.zeros(0, np.int64)
            row = np.zeros((0, 3), np.float32)
        else:
            index = np.ascontiguousarray(index, dtype=np.int64)
            row = self._row(int(widths.sum()))
        failed = pread_gather(self._fd, offsets, np.ascontiguousarray(table), index, row, out)
        if failed >= 0:
            log.debug("%s: short read at frame %d; reading through HDF5", self._path, start + failed * stride)
            return False
        return True

    def _row(self, n_columns: int) -> np.ndarray:
        row = getattr(self._rows, "buf", None)
        if row is None or len(row) < n_columns:
            row = self._rows.buf = np.empty((n_columns, 3), np.float32)
        return row[:n_columns]

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:   # noqa: BLE001 - a finalizer never raises: it may run during interpreter shutdown
            pass
