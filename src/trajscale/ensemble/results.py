"""An analysis's results over an ensemble: per trajectory, as one long table, as arrays, and aggregated.

:class:`EnsembleResult` holds one analysis's result for each trajectory that finished (``r["rep3"]`` is
what a run over that trajectory alone gives), the trajectories refused, and the run's report; a results
folder's are read from it when asked for, one at a time.

* Per-frame results (RMSD, ...) as one long table: a row per frame of each trajectory, with the
  trajectory's name and the catalog's label columns (:meth:`~EnsembleResult.table`).
* Labelled features (φ/ψ, pair distances: an analysis whose ``features`` is true), whose number differs
  between topologies, as a long table of a row per trajectory, frame and feature: one schema whatever each
  trajectory's feature count, so members of different systems share one table, file and row group.
  :meth:`~EnsembleResult.arrays` gives each trajectory's ``(frames, features)`` array (deeptime's input).
* Per-atom and per-bin results (RMSF, RDF, average structure) as an xarray Dataset with a ``trajectory``
  dimension (:meth:`~EnsembleResult.dataset`): different atom counts are padded along ``atom`` (NaN, or -1
  for integers; ``atom_index`` -1), features along ``frame`` and ``feature``.
* Aggregates where they are well defined (:meth:`~EnsembleResult.aggregate`): an RDF over replicas of one
  system is the RDF of their concatenation, with its bits.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from ..analysis.base import Prepared
from ..analysis.results import FeatureLabels
from ..errors import ConfigError, OutputError
from .catalog import Member
from .prepare import Refusal
from .saved import AGGREGATES, MemberRecord, ResultsFolder

#: Output formats by extension: the long table of a per-frame analysis, or the arrays of another.
TABLE_FORMATS = (".parquet", ".csv")
ARRAY_FORMATS = (".nc",)


def offered_formats(analysis) -> tuple[str, ...]:
    """The extensions an ensemble's results of ``analysis`` are saved as."""
    if not analysis.per_frame:
        return ARRAY_FORMATS
    return TABLE_FORMATS + ARRAY_FORMATS if analysis.features else TABLE_FORMATS


class FinishedMembers(Sequence):
    """An ensemble's members less those at the indices ``excluded`` (a result's refused ones), in order: a
    view whose memory is the indices left out, not a list of the members kept."""

    def __init__(self, ensemble, excluded) -> None:
        self._ensemble = ensemble
        self._excluded = sorted(i for i in set(excluded) if 0 <= i < len(ensemble))
        self._gone = frozenset(self._excluded)

    def __len__(self) -> int:
        return len(self._ensemble) - len(self._excluded)

    def __iter__(self) -> Iterator[Member]:
        gone = self._gone
        for i, m in enumerate(self._ensemble):
            if i not in gone:
                yield m

    def __getitem__(self, k):
        if isinstance(k, slice):
            return tuple(self[i] for i in range(*k.indices(len(self))))
        n = len(self)
        if not -n <= k < n:
            raise IndexError(f"member {k} of {n}")
        i = k % n
        for e in self._excluded:   # (the k-th kept member: past every index left out at or before it)
            if e > i:
                break
            i += 1
        return self._ensemble[i]

    def has(self, name: str) -> bool:
        """Whether a kept member is named ``name``."""
        i = self._ensemble.index_of(name)
        return i is not None and i not in self._gone

    def __repr__(self) -> str:
        return f"<{len(self)} of the {len(self._ensemble)} members of {self._ensemble!r}>"


