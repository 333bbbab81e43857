"""Run a conversion's segment tasks on local processes or a Dask LocalCluster, stoppably.

The tasks are module-level functions with plain arguments; each writes its own
segment file and progress record, so nothing comes back but a count.  On a
SIGTERM/Ctrl-C the CLI records, the workers are told to stop (processes: a
SIGTERM each, which they record and act on between slabs, so every segment
is left closed and counted; Dask: the cluster is closed) and SystemExit
propagates: the segments stay for ``--resume``.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

from ..errors import ConfigError, ParallelUnavailableError
from ..util import main_not_reimported, raise_if_stopped, request_stop

log = logging.getLogger(__name__)

EXECUTORS = ("serial", "processes", "dask", "mpi")


def _init_worker() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)    # the parent handles Ctrl-C and stops us
    signal.signal(signal.SIGTERM, lambda signum, frame: request_stop(signum))


def _start_method() -> str:
    methods = mp.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1 and sys.platform != "darwin" \
            and "mpi4py.MPI" not in sys.modules:
        return "fork"
    return "forkserver" if "forkserver" in methods else "spawn"


def run_tasks(fn, tasks: list[tuple], executor: str, n_workers: int, on_done=None) -> None:
    """Run ``fn(*args)`` for each ``args`` of ``tasks`` on ``executor`` with ``n_workers``.

    ``on_done(i, result)`` is called in the caller's process as task ``i`` completes.
    """
    if executor == "processes":
        _run_processes(fn, tasks, n_workers, on_done)
    elif executor == "dask":
        _run_dask(fn, tasks, n_workers, on_done)
    elif executor == "serial":
        for i, args in enumerate(tasks):
            r = fn(*args)
            if on_done:
                on_done(i, r)
    else:
        raise ConfigError(f"--executor must be one of {', '.join(EXECUTORS)}, got {executor!r}")


def _run_processes(fn, tasks, n_workers, on_done) -> None:
    ctx = mp.get_context(_start_method())
    with main_not_reimported():
        pool = ProcessPoolExecutor(max_workers=max(1, n_workers), mp_context=ctx, initializer=_init_worker)
        futures = {pool.submit(fn, *args): i for i, args in enumerate(tasks)}
    pending = set(futures)
    try:
        while pending:
            done, pending = wait(pending, timeout=0.1, return_when=FIRST_COMPLETED)
            raise_if_stopped()
            for fut in done:
                r = fut.result()   # a worker's error (user errors keep their type) stops the run
                if on_done:
                    on_done(futures[fut], r)
    except BaseException:
        for fut in pending:
            fut.cancel()
        for proc in list(getattr(pool, "_processes", {}).values()):   # stop between slabs, files closed
            try:
                os.kill(proc.pid, signal.SIGTERM)
            except (ProcessLookupError, AttributeError):
                pass
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def _run_dask(fn, tasks, n_workers, on_done) -> None:
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise ParallelUnavailableError("the Dask executor needs dask.distributed (pip install "
                                       "'trajscale[dask]')") from None
    with LocalCluster(n_workers=max(1, n_workers), threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        futures = [client.submit(fn, *args, pure=False) for args in tasks]
        index = {f.key: i for i, f in enumerate(futures)}
        pending = set(futures)
        while pending:
            time.sleep(0.05)
            raise_if_stopped()
            for fut in [f for f in pending if f.done()]:
                pending.discard(fut)
                r = fut.result()
                if on_done:
                    on_done(index[fut.key], r)
