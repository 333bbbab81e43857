"""Trajectories still being written: how many of their frames are complete now, and whether they will grow.

A follower (``trajscale run --follow``) takes a :class:`Snapshot` at every poll: a Source opened on the frames
whole at that instant, and whether the writer has said the file is finished.

* H5MD: the length of ``step``, the file opened afresh at each poll without HDF5's file lock, which the writer
  holds (:mod:`trajscale.h5md.follow`); a writer that closes normally marks the file complete.
* XTC/TRR: the frames whose every byte is in the file (:mod:`trajscale.xdr.follow`). These formats have no end
  marker: a file ``TRAJ.done`` beside the trajectory says it.
* A segment index: the parts it lists now; ``INDEX.done`` ends it.

An open that catches the writer mid-flush fails and counts as "no news" until the next poll.

:class:`Watch` remembers the file (inode and size, an index's parts) and its frame 0 as first read, and checks
each later snapshot against them, so a file replaced under the same name (``gmx mdrun`` backs up ``traj.xtc``
and starts a new one), one that shrinks, or a changed part ends the run
(:attr:`~trajscale.endings.Ending.REPLACED`) instead of joining two runs' frames. Damage in an XTC/TRR ends it
too (:attr:`~trajscale.endings.Ending.DAMAGED`), after the whole frames before it.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..endings import Ending, FollowEnded
from ..errors import DamagedFileError, InputFileError, NotFollowableError
from ..storage.location import Location
from ..util import raise_if_stopped
from .base import Source

log = logging.getLogger(__name__)

#: A sidecar file whose existence says the trajectory beside it is finished (formats without a marker).
DONE_SUFFIX = ".done"


@dataclass(frozen=True)
class Snapshot:
    """A trajectory at one instant: ``source`` on its ``n_frames`` complete frames; ``finished`` (read first)."""

    source: Source
    n_frames: int
    finished: bool
    #: Bytes after the last whole frame of a finished XTC/TRR (its writer stopped inside a frame).
    torn_bytes: int = 0
    #: Bytes after the last whole frame of an XTC/TRR, finished or not: an idle end says them.
    trailing_bytes: int = 0
    #: One line naming the damage met after the ``n_frames`` whole frames, or None.
    damage: str | None = None

    def warn_torn_end(self) -> None:
        """Say, once per follow, that a finished file ends inside a frame that is not read."""
        if self.finished and self.torn_bytes > 0:
            log.warning("%s: marked finished, but its last %d bytes are not a whole frame (the writer stopped "
                        "inside frame %d); the %d whole frames are read", self.source.path, self.torn_bytes,
                        self.n_frames, self.n_frames)


def follow_match(path: str):
    """The registry's Source for ``path`` (by its name before it has any bytes), if it can follow a growing file.

    Raises
    ------
    NotFollowableError
        A format read whole (DCD, PDB, ...): refused at once, not after waiting for frames.
    """
    from .registry import by_name, format_sources, guess

    if os.path.isdir(path) or os.path.isfile(path) and os.path.getsize(path) > 0:
        try:
            match = guess(Location(path))
        except InputFileError as exc:
            raise NotFollowableError(path, f"cannot be followed: {exc.problem}") from None
    else:
        match = by_name(path)
    if match is None or not match.source.supports_following:
        can = ", ".join(f for cls in format_sources() if cls.supports_following for f in cls.formats)
        what = "its name is no format's" if match is None else \
            f"{match.format} files are read whole, with no frame count that grows"
        raise NotFollowableError(path, f"cannot be followed: {what}; the formats that can be: {can}")
    return match




def snapshot(trajectory, topology=None, *, group: str | None = None, assume_units: str | None = None) -> Snapshot:
    """The trajectory's complete frames now.

    Raises
    ------
    InputFileError
        Nothing readable yet (no file, no complete frame, or the writer is mid-flush): poll again.
    NotFollowableError
        A format read whole.
    """
    path = str(trajectory)
    match = follow_match(path)   # the format registry: the Source that reads it, if it can follow it
    if not os.path.exists(path):
        raise InputFileError(path, "does not exist yet")
    if os.path.isfile(path) and os.path.getsize(path) == 0:   # created, nothing written yet
        raise InputFileError(path, "no complete frame yet")
    return snapshot_taker(match.source)(path, match.format, topology, group, assume_units)


def snapshot_taker(cls: type[Source]):
    """How a snapshot of a file ``cls`` reads is taken: the function its :attr:`~.base.Source.snapshots` names."""
    module, _, name = cls.snapshots.partition(":")
    if not name:
        raise NotFollowableError(cls.__name__, "names no way to take a snapshot of a file being written")
    return getattr(importlib.import_module(module), name)


def index_snapshot(path: str, fmt: str, topology, group, assume_units) -> Snapshot:
    """A segment index's parts now (:attr:`.segments.SegmentedSource.snapshots`)."""
    from . import open_source

    finished = Path(path + DONE_SUFFIX).exists()
    source = open_source(path, topology, group=group, assume_units=assume_units)
    return Snapshot(source, source.n_frames, finished)


