"""Write one particle group of an H5MD 1.1 file (layout: see ``h5md.schema``).

Crash consistency: the frame count of an H5MD file is the length of ``step`` (and ``time``). The per-frame data
is written first, the file flushed, and only then do ``step``/``time`` grow (:meth:`H5MDWriter.commit`), so a
reader, or a file left by a killed job, never counts a frame whose data is incomplete.
"""

from __future__ import annotations

import logging
import math
import os

import h5py
import numpy as np

from .. import _version
from ..box import dimensions_to_edges
from ..errors import ConfigError
from ..hdf5.hdf5 import cover_allocated, open_h5, trim_cover
from ..units import WRITE_UNITS, factor
from .codecs import Deltas, codec_for, deltas_of, encode, lossy_attrs_for, stored_dtype
from .layout import Layout

log = logging.getLogger(__name__)
#: Root attribute set when the writer closes normally: the file will not grow (followers stop).
COMPLETE_ATTR = "trajscale_complete"

#: Per-frame datasets of unknown length grow by about this much at a time.
GROW_BYTES = 32 * 1024**2


class H5MDWriter:
    """Write one particle group of an H5MD 1.1 file in slabs of frames.

    Parameters
    ----------
    path
        Output file (the caller writes to a temporary name and renames it).
    n_atoms
        Atoms per frame.
    n_frames
        Total frames, if known: required for the contiguous layout; lets chunked datasets be allocated once.
    layout
        Chunk shape and compression of the per-atom datasets.
    fields
        Which of position, velocity, force to write.
    box
        ``"cuboid"``, ``"triclinic"`` or ``None`` (no periodic box).
    units
        Unit string per quantity (position, box, velocity, force, time) to write in (default: MDAnalysis's base
        units); :meth:`write` takes data in trajscale's units and converts it.
    species, masses, charges, ids, names, resids, resnames, segids
        Time-independent per-particle data, written when given (the residues as non-standard datasets, so the
        file is its own topology: :mod:`trajscale.topology.h5md`).
    driver, comm, mpi_info
        ``driver="mpio"`` with an MPI communicator (and MPI-IO hints): every rank runs the same calls.
    precision, encoding
        Store positions rounded to ``precision`` Å, as ``"floats"``, ``"deltas"`` or ``"deltas32"``
        (:mod:`trajscale.h5md.codecs`); None (the default) is lossless.
    reference
        ``"deltas"``: the trajectory's first frame (Å), from which the atoms' references are planned. Writers of
        parts of one output must all pass it; a writer of a whole file may leave it to its first frame.
    """

    #: an ``mpio`` file's communicator; storage given to datasets since the last flush; the name if renamed
    _comm, _grown, _renamed = None, 0, None

    def __init__(self, path: str | os.PathLike, n_atoms: int, *, n_frames: int | None = None,
                 layout: Layout | None = None, fields: tuple[str, ...] = ("position",),
                 box: str | None = "triclinic", group: str = "all", author: str = "trajscale",
                 species=None, masses=None, charges=None, driver: str | None = None,
                 comm=None, units: dict[str, str] | None = None, ids=None, names=None,
                 mpi_info=None, precision: float | None = None, encoding: str = "floats",
                 reference: np.ndarray | None = None, resids=None, resnames=None, segids=None) -> None:
        self.layout = layout or Layout()
        self.n_atoms = int(n_atoms)
        self.n_frames_total = n_frames
        self.fields = tuple(fields)
        self.box = box
        self.group = group
        self.units = {**WRITE_UNITS, **(units or {})}
        # value in the file = value in trajscale's units / factor (checked here: unknown units fail early)
        self._factors = {q: factor(q, u) for q, u in self.units.items()}
        self.n_written = 0      # committed frames: the length of step/time
        self._obs: dict[str, h5py.Dataset] = {}
        self._comm = comm
        self.file = open_h5(path, "w", driver=driver, comm=comm, **({"info": mpi_info} if mpi_info else {}),
                            **self.layout.file_kwargs())
        f = self.file
        # False until this writer closes (a follower waits for True): made now, so setting it changes the value in
        # place and the root group's header does not grow into a block at the file's end
        f.attrs[COMPLETE_ATTR] = False
        h5md = f.create_group("h5md")
        h5md.attrs["version"] = np.array([1, 1], dtype=np.int32)
        h5md.create_group("author").attrs["name"] = author
        creator = h5md.create_group("creator")
        creator.attrs["name"] = "trajscale"
        creator.attrs["version"] = _version.version()
        pg = self._pg = f.create_group(f"particles/{group}")
        #: attributes of lossy positions (h5md.codecs), None when lossless
        self._lossy = None if precision is None else lossy_attrs_for(
            precision, encoding, self.units["position"], self._factors["position"])
        self._codec = None   # delta coding (h5md.codecs), planned from the reference or the first frame
        elements = [pg.create_group(fl) for fl in self.fields]
        first = elements[0]
        # Always resizable: they grow only when a frame is complete (commit).
        first.create_dataset("step", shape=(0,), maxshape=(None,), dtype=np.int64, chunks=(1024,))
        first.create_dataset("time", shape=(0,), maxshape=(None,), dtype=np.float64, chunks=(1024,))
        first["time"].attrs["unit"] = self.units["time"]
        for el in elements[1:]:   # one step/time shared by all elements: hard links, as the spec allows
            el["step"] = first["step"]
            el["time"] = first["time"]
        # The spec (and MDAnalysis) require a box group; without periodicity ``boundary`` says so (no edges).
        b = pg.create_group("box")
        b.attrs["dimension"] = np.int32(3)
        b.attrs["boundary"] = np.array([b"periodic" if box else b"none"] * 3, dtype="S8")
        if box is not None:
            e = b.create_group("edges")
            shape = (3, 3) if box == "triclinic" else (3,)
            n = n_frames if n_frames is not None else 0
            e.create_dataset("value", shape=(n, *shape), maxshape=(None, *shape), dtype=np.float32,
                             chunks=(1024, *shape))
            e["value"].attrs["unit"] = self.units["box"]
            e["step"] = first["step"]
            e["time"] = first["time"]
        topology = {name: _narrowed(np.asarray(arr, dtype="S" if name in ("name", "resname", "segid") else None))
                    for name, arr in (("species", species), ("mass", masses), ("charge", charges), ("id", ids),
                                      ("resid", resids), ("name", names), ("resname", resnames),
                                      ("segid", segids)) if arr is not None}
        for name, arr in topology.items():   # (their bytes are written last, below)
            # compressed by the filter every HDF5 reader has (MPI-IO writes no filtered data independently)
            packed = {} if comm is not None or not arr.size else {
                "chunks": (min(arr.size, ATOM_CHUNK),), "compression": "gzip", "shuffle": True}
            pg.create_dataset(name, shape=arr.shape, dtype=arr.dtype, **packed)
        # The per-atom datasets after every other object (their storage is allocated on creation), so the file's
        # structure is in its first kilobytes, where a reader over the network finds it in one request.
        for fl, el in zip(self.fields, elements, strict=True):
            el.create_dataset("value", **self._dataset_kw(),
                              dtype=stored_dtype(self._lossy) if fl == "position" else np.float32)
            el["value"].attrs["unit"] = self.units[fl]
            if fl == "position" and self._lossy:
                el["value"].attrs.update(self._lossy)
                if self._lossy["trajscale_encoding"] != "floats":
                    self._plan_codec(None if reference is None else self.in_file_units(reference, fl))
        for name, arr in topology.items():
            pg[name][...] = arr
        self._grown = sum(ds.id.get_storage_size() for ds in self._per_frame())   # (allocated ahead)

    @classmethod
    def reopen(cls, path: str | os.PathLike, n_written: int, n_frames: int | None = None, *,
               driver: str | None = None, comm=None, mpi_info=None) -> H5MDWriter:
        """Continue an interrupted write after its first ``n_written`` frames (``step``/``time`` cut back to it)."""
        self = cls.__new__(cls)
        self._comm = comm
        self.file = f = open_h5(path, "r+", driver=driver, comm=comm, **({"info": mpi_info} if mpi_info else {}))
        if COMPLETE_ATTR in f.attrs:   # written to again: no longer complete until this writer closes
            f.attrs.modify(COMPLETE_ATTR, False)
        try:
            (self.group,) = f["particles"].keys()
            pg = self._pg = f[f"particles/{self.group}"]
            self.fields = tuple(fl for fl in ("position", "velocity", "force") if fl in pg)
            pos = pg[self.fields[0]]["value"]
            self.layout = Layout("contiguous") if pos.chunks is None else Layout()
            self.n_atoms, self.n_frames_total = int(pos.shape[1]), n_frames
            edges = pg["box"].get("edges")
            self.box = None if edges is None else "triclinic" if edges["value"].ndim == 3 else "cuboid"
            unit = {fl: pg[fl]["value"] for fl in self.fields}
            unit.update(time=pg[self.fields[0]]["time"], **({"box": edges["value"]} if edges else {}))
            # (delta-coded positions keep their length unit in trajscale_unit)
            self.units = {**WRITE_UNITS, **{q: _text(ds.attrs.get("trajscale_unit", ds.attrs["unit"]))
                                            for q, ds in unit.items()}}
            self._factors = {q: factor(q, u) for q, u in self.units.items()}
            lossy = {k: v for k, v in pg["position"]["value"].attrs.items() if k.startswith("trajscale_")} \
                if "position" in pg else {}
            self._lossy = {k: _text(v) if isinstance(v, (bytes, str)) else v for k, v in lossy.items()} or None
            try:
                self._codec = deltas_of(pos)
            except ValueError:   # delta-coded, interrupted before its first frame: planned from the next
                self._codec = None
            obs = f.get("observables", {})
            self._obs = {name: obs[name]["value"] for name in obs}
            first = pg[self.fields[0]]
            if first["step"].shape[0] < n_written:
                raise ValueError(f"{path}: {first['step'].shape[0]} frames committed, the record says {n_written}")
            first["step"].resize(n_written, axis=0)
            first["time"].resize(n_written, axis=0)
            self.n_written = int(n_written)
        except BaseException:
            f.close()
            raise
        return self

    @property
    def _contiguous(self) -> bool:
        return self.layout.chunks == "contiguous"

    def _dataset_kw(self) -> dict:
        n = self.n_frames_total
        chunks = self.layout.chunk_shape(self.n_atoms, 4, n)
        if chunks is None:
            if n is None:
                raise ValueError("the contiguous layout needs the number of frames in advance")
            # allocated now: its address is known before any frame is written (h5md.direct_write)
            return {"shape": (n, self.n_atoms, 3), "dcpl": early_allocation()}
        kw = {"shape": (n or 0, self.n_atoms, 3), "maxshape": (None, self.n_atoms, 3), "chunks": chunks}
        kw.update(self.layout.h5py_kwargs())
        if not self.layout.compression and chunks is not True:
            # Chunks allocated on creation or growth, not first write: writing a frame then changes no metadata,
            # so a job killed mid-frame leaves the last flushed metadata intact.
            kw["dcpl"] = early_allocation()
        return kw

    def add_observable(self, name: str, shape: tuple[int, ...] = (), dtype=np.float64, unit: str | None = None):
        """Create a time-dependent observable sharing position's step and time."""
        g = self.file.require_group("observables").create_group(name)
        n = self._pg[self.fields[0]]["value"].shape[0]
        g.create_dataset("value", shape=(n, *shape), maxshape=(None, *shape), dtype=dtype,
                         chunks=(1024, *shape) if shape else (1024,))
        if unit:
            g["value"].attrs["unit"] = unit
        first = self._pg[self.fields[0]]
        g["step"] = first["step"]
        g["time"] = first["time"]
        self._obs[name] = g["value"]

    def write(self, *, position: np.ndarray, step: np.ndarray, time: np.ndarray,
              box: np.ndarray | None = None, velocity: np.ndarray | None = None,
              force: np.ndarray | None = None, observables: dict | None = None) -> None:
        """Append a slab of frames (one HDF5 write per dataset), then commit them."""
        k = len(position)
        if k == 0:
            return
        a, b = self.n_written, self.n_written + k
        data = {"position": position, "velocity": velocity, "force": force}
        self.reserve(b)
        for fl in self.fields:
            arr = data[fl]
            if arr is None:
                raise ValueError(f"{fl} missing for frames {a}-{b}")
            arr = self.in_file_units(arr, fl)
            if fl == "position" and self._lossy:
                try:
                    arr = self.encode_positions(arr)
                except ValueError as exc:
                    raise ConfigError(f"frames {a}-{b}: {exc}") from None
            self._pg[fl]["value"].write_direct(arr, dest_sel=np.s_[a:b])
        if self.box is not None:
            self._pg["box/edges/value"][a:b] = self.edges(box, k)
        for name, val in (observables or {}).items():
            self._obs[name][a:b] = val
        self.commit(b, step, time)

    def encode_positions(self, values: np.ndarray) -> np.ndarray:
        """Lossy ``values`` (file units) as the position dataset stores them (an unplanned codec: ``values[0]``)."""
        if self._codec is None and self._lossy["trajscale_encoding"] != "floats":
            self._plan_codec(values[0])
        return encode(values, self._lossy, self._codec)

    def _plan_codec(self, reference: np.ndarray | None) -> None:
        """The positions' delta codec, planned from ``reference`` (file units) and stored with them."""
        self._codec = codec_for(self._lossy, reference)
        if isinstance(self._codec, Deltas):
            self._codec.store(self._pg["position"]["value"])

    def value(self, name: str) -> h5py.Dataset:
        """The per-frame ``value`` dataset of a field (``position``, ...) or of ``box``."""
        return self._pg["box/edges/value"] if name == "box" else self._pg[name]["value"]

    def commit(self, n: int, step: np.ndarray | None, time: np.ndarray | None, publish: bool = True,
               fsync: bool = False) -> None:
        """Count frames ``[n_written, n)``: flush their data, then grow step/time.

        Under ``mpio`` every rank calls this (collective); only the ranks passing ``step``/``time`` write them.
        With ``publish`` the grown step/time are flushed too, so a reader now (or a killed job's file) counts the
        frames; without, one flush per frame instead of two, the file a frame behind. ``fsync`` then puts the file
        on the disk (under ``mpio`` the flush is that already)."""
        a = self.n_written
        if n <= a:
            return
        self._flush()   # every frame's data is in the file before it is counted
        first = self._pg[self.fields[0]]
        self._resize(first["step"], n)
        self._resize(first["time"], n)
        if step is not None:
            first["step"][a:n] = np.asarray(step, dtype=np.int64)
            first["time"][a:n] = self.in_file_units(time, "time", np.float64)
        if publish or fsync:
            self._flush()
        if fsync and self.file.driver != "mpio":
            os.fsync(self.file.id.get_vfd_handle())
        self.n_written = n

    def in_file_units(self, arr: np.ndarray, quantity: str, dtype=np.float32) -> np.ndarray:
        """``arr`` (trajscale's units) in the file's unit of ``quantity``, rounded once to ``dtype``."""
        return in_file_units(arr, self._factors[quantity], dtype)

    def edges(self, box: np.ndarray | None, k: int) -> np.ndarray:
        """``(k, 6)`` box dimensions (or None: no box) as this file's edges."""
        return box_edges(box, k, self._factors["box"], self.box)

    def per_frame_names(self) -> list[str]:
        """Every per-frame dataset: the fields' and box's values, observables, and the shared step/time."""
        first = self._pg[self.fields[0]]
        return [ds.name for ds in self._per_frame()] + [first["step"].name, first["time"].name]

    def preallocate(self) -> list[str]:
        """Size and allocate every per-frame dataset for all ``n_frames`` frames; return their names. Workers then
        write at fixed addresses; the file counts every frame now, so it stays under a temporary name."""
        n = self.n_frames_total
        if n is None:
            raise ValueError("preallocate needs the number of frames in advance")
        self.reserve(n)
        first = self._pg[self.fields[0]]
        first["step"].resize(n, axis=0)
        first["time"].resize(n, axis=0)
        for name in self.per_frame_names():
            ds = self.file[name]
            early = ds.id.get_create_plist().get_alloc_time() == h5py.h5d.ALLOC_TIME_EARLY
            if not early and ds.shape[0]:   # allocated only when written: zeros give the chunks addresses
                ds.write_direct(np.zeros(ds.shape, ds.dtype))   # (a few bytes per frame: step, time, box)
        self.n_written = n
        return self.per_frame_names()

    def _per_frame(self) -> list[h5py.Dataset]:
        out = [self._pg[fl]["value"] for fl in self.fields]
        if self.box is not None:
            out.append(self._pg["box/edges/value"])
        return out + list(self._obs.values())

    def reserve(self, n: int) -> None:
        """Room for ``n`` frames in every per-frame dataset but step/time (grown ~GROW_BYTES ahead; collective)."""
        pos = self._pg[self.fields[0]]["value"]
        if n <= pos.shape[0]:
            return
        if self._contiguous:
            raise ValueError(f"contiguous dataset was sized for {self.n_frames_total} frames; got {n}")
        if self.n_frames_total is not None and n <= self.n_frames_total:
            new = self.n_frames_total
        else:   # double, by at most ~GROW_BYTES (HDF5 does not give back the space of unused rows)
            cf, cur = pos.chunks[0], pos.shape[0]
            cap = max(1, GROW_BYTES // max(1, self.n_atoms * 12 * len(self.fields) * cf)) * cf
            new = max(math.ceil(n / cf) * cf, min(2 * cur, cur + cap))
        for ds in self._per_frame():
            self._resize(ds, new)

    def close(self, abandoned: bool = False) -> None:
        """Close the file; warn about missing frames unless ``abandoned`` (an error the caller reports)."""
        if self.file.id.valid:
            if not abandoned and self.n_frames_total is not None and self.n_written != self.n_frames_total:
                log.warning("%s: %d of %d frames written", self.file.filename, self.n_written,
                            self.n_frames_total)
            # Drop the rows reserved ahead, except those a resumed write of known length fills (HDF5 forgets
            # freed space at close: regrowing would place the chunks anew at the file's end each time).
            keep = abandoned and self.n_frames_total is not None
            if not self._contiguous and not keep:
                for ds in self._per_frame():
                    if ds.shape[0] != self.n_written:
                        ds.resize(self.n_written, axis=0)
            if not abandoned:   # a follower (trajscale run --follow) ends here; a killed writer never says it
                self.file.attrs.modify(COMPLETE_ATTR, True)
            cover, path = self._cover_allocated(), self._path_now()   # (closing flushes too)
            self.file.close()
            trim_cover(path, cover)

    def _flush(self) -> None:
        """Flush, the file first extended to its allocated space (a kill mid-flush leaves a file HDF5 opens)."""
        cover = self._cover_allocated()
        self.file.flush()
        trim_cover(self._path_now(), cover)

    def _resize(self, ds: h5py.Dataset, n: int) -> None:
        """Resize ``ds`` to ``n`` rows, counting the storage that gives it (allocated early: on resize)."""
        old, rows = ds.shape[0], ds.chunks[0] if ds.chunks else 0
        if not rows or -(-n // rows) == -(-old // rows):   # (no new chunk: nothing allocated)
            ds.resize(n, axis=0)
            return
        before = ds.id.get_storage_size()
        ds.resize(n, axis=0)
        self._grown += max(0, ds.id.get_storage_size() - before)

    def renamed(self, path: str | os.PathLike) -> None:
        """The open file was renamed to ``path`` (its writer publishes it under its final name)."""
        self._renamed = os.fspath(path)

    def _path_now(self) -> str:
        return self._renamed or self.file.filename

    def _cover_allocated(self) -> tuple[int, int] | None:
        cover = cover_allocated(self.file, self._grown, self._comm, self._path_now())
        self._grown = 0
        return cover

    def __enter__(self) -> H5MDWriter:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(abandoned=exc_type is not None)


#: Atoms in a chunk of a per-atom dataset (ids, species, names, masses...).
ATOM_CHUNK = 1 << 18


def _narrowed(arr: np.ndarray) -> np.ndarray:
    """Integers in the smallest signed type that holds them (an atom's id or species in a byte or two, where
    MDAnalysis hands int64); other arrays as they are."""
    if arr.dtype.kind not in "iu" or not arr.size:
        return arr
    lo, hi = int(arr.min()), int(arr.max())
    kind = next((t for t in (np.int8, np.int16, np.int32, np.int64)
                 if np.iinfo(t).min <= lo and hi <= np.iinfo(t).max), None)
    return arr if kind is None else arr.astype(kind, copy=False)


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def in_file_units(arr: np.ndarray, f: float, dtype=np.float32) -> np.ndarray:
    """``arr`` (trajscale's units) divided by the file unit's factor ``f``, rounded once to ``dtype``."""
    if f == 1.0:
        return np.ascontiguousarray(arr, dtype=dtype)
    return (np.asarray(arr, dtype=np.float64) / f).astype(dtype)


def box_edges(box: np.ndarray | None, k: int, f: float, kind: str | None) -> np.ndarray:
    """``(k, 6)`` box dimensions (None: none) as H5MD edges of ``kind``, lengths divided by the unit factor ``f``."""
    if box is None:
        box = np.zeros((k, 6), np.float32)
    box = np.array(box, dtype=np.float64)
    box[:, :3] /= f   # lengths only; the angles stay degrees
    if kind == "triclinic":
        return dimensions_to_edges(box)
    return box[:, :3].astype(np.float32)


def early_allocation() -> h5py.h5p.PropDCID:
    """Creation properties: storage allocated on creation or growth, no fill written (a fill doubles the fsync)."""
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
    return dcpl
