"""A test-only executor: what adding one takes (its module, one registry entry, a conformance subclass).

:class:`ToyExecutor` runs an analysis's tasks in this process, last first; :func:`run_toy` runs plain
tasks (convert's segment writers, pack's readers) last first too.  Each notes its ``label`` option in
:data:`CALLS`, so a test sees that the command line's ``--toy-label`` reached it.
"""

from __future__ import annotations

from trajscale.executor_registry import ExecutorOption, ExecutorTraits
from trajscale.executors.base import Executor, TaskResults, close_cached_sources, io_of, run_task

#: What ran, in order: ("run" | "tasks", label).
CALLS: list[tuple[str, str]] = []

TRAITS = ExecutorTraits("toy", "tests.executors.toy_executor:ToyExecutor", "every task in this process, last first",
                        workers="n_workers", convert_runner="tests.executors.toy_executor:run_toy",
                        options=(ExecutorOption("label", "--toy-label", "a word the toy executor notes"),))


class ToyExecutor(Executor):
    """Every task in this process, the last one first (results still come home in task order)."""

    traits, name = TRAITS, TRAITS.name
    polls_for_stop = True
    adopts_sources = True
    root_worker = "toy"

    def __init__(self, n_workers: int = 1, label: str = "none") -> None:
        super().__init__(n_workers)
        self.label = label

    def map_tasks(self, job, ranges, progress: bool = False) -> TaskResults:
        from trajscale.util import raise_if_stopped

        CALLS.append(("run", self.label))
        out: list = [None] * len(ranges)
        for i in reversed(range(len(ranges))):
            raise_if_stopped()
            out[i] = run_task(job, i, ranges[i], self.root_worker)
        return TaskResults.of(out, io=io_of(self.source_options))

    def close(self, wait: bool = True) -> None:
        close_cached_sources()


def run_toy(fn, tasks, n_workers, on_done, comm=None, options=None, window=None) -> None:
    """Plain tasks in this process, the last one first."""
    CALLS.append(("tasks", (options or {}).get("label", "none")))
    for i in reversed(range(len(tasks))):
        r = fn(*tasks[i])
        if on_done:
            on_done(i, r)
