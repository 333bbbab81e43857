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
import signal
import time
from concurrent.futures import ProcessPoolExecutor

from ..errors import ConfigError, ParallelUnavailableError
from ..pools import (
    as_completed_polling,
    choose_start_method,
    main_not_reimported,
    quiet_worker,
    sigint_blocked,
    stop_workers,
)
from ..util import raise_if_stopped, request_stop

log = logging.getLogger(__name__)

EXECUTORS = ("serial", "processes", "dask", "mpi")


def _init_worker() -> None:
    quiet_worker()   # the parent handles Ctrl-C and stops us
    signal.signal(signal.SIGTERM, lambda signum, frame: request_stop(signum))   # acted on between slabs


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
