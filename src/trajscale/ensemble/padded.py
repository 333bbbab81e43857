"""An ensemble's per-trajectory arrays padded along a ``trajectory`` dimension: the xarray Dataset, and its
NetCDF file written a batch of trajectories at a time.

One pass learns each variable's type and each dimension's size (:class:`Padded`); the NetCDF-4 file is then
written about :data:`BATCH_BYTES` of padded arrays at a time, each result read again from its results folder:
writing holds one batch whatever the number of trajectories.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable

import numpy as np

from ..errors import ConfigError
from .table import BATCH_TRAJECTORIES, TEXT, label_dtype

#: Bytes of padded arrays a NetCDF batch holds (at least one trajectory, at most BATCH_TRAJECTORIES: each
#: trajectory's result is held until its batch is written).
BATCH_BYTES = 64 * 2**20


@dataclasses.dataclass
class _Variable:
    dims: tuple[str, ...]   # (after "trajectory")
    fill: object   # (None: one value per trajectory, never padded)
    get: Callable
    dtype: np.dtype | None = None


def _field(name: str) -> Callable:
    return lambda r: getattr(r, name)


def _dims(result, field: str, value: np.ndarray, atoms) -> tuple[str, ...]:
    """Dimension names of a per-trajectory array (``atom``, ``bin``, ``edge``, else ``FIELD_dimK``)."""
    first = f"{field}_dim0"
    if atoms is not None and len(value) == len(atoms):
        first = "atom"
    elif hasattr(result, "bins") and len(value) == len(result.bins):
        first = "bin"
    elif field == "edges":
        first = "edge"
    rest = tuple("xyz" if s == 3 else f"{field}_dim{k + 1}" for k, s in enumerate(value.shape[1:]))
    return (first, *rest)


class Padded:
    """The variables of an ensemble's dataset of ``analysis``, learnt from its results one at a time (the first
    decides which there are): each one's dimensions, padding and type, and each dimension's largest size."""

    def __init__(self, analysis) -> None:
        self.features = bool(analysis.features)
        self.variables: dict[str, _Variable] = {}
        self.sizes: dict[str, int] = {}

    def _declare(self, r) -> None:
        v = self.variables
        if self.features:
            v["frames"] = _Variable(("frame",), -1, _field("frames"))
            v["times"] = _Variable(("frame",), np.nan, _field("times"))
            v[r.name] = _Variable(("frame", "feature"), np.nan, lambda x: x.array())
            v["n_frames"] = _Variable((), None, lambda x: len(x.frames), np.dtype(np.int64))
            v["n_features"] = _Variable((), None, lambda x: len(x.feature), np.dtype(np.int64))
            for label in ("feature", "resname", "resid", "chain"):   # ("feature" is the dimension: feature_name)
                v["feature_name" if label == "feature" else label] = _Variable(
                    ("feature",), -1 if label == "resid" else "", _field(label))
            return
        atoms = np.asarray(r.atoms) if hasattr(r, "atoms") else None
        for f in dataclasses.fields(r):
            value = getattr(r, f.name)
            if f.name == "report" or value is None:
                continue
            if f.name == "atoms":
                v["atom_index"] = _Variable(("atom",), -1, _field("atoms"))
                v["n_atoms"] = _Variable((), None, lambda x: len(x.atoms), np.dtype(np.int64))
            elif isinstance(value, np.ndarray):
                v[f.name] = _Variable(_dims(r, f.name, value, atoms), np.nan if value.dtype.kind == "f" else -1,
                                      _field(f.name))
            elif isinstance(value, int | float | bool | np.number):
                v[f.name] = _Variable((), None, _field(f.name))
            elif isinstance(value, str):
                v[f.name] = _Variable((), "", _field(f.name))

    def add(self, r) -> None:
        """Learn from one trajectory's result."""
        if not self.variables:
            self._declare(r)
        for v in self.variables.values():
            value = v.get(r)
            if value is None:
                continue
            a = np.asarray(value)
            if a.dtype.kind in "US" or v.fill == "":
                v.dtype = TEXT
            else:
                v.dtype = a.dtype if v.dtype is None else np.result_type(v.dtype, a.dtype)
                if isinstance(v.fill, float) and v.dtype.kind != "f":
                    v.dtype = np.dtype(np.float64)
            for d, s in zip(v.dims, a.shape, strict=False):
                self.sizes[d] = max(self.sizes.get(d, 0), s)

    def row_bytes(self) -> int:
        """One trajectory's bytes in :meth:`arrays` (a text: a reference)."""
        return sum(math.prod(self.sizes[d] for d in v.dims) * v.dtype.itemsize for v in self.variables.values())

    def arrays(self, results: list) -> dict[str, np.ndarray]:
        """The variables of ``results``, padded (text as ``str`` objects)."""
        out = {}
        for name, v in self.variables.items():
            if v.fill is None:
                out[name] = np.array([v.get(r) for r in results], v.dtype)
                continue
            a = np.full((len(results), *(self.sizes[d] for d in v.dims)), v.fill, v.dtype)
            for i, r in enumerate(results):
                x = v.get(r)
                if x is not None:
                    x = np.asarray(x)
                    a[(i, *(slice(0, s) for s in x.shape))] = x
            out[name] = a
        return out


def label_array(values: list, dtype) -> np.ndarray:
    if dtype == TEXT:
        return np.array(["" if v is None else str(v) for v in values], object)
    return np.array(values, dtype)


def write_netcdf(result, tmp) -> None:
    """``result``'s dataset as NetCDF-4 (h5netcdf), :data:`BATCH_BYTES` of trajectories at a time."""
    try:
        import h5netcdf
        import h5py
    except ImportError:
        raise ConfigError("an ensemble's .nc needs h5netcdf: pip install 'trajscale[ensemble]'") from None
    layout = Padded(result.analysis)
    for _, r in result.items():
        layout.add(r)
    labels = {k: label_dtype(m.labels.get(k) for m in result.members) for k in result.label_names}
    text = h5py.string_dtype()
    with h5netcdf.File(tmp, "w") as f:
        f.dimensions = {"trajectory": len(result.members), **layout.sizes}
        f.create_variable("trajectory", ("trajectory",), dtype=text)
        for k, dtype in labels.items():
            truth = dtype.kind == "b"   # (NetCDF has no booleans: xarray's own encoding of them, which it reads back)
            var = f.create_variable(k, ("trajectory",), dtype=text if dtype == TEXT else np.int8 if truth else dtype)
            if truth:
                var.attrs["dtype"] = "bool"
        for name, v in layout.variables.items():
            var = f.create_variable(name, ("trajectory", *v.dims), dtype=text if v.dtype == TEXT else v.dtype,
                                    fillvalue=np.nan if isinstance(v.fill, float) else None)
            if labels:
                var.attrs["coordinates"] = " ".join(labels)
        f.attrs["analysis"] = result.analysis.name
        step = max(1, min(BATCH_TRAJECTORIES, BATCH_BYTES // max(1, layout.row_bytes())))
        held: list = []
        i = 0
        for item in itertools.chain(result.items(), [None]):
            if item is not None:
                held.append(item)
            if held and (item is None or len(held) == step):
                j = i + len(held)
                f.variables["trajectory"][i:j] = np.array([m.name for m, _ in held], object)
                for k, dtype in labels.items():
                    f.variables[k][i:j] = label_array([m.labels.get(k) for m, _ in held], dtype)
                for name, a in layout.arrays([r for _, r in held]).items():
                    f.variables[name][i:j] = a
                held, i = [], j


__all__ = ["BATCH_BYTES", "Padded", "label_array", "write_netcdf"]
