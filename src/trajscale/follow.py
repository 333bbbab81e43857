"""What decides a followed run's next round: a trajectory still being written, or an IMD stream.

The run engine runs the rounds; this module decides them, handing each look's new whole frames to the engine.
Partials combine exactly, so the result has the same bits as a run over the finished file, however the frames
arrived.
"""

from __future__ import annotations

import dataclasses
import logging
import time

from .analysis.base import Analysis
from .endings import Ending, FollowEnded
from .engine import Round, Rounds
from .errors import ConfigError, DamagedFileError, InputFileError
from .executors import Job
from .h5md.follow import QuietInFlight
from .report.runfacts import FollowFacts
from .runspec import FollowOptions, JobFacts, RunOptions
from .sources.follow import Snapshot, Watch, first_snapshot, idle_detail, snapshot
from .util import stop_requested

log = logging.getLogger(__name__)


def refuse_unwritten_frames(analysis: Analysis) -> None:
    """Refuse a reference counted from the end (a negative ``ref_frame``): in a growing file it is not written yet."""
    ref = analysis.trajectory_frame
    if ref is not None and ref < 0:
        raise ConfigError(f"{analysis.name}: ref_frame {ref} counts from the end of the trajectory, which a "
                          "followed run does not know yet; give a frame from the start (a followed run waits "
                          "until it is written), or a reference structure")


class FollowRounds(Rounds):
    """A trajectory still being written: a round per look that finds new frames, until an Ending."""

    grows = True
    tasks_per_worker = 1   # a round's new frames are few: one task per worker
    #: The file followed is a stream's copy, removed when the run ends.
    temporary = False

    def __init__(self, trajectory, topology, options: RunOptions, analysis: Analysis) -> None:
        if (options.start or 0, options.stop, options.step) != (0, None, 1):
            raise ConfigError("--follow analyses every frame as it lands: --start, --stop and --step do not apply")
        if isinstance(trajectory, list | tuple):
            if len(trajectory) != 1:
                raise ConfigError("follow: give one growing trajectory (an H5MD, XTC or TRR file, or a segment index)")
            trajectory = trajectory[0]
        refuse_unwritten_frames(analysis)
        super().__init__(str(trajectory), topology, options)
        self.opts = options.follow or FollowOptions()
        ref = analysis.trajectory_frame   # a followed run prepares once its reference frame is written
        self.frames_needed = 1 if ref is None else ref + 1
        self.done = 0
        self.last_new = time.monotonic()
        self.published = (time.monotonic(), 0)   # when, and over how many frames, results were last published
        self.trailing = 0   # bytes after the last whole frame at the last look (XTC/TRR)
        self.watch: Watch | None = None   # the deciding process's memory of the file as first read
        self._quiet = QuietInFlight()

    def begin(self) -> None:
        logging.getLogger("trajscale.h5md.schema").addFilter(self._quiet)

    def close(self) -> None:
        logging.getLogger("trajscale.h5md.schema").removeFilter(self._quiet)

    def open(self, shared: bool):
        """The frames complete at the first look (waiting up to ``wait`` s for them)."""
        follow, ropts = self.opts, self.options
        snap = first_snapshot(self.trajectory, self.topology, group=ropts.group, assume_units=ropts.assume_units,
                              wait=follow.wait or follow.idle, poll=follow.poll, frames=self.frames_needed)
        try:
            self.watch.check(snap, 0)
        except BaseException:
            snap.source.close()
            raise
        return snap.source, range(snap.n_frames)

    def next_round(self, job: Job, facts: JobFacts, stopping: bool) -> Round:
        """The frames new since the last round, or the ending; waits (polling) while there is neither."""
        while True:
            if stopping:
                return Round(None, None, self.stopped())
            try:
                rnd = self._look(job, facts)
            except FollowEnded as end:
                return Round(None, None, (end.ending, end.detail))
            if rnd is not None:
                return rnd
            if time.monotonic() - self.last_new >= self.opts.idle:
                return Round(None, None, self._idle())
            time.sleep(self.opts.poll)
            stopping = stop_requested() != 0

    def _look(self, job: Job, facts: JobFacts) -> Round | None:
        """One look: a round of new frames (with an ending this look met), the ending alone, or None."""
        ropts = self.options
        try:
            snap = snapshot(self.trajectory, self.topology, group=ropts.group, assume_units=ropts.assume_units)
        except DamagedFileError as exc:   # damage where frame 0 was: another file, damaged
            raise FollowEnded(Ending.DAMAGED, str(exc)) from None
        except InputFileError as exc:   # mid-flush, or between a file's removal and its successor: look again
            log.debug("follow: %s", exc)
            return None
        try:
            try:
                self.watch.check(snap, self.done)
            except DamagedFileError:
                raise
            except InputFileError as exc:   # its frame 0 read mid-flush, past every retry: look again
                log.debug("follow: %s", exc)
                return None
            if snap.source.n_atoms != facts.source_atoms:
                raise InputFileError(snap.source.path, f"now has {snap.source.n_atoms} atoms per frame, "
                                                       f"it had {facts.source_atoms}")
            n, self.trailing = snap.n_frames, snap.trailing_bytes
            config, part_starts, chunk = snap.source.get_config(), snap.source.part_starts, snap.source.chunk_frames
            snap.warn_torn_end()   # a finished file: this round is the last, so it is said once
        finally:
            snap.source.close()
        ending = self._ending_of(snap)
        if n > self.done:
            new = dataclasses.replace(facts, start=self.done, stop=n, step=1, chunk_frames=chunk,
                                      part_starts=part_starts)
            self.done, self.last_new = n, time.monotonic()
            return Round(dataclasses.replace(job, source=config, growing=True), new, ending)
        return None if ending is None else Round(None, None, ending)

    def _ending_of(self, snap: Snapshot) -> tuple[Ending, str] | None:
        """The ending a look met: damage, or the file marked complete (None: the run goes on)."""
        if snap.damage:
            return Ending.DAMAGED, snap.damage
        return (Ending.COMPLETE, "") if snap.finished else None

    def _idle(self) -> tuple[Ending, str]:
        """The ending after ``idle`` s without a new frame: the file gone, or never marked complete."""
        gone = self.watch.gone(self.done)
        if gone is not None:
            return gone.ending, gone.detail
        return Ending.IDLE, idle_detail(self.opts.idle, self.done, self.trailing)

    def stopped(self) -> tuple[Ending, str]:
        return Ending.STOPPED, ""

    def due(self, n_frames: int) -> bool:
        at, frames = self.published
        follow = self.opts
        if (time.monotonic() - at >= follow.every_s
                or (follow.every_frames is not None and n_frames - frames >= follow.every_frames)):
            self.published = (time.monotonic(), n_frames)
            return True
        return False

    def why(self, ending: tuple[Ending, str]) -> str:
        return ending[0].why(ending[1])

    def follow_facts(self, ending: tuple[Ending, str] | None, n_frames: int) -> FollowFacts:
        return FollowFacts(n_frames, ending[0].key if ending else None, self.why(ending) if ending else None,
                           self.temporary)


