"""An ensemble run's results folder: finished trajectories' results saved a round at a time, for a later ``--resume``.

Layout of ``FOLDER``:

* ``ensemble.json``: what the run is (its analyses' configs, the frames it analyses): a resumed run must
  be the same run, or it is refused;
* ``trajectories/batch-NNNNNN.npz``: the results of finished trajectories, many to a file (about one per
  :data:`SAVE_MEMBERS`), each round's written when it finishes under a temporary name, fsynced and
  renamed: a file there is whole.  While the run's last file is small, the next round's are written with
  it into a new file that names it as replaced, which is then removed (a run killed between the two finds
  both and removes the replaced one).  A resumed run starts a file of its own.

  Each file holds three arrays: ``index`` (JSON: its trajectories' names and the files it replaces),
  ``meta`` (JSON: each trajectory's plain values, costs and where each of its arrays lies in ``data``) and
  ``data`` (the arrays' bytes).  No pickles: reading one runs no code, and only result classes of
  trajscale's own modules are rebuilt.  For :data:`AGGREGATES`, the partial the aggregate is made from is
  kept too;
* ``refused.csv``: the trajectories that were not analysed, with their catalog rows and the reason.

A run resumed (``resume=True``) skips the trajectories saved there and ends with the same outputs as a run
that was never stopped: the outputs are always made from these files, read back a file at a time.
"""

from __future__ import annotations

import csv
import dataclasses
import importlib
import io
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import numpy as np

from ..errors import ConfigError, OutputError
from ..locks import OutputLock
from ..storage import redacted

#: Version of the folder's layout.
FORMAT = 2
#: Analyses whose partials add exactly (integer histograms, fixed-point sums): an ensemble's aggregate over
#: its members is the reduce of their partials, the bits of one run over their concatenation.
AGGREGATES = frozenset({"rdf"})
MANIFEST = "ensemble.json"
#: Held while a run uses the folder (:class:`~trajscale.locks.OutputLock`): a second run there is refused.
LOCK = ".lock"
MEMBERS = "trajectories"
REFUSED = "refused.csv"
#: Trajectories a file of the folder gathers before the next round starts a file of its own; and the
#: bytes of arrays past which it does so anyway (what reading one file back holds in memory).
SAVE_MEMBERS = 64
SAVE_BYTES = 64 * 2**20
_TMP = ".tmp-"
_BATCH = re.compile(r"^batch-(\d{6,})\.npz$")
_ALIGN = 16   # (each array's bytes start at a multiple of this in ``data``)
_POS_BITS = 32   # (a trajectory's place: its file's number above these bits, its position in the file below)


def batch_name(seq: int) -> str:
    return f"batch-{seq:06d}.npz"


