"""Write one particle group of an H5MD 1.1 file (layout: see ``store.schema``)."""

from __future__ import annotations

import logging
import os

import h5py
import numpy as np

from .._version import __version__
from .box import dimensions_to_edges
from .hdf5 import open_h5
from .layout import Layout
from .units import WRITE_UNITS, factor

log = logging.getLogger(__name__)


class H5MDWriter:
    """Write one particle group of an H5MD 1.1 file in slabs of frames.

    Parameters
    ----------
    path
        Output file (the caller writes to a temporary name and renames it).
    n_atoms
        Atoms per frame.
    n_frames
        Total frames, if known: required for the contiguous layout and lets
        chunked datasets be allocated once.
    layout
        Chunk shape and compression of the per-atom datasets.
    fields
        Which of position, velocity, force to write.
    box
        ``"cuboid"``, ``"triclinic"`` or ``None`` (no periodic box).
    units
        Unit string per quantity (position, box, velocity, force, time) to
        write in; default trajscale's own (MDAnalysis's base units). Data
        handed to :meth:`write` is always in trajscale's units and converted
        here.
    """

    def __init__(self, path: str | os.PathLike, n_atoms: int, *, n_frames: int | None = None,
                 layout: Layout | None = None, fields: tuple[str, ...] = ("position",),
                 box: str | None = "triclinic", group: str = "all", author: str = "trajscale",
                 species=None, masses=None, charges=None, driver: str | None = None,
                 comm=None, units: dict[str, str] | None = None) -> None:
        self.layout = layout or Layout()
        self.n_atoms = int(n_atoms)
        self.n_frames_total = n_frames
        self.fields = tuple(fields)
        self.box = box
        self.group = group
        self.units = {**WRITE_UNITS, **(units or {})}
        # value in the file = value in trajscale's units / factor (checked here: unknown units fail early)
        self._factors = {q: factor(q, u) for q, u in self.units.items()}
        self.n_written = 0
        self._obs: dict[str, h5py.Dataset] = {}
        self.file = open_h5(path, "w", driver=driver, comm=comm)
        f = self.file
        h5md = f.create_group("h5md")
        h5md.attrs["version"] = np.array([1, 1], dtype=np.int32)
        h5md.create_group("author").attrs["name"] = author
        creator = h5md.create_group("creator")
        creator.attrs["name"] = "trajscale"
        creator.attrs["version"] = __version__
        pg = f.create_group(f"particles/{group}")
        first = None
        for fl in self.fields:
            el = pg.create_group(fl)
            el.create_dataset("value", **self._dataset_kw(), dtype=np.float32)
            el["value"].attrs["unit"] = self.units[fl]
            if first is None:
                n = n_frames if n_frames is not None else 0
                maxshape = None if self._contiguous else (None,)
                el.create_dataset("step", shape=(n,), maxshape=maxshape, dtype=np.int64,
                                  chunks=None if self._contiguous else (max(1024, 1),))
                el.create_dataset("time", shape=(n,), maxshape=maxshape, dtype=np.float64,
                                  chunks=None if self._contiguous else (1024,))
                el["time"].attrs["unit"] = self.units["time"]
                first = el
            else:   # one step/time shared by all elements: hard links, as the spec allows
                el["step"] = first["step"]
                el["time"] = first["time"]
        self._pg = pg
        # The spec (and MDAnalysis) require a box group; without periodicity it
        # says so in ``boundary`` and has no edges.
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
        for name, arr in (("species", species), ("mass", masses), ("charge", charges)):
            if arr is not None:
                pg.create_dataset(name, data=np.asarray(arr))

    @property
    def _contiguous(self) -> bool:
        return self.layout.chunks == "contiguous"

    def _dataset_kw(self) -> dict:
        n = self.n_frames_total
        chunks = self.layout.chunk_shape(self.n_atoms, 4, n)
        if chunks is None:
            if n is None:
                raise ValueError("the contiguous layout needs the number of frames in advance")
            return {"shape": (n, self.n_atoms, 3)}
        kw = {"shape": (n or 0, self.n_atoms, 3), "maxshape": (None, self.n_atoms, 3), "chunks": chunks}
        kw.update(self.layout.h5py_kwargs())
        return kw

    def add_observable(self, name: str, shape: tuple[int, ...] = (), dtype=np.float64, unit: str | None = None):
        """Create a time-dependent observable sharing position's step and time."""
        g = self.file.require_group("observables").create_group(name)
        n = self.n_frames_total or 0
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
        """Append a slab of frames (one HDF5 write per dataset)."""
        k = len(position)
        if k == 0:
            return
        a, b = self.n_written, self.n_written + k
        data = {"position": position, "velocity": velocity, "force": force}
        first = self._pg[self.fields[0]]
        self._ensure(b)
        for fl in self.fields:
            arr = data[fl]
            if arr is None:
                raise ValueError(f"{fl} missing for frames {a}-{b}")
            self._pg[fl]["value"].write_direct(self._in_file_units(arr, fl), dest_sel=np.s_[a:b])
        first["step"][a:b] = step
        first["time"][a:b] = self._in_file_units(time, "time", np.float64)
        if self.box is not None:
            edges = self._edges(box, k)
            self._pg["box/edges/value"][a:b] = edges
        for name, val in (observables or {}).items():
            self._obs[name][a:b] = val
        self.n_written = b

    def _in_file_units(self, arr: np.ndarray, quantity: str, dtype=np.float32) -> np.ndarray:
        """``arr`` (trajscale's units) in the file's unit of ``quantity``, rounded once to ``dtype``."""
        f = self._factors[quantity]
        if f == 1.0:
            return np.ascontiguousarray(arr, dtype=dtype)
        return (np.asarray(arr, dtype=np.float64) / f).astype(dtype)

    def _edges(self, box: np.ndarray | None, k: int) -> np.ndarray:
        if box is None:
            box = np.zeros((k, 6), np.float32)
        box = np.array(box, dtype=np.float64)
        box[:, :3] /= self._factors["box"]   # lengths only; the angles stay degrees
        if self.box == "triclinic":
            return dimensions_to_edges(box)
        return box[:, :3].astype(np.float32)

    def _ensure(self, n: int) -> None:
        if self.n_frames_total is not None and n <= self.n_frames_total:
            return
        if self._contiguous:
            raise ValueError(f"contiguous dataset was sized for {self.n_frames_total} frames; got {n}")
        for fl in self.fields:
            self._pg[fl]["value"].resize(n, axis=0)
        self._pg[self.fields[0]]["step"].resize(n, axis=0)
        self._pg[self.fields[0]]["time"].resize(n, axis=0)
        if self.box is not None:
            self._pg["box/edges/value"].resize(n, axis=0)
        for ds in self._obs.values():
            ds.resize(n, axis=0)

    def close(self, abandoned: bool = False) -> None:
        """Close the file; warn about missing frames unless the write is ``abandoned`` (an error or
        interrupt, which the caller reports: its temporary file means nothing to the user)."""
        if self.file.id.valid:
            if not abandoned and self.n_frames_total is not None and self.n_written != self.n_frames_total:
                log.warning("%s: %d of %d frames written", self.file.filename, self.n_written,
                            self.n_frames_total)
            self.file.close()

    def __enter__(self) -> H5MDWriter:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(abandoned=exc_type is not None)
