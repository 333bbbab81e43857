"""An ensemble run's results folder: each trajectory's results saved as it finishes, for a later ``--resume``.

Layout of ``FOLDER``:

* ``ensemble.json``: what the run is (its analyses' configs, the frames it analyses): a resumed run must
  be the same run, or it is refused;
* ``trajectories/NAME.npz``: one file per finished trajectory (its name quoted to be a file name), with
  each analysis's result arrays, their plain fields as JSON, what reading and mapping it cost, and, for
  the analyses whose partials add exactly (:data:`AGGREGATES`), the partial the ensemble's aggregate is
  made from.  Written under a temporary name, fsynced and renamed: a file there is whole.  NumPy's
  ``.npz`` without pickles: reading one runs no code, and only result classes of trajscale's own
  modules are rebuilt;
* ``refused.csv``: the trajectories that were not analysed, with their catalog rows and the reason.

A run resumed (``resume=True``) skips the trajectories whose files are there and ends with the same
outputs as a run that was never stopped: the outputs are always made from these files.
"""

from __future__ import annotations

import csv
import dataclasses
import importlib
import io
import json
import os
import shutil
import urllib.parse
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

from ..errors import ConfigError, OutputError

#: Version of the folder's layout.
FORMAT = 1
#: Analyses whose partials add exactly (integer histograms, fixed-point sums): an ensemble's aggregate over
#: its members is the reduce of their partials, the bits of one run over their concatenation.
AGGREGATES = frozenset({"rdf"})
MANIFEST = "ensemble.json"
MEMBERS = "trajectories"
REFUSED = "refused.csv"
_TMP = ".tmp-"


def file_name(name: str) -> str:
    """A member's file name: its name quoted (a ``/`` in a name is no folder)."""
    quoted = urllib.parse.quote(name, safe="-_.,=+@")
    if len(quoted) > 200:   # (a file name's limit is 255 bytes)
        import hashlib

        quoted = quoted[:150] + "-" + hashlib.sha256(name.encode()).hexdigest()[:32]
    return quoted + ".npz"


class ResultsFolder:
    """A run's results folder (see the module's docstring).

    Parameters
    ----------
    path
        The folder (made if missing).
    manifest
        What the run is (plain values).
    resume
        Keep the results a run of the same manifest saved there, and skip their trajectories.
    overwrite
        Remove the results of another run saved there (without it, such a folder is refused).
    """

    def __init__(self, path: str | os.PathLike, manifest: Mapping, resume: bool = False,
                 overwrite: bool = False) -> None:
        self.path = Path(path)
        self.members = self.path / MEMBERS
        self.manifest = {"format": FORMAT, **json.loads(json.dumps(dict(manifest), default=str))}
        if self.path.exists() and not self.path.is_dir():
            raise OutputError(self.path, "is a file: an ensemble's results go into a folder")
        old = self._read_manifest()
        if old is not None and resume and old != self.manifest:
            raise ConfigError(f"{self.path}: holds the results of another run (its analyses or frames differ: "
                              f"{_first_difference(old, self.manifest)}); resume it with the same analyses and "
                              "options, or give another folder")
        if (old is not None or self._any_saved()) and not resume:
            if not overwrite:
                raise OutputError(self.path, "holds an ensemble run's results: --resume to go on with it, "
                                             "--overwrite to start again")
            shutil.rmtree(self.members, ignore_errors=True)
            for f in (MANIFEST, REFUSED):
                (self.path / f).unlink(missing_ok=True)
        try:
            self.members.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputError(self.path, f"cannot make the results folder ({exc.strerror or exc})") from None
        for stale in self.members.glob(f"*{_TMP}*"):   # left by a run killed while it wrote
            stale.unlink(missing_ok=True)
        _write_atomic(self.path / MANIFEST, json.dumps(self.manifest, indent=1).encode())

    def _read_manifest(self) -> dict | None:
        try:
            return json.loads((self.path / MANIFEST).read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise OutputError(self.path / MANIFEST, f"cannot be read ({exc})") from None

    def _any_saved(self) -> bool:
        return self.members.is_dir() and any(self.members.iterdir())

    def saved(self) -> set[str]:
        """The file names of the trajectories saved (:func:`file_name`)."""
        if not self.members.is_dir():
            return set()
        return {n for n in os.listdir(self.members) if n.endswith(".npz") and _TMP not in n}

    def save(self, name: str, record: MemberRecord) -> None:
        """Save one trajectory's record (temporary name, fsync, rename); the folder is fsynced by :meth:`sync`."""
        buf = io.BytesIO()
        np.savez(buf, **record.arrays())
        _write_atomic(self.members / file_name(name), buf.getvalue(), sync_folder=False)

    def load(self, name: str) -> MemberRecord:
        return MemberRecord.load(self.members / file_name(name))

    def sync(self) -> None:
        """Make the renames of the files saved so far durable."""
        _fsync_folder(self.members)

    def write_refused(self, rows: list[dict], columns: Iterable[str]) -> Path:
        path = self.path / REFUSED
        write_refused(path, rows, columns)
        return path


def write_refused(path: str | os.PathLike, rows: list[dict], columns: Iterable[str]) -> None:
    """The refused table as CSV: each trajectory's catalog row and the reason."""
    cols = list(dict.fromkeys([*columns, "reason"]))
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: "" if r.get(k) is None else r.get(k) for k in cols})
    _write_atomic(Path(path), out.getvalue().encode())


