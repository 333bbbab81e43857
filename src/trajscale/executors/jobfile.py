"""A pool's job sent to each worker once per run, not with every task: a large job (an all-atom reference) would be
pickled and unpickled once per task.  :func:`ship` writes it once to the pool's own folder and hands out a small
:class:`JobFile`; a worker keeps the last job it loaded, by digest.  Imported by a worker first: nothing heavy here."""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
from dataclasses import dataclass

#: A pickled job up to this size travels with each task; a larger one is written once for the run...
INLINE_BYTES = 64 * 1024
#: ...as is one over half that size sent with so many hand-outs that it would be pickled and unpickled this
#: much in all (an ensemble's round lists its members: 56 kB for 128, with each of its 8 tasks on 2 workers).
INLINE_TOTAL_BYTES = 256 * 1024


def ships(size: int, hand_outs: int) -> bool:
    """Whether a pickled job of ``size`` bytes handed out ``hand_outs`` times is written once instead."""
    return size > INLINE_BYTES or (size > INLINE_BYTES // 2 and size * hand_outs > INLINE_TOTAL_BYTES)


#: The last job this worker loaded: ``[digest, job]``.
_LOADED: list = []


@dataclass(frozen=True)
class JobFile:
    """Where a run's pickled job lies, and its digest (what a worker's loaded job is known by)."""

    path: str
    digest: str
    size: int


def ship(blob: bytes, folder: str) -> JobFile:
    """Write the pickled job once into ``folder`` under another name, renamed into place: never read half-written."""
    digest = hashlib.blake2b(blob, digest_size=16).hexdigest()
    path = os.path.join(folder, f"job-{digest}.pickle")
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)   # the job may hold storage credentials
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(blob)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return JobFile(path=path, digest=digest, size=len(blob))


def unship(ref: JobFile | None) -> None:
    """Remove the run's job file (the run is over: every worker that needed it has loaded it)."""
    if ref is not None:
        with contextlib.suppress(OSError):
            os.unlink(ref.path)


def shipped_tasks(ref: JobFile, tasks, after=None, spill_to: str | None = None):
    """A shipped job's tasks: the job loaded once per run, then :func:`~.startup.worker_tasks`."""
    import itertools

    from .startup import worker_tasks

    pending = iter(tasks)   # (claims: the first task is taken here, the others as they run)
    first = next(pending, None)
    if first is None:
        return []
    return worker_tasks(_load(ref, *first), itertools.chain([first], pending), after, spill_to)


def _load(ref: JobFile, task: int, frames):
    if _LOADED and _LOADED[0] == ref.digest:
        return _LOADED[1]
    from .startup import note_task

    note_task(task)   # noted before loading, as for the task itself: a worker that dies meanwhile names its frames
    _LOADED.clear()   # the previous run's job goes before this one is loaded
    try:
        with open(ref.path, "rb") as fh:
            job = pickle.load(fh)
    except OSError as exc:
        from ..errors import TaskError

        raise TaskError(f"pid {os.getpid()}", frames.start, frames.stop,
                        f"cannot read the run's job from {ref.path}: {exc.strerror or exc}") from None
    _LOADED[:] = [ref.digest, job]
    return job
