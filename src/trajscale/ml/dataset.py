"""Map-style datasets over a packed HDF5 store and over an MD trajectory.

Both follow torchmd-net's rule for HDF5 under a DataLoader: the file is opened lazily, once per process, never
inherited across ``fork``. A batch is read in one go (a memory map's gather, or one read per contiguous run of
the sorted indices), so a :class:`~trajscale.ml.sampler.BlockBatchSampler` batch costs a few large reads.
Neither needs torch: items are dicts of NumPy arrays; :func:`make_loader` wraps one in a DataLoader.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence

import h5py
import numpy as np

from ..errors import InputFileError, SelectionError, StoreError
from ..hdf5.hdf5 import open_h5
from ..storage.location import Location
from ..storage.nodecache import at_hand, opened
from .trace import IOStats

log = logging.getLogger(__name__)


def _open_store(path: str) -> h5py.File:
    try:
        return open_h5(path)
    except InputFileError as exc:   # as a StoreError, which a DataLoader worker can hand back
        raise StoreError(exc.path, exc.problem) from None


def runs(sorted_idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Starts and stops of the contiguous runs in sorted, unique indices."""
    if sorted_idx.size == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    breaks = np.flatnonzero(np.diff(sorted_idx) != 1) + 1
    starts = sorted_idx[np.concatenate([[0], breaks])]
    stops = sorted_idx[np.concatenate([breaks - 1, [sorted_idx.size - 1]])] + 1
    return starts, stops


def _as_index(index, n: int) -> np.ndarray:
    idx = np.asarray(index, dtype=np.int64).reshape(-1)
    if idx.size and (idx.min() < -n or idx.max() >= n):
        raise IndexError(f"sample index out of range for {n} samples")
    return np.where(idx < 0, idx + n, idx)


def with_cache_dir(options: dict | None, cache_dir) -> dict | None:
    """Storage ``options`` (None: the process's) naming ``cache_dir``, where the Hub's record is kept beside the
    node's copies and read with ``HF_HUB_OFFLINE=1``."""
    if not cache_dir:
        return options
    from ..storage import process_options

    return {**(process_options() if options is None else options), "cache_dir": os.path.abspath(cache_dir)}


class _BatchReads:
    """The map-style protocol both datasets build on their ``read(index or indices)``."""

    transform = None

    def __getitem__(self, index) -> dict:
        item = self.read(index)
        return self.transform(item) if self.transform else item

    def __getitems__(self, indices: Sequence[int]) -> list[dict]:
        """torch's batched fetch: one batch read, handed out as per-sample views."""
        batch = self.read(indices)
        items = [{k: v[i] for k, v in batch.items()} for i in range(len(indices))]
        return [self.transform(it) for it in items] if self.transform else items

    def batches(self, sampler: Iterator | Sequence) -> Iterator[dict]:
        """NumPy batches for the index lists ``sampler`` yields (no torch needed)."""
        for index in sampler:
            yield self[index]