class _Batch:
    """Trajectories' records encoded for one file: names, plain values (with where each array lies) and the
    arrays' bytes."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.metas: list[dict] = []
        self.chunks: list[bytes] = []
        self.nbytes = 0

    def add(self, name: str, record: MemberRecord) -> None:
        meta, arrays = record.encode()
        where = {}
        for key, arr in arrays.items():
            arr = np.ascontiguousarray(arr)
            if arr.dtype.kind in "OV":
                raise ConfigError(f"{key}: an array of {arr.dtype} cannot be saved with an ensemble's results")
            where[key] = [arr.dtype.str, list(arr.shape), self.nbytes]
            data = arr.tobytes()
            pad = -len(data) % _ALIGN
            self.chunks.append(data + b"\0" * pad if pad else data)
            self.nbytes += len(data) + pad
        meta["arrays"] = where
        self.names.append(name)
        self.metas.append(meta)

    def extend(self, other: _Batch) -> None:
        for meta in other.metas:
            for spec in meta["arrays"].values():
                spec[2] += self.nbytes
        self.names += other.names
        self.metas += other.metas
        self.chunks += other.chunks
        self.nbytes += other.nbytes

    def write(self, fh, replaces: list[str]) -> None:
        index = {"format": FORMAT, "names": self.names, "replaces": replaces}
        np.savez(fh, index=_json_bytes(index), meta=_json_bytes(self.metas),
                 data=np.frombuffer(b"".join(self.chunks), np.uint8))


def _json_bytes(value) -> np.ndarray:
    return np.frombuffer(json.dumps(value, separators=(",", ":")).encode(), np.uint8)


def _json_of(arr: np.ndarray):
    return json.loads(arr.tobytes().decode())


class ResultsFolder:
    """A run's results folder ``path`` (made if missing) for the run ``manifest`` (plain values): with
    ``resume``, the results a run of the same manifest saved there are kept and their trajectories skipped;
    with ``overwrite``, another run's are removed (without it, such a folder is refused)."""

    def __init__(self, path: str | os.PathLike, manifest: Mapping, resume: bool = False,
                 overwrite: bool = False) -> None:
        self.path = Path(path)
        self.members = self.path / MEMBERS
        # (written as shown, never with a URL's password or a secret option; a resumed run's is compared so too)
        self.manifest = redacted({"format": FORMAT, **json.loads(json.dumps(dict(manifest), default=str))})
        self.lock = folder_lock(self.path)
        #: whether this run took the lock (not its caller): it lets go of it when it ends
        self.own_lock = self.lock.take()   # (before the folder is read: no other run changes it meanwhile)
        old = self._read_manifest()
        if old is not None and resume and old != self.manifest:
            raise ConfigError(f"{self.path}: holds the results of another run (its analyses or frames differ: "
                              f"{_first_difference(old, self.manifest)}); resume it with the same analyses and "
                              "options, or give another folder")
        if (old is not None or self._any_saved()) and not resume:
            if not overwrite:
                raise OutputError(self.path, "holds an ensemble run's results: --resume to go on with it, "
                                             "--overwrite to start again")
            import shutil

            shutil.rmtree(self.members, ignore_errors=True)
            for f in (MANIFEST, REFUSED):
                (self.path / f).unlink(missing_ok=True)
        try:
            self.members.mkdir(exist_ok=True)
        except OSError as exc:
            raise OutputError(self.path, f"cannot make the results folder ({exc.strerror or exc})") from None
        for stale in self.members.glob(f"*{_TMP}*"):   # left by a run killed while it wrote
            stale.unlink(missing_ok=True)
        if old != self.manifest:   # (a resumed run writes nothing it has not changed: the folder may be read-only)
            _write_atomic(self.path / MANIFEST, lambda fh: fh.write(json.dumps(self.manifest, indent=1).encode()))
        self._files = self._batch_files()
        self._seq = max(self._files, default=0) + 1   # the number of the next file this run writes
        self._pending = _Batch()   # the round under way's trajectories, written by sync
        self._tail: tuple[int, _Batch] | None = None   # this run's last file while it is small
        self._where: dict[str, int] | None = None   # trajectory name -> its file's number and position
        self._read: tuple[int, list[dict], np.ndarray] | None = None   # the file read last

    @staticmethod
    def manifest_in(path: str | os.PathLike) -> dict:
        """What the run whose results are in folder ``path`` was ({} where none is)."""
        try:
            return json.loads((Path(path) / MANIFEST).read_text())
        except (OSError, ValueError):
            return {}

    def _read_manifest(self) -> dict | None:
        try:
            return json.loads((self.path / MANIFEST).read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise OutputError(self.path / MANIFEST, f"cannot be read ({exc})") from None

    def _any_saved(self) -> bool:
        return self.members.is_dir() and any(self.members.iterdir())

    def _batch_files(self) -> dict[int, Path]:
        """The folder's files by number, less those a whole later file replaces (removed: a run stopped
        between writing a file and removing the one it replaces)."""
        files = {}
        for n in os.listdir(self.members):
            m = _BATCH.match(n)
            if m:
                files[int(m.group(1))] = self.members / n
        replaced = set()
        for seq in sorted(files):
            replaced.update(self._index(files[seq])["replaces"])
        for seq in [s for s, p in files.items() if p.name in replaced]:
            files.pop(seq).unlink(missing_ok=True)
        return dict(sorted(files.items()))

    @staticmethod
    def _index(path: Path) -> dict:
        try:
            with np.load(path, allow_pickle=False) as z:
                return _json_of(z["index"])
        except (OSError, ValueError, KeyError, EOFError) as exc:
            raise OutputError(path, f"saved trajectories' results cannot be read ({exc}); remove it to run "
                                    "its trajectories again") from None

    def saved(self) -> Mapping[str, int]:
        """The names of the trajectories saved (a mapping whose keys are the names)."""
        if self._where is None:
            where: dict[str, int] = {}
            for seq, path in self._files.items():
                for pos, name in enumerate(self._index(path)["names"]):
                    where[name] = (seq << _POS_BITS) | pos
            self._where = where
        return self._where

    def save(self, name: str, record: MemberRecord) -> None:
        """Keep one trajectory's record for the file :meth:`sync` writes (its arrays as bytes, its record let go)."""
        self._pending.add(name, record)

    def sync(self) -> None:
        """Write the trajectories kept since the last call as one file (temporary name, fsync, rename; the
        folder fsynced): with this run's last file's while that one is small, which is then removed."""
        batch, self._pending = self._pending, _Batch()
        if not batch.names:
            return
        replaces = []
        if self._tail is not None:
            old_seq, old = self._tail
            old.extend(batch)
            batch, replaces = old, [batch_name(old_seq)]
        seq = self._seq
        self._seq += 1
        path = self.members / batch_name(seq)
        _write_atomic(path, lambda fh: batch.write(fh, replaces))
        self._files[seq] = path
        for r in replaces:
            self._files.pop(int(_BATCH.match(r).group(1)), None)
            (self.members / r).unlink(missing_ok=True)
        where = self.saved()
        for pos, n in enumerate(batch.names):
            where[n] = (seq << _POS_BITS) | pos
        small = len(batch.names) < SAVE_MEMBERS and batch.nbytes < SAVE_BYTES
        self._tail = (seq, batch) if small else None

    def load(self, name: str) -> MemberRecord:
        """One trajectory's record (its file read once for the trajectories after it in that file)."""
        at = self.saved().get(name)
        if at is None:
            raise KeyError(f"{self.path}: no saved trajectory named {name!r}")
        seq, pos = at >> _POS_BITS, at & ((1 << _POS_BITS) - 1)
        if self._read is None or self._read[0] != seq:
            path = self._files[seq]
            try:
                with np.load(path, allow_pickle=False) as z:
                    self._read = (seq, _json_of(z["meta"]), z["data"])
            except (OSError, ValueError, KeyError, EOFError) as exc:
                raise OutputError(path, f"saved trajectories' results cannot be read ({exc}); remove it to "
                                        "run its trajectories again") from None
        _, metas, data = self._read
        return MemberRecord.decode(metas[pos], data)

    def n_files(self) -> int:
        """The files holding the trajectories' results."""
        return len(self._files)

    def write_refused(self, rows: list[dict], columns: Iterable[str]) -> Path:
        path = self.path / REFUSED
        write_refused(path, rows, columns)
        return path


def folder_lock(path: str | os.PathLike) -> OutputLock:
    """The lock a run holds on its results folder ``path`` (made now if missing)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputError(path, "is a file: an ensemble's results go into a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(path, f"cannot make the results folder ({exc.strerror or exc})") from None
    return OutputLock(path / LOCK, path, "its results there")


def write_refused(path: str | os.PathLike, rows: list[dict], columns: Iterable[str]) -> None:
    """The refused table as CSV: each trajectory's catalog row and the reason (URLs shown without a password)."""
    cols = list(dict.fromkeys([*columns, "reason"]))
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: "" if r.get(k) is None else redacted(r.get(k)) for k in cols})
    data = out.getvalue().encode()
    try:
        if Path(path).read_bytes() == data:
            return   # (as the run before left it: a complete folder is resumed without a write)
    except OSError:
        pass
    _write_atomic(Path(path), lambda fh: fh.write(data))