class EnsembleResult:
    """One analysis's results over an ensemble (see the module's docstring).

    Attributes
    ----------
    analysis
        The analysis run on each trajectory.
    members
        The trajectories that finished, in the ensemble's order.
    refused
        Those that were not analysed: :class:`~trajscale.ensemble.prepare.Refusal` (member, reason).
    report
        The run's :class:`~trajscale.report.timing.RunReport` (None when every trajectory had been saved
        by a run before).
    trajectories
        What each trajectory cost (:class:`~trajscale.ensemble.report.EnsembleFacts`).
    """

    def __init__(self, analysis, position: int, members: Sequence[Member], records, refused: Sequence[Refusal],
                 report=None, trajectories=None, label_names: Sequence[str] = ()) -> None:
        self.analysis, self._k = analysis, position
        self.members = members if isinstance(members, FinishedMembers) else tuple(members)
        self._records = records   # name -> MemberRecord, or a ResultsFolder to load them from
        self.refused = tuple(refused)
        self.report, self.trajectories = report, trajectories
        self.label_names = tuple(label_names)

    def __repr__(self) -> str:
        return (f"<EnsembleResult {self.analysis.name}: {len(self.members)} trajectories"
                f"{f', {len(self.refused)} refused' if self.refused else ''}>")

    def __len__(self) -> int:
        return len(self.members)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.members)

    def record(self, name: str) -> MemberRecord:
        if isinstance(self._records, ResultsFolder):
            return self._records.load(name)
        return self._records[name]

    def __getitem__(self, name: str):
        """The result of trajectory ``name``: what a run over it alone gives."""
        if not self._has(name):
            raise KeyError(f"no finished trajectory named {name!r}")
        return self.record(name).results[self._k]

    def _has(self, name: str) -> bool:
        if isinstance(self.members, FinishedMembers):
            return self.members.has(name)
        if self._names is None:
            self._names = frozenset(m.name for m in self.members)
        return name in self._names

    _names: frozenset[str] | None = None   # (members given as a list: their names, made when first asked)

    def items(self) -> Iterator[tuple[Member, object]]:
        """``(member, result)`` for each finished trajectory, in order (read one at a time)."""
        for m in self.members:
            yield m, self.record(m.name).results[self._k]

    @property
    def per_frame(self) -> bool:
        return bool(self.analysis.per_frame)

    # -- per-frame: the long table ----------------------------------------------------------------------------
    def columns(self) -> dict[str, np.ndarray]:
        """The long table as named columns: ``trajectory``, the label columns, ``frame``, ``time``, then the
        analysis's values (a row per frame of each trajectory); for labelled features ``feature_index``,
        ``feature``, ``resname``, ``resid``, ``chain`` and ``value`` (a row per frame and feature)."""
        self._per_frame_only()
        parts = [self._rows(m, r) for m, r in self.items()]
        if not parts:
            return {"trajectory": np.array([], dtype=str), "frame": np.array([], np.int64), "time": np.array([])}
        names = list(dict.fromkeys(k for p in parts for k in p))
        return {k: np.concatenate([p[k] for p in parts]) for k in names}

    def _per_frame_only(self) -> None:
        if not self.per_frame:
            raise ConfigError(f"{self.analysis.name} gives a result per trajectory, not per frame: "
                              "dataset() holds it (a trajectory dimension)")

    def _rows(self, member: Member, result) -> dict[str, np.ndarray]:
        frames, times = np.asarray(result.frames, np.int64), np.asarray(result.times, np.float64)
        k = len(result.feature) if self.features else 1
        n = len(frames) * k
        out = {"trajectory": np.full(n, member.name)}
        for label in self.label_names:
            out[label] = np.full(n, member.labels.get(label))
        out["frame"], out["time"] = np.repeat(frames, k), np.repeat(times, k)
        if not self.features:
            out.update(frame_columns(result))
            return out
        out["feature_index"] = np.tile(np.arange(k, dtype=np.int64), len(frames))
        for name, values in result.feature_labels().columns().items():
            out[name] = np.tile(values, len(frames))
        out["value"] = result.array().reshape(-1)
        return out

    @property
    def features(self) -> bool:
        """The results are labelled features (a long table of a row per trajectory, frame and feature)."""
        return bool(self.analysis.features)

    def arrays(self) -> list[np.ndarray]:
        """One ``(frames, features)`` float64 array per finished trajectory, in order (deeptime's input;
        without labelled features, the value columns: :func:`frame_columns`)."""
        self._per_frame_only()
        if self.features:
            return [r.array() for _, r in self.items()]
        out = []
        for _, r in self.items():
            cols = list(frame_columns(r).values())
            out.append(np.column_stack(cols).astype(np.float64) if cols else np.empty((len(r.frames), 0)))
        return out

    def feature_labels(self, name: str) -> FeatureLabels:
        """What each column of trajectory ``name``'s array is (:class:`~trajscale.analysis.results.FeatureLabels`:
        ``list(...)`` gives one string per feature, ``.feature``/``.resname``/``.resid``/``.chain`` arrays)."""
        if not self.features:
            raise ConfigError(f"{self.analysis.name} gives no labelled features: its columns are named in "
                              "columns()")
        return self[name].feature_labels()

    def table(self):
        """The long table as a ``pyarrow.Table`` (``.to_pandas()`` for a DataFrame)."""
        pa = _pyarrow()
        return pa.table({k: _arrow_column(pa, v) for k, v in self.columns().items()})

    # -- per-atom and per-bin: arrays with a trajectory dimension -------------------------------------------
    def dataset(self):
        """The results as an ``xarray.Dataset`` with a ``trajectory`` dimension (the module's docstring)."""
        import xarray as xr

        results = [r for _, r in self.items()]
        members = self.members
        coords = {"trajectory": np.array([m.name for m in members], dtype=str)}
        for label in self.label_names:
            coords[label] = ("trajectory", _label_array([m.labels.get(label) for m in members]))
        data = {}
        if not results:
            return xr.Dataset(coords=coords)
        if self.features:
            return self._feature_dataset(results, coords)
        atoms = [np.asarray(r.atoms) if hasattr(r, "atoms") else None for r in results]
        n_atoms = max((len(a) for a in atoms if a is not None), default=0)
        for f in dataclasses.fields(results[0]):
            if f.name == "report":
                continue
            values = [getattr(r, f.name) for r in results]
            if f.name == "atoms":
                data["atom_index"] = (("trajectory", "atom"), _padded(values, n_atoms, -1))
                data["n_atoms"] = ("trajectory", np.array([len(v) for v in values], np.int64))
                continue
            if all(v is None for v in values):
                continue
            if isinstance(values[0], np.ndarray):
                dims = _dims(results[0], f.name, values[0], atoms[0])
                fill = np.nan if values[0].dtype.kind == "f" else -1
                size = n_atoms if dims[0] == "atom" else max(len(v) for v in values)
                data[f.name] = (("trajectory", *dims), _padded(values, size, fill))
            elif isinstance(values[0], int | float | bool | np.number):
                data[f.name] = ("trajectory", np.array(values))
            elif isinstance(values[0], str):
                data[f.name] = ("trajectory", np.array(values, dtype=str))
        ds = xr.Dataset(data, coords=coords)
        ds.attrs["analysis"] = self.analysis.name
        return ds

    def _feature_dataset(self, results: list, coords: dict):
        """Features with dimensions (trajectory, frame, feature): values padded with NaN, labels with ``""``
        (``resid`` with -1)."""
        import xarray as xr

        n_f = max(len(r.frames) for r in results)
        n_k = max(len(r.feature) for r in results)
        name = results[0].name
        data = {"frames": (("trajectory", "frame"), _padded([r.frames for r in results], (n_f,), -1)),
                "times": (("trajectory", "frame"), _padded([r.times for r in results], (n_f,), np.nan)),
                name: (("trajectory", "frame", "feature"), _padded([r.array() for r in results], (n_f, n_k), np.nan)),
                "n_frames": ("trajectory", np.array([len(r.frames) for r in results], np.int64)),
                "n_features": ("trajectory", np.array([len(r.feature) for r in results], np.int64))}
        for label in ("feature", "resname", "resid", "chain"):   # ("feature" is the dimension: feature_name)
            values = [getattr(r, label) for r in results]
            fill = -1 if label == "resid" else ""
            data["feature_name" if label == "feature" else label] = (("trajectory", "feature"),
                                                                     _padded(values, (n_k,), fill))
        ds = xr.Dataset(data, coords=coords)
        ds.attrs["analysis"] = self.analysis.name
        return ds

    # -- aggregates -------------------------------------------------------------------------------------------
    def aggregate(self, by: str | Sequence[str] | None = None):
        """The analysis over the trajectories as over their concatenation, where its partials add exactly
        (:data:`~trajscale.ensemble.saved.AGGREGATES`: the RDF); ``by`` a label (or labels): one result per
        value, in a dict.

        Raises
        ------
        ConfigError
            The analysis has no exact aggregate, or the trajectories are not replicas of one system (their
            selections differ in size).
        """
        if self.analysis.name not in AGGREGATES:
            raise ConfigError(f"{self.analysis.name}: no aggregate over trajectories is defined (the analyses "
                              f"with one: {', '.join(sorted(AGGREGATES))}); combine the per-trajectory results")
        if by is None:
            return self._aggregate(list(self.members))
        keys = (by,) if isinstance(by, str) else tuple(by)
        groups: dict[tuple, list[Member]] = {}
        for m in self.members:
            groups.setdefault(tuple(m.labels.get(k) for k in keys), []).append(m)
        return {(g[0] if len(keys) == 1 else g): self._aggregate(ms) for g, ms in groups.items()}

    def _aggregate(self, members: list[Member]):
        parts = [self.record(m.name).partials[self._k] for m in members]
        if not parts:
            raise ConfigError(f"{self.analysis.name}: no trajectory to aggregate")
        states = [p["state"] for p in parts]
        first = {k: v for k, v in states[0].items() if k != "path"}
        for m, s in zip(members, states, strict=True):
            other = {k: v for k, v in s.items() if k != "path"}
            if other != first:
                diff = next(k for k in dict.fromkeys([*first, *other]) if first.get(k) != other.get(k))
                raise ConfigError(f"{self.analysis.name}: {members[0].name} and {m.name} are not replicas of one "
                                  f"system ({diff}: {first.get(diff)} and {other.get(diff)}): no aggregate over both")
        reduced = self.analysis.reduce([p["partial"] for p in parts])
        return self.analysis.result(reduced, Prepared(None, {**states[0], "path": "the ensemble"}))

    # -- files --------------------------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> Path:
        """Write the results as :func:`offered_formats` offers them: the long table as ``.parquet`` or
        ``.csv``, the :meth:`dataset` as ``.nc``; the extension decides."""
        path = Path(path)
        ext = path.suffix.lower()
        offered = offered_formats(self.analysis)
        if ext not in offered:
            raise OutputError(path, f"an ensemble's {self.analysis.name} results are written as "
                                    f"{', '.join(offered)} (the extension decides); "
                                    f"{ext or 'no extension'} is none of them")
        from ..util import save_output

        if ext == ".parquet":
            save_output(path, lambda tmp: _write_parquet(self, tmp))
        elif ext == ".csv":
            save_output(path, lambda tmp: _write_csv(self.columns(), tmp))
        else:
            ds = self.dataset()
            save_output(path, lambda tmp: ds.to_netcdf(tmp, engine=_netcdf_engine()))
        return path