class H5Dataset(_BatchReads):
    """Samples of a packed HDF5 store (``trajscale pack``) as a map-style dataset.

    Parameters
    ----------
    store
        The HDF5 file, or its URL (``s3://BUCKET/KEY``, ``http(s)://``): fetched once into the
        node-local cache (``cache_dir``), then read from there.
    keys
        Datasets to serve (default: every top-level dataset).
    transform
        Called on each item: a dict key -> array, with a leading batch axis when a batch was asked for.
    cache_dir
        Node-local directory (``/dev/shm``, local NVMe): the first process on the node copies the store
        there and every worker reads the copy (:mod:`trajscale.storage.nodecache`). For a URL, where its one copy is
        fetched (default: ``$TRAJSCALE_CACHE_DIR``, else ``trajscale-cache-UID`` in the temporary directory).
    cache_bytes
        Budget of ``cache_dir`` (default: its free space).
    trace_dir
        Write each process's opens and reads there (:mod:`trajscale.ml.trace`).
    with_index
        Add ``"index"`` (the sample numbers) to every item.
    storage_options
        For a URL: fsspec-style options (docs/remote.md); without them, the AWS environment.  The object is
        read as it was when the dataset was made (its ETag and size): a worker that finds it replaced is refused.

    Raises
    ------
    StoreError
        Naming the file: a missing or truncated store, a missing key, or a store changed since (at every open).
    """

    def __init__(self, store: str | os.PathLike, keys: Sequence[str] | None = None,
                 transform: Callable | None = None, cache_dir: str | os.PathLike | None = None,
                 cache_bytes: int | None = None, trace_dir: str | os.PathLike | None = None,
                 with_index: bool = False, storage_options: dict | None = None) -> None:
        self.store = str(store)
        self.transform = transform
        self.cache_dir = str(cache_dir) if cache_dir else None
        self.cache_bytes = cache_bytes
        self.trace_dir = str(trace_dir) if trace_dir else None
        self.with_index = with_index
        #: the store's location, with the options it is read with (the process's under the given)
        self.location = Location(self.store, with_cache_dir(storage_options, cache_dir))
        original = opened(self.location)
        try:
            self._identity = (original.state() or {}).get("identity")   # (an object's: the version read)
            self._stamp = original.stamp()
            first = at_hand(original, self.cache_dir, self.cache_bytes)
        finally:
            original.close()
        try:
            self._read_meta(first.path, keys)
        finally:
            first.close()
        self._pid: int | None = None
        self._file: h5py.File | None = None
        self._ds: dict = {}
        self._maps: dict = {}
        self._cache_lock = None
        self.stats: IOStats | None = None

    def _read_meta(self, path: str, keys: Sequence[str] | None) -> None:
        with _open_store(path) as f:
            names = [k for k in f if isinstance(f[k], h5py.Dataset)]
            self.keys = tuple(keys) if keys else tuple(names)
            missing = [k for k in self.keys if k not in names]
            if missing:
                raise StoreError(self.store, f"has no key {', '.join(map(repr, missing))} "
                                                 f"(keys: {', '.join(names) or 'none'})")
            if not self.keys:
                raise StoreError(self.store, "holds no datasets (was it made by trajscale pack?)")
            lengths = {f[k].shape[0] for k in self.keys}
            if len(lengths) != 1:
                raise StoreError(self.store, f"keys {', '.join(self.keys)} have different sample counts")
            self.n = lengths.pop()
            self.shapes = {k: f[k].shape[1:] for k in self.keys}
            self.dtypes = {k: f[k].dtype for k in self.keys}
            _check_extent(path, f, self.keys)


    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state.update(_pid=None, _file=None, _ds={}, _maps={}, _cache_lock=None, stats=None)
        return state

    def _open(self) -> None:
        """Open the store (or its node-local copy) in this process, once."""
        pid = os.getpid()
        if self._pid == pid and self._file is not None:
            return
        # a handle inherited through fork is dropped, not closed: closing it touches the parent's HDF5 state
        self._file, self._ds, self._maps, self._cache_lock = None, {}, {}, None
        self.stats = IOStats.for_process(self.trace_dir)
        t0 = time.perf_counter()
        original = opened(self.location, self._identity)   # (an object's: no request)
        try:
            if original.stamp() != self._stamp:
                raise StoreError(self.store, "changed since the dataset was made (size or modification "
                                             "time); make a new dataset to read the new contents")
            self._cache_lock = at_hand(original, self.cache_dir, self.cache_bytes, in_place=False)
        finally:
            original.close()
        path = self._cache_lock.path
        f = _open_store(path)
        try:
            _check_extent(path, f, self.keys)
            self._ds = {k: f[k] for k in self.keys}
            self._maps = {k: _memory_map(path, ds) for k, ds in self._ds.items()}
        except Exception:
            f.close()
            raise
        if any(m is None for m in self._maps.values()):
            self._maps = {}
        self._file, self._pid = f, pid
        self.stats.opened(path, t0, time.perf_counter())

    def close(self) -> None:
        """Close this process's handle (a later read reopens it)."""
        if self._file is not None and self._pid == os.getpid():
            self._file.close()
        if self._cache_lock is not None:
            self._cache_lock.close()
        self._file, self._ds, self._maps, self._pid, self._cache_lock = None, {}, {}, None, None


    def __len__(self) -> int:
        return self.n

    def read(self, index) -> dict[str, np.ndarray]:
        """The samples ``index`` (an int or a sequence), without the transform, in the asked order."""
        self._open()
        scalar = np.ndim(index) == 0
        idx = _as_index(index, self.n)
        t0 = time.perf_counter()
        try:
            if self._maps:
                out = {}
                for k in self.keys:
                    out[k], view = _batch_buffer((idx.size, *self.shapes[k]), self.dtypes[k],
                                                 shared=self.transform is None)
                    # mode="clip": indices are checked already, and "raise" would buffer `out` (a copy)
                    np.take(self._maps[k], idx, axis=0, out=view, mode="clip")
                n_runs = runs(np.unique(idx))[0].size * len(self.keys)
            else:
                out, n_runs = self._read_hdf5(idx)
        except OSError as exc:
            raise StoreError(self.store, f"read failed ({exc}); the file may be truncated or corrupt") from None
        self.stats.read(t0, time.perf_counter(), n_runs, sum(_nbytes(v) for v in out.values()), idx.size)
        if self.with_index:
            out["index"] = idx
        if scalar:
            out = {k: v[0] for k, v in out.items()}
        return out

    def _read_hdf5(self, idx: np.ndarray) -> tuple[dict[str, np.ndarray], int]:
        uniq, inverse = np.unique(idx, return_inverse=True)
        bufs = {k: np.empty((uniq.size, *self.shapes[k]), self.dtypes[k]) for k in self.keys}
        starts, stops = runs(uniq)
        row = 0
        for a, b in zip(starts.tolist(), stops.tolist(), strict=False):
            for k in self.keys:
                self._ds[k].read_direct(bufs[k], np.s_[a:b], np.s_[row:row + b - a])
            row += b - a
        n_runs = starts.size * len(self.keys)
        if uniq.size == idx.size and np.array_equal(uniq, idx):
            return bufs, n_runs
        return {k: b[inverse] for k, b in bufs.items()}, n_runs


