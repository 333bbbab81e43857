"""The run engine: every run of an analysis is rounds of tasks on one executor.

A finished trajectory is one round (:class:`FinishedRounds`); a trajectory still being written is a round per look
that finds new frames, and an IMD stream a round as its frames arrive (:mod:`trajscale.follow`). What differs between
kinds of run is only what decides the next round (a :class:`Rounds`); the engine does the rest, the same way for
every kind:

* the executor's lifetime: made (``"auto"`` chosen from the prepared job's size and its analysis's declared work),
  started while the job is prepared (``auto``'s pool after it, never by fork), stopped at once on an error, Ctrl-C
  or SIGTERM, closed at the end;
* "the root prepares, then shares": :func:`share` runs a step on the root process and hands its value to every
  process, or ends every process with the root's error, said once;
* the job's preparation (:func:`prepare_job`): the topology, the analysis's selections and reference, the read
  budget, and the :class:`~trajscale.runspec.JobFacts` the plan and the report read;
* the one report, with its :class:`~trajscale.report.runfacts.RunFacts`.

Phases are named as MDAnalysis's ``AnalysisBase.run`` names ``_setup_frames``, ``_compute`` and ``_conclude``:
:meth:`Engine.prepare`, :meth:`Engine.rounds_until_end`, :meth:`Engine.result`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shlex
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

from .analysis.base import Analysis, FrameCost, Prepared
from .analysis.user import readable_config
from .errors import FrameRangeError, InputFileError
from .executors import Executor, Job, block_frames_for, choose_executor
from .executors.base import adopt_source, close_cached_sources, refuse_if_launched
from .formats import read_cost
from .planning import AnalysisTopology, topology_file
from .report.conditions import LoadMeter, RunConditions, page_cache
from .report.payload import payload_of
from .report.runfacts import IOFacts, RunFacts
from .report.summary import Report
from .report.timing import RunReport, summarize_workers
from .runspec import JobFacts, RunOptions
from .sharing import share, share_interruption  # the root prepares, then shares (one protocol with convert's)
from .sources import Source, open_source, reader_modules
from .storage import fetched_here, fetched_since, forget_servers
from .storage.location import Location
from .timeline import ProcessTimeline
from .util import host_name, polling_for_stop, raise_if_stopped, stop_requested

TYPE_CHECKING = False
if TYPE_CHECKING:   # (records of some runs only: imported where one is made)
    from .report.kinds import AnalysisShare, ExecutorChoice, FollowFacts

log = logging.getLogger(__name__)


@dataclass(frozen=True, eq=False)
class Round:
    """What the root hands every process for one round: the job, the new frames, their tasks, and any ``ending``."""

    job: Job | None
    frames: JobFacts | None = None
    ending: object = None
    ranges: tuple = ()


class Rounds(ABC):
    """What decides a run's rounds: where the frames come from, which are new, and when the run ends."""

    #: The trajectory may change while the run reads it: opened afresh each round, never kept open.
    grows: bool = False
    #: Tasks per worker in a round when the options do not say.
    tasks_per_worker: int = 4

    def __init__(self, trajectory, topology, options: RunOptions) -> None:
        self.trajectory, self.topology, self.options = trajectory, topology, options

    def reader_modules(self) -> tuple[str, ...]:
        """What the workers import to read the trajectory (they start with it)."""
        return reader_modules(self.trajectory)

    def paths(self) -> tuple[str, ...] | None:
        """The trajectory file(s) as given (for commands in the advice), or None for other inputs."""
        items = list(self.trajectory) if isinstance(self.trajectory, list | tuple) else [self.trajectory]
        if not all(isinstance(t, str | os.PathLike) for t in items):
            return None
        return tuple(os.fspath(t) for t in items)

    def begin(self) -> None:   # noqa: B027 - optional
        """Before the first round, on every process."""

    def close(self) -> None:   # noqa: B027 - optional
        """After the last round, however the run ended, on every process."""

    @abstractmethod
    def open(self, shared: bool) -> tuple[Source, range]:
        """On the root: the source the job is prepared on, and the frames known now (``shared``: MPI)."""

    @abstractmethod
    def next_round(self, job: Job, facts: JobFacts, stopping: bool) -> Round:
        """On the root: the next round's frames, or the ending; ``stopping``: a Ctrl-C was recorded."""

    def stopped(self) -> object:
        """The ending when Ctrl-C stops a round whose frames are then not counted (a growing trajectory's)."""
        return "stopped"

    def due(self, n_frames: int) -> bool:
        """Whether the results over ``n_frames`` frames are to be published now (``on_update``)."""
        return False

    def why(self, ending) -> str:
        """The ending in words."""
        return str(ending)

    def follow_facts(self, ending, n_frames: int) -> FollowFacts | None:
        """The report's record of a followed run (None: not followed)."""
        return None

    def kept(self, reduced):
        """On the root, after each round: what the engine keeps of the round's reduced partial."""
        return reduced


