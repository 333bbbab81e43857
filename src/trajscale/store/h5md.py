"""H5MD 1.1 files: open and validate, describe, and write.

trajscale writes lengths in Å, time in ps, velocities in Å/ps and forces in
kJ/(mol Å) (MDAnalysis's base units, so MDAnalysis reads them without
conversion) and reads any unit MDAnalysis knows, converting to those.

Layout written (``<group>`` is ``all`` unless told)::

    h5md/                 version=[1, 1]; author/name; creator/name, version
    particles/<group>/
        position/ value (F, N, 3) [unit]  step (F,)  time (F,) [unit]
        velocity/ ...  force/ ...          (optional; step/time hard-linked)
        box/ [dimension=3, boundary]  edges/ value (F, 3) or (F, 3, 3), step, time
        species (N,)  mass (N,)  charge (N,)   (optional, time-independent)
    observables/<name>/ value (F, ...) step time  (optional)
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np

from .. import __version__
from ..errors import InputFileError, NotH5MDError
from ..util import check_input_file
from .layout import Layout

log = logging.getLogger(__name__)

LENGTH_TO_ANGSTROM = {"Angstrom": 1.0, "A": 1.0, "nm": 10.0, "pm": 0.01, "fm": 1e-5}
TIME_TO_PS = {"ps": 1.0, "fs": 1e-3, "ns": 1e3, "AKMA": 4.888821e-2, "s": 1e12, "second": 1e12}
VELOCITY_TO_A_PS = {"Angstrom ps-1": 1.0, "Angstrom/ps": 1.0, "A ps-1": 1.0, "nm ps-1": 10.0,
                    "Angstrom fs-1": 1e3, "nm fs-1": 1e4, "Angstrom AKMA-1": 1 / 4.888821e-2,
                    "m s-1": 1e-2, "pm ps-1": 1e-2}
FORCE_TO_KJ_MOL_A = {"kJ mol-1 Angstrom-1": 1.0, "kJ mol-1 nm-1": 0.1, "Newton": 6.02214076e13,
                     "N": 6.02214076e13, "kcal mol-1 Angstrom-1": 4.184}
UNIT_TABLES = {"position": LENGTH_TO_ANGSTROM, "velocity": VELOCITY_TO_A_PS,
               "force": FORCE_TO_KJ_MOL_A}
WRITE_UNITS = {"position": "Angstrom", "velocity": "Angstrom ps-1",
               "force": "kJ mol-1 Angstrom-1", "time": "ps"}
FIELDS = ("position", "velocity", "force")


def open_h5(path: str | os.PathLike, mode: str = "r", driver: str | None = None,
            comm=None, **kw) -> h5py.File:
    """Open an HDF5 file, turning every failure into one clear InputFileError."""
    p = Path(path)
    if mode == "r":
        check_input_file(p)
        if not h5py.is_hdf5(str(p)):
            raise InputFileError(p, "not an HDF5 file (wrong format, or truncated before its superblock)")
    if driver == "mpio":
        kw.update(driver="mpio", comm=comm)
    elif driver:
        kw["driver"] = driver
    try:
        return h5py.File(str(p), mode, **kw)
    except OSError as exc:
        raise InputFileError(p, f"cannot open as HDF5 ({_short(exc)}); the file may be truncated") from None


def _short(exc: BaseException) -> str:
    msg = str(exc)
    return msg.split("(", 1)[0].strip() if "errno" in msg else msg.splitlines()[0]


@dataclass(frozen=True, slots=True)
class TimeAxis:
    """Where an element's step/time live: a per-frame dataset, or fixed (scalar + offset)."""

    path: str | None          # dataset path if explicit, else None
    fixed: float | None = None
    offset: float = 0.0
    scale: float = 1.0        # unit conversion to ps (time) or 1 (step)

    def values(self, f: h5py.File, start: int, stop: int, dtype) -> np.ndarray:
        if self.path is None:
            idx = np.arange(start, stop, dtype=np.float64)
            return (self.offset + idx * (self.fixed or 0.0)).astype(dtype) * self.scale
        out = f[self.path][start:stop].astype(dtype)
        return out * self.scale if self.scale != 1.0 else out


