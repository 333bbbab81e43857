"""``trajscale.run``: prepare once, map blocks on an executor, reduce, report."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import shlex
import time

from .analysis.base import Analysis
from .analysis.user import readable_config
from .errors import AtomCountMismatchError, ConfigError, FrameRangeError, TrajscaleError
from .executors import Executor, Job, choose_executor, make_executor
from .executors.base import refuse_if_launched
from .planning import (  # noqa: F401 (planning names stay importable from trajscale.run)
    MAX_BLOCK_BYTES,
    MAX_TASK_BYTES,
    plan_in_parts,
    plan_strided_tasks,
    plan_tasks,
    topology_with_first_frame,
)
from .report.process import ProcessTimeline
from .report.summary import Report
from .report.timing import RunReport, summarize_workers
from .sources import open_source, reader_modules
from .sources.mda import MDASource
from .topology import CachedUniverse
from .util import polling_for_stop, raise_if_stopped

log = logging.getLogger(__name__)

def _prepare(analysis: Analysis, topology, trajectory, start, stop, source_options,
             max_block_bytes=MAX_BLOCK_BYTES, group=None, assume_units=None, adopt=None, continuous=False):
    """The Job and run facts; the source opened here is closed on every path (a failing
    run in a long session leaks no file handle).

    ``adopt(config, source)``, given when this process also runs the tasks
    (serial), takes the opened source over for them: opened once, not twice.
    """
    opened: list = []
    try:
        job, info = _prepare_open(opened, analysis, topology, trajectory, start, stop, source_options,
                                  max_block_bytes, group, assume_units, continuous)
        if adopt is not None and opened and job.source == opened[0].get_config():
            adopt(job.source, opened.pop())
        return job, info
    finally:
        for source in opened:
            source.close()


def _prepare_open(opened: list, analysis: Analysis, topology, trajectory, start, stop, source_options,
                  max_block_bytes=MAX_BLOCK_BYTES, group=None, assume_units=None, continuous=False):
    t0 = time.perf_counter()
    given = topology if hasattr(topology, "select_atoms") else None   # an MDAnalysis Universe or AtomGroup
    top_file = given.universe.filename if given is not None else topology
    source = open_source(trajectory, top_file, group=group, assume_units=assume_units, continuous=continuous)
    opened.append(source)
    if isinstance(source, MDASource):
        universe = source.universe
    elif given is not None:
        universe = given.universe
    else:
        # Selections come from the selection cache when they can; MDAnalysis builds the Universe only if not.
        universe = (CachedUniverse(str(topology), functools.partial(topology_with_first_frame, topology, source))
                    if topology is not None else None)
    t_top = time.perf_counter() - t0
    if universe is not None and universe.atoms.n_atoms != source.n_atoms:
        raise AtomCountMismatchError(
            f"{top_file} has {universe.atoms.n_atoms} atoms but {source.path} has {source.n_atoms}")
    start, stop = frame_range(start, stop, source.n_frames, source.path)
    # An AtomGroup given as topology is what the analysis selects within (MDAnalysis's `atomgroup`).
    prep = analysis.prepare(given if given is not None and given is not given.universe else universe, source)
    t_top += getattr(universe, "t_build", 0.0)   # a Universe built during prepare is topology time
    config = source.get_config()
    if source.supports_mpio:
        config.update(source_options)
    n_read = source.n_atoms if prep.atoms is None else len(prep.atoms)
    frame_bytes = source.bytes_per_frame(prep.atoms, analysis.fields)
    span = n_read if not n_read or prep.atoms is None else int(prep.atoms[-1] - prep.atoms[0]) + 1
    info = {"source": source.layout_summary(), "n_frames": stop - start, "n_atoms": n_read, "span_atoms": span,
            "chunk_frames": source.chunk_frames, "part_starts": source.part_starts, "start": start, "stop": stop,
            "t_init_top": t_top, "frame_bytes": frame_bytes, "decode_s_per_frame": source.decode_seconds_per_frame(),
            "topology": os.fspath(top_file) if isinstance(top_file, str | os.PathLike) else None}
    log.debug("prepared %s: %d of %d atoms, frames [%d, %d), %d bytes per frame read", analysis.name, n_read,
              source.n_atoms, start, stop, frame_bytes)
    block_frames = max(1, int(max_block_bytes) // frame_bytes)
    return Job(analysis.get_config(), config, prep, block_frames), info


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


def run(analysis: Analysis, topology, trajectory, *, executor: str | Executor = "serial",
        n_workers: int | None = None, n_tasks: int | None = None, tasks_per_worker: int = 4,
        start: int | None = 0, stop: int | None = None, step: int = 1, progress: bool = False,
        group: str | None = None, assume_units: str | None = None, max_block_bytes: int = MAX_BLOCK_BYTES,
        continuous: bool = False, follow=False, on_update=None, **executor_options):
    """Run ``analysis`` over ``trajectory`` on an executor.

    Parameters
    ----------
    analysis
        An :class:`~trajscale.analysis.base.Analysis` such as ``RMSD(select=...)``.
    topology
        Topology file MDAnalysis reads (PSF, TPR, GRO, PDB, ...), or an
        MDAnalysis Universe already built from one (its topology and
        selections are used; its trajectory is not read), or an AtomGroup
        of one: the analysis selects within it, as MDAnalysis's analyses do.
    trajectory
        An H5MD file (fast path) or any trajectory file(s) MDAnalysis reads.
        Several parts join as ``convert`` joins them
        (:func:`~trajscale.sources.chain.plan_join`): GROMACS restart parts
        give each time once, the later part's frame.
    executor
        ``"serial"``, ``"processes"``, ``"dask"``, ``"mpi"``, an Executor, or
        ``"auto"``: serial when the estimated work is below the cost of
        starting worker processes, else processes (the choice and the reason
        are logged and kept in ``report.meta["executor_choice"]``).
    n_workers
        Workers (processes, Dask workers); ignored by serial and MPI (the communicator's size).
    n_tasks
        Number of frame blocks; default ``tasks_per_worker`` per worker.
    start, stop, step
        Frame range to analyse: frames ``start, start + step, ...`` below ``stop``;
        negative ``start``/``stop`` count from the end and a ``stop`` past the
        end is the end, as Python slices (and MDAnalysis's ``run``) take them.
    progress
        Show a progress bar on stderr.
    group
        H5MD particle group to read; needed when the file has several.
    assume_units
        ``"nm"`` or ``"Angstrom"``: units of H5MD datasets without a ``unit``
        attribute (None: such a file is refused; units are never guessed).
    max_block_bytes
        Most bytes of frames a worker reads and maps at once (default 256 MiB):
        each worker's memory is about this, however many frames the run has.
    continuous
        Let trajectory parts that overlap in time join, the later part's frames
        kept (as ``gmx trjcat`` and MDAnalysis's ``continuous=True``); without
        it an overlap is refused.
    follow
        True (or a :class:`~trajscale.follow.FollowOptions`): the trajectory is
        still being written; analyse its frames as they land and end when the
        writer marks it complete, after ``idle`` seconds without a new frame,
        or on Ctrl-C (:mod:`trajscale.follow`). The result has the same bits as
        a run over the finished file.
    on_update
        With ``follow``: ``on_update(result)`` gets the result so far, every
        ``every_s`` seconds or ``every_frames`` frames, and at the end.

    Returns
    -------
    The analysis's result (``r.rmsd``, ``r.frames``, ``r.times``) with ``r.report``
    (a :class:`~trajscale.report.timing.RunReport`), on the root process; None on
    other MPI ranks.
    """
    if follow:
        from .follow import FollowOptions, run_follow

        if (start or 0, stop, step) != (0, None, 1):
            raise ConfigError("follow analyses every frame as it lands: --start, --stop and --step do not apply")
        return run_follow(analysis, topology, trajectory, executor=executor, n_workers=n_workers, n_tasks=n_tasks,
                          group=group, assume_units=assume_units, max_block_bytes=max_block_bytes,
                          options=follow if isinstance(follow, FollowOptions) else None, on_update=on_update,
                          progress=progress, **executor_options)
    t_start = time.perf_counter()
    timeline = ProcessTimeline()   # the launching process's phases, from its start (first run) or now
    if max_block_bytes < 1:
        raise ConfigError(f"max_block_bytes must be positive, got {max_block_bytes}")
    if n_tasks is not None and n_tasks < 1:
        raise ConfigError(f"the number of tasks must be at least 1 (got {n_tasks})")
    if step < 1:
        raise ConfigError(f"step must be at least 1 (got {step})")
    auto = executor == "auto"   # serial or processes, chosen once the job's size is known
    ex = make_executor("serial" if auto else executor, n_workers, **executor_options)
    timeline.lap("imports")   # the executor module (MPI: its init is noted apart, as "mpi_init")
    own = not isinstance(executor, Executor)
    refuse_if_launched(ex, own)
    # Under the CLI, Ctrl-C/SIGTERM are recorded and acted on between steps (a handler that raises
    # can land in a C or weakref callback and be lost); executors that cannot poll keep the raise.
    with polling_for_stop() if ex.polls_for_stop else contextlib.nullcontext():
        return _run(analysis, topology, trajectory, ex, own, auto, t_start, n_workers, n_tasks,
                    tasks_per_worker, start, stop, progress, group, assume_units, executor_options,
                    max_block_bytes, step, timeline, continuous)


def _run(analysis, topology, trajectory, ex, own, auto, t_start, n_workers, n_tasks, tasks_per_worker,
         start, stop, progress, group, assume_units, executor_options, max_block_bytes=MAX_BLOCK_BYTES,
         step=1, timeline=None, continuous=False):
    timeline = timeline or ProcessTimeline()
    report = None
    try:
        ex.start(reader_modules(trajectory))   # a pool's workers start while this process prepares the job
        timeline.lap("pool_start")
        raise_if_stopped()
        try:
            job, info = (_prepare(analysis, topology, trajectory, start, stop, ex.source_options(),
                                  max_block_bytes, group, assume_units, ex.adopt_source if ex.adopts_sources else None,
                                  continuous)
                         if ex.is_root else (None, None))
        except Exception as exc:
            if ex.spmd:   # tell the other ranks, waiting in the broadcast, before raising here
                ex.broadcast(exc if isinstance(exc, TrajscaleError)
                             else RuntimeError(f"rank 0 failed to prepare the job: {exc!r}"))
            raise
        raise_if_stopped()
        if job is not None and step > 1:
            job = dataclasses.replace(job, stride=step)
            info = {**info, "n_frames": len(range(info["start"], info["stop"], step)), "step": step}
        t_prep = time.perf_counter() - t_start
        timeline.lap("prepare")
        if info is not None:
            timeline.move(info["t_init_top"], "prepare", "topology")
        got = ex.broadcast((job, info))
        if isinstance(got, BaseException):
            if isinstance(got, TrajscaleError):
                got.reported_elsewhere = True   # rank 0 prints it; one message, not one per rank
            raise got
        job, info = got
        if auto:
            choice, why = choose_executor(info, n_workers)
            info["executor_choice"] = f"auto: {choice} ({why})"
            if choice != "serial":
                ex.close()   # frees the source the serial executor took over while preparing
                ex = make_executor(choice, n_workers, **executor_options)
        k = n_tasks or (1 if ex.name == "serial" else ex.n_workers * tasks_per_worker)
        if job.stride > 1:
            ranges = plan_strided_tasks(info["start"], info["stop"], job.stride, k, info["frame_bytes"],
                                        ex.n_workers, max_block_bytes, info["part_starts"])
        else:
            ranges = plan_tasks(info["start"], info["stop"], k, info["chunk_frames"], info["frame_bytes"],
                                ex.n_workers, max_block_bytes, info["part_starts"])
        if n_tasks and len(ranges) < n_tasks and ex.is_root and job.stride == 1:
            _say_tasks_capped(n_tasks, len(ranges), info)
        if ex.is_root:
            _cost_own_reads(info, job, ranges)
        log.debug("%d frames of %d atoms in %d tasks on %s x%d (%d frames per read block)", info["n_frames"],
                  info["n_atoms"], len(ranges), ex.name, ex.n_workers, job.block_frames)
        timeline.lap("prepare")   # the broadcast, the executor's choice and the task plan
        results = ex.map_tasks(job, ranges, progress)
        timeline.lap("tasks")
        raise_if_stopped()
        if not ex.is_root:
            return None
        t_red = time.perf_counter()
        partials = [p for p, _ in results]
        timings = [t for _, t in results]
        reduced = ex.reduce(analysis, partials)
        result = analysis.result(reduced, job.prepared)
        t_red = time.perf_counter() - t_red
        extras = ex.worker_extras()
        # The topology is read where the job is prepared: on a worker only for
        # serial and MPI (rank 0); for pools it is the driver's, kept in t_prepare.
        if ex.root_worker is not None:
            root = extras.setdefault(ex.root_worker, {})
            root["t_init_top"] = root.get("t_init_top", 0.0) + info["t_init_top"]
        report = Report(
            analysis=analysis.name, executor=ex.name, n_workers=ex.n_workers,
            n_frames=info["n_frames"], n_atoms=info["n_atoms"], source=info["source"],
            t_total=time.perf_counter() - t_start, t_prepare=t_prep, t_reduce=t_red,
            tasks=timings, workers=summarize_workers(timings, extras),
            meta={"analysis_config": readable_config(job.analysis), "n_tasks": len(ranges), "n_tasks_asked": n_tasks,
                  "step": step, "io": ex.io_used(), "topology": info.get("topology"),
                  "trajectories": _paths(trajectory), **({"executor_choice": info["executor_choice"]} if auto else {})})
        timeline.lap("reduce")   # the result and this report
        report.process = timeline.record()
        return dataclasses.replace(result, report=report)
    except BaseException:
        if own:   # an error or Ctrl-C: stop workers, do not wait for them
            ex.terminate()
        raise
    finally:
        if own:
            ex.close()
        if report is not None:   # stopping the pool (joining its workers) is the run's too
            timeline.lap("pool_start")
            report.process = timeline.record()
            _late_starts(report, ex.late_starts)


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


def _cost_own_reads(info: dict, job: Job, ranges) -> None:
    """Record in the report's source facts what this run's own reads cost on the file's layout and
    on the layouts a rechunk would give (``source.run_read``: the advice works from these)."""
    from statistics import median

    from .store.recommend import run_read, run_selection

    src = info["source"]
    sizes = [len(range(r.start, r.stop, job.stride)) for r in ranges] or [info["n_frames"]]
    cost = run_read(src, job.prepared.atoms, int(median(sizes)), job.stride)
    if cost is None:
        return
    cost = dataclasses.replace(cost, selection=run_selection(job.analysis, job.prepared.atoms),
                               topology=info.get("topology"))
    info["source"] = dataclasses.replace(src, run_read=cost)
    log.debug("the run's reads cost %.2fx the bytes asked for (%d atoms, %d frames per task)",
              cost.amplification, cost.n_atoms, cost.frames_per_task)


def _say_tasks_capped(asked: int, got: int, info: dict) -> None:
    """Tasks start on chunk boundaries: say why fewer tasks than asked for, and what lifts the cap."""
    cf, n = info["chunk_frames"], info["n_frames"]
    if info.get("part_starts"):
        log.warning("asked for %d tasks but ran %d: tasks begin at part boundaries, and parts shorter than "
                    "a task's share of the %d frames are read whole", asked, got, n)
        return
    if cf <= 1:
        log.warning("asked for %d tasks; %d frames make only %d", asked, n, got)
        return
    from .report.advice import kept_options

    path = shlex.quote(info["source"].path or "FILE")
    log.warning("asked for %d tasks but ran %d: tasks start on chunk boundaries and the file's chunks hold "
                "%d frames (%d frames to read); rechunk to allow %d tasks: trajscale rechunk %s "
                "-o rechunked.h5md --chunks %d%s", asked, got, cf, n, asked, path, max(1, n // asked),
                kept_options(info["source"]))


def frames_per_second(report: RunReport) -> float:
    return report.n_frames / report.t_total if report.t_total > 0 else float("nan")


__all__ = ["plan_in_parts", "plan_strided_tasks", "plan_tasks", "run"]
