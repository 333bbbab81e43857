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
from ..units import FIELDS, assumed_units, factor
from .codecs import lossy_attrs

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
    lossy: tuple | None = None   # (precision Å, quantum in the file's unit, encoding): h5md.codecs
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
    return [g for g in parts if isinstance(_member(parts, g), h5py.Group) and "position" in parts[g]]


def _member(group: h5py.Group, name: str):
    """``group[name]``; None for a link that cannot be followed (reported when it is the one asked for)."""
    try:
        return group[name]
    except (KeyError, RuntimeError, OSError, ValueError):
        return None


def describe(f: h5py.File, group: str | None = None, assume_units: str | None = None, *,
             being_written: bool = False) -> H5MDInfo:
    """Validate ``f`` as H5MD and describe one particle group.

    Parameters
    ----------
    f
        An open HDF5 file.
    group
        Particle group to read. None: the file's only group with positions (several: an error listing them).
    assume_units
        ``"nm"`` or ``"Angstrom"``: the units of datasets without a ``unit`` attribute (None: such a dataset is
        an error; a unit is never guessed). A ``unit`` attribute always wins.
    being_written
        The file is read while a job writes it: rows past the last complete frame are frames in flight.
    """
    path = f.filename
    if "particles" not in f or not isinstance(_object(f, "particles", path), h5py.Group):
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
    elif group not in f["particles"] or not isinstance(_object(f["particles"], group, path), h5py.Group):
        groups = [g for g in f["particles"] if isinstance(_member(f["particles"], g), h5py.Group)]
        raise NotH5MDError(path, f"no particle group {group!r} (have: {', '.join(groups) or 'none'})")
    pg = f["particles"][group]
    pos = _dataset(f, f"particles/{group}/position/value", path, required=True)
    if pos.ndim != 3 or pos.shape[2] != 3:
        raise NotH5MDError(path, f"particles/{group}/position/value has shape {pos.shape}, expected (frames, atoms, 3)")
    try:
        lossy = lossy_attrs(pos)
    except (ValueError, TypeError) as exc:
        raise InputFileError(path, str(exc)) from None
    _check_lossy(pos, lossy, path)
    _check_values(pos, path, integers=bool(lossy) and lossy[2] != "floats")
    fields = tuple(fl for fl in FIELDS if _dataset(f, f"particles/{group}/{fl}/value", path) is not None)
    units, scales = {}, {}
    for fl in fields:
        ds = pos if fl == "position" else _dataset(f, f"particles/{group}/{fl}/value", path)
        if fl != "position":
            _check_values(ds, path, integers=False)
            if ds.shape[1:] != pos.shape[1:] or ds.shape[0] < pos.shape[0]:
                raise NotH5MDError(path, f"{ds.name} has shape {ds.shape}; the positions' is {pos.shape}")
        units[fl], scales[fl] = _unit(ds, fl, assumed, path)
    step = _time_axis(pg["position"], "step", path, assumed)
    time = _time_axis(pg["position"], "time", path, assumed)
    if time.unit is not None:
        units["time"] = time.unit
    box_path, box_td, boundary = None, False, ("none",) * 3
    if "box" in pg:
        box = _object(pg, "box", path)
        if not isinstance(box, h5py.Group):
            raise NotH5MDError(path, f"{box.name} is not a group")
        boundary = _boundary(box, path)
        if "edges" in box:
            edges = _object(box, "edges", path)
            if isinstance(edges, h5py.Group):
                edges, box_td = _dataset(f, f"{edges.name}/value", path, required=True), True
            box_path = edges.name
            if "periodic" in boundary:   # edges are read (and scaled) only for a periodic box
                units["box"], scales["box"] = _unit(edges, "box", assumed, path)
    obs = tuple(sorted(f["observables"].keys())) if isinstance(f.get("observables", getlink=True), h5py.HardLink) \
        and isinstance(f["observables"], h5py.Group) else ()
    plugin, plugin_level = _plugin_filter(pos)
    n_frames = complete_frames(f, pg, step, time, being_written)
    if box_path is not None and "periodic" in boundary:
        if box_td and f[box_path].ndim >= 1 and f[box_path].shape[0] == 0 and n_frames:
            # a box element created but never appended to (pyh5md's "linear" box does this): no box
            log.warning("%s: %s holds no box: frames are read without one", path, box_path)
            box_path, box_td, boundary = None, False, ("none",) * 3
        else:
            _check_edges(f[box_path], box_td, n_frames, path)
    if not being_written:
        _check_stored(pos, n_frames, path)
    return H5MDInfo(
        path=path, group=group, n_frames=n_frames, n_atoms=int(pos.shape[1]),
        fields=fields, scales=scales, units=units, step=step, time=time,
        box_path=box_path, box_time_dependent=box_td, boundary=boundary,
        chunks=pos.chunks, compression=plugin or pos.compression,
        compression_opts=plugin_level if plugin else pos.compression_opts,
        dtype=str(pos.dtype), observables=obs, assumed_units=assume_units, lossy=lossy,
    )