@dataclass(frozen=True, slots=True)
class FileState:
    """A file as a follower last saw it: what tells the same file, grown, from another under its name."""

    path: str
    inode: int
    device: int
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, path: str) -> FileState | None:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        return cls(path, st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns)


#: Atoms of frame 0 whose positions the digest of a followed trajectory holds (a bounded read per look).
DIGEST_ATOMS = 4096


def _first_frame_digest(source: Source) -> str:
    """A digest of frame 0 as the source reads it (the first atoms' positions, box, step, time)."""
    block = source.read(0, 1, np.arange(min(source.n_atoms, DIGEST_ATOMS)))
    h = hashlib.blake2b(digest_size=16)
    for array in (block.positions, block.box, block.step, block.time):
        h.update(array.tobytes())
    return h.hexdigest()


class Watch:
    """One followed trajectory: :meth:`check` ends the run when a later look finds another trajectory there."""

    def __init__(self, path: str) -> None:
        self.path = path
        reader = follow_match(path).source
        self.index = reader.lists_parts   # rewritten whole as parts come: its parts are checked
        # (an HDF5 file gives back the space it reserved when its writer closes it: it does not only grow)
        self.appended = reader.grows_by_appending
        self.file: FileState | None = None
        self.head: str | None = None
        self.parts: dict[str, FileState] = {}   # the parts of an index whose frames were all read

    def check(self, snap: Snapshot, frames_read: int) -> None:
        """Whether ``snap`` is the trajectory whose first ``frames_read`` frames were read; remember it.

        Raises
        ------
        FollowEnded
            :attr:`~trajscale.endings.Ending.REPLACED`, naming what changed and the frames analysed.
        """
        now = None if self.index else FileState.of(self.path)
        was = self.file
        done = (f"the results cover the {frames_read} frames analysed before; frames of another trajectory "
                "are not joined to them")
        if was is not None and now is not None:
            if (now.inode, now.device) != (was.inode, was.device):
                raise FollowEnded(Ending.REPLACED, f"{self.path} was replaced (a new file under its name); {done}")
            if self.appended and now.size < was.size:
                raise FollowEnded(Ending.REPLACED, f"{self.path} shrank from {was.size} to {now.size} bytes; {done}")
        if snap.n_frames < frames_read:
            raise FollowEnded(Ending.REPLACED, f"{self.path} now has {snap.n_frames} whole frames, fewer than "
                                               f"the {frames_read} analysed; {done}")
        self._check_parts(snap.source, frames_read, done)
        if self.head is not None and now is not None and now == was:
            return   # not touched since the last look
        head = _first_frame_digest(snap.source)
        if self.head is not None and head != self.head:
            raise FollowEnded(Ending.REPLACED, f"{self.path}'s frame 0 differs from the frame 0 analysed "
                                               f"(a new trajectory written under its name); {done}")
        self.file, self.head = now, head

    def gone(self, frames_read: int) -> FollowEnded | None:
        """The ending for a followed file that is no longer there (moved or removed), or None."""
        if self.head is None or os.path.exists(self.path):
            return None
        return FollowEnded(Ending.REPLACED, f"{self.path} was moved or removed; the results cover the "
                                            f"{frames_read} frames analysed before")

    def _check_parts(self, source: Source, frames_read: int, done: str) -> None:
        if not source.lists_parts:   # (declared by a Source whose file lists other files: a segment index)
            return
        ends = (*source.part_starts, source.n_frames)   # where each part's frames end
        for k, seg in enumerate(source.segments):
            path = str(seg["path"])
            state = FileState.of(path)
            was = self.parts.get(path)
            if was is not None and state != was:
                raise FollowEnded(Ending.REPLACED, f"part {path} of {self.path} changed after its frames were "
                                                   f"read; {done}")
            end = ends[k]
            if was is None and state is not None and end <= frames_read:
                self.parts[path] = state


