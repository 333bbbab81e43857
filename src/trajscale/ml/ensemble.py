"""Frames of many trajectories as one PyTorch dataset: an ensemble's members, sampled in contiguous runs.

A :class:`~trajscale.ml.sampler.BlockBatchSampler` batch is read with one call per member where its Source
reads many frames at once, else one ``Source.read`` per contiguous run, never one per sample. Each process keeps
at most ``max_open`` files open (LRU), and reopens a member from its shipped Source config without walking HDF5
metadata again; with ``cache_dir`` a URL is fetched once per node. Members differ in atom counts, so a batch is
packed as PyTorch Geometric packs graphs: atoms one after another, ``n_atoms`` per sample to split them.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..block import check_finite
from ..engine import frame_range
from ..ensemble.table import TEXT, label_dtype
from ..errors import ConfigError, InputFileError, StoreError, TrajscaleError
from ..sources.opened import OpenSources
from ..storage.location import Location
from .dataset import _as_index, _batch_buffer, _BatchReads, runs, with_cache_dir
from .lagged import piece_bounds
from .trace import IOStats

log = logging.getLogger(__name__)

#: Per-atom fields a batch may hold.
FIELDS = ("position", "velocity", "force")


@dataclass(frozen=True)
class _Member:
    """What a worker needs of one member: how to open it, its size, and its labels."""

    name: str
    config: dict
    n_frames: int
    n_atoms: int
    labels: dict
    #: where a member of a file of several lies (its Source's ``member_layout``: parsed once, not at each open)
    layout: object = None
    #: frames where a run of regularly spaced frames begins, past frame 0 (:func:`~trajscale.ml.lagged.piece_bounds`)
    breaks: tuple[int, ...] = ()


def _members_of(trajectories, storage_options: dict | None) -> list[tuple[object, list[Location]]]:
    """The ensemble's :class:`~trajscale.ensemble.Member` records, an mdCATH file standing for each of its members,
    each with its files' locations (read with ``storage_options``)."""
    from ..ensemble import Ensemble, Member

    if isinstance(trajectories, str | os.PathLike):
        trajectories = Ensemble.of(trajectories, storage_options)
    from ..ensemble.catalog import members_held

    out = []
    for t in trajectories:
        if not isinstance(t, Member):
            where = Location(t, storage_options)
            base = Member(where.where.rstrip("/").rsplit("/", 1)[-1].split(".", 1)[0], (where.where,))
            expanded = members_held(where, base)
            out += expanded if expanded is not None else [base]
            continue
        out.append(t)
    return [(m, [Location(t, storage_options) for t in m.trajectory]) for m in out]


def _describe(member, where: list[Location], fields: tuple[str, ...], numbers: dict | None,
              check_frames: bool = True):
    """The member described (its one open while the dataset is made), or why it cannot be read (a string);
    lacking a field or atomic numbers raises. ``numbers``: atomic numbers read into it, once per file."""
    from ..sources import open_source, source_from_config

    try:   # (an mdCATH member's Source is its config's, whose store carries its options; else run's open)
        src = source_from_config(dict(member.source)) if member.source is not None else \
            open_source(where if len(where) > 1 else where[0], member.topology)
    except (ImportError, MemoryError):
        raise   # (the environment's failure, not the member's)
    except Exception as exc:   # noqa: BLE001 - a damaged file's library error refuses that member only
        return _why_refused(member, exc)
    with src:
        missing = [f for f in fields if f not in src.fields]
        if missing:
            raise InputFileError(src.path, f"member {member.name!r} has no {', '.join(missing)}")
        if numbers is not None and src.path not in numbers:
            read = getattr(src, "atomic_numbers", None)
            if read is None:
                raise InputFileError(src.path, f"member {member.name!r}: its format stores no atomic numbers "
                                               "(atomic_numbers=True reads mdCATH's z)")
            numbers[src.path] = read()
        try:
            config = src.get_config()
            frame_range(None, None, src.n_frames, src.path)   # (none: refused as a run refuses it)
            times = _checked_times(src) if check_frames else src.frame_times()[0]
            breaks = tuple(piece_bounds(times)[1:-1].tolist())
            layout = type(src).member_layout(config)   # (a member of a file of several: where its data lie)
        except (ImportError, MemoryError):
            raise
        except Exception as exc:   # noqa: BLE001 - as above
            return _why_refused(member, exc)
        return _Member(member.name, config, src.n_frames, src.n_atoms, dict(member.labels), layout, breaks)


#: Bytes of coordinates :func:`_checked_times` reads at once.
CHECK_BYTES = 32 * 1024**2


