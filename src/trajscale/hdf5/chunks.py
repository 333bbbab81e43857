"""The one chunk reader of H5MD: a dataset's frames read at its chunks' byte addresses, from any byte store.

:class:`ChunkIndex` holds every chunk's byte address, stored size and filter mask as HDF5 gives them
(``H5Dget_chunk_info_by_coord``), looked up as the chunks are met, once per process and file version
(:func:`chunk_index`). A process preparing a run on a URL looks them all up (:meth:`ChunkIndex.to_config`) and
ships them in the Source's config, so workers never walk HDF5's B-tree over the network.

:class:`ChunkReads` executes the read plan against any :class:`~trajscale.storage.bytestore.ByteStore`:

* whole-frame unfiltered chunks, or contiguous storage: each frame's runs at ``chunk address + frame offset +
  atom offset``, by the compiled gather on a local descriptor (:mod:`trajscale.storage.pread`), else by
  coalesced concurrent ranges (:func:`read_coalesced`);
* any other chunk: the whole stored chunk, decoded: Blosc straight into the buffer (:mod:`.blosc`), any other
  filter by HDF5's own pipeline on an in-memory dataset (:class:`ChunkDecoder`).

A chunk never written (HDF5 gives its fill value) or a short read is left to HDF5: the read returns False.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..block import sorted_unique
from ..storage.bytestore import ByteStore
from ..storage.pread import pread_gather
from ..storage.ranges import MERGE_GAP, prefetch_coalesced, read_coalesced
from ..util import LRU
from .blosc import blosc_decompressor

if TYPE_CHECKING:   # (imported where HDF5 itself is used: a read at known offsets needs none of it)
    import h5py

log = logging.getLogger(__name__)

__all__ = ["MAX_REQUEST", "MERGE_GAP", "NEVER_WRITTEN", "ChunkDecoder", "ChunkIndex", "ChunkReads", "chunk_index",
           "chunk_info", "ineligible", "make_decoder", "stored_chunks"]

#: A merged request is cut at this size, so one large read still goes out as several concurrent ones.
MAX_REQUEST = 8 * 1024**2
#: A chunk's offset when it was never written (HDF5 gives its fill value), and when it is not looked up yet.
NEVER_WRITTEN = -1
NOT_LOOKED_UP = -2
#: Atoms of one frame read both ways (HDF5 and the addresses) before the addresses are trusted.
CHECK_ATOMS = 64

_NATIVE_F32 = np.dtype("float32").newbyteorder("=")
#: the compiled gather's arguments for runs read straight into the rows (no column index)
_NO_COLUMNS, _NO_ROW = np.zeros(0, np.int64), np.zeros((0, 3), np.float32)
_decoder_ids = itertools.count()


def ineligible(ds: h5py.Dataset) -> str | None:
    """Why rows of ``ds`` cannot be read (or written) at their chunks' byte addresses, or None."""
    if ds.ndim < 1 or ds.dtype.kind not in "biuf":
        return "not numbers"
    if ds.is_virtual or ds.external:
        return "virtual or external storage"
    if ds.file.userblock_size:
        return "a userblock before HDF5's addresses"
    return None


def chunk_info(ds: h5py.Dataset, coord: tuple[int, ...]) -> tuple[int, int, int]:
    """(byte offset, stored size, filter mask) of the chunk at ``coord``; offset :data:`NEVER_WRITTEN` if unwritten."""
    try:
        info = ds.id.get_chunk_info_by_coord(coord)
    except (KeyError, ValueError, RuntimeError, OSError):
        return NEVER_WRITTEN, 0, 0
    if info is None or info.byte_offset is None:
        return NEVER_WRITTEN, 0, 0
    return int(info.byte_offset), int(info.size), int(info.filter_mask)


