"""Run plain tasks (convert's and rechunk's segment writers, pack's file readers) on an executor, stoppably.

The tasks are module-level functions with plain arguments that write their own files and records, so nothing
comes back but a count. On a SIGTERM/Ctrl-C the workers stop between slabs, so every segment is left closed and
counted for ``--resume``.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import signal
import time
from dataclasses import dataclass

from ..errors import ConfigError, ParallelUnavailableError, TrajscaleError
from ..executor_registry import executor_traits, load, names
from ..parallel import wait_asleep
from ..pools import as_completed_polling, parent_alive, process_pool, quiet_worker, stop_workers
from ..progress import progress_bar
from ..sharing import share_on_comm
from ..storage.location import absolute as locate
from ..util import raise_if_stopped, request_stop, stop_requested

log = logging.getLogger(__name__)

def frame_bar(total: int, progress: bool, desc: str):
    """Progress counting frames: a bar on a terminal, a log line per tenth elsewhere."""
    return progress_bar(total, progress, desc=desc, unit="frame", leave=True)


def _init_worker() -> None:
    quiet_worker()   # the parent handles Ctrl-C and stops us; we die with it
    signal.signal(signal.SIGTERM, _sigterm_in_worker)


def _sigterm_in_worker(signum, frame) -> None:
    """Acted on between slabs, the files closed and counted; a worker whose parent is gone ends now
    (it may be waiting for a task that never comes)."""
    if not parent_alive():
        os._exit(128 + signum)
    request_stop(signum)


def run_tasks(fn, tasks: list[tuple], executor: str, n_workers: int, on_done=None, comm=None,
              options: dict | None = None, window: int | None = None) -> None:
    """Run ``fn(*args)`` for each ``args`` of ``tasks`` on ``executor`` with ``n_workers``.

    ``on_done(i, result)`` is called in the caller's process as task ``i`` completes.  Under an MPI
    launcher every rank of ``comm`` calls this with the same ``tasks`` and runs its share.  ``options`` are
    the executor's own; ``window`` bounds the tasks handed out and not yet done.
    """
    runner = check_executor(executor).convert_runner
    load(runner)(fn, tasks, n_workers, on_done, comm, options=options or {}, window=window)


def check_executor(executor: str, choosers: bool = False):
    """The traits of ``executor`` if it runs convert's tasks (or, with ``choosers``, picks one that does:
    ``auto``); else one error listing those that do."""
    traits = executor_traits(executor)
    if traits.convert_runner is None and not (choosers and traits.chooses):
        raise ConfigError(f"--executor must be one of {', '.join(names(converts=True, choosers=choosers))}, "
                          f"got {executor!r}")
    return traits


def run_serial(fn, tasks, n_workers, on_done, comm=None, options=None, window=None) -> None:
    """Every task in this process, in order."""
    for i, args in enumerate(tasks):
        r = fn(*args)
        if on_done:
            on_done(i, r)


def _windowed(tasks, window: int | None, n_workers: int):
    """``(i, args)`` of the tasks, and how many to hand out at first (all, without a window)."""
    numbered = iter(enumerate(tasks))
    first = len(tasks) if window is None else max(1, int(window), int(n_workers))
    return numbered, first


def run_processes(fn, tasks, n_workers, on_done, comm=None, options=None, window=None) -> None:
    """The tasks on a local pool of ``n_workers`` processes, stopped by SIGTERM on an error or Ctrl-C."""
    numbered, first = _windowed(tasks, window, n_workers)
    with process_pool(n_workers, start_method=(options or {}).get("start_method"),
                      initializer=_init_worker) as (pool, _):
        futures = {pool.submit(fn, *args): i for i, args in itertools.islice(numbered, first)}
    try:
        while futures:
            for fut in as_completed_polling(list(futures)):
                i = futures.pop(fut)
                r = fut.result()   # a worker's error (user errors keep their type) stops the run
                if on_done:
                    on_done(i, r)
                for j, args in itertools.islice(numbered, 1):   # one more handed out for each one done
                    futures[pool.submit(fn, *args)] = j
                break
    except BaseException:
        for fut in futures:
            fut.cancel()
        stop_workers(pool, signal.SIGTERM)   # each stops between slabs, its files closed and counted
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def run_dask(fn, tasks, n_workers, on_done, comm=None, options=None, window=None) -> None:
    """The tasks on a Dask cluster (:func:`trajscale.clusters.dask_cluster`: a LocalCluster of
    ``n_workers`` workers, a scheduler, SLURM jobs), stopped between slabs on a Ctrl-C."""
    from ..clusters import dask_cluster

    cluster = dask_cluster(n_workers, **_cluster_options(options or {}))
    try:
        client = cluster.client
        # Workers of a scheduler run in their own directory (another host's, a SLURM job's): the files
        # the tasks name are made absolute here, before any worker sees them.
        tasks = [tuple(_absolute(a) for a in args) for args in tasks]
        numbered, first = _windowed(tasks, window, n_workers)
        index = {}
        for i, args in itertools.islice(numbered, first):
            index[client.submit(_dask_task, fn, *args, pure=False)] = i
        pending = set(index)
        try:
            while pending:
                time.sleep(0.05)
                raise_if_stopped()
                for fut in [f for f in pending if f.done()]:
                    pending.discard(fut)
                    r = fut.result()
                    i = index.pop(fut)
                    if isinstance(r, _Stopped):   # a worker stopped by a signal of its own
                        raise SystemExit(r.code)
                    if on_done:
                        on_done(i, r)
                    for j, args in itertools.islice(numbered, 1):
                        new = client.submit(_dask_task, fn, *args, pure=False)
                        index[new] = j
                        pending.add(new)
        except BaseException:
            _stop_dask_tasks(client, pending)
            raise
    finally:
        cluster.close()


#: Fields of a task's dataclass argument that name files (a conversion's inputs, a rechunk's source).
_PATH_FIELDS = ("topology", "trajectories", "src_path")


def _absolute(arg):
    """A task's argument with the files it names (a path, a dataclass's :data:`_PATH_FIELDS`) absolute in
    this process's directory; URLs and everything else as they are."""
    if isinstance(arg, str | os.PathLike):
        text = os.fspath(arg)
        return locate(text) if text else text
    if dataclasses.is_dataclass(arg) and not isinstance(arg, type):
        names = {f.name for f in dataclasses.fields(arg)}
        changes = {}
        for name in _PATH_FIELDS:
            value = getattr(arg, name, None) if name in names else None
            if isinstance(value, str | os.PathLike):
                changes[name] = _absolute(value)
            elif isinstance(value, tuple | list) and value:
                changes[name] = type(value)(_absolute(v) for v in value)
        return dataclasses.replace(arg, **changes) if changes else arg
    return arg


