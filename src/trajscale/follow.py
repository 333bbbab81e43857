"""``trajscale.run(..., follow=True)``: analyse a trajectory while it is being written.

One loop on the process that prepares the job (every rank under MPI, rank 0
deciding): poll the trajectory (:func:`trajscale.sources.follow.snapshot`:
only whole frames count), plan tasks over the frames that arrived since the
last poll, run them on the executor, keep their partials. The partials of
every analysis combine exactly (per-frame rows in frame order; integer sums
for the accumulating ones), so the final result has the same bits as a run
over the finished file, however the frames arrived.

The loop ends when the writer marks the file complete, when no frame has come
for ``idle`` seconds (a writer that died), when the file is replaced or found
damaged, or on Ctrl-C/SIGTERM; each ending (:class:`~trajscale.endings.Ending`)
delivers the result over every frame analysed, and says why it ended.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from .analysis.base import Analysis
from .analysis.user import readable_config
from .endings import Ending, FollowEnded
from .errors import ConfigError, DamagedFileError, InputFileError, NotFollowableError, TrajscaleError
from .executor_registry import EXECUTORS
from .executors import Executor, Job
from .executors.base import close_cached_sources, refuse_if_launched
from .planning import AnalysisTopology, plan_tasks
from .report.payload import payload_of
from .report.process import ProcessTimeline
from .report.summary import Report
from .report.timing import summarize_workers
from .runspec import JobFacts, RunOptions
from .sources.follow import QuietInFlight, Snapshot, Watch, followable, idle_detail, snapshot, unlocked_reads
from .util import polling_for_stop, raise_if_stopped

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class FollowOptions:
    """How a followed run polls, publishes and ends.

    Attributes
    ----------
    every_s
        Publish the results so far (``on_update``) at most this often, in seconds.
    every_frames
        ... or once this many new frames are analysed (None: by time only).
    idle
        End when no new frame has come for this many seconds.
    poll
        Seconds between looks at the trajectory when nothing is new.
    wait
        Seconds to wait for the first complete frame (default: ``idle``).
    """

    every_s: float = 30.0
    every_frames: int | None = None
    idle: float = 60.0
    poll: float = 0.5
    wait: float | None = None

    def __post_init__(self) -> None:
        for name, value in (("every_s", self.every_s), ("idle", self.idle), ("poll", self.poll)):
            if not value > 0:
                raise ConfigError(f"follow: {name} must be positive, got {value}")
        if self.every_frames is not None and self.every_frames < 1:
            raise ConfigError(f"follow: every_frames must be at least 1, got {self.every_frames}")


@dataclass(frozen=True)
class _Round:
    """What the deciding process hands every rank for one round: a job, its new ranges, and whether
    this is the last round (with why)."""

    job: Job | None
    ranges: tuple
    ending: Ending | None = None
    #: What the last line says of the ending (the damage, what changed, the idle time).
    detail: str = ""


def _first_snapshot(trajectory, topology, group, assume_units, wait: float, poll: float,
                    frames: int = 1) -> Snapshot:
    """The trajectory once it has ``frames`` complete frames (the analysis's reference frame among them);
    a clear error if they do not come within ``wait`` s."""
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


def _frames_needed(analysis: Analysis) -> int:
    """The frames a followed run waits for before it prepares: the analysis's reference frame among them."""
    ref = analysis.trajectory_frame
    return 1 if ref is None else ref + 1


def refuse_unwritten_frames(analysis: Analysis) -> None:
    """A followed run analyses a trajectory still being written: a reference counted from its end (a
    negative ``ref_frame``) is a frame not yet written, and refused."""
    ref = analysis.trajectory_frame
    if ref is not None and ref < 0:
        raise ConfigError(f"{analysis.name}: ref_frame {ref} counts from the end of the trajectory, which a "
                          "followed run does not know yet; give a frame from the start (a followed run waits "
                          "until it is written), or a reference structure")


def _prepare(analysis: Analysis, topology, snap: Snapshot, max_block_bytes: int) -> tuple[Job, JobFacts]:
    """The job over the frames known now (selections, reference: frame 0 and the topology)."""

    source = snap.source
    t0 = time.perf_counter()
    top = AnalysisTopology(topology, source)
    prep = analysis.prepare(top.atoms, source)
    frame_bytes = source.bytes_per_frame(prep.atoms, analysis.fields)
    t_top = time.perf_counter() - t0 + top.build_seconds
    facts = JobFacts.of(source, prep.atoms, frame_bytes, range(snap.n_frames), t_top, top.file)
    return Job(analysis.get_config(), source.get_config(), prep, max(1, int(max_block_bytes) // frame_bytes)), facts


class _Follower:
    """The deciding side: polls the trajectory and plans each round's tasks."""

    def __init__(self, trajectory, topology, opts: FollowOptions, run_options: RunOptions, n_tasks: int,
                 n_workers: int, watch: Watch) -> None:
        self.trajectory, self.topology, self.opts, self.run_options = trajectory, topology, opts, run_options
        self.n_tasks, self.n_workers, self.watch = n_tasks, n_workers, watch
        self.done = 0
        self.last_new = time.monotonic()
        self.trailing = 0   # bytes after the last whole frame at the last look (XTC/TRR)
        self.stream_end: Callable | None = None   # a stream's: what its file's completion means

    def next_round(self, job: Job, facts: JobFacts, stopping: bool) -> _Round:
        """New frames as tasks, or the ending; waits (polling) while there is neither."""
        while True:
            if stopping:
                return _Round(None, (), Ending.STOPPED)
            try:
                rnd = self._look(job, facts)
            except FollowEnded as end:
                return _Round(None, (), end.ending, end.detail)
            if rnd is not None:
                return rnd
            if time.monotonic() - self.last_new >= self.opts.idle:
                return self._idle()
            time.sleep(self.opts.poll)
            try:
                raise_if_stopped()
            except SystemExit:
                stopping = True

    def _look(self, job: Job, facts: JobFacts) -> _Round | None:
        """One look at the trajectory: a round of its new frames (with the ending, when this look met
        one), the ending alone, or None when nothing is new."""
        ropts = self.run_options
        try:
            snap = snapshot(self.trajectory, self.topology, group=ropts.group, assume_units=ropts.assume_units)
        except DamagedFileError as exc:   # damage where frame 0 was: another file, damaged
            raise FollowEnded(Ending.DAMAGED, str(exc)) from None
        except InputFileError as exc:   # mid-flush, or between a file's removal and its successor: look again
            log.debug("follow: %s", exc)
            return None
        try:
            self.watch.check(snap, self.done)
            if snap.source.n_atoms != facts.source_atoms:
                raise InputFileError(snap.source.path, f"now has {snap.source.n_atoms} atoms per frame, "
                                                       f"it had {facts.source_atoms}")
            n, self.trailing = snap.n_frames, snap.trailing_bytes
            config, part_starts, chunk = snap.source.get_config(), snap.source.part_starts, snap.source.chunk_frames
            snap.warn_torn_end()   # a finished file: this round is the last, so it is said once
        finally:
            snap.source.close()
        ending, detail = ((Ending.DAMAGED, snap.damage) if snap.damage
                          else (Ending.COMPLETE, "") if snap.finished else (None, ""))
        if ending is Ending.COMPLETE and self.stream_end is not None:
            ending, detail = self.stream_end()
        if n > self.done:
            ranges = plan_tasks(self.done, n, self.n_tasks, chunk, facts.frame_bytes, self.n_workers,
                                ropts.max_block_bytes, part_starts)
            self.done, self.last_new = n, time.monotonic()
            return _Round(dataclasses.replace(job, source=config), tuple(ranges), ending, detail)
        return None if ending is None else _Round(None, (), ending, detail)

    def _idle(self) -> _Round:
        """The ending after ``idle`` s without a new frame: the file gone, or never marked complete."""
        gone = self.watch.gone(self.done)
        if gone is not None:
            return _Round(None, (), gone.ending, gone.detail)
        return _Round(None, (), Ending.IDLE, idle_detail(self.opts.idle, self.done, self.trailing))


def run_follow(analysis: Analysis, topology, trajectory, *, options: FollowOptions | None = None,
               on_update: Callable | None = None, run_options: RunOptions | None = None, temporary: bool = False,
               stream_end: Callable | None = None, **keywords):
    """Analyse ``trajectory`` as it is written; see :func:`trajscale.run` (``follow=True``).

    ``options`` say how to poll, publish and end; ``run_options`` (a
    :class:`~trajscale.runspec.RunOptions`, with ``keywords`` in place of its fields) say where the
    tasks run, as :func:`trajscale.run`'s options do (``tasks_per_worker`` defaults to 1 per round).
    ``on_update(result)`` is called on the deciding process with the result over the frames analysed so
    far, every ``options.every_s`` seconds or ``options.every_frames`` frames, and once at the end.
    The final result's ``report.meta["follow"]`` says how many frames were followed and why the run ended;
    ``temporary`` (a stream's file that is removed when the run ends) is recorded there too, so that no
    advice names a file the user cannot find. ``stream_end()`` (a stream's) says how the stream ended,
    once its file is marked complete: ``(Ending, detail)``.
    """

    follow = options or FollowOptions()
    run_options = RunOptions.from_keywords(run_options, keywords)
    unlocked_reads()   # before any worker starts: they inherit it
    if isinstance(trajectory, list | tuple):
        if len(trajectory) != 1:
            raise ConfigError("follow: give one growing trajectory (an H5MD, XTC or TRR file, or a segment index)")
        trajectory = trajectory[0]
    refuse_unwritten_frames(analysis)
    followable(str(trajectory))   # a format read whole is refused now, not after waiting for frames
    job_run = _FollowedRun(analysis, topology, str(trajectory), follow, run_options, on_update, temporary)
    job_run.stream_end = stream_end
    quiet = QuietInFlight()
    logging.getLogger("trajscale.store.schema").addFilter(quiet)
    try:
        with polling_for_stop():
            return job_run.execute()
    except BaseException:
        if job_run.own:
            job_run.ex.close(wait=False)
        raise
    finally:
        logging.getLogger("trajscale.store.schema").removeFilter(quiet)
        if job_run.own:
            job_run.ex.close()


class _FollowedRun:
    """One followed run, phase by phase: prepare on the first frames, rounds of new frames until the
    run ends, the result; :meth:`execute` runs them in order."""

    def __init__(self, analysis: Analysis, topology, trajectory: str, follow: FollowOptions,
                 options: RunOptions, on_update: Callable | None, temporary: bool = False) -> None:
        self.analysis, self.topology, self.trajectory = analysis, topology, trajectory
        self.temporary = temporary
        self.follow, self.options, self.on_update = follow, options, on_update
        self.t_start = time.perf_counter()
        self.timeline = ProcessTimeline()
        self.own = not isinstance(options.executor, Executor)
        self.ex = options.make_executor("serial" if options.executor == "auto" else None)
        refuse_if_launched(self.ex, self.own)
        self.t_prepare = 0.0
        self.rounds: list[dict] = []   # one reduced partial per round of new frames
        self.timings: list = []
        self.workers: dict[str, dict] = {}   # the last round's per-worker records
        self.watch = Watch(trajectory)   # the deciding process's memory of the file as first read
        self.stream_end: Callable | None = None   # a stream's: how it ended, once its file is complete

    def execute(self):
        """The result over every frame analysed, on the deciding process; None elsewhere."""
        ex = self.ex
        ex.start()
        self.timeline.lap("pool_start")
        job, facts = self.prepare()
        follower = None
        if ex.is_root:
            follower = _Follower(self.trajectory, self.topology, self.follow, self.options,
                                 self.options.tasks_for(ex, 1), ex.n_workers, self.watch)
            follower.stream_end = self.stream_end
        ending, detail = self.follow_rounds(job, facts, follower)
        self.timeline.lap("tasks")
        if not ex.is_root:
            return None
        if not self.rounds:
            raise InputFileError(self.trajectory, f"no frame was analysed ({ending.why(detail)})")
        result = self.result(job, facts, (ending, detail))
        if self.on_update is not None:
            self.on_update(result)
        return result

    def prepare(self) -> tuple[Job, JobFacts]:
        """The job over the first complete frames, prepared on the deciding process and handed to all."""
        ex, follow, job = self.ex, self.follow, None
        if ex.is_root:
            try:
                snap = _first_snapshot(self.trajectory, self.topology, self.options.group, self.options.assume_units,
                                       follow.wait or follow.idle, follow.poll, _frames_needed(self.analysis))
                try:
                    self.watch.check(snap, 0)
                    job = _prepare(self.analysis, self.topology, snap, self.options.max_block_bytes)
                finally:
                    snap.source.close()
            except BaseException as exc:   # a Ctrl-C too: the other ranks wait in the broadcast
                if ex.spmd:
                    ex.broadcast(exc if isinstance(exc, TrajscaleError | KeyboardInterrupt | SystemExit)
                                 else RuntimeError(f"rank 0 failed to prepare the job: {exc!r}"))
                raise
        got = ex.broadcast(job)
        if isinstance(got, BaseException):
            if isinstance(got, TrajscaleError):
                got.reported_elsewhere = True
            raise got
        self.t_prepare = time.perf_counter() - self.t_start
        self.timeline.lap("prepare")
        return got

    def follow_rounds(self, job: Job, facts: JobFacts, follower: _Follower | None) -> tuple[Ending, str]:
        """Rounds of new frames until the run ends; why it ended (the ending and what the last line says
        of it)."""
        ex = self.ex
        published_at, published_frames = time.monotonic(), 0
        ending, detail = None, ""
        while ending is None:
            stopping = False
            try:
                raise_if_stopped()
            except SystemExit:
                stopping = True
            rnd = ex.broadcast(follower.next_round(job, facts, stopping) if ex.is_root else None)
            ending, detail = rnd.ending, rnd.detail
            if rnd.ranges and self.map_round(rnd, follower):
                ending, detail = Ending.STOPPED, ""
            if not ex.is_root or not self.rounds:
                continue
            n = sum(t.stop - t.start for t in self.timings)
            due = (time.monotonic() - published_at >= self.follow.every_s
                   or (self.follow.every_frames is not None and n - published_frames >= self.follow.every_frames))
            if self.on_update is not None and due and ending is None:
                self.on_update(self.result(job, facts, None))
                published_at, published_frames = time.monotonic(), n
        return ending, detail

    def map_round(self, rnd: _Round, follower: _Follower | None) -> bool:
        """Run one round's tasks and keep their reduced partial; True when Ctrl-C stopped the round."""
        ex = self.ex
        stopped = False
        try:
            got = ex.map_tasks(rnd.job, list(rnd.ranges), self.options.progress)
        except SystemExit:   # Ctrl-C during the round: its frames are not counted
            if ex.is_root:
                follower.done = rnd.ranges[0].start
            got, stopped = None, True
        if got is not None and got.timings and ex.is_root:   # each round reduced as it comes
            self.rounds.append(self.analysis.reduce(list(got.partials)))
            self.timings += got.timings
            self.workers = {k: dict(v) for k, v in got.workers.items()}
        # HDF5 shares one open file per process: a handle kept by this process's tasks (serial, MPI)
        # would show the next poll the file as it was, so they let go of it each round
        close_cached_sources()
        return stopped

    def result(self, job: Job, facts: JobFacts, ended: tuple[Ending, str] | None):
        """The result over the rounds so far, with a report of every task run; ``ended``: how the run
        ended (the ending and its detail), None while it goes on."""
        analysis, ex, timings = self.analysis, self.ex, self.timings
        t_red = time.perf_counter()
        reduced = analysis.reduce(self.rounds)
        result = analysis.result(reduced, job.prepared)
        t_red = time.perf_counter() - t_red
        n_frames = sum(t.stop - t.start for t in timings)
        payload = payload_of(job, reduced, n_frames, analysis.per_frame)
        follow = {"frames": n_frames, "ended": ended[0].key if ended else None,
                  "why": ended[0].why(ended[1]) if ended else None}
        if self.temporary:
            follow["temporary"] = True
        report = Report(
            analysis=analysis.name, executor=ex.name, n_workers=ex.n_workers, n_frames=n_frames,
            n_atoms=facts.n_atoms, source=facts.source, t_total=time.perf_counter() - self.t_start,
            t_prepare=self.t_prepare, t_reduce=t_red, tasks=timings,
            workers=summarize_workers(timings, self.workers),
            meta={"analysis_config": readable_config(job.analysis), "n_tasks": len(timings), "follow": follow,
                  "payload": payload.to_dict() if payload else None})
        report.process = self.timeline.record()
        return dataclasses.replace(result, report=report)

def last_line(result) -> str:
    """The line a followed run ends with: frames analysed and why it ended."""
    f = result.report.meta["follow"]
    return f"followed {f['frames']} frames; ended: {f['why']}"




def run_stream(analysis: Analysis, topology, url: str, *, tee: str | None = None, overwrite: bool = False,
               **follow_kw):
    """Analyse the frames of an IMD stream (``imd://HOST:PORT``) as they come, on any executor.

    A receiver process writes the stream into an H5MD file (``tee``, kept; else a
    temporary file, removed at the end) and this run follows that file
    (:func:`run_follow`, with ``follow_kw``); the stream's end, a producer that
    quits or dies included, marks the file complete and so ends the run, as the
    receiver's exit status says (:func:`_stream_end`). Under MPI
    rank 0 alone receives, and every rank follows the file (a temporary one lies in
    the working directory, which the ranks of a job on several nodes share).
    """
    from .sources.imd import host_port

    host_port(url)
    refuse_unwritten_frames(analysis)
    if topology is None:
        raise ConfigError(f"{url}: a stream needs a topology (its atom count and selections)")
    executor = follow_kw.get("executor", "serial")
    if isinstance(executor, Executor):
        spmd, is_root, broadcast = executor.spmd, executor.is_root, executor.broadcast
    elif executor in EXECUTORS and EXECUTORS[executor].workers == "launcher":
        from .parallel import mpi_comm_world

        comm = mpi_comm_world()
        spmd, is_root, broadcast = True, comm.Get_rank() == 0, functools.partial(comm.bcast, root=0)
    else:
        spmd, is_root, broadcast = False, True, lambda obj: obj
    opts = follow_kw.get("options") or FollowOptions()
    unlocked_reads()
    receiver = folder = out = said = None
    try:
        if is_root:
            try:
                receiver, said, folder, out = _start_receiver(topology, url, tee, overwrite, spmd,
                                                        opts.wait or opts.idle)
            except BaseException as exc:   # the other ranks wait for the file's name: they end too
                if spmd:
                    broadcast(exc if isinstance(exc, TrajscaleError | SystemExit)
                              else RuntimeError(f"rank 0 failed to receive {url}: {exc!r}"))
                raise
        got = broadcast(out)
        if isinstance(got, BaseException):
            if isinstance(got, TrajscaleError):
                got.reported_elsewhere = True
            raise got
        return run_follow(analysis, topology, got, temporary=tee is None,
                          stream_end=None if receiver is None else functools.partial(_stream_end, receiver, said),
                          **follow_kw)
    finally:
        if receiver is not None:
            _stop_receiver(receiver, said, folder)


def _stop_receiver(receiver, said, folder: str | None) -> None:
    """End the receiver process (if it still runs), close its stderr's file, remove its temporary folder."""
    import shutil

    if receiver.poll() is None:
        receiver.terminate()
    receiver.wait()
    said.close()
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


def _stream_end(receiver, said) -> tuple[Ending, str]:
    """How the stream ended, once the receiver has marked its file complete: from the receiver's exit
    status and its last line (``said``)."""
    import subprocess

    try:
        code = receiver.wait(timeout=60)
    except subprocess.TimeoutExpired:   # marked complete, yet the receiver lingers: its file is whole
        return Ending.STREAM_ENDED, ""
    if code != Ending.VANISHED.status:
        return Ending.STREAM_ENDED, ""
    said.seek(0)
    lines = [line.strip() for line in said.read().splitlines() if line.strip()]
    return Ending.VANISHED, lines[-1] if lines else f"(receiver status {code})"


def _start_receiver(topology, url: str, tee: str | None, overwrite: bool, spmd: bool, wait: float):
    """The receiver process, the file its stderr goes to, its temporary folder (None with ``tee``) and the
    H5MD file it writes, once that file is there (up to ``wait`` s); a clear error if the receiver ends
    first without it."""
    import os
    import subprocess
    import sys
    import tempfile

    from .topology import load_universe

    n_atoms = (topology.universe.atoms.n_atoms if hasattr(topology, "select_atoms")
               else load_universe(topology, topology_coordinates=False).atoms.n_atoms)
    folder = None if tee else tempfile.mkdtemp(prefix=".trajscale-imd-" if spmd else "trajscale-imd-",
                                               dir=os.getcwd() if spmd else None)
    out = tee or os.path.join(folder, "stream.h5md")
    old = os.stat(out) if os.path.exists(out) else None   # an existing --tee is replaced once the stream comes
    # an MPI launcher's variables would make the receiver take itself for a rank of the job
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "PMIX_", "OMPI_", "HYDRA_", "MPI_"))}
    log_file = tempfile.TemporaryFile("w+")   # closed by the caller, after the receiver's end is read
    receiver = subprocess.Popen([sys.executable, "-m", "trajscale.sources.imd", url, out, str(n_atoms),
                                 *(["--overwrite"] if overwrite else [])], env=env, stderr=log_file)
    try:
        problem = None
        if not _wait_for_file(receiver, out, old, wait):
            log_file.seek(0)
            said = [line.strip() for line in log_file.read().splitlines() if line.strip()]
            problem = (f"no frame came within {wait:g} s" if receiver.poll() is None
                       else "the stream ended before its first frame" if receiver.returncode == 0
                       else f"the stream could not be received: {said[-1] if said else 'no reason given'}")
        if problem is not None:
            raise InputFileError(url, problem)
    except BaseException:
        _stop_receiver(receiver, log_file, folder)
        raise
    return receiver, log_file, folder, out


def _wait_for_file(receiver, out: str, old, wait: float) -> bool:
    """Whether the receiver wrote ``out`` (a new file, not ``old``) before it ended or ``wait`` s passed."""
    import os

    def written() -> bool:
        try:
            now = os.stat(out)
        except FileNotFoundError:
            return False
        return old is None or (now.st_ino, now.st_mtime_ns) != (old.st_ino, old.st_mtime_ns)

    t0 = time.monotonic()
    while receiver.poll() is None and time.monotonic() - t0 < wait:
        if written():
            return True
        raise_if_stopped()
        time.sleep(0.05)
    return written()


__all__ = ["FollowOptions", "last_line", "run_follow", "run_stream"]
