"""Run tasks on a local pool of worker processes (spawn/forkserver: no HDF5 handle crosses a fork)."""

from __future__ import annotations

import multiprocessing as mp
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool

from ..block import FrameRange
from ..errors import TaskError
from ..report.timing import TaskTiming
from .base import Executor, Job, progress_bar, run_task


def _worker_task(job: Job, task: int, frames: FrameRange):
    return run_task(job, task, frames, f"pid {os.getpid()}")


class ProcessExecutor(Executor):
    """A ``concurrent.futures`` process pool.

    Workers start with ``forkserver`` (or ``spawn`` where unavailable) so that
    no open HDF5 handle is inherited; each worker opens the file on its first
    task and keeps it for the next.
    """

    name = "processes"

    def __init__(self, n_workers: int | None = None, start_method: str | None = None) -> None:
        super().__init__(n_workers or os.cpu_count() or 1)
        methods = mp.get_all_start_methods()
        self.start_method = start_method or ("forkserver" if "forkserver" in methods else "spawn")
        self._pool: ProcessPoolExecutor | None = None

    def _get_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            ctx = mp.get_context(self.start_method)
            if self.start_method == "forkserver":
                # Workers fork from a server that has already imported trajscale
                # and loaded the compiled kernels: a worker starts in milliseconds.
                ctx.set_forkserver_preload(["trajscale.executors.base", "trajscale.kernels._numba_superpose"])
            self._pool = ProcessPoolExecutor(max_workers=self.n_workers, mp_context=ctx)
        return self._pool

    def map_tasks(self, job: Job, ranges: list[FrameRange], progress: bool = False) -> list[tuple[dict, TaskTiming]]:
        pool = self._get_pool()
        futures = {pool.submit(_worker_task, job, i, r): i for i, r in enumerate(ranges)}
        out: list = [None] * len(ranges)
        try:
            with progress_bar(len(ranges), progress) as bar:
                for fut in as_completed(futures):
                    i = futures[fut]
                    try:
                        out[i] = fut.result()
                    except BrokenProcessPool as exc:
                        r = ranges[i]
                        raise TaskError("a worker process", r.start, r.stop,
                                        f"worker process died ({exc})") from None
                    bar.update(1)
        except BaseException:
            for fut in futures:
                fut.cancel()
            self.close(wait=False)
            raise
        return out

    def close(self, wait: bool = True) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=wait, cancel_futures=True)
            self._pool = None
