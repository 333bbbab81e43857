"""``trajscale.run``: prepare once, plan tasks, map blocks on an executor, reduce, report.

A run goes through named phases, as MDAnalysis's ``AnalysisBase.run`` goes through
``_setup_frames``, ``_compute`` and ``_conclude``: :meth:`_Run.prepare` (the root process opens
the trajectory, prepares the analysis on the topology, and hands every process the Job and its
:class:`~trajscale.runspec.JobFacts`), :meth:`_Run.plan` (the executor ``"auto"`` picks, and the
task ranges), the executor's ``map_tasks``, and :meth:`_Run.conclude` (reduce, result, report).
What the run is asked to do travels as one :class:`~trajscale.runspec.RunOptions`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shlex
import socket
import time

from .analysis.base import Analysis
from .analysis.user import readable_config
from .errors import ConfigError, FrameRangeError, TrajscaleError
from .executors import Executor, Job, choose_executor
from .executors.base import TaskResults, adopt_source, refuse_if_launched
from .planning import (  # noqa: F401 (planning names stay importable from trajscale.run)
    MAX_BLOCK_BYTES,
    MAX_TASK_BYTES,
    AnalysisTopology,
    plan_in_parts,
    plan_strided_tasks,
    plan_tasks,
    topology_file,
    topology_with_first_frame,
)
from .report.conditions import LoadMeter, RunConditions, page_cache
from .report.payload import payload_of
from .report.process import ProcessTimeline
from .report.summary import Report
from .report.timing import RunReport, summarize_workers
from .runspec import JobFacts, RunOptions
from .sources import open_source, reader_modules
from .util import polling_for_stop, raise_if_stopped

log = logging.getLogger(__name__)


def _prepare(analysis: Analysis, topology, trajectory, options: RunOptions,
             ex: Executor | None = None) -> tuple[Job, JobFacts]:
    """The Job and its facts; the source opened here is closed on every path (a failing run in a
    long session leaks no file handle).

    ``ex`` is the executor that runs the tasks: the source's config takes its options (MPI-IO), and
    one that runs them in this process (serial) takes the opened source over: opened once, not twice.
    """
    opened: list = []
    try:
        job, facts = _prepare_open(opened, analysis, topology, trajectory, options,
                                   ex.source_options if ex is not None else {})
        if ex is not None and ex.adopts_sources and opened and job.source == opened[0].get_config():
            adopt_source(job.source, opened.pop())
        return job, facts
    finally:
        for source in opened:
            source.close()


def _prepare_open(opened: list, analysis: Analysis, topology, trajectory, options: RunOptions,
                  source_options: dict) -> tuple[Job, JobFacts]:
    t0 = time.perf_counter()
    top_file = topology_file(topology)
    source = open_source(trajectory, top_file, group=options.group, assume_units=options.assume_units,
                         continuous=options.continuous)
    opened.append(source)
    top = AnalysisTopology(topology, source)
    t_top = time.perf_counter() - t0
    start, stop = frame_range(options.start, options.stop, source.n_frames, source.path)
    prep = analysis.prepare(top.atoms, source)
    t_top += top.build_seconds   # a Universe built during prepare is topology time
    config = source.get_config()
    if source.supports_mpio:
        config.update(source_options)
    frame_bytes = source.bytes_per_frame(prep.atoms, analysis.fields)
    facts = JobFacts.of(source, prep.atoms, frame_bytes, range(start, stop, options.step), t_top, top_file)
    log.debug("prepared %s: %d of %d atoms, frames [%d, %d), %d bytes per frame read", analysis.name,
              facts.n_atoms, source.n_atoms, start, stop, frame_bytes)
    block_frames = max(1, int(options.max_block_bytes) // frame_bytes)
    return Job(analysis.get_config(), config, prep, block_frames, stride=options.step), facts


def frame_range(start: int | None, stop: int | None, n_frames: int, where: str) -> tuple[int, int]:
    """``[start, stop)`` of ``n_frames`` as Python's ``slice(start, stop)`` takes them (negative: from the end;
    past the end: the end), as MDAnalysis's ``trajectory[start:stop]`` and ``AnalysisBase.run`` do; no frame
    is an error."""
    if n_frames == 0:
        raise FrameRangeError(f"{where}: has no frames (0 frames stored): nothing to analyse")
    picked = range(n_frames)[slice(start, stop)]
    if not len(picked):
        raise FrameRangeError(f"{where}: --start {start} --stop {stop} selects none of its {n_frames} frames")
    return picked.start, picked.stop


def run(analysis: Analysis, topology, trajectory, *, options: RunOptions | None = None, follow=False,
        on_update=None, **keywords):
    """Run ``analysis`` over ``trajectory`` on an executor.

    Parameters
    ----------
    analysis
        An :class:`~trajscale.analysis.base.Analysis` such as ``RMSD(select=...)``.
    topology
        Topology file MDAnalysis reads (PSF, TPR, GRO, PDB, ...), or an MDAnalysis Universe already built
        from one (its topology and selections are used; its trajectory is not read), or an AtomGroup of one:
        the analysis selects within it, as MDAnalysis's analyses do.
    trajectory
        An H5MD file (fast path) or any trajectory file(s) MDAnalysis reads; several parts join as ``convert``
        joins them (GROMACS restart parts give each time once, the later part's frame).
    options
        A :class:`~trajscale.runspec.RunOptions` holding the options below; keywords given too replace its fields.
    follow
        True (or a :class:`~trajscale.follow.FollowOptions`): analyse a trajectory still being written as its
        frames land (:mod:`trajscale.follow`), with the same bits as a run over the finished file.
    on_update
        With ``follow``: ``on_update(result)`` gets the result so far (see ``FollowOptions``) and at the end.

    Other Parameters
    ----------------
    executor
        ``"serial"`` (the default), ``"processes"``, ``"dask"``, ``"mpi"``, an Executor, or ``"auto"``: serial
        when the estimated work is below the cost of starting worker processes, else processes (the choice and
        the reason are logged and kept in ``report.meta["executor_choice"]``).
    n_workers
        Workers (processes, Dask workers); ignored by serial and MPI (the communicator's size).
    n_tasks, tasks_per_worker
        Number of frame blocks; default ``tasks_per_worker`` (default 4; following: 1 per round) per worker.
    start, stop, step
        Frames ``start, start + step, ...`` below ``stop``; negative ``start``/``stop`` count from the end and a
        ``stop`` past the end is the end, as Python slices (and MDAnalysis's ``run``) take them.
    progress
        Show a progress bar on stderr.
    group
        H5MD particle group to read; needed when the file has several.
    assume_units
        ``"nm"`` or ``"Angstrom"``: units of H5MD datasets without a ``unit`` attribute (None: refused).
    max_block_bytes
        Most bytes of frames a worker reads and maps at once (default 256 MiB): about each worker's memory.
    continuous
        Let trajectory parts that overlap in time join, the later part's frames kept (as ``gmx trjcat`` and
        MDAnalysis's ``continuous=True``); without it an overlap is refused.
    **executor_options
        Any other keyword is an option of the executor built by name: ``scheduler=`` (Dask), ``start_method=``
        (processes), ``collective=`` or ``driver=`` (MPI); a name no option has is refused, named.

    Returns
    -------
    The analysis's result (``r.rmsd``, ``r.frames``, ``r.times``) with ``r.report`` (a
    :class:`~trajscale.report.timing.RunReport`), on the root process; None on other MPI ranks.
    """
    opts = RunOptions.from_keywords(options, keywords)
    if follow:
        return _run_follow(analysis, topology, trajectory, opts, follow, on_update)
    return _Run(analysis, topology, trajectory, opts).execute()


def _run_follow(analysis: Analysis, topology, trajectory, options: RunOptions, follow, on_update):
    """``run(..., follow=...)``: :func:`trajscale.follow.run_follow`, which reads every frame as it lands."""
    from .follow import FollowOptions, run_follow

    if (options.start or 0, options.stop, options.step) != (0, None, 1):
        raise ConfigError("follow analyses every frame as it lands: --start, --stop and --step do not apply")
    return run_follow(analysis, topology, trajectory, options=follow if isinstance(follow, FollowOptions) else None,
                      on_update=on_update, run_options=options)


class _Run:
    """One run over a finished trajectory, phase by phase; :meth:`execute` runs them in order."""

    def __init__(self, analysis: Analysis, topology, trajectory, options: RunOptions) -> None:
        self.analysis, self.topology, self.trajectory, self.options = analysis, topology, trajectory, options
        self.t_start = time.perf_counter()
        self.timeline = ProcessTimeline()   # the launching process's phases, from its start (first run) or now
        self.auto = options.executor == "auto"   # serial or processes, chosen once the job's size is known
        self.ex = options.make_executor("serial" if self.auto else None)
        self.timeline.lap("imports")   # the executor module (MPI: its init is noted apart, as "mpi_init")
        # the machine's other load while this run runs, and whether its files' pages are cached before it reads
        self.meter = LoadMeter("run")
        self.cache = page_cache(_paths(trajectory) or ()) if self.ex.is_root else None
        self.own = not isinstance(options.executor, Executor)
        refuse_if_launched(self.ex, self.own)
        self.t_prepare = 0.0
        self.choice: str | None = None   # "auto: processes (why)"

    def execute(self):
        """Prepare, plan, map, conclude; the result on the root process, None elsewhere."""
        # Under the CLI, Ctrl-C/SIGTERM are recorded and acted on between steps (a handler that raises
        # can land in a C or weakref callback and be lost); executors that cannot poll keep the raise.
        with polling_for_stop() if self.ex.polls_for_stop else contextlib.nullcontext():
            return self._phases()

    def _phases(self):
        report = None
        try:
            self.ex.start(reader_modules(self.trajectory))   # a pool's workers start while this process prepares
            self.timeline.lap("pool_start")
            raise_if_stopped()
            job, facts = self.prepare()
            ranges, facts = self.plan(job, facts)
            results = self.ex.map_tasks(job, ranges, self.options.progress)
            self.timeline.lap("tasks")
            raise_if_stopped()
            if not self.ex.is_root:
                return None
            result = self.conclude(job, facts, ranges, results)
            report = result.report
            return result
        except BaseException:
            if self.own:   # an error or Ctrl-C: stop workers, do not wait for them
                self.ex.close(wait=False)
            raise
        finally:
            if self.own:
                self.ex.close()
            if report is not None:   # stopping the pool (joining its workers) is the run's too
                self.timeline.lap("pool_start")
                report.process = self.timeline.record()
                report.conditions = self.conditions(report)
                _late_starts(report, self.ex.late_starts)

    def prepare(self) -> tuple[Job, JobFacts]:
        """The Job and its facts, prepared on the root process and handed to every process."""
        ex = self.ex
        try:
            got = _prepare(self.analysis, self.topology, self.trajectory, self.options, ex) if ex.is_root else None
        except BaseException as exc:   # a Ctrl-C too: the other ranks wait in the broadcast
            if ex.spmd:   # tell the other ranks, waiting in the broadcast, before raising here
                ex.broadcast(exc if isinstance(exc, TrajscaleError | KeyboardInterrupt | SystemExit)
                             else RuntimeError(f"rank 0 failed to prepare the job: {exc!r}"))
            raise
        raise_if_stopped()
        self.t_prepare = time.perf_counter() - self.t_start
        self.timeline.lap("prepare")
        if got is not None:
            self.timeline.move(got[1].t_init_top, "prepare", "topology")
        got = ex.broadcast(got)
        if isinstance(got, BaseException):
            if isinstance(got, TrajscaleError):
                got.reported_elsewhere = True   # rank 0 prints it; one message, not one per rank
            raise got
        return got

    def plan(self, job: Job, facts: JobFacts) -> tuple[list, JobFacts]:
        """The executor (``"auto"`` picks one now), the task ranges, and the facts with the run's read cost."""
        opts = self.options
        if self.auto:
            choice, why = choose_executor(facts, opts.n_workers)
            self.choice = f"auto: {choice} ({why})"
            if choice != self.ex.name:
                self.ex.close()   # frees the source the serial executor took over while preparing
                self.ex = opts.make_executor(choice)
        ex = self.ex
        ranges = facts.plan(opts.tasks_for(ex, 4), ex.n_workers, opts.max_block_bytes)
        if opts.n_tasks and len(ranges) < opts.n_tasks and ex.is_root and job.stride == 1:
            _say_tasks_capped(opts.n_tasks, len(ranges), facts)
        if ex.is_root:
            facts = _cost_own_reads(facts, job, ranges, self.analysis.selections)
        log.debug("%d frames of %d atoms in %d tasks on %s x%d (%d frames per read block)", facts.n_frames,
                  facts.n_atoms, len(ranges), ex.name, ex.n_workers, job.block_frames)
        self.timeline.lap("prepare")   # the broadcast, the executor's choice and the task plan
        return ranges, facts

    def conclude(self, job: Job, facts: JobFacts, ranges: list, results: TaskResults):
        """The reduced result with its report."""
        ex, opts = self.ex, self.options
        t_red = time.perf_counter()
        timings = list(results.timings)
        reduced = self.analysis.reduce(list(results.partials))
        result = self.analysis.result(reduced, job.prepared)
        t_red = time.perf_counter() - t_red
        payload = payload_of(job, reduced, facts.n_frames, self.analysis.per_frame)
        extras = {k: dict(v) for k, v in results.workers.items()}
        # The topology is read where the job is prepared: on a worker only for
        # serial and MPI (rank 0); for pools it is the driver's, kept in t_prepare.
        if ex.root_worker is not None:
            root = extras.setdefault(ex.root_worker, {})
            root["t_init_top"] = root.get("t_init_top", 0.0) + facts.t_init_top
        report = Report(
            analysis=self.analysis.name, executor=ex.name, n_workers=ex.n_workers,
            n_frames=facts.n_frames, n_atoms=facts.n_atoms, source=facts.source,
            t_total=time.perf_counter() - self.t_start, t_prepare=self.t_prepare, t_reduce=t_red,
            tasks=timings, workers=summarize_workers(timings, extras),
            meta={"analysis_config": readable_config(job.analysis), "n_tasks": len(ranges),
                  "n_tasks_asked": opts.n_tasks, "step": opts.step, "io": dict(results.io), "topology": facts.topology,
                  "trajectories": _paths(self.trajectory), "payload": payload.to_dict() if payload else None,
                  **({"executor_choice": self.choice} if self.auto else {})})
        self.timeline.lap("reduce")   # the result and this report
        report.process = self.timeline.record()
        report.conditions = self.conditions(report)
        return dataclasses.replace(result, report=report)

    def conditions(self, report: RunReport) -> dict:
        """The report's ``conditions``: the load so far and the page cache at the start.  Ranks of an SPMD
        run on this host are not this process's children; they poll while they wait, so each counts as
        one busy core over the run."""
        ours = 0.0
        if self.ex.spmd:
            here = socket.gethostname()
            ours = max(0, sum(1 for w in report.workers if w.host == here) - 1) * (time.monotonic() - self.meter.t0)
        return RunConditions(self.meter.stop(ours), self.cache).to_dict()


def _late_starts(report: RunReport, late: dict[str, dict]) -> None:
    """Workers still starting when the tasks were done: their whole start-up, known once the pool closed."""
    report.workers = [dataclasses.replace(w, t_start=late[w.worker]["t_start"], t_ready=late[w.worker]["t_ready"])
                      if w.worker in late and not w.t_ready else w for w in report.workers]


def _paths(trajectory) -> list[str] | None:
    """The trajectory file(s) as given (for commands in the advice), or None for other inputs."""
    items = list(trajectory) if isinstance(trajectory, list | tuple) else [trajectory]
    if not all(isinstance(t, str | os.PathLike) for t in items):
        return None
    return [os.fspath(t) for t in items]


def _cost_own_reads(facts: JobFacts, job: Job, ranges, selections: tuple[str, ...]) -> JobFacts:
    """``facts`` with what this run's own reads cost on the file's layout and on the layouts a rechunk
    would give in its source facts (``source.run_read``: the advice works from these)."""
    from statistics import median

    from .store.recommend import run_read, run_selection

    src = facts.source
    sizes = [len(range(r.start, r.stop, job.stride)) for r in ranges] or [facts.n_frames]
    cost = run_read(src, job.prepared.atoms, int(median(sizes)), job.stride)
    if cost is None:
        return facts
    cost = dataclasses.replace(cost, selection=run_selection(selections, job.prepared.atoms),
                               topology=facts.topology)
    log.debug("the run's reads cost %.2fx the bytes asked for (%d atoms, %d frames per task)",
              cost.amplification, cost.n_atoms, cost.frames_per_task)
    return dataclasses.replace(facts, source=dataclasses.replace(src, run_read=cost))


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


def frames_per_second(report: RunReport) -> float:
    return report.n_frames / report.t_total if report.t_total > 0 else float("nan")


__all__ = ["RunOptions", "plan_in_parts", "plan_strided_tasks", "plan_tasks", "run"]
