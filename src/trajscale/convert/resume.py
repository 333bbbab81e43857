"""Resumable outputs: a partial file beside a progress record, renamed only when complete.

``convert`` and ``rechunk`` write ``NAME`` as ``.NAME.<kind>-partial`` with a
progress record ``.NAME.<kind>-progress.json`` beside it (the inputs' identity,
the options, and how far the work got).  An interrupted run leaves both;
``--resume`` checks that the record was made from the same inputs and options
and continues from it; :meth:`Partial.finish` renames the file to ``NAME`` only
after the caller has counted every frame, with an fsync before and after, so a
crash leaves either the old state or the whole new file.  Parallel runs keep
their per-worker segments (and each segment's own record, written by that
worker alone) in the folder ``.NAME.<kind>-parts``; runs that write the
partial file in place (``convert.direct``) keep one record per worker range
beside it (``.NAME.<kind>-progress.K.json``).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import shutil
from pathlib import Path

from ..errors import OutputError
from ..util import fsync_path

log = logging.getLogger(__name__)


def identity(paths) -> list[dict]:
    """Real path, size and mtime of each input: a resume refuses inputs changed since."""
    out = []
    for p in paths:
        st = os.stat(p)
        out.append({"input": os.path.realpath(p), "size": st.st_size, "mtime_ns": st.st_mtime_ns})
    return out


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


#: lock file path -> (descriptor, pid) of the partial-output locks this process holds: a resume in the
#: same process (the Python API after an interrupt) takes its own lock over
_HELD: dict[str, tuple[int, int]] = {}


class Partial:
    """The temporary file, progress record and segment folder of one resumable output.

    Parameters
    ----------
    final
        The output's name (already checked by ``check_output_path``).
    kind
        ``"convert"`` or ``"rechunk"``: part of the temporary names.
    wanted
        What the record must hold for a resume to continue it (inputs' identity, options).
    """

    def __init__(self, final: Path, kind: str, wanted: dict) -> None:
        self.final = Path(final)
        self.kind = kind
        self.wanted = json.loads(json.dumps(wanted))   # as it reads back from JSON
        self.tmp, self.record_path = partial_paths(final, kind)
        self.parts = unfinished(final, kind)[2]
        self.lock_path = self.final.with_name(f".{self.final.name}.{kind}-lock")
        self.record: dict | None = None
        self._lock: int | None = None   # the lock file's descriptor while this process holds it
        self._owner = 0                  # the pid that took it (a forked worker inherits, never removes it)

    def begin(self, resume: bool, fresh: dict, save: bool = True) -> bool:
        """Load the record (``resume``) or start a new one from ``fresh`` (written now if ``save``);
        True if resuming.  ``resume`` with nothing to resume starts a new one, saying so in one line.
        Refused (OutputError) while another live process holds the partial output (:meth:`hold`)."""
        self.hold()
        rec = load_record(self.record_path) if resume else None
        if resume and (rec is None or not (self.tmp.exists() or self.parts.exists())):
            # a requeued job's first start gives --resume too: nothing to finish, so start the work
            log.info("%s: nothing to resume (no unfinished %s beside it): starting the %s", self.final, self.kind,
                     self.kind)
            resume = False
        if resume:
            if {k: rec.get(k) for k in self.wanted} != self.wanted:
                raise OutputError(self.final, "the partial output was made from another input or layout "
                                              "(or other options); start again without --resume")
            self.record = rec
            return True
        self.discard()
        self.record = {**self.wanted, **fresh}
        if save:
            self.save()
        return False

    def hold(self) -> None:
        """Take the lock file ``.NAME.<kind>-lock`` beside the partial output for this process's life.

        A process that writes the partial output (this one, and the workers it forks, which share the
        lock) holds an ``flock`` on it; another run on the same output, ``--resume`` or not, is refused
        while one does: two writers would corrupt it.  The kernel drops the lock when the last holder
        exits, however it ends, so a killed run leaves no stale lock.
        """
        if self._lock is not None:
            return
        held = _HELD.get(str(self.lock_path))
        if held is not None and held[1] == os.getpid():   # an earlier, interrupted run of this process
            self._lock, self._owner = held
            return
        import fcntl

        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
            finally:
                os.close(fd)
            raise OutputError(self.final, f"another process (pid {holder}) is writing its partial output "
                                          f"{self.tmp.name}: wait for it to end, or stop it, before running "
                                          "this again") from None
        except OSError:   # a file system without locks (some network mounts): go on unguarded
            os.close(fd)
            return
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._lock, self._owner = fd, os.getpid()
        _HELD[str(self.lock_path)] = (fd, self._owner)
        # An interrupted run leaves its partial output and record, not the lock (forked workers
        # end by os._exit, without atexit handlers, so only this process removes it)
        atexit.register(self.release)

    def release(self) -> None:
        """Remove and let go of the lock file (the output is finished or discarded, or this process ends)."""
        if self._lock is not None and self._owner == os.getpid():
            if _HELD.get(str(self.lock_path), (None,))[0] == self._lock:
                del _HELD[str(self.lock_path)]
                self.lock_path.unlink(missing_ok=True)
                os.close(self._lock)
            self._lock = None

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
        self.record_path.unlink(missing_ok=True)
        for p in self._worker_records():
            p.unlink(missing_ok=True)
        shutil.rmtree(self.parts, ignore_errors=True)
        self.release()

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