class FinishedRounds(Rounds):
    """A finished trajectory: all its frames (``start:stop:step``) in one round."""

    #: Its file's location, or its parts' (with the run's storage options).
    trajectory: Location | list[Location]

    def open(self, shared: bool) -> tuple[Source, range]:
        opts = self.options
        source = open_source(self.trajectory, topology_file(self.topology), group=opts.group,
                             assume_units=opts.assume_units, continuous=opts.continuous)
        try:
            start, stop = frame_range(opts.start, opts.stop, source.n_frames, source.path)
        except BaseException:
            source.close()
            raise
        return source, range(start, stop, opts.step)

    def next_round(self, job: Job, facts: JobFacts, stopping: bool) -> Round:
        if stopping:
            raise_if_stopped()
        return Round(job, facts, "complete")


def frame_range(start: int | None, stop: int | None, n_frames: int, where: str) -> tuple[int, int]:
    """``[start, stop)`` of ``n_frames`` as ``slice(start, stop)`` takes them (as MDAnalysis does); none is an error."""
    if n_frames == 0:
        raise FrameRangeError(f"{where}: has no frames (0 frames stored): nothing to analyse")
    picked = range(n_frames)[slice(start, stop)]
    if not len(picked):
        raise FrameRangeError(f"{where}: --start {start} --stop {stop} selects none of its {n_frames} frames")
    return picked.start, picked.stop


@dataclass(frozen=True, eq=False)
class Preparation:
    """An analysis prepared on an opened Source (:func:`prepare_analysis`), with what a frame of it costs:
    ``frame_bytes`` in the reader's buffers, ``held_bytes`` in the analysis's own copies, its declared
    ``cost``, the seconds reading the topology, and the topology file (None: a Universe, or none)."""

    prepared: Prepared
    frame_bytes: int
    held_bytes: int
    cost: FrameCost
    t_topology: float
    topology: object = None


def prepare_analysis(analysis: Analysis, topology, source: Source, shared=None) -> Preparation:
    """``analysis`` prepared on ``topology`` for ``source``: the one preparation of a run's trajectory
    and of an ensemble's members (``shared``: their
    :class:`~trajscale.ensemble.members.SharedTopologies`; None: the topology is read for this source alone).
    """
    t0 = time.perf_counter()
    if shared is None:
        top = AnalysisTopology(topology, source)
        t_top = time.perf_counter() - t0
        prep = runs_prep = analysis.prepare(top.atoms, source)
        runs, t_top, file = analysis, t_top + top.build_seconds, top.file   # (a Universe built while preparing)
    else:
        prep = shared.prepare(analysis, topology, source)
        (runs, runs_prep), file = shared.runs(analysis, prep), topology_file(topology)
        t_top = time.perf_counter() - t0
    return Preparation(prep, source.bytes_per_frame(runs_prep.atoms, runs.fields),
                       runs.block_bytes_per_frame(runs_prep), runs.frame_cost(runs_prep, source), t_top, file)


