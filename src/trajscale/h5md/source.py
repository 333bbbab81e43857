"""The H5MD Source: a particle group's frames read at their chunks' byte addresses, in chunk-aligned slabs.

:func:`~.files.open_file` opens the byte store and HDF5's view of it once; :func:`~.schema.describe` reads the
particle group; each field's :class:`~.chunks.ChunkReads` executes the read plan against the store. HDF5 reads
what the chunk reader leaves (MPI-IO's reads, a chunk never written).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from operator import attrgetter
from typing import NamedTuple

import h5py
import numpy as np

from ..block import Block
from ..box import edges_to_dimensions
from ..errors import InputFileError
from ..facts import LayoutFacts
from ..hdf5.chunks import ChunkIndex, ChunkReads, chunk_index, make_decoder
from ..hdf5.files import FileRequest, open_file
from ..hdf5.hdf5 import ensure_filters
from ..hdf5.runs import plan_atom_reads
from ..sources.base import FRAME_META_BYTES, OpenRequest, Source, file_head
from ..storage.bytestore import ByteStore
from ..storage.location import Location
from ..util import HDF5_MAGIC, LRU
from .codecs import deltas_of
from .layout import reader_chunk_cache
from .schema import H5MDInfo, describe
from .traits import H5MD

log = logging.getLogger(__name__)

#: Largest slab read in one call; bigger ranges are split at chunk boundaries.
MAX_SLAB_BYTES = 256 * 1024**2
#: Slab size when selected atoms are gathered from their runs: small enough to stay in cache.
GATHER_SLAB_BYTES = 4 * 1024**2
META_CACHE_FRAMES = 2_000_000   # box/time/step of up to this many frames are read once (~80 MB)
#: No file-wide chunk cache; datasets whose chunks split xyz get their own (:func:`~.layout.reader_chunk_cache`).
CHUNK_CACHE_BYTES = 0
#: Most hash slots of a dataset's chunk cache (8 bytes each): far more than its bytes hold chunks.
MAX_CACHE_SLOTS = 1_000_003
#: The per-atom labels trajscale's H5MD writer stores in the particle group (under these names).
STORED_ATOM_LABELS = ("name", "resname", "resid", "segid", "mass")


class FrameMeta(NamedTuple):
    """Box, time and step of consecutive frames: ``(F, 6)`` float32 Å/degrees, ``(F,)`` float64 ps, ``(F,)`` int64."""

    box: np.ndarray
    time: np.ndarray
    step: np.ndarray


@dataclass(slots=True)
class Described:
    """A file's particle group as described once in this process (``layout`` filled on first ask; ``key``)."""

    info: H5MDInfo
    key: tuple
    layout: LayoutFacts | None = None


#: Files described in this process, keyed by the file's identity: repeated runs walk its schema once; a
#: rewritten file (another inode, size or mtime) is described anew.
DESCRIBED_MAX = 64
_DESCRIBED = LRU(DESCRIBED_MAX)
#: Box, time and step of whole files read in this process, by the same key (a visible share of a short run on
#: a small selection): files of at most META_MEMO_BYTES of them, the last META_MEMO_FILES (<= 32 MiB in all).
META_MEMO_BYTES = 4 * 1024**2
META_MEMO_FILES = 8
_FILE_META = LRU(META_MEMO_FILES)


def _described(f, group: str | None, assume_units: str | None, identity: tuple) -> Described:
    """``f``'s particle group described, from the memo if the file (its store's ``identity``) is unchanged."""
    key = (identity, group, assume_units)
    entry = _DESCRIBED.get(key)
    if entry is None:
        entry = Described(describe(f, group, assume_units), key)
        _DESCRIBED.put(key, entry)
    return entry