def _batch_buffer(shape: tuple[int, ...], dtype: np.dtype, shared: bool):
    """(array to return, NumPy view to fill): in a DataLoader worker a torch tensor in shared memory, as
    ``default_collate`` allocates its batches, so it reaches the training process without a copy."""
    data = sys.modules.get("torch.utils.data")   # (a DataLoader worker's; never import torch just to ask)
    if shared and data is not None and data.get_worker_info() is not None:
        import torch

        empty = torch.from_numpy(np.empty(0, dtype))
        storage = empty._typed_storage()._new_shared(int(np.prod(shape)), device=empty.device)
        t = empty.new(storage).resize_(*shape)
        return t, t.numpy()
    a = np.empty(shape, dtype)
    return a, a


def _nbytes(a) -> int:
    return int(a.nbytes) if isinstance(a, np.ndarray) else int(a.numel() * a.element_size())


def _memory_map(path: str, ds: h5py.Dataset) -> np.ndarray | None:
    """A read-only memory map of a contiguous, unfiltered dataset's bytes; None otherwise."""
    offset = ds.id.get_offset()
    if ds.chunks is not None or offset is None or ds.dtype.hasobject or ds.size == 0:
        return None
    return np.memmap(path, dtype=ds.dtype, mode="r", offset=offset, shape=ds.shape)


def _check_extent(path: str, f: h5py.File, keys: Sequence[str]) -> None:
    """A contiguous dataset must end inside the file: a truncated copy fails here, not mid-epoch."""
    size = os.path.getsize(path)
    for k in keys:
        ds = f[k]
        offset = ds.id.get_offset()
        if offset is not None and offset + ds.id.get_storage_size() > size:
            raise StoreError(path, f"truncated: key {k!r} ends at byte {offset + ds.id.get_storage_size()} "
                                       f"but the file has {size} bytes")
    if f.attrs.get("n_samples") is not None and keys and f[keys[0]].shape[0] != int(f.attrs["n_samples"]):
        raise StoreError(path, "sample count differs from the one the pack recorded")


