"""Run tasks on a Dask ``distributed`` cluster: an embedded LocalCluster, or any scheduler.

Each worker process opens the trajectory on its first task and keeps the handle.  A small scheduler
plugin records when the scheduler handed each task to a worker and when it came back, for the
report.  ``dask[distributed]`` is imported only when this executor is built."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import time
import uuid

from ..block import FrameRange
from ..errors import ConfigError, TaskError, TrajscaleError
from ..progress import progress_bar
from ..report.timing import TaskTiming
from .base import Executor, Homecoming, Job, TaskResults, close_cached_sources, io_of, run_task, sendable

log = logging.getLogger(__name__)

#: Name of the scheduler plugin that clocks trajscale's tasks.
CLOCK_NAME = "trajscale-task-clock"
KEY_PREFIX = "trajscale-"
JOB_KEY_PREFIX = "tsjob-"   # not a task: no scheduler-side clock


def _identity(x):
    return x


def _dask_task(job: Job, task: int, frames: FrameRange) -> tuple[object, TaskTiming]:
    """Runs on a Dask worker: the worker's address names it in the report."""
    try:
        from distributed import get_worker

        name = get_worker().address
    except (ImportError, ValueError):   # not inside a worker (e.g. a synchronous test client)
        name = f"pid {os.getpid()}"
    try:
        return run_task(job, task, frames, name)
    except TrajscaleError as exc:   # an answer, not a crash: returned so the worker logs no traceback
        return _Refused(exc)


class _Refused:
    """A task's user error (a damaged file, NaN coordinates), carried back as the task's result."""

    def __init__(self, error: TrajscaleError) -> None:
        self.error = error


@functools.cache
def _clock_class():
    """The scheduler plugin class (built on first use: distributed is optional)."""
    from distributed.diagnostics.plugin import SchedulerPlugin

    class TaskClock(SchedulerPlugin):
        """Scheduler-side epoch times when each trajscale task starts and stops processing."""

        name = CLOCK_NAME

        def __init__(self) -> None:
            self.times: dict[str, list] = {}

        def transition(self, key, start, finish, *args, stimulus_id=None, **kwargs) -> None:
            if not (isinstance(key, str) and key.startswith(KEY_PREFIX)):
                return
            if finish == "processing":   # (re)assigned to a worker; a retry restarts the clock
                self.times[key] = [time.time(), None]
            elif start == "processing" and key in self.times:
                self.times[key][1] = time.time()

    return TaskClock


def _has_clock(dask_scheduler=None) -> bool:
    return CLOCK_NAME in dask_scheduler.plugins


def _pop_times(keys: list[str], dask_scheduler=None) -> dict[str, tuple]:
    plugin = dask_scheduler.plugins.get(CLOCK_NAME)
    if plugin is None:
        return {}
    return {k: tuple(plugin.times.pop(k)) for k in keys if k in plugin.times}