def _with_chunk_cache(f, path: str):
    """The dataset at ``path``, reopened with a chunk cache if its chunks split xyz or are filtered."""
    ds = f[path]
    chunks, shape = ds.chunks, ds.shape
    nbytes = reader_chunk_cache(shape, chunks, ds.dtype.itemsize,
                                filtered=bool(chunks) and ds.id.get_create_plist().get_nfilters() > 0)
    if not nbytes:
        return ds
    del ds   # HDF5 shares one chunk cache among open handles of a dataset: close it first
    n_chunks = -(-shape[1] // chunks[1]) * -(-shape[2] // chunks[2])
    dapl = h5py.h5p.create(h5py.h5p.DATASET_ACCESS)
    # (slots capped: HDF5 allocates them all at once, and a header can claim billions of chunks)
    dapl.set_chunk_cache(min(max(521, 20 * n_chunks + 1), MAX_CACHE_SLOTS), nbytes, 1.0)
    log.debug("%s: chunks %s; reading through a %d MiB chunk cache", path, chunks, nbytes >> 20)
    return h5py.Dataset(h5py.h5d.open(f.id, path.encode(), dapl=dapl))


#: What the process that prepared a run ships of a file behind a URL (:meth:`H5MDSource.remote_state`).
SHIPPED = ("storage_options", "identity", "round_trip", "chunk_index", "metadata")


class H5MDSource(Source):
    """Read an H5MD file's particle group in slabs, from one byte store (a local file, or the object behind a
    URL): HDF5 reads the metadata, the chunk reader (:mod:`.chunks`) the frames at their byte addresses.

    Parameters
    ----------
    path
        H5MD file (a path, or a URL: ``s3://``, ``http(s)://``, ...).
    group
        Particle group; None for the file's only one (several: an error listing them).
    driver
        ``None`` (HDF5's default) or ``"mpio"`` (parallel HDF5, needs ``comm``; a URL is read by every
        rank alone).
    comm
        MPI communicator for ``driver="mpio"``.
    collective
        Use collective MPI-IO reads (only with ``mpio``); independent by default.
    assume_units
        ``"nm"`` or ``"Angstrom"``: the units of datasets without a ``unit``
        attribute (None: such a file is refused; a unit is never guessed).
    store
        The file's bytes, opened already (the format registry's store: read through, and closed with the
        Source); None: opened here from ``path``.
    **shipped
        For a URL: ``storage_options`` (its location's; None: the process's), and what the preparing
        process found (:meth:`remote_state`): a worker checks the object's identity, reads by the chunk
        addresses, never HDF5's B-tree, and opens the file from the metadata bytes without a request.
    """

    traits = H5MD
    #: HDF5's file lock on open: None keeps HDF5's default; False reads a file a writer holds open.
    file_locking: bool | None = None

    def __init__(self, path: str | Location, group: str | None = None, driver: str | None = None,
                 comm=None, collective: bool = False, assume_units: str | None = None,
                 store: ByteStore | None = None, **shipped) -> None:
        unknown = set(shipped) - set(SHIPPED)
        if unknown:
            raise TypeError(f"H5MDSource got unexpected arguments {', '.join(sorted(unknown))}")
        # (a config's options are the preparing process's store's)
        where = Location.of(path, shipped.pop("storage_options", None))
        self._path = where.where
        self._reads: dict[str, ChunkReads] = {}
        self._shipped_index = shipped.get("chunk_index")
        self._h5 = open_file(where, FileRequest(driver, comm, self.file_locking, CHUNK_CACHE_BYTES,
                                                shipped or None, store))
        self.file = self._h5.file
        self._driver = self._h5.driver
        self._collective = bool(collective and self._driver == "mpio")
        self._dxpl = None   # independent I/O
        if self._collective:
            self._dxpl = h5py.h5p.create(h5py.h5p.DATASET_XFER)
            self._dxpl.set_dxpl_mpio(h5py.h5fd.MPIO_COLLECTIVE)
        try:
            self._open_datasets(group, assume_units)
        except (OSError, KeyError, RuntimeError, ValueError, TypeError) as exc:
            # HDF5 met a damaged object header, heap or B-tree; h5py a type it cannot map to NumPy
            self.close()
            self._raise_store_failure()
            why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise InputFileError(self._path, f"cannot be read as H5MD ({why}): the file is damaged") from None
        except BaseException:
            self.close()
            raise
        self._meta: FrameMeta | None = None
        self._meta_start = 0
        self.bytes_read = 0
        # box, time and step, read with the first frame (a run's reference): fetched meanwhile
        paths = [axis.path for axis in (self.info.time, self.info.step) if axis.path is not None]
        self._h5.fetch_ahead([self.file[p] for p in paths]
                             + ([self._box] if self._periodic and self.info.box_time_dependent else []))

    @classmethod
    def guess_format(cls, path: str, store: ByteStore | None = None) -> str | None:
        """HDF5's signature (the H5MD layout itself is checked when the file is opened)."""
        return "H5MD" if file_head(path, len(HDF5_MAGIC), store) == HDF5_MAGIC else None

    @classmethod
    def node_copy_config(cls, config: dict, copy_path: str) -> dict | None:
        """The node's copy opened as the file itself, with the particle group and units asked of it."""
        return {"kind": cls.kind, "path": copy_path,
                **{k: config[k] for k in ("group", "assume_units") if k in config}}

    @classmethod
    def guess_can_open(cls, path: str) -> bool:
        """HDF5 with H5MD's ``h5md`` and ``particles`` groups (a NetCDF-4 file, HDF5 too, is not claimed)."""
        if cls.guess_format(path) is None:
            return False
        try:
            with h5py.File(path, "r") as f:
                return "h5md" in f and "particles" in f
        except OSError:
            return False

    @classmethod
    def open(cls, location: Location, request: OpenRequest) -> H5MDSource:
        return cls(location, group=request.group, driver=request.driver, comm=request.comm,
                   collective=request.collective, assume_units=request.assume_units, store=request.store,
                   **(request.shipped or {}))

    @classmethod
    def layout_report(cls, path: str, request: OpenRequest) -> dict | None:
        """:func:`~.inspect.inspect_file` of ``request.group`` (or the file's only one)."""
        from .inspect import inspect_file

        return inspect_file(path, request.group, request.assume_units)

    def stored_units(self) -> dict[str, str | None]:
        return dict(self.info.units)

    @property
    def particle_group(self) -> str:
        return self.info.group

    def observables(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """The file's ``observables/NAME/value`` datasets with one value per frame of the particle group."""
        out = {}
        for name in self.info.observables:
            val = self.file["observables"][name]
            if hasattr(val, "keys") and "value" in val and val["value"].ndim >= 1 \
                    and val["value"].shape[0] == self.n_frames:
                out[name] = (val["value"].shape[1:], val["value"].dtype)
        return out

    def read_observables(self, names, start: int, stop: int) -> dict[str, np.ndarray]:
        return {name: self.file["observables"][name]["value"][start:stop] for name in names}

    def stored_atom_labels(self) -> dict[str, np.ndarray]:
        """:data:`STORED_ATOM_LABELS` stored in the group (strings as ``str``); none where it stores no ``name``."""
        group = self.file.get(f"particles/{self.info.group}")
        if not isinstance(group, h5py.Group) or not isinstance(group.get("name"), h5py.Dataset):
            return {}
        out = {}
        for label in STORED_ATOM_LABELS:
            ds = group.get(label)
            if isinstance(ds, h5py.Dataset) and ds.shape == (self.n_atoms,):
                values = ds[()]
                # (integers as int64: a writer stores them in the smallest type that holds them)
                out[label] = values.astype(str) if values.dtype.kind in "SO" else \
                    values.astype(np.int64) if values.dtype.kind in "iu" else values
        return out

    def _open_datasets(self, group: str | None, assume_units: str | None) -> None:
        self._described = _described(self.file, group, assume_units, self._h5.store.identity)
        self.info: H5MDInfo = self._described.info
        self._datasets = {fl: _with_chunk_cache(self.file, self.info.dataset(fl)) for fl in self.info.fields}
        for ds in self._datasets.values():
            ensure_filters(ds)
        try:
            self._deltas = {fl: c for fl, ds in self._datasets.items() if (c := deltas_of(ds))}
        except ValueError as exc:
            raise InputFileError(self._path, str(exc)) from None
        if self._h5.reads_at_addresses:   # (not under MPI-IO, whose reads stay MPI-IO's)
            for fl, ds in self._datasets.items():
                reads = self._chunk_reads(fl, ds)
                if reads is not None:
                    self._reads[fl] = reads
        self._box = self.file[self.info.box_path] if self.info.box_path else None
        self._periodic = any(b == "periodic" for b in self.info.boundary)

    def _chunk_reads(self, fl: str, ds) -> ChunkReads | None:
        """Field ``fl``'s chunk reader: by the shipped chunk addresses, else by its own (looked up as read)."""
        in_place = self._h5.hdf5_reads_chunks   # (HDF5 reads the bytes itself: its read costs no round trip)
        cfg = (self._shipped_index or {}).get(fl)
        index = ChunkIndex.from_config(cfg) if cfg is not None else \
            chunk_index(ds, self._h5.store.identity, self.info.n_frames)
        if index is None:
            return None
        return ChunkReads(self._h5.store, index, make_decoder(ds, index), ds, whole_chunks=not in_place, check=in_place)

    path = property(attrgetter("_path"))

    store = property(attrgetter("_h5.store"))
    collective = property(attrgetter("_collective"))
    n_frames = property(attrgetter("info.n_frames"))
    n_atoms = property(attrgetter("info.n_atoms"))
    chunk_frames = property(attrgetter("info.chunk_frames"))
    fields = property(attrgetter("info.fields"))

    def get_config(self) -> dict:
        config = {"kind": self.kind, "path": self._path, "group": self.info.group,
                  "driver": self._driver, "collective": self._collective,
                  "assume_units": self.info.assumed_units}
        config.update(self.remote_state() or {})
        return config

    def remote_state(self) -> dict | None:
        """What a worker needs to read the file without walking its metadata over the network; None if local."""
        state = self._h5.state()
        if state is None:
            return None
        if self._shipped_index is None:   # every field's chunk addresses (ChunkIndex), all looked up, as plain values
            self._shipped_index = {fl: reads.index.to_config(self._datasets[fl]) for fl, reads in self._reads.items()
                                   if reads.ready()}
        return {**state, "chunk_index": self._shipped_index, "metadata": self._h5.metadata(self._preload_meta)}

    def _preload_meta(self) -> None:
        """Every frame's box, time and step, read before the metadata is shipped (a worker's first read)."""
        from ..storage.fileobj import SHIP_BYTES

        if 2 <= self.n_frames and self.n_frames * FRAME_META_BYTES <= SHIP_BYTES // 4:
            try:
                self._frame_meta(0, self.n_frames)
            except Exception:   # noqa: BLE001 - the frames that read them say what is wrong, as before
                log.debug("%s: box, time and step not shipped", self._path, exc_info=True)

    def remote_stats(self) -> dict | None:
        """Network cost of this source's reads (requests, bytes, wait_s, retries); None for a local file."""
        return self._h5.fetched()

    def layout_summary(self) -> LayoutFacts:
        from .inspect import layout_facts

        if self._described.layout is None:
            self._described.layout = layout_facts(self.info, self._h5.store.size, self._h5.opens_collectively)
        direct = tuple(sorted(fl for fl, r in self._reads.items() if r.index.whole_frames and fl not in self._deltas))
        return dataclasses.replace(self._described.layout, direct_reads=direct)

    def bytes_per_frame(self, atoms: np.ndarray | None = None,
                        fields: tuple[str, ...] = ("position",)) -> int:
        # the runs read plus the selected atoms' copy; a delta-coded field decodes up to the last atom asked
        plan = plan_atom_reads(atoms, self.n_atoms)
        return sum(plan.bytes_per_frame() if fl not in self._deltas else
                   (self._delta_width(fl, plan) + len(plan.index if plan.index is not None else ())) * 12
                   for fl in fields) + FRAME_META_BYTES + self._ahead_bytes_per_frame(fields, plan)

    def _ahead_bytes_per_frame(self, fields: tuple[str, ...], plan) -> int:
        """Bytes the read-ahead holds per frame of the next block (counted in the block budget)."""
        if not self.reads_ahead:
            return 0
        total = 0
        for fl in fields:
            reads = self._reads.get(fl)
            if reads is None:
                continue
            idx = reads.index
            if fl not in self._deltas and idx.whole_frames:
                total += plan.n_columns * 12
            else:   # whole stored chunks (compressed or split)
                if not idx.complete:
                    idx.locate(self._datasets[fl], np.arange(len(idx.offsets)))
                total += -(-int(idx.sizes.sum()) // max(1, idx.shape[0]))
        return total

    @property
    def reads_ahead(self) -> bool:
        return self._h5.latency_bound

    def prefetch(self, start: int, stop: int, atoms: np.ndarray | None = None,
                 fields: tuple[str, ...] = ("position",), stride: int = 1) -> None:
        """Behind a URL: start fetching what ``read(...)`` of the same arguments will fetch; elsewhere nothing."""
        if not self.reads_ahead or not 0 <= start < stop <= self.n_frames:
            return
        if any(fl not in self._datasets for fl in fields):
            return
        if atoms is not None:
            atoms = np.asarray(atoms, dtype=np.intp)
            if atoms.size and (atoms.min() < 0 or atoms.max() >= self.n_atoms):
                return
        plan = plan_atom_reads(atoms, self.n_atoms)
        n = len(range(start, stop, stride))
        for fl in fields:
            reads = self._reads.get(fl)
            if reads is None:
                continue
            if fl in self._deltas:   # as _read_deltas cuts its slabs
                width = self._delta_width(fl, plan)
                slabs, chunkwise = self._delta_slabs(fl, start, n, stride, width)
                if chunkwise:
                    cf = reads.index.chunks[0]
                    reads.prefetch_chunks([(start + i) // cf for i, _ in slabs])
                    continue
                runs = np.array([[0, width]])
            else:   # as _read_slabs cuts them
                runs = plan.runs
                slabs = list(self._slabs(start, n, stride, plan.n_columns, MAX_SLAB_BYTES)) \
                    if n and plan.n_columns else []
            for i, j in slabs:
                reads.prefetch(runs, start + i * stride, stride, j - i)

    def _delta_width(self, fl: str, plan) -> int:
        """Atoms a delta-coded field decodes per frame for ``plan``."""
        return self._deltas[fl].atoms_needed(int(plan.runs[-1][1])) if len(plan.runs) else 0

    def read(self, start: int, stop: int, atoms: np.ndarray | None = None,
             fields: tuple[str, ...] = ("position",), stride: int = 1) -> Block:
        atoms = self.checked_request(start, stop, atoms, fields)
        plan = plan_atom_reads(atoms, self.n_atoms)
        try:
            arrays = {fl: self._read_field(fl, start, stop, stride, plan) for fl in fields}
            box, time, step = self._frame_meta(start, stop, stride)
        except (OSError, KeyError, RuntimeError) as exc:   # HDF5 met a damaged chunk or object
            self._raise_store_failure()
            raise self._damaged(exc, range(start, stop, stride), fields) from None
        return Block(start, stop, arrays["position"], box, time, step,
                     velocities=arrays.get("velocity"), forces=arrays.get("force"), stride=stride)

    def checked_request(self, start: int, stop: int, atoms: np.ndarray | None,
                        fields: tuple[str, ...]) -> np.ndarray | None:
        """The atom indices as ``intp``, once the range, the fields and the indices are known good."""
        self.check_range(start, stop)
        missing = [fl for fl in fields if fl not in self._datasets]
        if missing:
            raise InputFileError(self._path, f"has no {', '.join(missing)} in particles/{self.info.group}")
        if atoms is not None:
            atoms = np.asarray(atoms, dtype=np.intp)
            if atoms.size and (atoms.min() < 0 or atoms.max() >= self.n_atoms):
                raise InputFileError(self._path, f"atom index out of range for {self.n_atoms} atoms")
        return atoms

    def _raise_store_failure(self) -> None:
        """A read that failed inside HDF5: the store's real error (missing, replaced, unreachable)."""
        h5 = getattr(self, "_h5", None)
        failure = None if h5 is None else h5.failure()
        if failure is not None:
            raise failure from None

    def _damaged(self, exc: BaseException, frames: range, fields: tuple[str, ...]) -> InputFileError:
        """The error for a read HDF5 refused, naming the first frame that cannot be read alone."""
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        for k in frames:
            try:
                for fl in fields:
                    self._datasets[fl][k]
                self._frame_meta_uncached(k, k + 1)
            except (OSError, KeyError, RuntimeError):
                return InputFileError(self._path, f"cannot read frame {k} ({why}): the file is damaged")
        return InputFileError(self._path, f"cannot read frames {frames.start} to {frames.stop - 1} ({why}): "
                                          "the file is damaged")

    def _frame_meta(self, start: int, stop: int, stride: int = 1) -> FrameMeta:
        """Box, time and step of frames [start, stop), copied from those read once for the span
        :meth:`preload_frame_meta` named, else for the whole file (memoised when small): three small HDF5 calls
        per block cost as much as megabytes of coordinates. A single frame's are read alone unless kept."""
        key = self._described.key
        if self._meta is None and (kept := _FILE_META.get(key)) is not None:
            self._meta_start, self._meta = 0, kept
        lo = self._meta_start
        if self._meta is not None and lo <= start and stop <= lo + len(self._meta.time):
            return FrameMeta(*(a[start - lo:stop - lo:stride].copy() for a in self._meta))
        if stop - start <= 1 or self.n_frames > META_CACHE_FRAMES:
            return FrameMeta(*(a[::stride] for a in self._frame_meta_uncached(start, stop)))
        self.preload_frame_meta(0, self.n_frames)
        if self.n_frames * FRAME_META_BYTES <= META_MEMO_BYTES:
            _FILE_META.put(key, self._meta)
        return self._frame_meta(start, stop, stride)

    def preload_frame_meta(self, start: int, stop: int) -> None:
        """Read box, time and step of frames [start, stop) now, for the reads that follow."""
        self.check_range(start, stop)
        self._meta_start, self._meta = start, self._frame_meta_uncached(start, stop)

    def _frame_meta_uncached(self, start: int, stop: int) -> FrameMeta:
        return FrameMeta(self._read_box(start, stop), self.info.time.values(self.file, start, stop, np.float64),
                         self.info.step.values(self.file, start, stop, np.int64))

    def _read_field(self, fl: str, start: int, stop: int, stride: int, plan) -> np.ndarray:
        n = len(range(start, stop, stride))
        if fl in self._deltas:
            out = self._read_deltas(fl, start, n, stride, plan)
            self.bytes_read += n * self._delta_width(fl, plan) * 12   # decoded: every atom it needs
        else:
            out = self._read_at_addresses(fl, start, n, stride, plan)
            if out is None:
                out = self._read_slabs(fl, start, n, stride, plan)
            self.bytes_read += n * plan.n_columns * 12
        scale = self.info.scales.get(fl, 1.0)
        if scale != 1.0:
            out *= np.float32(scale)
        return out

    def _read_at_addresses(self, fl: str, start: int, n: int, stride: int, plan) -> np.ndarray | None:
        """The whole plan in one call of the chunk reader; None where it is read by slabs."""
        reads = self._reads.get(fl)
        if reads is None or not n or not plan.n_columns:
            return None
        out = self._out_array(fl if plan.index is None else fl + ":selected",
                              (n, plan.n_columns if plan.index is None else len(plan.index), 3))
        return out if reads.read(start, n, stride, plan.runs, plan.index, out) else None

    def _read_slabs(self, fl: str, start: int, n: int, stride: int, plan) -> np.ndarray:
        if plan.index is None:
            out = self._out_array(fl, (n, plan.n_columns, 3))
            for i, j in self._slabs(start, n, stride, plan.n_columns) if n and plan.n_columns else ():
                self._read_rows(fl, plan.runs, out[i:j], start + i * stride, stride)
            return out
        # Cache-sized slabs, each gathered while in cache (a gather from a whole 80 MB span costs as much as
        # reading it); collective MPI-IO and a URL keep large slabs (same calls on every rank; one batch).
        out = self._out_array(fl + ":selected", (n, len(plan.index), 3))
        size = MAX_SLAB_BYTES if self._collective or self._h5.latency_bound else GATHER_SLAB_BYTES
        slabs = list(self._slabs(start, n, stride, plan.n_columns, size)) if n and plan.n_columns else []
        buf = self._out_array(fl, (max((j - i for i, j in slabs), default=0), plan.n_columns, 3))
        for i, j in slabs:
            self._read_rows(fl, plan.runs, buf[:j - i], start + i * stride, stride)
            # mode="clip": the plan's columns are in range, and "raise" buffers the output
            np.take(buf[:j - i], plan.index, axis=1, out=out[i:j], mode="clip")
        return out

    def _delta_slabs(self, fl: str, start: int, n: int, stride: int, width: int) -> tuple[list, bool]:
        """(slabs, chunkwise): chunkwise where whole-frame chunks decode straight into the buffer."""
        reads = self._reads.get(fl)
        if (reads is not None and reads.decodes_in_place and reads.index.frame_chunks and stride == 1 and n
                and width == self._datasets[fl].shape[1]):
            cf = reads.index.chunks[0]
            return [(max(k * cf, start) - start, min((k + 1) * cf, start + n) - start)
                    for k in range(start // cf, (start + n - 1) // cf + 1)], True
        size = MAX_SLAB_BYTES if self._collective else GATHER_SLAB_BYTES
        return (list(self._slabs(start, n, stride, width, size)) if n and width else []), False

    def _read_deltas(self, fl: str, start: int, n: int, stride: int, plan) -> np.ndarray:
        """Delta-coded frames: atoms 0 .. the last one asked for, decoded, then the asked atoms taken."""
        cols = np.concatenate([np.arange(lo, hi) for lo, hi in plan.runs.tolist()]) if len(plan.runs) else \
            np.zeros(0, np.intp)
        atoms = cols if plan.index is None else cols[plan.index]
        codec = self._deltas[fl]
        width = self._delta_width(fl, plan)   # an atom needs the ones before it (deltas: mixed order)
        out = self._out_array(fl + ":selected", (n, len(atoms), 3))
        whole = np.array_equal(atoms, np.arange(width))
        slabs, chunkwise = self._delta_slabs(fl, start, n, stride, width)
        reads = self._reads.get(fl)
        if chunkwise:
            cf = reads.index.chunks[0]
            reads.prefetch_chunks([(start + i) // cf for i, _ in slabs])   # (their requests at once)
            raw = np.empty((cf, width, 3), codec.dtype)
        else:
            raw = np.empty((max((j - i for i, j in slabs), default=0), width, 3), codec.dtype)
        vals = None if whole else np.empty(raw.shape, np.float32)
        for i, j in slabs:
            a = start + i * stride
            if chunkwise and reads.read_chunk(a // cf, raw):
                rows = raw[a % cf:a % cf + j - i]
            else:
                self._read_rows(fl, np.array([[0, width]]), raw[:j - i], a, stride)
                rows = raw[:j - i]
            if whole:
                codec.decode(rows, out=out[i:j])
            else:
                codec.decode(rows, out=vals[:j - i])
                np.take(vals[:j - i], atoms, axis=1, out=out[i:j], mode="clip")
        return out

    def _read_rows(self, fl: str, runs: np.ndarray, out: np.ndarray, first: int, stride: int) -> None:
        """Rows ``first::stride`` of every atom run, side by side into ``out``: by the chunk reader, else HDF5."""
        reads = self._reads.get(fl)
        if reads is None or not reads.read_runs(runs, out, first, stride):
            self._read_runs(self._datasets[fl], runs, out, first, stride)

    def _read_runs(self, ds, runs: np.ndarray, out: np.ndarray, first: int, stride: int) -> None:
        """Through HDF5: one regular hyperslab per run (an OR of hyperslabs is an irregular selection HDF5
        reads far slower), chunk row by chunk row when strided (HDF5 1.10 maps a strided selection slowly) or
        when a compressed chunk would be decoded once per run (all runs of a row read while cached)."""
        rows = [(0, len(out))]
        filtered = len(runs) > 1 and ds.id.get_create_plist().get_nfilters()
        # (collective reads need the same calls on every rank: one per run, never per row)
        if ds.chunks and (stride > 1 or filtered) and not self._collective:
            row_of = (first + stride * np.arange(len(out))) // ds.chunks[0]
            cut = (np.flatnonzero(np.diff(row_of)) + 1).tolist()
            rows = list(zip([0, *cut], [*cut, len(out)], strict=False))
        fspace = ds.id.get_space()
        mspace = h5py.h5s.create_simple(out.shape)
        widths = (runs[:, 1] - runs[:, 0]).tolist()
        offsets = np.r_[0, np.cumsum(widths)[:-1]].tolist()
        for i, j in rows:
            for (lo, _), w, off in zip(runs.tolist(), widths, offsets, strict=False):
                fspace.select_hyperslab((first + i * stride, lo, 0), (j - i, 1, 1), stride=(stride, 1, 1),
                                        block=(1, w, 3))
                mspace.select_hyperslab((i, off, 0), (j - i, w, 3))
                ds.id.read(mspace, fspace, out, dxpl=self._dxpl)

    def _slabs(self, start: int, n: int, stride: int, n_cols: int, max_bytes: int | None = None):
        """Split ``n`` output rows into slabs of at most ``max_bytes`` (or one chunk), chunk-aligned for stride 1."""
        max_bytes = MAX_SLAB_BYTES if max_bytes is None else max_bytes
        cf = self.chunk_frames if stride == 1 else 1
        per = max(cf, (max_bytes // max(1, n_cols * 12)) // cf * cf)
        i = 0
        while i < n:
            j = min(n, ((start + i) // cf) * cf + per - start) if stride == 1 else min(n, i + per)
            yield i, j
            i = j

    def _read_box(self, start: int, stop: int) -> np.ndarray:
        n = stop - start
        if self._box is None or not self._periodic:
            return np.zeros((n, 6), dtype=np.float32)
        if self.info.box_time_dependent:
            edges = self._box[start:stop]
        else:
            edges = np.broadcast_to(self._box[()], (n, *self._box.shape))
        dims = edges_to_dimensions(edges)
        scale = self.info.scales["box"]   # the box's own unit, never the positions'
        if scale != 1.0:
            dims[:, :3] *= np.float32(scale)
        return dims

    def close(self) -> None:
        for reads in self._reads.values():
            reads.close()
        self._reads = {}
        h5 = getattr(self, "_h5", None)
        if h5 is not None:
            h5.close()