def stored_chunks(ds: h5py.Dataset, most: int) -> list[tuple[int, int, int]]:
    """:func:`chunk_info` of every written chunk of ``ds``; none when its grid has more than ``most`` chunks."""
    grid = [-(-s // c) if s else 0 for s, c in zip(ds.shape, ds.chunks, strict=True)]
    if int(np.prod(grid)) > most:
        return []
    found = (chunk_info(ds, tuple(k * c for k, c in zip(key, ds.chunks, strict=True)))
             for key in itertools.product(*(range(g) for g in grid)))
    return [info for info in found if info[0] >= 0]


@dataclass(eq=False)
class ChunkIndex:
    """Where every chunk of one ``(frames, atoms, 3)`` dataset is stored.

    ``chunks`` is None for contiguous storage. ``offsets``, ``sizes`` and ``masks`` are over the chunk grid in C
    order; an offset is :data:`NEVER_WRITTEN` or ``NOT_LOOKED_UP`` (:meth:`locate` looks it up)."""

    shape: tuple[int, int, int]
    chunks: tuple[int, int, int] | None
    dtype: str
    filtered: bool
    offsets: np.ndarray
    sizes: np.ndarray
    masks: np.ndarray
    #: True once one frame read at these addresses gave HDF5's values; None: not compared yet.
    checked: bool | None = None

    def __post_init__(self) -> None:
        self.shape = tuple(int(s) for s in self.shape)
        self.chunks = None if self.chunks is None else tuple(int(c) for c in self.chunks)
        self.offsets = np.asarray(self.offsets, dtype=np.int64).copy()
        self.sizes = np.asarray(self.sizes, dtype=np.int64).copy()
        self.masks = np.asarray(self.masks, dtype=np.int64).copy()
        self._lock = threading.Lock()

    @property
    def grid(self) -> tuple[int, int, int]:
        if self.chunks is None:
            return (1, 1, 1)
        return tuple(-(-s // c) if s else 0 for s, c in zip(self.shape, self.chunks, strict=True))

    @property
    def whole_frames(self) -> bool:
        """True when a frame's bytes are at one place: contiguous, or unfiltered chunks holding whole frames."""
        return self.chunks is None or (not self.filtered and tuple(self.chunks[1:]) == tuple(self.shape[1:]))

    @property
    def frame_chunks(self) -> bool:
        """True when every chunk holds whole frames (a chunk is a run of frames, whatever its filters)."""
        return self.chunks is not None and tuple(self.chunks[1:]) == tuple(self.shape[1:])

    @property
    def complete(self) -> bool:
        return not (self.offsets == NOT_LOOKED_UP).any()

    @classmethod
    def of(cls, ds: h5py.Dataset, n_frames: int | None = None, lazy: bool = False) -> ChunkIndex | None:
        """The index of ``ds``'s first ``n_frames`` rows, looked up now unless ``lazy``; None if not readable so."""
        if ds.ndim != 3 or ineligible(ds):
            return None
        rows = ds.shape[0] if n_frames is None else min(ds.shape[0], n_frames)
        shape = (rows, ds.shape[1], ds.shape[2])
        if ds.chunks is None:
            off = ds.id.get_offset()
            if off is None:   # (contiguous, never written)
                return None
            return cls(shape, None, ds.dtype.str, False, [int(off)], [int(ds.id.get_storage_size())], [0])
        filtered = ds.id.get_create_plist().get_nfilters() > 0
        index = cls(shape, ds.chunks, ds.dtype.str, filtered, [], [], [])
        n = int(np.prod(index.grid))
        index.offsets = np.full(n, NOT_LOOKED_UP, np.int64)
        index.sizes = np.zeros(n, np.int64)
        index.masks = np.zeros(n, np.int64)
        if not lazy:
            index.locate(ds, np.arange(n))
        return index

    def locate(self, ds: h5py.Dataset | None, flat: np.ndarray) -> bool:
        """Look up the chunks ``flat`` not looked up yet, through ``ds``; True when every one was written."""
        offsets = self.offsets
        todo = sorted_unique(flat[offsets[flat] == NOT_LOOKED_UP]) if len(flat) else flat
        if len(todo):
            if ds is None:
                return False
            grid, chunks = self.grid, self.chunks
            with self._lock:   # (threads of one process share a cached index)
                for f in todo.tolist():
                    coord = tuple(int(k) * c for k, c in zip(np.unravel_index(f, grid), chunks, strict=True))
                    self.offsets[f], self.sizes[f], self.masks[f] = chunk_info(ds, coord)
        return bool((offsets[flat] >= 0).all())

    def to_config(self, ds: h5py.Dataset | None = None) -> dict:
        """The index as plain values, every chunk looked up first (through ``ds``)."""
        if not self.complete:
            self.locate(ds, np.arange(len(self.offsets)))
        return {"shape": list(self.shape), "chunks": None if self.chunks is None else list(self.chunks),
                "dtype": self.dtype, "filtered": self.filtered, "offsets": self.offsets.tolist(),
                "sizes": self.sizes.tolist(), "masks": self.masks.tolist()}

    @classmethod
    def from_config(cls, cfg: dict) -> ChunkIndex:
        return cls(tuple(cfg["shape"]), None if cfg["chunks"] is None else tuple(cfg["chunks"]), cfg["dtype"],
                   bool(cfg["filtered"]), cfg["offsets"], cfg["sizes"], cfg["masks"], checked=True)


#: Chunk indexes made in this process, by (the bytes' identity, dataset, frames).
INDEXES_MAX = 64
_INDEXES = LRU(INDEXES_MAX)


def chunk_index(ds: h5py.Dataset, identity: tuple, n_frames: int | None = None) -> ChunkIndex | None:
    """The (lazy, kept) index of ``ds``'s first ``n_frames`` rows; None when not readable at chunk addresses."""
    key = (identity, ds.name, n_frames)   # (the extent too: a file being written shows several)
    if key not in _INDEXES:
        _INDEXES.put(key, ChunkIndex.of(ds, n_frames, lazy=True))
    return _INDEXES.get(key)


class ChunkDecoder:
    """Decodes a dataset's stored chunks with HDF5's filter pipeline, in memory (no file, no network)."""

    def __init__(self, dcpl, chunk_shape: tuple[int, ...], dtype: np.dtype) -> None:
        import h5py

        self.shape = tuple(chunk_shape)
        self.dtype = np.dtype(dtype)
        self._file = h5py.File(f"trajscale-decode-{next(_decoder_ids)}", "w", driver="core", backing_store=False)
        space = h5py.h5s.create_simple(self.shape)
        self._ds = h5py.h5d.create(self._file.id, b"c", h5py.h5t.py_create(self.dtype), space, dcpl=dcpl)
        self._all = h5py.h5s.ALL
        self._lock = threading.Lock()

    def decode(self, raw, mask: int, out: np.ndarray | None = None) -> np.ndarray:
        """The chunk stored as ``raw`` (with filter ``mask``), into ``out`` (a new array: None)."""
        out = np.empty(self.shape, self.dtype) if out is None else out
        with self._lock:
            self._ds.write_direct_chunk((0,) * len(self.shape), bytes(raw), mask)
            self._ds.read(self._all, self._all, out)
        return out

    def close(self) -> None:
        with contextlib.suppress(Exception):   # closing never raises
            self._file.close()


def make_decoder(ds: h5py.Dataset, index: ChunkIndex) -> Callable[[], ChunkDecoder]:
    """What makes the :class:`ChunkDecoder` of ``ds``'s chunks when the first filtered one is met."""
    return lambda: ChunkDecoder(ds.id.get_create_plist(), index.chunks, ds.dtype)


class ChunkReads:
    """Rows of one dataset read from its :class:`ChunkIndex` through a byte store.

    Parameters
    ----------
    store, index
        The file's bytes; where its chunks are.
    decoder_of
        Makes the :class:`ChunkDecoder` when a filtered chunk is first met (None: from ``dataset``).
    dataset
        The dataset as HDF5 opened it: looks up what a lazy index has not, and checks the addresses once
        (None: the index is complete and trusted).
    whole_chunks
        Read whole stored chunks here; False where HDF5 reads the bytes itself, whose pipeline and chunk cache
        are as fast and keep them (a Blosc chunk still decodes in place).
    check
        Compare one frame's first atoms with HDF5's read before using the addresses (:meth:`ready`); False
        where HDF5's read would itself be a round trip (a URL).
    """

    def __init__(self, store: ByteStore, index: ChunkIndex, decoder_of: Callable[[], ChunkDecoder] | None = None,
                 dataset: h5py.Dataset | None = None, whole_chunks: bool = True, check: bool = True) -> None:
        self.store = store
        self.index = index
        self.dataset = dataset
        self.whole_chunks = whole_chunks
        self.check = check
        self._decoder_of = decoder_of if decoder_of is not None or dataset is None else \
            make_decoder(dataset, index)
        self._decoder: ChunkDecoder | None = None
        self._blosc = None if dataset is None or not index.filtered else blosc_decompressor(dataset)
        # (the filter mask of a chunk whose every filter was skipped)
        self._raw_mask = 0 if dataset is None else (1 << dataset.id.get_create_plist().get_nfilters()) - 1
        self.dtype = np.dtype(index.dtype)
        self.merge_gap = store.merge_gap
        self._rows = threading.local()   # the gather's row buffer, one per thread (Dask runs tasks in threads)
        # the compiled gather needs native float32 xyz rows at fixed addresses
        self._gathers = index.whole_frames and self.dtype == _NATIVE_F32 and index.shape[2] == 3

    @property
    def decodes_in_place(self) -> bool:
        """True when a stored chunk decodes straight into the caller's buffer (Blosc; :meth:`read_chunk`)."""
        return self._blosc is not None

    def _frame_offsets(self, frames: np.ndarray) -> np.ndarray | None:
        """The byte offset of each frame (whole-frame layouts); None when a chunk was never written."""
        idx = self.index
        cf = max(1, idx.shape[0] if idx.chunks is None else idx.chunks[0])
        chunk = frames // cf
        if not idx.locate(self.dataset, chunk):
            return None
        return idx.offsets[chunk] + (frames - chunk * cf) * (idx.shape[1] * idx.shape[2] * self.dtype.itemsize)

    def _frame_ranges(self, runs, frames) -> list[tuple[int, int]] | None:
        """The byte range of every run of every frame, frame by frame (None: a chunk never written)."""
        row = self._frame_offsets(frames)
        if row is None:
            return None
        item = self.dtype.itemsize * self.index.shape[2]
        runs = np.asarray(runs, dtype=np.int64)
        starts = (row[:, None] + runs[None, :, 0] * item).ravel()
        stops = (row[:, None] + runs[None, :, 1] * item).ravel()
        return list(zip(starts.tolist(), stops.tolist(), strict=True))

    def _chunk_ranges(self, runs, frames):
        """(grid keys, flat indices, stored byte ranges) of the chunks holding ``runs`` of ``frames``."""
        idx = self.index
        cf, ca, _ = idx.chunks
        grid = idx.grid
        runs = np.asarray(runs, dtype=np.int64)
        lo, hi = int(runs[:, 0].min()), int(runs[:, 1].max())
        rows = sorted_unique(frames // cf).tolist()
        cols = list(range(lo // ca, (hi - 1) // ca + 1))
        keys = [(r, c, d) for r in rows for c in cols for d in range(grid[2])]
        flat = np.array([np.ravel_multi_index(k, grid) for k in keys], dtype=np.int64)
        if not idx.locate(self.dataset, flat):
            return keys, flat, None
        offsets, sizes = idx.offsets, idx.sizes
        return keys, flat, [(int(offsets[f]), int(offsets[f] + sizes[f])) for f in flat.tolist()]

    def ready(self) -> bool:
        """True when the addresses give HDF5's values (compared once, on one frame's first atoms)."""
        idx = self.index
        if idx.checked is None:
            idx.checked = self._agrees_with_hdf5() if self.check else True
            if not idx.checked:
                log.debug("%s: addresses do not give HDF5's values; reading through HDF5", self.dataset.name)
        return idx.checked

    def _agrees_with_hdf5(self) -> bool:
        """One frame's first atoms read at the computed addresses (whole-frame layouts) are HDF5's values."""
        ds, idx = self.dataset, self.index
        if ds is None or not idx.whole_frames or not idx.shape[0] or not idx.shape[1]:
            return True
        width = min(idx.shape[1], CHECK_ATOMS)
        mine = np.empty((1, width, idx.shape[2]), self.dtype)
        try:
            if not self._read_runs(np.array([[0, width]]), mine, 0, 1):
                return True   # (frame 0 never written: nothing to compare, and nothing is read at addresses)
        except OSError:
            return False
        return mine.tobytes() == np.ascontiguousarray(ds[0:1, :width], dtype=self.dtype).tobytes()

    def read(self, first: int, n: int, stride: int, runs: np.ndarray, columns: np.ndarray | None,
             out: np.ndarray) -> bool:
        """``n`` frames ``first::stride``: the atom ``runs`` side by side, then their ``columns`` (None: as read),
        into ``out`` in one call. False where the caller reads by :meth:`read_runs` or through HDF5."""
        if not n or not len(runs):
            return True
        if not self.ready():
            return False
        fd = self.store.descriptor() if self._gathers else None
        if fd is not None:
            return self._gather(fd, first, n, stride, runs, columns, out)
        if columns is not None:
            return self.read_gathered(runs, columns, out, first, stride)
        return False

    def read_frames(self, frames: np.ndarray, out: np.ndarray) -> bool:
        """Every atom of ``frames`` into ``out``'s rows in one compiled call on a local descriptor, else False."""
        if not len(frames):
            return True
        if not self._gathers or out.shape[1:] != tuple(self.index.shape[1:]) or not self.ready():
            return False
        fd = self.store.descriptor()
        if fd is None:
            return False
        idx, frames = self.index, np.asarray(frames, np.int64)
        if idx.chunks is None and idx.offsets[0] >= 0:   # (contiguous: every frame at a fixed stride)
            offsets = idx.offsets[0] + frames * (idx.shape[1] * idx.shape[2] * self.dtype.itemsize)
        else:
            offsets = self._frame_offsets(frames)
            if offsets is None:
                return False
        whole = np.array([[0, 0, out.shape[1]]], np.int64)   # (one run: every atom, straight into the row)
        return pread_gather(fd, offsets, whole, _NO_COLUMNS, _NO_ROW, out) < 0

    def read_runs(self, runs: np.ndarray, out: np.ndarray, first: int, stride: int) -> bool:
        """Rows ``first::stride`` of the atom ``runs``, side by side, into ``out``; False where HDF5 must read."""
        if not len(out) or not len(runs):
            return True
        return self.ready() and self._read_runs(runs, out, first, stride)

    def _read_runs(self, runs: np.ndarray, out: np.ndarray, first: int, stride: int) -> bool:
        n = len(out)
        fd = self.store.descriptor() if self._gathers else None
        if fd is not None:
            return self._gather(fd, first, n, stride, runs, None, out)
        frames = first + stride * np.arange(n, dtype=np.int64)
        if self.index.whole_frames:
            return self._by_ranges(runs, out, frames)
        return self.whole_chunks and self._by_chunks(runs, out, frames)

    def read_gathered(self, runs: np.ndarray, columns: np.ndarray, out: np.ndarray, first: int,
                      stride: int) -> bool:
        """Rows ``first::stride`` of ``columns`` of the one run ``runs`` holds, from each frame's bytes as they came (no
        run-wide buffer: its first touch cost more than the copy). False where :meth:`read_runs` must read."""
        if len(runs) != 1 or not self.index.whole_frames or not self.ready():
            return False
        ranges = self._frame_ranges(runs, first + stride * np.arange(len(out), dtype=np.int64))
        if ranges is None:
            return False
        views = read_coalesced(self.store, ranges, self.merge_gap, MAX_REQUEST)
        width, dtype = int(runs[0][1] - runs[0][0]), self.dtype
        for i, view in enumerate(views):
            np.take(np.frombuffer(view, dtype=dtype).reshape(width, -1), columns, axis=0, out=out[i], mode="clip")
        return True

    def read_chunk(self, k: int, out: np.ndarray) -> bool:
        """Whole-frame chunk ``k`` decoded into ``out`` (C-contiguous, a chunk's frames); False: HDF5 must read it."""
        idx = self.index
        if not idx.frame_chunks or not (out.flags.c_contiguous and len(out) >= idx.chunks[0]
                                        and out.shape[1:] == idx.chunks[1:] and out.dtype == self.dtype):
            raise ValueError("the chunk buffer must hold a whole chunk of frames, C-contiguous")
        if idx.offsets[k] == NOT_LOOKED_UP:
            idx.locate(self.dataset, np.array([k], dtype=np.int64))
        a, size = int(idx.offsets[k]), int(idx.sizes[k])
        if a < 0:
            return False
        raw = self._stored(a, a + size)
        return raw is not None and self._decode_into(raw, int(idx.masks[k]), out[:idx.chunks[0]])

    def _stored(self, a: int, b: int):
        """Bytes ``[a, b)`` of one stored chunk (None: a short read, left to HDF5)."""
        fd = self.store.descriptor()
        if fd is None:
            return read_coalesced(self.store, [(a, b)], -1, MAX_REQUEST)[0]
        data = os.pread(fd, b - a, a)
        return data if len(data) == b - a else None

    def prefetch_chunks(self, ks: list[int]) -> None:
        """Start fetching chunks ``ks`` for :meth:`read_chunk` (where the store reads ahead)."""
        flat = np.asarray(ks, dtype=np.int64)
        if len(flat) and self.index.locate(self.dataset, flat):
            a = self.index.offsets[flat]
            prefetch_coalesced(self.store, list(zip(a.tolist(), (a + self.index.sizes[flat]).tolist(),
                                                    strict=True)), -1, MAX_REQUEST)

    def prefetch(self, runs: np.ndarray, first: int, stride: int, n: int) -> None:
        """Start fetching what :meth:`read_runs` of ``n`` rows will read (where the store reads ahead)."""
        if not n or not len(runs) or not (self.index.whole_frames or self.whole_chunks):
            return
        frames = first + stride * np.arange(n, dtype=np.int64)
        if self.index.whole_frames:
            ranges, gap = self._frame_ranges(runs, frames), self.merge_gap
        else:
            ranges, gap = self._chunk_ranges(runs, frames)[2], 0
        if ranges is not None:
            prefetch_coalesced(self.store, ranges, gap, MAX_REQUEST)

    def _gather(self, fd: int, first: int, n: int, stride: int, runs: np.ndarray, columns: np.ndarray | None,
                out: np.ndarray) -> bool:
        """The compiled gather on a local descriptor: each frame's runs into a row, then ``columns``."""
        offsets = self._frame_offsets(first + stride * np.arange(n, dtype=np.int64))
        if offsets is None:
            return False
        runs = np.asarray(runs, dtype=np.int64)
        widths = runs[:, 1] - runs[:, 0]
        table = np.stack([runs[:, 0] * 12, np.cumsum(widths) - widths, widths], axis=1)
        if columns is None:
            columns, row = _NO_COLUMNS, _NO_ROW
        else:
            columns = np.ascontiguousarray(columns, dtype=np.int64)
            row = self._row(int(widths.sum()))
        failed = pread_gather(fd, offsets, np.ascontiguousarray(table), columns, row, out)
        if failed >= 0:
            log.debug("%s: short read at frame %d; reading through HDF5", self.store.identity[0],
                      first + failed * stride)
            return False
        return True

    def _row(self, n_columns: int) -> np.ndarray:
        row = getattr(self._rows, "buf", None)
        if row is None or len(row) < n_columns:
            row = self._rows.buf = np.empty((n_columns, 3), np.float32)
        return row[:n_columns]

    def _by_ranges(self, runs, out, frames) -> bool:
        ranges = self._frame_ranges(runs, frames)
        if ranges is None:
            return False
        runs = np.asarray(runs, dtype=np.int64)
        views = read_coalesced(self.store, ranges, self.merge_gap, MAX_REQUEST)
        widths = (runs[:, 1] - runs[:, 0]).tolist()
        offs = np.r_[0, np.cumsum(widths)[:-1]].tolist()
        k = 0
        dtype = self.dtype
        for i in range(len(frames)):
            for w, off in zip(widths, offs, strict=True):
                out[i, off:off + w] = np.frombuffer(views[k], dtype=dtype).reshape(w, -1)
                k += 1
        return True

    def _by_chunks(self, runs, out, frames) -> bool:
        idx = self.index
        cf, ca, c3 = idx.chunks
        keys, flat, ranges = self._chunk_ranges(runs, frames)
        if ranges is None:
            return False
        runs = np.asarray(runs, dtype=np.int64)
        rows = sorted({k[0] for k in keys})
        cols = sorted({k[1] for k in keys})
        deps = sorted({k[2] for k in keys})
        raws = read_coalesced(self.store, ranges, 0, MAX_REQUEST)
        decoded = {}
        for k, f, raw in zip(keys, flat.tolist(), raws, strict=True):
            if idx.filtered:
                chunk = np.empty(idx.chunks, self.dtype)
                if not self._decode_into(raw, int(idx.masks[f]), chunk):
                    return False
                decoded[k] = chunk
            else:
                decoded[k] = np.frombuffer(raw, dtype=self.dtype).reshape(idx.chunks)
        col0 = cols[0] * ca
        width = min(idx.shape[1], (cols[-1] + 1) * ca) - col0
        widths = (runs[:, 1] - runs[:, 0]).tolist()
        offs = np.r_[0, np.cumsum(widths)[:-1]].tolist()
        slab = np.empty((cf, width, idx.shape[2]), self.dtype)
        for r in rows:
            for c in cols:
                for d in deps:
                    a = c * ca - col0
                    b = min(width, a + ca)
                    z = d * c3
                    slab[:, a:b, z:z + c3] = decoded[(r, c, d)][:, :b - a, :min(c3, idx.shape[2] - z)]
            at = np.flatnonzero(frames // cf == r)
            local = frames[at] - r * cf
            for (a, b), w, off in zip(runs.tolist(), widths, offs, strict=True):
                out[at, off:off + w] = slab[local, a - col0:b - col0]
        return True

    def _decode_into(self, raw, mask: int, out: np.ndarray) -> bool:
        """A stored chunk decoded into ``out`` (a whole chunk); False when its size does not match."""
        if not self.index.filtered or (mask and mask == self._raw_mask):   # (stored as they are)
            if len(raw) != out.nbytes:
                return False
            out[...] = np.frombuffer(raw, dtype=self.dtype).reshape(out.shape)
            return True
        if self._blosc is not None and not mask:   # (a filter skipped for this chunk: HDF5 decodes the rest)
            return self._blosc(raw, out)
        if self._decoder is None:
            self._decoder = self._decoder_of()
        try:
            self._decoder.decode(raw, mask, out)
        except OSError as exc:   # (HDF5 reads the chunk itself, and says what is wrong with it)
            log.debug("%s: a stored chunk did not decode in memory (%s)", self.store.identity[0], exc)
            return False
        return True

    def close(self) -> None:
        if self._decoder is not None:
            self._decoder.close()
            self._decoder = None
