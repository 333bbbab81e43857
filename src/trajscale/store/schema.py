"""H5MD 1.1 schema: validate a file and describe one particle group for readers.

Layout (``<group>`` is ``all`` unless told)::

    h5md/                 version=[1, 1]; author/name; creator/name, version
    particles/<group>/
        position/ value (F, N, 3) [unit]  step (F,)  time (F,) [unit]
        velocity/ ...  force/ ...          (optional; step/time hard-linked)
        box/ [dimension=3, boundary]  edges/ value (F, 3) or (F, 3, 3), step, time
        species (N,)  mass (N,)  charge (N,)   (optional, time-independent)
    observables/<name>/ value (F, ...) step time  (optional)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import h5py
import numpy as np

from ..errors import NotH5MDError
from .units import FIELDS, TIME_TO_PS, UNIT_TABLES


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
        unit = attr_str(pg[fl]["value"], "unit")
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
        chunks=pos.chunks, compression=_plugin_filter(pos) or pos.compression,
        compression_opts=pos.compression_opts,
        dtype=str(pos.dtype), observables=obs,
    )


#: HDF5 registered filter ids of the hdf5plugin compressors trajscale writes.
PLUGIN_FILTERS = {"32001": "blosc", "32015": "zstd"}


def _plugin_filter(ds: h5py.Dataset) -> str | None:
    """h5py names only gzip/lzf/szip; a Blosc or Zstd chunk is compressed all the same."""
    return next((PLUGIN_FILTERS[k] for k in ds._filters if k in PLUGIN_FILTERS), None)


def attr_str(obj, name: str) -> str | None:
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
        unit = attr_str(ds, "unit")
        if unit is not None and unit not in TIME_TO_PS:
            raise NotH5MDError(path, f"{ds.name} has unknown time unit {unit!r}")
        scale = TIME_TO_PS.get(unit, 1.0) if unit else 1.0
    if ds.shape == ():   # the spec's "fixed" interval: value * i + offset
        offset = float(ds.attrs.get("offset", 0))
        return TimeAxis(None, fixed=float(ds[()]), offset=offset, scale=scale)
    return TimeAxis(ds.name, scale=scale)