def idle_detail(idle: float, frames: int, trailing: int) -> str:
    """What an idle end says: how long nothing came, never marked complete, the bytes after the last whole frame."""
    detail = f"{idle:g} s; the file was never marked complete"
    if trailing:
        detail += (f", and its last {trailing} bytes are not a whole frame (a writer that stopped inside "
                   f"frame {frames})")
    return detail


def frame_counts(path: str, *, idle: float, poll: float = 0.5, group: str | None = None,
                 assume_units: str | None = None) -> Iterator[tuple[int, tuple[Ending, str] | None]]:
    """``(frames, None)`` each time a growing trajectory's whole frames grow, then ``(frames, (ending, detail))``
    once it ends (complete, damaged, replaced, or ``idle`` s without a new frame).

    Raises
    ------
    NotFollowableError
        A format that cannot be followed, at once.
    """
    follow_match(path)
    watch, last, since, trailing = Watch(path), 0, time.monotonic(), 0
    while True:
        try:
            snap = snapshot(path, group=group, assume_units=assume_units)
        except DamagedFileError as exc:
            yield last, (Ending.DAMAGED, str(exc))
            return
        except InputFileError:   # not there yet, or mid-flush: look again
            snap = None
        if snap is not None:
            try:
                watch.check(snap, last)
            except FollowEnded as end:
                yield last, (end.ending, end.detail)
                return
            finally:
                snap.source.close()
            trailing = snap.trailing_bytes
            if snap.n_frames > last:
                last, since = snap.n_frames, time.monotonic()
                yield last, None
            if snap.damage or snap.finished:
                yield last, (Ending.DAMAGED, snap.damage) if snap.damage else (Ending.COMPLETE, "")
                return
        if time.monotonic() - since >= idle:
            gone = watch.gone(last)
            yield last, ((gone.ending, gone.detail) if gone is not None
                         else (Ending.IDLE, idle_detail(idle, last, trailing)))
            return
        time.sleep(poll)


def first_snapshot(trajectory, topology=None, *, group: str | None = None, assume_units: str | None = None,
                   wait: float = 60.0, poll: float = 0.5, frames: int = 1) -> Snapshot:
    """The trajectory once it has ``frames`` complete frames, polling every ``poll`` s; a clear error after ``wait``
    s. A finished or damaged file is taken with the whole frames it has."""
    t0 = time.monotonic()
    while True:
        try:
            snap = snapshot(trajectory, topology, group=group, assume_units=assume_units)
            if snap.n_frames >= frames or snap.n_frames and (snap.finished or snap.damage):
                return snap
            snap.source.close()
        except (NotFollowableError, DamagedFileError):   # waiting does not change either
            raise
        except InputFileError as exc:
            if time.monotonic() - t0 >= wait:
                raise InputFileError(trajectory, f"no complete frame to follow within {wait:g} s "
                                                 f"({exc.problem})") from None
        if time.monotonic() - t0 >= wait:
            raise InputFileError(trajectory, f"no complete frame to follow within {wait:g} s")
        raise_if_stopped()
        time.sleep(poll)


__all__ = ["DONE_SUFFIX", "FileState", "Snapshot", "Watch", "first_snapshot", "follow_match",
           "frame_counts", "idle_detail", "index_snapshot", "snapshot", "snapshot_taker"]