class DaskExecutor(Executor):
    """Tasks on Dask workers.

    The cluster comes from :func:`trajscale.clusters.dask_cluster`, the one place trajscale makes or reaches one: an
    embedded LocalCluster (default), a running scheduler (``scheduler``), workers as SLURM jobs
    (``cluster="slurm"``), or a Client given.

    Parameters
    ----------
    n_workers
        Workers of the embedded LocalCluster (default: the CPU count), or of the SLURM cluster (``jobs`` default to
        enough of them).  With ``scheduler`` or ``client``: the worker count used to plan tasks (default: the
        workers connected now).
    scheduler
        Address of a running scheduler (``"tcp://host:port"``).
    client
        A ``distributed.Client`` (e.g. on a cluster of your own); it is never closed here.
    threads_per_worker
        Threads per LocalCluster worker (HDF5 serialises threads: keep 1).
    retries
        Times a task is resubmitted after Dask gave up on it because its workers kept dying (``KilledWorker``).
        Errors raised by the task itself (bad coordinates, a bad selection, a bug) are never retried.
    scheduler_timeout
        Seconds to wait for ``scheduler`` before one error says it cannot be reached (default 10).
    cluster
        ``"local"`` (default) or ``"slurm"``: a scheduler in this process whose workers are SLURM jobs submitted by
        dask-jobqueue's ``SLURMCluster``, cancelled by :meth:`close`.
    **slurm
        The SLURM cluster's jobs (:class:`trajscale.clusters.SlurmJobs`): ``jobs`` (how many), ``cores`` (of each,
        one single-threaded worker per core), ``memory`` (``"4GB"``), ``walltime`` (``"01:00:00"``), ``queue`` (the
        partition), ``job_extra`` (further ``#SBATCH`` directives) and ``wait`` (seconds to wait for every worker;
        default: as long as the queue takes).
    """

    def __init__(self, n_workers: int | None = None, scheduler: str | None = None, client=None,
                 threads_per_worker: int = 1, retries: int = 2, scheduler_timeout: float | None = None,
                 cluster: str = "local", **slurm) -> None:
        from ..clusters import CLUSTER_KINDS, SlurmJobs, dask_cluster, require_distributed

        require_distributed()
        if cluster not in CLUSTER_KINDS:
            raise ConfigError(f"Dask cluster must be one of {', '.join(CLUSTER_KINDS)}, got {cluster!r}")
        unknown = sorted(set(slurm) - set(SlurmJobs.__dataclass_fields__))
        if unknown:
            raise ConfigError(f"Dask executor: unknown option{'s' if len(unknown) > 1 else ''} "
                              f"{', '.join(map(repr, unknown))}")
        slurm_given = [k for k, v in slurm.items() if v]
        if slurm_given and cluster != "slurm":
            raise ConfigError(f"Dask executor: {', '.join(slurm_given)} size the SLURM jobs of cluster='slurm' "
                              f"(--dask-cluster slurm); this cluster is {cluster!r}"
                              + (" (a scheduler's workers are its own)" if scheduler or client else ""))
        cores = slurm.get("cores")
        self.threads_per_worker = int(threads_per_worker)
        self.retries = int(retries)
        self.cluster_kind = cluster
        self._slurm = SlurmJobs(**{**slurm, "job_extra": tuple(slurm.get("job_extra") or ())}) \
            if cluster == "slurm" else None
        self._cluster = None   # the DaskCluster, once connected
        if scheduler is not None or client is not None:
            self._cluster = dask_cluster(scheduler=scheduler, client=client, cluster=cluster, timeout=scheduler_timeout)
            if n_workers is None:
                n_workers = self._cluster.n_workers or 1
        elif self._slurm is not None:
            n_workers = self._slurm.n_jobs(n_workers) * max(1, cores or 1)
        super().__init__(n_workers or os.cpu_count() or 1)

    @property
    def cluster(self):
        """The :class:`~trajscale.clusters.DaskCluster` (its kind, phases, SLURM job ids); None before it starts."""
        return self._cluster

    @property
    def uses_external_cluster(self) -> bool:
        """True with a scheduler address or a client (e.g. dask-mpi, where one rank is the client)."""
        return self._cluster is not None and self._cluster.external

    @property
    def client(self):
        """The Client: the one given, one for ``scheduler``, or one on a cluster started here."""
        if self._cluster is None:
            from ..clusters import dask_cluster
            from ..timeline import mark_ready

            self._cluster = dask_cluster(self.n_workers, cluster=self.cluster_kind, slurm=self._slurm,
                                         threads_per_worker=self.threads_per_worker)
            # The workers are ready now (their t_start in the report), not when their first task comes.
            with contextlib.suppress(Exception):
                self._cluster.client.run(mark_ready)
        return self._cluster.client

    def _ensure_clock(self) -> bool:
        client = self.client
        try:
            if not client.run_on_scheduler(_has_clock):
                client.register_plugin(_clock_class()(), name=CLOCK_NAME)
            return True
        except Exception as exc:  # noqa: BLE001 - e.g. a scheduler without trajscale installed
            log.warning("no scheduler-side task times (%s: %s)", type(exc).__name__, exc)
            return False

    def map_tasks(self, job: Job, ranges: list[FrameRange], progress: bool = False) -> TaskResults:
        from distributed import as_completed

        if ranges:
            sendable(job)   # what pickle cannot take is refused here, in one line, before anything is sent
        # A scheduler's workers run in their own directory: the files are named absolute, from here.
        job = dataclasses.replace(job, source=absolute_paths(job.source))
        client = self.client
        clocked = self._ensure_clock()
        token = uuid.uuid4().hex[:12]
        # The Job travels once, as the result of one small task every task depends on: each worker fetches it once,
        # and unlike scattered data it is recomputed, not lost, if the worker holding it dies.
        job_ref = client.submit(_identity, job, key=f"{JOB_KEY_PREFIX}{token}", pure=False)
        keys = [f"{KEY_PREFIX}{token}-{i}" for i in range(len(ranges))]
        # No Dask retries: they would rerun deterministic failures. Only when Dask gives up on a worker that keeps
        # dying (KilledWorker) is the task resubmitted here.
        futures = [client.submit(_dask_task, job_ref, i, r, key=k, pure=False)
                   for i, (r, k) in enumerate(zip(ranges, keys, strict=False))]
        index = {f.key: i for i, f in enumerate(futures)}
        tries = [0] * len(ranges)
        home = Homecoming(job, len(ranges))
        try:
            with progress_bar(len(ranges), progress) as bar:
                pending = as_completed(futures)
                for fut in pending:
                    i = index[fut.key]
                    try:
                        got = fut.result()
                        if isinstance(got, _Refused):
                            raise got.error
                        fut.release()   # the cluster lets go of it too: its partial is folded in here
                        home.add(i, got)
                    except TrajscaleError:
                        raise
                    except Exception as exc:  # noqa: BLE001 - KilledWorker, lost connection...
                        r = ranges[i]
                        if _worker_lost(exc) and tries[i] < self.retries:
                            tries[i] += 1
                            log.warning("task %d (frames [%d, %d)) lost its worker (%s); resubmitting",
                                        i, r.start, r.stop, type(exc).__name__)
                            keys[i] = f"{KEY_PREFIX}{token}-{i}-retry{tries[i]}"
                            new = client.submit(_dask_task, job_ref, i, r, key=keys[i], pure=False)
                            futures.append(new)
                            index[new.key] = i
                            pending.add(new)
                            continue
                        raise TaskError("a Dask worker", r.start, r.stop, f"{type(exc).__name__}: {exc}") from None
                    bar.update(1)
        except BaseException:
            client.cancel(futures)
            raise
        finally:
            times = self._collect_times(keys) if clocked else {}
        return home.results(io=io_of(self.source_options)).with_timings(
            [dataclasses.replace(t, t_sched_start=times[k][0], t_sched_stop=times[k][1]) if times.get(k) else t
             for t, k in zip(home.timings, keys, strict=False)])

    def _collect_times(self, keys: list[str]) -> dict[str, tuple]:
        try:
            return self.client.run_on_scheduler(_pop_times, keys)
        except Exception as exc:  # noqa: BLE001 - times are optional; the results are not lost
            log.warning("could not read scheduler-side task times (%s: %s)", type(exc).__name__, exc)
            return {}

    def close(self, wait: bool = True) -> None:
        """Close the client and cluster started here; a client passed in stays open.  Workers of a cluster that
        outlives this executor close the files they cached for it.  distributed's own messages about the
        shutdown are shown only at INFO (``trajscale -v``)."""
        cluster, self._cluster = self._cluster, None
        if cluster is None:
            return
        if cluster.external:
            try:
                cluster.client.run(close_cached_sources)
            except Exception as exc:  # noqa: BLE001 - a scheduler already gone frees nothing
                log.debug("could not close worker caches (%s: %s)", type(exc).__name__, exc)
        if not wait:   # stopping: no word to workers that are killed, and no word of their nannies' restarts
            with _quiet_shutdown():
                cluster.close(wait=False)
            return
        with _quiet_shutdown(None if cluster.external else cluster.client):
            cluster.close()