@dataclass(frozen=True)
class H5MDInfo:
    """Everything a reader needs to know about one particle group of an H5MD file."""

    path: str
    group: str
    n_frames: int
    n_atoms: int
    fields: tuple[str, ...]
    scales: dict = field(default_factory=dict)      # field -> factor to trajscale units
    units: dict = field(default_factory=dict)       # field -> unit string in the file
    step: TimeAxis = TimeAxis(None, 1.0)
    time: TimeAxis = TimeAxis(None, 1.0)
    box_path: str | None = None                      # edges/value or fixed edges dataset
    box_time_dependent: bool = False
    boundary: tuple[str, ...] = ("none", "none", "none")
    chunks: tuple[int, ...] | None = None
    compression: str | None = None
    compression_opts: object = None
    dtype: str = "float32"
    observables: tuple[str, ...] = ()

    def dataset(self, fld: str = "position") -> str:
        return f"particles/{self.group}/{fld}/value"

    @property
    def frame_bytes(self) -> int:
        return self.n_atoms * 3 * np.dtype(self.dtype).itemsize

    @property
    def chunk_frames(self) -> int:
        """Frames per chunk along time (1 for contiguous: any boundary is fine)."""
        return int(self.chunks[0]) if self.chunks else 1


def describe(f: h5py.File, group: str | None = None) -> H5MDInfo:
    """Validate ``f`` as H5MD and describe one particle group (the first with positions)."""
    path = f.filename
    if "particles" not in f:
        raise NotH5MDError(path, "no /particles group: not an H5MD file")
    groups = [g for g in f["particles"] if isinstance(f["particles"][g], h5py.Group)]
    if group is None:
        with_pos = [g for g in groups if "position" in f["particles"][g]]
        if not with_pos:
            raise NotH5MDError(path, "no particles/<group>/position in this H5MD file")
        group = with_pos[0]
    elif group not in groups:
        raise NotH5MDError(path, f"no particle group {group!r} (have: {', '.join(groups) or 'none'})")
    pg = f["particles"][group]
    if "position" not in pg or "value" not in pg["position"]:
        raise NotH5MDError(path, f"particles/{group} has no position/value dataset")
    pos = pg["position/value"]
    if pos.ndim != 3 or pos.shape[2] != 3:
        raise NotH5MDError(path, f"particles/{group}/position/value has shape {pos.shape}, expected (frames, atoms, 3)")
    fields = tuple(fl for fl in FIELDS if fl in pg and "value" in pg[fl])
    units, scales = {}, {}
    for fl in fields:
        unit = _attr_str(pg[fl]["value"], "unit")
        units[fl] = unit
        table = UNIT_TABLES[fl]
        if unit is None:
            scales[fl] = 1.0
        elif unit in table:
            scales[fl] = table[unit]
        else:
            raise NotH5MDError(path, f"particles/{group}/{fl} has unknown unit {unit!r}")
    step = _time_axis(pg["position"], "step", path)
    time = _time_axis(pg["position"], "time", path)
    box_path, box_td, boundary = None, False, ("none",) * 3
    if "box" in pg:
        box = pg["box"]
        b = box.attrs.get("boundary")
        if b is not None:
            boundary = tuple(x.decode() if isinstance(x, bytes) else str(x) for x in np.atleast_1d(b))
        if "edges" in box:
            edges = box["edges"]
            if isinstance(edges, h5py.Group):
                box_path, box_td = edges["value"].name, True
            else:
                box_path = edges.name
    obs = tuple(sorted(f["observables"].keys())) if "observables" in f else ()
    return H5MDInfo(
        path=path, group=group, n_frames=int(pos.shape[0]), n_atoms=int(pos.shape[1]),
        fields=fields, scales=scales, units=units, step=step, time=time,
        box_path=box_path, box_time_dependent=box_td, boundary=boundary,
        chunks=pos.chunks, compression=pos.compression, compression_opts=pos.compression_opts,
        dtype=str(pos.dtype), observables=obs,
    )


def _attr_str(obj, name: str) -> str | None:
    val = obj.attrs.get(name)
    if val is None:
        return None
    if isinstance(val, bytes):
        return val.decode()
    if isinstance(val, np.ndarray):
        val = val.item() if val.size == 1 else val[0]
        return val.decode() if isinstance(val, bytes) else str(val)
    return str(val)