class FrameDataset(_BatchReads):
    """Trajectory frames as samples, read in blocks through trajscale's Source.

    Parameters
    ----------
    topology, trajectory
        As for ``trajscale run``.
    select
        Atoms of each sample (MDAnalysis selection).
    fields
        Per-atom fields: ``position``, ``velocity``, ``force``.
    center
        Subtract each frame's centre of geometry of the selection.
    superpose
        Superpose each frame's selection on the selection in frame ``ref_frame`` (optimal rotation, as
        ``rms.RMSD``); implies centring on the reference's centre.
    transform
        Called on each item (dict key -> array; batched for batch reads).
    """

    def __init__(self, topology: str, trajectory, select: str = "all", fields: Sequence[str] = ("position",),
                 center: bool = False, superpose: bool = False, ref_frame: int = 0,
                 transform: Callable | None = None, trace_dir: str | os.PathLike | None = None) -> None:
        from ..sources import open_source
        from ..topology import load_universe, select_atoms

        self.topology = str(topology)
        self.trajectory = trajectory if isinstance(trajectory, (list, tuple)) else str(trajectory)
        self.fields = tuple(fields)
        self.center, self.superpose = bool(center), bool(superpose)
        self.transform = transform
        self.trace_dir = str(trace_dir) if trace_dir else None
        u = load_universe(self.topology, topology_coordinates=False)
        self.atoms = select_atoms(u, select).indices.astype(np.int64)
        with open_source(self.trajectory, self.topology) as src:
            self.config = src.get_config()
            self.n = src.n_frames
            self._n_atoms = src.n_atoms
            if u.atoms.n_atoms != src.n_atoms:
                raise SelectionError(f"{self.topology} has {u.atoms.n_atoms} atoms but {src.path} has {src.n_atoms}")
            bad = [fl for fl in self.fields if fl not in src.fields]
            if bad:
                raise StoreError(src.path, f"has no {', '.join(bad)}")
            self.reference = None
            if self.superpose:
                from ..kernels.superpose import Reference

                if not 0 <= ref_frame < self.n:
                    raise IndexError(f"ref_frame {ref_frame} outside the trajectory's {self.n} frames")
                ref = src.read(ref_frame, ref_frame + 1, self.atoms).positions[0]
                self.reference = Reference.of(ref)
        self._pid = None
        self._src = None
        self.stats: IOStats | None = None

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state.update(_pid=None, _src=None, stats=None)
        return state

    def _source(self):
        if self._pid != os.getpid() or self._src is None:
            from ..sources import source_from_config

            self.stats = IOStats.for_process(self.trace_dir)
            t0 = time.perf_counter()
            self._src = source_from_config(self.config)
            self._pid = os.getpid()
            self.stats.opened(self._src.path, t0, time.perf_counter())
        return self._src

    def __len__(self) -> int:
        return self.n

    def read(self, index) -> dict[str, np.ndarray]:
        """Frames ``index`` (an int or a sequence) of the selection, without the transform (a batch that is
        one run of frames is the Block's own arrays, no copy)."""
        src = self._source()
        scalar = np.ndim(index) == 0
        idx = _as_index(index, self.n)
        uniq = np.unique(idx)
        starts, stops = runs(uniq)
        t0 = time.perf_counter()
        if starts.size == 1:
            out = self._block_arrays(src.read(int(starts[0]), int(stops[0]), self._atoms, self.fields))
        else:
            out = {fl: np.empty((uniq.size, self.atoms.size, 3), np.float32) for fl in self.fields}
            out["time"] = np.empty(uniq.size, np.float64)
            row = 0
            for a, b in zip(starts.tolist(), stops.tolist(), strict=False):
                for k, v in self._block_arrays(src.read(a, b, self._atoms, self.fields)).items():
                    out[k][row:row + b - a] = v
                row += b - a
        self.stats.read(t0, time.perf_counter(), starts.size,
                        sum(out[fl].nbytes for fl in self.fields), idx.size)
        if "position" in out and (self.center or self.superpose):
            self._move(out)
        out["frame"] = uniq
        if uniq.size != idx.size or not np.array_equal(uniq, idx):
            inverse = np.searchsorted(uniq, idx)
            out = {k: v[inverse] for k, v in out.items()}
        if scalar:
            out = {k: v[0] for k, v in out.items()}
        return out

    @property
    def _atoms(self) -> np.ndarray | None:
        """The selection's indices, or None for every atom (the Source then skips indexing)."""
        return None if self.atoms.size == self._n_atoms else self.atoms

    def _block_arrays(self, block) -> dict[str, np.ndarray]:
        arrays = {"position": block.positions, "velocity": block.velocities, "force": block.forces}
        return {**{fl: arrays[fl] for fl in self.fields}, "time": block.time}

    def _move(self, out: dict[str, np.ndarray]) -> None:
        """Centre (and superpose) the selection of every frame, in place, batched over frames."""
        x = out["position"]
        if self.superpose:
            from ..kernels.superpose import superpose_rmsd

            _, rot, com, ref_com = superpose_rmsd(x, self.reference, want_rotation=True)
            moved = np.einsum("fni,fij->fnj", x.astype(np.float64) - com[:, None, :], rot) + ref_com
            x[...] = moved
            for fl in ("velocity", "force"):   # vectors rotate, they do not translate
                if fl in out:
                    out[fl][...] = np.einsum("fni,fij->fnj", out[fl].astype(np.float64), rot)
        else:
            x -= x.mean(axis=1, keepdims=True, dtype=np.float64).astype(np.float32)

    def close(self) -> None:
        if self._src is not None and self._pid == os.getpid():
            self._src.close()
        self._src, self._pid = None, None