#: Loggers that report on a cluster's shutdown (in this process and in our LocalCluster's workers).
_SHUTDOWN_LOGGERS = ("distributed", "tornado", "asyncio")


def _silence_shutdown_logs() -> None:
    for name in _SHUTDOWN_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL)


@contextlib.contextmanager
def _quiet_shutdown(client=None):
    """Silence distributed's shutdown chatter here and on ``client``'s workers, unless verbose."""
    loggers = [logging.getLogger(n) for n in _SHUTDOWN_LOGGERS]
    if loggers[0].getEffectiveLevel() <= logging.INFO:   # asked for (-v): show it all
        yield
        return
    if client is not None:
        with contextlib.suppress(Exception):   # workers already gone: nothing left to silence
            client.run(_silence_shutdown_logs)
    levels = [lg.level for lg in loggers]
    _silence_shutdown_logs()
    try:
        yield
    finally:
        for lg, lv in zip(loggers, levels, strict=False):
            lg.setLevel(lv)


#: Keys of a source config that name files (:func:`trajscale.executors.base` reads the same ones).
_PATH_KEYS = ("path", "index", "topology")


def absolute_paths(config: dict) -> dict:
    """``config`` with its files located as every worker opens them (absolute paths; URLs as they are)."""
    from ..sources import locate as absolute

    out = dict(config)
    for k in _PATH_KEYS:
        if isinstance(out.get(k), str | os.PathLike):
            out[k] = absolute(out[k])
    if out.get("trajectories"):
        out["trajectories"] = [absolute(p) if isinstance(p, str | os.PathLike) else p for p in out["trajectories"]]
    return out


def _worker_lost(exc: BaseException) -> bool:
    """True for failures caused by losing a worker, not by the task's own code."""
    from distributed import KilledWorker
    from distributed.comm import CommClosedError

    return isinstance(exc, (KilledWorker, CommClosedError))