def _time_axis(element: h5py.Group, name: str, path: str) -> TimeAxis:
    if name not in element:
        if name == "step":
            raise NotH5MDError(path, f"{element.name} has no step dataset")
        return TimeAxis(None, fixed=None)
    ds = element[name]
    scale = 1.0
    if name == "time":
        unit = _attr_str(ds, "unit")
        if unit is not None and unit not in TIME_TO_PS:
            raise NotH5MDError(path, f"{ds.name} has unknown time unit {unit!r}")
        scale = TIME_TO_PS.get(unit, 1.0) if unit else 1.0
    if ds.shape == ():   # the spec's "fixed" interval: value * i + offset
        offset = float(ds.attrs.get("offset", 0))
        return TimeAxis(None, fixed=float(ds[()]), offset=offset, scale=scale)
    return TimeAxis(ds.name, scale=scale)


def edges_to_dimensions(edges: np.ndarray) -> np.ndarray:
    """H5MD box edges, (F, 3) diagonal or (F, 3, 3) row vectors, to (F, 6) [a b c alpha beta gamma]."""
    edges = np.asarray(edges, dtype=np.float64)
    if edges.ndim == 2:   # (F, 3) cuboid
        out = np.zeros((edges.shape[0], 6))
        out[:, :3] = edges
        out[:, 3:] = 90.0
        return out.astype(np.float32)
    a, b, c = edges[:, 0], edges[:, 1], edges[:, 2]
    la, lb, lc = (np.linalg.norm(v, axis=1) for v in (a, b, c))

    def angle(u, v, lu, lv):
        with np.errstate(invalid="ignore", divide="ignore"):
            cos = np.einsum("ij,ij->i", u, v) / (lu * lv)
        return np.degrees(np.arccos(np.clip(np.nan_to_num(cos), -1, 1)))

    out = np.stack([la, lb, lc, angle(b, c, lb, lc), angle(a, c, la, lc), angle(a, b, la, lb)], axis=1)
    out[la == 0] = 0.0
    return out.astype(np.float32)


def dimensions_to_edges(dims: np.ndarray) -> np.ndarray:
    """(F, 6) box dimensions to (F, 3, 3) triclinic vectors (MDAnalysis convention)."""
    from MDAnalysis.lib.mdamath import triclinic_vectors

    dims = np.asarray(dims, dtype=np.float64)
    out = np.zeros((dims.shape[0], 3, 3), dtype=np.float32)
    for uniq in np.unique(dims, axis=0):   # boxes repeat; convert each distinct one once
        out[(dims == uniq).all(axis=1)] = triclinic_vectors(uniq)
    return out


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
    """

    def __init__(self, path: str | os.PathLike, n_atoms: int, *, n_frames: int | None = None,
                 layout: Layout | None = None, fields: tuple[str, ...] = ("position",),
                 box: str | None = "triclinic", group: str = "all", author: str = "trajscale",
                 species=None, masses=None, charges=None, driver: str | None = None,
                 comm=None) -> None:
        self.layout = layout or Layout()
        self.n_atoms = int(n_atoms)
        self.n_frames_total = n_frames
        self.fields = tuple(fields)
        self.box = box
        self.group = group
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
            el["value"].attrs["unit"] = WRITE_UNITS[fl]
            if first is None:
                n = n_frames if n_frames is not None else 0
                maxshape = None if self._contiguous else (None,)
                el.create_dataset("step", shape=(n,), maxshape=maxshape, dtype=np.int64,
                                  chunks=None if self._contiguous else (max(1024, 1),))
                el.create_dataset("time", shape=(n,), maxshape=maxshape, dtype=np.float64,
                                  chunks=None if self._contiguous else (1024,))
                el["time"].attrs["unit"] = WRITE_UNITS["time"]
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
            e["value"].attrs["unit"] = WRITE_UNITS["position"]
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
            self._pg[fl]["value"].write_direct(np.ascontiguousarray(arr, dtype=np.float32),
                                               dest_sel=np.s_[a:b])
        first["step"][a:b] = step
        first["time"][a:b] = time
        if self.box is not None:
            edges = self._edges(box, k)
            self._pg["box/edges/value"][a:b] = edges
        for name, val in (observables or {}).items():
            self._obs[name][a:b] = val
        self.n_written = b

    def _edges(self, box: np.ndarray | None, k: int) -> np.ndarray:
        if box is None:
            box = np.zeros((k, 6), np.float32)
        box = np.asarray(box)
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

    def close(self) -> None:
        if self.file.id.valid:
            if self.n_frames_total is not None and self.n_written != self.n_frames_total:
                log.warning("%s: %d of %d frames written", self.file.filename, self.n_written,
                            self.n_frames_total)
            self.file.close()

    def __enter__(self) -> H5MDWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