def _to_tensors(batch):
    import torch

    if isinstance(batch, dict):
        return {k: _to_tensors(v) for k, v in batch.items()}
    if isinstance(batch, np.ndarray):
        return torch.from_numpy(batch)
    return batch


def make_loader(dataset, batch_size: int = 256, shuffle: bool = True, block: int | None = None,
                seed: int = 0, drop_last: bool = False, num_workers: int = 0,
                multiprocessing_context=None, pin_memory: bool = False,
                rank: int = 0, world_size: int = 1, **kw):
    """A ``torch.utils.data.DataLoader`` that reads whole batches.

    The :class:`~trajscale.ml.sampler.BlockBatchSampler` yields index lists, each handed to
    ``dataset[...]`` as is (``batch_size=None``), and the batch comes back as tensors without per-sample
    collation. Call ``loader.sampler.set_epoch(e)`` per epoch.

    Workers start as every worker process of trajscale does (:func:`~trajscale.pools.choose_start_method`, judged
    when they start); ``multiprocessing_context`` asks for a method (``"fork"`` where forking is unsafe is refused
    in one line). Each worker dies with the process that made it, then runs ``worker_init_fn``.
    """
    from .sampler import BlockBatchSampler

    sampler = BlockBatchSampler(len(dataset), batch_size, shuffle=shuffle, block=block, seed=seed,
                                drop_last=drop_last, rank=rank, world_size=world_size)
    persistent = bool(kw.pop("persistent_workers", False)) and num_workers > 0
    if num_workers:
        kw["worker_init_fn"] = functools.partial(_loader_worker_start, kw.get("worker_init_fn"))
    return _loader_class()(dataset, sampler=sampler, batch_size=None, num_workers=num_workers,
                           multiprocessing_context=multiprocessing_context if num_workers else None,
                           pin_memory=pin_memory, collate_fn=_to_tensors, persistent_workers=persistent, **kw)


def _loader_worker_start(then: Callable | None, worker_id: int) -> None:
    """A DataLoader worker's first act: die with its parent, then the user's ``worker_init_fn``."""
    from ..pools import die_with_parent

    die_with_parent()
    if then is not None:
        then(worker_id)


@functools.cache
def _loader_class():
    """``DataLoader`` whose workers start by :func:`~trajscale.pools.choose_start_method`'s rule."""
    from torch.utils.data import DataLoader

    from ..pools import prepare_start

    class Loader(DataLoader):
        def __init__(self, *args, multiprocessing_context=None, **kw):
            self._asked = multiprocessing_context   # a method's name, a context, or None (the rule's)
            super().__init__(*args, **kw)

        def _get_iterator(self):
            if self.num_workers > 0:
                asked = self._asked
                requested = asked if asked is None or isinstance(asked, str) else asked.get_start_method()
                method = prepare_start(requested)
                self.multiprocessing_context = asked if method == requested and not isinstance(asked, str) \
                    else method
            return super()._get_iterator()

    return Loader


__all__ = ["FrameDataset", "H5Dataset", "make_loader", "runs"]
