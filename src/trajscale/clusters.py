"""Dask clusters: the one place trajscale makes a Dask cluster or connects to one.

:func:`dask_cluster` gives a :class:`DaskCluster`: an embedded ``LocalCluster``, a running scheduler (within a bounded
wait), workers as SLURM jobs (dask-jobqueue), or a Client the caller made (never closed here).  The report shows
``cluster_start``, ``queue_wait`` and ``pool_start``, never "interpreter and imports".  ``distributed`` (and
``dask_jobqueue``) are imported only when a cluster is made."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field

from .errors import ConfigError, ParallelUnavailableError
from .util import process_folder

log = logging.getLogger(__name__)

#: What ``cluster=`` makes: an embedded LocalCluster, or a scheduler here whose workers are SLURM jobs.
CLUSTER_KINDS = ("local", "slurm")
#: Seconds to wait for a scheduler at an address before saying it cannot be reached.
CONNECT_TIMEOUT_S = 10.0

__all__ = ["CLUSTER_KINDS", "CONNECT_TIMEOUT_S", "DaskCluster", "SlurmJobs", "dask_cluster", "require_distributed"]


def require_distributed():
    """``distributed``, or one error saying how to install it."""
    try:
        import distributed
    except ImportError:
        raise ParallelUnavailableError(
            "the Dask executor needs dask.distributed (pip install 'trajscale[dask]' "
            "or pip install 'dask[distributed]')") from None
    return distributed


@dataclass(frozen=True, slots=True)
class SlurmJobs:
    """Workers as SLURM jobs (dask-jobqueue's ``SLURMCluster``); None fields take dask-jobqueue's
    configuration (``jobqueue.slurm`` in the Dask config), so a site's defaults still apply.

    Attributes
    ----------
    jobs
        SLURM jobs to submit (default: enough for ``n_workers`` at ``cores`` per job, else 1).
    cores
        Cores of each job, one single-threaded worker process per core (HDF5 serialises the
        threads of a process: parallel reads come from processes).
    memory
        Memory of each job (``"4GB"``).
    walltime
        Time limit of each job (``"01:00:00"``).
    queue
        The partition (``sbatch -p``).
    job_extra
        More ``#SBATCH`` directives (``"--constraint=cpu"``).
    wait
        Seconds to wait for every worker (queue and start); None: as long as it takes.
    """

    jobs: int | None = None
    cores: int | None = None
    memory: str | None = None
    walltime: str | None = None
    queue: str | None = None
    job_extra: tuple[str, ...] = ()
    wait: float | None = None

    def n_jobs(self, n_workers: int | None) -> int:
        if self.jobs is not None:
            return max(1, int(self.jobs))
        return max(1, math.ceil((n_workers or 1) / max(1, self.cores or 1)))


@dataclass(slots=True)
class DaskCluster:
    """A connected Client and what was started for it; ``phases``: seconds per phase; ``job_ids``: SLURM jobs."""

    client: object
    kind: str
    cluster: object = None
    own_client: bool = True
    phases: dict[str, float] = field(default_factory=dict)
    job_ids: tuple[str, ...] = ()
    scratch: str | None = None   # the local workers' temporary folder, removed on close

    @property
    def external(self) -> bool:
        """True when the workers were not started here (a scheduler address or a client given)."""
        return self.cluster is None

    @property
    def n_workers(self) -> int:
        """Workers connected now."""
        try:
            return len(self.client.scheduler_info().get("workers", {}))
        except Exception:   # noqa: BLE001 - a scheduler gone: none
            return 0

    def close(self, wait: bool = True) -> None:
        """Close the client (unless given) and what was started here; ``wait=False`` kills local workers first."""
        client, cluster = self.client, self.cluster
        self.client = self.cluster = None
        if not wait and self.kind == "local" and cluster is not None:
            for nanny in list(cluster.workers.values()):
                with contextlib.suppress(ProcessLookupError, TypeError):   # gone already, or never started
                    os.kill(nanny.pid, signal.SIGKILL)
        try:
            if self.own_client and client is not None:
                client.close()
        finally:
            try:
                if cluster is not None:
                    cluster.close()
            finally:
                if self.scratch is not None:
                    shutil.rmtree(self.scratch, ignore_errors=True)


def _note(phases: dict, phase: str, seconds: float) -> None:
    from .timeline import note_phase

    phases[phase] = phases.get(phase, 0.0) + seconds
    note_phase(phase, seconds)


def dask_cluster(n_workers: int | None = None, *, scheduler: str | None = None, client=None,
                 cluster: str = "local", threads_per_worker: int = 1, timeout: float | None = None,
                 slurm: SlurmJobs | None = None, silence_logs: int | None = None) -> DaskCluster:
    """A connected :class:`DaskCluster`: ``client`` as given, a scheduler at ``scheduler`` (reached within
    ``timeout`` s), or a cluster made here (``local`` with ``n_workers``, default the CPU count; ``slurm``).
    A scheduler made here serves its dashboard on any free port.  Errors are one line each."""
    from .pools import main_not_reimported, sigint_blocked

    if scheduler is not None and client is not None:
        raise ConfigError("Dask: give a scheduler address or a client, not both")
    if cluster not in CLUSTER_KINDS:
        raise ConfigError(f"Dask cluster must be one of {', '.join(CLUSTER_KINDS)}, got {cluster!r}")
    external = scheduler is not None or client is not None
    if external and (cluster != "local" or slurm is not None):
        raise ConfigError("Dask: a SLURM cluster is started here; with a scheduler address or a client, "
                          "the workers are that cluster's")
    if slurm is not None and cluster != "slurm":
        cluster = "slurm"
    if client is not None:
        return DaskCluster(client, "client", own_client=False)
    distributed = require_distributed()
    if scheduler is not None:
        return _connect(distributed, scheduler, CONNECT_TIMEOUT_S if timeout is None else float(timeout))
    phases: dict[str, float] = {}
    t0 = time.perf_counter()
    if cluster == "slurm":
        return _slurm_cluster(distributed, n_workers, slurm or SlurmJobs(), phases)
    import dask

    # Dask's scratch space (the scheduler's and the workers') in the run's own temporary folder, removed with it
    scratch = process_folder()
    # Spawned workers must not re-run a script's unguarded top level; a Ctrl-C while the cluster starts is held
    with sigint_blocked(), main_not_reimported(), _workers_forked(), dask.config.set({"temporary-directory": scratch}):
        extra = {} if silence_logs is None else {"silence_logs": silence_logs}
        try:
            made = distributed.LocalCluster(n_workers=max(1, int(n_workers or os.cpu_count() or 1)),
                                            threads_per_worker=int(threads_per_worker), processes=True,
                                            dashboard_address=":0", local_directory=scratch, **extra)
        except BaseException:
            shutil.rmtree(scratch, ignore_errors=True)
            raise
        try:
            got = distributed.Client(made)
            if log.getEffectiveLevel() > logging.DEBUG:
                got.run(quiet_failed_heartbeats)
        except BaseException:
            made.close()
            shutil.rmtree(scratch, ignore_errors=True)
            raise
    _note(phases, "pool_start", time.perf_counter() - t0)   # the workers start with a LocalCluster
    return DaskCluster(got, "local", cluster=made, phases=phases, scratch=scratch)


class _FailedHeartbeat(logging.Filter):
    """A worker's heartbeat that found its connection closed: distributed beats again; a lost worker is reported."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Failed to communicate with scheduler during heartbeat")


def quiet_failed_heartbeats() -> None:
    """Drop a worker's failed-heartbeat tracebacks (run on the workers of a LocalCluster started here)."""
    worker_log = logging.getLogger("distributed.worker")
    if not any(isinstance(f, _FailedHeartbeat) for f in worker_log.filters):
        worker_log.addFilter(_FailedHeartbeat())


@contextlib.contextmanager
def _workers_forked():
    """A LocalCluster's worker processes started as :func:`~trajscale.pools.choose_start_method` says, never
    forked from this process (Dask's event loop runs in a thread by then); a forkserver that has imported
    ``distributed`` starts them at half the CPU of spawn.  A method the Dask configuration names passes the same
    rule (``fork`` is refused in one line); ``spawn``, Dask's default, is left to the rule."""
    import dask

    from .pools import prepare_start

    key = "distributed.worker.multiprocessing-method"
    named = dask.config.get(key)
    method = prepare_start(None if named == "spawn" else named, late=True, asked_by=f"Dask's {key}",
                           unforkable="Dask's event loop runs in a thread of this process")
    with dask.config.set({key: method}):
        yield


def _connect(distributed, address: str, timeout: float) -> DaskCluster:
    """A Client on the scheduler at ``address``, or one line after ``timeout`` seconds."""
    if timeout <= 0:
        raise ConfigError(f"the Dask scheduler timeout must be more than 0 seconds, got {timeout:g}")
    t0 = time.perf_counter()
    try:
        with _quiet("distributed"):   # its retries and the final traceback are this one line's business
            got = distributed.Client(address, timeout=f"{timeout}s")
    except (OSError, TimeoutError, ValueError) as exc:
        reason = str(exc).split("\n")[0].rstrip(":")
        reason = "" if reason.startswith("Timed out") or not reason else f" ({reason})"
        raise ParallelUnavailableError(
            f"cannot reach the Dask scheduler at {address} within {timeout:g} s{reason}: is it running "
            "there? (--scheduler-timeout SECONDS waits longer)") from None
    phases: dict[str, float] = {}
    _note(phases, "cluster_start", time.perf_counter() - t0)
    return DaskCluster(got, "scheduler", phases=phases)


@contextlib.contextmanager
def _quiet(name: str):
    """Loggers of ``name`` silenced for the block, unless trajscale logs at DEBUG (``-vv``)."""
    lg = logging.getLogger(name)
    if logging.getLogger("trajscale").getEffectiveLevel() <= logging.DEBUG:
        yield
        return
    level = lg.level
    lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        lg.setLevel(level)


def _slurm_cluster(distributed, n_workers, spec: SlurmJobs, phases: dict) -> DaskCluster:
    try:
        from dask_jobqueue import SLURMCluster
    except ImportError:
        raise ParallelUnavailableError("Dask workers as SLURM jobs need dask-jobqueue (pip install "
                                       "'trajscale[dask]' or pip install dask-jobqueue)") from None
    if shutil.which("sbatch") is None:
        raise ParallelUnavailableError("Dask workers as SLURM jobs: no sbatch here (run it on a SLURM "
                                       "cluster's login or compute node)")
    cores = max(1, int(spec.cores or 1))
    n_jobs = spec.n_jobs(n_workers)
    kw = {"cores": cores, "processes": cores}   # one single-threaded worker per core
    kw.update({k: v for k, v in (("memory", spec.memory), ("walltime", spec.walltime), ("queue", spec.queue))
               if v is not None})
    if spec.job_extra:
        kw["job_extra_directives"] = list(spec.job_extra)
    kw["scheduler_options"] = {"dashboard_address": ":0"}   # any free port
    import dask

    t0 = time.perf_counter()
    scratch, made = process_folder(), None   # the scheduler's scratch (it runs here), removed with the cluster
    try:
        with dask.config.set({"temporary-directory": scratch}):
            made = SLURMCluster(**kw)
        got = distributed.Client(made)
        _note(phases, "cluster_start", time.perf_counter() - t0)
        _check_job(made)
        made.scale(jobs=n_jobs)
        job_ids = _wait_for_slurm_workers(made, got, n_jobs, n_jobs * cores, spec.wait, phases)
    except BaseException as exc:
        if made is not None:
            with contextlib.suppress(Exception):
                made.close()
        shutil.rmtree(scratch, ignore_errors=True)
        if made is None and isinstance(exc, ValueError):   # e.g. no memory given nor configured
            raise ConfigError("Dask SLURM cluster: give each job's memory (--dask-memory SIZE, memory= from Python, "
                              "or jobqueue.slurm.memory in the Dask configuration)" if "memory" in str(exc) else
                              f"Dask SLURM cluster: {str(exc).splitlines()[0]}".rstrip(".:")) from None
        raise
    return DaskCluster(got, "slurm", cluster=made, phases=phases, job_ids=job_ids, scratch=scratch)


def _check_job(cluster) -> None:
    """sbatch's refusal of the workers' job script as one line now (``sbatch --test-only``), not a wait for ever."""
    try:
        out = subprocess.run(["sbatch", "--test-only"], input=cluster.job_script(), capture_output=True, text=True,
                             timeout=60, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise ParallelUnavailableError(f"Dask SLURM cluster: sbatch --test-only failed: {exc}") from None
    if out.returncode != 0:
        said = [line.strip() for line in out.stderr.splitlines() if line.strip()]
        raise ParallelUnavailableError(f"Dask SLURM cluster: sbatch refused the workers' job: "
                                       f"{said[-1] if said else f'exit status {out.returncode}'}")


def _wait_for_slurm_workers(cluster, client, n_jobs: int, n_workers: int, wait: float | None,
                            phases: dict) -> tuple[str, ...]:
    """Wait for ``n_workers`` workers, timing the queue apart from the start; a job gone from the queue ends it."""
    from .util import raise_if_stopped

    t0 = time.perf_counter()
    t_running = None
    said = t0
    gone_since: dict[str, float] = {}
    while True:
        raise_if_stopped()
        ids = tuple(str(j.job_id) for j in list(cluster.workers.values()) if getattr(j, "job_id", None))
        connected = len(client.scheduler_info().get("workers", {}))
        if connected >= n_workers:
            break
        now = time.perf_counter()
        states = _job_states(ids) if ids else None
        if states is not None:
            if t_running is None and len(ids) >= n_jobs and all(states.get(j, "GONE") != "PENDING" for j in ids):
                t_running = now
            for j in ids:
                if j not in states or states[j] not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
                    gone_since.setdefault(j, now)
            late = [j for j, t in gone_since.items() if now - t > 10]
            if late and connected < n_workers:
                raise ParallelUnavailableError(
                    f"Dask SLURM cluster: job {late[0]} ended ({states.get(late[0], 'no longer queued')}) before "
                    f"its workers connected ({connected} of {n_workers}); see its output (sacct -j {late[0]})")
        if wait is not None and now - t0 > wait:
            state = "in the SLURM queue" if t_running is None else "starting"
            raise ParallelUnavailableError(
                f"Dask SLURM cluster: {connected} of {n_workers} workers connected after {wait:g} s (jobs "
                f"{', '.join(ids) or 'not yet submitted'} still {state}); see squeue and the jobs' output")
        if now - said > 60:
            log.info("waiting for Dask workers as SLURM jobs %s: %d of %d connected", ", ".join(ids), connected,
                     n_workers)
            said = now
        time.sleep(0.1 if t_running is None else 0.05)
    t_end = time.perf_counter()
    t_running = t_end if t_running is None else t_running
    _note(phases, "queue_wait", t_running - t0)
    _note(phases, "pool_start", t_end - t_running)
    return ids


def _job_states(job_ids: tuple[str, ...]) -> dict[str, str] | None:
    """SLURM job id -> state (PENDING, RUNNING, ...) of those squeue still lists; None when squeue cannot tell."""
    try:
        out = subprocess.run(["squeue", "-h", "-o", "%i %T", "-j", ",".join(job_ids)], capture_output=True,
                             text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0 and "Invalid job id" not in out.stderr:
        return None
    return dict(line.split()[:2] for line in out.stdout.splitlines() if len(line.split()) >= 2)
