"""What a worker process of the analysis executors runs: its initializer, its tasks, its warm-up.

A ``spawn`` or ``forkserver`` worker imports this module before its first task, so it imports
nothing heavy: what a task needs is imported by that task.  The mechanics (start method, fork safety,
SIGINT while workers start) live in :mod:`trajscale.pools`."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import time

from ..pools import quiet_worker

log = logging.getLogger(__name__)

#: Libraries a worker should not hold before a task asks for them (recorded by :func:`warm_up`).
HEAVY_MODULES = ("numpy", "h5py", "MDAnalysis", "scipy", "numba", "dask", "distributed", "torch", "matplotlib",
                 "mpi4py", "tqdm")

# Where each worker notes the task it runs, so a pool broken by a dying worker can say which frames were lost.
_MARKS: list[str] = []


def init_worker(marks: str) -> None:
    """Pool initializer: Ctrl-C is the parent's; tasks noted in ``marks``; the start noted (:func:`note_ready`)."""
    cpu = time.process_time()   # what the interpreter and the imports so far cost, before anything of ours
    heavy = sorted(m for m in HEAVY_MODULES if m in sys.modules)
    from ..timeline import slow_start_for_tests

    quiet_worker()
    # SIGTERM ends a worker at once (not the command line's handler, which records it for loops that poll)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _MARKS[:] = [marks]
    slow_start_for_tests()   # TRAJSCALE_TEST_SLOW_START: a slow-starting worker, for the report's tests
    note_ready(cpu, heavy)


def note_ready(cpu_before_task: float, heavy_modules: list[str]) -> None:
    """Once per worker: ``ready-PID`` and ``start-PID.json`` in the marks folder, unless the pool is closing."""
    import json

    from ..timeline import mark_ready, process_start

    if not _MARKS or os.path.exists(os.path.join(_MARKS[0], f"ready-{os.getpid()}")):
        return
    t_start = mark_ready()
    t_ready = process_start() + t_start
    record = {"pid": os.getpid(), "t_process_start": process_start(), "t_task_start": t_ready,
              "t_ready": t_ready, "cpu_before_task": cpu_before_task, "heavy_modules": heavy_modules}
    with contextlib.suppress(OSError):   # each record whole or absent: a reader polling the folder meets no half
        _write_whole(os.path.join(_MARKS[0], f"start-{os.getpid()}.json"), json.dumps(record))
        _write_whole(os.path.join(_MARKS[0], f"ready-{os.getpid()}"), f"{t_start!r} {t_ready!r}")


def _write_whole(path: str, text: str) -> None:
    """Write ``text`` to ``path`` under a name no reader looks for, then rename it into place."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def read_starts(marks: str, n: int, timeout: float = 60.0) -> list[dict]:
    """The start records of ``n`` workers (:func:`note_ready`), waiting up to ``timeout`` s for them."""
    import glob
    import json

    deadline = time.monotonic() + timeout
    while True:
        paths = sorted(glob.glob(os.path.join(marks, "start-*.json")))
        if len(paths) >= n or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    out = []
    for path in paths:
        with contextlib.suppress(OSError, ValueError), open(path) as fh:   # removed with its pool, or not ours
            out.append(json.load(fh))
    return out


def worker_tasks(job, tasks, after=None, spill_to: str | None = None):
    """A pool worker's tasks in turn (:func:`~trajscale.executors.base.run_in_turn`), each noted first; their
    results spilled into a file in the folder ``spill_to`` when large (:mod:`.homeward`; None: never)."""
    from .base import run_in_turn
    from .homeward import spill

    return spill(list(run_in_turn(job, tasks, f"pid {os.getpid()}", before=note_task, after=after)), spill_to)


def note_task(task: int) -> None:
    """Note in the marks folder the task this worker runs now (a pool broken by its death names its frames)."""
    if _MARKS:
        with open(os.path.join(_MARKS[0], str(os.getpid())), "w") as fh:
            fh.write(str(task))


def task_imports(modules: tuple[str, ...] = ()) -> None:
    """Import what every task imports and ``modules`` (the job's format's reader), and nothing of another format.
    Called in the parent before it forks: forked workers inherit them instead of each importing them again."""
    import importlib

    from . import base  # noqa: F401

    for name in modules:
        # (an optional one, e.g. the remote extra's client, may be missing: the task says what is missing)
        with contextlib.suppress(ImportError):
            importlib.import_module(name)


def warm_up(forked: bool = False) -> int:
    """A new worker's first task: the compiled kernels loaded now, not in a timed task (forked: its parent's)."""
    if not forked:
        from ..kernels import superpose  # noqa: F401
    return os.getpid()