def complete_frames(f: h5py.File, pg: h5py.Group, step: TimeAxis, time: TimeAxis,
                    being_written: bool = False) -> int:
    """Frames with a row in ``value``, ``step`` and ``time``; rows past them are warned of unless ``being_written``."""
    n_value = int(pg["position/value"].shape[0])
    if step.path is None:
        return n_value
    lengths = [n_value, int(f[step.path].shape[0])]
    if time.path is not None:
        lengths.append(int(f[time.path].shape[0]))
    n = min(lengths)
    if n < max(lengths) and being_written:
        log.debug("%s: row(s) after the last complete frame (%d): being written", f.filename, n)
    elif n < max(lengths):
        log.warning("%s: %d row(s) after the last complete frame (%d) ignored: the writer was "
                    "interrupted; 'trajscale repair %s' truncates them", f.filename,
                    max(lengths) - n, n, f.filename)
    return n


def _unit(ds: h5py.Dataset, quantity: str, assumed: dict | None, path: str) -> tuple[str, float]:
    """The unit of ``ds`` and its factor to trajscale's: from its attribute (or ``trajscale_unit``), or as stated."""
    try:
        unit = attr_str(ds, "trajscale_unit") or attr_str(ds, "unit")
    except ValueError as exc:
        raise NotH5MDError(path, str(exc)) from None
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
    """A string attribute (bytes, str or a one-element array of either); None when absent; else ValueError."""
    try:
        val = obj.attrs.get(name) if name in obj.attrs else None
    except (OSError, TypeError, ValueError) as exc:   # a type h5py cannot read back
        raise ValueError(f"{obj.name} has an unreadable {name} attribute ({_first_line(exc)})") from None
    if val is None:
        return None
    if isinstance(val, np.ndarray):
        if val.size != 1:
            raise ValueError(f"{obj.name} has {val.size} values in its {name} attribute; expected one string")
        val = val.item()
    if isinstance(val, bytes):
        return val.decode(errors="replace")
    if not isinstance(val, str):
        raise ValueError(f"{obj.name} has the {name} attribute {val!r}; expected a string")
    return val


def _time_axis(element: h5py.Group, name: str, path: str, assumed: dict | None) -> TimeAxis:
    if name not in element:
        if name == "step":
            raise NotH5MDError(path, f"{element.name} has no step dataset")
        return TimeAxis(None, fixed=None)
    ds = _dataset(element.file, f"{element.name}/{name}", path, required=True)
    if ds.dtype.kind not in ("iu" if name == "step" else "iuf") or ds.ndim > 1:
        raise NotH5MDError(path, f"{ds.name} holds {ds.dtype} of shape {ds.shape}; expected one "
                                 f"{'integer' if name == 'step' else 'number'} per frame, or one fixed interval")
    unit, scale = _unit(ds, "time", assumed, path) if name == "time" else (None, 1.0)
    if ds.shape == ():   # the spec's "fixed" interval: value * i + offset
        offset = _number_attr(ds, "offset", 0.0, path)
        fixed = float(ds[()])
        if not np.isfinite(fixed) or not np.isfinite(offset):
            raise NotH5MDError(path, f"{ds.name} has the fixed interval {fixed} and offset {offset}: not finite")
        return TimeAxis(None, fixed=fixed, offset=offset, scale=scale, unit=unit)
    return TimeAxis(ds.name, scale=scale, unit=unit)


