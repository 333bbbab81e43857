"""What decides a followed run's next round: a trajectory still being written, or an IMD stream.

The run engine (:mod:`trajscale.engine`) runs the rounds; this module decides them. At each look
the root takes a :func:`~trajscale.sources.follow.snapshot` of the trajectory (only whole frames
count) and hands the frames that arrived since the last look to the engine as a round. The
partials of every analysis combine exactly (per-frame rows in frame order; integer sums for the
accumulating ones), so the final result has the same bits as a run over the finished file,
however the frames arrived.

The run ends when the writer marks the file complete, when no frame has come for ``idle`` seconds
(a writer that died), or on Ctrl-C/SIGTERM; each ending delivers the result over every frame
analysed, and says why it ended. An IMD stream (``imd://HOST:PORT``) is followed through the H5MD
file its receiver process writes (:func:`~trajscale.sources.imd.start_receiver`).
"""

from __future__ import annotations

import dataclasses
import logging
import time

from .engine import Round, Rounds
from .errors import ConfigError, InputFileError
from .executors import Job
from .report.runfacts import FollowFacts
from .runspec import FollowOptions, JobFacts, RunOptions
from .sources.follow import QuietInFlight, Snapshot, first_snapshot, snapshot, unlocked_reads
from .util import stop_requested

log = logging.getLogger(__name__)

#: Why a followed run ended, as its report and last line say.
ENDINGS = {"complete": "the writer marked the file complete",
           "idle": "no new frame for {idle:g} s",
           "stopped": "interrupted; the results cover every frame analysed so far"}


class FollowRounds(Rounds):
    """A trajectory still being written: a round per look that finds new frames, until the writer
    marks it complete, no frame comes for ``idle`` seconds, or Ctrl-C."""

    grows = True
    tasks_per_worker = 1   # a round's new frames are few: one task per worker

    def __init__(self, trajectory, topology, options: RunOptions) -> None:
        if (options.start or 0, options.stop, options.step) != (0, None, 1):
            raise ConfigError("--follow analyses every frame as it lands: --start, --stop and --step do not apply")
        if isinstance(trajectory, list | tuple):
            if len(trajectory) != 1:
                raise ConfigError("follow: give one growing trajectory (an H5MD, XTC or TRR file, or a segment index)")
            trajectory = trajectory[0]
        super().__init__(str(trajectory), topology, options)
        self.opts = options.follow or FollowOptions()
        self.done = 0
        self.last_new = time.monotonic()
        self.published = (time.monotonic(), 0)   # when, and over how many frames, results were last published
        self._quiet = QuietInFlight()
        unlocked_reads()   # before any worker starts: they inherit it

    def begin(self) -> None:
        logging.getLogger("trajscale.store.schema").addFilter(self._quiet)

    def close(self) -> None:
        logging.getLogger("trajscale.store.schema").removeFilter(self._quiet)

    def open(self, shared: bool):
        """The frames complete at the first look (waiting up to ``wait`` s for one)."""
        snap = self.first_snapshot()
        return snap.source, range(snap.n_frames)

    def first_snapshot(self) -> Snapshot:
        ropts, follow = self.options, self.opts
        return first_snapshot(self.trajectory, self.topology, group=ropts.group, assume_units=ropts.assume_units,
                              wait=follow.wait or follow.idle, poll=follow.poll)

    def due(self, n_frames: int) -> bool:
        at, frames = self.published
        follow = self.opts
        if (time.monotonic() - at >= follow.every_s
                or (follow.every_frames is not None and n_frames - frames >= follow.every_frames)):
            self.published = (time.monotonic(), n_frames)
            return True
        return False

    def why(self, ending: str) -> str:
        return ENDINGS[ending].format(idle=self.opts.idle)

    def follow_facts(self, ending: str | None, n_frames: int) -> FollowFacts:
        return FollowFacts(n_frames, ending, self.why(ending) if ending else None, self.temporary)

    #: The file followed is a stream's copy, removed when the run ends.
    temporary = False

    def next_round(self, job: Job, facts: JobFacts, stopping: bool) -> Round:
        """The frames new since the last round, or the ending; waits (polling) while there is neither."""

        ropts = self.options
        while True:
            if stopping:
                return Round(None, None, "stopped")
            try:
                snap = snapshot(self.trajectory, self.topology, group=ropts.group, assume_units=ropts.assume_units)
            except InputFileError as exc:   # mid-flush, or the file replaced: look again
                log.debug("follow: %s", exc)
                snap = None
            if snap is not None:
                try:
                    n, finished = snap.n_frames, snap.finished
                    if snap.source.n_atoms != facts.source_atoms:
                        raise InputFileError(snap.source.path, f"now has {snap.source.n_atoms} atoms per frame, "
                                                               f"it had {facts.source_atoms}")
                    config = snap.source.get_config()
                    part_starts = snap.source.part_starts
                    chunk = snap.source.chunk_frames
                    snap.warn_torn_end()   # a finished file: this round is the last, so it is said once
                finally:
                    snap.source.close()
                if n > self.done:
                    new = dataclasses.replace(facts, start=self.done, stop=n, step=1, chunk_frames=chunk,
                                              part_starts=part_starts)
                    self.done, self.last_new = n, time.monotonic()
                    return Round(dataclasses.replace(job, source=config), new, "complete" if finished else None)
                if finished:
                    return Round(None, None, "complete")
            if time.monotonic() - self.last_new >= self.opts.idle:
                return Round(None, None, "idle")
            time.sleep(self.opts.poll)
            stopping = stop_requested() != 0


class StreamRounds(FollowRounds):
    """An IMD stream (``imd://HOST:PORT``): a receiver process on the root writes its frames into an
    H5MD file (``tee``, kept; else a temporary copy, removed at the end), followed as it grows; the
    stream's end, a producer that quits or dies included, marks the file complete and so ends the run."""

    def __init__(self, url: str, topology, options: RunOptions) -> None:
        from .sources.imd import host_port

        host_port(url)
        if topology is None:
            raise ConfigError(f"{url}: a stream needs a topology (its atom count and selections)")
        super().__init__(url, topology, options)
        self.temporary = self.opts.tee is None
        self.receiver = None

    def reader_modules(self) -> tuple[str, ...]:
        return ()   # an H5MD file

    def paths(self) -> tuple[str, ...] | None:
        return (self.trajectory,) if self.receiver is not None else None

    def open(self, shared: bool):
        """The receiver started and the first frames of its file (on the root)."""
        from .sources.imd import start_receiver
        from .topology import load_universe

        topology = self.topology
        n_atoms = (topology.universe.atoms.n_atoms if hasattr(topology, "select_atoms")
                   else load_universe(topology, topology_coordinates=False).atoms.n_atoms)
        follow = self.opts
        self.receiver = start_receiver(self.trajectory, n_atoms, tee=follow.tee, overwrite=follow.overwrite,
                                       shared=shared, wait=follow.wait or follow.idle)
        self.trajectory = self.receiver.out   # what the advice and the last line name
        return super().open(shared)

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


__all__ = ["ENDINGS", "FollowOptions", "FollowRounds", "StreamRounds", "last_line"]
