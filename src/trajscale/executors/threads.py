"""Run tasks on threads of this process (``concurrent.futures.ThreadPoolExecutor``).

The compiled kernels release the GIL, so compute runs side by side; h5py holds one lock around every
HDF5 call, so the reads take turns.  No worker to start and nothing pickled.  Each thread opens its own
Source (a Source's read buffer serves one task at a time), so memory is the threads times one block."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor, wait

from ..block import FrameRange
from ..pools import as_completed_polling
from ..progress import progress_bar
from ..timeline import mark_ready
from .base import Executor, Homecoming, Job, TaskResults, close_cached_sources, io_of, run_in_turn
from .claims import hand_out

#: Prefix of the pool's thread names; a thread's name is its worker's name in the report.
THREAD_PREFIX = "thread"


def _thread_tasks(job: Job, tasks, after=None):
    return list(run_in_turn(job, tasks, threading.current_thread().name, after=after))


class ThreadExecutor(Executor):
    """A ``concurrent.futures`` thread pool in this process.

    Parameters
    ----------
    n_workers
        Threads (default: the CPU count).
    """

    polls_for_stop = True   # checks for a recorded Ctrl-C between tasks

    def __init__(self, n_workers: int | None = None) -> None:
        super().__init__(n_workers or os.cpu_count() or 1)
        self._pool: ThreadPoolExecutor | None = None
        mark_ready()   # this process is the workers' process: its start-up ends here (the report's t_start)

    def start(self, modules: tuple[str, ...] = (), late: bool = False) -> None:
        """Start the threads' pool now (its threads start with the first tasks, in microseconds)."""
        self._get_pool()

    def _get_pool(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.n_workers, thread_name_prefix=THREAD_PREFIX)
        return self._pool

    def map_tasks(self, job: Job, ranges: list[FrameRange], progress: bool = False) -> TaskResults:
        pool = self._get_pool()
        # one task at a time, or claims the threads take their tasks from where they fetch ahead (hand_out)
        handed = hand_out(job, ranges, self.n_workers)
        futures = {pool.submit(_thread_tasks, job, run, handed.after): run for run in handed.runs}
        home = Homecoming(job, len(ranges))
        try:
            with progress_bar(len(ranges), progress) as bar:
                for fut in as_completed_polling(futures, every=lambda: bar.show(handed.progress(home))):
                    futures.pop(fut)   # (a future holds its results: let go of them)
                    for i, result in fut.result():
                        home.add(i, result)
                    bar.show(handed.progress(home))
        except BaseException:
            for fut in futures:
                fut.cancel()
            handed.stop()
            wait(futures)   # a thread cannot be stopped: its task ends before its source may be closed
            raise
        finally:
            handed.remove()
        return home.results(io=io_of(self.source_options))

    def close(self, wait: bool = True) -> None:
        """Stop the threads (running tasks end first: a thread cannot be stopped midway) and close their sources."""
        if self._pool is not None:
            pool, self._pool = self._pool, None
            pool.shutdown(wait=True, cancel_futures=True)
        close_cached_sources()