def frame_columns(result) -> dict[str, np.ndarray]:
    """A per-frame result's value columns, named: each array with a row per frame (2-D: a column each)."""
    n = len(result.frames)
    out = {}
    for f in dataclasses.fields(result):
        if f.name in ("frames", "times", "report"):
            continue
        v = getattr(result, f.name)
        if not isinstance(v, np.ndarray) or v.ndim == 0 or len(v) != n:
            continue
        name = getattr(result, "name", f.name) if f.name == "values" else f.name
        v2 = v.reshape(n, -1)
        if v.ndim == 1:
            out[name] = v
            continue
        labels = getattr(result, "group_names", ()) if f.name == "groups" else ()
        for j in range(v2.shape[1]):
            out[labels[j] if j < len(labels) else f"{name}_{j}"] = v2[:, j]
    return out


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


def _padded(values: list, size, fill) -> np.ndarray:
    """Arrays stacked, each padded with ``fill`` to ``size`` (the first dimension's, or a tuple of the
    leading ones'; the others take the largest)."""
    arrays = [np.asarray(v) for v in values]
    first = arrays[0]
    shape = tuple(max(a.shape[d] for a in arrays) for d in range(first.ndim))
    shape = tuple(size) + shape[len(size):] if isinstance(size, tuple) else (size, *shape[1:])
    if isinstance(fill, str):
        dtype = np.result_type(*[a.dtype for a in arrays]) if all(a.dtype.kind == "U" for a in arrays) else str
    elif isinstance(fill, float) and first.dtype.kind != "f":
        dtype = np.result_type(first.dtype, np.float64)
    else:
        dtype = first.dtype
    out = np.full((len(arrays), *shape), fill, dtype=dtype)
    for i, a in enumerate(arrays):
        out[(i, *(slice(0, n) for n in a.shape))] = a
    return out


