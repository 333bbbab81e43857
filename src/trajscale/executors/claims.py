"""How a pool hands its tasks to its workers: one at a time, or claims each worker takes its tasks from."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from ..block import FrameRange
from .base import Homecoming, Job


@dataclass(frozen=True)
class TaskClaims:
    """A pool's tasks that its workers take themselves, in frame order, each the next one not yet taken.

    A worker handed one task at a time cannot fetch its next task's first block while it maps the last
    one's (a round trip per task behind a URL); one that takes its tasks knows its next one early, and the
    workers still balance.  The counters are in a small file changed under a lock: one way for processes
    however started, and for threads."""

    path: str
    ranges: tuple[FrameRange, ...]

    @classmethod
    def create(cls, folder: str | None, ranges: Sequence[FrameRange]) -> TaskClaims:
        """Claims of ``ranges`` in a new file in ``folder`` (None: the temporary directory)."""
        import tempfile

        fd, path = tempfile.mkstemp(prefix="claims-", dir=folder)
        os.write(fd, b"0 0")
        os.close(fd)
        return cls(path, tuple(ranges))

    def _count(self, which: int, add: int) -> int:
        """Counter ``which`` (0: next task, 1: tasks finished) before adding ``add`` to it."""
        import fcntl

        with open(self.path, "r+b") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX if add else fcntl.LOCK_SH)
            counts = [int(x) for x in fh.read().split()]
            if add:
                was, counts[which] = counts[which], counts[which] + add
                fh.seek(0)
                fh.write(b"%d %d" % tuple(counts))
                fh.truncate()
                return was
            return counts[which]

    def __iter__(self) -> Iterator[tuple[int, FrameRange]]:
        while (task := self._count(0, 1)) < len(self.ranges):
            yield task, self.ranges[task]

    def finished(self) -> None:
        """Count one more task finished (the root's progress)."""
        self._count(1, 1)

    def stop(self) -> None:
        """No task is taken any more (each worker ends the task it runs and the one it took next)."""
        with contextlib.suppress(OSError, ValueError, IndexError):
            self._count(0, len(self.ranges))

    @property
    def n_finished(self) -> int:
        try:
            return self._count(1, 0)
        except (OSError, ValueError, IndexError):   # removed with its pool
            return 0

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.path)


@dataclass(frozen=True)
class HandOut:
    """What a pool submits: ``runs`` of tasks (a list, or claims) and ``after``, called after each task."""

    runs: list
    claims: TaskClaims | None = None

    @property
    def after(self) -> Callable[[], None] | None:
        return self.claims.finished if self.claims is not None else None

    def progress(self, home: Homecoming) -> int:
        """Tasks done: those home, or those the claiming workers have finished (home when a worker runs out)."""
        return max(home.n_home, self.claims.n_finished) if self.claims is not None else home.n_home

    def stop(self) -> None:
        if self.claims is not None:
            self.claims.stop()

    def remove(self) -> None:
        if self.claims is not None:
            self.claims.remove()


def hand_out(job: Job, ranges: list[FrameRange], n_workers: int, folder: str | None = None) -> HandOut:
    """How a pool hands out its tasks: one at a time, or, for a source that reads ahead, :class:`TaskClaims`
    in ``folder`` (None: the temporary directory), which the caller removes (:meth:`HandOut.remove`)."""
    if job.reads_ahead and len(ranges) > 1:
        claims = TaskClaims.create(folder, ranges)
        return HandOut([claims] * min(n_workers, len(ranges)), claims)
    return HandOut([[(i, r)] for i, r in enumerate(ranges)])


__all__ = ["HandOut", "TaskClaims", "hand_out"]