class FileRounds(FollowRounds):
    """A file (or segment index) still being written; a format read whole is refused at once."""

    def __init__(self, trajectory, topology, options: RunOptions, analysis: Analysis) -> None:
        super().__init__(trajectory, topology, options, analysis)
        self.watch = Watch(self.trajectory)   # a format read whole is refused now, not after waiting for frames


class StreamRounds(FollowRounds):
    """An IMD stream (``imd://HOST:PORT``): a receiver process on the root writes its frames into an
    H5MD file (``tee``, kept; else a temporary copy, removed at the end), followed as it grows; the
    stream's end, a producer that quits or dies included, marks the file complete and so ends the run."""

    def __init__(self, url: str, topology, options: RunOptions, analysis: Analysis) -> None:
        from .imd import host_port

        host_port(url)
        refuse_unwritten_frames(analysis)
        if topology is None:
            raise ConfigError(f"{url}: a stream needs a topology (its atom count and selections)")
        super().__init__(url, topology, options, analysis)
        self.temporary = self.opts.tee is None
        self.receiver = None

    def reader_modules(self) -> tuple[str, ...]:
        return ()   # an H5MD file

    def paths(self) -> tuple[str, ...] | None:
        return (self.trajectory,) if self.receiver is not None else None

    def open(self, shared: bool):
        """The receiver started and the first frames of its file (on the root)."""
        from .imd import start_receiver
        from .topology import load_universe

        topology = self.topology
        n_atoms = (topology.universe.atoms.n_atoms if hasattr(topology, "select_atoms")
                   else load_universe(topology, topology_coordinates=False).atoms.n_atoms)
        follow = self.opts
        self.receiver = start_receiver(self.trajectory, n_atoms, tee=follow.tee, overwrite=follow.overwrite,
                                       shared=shared, wait=follow.wait or follow.idle)
        self.trajectory = self.receiver.out   # what the advice and the last line name
        self.watch = Watch(self.trajectory)
        return super().open(shared)

    def _ending_of(self, snap: Snapshot) -> tuple[Ending, str] | None:
        """A stream's file marked complete: how the stream ended, from its receiver."""
        ending = super()._ending_of(snap)
        if ending is not None and ending[0] is Ending.COMPLETE and self.receiver is not None:
            return self.receiver.ended()
        return ending

    def close(self) -> None:
        try:
            if self.receiver is not None:
                self.receiver.stop()
        finally:
            super().close()


def last_line(result) -> str:
    """The line a followed run ends with: frames analysed and why it ended."""
    f = result.report.meta.follow
    return f"followed {f.frames} frames; ended: {f.why}"


__all__ = ["FileRounds", "FollowOptions", "FollowRounds", "StreamRounds", "last_line", "refuse_unwritten_frames"]