# ---------------------------------------------------------------- checks of what the file says
def _object(group: h5py.Group, name: str, path: str):
    """``group[name]``, or one error naming the link when it cannot be followed."""
    try:
        return group[name]
    except (KeyError, RuntimeError, OSError, ValueError) as exc:
        raise NotH5MDError(path, f"{group.name.rstrip('/')}/{name} cannot be opened ({_first_line(exc)})") from None


def _dataset(f: h5py.File, name: str, path: str, required: bool = False) -> h5py.Dataset | None:
    """The dataset at ``name``, links followed and checked (HDF5 names neither); None if absent and not ``required``."""
    parent = f
    parts = name.strip("/").split("/")
    for part in parts:
        if not isinstance(parent, h5py.Group) or part not in parent:
            if required:
                raise NotH5MDError(path, f"has no {name} dataset")
            return None
        parent = _object(parent, part, path)
    if not isinstance(parent, h5py.Dataset):
        raise NotH5MDError(path, f"{name} is not a dataset")
    if parent.is_virtual:
        _check_virtual(parent, path)
    return parent


def _check_virtual(ds: h5py.Dataset, path: str) -> None:
    """Every source of a virtual dataset exists: HDF5 reads a missing one as fill values, silently."""
    import os

    here = os.path.dirname(os.path.abspath(path))
    for src in ds.virtual_sources():
        name = src.file_name
        if name == ".":
            target, inner = ds.file, True
        else:
            full = name if os.path.isabs(name) else os.path.join(here, name)
            if not os.path.isfile(full) or not h5py.is_hdf5(full):
                raise NotH5MDError(path, f"{ds.name} is a virtual dataset whose source file {name} is "
                                         "missing or not HDF5")
            target, inner = None, False
        try:
            if inner:
                ok = _fits(target.get(src.dset_name), src)
            else:
                with h5py.File(full, "r") as other:
                    ok = _fits(other.get(src.dset_name), src)
        except (OSError, KeyError, RuntimeError, ValueError):
            ok = False
        if not ok:
            raise NotH5MDError(path, f"{ds.name} is a virtual dataset whose source {name}:{src.dset_name} "
                               "is missing or smaller than the virtual dataset maps")


def _fits(source, mapping) -> bool:
    """Whether ``source`` is a plain (not virtual) dataset that holds what ``mapping`` (a virtual source) maps."""
    if not isinstance(source, h5py.Dataset) or source.dtype.kind not in "fiu" or source.is_virtual:
        return False
    dims = tuple(mapping.src_space.get_simple_extent_dims())
    if dims:
        return tuple(source.shape) == dims
    try:
        return source.size == mapping.vspace.get_select_npoints()
    except (ValueError, RuntimeError):   # a selection HDF5 cannot count (unlimited, or overflowing)
        return False


def _check_values(ds: h5py.Dataset, path: str, integers: bool) -> None:
    """Frame data: real floats (or the integers of a delta-coded dataset), at most 2**31 atoms."""
    kinds = "u" if integers else "f"
    if ds.dtype.kind not in kinds or ds.dtype.itemsize not in ((2, 4) if integers else (4, 8)):
        raise NotH5MDError(path, f"{ds.name} holds {ds.dtype}; expected "
                                 f"{'unsigned integers (delta-coded)' if integers else 'float32 or float64'}")
    if ds.ndim != 3 or ds.shape[2] != 3:
        raise NotH5MDError(path, f"{ds.name} has shape {ds.shape}, expected (frames, atoms, 3)")
    if ds.shape[1] == 0 or ds.shape[1] > MAX_ATOMS:
        raise NotH5MDError(path, f"{ds.name} has {ds.shape[1]} atoms (1 to {MAX_ATOMS} are readable)")


#: Most atoms a dataset may claim: an atom index is a 32-bit integer in the formats trajscale reads.
MAX_ATOMS = 2**31 - 1