def _label_array(values: list) -> np.ndarray:
    if all(isinstance(v, bool | int | np.integer) for v in values):
        return np.array(values, np.int64)
    if all(isinstance(v, int | float | np.number) and not isinstance(v, bool) for v in values):
        return np.array(values, np.float64)
    return np.array(["" if v is None else str(v) for v in values], dtype=str)


def _pyarrow():
    try:
        import pyarrow as pa
    except ImportError:
        raise ConfigError("an ensemble's table needs pyarrow: pip install 'trajscale[ensemble]'") from None
    return pa


def _arrow_column(pa, values: np.ndarray):
    if values.dtype.kind == "U":
        return pa.array(values, pa.string())
    if values.dtype == object:
        return pa.array(values.tolist())
    return pa.array(values)


#: Trajectories whose rows the Parquet writer gathers into one row group at most (with 1,000,000 rows): each
#: holds its few arrays until the group is written, so short trajectories are gathered a few thousand at a time.
_PARQUET_TRAJECTORIES = 2_048


def _write_parquet(result: EnsembleResult, tmp) -> None:
    """The long table written a row group per batch of trajectories: memory is a batch's rows."""
    pa = _pyarrow()
    import pyarrow.parquet as pq

    writer, batch, rows = None, [], 0

    def flush():
        nonlocal writer, batch, rows
        if not batch:
            return
        cols = {k: np.concatenate([b[k] for b in batch]) for k in batch[0]}
        table = pa.table({k: _arrow_column(pa, v) for k, v in cols.items()})
        if writer is None:
            writer = pq.ParquetWriter(str(tmp), table.schema)
        writer.write_table(table.cast(writer.schema))
        batch, rows = [], 0

    try:
        for m, r in result.items():
            batch.append(result._rows(m, r))
            rows += len(batch[-1]["frame"])
            if rows >= 1_000_000 or len(batch) >= _PARQUET_TRAJECTORIES:   # (a batch's rows, and its arrays)
                flush()
        flush()
        if writer is None:
            pq.write_table(pa.table({k: _arrow_column(pa, v) for k, v in result.columns().items()}), str(tmp))
    finally:
        if writer is not None:
            writer.close()


def _write_csv(columns: dict[str, np.ndarray], tmp) -> None:
    import csv

    names = list(columns)
    with open(tmp, "w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(names)
        cols = [columns[k].tolist() for k in names]
        w.writerows(zip(*cols, strict=True))


def _netcdf_engine() -> str:
    try:
        import h5netcdf  # noqa: F401
    except ImportError:
        return "scipy"
    return "h5netcdf"


__all__ = ["EnsembleResult", "frame_columns", "offered_formats"]
