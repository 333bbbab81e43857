"""A trajectory as a lazy xarray Dataset: variables over a Source, chunked as the trajectory is stored.

Values are in MDAnalysis's units (``units`` names each as H5MD writes it, ``stored_units`` the file's own).
Each lazy variable's ``preferred_chunks`` groups whole stored chunks into about :data:`TARGET_CHUNK_BYTES`, so
``chunks={}`` gives Dask chunks worth a task each.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

import numpy as np
import xarray as xr
from xarray.backends import BackendArray
from xarray.core import indexing

from ..block import FIELD_ATTRS
from ..errors import TrajscaleError
from ..units import WRITE_UNITS
from .labels import selected_atoms, topology_labels
from .reads import SourceOpener, read_rows

log = logging.getLogger(__name__)

#: Variable name of each per-atom field (as a Block names its arrays).
VARIABLES = dict(FIELD_ATTRS)
CELL = ("a", "b", "c", "alpha", "beta", "gamma")
SPATIAL = ("x", "y", "z")
#: Dataset attribute holding the Source config (JSON): how every lazy variable reopens the trajectory.
SOURCE_ATTR = "trajscale_source"
TOPOLOGY_ATTR = "trajscale_topology"
#: Encoding key of a lazy variable's stored chunks along frame (frames each; one number when even).
STORED_CHUNKS = "trajscale_stored_chunks"


class SourceArray(BackendArray):
    """One variable read lazily through ``Source.read(frames, atoms)``, outer indexing passed down; no open file."""

    def __init__(self, opener: SourceOpener, name: str, shape: tuple[int, ...], dtype,
                 subset: np.ndarray | None = None, time_decimals: int = 0) -> None:
        self.opener = opener
        self.name = name
        self.subset = subset
        self.time_decimals = time_decimals   # time only: digits its rounding always keeps (the dt's)
        self.shape = shape
        self.dtype = np.dtype(dtype)

    def __getitem__(self, key: indexing.ExplicitIndexer) -> np.ndarray:
        return indexing.explicit_indexing_adapter(key, self.shape, indexing.IndexingSupport.OUTER, self._raw)

    def _raw(self, key: tuple) -> np.ndarray:
        return read_rows(self.opener, self.name, key, self.shape, self.dtype, self.subset, self.time_decimals)


#: Bytes a Dask chunk of ``chunks={}`` aims at: each task worth its overhead, a chunk per core held at once.
TARGET_CHUNK_BYTES = 64 * 1024**2


def storage_chunks(source) -> tuple[int, ...]:
    """Frames of each stored unit, in order: each part's chunks (from its start), else the HDF5 chunk's frames."""
    n = source.n_frames
    if not n:
        return (0,)
    step = max(1, int(source.chunk_frames))
    bounds = [0, *source.part_starts, n]
    return tuple(min(step, b - s) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a
                 for s in range(a, b, step))


def grouped_chunks(stored: tuple[int, ...], frame_bytes: int, target: int | None = None) -> tuple[int, ...]:
    """Dask chunks of whole stored chunks grouped up to ``target`` bytes, the same for every variable."""
    if stored == (0,):
        return stored
    target = TARGET_CHUNK_BYTES if target is None else target
    per = max(1, target // max(1, int(frame_bytes)))   # frames a chunk may hold
    out: list[int] = []
    size = 0
    for c in stored:
        if size and size + c > per:
            out.append(size)
            size = 0
        size += c
    out.append(size)
    return tuple(out)


def _one_or_all(sizes: tuple[int, ...]) -> int | tuple[int, ...]:
    """Chunk sizes as xarray takes them: one number when all but the last are equal, else each."""
    return sizes[0] if len(set(sizes[:-1])) <= 1 and sizes[-1] <= sizes[0] else sizes


@dataclass(frozen=True)
class _Lazy:
    """What one Dataset's lazy variables share: the opener, their chunks along frame, the selected atoms."""

    opener: SourceOpener
    frame_chunks: tuple[tuple[int, ...], tuple[int, ...]]
    subset: np.ndarray | None = None


def _variable(lazy: _Lazy, name: str, dims: tuple[str, ...], shape: tuple[int, ...], dtype, attrs: dict,
              time_decimals: int = 0) -> xr.Variable:
    """A lazy variable (a per-atom one, ``dims`` beginning ``frame, atom``, reads ``lazy.subset``)."""
    grouped, stored = lazy.frame_chunks
    preferred = {"frame": _one_or_all(grouped)}
    preferred.update({d: s for d, s in zip(dims[1:], shape[1:], strict=True)})
    subset = lazy.subset if dims[:2] == ("frame", "atom") else None
    data = indexing.LazilyIndexedArray(SourceArray(lazy.opener, name, shape, dtype, subset, time_decimals))
    return xr.Variable(dims, data, attrs=attrs, encoding={"preferred_chunks": preferred, "dtype": np.dtype(dtype),
                                                          STORED_CHUNKS: _one_or_all(stored)})


def _units(quantity: str, stored: dict) -> dict:
    attrs = {"units": WRITE_UNITS[quantity]}
    if stored.get(quantity) and stored[quantity] != attrs["units"]:
        attrs["stored_units"] = stored[quantity]
    return attrs


