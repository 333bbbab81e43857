"""Run tasks on a local pool of worker processes (spawn/forkserver: no HDF5 handle crosses a fork)."""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import signal
import tempfile
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from ..block import FrameRange
from ..errors import TaskError
from ..report.timing import TaskTiming
from .base import Executor, Job, progress_bar, run_task

# Folder where each worker notes the task it is running (one small file per
# pid), so that a pool broken by a dying worker can say which frames were lost.
_MARKS: list[str] = []


def _init_worker(marks: str) -> None:
    _MARKS[:] = [marks]


def _worker_task(job: Job, task: int, frames: FrameRange):
    if _MARKS:
        with open(os.path.join(_MARKS[0], str(os.getpid())), "w") as fh:
            fh.write(str(task))
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
        self._marks: str | None = None

    def _get_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            ctx = mp.get_context(self.start_method)
            if self.start_method == "forkserver":
                # Workers fork from a server that has already imported trajscale
                # and loaded the compiled kernels: a worker starts in milliseconds.
                ctx.set_forkserver_preload(["trajscale.executors.base", "trajscale.kernels._numba_superpose"])
            self._marks = tempfile.mkdtemp(prefix="trajscale-tasks-")
            self._pool = ProcessPoolExecutor(max_workers=self.n_workers, mp_context=ctx,
                                             initializer=_init_worker, initargs=(self._marks,))
        return self._pool

    def map_tasks(self, job: Job, ranges: list[FrameRange], progress: bool = False) -> list[tuple[dict, TaskTiming]]:
        pool = self._get_pool()
        futures = {pool.submit(_worker_task, job, i, r): i for i, r in enumerate(ranges)}
        # The pool starts its processes on submit; keep them to read exit codes if one dies.
        procs = dict(getattr(pool, "_processes", None) or {})
        out: list = [None] * len(ranges)
        try:
            with progress_bar(len(ranges), progress) as bar:
                for fut in as_completed(futures):
                    i = futures[fut]
                    try:
                        out[i] = fut.result()
                    except BrokenProcessPool:
                        self._pool.shutdown(wait=True)   # joins the workers: exit codes are final
                        raise self._lost(ranges, out, procs) from None
                    bar.update(1)
        except BaseException:
            for fut in futures:
                fut.cancel()
            self.close(wait=False)
            raise
        return out

    def _lost(self, ranges: list[FrameRange], out: list, procs: dict) -> TaskError:
        """A TaskError naming the frames the dead worker was running (or saying they are unknown)."""
        marks = Path(self._marks or "")
        running: dict[int, int] = {}   # pid -> task still without a result
        for pid in procs:
            try:
                task = int((marks / str(pid)).read_text())
            except (OSError, ValueError):
                continue
            if 0 <= task < len(ranges) and out[task] is None:
                running[pid] = task
        # Workers the pool itself stopped after the break exit by SIGTERM; the one that died did not.
        dead = {pid: p.exitcode for pid, p in procs.items()
                if p.exitcode is not None and p.exitcode != -signal.SIGTERM}
        lost = [running[pid] for pid in dead if pid in running] or sorted(running.values())
        codes = ", ".join(f"pid {pid} exit code {code}" for pid, code in dead.items())
        how = f"worker process died ({codes})" if codes else "worker process died"
        if len(lost) == 1:
            r = ranges[lost[0]]
            return TaskError(f"a worker process (task {lost[0]})", r.start, r.stop, how)
        if lost:
            spans = " or ".join(f"[{ranges[t].start}, {ranges[t].stop})" for t in lost)
            return TaskError("a worker process", min(ranges[t].start for t in lost),
                             max(ranges[t].stop for t in lost),
                             f"{how} while running frames {spans}; which of them is unknown")
        lo, hi = (ranges[0].start, ranges[-1].stop) if ranges else (0, 0)
        return TaskError("a worker process", lo, hi, f"{how}; the frames it was running are unknown")

    def close(self, wait: bool = True) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=wait, cancel_futures=True)
            self._pool = None
        if self._marks is not None:
            shutil.rmtree(self._marks, ignore_errors=True)
            self._marks = None