def prepare_job(analysis: Analysis, topology, source: Source, frames: range, options: RunOptions,
                source_options: dict) -> tuple[Job, JobFacts]:
    """The Job over ``frames`` of ``source`` and its facts; ``source_options`` are the executor's (MPI-IO)."""
    p = prepare_analysis(analysis, topology, source)
    config = source.get_config()
    if source.supports_mpio:
        config.update(source_options)
    facts = JobFacts.of(source, p.prepared.atoms, p.frame_bytes, frames, p.t_topology, p.topology, p.cost)
    log.debug("prepared %s: %d of %d atoms, frames [%d, %d), %d bytes per frame read", analysis.name,
              facts.n_atoms, source.n_atoms, frames.start, frames.stop, p.frame_bytes)
    # an analysis's own copies of the block share the budget; a pass of several keeps its blocks in the cache
    budget = min(int(options.max_block_bytes), analysis.cache_block_bytes or options.max_block_bytes)
    # ... and a block computes for a bounded time: a stop signal is acted on between blocks
    block_frames = block_frames_for(int(budget) // (p.frame_bytes + p.held_bytes), p.cost, facts.decode_s_per_frame)
    return Job(analysis.get_config(), config, p.prepared, block_frames, stride=frames.step,
               reads_ahead=source.reads_ahead), facts


def prepare(analysis: Analysis, topology, trajectory, options: RunOptions | None = None) -> tuple[Job, JobFacts]:
    """The Job and its facts over a finished trajectory, as a run prepares them (its source closed after)."""
    options = options or RunOptions()
    where = Location.each(trajectory, options.storage_options)
    source, frames = FinishedRounds(where if len(where) > 1 else where[0], topology, options).open(shared=False)
    try:
        return prepare_job(analysis, topology, source, frames, options, {})
    finally:
        source.close()


class Engine:
    """One run: its executor, the job prepared on the root, rounds until they end, the result with its report."""

    def __init__(self, analysis: Analysis, topology, rounds: Rounds, options: RunOptions,
                 on_update: Callable | None = None) -> None:
        self.analysis, self.topology, self.rounds, self.options = analysis, topology, rounds, options
        self.on_update = on_update
        self.t_start = time.perf_counter()
        self.timeline = ProcessTimeline()   # the launching process's phases, from its start (first run) or now
        self.auto = options.executor == "auto"   # serial or processes, chosen once the job's size is known
        self.ex = options.make_executor("serial" if self.auto else None)
        self.timeline.lap("imports")   # the executor module (MPI: its init is noted apart, as "mpi_init")
        self.own = not isinstance(options.executor, Executor)
        refuse_if_launched(self.ex, self.own)
        # the machine's other load while this run runs, and whether its files' pages are cached before it reads
        self.meter = LoadMeter("run")
        self.cache = page_cache(rounds.paths() or ()) if self.ex.is_root else None
        self.timeline.lap("report")
        self.t_prepare = self.t_reduce = 0.0
        self.choice: ExecutorChoice | None = None
        self.facts: JobFacts | None = None   # the root's, with the run's read cost once planned
        self.partials: list = []   # one reduced partial per round
        self.timings: list = []
        self.workers: dict[str, dict] = {}   # the last round's per-worker records
        self.io: dict = {}   # how the last round's tasks read
        self.n_frames = self.n_tasks = 0
        self.fetched_prepare: dict | None = None   # the requests preparing the job made (a URL's; None: none)
        self._fetched0 = fetched_here()

    def execute(self):
        """The result over every frame analysed, on the root process; None elsewhere."""
        # Ctrl-C/SIGTERM are recorded and acted on between steps (a raising handler can be lost in a C callback),
        # unless neither the executor nor the rounds can poll
        polls = self.ex.polls_for_stop or self.rounds.grows
        with polling_for_stop() if polls else contextlib.nullcontext():
            result = self._owning_the_executor()
            if result is not None and self.on_update is not None:
                self.on_update(result)
            return result

    def _owning_the_executor(self):
        report = None
        self.rounds.begin()
        try:
            result = self._phases()
            if result is not None:   # (several analyses: their results share the one report)
                report = (result[0] if isinstance(result, list) else result).report
            return result
        except BaseException as exc:
            # a stop on the root before it shared what the others wait for is handed to them: no rank is left waiting
            share_interruption(exc)
            if self.own:   # an error or Ctrl-C: stop workers, do not wait for them
                self.ex.close(wait=False)
            raise
        finally:
            try:
                if self.own:
                    self.ex.close()
            finally:
                self.rounds.close()
                forget_servers()   # (a server's outage clock is a run's: the next run asks it afresh)
            if report is not None:   # stopping the pool (joining its workers) is the run's too
                self.timeline.lap("pool_start")
                _late_starts(report, self.ex.late_starts)
                report.conditions = self.conditions(report)   # the load again, with the pool's workers reaped
                self.timeline.lap("report")
                report.process = self.timeline.record()

    def _phases(self):
        modules = self.rounds.reader_modules()   # imports the trajectory's Source: this process reads with it too
        self.timeline.lap("imports")
        self.ex.start(modules)   # a pool's workers start while this process prepares
        self.timeline.lap("pool_start")
        raise_if_stopped()
        job, facts = self.prepare()
        self.choose(facts)
        ending = self.rounds_until_end(job, facts)
        self.timeline.lap("tasks")
        if not self.rounds.grows:   # a stop recorded during the last tasks: a finished run keeps nothing
            raise_if_stopped()
        if not self.ex.is_root:
            return None
        if not self.partials:
            raise InputFileError(" ".join(self.rounds.paths() or [str(self.rounds.trajectory)]),
                                 f"no frame was analysed ({self.rounds.why(ending)})")
        return self.result(job, ending, final=True)

    def prepare(self) -> tuple[Job, JobFacts]:
        """The Job and its facts, prepared on the root process and handed to every process."""
        job, facts = share(self.ex, self._prepare_here, "prepare the job", then_share=True)   # (then the round's)
        raise_if_stopped()
        self.t_prepare = time.perf_counter() - self.t_start
        self.timeline.lap("prepare")
        self.timeline.move(facts.t_init_top, "prepare", "topology")
        self.facts = facts
        return job, facts

    def _prepare_here(self) -> tuple[Job, JobFacts]:
        """On the root: the job prepared on the source, then closed, or kept by an executor running tasks here."""
        ex, grows = self.ex, self.rounds.grows
        t0 = time.perf_counter()
        source, frames = self.rounds.open(ex.spmd)
        # the open is the topology's time (the source tells its atoms), unless it waited for a first frame
        t_open = 0.0 if grows else time.perf_counter() - t0
        try:
            job, facts = prepare_job(self.analysis, self.topology, source, frames, self.options, ex.source_options)
            self.fetched_prepare = fetched_since(self._fetched0)   # (the job's config is made: its requests too)
            if not grows and ex.adopts_sources and job.source == source.get_config():
                adopt_source(job.source, source)
                source = None
            return job, dataclasses.replace(facts, t_init_top=facts.t_init_top + t_open)
        finally:
            if source is not None:
                source.close()

    def choose(self, facts: JobFacts) -> None:
        """``"auto"``: serial or processes, from the prepared job's size, for every kind of run."""
        if not self.auto:
            return
        chosen, why = choose_executor(facts, self.options.n_workers)
        if self.rounds.grows:
            why += f"; from the {facts.n_frames} frames there when the run began"
        from .report.kinds import ExecutorChoice  # (a run on a named executor makes none)

        self.choice = ExecutorChoice(chosen, why)
        log.debug("executor %s", self.choice)
        if chosen != self.ex.name:
            self.ex.close()   # frees the source the serial executor took over while preparing
            self.ex = self.options.make_executor(chosen)
            # after preparing: its workers never fork from here (an HDF5 file, a URL client's runtime)
            self.ex.start(self.rounds.reader_modules(), late=True)

    def rounds_until_end(self, job: Job, facts: JobFacts):
        """Rounds of new frames until the run ends; why it ended."""
        ex, ending = self.ex, None
        while ending is None:
            rnd = share(ex, lambda: self._next_round(job, facts), "decide the next round")
            ending = rnd.ending
            if rnd.ranges and self.map_round(rnd):
                ending = self.rounds.stopped()
            if (ex.is_root and self.partials and ending is None and self.on_update is not None
                    and self.rounds.due(self.n_frames)):
                self.on_update(self.result(job, None))
        return ending

    def _next_round(self, job: Job, facts: JobFacts) -> Round:
        """On the root: the next round, its tasks planned; the first round's reads costed for the report."""
        ex, opts = self.ex, self.options
        rnd = self.rounds.next_round(job, facts, stop_requested() != 0)
        if rnd.frames is None:
            return rnd
        ranges = rnd.frames.plan(opts.tasks_for(ex, self.rounds.tasks_per_worker), ex.n_workers, opts.max_block_bytes)
        if not self.n_tasks:
            if opts.n_tasks and len(ranges) < opts.n_tasks and job.stride == 1 and not self.rounds.grows:
                _say_tasks_capped(opts.n_tasks, len(ranges), facts)
            self.facts = _cost_own_reads(self.facts, job, ranges, self.analysis.selections)
            log.debug("%d frames of %d atoms in %d tasks on %s x%d (%d frames per read block)",
                      rnd.frames.n_frames, facts.n_atoms, len(ranges), ex.name, ex.n_workers, job.block_frames)
            self.timeline.lap("prepare")   # the executor's choice and the task plan
        return dataclasses.replace(rnd, ranges=tuple(ranges))

    def map_round(self, rnd: Round) -> bool:
        """Run one round's tasks and keep their reduced partial; True when Ctrl-C stopped the round."""
        ex = self.ex
        try:
            got = ex.map_tasks(rnd.job, list(rnd.ranges), self.options.progress)
        except SystemExit:
            if not self.rounds.grows:   # a finished trajectory's run keeps nothing of a part
                raise
            return True   # Ctrl-C during a followed round: its frames are not counted
        if ex.is_root:   # each round reduced as it comes: memory bounded by a round, not the run
            t0 = time.perf_counter()
            self.partials.append(self.rounds.kept(self.analysis.reduce(list(got.partials))))
            self.t_reduce += time.perf_counter() - t0
            self.timings += got.timings
            self.workers, self.io = {k: dict(v) for k, v in got.workers.items()}, dict(got.io)
            self.n_frames += rnd.frames.n_frames
            self.n_tasks += len(rnd.ranges)
        if self.rounds.grows:
            # HDF5 shares one open file per process: a handle kept here would show the next look the file as it was
            close_cached_sources()
        return False

    def result(self, job: Job, ending, final: bool = False):
        """The result over the rounds so far, with the report of every task run."""
        analysis, ex, facts = self.analysis, self.ex, self.facts
        t_red = time.perf_counter()
        reduced = self.partials[0] if len(self.partials) == 1 else analysis.reduce(self.partials)
        result = analysis.result(reduced, job.prepared)
        t_red = time.perf_counter() - t_red
        if final:
            self.timeline.lap("reduce")   # the rounds' partials reduced and the analysis's result
        extras = {k: dict(v) for k, v in self.workers.items()}
        # The topology is read where the job is prepared: on a worker for serial and MPI, else in t_prepare.
        if ex.root_worker is not None:
            root = extras.setdefault(ex.root_worker, {})
            root["t_init_top"] = root.get("t_init_top", 0.0) + facts.t_init_top
        report = Report(
            analysis=analysis.name, executor=ex.name, n_workers=ex.n_workers, n_frames=self.n_frames,
            n_atoms=facts.n_atoms, source=facts.source, t_total=time.perf_counter() - self.t_start,
            t_prepare=self.t_prepare, t_reduce=self.t_reduce + t_red, tasks=list(self.timings),
            workers=summarize_workers(self.timings, extras), meta=self._run_facts(job, reduced, ending))
        report.conditions = self.conditions(report)
        if final:
            self.timeline.lap("report")   # this report and its conditions
        report.process = self.timeline.record()
        if isinstance(result, list):   # several analyses in one pass: one report, shared by their results
            return [dataclasses.replace(r, report=report) for r in result]
        return dataclasses.replace(result, report=report)

    def conditions(self, report: RunReport) -> dict:
        """The report's ``conditions``.  Ranks of an SPMD run on this host are not this process's children;
        they poll while they wait, so each counts as one busy core over the run."""
        ours = 0.0
        if self.ex.spmd:
            here = host_name()   # (as the workers' records name it)
            ours = max(0, sum(1 for w in report.workers if w.host == here) - 1) * (time.monotonic() - self.meter.t0)
        return RunConditions(self.meter.stop(ours), self.cache).to_dict()

    def _run_facts(self, job: Job, reduced, ending) -> RunFacts:
        opts, payload = self.options, payload_of(job, reduced, self.n_frames, self.analysis.per_frame)
        return RunFacts(analysis_config=_readable(job.analysis), n_tasks=self.n_tasks,
                        n_tasks_asked=opts.n_tasks, step=opts.step, io=IOFacts.from_dict(self.io),
                        topology=self.facts.topology, trajectories=self.rounds.paths(), payload=payload,
                        executor_choice=self.choice, follow=self.rounds.follow_facts(ending, self.n_frames),
                        analyses=_shares(self.analysis, job, reduced), fetched_prepare=self.fetched_prepare,
                        worker_jobs=getattr(getattr(self.ex, "cluster", None), "job_ids", ()))   # (Dask on SLURM)


def _readable(config: dict) -> dict:
    """An analysis config for the report (a group's: each analysis's)."""
    if config.get("name") == "group":
        return {**config, "analyses": [readable_config(c) for c in config["analyses"]]}
    return readable_config(config)


def _shares(analysis: Analysis, job: Job, reduced) -> tuple[AnalysisShare, ...]:
    """A group's analyses: each one's compute seconds and atoms, beside the read they share."""
    group = sys.modules.get("trajscale.analysis.group")   # (imported by a run of several analyses only)
    if group is None or not isinstance(analysis, group.AnalysisGroup):
        return ()
    from .report.kinds import AnalysisShare
    state = job.prepared.state   # (the atoms each prepared: a pass over every atom reads them as None)
    return tuple(AnalysisShare(a.name, float(t), None if p.atoms is None else len(p.atoms), a.selections)
                 for a, t, p in zip(analysis.analyses, reduced.seconds, state.prepared, strict=True))


def _late_starts(report: RunReport, late: dict[str, dict]) -> None:
    """Workers still starting when the tasks were done: their whole start-up, known once the pool closed."""
    report.workers = [dataclasses.replace(w, t_start=late[w.worker]["t_start"], t_ready=late[w.worker]["t_ready"])
                      if w.worker in late and not w.t_ready else w for w in report.workers]


def _cost_own_reads(facts: JobFacts, job: Job, ranges, selections: tuple[str, ...]) -> JobFacts:
    """``facts`` with what this run's own reads cost on the file's layout (``source.run_read``, for the advice)."""
    src = facts.source
    run_read = read_cost(src.format)   # (a format whose layout is not costed imports nothing for it)
    if run_read is None:
        return facts
    from .h5md.recommend import run_selection

    sizes = [len(range(r.start, r.stop, job.stride)) for r in ranges] or [facts.n_frames]
    cost = run_read(src, job.prepared.atoms, _median_size(sizes), job.stride)
    if cost is None:
        return facts
    cost = dataclasses.replace(cost, selection=run_selection(selections, job.prepared.atoms),
                               topology=facts.topology)
    log.debug("the run's reads cost %.2fx the bytes asked for (%d atoms, %d frames per task)",
              cost.amplification, cost.n_atoms, cost.frames_per_task)
    return dataclasses.replace(facts, source=dataclasses.replace(src, run_read=cost))


def _median_size(sizes: list[int]) -> int:
    """``int(statistics.median(sizes))``, without importing statistics (with fractions and decimal, 2 ms of a
    short run's start)."""
    s = sorted(sizes)
    half = len(s) // 2
    return int(s[half] if len(s) % 2 else (s[half - 1] + s[half]) / 2)


def _say_tasks_capped(asked: int, got: int, facts: JobFacts) -> None:
    """Tasks start on chunk boundaries: say why fewer tasks than asked for, and what lifts the cap."""
    cf, n = facts.chunk_frames, facts.n_frames
    if facts.part_starts:
        log.warning("asked for %d tasks but ran %d: tasks begin at part boundaries, and parts shorter than "
                    "a task's share of the %d frames are read whole", asked, got, n)
        return
    if cf <= 1:
        log.warning("asked for %d tasks; %d frames make only %d", asked, n, got)
        return
    from .report.advice import kept_options

    path = shlex.quote(facts.source.path or "FILE")
    log.warning("asked for %d tasks but ran %d: tasks start on chunk boundaries and the file's chunks hold "
                "%d frames (%d frames to read); rechunk to allow %d tasks: trajscale rechunk %s "
                "-o rechunked.h5md --chunks %d%s", asked, got, cf, n, asked, path, max(1, n // asked),
                kept_options(facts.source))


__all__ = ["Engine", "FinishedRounds", "Preparation", "Round", "Rounds", "frame_range", "prepare", "prepare_analysis",
           "prepare_job", "share"]
