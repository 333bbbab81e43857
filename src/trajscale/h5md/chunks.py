"""A dataset's frames read from its chunk addresses by range requests, never through HDF5's B-tree.

The process that prepares a run looks up every chunk's byte address, stored
size and filter mask once (:meth:`ChunkIndex.of`, through the caching file
object); the index travels with the job in the Source's config, so workers and
ranks only fetch bytes:

* uncompressed chunks that hold whole frames (or contiguous storage): each
  frame's selected atom runs, at ``chunk address + frame offset + atom offset``,
  ranges closer than the store's ``merge_gap`` (:data:`MERGE_GAP`, 64 KiB: where the bytes between
  cost less than a concurrent request) merged into one request;
* any other chunk (compressed, or split along atoms): the whole stored chunk,
  decoded by HDF5's own filter pipeline (the chunk written raw into an
  in-memory dataset with the same creation properties, then read: every filter
  HDF5 and hdf5plugin decode works, delta codecs decode after it as for a
  local file).

A chunk never written is read through HDF5 (its fill value) instead.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass

import h5py
import numpy as np

from ..storage.objects import MERGE_GAP, ByteStore, prefetch_coalesced, read_coalesced

__all__ = ["MAX_REQUEST", "MERGE_GAP", "ChunkDecoder", "ChunkIndex", "ChunkReads"]

#: A merged request is cut at this size, so one large read still goes out as several concurrent ones.
MAX_REQUEST = 8 * 1024**2

_decoder_ids = itertools.count()


@dataclass(frozen=True)
class ChunkIndex:
    """Where every chunk of one ``(frames, atoms, 3)`` dataset is stored (plain lists: it travels in configs).

    ``chunks`` is None for contiguous storage (one "chunk", the whole dataset). ``offsets``, ``sizes`` and
    ``masks`` are over the chunk grid in C order; an offset of -1 marks a chunk never written.
    """

    shape: tuple[int, int, int]
    chunks: tuple[int, int, int] | None
    dtype: str
    filtered: bool
    offsets: tuple[int, ...]
    sizes: tuple[int, ...]
    masks: tuple[int, ...]

    @property
    def grid(self) -> tuple[int, int, int]:
        if self.chunks is None:
            return (1, 1, 1)
        return tuple(-(-s // c) if s else 0 for s, c in zip(self.shape, self.chunks, strict=True))

    @property
    def whole_frames(self) -> bool:
        """True when a frame's bytes are at one place: contiguous, or unfiltered chunks holding whole frames."""
        return self.chunks is None or (not self.filtered and tuple(self.chunks[1:]) == tuple(self.shape[1:]))

    @classmethod
    def of(cls, ds: h5py.Dataset, n_frames: int | None = None) -> ChunkIndex | None:
        """The index of ``ds``'s first ``n_frames`` rows (all: None); None when it cannot be read this way."""
        if ds.ndim != 3 or ds.is_virtual or ds.external or ds.dtype.kind not in "biuf":
            return None
        rows = ds.shape[0] if n_frames is None else min(ds.shape[0], n_frames)
        shape = (rows, ds.shape[1], ds.shape[2])
        dcpl = ds.id.get_create_plist()
        filtered = dcpl.get_nfilters() > 0
        if ds.chunks is None:
            off = ds.id.get_offset()
            if off is None:
                return None
            return cls(shape, None, ds.dtype.str, False, (int(off),), (int(ds.id.get_storage_size()),), (0,))
        chunks = tuple(int(c) for c in ds.chunks)
        grid = [-(-s // c) if s else 0 for s, c in zip(shape, chunks, strict=True)]
        offsets, sizes, masks = [], [], []
        for k in itertools.product(*(range(g) for g in grid)):
            coord = tuple(i * c for i, c in zip(k, chunks, strict=True))
            try:
                info = ds.id.get_chunk_info_by_coord(coord)
            except (KeyError, ValueError, RuntimeError, OSError):
                info = None
            if info is None or info.byte_offset is None:
                offsets.append(-1)
                sizes.append(0)
                masks.append(0)
            else:
                offsets.append(int(info.byte_offset))
                sizes.append(int(info.size))
                masks.append(int(info.filter_mask))
        return cls(shape, chunks, ds.dtype.str, filtered, tuple(offsets), tuple(sizes), tuple(masks))

    def to_config(self) -> dict:
        return {"shape": list(self.shape), "chunks": None if self.chunks is None else list(self.chunks),
                "dtype": self.dtype, "filtered": self.filtered, "offsets": list(self.offsets),
                "sizes": list(self.sizes), "masks": list(self.masks)}

    @classmethod
    def from_config(cls, cfg: dict) -> ChunkIndex:
        return cls(tuple(cfg["shape"]), None if cfg["chunks"] is None else tuple(cfg["chunks"]), cfg["dtype"],
                   bool(cfg["filtered"]), tuple(cfg["offsets"]), tuple(cfg["sizes"]), tuple(cfg["masks"]))


class ChunkDecoder:
    """Decodes a dataset's stored chunks with HDF5's filter pipeline, in memory (no file, no network)."""

    def __init__(self, dcpl, chunk_shape: tuple[int, ...], dtype: np.dtype) -> None:
        self.shape = tuple(chunk_shape)
        self.dtype = np.dtype(dtype)
        self._file = h5py.File(f"trajscale-decode-{next(_decoder_ids)}", "w", driver="core", backing_store=False)
        space = h5py.h5s.create_simple(self.shape)
        self._ds = h5py.h5d.create(self._file.id, b"c", h5py.h5t.py_create(self.dtype), space, dcpl=dcpl)
        self._lock = threading.Lock()

    def decode(self, raw, mask: int) -> np.ndarray:
        out = np.empty(self.shape, self.dtype)
        with self._lock:
            self._ds.write_direct_chunk((0,) * len(self.shape), bytes(raw), mask)
            self._ds.read(h5py.h5s.ALL, h5py.h5s.ALL, out)
        return out

    def close(self) -> None:
        try:
            self._file.close()
        except Exception:   # noqa: BLE001 - closing never raises
            pass


class ChunkReads:
    """Rows of one dataset read from a :class:`ChunkIndex` through a byte store.

    ``decoder_of`` makes the :class:`ChunkDecoder` when a filtered chunk is first met (it needs the
    dataset's creation properties: HDF5 metadata the worker has open anyway).
    """

    def __init__(self, store: ByteStore, index: ChunkIndex, decoder_of=None) -> None:
        self.store = store
        self.index = index
        self._decoder_of = decoder_of
        self._decoder: ChunkDecoder | None = None
        self.dtype = np.dtype(index.dtype)
        self._offsets = np.asarray(index.offsets, dtype=np.int64)
        self.merge_gap = getattr(store, "merge_gap", MERGE_GAP)   # (a store of the caller's own: the default)

    def read_runs(self, runs: np.ndarray, out: np.ndarray, first: int, stride: int) -> bool:
        """Rows ``first, first + stride, ...`` of the atom ``runs``, side by side, into ``out``
        (as :meth:`H5MDSource._read_runs` does through HDF5). False when HDF5 must read them
        (a chunk never written)."""
        n = len(out)
        if not n or not len(runs):
            return True
        frames = first + stride * np.arange(n, dtype=np.int64)
        if self.index.whole_frames:
            return self._by_ranges(runs, out, frames)
        return self._by_chunks(runs, out, frames)

    def read_gathered(self, runs: np.ndarray, columns: np.ndarray, out: np.ndarray, first: int,
                      stride: int) -> bool:
        """Rows ``first, first + stride, ...`` of the atoms ``columns`` (counted from the start of the one
        atom run ``runs`` holds) into ``out``, taken from each frame's bytes as they came: no buffer the
        width of the run is filled first (a new one's first touch cost more than the copy, and its copy
        held the interpreter lock the requests' threads wait for).  False where :meth:`read_runs` must
        read them (several runs, chunks not of whole frames, a chunk never written)."""
        if len(runs) != 1 or not self.index.whole_frames:
            return False
        ranges = self._frame_ranges(runs, first + stride * np.arange(len(out), dtype=np.int64))
        if ranges is None:
            return False
        views = read_coalesced(self.store, ranges, self.merge_gap, MAX_REQUEST)
        width, dtype = int(runs[0][1] - runs[0][0]), self.dtype
        for i, view in enumerate(views):
            np.take(np.frombuffer(view, dtype=dtype).reshape(width, -1), columns, axis=0, out=out[i], mode="clip")
        return True

    def prefetch(self, runs: np.ndarray, first: int, stride: int, n: int) -> None:
        """Start fetching what :meth:`read_runs` with the same arguments (``n`` rows) will read (the next
        block's bytes, while this one is mapped); nothing when it would read through HDF5."""
        if not n or not len(runs):
            return
        frames = first + stride * np.arange(n, dtype=np.int64)
        if self.index.whole_frames:
            ranges, gap = self._frame_ranges(runs, frames), self.merge_gap
        else:
            ranges, gap = self._chunk_ranges(runs, frames)[2], 0
        if ranges is not None:
            prefetch_coalesced(self.store, ranges, gap, MAX_REQUEST)

    def _frame_ranges(self, runs, frames) -> list[tuple[int, int]] | None:
        """The byte range of every run of every frame, frame by frame (None: a chunk never written)."""
        idx = self.index
        cf = idx.shape[0] if idx.chunks is None else idx.chunks[0]
        chunk = frames // max(1, cf)
        addr = self._offsets[chunk]
        if (addr < 0).any():
            return None
        item = self.dtype.itemsize * idx.shape[2]
        row = addr + (frames - chunk * cf) * idx.shape[1] * item
        runs = np.asarray(runs, dtype=np.int64)
        starts = (row[:, None] + runs[None, :, 0] * item).ravel()
        stops = (row[:, None] + runs[None, :, 1] * item).ravel()
        return list(zip(starts.tolist(), stops.tolist(), strict=True))

    def _chunk_ranges(self, runs, frames):
        """(the chunks' grid keys, their flat indices, their stored byte ranges) holding ``runs`` of
        ``frames`` (ranges None: a chunk never written)."""
        idx = self.index
        cf, ca, _ = idx.chunks
        grid = idx.grid
        runs = np.asarray(runs, dtype=np.int64)
        lo, hi = int(runs[:, 0].min()), int(runs[:, 1].max())
        rows = np.unique(frames // cf).tolist()
        cols = list(range(lo // ca, (hi - 1) // ca + 1))
        keys = [(r, c, d) for r in rows for c in cols for d in range(grid[2])]
        flat = [np.ravel_multi_index(k, grid) for k in keys]
        if any(self._offsets[f] < 0 for f in flat):
            return keys, flat, None
        return keys, flat, [(int(idx.offsets[f]), int(idx.offsets[f]) + int(idx.sizes[f])) for f in flat]

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
        for k, f, raw in zip(keys, flat, raws, strict=True):
            decoded[k] = self._decode(raw, idx.masks[f]) if idx.filtered else \
                np.frombuffer(raw, dtype=self.dtype).reshape(idx.chunks)
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

    def _decode(self, raw, mask: int) -> np.ndarray:
        if self._decoder is None:
            self._decoder = self._decoder_of()
        return self._decoder.decode(raw, mask)

    def close(self) -> None:
        if self._decoder is not None:
            self._decoder.close()
            self._decoder = None