def build_dataset(source, topology: str | None, drop_variables=(), select: str | None = None) -> xr.Dataset:
    """The Dataset over the open ``source``, labelled from ``topology`` (or the file); ``select``: those atoms only."""
    opener = SourceOpener.of(source.get_config())
    facts = source.layout_summary()
    stored = dict(facts.units or ())
    labels = _labels(source, topology)
    subset = None
    if select is not None:
        subset = selected_atoms(_selection_topology(source, topology, labels), opener.config, select)
        labels = {k: v[subset] for k, v in labels.items()}
    n, n_atoms = source.n_frames, source.n_atoms if subset is None else len(subset)
    stored_chunks = storage_chunks(source)
    lazy = _Lazy(opener, (grouped_chunks(stored_chunks, n_atoms * 12), stored_chunks), subset)
    variables: dict[str, xr.Variable] = {}
    for fl in source.fields:
        variables[VARIABLES[fl]] = _variable(lazy, fl, ("frame", "atom", "spatial"), (n, n_atoms, 3),
                                             np.float32, _units(fl, stored))
    coords: dict[str, xr.Variable] = {
        "frame": xr.Variable("frame", np.arange(n, dtype=np.int64)),
        "atom": xr.Variable("atom", np.arange(n_atoms, dtype=np.int64) if subset is None else subset),
        "spatial": xr.Variable("spatial", np.array(SPATIAL)),
        "time": _variable(lazy, "time", ("frame",), (n,), np.float64, _units("time", stored),
                          time_decimals=_dt_decimals(source)),
        "step": _variable(lazy, "step", ("frame",), (n,), np.int64, {}),
    }
    if _steps_past_int32(source):   # netCDF-3 has no int64: float64 holds such steps exactly (to 2**53)
        coords["step"].encoding["dtype"] = np.dtype(np.float64)
    if n and np.any(source.read(0, 1, np.zeros(1, np.intp)).box[0, :3] > 0):
        variables["box"] = _variable(lazy, "box", ("frame", "cell"), (n, 6), np.float32,
                                     {"units": f"{WRITE_UNITS['box']} (a, b, c), degree (alpha, beta, gamma)"})
        coords["cell"] = xr.Variable("cell", np.array(CELL))
    for name, values in labels.items():
        coords[name] = xr.Variable("atom", values, attrs={"units": "u"} if name == "mass" else {})
    drop = set(drop_variables or ())
    ds = xr.Dataset({k: v for k, v in variables.items() if k not in drop},
                    coords={k: v for k, v in coords.items() if k not in drop})
    ds.attrs.update({SOURCE_ATTR: opener.config_json, TOPOLOGY_ATTR: str(topology) if topology else "",
                     "format": str(facts.format), "path": str(source.path)})
    return ds


def _dt_decimals(source) -> int:
    """Decimals of ps a time's rounding keeps: those of the first two frames' spacing (0.002 ps: 3)."""
    if source.n_frames < 2:
        return 0
    try:
        dt = abs(source.frame_header(1)[1] - source.frame_header(0)[1])
    except (TrajscaleError, OSError, ValueError):   # unknown here: float32's noise alone sets the rounding
        return 0
    for d in range(16):
        if abs(round(dt, d) - dt) <= 1e-6 * dt:
            return d
    return 15


def _steps_past_int32(source) -> bool:
    """Whether the first or last step is outside int32: without int64 (netCDF-3) steps are written as float64."""
    if not source.n_frames:
        return False
    info = np.iinfo(np.int32)
    try:
        steps = (source.frame_header(0)[0], source.frame_header(source.n_frames - 1)[0])
    except (TrajscaleError, OSError, ValueError):   # a step unknown here is read with the frames, as int64
        log.debug("%s: first and last steps not known at open", source.path, exc_info=True)
        return False
    return any(not info.min <= int(s) <= info.max for s in steps)


def _labels(source, topology: str | None) -> dict[str, np.ndarray]:
    if topology is not None:
        return topology_labels(topology, source.n_atoms, source.path)
    return source.stored_atom_labels()   # (an H5MD file trajscale wrote stores its atoms' labels)


def _selection_topology(source, topology: str | None, labels: dict) -> str:
    """The file selections are made on: the topology, or an H5MD file that stores its atoms' names."""
    if topology is not None:
        return topology
    if "name" in labels:
        return source.path
    from ..errors import SelectionError

    raise SelectionError(f"{source.path}: selections need a topology (this trajectory stores no atom names): "
                         "give one (trajscale.open_dataset(topology, trajectory) or topology= in xr.open_dataset)")


def opener_of(ds: xr.Dataset) -> SourceOpener:
    """The opener of a Dataset (or DataArray) made by :func:`build_dataset`."""
    from ..errors import ConfigError

    text = ds.attrs.get(SOURCE_ATTR)
    if not text:
        raise ConfigError("this Dataset was not opened by trajscale (no trajscale_source attribute); "
                          "open it with trajscale.open_dataset or xr.open_dataset(..., engine='trajscale')")
    json.loads(text)   # a damaged attribute fails here, naming nothing else
    return SourceOpener(text)
