"""What a worker process of the analysis executors runs: its initializer, its tasks, its warm-up.

This module is what a ``spawn`` or ``forkserver`` worker imports before its
first task (the pool unpickles these functions by reference), so it imports
nothing heavy: a new worker takes its first task within a few hundredths of a
second of being asked, and what a task needs (NumPy, h5py, the kernels, the
analysis) is imported by that task.  The mechanics (start method, fork safety,
SIGINT while workers start) live in :mod:`trajscale.pools`, shared with the
conversion pool.
"""

from __future__ import annotations

import logging
import os
import sys
import time

from ..pools import fork_is_safe, main_not_reimported, quiet_worker, sigint_blocked  # noqa: F401 (re-exported)

log = logging.getLogger(__name__)

#: Libraries a worker should not hold before a task asks for them (recorded by :func:`warm_up`).
HEAVY_MODULES = ("numpy", "h5py", "MDAnalysis", "scipy", "numba", "dask", "distributed", "torch", "matplotlib",
                 "mpi4py", "tqdm")

# Folder where each worker notes the task it is running (one small file per
# pid), so that a pool broken by a dying worker can say which frames were lost.
_MARKS: list[str] = []


def init_worker(marks: str) -> None:
    """Pool initializer: Ctrl-C is the parent's to handle (it stops the pool); note tasks in ``marks``;
    note the worker ready (its ``t_start`` for the report) here, in every worker, before its first task
    (a warm-up task may go to another worker)."""
    from ..report.process import slow_start_for_tests

    quiet_worker()
    _MARKS[:] = [marks]
    slow_start_for_tests()   # TRAJSCALE_TEST_SLOW_START: a slow-starting worker, for the report's tests
    note_ready()


def note_ready() -> None:
    """Once per worker: its start-up (process start to ready) in the marks folder, for the report."""
    from ..report.process import mark_ready, process_start

    path = os.path.join(_MARKS[0], f"ready-{os.getpid()}") if _MARKS else None
    if path is not None and not os.path.exists(path):
        t_start = mark_ready()
        with open(path, "w") as fh:
            fh.write(f"{t_start!r} {process_start() + t_start!r}")


def worker_task(job, task: int, frames):
    """One task of a pool worker: :func:`~trajscale.executors.base.run_task`, noted first in the marks folder."""
    from .base import run_task

    if _MARKS:
        with open(os.path.join(_MARKS[0], str(os.getpid())), "w") as fh:
            fh.write(str(task))
    return run_task(job, task, frames, f"pid {os.getpid()}")


def warm_up() -> dict:
    """First task of a new worker: load the compiled kernels now, not inside a timed task.

    Returns how the worker started: ``pid``; ``t_process_start`` (epoch seconds,
    from the OS), ``t_task_start`` (when it took this first task) and
    ``t_ready`` (kernels loaded); ``cpu_before_task``: CPU seconds this process
    used before taking it (its interpreter's start included under spawn, unlike
    wall times not stretched by a crowded machine); ``heavy_modules``: the libraries of
    :data:`HEAVY_MODULES` it held when it took the task (a forked worker holds
    its parent's).
    """
    t_task, cpu = time.time(), time.process_time()
    heavy = sorted(m for m in HEAVY_MODULES if m in sys.modules)
    from ..kernels.superpose import preload_kernels
    from ..report.process import process_start

    preload_kernels()
    return {"pid": os.getpid(), "t_process_start": process_start(), "t_task_start": t_task,
            "t_ready": time.time(), "cpu_before_task": cpu, "heavy_modules": heavy}
