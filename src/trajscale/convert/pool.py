"""Run a conversion's segment tasks on local processes or a Dask LocalCluster, stoppably.

The tasks are module-level functions with plain arguments; each writes its own
segment file and progress record, so nothing comes back but a count.  On a
SIGTERM/Ctrl-C the CLI records, the workers are told to stop (processes: a
SIGTERM each; Dask: the stop recorded in every worker process), which they act
on between slabs, so every segment is left closed and counted; SystemExit
then propagates: the segments stay for ``--resume``.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import signal
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from ..errors import ConfigError, ParallelUnavailableError, TrajscaleError
from ..executor_registry import executor_traits, load, names
from ..pools import (
    as_completed_polling,
    choose_start_method,
    main_not_reimported,
    parent_alive,
    quiet_worker,
    sigint_blocked,
    stop_workers,
)
from ..progress import progress_bar
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


def run_tasks(fn, tasks: list[tuple], executor: str, n_workers: int, on_done=None, comm=None) -> None:
    """Run ``fn(*args)`` for each ``args`` of ``tasks`` on ``executor`` with ``n_workers``.

    ``on_done(i, result)`` is called in the caller's process as task ``i`` completes.  The executor's
    registry entry names the function that runs them (its ``convert_runner``); under an MPI launcher
    every rank of ``comm`` calls this with the same ``tasks`` and runs every ``size``-th of them, from
    its rank on.
    """
    runner = check_executor(executor).convert_runner
    load(runner)(fn, tasks, n_workers, on_done, comm)


def check_executor(executor: str):
    """The traits of ``executor`` if it runs convert's tasks; else one error listing those that do."""
    traits = executor_traits(executor)
    if traits.convert_runner is None:
        raise ConfigError(f"--executor must be one of {', '.join(names(converts=True))}, got {executor!r}")
    return traits


def run_serial(fn, tasks, n_workers, on_done, comm=None) -> None:
    """Every task in this process, in order."""
    for i, args in enumerate(tasks):
        r = fn(*args)
        if on_done:
            on_done(i, r)


def run_processes(fn, tasks, n_workers, on_done, comm=None) -> None:
    """The tasks on a local pool of ``n_workers`` processes, stopped by SIGTERM on an error or Ctrl-C."""
    ctx = mp.get_context(choose_start_method())
    with sigint_blocked(), main_not_reimported():
        pool = ProcessPoolExecutor(max_workers=max(1, n_workers), mp_context=ctx, initializer=_init_worker)
        futures = {pool.submit(fn, *args): i for i, args in enumerate(tasks)}
    try:
        for fut in as_completed_polling(futures):
            r = fut.result()   # a worker's error (user errors keep their type) stops the run
            if on_done:
                on_done(futures[fut], r)
    except BaseException:
        for fut in futures:
            fut.cancel()
        stop_workers(pool, signal.SIGTERM)   # each stops between slabs, its files closed and counted
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def run_dask(fn, tasks, n_workers, on_done, comm=None) -> None:
    """The tasks on a Dask LocalCluster of ``n_workers`` workers, stopped between slabs on a Ctrl-C."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise ParallelUnavailableError("the Dask executor needs dask.distributed (pip install "
                                       "'trajscale[dask]')") from None
    with LocalCluster(n_workers=max(1, n_workers), threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        futures = [client.submit(_dask_task, fn, *args, pure=False) for args in tasks]
        index = {f.key: i for i, f in enumerate(futures)}
        pending = set(futures)
        try:
            while pending:
                time.sleep(0.05)
                raise_if_stopped()
                for fut in [f for f in pending if f.done()]:
                    pending.discard(fut)
                    r = fut.result()
                    if isinstance(r, _Stopped):   # a worker stopped by a signal of its own
                        raise SystemExit(r.code)
                    if on_done:
                        on_done(index[fut.key], r)
        except BaseException:
            _stop_dask_tasks(client, pending)
            raise


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
    """Stop the tasks still running on the Dask workers between slabs, as a SIGTERM stops a process
    worker, and wait for them: closing the cluster would otherwise let them write on to the end (or
    kill them mid-slab), and the segments would not be what their records count."""
    from distributed import wait as dask_wait

    try:
        client.run(request_stop, int(signal.SIGTERM))   # each worker's tasks raise at their next check
        dask_wait(list(pending), timeout=timeout)
    except Exception as exc:   # noqa: BLE001 - a worker already gone: its segment's record still counts what it holds
        log.debug("stopping the Dask tasks: %s", exc)


def run_mpi(fn, tasks, n_workers, on_done, comm=None) -> None:
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
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(0.02)
        raise_if_stopped()
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


def on_root(comm, fn):
    """Run ``fn`` on rank 0 of ``comm``; return its result on every rank, or raise its error on every
    rank (printed once: the other ranks' copies are marked reported elsewhere)."""
    got, err = None, None
    if comm.Get_rank() == 0:
        try:
            got = fn()
        except TrajscaleError as exc:
            err = exc
        except BaseException as exc:   # a bug or an interrupt: every rank stops, rank 0 with the traceback
            comm.bcast((None, ParallelUnavailableError(f"rank 0 failed: {exc!r}")), root=0)
            raise
    got, err = comm.bcast((got, err), root=0)
    if err is not None:
        if comm.Get_rank() != 0:
            err.reported_elsewhere = True
        raise err
    return got

