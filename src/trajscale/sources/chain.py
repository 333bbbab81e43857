"""How consecutive trajectory files join into one trajectory: restart parts, overlaps and repeats.

``gmx mdrun -noappend`` writes a run as parts, each beginning with the frame at the checkpoint time, which is
also the previous part's last frame. ``gmx trjcat`` and MDAnalysis's ``continuous=True`` join them with each time
once, the later file's frame kept, times neither shifted nor renumbered. :func:`plan_join` decides the same for
``convert``, ``verify``, ``index`` and ``run``. Each file after the first is compared with the previous file
that keeps frames:

* it starts after that file's last time: appended as it is;
* it starts at that file's last time (a restart part): that file's last frame is dropped;
* it starts inside that file: a real overlap, refused naming both files and times, unless ``continuous`` asks
  for the later file to win (as trjcat does);
* it starts at the first file's first time (times restart) or at that file's own first time (a copy):
  renumbered, its steps and times shifted to continue with its own spacing; steps that restart while times go
  on are shifted alone (H5MD needs increasing steps);
* it starts before that file's first time otherwise: out of order, refused naming both files and times.

A joined trajectory is a list of ``(file, frames kept, step shift, time shift)``, files in the order given.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import InputFileError
from .base import Source

log = logging.getLogger(__name__)

#: Times closer than this (relative to the larger, at least 1 ps) are the same time: XTC stores float32.
TIME_RTOL = 1e-6


@dataclass(frozen=True)
class FileJoin:
    """One file of a joined trajectory: its first ``n_kept`` frames, their step and time shifted."""

    path: str
    n_frames: int          # frames in the file
    n_kept: int            # frames of it in the joined trajectory (a prefix)
    shift_step: int = 0
    shift_time: float = 0.0
    first_time: float | None = None   # of its kept frames, as joined (ps); None: not read (a single file)
    last_time: float | None = None


@dataclass(frozen=True)
class JoinPlan:
    """The files of a joined trajectory, with what the join dropped and renumbered."""

    files: tuple[FileJoin, ...]
    dropped: int = 0               # frames dropped because a later file holds their times
    restarts: int = 0              # files that began at the previous file's last time
    overlaps: int = 0              # files that began inside the previous one (--continuous)
    renumbered_files: int = 0
    renumbered_frames: int = 0
    steps_only_files: int = 0      # of the renumbered: parts whose step counters alone restarted (times kept)
    steps_only_frames: int = 0

    @property
    def lengths(self) -> list[int]:
        return [f.n_kept for f in self.files]

    @property
    def shifts(self) -> list[tuple[int, float]]:
        return [(f.shift_step, f.shift_time) for f in self.files]

    @property
    def n_frames(self) -> int:
        return sum(self.lengths)

    def describe(self) -> str | None:
        """One line on what the join did, or None when the files were simply concatenated."""
        said = []
        if self.dropped:
            said.append(f"dropped {self.dropped} frame(s) whose time the next part repeats ("
                        f"{self.restarts} restart(s), {self.overlaps} overlap(s)); the later part's frames kept")
        timed_files = self.renumbered_files - self.steps_only_files
        if timed_files:
            said.append(f"renumbered step and time of {self.renumbered_frames - self.steps_only_frames} frame(s) "
                        f"in {timed_files} part(s) whose times restart or repeat, so they keep increasing")
        if self.steps_only_files:
            said.append(f"renumbered the step of {self.steps_only_frames} frame(s) in {self.steps_only_files} "
                        "part(s) whose step counter restarts, so steps keep increasing (their times are kept)")
        return "; ".join(said) or None


def same_time(a: float, b: float) -> bool:
    return abs(a - b) <= TIME_RTOL * max(1.0, abs(a), abs(b))


class _Kept:
    """The running state of the previous file with frames kept (its times as shifted)."""

    def __init__(self, k: int, src: Source, n_kept: int, shift: tuple[int, float], first: tuple[int, float],
                 row: list):
        self.k, self.src, self.n_kept, self.shift, self.row = k, src, n_kept, shift, row
        self.raw_first = first[1]
        self.first_time = first[1] + shift[1]
        self.set_last()

    def set_last(self) -> None:
        s, t, _ = self.src.frame_header(self.n_kept - 1)
        self.last_step, self.last_time = s + self.shift[0], t + self.shift[1]
        self.row[6] = self.last_time

    def first_at_or_after(self, t: float) -> int:
        """The first kept frame whose (shifted) time is at or after ``t`` (times increase within a file)."""
        lo, hi = 0, self.n_kept
        while lo < hi:
            mid = (lo + hi) // 2
            tm = self.src.frame_header(mid)[1] + self.shift[1]
            if tm < t and not same_time(tm, t):
                lo = mid + 1
            else:
                hi = mid
        return lo


def plan_join(sources: Iterable[Source], continuous: bool = False) -> JoinPlan:
    """Decide how ``sources`` (in order) join into one trajectory; see the module's rules.

    ``sources`` may be a generator that keeps only the current and the previous one open (the previous is
    read only on an overlap). Reads a few frames of one atom per file; a single file is not read."""
    sources = iter(sources)
    files: list[list] = []   # [path, n_frames, n_kept, shift_step, shift_time, first_time, last_time]
    prev: _Kept | None = None
    dropped = restarts = overlaps = renumbered = renumbered_frames = steps_only = steps_only_frames = 0
    d_step, d_time = 1, 1.0
    damaged_before = None   # (path, why) of the previous part when its frames end early
    origin = None   # the first time of the first file with frames
    first_src = next(sources, None)
    if first_src is None:
        return JoinPlan(())
    second = next(sources, None)
    if second is None:   # one file: nothing to join, nothing to read
        return JoinPlan((FileJoin(first_src.path, first_src.n_frames, first_src.n_frames),))
    for k, src in enumerate(itertools.chain((first_src, second), sources)):
        if damaged_before is not None:
            refuse_damaged_part(*damaged_before)
        damaged_before = (src.path, src.damaged) if src.damaged else None
        n = src.n_frames
        files.append([src.path, n, n, 0, 0.0, None, None])
        if n == 0:
            continue
        s0, t0, _ = src.frame_header(0)
        if n > 1:
            s1, t1, _ = src.frame_header(1)
            d_step, d_time = (s1 - s0) or d_step, (t1 - t0) or d_time
        origin = t0 if origin is None else origin
        # A part continues the previous part's renumbering (the parts of a renumbered copy stay together)
        shift = prev.shift if prev is not None else (0, 0.0)
        ts = t0 + shift[1]
        renumber = False
        if prev is not None:
            raw_last = prev.last_time - prev.shift[1]
            if ts < prev.first_time and not (same_time(t0, origin) or same_time(ts, prev.first_time)):
                raise InputFileError(src.path, f"starts at {t0:g} ps, before the previous part {prev.src.path} "
                                               f"begins ({prev.raw_first:g} ps): the parts are out of order")
            if ts <= prev.first_time or same_time(ts, prev.first_time):
                # times restart (from zero, or a whole part repeated): continue the sequence
                shift = (prev.last_step + d_step - s0, prev.last_time + d_time - t0)
                renumber = True
                log.debug("%s: times restart at %g ps; renumbered to continue from %g ps", src.path, t0,
                          prev.last_time + d_time)
            elif same_time(ts, prev.last_time) or ts < prev.last_time:
                restart = same_time(ts, prev.last_time)
                if not restart and not continuous:
                    raise InputFileError(src.path, f"starts at {t0:g} ps, before the previous part "
                                                   f"{prev.src.path} ends ({raw_last:g} ps): the parts "
                                                   "overlap; give --continuous (continuous=True) to keep this part's "
                                                   f"frames from {t0:g} ps on (the later part wins, as gmx trjcat "
                                                   "does)")
                keep = prev.n_kept - 1 if restart else prev.first_at_or_after(ts)
                dropped += prev.n_kept - keep
                restarts += restart
                overlaps += not restart
                log.debug("%s starts at %g ps: frames %d-%d of %s dropped (the later part wins)", src.path, t0,
                          keep, prev.n_kept - 1, prev.src.path)
                prev.n_kept = files[prev.k][2] = keep
                if keep:
                    prev.set_last()
            if not renumber and s0 + shift[0] <= prev.last_step:   # steps restart while times go on
                shift = (prev.last_step + d_step - s0, shift[1])
                renumber = "steps"
        if renumber:
            renumbered += 1
            renumbered_frames += n
        if renumber == "steps":
            steps_only += 1
            steps_only_frames += n
        files[-1][3:6] = [shift[0], shift[1], t0 + shift[1]]
        prev = _Kept(k, src, n, shift, (s0, t0), files[-1])
    return JoinPlan(tuple(FileJoin(*row) for row in files), dropped, restarts, overlaps, renumbered,
                    renumbered_frames, steps_only, steps_only_frames)


def refuse_damaged_part(path: str, why: str) -> None:
    """Refuse a part whose frames end early at damage (``why``) when another part follows it."""
    raise InputFileError(path, f"is {why}; the parts after it would join across the frames it lost: "
                               "read it alone or as the last part")