def _checked_times(src) -> np.ndarray:
    """Every frame's time, its coordinates checked for NaN/inf as a run checks them, a bounded block at a time."""
    n = src.n_frames
    times = np.empty(n)
    per_read = max(1, CHECK_BYTES // max(1, 12 * src.n_atoms))
    for a in range(0, n, per_read):
        block = src.read(a, min(n, a + per_read))
        check_finite(block, block.positions, src.path)
        times[a:a + block.n_frames] = block.time
    return times


def _why_refused(member, exc: Exception) -> str:
    text = str(exc) if isinstance(exc, TrajscaleError) else f"{member.location}: {type(exc).__name__}: {exc}"
    return " ".join(text.split())


def _described(located: list[tuple[object, list[Location]]], fields: tuple[str, ...], numbers: dict | None,
               check_frames: bool = True) -> tuple[list[_Member], list]:
    """Each member (with its files' locations) described, or refused (``Refusal``: index, member, reason) when
    it cannot be read."""
    members, refused = [], []
    for i, (m, where) in enumerate(located):
        got = _describe(m, where, fields, numbers, check_frames)
        if isinstance(got, str):
            from ..ensemble.prepare import Refusal  # (the run's machinery: imported only for a refusal)

            refused.append(Refusal(i, m, got))
        else:
            members.append(got)
    if refused:
        log.warning("%d member(s) refused (the dataset serves the others; .refused says why); first: %s: %s",
                    len(refused), refused[0].member.name, refused[0].reason)
    if not members and refused:
        raise InputFileError(refused[0].member.location, f"every one of the {len(refused)} members was refused "
                                                         f"(first: {refused[0].member.name}: {refused[0].reason})")
    return members, refused


def _label_columns(labels: Sequence[dict]) -> dict[str, object]:
    """label -> (M,) array of its type (:func:`~trajscale.ensemble.table.label_dtype`), or a list of text."""
    columns = {k: [one.get(k) for one in labels] for k in dict.fromkeys(k for one in labels for k in one)}
    return {k: v if label_dtype(v) == TEXT else np.array(v, label_dtype(v)) for k, v in columns.items()}


def _labels_of(columns: dict, member: np.ndarray) -> dict:
    return {k: (col[member] if isinstance(col, np.ndarray) else [col[m] for m in member.tolist()])
            for k, col in columns.items()}


class EnsembleDataset(_BatchReads):
    """Every frame of every member of an ensemble as one map-style dataset, read in contiguous runs.

    Parameters
    ----------
    trajectories
        An :class:`~trajscale.ensemble.Ensemble`, a catalog or a glob (``"data/mdcath_dataset_*.h5"``), or a
        list of Members or of locations (an mdCATH file stands for each of its members).
    fields
        Per-atom fields of each sample: ``position``, ``velocity``, ``force`` (every member must have them).
    atomic_numbers
        Add ``z`` (each atom's atomic number, per sample like the positions): from an mdCATH member's ``z``.
    max_open
        Files a process keeps open at once (least recently used closed first; an mdCATH file's members share one).
    cache_dir
        A node-local folder: members behind URLs are fetched there once per node and read from the copy
        (default: read by range requests); with ``HF_HUB_OFFLINE=1``, the Hub's files are read from there.
    storage_options
        For members behind URLs (``endpoint_url``, ...; default: the environment's).
    transform
        Called on each item (a dict of arrays; a whole packed batch for a batch read).
    check_frames
        Read every frame once as the dataset is made: a member with NaN/inf coordinates is refused, as a run
        refuses it, and each member's regular runs of frames come from its frames' times. False: no such pass
        (the times alone are read: an XTC's headers, one atom a frame of other formats), and NaN/inf is served.

    Raises
    ------
    ConfigError
        An empty ensemble, an unknown field, ``max_open`` below 1.
    InputFileError
        A member lacks a field asked for (named), or every member was refused.

    Attributes
    ----------
    refused
        The members that could not be read (a missing or damaged file, NaN/inf coordinates), left out:
        ``Refusal`` records (``index`` in the ensemble, ``member``, ``reason``), as an ensemble run lists them,
        with the same reasons.
    """

    def __init__(self, trajectories, fields: Sequence[str] = ("position",), *, atomic_numbers: bool = False,
                 max_open: int = 16, cache_dir: str | os.PathLike | None = None,
                 storage_options: dict | None = None, transform: Callable | None = None,
                 check_frames: bool = True) -> None:
        self.fields = tuple(fields)
        bad = [f for f in self.fields if f not in FIELDS]
        if bad or not self.fields:
            raise ConfigError(f"fields {list(self.fields)}: each is one of {', '.join(FIELDS)}")
        if int(max_open) < 1:
            raise ConfigError(f"max_open must be >= 1 (got {max_open})")
        self.max_open = int(max_open)
        self.atomic_numbers = bool(atomic_numbers)
        self.cache_dir = str(cache_dir) if cache_dir else None
        self.transform = transform
        numbers: dict | None = {} if self.atomic_numbers else None
        # (each member's files: Locations with their options, which its config carries to the workers)
        self.members, self.refused = _described(_members_of(trajectories, with_cache_dir(storage_options, cache_dir)),
                                                self.fields, numbers, check_frames)
        if not self.members:
            raise ConfigError("the ensemble has no member")
        self.names = tuple(m.name for m in self.members)
        self.starts = np.r_[0, np.cumsum([m.n_frames for m in self.members])].astype(np.int64)
        self.n = int(self.starts[-1])
        self.n_atoms = np.array([m.n_atoms for m in self.members], np.int64)
        self.labels = _label_columns([m.labels for m in self.members])
        #: each member's file: members of a file of several share it (its path), any other member is its own
        self._file_of = tuple(m.config["path"] if _source_class(m.config).shares_file_store else i
                              for i, m in enumerate(self.members))
        self._pid: int | None = None
        self._open = OpenSources(self.max_open)   # (this process's open files: _File)
        self.stats: IOStats | None = None
        #: files this process has opened
        self.opens = 0
        #: the most files this process has held open at once
        self.most_open = 0
        #: each member's atomic numbers (with ``atomic_numbers``), read once per file; they travel with the
        #: dataset to its workers
        self._z: dict[int, np.ndarray] = {} if numbers is None else \
            {i: numbers[m.config.get("path")] for i, m in enumerate(self.members)}


    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state.update(_pid=None, _open=OpenSources(self.max_open), stats=None, opens=0, most_open=0)
        return state

    def __len__(self) -> int:
        return self.n

    def _source(self, i: int):
        """Member ``i``'s Source in this process, on its open file (opened now if it is not)."""
        pid = os.getpid()
        if self._pid != pid:   # a fork's inherited handles are dropped, not closed (they are the parent's)
            self._open, self._pid = OpenSources(self.max_open), pid
            self.stats = IOStats.for_process(None)
        key = self._file_of[i]
        file = self._open.use(key)
        if file is None:
            self._open.make_room()
            t0 = time.perf_counter()
            file = _File.of(self.members[i].config, self.cache_dir)
            self._open.add(key, file, file.path)
            self.opens += 1
            self.most_open = max(self.most_open, len(self._open))
            self.stats.opened(file.path, t0, time.perf_counter())
        return file.member(i, self.members[i])

    def close(self) -> None:
        """Close this process's open files (a later read reopens them)."""
        if self._pid == os.getpid():
            self._open.close()
        self._open, self._pid = OpenSources(self.max_open), None


    def locate(self, index) -> tuple[np.ndarray, np.ndarray]:
        """(member number, frame within it) of each sample in ``index``."""
        idx = _as_index(index, self.n)
        member = np.searchsorted(self.starts, idx, side="right") - 1
        return member, idx - self.starts[member]

    def read(self, index) -> dict:
        """The samples ``index`` (an int or a sequence), packed, without the transform."""
        scalar = np.ndim(index) == 0
        idx = _as_index(index, self.n)
        uniq, inverse = np.unique(idx, return_inverse=True)
        in_order = len(uniq) == len(idx) and np.array_equal(uniq, idx)
        out = self._packed(uniq, shared=in_order and not self.transform)
        if not in_order:
            out = _reordered(out, inverse, self.fields + (("z",) if self.atomic_numbers else ()),
                             shared=not self.transform)
        if scalar:
            return {k: (v if k in self.fields or k == "z" else v[0]) for k, v in out.items()}
        return out

    def _packed(self, uniq: np.ndarray, shared: bool, lagged: tuple[int, str] | None = None) -> dict:
        """The frames ``uniq`` (sorted, unique) packed in that order, straight into the batch's rows (``shared``:
        in shared memory in a DataLoader worker): one read per member where its Source reads many frames at
        once (:meth:`~trajscale.sources.base.Source.read_frames_into`), else one per contiguous run.
        ``lagged`` (lag, field): also that field of the frames ``lag`` later, as ``"lagged"`` and
        ``"time_lagged"`` (runs of the two sets overlap: each is read once, then copied to both)."""
        member = np.searchsorted(self.starts, uniq, side="right") - 1
        n_atoms = self.n_atoms[member]
        total = int(n_atoms.sum())
        targets = [_Target.of(self.fields, 0, total, len(uniq), shared)]
        if lagged is not None:
            targets.append(_Target.of((lagged[1],), int(lagged[0]), total, len(uniq), shared))
        t0 = time.perf_counter()
        n_reads, row, at = 0, 0, 0
        cut = np.flatnonzero(np.diff(member)) + 1
        for lo, hi in zip(np.r_[0, cut].tolist(), np.r_[cut, len(uniq)].tolist(), strict=True):
            m = int(member[lo])
            src, width = self._source(m), int(self.n_atoms[m])
            frames, k = uniq[lo:hi] - self.starts[m], hi - lo
            parts = [(frames + t.lag, {f: t.rows[f][row:row + k * width].reshape(k, width, 3) for f in t.fields},
                      t.times[at:at + k]) for t in targets]
            if all(src.read_frames_into(*part) for part in parts):   # (each target's frames in one call)
                n_reads += len(parts)
            elif len(parts) == 1:
                n_reads += _read_runs(src, *parts[0])
            else:   # (the runs of both targets' frames, read once, then copied to each)
                both = np.union1d(parts[0][0], parts[1][0])
                named = dict.fromkeys(f for _, views, _ in parts for f in views)
                buf = {f: np.empty((len(both), width, 3), np.float32) for f in named}
                t = np.empty(len(both))
                n_reads += _read_runs(src, both, buf, t)
                for fr, views, times in parts:
                    pos = np.searchsorted(both, fr)
                    for f, v in views.items():
                        np.take(buf[f], pos, axis=0, out=v)
                    times[:] = t[pos]
            row, at = row + k * width, at + k
        if self.stats is not None:
            self.stats.read(t0, time.perf_counter(), n_reads, total * 12 * sum(len(t.fields) for t in targets),
                            len(uniq))
        out = targets[0].out
        out["time"] = targets[0].times
        if self.atomic_numbers:
            out["z"] = np.concatenate([self._z[m] for m in member.tolist()]) if len(member) else np.empty(0, np.int64)
        out["n_atoms"] = n_atoms
        out["trajectory"] = member.astype(np.int64)
        out["name"] = [self.names[m] for m in member.tolist()]
        out["frame"] = uniq - self.starts[member]
        out.update(_labels_of(self.labels, member))
        if lagged is not None:
            out["lagged"], out["time_lagged"] = targets[1].out[lagged[1]], targets[1].times
        return out

    def _per_atom_keys(self) -> set[str]:
        return set(self.fields) | ({"z"} if self.atomic_numbers else set())

    def __getitems__(self, indices: Sequence[int]) -> list[dict]:
        """torch's batched fetch: one packed read, handed out per sample."""
        batch = self.read(indices)
        per_atom = self._per_atom_keys()
        edges = np.r_[0, np.cumsum(batch["n_atoms"])]
        items = [{k: (v[edges[i]:edges[i + 1]] if k in per_atom else v[i]) for k, v in batch.items()}
                 for i in range(len(indices))]
        return [self.transform(it) for it in items] if self.transform else items


@dataclass(frozen=True)
class _Target:
    """Where :meth:`EnsembleDataset._packed` puts the frames ``lag`` after the asked ones: arrays, flat rows, times."""

    fields: tuple[str, ...]
    lag: int
    out: dict[str, np.ndarray]
    rows: dict[str, np.ndarray]
    times: np.ndarray

    @classmethod
    def of(cls, fields: tuple[str, ...], lag: int, total: int, n_frames: int, shared: bool) -> _Target:
        out, rows = {}, {}
        for f in fields:
            out[f], rows[f] = _batch_buffer((total, 3), np.dtype(np.float32), shared=shared)
        return cls(tuple(fields), lag, out, rows, np.empty(n_frames))


def _read_runs(src, frames: np.ndarray, views: dict[str, np.ndarray], times: np.ndarray) -> int:
    """The sorted ``frames`` of ``src`` into ``views`` and ``times``, a read per contiguous run; the reads' count."""
    row = 0
    starts, stops = runs(frames)
    for a, b in zip(starts.tolist(), stops.tolist(), strict=True):
        k = b - a
        rows = {f: v[row:row + k] for f, v in views.items()}
        if src.fills_rows:
            src.read_into(a, b, None, 1, rows, np.zeros((k, 6), np.float32), times[row:row + k],
                          np.empty(k, np.int64))
        else:
            block = src.read(a, b, None, tuple(rows))
            for f, v in rows.items():
                v[...] = {"position": block.positions, "velocity": block.velocities, "force": block.forces}[f]
            times[row:row + k] = block.time
        row += k
    return len(starts)


def _reordered(out: dict, inverse: np.ndarray, per_atom: tuple[str, ...], keys=None, shared: bool = False) -> dict:
    """``out`` (samples in sorted order) in the asked order ``inverse`` (repeats allowed), per-atom rows
    moved with their samples; ``keys``: only those (default: all); ``shared`` as for ``_batch_buffer``."""
    counts = out["n_atoms"]
    first = np.r_[0, np.cumsum(counts)[:-1]].astype(np.int64)
    res = {}
    for k in out if keys is None else keys:
        v = out[k]
        if k in per_atom:
            res[k] = _gathered(v, first, counts, inverse, shared)
        elif isinstance(v, np.ndarray):
            res[k] = v[inverse]
        else:
            res[k] = [v[i] for i in inverse.tolist()]
    return res


def _gathered(v, first: np.ndarray, counts: np.ndarray, sel: np.ndarray, shared: bool = False):
    """The per-atom rows of samples ``sel`` one after another: a copy per run of consecutive samples."""
    sel = np.asarray(sel, np.int64)
    made, dest = _batch_buffer((int(counts[sel].sum()), *v.shape[1:]), v.dtype, shared)
    if len(sel) == 0:
        return made
    cut = np.flatnonzero(np.diff(sel) != 1) + 1
    lo, last = sel[np.r_[0, cut]], sel[np.r_[cut - 1, len(sel) - 1]]
    at = 0
    for a, b in zip(first[lo].tolist(), (first[last] + counts[last]).tolist(), strict=True):
        dest[at:at + b - a] = v[a:b]
        at += b - a
    return made


class _File:
    """One open file and its members' Sources read so far (one shared store); closing it closes them all."""

    def __init__(self, path: str, store, entry, config: dict | None = None, shared=None) -> None:
        self.path, self._store, self._entry = path, store, entry
        self._config = config   # (a file of one member: what its Source opens, the copy's with a cache)
        self._sources: dict[int, object] = {}
        self._shared = shared   # (a file of several: its members on the one store)

    @classmethod
    def of(cls, config: dict, cache_dir: str | None) -> _File:
        """The file of a member with Source ``config`` (the node's copy with ``cache_dir``)."""
        from ..sources import config_location

        path, entry = config.get("path"), None
        if cache_dir and config.get("identity") is not None:   # (its store shipped its state: fetched bytes)
            config, entry = _cached(config, cache_dir)
        source = _source_class(config)
        if not source.shares_file_store:
            return cls(path, None, entry, config)
        try:
            store = config_location(config).store(config.get("identity"), config.get("round_trip"))
        except BaseException:
            if entry is not None:
                entry.close()
            raise
        return cls(path, store, entry, shared=source.shared_file(store, path, described_here=entry is not None))

    #: bytes are counted by the dataset's I/O trace, not per file
    bytes_read = 0

    def remote_stats(self) -> None:
        return None

    def member(self, i: int, member: _Member):
        """Member ``i``'s Source on this file (made on first use, then kept with the file)."""
        src = self._sources.get(i)
        if src is None:
            src = self._sources[i] = self._open(member)
        return src

    def _open(self, member: _Member):
        from ..sources import source_from_config

        if self._shared is None:   # (an object's options travel in its config)
            return source_from_config(dict(self._config))
        return self._shared.member(member.config, member.layout)

    def close(self) -> None:
        for src in self._sources.values():
            src.close()
        self._sources = {}
        if self._shared is not None:
            self._shared.close()
            self._shared = None
        if self._store is not None:
            forget = getattr(self._store, "forget_ahead", None)   # (requests started ahead, not asked for)
            if forget is not None:
                forget()
            self._store.close()
            self._store = None
        if self._entry is not None:
            self._entry.close()
            self._entry = None


def _cached(config: dict, cache_dir: str):
    """The member's config pointed at the node's copy of its object, and the entry that keeps it in use."""
    from ..sources import config_location
    from ..storage.nodecache import NodeCache

    url = config["path"]
    identity = config.get("identity")   # (the object's ETag and size, as its store's state() ships them)
    entry = NodeCache(cache_dir).open(config_location(config), identity)
    local = _source_class(config).node_copy_config(config, entry.path)
    if local is None:
        from ..sources.registry import format_sources

        kept = ", ".join(f for cls in format_sources() if cls.kept_on_node for f in cls.formats)
        entry.close()
        raise StoreError(url, f"a {config['kind']} member is read from its URL (cache_dir keeps {kept} files)")
    return local, entry


def _source_class(config: dict):
    from ..sources.registry import source_class

    return source_class(config["kind"])


__all__ = ["FIELDS", "EnsembleDataset"]
