"""An analysis's results over an ensemble: per trajectory (``r["rep3"]`` is what a run over that one alone
gives), as one long table (:meth:`~EnsembleResult.table`; labelled features a row per frame and feature, one
schema whatever each member's feature count), as arrays (:meth:`~EnsembleResult.arrays`), as an xarray Dataset
padded along ``atom``/``feature`` (:meth:`~EnsembleResult.dataset`), and aggregated where well defined
(:meth:`~EnsembleResult.aggregate`). A results folder's are read when asked for, one at a time.
"""

from __future__ import annotations

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
from .table import Coded, batches, frame_columns, label_dtype, pyarrow, record_batches, write_csv, write_parquet

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

    def columns(self) -> dict[str, np.ndarray]:
        """The long table as named columns: ``trajectory``, the label columns, ``frame``, ``time``, then the
        analysis's values (a row per frame of each trajectory); for labelled features ``feature_index``,
        ``feature``, ``resname``, ``resid``, ``chain`` and ``value`` (a row per frame and feature).

        The whole table in memory, its text as ``str`` objects: :meth:`batches` gives it a batch at a time."""
        self._per_frame_only()
        parts = list(batches(self))
        return {k: np.concatenate([p[k].rows() if isinstance(p[k], Coded) else p[k] for p in parts])
                for k in parts[0]}

    def batches(self) -> Iterator:
        """The long table as ``pyarrow.RecordBatch`` es of one schema, a batch of trajectories at a time
        (at most :data:`~trajscale.ensemble.table.BATCH_ROWS` rows): memory is a batch, whatever the number
        of trajectories.  The trajectory's name and text labels are dictionary-encoded."""
        self._per_frame_only()
        return record_batches(self)

    def table(self):
        """The long table as a ``pyarrow.Table`` (``.to_pandas()`` for a DataFrame): the whole table in
        memory, about 8 bytes a row for each number column and 4 for each text column (dictionary-encoded);
        :meth:`batches` streams it."""
        return pyarrow().Table.from_batches(list(self.batches()))

    def _per_frame_only(self) -> None:
        if not self.per_frame:
            raise ConfigError(f"{self.analysis.name} gives a result per trajectory, not per frame: "
                              "dataset() holds it (a trajectory dimension)")

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

    def dataset(self):
        """The results as an ``xarray.Dataset`` with a ``trajectory`` dimension (the module's docstring), in
        memory; ``save("x.nc")`` writes it a batch of trajectories at a time."""
        import xarray as xr

        from .padded import Padded, label_array

        results = [r for _, r in self.items()]
        members = self.members
        coords = {"trajectory": np.array([m.name for m in members], dtype=str)}
        for label in self.label_names:
            values = [m.labels.get(label) for m in members]
            array = label_array(values, label_dtype(values))
            coords[label] = ("trajectory", array.astype(str) if array.dtype == object else array)
        if not results:
            return xr.Dataset(coords=coords)
        layout = Padded(self.analysis)
        for r in results:
            layout.add(r)
        data = {k: (("trajectory", *layout.variables[k].dims), a.astype(str) if a.dtype == object else a)
                for k, a in layout.arrays(results).items()}
        ds = xr.Dataset(data, coords=coords)
        ds.attrs["analysis"] = self.analysis.name
        return ds

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
        from .padded import write_netcdf

        write = {".parquet": write_parquet, ".csv": write_csv}.get(ext, write_netcdf)
        save_output(path, lambda tmp: write(self, tmp))
        return path


__all__ = ["EnsembleResult", "frame_columns", "offered_formats"]
