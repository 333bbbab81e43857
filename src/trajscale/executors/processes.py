"""Run tasks on a local pool of worker processes, started while the job is prepared.

Start method (:func:`trajscale.pools.choose_start_method`): ``fork`` where safe, so workers start in milliseconds
with trajscale imported and never re-import the user's ``__main__``; else ``forkserver`` (``spawn`` where there is
none), with the main module hidden and the reader's modules imported once by the forkserver."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import time
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from ..block import FrameRange
from ..errors import TaskError
from ..pools import as_completed_polling, check_start_method, choose_start_method, process_pool
from ..progress import progress_bar
from ..report.timing import host_and_pid
from ..util import process_folder
from . import late_start_method
from .base import Executor, Homecoming, Job, TaskResults, io_of, sendable
from .claims import HandOut, hand_out
from .homeward import received, results_folder
from .jobfile import ship, shipped_tasks, ships, unship
from .startup import init_worker, task_imports, warm_up, worker_tasks

log = logging.getLogger(__name__)

#: Modules a forkserver imports once: the worker's own lean module only, so the forkserver is up at once (each
#: worker loads what its tasks need in its warm-up).  ``_forkserver`` first: it blocks SIGINT there.
FORKSERVER_PRELOAD = ["trajscale.executors._forkserver", "trajscale.executors.startup"]


class ProcessExecutor(Executor):
    """A ``concurrent.futures`` process pool.

    Parameters
    ----------
    n_workers
        Worker processes (default: the CPU count).
    start_method
        ``"fork"``, ``"forkserver"`` or ``"spawn"``; default: fork where it is safe, decided when the pool starts.
    """

    polls_for_stop = True   # checks for a recorded Ctrl-C between tasks

    def __init__(self, n_workers: int | None = None, start_method: str | None = None) -> None:
        super().__init__(n_workers or os.cpu_count() or 1)
        self._requested = start_method
        if start_method is not None:
            check_start_method(start_method)   # an unknown method now; a fork where unsafe when the pool starts
        self.start_method: str | None = None   # the one used, once the pool has started
        self._pool = None   # a concurrent.futures ProcessPoolExecutor, once started
        self._marks: str | None = None
        self._home: str | None = None   # where workers spill large results (homeward.py; None: the pipe)
        self._late: dict[str, dict] = {}
        self._modules: tuple[str, ...] = ()   # what tasks will import beyond trajscale's own (start())
        self._warm: list = []
        self.t_asked: float | None = None   # when the pool was asked for (epoch seconds)

    def start(self, modules: tuple[str, ...] = (), late: bool = False) -> None:
        """Start the workers now, to warm up while the job is prepared; ``late``: never forked from this process."""
        self._modules = tuple(modules)
        self._get_pool(late)

    def _get_pool(self, late: bool = False):
        """The pool, started now if it was not (``late``: never by fork; else fork only where safe)."""
        if self._pool is None:
            method = late_start_method(self._requested) if late else choose_start_method(self._requested)
            if method == "fork":
                task_imports(self._modules)   # forked workers inherit what every task imports
            self._marks = process_folder()
            self._home = results_folder()
            self.t_asked = time.time()
            # A forkserver that has imported the worker module and the kernels forks workers in milliseconds.
            with process_pool(self.n_workers, start_method=method, initializer=init_worker, initargs=(self._marks,),
                              preload=(*FORKSERVER_PRELOAD, *self._modules)) as (pool, self.start_method):
                self._pool = pool
                # One warm-up task per worker starts them all now (fork: at the first submit).
                self._warm = [pool.submit(warm_up, self.start_method == "fork") for _ in range(self.n_workers)]
            log.debug("started %d worker processes (%s)", self.n_workers, self.start_method)
        return self._pool

    def worker_starts(self) -> list[dict]:
        """How each worker started (:func:`~.startup.note_ready`'s records), once all have."""
        from .startup import read_starts

        for f in self._warm:
            f.result()
        return read_starts(self._marks or "", self.n_workers)

    def map_tasks(self, job: Job, ranges: list[FrameRange], progress: bool = False) -> TaskResults:
        # What pickle cannot take is refused here, once, not by each task's future.
        blob = sendable(job) if ranges else b""
        pool = self._get_pool()
        shipped, futures, handed = None, {}, HandOut([])
        try:
            # A large job is written once and each worker loads it once (jobfile.py); a small one travels with each
            # hand-out, of one task or of the claims a worker takes its tasks from (claims.hand_out).
            handed = hand_out(job, ranges, self.n_workers, self._marks or "")
            if ships(len(blob), len(handed.runs)):
                shipped = ship(blob, self._home or self._marks or "")   # (in memory where it may)
                futures = {pool.submit(shipped_tasks, shipped, run, handed.after, self._home): run
                           for run in handed.runs}
            else:
                futures = {pool.submit(worker_tasks, job, run, handed.after, self._home): run for run in handed.runs}
            del blob
            # The pool starts its processes on submit; keep them to read exit codes if one dies.
            procs = dict(getattr(pool, "_processes", None) or {})
            home = Homecoming(job, len(ranges))
            with progress_bar(len(ranges), progress) as bar:
                for fut in as_completed_polling(futures, every=lambda: bar.show(handed.progress(home))):
                    futures.pop(fut)   # a future holds its results: let go of them once folded in
                    try:
                        for i, result in received(fut.result()):   # (a large one read from shared memory)
                            home.add(i, result)
                    except BrokenProcessPool:
                        self._pool.shutdown(wait=True)   # joins the workers: exit codes are final
                        raise self._lost(ranges, home, procs) from None
                    bar.show(handed.progress(home))
        except BaseException:
            # (the pool's thread cancels unstarted tasks in close: one cancelled here as its worker dies makes it raise)
            handed.stop()
            self.close(wait=False)
            raise
        finally:
            unship(shipped)
            handed.remove()
        # Every worker's start-up, also of one that ran no task: one still starting is named with its time so far
        # (``t_ready`` 0; :attr:`late_starts` has its whole start-up once the pool is closed).
        starts = self._starts(list(getattr(self._pool, "_processes", None) or {}))
        return home.results(starts, io_of(self.source_options))

    @property
    def late_starts(self) -> dict[str, dict]:
        """After :meth:`close`: the start-ups of workers that were not ready when the tasks were done."""
        return dict(self._late)

    def _starts(self, pids: list[int]) -> dict[str, dict]:
        from ..timeline import cpu_facts, pid_start

        out: dict[str, dict] = {}
        host = host_and_pid()[0]
        for pid in pids:
            try:
                with open(os.path.join(self._marks or "", f"ready-{pid}")) as fh:
                    t_start, t_ready = (float(x) for x in fh.read().split())
            except (OSError, ValueError):
                start = pid_start(pid)
                if start is None:
                    continue
                t_start, t_ready = max(0.0, time.time() - start), 0.0
            cpus, affinity = cpu_facts(pid)
            out[f"pid {pid}"] = {"host": host, "pid": pid, "t_start": t_start, "t_ready": t_ready,
                                 "cpus": cpus, "affinity": affinity}
        return out

    def _lost(self, ranges: list[FrameRange], home: Homecoming, procs: dict) -> TaskError:
        """A TaskError naming the frames the dead worker was running (or saying they are unknown)."""
        marks = Path(self._marks or "")
        running: dict[int, int] = {}   # pid -> task still without a result
        for pid in procs:
            try:
                task = int((marks / str(pid)).read_text())
            except (OSError, ValueError):
                continue
            if 0 <= task < len(ranges) and not home.arrived(task):
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
        """Shut the pool down; ``wait=False`` also stops running workers within :data:`STOP_GRACE_S`, then SIGKILL."""
        if self._pool is not None:
            pool, self._pool = self._pool, None
            procs = dict(getattr(pool, "_processes", None) or {})   # (shutdown lets go of them)
            pool.shutdown(wait=wait, cancel_futures=True)
            if not wait:
                _stop(procs, STOP_GRACE_S)
            pids = list(procs)
            if wait:   # every worker has started (and stopped): a late one's whole start-up is known now
                self._late = {k: v for k, v in self._starts(pids).items() if v["t_ready"] > 0}
        if self._marks is not None:
            shutil.rmtree(self._marks, ignore_errors=True)
            self._marks = None
        if self._home is not None:   # (results never read: a run stopped)
            shutil.rmtree(self._home, ignore_errors=True)
            self._home = None


#: Seconds a stopped worker has to end after SIGTERM before it is killed.
STOP_GRACE_S = 1.0


def _stop(procs: dict, grace: float) -> None:
    """SIGTERM the pool's workers, wait up to ``grace`` seconds, then SIGKILL those still alive (stuck in a
    native call with the signal blocked).  Waits on sentinels, which reaps nothing: the pool's thread reaps."""
    from multiprocessing.connection import wait

    waiting = {}
    for pid, proc in procs.items():
        with contextlib.suppress(OSError, ValueError):   # ended already, or its handle closed
            os.kill(pid, signal.SIGTERM)
            waiting[proc.sentinel] = pid
    deadline = time.monotonic() + grace
    while waiting and time.monotonic() < deadline:
        for ended in wait(list(waiting), timeout=max(0.0, deadline - time.monotonic())):
            waiting.pop(ended, None)
    for pid in waiting.values():
        with contextlib.suppress(OSError):   # ended meanwhile
            os.kill(pid, signal.SIGKILL)
