"""A trajectory as a lazy xarray Dataset: variables over a Source, chunked as the trajectory is stored.

Variables (values in trajscale's units, MDAnalysis's: Å, ps, Å/ps, kJ/(mol Å); each variable's
``units`` attribute names its unit as H5MD writes it, ``stored_units`` the file's own when it
differs):

* ``positions`` ``(frame, atom, spatial)`` float32; ``velocities``, ``forces`` where stored;
* ``box`` ``(frame, cell)`` float32 ``[a, b, c, alpha, beta, gamma]``, where the trajectory has one;
* coordinates ``time`` (ps) and ``step`` along ``frame`` (lazy: an XTC chain's times cost a decode
  of every frame, read only when asked for), ``atom`` (the atoms' indices in the trajectory,
  kept through selections), and the topology's per-atom ``name``, ``resname``, ``resid``,
  ``segid``, ``element`` and ``mass`` where known.

Each lazy variable's ``preferred_chunks`` encoding is the trajectory's storage: frames per
HDF5 chunk, or one part per chunk for a trajectory in many files, so ``chunks={}`` gives one
Dask chunk per stored chunk.
"""

from __future__ import annotations

import json
import logging

import numpy as np
import xarray as xr
from xarray.backends import BackendArray
from xarray.core import indexing

from ..block import FIELD_ATTRS
from ..store.units import WRITE_UNITS
from .labels import selected_atoms, stored_labels, topology_labels
from .reads import SourceOpener, read_rows

log = logging.getLogger(__name__)

#: Variable name of each per-atom field (as a Block names its arrays).
VARIABLES = dict(FIELD_ATTRS)
CELL = ("a", "b", "c", "alpha", "beta", "gamma")
SPATIAL = ("x", "y", "z")
#: Dataset attribute holding the Source config (JSON): how every lazy variable reopens the trajectory.
SOURCE_ATTR = "trajscale_source"
TOPOLOGY_ATTR = "trajscale_topology"


class SourceArray(BackendArray):
    """One variable of a trajectory, read lazily through ``Source.read(frames, atoms)``.

    Outer indexing (an int, a slice or an integer array per dimension) is passed down as is, so
    ``positions[:, ca]`` reads the CA atoms' runs of every frame, never whole frames.  Holds an
    opener (a config), never an open file: it pickles into a Dask graph.
    """

    def __init__(self, opener: SourceOpener, name: str, shape: tuple[int, ...], dtype,
                 subset: np.ndarray | None = None) -> None:
        self.opener = opener
        self.name = name
        self.subset = subset
        self.shape = shape
        self.dtype = np.dtype(dtype)

    def __getitem__(self, key: indexing.ExplicitIndexer) -> np.ndarray:
        return indexing.explicit_indexing_adapter(key, self.shape, indexing.IndexingSupport.OUTER, self._raw)

    def _raw(self, key: tuple) -> np.ndarray:
        return read_rows(self.opener, self.name, key, self.shape, self.dtype, self.subset)


def storage_chunks(source) -> tuple[int, ...]:
    """Frames per Dask chunk as the trajectory is stored: one per part of a trajectory in several files
    (split further at a part's own HDF5 chunks), else the HDF5 chunk's frames (1 when unchunked)."""
    n = source.n_frames
    bounds = [0, *source.part_starts, n]
    if len(bounds) > 2:
        return tuple(int(b - a) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a)
    step = max(1, int(source.chunk_frames))
    return tuple(min(step, n - a) for a in range(0, n, step)) or (0,)


def _variable(opener: SourceOpener, name: str, dims: tuple[str, ...], shape: tuple[int, ...], dtype,
              attrs: dict, frame_chunks: tuple[int, ...], subset: np.ndarray | None = None) -> xr.Variable:
    preferred = {"frame": frame_chunks if len(set(frame_chunks)) > 1 else frame_chunks[0]}
    preferred.update({d: s for d, s in zip(dims[1:], shape[1:], strict=True)})
    data = indexing.LazilyIndexedArray(SourceArray(opener, name, shape, dtype, subset))
    return xr.Variable(dims, data, attrs=attrs, encoding={"preferred_chunks": preferred, "dtype": np.dtype(dtype)})


def _units(quantity: str, stored: dict) -> dict:
    attrs = {"units": WRITE_UNITS[quantity]}
    if stored.get(quantity) and stored[quantity] != attrs["units"]:
        attrs["stored_units"] = stored[quantity]
    return attrs


def build_dataset(source, topology: str | None, drop_variables=(), select: str | None = None) -> xr.Dataset:
    """The Dataset over ``source`` (open in this process: its shape, fields and first box are read
    here), with the per-atom labels of ``topology`` (or those an H5MD file stores); ``select``: over
    the atoms that selection picks only (every variable reads only their runs)."""
    opener = SourceOpener.of(source.get_config())
    facts = source.layout_summary()
    stored = dict(facts.units or ())
    labels = _labels(source, topology)
    subset = None
    if select is not None:
        subset = selected_atoms(_selection_topology(source, topology, labels), opener.config, select)
        labels = {k: v[subset] for k, v in labels.items()}
    n, n_atoms = source.n_frames, source.n_atoms if subset is None else len(subset)
    chunks = storage_chunks(source)
    variables: dict[str, xr.Variable] = {}
    for fl in source.fields:
        variables[VARIABLES[fl]] = _variable(opener, fl, ("frame", "atom", "spatial"), (n, n_atoms, 3),
                                             np.float32, _units(fl, stored), chunks, subset)
    coords: dict[str, xr.Variable] = {
        "frame": xr.Variable("frame", np.arange(n, dtype=np.int64)),
        "atom": xr.Variable("atom", np.arange(n_atoms, dtype=np.int64) if subset is None else subset),
        "spatial": xr.Variable("spatial", np.array(SPATIAL)),
        "time": _variable(opener, "time", ("frame",), (n,), np.float64, _units("time", stored), chunks),
        "step": _variable(opener, "step", ("frame",), (n,), np.int64, {}, chunks),
    }
    if n and np.any(source.read(0, 1, np.zeros(1, np.intp)).box[0, :3] > 0):
        variables["box"] = _variable(opener, "box", ("frame", "cell"), (n, 6), np.float32,
                                     {"units": f"{WRITE_UNITS['box']} (a, b, c), degree (alpha, beta, gamma)"},
                                     chunks)
        coords["cell"] = xr.Variable("cell", np.array(CELL))
    for name, values in labels.items():
        coords[name] = xr.Variable("atom", values, attrs={"units": "u"} if name == "mass" else {})
    drop = set(drop_variables or ())
    ds = xr.Dataset({k: v for k, v in variables.items() if k not in drop},
                    coords={k: v for k, v in coords.items() if k not in drop})
    ds.attrs.update({SOURCE_ATTR: opener.config_json, TOPOLOGY_ATTR: str(topology) if topology else "",
                     "format": str(facts.format), "path": str(source.path)})
    return ds


def _labels(source, topology: str | None) -> dict[str, np.ndarray]:
    if topology is not None:
        return topology_labels(topology, source.n_atoms, source.path)
    if source.kind == "h5md":   # an H5MD file may store its atoms (trajscale's writers do)
        return stored_labels(source.path, source.info.group, source.n_atoms)
    return {}


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
