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
    """Pool initializer: Ctrl-C is the parent's to handle (it stops the pool); note tasks in ``marks``."""
    quiet_worker()
    _MARKS[:] = [marks]


def worker_task(job, task: int, frames):
    """One task of a pool worker: :func:`~trajscale.executors.base.run_task`, noted first in the marks folder."""
    from .base import run_task

    if _MARKS:
        with open(os.path.join(_MARKS[0], str(os.getpid())), "w") as fh:
            fh.write(str(task))
    return run_task(job, task, frames, f"pid {os.getpid()}")


def process_start_time() -> float | None:
    """When this process started, as the OS counts it (epoch seconds, 10 ms steps), or None off Linux."""
    try:
        with open("/proc/self/stat", "rb") as fh:
            ticks = int(fh.read().rsplit(b")", 1)[1].split()[19])   # field 22: starttime, after "comm)"
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
        return time.time() - age
    except (OSError, ValueError, IndexError, AttributeError):
        return None


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

    preload_kernels()
    return {"pid": os.getpid(), "t_process_start": process_start_time(), "t_task_start": t_task,
            "t_ready": time.time(), "cpu_before_task": cpu, "heavy_modules": heavy}
