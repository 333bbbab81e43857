"""Resumable outputs: a partial file beside a progress record, renamed only when complete.

``NAME`` is written as ``.NAME.<kind>-partial`` beside ``.NAME.<kind>-progress.json`` (the run's
:class:`ResumeKey` and how far the work got); :meth:`Partial.finish` renames it, with an fsync before and after,
so a crash leaves either the old state or the whole new file.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from ..errors import OutputError
from ..locks import OutputLock
from ..storage.location import Location
from ..util import fsync_path

log = logging.getLogger(__name__)


class WriteMode(Enum):
    """How a resumable output is being written: a resume continues only a partial output of its own mode."""

    SERIAL = "serial"
    """One pass writes the partial file, counted in the one record."""
    DIRECT = "direct"
    """Frame ranges written at their byte addresses in the preallocated partial file (``convert.direct``)."""
    SEGMENTS = "segments"
    """Each worker writes a segment file with its own record; joined or mapped at the end (``convert.segmented``)."""
    COLLECTIVE = "collective"
    """MPI ranks write the one file through parallel HDF5, in counted rounds (``convert.parallel``)."""

    @property
    def said(self) -> str:
        """The mode in words, with how to resume it."""
        return _MODE_SAID[self]


_MODE_SAID = {
    WriteMode.SERIAL: "serially",
    WriteMode.DIRECT: "in place by frame ranges (uncompressed, serial or --executor processes/dask)",
    WriteMode.SEGMENTS: "as per-worker segments (--executor processes/dask, or --virtual)",
    WriteMode.COLLECTIVE: "by MPI ranks into one file (mpiexec -n N ... --resume)",
}

#: A plain value an option is recorded as (JSON's scalars, compared exactly after a round trip).
OptionValue = str | int | float | bool | None


@dataclass(frozen=True, slots=True)
class InputIdentity:
    """An input as a resume recognises it: real path, size and mtime (a changed input is refused)."""

    path: str
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, where: Location) -> InputIdentity:
        """``where``'s name, size and version (:meth:`~trajscale.storage.bytestore.ByteStore.stamp`: a local
        file's mtime, an object's ETag); a URL as shown, without its password: the record is written to disk."""
        from ..storage import redacted

        name, size, version = where.store().stamp()
        return cls(redacted(name), size, version)


@dataclass(frozen=True, slots=True)
class ResumeKey:
    """What a partial output was made from: a resume continues it only when its own key is equal (a record
    without one, an earlier trajscale's, is refused in one line)."""

    kind: str                                      # "convert" or "rechunk"
    mode: WriteMode
    inputs: tuple[InputIdentity, ...]              # every input file, in order
    options: tuple[tuple[str, OptionValue], ...]   # each that shapes the output's bytes, by its CLI name

    @classmethod
    def of(cls, kind: str, mode: WriteMode, inputs: list[Location], options: dict[str, OptionValue]) -> ResumeKey:
        """The key of a run on the files ``inputs`` (stat'ed now) with ``options``."""
        return cls(kind, mode, tuple(InputIdentity.of(p) for p in inputs), tuple(options.items()))

    def to_dict(self) -> dict:
        return {"kind": self.kind, "mode": self.mode.value,
                "inputs": [[i.path, i.size, i.mtime_ns] for i in self.inputs], "options": dict(self.options)}

    @classmethod
    def from_dict(cls, d: dict) -> ResumeKey:
        """The key :meth:`to_dict` gave (ValueError, KeyError or TypeError on anything else)."""
        return cls(str(d["kind"]), WriteMode(d["mode"]),
                   tuple(InputIdentity(str(p), int(n), int(t)) for p, n, t in d["inputs"]),
                   tuple((str(k), v) for k, v in dict(d["options"]).items()))

    def difference(self, now: ResumeKey) -> str | None:
        """The first way this (recorded) key differs from ``now``'s, in words; None when equal."""
        for was, is_ in zip(self.inputs, now.inputs, strict=False):
            if was.path != is_.path:
                return f"the partial output was made from another input ({was.path}, not {is_.path})"
            if was != is_:
                return f"the partial output was made from another input: {is_.path} changed since"
        if len(self.inputs) != len(now.inputs):
            return (f"the partial output was made from another input list ({len(self.inputs)} files, "
                    f"not {len(now.inputs)})")
        if self.mode is not now.mode:
            return f"the partial output was written {self.mode.said}; this run writes {now.mode.said}"
        was_opts, now_opts = dict(self.options), dict(now.options)
        for name in {**was_opts, **now_opts}:
            if name not in was_opts or name not in now_opts or was_opts[name] != now_opts[name]:
                return (f"the partial output was made with other options ({name} {_said(was_opts.get(name))} "
                        f"there, {_said(now_opts.get(name))} now)")
        return None


def _said(value: OptionValue) -> str:
    return "none" if value is None else str(value)


def load_record(path: Path) -> dict | None:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def save_record(path: Path, record: dict) -> None:
    """Write ``record`` atomically (a reader sees the old or the new one, never half)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as fh:
        json.dump(record, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


class Partial:
    """The temporary file, progress record and segment folder of one resumable output ``final`` (checked by
    ``check_output_path``), made from ``key`` (whose ``kind`` names the temporary files)."""

    def __init__(self, final: Path, key: ResumeKey) -> None:
        self.final = Path(final)
        self.key = key
        self.kind = key.kind
        self.tmp, self.record_path = partial_paths(final, self.kind)
        self.parts = unfinished(final, self.kind)[2]
        self.lock_path = self.final.with_name(f".{self.final.name}.{self.kind}-lock")
        self._lock = OutputLock(self.lock_path, self.final, f"its partial output {self.tmp.name}")
        self.record: dict | None = None
        self._said_resumed = False

    @property
    def mode(self) -> WriteMode:
        """How this output is written (a resumed record's mode is this one: :meth:`begin` checked)."""
        return self.key.mode

    def begin(self, resume: bool, fresh: dict, save: bool = True) -> bool:
        """Load the record (``resume``, if there is one: said in one line if not) or start a new one from
        ``fresh`` (written now if ``save``); True if resuming.  A record of another key, or one another live
        process holds (:meth:`hold`), is refused (OutputError)."""
        self.hold()
        rec = load_record(self.record_path) if resume else None
        if resume and (rec is None or not (self.tmp.exists() or self.parts.exists())):
            # a requeued job's first start gives --resume too: nothing to finish, so start the work
            log.info("%s: nothing to resume (no unfinished %s beside it): starting the %s", self.final, self.kind,
                     self.kind)
            resume = False
        if resume:
            self._check_key(rec)
            self.record = rec
            return True
        self.discard()
        self.record = {"key": self.key.to_dict(), **fresh}
        if save:
            self.save()
        return False

    def say_resumed(self, done: int, total: int, contiguous: bool = True) -> None:
        """Say, once, that this run continues an interrupted one with ``done`` of ``total`` frames counted
        (``contiguous``: the first ``done``; else spread over the workers' ranges); nothing when none were."""
        if done <= 0 or self._said_resumed:
            return
        self._said_resumed = True
        if contiguous:
            log.info("resuming %s from frame %d of %d", self.final, done, total)
        else:
            log.info("resuming %s: %d of %d frames were written before it was interrupted", self.final, done, total)

    def _check_key(self, rec: dict) -> None:
        """Refuse (OutputError, one line) a record whose key is not this run's."""
        try:
            recorded = ResumeKey.from_dict(rec["key"])
        except (KeyError, TypeError, ValueError):   # no key, or not one this version wrote
            raise OutputError(self.final, f"the partial output {self.tmp.name} was written by another version of "
                                          "trajscale and cannot be resumed by this one: start again without "
                                          "--resume (the partial output is then replaced)") from None
        differs = recorded.difference(self.key)
        if differs:
            raise OutputError(self.final, f"{differs}; start again without --resume")

    def hold(self) -> None:
        """Hold ``.NAME.<kind>-lock`` (:class:`~trajscale.locks.OutputLock`): another run on the same output
        is refused while this process (or a forked worker of it) runs."""
        self._lock.take()

    def release(self) -> None:
        """Remove and let go of the lock file (the output is finished or discarded, or this process ends)."""
        self._lock.release()

    def worker_record(self, k: int) -> Path:
        """The progress record of worker range ``k`` of a direct-write run (``convert.direct``)."""
        return self.record_path.with_name(f"{self.record_path.stem}.{k}.json")

    def _worker_records(self) -> list[Path]:
        prefix = self.record_path.stem + "."   # compared as text: a name may hold glob characters
        folder = self.record_path.parent
        return [p for p in folder.iterdir() if p.name.startswith(prefix) and p.name.endswith(".json")
                and p.name != self.record_path.name] if folder.is_dir() else []

    def save(self) -> None:
        save_record(self.record_path, self.record)

    def finish(self) -> None:
        """Rename the complete temporary file to the final name (the caller counted its frames)."""
        fsync_path(self.tmp)
        os.replace(self.tmp, self.final)
        fsync_path(self.final.parent, directory=True)
        self.discard(release=True)   # the record, the segments and the lock (the temporary name is renamed)

    def discard(self, release: bool = False) -> None:
        """Remove the temporary file, the record and the segments (an error, or a fresh start);
        ``release``: the lock too (an error: nothing is left to hold)."""
        self.tmp.unlink(missing_ok=True)
        self.record_path.unlink(missing_ok=True)
        for p in self._worker_records():
            p.unlink(missing_ok=True)
        shutil.rmtree(self.parts, ignore_errors=True)
        if release:
            self.release()


def unfinished(output: str | os.PathLike, kind: str) -> list[Path]:
    """What an unfinished ``kind`` run leaves beside ``output``: temporary file, record, segments."""
    p = Path(output)
    return [*partial_paths(p, kind), p.with_name(f".{p.name}.{kind}-parts")]


def partial_paths(output: str | os.PathLike, kind: str = "rechunk") -> tuple[Path, Path]:
    """The temporary output and the progress record of ``output``."""
    p = Path(output)
    return p.with_name(f".{p.name}.{kind}-partial"), p.with_name(f".{p.name}.{kind}-progress.json")
