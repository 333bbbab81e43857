"""The fast H5MD Source: one hyperslab read per chunk-aligned slab."""

from __future__ import annotations

import logging

import h5py
import numpy as np

from ..block import Block
from ..errors import InputFileError
from ..store.box import edges_to_dimensions
from ..store.hdf5 import ensure_filters, open_h5
from ..store.schema import H5MDInfo, describe
from ..store.layout import reader_chunk_cache
from .base import Source

log = logging.getLogger(__name__)

#: Largest slab read in one HDF5 call; bigger ranges are split at chunk boundaries.
MAX_SLAB_BYTES = 256 * 1024**2
META_CACHE_FRAMES = 2_000_000   # box/time/step of up to this many frames are read once (~80 MB)
#: Slab size when selected atoms are gathered from their span: small enough to stay in cache.
GATHER_SLAB_BYTES = 4 * 1024**2
#: Read the span between the first and last selected atom, then index, while the
#: span is below this fraction of the frame; above it read whole frames.
SPAN_FRACTION = 0.75
#: The file is opened with no chunk cache; datasets whose chunks split xyz get
#: their own (see :func:`~trajscale.store.layout.reader_chunk_cache`).
CHUNK_CACHE_BYTES = 0


def _with_chunk_cache(f, path: str):
    """The dataset at ``path``, reopened with a chunk cache if its chunks split xyz."""
    ds = f[path]
    chunks, shape = ds.chunks, ds.shape
    nbytes = reader_chunk_cache(shape, chunks, ds.dtype.itemsize)
    if not nbytes:
        return ds
    del ds   # HDF5 shares one chunk cache among open handles of a dataset: close it first
    n_chunks = -(-shape[1] // chunks[1]) * -(-shape[2] // chunks[2])
    dapl = h5py.h5p.create(h5py.h5p.DATASET_ACCESS)
    dapl.set_chunk_cache(max(521, 20 * n_chunks + 1), nbytes, 1.0)
    log.debug("%s: chunks %s split xyz; reading through a %d MiB chunk cache", path, chunks, nbytes >> 20)
    return h5py.Dataset(h5py.h5d.open(f.id, path.encode(), dapl=dapl))


class H5MDSource(Source):
    """Read an H5MD file's particle group in slabs.

    Parameters
    ----------
    path
        H5MD file.
    group
        Particle group; None for the file's only one (several: an error listing them).
    driver
        ``None`` (HDF5's default) or ``"mpio"`` (parallel HDF5, needs ``comm``).
    comm
        MPI communicator for ``driver="mpio"``.
    collective
        Use collective MPI-IO reads (only with ``mpio``); independent by default.
    assume_units
        ``"nm"`` or ``"Angstrom"``: the units of datasets without a ``unit``
        attribute (None: such a file is refused; a unit is never guessed).
    """

    kind = "h5md"
    supports_mpio = True

    def __init__(self, path: str, group: str | None = None, driver: str | None = None,
                 comm=None, collective: bool = False, assume_units: str | None = None) -> None:
        if driver == "mpio":
            from ..parallel import require_parallel_h5py

            require_parallel_h5py()
        self._path = str(path)
        self._driver = driver
        self._collective = bool(collective and driver == "mpio")
        self.file = open_h5(path, "r", driver=driver, comm=comm, rdcc_nbytes=CHUNK_CACHE_BYTES)
        try:
            self.info: H5MDInfo = describe(self.file, group, assume_units)
        except Exception:
            self.file.close()
            raise
        self._datasets = {fl: _with_chunk_cache(self.file, self.info.dataset(fl)) for fl in self.info.fields}
        for ds in self._datasets.values():
            ensure_filters(ds)
        self._box = self.file[self.info.box_path] if self.info.box_path else None
        self._periodic = any(b == "periodic" for b in self.info.boundary)
        self._meta: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._meta_start = 0
        self.bytes_read = 0

    @property
    def path(self) -> str:
        return self._path

    @property
    def collective(self) -> bool:
        """True when this source's reads are collective MPI-IO calls."""
        return self._collective

    @property
    def n_frames(self) -> int:
        return self.info.n_frames

    @property
    def n_atoms(self) -> int:
        return self.info.n_atoms

    @property
    def chunk_frames(self) -> int:
        return self.info.chunk_frames

    @property
    def fields(self) -> tuple[str, ...]:
        return self.info.fields

    def get_config(self) -> dict:
        return {"kind": self.kind, "path": self._path, "group": self.info.group,
                "driver": self._driver, "collective": self._collective,
                "assume_units": self.info.assumed_units}

    def layout_summary(self) -> dict:
        from ..store.inspect import layout_facts

        return layout_facts(self.info)

    def read(self, start: int, stop: int, atoms: np.ndarray | None = None,
             fields: tuple[str, ...] = ("position",)) -> Block:
        self.check_range(start, stop)
        missing = [fl for fl in fields if fl not in self._datasets]
        if missing:
            raise InputFileError(self._path, f"has no {', '.join(missing)} in particles/{self.info.group}")
        arrays = {fl: self._read_field(fl, start, stop, atoms) for fl in fields}
        box, time, step = self._frame_meta(start, stop)
        return Block(start, stop, arrays["position"], box, time, step,
                     velocities=arrays.get("velocity"), forces=arrays.get("force"))

    def _frame_meta(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Box, time and step of frames [start, stop).

        Three small HDF5 reads per block cost ~1 ms, as much as reading a 4 MB
        slab, so they are read once for a span: the one :meth:`preload_frame_meta`
        named (an MPI rank's share), else the whole file on the first block read.
        Single frames (the first frame and the reference, read while a job is
        prepared) are read alone.
        """
        lo = self._meta_start
        if self._meta is not None and lo <= start and stop <= lo + len(self._meta[1]):
            return tuple(a[start - lo:stop - lo].copy() for a in self._meta)
        if stop - start <= 1 or self.n_frames > META_CACHE_FRAMES:
            return self._frame_meta_uncached(start, stop)
        self.preload_frame_meta(0, self.n_frames)
        return self._frame_meta(start, stop)

    def preload_frame_meta(self, start: int, stop: int) -> None:
        """Read box, time and step of frames [start, stop) now, for the reads that follow."""
        self.check_range(start, stop)
        self._meta_start, self._meta = start, self._frame_meta_uncached(start, stop)

    def _frame_meta_uncached(self, start: int, stop: int):
        return (self._read_box(start, stop), self.info.time.values(self.file, start, stop, np.float64),
                self.info.step.values(self.file, start, stop, np.int64))

    def _read_field(self, fl: str, start: int, stop: int, atoms: np.ndarray | None) -> np.ndarray:
        ds = self._datasets[fl]
        n = stop - start
        lo, hi, index = 0, self.n_atoms, None
        if atoms is not None:
            atoms = np.asarray(atoms, dtype=np.intp)
            if atoms.size and (atoms.min() < 0 or atoms.max() >= self.n_atoms):
                raise InputFileError(self._path, f"atom index out of range for {self.n_atoms} atoms")
            a_lo, a_hi = (int(atoms.min()), int(atoms.max()) + 1) if atoms.size else (0, 0)
            if a_hi - a_lo <= SPAN_FRACTION * self.n_atoms:
                lo, hi = a_lo, a_hi
            index = atoms - lo
            if lo == 0 and hi == self.n_atoms and np.array_equal(atoms, np.arange(self.n_atoms)):
                index = None
        if index is None:
            out = self._out_array(fl, (n, hi - lo, 3))
            for a, b in self._slabs(start, stop, hi - lo) if n and hi > lo else ():
                self._read_direct(ds, out, np.s_[a:b, lo:hi, :], np.s_[a - start:b - start])
        else:
            # The span in cache-sized slabs, each gathered into the selected atoms while it
            # is still in cache (a gather from a whole 80 MB span cost as much as reading it).
            out = self._out_array(fl + ":selected", (n, len(index), 3))
            # (Collective MPI-IO reads keep whole slabs: every rank must make the same calls.)
            size = MAX_SLAB_BYTES if self._collective else GATHER_SLAB_BYTES
            slabs = list(self._slabs(start, stop, hi - lo, size)) if n and hi > lo else []
            span = self._out_array(fl, (max((b - a for a, b in slabs), default=0), hi - lo, 3))
            for a, b in slabs:
                self._read_direct(ds, span, np.s_[a:b, lo:hi, :], np.s_[0:b - a])
                # mode="clip": indices were checked above, and "raise" buffers the output
                np.take(span[:b - a], index, axis=1, out=out[a - start:b - start], mode="clip")
        self.bytes_read += n * (hi - lo) * 12
        scale = self.info.scales.get(fl, 1.0)
        if scale != 1.0:
            out *= np.float32(scale)
        return out

    def _read_direct(self, ds, buf, source_sel, dest_sel) -> None:
        if self._collective:
            with ds.collective:
                ds.read_direct(buf, source_sel, dest_sel)
        else:
            ds.read_direct(buf, source_sel, dest_sel)

    def _slabs(self, start: int, stop: int, n_cols: int, max_bytes: int | None = None):
        """Split [start, stop) into chunk-aligned slabs of at most ``max_bytes`` (or one chunk)."""
        max_bytes = MAX_SLAB_BYTES if max_bytes is None else max_bytes
        frame_bytes = max(1, n_cols * 12)
        cf = self.chunk_frames
        per = max(cf, (max_bytes // frame_bytes) // cf * cf)
        a = start
        while a < stop:
            b = min(stop, (a // cf) * cf + per)
            yield a, b
            a = b

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
        try:
            if self.file.id.valid:
                self.file.close()
        except Exception:   # closing during interpreter shutdown
            pass
