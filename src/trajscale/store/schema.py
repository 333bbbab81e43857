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

import logging
from dataclasses import dataclass, field

import h5py
import numpy as np

from ..errors import InputFileError, NotH5MDError, UnitError
from .codecs import lossy_attrs
from .units import FIELDS, assumed_units, factor

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TimeAxis:
    """Where an element's step/time live: a per-frame dataset, or fixed (scalar + offset)."""

    path: str | None          # dataset path if explicit, else None
    fixed: float | None = None
    offset: float = 0.0
    scale: float = 1.0        # unit conversion to ps (time) or 1 (step)
    unit: str | None = None   # the time unit in the file (or assumed)

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
    scales: dict = field(default_factory=dict)      # field or "box" -> factor to trajscale units
    units: dict = field(default_factory=dict)       # field, "box", "time" -> unit string in the file
    step: TimeAxis = TimeAxis(None, 1.0)
    time: TimeAxis = TimeAxis(None, 1.0)
    box_path: str | None = None                      # edges/value or fixed edges dataset
    box_time_dependent: bool = False
    boundary: tuple[str, ...] = ("none", "none", "none")
    chunks: tuple[int, ...] | None = None
    compression: str | None = None
    compression_opts: object = None
    dtype: str = "float32"
    lossy: tuple | None = None   # (precision Å, quantum in the file's unit, encoding): store.codecs
    observables: tuple[str, ...] = ()
    assumed_units: str | None = None                 # the unit system stated for unit-less datasets

    def dataset(self, fld: str = "position") -> str:
        return f"particles/{self.group}/{fld}/value"

    @property
    def frame_bytes(self) -> int:
        return self.n_atoms * 3 * np.dtype(self.dtype).itemsize

    @property
    def chunk_frames(self) -> int:
        """Frames per chunk along time (1 for contiguous: any boundary is fine)."""
        return int(self.chunks[0]) if self.chunks else 1


def particle_groups(f: h5py.File) -> list[str]:
    """Names of the particle groups of ``f`` that hold positions (the groups a reader can use)."""
    parts = f["particles"]
    return [g for g in parts if isinstance(parts[g], h5py.Group) and "position" in parts[g]]


def describe(f: h5py.File, group: str | None = None, assume_units: str | None = None, *,
             being_written: bool = False) -> H5MDInfo:
    """Validate ``f`` as H5MD and describe one particle group.

    Parameters
    ----------
    f
        An open HDF5 file.
    group
        Particle group to read. None: the file's only group with positions; a
        file with several is an error listing them (a reader never picks one).
    assume_units
        ``"nm"`` or ``"Angstrom"``: the unit system of datasets that carry no
        ``unit`` attribute. None (the default): such a dataset is an error,
        since a unit is never guessed. A ``unit`` attribute always wins.
    being_written
        The file is read while a job writes it (``inspect --follow``): rows after
        the last complete frame are the job's next frames, not an interrupted write.
    """
    path = f.filename
    if "particles" not in f or not isinstance(f["particles"], h5py.Group):
        raise NotH5MDError(path, "no /particles group: not an H5MD file")
    assumed = assumed_units(assume_units)
    if group is None:
        usable = particle_groups(f)
        if not usable:
            raise NotH5MDError(path, "no particles/<group>/position in this H5MD file")
        if len(usable) > 1:
            raise InputFileError(path, f"has {len(usable)} particle groups ({', '.join(usable)}); "
                                       "choose one with --group NAME (group= in the API)")
        group = usable[0]
    elif group not in f["particles"] or not isinstance(f["particles"][group], h5py.Group):
        groups = [g for g in f["particles"] if isinstance(f["particles"][g], h5py.Group)]
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
        units[fl], scales[fl] = _unit(pg[fl]["value"], fl, assumed, path)
    step = _time_axis(pg["position"], "step", path, assumed)
    time = _time_axis(pg["position"], "time", path, assumed)
    if time.unit is not None:
        units["time"] = time.unit
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
            if "periodic" in boundary:   # edges are read (and scaled) only for a periodic box
                units["box"], scales["box"] = _unit(f[box_path], "box", assumed, path)
    obs = tuple(sorted(f["observables"].keys())) if "observables" in f else ()
    plugin, plugin_level = _plugin_filter(pos)
    try:
        lossy = lossy_attrs(pos)
    except ValueError as exc:
        raise InputFileError(path, str(exc)) from None
    return H5MDInfo(
        path=path, group=group, n_frames=complete_frames(f, pg, step, being_written), n_atoms=int(pos.shape[1]),
        fields=fields, scales=scales, units=units, step=step, time=time,
        box_path=box_path, box_time_dependent=box_td, boundary=boundary,
        chunks=pos.chunks, compression=plugin or pos.compression,
        compression_opts=plugin_level if plugin else pos.compression_opts,
        dtype=str(pos.dtype), observables=obs, assumed_units=assume_units, lossy=lossy,
    )