def _write_atomic(path: Path, write: Callable, sync_folder: bool = True) -> None:
    """``write(handle)`` into a temporary file beside ``path``, fsynced, renamed over ``path``."""
    tmp = path.with_name(f"{path.name}{_TMP}{os.getpid()}")
    try:
        with open(tmp, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise OutputError(path, f"cannot be written ({exc.strerror or exc})") from None
    if sync_folder:
        _fsync_folder(path.parent)


def _fsync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _first_difference(a: dict, b: dict) -> str:
    for k in dict.fromkeys([*a, *b]):
        if a.get(k) != b.get(k):
            return f"{k}: {a.get(k)!r} there, {b.get(k)!r} now"
    return "none"


def saved_names(path: str | os.PathLike) -> list[str]:
    """The trajectories a results folder holds, file by file (read only: nothing there is removed)."""
    folder = Path(path) / MEMBERS
    if not folder.is_dir():
        return []
    files = sorted((int(m.group(1)), folder / n) for n in os.listdir(folder) if (m := _BATCH.match(n)))
    indexes = [(p, ResultsFolder._index(p)) for _, p in files]
    replaced = {r for _, ix in indexes for r in ix["replaces"]}
    return [n for p, ix in indexes if p.name not in replaced for n in ix["names"]]


@dataclasses.dataclass(frozen=True, eq=False)
class MemberRecord:
    """One finished trajectory: each analysis's result, what it cost, and the partials kept for aggregates."""

    name: str
    index: int           # in the ensemble
    results: tuple       # each analysis's, in the run's order
    stats: dict          # frames, bytes, opens and seconds, summed over its pieces
    partials: tuple = ()   # per analysis of :data:`AGGREGATES`, its whole partial and plain preparation; else None

    def encode(self) -> tuple[dict, dict[str, np.ndarray]]:
        """The record's plain values (JSON) and its arrays, named."""
        arrays: dict[str, np.ndarray] = {}
        meta = {"name": self.name, "index": self.index, "stats": self.stats, "results": [], "partials": []}
        for k, r in enumerate(self.results):
            meta["results"].append(_encode_dataclass(r, f"r{k}.", arrays))
        for k, p in enumerate(self.partials):
            meta["partials"].append(None if p is None else _encode_value(p, f"p{k}", arrays))
        return meta, arrays

    @classmethod
    def decode(cls, meta: dict, data: np.ndarray) -> MemberRecord:
        """The record whose plain values are ``meta`` and whose arrays lie in ``data`` (copied out of it)."""
        arrays = {}
        for key, (dtype, shape, offset) in meta["arrays"].items():
            dt = np.dtype(dtype)
            count = int(np.prod(shape, dtype=np.int64))
            arrays[key] = (np.frombuffer(data, dt, count, offset).reshape(shape).copy() if count
                           else np.empty(shape, dt))
        results = tuple(_decode_dataclass(m, arrays) for m in meta["results"])
        partials = tuple(None if p is None else _decode_value(p, arrays) for p in meta["partials"])
        return cls(meta["name"], int(meta["index"]), results, meta["stats"], partials)


def _encode_dataclass(obj, prefix: str, arrays: dict) -> dict:
    cls = type(obj)
    if not dataclasses.is_dataclass(obj) or not cls.__module__.startswith("trajscale."):
        raise ConfigError(f"{cls.__name__}: an ensemble saves the results of trajscale's analyses (dataclasses); "
                          "run this analysis without a results folder")
    fields = {}
    for f in dataclasses.fields(obj):
        if f.name == "report":
            continue
        fields[f.name] = _encode_value(getattr(obj, f.name), prefix + f.name, arrays)
    return {"class": f"{cls.__module__}:{cls.__qualname__}", "fields": fields}


def _encode_value(v, key: str, arrays: dict):
    if isinstance(v, np.ndarray):
        if v.dtype == object:
            raise ConfigError(f"{key}: an array of Python objects cannot be saved without pickles")
        arrays[key] = v
        return {"array": key}
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, bool | str | float) or v is None:
        return {"value": v}
    if isinstance(v, int):
        return {"int": str(v)}   # (an exact sum may pass 2**63)
    if isinstance(v, tuple | list):
        return {"tuple" if isinstance(v, tuple) else "list": [_encode_value(x, f"{key}.{i}", arrays)
                                                              for i, x in enumerate(v)]}
    if isinstance(v, dict):
        return {"dict": {str(k): _encode_value(x, f"{key}.{k}", arrays) for k, x in v.items()}}
    raise ConfigError(f"{key}: a {type(v).__name__} cannot be saved with an ensemble's results")


def _decode_value(e: dict, data: dict):
    if "array" in e:
        return data[e["array"]]
    if "value" in e:
        return e["value"]
    if "int" in e:
        return int(e["int"])
    if "tuple" in e:
        return tuple(_decode_value(x, data) for x in e["tuple"])
    if "list" in e:
        return [_decode_value(x, data) for x in e["list"]]
    return {k: _decode_value(x, data) for k, x in e["dict"].items()}


def _decode_dataclass(meta: dict, data: dict):
    module, _, qualname = meta["class"].partition(":")
    if not module.startswith("trajscale."):   # only trajscale's own classes are rebuilt (no code from the folder)
        raise OutputError(module, "a saved result names a class outside trajscale")
    cls = getattr(importlib.import_module(module), qualname)
    return cls(**{k: _decode_value(v, data) for k, v in meta["fields"].items()})


__all__ = ["AGGREGATES", "SAVE_MEMBERS", "MemberRecord", "ResultsFolder", "folder_lock", "saved_names",
           "write_refused"]