def _check_stored(ds: h5py.Dataset, n_frames: int, path: str) -> None:
    """The frames a dataset claims are stored (bytes or chunks allocated): a header claiming 10^12 is never read."""
    if n_frames == 0:
        return
    if ds.is_virtual:
        try:
            mapped = sum(src.vspace.get_select_npoints() for src in ds.virtual_sources())
        except (ValueError, RuntimeError):   # HDF5 cannot count what is mapped (unlimited, or overflowing)
            raise NotH5MDError(path, f"{ds.name} is a virtual dataset whose mappings cannot be measured") from None
        if mapped < n_frames * int(ds.shape[1]) * 3:
            raise NotH5MDError(path, f"{ds.name} claims {n_frames} frames x {ds.shape[1]} atoms but its virtual "
                                     f"sources map {mapped} values: the rest would read as fill values")
        return
    frame_bytes = int(ds.shape[1]) * 3 * ds.dtype.itemsize
    try:
        stored = ds.id.get_storage_size()
        filtered = bool(ds.chunks) and ds.id.get_create_plist().get_nfilters() > 0
        if filtered:
            per_row = -(-int(ds.shape[1]) // ds.chunks[1]) * -(-3 // ds.chunks[2])
            need, have = -(-n_frames // ds.chunks[0]) * per_row, ds.id.get_num_chunks()
            if have < need:
                raise NotH5MDError(path, f"{ds.name} claims {n_frames} frames x {ds.shape[1]} atoms but stores "
                                         f"{have} of the {need} chunks they need: truncated or damaged")
            return
    except (OSError, RuntimeError, ValueError) as exc:
        raise NotH5MDError(path, f"{ds.name}: its storage cannot be read ({_first_line(exc)})") from None
    need = n_frames * frame_bytes if not ds.chunks else \
        -(-n_frames // ds.chunks[0]) * int(np.prod(ds.chunks)) * ds.dtype.itemsize * \
        (-(-int(ds.shape[1]) // ds.chunks[1])) * (-(-3 // ds.chunks[2]))
    if stored < need:
        raise NotH5MDError(path, f"{ds.name} claims {n_frames} frames x {ds.shape[1]} atoms ({need} bytes) but "
                                 f"stores {stored} bytes: truncated or damaged")


def _check_lossy(ds: h5py.Dataset, lossy: tuple | None, path: str) -> None:
    if lossy is None:
        return
    precision, quantum, _ = lossy
    if not (np.isfinite(quantum) and quantum > 0) or not (np.isfinite(precision) and precision > 0):
        raise NotH5MDError(path, f"{ds.name} has the precision {precision} and quantum {quantum}: "
                                 "both must be finite and positive")


def _boundary(box: h5py.Group, path: str) -> tuple[str, ...]:
    b = box.attrs.get("boundary") if "boundary" in box.attrs else None
    if b is None:
        return ("none",) * 3
    vals = np.atleast_1d(b)
    words = tuple(x.decode(errors="replace") if isinstance(x, bytes) else str(x) for x in vals.ravel())
    if vals.ndim != 1 or len(words) != 3 or any(w not in ("periodic", "none") for w in words):
        raise NotH5MDError(path, f"{box.name} has the boundary {list(words)[:4]}; expected three of "
                                 "'periodic' or 'none'")
    return words


def _check_edges(edges: h5py.Dataset, time_dependent: bool, n_frames: int, path: str) -> None:
    shape = edges.shape[1:] if time_dependent else edges.shape
    if edges.dtype.kind != "f" or shape not in ((3,), (3, 3)) or time_dependent and edges.ndim < 1:
        raise NotH5MDError(path, f"{edges.name} holds {edges.dtype} of shape {edges.shape}; expected "
                                 f"{'(frames, 3) or (frames, 3, 3)' if time_dependent else '(3,) or (3, 3)'} floats")
    if time_dependent and edges.shape[0] < n_frames:
        raise NotH5MDError(path, f"{edges.name} has {edges.shape[0]} frames; the positions have {n_frames}")


def _number_attr(obj, name: str, default: float, path: str) -> float:
    val = obj.attrs.get(name, default) if name in obj.attrs else default
    try:
        arr = np.asarray(val)
        if arr.size != 1 or arr.dtype.kind not in "iuf":
            raise TypeError
        return float(arr.item())
    except (TypeError, ValueError):
        raise NotH5MDError(path, f"{obj.name} has the {name} attribute {val!r}; expected one number") from None


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0]