def complete_frames(f: h5py.File, pg: h5py.Group, step: TimeAxis, being_written: bool = False) -> int:
    """Frames whose data is complete: the length of ``step`` when it is shorter than ``value``.

    trajscale's writers grow ``step``/``time`` only after a frame's data is in
    the file, so the extra rows of a file left by an interrupted job are a
    partial (or reserved) frame: ignored, with a warning - unless the file is
    ``being_written``, where they are the frames in flight.
    """
    n_value = int(pg["position/value"].shape[0])
    if step.path is None:
        return n_value
    n_step = int(f[step.path].shape[0])
    if n_step < n_value and being_written:
        log.debug("%s: %d row(s) after the last complete frame (%d): being written", f.filename,
                  n_value - n_step, n_step)
    elif n_step < n_value:
        log.warning("%s: %d row(s) after the last complete frame (%d) ignored: the writer was "
                    "interrupted; 'trajscale repair %s' truncates them", f.filename,
                    n_value - n_step, n_step, f.filename)
    return min(n_step, n_value)


def _unit(ds: h5py.Dataset, quantity: str, assumed: dict | None, path: str) -> tuple[str, float]:
    """The unit of ``ds`` and its factor to trajscale's unit: from its attribute, or as the user states.

    A delta-coded dataset (``store.codecs``) keeps its unit in ``trajscale_unit``: its ``unit``
    names the encoding, so that readers which cannot decode it refuse it.
    """
    unit = attr_str(ds, "trajscale_unit") or attr_str(ds, "unit")
    if unit is None:
        if assumed is None:
            raise NotH5MDError(path, f"{ds.name} has no unit attribute and trajscale never guesses one: "
                                     "state the file's units with --assume-units nm or --assume-units "
                                     "Angstrom (assume_units= in the API)")
        unit = assumed[quantity]
    try:
        return unit, factor(quantity, unit)
    except UnitError as exc:
        raise NotH5MDError(path, f"{ds.name} has an {exc}") from None


#: HDF5 registered filter ids of the hdf5plugin compressors trajscale writes.
PLUGIN_FILTERS = {"32001": "blosc", "32004": "lz4", "32015": "zstd"}
#: Blosc's compressor codes (its filter's 7th parameter).
BLOSC_CODES = {0: "blosclz", 1: "lz4", 2: "lz4hc", 3: "snappy", 4: "zlib", 5: "zstd"}


def _plugin_filter(ds: h5py.Dataset) -> tuple[str | None, int | None]:
    """(name, level) of an hdf5plugin filter: h5py names only gzip/lzf/szip."""
    for key, opts in ds._filters.items():
        name = PLUGIN_FILTERS.get(key)
        if name == "blosc" and len(opts) >= 7:
            return f"blosc-{BLOSC_CODES.get(opts[6], opts[6])}", int(opts[4])
        if name == "zstd":
            return name, int(opts[0]) if opts else None
        if name:
            return name, None
    return None, None


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


def _time_axis(element: h5py.Group, name: str, path: str, assumed: dict | None) -> TimeAxis:
    if name not in element:
        if name == "step":
            raise NotH5MDError(path, f"{element.name} has no step dataset")
        return TimeAxis(None, fixed=None)
    ds = element[name]
    unit, scale = _unit(ds, "time", assumed, path) if name == "time" else (None, 1.0)
    if ds.shape == ():   # the spec's "fixed" interval: value * i + offset
        offset = float(ds.attrs.get("offset", 0))
        return TimeAxis(None, fixed=float(ds[()]), offset=offset, scale=scale, unit=unit)
    return TimeAxis(ds.name, scale=scale, unit=unit)