def _write_atomic(path: Path, data: bytes, sync_folder: bool = True) -> None:
    tmp = path.with_name(f"{path.name}{_TMP}{os.getpid()}")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
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


@dataclasses.dataclass(frozen=True)
class MemberRecord:
    """One finished trajectory: each analysis's result, what it cost, and the partials kept for aggregates.

    Attributes
    ----------
    name, index
        The member's name and its index in the ensemble.
    results
        Each analysis's result (the run's analyses, in order).
    stats
        frames, bytes, t_read, t_open, t_compute (seconds summed over its pieces), opens.
    partials
        For each analysis, its partial over the whole trajectory where it adds exactly
        (:data:`AGGREGATES`; None elsewhere), and the plain values of its preparation the result needs.
    """

    name: str
    index: int
    results: tuple
    stats: dict
    partials: tuple = ()

    def arrays(self) -> dict[str, np.ndarray]:
        """The record as named arrays (its plain values as one JSON string)."""
        arrays: dict[str, np.ndarray] = {}
        meta = {"name": self.name, "index": self.index, "stats": self.stats, "results": [], "partials": []}
        for k, r in enumerate(self.results):
            meta["results"].append(_encode_dataclass(r, f"r{k}.", arrays))
        for k, p in enumerate(self.partials):
            meta["partials"].append(None if p is None else _encode_plain(p, f"p{k}.", arrays))
        arrays["meta"] = np.array(json.dumps(meta))
        return arrays

    @classmethod
    def load(cls, path: Path) -> MemberRecord:
        try:
            with np.load(path, allow_pickle=False) as z:
                data = {k: z[k] for k in z.files}
        except (OSError, ValueError) as exc:
            raise OutputError(path, f"a saved trajectory's results cannot be read ({exc}); remove it to run "
                                    "that trajectory again") from None
        meta = json.loads(str(data["meta"]))
        results = tuple(_decode_dataclass(m, data) for m in meta["results"])
        partials = tuple(None if p is None else _decode_plain(p, data) for p in meta["partials"])
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


def _encode_plain(value, prefix: str, arrays: dict) -> dict:
    return _encode_value(value, prefix.rstrip("."), arrays)


def _decode_plain(meta: dict, data: dict):
    return _decode_value(meta, data)


__all__ = ["AGGREGATES", "MemberRecord", "ResultsFolder", "file_name", "write_refused"]