def _cluster_options(options: dict) -> dict:
    """The Dask executor's options (its registry entry's) as :func:`~trajscale.clusters.dask_cluster` takes them."""
    from ..clusters import SlurmJobs

    slurm = {k: options[k] for k in ("jobs", "cores", "memory", "walltime", "queue", "job_extra", "wait")
             if options.get(k)}
    out = {"scheduler": options.get("scheduler"), "timeout": options.get("scheduler_timeout"),
           "cluster": options.get("cluster") or "local"}
    if out["cluster"] == "slurm":
        out["slurm"] = SlurmJobs(**{**slurm, "job_extra": tuple(slurm.get("job_extra", ()))})
    elif slurm:
        raise ConfigError(f"Dask: {', '.join(slurm)} size the SLURM jobs of --dask-cluster slurm")
    return out


@dataclass(frozen=True)
class _Stopped:
    """What a Dask task returns when it stopped between slabs on request (its exit code)."""

    code: int


def _dask_task(fn, *args):
    """Run ``fn`` on a Dask worker, its SystemExit on a stop request turned into a return value:
    raised in a worker, it would kill the worker's state machine (a traceback, then a restart)."""
    try:
        return fn(*args)
    except SystemExit as exc:
        return _Stopped(int(exc.code or 1))


def _stop_dask_tasks(client, pending, timeout: float = 60.0) -> None:
    """Stop the tasks still running on the Dask workers between slabs and wait for them: closing the cluster
    would let them write on (or kill them mid-slab), and the segments would not be what their records count."""
    from distributed import wait as dask_wait

    try:
        client.run(request_stop, int(signal.SIGTERM))   # each worker's tasks raise at their next check
        dask_wait(list(pending), timeout=timeout)
    except Exception as exc:   # noqa: BLE001 - a worker already gone: its segment's record still counts what it holds
        log.debug("stopping the Dask tasks: %s", exc)


def run_mpi(fn, tasks, n_workers, on_done, comm=None, options=None, window=None) -> None:
    """Each rank runs its share of ``tasks``; then every rank waits for the others, stoppably, and a
    task's error is raised on every rank (printed once, by the rank where it happened)."""
    rank, size = comm.Get_rank(), comm.Get_size()
    failure = None
    try:
        for i in range(rank, len(tasks), size):
            r = fn(*tasks[i])
            if on_done:
                on_done(i, r)
    except TrajscaleError as exc:
        failure = exc
    except Exception as exc:   # noqa: BLE001 - a bug: its rank raises it with the traceback, the others say where
        failure = exc
    # SystemExit/KeyboardInterrupt propagate: mpiexec forwards a SIGTERM to every rank, and a rank
    # that has finished its tasks acts on it here instead of waiting for the others.
    wait_asleep(comm.Ibarrier().Test, between=raise_if_stopped)
    failures = comm.allgather(None if failure is None else (rank, failure if isinstance(failure, TrajscaleError)
                                                            else repr(failure)))
    first = next((f for f in failures if f is not None), None)
    if first is None:
        return
    if first[0] == rank:
        raise failure
    if isinstance(first[1], TrajscaleError):
        first[1].reported_elsewhere = True
        raise first[1]
    raise ParallelUnavailableError(f"rank {first[0]} failed: {first[1]}")


def stop_together(comm) -> None:
    """At a round boundary of an MPI job: once any rank has recorded a stop signal, every rank raises
    SystemExit (128 + signal) here together, the frames already counted kept for --resume."""
    from mpi4py import MPI

    signum = comm.allreduce(stop_requested(), op=MPI.MAX)
    if signum:
        raise SystemExit(128 + signum)


def on_root(comm, fn, what: str = "prepare the output", then_share: bool = False):
    """Run ``fn`` on rank 0 of ``comm``; return its result on every rank, or raise its error on every
    rank: the run's protocol (:func:`trajscale.sharing.share`), Ctrl-C rules included (``then_share``: the
    ranks' next collective is another ``on_root``)."""
    return share_on_comm(comm, fn, what, then_share)
